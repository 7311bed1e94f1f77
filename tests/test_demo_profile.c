// SPDX-License-Identifier: MIT
/*
 * ringpipe-demo is CPU-profilable by the real .NET tools, and looks like the
 * runtime it imitates to them.
 *
 * profile: `dotnet-trace collect` with its defaults, converted by
 * `dotnet-trace convert --format speedscope`, shows the demo's managed
 * methods with the CPU split its workers are built with (Demo.Worker.Run
 * calls Compute, Hash and Parse for 5, 3 and 2 units of the same loop: 50 %,
 * 30 %, 20 %), and `dotnet-stack report` prints a managed stack for every
 * thread the demo's sampler samples, 20 runs out of 20.
 *
 * runtime: the EventPipe ProcessInfo event, the runtime version (rundown and
 * ProcessInfo2), live MethodLoad events under the JIT keyword, and a rundown
 * that stays bounded however many methods were JIT-compiled.
 *
 * Without dotnet, the tools or the TraceEvent dumper these skip with the
 * reason, unless RINGPIPE_REQUIRE_INTEROP=1.
 */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#include "helpers.h"

/* the split tools/demo/demo.c builds its workers with, in percent */
#define SHARE_COMPUTE 50.0
#define SHARE_HASH 30.0
#define SHARE_PARSE 20.0
/*
 * The tolerance, in percentage points. An 8 s profile at 1 kHz has about
 * 8000 worker samples, whose sampling error is under 1 point. Speedscope's
 * shares are wall time, though: a worker that waits for a CPU is charged,
 * until its next sample, to where it was preempted, which on a busy host
 * leaves fewer independent samples (measured for Compute: 48.6 to 51.6 %
 * at load 4 to 11 on 2 CPUs).
 */
#define SHARE_TOLERANCE 5.0
#define PROFILE_SECONDS 8

static const char *text(const struct bytebuf *b)
{
	return b->p ? (const char *)b->p : "";
}

/* Runs cmd (stdout and stderr into out); fails the test unless it exits 0. */
static void run_ok(const char *cmd, struct bytebuf *out)
{
	int rc = th_run(cmd, out);

	cr_assert_eq(rc, 0, "%s: exit %d: %.3000s", cmd, rc, text(out));
}

static void tracedump(const char *dll, const char *mode, const char *path, struct bytebuf *out)
{
	char *cmd = th_fmt("dotnet '%s' %s '%s' 2>&1", dll, mode, path);

	run_ok(cmd, out);
	free(cmd);
}

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* `dotnet-trace collect -p PID ARGS` for `seconds` into path. */
static void dotnet_trace(const struct th_demo *d, const char *args, int seconds, const char *path)
{
	struct bytebuf out = { 0 };
	char *cmd = th_fmt("%s/dotnet-trace collect -p %d %s --duration 00:00:00:%02d -o '%s' 2>&1 "
			"</dev/null", th_dotnet_tools(), (int)d->pid, args, seconds, path);

	run_ok(cmd, &out);
	free(cmd);
	bb_free(&out);
}

/* ---- speedscope ------------------------------------------------------------ */

#define MAX_FRAMES 4096
#define MAX_PROFILES 256

struct profile {
	uint32_t tid;
	double total;				/* endValue - startValue, ms */
	double *incl;				/* per frame: time with it on the stack, ms */
	uint32_t *opens;			/* per frame: times it came onto the stack */
	double *incl_sq;			/* per frame: the squares of those times, ms^2 */
};

struct speedscope {
	char *frame[MAX_FRAMES];
	uint32_t nframes;
	struct profile p[MAX_PROFILES];
	uint32_t nprofiles;
};

/* The string value after `"key":` at or after p (spaces allowed); NULL if none before end. */
static const char *after_key(const char *p, const char *end, const char *key)
{
	char pat[64];
	const char *k;

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	k = strstr(p, pat);
	if (!k || (end && k >= end))
		return NULL;
	k += strlen(pat);
	while (*k == ' ')
		k++;
	return k;
}

/*
 * Reads what the test needs of the file dotnet-trace writes: frame names in
 * order, then per evented profile ("Thread (N)") the time each frame spends
 * on the stack (open to close, outermost instance only).
 */
