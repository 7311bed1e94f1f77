/* SPDX-License-Identifier: MIT */
/*
 * What every ringpipe command shares: its error messages, strict number and
 * duration parsing, and starting a command held until tracing is ready.
 */
#ifndef RINGPIPE_TOOL_UTIL_H
#define RINGPIPE_TOOL_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Prints "ringpipe <cmd>: <message>" to stderr; returns 1 (usage: 2). */
int tool_err(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prints "<prefix><message>\n" to stderr unless quiet: a long-running
 * command's progress lines (the agent and its egress). */
void tool_say(bool quiet, const char *prefix, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/*
 * A progress line for long work ("ringpipe report: 41 % of 1.0 GiB"): on
 * standard error when it is a terminal, redrawn at most every 200 ms and
 * cleared when the work is done; nothing at all when standard error is a
 * pipe or a file. tool_progress() is cheap enough to call per event.
 */
struct tool_progress {
	const char *cmd;
	unsigned int passes;	/* over the input: total / passes is its size */
	bool on;		/* standard error is a terminal */
	bool shown;		/* a line is on the screen */
	uint32_t calls;
	uint64_t next_ns;	/* the next redraw, not before */
};
void tool_progress_init(struct tool_progress *p, const char *cmd);
void tool_progress(struct tool_progress *p, uint64_t done, uint64_t total);
void tool_progress_end(struct tool_progress *p);

/* Formats a message into err (errlen bytes) for a caller to print; returns rc.
 * For library parts that say why they failed without printing it. */
int tool_set_err(char *err, size_t errlen, int rc, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* Strict unsigned parse: whole string, decimal, <= max. 0 or -EINVAL. */
int tool_parse_u64(const char *s, uint64_t max, uint64_t *out);

/*
 * A duration (user/util/duration.h's grammar) of more than 0 and at most
 * max_ns; 0 or -EINVAL.
 */
int tool_parse_duration(const char *s, uint64_t max_ns, uint64_t *ns);

/* A bound on a Block-mode write's wait (--block-timeout): "0" for none, or a
 * time of 1 ms to UINT32_MAX ms, in whole ms. 0 or -EINVAL. */
int tool_parse_block_timeout(const char *s, uint32_t *ms);

/* Writes all n bytes (again after EINTR and short writes); 0 or -errno. */
int tool_write_all(int fd, const void *p, size_t n);

/*
 * Starts argv held at a pipe, so that probes and samplers attach before its
 * first instruction: it execs once a byte is written to *go_fd, and exits
 * 127 if *go_fd is closed first (or it cannot run, saying so as "ringpipe
 * <cmd>: cannot run ..."). The child's pid, or -1 with errno set.
 */
pid_t tool_spawn_held(const char *cmd, char **argv, int *go_fd);

/*
 * What a trace of a program is named after: the base name of argv[0], or
 * for a managed app run by its host (`dotnet [exec] App.dll`, where every
 * process is "dotnet") the app's, "App". Characters other than letters,
 * digits, '.', '-' and '_' become '_'; "process" when nothing is left.
 */
void tool_program_name(const char *const *argv, size_t argc, char *out, size_t len);
/* The same for a running process, from /proc/<pid>/cmdline (or comm). */
void tool_process_name(pid_t pid, char *out, size_t len);
/* NAME_PID_YYYYMMDD_HHMMSS<suffix> (local time now) into out. */
void tool_output_name(const char *name, pid_t pid, const char *suffix, char *out, size_t len);

#endif
