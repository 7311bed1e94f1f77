// SPDX-License-Identifier: MIT
/*
 * Block mode against Drop mode: what waiting for the drainer costs.
 *
 *   bench_block [--quick] [--verbose]
 *   bench_block --e2e [--quick]
 *   bench_block --sweep [--kv] [--quick | --reps N] [--idle-writers] [--verbose]
 *
 * Every run: a streaming session (nettrace V5) to a file in $TMPDIR, its
 * rings pre-faulted before the timed part, then 2 writer threads, each pinned
 * to its own CPU, write N 32-byte "Small" events (N = 2,000,000, or 500,000
 * with --quick) through rp_event_write(). Time = from the first write (the
 * earlier of the two writers) until rp_session_stop() returned, so the
 * drainer's tail and the end of the trace are inside it. Every repetition
 * runs every case in turn (5 repetitions, 3 with --quick), so machine noise
 * hits the cases alike; figures are medians, min and max beside them.
 *
 * Cases:
 *   Drop 512 MiB    big enough that nothing can drop (each ring holds more
 *                   than a writer writes); drops would be reported.
 *   Block 512 MiB   the same buffer: the cost of Block when nobody waits.
 *   Block 1 MiB     rings far smaller than the burst: producers park.
 *   Block 1 MiB + admit hook
 *                   the same, with rp_test_admit_hook recording, at each
 *                   admission of a parked producer, CLOCK_MONOTONIC now
 *                   minus rp_waiter_wake_ns (the library's stamp of the last
 *                   wake of a parked producer): park-to-wake latency.
 *
 * After every run the trace is read back with the library's reader
 * (nt_reader_*): events of the benchmark's event counted per writer thread,
 * their Counter fields summed (1..N each, so a duplicate or a missing event
 * shows), and EventsLost as TraceEvent counts it. Block runs must hold every
 * attempted event with EventsLost 0; a run that does not is reported and the
 * benchmark exits with status 1 after printing its tables.
 *
 * Beside the throughput: the writers' loop (first write to the last write
 * returned), rp_session_stop() by itself, and the process's minor page
 * faults over both (the rings are pre-faulted, so these are the drainer's
 * and the sink's own memory). --verbose prints one line per run on stderr.
 *
 * Wakeups: rp_drain_waiter_wakeups (process-wide counter of parked producers
 * woken by a drainer; its change over the run) and the session's
 * drainer_wakeups statistic (passes through the drainer's idle sleep), read
 * after the writers finished and just before stop, per 1000 events.
 *
 * --e2e: the end-to-end row of the side-by-side comparison
 * (scripts/run-bench.sh), the same for every tracer: 1,000,000 events
 * (2 writers x 500,000) as fast as possible into a 1 MiB buffer, Drop and
 * Block, timed as above; loss = events missing from the trace read back.
 * Prints "key value" lines (medians) instead of tables.
 *
 * --sweep: Block at production shape (Documentation/design.md, 3a), the
 * thread sweep of scripts/run-bench.sh's second table: T = 1, 2, 8, 32, 128
 * writer threads, not pinned (many more threads than CPUs is the point),
 * 1,000,000 events in all split over them, Block and Drop, 1 MiB and 16 MiB;
 * per case events/s attempted and delivered (read back as above), loss,
 * voluntary and involuntary context switches per 1000 events
 * (getrusage(RUSAGE_SELF) from the writers' start gate opening until stop
 * returned), and for Block the park times rp_bench_park_hook reports
 * (p50/p99/p99.9/max of each run, recorded into a preallocated array). 5
 * repetitions of every case in turn (3 with --quick, N with --reps); a table,
 * or with --kv "key value" lines (medians; run-bench.sh runs --kv --reps 1
 * three times per repetition, alternating with LTTng-UST's side). With
 * --verbose, one line per run on stderr: its time, its last write, the
 * process's CPU time, the trace check.
 *
 * --idle-writers (with --sweep): each writer, after its last write, stays
 * alive and idle (asleep on a futex) until rp_session_stop() returned, as a
 * server's threads do after a burst; they exit after the timed part. By
 * default a writer exits after its last write, inside the timed part, and
 * its exit hands back a Block pass it still holds.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "nettrace_read.h"
#include "ring.h"
#include "ringpipe/ringpipe.h"
#include "session.h"
#include "bench_env.h"
#include "bench_event.h"

#define MAX_REPS 8
#define NWRITERS 2
#define BIG_BUFFER (512ull << 20)
#define SMALL_BUFFER (1ull << 20)
#define SWEEP_MAX_T 128		/* the sweep's most writer threads */


static const char provider_name[] = "Bench-Block";
static unsigned int reps = 5;
static bool quick;
static bool verbose;
static uint64_t per_writer = 2000000;
static int cpus[NWRITERS];
static int nr_cpus;
static cpu_set_t allowed_cpus;
static char tmpdir[256];
static struct rp_event *ev_small;

/* ---- helpers ----------------------------------------------------------- */

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void die(const char *what)
{
	fprintf(stderr, "bench_block: %s: %s (%s)\n", what, strerror(errno), rp_last_error());
	exit(1);
}

