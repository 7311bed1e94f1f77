// SPDX-License-Identifier: MIT
/*
 * Block mode's admission by passes (park.h).
 *
 *   producer                     queue (private)                drainer
 *   ring full, or others  ──►  t = tail++ ; sleep on words[t%64]
 *   waiting and no pass         admit ≤ t: still waiting      frees space:
 *                               admit > t: admitted   ◄──  admit += batch,
 *   reserve (or wait for room),                            bump + wake words
 *   pass = quantum bytes ──► writes on, queue unseen, until the quantum is
 *                            spent or its ring is full: then queues again
 *
 * A pass that ends hands its place to the next ticket (hand_off()): the
 * queue does not wait for the drainer's next release to move. A batch tops
 * the places held up to `concurrency` (the number of rings, at most the
 * CPUs less one: more writers than CPUs cannot write faster, only switch
 * more, and the drainer that paces them needs a CPU too); when a
 * ring is three quarters empty the next ticket is admitted whatever the
 * count says, since a holder may have stopped writing. The next ticket may
 * also admit itself when its ring has room for a quantum: an idle drainer
 * frees nothing and so would admit nobody.
 *
 * What ends a wait. Only facts: the private abort flag (the session stops,
 * or the host agent that drained it went away: agent_join.c raises it), a
 * failed output (the slot's output_error), and the session's own bound on
 * one wait when its user gave one (block_timeout_ns, off by default). How
 * long the drainer was silent decides nothing: a stopped, frozen or
 * throttled process, a reader that pauses and an agent that is stopped are
 * alive, and their waiters wait. Each sleep is at most PARK_POLL_NS, which
 * only bounds how late a missed wake is noticed.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "atomics.h"
#include "clock.h"
#include "futex.h"
#include "park.h"
#include "procfs.h"
#include "ring_local.h"
#include "session.h"
#include "threads.h"

struct rp_block_queue rp_block_queues[RP_MAX_SESSIONS];
void (*rp_test_admit_hook)(uint32_t ticket);
void (*rp_bench_park_hook)(uint64_t park_ns, int admitted);
uint64_t rp_waiter_wake_ns;
uint64_t rp_drain_waiter_wakeups;

#define PARK_POLL_NS 20000000ull	/* a waiter looks again every 20 ms */
#define ROOM_POLL_NS 1000000ull		/* an admitted producer rechecks its ring */
#define PLACE_IDLE_NS 50000ull	/* a holder asleep this long has stopped */
#define PLACE_STALLED_NS 5000000ull	/* any holder silent this long has */
#define HEAD_POLL_NS RP_BLOCK_IDLE_POLL_NS	/* the next ticket looks for them */

static uint64_t ns_to_ticks(uint64_t ns)
{
	uint64_t hz = rp_clock_frequency();

	return hz / 1000000000ull * ns + hz % 1000000000ull * ns / 1000000000ull;
}

/*
 * How many passes may be held at once: one per ring, but no more than the
 * CPUs this process may run on, less one. Once anyone waits, the drainer
 * paces every writer, and a holder beyond what leaves it a CPU of its own
 * writes no faster: it only takes the drainer's CPU time (with 2 holders on
 * 2 CPUs the drainer of a 1 MiB session sat runnable but not running for up
 * to a third of a run; Documentation/changelog.md, 2026-12-03, has the A/B).
 */
static uint32_t passes_at_once(uint32_t nr_rings)
{
	cpu_set_t set;
	uint32_t n = nr_rings ? nr_rings : 1, cpus;

	if (sched_getaffinity(0, sizeof(set), &set))
		return n;
	cpus = (uint32_t)CPU_COUNT(&set);
	if (cpus > 1 && cpus - 1 < n)
		n = cpus - 1;
	return n;
}

