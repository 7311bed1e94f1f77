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
 * everyone who arrived meanwhile; a holder that stops writing while others
 * wait loses its pass to the next ticket within a bound. So a wait costs
 * one sleep and one wake per quantum (thousands of events), not per event,
 * and nobody is overtaken by a producer that arrived after it.
 *
 * All of it is process-private: a process that maps the session's memory
 * can scribble over every shared word and still neither end the session nor
 * make a producer give up. What producers read from shared memory (the ring
 * positions, the space_freed word) are hints. A waiter gives up only on a
 * fact (Documentation/sessions.md, "Block mode"): the session stops, its
 * output fails, the agent draining it goes away, or the session's explicit
 * bound on one wait (block_timeout_ms, off by default) passes.
 */
#ifndef RINGPIPE_PARK_H
#define RINGPIPE_PARK_H

#include <stdbool.h>
#include <stdint.h>

#include "core/atomics.h"
#include "core/futex.h"
#include "core/ring.h"

struct rp_session;
struct wthread;

#define RP_BQ_WORDS 64u		/* futex words; tickets 64 apart share one */
#define RP_BQ_PLACES 16u	/* passes that can be held at once */
#define RP_BQ_LEFT 64u		/* notes of tickets whose waiters left */

/*
 * A pass, held by one thread. gen is odd while held and even while free;
 * it moves by CAS only (a claim, the holder's end of the pass, a revoke),
 * so whoever moves it from held to free gives the place back, once. The
 * holder alone writes left and last_ts, with plain stores to a line of its
 * own; others read them as hints.
 */
struct rp_bq_place {
	uint32_t gen;
	int32_t left;		/* bytes the holder may still write */
	uint64_t last_ts;	/* rp_clock_now() ticks of its last write */
	uint32_t tid;		/* the holder's */
	uint8_t __pad[44];
};

/* One Block session's queue, by slot; in process memory, never shared. */
struct rp_block_queue {
	uint32_t tail;			/* next ticket (fetch_add by producers) */
	uint8_t __pad0[60];
	uint32_t admit;			/* tickets below it are admitted */
	int32_t passes;			/* tickets admitted whose pass has not
					 * ended, waiting for room or writing (a
					 * hint: a holder may have stopped writing) */
	uint32_t abort;			/* teardown, or the agent draining the
					 * session went away: drop */
	uint32_t room;			/* futex: bumped when space is freed */
	uint32_t room_waiters;		/* admitted producers waiting for room */
	uint8_t __pad1[44];
	uint64_t block_timeout_ns;	/* the user's bound on one wait; 0: none */
	uint64_t __pad_ns;
	uint32_t quantum;		/* bytes a pass lets its holder write */
	uint32_t concurrency;		/* passes the drainer keeps handed out */
	uint64_t idle_ticks;		/* a holder asleep that wrote nothing
					 * this long has stopped: its place is
					 * revoked */
	uint64_t stalled_ticks;		/* the same for a holder that could run */
	uint8_t __pad2[24];
	uint32_t words[RP_BQ_WORDS];	/* where ticket t sleeps: words[t % 64] */
	struct rp_bq_place places[RP_BQ_PLACES];
	uint64_t seen_running[RP_BQ_PLACES];	/* when an admitter last found a
						 * place's holder able to run */
	uint32_t left[RP_BQ_LEFT];	/* ticket + 1 of a waiter that left
					 * before its admission (park.c) */
};

_Static_assert(sizeof(struct rp_bq_place) == 64, "a place is one cache line");

extern struct rp_block_queue rp_block_queues[RP_MAX_SESSIONS];

/* Before a session's slot goes RUNNING: an empty queue, the session's bound
 * on one wait (0: none), passes sized for rings of ring_size bytes. */
void rp_block_reset(int slot, uint64_t block_timeout_ns, uint64_t ring_size, uint32_t nr_rings);

