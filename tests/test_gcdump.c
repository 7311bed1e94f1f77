// SPDX-License-Identifier: MIT
/*
 * `ringpipe gcdump report`: a heap snapshot written through the library with
 * the CLR schemas (a small graph whose numbers the test knows) is rebuilt
 * exactly; a snapshot that lost a node block, whose node and edge streams
 * disagree, or that has no GCEnd is reported as incomplete with its numbers,
 * and no graph is printed. Against a real .NET runtime (tests/interop/DotnetApp),
 * `ringpipe gcdump collect` works with the runtime's defaults and agrees with
 * `dotnet-gcdump report` on the same heap.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <string.h>
#include <sys/file.h>

#include "clock.h"
#include "helpers.h"
#include "ipc_client.h"
#include "ringpipe/ringpipe.h"
#include "utf.h"

static const uint8_t clr_guid[16] = { 0x23, 0x0d, 0x3c, 0xe1, 0xbc, 0xcc, 0x12, 0x4e,
				      0x93, 0x1b, 0xd9, 0xcc, 0x2e, 0xee, 0x27, 0xe4 };

enum { GC_START = 1, GC_END = 2, BULK_TYPE = 15, ROOT_EDGE = 16, NODE = 18, EDGE = 19 };

static struct rp_event *ev[20];

static void define_clr(void)
{
	static const struct { uint32_t id; uint8_t version; uint64_t kw; } defs[] = {
		{ GC_START, 2, 0x1 }, { GC_END, 1, 0x1 }, { BULK_TYPE, 0, 0x80000 },
		{ ROOT_EDGE, 0, 0x100000 }, { NODE, 0, 0x100000 }, { EDGE, 0, 0x100000 },
	};
	struct rp_provider_opts po = { .sz = sizeof(po), .name = "Microsoft-Windows-DotNETRuntime",
				       .guid = clr_guid };
	struct rp_provider *p = rp_provider_new(&po);
	size_t i;

	cr_assert_not_null(p, "%s", rp_last_error());
	for (i = 0; i < sizeof(defs) / sizeof(*defs); i++) {
		struct rp_event_opts eo = { .sz = sizeof(eo), .id = defs[i].id, .name = "",
					    .version = defs[i].version, .level = 4,
					    .keywords = defs[i].kw };

		ev[defs[i].id] = rp_event_new(p, &eo);
		cr_assert_not_null(ev[defs[i].id], "%s", rp_last_error());
	}
}

static void emit(uint32_t id, const struct bytebuf *b)
{
	cr_assert(!b->oom, "event %u: out of memory building its payload", id);
	cr_assert_eq(rp_event_write(ev[id], b->p, b->len), 0);
}

static void gc_bracket(uint32_t id, uint32_t count)
{
	struct bytebuf b = { 0 };

	bb_append_u32(&b, count);
	if (id == GC_START) {
		bb_append_u32(&b, 2);		/* Depth */
		bb_append_u32(&b, 1);		/* Reason: Induced */
		bb_append_u32(&b, 0);		/* Type: NonConcurrentGC */
		bb_append_u16(&b, 0);
		bb_append_u64(&b, 0);		/* ClientSequenceNumber */
	} else {
		bb_append_u32(&b, 2);
		bb_append_u16(&b, 0);
	}
	emit(id, &b);
	bb_free(&b);
}

static void bulk_types(const char *const *names, uint32_t n)
{
	struct bytebuf b = { 0 };
	uint32_t i;

	bb_append_u32(&b, n);
	bb_append_u16(&b, 0);
	for (i = 0; i < n; i++) {
		bb_append_u64(&b, 0x1000 + i);	/* TypeID */
		bb_append_u64(&b, 0x77);	/* ModuleID */
		bb_append_u32(&b, 0);
		bb_append_u32(&b, 0);
		bb_append_u8(&b, 0x12);		/* ELEMENT_TYPE_CLASS */
		utf8_to_utf16z(&b, names[i]);
		bb_append_u32(&b, 0);		/* no type parameters */
	}
	emit(BULK_TYPE, &b);
	bb_free(&b);
}

