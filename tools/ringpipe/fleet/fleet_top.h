/* SPDX-License-Identifier: MIT */
/*
 * `ringpipe fleet top`: canned queries over the fleet tables, each printed
 * as a table on the terminal.
 *
 *   events     events per container and provider
 *   gc         GC pauses per container: .NET's GC/SuspendEEStart to
 *              GC/RestartEEStop (GC/Start to GC/Stop for a process that
 *              writes no suspensions), and the GC/Start to GC/Stop of the
 *              CPython and HotSpot USDT probes, per thread
 *   functions  the hottest functions of the CPU samples (Ringpipe-Sampler),
 *              by leaf frame (self) and anywhere on the stack (total)
 *
 * The queries are plain enough for ClickHouse 18.16 and for Distributed
 * tables (no window functions, no JOIN of a Distributed table on the right:
 * each side is a subquery the initiator runs); pairing GC events and
 * percentiles happen here. A row of the agent's own trace (kernel events,
 * samples and probes of processes that did not join) has no container of
 * its own: it is given its process's, from the agent's Process events.
 */
#ifndef RINGPIPE_FLEET_TOP_H
#define RINGPIPE_FLEET_TOP_H

#include <stdint.h>
#include <stdio.h>

#include "fleet/clickhouse.h"

enum {
	FLEET_TOP_EVENTS = 1,
	FLEET_TOP_GC = 2,
	FLEET_TOP_FUNCTIONS = 4,
	FLEET_TOP_ALL = 7,
};

struct fleet_top_opts {
	unsigned what;		/* FLEET_TOP_* bits */
	const char *host;	/* NULL: every host */
	uint64_t since_s;	/* rows of the last since_s seconds; 0: all */
	uint64_t limit;		/* rows per table */
};

/* "events", "gc" or "functions" into *what's bit: 0, or -EINVAL. */
int fleet_top_what(const char *s, unsigned *what);

/*
 * Runs the tables o->what asks for against c's database (in the dialect
 * its version calls for) and prints them to out. 0, or a negative errno
 * with why in err (the server failed or answered what was not expected).
 */
int fleet_top(struct ch_client *c, const struct fleet_top_opts *o, FILE *out, char *err,
	      size_t errlen);

#endif /* RINGPIPE_FLEET_TOP_H */
