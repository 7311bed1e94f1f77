// SPDX-License-Identifier: MIT
/*
 * The ringpipe command: what users type, and what they get back for bad input.
 */
#include <ctype.h>
#include <string.h>

#include "helpers.h"

Test(cli, report_json_has_events_lost_providers)
{
	char *dir = th_tmpdir(), *args;
	struct bytebuf out = { 0 };

	cr_assert(asprintf(&args, "gen -o %s/g.nettrace --events 500 --threads 2 --gap-every 50", dir) > 0);
	cr_assert_eq(th_tool_run(args, &out), 0, "%s", (char *)out.p);
	free(args);
	out.len = 0;
	cr_assert(asprintf(&args, "report --json %s/g.nettrace", dir) > 0);
	cr_assert_eq(th_tool_run(args, &out), 0, "%s", (char *)out.p);
	cr_assert(strstr((char *)out.p, "\"events\":500,"), "%s", (char *)out.p);
	cr_assert(strstr((char *)out.p, "\"lost\":"), "%s", (char *)out.p);
	cr_assert(strstr((char *)out.p, "\"providers\":{\"Ringpipe-Demo\":"), "%s", (char *)out.p);
	free(args);
	bb_free(&out);
	th_rmdir(dir);
}

Test(cli, report_names_the_offset_of_a_truncated_file)
{
	char *dir = th_tmpdir(), *args;
	struct bytebuf out = { 0 };

	cr_assert(asprintf(&args, "'%s' gen -o %s/t.nettrace --events 300 >/dev/null && "
			   "head -c 2000 %s/t.nettrace > %s/cut.nettrace", th_tool(), dir, dir, dir) > 0);
	cr_assert_eq(th_run(args, NULL), 0);
	free(args);
	cr_assert(asprintf(&args, "report %s/cut.nettrace", dir) > 0);
	cr_assert_eq(th_tool_run(args, &out), 1, "a truncated file is an error: %s", (char *)out.p);
	cr_assert(strstr((char *)out.p, "offset "), "%s", (char *)out.p);
	cr_assert(strstr((char *)out.p, "runs past the end of the file"), "%s", (char *)out.p);
	free(args);
	bb_free(&out);
	th_rmdir(dir);
}

Test(cli, buffering_modes_are_checked_on_the_command_line)
{
	struct bytebuf out = { 0 };

	cr_assert_eq(th_tool_run("stress -o /dev/null --mode lossy", &out), 2);
	cr_assert(strstr((char *)out.p, "--mode must be drop or block"), "%s", (char *)out.p);
	out.len = 0;
	cr_assert_eq(th_tool_run("stress -o /dev/null --buffering-mode 2", &out), 2);
	cr_assert(strstr((char *)out.p, "must be drop or block"), "%s", (char *)out.p);
	out.len = 0;
	cr_assert_eq(th_tool_run("stress -o /dev/null --threads 2 --events 1000 --buffering-mode block", &out), 0,
		     "%s", (char *)out.p);
	cr_assert(strstr((char *)out.p, "\"mode\":\"block\""), "%s", (char *)out.p);
	bb_free(&out);
}

Test(cli, usage_errors_exit_2_and_help_exits_0)
{
	struct bytebuf out = { 0 };

	cr_assert_eq(th_tool_run("frobnicate", &out), 2);
	cr_assert(strstr((char *)out.p, "unknown command 'frobnicate'"), "%s", (char *)out.p);
	out.len = 0;
	cr_assert_eq(th_tool_run("--help", &out), 0);
	cr_assert(strstr((char *)out.p, "report FILE"), "%s", (char *)out.p);
	out.len = 0;
	cr_assert_eq(th_tool_run("gen -o /dev/null --events ten", &out), 2);
	cr_assert(strstr((char *)out.p, "--events takes a whole number, not 'ten'"), "%s", (char *)out.p);
	/* a TLS file that cannot be read is named before any connection */
	out.len = 0;
	cr_assert_eq(th_tool_run("fleet query --clickhouse https://127.0.0.1:1/ "
				 "--cacert /nonexistent/ca.pem 'SELECT 1'", &out), 1);
	cr_assert(strstr(th_text(&out), "--cacert /nonexistent/ca.pem: No such file"), "%s",
		  th_text(&out));
	bb_free(&out);
}

