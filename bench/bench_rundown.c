// SPDX-License-Identifier: MIT
/*
 * Does rundown slow the JIT down? ringpipe-demo's method tables (published
 * with a release store, read by rundown with acquire loads, no lock) under
 * 8 publishing threads, with and without a rundown running at the same time.
 *
 *   bench_rundown [--quick]
 *
 * Each of 8 threads publishes a method, timing the publish alone
 * (clock_gettime around jit_publish), then sleeps ~20 us; so the tables keep
 * growing the whole time, as in a JIT-heavy process. Phase "alone" runs
 * 1 s (0.5 s with --quick) without rundown; phase "rundown" runs as long with
 * one more thread doing back-to-back rundowns (jit_rundown: every published
 * method as MethodDCEndVerbose into a live Drop session of 256 MiB writing
 * to $TMPDIR, the real encoders and write path). Latencies of all threads
 * are pooled; median and p99 per phase, median over 3 repetitions (1 with
 * --quick). The target is the issue's: with rundown within 2x of without.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ringpipe/ringpipe.h"

/* The demo's modules (libringpipe-demo.a): the benchmark measures exactly
 * that code. */
#include "clr_events.h"
#include "jit.h"

#define NPUB 8u
#define MAX_SAMPLES (1u << 20)

static bool quick;
static int phase_stop;			/* atomic */
static int rundown_on;			/* atomic */

