// SPDX-License-Identifier: MIT
/*
 * The producer write path.
 *
 * A write: one relaxed load of the event's session mask (the disabled case
 * ends there); then, per enabled session, the thread's sequence number for
 * that session advances (every attempt, captured or not), a record is
 * reserved in the ring of the current CPU with one CAS, filled and committed
 * with a release store. No lock, no syscall. The drainer is woken only when
 * it declared itself idle and the ring holds more than the watermark. A full
 * ring drops (counted) or, in a Block session, parks (park.c).
 *
 * Stacks are captured by walking frame pointers, bounded by the thread's
 * stack mapping: about a nanosecond per frame, never a fault, and complete
 * for code built with frame pointers (the default on current distributions);
 * libunwind would cost 10-100x more per event on this path.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "atomics.h"
#include "clock.h"
#include "fence.h"
#include "park.h"
#include "ring_local.h"
#include "session.h"
#include "threads.h"
#include "user_events.h"
#include "usdt.h"
#include "write_origin.h"

#define MAX_FRAMES 64u

int rp_test_no_drainer_wake;

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

/*
 * The payload into the record. Events are mostly a few dozen bytes, and a
 * call to memcpy() for those costs more than the copy: up to 64 bytes are
 * copied inline with two overlapping moves of the largest size that fits
 * (constant-size memcpy() becomes single moves). The source is the
 * caller's and the record is ours, so they cannot overlap; only the two
 * moves of a size overlap each other, in the record.
 */
static inline __attribute__((always_inline)) void copy_small(char *dst, const char *src,
							    size_t n)
{
	if (n >= 16) {
		if (n > 32) {
			memcpy(dst, src, 32);
			memcpy(dst + n - 32, src + n - 32, 32);
		} else {
			memcpy(dst, src, 16);
			memcpy(dst + n - 16, src + n - 16, 16);
		}
	} else if (n >= 8) {
		memcpy(dst, src, 8);
		memcpy(dst + n - 8, src + n - 8, 8);
	} else if (n >= 4) {
		memcpy(dst, src, 4);
		memcpy(dst + n - 4, src + n - 4, 4);
	} else if (n) {
		/* 1 to 3 bytes: the first, the middle and the last (some the
		 * same byte); no loop, whose counter would need a register */
		dst[0] = src[0];
		dst[n / 2] = src[n / 2];
		dst[n - 1] = src[n - 1];
	}
}

/* Any payload: copy_small() up to 64 bytes, memcpy() beyond. */
static inline __attribute__((always_inline)) void copy_payload(char *dst, const char *src,
							      size_t n)
{
	if (n > 64)
		memcpy(dst, src, n);
	else
		copy_small(dst, src, n);
}

/*
 * After a commit: wakes the drainer if it declared itself idle and the ring
 * holds more than the watermark (wakes are batched, never one per event).
 * The commit is a store and the idle flag a load, the drainer's side the
 * reverse: rp_fence_light() here and rp_fence_heavy() in the drainer's
 * sleep_idle() keep the two from missing each other (fence.h).
 */
/* The wake itself, for a drainer found idle: only once r holds more than
 * the watermark. */
static inline void wake_idle_drainer(struct rp_shm *shm, struct rp_ring *r)
{
	struct rp_shm_session *h = shm->hdr;
	uint64_t pending;

	pending = rp_load_relaxed(&r->hdr->producer_pos) - rp_load_relaxed(&r->hdr->consumer_pos);
	if (pending < h->wake_watermark || rp_unlikely(rp_test_no_drainer_wake))
		return;
	rp_drainer_wake_idle(h);
}

static inline void wake_drainer(struct rp_shm *shm, struct rp_ring *r)
{
	rp_fence_light();
	if (rp_likely(!rp_load_relaxed(&shm->hdr->drainer_idle)))
		return;
	wake_idle_drainer(shm, r);
}

/*
 * After a writer announced itself (in_write), orders that store before its
 * reads of slot states. Stop's membarrier provides the order where the kernel
 * has it (pairs with the membarrier in rp_writers_quiesce()); otherwise the
 * writer pays a full fence.
 */
static inline void announce_fence(void)
{
	/* pairs with rp_fence_heavy() in rp_writers_quiesce() */
	rp_fence_light();
}

