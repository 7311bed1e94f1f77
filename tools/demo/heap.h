/* SPDX-License-Identifier: MIT */
/*
 * The demo's simulated managed heap: a fixed set of types in two modules, an
 * object graph of N live objects (a spanning tree from the roots plus cross
 * references), roots of several kinds, allocating threads that replace
 * objects with new ones and trigger gen0/gen1 collections, and the
 * stop-the-world heap walk dotnet-gcdump asks for.
 */
#ifndef RINGPIPE_DEMO_HEAP_H
#define RINGPIPE_DEMO_HEAP_H

#include <stdbool.h>
#include <stdint.h>

#include "clr_events.h"

#define HEAP_MAX_NODES 16000000u
#define HEAP_MAX_ALLOC_THREADS 64u

struct heap_opts {
	uint64_t nodes;			/* live objects */
	uint64_t seed;
	uint32_t alloc_threads;
	const char *report;		/* --heap-report FILE or NULL */
};

/* Builds the heap; 0 or -1 (message on stderr). */
int heap_init(const struct heap_opts *o);
/* Starts / stops (joins) the allocating threads. */
int heap_start(void);
void heap_stop(void);

/*
 * The runtime provider's enable callback: enabling GCHeapCollect at level 4
 * or more runs an induced gen-2 GC with a heap walk, synchronously.
 */
void heap_runtime_enable(struct rp_provider *provider, int session_id, bool enabled,
			 uint64_t keywords, uint8_t level, const char *args, void *ctx);

/* Cumulative totals (for the session-end event). */
uint64_t heap_gc_count(void);
uint64_t heap_alloc_count(void);
uint64_t heap_alloc_bytes(void);

#endif /* RINGPIPE_DEMO_HEAP_H */