void rp_block_reset(int slot, uint64_t block_timeout_ns, uint64_t ring_size, uint32_t nr_rings)
{
	struct rp_block_queue *q = &rp_block_queues[slot];
	uint64_t quantum;

	memset(q, 0, sizeof(*q));
	q->block_timeout_ns = block_timeout_ns;
	q->concurrency = passes_at_once(nr_rings);
	/* the passes held at once share half a ring: a holder writes
	 * thousands of events per pass, and the drainer keeps half of every
	 * ring to free while they do */
	quantum = ring_size / 2 / q->concurrency;
	if (quantum > INT32_MAX)
		quantum = INT32_MAX;
	q->quantum = quantum < 4096 ? 4096 : (uint32_t)quantum;
	q->idle_ticks = ns_to_ticks(PLACE_IDLE_NS);
	q->stalled_ticks = ns_to_ticks(PLACE_STALLED_NS);
}

/* An admitted producer that got its record takes a free place for its pass
 * (*gen: the place's generation while it holds it); 0 when every place is
 * held. */
static uint32_t place_claim(struct rp_block_queue *q, uint32_t tid, uint32_t *gen)
{
	uint32_t i;

	for (i = 0; i < RP_BQ_PLACES; i++) {
		struct rp_bq_place *p = &q->places[i];
		uint32_t g = rp_load_relaxed(&p->gen);

		if (g & 1)
			continue;
		/* before the claim, so that a revoker that sees the place held
		 * sees a fresh time (a racing claimer that loses only wrote a
		 * fresh time too) */
		rp_store_relaxed(&p->last_ts, rp_clock_now());
		rp_store_relaxed(&p->left, (int32_t)q->quantum);
		rp_store_relaxed(&p->tid, tid);
		/* release: pairs with the load_acquire of gen in revoke_idle() */
		if (!rp_cas_acq_rel(&p->gen, &g, g + 1))
			continue;
		*gen = g + 1;
		return i + 1;
	}
	return 0;
}

/* Whether thread tid of this process can run now (runnable, or running
 * something else than a write): the scheduler's state of it, "R" in its
 * stat file. False when that cannot be read. */
static bool thread_can_run(uint32_t tid)
{
	struct rp_proc_stat st;
	char path[48];

	snprintf(path, sizeof(path), "/proc/self/task/%u/stat", tid);
	return !rp_proc_stat_read(AT_FDCWD, path, &st) && st.state == 'R';
}

/*
 * Frees the places of holders that stopped writing in the middle of their
 * passes: asleep (waiting for work) and silent for idle_ticks, or silent
 * for stalled_ticks whatever they do. Such a holder would otherwise keep
 * its place until it writes again, and with every place so held only the
 * three-quarters rule admits anyone. One that can run and was silent for
 * less is taken to have lost its CPU for a while (a scheduler's time
 * slice): it is about to write on, and revoking it costs it the rest of
 * its pass and the queue one more writer than CPUs. The holder finds out
 * at its next write (rp_pass_held()) and queues. Returns how many were
 * freed; the caller admits.
 */
static uint32_t revoke_idle(struct rp_block_queue *q)
{
	uint64_t now = rp_clock_now();
	uint32_t i, n = 0;

	for (i = 0; i < RP_BQ_PLACES; i++) {
		struct rp_bq_place *p = &q->places[i];
		/* pairs with the CAS of gen in place_claim(): last_ts is
		 * this claim's or later */
		uint32_t g = rp_load_acquire(&p->gen);
		int64_t silent;

		if (!(g & 1))
			continue;
		silent = (int64_t)(now - rp_load_relaxed(&p->last_ts));
		if (silent < (int64_t)q->idle_ticks)
			continue;
		if (silent < (int64_t)q->stalled_ticks) {
			/* the stat file costs microseconds: read it once per
			 * idle_ticks per place (admitters race here harmlessly) */
			uint64_t seen = rp_load_relaxed(&q->seen_running[i]);

			if ((int64_t)(now - seen) < (int64_t)q->idle_ticks)
				continue;
			if (thread_can_run(rp_load_relaxed(&p->tid))) {
				rp_store_relaxed(&q->seen_running[i], now);
				continue;
			}
		}
		/* the CAS decides who frees the place, once: this or the
		 * holder's end of its pass (rp_pass_end()); gen makes a place
		 * freed and claimed again meanwhile fail it */
		if (rp_cas_acq_rel(&p->gen, &g, g + 1)) {
			rp_add_relaxed(&q->passes, -1);
			n++;
		}
	}
	return n;
}

