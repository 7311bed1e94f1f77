// SPDX-License-Identifier: MIT
/*
 * The host agent end to end: a real `ringpipe agent` on a private socket,
 * real programs linked against libringpipe.so joining it (agent_producer.c),
 * real pid namespaces and cgroups for containers. Every count is checked in
 * the traces the agent wrote, read back with ringpipe's reader and, where
 * the .NET SDK is here, with TraceEvent.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent.h"
#include "agent_wire.h"
#include "capture/bpf_capture.h"
#include "clock.h"
#include "agent_helpers.h"
#include "helpers.h"
#include "host/identity.h"
#include "nettrace_read.h"
#include "ring.h"

static void agent_up_with(struct th_agent_env *e, const char *mode, const char *buffer_mb,
			  const char *providers)
{
	char *more[] = { "--providers", (char *)providers, "--buffering-mode", (char *)mode,
			 "--buffer-mb", (char *)buffer_mb, NULL };

	th_agent_up_argv(e, more);
}

static void agent_up(struct th_agent_env *e, const char *mode, const char *buffer_mb)
{
	agent_up_with(e, mode, buffer_mb, "AgentTest");
}

static struct th_agent_env *cur_env;	/* what agent_fini() undoes */

static void env_init(struct th_agent_env *e)
{
	memset(e, 0, sizeof(*e));
	e->dir = th_tmpdir();
	cr_assert_not_null(e->dir);
	e->out = th_fmt("%s/out", e->dir);
	e->sock = th_fmt("%s/agent.sock", e->dir);
	cur_env = e;
}

static void env_fini(struct th_agent_env *e);

static pid_t made_pids[4];	/* processes a test started: killed at its end */

/* A test that failed half-way leaves its processes, its agent and its
 * directory: gone. */
static void agent_fini(void)
{
	size_t i;

	for (i = 0; i < 4; i++)
		if (made_pids[i] > 0) {
			kill(made_pids[i], SIGKILL);
			waitpid(made_pids[i], NULL, WNOHANG);
		}
	memset(made_pids, 0, sizeof(made_pids));
	if (cur_env && cur_env->dir)
		env_fini(cur_env);
	cur_env = NULL;
}

static void env_fini(struct th_agent_env *e)
{
	if (e->agent > 0) {
		kill(e->agent, SIGKILL);
		waitpid(e->agent, NULL, 0);
	}
	if (!getenv("RINGPIPE_KEEP"))
		th_rmdir(e->dir);
	else
		free(e->dir);
	e->dir = NULL;
}

/* Files numbered as the agent numbers them (NAME.nettrace, NAME.2.nettrace,
 * ..., NAME.10.nettrace), in that order: shorter first, then by name. */
static void sort_numbered(char **v, size_t n)
{
	size_t i, j;

	for (i = 0; i < n; i++)
		for (j = i + 1; j < n; j++)
			if (strlen(v[j]) < strlen(v[i]) ||
			    (strlen(v[j]) == strlen(v[i]) && strcmp(v[j], v[i]) < 0)) {
				char *t = v[i];

				v[i] = v[j];
				v[j] = t;
			}
}

/* The trace the agent wrote for pid (the n-th join, from 1). */
static char *file_of(const struct th_agent_env *e, pid_t pid, int nth)
{
	char *pat = th_fmt("_%d_", pid), *best = NULL;
	struct dirent *de;
	DIR *d = opendir(e->out);
	int seen = 0;
	char *names[256];
	int n = 0, i;

	cr_assert_not_null(d, "%s", e->out);
	while ((de = readdir(d)) && n < 256)
		if (strstr(de->d_name, pat) && strstr(de->d_name, ".nettrace") &&
		    strncmp(de->d_name, "ringpipe-agent_", 15))
			names[n++] = strdup(de->d_name);
	closedir(d);
	/* joins and rotations number their files */
	sort_numbered(names, (size_t)n);
	for (i = 0; i < n; i++) {
		if (++seen == nth)
			best = th_fmt("%s/%s", e->out, names[i]);
		free(names[i]);
	}
	return best;
}

static char *agent_trace(const struct th_agent_env *e)
{
	struct dirent *de;
	DIR *d = opendir(e->out);
	char *f = NULL;

	cr_assert_not_null(d);
	while ((de = readdir(d)))
		if (!strncmp(de->d_name, "ringpipe-agent_", 15))
			f = th_fmt("%s/%s", e->out, de->d_name);
	closedir(d);
	cr_assert_not_null(f, "no agent trace in %s", e->out);
	return f;
}

struct counts {
	uint64_t ticks;
	uint64_t bad_pid;
	uint64_t gaps;		/* a thread's counter skipped ahead */
	int64_t lost;
	int err;
};

static struct counts count_ticks_from(const char *file, pid_t pid, uint64_t next[256]);

/* Tick events of provider AgentTest in file: all on pid, each thread's
 * counters 0, 1, 2, ... */
static struct counts count_ticks(const char *file, pid_t pid)
{
	uint64_t next[256] = { 0 };

	return count_ticks_from(file, pid, next);
}

/* The same over every file of pid in order (a rotated trace), each
 * thread's counters running on from one file into the next; *nfiles
 * says how many, and c.lost adds up each file's EventsLost. */
static struct counts count_ticks_all(const struct th_agent_env *e, pid_t pid, int *nfiles)
{
	struct counts c = { 0 };
	uint64_t next[256] = { 0 };
	char *f;
	int k;

	for (k = 1; (f = file_of(e, pid, k)); k++) {
		struct counts one = count_ticks_from(f, pid, next);

		cr_assert_eq(one.err, 0, "%s does not read to its end", f);
		c.ticks += one.ticks;
		c.bad_pid += one.bad_pid;
		c.gaps += one.gaps;
		c.lost += one.lost;
	}
	*nfiles = k - 1;
	return c;
}

static struct counts count_ticks_from(const char *file, pid_t pid, uint64_t next[256])
{
	struct counts c = { 0 };
	struct nt_reader *r = nt_reader_open(file);
	struct nt_rec rec;
	int rc;

	cr_assert_not_null(r, "%s does not open", file);
	while ((rc = nt_reader_next(r, &rec)) > 0) {
		uint32_t t;
		uint64_t n;

		if (strcmp(rec.meta->provider, "AgentTest") || strcmp(rec.meta->name, "Tick"))
			continue;
		c.ticks++;
		if (rec.pid != pid)
			c.bad_pid++;
		cr_assert_eq(rec.payload_len, 12u);
		memcpy(&t, rec.payload, 4);
		memcpy(&n, rec.payload + 4, 8);
		cr_assert_lt(t, 256u);
		if (n != next[t])
			c.gaps++;
		next[t] = n + 1;
	}
	c.err = rc;
	if (rc < 0)
		fprintf(stderr, "%s: %s\n", file, nt_reader_errmsg(r));
	c.lost = nt_reader_lost(r);
	nt_reader_free(r);
	return c;
}

/* `ringpipe dump FILE`: the lines of event NAME about pid, one string. */
static char *events_in(const char *file, const char *name, pid_t pid)
{
	struct bytebuf out = { 0 }, sel = { 0 };
	char *key = th_fmt("\"name\":\"%s\"", name), *pk = th_fmt("\"Pid\":%d,", pid), *line;

	cr_assert_eq(th_tool_run(th_fmt("dump '%s'", file), &out), 0, "%s", out.p);
	for (line = strtok((char *)out.p, "\n"); line; line = strtok(NULL, "\n"))
		if (strstr(line, key) && strstr(line, pk)) {
			bb_append(&sel, line, strlen(line));
			bb_append(&sel, "\n", 1);
		}
	bb_append(&sel, "", 1);
	bb_free(&out);
	return (char *)sel.p;
}

/* The same in the agent's trace. */
static char *agent_events(const struct th_agent_env *e, const char *name, pid_t pid)
{
	return events_in(agent_trace(e), name, pid);
}

static void tracedump_counts(const char *file, uint64_t ticks)
{
	const char *why = NULL, *dll = th_tracedump(&why);
	struct bytebuf out = { 0 };
	char *want;

	if (!dll) {
		if (th_require_interop())
			cr_assert_fail("RINGPIPE_REQUIRE_INTEROP=1 but %s", why);
		fprintf(stderr, "TraceEvent check skipped: %s\n", why);
		return;
	}
	cr_assert_eq(th_run(th_fmt("dotnet '%s' counts '%s'", dll, file), &out), 0, "%s", out.p);
	want = th_fmt("AgentTest/Tick\t%llu\n", (unsigned long long)ticks);
	cr_assert(strstr((char *)out.p, want), "TraceEvent counts %s, not %s", out.p, want);
	cr_assert(strstr((char *)out.p, "#lost\t0"), "%s", out.p);
}

/* TraceEvent reads the whole file without an error. */
static void tracedump_ok(const char *file)
{
	const char *why = NULL, *dll = th_tracedump(&why);
	struct bytebuf out = { 0 };

	if (!dll) {
		if (th_require_interop())
			cr_assert_fail("RINGPIPE_REQUIRE_INTEROP=1 but %s", why);
		fprintf(stderr, "TraceEvent check skipped: %s\n", why);
		return;
	}
	cr_assert_eq(th_run(th_fmt("dotnet '%s' counts '%s' 2>&1", dll, file), &out), 0, "%s", out.p);
}

