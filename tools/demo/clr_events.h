/* SPDX-License-Identifier: MIT */
/*
 * The CLR runtime, rundown and sample-profiler events ringpipe-demo writes,
 * with payload encoders that lay the bytes out exactly as the runtime's
 * manifest does (packed, little-endian, UTF-16LE strings, 8-byte pointers;
 * dotnet/runtime, src/coreclr/vm/ClrEtwAll.man), so that TraceEvent's CLR
 * parsers decode them.
 *
 * Every encoder that actually hands an event to the library also appends
 * one line to the --expect file describing the values it wrote, in the
 * shape tests/test_runtime.c compares with TraceDump's "clr" output:
 *
 *   <TraceEvent event name>\t<Field>=<value>\t<Field>=<value>...
 *
 * Field names are TraceEvent's payload names, integers (pointers and enums
 * too) are decimal, strings are written as they are (the demo's strings
 * hold no tabs or newlines).
 */
#ifndef RINGPIPE_DEMO_CLR_EVENTS_H
#define RINGPIPE_DEMO_CLR_EVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ringpipe/ringpipe.h"

/* Any stable value works; a single runtime instance uses 0. */
#define CLR_INSTANCE_ID 0

/*
 * The runtime the demo imitates, everywhere it says so: the rundown's
 * RuntimeInformation, System.Private.CoreLib's path and assembly version.
 * (ProcessInfo2/3's runtime version is the IPC server's: see runtime.md.)
 */
#define CLR_VERSION_MAJOR 10
#define CLR_VERSION_MINOR 0
#define CLR_VERSION_BUILD 0
#define CLR_VERSION "10.0.0"

#define CLR_APPDOMAIN_ID 0x7f3a50000000ull

/* Keywords of the runtime provider the demo looks at. */
#define CLR_KW_GC		0x1ull
#define CLR_KW_LOADER		0x8ull
#define CLR_KW_JIT		0x10ull
#define CLR_KW_TYPE		0x80000ull
#define CLR_KW_GCHEAPDUMP	0x100000ull
#define CLR_KW_GCHEAPCOLLECT	0x800000ull

/* GCRootKind and GCRootFlags (maps of the CLR manifest). */
enum { CLR_ROOT_STACK = 0, CLR_ROOT_FINALIZER = 1, CLR_ROOT_HANDLE = 2 };
#define CLR_ROOTFLAG_PINNING 0x1u
#define CLR_ROOTFLAG_WEAK 0x2u

/* TypeFlags (a map of the CLR manifest). */
#define CLR_TYPEFLAG_FINALIZABLE 0x2u
#define CLR_TYPEFLAG_ARRAY 0x8u

/* Provider callbacks the demo's modules install; all optional. */
struct clr_callbacks {
	rp_enable_fn runtime_enable;		/* Microsoft-Windows-DotNETRuntime */
	rp_enable_fn sampler_enable;		/* Microsoft-DotNETCore-SampleProfiler */
	rp_session_stopping_fn rundown_stopping; /* Microsoft-Windows-DotNETRuntimeRundown */
};

/* Defines the three providers and their events; 0 or -1 (rp_last_error()). */
int clr_events_init(const struct clr_callbacks *cb);

