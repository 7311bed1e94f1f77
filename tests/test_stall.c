// SPDX-License-Identifier: MIT
/*
 * Block waits while its reader lives (invariant 3, and 10: facts, not clocks;
 * Documentation/design.md). A Block session's writers give up only on what
 * the kernel says: the session stopped, its output failed, or the agent that
 * drains it is gone (its socket hung up). A process stopped with SIGSTOP, a
 * frozen cgroup, a CPU-throttled cgroup, a pipe reader that stops and resumes
 * and an agent stopped and resumed are slow readers, not dead ones: nothing
 * may be dropped for them, however long they take.
 *
 * Each case runs a write storm in a process of its own
 * (tests/progs/stall_producer.c: 3 writers into a 1 MiB Block session, or
 * the agent's), disturbs it once the writers are parking, lets it go on,
 * then has each writer make 100,000 more attempts and the session stop. It
 * asserts that every write returned 0, that the session counted no drop
 * (rp_session_stats(), or the agent's status), and that TraceEvent reads
 * every event of every writer exactly once: each writer's Seq runs 0, 1, 2,
 * ... with no gap or repeat, its count is the writes that returned 0, and
 * EventsLost is 0. Nothing is timed: the disturbances last what the cases'
 * names say, and the deadlines (minutes) only turn a hang into a failure.
 */
#include <dirent.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent_helpers.h"
#include "helpers.h"
#include "stall.h"

#define STORM_THREADS 3
#define AFTER_ATTEMPTS "100000"	/* each writer's attempts after the disturbance */
#define DEADLINE_MS 300000		/* turns a hang into a failure, no more */

enum stall_kind {
	STALL_SIGSTOP,		/* the producing process, whole */
	STALL_FREEZE,		/* its cgroup frozen */
	STALL_THROTTLE,		/* its cgroup at 5 % of a CPU */
	STALL_READER,		/* the reader of the pipe its trace goes to */
	STALL_AGENT,		/* the agent that drains it */
};

static const char *const kind_name[] = { "SIGSTOP of the process", "cgroup freeze",
					  "CPU throttle to 5 %", "pipe reader stopped",
					  "agent stopped" };

/* What a test started, undone by stall_fini(), also after an assertion
 * ended the test half-way. */
static struct {
	bool used;
	char *dir;
	struct stall_prod prod;
	pid_t reader;
	struct th_agent_env agent;
	char cg[512];
	bool frozen, throttled;
	enum stall_freezer freezer;
	enum stall_cpu cpu;
} cur;

static void cur_init(void)
{
	memset(&cur, 0, sizeof(cur));
	cur.used = true;
	cur.prod.report = cur.prod.control = -1;
}

/* The test's directory, made after the decisions to skip: a skip under
 * the TSan runner leaves without the fini. */
static void cur_dir(void)
{
	cur.dir = th_tmpdir();
	cr_assert_not_null(cur.dir, "no temporary directory: %s", strerror(errno));
}

static void stall_fini(void)
{
	if (!cur.used)
		return;
	/* a frozen or throttled producer dies slowly or not at all: free it */
	if (cur.frozen && stall_freeze(cur.freezer, cur.cg, false))
		fprintf(stderr, "test_stall: thawing %s: %s\n", cur.cg, stall_err);
	if (cur.throttled && stall_throttle(cur.cpu, cur.cg, 0))
		fprintf(stderr, "test_stall: unthrottling %s: %s\n", cur.cg, stall_err);
	stall_prod_kill(&cur.prod);
	if (cur.reader > 0)
		kill(cur.reader, SIGCONT);
	th_kill_wait(&cur.reader);
	if (cur.agent.agent > 0)
		kill(cur.agent.agent, SIGCONT);
	th_kill_wait(&cur.agent.agent);
	stall_cgroup_remove(cur.cg);
	if (cur.dir && !getenv("RINGPIPE_KEEP"))
		th_rmdir(cur.dir);
	else
		free(cur.dir);
	cur.dir = NULL;
	cur.used = false;
}

