// SPDX-License-Identifier: MIT
/*
 * Whole-session costs: the producer through the public API, against the
 * floor measured in the same run; the drainer's sustained throughput to a
 * file; the resident memory a session costs.
 *
 *   bench_session [--quick] [--kv] [--drain]   (--drain: the drainer rows only)
 *   bench_session --drain-count N [--writers W] [--run R] [--live] [--v6] [--keep PATH]
 *
 * Prints markdown tables; every figure is the median of the repetitions
 * (5, or 3 with --quick), min and max beside it.
 *
 * Producer rows. Every event is the 32-byte "Small" event (u64, u32, u32,
 * "ringpip" as UTF-16 + NUL) written with rp_event_write(); each writer
 * thread is pinned to its own CPU and writes 1M events per repetition.
 *
 *   floor    a single-writer per-CPU ring written by this file: ring picked
 *            by the rseq CPU number, plain position, header with an
 *            rp_clock_now() timestamp, 32-byte copy, store-release commit
 *            (a plain store on x86). Pre-faulted memory; nobody reads it.
 *   enabled  a Drop session of 256 MiB (128 MiB per ring on 2 CPUs: one
 *            repetition fills half a ring, and the rings are drained,
 *            untimed, between repetitions), rings pre-faulted before the
 *            first repetition, the session's own drainer running. With 2
 *            writers on 2 CPUs the drainer holds back while the rings hold
 *            the burst (Documentation/sessions.md): a repetition's half a
 *            ring is just such a burst, so the row measures the write while
 *            the drainer waits. The "bursts of 3/4 of a ring" row writes
 *            past the half, where the drainer drains among the writers and
 *            takes its share of their CPUs.
 *   parked   the same with the drainer parked (the rp_drain_throttle_ns test
 *            hook) for the whole loop: the producer path alone.
 *   cold     a fresh session for every repetition, nothing pre-faulted:
 *            the first pass through new ring memory.
 *   disabled an event no session enables.
 *
 * Beside each row's wall time per event, the writers' own CPU time per
 * event (CLOCK_THREAD_CPUTIME_ID over the same loop): with 2 writers on 2
 * CPUs a running drainer takes its share of their CPUs, and the gap
 * between the two figures is that share.
 *
 * Drainer rows: 2 pinned writers x N events into a 512 MiB session (nothing
 * can drop), timed from rp_session_start() until rp_session_stop() returns
 * with the trace complete in $TMPDIR; bytes = the file's size. The
 * "alone" row pre-fills the rings with the drainer parked and times the
 * drainer emptying them by itself (woken with rp_drainer_kick()).
 *
 * --drain-count: no table, one run for an instruction counter (callgrind's
 * --toggle-collect=drainer_main counts the drainer thread alone): W writers
 * (1 or 2, pinned to their own CPUs, so each fills a ring of its own) write
 * N 32-byte events in all, taking turns every R events (default 1: the
 * timestamps of the rings interleave event by event, as two CPUs writing
 * at once make them, the merge's costliest case). The drainer is held by
 * the rp_drain_pause hook until every event is written (--live: it runs
 * along), then drains them to a V5 (--v6: V6) file (--keep: left at PATH for a
 * reader to check). Prints the events written, the file's bytes and the
 * drainer's wall time. Under callgrind the counts start when the drainer
 * is let go (its held loop costs the writers' time, not the events'):
 *   valgrind --tool=callgrind --toggle-collect=drainer_main bench_session --drain-count N
 * and Ir / events is the drainer's cost per event (on a CPU with AVX-512,
 * build it with `make -B BENCH_MARCH= .output/default/bench/bench_session`
 * first: valgrind stops at instructions it does not know).
 *
 * Memory rows: /proc/self/statm resident size around sessions of 1, 16, 64
 * and 256 MiB: after start, after every ring was written through once, and
 * after stop.
 *
 * --kv: only what the side-by-side comparison (scripts/run-bench.sh) needs,
 * as "key value" lines: the floor, enabled and disabled producer rows with
 * 1 and 2 writers, and the memory of a filled 1 MiB session. Its disabled
 * rows are the guarded call (rp_event_enabled() first), the form LTTng's
 * tracepoint macro and the EventSource pattern have built in.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#if defined(__has_include)
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#endif
#endif

#include "clock.h"
#include "ring.h"
#include "ringpipe/ringpipe.h"
#include "session.h"
#include "bench_env.h"
#include "bench_event.h"

#define MAX_REPS 8
#define REC_BYTES 64u			/* 32-byte record header + payload */
#define FLOOR_RING (64ull << 20)	/* 1M records of 64 bytes */
#define MAX_FLOOR_RINGS 64


