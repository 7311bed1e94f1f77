// SPDX-License-Identifier: MIT
/*
 * `ringpipe fleet top` end to end (fleet/fleet_top.c), and the stacks the
 * egress ships for it (egress/egress_batch.c): a real clickhouse-server on
 * loopback (clickhouse_node.h), a real `ringpipe agent --clickhouse
 * --sample`, and real programs in two kubepods-style containers and on the
 * host: agent_producer (a known number of events), ringpipe-demo (CLR GC
 * events, each one listed in its --expect file) and tests/progs/busy (CPU
 * time in busy_spin). Each table is held against what the programs said
 * they did. Without the server these tests skip, with the reason, unless
 * RINGPIPE_REQUIRE_FLEET=1.
 */
#include <errno.h>
#include <inttypes.h>

#include "agent_helpers.h"
#include "clickhouse_node.h"
#include "common/fnv1a.h"
#include "helpers.h"
#include "host/identity.h"

#define NSHARDS 2

static struct th_ch_node node;
static struct th_zk zk;
static struct th_ch_node shards[NSHARDS];
static struct th_agent_env agent, other_agent;
static pid_t started[4];	/* programs a test started */
static char *made_cgroup[2];

static void agent_gone(struct th_agent_env *e)
{
	if (e->agent > 0) {
		kill(e->agent, SIGKILL);
		waitpid(e->agent, NULL, 0);
		e->agent = 0;
	}
	if (e->dir && !getenv("RINGPIPE_KEEP"))
		th_rmdir(e->dir);
	e->dir = NULL;
}

/* Whatever a test started goes, also when an assertion ended it early */
static void top_fini(void)
{
	size_t i, k;

	for (i = 0; i < 4; i++)
		if (started[i] > 0) {
			kill(started[i], SIGKILL);
			waitpid(started[i], NULL, 0);
			started[i] = 0;
		}
	agent_gone(&agent);
	agent_gone(&other_agent);
	th_ch_stop(&node);
	for (i = 0; i < NSHARDS; i++)
		th_ch_stop(&shards[i]);
	th_zk_stop(&zk);
	for (k = 0; k < 2; k++) {
		for (i = 0; made_cgroup[k] && i < 3000 && rmdir(made_cgroup[k]) && errno == EBUSY; i++)
			th_sleep_ms(10);
		free(made_cgroup[k]);
		made_cgroup[k] = NULL;
	}
}

/* `ringpipe fleet top ARGS` of host top-a at url, which must succeed: its output */
static char *top(const char *url, const char *args)
{
	struct bytebuf out = { 0 };
	char *text;

	cr_assert_eq(th_tool_run(th_fmt("fleet top --clickhouse '%s' --host top-a %s", url, args),
				 &out), 0, "fleet top %s: %s", args, th_text(&out));
	text = strdup(th_text(&out));
	bb_free(&out);
	return text;
}

/* A number as the tables print it ("12,345") */
static uint64_t table_number(const char *s)
{
	uint64_t n = 0;

	for (; *s == ',' || (*s >= '0' && *s <= '9'); s++)
		if (*s != ',')
			n = n * 10 + (uint64_t)(*s - '0');
	return n;
}

/*
 * The columns of the table row in text whose first columns are the words
 * of `lead` (separated by single blanks there, by runs of blanks in the
 * table), into col[] (each a copy); how many, 0 when no row has that lead.
 */
static size_t table_row(const char *text, const char *lead, char **col, size_t max)
{
	char *copy = strdup(text), *line, *save = NULL, *want[8];
	size_t n = 0, nw = 0, i;
	char *words = strdup(lead), *wsave = NULL, *w;

	for (w = strtok_r(words, " ", &wsave); w && nw < 8; w = strtok_r(NULL, " ", &wsave))
		want[nw++] = w;
	for (line = strtok_r(copy, "\n", &save); line && !n; line = strtok_r(NULL, "\n", &save)) {
		char *lsave = NULL, *c;

		for (c = strtok_r(line, " ", &lsave); c && n < max; c = strtok_r(NULL, " ", &lsave))
			col[n++] = c;
		for (i = 0; i < nw && n; i++)
			if (i >= n || strcmp(want[i], col[i]))
				n = 0;
	}
	for (i = 0; i < n; i++)
		col[i] = strdup(col[i]);
	free(words);
	free(copy);
	return n;
}

