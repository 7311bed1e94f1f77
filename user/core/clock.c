// SPDX-License-Identifier: MIT
/*
 * Timestamp source: calibrated invariant TSC or CLOCK_MONOTONIC.
 * See clock.h for the contract and the ticks -> CLOCK_MONOTONIC formula.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define CLOCK_HAVE_TSC 1
#else
#define CLOCK_HAVE_TSC 0
#endif

#include "clock.h"

#define CLOCK_CALIB_NS		15000000ull	/* calibration window */
#define CLOCK_MIN_WINDOW_NS	5000000ull	/* shorter means we were not asleep */
#define CLOCK_MAX_BRACKET_NS	50000ull	/* rdtsc..rdtsc around clock_gettime */
#define CLOCK_MIN_HZ		50000000ull
#define CLOCK_MAX_HZ		20000000000ull

struct rp_clock_state rp_clock_state_;

static pthread_once_t clock_once = PTHREAD_ONCE_INIT;

static int clock_invariant_tsc(void)
{
#if CLOCK_HAVE_TSC
	unsigned int eax, ebx, ecx, edx;

	if (!__get_cpuid(0x80000000u, &eax, &ebx, &ecx, &edx) || eax < 0x80000007u)
		return 0;
	if (!__get_cpuid(0x80000007u, &eax, &ebx, &ecx, &edx))
		return 0;
	return !!(edx & (1u << 8));
#else
	return 0;
#endif
}

/*
 * Read a (tsc, CLOCK_MONOTONIC) pair with the TSC read on both sides of
 * clock_gettime; keep the tightest of a few tries and use the midpoint.
 * Returns the bracket width in ticks.
 */
static uint64_t clock_read_pair(struct rp_clock_anchor *a)
{
	uint64_t best = UINT64_MAX;

	for (int i = 0; i < 7; i++) {
		uint64_t t0 = rp_clock_rdtsc();
		uint64_t ns = rp_clock_mono_ns();
		uint64_t t1 = rp_clock_rdtsc();

		if (t1 - t0 < best) {
			best = t1 - t0;
			a->ticks = t0 + (t1 - t0) / 2;
			a->mono_ns = ns;
		}
	}
	return best;
}

static void clock_sleep_ns(uint64_t ns)
{
	struct timespec req = { .tv_sec = (time_t)(ns / 1000000000ull),
				.tv_nsec = (long)(ns % 1000000000ull) };

	while (nanosleep(&req, &req) && errno == EINTR)
		;
}

/* Returns 0 and fills freq/anchor, or -EIO when the TSC does not behave. */
static int clock_calibrate(uint64_t *freq_hz, struct rp_clock_anchor *anchor)
{
	for (int attempt = 0; attempt < 3; attempt++) {
		struct rp_clock_anchor a, b;
		uint64_t wa, wb, dt, dns;
		unsigned __int128 hz;

		wa = clock_read_pair(&a);
		clock_sleep_ns(CLOCK_CALIB_NS);
		wb = clock_read_pair(&b);
		if (b.ticks <= a.ticks || b.mono_ns <= a.mono_ns)
			continue;
		dt = b.ticks - a.ticks;
		dns = b.mono_ns - a.mono_ns;
		if (dns < CLOCK_MIN_WINDOW_NS)
			continue;
		hz = (unsigned __int128)dt * 1000000000u / dns;
		if (hz < CLOCK_MIN_HZ || hz > CLOCK_MAX_HZ)
			continue;
		/* a bracket wider than CLOCK_MAX_BRACKET_NS means we were
		 * preempted while reading; the pair is too fuzzy */
		if ((unsigned __int128)(wa > wb ? wa : wb) * 1000000000u / hz > CLOCK_MAX_BRACKET_NS)
			continue;
		*freq_hz = (uint64_t)hz;
		*anchor = b;
		return 0;
	}
	return -EIO;
}

static void clock_setup(struct rp_clock_state *st, int source, int err)
{
	st->init_err = err;
	if (source == RP_CLOCK_MONOTONIC) {
		st->freq_hz = 1000000000ull;
		st->ns_mult = 1ull << 32;
		st->anchor.ticks = 0;
		st->anchor.mono_ns = 0;
	} else {
		st->ns_mult = (uint64_t)(((unsigned __int128)1000000000u << 32) / st->freq_hz);
	}
	/* pairs with the load_acquire of .source in rp_clock_now() and the
	 * getters: the fields above are visible before the source is */
	rp_store_release(&st->source, source);
}

