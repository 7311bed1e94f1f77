/* SPDX-License-Identifier: MIT */
/*
 * Driving the write storm of tests/progs/stall_producer.c and disturbing it:
 * what test_stall.c (which asserts) and bench/bench_stall.c (which measures)
 * share. Nothing here asserts: functions return 0 or a negative errno, and
 * leave what went wrong in stall_err for the caller's message.
 *
 * The disturbances are the kernel's own: SIGSTOP and SIGCONT, a cgroup v2
 * freeze (cgroup.freeze, waited for in cgroup.events) or the cgroup v1
 * freezer (freezer.state), a CPU quota (cpu.max on cgroup v2 where its cpu
 * controller is enabled, else cpu.cfs_quota_us on cgroup v1), and a reader
 * process on the far side of a pipe stopped with SIGSTOP. Waits are bounded
 * by deadlines of minutes, which only turn a hang into an error.
 */
#ifndef RINGPIPE_TEST_STALL_H
#define RINGPIPE_TEST_STALL_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char stall_err[512];	/* why the last call failed */

static inline int stall_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline int stall_fail(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(stall_err, sizeof(stall_err), fmt, ap);
	va_end(ap);
	return err;
}

static inline uint64_t stall_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void stall_sleep_ms(unsigned int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* A program beside the running one: dir(/proc/self/exe)/rel, or $env;
 * in path. */
static inline const char *stall_beside_exe(const char *env, const char *rel, char *path,
					   size_t len)
{
	const char *v = getenv(env);
	ssize_t n;

	if (v && *v)
		return v;
	n = readlink("/proc/self/exe", path, len - 1);
	if (n <= 0)
		return rel;
	path[n] = 0;
	*strrchr(path, '/') = 0;
	if (strlen(path) + 1 + strlen(rel) >= len)
		return rel;
	strcat(path, "/");
	strcat(path, rel);
	return path;
}

/* ---- files of the cgroup filesystems ---------------------------------- */

static inline int stall_write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return stall_fail(-errno, "open %s: %s", path, strerror(errno));
	n = write(fd, text, strlen(text));
	if (n < 0) {
		int e = errno;

		close(fd);
		return stall_fail(-e, "write '%s' to %s: %s", text, path, strerror(e));
	}
	close(fd);
	return 0;
}

static inline int stall_read_file(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return stall_fail(-errno, "open %s: %s", path, strerror(errno));
	n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return stall_fail(-errno, "read %s: %s", path, strerror(errno));
	buf[n] = 0;
	return 0;
}

/* Until file holds want (a line of it, or the whole text with whole), or
 * timeout_ms passed. The cgroup files say when a freeze has taken hold. */
static inline int stall_wait_file(const char *path, const char *want, bool whole, int timeout_ms)
{
	uint64_t end = stall_now_ns() + (uint64_t)timeout_ms * 1000000;
	char buf[1024];

	for (;;) {
		int err = stall_read_file(path, buf, sizeof(buf));

		if (err)
			return err;
		if (whole ? !strcmp(buf, want) : (strstr(buf, want) != NULL))
			return 0;
		if (stall_now_ns() > end)
			return stall_fail(-ETIMEDOUT, "%s never said '%s' in %d ms: '%s'", path,
					  want, timeout_ms, buf);
		stall_sleep_ms(1);
	}
}

/* The mount point of the cgroup2 hierarchy (v2 != 0) or of the v1
 * hierarchy with controller (v2 == 0); NULL when there is none. */
static inline const char *stall_cgroup_mount(bool v2, const char *controller, char *out,
					     size_t len)
{
	FILE *f = fopen("/proc/self/mounts", "r");
	char dev[256], dir[256], type[64], opts[1024];
	const char *found = NULL;

	if (!f)
		return NULL;
	while (fscanf(f, "%255s %255s %63s %1023s %*d %*d", dev, dir, type, opts) == 4) {
		char *o, *save = NULL;
		bool has = false;

		if (strcmp(type, v2 ? "cgroup2" : "cgroup"))
			continue;
		for (o = strtok_r(opts, ",", &save); !v2 && o; o = strtok_r(NULL, ",", &save))
			has |= !strcmp(o, controller);
		if ((v2 || has) && strlen(dir) < len) {
			memcpy(out, dir, strlen(dir) + 1);
			found = out;
			break;
		}
	}
	fclose(f);
	return found;
}

/* Whether the cgroup v2 directory's children can have controller (it is
 * in its cgroup.subtree_control). */
