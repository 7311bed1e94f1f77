// SPDX-License-Identifier: MIT
/*
 * The duration grammar every command's --duration and --timeout share
 * (user/util/duration.h), and the commands that take it.
 */
#include <inttypes.h>
#include <string.h>

#include "duration.h"
#include "helpers.h"

#define S 1000000000ull

static void expect(const char *s, uint64_t want)
{
	uint64_t ns = 12345;
	int rc = rp_duration_parse(s, &ns);

	cr_assert_eq(rc, 0, "'%s' was refused (%d), expected %" PRIu64 " ns", s, rc, want);
	cr_assert_eq(ns, want, "'%s' gave %" PRIu64 " ns, expected %" PRIu64, s, ns, want);
}

static void refuse(const char *s)
{
	uint64_t ns = 12345;
	int rc = rp_duration_parse(s, &ns);

	cr_assert_eq(rc, -EINVAL, "'%s' gave %d (%" PRIu64 " ns), expected -EINVAL", s, rc, ns);
	cr_assert_eq(ns, 12345, "a refused '%s' changed the result to %" PRIu64, s, ns);
}

Test(duration, a_bare_number_is_seconds)
{
	expect("3", 3 * S);
	expect("0", 0);
	expect("86400", 86400 * S);
	expect("007", 7 * S);
}

Test(duration, fractions_are_exact_to_the_nanosecond)
{
	expect("1.5", 1500000000ull);
	expect("2.25", 2250000000ull);
	expect(".5", 500000000ull);
	expect("0.000000001", 1);
	/* below a nanosecond: rounded to the nearest one */
	expect("0.0000000004", 0);
	expect("0.0000000006", 1);
	/* more digits than can matter are still checked, then dropped */
	expect("1.0000000000000000000000001", S);
	expect("1.5s", 1500000000ull);
	expect("0.5ms", 500000ull);
	expect("1.5m", 90 * S);
	expect("0.5h", 1800 * S);
	expect("2.5us", 2500ull);
}

Test(duration, every_unit_suffix)
{
	expect("250ns", 250);
	expect("250us", 250000);
	expect("500ms", 500000000ull);
	expect("3s", 3 * S);
	expect("2m", 120 * S);
	expect("1h", 3600 * S);
}

Test(duration, clock_forms_as_dotnet_trace_writes_them)
{
	expect("00:00:03", 3 * S);
	expect("01:02:03", 3723 * S);
	expect("100:00:00", 360000 * S);	/* HH:MM:SS: hours are not capped */
	expect("00:00:59", 59 * S);
	expect("1:00:00:00", 86400 * S);
	expect("02:23:59:59", (2 * 86400ull + 23 * 3600 + 59 * 60 + 59) * S);
	expect("00:00:00:01", S);
	expect("00:00:00", 0);
}

Test(duration, empty_strings_and_signs_are_refused)
{
	uint64_t ns = 1;

	cr_assert_eq(rp_duration_parse(NULL, &ns), -EINVAL, "NULL is not a duration");
	refuse("");
	refuse("-1");
	refuse("-1s");
	refuse("+1");
	refuse("-00:00:01");
	refuse(" 1");
	refuse("1 ");
	refuse("1 s");
}

Test(duration, junk_is_refused)
{
	refuse("s");
	refuse("ms");
	refuse(".");
	refuse("5.");
	refuse("5.s");
	refuse("1.2.3");
	refuse("5x");
	refuse("5sec");
	refuse("5S");
	refuse("5 m");
	refuse("1e3");
	refuse("0x10");
	refuse("inf");
	refuse("nan");
	refuse("1s500ms");
	refuse("abc");
}

Test(duration, malformed_clock_forms_are_refused)
{
	refuse("1:00");			/* MM:SS is not a form */
	refuse("1:2:3:4:5");
	refuse("00:60:00");
	refuse("00:00:60");
	refuse("1:99:00");
	refuse("1:24:00:00");		/* DD:HH:MM:SS: hours 0..23 */
	refuse("00:00:01.5");
	refuse("::");
	refuse("1::00");
	refuse(":1:00:00");
	refuse("1:00:00:");
	refuse("1:00:00s");
	refuse("1:-1:00");
}