/* A kubepods-style cgroup of a burstable pod's containerd container */
static char *pod_cgroup(const char *mnt, const char *id)
{
	return th_fmt("%s/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%08x_2222_"
		      "4333_8444_%012llx.slice/cri-containerd-%s.scope", mnt, (unsigned)getpid(),
		      (unsigned long long)th_now_ms(), id);
}

/* Runs cmd through sh, moved into cgroup cg first ("" : none) */
static pid_t spawn_in(const char *cg, const char *cmd)
{
	char *line = th_fmt("%s%s%sexec %s", cg[0] ? "echo $$ > '" : "", cg,
			    cg[0] ? "/cgroup.procs'; " : "", cmd);
	char *argv[] = { "/bin/sh", "-c", line, NULL };

	return th_spawn(argv, NULL, th_fmt("%s/programs.log", agent.dir));
}

static void wait_exit0(pid_t pid, const char *what, int timeout_ms)
{
	uint64_t end = th_now_ms() + (uint64_t)timeout_ms;
	int st = 0;

	while (waitpid(pid, &st, WNOHANG) == 0) {
		cr_assert_lt(th_now_ms(), end, "%s did not end within %d ms", what, timeout_ms);
		th_sleep_ms(20);
	}
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s failed: status 0x%x", what, st);
}

