/* SPDX-License-Identifier: MIT */
/*
 * Test helpers: temporary files, running commands, locating the shared test
 * data and the TraceEvent dumper, and decisions to skip (with a reason).
 */
#ifndef RINGPIPE_TEST_HELPERS_H
#define RINGPIPE_TEST_HELPERS_H

#include "criterion_compat.h"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bytebuf.h"
#include "ringpipe/ringpipe.h"

static inline const char *th_env(const char *name, const char *dflt)
{
	const char *v = getenv(name);

	return v && *v ? v : dflt;
}

/* Until the drainer of s has written at least `want` events, or timeout_ms
 * passed (a look every millisecond); *st holds the last stats read, for the
 * caller to judge. */
static inline void th_wait_written(struct rp_session *s, uint64_t want, unsigned int timeout_ms,
				   struct rp_session_stats *st)
{
	st->sz = sizeof(*st);
	for (unsigned int ms = 0;; ms++) {
		cr_assert_eq(rp_session_stats(s, st), 0);
		if (st->events_written >= want || ms >= timeout_ms)
			return;
		usleep(1000);
	}
}

/* A fresh directory under $TMPDIR, removed by th_rmdir(). */
static inline char *th_tmpdir(void)
{
	char *d = NULL;

	if (asprintf(&d, "%s/ringpipe-test-XXXXXX", th_env("TMPDIR", "/tmp")) < 0)
		return NULL;
	if (!mkdtemp(d)) {
		free(d);
		return NULL;
	}
	return d;
}

/* SIGKILL and reaped; *pid becomes 0. Accepts 0. */
static inline void th_kill_wait(pid_t *pid)
{
	if (*pid <= 0)
		return;
	kill(*pid, SIGKILL);
	waitpid(*pid, NULL, 0);
	*pid = 0;
}

static inline void th_rmdir(char *d)
{
	char *cmd = NULL;

	if (d && asprintf(&cmd, "rm -rf '%s'", d) >= 0 && system(cmd) == -1)
		perror("rm");
	free(cmd);
	free(d);
}