static unsigned int reps = 7;
static bool quick;
static bool kv;		/* --kv: "key value" lines for scripts/run-bench.sh */
static bool drain_only;		/* --drain: only the drainer rows */
static uint64_t count_events;	/* --drain-count: a single counted run */
static int count_writers = 1;	/* --writers */
static uint64_t count_run = 1;	/* --run: events per turn */
static bool count_live;		/* --live: the drainer is not held */
static const char *count_keep;	/* --keep: the trace's path, left there */
static int count_format = 5;	/* --v6: nettrace V6 */
static uint64_t per_thread = 1000000;	/* producer rows, per thread and repetition */
static uint64_t drain_events = 2000000;	/* drainer rows, per writer */
static uint64_t disabled_calls = 20000000;
static int cpus[2];
static int nr_cpus;
static cpu_set_t allowed_cpus;
static char tmpdir[256];
static struct rp_event *ev_on, *ev_off;

/* ---- helpers ----------------------------------------------------------- */

static uint64_t now_ns(void)
{
	return rp_clock_mono_ns();
}

static void sleep_ms(unsigned int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

static void unpin(void)
{
	pthread_setaffinity_np(pthread_self(), sizeof(allowed_cpus), &allowed_cpus);
}

static void small_fill(struct small *s, uint64_t counter, uint32_t thread)
{
	static const char name[] = "ringpip";

	s->counter = counter;
	s->thread = thread;
	s->extra = 0;
	for (int i = 0; i < 8; i++)
		s->name[i] = (uint16_t)name[i];
}

static void die(const char *what)
{
	fprintf(stderr, "bench_session: %s: %s (%s)\n", what, strerror(errno), rp_last_error());
	exit(1);
}

static struct rp_session *session_start(uint64_t buffer, const char *path)
{
	static struct rp_provider_config pc = { .name = "Bench-Session" };
	struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
				      .format = count_format, .buffering = RP_BUFFERING_DROP,
				      .buffer_bytes = buffer, .path = path, .fd = -1 };
	struct rp_session *s = rp_session_start(&so);

	if (!s)
		die("rp_session_start");
	return s;
}

/* Waits (untimed) until the drainer wrote everything that was not dropped. */
static void wait_drained(struct rp_session *s, uint64_t attempted, struct rp_session_stats *st)
{
	uint64_t t0 = now_ns();

	for (;;) {
		st->sz = sizeof(*st);
		rp_session_stats(s, st);
		if (st->events_written + total_drops(st) >= attempted || st->output_error)
			return;
		if (now_ns() - t0 > 60ull * 1000000000ull) {
			fprintf(stderr, "bench_session: the drainer did not catch up in 60 s\n");
			return;
		}
		sleep_ms(1);
	}
}

/*
 * Touches every ring page once (writes zeros over zeros) so no timed loop
 * pays page faults; only before the first write, while the rings are empty.
 * Each ring is touched from its own CPU: on a VM with shadow paging the
 * first access from each vCPU costs a (hypervisor) fault of its own.
 */
static void prefault(struct rp_session *s, int only_ring)
{
	for (uint32_t i = 0; i < rp_shm_nr_rings(s->shm); i++) {
		struct rp_ring *r = rp_shm_ring(s->shm, i);

		if (only_ring >= 0 && (uint32_t)only_ring != i)
			continue;
		if (CPU_ISSET(i, &allowed_cpus))
			bench_pin((int)i);
		memset(r->data, 0, r->size);
	}
	unpin();
}

static uint64_t consumer_positions(struct rp_session *s)
{
	uint64_t sum = 0;

	for (uint32_t i = 0; i < rp_shm_nr_rings(s->shm); i++)
		sum += rp_load_relaxed(&rp_shm_ring(s->shm, i)->hdr->consumer_pos);
	return sum;
}

static char *tmp_path(const char *name)
{
	static char buf[512];

	snprintf(buf, sizeof(buf), "%s/%s", tmpdir, name);
	return buf;
}

/* Resident pages; freed heap is handed back first so only live memory counts. */
static long rss_pages(void)
{
	long size = 0, res = 0;
	FILE *f;

	malloc_trim(0);
	f = fopen("/proc/self/statm", "r");

	if (!f)
		return -1;
	if (fscanf(f, "%ld %ld", &size, &res) != 2)
		res = -1;
	fclose(f);
	return res;
}

/* ---- floor ------------------------------------------------------------- */

struct floor_ring {
	unsigned char *data;
	uint64_t pos;
	uint64_t mask;
} __attribute__((aligned(64)));

static struct floor_ring frings[MAX_FLOOR_RINGS];
static unsigned int nfrings;

static inline void floor_write(uint32_t tid, uint32_t seq, const void *payload)
{
	unsigned int cpu = rp_ring_current_cpu();
	struct floor_ring *f = &frings[cpu < nfrings ? cpu : cpu % nfrings];
	struct rp_shm_record *rec = (struct rp_shm_record *)(f->data + (f->pos & f->mask));

	f->pos += REC_BYTES;
	rp_record_fill(rec, 1, rp_clock_now(), tid, seq, 0, PAYLOAD, cpu);
	memcpy(rec + 1, payload, PAYLOAD);
	/* nobody reads the floor; the commit a single writer would publish
	 * with (pairs with a consumer's acquire load of len) */
	rp_store_release(&rec->len, REC_BYTES);
}

