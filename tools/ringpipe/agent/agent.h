/* SPDX-License-Identifier: MIT */
/*
 * The host agent behind `ringpipe agent` (Documentation/agent.md): one
 * configuration for the host; libringpipe processes join over its socket
 * and hand their rings over, and it drains each of them to a nettrace V6
 * file of its own on the process's host pid; .NET processes are traced
 * through their diagnostics sockets (dotnet.h); its own trace carries one
 * Ringpipe-Agent/Process event per process, a ProcessEnd when it is gone
 * and a Container event per container.
 */
#ifndef RINGPIPE_TOOL_AGENT_H
#define RINGPIPE_TOOL_AGENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/bytebuf.h"

struct agent_opts {
	size_t sz;			/* sizeof(struct agent_opts) */
	const char *providers;		/* what joined processes collect; NULL: none */
	int buffering;			/* RP_BUFFERING_DROP or RP_BUFFERING_BLOCK */
	uint64_t buffer_bytes;		/* per process; 0: the library's default */
	uint32_t block_timeout_ms;	/* Block: the bound on one write's wait in
					 * every process; 0: none (it waits while
					 * the agent lives) */
	const char *out_dir;		/* created if missing */
	const char *socket_path;	/* NULL: RP_AGENT_DEFAULT_SOCKET */
	bool dotnet;			/* also trace every .NET process */
	const char *dotnet_providers;	/* NULL: dotnet-trace's default profile */
	uint32_t scan_ms;		/* .NET discovery period; 0: 1000 */
	bool quiet;			/* no progress lines on stderr */
	/* kernel events and USDT probes of every process (bpf_capture.h;
	 * pid 0), into the agent's own trace; NULL: none */
	const struct rp_capture_opts *capture;
	uint32_t sample_hz;		/* CPU samples of every process; 0: none */
	/* rotation of the processes' files and the agent's trace (not of the
	 * .NET files, written whole when their stream ends): a file goes on
	 * in NAME.N.nettrace once it holds rotate_bytes, and every file at
	 * the end of each rotate_s period; 0: never */
	uint64_t rotate_bytes;
	uint32_t rotate_s;
	/* also every trace of a period (rotate_s; without it, of the whole
	 * run) merged into one multi-process file, AGENT_MERGED_PREFIX
	 * PID_DATE[.N].nettrace, once the period's files are finished */
	bool merge;
	/* also ship every finished file to ClickHouse (egress.h); NULL: no */
	const struct egress_opts *egress;
	/* and, beside or instead, to an OTLP receiver (egress.h with
	 * otlp_url); NULL: no */
	const struct egress_opts *otlp;
};

struct rp_capture_opts;
struct egress_opts;

struct agent;

/* Binds the socket and starts serving; NULL with a message on stderr. */
struct agent *agent_start(const struct agent_opts *o);
/* Asks every process to end its session, drains and finishes every file,
 * then frees. 0, or 1 when an output failed. */
int agent_stop(struct agent *a);

/* `ringpipe agent status`: asks the agent at socket_path; the answer (text,
 * or JSON) goes to out. 0, or a negative errno. */
int agent_status_query(const char *socket_path, bool json, struct bytebuf *out);

#endif
