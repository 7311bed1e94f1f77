// SPDX-License-Identifier: MIT
/*
 * Sessions end to end: producers write through the public API into per-CPU
 * rings, the drainer writes nettrace, and the result is judged by ringpipe's
 * reader and by TraceEvent (tests/interop/TraceDump).
 */
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "clock.h"
#include "helpers.h"
#include "hmap.h"
#include "nettrace_read.h"
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

/* Sanitizer builds run 10-50x slower: the volume tests use a tenth of the
 * events there (the acceptance numbers come from the plain build). */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define VOLUME 100000ull
#else
#define VOLUME 1000000ull
#endif

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
	struct hmap last = { 0 };	/* tid -> last counter */
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
		if (thread < 64)
			t.per_thread[thread]++;
		{
			uint64_t prev;

			/* each thread's events arrive in the order it wrote them */
			if (hmap_get(&last, (uint64_t)rec.tid, &prev) && counter <= prev)
				t.order_violations++;
			hmap_put(&last, (uint64_t)rec.tid, counter);
		}
	}
	hmap_free(&last);
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

/* TraceEvent saw each writer's events in the order written, and exactly the
 * ones its writes reported captured. */
static void te_assert_threads(const struct bytebuf *te, const struct writer_arg *args,
			      int nthreads)
{
	int i;

	cr_assert_eq(te_value(te, "#order_violations"), 0);
	for (i = 0; i < nthreads; i++) {
		char key[32];

		snprintf(key, sizeof(key), "%d/%u", getpid(), args[i].tid);
		cr_assert_eq(te_value(te, key), args[i].captured_ok, "TraceEvent: thread %s", key);
	}
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
	uint64_t n = VOLUME;
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
	/* a writer descheduled for a whole second between reserve and commit
	 * (a badly overloaded machine) has its record skipped as stale:
	 * counted, but then the trace is short; the figures say which */
	cr_assert_eq(t.events, n * (uint64_t)nthreads,
		     "%" PRIu64 " events in the trace, %" PRIu64 " written; lost %" PRIu64
		     ", drainer: %" PRIu64 " written, %" PRIu64 " corrupt, %" PRIu64
		     " bytes skipped, %" PRIu64 " late", t.events, n * (uint64_t)nthreads, t.lost,
		     st.events_written, st.corrupt_records, st.skipped_bytes, st.late_events);
	cr_assert_eq(t.lost, 0);
	cr_assert_eq(t.order_violations, 0);
	for (i = 0; i < nthreads; i++)
		cr_assert_eq(t.per_thread[i], n, "thread %d: %" PRIu64 " events", i, t.per_thread[i]);

	traceevent_threads(dll, path, &te);
	cr_assert_eq(te_value(&te, "#lost"), 0, "TraceEvent EventsLost");
	te_assert_threads(&te, args, nthreads);
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
	uint64_t n = VOLUME, captured_api = 0;
	int i;

	cr_assert(asprintf(&path, "%s/throttled.nettrace", dir) > 0);
	so.path = path;
	__atomic_store_n(&rp_drain_throttle_ns, 2000000, __ATOMIC_RELAXED); /* 2 ms a pass */
	s = rp_session_start(&so);
	cr_assert_not_null(s, "rp_session_start: %s", rp_last_error());
	run_writers(ev, nthreads, n, args);
	cr_assert_eq(rp_session_stats(s, &st), 0);
	__atomic_store_n(&rp_drain_throttle_ns, 0, __ATOMIC_RELAXED);
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
	te_assert_threads(&te, args, nthreads);
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

/* ---- masks: 64 sessions, each gets exactly what it enabled ------------- */

Test(session, sixty_four_sessions_get_exactly_their_events, .timeout = 300)
{
	char *dir = th_tmpdir();
	struct rp_provider *p = test_provider("Test-Masks");
	struct rp_event *ev[16];
	struct rp_session *s[RP_MAX_SESSIONS];
	struct rp_provider_config pc[RP_MAX_SESSIONS];
	char *paths[RP_MAX_SESSIONS];
	const uint64_t per_event = 300;
	int i, k;

	for (k = 0; k < 16; k++)
		ev[k] = small_event(p, (uint32_t)k + 1, 1ull << k, (uint8_t)(1 + k % 5));
	for (i = 0; i < RP_MAX_SESSIONS; i++) {
		struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc[i], .nproviders = 1,
					      .buffer_bytes = 1 << 20, .format = 5 + (i & 1) };

		pc[i] = (struct rp_provider_config){
			.name = "Test-Masks",
			.keywords = (1ull << (i % 16)) | (i >= 32 ? 0x00f0 : 0),
			.level = (uint8_t)(i % 6),	/* 0 = every level */
		};
		cr_assert(asprintf(&paths[i], "%s/s%02d.nettrace", dir, i) > 0);
		so.path = paths[i];
		s[i] = rp_session_start(&so);
		cr_assert_not_null(s[i], "session %d: %s", i, rp_last_error());
	}
	{
		struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc[0], .nproviders = 1,
					      .path = "/dev/null" };

		cr_assert_null(rp_session_start(&so), "a 65th session must be refused");
		cr_assert_eq(errno, EBUSY);
	}
	for (k = 0; k < 16; k++) {
		struct small sm;
		uint64_t j;

		for (j = 1; j <= per_event; j++) {
			fill_small(&sm, j, (uint32_t)k);
			cr_assert_eq(rp_event_write(ev[k], &sm, sizeof(sm)), 0);
		}
	}
	for (i = 0; i < RP_MAX_SESSIONS; i++)
		cr_assert_eq(rp_session_stop(s[i]), 0);
	for (i = 0; i < RP_MAX_SESSIONS; i++) {
		struct trace_summary t = read_trace(paths[i]);

		for (k = 0; k < 16; k++) {
			bool kw = pc[i].keywords & (1ull << k);
			bool lv = pc[i].level == 0 || 1 + k % 5 <= pc[i].level;
			uint64_t want = kw && lv ? per_event : 0;

			cr_assert_eq(t.per_thread[k], want,
				     "session %d (kw 0x%" PRIx64 ", level %u): event %d (level %d): got %" PRIu64
				     ", want %" PRIu64, i, pc[i].keywords, pc[i].level, k, 1 + k % 5,
				     t.per_thread[k], want);
		}
		cr_assert_eq(t.lost, 0);
		free(paths[i]);
	}
	for (k = 0; k < 16; k++)
		cr_assert(!rp_event_enabled(ev[k]), "no session left: event %d disabled", k);
	th_rmdir(dir);
}

