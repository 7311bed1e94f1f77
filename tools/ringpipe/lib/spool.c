// SPDX-License-Identifier: MIT
/*
 * The egress spool (spool.h): one file per batch, written whole or not at
 * all, and an index of them in memory, oldest first.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "spool.h"
#include "tool_util.h"

#define SPOOL_MAGIC "RPSPOOL1"
#define NUM_DIGITS 20		/* UINT64_MAX in decimal */

/* The header in front of a batch's bytes; integers little-endian (this
 * host's), since only this host reads its spool. */
struct spool_hdr {
	char magic[8];
	uint64_t num;
	uint64_t len;
	uint64_t sum;		/* FNV-1a of the bytes */
};

_Static_assert(sizeof(struct spool_hdr) == 32, "spool header layout");

struct entry {
	uint64_t num;
	uint64_t bytes;		/* the file's size */
};

struct spool {
	int dirfd, lockfd;
	uint64_t max_bytes, next_num;
	struct entry *v;	/* oldest first */
	size_t n, cap;
	struct spool_stats st;
};

static uint64_t checksum(const void *p, size_t n)
{
	const unsigned char *b = p;
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

static void file_name(uint64_t num, const char *suffix, char *out, size_t len)
{
	snprintf(out, len, "%0*" PRIu64 ".batch%s", NUM_DIGITS, num, suffix);
}

/* A batch file's number, or false for any other name. */
static bool parse_name(const char *name, uint64_t *num)
{
	char digits[NUM_DIGITS + 1];

	if (strlen(name) != NUM_DIGITS + strlen(".batch") || strcmp(name + NUM_DIGITS, ".batch"))
		return false;
	memcpy(digits, name, NUM_DIGITS);
	digits[NUM_DIGITS] = '\0';
	return !tool_parse_u64(digits, UINT64_MAX, num);
}

/* Flushes the directory, so a rename or a new name in it is on disk. */
static int sync_dir(struct spool *s)
{
	return fsync(s->dirfd) < 0 && errno != EINVAL ? -errno : 0;
}

/* Sets batch file num aside as .bad (kept for a look, never sent again). */
static void set_aside(struct spool *s, uint64_t num)
{
	char from[64], to[64];

	file_name(num, "", from, sizeof(from));
	file_name(num, ".bad", to, sizeof(to));
	if (renameat(s->dirfd, from, s->dirfd, to) < 0)
		unlinkat(s->dirfd, from, 0);
	s->st.damaged++;
}

static int index_add(struct spool *s, uint64_t num, uint64_t bytes)
{
	size_t i;

	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 64;
		struct entry *v = realloc(s->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		s->v = v;
		s->cap = cap;
	}
	/* found in directory order, put oldest first; new ones go last */
	for (i = s->n; i > 0 && s->v[i - 1].num > num; i--)
		s->v[i] = s->v[i - 1];
	s->v[i] = (struct entry){ num, bytes };
	s->n++;
	s->st.batches++;
	s->st.bytes += bytes;
	return 0;
}

static void index_remove(struct spool *s, size_t i)
{
	s->st.batches--;
	s->st.bytes -= s->v[i].bytes;
	memmove(s->v + i, s->v + i + 1, (s->n - i - 1) * sizeof(*s->v));
	s->n--;
}

/* Whether the file of batch num starts with a header that matches its name
 * and its size (the bytes are checked when they are read). */
static bool header_ok(struct spool *s, uint64_t num, uint64_t *size)
{
	char name[64];
	struct spool_hdr h;
	struct stat sb;
	bool ok;
	int fd;

	file_name(num, "", name, sizeof(name));
	fd = openat(s->dirfd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	ok = fstat(fd, &sb) == 0 && pread(fd, &h, sizeof(h), 0) == (ssize_t)sizeof(h) &&
	     !memcmp(h.magic, SPOOL_MAGIC, 8) && h.num == num &&
	     h.len == (uint64_t)sb.st_size - sizeof(h);
	close(fd);
	*size = ok ? (uint64_t)sb.st_size : 0;
	return ok;
}

/* Takes in what an earlier run left: batches, and .tmp files of batches
 * that were never written whole (removed). */
static int scan(struct spool *s, char *err, size_t errlen)
{
	int fd = dup(s->dirfd);
	struct dirent *de;
	DIR *d;

	if (fd < 0 || !(d = fdopendir(fd))) {
		int e = errno;

		if (fd >= 0)
			close(fd);
		tool_set_err(err, errlen, 0, "cannot list the spool: %s", strerror(e));
		return -e;
	}
	while ((de = readdir(d))) {
		const char *dot = strrchr(de->d_name, '.');
		uint64_t num, size;
		char digits[NUM_DIGITS + 1];

		if (dot && !strcmp(dot, ".tmp")) {
			unlinkat(s->dirfd, de->d_name, 0);
			continue;
		}
		if (dot && !strcmp(dot, ".bad") && dot - de->d_name == NUM_DIGITS + 6) {
			/* a later batch must not take a number set aside */
			memcpy(digits, de->d_name, NUM_DIGITS);
			digits[NUM_DIGITS] = '\0';
			if (!tool_parse_u64(digits, UINT64_MAX, &num) && num >= s->next_num)
				s->next_num = num + 1;
			continue;
		}
		if (!parse_name(de->d_name, &num))
			continue;
		if (num >= s->next_num)
			s->next_num = num + 1;
		if (!header_ok(s, num, &size)) {
			set_aside(s, num);
			continue;
		}
		if (index_add(s, num, size)) {
			closedir(d);
			tool_set_err(err, errlen, 0, "out of memory");
			return -ENOMEM;
		}
		s->st.found++;
	}
	closedir(d);
	return 0;
}

struct spool *spool_open(const struct spool_opts *o, char *err, size_t errlen)
{
	struct spool *s;
	int e;

	if (!o || o->sz < sizeof(*o) || !o->dir || !*o->dir) {
		tool_set_err(err, errlen, 0, "no spool directory given");
		errno = EINVAL;
		return NULL;
	}
	if (mkdir(o->dir, 0700) < 0 && errno != EEXIST) {
		e = errno;
		tool_set_err(err, errlen, 0, "cannot create the spool directory %s: %s", o->dir,
			     strerror(e));
		errno = e;
		return NULL;
	}
	s = calloc(1, sizeof(*s));
	if (!s) {
		tool_set_err(err, errlen, 0, "out of memory");
		errno = ENOMEM;
		return NULL;
	}
	s->max_bytes = o->max_bytes;
	s->lockfd = -1;
	s->dirfd = open(o->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (s->dirfd < 0) {
		e = errno;
		tool_set_err(err, errlen, 0, "cannot open the spool directory %s: %s", o->dir,
			     strerror(e));
		goto fail;
	}
	/* two senders on one spool would each send and remove the other's */
	s->lockfd = openat(s->dirfd, ".lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (s->lockfd < 0 || flock(s->lockfd, LOCK_EX | LOCK_NB) < 0) {
		e = errno;
		if (e == EWOULDBLOCK) {
			tool_set_err(err, errlen, 0, "the spool %s is in use by another process",
				     o->dir);
			e = EBUSY;
		} else {
			tool_set_err(err, errlen, 0, "cannot lock the spool %s: %s", o->dir,
				     strerror(e));
		}
		goto fail;
	}
	e = -scan(s, err, errlen);
	if (e)
		goto fail;
	return s;
fail:
	spool_close(s);
	errno = e;
	return NULL;
}

void spool_close(struct spool *s)
{
	if (!s)
		return;
	if (s->lockfd >= 0)
		close(s->lockfd);
	if (s->dirfd >= 0)
		close(s->dirfd);
	free(s->v);
	free(s);
}

int spool_put(struct spool *s, const void *data, size_t len, uint64_t *num)
{
	struct spool_hdr h;
	uint64_t bytes = sizeof(h) + (uint64_t)len;
	char tmp[64], name[64];
	int fd, err;

	if (s->max_bytes && bytes > s->max_bytes)
		return -E2BIG;
	if (s->max_bytes && s->st.bytes + bytes > s->max_bytes) {
		s->st.refused++;
		return -ENOSPC;
	}
	memcpy(h.magic, SPOOL_MAGIC, 8);
	h.num = s->next_num;
	h.len = len;
	h.sum = checksum(data, len);
	file_name(h.num, ".tmp", tmp, sizeof(tmp));
	file_name(h.num, "", name, sizeof(name));
	fd = openat(s->dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	err = tool_write_all(fd, &h, sizeof(h));
	if (!err)
		err = tool_write_all(fd, data, len);
	if (!err && fsync(fd) < 0 && errno != EINVAL)
		err = -errno;
	close(fd);
	if (!err && renameat(s->dirfd, tmp, s->dirfd, name) < 0)
		err = -errno;
	if (!err)
		err = sync_dir(s);
	if (!err)
		err = index_add(s, h.num, bytes);
	if (err) {
		unlinkat(s->dirfd, tmp, 0);
		unlinkat(s->dirfd, name, 0);
		return err;
	}
	s->next_num++;
	*num = h.num;
	return 0;
}

int spool_oldest(struct spool *s, uint64_t *num, void **data, size_t *len)
{
	struct spool_hdr h;
	char name[64];
	void *p = NULL;
	ssize_t got;
	bool ok;
	int fd, e;

	if (!s->n)
		return -ENOENT;
	file_name(s->v[0].num, "", name, sizeof(name));
	fd = openat(s->dirfd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	got = pread(fd, &h, sizeof(h), 0);
	ok = got == (ssize_t)sizeof(h) && !memcmp(h.magic, SPOOL_MAGIC, 8) &&
	     h.num == s->v[0].num && h.len == s->v[0].bytes - sizeof(h);
	if (ok) {
		p = malloc(h.len ? h.len : 1);
		got = p ? pread(fd, p, h.len, sizeof(h)) : -1;
		ok = got == (ssize_t)h.len && checksum(p, h.len) == h.sum;
	}
	e = errno;
	close(fd);
	if (got < 0) {		/* a read failed, or malloc() (ENOMEM) */
		free(p);
		return -e;
	}
	if (!ok) {
		/* a file that no longer holds what was written */
		free(p);
		set_aside(s, s->v[0].num);
		index_remove(s, 0);
		return -EIO;
	}
	*num = h.num;
	*data = p;
	*len = h.len;
	return 0;
}

int spool_ack(struct spool *s, uint64_t num)
{
	char name[64];
	size_t i;

	for (i = 0; i < s->n && s->v[i].num != num; i++)
		;
	if (i == s->n)
		return -ENOENT;
	file_name(num, "", name, sizeof(name));
	/* not flushed: a crash may bring the batch back, and it is sent again,
	 * which its receiver recognises by the batch's name */
	if (unlinkat(s->dirfd, name, 0) < 0 && errno != ENOENT)
		return -errno;
	index_remove(s, i);
	return 0;
}

void spool_stats(const struct spool *s, struct spool_stats *st)
{
	*st = s->st;
}