static void unpin(void)
{
	pthread_setaffinity_np(pthread_self(), sizeof(allowed_cpus), &allowed_cpus);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* ---- the admit hook ------------------------------------------------------ */

struct admit {
	uint64_t now;		/* CLOCK_MONOTONIC at the admission */
	uint64_t wake;		/* rp_waiter_wake_ns as the admitted producer saw it */
};

static struct admit *admits;
static uint64_t admits_cap;
static uint64_t admits_n;	/* atomic: next free entry (may pass the capacity) */

/* Runs in the admitted producer, at the head of the queue, before it passes
 * the baton: admissions are serialized, so entries are in admission order. */
static void admit_hook(uint32_t ticket)
{
	/* the stamp first, then the clock: a stamp taken before we read it is
	 * older than our clock reading */
	uint64_t wake = rp_load_relaxed(&rp_waiter_wake_ns);
	uint64_t now = mono_ns();
	uint64_t i = __atomic_fetch_add(&admits_n, 1, __ATOMIC_RELAXED);

	(void)ticket;
	if (i < admits_cap) {
		admits[i].now = now;
		admits[i].wake = wake;
	}
}

/* ---- one run --------------------------------------------------------------- */

/* the cases after C_NR run only with --e2e */
enum bcase { C_DROP_BIG, C_BLOCK_BIG, C_BLOCK_SMALL, C_BLOCK_SMALL_HOOK, C_NR,
	     C_E2E_DROP = C_NR, C_E2E_BLOCK, C_ALL };

static const struct {
	const char *name;
	int buffering;
	uint64_t buffer;
	bool hook;
} cases[C_ALL] = {
	[C_DROP_BIG] = { "Drop, 512 MiB", RP_BUFFERING_DROP, BIG_BUFFER, false },
	[C_BLOCK_BIG] = { "Block, 512 MiB", RP_BUFFERING_BLOCK, BIG_BUFFER, false },
	[C_BLOCK_SMALL] = { "Block, 1 MiB (producers park)", RP_BUFFERING_BLOCK, SMALL_BUFFER,
			    false },
	[C_BLOCK_SMALL_HOOK] = { "Block, 1 MiB, admit hook set", RP_BUFFERING_BLOCK,
				 SMALL_BUFFER, true },
	[C_E2E_DROP] = { "Drop, 1 MiB", RP_BUFFERING_DROP, SMALL_BUFFER, false },
	[C_E2E_BLOCK] = { "Block, 1 MiB", RP_BUFFERING_BLOCK, SMALL_BUFFER, false },
};

struct warg {
	int cpu;
	uint32_t index;
	uint64_t n;
	uint64_t t_first;	/* CLOCK_MONOTONIC just before the first write */
	uint64_t t_last;	/* and after the last one */
	uint64_t refused;	/* rp_event_write() != 0 */
	pthread_barrier_t *bar;
};

static void *writer(void *p)
{
	static const char name[] = "ringpip";
	struct warg *a = p;
	struct small s = { .thread = a->index };
	uint64_t refused = 0;

	for (int i = 0; i < 8; i++)
		s.name[i] = (uint16_t)name[i];
	bench_pin(a->cpu);
	pthread_barrier_wait(a->bar);
	a->t_first = mono_ns();
	for (uint64_t i = 1; i <= a->n; i++) {
		s.counter = i;
		if (rp_unlikely(rp_event_write(ev_small, &s, sizeof(s))))
			refused++;
	}
	a->refused = refused;
	a->t_last = mono_ns();
	return NULL;
}

/* What the reader found in a trace. */
struct check {
	int err;		/* nt_reader_next() < 0, or -ENOENT: could not open */
	uint64_t events;	/* of the benchmark's event */
	uint64_t per_thread[SWEEP_MAX_T];
	uint64_t counter_sum[SWEEP_MAX_T];
	uint64_t foreign;	/* a Thread field out of range */
	int64_t lost;		/* EventsLost */
};

/* nthreads: writers 0..nthreads-1 wrote the events; any other Thread is foreign */
static struct check read_trace(const char *path, uint32_t nthreads)
{
	struct check c = { 0 };
	struct nt_reader *r = nt_reader_open(path);
	struct nt_rec rec;
	int rc;

	if (!r) {
		c.err = -ENOENT;
		return c;
	}
	while ((rc = nt_reader_next(r, &rec)) == 1) {
		struct small sm;

		if (!rec.meta || !rec.meta->provider || strcmp(rec.meta->provider, provider_name) ||
		    rec.payload_len != PAYLOAD)
			continue;
		memcpy(&sm, rec.payload, sizeof(sm));
		c.events++;
		if (sm.thread < nthreads && sm.thread < SWEEP_MAX_T) {
			c.per_thread[sm.thread]++;
			c.counter_sum[sm.thread] += sm.counter;
		} else {
			c.foreign++;
		}
	}
	if (rc < 0) {
		c.err = rc;
		fprintf(stderr, "bench_block: reading %s: %s\n", path, nt_reader_errmsg(r));
	}
	c.lost = nt_reader_lost(r);
	nt_reader_free(r);
	return c;
}

struct run {
	double secs;			/* first write to stop returned */
	uint64_t attempted, refused, drops;
	uint64_t waiter_wakeups;	/* rp_drain_waiter_wakeups over the run */
	uint64_t drainer_wakeups;	/* session statistic before stop */
	struct check chk;
	bool complete;			/* every attempted event, once, EventsLost 0 */
	uint64_t nadmits;		/* hook runs only */
	double writers_ms;		/* first write to the last writer's last */
	double stop_ms;			/* rp_session_stop() alone */
	long faults;			/* minor page faults, whole process, timed part */
	uint64_t bytes;			/* size of the trace file */
};

/*
 * Touches every ring page once (zeros over zeros, rings still empty) from
 * the ring's own CPU, so the timed part pays no page faults.
 */
static void prefault(struct rp_session *s)
{
	for (uint32_t i = 0; i < rp_shm_nr_rings(s->shm); i++) {
		struct rp_ring *r = rp_shm_ring(s->shm, i);

		if (CPU_ISSET(i, &allowed_cpus))
			bench_pin((int)i);
		memset(r->data, 0, r->size);
	}
	unpin();
}

static struct run run_once(enum bcase c)
{
	struct rp_provider_config pc = { .name = provider_name };
	struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
				      .format = 5, .buffering = cases[c].buffering,
				      .buffer_bytes = cases[c].buffer, .fd = -1 };
	struct rp_session_stats st = { .sz = sizeof(st) };
	struct run res = { 0 };
	struct warg a[NWRITERS];
	pthread_t th[NWRITERS];
	pthread_barrier_t bar;
	struct rp_session *s;
	uint64_t w0, t0 = UINT64_MAX, t1, tw = 0, ts;
	struct rusage ru0, ru1;
	char path[512];
	int nw = nr_cpus >= 2 ? NWRITERS : 1;

	snprintf(path, sizeof(path), "%s/block.nettrace", tmpdir);
	so.path = path;
	s = rp_session_start(&so);
	if (!s)
		die("rp_session_start");
	prefault(s);

	rp_store_relaxed(&admits_n, 0);
	rp_store_relaxed(&rp_waiter_wake_ns, 0);
	if (cases[c].hook)
		__atomic_store_n(&rp_test_admit_hook, admit_hook, __ATOMIC_RELAXED);
	w0 = rp_load_relaxed(&rp_drain_waiter_wakeups);

	getrusage(RUSAGE_SELF, &ru0);
	pthread_barrier_init(&bar, NULL, (unsigned int)nw);
	for (int t = 0; t < nw; t++) {
		a[t] = (struct warg){ .cpu = cpus[t], .index = (uint32_t)t, .n = per_writer,
				      .bar = &bar };
		if (pthread_create(&th[t], NULL, writer, &a[t]))
			die("pthread_create");
	}
	for (int t = 0; t < nw; t++) {
		pthread_join(th[t], NULL);
		if (a[t].t_first < t0)
			t0 = a[t].t_first;
		if (a[t].t_last > tw)
			tw = a[t].t_last;
		res.refused += a[t].refused;
	}
	pthread_barrier_destroy(&bar);
	rp_session_stats(s, &st);
	ts = mono_ns();
	if (rp_session_stop(s))
		die("rp_session_stop");
	t1 = mono_ns();
	getrusage(RUSAGE_SELF, &ru1);
	__atomic_store_n(&rp_test_admit_hook, NULL, __ATOMIC_RELAXED);

	res.secs = (double)(t1 - t0) / 1e9;
	res.attempted = per_writer * (uint64_t)nw;
	res.drops = total_drops(&st);
	res.drainer_wakeups = st.drainer_wakeups;
	res.waiter_wakeups = rp_load_relaxed(&rp_drain_waiter_wakeups) - w0;
	res.nadmits = rp_load_relaxed(&admits_n);
	res.writers_ms = (double)(tw - t0) / 1e6;
	res.stop_ms = (double)(t1 - ts) / 1e6;
	res.faults = ru1.ru_minflt - ru0.ru_minflt;
	if (verbose)
		fprintf(stderr, "bench_block: %s: writers %.1f ms, then stop %.1f ms; written "
			"before stop %" PRIu64 "; page faults %ld\n", cases[c].name, res.writers_ms,
			res.stop_ms, st.events_written, res.faults);

	res.chk = read_trace(path, (uint32_t)nw);
	{
		struct stat fst;

		res.bytes = stat(path, &fst) == 0 ? (uint64_t)fst.st_size : 0;
	}
	unlink(path);
	res.complete = !res.chk.err && !res.chk.foreign && res.chk.lost == 0 &&
		       res.chk.events == res.attempted && res.refused == 0;
	for (int t = 0; t < nw && res.complete; t++)
		res.complete = res.chk.per_thread[t] == per_writer &&
			       res.chk.counter_sum[t] == per_writer * (per_writer + 1) / 2;
	return res;
}