/* Whether a place is open for the next ticket: fewer passes out than the
 * concurrency, or a place just taken back from a holder that stopped. */
static bool place_open(struct rp_block_queue *q)
{
	return rp_load_relaxed(&q->passes) < (int32_t)q->concurrency || revoke_idle(q);
}

/* Wakes the producers sleeping on ticket t's word. */
static void wake_ticket(struct rp_block_queue *q, uint32_t t)
{
	uint32_t *w = &q->words[t % RP_BQ_WORDS];

	if (rp_load_relaxed(&rp_test_admit_hook))
		rp_store_relaxed(&rp_waiter_wake_ns, rp_clock_mono_ns());
	/* pairs with the load_acquire of the word in rp_park(): a sleeper
	 * either sees the new value or is woken */
	rp_fetch_add_release(w, 1);
	rp_futex_wake(w, INT32_MAX);
	rp_add_relaxed(&rp_drain_waiter_wakeups, 1);
}

/*
 * A waiter that leaves before its ticket is admitted (its own time bound,
 * or the output failed) notes the ticket, so that its admission takes no
 * place among the passes. Tickets RP_BQ_LEFT apart share a note: a second
 * one overwrites the first, whose place is then counted until the
 * three-quarters rules move the queue past it (the count is a hint).
 */
static void ticket_abandon(struct rp_block_queue *q, uint32_t t)
{
	/* pairs with the xchg in ticket_abandoned() */
	rp_store_release(&q->left[t % RP_BQ_LEFT], t + 1);
}

static bool ticket_abandoned(struct rp_block_queue *q, uint32_t t)
{
	uint32_t *w = &q->left[t % RP_BQ_LEFT];

	/* a note for this very ticket is taken once (relaxed look first: a
	 * note is rare); pairs with the store_release in ticket_abandon() */
	return rp_unlikely(rp_load_relaxed(w) == t + 1) && rp_xchg_acq_rel(w, 0) == t + 1;
}

/*
 * Admits tickets [from, to) if admit is still from; the caller then wakes
 * them. acq_rel: pairs with the load_acquire of admit by the admitted.
 */
static bool admit_range(struct rp_block_queue *q, uint32_t from, uint32_t to)
{
	static pthread_mutex_t hook_lock = PTHREAD_MUTEX_INITIALIZER;
	uint32_t t;
	/* relaxed: a test sets it while the drainer runs */
	void (*hook)(uint32_t) = rp_load_relaxed(&rp_test_admit_hook);
	bool hooked = hook != NULL;

	/* with the test hook, admissions and their hook calls are serialized,
	 * so the hook sees the order of admission itself */
	if (hooked)
		pthread_mutex_lock(&hook_lock);
	/* acq_rel: pairs with the load_acquire of admit in park() */
	if (!rp_cas_acq_rel(&q->admit, &from, to)) {
		if (hooked)
			pthread_mutex_unlock(&hook_lock);
		return false;
	}
	/* an admitted ticket holds its place from now on, also while it waits
	 * for room: the next admissions count it (park.h, "passes"); one whose
	 * waiter left before its turn holds nothing */
	for (t = from; t != to; t++) {
		if (!ticket_abandoned(q, t))
			rp_add_relaxed(&q->passes, 1);
		if (hooked)
			hook(t);
		wake_ticket(q, t);
	}
	if (hooked)
		pthread_mutex_unlock(&hook_lock);
	return true;
}

/*
 * The session's own bound on one write's wait, when its user gave one:
 * whether the wait that began at start_ns is over, and else how long it
 * may still sleep at most (*sleep_ns, lowered to what is left).
 */
static bool wait_timed_out(const struct rp_block_queue *q, uint64_t start_ns, uint64_t *sleep_ns)
{
	uint64_t limit = q->block_timeout_ns, waited;

	if (rp_likely(!limit))
		return false;
	waited = rp_clock_mono_ns() - start_ns;
	if (waited >= limit)
		return true;
	if (*sleep_ns > limit - waited)
		*sleep_ns = limit - waited;
	return false;
}

/* The calling thread holds no reservation while it waits (stale heads,
 * rp_writers_inside() in threads.c); cleared, with a full fence, before
 * each attempt to reserve. */
