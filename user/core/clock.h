/* SPDX-License-Identifier: MIT */
/*
 * Timestamp source for records.
 *
 * Ticks come from rdtsc when the CPU reports an invariant TSC (CPUID
 * 0x80000007 EDX bit 8) and a ~15 ms calibration against CLOCK_MONOTONIC
 * succeeds; otherwise they are CLOCK_MONOTONIC nanoseconds (frequency 1e9).
 * RINGPIPE_CLOCK=tsc|monotonic forces one; any other value makes
 * rp_clock_init() fail with -EINVAL.
 *
 * Converting ticks to CLOCK_MONOTONIC ns (the bpf_ktime_get_ns() clock):
 *
 *     ns = anchor.mono_ns + (ticks - anchor.ticks) * 1e9 / freq
 *
 * where an anchor is a (ticks, CLOCK_MONOTONIC ns) pair read back to back.
 * The error grows with the distance from the anchor times the calibration
 * error (tens of ppm from one 15 ms window) plus NTP slewing of
 * CLOCK_MONOTONIC, so a long-running drainer should take a fresh anchor
 * with rp_clock_anchor_now() every second or so and convert with
 * rp_clock_to_mono_ns_at() against the nearest one.  rp_clock_to_mono_ns()
 * uses the anchor taken at calibration.
 */
#ifndef RP_CLOCK_H
#define RP_CLOCK_H

#include <stdint.h>
#include <time.h>

#include "atomics.h"

enum rp_clock_source {
	RP_CLOCK_UNSET = 0,
	RP_CLOCK_TSC = 1,
	RP_CLOCK_MONOTONIC = 2,
};

struct rp_clock_anchor {
	uint64_t ticks;
	uint64_t mono_ns;
};

/* Internal state; read by the inline fast path. */
struct rp_clock_state {
	int source;			/* enum rp_clock_source */
	int init_err;			/* result of the first rp_clock_init() */
	uint64_t freq_hz;
	uint64_t ns_mult;		/* ns per tick, 32.32 fixed point */
	struct rp_clock_anchor anchor;	/* taken at calibration */
};

extern struct rp_clock_state rp_clock_state_;

/*
 * Pick and calibrate the source, once per process (later calls return the
 * first result).  Returns 0, -EINVAL for a bad RINGPIPE_CLOCK value, or
 * -ENOTSUP when RINGPIPE_CLOCK=tsc cannot be honoured; on error a message
 * goes to stderr and rp_clock_now() still works, on CLOCK_MONOTONIC.
 */
int rp_clock_init(void);
enum rp_clock_source rp_clock_source(void);
const char *rp_clock_source_name(enum rp_clock_source src);
uint64_t rp_clock_frequency(void);		/* ticks per second */
uint64_t rp_clock_to_mono_ns(uint64_t ticks);
void rp_clock_anchor_now(struct rp_clock_anchor *a);
uint64_t rp_clock_to_mono_ns_at(uint64_t ticks, const struct rp_clock_anchor *a);
/* The inverse: CLOCK_MONOTONIC ns (bpf_ktime_get_ns()) to ticks, for events
 * stamped outside the library (BPF records) that join the rings' timeline. */
uint64_t rp_clock_from_mono_ns_at(uint64_t mono_ns, const struct rp_clock_anchor *a);
uint64_t rp_clock_now_slow(void);		/* first call: init, then read */

static inline uint64_t rp_clock_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Sleeps ns of CLOCK_MONOTONIC time (a signal may end it early). */
static inline void rp_clock_sleep_ns(uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull) };

	nanosleep(&ts, NULL);
}

static inline uint64_t rp_clock_rdtsc(void)
{
#if defined(__x86_64__) || defined(__i386__)
	uint32_t lo, hi;

	__asm__ __volatile__("rdtsc" : "=a"(lo), "=d"(hi));
	return ((uint64_t)hi << 32) | lo;
#else
	return rp_clock_mono_ns();
#endif
}

static inline uint64_t rp_clock_now(void)
{
	/* pairs with the store_release of .source in clock_setup(): a reader
	 * that sees the source also sees the calibration */
	int src = rp_load_acquire(&rp_clock_state_.source);

	if (rp_likely(src == RP_CLOCK_TSC))
		return rp_clock_rdtsc();
	if (rp_unlikely(src == RP_CLOCK_UNSET))
		return rp_clock_now_slow();
	return rp_clock_mono_ns();
}

#endif /* RP_CLOCK_H */
