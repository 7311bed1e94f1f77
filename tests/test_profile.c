// SPDX-License-Identifier: MIT
/*
 * CPU profiles of real .NET processes: `ringpipe convert` of traces that
 * `ringpipe collect` and `dotnet-trace collect` wrote from
 * tests/interop/DotnetApp --spin (two threads spinning in the recursive
 * Hot.SpinFibonacci, with Warm.SumSquares beside it), judged against
 * `dotnet-trace convert` of the same file; and the symbolizer on the same
 * program's perf map, after it exited and through the W^X double mapping
 * (`ringpipe sample`). The JSON is read by python3, as test_sample does.
 * Without the .NET SDK or the tools these skip with the reason, unless
 * RINGPIPE_REQUIRE_INTEROP=1, which makes them fail.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <time.h>

#include "helpers.h"
#include "symbols/symbolize.h"


/* What dotnet-trace's default profile asks for (dotnet-common plus
 * dotnet-sampled-thread-time): the runtime's GC, Loader, Jit and related
 * keywords, so that methods jitted while tracing are named, and the
 * sampler. The rundown at the end names everything else. */
#define CPU_PROVIDERS                                                           \
	"Microsoft-DotNETCore-SampleProfiler:0xF00000000000:4,"                 \
	"Microsoft-Windows-DotNETRuntime:0x100003801D:4"

