// SPDX-License-Identifier: MIT
/*
 * The agent's ClickHouse egress end to end (egress/egress.c): a real
 * clickhouse-server on loopback (clickhouse_node.h), a real `ringpipe
 * agent --clickhouse`, real producers (agent_producer.c) on the host and in
 * a kubepods-style container. Every count is what the programs said they
 * wrote, held against the rows in ClickHouse, against the agent's own
 * nettrace files, and against `ringpipe fleet check`. Without the server
 * these tests skip, with the reason, unless RINGPIPE_REQUIRE_FLEET=1.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>

#include "agent_helpers.h"
#include "fleet/clickhouse.h"
#include "clickhouse_node.h"
#include "fleet/fleet_export.h"
#include "helpers.h"
#include "host/identity.h"
#include "nettrace_read.h"

#define MAX_AGENTS 2

static struct th_ch_node node;
static struct th_agent_env agents[MAX_AGENTS];
static pid_t started[4];	/* producers a test started */
static char *made_cgroup;

/* Whatever a test started goes, also when an assertion ended it early */
static void egress_fini(void)
{
	size_t i;

	th_kill_started(started, 4);
	for (i = 0; i < MAX_AGENTS; i++)
		th_agent_env_kill(&agents[i]);
	th_ch_stop(&node);
	th_cgroup_remove(&made_cgroup);
}

static struct th_agent_env *agent_env(size_t i)
{
	return th_agent_env_init(&agents[i]);
}

static void fleet_init(void)
{
	struct bytebuf out = { 0 };

	cr_assert_eq(th_tool_run(th_fmt("fleet init --clickhouse '%s'", node.url), &out), 0,
		     "fleet init: %s", th_text(&out));
	bb_free(&out);
}

/* The first line of the answer to sql, which must succeed */
static char *ask(const char *sql)
{
	return th_ch_ask(node.url, sql);
}

static uint64_t ask_u64(const char *sql)
{
	return th_ch_ask_u64(node.url, sql);
}

/* `ringpipe fleet check`: its exit status, its output in out */
static int fleet_check(const char *host, struct bytebuf *out)
{
	return th_tool_run(th_fmt("fleet check --clickhouse '%s' --host '%s'", node.url, host), out);
}

/* The events of pid in every trace file of dir, read back with our reader */
static uint64_t local_events(const char *dir, int pid)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	uint64_t n = 0;

	cr_assert_not_null(d, "%s: %s", dir, strerror(errno));
	while ((de = readdir(d))) {
		struct nt_reader *r;
		struct nt_rec rec;
		int rc;

		if (!strstr(de->d_name, ".nettrace"))
			continue;
		r = nt_reader_open(th_fmt("%s/%s", dir, de->d_name));
		cr_assert_not_null(r, "%s", de->d_name);
		while ((rc = nt_reader_next(r, &rec)) > 0)
			n += rec.pid == pid;
		cr_assert_eq(rc, 0, "%s: %s", de->d_name, nt_reader_errmsg(r));
		nt_reader_free(r);
	}
	closedir(d);
	return n;
}

static void agent_up_clickhouse(struct th_agent_env *e, const char *host, const char *mode,
				const char *buffer_mb, const char *spool_mb)
{
	char *more[] = { "--providers", "AgentTest", "--buffering-mode", (char *)mode,
			 "--buffer-mb", (char *)buffer_mb, "--clickhouse", node.url,
			 "--clickhouse-dialect", "legacy", "--host-id", (char *)host,
			 "--spool-mb", (char *)spool_mb, NULL };

	th_agent_up_argv(e, more);
}

static uint64_t rows_of_pid(const char *table, const char *what, const char *host, uint64_t pid)
{
	return ask_u64(th_fmt("SELECT %s FROM ringpipe.%s WHERE host = '%s' AND pid = %" PRIu64,
			      what, table, host, pid));
}

/* Per-event-name counts TraceEvent reads: "Provider/Name" of one pid */
#define MAX_NAMES 16
struct name_counts {
	char key[MAX_NAMES][128];
	uint64_t n[MAX_NAMES];
	size_t len;
	uint64_t others;	/* events of other pids */
};

static void name_count(struct name_counts *c, const char *key)
{
	size_t i;

	for (i = 0; i < c->len && strcmp(c->key[i], key); i++)
		;
	if (i == c->len) {
		cr_assert_lt(c->len, MAX_NAMES, "more than %d event names", MAX_NAMES);
		snprintf(c->key[c->len++], sizeof(c->key[0]), "%s", key);
	}
	c->n[i]++;
}

/* The string value of "key":"..." in a dump line, into out */
static void dump_value(const char *line, const char *key, char *out, size_t len)
{
	char want[64];
	const char *at;
	size_t n;

	snprintf(want, sizeof(want), "\"%s\":\"", key);
	at = strstr(line, want);
	cr_assert_not_null(at, "no %s in %.300s", key, line);
	at += strlen(want);
	n = strcspn(at, "\"");
	snprintf(out, len, "%.*s", (int)n, at);
}

/* TraceEvent's reading of file (the dumper's canonical dump), counted per
 * event name for pid into c; the file must read without error or loss */
