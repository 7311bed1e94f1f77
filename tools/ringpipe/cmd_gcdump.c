// SPDX-License-Identifier: MIT
/*
 * ringpipe gcdump: rebuild a managed heap graph from the heap-snapshot events
 * of a trace (what dotnet-gcdump does), and collect such a trace from a
 * process.
 *
 * The graph lives between an induced, blocking gen-2 GCStart (Depth >= 2,
 * Type 0, Reason 1) and the GCEnd with the same Count. Inside it, three
 * streams are read: nodes (GCBulkNode: address, size, type, edge count),
 * edges (GCBulkEdge: a flat list; node i owns the next EdgeCount values)
 * and root edges (GCBulkRootEdge). Each stream numbers its events from 0.
 * BulkType names the types and may come at any time.
 *
 * Unlike a reader that trusts the streams, this one refuses to print a graph
 * that may be wrong: any EventsLost, a gap in a stream's Index, or node and
 * edge streams that disagree (the sum of EdgeCount is not the number of edge
 * values) is reported with the numbers, and the exit status is 1.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bytebuf.h"
#include "cmds.h"
#include "hmap.h"
#include "nettrace.h"
#include "utf.h"

#define CLR_PROVIDER "Microsoft-Windows-DotNETRuntime"
#define GCHEAPSNAPSHOT_KEYWORDS "0x1980001"

enum clr_event_id {
	EV_GC_START = 1,
	EV_GC_END = 2,
	EV_BULK_TYPE = 15,
	EV_BULK_ROOT_EDGE = 16,
	EV_BULK_NODE = 18,
	EV_BULK_EDGE = 19,
};

enum { GC_REASON_INDUCED = 1, GC_TYPE_NONCONCURRENT = 0 };

/* x64 element sizes of the packed bulk arrays */
#define NODE_ELEM 32u
#define EDGE_ELEM 12u
#define ROOT_ELEM 21u
#define BULK_HDR 10u		/* Index u32, Count u32, ClrInstanceID u16 */

static const char gcdump_usage[] =
"usage: ringpipe gcdump report FILE.nettrace [--top N | --all]\n"
"       ringpipe gcdump collect -p PID [-o FILE.nettrace] [--timeout SECONDS]\n"
"                               [--buffer-mb N] [--buffering-mode block|drop]\n"
"\n"
"report   rebuilds the heap graph of the first induced gen-2 heap snapshot in\n"
"         the trace: nodes, edges, roots, and per type the object count and\n"
"         bytes (largest first; --top N rows, default 20; --all: every type,\n"
"         sorted by name). When the trace lost events, a stream has a gap in\n"
"         its Index, or the node and edge streams disagree, it says so with\n"
"         the numbers and prints no graph.\n"
"collect  enables " CLR_PROVIDER " with the GCHeapSnapshot keywords\n"
"         (" GCHEAPSNAPSHOT_KEYWORDS ", Verbose) in process PID through its\n"
"         diagnostic socket, which makes the runtime walk its heap; stops the\n"
"         session once the snapshot's GCEnd arrived (or after --timeout,\n"
"         default 30 s), then reports. Block buffering (default) loses\n"
"         nothing; drop may.\n"
"\n"
"Exit status: 0 with a complete graph; 1 when there is none or it is\n"
"incomplete; 2 on a usage error.\n";

struct type_stat {
	uint64_t id;
	char *name;
	uint64_t count, bytes;
};

struct heap {
	/* window */
	bool open, closed;
	uint32_t gc_count;
	/* streams */
	uint32_t next_index[3];		/* node, edge, root */
	uint32_t index_gaps[3];
	uint64_t nodes, node_bytes, edges_expected, edges, roots;
	uint64_t roots_by_kind[6];
	uint64_t events_outside;	/* bulk events outside the window */
	uint64_t malformed;
	/* types */
	struct type_stat *types;
	size_t ntypes, captypes;
	struct hmap type_index;		/* TypeID -> index + 1 */
	/* node types waiting for their BulkType (names may come late) */
};

static const char *stream_name[3] = { "GCBulkNode", "GCBulkEdge", "GCBulkRootEdge" };

