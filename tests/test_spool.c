// SPDX-License-Identifier: MIT
/*
 * The egress spool (tools/ringpipe/egress/spool.h): batches come back oldest
 * first, byte for byte, across a reopen and a SIGKILL; the size bound is
 * kept exactly; a damaged file is set aside, never handed out; one process
 * at a time.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/fnv1a.h"
#include "helpers.h"
#include "egress/spool.h"

#define HDR 32u			/* spool.c's header in front of each batch */

static struct spool *open_at(const char *dir, uint64_t max_bytes)
{
	struct spool_opts o = { .sz = sizeof(o), .dir = dir, .max_bytes = max_bytes };
	char err[256] = "";
	struct spool *s = spool_open(&o, err, sizeof(err));

	cr_assert_not_null(s, "spool_open(%s): %s", dir, err);
	return s;
}

/* batch k: k+1 bytes of a pattern that tells batches apart */
static size_t fill(unsigned char *buf, unsigned int k)
{
	for (unsigned int i = 0; i <= k; i++)
		buf[i] = (unsigned char)(k * 31 + i);
	return k + 1;
}

static void expect_oldest(struct spool *s, uint64_t want_num, unsigned int k)
{
	unsigned char want[256];
	size_t n = fill(want, k), len = 0;
	uint64_t num = 0;
	void *data = NULL;
	int rc = spool_oldest(s, &num, &data, &len);

	cr_assert_eq(rc, 0, "spool_oldest: %d", rc);
	cr_assert_eq(num, want_num, "oldest is batch %" PRIu64 ", expected %" PRIu64, num, want_num);
	cr_assert_eq(len, n, "batch %" PRIu64 ": %zu bytes, expected %zu", num, len, n);
	cr_assert_eq(memcmp(data, want, n), 0, "batch %" PRIu64 ": other bytes", num);
	free(data);
}

static uint64_t put(struct spool *s, unsigned int k)
{
	unsigned char buf[256];
	size_t n = fill(buf, k);
	uint64_t num = 0;
	int rc = spool_put(s, buf, n, &num);

	cr_assert_eq(rc, 0, "spool_put of batch %u: %d", k, rc);
	return num;
}

static int count_files(const char *dir, const char *suffix)
{
	char cmd[512];
	struct bytebuf out = { 0 };
	int n;

	snprintf(cmd, sizeof(cmd), "ls -a '%s' | grep -c '%s$'", dir, suffix);
	th_run(cmd, &out);
	n = out.len ? atoi((char *)out.p) : 0;
	bb_free(&out);
	return n;
}

Test(spool, batches_come_back_oldest_first_until_acknowledged)
{
	char *dir = th_tmpdir();
	struct spool *s = open_at(dir, 0);
	struct spool_stats st;
	uint64_t num[3];

	for (unsigned int k = 0; k < 3; k++)
		num[k] = put(s, k);
	cr_assert(num[0] < num[1] && num[1] < num[2], "numbers grow");
	spool_stats(s, &st);
	cr_assert_eq(st.batches, 3);
	cr_assert_eq(st.bytes, 3 * HDR + 1 + 2 + 3);
	expect_oldest(s, num[0], 0);
	expect_oldest(s, num[0], 0);	/* not taken out by reading it */
	cr_assert_eq(spool_ack(s, num[1]), 0, "an ack out of order is fine");
	expect_oldest(s, num[0], 0);
	cr_assert_eq(spool_ack(s, num[0]), 0);
	expect_oldest(s, num[2], 2);
	cr_assert_eq(spool_ack(s, num[2]), 0);
	cr_assert_eq(spool_ack(s, num[2]), -ENOENT, "a second ack finds nothing");
	{
		uint64_t n;
		void *d;
		size_t l;

		cr_assert_eq(spool_oldest(s, &n, &d, &l), -ENOENT, "empty");
	}
	spool_stats(s, &st);
	cr_assert_eq(st.batches, 0);
	cr_assert_eq(st.bytes, 0);
	cr_assert_eq(count_files(dir, ".batch"), 0, "every acknowledged file is gone");
	spool_close(s);
	th_rmdir(dir);
}

