/* SPDX-License-Identifier: MIT */
/*
 * Threads the library starts (drainers, the diagnostics server's threads).
 */
#ifndef RINGPIPE_THREAD_H
#define RINGPIPE_THREAD_H

#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stddef.h>

/*
 * pthread_create() for a library thread: it takes no signals (they belong
 * to the application, whose handlers must not run on our threads or
 * interrupt their system calls), it runs on the process's CPUs rather than
 * its creator's (the CPUs at load, or RINGPIPE_THREAD_CPUS; thread.c), and
 * it carries name (at most 15 characters) so that top, perf and gdb show
 * what it is. 0 or -errno; -EINVAL with rp_last_error() set when
 * RINGPIPE_THREAD_CPUS is malformed or names no CPU the process may use.
 */
int rp_thread_start(pthread_t *th, const char *name, void *(*fn)(void *), void *arg);

/*
 * Moves the calling thread off the CPUs in avoid, to another CPU its
 * affinity allows: its affinity without them, then its affinity as it was,
 * which leaves the thread where it went (the kernel moves a thread off a
 * CPU its affinity drops before the call returns). False, and the thread
 * stays, when it may run on no CPU outside avoid.
 */
bool rp_thread_move_off(const cpu_set_t *avoid);

/* A CPU list ("0-3,8"): 0 and *set, or -EINVAL and why. */
int rp_cpulist_parse(const char *s, cpu_set_t *set, char *why, size_t len);

#endif /* RINGPIPE_THREAD_H */