/* ---- lifetimes ------------------------------------------------------------ */

struct churn {
	struct rp_event *ev;
	int stop;
	uint64_t spawned;
	uint64_t counter;	/* global: increasing per thread even if a tid is reused */
};

static void *short_writer(void *arg)
{
	struct churn *c = arg;
	struct small sm;
	int i;

	for (i = 0; i < 200; i++) {
		fill_small(&sm, __atomic_add_fetch(&c->counter, 1, __ATOMIC_RELAXED), 0);
		rp_event_write(c->ev, &sm, sizeof(sm));
	}
	return NULL;	/* exits right after writing: races stop's thread scan */
}

static void *spawner(void *arg)
{
	struct churn *c = arg;

	while (!__atomic_load_n(&c->stop, __ATOMIC_ACQUIRE)) {
		pthread_t t;

		if (pthread_create(&t, NULL, short_writer, c) == 0) {
			pthread_join(t, NULL);
			__atomic_fetch_add(&c->spawned, 1, __ATOMIC_RELAXED);
		}
	}
	return NULL;
}

Test(session, thread_exit_races_session_stop, .timeout = 600)
{
	char *dir = th_tmpdir();
	struct rp_provider *p = test_provider("Test-Churn");
	struct churn c = { .ev = small_event(p, 1, 0, 4) };
	struct rp_provider_config pc = { .name = "Test-Churn" };
	pthread_t sp[3];
	int round, i, nfiles = 0;
	char *paths[64];

	for (i = 0; i < 3; i++)
		cr_assert_eq(pthread_create(&sp[i], NULL, spawner, &c), 0);
	for (round = 0; round < 12; round++) {
		struct rp_session *s[3];

		for (i = 0; i < 3; i++) {
			struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc,
						      .nproviders = 1, .buffer_bytes = 1 << 20,
						      .format = 5 + (i == 2) };

			cr_assert(asprintf(&paths[nfiles], "%s/churn%d-%d.nettrace", dir, round, i) > 0);
			so.path = paths[nfiles++];
			s[i] = rp_session_start(&so);
			cr_assert_not_null(s[i], "%s", rp_last_error());
		}
		usleep(5000 + 3000 * (round % 3));
		for (i = 0; i < 3; i++)
			cr_assert_eq(rp_session_stop(s[i]), 0);
	}
	__atomic_store_n(&c.stop, 1, __ATOMIC_RELEASE);
	for (i = 0; i < 3; i++)
		pthread_join(sp[i], NULL);
	cr_assert_gt(c.spawned, 10, "threads were created and exited during the rounds");
	for (i = 0; i < nfiles; i++) {
		struct trace_summary t = read_trace(paths[i]);

		cr_assert_eq(t.order_violations, 0, "%s", paths[i]);
		free(paths[i]);
	}
	th_rmdir(dir);
}

Test(session, fork_child_writes_safely, .timeout = 120)
{
	char *dir = th_tmpdir(), *path;
	struct rp_provider *p = test_provider("Test-Fork");
	struct rp_event *ev = small_event(p, 1, 0, 4);
	struct rp_provider_config pc = { .name = "Test-Fork" };
	struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
				      .buffer_bytes = 4 << 20 };
	struct rp_session *s;
	struct small sm;
	struct trace_summary t;
	int st, i;
	pid_t pid;

	cr_assert(asprintf(&path, "%s/fork.nettrace", dir) > 0);
	so.path = path;
	s = rp_session_start(&so);
	cr_assert_not_null(s);
	for (i = 1; i <= 100; i++) {
		fill_small(&sm, (uint64_t)i, 1);
		rp_event_write(ev, &sm, sizeof(sm));
	}
	pid = fork();
	if (pid == 0) {
		/* the child inherits no session: writes are disabled, cheap, safe */
		for (i = 1; i <= 1000; i++) {
			fill_small(&sm, (uint64_t)i, 2);
			if (rp_event_write(ev, &sm, sizeof(sm)))
				_exit(3);
		}
		_exit(rp_event_enabled(ev) ? 4 : 0);
	}
	cr_assert_gt(pid, 0);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status 0x%x", st);
	for (i = 101; i <= 200; i++) {
		fill_small(&sm, (uint64_t)i, 1);
		rp_event_write(ev, &sm, sizeof(sm));
	}
	cr_assert_eq(rp_session_stop(s), 0);
	t = read_trace(path);
	cr_assert_eq(t.per_thread[1], 200);
	cr_assert_eq(t.per_thread[2], 0, "the child's events must not land in the parent's trace");
	free(path);
	th_rmdir(dir);
}

