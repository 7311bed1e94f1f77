// SPDX-License-Identifier: MIT
/*
 * The LTTng-UST contender of the side-by-side comparison (scripts/bench-lttng.sh
 * starts the session daemon and the recording sessions, then runs this).
 *
 *   lttng_bench producer THREADS EVENTS REPS [WARMUP]
 *       REPS repetitions (after a warm-up of WARMUP events per thread,
 *       default EVENTS/10: enough to touch every page of the channel's
 *       buffers, so no timed loop pays first-touch faults) of THREADS threads,
 *       pinned one per CPU, each writing EVENTS events; prints the median,
 *       min and max of the per-repetition mean ns/event per thread.
 *   lttng_bench burst THREADS TOTAL [STOP-COMMAND]
 *       THREADS pinned threads write TOTAL events together as fast as they
 *       can, then STOP-COMMAND (e.g. "lttng stop S") runs; prints the
 *       seconds from the first write until it returned: `lttng stop` waits
 *       until the consumer daemon has written everything, so the trace is
 *       complete on disk at that point, as after ringpipe's session stop.
 *   lttng_bench sweep THREADS TOTAL [STOP-COMMAND]
 *       the same with THREADS (1 to 128) unpinned threads, many more than
 *       CPUs allowed, TOTAL split over them (the first TOTAL % THREADS one
 *       more): the thread sweep of "Block at production shape". The threads
 *       wait at a futex gate before their first write; also prints the
 *       process's voluntary and involuntary context switches
 *       (getrusage(RUSAGE_SELF): the writers, LTTng-UST's own threads and
 *       the main thread) from just before the gate opened until
 *       STOP-COMMAND returned (its process is a child: not counted).
 *
 * Output: "key value" lines, read by scripts/run-bench.sh. "enabled" says
 * whether a recording session enabled the tracepoint when the timed part
 * started (the script checks it against what it set up).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "bench_event.h"
#include "clock.h"
#include "futex.h"
#include "lttng_tp.h"

#define MAX_THREADS 2		/* pinned, one per CPU */
#define SWEEP_MAX_THREADS 128	/* unpinned */
#define MAX_REPS 64

static int cpus[MAX_THREADS];
static int nr_cpus;

struct warg {
	int cpu;
	uint32_t index;
	uint64_t n;
	uint64_t t_first, t_last;
	pthread_barrier_t *bar;
};

static uint32_t gate_arrived;	/* sweep writers at the gate */
static uint32_t gate_open;	/* futex: 1 once the sweep run starts */

struct swarg {
	uint32_t index;
	uint64_t n;
	uint64_t t_first, t_last;
};

static void *sweep_writer(void *p)
{
	struct swarg *a = p;

	__atomic_add_fetch(&gate_arrived, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&gate_open, __ATOMIC_ACQUIRE))
		rp_futex_wait(&gate_open, 0, 0);
	a->t_first = rp_clock_mono_ns();
	for (uint64_t i = 1; i <= a->n; i++)
		lttng_ust_tracepoint(ringpipe_bench, small, i, a->index, 0, LTTNG_BENCH_NAME);
	a->t_last = rp_clock_mono_ns();
	return NULL;
}

/* The sweep: nthreads unpinned writers of total events in all, then stop. */
static int sweep(int nthreads, uint64_t total, const char *stop)
{
	static struct swarg a[SWEEP_MAX_THREADS];
	static pthread_t th[SWEEP_MAX_THREADS];
	uint64_t first = UINT64_MAX, last = 0, t_end, attempted = 0;
	struct rusage ru0, ru1;
	int rc = 0;

	for (int t = 0; t < nthreads; t++) {
		a[t] = (struct swarg){ .index = (uint32_t)t,
				       .n = total / (uint64_t)nthreads +
					    ((uint64_t)t < total % (uint64_t)nthreads) };
		if (pthread_create(&th[t], NULL, sweep_writer, &a[t])) {
			perror("lttng_bench: pthread_create");
			exit(1);
		}
	}
	while (__atomic_load_n(&gate_arrived, __ATOMIC_ACQUIRE) < (uint32_t)nthreads)
		rp_clock_sleep_ns(100000);
	rp_clock_sleep_ns(2000000);	/* the last ones get to their futex wait */
	getrusage(RUSAGE_SELF, &ru0);
	__atomic_store_n(&gate_open, 1, __ATOMIC_RELEASE);
	rp_futex_wake(&gate_open, INT32_MAX);
	for (int t = 0; t < nthreads; t++) {
		pthread_join(th[t], NULL);
		if (a[t].t_first < first)
			first = a[t].t_first;
		if (a[t].t_last > last)
			last = a[t].t_last;
		attempted += a[t].n;
	}
	if (stop) {
		fflush(stdout);
		rc = system(stop);
	}
	t_end = rp_clock_mono_ns();
	getrusage(RUSAGE_SELF, &ru1);
	printf("attempted %llu\nsecs %.6f\nwrite_secs %.6f\nnvcsw %ld\nnivcsw %ld\nstop_rc %d\n",
	       (unsigned long long)attempted, (double)(t_end - first) / 1e9,
	       (double)(last - first) / 1e9, ru1.ru_nvcsw - ru0.ru_nvcsw,
	       ru1.ru_nivcsw - ru0.ru_nivcsw, rc);
	return 0;
}