/* Runs the producer to its end: its JSON line's written and dropped. */
static void run_producer(const struct th_agent_env *e, int threads, long events, uint64_t *written,
			 uint64_t *dropped, pid_t *pid)
{
	struct bytebuf out = { 0 };
	unsigned long long w = 0, d = 0;
	int p = 0;

	cr_assert_eq(th_run(th_fmt("RINGPIPE_AGENT='%s' '%s' AgentTest %d %ld "
				   "2>>'%s/producer.log'",
				   e->sock, th_producer_bin(), threads, events, e->dir), &out), 0,
		     "the producer failed: %s", out.p);
	cr_assert_eq(sscanf((char *)out.p, "{\"pid\":%d,\"written\":%llu,\"dropped\":%llu,", &p, &w, &d), 3,
		     "%s", out.p);
	*written = w;
	*dropped = d;
	*pid = p;
}

Test(agent, block_process_joins_and_every_event_arrives, .timeout = 120,
     .fini = agent_fini)
{
	static struct th_agent_env e;	/* the fini undoes it */
	uint64_t w, d;
	pid_t pid;
	struct counts c;
	char *f, *ev;

	env_init(&e);
	/* a 1 MiB ring shared by 4 writers on 2 CPUs: they park, and the
	 * agent's drainer in another process is what admits them */
	agent_up(&e, "block", "1");
	run_producer(&e, 4, 100000, &w, &d, &pid);
	cr_assert_eq(w, 400000u, "written %llu", (unsigned long long)w);
	cr_assert_eq(d, 0u, "Block dropped %llu", (unsigned long long)d);
	/* the process has exited: its entry says so once the agent has read
	 * the hang-up of its socket (the producer does not wait for that) */
	th_status_entry_wait(&e, pid, "\"state\":\"stopped\"", 60000);
	cr_assert_eq(th_agent_down(&e), 0);
	f = file_of(&e, pid, 1);
	cr_assert_not_null(f, "no trace for pid %d", pid);
	c = count_ticks(f, pid);
	cr_assert_eq(c.err, 0);
	cr_assert_eq(c.ticks, 400000u, "the trace has %llu", (unsigned long long)c.ticks);
	cr_assert_eq(c.bad_pid, 0u);
	cr_assert_eq(c.gaps, 0u);
	cr_assert_eq(c.lost, 0);
	ev = agent_events(&e, "Process", pid);
	cr_assert(strstr(ev, "\"Source\":\"ringpipe\""), "%s", ev);
	ev = agent_events(&e, "ProcessEnd", pid);
	cr_assert(strstr(ev, "\"How\":\"stopped\""), "%s", ev);
	cr_assert(strstr(ev, "\"Events\":400000,"), "%s", ev);
	tracedump_counts(f, 400000);
	env_fini(&e);
}

Test(agent, a_process_started_before_the_agent_joins_when_it_comes, .timeout = 240,
     .fini = agent_fini)
{
	static struct th_agent_env e;	/* the fini undoes it */
	char *out, *f;
	struct th_said said;
	struct counts c;

	env_init(&e);
	out = th_fmt("%s/producer.json", e.dir);
	made_pids[0] = th_producer_start(&e, "exec", 2, 20000, out);
	/* no agent: the process goes on, and retries; the agent comes once
	 * the process has looked for it and found none */
	th_join_retrying(made_pids[0]);
	agent_up(&e, "drop", "4");
	said = th_producer_wait(made_pids[0], out, 180000);
	made_pids[0] = 0;
	cr_assert_eq(said.written + said.dropped, 40000u);
	cr_assert_eq(th_agent_down(&e), 0);
	f = file_of(&e, said.pid, 1);
	cr_assert_not_null(f);
	c = count_ticks(f, said.pid);
	cr_assert_eq(c.err, 0);
	/* Drop: what was written is in the trace, what was not is lost, exactly */
	cr_assert_eq(c.ticks, said.written);
	cr_assert_eq((uint64_t)c.lost, said.dropped);
	env_fini(&e);
}

static pid_t producer_forever(const struct th_agent_env *e, const char *prog, const char *pre)
{
	char *cmd = th_fmt("%s RINGPIPE_AGENT='%s' '%s' AgentTest 2 0 forever '%s' "
			   "2>>'%s/producer.log'",
			   pre ? pre : "exec env", e->sock, th_producer_bin(), prog, e->dir);
	char *argv[] = { "/bin/sh", "-c", cmd, NULL };
	pid_t pid = th_spawn(argv, NULL, th_fmt("%s/producer.log", e->dir));
	uint64_t end = th_now_ms() + 60000;

	while (th_attempts_of(prog) < 1000) {
		cr_assert_lt(th_now_ms(), end, "the producer wrote nothing in 60 s (did it join?)");
		th_sleep_ms(20);
	}
	return pid;
}

Test(agent, a_killed_process_is_drained_and_its_end_recorded, .timeout = 120,
     .fini = agent_fini)
{
	static struct th_agent_env e;	/* the fini undoes it */
	char *prog, *f, *ev;
	pid_t pid;
	struct counts c;
	uint64_t end;
	int st;

	env_init(&e);
	prog = th_fmt("%s/progress", e.dir);
	agent_up(&e, "block", "4");
	/* it has written 1,000 events: what it committed is the agent's to
	 * drain, dead or alive */
	pid = producer_forever(&e, prog, NULL);
	made_pids[0] = pid;
	kill(pid, SIGKILL);
	/* not reaped yet: the agent reads how it ended from the zombie */
	end = th_now_ms() + 60000;
	for (;;) {
		struct bytebuf b = { 0 };

		cr_assert_eq(agent_status_query(e.sock, true, &b), 0);
		if (strstr((char *)b.p, "killed by signal 9"))
			break;
		cr_assert_lt(th_now_ms(), end, "status never shows the kill: %s", b.p);
		bb_free(&b);
		th_sleep_ms(50);
	}
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert_eq(th_agent_down(&e), 0);
	f = file_of(&e, pid, 1);
	cr_assert_not_null(f);
	c = count_ticks(f, pid);
	cr_assert_eq(c.err, 0);
	cr_assert_geq(c.ticks, 1000u, "%llu ticks in the trace; the producer had written 1,000 "
		      "or more when it was killed", (unsigned long long)c.ticks);
	/* what it committed is there, in order, nothing in between lost */
	cr_assert_eq(c.gaps, 0u);
	cr_assert_eq(c.lost, 0);
	ev = agent_events(&e, "ProcessEnd", pid);
	cr_assert(strstr(ev, "\"How\":\"killed by signal 9\""), "%s", ev);
	env_fini(&e);
}

Test(agent, a_killed_agent_frees_block_producers_and_a_new_one_rejoins, .timeout = 300,
     .fini = agent_fini)
{
	static struct th_agent_env e;	/* the fini undoes it */
	char *prog, *f;
	pid_t pid;
	uint64_t a, b, end;
	struct counts c;

	env_init(&e);
	prog = th_fmt("%s/progress", e.dir);
	agent_up(&e, "block", "1");
	pid = producer_forever(&e, prog, NULL);
	made_pids[0] = pid;
	kill(e.agent, SIGKILL);
	waitpid(e.agent, NULL, 0);
	e.agent = 0;
	/* Block producers with a dead drainer (its socket hung up): they go
	 * on writing, dropping counted, they do not hang. Parked, they would
	 * stop within what the 1 MiB of rings holds; 64 Ki attempts more
	 * than there were at the kill are past that. The deadline only turns
	 * a hang into a failure. */
	a = th_attempts_of(prog);
	end = th_now_ms() + 90000;
	while ((b = th_attempts_of(prog)) < a + 65536) {
		cr_assert_lt(th_now_ms(), end, "the producer hangs without its agent: %llu "
			     "attempts at the kill, %llu 90 s later", (unsigned long long)a,
			     (unsigned long long)b);
		th_sleep_ms(50);
	}
	/* a new agent on the same socket: the running process joins it */
	agent_up(&e, "block", "1");
	end = th_now_ms() + 60000;
	while (!(f = file_of(&e, pid, 2))) {
		cr_assert_lt(th_now_ms(), end, "the process did not join the new agent in 60 s");
		th_sleep_ms(50);
	}
	/* and writes into it: the new agent has drained 1,000 of its events */
	th_status_count_wait(&e, pid, "events", 1000, 60000);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	made_pids[0] = 0;
	cr_assert_eq(th_agent_down(&e), 0);
	c = count_ticks(f, pid);
	cr_assert_eq(c.err, 0);
	cr_assert_geq(c.ticks, 1000u, "the new agent's trace has %llu ticks, its status "
		      "counted 1,000 or more", (unsigned long long)c.ticks);
	env_fini(&e);
}

/* Waits until the agent's entry of pid says how the process left (its
 * socket hung up) instead of "joined"; a hang guard of 60 s */
static void wait_gone(const struct th_agent_env *e, pid_t pid)
{
	uint64_t end = th_now_ms() + 60000;

	for (;;) {
		char *ent = th_status_entry(e, pid);
		bool gone = ent && !strstr(ent, "\"state\":\"joined\"");

		if (gone) {
			free(ent);
			return;
		}
		cr_assert_lt(th_now_ms(), end, "the agent did not see pid %d go in 60 s: %s",
			     (int)pid, ent ? ent : "(no entry)");
		free(ent);
		th_sleep_ms(20);
	}
}

/* ---- hostile peers ---------------------------------------------------------- */

