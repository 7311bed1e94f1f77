/* SPDX-License-Identifier: MIT */
/*
 * The commands main() dispatches to: each takes its argv (argv[0] is the
 * command's name) and returns the exit status (0, 1 on failure, 2 on a
 * usage error). What several commands share is in the
 * folders beside this file, one per concern (Documentation/architecture.md).
 */
#ifndef RINGPIPE_TOOL_CMDS_H
#define RINGPIPE_TOOL_CMDS_H

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
int cmd_merge(int argc, char **argv);
int cmd_record(int argc, char **argv);
int cmd_agent(int argc, char **argv);
int cmd_fleet(int argc, char **argv);

#endif