static struct type_stat *type_get(struct heap *h, uint64_t id)
{
	uint64_t ix;

	if (hmap_get(&h->type_index, id, &ix))
		return &h->types[ix - 1];
	if (array_grow((void **)&h->types, &h->captypes, h->ntypes, sizeof(*h->types), 256))
		return NULL;
	h->types[h->ntypes] = (struct type_stat){ .id = id };
	if (hmap_put(&h->type_index, id, h->ntypes + 1))
		return NULL;
	return &h->types[h->ntypes++];
}

/* UTF-16LE, NUL-terminated, at p (at most end): its length in bytes with the
 * NUL, or 0 when unterminated. */
static size_t utf16z_len(const uint8_t *p, const uint8_t *end)
{
	const uint8_t *q;

	for (q = p; q + 1 < end; q += 2)
		if (!q[0] && !q[1])
			return (size_t)(q - p) + 2;
	return 0;
}

static void on_bulk_type(struct heap *h, const uint8_t *p, uint32_t len)
{
	const uint8_t *end = p + len, *q;
	uint32_t count, i;

	if (len < 6) {
		h->malformed++;
		return;
	}
	count = le32_get(p);
	q = p + 6;
	for (i = 0; i < count; i++) {
		struct type_stat *t;
		uint64_t id;
		uint32_t nparams;
		size_t slen;

		/* TypeID u64, ModuleID u64, TypeNameID u32, Flags u32,
		 * CorElementType u8, Name utf16z, TypeParameterCount u32, ... */
		if (end - q < 25) {
			h->malformed++;
			return;
		}
		id = le64_get(q);
		q += 25;
		slen = utf16z_len(q, end);
		if (!slen || end - q < (ptrdiff_t)slen + 4) {
			h->malformed++;
			return;
		}
		t = type_get(h, id);
		if (t && !t->name) {
			struct bytebuf b = { 0 };

			utf16le_to_utf8(&b, q, slen / 2 - 1);
			bb_append(&b, "", 1);
			if (!b.oom)
				t->name = (char *)b.p;
			else
				bb_free(&b);
		}
		q += slen;
		nparams = le32_get(q);
		q += 4;
		if ((uint64_t)(end - q) < (uint64_t)nparams * 8) {
			h->malformed++;
			return;
		}
		q += (size_t)nparams * 8;
	}
}

/* Checks a bulk header and this stream's Index; returns the element count. */
static int bulk_header(struct heap *h, int stream, const uint8_t *p, uint32_t len,
		       uint32_t elem, uint32_t *count)
{
	uint32_t index = le32_get(p);

	if (len < BULK_HDR) {
		h->malformed++;
		return -1;
	}
	*count = le32_get(p + 4);
	if ((uint64_t)*count * elem > len - BULK_HDR) {
		h->malformed++;
		return -1;
	}
	if (index != h->next_index[stream])
		h->index_gaps[stream] += index > h->next_index[stream] ?
					 index - h->next_index[stream] : 1;
	h->next_index[stream] = index + 1;
	return 0;
}