static int connect_to(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	cr_assert_geq(fd, 0);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "%s", strerror(errno));
	return fd;
}

static int hello(const char *path, uint32_t claimed)
{
	struct rp_am_hello h = { .h = rp_agent_hdr(RP_AM_HELLO, sizeof(h), 0) };
	uint8_t buf[4096];
	int fd = connect_to(path);

	h.abi_version = RP_ABI_VERSION;
	h.pid_claimed = claimed;
	cr_assert_eq(rp_agent_send(fd, &h, sizeof(h), -1, 1000), 0);
	cr_assert_gt(rp_agent_recv(fd, buf, sizeof(buf), NULL, 2000), 0, "no CONFIG");
	return fd;
}

static void send_ready(int fd, int memfd)
{
	struct rp_am_ready r = { .h = rp_agent_hdr(RP_AM_READY, sizeof(r), 0) };

	r.tick_freq = rp_clock_frequency();
	r.sync_ticks = rp_clock_now();
	/* the agent may have dropped the connection already: that is fine */
	rp_agent_send(fd, &r, sizeof(r), memfd, 1000);
}

Test(agent, hostile_peers_cannot_crash_hang_or_mislead_it, .timeout = 120,
     .fini = agent_fini)
{
	static struct th_agent_env e;	/* the fini undoes it */
	uint64_t w, d, end, rng = 0x9e3779b97f4a7c15ull;
	pid_t pid;
	struct counts c;
	struct bytebuf st = { 0 };
	int fd, i;

	env_init(&e);
	cr_assert_eq(rp_clock_init(), 0);
	agent_up(&e, "drop", "4");
	/* garbage instead of a hello */
	fd = connect_to(e.sock);
	cr_assert_eq(send(fd, "garbage!garbage!garbage!", 24, 0), 24);
	close(fd);
	/* a silent peer that stays connected */
	int silent = connect_to(e.sock);
	/* claims to be pid 1, sends a description that is garbage, then a
	 * regular file (not a sealed memfd) as its rings */
	fd = hello(e.sock, 1);
	{
		uint8_t m[64] = { 0 };
		struct rp_am_meta *mh = (struct rp_am_meta *)m;
		char *path = th_fmt("%s/notmemfd", e.dir);
		int ff = open(path, O_RDWR | O_CREAT, 0600);

		mh->h = rp_agent_hdr(RP_AM_META, sizeof(m), 0);
		mh->index = 1;
		mh->desc_len = sizeof(m) - sizeof(*mh);
		memset(m + sizeof(*mh), 0xff, sizeof(m) - sizeof(*mh));
		cr_assert_eq(rp_agent_send(fd, m, sizeof(m), -1, 1000), 0);
		cr_assert_eq(ftruncate(ff, 1 << 20), 0);
		send_ready(fd, ff);
		close(ff);
		close(fd);
	}
	/* real rings, then a scribbler over them: records the agent was never
	 * told of, positions that lie */
	fd = hello(e.sock, 1);
	{
		struct rp_shm_opts so = { .sz = sizeof(so), .nr_rings = 2, .data_size = 1 << 16 };
		struct rp_shm *shm = rp_shm_create(&so);
		uint64_t *words;
		size_t nwords;

		cr_assert_not_null(shm);
		send_ready(fd, rp_shm_fd(shm));
		words = (uint64_t *)rp_shm_ring(shm, 0)->hdr;
		nwords = (4096 + 2 * (1 << 16)) / 8;
		end = th_now_ms() + 500;
		while (th_now_ms() < end) {
			for (i = 0; i < 1000; i++) {
				rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
				/* the ring header's immutable line, then positions
				 * and data, of ring 0 */
				words[8 + rng % (nwords - 8)] = rng;
			}
			th_sleep_ms(1);
		}
		close(fd);
		rp_shm_destroy(shm);
	}
	/* and through all that, an honest process is served in full */
	run_producer(&e, 2, 50000, &w, &d, &pid);
	cr_assert_eq(agent_status_query(e.sock, true, &st), 0);
	/* nobody is taken for pid 1: identities come from the kernel */
	cr_assert_null(strstr((char *)st.p, "{\"pid\":1,"), "%s", st.p);
	close(silent);
	/* the silent peer and the scribbled rings hold up no stop (the test's
	 * timeout would end a hang) */
	cr_assert_eq(th_agent_down(&e), 0);
	c = count_ticks(file_of(&e, pid, 1), pid);
	cr_assert_eq(c.err, 0);
	cr_assert_eq(c.ticks, w, "%" PRIu64 " ticks in the trace, %" PRIu64 " written",
		     (uint64_t)c.ticks, w);
	cr_assert_eq((uint64_t)c.lost, d, "the trace's EventsLost %" PRId64 ", the producer's "
		     "refused writes %" PRIu64 " (%" PRIu64 " written)", (int64_t)c.lost, d, w);
	env_fini(&e);
}

/* ---- containers -------------------------------------------------------------- */

/* What a container test made, undone by its .fini also when an assertion
 * failed half-way: the processes first, then the cgroups, deepest first
 * (a parent another test still uses stays). */
static char *made_cg[3];
static size_t made_mnt_len;

static void containers_fini(void)
{
	size_t i;

	agent_fini();
	for (i = 0; i < 3; i++) {
		char *cg = made_cg[i];

		/* whatever the test left in the container (a python that waits
		 * for its go file) ends with it */
		if (cg)
			th_write_file(th_fmt("%s/cgroup.kill", cg), "1", 1);
		while (cg && strlen(cg) > made_mnt_len + 1) {
			struct timespec ts = { 0, 10000000 };
			int k;

			/* a killed process leaves its cgroup a moment later
			 * (longer on a loaded host) */
			for (k = 0; k < 3000 && rmdir(cg) && errno == EBUSY; k++)
				nanosleep(&ts, NULL);
			*strrchr(cg, '/') = 0;
		}
		free(cg);
		made_cg[i] = NULL;
	}
}

/* A cgroup a test made (up to three), removed with its parents by
 * containers_fini() */
static void made(struct th_agent_env *e, char *cg, const char *mnt)
{
	size_t i;

	(void)e;	/* env_init() named it already */
	for (i = 0; i < 3 && made_cg[i]; i++)
		;
	cr_assert_lt(i, 3u);
	made_cg[i] = cg;
	made_mnt_len = strlen(mnt);
}

Test(agent, a_process_in_a_container_is_tagged_and_on_its_host_pid, .timeout = 120,
     .fini = containers_fini)
{
	static const char id[] = "7e2f1c9b4a5d6e8f0a1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d3e4f5a6b7";
	const char *mnt = agent_cgroup2_mount();
	char uid[37], uid_[37], *cg, *cgpath, *prog, *f, *ev;
	static struct th_agent_env e;	/* the fini undoes it */
	pid_t sh, host_pid = 0;
	struct counts c;
	uint64_t end;
	size_t i;

	if (geteuid() != 0 || !mnt || system("command -v unshare >/dev/null 2>&1"))
		cr_skip_test("needs root, a cgroup2 mount and unshare(1) to make a container");
	snprintf(uid, sizeof(uid), "%08x-1111-4222-8333-%012llx", (unsigned)getpid(),
		 (unsigned long long)th_now_ms());
	for (i = 0; i < sizeof(uid); i++)
		uid_[i] = uid[i] == '-' ? '_' : uid[i];
	cgpath = th_fmt("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%s.slice/"
			"cri-containerd-%s.scope", uid_, id);
	cg = th_fmt("%s%s", mnt, cgpath);
	cr_assert_eq(system(th_fmt("mkdir -p '%s'", cg)), 0);
	env_init(&e);
	made(&e, strdup(cg), mnt);
	prog = th_fmt("%s/progress", e.dir);
	agent_up(&e, "block", "4");
	/* into the cgroup first, then a pid and mount namespace of its own */
	sh = producer_forever(&e, prog, th_fmt("echo $$ > '%s/cgroup.procs'; exec unshare -p -m -f "
					       "--mount-proc env ", cg));
	made_pids[0] = sh;
	/* the producer is unshare's child: find it by its cgroup */
	end = th_now_ms() + 60000;
	while (!host_pid) {
		struct bytebuf b = { 0 };

		th_read_file(th_fmt("%s/cgroup.procs", cg), &b);
		{
			char *line;

			for (line = strtok((char *)b.p, "\n"); line; line = strtok(NULL, "\n")) {
				struct agent_identity idn;

				if (!agent_identity_read((uint32_t)atoi(line), &idn) &&
				    !strcmp(idn.comm, "agent_producer"))
					host_pid = atoi(line);
			}
		}
		bb_free(&b);
		cr_assert_lt(th_now_ms(), end, "no agent_producer in %s after 60 s", cg);
		th_sleep_ms(20);
	}
	made_pids[1] = host_pid;
	/* pid 1 of its namespace: only SIGKILL ends it from outside */
	kill(host_pid, SIGKILL);
	kill(sh, SIGKILL);
	waitpid(sh, NULL, 0);
	/* the agent has seen it go: its entry is no longer a joined one */
	wait_gone(&e, host_pid);
	cr_assert_eq(th_agent_down(&e), 0);
	f = file_of(&e, host_pid, 1);
	cr_assert_not_null(f, "no trace for host pid %d", host_pid);
	c = count_ticks(f, host_pid);
	cr_assert_eq(c.err, 0);
	cr_assert_geq(c.ticks, 1000u, "%llu ticks in the trace; the producer had written 1,000 "
		      "or more when it was killed", (unsigned long long)c.ticks);
	cr_assert_eq(c.bad_pid, 0u, "events not on the host pid");
	ev = agent_events(&e, "Process", host_pid);
	cr_assert(strstr(ev, th_fmt("\"ContainerId\":\"%s\"", id)), "%s", ev);
	cr_assert(strstr(ev, th_fmt("\"PodUid\":\"%s\"", uid)), "%s", ev);
	cr_assert(strstr(ev, "\"Runtime\":\"containerd\""), "%s", ev);
	cr_assert(strstr(ev, "\"QosClass\":\"burstable\""), "%s", ev);
	cr_assert(strstr(ev, th_fmt("\"NsPids\":\"%d,", host_pid)), "%s", ev);
	{
		/* ringpipe report over the directory: the process and its container */
		struct bytebuf out = { 0 };

		cr_assert_eq(th_tool_run(th_fmt("report '%s' --json", e.out), &out), 0, "%s", out.p);
		cr_assert(strstr((char *)out.p, th_fmt("{\"pid\":%d,", host_pid)), "%s", out.p);
		cr_assert(strstr((char *)out.p, th_fmt("\"container_id\":\"%s\"", id)), "%s", out.p);
		cr_assert(strstr((char *)out.p, th_fmt("\"events\":%llu,", (unsigned long long)c.ticks)),
			  "%s", out.p);
	}
	{
		struct bytebuf out = { 0 };

		cr_assert_eq(th_tool_run(th_fmt("dump '%s'", agent_trace(&e)), &out), 0);
		cr_assert(strstr((char *)out.p, th_fmt("\"name\":\"Container\",")), "%s", out.p);
		cr_assert(strstr((char *)out.p, th_fmt("\"fields\":{\"ContainerId\":\"%s\"", id)),
			  "%s", out.p);
	}
	containers_fini();
}

