// SPDX-License-Identifier: MIT
/*
 * Threads the library starts (see thread.h).
 *
 * Where they run. A new thread inherits the CPU affinity of the thread that
 * creates it, and the thread that starts a session (or the diagnostics
 * server) is often one an application pinned to a CPU of its own: its
 * drainer would then take that very CPU from it. So the library's threads
 * run on the CPUs the process had when the library was loaded (before
 * main() pins anything), or on the ones RINGPIPE_THREAD_CPUS names (hosts
 * that keep housekeeping CPUs apart from the application's).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "thread.h"

static cpu_set_t launch_cpus;
static bool launch_known;
static pthread_once_t launch_once = PTHREAD_ONCE_INIT;

static void launch_capture(void)
{
	launch_known = !sched_getaffinity(0, sizeof(launch_cpus), &launch_cpus);
}

/* at load, before main() runs (a constructor that starts a thread first
 * gets the same mask: that is before main() too) */
__attribute__((constructor)) static void thread_ctor(void)
{
	pthread_once(&launch_once, launch_capture);
}

int rp_cpulist_parse(const char *s, cpu_set_t *set, char *why, size_t len)
{
	const char *p = s;

	CPU_ZERO(set);
	if (!*p) {
		snprintf(why, len, "empty: expected CPU numbers such as 0-3,8");
		return -EINVAL;
	}
	for (;;) {
		unsigned long lo, hi;
		char *end;

		if (*p < '0' || *p > '9') {
			snprintf(why, len, "'%s' at offset %zu: expected a CPU number", s,
				 (size_t)(p - s));
			return -EINVAL;
		}
		errno = 0;
		lo = strtoul(p, &end, 10);
		hi = lo;
		p = end;
		if (*p == '-') {
			p++;
			if (*p < '0' || *p > '9') {
				snprintf(why, len, "'%s' at offset %zu: a range needs its last CPU", s,
					 (size_t)(p - s));
				return -EINVAL;
			}
			hi = strtoul(p, &end, 10);
			p = end;
		}
		if (errno || lo > hi || hi >= CPU_SETSIZE) {
			snprintf(why, len, "'%s': CPUs run from 0 to %d, each range upward", s,
				 CPU_SETSIZE - 1);
			return -EINVAL;
		}
		for (unsigned long c = lo; c <= hi; c++)
			CPU_SET(c, set);
		if (!*p)
			return 0;
		if (*p != ',') {
			snprintf(why, len, "'%s' at offset %zu: expected ',' or '-'", s,
				 (size_t)(p - s));
			return -EINVAL;
		}
		p++;
	}
}

/* The CPUs for a new library thread: 1 and *set, 0 to inherit the
 * creator's (nothing known), or -EINVAL for a malformed variable. */
static int thread_cpus(cpu_set_t *set, const char **named)
{
	const char *env = getenv("RINGPIPE_THREAD_CPUS");
	char why[160];

	*named = NULL;
	if (env && *env) {
		if (rp_cpulist_parse(env, set, why, sizeof(why))) {
			rp_set_error("RINGPIPE_THREAD_CPUS=%s is not valid: %s", env, why);
			return -EINVAL;
		}
		*named = env;
		return 1;
	}
	pthread_once(&launch_once, launch_capture);
	if (!launch_known)
		return 0;
	*set = launch_cpus;
	return 1;
}

int rp_thread_start(pthread_t *th, const char *name, void *(*fn)(void *), void *arg)
{
	sigset_t all, old;
	pthread_attr_t attr;
	const char *named;
	cpu_set_t cpus;
	int e, have;

	have = thread_cpus(&cpus, &named);
	if (have < 0)
		return have;
	if (pthread_attr_init(&attr))
		return -ENOMEM;
	if (have)
		pthread_attr_setaffinity_np(&attr, sizeof(cpus), &cpus);
	/* the new thread inherits the mask in force at its creation */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	e = pthread_create(th, &attr, fn, arg);
	if (e == EINVAL && have && !named) {
		/* the CPUs at load are gone (a cpuset changed since): the
		 * creator's, as any thread would have */
		pthread_attr_destroy(&attr);
		pthread_attr_init(&attr);
		e = pthread_create(th, &attr, fn, arg);
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
	if (e == EINVAL && named)
		rp_set_error("RINGPIPE_THREAD_CPUS=%s: none of these CPUs is one this process may "
			     "run on", named);
	if (!e && name)
		pthread_setname_np(*th, name);	/* a name is a convenience only */
	return -e;
}

bool rp_thread_move_off(const cpu_set_t *avoid)
{
	cpu_set_t mask, elsewhere;

	if (sched_getaffinity(0, sizeof(mask), &mask))
		return false;
	CPU_XOR(&elsewhere, &mask, avoid);
	CPU_AND(&elsewhere, &elsewhere, &mask);	/* mask less avoid */
	if (!CPU_COUNT(&elsewhere) || sched_setaffinity(0, sizeof(elsewhere), &elsewhere))
		return false;
	/* the mask as it was; should that fail the thread keeps the narrower
	 * one, which is still a subset of what it was given */
	sched_setaffinity(0, sizeof(mask), &mask);
	return true;
}