static void tracedump_counts(const char *dll, const char *file, long pid, struct name_counts *c)
{
	struct bytebuf out = { 0 };
	char *line, *next, provider[64], name[64], key[128];

	cr_assert_eq(th_run(th_fmt("dotnet '%s' dump '%s'", dll, file), &out), 0,
		     "TraceEvent cannot read %s: %.2000s", file, th_text(&out));
	for (line = (char *)out.p; line && *line; line = next) {
		const char *pid_at;

		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		if (strstr(line, "\"summary\":true")) {
			cr_assert(strstr(line, "\"lost\":0,\"error\":null"), "%s: %s", file, line);
			continue;
		}
		pid_at = strstr(line, "\"pid\":");
		cr_assert_not_null(pid_at, "%s: %.300s", file, line);
		if (strtol(pid_at + 6, NULL, 10) != pid) {
			c->others++;
			continue;
		}
		dump_value(line, "provider", provider, sizeof(provider));
		dump_value(line, "name", name, sizeof(name));
		snprintf(key, sizeof(key), "%s/%s", provider, name);
		name_count(c, key);
	}
	bb_free(&out);
}

/* TraceEvent's counts of pid's events in every trace file of dir */
static void tracedump_dir_counts(const char *dll, const char *dir, long pid,
				 struct name_counts *c)
{
	DIR *d = opendir(dir);
	struct dirent *de;

	cr_assert_not_null(d, "%s: %s", dir, strerror(errno));
	while ((de = readdir(d)))
		if (strstr(de->d_name, ".nettrace"))
			tracedump_counts(dll, th_fmt("%s/%s", dir, de->d_name), pid, c);
	closedir(d);
}

/*
 * `fleet export` of one container's rows, read by TraceEvent: the same
 * per-event-name counts as TraceEvent reads from the agent's local V6
 * files for that container's process, and none of another process's
 * events (other_pid: the host's producer, outside the container).
 */
static void export_matches_local(const struct th_agent_env *e, const char *host,
				 const char *container, uint64_t pid, uint64_t other_pid,
				 uint64_t events)
{
	struct name_counts exported = { 0 }, local = { 0 }, other = { 0 };
	struct bytebuf out = { 0 };
	char *file = th_fmt("%s/container.nettrace", e->dir);
	size_t i;

	TH_NEED_TRACEDUMP(dll);
	cr_assert_eq(th_tool_run(th_fmt("fleet export --clickhouse '%s' --host '%s' --where "
					"\"container_id = '%s'\" -o '%s'", node.url, host,
					container, file), &out), 0, "fleet export: %s",
		     th_text(&out));
	/* more rows than a page: read in pages, with a line for each */
	cr_assert(strstr(th_text(&out), th_fmt("50000 of %" PRIu64 " rows", events)), "%s",
		  th_text(&out));
	cr_assert(strstr(th_text(&out), th_fmt("%" PRIu64 " events of 1 processes", events)),
		  "%s", th_text(&out));
	tracedump_counts(dll, file, (long)pid, &exported);
	tracedump_dir_counts(dll, e->out, (long)pid, &local);
	tracedump_counts(dll, file, (long)other_pid, &other);
	cr_assert_eq(exported.others, 0u, "events of other processes in the export");
	cr_assert_eq(other.len, 0u, "the host producer's events are in the container's export");
	cr_assert_gt(local.len, 0u, "TraceEvent found no events of pid %" PRIu64 " in %s", pid,
		     e->out);
	cr_assert_eq(exported.len, local.len, "%zu event names exported, %zu in the local files",
		     exported.len, local.len);
	for (i = 0; i < local.len; i++) {
		size_t j;

		for (j = 0; j < exported.len && strcmp(exported.key[j], local.key[i]); j++)
			;
		cr_assert_lt(j, exported.len, "%s is not in the export", local.key[i]);
		cr_assert_eq(exported.n[j], local.n[i], "%s: %" PRIu64 " exported, %" PRIu64
			     " in the local files", local.key[i], exported.n[j], local.n[i]);
	}
	bb_free(&out);
}

