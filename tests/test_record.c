// SPDX-License-Identifier: MIT
/*
 * Kernel-assisted capture (ringpipe record, tools/ringpipe/capture/bpf_capture.c):
 * real runtimes traced through their USDT probes, kernel process events,
 * and one session mixing ring events with BPF events, judged by ringpipe's
 * reader and by TraceEvent.
 *
 * Every test that loads BPF skips, saying why, when this process lacks
 * CAP_BPF/CAP_PERFMON; the TraceEvent checks skip without dotnet unless
 * RINGPIPE_REQUIRE_INTEROP=1.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>

#include "capture/bpf_capture.h"
#include "clock.h"
#include "helpers.h"
#include "session.h"

#define PYTHON "/usr/bin/python3.11"
#define JAVA_HOME_17 "/usr/lib/jvm/java-17-openjdk-amd64"
#define NGC 25

#define NEED_BPF()                                                              \
	do {                                                                    \
		char m_[512];                                                   \
		if (rp_capture_check_privilege(m_, sizeof(m_)))                 \
			cr_skip_test("%s", m_);                                 \
	} while (0)

/* ---- small helpers -------------------------------------------------------- */

struct child {
	pid_t pid;
	int in;		/* its stdin */
	FILE *out;	/* its stdout (or stderr, for the recorder) */
};

/* Starts argv with pipes on stdin and on stdout (use_stderr: on stderr). */
static struct child spawn(char *const argv[], bool use_stderr)
{
	struct child c = { 0 };
	int in[2], out[2];