/* Lines of file that start with prefix */
static uint64_t lines_starting(const char *file, const char *prefix)
{
	struct bytebuf b = { 0 };
	const char *p;
	uint64_t n = 0;

	cr_assert_eq(th_read_file(file, &b), 0, "%s", file);
	for (p = th_text(&b); p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		n += !strncmp(p, prefix, strlen(prefix));
	bb_free(&b);
	return n;
}

/* The containers' ids, made this test's own by run_programs() (its pid in
 * characters 5-12, which the tables show): the agent's probes and sampler
 * see every process of the host, and Criterion runs this file's tests at
 * once, each with a python and a JVM in a container; with one id for both,
 * an agent that named the other test's python before it stopped counted its
 * GCs in this test's cpython row (seen: "52 GCs" asserted, more shown) */
static char pod_id[] = "7a0c1e2f3a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d3e4f";
static char gc_id[] = "9b8a7c6d5e4f30211203f4e5d6c7b8a99a8b7c6d5e4f30211203f4e5d6c7b8a9";

/* CPython with its USDT probes (Debian's), for GC pauses through them */
#define PYTHON "/usr/bin/python3.11"
#define PYTHON_COLLECTIONS 40

/* HotSpot (OpenJDK 17) with its USDT probes, and a program that asks for
 * JVM_COLLECTIONS collections: with the Serial GC, one System.gc() is one
 * gc__begin/gc__end pair; it stays a while after them, as python does */
#define JAVA_HOME_17 "/usr/lib/jvm/java-17-openjdk-amd64"
#define JVM_COLLECTIONS 10
static const char jvm_program[] =
	"public class TopGc {\n"
	"    public static void main(String[] a) throws Exception {\n"
	"        for (int i = 0; i < Integer.parseInt(a[0]); i++) System.gc();\n"
	"        Thread.sleep(2000);\n"
	"    }\n"
	"}\n";

/* What the programs of a run said they did */
struct top_run {
	const char *url;	/* where the tables are asked for */
	pid_t busy, demo;
	pid_t python;		/* 0: no PYTHON here */
	pid_t jvm;		/* 0: no JDK 17 here */
	char *expect;		/* the demo's list of the runtime events it wrote */
};

static void need_root_and_cgroups(void)
{
	const char *mnt = agent_cgroup2_mount();

	if (geteuid() != 0 || !mnt || system("command -v unshare >/dev/null 2>&1"))
		cr_skip_test("needs root (for --sample and containers), a cgroup2 mount and "
			     "unshare(1)");
}

/*
 * An agent of host top-a shipping to ship_url, sampling at 199 Hz, with a
 * producer in a container of its own (and its own pid namespace, 6000
 * events), one on the host (2500), and the demo runtime, the busy loop and
 * a CPython that collects PYTHON_COLLECTIONS times in the other container;
 * returns once all of it is shipped and the agent stopped.
 */
static void run_programs(const char *ship_url, struct top_run *run)
{
	char *more[] = { "--providers", "AgentTest,Microsoft-Windows-DotNETRuntime:0x1:5",
			 "--buffering-mode", "block", "--sample", "199", "--clickhouse",
			 (char *)ship_url, "--clickhouse-dialect", "legacy", "--host-id", "top-a",
			 NULL, NULL, NULL };
	bool jvm = !access(JAVA_HOME_17 "/bin/javac", X_OK);
	const char *mnt = agent_cgroup2_mount();
	struct th_said pod, host;
	char own[9];

	snprintf(own, sizeof(own), "%08x", (unsigned)getpid());
	memcpy(pod_id + 4, own, 8);
	memcpy(gc_id + 4, own, 8);
	th_agent_env_init(&agent);
	if (access(PYTHON, X_OK))
		cr_log_warn("%s is not installed: CPython's GC pauses are not checked", PYTHON);
	if (!jvm)
		cr_log_warn("OpenJDK 17 (%s) is not installed: HotSpot's GC pauses are not checked",
			    JAVA_HOME_17);
	if (jvm) {
		struct bytebuf out = { 0 };
		char *src = th_fmt("%s/TopGc.java", agent.dir);

		cr_assert_eq(th_write_file(src, jvm_program, strlen(jvm_program)), 0);
		cr_assert_eq(th_run(th_fmt(JAVA_HOME_17 "/bin/javac -d '%s' '%s' 2>&1", agent.dir,
					   src), &out), 0, "javac: %s", th_text(&out));
		bb_free(&out);
	}
	if (jvm || !access(PYTHON, X_OK)) {
		more[12] = "--usdt";
		more[13] = jvm && !access(PYTHON, X_OK) ? "python,jvm" : jvm ? "jvm" : "python";
	}
	th_agent_up_argv(&agent, more);
	made_cgroup[0] = strdup(pod_cgroup(mnt, pod_id));
	made_cgroup[1] = strdup(pod_cgroup(mnt, gc_id));
	cr_assert_eq(system(th_fmt("mkdir -p '%s' '%s'", made_cgroup[0], made_cgroup[1])), 0);
	started[0] = th_producer_start(&agent, th_fmt("echo $$ > '%s/cgroup.procs'; exec unshare "
						      "-p -m -f --mount-proc", made_cgroup[0]), 2,
				       3000, th_fmt("%s/pod.json", agent.dir));
	started[1] = th_producer_start(&agent, "", 1, 2500, th_fmt("%s/host.json", agent.dir));
	run->expect = th_fmt("%s/demo.expect", agent.dir);
	run->demo = started[2] = spawn_in(made_cgroup[1], th_fmt("env RINGPIPE_AGENT='%s' '%s' "
		"--duration 3 --alloc-threads 2 --threads 1 --rate 50 --expect '%s' > '%s/demo.out'",
		agent.sock, th_demo_bin(), run->expect, agent.dir));
	run->busy = started[3] = spawn_in(made_cgroup[1], th_fmt("'%s/progs/busy' 1.0 > /dev/null",
								 th_test_dir()));
	pod = th_producer_wait(started[0], th_fmt("%s/pod.json", agent.dir), 120000);
	started[0] = 0;
	host = th_producer_wait(started[1], th_fmt("%s/host.json", agent.dir), 120000);
	started[1] = 0;
	/* it stays a while after its collections: a process the agent only
	 * sees through its probes is named (and its container known) when
	 * the agent reads its /proc, which a loaded machine delays */
	if (jvm)
		run->jvm = started[1] = spawn_in(made_cgroup[1], th_fmt(JAVA_HOME_17 "/bin/java "
			"-XX:+UseSerialGC -cp '%s' TopGc %d", agent.dir, JVM_COLLECTIONS));
	if (!access(PYTHON, X_OK)) {
		run->python = started[0] = spawn_in(made_cgroup[1], th_fmt(PYTHON " -c 'import gc, "
			"time\ntime.sleep(0.3)\nfor _ in range(%d): gc.collect()\ntime.sleep(2)'",
			PYTHON_COLLECTIONS));
	}
	wait_exit0(run->demo, "ringpipe-demo", 60000);
	started[2] = 0;
	wait_exit0(run->busy, "busy", 60000);
	started[3] = 0;
	if (run->python)
		wait_exit0(run->python, "python", 60000);
	started[0] = 0;
	if (run->jvm)
		wait_exit0(run->jvm, "java", 60000);
	started[1] = 0;
	cr_assert_eq(pod.written, 6000u);
	cr_assert_eq(host.written, 2500u);
	th_shipped_wait(&agent, 120000);
	cr_assert_eq(th_agent_down(&agent), 0, "the agent did not stop cleanly");
}

/*
 * Every stacks row of top-a at url named as schema version 2 says, in a
 * database of that version: FNV-1a 64 over its frames' 8 bytes each, least
 * significant first, then the count of its kernel frames (those first, at
 * kernel addresses) the same way; 0 is 1
 */
static void stack_ids_are_fnv1a(const char *url)
{
	struct bytebuf out = { 0 };
	struct ch_client c;
	struct ch_target t;
	char err[2048], *line, *save = NULL;
	uint64_t rows = 0;

	cr_assert_eq(th_ch_ask_u64(url, "SELECT version FROM ringpipe.schema_version"), 2u,
		     "a database fleet init made is version 2");
	cr_assert_eq(ch_target_parse(&t, url, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(ch_client_init(&c, &t, 60000), 0);
	cr_assert_eq(ch_exec(&c, "SELECT stack_id, arrayStringConcat(arrayMap(f -> toString(f), "
			     "frames), ' ') FROM ringpipe.stacks WHERE host = 'top-a' FORMAT "
			     "TabSeparated", NULL, 0, &out, err, sizeof(err)), 0, "%s", err);
	for (line = out.p ? strtok_r((char *)out.p, "\n", &save) : NULL; line;
	     line = strtok_r(NULL, "\n", &save)) {
		char *p = strchr(line, '\t');
		uint64_t id = strtoull(line, NULL, 10), h = fnv1a64_start(), nk = 0, n = 0;
		bool kernel = true;

		cr_assert_not_null(p, "%s", line);
		for (p++; *p; n++) {
			uint64_t frame = strtoull(p, &p, 10);

			kernel = kernel && frame >= 0xffff800000000000ull;
			nk += kernel;
			h = fnv1a64_bytes(h, (uint8_t[8]){ (uint8_t)frame, (uint8_t)(frame >> 8),
				(uint8_t)(frame >> 16), (uint8_t)(frame >> 24), (uint8_t)(frame >> 32),
				(uint8_t)(frame >> 40), (uint8_t)(frame >> 48),
				(uint8_t)(frame >> 56) }, 8);
		}
		h = fnv1a64_bytes(h, (uint8_t[8]){ (uint8_t)nk, (uint8_t)(nk >> 8),
			(uint8_t)(nk >> 16), (uint8_t)(nk >> 24) }, 8);
		cr_assert_eq(id, h ? h : 1, "a stack of %" PRIu64 " frames, %" PRIu64 " of them the "
			     "kernel's: expected the id %" PRIu64 ", got %" PRIu64, n, nk, h ? h : 1,
			     id);
		rows++;
	}
	cr_assert_gt(rows, 0u, "no stacks row of top-a");
	bb_free(&out);
	ch_client_free(&c);
}

/* fleet top's three tables of top-a, asked at run->url, against what the
 * programs did */
static void check_tables(const struct top_run *run)
{
	const char *url = run->url;
	char *col[8], *text;
	uint64_t gcs, samples, busy_samples, n;
	size_t nc;

	/* events: each container's exact count per provider */
	text = top(url, "--limit 1000 events");
	cr_assert_eq(table_row(text, "HOST CONTAINER PROVIDER EVENTS SHARE", col, 8), 5u,
		     "no header: %s", text);
	nc = table_row(text, th_fmt("top-a %.12s AgentTest", pod_id), col, 8);
	cr_assert_eq(nc, 5u, "no row of the pod's producer: %s", text);
	cr_assert_eq(table_number(col[3]), 6000u, "%s", text);
	cr_assert(!strcmp(col[3], "6,000"), "thousands are separated: %s", col[3]);
	nc = table_row(text, "top-a - AgentTest", col, 8);
	cr_assert_eq(nc, 5u, "no row of the host's producer: %s", text);
	cr_assert_eq(table_number(col[3]), 2500u, "%s", text);
	nc = table_row(text, th_fmt("top-a %.12s Microsoft-Windows-DotNETRuntime", gc_id), col, 8);
	cr_assert_eq(nc, 5u, "no row of the demo's runtime events: %s", text);
	cr_assert_eq(table_number(col[3]), lines_starting(run->expect, ""), "%s", text);
	/* the samples of the container's programs are in the agent's own
	 * trace, outside any container: given theirs by the agent's Process
	 * events: every pid the agent named in the container counts, which
	 * were more than the four started here in 1 run of 10 */
	samples = th_ch_ask_u64(url, th_fmt("SELECT count() FROM ringpipe.events WHERE host = "
					    "'top-a' AND provider = 'Ringpipe-Sampler' AND pid IN "
					    "(%d, %d, %d, %d)", run->demo, run->busy, run->python,
					    run->jvm));
	cr_assert_gt(samples, 0u);
	n = th_ch_ask_u64(url, th_fmt("SELECT count() FROM ringpipe.events WHERE host = 'top-a' "
				      "AND provider = 'Ringpipe-Sampler' AND pid GLOBAL IN (SELECT "
				      "toUInt32OrZero(fields.value[indexOf(fields.name, 'Pid')]) FROM "
				      "ringpipe.events WHERE host = 'top-a' AND provider = "
				      "'Ringpipe-Agent' AND event_name = 'Process' AND "
				      "fields.value[indexOf(fields.name, 'ContainerId')] = '%s')",
				      gc_id));
	cr_assert_geq(n, samples, "the programs' pids are named in their container");
	nc = table_row(text, th_fmt("top-a %.12s Ringpipe-Sampler", gc_id), col, 8);
	cr_assert_eq(nc, 5u, "no row of the container's samples: %s", text);
	cr_assert_eq(table_number(col[3]), n, "%" PRIu64 " samples of pids named in the container "
		     "(%" PRIu64 " of pids %d %d %d %d): %s", n, samples, run->demo, run->busy,
		     run->python, run->jvm, text);
	cr_assert(strstr(text, "events per container and provider: "), "%s", text);

	/* gc: every pause of the demo, on its container */
	gcs = lines_starting(run->expect, "GC/SuspendEEStart");
	cr_assert_gt(gcs, 0u, "the demo did no GC");
	cr_assert_eq(lines_starting(run->expect, "GC/RestartEEStop"), gcs);
	text = top(url, "--limit 1000 gc");
	nc = table_row(text, th_fmt("top-a %.12s clr", gc_id), col, 8);
	cr_assert_eq(nc, 8u, "no row of the demo's container: %s", text);
	cr_assert_eq(table_number(col[3]), gcs, "%" PRIu64 " GCs: %s", gcs, text);
	cr_assert(strtod(col[4], NULL) > 0 && strtod(col[7], NULL) >= strtod(col[6], NULL) &&
		  strtod(col[6], NULL) >= strtod(col[5], NULL), "total, p50, p99, max: %s", text);
	cr_assert_eq(table_row(text, "HOST CONTAINER RUNTIME GCS TOTAL_MS P50_MS P99_MS MAX_MS", col,
			       8), 8u, "no header: %s", text);
	/* CPython's, from its probes in the agent's own trace: every
	 * GC/Start - GC/Stop pair of its thread, on its container */
	if (run->python) {
		n = th_ch_ask_u64(url, th_fmt("SELECT count() FROM ringpipe.events WHERE host = "
					      "'top-a' AND provider = 'Ringpipe-Usdt-CPython' AND "
					      "event_name = 'GC/Stop' AND pid = %d", run->python));
		cr_assert_geq(n, PYTHON_COLLECTIONS, "%" PRIu64 " GC/Stop of python", n);
		nc = table_row(text, th_fmt("top-a %.12s cpython", gc_id), col, 8);
		cr_assert_eq(nc, 8u, "no row of python's GCs: %s", text);
		cr_assert_eq(table_number(col[3]), n, "%" PRIu64 " GCs: %s", n, text);
	}
	if (run->jvm) {
		nc = table_row(text, th_fmt("top-a %.12s hotspot", gc_id), col, 8);
		cr_assert_eq(nc, 8u, "no row of the JVM's GCs: %s", text);
		cr_assert_eq(table_number(col[3]), JVM_COLLECTIONS, "%s", text);
	}

	/* functions: the busy loop's samples are mostly in busy_spin */
	busy_samples = th_ch_ask_u64(url, th_fmt("SELECT count() FROM ringpipe.events WHERE host "
						 "= 'top-a' AND provider = 'Ringpipe-Sampler' AND "
						 "pid = %d", run->busy));
	cr_assert_gt(busy_samples, 20u, "too few samples of busy");
	text = top(url, "--limit 1000000 functions");
	nc = table_row(text, "busy!busy_spin", col, 8);
	cr_assert_eq(nc, 5u, "busy_spin is not among the functions: %s", text);
	n = table_number(col[1]);
	cr_assert_geq(n * 2, busy_samples, "busy_spin: %" PRIu64 " of busy's %" PRIu64 " samples: "
		      "%s", n, busy_samples, text);
	cr_assert_geq(table_number(col[3]), n, "the total holds the self samples: %s", text);
	/* main calls busy_spin: on the stack of every sample in it */
	nc = table_row(text, "busy!main", col, 8);
	cr_assert_eq(nc, 5u, "busy's main is not on the stacks: %s", text);
	cr_assert_geq(table_number(col[3]), n, "%s", text);

	/* stacks: every stack id has its row, and an id names one stack */
	n = th_ch_ask_u64(url, "SELECT count() FROM ringpipe.events WHERE host = 'top-a' AND "
			  "stack_id != 0");
	cr_assert_geq(n, samples);
	cr_assert_eq(th_ch_ask_u64(url, "SELECT count() FROM ringpipe.events WHERE host = 'top-a' "
				   "AND stack_id != 0 AND (host, boot_id, pid, stack_id) GLOBAL NOT "
				   "IN (SELECT host, boot_id, pid, stack_id FROM ringpipe.stacks)"),
		     0u, "events whose stack has no stacks row");
	cr_assert_eq(th_ch_ask_u64(url, "SELECT count() FROM (SELECT stack_id FROM ringpipe.stacks "
				   "GROUP BY stack_id HAVING uniqExact(frames) > 1)"), 0u,
		     "a stack id names two different stacks");
	cr_assert_geq(th_ch_ask_u64(url, "SELECT sum(stacks_rows) FROM ringpipe.batches WHERE "
				    "host = 'top-a'"),
		      th_ch_ask_u64(url, "SELECT uniqExact(pid, stack_id) FROM ringpipe.stacks "
				    "WHERE host = 'top-a'"),
		      "the manifest counts fewer stacks rows than arrived");
	stack_ids_are_fnv1a(run->url);
	cr_assert_gt(th_ch_ask_u64(url, th_fmt("SELECT count() FROM ringpipe.stacks WHERE pid = %d "
					       "AND symbols[1] = 'busy!busy_spin' AND has(symbols, "
					       "'busy!main') AND length(symbols) = length(frames)",
					       run->busy)), 0u, "busy's stacks are not named");
}

/* fleet check of top-a at url: all accounted for; then, with an event
 * that names a stack without a row, a problem */
static void check_stack_rows(const char *url)
{
	struct bytebuf out = { 0 };

	cr_assert_eq(th_tool_run(th_fmt("fleet check --clickhouse '%s' --host top-a", url), &out), 0,
		     "fleet check: %s", th_text(&out));
	th_ch_ask(url, "INSERT INTO ringpipe.events (time, host, pid, stack_id) VALUES (now(), "
		  "'top-a', 1, 12345)");
	out.len = 0;
	cr_assert_eq(th_tool_run(th_fmt("fleet check --clickhouse '%s' --host top-a", url), &out), 1,
		     "fleet check: %s", th_text(&out));
	cr_assert(strstr(th_text(&out), "problem: host top-a: 1 events name a stack that has no "
			 "stacks row"), "%s", th_text(&out));
	bb_free(&out);
}

Test(fleet_top, tables_show_what_the_programs_did, .timeout = 300, .fini = top_fini)
{
	struct top_run run = { 0 };
	struct bytebuf out = { 0 };

	TH_NEED_CLICKHOUSE();
	need_root_and_cgroups();
	th_ch_init(&node);
	th_ch_start(&node, NULL);
	cr_assert_eq(th_tool_run(th_fmt("fleet init --clickhouse '%s'", node.url), &out), 0,
		     "fleet init: %s", th_text(&out));
	bb_free(&out);
	run.url = node.url;
	run_programs(node.url, &run);
	check_tables(&run);
	check_stack_rows(node.url);
}

/*
 * Waits until every shard has its ZooKeeper session: 18.16 dereferences a
 * session it does not have yet when an ON CLUSTER statement comes first
 * (a segfault in zkutil::ZooKeeper::createImpl, 2 runs in 20 here)
 */
static void zookeeper_sessions_wait(void)
{
	uint64_t end = th_now_ms() + 60000;
	struct bytebuf out = { 0 };
	int i;

	for (i = 0; i < NSHARDS; i++)
		for (;;) {
			out.len = 0;
			if (!th_tool_run(th_fmt("fleet query --clickhouse '%s?database=system' "
						"\"SELECT count() FROM zookeeper WHERE path = '/'\"",
						shards[i].url), &out))
				break;
			cr_assert_lt(th_now_ms(), end, "shard %d has no ZooKeeper session: %s", i,
				     th_text(&out));
			th_sleep_ms(100);
		}
	bb_free(&out);
}

/*
 * The same through a cluster of two shards: the agents ship through one
 * server's Distributed tables, each host's rows go to the shard its name
 * hashes to, and fleet top asks the other server, which reads both shards.
 */
Test(fleet_top, the_same_tables_through_a_cluster, .timeout = 300, .fini = top_fini)
{
	char *more[] = { "--providers", "AgentTest", "--clickhouse", shards[0].url,
			 "--clickhouse-dialect", "legacy", "--host-id", NULL, NULL };
	struct top_run run = { 0 };
	struct bytebuf out = { 0 };
	char host_b[32], *col[8], *url;
	const char *text;
	struct th_said said;
	size_t nc;
	int i;

	TH_NEED_CLICKHOUSE();
	need_root_and_cgroups();
	th_ch_cluster_start(&zk, shards, NSHARDS, 1, "fleet");
	zookeeper_sessions_wait();
	th_ch_fleet_init_cluster(shards, NSHARDS, shards[0].url, "fleet");
	/* a host whose rows go to the other shard than top-a's */
	for (i = 0;; i++) {
		snprintf(host_b, sizeof(host_b), "top-b%d", i);
		if (th_ch_ask_u64(shards[0].url, th_fmt("SELECT cityHash64('top-a') %% 2 != "
							"cityHash64('%s') %% 2", host_b)))
			break;
		cr_assert_lt(i, 64);
	}
	th_agent_env_init(&other_agent);
	more[7] = host_b;
	th_agent_up_argv(&other_agent, more);
	started[0] = th_producer_start(&other_agent, "", 1, 1500,
				       th_fmt("%s/p.json", other_agent.dir));
	said = th_producer_wait(started[0], th_fmt("%s/p.json", other_agent.dir), 120000);
	started[0] = 0;
	cr_assert_eq(said.written, 1500u);
	th_shipped_wait(&other_agent, 120000);
	cr_assert_eq(th_agent_down(&other_agent), 0);
	run_programs(shards[0].url, &run);

	/* a Distributed insert (the test's own) is visible at once with this */
	url = th_fmt("%s?insert_distributed_sync=1", shards[1].url);
	run.url = url;
	check_tables(&run);
	for (i = 0; i < NSHARDS; i++)
		cr_assert_eq(th_ch_ask_u64(shards[i].url, "SELECT uniqExact(host) FROM "
					   "ringpipe.events_local"), 1u,
			     "shard %d does not hold one host's events", i);
	out.len = 0;
	cr_assert_eq(th_tool_run(th_fmt("fleet top --clickhouse '%s' --limit 1000 events", url),
				 &out), 0, "%s", th_text(&out));
	text = th_text(&out);
	nc = table_row(text, th_fmt("%s - AgentTest", host_b), col, 8);
	cr_assert_eq(nc, 5u, "no row of %s: %s", host_b, text);
	cr_assert_eq(table_number(col[3]), 1500u, "%s", text);
	cr_assert_eq(table_row(text, th_fmt("top-a %.12s AgentTest", pod_id), col, 8), 5u, "%s",
		     text);
	bb_free(&out);
	check_stack_rows(url);
}

Test(fleet_top, bad_arguments_say_what_is_wrong)
{
	static const struct {
		const char *args, *says;
	} bad[] = {
		{ "top --clickhouse http://127.0.0.1:1/ threads", "'threads' is not a table: events, "
		  "gc or functions" },
		{ "top --clickhouse http://127.0.0.1:1/ --since soon", "--since 'soon': give a "
		  "duration such as 90s" },
		{ "top --clickhouse http://127.0.0.1:1/ --limit 0", "--limit '0': give the rows per "
		  "table, 1 to 1000000" },
		{ "top gc", "top: --clickhouse URL is required" },
		{ "top --clickhouse http://127.0.0.1:1/ gc events", "unexpected argument 'events'" },
		{ "top --clickhouse http://127.0.0.1:1/ --format CSV", "unknown option '--format'" },
	};
	struct bytebuf out = { 0 };
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		out.len = 0;
		cr_assert_eq(th_tool_run(th_fmt("fleet %s", bad[i].args), &out), 2, "fleet %s: %s",
			     bad[i].args, th_text(&out));
		cr_assert(strstr(th_text(&out), bad[i].says), "fleet %s said: %s", bad[i].args,
			  th_text(&out));
	}
	out.len = 0;
	cr_assert_eq(th_tool_run("fleet top --help", &out), 0);
	cr_assert(strstr(th_text(&out), "ringpipe fleet top --clickhouse URL"), "%s", th_text(&out));
	cr_assert(strstr(th_text(&out), "functions  the hottest functions"), "%s", th_text(&out));
	/* a server that is not there: the connection's failure, exit 1 */
	out.len = 0;
	cr_assert_eq(th_tool_run("fleet top --clickhouse http://127.0.0.1:1/ --timeout 2", &out), 1,
		     "%s", th_text(&out));
	cr_assert(strstr(th_text(&out), "ringpipe fleet: top: "), "%s", th_text(&out));
	bb_free(&out);
}