Test(fleet_egress, every_event_lands_once_and_on_its_container, .timeout = 300,
     .fini = egress_fini)
{
	static const char id[] = "5d1e2f3a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d3e4f5a";
	const char *mnt;
	struct th_agent_env *e;
	struct bytebuf out = { 0 };
	char uid[37], *cg, *line;
	struct th_said host_said, pod_said;
	uint64_t pod_pid;

	TH_NEED_CLICKHOUSE();
	mnt = th_need_container();
	th_ch_init(&node);
	th_ch_start(&node, NULL);
	fleet_init();
	e = agent_env(0);
	agent_up_clickhouse(e, "egress-a", "block", "4", "256");
	cg = th_pod_container_make(mnt, id, uid, &made_cgroup);
	th_host_and_pod_producers(e, cg, started, 60000, 40000, &host_said, &pod_said);
	cr_assert_eq(th_agent_down(e), 0, "the agent did not stop cleanly");

	/* the host's producer: every event once, outside any container */
	cr_assert_eq(rows_of_pid("events", "count()", "egress-a", (uint64_t)host_said.pid), 120000u);
	cr_assert_eq(rows_of_pid("events", "uniqExact(payload)", "egress-a",
				 (uint64_t)host_said.pid), 120000u, "an event arrived twice");
	cr_assert_eq(rows_of_pid("events", "countIf(container_id != '')", "egress-a",
				 (uint64_t)host_said.pid), 0u);
	/* the container's: all of its events on one host pid, tagged */
	line = ask(th_fmt("SELECT groupUniqArray(pid), count(), uniqExact(pid, payload), "
			  "any(pod_uid) FROM ringpipe.events WHERE host = 'egress-a' AND "
			  "container_id = '%s'", id));
	cr_assert_eq(sscanf(line, "[%" SCNu64 "]", &pod_pid), 1, "one pid expected: %s", line);
	cr_assert_neq(pod_pid, (uint64_t)host_said.pid);
	cr_assert(strstr(line, th_fmt("\t80000\t80000\t%s", uid)), "count, uniques, pod: %s", line);
	cr_assert_eq(rows_of_pid("events", "count()", "egress-a", pod_pid), 80000u,
		     "events of the container's pid outside its container");
	line = ask(th_fmt("SELECT nspids, container_id FROM ringpipe.processes FINAL WHERE "
			  "host = 'egress-a' AND pid = %" PRIu64, pod_pid));
	cr_assert(!strcmp(line, th_fmt("[%" PRIu64 ",1]\t%s", pod_pid, id)), "process: %s", line);
	cr_assert_eq(rows_of_pid("losses", "count()", "egress-a", pod_pid) +
		     rows_of_pid("losses", "count()", "egress-a", (uint64_t)host_said.pid), 0u);
	/* the same counts as the agent's own files */
	cr_assert_eq(local_events(e->out, host_said.pid), 120000u);
	cr_assert_eq(local_events(e->out, (int)pod_pid), 80000u);
	cr_assert_eq(fleet_check("egress-a", &out), 0, "fleet check: %s", th_text(&out));
	cr_assert(strstr(th_text(&out), "all accounted for"), "%s", th_text(&out));
	cr_assert(strstr(th_text(&out), "events, 0 lost"), "%s", th_text(&out));
	/* and it sees a batch that arrived twice: its events and its manifest
	 * row inserted again (the copy of the manifest row alone is no
	 * problem: a replicated table may keep one) */
	line = ask(th_fmt("SELECT stream FROM ringpipe.events WHERE host = 'egress-a' AND pid = %d "
			  "LIMIT 1", host_said.pid));
	ask(th_fmt("INSERT INTO ringpipe.batches SELECT * FROM ringpipe.batches WHERE host = "
		   "'egress-a' AND stream = %s AND seq = 1", line));
	out.len = 0;
	cr_assert_eq(fleet_check("egress-a", &out), 0, "a copy of a manifest row: %s",
		     th_text(&out));
	ask(th_fmt("INSERT INTO ringpipe.events SELECT * FROM ringpipe.events WHERE host = "
		   "'egress-a' AND stream = %s AND batch_seq = 1", line));
	out.len = 0;
	cr_assert_eq(fleet_check("egress-a", &out), 1, "fleet check: %s", th_text(&out));
	cr_assert(strstr(th_text(&out), th_fmt("stream %s, batch 1: ", line)), "%s", th_text(&out));
	cr_assert(strstr(th_text(&out), "(duplicates)"), "%s", th_text(&out));
	cr_assert(strstr(th_text(&out), "1 problem: not everything is accounted for"), "%s",
		  th_text(&out));
	/* and a manifest row for the batch that is not a copy */
	ask(th_fmt("INSERT INTO ringpipe.batches (host, boot_id, agent_run, stream, seq, "
		   "events_rows, losses_rows, bytes) SELECT host, boot_id, agent_run, stream, seq, "
		   "events_rows, losses_rows, bytes + 1 FROM ringpipe.batches WHERE host = "
		   "'egress-a' AND stream = %s AND seq = 1 LIMIT 1", line));
	out.len = 0;
	cr_assert_eq(fleet_check("egress-a", &out), 1, "fleet check: %s", th_text(&out));
	cr_assert(strstr(th_text(&out), th_fmt("stream %s, batch 1: 3 manifest rows, 2 of them "
					       "different", line)), "%s", th_text(&out));
	cr_assert(strstr(th_text(&out), "2 problems: not everything is accounted for"), "%s",
		  th_text(&out));
	bb_free(&out);
	/* back to nettrace: the container's rows (untouched by the batch
	 * inserted again), as TraceEvent reads them */
	export_matches_local(e, "egress-a", id, pod_pid, (uint64_t)host_said.pid, 80000);
}