/* Opens (appends to) the --expect file; NULL path: no expect lines. */
int clr_expect_open(const char *path);
/* Appends one line (printf format, the newline is added), atomically. */
void clr_expect(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
bool clr_expecting(void);

/* ---- GC lifecycle ------------------------------------------------------- */

struct clr_heap_stats {
	uint64_t gen_size[5];		/* gen0, gen1, gen2, LOH, POH */
	uint64_t promoted[5];
	uint64_t finalization_promoted_size, finalization_promoted_count;
	uint32_t pinned_objects, sink_blocks, gc_handles;
};

void clr_gc_triggered(uint32_t reason);
void clr_gc_suspend_begin(uint32_t reason, uint32_t count);
void clr_gc_suspend_end(void);
void clr_gc_start(uint32_t count, uint32_t depth, uint32_t reason, uint32_t type);
void clr_gc_end(uint32_t count, uint32_t depth);
void clr_gc_heap_stats(const struct clr_heap_stats *hs);
void clr_gc_restart_begin(void);
void clr_gc_restart_end(void);
void clr_gc_alloc_tick(uint32_t amount, uint32_t kind, uint64_t amount64, uint64_t type_id,
		       const char *type_name, uint32_t heap_index, uint64_t address,
		       uint64_t object_size);
/* Is the walk's output (GCBulkNode) collected by any session? */
bool clr_heapdump_enabled(void);

/* ---- bulk heap-dump events ---------------------------------------------- */

enum clr_bulk_kind { CLR_BULK_NODE, CLR_BULK_EDGE, CLR_BULK_ROOT, CLR_BULK_TYPE, CLR_BULK_NR };

/*
 * One stream of bulk events: elements accumulate in a payload buffer and go
 * out as one event when the next would cross the runtime's per-event limit.
 * Index counts the events of this stream within one GC, from 0. digest
 * folds every element written in order, so that a reader that decodes the
 * elements can prove it saw the same values (clr_bulk_digest()).
 */
struct clr_bulk {
	enum clr_bulk_kind kind;
	uint32_t index;			/* of the next event */
	uint32_t count;			/* elements in the buffer */
	uint64_t elements;		/* written in this GC, all events */
	uint64_t digest;
	size_t len;
	uint8_t buf[65536];
};

void clr_bulk_begin(struct clr_bulk *b, enum clr_bulk_kind kind);
void clr_bulk_node(struct clr_bulk *b, uint64_t address, uint64_t size, uint64_t type_id,
		   uint64_t edge_count);
void clr_bulk_edge(struct clr_bulk *b, uint64_t target);
void clr_bulk_root(struct clr_bulk *b, uint64_t address, uint8_t kind, uint32_t flags,
		   uint64_t root_id);
void clr_bulk_type(struct clr_bulk *b, uint64_t type_id, uint64_t module_id, uint32_t flags,
		   uint8_t cor_element_type, const char *name);
/* Writes what is buffered. */
void clr_bulk_flush(struct clr_bulk *b);
/* The order-sensitive fold TraceDump's "heap" mode computes over the same elements. */
uint64_t clr_digest_step(uint64_t digest, uint64_t position, uint64_t value);

/* ---- loader and rundown ------------------------------------------------- */

struct clr_module {
	uint64_t module_id, assembly_id;
	uint32_t flags;
	const char *il_path;
	const char *assembly_name;	/* fully qualified, for AssemblyDCEnd */
};

void clr_module_load(const struct clr_module *m);
/* The demo's modules: [0] System.Private.CoreLib, [1] RingpipeDemo (types and methods). */
const struct clr_module *clr_demo_modules(unsigned *n);
#define CLR_DEMO_MODULE 1

struct clr_method {
	uint64_t method_id, module_id, start, rejit_id;
	uint32_t size, token, flags;
	const char *ns, *name, *signature;
};

/* Live JIT events (Microsoft-Windows-DotNETRuntime, JIT keyword): a method
 * being compiled, compiled (its code range), and unloaded. */
void clr_method_jitting_started(const struct clr_method *m, uint32_t il_size);
void clr_method_load(const struct clr_method *m);
void clr_method_unload(const struct clr_method *m);

void clr_rd_dcend_init(void);
void clr_rd_method(const struct clr_method *m);
void clr_rd_module(const struct clr_module *m);
void clr_rd_assembly(const struct clr_module *m, uint64_t appdomain_id);
void clr_rd_appdomain(uint64_t appdomain_id, const char *name);
void clr_rd_runtime_info(const char *command_line);
void clr_rd_dcend_complete(void);
bool clr_rd_methods_enabled(void);

/* ---- sample profiler ---------------------------------------------------- */

/* One ThreadSample for thread tid, with its stack (innermost frame first;
 * nframes 0: none). */
void clr_thread_sample(uint32_t type, uint32_t tid, const uint64_t *frames, uint32_t nframes);
bool clr_sampler_enabled(void);

/* ---- EventPipe's own provider ---------------------------------------------- */

/*
 * Microsoft-DotNETCore-EventPipe's ProcessInfo (command line, OS, arch) is
 * written by the provider's stopping callback into each stopping session
 * that enables the provider; EventPipe enables it in every session.
 */
#define CLR_EVENTPIPE_PROVIDER "Microsoft-DotNETCore-EventPipe"

#endif /* RINGPIPE_DEMO_CLR_EVENTS_H */
