// SPDX-License-Identifier: MIT
/*
 * The producer write path and the registry of writing threads.
 *
 * A write: one relaxed load of the event's session mask (the disabled case
 * ends there); then, per enabled session, the thread's sequence number for
 * that session advances (every attempt, captured or not), a record is
 * reserved in the ring of the current CPU with one CAS, filled and committed
 * with a release store. No lock, no syscall. The drainer is woken only when
 * it declared itself idle and the ring holds more than the watermark.
 *
 * Stacks are captured by walking frame pointers, bounded by the thread's
 * stack mapping: about a nanosecond per frame, never a fault, and complete
 * for code built with frame pointers (the default on current distributions);
 * libunwind would cost 10-100x more per event on this path.
 */
#include <errno.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "atomics.h"
#include "clock.h"
#include "session.h"
#include "user_events.h"
#include "usdt.h"
#include "write_origin.h"

#define SEQ_BASE 1u		/* a thread's number before its first attempt */
#define MAX_FRAMES 64u

struct wthread {
	uint32_t in_write;	/* atomic: inside rp_event_writev() */
	uint32_t tid;
	uint32_t gen[RP_MAX_SESSIONS];	/* slot generation the seq belongs to */
	uint32_t seq[RP_MAX_SESSIONS];
	uintptr_t stack_lo, stack_hi;
	bool no_park;		/* the rundown thread and the like never park */
	int ending_slot;	/* slot + 1 while this thread runs that session's
				 * stopping callbacks; 0 otherwise */
	struct wthread *next, *prev;
};

/* initial-exec: a shared libringpipe reaches it with one %fs-relative load
 * instead of a __tls_get_addr() call on every write (8 bytes of the static
 * TLS that glibc keeps spare even for libraries loaded with dlopen) */
static __thread struct wthread *wt __attribute__((tls_model("initial-exec")));
static pthread_key_t wt_key;
static pthread_once_t wt_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t wt_lock = PTHREAD_MUTEX_INITIALIZER;
static struct wthread *wt_head;
static int membarrier_ok;	/* 1: writers need no fence of their own */
/* registry entry shared by writers that have no thread state (see drop_alloc) */
static struct wthread no_state;
/* sessions taking threads' final sequence numbers, by slot; under wt_lock */
static struct rp_session *finals_to[RP_MAX_SESSIONS];

static void post_finals(struct wthread *t)
{
	int i;

	for (i = 0; i < RP_MAX_SESSIONS; i++) {
		struct rp_session *s = finals_to[i];

		if (s && t->gen[i] == s->gen && t->seq[i] != SEQ_BASE)
			rp_session_add_final(s, t->tid, t->seq[i]);
	}
}

void rp_writers_attach(struct rp_session *s)
{
	pthread_mutex_lock(&wt_lock);
	finals_to[s->slot] = s;
	pthread_mutex_unlock(&wt_lock);
}

static void wt_destroy(void *arg)
{
	struct wthread *t = arg;

	pthread_mutex_lock(&wt_lock);
	post_finals(t);
	if (t->prev)
		t->prev->next = t->next;
	else
		wt_head = t->next;
	if (t->next)
		t->next->prev = t->prev;
	pthread_mutex_unlock(&wt_lock);
	wt = NULL;
	free(t);
}

static void fork_prepare(void)
{
	pthread_mutex_lock(&rp_control_lock);
	pthread_mutex_lock(&wt_lock);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&wt_lock);
	pthread_mutex_unlock(&rp_control_lock);
}

/*
 * The child has one thread and no drainers: sessions do not survive fork.
 * Every event is disabled and the slots are free for the child's own
 * sessions; the parent's rings stay mapped but unused (writing into them
 * would put the child's events into the parent's trace).
 */
static void fork_child(void)
{
	struct wthread *t;
	int i;

	for (i = 0; i < RP_MAX_SESSIONS; i++) {
		rp_slots[i].session = NULL;
		rp_slots[i].shm = NULL;
		rp_slots[i].gen++;
		rp_store_relaxed(&rp_slots[i].state, SLOT_FREE);
		finals_to[i] = NULL;
	}
	rp_events_disable_all();
	/* the other threads are gone; their registry entries with them */
	for (t = wt_head; t;) {
		struct wthread *next = t->next;

		if (t != wt && t != &no_state)
			free(t);
		t = next;
	}
	no_state.in_write = 0;
	no_state.next = no_state.prev = NULL;
	wt_head = &no_state;
	if (wt) {
		wt->prev = NULL;
		wt->in_write = 0;
		wt->tid = (uint32_t)syscall(SYS_gettid);
		wt->next = wt_head;
		no_state.prev = wt;
		wt_head = wt;
	}
	pthread_mutex_unlock(&wt_lock);
	pthread_mutex_unlock(&rp_control_lock);
}