/* ---- report names CLR events as TraceEvent does --------------------------- */

#include "ringpipe/ringpipe.h"
#include "utf.h"

static const uint8_t clr_runtime_guid[16] = { 0x23, 0x0d, 0x3c, 0xe1, 0xbc, 0xcc, 0x12, 0x4e,
					      0x93, 0x1b, 0xd9, 0xcc, 0x2e, 0xee, 0x27, 0xe4 };
static const uint8_t clr_rundown_guid[16] = { 0x1c, 0x02, 0x69, 0xa6, 0x50, 0xc4, 0x09, 0x46,
					      0xa0, 0x35, 0x5a, 0xf5, 0x9a, 0xf4, 0xdf, 0x18 };

static struct rp_event *clr_event(struct rp_provider *p, uint32_t id, uint8_t version)
{
	struct rp_event_opts eo = { .sz = sizeof(eo), .id = id, .name = "", .version = version,
				    .level = 4, .keywords = 0x1 };
	struct rp_event *e = rp_event_new(p, &eo);

	cr_assert_not_null(e, "event %u v%u: %s", id, version, rp_last_error());
	return e;
}

static void write_n(struct rp_event *e, const struct bytebuf *b, int n)
{
	cr_assert(!b->oom);
	while (n--)
		cr_assert_eq(rp_event_write(e, b->p, b->len), 0);
}

/*
 * The runtime writes its events with empty names; the report names them
 * from the table. Method/DCStopVerbose comes in versions 1 and 2: one row.
 * GCDynamicEvent (39) is named by the event in its payload, as TraceEvent
 * names it (GC/CommittedUsage); 29 is GC/FinalizeObject, rundown 10
 * GC/SettingsRundown.
 */
static void write_clr_trace(const char *path)
{
	static const struct rp_provider_config pc[] = {
		{ .name = "Microsoft-Windows-DotNETRuntime", .keywords = ~0ull, .level = 5 },
		{ .name = "Microsoft-Windows-DotNETRuntimeRundown", .keywords = ~0ull, .level = 5 },
	};
	struct rp_provider_opts rt = { .sz = sizeof(rt), .name = pc[0].name,
				       .guid = clr_runtime_guid };
	struct rp_provider_opts rd = { .sz = sizeof(rd), .name = pc[1].name,
				       .guid = clr_rundown_guid };
	struct rp_session_opts so = { .sz = sizeof(so), .providers = pc, .nproviders = 2,
				      .path = path, .buffering = RP_BUFFERING_BLOCK };
	struct rp_provider *prt, *prd;
	struct rp_event *fin, *dyn, *settings, *dc1, *dc2;
	struct bytebuf b = { 0 };
	struct rp_session *s;
	int i;

	prt = rp_provider_new(&rt);
	prd = rp_provider_new(&rd);
	cr_assert(prt && prd, "%s", rp_last_error());
	fin = clr_event(prt, 29, 0);
	dyn = clr_event(prt, 39, 0);
	settings = clr_event(prd, 10, 0);
	dc1 = clr_event(prd, 144, 1);
	dc2 = clr_event(prd, 144, 2);
	s = rp_session_start(&so);
	cr_assert_not_null(s, "%s", rp_last_error());
	/* FinalizeObject: TypeID, ObjectID, ClrInstanceID, TypeName */
	bb_append_u64(&b, 0x1000);
	bb_append_u64(&b, 0x2000);
	bb_append_u16(&b, 0);
	utf8_to_utf16z(&b, "Demo.Finalizable");
	write_n(fin, &b, 3);
	/* GCDynamicEvent: Name, DataSize, Data (CommittedUsage: a u16 and five
	 * u64), ClrInstanceID */
	b.len = 0;
	utf8_to_utf16z(&b, "CommittedUsage");
	bb_append_u32(&b, 42);
	for (i = 0; i < 42; i++)
		bb_append_u8(&b, 0);
	bb_append_u16(&b, 0);
	write_n(dyn, &b, 6);
	/* GCSettingsRundown: five u64, two u32, ClrInstanceID */
	b.len = 0;
	for (i = 0; i < 5; i++)
		bb_append_u64(&b, 0);
	bb_append_u32(&b, 0);
	bb_append_u32(&b, 0);
	bb_append_u16(&b, 0);
	write_n(settings, &b, 1);
	/* MethodDCEndVerbose V1, then V2 (+ ReJITID) */
	b.len = 0;
	bb_append_u64(&b, 0x10);
	bb_append_u64(&b, 0x20);
	bb_append_u64(&b, 0x30);
	bb_append_u32(&b, 16);
	bb_append_u32(&b, 0x06000001);
	bb_append_u32(&b, 0);
	utf8_to_utf16z(&b, "Demo");
	utf8_to_utf16z(&b, "Run");
	utf8_to_utf16z(&b, "void ()");
	bb_append_u16(&b, 0);
	write_n(dc1, &b, 5);
	bb_append_u64(&b, 0);
	write_n(dc2, &b, 7);
	cr_assert_eq(rp_session_stop(s), 0);
	bb_free(&b);
}