/* ---- writer threads ------------------------------------------------------ */

enum wkind { W_FLOOR, W_RP, W_DISABLED, W_GUARDED };

struct warg {
	enum wkind kind;
	int cpu;
	uint32_t index;
	uint64_t n;
	uint64_t ns;
	uint64_t cpu_ns;	/* the thread's own CPU time over the same loop */
	uint64_t refused;
	pthread_barrier_t *bar;
};

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void *writer(void *p)
{
	struct warg *a = p;
	struct small s;
	uint64_t t0, t1, c0, refused = 0;
	uint32_t tid = (uint32_t)gettid();

	bench_pin(a->cpu);
	small_fill(&s, 0, a->index);
	pthread_barrier_wait(a->bar);
	c0 = thread_cpu_ns();
	t0 = now_ns();
	switch (a->kind) {
	case W_FLOOR:
		for (uint64_t i = 1; i <= a->n; i++) {
			s.counter = i;
			floor_write(tid, (uint32_t)i, &s);
		}
		break;
	case W_RP:
		for (uint64_t i = 1; i <= a->n; i++) {
			s.counter = i;
			if (rp_unlikely(rp_event_write(ev_on, &s, sizeof(s))))
				refused++;
		}
		break;
	case W_DISABLED:
		for (uint64_t i = 1; i <= a->n; i++) {
			s.counter = i;
			refused += rp_event_write(ev_off, &s, sizeof(s)) != 0;
		}
		break;
	case W_GUARDED:
		for (uint64_t i = 1; i <= a->n; i++) {
			s.counter = i;
			if (rp_event_enabled(ev_off))
				refused += rp_event_write(ev_off, &s, sizeof(s)) != 0;
			/* keep the loop a loop: the check must be redone each time */
			__asm__ __volatile__("" ::: "memory");
		}
		break;
	}
	t1 = now_ns();
	a->cpu_ns = thread_cpu_ns() - c0;
	a->ns = t1 - t0;
	a->refused = refused;
	return NULL;
}

/* The writers' own CPU time per event in the last run_writers(), the mean
 * over its threads: the wall time less what other threads (the drainer)
 * took from the writers' CPUs. */
static double last_cpu_ns;

/* nthreads pinned writers of n events each; mean per-thread ns/event */
static double run_writers(enum wkind kind, int nthreads, uint64_t n, uint64_t *refused)
{
	struct warg a[2];
	pthread_t th[2];
	pthread_barrier_t bar;
	double sum = 0, cpu = 0;

	pthread_barrier_init(&bar, NULL, (unsigned int)nthreads);
	for (int t = 0; t < nthreads; t++) {
		a[t] = (struct warg){ .kind = kind, .cpu = cpus[t], .index = (uint32_t)t, .n = n,
				      .bar = &bar };
		if (pthread_create(&th[t], NULL, writer, &a[t]))
			die("pthread_create");
	}
	for (int t = 0; t < nthreads; t++) {
		pthread_join(th[t], NULL);
		sum += (double)a[t].ns / (double)n;
		cpu += (double)a[t].cpu_ns / (double)n;
		if (refused)
			*refused += a[t].refused;
	}
	pthread_barrier_destroy(&bar);
	last_cpu_ns = cpu / nthreads;
	return sum / nthreads;
}

/* ---- producer rows -------------------------------------------------------- */

struct row {
	const char *name;
	double v[MAX_REPS];
	double c[MAX_REPS];		/* the writers' CPU time (last_cpu_ns) */
	struct stat3 s, cs;
	uint64_t drops;
	const char *note;
	bool skipped;
};

/* Repetition k of r: its wall time per event, and the writers' own CPU
 * time of the same run_writers() */
static void row_take(struct row *r, unsigned int k, double wall_ns)
{
	r->v[k] = wall_ns;
	r->c[k] = last_cpu_ns;
}

/* r's medians, of the wall and of the CPU times */
static void row_summarize(struct row *r)
{
	r->s = summarize(r->v, reps);
	r->cs = summarize(r->c, reps);
}

static void print_row(struct row *r, const struct row *base, double target_ratio,
		      double target_ns)
{
	char ratio[32] = "—", target[64] = "";

	if (r->skipped) {
		printf("| %s | skipped (needs 2 CPUs) | | | | | | |\n", r->name);
		return;
	}
	if (base)
		snprintf(ratio, sizeof(ratio), "%.2fx", r->s.med / base->s.med);
	if (base && target_ratio > 0)
		snprintf(target, sizeof(target), "≤ %gx floor: %s", target_ratio,
			 r->s.med / base->s.med <= target_ratio ? "met" : "**missed**");
	else if (target_ns > 0)
		snprintf(target, sizeof(target), "≤ %.0f ns: %s", target_ns,
			 r->s.med <= target_ns ? "met" : "**missed**");
	printf("| %s | %.2f | %.2f | %.2f | %.2f | %s | %" PRIu64 "%s | %s |\n", r->name, r->s.med,
	       r->s.min, r->s.max, r->cs.med, ratio, r->drops, r->note ? r->note : "", target);
}

