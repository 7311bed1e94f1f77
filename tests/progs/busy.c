// SPDX-License-Identifier: MIT
/*
 * The sampled target of tests/test_sample.c: one function that burns CPU
 * for the given number of seconds, built with frame pointers at -O1 so that
 * its samples have a known leaf. noinline and a volatile accumulator keep
 * the compiler from folding the loop into main. The seconds are of CPU
 * time: samples count CPU time, so a loaded machine (a CI run beside other
 * work) still gives the number of samples a test counts on, and start-up
 * and exit stay the same small share of them (wall time is capped, so a
 * starved process still ends).
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

volatile unsigned long busy_sink;

static double now(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

__attribute__((noinline)) unsigned long busy_spin(double seconds)
{
	double end = now(CLOCK_PROCESS_CPUTIME_ID) + seconds;
	double wall_end = now(CLOCK_MONOTONIC) + 20 * seconds + 10;
	unsigned long x = 0;

	/* the clocks are read once per 2^20 iterations: nearly every sample
	 * lands in this loop, not in clock_gettime */
	do {
		for (unsigned long i = 0; i < (1ul << 20); i++)
			busy_sink = x += i * 2654435761ul;
	} while (now(CLOCK_PROCESS_CPUTIME_ID) < end && now(CLOCK_MONOTONIC) < wall_end);
	return x;
}

int main(int argc, char **argv)
{
	double s = argc > 1 ? atof(argv[1]) : 1.5;

	printf("%lu\n", busy_spin(s));
	return 0;
}
