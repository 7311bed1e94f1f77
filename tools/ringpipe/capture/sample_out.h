/* SPDX-License-Identifier: MIT */
/*
 * Writing CPU samples and the facts needed to symbolize them into nettrace.
 *
 * Events (provider Ringpipe-Sampler):
 *   1 Sample  Cpu u32, CgroupId u64, KernelFrames u32, UserFrames u32, Pid u32
 *             on the sampled thread, at the sample's time, with the stack
 *             (kernel frames, innermost first, then user frames) as the
 *             event's stack, which is where TraceEvent looks for it.
 * and Ringpipe-Symbols (symbolize.h): ModuleLoad, JitSymbol, Thread.
 *
 * Two paths. sample_writer_* serializes a standalone trace directly (what
 * `ringpipe sample` writes): timestamps are bpf_ktime_get_ns() values and
 * the trace clock is CLOCK_MONOTONIC in ns. `ringpipe record --sample`
 * writes the same events into a live session (record_sample.c).
 */
#ifndef RINGPIPE_TOOL_SAMPLE_OUT_H
#define RINGPIPE_TOOL_SAMPLE_OUT_H

#include <stdint.h>

#include "capture.h"
#include "symbols/symbolize.h"

#define SAMPLER_PROVIDER "Ringpipe-Sampler"
#define SAMPLER_EV_SAMPLE 1
#define SAMPLE_PAYLOAD_LEN 24

/*
 * The fields of the Sample event and of the Ringpipe-Symbols events, once:
 * sample_out.c expands them as nt_field (the standalone writer) and
 * record_sample.c as rp_field (a live session), so both commands write the
 * same schemas. F(name, type): type is the suffix of both NT_ and RP_TYPE_.
 */
#define SAMPLE_FIELDS(F) \
	F("Cpu", U32) F("CgroupId", U64) F("KernelFrames", U32) F("UserFrames", U32) F("Pid", U32)
#define SYM_MODULE_FIELDS(F) \
	F("Pid", U32) F("Start", U64) F("End", U64) F("Offset", U64) F("Path", STRING) \
	F("BuildId", STRING)
#define SYM_JIT_FIELDS(F) F("Pid", U32) F("Start", U64) F("Size", U64) F("Name", STRING)
#define SYM_THREAD_FIELDS(F) F("Pid", U32) F("Tid", U32) F("Name", STRING)
#define SAMPLE_NFIELDS(a) (uint16_t)(sizeof(a) / sizeof((a)[0]))

/* Encodes a sample's payload (SAMPLE_PAYLOAD_LEN bytes). */
void sample_payload(const struct rp_sample_rec *r, uint8_t out[SAMPLE_PAYLOAD_LEN]);

/* Payloads of the Ringpipe-Symbols events (symbolize.h), appended to b. */
struct bytebuf;
void sample_enc_module(struct bytebuf *b, const struct sym_module *m);
void sample_enc_jit(struct bytebuf *b, const struct sym_jit *j);
void sample_enc_thread(struct bytebuf *b, uint32_t pid, uint32_t tid, const char *name);

struct sample_writer;

struct sample_writer_opts {
	int fd;
	int format;		/* 5 (one process) or 6 */
	uint32_t pid;		/* the trace's process (V5) */
	uint64_t t0_ns;		/* CLOCK_MONOTONIC at the start */
	uint32_t freq_hz;	/* sampling frequency, for the trace header */
};

struct sample_writer *sample_writer_new(const struct sample_writer_opts *o);
/*
 * Queues one sample; samples reach the file sorted by time at finish (the
 * BPF ring buffer is shared by all CPUs, so arrival order is not quite
 * time order). Also remembers the thread's name the first time it appears.
 */
int sampler_write(struct sample_writer *w, const struct rp_sample_rec *r);
/* Queues what t knows (modules, JIT symbols) not queued before, at ts. */
int sample_writer_symbols(struct sample_writer *w, struct sym_table *t, uint64_t ts);
uint64_t sample_writer_samples(const struct sample_writer *w);
/* Sorts, writes everything and ends the trace; frees w. 0 or -errno. */
int sample_writer_finish(struct sample_writer *w, uint64_t end_ns);


#endif