/*
 * One repetition of the live rows: a fresh 256 MiB session, rings
 * pre-faulted, a short warm-up, then 1 and 2 writers, drained (untimed)
 * after each.
 */
static void rep_live(struct row *one, struct row *two, struct row *longer, unsigned int k)
{
	struct rp_session_stats st = { .sz = sizeof(st) };
	struct rp_session *s = session_start(256ull << 20, tmp_path("live.nettrace"));
	uint64_t attempted = per_thread / 10;

	prefault(s, -1);
	run_writers(W_RP, 1, attempted, NULL);
	wait_drained(s, attempted, &st);
	row_take(one, k, run_writers(W_RP, 1, per_thread, NULL));
	attempted += per_thread;
	wait_drained(s, attempted, &st);
	if (nr_cpus >= 2) {
		row_take(two, k, run_writers(W_RP, 2, per_thread, NULL));
		attempted += 2 * per_thread;
		wait_drained(s, attempted, &st);
		/* bursts of 3/4 of a ring: past the half where the drainer
		 * stops holding back, so it takes its share of the CPUs */
		row_take(longer, k, run_writers(W_RP, 2, per_thread * 3 / 2, NULL));
		attempted += 3 * per_thread;
		wait_drained(s, attempted, &st);
	}
	/* the rows share the session: drops are reported on each */
	one->drops += total_drops(&st);
	two->drops += total_drops(&st);
	longer->drops += total_drops(&st);
	if (rp_session_stop(s))
		die("rp_session_stop");
	unlink(tmp_path("live.nettrace"));
}

/* The drainer parked for the whole loop: the producer path by itself, with
 * nthreads writers (with 2 on 2 CPUs, the drainer's own share of the CPUs
 * is what separates this from the running row). */
static void rep_parked(struct row *r, int nthreads, unsigned int k)
{
	struct rp_session_stats st = { .sz = sizeof(st) };
	struct rp_session *s;
	uint64_t c0, c1;

	/* the drainer sleeps this long after its first (empty) pass */
	rp_store_relaxed(&rp_drain_throttle_ns, 1500000000ull);
	s = session_start(256ull << 20, tmp_path("parked.nettrace"));
	prefault(s, nthreads > 1 ? -1 : cpus[0]);
	c0 = consumer_positions(s);
	row_take(r, k, run_writers(W_RP, nthreads, per_thread, NULL));
	c1 = consumer_positions(s);
	if (c1 != c0)
		r->note = " (the drainer ran during a loop)";
	rp_session_stats(s, &st);
	r->drops += total_drops(&st);
	rp_store_relaxed(&rp_drain_throttle_ns, 0);
	rp_drainer_kick(s);	/* cut its throttle sleep short */
	if (rp_session_stop(s))
		die("rp_session_stop");
	unlink(tmp_path("parked.nettrace"));
}

/* A fresh session, nothing pre-faulted: first touch of the ring memory. */
static void rep_cold(struct row *r, unsigned int k)
{
	struct rp_session_stats st = { .sz = sizeof(st) };
	struct rp_session *s = session_start(256ull << 20, tmp_path("cold.nettrace"));

	row_take(r, k, run_writers(W_RP, 1, per_thread, NULL));
	wait_drained(s, per_thread, &st);
	r->drops += total_drops(&st);
	if (rp_session_stop(s))
		die("rp_session_stop");
	unlink(tmp_path("cold.nettrace"));
}

