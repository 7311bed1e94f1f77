// SPDX-License-Identifier: MIT
/*
 * Where the library's busy threads run, against a scheduler that puts them
 * beside the application's: the drainer stepping aside from a busy writer's
 * CPU, and holding back while writers fill every CPU. What is judged here
 * is what must hold however the scheduler places them (every event gets
 * out, nothing the rings can hold is lost, a deferral ends while writers
 * still write); how well they are placed (the share of looks on the
 * writer's CPU, the bursts held back to their end) depends on the host's
 * load and is bench/bench_latency.c's. scripts/run-tests.sh runs this
 * binary's tests one at a time.
 */
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "helpers.h"
#include "ringpipe/ringpipe.h"
#include "session.h"
#include "watch.h"

static const struct rp_field small_fields[] = {
	{ "Counter", RP_TYPE_U64, 0, 0, NULL },
	{ "Thread", RP_TYPE_U32, 0, 0, NULL },
};

struct small {
	uint64_t counter;
	uint32_t thread;
} __attribute__((packed));

static struct rp_event *small_event(const char *provider)
{
	struct rp_provider_opts po = { .sz = sizeof(po), .name = provider };
	struct rp_event_opts eo = { .sz = sizeof(eo), .id = 1, .name = "Small", .level = 4,
				    .nfields = 2, .fields = small_fields };
	struct rp_provider *p = rp_provider_new(&po);
	struct rp_event *ev;

	cr_assert_not_null(p, "rp_provider_new: %s", rp_last_error());
	ev = rp_event_new(p, &eo);
	cr_assert_not_null(ev, "rp_event_new: %s", rp_last_error());
	return ev;
}

/* The CPUs this process may use, which must be at least two; the test is
 * skipped on a machine (or under a mask) with one. */
static void two_cpus_or_skip(cpu_set_t *all)
{
	cr_assert_eq(sched_getaffinity(0, sizeof(*all), all), 0);
	if (CPU_COUNT(all) < 2)
		cr_skip_test("this process may run on %d CPU: the test needs two to tell them apart",
			     CPU_COUNT(all));
}

#define BURSTS 20
#define BURST_EVENTS 200000u

/* The session's stats, which must count no drop. */
static void assert_no_drops(const struct rp_session_stats *st)
{
	for (int i = 0; i < RP_DROP_REASON_NR; i++)
		cr_assert_eq(st->dropped[i], 0, "%" PRIu64 " drops (reason %d)", st->dropped[i], i);
}

struct burst_writer {
	struct rp_event *ev;
	int cpu;
	int in_burst;		/* atomic: writing now */
	int done;		/* atomic */
	uint64_t wall_ns, cpu_ns;	/* the bursts' wall and CPU time */
};

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Pinned to its CPU: bursts of writes with pauses between them, long
 * enough for the drainer to empty the rings and go to sleep, so that each
 * burst wakes it. */
static void *burst_writer_main(void *arg)
{
	struct burst_writer *w = arg;
	struct small sm;
	cpu_set_t one;
	int b;

	CPU_ZERO(&one);
	CPU_SET(w->cpu, &one);
	cr_assert_eq(sched_setaffinity(0, sizeof(one), &one), 0);
	sm.counter = 0;
	sm.thread = 1;
	for (b = 0; b < BURSTS; b++) {
		uint64_t t0, c0;

		usleep(30000);
		rp_store_relaxed(&w->in_burst, 1);
		t0 = rp_clock_mono_ns();
		c0 = thread_cpu_ns();
		for (uint32_t i = 0; i < BURST_EVENTS; i++) {
			sm.counter++;
			(void)rp_event_write(w->ev, &sm, sizeof(sm));
		}
		w->cpu_ns += thread_cpu_ns() - c0;
		w->wall_ns += rp_clock_mono_ns() - t0;
		rp_store_relaxed(&w->in_burst, 0);
	}
	rp_store_release(&w->done, 1);
	return NULL;
}

