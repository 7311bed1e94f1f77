/* SPDX-License-Identifier: MIT */
/*
 * The host agent's .NET streams (`ringpipe agent --dotnet`): every .NET
 * process on the host, in a container or not, traced through its
 * diagnostics socket, each into a nettrace V6 file whose every event
 * carries the process's host pid.
 *
 * A scanner thread looks through /proc every scan_ms (and at once for a
 * poked pid) for processes with a dotnet-diagnostic socket, reached
 * through /proc/<pid>/root and named after the pid the process has in
 * its own namespace (ipcc_find_socket()). Each process found gets a
 * thread of its own: CollectTracing2 (or 6 for Block), ResumeRuntime (a
 * runtime started with DOTNET_DefaultDiagnosticPortSuspend=1 waits for it,
 * as for dotnet-trace), and the stream copied into
 *   <out_dir>/.dotnet-<hostpid>-<start_time>.part
 * (the raw stream: V5, carrying the pid inside the container). When the
 * stream ends (the process exited, or agent_dotnet_stop() stopped the
 * session), the part is read back and written as
 *   <out_dir>/dotnet-<comm>-<hostpid>-<start_time>.nettrace
 * in V6 with every event's pid the host pid (retrace.h), and removed. A
 * stream cut short keeps every whole block's events. A second trace of the
 * same process (it exec'ed another runtime, or a file of that name exists
 * already) adds "-<n>" before the suffix.
 *
 * Processes are keyed by (host pid, start time): a reused pid is a new
 * process. A process whose session cannot start is tried again after
 * AGENT_DN_RETRY_MS, then less and less often (up to a minute); a stopped
 * one (SIGSTOP, a debugger) when it runs again. Every IPC wait is bounded,
 * and one process's runtime that never answers holds only its own thread.
 */
#ifndef RINGPIPE_AGENT_DOTNET_H
#define RINGPIPE_AGENT_DOTNET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AGENT_DN_RETRY_MS 5000u
/* How long agent_dotnet_stop() waits for the streams to end after
 * StopTracing (the runtime writes rundown first) */
#define AGENT_DN_STOP_WAIT_MS 5000u

struct agent_dotnet_opts {
	size_t sz;			/* sizeof(struct agent_dotnet_opts) */
	/* "Name[:Keywords[:Level[:args]]],..."; NULL: collect.h's
	 * COLLECT_DEFAULT_PROVIDERS. As for collect, an entry without
	 * keywords asks for all of them, without a level for 4. */
	const char *providers;
	/* RP_BUFFERING_DROP or RP_BUFFERING_BLOCK; a runtime that refuses
	 * Block (no CollectTracing6: .NET 10 and older) is asked again in
	 * Drop, with a warning */
	int buffering;
	uint32_t buffer_mb;		/* the runtime's buffer; 0: 256 */
	const char *out_dir;		/* where the files go (must exist) */
	uint32_t scan_ms;		/* /proc rescan period; 0: 1000 */
	/* Progress and problems, one line per call, from any of the
	 * agent's threads (one call at a time); NULL: stderr, with
	 * "ringpipe agent: " before it */
	void (*log)(void *ctx, const char *msg);
	void *log_ctx;
	/* Which processes to trace (host pid); NULL: every one but ours.
	 * Asked before anything else is read of the process. */
	bool (*filter)(void *ctx, uint32_t host_pid);
	void *filter_ctx;
};
#define AGENT_DOTNET_OPTS_LAST_FIELD filter_ctx

enum agent_dn_state {
	AGENT_DN_STARTING,	/* found; the session is being started */
	AGENT_DN_TRACING,	/* the stream is being copied into the .part file */
	AGENT_DN_ENDED,		/* the stream ended (the process exited, or stop) */
	AGENT_DN_FAILED,	/* no session (tried again after AGENT_DN_RETRY_MS
				 * while the process lives), or no file */
};

struct agent_dotnet;

/* Starts the scanner thread; NULL with errno set (EINVAL for bad options,
 * after a message through log). */
struct agent_dotnet *agent_dotnet_start(const struct agent_dotnet_opts *o);

/* A process exec'ed: look at it now, and for a few seconds while its
 * runtime starts (the scanner would find it within scan_ms anyway). */
void agent_dotnet_poke(struct agent_dotnet *a, uint32_t host_pid);

struct agent_dotnet_proc {
	uint32_t pid;			/* host pid */
	uint32_t inner_pid;		/* innermost NSpid: the one in its socket's name */
	uint64_t start_time;		/* /proc/PID/stat field 22 */
	char comm[17];
	/* the path used, e.g. /proc/123/root/tmp/dotnet-diagnostic-1-4567-socket */
	char socket[108];
	char file[256];			/* the .part file while tracing, then the final V6 file */
	uint64_t bytes;			/* stream bytes received */
	uint64_t events;		/* events in the final file (0 until it is written) */
	int64_t lost;			/* EventsLost of the stream as read back (0 until
					 * written) */
	int state;			/* enum agent_dn_state */
	char error[128];		/* why FAILED; for ENDED, what was noted (a stream
					 * cut short) */
	uint32_t attempts;		/* sessions tried */
	int buffering;			/* what the session runs with (after a Block fallback) */
};

/* A snapshot of up to max processes, in the order they were found;
 * returns how many are known (may exceed max). */
size_t agent_dotnet_list(struct agent_dotnet *a, struct agent_dotnet_proc *out, size_t max);

/*
 * Stops the scanner, sends StopTracing to every live session, waits (at
 * most AGENT_DN_STOP_WAIT_MS) for their streams to end, finishes every
 * file, joins the threads and frees a (NULL: nothing). 0, or the first
 * problem as a negative errno (-ETIMEDOUT: a stream did not end in time and
 * its file holds what had arrived; -EIO: a file could not be written), each
 * also said through log. A session thread that is still in its IPC two
 * seconds past that (blocked in a connect() to a runtime whose listen queue
 * is full, which nothing can interrupt) is left behind, with a message and
 * -ETIMEDOUT, and a is then not freed, since that thread still uses it.
 */
int agent_dotnet_stop(struct agent_dotnet *a);

/* The same, but for the freeing: the list stays for agent_dotnet_list(),
 * every entry in its last state (a session that was stopped has its
 * file), until agent_dotnet_stop(), which then only frees (and returns
 * this call's result). */
int agent_dotnet_finish(struct agent_dotnet *a);

#endif /* RINGPIPE_AGENT_DOTNET_H */