static void speedscope_read(const char *json, struct speedscope *s)
{
	const char *p = strstr(json, "\"frames\""), *prof = strstr(json, "\"profiles\"");
	uint32_t depth[MAX_FRAMES];
	double open_at[MAX_FRAMES];

	memset(s, 0, sizeof(*s));
	cr_assert(p && prof && p < prof, "no frames and profiles in: %.500s", json);
	while ((p = after_key(p, prof, "name")) && s->nframes < MAX_FRAMES) {
		const char *e = strchr(p + 1, '"');

		cr_assert(*p == '"' && e);
		s->frame[s->nframes++] = strndup(p + 1, (size_t)(e - p - 1));
		p = e;
	}
	p = prof;
	while ((p = strstr(p, "\"evented\"")) && s->nprofiles < MAX_PROFILES) {
		struct profile *pr = &s->p[s->nprofiles++];
		const char *next = strstr(p + 1, "\"evented\""), *name = after_key(p, next, "name");
		const char *v;
		double start, stop;

		cr_assert(name && !strncmp(name, "\"Thread (", 9),
			  "a profile not named by a thread");
		pr->tid = (uint32_t)strtoul(name + 9, NULL, 10);
		v = after_key(p, next, "startValue");
		cr_assert(v);
		start = strtod(v, NULL);
		v = after_key(p, next, "endValue");
		cr_assert(v);
		stop = strtod(v, NULL);
		pr->total = stop - start;
		pr->incl = calloc(s->nframes, sizeof(double));
		pr->opens = calloc(s->nframes, sizeof(uint32_t));
		pr->incl_sq = calloc(s->nframes, sizeof(double));
		cr_assert(pr->incl && pr->opens && pr->incl_sq);
		memset(depth, 0, sizeof(depth));
		p = after_key(p, next, "events");
		cr_assert(p);
		while ((v = after_key(p, next, "type"))) {
			char type = v[1];
			const char *f = after_key(v, next, "frame"), *at = after_key(v, next, "at");
			uint32_t fr;
			double t;

			if (!f || !at)
				break;
			fr = (uint32_t)strtoul(f, NULL, 10);
			t = strtod(at, NULL);
			cr_assert_lt(fr, s->nframes, "event of frame %u, only %u frames", fr,
				     s->nframes);
			if (type == 'O' && depth[fr]++ == 0) {
				open_at[fr] = t;
				pr->opens[fr]++;
			}
			else if (type == 'C' && depth[fr] && --depth[fr] == 0) {
				pr->incl[fr] += t - open_at[fr];
				pr->incl_sq[fr] += (t - open_at[fr]) * (t - open_at[fr]);
			}
			p = at;
		}
		p = next ? next : p + strlen(p);
		if (!next)
			break;
	}
}

static void speedscope_free(struct speedscope *s)
{
	uint32_t k;

	for (k = 0; k < s->nframes; k++)
		free(s->frame[k]);
	for (k = 0; k < s->nprofiles; k++) {
		free(s->p[k].incl);
		free(s->p[k].opens);
		free(s->p[k].incl_sq);
	}
}

/* How many times a frame whose name contains what came onto pr's stack. */
static uint32_t opens(const struct speedscope *s, const struct profile *pr, const char *what)
{
	uint32_t k, n = 0;

	for (k = 0; k < s->nframes; k++)
		if (strstr(s->frame[k], what))
			n += pr->opens[k];
	return n;
}

/*
 * The number of independent samples a share over the frames whose names
 * contain one of what[0..n) is worth. A share of wall time weighs each stay
 * on a frame by its length, so its spread is that of a weighted mean:
 * sum(d)^2 / sum(d^2) stays of lengths d, which is the number of stays when
 * they are alike and far fewer when a few long ones (a worker waiting for a
 * CPU, charged to where it was preempted) carry the weight.
 */
static double effective_samples(const struct speedscope *s, const struct profile *pr,
				const char *const *what, uint32_t n)
{
	double sum = 0, sum_sq = 0;
	uint32_t k, i;

	for (k = 0; k < s->nframes; k++)
		for (i = 0; i < n; i++)
			if (strstr(s->frame[k], what[i])) {
				sum += pr->incl[k];
				sum_sq += pr->incl_sq[k];
				break;
			}
	return sum_sq > 0 ? sum * sum / sum_sq : 0;
}