/*
 * The test heap: NNODES objects; object k has type k % NTYPES, size
 * 24 + 8 * (k % NTYPES), and k % 3 edges (to objects k+1..). Nodes go out in
 * blocks of BLOCK, edges in blocks of BLOCK too; 5 roots.
 */
#define NNODES 10000u
#define NTYPES 4u
#define BLOCK 1000u

struct damage {
	uint32_t skip_node_block;	/* 1-based; 0: none */
	uint32_t extra_edges;		/* appended to the last edge block */
	bool no_gc_end;
};

static void write_heap(const struct damage *d, uint64_t *edges_out)
{
	static const char *const names[NTYPES] = { "Demo.Order", "System.String",
						   "Demo.Customer", "System.Object[]" };
	struct bytebuf nodes = { 0 }, edges = { 0 }, roots = { 0 };
	uint32_t k, nb = 0, ne = 0, node_index = 0, edge_index = 0;
	uint64_t total_edges = 0;

	gc_bracket(GC_START, 7);
	bulk_types(names, NTYPES);
	for (k = 0; k < NNODES; k++) {
		uint32_t j;

		if (!nb) {
			bb_append_u32(&nodes, node_index++);
			bb_append_u32(&nodes, 0);	/* Count, patched */
			bb_append_u16(&nodes, 0);
		}
		bb_append_u64(&nodes, 0x10000 + (uint64_t)k * 64);
		bb_append_u64(&nodes, 24 + 8 * (k % NTYPES));
		bb_append_u64(&nodes, 0x1000 + k % NTYPES);
		bb_append_u64(&nodes, k % 3);
		if (++nb == BLOCK || k + 1 == NNODES) {
			memcpy(nodes.p + 4, &nb, 4);
			if (!(d->skip_node_block && node_index == d->skip_node_block))
				emit(NODE, &nodes);
			nodes.len = 0;
			nb = 0;
		}
		for (j = 0; j < k % 3; j++) {
			if (!ne) {
				bb_append_u32(&edges, edge_index++);
				bb_append_u32(&edges, 0);
				bb_append_u16(&edges, 0);
			}
			bb_append_u64(&edges, 0x10000 + (uint64_t)((k + 1 + j) % NNODES) * 64);
			bb_append_u32(&edges, 0);
			total_edges++;
			if (++ne == BLOCK) {
				memcpy(edges.p + 4, &ne, 4);
				emit(EDGE, &edges);
				edges.len = 0;
				ne = 0;
			}
		}
	}
	for (k = 0; k < d->extra_edges; k++) {
		if (!ne) {
			bb_append_u32(&edges, edge_index++);
			bb_append_u32(&edges, 0);
			bb_append_u16(&edges, 0);
		}
		bb_append_u64(&edges, 0x10000);
		bb_append_u32(&edges, 0);
		ne++;
	}
	if (ne) {
		memcpy(edges.p + 4, &ne, 4);
		emit(EDGE, &edges);
	}
	bb_append_u32(&roots, 0);
	bb_append_u32(&roots, 5);
	bb_append_u16(&roots, 0);
	for (k = 0; k < 5; k++) {
		bb_append_u64(&roots, 0x10000 + (uint64_t)k * 64);
		bb_append_u8(&roots, (uint8_t)(k % 3));	/* stack, finalizer, handle */
		bb_append_u32(&roots, 0);
		bb_append_u64(&roots, 0xabc0 + k);
	}
	emit(ROOT_EDGE, &roots);
	if (!d->no_gc_end)
		gc_bracket(GC_END, 7);
	*edges_out = total_edges;
	bb_free(&nodes);
	bb_free(&edges);
	bb_free(&roots);
}

