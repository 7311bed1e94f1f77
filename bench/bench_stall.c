// SPDX-License-Identifier: MIT
/*
 * The Block stall table of `make bench`: Block sessions whose reader stalls.
 *
 *   bench_stall [--quick] [--verbose] [--only sigstop|freeze|throttle|reader|agent]
 *
 * The write storm of test_stall (tests/progs/stall_producer.c: 3 writer
 * threads in a process of their own, a 1 MiB Block session) is disturbed
 * the ways test_stall disturbs it, for 0.5, 2 and 10 s (2 s alone with
 * --quick): the process stopped with SIGSTOP, its cgroup frozen, its cgroup
 * throttled to 5 % of a CPU, the reader of the pipe its trace goes to
 * stopped, the agent that drains it stopped. Then each writer makes 100,000
 * more attempts and the session stops. Per row:
 *
 *   - drops: what the session counted (rp_session_stats() before the stop,
 *     or the agent's status), by reason;
 *   - events in the trace, read back with the library's reader, of the
 *     writes attempted, and the trace's EventsLost;
 *   - how long the writers waited: the writes that took over 20 us (a
 *     park, or a preemption inside a write), timed by the writers around
 *     rp_event_write(), added up over the 3 writers, and the longest;
 *   - catch-up: from the end of the disturbance (SIGCONT, the thaw, the
 *     quota lifted) until the drainer has written as many events as the
 *     writers had written by then (rp_session_stats()' events_written, or
 *     the agent's count of the process's events, looked at every ms).
 *
 * --only runs the rows of one stall kind. The cgroup rows need root; a row
 * that cannot run says why in its cells. Progress and, with --verbose, each
 * run's figures go to stderr. Exits 1 when a row could not be measured, not
 * when one dropped: test_stall judges, this only measures.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/agent.h"
#include "bytebuf.h"
#include "nettrace_read.h"
#include "../tests/stall.h"

#define THREADS 3
#define DEADLINE_MS 300000	/* turns a hang into a failed row, no more */

enum kind { K_SIGSTOP, K_FREEZE, K_THROTTLE, K_READER, K_AGENT, NKINDS };

static const char *const kind_name[NKINDS] = {
	"SIGSTOP of the process", "cgroup freeze", "CPU throttle to 5 %",
	"pipe reader stopped", "agent stopped",
};

static const char *const kind_key[NKINDS] = { "sigstop", "freeze", "throttle", "reader",
					      "agent" };

static const char *const reason_name[] = { "full", "too big", "no session", "aborted", "alloc",
					    "output" };

static bool verbose;

struct row {
	enum kind kind;
	unsigned int ms;
	char why[300];			/* not empty: not measured, and why */
	struct stall_result r;
	struct stall_agent_figures af;
	uint64_t in_trace;
	int64_t lost;
	uint64_t catchup_ns;
};

/* What one run started, undone whatever happened. */
struct run {
	char dir[256];
	struct stall_prod prod;
	pid_t reader, agent;
	char sock[300], out[300];
	char cg[512];
	bool frozen, throttled;
	enum stall_freezer freezer;
	enum stall_cpu cpu;
};

static void run_undo(struct run *u)
{
	if (u->frozen)
		stall_freeze(u->freezer, u->cg, false);
	if (u->throttled)
		stall_throttle(u->cpu, u->cg, 0);
	stall_prod_kill(&u->prod);
	if (u->reader > 0) {
		kill(u->reader, SIGKILL);
		kill(u->reader, SIGCONT);
		waitpid(u->reader, NULL, 0);
	}
	if (u->agent > 0) {
		kill(u->agent, SIGKILL);
		kill(u->agent, SIGCONT);
		waitpid(u->agent, NULL, 0);
	}
	stall_cgroup_remove(u->cg);
	if (u->dir[0] && !getenv("RINGPIPE_KEEP")) {
		char cmd[PATH_MAX + 16];

		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", u->dir);
		if (system(cmd) == -1)
			perror("rm");
	}
}