static void wt_init_once(void)
{
	/* the shared entry of writers without thread state; never removed */
	wt_head = &no_state;
	pthread_key_create(&wt_key, wt_destroy);
	pthread_atfork(fork_prepare, fork_parent, fork_child);
	/* registration lets stop use an expedited barrier instead of every
	 * writer paying a fence on each event */
	if (syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0)
		membarrier_ok = 1;
}

int rp_writers_init(void)
{
	return pthread_once(&wt_once, wt_init_once) ? -EAGAIN : 0;
}

static struct wthread *wt_register(void)
{
	struct wthread *t;
	pthread_attr_t attr;

	rp_writers_init();
	t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->tid = (uint32_t)syscall(SYS_gettid);
	if (!pthread_getattr_np(pthread_self(), &attr)) {
		void *addr;
		size_t size;

		if (!pthread_attr_getstack(&attr, &addr, &size)) {
			t->stack_lo = (uintptr_t)addr;
			t->stack_hi = (uintptr_t)addr + size;
		}
		pthread_attr_destroy(&attr);
	}
	pthread_mutex_lock(&wt_lock);
	t->next = wt_head;
	if (wt_head)
		wt_head->prev = t;
	wt_head = t;
	pthread_mutex_unlock(&wt_lock);
	pthread_setspecific(wt_key, t);
	wt = t;
	return t;
}

void rp_writers_quiesce(void)
{
	struct wthread *t;

	/* pairs with the writers' plain announce in rp_event_writev(): after
	 * this barrier every thread that did not see the slot STOPPING has its
	 * in_write store visible to the scan below */
	if (membarrier_ok)
		syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
	else
		rp_smp_mb();
	pthread_mutex_lock(&wt_lock);
	for (t = wt_head; t; t = t->next) {
		/* pairs with the store_release of in_write at the end of a write */
		while (rp_load_acquire(&t->in_write))
			sched_yield();
	}
	pthread_mutex_unlock(&wt_lock);
}

void rp_session_add_final(struct rp_session *s, uint32_t tid, uint32_t seq)
{
	pthread_mutex_lock(&s->final_lock);
	if (array_grow((void **)&s->finals, &s->capfinals, s->nfinals, sizeof(*s->finals), 64)) {
		pthread_mutex_unlock(&s->final_lock);
		return;
	}
	s->finals[s->nfinals++] = (struct thread_final){ tid, seq };
	pthread_mutex_unlock(&s->final_lock);
}

void rp_writers_collect_finals(struct rp_session *s)
{
	struct wthread *t;

	pthread_mutex_lock(&wt_lock);
	for (t = wt_head; t; t = t->next)
		if (t != &no_state && t->gen[s->slot] == s->gen && t->seq[s->slot] != SEQ_BASE)
			rp_session_add_final(s, t->tid, t->seq[s->slot]);
	/* from here, exiting threads no longer report to this session */
	if (finals_to[s->slot] == s)
		finals_to[s->slot] = NULL;
	pthread_mutex_unlock(&wt_lock);
}

/* Frame-pointer walk, innermost first, reading only inside the stack. */
static uint32_t capture_stack(const struct wthread *t, uint64_t *ips, uint32_t max)
{
	uintptr_t *fp = __builtin_frame_address(0);
	uint32_t n = 0;

	while (n < max && (uintptr_t)fp >= t->stack_lo &&
	       (uintptr_t)fp + 2 * sizeof(uintptr_t) <= t->stack_hi &&
	       !((uintptr_t)fp & (sizeof(uintptr_t) - 1))) {
		uintptr_t *next = (uintptr_t *)fp[0];
		uintptr_t ip = fp[1];

		if (!ip)
			break;
		ips[n++] = ip;
		if (next <= fp)
			break;
		fp = next;
	}
	return n;
}