/* The share of pr's time (percent) with a frame whose name contains what. */
static double share(const struct speedscope *s, const struct profile *pr, const char *what)
{
	double t = 0;
	uint32_t k;

	for (k = 0; k < s->nframes; k++)
		if (strstr(s->frame[k], what))
			t += pr->incl[k];
	return pr->total > 0 ? t * 100 / pr->total : 0;
}

/* ---- the demo's threads ------------------------------------------------------ */

#define MAX_TIDS 64

/* The threads the demo's sampler samples: the main thread and every
 * "demo-*" thread but the sampler (tools/demo names them so). */
static uint32_t sampled_threads(pid_t pid, uint32_t *tid, char (*name)[32])
{
	char path[64];
	struct dirent *de;
	uint32_t n = 0;
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	dir = opendir(path);
	cr_assert(dir, "cannot list %s", path);
	while ((de = readdir(dir)) && n < MAX_TIDS) {
		struct bytebuf comm = { 0 };
		char *cpath, *nl;
		uint32_t t = (uint32_t)strtoul(de->d_name, NULL, 10);

		if (!t)
			continue;
		cpath = th_fmt("/proc/%d/task/%u/comm", (int)pid, t);
		if (th_read_file(cpath, &comm) == 0 && comm.p) {
			nl = strchr((char *)comm.p, '\n');
			if (nl)
				*nl = 0;
			if ((t == (uint32_t)pid || !strncmp((char *)comm.p, "demo-", 5)) &&
			    strcmp((char *)comm.p, "demo-sampler")) {
				snprintf(name[n], sizeof(name[n]), "%s", (char *)comm.p);
				tid[n++] = t;
			}
		}
		bb_free(&comm);
		free(cpath);
	}
	closedir(dir);
	return n;
}

/* ---- profile ------------------------------------------------------------------ */

