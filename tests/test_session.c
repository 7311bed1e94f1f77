// SPDX-License-Identifier: MIT
/*
 * Sessions end to end: producers write through the public API into per-CPU
 * rings, the drainer writes nettrace, and the result is judged by ringpipe's
 * reader and by TraceEvent (tests/interop/TraceDump).
 */
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>

#include "helpers.h"
#include "hmap.h"
#include "nettrace.h"
#include "ringpipe/ringpipe.h"
#include "session.h"

static const struct rp_field small_fields[] = {
	{ "Counter", RP_TYPE_U64, 0, 0, NULL },
	{ "Thread", RP_TYPE_U32, 0, 0, NULL },
	{ "Extra", RP_TYPE_U32, 0, 0, NULL },
	{ "Name", RP_TYPE_STRING, 0, 0, NULL },
};

struct small {
	uint64_t counter;
	uint32_t thread;
	uint32_t extra;
	uint16_t name[8];	/* "ringpip" + NUL */
} __attribute__((packed));

_Static_assert(sizeof(struct small) == 32, "the benchmark event is 32 bytes");

static struct rp_provider *test_provider(const char *name)
{
	struct rp_provider_opts po = { .sz = sizeof(po), .name = name };
	struct rp_provider *p = rp_provider_new(&po);

	cr_assert_not_null(p, "rp_provider_new: %s", rp_last_error());
	return p;
}

static struct rp_event *small_event(struct rp_provider *p, uint32_t id, uint64_t kw, uint8_t level)
{
	struct rp_event_opts eo = { .sz = sizeof(eo), .id = id, .name = "Small", .level = level,
				    .keywords = kw, .nfields = 4, .fields = small_fields };
	struct rp_event *ev = rp_event_new(p, &eo);

	cr_assert_not_null(ev, "rp_event_new: %s", rp_last_error());
	return ev;
}

static void fill_small(struct small *s, uint64_t counter, uint32_t thread)
{
	static const char name[] = "ringpip";
	int i;

	s->counter = counter;
	s->thread = thread;
	s->extra = 0;
	for (i = 0; i < 8; i++)
		s->name[i] = (uint16_t)name[i];
}

struct writer_arg {
	struct rp_event *ev;
	uint32_t index;
	uint64_t n;
	uint64_t captured_ok;	/* writes that returned 0 */
	uint32_t tid;
};

static void *writer_main(void *arg)
{
	struct writer_arg *a = arg;
	struct small s;
	uint64_t i;

	a->tid = (uint32_t)gettid();
	for (i = 1; i <= a->n; i++) {
		fill_small(&s, i, a->index);
		if (rp_event_write(a->ev, &s, sizeof(s)) == 0)
			a->captured_ok++;
	}
	return NULL;
}

static void run_writers(struct rp_event *ev, int nthreads, uint64_t n, struct writer_arg *args)
{
	pthread_t th[64];
	int i;

	for (i = 0; i < nthreads; i++) {
		args[i] = (struct writer_arg){ .ev = ev, .index = (uint32_t)i, .n = n };
		cr_assert_eq(pthread_create(&th[i], NULL, writer_main, &args[i]), 0);
	}
	for (i = 0; i < nthreads; i++)
		pthread_join(th[i], NULL);
}

/* Reads a trace with ringpipe's reader: per-thread counts and order. */
struct trace_summary {
	uint64_t events;
	int64_t lost;
	uint64_t per_thread[64];
	uint64_t order_violations;
	int err;
};

static struct trace_summary read_trace(const char *path)
{
	struct trace_summary t = { 0 };
	struct nt_reader *r = nt_reader_open(path);
	uint64_t last[64] = { 0 };
	struct nt_rec rec;

	cr_assert_not_null(r, "cannot open %s", path);
	while ((t.err = nt_reader_next(r, &rec)) > 0) {
		uint64_t counter;
		uint32_t thread;

		t.events++;
		if (rec.payload_len != 32 || strcmp(rec.meta->raw_name, "Small"))
			continue;
		memcpy(&counter, rec.payload, 8);
		memcpy(&thread, rec.payload + 8, 4);
		if (thread >= 64)
			continue;
		t.per_thread[thread]++;
		if (counter <= last[thread])
			t.order_violations++;
		last[thread] = counter;
	}
	cr_assert_eq(t.err, 0, "%s: %s", path, nt_reader_errmsg(r));
	t.lost = nt_reader_lost(r);
	nt_reader_free(r);
	return t;
}

/* TraceEvent's per-thread view: "#lost", "#order_violations", thread counts. */
static void traceevent_threads(const char *dll, const char *path, struct bytebuf *out)
{
	char *cmd;
	int rc;

	cr_assert(asprintf(&cmd, "dotnet '%s' threads '%s' Counter", dll, path) > 0);
	rc = th_run(cmd, out);
	free(cmd);
	cr_assert_eq(rc, 0, "TraceEvent failed on %s: %s", path, (char *)out->p);
}

static uint64_t te_value(const struct bytebuf *b, const char *key)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "%s\t", key);
	p = strstr((const char *)b->p, pat);
	if (!p && key[0] != '#')
		return 0;	/* a thread none of whose events were captured */
	cr_assert_not_null(p, "TraceEvent output lacks %s: %s", key, (char *)b->p);
	return strtoull(p + strlen(pat), NULL, 10);
}