static inline bool stall_cgroup2_delegates(const char *dir, const char *controller)
{
	char path[PATH_MAX], buf[1024], *w, *save = NULL;

	snprintf(path, sizeof(path), "%s/cgroup.subtree_control", dir);
	if (stall_read_file(path, buf, sizeof(buf)))
		return false;
	for (w = strtok_r(buf, " \n", &save); w; w = strtok_r(NULL, " \n", &save))
		if (!strcmp(w, controller))
			return true;
	return false;
}

/*
 * A cgroup for one run, made under mount: ringpipe-stall-PID-N, PID the
 * maker's. Those of makers that are gone (a test killed by its timeout
 * before it cleaned up) are removed first, when empty: an rmdir of a cgroup
 * that still has processes fails, and it is left alone.
 */
static inline int stall_cgroup_make(const char *mount, char *out, size_t len)
{
	static unsigned int nth;
	DIR *d = opendir(mount);
	struct dirent *de;

	if (!d)
		return stall_fail(-errno, "opendir %s: %s", mount, strerror(errno));
	while ((de = readdir(d))) {
		char old[PATH_MAX];
		int maker;

		if (sscanf(de->d_name, "ringpipe-stall-%d-", &maker) != 1 || maker <= 0 ||
		    !kill(maker, 0) || errno != ESRCH)
			continue;
		if ((size_t)snprintf(old, sizeof(old), "%s/%s", mount, de->d_name) < sizeof(old))
			rmdir(old);
	}
	closedir(d);
	if ((size_t)snprintf(out, len, "%s/ringpipe-stall-%d-%u", mount, (int)getpid(), ++nth) >=
	    len)
		return stall_fail(-ENAMETOOLONG, "%s: a cgroup's path too long", mount);
	if (mkdir(out, 0755))
		return stall_fail(-errno, "mkdir %s: %s", out, strerror(errno));
	return 0;
}

/* The cgroup removed, once the processes in it are gone (reaped: a zombie
 * leaves its cgroup a moment after it was killed). */
static inline void stall_cgroup_remove(char *path)
{
	int i;

	if (!path[0])
		return;
	for (i = 0; i < 500 && rmdir(path) && errno == EBUSY; i++)
		stall_sleep_ms(10);
	path[0] = 0;
}

enum stall_freezer {
	STALL_FREEZER_V2,	/* cgroup.freeze */
	STALL_FREEZER_V1,	/* freezer.state */
};

/* Freezes (on) or thaws the cgroup dir, and waits until the kernel says
 * every task of it is frozen, or thawed. */
static inline int stall_freeze(enum stall_freezer kind, const char *dir, bool on)
{
	char file[PATH_MAX], state[PATH_MAX];
	int err;

	if (kind == STALL_FREEZER_V2) {
		snprintf(file, sizeof(file), "%s/cgroup.freeze", dir);
		snprintf(state, sizeof(state), "%s/cgroup.events", dir);
		err = stall_write_file(file, on ? "1" : "0");
		return err ? err : stall_wait_file(state, on ? "frozen 1\n" : "frozen 0\n", false,
						   120000);
	}
	snprintf(file, sizeof(file), "%s/freezer.state", dir);
	err = stall_write_file(file, on ? "FROZEN" : "THAWED");
	return err ? err : stall_wait_file(file, on ? "FROZEN\n" : "THAWED\n", true, 120000);
}

enum stall_cpu {
	STALL_CPU_V2,		/* cpu.max */
	STALL_CPU_V1,		/* cpu.cfs_quota_us over cpu.cfs_period_us */
};

/* Limits the cgroup dir to pct % of one CPU (0: no limit). */
static inline int stall_throttle(enum stall_cpu kind, const char *dir, unsigned int pct)
{
	char file[PATH_MAX], v[64];
	int err;

	if (kind == STALL_CPU_V2) {
		snprintf(file, sizeof(file), "%s/cpu.max", dir);
		if (pct)
			snprintf(v, sizeof(v), "%u 100000", pct * 1000);
		else
			snprintf(v, sizeof(v), "max 100000");
		return stall_write_file(file, v);
	}
	snprintf(file, sizeof(file), "%s/cpu.cfs_period_us", dir);
	err = stall_write_file(file, "100000");
	if (err)
		return err;
	snprintf(file, sizeof(file), "%s/cpu.cfs_quota_us", dir);
	snprintf(v, sizeof(v), "%d", pct ? (int)pct * 1000 : -1);
	return stall_write_file(file, v);
}

