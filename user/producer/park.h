/* SPDX-License-Identifier: MIT */
/*
 * Block mode: producers that find their ring full wait until the drainer
 * frees space, in ticket order, without making the process run at the speed
 * of one futex hand-off per event (Documentation/sessions.md, "Block mode").
 *
 * Admission is by passes. A producer that must wait takes a ticket and
 * sleeps on a word of its own; tickets are admitted in order, a batch at a
 * time, by the drainer when it frees space (or by the next ticket itself
 * when it finds room and nobody else writes). An admitted producer holds a
 * pass: it writes on without looking at the queue until it has written a
 * quantum of bytes or finds its ring full again, then queues anew behind
 * everyone who arrived meanwhile. So a wait costs one sleep and one wake per
 * quantum (thousands of events), not per event, and nobody is overtaken by
 * a producer that arrived after it.
 *
 * All of it is process-private: a process that maps the session's memory
 * can scribble over every shared word and still neither keep a producer
 * asleep nor end the session. What producers read from shared memory (the
 * ring positions, an out-of-process drainer's heartbeat) are hints that
 * bound nothing: every park is bounded by the session's own timeout.
 */
#ifndef RINGPIPE_PARK_H
#define RINGPIPE_PARK_H

#include <stdint.h>

#include "atomics.h"
#include "futex.h"
#include "ring.h"

struct rp_session;
struct wthread;

#define RP_BQ_WORDS 64u		/* futex words; tickets 64 apart share one */

/* One Block session's queue, by slot; in process memory, never shared. */
struct rp_block_queue {
	uint32_t tail;			/* next ticket (fetch_add by producers) */
	uint8_t __pad0[60];
	uint32_t admit;			/* tickets below it are admitted */
	int32_t passes;			/* tickets admitted whose pass has not
					 * ended, waiting for room or writing (a
					 * hint: a holder may have stopped writing) */
	uint32_t abort;			/* teardown or a dead drainer: drop */
	uint32_t room;			/* futex: bumped when space is freed */
	uint32_t room_waiters;		/* admitted producers waiting for room */
	uint8_t __pad1[44];
	uint64_t heartbeat_ns;		/* the in-process drainer's, or 0 */
	uint64_t timeout_ns;		/* a drainer silent this long is dead */
	uint32_t quantum;		/* bytes a pass lets its holder write */
	uint32_t concurrency;		/* passes the drainer keeps handed out */
	uint8_t __pad2[40];
	uint32_t words[RP_BQ_WORDS];	/* where ticket t sleeps: words[t % 64] */
};

extern struct rp_block_queue rp_block_queues[RP_MAX_SESSIONS];

/* Before a Block session's slot goes RUNNING: an empty queue, a private copy
 * of the drainer timeout, passes sized for rings of ring_size bytes. */
void rp_block_reset(int slot, uint64_t timeout_ns, uint64_t ring_size, uint32_t nr_rings);

/* True when a producer without a pass must queue: others are waiting. */
static inline int rp_block_must_queue(int slot)
{
	struct rp_block_queue *q = &rp_block_queues[slot];

	return rp_load_relaxed(&q->tail) != rp_load_relaxed(&q->admit);
}

/*
 * Queues the producer and returns its record once it is admitted and its
 * ring has room (*rp: that ring), with a pass for the writes that follow; or
 * NULL when the session was aborted or its drainer is dead (*reason says
 * which drop to count).
 */
struct rp_shm_record *rp_park(struct wthread *t, int slot, struct rp_shm *shm,
			      struct rp_ring **rp, uint32_t size, unsigned int *reason);

/* A pass holder wrote size bytes; the pass ends when its quantum is spent. */
static inline void rp_pass_spend(struct wthread *t, int slot, uint32_t size);

/* Ends the calling thread's pass in slot (if it holds one). */
void rp_pass_end(struct wthread *t, int slot);

/* A pass in slot ended (spent, given back, or never used): its place goes
 * to the next ticket. */
void rp_pass_ended(int slot);

/*
 * The thread running a session's stopping callbacks found its ring full: it
 * waits for room outside the queue (nobody else writes to the session any
 * more, and the drainer waits on nothing it holds). NULL only when the
 * drainer is dead or failed.
 */
struct rp_shm_record *rp_wait_room(struct rp_session *s, struct rp_shm *shm,
				   struct rp_ring **rp, uint32_t size);

/* The in-process drainer of slot is alive (a private heartbeat). */
void rp_block_heartbeat(int slot);

/* The drainer freed space in a ring of slot (free_bytes now free there):
 * wakes producers waiting for room and admits the next batch of tickets. */
void rp_block_space_freed(int slot, uint64_t free_bytes);

/* Teardown: every waiter of slot gives up and drops (counted). */
void rp_block_abort(int slot);

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

/* Test hooks: called by the admitter with each ticket as it is admitted,
 * in the order of admission; with it set, rp_waiter_wake_ns is the
 * CLOCK_MONOTONIC ns of the last wake of a parked producer. */
extern void (*rp_test_admit_hook)(uint32_t ticket);
extern uint64_t rp_waiter_wake_ns;
/* Benchmarks: called at the end of every park with how long it took and
 * whether the producer was admitted (else it drops). */
extern void (*rp_bench_park_hook)(uint64_t park_ns, int admitted);
/* Wakes of parked producers, process-wide (benchmarks). */
extern uint64_t rp_drain_waiter_wakeups;

#include "threads.h"

static inline void rp_pass_spend(struct wthread *t, int slot, uint32_t size)
{
	int32_t left = t->pass[slot];

	if (rp_likely(left <= 0))
		return;
	left -= (int32_t)size;
	t->pass[slot] = left > 0 ? left : 0;
	if (left <= 0)
		rp_pass_ended(slot);
}

#endif /* RINGPIPE_PARK_H */
