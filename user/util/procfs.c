// SPDX-License-Identifier: MIT
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "procfs.h"

int rp_proc_stat_read(int dirfd, const char *path, struct rp_proc_stat *st)
{
	char *l, *r, *p;
	ssize_t n;
	int fd;

	st->nfields = 0;
	fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT || errno == ESRCH ? -ESRCH : -errno;
	/* the kernel gives the whole line to one read */
	n = read(fd, st->line, sizeof(st->line) - 1);
	close(fd);
	if (n < 0)
		return errno == ESRCH ? -ESRCH : -errno;
	if (n == 0)
		return -ESRCH;
	st->line[n] = 0;
	l = strchr(st->line, '(');
	r = strrchr(st->line, ')');
	if (!l || !r || r < l || r[1] != ' ' || !r[2])
		return -EBADMSG;
	snprintf(st->comm, sizeof(st->comm), "%.*s", (int)(r - l - 1), l + 1);
	st->nfields = 2;
	for (p = r + 2; *p && *p != '\n' && st->nfields < RP_PROC_STAT_FIELDS;) {
		char *sp = p + strcspn(p, " \n");

		st->field[++st->nfields] = p;
		if (!*sp)
			break;
		*sp = 0;
		p = sp + 1;
	}
	if (st->nfields < 3)	/* nothing after the command */
		return -EBADMSG;
	st->state = st->field[3][0];
	return 0;
}

uint64_t rp_proc_stat_u64(const struct rp_proc_stat *st, unsigned int n, uint64_t dflt)
{
	const char *f;
	char *e;
	uint64_t v;

	if (n < 3 || n > st->nfields)
		return dflt;
	f = st->field[n];
	/* priorities and exit codes may be negative: their bits */
	v = *f == '-' ? (uint64_t)strtoll(f, &e, 10) : strtoull(f, &e, 10);
	return e == f || *e ? dflt : v;
}