static int freezer_cgroup(struct run *u)
{
	char mnt[256], file[PATH_MAX];

	if (geteuid() != 0)
		return stall_fail(-EPERM, "needs root (a cgroup to freeze)");
	if (stall_cgroup_mount(true, NULL, mnt, sizeof(mnt))) {
		if (stall_cgroup_make(mnt, u->cg, sizeof(u->cg)))
			return -1;
		snprintf(file, sizeof(file), "%s/cgroup.freeze", u->cg);
		if (!access(file, W_OK)) {
			u->freezer = STALL_FREEZER_V2;
			return 0;
		}
		stall_cgroup_remove(u->cg);
	}
	if (stall_cgroup_mount(false, "freezer", mnt, sizeof(mnt))) {
		u->freezer = STALL_FREEZER_V1;
		return stall_cgroup_make(mnt, u->cg, sizeof(u->cg));
	}
	return stall_fail(-ENOENT, "no cgroup freezer (v2 cgroup.freeze or a v1 freezer mount)");
}

static int cpu_cgroup(struct run *u)
{
	char mnt[256];

	if (geteuid() != 0)
		return stall_fail(-EPERM, "needs root (a cgroup to throttle)");
	if (stall_cgroup_mount(true, NULL, mnt, sizeof(mnt)) &&
	    stall_cgroup2_delegates(mnt, "cpu")) {
		u->cpu = STALL_CPU_V2;
		return stall_cgroup_make(mnt, u->cg, sizeof(u->cg));
	}
	if (stall_cgroup_mount(false, "cpu", mnt, sizeof(mnt))) {
		u->cpu = STALL_CPU_V1;
		return stall_cgroup_make(mnt, u->cg, sizeof(u->cg));
	}
	return stall_fail(-ENOENT, "no cpu controller (on cgroup v2 or v1)");
}

static int agent_status(struct run *u, struct bytebuf *b)
{
	b->len = 0;
	return agent_status_query(u->sock, true, b);
}

/* `ringpipe agent` on a socket of this run's own, until it answers. */
static int agent_up(struct run *u)
{
	char path[PATH_MAX], log[PATH_MAX + 16];
	const char *tool = stall_beside_exe("RINGPIPE_TOOL", "../ringpipe", path, sizeof(path));
	struct bytebuf b = { 0 };
	uint64_t end = stall_now_ns() + 30000000000ull;

	snprintf(u->sock, sizeof(u->sock), "%s/agent.sock", u->dir);
	snprintf(u->out, sizeof(u->out), "%s/out", u->dir);
	snprintf(log, sizeof(log), "%s/agent.log", u->dir);
	u->agent = fork();
	if (u->agent < 0)
		return stall_fail(-errno, "fork: %s", strerror(errno));
	if (u->agent == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execl(tool, tool, "agent", "--socket", u->sock, "--output-dir", u->out,
		      "--providers", "StallTest", "--buffering-mode", "block", "--buffer-mb", "1",
		      "--quiet", (char *)NULL);
		_exit(127);
	}
	while (agent_status(u, &b)) {
		if (stall_now_ns() > end || waitpid(u->agent, NULL, WNOHANG) != 0) {
			bb_free(&b);
			return stall_fail(-ETIMEDOUT, "%s agent did not come up (see %s)", tool,
					  log);
		}
		stall_sleep_ms(10);
	}
	bb_free(&b);
	return 0;
}

static int agent_down(struct run *u)
{
	int st = 0;

	kill(u->agent, SIGTERM);
	waitpid(u->agent, &st, 0);
	u->agent = 0;
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		return stall_fail(-ECHILD, "the agent ended with status 0x%x", st);
	return 0;
}

/* The agent's trace of pid (its first join) into path. */
static int agent_trace(struct run *u, pid_t pid, char *path, size_t len)
{
	char pat[32];
	DIR *d = opendir(u->out);
	struct dirent *de;
	size_t best = SIZE_MAX;

	if (!d)
		return stall_fail(-errno, "opendir %s: %s", u->out, strerror(errno));
	snprintf(pat, sizeof(pat), "_%d_", (int)pid);
	while ((de = readdir(d)))
		if (strstr(de->d_name, pat) && strstr(de->d_name, ".nettrace") &&
		    de->d_name[0] != '.' && strncmp(de->d_name, "ringpipe-agent_", 15) &&
		    strlen(de->d_name) < best) {
			best = strlen(de->d_name);
			snprintf(path, len, "%s/%s", u->out, de->d_name);
		}
	closedir(d);
	return best == SIZE_MAX ? stall_fail(-ENOENT, "no trace of pid %d in %s", (int)pid,
					     u->out) : 0;
}