static void snapshot(const char *path, const struct damage *d, uint64_t *edges)
{
	static const struct rp_provider_config pc[] = {
		{ .name = "Microsoft-Windows-DotNETRuntime", .keywords = 0x1980001, .level = 5 },
	};
	struct rp_session_opts so = { .sz = sizeof(so), .providers = pc, .nproviders = 1,
				      .path = path, .buffer_bytes = 8 << 20,
				      .buffering = RP_BUFFERING_BLOCK };
	struct rp_session *s;

	define_clr();
	s = rp_session_start(&so);
	cr_assert_not_null(s, "%s", rp_last_error());
	write_heap(d, edges);
	cr_assert_eq(rp_session_stop(s), 0);
}

static int report(const char *path, const char *opts, struct bytebuf *out)
{
	char *cmd;
	int rc;

	cr_assert(asprintf(&cmd, "'%s' gcdump report '%s' %s 2>&1", th_tool(), path, opts) > 0);
	rc = th_run(cmd, out);
	free(cmd);
	bb_append(out, "", 1);
	return rc;
}

static void expect_line(const struct bytebuf *out, const char *line)
{
	cr_assert_not_null(strstr((const char *)out->p, line), "missing \"%s\" in:\n%s", line,
			   (const char *)out->p);
}

Test(gcdump, report_rebuilds_a_known_graph_exactly, .timeout = 60)
{
	char *dir = th_tmpdir(), path[512], line[128];
	struct damage d = { 0 };
	struct bytebuf out = { 0 };
	uint64_t edges, bytes[NTYPES] = { 0 }, count[NTYPES] = { 0 };
	static const char *const sorted[NTYPES] = { "Demo.Customer", "Demo.Order",
						    "System.Object[]", "System.String" };
	static const uint32_t sorted_type[NTYPES] = { 2, 0, 3, 1 };
	uint32_t k;

	snprintf(path, sizeof(path), "%s/heap.nettrace", dir);
	snapshot(path, &d, &edges);
	cr_assert_eq(report(path, "--all", &out), 0, "%s", (const char *)out.p);
	snprintf(line, sizeof(line), "\nnodes %u\n", NNODES);
	expect_line(&out, line);
	snprintf(line, sizeof(line), "\nedges %" PRIu64 "\n", edges);
	expect_line(&out, line);
	expect_line(&out, "\nroots 5 (stack 2, finalizer 2, handle 1, other 0)\n");
	snprintf(line, sizeof(line), "\ntypes %u\n", NTYPES);
	expect_line(&out, line);
	for (k = 0; k < NNODES; k++) {
		count[k % NTYPES]++;
		bytes[k % NTYPES] += 24 + 8 * (k % NTYPES);
	}
	{
		/* --all lists every type by name: check the rows and their order */
		const char *prev = NULL;

		for (k = 0; k < NTYPES; k++) {
			uint32_t t = sorted_type[k];
			const char *at;

			snprintf(line, sizeof(line), "%16" PRIu64 " %12" PRIu64 "  %s\n", bytes[t],
				 count[t], sorted[k]);
			at = strstr((const char *)out.p, line);
			cr_assert_not_null(at, "missing row \"%s\" in:\n%s", line, (const char *)out.p);
			cr_assert(!prev || at > prev, "rows sorted by name");
			prev = at;
		}
	}
	bb_free(&out);
	th_rmdir(dir);
}

Test(gcdump, report_refuses_a_graph_that_lost_a_node_block, .timeout = 60)
{
	char *dir = th_tmpdir(), path[512];
	struct damage d = { .skip_node_block = 3 };
	struct bytebuf out = { 0 };
	uint64_t edges;

	snprintf(path, sizeof(path), "%s/heap.nettrace", dir);
	snapshot(path, &d, &edges);
	cr_assert_eq(report(path, "", &out), 1, "%s", (const char *)out.p);
	expect_line(&out, "INCOMPLETE: 1 GCBulkNode events are missing (gaps in Index)");
	expect_line(&out, "no graph printed");
	cr_assert_null(strstr((const char *)out.p, "\ntypes "), "no type table");
	bb_free(&out);
	th_rmdir(dir);
}

