// SPDX-License-Identifier: MIT
/*
 * The traced process of tests/test_usdt.c (built twice: against
 * libringpipe.so and against libringpipe.a).
 *
 *   usdt_writer SEM_VADDR OBJECT N M TRACE
 *
 * Waits until the ringpipe:event semaphore is raised (a tracer attached),
 * then writes exactly N events that a session enables (N/2 through
 * rp_event_write(), the rest through rp_event_writev() in two segments) and
 * M events that no session enables, and exits 0. The payload of the k-th
 * enabled event (k = 1..N) starts with the u64 k, so a tracer that sums the
 * first 8 bytes at arg3 gets N(N+1)/2, and arg4 sums to N * 32.
 *
 * Synchronization, in two steps. (1) The semaphore, found the way a tracer
 * finds it: SEM_VADDR is the address the probe's ELF note records (the test
 * reads it with readelf -n) in OBJECT ("libringpipe.so" or "" for this
 * executable), plus the load bias of that object in this process; it rising
 * proves the note points at the variable the write path tests. It is not
 * yet proof that the tracer's program runs: the kernel raises the counter
 * when the uprobe is registered, before the BPF program is attached to it.
 * (2) So the writer then writes "Sync" events (id 9, through both write
 * functions) every millisecond until the tracer's program, on seeing them,
 * sends it SIGUSR1; only then come the counted events.
 */
#include <errno.h>
#include <link.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ringpipe/ringpipe.h"

#define PROVIDER "Rp-Usdt-Test"

struct find {
	const char *object;
	uintptr_t bias;
	int found;
};

static volatile sig_atomic_t traced;

static void on_sigusr1(int sig)
{
	(void)sig;
	traced = 1;
}

static int find_object(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct find *f = arg;
	const char *name = info->dlpi_name ? info->dlpi_name : "";

	(void)size;
	/* the executable comes first, with an empty name */
	if ((!f->object[0] && !name[0]) || (f->object[0] && strstr(name, f->object))) {
		f->bias = (uintptr_t)info->dlpi_addr;
		f->found = 1;
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct rp_provider_opts po = { .sz = sizeof(po), .name = PROVIDER };
	struct rp_event_opts on = { .sz = sizeof(on), .id = 7, .name = "Counted", .level = 4 };
	struct rp_event_opts sync = { .sz = sizeof(sync), .id = 9, .name = "Sync", .level = 4 };
	struct rp_event_opts off = { .sz = sizeof(off), .id = 8, .name = "NotEnabled",
				     .keywords = 0x100, .level = 4 };
	/* the session enables keyword 0x1 only: event 8 stays disabled */
	struct rp_provider_config pc = { .name = PROVIDER, .keywords = 0x1 };
	struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
				      .format = 5, .buffer_bytes = 64u << 20, .fd = -1 };
	struct find f = { 0 };
	volatile unsigned short *sem;
	struct rp_provider *p;
	struct rp_event *ev_on, *ev_off, *ev_sync;
	struct sigaction sa = { .sa_handler = on_sigusr1 };
	struct rp_session *s;
	unsigned long n, m, i;
	struct timespec ms = { 0, 1000000 };
	int waited = 0, rc;

	if (argc != 6) {
		fprintf(stderr, "usage: usdt_writer SEM_VADDR OBJECT N M TRACE\n");
		return 2;
	}
	f.object = argv[2];
	n = strtoul(argv[3], NULL, 0);
	m = strtoul(argv[4], NULL, 0);
	so.path = argv[5];
	dl_iterate_phdr(find_object, &f);
	if (!f.found) {
		fprintf(stderr, "usdt_writer: '%s' is not mapped\n", f.object);
		return 2;
	}
	sem = (volatile unsigned short *)(f.bias + strtoull(argv[1], NULL, 0));

	p = rp_provider_new(&po);
	ev_on = p ? rp_event_new(p, &on) : NULL;
	ev_off = p ? rp_event_new(p, &off) : NULL;
	ev_sync = p ? rp_event_new(p, &sync) : NULL;
	s = ev_on && ev_off && ev_sync ? rp_session_start(&so) : NULL;
	if (!s) {
		fprintf(stderr, "usdt_writer: setup: %s (%s)\n", strerror(errno), rp_last_error());
		return 2;
	}
	if (sigaction(SIGUSR1, &sa, NULL))
		return 2;
	if (!rp_event_enabled(ev_on) || !rp_event_enabled(ev_sync) || rp_event_enabled(ev_off)) {
		fprintf(stderr, "usdt_writer: the session enables the wrong events\n");
		return 2;
	}
	/* the tracer attaches with -p: wait until it armed the probe */
	while (!*sem) {
		if (++waited > 60000) {
			fprintf(stderr, "usdt_writer: the probe was not armed within 60 s\n");
			return 3;
		}
		nanosleep(&ms, NULL);
	}
	printf("semaphore raised after %d ms\n", waited);
	/* the tracer sends SIGUSR1 once its program saw a Sync event from
	 * each write function */
	for (i = 0; !traced; i++) {
		uint64_t one = i;
		struct iovec iov[2] = { { &one, 8 }, { &one, 8 } };

		if (++waited > 120000) {
			fprintf(stderr, "usdt_writer: no signal from the tracer within 60 s\n");
			return 3;
		}
		rp_event_write(ev_sync, &one, 8);
		rp_event_writev(ev_sync, iov, 2, NULL);
		nanosleep(&ms, NULL);
	}
	printf("traced after %lu sync writes\n", i);
	fflush(stdout);
	rc = 0;
	for (i = 1; i <= n; i++) {
		uint64_t payload[4] = { i, 0xfeedull, 0, 0 };
		int r;

		if (i % 2) {
			r = rp_event_write(ev_on, payload, sizeof(payload));
		} else {
			struct iovec iov[2] = { { payload, 8 }, { &payload[1], 24 } };

			r = rp_event_writev(ev_on, iov, 2, NULL);
		}
		if (r)
			rc = 1;
		/* a disabled event in between: the probe must not count it */
		if (i <= m)
			rp_event_write(ev_off, payload, sizeof(payload));
	}
	for (i = n + 1; i <= m; i++) {
		uint64_t payload[4] = { i, 0, 0, 0 };

		rp_event_write(ev_off, payload, sizeof(payload));
	}
	if (rp_session_stop(s))
		rc = 1;
	if (rc)
		fprintf(stderr, "usdt_writer: a write or the stop failed\n");
	return rc;
}