Test(fleet_egress, a_full_spool_parks_block_and_counts_drop_losses, .timeout = 300,
     .fini = egress_fini)
{
	struct th_agent_env *block, *drop;
	struct bytebuf out = { 0 };
	struct th_said bs, ds;
	pid_t bp, dp;
	uint64_t events, lost, full, before, during, t0, t_full;
	char *prog;

	TH_NEED_CLICKHOUSE();
	/* the server is down at first: its ports are chosen, nothing runs */
	th_ch_init(&node);
	block = agent_env(0);
	drop = agent_env(1);
	agent_up_clickhouse(block, "egress-block", "block", "1", "1");
	agent_up_clickhouse(drop, "egress-drop", "drop", "1", "1");
	prog = th_fmt("%s/progress", block->dir);
	bp = started[0] = th_producer_start_more(block, "", 4, 40000, th_fmt("paced '%s'", prog),
						 th_fmt("%s/p.json", block->dir));
	dp = started[1] = th_producer_start_more(drop, "", 2, 60000,
						 th_fmt("paced '%s/progress'", drop->dir),
						 th_fmt("%s/p.json", drop->dir));
	for (t0 = th_now_ms(); !th_progress_of(prog); t0 = th_now_ms())
		th_sleep_ms(5);
	/* the Block one parks once the spool is full: its session is drained
	 * one pass per two drainer timeouts (so that it is never taken for
	 * dead), and it writes much slower than it did */
	th_status_wait(block, "\"full\":true", 120000);
	t_full = th_now_ms();
	before = th_progress_of(prog);
	th_sleep_ms(4000);
	during = th_progress_of(prog);
	cr_assert_geq(during, before, "progress went back: %" PRIu64 " after %" PRIu64, during,
		      before);
	during -= before;
	cr_assert_lt(during * 1000 / 4000, before * 1000 / (t_full - t0) * 6 / 10,
		     "the Block producer went on writing with the spool full: %" PRIu64 " events "
		     "in 4 s, %" PRIu64 " in the %" PRIu64 " ms before", during, before, t_full - t0);
	cr_assert_eq(waitpid(bp, NULL, WNOHANG), 0, "the Block producer ended with the spool full");
	th_status_wait(block, "\"full\":true", 60000);
	/* the Drop producer runs to its end with nowhere to ship: the files
	 * finished once the spool is full are counted lost */
	ds = th_producer_wait(dp, th_fmt("%s/p.json", drop->dir), 120000);
	started[1] = 0;
	th_status_wait(drop, "\"full\":true", 60000);

	th_ch_start(&node, NULL);
	fleet_init();
	bs = th_producer_wait(bp, th_fmt("%s/p.json", block->dir), 240000);
	started[0] = 0;
	cr_assert_eq(bs.written, 160000u, "Block wrote %llu", bs.written);
	cr_assert_eq(bs.dropped, 0u);
	/* a 1 MiB spool sends small batches: all of them before the stop,
	 * which gives the egress only so long */
	th_shipped_wait(block, 240000);
	th_shipped_wait(drop, 240000);
	cr_assert_eq(th_agent_down(block), 0);
	cr_assert_eq(th_agent_down(drop), 0);

	cr_assert_eq(rows_of_pid("events", "count()", "egress-block", (uint64_t)bs.pid), 160000u);
	events = rows_of_pid("events", "uniqExact(payload)", "egress-block", (uint64_t)bs.pid);
	cr_assert_eq(events, 160000u, "%" PRIu64 " distinct events of 160000", events);
	cr_assert_eq(rows_of_pid("losses", "count()", "egress-block", (uint64_t)bs.pid), 0u);
	cr_assert_eq(fleet_check("egress-block", &out), 0, "fleet check: %s", th_text(&out));
	out.len = 0;

	events = rows_of_pid("events", "count()", "egress-drop", (uint64_t)ds.pid);
	lost = rows_of_pid("losses", "sum(count)", "egress-drop", (uint64_t)ds.pid);
	full = ask_u64(th_fmt("SELECT sum(count) FROM ringpipe.losses WHERE host = 'egress-drop' "
			      "AND pid = %d AND reason = 'egress_full'", ds.pid));
	cr_assert_gt(full, 0u, "no event was counted lost for the full spool");
	cr_assert_eq(events + lost, ds.written + ds.dropped,
		     "%" PRIu64 " events and %" PRIu64 " lost, the producer tried %llu", events,
		     lost, ds.written + ds.dropped);
	cr_assert_eq(rows_of_pid("events", "uniqExact(payload)", "egress-drop",
				 (uint64_t)ds.pid), events);
	cr_assert_eq(fleet_check("egress-drop", &out), 0, "fleet check: %s", th_text(&out));
	cr_assert(strstr(th_text(&out), th_fmt("%" PRIu64 " lost", lost)), "%s", th_text(&out));
	bb_free(&out);
}

/* Each of the want events pid wrote on host is in events once, and fleet
 * check accounts for everything (note: said after the count) */
static void all_once_and_accounted(const char *host, int pid, uint64_t want, const char *note)
{
	struct bytebuf out = { 0 };
	uint64_t events = rows_of_pid("events", "count()", host, (uint64_t)pid);

	cr_assert_eq(events, want, "%" PRIu64 " events of the %" PRIu64 " written%s", events, want,
		     note);
	cr_assert_eq(rows_of_pid("events", "uniqExact(payload)", host, (uint64_t)pid), want,
		     "an event arrived twice");
	cr_assert_eq(fleet_check(host, &out), 0, "fleet check: %s", th_text(&out));
	cr_assert(strstr(th_text(&out), "all accounted for"), "%s", th_text(&out));
	bb_free(&out);
}

