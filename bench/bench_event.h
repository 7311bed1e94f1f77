/* SPDX-License-Identifier: MIT */
/*
 * What the session benchmarks share: the event (32 bytes, a few integers and
 * a short string, the payload every producer-cost figure in
 * Documentation/performance.md uses) and the median/min/max summary.
 */
#ifndef RINGPIPE_BENCH_EVENT_H
#define RINGPIPE_BENCH_EVENT_H

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ringpipe/ringpipe.h"

#define PAYLOAD 32u

struct small {
	uint64_t counter;
	uint32_t thread;
	uint32_t extra;
	uint16_t name[8];		/* "ringpip" + NUL, UTF-16 */
} __attribute__((packed));

_Static_assert(sizeof(struct small) == PAYLOAD, "the benchmark event is 32 bytes");

/* The name every benchmark event carries: struct small s = { .name = SMALL_NAME } */
#define SMALL_NAME { 'r', 'i', 'n', 'g', 'p', 'i', 'p', 0 }

static const struct rp_field small_fields[] = {
	{ "Counter", RP_TYPE_U64, 0, 0, NULL },
	{ "Thread", RP_TYPE_U32, 0, 0, NULL },
	{ "Extra", RP_TYPE_U32, 0, 0, NULL },
	{ "Name", RP_TYPE_STRING, 0, 0, NULL },
};

/* Pins the calling thread to cpu: writers run one per CPU. */
static inline void bench_pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

struct stat3 {
	double med, min, max;
};

static inline int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Median, min and max of n <= 64 samples (the input is left as it is). */
static inline struct stat3 summarize(const double *in, unsigned int n)
{
	double v[64];
	struct stat3 s;

	memcpy(v, in, n * sizeof(*v));
	qsort(v, n, sizeof(*v), cmp_double);
	s.min = v[0];
	s.max = v[n - 1];
	s.med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
	return s;
}

static inline uint64_t total_drops(const struct rp_session_stats *st)
{
	uint64_t n = 0;

	for (int r = 0; r < RP_DROP_REASON_NR; r++)
		n += st->dropped[r];
	return n;
}

#endif /* RINGPIPE_BENCH_EVENT_H */
