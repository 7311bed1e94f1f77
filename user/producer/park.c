// SPDX-License-Identifier: MIT
/*
 * Block mode's waiter FIFO (park.h). A producer that finds its ring full
 * takes a ticket and sleeps on its own futex word until the head counter
 * reaches its ticket and its ring has room; the admitted head passes the
 * baton to the next ticket. The drainer wakes the head whenever it frees
 * space. Nobody waits for ever: every park polls abort and the drainer's
 * heartbeat, and teardown wakes every slot.
 */
#include <errno.h>
#include <stdint.h>

#include "atomics.h"
#include "clock.h"
#include "futex.h"
#include "park.h"
#include "session.h"
#include "threads.h"

void (*rp_test_admit_hook)(uint32_t ticket);
uint64_t rp_waiter_wake_ns;
uint64_t rp_drain_waiter_wakeups;

#define PARK_POLL_NS 20000000ull		/* recheck abort and liveness every 20 ms */

static void wake_slot(struct rp_shm_session *h, uint32_t ticket)
{
	struct rp_shm_waiter *w = &h->waiters[ticket % RP_SHM_WAITER_SLOTS];

	if (rp_test_admit_hook)
		rp_store_relaxed(&rp_waiter_wake_ns, rp_clock_mono_ns());
	/* pairs with the load_acquire of the word in park(): whoever sleeps
	 * on it either sees the new count or is woken */
	rp_fetch_add_release(&w->futex, 1);
	rp_futex_wake(&w->futex, INT32_MAX);
}

/* True when the session's drainer stopped beating its heart: the process
 * that drains it died or hangs. Then nobody may park on it again. */
static bool drainer_dead(struct rp_shm_session *h)
{
	uint64_t beat = rp_load_relaxed(&h->drainer_heartbeat_ns);
	uint64_t timeout = h->drainer_timeout_ns;

	return beat && rp_clock_mono_ns() - beat > timeout;
}

struct rp_shm_record *rp_park(struct wthread *t, struct rp_shm *shm, struct rp_ring **rp,
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
	/* takes a ticket; acq_rel: pairs with the load_acquire of waiter_tail
	 * by the head deciding whether to pass the baton */
	ticket = rp_fetch_add_acq_rel(&h->waiter_tail, 1);
	w = &h->waiters[ticket % RP_SHM_WAITER_SLOTS];
	rp_store_relaxed(&w->tid, t->tid);
	rp_store_relaxed(&w->ticket, ticket);
	for (;;) {
		/* read the wake counter before the conditions: a wake between
		 * this load and FUTEX_WAIT changes the word and the wait returns
		 * (pairs with the fetch_add_release of the word in wake_slot()) */
		uint32_t word = rp_load_acquire(&w->futex);

		/* pairs with the store_release of abort in
		 * rp_session_abort_waiters() or by a producer that found the
		 * drainer dead */
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
				/* pairs with the fetch_add of waiter_tail by a
				 * producer taking its ticket */
				if (rp_load_acquire(&h->waiter_tail) != ticket + 1)
					wake_slot(h, ticket + 1);	/* pass the baton */
				*rp = r;
				return rec;
			}
		}
		if (drainer_dead(h)) {
			/* everyone leaves: the queue order no longer matters
			 * (pairs with the load_acquire of abort above) */
			rp_store_release(&h->abort, 1);
			wake_slot(h, rp_load_relaxed(&h->waiter_head));
			return NULL;
		}
		/* an idle drainer would otherwise sleep out its timeout */
		if (rp_load_relaxed(&h->drainer_idle))
			rp_drainer_wake_idle(h);
		rp_futex_wait(&w->futex, word, PARK_POLL_NS);
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

#define ROOM_POLL_NS 50000ull	/* how often a full ring is rechecked */

/* The stopping thread does not join the FIFO, whose producers stop may
 * abort; waiting cannot deadlock, since the drainer waits on nothing it
 * holds. Gives up (a counted drop) only when the drainer is dead or failed. */
struct rp_shm_record *rp_wait_room(struct rp_session *s, struct rp_shm *shm,
				       struct rp_ring *r, uint32_t size)
{
	struct rp_shm_session *h = shm->hdr;
	struct rp_shm_record *rec;

	for (;;) {
		rec = rp_ring_reserve(r, size);
		if (rec || drainer_dead(h) || rp_load_relaxed(&s->output_error))
			return rec;
		if (rp_load_relaxed(&h->drainer_idle))
			rp_drainer_wake_idle(h);
		rp_clock_sleep_ns(ROOM_POLL_NS);
	}
}


void rp_drainer_wake_waiters(struct rp_shm *shm)
{
	struct rp_shm_session *h = rp_shm_header(shm);
	/* pairs with the store_release of waiter_head by an admitted head */
	uint32_t head = rp_load_acquire(&h->waiter_head);

	/* pairs with the fetch_add of waiter_tail by a producer taking a ticket */
	if (head == rp_load_acquire(&h->waiter_tail))
		return;
	/* space was freed: wake the head only; it passes the baton on */
	wake_slot(h, head);
	rp_add_relaxed(&rp_drain_waiter_wakeups, 1);
}
