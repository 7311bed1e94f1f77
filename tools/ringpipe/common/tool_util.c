// SPDX-License-Identifier: MIT
/*
 * The commands' shared helpers (see tool_util.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "util/duration.h"
#include "common/tool_util.h"

int tool_err(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "ringpipe %s: ", cmd);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return 1;
}

void tool_progress_init(struct tool_progress *p, const char *cmd)
{
	memset(p, 0, sizeof(*p));
	p->cmd = cmd;
	p->passes = 1;
	p->on = isatty(STDERR_FILENO) == 1;
}

void tool_progress(struct tool_progress *p, uint64_t done, uint64_t total)
{
	static const char *const unit[] = { "bytes", "KiB", "MiB", "GiB", "TiB" };
	double size = (double)total / (p->passes ? p->passes : 1);
	uint64_t now;
	int u = 0;

	/* the clock every 256 calls: per event, the check costs nothing */
	if (!p->on || (p->calls++ & 255))
		return;
	now = rp_clock_mono_ns();
	if (now < p->next_ns)
		return;
	p->next_ns = now + 200000000ull;
	while (size >= 1024 && u < 4) {
		size /= 1024;
		u++;
	}
	fprintf(stderr, "\rringpipe %s: %3u %% of %.*f %s\033[K", p->cmd,
		(unsigned)(total ? (done > total ? 100 : done * 100 / total) : 0), u ? 1 : 0, size,
		unit[u]);
	fflush(stderr);
	p->shown = true;
}

void tool_progress_end(struct tool_progress *p)
{
	if (p->shown)
		fputs("\r\033[K", stderr);
	p->shown = false;
}

void tool_say(bool quiet, const char *prefix, const char *fmt, ...)
{
	va_list ap;

	if (quiet)
		return;
	fputs(prefix, stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

int tool_set_err(char *err, size_t errlen, int rc, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return rc;
}

int tool_parse_u64(const char *s, uint64_t max, uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (!s || !*s || *s == '-' || *s == '+')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

int tool_parse_duration(const char *s, uint64_t max_ns, uint64_t *ns)
{
	uint64_t v;

	if (rp_duration_parse(s, &v) || !v || v > max_ns)
		return -EINVAL;
	*ns = v;
	return 0;
}

int tool_parse_block_timeout(const char *s, uint32_t *ms)
{
	uint64_t ns = 0;

	if (strcmp(s, "0") && (tool_parse_duration(s, UINT32_MAX * 1000000ull, &ns) ||
			       ns < 1000000))
		return -EINVAL;
	*ms = (uint32_t)(ns / 1000000);
	return 0;
}

pid_t tool_spawn_held(const char *cmd, char **argv, int *go_fd)
{
	int p[2], e;
	pid_t pid;

	if (pipe2(p, O_CLOEXEC))
		return -1;
	pid = fork();
	if (pid < 0) {
		e = errno;
		close(p[0]);
		close(p[1]);
		errno = e;
		return -1;
	}
	if (pid == 0) {
		char b;

		close(p[1]);
		if (read(p[0], &b, 1) != 1)
			_exit(127);
		execvp(argv[0], argv);
		fprintf(stderr, "ringpipe %s: cannot run %s: %s\n", cmd, argv[0], strerror(errno));
		_exit(127);
	}
	close(p[0]);
	*go_fd = p[1];
	return pid;
}

static void tool_sanitize(char *s)
{
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || *s == '.' || *s == '-' || *s == '_'))
			*s = '_';
}

static const char *tool_basename(const char *path)
{
	const char *s = strrchr(path, '/');

	return s ? s + 1 : path;
}

void tool_program_name(const char *const *argv, size_t argc, char *out, size_t len)
{
	const char *prog = argc ? tool_basename(argv[0]) : "";
	size_t i;

	snprintf(out, len, "%s", prog);
	/* the host's name says nothing: the first .dll argument is the app */
	if (!strcmp(prog, "dotnet")) {
		for (i = 1; i < argc; i++) {
			const char *a = tool_basename(argv[i]);
			size_t n = strlen(a);

			if (n > 4 && !strcasecmp(a + n - 4, ".dll")) {
				snprintf(out, len, "%.*s", (int)(n - 4), a);
				break;
			}
		}
	}
	tool_sanitize(out);
	if (!*out)
		snprintf(out, len, "process");
}

void tool_process_name(pid_t pid, char *out, size_t len)
{
	const char *args[64];
	char path[64], buf[4096];
	size_t n = 0, argc = 0, i;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
	f = fopen(path, "re");
	if (f) {
		n = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
	}
	buf[n] = 0;
	for (i = 0; i < n && argc < sizeof(args) / sizeof(*args); i += strlen(buf + i) + 1)
		args[argc++] = buf + i;
	if (!argc) {
		/* a kernel thread or a zombie: its comm */
		snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
		f = fopen(path, "re");
		if (f) {
			if (fgets(buf, sizeof(buf), f)) {
				buf[strcspn(buf, "\n")] = 0;
				args[argc++] = buf;
			}
			fclose(f);
		}
	}
	tool_program_name(args, argc, out, len);
}

void tool_output_name(const char *name, pid_t pid, const char *suffix, char *out, size_t len)
{
	time_t now = time(NULL);
	char stamp[32] = "";
	struct tm tm;

	if (localtime_r(&now, &tm))
		strftime(stamp, sizeof(stamp), "%Y%m%d_%H%M%S", &tm);
	snprintf(out, len, "%s_%d_%s%s", name, (int)pid, stamp, suffix);
}

int tool_write_all(int fd, const void *buf, size_t n)
{
	const uint8_t *p = buf;

	while (n) {
		ssize_t w = write(fd, p, n);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}