/* ---- latency of one hook run --------------------------------------------- */

struct lat {
	uint64_t n;		/* admissions recorded */
	uint64_t p50, p99, max;	/* ns */
	uint64_t no_wake;	/* admissions that saw the same stamp as the previous one */
	uint64_t negative;	/* stamp later than the admission's clock (clamped to 0) */
	bool overflow;
};

static uint64_t nearest_rank(const uint64_t *v, uint64_t n, unsigned int pct)
{
	uint64_t k = (n * pct + 99) / 100;

	return v[k ? k - 1 : 0];
}

static struct lat latency_of(uint64_t nadmits)
{
	struct lat l = { 0 };
	uint64_t *v;

	l.overflow = nadmits > admits_cap;
	l.n = l.overflow ? admits_cap : nadmits;
	if (!l.n)
		return l;
	v = malloc(l.n * sizeof(*v));
	if (!v)
		die("malloc");
	for (uint64_t i = 0; i < l.n; i++) {
		const struct admit *e = &admits[i];

		if (!e->wake || (i && e->wake == admits[i - 1].wake))
			l.no_wake++;
		if (e->wake > e->now) {
			l.negative++;
			v[i] = 0;
		} else {
			v[i] = e->now - e->wake;
		}
	}
	qsort(v, l.n, sizeof(*v), cmp_u64);
	l.p50 = nearest_rank(v, l.n, 50);
	l.p99 = nearest_rank(v, l.n, 99);
	l.max = v[l.n - 1];
	free(v);
	return l;
}

/* ---- --e2e: the comparison's end-to-end row ---------------------------------- */

/* Medians over the repetitions of one case, as "key value" lines. */
static int e2e_print(const char *key, enum bcase c, const struct run *runs)
{
	double evs[MAX_REPS], loss[MAX_REPS], mbs[MAX_REPS], write_ms[MAX_REPS];
	unsigned int complete = 0;

	for (unsigned int k = 0; k < reps; k++) {
		const struct run *r = &runs[k];

		evs[k] = (double)r->attempted / r->secs;
		loss[k] = 100.0 * (double)(r->attempted - (r->chk.events < r->attempted ?
							   r->chk.events : r->attempted)) /
			  (double)r->attempted;
		mbs[k] = (double)r->bytes / r->secs / 1e6;
		write_ms[k] = r->writers_ms;
		complete += r->complete;
	}
	printf("%s.evs %.0f\n%s.evs_min %.0f\n%s.evs_max %.0f\n%s.loss %.2f\n%s.loss_max %.2f\n"
	       "%s.mbs %.1f\n%s.write_ms %.1f\n%s.complete %u/%u\n", key,
	       summarize(evs, reps).med, key, summarize(evs, reps).min, key,
	       summarize(evs, reps).max, key, summarize(loss, reps).med, key,
	       summarize(loss, reps).max, key, summarize(mbs, reps).med, key,
	       summarize(write_ms, reps).med, key, complete, reps);
	return cases[c].buffering == RP_BUFFERING_BLOCK && complete != reps;
}

static int e2e_main(void)
{
	static struct run runs[2][MAX_REPS];
	int bad = 0;

	/* Drop and Block alternate, so machine noise hits both alike */
	for (unsigned int k = 0; k < reps; k++) {
		runs[0][k] = run_once(C_E2E_DROP);
		runs[1][k] = run_once(C_E2E_BLOCK);
	}
	printf("attempted %" PRIu64 "\nreps %u\n", runs[0][0].attempted, reps);
	bad |= e2e_print("drop", C_E2E_DROP, runs[0]);
	bad |= e2e_print("block", C_E2E_BLOCK, runs[1]);
	rmdir(tmpdir);
	return bad;
}

/* ---- --sweep: Block at production shape ------------------------------------ */