static void big_buffer_case(int nthreads, const char *prov)
{
	TH_NEED_TRACEDUMP(dll);
	char *dir = th_tmpdir(), *path;
	struct rp_provider *p = test_provider(prov);
	struct rp_event *ev = small_event(p, 1, 0, 4);
	struct rp_provider_config pc = { .name = prov };
	struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
				      .buffer_bytes = (uint64_t)nthreads << 27 };
	struct writer_arg args[64];
	struct trace_summary t;
	struct rp_session *s;
	struct rp_session_stats st = { .sz = sizeof(st) };
	struct bytebuf te = { 0 };
	uint64_t n = 1000000;
	int i;

	cr_assert(asprintf(&path, "%s/big.nettrace", dir) > 0);
	so.path = path;
	s = rp_session_start(&so);
	cr_assert_not_null(s, "rp_session_start: %s", rp_last_error());
	cr_assert(rp_event_enabled(ev));
	run_writers(ev, nthreads, n, args);
	cr_assert_eq(rp_session_stats(s, &st), 0);
	cr_assert_eq(rp_session_stop(s), 0);
	cr_assert_eq(st.dropped[RP_DROP_REASON_FULL], 0, "a large buffer must not drop");
	for (i = 0; i < nthreads; i++)
		cr_assert_eq(args[i].captured_ok, n);

	t = read_trace(path);
	cr_assert_eq(t.events, n * (uint64_t)nthreads);
	cr_assert_eq(t.lost, 0);
	cr_assert_eq(t.order_violations, 0);
	for (i = 0; i < nthreads; i++)
		cr_assert_eq(t.per_thread[i], n, "thread %d: %" PRIu64 " events", i, t.per_thread[i]);

	traceevent_threads(dll, path, &te);
	cr_assert_eq(te_value(&te, "#lost"), 0, "TraceEvent EventsLost");
	cr_assert_eq(te_value(&te, "#order_violations"), 0);
	for (i = 0; i < nthreads; i++) {
		char key[32];

		snprintf(key, sizeof(key), "%d/%u", getpid(), args[i].tid);
		cr_assert_eq(te_value(&te, key), n, "TraceEvent: thread %s", key);
	}
	bb_free(&te);
	free(path);
	th_rmdir(dir);
}

Test(session, drop_2_threads_1m_events_all_captured, .timeout = 600)
{
	big_buffer_case(2, "Test-Big2");
}

Test(session, drop_8_threads_1m_events_all_captured, .timeout = 600)
{
	big_buffer_case(8, "Test-Big8");
}

/* Small buffer, slow drainer: what is not captured is counted, exactly. */
static void throttled_case(int nthreads, const char *prov)
{
	TH_NEED_TRACEDUMP(dll);
	char *dir = th_tmpdir(), *path;
	struct rp_provider *p = test_provider(prov);
	struct rp_event *ev = small_event(p, 1, 0, 4);
	struct rp_provider_config pc = { .name = prov };
	struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
				      .buffer_bytes = 1 << 20 };
	struct writer_arg args[64];
	struct trace_summary t;
	struct rp_session *s;
	struct rp_session_stats st = { .sz = sizeof(st) };
	struct bytebuf te = { 0 };
	uint64_t n = 1000000, captured_api = 0;
	int i;

	cr_assert(asprintf(&path, "%s/throttled.nettrace", dir) > 0);
	so.path = path;
	rp_drain_throttle_ns = 2000000;		/* 2 ms after every pass */
	s = rp_session_start(&so);
	cr_assert_not_null(s, "rp_session_start: %s", rp_last_error());
	run_writers(ev, nthreads, n, args);
	cr_assert_eq(rp_session_stats(s, &st), 0);
	rp_drain_throttle_ns = 0;
	cr_assert_eq(rp_session_stop(s), 0);
	for (i = 0; i < nthreads; i++)
		captured_api += args[i].captured_ok;

	t = read_trace(path);
	cr_assert_lt(t.events, n * (uint64_t)nthreads, "the throttled drainer should drop");
	cr_assert_eq(t.events, captured_api, "captured: reader %" PRIu64 ", API %" PRIu64,
		     t.events, captured_api);
	cr_assert_eq(t.events + (uint64_t)t.lost, n * (uint64_t)nthreads,
		     "captured %" PRIu64 " + lost %" PRId64 " != attempted", t.events, t.lost);
	cr_assert_eq(st.dropped[RP_DROP_REASON_FULL], n * (uint64_t)nthreads - t.events,
		     "ring drop counters: %" PRIu64, st.dropped[RP_DROP_REASON_FULL]);
	cr_assert_eq(t.order_violations, 0);
	for (i = 0; i < nthreads; i++)
		cr_assert_eq(t.per_thread[i], args[i].captured_ok);

	traceevent_threads(dll, path, &te);
	cr_assert_eq(te_value(&te, "#lost") + t.events, n * (uint64_t)nthreads,
		     "TraceEvent: captured + EventsLost = attempted");
	cr_assert_eq(te_value(&te, "#order_violations"), 0);
	for (i = 0; i < nthreads; i++) {
		char key[32];

		snprintf(key, sizeof(key), "%d/%u", getpid(), args[i].tid);
		cr_assert_eq(te_value(&te, key), args[i].captured_ok, "TraceEvent: thread %s", key);
	}
	bb_free(&te);
	free(path);
	th_rmdir(dir);
}

Test(session, drop_1mb_throttled_2_threads_counts_exact, .timeout = 600)
{
	throttled_case(2, "Test-Throttle2");
}

Test(session, drop_1mb_throttled_8_threads_counts_exact, .timeout = 600)
{
	throttled_case(8, "Test-Throttle8");
}