Test(demo_profile, dotnet_trace_speedscope_shows_the_workers_methods_with_their_shares,
     .timeout = 240)
{
	char *extra[] = { "--duration", "200", "--work-threads", "1", NULL };
	char *dir, *trace, *cmd;
	struct bytebuf out = { 0 }, json = { 0 };
	struct speedscope *s = calloc(1, sizeof(*s));
	const struct profile *worker = NULL;
	struct th_demo d;
	uint32_t k;

	TH_NEED_DOTNET_TOOL("dotnet-trace");
	dir = th_tmpdir();
	cr_assert(dir && s);
	trace = th_fmt("%s/cpu.nettrace", dir);
	th_demo_start(&d, dir, extra);
	/* its defaults: dotnet-common + dotnet-sampled-thread-time */
	dotnet_trace(&d, "", PROFILE_SECONDS, trace);
	th_demo_stop(&d);
	cmd = th_fmt("cd '%s' && %s/dotnet-trace convert --format speedscope '%s' -o cpu 2>&1", dir,
		  th_dotnet_tools(), trace);
	run_ok(cmd, &out);
	free(cmd);
	cmd = th_fmt("%s/cpu.speedscope.json", dir);
	cr_assert_eq(th_read_file(cmd, &json), 0, "no speedscope file: %s", text(&out));
	speedscope_read(text(&json), s);

	for (k = 0; k < s->nprofiles; k++)
		if (share(s, &s->p[k], "RingpipeDemo!Demo.Worker.Run(") > 0)
			worker = &s->p[k];
	cr_assert(worker, "no thread runs Demo.Worker.Run in the speedscope profile");
	cr_assert_gt(share(s, worker, "RingpipeDemo!Demo.Worker.Run("), 100 - SHARE_TOLERANCE,
		     "Demo.Worker.Run is %.1f %% of its thread, expected all of it",
		     share(s, worker, "RingpipeDemo!Demo.Worker.Run("));
	{
		static const struct { const char *m; double want; } split[] = {
			{ "RingpipeDemo!Demo.Worker.Compute(", SHARE_COMPUTE },
			{ "RingpipeDemo!Demo.Worker.Hash(", SHARE_HASH },
			{ "RingpipeDemo!Demo.Worker.Parse(", SHARE_PARSE },
		};

		const char *const names[] = { split[0].m, split[1].m, split[2].m };
		uint32_t n = 0;
		double n_eff;

		/*
		 * The shares are estimated from samples, and a loaded host
		 * starves the demo's sampler: the fewer the samples, and the
		 * more unequal their weights, the wider an estimate spreads.
		 * The band is SHARE_TOLERANCE, or 4.5 standard deviations of a
		 * share estimated from n_eff independent samples when that is
		 * wider. n_eff counts stays on one of the three methods (two
		 * samples in a row in one method make one stay) weighed by
		 * their lengths (effective_samples()): at most the samples, so
		 * the band errs wide, never narrow.
		 */
		for (k = 0; k < 3; k++)
			n += opens(s, worker, split[k].m);
		cr_assert_gt(n, 0, "no sample of the worker's methods");
		n_eff = effective_samples(s, worker, names, 3);
		cr_assert_gt(n_eff, 0, "no time in the worker's methods");
		cr_log_info("worker: Compute %.1f %%, Hash %.1f %%, Parse %.1f %%; %u stays, worth "
			    "%.0f independent samples", share(s, worker, split[0].m),
			    share(s, worker, split[1].m), share(s, worker, split[2].m), n, n_eff);
		for (k = 0; k < 3; k++) {
			double got = share(s, worker, split[k].m), p = split[k].want / 100;
			double band = 100 * 4.5 * sqrt(p * (1 - p) / n_eff);

			if (band < SHARE_TOLERANCE)
				band = SHARE_TOLERANCE;
			cr_assert(got > split[k].want - band && got < split[k].want + band,
				  "%s is %.1f %% of the worker's time, expected %.0f +- %.1f (%u "
				  "stays worth %.0f independent samples)", split[k].m, got,
				  split[k].want, band, n, n_eff);
		}
	}
	/* every other demo thread by the method it runs, as a real app's */
	{
		static const char *const loops[] = {
			"RingpipeDemo!Demo.Program.Main(", "RingpipeDemo!Demo.Writer.Run(",
			"RingpipeDemo!Demo.Counters.Run(", "RingpipeDemo!Demo.Jit.CompileLoop(",
			"RingpipeDemo!Demo.Heap.AllocateLoop(",
		};

		for (k = 0; k < sizeof(loops) / sizeof(loops[0]); k++) {
			uint32_t i;
			bool seen = false;

			for (i = 0; i < s->nprofiles && !seen; i++)
				seen = share(s, &s->p[i], loops[k]) > 100 - SHARE_TOLERANCE;
			cr_assert(seen, "no thread spends its time in %s", loops[k]);
		}
	}
	free(cmd);
	free(trace);
	speedscope_free(s);
	free(s);
	bb_free(&out);
	bb_free(&json);
	th_rmdir(dir);
}

/* The stack dotnet-stack printed for thread tid: from its header to the blank line. */
static const char *stack_of(const char *report, uint32_t tid, size_t *len)
{
	char head[48];
	const char *p, *e;

	snprintf(head, sizeof(head), "Thread (0x%X):\n", tid);
	p = strstr(report, head);
	if (!p)
		return NULL;
	e = strstr(p, "\n\n");
	*len = e ? (size_t)(e - p) : strlen(p);
	return p;
}

Test(demo_profile, dotnet_stack_report_prints_every_sampled_threads_stack_20_of_20,
     .timeout = 600)
{
	/* no CPU worker: it would compete for the CPUs with the profile test's,
	 * which runs alongside (the worker's two-frame stack is checked there) */
	char *extra[] = { "--duration", "500", NULL };
	char names[MAX_TIDS][32];
	uint32_t tid[MAX_TIDS], n, k;
	struct th_demo d;
	char *dir, *cmd;
	int run;

	TH_NEED_DOTNET_TOOL("dotnet-stack");
	dir = th_tmpdir();
	th_demo_start(&d, dir, extra);
	/* main, counters, writer, 2 allocators, 2 JIT threads; the last ones
	 * start after the socket is up */
	for (k = 0; k < 6000 && (n = sampled_threads(d.pid, tid, names)) < 7; k++)	/* 60 s */
		usleep(10000);
	cr_assert_eq(n, 7, "expected 7 sampled demo threads, found %u", n);
	cmd = th_fmt("%s/dotnet-stack report -p %d 2>&1 </dev/null", th_dotnet_tools(), (int)d.pid);
	for (run = 0; run < 20; run++) {
		struct bytebuf out = { 0 };

		run_ok(cmd, &out);
		for (k = 0; k < n; k++) {
			size_t len = 0;
			const char *st = stack_of(text(&out), tid[k], &len);

			cr_assert(st, "run %d of 20: no stack for thread %u (%s) in:\n%s", run + 1,
				  tid[k], names[k], text(&out));
			cr_assert(memmem(st, len, "\n  RingpipeDemo!Demo.", 20),
				  "run %d of 20: thread %u (%s) has no managed frame:\n%.*s",
				  run + 1, tid[k], names[k], (int)len, st);
		}
		bb_free(&out);
	}
	th_demo_stop(&d);
	free(cmd);
	th_rmdir(dir);
}