static void on_event(struct heap *h, const struct nt_rec *rec)
{
	const struct nt_meta *m = rec->meta;
	const uint8_t *p = rec->payload;
	uint32_t len = rec->payload_len, count, i;

	if (strcmp(m->provider, CLR_PROVIDER))
		return;
	switch (m->event_id) {
	case EV_BULK_TYPE:
		on_bulk_type(h, p, len);
		return;
	case EV_GC_START:
		/* Count u32, Depth u32, Reason u32, Type u32 */
		if (len >= 16 && !h->open && !h->closed && le32_get(p + 4) >= 2 &&
		    le32_get(p + 8) == GC_REASON_INDUCED && le32_get(p + 12) == GC_TYPE_NONCONCURRENT) {
			h->open = true;
			h->gc_count = le32_get(p);
		}
		return;
	case EV_GC_END:
		if (len >= 4 && h->open && !h->closed && le32_get(p) == h->gc_count)
			h->closed = true;
		return;
	case EV_BULK_NODE:
	case EV_BULK_EDGE:
	case EV_BULK_ROOT_EDGE:
		break;
	default:
		return;
	}
	if (!h->open || h->closed) {
		h->events_outside++;
		return;
	}
	if (m->event_id == EV_BULK_NODE) {
		if (bulk_header(h, 0, p, len, NODE_ELEM, &count))
			return;
		for (i = 0; i < count; i++) {
			const uint8_t *e = p + BULK_HDR + (size_t)i * NODE_ELEM;
			struct type_stat *t = type_get(h, le64_get(e + 16));
			uint64_t size = le64_get(e + 8);

			h->nodes++;
			h->node_bytes += size;
			h->edges_expected += le64_get(e + 24);
			if (t) {
				t->count++;
				t->bytes += size;
			}
		}
	} else if (m->event_id == EV_BULK_EDGE) {
		if (bulk_header(h, 1, p, len, EDGE_ELEM, &count))
			return;
		h->edges += count;
	} else {
		if (bulk_header(h, 2, p, len, ROOT_ELEM, &count))
			return;
		h->roots += count;
		for (i = 0; i < count; i++) {
			uint8_t kind = p[BULK_HDR + (size_t)i * ROOT_ELEM + 8];

			if (kind < 6)
				h->roots_by_kind[kind]++;
		}
	}
}

static void heap_free(struct heap *h)
{
	size_t i;

	for (i = 0; i < h->ntypes; i++)
		free(h->types[i].name);
	free(h->types);
	hmap_free(&h->type_index);
}

static int cmp_bytes_desc(const void *a, const void *b)
{
	const struct type_stat *x = a, *y = b;

	if (x->bytes != y->bytes)
		return x->bytes < y->bytes ? 1 : -1;
	return x->id < y->id ? -1 : x->id > y->id;
}

static const char *type_name(const struct type_stat *t, char *buf, size_t len)
{
	if (t->name)
		return t->name;
	snprintf(buf, len, "UNKNOWN 0x%" PRIx64, t->id);
	return buf;
}

static int cmp_name(const void *a, const void *b)
{
	const struct type_stat *x = a, *y = b;
	char bx[40], by[40];

	return strcmp(type_name(x, bx, sizeof(bx)), type_name(y, by, sizeof(by)));
}

/* Reads a trace held in memory into h; returns EventsLost or -errno. */
static int64_t heap_read(struct heap *h, const void *data, size_t len, bool tolerate_tail,
			 char *err, size_t errlen)
{
	struct nt_reader *r = nt_reader_new_mem(data, len);
	struct nt_rec rec;
	int64_t lost;
	int rc;

	if (!r)
		return -ENOMEM;
	while ((rc = nt_reader_next(r, &rec)) > 0) {
		on_event(h, &rec);
		if (tolerate_tail && h->closed)
			break;
	}
	if (rc < 0 && !tolerate_tail) {
		snprintf(err, errlen, "%s", nt_reader_errmsg(r));
		nt_reader_free(r);
		return rc;
	}
	lost = nt_reader_lost(r);
	nt_reader_free(r);
	return lost;
}

static int map_file(const char *path, int fd, void **map, size_t *len)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return tool_err("gcdump", "%s: %s", path, strerror(errno));
	*len = (size_t)st.st_size;
	if (!*len) {
		*map = NULL;
		return 0;
	}
	*map = mmap(NULL, *len, PROT_READ, MAP_PRIVATE, fd, 0);
	if (*map == MAP_FAILED)
		return tool_err("gcdump", "%s: %s", path, strerror(errno));
	return 0;
}

bool gcdump_trace_complete(int out_fd)
{
	struct heap h = { 0 };
	char path[64], err[8];
	void *map;
	size_t len;
	bool done;
	int fd;

	/* the output is open write-only: map it through a read-only open */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", out_fd);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	if (map_file("trace", fd, &map, &len) || !map) {
		close(fd);
		return false;
	}
	close(fd);
	heap_read(&h, map, len, true, err, sizeof(err));
	done = h.closed;
	munmap(map, len);
	heap_free(&h);
	return done;
}

