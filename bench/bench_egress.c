// SPDX-License-Identifier: MIT
/*
 * The agent's ClickHouse egress without a server: how fast its cutter turns
 * a finished trace file into spooled batches, the work that has to keep
 * ahead of what ClickHouse takes (scripts/bench-fleet.sh measures that).
 *
 *   bench_egress [--quick]
 *
 * A V6 file of 2,000,000 (--quick: 500,000) 32-byte "Small" events from 4
 * threads (tracegen: 4 decoded fields each, as a runtime's events have a
 * few) is written to $TMPDIR once; then, 3 times, it is cut as the agent
 * cuts a file (egress_source_next(), 100,000-event batches, the legacy
 * dialect 18.16 takes) and each batch put in a spool (spool_put(): summed,
 * written and flushed) and taken out again. Prints the median of the runs:
 * events per second of wall time and per second of the thread's CPU time,
 * the RowBinary bytes per second, and the CPU time spool_put() took of it.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "egress/egress.h"
#include "egress/egress_batch.h"
#include "nettrace.h"
#include "egress/spool.h"
#include "tracegen.h"

#define REPS 3

struct run {
	double wall_s, cpu_s, spool_cpu_s;
	uint64_t events, batches, bytes;
};

static double thread_cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int write_trace(const char *path, uint64_t events)
{
	struct tracegen_opts o = {
		.format = NT_FORMAT_V6, .events = events, .threads = 4, .small_only = true,
		.seed = 7,
	};
	struct tracegen_result res;
	struct nt_fd_sink sink;
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600), err;

	if (fd < 0)
		return -errno;
	nt_fd_sink_init(&sink, fd);
	err = tracegen_write(&sink.base, &o, &res);
	if (close(fd) < 0 && !err)
		err = -errno;
	return err;
}

static int cut_once(const char *path, const char *spool_dir, struct run *r)
{
	struct spool_opts so = { .sz = sizeof(so), .dir = spool_dir };
	struct egress_name n = {
		.format = EGRESS_ROWS, .host = "bench", .dialect = FLEET_LEGACY,
		.batch_rows = EGRESS_BATCH_ROWS, .batch_bytes = 32u << 20,
	};
	struct bytebuf out = { 0 };
	struct egress_source *src;
	struct spool *sp;
	char err[512] = "";
	double w0, c0, c;
	int rc;

	memset(r, 0, sizeof(*r));
	memset(n.agent_run, 0x11, sizeof(n.agent_run));
	sp = spool_open(&so, err, sizeof(err));
	if (!sp) {
		fprintf(stderr, "bench_egress: the spool: %s\n", err);
		return -1;
	}
	w0 = (double)rp_clock_mono_ns() / 1e9;
	c0 = thread_cpu_s();
	src = egress_source_open(path, NULL, 1, err, sizeof(err));
	if (!src) {
		fprintf(stderr, "bench_egress: %s: %s\n", path, err);
		spool_close(sp);
		return -1;
	}
	while ((rc = egress_source_next(src, &n, &out, err, sizeof(err))) == 1) {
		struct egress_batch b;
		uint64_t num;

		if (egress_batch_parse(out.p, out.len, &b)) {
			fprintf(stderr, "bench_egress: a batch made does not parse\n");
			rc = -EPROTO;
			break;
		}
		for (size_t i = 0; i < b.nsections; i++)
			if (b.sections[i].table == FLEET_EVENTS)
				r->events += b.sections[i].rows;
		r->bytes += out.len;
		r->batches++;
		c = thread_cpu_s();
		rc = spool_put(sp, out.p, out.len, &num);
		r->spool_cpu_s += thread_cpu_s() - c;
		if (rc || (rc = spool_ack(sp, num)))
			break;
	}
	r->cpu_s = thread_cpu_s() - c0;
	r->wall_s = (double)rp_clock_mono_ns() / 1e9 - w0;
	if (rc < 0 || err[0])
		fprintf(stderr, "bench_egress: cutting %s: %s\n", path, err[0] ? err : strerror(-rc));
	egress_source_close(src);
	spool_close(sp);
	bb_free(&out);
	return rc < 0 || err[0] ? -1 : 0;
}

static int by_cpu(const void *a, const void *b)
{
	const struct run *x = a, *y = b;

	return (x->cpu_s > y->cpu_s) - (x->cpu_s < y->cpu_s);
}

int main(int argc, char **argv)
{
	bool quick = argc > 1 && !strcmp(argv[1], "--quick");
	uint64_t events = quick ? 500000 : 2000000;
	const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	char dir[4096], path[4300], spool_dir[4200];
	struct run runs[REPS], *m;
	int rc = 0, i;

	if (argc > 1 && !quick) {
		fprintf(stderr, "usage: bench_egress [--quick]\n");
		return 2;
	}
	snprintf(dir, sizeof(dir), "%s/ringpipe-bench-egress-XXXXXX", tmp);
	if (!mkdtemp(dir)) {
		fprintf(stderr, "bench_egress: %s: %s\n", dir, strerror(errno));
		return 1;
	}
	snprintf(path, sizeof(path), "%s/trace.nettrace", dir);
	snprintf(spool_dir, sizeof(spool_dir), "%s/spool", dir);
	if ((rc = write_trace(path, events))) {
		fprintf(stderr, "bench_egress: writing %s: %s\n", path, strerror(-rc));
		rc = 1;
		goto out;
	}
	for (i = 0; i < REPS && !rc; i++)
		rc = cut_once(path, spool_dir, &runs[i]);
	if (rc) {
		rc = 1;
		goto out;
	}
	qsort(runs, REPS, sizeof(runs[0]), by_cpu);
	m = &runs[REPS / 2];
	if (m->events != events) {
		fprintf(stderr, "bench_egress: cut %" PRIu64 " events of the %" PRIu64 " written\n",
			m->events, events);
		rc = 1;
		goto out;
	}
	printf("egress cutter: %" PRIu64 " events into %" PRIu64 " batches (%.1f MB), median of %d: "
	       "%.0f events/s of wall time, %.0f events/s of its CPU time (%.2f s per million "
	       "events; spool_put %.2f s of it), %.0f MB/s of batches\n",
	       m->events, m->batches, (double)m->bytes / 1e6, REPS, (double)m->events / m->wall_s,
	       (double)m->events / m->cpu_s, m->cpu_s / ((double)m->events / 1e6),
	       m->spool_cpu_s / ((double)m->events / 1e6), (double)m->bytes / 1e6 / m->wall_s);
out:
	unlink(path);
	/* every batch was taken out: the spool holds only its lock file */
	snprintf(path, sizeof(path), "%s/.lock", spool_dir);
	unlink(path);
	rmdir(spool_dir);
	rmdir(dir);
	return rc;
}