/* ---- hostile ring contents ------------------------------------------------ */

Test(session, corrupted_ring_is_reported_and_skipped, .timeout = 120)
{
	char *dir = th_tmpdir(), *path;
	struct rp_provider *p = test_provider("Test-Corrupt");
	struct rp_event *ev = small_event(p, 1, 0, 4);
	struct rp_provider_config pc = { .name = "Test-Corrupt" };
	struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
				      .buffer_bytes = 1 << 20 };
	struct rp_session_stats st = { .sz = sizeof(st) };
	struct rp_session *s;
	struct trace_summary t;
	struct small sm;
	uint32_t r, nrings;
	int i;

	cr_assert(asprintf(&path, "%s/corrupt.nettrace", dir) > 0);
	so.path = path;
	s = rp_session_start(&so);
	cr_assert_not_null(s);
	for (i = 1; i <= 50; i++) {
		fill_small(&sm, (uint64_t)i, 0);
		cr_assert_eq(rp_event_write(ev, &sm, sizeof(sm)), 0);
	}
	/* another process scribbles on the shared rings: a committed record
	 * with a length that is not 8-aligned, one that runs past the data
	 * written, and one naming an event that does not exist */
	for (r = 0; r < rp_shm_nr_rings(s->shm); r++) {
		struct rp_ring *ring = rp_shm_ring(s->shm, r);
		struct rp_shm_record *bad = rp_ring_reserve(ring, 64);
		struct rp_shm_record *unknown = rp_ring_reserve(ring, 64);

		cr_assert_not_null(bad);
		cr_assert_not_null(unknown);
		rp_record_fill(unknown, 999999, 1, 1, 2, 0, 8, 0);
		rp_ring_commit(unknown);
		/* released last: the drainer reads the garbage only now */
		__atomic_store_n(&bad->len, r & 1 ? 0x3fff0000u : 61u, __ATOMIC_RELEASE);
		/* the drainer skips garbage up to the producer position: write
		 * the next record only once it has done so (a fact, however
		 * long a loaded host takes; the test's timeout bounds it) */
		while (!rp_ring_corrupt_count(ring))
			usleep(1000);
		cr_assert_eq(rp_ring_corrupt_count(ring), 1, "ring %u: corruption not detected", r);
		/* a record whose header does not add up to its length (64
		 * bytes, the header and 8 bytes imply 40): skipped the same way,
		 * so the valid records come only after the drainer did so */
		unknown = rp_ring_reserve(ring, 64);
		cr_assert_not_null(unknown);
		rp_record_fill(unknown, 999999, 1, 1, 2, 0, 8, 0);
		rp_ring_commit(unknown);
		while (rp_ring_corrupt_count(ring) < 2)
			usleep(1000);
	}
	for (i = 51; i <= 100; i++) {
		fill_small(&sm, (uint64_t)i, 0);
		cr_assert_eq(rp_event_write(ev, &sm, sizeof(sm)), 0);
	}
	nrings = rp_shm_nr_rings(s->shm);
	for (;;) {
		cr_assert_eq(rp_session_stats(s, &st), 0);
		if (st.corrupt_records >= 2 * nrings)
			break;
		usleep(1000);
	}
	{
		uint64_t stale = 0, skipped[2] = { 0 };

		for (r = 0; r < nrings; r++) {
			stale += rp_ring_stale_count(rp_shm_ring(s->shm, r));
			skipped[r & 1] += rp_ring_corrupt_count(rp_shm_ring(s->shm, r));
		}
		cr_assert_eq(rp_session_stop(s), 0);
		cr_assert_geq(st.corrupt_records, 2 * nrings,
			      "the drainer must report each corruption");
		t = read_trace(path);
		/* what the drainer saw, said when a record goes missing */
		cr_assert_eq(t.per_thread[0], 100, "valid records before and after the garbage "
			     "survive: %" PRIu64 " of 100 in the trace, EventsLost %" PRId64
			     ", %" PRIu64 " corrupt records, %" PRIu64 " bytes skipped, %" PRIu64
			     " stale heads, ring corruptions %" PRIu64 " + %" PRIu64 ", %u rings",
			     t.per_thread[0], (int64_t)t.lost, st.corrupt_records,
			     st.skipped_bytes, stale, skipped[0], skipped[1], nrings);
	}
	free(path);
	th_rmdir(dir);
}

/* ---- the drainer's merge -------------------------------------------------- */

/* Waits until the drainer serialized `want` events; returns its late count. */
static uint64_t wait_written(struct rp_session *s, uint64_t want)
{
	struct rp_session_stats st;

	th_wait_written(s, want, 60000, &st);
	cr_assert_eq(st.events_written, want, "the drainer serialized %" PRIu64 " of %" PRIu64,
		     st.events_written, want);
	return st.late_events;
}

/* Reads a trace's timestamps: they never go back in file order. */
static uint64_t ts_regressions(const char *path)
{
	struct nt_reader *r = nt_reader_open(path);
	struct nt_rec rec;
	uint64_t prev = 0, bad = 0;
	int err;

	cr_assert_not_null(r);
	while ((err = nt_reader_next(r, &rec)) > 0) {
		if (rec.ts < prev)
			bad++;
		prev = rec.ts;
	}
	cr_assert_eq(err, 0, "%s", nt_reader_errmsg(r));
	nt_reader_free(r);
	return bad;
}

/* A backlog far larger than what the drainer holds per ring, written while
 * it was paused by threads that migrate between CPUs (so rings hold several
 * writers): merged out in timestamp order without waiting to read it whole,
 * every event once, nothing late. */