Test(gcdump, report_refuses_disagreeing_node_and_edge_streams, .timeout = 60)
{
	char *dir = th_tmpdir(), path[512], line[160];
	struct damage d = { .extra_edges = 3 };
	struct bytebuf out = { 0 };
	uint64_t edges;

	snprintf(path, sizeof(path), "%s/heap.nettrace", dir);
	snapshot(path, &d, &edges);
	cr_assert_eq(report(path, "", &out), 1, "%s", (const char *)out.p);
	snprintf(line, sizeof(line), "INCOMPLETE: the nodes own %" PRIu64
		 " edges but the edge stream has %" PRIu64 "\n", edges, edges + 3);
	expect_line(&out, line);
	bb_free(&out);
	th_rmdir(dir);
}

Test(gcdump, report_refuses_a_snapshot_without_its_gc_end, .timeout = 60)
{
	char *dir = th_tmpdir(), path[512];
	struct damage d = { .no_gc_end = true };
	struct bytebuf out = { 0 };
	uint64_t edges;

	snprintf(path, sizeof(path), "%s/heap.nettrace", dir);
	snapshot(path, &d, &edges);
	cr_assert_eq(report(path, "", &out), 1, "%s", (const char *)out.p);
	expect_line(&out, "INCOMPLETE: the snapshot's GCEnd (Count 7) is missing");
	bb_free(&out);
	th_rmdir(dir);
}

Test(gcdump, usage_errors_say_what_is_wrong)
{
	struct bytebuf out = { 0 };
	char *cmd;

	cr_assert(asprintf(&cmd, "'%s' gcdump frobnicate 2>&1", th_tool()) > 0);
	cr_assert_eq(th_run(cmd, &out), 2);
	bb_append(&out, "", 1);
	cr_assert_not_null(strstr((const char *)out.p, "unknown subcommand 'frobnicate'"));
	free(cmd);
	out.len = 0;
	cr_assert(asprintf(&cmd, "'%s' gcdump collect 2>&1", th_tool()) > 0);
	cr_assert_eq(th_run(cmd, &out), 2);
	bb_append(&out, "", 1);
	cr_assert_not_null(strstr((const char *)out.p, "collect needs -p PID"));
	free(cmd);
	bb_free(&out);
}

Test(gcdump, report_without_a_snapshot_says_only_that)
{
	char *dir = th_tmpdir(), path[512];
	struct bytebuf out = { 0 };
	char *cmd;

	snprintf(path, sizeof(path), "%s/g.nettrace", dir);
	cr_assert(asprintf(&cmd, "'%s' gen -o '%s' --events 100 >/dev/null", th_tool(), path) > 0);
	cr_assert_eq(th_run(cmd, NULL), 0);
	free(cmd);
	cr_assert_eq(report(path, "", &out), 1, "%s", (const char *)out.p);
	expect_line(&out, ": no heap snapshot: the trace has no induced gen-2 GCStart");
	cr_assert_null(strstr((const char *)out.p, "heap snapshot of GC #"),
		       "no snapshot, yet a GC number:\n%s", (const char *)out.p);
	bb_free(&out);
	th_rmdir(dir);
}

/* ---- against a real .NET runtime ------------------------------------------ */


static uint64_t now_ms(void)
{
	return rp_clock_mono_ns() / 1000000u;
}

