/* SPDX-License-Identifier: MIT */
/*
 * The commands' options. Each command describes its options in one table
 * of struct tool_opt; tool_opts_parse() reads argv with getopt_long from
 * that table, parses and checks every value by its kind, and prints the
 * option lines of --help from it, so that what a command accepts and what
 * its --help says cannot drift apart.
 *
 * What the user types (GNU conventions): --name VALUE or --name=VALUE, -c
 * VALUE or -cVALUE, flags -a -b or -ab, "--" ends the options; -h and
 * --help print the help. Long names are written in full (an abbreviation is
 * refused: an option added later would change what it meant). Options come
 * before, between or after the operands, except for a command that runs a
 * command line (tool_cmd.cmdline): its options end at "--" or at the first
 * operand, so the options of the command it runs stay that command's.
 *
 * An option given again is taken again: a member keeps the last
 * value, take() sees every one (an option that adds to a list).
 *
 * A table is a static array of entries ending with TOOL_OPTS_END, one line
 * per option, each saying where in the command's configuration struct
 * (type T, member M) its value goes:
 *
 *	TOOL_UINT("events", 0, "N", 0, UINT64_MAX, struct gen_cfg, events,
 *		  "events in all"),
 *
 * NAME is the long name without "--" (NULL: only the letter), LETTER the
 * short option (0: none), ARG the value's name in --help, TEXT the help
 * text ('\n' starts its next line, indented under the first). The member's
 * type is checked at compile time. Designators after TEXT set the rest:
 * .bad (the words a bad value gets), .nonempty (an empty value is a
 * missing one). An option whose value needs more than storing (a choice, a
 * list that grows) goes to the command's take() instead (TOOL_TAKE).
 */
#ifndef RINGPIPE_TOOL_OPTS_H
#define RINGPIPE_TOOL_OPTS_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum tool_opt_kind {
	TOOL_OPT_END,		/* the zeroed entry that ends a table */
	TOOL_OPT_FLAG,		/* no value: sets a bool */
	TOOL_OPT_STRING,	/* the value as given */
	TOOL_OPT_UINT,		/* a decimal whole number, min..max */
	TOOL_OPT_DURATION,	/* a time (user/util/duration.h), min..max ns */
	TOOL_OPT_MIB,		/* a whole number of MiB, min..max, stored in bytes */
};

struct tool_opt {
	const char *name;	/* the long name without "--"; NULL: the letter only */
	char letter;		/* the short option; 0: none ('h' is --help's) */
	enum tool_opt_kind kind;
	const char *arg;	/* the value's name in --help */
	const char *help;	/* its text in --help */
	uint64_t min, max;	/* UINT, DURATION (ns) and MIB (MiB): the range */
	/* What a bad value is told, after the option's name and before
	 * ", not 'VALUE'" ("takes a rate in Hz (1..100000)"); NULL: the
	 * kind's words ("takes a whole number", "must be between 1 and 8") */
	const char *bad;
	bool nonempty;		/* an empty value is refused as a missing one */
	/* Where the value goes in the command's struct: a bool, a const
	 * char *, or an integer that holds max. size 0: to take() instead */
	size_t offset, size;
	uint64_t size_max;	/* the integer's largest value */
	int id;			/* take()'s name for the option */
};

/* The member's largest value; does not compile for a type options cannot fill. */
#define TOOL_OPT_INT_MAX(T, m) \
	_Generic(&((T *)0)->m, uint64_t *: UINT64_MAX, uint32_t *: UINT32_MAX, \
		 uint16_t *: UINT16_MAX, uint8_t *: UINT8_MAX, int *: INT_MAX)
#define TOOL_OPT_AT(T, m) .offset = offsetof(T, m), .size = sizeof(((T *)0)->m)