Test(session, backlog_written_while_paused_is_merged_in_order, .timeout = 300)
{
	char *dir = th_tmpdir(), *path;
	struct rp_provider *p = test_provider("Test-Backlog");
	struct rp_event *ev = small_event(p, 1, 0, 4);
	struct rp_provider_config pc = { .name = "Test-Backlog" };
	struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
				      .buffer_bytes = 256ull << 20 };
	struct writer_arg args[4];
	struct trace_summary t;
	struct rp_session *s;
	uint64_t n = VOLUME / 2, late;
	int i;

	cr_assert(asprintf(&path, "%s/backlog.nettrace", dir) > 0);
	so.path = path;
	s = rp_session_start(&so);
	cr_assert_not_null(s, "rp_session_start: %s", rp_last_error());
	__atomic_store_n(&rp_drain_pause, 1, __ATOMIC_RELAXED);
	run_writers(ev, 4, n, args);
	__atomic_store_n(&rp_drain_pause, 0, __ATOMIC_RELAXED);
	late = wait_written(s, 4 * n);
	cr_assert_eq(rp_session_stop(s), 0);
	cr_assert_eq(late, 0, "%" PRIu64 " events came late", late);
	t = read_trace(path);
	cr_assert_eq(t.events, 4 * n);
	cr_assert_eq(t.lost, 0);
	cr_assert_eq(t.order_violations, 0);
	for (i = 0; i < 4; i++)
		cr_assert_eq(t.per_thread[i], n, "thread %d: %" PRIu64 " events", i, t.per_thread[i]);
	cr_assert_eq(ts_regressions(path), 0);
	free(path);
	th_rmdir(dir);
}

/* Records committed to one ring out of timestamp order (writers preempted
 * between reserving and stamping) come out sorted; the ring space of a
 * record that overtook an older one is handed back only with that one. */
Test(session, out_of_order_records_in_a_ring_come_out_sorted, .timeout = 60)
{
	char *dir = th_tmpdir(), *path;
	struct rp_provider *p = test_provider("Test-Disorder");
	struct rp_event *ev = small_event(p, 1, 0, 4);
	struct rp_provider_config pc = { .name = "Test-Disorder" };
	struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
				      .buffer_bytes = 1 << 20 };
	static const uint32_t order[] = { 3, 1, 4, 0, 2, 6, 5, 7 };	/* ts rank by position */
	struct rp_session *s;
	struct trace_summary t;
	struct rp_ring *ring;
	uint64_t base;
	uint32_t k;

	cr_assert(asprintf(&path, "%s/disorder.nettrace", dir) > 0);
	so.path = path;
	s = rp_session_start(&so);
	cr_assert_not_null(s);
	ring = rp_shm_ring(s->shm, 0);
	/* the drainer must not look before all are committed: pause it */
	__atomic_store_n(&rp_drain_pause, 1, __ATOMIC_RELAXED);
	usleep(20000);
	base = rp_clock_now();
	for (k = 0; k < 8; k++) {
		struct rp_shm_record *rec = rp_ring_reserve(ring, 64);
		struct small sm;

		cr_assert_not_null(rec);
		/* one thread per record (thread k is in the payload), so the
		 * per-thread order check does not apply; timestamps do */
		fill_small(&sm, order[k] + 1, 10 + k);
		rp_record_fill(rec, ev->index, base + 1000 * order[k], 1000 + k, 1, 0,
			       sizeof(sm), 0);
		memcpy(rp_record_payload(rec, 0), &sm, sizeof(sm));
		rp_ring_commit(rec);
	}
	__atomic_store_n(&rp_drain_pause, 0, __ATOMIC_RELAXED);
	cr_assert_eq(wait_written(s, 8), 0, "nothing is late");
	cr_assert_eq(rp_session_stop(s), 0);
	t = read_trace(path);
	cr_assert_eq(t.events, 8);
	for (k = 0; k < 8; k++)
		cr_assert_eq(t.per_thread[10 + k], 1);
	cr_assert_eq(ts_regressions(path), 0);
	free(path);
	th_rmdir(dir);
}

/* ---- provider callbacks and start order ----------------------------------- */

struct cb_log {
	int calls;
	int session_id;
	bool enabled[4];
	uint64_t keywords;
	uint8_t level;
	char args[64];
	struct rp_event *ev;
	uint64_t burst;
	uint64_t burst_ok;
	uint32_t drainer_tid;	/* seen from inside the enable callback */
};

static void burst_cb(struct rp_provider *p, int session_id, bool enabled, uint64_t keywords,
		     uint8_t level, const char *args, void *ctx)
{
	struct cb_log *l = ctx;
	struct small sm;
	uint64_t i;

	(void)p;
	if (l->calls < 4)
		l->enabled[l->calls] = enabled;
	if (enabled && rp_slots[session_id].shm)
		l->drainer_tid = rp_shm_header(rp_slots[session_id].shm)->drainer_tid;
	l->calls++;
	l->session_id = session_id;
	l->keywords = keywords;
	l->level = level;
	snprintf(l->args, sizeof(l->args), "%s", args ? args : "(null)");
	if (!enabled)
		return;
	/* a heap walk: far more than the rings hold, written from the callback */
	for (i = 1; i <= l->burst; i++) {
		fill_small(&sm, i, 0);
		if (rp_event_write(l->ev, &sm, sizeof(sm)) == 0)
			l->burst_ok++;
	}
}

