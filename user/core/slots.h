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

struct slot {
	uint32_t state;			/* enum slot_state; atomic */
	uint32_t gen;			/* bumped when the slot is reused */
	struct rp_session *session;
	struct rp_shm *shm;		/* valid while RUNNING */
	bool block;			/* Block mode: a full ring parks the writer */
	bool local_rings;		/* every writer reserves in its CPU's ring
					 * without a CAS (ring_local.h) */
	int output_error;		/* atomic: 0, or the negative errno of the
					 * session's failed output; writers then
					 * drop (RP_DROP_OUTPUT) and return it */
};

/* the table; state changes under rp_control_lock, read lock-free */
extern struct slot rp_slots[RP_MAX_SESSIONS];
/* providers, events, slots and enable masks change only under it */
extern pthread_mutex_t rp_control_lock;

#endif /* RINGPIPE_SLOTS_H */
