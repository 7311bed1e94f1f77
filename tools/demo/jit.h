/* SPDX-License-Identifier: MIT */
/*
 * Simulated JIT: the demo's "managed code" and the rundown
 * (Microsoft-Windows-DotNETRuntimeRundown) that names it, written from the
 * stopping session's stopping callback.
 *
 * Two kinds of methods:
 *  - code methods: real C functions of the demo (its threads' loops, the CPU
 *    workers' methods), each compiled into a section of its own
 *    (SAMPLER_MANAGED, sampler.h), so that its start and size are known exactly. The
 *    sampler's stacks land in them, and rundown describes them as methods of
 *    RingpipeDemo.dll, as the runtime describes JIT-compiled code.
 *  - published methods: JIT threads "compile" methods into per-thread tables
 *    of fixed capacity (the live methods). When a table is full, the oldest
 *    method is unloaded and its slot (and code address) reused, so the
 *    table, and with it the rundown, stays bounded however long the demo
 *    runs. Their code addresses lie in an address range reserved with no
 *    access, so no sample can be mistaken for one of them.
 *
 * A published method's index is (JIT thread t, sequence i within t); its
 * MethodID encodes both (JIT_METHOD_ID), and every other field of its
 * events is derived from them and from its slot (i % capacity), so a reader
 * can check that no event is torn or duplicated.
 */
#ifndef RINGPIPE_DEMO_JIT_H
#define RINGPIPE_DEMO_JIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ringpipe/ringpipe.h"

#define JIT_MAX_THREADS 64u

/* Published methods' code: slot s of thread t starts at
 * base + t * JIT_CODE_STRIDE + s * 256, in a range reserved with no access
 * wherever the kernel put it (a fixed address would collide with some
 * sanitizer's shadow memory); the demo prints "jit-code-base 0x..." on
 * stderr. */
#define JIT_CODE_STRIDE (1ull << 28)	/* JIT_MAX_LIVE slots of 256 bytes */
#define JIT_MAX_LIVE (1u << 20)
/* where the code would be if the range could not be reserved */
#define JIT_CODE_FALLBACK 0x3f0000000000ull

struct jit_opts {
	uint32_t threads;
	uint32_t capacity;		/* live methods per thread (at most JIT_MAX_LIVE);
					 * then the oldest is unloaded */
	uint32_t rate;			/* methods per second per thread; 0: as fast as possible */
};

int jit_init(const struct jit_opts *o);
int jit_start(void);
void jit_stop(void);

/* Publishes thread t's next method, unloading the one in its slot first;
 * true (a full table no longer stops publishing: it reuses its oldest slot). */
bool jit_publish(uint32_t t);
uint64_t jit_published(void);

#define JIT_METHOD_ID(t, i) ((((uint64_t)(t) + 1) << 40) | (uint64_t)(i))

struct jit_rundown_result {
	uint64_t before;		/* published (fully) before rundown began */
	uint64_t live_before;		/* of those, still live when rundown began */
	uint64_t emitted;		/* MethodDCEndVerbose events of published methods */
	uint64_t code;			/* MethodDCEndVerbose events of code methods */
	uint32_t per_thread[JIT_MAX_THREADS]; /* each thread's count when rundown began */
};

/*
 * Writes the rundown: DCEndInit, the code methods, the published methods,
 * modules, assembly, domain, runtime information, DCEndComplete. Reads the
 * tables without locks and never waits for a publishing thread.
 */
void jit_rundown(struct jit_rundown_result *r);

/* RP_RUNDOWN_PROVIDER's stopping callback: jit_rundown and a line on stderr. */
void jit_rundown_stopping(struct rp_provider *provider, int session_id, uint64_t keywords,
			  uint8_t level, void *ctx);

#endif /* RINGPIPE_DEMO_JIT_H */
