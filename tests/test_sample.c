// SPDX-License-Identifier: MIT
/*
 * CPU sampling, symbolization and conversions: `ringpipe sample` on a busy
 * native function, the symbolizer against ELF files (PIE and not) and perf
 * maps, `ringpipe convert` outputs checked as JSON, and TraceEvent reading
 * the sample trace with its stacks. The sampling tests skip only when the
 * BPF program cannot be loaded for want of privilege, and say so.
 */
#include <inttypes.h>
#include <libgen.h>
#include <signal.h>
#include <time.h>

#include <ringpipe/ringpipe.h>

#include "helpers.h"
#include "nettrace_read.h"
#include "symbols/symbolize.h"

/* tests/progs/busy (non-PIE) or busy-pie, next to the tool's build */
static char *busy_path(const char *name)
{
	char *tool = strdup(th_tool()), *p;

	cr_assert(asprintf(&p, "%s/tests/progs/%s", dirname(tool), name) > 0);
	free(tool);
	cr_assert(access(p, X_OK) == 0, "%s is not built (make tests)", p);
	return p;
}

/* Skips when sampling is refused for lack of privilege; fails otherwise. */
static void need_sampling(void)
{
	struct bytebuf out = { 0 };
	int rc = th_tool_run("sample -a --duration 10ms -o /dev/null", &out);

	if (rc != 0 && strstr((char *)out.p, "CAP_BPF"))
		cr_skip_test("CPU sampling is not permitted here: %s", (char *)out.p);
	cr_assert_eq(rc, 0, "ringpipe sample failed: %s", (char *)out.p);
	bb_free(&out);
}