/*
 * The sessions of mask that take a write beginning now: those RUNNING, and
 * for the thread running a session's stopping callbacks, that session while
 * it is ENDING. Read after the writer announced itself: a session found
 * RUNNING waits in its stop for this write to end (rp_writers_quiesce()),
 * so the write is that session's whatever its state becomes meanwhile: in
 * its trace or counted in its drops (ringpipe.h, "At a session's edges").
 */
static inline uint64_t sessions_taking(uint64_t mask, int ending_slot)
{
	uint64_t taken = 0;

	while (mask) {
		int i = __builtin_ctzll(mask);
		/* pairs with the store_release of RUNNING in rp_session_start():
		 * the slot's rings are mapped before we use them */
		uint32_t st = rp_load_acquire(&rp_slots[i].state);

		if (st == SLOT_RUNNING || (st == SLOT_ENDING && ending_slot == i + 1))
			taken |= 1ull << i;
		mask &= mask - 1;
	}
	return taken;
}

/*
 * No thread state could be allocated: a drop in every session that takes
 * the write (counted), never a park. Such writers announce themselves on a
 * shared registry entry whose in_write is a count, so stop still waits for
 * them.
 */
static int drop_alloc(struct rp_event *ev, const struct iovec *iov, int iovcnt, size_t len,
		      uint64_t mask, bool tell_none)
{
	uint64_t taken;

	rp_add_relaxed(&rp_no_state.in_write, 1);
	announce_fence();
	taken = sessions_taking(mask, 0);
	if (taken)
		RP_USDT_EVENT(ev, iov, iovcnt, len, taken);
	for (mask = taken; mask; mask &= mask - 1)
		rp_ring_count_drop(rp_shm_current_ring(rp_slots[__builtin_ctzll(mask)].shm),
				   RP_DROP_ALLOC_FAIL);
	/* pairs with the load_acquire of in_write in rp_writers_quiesce() */
	(void)rp_fetch_sub_release(&rp_no_state.in_write, 1);
	return taken ? -ENOMEM : tell_none ? RP_WRITE_NO_SESSION : 0;
}

/*
 * One event written to every session of mask. Always inlined, so the flat
 * write gets a copy specialised for one payload and no options or origin:
 * the constants remove the stack, activity and origin code and the register
 * spills they cause (Documentation/changelog.md, 2026-11-29, has the
 * figures).
 */