/* The storm's events in the trace, and its EventsLost. */
static int count_trace(const char *path, struct row *row)
{
	struct nt_reader *r = nt_reader_open(path);
	struct nt_rec rec;
	int rc;

	if (!r)
		return stall_fail(-errno, "%s does not open: %s", path, strerror(errno));
	while ((rc = nt_reader_next(r, &rec)) > 0)
		if (!strcmp(rec.meta->provider, "StallTest") && !strcmp(rec.meta->name, "Tick"))
			row->in_trace++;
	row->lost = nt_reader_lost(r);
	if (rc < 0)
		stall_fail(rc, "%s: %s", path, nt_reader_errmsg(r));
	nt_reader_free(r);
	return rc;
}

static int disturb(struct run *u, const struct row *row)
{
	int err;

	switch (row->kind) {
	case K_SIGSTOP:
		return stall_stop_for(u->prod.pid, row->ms);
	case K_READER:
		return stall_stop_for(u->reader, row->ms);
	case K_AGENT:
		return stall_stop_for(u->agent, row->ms);
	case K_FREEZE:
		u->frozen = true;
		err = stall_freeze(u->freezer, u->cg, true);
		if (err)
			return err;
		stall_sleep_ms(row->ms);
		err = stall_freeze(u->freezer, u->cg, false);
		u->frozen = err != 0;
		return err;
	case K_THROTTLE:
		u->throttled = true;
		err = stall_throttle(u->cpu, u->cg, 5);
		if (err)
			return err;
		stall_sleep_ms(row->ms);
		err = stall_throttle(u->cpu, u->cg, 0);
		u->throttled = err != 0;
		return err;
	default:
		return -EINVAL;
	}
}

/* From the end of the disturbance until the drainer wrote what the writers
 * had written by then. */
static int catch_up(struct run *u, struct row *row, uint64_t t_resume)
{
	char line[256];
	uint64_t at;
	int err = stall_prod_send(&u->prod, "resumed\n");

	if (!err)
		err = stall_prod_expect(&u->prod, "resumed at=", line, sizeof(line), DEADLINE_MS);
	if (err)
		return err;
	at = strtoull(line + 11, NULL, 10);
	if (row->kind != K_AGENT) {
		err = stall_prod_expect(&u->prod, "caught-up ", line, sizeof(line), DEADLINE_MS);
		row->catchup_ns = stall_now_ns() - t_resume;
		return err;
	}
	for (;;) {
		struct bytebuf b = { 0 };
		struct stall_agent_figures f;

		err = agent_status(u, &b);
		f = stall_agent_parse(b.p ? (const char *)b.p : "", u->prod.pid);
		bb_free(&b);
		if (err)
			return stall_fail(err, "the agent's status: %s", strerror(-err));
		if (f.seen && f.events != UINT64_MAX && f.events >= at)
			break;
		if (stall_now_ns() - t_resume > (uint64_t)DEADLINE_MS * 1000000)
			return stall_fail(-ETIMEDOUT, "the agent never wrote %" PRIu64 " events",
					  at);
		stall_sleep_ms(1);
	}
	row->catchup_ns = stall_now_ns() - t_resume;
	return 0;
}