/* Starts DotnetApp; returns its pid once its diagnostic socket exists. */
static pid_t app_start(const char *dll)
{
	char sock[IPCC_PATH_MAX];
	int devnull;
	pid_t pid = fork();
	uint64_t deadline;

	cr_assert_geq(pid, 0);
	if (pid == 0) {
		devnull = open("/dev/null", O_WRONLY);
		dup2(devnull, STDOUT_FILENO);
		execlp("dotnet", "dotnet", dll, "--duration", "120", (char *)NULL);
		_exit(127);
	}
	for (deadline = now_ms() + 120000; now_ms() < deadline; usleep(50000))
		if (!ipcc_find_socket(pid, sock, sizeof(sock)))
			return pid;
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	cr_assert_fail("DotnetApp (pid %d) never created its diagnostic socket", (int)pid);
	return -1;
}

/* Digits with thousands separators ("1,317") */
static uint64_t grouped(const char **p)
{
	uint64_t v = 0;

	while (**p == ' ')
		(*p)++;
	for (; (**p >= '0' && **p <= '9') || **p == ','; (*p)++)
		if (**p != ',')
			v = v * 10 + (uint64_t)(**p - '0');
	return v;
}

/*
 * Objects of type name in a `dotnet-gcdump report`: rows are
 * "  <avg bytes>  <count>  <Type>[ (Bytes > N)]  [<module>]", one per size
 * bucket of a type, added up here.
 */
static uint64_t gcdump_count(const char *rep, const char *name)
{
	const char *line;
	size_t nl = strlen(name);
	uint64_t total = 0;

	for (line = rep; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
		const char *p = line, *t;
		uint64_t count;

		grouped(&p);
		count = grouped(&p);
		if (strncmp(p, "  ", 2))
			continue;
		t = p + 2;
		if (!strncmp(t, name, nl) && (!strncmp(t + nl, "  [", 3) ||
					      !strncmp(t + nl, " (Bytes > ", 10)))
			total += count;
	}
	return total;
}

static uint64_t gcdump_total_objects(const char *rep)
{
	const char *line;
	uint64_t total = 0;

	for (line = rep; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
		const char *p = line;
		uint64_t count;

		grouped(&p);
		count = grouped(&p);
		if (!strncmp(p, "  ", 2) && strstr(p, "  [") && p[2] != ' ')
			total += count;
	}
	return total;
}

static uint64_t value_after(const char *text, const char *key)
{
	const char *at = strstr(text, key);

	cr_assert_not_null(at, "no \"%s\" in:\n%.3000s", key, text);
	return strtoull(at + strlen(key), NULL, 10);
}

static void dotnet_gcdump_report(pid_t app, struct bytebuf *out)
{
	char *cmd;

	out->len = 0;
	cr_assert(asprintf(&cmd, "'%s/dotnet-gcdump' report -p %d 2>/dev/null", th_dotnet_tools(),
			   (int)app) > 0);
	cr_assert_eq(th_run(cmd, out), 0, "dotnet-gcdump report -p %d failed", (int)app);
	free(cmd);
}

static void ringpipe_gcdump(pid_t app, const char *file, struct bytebuf *out)
{
	char *cmd;
	int rc;

	out->len = 0;
	cr_assert(asprintf(&cmd, "'%s' gcdump collect -p %d -o '%s' 2>&1", th_tool(),
			   (int)app, file) > 0);
	rc = th_run(cmd, out);
	free(cmd);
	cr_assert_eq(rc, 0, "ringpipe gcdump collect exited %d:\n%.3000s", rc,
		     out->p ? (char *)out->p : "");
	cr_assert_null(strstr((char *)out->p, "--buffering-mode"), "an option nobody typed is "
		       "blamed:\n%.3000s", (char *)out->p);
	cr_assert_null(strstr((char *)out->p, "ringpipe collect:"), "messages name the wrong "
		       "command:\n%.3000s", (char *)out->p);
	expect_line(out, "\ncomplete: no events lost");
}

