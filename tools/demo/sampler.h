/* SPDX-License-Identifier: MIT */
/*
 * Microsoft-DotNETCore-SampleProfiler: while any session enables it, a
 * sampler thread writes one ThreadSample per demo thread every 10 ms.
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
/* How many threads to report as running managed code and as outside it. */
void sampler_set_threads(uint32_t managed, uint32_t external);
int sampler_start(void);
void sampler_stop(void);

#endif /* RINGPIPE_DEMO_SAMPLER_H */
