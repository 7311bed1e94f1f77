/* SPDX-License-Identifier: MIT */
/*
 * The registry of writing threads: each thread that writes gets a state
 * (its sequence numbers per session, its stack bounds, whether it may park)
 * on its first write, registered so that stop can wait until no thread is
 * inside a write (session.h) and collect every thread's last sequence
 * number. Fork leaves the child with its one thread and no session.
 */
#ifndef RINGPIPE_THREADS_H
#define RINGPIPE_THREADS_H

#include <stdbool.h>
#include <stdint.h>

#include "ringpipe/ringpipe.h"

#define RP_SEQ_BASE 1u		/* a thread's number before its first attempt */

struct rp_session;
struct rp_shm_ring;

/*
 * The flat write's view of one session's ring on one CPU (write.c): what it
 * would otherwise reach through the slot, the session's rings and the
 * ring's header, one pointer after another. Valid only while gen is the
 * slot's flat_gen, read after the write announced itself: a session that
 * stops clears flat_gen before its memory goes, and a new session in the
 * slot has another generation.
 */
struct flat_view {
	uint64_t bit;		/* the session's bit in an event's mask; 0: none */
	uint32_t gen;		/* the session's generation */
	uint32_t cpu;		/* the CPU whose ring this is */
	const uint32_t *pflat;	/* the slot's flat_gen */
	uint32_t *pseq;		/* this thread's sequence number for the slot */
	struct rp_shm_ring *hdr;	/* the ring's header (its positions) */
	uint64_t size;		/* its data size (a power of two) */
	uint64_t mask;		/* its offset mask, which keeps records 8-aligned
				 * even from a scribbled position (ring.h) */
	unsigned char *data;	/* its data */
	uint64_t ring_word;	/* the ring's index, as the header's last word
				 * holds it (write.c) */
	const uint32_t *pidle;	/* the session's drainer_idle */
	int slot;		/* the session's slot */
};

struct wthread {
	uint32_t in_write;	/* atomic: inside a write (a count for rp_no_state) */
	uint32_t tid;
	struct flat_view fv;
	void *rseq_area;	/* this thread's struct rseq (ring_local.h), kept
				 * here so the flat write finds it with one load */
	uint32_t gen[RP_MAX_SESSIONS];	/* slot generation the seq belongs to */
	uint32_t seq[RP_MAX_SESSIONS];
	uint32_t place_gen[RP_MAX_SESSIONS];	/* Block: the pass held (park.h) */
	uint8_t place[RP_MAX_SESSIONS];	/* its place + 1; 0: none */
	uintptr_t stack_lo, stack_hi;
	bool no_park;		/* the rundown thread and the like never park */
	uint32_t waiting;	/* atomic: inside a write but holding no
				 * reservation (Block's queue, a stopping
				 * thread waiting for room): what the ring's
				 * reader asks of an uncommitted head */
	uint64_t inside_mark;	/* the oldest mark of rp_writers_inside()
				 * that found it inside a write and has not
				 * seen it leave; 0: none. Under the registry
				 * lock */
	int ending_slot;	/* slot + 1 while this thread runs that session's
				 * stopping callbacks; 0 otherwise */
	struct wthread *next, *prev;
} __attribute__((aligned(64)));	/* its own lines (threads.c) */

/* The calling thread's state, NULL before its first write. initial-exec: a
 * shared libringpipe reaches it with one %fs-relative load instead of a
 * __tls_get_addr() call on every write (8 bytes of the static TLS that glibc
 * keeps spare even for libraries loaded with dlopen). */
extern __thread struct wthread *rp_wt __attribute__((tls_model("initial-exec")));

/* The registry entry shared by writers that could get no state of their own:
 * its in_write is a count, so stop still waits for them. */
extern struct wthread rp_no_state;

/* Test hook: the next registrations fail (an allocation failure). */
extern int rp_test_fail_alloc;

/* The calling thread's state, registering it on first use; NULL when no
 * memory could be had. */
struct wthread *rp_wthread_get(void);

int rp_writers_init(void);
/* Stop: returns once no registered thread is inside a write. */
void rp_writers_quiesce(void);
/* The session takes exiting threads' final sequence numbers from now on. */
void rp_writers_attach(struct rp_session *s);
/* Appends every live thread's final sequence number for a slot/gen. */
void rp_writers_collect_finals(struct rp_session *s);
void rp_session_add_final(struct rp_session *s, uint32_t tid, uint32_t seq);

/*
 * Whether the writer of an uncommitted record can still commit it (threads.c):
 * a mark, taken after the record was seen uncommitted, then looks until
 * every thread that was inside a write at the mark has been seen outside
 * (true: the record is nobody's).
 */
uint64_t rp_writers_mark(void);
bool rp_writers_left(uint64_t mark);

/* The calling thread never parks (rundown, drainer-side writers). */
void rp_thread_set_no_park(bool no_park);
/* The calling thread runs a session's stopping callbacks: its events go to
 * that session only (even ENDING), and a full ring waits for the drainer. */
int rp_thread_begin_ending(int slot);
void rp_thread_end_ending(void);

#endif /* RINGPIPE_THREADS_H */