/* sh -c cmd, its stdout into out. */
static pid_t spawn_sh(const char *cmd, const char *out)
{
	int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	pid_t pid;

	cr_assert_geq(fd, 0, "%s", out);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		dup2(fd, 1);
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	close(fd);
	return pid;
}

/* A pid of a process in cgroup dir whose comm is comm, or 0. */
static pid_t find_in_cgroup(const char *dir, const char *comm)
{
	struct bytebuf b = { 0 };
	pid_t found = 0;
	char *line;

	th_read_file(th_fmt("%s/cgroup.procs", dir), &b);
	for (line = strtok((char *)b.p, "\n"); line && b.p; line = strtok(NULL, "\n")) {
		struct agent_identity idn;

		if (!agent_identity_read((uint32_t)atoi(line), &idn) && !strcmp(idn.comm, comm))
			found = atoi(line);
	}
	bb_free(&b);
	return found;
}

Test(agent, the_demo_in_a_crio_container_loses_no_tick, .timeout = 120, .fini = containers_fini)
{
	static const char id[] = "c0ffee00112233445566778899aabbccddeeff00112233445566778899aabbcc";
	const char *mnt = agent_cgroup2_mount();
	char *cg, *f, *ev, *cmd;
	uint64_t max[8] = { 0 }, seen = 0, gaps = 0, prev[8] = { 0 }, end;
	unsigned long long said = 0;
	static struct th_agent_env e;	/* the fini undoes it */
	pid_t sh, host_pid = 0;
	struct nt_reader *r;
	struct nt_rec rec;
	struct bytebuf out = { 0 };
	int st, i;

	if (geteuid() != 0 || !mnt || system("command -v unshare >/dev/null 2>&1"))
		cr_skip_test("needs root, a cgroup2 mount and unshare(1) to make a container");
	cg = th_fmt("%s/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod%08x_2222_4333_8444_%012llx.slice/crio-%s.scope",
		    mnt, (unsigned)getpid(), (unsigned long long)th_now_ms(), id);
	cr_assert_eq(system(th_fmt("mkdir -p '%s'", cg)), 0);
	env_init(&e);
	made(&e, strdup(cg), mnt);
	/* a small ring for 4 writers at 20,000 ticks/s each: Block parks them */
	agent_up_with(&e, "block", "1", "Ringpipe-Demo");
	/* its own pid and mount namespaces, a /tmp of its own (where its
	 * diagnostics socket goes), and the agent's socket mounted in, as a
	 * pod mounts the host's /run/ringpipe */
	cmd = th_fmt("echo $$ > '%s/cgroup.procs'; exec unshare -p -m -f --mount-proc sh -c "
		     "'mount --bind %s /mnt && %s && "
		     "exec env RINGPIPE_AGENT=/mnt/agent.sock %s --threads 4 --rate 20000 "
		     "--duration 3 --alloc-threads 0 --jit-threads 0 --heap-nodes 1000'",
		     cg, e.dir, th_private_tmp_cmd(th_fmt("%s/ctmp", e.dir)),
		     realpath(th_demo_bin(), NULL));
	sh = spawn_sh(cmd, th_fmt("%s/demo.out", e.dir));
	made_pids[0] = sh;
	end = th_now_ms() + 60000;
	while (!(host_pid = find_in_cgroup(cg, "ringpipe-demo"))) {
		cr_assert_lt(th_now_ms(), end, "the demo did not start in 60 s");
		th_sleep_ms(10);
	}
	cr_assert_eq(waitpid(sh, &st, 0), sh);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the demo failed: %d", st);
	wait_gone(&e, host_pid);
	th_read_file(th_fmt("%s/demo.out", e.dir), &out);
	cr_assert(strstr((char *)out.p, "ticks "), "%s", out.p);
	sscanf(strstr((char *)out.p, "ticks "), "ticks %llu", &said);
	cr_assert_gt(said, 1000u);
	cr_assert_eq(th_agent_down(&e), 0);
	f = file_of(&e, host_pid, 1);
	cr_assert_not_null(f, "no trace for the demo's host pid %d", host_pid);
	/* every thread's ticks count 1, 2, ... ; those before the demo joined
	 * are not in the trace, every one after is, up to its last */
	r = nt_reader_open(f);
	cr_assert_not_null(r);
	while ((i = nt_reader_next(r, &rec)) > 0) {
		uint64_t n;
		uint32_t t;

		if (strcmp(rec.meta->name, "Tick"))
			continue;
		cr_assert_eq(rec.pid, host_pid);
		memcpy(&n, rec.payload, 8);
		memcpy(&t, rec.payload + 8, 4);
		cr_assert_lt(t, 8u);
		if (prev[t] && n != prev[t] + 1)
			gaps++;
		prev[t] = n;
		if (n > max[t])
			max[t] = n;
		seen++;
	}
	cr_assert_eq(i, 0, "%s", nt_reader_errmsg(r));
	cr_assert_eq(nt_reader_lost(r), 0);
	nt_reader_free(r);
	cr_assert_eq(gaps, 0u);
	cr_assert_eq(max[0] + max[1] + max[2] + max[3], said,
		     "the demo wrote %llu ticks, the last ones in the trace add up to %llu", said,
		     (unsigned long long)(max[0] + max[1] + max[2] + max[3]));
	/* how many came before the join depends on how soon the demo got to
	 * join (seconds, on a loaded host): some must be after it */
	cr_assert_gt(seen, 0u, "none of the demo's %llu ticks is in the trace", said);
	ev = agent_events(&e, "Process", host_pid);
	cr_assert(strstr(ev, th_fmt("\"ContainerId\":\"%s\"", id)), "%s", ev);
	cr_assert(strstr(ev, "\"Runtime\":\"cri-o\""), "%s", ev);
	cr_assert(strstr(ev, "\"QosClass\":\"besteffort\""), "%s", ev);
	ev = agent_events(&e, "ProcessEnd", host_pid);
	cr_assert(strstr(ev, "\"How\":\"stopped\""), "%s", ev);
	tracedump_ok(f);
	containers_fini();
}

Test(agent, the_command_checks_its_options_and_stops_after_its_duration, .timeout = 120,
     .fini = agent_fini)
{
	static struct th_agent_env e;	/* the fini undoes it */
	struct bytebuf out = { 0 };
	uint64_t t0;

	env_init(&e);
	cr_assert_eq(th_tool_run("agent --socket /nonexistent/x.sock", &out), 2);
	cr_assert(strstr((char *)out.p, "nothing to collect"), "%s", out.p);
	out.len = 0;
	cr_assert_eq(th_tool_run("agent --providers X --rotate-mb 0", &out), 2);
	cr_assert(strstr((char *)out.p, "--rotate-mb must be 1 to"), "%s", out.p);
	out.len = 0;
	cr_assert_eq(th_tool_run("agent --providers X --rotate-s soon", &out), 2);
	cr_assert(strstr((char *)out.p, "--rotate-s must be 1 to"), "%s", out.p);
	out.len = 0;
	cr_assert_eq(th_tool_run("agent --kernel fork", &out), 2);
	cr_assert(strstr((char *)out.p, "--kernel takes exec and/or sched"), "%s", out.p);
	out.len = 0;
	cr_assert_eq(th_tool_run("agent --providers X --duration soon", &out), 2);
	out.len = 0;
	cr_assert_eq(th_tool_run(th_fmt("agent status --socket '%s/none.sock'", e.dir), &out), 1);
	cr_assert(strstr((char *)out.p, "is 'ringpipe agent' running?"), "%s", out.p);
	out.len = 0;
	t0 = th_now_ms();
	cr_assert_eq(th_tool_run(th_fmt("agent --quiet --providers AgentTest --duration 1s --socket '%s' "
					"--output-dir '%s'", e.sock, e.out), &out), 0, "%s", out.p);
	/* it ran its duration and then ended by itself (how long after the
	 * duration it took is no verdict: the test's timeout ends a hang) */
	cr_assert_geq(th_now_ms() - t0, 1000u, "the agent of --duration 1s ended after %llu ms",
		      (unsigned long long)(th_now_ms() - t0));
	/* its socket is gone, its trace is there */
	cr_assert_neq(access(e.sock, F_OK), 0);
	agent_trace(&e);
	env_fini(&e);
}

