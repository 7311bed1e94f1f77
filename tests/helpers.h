/* SPDX-License-Identifier: MIT */
/*
 * Test helpers: temporary files, running commands, locating the shared test
 * data and the TraceEvent dumper, and decisions to skip (with a reason).
 */
#ifndef RINGPIPE_TEST_HELPERS_H
#define RINGPIPE_TEST_HELPERS_H

#include "criterion_compat.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bytebuf.h"

static inline const char *th_env(const char *name, const char *dflt)
{
	const char *v = getenv(name);

	return v && *v ? v : dflt;
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

#endif /* RINGPIPE_TEST_HELPERS_H */
