// SPDX-License-Identifier: MIT
/*
 * Every write is accounted at a session's edges (ringpipe.h, "At a session's
 * edges"): a write is the session's when, once it has begun, it finds the
 * session running, and then it is in the trace or counted in its drops; a
 * write no session took says so (RP_WRITE_REPORT_NO_SESSION) and is counted
 * nowhere, not even by the ringpipe:event probe.
 *
 * Writers write without pause while a session is started and stopped a
 * thousand times, Drop and Block in turn, its drainer slowed so that rings
 * fill (drops in Drop, parked writers aborted by the stop in Block). Half the
 * writers keep a ledger of what each write returned; the other half write
 * through the flat rp_event_write(). Per session: the ledger writers'
 * captures are exactly their events in the trace, and, with bpftrace counting
 * the probe per event id between sessions, the probe's count of each kind is
 * exactly the attempts the session had (the ledger's captured + dropped; the
 * flat writers' events in the trace + the rest of EventsLost).
 *
 * And the demo runtime's own ledger ("ticks N traced M") equals the Tick
 * events of a trace collected through the diagnostics IPC, which stops it
 * with StopTracing while the demo writes at full rate.
 */
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/wait.h>

#include "clock.h"
#include "helpers.h"
#include "nettrace_read.h"
#include "ringpipe/ringpipe.h"
#include "session.h"

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define CYCLES 200
#else
#define CYCLES 1000
#endif
#define NLEDGER 4		/* writers that keep a ledger */
#define NFLAT 4			/* writers through rp_event_write() */
#define LEDGER_PAYLOAD 4096	/* big enough that a slowed drainer's rings fill */
#define PER_CYCLE 300		/* ledger attempts a session sees, at least */
#define TE_EVERY 250		/* every so many sessions, TraceEvent reads it too */
#define DEADLINE_NS 120000000000ull	/* only turns a hang into a failure */

#define LEDGER_ID 1
#define FLAT_ID 2

struct writer {
	struct rp_event *ev;
	uint32_t index;
	int in_call;		/* atomic: inside a write, or its accounting */
	uint64_t captured;	/* atomic, this thread's only: rc 0 */
	uint64_t dropped;	/* rc < 0: -ENOBUFS */
	uint64_t none;		/* RP_WRITE_NO_SESSION */
	uint64_t bad;		/* any other rc; the last in bad_rc */
	int bad_rc;
	uint64_t calls;		/* flat writers: calls made */
} __attribute__((aligned(64)));

static int stop_writers;

static void *ledger_main(void *arg)
{
	struct writer *w = arg;
	static const struct rp_write_opts wo = { .sz = sizeof(wo),
						 .flags = RP_WRITE_REPORT_NO_SESSION };
	uint8_t payload[LEDGER_PAYLOAD] = { 0 };
	struct iovec iov = { payload, sizeof(payload) };

	memcpy(payload + 8, &w->index, 4);
	while (!__atomic_load_n(&stop_writers, __ATOMIC_RELAXED)) {
		int rc;

		__atomic_store_n(&w->in_call, 1, __ATOMIC_RELAXED);
		rc = rp_event_writev(w->ev, &iov, 1, &wo);
		if (rc == 0)
			__atomic_store_n(&w->captured, w->captured + 1, __ATOMIC_RELAXED);
		else if (rc == RP_WRITE_NO_SESSION)
			__atomic_store_n(&w->none, w->none + 1, __ATOMIC_RELAXED);
		else if (rc == -ENOBUFS)
			__atomic_store_n(&w->dropped, w->dropped + 1, __ATOMIC_RELAXED);
		else
			__atomic_store_n(&w->bad, w->bad + 1, __ATOMIC_RELAXED), w->bad_rc = rc;
		/* pairs with the load_acquire in quiet(): seen out, its
		 * accounting is seen too */
		__atomic_store_n(&w->in_call, 0, __ATOMIC_RELEASE);
		/* between sessions: on again at once, but leave the CPU to
		 * the test's own thread and the drainer now and then */
		if (rc == RP_WRITE_NO_SESSION)
			sched_yield();
	}
	return NULL;
}