static inline void waiting_begin(struct wthread *t)
{
	rp_store_relaxed(&t->waiting, 1);
}

static inline void waiting_end(struct wthread *t)
{
	rp_store_relaxed(&t->waiting, 0);
	/* pairs with the rp_fence_heavy() before the drainer's look at it: a
	 * reservation this thread makes after it is seen with waiting 0 */
	rp_smp_mb();
}

static void abort_all(struct rp_block_queue *q)
{
	uint32_t i;

	/* pairs with the load_acquire of abort in rp_park() */
	rp_store_release(&q->abort, 1);
	for (i = 0; i < RP_BQ_WORDS; i++) {
		rp_fetch_add_release(&q->words[i], 1);
		rp_futex_wake(&q->words[i], INT32_MAX);
	}
	rp_fetch_add_release(&q->room, 1);
	rp_futex_wake(&q->room, INT32_MAX);
}

void rp_block_abort(int slot)
{
	abort_all(&rp_block_queues[slot]);
}

static uint64_t ring_free(struct rp_ring *r)
{
	uint64_t used = rp_load_relaxed(&r->hdr->producer_pos) -
			rp_load_relaxed(&r->hdr->consumer_pos);

	return used < r->size ? r->size - used : 0;
}

/*
 * A place among the passes came free: the next ticket takes it. Without
 * this hand-off the queue would move only when the drainer frees space
 * after the pass ended; a drainer that had freed everything before (its
 * last release raced the pass's end) admits nobody, and the next ticket
 * found out only at its next poll, PARK_POLL_NS later. The admitted one
 * waits for room if it must (reserve_admitted(), woken by the drainer).
 * A ticket whose waiter left before its turn (it gave up, or the output
 * failed) still takes a place when admitted and never gives it back: the
 * count is a hint, and the three-quarters rules of the drainer and of the
 * next ticket keep the queue moving past such places until the session ends.
 */
static void hand_off(struct rp_block_queue *q)
{
	uint32_t admit = rp_load_relaxed(&q->admit);
	uint32_t tail = rp_load_relaxed(&q->tail);

	if ((int32_t)(tail - admit) > 0 && place_open(q))
		admit_range(q, admit, admit + 1);
}

bool rp_block_drainer_idle(int slot)
{
	struct rp_block_queue *q = &rp_block_queues[slot];

	if (!rp_block_must_queue(slot))
		return false;
	hand_off(q);
	return true;
}

void rp_pass_ended(int slot)
{
	struct rp_block_queue *q = &rp_block_queues[slot];

	rp_add_relaxed(&q->passes, -1);
	/* a store-buffering pair with a new waiter, which takes its ticket,
	 * fences, then reads passes to decide whether to admit itself: with
	 * the fences one of the two sees the other (pairs with the
	 * rp_smp_mb() after the fetch_add of tail in park()) */
	rp_smp_mb();
	hand_off(q);
}

void rp_pass_end(struct wthread *t, int slot)
{
	uint32_t pl = t->place[slot], g = t->place_gen[slot];

	if (!pl)
		return;
	t->place[slot] = 0;
	/* as in revoke_idle(): a place revoked is freed already */
	if (rp_cas_acq_rel(&rp_block_queues[slot].places[pl - 1].gen, &g, g + 1))
		rp_pass_ended(slot);
}

/* An admitted producer gets its record: its ring may still be full (others
 * admitted with it wrote first), then it waits for the drainer to free room. */
static struct rp_shm_record *reserve_admitted(struct wthread *t, struct rp_block_queue *q,
					      int slot, struct rp_shm *shm, struct rp_ring **rp,
					      uint32_t size, uint64_t start_ns, unsigned int *reason)
{
	for (;;) {
		/* read before the ring: a wake after this makes the wait return
		 * (pairs with the fetch_add_release of room by the drainer) */
		uint32_t word = rp_load_acquire(&q->room);
		uint64_t sleep_ns = ROOM_POLL_NS;
		struct rp_shm_record *rec;

		waiting_end(t);
		rec = rp_ring_reserve_here(shm, rp_slots[slot].local_rings, rp, size);
		if (rec)
			return rec;
		waiting_begin(t);
		/* pairs with the store_release of abort in abort_all() */
		if (rp_load_acquire(&q->abort))
			return NULL;
		if (rp_load_relaxed(&rp_slots[slot].output_error)) {
			*reason = RP_DROP_OUTPUT;
			return NULL;
		}
		if (wait_timed_out(q, start_ns, &sleep_ns)) {
			*reason = RP_DROP_TIMEOUT;
			return NULL;
		}
		if (rp_load_relaxed(&shm->hdr->drainer_idle))
			rp_drainer_wake_idle(shm->hdr);
		rp_add_relaxed(&q->room_waiters, 1);
		rp_futex_wait(&q->room, word, sleep_ns);
		rp_add_relaxed(&q->room_waiters, -1);
	}
}