Test(fleet_egress, a_killed_agent_restarted_ships_everything_once, .timeout = 300,
     .fini = egress_fini)
{
	struct th_agent_env *e;
	struct th_said ps;
	pid_t pp;
	int st = 0;

	TH_NEED_CLICKHOUSE();
	th_ch_init(&node);
	th_ch_start(&node, NULL);
	fleet_init();
	e = agent_env(0);
	/* a spool too small for the producer's files: some batches are sent,
	 * some wait in the spool, some files are not even cut when the
	 * agent is killed */
	agent_up_clickhouse(e, "egress-kill", "block", "4", "1");
	th_daemon_stop(&node.pid);
	pp = started[0] = th_producer_start(e, "", 2, 50000, th_fmt("%s/p.json", e->dir));
	ps = th_producer_wait(pp, th_fmt("%s/p.json", e->dir), 120000);
	started[0] = 0;
	cr_assert_eq(ps.written, 100000u);
	th_status_wait(e, "\"full\":true", 60000);
	kill(e->agent, SIGKILL);
	cr_assert_eq(waitpid(e->agent, &st, 0), e->agent);
	e->agent = 0;

	th_ch_spawn(&node);
	cr_assert(th_ch_wait_ready(&node, &st), "clickhouse-server did not come back");
	agent_up_clickhouse(e, "egress-kill", "block", "4", "1");
	th_shipped_wait(e, 120000);
	cr_assert_eq(th_agent_down(e), 0);
	{
		/* both ways back: batches found in the spool, files found by
		 * their shipping notes */
		struct bytebuf log = { 0 };

		cr_assert_eq(th_read_file(th_fmt("%s/agent.log", e->dir), &log), 0);
		cr_assert(strstr(th_text(&log), "was not all spooled by the last run"), "%s",
			  th_text(&log));
		cr_assert(strstr(th_text(&log), "batches from an earlier run"), "%s", th_text(&log));
		bb_free(&log);
	}

	all_once_and_accounted("egress-kill", ps.pid, 100000, "");
}

/* The manifest rows of several batches go in one insert after their rows:
 * with that insert refused (the manifest table renamed away), the rows
 * are in and the batches stay in the spool; once the table is back, each
 * batch is looked up, its rows found, and only its manifest row sent */
Test(fleet_egress, a_refused_manifest_insert_sends_no_row_twice, .timeout = 300,
     .fini = egress_fini)
{
	struct th_agent_env *e;
	struct th_said ps;
	uint64_t in_before;

	TH_NEED_CLICKHOUSE();
	th_ch_init(&node);
	th_ch_start(&node, NULL);
	fleet_init();
	e = agent_env(0);
	agent_up_clickhouse(e, "egress-manifest", "block", "4", "256");
	free(ask("RENAME TABLE ringpipe.batches TO ringpipe.batches_away"));
	started[0] = th_producer_start(e, "", 3, 100000, th_fmt("%s/p.json", e->dir));
	ps = th_producer_wait(started[0], th_fmt("%s/p.json", e->dir), 120000);
	started[0] = 0;
	cr_assert_eq(ps.written, 300000u);
	th_status_wait(e, "\"state\":\"retrying\"", 60000);
	in_before = rows_of_pid("events", "count()", "egress-manifest", (uint64_t)ps.pid);
	cr_assert_gt(in_before, 0, "rows went in before their manifest insert failed");
	cr_assert_eq(ask_u64("SELECT count() FROM ringpipe.batches_away WHERE host = "
			     "'egress-manifest'"), 0, "no manifest row went in");
	free(ask("RENAME TABLE ringpipe.batches_away TO ringpipe.batches"));
	th_status_wait(e, "\"state\":\"ok\"", 60000);
	th_shipped_wait(e, 120000);
	cr_assert_eq(th_agent_down(e), 0);

	all_once_and_accounted("egress-manifest", ps.pid, 300000,
			       th_fmt(" (%" PRIu64 " were in before the manifest table came back)",
				      in_before));
}

/* A database of fleet schema version 1 (its tables without the version's
 * view, as ringpipe made them before): the agent cuts and spools the
 * files, sends nothing into it and says what to run; once fleet init
 * migrated it, every event lands once */
Test(fleet_egress, an_agent_ships_nothing_into_a_version_1_database_until_init_migrates_it,
     .timeout = 300, .fini = egress_fini)
{
	struct th_agent_env *e;
	struct th_said ps;
	struct bytebuf out = { 0 };

	TH_NEED_CLICKHOUSE();
	th_ch_init(&node);
	th_ch_start(&node, NULL);
	fleet_init();
	free(ask("DROP TABLE ringpipe.schema_version"));
	e = agent_env(0);
	agent_up_clickhouse(e, "egress-v1", "block", "4", "256");
	started[0] = th_producer_start(e, "", 2, 20000, th_fmt("%s/p.json", e->dir));
	ps = th_producer_wait(started[0], th_fmt("%s/p.json", e->dir), 120000);
	started[0] = 0;
	cr_assert_eq(ps.written, 40000u);
	th_status_wait(e, "holds fleet schema version 1, whose stack ids this agent does not "
		       "write", 60000);
	th_status_wait(e, "run 'ringpipe fleet init', which migrates it", 60000);
	th_status_wait(e, "\"files_pending\":0,", 60000);
	cr_assert_eq(ask_u64("SELECT count() FROM ringpipe.events WHERE host = 'egress-v1'"), 0u,
		     "rows went into a version-1 database");

	cr_assert_eq(th_tool_run(th_fmt("fleet init --clickhouse '%s'", node.url), &out), 0,
		     "fleet init: %s", th_text(&out));
	cr_assert(strstr(th_text(&out), "migrated from fleet schema version 1 to 2"), "%s",
		  th_text(&out));
	th_shipped_wait(e, 120000);
	cr_assert_eq(th_agent_down(e), 0);
	all_once_and_accounted("egress-v1", ps.pid, 40000, "");
	bb_free(&out);
}

/* Four senders on small batches (a 4 MiB spool cuts them at 512 KiB, a
 * few thousand events), so that several inserts are in flight at once and
 * batches land out of order, through a server killed in the middle and
 * started again: each batch still lands once, whole */
