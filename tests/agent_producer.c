// SPDX-License-Identifier: MIT
/*
 * A libringpipe program for test_agent: it defines one provider, waits until
 * a session (the agent's) enables its event, then writes from T threads and
 * says what it wrote. Linked against the shared library, as a program on a
 * host would be.
 *
 *   agent_producer PROVIDER THREADS EVENTS [forever PROGRESS_FILE | paced PROGRESS_FILE [PAUSE_US]
 *                  | idle]
 *
 * Each event's payload is (thread index u32, counter u64): counters run
 * 0, 1, 2, ... per thread, so a reader can tell a gap from an end. Prints
 * {"pid":P,"written":W,"dropped":D} on stdout at the end. "forever" writes
 * until killed, about one event per 20 us per thread, and stores the number
 * written so far in PROGRESS_FILE every 50 ms (renamed into place: a reader
 * sees a whole file or none). "idle" joins, then sleeps
 * until killed (the agent's idle cost). ns_per_event in the JSON line is
 * the writing phase's wall time divided by the events each thread wrote.
 * "paced" writes EVENTS per thread at the pace of "forever", with the same
 * progress file, and ends as without it: a producer that is still writing
 * when its consumer falls behind. PAUSE_US (default 20) is the sleep after
 * each event of "paced": a slower producer for a test that lasts longer.
 * Without RINGPIPE_AGENT it waits for any session, such as the startup
 * session of RINGPIPE_OUTPUT (the in-process drainer, for comparison).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ringpipe/ringpipe.h"

static struct rp_event *ev;
static uint64_t events, written, dropped;
static int forever, paced, idle;
static long pause_ns = 20000;

static void *writer(void *arg)
{
	uint32_t idx = (uint32_t)(uintptr_t)arg;
	uint64_t i;

	for (i = 0; forever || i < events; i++) {
		struct {
			uint32_t thread;
			uint64_t n;
		} __attribute__((packed)) p = { idx, i };
		int rc = rp_event_write(ev, &p, sizeof(p));

		__atomic_fetch_add(rc ? &dropped : &written, 1, __ATOMIC_RELAXED);
		if (forever || paced) {
			struct timespec ts = { 0, pause_ns };

			nanosleep(&ts, NULL);
		}
	}
	return NULL;
}

/*
 * The counts so far into file, whole or not at all: written under a name of
 * its own, then renamed over it, so that a reader finds either the last
 * version or the one before, never a file being truncated or half written.
 */
static void publish_progress(const char *file)
{
	char tmp[4096];
	FILE *f;

	if (snprintf(tmp, sizeof(tmp), "%s.%d.tmp", file, (int)getpid()) >= (int)sizeof(tmp))
		return;
	f = fopen(tmp, "w");
	if (!f)
		return;
	fprintf(f, "%llu %llu\n", (unsigned long long)__atomic_load_n(&written, __ATOMIC_RELAXED),
		(unsigned long long)__atomic_load_n(&dropped, __ATOMIC_RELAXED));
	if (fclose(f) || rename(tmp, file))
		unlink(tmp);
}

int main(int argc, char **argv)
{
	static const struct rp_field fields[] = {
		{ "Thread", RP_TYPE_U32, 0, 0, NULL },
		{ "N", RP_TYPE_U64, 0, 0, NULL },
	};
	struct rp_provider_opts po = { .sz = sizeof(po) };
	struct rp_event_opts eo = { .sz = sizeof(eo), .id = 1, .name = "Tick", .level = 4,
				    .nfields = 2, .fields = fields };
	struct rp_provider *p;
	pthread_t th[256];
	struct timespec t0, t1;
	int t, nthreads, i;

	if (argc < 4) {
		fprintf(stderr, "usage: agent_producer PROVIDER THREADS EVENTS [forever PROGRESS_FILE]\n");
		return 2;
	}
	po.name = argv[1];
	nthreads = atoi(argv[2]);
	events = strtoull(argv[3], NULL, 10);
	forever = argc > 5 && !strcmp(argv[4], "forever");
	paced = argc > 5 && !strcmp(argv[4], "paced");
	idle = argc > 4 && !strcmp(argv[4], "idle");
	if (paced && argc > 6)
		pause_ns = atol(argv[6]) * 1000;
	if (pause_ns < 0 || pause_ns > 999999999)
		return 2;
	if (nthreads < 1 || nthreads > 256)
		return 2;
	p = rp_provider_new(&po);
	ev = p ? rp_event_new(p, &eo) : NULL;
	if (!ev) {
		fprintf(stderr, "agent_producer: %s\n", rp_last_error());
		return 1;
	}
	/* the agent's session enables the event once the process joined; the
	 * bound only ends a run whose agent never comes (a loaded host may
	 * take seconds to get the join through) */
	for (i = 0; !rp_event_enabled(ev); i++) {
		struct timespec ts = { 0, 10000000 };

		if (i == 12000) {
			fprintf(stderr, "agent_producer: never enabled in 120 s\n");
			return 3;
		}
		nanosleep(&ts, NULL);
	}
	if (idle) {
		printf("{\"pid\":%d,\"joined\":1}\n", getpid());
		fflush(stdout);
		for (;;)
			pause();
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (t = 0; t < nthreads; t++)
		pthread_create(&th[t], NULL, writer, (void *)(uintptr_t)t);
	while (forever || (paced && __atomic_load_n(&written, __ATOMIC_RELAXED) +
			   __atomic_load_n(&dropped, __ATOMIC_RELAXED) < events * (uint64_t)nthreads)) {
		struct timespec ts = { 0, 50000000 };

		publish_progress(argv[5]);
		nanosleep(&ts, NULL);
	}
	for (t = 0; t < nthreads; t++)
		pthread_join(th[t], NULL);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("{\"pid\":%d,\"written\":%llu,\"dropped\":%llu,\"ns_per_event\":%.1f}\n", getpid(),
	       (unsigned long long)written, (unsigned long long)dropped,
	       ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) /
	       (double)(events ? events : 1));
	fflush(stdout);
	return 0;
}