struct pub {
	pthread_t th;
	uint32_t t;
	uint32_t *lat;			/* ns */
	size_t n;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void *pub_main(void *arg)
{
	struct pub *p = arg;

	while (!__atomic_load_n(&phase_stop, __ATOMIC_RELAXED) && p->n < MAX_SAMPLES) {
		uint64_t t0 = now_ns(), t1;
		bool ok = jit_publish(p->t);
		struct timespec ts = { 0, 20000 };

		t1 = now_ns();
		if (!ok)
			break;
		p->lat[p->n++] = (uint32_t)(t1 - t0 > UINT32_MAX ? UINT32_MAX : t1 - t0);
		nanosleep(&ts, NULL);
	}
	return NULL;
}

static uint64_t rundowns, rundown_methods;

static void *rundown_main(void *arg)
{
	(void)arg;
	while (!__atomic_load_n(&phase_stop, __ATOMIC_RELAXED)) {
		struct jit_rundown_result r;

		jit_rundown(&r);
		rundowns++;
		rundown_methods += r.emitted;
	}
	return NULL;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

struct figures {
	double med, p99;
	size_t samples;
};

/* One phase: fresh tables, 8 publishers, optionally a rundown thread. */
static int phase(struct pub *pubs, bool with_rundown, double seconds, struct figures *f)
{
	struct jit_opts jo = { .threads = NPUB, .capacity = 1u << 17, .rate = 0 };
	pthread_t rd;
	uint32_t *all;
	size_t n = 0, i;
	uint32_t k;

	if (jit_init(&jo))
		return -1;
	/* a head start: rundown has methods to list from its first pass */
	for (k = 0; k < NPUB; k++)
		for (i = 0; i < 2000; i++)
			jit_publish(k);
	__atomic_store_n(&phase_stop, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&rundown_on, with_rundown, __ATOMIC_RELAXED);
	for (k = 0; k < NPUB; k++) {
		pubs[k].t = k;
		pubs[k].n = 0;
		if (pthread_create(&pubs[k].th, NULL, pub_main, &pubs[k]))
			return -1;
	}
	if (with_rundown && pthread_create(&rd, NULL, rundown_main, NULL))
		return -1;
	usleep((useconds_t)(seconds * 1e6));
	__atomic_store_n(&phase_stop, 1, __ATOMIC_RELAXED);
	for (k = 0; k < NPUB; k++)
		pthread_join(pubs[k].th, NULL);
	if (with_rundown)
		pthread_join(rd, NULL);
	for (k = 0; k < NPUB; k++)
		n += pubs[k].n;
	all = malloc(n * sizeof(*all) + 1);
	if (!all)
		return -1;
	for (n = 0, k = 0; k < NPUB; k++) {
		memcpy(all + n, pubs[k].lat, pubs[k].n * sizeof(*all));
		n += pubs[k].n;
	}
	qsort(all, n, sizeof(*all), cmp_u32);
	f->samples = n;
	f->med = n ? all[n / 2] : 0;
	f->p99 = n ? all[n * 99 / 100] : 0;
	free(all);
	/* jit_init() allocates a fresh set of tables for each phase and the
	 * demo has no call that frees them: each phase keeps its 64 MiB until
	 * the benchmark exits */
	return 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, unsigned n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv)
{
	struct rp_provider_config pc = { .name = RP_RUNDOWN_PROVIDER, .keywords = 0x80020139ull,
					 .level = 5 };
	struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
				      .buffering = RP_BUFFERING_DROP, .buffer_bytes = 256ull << 20 };
	struct figures a[3], b[3];
	double am[3], ap[3], bm[3], bp[3], med_a, med_b, p99_a, p99_b;
	struct pub pubs[NPUB];
	struct rp_session_stats st = { .sz = sizeof(st) };
	struct rp_session *s;
	unsigned reps, r, k;
	char path[4096];
	uint64_t drops = 0;
	double secs;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick")) {
			quick = true;
		} else {
			fprintf(stderr, "usage: %s [--quick]\n", argv[0]);
			return 2;
		}
	}
	reps = quick ? 1 : 3;
	secs = quick ? 0.5 : 1.0;
	if (clr_events_init(NULL)) {
		fprintf(stderr, "bench_rundown: %s\n", rp_last_error());
		return 1;
	}
	snprintf(path, sizeof(path), "%s/bench_rundown-%d.nettrace",
		 getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
	so.path = path;
	s = rp_session_start(&so);
	if (!s) {
		fprintf(stderr, "bench_rundown: cannot start a session: %s\n", rp_last_error());
		return 1;
	}
	for (k = 0; k < NPUB; k++) {
		pubs[k].lat = malloc(MAX_SAMPLES * sizeof(uint32_t));
		if (!pubs[k].lat)
			return 1;
	}
	for (r = 0; r < reps; r++) {
		if (phase(pubs, false, secs, &a[r]) || phase(pubs, true, secs, &b[r])) {
			fprintf(stderr, "bench_rundown: out of memory or threads\n");
			return 1;
		}
		am[r] = a[r].med, ap[r] = a[r].p99, bm[r] = b[r].med, bp[r] = b[r].p99;
	}
	med_a = median(am, reps), p99_a = median(ap, reps);
	med_b = median(bm, reps), p99_b = median(bp, reps);
	if (!rp_session_stats(s, &st))
		for (k = 0; k < RP_DROP_REASON_NR; k++)
			drops += st.dropped[k];
	rp_session_stop(s);
	unlink(path);

	printf("\n### rundown vs JIT publishing (bench_rundown%s)\n\n", quick ? " --quick" : "");
	printf("%u publishing threads, %u CPUs; publish latency in ns (median of %u repetitions "
	       "of %.1f s); %" PRIu64 " rundowns listed %" PRIu64 " methods, %" PRIu64
	       " events dropped\n\n", NPUB, (unsigned)sysconf(_SC_NPROCESSORS_ONLN), reps, secs,
	       rundowns, rundown_methods, drops);
	printf("| case | publish median ns | publish p99 ns | samples | target |\n");
	printf("|---|---|---|---|---|\n");
	printf("| alone | %.0f | %.0f | %zu | |\n", med_a, p99_a, a[0].samples);
	printf("| during rundown | %.0f | %.0f | %zu | |\n", med_b, p99_b, b[0].samples);
	printf("| ratio | %.2fx | %.2fx | | <= 2x: %s |\n", med_b / med_a, p99_b / p99_a,
	       med_b <= 2 * med_a && p99_b <= 2 * p99_a ? "yes" : "NO");
	for (k = 0; k < NPUB; k++)
		free(pubs[k].lat);
	return 0;
}
