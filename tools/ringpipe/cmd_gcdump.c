// SPDX-License-Identifier: MIT
/*
 * ringpipe gcdump: the managed heap graph of a trace's heap snapshot (what
 * dotnet-gcdump shows), and collecting such a trace from a process. The
 * graph is rebuilt by lib/gc_heap.c; this prints it.
 *
 * Unlike a reader that trusts the streams, this one refuses to print a graph
 * that may be wrong: any EventsLost, a gap in a stream's Index, or node and
 * edge streams that disagree (the sum of EdgeCount is not the number of edge
 * values) is reported with the numbers, and the exit status is 1.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bytebuf.h"
#include "cmds.h"
#include "collect.h"
#include "config.h"
#include "gc_heap.h"
#include "tool_util.h"

#define NS_PER_S 1000000000ull

static const char gcdump_usage[] =
"usage: ringpipe gcdump report FILE.nettrace [--top N | --all]\n"
"       ringpipe gcdump collect -p PID [-o FILE.nettrace] [--force]\n"
"                               [--timeout TIME] [--buffer-mb N]\n"
"                               [--buffering-mode block|drop]\n"
"\n"
"report   rebuilds the heap graph of the first induced gen-2 heap snapshot in\n"
"         the trace: nodes, edges, roots, and per type the object count and\n"
"         bytes (largest first; --top N rows, default 20; --all: every type,\n"
"         sorted by name). When the trace lost events, a stream has a gap in\n"
"         its Index, or the node and edge streams disagree, it says so with\n"
"         the numbers and prints no graph.\n"
"collect  enables " GC_HEAP_PROVIDER " with the GCHeapSnapshot keywords\n"
"         (" GC_HEAP_KEYWORDS ", Verbose) in process PID through its\n"
"         diagnostic socket, which makes the runtime walk its heap; stops the\n"
"         session once the snapshot's GCEnd arrived (or after --timeout,\n"
"         default 30 s; at most 24 h, written as for ringpipe collect\n"
"         --duration: 90, 1.5m, 00:01:30), then reports. Block buffering\n"
"         loses nothing; drop may. By default Block is asked for, and a\n"
"         runtime without it (.NET 10 and older) is asked again in Drop, with\n"
"         a warning, as dotnet-gcdump does; the report then says whether the\n"
"         snapshot is complete. --buffering-mode block fails instead.\n"
"         The default FILE is NAME_PID_YYYYMMDD_HHMMSS_heap.nettrace; an\n"
"         existing FILE is kept unless --force.\n"
"\n"
"Exit status: 0 with a complete graph; 1 when there is none or it is\n"
"incomplete; 2 on a usage error.\n";

static int cmp_bytes_desc(const void *a, const void *b)
{
	const struct gc_heap_type *x = a, *y = b;

	if (x->bytes != y->bytes)
		return x->bytes < y->bytes ? 1 : -1;
	return x->id < y->id ? -1 : x->id > y->id;
}

static const char *type_name(const struct gc_heap_type *t, char *buf, size_t len)
{
	if (t->name)
		return t->name;
	snprintf(buf, len, "UNKNOWN 0x%" PRIx64, t->id);
	return buf;
}

static int cmp_name(const void *a, const void *b)
{
	const struct gc_heap_type *x = a, *y = b;
	char bx[40], by[40];

	return strcmp(type_name(x, bx, sizeof(bx)), type_name(y, by, sizeof(by)));
}

static int report(const char *path, long top, bool all)
{
	struct gc_heap h = { 0 };
	char err[256] = "";
	bool complete = true;
	size_t i, n;
	int64_t lost;
	int rc = 0;

	lost = gc_heap_read_file(&h, path, err, sizeof(err));
	if (lost < 0) {
		tool_err("gcdump", "%s: %s", path, err);
		gc_heap_free(&h);
		return 1;
	}
	if (!h.open) {
		printf("%s: no heap snapshot: the trace has no induced gen-2 GCStart "
		       "(enable %s with keywords %s at level 5)\n", path, GC_HEAP_PROVIDER,
		       GC_HEAP_KEYWORDS);
		gc_heap_free(&h);
		return 1;
	}
	printf("%s: heap snapshot of GC #%u\n", path, h.gc_count);
	if (!h.closed) {
		printf("INCOMPLETE: the snapshot's GCEnd (Count %u) is missing\n", h.gc_count);
		complete = false;
	}
	if (lost) {
		printf("INCOMPLETE: the trace lost %" PRId64 " events\n", lost);
		complete = false;
	}
	for (i = 0; i < 3; i++) {
		if (h.index_gaps[i]) {
			printf("INCOMPLETE: %" PRIu32 " %s events are missing (gaps in Index)\n",
			       h.index_gaps[i], gc_heap_stream_name[i]);
			complete = false;
		}
	}
	if (h.edges != h.edges_expected) {
		printf("INCOMPLETE: the nodes own %" PRIu64 " edges but the edge stream has %"
		       PRIu64 "\n", h.edges_expected, h.edges);
		complete = false;
	}
	if (h.malformed) {
		printf("INCOMPLETE: %" PRIu64 " malformed heap events\n", h.malformed);
		complete = false;
	}
	if (!complete) {
		printf("no graph printed: it would not be the heap (%" PRIu64 " nodes, %" PRIu64
		       " edges, %" PRIu64 " roots seen)\n", h.nodes, h.edges, h.roots);
		gc_heap_free(&h);
		return 1;
	}
	printf("nodes %" PRIu64 "\nedges %" PRIu64 "\nroots %" PRIu64
	       " (stack %" PRIu64 ", finalizer %" PRIu64 ", handle %" PRIu64 ", other %" PRIu64
	       ")\n", h.nodes, h.edges, h.roots, h.roots_by_kind[0], h.roots_by_kind[1],
	       h.roots_by_kind[2], h.roots_by_kind[3] + h.roots_by_kind[4] + h.roots_by_kind[5]);
	printf("bytes %" PRIu64 "\n", h.node_bytes);
	printf("complete: no events lost, no gaps in the node, edge and root streams\n");
	/* types that own no node (named only) are not part of the graph */
	for (i = n = 0; i < h.ntypes; i++)
		if (h.types[i].count)
			h.types[n++] = h.types[i];
		else
			free(h.types[i].name);
	h.ntypes = n;
	printf("types %zu\n", n);
	array_sort(h.types, n, sizeof(*h.types), all ? cmp_name : cmp_bytes_desc);
	printf("%16s %12s  %s\n", "bytes", "count", "type");
	for (i = 0; i < n && (all || (long)i < top); i++) {
		char buf[40];

		printf("%16" PRIu64 " %12" PRIu64 "  %s\n", h.types[i].bytes, h.types[i].count,
		       type_name(&h.types[i], buf, sizeof(buf)));
	}
	gc_heap_free(&h);
	return rc;
}