/* ---- what the runtime says about itself ------------------------------------------- */

/* TraceDump dump's lines of one event (provider and name). */
static size_t count_events(const char *dump, const char *provider, const char *name,
			   const char *with)
{
	char want[256];
	const char *p = dump;
	size_t n = 0;

	snprintf(want, sizeof(want), "{\"provider\":\"%s\"", provider);
	while ((p = strstr(p, want))) {
		const char *e = strchr(p, '\n');
		char nm[128];
		size_t len = e ? (size_t)(e - p) : strlen(p);

		snprintf(nm, sizeof(nm), "\"name\":\"%s\"", name);
		if (memmem(p, len, nm, strlen(nm)) && (!with || memmem(p, len, with, strlen(with))))
			n++;
		p += len;
	}
	return n;
}

/* EventPipe writes ProcessInfo into every session, whatever it enables:
 * needs the IPC server to enable Microsoft-DotNETCore-EventPipe in each. */
Test(demo_profile, a_default_dotnet_trace_session_has_the_process_info_event, .timeout = 180)
{
	TH_NEED_TRACEDUMP(dll);
	char *extra[] = { "--duration", "100", NULL };
	struct bytebuf dump = { 0 };
	char *dir, *trace, *cmdline;
	struct th_demo d;

	TH_NEED_DOTNET_TOOL("dotnet-trace");
	dir = th_tmpdir();
	trace = th_fmt("%s/t.nettrace", dir);
	th_demo_start(&d, dir, extra);
	dotnet_trace(&d, "", 2, trace);
	th_demo_stop(&d);
	tracedump(dll, "dump", trace, &dump);
	cmdline = th_fmt("\"CommandLine\":\"ringpipe-demo --duration 100\"");
	cr_assert_eq(count_events(text(&dump), "Microsoft-DotNETCore-EventPipe", "ProcessInfo",
				  cmdline), 1,
		     "expected one ProcessInfo with %s in the trace of a default dotnet-trace "
		     "session", cmdline);
	/* which TraceLog names the process by, as PerfView and speedscope show it */
	free(cmdline);
	cmdline = th_fmt("cd '%s' && %s/dotnet-trace convert --format speedscope '%s' -o t 2>&1", dir,
		      th_dotnet_tools(), trace);
	dump.len = 0;
	run_ok(cmdline, &dump);
	free(cmdline);
	cmdline = th_fmt("%s/t.speedscope.json", dir);
	dump.len = 0;
	cr_assert_eq(th_read_file(cmdline, &dump), 0, "no speedscope file");
	free(cmdline);
	cmdline = th_fmt("\"Process64 ringpipe-demo (%d) Args: --duration 100\"", (int)d.pid);
	cr_assert(strstr(text(&dump), cmdline), "the process is not named %s: %.300s", cmdline,
		  text(&dump));
	free(cmdline);
	free(trace);
	bb_free(&dump);
	th_rmdir(dir);
}

