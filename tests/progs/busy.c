// SPDX-License-Identifier: MIT
/*
 * The sampled target of tests/test_sample.c: one function that burns CPU
 * for the given number of seconds, built with frame pointers at -O1 so that
 * its samples have a known leaf. noinline and a volatile accumulator keep
 * the compiler from folding the loop into main.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

volatile unsigned long busy_sink;

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

__attribute__((noinline)) unsigned long busy_spin(double seconds)
{
	double end = now() + seconds;
	unsigned long x = 0;

	/* the clock is read once per 2^20 iterations: nearly every sample
	 * lands in this loop, not in clock_gettime */
	do {
		for (unsigned long i = 0; i < (1ul << 20); i++)
			busy_sink = x += i * 2654435761ul;
	} while (now() < end);
	return x;
}

int main(int argc, char **argv)
{
	double s = argc > 1 ? atof(argv[1]) : 1.5;

	printf("%lu\n", busy_spin(s));
	return 0;
}