Test(spool, a_batch_written_before_a_sigkill_is_there_after_it)
{
	char *dir = th_tmpdir();
	int pipefd[2], status;
	uint64_t nums[2];
	struct spool_stats st;
	struct spool *s;
	pid_t pid;

	cr_assert_eq(pipe(pipefd), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct spool_opts o = { .sz = sizeof(o), .dir = dir };
		struct spool *c = spool_open(&o, NULL, 0);
		unsigned char buf[256];
		uint64_t n[2] = { 0, 0 };

		if (!c)
			_exit(1);
		for (unsigned int k = 0; k < 2; k++)
			if (spool_put(c, buf, fill(buf, 10 + k), &n[k]))
				_exit(1);
		/* and a batch that was never written whole */
		{
			char path[512];
			FILE *f;

			snprintf(path, sizeof(path), "%s/%020" PRIu64 ".batch.tmp", dir, n[1] + 1);
			f = fopen(path, "w");
			if (f) {
				fputs("RPSPOOL1 torn", f);
				fclose(f);
			}
		}
		if (write(pipefd[1], n, sizeof(n)) != (ssize_t)sizeof(n))
			_exit(1);
		pause();
		_exit(0);
	}
	close(pipefd[1]);
	cr_assert_eq(read(pipefd[0], nums, sizeof(nums)), (ssize_t)sizeof(nums), "the child wrote");
	close(pipefd[0]);
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);

	s = open_at(dir, 0);
	spool_stats(s, &st);
	cr_assert_eq(st.found, 2, "found %" PRIu64 " batches of the killed run", st.found);
	cr_assert_eq(count_files(dir, ".tmp"), 0, "the torn .tmp file is removed");
	expect_oldest(s, nums[0], 10);
	cr_assert_eq(spool_ack(s, nums[0]), 0);
	expect_oldest(s, nums[1], 11);
	cr_assert_gt(put(s, 1), nums[1], "a new batch takes a number above those found");
	spool_close(s);
	th_rmdir(dir);
}

Test(spool, the_size_bound_is_kept_exactly)
{
	char *dir = th_tmpdir();
	/* room for exactly two batches of 100 bytes */
	struct spool *s = open_at(dir, 2 * (HDR + 100));
	unsigned char buf[200] = { 0 };
	struct spool_stats st;
	uint64_t a, b, c;

	cr_assert_eq(spool_put(s, buf, 100, &a), 0);
	cr_assert_eq(spool_put(s, buf, 100, &b), 0);
	cr_assert_eq(spool_put(s, buf, 1, &c), -ENOSPC, "full: nothing more fits");
	cr_assert_eq(spool_put(s, buf, 2 * 100 + HDR + 1, &c), -E2BIG, "could never fit");
	spool_stats(s, &st);
	cr_assert_eq(st.refused, 1);
	cr_assert_eq(st.bytes, 2 * (HDR + 100));
	cr_assert_eq(count_files(dir, ".batch"), 2, "a refused batch leaves no file");
	cr_assert_eq(spool_ack(s, a), 0);
	cr_assert_eq(spool_put(s, buf, 100, &c), 0, "an ack makes room");
	cr_assert_gt(c, b);
	spool_close(s);
	th_rmdir(dir);
}

Test(spool, a_damaged_batch_is_set_aside_and_never_handed_out)
{
	char *dir = th_tmpdir();
	struct spool *s = open_at(dir, 0);
	uint64_t n0 = put(s, 40), n1 = put(s, 41), n2 = put(s, 42);
	struct spool_stats st;
	char path[512];
	uint64_t num;
	void *data;
	size_t len;
	int fd;

	/* a byte of batch n0's payload flipped on disk */
	snprintf(path, sizeof(path), "%s/%020" PRIu64 ".batch", dir, n0);
	fd = open(path, O_RDWR);
	cr_assert_geq(fd, 0);
	cr_assert_eq(pwrite(fd, "X", 1, HDR + 3), 1);
	close(fd);
	cr_assert_eq(spool_oldest(s, &num, &data, &len), -EIO, "the damaged batch is refused");
	expect_oldest(s, n1, 41);
	spool_stats(s, &st);
	cr_assert_eq(st.damaged, 1);
	cr_assert_eq(count_files(dir, ".bad"), 1, "kept aside as .bad");
	spool_close(s);

	/* a header that does not match its file is found at open */
	snprintf(path, sizeof(path), "%s/%020" PRIu64 ".batch", dir, n2);
	cr_assert_eq(truncate(path, HDR + 10), 0);
	s = open_at(dir, 0);
	spool_stats(s, &st);
	cr_assert_eq(st.found, 1, "only batch n1 is taken in");
	cr_assert_eq(st.damaged, 1);
	expect_oldest(s, n1, 41);
	cr_assert_gt(put(s, 1), n2, "numbers set aside are not given again");
	spool_close(s);
	th_rmdir(dir);
}