static void *flat_main(void *arg)
{
	struct writer *w = arg;
	uint64_t payload[4] = { 0, w->index, 0, 0 };

	while (!__atomic_load_n(&stop_writers, __ATOMIC_RELAXED)) {
		payload[0]++;
		(void)rp_event_write(w->ev, payload, sizeof(payload));
		__atomic_store_n(&w->calls, w->calls + 1, __ATOMIC_RELAXED);
		if (!rp_event_enabled(w->ev))
			sched_yield();
	}
	return NULL;
}

/* Each ledger writer seen outside a write once: a write the session took
 * has been accounted (stop waited for it), and any later one is no
 * session's. */
static void quiet(struct writer *w, int n)
{
	for (int i = 0; i < n; i++) {
		uint64_t t0 = rp_clock_mono_ns();

		while (__atomic_load_n(&w[i].in_call, __ATOMIC_ACQUIRE))
			cr_assert_lt(rp_clock_mono_ns() - t0, DEADLINE_NS, "writer %d stuck in a write", i);
	}
}

struct ledger {
	uint64_t captured, dropped, none, bad;
};

static struct ledger ledger_sum(const struct writer *w, int n)
{
	struct ledger l = { 0 };

	for (int i = 0; i < n; i++) {
		l.captured += __atomic_load_n(&w[i].captured, __ATOMIC_RELAXED);
		l.dropped += __atomic_load_n(&w[i].dropped, __ATOMIC_RELAXED);
		l.none += __atomic_load_n(&w[i].none, __ATOMIC_RELAXED);
		l.bad += __atomic_load_n(&w[i].bad, __ATOMIC_RELAXED);
	}
	return l;
}

/* ---- the probe, counted by bpftrace between sessions -------------------- */

struct probe {
	pid_t pid;
	FILE *out;		/* bpftrace's stdout */
	char log[PATH_MAX];	/* its stderr */
	uint64_t n[3];		/* the counts at the last mark, by event id */
};

/* The moment between two sessions at which the probe's counts are taken:
 * bpftrace prints them when this function runs (its uprobe). Nothing hits
 * the probe meanwhile: no session takes a write. */
__attribute__((noinline, used)) void edges_mark(uint64_t k);
__attribute__((noinline, used)) void edges_mark(uint64_t k)
{
	__asm__ volatile("" : : "r"(k) : "memory");
}