/* The .NET trace of host pid, waited for: the agent writes it once the
 * process's stream has ended. */
static char *dotnet_file_of(const struct th_agent_env *e, pid_t pid)
{
	uint64_t end = th_now_ms() + 60000;
	char *want = th_fmt("-%d-", pid), *f = NULL;

	while (!f) {
		struct dirent *de;
		DIR *d = opendir(e->out);

		while (d && (de = readdir(d)))
			if (!strncmp(de->d_name, "dotnet-", 7) && strstr(de->d_name, want) &&
			    strstr(de->d_name, ".nettrace"))
				f = th_fmt("%s/%s", e->out, de->d_name);
		if (d)
			closedir(d);
		cr_assert_lt(th_now_ms(), end, "no .NET trace for host pid %d in 60 s", pid);
		if (!f)
			th_sleep_ms(50);
	}
	return f;
}

Test(agent, a_dotnet_app_in_a_container_is_traced_on_its_host_pid, .timeout = 240,
     .fini = containers_fini)
{
	static const char id[] = "d07e70000000000000000000000000000000000000000000000000000000abcd";
	static struct th_agent_env e;	/* the fini undoes it */
	const char *mnt = agent_cgroup2_mount(), *dll = th_dotnet_app(), *why = NULL;
	char *cg, *cmd, *f = NULL, *ev, dllabs[4096];
	struct bytebuf out = { 0 }, counts = { 0 };
	unsigned long long said = 0;
	pid_t sh, host_pid = 0;
	uint64_t end;
	int st;

	if (!th_tracedump(&why))
		TH_SKIP_OR_FAIL("%s", why);
	if (geteuid() != 0 || !mnt || system("command -v unshare >/dev/null 2>&1"))
		cr_skip_test("needs root, a cgroup2 mount and unshare(1) to make a container");
	cr_assert_not_null(realpath(dll, dllabs), "%s", dll);
	cg = th_fmt("%s/kubepods.slice/kubepods-pod%08x_3333_4444_8555_%012llx.slice/cri-containerd-%s.scope",
		    mnt, (unsigned)getpid(), (unsigned long long)th_now_ms(), id);
	cr_assert_eq(system(th_fmt("mkdir -p '%s'", cg)), 0);
	env_init(&e);
	made(&e, strdup(cg), mnt);
	{
		char *argv[] = { (char *)th_tool(), "agent", "--socket", e.sock, "--output-dir", e.out,
				 "--providers", "AgentTest", "--dotnet", "--dotnet-providers",
				 "Ringpipe-DotnetApp", NULL };

		e.agent = th_spawn(argv, NULL, th_fmt("%s/agent.log", e.dir));
	}
	/* in a Guaranteed pod's container: its own pids, its own /tmp (where
	 * its diagnostics socket goes); it waits for the agent to resume it */
	cmd = th_fmt("echo $$ > '%s/cgroup.procs'; exec unshare -p -m -f --mount-proc --kill-child sh -c "
		     "'%s && export TMPDIR=/tmp DOTNET_DefaultDiagnosticPortSuspend=1 "
		     "&& exec dotnet %s --rate 100 --duration 2'", cg,
		     th_private_tmp_cmd(th_fmt("%s/ctmp", e.dir)), dllabs);
	sh = spawn_sh(cmd, th_fmt("%s/app.out", e.dir));
	made_pids[0] = sh;
	end = th_now_ms() + 60000;
	while (!host_pid || waitpid(sh, &st, WNOHANG) != sh) {
		if (!host_pid)
			host_pid = find_in_cgroup(cg, "dotnet");
		cr_assert_lt(th_now_ms(), end, "the app did not finish (never resumed?)");
		th_sleep_ms(20);
	}
	made_pids[0] = 0;
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the app ended with 0x%x", st);
	th_read_file(th_fmt("%s/app.out", e.dir), &out);
	cr_assert(strstr((char *)out.p, "ticks "), "%s", out.p);
	sscanf(strstr((char *)out.p, "ticks "), "ticks %llu", &said);
	cr_assert_gt(said, 100u);
	/* the stream ends with the process; the agent then writes the file */
	f = dotnet_file_of(&e, host_pid);
	cr_assert_eq(th_agent_down(&e), 0);
	cr_assert_eq(th_run(th_fmt("dotnet '%s' counts '%s'", th_tracedump(&why), f), &counts), 0,
		     "%s", counts.p);
	cr_assert(strstr((char *)counts.p, th_fmt("Ringpipe-DotnetApp/Tick\t%llu\n", said)),
		  "the app wrote %llu ticks: %s", said, counts.p);
	cr_assert(strstr((char *)counts.p, "#lost\t0"), "%s", counts.p);
	{
		struct counts c = { 0 };
		struct nt_reader *r = nt_reader_open(f);
		struct nt_rec rec;

		cr_assert_not_null(r);
		while (nt_reader_next(r, &rec) > 0) {
			c.ticks++;
			if (rec.pid != host_pid)
				c.bad_pid++;
		}
		nt_reader_free(r);
		cr_assert_gt(c.ticks, said);
		cr_assert_eq(c.bad_pid, 0u, "events not on the host pid %d", host_pid);
	}
	ev = agent_events(&e, "Process", host_pid);
	cr_assert(strstr(ev, "\"Source\":\"dotnet\""), "%s", ev);
	cr_assert(strstr(ev, th_fmt("\"ContainerId\":\"%s\"", id)), "%s", ev);
	cr_assert(strstr(ev, "\"QosClass\":\"guaranteed\""), "%s", ev);
	cr_assert(strstr(ev, th_fmt("\"NsPids\":\"%d,1\"", host_pid)), "%s", ev);
	containers_fini();
}

Test(agent, cpython_in_a_container_through_its_usdt_probes, .timeout = 120,
     .fini = containers_fini)
{
	static const char id[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
	static struct th_agent_env e;	/* the fini undoes it */
	const char *mnt = agent_cgroup2_mount();
	char *cg, *cmd, *line, msg[256];
	struct bytebuf out = { 0 };
	struct agent_identity idn;
	uint64_t gcs = 0, execs = 0, named = 0, end;
	pid_t sh, host_pid = 0;
	int st;

	if (geteuid() != 0 || !mnt || system("command -v unshare >/dev/null 2>&1"))
		cr_skip_test("needs root, a cgroup2 mount and unshare(1) to make a container");
	if (access("/usr/bin/python3.11", X_OK))
		cr_skip_test("/usr/bin/python3.11 is not installed (Debian's carries the USDT probes)");
	if (rp_capture_check_privilege(msg, sizeof(msg)))
		cr_skip_test("%s", msg);
	cg = th_fmt("%s/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%08x_5555_4666_8777_%012llx.slice/cri-containerd-%s.scope",
		    mnt, (unsigned)getpid(), (unsigned long long)th_now_ms(), id);
	cr_assert_eq(system(th_fmt("mkdir -p '%s'", cg)), 0);
	env_init(&e);
	made(&e, strdup(cg), mnt);
	{
		char *argv[] = { (char *)th_tool(), "agent", "--socket", e.sock, "--output-dir", e.out,
				 "--usdt", "python", "--kernel", "exec", NULL };
		struct stat sb;

		e.agent = th_spawn(argv, NULL, th_fmt("%s/agent.log", e.dir));
		end = th_now_ms() + 60000;
		/* serving means the probes are attached */
		while (stat(e.sock, &sb)) {
			cr_assert_lt(th_now_ms(), end, "the agent did not start in 60 s");
			th_sleep_ms(20);
		}
	}
	/* started after the agent, in its container: 40 collections; it
	 * stays until the test has seen it (the file go), however late */
	cmd = th_fmt("echo $$ > '%s/cgroup.procs'; exec unshare -p -m -f --mount-proc /usr/bin/python3.11 "
		     "-c 'import gc, os, time\ntime.sleep(0.3)\nfor _ in range(40): gc.collect()\n"
		     "while not os.path.exists(\"%s/python.go\"): time.sleep(0.01)\ntime.sleep(0.3)'",
		     cg, e.dir);
	{
		char *argv[] = { "/bin/sh", "-c", cmd, NULL };

		sh = th_spawn(argv, NULL, th_fmt("%s/python.log", e.dir));
	}
	made_pids[0] = sh;
	end = th_now_ms() + 60000;
	while (!(host_pid = find_in_cgroup(cg, "python3.11"))) {
		cr_assert_lt(th_now_ms(), end, "python did not start in 60 s");
		th_sleep_ms(10);
	}
	cr_assert_eq(agent_identity_read((uint32_t)host_pid, &idn), 0);
	cr_assert_eq(th_write_file(th_fmt("%s/python.go", e.dir), "", 0), 0);
	cr_assert_eq(waitpid(sh, &st, 0), sh);
	made_pids[0] = 0;
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "python ended with 0x%x", st);
	cr_assert_eq(th_agent_down(&e), 0);
	cr_assert_eq(th_tool_run(th_fmt("dump '%s'", agent_trace(&e)), &out), 0);
	for (line = strtok((char *)out.p, "\n"); line; line = strtok(NULL, "\n")) {
		if (!strstr(line, th_fmt("\"Pid\":%d,", host_pid)))
			continue;
		if (strstr(line, "\"provider\":\"Ringpipe-Agent\"")) {
			/* the agent's own event naming it: seen by the capture only */
			cr_assert(strstr(line, "\"Source\":\"kernel\""), "%s", line);
			cr_assert(strstr(line, th_fmt("\"ContainerId\":\"%s\"", id)), "%s", line);
			named++;
			continue;
		}
		/* in its container, yet on the host's pid and its cgroup */
		cr_assert(strstr(line, th_fmt("\"CgroupId\":%llu,", (unsigned long long)idn.cgroup_id)),
			  "%s", line);
		/* the event itself is on python's process and thread, not the agent's */
		cr_assert(strstr(line, th_fmt("\"pid\":%d,", host_pid)), "%s", line);
		if (strstr(line, "\"provider\":\"Ringpipe-Usdt-CPython\"") &&
		    strstr(line, "\"name\":\"GC/Start\""))
			gcs++;
		if (strstr(line, "\"provider\":\"Ringpipe-Kernel\"") && strstr(line, "\"name\":\"Exec\""))
			execs++;
	}
	cr_assert_geq(gcs, 40u, "%llu GC/Start events of pid %d", (unsigned long long)gcs, host_pid);
	cr_assert_eq(execs, 1u);
	cr_assert_geq(named, 1u, "no Process event for pid %d", host_pid);
	tracedump_ok(agent_trace(&e));
	containers_fini();
}

