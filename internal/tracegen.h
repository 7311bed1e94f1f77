/* SPDX-License-Identifier: MIT */
/*
 * Synthetic trace generator. Writes, through the nettrace writer, a trace
 * that exercises every field type, several threads (and in V6 several
 * processes), stacks, activity ids, opcodes, sequence points and deliberate
 * sequence gaps, and reports what it wrote so a reader's output can be
 * checked against it. Used by `ringpipe gen`, the tests and the benchmarks.
 */
#ifndef RINGPIPE_TRACEGEN_H
#define RINGPIPE_TRACEGEN_H

#include <stdint.h>

#include "nettrace/nettrace.h"

struct tracegen_opts {
	int format;		/* NT_FORMAT_V5 or NT_FORMAT_V6 */
	uint64_t events;	/* events to write */
	uint32_t threads;	/* capture threads (>= 1) */
	uint32_t gap_every;	/* per thread: skip a sequence number every N events (0: never) */
	uint32_t lead_gap;	/* sequence numbers skipped before each thread's first event */
	uint32_t tail_gap;	/* attempts dropped after each thread's last event */
	uint32_t sp_every;	/* sequence point every N events (0: only at the end) */
	bool small_only;	/* only the 32-byte "Small" event (volume tests) */
	uint64_t seed;
};

struct tracegen_result {
	uint64_t written;
	uint64_t lost;		/* sequence numbers skipped in total */
	uint64_t per_event[16];	/* written, by generator event index */
};

int tracegen_write(struct nt_sink *sink, const struct tracegen_opts *o,
		   struct tracegen_result *res);

#endif /* RINGPIPE_TRACEGEN_H */