static pid_t spawn_busy(const char *path, const char *seconds)
{
	pid_t p = fork();

	cr_assert(p >= 0);
	if (!p) {
		if (!freopen("/dev/null", "w", stdout))
			_exit(126);
		execl(path, path, seconds, (char *)NULL);
		_exit(127);
	}
	return p;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

/* Counts the Sample blocks of `text` for pid and those whose leaf frame
 * (the first line after the header) is in `fn`. */
static void count_leaves(const char *text, pid_t pid, const char *fn, int *total, int *hits)
{
	char head[64];
	const char *p = text;

	*total = *hits = 0;
	snprintf(head, sizeof(head), " %d/", (int)pid);
	while ((p = strstr(p, ": Ringpipe-Sampler/Sample\n"))) {
		const char *bol = p, *frame = p + strlen(": Ringpipe-Sampler/Sample\n");
		const char *eol = strchr(frame, '\n');

		while (bol > text && bol[-1] != '\n')
			bol--;
		p = frame;
		if (!strstr(bol, head) || strstr(bol, head) > p)
			continue;
		(*total)++;
		if (eol && *frame == '\t') {
			char *line = strndup(frame, (size_t)(eol - frame));

			if (strstr(line, fn))
				(*hits)++;
			free(line);
		}
	}
}

Test(sample, busy_function_gets_90_percent_of_the_samples, .timeout = 60)
{
	char *dir = th_tmpdir(), *busy = busy_path("busy-pie"), *args;
	struct bytebuf out = { 0 };
	int total, hits, st;
	pid_t pid;

	need_sampling();
	pid = spawn_busy(busy, "2.5");
	sleep_ms(300);		/* past the dynamic loader: busy_spin runs */
	cr_assert(asprintf(&args, "sample -p %d -F 999 --duration 1.5 -o %s/s.nettrace", (int)pid,
			   dir) > 0);
	cr_assert_eq(th_tool_run(args, &out), 0, "%s", (char *)out.p);
	free(args);
	out.len = 0;
	cr_assert(asprintf(&args, "convert --to text %s/s.nettrace", dir) > 0);
	cr_assert_eq(th_tool_run(args, &out), 0, "%s", (char *)out.p);
	count_leaves((char *)out.p, pid, "busy-pie!busy_spin+0x", &total, &hits);
	fprintf(stderr, "busy_spin: %d of %d samples (%.1f %%)\n", hits, total,
		total ? 100.0 * hits / total : 0.0);
	cr_assert_gt(total, 100, "too few samples of the busy process: %d", total);
	cr_assert_geq(hits * 10, total * 9, "only %d of %d samples symbolized to busy_spin", hits,
		      total);
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	free(args);
	free(busy);
	bb_free(&out);
	th_rmdir(dir);
}

/*
 * `ringpipe record --sample` puts the samples into a recording session with
 * the BPF capture's kernel events, on one timeline: the busy process (by pid,
 * already running) still gets >= 90 % of its samples in busy_spin, nothing
 * is late or lost, and TraceEvent reads the samples.
 */
Test(sample, record_sample_in_one_session_with_kernel_events, .timeout = 90)
{
	TH_NEED_TRACEDUMP(dll);
	char *dir = th_tmpdir(), *busy = busy_path("busy-pie"), *args, *cmd;
	struct bytebuf out = { 0 };
	int total, hits, st;
	pid_t pid;

	need_sampling();
	pid = spawn_busy(busy, "2.5");
	sleep_ms(300);
	cr_assert(asprintf(&args, "record -p %d --sample 999 --kernel exec --duration 1.5 "
			   "-o %s/r.nettrace", (int)pid, dir) > 0);
	cr_assert_eq(th_tool_run(args, &out), 0, "%s", (char *)out.p);
	bb_append(&out, "", 1);
	cr_assert_not_null(strstr((char *)out.p, " CPU samples (cpu-clock), 0 lost") ?:
			   strstr((char *)out.p, " CPU samples (cycles), 0 lost"), "%s", (char *)out.p);
	cr_assert_not_null(strstr((char *)out.p, ", 0 late,"), "samples arrived late: %s",
			   (char *)out.p);
	free(args);
	out.len = 0;
	cr_assert(asprintf(&args, "convert --to text %s/r.nettrace", dir) > 0);
	cr_assert_eq(th_tool_run(args, &out), 0, "%s", (char *)out.p);
	bb_append(&out, "", 1);
	count_leaves((char *)out.p, pid, "busy-pie!busy_spin+0x", &total, &hits);
	fprintf(stderr, "record --sample: busy_spin in %d of %d samples (%.1f %%)\n", hits,
		total, total ? 100.0 * hits / total : 0.0);
	cr_assert_gt(total, 100, "too few samples of the busy process: %d", total);
	cr_assert_geq(hits * 10, total * 9, "only %d of %d samples symbolized to busy_spin", hits,
		      total);
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	out.len = 0;
	cr_assert(asprintf(&cmd, "dotnet '%s' counts '%s/r.nettrace'", dll, dir) > 0);
	cr_assert_eq(th_run(cmd, &out), 0, "TraceEvent: %s", (char *)out.p);
	bb_append(&out, "", 1);
	cr_assert_not_null(strstr((char *)out.p, "Ringpipe-Sampler/Sample\t"), "%s", (char *)out.p);
	cr_assert_not_null(strstr((char *)out.p, "Ringpipe-Symbols/ModuleLoad\t"), "%s",
			   (char *)out.p);
	cr_assert_not_null(strstr((char *)out.p, "#lost\t0\n"), "%s", (char *)out.p);
	free(cmd);
	free(args);
	/* a command's exec and exit land among its samples: per-thread numbers
	 * must still rise with time (a step back is a loss to TraceEvent) */
	out.len = 0;
	cr_assert(asprintf(&args, "record --sample 999 --kernel exec -o %s/c.nettrace -- %s 0.5",
			   dir, busy) > 0);
	cr_assert_eq(th_tool_run(args, &out), 0, "%s", (char *)out.p);
	free(args);
	out.len = 0;
	cr_assert(asprintf(&cmd, "dotnet '%s' counts '%s/c.nettrace'", dll, dir) > 0);
	cr_assert_eq(th_run(cmd, &out), 0, "TraceEvent: %s", (char *)out.p);
	bb_append(&out, "", 1);
	cr_assert_not_null(strstr((char *)out.p, "Ringpipe-Kernel/Exec\t1\n"), "%s", (char *)out.p);
	/* at least the command's exit (a TSan build's forked child has a
	 * runtime thread of its own that exits at exec too) */
	cr_assert_not_null(strstr((char *)out.p, "Ringpipe-Kernel/Exit\t"), "%s", (char *)out.p);
	cr_assert_not_null(strstr((char *)out.p, "#lost\t0\n"), "%s", (char *)out.p);
	free(cmd);
	free(busy);
	bb_free(&out);
	th_rmdir(dir);
}

Test(sample, command_mode_and_report_top_functions, .timeout = 60)
{
	char *dir = th_tmpdir(), *busy = busy_path("busy"), *args;
	struct bytebuf out = { 0 };

	need_sampling();
	cr_assert(asprintf(&args, "sample -F 499 -o %s/c.nettrace -- %s 1", dir, busy) > 0);
	cr_assert_eq(th_tool_run(args, &out), 0, "%s", (char *)out.p);
	cr_assert(strstr((char *)out.p, "\"dropped\":0,"), "%s", (char *)out.p);
	free(args);
	out.len = 0;
	/* the process has exited: symbols come from the trace's module events */
	cr_assert(asprintf(&args, "report %s/c.nettrace", dir) > 0);
	cr_assert_eq(th_tool_run(args, &out), 0, "%s", (char *)out.p);
	cr_assert(strstr((char *)out.p, "top functions (leaf frame of "), "%s", (char *)out.p);
	cr_assert(strstr((char *)out.p, "%  busy!busy_spin\n"), "%s", (char *)out.p);
	free(args);
	free(busy);
	bb_free(&out);
	th_rmdir(dir);
}

/* A sample trace for the conversion tests. */
static char *sample_trace(char *dir)
{
	char *busy = busy_path("busy"), *args, *path;
	struct bytebuf out = { 0 };

	need_sampling();
	cr_assert(asprintf(&path, "%s/t.nettrace", dir) > 0);
	cr_assert(asprintf(&args, "sample -F 499 -o %s -- %s 0.6", path, busy) > 0);
	cr_assert_eq(th_tool_run(args, &out), 0, "%s", (char *)out.p);
	free(args);
	free(busy);
	bb_free(&out);
	return path;
}

static void python_check(const char *json_path, const char *script)
{
	char *cmd;
	struct bytebuf out = { 0 };

	cr_assert(asprintf(&cmd, "python3 -c '%s' '%s' 2>&1", script, json_path) > 0);
	cr_assert_eq(th_run(cmd, &out), 0, "%s", (char *)out.p);
	free(cmd);
	bb_free(&out);
}

Test(convert, speedscope_is_a_sampled_profile, .timeout = 60)
{
	char *dir = th_tmpdir(), *trace = sample_trace(dir), *args;
	struct bytebuf out = { 0 };

	cr_assert(asprintf(&args, "convert --to speedscope %s -o %s/p.json", trace, dir) > 0);
	cr_assert_eq(th_tool_run(args, &out), 0, "%s", (char *)out.p);
	free(args);
	cr_assert(asprintf(&args, "%s/p.json", dir) > 0);
	python_check(args,
		"import json,sys\n"
		"d=json.load(open(sys.argv[1]))\n"
		"assert d[\"$schema\"]==\"https://www.speedscope.app/file-format-schema.json\"\n"
		"fr=d[\"shared\"][\"frames\"]\n"
		"assert all(\"name\" in f for f in fr)\n"
		"ps=d[\"profiles\"]; assert ps, \"no profile\"\n"
		"for p in ps:\n"
		"  assert p[\"type\"]==\"sampled\" and p[\"unit\"]==\"nanoseconds\"\n"
		"  assert len(p[\"samples\"])==len(p[\"weights\"])>0\n"
		"  assert p[\"endValue\"]==sum(p[\"weights\"])\n"
		"  assert all(0<=i<len(fr) for s in p[\"samples\"] for i in s)\n"
		"n=sum(1 for p in ps for s in p[\"samples\"] if s and fr[s[-1]][\"name\"]==\"busy!busy_spin\")\n"
		"assert n*10>=9*sum(len(p[\"samples\"]) for p in ps), n\n");
	free(args);
	free(trace);
	bb_free(&out);
	th_rmdir(dir);
}

/* every slice is complete: an X with its duration, or a B with its E on
 * the same thread, properly nested; prints how many slices there are */
static const char chrome_check[] =
	"import json,sys\n"
	"d=json.load(open(sys.argv[1]))\n"
	"st={}\n"
	"nb=0\n"
	"for e in d[\"traceEvents\"]:\n"
	"  k=(e[\"pid\"],e[\"tid\"])\n"
	"  if e[\"ph\"]==\"B\": st.setdefault(k,[]).append(e[\"name\"]); nb+=1\n"
	"  elif e[\"ph\"]==\"E\": assert st.get(k) and st[k].pop()==e[\"name\"], e\n"
	"  elif e[\"ph\"]==\"X\": assert e[\"dur\"]>=0, e; nb+=1\n"
	"assert all(not v for v in st.values()), st\n"
	"sf=d[\"stackFrames\"]\n"
	"for e in d[\"traceEvents\"]:\n"
	"  if \"sf\" in e: assert e[\"sf\"] in sf\n"
	"for f in sf.values():\n"
	"  assert \"parent\" not in f or f[\"parent\"] in sf\n"
	"for s in d[\"samples\"]: assert s[\"sf\"] in sf\n"
	"print(nb)\n";

Test(convert, chrome_json_has_matching_slices_and_stacks, .timeout = 60)
{
	char *dir = th_tmpdir(), *trace = sample_trace(dir), *args;
	struct bytebuf out = { 0 };

	cr_assert(asprintf(&args, "convert --to chrome %s -o %s/c.json", trace, dir) > 0);
	cr_assert_eq(th_tool_run(args, &out), 0, "%s", (char *)out.p);
	free(args);
	cr_assert(asprintf(&args, "%s/c.json", dir) > 0);
	python_check(args, chrome_check);
	free(args);
	out.len = 0;
	/* spans: the synthetic trace has Start/Stop pairs on several threads */
	cr_assert(asprintf(&args, "'%s' gen -o %s/g.nettrace --events 2000 --threads 3 >/dev/null && "
			   "'%s' convert --to chrome %s/g.nettrace -o %s/g.json && "
			   "python3 -c '%s' %s/g.json", th_tool(), dir, th_tool(), dir, dir,
			   chrome_check, dir) > 0);
	cr_assert_eq(th_run(args, &out), 0, "%s", (char *)out.p);
	cr_assert_gt(atoi((char *)out.p), 0, "no slices from the Start/Stop events");
	free(args);
	free(trace);
	bb_free(&out);
	th_rmdir(dir);
}

Test(convert, bad_arguments_are_usage_errors)
{
	struct bytebuf out = { 0 };

	cr_assert_eq(th_tool_run("convert --to svg x.nettrace", &out), 2);
	cr_assert(strstr((char *)out.p, "--to must be speedscope, chrome or text, not 'svg'"),
		  "%s", (char *)out.p);
	out.len = 0;
	cr_assert_eq(th_tool_run("convert --to text /nonexistent.nettrace", &out), 1);
	cr_assert(strstr((char *)out.p, "No such file"), "%s", (char *)out.p);
	out.len = 0;
	cr_assert_eq(th_tool_run("sample -F 0 -a -o /dev/null", &out), 2);
	cr_assert(strstr((char *)out.p, "-F takes a frequency"), "%s", (char *)out.p);
	bb_free(&out);
}

Test(sample, tracedump_reads_the_samples_and_their_stacks, .timeout = 120)
{
	char *dir = th_tmpdir(), *trace, *cmd;
	struct bytebuf td = { 0 }, rp = { 0 };
	const char *p;
	int n = 0;

	TH_NEED_TRACEDUMP(dll);
	trace = sample_trace(dir);
	cr_assert(asprintf(&cmd, "dotnet '%s' dump '%s'", dll, trace) > 0);
	cr_assert_eq(th_run(cmd, &td), 0, "%s", (char *)td.p);
	free(cmd);
	cr_assert(asprintf(&cmd, "'%s' dump '%s'", th_tool(), trace) > 0);
	cr_assert_eq(th_run(cmd, &rp), 0);
	free(cmd);
	/* TraceEvent sees what ringpipe's reader sees, stacks included */
	cr_assert_str_eq((char *)td.p, (char *)rp.p);
	for (p = (char *)td.p; (p = strstr(p, "\"name\":\"Sample\"")); p++) {
		const char *stk = strstr(p, "\"stack\":[");

		cr_assert(stk && stk[9] == '"', "a sample without its stack");
		n++;
	}
	cr_assert_gt(n, 50);
	cr_assert(strstr((char *)td.p, "\"summary\":true") && strstr((char *)td.p, "\"lost\":0"));
	free(trace);
	bb_free(&td);
	bb_free(&rp);
	th_rmdir(dir);
}

/* ---- symbolizer --------------------------------------------------------- */

/* global, and looked up by name in this binary by the test below */
int sym_probe_fn(int x);
__attribute__((noinline)) int sym_probe_fn(int x)
{
	return x * 3 + 1;
}

Test(symbolize, own_pie_binary_and_a_non_pie_process)
{
	struct sym_table *t = sym_table_new();
	char buf[512], *busy = busy_path("busy"), *cmd;
	struct bytebuf out = { 0 };
	unsigned long long va;
	uint64_t ip = (uint64_t)(uintptr_t)&sym_probe_fn + 2;
	pid_t pid;
	int st;

	cr_assert(t);
	cr_assert_gt(sym_snapshot_pid(t, (uint32_t)getpid()), 0);
	/* this test binary is a PIE: the load bias is the mapping's */
	cr_assert_str_eq(sym_format(t, (uint32_t)getpid(), ip, true, buf, sizeof(buf)),
			 "test_sample!sym_probe_fn+0x2");
	/* a return address just past a call belongs to the caller */
	cr_assert(strstr(sym_format(t, (uint32_t)getpid(), (uint64_t)(uintptr_t)&sym_probe_fn,
				    false, buf, sizeof(buf)), "+0x0") == NULL, "%s", buf);

	/* a non-PIE executable: symbol addresses are absolute (nm's) */
	cr_assert(asprintf(&cmd, "nm '%s' | awk '$3==\"busy_spin\"{print $1}'", busy) > 0);
	cr_assert_eq(th_run(cmd, &out), 0);
	cr_assert_eq(sscanf((char *)out.p, "%llx", &va), 1, "nm: %s", (char *)out.p);
	pid = spawn_busy(busy, "1");
	sleep_ms(200);
	cr_assert_gt(sym_snapshot_pid(t, (uint32_t)pid), 0);
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	cr_assert_str_eq(sym_format(t, (uint32_t)pid, va + 0x11, true, buf, sizeof(buf)),
			 "busy!busy_spin+0x11");
	/* the snapshot carries the build id read from the file */
	for (size_t i = 0; i < sym_nmodules(t); i++) {
		const struct sym_module *m = sym_module_at(t, i);
		char bid[41];

		if (m->pid == (uint32_t)pid && strstr(m->path, "/busy")) {
			cr_assert_eq(sym_file_build_id(busy, bid), 0);
			cr_assert_str_eq(m->build_id, bid);
		}
	}
	free(cmd);
	free(busy);
	bb_free(&out);
	sym_table_free(t);
}

Test(symbolize, module_events_outlive_the_process)
{
	struct sym_table *t = sym_table_new();
	char buf[512], *busy = busy_path("busy-pie"), *cmd;
	struct bytebuf out = { 0 };
	unsigned long long va;

	/* a PIE mapped at an arbitrary bias, its text segment one page in:
	 * exactly what a ModuleLoad event of an exited process says */
	cr_assert(asprintf(&cmd, "nm '%s' | awk '$3==\"busy_spin\"{print $1}'", busy) > 0);
	cr_assert_eq(th_run(cmd, &out), 0);
	cr_assert_eq(sscanf((char *)out.p, "%llx", &va), 1);
	cr_assert_eq(sym_add_module(t, 77777, 0x555555554000ull + 0x1000, 0x555555554000ull + 0x2000,
				    0x1000, busy, NULL), 1);
	cr_assert_str_eq(sym_format(t, 77777, 0x555555554000ull + va + 7, true, buf, sizeof(buf)),
			 "busy-pie!busy_spin+0x7");
	/* another process at the same address knows nothing */
	sym_format(t, 77778, 0x555555554000ull + va, true, buf, sizeof(buf));
	cr_assert(!strstr(buf, "busy_spin"), "%s", buf);
	/* a recorded build id that the file no longer has: no symbols */
	cr_assert_eq(sym_add_module(t, 77779, 0x400000, 0x500000, 0x1000, busy,
				    "0123456789abcdef0123456789abcdef01234567"), 1);
	sym_format(t, 77779, 0x400000 + 0x10, true, buf, sizeof(buf));
	cr_assert_str_eq(buf, "busy-pie+0x1010");
	free(cmd);
	free(busy);
	bb_free(&out);
	sym_table_free(t);
}

Test(symbolize, perf_map_files)
{
	struct sym_table *t = sym_table_new();
	char *dir = th_tmpdir(), *path, buf[512];
	static const char map[] =
		"7f0000001000 40 jitted::Foo(int)\n"
		"0x7f0000002000 0x10 [tier1] Bar baz\r\n"
		"not a line\n"
		"7f0000003000 0 zero_sized\n"
		"7f0000004000 20\n";

	cr_assert(asprintf(&path, "%s/perf-4242.map", dir) > 0);
	cr_assert_eq(th_write_file(path, map, sizeof(map) - 1), 0);
	cr_assert_eq(sym_load_perf_map(t, 4242, path), 2);
	cr_assert_str_eq(sym_format(t, 4242, 0x7f0000001010, true, buf, sizeof(buf)),
			 "[jit]!jitted::Foo(int)+0x10");
	cr_assert_str_eq(sym_format(t, 4242, 0x7f0000002001, false, buf, sizeof(buf)),
			 "[jit]![tier1] Bar baz+0x1");
	cr_assert_str_eq(sym_format(t, 4242, 0x7f0000001040, true, buf, sizeof(buf)),
			 "0x7f0000001040");
	cr_assert_str_eq(sym_format(t, 4243, 0x7f0000001010, true, buf, sizeof(buf)),
			 "0x7f0000001010");
	cr_assert_eq(sym_load_perf_map(t, 1, "/nonexistent/perf-1.map"), -ENOENT);
	free(path);
	sym_table_free(t);
	th_rmdir(dir);
}

Test(symbolize, kernel_addresses_from_kallsyms)
{
	struct sym_table *t = sym_table_new();
	FILE *f = fopen("/proc/kallsyms", "re");
	unsigned long long addr = 0, a;
	char line[512], name[256], type, buf[512];

	cr_assert(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "%llx %c %255s", &a, &type, name) == 3 && !strcmp(name, "schedule") &&
		    (type == 'T' || type == 't'))
			addr = a;
	fclose(f);
	if (!addr)
		cr_skip_test("/proc/kallsyms hides addresses here (kptr_restrict): no kernel symbols");
	cr_assert_str_eq(sym_format(t, 1, addr + 4, true, buf, sizeof(buf)), "[kernel]!schedule+0x4");
	sym_table_free(t);
}

