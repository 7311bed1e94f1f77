// SPDX-License-Identifier: MIT
/*
 * Block mode: producers wait (strict FIFO) instead of dropping while the
 * session runs, however long its drainer takes; teardown, a failed output,
 * the session's own bound on a wait and allocation failures make them drop,
 * counted; nothing can hang the application. TraceEvent counts. Outcomes,
 * not times: how fast a stop releases its waiters is measured in make bench.
 */
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <time.h>

#include "helpers.h"
#include "nettrace.h"
#include "ringpipe/ringpipe.h"
#include "session.h"

/* Sanitizer builds run 10-50x slower: fewer events */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define VOLUME 100000ull
#else
#define VOLUME 1000000ull
#endif
/* only turns a hang into a failure */
#define DEADLINE_NS 60000000000ull

static const struct rp_field fields[] = {
	{ "Counter", RP_TYPE_U64, 0, 0, NULL },
	{ "Thread", RP_TYPE_U32, 0, 0, NULL },
	{ "Pad", RP_TYPE_U32, 0, 0, NULL },
	{ "Tail", RP_TYPE_U64, 0, 0, NULL },
	{ "Tail2", RP_TYPE_U64, 0, 0, NULL },
};

struct payload {
	uint64_t counter;
	uint32_t thread;
	uint32_t pad;
	uint64_t tail[2];
};

static struct rp_event *make_event(const char *prov)
{
	struct rp_provider_opts po = { .sz = sizeof(po), .name = prov };
	struct rp_event_opts eo = { .sz = sizeof(eo), .id = 1, .name = "Burst", .level = 4,
				    .nfields = 5, .fields = fields };
	struct rp_provider *p = rp_provider_new(&po);