/* ---- rotation ----------------------------------------------------------------- */

/* The agent's traces, in the order they were written. */
static size_t agent_traces(const struct th_agent_env *e, char **out, size_t max)
{
	struct dirent *de;
	DIR *d = opendir(e->out);
	size_t n = 0;

	cr_assert_not_null(d);
	while ((de = readdir(d)) && n < max)
		if (!strncmp(de->d_name, "ringpipe-agent_", 15))
			out[n++] = th_fmt("%s/%s", e->out, de->d_name);
	closedir(d);
	sort_numbered(out, n);
	return n;
}

/* How many lines of `ringpipe dump FILE` have all of the given texts. */
static uint64_t dump_lines(const char *file, const char *a, const char *b)
{
	struct bytebuf out = { 0 };
	uint64_t n = 0;
	char *line;

	cr_assert_eq(th_tool_run(th_fmt("dump '%s'", file), &out), 0, "%s: %s", file, out.p);
	for (line = strtok((char *)out.p, "\n"); line; line = strtok(NULL, "\n"))
		if (strstr(line, a) && (!b || strstr(line, b)))
			n++;
	bb_free(&out);
	return n;
}

Test(agent, rotated_files_each_read_alone_and_together_hold_every_event, .timeout = 180,
     .fini = agent_fini)
{
	static struct th_agent_env e;	/* the fini undoes it */
	char *more[] = { "--providers", "AgentTest", "--buffering-mode", "block", "--buffer-mb", "1",
			 "--rotate-mb", "1", NULL };
	char *traces[8];
	uint64_t w, d, files_named;
	struct counts c;
	pid_t pid;
	int nf, k;

	env_init(&e);
	th_agent_up_argv(&e, more);
	run_producer(&e, 4, 100000, &w, &d, &pid);
	cr_assert_eq(w, 400000u);
	cr_assert_eq(d, 0u);
	cr_assert_eq(th_agent_down(&e), 0);
	/* a 1 MiB limit on some 7 MB of trace: several files, which together
	 * hold every event once, each thread's counters running on from one
	 * file into the next, and no loss in any */
	c = count_ticks_all(&e, pid, &nf);
	cr_assert_geq(nf, 3, "only %d files for pid %d", nf, pid);
	cr_assert_eq(c.ticks, 400000u, "the files hold %llu", (unsigned long long)c.ticks);
	cr_assert_eq(c.gaps, 0u);
	cr_assert_eq(c.bad_pid, 0u);
	cr_assert_eq(c.lost, 0);
	/* each reads alone, with TraceEvent too: its own event types, its own
	 * sequence numbers (a file that started numbering where the last
	 * ended would show that many lost) */
	for (k = 1; k <= nf; k++) {
		char *f = file_of(&e, pid, k);
		struct counts one = count_ticks(f, pid);

		cr_assert_eq(one.lost, 0, "%s", f);
		if (one.ticks)
			tracedump_counts(f, one.ticks);
		else
			tracedump_ok(f);
	}
	/* the agent's trace says where the process's trace went on */
	cr_assert_eq(agent_traces(&e, traces, 8), 1u);
	files_named = dump_lines(traces[0], "\"name\":\"TraceFile\"", th_fmt("\"Pid\":%d,", pid));
	cr_assert_eq(files_named, (uint64_t)nf - 1, "%llu TraceFile events for %d files",
		     (unsigned long long)files_named, nf);
	env_fini(&e);
}

Test(agent, periodic_rotation_names_every_process_again_and_losses_add_up, .timeout = 180,
     .fini = agent_fini)
{
	static struct th_agent_env e;	/* the fini undoes it */
	char *more[] = { "--providers", "AgentTest", "--buffering-mode", "drop", "--buffer-mb", "1",
			 "--rotate-s", "1", "--merge", NULL };
	char *traces[64], *line = NULL;
	struct bytebuf out = { 0 };
	uint64_t w, d, end;
	struct counts c;
	pid_t pid, sh;
	int idle = 0, nf, k;
	size_t nt, i;

	env_init(&e);
	th_agent_up_argv(&e, more);
	/* one process that joins and stays, another that writes 2,000,000
	 * events into 1 MiB and drops some */
	sh = spawn_sh(th_fmt("RINGPIPE_AGENT='%s' exec '%s' AgentTest 1 0 idle",
			     e.sock, th_producer_bin()),
		      th_fmt("%s/idle.out", e.dir));
	made_pids[0] = sh;
	end = th_now_ms() + 60000;
	while (!idle) {
		out.len = 0;
		th_read_file(th_fmt("%s/idle.out", e.dir), &out);
		if (out.len && (line = strstr(th_text(&out), "{\"pid\":")))
			idle = atoi(line + 7);
		cr_assert_lt(th_now_ms(), end, "the idle process did not join in 60 s");
		if (!idle)
			th_sleep_ms(20);
	}
	run_producer(&e, 2, 1000000, &w, &d, &pid);
	cr_assert_eq(w + d, 2000000u);
	/* a file a second: the idle process reaches its third (the deadline
	 * only turns a rotation that never comes into a failure) */
	th_status_count_wait(&e, idle, "files", 3, 60000);
	{
		/* status: the idle process is on its third file or later */
		struct bytebuf st = { 0 };
		const char *at;
		unsigned files = 0;

		cr_assert_eq(agent_status_query(e.sock, true, &st), 0);
		cr_assert(strstr(th_text(&st), "\"rotate_s\":1,\"merge\":true,"), "%s", st.p);
		at = strstr(th_text(&st), th_fmt("{\"pid\":%d,", idle));
		cr_assert_not_null(at, "%s", st.p);
		cr_assert_not_null(strstr(at, "\"files\":"), "%s", at);
		sscanf(strstr(at, "\"files\":"), "\"files\":%u", &files);
		cr_assert_geq(files, 3u, "%s", at);
		bb_free(&st);
	}
	cr_assert_eq(th_agent_down(&e), 0);
	/* Drop across files: what was taken is in them, what was not is
	 * counted in them, exactly */
	c = count_ticks_all(&e, pid, &nf);
	cr_assert_eq(c.ticks, w);
	cr_assert_eq((uint64_t)c.lost, d, "the files count %lld lost, the process dropped %llu",
		     (long long)c.lost, (unsigned long long)d);
	cr_assert_eq(c.gaps + c.bad_pid, d ? c.gaps : 0u);
	/* every second, every file: the idle process's too, and the agent's,
	 * each of which names every process still there */
	c = count_ticks_all(&e, idle, &nf);
	cr_assert_geq(nf, 3, "the idle process has %d files", nf);
	nt = agent_traces(&e, traces, 64);
	cr_assert_geq(nt, 3u, "%zu agent traces", nt);
	for (i = 0; i < nt; i++) {
		uint64_t named = dump_lines(traces[i], "\"name\":\"Process\"", th_fmt("\"Pid\":%d,", idle));

		cr_assert_geq(named, 1u, "%s does not name pid %d", traces[i], idle);
		tracedump_ok(traces[i]);
	}
	for (k = 1; k <= nf; k++)
		tracedump_ok(file_of(&e, idle, k));
	{
		/* --merge: each period's files in one, every file of the run
		 * in exactly one of them */
		struct dirent *de;
		DIR *dd = opendir(e.out);
		uint64_t ticks = 0, merged = 0;
		int64_t lost = 0;

		cr_assert_not_null(dd);
		while ((de = readdir(dd)))
			if (!strncmp(de->d_name, "ringpipe-host_", 14)) {
				char *f = th_fmt("%s/%s", e.out, de->d_name);

				c = count_ticks(f, pid);
				cr_assert_eq(c.err, 0, "%s", f);
				ticks += c.ticks;
				lost += c.lost;
				tracedump_ok(f);
				merged++;
			}
		closedir(dd);
		cr_assert_geq(merged, 2u, "%llu merged files", (unsigned long long)merged);
		cr_assert_eq(ticks, w);
		cr_assert_eq((uint64_t)lost, d);
	}
	kill(sh, SIGKILL);
	waitpid(sh, NULL, 0);
	made_pids[0] = 0;
	env_fini(&e);
}