static bool snapshot_complete(int trace_fd, void *ctx)
{
	(void)ctx;
	return gc_heap_trace_complete(trace_fd);
}

static int collect(int argc, char **argv)
{
	/* the snapshot is judged by report, which says what was lost */
	struct collect_opts o = { .providers = GC_HEAP_PROVIDER ":" GC_HEAP_KEYWORDS ":5",
				  .buffering = RP_BUFFERING_BLOCK, .block_fallback = true,
				  .rundown = true, .buffer_mb = COLLECT_DEFAULT_BUFFER_MB,
				  .duration_ns = 30 * NS_PER_S, .allow_loss = true,
				  .done = snapshot_complete, .tool = "gcdump" };
	char outbuf[512], name[256];
	uint64_t n;
	int i, rc;

	for (i = 0; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			fputs(gcdump_usage, stdout);
			return 0;
		}
		if (!strcmp(a, "--force")) {
			o.force = true;
			continue;
		}
		if (strcmp(a, "-p") && strcmp(a, "--process-id") && strcmp(a, "-o") &&
		    strcmp(a, "--output") && strcmp(a, "--timeout") && strcmp(a, "--buffer-mb") &&
		    strcmp(a, "--buffering-mode"))
			return tool_err("gcdump", "unknown option '%s' (see --help)", a), 2;
		if (!v)
			return tool_err("gcdump", "%s needs a value", a), 2;
		i++;
		if (!strcmp(a, "-p") || !strcmp(a, "--process-id")) {
			if ((rc = tool_parse_pid("gcdump", v, &o.pid)))
				return rc;
		} else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
			o.out = v;
		} else if (!strcmp(a, "--timeout")) {
			if (tool_parse_duration(v, 86400 * NS_PER_S, &o.duration_ns))
				return tool_err("gcdump", "--timeout takes a time from 1 ns to 24 h "
						"(SECONDS, 500ms, 2m, HH:MM:SS...), not '%s'", v), 2;
		} else if (!strcmp(a, "--buffer-mb")) {
			if (tool_parse_u64(v, COLLECT_MAX_BUFFER_MB, &n) || !n)
				return tool_err("gcdump", "--buffer-mb must be between 1 and %u, not '%s'",
						COLLECT_MAX_BUFFER_MB, v), 2;
			o.buffer_mb = (uint32_t)n;
		} else if (rp_buffering_parse(v, &o.buffering)) {
			return tool_err("gcdump", "--buffering-mode must be drop or block, not '%s'",
					v), 2;
		} else {
			/* asked for by name: no quiet fallback */
			o.block_fallback = false;
		}
	}
	if (!o.pid)
		return tool_err("gcdump", "collect needs -p PID"), 2;
	if (!o.out) {
		tool_process_name(o.pid, name, sizeof(name));
		tool_output_name(name, o.pid, "_heap.nettrace", outbuf, sizeof(outbuf));
		o.out = outbuf;
	}
	rc = collect_run(&o);
	if (rc)
		return rc;
	return report(o.out, 20, false);
}

int cmd_gcdump(int argc, char **argv)
{
	long top = 20;
	bool all = false;
	const char *file = NULL;
	int i;

	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		fputs(gcdump_usage, argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	if (!strcmp(argv[1], "collect"))
		return collect(argc - 2, argv + 2);
	if (strcmp(argv[1], "report"))
		return tool_err("gcdump", "unknown subcommand '%s' (report or collect)", argv[1]), 2;
	for (i = 2; i < argc; i++) {
		uint64_t v;

		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			fputs(gcdump_usage, stdout);
			return 0;
		} else if (!strcmp(argv[i], "--all")) {
			all = true;
		} else if (!strcmp(argv[i], "--top") && i + 1 < argc) {
			if (tool_parse_u64(argv[++i], 1000000, &v))
				return tool_err("gcdump", "--top: '%s' is not a count", argv[i]), 2;
			top = (long)v;
		} else if (argv[i][0] == '-' || file) {
			return tool_err("gcdump", "unexpected argument '%s' (see --help)", argv[i]), 2;
		} else {
			file = argv[i];
		}
	}
	if (!file)
		return tool_err("gcdump", "report needs a FILE"), 2;
	return report(file, top, all);
}