static struct rp_shm_record *park(struct wthread *t, int slot, struct rp_shm *shm,
				  struct rp_ring **rp, uint32_t size, unsigned int *reason)
{
	struct rp_block_queue *q = &rp_block_queues[slot];
	struct rp_shm_session *h = shm->hdr;
	struct rp_shm_record *rec;
	uint64_t start_ns = q->block_timeout_ns ? rp_clock_mono_ns() : 0;
	uint32_t ticket;

	*reason = RP_DROP_ABORTED;
	rp_pass_end(t, slot);
	/* pairs with the store_release of abort in abort_all() */
	if (rp_load_acquire(&q->abort))
		return NULL;
	/* the ticket; relaxed: admission reads admit, never tail, to decide */
	ticket = rp_fetch_add_relaxed(&q->tail, 1);
	/* pairs with the rp_smp_mb() in rp_pass_ended(): a pass that ends now
	 * either sees this ticket and hands it its place, or its end is seen
	 * below (passes) and this ticket admits itself */
	rp_smp_mb();
	for (;;) {
		uint32_t *w = &q->words[ticket % RP_BQ_WORDS];
		/* read the word before the conditions: a wake between this load
		 * and the wait changes it, and the wait returns (pairs with the
		 * fetch_add_release of the word in wake_ticket()) */
		uint32_t word = rp_load_acquire(w);
		/* pairs with the CAS of admit in admit_range() */
		uint32_t admit = rp_load_acquire(&q->admit);
		uint64_t sleep_ns;

		if ((int32_t)(admit - ticket) > 0)
			break;
		/* pairs with the store_release of abort in abort_all() */
		if (rp_load_acquire(&q->abort))
			return NULL;
		sleep_ns = admit == ticket ? HEAD_POLL_NS : PARK_POLL_NS;
		if (rp_load_relaxed(&rp_slots[slot].output_error) ||
		    wait_timed_out(q, start_ns, &sleep_ns)) {
			*reason = rp_load_relaxed(&rp_slots[slot].output_error) ? RP_DROP_OUTPUT :
										    RP_DROP_TIMEOUT;
			/* leaving: as the next in line, the tickets after it
			 * must not wait for one that is gone, and the place it
			 * is admitted to goes to the next; further back, its
			 * admission will take no place */
			if (admit == ticket && admit_range(q, ticket, ticket + 1)) {
				rp_pass_ended(slot);
			} else {
				ticket_abandon(q, ticket);
				/* admitted meanwhile, before its admitter saw
				 * the note: the place it was given goes on */
				if ((int32_t)(rp_load_acquire(&q->admit) - ticket) > 0 &&
				    ticket_abandoned(q, ticket))
					rp_pass_ended(slot);
			}
			return NULL;
		}
		/* the next ticket, with room and no pass out that could use it
		 * (or a ring mostly empty): the drainer may be asleep */
		if (admit == ticket) {
			struct rp_ring *r0 = rp_shm_current_ring(shm);
			uint64_t room = ring_free(r0);

			/* place_open() first: it frees the places of holders
			 * that stopped even when this ring has no room yet */
			if ((place_open(q) && room >= q->quantum) || room >= r0->size / 4 * 3) {
				if (admit_range(q, ticket, ticket + 1))
					break;
				continue;
			}
		}
		/* an idle drainer frees nothing and so admits nobody */
		if (rp_load_relaxed(&h->drainer_idle))
			rp_drainer_wake_idle(h);
		/* drained from another process: what admits here is the
		 * agent's watcher (agent_join.c), which may be asleep. A hint
		 * word: scribbled, it costs a wake; missed, the next pass of
		 * this loop wakes it */
		if (rp_unlikely(rp_load_relaxed(&h->space_watch) == RP_SPACE_WATCH_PARKED)) {
			rp_add_relaxed(&h->space_freed, 1);
			rp_futex_wake(&h->space_freed, 1);
		}
		rp_futex_wait(w, word, sleep_ns);
	}
	rec = reserve_admitted(t, q, slot, shm, rp, size, start_ns, reason);
	if (!rec) {
		rp_pass_ended(slot);	/* the place it was admitted to */
		return NULL;
	}
	/* counted in passes at admission; with every place held (none
	 * revoked yet), this one record is the whole pass */
	t->place[slot] = (uint8_t)place_claim(q, t->tid, &t->place_gen[slot]);
	if (!t->place[slot])
		rp_pass_ended(slot);
	return rec;
}