static const char *producer_bin(void)
{
	static char path[PATH_MAX];

	return stall_beside_exe("RINGPIPE_STALL_PRODUCER", "progs/stall_producer", path,
				sizeof(path));
}

/* ---- the disturbances' cgroups (root only) ---------------------------- */

static void need_root(const char *what)
{
	if (geteuid() != 0)
		cr_skip_test("%s needs root, to make a cgroup and move the producer into it", what);
}

/* A cgroup whose freezer works: cgroup v2's cgroup.freeze, else the v1
 * freezer; a skip when neither is there. */
static void freezer_cgroup(void)
{
	char mnt[256], file[PATH_MAX];

	need_root("freezing a cgroup");
	if (stall_cgroup_mount(true, NULL, mnt, sizeof(mnt))) {
		cr_assert_eq(stall_cgroup_make(mnt, cur.cg, sizeof(cur.cg)), 0, "%s", stall_err);
		snprintf(file, sizeof(file), "%s/cgroup.freeze", cur.cg);
		if (!access(file, W_OK)) {
			cur.freezer = STALL_FREEZER_V2;
			return;
		}
		stall_cgroup_remove(cur.cg);
	}
	if (stall_cgroup_mount(false, "freezer", mnt, sizeof(mnt))) {
		cr_assert_eq(stall_cgroup_make(mnt, cur.cg, sizeof(cur.cg)), 0, "%s", stall_err);
		cur.freezer = STALL_FREEZER_V1;
		return;
	}
	cr_skip_test("no cgroup freezer: no cgroup2 mount with cgroup.freeze (kernel 5.2 and "
		     "later) and no cgroup v1 freezer mount");
}

/* A cgroup whose CPU time can be limited: cgroup v2's cpu.max where the v2
 * root hands the cpu controller down, else cgroup v1's cpu controller. */
static void cpu_cgroup(void)
{
	char mnt[256];

	need_root("throttling a cgroup");
	if (stall_cgroup_mount(true, NULL, mnt, sizeof(mnt)) &&
	    stall_cgroup2_delegates(mnt, "cpu")) {
		cr_assert_eq(stall_cgroup_make(mnt, cur.cg, sizeof(cur.cg)), 0, "%s", stall_err);
		cur.cpu = STALL_CPU_V2;
		return;
	}
	if (stall_cgroup_mount(false, "cpu", mnt, sizeof(mnt))) {
		cr_assert_eq(stall_cgroup_make(mnt, cur.cg, sizeof(cur.cg)), 0, "%s", stall_err);
		cur.cpu = STALL_CPU_V1;
		return;
	}
	cr_skip_test("no CPU quota: the cpu controller is neither enabled in the cgroup2 root's "
		     "cgroup.subtree_control nor mounted as cgroup v1");
}

/* ---- the agent ---------------------------------------------------------- */

static void agent_up(void)
{
	char *more[] = { "--providers", "StallTest", "--buffering-mode", "block",
			 "--buffer-mb", "1", "--quiet", NULL };

	cur.agent.dir = cur.dir;
	cur.agent.out = th_fmt("%s/out", cur.dir);
	cur.agent.sock = th_fmt("%s/agent.sock", cur.dir);
	th_agent_up_argv(&cur.agent, more);
}

/* The trace the agent wrote for pid (its first join). */
static char *agent_trace_of(pid_t pid)
{
	char *pat = th_fmt("_%d_", (int)pid), *found = NULL;
	DIR *d = opendir(cur.agent.out);
	struct dirent *de;

	cr_assert_not_null(d, "the agent made no %s", cur.agent.out);
	while ((de = readdir(d)))
		if (strstr(de->d_name, pat) && strstr(de->d_name, ".nettrace") &&
		    de->d_name[0] != '.' && strncmp(de->d_name, "ringpipe-agent_", 15) &&
		    (!found || strlen(de->d_name) < strlen(strrchr(found, '/') + 1))) {
			free(found);
			found = th_fmt("%s/%s", cur.agent.out, de->d_name);
		}
	closedir(d);
	cr_assert_not_null(found, "no trace of pid %d in %s", (int)pid, cur.agent.out);
	return found;
}