Test(cli, report_names_clr_events_and_merges_their_versions, .timeout = 60)
{
	char *dir = th_tmpdir(), path[512], *args;
	struct bytebuf out = { 0 };

	snprintf(path, sizeof(path), "%s/clr.nettrace", dir);
	write_clr_trace(path);
	cr_assert(asprintf(&args, "report '%s'", path) > 0);
	cr_assert_eq(th_tool_run(args, &out), 0, "%s", (char *)out.p);
	free(args);
	cr_assert(strstr((char *)out.p, "  3  Microsoft-Windows-DotNETRuntime/GC/FinalizeObject "
			 "(id 29)\n"), "%s", (char *)out.p);
	cr_assert(strstr((char *)out.p, "  6  Microsoft-Windows-DotNETRuntime/GC/CommittedUsage "
			 "(id 39)\n"), "%s", (char *)out.p);
	cr_assert(strstr((char *)out.p, "  1  Microsoft-Windows-DotNETRuntimeRundown/GC/"
			 "SettingsRundown (id 10)\n"), "%s", (char *)out.p);
	cr_assert(strstr((char *)out.p, "  12  Microsoft-Windows-DotNETRuntimeRundown/Method/"
			 "DCStopVerbose (id 144)\n"), "one row for both versions:\n%s",
		  (char *)out.p);
	cr_assert_eq(strstr(strstr((char *)out.p, "/Method/DCStopVerbose ") + 1,
			    "/Method/DCStopVerbose "), NULL, "two DCStopVerbose rows:\n%s",
		     (char *)out.p);
	cr_assert_null(strstr((char *)out.p, "EventID("), "an unnamed event:\n%s", (char *)out.p);
	bb_free(&out);
	th_rmdir(dir);
}

/* The names above are TraceEvent's own, for the same file. */
Test(cli, clr_event_names_are_traceevent_names, .timeout = 120)
{
	TH_NEED_TRACEDUMP(te);
	static const char *const want[] = {
		"Microsoft-Windows-DotNETRuntime/GC/FinalizeObject\t3\n",
		"Microsoft-Windows-DotNETRuntime/GC/CommittedUsage\t6\n",
		"Microsoft-Windows-DotNETRuntimeRundown/GC/SettingsRundown\t1\n",
		"Microsoft-Windows-DotNETRuntimeRundown/Method/DCStopVerbose\t12\n",
	};
	char *dir = th_tmpdir(), path[512], *cmd;
	struct bytebuf out = { 0 };
	size_t i;

	snprintf(path, sizeof(path), "%s/clr.nettrace", dir);
	write_clr_trace(path);
	cr_assert(asprintf(&cmd, "dotnet '%s' counts '%s' 2>&1", te, path) > 0);
	cr_assert_eq(th_run(cmd, &out), 0, "%s", (char *)out.p);
	for (i = 0; i < sizeof(want) / sizeof(*want); i++)
		cr_assert(strstr((char *)out.p, want[i]), "TraceEvent: no %s in:\n%s", want[i],
			  (char *)out.p);
	free(cmd);
	bb_free(&out);
	th_rmdir(dir);
}

