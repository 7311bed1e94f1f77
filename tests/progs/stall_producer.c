// SPDX-License-Identifier: MIT
/*
 * The write storm that test_stall and bench_stall disturb: a process of its
 * own (so that it can be stopped, frozen or throttled whole while the test
 * watches), linked against the shared library as an application is.
 *
 *   stall_producer [--threads T] [--buffer-mb M] [--output PATH | --output -]
 *                  [--agent] [--ready N] [--max N]
 *
 * Without --agent it starts a Block session of M MiB (default 1) on provider
 * StallTest, writing its trace to PATH, or to its stdout with "-" (a pipe to
 * a reader). With --agent it waits until the agent named by RINGPIPE_AGENT
 * enables StallTest (its session: the agent's mode and buffer). T writer
 * threads (default 3) write event Tick (Thread u32, Seq u64): Seq counts each
 * thread's attempts from 0, so that a reader tells every event's place and a
 * gap from an end. Every write that does not return 0 is counted, by errno.
 *
 * The writers write until told to finish (below), or until each has made N
 * writes that returned 0 (--max, default 50,000,000: a bound on the trace's
 * size, beyond what any run here writes). So the storm is still on when a
 * test's disturbance begins and when it ends, however long the test takes
 * to send a signal. Writes that fail do not count towards the bound: they
 * cost no space, and a session that turned into Drop fails them by the
 * hundred million in a 10 s stall.
 *
 * Lines on fd 3 (the report), one write each:
 *   writing                  N attempts in all were made (--ready, default
 *                            200,000: a 1 MiB session's rings filled many
 *                            times, writers have parked)
 *   parked                   answer to "parked?" (below)
 *   resumed at=W             answer to "resumed": W writes had returned 0
 *   caught-up at=W ns=D      then (own session only): the drainer had written
 *                            W events D ns after "resumed" came
 *   thread I tid=TID ok=A failed=F
 *   done ok=A failed=F enobufs=E other=O other_rc=R waits=K wait_ns=S
 *        wait_max_ns=X written=W stop=RC dropped=D0,D1,...
 *                            at the end, one "thread" line per writer first;
 *                            written, stop and dropped (by reason, from
 *                            rp_session_stats() before stopping) are -1 and
 *                            empty with --agent, whose figures are the
 *                            agent's. A wait is a write that took over
 *                            WAIT_NS: a park (or a preemption inside a
 *                            write); wait_ns adds them up over all writers.
 * Commands on fd 4 (optional), one a line:
 *   finish K                 every writer makes K more attempts and ends
 *   resumed                  the disturbance just ended (for the catch-up time)
 *   parked?                  answers "parked" once every writer has been inside
 *                            one write, with no attempt finished, for 200 ms
 *                            (their drainer stopped: they wait for it)
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "ringpipe/ringpipe.h"

#define REPORT_FD 3
#define CONTROL_FD 4
#define MAX_THREADS 64
#define WAIT_NS 20000ull	/* a write slower than this waited for something */
#define PARKED_LOOKS 20		/* "parked?": looks 10 ms apart without progress */

struct writer {
	pthread_t th;
	uint32_t index;
	int tid;
	/* read by the control thread while the writer runs: atomics */
	uint64_t ok, failed, in_write;
	uint64_t enobufs, other;
	int other_rc;
	uint64_t waits, wait_ns, wait_max_ns;
} __attribute__((aligned(64)));

static struct rp_event *ev;
/* the own session; the control thread reads its figures under the lock,
 * which main() holds while it stops it */
static struct rp_session *session;
static pthread_mutex_t session_lock = PTHREAD_MUTEX_INITIALIZER;
static struct writer writers[MAX_THREADS];
static int nwriters = 3;
static uint64_t max_ok = 50000000;
static int writers_done;		/* atomic */
static uint64_t finish_extra;	/* atomic: set with finish */
static int finish;		/* atomic */
static pthread_mutex_t report_lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void report(const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n < 0 || n >= (int)sizeof(line))
		n = (int)sizeof(line) - 1;
	/* one write per line, so that a reader never sees half of one */
	pthread_mutex_lock(&report_lock);
	if (write(REPORT_FD, line, (size_t)n) != n)
		perror("stall_producer: report");
	pthread_mutex_unlock(&report_lock);
}

