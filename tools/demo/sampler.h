/* SPDX-License-Identifier: MIT */
/*
 * Microsoft-DotNETCore-SampleProfiler: while any session enables it, a
 * sampler thread samples every registered demo thread once a millisecond
 * (the runtime's default period) and writes one ThreadSample each,
 * attributed to that thread (rp_write_opts.thread_id), with the thread's
 * managed stack, as EventPipe attributes its samples.
 *
 * The stack is taken by the thread itself: the sampler signals it (tgkill),
 * and its handler walks the frame pointers from the interrupted context
 * into the thread's slot. Only frames in managed code (sampler_code_contains)
 * are kept, as the runtime's stack walk keeps only managed frames; when the
 * thread is in native code (a sleep, a library call), the walk starts at
 * the frame that registered the thread, as the runtime's starts at the
 * transition frame its managed code left when it called out.
 *
 * The first rounds of samples are taken inside the enable callback, before
 * the session can be stopped, until every registered thread was sampled
 * twice (or 2 s passed): even a session as short as dotnet-stack's (10 ms)
 * sees every thread twice, which is what TraceEvent needs to show a
 * thread's stack at all.
 *
 * dotnet-gcdump opens a session with only this provider and waits for any
 * event before it asks for the heap dump, so the demo must answer it.
 */
#ifndef RINGPIPE_DEMO_SAMPLER_H
#define RINGPIPE_DEMO_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ringpipe/ringpipe.h"

#define SAMPLER_PERIOD_NS 1000000ull
#define SAMPLER_MAX_FRAMES 64u

/* ---- the managed code: what the walk keeps, and rundown names ---------- */

/*
 * A function that is managed code: in a section of its own, so the linker's
 * __start_/__stop_ symbols give its exact range, and never inlined, so its
 * frame is on the stack when it runs. Declare the range with
 * SAMPLER_CODE_RANGE(sec) and describe it with SAMPLER_CODE(sec, ...).
 */
#define SAMPLER_MANAGED(sec) __attribute__((section("rpdemo_" #sec), noinline, noclone))
#define SAMPLER_CODE_RANGE(sec)                                                          \
	extern const char __start_rpdemo_##sec[] __attribute__((visibility("hidden"))); \
	extern const char __stop_rpdemo_##sec[] __attribute__((visibility("hidden")))
#define SAMPLER_CODE(sec, ns, name, sig) \
	{ ns, name, sig, __start_rpdemo_##sec, __stop_rpdemo_##sec, false }
/* ... of a leaf that the compiler gave no frame record (it uses no stack):
 * its caller's return address is at the stack pointer while it runs. This
 * is the demo's unwind information; the sampler's walk needs it to keep the
 * caller of an interrupted leaf. */
#define SAMPLER_CODE_LEAF(sec, ns, name, sig) \
	{ ns, name, sig, __start_rpdemo_##sec, __stop_rpdemo_##sec, true }

struct sampler_code {
	const char *ns, *name, *signature;	/* "Demo.Worker", "Compute", "uint64 (uint64)" */
	const char *start, *end;
	bool frameless;
};

#define SAMPLER_MAX_CODE 32u

/* Adds code methods (before any thread that runs them starts); 0 or -ENOSPC. */
int sampler_code_add(const struct sampler_code *c, size_t n);
/* The code methods added so far, n of them (rundown describes them). */
const struct sampler_code *sampler_code_table(uint32_t *n);
/* The code method ip is in, or NULL. Async-signal-safe (the sampler's handler). */
const struct sampler_code *sampler_code_find(uint64_t ip);
static inline bool sampler_code_contains(uint64_t ip)
{
	return sampler_code_find(ip) != NULL;
}

/* ---- sampling ------------------------------------------------------------- */

void sampler_enable(struct rp_provider *provider, int session_id, bool enabled,
		    uint64_t keywords, uint8_t level, const char *args, void *ctx);
/*
 * The calling thread is sampled from now on, as running managed code or
 * outside it, until it calls sampler_remove_self() (before it exits). Call
 * it from the thread's outermost managed method: its frame is where stacks
 * taken in native code start.
 */
void sampler_add_self(bool managed);
void sampler_remove_self(void);
int sampler_start(void);
void sampler_stop(void);

#endif /* RINGPIPE_DEMO_SAMPLER_H */