static inline __attribute__((always_inline)) int
write_events(struct rp_event *ev, uint64_t mask, const struct iovec *iov, int iovcnt,
	     size_t len, const struct rp_write_opts *o, const struct rp_write_origin *org)
{
	struct wthread *t = rp_wt;
	uint64_t ips[MAX_FRAMES], ts, ue = 0;
	const uint64_t *sips = ips;
	/* constant false in the copies without options (the flat ones) */
	bool tell_none = o && (o->flags & RP_WRITE_REPORT_NO_SESSION);
	uint32_t nips = 0, about = 0;
	uint16_t flags = 0;
	int rc = 0;

	if (rp_unlikely(mask & RP_UE_BIT) && ev->ue) {
		/* a tracer enabled the event's user_events tracepoint (with no
		 * tracepoint registered, bit 63 is session slot 63) */
		ue = RP_UE_BIT;
		mask &= ~RP_UE_BIT;
	}
	if (rp_unlikely(!t)) {
		t = rp_wthread_get();
		if (!t) {
			if (ue)
				rp_ue_write(ev, iov, iovcnt, len);
			return drop_alloc(ev, iov, iovcnt, len, mask, tell_none);
		}
	}
	if (rp_unlikely(t->ending_slot))
		/* end-of-session data goes to the stopping session only */
		mask &= 1ull << (t->ending_slot - 1);
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
	/* an origin in another process: the thread block names it */
	if (org && org->pid) {
		if (!(flags & RP_REC_F_THREAD))
			about = org->tid;
		flags |= RP_REC_F_THREAD;
	}

	/* announce; stop's membarrier orders this store before its scan (see
	 * session.h); without membarrier, a full fence does it here */
	rp_store_relaxed(&t->in_write, 1);
	announce_fence();
	/* which sessions the write is for, decided once: an ENDING session
	 * takes events from its stopping thread only, and its rings stay
	 * mapped until that thread returns from the stop */
	mask = sessions_taking(mask, t->ending_slot);
	/* once per attempt, before any session sees it, and only for one that
	 * some session takes (usdt.h) */
	if (mask | ue)
		RP_USDT_EVENT(ev, iov, iovcnt, len, mask | ue);
	if (ue)
		rp_ue_write(ev, iov, iovcnt, len);
	if (!mask) {
		/* pairs with the load_acquire of in_write in rp_writers_quiesce() */
		rp_store_release(&t->in_write, 0);
		return tell_none ? RP_WRITE_NO_SESSION : 0;
	}

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
		gen = rp_load_relaxed(&sl->gen);
		if (t->gen[i] != gen) {
			t->gen[i] = gen;
			t->seq[i] = RP_SEQ_BASE;
			t->place[i] = 0;	/* a pass of the slot's previous session */
		}
		if (rp_likely(!org))
			t->seq[i]++;	/* an origin thread's numbers are the caller's */
		shm = sl->shm;
		if (rp_unlikely(rp_load_relaxed(&sl->output_error))) {
			r = rp_shm_current_ring(shm);
			/* the output failed: an attempt, dropped and counted */
			rp_ring_count_drop(r, RP_DROP_OUTPUT);
			rc = rp_load_relaxed(&sl->output_error);
			continue;
		}
		size = (uint32_t)rp_record_size(flags, nips, (uint16_t)len);
		if (rp_unlikely(sl->block) && !t->no_park && !t->ending_slot &&
		    !rp_pass_held(t, i) && rp_block_must_queue(i)) {
			r = rp_shm_current_ring(shm);
			rec = NULL;	/* producers wait already: queue behind them */
		} else {
			rec = rp_ring_reserve_here(shm, sl->local_rings, &r, size);
		}
		if (rp_unlikely(!rec)) {
			unsigned int reason = size > r->max_record ? RP_DROP_TOO_BIG : RP_DROP_FULL;

			if (t->ending_slot == i + 1 && reason == RP_DROP_FULL)
				rec = rp_wait_room(t, sl->session, shm, &r, size);
			else if (sl->block && !t->no_park && reason == RP_DROP_FULL)
				rec = rp_park(t, i, shm, &r, size, &reason);
			if (!rec) {
				rp_ring_count_drop(r, reason);
				rc = reason == RP_DROP_OUTPUT ? rp_load_relaxed(&sl->output_error) :
								-ENOBUFS;
				continue;
			}
		}
		/* stamped after the reservation: every record the drainer has not
		 * seen yet was reserved after its last look at the ring, so it is
		 * younger than that look (drain.c relies on this to merge) */
		ts = rp_clock_now();
		if (rp_unlikely(sl->block))
			rp_pass_spend(t, i, size, ts);
		if (rp_unlikely(org))
			rp_record_fill(rec, ev->index, org->ts, org->tid, org->seq, flags,
				       (uint16_t)len, org->cpu);
		else
			rp_record_fill(rec, ev->index, ts, t->tid, t->seq[i], flags, (uint16_t)len,
				       sl->local_rings ? r->index : rp_ring_current_cpu());
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
			th->pid = org ? org->pid : 0;
		}
		if (flags & RP_REC_F_STACK) {
			struct rp_shm_stack *st = (void *)((char *)rec + rp_record_stack_off(flags));

			st->nr = nips;
			memcpy(st + 1, sips, nips * sizeof(uint64_t));
		}
		/* from this thread's own flags and size: a process mapping the
		 * ring could rewrite the record's words under us */
		p = rp_record_payload_at(rec, flags, nips);
		for (k = 0; k < iovcnt; k++) {
			if (!iov[k].iov_len)
				continue;	/* an empty segment may have no base */
			copy_payload(p, iov[k].iov_base, iov[k].iov_len);
			p += iov[k].iov_len;
		}
		rp_ring_commit_len(rec, size);
		rp_ring_reuse_release(r);
		wake_drainer(shm, r);
	}
	/* pairs with the load_acquire of in_write in rp_writers_quiesce() */
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
		return opts && opts->sz >= offsetof(struct rp_write_opts, flags) + sizeof(opts->flags) &&
		       (opts->flags & RP_WRITE_REPORT_NO_SESSION) ? RP_WRITE_NO_SESSION : 0;
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

/* The flat write's copy of write_events(), for what write_flat() leaves. */
static __attribute__((noinline)) int write_flat_general(struct rp_event *ev, uint64_t mask,
							const void *payload, size_t len)
{
	struct iovec iov = { (void *)payload, len };

	return write_events(ev, mask, &iov, 1, len, NULL, NULL);
}