/* Runs a shell command, capturing stdout; returns the exit status (or -1). */
static inline int th_run(const char *cmd, struct bytebuf *out)
{
	FILE *f = popen(cmd, "r");
	char buf[65536];
	size_t n;
	int st;

	if (!f)
		return -1;
	while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
		if (out)
			bb_append(out, buf, n);
	st = pclose(f);
	if (out)
		bb_append(out, "", 1), out->len--;	/* keep it NUL-terminated */
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* A buffer's text, "" when it holds nothing. */
static inline const char *th_text(const struct bytebuf *b)
{
	return b->p ? (const char *)b->p : "";
}

/* th_run() of a formatted command. */
static inline int th_run_fmt(struct bytebuf *out, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static inline int th_run_fmt(struct bytebuf *out, const char *fmt, ...)
{
	va_list ap;
	char *cmd = NULL;
	int rc;

	va_start(ap, fmt);
	rc = vasprintf(&cmd, fmt, ap);
	va_end(ap);
	if (rc < 0)
		return -1;
	rc = th_run(cmd, out);
	free(cmd);
	return rc;
}

/* The count of KEY in TraceDump's `counts` output ("KEY\tN" lines), or 0. */
static inline uint64_t th_count_of(const char *counts, const char *key)
{
	char want[256];
	const char *at;

	snprintf(want, sizeof(want), "%s\t", key);
	for (at = strstr(counts, want); at; at = strstr(at + 1, want))
		if (at == counts || at[-1] == '\n')
			return strtoull(at + strlen(want), NULL, 10);
	return 0;
}

static inline int th_read_file(const char *path, struct bytebuf *out)
{
	FILE *f = fopen(path, "rb");
	char buf[65536];
	size_t n;

	if (!f)
		return -errno;
	while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
		bb_append(out, buf, n);
	fclose(f);
	bb_append(out, "", 1);
	out->len--;
	return 0;
}

static inline int th_write_file(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");

	if (!f)
		return -errno;
	if (fwrite(p, 1, n, f) != n) {
		fclose(f);
		return -EIO;
	}
	return fclose(f) ? -errno : 0;
}

static inline const char *th_shared(void)
{
	return th_env("RINGPIPE_SHARED", "../shared");
}

static inline const char *th_tool(void)
{
	return th_env("RINGPIPE_TOOL", ".output/default/ringpipe");
}

/* Runs `ringpipe ARGS 2>&1` into out; its exit status. */
static inline int th_tool_run(const char *args, struct bytebuf *out)
{
	char *cmd;
	int rc;

	if (asprintf(&cmd, "'%s' %s 2>&1", th_tool(), args) < 0)
		return -1;
	rc = th_run(cmd, out);
	free(cmd);
	return rc;
}

/*
 * The TraceEvent dumper, or NULL after cr_skip-ready reason in *why.
 * With RINGPIPE_REQUIRE_INTEROP=1 a missing dumper is a failure, not a skip.
 */
static inline const char *th_tracedump(const char **why)
{
	const char *dll = th_env("RINGPIPE_INTEROP_DLL", ".output/interop/TraceDump.dll");

	if (system("command -v dotnet >/dev/null 2>&1") != 0) {
		*why = "the .NET SDK (dotnet) is not installed, so TraceEvent cannot judge the trace";
		return NULL;
	}
	if (access(dll, R_OK) != 0) {
		*why = "the TraceEvent dumper is not built (make interop)";
		return NULL;
	}
	return dll;
}

/* Whether this process may load a BPF program and open a uprobe: root, or
 * CAP_BPF (39) with CAP_PERFMON (38), or CAP_SYS_ADMIN (21), which covers
 * both on older kernels. */
static inline bool th_has_bpf_privilege(void)
{
	struct bytebuf st = { 0 };
	const char *p;
	uint64_t eff = 0;

	if (geteuid() == 0)
		return true;
	if (th_read_file("/proc/self/status", &st) == 0 && (p = strstr(((char *)st.p), "CapEff:")))
		eff = strtoull(p + 7, NULL, 16);
	bb_free(&st);
	return (eff & (1ull << 21)) || ((eff & (1ull << 39)) && (eff & (1ull << 38)));
}

static inline bool th_require_interop(void)
{
	const char *v = getenv("RINGPIPE_REQUIRE_INTEROP");

	return v && !strcmp(v, "1");
}

#define TH_NEED_TRACEDUMP(var)                                                  \
	const char *var;                                                        \
	do {                                                                    \
		const char *why_ = NULL;                                        \
		var = th_tracedump(&why_);                                      \
		if (!var) {                                                     \
			if (th_require_interop())                               \
				cr_assert_fail("RINGPIPE_REQUIRE_INTEROP=1 but %s", why_); \
			cr_skip_test("%s", why_);                               \
		}                                                               \
	} while (0)

/* Where make deps installs dotnet-trace, dotnet-counters, dotnet-gcdump
 * (absolute: tests run the tools from temporary directories). */
static inline const char *th_dotnet_tools(void)
{
	static char abs[4096];
	const char *d = th_env("RINGPIPE_DOTNET_TOOLS", ".output/dotnet-tools");

	return realpath(d, abs) ? abs : d;
}

/* Skips (or fails, with RINGPIPE_REQUIRE_INTEROP=1) without the .NET tool. */
#define TH_NEED_DOTNET_TOOL(name)                                               \
	do {                                                                    \
		char *p_;                                                       \
		cr_assert(asprintf(&p_, "%s/%s", th_dotnet_tools(), name) > 0); \
		if (access(p_, X_OK)) {                                         \
			if (th_require_interop())                               \
				cr_assert_fail("RINGPIPE_REQUIRE_INTEROP=1 but %s is not " \
					       "installed (make deps installs it)", p_); \
			cr_skip_test("%s is not installed (make deps installs it with " \
				     "dotnet)", p_);                            \
		}                                                               \
		free(p_);                                                       \
	} while (0)

/* Skips (or, with RINGPIPE_REQUIRE_INTEROP=1, fails) with a reason. */
#define TH_SKIP_OR_FAIL(...)                                                    \
	do {                                                                    \
		if (th_require_interop())                                       \
			cr_assert_fail("RINGPIPE_REQUIRE_INTEROP=1 but " __VA_ARGS__); \
		cr_skip_test(__VA_ARGS__);                                      \
	} while (0)

#define TH_DOTNET_APP_DEFAULT ".output/interop-app/DotnetApp.dll"
#define TH_DOTNET_APP_SRC "tests/interop/DotnetApp/Program.cs"

/* Whether file a was modified before file b (or either is missing). */
static inline bool th_older_than(const char *a, const char *b)
{
	struct stat sa, sb;

	return stat(a, &sa) || stat(b, &sb) || sa.st_mtim.tv_sec < sb.st_mtim.tv_sec ||
	       (sa.st_mtim.tv_sec == sb.st_mtim.tv_sec && sa.st_mtim.tv_nsec < sb.st_mtim.tv_nsec);
}

/*
 * The DotnetApp assembly (tests/interop/DotnetApp, a .NET process to trace):
 * RINGPIPE_DOTNET_APP, or the default one, built (one build at a time: tests
 * run in parallel, and scripts/deps.sh builds it too) when it is missing or
 * older than its source. Skips when dotnet is missing or the build fails.
 */
static inline const char *th_dotnet_app(void)
{
	const char *dll = th_env("RINGPIPE_DOTNET_APP", TH_DOTNET_APP_DEFAULT);
	struct bytebuf out = { 0 };
	int lock, rc = 0;

	if (system("command -v dotnet >/dev/null 2>&1") != 0)
		TH_SKIP_OR_FAIL("the .NET SDK (dotnet) is not installed, so there is no .NET "
				"process to trace");
	if (strcmp(dll, TH_DOTNET_APP_DEFAULT)) {
		if (access(dll, R_OK))
			TH_SKIP_OR_FAIL("RINGPIPE_DOTNET_APP=%s does not exist", dll);
		return dll;
	}
	mkdir(".output", 0755);
	lock = open(".output/interop-app.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	cr_assert_geq(lock, 0);
	flock(lock, LOCK_EX);
	if (access(dll, R_OK) || th_older_than(dll, TH_DOTNET_APP_SRC))
		rc = th_run("dotnet build -nologo -v q -c Release tests/interop/DotnetApp "
			    "-o .output/interop-app 2>&1", &out);
	flock(lock, LOCK_UN);
	close(lock);
	if (rc != 0)
		TH_SKIP_OR_FAIL("tests/interop/DotnetApp does not build (exit %d): %.400s", rc,
				out.p ? (char *)out.p : "");
	bb_free(&out);
	return dll;
}

/* asprintf() that cannot fail a test silently; the caller frees. */
static inline char *th_fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static inline char *th_fmt(const char *f, ...)
{
	va_list ap;
	char *s = NULL;

	va_start(ap, f);
	cr_assert(vasprintf(&s, f, ap) > 0);
	va_end(ap);
	return s;
}

/* ---- a container's own /tmp ------------------------------------------- */

/* Adds path's real path to keep[] (n of max) when it lies under /tmp and
 * under no path kept already; a kept path under it gives way to it. */
static inline void th_keep_under_tmp(char **keep, size_t *n, size_t max, const char *path)
{
	char *real = path ? realpath(path, NULL) : NULL;
	size_t i, j, len;

	if (!real || strncmp(real, "/tmp/", 5)) {
		free(real);
		return;
	}
	len = strlen(real);
	for (i = 0; i < *n; i++) {
		size_t kl = strlen(keep[i]);

		if (!strncmp(real, keep[i], kl) && (real[kl] == '/' || !real[kl])) {
			free(real);
			return;
		}
	}
	for (i = j = 0; i < *n; i++) {
		if (!strncmp(keep[i], real, len) && keep[i][len] == '/')
			free(keep[i]);
		else
			keep[j++] = keep[i];
	}
	*n = j;
	if (*n < max)
		keep[(*n)++] = real;
	else
		free(real);
}

/*
 * A shell command for a container's first moments (after unshare -m, whose
 * mounts are private): an empty tmpfs over /tmp, as a pod has, with what
 * the test runs from this tree bound into it at the same paths (the
 * checkout, the build output with the test binaries and the tools, the .NET
 * tools and programs, the shared docs). A checkout under /tmp would be
 * hidden by the tmpfs otherwise, and the container could exec nothing of
 * it. The new /tmp is built in stage (a directory of the test's own, made
 * if missing) and moved over /tmp. The caller frees the string; it holds
 * no single quote, so it fits in sh -c '...'.
 */
static inline char *th_private_tmp_cmd(const char *stage)
{
	const char *dll = th_env("RINGPIPE_INTEROP_DLL", ".output/interop/TraceDump.dll");
	const char *app = th_env("RINGPIPE_DOTNET_APP", ".output/interop-app/DotnetApp.dll");
	char *keep[16], exe[4096], *cmd = NULL, *more;
	const char *dirs[] = { ".", exe, th_env("RINGPIPE_TOOL", ".output/default/ringpipe"),
			       th_env("RINGPIPE_DEMO", ".output/default/ringpipe-demo"), dll, app,
			       th_env("RINGPIPE_DOTNET_TOOLS", ".output/dotnet-tools"),
			       th_env("RINGPIPE_SHARED", "../shared") };
	ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	size_t n = 0, i;

	exe[len > 0 ? len : 0] = 0;
	for (i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		char *d = strdup(dirs[i]), *slash;
		struct stat sb;

		cr_assert_not_null(d);
		/* a file's directory: a binary's neighbours come with it */
		if (!stat(d, &sb) && !S_ISDIR(sb.st_mode) && (slash = strrchr(d, '/')))
			*slash = 0;
		th_keep_under_tmp(keep, &n, sizeof(keep) / sizeof(keep[0]), d);
		free(d);
	}
	if (!n)
		return th_fmt("mount -t tmpfs tmpfs /tmp");
	cmd = th_fmt("mkdir -p \"%s\" && mount -t tmpfs tmpfs \"%s\"", stage, stage);
	for (i = 0; i < n; i++) {
		more = th_fmt("%s && mkdir -p \"%s%s\" && mount --bind \"%s\" \"%s%s\"", cmd, stage,
			      keep[i] + 4, keep[i], stage, keep[i] + 4);
		free(cmd);
		free(keep[i]);
		cmd = more;
	}
	more = th_fmt("%s && mount --move \"%s\" /tmp", cmd, stage);
	free(cmd);
	return more;
}

/* ---- ringpipe-demo ---------------------------------------------------- */

static inline const char *th_demo_bin(void)
{
	return th_env("RINGPIPE_DEMO", ".output/default/ringpipe-demo");
}

struct th_demo {
	pid_t pid;
	char out[512], err[512];	/* its stdout and stderr, in dir */
};

/* Starts the demo with extra (NULL-terminated) options, its output in
 * dir/demo.out and dir/demo.err; returns once its socket exists. */
static inline void th_demo_start(struct th_demo *d, const char *dir, char *const extra[])
{
	char *argv[40];
	int n = 0, i;

	snprintf(d->out, sizeof(d->out), "%s/demo.out", dir);
	snprintf(d->err, sizeof(d->err), "%s/demo.err", dir);
	argv[n++] = (char *)"ringpipe-demo";
	for (i = 0; extra[i] && n < 38; i++)
		argv[n++] = extra[i];
	argv[n] = NULL;
	d->pid = fork();
	if (d->pid == 0) {
		int fo = open(d->out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		int fe = open(d->err, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		dup2(fo, 1);
		dup2(fe, 2);
		/* a test that fails before th_demo_stop() leaves no demo running */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		execv(th_demo_bin(), argv);
		_exit(127);
	}
	cr_assert_gt(d->pid, 0);
	for (i = 0; i < 1000; i++) {
		struct bytebuf b = { 0 };
		bool up;

		th_read_file(d->out, &b);
		up = b.p && strstr((char *)b.p, "socket ");
		bb_free(&b);
		if (up)
			return;
		usleep(10000);
	}
	cr_assert_fail("ringpipe-demo did not start its diagnostics server");
}

static inline void th_demo_stop(struct th_demo *d)
{
	int st;

	kill(d->pid, SIGTERM);
	waitpid(d->pid, &st, 0);
	cr_assert(WIFEXITED(st), "ringpipe-demo did not exit cleanly");
}

#endif /* RINGPIPE_TEST_HELPERS_H */
