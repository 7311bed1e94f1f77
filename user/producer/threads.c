// SPDX-License-Identifier: MIT
/*
 * The registry of writing threads (threads.h): registration on a thread's
 * first write, removal at its exit, fork handling, and what stop needs from
 * it (quiescence and every thread's final sequence numbers).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "atomics.h"
#include "fence.h"
#include "ring_local.h"
#include "session.h"
#include "threads.h"

__thread struct wthread *rp_wt __attribute__((tls_model("initial-exec")));
struct wthread rp_no_state;
int rp_test_fail_alloc;

static pthread_key_t wt_key;
static pthread_once_t wt_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t wt_lock = PTHREAD_MUTEX_INITIALIZER;
static struct wthread *wt_head;
/* sessions taking threads' final sequence numbers, by slot; under wt_lock */
static struct rp_session *finals_to[RP_MAX_SESSIONS];

static void post_finals(struct wthread *t)
{
	int i;

	for (i = 0; i < RP_MAX_SESSIONS; i++) {
		struct rp_session *s = finals_to[i];

		if (s && t->gen[i] == s->gen && t->seq[i] != RP_SEQ_BASE)
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
	int i;

	/* a pass this thread can no longer use frees its place (park.h) */
	for (i = 0; i < RP_MAX_SESSIONS; i++)
		if (t->place[i] && t->gen[i] == rp_load_relaxed(&rp_slots[i].gen))
			rp_pass_end(t, i);
	pthread_mutex_lock(&wt_lock);
	post_finals(t);
	if (t->prev)
		t->prev->next = t->next;
	else
		wt_head = t->next;
	if (t->next)
		t->next->prev = t->prev;
	pthread_mutex_unlock(&wt_lock);
	rp_wt = NULL;
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
		rp_slots[i].gen = rp_slot_next_gen(rp_slots[i].gen);
		rp_slots[i].flat_gen = RP_SLOT_NOT_FLAT;
		rp_store_relaxed(&rp_slots[i].state, SLOT_FREE);
		finals_to[i] = NULL;
	}
	rp_events_disable_all();
	/* the other threads are gone; their registry entries with them */
	for (t = wt_head; t;) {
		struct wthread *next = t->next;

		if (t != rp_wt && t != &rp_no_state)
			free(t);
		t = next;
	}
	rp_no_state.in_write = 0;
	rp_no_state.next = rp_no_state.prev = NULL;
	wt_head = &rp_no_state;
	if (rp_wt) {
		rp_wt->prev = NULL;
		rp_wt->in_write = 0;
		rp_wt->waiting = 0;
		rp_wt->inside_mark = 0;
		rp_wt->fv.bit = 0;	/* of a session of the parent's */
		rp_wt->tid = (uint32_t)syscall(SYS_gettid);
		rp_wt->next = wt_head;
		rp_no_state.prev = rp_wt;
		wt_head = rp_wt;
	}
	pthread_mutex_unlock(&wt_lock);
	pthread_mutex_unlock(&rp_control_lock);
}

static void wt_init_once(void)
{
	/* the shared entry of writers without thread state; never removed */
	wt_head = &rp_no_state;
	pthread_key_create(&wt_key, wt_destroy);
	pthread_atfork(fork_prepare, fork_parent, fork_child);
	/* registration lets stop use an expedited barrier instead of every
	 * writer paying a fence on each event (fence.h) */
	rp_fence_init();
}

int rp_writers_init(void)
{
	return pthread_once(&wt_once, wt_init_once) ? -EAGAIN : 0;
}

struct wthread *rp_wthread_get(void)
{
	struct wthread *t = rp_wt;
	pthread_attr_t attr;

	if (rp_likely(t))
		return t;
	if (rp_test_fail_alloc)
		return NULL;
	rp_writers_init();
	/* lines of its own: in_write and the sequence numbers are stored on
	 * every write, and a neighbour on the heap that another thread writes
	 * (the drainer's state) would take the line away each time */
	if (posix_memalign((void **)&t, 64, sizeof(*t)))
		return NULL;
	memset(t, 0, sizeof(*t));
	t->tid = (uint32_t)syscall(SYS_gettid);
#ifdef RP_RSEQ_RESERVE
	t->rseq_area = rp_rseq_area();
#endif
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
	rp_wt = t;
	return t;
}