/*
 * The flat write when write_flat() below cannot finish it: one session that
 * this thread has written to before takes the straight line below, the
 * same steps as write_events() in the same order (Block's queueing and
 * parking included), with few live values. Anything else (several sessions, a
 * failed output, a new session in the slot, a stopping thread, a
 * user_events tracer, a thread without state yet) goes the general way,
 * before the attempt is counted, so it is counted exactly once.
 */
static __attribute__((noinline)) int write_flat_slow(struct rp_event *ev, uint64_t mask,
						     const void *payload, size_t len)
{
	struct wthread *t = rp_wt;
	struct rp_shm_record *rec;
	struct rp_ring *r;
	struct slot *sl;
	uint64_t ts;
	uint32_t size;
	int i;

	if (rp_unlikely(!t || (mask & (mask - 1)) || (mask & RP_UE_BIT) || t->ending_slot))
		return write_flat_general(ev, mask, payload, len);
	i = __builtin_ctzll(mask);
	sl = &rp_slots[i];
	/* announce, as in write_events() */
	rp_store_relaxed(&t->in_write, 1);
	announce_fence();
	/* pairs with the store_release of RUNNING in rp_session_start() */
	if (rp_unlikely(rp_load_acquire(&sl->state) != SLOT_RUNNING ||
			t->gen[i] != rp_load_relaxed(&sl->gen) ||
			rp_load_relaxed(&sl->output_error))) {
		/* pairs with the load_acquire of in_write in rp_writers_quiesce() */
		rp_store_release(&t->in_write, 0);
		return write_flat_general(ev, mask, payload, len);
	}
	/* here, past the last way to the general path, which fires it itself:
	 * once per attempt, before the session sees it (usdt.h) */
	if (rp_unlikely(rp_usdt_event_armed())) {
		struct iovec iov = { (void *)payload, len };

		RP_USDT_EVENT(ev, &iov, 1, len, mask);
		(void)iov;	/* built without the probe (RP_NO_USDT) */
	}
	t->seq[i]++;
	size = (uint32_t)rp_record_size(0, 0, (uint16_t)len);
	/* Block: without a pass, a writer queues behind those who wait */
	if (rp_unlikely(sl->block) && !t->no_park && !rp_pass_held(t, i) && rp_block_must_queue(i)) {
		r = rp_shm_current_ring(sl->shm);
		rec = NULL;
	} else {
		rec = rp_ring_reserve_here(sl->shm, sl->local_rings, &r, size);
	}
	if (rp_unlikely(!rec)) {
		unsigned int reason = size > r->max_record ? RP_DROP_TOO_BIG : RP_DROP_FULL;

		if (sl->block && !t->no_park && reason == RP_DROP_FULL)
			rec = rp_park(t, i, sl->shm, &r, size, &reason);
		if (!rec) {
			int rc = reason == RP_DROP_OUTPUT ? rp_load_relaxed(&sl->output_error) :
							    -ENOBUFS;

			rp_ring_count_drop(r, reason);
			rp_store_release(&t->in_write, 0);
			return rc;
		}
	}
	/* stamped after the reservation (see write_events()) */
	ts = rp_clock_now();
	if (rp_unlikely(sl->block))
		rp_pass_spend(t, i, size, ts);
	rp_record_fill(rec, ev->index, ts, t->tid, t->seq[i], 0, (uint16_t)len,
		       sl->local_rings ? r->index : rp_ring_current_cpu());
	copy_payload(rp_record_payload_at(rec, 0, 0), payload, len);
	rp_ring_commit_len(rec, size);
	rp_ring_reuse_release(r);
	wake_drainer(sl->shm, r);
	/* pairs with the load_acquire of in_write in rp_writers_quiesce() */
	rp_store_release(&t->in_write, 0);
	return 0;
}


#ifdef RP_RSEQ_RESERVE
/* One 8-byte word of a record header at off (little-endian, as every
 * target of the rseq reservation is): four such stores write a header
 * that rp_record_fill() writes in seven, with the BUSY length in the
 * first as rp_ring_try_local() stores it. */
_Static_assert(offsetof(struct rp_shm_record, len) == 0 &&
	       offsetof(struct rp_shm_record, meta_id) == 4 &&
	       offsetof(struct rp_shm_record, timestamp) == 8 &&
	       offsetof(struct rp_shm_record, tid) == 16 &&
	       offsetof(struct rp_shm_record, seq) == 20 &&
	       offsetof(struct rp_shm_record, flags) == 24 &&
	       offsetof(struct rp_shm_record, payload_len) == 26 &&
	       offsetof(struct rp_shm_record, cpu) == 28 && sizeof(struct rp_shm_record) == 32,
	       "flat_word() knows the record header's layout");