/*
 * Many more writer threads than CPUs, unpinned: T = 1, 2, 8, 32, 128 threads
 * write SWEEP_TOTAL events in all (split over T, the first total % T threads
 * one more), Block and Drop, 1 MiB and 16 MiB. Threads wait at a futex gate
 * before their first write, so thread creation and the gate's sleeps are
 * outside the context switches counted (getrusage(RUSAGE_SELF) from just
 * before the gate opens until rp_session_stop() returned: writers, drainer,
 * the main thread's join, the writers' exits). Block runs record every park
 * with rp_bench_park_hook.
 */
#define SWEEP_TOTAL 1000000ull
#define SWEEP_NT 5
#define SWEEP_NB 2

static const uint32_t sweep_threads[SWEEP_NT] = { 1, 2, 8, 32, 128 };
static const struct {
	const char *key, *name;
	uint64_t bytes;
} sweep_bufs[SWEEP_NB] = { { "1m", "1 MiB", 1ull << 20 }, { "16m", "16 MiB", 16ull << 20 } };
static const struct {
	const char *key, *name;
	int buffering;
} sweep_modes[2] = { { "block", "Block", RP_BUFFERING_BLOCK }, { "drop", "Drop", RP_BUFFERING_DROP } };

/* the park hook's samples: preallocated and touched before any run; at most
 * one park per write, so SWEEP_TOTAL entries hold every park of a run */
static uint64_t *park_samples;
static uint64_t park_n;		/* atomic: next free entry (may pass the capacity) */
static uint64_t park_failed;	/* atomic: parks that ended in a drop */

static void park_hook(uint64_t park_ns, int admitted)
{
	uint64_t i = __atomic_fetch_add(&park_n, 1, __ATOMIC_RELAXED);

	if (i < SWEEP_TOTAL)
		park_samples[i] = park_ns;
	if (!admitted)
		__atomic_fetch_add(&park_failed, 1, __ATOMIC_RELAXED);
}

static uint32_t gate_arrived;	/* writers at the gate */
static uint32_t gate_open;	/* futex: 1 once the run starts */
static bool idle_writers;	/* --idle-writers */
static uint32_t writers_done;	/* writers past their last write */
static uint32_t writers_leave;	/* futex: 1 once idle writers may exit */

struct swarg {
	uint32_t index;
	uint64_t n;
	uint64_t t_first, t_last, refused;
};

static void *sweep_writer(void *p)
{
	struct swarg *a = p;
	struct small s = { .thread = a->index, .name = SMALL_NAME };
	uint64_t refused = 0;

	__atomic_add_fetch(&gate_arrived, 1, __ATOMIC_RELEASE);
	while (!rp_load_acquire(&gate_open))
		rp_futex_wait(&gate_open, 0, 0);
	a->t_first = mono_ns();
	for (uint64_t i = 1; i <= a->n; i++) {
		s.counter = i;
		if (rp_unlikely(rp_event_write(ev_small, &s, sizeof(s))))
			refused++;
	}
	a->refused = refused;
	a->t_last = mono_ns();
	if (idle_writers) {
		/* pairs with the load_acquire in sweep_once() */
		rp_fetch_add_release(&writers_done, 1);
		/* pairs with the store_release of writers_leave in sweep_once() */
		while (!rp_load_acquire(&writers_leave))
			rp_futex_wait(&writers_leave, 0, 0);
	}
	return NULL;
}

struct sweep_run {
	double secs;			/* first write to stop returned */
	double write_ms;		/* first write to the last one returned */
	uint64_t attempted, found;	/* events written / in the trace */
	uint64_t refused;		/* rp_event_write() != 0 */
	int64_t lost;			/* EventsLost as the reader counts it */
	bool complete;			/* every event once, per thread, EventsLost 0 */
	bool accounted;			/* found + EventsLost == attempted */
	uint64_t nvcsw, nivcsw;		/* context switches, whole process */
	double cpu_ms;			/* user + system time, whole process */
	uint64_t parks, park_failed;
	bool park_overflow;
	uint64_t p50, p99, p999, pmax;	/* park ns */
};

static double tv_ms(const struct timeval *tv)
{
	return (double)tv->tv_sec * 1e3 + (double)tv->tv_usec / 1e3;
}

/* the k-th smallest of n sorted values for per-mille pm, nearest rank */
static uint64_t rank_permille(const uint64_t *v, uint64_t n, unsigned int pm)
{
	uint64_t k = (n * pm + 999) / 1000;

	return v[k ? k - 1 : 0];
}