/* A .gcdump is not a trace: say so, and print no summary of nothing. */
Test(cli, report_on_a_gcdump_says_what_it_is)
{
	static const char head[] = "\x14\x00\x00\x00!FastSerialization.1\x04\x04\x01\x0a\x00\x00"
				   "\x00\x08\x00\x00\x00\x0a\x00\x00\x00GCHeapDump\x00\x00\x00\x00";
	char *dir = th_tmpdir(), path[512], *args;
	struct bytebuf out = { 0 };

	snprintf(path, sizeof(path), "%s/heap.gcdump", dir);
	cr_assert_eq(th_write_file(path, head, sizeof(head) - 1), 0);
	cr_assert(asprintf(&args, "report '%s'", path) > 0);
	cr_assert_eq(th_tool_run(args, &out), 1, "%s", (char *)out.p);
	cr_assert(strstr((char *)out.p, "is a .gcdump file"), "%s", (char *)out.p);
	cr_assert_null(strstr((char *)out.p, "nettrace V0"), "%s", (char *)out.p);
	cr_assert_null(strstr((char *)out.p, "events      0"), "%s", (char *)out.p);
	free(args);
	bb_free(&out);
	/* nor for a file that is no trace at all */
	cr_assert_eq(th_write_file(path, "garbage", 7), 0);
	cr_assert(asprintf(&args, "report '%s'", path) > 0);
	cr_assert_eq(th_tool_run(args, &out), 1, "%s", (char *)out.p);
	cr_assert(strstr((char *)out.p, "offset 0"), "%s", (char *)out.p);
	cr_assert_null(strstr((char *)out.p, "nettrace V0"), "%s", (char *)out.p);
	free(args);
	bb_free(&out);
	th_rmdir(dir);
}

/*
 * Long work shows how far it has come on a terminal (a pty that script(1)
 * gives the command), and the line is gone when it ends; piped, not a byte
 * of it.
 */
Test(cli, report_convert_and_merge_show_progress_on_a_terminal_only, .timeout = 120)
{
	static const char *const cmds[][2] = {
		{ "report", "report '%s/p.nettrace'" },
		{ "convert", "convert --to text -o /dev/null '%s/p.nettrace'" },
		{ "merge", "merge -o '%s/m.nettrace' '%s/p.nettrace' '%s/p.nettrace'" },
	};
	char *dir = th_tmpdir();
	struct bytebuf out = { 0 };
	size_t i;

	if (th_run("command -v script >/dev/null 2>&1", NULL))
		cr_skip_test("script(1) (util-linux) is not installed: no terminal to show it on");
	cr_assert_eq(th_run_fmt(&out, "'%s' gen -o '%s/p.nettrace' --events 20000 >/dev/null",
				th_tool(), dir), 0);
	for (i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		char *args = th_fmt(cmds[i][1], dir, dir, dir);
		char *line = th_fmt("\rringpipe %s: ", cmds[i][0]);

		out.len = 0;
		cr_assert_eq(th_run_fmt(&out, "script -qec \"'%s' %s >/dev/null\" /dev/null",
					th_tool(), args), 0, "%s", th_text(&out));
		cr_assert(strstr(th_text(&out), line) && strstr(th_text(&out), " % of "),
			  "%s on a terminal: no progress line in '%s'", cmds[i][0], th_text(&out));
		cr_assert(strstr(th_text(&out), "\r\033[K"), "%s: the line is not cleared",
			  cmds[i][0]);
		out.len = 0;
		cr_assert_eq(th_run_fmt(&out, "'%s' %s 2>&1 >/dev/null", th_tool(), args), 0);
		cr_assert(!strchr(th_text(&out), '\r') && !strstr(th_text(&out), " % of "),
			  "%s piped: '%s'", cmds[i][0], th_text(&out));
		free(args);
		free(line);
	}
	bb_free(&out);
	th_rmdir(dir);
}

/* "\-\-name" as groff source writes --name */
static char *man_escaped(const char *opt)
{
	struct bytebuf b = { 0 };
	const char *p;

	for (p = opt; *p; p++)
		if (*p == '-')
			bb_append(&b, "\\-", 2);
		else
			bb_append(&b, p, 1);
	bb_append(&b, "", 1);
	return (char *)b.p;
}

/*
 * ringpipe(1) answers what --help answers: every command and subcommand's
 * --help exits 0, and each long option it names is in the man page, which
 * has EXAMPLES.
 */
