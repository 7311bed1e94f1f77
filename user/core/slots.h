/* SPDX-License-Identifier: MIT */
/*
 * The session slot table: up to RP_MAX_SESSIONS sessions, each one bit in
 * every event's session mask. Writers find a session through its slot, never
 * through a pointer they keep (see session.h for the lifetime rules), and the
 * control lock serializes every change of which sessions exist and what they
 * enable.
 */
#ifndef RINGPIPE_SLOTS_H
#define RINGPIPE_SLOTS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "ringpipe/ringpipe.h"

struct rp_session;
struct rp_shm;

enum slot_state {
	SLOT_FREE = 0,
	SLOT_STARTING,
	SLOT_RUNNING,
	SLOT_ENDING,		/* stopping callbacks run: only their thread writes */
	SLOT_STOPPING,
	SLOT_RESERVED,		/* never a session: user_events' enable bit (user_events.h) */
};

/* The largest payload the flat write copies itself (write.c) */
#define RP_FLAT_MAX_PAYLOAD 64u

/* flat_gen of a slot whose writes cannot take the flat path; no session's
 * generation is ever this value (rp_slot_next_gen()) */
#define RP_SLOT_NOT_FLAT UINT32_MAX

struct slot {
	uint32_t state;			/* enum slot_state; atomic */
	uint32_t gen;			/* bumped when the slot is reused */
	/* atomic: gen while every check of the flat write (write.c) passes
	 * for this session (RUNNING, Drop, rings reserved locally, no failed
	 * output, the TSC clock, room for a record of 64 payload bytes),
	 * RP_SLOT_NOT_FLAT otherwise. The flat write compares it with the
	 * thread's generation for the slot: one load and one compare for
	 * all of them. Cleared before any of them stops holding. */
	uint32_t flat_gen;
	int output_error;		/* atomic: 0, or the negative errno of the
					 * session's failed output; writers then
					 * drop (RP_DROP_OUTPUT) and return it */
	struct rp_session *session;
	struct rp_shm *shm;		/* valid while RUNNING */
	bool block;			/* Block mode: a full ring parks the writer */
	bool local_rings;		/* every writer reserves in its CPU's ring
					 * without a CAS (ring_local.h) */
} __attribute__((aligned(64)));	/* what a write reads of it: one line */

/* The generation after gen for a slot's next session: never 0 (a thread's
 * table starts at 0) nor RP_SLOT_NOT_FLAT. */
static inline uint32_t rp_slot_next_gen(uint32_t gen)
{
	gen++;
	return gen == 0 || gen == RP_SLOT_NOT_FLAT ? 1 : gen;
}

/* the table; state changes under rp_control_lock, read lock-free */
extern struct slot rp_slots[RP_MAX_SESSIONS];
/* providers, events, slots and enable masks change only under it */
extern pthread_mutex_t rp_control_lock;

#endif /* RINGPIPE_SLOTS_H */