Test(fleet_egress, senders_side_by_side_ship_every_batch_once, .timeout = 300,
     .fini = egress_fini)
{
	char *more[] = { "--providers", "AgentTest", "--buffering-mode", "block",
			 "--buffer-mb", "4", "--clickhouse", node.url, "--clickhouse-dialect",
			 "legacy", "--host-id", "egress-senders", "--spool-mb", "4",
			 "--clickhouse-senders", "4", NULL };
	struct th_agent_env *e;
	struct th_said ps;

	TH_NEED_CLICKHOUSE();
	th_ch_init(&node);
	th_ch_start(&node, NULL);
	fleet_init();
	e = agent_env(0);
	more[7] = node.url;
	th_agent_up_argv(e, more);
	th_status_wait(e, "\"senders\":4,", 60000);
	started[0] = th_producer_start(e, "", 4, 60000, th_fmt("%s/p.json", e->dir));
	/* killed while batches are in flight, then back on its data */
	while (ask_u64("SELECT count() FROM ringpipe.batches WHERE host = 'egress-senders'") < 4)
		th_sleep_ms(20);
	th_ch_kill(&node);
	th_sleep_ms(300);
	th_ch_restart(&node);
	ps = th_producer_wait(started[0], th_fmt("%s/p.json", e->dir), 120000);
	started[0] = 0;
	cr_assert_eq(ps.written, 240000u);
	th_shipped_wait(e, 120000);
	cr_assert_eq(th_agent_down(e), 0);
	cr_assert_gt(ask_u64("SELECT count() FROM ringpipe.batches WHERE host = "
			     "'egress-senders'"), 40u, "small batches: many of them");
	all_once_and_accounted("egress-senders", ps.pid, 240000, "");
}

/* The same over https (the test's CA given with --cacert, not taken from
 * SSL_CERT_FILE) with gzip bodies: every batch once, through the server's
 * kill, its inserts each on a connection of their own */
Test(fleet_egress, over_https_with_gzip_every_batch_lands_once, .timeout = 300,
     .fini = egress_fini)
{
	struct th_ch_opts o = { .tls = true };
	char *ca, *more[] = { "--providers", "AgentTest", "--buffering-mode", "block",
			      "--buffer-mb", "4", "--clickhouse", NULL, "--clickhouse-dialect",
			      "legacy", "--host-id", "egress-tls", "--spool-mb", "4",
			      "--clickhouse-senders", "2", "--cacert", NULL, "--compress", "gzip",
			      NULL };
	struct th_agent_env *e;
	struct th_said ps;

	TH_NEED_CLICKHOUSE();
	th_ch_init(&node);
	th_ch_start(&node, &o);
	cr_assert(!strncmp(node.url, "https://", 8), "%s", node.url);
	fleet_init();
	e = agent_env(0);
	more[7] = node.url;
	more[17] = ca = th_tls_file("ca.pem");
	/* the agent trusts the CA because --cacert names it */
	unsetenv("SSL_CERT_FILE");
	th_agent_up_argv(e, more);
	setenv("SSL_CERT_FILE", ca, 1);
	th_status_wait(e, th_fmt("\"server\":\"127.0.0.1:%u\"", node.https_port), 60000);
	started[0] = th_producer_start(e, "", 2, 60000, th_fmt("%s/p.json", e->dir));
	while (ask_u64("SELECT count() FROM ringpipe.batches WHERE host = 'egress-tls'") < 2)
		th_sleep_ms(20);
	th_ch_kill(&node);
	th_ch_restart(&node);
	ps = th_producer_wait(started[0], th_fmt("%s/p.json", e->dir), 120000);
	started[0] = 0;
	cr_assert_eq(ps.written, 120000u);
	th_shipped_wait(e, 120000);
	cr_assert_eq(th_agent_down(e), 0);
	all_once_and_accounted("egress-tls", ps.pid, 120000, "");
	free(ca);
}

/* Rows of two processes on two hosts, the same pid on both, put in by hand:
 * the first's with their event_meta rows (one with an opcode) and a stack,
 * the second's with neither */