/* What `ringpipe agent status` says of pid. */
static struct stall_agent_figures agent_figures_of(pid_t pid)
{
	struct stall_agent_figures f;
	struct bytebuf b = { 0 };

	cr_assert_eq(agent_status_query(cur.agent.sock, true, &b), 0,
		     "the agent does not answer its status after it was resumed");
	f = stall_agent_parse(th_text(&b), pid);
	if (!f.seen)
		fprintf(stderr, "test_stall: the agent's status has no pid %d: %s\n", (int)pid,
			th_text(&b));
	bb_free(&b);
	return f;
}

/* ---- TraceEvent's view -------------------------------------------------- */

struct te_view {
	int rc;			/* TraceDump's exit status: 0 read to the end */
	uint64_t lost, order_violations, events;
	uint64_t per_thread[STALL_MAX_THREADS];	/* the producer's writers, by index */
	char head[512];		/* the start of its output, for messages */
};

/* `TraceDump threads FILE Seq`: per pid/tid, the events with a Seq field
 * and whether each thread's Seq only grew; EventsLost. */
static struct te_view te_threads(const char *dll, const char *trace, pid_t pid,
				 const struct stall_result *r)
{
	struct te_view v = { 0 };
	struct bytebuf out = { 0 };
	int i;

	v.rc = th_run_fmt(&out, "dotnet '%s' threads '%s' Seq 2>&1", dll, trace);
	snprintf(v.head, sizeof(v.head), "%s", th_text(&out));
	v.lost = th_count_of(th_text(&out), "#lost");
	v.order_violations = th_count_of(th_text(&out), "#order_violations");
	for (i = 0; i < r->nthreads; i++) {
		char *key = th_fmt("%d/%d", (int)pid, r->thread[i].tid);

		v.per_thread[i] = th_count_of(th_text(&out), key);
		v.events += v.per_thread[i];
		free(key);
	}
	bb_free(&out);
	return v;
}

/* ---- one storm ---------------------------------------------------------- */

static void disturb(enum stall_kind kind, unsigned int ms)
{
	switch (kind) {
	case STALL_SIGSTOP:
		cr_assert_eq(stall_stop_for(cur.prod.pid, ms), 0, "%s", stall_err);
		break;
	case STALL_READER:
		cr_assert_eq(stall_stop_for(cur.reader, ms), 0, "%s", stall_err);
		break;
	case STALL_AGENT:
		cr_assert_eq(stall_stop_for(cur.agent.agent, ms), 0, "%s", stall_err);
		break;
	case STALL_FREEZE:
		cur.frozen = true;
		cr_assert_eq(stall_freeze(cur.freezer, cur.cg, true), 0, "%s", stall_err);
		stall_sleep_ms(ms);
		cr_assert_eq(stall_freeze(cur.freezer, cur.cg, false), 0, "%s", stall_err);
		cur.frozen = false;
		break;
	case STALL_THROTTLE:
		cur.throttled = true;
		cr_assert_eq(stall_throttle(cur.cpu, cur.cg, 5), 0, "%s", stall_err);
		stall_sleep_ms(ms);
		cr_assert_eq(stall_throttle(cur.cpu, cur.cg, 0), 0, "%s", stall_err);
		cur.throttled = false;
		break;
	}
}

static const char *const reason_name[] = { "full", "too_big", "no_session", "aborted", "alloc",
					    "output" };

