/* SPDX-License-Identifier: MIT */
/*
 * /proc/PID/stat and /proc/PID/task/TID/stat, read once and split: the one
 * reader of the library and the tools. The command (field 2) may hold
 * spaces and parentheses, so the fields are counted from its last ')'.
 * Field numbers are proc(5)'s: 3 the state, 9 the flags, 22 the start time
 * in clock ticks, 52 the exit code.
 */
#ifndef RINGPIPE_UTIL_PROCFS_H
#define RINGPIPE_UTIL_PROCFS_H

#include <stdint.h>

#define RP_PROC_STAT_FIELDS 52

struct rp_proc_stat {
	char comm[64];		/* field 2, without its parentheses */
	char state;		/* field 3: R, S, D, T, t, Z, X, ... */
	unsigned int nfields;	/* the last field found (2 when only the command) */
	const char *field[RP_PROC_STAT_FIELDS + 1];	/* field[n], n >= 3: in line */
	char line[2048];
};

/*
 * Reads the stat file at path, relative to dirfd (AT_FDCWD for an absolute
 * path), into st. 0; -ESRCH when the process or thread is gone (the file
 * missing, or the read refused with ESRCH); -EBADMSG when the line does not
 * parse; another -errno when it cannot be read.
 */
int rp_proc_stat_read(int dirfd, const char *path, struct rp_proc_stat *st);

/* Field n (3 to RP_PROC_STAT_FIELDS) as an unsigned number, or dflt when
 * the line has no such field or it is not a number. */
uint64_t rp_proc_stat_u64(const struct rp_proc_stat *st, unsigned int n, uint64_t dflt);

#endif
