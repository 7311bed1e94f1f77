/* SPDX-License-Identifier: MIT */
/*
 * CPU samples inside `ringpipe record` (see record_sample.c): the sampler
 * becomes a source of the BPF capture, drained by its consumer thread.
 */
#ifndef RINGPIPE_TOOL_RECORD_SAMPLE_H
#define RINGPIPE_TOOL_RECORD_SAMPLE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "capture/bpf_capture.h"

/* Defines Ringpipe-Sampler/Sample and the Ringpipe-Symbols events (once);
 * before the session that enables them starts. 0 or -ENOMEM. */
int record_sampler_define(void);

struct record_sampler;

/* Starts sampling at hz (pid > 0: that process only) and adds the sampler
 * to cap's sources; NULL with the reason in err. Before rp_capture_start(). */
struct record_sampler *record_sampler_open(struct rp_capture *cap, uint32_t hz, pid_t pid,
					   char *err, size_t errlen);

struct record_sampler_stats {
	uint64_t samples;		/* written into the session */
	uint64_t kernel_drops;		/* the sampler's BPF ring buffer was full */
	uint64_t write_drops;		/* a session ring was full */
	size_t modules;			/* mappings described in the trace */
	const char *event;		/* "cpu-clock" or "cycles" */
};

/* The session's trace went on in a new file (rp_session_rotate()): the
 * consumer writes every module, JIT symbol and thread name it wrote
 * before once more, on its next pass, so that file symbolizes alone. */
void record_sampler_restate(struct record_sampler *rs);

/* After rp_capture_stop(): last mappings, queued samples, the final
 * figures into st (may be NULL), then frees. Accepts NULL. */
void record_sampler_close(struct record_sampler *rs, struct record_sampler_stats *st);

#endif
