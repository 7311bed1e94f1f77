// SPDX-License-Identifier: MIT
/*
 * The commands' shared helpers (see tool_util.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "duration.h"
#include "tool_util.h"

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

int tool_parse_pid(const char *cmd, const char *s, pid_t *pid)
{
	uint64_t n;

	if (tool_parse_u64(s, 0x7fffffff, &n) || !n)
		return tool_err(cmd, "-p takes a process id (a whole number > 0), not '%s'", s), 2;
	*pid = (pid_t)n;
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
