/* SPDX-License-Identifier: MIT */
/*
 * What the agent's tests share (test_agent.c, test_fleet_egress.c,
 * test_otlp.c, test_fleet_top.c, test_fleet_cluster.c): a real `ringpipe
 * agent` on a private socket, started with options and stopped with
 * SIGTERM, its status waited on, and the producer program beside the test
 * binary, run on the host or in a kubepods-style container and waited for.
 */
#ifndef RINGPIPE_TEST_AGENT_HELPERS_H
#define RINGPIPE_TEST_AGENT_HELPERS_H

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent.h"
#include "host/identity.h"
#include "helpers.h"

static inline char *th_test_dir(void)
{
	static char d[4096];
	ssize_t n = readlink("/proc/self/exe", d, sizeof(d) - 1);

	cr_assert_gt(n, 0);
	d[n] = 0;
	*strrchr(d, '/') = 0;
	return d;
}

static inline char *th_producer_bin(void)
{
	return th_fmt("%s/agent_producer", th_test_dir());
}

static inline uint64_t th_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static inline void th_sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

struct th_agent_env {
	char *dir, *out, *sock;
	pid_t agent;
};

static inline pid_t th_spawn(char *const argv[], char *const extra_env[], const char *log)
{
	pid_t pid = fork();

	cr_assert_geq(pid, 0);
	if (pid == 0) {
		int i, fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);

		if (fd >= 0) {
			dup2(fd, 2);
			close(fd);
		}
		for (i = 0; extra_env && extra_env[i]; i++)
			putenv(extra_env[i]);
		execv(argv[0], argv);
		_exit(127);
	}
	return pid;
}

/* `ringpipe agent --socket S --output-dir D` and the NULL-ended options
 * in more[], until it answers. */
static inline void th_agent_up_argv(struct th_agent_env *e, char *const more[])
{
	char *argv[32] = { (char *)th_tool(), "agent", "--socket", e->sock, "--output-dir", e->out };
	uint64_t end = th_now_ms() + 60000;	/* a hang guard */
	struct stat st;
	size_t n = 6, i;

	for (i = 0; more[i]; i++) {
		cr_assert_lt(n, 31u);
		argv[n++] = more[i];
	}
	argv[n] = NULL;
	e->agent = th_spawn(argv, NULL, th_fmt("%s/agent.log", e->dir));
	while (stat(e->sock, &st) || !S_ISSOCK(st.st_mode)) {
		cr_assert_lt(th_now_ms(), end, "the agent did not create %s", e->sock);
		th_sleep_ms(10);
	}
	/* a socket left by an earlier agent: wait until this one answers */
	for (;;) {
		struct bytebuf b = { 0 };
		int err = agent_status_query(e->sock, false, &b);

		bb_free(&b);
		if (!err)
			break;
		cr_assert_lt(th_now_ms(), end, "the agent does not answer on %s", e->sock);
		th_sleep_ms(10);
	}
}

