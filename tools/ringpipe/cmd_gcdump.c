// SPDX-License-Identifier: MIT
/*
 * ringpipe gcdump: the managed heap graph of a trace's heap snapshot (what
 * dotnet-gcdump shows), and collecting such a trace from a process. The
 * graph is rebuilt by trace/gc_heap.c; this prints it.
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

#include "util/bytebuf.h"
#include "cmds.h"
#include "capture/collect.h"
#include "session/config.h"
#include "trace/gc_heap.h"
#include "common/tool_opts.h"
#include "common/tool_util.h"

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
"         existing FILE is kept unless --force.\n";

static const char gcdump_usage_end[] =
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

enum { GCDUMP_BUFFERING = 1 };

#define GCDUMP(m) struct collect_opts, m

static const struct tool_opt gcdump_collect_opts[] = {
	TOOL_UINT("process-id", 'p', "PID", 1, INT32_MAX, GCDUMP(pid), "the process",
		  .bad = "takes a process id (a whole number > 0)"),
	TOOL_STRING("output", 'o', "FILE", GCDUMP(out),
		    "the trace (default: NAME_PID_YYYYMMDD_HHMMSS_heap.nettrace)"),
	TOOL_FLAG("force", 0, GCDUMP(force), "overwrite FILE if it exists"),
	TOOL_DURATION("timeout", 0, "TIME", 1, 86400 * NS_PER_S, GCDUMP(duration_ns),
		      "stop waiting for the snapshot after TIME (default 30 s)",
		      .bad = "takes a time from 1 ns to 24 h (SECONDS, 500ms, 2m, HH:MM:SS...)"),
	TOOL_UINT("buffer-mb", 0, "N", 1, COLLECT_MAX_BUFFER_MB, GCDUMP(buffer_mb),
		  "the runtime's buffer, 1..1048576 MB (default 256)"),
	TOOL_TAKE(TOOL_OPT_STRING, "buffering-mode", 0, "block|drop", GCDUMP_BUFFERING,
		  "block only, or drop (default: block, else drop)"),
	TOOL_OPTS_END
};

static int gcdump_collect_take(void *cfg, const struct tool_opt *o, char *v, uint64_t num)
{
	struct collect_opts *c = cfg;

	/* --buffering-mode, the only one */
	if (rp_buffering_parse(v, &c->buffering))
		return tool_err("gcdump", "--buffering-mode must be drop or block, not '%s'", v), 2;
	/* asked for by name: no quiet fallback */
	c->block_fallback = false;
	return 0;
}

static const struct tool_cmd gcdump_collect_cmd = {
	.name = "gcdump collect", .usage = gcdump_usage, .usage_end = gcdump_usage_end,
	.opts = gcdump_collect_opts, .take = gcdump_collect_take,
};

struct gcdump_report_cfg {
	uint64_t top;
	bool all;
};

static const struct tool_opt gcdump_report_opts[] = {
	TOOL_UINT("top", 0, "N", 0, 1000000, struct gcdump_report_cfg, top,
		  "the N types with the most bytes (default 20)", .bad = "takes a count"),
	TOOL_FLAG("all", 0, struct gcdump_report_cfg, all, "every type, sorted by name"),
	TOOL_OPTS_END
};

static const struct tool_cmd gcdump_report_cmd = {
	.name = "gcdump report", .usage = gcdump_usage, .usage_end = gcdump_usage_end,
	.opts = gcdump_report_opts, .max_args = 1,
};

/* argv[0] is "collect" */
static int collect(int argc, char **argv)
{
	/* the snapshot is judged by report, which says what was lost */
	struct collect_opts o = { .providers = GC_HEAP_PROVIDER ":" GC_HEAP_KEYWORDS ":5",
				  .buffering = RP_BUFFERING_BLOCK, .block_fallback = true,
				  .rundown = true, .buffer_mb = COLLECT_DEFAULT_BUFFER_MB,
				  .duration_ns = 30 * NS_PER_S, .allow_loss = true,
				  .done = snapshot_complete, .tool = "gcdump" };
	struct tool_args rest;
	char outbuf[512], name[256];
	int rc = tool_opts_parse(&gcdump_collect_cmd, argc, argv, &o, &rest);

	if (rc != TOOL_OPTS_RUN)
		return rc;
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

static const struct tool_opt gcdump_opts[] = { TOOL_OPTS_END };
static const struct tool_cmd *const gcdump_subs[] = { &gcdump_report_cmd, &gcdump_collect_cmd,
						      NULL };
static const struct tool_cmd gcdump_cmd = {
	.name = "gcdump", .usage = gcdump_usage, .usage_end = gcdump_usage_end,
	.opts = gcdump_opts, .also = gcdump_subs,
};

int cmd_gcdump(int argc, char **argv)
{
	struct gcdump_report_cfg c = { .top = 20 };
	struct tool_args rest;
	int rc;

	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		tool_opts_help(argc < 2 ? stderr : stdout, &gcdump_cmd);
		return argc < 2 ? 2 : 0;
	}
	if (!strcmp(argv[1], "collect"))
		return collect(argc - 1, argv + 1);
	if (strcmp(argv[1], "report"))
		return tool_err("gcdump", "unknown subcommand '%s' (report or collect)", argv[1]), 2;
	rc = tool_opts_parse(&gcdump_report_cmd, argc - 1, argv + 1, &c, &rest);
	if (rc != TOOL_OPTS_RUN)
		return rc;
	if (!rest.argc)
		return tool_err("gcdump", "report needs a FILE"), 2;
	return report(rest.argv[0], (long)c.top, c.all);
}
