/* SPDX-License-Identifier: MIT */
/*
 * The collect engine behind 'ringpipe collect' and 'ringpipe gcdump
 * collect' (and the host agent's .NET streams): a nettrace file recorded
 * from a process through its diagnostics IPC socket, as dotnet-trace
 * records it, from a process that runs (attach) or from a command started
 * for it (launch: traced from its first event), then read back.
 */
#ifndef RINGPIPE_TOOL_COLLECT_H
#define RINGPIPE_TOOL_COLLECT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define COLLECT_MAX_BUFFER_MB 1048576u
#define COLLECT_DEFAULT_BUFFER_MB 256u
/* dotnet-trace's default profile */
#define COLLECT_DEFAULT_PROVIDERS                               \
	"Microsoft-Windows-DotNETRuntime:0x100003801D:4,"       \
	"Microsoft-DotNETCore-SampleProfiler:0xF00000000000:4"

/* Asked at most once a second while the trace grows, with the file being
 * written (open write-only): true stops the session, as the duration's end
 * would. */
typedef bool (*collect_done_fn)(int trace_fd, void *ctx);

struct collect_opts {
	pid_t pid;		/* attach to this process, or */
	char **cmd;		/* start this command (argv, NULL-terminated) */
	/* Name[:Keywords[:Level[:args]]],...; NULL: COLLECT_DEFAULT_PROVIDERS.
	 * An entry without a level gets 4 (Informational), as dotnet-trace. */
	const char *providers;
	int buffering;		/* RP_BUFFERING_DROP (CollectTracing2) or BLOCK (6) */
	uint32_t buffer_mb;	/* the runtime's buffer, 1..COLLECT_MAX_BUFFER_MB */
	bool rundown;		/* rundown events at the end */
	uint64_t duration_ns;	/* stop after this long; 0: at the stream's end */
	/* NULL: NAME_PID_YYYYMMDD_HHMMSS.nettrace (tool_output_name()) */
	const char *out;
	bool force;		/* overwrite an existing regular file */
	bool allow_loss;	/* succeed even when events were lost */
	/* A runtime that refuses Block (no CollectTracing6: .NET 10 and older)
	 * is asked again in Drop, with a warning, as dotnet-gcdump does. */
	bool block_fallback;
	/* The command that messages name ("ringpipe <tool>: ..."); NULL: collect */
	const char *tool;
	collect_done_fn done;	/* NULL: never done early */
	void *done_ctx;
};

/*
 * One whole collection: checks the options (bad providers or buffer size:
 * a usage error), starts the session, copies its stream to the file until
 * the duration ends, done() says so, the process ends the stream, or
 * SIGINT/SIGTERM arrives, then reads the file back and prints a summary on
 * stdout: events per provider, EventsLost. Signals that arrive within
 * COLLECT_SIGNAL_WINDOW_MS of the first are the same request (timeout(1)
 * and a terminal signal both the process and its group); a later one
 * abandons the rest of the stream, saying so. A target that stays stopped
 * (SIGSTOP) for COLLECT_STOPPED_MS while we wait for its answer is given
 * up on, with a message. Progress and errors go to stderr as "ringpipe
 * <tool>: ...". Returns an exit status: 0; 1 when the session failed, the
 * trace does not read back, or events were lost without allow_loss; 2 for
 * bad options. In launch mode, when all that went well and CMD exited by
 * itself, CMD's status instead (128 + N when signal N ended it).
 */
#define COLLECT_SIGNAL_WINDOW_MS 1000u
#define COLLECT_STOPPED_MS 3000u

int collect_run(const struct collect_opts *o);

struct rp_provider_config;
/*
 * A .NET session's providers as dotnet-trace spells them: SPEC (NULL:
 * COLLECT_DEFAULT_PROVIDERS) parsed, an entry without keywords asking for
 * all of them, one without a level for Informational. 0, or -EINVAL with a
 * message in err; free with rp_providers_free().
 */
int collect_dotnet_providers(const char *spec, struct rp_provider_config **out, uint32_t *n,
			     char *err, size_t errlen);

#endif