static struct sweep_run sweep_once(int mode, int buf, uint32_t nt)
{
	struct rp_provider_config pc = { .name = provider_name };
	struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
				      .format = 5, .buffering = sweep_modes[mode].buffering,
				      .buffer_bytes = sweep_bufs[buf].bytes, .fd = -1 };
	static struct swarg a[SWEEP_MAX_T];
	static pthread_t th[SWEEP_MAX_T];
	struct sweep_run res = { 0 };
	struct rusage ru0, ru1;
	struct rp_session *s;
	uint64_t t0 = UINT64_MAX, tw = 0, t1 = 0;
	char path[512];
	bool block = sweep_modes[mode].buffering == RP_BUFFERING_BLOCK;

	snprintf(path, sizeof(path), "%s/sweep.nettrace", tmpdir);
	so.path = path;
	s = rp_session_start(&so);
	if (!s)
		die("rp_session_start");
	prefault(s);
	rp_store_relaxed(&park_n, 0);
	rp_store_relaxed(&park_failed, 0);
	rp_store_relaxed(&gate_arrived, 0);
	rp_store_relaxed(&gate_open, 0);
	rp_store_relaxed(&writers_done, 0);
	rp_store_relaxed(&writers_leave, 0);
	rp_bench_park_hook = block ? park_hook : NULL;	/* published by pthread_create */

	for (uint32_t t = 0; t < nt; t++) {
		a[t] = (struct swarg){ .index = t,
				       .n = SWEEP_TOTAL / nt + (t < SWEEP_TOTAL % nt) };
		if (pthread_create(&th[t], NULL, sweep_writer, &a[t]))
			die("pthread_create");
	}
	while (rp_load_acquire(&gate_arrived) < nt)
		rp_clock_sleep_ns(100000);
	rp_clock_sleep_ns(2000000);	/* the last ones get to their futex wait */
	getrusage(RUSAGE_SELF, &ru0);
	rp_store_release(&gate_open, 1);
	rp_futex_wake(&gate_open, INT32_MAX);
	if (idle_writers) {
		/* pairs with the fetch_add_release in sweep_writer(): their
		 * t_last and counts are written */
		while (rp_load_acquire(&writers_done) < nt)
			rp_clock_sleep_ns(20000);
		if (rp_session_stop(s))
			die("rp_session_stop");
		t1 = mono_ns();
		getrusage(RUSAGE_SELF, &ru1);	/* the wake below is not counted */
		/* pairs with the load_acquire in sweep_writer() */
		rp_store_release(&writers_leave, 1);
		rp_futex_wake(&writers_leave, INT32_MAX);
	}
	for (uint32_t t = 0; t < nt; t++) {
		pthread_join(th[t], NULL);
		if (a[t].t_first < t0)
			t0 = a[t].t_first;
		if (a[t].t_last > tw)
			tw = a[t].t_last;
		res.refused += a[t].refused;
		res.attempted += a[t].n;
	}
	if (!idle_writers) {
		if (rp_session_stop(s))
			die("rp_session_stop");
		t1 = mono_ns();
		getrusage(RUSAGE_SELF, &ru1);
	}
	rp_bench_park_hook = NULL;

	res.secs = (double)(t1 - t0) / 1e9;
	res.write_ms = (double)(tw - t0) / 1e6;
	res.nvcsw = (uint64_t)(ru1.ru_nvcsw - ru0.ru_nvcsw);
	res.nivcsw = (uint64_t)(ru1.ru_nivcsw - ru0.ru_nivcsw);
	res.cpu_ms = tv_ms(&ru1.ru_utime) + tv_ms(&ru1.ru_stime) - tv_ms(&ru0.ru_utime) -
		     tv_ms(&ru0.ru_stime);
	res.parks = rp_load_relaxed(&park_n);
	res.park_failed = rp_load_relaxed(&park_failed);
	res.park_overflow = res.parks > SWEEP_TOTAL;
	if (res.parks) {
		uint64_t n = res.park_overflow ? SWEEP_TOTAL : res.parks;

		qsort(park_samples, n, sizeof(*park_samples), cmp_u64);
		res.p50 = rank_permille(park_samples, n, 500);
		res.p99 = rank_permille(park_samples, n, 990);
		res.p999 = rank_permille(park_samples, n, 999);
		res.pmax = park_samples[n - 1];
	}

	{
		struct check c = read_trace(path, nt);

		unlink(path);
		res.found = c.events;
		res.lost = c.lost;
		res.accounted = !c.err && !c.foreign &&
				c.events + (uint64_t)(c.lost > 0 ? c.lost : 0) == res.attempted;
		res.complete = !c.err && !c.foreign && c.lost == 0 && c.events == res.attempted &&
			       res.refused == 0;
		for (uint32_t t = 0; t < nt && res.complete; t++)
			res.complete = c.per_thread[t] == a[t].n &&
				       c.counter_sum[t] == a[t].n * (a[t].n + 1) / 2;
	}
	if (verbose)
		fprintf(stderr, "bench_block: sweep %s %s T=%u: %.3f s (last write at %.1f ms, "
			"CPU %.1f ms), %" PRIu64 " of %" PRIu64
			" in the trace, EventsLost %" PRId64 ", %" PRIu64 " voluntary switches, %"
			PRIu64 " parks\n", sweep_modes[mode].name, sweep_bufs[buf].name, nt,
			res.secs, res.write_ms, res.cpu_ms, res.found, res.attempted, res.lost,
			res.nvcsw, res.parks);
	return res;
}

/* one case's figures over the repetitions, each a stat3 */
struct sweep_fig {
	struct stat3 evs, dlv, loss, cs, ics, parks, p50, p99, p999, pmax, wms;
	unsigned int parked;		/* repetitions with a park: the percentiles' */
	unsigned int complete, accounted;
	uint64_t refused_max, park_failed;
	bool park_overflow;
};

static struct sweep_fig sweep_figures(const struct sweep_run *runs, unsigned int n)
{
	double evs[MAX_REPS], dlv[MAX_REPS], loss[MAX_REPS], cs[MAX_REPS], ics[MAX_REPS];
	double pk[MAX_REPS], p50[MAX_REPS], p99[MAX_REPS], p999[MAX_REPS], pmax[MAX_REPS];
	double wms[MAX_REPS];
	struct sweep_fig f = { 0 };

	for (unsigned int k = 0; k < n; k++) {
		const struct sweep_run *r = &runs[k];
		double att = (double)r->attempted;
		uint64_t got = r->found < r->attempted ? r->found : r->attempted;

		evs[k] = att / r->secs;
		dlv[k] = (double)got / r->secs;
		loss[k] = 100.0 * (att - (double)got) / att;
		cs[k] = 1000.0 * (double)r->nvcsw / att;
		ics[k] = 1000.0 * (double)r->nivcsw / att;
		pk[k] = 1000.0 * (double)r->parks / att;
		if (r->parks) {	/* a run that never parked has no park times */
			p50[f.parked] = (double)r->p50 / 1e3;
			p99[f.parked] = (double)r->p99 / 1e3;
			p999[f.parked] = (double)r->p999 / 1e3;
			pmax[f.parked] = (double)r->pmax / 1e3;
			f.parked++;
		}
		wms[k] = r->write_ms;
		f.complete += r->complete;
		f.accounted += r->accounted;
		if (r->refused > f.refused_max)
			f.refused_max = r->refused;
		f.park_failed += r->park_failed;
		f.park_overflow |= r->park_overflow;
	}
	f.evs = summarize(evs, n);
	f.dlv = summarize(dlv, n);
	f.loss = summarize(loss, n);
	f.cs = summarize(cs, n);
	f.ics = summarize(ics, n);
	f.parks = summarize(pk, n);
	if (f.parked) {
		f.p50 = summarize(p50, f.parked);
		f.p99 = summarize(p99, f.parked);
		f.p999 = summarize(p999, f.parked);
		f.pmax = summarize(pmax, f.parked);
	}
	f.wms = summarize(wms, n);
	return f;
}

