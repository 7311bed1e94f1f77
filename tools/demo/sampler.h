/* SPDX-License-Identifier: MIT */
/*
 * Microsoft-DotNETCore-SampleProfiler: while any session enables it, a
 * sampler thread writes one ThreadSample per registered demo thread every
 * 10 ms, attributed to that thread (rp_write_opts.thread_id) as EventPipe
 * attributes its samples.
 * dotnet-gcdump opens a session with only this provider and waits for any
 * event before it asks for the heap dump, so the demo must answer it.
 */
#ifndef RINGPIPE_DEMO_SAMPLER_H
#define RINGPIPE_DEMO_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#include "ringpipe/ringpipe.h"

void sampler_enable(struct rp_provider *provider, int session_id, bool enabled,
		    uint64_t keywords, uint8_t level, const char *args, void *ctx);
/* The calling thread is sampled from now on, as running managed code or
 * outside it, until it calls sampler_remove_self() (before it exits). */
void sampler_add_self(bool managed);
void sampler_remove_self(void);
int sampler_start(void);
void sampler_stop(void);

#endif /* RINGPIPE_DEMO_SAMPLER_H */
