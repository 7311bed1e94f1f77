/* SPDX-License-Identifier: MIT */
/*
 * Block mode: producers that find their ring full park in the session's
 * waiter FIFO (include/ringpipe/abi.h, Documentation/sessions.md) until the
 * drainer frees space, the session is torn down or its drainer is found
 * dead. Both halves of the protocol live here: the producers' park and the
 * drainer's wake of the head.
 */
#ifndef RINGPIPE_PARK_H
#define RINGPIPE_PARK_H

#include <stdint.h>

#include "atomics.h"
#include "futex.h"
#include "ring.h"

struct rp_session;
struct wthread;

/*
 * Waits in the session's FIFO until this producer is at the head and its
 * ring has room; returns the reserved record (*rp: the ring it is in), or
 * NULL when the session was aborted or its drainer is dead (*reason says
 * which drop to count).
 */
struct rp_shm_record *rp_park(struct wthread *t, struct rp_shm *shm, struct rp_ring **rp,
			      uint32_t size, unsigned int *reason);

/*
 * The thread running a session's stopping callbacks found its ring full: it
 * waits for room outside the FIFO (nobody else writes to the session any
 * more, and the drainer waits on nothing it holds). NULL only when the
 * drainer is dead or failed.
 */
struct rp_shm_record *rp_wait_room(struct rp_session *s, struct rp_shm *shm,
				   struct rp_ring *r, uint32_t size);

/* The drainer freed space: wakes the head of the queue, which passes the
 * baton on once admitted. */
void rp_drainer_wake_waiters(struct rp_shm *shm);

/* Raises the abort flag and wakes every parked producer (teardown). */
void rp_session_abort_waiters(struct rp_shm *shm);

/*
 * Wakes a drainer that declared itself idle; one caller wins the flag. The
 * exchange is a full barrier, so the caller's earlier commits are visible to
 * the drainer's look at the rings after it wakes (pairs with the store of
 * drainer_idle and the rp_fence_heavy() in drain.c's sleep_idle()).
 */
static inline void rp_drainer_wake_idle(struct rp_shm_session *h)
{
	if (rp_xchg_acq_rel(&h->drainer_idle, 0)) {
		rp_add_relaxed(&h->drainer_wake, 1);
		rp_futex_wake(&h->drainer_wake, 1);
	}
}

/* Test hooks: called with each ticket admitted after parking; with it set,
 * rp_waiter_wake_ns is the CLOCK_MONOTONIC ns of the last wake of a parked
 * producer (by the drainer, or by a head passing the baton). */
extern void (*rp_test_admit_hook)(uint32_t ticket);
extern uint64_t rp_waiter_wake_ns;
/* Wakeups of parked producers by drainers, process-wide (benchmarks). */
extern uint64_t rp_drain_waiter_wakeups;

#endif /* RINGPIPE_PARK_H */