struct rp_shm_record *rp_park(struct wthread *t, int slot, struct rp_shm *shm,
			      struct rp_ring **rp, uint32_t size, unsigned int *reason)
{
	uint64_t t0 = rp_bench_park_hook ? rp_clock_mono_ns() : 0;
	struct rp_shm_record *rec;

	waiting_begin(t);
	rec = park(t, slot, shm, rp, size, reason);
	/* holding its record, or leaving the write */
	rp_store_relaxed(&t->waiting, 0);
	if (rp_bench_park_hook)
		rp_bench_park_hook(rp_clock_mono_ns() - t0, rec != NULL);
	return rec;
}

void rp_block_space_freed(int slot, uint64_t free_bytes)
{
	struct rp_block_queue *q = &rp_block_queues[slot];
	uint32_t admit, tail, n, room;
	int32_t passes;

	if (rp_load_relaxed(&q->room_waiters)) {
		/* pairs with the load_acquire of room in reserve_admitted() */
		rp_fetch_add_release(&q->room, 1);
		rp_futex_wake(&q->room, INT32_MAX);
	}
	admit = rp_load_relaxed(&q->admit);
	tail = rp_load_relaxed(&q->tail);
	if (admit == tail || (int32_t)(tail - admit) < 0)
		return;
	passes = rp_load_relaxed(&q->passes);
	if (passes < 0)
		passes = 0;
	/* a batch tops the passes up to the concurrency, as far as the freed
	 * space holds quanta; a ring three quarters empty admits one more
	 * whatever the count (a holder may have stopped writing) */
	room = (uint32_t)(free_bytes / q->quantum);
	n = (uint32_t)passes < q->concurrency ? q->concurrency - (uint32_t)passes : 0;
	if (n > room)
		n = room;
	if (!n && revoke_idle(q))
		n = 1;
	if (!n && free_bytes >= (uint64_t)q->quantum * q->concurrency * 3 / 2)
		n = 1;
	if (!n)
		return;
	if (n > tail - admit)
		n = tail - admit;
	admit_range(q, admit, admit + n);
}

/* The stopping thread does not join the queue, whose producers stop may
 * abort; waiting cannot deadlock, since the drainer waits on nothing it
 * holds. Gives up (a counted drop) only when the output failed or the
 * queue was aborted (the agent that drained the session went away). */
struct rp_shm_record *rp_wait_room(struct wthread *t, struct rp_session *s, struct rp_shm *shm,
				   struct rp_ring **rp, uint32_t size)
{
	struct rp_shm_session *h = shm->hdr;
	struct rp_block_queue *q = &rp_block_queues[s->slot];
	struct rp_shm_record *rec;

	for (;;) {
		waiting_end(t);
		rec = rp_ring_reserve_here(shm, rp_slots[s->slot].local_rings, rp, size);
		if (rec || rp_load_relaxed(&s->output_error) ||
		    /* pairs with the store_release of abort in abort_all() */
		    rp_load_acquire(&q->abort))
			return rec;
		waiting_begin(t);
		if (rp_load_relaxed(&h->drainer_idle))
			rp_drainer_wake_idle(h);
		rp_clock_sleep_ns(50000);
	}
}