Test(session, enable_callback_runs_with_the_drainer_already_running, .timeout = 120)
{
	char *dir = th_tmpdir(), *path;
	static struct cb_log log;
	struct rp_provider_opts po = { .sz = sizeof(po), .name = "Test-Callback",
				       .enable_cb = burst_cb, .cb_ctx = &log };
	struct rp_provider *p = rp_provider_new(&po);
	struct rp_provider_config pc = { .name = "Test-Callback", .keywords = 0x30, .level = 5,
					 .args = "walk=1;depth=2" };
	struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
				      .buffer_bytes = 1 << 20 };
	struct rp_session *s;
	struct trace_summary t;

	cr_assert_not_null(p);
	log.ev = small_event(p, 1, 0x10, 4);
	log.burst = 2 * VOLUME;
	cr_assert(asprintf(&path, "%s/cb.nettrace", dir) > 0);
	so.path = path;
	s = rp_session_start(&so);
	cr_assert_not_null(s, "%s", rp_last_error());
	cr_assert_eq(log.calls, 1, "the enable callback fires once, from start");
	cr_assert(log.enabled[0]);
	cr_assert_eq(log.session_id, rp_session_id(s));
	cr_assert_eq(log.keywords, 0x30);
	cr_assert_eq(log.level, 5);
	cr_assert_str_eq(log.args, "walk=1;depth=2");
	cr_assert_neq(log.drainer_tid, 0, "the drainer runs before the enable callback fires");
	cr_assert_neq(log.drainer_tid, (uint32_t)gettid());
	cr_assert_eq(rp_session_stop(s), 0);
	cr_assert_eq(log.calls, 2);
	cr_assert(!log.enabled[1], "the disable callback fires at stop");
	t = read_trace(path);
	cr_assert_eq(t.per_thread[0], log.burst_ok);
	cr_assert_eq(t.per_thread[0] + (uint64_t)t.lost, log.burst);
	free(path);
	th_rmdir(dir);
}

/* One count per provider: enable callbacks and disable callbacks seen. */
struct many_cb {
	int enabled, disabled, stopping;
};

static void many_cb(struct rp_provider *p, int session_id, bool enabled, uint64_t keywords,
		    uint8_t level, const char *args, void *ctx)
{
	struct many_cb *c = ctx;

	if (enabled)
		c->enabled++;
	else
		c->disabled++;
}

static void many_stopping_cb(struct rp_provider *p, int session_id, uint64_t keywords,
			     uint8_t level, void *ctx)
{
	((struct many_cb *)ctx)->stopping++;
}

/*
 * No cap on how many providers a session tells: every one of 1,000
 * providers with enable and stopping callbacks, all named by one session,
 * hears of its start once, of its end once and of its stop once.
 */
Test(session, every_named_providers_enable_callback_runs_however_many, .timeout = 120)
{
	enum { N = 1000 };
	static struct many_cb cnt[N];
	static struct rp_provider_config pc[N];
	static char names[N][32];
	struct rp_session_opts so = { .sz = sizeof(so), .providers = pc, .nproviders = N,
				      .buffer_bytes = 1 << 20, .path = "/dev/null" };
	struct rp_session *s;
	int i;

	for (i = 0; i < N; i++) {
		struct rp_provider_opts po = { .sz = sizeof(po), .name = names[i],
					       .enable_cb = many_cb, .stopping_cb = many_stopping_cb,
					       .cb_ctx = &cnt[i] };

		snprintf(names[i], sizeof(names[i]), "Test-Many-%04d", i);
		pc[i].name = names[i];
		cr_assert_not_null(rp_provider_new(&po), "%s", rp_last_error());
	}
	s = rp_session_start(&so);
	cr_assert_not_null(s, "%s", rp_last_error());
	for (i = 0; i < N; i++)
		cr_assert_eq(cnt[i].enabled, 1, "provider %d: %d enable callbacks", i,
			     cnt[i].enabled);
	cr_assert_eq(rp_session_stop(s), 0);
	for (i = 0; i < N; i++)
		cr_assert(cnt[i].disabled == 1 && cnt[i].stopping == 1,
			  "provider %d: %d disable and %d stopping callbacks", i, cnt[i].disabled,
			  cnt[i].stopping);
}

Test(session, provider_and_event_defined_after_start_are_enabled, .timeout = 60)
{
	char *dir = th_tmpdir(), *path;
	struct rp_provider_config pc = { .name = "Test-Late" };
	struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
				      .buffer_bytes = 1 << 20 };
	struct rp_session *s;
	struct rp_provider *p;
	struct rp_event *ev;
	struct small sm;
	struct trace_summary t;

	cr_assert(asprintf(&path, "%s/late.nettrace", dir) > 0);
	so.path = path;
	s = rp_session_start(&so);
	cr_assert_not_null(s);
	p = test_provider("Test-Late");
	ev = small_event(p, 1, 0, 4);
	cr_assert(rp_event_enabled(ev));
	fill_small(&sm, 1, 5);
	cr_assert_eq(rp_event_write(ev, &sm, sizeof(sm)), 0);
	cr_assert_eq(rp_session_stop(s), 0);
	cr_assert(!rp_event_enabled(ev));
	t = read_trace(path);
	cr_assert_eq(t.per_thread[5], 1);
	free(path);
	th_rmdir(dir);
}