/* Our report (--all) against dotnet-gcdump's of the same heap. */
static void expect_same_heap(const char *rep, const char *theirs)
{
	const char *line, *g, *ls;
	uint64_t nodes = value_after(rep, "\nnodes "), bytes = value_after(rep, "\nbytes ");
	uint64_t compared = 0;

	cr_assert_eq(gcdump_total_objects(theirs), nodes,
		     "dotnet-gcdump lists %" PRIu64 " objects, ringpipe %" PRIu64 ":\n%.4000s",
		     gcdump_total_objects(theirs), nodes, theirs);
	g = strstr(theirs, "GC Heap bytes");
	cr_assert_not_null(g, "%.2000s", theirs);
	for (ls = g; ls > theirs && ls[-1] != '\n'; ls--)
		;
	cr_assert_eq(grouped(&ls), bytes, "GC Heap bytes: dotnet-gcdump %.40s, ringpipe %" PRIu64,
		     g - 20 > theirs ? g - 20 : theirs, bytes);
	/* per type: names both tools spell alike (no generics, arrays or
	 * compiler-generated names), each once in our table */
	for (line = strstr(rep, "  type\n"); line && (line = strchr(line, '\n'));) {
		const char *p = ++line;
		char nm[256], row[260];
		uint64_t count;

		grouped(&p);
		count = grouped(&p);
		if (strncmp(p, "  ", 2) || !count)
			continue;
		snprintf(nm, sizeof(nm), "%.*s", (int)strcspn(p + 2, "\n"), p + 2);
		snprintf(row, sizeof(row), "  %s\n", nm);
		if (strpbrk(nm, "`[<, ") || strstr(strstr(rep, row) + 1, row))
			continue;
		cr_assert_eq(gcdump_count(theirs, nm), count,
			     "%s: dotnet-gcdump counts %" PRIu64 ", ringpipe %" PRIu64, nm,
			     gcdump_count(theirs, nm), count);
		compared++;
	}
	cr_assert_gt(compared, 20, "only %" PRIu64 " types compared:\n%.3000s", compared, rep);
}

/*
 * .NET 10 has no Block buffering (CollectTracing6): by default `ringpipe
 * gcdump collect` asks for it, is refused, and must fall back to Drop with
 * a warning, as dotnet-gcdump does, instead of failing. The graph must then
 * be the one dotnet-gcdump reports for the same heap: the same number of
 * objects, the same bytes, and per type the same count. The app's heap
 * settles after its start (and the first session's own objects), so each
 * round takes our snapshot between two of dotnet-gcdump's; when those two
 * agree, the heap held still and ours must be the same.
 */
Test(gcdump_interop, collect_works_on_dotnet_and_agrees_with_dotnet_gcdump, .timeout = 300)
{
	TH_NEED_DOTNET_TOOL("dotnet-gcdump");
	const char *dll = th_dotnet_app();
	char *dir = th_tmpdir(), file[512];
	struct bytebuf out = { 0 }, rep = { 0 }, before = { 0 }, after = { 0 };
	pid_t app = app_start(dll);
	int round;

	for (round = 0; round < 5; round++) {
		snprintf(file, sizeof(file), "%s/heap%d.nettrace", dir, round);
		dotnet_gcdump_report(app, &before);
		ringpipe_gcdump(app, file, &out);
		dotnet_gcdump_report(app, &after);
		if (gcdump_total_objects((char *)before.p) == gcdump_total_objects((char *)after.p))
			break;
	}
	cr_assert_lt(round, 5, "the app's heap never held still between two dotnet-gcdump "
		     "snapshots (%" PRIu64 " then %" PRIu64 " objects)",
		     gcdump_total_objects((char *)before.p), gcdump_total_objects((char *)after.p));
	rep.len = 0;
	cr_assert_eq(report(file, "--all", &rep), 0, "%s", (char *)rep.p);
	expect_same_heap((char *)rep.p, (char *)after.p);

	kill(app, SIGKILL);
	waitpid(app, NULL, 0);
	bb_free(&out);
	bb_free(&rep);
	bb_free(&before);
	bb_free(&after);
	th_rmdir(dir);
}