Test(demo_profile, the_process_info_event_carries_command_line_os_and_arch, .timeout = 180)
{
	TH_NEED_TRACEDUMP(dll);
	char *extra[] = { "--duration", "100", "--alloc-threads", "0", NULL };
	struct bytebuf dump = { 0 };
	char *dir, *trace;
	const char *line;
	struct th_demo d;

	TH_NEED_DOTNET_TOOL("dotnet-trace");
	dir = th_tmpdir();
	trace = th_fmt("%s/t.nettrace", dir);
	th_demo_start(&d, dir, extra);
	dotnet_trace(&d, "--providers Microsoft-DotNETCore-EventPipe,Ringpipe-Demo", 2, trace);
	th_demo_stop(&d);
	tracedump(dll, "dump", trace, &dump);
	cr_assert_eq(count_events(text(&dump), "Microsoft-DotNETCore-EventPipe", "ProcessInfo",
				  NULL), 1, "expected one ProcessInfo: %.3000s", text(&dump));
	line = strstr(text(&dump), "\"name\":\"ProcessInfo\"");
	cr_assert(line && strstr(line, "\"CommandLine\":\"ringpipe-demo --duration 100 "
				 "--alloc-threads 0\"") &&
		  strstr(line, "\"OSInformation\":\"Linux\"") &&
		  (strstr(line, "\"ArchInformation\":\"x64\"") ||
		   strstr(line, "\"ArchInformation\":\"arm64\"")),
		  "ProcessInfo fields: %.600s", line ? line : "");
	free(trace);
	bb_free(&dump);
	th_rmdir(dir);
}

Test(demo_profile, rundown_names_the_imitated_runtime_10_0, .timeout = 180)
{
	TH_NEED_TRACEDUMP(dll);
	char *extra[] = { "--duration", "100", "--alloc-threads", "0", NULL };
	struct bytebuf clr = { 0 };
	char *dir, *trace;
	struct th_demo d;

	TH_NEED_DOTNET_TOOL("dotnet-trace");
	dir = th_tmpdir();
	trace = th_fmt("%s/t.nettrace", dir);
	th_demo_start(&d, dir, extra);
	dotnet_trace(&d, "--providers Ringpipe-Demo", 2, trace);	/* rundown is on */
	th_demo_stop(&d);
	tracedump(dll, "clr", trace, &clr);
	cr_assert(strstr(text(&clr), "Runtime/Start\tClrInstanceID=0\tSku=2\tBclMajorVersion=10\t"
				     "BclMinorVersion=0\tBclBuildNumber=0\tBclQfeNumber=0\t"
				     "VMMajorVersion=10\tVMMinorVersion=0\t"),
		  "no RuntimeInformation of 10.0 in: %.3000s", text(&clr));
	cr_assert(strstr(text(&clr), "/Microsoft.NETCore.App/10.0.0/System.Private.CoreLib.dll"),
		  "System.Private.CoreLib is not 10.0.0's: %.3000s", text(&clr));
	cr_assert(!strstr(text(&clr), "8.0.0"), "a version 8 left: %.3000s", text(&clr));
	free(trace);
	bb_free(&clr);
	th_rmdir(dir);
}

/* ProcessInfo2/3's runtime version: needs rp_ipc_opts to carry it. */
Test(demo_profile, process_info2_reports_the_imitated_runtime_version, .timeout = 60)
{
	char *extra[] = { "--duration", "100", "--alloc-threads", "0", NULL };
	struct bytebuf out = { 0 };
	char *args, want[64];
	const char *p;
	struct th_demo d;
	char *dir = th_tmpdir();

	th_demo_start(&d, dir, extra);
	args = th_fmt("ps -v");
	cr_assert_eq(th_tool_run(args, &out), 0, "ringpipe ps -v: %s", text(&out));
	th_demo_stop(&d);
	snprintf(want, sizeof(want), "%d ", (int)d.pid);
	p = strstr(text(&out), want);
	cr_assert(p, "ringpipe ps -v does not list %d: %s", (int)d.pid, text(&out));
	p = strstr(p, "runtime: ");
	cr_assert(p && !strncmp(p, "runtime: ringpipe-demo 10.0.0,", 30),
		  "the demo's ProcessInfo2 runtime, expected \"ringpipe-demo 10.0.0\": %.200s",
		  p ? p : text(&out));
	free(args);
	bb_free(&out);
	th_rmdir(dir);
}

/* ---- JIT -------------------------------------------------------------------------- */

/* The base of the published methods' code, which the demo printed. */
static uint64_t code_base(const struct th_demo *d)
{
	struct bytebuf err = { 0 };
	const char *p;
	uint64_t base;

	cr_assert_eq(th_read_file(d->err, &err), 0);
	p = strstr(text(&err), "jit-code-base 0x");
	cr_assert(p, "the demo printed no jit-code-base: %s", text(&err));
	base = strtoull(p + 14, NULL, 16);
	bb_free(&err);
	return base;
}