Test(session, bad_options_are_refused_with_a_reason)
{
	struct rp_provider_config pc = { .name = "Test-Bad" };
	struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
				      .path = "/dev/null" };

	so.format = 7;
	cr_assert_null(rp_session_start(&so));
	cr_assert_eq(errno, EINVAL);
	cr_assert(strstr(rp_last_error(), "format 7"), "%s", rp_last_error());
	so.format = 5;
	so.buffering = 2;
	cr_assert_null(rp_session_start(&so));
	cr_assert_eq(errno, EINVAL, "an unknown buffering mode is rejected, not coerced");
	cr_assert(strstr(rp_last_error(), "buffering mode 2"), "%s", rp_last_error());
	so.buffering = RP_BUFFERING_DROP;
	so.path = NULL;
	so.fd = -1;
	cr_assert_null(rp_session_start(&so));
	cr_assert_eq(errno, EINVAL);
	so.path = "/nonexistent-dir/x.nettrace";
	cr_assert_null(rp_session_start(&so));
	cr_assert_eq(errno, ENOENT);
	cr_assert(strstr(rp_last_error(), "/nonexistent-dir/x.nettrace"), "%s", rp_last_error());
	{
		struct rp_provider_opts po = { .sz = sizeof(po), .name = "" };

		cr_assert_null(rp_provider_new(&po));
		cr_assert_eq(errno, EINVAL);
	}
	cr_assert_eq(rp_session_stop(NULL), -EINVAL);
}

/* ---- stream sockets -------------------------------------------------------- */

struct sock_reader {
	int fd;
	size_t limit;		/* close after this many bytes (0: read to the end) */
	struct bytebuf got;
};

static void *sock_reader_main(void *arg)
{
	struct sock_reader *r = arg;
	char buf[65536];
	ssize_t n;

	while ((n = read(r->fd, buf, sizeof(buf))) > 0) {
		bb_append(&r->got, buf, (size_t)n);
		if (r->limit && r->got.len >= r->limit)
			break;
	}
	close(r->fd);
	return NULL;
}

Test(session, socket_output_streams_a_complete_trace, .timeout = 120)
{
	TH_NEED_TRACEDUMP(dll);
	struct rp_provider *p = test_provider("Test-Sock");
	struct rp_event *ev = small_event(p, 1, 0, 4);
	struct rp_provider_config pc = { .name = "Test-Sock" };
	struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
				      .buffer_bytes = 64 << 20 };
	struct sock_reader rd = { 0 };
	struct rp_session *s;
	pthread_t th;
	struct small sm;
	int sv[2], i;
	char *dir = th_tmpdir(), *path, *cmd;
	struct bytebuf out = { 0 };

	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	rd.fd = sv[1];
	cr_assert_eq(pthread_create(&th, NULL, sock_reader_main, &rd), 0);
	so.fd = sv[0];
	s = rp_session_start(&so);
	cr_assert_not_null(s, "%s", rp_last_error());
	for (i = 1; i <= 100000; i++) {
		fill_small(&sm, (uint64_t)i, 0);
		cr_assert_eq(rp_event_write(ev, &sm, sizeof(sm)), 0);
	}
	cr_assert_eq(rp_session_stop(s), 0);
	close(sv[0]);
	pthread_join(th, NULL);
	cr_assert(asprintf(&path, "%s/sock.nettrace", dir) > 0);
	cr_assert_eq(th_write_file(path, rd.got.p, rd.got.len), 0);
	cr_assert(asprintf(&cmd, "dotnet '%s' counts '%s'", dll, path) > 0);
	cr_assert_eq(th_run(cmd, &out), 0, "TraceEvent: %s", (char *)out.p);
	cr_assert_str_eq((char *)out.p, "Test-Sock/Small\t100000\n#lost\t0\n");
	bb_free(&out);
	bb_free(&rd.got);
	free(cmd);
	free(path);
	th_rmdir(dir);
}

Test(session, reader_disconnect_ends_the_session_cleanly, .timeout = 120)
{
	struct rp_provider *p = test_provider("Test-Hangup");
	struct rp_event *ev = small_event(p, 1, 0, 4);
	struct rp_provider_config pc = { .name = "Test-Hangup" };
	struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
				      .buffer_bytes = 4 << 20, .sp_interval_ms = 10 };
	struct sock_reader rd = { .limit = 4096 };
	struct rp_session_stats st = { .sz = sizeof(st) };
	struct rp_session *s;
	struct small sm;
	pthread_t th;
	int sv[2], i, err;

	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	rd.fd = sv[1];
	cr_assert_eq(pthread_create(&th, NULL, sock_reader_main, &rd), 0);
	so.fd = sv[0];
	s = rp_session_start(&so);
	cr_assert_not_null(s);
	/* keep writing until the drainer notices the reader is gone */
	for (i = 0; i < 2000; i++) {
		int k;

		for (k = 0; k < 1000; k++) {
			fill_small(&sm, (uint64_t)i * 1000 + k + 1, 0);
			rp_event_write(ev, &sm, sizeof(sm));
		}
		cr_assert_eq(rp_session_stats(s, &st), 0);
		if (st.output_error)
			break;
		usleep(1000);
	}
	pthread_join(th, NULL);
	cr_assert(st.output_error == -EPIPE || st.output_error == -ECONNRESET,
		  "output error: %d", st.output_error);
	/* the session collects nothing more, and says so: every later write
	 * returns the error and is counted as an output drop */
	{
		uint64_t before;
		int rc;

		cr_assert_eq(rp_session_stats(s, &st), 0);
		before = st.dropped[RP_DROP_REASON_OUTPUT];
		fill_small(&sm, 1, 0);
		rc = rp_event_write(ev, &sm, sizeof(sm));
		cr_assert_eq(rc, st.output_error, "a write after the reader left returned %d", rc);
		cr_assert_eq(rp_session_stats(s, &st), 0);
		cr_assert_eq(st.dropped[RP_DROP_REASON_OUTPUT], before + 1,
			     "the refused write is counted as an output drop");
	}
	err = rp_session_stop(s);
	cr_assert(err == -EPIPE || err == -ECONNRESET, "stop returns the output error: %d", err);
	close(sv[0]);
	bb_free(&rd.got);
}