static void clock_init_once(void)
{
	struct rp_clock_state *st = &rp_clock_state_;
	const char *env = getenv("RINGPIPE_CLOCK");
	int want_tsc = 0, want_mono = 0;

	if (env && *env) {
		if (!strcmp(env, "tsc")) {
			want_tsc = 1;
		} else if (!strcmp(env, "monotonic")) {
			want_mono = 1;
		} else {
			fprintf(stderr, "ringpipe: RINGPIPE_CLOCK='%s' is not valid: expected 'tsc' or 'monotonic'\n",
				env);
			clock_setup(st, RP_CLOCK_MONOTONIC, -EINVAL);
			return;
		}
	}
	if (want_mono) {
		clock_setup(st, RP_CLOCK_MONOTONIC, 0);
		return;
	}
	if (!clock_invariant_tsc()) {
		if (want_tsc) {
			fprintf(stderr, "ringpipe: RINGPIPE_CLOCK=tsc but the CPU reports no invariant TSC (CPUID 0x80000007 EDX bit 8)\n");
			clock_setup(st, RP_CLOCK_MONOTONIC, -ENOTSUP);
			return;
		}
		clock_setup(st, RP_CLOCK_MONOTONIC, 0);
		return;
	}
	if (clock_calibrate(&st->freq_hz, &st->anchor)) {
		if (want_tsc) {
			fprintf(stderr, "ringpipe: RINGPIPE_CLOCK=tsc but TSC calibration against CLOCK_MONOTONIC failed\n");
			clock_setup(st, RP_CLOCK_MONOTONIC, -ENOTSUP);
			return;
		}
		clock_setup(st, RP_CLOCK_MONOTONIC, 0);
		return;
	}
	clock_setup(st, RP_CLOCK_TSC, 0);
}

int rp_clock_init(void)
{
	pthread_once(&clock_once, clock_init_once);
	return rp_clock_state_.init_err;
}

uint64_t rp_clock_now_slow(void)
{
	rp_clock_init();
	return rp_clock_now();
}

enum rp_clock_source rp_clock_source(void)
{
	rp_clock_init();
	return (enum rp_clock_source)rp_load_acquire(&rp_clock_state_.source); /* pairs with clock_setup() */
}

const char *rp_clock_source_name(enum rp_clock_source src)
{
	switch (src) {
	case RP_CLOCK_TSC:
		return "tsc";
	case RP_CLOCK_MONOTONIC:
		return "monotonic";
	default:
		return "unset";
	}
}

uint64_t rp_clock_frequency(void)
{
	rp_clock_init();
	return rp_clock_state_.freq_hz;
}

void rp_clock_anchor_now(struct rp_clock_anchor *a)
{
	if (rp_clock_source() == RP_CLOCK_TSC) {
		clock_read_pair(a);
	} else {
		a->mono_ns = rp_clock_mono_ns();
		a->ticks = a->mono_ns;
	}
}

uint64_t rp_clock_to_mono_ns_at(uint64_t ticks, const struct rp_clock_anchor *a)
{
	const struct rp_clock_state *st = &rp_clock_state_;
	uint64_t d;

	if (rp_clock_source() != RP_CLOCK_TSC)
		return ticks;
	/* signed distance from the anchor, scaled by the 32.32 multiplier */
	if (ticks >= a->ticks) {
		d = (uint64_t)(((unsigned __int128)(ticks - a->ticks) * st->ns_mult) >> 32);
		return a->mono_ns + d;
	}
	d = (uint64_t)(((unsigned __int128)(a->ticks - ticks) * st->ns_mult) >> 32);
	return d > a->mono_ns ? 0 : a->mono_ns - d;
}

uint64_t rp_clock_from_mono_ns_at(uint64_t mono_ns, const struct rp_clock_anchor *a)
{
	const struct rp_clock_state *st = &rp_clock_state_;
	uint64_t d;

	if (rp_clock_source() != RP_CLOCK_TSC)
		return mono_ns;
	/* ticks per ns is freq / 1e9; the 128-bit product cannot overflow */
	if (mono_ns >= a->mono_ns) {
		d = (uint64_t)((unsigned __int128)(mono_ns - a->mono_ns) * st->freq_hz / 1000000000u);
		return a->ticks + d;
	}
	d = (uint64_t)((unsigned __int128)(a->mono_ns - mono_ns) * st->freq_hz / 1000000000u);
	return d > a->ticks ? 0 : a->ticks - d;
}

uint64_t rp_clock_to_mono_ns(uint64_t ticks)
{
	rp_clock_init();
	return rp_clock_to_mono_ns_at(ticks, &rp_clock_state_.anchor);
}