/* Field value of a TraceDump clr line as a number (or ~0). */
static uint64_t clr_field(const char *line, const char *key)
{
	char pat[64];
	const char *v;

	snprintf(pat, sizeof(pat), "\t%s=", key);
	v = strstr(line, pat);
	return v ? strtoull(v + strlen(pat), NULL, 10) : ~0ull;
}

Test(demo_profile, the_jit_keyword_gets_live_method_load_events, .timeout = 400)
{
	TH_NEED_TRACEDUMP(dll);
	char *extra[] = { "--duration", "300", "--alloc-threads", "0", "--jit-threads", "2",
			  "--jit-rate", "200", "--jit-live", "64", NULL };
	struct bytebuf clr = { 0 };
	char *dir, *trace, *line, *save = NULL;
	size_t loads = 0, started = 0, unloads = 0;
	uint64_t base, end;
	struct th_demo d;

	TH_NEED_DOTNET_TOOL("dotnet-trace");
	dir = th_tmpdir();
	trace = th_fmt("%s/t.nettrace", dir);
	th_demo_start(&d, dir, extra);
	/* JIT (0x10) at Verbose: MethodJittingStarted is a verbose event.
	 * Traced 3 s at a time until a trace holds 600 loads (the first, on
	 * a quiet host: 2 threads at 200/s; on a loaded one the JIT threads
	 * may fall behind their rate) */
	for (end = mono_ms() + 180000;;) {
		const char *at;

		dotnet_trace(&d, "--providers Microsoft-Windows-DotNETRuntime:0x10:5", 3, trace);
		bb_free(&clr);
		clr = (struct bytebuf){ 0 };
		tracedump(dll, "clr", trace, &clr);
		for (loads = 0, at = strstr(text(&clr), "Method/LoadVerbose\t"); at;
		     at = strstr(at + 1, "Method/LoadVerbose\t"))
			loads++;
		if (loads > 600 || mono_ms() > end)
			break;
	}
	loads = 0;
	th_demo_stop(&d);
	base = code_base(&d);
	for (line = strtok_r((char *)clr.p, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		uint64_t id = clr_field(line, "MethodID"), t = (id >> 40) - 1;
		uint64_t i = id & ((1ull << 40) - 1);

		if (!strncmp(line, "Method/JittingStarted\t", 22)) {
			started++;
			cr_assert_eq(clr_field(line, "MethodILSize"), 8 + i % 100, "%s", line);
		} else if (!strncmp(line, "Method/LoadVerbose\t", 19)) {
			loads++;
			cr_assert_lt(t, 2, "a MethodLoadVerbose of no JIT thread: %s", line);
			cr_assert_eq(clr_field(line, "MethodStartAddress"),
				     base + t * (1ull << 28) + (i % 64) * 256, "%s", line);
			cr_assert_eq(clr_field(line, "MethodSize"), 16 + i % 200, "%s", line);
		} else if (!strncmp(line, "Method/UnloadVerbose\t", 21)) {
			unloads++;
			cr_assert_lt(t, 2, "a MethodUnloadVerbose of no JIT thread: %s", line);
		}
	}
	/* 2 threads at 200/s for 3 s: a live event per method, and past 64
	 * methods each load unloads the method whose slot it takes */
	cr_assert_gt(loads, 600, "only %zu MethodLoadVerbose events in the last 3 s trace of 180 s",
		     loads);
	cr_assert(started >= loads && started <= loads + 2,
		  "%zu MethodJittingStarted for %zu MethodLoadVerbose", started, loads);
	cr_assert_gt(unloads, loads / 2, "only %zu MethodUnloadVerbose for %zu loads", unloads,
		     loads);
	free(trace);
	bb_free(&clr);
	th_rmdir(dir);
}

Test(demo_profile, the_rundown_stays_bounded_while_methods_keep_being_jitted, .timeout = 400)
{
	TH_NEED_TRACEDUMP(dll);
	char *extra[] = { "--duration", "300", "--alloc-threads", "0", "--jit-threads", "2",
			  "--jit-rate", "20000", "--jit-live", "1024", NULL };
	struct bytebuf clr = { 0 }, err = { 0 };
	uint64_t before, emitted, live, code, published[2], base, end;
	char *dir, *trace, *line, *save = NULL;
	unsigned int sessions;
	size_t methods = 0;
	const char *p, *q;
	struct th_demo d;
	int sid;

	TH_NEED_DOTNET_TOOL("dotnet-trace");
	dir = th_tmpdir();
	trace = th_fmt("%s/t.nettrace", dir);
	th_demo_start(&d, dir, extra);
	/* traced until a rundown begins with ten times as many methods JIT-
	 * compiled as can be live (at 2 x 20,000 a second, the first on a
	 * quiet host; on a loaded one the JIT threads get less of a CPU).
	 * Each session's rundown adds two lines to the demo's stderr, the
	 * second its per-thread counts; the demo may write them just after
	 * dotnet-trace has ended, so they are waited for. */
	for (sessions = 1, end = mono_ms() + 180000;; sessions++) {
		uint64_t seen_by = mono_ms() + 60000;

		dotnet_trace(&d, "--providers Microsoft-Windows-DotNETRuntime:0x1:4", 2, trace);
		for (;;) {
			unsigned int lines = 0;

			bb_free(&err);
			err = (struct bytebuf){ 0 };
			cr_assert_eq(th_read_file(d.err, &err), 0);
			for (p = strstr(text(&err), "per-thread-before "); p;
			     p = strstr(p + 1, "per-thread-before "))
				lines++;
			if (lines >= sessions)
				break;
			cr_assert_lt(mono_ms(), seen_by, "no rundown line of session %u in 60 s: %s",
				     sessions, text(&err));
			usleep(10000);
		}
		for (p = strstr(text(&err), ": published-before "), q = NULL; p;
		     p = strstr(p + 1, ": published-before "))
			q = p;
		while (q && q > text(&err) && q[-1] != '\n')
			q--;
		p = q;
		cr_assert(p && sscanf(p, "rundown session %d: published-before %" SCNu64 " emitted %"
				      SCNu64 " live-before %" SCNu64 " code %" SCNu64, &sid, &before,
				      &emitted, &live, &code) == 5, "no rundown line: %s", text(&err));
		if (before > 10 * 2048 || mono_ms() > end)
			break;
	}
	th_demo_stop(&d);
	base = code_base(&d);
	p = strstr(p, "per-thread-before ");
	cr_assert(p && sscanf(p, "per-thread-before %" SCNu64 ",%" SCNu64, &published[0],
			      &published[1]) == 2, "%s", text(&err));
	cr_assert_gt(before, 10 * 2048, "only %" PRIu64 " methods JIT-compiled in 180 s", before);
	cr_assert_leq(emitted, 2048, "rundown listed %" PRIu64 " methods, at most 2 x 1024 live",
		      emitted);
	tracedump(dll, "clr", trace, &clr);
	cr_assert(strstr(text(&clr), "#lost\t0\n"), "events lost");
	for (line = strtok_r((char *)clr.p, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		uint64_t id, t, i;

		if (strncmp(line, "Method/DCStopVerbose\t", 21) || !strstr(line, "Demo.Jit.T"))
			continue;
		id = clr_field(line, "MethodID");
		t = (id >> 40) - 1;
		i = id & ((1ull << 40) - 1);
		methods++;
		cr_assert_lt(t, 2, "%s", line);
		/* live: one of the last 1024 of its thread when rundown began
		 * (or published since) */
		cr_assert_geq(i + 1024, published[t], "method %" PRIu64 " of thread %" PRIu64
			      " was unloaded before rundown began (%" PRIu64 " published)", i, t,
			      published[t]);
		cr_assert_eq(clr_field(line, "MethodStartAddress"),
			     base + t * (1ull << 28) + (i % 1024) * 256, "torn: %s", line);
	}
	cr_assert_eq(methods, emitted, "TraceEvent decoded %zu of the %" PRIu64 " methods", methods,
		     emitted);
	cr_assert_geq(methods, 1024, "rundown listed only %zu live methods", methods);
	free(trace);
	bb_free(&clr);
	bb_free(&err);
	th_rmdir(dir);
}