static uint64_t load(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

static void bump(uint64_t *p, uint64_t by)
{
	/* one writer per counter: a plain add, stored whole for the readers */
	__atomic_store_n(p, *p + by, __ATOMIC_RELAXED);
}

static void *writer_main(void *arg)
{
	struct writer *w = arg;
	struct {
		uint32_t thread;
		uint64_t seq;
	} __attribute__((packed)) p = { w->index, 0 };
	uint64_t limit = UINT64_MAX;
	bool finishing = false;

	w->tid = (int)syscall(SYS_gettid);
	for (p.seq = 0; p.seq < limit && w->ok < max_ok; p.seq++) {
		uint64_t t0, d;
		int rc;

		if (!finishing && __atomic_load_n(&finish, __ATOMIC_ACQUIRE)) {
			/* pairs with the store_release of finish in control_main() */
			finishing = true;
			limit = p.seq + finish_extra;
		}
		__atomic_store_n(&w->in_write, 1, __ATOMIC_RELAXED);
		t0 = now_ns();
		rc = rp_event_write(ev, &p, sizeof(p));
		d = now_ns() - t0;
		__atomic_store_n(&w->in_write, 0, __ATOMIC_RELAXED);
		if (d > WAIT_NS) {
			bump(&w->waits, 1);
			bump(&w->wait_ns, d);
			if (d > w->wait_max_ns)
				__atomic_store_n(&w->wait_max_ns, d, __ATOMIC_RELAXED);
		}
		if (!rc) {
			bump(&w->ok, 1);
			continue;
		}
		bump(&w->failed, 1);
		if (rc == -ENOBUFS) {
			bump(&w->enobufs, 1);
		} else {
			bump(&w->other, 1);
			w->other_rc = rc;
		}
	}
	__atomic_fetch_add(&writers_done, 1, __ATOMIC_RELAXED);
	return NULL;
}

static uint64_t total(size_t field_off)
{
	uint64_t n = 0;
	int i;

	for (i = 0; i < nwriters; i++)
		n += load((const uint64_t *)((const char *)&writers[i] + field_off));
	return n;
}

#define TOTAL(field) total(offsetof(struct writer, field))

static void msleep(unsigned int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

/* Every writer inside a write, and no attempt finished, for PARKED_LOOKS
 * looks in a row. */
static void wait_parked(void)
{
	uint64_t last = TOTAL(ok) + TOTAL(failed);
	int still = 0;

	while (still < PARKED_LOOKS) {
		uint64_t now;
		bool all_in = true;
		int i;

		msleep(10);
		now = TOTAL(ok) + TOTAL(failed);
		for (i = 0; i < nwriters; i++)
			all_in &= load(&writers[i].in_write) != 0;
		still = now == last && all_in ? still + 1 : 0;
		last = now;
	}
	report("parked\n");
}

/* "resumed": how long the drainer takes to have written what the writers
 * had written by now (its backlog at the end of the disturbance). */
static void caught_up(void)
{
	uint64_t t0 = now_ns(), at = TOTAL(ok);

	report("resumed at=%llu\n", (unsigned long long)at);
	for (;;) {
		struct rp_session_stats st = { .sz = sizeof(st) };
		int err = -ENOENT;

		pthread_mutex_lock(&session_lock);
		if (session)
			err = rp_session_stats(session, &st);
		pthread_mutex_unlock(&session_lock);
		if (err)
			return;		/* the agent's session, or stopped */
		if (st.events_written >= at)
			break;
		msleep(1);
	}
	report("caught-up at=%llu ns=%llu\n", (unsigned long long)at,
	       (unsigned long long)(now_ns() - t0));
}

static void *control_main(void *arg)
{
	FILE *f = fdopen(CONTROL_FD, "r");
	char line[256];

	(void)arg;
	if (!f)
		return NULL;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long k;

		if (sscanf(line, "finish %llu", &k) == 1) {
			finish_extra = k;
			/* pairs with the load_acquire of finish in writer_main() */
			__atomic_store_n(&finish, 1, __ATOMIC_RELEASE);
		} else if (!strcmp(line, "resumed\n")) {
			caught_up();
		} else if (!strcmp(line, "parked?\n")) {
			wait_parked();
		} else {
			fprintf(stderr, "stall_producer: unknown command %s", line);
		}
	}
	return NULL;
}

static int start_session(const char *output, uint64_t buffer_mb)
{
	struct rp_provider_config pc = { .name = "StallTest" };
	struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
				      .buffering = RP_BUFFERING_BLOCK,
				      .buffer_bytes = buffer_mb << 20 };

	if (!strcmp(output, "-")) {
		so.fd = 1;
	} else {
		so.path = output;
	}
	session = rp_session_start(&so);
	if (!session) {
		fprintf(stderr, "stall_producer: %s\n", rp_last_error());
		return -1;
	}
	return 0;
}