	cr_assert_not_null(p);
	return rp_event_new(p, &eo);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

struct wr {
	struct rp_event *ev;
	uint32_t index;
	uint64_t n;
	uint64_t ok, dropped;
	int last_rc;
	uint64_t returned_ns;
};

static void *wr_main(void *arg)
{
	struct wr *w = arg;
	struct payload p = { 0 };
	uint64_t i;

	p.thread = w->index;
	for (i = 1; i <= w->n; i++) {
		p.counter = i;
		w->last_rc = rp_event_write(w->ev, &p, sizeof(p));
		if (w->last_rc == 0)
			w->ok++;
		else
			w->dropped++;
	}
	w->returned_ns = now_ns();
	return NULL;
}

/* TraceEvent's count of the event and its EventsLost. */
static void te_counts(const char *dll, const char *path, const char *prov, uint64_t *n,
		      uint64_t *lost)
{
	struct bytebuf out = { 0 };
	char *cmd, key[128];
	const char *p;

	cr_assert(asprintf(&cmd, "dotnet '%s' counts '%s'", dll, path) > 0);
	cr_assert_eq(th_run(cmd, &out), 0, "TraceEvent failed: %s", (char *)out.p);
	snprintf(key, sizeof(key), "%s/Burst\t", prov);
	p = strstr((char *)out.p, key);
	*n = p ? strtoull(p + strlen(key), NULL, 10) : 0;
	p = strstr((char *)out.p, "#lost\t");
	cr_assert_not_null(p);
	*lost = strtoull(p + 6, NULL, 10);
	bb_free(&out);
	free(cmd);
}

static void differential(int mode, int nthreads)
{
	TH_NEED_TRACEDUMP(dll);
	char prov[64], *dir = th_tmpdir(), *path;
	struct rp_event *ev;
	struct rp_provider_config pc;
	struct rp_session_opts so = { .sz = sizeof(so), .nproviders = 1, .buffer_bytes = 1 << 20,
				      .buffering = mode };
	struct wr w[8];
	pthread_t th[8];
	struct rp_session *s;
	uint64_t total = VOLUME, got, lost, ok = 0;
	int i;

	snprintf(prov, sizeof(prov), "Test-Diff-%s-%d", mode ? "Block" : "Drop", nthreads);
	ev = make_event(prov);
	pc = (struct rp_provider_config){ .name = prov };
	so.providers = &pc;
	cr_assert(asprintf(&path, "%s/diff.nettrace", dir) > 0);
	so.path = path;
	s = rp_session_start(&so);
	cr_assert_not_null(s, "%s", rp_last_error());
	/* Drop: a drainer fast enough for the writers (one writer slowed down
	 * by a sanitizer) would leave nothing to count, so it is held until a
	 * ring overflowed, then drains while the writers go on */
	if (mode == RP_BUFFERING_DROP)
		__atomic_store_n(&rp_drain_pause, 1, __ATOMIC_RELAXED);
	for (i = 0; i < nthreads; i++) {
		w[i] = (struct wr){ .ev = ev, .index = (uint32_t)i, .n = total / (uint64_t)nthreads };
		cr_assert_eq(pthread_create(&th[i], NULL, wr_main, &w[i]), 0);
	}
	if (mode == RP_BUFFERING_DROP) {
		struct rp_session_stats st = { .sz = sizeof(st) };

		for (i = 0; i < 10000; i++) {
			cr_assert_eq(rp_session_stats(s, &st), 0);
			if (st.dropped[RP_DROP_REASON_FULL])
				break;
			usleep(1000);
		}
		__atomic_store_n(&rp_drain_pause, 0, __ATOMIC_RELAXED);
	}
	for (i = 0; i < nthreads; i++) {
		pthread_join(th[i], NULL);
		ok += w[i].ok;
	}
	cr_assert_eq(rp_session_stop(s), 0);
	te_counts(dll, path, prov, &got, &lost);
	cr_assert_eq(got + lost, total, "%s, %d threads: captured %" PRIu64 " + EventsLost %" PRIu64
		     " != %" PRIu64, mode ? "Block" : "Drop", nthreads, got, lost, total);
	cr_assert_eq(got, ok, "captured = writes that returned 0");
	if (mode == RP_BUFFERING_BLOCK) {
		cr_assert_eq(got, total, "Block: %" PRIu64 " of %" PRIu64 " captured", got, total);
		cr_assert_eq(lost, 0);
	} else {
		cr_assert_gt(lost, 0, "Drop with 1 MB and the drainer held at first loses some");
	}
	free(path);
	th_rmdir(dir);
}

Test(block, drop_1_thread_counts_every_loss, .timeout = 300) { differential(RP_BUFFERING_DROP, 1); }
Test(block, block_1_thread_loses_nothing, .timeout = 300) { differential(RP_BUFFERING_BLOCK, 1); }
Test(block, drop_2_threads_counts_every_loss, .timeout = 300) { differential(RP_BUFFERING_DROP, 2); }
Test(block, block_2_threads_loses_nothing, .timeout = 300) { differential(RP_BUFFERING_BLOCK, 2); }
Test(block, drop_8_threads_counts_every_loss, .timeout = 300) { differential(RP_BUFFERING_DROP, 8); }
Test(block, block_8_threads_loses_nothing, .timeout = 300) { differential(RP_BUFFERING_BLOCK, 8); }

/* ---- parking: FIFO, teardown, dead drainer -------------------------------- */

/* written by the admitter (the drainer, or a producer admitting itself):
 * atomics, since nothing else orders them with the test's reads */
static uint32_t admitted[64];
static int nadmitted;
static uint32_t fifo_base;	/* the first ticket of the FIFO test's parkers */

static void admit_hook(uint32_t ticket)
{
	int k = __atomic_fetch_add(&nadmitted, 1, __ATOMIC_RELAXED);

	if (k < 64)
		__atomic_store_n(&admitted[k], ticket, __ATOMIC_RELAXED);
}

struct parker {
	struct rp_event *ev;
	int index;
	int rc;
	int done;
	uint64_t returned_ns;
};

static void *parker_main(void *arg)
{
	struct parker *p = arg;
	struct payload pl = { .counter = 1 };

	pl.thread = (uint32_t)p->index + 100;
	p->rc = rp_event_write(p->ev, &pl, sizeof(pl));
	p->returned_ns = now_ns();
	__atomic_store_n(&p->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* Fills every ring of the session (drainer paused), from each CPU; returns
 * the writes that found a ring full (dropped: this thread never parks). */
static uint64_t fill_rings(struct rp_event *ev, struct rp_session *s)
{
	uint64_t dropped = 0;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN), c;
	struct payload pl = { 0 };

	rp_thread_set_no_park(true);
	for (c = 0; c < ncpu; c++) {
		cpu_set_t set;
		int k;

		CPU_ZERO(&set);
		CPU_SET((int)c, &set);
		if (sched_setaffinity(0, sizeof(set), &set))
			continue;
		for (k = 0; k < 1 << 20; k++) {
			if (rp_event_write(ev, &pl, sizeof(pl))) {
				dropped++;
				break;
			}
		}
	}
	{
		cpu_set_t all;

		CPU_ZERO(&all);
		for (c = 0; c < ncpu; c++)
			CPU_SET((int)c, &all);
		sched_setaffinity(0, sizeof(all), &all);
	}
	rp_thread_set_no_park(false);
	(void)s;
	return dropped;
}

/* Pauses the drainers (test hook) and returns once they are between passes:
 * the pause loop has gone round twice since. */
static void drain_pause(void)
{
	uint64_t seen;

	__atomic_store_n(&rp_drain_pause, 1, __ATOMIC_RELAXED);
	seen = __atomic_load_n(&rp_drain_paused_looks, __ATOMIC_RELAXED);
	while (__atomic_load_n(&rp_drain_paused_looks, __ATOMIC_RELAXED) - seen < 2)
		usleep(200);
}

/* A Block session on provider `prov` whose drainer is paused and whose rings
 * are full, so the next writer parks. *filled: writes that found a ring full.
 * block_timeout_ms: the session's bound on one wait (0: none). */
static struct rp_session *paused_full_session(const char *prov, struct rp_event **ev,
					      uint32_t block_timeout_ms, char **path, char *dir,
					      uint64_t *filled)
{
	struct rp_provider_config pc = { .name = prov };
	struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
				      .buffer_bytes = 1 << 20, .buffering = RP_BUFFERING_BLOCK,
				      .block_timeout_ms = block_timeout_ms };
	struct rp_session *s;
	uint64_t f;

	*ev = make_event(prov);
	cr_assert(asprintf(path, "%s/%s.nettrace", dir, prov) > 0);
	so.path = *path;
	s = rp_session_start(&so);
	cr_assert_not_null(s, "%s", rp_last_error());
	drain_pause();
	f = fill_rings(*ev, s);
	if (filled)
		*filled = f;
	return s;
}

static void start_parkers(struct parker *pk, pthread_t *th, int n, struct rp_event *ev,
			  struct rp_session *s)
{
	struct rp_block_queue *q = &rp_block_queues[rp_session_id(s)];
	uint32_t base = __atomic_load_n(&q->tail, __ATOMIC_ACQUIRE);
	int i, k;