static int report(const char *path, long top, bool all)
{
	struct heap h = { 0 };
	char err[256] = "";
	bool complete = true;
	void *map;
	size_t len, i, n;
	int64_t lost;
	int fd, rc = 0;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return tool_err("gcdump", "%s: %s", path, strerror(errno)), 1;
	if (map_file(path, fd, &map, &len)) {
		close(fd);
		return 1;
	}
	close(fd);
	lost = map ? heap_read(&h, map, len, false, err, sizeof(err)) : 0;
	if (map)
		munmap(map, len);
	if (!map || lost < 0) {
		tool_err("gcdump", "%s: %s", path, map ? err : "empty file");
		heap_free(&h);
		return 1;
	}
	printf("%s: heap snapshot of GC #%u\n", path, h.gc_count);
	if (!h.open) {
		printf("no heap snapshot: the trace has no induced gen-2 GCStart "
		       "(enable %s with keywords %s at level 5)\n", CLR_PROVIDER,
		       GCHEAPSNAPSHOT_KEYWORDS);
		heap_free(&h);
		return 1;
	}
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
			       h.index_gaps[i], stream_name[i]);
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
		heap_free(&h);
		return 1;
	}
	printf("nodes %" PRIu64 "\nedges %" PRIu64 "\nroots %" PRIu64
	       " (stack %" PRIu64 ", finalizer %" PRIu64 ", handle %" PRIu64 ", other %" PRIu64
	       ")\n", h.nodes, h.edges, h.roots, h.roots_by_kind[0], h.roots_by_kind[1],
	       h.roots_by_kind[2], h.roots_by_kind[3] + h.roots_by_kind[4] + h.roots_by_kind[5]);
	printf("bytes %" PRIu64 "\n", h.node_bytes);
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
	heap_free(&h);
	return rc;
}

static int collect(int argc, char **argv)
{
	const char *pid = NULL, *out = NULL, *timeout = "30", *buffer = "256",
		   *mode = "block";
	char outbuf[64], durbuf[32];
	uint64_t v;
	int i, rc;

	for (i = 0; i < argc; i++) {
		const char *a = argv[i];
		const char **dst = NULL;

		if (!strcmp(a, "-p") || !strcmp(a, "--process-id"))
			dst = &pid;
		else if (!strcmp(a, "-o") || !strcmp(a, "--output"))
			dst = &out;
		else if (!strcmp(a, "--timeout"))
			dst = &timeout;
		else if (!strcmp(a, "--buffer-mb"))
			dst = &buffer;
		else if (!strcmp(a, "--buffering-mode"))
			dst = &mode;
		else
			return tool_err("gcdump", "unknown option '%s' (see --help)", a), 2;
		if (i + 1 >= argc)
			return tool_err("gcdump", "%s needs a value", a), 2;
		*dst = argv[++i];
	}
	if (!pid)
		return tool_err("gcdump", "collect needs -p PID"), 2;
	if (parse_u64(timeout, 86400, &v) || !v)
		return tool_err("gcdump", "--timeout: '%s' is not 1..86400 seconds", timeout), 2;
	snprintf(durbuf, sizeof(durbuf), "%" PRIu64, v);
	if (!out) {
		snprintf(outbuf, sizeof(outbuf), "heap_%s.nettrace", pid);
		out = outbuf;
	}
	{
		char *cargv[] = {
			"collect", "-p", (char *)pid, "--providers",
			CLR_PROVIDER ":" GCHEAPSNAPSHOT_KEYWORDS ":5",
			"--buffering-mode", (char *)mode, "--buffer-mb", (char *)buffer,
			"--duration", durbuf, "--until-heap-snapshot", "--allow-loss",
			"-o", (char *)out, NULL,
		};

		rc = cmd_collect((int)(sizeof(cargv) / sizeof(*cargv)) - 1, cargv);
	}
	if (rc)
		return rc;
	return report(out, 20, false);
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

		if (!strcmp(argv[i], "--all")) {
			all = true;
		} else if (!strcmp(argv[i], "--top") && i + 1 < argc) {
			if (parse_u64(argv[++i], 1000000, &v))
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