Test(spool, one_process_at_a_time)
{
	char *dir = th_tmpdir();
	struct spool *s = open_at(dir, 0);
	struct spool_opts o = { .sz = sizeof(o), .dir = dir };
	char err[256] = "";
	int status;
	pid_t pid = fork();

	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct spool *t = spool_open(&o, err, sizeof(err));

		_exit(!t && errno == EBUSY && strstr(err, "in use by another process") ? 0 : 1);
	}
	waitpid(pid, &status, 0);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "a second process must be refused with EBUSY and say why");
	spool_close(s);
	s = open_at(dir, 0);	/* free again once closed */
	spool_close(s);
	o.dir = "/proc/no/such/dir";
	cr_assert_null(spool_open(&o, err, sizeof(err)));
	cr_assert(strstr(err, "/proc/no/such/dir"), "the error names the directory: %s", err);
	th_rmdir(dir);
}

/* The header's sum of "123456789", put and taken out again, is CRC32C's
 * check value, 0xE3069283 (how: which way of summing made it) */
static void expect_check_value(struct spool *s, const char *dir, const char *how)
{
	uint64_t num, sum = 0;
	char path[512];
	int fd;

	cr_assert_eq(spool_put(s, "123456789", 9, &num), 0);
	snprintf(path, sizeof(path), "%s/%020" PRIu64 ".batch", dir, num);
	fd = open(path, O_RDONLY);
	cr_assert_geq(fd, 0);
	cr_assert_eq(pread(fd, &sum, 8, 24), 8);
	close(fd);
	cr_assert_eq(sum, 0xe3069283u, "sum by the %s %#" PRIx64 ", CRC32C's check value is "
		     "0xe3069283", how, sum);
	cr_assert_eq(spool_ack(s, num), 0);
}

/* The header's sum of "123456789" is CRC32C's check value, 0xE3069283;
 * one changed bit anywhere in a long batch is caught */
Test(spool, batches_are_summed_by_crc32c)
{
	char *dir = th_tmpdir();
	struct spool *s = open_at(dir, 0);
	static unsigned char big[1 << 20];
	uint64_t num, got_num;
	char path[512];
	void *data;
	size_t len;
	int fd;

	expect_check_value(s, dir, "instruction");

	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (unsigned char)(i * 7 + (i >> 9));
	cr_assert_eq(spool_put(s, big, sizeof(big), &num), 0);
	snprintf(path, sizeof(path), "%s/%020" PRIu64 ".batch", dir, num);
	fd = open(path, O_RDWR);
	cr_assert_geq(fd, 0);
	cr_assert_eq(pread(fd, &big[777777], 1, HDR + 777777), 1);
	big[777777] ^= 0x10;
	cr_assert_eq(pwrite(fd, &big[777777], 1, HDR + 777777), 1);
	close(fd);
	cr_assert_eq(spool_oldest(s, &got_num, &data, &len), -EIO, "one bit flipped is caught");
	spool_close(s);
	th_rmdir(dir);
}

/* The byte table, which hosts without SSE4.2 use, gives the same sums: the
 * check value, and a batch written one way is read back the other way */
Test(spool, the_table_sums_as_the_instruction_does)
{
	char *dir = th_tmpdir();
	struct spool *s = open_at(dir, 0);
	static unsigned char big[(1 << 20) + 5];
	uint64_t num, got_num;
	void *data;
	size_t len;

	spool_crc_by_table = true;
	expect_check_value(s, dir, "table");

	/* an odd length: the instruction's last bytes go one at a time */
	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (unsigned char)(i * 13 + (i >> 7));
	for (int way = 0; way < 2; way++) {
		spool_crc_by_table = way == 0;	/* written by one, read by the other */
		cr_assert_eq(spool_put(s, big, sizeof(big), &num), 0);
		spool_crc_by_table = way != 0;
		cr_assert_eq(spool_oldest(s, &got_num, &data, &len), 0,
			     "a batch summed by the %s reads back by the %s",
			     way ? "instruction" : "table", way ? "table" : "instruction");
		cr_assert_eq(got_num, num);
		cr_assert_eq(len, sizeof(big));
		cr_assert_eq(memcmp(data, big, len), 0);
		free(data);
		cr_assert_eq(spool_ack(s, num), 0);
	}
	spool_crc_by_table = false;
	spool_close(s);
	th_rmdir(dir);
}

