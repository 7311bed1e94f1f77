/* SPDX-License-Identifier: MIT */
/*
 * A managed heap graph rebuilt from the heap-snapshot events of a trace
 * (what dotnet-gcdump reads), for 'ringpipe gcdump' and for the collect
 * engine, which stops a session once the snapshot is complete.
 *
 * The graph lives between an induced, blocking gen-2 GCStart (Depth >= 2,
 * Type 0, Reason 1) and the GCEnd with the same Count. Inside it, three
 * streams are read: nodes (GCBulkNode: address, size, type, edge count),
 * edges (GCBulkEdge: a flat list; node i owns the next EdgeCount values)
 * and root edges (GCBulkRootEdge). Each stream numbers its events from 0.
 * BulkType names the types and may come at any time. Whatever says the
 * graph may be wrong (a gap in a stream's Index, a malformed event, node
 * and edge streams that disagree) is counted, for the caller to judge.
 */
#ifndef RINGPIPE_TOOL_GC_HEAP_H
#define RINGPIPE_TOOL_GC_HEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/hmap.h"

#define GC_HEAP_PROVIDER "Microsoft-Windows-DotNETRuntime"
/* The GCHeapSnapshot keywords, enabled at Verbose, make the runtime walk
 * its heap. */
#define GC_HEAP_KEYWORDS "0x1980001"

struct gc_heap_type {
	uint64_t id;
	char *name;		/* NULL until its BulkType came */
	uint64_t count, bytes;
};

struct gc_heap {
	/* window */
	bool open, closed;
	uint32_t gc_count;
	/* streams: node, edge, root (gc_heap_stream_name) */
	uint32_t next_index[3];
	uint32_t index_gaps[3];
	uint64_t nodes, node_bytes, edges_expected, edges, roots;
	uint64_t roots_by_kind[6];
	uint64_t events_outside;	/* bulk events outside the window */
	uint64_t malformed;
	/* types */
	struct gc_heap_type *types;
	size_t ntypes, captypes;
	struct hmap type_index;		/* TypeID -> index + 1 */
};

extern const char *const gc_heap_stream_name[3];

/*
 * Reads the trace at path into h (zeroed by the caller); returns EventsLost,
 * or -1 with the reason in err (the file cannot be read, is empty, or the
 * reader stopped at malformed data).
 */
int64_t gc_heap_read_file(struct gc_heap *h, const char *path, char *err, size_t errlen);
/* Does the trace being written to fd (open for writing) hold a complete
 * heap snapshot yet (its GCEnd)? A torn tail is fine: it is still arriving. */
bool gc_heap_trace_complete(int fd);
void gc_heap_free(struct gc_heap *h);

#endif