static void *writer(void *p)
{
	struct warg *a = p;

	bench_pin(a->cpu);
	pthread_barrier_wait(a->bar);
	a->t_first = rp_clock_mono_ns();
	for (uint64_t i = 1; i <= a->n; i++)
		lttng_ust_tracepoint(ringpipe_bench, small, i, a->index, 0, LTTNG_BENCH_NAME);
	a->t_last = rp_clock_mono_ns();
	return NULL;
}

/* nthreads pinned writers of n events each; fills the first write and the last */
static double run_writers(int nthreads, uint64_t n, uint64_t *first, uint64_t *last)
{
	struct warg a[MAX_THREADS];
	pthread_t th[MAX_THREADS];
	pthread_barrier_t bar;
	double sum = 0;

	*first = UINT64_MAX;
	*last = 0;
	pthread_barrier_init(&bar, NULL, (unsigned int)nthreads);
	for (int t = 0; t < nthreads; t++) {
		a[t] = (struct warg){ .cpu = cpus[t % nr_cpus], .index = (uint32_t)t, .n = n,
				      .bar = &bar };
		if (pthread_create(&th[t], NULL, writer, &a[t])) {
			perror("lttng_bench: pthread_create");
			exit(1);
		}
	}
	for (int t = 0; t < nthreads; t++) {
		pthread_join(th[t], NULL);
		sum += (double)(a[t].t_last - a[t].t_first) / (double)n;
		if (a[t].t_first < *first)
			*first = a[t].t_first;
		if (a[t].t_last > *last)
			*last = a[t].t_last;
	}
	pthread_barrier_destroy(&bar);
	return sum / nthreads;
}

static int usage(void)
{
	fprintf(stderr, "usage: lttng_bench producer THREADS EVENTS REPS [WARMUP]\n"
			"       lttng_bench burst THREADS TOTAL [STOP-COMMAND]\n"
			"       lttng_bench sweep THREADS TOTAL [STOP-COMMAND]\n");
	return 2;
}

int main(int argc, char **argv)
{
	cpu_set_t allowed;
	uint64_t first, last;
	int threads;

	if (argc < 4)
		return usage();
	threads = atoi(argv[2]);
	if (threads < 1 || threads > (!strcmp(argv[1], "sweep") ? SWEEP_MAX_THREADS : MAX_THREADS))
		return usage();
	sched_getaffinity(0, sizeof(allowed), &allowed);
	for (int c = 0; c < CPU_SETSIZE && nr_cpus < MAX_THREADS; c++)
		if (CPU_ISSET(c, &allowed))
			cpus[nr_cpus++] = c;
	printf("enabled %d\n", lttng_ust_tracepoint_enabled(ringpipe_bench, small) ? 1 : 0);

	if (!strcmp(argv[1], "producer") && (argc == 5 || argc == 6)) {
		uint64_t n = strtoull(argv[3], NULL, 10);
		uint64_t warm = argc == 6 ? strtoull(argv[5], NULL, 10) : n / 10;
		unsigned int reps = (unsigned int)atoi(argv[4]);
		double v[MAX_REPS];
		struct stat3 s;

		if (!n || !reps || reps > MAX_REPS)
			return usage();
		run_writers(threads, warm ? warm : 1, &first, &last);	/* warm-up */
		for (unsigned int k = 0; k < reps; k++)
			v[k] = run_writers(threads, n, &first, &last);
		s = summarize(v, reps);
		printf("ns_med %.2f\nns_min %.2f\nns_max %.2f\n", s.med, s.min, s.max);
		return 0;
	}
	if (!strcmp(argv[1], "burst") && (argc == 4 || argc == 5)) {
		uint64_t total = strtoull(argv[3], NULL, 10);
		uint64_t t_end;
		int rc = 0;

		if (!total)
			return usage();
		run_writers(threads, total / (uint64_t)threads, &first, &last);
		if (argc == 5) {
			fflush(stdout);
			rc = system(argv[4]);
		}
		t_end = rp_clock_mono_ns();
		printf("attempted %llu\nsecs %.6f\nwrite_secs %.6f\nstop_rc %d\n",
		       (unsigned long long)(total / (uint64_t)threads * (uint64_t)threads),
		       (double)(t_end - first) / 1e9, (double)(last - first) / 1e9, rc);
		return 0;
	}
	if (!strcmp(argv[1], "sweep") && (argc == 4 || argc == 5)) {
		uint64_t total = strtoull(argv[3], NULL, 10);

		if (total < (uint64_t)threads)
			return usage();
		return sweep(threads, total, argc == 5 ? argv[4] : NULL);
	}
	return usage();
}