/*
 * The drainer belongs to the library: it is named (top, perf and gdb show
 * "rp-drain") and blocks every signal, so an application's handlers never
 * run on it and a process-directed signal goes to the application's threads.
 */
Test(session, drainer_thread_is_named_and_takes_no_signals, .timeout = 60)
{
	struct rp_provider_config pc = { .name = "Test-Thread" };
	struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
				      .fd = -1 };
	char *dir = th_tmpdir(), *path, file[64], line[256];
	struct rp_session *s;
	unsigned long long blocked = 0;
	bool named = false;
	FILE *f;

	cr_assert(asprintf(&path, "%s/t.nettrace", dir) > 0);
	so.path = path;
	s = rp_session_start(&so);
	cr_assert_not_null(s, "%s", rp_last_error());
	snprintf(file, sizeof(file), "/proc/self/task/%d/comm",
		 (int)rp_shm_header(s->shm)->drainer_tid);
	f = fopen(file, "r");
	cr_assert_not_null(f, "%s", file);
	named = fgets(line, sizeof(line), f) && !strcmp(line, "rp-drain\n");
	fclose(f);
	cr_assert(named, "the drainer thread is called '%s', expected rp-drain", line);
	snprintf(file, sizeof(file), "/proc/self/task/%d/status",
		 (int)rp_shm_header(s->shm)->drainer_tid);
	f = fopen(file, "r");
	cr_assert_not_null(f, "%s", file);
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "SigBlk:", 7))
			blocked = strtoull(line + 7, NULL, 16);
	fclose(f);
	/* every signal the kernel lets a thread block (not SIGKILL, SIGSTOP) */
	cr_assert_eq(blocked | (1ull << (SIGKILL - 1)) | (1ull << (SIGSTOP - 1)) |
			     (3ull << 31), ~0ull,
		     "the drainer leaves signals unblocked: SigBlk %016llx", blocked);
	cr_assert_eq(rp_session_stop(s), 0);
	free(path);
	th_rmdir(dir);
}

/* The drainer of a session started with /dev/null as its output, its CPUs
 * in *cpus; the session is left running in *sp. */
static void drainer_cpus(struct rp_session **sp, cpu_set_t *cpus)
{
	struct rp_provider_config pc = { .name = "Test-Thread-Cpus" };
	struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
				      .path = "/dev/null", .fd = -1 };
	struct rp_session *s = rp_session_start(&so);

	cr_assert_not_null(s, "%s", rp_last_error());
	cr_assert_eq(sched_getaffinity((pid_t)rp_shm_header(s->shm)->drainer_tid, sizeof(*cpus),
				       cpus), 0);
	*sp = s;
}

/* The CPUs this process may use, which must be at least two; the test is
 * skipped on a machine (or under a mask) with one. */
static void two_cpus_or_skip(cpu_set_t *all)
{
	cr_assert_eq(sched_getaffinity(0, sizeof(*all), all), 0);
	if (CPU_COUNT(all) < 2)
		cr_skip_test("this process may run on %d CPU: the test needs two to tell them apart",
			     CPU_COUNT(all));
}

/* An application often pins the thread that starts tracing; the drainer
 * must not share that CPU with it: it runs on the process's CPUs. */
Test(session, drainer_runs_on_the_process_cpus_not_on_its_pinned_starters, .timeout = 60)
{
	cpu_set_t all, one, got;
	struct rp_session *s;
	int first = 0;

	two_cpus_or_skip(&all);
	while (!CPU_ISSET(first, &all))
		first++;
	CPU_ZERO(&one);
	CPU_SET(first, &one);
	cr_assert_eq(sched_setaffinity(0, sizeof(one), &one), 0);
	drainer_cpus(&s, &got);
	cr_assert(CPU_EQUAL(&got, &all),
		  "the drainer runs on %d CPU(s), the process may use %d: it took its starter's "
		  "pinning", CPU_COUNT(&got), CPU_COUNT(&all));
	cr_assert_eq(rp_session_stop(s), 0);
}

/* RINGPIPE_THREAD_CPUS puts the library's threads where it says; a
 * malformed list, or one without a CPU the process may use, is refused. */
Test(session, thread_cpus_from_the_environment_are_obeyed_or_refused, .timeout = 60)
{
	struct rp_provider_config pc = { .name = "Test-Thread-Cpus" };
	struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
				      .path = "/dev/null", .fd = -1 };
	static const char *const bad[] = { "abc", "0-", "3-1", "1,,2", "0 1", "99999" };
	cpu_set_t all, got;
	struct rp_session *s;
	char list[16];
	int last = CPU_SETSIZE - 1;
	size_t i;

	two_cpus_or_skip(&all);
	while (!CPU_ISSET(last, &all))
		last--;
	snprintf(list, sizeof(list), "%d", last);
	cr_assert_eq(setenv("RINGPIPE_THREAD_CPUS", list, 1), 0);
	drainer_cpus(&s, &got);
	cr_assert(CPU_COUNT(&got) == 1 && CPU_ISSET(last, &got),
		  "RINGPIPE_THREAD_CPUS=%s, but the drainer runs on %d CPU(s)", list,
		  CPU_COUNT(&got));
	cr_assert_eq(rp_session_stop(s), 0);

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cr_assert_eq(setenv("RINGPIPE_THREAD_CPUS", bad[i], 1), 0);
		s = rp_session_start(&so);
		cr_assert_null(s, "RINGPIPE_THREAD_CPUS=%s was taken", bad[i]);
		cr_assert(strstr(rp_last_error(), "RINGPIPE_THREAD_CPUS="),
			  "RINGPIPE_THREAD_CPUS=%s: the error does not name it: %s", bad[i],
			  rp_last_error());
	}
	/* a CPU this machine does not have: well formed, and refused */
	cr_assert_eq(setenv("RINGPIPE_THREAD_CPUS", "1023", 1), 0);
	if (!CPU_ISSET(1023, &all)) {
		s = rp_session_start(&so);
		cr_assert_null(s, "RINGPIPE_THREAD_CPUS=1023 was taken");
		cr_assert(strstr(rp_last_error(), "none of these CPUs"), "%s", rp_last_error());
	}
	unsetenv("RINGPIPE_THREAD_CPUS");
}