	for (i = 0; i < n; i++) {
		pk[i] = (struct parker){ .ev = ev, .index = i };
		cr_assert_eq(pthread_create(&th[i], NULL, parker_main, &pk[i]), 0);
		/* wait until it holds its ticket: the queue order is known */
		for (k = 0; k < 60000 && __atomic_load_n(&q->tail, __ATOMIC_ACQUIRE) !=
						 base + (uint32_t)i + 1; k++)
			usleep(1000);
		cr_assert_eq(__atomic_load_n(&q->tail, __ATOMIC_ACQUIRE), base + (uint32_t)i + 1,
			     "producer %d did not park", i);
		cr_assert(!__atomic_load_n(&pk[i].done, __ATOMIC_ACQUIRE));
	}
}

Test(block, parked_producers_are_admitted_in_ticket_order, .timeout = 120)
{
	char *dir = th_tmpdir(), *path;
	struct rp_event *ev;
	struct parker pk[8];
	pthread_t th[8];
	struct rp_session *s = paused_full_session("Test-Fifo", &ev, 0, &path, dir, NULL);
	int i;

	__atomic_store_n(&nadmitted, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&rp_test_admit_hook, admit_hook, __ATOMIC_RELAXED);
	fifo_base = rp_load_relaxed(&rp_block_queues[rp_session_id(s)].tail);
	start_parkers(pk, th, 8, ev, s);
	for (i = 0; i < 8; i++)
		cr_assert(!__atomic_load_n(&pk[i].done, __ATOMIC_ACQUIRE),
			  "producer %d returned while the drainer was paused", i);
	__atomic_store_n(&rp_drain_pause, 0, __ATOMIC_RELAXED);
	for (i = 0; i < 8; i++)
		pthread_join(th[i], NULL);
	__atomic_store_n(&rp_test_admit_hook, NULL, __ATOMIC_RELAXED);
	cr_assert_eq(__atomic_load_n(&nadmitted, __ATOMIC_RELAXED), 8);
	/* Tickets are admitted in order (a batch at a time): admission k is
	 * producer k's ticket, the k-th to park; and each got its event in */
	for (i = 0; i < 8; i++) {
		uint32_t t = __atomic_load_n(&admitted[i], __ATOMIC_RELAXED);
		uint32_t first = __atomic_load_n(&admitted[0], __ATOMIC_RELAXED);

		cr_assert_eq(t, first + (uint32_t)i,
			     "admission %d was ticket %u, not the %d-th parked (%u)", i, t, i,
			     first + (uint32_t)i);
		cr_assert_eq(pk[i].rc, 0, "producer %d: %d", i, pk[i].rc);
	}
	cr_assert_eq(__atomic_load_n(&admitted[0], __ATOMIC_RELAXED), fifo_base,
		     "the first admission was not the first to park");
	cr_assert_eq(rp_session_stop(s), 0);
	free(path);
	th_rmdir(dir);
}

/* A producer that gets a pass, writes once, then stops writing (it waits for
 * work) until told to write once more. */
struct idle_holder {
	struct rp_event *ev;
	int rc[2];
	int wrote, go, done;
};

static void *idle_holder_main(void *arg)
{
	struct idle_holder *h = arg;
	struct payload pl = { .counter = 1, .thread = 200 };

	h->rc[0] = rp_event_write(h->ev, &pl, sizeof(pl));
	__atomic_store_n(&h->wrote, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&h->go, __ATOMIC_ACQUIRE))
		usleep(1000);
	pl.counter = 2;
	h->rc[1] = rp_event_write(h->ev, &pl, sizeof(pl));
	__atomic_store_n(&h->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static bool wait_flag(int *flag, uint64_t bound_ns)
{
	uint64_t t0 = now_ns();

	while (!__atomic_load_n(flag, __ATOMIC_ACQUIRE)) {
		if (now_ns() - t0 > bound_ns)
			return false;
		usleep(200);
	}
	return true;
}

/* Holders that stop writing in the middle of their passes keep them while
 * nobody waits, and give their places back, within a bound, once a ticket
 * waits: otherwise the queue behind them moves only when a ring is three
 * quarters empty (sessions.md, "Block mode"). */
Test(block, holders_that_stop_writing_give_their_places_back, .timeout = 120)
{
	char *dir = th_tmpdir(), *path;
	struct rp_event *ev;
	struct idle_holder h[2];
	struct parker pk;
	pthread_t th[2], pth;
	struct rp_session *s = paused_full_session("Test-Idle-Holder", &ev, 0, &path, dir, NULL);
	const struct rp_block_queue *q = &rp_block_queues[rp_session_id(s)];
	uint64_t t0;
	int32_t held;
	int i;

	for (i = 0; i < 2; i++) {
		uint32_t tail = __atomic_load_n(&q->tail, __ATOMIC_ACQUIRE);

		h[i] = (struct idle_holder){ .ev = ev };
		cr_assert_eq(pthread_create(&th[i], NULL, idle_holder_main, &h[i]), 0);
		/* it parks: the rings are full */
		for (uint64_t since = now_ns(); __atomic_load_n(&q->tail, __ATOMIC_ACQUIRE) == tail;)
			cr_assert_lt(now_ns() - since, DEADLINE_NS, "holder %d never parked", i);
	}
	__atomic_store_n(&rp_drain_pause, 0, __ATOMIC_RELAXED);
	for (i = 0; i < 2; i++) {
		cr_assert(wait_flag(&h[i].wrote, DEADLINE_NS), "holder %d was not admitted", i);
		cr_assert_eq(h[i].rc[0], 0);
	}
	/* idle now, each with a pass it has hardly used; nobody waits, so
	 * nobody takes them away */
	usleep(50000);
	held = __atomic_load_n(&q->passes, __ATOMIC_RELAXED);
	cr_assert(held >= 1 && held <= 2, "passes held by the idle holders: %d", held);

	/* a ticket waits (rings full, drainer held): the idle places go */
	drain_pause();
	fill_rings(ev, s);
	pk = (struct parker){ .ev = ev, .index = 0 };
	cr_assert_eq(pthread_create(&pth, NULL, parker_main, &pk), 0);
	t0 = now_ns();
	while (__atomic_load_n(&q->passes, __ATOMIC_RELAXED) > 0 && now_ns() - t0 < DEADLINE_NS)
		usleep(200);
	cr_assert_eq(__atomic_load_n(&q->passes, __ATOMIC_RELAXED), 0,
		     "%d places still held %" PRIu64 " ms after a ticket began to wait",
		     __atomic_load_n(&q->passes, __ATOMIC_RELAXED), (now_ns() - t0) / 1000000);
	cr_assert_neq(__atomic_load_n(&q->tail, __ATOMIC_RELAXED),
		      __atomic_load_n(&q->admit, __ATOMIC_RELAXED), "the parker waits");
	cr_assert(!__atomic_load_n(&pk.done, __ATOMIC_ACQUIRE), "admitted to full rings");

	/* the holders write again: they wait with the parker (two more
	 * tickets), and all get in once the drainer runs */
	{
		uint32_t tail = __atomic_load_n(&q->tail, __ATOMIC_ACQUIRE);

		for (i = 0; i < 2; i++)
			__atomic_store_n(&h[i].go, 1, __ATOMIC_RELEASE);
		for (t0 = now_ns(); __atomic_load_n(&q->tail, __ATOMIC_ACQUIRE) - tail < 2;)
			cr_assert_lt(now_ns() - t0, DEADLINE_NS, "the holders never queued");
	}
	for (i = 0; i < 2; i++)
		cr_assert(!__atomic_load_n(&h[i].done, __ATOMIC_ACQUIRE),
			  "holder %d wrote into full rings", i);
	__atomic_store_n(&rp_drain_pause, 0, __ATOMIC_RELAXED);
	pthread_join(pth, NULL);
	cr_assert_eq(pk.rc, 0);
	for (i = 0; i < 2; i++) {
		pthread_join(th[i], NULL);
		cr_assert_eq(h[i].rc[1], 0, "holder %d: %d", i, h[i].rc[1]);
	}
	cr_assert_eq(rp_session_stop(s), 0);
	free(path);
	th_rmdir(dir);
}

Test(block, stop_wakes_parked_producers_who_drop_counted, .timeout = 120)
{
	TH_NEED_TRACEDUMP(dll);
	char *dir = th_tmpdir(), *path;
	struct rp_event *ev;
	struct parker pk[8];
	pthread_t th[8];
	uint64_t got, lost, filled;
	struct rp_session *s = paused_full_session("Test-Teardown", &ev, 0, &path, dir, &filled);
	int i;

	start_parkers(pk, th, 8, ev, s);
	__atomic_store_n(&rp_drain_pause, 0, __ATOMIC_RELAXED);
	cr_assert_eq(rp_session_stop(s), 0);
	for (i = 0; i < 8; i++) {
		pthread_join(th[i], NULL);
		cr_assert_eq(pk[i].rc, -ENOBUFS, "producer %d gave up: %d", i, pk[i].rc);
	}
	te_counts(dll, path, "Test-Teardown", &got, &lost);
	cr_assert_eq(lost, 8 + filled, "every give-up counted: EventsLost %" PRIu64
		     " (8 parked + %" PRIu64 " from filling the rings)", lost, filled);
	free(path);
	th_rmdir(dir);
}

/*
 * A drainer that does not move for longer than any old heartbeat bound
 * (the test hook freezes it: no pass, no heartbeat, as a stopped or starved
 * process looks) is waited for: its parked producers drop nothing, and get
 * in once it moves again. Only a fact ends a wait.
 */
Test(block, a_frozen_drainer_is_waited_for, .timeout = 120)
{
	TH_NEED_TRACEDUMP(dll);
	char *dir = th_tmpdir(), *path;
	struct rp_event *ev;
	struct rp_session_stats st = { .sz = sizeof(st) };
	struct parker pk[4];
	pthread_t th[4];
	uint64_t got, lost, filled;
	struct rp_session *s = paused_full_session("Test-Frozen", &ev, 0, &path, dir, &filled);
	int i, r;

	__atomic_store_n(&rp_drain_freeze, 1, __ATOMIC_RELAXED);
	start_parkers(pk, th, 4, ev, s);
	/* the stall: three times the old dead-drainer bound of 1 s */
	sleep(3);
	for (i = 0; i < 4; i++)
		cr_assert(!__atomic_load_n(&pk[i].done, __ATOMIC_ACQUIRE),
			  "producer %d gave up on a frozen drainer (rc %d)", i, pk[i].rc);
	cr_assert_eq(rp_session_stats(s, &st), 0);
	for (r = 0; r < RP_DROP_REASON_NR; r++)
		if (r != RP_DROP_REASON_FULL)	/* the filling thread never parks */
			cr_assert_eq(st.dropped[r], 0, "drops of reason %d during the stall: %" PRIu64,
				     r, st.dropped[r]);
	__atomic_store_n(&rp_drain_freeze, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&rp_drain_pause, 0, __ATOMIC_RELAXED);
	for (i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		cr_assert_eq(pk[i].rc, 0, "producer %d: %d after the stall", i, pk[i].rc);
	}
	cr_assert_eq(rp_session_stop(s), 0);
	te_counts(dll, path, "Test-Frozen", &got, &lost);
	cr_assert_eq(lost, filled, "EventsLost %" PRIu64 ": only the filler's %" PRIu64, lost, filled);
	free(path);
	th_rmdir(dir);
}

/*
 * The session's own bound on one wait (block_timeout_ms): a parked write
 * that passes it drops, counted as timeout; the session stays Block, and
 * the next write, with a drainer that moves, waits and gets in.
 */
Test(block, block_timeout_ends_only_that_wait, .timeout = 120)
{
	TH_NEED_TRACEDUMP(dll);
	char *dir = th_tmpdir(), *path;
	struct rp_event *ev;
	struct rp_session_stats st = { .sz = sizeof(st) };
	struct parker pk[4], after;
	pthread_t th[4];
	uint64_t got, lost, filled;
	struct rp_session *s = paused_full_session("Test-Bound", &ev, 50, &path, dir, &filled);
	int i, r;

	for (i = 0; i < 4; i++) {
		pk[i] = (struct parker){ .ev = ev, .index = i };
		cr_assert_eq(pthread_create(&th[i], NULL, parker_main, &pk[i]), 0);
	}
	for (i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		cr_assert_eq(pk[i].rc, -ENOBUFS, "producer %d: %d, not a timed-out drop", i,
			     pk[i].rc);
	}
	cr_assert_eq(rp_session_stats(s, &st), 0);
	cr_assert_eq(st.dropped[RP_DROP_REASON_TIMEOUT], 4, "timeout drops: %" PRIu64,
		     st.dropped[RP_DROP_REASON_TIMEOUT]);
	for (r = 0; r < RP_DROP_REASON_NR; r++)
		if (r != RP_DROP_REASON_FULL && r != RP_DROP_REASON_TIMEOUT)
			cr_assert_eq(st.dropped[r], 0, "drops of reason %d: %" PRIu64, r,
				     st.dropped[r]);
	/* the queue moves on, whatever the tickets left behind */
	cr_assert_eq(__atomic_load_n(&rp_block_queues[rp_session_id(s)].passes, __ATOMIC_RELAXED), 0,
		     "places held by waiters that left");
	/* nor is the session aborted: it stays Block */
	cr_assert_eq(__atomic_load_n(&rp_block_queues[rp_session_id(s)].abort, __ATOMIC_RELAXED), 0,
		     "the timeouts aborted the queue");
	__atomic_store_n(&rp_drain_pause, 0, __ATOMIC_RELAXED);
	/* once the drainer has emptied the rings (each write after that
	 * finds room, however slow this build is), writes go in */
	{
		uint64_t t0 = now_ns();

		/* empty as producers see it: everything read and handed back */
		for (uint32_t q = 0; q < rp_shm_nr_rings(s->shm); q++) {
			const struct rp_shm_ring *h = rp_shm_ring(s->shm, q)->hdr;

			while (__atomic_load_n(&h->producer_pos, __ATOMIC_RELAXED) !=
			       __atomic_load_n(&h->consumer_pos, __ATOMIC_ACQUIRE))
				cr_assert_lt(now_ns() - t0, DEADLINE_NS, "ring %u never drained", q);
		}
	}
	after = (struct parker){ .ev = ev, .index = 9 };
	parker_main(&after);
	cr_assert_eq(after.rc, 0, "a write after the timed-out ones: %d", after.rc);
	cr_assert_eq(rp_session_stop(s), 0);
	te_counts(dll, path, "Test-Bound", &got, &lost);
	cr_assert_eq(lost, filled + 4, "EventsLost %" PRIu64 ": the filler's %" PRIu64 " and 4 timeouts",
		     lost, filled);
	free(path);
	th_rmdir(dir);
}

Test(block, allocation_failure_drops_instead_of_parking, .timeout = 60)
{
	struct rp_event *ev = make_event("Test-Alloc");
	struct rp_provider_config pc = { .name = "Test-Alloc" };
	struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
				      .buffer_bytes = 1 << 20, .buffering = RP_BUFFERING_BLOCK,
				      .path = "/dev/null" };
	struct rp_session_stats st = { .sz = sizeof(st) };
	struct rp_session *s = rp_session_start(&so);
	struct parker p = { .ev = ev };
	pthread_t th;

	cr_assert_not_null(s);
	/* a thread whose per-thread state cannot be allocated */
	rp_test_fail_alloc = 1;
	cr_assert_eq(pthread_create(&th, NULL, parker_main, &p), 0);
	pthread_join(th, NULL);
	rp_test_fail_alloc = 0;
	cr_assert_eq(p.rc, -ENOMEM);
	cr_assert_eq(rp_session_stats(s, &st), 0);
	cr_assert_eq(st.dropped[RP_DROP_REASON_ALLOC], 1);
	cr_assert_eq(rp_session_stop(s), 0);
}

/* ---- start order: a burst from the enable callback ----------------------- */

struct burst_ctx {
	struct rp_event *ev;
	uint64_t n, ok;
};

static void burst_cb(struct rp_provider *prov, int id, bool enabled, uint64_t kw, uint8_t lv,
		     const char *args, void *ctx)
{
	struct burst_ctx *b = ctx;
	struct payload p = { 0 };
	uint64_t i;

	(void)prov; (void)id; (void)kw; (void)lv; (void)args;
	if (!enabled)
		return;
	/* twice the ring budget and more: a heap walk that must park */
	for (i = 1; i <= b->n; i++) {
		p.counter = i;
		if (rp_event_write(b->ev, &p, sizeof(p)) == 0)
			b->ok++;
	}
}

Test(block, burst_in_enable_callback_completes_with_everything, .timeout = 300)
{
	TH_NEED_TRACEDUMP(dll);
	static struct burst_ctx b;
	char *dir = th_tmpdir(), *path;
	struct rp_provider_opts po = { .sz = sizeof(po), .name = "Test-Walk",
				       .enable_cb = burst_cb, .cb_ctx = &b };
	struct rp_event_opts eo = { .sz = sizeof(eo), .id = 1, .name = "Burst", .level = 4,
				    .nfields = 5, .fields = fields };
	struct rp_provider_config pc = { .name = "Test-Walk" };
	struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
				      .buffer_bytes = 1 << 20, .buffering = RP_BUFFERING_BLOCK };
	struct rp_provider *p = rp_provider_new(&po);
	struct rp_session *s;
	uint64_t got, lost;