static char *dropped_text(const struct stall_result *r)
{
	struct bytebuf b = { 0 };
	int i;

	if (!r->ndropped)
		return strdup("(the agent's)");
	for (i = 0; i < r->ndropped; i++)
		bb_printf(&b, "%s%s %" PRIu64, i ? ", " : "",
			  i < (int)(sizeof(reason_name) / sizeof(reason_name[0])) ? reason_name[i] :
										  "reason",
			  r->dropped[i]);
	bb_append(&b, "", 1);
	return (char *)b.p;
}

static void storm(enum stall_kind kind, unsigned int ms)
{
	TH_NEED_TRACEDUMP(dll);
	struct stall_prod_opts o = { .bin = producer_bin(), .threads = STORM_THREADS,
				     .out_fd = -1 };
	struct stall_agent_figures af = { 0 };
	struct stall_result r;
	struct te_view te;
	int fds[2] = { -1, -1 }, i;
	char line[256], *trace, *drops;
	uint64_t dropped = 0;
	pid_t pid;

	cur_init();
	if (kind == STALL_FREEZE)
		freezer_cgroup();
	if (kind == STALL_THROTTLE)
		cpu_cgroup();
	cur_dir();
	trace = th_fmt("%s/stall.nettrace", cur.dir);
	o.log = th_fmt("%s/producer.log", cur.dir);
	o.output = trace;
	if (kind == STALL_FREEZE || kind == STALL_THROTTLE)
		o.cgroups[0] = cur.cg;
	if (kind == STALL_READER) {
		cr_assert_eq(pipe2(fds, O_CLOEXEC), 0, "pipe: %s", strerror(errno));
		cur.reader = stall_reader_start(fds[0], trace);
		cr_assert_gt(cur.reader, 0, "fork: %s", strerror(errno));
		close(fds[0]);
		o.output = "-";
		o.out_fd = fds[1];
	}
	if (kind == STALL_AGENT) {
		agent_up();
		o.output = NULL;
		o.agent_sock = cur.agent.sock;
	}
	cr_assert_eq(stall_prod_start(&cur.prod, &o), 0, "%s", stall_err);
	pid = cur.prod.pid;
	if (fds[1] >= 0)
		close(fds[1]);	/* the reader sees the end once the producer exits */
	cr_assert_eq(stall_prod_expect(&cur.prod, "writing", line, sizeof(line), DEADLINE_MS), 0,
		     "the storm never started: %s", stall_err);

	disturb(kind, ms);

	/* not checked: writers that reached their bound (--max) have ended,
	 * and their figures below say so */
	stall_prod_send(&cur.prod, "finish " AFTER_ATTEMPTS "\n");
	cr_assert_eq(stall_prod_result(&cur.prod, &r, DEADLINE_MS), 0,
		     "the storm did not end after the %s: %s", kind_name[kind], stall_err);
	cr_assert_eq(stall_prod_wait(&cur.prod, DEADLINE_MS), 0, "%s", stall_err);
	if (kind == STALL_READER) {
		int st = 0;

		cr_assert_eq(waitpid(cur.reader, &st, 0), cur.reader);
		cur.reader = 0;
		cr_assert(WIFEXITED(st) && !WEXITSTATUS(st), "the pipe's reader ended: 0x%x", st);
	}
	if (kind == STALL_AGENT) {
		af = agent_figures_of(pid);
		cr_assert_eq(th_agent_down(&cur.agent), 0, "the agent did not stop cleanly");
		trace = agent_trace_of(pid);
	}
	for (i = 0; i < r.ndropped; i++)
		dropped += r.dropped[i];
	te = te_threads(dll, trace, pid, &r);

	drops = dropped_text(&r);
	fprintf(stderr, "test_stall: %s, %u ms: writes %" PRIu64 ", returned 0 %" PRIu64
		", errors %" PRIu64 " (-ENOBUFS %" PRIu64 ", other %" PRIu64 ", last %d); "
		"dropped: %s; stop %d; agent: events %" PRIu64 " lost %" PRIu64 " (full %" PRIu64
		", aborted %" PRIu64 "); TraceEvent: exit %d, events %" PRIu64 ", EventsLost %"
		PRIu64 ", order violations %" PRIu64 "; waits %" PRIu64 " (%" PRIu64 " ms in all, "
		"longest %" PRIu64 " ms)\n", kind_name[kind], ms, r.ok + r.failed, r.ok, r.failed,
		r.enobufs, r.other, r.other_rc, drops, r.stop_rc, af.events, af.lost, af.lost_full,
		af.lost_aborted, te.rc, te.events, te.lost, te.order_violations, r.waits,
		r.wait_ns / 1000000, r.wait_max_ns / 1000000);

	cr_assert_eq(r.nthreads, STORM_THREADS, "%d writers reported, not %d", r.nthreads,
		     STORM_THREADS);
	cr_assert_eq(r.failed, 0, "%s for %u ms: every Block write returns 0, but %" PRIu64
		     " of %" PRIu64 " returned an error (-ENOBUFS %" PRIu64 ", other %" PRIu64
		     "); the session's drops: %s", kind_name[kind], ms, r.failed, r.ok + r.failed,
		     r.enobufs, r.other, drops);
	if (kind == STALL_AGENT) {
		cr_assert(af.seen, "the agent's status does not show pid %d", (int)pid);
		cr_assert_eq(af.lost, 0, "the agent counted %" PRIu64 " lost (full %" PRIu64
			     ", aborted %" PRIu64 "), expected none", af.lost, af.lost_full,
			     af.lost_aborted);
		cr_assert_eq(af.corrupt, 0, "the agent counted %" PRIu64 " corrupt records",
			     af.corrupt);
		cr_assert_geq(af.events, r.ok, "the agent wrote %" PRIu64 " events of the %" PRIu64
			      " writes that returned 0", af.events, r.ok);
	} else {
		cr_assert_eq(dropped, 0, "%s for %u ms: the session counted drops (%s), expected "
			     "none", kind_name[kind], ms, drops);
		cr_assert_eq(r.stop_rc, 0, "rp_session_stop() returned %d", r.stop_rc);
	}
	cr_assert_eq(te.rc, 0, "TraceEvent does not read the trace to its end (exit %d): %s",
		     te.rc, te.head);
	cr_assert_eq(te.lost, 0, "TraceEvent counts EventsLost %" PRIu64 ", expected 0", te.lost);
	cr_assert_eq(te.order_violations, 0, "a writer's Seq went back or repeated %" PRIu64
		     " times in TraceEvent's view", te.order_violations);
	for (i = 0; i < r.nthreads; i++)
		cr_assert_eq(te.per_thread[i], r.thread[i].ok, "writer %d (tid %d): %" PRIu64
			     " events in the trace, %" PRIu64 " writes returned 0 and %" PRIu64
			     " did not", i, r.thread[i].tid, te.per_thread[i], r.thread[i].ok,
			     r.thread[i].failed);
	free(drops);
}