static int sweep_main(bool kv)
{
	static struct sweep_run runs[2][SWEEP_NB][SWEEP_NT][MAX_REPS];
	static struct sweep_fig figs[2][SWEEP_NB][SWEEP_NT];
	uint64_t t_start = mono_ns();
	int bad = 0;

	park_samples = malloc(SWEEP_TOTAL * sizeof(*park_samples));
	if (!park_samples)
		die("malloc");
	memset(park_samples, 0, SWEEP_TOTAL * sizeof(*park_samples));

	/* every repetition runs every case in turn, Block and Drop side by side */
	for (unsigned int k = 0; k < reps; k++)
		for (int b = 0; b < SWEEP_NB; b++)
			for (int i = 0; i < SWEEP_NT; i++)
				for (int m = 0; m < 2; m++)
					runs[m][b][i][k] = sweep_once(m, b, sweep_threads[i]);
	for (int m = 0; m < 2; m++)
		for (int b = 0; b < SWEEP_NB; b++)
			for (int i = 0; i < SWEEP_NT; i++) {
				figs[m][b][i] = sweep_figures(runs[m][b][i], reps);
				if (sweep_modes[m].buffering == RP_BUFFERING_BLOCK &&
				    figs[m][b][i].complete != reps)
					bad = 1;
			}

	if (kv) {
		printf("sweep.total %llu\nsweep.reps %u\nsweep.secs %.1f\n", SWEEP_TOTAL, reps,
		       (double)(mono_ns() - t_start) / 1e9);
		for (int m = 0; m < 2; m++)
			for (int b = 0; b < SWEEP_NB; b++)
				for (int i = 0; i < SWEEP_NT; i++) {
					const struct sweep_fig *f = &figs[m][b][i];
					char key[64];

					snprintf(key, sizeof(key), "sweep.%s.%s.t%u", sweep_modes[m].key,
						 sweep_bufs[b].key, sweep_threads[i]);
					printf("%s.evs %.0f\n%s.dlv %.0f\n%s.loss %.4f\n%s.loss_max %.4f\n"
					       "%s.cs %.3f\n%s.ics %.3f\n%s.parks %.3f\n%s.incomplete_max %u\n"
					       "%s.unaccounted_max %u\n%s.write_ms %.1f\n",
					       key, f->evs.med, key, f->dlv.med, key, f->loss.med, key,
					       f->loss.max, key, f->cs.med, key, f->ics.med, key,
					       f->parks.med, key, reps - f->complete, key,
					       reps - f->accounted, key, f->wms.med);
					if (sweep_modes[m].buffering == RP_BUFFERING_BLOCK)
						printf("%s.park_failed_max %" PRIu64 "\n", key,
						       f->park_failed);
					if (sweep_modes[m].buffering == RP_BUFFERING_BLOCK &&
					    f->parked)
						printf("%s.park_p50 %.2f\n%s.park_p99 %.2f\n"
						       "%s.park_p999 %.2f\n%s.park_top %.2f\n",
						       key, f->p50.med, key, f->p99.med, key,
						       f->p999.med, key, f->pmax.med);
				}
		printf("ok 1\n");
	} else {
		printf("\n### Block at production shape: thread sweep (bench_block --sweep%s%s)\n\n",
		       quick ? " --quick" : "", idle_writers ? " --idle-writers" : "");
		if (idle_writers)
			printf("Writers stay alive and idle after their last write until stop "
			       "returned (their exit is not timed).\n\n");
		printf("%llu 32-byte events in all through rp_event_write(), split over T unpinned "
		       "writer threads (%d CPUs), streaming session, nettrace V5 to %s, rings "
		       "pre-faulted; time = first write to rp_session_stop() returned; "
		       "delivered = events read back from the trace (nt_reader) / that time; "
		       "context switches: getrusage(RUSAGE_SELF) over the same span, per 1000 "
		       "events; parks: rp_bench_park_hook, per run p50/p99/p99.9/max (of the "
		       "runs that parked); every figure the median (min-max) over %u "
		       "repetitions\n\n",
		       SWEEP_TOTAL, nr_cpus, tmpdir, reps);
		printf("| buffer | T | mode | M events/s attempted | M events/s delivered | loss %% | "
		       "voluntary cs / 1000 events | involuntary cs / 1000 | parks / 1000 events | "
		       "park p50 µs | p99 µs | p99.9 µs | max µs | vs T=2 | trace check |\n");
		printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
		for (int b = 0; b < SWEEP_NB; b++)
			for (int i = 0; i < SWEEP_NT; i++)
				for (int m = 0; m < 2; m++) {
					const struct sweep_fig *f = &figs[m][b][i];
					bool blk = sweep_modes[m].buffering == RP_BUFFERING_BLOCK;
					char check[160], park[200];

					if (blk)
						snprintf(check, sizeof(check), "%s%u/%u complete%s",
							 f->complete == reps ? "" : "**",
							 f->complete, reps,
							 f->complete == reps ? "" : "**");
					else
						snprintf(check, sizeof(check),
							 "%u/%u: in trace + EventsLost = attempted",
							 f->accounted, reps);
					if (blk && f->parked)
						snprintf(park, sizeof(park), "%.1f (%.1f-%.1f) | %.0f | "
							 "%.0f | %.0f (%.0f-%.0f)%s%s",
							 f->p50.med, f->p50.min, f->p50.max, f->p99.med,
							 f->p999.med, f->pmax.med, f->pmax.min,
							 f->pmax.max,
							 f->parked < reps ? " (runs that parked)" : "",
							 f->park_overflow ? " (samples overflowed)" : "");
					else if (blk)
						snprintf(park, sizeof(park), "no parks | — | — | —");
					else
						snprintf(park, sizeof(park), "— | — | — | —");
					printf("| %s | %u | %s | %.2f (%.2f-%.2f) | %.2f | %.2f | "
					       "%.2f (%.2f-%.2f) | %.2f | %.2f | %s | %.0f %% | %s |\n",
					       sweep_bufs[b].name, sweep_threads[i],
					       sweep_modes[m].name, f->evs.med / 1e6, f->evs.min / 1e6,
					       f->evs.max / 1e6, f->dlv.med / 1e6, f->loss.med,
					       f->cs.med, f->cs.min, f->cs.max, f->ics.med,
					       f->parks.med, park,
					       100.0 * f->evs.med / figs[m][b][1].evs.med, check);
				}
	}
	free(park_samples);
	rmdir(tmpdir);
	if (bad)
		fprintf(stderr, "bench_block: a sweep Block run lost or duplicated events\n");
	/* --kv: the figures stand, incomplete_max says it (run-bench.sh fails) */
	return kv ? 0 : bad;
}