static const char *text(struct bytebuf *b)
{
	return b->p ? (const char *)b->p : "";
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static char *dotnet_trace(void)
{
	char *p;

	TH_NEED_DOTNET_TOOL("dotnet-trace");
	cr_assert(asprintf(&p, "%s/dotnet-trace", th_dotnet_tools()) > 0);
	return p;
}

struct app {
	pid_t pid;
	int out_fd;
};

/* Starts `dotnet DotnetApp.dll --spin --duration 60`, with the runtime's
 * perf map on when asked (W^X stays as the runtime defaults it: on), and
 * waits for its "pid N" line. */
static void app_start(struct app *a, bool perf_map)
{
	const char *dll = th_dotnet_app();
	char line[64];
	size_t n = 0;
	uint64_t deadline;
	int pfd[2];

	cr_assert_eq(pipe2(pfd, O_CLOEXEC), 0);
	a->pid = fork();
	cr_assert_geq(a->pid, 0);
	if (a->pid == 0) {
		dup2(pfd[1], STDOUT_FILENO);
		unsetenv("DOTNET_EnableWriteXorExecute");
		if (perf_map)
			setenv("DOTNET_PerfMapEnabled", "1", 1);
		else
			unsetenv("DOTNET_PerfMapEnabled");
		execlp("dotnet", "dotnet", dll, "--spin", "--duration", "60", (char *)NULL);
		_exit(127);
	}
	close(pfd[1]);
	a->out_fd = pfd[0];
	deadline = now_ms() + 120000;	/* a .NET start on a loaded host: seconds */
	while (now_ms() < deadline && n < sizeof(line) - 1) {
		struct pollfd pf = { .fd = a->out_fd, .events = POLLIN };

		if (poll(&pf, 1, 100) <= 0)
			continue;
		if (read(a->out_fd, line + n, 1) <= 0)
			break;
		if (line[n] == '\n')
			break;
		n++;
	}
	line[n] = 0;
	cr_assert(!strncmp(line, "pid ", 4), "DotnetApp did not print its pid (got '%s')", line);
	cr_assert_eq(atoi(line + 4), a->pid, "%s", line);
}

static void app_kill(struct app *a)
{
	if (a->pid > 0) {
		kill(a->pid, SIGKILL);
		waitpid(a->pid, NULL, 0);
		a->pid = 0;
	}
	if (a->out_fd >= 0)
		close(a->out_fd);
	a->out_fd = -1;
}

/* Waits (a hang guard of 60 s) until the app's diagnostic socket exists. */
static void wait_socket(pid_t pid)
{
	char cmd[160];
	int i;

	snprintf(cmd, sizeof(cmd), "ls /tmp/dotnet-diagnostic-%d-*-socket >/dev/null 2>&1",
		 (int)pid);
	for (i = 0; i < 1200; i++) {
		if (!system(cmd))
			return;
		usleep(50000);
	}
	cr_assert_fail("pid %d never created its diagnostic socket", (int)pid);
}

/* Waits (a hang guard of 60 s) until the perf map names the spinning method. */
static void wait_perf_map(pid_t pid)
{
	char cmd[160];
	int i;

	snprintf(cmd, sizeof(cmd), "grep -q 'Hot::SpinFibonacci' /tmp/perf-%d.map 2>/dev/null",
		 (int)pid);
	for (i = 0; i < 1200; i++) {
		if (!system(cmd))
			return;
		usleep(50000);
	}
	cr_assert_fail("/tmp/perf-%d.map never listed Hot::SpinFibonacci", (int)pid);
}

static void remove_perf_map(pid_t pid)
{
	char path[64];

	snprintf(path, sizeof(path), "/tmp/perf-%d.map", (int)pid);
	unlink(path);
	snprintf(path, sizeof(path), "/tmp/perfinfo-%d.map", (int)pid);
	unlink(path);
}

/* `ringpipe collect` of the spinning app for 3 s into DIR/name. */
static char *collect_spin(const char *dir, const char *name, const char *providers,
			  const char *extra, bool perf_map, pid_t *pid_out)
{
	struct app a = { 0, -1 };
	struct bytebuf out = { 0 };
	char *args, *file;

	app_start(&a, perf_map);
	wait_socket(a.pid);
	if (perf_map)
		wait_perf_map(a.pid);
	cr_assert(asprintf(&file, "%s/%s", dir, name) > 0);
	cr_assert(asprintf(&args, "collect -p %d --providers %s --duration 3 %s -o '%s'",
			   (int)a.pid, providers, extra, file) > 0);
	cr_assert_eq(th_tool_run(args, &out), 0, "ringpipe %s: %s", args, text(&out));
	if (pid_out)
		*pid_out = a.pid;
	app_kill(&a);
	free(args);
	bb_free(&out);
	return file;
}

/* Runs a python3 script file from the test on args; its output in out,
 * which must be a success. */
static void python(const char *dir, const char *script, const char *args, struct bytebuf *out)
{
	char *path, *cmd;

	cr_assert(asprintf(&path, "%s/check.py", dir) > 0);
	cr_assert_eq(th_write_file(path, script, strlen(script)), 0);
	cr_assert(asprintf(&cmd, "python3 '%s' %s 2>&1", path, args) > 0);
	out->len = 0;
	cr_assert_eq(th_run(cmd, out), 0, "python3 check failed:\n%s", text(out));
	free(cmd);
	free(path);
}

/*
 * "Self" shares of two speedscope files: each sample's (or evented span's)
 * weight goes to its innermost real frame. dotnet-trace adds frames of its
 * own (the process, "Threads", "Thread (N)", CPU_TIME, UNMANAGED_CODE_TIME):
 * every frame that names a method has "module!" in front, so a frame
 * without '!' is one of those and skipped. Names are compared by their
 * method part, "Namespace.Type.Method", without module or arguments.
 * The first file (ours) must have Hot.SpinFibonacci on top, and the same
 * top 5 as the second, each share within 5 points (both weigh a sample by
 * the time to its thread's next one, so they agree to 0.1 in practice).
 */
static const char shares_py[] =
	"import json, sys\n"
	"def key(n):\n"
	"    n = n.split('!', 1)[1] if '!' in n else n\n"
	"    return n.split('(', 1)[0]\n"
	"def shares(path):\n"
	"    d = json.load(open(path))\n"
	"    fr = [f['name'] for f in d['shared']['frames']]\n"
	"    real = ['!' in n for n in fr]\n"
	"    tot = {}\n"
	"    def add(stack, w):\n"
	"        k = '(no method)'\n"
	"        for f in reversed(stack):\n"
	"            if real[f]:\n"
	"                k = key(fr[f])\n"
	"                break\n"
	"        tot[k] = tot.get(k, 0.0) + w\n"
	"    for p in d['profiles']:\n"
	"        if p['type'] == 'sampled':\n"
	"            assert len(p['samples']) == len(p['weights'])\n"
	"            for s, w in zip(p['samples'], p['weights']):\n"
	"                add(s, float(w))\n"
	"        else:\n"
	"            st, last = [], None\n"
	"            for e in p['events']:\n"
	"                if last is not None and st:\n"
	"                    add(st, e['at'] - last)\n"
	"                last = e['at']\n"
	"                if e['type'] == 'O':\n"
	"                    st.append(e['frame'])\n"
	"                else:\n"
	"                    st.pop()\n"
	"    t = sum(tot.values())\n"
	"    assert t > 0, path + ': no samples'\n"
	"    return {k: 100.0 * v / t for k, v in tot.items()}\n"
	"ours, theirs = shares(sys.argv[1]), shares(sys.argv[2])\n"
	"top = lambda s: sorted(s, key=lambda k: -s[k])[:5]\n"
	"to, tt = top(ours), top(theirs)\n"
	"for k in to:\n"
	"    print('%-60s ours %6.2f%%  dotnet-trace %6.2f%%' % (k, ours[k], theirs.get(k, 0)))\n"
	"assert to[0] == 'Hot.SpinFibonacci', 'the hottest frame is %s' % to[0]\n"
	"# a tie at fifth place may break either way: within 0.05 points it is one\n"
	"for k in set(to) ^ set(tt):\n"
	"    near = abs(ours.get(k, 0) - ours[to[-1]]) < 0.05 and \\\n"
	"        abs(theirs.get(k, 0) - theirs[tt[-1]]) < 0.05\n"
	"    assert near, 'top 5 differ: ours %s, dotnet-trace %s' % (to, tt)\n"
	"for k in to:\n"
	"    d = abs(ours[k] - theirs.get(k, 0))\n"
	"    assert d <= 5.0, '%s: %.2f vs %.2f' % (k, ours[k], theirs.get(k, 0))\n";

/* Both converters on one file; the shares must agree. */
static void compare_with_dotnet_trace(const char *dir, const char *trace)
{
	char *dt = dotnet_trace(), *cmd, *args;
	struct bytebuf out = { 0 };

	cr_assert(asprintf(&args, "convert --to speedscope '%s' -o '%s/ours.json'", trace,
			   dir) > 0);
	cr_assert_eq(th_tool_run(args, &out), 0, "ringpipe %s: %s", args, text(&out));
	/* dotnet-trace appends ".speedscope.json" to the name it is given */
	cr_assert(asprintf(&cmd, "cd '%s' && DOTNET_CLI_TELEMETRY_OPTOUT=1 '%s' convert --format "
			   "speedscope '%s' -o theirs 2>&1", dir, dt, trace) > 0);
	out.len = 0;
	cr_assert_eq(th_run(cmd, &out), 0, "%s: %s", cmd, text(&out));
	free(args);
	cr_assert(asprintf(&args, "'%s/ours.json' '%s/theirs.speedscope.json'", dir, dir) > 0);
	python(dir, shares_py, args, &out);
	cr_log_info("self shares:\n%s", text(&out));
	free(args);
	free(cmd);
	free(dt);
	bb_free(&out);
}

Test(profile_dotnet, collect_trace_speedscope_matches_dotnet_trace, .timeout = 180)
{
	char *dir = th_tmpdir();
	char *trace = collect_spin(dir, "spin.nettrace", CPU_PROVIDERS, "", false, NULL);

	compare_with_dotnet_trace(dir, trace);
	free(trace);
	th_rmdir(dir);
}

Test(profile_dotnet, dotnet_trace_collected_file_converts_the_same, .timeout = 180)
{
	char *dir = th_tmpdir(), *dt = dotnet_trace(), *cmd, *trace;
	struct app a = { 0, -1 };
	struct bytebuf out = { 0 };

	app_start(&a, false);
	wait_socket(a.pid);
	cr_assert(asprintf(&trace, "%s/dt.nettrace", dir) > 0);
	/* its default profile: the sampler, the runtime's keywords, rundown */
	cr_assert(asprintf(&cmd, "DOTNET_CLI_TELEMETRY_OPTOUT=1 '%s' collect -p %d --duration "
			   "00:00:00:03 -o '%s' 2>&1 </dev/null", dt, (int)a.pid, trace) > 0);
	cr_assert_eq(th_run(cmd, &out), 0, "%s: %s", cmd, text(&out));
	app_kill(&a);
	compare_with_dotnet_trace(dir, trace);
	free(cmd);
	free(trace);
	free(dt);
	bb_free(&out);
	th_rmdir(dir);
}

/*
 * Perfetto's JSON importer shape: an object with traceEvents, each with a
 * phase, a numeric ts, pid and tid; slices complete (X with a duration, or
 * B and E balanced per thread, none left open); instants scoped. Samples
 * are instants that refer to stackFrames, one per ThreadSample, and
 * slices are no more than the trace's Stop events (a sample is no slice).
 */
static const char chrome_py[] =
	"import json, sys\n"
	"d = json.load(open(sys.argv[1]))\n"
	"nsamples, nstops = int(sys.argv[2]), int(sys.argv[3])\n"
	"ev = d['traceEvents']\n"
	"assert isinstance(ev, list) and ev\n"
	"open_ = {}\n"
	"slices = insts = 0\n"
	"for e in ev:\n"
	"    ph = e['ph']\n"
	"    assert ph in ('X', 'B', 'E', 'i', 'I', 'M'), e\n"
	"    assert isinstance(e['pid'], int) and isinstance(e['tid'], int), e\n"
	"    if ph == 'M':\n"
	"        continue\n"
	"    assert isinstance(e['ts'], (int, float)) and e['ts'] >= 0, e\n"
	"    k = (e['pid'], e['tid'])\n"
	"    if ph == 'X':\n"
	"        assert isinstance(e['dur'], (int, float)) and e['dur'] >= 0, e\n"
	"        slices += 1\n"
	"    elif ph == 'B':\n"
	"        open_.setdefault(k, []).append(e['name'])\n"
	"        slices += 1\n"
	"    elif ph == 'E':\n"
	"        assert open_.get(k) and open_[k].pop() == e['name'], e\n"
	"    else:\n"
	"        assert e.get('s') in ('t', 'p', 'g'), e\n"
	"        insts += 1\n"
	"assert not any(open_.values()), 'B never ended: %s' % open_\n"
	"assert slices <= nstops, '%d slices from %d Stop events' % (slices, nstops)\n"
	"sf = d['stackFrames']\n"
	"for f in sf.values():\n"
	"    assert 'parent' not in f or f['parent'] in sf\n"
	"assert len(d['samples']) == nsamples, '%d samples, %d ThreadSamples' % "
	"(len(d['samples']), nsamples)\n"
	"for s in d['samples']:\n"
	"    assert s['sf'] in sf\n"
	"names = set(f['name'] for f in sf.values())\n"
	"assert 'DotnetApp!Hot.SpinFibonacci(int32)' in names, sorted(names)[:20]\n"
	"print(slices, insts, len(d['samples']))\n";

/* Events of the trace whose dump line holds `what`. */
static int count_dumped(const char *trace, const char *what)
{
	struct bytebuf out = { 0 };
	char *cmd;
	int n;

	cr_assert(asprintf(&cmd, "'%s' dump '%s' | grep -c -- '%s'", th_tool(), trace, what) > 0);
	th_run(cmd, &out);
	n = atoi(text(&out));
	free(cmd);
	bb_free(&out);
	return n;
}

Test(profile_dotnet, chrome_output_has_complete_slices_and_the_samples, .timeout = 180)
{
	char *dir = th_tmpdir(), *args;
	char *trace = collect_spin(dir, "spin.nettrace", CPU_PROVIDERS, "", false, NULL);
	int nsamples = count_dumped(trace, "\"provider\":\"Microsoft-DotNETCore-SampleProfiler\"");
	int nstops = count_dumped(trace, "\"opcode\":2,");
	struct bytebuf out = { 0 };

	cr_assert_gt(nsamples, 100, "only %d ThreadSample events in %s", nsamples, trace);
	cr_assert(asprintf(&args, "convert --to chrome '%s' -o '%s/c.json'", trace, dir) > 0);
	cr_assert_eq(th_tool_run(args, &out), 0, "ringpipe %s: %s", args, text(&out));
	free(args);
	cr_assert(asprintf(&args, "'%s/c.json' %d %d", dir, nsamples, nstops) > 0);
	python(dir, chrome_py, args, &out);
	free(args);
	free(trace);
	bb_free(&out);
	th_rmdir(dir);
}

/*
 * `--to text`: the frames of each SampleProfiler (or, with argv[2], any
 * sample) event; a symbolized frame is not a bare "0x..." address. Prints
 * "named total spinning" and requires 95 % named and some SpinFibonacci.
 */
static const char text_py[] =
	"import sys\n"
	"want = sys.argv[2] if len(sys.argv) > 2 else 'Microsoft-DotNETCore-SampleProfiler/'\n"
	"n = ok = spin = 0\n"
	"cur = False\n"
	"for line in open(sys.argv[1]):\n"
	"    if not line.startswith('\\t'):\n"
	"        cur = want in line\n"
	"        continue\n"
	"    if not cur:\n"
	"        continue\n"
	"    name = line.split(None, 1)[1].strip()\n"
	"    n += 1\n"
	"    ok += not name.startswith('0x')\n"
	"    spin += 'SpinFibonacci' in name\n"
	"print(ok, n, spin)\n"
	"assert n > 0, 'no sample frames'\n"
	"assert ok * 100 >= 95 * n, '%d of %d frames symbolized' % (ok, n)\n"
	"assert spin > 0, 'no SpinFibonacci frame'\n";

static void check_text(const char *dir, const char *trace)
{
	struct bytebuf out = { 0 };
	char *args;

	cr_assert(asprintf(&args, "convert --to text '%s' -o '%s/t.txt'", trace, dir) > 0);
	cr_assert_eq(th_tool_run(args, &out), 0, "ringpipe %s: %s", args, text(&out));
	free(args);
	cr_assert(asprintf(&args, "'%s/t.txt'", dir) > 0);
	python(dir, text_py, args, &out);
	cr_log_info("named, frames, SpinFibonacci frames: %s", text(&out));
	free(args);
	bb_free(&out);
}

Test(profile_dotnet, text_names_95_percent_of_managed_frames, .timeout = 180)
{
	char *dir = th_tmpdir();
	char *trace = collect_spin(dir, "spin.nettrace", CPU_PROVIDERS, "", false, NULL);

	check_text(dir, trace);
	free(trace);
	th_rmdir(dir);
}

/*
 * Frames of the samples that argv[3] names (the text's event header) which
 * lie inside an entry of the perf map argv[2] are named, and not as
 * "memfd:doublemapper+0x...", the shared memory file the runtime maps its
 * JIT code from with W^X. Prints "in-map misnamed spinning".
 */
static const char perf_map_py[] =
	"import sys\n"
	"ents = []\n"
	"for l in open(sys.argv[2]):\n"
	"    p = l.split(None, 2)\n"
	"    if len(p) == 3:\n"
	"        ents.append((int(p[0], 16), int(p[1], 16)))\n"
	"ents.sort()\n"
	"import bisect\n"
	"starts = [e[0] for e in ents]\n"
	"def inside(ip):\n"
	"    i = bisect.bisect_right(starts, ip) - 1\n"
	"    return i >= 0 and ip < ents[i][0] + ents[i][1]\n"
	"n = bad = spin = 0\n"
	"cur = False\n"
	"for line in open(sys.argv[1]):\n"
	"    if not line.startswith('\\t'):\n"
	"        cur = sys.argv[3] in line\n"
	"        continue\n"
	"    if not cur:\n"
	"        continue\n"
	"    ip, name = line.split(None, 1)\n"
	"    if not inside(int(ip, 16)):\n"
	"        continue\n"
	"    n += 1\n"
	"    bad += 'doublemapper' in name or name.startswith('0x')\n"
	"    spin += 'SpinFibonacci' in name\n"
	"print(n, bad, spin)\n"
	"assert n > 0, 'no sampled frame inside the perf map'\n"
	"assert bad == 0, '%d of %d frames in JIT code not named from the perf map' % (bad, n)\n"
	"assert spin > 0, 'no SpinFibonacci frame'\n";

/* The address of Hot::SpinFibonacci's first perf map line, or 0. */
static uint64_t perf_map_spin_addr(pid_t pid)
{
	char path[64], line[1024];
	uint64_t addr = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/tmp/perf-%d.map", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return 0;
	while (!addr && fgets(line, sizeof(line), f))
		if (strstr(line, "Hot::SpinFibonacci"))
			addr = strtoull(line, NULL, 16);
	fclose(f);
	return addr;
}

/*
 * A trace with samples and nothing else (no method events, no rundown), of
 * a process that has exited: only the perf map it left behind names its
 * JIT frames.
 */
Test(profile_dotnet, convert_names_frames_from_the_perf_map_after_exit, .timeout = 180)
{
	char *dir = th_tmpdir(), *trace, *args;
	struct bytebuf out = { 0 };
	pid_t pid = 0;

	trace = collect_spin(dir, "nomethods.nettrace", "Microsoft-DotNETCore-SampleProfiler:0:4",
			     "--no-rundown", true, &pid);
	cr_assert_eq(kill(pid, 0), -1, "pid %d is still there", (int)pid);
	cr_assert_eq(count_dumped(trace, "Method/"), 0, "the trace has method events");
	cr_assert(asprintf(&args, "convert --to text '%s' -o '%s/t.txt'", trace, dir) > 0);
	cr_assert_eq(th_tool_run(args, &out), 0, "ringpipe %s: %s", args, text(&out));
	free(args);
	/* ReadyToRun code (most of CoreLib) is in no perf map: JIT code is */
	cr_assert(asprintf(&args, "'%s/t.txt' /tmp/perf-%d.map "
			   "Microsoft-DotNETCore-SampleProfiler/", dir, (int)pid) > 0);
	python(dir, perf_map_py, args, &out);
	cr_log_info("frames in JIT code, misnamed, SpinFibonacci: %s", text(&out));
	free(args);
	remove_perf_map(pid);
	bb_free(&out);
	free(trace);
	th_rmdir(dir);
}

/* The symbolizer's snapshot of a pid that is gone still reads the perf map
 * (`ringpipe sample` takes its last one after the process ended). */
Test(profile_dotnet, snapshot_of_an_exited_process_reads_its_perf_map, .timeout = 120)
{
	struct sym_table *t = sym_table_new();
	struct app a = { 0, -1 };
	struct sym_result r;
	uint64_t addr;
	pid_t pid;
	int rc;

	cr_assert(t);
	app_start(&a, true);
	pid = a.pid;
	wait_perf_map(pid);
	app_kill(&a);
	cr_assert_eq(kill(pid, 0), -1, "pid %d is still there", (int)pid);
	addr = perf_map_spin_addr(pid);
	cr_assert_neq(addr, 0, "no Hot::SpinFibonacci in /tmp/perf-%d.map", (int)pid);
	rc = sym_snapshot_pid(t, (uint32_t)pid);
	cr_assert_eq(rc, -ENOENT, "snapshot of exited pid %d: %d, expected -ENOENT", (int)pid, rc);
	cr_assert(sym_lookup(t, (uint32_t)pid, addr + 1, true, &r) && r.function &&
		  strstr(r.function, "SpinFibonacci"),
		  "0x%" PRIx64 " in exited pid %d: %s", addr + 1, (int)pid,
		  r.function ? r.function : "(no symbol)");
	sym_table_free(t);
	remove_perf_map(pid);
}

/* Skips when sampling is refused for lack of privilege; fails otherwise. */
static void need_sampling(void)
{
	struct bytebuf out = { 0 };
	int rc = th_tool_run("sample -a --duration 10ms -o /dev/null", &out);

	if (rc != 0 && strstr(text(&out), "CAP_BPF"))
		cr_skip_test("CPU sampling is not permitted here: %s", text(&out));
	cr_assert_eq(rc, 0, "ringpipe sample failed: %s", text(&out));
	bb_free(&out);
}

Test(profile_dotnet, doublemapped_jit_code_is_named_from_the_perf_map, .timeout = 180)
{
	char *dir = th_tmpdir(), *args, cmd[128];
	struct app a = { 0, -1 };
	struct bytebuf out = { 0 };
	pid_t pid;

	need_sampling();
	app_start(&a, true);
	pid = a.pid;
	wait_perf_map(a.pid);
	/* W^X is the runtime's default: its code is double mapped */
	snprintf(cmd, sizeof(cmd), "grep -q doublemapper /proc/%d/maps", (int)a.pid);
	cr_assert_eq(system(cmd), 0, "pid %d has no /memfd:doublemapper mapping", (int)a.pid);
	cr_assert(asprintf(&args, "sample -p %d --duration 2 -o '%s/s.nettrace'", (int)a.pid,
			   dir) > 0);
	cr_assert_eq(th_tool_run(args, &out), 0, "ringpipe %s: %s", args, text(&out));
	free(args);
	app_kill(&a);
	cr_assert(asprintf(&args, "convert --to text '%s/s.nettrace' -o '%s/s.txt'", dir, dir) > 0);
	cr_assert_eq(th_tool_run(args, &out), 0, "ringpipe %s: %s", args, text(&out));
	free(args);
	cr_assert(asprintf(&args, "'%s/s.txt' /tmp/perf-%d.map Ringpipe-Sampler/Sample", dir,
			   (int)pid) > 0);
	python(dir, perf_map_py, args, &out);
	cr_log_info("frames in JIT code, misnamed, SpinFibonacci: %s", text(&out));
	free(args);
	remove_perf_map(pid);
	bb_free(&out);
	th_rmdir(dir);
}