static inline int th_agent_down(struct th_agent_env *e)
{
	int st = 0;

	if (e->agent <= 0)
		return 0;
	kill(e->agent, SIGTERM);
	cr_assert_eq(waitpid(e->agent, &st, 0), e->agent);
	e->agent = 0;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Whether a thread of pid named comm is asleep (state S in its stat) */
static inline bool th_thread_asleep(pid_t pid, const char *comm)
{
	char *dir = th_fmt("/proc/%d/task", (int)pid);
	DIR *d = opendir(dir);
	struct dirent *de;
	bool asleep = false;

	while (d && !asleep && (de = readdir(d))) {
		struct bytebuf c = { 0 }, st = { 0 };
		const char *r;

		if (de->d_name[0] == '.')
			continue;
		th_read_file(th_fmt("%s/%s/comm", dir, de->d_name), &c);
		th_read_file(th_fmt("%s/%s/stat", dir, de->d_name), &st);
		r = strrchr(th_text(&st), ')');
		asleep = !strncmp(th_text(&c), comm, strlen(comm)) &&
			 th_text(&c)[strlen(comm)] == '\n' && r && !strncmp(r, ") S", 3);
		bb_free(&c);
		bb_free(&st);
	}
	if (d)
		closedir(d);
	free(dir);
	return asleep;
}

/* Waits until a process started before any agent has looked for one: its
 * join thread (rp-agent-join) found no socket and sleeps until the next
 * look. A hang guard of 60 s. */
static inline void th_join_retrying(pid_t pid)
{
	uint64_t end = th_now_ms() + 60000;

	while (!th_thread_asleep(pid, "rp-agent-join")) {
		cr_assert_lt(th_now_ms(), end, "pid %d's rp-agent-join thread did not look for the "
			     "agent in 60 s", (int)pid);
		th_sleep_ms(5);
	}
}

/* ---- producers ---- */

/* A producer run through sh: RINGPIPE_AGENT=SOCK PRODUCER AgentTest T N
 * [MORE], behind prefix (a cgroup, a namespace), its JSON line into out_file */
static inline pid_t th_producer_start_more(const struct th_agent_env *e, const char *prefix,
					   int threads, long events, const char *more,
					   const char *out_file)
{
	char *cmd = th_fmt("%s env RINGPIPE_AGENT='%s' '%s' AgentTest %d %ld %s "
			   "> '%s'", prefix, e->sock, th_producer_bin(), threads, events, more,
			   out_file);
	char *argv[] = { "/bin/sh", "-c", cmd, NULL };

	return th_spawn(argv, NULL, th_fmt("%s/producer.log", e->dir));
}

static inline pid_t th_producer_start(const struct th_agent_env *e, const char *prefix,
				      int threads, long events, const char *out_file)
{
	return th_producer_start_more(e, prefix, threads, events, "", out_file);
}

/* A paced producer's counts so far (*w written, *d dropped), from its
 * progress file, which it renames into place whole: 0 before the first */
static inline void th_progress_read(const char *file, uint64_t *w, uint64_t *d)
{
	unsigned long long wr = 0, dr = 0;
	FILE *f = fopen(file, "r");

	if (f) {
		if (fscanf(f, "%llu %llu", &wr, &dr) != 2)
			wr = dr = 0;
		fclose(f);
	}
	*w = wr;
	*d = dr;
}

/* What a paced producer wrote so far */
static inline uint64_t th_progress_of(const char *file)
{
	uint64_t w, d;

	th_progress_read(file, &w, &d);
	return w;
}

/* The writes it attempted so far: written and dropped */
static inline uint64_t th_attempts_of(const char *file)
{
	uint64_t w, d;

	th_progress_read(file, &w, &d);
	return w + d;
}

struct th_said {
	int pid;		/* as the producer sees itself */
	unsigned long long written, dropped;
};

/* Waits for a producer's end: what its JSON line says */
static inline struct th_said th_producer_wait(pid_t pid, const char *out_file, int timeout_ms)
{
	uint64_t end = th_now_ms() + (uint64_t)timeout_ms;
	struct bytebuf b = { 0 };
	struct th_said s = { 0 };
	int st = 0;

	while (waitpid(pid, &st, WNOHANG) == 0) {
		cr_assert_lt(th_now_ms(), end, "the producer did not end within %d ms", timeout_ms);
		th_sleep_ms(20);
	}
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the producer failed: status 0x%x", st);
	cr_assert_eq(th_read_file(out_file, &b), 0);
	cr_assert_eq(sscanf(th_text(&b), "{\"pid\":%d,\"written\":%llu,\"dropped\":%llu,", &s.pid,
			    &s.written, &s.dropped), 3, "%s", th_text(&b));
	bb_free(&b);
	return s;
}

/* A kubepods-style cgroup of a burstable pod's containerd container */
static inline char *th_pod_container(const char *mnt, const char *id, char uid[37])
{
	char uid_[37];
	size_t i;

	snprintf(uid, 37, "%08x-2222-4333-8444-%012llx", (unsigned)getpid(),
		 (unsigned long long)th_now_ms());
	for (i = 0; i < 37; i++)
		uid_[i] = uid[i] == '-' ? '_' : uid[i];
	return th_fmt("%s/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%s.slice/"
		      "cri-containerd-%s.scope", mnt, uid_, id);
}

/* The cgroup2 mount for a container, or a skip with the reason */
static inline const char *th_need_container(void)
{
	const char *mnt = agent_cgroup2_mount();

	if (geteuid() != 0 || !mnt || system("command -v unshare >/dev/null 2>&1"))
		cr_skip_test("needs root, a cgroup2 mount and unshare(1) to make a container");
	return mnt;
}

/* The cgroup of container id in a pod of its own (uid: its uid), made;
 * *made keeps it for th_cgroup_remove() */
static inline char *th_pod_container_make(const char *mnt, const char *id, char uid[37],
				       char **made)
{
	char *cg = th_pod_container(mnt, id, uid);

	cr_assert_eq(system(th_fmt("mkdir -p '%s'", cg)), 0);
	*made = strdup(cg);
	return cg;
}

/*
 * Two producers of 2 threads each, waited for: one on the host (events per
 * thread host_events), one in the container of cgroup cg, where it is pid
 * 1 of a pid and mount namespace of its own (pod_events). started[0] and
 * [1] hold them while they run, for the test's cleanup. Each must have
 * written all its events (a Block session's producers drop none).
 */
static inline void th_host_and_pod_producers(const struct th_agent_env *e, const char *cg,
					  pid_t started[2], long host_events, long pod_events,
					  struct th_said *host, struct th_said *pod)
{
	char *host_out = th_fmt("%s/host.json", e->dir), *pod_out = th_fmt("%s/pod.json", e->dir);

	started[0] = th_producer_start(e, "", 2, host_events, host_out);
	/* into the cgroup first, then a pid and mount namespace of its own */
	started[1] = th_producer_start(e, th_fmt("echo $$ > '%s/cgroup.procs'; exec unshare -p "
					      "-m -f --mount-proc", cg), 2, pod_events, pod_out);
	*host = th_producer_wait(started[0], host_out, 120000);
	started[0] = 0;
	*pod = th_producer_wait(started[1], pod_out, 120000);
	started[1] = 0;
	cr_assert_eq(host->written, 2 * (unsigned long long)host_events);
	cr_assert_eq(pod->written, 2 * (unsigned long long)pod_events);
	cr_assert_eq(pod->pid, 1, "the container's producer is pid 1 of its namespace");
}

/* Waits until the agent's status has want in it */
static inline void th_status_wait(const struct th_agent_env *e, const char *want, int timeout_ms)
{
	uint64_t end = th_now_ms() + (uint64_t)timeout_ms;

	for (;;) {
		struct bytebuf b = { 0 };
		bool seen = !agent_status_query(e->sock, true, &b) && strstr(th_text(&b), want);

		if (seen) {
			bb_free(&b);
			return;
		}
		cr_assert_lt(th_now_ms(), end, "the status never said %s: %s", want, th_text(&b));
		bb_free(&b);
		th_sleep_ms(50);
	}
}

/* The agent's status entry of pid ("{\"pid\":PID,...}", the last one
 * listed), or NULL; the caller frees it */
static inline char *th_status_entry(const struct th_agent_env *e, pid_t pid)
{
	struct bytebuf b = { 0 };
	char *key = th_fmt("{\"pid\":%d,", (int)pid), *ret = NULL;
	const char *at, *last = NULL;

	if (!agent_status_query(e->sock, true, &b))
		for (at = strstr(th_text(&b), key); at; at = strstr(at + 1, key))
			last = at;
	if (last)
		ret = strndup(last, strcspn(last, "}") + 1);
	bb_free(&b);
	free(key);
	return ret;
}

/* Waits until the agent's entry of pid has want in it (a state, a count:
 * "\"state\":\"stopped\""); a hang guard of timeout_ms, nothing else */
static inline void th_status_entry_wait(const struct th_agent_env *e, pid_t pid,
					const char *want, int timeout_ms)
{
	uint64_t end = th_now_ms() + (uint64_t)timeout_ms;

	for (;;) {
		char *ent = th_status_entry(e, pid);
		bool seen = ent && strstr(ent, want);

		if (seen) {
			free(ent);
			return;
		}
		cr_assert_lt(th_now_ms(), end, "pid %d's status entry never said %s: %s", (int)pid,
			     want, ent ? ent : "(no entry)");
		free(ent);
		th_sleep_ms(20);
	}
}

/* Waits until the agent's entry of pid counts at least n under key
 * ("events", "files"); a hang guard of timeout_ms */
static inline void th_status_count_wait(const struct th_agent_env *e, pid_t pid,
					const char *key, uint64_t n, int timeout_ms)
{
	uint64_t end = th_now_ms() + (uint64_t)timeout_ms;
	char *k = th_fmt("\"%s\":", key);

	for (;;) {
		char *ent = th_status_entry(e, pid);
		const char *at = ent ? strstr(ent, k) : NULL;
		uint64_t v = at ? strtoull(at + strlen(k), NULL, 10) : 0;

		if (v >= n) {
			free(ent);
			free(k);
			return;
		}
		cr_assert_lt(th_now_ms(), end, "pid %d's status entry never counted %" PRIu64
			     " %s: %s", (int)pid, n, key, ent ? ent : "(no entry)");
		free(ent);
		th_sleep_ms(20);
	}
}

/* Waits until the agent's egress has nothing left: its spool empty and no
 * file waiting */
static inline void th_shipped_wait(const struct th_agent_env *e, int timeout_ms)
{
	th_status_wait(e, "\"files_pending\":0,", timeout_ms);
	th_status_wait(e, "\"spool_batches\":0,", timeout_ms);
}

/* ---- a test's cleanup, also after an assertion ended it early ---- */

/* Kills and reaps the processes a test started (those > 0), zeroing them */
static inline void th_kill_started(pid_t *pids, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		th_kill_wait(&pids[i]);
}

/* A fresh directory for an agent, its output and socket inside */
static inline struct th_agent_env *th_agent_env_init(struct th_agent_env *e)
{
	memset(e, 0, sizeof(*e));
	e->dir = th_tmpdir();
	cr_assert_not_null(e->dir);
	e->out = th_fmt("%s/out", e->dir);
	e->sock = th_fmt("%s/agent.sock", e->dir);
	return e;
}

/* The agent killed, its directory removed (kept with RINGPIPE_KEEP=1) */
static inline void th_agent_env_kill(struct th_agent_env *e)
{
	th_kill_wait(&e->agent);
	if (e->dir && !getenv("RINGPIPE_KEEP"))
		th_rmdir(e->dir);
	e->dir = NULL;
}

/* A cgroup a test made, removed once its processes are gone */
static inline void th_cgroup_remove(char **cg)
{
	int i;

	if (!*cg)
		return;
	/* a killed process leaves its cgroup a moment later (longer on a
	 * loaded host) */
	for (i = 0; i < 3000 && rmdir(*cg) && errno == EBUSY; i++)
		th_sleep_ms(10);
	free(*cg);
	*cg = NULL;
}

#endif /* RINGPIPE_TEST_AGENT_HELPERS_H */