Test(duration, overflow_is_refused)
{
	expect("18446744073709551615ns", UINT64_MAX);
	refuse("18446744073709551616ns");
	refuse("18446744073709551616");
	refuse("18446744074s");		/* > 2^64 ns */
	refuse("5124096h");
	refuse("99999999999999999999999");
	refuse("18446744073.8s");
	refuse("213503:23:59:59");	/* 213503 days and a day's worth is past 2^64 ns */
	refuse("99999999999:00:00");
	expect("213503:00:00:00", 213503ull * 86400 * S);
}

/* ---- the commands -------------------------------------------------------- */

static int tool(const char *args, struct bytebuf *out)
{
	char *cmd = NULL;
	int rc;

	out->len = 0;
	cr_assert(asprintf(&cmd, "'%s' %s 2>&1", th_tool(), args) > 0);
	rc = th_run(cmd, out);
	free(cmd);
	bb_append(out, "", 1);
	return rc;
}

Test(duration, every_command_takes_the_same_grammar)
{
	/* accepted: the command gets past its options and fails later, for
	 * want of a process 0x7ffffff0 or of a diagnostic socket */
	static const char *const ok[] = { "500ms", "3s", "2m", "1h", "250us", "1.5", "1.5s",
					  "00:00:03", "00:00:00:03" };
	static const char *const cmds[] = {
		"collect -p 2147483632 --duration %s",
		"gcdump collect -p 2147483632 --timeout %s",
		"sample -p 2147483632 -o /dev/null --duration %s",
	};
	struct bytebuf out = { 0 };
	size_t i, k;

	for (k = 0; k < sizeof(cmds) / sizeof(cmds[0]); k++) {
		for (i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
			char *args = NULL;
			int rc;

			cr_assert(asprintf(&args, cmds[k], ok[i]) > 0);
			rc = tool(args, &out);
			cr_assert_eq(rc, 1, "'ringpipe %s' exited %d, not 1 (no such process): %s",
				     args, rc, (char *)out.p);
			cr_assert(!strstr((char *)out.p, "--duration") &&
				  !strstr((char *)out.p, "--timeout"),
				  "'ringpipe %s' refused the time: %s", args, (char *)out.p);
			free(args);
		}
	}
	bb_free(&out);
}

Test(duration, every_command_refuses_a_bad_time_with_a_usage_error)
{
	static const struct {
		const char *args, *msg;
	} cases[] = {
		{ "collect -p 1 --duration 5x", "--duration takes" },
		{ "collect -p 1 --duration 0", "--duration takes" },
		{ "collect -p 1 --duration -1", "--duration takes" },
		{ "record -a --kernel exec -o /dev/null --duration 5x", "--duration takes" },
		{ "record -a --kernel exec -o /dev/null --duration 0", "--duration takes" },
		{ "sample -a -o /dev/null --duration 1:99:00", "--duration takes" },
		{ "sample -a -o /dev/null --duration ''", "--duration takes" },
		{ "gcdump collect -p 1 --timeout 5x", "--timeout" },
		{ "gcdump collect -p 1 --timeout 0", "--timeout" },
		{ "gcdump collect -p 1 --timeout 2d", "--timeout" },
	};
	struct bytebuf out = { 0 };
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int rc = tool(cases[i].args, &out);

		cr_assert_eq(rc, 2, "'ringpipe %s' exited %d, not 2: %s", cases[i].args, rc,
			     (char *)out.p);
		cr_assert(strstr((char *)out.p, cases[i].msg), "'ringpipe %s' said '%s', not '%s'",
			  cases[i].args, (char *)out.p, cases[i].msg);
	}
	bb_free(&out);
}
