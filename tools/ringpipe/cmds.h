/* SPDX-License-Identifier: MIT */
#ifndef RINGPIPE_TOOL_CMDS_H
#define RINGPIPE_TOOL_CMDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

int cmd_report(int argc, char **argv);
int cmd_dump(int argc, char **argv);
int cmd_gen(int argc, char **argv);
int cmd_stress(int argc, char **argv);
int cmd_ps(int argc, char **argv);
int cmd_collect(int argc, char **argv);
int cmd_stop(int argc, char **argv);
int cmd_gcdump(int argc, char **argv);
int cmd_sample(int argc, char **argv);
int cmd_convert(int argc, char **argv);
/* cmd_convert.c: the functions most samples of the trace at path were in */
int convert_top_functions(const char *path, FILE *out, size_t top);
int cmd_record(int argc, char **argv);
/* cmd_gcdump.c: does the trace in fd hold a complete heap snapshot yet? */
bool gcdump_trace_complete(int fd);

/* Prints "ringpipe <cmd>: <message>" to stderr; returns 1 (usage: 2). */
int tool_err(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/*
 * Starts argv held at a pipe, so that probes and samplers attach before its
 * first instruction: it execs once a byte is written to *go_fd, and exits
 * 127 if *go_fd is closed first (or it cannot run, saying so as "ringpipe
 * <cmd>: cannot run ..."). The child's pid, or -1 with errno set.
 */
pid_t tool_spawn_held(const char *cmd, char **argv, int *go_fd);
/* Strict unsigned parse: whole string, decimal, <= max. */
int parse_u64(const char *s, uint64_t max, uint64_t *out);

#endif