/* A batch an earlier agent wrote (version 1, summed by FNV-1a) is sent,
 * not set aside */
Test(spool, a_version_1_batch_is_still_read)
{
	char *dir = th_tmpdir();
	const char payload[] = "a batch of an earlier agent";
	uint64_t hdr[4], h, num;
	char path[512];
	struct spool_stats st;
	struct spool *s;
	void *data;
	size_t len;
	FILE *f;

	h = fnv1a64_bytes(fnv1a64_start(), payload, sizeof(payload));
	memcpy(hdr, "RPSPOOL1", 8);
	hdr[1] = 7;
	hdr[2] = sizeof(payload);
	hdr[3] = h;
	snprintf(path, sizeof(path), "%s/%020u.batch", dir, 7u);
	f = fopen(path, "w");
	cr_assert_not_null(f);
	cr_assert_eq(fwrite(hdr, sizeof(hdr), 1, f), 1);
	cr_assert_eq(fwrite(payload, sizeof(payload), 1, f), 1);
	fclose(f);
	s = open_at(dir, 0);
	spool_stats(s, &st);
	cr_assert_eq(st.found, 1, "the version 1 batch is taken in");
	cr_assert_eq(spool_oldest(s, &num, &data, &len), 0, "and handed out");
	cr_assert_eq(num, 7);
	cr_assert_eq(len, sizeof(payload));
	cr_assert_eq(memcmp(data, payload, len), 0);
	free(data);
	cr_assert_gt(put(s, 3), 7, "a new batch is numbered above it");
	spool_close(s);
	th_rmdir(dir);
}

/* spool_next() reads on past batches in flight, oldest first */
Test(spool, next_reads_past_batches_in_flight)
{
	char *dir = th_tmpdir();
	struct spool *s = open_at(dir, 0);
	uint64_t n0 = put(s, 50), n1 = put(s, 51), n2 = put(s, 52), num;
	void *data;
	size_t len;

	cr_assert_gt(n0, 0, "numbers start at 1: 0 is no batch");
	cr_assert_eq(spool_next(s, 0, &num, &data, &len), 0);
	cr_assert_eq(num, n0);
	free(data);
	cr_assert_eq(spool_next(s, n0, &num, &data, &len), 0);
	cr_assert_eq(num, n1, "after n0 comes n1");
	cr_assert_eq(len, 52u);
	free(data);
	cr_assert_eq(spool_ack(s, n1), 0);
	cr_assert_eq(spool_next(s, n0, &num, &data, &len), 0);
	cr_assert_eq(num, n2, "after n0, n1 acknowledged, comes n2");
	free(data);
	cr_assert_eq(spool_next(s, n2, &num, &data, &len), -ENOENT, "none after the newest");
	expect_oldest(s, n0, 50);
	spool_close(s);
	th_rmdir(dir);
}

/* The senders' look at the numbers: what comes after a batch, without
 * reading it, so that a sender takes a number another one does not hold */
Test(spool, peek_names_the_next_batch_without_reading_it)
{
	char *dir = th_tmpdir();
	struct spool *s = open_at(dir, 0);
	uint64_t n0 = put(s, 60), n1 = put(s, 61), num = 0;

	cr_assert_eq(spool_peek(s, 0, &num), 0);
	cr_assert_eq(num, n0, "the oldest first");
	cr_assert_eq(spool_peek(s, n0, &num), 0);
	cr_assert_eq(num, n1, "after n0 comes n1");
	cr_assert_eq(spool_peek(s, n1, &num), -ENOENT, "none after the newest");
	cr_assert_eq(spool_ack(s, n0), 0);
	cr_assert_eq(spool_peek(s, 0, &num), 0);
	cr_assert_eq(num, n1, "n0 taken out: n1 is the oldest");
	expect_oldest(s, n1, 61);	/* peeking took nothing out */
	spool_close(s);
	th_rmdir(dir);
}