	cr_assert_not_null(p);
	b.ev = rp_event_new(p, &eo);
	b.n = 2 * VOLUME;
	cr_assert(asprintf(&path, "%s/walk.nettrace", dir) > 0);
	so.path = path;
	s = rp_session_start(&so);
	cr_assert_not_null(s, "%s", rp_last_error());
	cr_assert_eq(b.ok, b.n, "the callback's writes all went through: %" PRIu64, b.ok);
	cr_assert_eq(rp_session_stop(s), 0);
	te_counts(dll, path, "Test-Walk", &got, &lost);
	cr_assert_eq(got, b.n);
	cr_assert_eq(lost, 0);
	free(path);
	th_rmdir(dir);
}

Test(block, invalid_modes_and_block_without_a_drainer_are_refused)
{
	struct rp_provider_config pc = { .name = "Test-Modes" };
	struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
				      .path = "/dev/null" };

	so.buffering = 7;
	cr_assert_null(rp_session_start(&so));
	cr_assert_eq(errno, EINVAL);
	cr_assert(strstr(rp_last_error(), "buffering mode 7 is neither Drop (0) nor Block (1)"),
		  "%s", rp_last_error());
	so.buffering = -1;
	cr_assert_null(rp_session_start(&so));
	cr_assert_eq(errno, EINVAL);
	so.buffering = RP_BUFFERING_BLOCK;
	so.kind = RP_SESSION_DEFERRED;
	cr_assert_null(rp_session_start(&so));
	cr_assert_eq(errno, EINVAL);
	cr_assert(strstr(rp_last_error(), "Block mode needs a continuous drainer"), "%s",
		  rp_last_error());
	/* and the application keeps working: the same options in Drop start */
	so.buffering = RP_BUFFERING_DROP;
	{
		struct rp_session *s = rp_session_start(&so);

		cr_assert_not_null(s, "%s", rp_last_error());
		cr_assert_eq(rp_session_stop(s), 0);
	}
}