/* ---- the producer ------------------------------------------------------ */

struct stall_prod_opts {
	const char *bin;		/* stall_producer */
	const char *output;		/* its trace: a path, or "-" for out_fd */
	int out_fd;			/* with "-": its stdout */
	const char *agent_sock;		/* else: joins the agent on this socket */
	const char *cgroups[2];		/* cgroup directories it starts in */
	int threads;			/* 0: its default */
	const char *log;		/* its stderr (appended), or NULL */
};

struct stall_prod {
	pid_t pid;
	int report;			/* its fd 3 */
	int control;			/* its fd 4 */
	char buf[16384];		/* report bytes not taken as lines yet */
	size_t len;
};

#define STALL_MAX_THREADS 64

struct stall_result {
	uint64_t ok, failed, enobufs, other, waits, wait_ns, wait_max_ns;
	int other_rc, stop_rc;
	long long written;		/* the session's events_written; -1: agent */
	int ndropped;			/* reasons in dropped[]: 0 with an agent */
	uint64_t dropped[16];
	int nthreads;
	struct {
		int tid;
		uint64_t ok, failed;
	} thread[STALL_MAX_THREADS];
};

/* In the child: into the cgroups, its fds in place, then the program. */
static inline void stall_prod_exec(const struct stall_prod_opts *o, int rep, int ctl)
{
	char *argv[16], threads[16], pid[16];
	int n = 0, i, fd;

	/* a test that ends early leaves no storm behind */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	for (i = 0; i < 2; i++) {
		char procs[PATH_MAX];

		if (!o->cgroups[i])
			continue;
		snprintf(procs, sizeof(procs), "%s/cgroup.procs", o->cgroups[i]);
		if (stall_write_file(procs, pid)) {
			fprintf(stderr, "stall_producer's start: %s\n", stall_err);
			_exit(126);
		}
	}
	if (o->log && (fd = open(o->log, O_WRONLY | O_CREAT | O_APPEND, 0644)) >= 0) {
		dup2(fd, 2);
		close(fd);
	}
	if (o->out_fd >= 0 && o->output && !strcmp(o->output, "-"))
		dup2(o->out_fd, 1);
	/* fds 3 and 4 may be where the pipes are: move them out of the way */
	rep = fcntl(rep, F_DUPFD_CLOEXEC, 10);
	ctl = fcntl(ctl, F_DUPFD_CLOEXEC, 10);
	dup2(rep, 3);
	dup2(ctl, 4);
	setenv("RINGPIPE_AGENT", o->agent_sock ? o->agent_sock : "0", 1);
	argv[n++] = (char *)o->bin;
	if (o->agent_sock) {
		argv[n++] = "--agent";
	} else {
		argv[n++] = "--output";
		argv[n++] = (char *)o->output;
	}
	if (o->threads) {
		snprintf(threads, sizeof(threads), "%d", o->threads);
		argv[n++] = "--threads";
		argv[n++] = threads;
	}
	argv[n] = NULL;
	execv(o->bin, argv);
	fprintf(stderr, "exec %s: %s\n", o->bin, strerror(errno));
	_exit(127);
}

static inline int stall_prod_start(struct stall_prod *p, const struct stall_prod_opts *o)
{
	int rep[2], ctl[2];

	memset(p, 0, sizeof(*p));
	p->report = p->control = -1;
	/* a command to a producer that already ended is an error, not death */
	signal(SIGPIPE, SIG_IGN);
	if (access(o->bin, X_OK))
		return stall_fail(-errno, "%s: %s (make builds it)", o->bin, strerror(errno));
	if (pipe2(rep, O_CLOEXEC) || pipe2(ctl, O_CLOEXEC))
		return stall_fail(-errno, "pipe: %s", strerror(errno));
	p->pid = fork();
	if (p->pid < 0)
		return stall_fail(-errno, "fork: %s", strerror(errno));
	if (p->pid == 0)
		stall_prod_exec(o, rep[1], ctl[0]);
	close(rep[1]);
	close(ctl[0]);
	p->report = rep[0];
	p->control = ctl[1];
	return 0;
}

/* How the producer ended, when it did (reaped here: p->pid becomes 0), for
 * a message: "" while it runs. */
