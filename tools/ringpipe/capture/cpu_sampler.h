/* SPDX-License-Identifier: MIT */
/*
 * CPU sampler: a perf event per online CPU (cpu-clock, or cycles where the
 * CPU has counters) at a given frequency, each running bpf/sample.bpf.c,
 * which hands the sampled thread's kernel and user stacks to user space
 * through a BPF ring buffer.
 *
 * Use: cpu_sampler_start(), then cpu_sampler_poll() in a loop (each record
 * goes to the callback, on the calling thread), then cpu_sampler_stop(),
 * which drains what is left and frees everything. (The cpu_ prefix keeps it
 * apart from ringpipe-demo's simulated sampler, which the tests link too.)
 */
#ifndef RINGPIPE_TOOL_CPU_SAMPLER_H
#define RINGPIPE_TOOL_CPU_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "capture.h"

enum cpu_sampler_event {
	CPU_SAMPLER_EVENT_AUTO = 0,	/* cycles where present, else cpu-clock */
	CPU_SAMPLER_EVENT_CPU_CLOCK = 1,
	CPU_SAMPLER_EVENT_CYCLES = 2,
};

struct cpu_sampler_opts {
	uint32_t freq_hz;		/* samples per second per CPU; 0: 99 */
	uint32_t pid;			/* only this process (thread group); 0: all */
	uint64_t cgroup_id;		/* only this cgroup v2; 0: all */
	int event;			/* enum cpu_sampler_event */
	bool no_kernel_stacks;
};

/* Called for every sample; nonzero stops the current poll early. */
typedef int (*cpu_sampler_cb)(void *ctx, const struct rp_sample_rec *rec);

struct cpu_sampler;

/*
 * Loads and attaches. On failure returns NULL with errno set and a message
 * in err (a missing privilege names CAP_BPF and CAP_PERFMON).
 */
struct cpu_sampler *cpu_sampler_start(const struct cpu_sampler_opts *o, cpu_sampler_cb cb,
				      void *ctx, char *err, size_t errlen);
/* Delivers pending samples, waiting up to timeout_ms; count or -errno. */
int cpu_sampler_poll(struct cpu_sampler *s, int timeout_ms);
/* The perf event in use: "cpu-clock" or "cycles". */
const char *cpu_sampler_event_name(const struct cpu_sampler *s);
/* Samples the BPF side could not queue (ring buffer full). */
uint64_t cpu_sampler_dropped(const struct cpu_sampler *s);
/* Stops the ticks; samples already queued stay for cpu_sampler_poll(). */
void cpu_sampler_quiesce(struct cpu_sampler *s);
/* Detaches, delivers what is still queued, frees. Accepts NULL. */
void cpu_sampler_stop(struct cpu_sampler *s);

#endif