static void export_rows(void)
{
	static const char boot_a[] = "toUUID('61f0c404-5cb3-11e7-907b-a6006ad3dba0')";
	static const char boot_b[] = "toUUID('61f0c404-5cb3-11e7-907b-a6006ad3dba1')";
	static const char cols[] = "(time, time_ns, host, boot_id, container_id, pid, tid, "
				   "thread_seq, provider, event_id, event_name, level, keywords, "
				   "activity_id, stack_id, payload, stream, batch_seq)";

	ask(th_fmt("INSERT INTO ringpipe.events %s VALUES "
		   "(toDateTime(1796188494), 123456789, 'exp-a', %s, 'c-a', 100, 101, 7, "
		   "'AgentTest', 1, 'Tick', 4, 1, toUUID('00112233-4455-6677-8899-aabbccddeeff'), "
		   "0, unhex('2a00000000000000'), 1, 1), "
		   "(toDateTime(1796188494), 123456790, 'exp-a', %s, 'c-a', 100, 101, 9, "
		   "'AgentTest', 1, 'Tick', 4, 1, toUUID('00000000-0000-0000-0000-000000000000'), "
		   "7, unhex('2b00000000000000'), 1, 1), "
		   "(toDateTime(1796188495), 5, 'exp-b', %s, 'c-b', 100, 300, 1, 'Other', 3, "
		   "'Boom', 2, 0, toUUID('00000000-0000-0000-0000-000000000000'), 0, 'xy', 1, 1), "
		   "(toDateTime(1796188496), 0, 'exp-a', %s, 'c-a', 100, 101, 10, 'AgentTest', 2, "
		   "'Request/Start', 4, 1, toUUID('00000000-0000-0000-0000-000000000000'), 0, '', "
		   "1, 1)", cols, boot_a, boot_a, boot_b, boot_a));
	ask(th_fmt("INSERT INTO ringpipe.event_meta (host, boot_id, pid, provider, event_id, "
		   "event_name, version, level, keywords, opcode, field_names, field_types) "
		   "VALUES ('exp-a', %s, 100, 'AgentTest', 1, 'Tick', 0, 4, 1, 0, ['Seq'], "
		   "['UInt64']), ('exp-a', %s, 100, 'AgentTest', 2, 'Request/Start', 1, 4, 1, 1, "
		   "[], [])", boot_a, boot_a));
	ask(th_fmt("INSERT INTO ringpipe.stacks (host, boot_id, pid, stack_id, frames, symbols) "
		   "VALUES ('exp-a', %s, 100, 7, [4096, 8192], ['', ''])", boot_a));
}

/* fleet_export() of the rows where, page_rows rows a page, into path */
static int export_paged(const char *where, int format, uint32_t page_rows, const char *path,
			struct fleet_export_totals *t, char *err, size_t errlen)
{
	struct fleet_export_opts o = { .where = where, .path = path, .format = format,
				       .page_rows = page_rows };
	struct ch_client c;
	struct ch_target tg;
	int rc;

	cr_assert_eq(ch_target_parse(&tg, node.url, err, errlen), 0, "%s", err);
	cr_assert_eq(ch_client_init(&c, &tg, 60000), 0);
	rc = fleet_export(&c, &o, t, err, errlen);
	ch_client_free(&c);
	return rc;
}

/* fleet_export() of the rows where, two rows a page, into path */
static int export_to(const char *where, int format, const char *path,
		     struct fleet_export_totals *t, char *err, size_t errlen)
{
	return export_paged(where, format, 2, path, t, err, errlen);
}

/* The next event of r, which must be there */
static void export_next(struct nt_reader *r, struct nt_rec *rec)
{
	cr_assert_eq(nt_reader_next(r, rec), 1, "%s", nt_reader_errmsg(r));
}

static uint64_t rec_unix_ns(const struct nt_reader *r, const struct nt_rec *rec)
{
	const struct nt_reader_info *in = nt_reader_info(r);

	cr_assert_eq(in->tick_freq, 1000000000u);
	return (uint64_t)in->sync_unix_ns + (rec->ts - in->sync_ticks);
}