Test(cli, the_man_page_has_every_option_that_help_names, .timeout = 120)
{
	static const char *const cmds[] = {
		"report", "dump", "gen", "stress", "ps", "collect", "stop", "record",
		"gcdump", "gcdump report", "gcdump collect", "sample", "convert", "merge",
		"agent", "agent status", "fleet", "fleet init", "fleet query", "fleet check",
		"fleet export", "fleet top",
	};
	struct bytebuf man = { 0 }, help = { 0 };
	char *path = th_fmt("%.*s/../Documentation/man/ringpipe.1",
			    (int)(strrchr(__FILE__, '/') - __FILE__), __FILE__);
	size_t i, checked = 0;

	cr_assert_eq(th_read_file(path, &man), 0, "%s", path);
	cr_assert(strstr(th_text(&man), "\n.SH EXAMPLES\n"), "ringpipe(1) has no EXAMPLES");
	for (i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		char *p;

		help.len = 0;
		cr_assert_eq(th_run_fmt(&help, "'%s' %s --help 2>&1", th_tool(), cmds[i]), 0,
			     "ringpipe %s --help: %s", cmds[i], th_text(&help));
		for (p = strstr((char *)help.p, "--"); p; p = strstr(p + 2, "--")) {
			char opt[64], *esc;
			size_t n = 2;

			if (p > (char *)help.p && (isalnum((unsigned char)p[-1]) || p[-1] == '-'))
				continue;
			while (n < sizeof(opt) - 1 && (isalnum((unsigned char)p[n]) || p[n] == '-'))
				n++;
			if (n == 2 || !isalpha((unsigned char)p[2]))
				continue;	/* "--" itself: the command's start */
			memcpy(opt, p, n);
			opt[n] = 0;
			esc = man_escaped(opt);
			cr_assert(strstr(th_text(&man), esc), "ringpipe %s --help names %s, "
				  "ringpipe(1) does not", cmds[i], opt);
			free(esc);
			checked++;
		}
	}
	cr_assert_gt(checked, 100u, "only %zu options found in the --help texts", checked);
	bb_free(&man);
	bb_free(&help);
	free(path);
}

/* ---- options: one parser for every command --------------------------------- */

/* A pid no process has: a command that got past its options fails for want
 * of it, with exit status 1 rather than the usage error's 2. */
#define NO_PID "2147483632"

/* Runs `ringpipe ARGS` (ringpipe-demo's when args starts with "demo: ") and
 * checks its exit status and that its output holds says (NULL: anything). */
static void expect_run(const char *args, int rc, const char *says)
{
	struct bytebuf out = { 0 };
	int got = strncmp(args, "demo: ", 6) ?
		  th_tool_run(args, &out) :
		  th_run_fmt(&out, "'%s' %s 2>&1", th_demo_bin(), args + 6);

	cr_assert_eq(got, rc, "'ringpipe %s' exited %d, not %d: %s", args, got, rc, th_text(&out));
	cr_assert(!says || strstr(th_text(&out), says), "'ringpipe %s' did not say '%s': %s", args,
		  says, th_text(&out));
	bb_free(&out);
}

/*
 * --opt=value is --opt value, in every command: each case gives one option
 * (or more) that way and sees it taken, by its effect, or by the command
 * getting past its options to fail later for want of a process or server.
 */
