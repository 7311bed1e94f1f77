/* SPDX-License-Identifier: MIT */
/*
 * Simulated JIT: threads publish "methods" into per-thread, fixed-capacity
 * tables that rundown reads without locks, and the rundown itself
 * (Microsoft-Windows-DotNETRuntimeRundown), written from the stopping
 * session's stopping callback.
 *
 * A method's publication index is (JIT thread t, sequence i within t); its
 * MethodID encodes both (jit_method_id), and every other field of its
 * MethodDCEndVerbose is derived from them, so a reader can check that no
 * event is torn or duplicated.
 */
#ifndef RINGPIPE_DEMO_JIT_H
#define RINGPIPE_DEMO_JIT_H

#include <stdbool.h>
#include <stdint.h>

#include "ringpipe/ringpipe.h"

#define JIT_MAX_THREADS 64u

struct jit_opts {
	uint32_t threads;
	uint32_t capacity;		/* methods per thread; a full thread stops publishing */
	uint32_t rate;			/* methods per second per thread; 0: as fast as possible */
};

int jit_init(const struct jit_opts *o);
int jit_start(void);
void jit_stop(void);

/* Publishes thread t's next method; false when its table is full. */
bool jit_publish(uint32_t t);
uint64_t jit_published(void);

#define JIT_METHOD_ID(t, i) ((((uint64_t)(t) + 1) << 40) | (uint64_t)(i))

struct jit_rundown_result {
	uint64_t before;		/* published (fully) before rundown began */
	uint64_t emitted;		/* MethodDCEndVerbose events written */
	uint32_t per_thread[JIT_MAX_THREADS]; /* each thread's count when rundown began */
};

/*
 * Writes the rundown: DCEndInit, the methods, modules, assembly, domain,
 * runtime information, DCEndComplete. Reads the tables with acquire loads
 * and never waits for a publishing thread.
 */
void jit_rundown(struct jit_rundown_result *r);

/* RP_RUNDOWN_PROVIDER's stopping callback: jit_rundown and a line on stderr. */
void jit_rundown_stopping(struct rp_provider *provider, int session_id, uint64_t keywords,
			  uint8_t level, void *ctx);

#endif /* RINGPIPE_DEMO_JIT_H */
