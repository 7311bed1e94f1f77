// SPDX-License-Identifier: MIT
/*
 * Output sinks: io_uring against write(2), writing to a file in $TMPDIR.
 *
 *   bench_sink [--quick]
 *
 * Part 1 writes 512 MiB (--quick: 64 MiB) of nettrace-like blocks, each a
 * 96 KiB iovec triple (20-byte object header, content, 1-byte trailer), the
 * way nt_writer hands them over, through
 *   rp_uring_sink  io_uring   (256 KiB x 4 registered buffers, WRITE_FIXED)
 *   rp_uring_sink  write(2)   (same 256 KiB buffering, synchronous)
 *   nt_fd_sink                (no buffering: one writev(2) per block)
 * Part 2 runs the real writer (tracegen, 32-byte "Small" events only) into
 * a null sink (generator + serializer alone) and into both sink modes.
 *
 * Page cache, no fsync: the file is truncated before each timed run (which
 * also drops the last run's dirty pages) and deleted at the end. Each row
 * is the median of 3 runs, with min and max; the runs of the different
 * rows are interleaved so writeback pressure hits them alike.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "bench_event.h"
#include "clock.h"
#include "nettrace.h"
#include "tracegen.h"
#include "uring_sink.h"

#define REPS 3
#define BLOCK (96u * 1024)
#define MiB (1024u * 1024)

enum sink_kind { K_URING, K_WRITE, K_FD, K_NULL };

static const char *const kind_name[] = {
	[K_URING] = "rp_uring_sink, io_uring",
	[K_WRITE] = "rp_uring_sink, write(2)",
	[K_FD] = "nt_fd_sink (writev per block)",
	[K_NULL] = "null sink (no I/O)",
};

struct result {
	double v[REPS];		/* MB/s (part 1) or seconds (part 2) */
	const char *mode;
	uint64_t bytes, events, writes;
	size_t min_write;
};

static char path[4096];
static uint8_t block[BLOCK];

static int null_writev(struct nt_sink *sink, const struct iovec *iov, int n)
{
	return 0;
}

static int open_out(void)
{
	int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0600);

	if (fd < 0) {
		fprintf(stderr, "bench_sink: %s: %s\n", path, strerror(errno));
		exit(1);
	}
	return fd;
}

static struct rp_uring_sink *new_sink(int fd, enum sink_kind k)
{
	struct rp_uring_sink_opts o = { .sz = sizeof(o), .force_write = k == K_WRITE };
	struct rp_uring_sink *s = rp_uring_sink_new(fd, &o);

	if (!s) {
		fprintf(stderr, "bench_sink: rp_uring_sink_new: %s\n", strerror(errno));
		exit(1);
	}
	return s;
}

static void done_sink(struct rp_uring_sink *s, struct result *r)
{
	struct rp_uring_sink_stats st;
	int err = rp_uring_sink_flush(s);

	if (err) {
		fprintf(stderr, "bench_sink: flush: %s\n", strerror(-err));
		exit(1);
	}
	rp_uring_sink_stats(s, &st);
	r->mode = rp_uring_sink_mode(s);
	r->writes = st.writes;
	r->min_write = st.min_write;
	rp_uring_sink_free(s);
}

/* Part 1: raw blocks. */
static void run_blocks(enum sink_kind k, uint64_t total, struct result *r, int rep)
{
	struct iovec iov[3] = {
		{ block, 20 }, { block + 20, BLOCK - 21 }, { block + BLOCK - 1, 1 },
	};
	struct rp_uring_sink *s = NULL;
	struct nt_fd_sink fds;
	struct nt_sink *sink;
	uint64_t n, nblocks = total / BLOCK;
	uint64_t t0, t1;
	int fd = open_out(), err = 0;

	if (k == K_FD) {
		nt_fd_sink_init(&fds, fd);
		sink = &fds.base;
		r->mode = "writev(2)";
		r->writes = nblocks;
		r->min_write = BLOCK;
	} else {
		s = new_sink(fd, k);
		sink = &s->base;
	}
	t0 = rp_clock_mono_ns();
	for (n = 0; n < nblocks && !err; n++) {
		block[0] = (uint8_t)n;	/* touch it, like a writer filling a block */
		err = sink->writev(sink, iov, 3);
	}
	if (s)
		done_sink(s, r);
	t1 = rp_clock_mono_ns();
	if (err) {
		fprintf(stderr, "bench_sink: writev: %s\n", strerror(-err));
		exit(1);
	}
	if (lseek(fd, 0, SEEK_END) != (off_t)(nblocks * BLOCK)) {
		fprintf(stderr, "bench_sink: %s: wrong size\n", kind_name[k]);
		exit(1);
	}
	close(fd);
	r->bytes = nblocks * BLOCK;
	r->v[rep] = (double)r->bytes / 1e6 / ((double)(t1 - t0) / 1e9);
}