static inline const char *stall_prod_end(struct stall_prod *p)
{
	static char how[64];
	int st = 0;

	how[0] = 0;
	if (p->pid > 0 && waitpid(p->pid, &st, WNOHANG) == p->pid) {
		p->pid = 0;
		if (WIFSIGNALED(st))
			snprintf(how, sizeof(how), ", killed by signal %d", WTERMSIG(st));
		else
			snprintf(how, sizeof(how), ", exit status %d", WEXITSTATUS(st));
	}
	return how;
}

/* The next line of the report (without its newline) into line, waiting
 * up to timeout_ms for it. */
static inline int stall_prod_line(struct stall_prod *p, char *line, size_t len, int timeout_ms)
{
	uint64_t end = stall_now_ns() + (uint64_t)timeout_ms * 1000000;

	for (;;) {
		char *nl = memchr(p->buf, '\n', p->len);
		struct pollfd pfd = { .fd = p->report, .events = POLLIN };
		uint64_t now;
		ssize_t n;

		if (nl) {
			size_t k = (size_t)(nl - p->buf);

			snprintf(line, len, "%.*s", (int)k, p->buf);
			memmove(p->buf, nl + 1, p->len - k - 1);
			p->len -= k + 1;
			return 0;
		}
		now = stall_now_ns();
		if (now >= end)
			return stall_fail(-ETIMEDOUT, "stall_producer said nothing more in %d ms "
					  "(so far: '%.*s')", timeout_ms, (int)p->len, p->buf);
		if (poll(&pfd, 1, (int)((end - now) / 1000000) + 1) < 0 && errno != EINTR)
			return stall_fail(-errno, "poll: %s", strerror(errno));
		if (!(pfd.revents & (POLLIN | POLLHUP)))
			continue;
		if (p->len == sizeof(p->buf))
			return stall_fail(-EOVERFLOW, "a report line too long");
		n = read(p->report, p->buf + p->len, sizeof(p->buf) - p->len);
		if (n == 0) {
			stall_sleep_ms(100);	/* to be reaped, for its status */
			return stall_fail(-EPIPE, "stall_producer ended%s (so far: '%.*s')",
					  stall_prod_end(p), (int)p->len, p->buf);
		}
		if (n > 0)
			p->len += (size_t)n;
	}
}

/* Waits for a line that starts with prefix (lines before it are passed
 * over); the line in line. */
static inline int stall_prod_expect(struct stall_prod *p, const char *prefix, char *line,
				    size_t len, int timeout_ms)
{
	for (;;) {
		int err = stall_prod_line(p, line, len, timeout_ms);

		if (err)
			return err;
		if (!strncmp(line, prefix, strlen(prefix)))
			return 0;
		if (!strncmp(line, "done ", 5))
			return stall_fail(-EPIPE, "stall_producer ended before it said '%s': %s",
					  prefix, line);
	}
}

static inline int stall_prod_send(struct stall_prod *p, const char *cmd)
{
	size_t n = strlen(cmd);

	if (write(p->control, cmd, n) != (ssize_t)n) {
		int e = errno;

		stall_sleep_ms(100);	/* to be reaped, for its status */
		return stall_fail(-e, "telling stall_producer '%.*s': %s%s", (int)n - 1, cmd,
				  strerror(e), stall_prod_end(p));
	}
	return 0;
}

static inline uint64_t stall_field(const char *line, const char *key)
{
	char k[64];
	const char *at;

	snprintf(k, sizeof(k), " %s=", key);
	at = strstr(line, k);
	return at ? strtoull(at + strlen(k), NULL, 10) : 0;
}

/* Reads the end of the run ("thread" lines, then "done") into r. */
static inline int stall_prod_result(struct stall_prod *p, struct stall_result *r, int timeout_ms)
{
	char line[1024], *d;

	memset(r, 0, sizeof(*r));
	for (;;) {
		int err = stall_prod_line(p, line, sizeof(line), timeout_ms), i;

		if (err)
			return err;
		if (sscanf(line, "thread %d", &i) == 1 && i >= 0 && i < STALL_MAX_THREADS) {
			r->thread[i].tid = (int)stall_field(line, "tid");
			r->thread[i].ok = stall_field(line, "ok");
			r->thread[i].failed = stall_field(line, "failed");
			if (i + 1 > r->nthreads)
				r->nthreads = i + 1;
			continue;
		}
		if (strncmp(line, "done ", 5))
			continue;
		r->ok = stall_field(line, "ok");
		r->failed = stall_field(line, "failed");
		r->enobufs = stall_field(line, "enobufs");
		r->other = stall_field(line, "other");
		r->other_rc = atoi(strstr(line, " other_rc=") + 10);
		r->waits = stall_field(line, "waits");
		r->wait_ns = stall_field(line, "wait_ns");
		r->wait_max_ns = stall_field(line, "wait_max_ns");
		r->written = atoll(strstr(line, " written=") + 9);
		r->stop_rc = atoi(strstr(line, " stop=") + 6);
		for (d = strstr(line, " dropped=") + 9; *d >= '0' && *d <= '9' && r->ndropped < 16;
		     d += *d == ',') {
			r->dropped[r->ndropped++] = strtoull(d, &d, 10);
		}
		return 0;
	}
}