static int run_row(struct run *u, struct row *row)
{
	char bin[PATH_MAX], trace[PATH_MAX], log[PATH_MAX], line[256];
	struct stall_prod_opts o = { .bin = stall_beside_exe("RINGPIPE_STALL_PRODUCER",
							      "../tests/progs/stall_producer", bin,
							      sizeof(bin)),
				     .threads = THREADS, .out_fd = -1 };
	const char *td = getenv("TMPDIR");
	int fds[2] = { -1, -1 }, err;
	pid_t pid;

	snprintf(u->dir, sizeof(u->dir), "%s/bench_stall.XXXXXX", td && *td ? td : "/tmp");
	if (!mkdtemp(u->dir))
		return stall_fail(-errno, "mkdtemp %s: %s", u->dir, strerror(errno));
	snprintf(trace, sizeof(trace), "%s/stall.nettrace", u->dir);
	snprintf(log, sizeof(log), "%s/producer.log", u->dir);
	o.output = trace;
	o.log = log;
	if ((row->kind == K_FREEZE && freezer_cgroup(u)) ||
	    (row->kind == K_THROTTLE && cpu_cgroup(u)))
		return -1;
	o.cgroups[0] = u->cg[0] ? u->cg : NULL;
	if (row->kind == K_READER) {
		if (pipe2(fds, O_CLOEXEC))
			return stall_fail(-errno, "pipe: %s", strerror(errno));
		u->reader = stall_reader_start(fds[0], trace);
		close(fds[0]);
		o.output = "-";
		o.out_fd = fds[1];
	}
	if (row->kind == K_AGENT) {
		if (agent_up(u))
			return -1;
		o.output = NULL;
		o.agent_sock = u->sock;
	}
	err = stall_prod_start(&u->prod, &o);
	if (fds[1] >= 0)
		close(fds[1]);
	if (err)
		return err;
	pid = u->prod.pid;
	err = stall_prod_expect(&u->prod, "writing", line, sizeof(line), DEADLINE_MS);
	if (!err)
		err = disturb(u, row);
	if (!err)
		err = catch_up(u, row, stall_now_ns());
	if (!err)
		err = stall_prod_send(&u->prod, "finish 100000\n");
	if (!err)
		err = stall_prod_result(&u->prod, &row->r, DEADLINE_MS);
	if (!err)
		err = stall_prod_wait(&u->prod, DEADLINE_MS);
	if (err)
		return err;
	if (row->kind == K_READER) {
		waitpid(u->reader, NULL, 0);
		u->reader = 0;
	}
	if (row->kind == K_AGENT) {
		struct bytebuf b = { 0 };

		err = agent_status(u, &b);
		row->af = stall_agent_parse(b.p ? (const char *)b.p : "", pid);
		bb_free(&b);
		if (!err)
			err = agent_down(u);
		if (!err)
			err = agent_trace(u, pid, trace, sizeof(trace));
		if (err)
			return err;
	}
	return count_trace(trace, row);
}

/* ---- the table ---------------------------------------------------------- */

/* n with thousands separators, in one of four rotating buffers. */
static const char *num(uint64_t n)
{
	static char bufs[8][32];
	static int k;
	char tmp[32], *out = bufs[k++ % 8];
	int len = snprintf(tmp, sizeof(tmp), "%" PRIu64, n), i, j = 0;

	for (i = 0; i < len; i++) {
		if (i && (len - i) % 3 == 0)
			out[j++] = ',';
		out[j++] = tmp[i];
	}
	out[j] = 0;
	return out;
}

static uint64_t drops_of(const struct row *row)
{
	uint64_t n = 0;
	int i;

	if (row->kind == K_AGENT)
		return row->af.seen && row->af.lost != UINT64_MAX ? row->af.lost : 0;
	for (i = 0; i < row->r.ndropped; i++)
		n += row->r.dropped[i];
	return n;
}

static void drops_cell(const struct row *row, char *out, size_t len)
{
	size_t n = (size_t)snprintf(out, len, "%s", num(drops_of(row)));
	int i;

	if (row->kind == K_AGENT) {
		if (row->af.lost_aborted && row->af.lost_aborted != UINT64_MAX)
			snprintf(out + n, len - n, " (aborted %s)", num(row->af.lost_aborted));
		return;
	}
	for (i = 0; i < row->r.ndropped && n < len; i++) {
		const char *why = i < (int)(sizeof(reason_name) / sizeof(*reason_name)) ?
					  reason_name[i] : "other";

		if (row->r.dropped[i])
			n += (size_t)snprintf(out + n, len - n, " (%s %s)", why,
					      num(row->r.dropped[i]));
	}
}

static void print_row(const struct row *row)
{
	uint64_t attempted = row->r.ok + row->r.failed;
	char drops[160], failed[64] = "";

	if (row->why[0]) {
		printf("| %s | %.1f s | not measured: %s | — | — | — |\n",
		       kind_name[row->kind], row->ms / 1000.0, row->why);
		return;
	}
	drops_cell(row, drops, sizeof(drops));
	/* the writers' own count, where it is not the session's */
	if (row->r.failed != drops_of(row))
		snprintf(failed, sizeof(failed), "; writes that failed: %s", num(row->r.failed));
	printf("| %s | %.1f s | %s%s | %s of %s (%.2f %%); EventsLost %s | %.2f s, longest "
	       "%.2f s | %.1f ms |\n",
	       kind_name[row->kind], row->ms / 1000.0, drops, failed,
	       num(row->in_trace), num(attempted),
	       attempted ? 100.0 * (double)row->in_trace / (double)attempted : 0.0,
	       num((uint64_t)(row->lost > 0 ? row->lost : 0)), row->r.wait_ns / 1e9,
	       row->r.wait_max_ns / 1e9, row->catchup_ns / 1e6);
}