Test(cli, every_command_takes_an_option_as_opt_equals_value, .timeout = 120)
{
	char *dir = th_tmpdir(), *agent_dir;
	const struct {
		char *args;
		int rc;
		const char *says;
	} cases[] = {
		{ th_fmt("gen -o %s/g.nettrace --events=123 --threads=3 --format=v6", dir), 0,
		  "\"written\":123," },
		{ th_fmt("report --json %s/g.nettrace", dir), 0, "\"events\":123," },
		{ th_fmt("stress -o %s/s.nettrace --threads=2 --events=1000 --buffering-mode=block",
			 dir), 0, "\"mode\":\"block\"" },
		{ th_fmt("stress -o %s/s.nettrace --threads=2 --events=1000 --payload=40", dir), 0,
		  "\"attempted\":2000," },
		{ th_fmt("convert --to=text %s/g.nettrace", dir), 0, "Ringpipe-Demo/" },
		/* merge's one option is a letter: -oOUT, its value attached */
		{ th_fmt("merge -o%s/m.nettrace %s/g.nettrace", dir, dir), 0, "123 events" },
		{ "collect --process-id=" NO_PID " --duration=3s --buffer-mb=64", 1,
		  "no process with pid " NO_PID },
		{ "stop --process-id=" NO_PID " --session=0x10", 1, "no process with pid " NO_PID },
		{ "gcdump collect --process-id=" NO_PID " --timeout=3s --buffer-mb=64", 1,
		  "no process with pid " NO_PID },
		{ th_fmt("gcdump report --top=5 %s/g.nettrace", dir), 1, "no heap snapshot" },
		{ "sample -p " NO_PID " -o /dev/null --duration=3s --event=cpu-clock", 1,
		  "no process " NO_PID },
		{ th_fmt("agent status --socket=%s/none.sock", dir), 1, "none.sock: " },
		{ th_fmt("agent --providers=X --socket=%s/a.sock --output-dir=%s/agent "
			 "--duration=100ms --quiet", dir, dir), 0, NULL },
		/* legacy tables have the nanosecond column current ones do not */
		{ "fleet init --dialect=legacy --print", 0, "time_ns" },
		{ "fleet query --clickhouse=http://127.0.0.1:1/ --timeout=2 --format=CSV "
		  "'SELECT 1'", 1, "ringpipe fleet: query: " },
		{ "fleet check --clickhouse=http://127.0.0.1:1/ --timeout=2 --host=h", 1,
		  "ringpipe fleet: check: " },
		{ th_fmt("fleet export --clickhouse=http://127.0.0.1:1/ --timeout=2 --where=1 "
			 "--output=%s/e.nettrace", dir), 1, "ringpipe fleet: export: " },
		{ "fleet top --clickhouse=http://127.0.0.1:1/ --timeout=2 --limit=5 --since=1h", 1,
		  "ringpipe fleet: top: " },
		{ "demo: --duration=1 --rate=50 --threads=2 --alloc-threads=0 --jit-threads=0", 0,
		  "ticks " },
	};
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		expect_run(cases[i].args, cases[i].rc, cases[i].says);
	/* the agent ran where --output-dir= said */
	agent_dir = th_fmt("%s/agent", dir);
	cr_assert_eq(access(agent_dir, F_OK), 0, "agent --output-dir=%s made no directory",
		     agent_dir);
	free(agent_dir);
	th_rmdir(dir);
}

/*
 * What a command does not know it refuses by name, with the usage error's
 * exit status and a pointer to its help: an unknown option, an option
 * without its value, a value that does not parse, an abbreviation.
 */