/* The CPU a thread of this process is on (/proc, field 39). */
static int task_cpu(pid_t tid)
{
	char file[64], buf[1024], *p;
	int cpu = -1, field;
	FILE *f;

	snprintf(file, sizeof(file), "/proc/self/task/%d/stat", (int)tid);
	f = fopen(file, "r");
	cr_assert_not_null(f, "%s", file);
	p = fgets(buf, sizeof(buf), f) ? strrchr(buf, ')') : NULL;
	fclose(f);
	cr_assert_not_null(p, "%s: no stat line", file);
	/* field 3 follows the comm's ')' */
	for (field = 2; p && field < 39; field++)
		p = strchr(p + 1, ' ');
	cr_assert(p && sscanf(p + 1, "%d", &cpu) == 1, "%s: no processor field", file);
	return cpu;
}

/* A scheduler that packs threads onto few CPUs (as the kernels of some
 * virtual machines do) can wake the drainer on the CPU of the writer that
 * woke it: the drainer then moves to an idle CPU (step_aside() in drain.c),
 * while a writer pinned to one CPU writes bursts, each of which wakes it.
 * Whatever it does, every event of every burst gets out, none dropped.
 * Where the drainer was is logged (bench_latency measures it). */
Test(placement, bursts_of_a_pinned_writer_all_get_out_wherever_the_drainer_runs, .timeout = 600)
{
	struct rp_provider_config pc = { .name = "Test-Step-Aside" };
	struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
				      .buffer_bytes = 256 << 20, .path = "/dev/null", .fd = -1 };
	struct rp_session_stats st = { .sz = sizeof(st) };
	struct burst_writer w = { 0 };
	cpu_set_t all;
	struct rp_session *s;
	pthread_t th;
	pid_t drainer;
	int looks = 0, on_writer = 0;

	two_cpus_or_skip(&all);
	while (!CPU_ISSET(w.cpu, &all))
		w.cpu++;
	w.ev = small_event("Test-Step-Aside");
	s = rp_session_start(&so);
	cr_assert_not_null(s, "%s", rp_last_error());
	drainer = (pid_t)rp_shm_header(s->shm)->drainer_tid;
	cr_assert_eq(pthread_create(&th, NULL, burst_writer_main, &w), 0);
	/* pairs with the store_release of done */
	while (!rp_load_acquire(&w.done)) {
		if (rp_load_relaxed(&w.in_burst)) {
			on_writer += task_cpu(drainer) == w.cpu;
			looks++;
		}
		usleep(200);
	}
	pthread_join(th, NULL);
	th_wait_written(s, (uint64_t)BURSTS * BURST_EVENTS, 60000, &st);
	cr_log_info("the drainer was on the writer's CPU %d in %d of %d looks during bursts; it "
		    "moved %" PRIu64 " times; the bursts lost %.1f %% of their wall time",
		    w.cpu, on_writer, looks, st.drainer_moves,
		    100.0 * (double)(w.wall_ns - w.cpu_ns) / (double)w.wall_ns);
	assert_no_drops(&st);
	cr_assert_eq(st.events_written, (uint64_t)BURSTS * BURST_EVENTS, "the drainer wrote %"
		     PRIu64 " of the %u events", st.events_written, BURSTS * BURST_EVENTS);
	cr_assert_eq(rp_session_stop(s), 0);
}

/* ---- a drainer that holds back while writers fill every CPU ------------- */

#define MAX_FILLERS 16
#define FILL_ROUNDS 5
#define FILL_RING_BYTES (32u << 20)	/* each CPU's ring */

struct fill_round {
	struct rp_session *s;
	struct rp_event *ev;
	uint64_t target;		/* bytes each writer puts in its ring */
	uint64_t gap_ns;		/* between two writes: 0, or a trickle */
	bool until_read;		/* stop early once the drainer read anything */
	pthread_barrier_t bar;
	int started;			/* atomic: a writer is past the barrier */
	int first_done;			/* atomic: a writer reached its target */
	uint64_t read_at_first;		/* bytes the drainer had read then */
	uint64_t read_at_start;
	uint64_t start_ns, first_ns;	/* the round's start; its first finish */
	uint64_t written;		/* atomic: events written in the round */
};

