/* SPDX-License-Identifier: MIT */
/*
 * CPU sampler: a perf event per online CPU (cpu-clock, or cycles where the
 * CPU has counters) at a given frequency, each running bpf/sample.bpf.c,
 * which hands the sampled thread's kernel and user stacks to user space
 * through a BPF ring buffer.
 *
 * Use: sampler_start(), then sampler_poll() in a loop (each record goes to
 * the callback, on the calling thread), then sampler_stop(), which drains
 * what is left and frees everything.
 */
#ifndef RINGPIPE_TOOL_SAMPLER_H
#define RINGPIPE_TOOL_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../bpf/capture.h"

enum sampler_event {
	SAMPLER_EVENT_AUTO = 0,		/* cycles where present, else cpu-clock */
	SAMPLER_EVENT_CPU_CLOCK = 1,
	SAMPLER_EVENT_CYCLES = 2,
};

struct sampler_opts {
	uint32_t freq_hz;		/* samples per second per CPU; 0: 99 */
	uint32_t pid;			/* only this process (thread group); 0: all */
	uint64_t cgroup_id;		/* only this cgroup v2; 0: all */
	int event;			/* enum sampler_event */
	bool no_kernel_stacks;
};

/* Called for every sample; nonzero stops the current poll early. */
typedef int (*sampler_cb)(void *ctx, const struct rp_sample_rec *rec);

struct sampler;

/*
 * Loads and attaches. On failure returns NULL with errno set and a message
 * in err (a missing privilege names CAP_BPF and CAP_PERFMON).
 */
struct sampler *sampler_start(const struct sampler_opts *o, sampler_cb cb, void *ctx,
			      char *err, size_t errlen);
/* Delivers pending samples, waiting up to timeout_ms; count or -errno. */
int sampler_poll(struct sampler *s, int timeout_ms);
/* The perf event in use: "cpu-clock" or "cycles". */
const char *sampler_event_name(const struct sampler *s);
/* Samples the BPF side could not queue (ring buffer full). */
uint64_t sampler_dropped(const struct sampler *s);
/* Stops the ticks; samples already queued stay for sampler_poll(). */
void sampler_quiesce(struct sampler *s);
/* Detaches, delivers what is still queued, frees. Accepts NULL. */
void sampler_stop(struct sampler *s);

#endif