static void wake_drainer(struct rp_shm *shm, struct rp_ring *r)
{
	struct rp_shm_session *h = shm->hdr;
	uint64_t pending;

	if (rp_likely(!rp_load_relaxed(&h->drainer_idle)))
		return;
	pending = rp_load_relaxed(&r->hdr->producer_pos) - rp_load_relaxed(&r->hdr->consumer_pos);
	if (pending < h->wake_watermark)
		return;
	/* one producer wins the idle flag and wakes; the drainer re-reads
	 * the rings after it clears the flag itself */
	if (__atomic_exchange_n(&h->drainer_idle, 0, __ATOMIC_ACQ_REL)) {
		rp_add_relaxed(&h->drainer_wake, 1);
		syscall(SYS_futex, &h->drainer_wake, FUTEX_WAKE, 1, NULL, NULL, 0);
	}
}

/* ---- Block mode: parking in strict FIFO ------------------------------- */

void (*rp_test_admit_hook)(uint32_t ticket);
int rp_test_fail_alloc;
uint64_t rp_waiter_wake_ns;

#define PARK_POLL_NS 20000000ll		/* recheck abort and liveness every 20 ms */

static uint64_t mono_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void wake_slot(struct rp_shm_session *h, uint32_t ticket)
{
	struct rp_shm_waiter *w = &h->waiters[ticket % RP_SHM_WAITER_SLOTS];

	if (rp_test_admit_hook)
		rp_store_relaxed(&rp_waiter_wake_ns, mono_now_ns());
	/* pairs with the load_acquire of the word in park(): whoever sleeps
	 * on it either sees the new count or is woken */
	__atomic_fetch_add(&w->futex, 1, __ATOMIC_RELEASE);
	syscall(SYS_futex, &w->futex, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

/* True when the session's drainer stopped beating its heart: the process
 * that drains it died or hangs. Then nobody may park on it again. */
static bool drainer_dead(struct rp_shm_session *h)
{
	uint64_t beat = rp_load_relaxed(&h->drainer_heartbeat_ns);
	uint64_t timeout = h->drainer_timeout_ns;

	return beat && mono_now_ns() - beat > timeout;
}

/*
 * Waits in the session's FIFO until this producer is at the head and its
 * ring has room; returns the reserved record, or NULL when the session was
 * aborted or its drainer is dead (*reason says which drop to count).
 */
static struct rp_shm_record *park(struct wthread *t, struct rp_shm *shm, struct rp_ring **rp,
				  uint32_t size, unsigned int *reason)
{
	struct rp_shm_session *h = shm->hdr;
	struct rp_shm_waiter *w;
	uint32_t ticket;

	*reason = RP_DROP_ABORTED;
	/* pairs with the store_release of abort in rp_session_stop() */
	if (rp_load_acquire(&h->abort))
		return NULL;
	if (drainer_dead(h)) {
		rp_store_release(&h->abort, 1);
		return NULL;
	}
	ticket = __atomic_fetch_add(&h->waiter_tail, 1, __ATOMIC_ACQ_REL);
	w = &h->waiters[ticket % RP_SHM_WAITER_SLOTS];
	rp_store_relaxed(&w->tid, t->tid);
	rp_store_relaxed(&w->ticket, ticket);
	for (;;) {
		/* read the wake counter before the conditions: a wake between
		 * this load and FUTEX_WAIT changes the word and the wait returns */
		uint32_t word = rp_load_acquire(&w->futex);
		struct timespec to = { 0, PARK_POLL_NS };

		if (rp_load_acquire(&h->abort))
			return NULL;
		/* pairs with the store_release of waiter_head by the previous head */
		if (rp_load_acquire(&h->waiter_head) == ticket) {
			struct rp_ring *r = rp_shm_current_ring(shm);
			struct rp_shm_record *rec = rp_ring_reserve(r, size);

			if (rec) {
				if (rp_test_admit_hook)
					rp_test_admit_hook(ticket);
				/* pairs with the load_acquire of waiter_head above,
				 * in the next waiter */
				rp_store_release(&h->waiter_head, ticket + 1);
				if (rp_load_acquire(&h->waiter_tail) != ticket + 1)
					wake_slot(h, ticket + 1);	/* pass the baton */
				*rp = r;
				return rec;
			}
		}
		if (drainer_dead(h)) {
			/* everyone leaves: the queue order no longer matters */
			rp_store_release(&h->abort, 1);
			wake_slot(h, rp_load_relaxed(&h->waiter_head));
			return NULL;
		}
		/* an idle drainer would otherwise sleep out its timeout */
		if (rp_load_relaxed(&h->drainer_idle) &&
		    __atomic_exchange_n(&h->drainer_idle, 0, __ATOMIC_ACQ_REL)) {
			rp_add_relaxed(&h->drainer_wake, 1);
			syscall(SYS_futex, &h->drainer_wake, FUTEX_WAKE, 1, NULL, NULL, 0);
		}
		syscall(SYS_futex, &w->futex, FUTEX_WAIT, word, &to, NULL, 0);
	}
}

/* Every waiter of a session gives up: teardown. */
void rp_session_abort_waiters(struct rp_shm *shm)
{
	struct rp_shm_session *h = shm->hdr;
	uint32_t i;

	/* pairs with the load_acquire of abort in park() */
	rp_store_release(&h->abort, 1);
	for (i = 0; i < RP_SHM_WAITER_SLOTS; i++)
		wake_slot(h, i);
}

void rp_thread_set_no_park(bool no_park)
{
	struct wthread *t = wt ? wt : wt_register();

	if (t)
		t->no_park = no_park;
}

int rp_thread_begin_ending(int slot)
{
	struct wthread *t = wt ? wt : wt_register();

	if (!t)
		return -ENOMEM;
	t->ending_slot = slot + 1;
	return 0;
}

void rp_thread_end_ending(void)
{
	if (wt)
		wt->ending_slot = 0;
}

#define ROOM_POLL_NS 50000l	/* how often a full ring is rechecked */

/*
 * The thread running a session's stopping callbacks found its ring full.
 * Nobody else writes to the session any more, and its drainer runs and
 * waits on nothing this thread holds, so waiting for room cannot deadlock;
 * the thread does not join the Block FIFO (whose producers stop may abort).
 * Gives up (a counted drop) only when the drainer is dead or failed.
 */
static struct rp_shm_record *wait_room(struct rp_session *s, struct rp_shm *shm,
				       struct rp_ring *r, uint32_t size)
{
	struct rp_shm_session *h = shm->hdr;
	struct rp_shm_record *rec;

	for (;;) {
		struct timespec to = { 0, ROOM_POLL_NS };

		rec = rp_ring_reserve(r, size);
		if (rec || drainer_dead(h) || rp_load_relaxed(&s->output_error))
			return rec;
		if (rp_load_relaxed(&h->drainer_idle) &&
		    __atomic_exchange_n(&h->drainer_idle, 0, __ATOMIC_ACQ_REL)) {
			rp_add_relaxed(&h->drainer_wake, 1);
			syscall(SYS_futex, &h->drainer_wake, FUTEX_WAKE, 1, NULL, NULL, 0);
		}
		nanosleep(&to, NULL);
	}
}

/*
 * After a writer announced itself (in_write), orders that store before its
 * reads of slot states. Stop's membarrier provides the order where the kernel
 * has it (pairs with the membarrier in rp_writers_quiesce()); otherwise the
 * writer pays a full fence.
 */
static inline void announce_fence(void)
{
	if (membarrier_ok)
		__atomic_signal_fence(__ATOMIC_SEQ_CST);
	else
		rp_smp_mb();
}

/*
 * No thread state could be allocated: a drop in every session (counted),
 * never a park. Such writers announce themselves on a shared registry entry
 * whose in_write is a count, so stop still waits for them.
 */
static int drop_alloc(uint64_t mask)
{
	__atomic_fetch_add(&no_state.in_write, 1, __ATOMIC_RELAXED);
	announce_fence();
	while (mask) {
		int i = __builtin_ctzll(mask);
		struct slot *sl = &rp_slots[i];

		mask &= mask - 1;
		/* pairs with the store_release of RUNNING in rp_session_start() */
		if (rp_load_acquire(&sl->state) == SLOT_RUNNING)
			rp_ring_count_drop(rp_shm_current_ring(sl->shm), RP_DROP_ALLOC_FAIL);
	}
	/* pairs with the load_acquire in rp_writers_quiesce() */
	__atomic_fetch_sub(&no_state.in_write, 1, __ATOMIC_RELEASE);
	return -ENOMEM;
}

/*
 * The write itself, for an event enabled in the sessions of mask. Always
 * inlined, so the flat write gets a copy specialised for one payload and no
 * options or origin: the constants remove the stack, activity and origin code
 * and the register spills they cause, which took the enabled 32-byte write
 * from about 20 to 16 ns on the 2-vCPU test machine.
 */
static inline __attribute__((always_inline)) int
write_events(struct rp_event *ev, uint64_t mask, const struct iovec *iov, int iovcnt,
	     size_t len, const struct rp_write_opts *o, const struct rp_write_origin *org)
{
	struct wthread *t = wt;
	uint64_t ips[MAX_FRAMES], ts;
	const uint64_t *sips = ips;

	uint32_t nips = 0, about = 0;
	uint16_t flags = 0;
	int rc = 0;

	/* once per attempt, before any session sees it (usdt.h) */
	RP_USDT_EVENT(ev, iov, iovcnt, len, mask);
	if (rp_unlikely(mask & RP_UE_BIT) && ev->ue) {
		/* a tracer enabled the event's user_events tracepoint (with no
		 * tracepoint registered, bit 63 is session slot 63) */
		rp_ue_write(ev, iov, iovcnt, len);
		mask &= ~RP_UE_BIT;
	}
	if (rp_unlikely(!t)) {
		t = rp_test_fail_alloc ? NULL : wt_register();
		if (!t)
			return drop_alloc(mask);
	}
	if (rp_unlikely(t->ending_slot)) {
		/* end-of-session data goes to the stopping session only */
		mask &= 1ull << (t->ending_slot - 1);
		if (!mask)
			return 0;
	}
	if (o) {
		if (o->activity_id || o->related_activity_id)
			flags |= RP_REC_F_ACTIVITY;
		if ((o->flags & RP_WRITE_STACK_GIVEN) &&
		    o->sz >= offsetof(struct rp_write_opts, nstack) + sizeof(o->nstack)) {
			/* another context's stack (a BPF sample): used in place */
			sips = o->stack;
			nips = o->stack ? o->nstack : 0;
			if (nips > RP_WRITE_MAX_GIVEN_FRAMES)
				nips = RP_WRITE_MAX_GIVEN_FRAMES;
			if (nips)
				flags |= RP_REC_F_STACK;
		} else if (o->flags & RP_WRITE_STACK) {
			nips = capture_stack(t, ips, MAX_FRAMES);
			if (nips)
				flags |= RP_REC_F_STACK;
		}
		if (o->sz >= offsetof(struct rp_write_opts, thread_id) + sizeof(o->thread_id) &&
		    o->thread_id && o->thread_id != (org ? org->tid : t->tid)) {
			about = o->thread_id;
			flags |= RP_REC_F_THREAD;
		}
	}

	/* announce; stop's membarrier orders this store before its scan (see
	 * session.h); without membarrier, a full fence does it here */
	rp_store_relaxed(&t->in_write, 1);
	announce_fence();

	while (mask) {
		int i = __builtin_ctzll(mask);
		struct slot *sl = &rp_slots[i];
		struct rp_shm_record *rec;
		struct rp_ring *r;
		struct rp_shm *shm;
		uint32_t gen, size;
		char *p;
		int k;

		mask &= mask - 1;
		/* pairs with the store_release of RUNNING in rp_session_start():
		 * the slot's rings are mapped before we use them. An ENDING
		 * session takes events from its stopping thread only; its rings
		 * stay mapped until that thread returns from the stop. */
		if (rp_load_acquire(&sl->state) != SLOT_RUNNING &&
		    t->ending_slot != i + 1)
			continue;
		gen = rp_load_relaxed(&sl->gen);
		if (t->gen[i] != gen) {
			t->gen[i] = gen;
			t->seq[i] = SEQ_BASE;
		}
		if (rp_likely(!org))
			t->seq[i]++;	/* an origin thread's numbers are the caller's */
		shm = sl->shm;
		r = rp_shm_current_ring(shm);
		size = (uint32_t)rp_record_size(flags, nips, (uint16_t)len);
		if (rp_unlikely(sl->block) && !t->no_park && !t->ending_slot &&
		    rp_load_relaxed(&shm->hdr->waiter_tail) != rp_load_relaxed(&shm->hdr->waiter_head))
			rec = NULL;	/* producers wait already: queue behind them */
		else
			rec = rp_ring_reserve(r, size);
		if (rp_unlikely(!rec)) {
			unsigned int reason = size > r->max_record ? RP_DROP_TOO_BIG : RP_DROP_FULL;

			if (t->ending_slot == i + 1 && reason == RP_DROP_FULL)
				rec = wait_room(sl->session, shm, r, size);
			else if (sl->block && !t->no_park && reason == RP_DROP_FULL)
				rec = park(t, shm, &r, size, &reason);
			if (!rec) {
				rp_ring_count_drop(r, reason);
				rc = -ENOBUFS;
				continue;
			}
		}
		/* stamped after the reservation: every record the drainer has not
		 * seen yet was reserved after its last look at the ring, so it is
		 * younger than that look (drain.c relies on this to merge) */
		ts = rp_clock_now();
		if (rp_unlikely(org))
			rp_record_fill(rec, ev->index, org->ts, org->tid, org->seq, flags,
				       (uint16_t)len, org->cpu);
		else
			rp_record_fill(rec, ev->index, ts, t->tid, t->seq[i], flags, (uint16_t)len,
				       rp_ring_current_cpu());
		if (flags & RP_REC_F_ACTIVITY) {
			struct rp_shm_activity *a = (void *)(rec + 1);

			if (o->activity_id)
				memcpy(a->activity_id, o->activity_id, 16);
			else
				memset(a->activity_id, 0, 16);
			if (o->related_activity_id)
				memcpy(a->related_activity_id, o->related_activity_id, 16);
			else
				memset(a->related_activity_id, 0, 16);
		}
		if (flags & RP_REC_F_THREAD) {
			struct rp_shm_thread *th = (void *)((char *)rec + rp_record_thread_off(flags));

			th->tid = about;
			th->__reserved = 0;
		}
		if (flags & RP_REC_F_STACK) {
			struct rp_shm_stack *st = (void *)((char *)rec + rp_record_stack_off(flags));

			st->nr = nips;
			memcpy(st + 1, sips, nips * sizeof(uint64_t));
		}
		p = rp_record_payload(rec, nips);
		for (k = 0; k < iovcnt; k++) {
			if (!iov[k].iov_len)
				continue;	/* an empty segment may have no base */
			memcpy(p, iov[k].iov_base, iov[k].iov_len);
			p += iov[k].iov_len;
		}
		rp_ring_commit(rec);
		wake_drainer(shm, r);
	}
	/* pairs with the load_acquire in rp_writers_quiesce() */
	rp_store_release(&t->in_write, 0);
	return rc;
}

/* The checks both vector writes make before writing; origin may be NULL
 * (the calling thread writes for itself). Not inlined: one general copy of
 * write_events() serves both. */
static __attribute__((noinline)) int
writev_checked(struct rp_event *ev, const struct iovec *iov, int iovcnt,
	       const struct rp_write_opts *opts, const struct rp_write_origin *origin)
{
	uint64_t mask = rp_load_relaxed(&ev->hot.sessions);
	size_t len = 0;
	int k;

	if (rp_likely(!mask))
		return 0;
	if (iovcnt < 0 || (iovcnt && !iov))
		return -EINVAL;
	for (k = 0; k < iovcnt; k++)
		len += iov[k].iov_len;
	if (len > 65535)
		return -EINVAL;
	/* callers built before the stack fields were appended pass a smaller
	 * sz; write_events() reads those fields only when sz covers them */
	return write_events(ev, mask, iov, iovcnt, len,
			  opts && opts->sz >= offsetof(struct rp_write_opts, stack) ? opts : NULL,
			  origin);
}

RP_API int rp_event_writev(struct rp_event *ev, const struct iovec *iov, int iovcnt,
			   const struct rp_write_opts *opts)
{
	return writev_checked(ev, iov, iovcnt, opts, NULL);
}

int rp_event_write_origin(struct rp_event *ev, const struct iovec *iov, int iovcnt,
			  const struct rp_write_origin *origin, const struct rp_write_opts *opts)
{
	if (!origin)
		return -EINVAL;
	return writev_checked(ev, iov, iovcnt, opts, origin);
}

/* The flat write's copy of write_events(); out of line so that a disabled
 * rp_event_write() stays a load, a branch and a return. */
static __attribute__((noinline)) int write_flat(struct rp_event *ev, uint64_t mask,
						const void *payload, size_t len)
{
	struct iovec iov = { (void *)payload, len };

	return write_events(ev, mask, &iov, 1, len, NULL, NULL);
}

RP_API int rp_event_write(struct rp_event *ev, const void *payload, size_t len)
{
	uint64_t mask = rp_load_relaxed(&ev->hot.sessions);

	if (rp_likely(!mask))
		return 0;
	if (len > 65535)
		return -EINVAL;
	return write_flat(ev, mask, payload, len);
}