void rp_writers_quiesce(void)
{
	struct wthread *t;

	/* pairs with rp_fence_light() after the writers' announce in
	 * write_events(): after this barrier every thread that did not see the
	 * slot STOPPING has its in_write store visible to the scan below */
	rp_fence_heavy();
	pthread_mutex_lock(&wt_lock);
	for (t = wt_head; t; t = t->next) {
		/* pairs with the store_release of in_write at the end of a write */
		while (rp_load_acquire(&t->in_write))
			sched_yield();
	}
	pthread_mutex_unlock(&wt_lock);
}

/*
 * Uncommitted heads (ring.c): a record left reserved but not committed is
 * its writer's while that writer is inside the write that reserved it, and
 * nobody's once every thread that could be has been seen outside a write.
 * Facts, not time: a writer stopped, frozen or starved in the middle of a
 * write is inside it, however long that lasts.
 *
 * rp_writers_mark() takes a mark: each thread inside a write now, and not
 * waiting (a waiter holds no reservation: park.c), keeps the oldest mark
 * that found it so. rp_writers_left(mark) looks again: a thread found
 * outside (or waiting) drops its mark; true once no thread keeps one at or
 * before `mark`. A thread seen inside again keeps its mark: the looks go on
 * until each has been seen outside once, which a thread that writes all the
 * time still is, between two writes. Both take the registry lock; a drainer
 * calls them only for a head that stays uncommitted.
 */
static uint64_t wt_marks;	/* the last mark taken; under wt_lock */

static bool wt_inside(struct wthread *t)
{
	/* pairs with the store_release of in_write at the end of a write:
	 * seen 0, the write's commit is seen too */
	return rp_load_acquire(&t->in_write) && !rp_load_relaxed(&t->waiting);
}

uint64_t rp_writers_mark(void)
{
	struct wthread *t;
	uint64_t m;

	/* pairs with rp_fence_light() after a writer's announce (as in
	 * rp_writers_quiesce()) and with the full fence of waiting_end() in
	 * park.c: a writer whose reservation the caller saw before this is
	 * seen inside (or not waiting) below */
	rp_fence_heavy();
	pthread_mutex_lock(&wt_lock);
	m = ++wt_marks;
	for (t = wt_head; t; t = t->next)
		if (t != &rp_no_state && !t->inside_mark && wt_inside(t))
			t->inside_mark = m;
	pthread_mutex_unlock(&wt_lock);
	return m;
}

bool rp_writers_left(uint64_t mark)
{
	struct wthread *t;
	bool left = true;

	pthread_mutex_lock(&wt_lock);
	for (t = wt_head; t; t = t->next) {
		if (!t->inside_mark)
			continue;
		if (!wt_inside(t))
			t->inside_mark = 0;
		else if (t->inside_mark <= mark)
			left = false;
	}
	pthread_mutex_unlock(&wt_lock);
	return left;
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
		if (t != &rp_no_state && t->gen[s->slot] == s->gen && t->seq[s->slot] != RP_SEQ_BASE)
			rp_session_add_final(s, t->tid, t->seq[s->slot]);
	/* from here, exiting threads no longer report to this session */
	if (finals_to[s->slot] == s)
		finals_to[s->slot] = NULL;
	pthread_mutex_unlock(&wt_lock);
}

void rp_thread_set_no_park(bool no_park)
{
	struct wthread *t = rp_wthread_get();

	if (t)
		t->no_park = no_park;
}

int rp_thread_begin_ending(int slot)
{
	struct wthread *t = rp_wthread_get();

	if (!t)
		return -ENOMEM;
	t->ending_slot = slot + 1;
	t->fv.bit = 0;	/* its writes go the full way (write.c) */
	return 0;
}

void rp_thread_end_ending(void)
{
	if (rp_wt)
		rp_wt->ending_slot = 0;
}