/* Part 2: the real writer, small events. */
static void run_events(enum sink_kind k, uint64_t events, struct result *r, int rep)
{
	struct tracegen_opts go = { .format = NT_FORMAT_V5, .events = events, .threads = 4,
				    .small_only = true, .seed = 7 };
	struct tracegen_result res;
	struct nt_sink nul = { null_writev };
	struct rp_uring_sink *s = NULL;
	struct nt_sink *sink = &nul;
	uint64_t t0, t1;
	int fd = -1, err;
	off_t size = 0;

	if (k != K_NULL) {
		fd = open_out();
		s = new_sink(fd, k);
		sink = &s->base;
	} else {
		r->mode = "-";
	}
	t0 = rp_clock_mono_ns();
	err = tracegen_write(sink, &go, &res);
	if (s)
		done_sink(s, r);
	t1 = rp_clock_mono_ns();
	if (err) {
		fprintf(stderr, "bench_sink: tracegen_write: %s\n", strerror(-err));
		exit(1);
	}
	if (fd >= 0) {
		size = lseek(fd, 0, SEEK_END);
		close(fd);
	}
	r->events = res.written;
	r->bytes = (uint64_t)size;
	r->v[rep] = (double)(t1 - t0) / 1e9;
}

int main(int argc, char **argv)
{
	static const enum sink_kind p1[] = { K_URING, K_WRITE, K_FD };
	static const enum sink_kind p2[] = { K_NULL, K_URING, K_WRITE };
	struct result r1[3] = { 0 }, r2[3] = { 0 };
	const char *tmp = getenv("TMPDIR");
	uint64_t total = 512ull * MiB, events = 8000000;
	struct utsname u;
	size_t i;
	int rep, fd;

	for (i = 1; i < (size_t)argc; i++) {
		if (!strcmp(argv[i], "--quick")) {
			total = 64ull * MiB;
			events = 1000000;
		} else {
			fprintf(stderr, "usage: %s [--quick]\n", argv[0]);
			return 2;
		}
	}
	snprintf(path, sizeof(path), "%s/ringpipe-bench-sink-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	fd = mkstemp(path);
	if (fd < 0) {
		fprintf(stderr, "bench_sink: mkstemp %s: %s\n", path, strerror(errno));
		return 1;
	}
	close(fd);
	for (i = 0; i < BLOCK; i++)
		block[i] = (uint8_t)(i * 131 + 7);
	uname(&u);

	for (rep = 0; rep < REPS; rep++) {
		for (i = 0; i < 3; i++)
			run_blocks(p1[i], total, &r1[i], rep);
		for (i = 0; i < 3; i++)
			run_events(p2[i], events, &r2[i], rep);
	}
	unlink(path);

	printf("### Output sinks: %" PRIu64 " MiB to %s (page cache, no fsync), "
	       "kernel %s, %ld CPUs, median of %d\n\n", total / MiB, path, u.release,
	       sysconf(_SC_NPROCESSORS_ONLN), REPS);
	printf("| sink | mode | block | writes | smallest full write | MB/s median | min | max |\n");
	printf("|---|---|---|---|---|---|---|---|\n");
	for (i = 0; i < 3; i++) {
		struct stat3 m = summarize(r1[i].v, REPS);

		printf("| %s | %s | 96 KiB x 3 iovecs | %" PRIu64 " | %zu KiB | %.0f | %.0f | %.0f |\n",
		       kind_name[p1[i]], r1[i].mode, r1[i].writes, r1[i].min_write / 1024, m.med,
		       m.min, m.max);
	}
	printf("\n### nt_writer, %" PRIu64 " 32-byte events (tracegen small_only, V5, 4 threads)\n\n",
	       events);
	printf("| sink | mode | file MB | Mevents/s median | min | max | MB/s median |\n");
	printf("|---|---|---|---|---|---|---|\n");
	for (i = 0; i < 3; i++) {
		struct stat3 t = summarize(r2[i].v, REPS);	/* seconds */

		printf("| %s | %s | %.1f | %.2f | %.2f | %.2f | %s",
		       kind_name[p2[i]], r2[i].mode, (double)r2[i].bytes / 1e6,
		       (double)r2[i].events / t.med / 1e6, (double)r2[i].events / t.max / 1e6,
		       (double)r2[i].events / t.min / 1e6, r2[i].bytes ? "" : "- |\n");
		if (r2[i].bytes)
			printf("%.0f |\n", (double)r2[i].bytes / 1e6 / t.med);
	}
	return 0;
}