/* The entries; each macro is variadic so that T, m may come from one macro. */
#define TOOL_FLAG(...) TOOL_FLAG_(__VA_ARGS__)
#define TOOL_STRING(...) TOOL_STRING_(__VA_ARGS__)
#define TOOL_UINT(...) TOOL_NUMBER_(TOOL_OPT_UINT, __VA_ARGS__)
#define TOOL_DURATION(...) TOOL_NUMBER_(TOOL_OPT_DURATION, __VA_ARGS__)
#define TOOL_MIB(...) TOOL_NUMBER_(TOOL_OPT_MIB, __VA_ARGS__)
/* a flag or a string, handed to take() as option id_ */
#define TOOL_TAKE(...) TOOL_TAKE_(__VA_ARGS__)
/* a number of a number's kind, checked, handed to take() as option id_ */
#define TOOL_TAKE_NUMBER(...) TOOL_TAKE_NUMBER_(__VA_ARGS__)
#define TOOL_OPTS_END { .kind = TOOL_OPT_END }

#define TOOL_FLAG_(name_, letter_, T, m, text, ...) \
	{ .name = (name_), .letter = (letter_), .help = (text), TOOL_OPT_AT(T, m), \
	  .kind = _Generic(&((T *)0)->m, bool *: TOOL_OPT_FLAG), __VA_ARGS__ }
#define TOOL_STRING_(name_, letter_, arg_, T, m, text, ...) \
	{ .name = (name_), .letter = (letter_), .arg = (arg_), .help = (text), \
	  TOOL_OPT_AT(T, m), .kind = _Generic(&((T *)0)->m, const char **: TOOL_OPT_STRING), \
	  __VA_ARGS__ }
#define TOOL_NUMBER_(kind_, name_, letter_, arg_, lo, hi, T, m, text, ...) \
	{ .name = (name_), .letter = (letter_), .kind = (kind_), .arg = (arg_), .help = (text), \
	  .min = (lo), .max = (hi), TOOL_OPT_AT(T, m), .size_max = TOOL_OPT_INT_MAX(T, m), \
	  __VA_ARGS__ }
#define TOOL_TAKE_(kind_, name_, letter_, arg_, id_, text, ...) \
	{ .name = (name_), .letter = (letter_), .kind = (kind_), .arg = (arg_), .help = (text), \
	  .id = (id_), __VA_ARGS__ }
#define TOOL_TAKE_NUMBER_(kind_, name_, letter_, arg_, lo, hi, id_, text, ...) \
	{ .name = (name_), .letter = (letter_), .kind = (kind_), .arg = (arg_), .help = (text), \
	  .min = (lo), .max = (hi), .id = (id_), __VA_ARGS__ }

/* What a command's options and help are made of. */
struct tool_cmd {
	const char *prog;		/* NULL: "ringpipe" */
	const char *name;		/* "gen", "fleet top"; NULL for a program of its own */
	const char *usage;		/* --help's text before the options: synopsis... */
	const char *usage_end;		/* and after them (exit status...); may be NULL */
	const struct tool_opt *opts;	/* the command's options */
	const struct tool_opt *common;	/* options it shares with its siblings; may be NULL */
	/*
	 * Takes an option without a member into cfg: value as typed, argv's
	 * own (NULL for a flag); num what a number's kind made of it (MIB:
	 * bytes). 0, or the exit status (2) after saying what is wrong.
	 */
	int (*take)(void *cfg, const struct tool_opt *o, char *value, uint64_t num);
	int max_args;			/* operands it takes; -1: any number */
	bool cmdline;			/* runs the command line that follows "--" */
	/* subcommands whose options its --help lists too; NULL-terminated */
	const struct tool_cmd *const *also;
};

/* What follows the options. */
struct tool_args {
	char **argv;			/* the operands, argc of them */
	int argc;
	bool dashdash;			/* cmdline: they followed "--" */
};

#define TOOL_OPTS_RUN (-1)

/*
 * Parses argv (argv[0] is the command's name) as cmd says: every option is
 * stored into cfg (the struct its table names) or taken, and *rest gets
 * the operands. TOOL_OPTS_RUN when the command is to run; otherwise the
 * exit status to return: 0 after printing the help (-h, --help), 2 after
 * saying what is wrong ("ringpipe gen: unknown option '--bogus' (see
 * ringpipe gen --help)").
 */
int tool_opts_parse(const struct tool_cmd *cmd, int argc, char **argv, void *cfg,
		    struct tool_args *rest);

/*
 * Prints cmd's --help: usage, the option lines of its tables and -h,
 * --help's (none when it has no options and subcommands do), those of
 * each subcommand in cmd->also, usage_end.
 */
void tool_opts_help(FILE *f, const struct tool_cmd *cmd);

#endif
