/* SPDX-License-Identifier: MIT */
/*
 * CPU profiles read back from a trace, for 'ringpipe convert' and 'ringpipe
 * report': the stacks of Ringpipe-Sampler/Sample events and of the .NET
 * runtime's Microsoft-DotNETCore-SampleProfiler ThreadSample events (and of
 * any event that carries one), frames named with the modules the trace
 * describes (Ringpipe-Symbols events), the .NET methods its CLR method and
 * module events describe, perf map files and /proc/kallsyms.
 */
#ifndef RINGPIPE_TOOL_PROFILE_H
#define RINGPIPE_TOOL_PROFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "capture.h"
#include "util/hmap.h"
#include "nettrace_read.h"
#include "symbols/symbolize.h"

#define PROF_DOTNET_SAMPLER "Microsoft-DotNETCore-SampleProfiler"
#define PROF_DOTNET_EV_THREAD_SAMPLE 0

/* A parsed Ringpipe-Sampler/Sample or ThreadSample, or a plain event's stack. */
struct prof_stack {
	uint32_t pid, tid, cpu;
	uint32_t nk;		/* kernel frames first (leaf at 0) */
	uint32_t n;
	uint64_t ips[2 * RP_SAMPLE_MAX_FRAMES + 256];
	bool sample;		/* frames 0 and nk are interrupted IPs */
	bool thread_time;	/* a ThreadSample: the runtime samples each managed
				 * thread in turn, running or not */
};

/* Is rec a CPU sample: a Ringpipe-Sampler/Sample event with a whole payload,
 * or a .NET SampleProfiler ThreadSample? */
bool prof_is_sample(const struct nt_rec *rec);
/* Is rec a .NET SampleProfiler ThreadSample? */
bool prof_is_thread_sample(const struct nt_rec *rec);
/* rec's stack (and, for a sample, the sampled process, CPU and the split
 * between kernel and user frames) into s. */
void prof_get_stack(const struct nt_reader *r, const struct nt_rec *rec,
		    struct prof_stack *s);
/* Is frame i an interrupted instruction (not a return address)? */
bool prof_frame_leaf(const struct prof_stack *s, uint32_t i);
/* Frame i as "module!function" (no offset, so that samples aggregate),
 * "module+0xoff" or "0xip"; returns buf. */
const char *prof_func_name(struct sym_table *t, const struct prof_stack *s, uint32_t i,
			   char *buf, size_t len);

/* Interned strings: a frame table shared by every profile. */
struct prof_strtab {
	struct hmap idx;	/* hash -> index + 1 */
	char **s;
	size_t n, cap;
};

/* The index of s in t, added if new; -1 when out of memory. */
int64_t prof_strtab_get(struct prof_strtab *t, const char *s);
void prof_strtab_free(struct prof_strtab *t);

/* What a first pass over a trace learns. */
struct prof_scan {
	uint64_t t0, t1;	/* first and last timestamp */
	uint64_t nsamples;	/* samples of either kind */
	uint64_t nthread_samples;	/* of which .NET ThreadSamples */
};

struct tool_progress;
/* Reads the trace at path once, feeding its Ringpipe-Symbols events to
 * syms; 0, or a negative errno (what nt_reader_open() or the reader said).
 * pg, when not NULL, shows the pass as the first half of two. */
int prof_load_symbols(const char *path, struct sym_table *syms, struct prof_scan *scan,
		      struct tool_progress *pg);

/* Prints the top functions (leaf frames) of the trace's samples to out, as
 * 'ringpipe report' shows them; nothing for a trace without samples. 0 or
 * a negative errno. */
int prof_top_functions(const char *path, FILE *out, size_t top);

#endif