static inline __attribute__((always_inline)) void flat_word(struct rp_shm_record *rec,
							    size_t off, uint64_t v)
{
	memcpy((char *)rec + off, &v, sizeof(v));
}

/* The end of a fast write whose commit found the drainer idle: the wake
 * write_events() gives, then the announce withdrawn (the session's memory
 * is used until then). The record went to the ring of the thread's view. */
static __attribute__((noinline)) int write_flat_wake(struct wthread *t)
{
	struct rp_shm *shm = rp_slots[t->fv.slot].shm;

	wake_idle_drainer(shm, &shm->rings[t->fv.cpu]);
	/* pairs with the load_acquire of in_write in rp_writers_quiesce() */
	rp_store_release(&t->in_write, 0);
	return 0;
}

/* A fast write that found the ring of its view full, in a Drop session:
 * the attempt, dropped and counted there, as write_events() does. */
static __attribute__((noinline)) int write_flat_full(struct wthread *t)
{
	++*t->fv.pseq;
	rp_ring_count_drop(&rp_slots[t->fv.slot].shm->rings[t->fv.cpu], RP_DROP_FULL);
	/* pairs with the load_acquire of in_write in rp_writers_quiesce() */
	rp_store_release(&t->in_write, 0);
	return -ENOBUFS;
}

/* A fast write that found it cannot finish: nothing was written or
 * counted, so the announce is withdrawn and the full path does it all.
 * The event's mask was the view's bit. */
static __attribute__((noinline)) int write_flat_retreat(struct wthread *t, struct rp_event *ev,
							const void *payload, size_t len)
{
	uint64_t mask = t->fv.bit;

	/* pairs with the load_acquire of in_write in rp_writers_quiesce() */
	rp_store_release(&t->in_write, 0);
	return write_flat_slow(ev, mask, payload, len);
}

/*
 * A fast write that found no view of its session and CPU (t->fv): one is
 * made, if the straight path may take this session, while the write is
 * still announced (the session's memory is read); then the straight line
 * of write_flat_slow() does this write, and the next ones take the view.
 */
static __attribute__((noinline)) int write_flat_view(struct wthread *t, struct rp_event *ev,
						     uint64_t mask, const void *payload,
						     size_t len)
{
	struct rseq *rs = t->rseq_area;
	struct slot *sl;
	struct rp_shm *shm;
	struct rp_ring *r;
	uint32_t gen, cpu;
	int i;

	/* the announce before the slot is read, as the straight path orders
	 * it (this one came here before its membarrier check) */
	announce_fence();
	t->fv.bit = 0;
	if (!(mask & (mask - 1)) && !(mask & RP_UE_BIT) && !t->ending_slot) {
		i = __builtin_ctzll(mask);
		sl = &rp_slots[i];
		/* pairs with the store_release of flat_gen in rp_session_start() */
		gen = rp_load_acquire(&sl->flat_gen);
		cpu = rp_load_relaxed(&rs->cpu_id_start);
		shm = sl->shm;
		if (gen == t->gen[i] && gen != RP_SLOT_NOT_FLAT && cpu < shm->nr_rings) {
			r = &shm->rings[cpu];
			t->fv = (struct flat_view){
				.bit = mask, .gen = gen, .cpu = cpu, .pflat = &sl->flat_gen,
				.pseq = &t->seq[i], .hdr = r->hdr, .size = r->size, .mask = r->mask,
				.data = r->data,
				.ring_word = (uint64_t)r->index << 32,
				.pidle = &shm->hdr->drainer_idle, .slot = i,
			};
		}
	}
	/* pairs with the load_acquire of in_write in rp_writers_quiesce() */
	rp_store_release(&t->in_write, 0);
	return write_flat_slow(ev, mask, payload, len);
}
#endif

/*
 * The flat write. Out of line, so that a disabled rp_event_write() stays a
 * load, a branch and a return. Nearly every enabled write is one Drop
 * session this thread has written to before, whose rings are reserved
 * without a CAS, with room in the ring of this CPU and a drainer that is
 * not asleep. That case is this straight line, which calls nothing: every
 * other case leaves by a tail call, before anything is counted or written,
 * so this function needs no stack frame and keeps its few values in
 * registers (a frame and the spills of the full path cost several
 * nanoseconds a write; Documentation/changelog.md). The steps and their
 * order are write_events()'s. The ring is reached through the thread's
 * view of it (t->fv), one load from the thread's own line for each
 * pointer, not through the slot, the session and the ring in turn.
 */
