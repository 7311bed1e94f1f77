/* SPDX-License-Identifier: MIT */
/*
 * Kernel-assisted capture for `ringpipe record`: loads bpf/capture.bpf.c,
 * attaches it to runtime USDT probes and scheduler tracepoints, and turns
 * each record of its BPF ring buffer into an event of a ringpipe provider
 * (Documentation/kernel.md lists them), written into whatever session
 * enables those providers. Lives in the tool, not in libringpipe, so the
 * producer library does not depend on libbpf.
 */
#ifndef RINGPIPE_TOOL_BPF_CAPTURE_H
#define RINGPIPE_TOOL_BPF_CAPTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ringpipe/ringpipe.h"

#define RP_CAP_PROVIDER_PYTHON "Ringpipe-Usdt-CPython"
#define RP_CAP_PROVIDER_JVM "Ringpipe-Usdt-HotSpot"
#define RP_CAP_PROVIDER_KERNEL "Ringpipe-Kernel"
#define RP_CAP_PROVIDER_USDT_PREFIX "Ringpipe-Usdt-"	/* + the probe's provider */

struct rp_capture_opts {
	size_t sz;			/* sizeof(struct rp_capture_opts) */
	pid_t pid;			/* > 0: that process (and its children); 0: every process */
	bool python;			/* CPython gc__start / gc__done */
	bool jvm;			/* HotSpot GC, pools, classes, compiles, threads */
	const char *python_path;	/* NULL: /proc/PID/exe, or /usr/bin/python3.11 */
	const char *jvm_path;		/* NULL: libjvm.so from /proc/PID/maps or the default JDK */
	const char *const *usdt;	/* "BINARY:PROVIDER:PROBE" specs */
	size_t nusdt;
	bool kernel_proc;		/* exec, fork, exit */
	bool kernel_sched;		/* sched_switch */
	uint32_t ringbuf_bytes;		/* BPF ring buffer; 0: 8 MiB */
	uint32_t poll_ms;		/* ring_buffer__poll timeout; 0: 5 */
	/* the session whose drainer must wait for BPF events before merging
	 * past them (see "Clock alignment" in Documentation/kernel.md) */
	struct rp_session *session;
	/* NULL, or told (on the consumer thread, once per process id until
	 * forgotten: see SEEN_PIDS_MAX) of each process an event written is
	 * about, so that a process seen only here can be named */
	void (*seen_pid)(void *ctx, uint32_t pid);
	void *seen_pid_ctx;
};

/*
 * The options `record` and `agent` share, as users spell them: --usdt
 * "python,jvm,BINARY:PROVIDER:PROBE,..." (specs point into list, which is
 * cut up; at most max of them in usdt[], their count in o->nusdt) and
 * --kernel "exec,sched". 0, or -EINVAL with a message in err.
 */
int rp_capture_parse_usdt(struct rp_capture_opts *o, char *list, const char **usdt, size_t max,
			  char *err, size_t errlen);
int rp_capture_parse_kernel(struct rp_capture_opts *o, char *list, char *err, size_t errlen);

struct rp_capture_stats {
	uint64_t records;		/* consumed from the BPF ring buffer */
	uint64_t written;		/* written into the session(s) */
	uint64_t write_drops;		/* a session's ring was full (EventsLost) */
	uint64_t kernel_drops;		/* the BPF ring buffer was full */
	uint64_t bad;			/* malformed records skipped */
	uint64_t cgroups;		/* CgroupMap events written */
};

struct rp_capture;

/*
 * Defines the capture providers and their events (once per process) and,
 * for --usdt specs, one event per probe. Call before starting the session
 * that enables them. Returns 0 or a negative errno with a message in err.
 */
int rp_capture_define(const struct rp_capture_opts *o, char *err, size_t errlen);

/* Provider names rp_capture_define() created for these options; returns how
 * many were stored (at most max). */
size_t rp_capture_provider_names(const struct rp_capture_opts *o, const char **names,
				 size_t max);

/*
 * 0 when this process may load BPF programs and attach probes; otherwise
 * -EPERM with the missing capability named in msg.
 */
int rp_capture_check_privilege(char *msg, size_t len);

/* Loads and attaches; NULL with the reason in err. Events flow once
 * rp_capture_start() runs the consumer thread. */
struct rp_capture *rp_capture_open(const struct rp_capture_opts *o, char *err, size_t errlen);
int rp_capture_start(struct rp_capture *c);
/* Detaches every probe, consumes what the ring buffer still holds, stops
 * the consumer thread. The session may be stopped afterwards. */
void rp_capture_stop(struct rp_capture *c);
void rp_capture_close(struct rp_capture *c);
void rp_capture_stats(struct rp_capture *c, struct rp_capture_stats *st);
/* Adds a process to follow (with -- CMD: the child, before it execs). */
int rp_capture_track(struct rp_capture *c, pid_t pid);
/* Number of probe/tracepoint links attached. */
size_t rp_capture_nlinks(const struct rp_capture *c);

/*
 * Another BPF source (the CPU sampler) drained by the consumer thread on
 * every pass, under the same horizon, so its events are never late either:
 * poll(ctx) delivers what is queued without waiting. rp_capture_stop()
 * calls quiesce(ctx) (may be NULL) from its own thread before the
 * consumer's last pass: the source stops producing, keeping what it queued
 * for that pass. At most 4; add them before rp_capture_start().
 */
typedef int (*rp_capture_source_fn)(void *ctx);
int rp_capture_add_source(struct rp_capture *c, rp_capture_source_fn poll,
			  rp_capture_source_fn quiesce, void *ctx);
/*
 * On the consumer thread (inside a source's poll) only: the origin of an
 * event captured by thread tid on cpu at ts_ns (CLOCK_MONOTONIC), with that
 * thread's next sequence number, shared with the probes' events so
 * TraceEvent's per-thread loss count stays exact. 0, or -ENOMEM.
 */
struct rp_write_origin;
/*
 * On the consumer thread (or after rp_capture_stop()): queues an event of
 * origin thread tid for the end of the pass, where the pass's events are
 * sorted by time, numbered and written (see struct pending). The payload
 * and stack are copied. written/drops are the caller's counters, bumped
 * atomically as the event is written or lost.
 */
int rp_capture_queue(struct rp_capture *c, struct rp_event *ev, uint64_t ts_ns, uint32_t pid,
		     uint32_t tid, uint32_t cpu, const void *payload, uint32_t len,
		     const uint64_t *stack, uint32_t nstack, uint64_t *written, uint64_t *drops);
/* Writes what is queued (the consumer does at the end of each pass). */
void rp_capture_flush(struct rp_capture *c);
int rp_capture_origin(struct rp_capture *c, uint64_t ts_ns, uint32_t pid, uint32_t tid,
		      uint32_t cpu, struct rp_write_origin *org);

#endif