struct filler {
	struct fill_round *fr;
	int cpu;
};

/* Pinned to its CPU: writes into that CPU's ring until it holds `target`
 * more bytes (or, with until_read, until the drainer has read any of the
 * rings); the first writer there notes what the drainer read. */
static void *filler_main(void *arg)
{
	struct filler *f = arg;
	struct fill_round *fr = f->fr;
	const struct rp_shm_ring *h = rp_shm_ring(fr->s->shm, (uint32_t)f->cpu)->hdr;
	struct small sm = { 0, (uint32_t)f->cpu };
	uint64_t p0, n = 0;
	cpu_set_t one;

	CPU_ZERO(&one);
	CPU_SET(f->cpu, &one);
	cr_assert_eq(sched_setaffinity(0, sizeof(one), &one), 0);
	pthread_barrier_wait(&fr->bar);
	if (!rp_xchg_acq_rel(&fr->started, 1))
		fr->start_ns = rp_clock_mono_ns();
	p0 = rp_load_relaxed(&h->producer_pos);
	do {
		for (int i = 0; i < 256; i++) {
			sm.counter++;
			cr_assert_eq(rp_event_write(fr->ev, &sm, sizeof(sm)), 0);
			n++;
			if (fr->gap_ns) {
				uint64_t t = rp_clock_mono_ns() + fr->gap_ns;

				while (rp_clock_mono_ns() < t)
					;
			}
		}
	} while (rp_load_relaxed(&h->producer_pos) - p0 < fr->target &&
		 !(fr->until_read && session_bytes_read(fr->s) != fr->read_at_start));
	if (!rp_xchg_acq_rel(&fr->first_done, 1)) {
		fr->read_at_first = session_bytes_read(fr->s) - fr->read_at_start;
		fr->first_ns = rp_clock_mono_ns();
	}
	rp_add_relaxed(&fr->written, n);
	return NULL;
}

/* Waits until the drainer has declared itself idle: the next burst wakes
 * it from its idle sleep, which is what arms a deferral. A hang guard. */
static void until_idle(struct rp_session *s)
{
	struct rp_shm_session *h = rp_shm_header(s->shm);
	uint64_t end = rp_clock_mono_ns() + 60000000000ull;

	while (!rp_load_relaxed(&h->drainer_idle)) {
		cr_assert_lt(rp_clock_mono_ns(), end, "the drainer did not go idle in 60 s");
		usleep(200);
	}
}

/* One burst of a writer pinned to each CPU in `all`, each putting
 * `fraction` of its ring in it; returns the bytes the drainer had read when
 * the first writer finished, after waiting for the drainer to write every
 * event out and go back to sleep. */