static bool probe_start(struct probe *pr, const char *dir)
{
	char exe[PATH_MAX], script[2 * PATH_MAX + 512], *bt;
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	int fds[2];

	cr_assert_gt(n, 0);
	exe[n] = 0;
	snprintf(script, sizeof(script),
		 "usdt:%s:ringpipe:event /pid == %d/ { @n[arg2] = count(); }\n"
		 "uprobe:%s:edges_mark /pid == %d/ { printf(\"MARK %%d\\n\", arg0); print(@n); "
		 "printf(\"END\\n\"); }\n",
		 exe, (int)getpid(), exe, (int)getpid());
	bt = th_fmt("%s/edges.bt", dir);
	cr_assert_eq(th_write_file(bt, script, strlen(script)), 0);
	snprintf(pr->log, sizeof(pr->log), "%s/bpftrace.err", dir);
	cr_assert_eq(pipe(fds), 0);
	pr->pid = fork();
	cr_assert_geq(pr->pid, 0);
	if (pr->pid == 0) {
		char pid[16];
		int fe = open(pr->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		snprintf(pid, sizeof(pid), "%d", (int)getppid());
		dup2(fds[1], 1);
		dup2(fe, 2);
		close(fds[0]);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		execlp("bpftrace", "bpftrace", "-B", "line", "-p", pid, bt, (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	pr->out = fdopen(fds[0], "r");
	cr_assert_not_null(pr->out);
	/* poll() looks at the pipe: nothing may wait in stdio's buffer */
	setvbuf(pr->out, NULL, _IONBF, 0);
	free(bt);
	return true;
}

/* A line of bpftrace's, or NULL once it ended; fails past the deadline. */
static char *probe_line(struct probe *pr, char *buf, size_t len, uint64_t wait_ns)
{
	struct pollfd p = { .fd = fileno(pr->out), .events = POLLIN };
	int r = poll(&p, 1, (int)(wait_ns / 1000000));

	if (r == 0)
		return buf[0] = 0, buf;
	cr_assert_gt(r, 0);
	return fgets(buf, (int)len, pr->out);
}

/* Marks moment k and reads the counts bpftrace printed for it. With
 * retry, marks again until bpftrace answers (it is attaching). */
static void probe_mark(struct probe *pr, uint64_t k, bool retry)
{
	uint64_t t0 = rp_clock_mono_ns();
	char line[256], want[32];

	snprintf(want, sizeof(want), "MARK %" PRIu64 "\n", k);
	edges_mark(k);
	for (;;) {
		char *l = probe_line(pr, line, sizeof(line), 100000000ull);

		if (!l) {
			struct bytebuf b = { 0 };

			th_read_file(pr->log, &b);
			cr_assert_fail("bpftrace ended: %s", b.p ? (char *)b.p : "");
		}
		cr_assert_lt(rp_clock_mono_ns() - t0, DEADLINE_NS, "bpftrace never printed mark %" PRIu64, k);
		if (!line[0]) {		/* nothing for 100 ms */
			if (retry)
				edges_mark(k);
			continue;
		}
		if (!strcmp(line, want))
			break;
	}
	memset(pr->n, 0, sizeof(pr->n));
	for (;;) {
		unsigned int id;
		uint64_t v;
		char *l = probe_line(pr, line, sizeof(line), DEADLINE_NS);

		cr_assert(l && line[0], "bpftrace's counts for mark %" PRIu64 " were cut short", k);
		if (!strcmp(line, "END\n"))
			break;
		if (sscanf(line, "@n[%u]: %" SCNu64, &id, &v) == 2 && id < 3)
			pr->n[id] = v;
	}
}

static void probe_stop(struct probe *pr)
{
	if (pr->pid > 0) {
		kill(pr->pid, SIGINT);
		waitpid(pr->pid, NULL, 0);
	}
	if (pr->out)
		fclose(pr->out);
}

/* ---- the trace ----------------------------------------------------------- */

struct trace_counts {
	uint64_t ledger, flat;
	int64_t lost;
};

static struct trace_counts read_counts(const char *path)
{
	struct trace_counts t = { 0 };
	struct nt_reader *r = nt_reader_open(path);
	struct nt_rec rec;
	int err;

	cr_assert_not_null(r, "cannot open %s", path);
	while ((err = nt_reader_next(r, &rec)) > 0) {
		if (!strcmp(rec.meta->raw_name, "Ledger"))
			t.ledger++;
		else if (!strcmp(rec.meta->raw_name, "Flat"))
			t.flat++;
	}
	cr_assert_eq(err, 0, "%s: %s", path, nt_reader_errmsg(r));
	t.lost = nt_reader_lost(r);
	nt_reader_free(r);
	return t;
}

/* TraceEvent's counts of the same trace: the reference reader agrees. */
static void te_agrees(const char *dll, const char *path, const struct trace_counts *t)
{
	struct bytebuf out = { 0 };
	char *cmd = th_fmt("dotnet '%s' counts '%s'", dll, path);
	const char *txt;

	cr_assert_eq(th_run(cmd, &out), 0, "TraceEvent failed: %s", th_text(&out));
	txt = th_text(&out);
	cr_assert_eq(th_count_of(txt, "Test-Edges/Ledger"), t->ledger, "TraceEvent's Ledger count: %s",
		     txt);
	cr_assert_eq(th_count_of(txt, "Test-Edges/Flat"), t->flat, "TraceEvent's Flat count: %s", txt);
	cr_assert_eq(th_count_of(txt, "#lost"), (uint64_t)t->lost, "TraceEvent's EventsLost: %s", txt);
	bb_free(&out);
	free(cmd);
}

static const struct rp_field ledger_fields[] = {
	{ "Counter", RP_TYPE_U64, 0, 0, NULL },
	{ "Thread", RP_TYPE_U32, 0, 0, NULL },
	{ "Pad", RP_TYPE_U32, 0, 0, NULL },
};

Test(edges, writes_racing_start_and_stop_are_accounted_exactly, .timeout = 900)
{
	const char *why = NULL, *dll = th_tracedump(&why);
	char *dir = th_tmpdir(), *path;
	struct rp_provider_opts po = { .sz = sizeof(po), .name = "Test-Edges" };
	struct rp_provider *prov = rp_provider_new(&po);
	struct rp_event_opts lo = { .sz = sizeof(lo), .id = LEDGER_ID, .name = "Ledger",
				    .level = 4, .nfields = 3, .fields = ledger_fields };
	struct rp_event_opts fo = { .sz = sizeof(fo), .id = FLAT_ID, .name = "Flat", .level = 4 };
	struct rp_event *lev, *fev;
	struct rp_provider_config pc = { .name = "Test-Edges" };
	static struct writer w[NLEDGER + NFLAT];
	pthread_t th[NLEDGER + NFLAT];
	struct probe pr = { .pid = -1 };
	bool probing = th_has_bpf_privilege() && system("command -v bpftrace >/dev/null 2>&1") == 0;
	uint64_t drops = 0, none_total = 0, probe_prev[3] = { 0 };
	struct ledger before;
	int i, k;

	if (!probing) {
		if (th_require_interop())
			cr_assert_fail("RINGPIPE_REQUIRE_INTEROP=1 but bpftrace cannot run here (root "
				       "or CAP_BPF + CAP_PERFMON, and make deps, are needed)");
		cr_log_warn("bpftrace cannot run here (no privilege or not installed): the "
			    "probe's count is not checked, the writers' ledger is");
	}
	cr_assert_not_null(prov);
	lev = rp_event_new(prov, &lo);
	fev = rp_event_new(prov, &fo);
	cr_assert(lev && fev, "%s", rp_last_error());
	path = th_fmt("%s/edges.nettrace", dir);
	if (probing) {
		probe_start(&pr, dir);
		probe_mark(&pr, 0, true);
		memcpy(probe_prev, pr.n, sizeof(probe_prev));
	}
	for (i = 0; i < NLEDGER + NFLAT; i++) {
		w[i] = (struct writer){ .ev = i < NLEDGER ? lev : fev, .index = (uint32_t)i };
		cr_assert_eq(pthread_create(&th[i], NULL, i < NLEDGER ? ledger_main : flat_main,
					    &w[i]), 0);
	}
	/* a slow drainer: rings fill, Drop drops and Block parks */
	__atomic_store_n(&rp_drain_throttle_ns, 200000, __ATOMIC_RELAXED);
	quiet(w, NLEDGER);
	before = ledger_sum(w, NLEDGER);
	for (k = 1; k <= CYCLES; k++) {
		struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
					      .buffer_bytes = 1 << 20, .path = path,
					      .buffering = k % 2 ? RP_BUFFERING_DROP :
								   RP_BUFFERING_BLOCK };
		struct ledger after, d;
		struct trace_counts t;
		struct rp_session *s = rp_session_start(&so);
		uint64_t t0 = rp_clock_mono_ns();

		cr_assert_not_null(s, "session %d: %s", k, rp_last_error());
		/* the session sees writes (not a time: a count) */
		while (ledger_sum(w, NLEDGER).captured + ledger_sum(w, NLEDGER).dropped -
		       before.captured - before.dropped < PER_CYCLE)
			cr_assert_lt(rp_clock_mono_ns() - t0, DEADLINE_NS, "session %d saw no writes", k);
		cr_assert_eq(rp_session_stop(s), 0, "session %d", k);
		quiet(w, NLEDGER);
		after = ledger_sum(w, NLEDGER);
		d = (struct ledger){ after.captured - before.captured, after.dropped - before.dropped,
				     after.none - before.none, after.bad - before.bad };
		cr_assert_eq(d.bad, 0, "session %d: a write returned %d", k, w[0].bad_rc);
		t = read_counts(path);
		cr_assert_eq(t.ledger, d.captured,
			     "session %d (%s): %" PRIu64 " Ledger events in the trace, the writers "
			     "captured %" PRIu64 " (dropped %" PRIu64 ")", k, k % 2 ? "Drop" : "Block",
			     t.ledger, d.captured, d.dropped);
		cr_assert_geq((uint64_t)t.lost, d.dropped, "session %d: EventsLost %" PRId64
			      " < the ledger writers' drops %" PRIu64, k, t.lost, d.dropped);
		if (probing) {
			uint64_t pl, pf;

			probe_mark(&pr, (uint64_t)k, false);
			pl = pr.n[LEDGER_ID] - probe_prev[LEDGER_ID];
			pf = pr.n[FLAT_ID] - probe_prev[FLAT_ID];
			memcpy(probe_prev, pr.n, sizeof(probe_prev));
			cr_assert_eq(pl, d.captured + d.dropped,
				     "session %d: the probe saw %" PRIu64 " Ledger attempts, the "
				     "writers made %" PRIu64 " the session took", k, pl,
				     d.captured + d.dropped);
			cr_assert_eq(pl + pf, t.ledger + t.flat + (uint64_t)t.lost,
				     "session %d: the probe saw %" PRIu64 " attempts, the trace "
				     "holds %" PRIu64 " events and EventsLost %" PRId64, k, pl + pf,
				     t.ledger + t.flat, t.lost);
		}
		if (dll && k % TE_EVERY == 0)
			te_agrees(dll, path, &t);
		drops += (uint64_t)t.lost;
		none_total += d.none;
		before = after;
	}
	__atomic_store_n(&stop_writers, 1, __ATOMIC_RELAXED);
	for (i = 0; i < NLEDGER + NFLAT; i++)
		pthread_join(th[i], NULL);
	__atomic_store_n(&rp_drain_throttle_ns, 0, __ATOMIC_RELAXED);
	probe_stop(&pr);
	cr_log_info("%d sessions: %" PRIu64 " events lost in all, %" PRIu64 " writes no session "
		    "took", CYCLES, drops, none_total);
	/* the edges were crossed: writes between sessions, and losses */
	cr_assert_gt(none_total, 0, "no write ever found no session");
	cr_assert_gt(drops, 0, "no session lost anything: the rings never filled");
	if (!dll)
		cr_log_warn("TraceEvent not checked: %s", why);
	free(path);
	th_rmdir(dir);
}

/* ---- the demo's ledger against a trace collected over the IPC ----------- */

static uint64_t demo_traced(const char *out)
{
	struct bytebuf b = { 0 };
	const char *p;
	unsigned long long ticks = 0, traced = 0;

	cr_assert_eq(th_read_file(out, &b), 0);
	p = strstr(th_text(&b), "ticks ");
	cr_assert(p && sscanf(p, "ticks %llu traced %llu", &ticks, &traced) == 2,
		  "the demo printed no ledger: %s", th_text(&b));
	cr_assert_gt(traced, 0, "the demo traced nothing (%llu ticks)", ticks);
	bb_free(&b);
	return traced;
}

static uint64_t trace_ticks(const char *path)
{
	struct nt_reader *r = nt_reader_open(path);
	struct nt_rec rec;
	uint64_t n = 0;
	int err;

	cr_assert_not_null(r, "cannot open %s", path);
	while ((err = nt_reader_next(r, &rec)) > 0)
		if (!strcmp(rec.meta->provider, "Ringpipe-Demo") && !strcmp(rec.meta->raw_name, "Tick"))
			n++;
	cr_assert_eq(err, 0, "%s: %s", path, nt_reader_errmsg(r));
	nt_reader_free(r);
	return n;
}

static void demo_ledger_matches(const char *rundown)
{
	char *dir = th_tmpdir(), *path = th_fmt("%s/demo.nettrace", dir), *args;
	char *extra[] = { "--threads", "2", "--rate", "20000", NULL };
	struct bytebuf out = { 0 };
	struct th_demo d;
	uint64_t traced, in_trace;

	th_demo_start(&d, dir, extra);
	args = th_fmt("collect -p %d --providers Ringpipe-Demo --duration 2s --allow-loss %s -o '%s'", (int)d.pid,
		      rundown, path);
	cr_assert_eq(th_tool_run(args, &out), 0, "collect: %s", th_text(&out));
	th_demo_stop(&d);
	traced = demo_traced(d.out);
	in_trace = trace_ticks(path);
	cr_assert_eq(in_trace, traced, "the trace holds %" PRIu64 " Tick events, the demo says it "
		     "traced %" PRIu64 " (%s)", in_trace, traced, rundown[0] ? rundown : "rundown");
	bb_free(&out);
	free(args);
	free(path);
	th_rmdir(dir);
}

Test(edges, the_demos_ledger_equals_the_trace_with_rundown, .timeout = 120)
{
	demo_ledger_matches("");
}

Test(edges, the_demos_ledger_equals_the_trace_without_rundown, .timeout = 120)
{
	demo_ledger_matches("--no-rundown");
}