/* ---- main ------------------------------------------------------------------ */

static const char *met(bool ok)
{
	return ok ? "met" : "**missed**";
}

int main(int argc, char **argv)
{
	struct rp_provider_opts po = { .sz = sizeof(po), .name = provider_name };
	struct rp_event_opts eo = { .sz = sizeof(eo), .id = 1, .name = "Small", .level = 4,
				    .nfields = 4, .fields = small_fields };
	static struct run runs[C_NR][MAX_REPS];
	struct lat lats[MAX_REPS];
	struct stat3 tput[C_NR];
	struct rp_provider *p;
	struct stat3 lat50 = { 0 }, lat99 = { 0 }, wk_prod[C_NR], wk_drain[C_NR];
	unsigned int complete[C_NR] = { 0 };
	bool all_complete = true, e2e = false, sweep = false, kv = false;
	unsigned int want_reps = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick")) {
			quick = true;
			reps = 3;
			per_writer = 500000;
		} else if (!strcmp(argv[i], "--verbose")) {
			verbose = true;
		} else if (!strcmp(argv[i], "--e2e")) {
			e2e = true;
		} else if (!strcmp(argv[i], "--sweep")) {
			sweep = true;
		} else if (!strcmp(argv[i], "--idle-writers")) {
			idle_writers = true;
		} else if (!strcmp(argv[i], "--kv")) {
			kv = true;
		} else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
			want_reps = (unsigned int)atoi(argv[++i]);
			if (!want_reps || want_reps > MAX_REPS) {
				fprintf(stderr, "%s: --reps takes 1 to %d\n", argv[0], MAX_REPS);
				return 2;
			}
		} else {
			fprintf(stderr, "usage: %s [--quick] [--verbose] [--e2e | --sweep [--kv] "
				"[--idle-writers]] [--reps N]\n", argv[0]);
			return 2;
		}
	}
	if (want_reps)
		reps = want_reps;
	if (bench_env_init("bench_block", tmpdir, sizeof(tmpdir), &allowed_cpus, cpus, &nr_cpus))
		return 1;

	p = rp_provider_new(&po);
	if (!p)
		die("rp_provider_new");
	ev_small = rp_event_new(p, &eo);
	if (!ev_small)
		die("rp_event_new");
	if (e2e) {
		/* the comparison's fixed workload: 1,000,000 events in all */
		per_writer = 1000000 / NWRITERS;
		return e2e_main();
	}
	if (sweep)
		return sweep_main(kv);

	/* at most one admission per write; touched now, not in the hook */
	admits_cap = per_writer * NWRITERS;
	admits = malloc(admits_cap * sizeof(*admits));
	if (!admits)
		die("malloc");
	memset(admits, 0, admits_cap * sizeof(*admits));

	for (unsigned int k = 0; k < reps; k++) {
		for (int c = 0; c < C_NR; c++) {
			runs[c][k] = run_once((enum bcase)c);
			complete[c] += runs[c][k].complete;
			if (cases[c].buffering == RP_BUFFERING_BLOCK && !runs[c][k].complete)
				all_complete = false;
			if (c == C_BLOCK_SMALL_HOOK)
				lats[k] = latency_of(runs[c][k].nadmits);
		}
	}

	/* ---- a) throughput ---- */
	for (int c = 0; c < C_NR; c++) {
		double v[MAX_REPS];

		for (unsigned int k = 0; k < reps; k++)
			v[k] = (double)runs[c][k].attempted / runs[c][k].secs / 1e6;
		tput[c] = summarize(v, reps);
	}
	printf("\n### Block vs Drop: sustained throughput (bench_block%s)\n\n", quick ? " --quick" : "");
	printf("%d pinned writers x %" PRIu64 " 32-byte events, streaming session, nettrace V5 to "
	       "%s, rings pre-faulted; events/s = attempted events / (first write to "
	       "rp_session_stop() returned); %u repetitions; medians of the writers' loop, of "
	       "stop() and of the minor page faults taken in that time; trace read back "
	       "with nt_reader: every event once, EventsLost 0\n\n",
	       nr_cpus >= 2 ? NWRITERS : 1, per_writer, tmpdir, reps);
	printf("| case | M events/s (median) | min | max | vs Drop 512 MiB | writers' loop ms | stop() ms | page faults | drops | trace check | target |\n");
	printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
	for (int c = 0; c < C_NR; c++) {
		double wms[MAX_REPS], sms[MAX_REPS], flt[MAX_REPS];
		uint64_t drops = 0, min_events = UINT64_MAX;
		int64_t max_lost = 0;
		unsigned int ok = 0;
		double ratio = tput[c].med / tput[C_DROP_BIG].med;
		char target[96] = "—", check[160];

		for (unsigned int k = 0; k < reps; k++) {
			const struct run *r = &runs[c][k];

			wms[k] = r->writers_ms;
			sms[k] = r->stop_ms;
			flt[k] = (double)r->faults;
			drops += r->drops;
			ok += r->complete;
			if (r->chk.events < min_events)
				min_events = r->chk.events;
			if (r->chk.lost > max_lost)
				max_lost = r->chk.lost;
		}
		if (ok == reps)
			snprintf(check, sizeof(check), "%u/%u runs: %" PRIu64 " of %" PRIu64
				 ", EventsLost 0", ok, reps, min_events, runs[c][0].attempted);
		else
			snprintf(check, sizeof(check), "**%u/%u runs complete**: fewest %" PRIu64
				 " of %" PRIu64 ", most EventsLost %" PRId64, ok, reps, min_events,
				 runs[c][0].attempted, max_lost);
		if (c == C_BLOCK_BIG)
			snprintf(target, sizeof(target), "≥ 80%% of Drop: %s; zero loss: %s",
				 met(ratio >= 0.8), met(ok == reps));
		else if (c != C_DROP_BIG)
			snprintf(target, sizeof(target), "none for the ratio; zero loss: %s",
				 met(ok == reps));
		printf("| %s | %.2f | %.2f | %.2f | %.0f %% | %.0f | %.0f | %.0f | %" PRIu64
		       " | %s | %s |\n", cases[c].name, tput[c].med, tput[c].min, tput[c].max,
		       100.0 * ratio, summarize(wms, reps).med, summarize(sms, reps).med,
		       summarize(flt, reps).med, drops, check, target);
	}

	/* ---- b) park-to-wake latency ---- */
	{
		double p50[MAX_REPS], p99[MAX_REPS], mx[MAX_REPS], n[MAX_REPS], nw[MAX_REPS];
		struct stat3 s50, s99, smx, sn, snw;
		uint64_t neg = 0, worst = 0;
		bool overflow = false;

		for (unsigned int k = 0; k < reps; k++) {
			p50[k] = (double)lats[k].p50 / 1e3;
			p99[k] = (double)lats[k].p99 / 1e3;
			mx[k] = (double)lats[k].max / 1e3;
			n[k] = (double)lats[k].n;
			nw[k] = (double)lats[k].no_wake;
			neg += lats[k].negative;
			overflow |= lats[k].overflow;
			if (lats[k].max > worst)
				worst = lats[k].max;
		}
		s50 = summarize(p50, reps);
		s99 = summarize(p99, reps);
		smx = summarize(mx, reps);
		sn = summarize(n, reps);
		snw = summarize(nw, reps);
		lat50 = s50;
		lat99 = s99;
		printf("\n### Block: park-to-wake latency (bench_block%s)\n\n", quick ? " --quick" : "");
		printf("Block 1 MiB, %d pinned writers x %" PRIu64 " events; rp_test_admit_hook "
		       "records CLOCK_MONOTONIC now - rp_waiter_wake_ns at every admission of a "
		       "parked producer; per run p50/p99/max, then median (min-max) over %u runs. "
		       "\"no wake of its own\": the stamp was the one the previous admission saw "
		       "(admitted at its first look, without being woken), so that sample measures "
		       "from an older wake%s%s\n\n",
		       nr_cpus >= 2 ? NWRITERS : 1, per_writer, reps,
		       neg ? "; stamps later than the admission, counted as 0: " : "",
		       neg ? "see the last column" : "");
		printf("| case | parks = admissions (median) | p50 µs | p99 µs | max µs (median; worst run) | no wake of its own (median) | stamp after admission |\n");
		printf("|---|---|---|---|---|---|---|\n");
		printf("| %s | %.0f (%.0f-%.0f) | %.1f (%.1f-%.1f) | %.1f (%.1f-%.1f) | %.0f; %.0f | %.0f | %" PRIu64 "%s |\n",
		       cases[C_BLOCK_SMALL_HOOK].name, sn.med, sn.min, sn.max, s50.med, s50.min,
		       s50.max, s99.med, s99.min, s99.max, smx.med, (double)worst / 1e3, snw.med, neg,
		       overflow ? " (sample array overflowed)" : "");
	}

	/* ---- c) wakeups ---- */
	printf("\n### Block vs Drop: wakeups per 1000 events (bench_block%s)\n\n", quick ? " --quick" : "");
	printf("producer wakeups = change of rp_drain_waiter_wakeups (parked producers woken by "
	       "the drainer); drainer wakeups = rp_session_stats().drainer_wakeups (the "
	       "drainer's idle sleeps), read before stop; medians (min-max) over %u runs\n\n", reps);
	printf("| case | producer wakeups by the drainer / 1000 events | drainer wakeups / 1000 events |\n");
	printf("|---|---|---|\n");
	{
		static const enum bcase rows[] = { C_DROP_BIG, C_BLOCK_BIG, C_BLOCK_SMALL };

		for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
			double pw[MAX_REPS], dw[MAX_REPS];
			struct stat3 a, b;
			enum bcase c = rows[i];

			for (unsigned int k = 0; k < reps; k++) {
				pw[k] = 1000.0 * (double)runs[c][k].waiter_wakeups /
					(double)runs[c][k].attempted;
				dw[k] = 1000.0 * (double)runs[c][k].drainer_wakeups /
					(double)runs[c][k].attempted;
			}
			a = summarize(pw, reps);
			b = summarize(dw, reps);
			wk_prod[c] = a;
			wk_drain[c] = b;
			printf("| %s | %.3f (%.3f-%.3f) | %.4f (%.4f-%.4f) |\n", cases[c].name, a.med,
			       a.min, a.max, b.med, b.min, b.max);
		}
	}

	/*
	 * Last, the summary rows in the four-column "| benchmark | result |"
	 * table that scripts/run-bench.sh opens: benchmarks that run after this
	 * one (bench_nettrace) print bare rows and land in it.
	 */
	printf("\n| benchmark | result | | |\n|---|---|---|---|\n");
	printf("| Block vs Drop, 512 MiB, 2 writers x %" PRIu64 " (bench_block) | Block %.2f vs "
	       "Drop %.2f M events/s: %.0f %% | ≥ 80 %% with zero loss: %s | Block runs complete: "
	       "%u/%u |\n", per_writer, tput[C_BLOCK_BIG].med, tput[C_DROP_BIG].med,
	       100.0 * tput[C_BLOCK_BIG].med / tput[C_DROP_BIG].med,
	       met(tput[C_BLOCK_BIG].med >= 0.8 * tput[C_DROP_BIG].med &&
		   complete[C_BLOCK_BIG] == reps), complete[C_BLOCK_BIG], reps);
	printf("| Block, 1 MiB, producers park (bench_block) | %.2f M events/s: %.0f %% of Drop "
	       "512 MiB, complete %u/%u | park-to-wake p50 %.1f µs, p99 %.1f µs | wakeups / 1000 "
	       "events: %.3f producers, %.4f drainer |\n", tput[C_BLOCK_SMALL].med,
	       100.0 * tput[C_BLOCK_SMALL].med / tput[C_DROP_BIG].med, complete[C_BLOCK_SMALL],
	       reps, lat50.med, lat99.med, wk_prod[C_BLOCK_SMALL].med,
	       wk_drain[C_BLOCK_SMALL].med);

	free(admits);
	rmdir(tmpdir);
	if (!all_complete) {
		fprintf(stderr, "bench_block: a Block run lost or duplicated events (see the table)\n");
		return 1;
	}
	return 0;
}