static void producer_rows(void)
{
	struct row floor1 = { .name = "floor: single-writer per-CPU ring, plain commit, ts, 1 thread" };
	struct row floor2 = { .name = "floor, 2 threads on 2 CPUs (per thread)" };
	struct row en1 = { .name = "enabled, 1 thread, drainer running, warm rings" };
	struct row en2 = { .name = "enabled, 2 threads on 2 CPUs (per thread), drainer running" };
	struct row en2l = { .name = "enabled, 2 threads, drainer running, bursts of 3/4 of a ring "
				    "(the drainer no longer holds back past half)" };
	struct row parked = { .name = "enabled, 1 thread, drainer parked (producer path alone)" };
	struct row parked2 = { .name = "enabled, 2 threads on 2 CPUs (per thread), drainer parked" };
	struct row cold = { .name = "enabled, 1 thread, fresh session each run (page faults)" };
	struct row dis = { .name = "disabled event (no session enables it), rp_event_write()" };
	struct row guard = { .name = "disabled event, guarded by the inline rp_event_enabled()" };
	struct row guard2 = { .name = "disabled event, guarded, 2 threads on 2 CPUs (per thread)" };
	uint64_t refused = 0;

	nfrings = rp_shm_possible_cpus();
	if (nfrings > MAX_FLOOR_RINGS)
		nfrings = MAX_FLOOR_RINGS;
	for (unsigned int i = 0; i < nfrings; i++) {
		frings[i].data = mmap(NULL, FLOOR_RING, PROT_READ | PROT_WRITE,
				      MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
		if (frings[i].data == MAP_FAILED)
			die("mmap");
		frings[i].mask = FLOOR_RING - 1;
		if (CPU_ISSET(i, &allowed_cpus))
			bench_pin((int)i);
		memset(frings[i].data, 0, FLOOR_RING);
	}
	unpin();
	run_writers(W_FLOOR, 1, per_thread, NULL);	/* warm-up */
	/* every repetition runs every row, so machine noise hits them alike */
	for (unsigned int k = 0; k < reps; k++) {
		row_take(&floor1, k, run_writers(W_FLOOR, 1, per_thread, NULL));
		if (nr_cpus >= 2)
			row_take(&floor2, k, run_writers(W_FLOOR, 2, per_thread, NULL));
		row_take(&dis, k, run_writers(W_DISABLED, 1, disabled_calls, &refused));
		row_take(&guard, k, run_writers(W_GUARDED, 1, disabled_calls, &refused));
		rep_live(&en1, &en2, &en2l, k);
		rep_parked(&parked, 1, k);
		if (nr_cpus >= 2)
			rep_parked(&parked2, 2, k);
		if (kv) {
			if (nr_cpus >= 2)
				row_take(&guard2, k,
					 run_writers(W_GUARDED, 2, disabled_calls, &refused));
			continue;
		}
		rep_cold(&cold, k);
	}
	for (unsigned int i = 0; i < nfrings; i++)
		munmap(frings[i].data, FLOOR_RING);

	row_summarize(&floor1);
	row_summarize(&en1);
	row_summarize(&parked);
	row_summarize(&cold);
	row_summarize(&dis);
	row_summarize(&guard);
	if (nr_cpus >= 2) {
		row_summarize(&floor2);
		row_summarize(&en2);
		row_summarize(&en2l);
		row_summarize(&parked2);
	} else {
		floor2.skipped = en2.skipped = en2l.skipped = parked2.skipped = true;
	}
	dis.drops = guard.drops = refused;
	if (kv) {
		guard2.s = nr_cpus >= 2 ? summarize(guard2.v, reps) : guard.s;
		printf("reps %u\nper_thread %" PRIu64 "\nclock %s\n", reps, per_thread,
		       rp_clock_source_name(rp_clock_source()));
		printf("floor1 %.2f\nfloor2 %.2f\nen1 %.2f\nen1_min %.2f\nen1_max %.2f\n"
		       "en2 %.2f\nen2_min %.2f\nen2_max %.2f\nwrite_dis1 %.2f\ndis1 %.2f\n"
		       "dis2 %.2f\nen_drops %" PRIu64 "\n", floor1.s.med, floor2.s.med, en1.s.med,
		       en1.s.min, en1.s.max, en2.s.med, en2.s.min, en2.s.max, dis.s.med, guard.s.med,
		       guard2.s.med, en1.drops);
		printf("pk1 %.2f\n", parked.s.med);
		if (nr_cpus >= 2)
			printf("pk2 %.2f\n", parked2.s.med);
		/* the writers' own CPU time: the wall figures above less what
		 * the drainer took from their CPUs */
		printf("floor1_cpu %.2f\nen1_cpu %.2f\npk1_cpu %.2f\n", floor1.cs.med, en1.cs.med,
		       parked.cs.med);
		if (nr_cpus >= 2)
			printf("floor2_cpu %.2f\nen2_cpu %.2f\npk2_cpu %.2f\nen2_long %.2f\n"
			       "en2_long_cpu %.2f\n", floor2.cs.med, en2.cs.med, parked2.cs.med,
			       en2l.s.med, en2l.cs.med);
		return;
	}

	printf("\n### session producer cost (bench_session%s)\n\n", quick ? " --quick" : "");
	printf("clock: %s, %.3f GHz; 32-byte event via rp_event_write(); %u repetitions of "
	       "%" PRIu64 " events per thread; Drop session 256 MiB; CPUs %d,%d; %u rings\n\n",
	       rp_clock_source_name(rp_clock_source()), (double)rp_clock_frequency() / 1e9, reps,
	       per_thread, cpus[0], cpus[1], rp_shm_possible_cpus());
	printf("| case | ns/event (median) | min | max | the writers' own CPU ns/event (median) "
	       "| ratio vs floor | drops | target |\n");
	printf("|---|---|---|---|---|---|---|---|\n");
	print_row(&floor1, NULL, 0, 0);
	print_row(&floor2, NULL, 0, 0);
	print_row(&en1, &floor1, 1.5, 0);
	print_row(&en2, nr_cpus >= 2 ? &floor2 : NULL, 1.5, 0);
	print_row(&en2l, nr_cpus >= 2 ? &floor2 : NULL, 0, 0);
	print_row(&parked, &floor1, 1.5, 0);
	print_row(&parked2, nr_cpus >= 2 ? &floor2 : NULL, 1.5, 0);
	print_row(&cold, &floor1, 0, 0);
	print_row(&dis, NULL, 0, 2);
	print_row(&guard, NULL, 0, 2);
}

/* ---- drainer throughput ------------------------------------------------- */

struct drain_result {
	double secs;		/* to rp_session_stop() returned */
	double ser_secs;	/* to every event serialized (stats, before stop) */
	double stop_secs;	/* rp_session_stop() alone */
	uint64_t events, bytes, drops;
};

enum drain_mode {
	D_COLD,		/* timed from rp_session_start(): rings fault in as written */
	D_WARM,		/* rings pre-faulted, timed from the writers' start */
	D_ALONE,	/* rings filled with the drainer parked; the drainer timed alone */
	D_NR,
};

/* 2 pinned writers x drain_events into a 512 MiB session, to a file. */
static struct drain_result drain_once(enum drain_mode mode)
{
	struct rp_session_stats st = { .sz = sizeof(st) };
	struct drain_result res = { 0 };
	const char *path = tmp_path("drain.nettrace");
	int nw = nr_cpus >= 2 ? 2 : 1;
	uint64_t attempted = drain_events * (uint64_t)nw, t0, t1, tser;
	struct rp_session *s;
	struct stat fst;

	if (mode == D_ALONE)
		rp_store_relaxed(&rp_drain_throttle_ns, 30ull * 1000000000ull);
	t0 = now_ns();
	s = session_start(512ull << 20, path);
	if (mode != D_COLD) {
		prefault(s, -1);
		t0 = now_ns();
	}
	run_writers(W_RP, nw, drain_events, NULL);
	if (mode == D_ALONE) {
		/* wake the drainer out of its throttle sleep */
		rp_store_relaxed(&rp_drain_throttle_ns, 0);
		t0 = now_ns();
		rp_drainer_kick(s);
	}
	wait_drained(s, attempted, &st);
	tser = now_ns();
	if (rp_session_stop(s))
		die("rp_session_stop");
	t1 = now_ns();
	res.secs = (double)(t1 - t0) / 1e9;
	res.ser_secs = (double)(tser - t0) / 1e9;
	res.stop_secs = (double)(t1 - tser) / 1e9;
	res.drops = total_drops(&st);
	res.events = st.events_written;
	res.bytes = stat(path, &fst) == 0 ? (uint64_t)fst.st_size : 0;
	unlink(path);
	return res;
}

static void drain_rows(void)
{
	static const char *const names[D_NR] = {
		"2 writers + drainer, fresh session (rp_session_start to stop returned)",
		"2 writers + drainer, rings pre-faulted (writers' start to stop returned)",
		"drainer alone: rings filled while it was parked (unpark to stop returned)",
	};

	printf("\n### drainer throughput (bench_session%s)\n\n", quick ? " --quick" : "");
	printf("%d writers x %" PRIu64 " 32-byte events, Drop session 512 MiB, nettrace V5 to "
	       "%s; %u repetitions; bytes = file size\n\n", nr_cpus >= 2 ? 2 : 1, drain_events,
	       tmpdir, reps);
	printf("| case | M events/s to stop returned (median) | min | max | MB/s | M events/s to all serialized | stop() ms | bytes/event | drops | target |\n");
	printf("|---|---|---|---|---|---|---|---|---|---|\n");
	for (int mode = 0; mode < D_NR; mode++) {
		double evs[MAX_REPS], mbs[MAX_REPS], ser[MAX_REPS], stop[MAX_REPS];
		uint64_t drops = 0, bytes = 0, events = 0;
		struct stat3 e, m, sr, sp;

		for (unsigned int k = 0; k < reps; k++) {
			struct drain_result r = drain_once((enum drain_mode)mode);

			evs[k] = (double)r.events / r.secs / 1e6;
			mbs[k] = (double)r.bytes / r.secs / 1e6;
			ser[k] = (double)r.events / r.ser_secs / 1e6;
			stop[k] = r.stop_secs * 1e3;
			drops += r.drops;
			bytes = r.bytes;
			events = r.events;
		}
		e = summarize(evs, reps);
		m = summarize(mbs, reps);
		sr = summarize(ser, reps);
		sp = summarize(stop, reps);
		printf("| %s | %.2f | %.2f | %.2f | %.0f | %.2f | %.0f | %.1f | %" PRIu64
		       " | ≥ 10 M/s: %s |\n", names[mode], e.med, e.min, e.max, m.med, sr.med, sp.med,
		       events ? (double)bytes / (double)events : 0.0, drops,
		       e.med >= 10.0 ? "met" : "**missed**");
	}
}

/* ---- a counted drain (--drain-count) ------------------------------------- */

struct turn_arg {
	int cpu;
	uint32_t index;
	uint64_t n;		/* events this writer writes */
	uint64_t refused;
};

static unsigned long turn;	/* atomic: turns taken so far, by everyone */
static int writers_done;	/* atomic: writers that wrote all theirs */

/* Waits for this writer's turn; false once every other writer is done. */
static bool wait_turn(const struct turn_arg *a)
{
	/* pairs with the store_release in pass_turn(): the other writer's
	 * records were reserved (and stamped) before this turn begins */
	while (rp_load_acquire(&turn) % (unsigned long)count_writers != a->index) {
		if (rp_load_relaxed(&writers_done) == count_writers - 1)
			return false;
		sched_yield();
	}
	return true;
}

static void pass_turn(void)
{
	/* pairs with the load_acquire in wait_turn() */
	rp_store_release(&turn, rp_load_relaxed(&turn) + 1);
}

/* Writes a->n events in turns of count_run with the other writers. */
static void *turn_writer(void *p)
{
	struct turn_arg *a = p;
	struct small s;
	uint64_t done = 0, k;
	bool alone = false;

	bench_pin(a->cpu);
	small_fill(&s, 0, a->index);
	while (done < a->n) {
		if (!alone && !wait_turn(a))
			alone = true;	/* the others are done: no more turns */
		for (k = 0; k < count_run && done < a->n; k++, done++) {
			s.counter = done + 1;
			if (rp_event_write(ev_on, &s, sizeof(s)))
				a->refused++;
		}
		if (!alone)
			pass_turn();
	}
	rp_add_relaxed(&writers_done, 1);
	/* the others may still wait for turns this writer would take */
	while (!alone && rp_load_relaxed(&writers_done) < count_writers) {
		if (rp_load_acquire(&turn) % (unsigned long)count_writers == a->index)
			pass_turn();	/* acquire: pairs with pass_turn()'s release */
		else
			sched_yield();
	}
	return NULL;
}

static int drain_count(void)
{
	struct rp_session_stats st = { .sz = sizeof(st) };
	const char *path = count_keep ? count_keep : tmp_path("count.nettrace");
	struct turn_arg a[2];
	pthread_t th[2];
	uint64_t t0, t1, refused = 0;
	struct rp_session *s;
	struct stat fst;
	int w;

	if (count_writers < 1 || count_writers > 2 || (count_writers == 2 && nr_cpus < 2)) {
		fprintf(stderr, "bench_session: --writers takes 1, or 2 with two CPUs\n");
		return 1;
	}
	if (!count_live)
		rp_store_relaxed(&rp_drain_pause, 1);
	s = session_start(512ull << 20, path);
	t0 = now_ns();
	for (w = 0; w < count_writers; w++) {
		a[w] = (struct turn_arg){ .cpu = cpus[w], .index = (uint32_t)w,
					  .n = count_events / (uint64_t)count_writers +
					       ((uint64_t)w < count_events % (uint64_t)count_writers) };
		if (pthread_create(&th[w], NULL, turn_writer, &a[w]))
			die("pthread_create");
	}
	for (w = 0; w < count_writers; w++) {
		pthread_join(th[w], NULL);
		refused += a[w].refused;
	}
	if (!count_live) {
#ifdef CALLGRIND_ZERO_STATS
		/* under callgrind, count from here: the drainer's held loop
		 * costs what the writers' time costs, not what the events do */
		CALLGRIND_ZERO_STATS;
#endif
		t0 = now_ns();
		rp_store_relaxed(&rp_drain_pause, 0);
	}
	wait_drained(s, count_events, &st);
	if (rp_session_stop(s))
		die("rp_session_stop");
	t1 = now_ns();
	printf("events %" PRIu64 "\nrefused %" PRIu64 "\ndrops %" PRIu64 "\nbytes %" PRIu64
	       "\ndrain_ms %.1f\n", st.events_written, refused, total_drops(&st),
	       stat(path, &fst) == 0 ? (uint64_t)fst.st_size : 0, (double)(t1 - t0) / 1e6);
	if (!count_keep)
		unlink(path);
	return 0;
}

/* ---- resident memory ----------------------------------------------------- */

/* Writes from each CPU until its ring's producer position went once around. */
static uint64_t fill_rings(struct rp_session *s)
{
	struct small sm;
	uint64_t attempted = 0;

	small_fill(&sm, 0, 0);
	for (int c = 0; c < nr_cpus; c++) {
		struct rp_ring *r = rp_shm_ring(s->shm, (uint32_t)cpus[c] % rp_shm_nr_rings(s->shm));
		uint64_t cap = 8 * (r->size / REC_BYTES) + 1000000;

		bench_pin(cpus[c]);
		for (uint64_t i = 0; i < cap; i++) {
			if (!(i & 1023) && rp_load_relaxed(&r->hdr->producer_pos) >= r->size)
				break;
			sm.counter = ++attempted;
			rp_event_write(ev_on, &sm, sizeof(sm));
		}
	}
	unpin();
	return attempted;
}

static void memory_rows(void)
{
	static const unsigned int mib[] = { 1, 16, 64, 256 };
	double page_mib = (double)sysconf(_SC_PAGESIZE) / (1 << 20);

	if (!kv) {
		printf("\n### resident memory per session (bench_session)\n\n");
		printf("RSS delta from /proc/self/statm against the RSS before the session "
		       "started; filled = every ring written through once (drainer running)\n\n");
		printf("| buffer | rings x ring size | after start | after filling | after stop | events to fill | drops |\n");
		printf("|---|---|---|---|---|---|---|\n");
	}
	/* --kv: the 1 MiB session only, the buffer of the end-to-end row */
	for (size_t i = 0; i < (kv ? 1 : sizeof(mib) / sizeof(mib[0])); i++) {
		struct rp_session_stats st = { .sz = sizeof(st) };
		struct rp_session *s;
		long r0, r1, r2, r3;
		uint64_t n, ring;
		uint32_t nr;

		r0 = rss_pages();
		s = session_start((uint64_t)mib[i] << 20, tmp_path("rss.nettrace"));
		r1 = rss_pages();
		ring = rp_shm_ring(s->shm, 0)->size;
		nr = rp_shm_nr_rings(s->shm);
		n = fill_rings(s);
		wait_drained(s, n, &st);
		r2 = rss_pages();
		if (rp_session_stop(s))
			die("rp_session_stop");
		r3 = rss_pages();
		unlink(tmp_path("rss.nettrace"));
		if (kv) {
			printf("rss_mib %.1f\nrss_mib_after_start %.1f\n",
			       (double)(r2 - r0) * page_mib, (double)(r1 - r0) * page_mib);
			continue;
		}
		printf("| %u MiB | %u x %" PRIu64 " KiB | %+.1f MiB | %+.1f MiB | %+.1f MiB | %" PRIu64
		       " | %" PRIu64 " |\n", mib[i], nr, ring >> 10, (double)(r1 - r0) * page_mib,
		       (double)(r2 - r0) * page_mib, (double)(r3 - r0) * page_mib, n,
		       total_drops(&st));
	}
}

/* ---- main ------------------------------------------------------------------ */

int main(int argc, char **argv)
{
	struct rp_provider_opts po = { .sz = sizeof(po), .name = "Bench-Session" };
	struct rp_provider_opts po_off = { .sz = sizeof(po_off), .name = "Bench-Session-Off" };
	struct rp_event_opts eo = { .sz = sizeof(eo), .id = 1, .name = "Small", .level = 4,
				    .nfields = 4, .fields = small_fields };
	struct rp_provider *p, *p_off;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick")) {
			quick = true;
			reps = 3;
			drain_events = 1000000;
			disabled_calls = 10000000;
		} else if (!strcmp(argv[i], "--kv")) {
			kv = true;
		} else if (!strcmp(argv[i], "--drain")) {
			drain_only = true;
		} else if (!strcmp(argv[i], "--drain-count") && i + 1 < argc) {
			count_events = strtoull(argv[++i], NULL, 0);
		} else if (!strcmp(argv[i], "--writers") && i + 1 < argc) {
			count_writers = atoi(argv[++i]);
		} else if (!strcmp(argv[i], "--run") && i + 1 < argc) {
			count_run = strtoull(argv[++i], NULL, 0);
		} else if (!strcmp(argv[i], "--live")) {
			count_live = true;
		} else if (!strcmp(argv[i], "--v6")) {
			count_format = 6;
		} else if (!strcmp(argv[i], "--keep") && i + 1 < argc) {
			count_keep = argv[++i];
		} else {
			fprintf(stderr, "usage: %s [--quick] [--kv] [--drain] | --drain-count N "
				"[--writers W] [--run R] [--live] [--v6] [--keep PATH]\n", argv[0]);
			return 2;
		}
	}
	if (bench_env_init("bench_session", tmpdir, sizeof(tmpdir), &allowed_cpus, cpus, &nr_cpus))
		return 1;

	p = rp_provider_new(&po);
	p_off = rp_provider_new(&po_off);
	if (!p || !p_off)
		die("rp_provider_new");
	ev_on = rp_event_new(p, &eo);
	ev_off = rp_event_new(p_off, &eo);
	if (!ev_on || !ev_off)
		die("rp_event_new");

	if (count_events) {
		int rc = drain_count();

		rmdir(tmpdir);
		return rc;
	}
	if (!drain_only)
		producer_rows();
	if (!kv)
		drain_rows();
	if (!drain_only)
		memory_rows();
	rmdir(tmpdir);
	return 0;
}