struct rotator {
	struct rp_session *s;
	const char *dir;
	int stop;		/* atomic */
	int files;		/* rotations made, plus the first file */
};

/* Rotates s into DIR/r.N.nettrace every few milliseconds while writers
 * write, and on until there are 5 files (the writers of a sanitizer build
 * may be done before the first). */
static void *rotator_main(void *arg)
{
	struct rotator *r = arg;

	while ((!__atomic_load_n(&r->stop, __ATOMIC_RELAXED) || r->files < 5) && r->files < 200) {
		struct timespec ts = { 0, 3000000 };
		char *path;
		int fd;

		nanosleep(&ts, NULL);
		cr_assert(asprintf(&path, "%s/r.%d.nettrace", r->dir, r->files + 1) > 0);
		fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		cr_assert_geq(fd, 0);
		cr_assert_eq(rp_session_rotate(r->s, fd), 0);
		r->files++;
		free(path);
	}
	return NULL;
}

/* A session rotated while 2 writers write, in Drop with a small buffer:
 * every file reads alone (its own header, event types, sequence numbers),
 * and together they hold exactly the events the writers were told went in,
 * their EventsLost adding up to the rest. */
Test(session, rotation_mid_stream_splits_the_trace_losing_nothing, .timeout = 300)
{
	char *dir = th_tmpdir(), *path;
	struct rp_provider *p = test_provider("Test-Rotate");
	struct rp_event *ev = small_event(p, 1, 0, 4);
	struct rp_provider_config pc = { .name = "Test-Rotate" };
	struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
				      .buffer_bytes = 1 << 20 };
	struct rp_session_opts dso = so;
	struct rotator rot = { .dir = dir, .files = 1 };
	struct writer_arg args[2];
	uint64_t per_thread[2] = { 0 }, events = 0, ok = 0;
	int64_t lost = 0;
	pthread_t th;
	int i, fd;

	cr_assert(asprintf(&path, "%s/r.1.nettrace", dir) > 0);
	so.path = path;
	rot.s = rp_session_start(&so);
	cr_assert_not_null(rot.s, "%s", rp_last_error());
	/* a deferred session has no drainer to switch */
	dso.path = th_fmt("%s/deferred.nettrace", dir);
	dso.kind = RP_SESSION_DEFERRED;
	{
		struct rp_session *d = rp_session_start(&dso);

		cr_assert_not_null(d, "%s", rp_last_error());
		fd = open(th_fmt("%s/never.nettrace", dir), O_WRONLY | O_CREAT, 0644);
		cr_assert_eq(rp_session_rotate(d, fd), -EBUSY);
		close(fd);
		cr_assert_eq(rp_session_stop(d), 0);
	}
	cr_assert_eq(pthread_create(&th, NULL, rotator_main, &rot), 0);
	run_writers(ev, 2, VOLUME, args);
	__atomic_store_n(&rot.stop, 1, __ATOMIC_RELAXED);
	pthread_join(th, NULL);
	cr_assert_eq(rp_session_stop(rot.s), 0);
	cr_assert_geq(rot.files, 3, "only %d files", rot.files);
	for (i = 1; i <= rot.files; i++) {
		struct trace_summary t = read_trace(th_fmt("%s/r.%d.nettrace", dir, i));

		cr_assert_eq(t.order_violations, 0);
		events += t.events;
		lost += t.lost;
		per_thread[0] += t.per_thread[0];
		per_thread[1] += t.per_thread[1];
	}
	for (i = 0; i < 2; i++) {
		cr_assert_eq(per_thread[i], args[i].captured_ok, "thread %d", i);
		ok += args[i].captured_ok;
	}
	cr_assert_eq(events, ok);
	cr_assert_eq((uint64_t)lost, 2 * VOLUME - ok, "EventsLost %lld, dropped %llu", (long long)lost,
		     (unsigned long long)(2 * VOLUME - ok));
	{
		/* TraceEvent agrees on a file from the middle */
		const char *why = NULL, *dll = th_tracedump(&why);
		struct bytebuf te = { 0 };
		struct trace_summary t;

		if (!dll) {
			if (th_require_interop())
				cr_assert_fail("RINGPIPE_REQUIRE_INTEROP=1 but %s", why);
		} else {
			path = th_fmt("%s/r.%d.nettrace", dir, rot.files / 2 + 1);
			t = read_trace(path);
			traceevent_threads(dll, path, &te);
			cr_assert_eq(te_value(&te, "#lost"), (uint64_t)t.lost, "%s", path);
			bb_free(&te);
		}
	}
	th_rmdir(dir);
}