/* ---- one agent, one run ----------------------------------------------------- */

/* The Process events of pid in trace name it as given (NULL: not looked
 * at); NsPids starts with its host pid, and says "PID,1" when inner. */
static void assert_named(const char *trace, pid_t pid, const char *source, const char *id,
			 const char *uid, const char *runtime, const char *qos, bool inner)
{
	char *ev = events_in(trace, "Process", pid);

	cr_assert(strstr(ev, th_fmt("\"Source\":\"%s\"", source)), "%s", ev);
	cr_assert(strstr(ev, th_fmt("\"ContainerId\":\"%s\"", id)), "%s", ev);
	if (uid)
		cr_assert(strstr(ev, th_fmt("\"PodUid\":\"%s\"", uid)), "%s", ev);
	if (runtime)
		cr_assert(strstr(ev, th_fmt("\"Runtime\":\"%s\"", runtime)), "%s", ev);
	if (qos)
		cr_assert(strstr(ev, th_fmt("\"QosClass\":\"%s\"", qos)), "%s", ev);
	cr_assert(strstr(ev, th_fmt(inner ? "\"NsPids\":\"%d,1\"" : "\"NsPids\":\"%d", pid)), "%s", ev);
}

/* Every event of file on pid (ringpipe's reader); how many. */
static uint64_t all_on(const char *file, pid_t pid)
{
	struct nt_reader *r = nt_reader_open(file);
	struct nt_rec rec;
	uint64_t n = 0;
	int rc;

	cr_assert_not_null(r, "%s", file);
	while ((rc = nt_reader_next(r, &rec)) > 0) {
		cr_assert_eq(rec.pid, (int64_t)pid, "%s: an event of %s/%s on pid %lld", file,
			     rec.meta->provider, rec.meta->name, (long long)rec.pid);
		n++;
	}
	cr_assert_eq(rc, 0, "%s: %s", file, nt_reader_errmsg(r));
	nt_reader_free(r);
	return n;
}

/* TraceDump threads' lines "PID/TID\tN": their sum for pid. */
static uint64_t te_pid_sum(const struct bytebuf *te, pid_t pid)
{
	char *key = th_fmt("\n%d/", pid);
	const char *p = (const char *)te->p;
	uint64_t n = 0;

	if (!strncmp(p, key + 1, strlen(key) - 1))
		n += strtoull(strchr(p, '\t') + 1, NULL, 10);
	for (; (p = strstr(p, key)); p++)
		n += strtoull(strchr(p + 1, '\t') + 1, NULL, 10);
	return n;
}

/* A kubepods cgroup for a test container, made; its path in *cg. */
static char *pod_cgroup(struct th_agent_env *e, const char *mnt, const char *form, char uid[37])
{
	char uid_[37], *cg;
	size_t i;
	static unsigned nth;

	snprintf(uid, 37, "%08x-%04x-4abc-8def-%012llx", (unsigned)getpid(), ++nth,
		 (unsigned long long)th_now_ms());
	for (i = 0; i < 37; i++)
		uid_[i] = uid[i] == '-' ? '_' : uid[i];
	cg = th_fmt(form, mnt, uid_);
	cr_assert_eq(system(th_fmt("mkdir -p '%s'", cg)), 0);
	made(e, strdup(cg), mnt);
	return cg;
}