	cr_assert(pipe2(in, O_CLOEXEC) == 0 && pipe2(out, O_CLOEXEC) == 0);
	c.pid = fork();
	cr_assert(c.pid >= 0);
	if (c.pid == 0) {
		dup2(in[0], 0);
		dup2(out[1], use_stderr ? 2 : 1);
		execv(argv[0], argv);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	c.in = in[1];
	c.out = fdopen(out[0], "r");
	return c;
}

/* Reads lines until one contains `want`; false at EOF. */
static bool wait_line(FILE *f, const char *want, char *line, size_t len)
{
	while (fgets(line, (int)len, f))
		if (strstr(line, want))
			return true;
	return false;
}

static int wait_exit(pid_t pid)
{
	int st;

	cr_assert(waitpid(pid, &st, 0) == pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Value of "Key":N in a JSON line, or -1. */
static int64_t jnum(const char *line, const char *key)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	p = strstr(line, pat);
	return p ? strtoll(p + strlen(pat), NULL, 10) : -1;
}

/* Lines of `ringpipe dump FILE` (or TraceDump dump) into b. */
static void dump_file(const char *file, bool tracedump, struct bytebuf *b)
{
	char *cmd;

	if (tracedump) {
		TH_NEED_TRACEDUMP(dll);
		cr_assert(asprintf(&cmd, "dotnet '%s' dump '%s'", dll, file) > 0);
	} else {
		cr_assert(asprintf(&cmd, "'%s' dump '%s'", th_tool(), file) > 0);
	}
	cr_assert_eq(th_run(cmd, b), 0, "%s failed:\n%s", cmd, b->p ? (char *)b->p : "");
	free(cmd);
}

/* Counts dump lines holding every one of the NULL-terminated needles. */
static int count_lines(const struct bytebuf *b, ...)
{
	const char *p = (const char *)b->p, *needles[8];
	int n = 0, k = 0;
	va_list ap;

	va_start(ap, b);
	while (k < 7 && (needles[k] = va_arg(ap, const char *)))
		k++;
	va_end(ap);
	while (p && *p) {
		const char *e = strchr(p, '\n');
		size_t len = e ? (size_t)(e - p) : strlen(p);
		char *line = strndup(p, len);
		int i;

		for (i = 0; i < k && strstr(line, needles[i]); i++)
			;
		n += i == k;
		free(line);
		p = e ? e + 1 : NULL;
	}
	return n;
}

static const char py_script[] =
	"import gc, os, sys\n"
	"gc.disable()\n"
	"n = int(sys.argv[1]); nap = float(sys.argv[2])\n"
	"print('ready', os.getpid(), flush=True)\n"
	"sys.stdin.readline()\n"
	"import time\n"
	"for i in range(n):\n"
	"    gc.collect()\n"
	"    if nap: time.sleep(nap)\n"
	"print('done', flush=True)\n"
	"sys.stdin.readline()\n";

/* A python3.11 that waits for "go", collects n times, says "done", waits. */
static struct child start_python(const char *dir, int n, const char *nap)
{
	char *script, *nstr, line[256];
	struct child c;

	cr_assert(asprintf(&script, "%s/gcloop.py", dir) > 0);
	cr_assert(th_write_file(script, py_script, strlen(py_script)) == 0);
	cr_assert(asprintf(&nstr, "%d", n) > 0);
	{
		char *argv[] = { PYTHON, script, nstr, (char *)nap, NULL };

		c = spawn(argv, false);
	}
	cr_assert(wait_line(c.out, "ready", line, sizeof(line)), "python did not start");
	free(script);
	free(nstr);
	return c;
}

static void need_python(void)
{
	if (access(PYTHON, X_OK))
		cr_skip_test(PYTHON " is not installed (Debian's python3.11 carries the USDT probes)");
}

/* ---- CPython: gc__start / gc__done by pid --------------------------------- */

static void check_python_trace(const char *file, pid_t py, bool tracedump)
{
	struct bytebuf b = { 0 };
	char pidf[32];

	snprintf(pidf, sizeof(pidf), "\"Pid\":%d,", (int)py);
	dump_file(file, tracedump, &b);
	cr_assert_eq(count_lines(&b, "\"provider\":\"Ringpipe-Usdt-CPython\"", "\"name\":\"GC/Start\"",
				 pidf, "\"Generation\":2,", NULL), NGC,
		     "GC starts from pid %d (tracedump=%d):\n%.2000s", (int)py, tracedump, (char *)b.p);
	cr_assert_eq(count_lines(&b, "\"provider\":\"Ringpipe-Usdt-CPython\"", "\"name\":\"GC/Stop\"",
				 pidf, "\"Collected\":", NULL), NGC);
	/* nothing else from that provider */
	cr_assert_eq(count_lines(&b, "\"provider\":\"Ringpipe-Usdt-CPython\"", NULL), 2 * NGC);
	if (tracedump) {
		cr_assert(strstr((char *)b.p, "\"lost\":0,\"error\":null"), "TraceEvent summary: %s",
			  strstr((char *)b.p, "\"summary\""));
		/* TraceEvent gives every event the header's process: python's,
		 * not the recorder's */
		snprintf(pidf, sizeof(pidf), "\"pid\":%d,", (int)py);
		cr_assert_eq(count_lines(&b, "\"provider\":\"Ringpipe-Usdt-CPython\"", pidf, NULL),
			     2 * NGC, "events not attributed to pid %d:\n%.600s", (int)py, (char *)b.p);
	}
	bb_free(&b);
}

Test(record, python_gc_by_pid, .timeout = 120)
{
	char *dir, *file, *pidarg, line[512];
	struct child py, rec;

	NEED_BPF();
	need_python();
	dir = th_tmpdir();
	cr_assert(asprintf(&file, "%s/py.nettrace", dir) > 0);
	py = start_python(dir, NGC, "0");
	cr_assert(asprintf(&pidarg, "%d", (int)py.pid) > 0);
	{
		char *argv[] = { (char *)th_tool(), "record", "-p", pidarg, "--usdt", "python",
				 "-o", file, NULL };

		rec = spawn(argv, true);
	}
	cr_assert(wait_line(rec.out, "probes attached", line, sizeof(line)), "record did not attach");
	cr_assert(write(py.in, "go\n", 3) == 3);
	cr_assert(wait_line(py.out, "done", line, sizeof(line)));
	/* stop while python still runs: its exit-time collections stay out */
	kill(rec.pid, SIGINT);
	cr_assert(wait_line(rec.out, "kernel records", line, sizeof(line)));
	fprintf(stderr, "python_gc_by_pid: %s", line);
	cr_assert_eq(wait_exit(rec.pid), 0);
	cr_assert(write(py.in, "x\n", 2) == 2);
	cr_assert_eq(wait_exit(py.pid), 0);

	check_python_trace(file, py.pid, false);
	check_python_trace(file, py.pid, true);	/* TraceEvent reads the same */
	{
		struct bytebuf b = { 0 };
		char *cmd;

		TH_NEED_TRACEDUMP(dll);
		cr_assert(asprintf(&cmd, "dotnet '%s' counts '%s'", dll, file) > 0);
		cr_assert_eq(th_run(cmd, &b), 0);
		cr_assert(strstr((char *)b.p, "Ringpipe-Usdt-CPython/GC/Start\t25\n") &&
			  strstr((char *)b.p, "Ringpipe-Usdt-CPython/GC/Stop\t25\n") &&
			  strstr((char *)b.p, "#lost\t0\n"), "TraceDump counts:\n%s", (char *)b.p);
		free(cmd);
		bb_free(&b);
	}
	fclose(py.out), close(py.in), fclose(rec.out), close(rec.in);
	free(pidarg);
	free(file);
	th_rmdir(dir);
}

/* ---- HotSpot: System.gc() and class loading --------------------------------- */

static const char java_src[] =
	"public class GcLoop {\n"
	"    static class Marker { int x; }\n"
	"    public static void main(String[] a) {\n"
	"        int n = Integer.parseInt(a[0]);\n"
	"        new Marker().x = 1;\n"
	"        for (int i = 0; i < n; i++) System.gc();\n"
	"        System.out.println(\"done\");\n"
	"    }\n"
	"}\n";

Test(record, jvm_gc_and_classes, .timeout = 180)
{
	char *dir, *src, *cmd, *file;
	struct bytebuf b = { 0 }, out = { 0 };
	const int n = 10;
	int k;

	NEED_BPF();
	if (access(JAVA_HOME_17 "/bin/javac", X_OK))
		cr_skip_test("OpenJDK 17 (" JAVA_HOME_17 ") is not installed");
	dir = th_tmpdir();
	cr_assert(asprintf(&src, "%s/GcLoop.java", dir) > 0);
	cr_assert(th_write_file(src, java_src, strlen(java_src)) == 0);
	cr_assert(asprintf(&cmd, JAVA_HOME_17 "/bin/javac -d '%s' '%s' 2>&1", dir, src) > 0);
	cr_assert_eq(th_run(cmd, &out), 0, "javac: %s", (char *)out.p);
	free(cmd);
	cr_assert(asprintf(&file, "%s/jvm.nettrace", dir) > 0);
	/* Serial GC: one System.gc() is one collection, so one gc__begin/end
	 * pair (G1 would add concurrent cycles); no CDS, so the program's own
	 * classes are not the only ones loaded from files, but all are seen */
	cr_assert(asprintf(&cmd, "'%s' record --usdt jvm -o '%s' -- " JAVA_HOME_17 "/bin/java "
			   "-XX:+UseSerialGC -cp '%s' GcLoop %d 2>&1", th_tool(), file, dir, n) > 0);
	bb_free(&out);
	cr_assert_eq(th_run(cmd, &out), 0, "%s:\n%s", cmd, (char *)out.p);
	cr_assert(strstr((char *)out.p, "done"), "%s", (char *)out.p);
	free(cmd);

	for (k = 0; k < 2; k++) {
		bb_free(&b);
		memset(&b, 0, sizeof(b));
		dump_file(file, k == 1, &b);
		cr_assert_eq(count_lines(&b, "\"provider\":\"Ringpipe-Usdt-HotSpot\"",
					 "\"name\":\"GC/Start\"", NULL), n, "%s", k ? "TraceEvent" : "ringpipe");
		cr_assert_eq(count_lines(&b, "\"provider\":\"Ringpipe-Usdt-HotSpot\"",
					 "\"name\":\"GC/Stop\"", NULL), n);
		cr_assert_eq(count_lines(&b, "\"name\":\"ClassLoaded\"", "\"ClassName\":\"GcLoop\"", NULL),
			     1);
		cr_assert_eq(count_lines(&b, "\"name\":\"ClassLoaded\"",
					 "\"ClassName\":\"GcLoop$Marker\"", NULL), 1);
		cr_assert(count_lines(&b, "\"name\":\"MemPoolGC/Start\"", NULL) >= n);
		cr_assert(count_lines(&b, "\"name\":\"Thread/Start\"", NULL) >= 1);
	}
	bb_free(&b);
	bb_free(&out);
	free(src);
	free(file);
	th_rmdir(dir);
}

/* ---- kernel: exec, fork, exit of a child ------------------------------------ */

Test(record, kernel_exec_fork_exit, .timeout = 60)
{
	char *dir, *file, *cmd, *pids;
	struct bytebuf out = { 0 }, b = { 0 };
	char f1[64], f2[64];
	int sh = 0, kid = 0;

	NEED_BPF();
	dir = th_tmpdir();
	cr_assert(asprintf(&file, "%s/k.nettrace", dir) > 0);
	cr_assert(asprintf(&pids, "%s/pids", dir) > 0);
	cr_assert(asprintf(&cmd, "'%s' record --kernel exec -o '%s' -- /bin/sh -c "
			   "'/bin/sleep 0.01 & echo $$ $! > %s; wait' 2>&1", th_tool(), file, pids) > 0);
	cr_assert_eq(th_run(cmd, &out), 0, "%s", (char *)out.p);
	bb_free(&out);
	memset(&out, 0, sizeof(out));
	cr_assert(th_read_file(pids, &out) == 0);
	cr_assert(sscanf((char *)out.p, "%d %d", &sh, &kid) == 2);

	dump_file(file, false, &b);
	snprintf(f1, sizeof(f1), "\"Pid\":%d,", sh);
	snprintf(f2, sizeof(f2), "\"ChildPid\":%d,", kid);
	cr_assert_eq(count_lines(&b, "\"name\":\"Exec\"", "\"Filename\":\"/bin/sh\"", f1, NULL), 1,
		     "%.3000s", (char *)b.p);
	cr_assert_eq(count_lines(&b, "\"name\":\"Fork\"", f1, f2, NULL), 1);
	snprintf(f1, sizeof(f1), "\"Pid\":%d,", kid);
	cr_assert_eq(count_lines(&b, "\"name\":\"Exec\"", "\"Filename\":\"/bin/sleep\"", f1, NULL), 1);
	cr_assert_eq(count_lines(&b, "\"name\":\"Exit\"", "\"GroupDead\":true", f1, NULL), 1);
	snprintf(f1, sizeof(f1), "\"Pid\":%d,", sh);
	cr_assert_eq(count_lines(&b, "\"name\":\"Exit\"", "\"GroupDead\":true", f1, NULL), 1);
	cr_assert(count_lines(&b, "\"name\":\"CgroupMap\"", "\"Path\":\"/", NULL) >= 1);
	bb_free(&b);
	bb_free(&out);
	free(cmd);
	/* the report names the cgroup of every captured event (the two Exec,
	 * the Fork and the two Exit at least), from the trace's CgroupMap */
	cr_assert(asprintf(&cmd, "'%s' report --json '%s'", th_tool(), file) > 0);
	cr_assert_eq(th_run(cmd, &out), 0);
	bb_append(&out, "", 1);
	{
		const char *c = strstr((char *)out.p, "\"cgroups\":[{\"id\":");
		unsigned long long count = 0;
		const char *n;

		cr_assert_not_null(c, "no cgroups in the report: %s", (char *)out.p);
		cr_assert_not_null(strstr(c, "\"path\":\"/"), "an unnamed cgroup: %s", c);
		n = strstr(c, "\"count\":");
		cr_assert_not_null(n);
		count = strtoull(n + 8, NULL, 10);
		cr_assert_geq(count, 5, "events counted in the cgroup: %llu", count);
	}
	bb_free(&out);
	free(cmd);
	free(pids);
	free(file);
	th_rmdir(dir);
}

/* ---- ring events and BPF events in one session ------------------------------- */

static const struct rp_field mixed_fields[] = {
	{ .name = "Seq", .type = RP_TYPE_U64 },
	{ .name = "KtimeNs", .type = RP_TYPE_U64 },
};

struct producer {
	struct rp_event *ev;
	int stop;
	uint64_t n;
};

static void *producer_main(void *arg)
{
	struct producer *p = arg;

	while (!__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE)) {
		uint64_t v[2] = { p->n++, rp_clock_mono_ns() };
		struct timespec ts = { 0, 200000 };

		rp_event_write(p->ev, v, sizeof(v));
		nanosleep(&ts, NULL);
	}
	return NULL;
}

Test(record, mixed_ring_and_bpf_timeline, .timeout = 120)
{
	struct rp_capture_opts co = { .sz = sizeof(co), .python = true, .kernel_proc = true };
	struct rp_provider_opts po = { .sz = sizeof(po), .name = "Ringpipe-Test-Mixed" };
	struct rp_event_opts eo = { .sz = sizeof(eo), .id = 1, .name = "Tick", .level = 4,
				    .nfields = 2, .fields = mixed_fields };
	struct rp_provider_config pcs[3] = {
		{ .name = RP_CAP_PROVIDER_PYTHON }, { .name = RP_CAP_PROVIDER_KERNEL },
		{ .name = "Ringpipe-Test-Mixed" },
	};
	struct rp_session_opts so = { .sz = sizeof(so), .providers = pcs, .nproviders = 3 };
	struct rp_session_stats ss = { .sz = sizeof(ss) };
	struct rp_capture_stats st;
	struct producer prod = { 0 };
	struct rp_capture *cap;
	struct rp_session *s;
	struct bytebuf b = { 0 };
	struct child py;
	pthread_t th;
	char err[512], line[256], *dir, *file, *cmd;
	const char *p;
	uint64_t prev = 0, inversions = 0, worst = 0;

	NEED_BPF();
	need_python();
	dir = th_tmpdir();
	cr_assert(asprintf(&file, "%s/mixed.nettrace", dir) > 0);
	cr_assert_eq(rp_capture_define(&co, err, sizeof(err)), 0, "%s", err);
	prod.ev = rp_event_new(rp_provider_new(&po), &eo);
	cr_assert(prod.ev);
	py = start_python(dir, NGC, "0.002");
	co.pid = py.pid;
	so.path = file;
	s = rp_session_start(&so);
	cr_assert(s, "%s", rp_last_error());
	co.session = s;
	cap = rp_capture_open(&co, err, sizeof(err));
	cr_assert(cap, "%s", err);
	cr_assert_eq(rp_capture_start(cap), 0);
	cr_assert_eq(pthread_create(&th, NULL, producer_main, &prod), 0);
	cr_assert(write(py.in, "go\n", 3) == 3);
	cr_assert(wait_line(py.out, "done", line, sizeof(line)));
	cr_assert(write(py.in, "x\n", 2) == 2);
	cr_assert_eq(wait_exit(py.pid), 0);
	__atomic_store_n(&prod.stop, 1, __ATOMIC_RELEASE);
	pthread_join(th, NULL);
	rp_capture_stop(cap);
	rp_capture_stats(cap, &st);
	rp_session_stats(s, &ss);
	cr_assert_eq(rp_session_stop(s), 0);
	rp_capture_close(cap);
	fprintf(stderr, "mixed: %" PRIu64 " ring events, %" PRIu64 " BPF records, %" PRIu64
		" written, %" PRIu64 " late\n", prod.n, st.records, st.written, ss.late_events);
	cr_assert_eq(st.kernel_drops + st.write_drops + st.bad, 0);

	/* TraceEvent: one file, per-thread order intact, nothing lost */
	{
		TH_NEED_TRACEDUMP(dll);
		cr_assert(asprintf(&cmd, "dotnet '%s' threads '%s' KtimeNs", dll, file) > 0);
		cr_assert_eq(th_run(cmd, &b), 0, "%s", (char *)b.p);
		cr_assert(strstr((char *)b.p, "#order_violations\t0\n") &&
			  strstr((char *)b.p, "#lost\t0\n"), "TraceDump threads:\n%s", (char *)b.p);
		free(cmd);
		bb_free(&b);
		memset(&b, 0, sizeof(b));
	}
	/* one timeline. A producer event carries the CLOCK_MONOTONIC value its
	 * thread read just before writing (its timestamp is taken later, in
	 * the write), a BPF event the bpf_ktime_get_ns() of the probe hit
	 * (its timestamp is that value, converted). So a BPF event dispatched
	 * after any event must carry a value no smaller than that event's:
	 * this holds only if the clocks are aligned and the BPF events were
	 * merged at their own time, not when they reached the rings. */
	dump_file(file, true, &b);
	/* the interpreter also collects on its way out: at least ours */
	cr_assert(count_lines(&b, "\"name\":\"GC/Start\"", NULL) >= NGC);
	cr_assert(count_lines(&b, "\"provider\":\"Ringpipe-Test-Mixed\"", NULL) == (int)prod.n);
	for (p = (char *)b.p; p && *p;) {
		const char *e = strchr(p, '\n');
		char *l = strndup(p, e ? (size_t)(e - p) : strlen(p));
		int64_t k = jnum(l, "KtimeNs");

		if (k > 0 && !strstr(l, "Ringpipe-Test-Mixed") && (uint64_t)k < prev) {
			inversions++;
			if (prev - (uint64_t)k > worst)
				worst = prev - (uint64_t)k;
			fprintf(stderr, "mixed: BPF event %" PRIu64 " ns before an earlier one: %.300s\n",
				prev - (uint64_t)k, l);
		}
		if (k > 0 && (uint64_t)k > prev)
			prev = (uint64_t)k;
		free(l);
		p = e ? e + 1 : NULL;
	}
	fprintf(stderr, "mixed: %" PRIu64 " BPF events behind the timeline, worst %" PRIu64 " ns\n",
		inversions, worst);
	/* the conversion through a 100 ms anchor errs by well under 10 us */
	cr_assert(worst < 10000, "events out of timeline order by %" PRIu64 " ns", worst);
	bb_free(&b);
	fclose(py.out), close(py.in);
	free(file);
	th_rmdir(dir);
}

/* ---- the CLI's errors ------------------------------------------------------------ */

Test(record, errors_are_clear)
{
	struct bytebuf out = { 0 };
	char *cmd;

	cr_assert(asprintf(&cmd, "'%s' record -a --sample 0 -o /dev/null 2>&1", th_tool()) > 0);
	cr_assert_eq(th_run(cmd, &out), 2);
	cr_assert(strstr((char *)out.p, "--sample takes a rate in Hz"), "%s", (char *)out.p);
	free(cmd);
	bb_free(&out);
	memset(&out, 0, sizeof(out));
	cr_assert(asprintf(&cmd, "'%s' record -a -o /dev/null 2>&1", th_tool()) > 0);
	cr_assert_eq(th_run(cmd, &out), 2);
	cr_assert(strstr((char *)out.p, "nothing to record"), "%s", (char *)out.p);
	free(cmd);
	bb_free(&out);
	memset(&out, 0, sizeof(out));
	/* without the capabilities: the message names them */
	if (system("command -v setpriv >/dev/null 2>&1") == 0 && getuid() == 0) {
		cr_assert(asprintf(&cmd, "setpriv --reuid=65534 --regid=65534 --clear-groups "
				   "--inh-caps=-all '%s' record -a --kernel exec -o /tmp/rp-nopriv "
				   "2>&1", th_tool()) > 0);
		cr_assert_eq(th_run(cmd, &out), 1, "%s", (char *)out.p);
		cr_assert(strstr((char *)out.p, "CAP_BPF") && strstr((char *)out.p, "CAP_PERFMON"),
			  "%s", (char *)out.p);
		free(cmd);
	}
	bb_free(&out);
}