/* True when a producer without a pass must queue: others are waiting. */
static inline int rp_block_must_queue(int slot)
{
	struct rp_block_queue *q = &rp_block_queues[slot];

	return rp_load_relaxed(&q->tail) != rp_load_relaxed(&q->admit);
}

/* True when producers of slot wait for the drainer: tickets queued, or
 * admitted ones waiting for room (relaxed: a hint for the drainer's pace). */
static inline bool rp_block_waiting(int slot)
{
	struct rp_block_queue *q = &rp_block_queues[slot];

	return rp_block_must_queue(slot) || rp_load_relaxed(&q->room_waiters);
}

/*
 * Queues the producer and returns its record once it is admitted and its
 * ring has room (*rp: that ring), with a pass for the writes that follow; or
 * NULL when the session was aborted, its output failed or this wait passed
 * the session's bound (*reason says which drop to count).
 */
struct rp_shm_record *rp_park(struct wthread *t, int slot, struct rp_shm *shm,
			      struct rp_ring **rp, uint32_t size, unsigned int *reason);

/* A pass holder wrote size bytes at ts (rp_clock_now()); the pass ends when
 * its quantum is spent. */
static inline void rp_pass_spend(struct wthread *t, int slot, uint32_t size, uint64_t ts);

/* Ends the calling thread's pass in slot (if it holds one). */
void rp_pass_end(struct wthread *t, int slot);

/* A pass in slot ended (spent, given back, or never used): its place goes
 * to the next ticket. */
void rp_pass_ended(int slot);

/*
 * The thread running a session's stopping callbacks found its ring full: it
 * waits for room outside the queue (nobody else writes to the session any
 * more, and the drainer waits on nothing it holds). NULL only when the
 * output failed or the agent draining the session went away.
 */
struct rp_shm_record *rp_wait_room(struct wthread *t, struct rp_session *s, struct rp_shm *shm,
				   struct rp_ring **rp, uint32_t size);

/* The drainer freed space in a ring of slot (free_bytes now free there):
 * wakes producers waiting for room and admits the next batch of tickets. */
void rp_block_space_freed(int slot, uint64_t free_bytes);

/* How often tickets that wait look for holders that stopped writing: the
 * next ticket, and the in-process drainer while its rings are empty. */
#define RP_BLOCK_IDLE_POLL_NS 400000ull

/* The in-process drainer found its rings empty while tickets wait: the
 * places of holders that stopped writing go to the next tickets (nobody
 * else would free them before the next ticket's poll). True while tickets
 * wait: the drainer then sleeps at most RP_BLOCK_IDLE_POLL_NS. */
bool rp_block_drainer_idle(int slot);

/* Teardown, or the agent draining the session went away: every waiter of
 * slot gives up and drops (counted as aborted), and nobody parks again. */
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

/* Whether the calling thread holds a pass in slot; a pass revoked since is
 * forgotten here. */
static inline bool rp_pass_held(struct wthread *t, int slot)
{
	uint32_t pl = t->place[slot];

	if (rp_likely(!pl))
		return false;
	/* relaxed: a revoke seen late lets one more record in, which the
	 * fairness bound allows (Documentation/sessions.md) */
	if (rp_load_relaxed(&rp_block_queues[slot].places[pl - 1].gen) == t->place_gen[slot])
		return true;
	t->place[slot] = 0;
	return false;
}

static inline void rp_pass_spend(struct wthread *t, int slot, uint32_t size, uint64_t ts)
{
	struct rp_bq_place *p;
	int32_t left;

	/* none, or revoked since the write began: queue with the next one */
	if (!rp_pass_held(t, slot))
		return;
	p = &rp_block_queues[slot].places[t->place[slot] - 1];
	left = rp_load_relaxed(&p->left) - (int32_t)size;
	if (left > 0) {
		rp_store_relaxed(&p->left, left);
		rp_store_relaxed(&p->last_ts, ts);
		return;
	}
	rp_pass_end(t, slot);
}

#endif /* RINGPIPE_PARK_H */
