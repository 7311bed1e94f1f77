// SPDX-License-Identifier: MIT
/*
 * ringpipe collect: record a trace from a process through its diagnostics
 * IPC socket, the way dotnet-trace does, and check the result with
 * ringpipe's reader. The options become a struct collect_opts; the engine
 * (lib/collect.c) does the rest.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "cmds.h"
#include "collect.h"
#include "config.h"
#include "tool_util.h"

static const char collect_usage[] =
"usage: ringpipe collect -p PID [options]\n"
"       ringpipe collect [options] -- CMD [ARGS...]\n"
"\n"
"Records a nettrace file from a .NET process or a program running ringpipe's\n"
"IPC server, through its diagnostic socket (what dotnet-trace collect does).\n"
"With -- CMD, starts CMD suspended with DOTNET_DiagnosticPorts pointing at a\n"
"socket of ours, so it is traced from its first event; the trace ends when it\n"
"exits. Ctrl-C (SIGINT, SIGTERM) or the end of --duration stops the session\n"
"cleanly; signals within a second of the first are the same request, and a\n"
"later Ctrl-C abandons the rest of the stream, saying so. A target stopped\n"
"(SIGSTOP) for 3 s while it should answer is given up on. The file is then\n"
"read back and a summary printed: events per provider and EventsLost.\n"
"\n"
"options:\n"
"  -p, --process-id PID       the process to trace\n"
"  --providers SPEC           Name[:Keywords[:Level[:key=value;...]]],...\n"
"                             Keywords omitted: all (0xFFFFFFFFFFFFFFFF is sent)\n"
"                             Keywords 0: a .NET runtime enables only the\n"
"                             events without keywords, ringpipe's server all\n"
"                             Level omitted: 4 (Informational)\n"
"                             default: Microsoft-Windows-DotNETRuntime:0x100003801D:4,\n"
"                             Microsoft-DotNETCore-SampleProfiler:0xF00000000000:4\n"
"  --buffering-mode drop|block  drop (default, CollectTracing2) or block\n"
"                             (non-lossy, CollectTracing6: .NET 11+ or ringpipe)\n"
"  --duration TIME            SECONDS[.FRACTION], a number with a unit (ns, us,\n"
"                             ms, s, m, h: 500ms, 2m), HH:MM:SS or DD:HH:MM:SS\n"
"  --format v5                nettrace V5 (the only format the runtime streams)\n"
"  --buffer-mb N              the runtime's buffer, 1..1048576 MB (default 256)\n"
"  --no-rundown               no rundown events at the end\n"
"  -o, --output FILE          default: NAME_PID_YYYYMMDD_HHMMSS.nettrace, NAME\n"
"                             the program's (for `dotnet App.dll`: App)\n"
"  --force                    overwrite FILE if it exists (else an error)\n"
"  --allow-loss               exit 0 even when events were lost\n"
"\n"
"Exit status: 0 on success; 1 when the session failed, the trace does not read\n"
"back, or events were lost (EventsLost > 0) without --allow-loss; 2 on a usage\n"
"error. With -- CMD, when the trace is good and CMD exited by itself, CMD's\n"
"exit status (128 + N when signal N killed it), as dotnet-trace does.\n";

/* Parses argv into o; 0, or the exit status (0 for --help, 2). */
static int parse_args(int argc, char **argv, struct collect_opts *o, bool *help)
{
	int i;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			*help = true;
			return 0;
		}
		if (!strcmp(a, "--")) {
			if (i + 1 >= argc)
				return tool_err("collect", "'--' must be followed by a command to run"), 2;
			o->cmd = argv + i + 1;
			break;
		}
		if (!strcmp(a, "--allow-loss")) {
			o->allow_loss = true;
			continue;
		}
		if (!strcmp(a, "--force")) {
			o->force = true;
			continue;
		}
		if (!strcmp(a, "--no-rundown")) {
			o->rundown = false;
			continue;
		}
		if (strcmp(a, "-p") && strcmp(a, "--process-id") && strcmp(a, "--providers") &&
		    strcmp(a, "--buffering-mode") && strcmp(a, "--duration") &&
		    strcmp(a, "--format") && strcmp(a, "-o") && strcmp(a, "--output") &&
		    strcmp(a, "--buffer-mb"))
			return tool_err("collect", "unknown option '%s' (see --help)", a), 2;
		if (!v)
			return tool_err("collect", "option '%s' needs a value (see --help)", a), 2;
		i++;
		if (!strcmp(a, "-p") || !strcmp(a, "--process-id")) {
			int rc = tool_parse_pid("collect", v, &o->pid);

			if (rc)
				return rc;
		} else if (!strcmp(a, "--providers")) {
			if (!*v)
				return tool_err("collect", "--providers needs a provider list"), 2;
			o->providers = v;
		} else if (!strcmp(a, "--buffering-mode")) {
			if (rp_buffering_parse(v, &o->buffering))
				return tool_err("collect", "--buffering-mode must be drop or block, not '%s'",
						v), 2;
		} else if (!strcmp(a, "--duration")) {
			if (tool_parse_duration(v, UINT64_MAX, &o->duration_ns))
				return tool_err("collect", "--duration takes a time > 0: SECONDS, a "
						"number with a unit (500ms, 2m, 1h), HH:MM:SS or "
						"DD:HH:MM:SS, not '%s'", v), 2;
		} else if (!strcmp(a, "--format")) {
			if (strcmp(v, "v5") && strcmp(v, "V5") && strcasecmp(v, "nettrace"))
				return tool_err("collect", "--format must be v5 (the runtime streams "
						"nettrace V5 only), not '%s'", v), 2;
		} else if (!strcmp(a, "--buffer-mb")) {
			uint64_t n;

			if (tool_parse_u64(v, UINT64_MAX, &n) || !n || n > COLLECT_MAX_BUFFER_MB)
				return tool_err("collect", "--buffer-mb must be between 1 and %u, not '%s'",
						COLLECT_MAX_BUFFER_MB, v), 2;
			o->buffer_mb = (uint32_t)n;
		} else {
			if (!*v)
				return tool_err("collect", "-o needs a file name"), 2;
			o->out = v;
		}
	}
	if (o->pid && o->cmd)
		return tool_err("collect", "give either -p PID or -- CMD, not both"), 2;
	if (!o->pid && !o->cmd)
		return tool_err("collect", "-p PID or -- CMD is required (see --help)"), 2;
	return 0;
}

int cmd_collect(int argc, char **argv)
{
	struct collect_opts o = { .buffering = RP_BUFFERING_DROP, .rundown = true,
				  .buffer_mb = COLLECT_DEFAULT_BUFFER_MB };
	bool help = false;
	int rc = parse_args(argc, argv, &o, &help);

	if (rc)
		return rc;
	if (help) {
		fputs(collect_usage, stdout);
		return 0;
	}
	return collect_run(&o);
}