static uint64_t fill_round(struct rp_session *s, struct rp_event *ev, const cpu_set_t *all,
			   double fraction, uint64_t gap_ns, bool until_read, uint64_t *written)
{
	struct fill_round fr = { .s = s, .ev = ev, .gap_ns = gap_ns, .until_read = until_read };
	struct rp_session_stats st;
	struct filler f[MAX_FILLERS];
	pthread_t th[MAX_FILLERS];
	int n = 0;

	fr.target = (uint64_t)((double)rp_shm_ring(s->shm, 0)->size * fraction);
	for (int cpu = 0; cpu < CPU_SETSIZE && n < MAX_FILLERS; cpu++)
		if (CPU_ISSET(cpu, all))
			f[n++] = (struct filler){ .fr = &fr, .cpu = cpu };
	cr_assert_eq(pthread_barrier_init(&fr.bar, NULL, (unsigned int)n), 0);
	fr.read_at_start = session_bytes_read(s);
	for (int i = 0; i < n; i++)
		cr_assert_eq(pthread_create(&th[i], NULL, filler_main, &f[i]), 0);
	for (int i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	pthread_barrier_destroy(&fr.bar);
	*written += fr.written;
	/* everything out, and the drainer asleep again */
	th_wait_written(s, *written, 60000, &st);
	cr_assert_eq(st.events_written, *written, "the drainer wrote %" PRIu64 " of %" PRIu64
		     " events", st.events_written, *written);
	until_idle(s);
	return fr.read_at_first;
}

/* Every CPU this process may use, each with a writer; skipped where that
 * would be more than MAX_FILLERS. */
static struct rp_session *fill_session(cpu_set_t *all, struct rp_event **ev)
{
	struct rp_provider_config pc = { .name = "Test-Defer" };
	struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
				      .path = "/dev/null", .fd = -1 };
	struct rp_session *s;

	two_cpus_or_skip(all);
	if (CPU_COUNT(all) > MAX_FILLERS)
		cr_skip_test("the test puts a writer on each of this process's %d CPUs, at most %d",
			     CPU_COUNT(all), MAX_FILLERS);
	so.buffer_bytes = (uint64_t)FILL_RING_BYTES * rp_shm_possible_cpus();
	*ev = small_event("Test-Defer");
	s = rp_session_start(&so);
	cr_assert_not_null(s, "%s", rp_last_error());
	cr_assert_eq(rp_shm_ring(s->shm, 0)->size, FILL_RING_BYTES);
	return s;
}

/* Holding back never costs an event a ring could hold: bursts of 7/8 of
 * every ring, which take a drainer that held back past the half of its
 * rings, lose nothing (naps end as a ring nears half full). Whether a
 * round is held back at all depends on the scheduler (a writer that starts
 * late, or loses its CPU, leaves a quiet CPU, which ends a deferral): the
 * count is logged, and bench_latency measures it. */
Test(placement, holding_back_loses_nothing_the_rings_can_hold, .timeout = 600)
{
	struct rp_session_stats st = { .sz = sizeof(st) };
	struct rp_event *ev;
	cpu_set_t all;
	struct rp_session *s = fill_session(&all, &ev);
	uint64_t written = 0;
	int drained = 0;

	for (int r = 0; r < FILL_ROUNDS; r++)
		drained += fill_round(s, ev, &all, 7.0 / 8, 0, false, &written) > 0;
	cr_assert_eq(rp_session_stats(s, &st), 0);
	cr_log_info("the drainer read part of the burst before the first writer finished in "
		    "%d of %d bursts; %" PRIu64 " deferrals", drained, FILL_ROUNDS,
		    st.drainer_deferrals);
	assert_no_drops(&st);
	cr_assert_eq(st.events_written, written, "the drainer wrote %" PRIu64 " of %" PRIu64
		     " events", st.events_written, written);
	cr_assert_eq(rp_session_stop(s), 0);
}

/* A trickle on every CPU never nears half a ring: only a deferral's own
 * end (its bound on length, or a CPU gone quiet) gets its events out while
 * the writers go on. Writers that each write an event every 50 us go on
 * until the drainer has read something, or until their ring holds a
 * quarter of its size (8 MiB: seconds of trickle, hundreds of deferrals'
 * bounds), which only a drainer that held back until a ring neared half
 * full would let them reach. */
Test(placement, holding_back_ends_while_writers_still_write, .timeout = 600)
{
	struct rp_session_stats st = { .sz = sizeof(st) };
	struct rp_event *ev;
	cpu_set_t all;
	struct rp_session *s = fill_session(&all, &ev);
	uint64_t written = 0, read;

	read = fill_round(s, ev, &all, 1.0 / 4, 50000, true, &written);
	cr_assert_eq(rp_session_stats(s, &st), 0);
	cr_log_info("the drainer read %" PRIu64 " bytes before the first writer finished (%"
		    PRIu64 " events written), %" PRIu64 " deferrals", read, written,
		    st.drainer_deferrals);
	cr_assert_gt(read, 0, "the drainer read nothing while every CPU's ring took a quarter of "
		     "its size in a trickle (%" PRIu64 " events)", written);
	cr_assert_eq(rp_session_stop(s), 0);
}
