// SPDX-License-Identifier: MIT
/*
 * The commands' options (see tool_opts.h): one table per command, read with
 * getopt_long.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/duration.h"
#include "common/tool_opts.h"
#include "common/tool_util.h"

/* Options of one command, its common ones included; -h, --help aside */
#define TOOL_OPTS_MAX 64
/* getopt_long's value of a long option without a letter: this + its index */
#define TOOL_OPT_LONG_ONLY 256
/* The help's option column: wider entries put their text on the next line */
#define TOOL_OPTS_COLUMN_MAX 28

/* The options of cmd, its own first, then its common ones. */
struct opt_set {
	const struct tool_cmd *cmd;
	void *cfg;
	const struct tool_opt *opt[TOOL_OPTS_MAX];
	size_t n;
};

static void opts_say(const struct tool_cmd *cmd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* "ringpipe gen: <message> (see ringpipe gen --help)" on stderr */
static void opts_say(const struct tool_cmd *cmd, const char *fmt, ...)
{
	const char *prog = cmd->prog ? cmd->prog : "ringpipe";
	const char *sep = cmd->name ? " " : "", *name = cmd->name ? cmd->name : "";
	va_list ap;

	fprintf(stderr, "%s%s%s: ", prog, sep, name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, " (see %s%s%s --help)\n", prog, sep, name);
}

static bool opt_has_value(const struct tool_opt *o)
{
	return o->kind != TOOL_OPT_FLAG;
}

static bool opt_is_number(const struct tool_opt *o)
{
	return o->kind == TOOL_OPT_UINT || o->kind == TOOL_OPT_DURATION || o->kind == TOOL_OPT_MIB;
}

/* A table that cannot work is the program's mistake, found by any --help. */
static void opts_broken(const struct tool_cmd *cmd, const struct tool_opt *o, const char *why)
{
	fprintf(stderr, "%s %s: option table: --%s (-%c): %s\n",
		cmd->prog ? cmd->prog : "ringpipe", cmd->name ? cmd->name : "",
		o->name ? o->name : "", o->letter ? o->letter : '?', why);
	abort();
}

static void opts_check(const struct tool_cmd *cmd, const struct tool_opt *o)
{
	uint64_t cap = o->kind == TOOL_OPT_MIB ? o->size_max >> 20 : o->size_max;

	if (!o->name && !o->letter)
		opts_broken(cmd, o, "neither a name nor a letter");
	if (o->letter == 'h' || (o->name && !strcmp(o->name, "help")))
		opts_broken(cmd, o, "-h and --help are the help's");
	if (!o->help || (opt_has_value(o) && !o->arg))
		opts_broken(cmd, o, "no help text, or no name for its value");
	if (!o->size && !cmd->take)
		opts_broken(cmd, o, "no member and no take()");
	if (opt_is_number(o) && (o->min > o->max || (o->size && o->max > cap)))
		opts_broken(cmd, o, "its range does not fit its member");
}

static void opts_collect(struct opt_set *s, const struct tool_cmd *cmd)
{
	const struct tool_opt *tables[2] = { cmd->opts, cmd->common }, *o;
	size_t t, i;

	s->cmd = cmd;
	s->n = 0;
	for (t = 0; t < 2; t++) {
		for (o = tables[t]; o && o->kind != TOOL_OPT_END; o++) {
			if (s->n == TOOL_OPTS_MAX)
				opts_broken(cmd, o, "more options than TOOL_OPTS_MAX");
			opts_check(cmd, o);
			for (i = 0; i < s->n; i++) {
				const struct tool_opt *seen = s->opt[i];

				if ((o->letter && o->letter == seen->letter) ||
				    (o->name && seen->name && !strcmp(o->name, seen->name)))
					opts_broken(cmd, o, "given twice");
			}
			s->opt[s->n++] = o;
		}
	}
}

/* The option getopt_long returned as val (a letter or TOOL_OPT_LONG_ONLY + i). */
static const struct tool_opt *opts_find(const struct opt_set *s, int val)
{
	size_t i;

	if (val >= TOOL_OPT_LONG_ONLY)
		return (size_t)(val - TOOL_OPT_LONG_ONLY) < s->n ? s->opt[val - TOOL_OPT_LONG_ONLY]
								  : NULL;
	for (i = 0; i < s->n; i++)
		if (s->opt[i]->letter && s->opt[i]->letter == val)
			return s->opt[i];
	return NULL;
}

/* The option as the user wrote it, without "=VALUE": "--events", "-o". */
static void opts_typed(char *out, size_t len, const char *arg, int letter)
{
	if (arg && arg[0] == '-' && arg[1] == '-')
		snprintf(out, len, "%.*s", (int)strcspn(arg, "="), arg);
	else
		snprintf(out, len, "-%c", letter);
}

static void opts_store(void *cfg, const struct tool_opt *o, const char *value, uint64_t num)
{
	char *at = (char *)cfg + o->offset;
	uint32_t u32 = (uint32_t)num;
	uint16_t u16 = (uint16_t)num;
	uint8_t u8 = (uint8_t)num;

	if (o->kind == TOOL_OPT_FLAG)
		*(bool *)at = true;
	else if (o->kind == TOOL_OPT_STRING)
		*(const char **)at = value;
	else if (o->size == sizeof(uint64_t))
		memcpy(at, &num, sizeof(num));
	else if (o->size == sizeof(uint32_t))	/* an int's bytes too: max <= INT_MAX */
		memcpy(at, &u32, sizeof(u32));
	else if (o->size == sizeof(uint16_t))
		memcpy(at, &u16, sizeof(u16));
	else
		memcpy(at, &u8, sizeof(u8));
}

/* A number of o's kind in o's range into *num; 0, or 2 after saying why not. */
static int opts_number(const struct tool_cmd *cmd, const struct tool_opt *o, const char *typed,
		       const char *v, uint64_t *num)
{
	bool is_time = o->kind == TOOL_OPT_DURATION;
	bool parsed = is_time ? !rp_duration_parse(v, num) : !tool_parse_u64(v, UINT64_MAX, num);

	if (parsed && *num >= o->min && *num <= o->max) {
		if (o->kind == TOOL_OPT_MIB)
			*num <<= 20;
		return 0;
	}
	if (o->bad)
		opts_say(cmd, "%s %s, not '%s'", typed, o->bad, v);
	else if (is_time)
		opts_say(cmd, "%s takes a time%s: SECONDS, a number with a unit (500ms, 2m, 1h), "
			 "HH:MM:SS or DD:HH:MM:SS, not '%s'", typed, o->min ? " > 0" : "", v);
	else if (!parsed)
		opts_say(cmd, "%s takes a whole number%s, not '%s'", typed,
			 o->kind == TOOL_OPT_MIB ? " of MiB" : "", v);
	else
		opts_say(cmd, "%s must be between %" PRIu64 " and %" PRIu64 "%s, not '%s'", typed,
			 o->min, o->max, o->kind == TOOL_OPT_MIB ? " (MiB)" : "", v);
	return 2;
}

/*
 * getopt_long takes an unambiguous abbreviation of a long option; we do not
 * (an option added later would change its meaning). 0 when the argument
 * that named lo (the one before a separate value) named it in full, else 2
 * after saying so.
 */
static int opts_abbreviated(const struct opt_set *s, const struct option *lo, char **argv)
{
	const char *arg = lo->has_arg && optarg == argv[optind - 1] ? argv[optind - 2]
								     : argv[optind - 1];
	size_t n = strlen(lo->name);
	char typed[80];

	if (!strncmp(arg + 2, lo->name, n) && (!arg[2 + n] || arg[2 + n] == '='))
		return 0;
	opts_typed(typed, sizeof(typed), arg, 0);
	opts_say(s->cmd, "unknown option '%s': write it in full, --%s", typed, lo->name);
	return 2;
}

/* The option getopt_long returned: checked, parsed, stored or taken. 0 or 2. */
static int opts_take(const struct opt_set *s, const struct tool_opt *o, int longindex)
{
	const struct tool_cmd *cmd = s->cmd;
	uint64_t num = 1;
	char typed[80];
	int rc;

	if (longindex >= 0)
		snprintf(typed, sizeof(typed), "--%s", o->name);
	else
		snprintf(typed, sizeof(typed), "-%c", o->letter);
	if (opt_has_value(o) && o->nonempty && !*optarg) {
		opts_say(cmd, "option '%s' needs a value", typed);
		return 2;
	}
	if (opt_is_number(o) && (rc = opts_number(cmd, o, typed, optarg, &num)))
		return rc;
	if (o->size) {
		opts_store(s->cfg, o, optarg, num);
		return 0;
	}
	return cmd->take(s->cfg, o, opt_has_value(o) ? optarg : NULL, num);
}

/* What is wrong with the option getopt_long refused ('?' or ':'): 2. */
static int opts_refused(const struct opt_set *s, int c, char **argv)
{
	const struct tool_opt *o = optopt ? opts_find(s, optopt) : NULL;
	/* a long option's argument, or a short option's at the end of argv;
	 * an unknown letter may sit inside an argument not yet passed */
	const char *arg = argv[optind - 1];
	char typed[80];

	opts_typed(typed, sizeof(typed), c == ':' || !optopt || o ? arg : NULL, optopt);
	if (c == ':')
		opts_say(s->cmd, "option '%s' needs a value", typed);
	else if (o)
		opts_say(s->cmd, "option '%s' takes no value, not '%s'", typed,
			 arg + strcspn(arg, "=") + 1);
	else
		opts_say(s->cmd, "unknown option '%s'", typed);
	return 2;
}

int tool_opts_parse(const struct tool_cmd *cmd, int argc, char **argv, void *cfg,
		    struct tool_args *rest)
{
	struct option longopts[TOOL_OPTS_MAX + 2];
	char optstring[3 + 2 * TOOL_OPTS_MAX + 2], *p = optstring;
	struct opt_set s;
	int c, rc, next = 1, nlong = 0;
	size_t i;

	opts_collect(&s, cmd);
	s.cfg = cfg;
	/* '+': a command line's options end at its first operand; ':': a
	 * missing value is ':', not '?' */
	if (cmd->cmdline)
		*p++ = '+';
	*p++ = ':';
	for (i = 0; i < s.n; i++) {
		const struct tool_opt *o = s.opt[i];
		int val = o->letter ? o->letter : TOOL_OPT_LONG_ONLY + (int)i;

		if (o->letter) {
			*p++ = o->letter;
			if (opt_has_value(o))
				*p++ = ':';
		}
		if (o->name)
			longopts[nlong++] = (struct option){ o->name, opt_has_value(o) ?
							     required_argument : no_argument,
							     NULL, val };
	}
	*p++ = 'h';
	*p = 0;
	longopts[nlong++] = (struct option){ "help", no_argument, NULL, 'h' };
	longopts[nlong] = (struct option){ 0 };

	/* a full reset (GNU): main or a parent command may have parsed before */
	optind = 0;
	opterr = 0;
	for (;;) {
		const struct tool_opt *o;
		int longindex = -1;

		c = getopt_long(argc, argv, optstring, longopts, &longindex);
		if (c == -1)
			break;
		if (longindex >= 0 && c != '?' && c != ':' &&
		    opts_abbreviated(&s, &longopts[longindex], argv))
			return 2;
		if (c == 'h') {
			tool_opts_help(stdout, cmd);
			return 0;
		}
		if (c == '?' || c == ':')
			return opts_refused(&s, c, argv);
		o = opts_find(&s, c);
		if (!o)
			return opts_refused(&s, '?', argv);
		if ((rc = opts_take(&s, o, longindex)))
			return rc;
		next = optind;
	}
	rest->argv = argv + optind;
	rest->argc = argc - optind;
	/* without permutation (cmdline), the "--" that ended the options is
	 * the one argument getopt_long passed over after the last option */
	rest->dashdash = cmd->cmdline && optind == next + 1 && !strcmp(argv[next], "--");
	if (cmd->cmdline && rest->argc && !rest->dashdash) {
		opts_say(cmd, "unexpected argument '%s': the command to run follows '--'",
			 rest->argv[0]);
		return 2;
	}
	if (!cmd->cmdline && cmd->max_args >= 0 && rest->argc > cmd->max_args) {
		opts_say(cmd, "unexpected argument '%s'", rest->argv[cmd->max_args]);
		return 2;
	}
	return TOOL_OPTS_RUN;
}

/* "  -o, --output FILE" into out; its length */
static int opts_left(char *out, size_t len, const struct tool_opt *o)
{
	int n;

	if (o->letter && o->name)
		n = snprintf(out, len, "  -%c, --%s", o->letter, o->name);
	else if (o->letter)
		n = snprintf(out, len, "  -%c", o->letter);
	else
		n = snprintf(out, len, "  --%s", o->name);
	if (o->arg && n >= 0 && (size_t)n < len)
		n += snprintf(out + n, len - (size_t)n, " %s", o->arg);
	return n;
}

static void opts_line(FILE *f, const char *left, int width, const char *text)
{
	const char *nl;
	int n = (int)strlen(left);

	fputs(left, f);
	if (n + 2 > width) {
		fputc('\n', f);
		n = 0;
	}
	for (;;) {
		nl = strchr(text, '\n');
		fprintf(f, "%*s%.*s\n", width - n, "", nl ? (int)(nl - text) : (int)strlen(text),
			text);
		if (!nl || !nl[1])
			break;
		text = nl + 1;
		n = 0;
	}
}

/* The option lines of two tables (common may be NULL), in one column layout. */
static void opts_print(FILE *f, const struct tool_opt *opts, const struct tool_opt *common,
		       bool help_line)
{
	const struct tool_opt *tables[2] = { opts, common }, *o;
	char left[128];
	int width = (int)strlen("  -h, --help") + 2;
	size_t t;

	for (t = 0; t < 2; t++)
		for (o = tables[t]; o && o->kind != TOOL_OPT_END; o++) {
			int n = opts_left(left, sizeof(left), o);

			if (n <= TOOL_OPTS_COLUMN_MAX && n + 2 > width)
				width = n + 2;
		}
	for (t = 0; t < 2; t++)
		for (o = tables[t]; o && o->kind != TOOL_OPT_END; o++) {
			opts_left(left, sizeof(left), o);
			opts_line(f, left, width, o->help);
		}
	if (help_line)
		opts_line(f, "  -h, --help", width, "this text");
}

static bool opts_none(const struct tool_opt *opts)
{
	return !opts || opts->kind == TOOL_OPT_END;
}

void tool_opts_help(FILE *f, const struct tool_cmd *cmd)
{
	const struct tool_cmd *const *sub;

	fputs(cmd->usage, f);
	if (!cmd->also || !opts_none(cmd->opts) || !opts_none(cmd->common)) {
		fputs(cmd->also && opts_none(cmd->opts) ? "\noptions of every subcommand:\n" :
			"\noptions:\n", f);
		opts_print(f, cmd->opts, cmd->common, true);
	}
	for (sub = cmd->also; sub && *sub; sub++) {
		fprintf(f, "\noptions of '%s':\n", (*sub)->name);
		/* its common options are the ones above */
		opts_print(f, (*sub)->opts, NULL, false);
	}
	if (cmd->usage_end) {
		fputc('\n', f);
		fputs(cmd->usage_end, f);
	}
}
