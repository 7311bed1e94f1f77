/* SPDX-License-Identifier: MIT */
/*
 * Threads the library starts (drainers, the diagnostics server's threads).
 */
#ifndef RINGPIPE_THREAD_H
#define RINGPIPE_THREAD_H

#include <pthread.h>

/*
 * pthread_create() for a library thread: it takes no signals (they belong
 * to the application, whose handlers must not run on our threads or
 * interrupt their system calls), and it carries name (at most 15
 * characters) so that top, perf and gdb show what it is. 0 or -errno.
 */
int rp_thread_start(pthread_t *th, const char *name, void *(*fn)(void *), void *arg);

#endif /* RINGPIPE_THREAD_H */
