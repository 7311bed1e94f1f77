// SPDX-License-Identifier: MIT
/*
 * ringpipe: the command-line front end.
 */
#include <stdio.h>
#include <string.h>

#include "cmds.h"
#include "ringpipe/ringpipe.h"
#include "session/session.h"

static const char usage[] =
"usage: ringpipe <command> [options]\n"
"\n"
"commands:\n"
"  report FILE [--json]     summarize a nettrace file: duration, events per provider,\n"
"                           event and thread, EventsLost, stacks, heaviest events\n"
"  dump FILE                print every event as one JSON line (the canonical dump\n"
"                           that the interop tests compare with TraceEvent's)\n"
"  gen -o FILE [options]    write a synthetic trace (every field type, threads,\n"
"                           stacks, activity ids, sequence gaps); see 'ringpipe gen --help'\n"
"  stress -o FILE [options] load a live session from T threads, print written/dropped\n"
"                           as JSON; see 'ringpipe stress --help'\n"
"  ps [-v]                  list processes with a diagnostic socket (.NET runtimes\n"
"                           and programs running ringpipe's IPC server)\n"
"  collect -p PID [options] record a trace through the diagnostics IPC protocol\n"
"  collect [options] -- CMD start CMD suspended and trace it from its first event;\n"
"                           see 'ringpipe collect --help'\n"
"  stop -p PID --session ID stop a tracing session\n"
"  record [-p PID|-a] -o FILE [--usdt python|jvm|BIN:PROV:PROBE] [--kernel exec,sched]\n"
"                           record runtime USDT probes and kernel events through BPF\n"
"                           (-- CMD to launch and trace); see 'ringpipe record --help'\n"
"  gcdump report FILE       rebuild the heap graph of a trace's heap snapshot\n"
"  gcdump collect -p PID    take a heap snapshot of a process, then report it\n"
"  sample [-p PID|-a] -o FILE  CPU sampling with BPF (kernel and user stacks)\n"
"                           into a nettrace file; see 'ringpipe sample --help'\n"
"  convert --to speedscope|chrome|text FILE [-o OUT]\n"
"                           samples and spans for speedscope, Perfetto, or as\n"
"                           'perf script'-like text, symbolized\n"
"  merge -o OUT FILE|DIR... nettrace files (a directory: its *.nettrace) into one V6\n"
"                           file, every event under its own pid, in time order\n"
"  agent [options]          the host agent: libringpipe processes join over its socket,\n"
"                           .NET processes are traced, containers are tagged; 'ringpipe\n"
"                           agent status' shows what it sees; see 'ringpipe agent --help'\n"
"\n"
"  --help, -h               this text\n"
"  --version                print the version\n"
"\n"
"Exit status: 0 on success, 1 when the input was bad or an operation failed,\n"
"2 on a usage error. See ringpipe(1).\n";

int main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : NULL;

	/* the tool reads and records traces; it is not a program to trace */
	rp_agent_join_disable();
	if (!cmd || !strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
		fputs(usage, cmd ? stdout : stderr);
		return cmd ? 0 : 2;
	}
	if (!strcmp(cmd, "--version")) {
		printf("ringpipe %s\n", rp_version());
		return 0;
	}
	if (!strcmp(cmd, "report"))
		return cmd_report(argc - 1, argv + 1);
	if (!strcmp(cmd, "dump"))
		return cmd_dump(argc - 1, argv + 1);
	if (!strcmp(cmd, "gen"))
		return cmd_gen(argc - 1, argv + 1);
	if (!strcmp(cmd, "stress"))
		return cmd_stress(argc - 1, argv + 1);
	if (!strcmp(cmd, "ps"))
		return cmd_ps(argc - 1, argv + 1);
	if (!strcmp(cmd, "collect"))
		return cmd_collect(argc - 1, argv + 1);
	if (!strcmp(cmd, "stop"))
		return cmd_stop(argc - 1, argv + 1);
	if (!strcmp(cmd, "record"))
		return cmd_record(argc - 1, argv + 1);
	if (!strcmp(cmd, "gcdump"))
		return cmd_gcdump(argc - 1, argv + 1);
	if (!strcmp(cmd, "sample"))
		return cmd_sample(argc - 1, argv + 1);
	if (!strcmp(cmd, "convert"))
		return cmd_convert(argc - 1, argv + 1);
	if (!strcmp(cmd, "merge"))
		return cmd_merge(argc - 1, argv + 1);
	if (!strcmp(cmd, "agent"))
		return cmd_agent(argc - 1, argv + 1);
	if (!strcmp(cmd, "fleet"))
		return cmd_fleet(argc - 1, argv + 1);
	fprintf(stderr, "ringpipe: unknown command '%s'\n\n%s", cmd, usage);
	return 2;
}