Test(cli, unknown_options_and_missing_values_are_refused_by_name, .timeout = 120)
{
	/* every command and subcommand, and an option of it that takes a value */
	static const struct {
		const char *cmd, *opt;
	} cmds[] = {
		{ "report", NULL }, { "dump", NULL }, { "gen", "--events" },
		{ "stress", "--threads" }, { "ps", NULL }, { "collect", "--duration" }, { "stop", "--session" },
		{ "record", "--usdt" }, { "gcdump report", "--top" },
		{ "gcdump collect", "--timeout" }, { "sample", "--cgroup" }, { "convert", "--to" },
		{ "merge", "-o" }, { "agent", "--providers" }, { "agent status", "--socket" },
		{ "fleet init", "--cluster" }, { "fleet query", "--format" },
		{ "fleet check", "--host" }, { "fleet export", "--where" },
		{ "fleet top", "--since" },
	};
	size_t i;

	for (i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		char *args, *says;

		args = th_fmt("%s --bogus", cmds[i].cmd);
		says = th_fmt("ringpipe %s: unknown option '--bogus' (see ringpipe %s --help)",
			      cmds[i].cmd, cmds[i].cmd);
		expect_run(args, 2, says);
		free(args);
		args = th_fmt("%s --bogus=1", cmds[i].cmd);
		expect_run(args, 2, says);
		free(args);
		free(says);
		if (!cmds[i].opt)
			continue;
		args = th_fmt("%s %s", cmds[i].cmd, cmds[i].opt);
		says = th_fmt("ringpipe %s: option '%s' needs a value", cmds[i].cmd, cmds[i].opt);
		expect_run(args, 2, says);
		free(args);
		free(says);
	}
	expect_run("gen -o /dev/null --events=abc", 2, "--events takes a whole number, not 'abc'");
	expect_run("gen -o /dev/null --events= ", 2, "--events takes a whole number, not ''");
	expect_run("gen -o /dev/null --threads=0", 2,
		   "--threads must be between 1 and 100000, not '0'");
	expect_run("gen -o /dev/null --small=yes", 2, "option '--small' takes no value");
	expect_run("gen -o /dev/null -x", 2, "ringpipe gen: unknown option '-x'");
	expect_run("gen -o /dev/null extra", 2, "ringpipe gen: unexpected argument 'extra'");
	/* an abbreviation would change meaning the day another option starts so */
	expect_run("gen -o /dev/null --even=5", 2, "unknown option '--even': write it in full, "
		   "--events");
	expect_run("agent --clickhouse=", 2, "option '--clickhouse' needs a value");
	expect_run("collect --process-id=abc", 2, "--process-id takes a process id");
	expect_run("demo: --bogus", 2, "ringpipe-demo: unknown option '--bogus' (see ringpipe-demo "
		   "--help)");
	expect_run("demo: --rate", 2, "ringpipe-demo: option '--rate' needs a value");
	expect_run("demo: --threads=999", 2, "ringpipe-demo: --threads takes 1..256, not '999'");
}

/*
 * "--" ends the options. A command that runs a command line stops at it
 * (or would at its first operand, which it refuses), so the options of the
 * command it runs reach that command untouched; any other command takes
 * what follows as operands, even those that start with '-'.
 */
Test(cli, a_double_dash_ends_the_options_and_the_command_line_keeps_its_own, .timeout = 120)
{
	char *dir = th_tmpdir(), *args;

	/* echo is not a runtime: collect says so, after echo printed its argv */
	args = th_fmt("collect -o %s/c.nettrace --duration=5s -- /bin/echo --duration=9 -p 1 -o "
		      "x -- y", dir);
	expect_run(args, 1, "--duration=9 -p 1 -o x -- y\n");
	free(args);
	expect_run("collect -p 1 true", 2, "unexpected argument 'true': the command to run "
		   "follows '--'");
	expect_run("sample -a -o /dev/null true", 2, "unexpected argument 'true'");
	expect_run("record -a --kernel exec -o /dev/null true", 2, "unexpected argument 'true'");
	/* a file whose name starts with '-' */
	args = th_fmt("cd %s && '%s' gen -o ./-g.nettrace --events 10 >/dev/null && '%s' "
		      "merge -o m.nettrace -- -g.nettrace 2>&1", dir, th_tool(), th_tool());
	cr_assert_eq(th_run(args, NULL), 0, "merge refused a file after '--': %s", args);
	free(args);
	args = th_fmt("report --json -- %s/m.nettrace", dir);
	expect_run(args, 0, "\"events\":10,");
	free(args);
	th_rmdir(dir);
}

/* The same for the BPF commands, which run only where BPF is permitted. */
Test(cli, sample_and_record_leave_the_options_after_a_double_dash_to_the_command,
     .timeout = 120)
{
	struct bytebuf out = { 0 };
	char *dir = th_tmpdir(), *args;
	int rc = th_tool_run("sample -a --duration 10ms -o /dev/null", &out);

	if (rc != 0 && strstr(th_text(&out), "CAP_BPF"))
		cr_skip_test("BPF is not permitted here: %s", th_text(&out));
	cr_assert_eq(rc, 0, "ringpipe sample failed: %s", th_text(&out));
	bb_free(&out);
	args = th_fmt("sample --duration=30s -o %s/s.nettrace -- /bin/echo -o --duration=5 -a x",
		      dir);
	expect_run(args, 0, "-o --duration=5 -a x\n");
	free(args);
	args = th_fmt("record --kernel=exec -o %s/r.nettrace -- /bin/echo -a --bogus -o y", dir);
	expect_run(args, 0, "-a --bogus -o y\n");
	free(args);
	th_rmdir(dir);
}
