// SPDX-License-Identifier: MIT
/*
 * ringpipe collect: record a trace from a process through its diagnostics
 * IPC socket, the way dotnet-trace does, and check the result with
 * ringpipe's reader. The options become a struct collect_opts; the engine
 * (capture/collect.c) does the rest.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "cmds.h"
#include "capture/collect.h"
#include "session/config.h"
#include "common/tool_opts.h"
#include "common/tool_util.h"

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
"read back and a summary printed: events per provider and EventsLost.\n";

static const char collect_usage_end[] =
"Exit status: 0 on success; 1 when the session failed, the trace does not read\n"
"back, or events were lost (EventsLost > 0) without --allow-loss; 2 on a usage\n"
"error. With -- CMD, when the trace is good and CMD exited by itself, CMD's\n"
"exit status (128 + N when signal N killed it), as dotnet-trace does.\n";

enum { COLLECT_BUFFERING = 1, COLLECT_FORMAT };

struct collect_cfg {
	struct collect_opts o;
	bool no_rundown;
};

#define COLLECT(m) struct collect_cfg, o.m

static const struct tool_opt collect_opts[] = {
	TOOL_UINT("process-id", 'p', "PID", 1, INT32_MAX, COLLECT(pid), "the process to trace",
		  .bad = "takes a process id (a whole number > 0)"),
	TOOL_STRING("providers", 0, "SPEC", COLLECT(providers),
		    "Name[:Keywords[:Level[:key=value;...]]],...\n"
		    "Keywords omitted: all (0xFFFFFFFFFFFFFFFF is sent)\n"
		    "Keywords 0: a .NET runtime enables only the\n"
		    "events without keywords, ringpipe's server all\n"
		    "Level omitted: 4 (Informational)\n"
		    "default: Microsoft-Windows-DotNETRuntime:0x100003801D:4,\n"
		    "Microsoft-DotNETCore-SampleProfiler:0xF00000000000:4", .nonempty = true),
	TOOL_TAKE(TOOL_OPT_STRING, "buffering-mode", 0, "drop|block", COLLECT_BUFFERING,
		  "drop (default, CollectTracing2) or block\n"
		  "(non-lossy, CollectTracing6: .NET 11+ or ringpipe)"),
	TOOL_DURATION("duration", 0, "TIME", 1, UINT64_MAX, COLLECT(duration_ns),
		      "SECONDS[.FRACTION], a number with a unit (ns, us,\n"
		      "ms, s, m, h: 500ms, 2m), HH:MM:SS or DD:HH:MM:SS"),
	TOOL_TAKE(TOOL_OPT_STRING, "format", 0, "v5", COLLECT_FORMAT,
		  "nettrace V5 (the only format the runtime streams)"),
	TOOL_UINT("buffer-mb", 0, "N", 1, COLLECT_MAX_BUFFER_MB, COLLECT(buffer_mb),
		  "the runtime's buffer, 1..1048576 MB (default 256)"),
	TOOL_FLAG("no-rundown", 0, struct collect_cfg, no_rundown, "no rundown events at the end"),
	TOOL_STRING("output", 'o', "FILE", COLLECT(out),
		    "default: NAME_PID_YYYYMMDD_HHMMSS.nettrace, NAME\n"
		    "the program's (for `dotnet App.dll`: App)", .nonempty = true),
	TOOL_FLAG("force", 0, COLLECT(force), "overwrite FILE if it exists (else an error)"),
	TOOL_FLAG("allow-loss", 0, COLLECT(allow_loss), "exit 0 even when events were lost"),
	TOOL_OPTS_END
};

static int collect_take(void *cfg, const struct tool_opt *opt, char *v, uint64_t num)
{
	struct collect_cfg *c = cfg;

	if (opt->id == COLLECT_BUFFERING && rp_buffering_parse(v, &c->o.buffering))
		return tool_err("collect", "--buffering-mode must be drop or block, not '%s'",
				v), 2;
	if (opt->id == COLLECT_FORMAT && strcmp(v, "v5") && strcmp(v, "V5") &&
	    strcasecmp(v, "nettrace"))
		return tool_err("collect", "--format must be v5 (the runtime streams nettrace V5 "
				"only), not '%s'", v), 2;
	return 0;
}

static const struct tool_cmd collect_cmd = {
	.name = "collect", .usage = collect_usage, .usage_end = collect_usage_end,
	.opts = collect_opts, .take = collect_take, .cmdline = true,
};

/* Parses argv into c; TOOL_OPTS_RUN, or the exit status. */
static int parse_args(int argc, char **argv, struct collect_cfg *c)
{
	struct collect_opts *o = &c->o;
	struct tool_args rest;
	int rc = tool_opts_parse(&collect_cmd, argc, argv, c, &rest);

	if (rc != TOOL_OPTS_RUN)
		return rc;
	if (rest.dashdash && !rest.argc)
		return tool_err("collect", "'--' must be followed by a command to run"), 2;
	o->cmd = rest.argc ? rest.argv : NULL;
	o->rundown = !c->no_rundown;
	if (o->pid && o->cmd)
		return tool_err("collect", "give either -p PID or -- CMD, not both"), 2;
	if (!o->pid && !o->cmd)
		return tool_err("collect", "-p PID or -- CMD is required (see --help)"), 2;
	return TOOL_OPTS_RUN;
}

int cmd_collect(int argc, char **argv)
{
	struct collect_cfg c = { .o = { .buffering = RP_BUFFERING_DROP,
					.buffer_mb = COLLECT_DEFAULT_BUFFER_MB } };
	int rc = parse_args(argc, argv, &c);

	if (rc != TOOL_OPTS_RUN)
		return rc;
	return collect_run(&c.o);
}
