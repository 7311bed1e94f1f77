/* SPDX-License-Identifier: MIT */
/*
 * Writing an event on behalf of another thread (internal, not exported).
 *
 * The BPF bridge of `ringpipe record` turns records captured in the kernel
 * (a USDT hit in a Python process, a fork) into ringpipe events. Those events
 * belong to the thread and the moment of the hit, not to the bridge thread
 * that writes them, so the record carries the origin's timestamp, thread id,
 * CPU and a sequence number the caller keeps for that thread.
 *
 * Sequence numbers: TraceEvent counts EventsLost per capture thread from gaps,
 * so an origin thread needs its own numbering, one step per write attempt
 * (captured or dropped). The caller owns it; an origin tid must not also
 * write through the ordinary path in the same session (the bridge never
 * captures its own process for that reason).
 *
 * Timestamps: ticks of the library's clock (user/core/clock.h); convert
 * bpf_ktime_get_ns() values with rp_clock_from_mono_ns_at(). The drainer
 * assumes a record is younger than its last look at the ring; an origin
 * record can be older by the time it took to reach the writer, and if a
 * younger record was already serialized it is written as late (its
 * timestamp raised to the last one written, counted in late_events). The
 * bridge keeps that window small by consuming the BPF ring buffer promptly.
 */
#ifndef RINGPIPE_WRITE_ORIGIN_H
#define RINGPIPE_WRITE_ORIGIN_H

#include <stdint.h>
#include <sys/uio.h>

#include "ringpipe/ringpipe.h"

struct rp_write_origin {
	uint64_t ts;		/* rp_clock ticks */
	uint32_t tid;		/* OS thread id the event belongs to */
	uint32_t pid;		/* its process, when not the trace's; 0: the trace's */
	uint32_t seq;		/* that thread's attempt number, >= 2, +1 per attempt */
	uint32_t cpu;
};

/* opts: NULL, or the usual write options (a given stack: CPU samples). */
int rp_event_write_origin(struct rp_event *ev, const struct iovec *iov, int iovcnt,
			  const struct rp_write_origin *origin, const struct rp_write_opts *opts);

#endif /* RINGPIPE_WRITE_ORIGIN_H */