int main(int argc, char **argv)
{
	static const unsigned int full_ms[] = { 500, 2000, 10000 }, quick_ms[] = { 2000 };
	const unsigned int *ms = full_ms;
	size_t nms = 3, i, k, nrows = 0, bad = 0;
	struct row rows[NKINDS * 3];
	bool quick = false, unmeasured = false;
	int only = -1;
	uint64_t t0 = stall_now_ns();
	char load[64] = "";
	int a;

	for (a = 1; a < argc; a++) {
		if (!strcmp(argv[a], "--quick")) {
			quick = true;
		} else if (!strcmp(argv[a], "--verbose")) {
			verbose = true;
		} else if (!strcmp(argv[a], "--only") && a + 1 < argc) {
			for (only = 0; only < NKINDS && strcmp(kind_key[only], argv[a + 1]); only++)
				;
			a++;
		} else {
			only = NKINDS;
		}
		if (only == NKINDS) {
			fprintf(stderr, "usage: %s [--quick] [--verbose] "
				"[--only sigstop|freeze|throttle|reader|agent]\n", argv[0]);
			return 2;
		}
	}
	if (quick) {
		ms = quick_ms;
		nms = 1;
	}
	stall_read_file("/proc/loadavg", load, sizeof(load));
	*strchrnul(load, ' ') = 0;
	for (k = 0; k < NKINDS; k++)
		for (i = 0; i < nms && (only < 0 || (size_t)only == k); i++) {
			struct row *row = &rows[nrows++];
			struct run u = { .prod = { .report = -1, .control = -1 } };

			memset(row, 0, sizeof(*row));
			row->kind = (enum kind)k;
			row->ms = ms[i];
			fprintf(stderr, "bench_stall: %s for %u ms ...\n", kind_name[k], ms[i]);
			stall_err[0] = 0;
			if (run_row(&u, row)) {
				snprintf(row->why, sizeof(row->why), "%s",
					 stall_err[0] ? stall_err : "failed");
				unmeasured = true;
			}
			run_undo(&u);
			if (verbose && !row->why[0])
				fprintf(stderr, "bench_stall:   writes %" PRIu64 " ok %" PRIu64
					" failed %" PRIu64 " waits %" PRIu64 " trace %" PRIu64
					" lost %" PRId64 " catch-up %" PRIu64 " ns\n",
					row->r.ok + row->r.failed, row->r.ok, row->r.failed,
					row->r.waits, row->in_trace, row->lost, row->catchup_ns);
		}

	printf("\n### The Block stall table (bench_stall%s)\n\n", quick ? " --quick" : "");
	printf("%.0f s, load average %s at the start, %ld CPUs. A process of its own "
	       "(tests/progs/stall_producer) writes from %d threads as fast as it can into a "
	       "1 MiB Block session (its own drainer, to a file or a pipe, or the agent's); once "
	       "they park, the stall, then 100,000 more writes each and stop. Drops: the "
	       "session's count (rp_session_stats(), or the agent's status), by reason. Waits: "
	       "the writes that took over 20 us, timed by the writers, over all %d. Catch-up: "
	       "from the end of the stall until the drainer had written what the writers had "
	       "written by then.\n\n",
	       (stall_now_ns() - t0) / 1e9, load, sysconf(_SC_NPROCESSORS_ONLN), THREADS, THREADS);
	printf("| stall | for | drops | events in the trace, of writes | writers waited (all, "
	       "longest) | catch-up after it |\n|---|---|---|---|---|---|\n");
	for (i = 0; i < nrows; i++) {
		print_row(&rows[i]);
		if (!rows[i].why[0] && (drops_of(&rows[i]) || rows[i].r.failed ||
					rows[i].in_trace != rows[i].r.ok + rows[i].r.failed))
			bad++;
	}
	printf("\n- Block waits while its reader lives (no drop, every write in the trace): %s\n",
	       bad ? "**missed**" : "met");
	return unmeasured ? 1 : 0;
}