static __attribute__((noinline)) int write_flat(struct rp_event *ev, uint64_t mask,
						const void *payload, size_t len)
{
#ifdef RP_RSEQ_RESERVE
	struct wthread *t = rp_wt;
	struct rp_shm_record *rec;
	struct rseq *rs;
	uint32_t cpu, seq;
	__u64 pos, size;
	int rc;

	/* a payload of more than 64 bytes is copied by a call: the full
	 * path's */
	if (rp_unlikely(!t || len > RP_FLAT_MAX_PAYLOAD))
		return write_flat_slow(ev, mask, payload, len);
	/* announce, as in write_events(); a compiler barrier orders it only
	 * while membarrier works (fence.h), else the full path fences */
	rp_store_relaxed(&t->in_write, 1);
	/* the view is of one session's bit (never of the user_events bit),
	 * and of the CPU we run on */
	rs = t->rseq_area;
	cpu = rp_load_relaxed(&rs->cpu_id_start);
	if (rp_unlikely(mask != t->fv.bit || cpu != t->fv.cpu))
		return write_flat_view(t, ev, mask, payload, len);
	/* from here on mask is the view's bit, which the ways out reload
	 * rather than keep in a register */
	if (rp_unlikely(!rp_load_relaxed(&rp_membarrier_ok)))
		return write_flat_retreat(t, ev, payload, len);
	rp_compiler_barrier();
	/* every check of the session at once: flat_gen is the session's
	 * generation only while it is RUNNING, Drop, reserved locally, with a
	 * working output and the TSC clock (slots.h); the view holds the
	 * generation it was made for. Pairs with the store_release of
	 * flat_gen in rp_session_start(), as the state's load does in the
	 * full path: the slot's rings are mapped before we use them */
	if (rp_unlikely(t->fv.gen != rp_load_acquire(t->fv.pflat)))
		return write_flat_view(t, ev, t->fv.bit, payload, len);
	if (rp_unlikely(rp_usdt_event_armed()))
		return write_flat_retreat(t, ev, payload, len);
	/* at most max_record: flat_gen says it holds 64 payload bytes */
	size = rp_record_size(0, 0, (uint16_t)len);
	rc = rp_rseq_bump(rs, cpu, &t->fv.hdr->producer_pos, &t->fv.hdr->consumer_pos,
			  &t->fv.size, size, &pos);
	if (rp_unlikely(rc)) {
		if (rc < 0)	/* preempted, migrated or signalled: again, in full */
			return write_flat_retreat(t, ev, payload, len);
		return write_flat_full(t);
	}
	rec = (struct rp_shm_record *)(t->fv.data + (pos & t->fv.mask));
	seq = ++*t->fv.pseq;
	/* the header in whole words (flat_word() and the static asserts at
	 * its side): len (BUSY) with the event; flags 0, the payload's length
	 * and the ring; the payload; the thread and its number; last the
	 * time, stamped after the reservation (see write_events()). In this
	 * order the payload's pointer and length are done with before the
	 * clock is read, and the compiler needs no stack slot */
	flat_word(rec, 0, (uint64_t)ev->index << 32 | size | RP_REC_BUSY);
	flat_word(rec, 24, t->fv.ring_word | (uint64_t)len << 16);
	copy_small(rp_record_payload_at(rec, 0, 0), payload, len);
	flat_word(rec, 16, (uint64_t)seq << 32 | t->tid);
	flat_word(rec, 8, rp_clock_rdtsc());
	/* rp_ring_commit_len() of a length already aligned: pairs with the
	 * load_acquire of rec->len in rp_ring_peek() and rp_ring_peek_fast() */
	rp_store_release(&rec->len, (uint32_t)size);
	/* wake_drainer()'s look at the idle flag (membarrier works: the fence
	 * is a compiler barrier); its wake is write_flat_wake()'s */
	rp_compiler_barrier();
	if (rp_unlikely(rp_load_relaxed(t->fv.pidle)))
		return write_flat_wake(t);
	/* pairs with the load_acquire of in_write in rp_writers_quiesce() */
	rp_store_release(&t->in_write, 0);
	return 0;
#else
	return write_flat_slow(ev, mask, payload, len);
#endif
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