/* The agent's session enables the event once the process joined it. */
static int wait_enabled(void)
{
	int i;

	for (i = 0; !rp_event_enabled(ev); i++) {
		if (i == 6000) {
			fprintf(stderr, "stall_producer: the agent did not enable StallTest in "
				"60 s\n");
			return -1;
		}
		msleep(10);
	}
	return 0;
}

static void usage(void)
{
	fprintf(stderr, "usage: stall_producer [--threads T] [--buffer-mb M] "
			"[--output PATH|-] [--agent] [--ready N] [--max N]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct rp_field fields[] = {
		{ "Thread", RP_TYPE_U32, 0, 0, NULL },
		{ "Seq", RP_TYPE_U64, 0, 0, NULL },
	};
	struct rp_provider_opts po = { .sz = sizeof(po), .name = "StallTest" };
	struct rp_event_opts eo = { .sz = sizeof(eo), .id = 1, .name = "Tick", .level = 4,
				    .nfields = 2, .fields = fields };
	struct rp_session_stats st = { .sz = sizeof(st) };
	const char *output = NULL;
	uint64_t buffer_mb = 1, ready = 200000;
	bool agent = false, own = false;
	char dropped[256] = "";
	pthread_t control;
	int i, stop_rc = -1;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "--agent")) {
			agent = true;
			continue;
		}
		if (!v)
			usage();
		i++;
		if (!strcmp(a, "--threads"))
			nwriters = atoi(v);
		else if (!strcmp(a, "--buffer-mb"))
			buffer_mb = strtoull(v, NULL, 10);
		else if (!strcmp(a, "--output"))
			output = v;
		else if (!strcmp(a, "--ready"))
			ready = strtoull(v, NULL, 10);
		else if (!strcmp(a, "--max"))
			max_ok = strtoull(v, NULL, 10);
		else
			usage();
	}
	if (nwriters < 1 || nwriters > MAX_THREADS || !buffer_mb || agent == !!output)
		usage();
	ev = rp_event_new(rp_provider_new(&po), &eo);
	if (!ev) {
		fprintf(stderr, "stall_producer: %s\n", rp_last_error());
		return 1;
	}
	if (agent ? wait_enabled() : start_session(output, buffer_mb))
		return 1;
	if (pthread_create(&control, NULL, control_main, NULL) == 0)
		pthread_detach(control);
	for (i = 0; i < nwriters; i++) {
		writers[i].index = (uint32_t)i;
		if (pthread_create(&writers[i].th, NULL, writer_main, &writers[i])) {
			perror("stall_producer: pthread_create");
			return 1;
		}
	}
	while (TOTAL(ok) + TOTAL(failed) < ready &&
	       __atomic_load_n(&writers_done, __ATOMIC_RELAXED) < nwriters)
		msleep(1);
	report("writing\n");
	for (i = 0; i < nwriters; i++)
		pthread_join(writers[i].th, NULL);
	pthread_mutex_lock(&session_lock);
	if (session) {
		int r, n = 0;

		rp_session_stats(session, &st);
		for (r = 0; r < RP_DROP_REASON_NR; r++)
			n += snprintf(dropped + n, sizeof(dropped) - (size_t)n, "%s%llu",
				      r ? "," : "", (unsigned long long)st.dropped[r]);
		stop_rc = rp_session_stop(session);
		session = NULL;
		own = true;
	}
	pthread_mutex_unlock(&session_lock);
	for (i = 0; i < nwriters; i++)
		report("thread %d tid=%d ok=%llu failed=%llu\n", i, writers[i].tid,
		       (unsigned long long)writers[i].ok, (unsigned long long)writers[i].failed);
	{
		uint64_t wmax = 0;
		int other_rc = 0;

		for (i = 0; i < nwriters; i++) {
			if (writers[i].wait_max_ns > wmax)
				wmax = writers[i].wait_max_ns;
			if (writers[i].other_rc)
				other_rc = writers[i].other_rc;
		}
		report("done ok=%llu failed=%llu enobufs=%llu other=%llu other_rc=%d waits=%llu "
		       "wait_ns=%llu wait_max_ns=%llu written=%lld stop=%d dropped=%s\n",
		       (unsigned long long)TOTAL(ok), (unsigned long long)TOTAL(failed),
		       (unsigned long long)TOTAL(enobufs), (unsigned long long)TOTAL(other),
		       other_rc, (unsigned long long)TOTAL(waits),
		       (unsigned long long)TOTAL(wait_ns), (unsigned long long)wmax,
		       own ? (long long)st.events_written : -1LL, stop_rc,
		       dropped);
	}
	return 0;
}