/* ---- the session write path with a given stack -------------------------- */

Test(sample, write_with_a_given_stack_keeps_it)
{
	static const struct rp_field f[] = { { "V", RP_TYPE_U32, 0, 0, NULL } };
	struct rp_provider_opts po = { .sz = sizeof(po), .name = "Prof-Given-Stack" };
	struct rp_event_opts eo = { .sz = sizeof(eo), .id = 1, .name = "S", .level = 4,
				    .nfields = 1, .fields = f };
	struct rp_provider_config pc = { .name = "Prof-Given-Stack" };
	char *dir = th_tmpdir(), *path;
	struct rp_provider *prov = rp_provider_new(&po);
	struct rp_event *ev = rp_event_new(prov, &eo);
	uint64_t stack[200];
	uint32_t v = 7, i;
	struct iovec iov = { &v, 4 };
	struct rp_write_opts wo = { .sz = sizeof(wo), .flags = RP_WRITE_STACK_GIVEN | RP_WRITE_STACK,
				    .stack = stack, .nstack = 200 };
	struct rp_session *s;
	struct nt_reader *r;
	struct nt_rec rec;
	int found = 0;

	for (i = 0; i < 200; i++)
		stack[i] = 0xffffffff81000000ull + i * 16;
	cr_assert(asprintf(&path, "%s/g.nettrace", dir) > 0);
	{
		struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
					      .path = path };

		s = rp_session_start(&so);
	}
	cr_assert(s, "%s", rp_last_error());
	cr_assert_eq(rp_event_writev(ev, &iov, 1, &wo), 0);
	cr_assert_eq(rp_session_stop(s), 0);
	r = nt_reader_open(path);
	cr_assert(r);
	while (nt_reader_next(r, &rec) > 0) {
		if (strcmp(rec.meta->provider, "Prof-Given-Stack"))
			continue;
		found++;
		cr_assert_eq(rec.stack_bytes, 200 * 8);
		cr_assert_eq(memcmp(rec.stack, stack, 200 * 8), 0);
	}
	cr_assert_eq(found, 1);
	nt_reader_free(r);
	free(path);
	th_rmdir(dir);
}