/* Its end, waited for: 0 when it exited with status 0. */
static inline int stall_prod_wait(struct stall_prod *p, int timeout_ms)
{
	uint64_t end = stall_now_ns() + (uint64_t)timeout_ms * 1000000;
	int st = 0;
	pid_t w;

	while ((w = waitpid(p->pid, &st, WNOHANG)) == 0) {
		if (stall_now_ns() > end)
			return stall_fail(-ETIMEDOUT, "stall_producer did not exit in %d ms",
					  timeout_ms);
		stall_sleep_ms(5);
	}
	if (w < 0)
		return stall_fail(-errno, "waitpid: %s", strerror(errno));
	p->pid = 0;
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		return stall_fail(-ECHILD, "stall_producer ended with status 0x%x", st);
	return 0;
}

/* Killed (also while stopped) and reaped; its pipes closed. Accepts a
 * producer never started. */
static inline void stall_prod_kill(struct stall_prod *p)
{
	if (p->pid > 0) {
		kill(p->pid, SIGKILL);
		kill(p->pid, SIGCONT);
		waitpid(p->pid, NULL, 0);
	}
	p->pid = 0;
	if (p->report >= 0)
		close(p->report);
	if (p->control >= 0)
		close(p->control);
	p->report = p->control = -1;
}

/* ---- the agent's figures ---------------------------------------------- */

struct stall_agent_figures {
	bool seen;
	uint64_t events, lost, lost_full, lost_aborted, corrupt;
};

static inline uint64_t stall_json_u64(const char *from, const char *key)
{
	const char *at = strstr(from, key);

	return at ? strtoull(at + strlen(key), NULL, 10) : UINT64_MAX;
}

/* pid's entry in `ringpipe agent status --json`'s text (its first: the
 * live one, or the latest that ended). */
static inline struct stall_agent_figures stall_agent_parse(const char *status, pid_t pid)
{
	struct stall_agent_figures f = { 0 };
	char key[32];
	const char *at;

	snprintf(key, sizeof(key), "{\"pid\":%d,", (int)pid);
	at = strstr(status, key);
	if (!at)
		return f;
	f.seen = true;
	f.events = stall_json_u64(at, "\"events\":");
	f.lost = stall_json_u64(at, "\"lost\":");
	f.lost_full = stall_json_u64(at, "\"lost_full\":");
	f.lost_aborted = stall_json_u64(at, "\"lost_aborted\":");
	f.corrupt = stall_json_u64(at, "\"corrupt\":");
	return f;
}

/* ---- a pipe's reader ---------------------------------------------------- */

/* cat(1) from in_fd into path: a reader process that can be stopped. */
static inline pid_t stall_reader_start(int in_fd, const char *path)
{
	pid_t pid = fork();

	if (pid == 0) {
		int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (fd < 0)
			_exit(126);
		dup2(in_fd, 0);
		dup2(fd, 1);
		execlp("cat", "cat", (char *)NULL);
		_exit(127);
	}
	return pid;
}

/* SIGSTOP, ms, SIGCONT: the stop waited for (the process is in state T)
 * before the time counts. */
static inline int stall_stop_for(pid_t pid, unsigned int ms)
{
	char path[64];
	int err;

	if (kill(pid, SIGSTOP))
		return stall_fail(-errno, "SIGSTOP %d: %s", (int)pid, strerror(errno));
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	/* "PID (comm) T ..." : comm has no ") " in any program used here */
	err = stall_wait_file(path, ") T ", false, 120000);
	if (err)
		return err;
	stall_sleep_ms(ms);
	if (kill(pid, SIGCONT))
		return stall_fail(-errno, "SIGCONT %d: %s", (int)pid, strerror(errno));
	return 0;
}

#endif /* RINGPIPE_TEST_STALL_H */