Test(fleet_egress, export_rebuilds_the_rows_and_refuses_bad_input, .timeout = 120,
     .fini = egress_fini)
{
	struct fleet_export_totals t;
	struct bytebuf out = { 0 };
	struct nt_reader *r;
	struct nt_rec rec;
	char err[4096], *dir, *file;
	uint64_t frame, last_ts = 0;
	int i, ticks = 0;

	TH_NEED_CLICKHOUSE();
	th_ch_init(&node);
	th_ch_start(&node, NULL);
	fleet_init();
	dir = th_tmpdir();
	cr_assert_not_null(dir);
	file = th_fmt("%s/x.nettrace", dir);

	/* a bad condition: the server's message, and no file */
	cr_assert_eq(th_tool_run(th_fmt("fleet export --clickhouse '%s' --where 'no_such_column "
					"= 1' -o '%s'", node.url, file), &out), 1, "%s",
		     th_text(&out));
	cr_assert(strstr(th_text(&out), "Unknown identifier: no_such_column"), "%s",
		  th_text(&out));
	cr_assert(strstr(th_text(&out), "answered HTTP"), "%s", th_text(&out));
	cr_assert_neq(access(file, F_OK), 0, "a file was written for a bad condition");
	cr_assert_lt(export_to("no_such_column = 1", NT_FORMAT_V6, file, &t, err, sizeof(err)), 0);
	cr_assert(strstr(err, "Code: 47"), "%s", err);
	/* nothing selected: said, exit 1, no file */
	out.len = 0;
	cr_assert_eq(th_tool_run(th_fmt("fleet export --clickhouse '%s' --where 1 -o '%s'",
					node.url, file), &out), 1, "%s", th_text(&out));
	cr_assert(strstr(th_text(&out), "no events row matches --where '1': nothing written"), "%s",
		  th_text(&out));
	cr_assert_neq(access(file, F_OK), 0);
	/* a comment in the condition ends with it */
	cr_assert_eq(export_to("1 -- all of them", NT_FORMAT_V6, file, &t, err, sizeof(err)),
		     -ENOENT, "%s", err);
	/* usage errors */
	out.len = 0;
	cr_assert_eq(th_tool_run(th_fmt("fleet export --clickhouse '%s' -o '%s'", node.url, file),
			     &out), 2);
	cr_assert(strstr(th_text(&out), "--where COND is required"), "%s", th_text(&out));
	out.len = 0;
	cr_assert_eq(th_tool_run(th_fmt("fleet export --clickhouse '%s' --where 1 --format v7 "
					"-o '%s'", node.url, file), &out), 2);
	cr_assert(strstr(th_text(&out), "--format must be v5 or v6, not 'v7'"), "%s",
		  th_text(&out));

	export_rows();
	/* V5 has one process id: two processes are refused, and said */
	cr_assert_eq(export_to("1", NT_FORMAT_V5, file, &t, err, sizeof(err)), -EXDEV, "%s", err);
	cr_assert(strstr(err, "the selection holds 2 processes"), "%s", err);
	cr_assert_neq(access(file, F_OK), 0);
	/* V6: each event as it was put in, read in pages of two rows */
	cr_assert_eq(export_to("1", NT_FORMAT_V6, file, &t, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(t.events, 4u);
	cr_assert_eq(t.processes, 2u);
	cr_assert_eq(t.hosts, 2u);
	cr_assert_eq(t.event_types, 3u);
	cr_assert_eq(t.no_meta, 1u);
	cr_assert_eq(t.stacks, 1u);
	r = nt_reader_open(file);
	cr_assert_not_null(r);
	export_next(r, &rec);
	cr_assert_str_eq(rec.meta->provider, "AgentTest");
	cr_assert_str_eq(rec.meta->name, "Tick");
	cr_assert(rec.meta->has_fields && rec.meta->nfields == 1, "the fields of event_meta");
	cr_assert_str_eq(rec.meta->fields[0].name, "Seq");
	cr_assert_eq(rec.meta->fields[0].type.code, NT_U64);
	cr_assert_eq(rec.pid, 100);
	cr_assert_eq(rec.tid, 101);
	cr_assert_eq(rec_unix_ns(r, &rec), 1796188494123456789ull);
	cr_assert_eq(rec.activity[0], 0x00);
	cr_assert_eq(rec.activity[15], 0xff);
	cr_assert_eq(rec.activity[1], 0x11);
	cr_assert_eq(rec.payload_len, 8u);
	cr_assert_eq(rec.payload[0], 0x2a);
	cr_assert_eq(rec.stack_bytes, 0u);
	export_next(r, &rec);
	cr_assert_eq(rec_unix_ns(r, &rec), 1796188494123456790ull);
	cr_assert_eq(rec.payload[0], 0x2b);
	cr_assert_eq(rec.stack_bytes, 16u, "the stack of the stacks table");
	memcpy(&frame, rec.stack + 8, 8);
	cr_assert_eq(frame, 8192u);
	export_next(r, &rec);
	cr_assert_str_eq(rec.meta->provider, "Other");
	cr_assert_str_eq(rec.meta->name, "Boom", "named from the events row");
	cr_assert_eq(rec.meta->level, 2);
	cr_assert_eq(rec.pid, 100);
	cr_assert_eq(rec.tid, 300);
	cr_assert_eq(rec_unix_ns(r, &rec), 1796188495000000005ull);
	cr_assert_eq(rec.payload_len, 2u);
	cr_assert_eq(memcmp(rec.payload, "xy", 2), 0);
	export_next(r, &rec);
	cr_assert_str_eq(rec.meta->name, "Request/Start", "the name TraceEvent gave it");
	cr_assert_eq(rec.meta->opcode, 1);
	cr_assert_eq(rec.meta->version, 1);
	cr_assert_eq(rec.payload_len, 0u);
	cr_assert_eq(nt_reader_next(r, &rec), 0, "%s", nt_reader_errmsg(r));
	/* sequence numbers count afresh: the 7, 9 of the rows are no loss */
	cr_assert_eq(nt_reader_lost(r), 0);
	nt_reader_free(r);
	/* one process in V5, with --host through the command */
	out.len = 0;
	cr_assert_eq(th_tool_run(th_fmt("fleet export --clickhouse '%s' --host exp-b --where 1 "
					"--format v5 -o '%s'", node.url, file), &out), 0, "%s",
		     th_text(&out));
	cr_assert(strstr(th_text(&out), "1 events of 1 processes on 1 hosts (first: host exp-b "
			 "pid 100)"), "%s", th_text(&out));
	r = nt_reader_open(file);
	cr_assert_not_null(r);
	cr_assert_eq(nt_reader_info(r)->format, 5);
	export_next(r, &rec);
	cr_assert_str_eq(rec.meta->name, "Boom");
	cr_assert_eq(nt_reader_next(r, &rec), 0, "%s", nt_reader_errmsg(r));
	nt_reader_free(r);
	/* a batch that arrived twice: each copy is a row, also where a page
	 * ends between two rows of one key (a page of one row) */
	ask("INSERT INTO ringpipe.events SELECT * FROM ringpipe.events WHERE host = 'exp-a'");
	cr_assert_eq(export_paged("1", NT_FORMAT_V6, 1, file, &t, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(t.events, 7u);
	r = nt_reader_open(file);
	cr_assert_not_null(r);
	for (i = 0; i < 7; i++) {
		export_next(r, &rec);
		cr_assert_eq(rec.ts >= last_ts, 1, "event %d goes back in time", i);
		last_ts = rec.ts;
		ticks += !strcmp(rec.meta->name, "Tick");
	}
	cr_assert_eq(ticks, 4, "each Tick row twice");
	cr_assert_eq(nt_reader_next(r, &rec), 0, "%s", nt_reader_errmsg(r));
	nt_reader_free(r);
	th_rmdir(dir);
	bb_free(&out);
}
