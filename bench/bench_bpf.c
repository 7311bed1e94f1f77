// SPDX-License-Identifier: MIT
/*
 * Kernel-assisted capture costs (ringpipe record):
 *
 *   - armed USDT hit: a python3.11 loop calling sys.audit(), timed by the
 *     interpreter itself, without and with its python:audit probe attached
 *     through the capture's generic USDT program (uprobe trap, BPF program,
 *     ring buffer record). The difference per call is the cost a traced
 *     runtime pays per probe hit; the unarmed probe costs a semaphore test
 *     only (CPython guards its probes with one). (3.11's function__entry
 *     fires only while a trace function is set, so it is not used.)
 *   - drain rate: those records left in a large BPF ring buffer, then
 *     consumed in one go into a live session (decode, encode, ring write):
 *     records per second through the bridge.
 *
 * Needs CAP_BPF and CAP_PERFMON (or root) and Debian's /usr/bin/python3.11;
 * prints a skip line otherwise. Markdown table on stdout.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "capture/bpf_capture.h"
#include "ringpipe/ringpipe.h"

#define PY "/usr/bin/python3.11"

static const char loop_py[] =
	"import sys, time\n"
	"f = sys.audit\n"
	"n = int(sys.argv[1])\n"
	"sys.stdin.readline()\n"
	"t = time.perf_counter_ns()\n"
	"for _ in range(n): f('ringpipe.bench')\n"
	"print(time.perf_counter_ns() - t, flush=True)\n";

struct pyrun {
	pid_t pid;
	int in;
	FILE *out;
};

static int py_start(struct pyrun *r, long n)
{
	int in[2], out[2];
	char nbuf[32];

	snprintf(nbuf, sizeof(nbuf), "%ld", n);
	if (pipe(in) || pipe(out))
		return -1;
	r->pid = fork();
	if (r->pid == 0) {
		dup2(in[0], 0);
		dup2(out[1], 1);
		close(in[1]);
		close(out[0]);
		execl(PY, PY, "-c", loop_py, nbuf, (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	r->in = in[1];
	r->out = fdopen(out[0], "r");
	return r->pid > 0 ? 0 : -1;
}

/* Lets the loop run; returns its ns and reaps the process. */
static double py_finish(struct pyrun *r)
{
	char line[64] = "";
	int st;

	if (write(r->in, "\n", 1) != 1)
		return -1;
	if (!fgets(line, sizeof(line), r->out))
		line[0] = 0;
	close(r->in);
	fclose(r->out);
	waitpid(r->pid, &st, 0);
	return strtod(line, NULL);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	bool quick = argc > 1 && !strcmp(argv[1], "--quick");
	long n = quick ? 200000 : 1000000;
	const char *spec[] = { PY ":python:audit" };
	struct rp_capture_opts co = { .sz = sizeof(co), .usdt = spec, .nusdt = 1,
				      .ringbuf_bytes = 256u << 20 };
	struct rp_provider_config pc = { .name = RP_CAP_PROVIDER_USDT_PREFIX "python" };
	struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
				      .buffer_bytes = 256u << 20, .path = "/dev/null" };
	struct rp_capture_stats st;
	struct rp_session *s;
	struct rp_capture *cap;
	struct pyrun r;
	char err[512];
	double base = 1e300, armed, t0, t1;
	int i;

	if (rp_capture_check_privilege(err, sizeof(err)) || access(PY, X_OK)) {
		printf("| bench_bpf | skipped: %s |\n", access(PY, X_OK) ? PY " missing" : err);
		return 0;
	}
	/* unarmed: best of three */
	for (i = 0; i < 3; i++) {
		double t;

		if (py_start(&r, n))
			return 1;
		t = py_finish(&r);
		if (t > 0 && t < base)
			base = t;
	}
	if (rp_capture_define(&co, err, sizeof(err)))
		return fprintf(stderr, "%s\n", err), 1;
	s = rp_session_start(&so);
	if (!s)
		return fprintf(stderr, "session: %s\n", rp_last_error()), 1;
	if (py_start(&r, n))
		return 1;
	co.pid = r.pid;
	co.session = s;
	cap = rp_capture_open(&co, err, sizeof(err));
	if (!cap)
		return fprintf(stderr, "%s\n", err), 1;
	/* no consumer yet: the records wait in the BPF ring buffer */
	armed = py_finish(&r);
	t0 = now_s();
	rp_capture_stop(cap);	/* consumes the backlog into the session */
	t1 = now_s();
	rp_capture_stats(cap, &st);
	rp_session_stop(s);
	rp_capture_close(cap);

	printf("| kernel-assisted capture (%ld python calls) | value |\n|---|---|\n", n);
	printf("| python3.11 call, probe unarmed | %.1f ns |\n", base / (double)n);
	printf("| python3.11 call, python:audit armed (BPF record per hit) | %.1f ns |\n",
	       armed / (double)n);
	printf("| cost per armed USDT hit | %.0f ns |\n", (armed - base) / (double)n);
	printf("| BPF ring buffer drain into a session | %.2f M records/s (%" PRIu64
	       " records in %.1f ms; %" PRIu64 " lost in the BPF ring buffer, %" PRIu64
	       " in the session) |\n",
	       (double)st.records / (t1 - t0) / 1e6, st.records, (t1 - t0) * 1e3, st.kernel_drops,
	       st.write_drops);
	return 0;
}