/* 1. The producing process stopped whole, drainer and writers alike: when
 * it goes on, its writers find a drainer that has not run for that long. */
Test(stall, a_process_stopped_for_half_a_second_loses_nothing, .timeout = 900,
     .fini = stall_fini)
{
	storm(STALL_SIGSTOP, 500);
}

Test(stall, a_process_stopped_for_2_s_loses_nothing, .timeout = 900, .fini = stall_fini)
{
	storm(STALL_SIGSTOP, 2000);
}

Test(stall, a_process_stopped_for_10_s_loses_nothing, .timeout = 900, .fini = stall_fini)
{
	storm(STALL_SIGSTOP, 10000);
}

/* 2. The producer's cgroup frozen (docker pause, a Kubernetes freeze). */
Test(stall, a_cgroup_frozen_for_5_s_loses_nothing, .timeout = 900, .fini = stall_fini)
{
	storm(STALL_FREEZE, 5000);
}

/* 3. The producer's cgroup at its CPU limit: the drainer runs 5 ms in
 * every 100, as in a pod throttled at its quota. */
Test(stall, a_cgroup_throttled_to_5_percent_of_a_cpu_for_10_s_loses_nothing, .timeout = 900,
     .fini = stall_fini)
{
	storm(STALL_THROTTLE, 10000);
}

