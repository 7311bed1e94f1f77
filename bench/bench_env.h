/* SPDX-License-Identifier: MIT */
/*
 * What the session benchmarks set up the same way before they measure: the
 * library's clock, a private directory for their traces under $TMPDIR, and
 * the two CPUs their writers are pinned to.
 */
#ifndef RINGPIPE_BENCH_ENV_H
#define RINGPIPE_BENCH_ENV_H

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"

/*
 * Initializes the clock, creates "<TMPDIR or /tmp>/<name>.XXXXXX" in tmpdir,
 * and fills cpus[0..1] with the first two CPUs this process may run on (the
 * same one twice on a single-CPU machine). Returns 0, or 1 after printing why.
 */
static inline int bench_env_init(const char *name, char *tmpdir, size_t len,
				 cpu_set_t *allowed, int cpus[2], int *nr_cpus)
{
	const char *td = getenv("TMPDIR");
	int err = rp_clock_init();

	if (err) {
		fprintf(stderr, "%s: rp_clock_init: %s\n", name, strerror(-err));
		return 1;
	}
	snprintf(tmpdir, len, "%s/%s.XXXXXX", td && *td ? td : "/tmp", name);
	if (!mkdtemp(tmpdir)) {
		fprintf(stderr, "%s: mkdtemp %s: %s\n", name, tmpdir, strerror(errno));
		return 1;
	}
	sched_getaffinity(0, sizeof(*allowed), allowed);
	*nr_cpus = 0;
	for (int c = 0; c < CPU_SETSIZE && *nr_cpus < 2; c++)
		if (CPU_ISSET(c, allowed))
			cpus[(*nr_cpus)++] = c;
	if (*nr_cpus < 2)
		cpus[1] = cpus[0];
	return 0;
}

#endif
