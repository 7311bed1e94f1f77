// SPDX-License-Identifier: MIT
/*
 * What CPU sampling costs the sampled program.
 *
 *   bench_sample [--quick]
 *
 * The workload: a fixed amount of integer work in one thread (about 1 s
 * untraced on the reference VM; --quick: a third), built into this binary
 * and run as a child (`bench_sample --work N FILE`), which writes the time
 * its loop took to FILE. Cases, in turn within each repetition so that
 * machine noise hits them alike: untraced, and under `ringpipe sample -F HZ
 * -- child` at 99 and 999 Hz (cpu-clock, kernel and user stacks). Reported:
 * median loop time and its overhead over untraced, and samples taken.
 *
 * Needs the ringpipe tool (RINGPIPE_TOOL, or ../ringpipe next to this
 * binary) and the privilege to load BPF; without it, says so and exits 0.
 */
#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"

volatile uint64_t sink;

static int work(uint64_t n, const char *out)
{
	uint64_t t = rp_clock_mono_ns(), x = 1, i;
	FILE *f;

	for (i = 0; i < n; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		sink = x;
	}
	t = rp_clock_mono_ns() - t;
	f = fopen(out, "w");
	if (!f)
		return 1;
	fprintf(f, "%" PRIu64 "\n", t);
	return fclose(f) != 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	static const int hz[] = { 0, 99, 999 };
	enum { NCASES = 3 };
	bool quick = argc > 1 && !strcmp(argv[1], "--quick");
	uint64_t n = quick ? 200000000ull : 600000000ull, t[NCASES][7], samples[NCASES] = { 0 };
	int reps = quick ? 3 : 7, r, c;
	char tool[4096], self[4096], res[] = "/tmp/bench_sample_XXXXXX", cmd[16384];
	const char *env = getenv("RINGPIPE_TOOL");
	ssize_t len;
	int fd;

	if (argc == 4 && !strcmp(argv[1], "--work"))
		return work(strtoull(argv[2], NULL, 10), argv[3]);
	len = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (len < 0)
		return perror("readlink"), 1;
	self[len] = 0;
	if (env)
		snprintf(tool, sizeof(tool), "%s", env);
	else {
		char d[4096];

		snprintf(d, sizeof(d), "%s", self);
		snprintf(tool, sizeof(tool), "%s/../ringpipe", dirname(d));
	}
	fd = mkstemp(res);
	if (fd < 0)
		return perror("mkstemp"), 1;
	close(fd);
	snprintf(cmd, sizeof(cmd), "'%s' sample -a --duration 10ms -o /dev/null >/dev/null 2>&1", tool);
	if (system(cmd) != 0) {
		printf("\n## CPU sampling overhead\n\nskipped: `%s sample` cannot run here "
		       "(needs CAP_BPF and CAP_PERFMON, or root)\n", tool);
		unlink(res);
		return 0;
	}
	for (r = 0; r < reps; r++) {
		for (c = 0; c < NCASES; c++) {
			FILE *f;
			char line[256];

			if (hz[c])
				snprintf(cmd, sizeof(cmd), "'%s' sample -F %d -o %s.nettrace -- '%s' --work %"
					 PRIu64 " %s", tool, hz[c], res, self, n, res);
			else
				snprintf(cmd, sizeof(cmd), "'%s' --work %" PRIu64 " %s", self, n, res);
			f = popen(cmd, "r");
			if (!f)
				return perror("popen"), 1;
			while (fgets(line, sizeof(line), f)) {
				const char *p = strstr(line, "\"samples\":");

				if (p)
					samples[c] = strtoull(p + 10, NULL, 10);
			}
			if (pclose(f) != 0)
				return fprintf(stderr, "failed: %s\n", cmd), 1;
			f = fopen(res, "r");
			if (!f || fscanf(f, "%" SCNu64, &t[c][r]) != 1)
				return fprintf(stderr, "no result from: %s\n", cmd), 1;
			fclose(f);
		}
	}
	printf("\n## CPU sampling overhead (bench_sample)\n\n");
	printf("Fixed work in one thread, median of %d runs; sampled by `ringpipe sample -F HZ -- CMD`\n"
	       "(cpu-clock, kernel + user stacks through a BPF ring buffer).\n\n", reps);
	printf("| case | loop time (ms) | overhead | samples (last run) |\n|---|---:|---:|---:|\n");
	for (c = 0; c < NCASES; c++)
		qsort(t[c], reps, sizeof(uint64_t), cmp_u64);
	for (c = 0; c < NCASES; c++) {
		double med = (double)t[c][reps / 2] / 1e6, base = (double)t[0][reps / 2] / 1e6;

		if (hz[c])
			printf("| sampled at %d Hz | %.1f | %+.2f %% | %" PRIu64 " |\n", hz[c], med,
			       100.0 * (med - base) / base, samples[c]);
		else
			printf("| untraced | %.1f | | |\n", med);
	}
	snprintf(cmd, sizeof(cmd), "%s.nettrace", res);
	unlink(cmd);
	unlink(res);
	return 0;
}
