// SPDX-License-Identifier: MIT
/*
 * The ringpipe command: what users type, and what they get back for bad input.
 */
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
	bb_free(&out);
}
