/* SPDX-License-Identifier: MIT */
/*
 * `ringpipe fleet export`: the events rows a condition selects, back into a
 * nettrace file that TraceEvent and PerfView read, so that a question asked
 * of the whole fleet ends in the usual tools.
 *
 * The rows come in pages ordered by time, each asked for from the last
 * one's key on (a page's RowBinary answer is all that is held of them at
 * once); the event_meta rows of the processes and
 * events that appear give each event its provider, name and fields, the
 * stacks rows its stack (when the egress shipped one), and the processes
 * rows the names said in the summary. Each event keeps its process and
 * thread ids, its time (nanoseconds since the epoch: the file's clock runs
 * at 1 GHz from a sync time on a whole millisecond), its activity ids and
 * its payload bytes. Sequence numbers are counted afresh per thread of the
 * file: a selection leaves out events on purpose, which TraceEvent must not
 * report as lost.
 */
#ifndef RINGPIPE_FLEET_EXPORT_H
#define RINGPIPE_FLEET_EXPORT_H

#include <stdint.h>
#include <stdio.h>

#include "fleet/clickhouse.h"

struct fleet_export_opts {
	const char *where;	/* the condition on events rows, as SQL */
	const char *host;	/* NULL, or only this host's rows */
	const char *path;	/* the nettrace file to write */
	int format;		/* NT_FORMAT_V5 or NT_FORMAT_V6 */
	uint32_t page_rows;	/* rows asked for at once; 0: 50000 */
	FILE *notes;		/* NULL, or where "N of M rows" lines and warnings go */
};

struct fleet_export_totals {
	uint64_t events;	/* written to the file */
	uint64_t processes;	/* distinct (host, boot, pid) among them */
	uint64_t hosts;
	uint64_t event_types;	/* metadata records defined */
	uint64_t no_meta;	/* event types without an event_meta row (named from events) */
	uint64_t stacks;	/* events written with their stack */
	uint64_t stacks_missing; /* events whose stack_id no stacks row has */
	char first_process[160]; /* "host pid N (comm)" of the first process */
};

/*
 * Writes the selected events to o->path. c's database holds the fleet
 * tables. 0; -ENOENT when no row matches (nothing is written then);
 * -EXDEV when o->format is V5 and the rows are of several processes (V5
 * has one process id per file; nothing is written); else a negative errno
 * (the server's message for a bad condition, a failed write, ...). err says
 * what failed, in words; a file begun and not finished is removed.
 */
int fleet_export(struct ch_client *c, const struct fleet_export_opts *o,
		 struct fleet_export_totals *t, char *err, size_t errlen);

#endif /* RINGPIPE_FLEET_EXPORT_H */