/* 4. The trace goes to a pipe whose reader stops and then reads again:
 * the drainer waits in its write for as long. */
Test(stall, a_pipe_reader_stopped_for_10_s_loses_nothing, .timeout = 900, .fini = stall_fini)
{
	storm(STALL_READER, 10000);
}

/* 5. The agent that drains the process stopped and resumed: its socket is
 * still open, it is alive. */
Test(stall, an_agent_stopped_for_10_s_loses_nothing, .timeout = 900, .fini = stall_fini)
{
	storm(STALL_AGENT, 10000);
}

/*
 * 6. The opposite: an agent that is killed is gone (its socket hangs up),
 * and the writers parked on it leave at once, each give-up counted, instead
 * of waiting for an agent that cannot come back. The agent is stopped first,
 * so that every writer is parked when it dies (the producer says so once
 * each has sat in one write, with no attempt finishing, for 200 ms); no new
 * agent starts, so writers that come back were released by the death alone.
 */
Test(stall, a_killed_agent_releases_its_parked_writers_counted, .timeout = 900,
     .fini = stall_fini)
{
	struct stall_prod_opts o = { .bin = producer_bin(), .threads = STORM_THREADS,
				     .out_fd = -1 };
	struct stall_result r;
	char line[256];
	int i;

	cur_init();
	cur_dir();
	agent_up();
	o.log = th_fmt("%s/producer.log", cur.dir);
	o.agent_sock = cur.agent.sock;
	cr_assert_eq(stall_prod_start(&cur.prod, &o), 0, "%s", stall_err);
	cr_assert_eq(stall_prod_expect(&cur.prod, "writing", line, sizeof(line), DEADLINE_MS), 0,
		     "the storm never started: %s", stall_err);
	cr_assert_eq(kill(cur.agent.agent, SIGSTOP), 0);
	cr_assert_eq(stall_prod_send(&cur.prod, "parked?\n"), 0, "%s", stall_err);
	cr_assert_eq(stall_prod_expect(&cur.prod, "parked", line, sizeof(line), DEADLINE_MS), 0,
		     "the writers never all waited for the stopped agent: %s", stall_err);
	th_kill_wait(&cur.agent.agent);
	cr_assert_eq(stall_prod_send(&cur.prod, "finish 1000\n"), 0, "%s", stall_err);
	cr_assert_eq(stall_prod_result(&cur.prod, &r, DEADLINE_MS), 0,
		     "the writers parked on a killed agent never came back: %s", stall_err);
	cr_assert_eq(stall_prod_wait(&cur.prod, DEADLINE_MS), 0, "%s", stall_err);
	fprintf(stderr, "test_stall: killed agent: writes %" PRIu64 ", returned 0 %" PRIu64
		", errors %" PRIu64 " (-ENOBUFS %" PRIu64 ", other %" PRIu64 ", last %d)\n",
		r.ok + r.failed, r.ok, r.failed, r.enobufs, r.other, r.other_rc);
	cr_assert_eq(r.nthreads, STORM_THREADS, "%d writers reported, not %d", r.nthreads,
		     STORM_THREADS);
	for (i = 0; i < r.nthreads; i++)
		cr_assert_geq(r.thread[i].failed, 1, "writer %d was parked when the agent died, "
			      "yet none of its writes gave up (it returned %" PRIu64 " times "
			      "with 0)", i, r.thread[i].ok);
	cr_assert_eq(r.other, 0, "a give-up is a drop, -ENOBUFS; %" PRIu64 " writes returned "
		     "something else (last %d)", r.other, r.other_rc);
	cr_assert_eq(r.enobufs, r.failed, "every error counted: -ENOBUFS %" PRIu64 " of %" PRIu64,
		     r.enobufs, r.failed);
}