Test(agent, one_agent_one_run_finds_every_process_of_every_container, .timeout = 300,
     .fini = containers_fini)
{
	static const char id_demo[] = "a1a1a1a1b2b2b2b2c3c3c3c3d4d4d4d4e5e5e5e5f6f6f6f60707070718181818";
	static const char id_app[] = "9f8e7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a39281706f5e4d3c2b1a0";
	static const char id_py[] = "31415926535897932384626433832795028841971693993751058209749445aa";
	static struct th_agent_env e;	/* the fini undoes it */
	const char *mnt = agent_cgroup2_mount(), *dll = th_dotnet_app(), *why = NULL;
	char uid_demo[37], uid_app[37], uid_py[37], dllabs[4096], msg[256];
	char *cg_demo, *cg_app, *cg_py, *f_app = NULL, *trace, *line, *early_out;
	char *more[] = { "--providers", "AgentTest,Ringpipe-Demo", "--buffering-mode", "block",
			 "--buffer-mb", "1", "--dotnet", "--dotnet-providers", "Ringpipe-DotnetApp",
			 "--usdt", "python", "--kernel", "exec", "--merge", NULL };
	struct bytebuf out = { 0 };
	unsigned long long early_w = 0, early_d = 0, demo_said = 0, demo_traced = 0, app_said = 0;
	uint64_t late_w, late_d, end, gcs = 0;
	pid_t early = 0, late, sh_demo, sh_app, sh_py, demo = 0, app = 0, py = 0;
	struct counts c;
	int st;

	if (!th_tracedump(&why))
		TH_SKIP_OR_FAIL("%s", why);
	if (geteuid() != 0 || !mnt || system("command -v unshare >/dev/null 2>&1"))
		cr_skip_test("needs root, a cgroup2 mount and unshare(1) to make a container");
	if (access("/usr/bin/python3.11", X_OK))
		cr_skip_test("/usr/bin/python3.11 is not installed (Debian's carries the USDT probes)");
	if (rp_capture_check_privilege(msg, sizeof(msg)))
		cr_skip_test("%s", msg);
	cr_assert_not_null(realpath(dll, dllabs), "%s", dll);
	env_init(&e);
	/* three pods: cri-o (BestEffort), containerd with the systemd driver
	 * (Guaranteed, Burstable) */
	cg_demo = pod_cgroup(&e, mnt, "%s/kubepods.slice/kubepods-besteffort.slice/"
			     "kubepods-besteffort-pod%s.slice/crio-" "a1a1a1a1b2b2b2b2c3c3c3c3d4d4d4d4"
			     "e5e5e5e5f6f6f6f60707070718181818.scope", uid_demo);
	cg_app = pod_cgroup(&e, mnt, "%s/kubepods.slice/kubepods-pod%s.slice/cri-containerd-"
			    "9f8e7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a39281706f5e4d3c2b1a0.scope",
			    uid_app);
	cg_py = pod_cgroup(&e, mnt, "%s/kubepods.slice/kubepods-burstable.slice/"
			   "kubepods-burstable-pod%s.slice/cri-containerd-"
			   "31415926535897932384626433832795028841971693993751058209749445aa.scope",
			   uid_py);

	/* on the host, before the agent: it waits for a session, and joins
	 * when the agent comes (which it does once the process has looked) */
	early_out = th_fmt("%s/early.json", e.dir);
	made_pids[3] = th_producer_start(&e, "exec", 2, 30000, early_out);
	th_join_retrying(made_pids[3]);
	th_agent_up_argv(&e, more);

	/* after it, in their containers: the demo (joins through the socket
	 * mounted in), a .NET 10 app (found through its own /tmp by its
	 * innermost pid, held at startup until the agent resumes it),
	 * CPython (its USDT probes) */
	sh_demo = spawn_sh(th_fmt("echo $$ > '%s/cgroup.procs'; exec unshare -p -m -f --mount-proc sh -c "
				  "'mount --bind %s /mnt && %s && "
				  "exec env RINGPIPE_AGENT=/mnt/agent.sock %s --threads 4 --rate 20000 "
				  "--duration 3 --alloc-threads 0 --jit-threads 0 --heap-nodes 1000'",
				  cg_demo, e.dir, th_private_tmp_cmd(th_fmt("%s/ctmp-demo", e.dir)),
				  realpath(th_demo_bin(), NULL)),
			   th_fmt("%s/demo.out", e.dir));
	made_pids[0] = sh_demo;
	sh_app = spawn_sh(th_fmt("echo $$ > '%s/cgroup.procs'; exec unshare -p -m -f --mount-proc "
				 "--kill-child sh -c '%s && export TMPDIR=/tmp "
				 "DOTNET_DefaultDiagnosticPortSuspend=1 && exec dotnet %s --rate 100 "
				 "--duration 2'", cg_app,
				 th_private_tmp_cmd(th_fmt("%s/ctmp-app", e.dir)), dllabs),
			  th_fmt("%s/app.out", e.dir));
	made_pids[1] = sh_app;
	sh_py = spawn_sh(th_fmt("echo $$ > '%s/cgroup.procs'; exec unshare -p -m -f --mount-proc "
				"/usr/bin/python3.11 -c 'import gc, os, time\ntime.sleep(0.5)\nfor _ in range(40): "
				"gc.collect()\nwhile not os.path.exists(\"%s/python.go\"): time.sleep(0.01)\n"
				"time.sleep(0.5)'", cg_py, e.dir),
			 th_fmt("%s/python.out", e.dir));
	made_pids[2] = sh_py;
	/* and on the host, after it */
	run_producer(&e, 2, 50000, &late_w, &late_d, &late);

	end = th_now_ms() + 90000;
	while (!demo || !app || !py) {
		if (!demo)
			demo = find_in_cgroup(cg_demo, "ringpipe-demo");
		if (!app)
			app = find_in_cgroup(cg_app, "dotnet");
		if (!py)
			py = find_in_cgroup(cg_py, "python3.11");
		cr_assert_lt(th_now_ms(), end, "not started: demo %d, app %d, python %d", demo, app, py);
		th_sleep_ms(10);
	}
	/* seen: python may end */
	cr_assert_eq(th_write_file(th_fmt("%s/python.go", e.dir), "", 0), 0);
	cr_assert_eq(waitpid(sh_demo, &st, 0), sh_demo);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the demo ended with 0x%x", st);
	cr_assert_eq(waitpid(sh_py, &st, 0), sh_py);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "python ended with 0x%x", st);
	cr_assert_eq(waitpid(sh_app, &st, 0), sh_app);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the app ended with 0x%x", st);
	{
		struct th_said said = th_producer_wait(made_pids[3], early_out, 180000);

		early = said.pid;
		early_w = said.written;
		early_d = said.dropped;
	}
	memset(made_pids, 0, sizeof(made_pids));
	th_read_file(th_fmt("%s/demo.out", e.dir), &out);
	cr_assert_eq(sscanf(strstr(th_text(&out), "ticks "), "ticks %llu traced %llu", &demo_said,
			    &demo_traced), 2, "%s", out.p);
	out.len = 0;
	th_read_file(th_fmt("%s/app.out", e.dir), &out);
	cr_assert(strstr(th_text(&out), "ticks "), "%s", out.p);
	sscanf(strstr((char *)out.p, "ticks "), "ticks %llu", &app_said);
	/* the .NET file is written once its stream has ended */
	f_app = dotnet_file_of(&e, app);
	cr_assert_eq(th_agent_down(&e), 0);
	trace = agent_trace(&e);

	/* Block: every event each program wrote is in its file, on its host
	 * pid, and nothing is lost */
	cr_assert_eq(early_w, 60000u);
	cr_assert_eq(early_d, 0u);
	c = count_ticks(file_of(&e, early, 1), early);
	cr_assert_eq(c.ticks, early_w);
	cr_assert_eq(c.gaps + c.bad_pid, 0u);
	cr_assert_eq(c.lost, 0);
	tracedump_counts(file_of(&e, early, 1), early_w);
	cr_assert_eq(late_w, 100000u);
	cr_assert_eq(late_d, 0u);
	c = count_ticks(file_of(&e, late, 1), late);
	cr_assert_eq(c.ticks, late_w);
	cr_assert_eq(c.lost, 0);
	tracedump_counts(file_of(&e, late, 1), late_w);
	{
		struct bytebuf counts = { 0 };
		char *f = file_of(&e, demo, 1);

		cr_assert_not_null(f, "no trace for the demo's host pid %d", demo);
		cr_assert_gt(demo_traced, 1000u);
		all_on(f, demo);
		cr_assert_eq(th_run(th_fmt("dotnet '%s' counts '%s'", th_tracedump(&why), f), &counts),
			     0, "%s", counts.p);
		cr_assert(strstr(th_text(&counts), th_fmt("Ringpipe-Demo/Tick\t%llu\n", demo_traced)),
			  "the demo says %llu ticks went to a session: %s", demo_traced, counts.p);
		cr_assert(strstr(th_text(&counts), "#lost\t0"), "%s", counts.p);
		bb_free(&counts);
		counts = (struct bytebuf){ 0 };
		all_on(f_app, app);
		cr_assert_eq(th_run(th_fmt("dotnet '%s' counts '%s'", th_tracedump(&why), f_app),
				    &counts), 0, "%s", counts.p);
		cr_assert(strstr(th_text(&counts), th_fmt("Ringpipe-DotnetApp/Tick\t%llu\n", app_said)),
			  "the app says %llu ticks: %s", app_said, counts.p);
		cr_assert(strstr(th_text(&counts), "#lost\t0"), "%s", counts.p);
		bb_free(&counts);
	}
	/* CPython, seen by its probes only: on its host pid in the agent's
	 * trace, and named there like every other process */
	out.len = 0;
	cr_assert_eq(th_tool_run(th_fmt("dump '%s'", trace), &out), 0);
	for (line = strtok((char *)out.p, "\n"); line; line = strtok(NULL, "\n"))
		if (strstr(line, "\"name\":\"GC/Start\"") && strstr(line, th_fmt("\"Pid\":%d,", py))) {
			cr_assert(strstr(line, th_fmt("\"pid\":%d,", py)), "%s", line);
			gcs++;
		}
	cr_assert_geq(gcs, 40u, "%llu GC/Start events of pid %d", (unsigned long long)gcs, py);
	tracedump_ok(trace);

	/* who each one is */
	assert_named(trace, demo, "ringpipe", id_demo, uid_demo, "cri-o", "besteffort", true);
	assert_named(trace, app, "dotnet", id_app, uid_app, "containerd", "guaranteed", true);
	assert_named(trace, py, "kernel", id_py, uid_py, "containerd", "burstable", true);
	assert_named(trace, early, "ringpipe", "", NULL, NULL, NULL, false);
	assert_named(trace, late, "ringpipe", "", NULL, NULL, NULL, false);
	/* one Container event each */
	cr_assert_eq(dump_lines(trace, "\"name\":\"Container\"", id_demo), 1u);
	cr_assert_eq(dump_lines(trace, "\"name\":\"Container\"", id_app), 1u);
	cr_assert_eq(dump_lines(trace, "\"name\":\"Container\"", id_py), 1u);
	/* every file in the directory reads with TraceEvent, and each
	 * process's file has its events on its pid only */
	{
		struct dirent *de;
		DIR *d = opendir(e.out);
		int files = 0;

		cr_assert_not_null(d);
		while ((de = readdir(d)))
			if (strstr(de->d_name, ".nettrace")) {
				tracedump_ok(th_fmt("%s/%s", e.out, de->d_name));
				files++;
			}
		closedir(d);
		/* two host producers, the demo, the app, the agent's own, and
		 * the demo once more: it serves the diagnostics protocol as a
		 * .NET runtime does, so --dotnet traces it through its socket
		 * (and any other .NET process on the host while this ran) */
		cr_assert_geq(files, 6, "%d files in %s", files, e.out);
	}
	/* --merge: all of it in one multi-process file, which TraceEvent reads
	 * with each event on its own pid */
	{
		struct bytebuf te = { 0 };
		struct dirent *de;
		DIR *d = opendir(e.out);
		char *merged = NULL;

		while (d && (de = readdir(d)))
			if (!strncmp(de->d_name, "ringpipe-host_", 14))
				merged = th_fmt("%s/%s", e.out, de->d_name);
		if (d)
			closedir(d);
		cr_assert_not_null(merged, "no merged file in %s", e.out);
		cr_assert_eq(th_run(th_fmt("dotnet '%s' threads '%s' N", th_tracedump(&why), merged), &te),
			     0, "%s", te.p);
		cr_assert_eq(te_pid_sum(&te, early), early_w, "%s", te.p);
		cr_assert_eq(te_pid_sum(&te, late), late_w, "%s", te.p);
		cr_assert_eq(te_pid_sum(&te, app), app_said, "%s", te.p);
		cr_assert(strstr(th_text(&te), "#order_violations\t0\n"), "%s", te.p);
		cr_assert(strstr(th_text(&te), "#lost\t0"), "%s", te.p);
		bb_free(&te);
		te = (struct bytebuf){ 0 };
		cr_assert_eq(th_run(th_fmt("dotnet '%s' counts '%s'", th_tracedump(&why), merged), &te),
			     0, "%s", te.p);
		cr_assert(strstr(th_text(&te), th_fmt("Ringpipe-Demo/Tick\t%llu\n", demo_traced)),
			  "%s", te.p);
		cr_assert(strstr(th_text(&te), th_fmt("Ringpipe-Usdt-CPython/GC/Start\t")), "%s", te.p);
		bb_free(&te);
		/* and converts, each process its own */
		te = (struct bytebuf){ 0 };
		cr_assert_eq(th_tool_run(th_fmt("convert --to chrome '%s'", merged), &te), 0, "%s", te.p);
		cr_assert(strstr(th_text(&te), th_fmt("\"pid\":%d,", demo)), "no event of the demo");
		cr_assert(strstr(th_text(&te), th_fmt("\"pid\":%d,", py)), "no event of python");
		bb_free(&te);
	}
	/* and ringpipe report: each process with its container */
	out.len = 0;
	cr_assert_eq(th_tool_run(th_fmt("report '%s' --json", e.out), &out), 0, "%s", out.p);
	cr_assert(strstr(th_text(&out), th_fmt("\"container_id\":\"%s\"", id_demo)), "%s", out.p);
	cr_assert(strstr(th_text(&out), th_fmt("\"container_id\":\"%s\"", id_app)), "%s", out.p);
	cr_assert(strstr(th_text(&out), th_fmt("\"container_id\":\"%s\"", id_py)), "%s", out.p);
	cr_assert(strstr(th_text(&out), th_fmt("{\"pid\":%d,", demo)), "%s", out.p);
	cr_assert(strstr(th_text(&out), th_fmt("{\"pid\":%d,", py)), "%s", out.p);
	containers_fini();
}
