// SPDX-License-Identifier: MIT
/*
 * The demo runtime's counters: GC collections, bytes allocated (whose rate
 * is the allocation rate) and objects allocated, as observable instruments
 * of a "System.Runtime" meter, under the names .NET 9 uses where it has one.
 * The library's own System.Runtime meter adds the process's CPU time and
 * working set; a session that names System.Runtime gets both meters.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/atomics.h"
#include "heap.h"
#include "metrics.h"
#include "ringpipe/ringpipe.h"

static int dm_started;		/* atomic: demo_metrics_start() ran */
static int dm_running;		/* atomic: the callbacks report */
static pthread_mutex_t dm_lock = PTHREAD_MUTEX_INITIALIZER;

enum { DM_GCS, DM_ALLOC_BYTES, DM_ALLOCS };

static int dm_observe(struct rp_instrument *inst, struct rp_measurement *out, uint32_t max,
		      void *ctx)
{
	(void)inst;
	if (!rp_load_relaxed(&dm_running) || !max)
		return 0;
	switch ((intptr_t)ctx) {
	case DM_GCS:
		out[0].value = (double)heap_gc_count();
		break;
	case DM_ALLOC_BYTES:
		out[0].value = (double)heap_alloc_bytes();
		break;
	default:
		out[0].value = (double)heap_alloc_count();
		break;
	}
	out[0].tags = NULL;
	return 1;
}

static const struct {
	const char *name, *unit, *desc;
	intptr_t what;
} dm_defs[] = {
	{ "dotnet.gc.collections", "{collection}",
	  "The number of garbage collections that have occurred since the process started.",
	  DM_GCS },
	{ "dotnet.gc.heap.total_allocated", "By",
	  "The approximate number of bytes allocated on the managed GC heap since the process "
	  "started.", DM_ALLOC_BYTES },
	{ "ringpipe.demo.gc.allocations", "{object}",
	  "Objects the demo's heap model allocated since the process started.", DM_ALLOCS },
};

static int dm_define(void)
{
	struct rp_meter_opts mo = { .sz = sizeof(mo), .name = "System.Runtime",
				    .version = "ringpipe-demo" };
	struct rp_meter *m = rp_meter_new(&mo);
	size_t i;

	if (!m)
		return -errno;
	for (i = 0; i < sizeof(dm_defs) / sizeof(dm_defs[0]); i++) {
		struct rp_instrument_opts io = { .sz = sizeof(io),
						 .kind = RP_INSTRUMENT_OBSERVABLE_COUNTER,
						 .name = dm_defs[i].name,
						 .unit = dm_defs[i].unit,
						 .description = dm_defs[i].desc,
						 .observe = dm_observe,
						 .ctx = (void *)dm_defs[i].what };

		if (!rp_instrument_new(m, &io))
			return -errno;
	}
	return 0;
}

int demo_metrics_start(void)
{
	int err = 0;

	pthread_mutex_lock(&dm_lock);
	if (!dm_started) {
		err = dm_define();
		dm_started = !err;
	}
	if (!err)
		rp_store_relaxed(&dm_running, 1);
	pthread_mutex_unlock(&dm_lock);
	return err;
}

void demo_metrics_stop(void)
{
	rp_store_relaxed(&dm_running, 0);
}
