// SPDX-License-Identifier: MIT
/*
 * ringpipe-demo as a managed runtime, judged by TraceEvent.
 *
 * decode: a session through the demo's IPC socket (`ringpipe collect`, the
 * GCHeapSnapshot keywords dotnet-gcdump uses, rundown on) captures ordinary
 * GCs, an induced gen-2 GC with a heap walk, rundown and SessionEnd.
 * TraceEvent's CLR parsers (TraceDump "clr") must decode every such event
 * with the field values the demo says it wrote (--expect), and the bulk
 * events' elements, decoded one by one through TraceEvent's typed accessors
 * (TraceDump "heap"), must add up to the demo's --heap-report and fold to
 * the same digest.
 *
 * rundown: 8 JIT threads publish methods throughout; every method published
 * before rundown began appears exactly once, none twice, and every
 * MethodDCEndVerbose carries the fields derived from its MethodID (nothing
 * torn).
 *
 * Without dotnet or the TraceEvent dumper these skip with the reason, unless
 * RINGPIPE_REQUIRE_INTEROP=1.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <sys/wait.h>

#include "helpers.h"

/* `ringpipe collect` from the demo into path, with rundown. */
static void collect(struct th_demo *d, const char *providers, int seconds, const char *path)
{
	struct bytebuf out = { 0 };
	char *cmd = th_fmt("'%s' collect -p %d --providers '%s' --duration %d -o '%s' 2>&1", th_tool(),
			(int)d->pid, providers, seconds, path);
	int rc = th_run(cmd, &out);

	cr_assert_eq(rc, 0, "%s: exit %d: %s", cmd, rc, out.p ? (char *)out.p : "");
	free(cmd);
	bb_free(&out);
}

static void tracedump(const char *dll, const char *mode, const char *path, struct bytebuf *out)
{
	char *cmd = th_fmt("dotnet '%s' %s '%s'", dll, mode, path);
	int rc = th_run(cmd, out);

	cr_assert_eq(rc, 0, "TraceDump %s %s failed (exit %d): %.2000s", mode, path, rc,
		     out->p ? (char *)out->p : "");
	free(cmd);
}

/* ---- lines of "Name\tKey=Value\t..." ---------------------------------------- */

struct lines {
	char **v;
	size_t n;
	bool *used;
};

/* Splits text (modified in place) into lines, skipping "#..." and empty ones. */
static void split(char *text, struct lines *l)
{
	size_t cap = 0;
	char *save = NULL, *s;

	l->v = NULL;
	l->n = 0;
	for (s = strtok_r(text, "\n", &save); s; s = strtok_r(NULL, "\n", &save)) {
		if (!*s || *s == '#')
			continue;
		if (l->n == cap) {
			cap = cap ? cap * 2 : 1024;
			l->v = realloc(l->v, cap * sizeof(*l->v));
			cr_assert(l->v);
		}
		l->v[l->n++] = s;
	}
	l->used = calloc(l->n + 1, 1);
}

static size_t name_len(const char *line)
{
	const char *t = strchr(line, '\t');

	return t ? (size_t)(t - line) : strlen(line);
}

/* The value of key in line (up to the next tab), or NULL. */
static const char *field(const char *line, const char *key, size_t *len)
{
	size_t kl = strlen(key);
	const char *p = strchr(line, '\t');

	while (p) {
		p++;
		if (!strncmp(p, key, kl) && p[kl] == '=') {
			const char *v = p + kl + 1, *e = strchr(v, '\t');

			*len = e ? (size_t)(e - v) : strlen(v);
			return v;
		}
		p = strchr(p, '\t');
	}
	return NULL;
}

/* Does decoded line `got` have the name and every Key=Value of `want`? */
static bool matches(const char *want, const char *got)
{
	size_t nl = name_len(want);
	const char *p;

	if (nl != name_len(got) || strncmp(want, got, nl))
		return false;
	for (p = strchr(want, '\t'); p; p = strchr(p + 1, '\t')) {
		const char *eq = strchr(p + 1, '='), *end = strchr(p + 1, '\t'), *v;
		char key[128];
		size_t vl, wl;

		if (!eq || (end && eq > end) || (size_t)(eq - p - 1) >= sizeof(key))
			return false;
		memcpy(key, p + 1, (size_t)(eq - p - 1));
		key[eq - p - 1] = 0;
		wl = end ? (size_t)(end - eq - 1) : strlen(eq + 1);
		v = field(got, key, &vl);
		if (!v || vl != wl || strncmp(v, eq + 1, wl))
			return false;
	}
	return true;
}

static size_t count_named(const struct lines *l, const char *name)
{
	size_t i, n = 0, k = strlen(name);

	for (i = 0; i < l->n; i++)
		if (name_len(l->v[i]) == k && !strncmp(l->v[i], name, k))
			n++;
	return n;
}

static const char *text(struct bytebuf *b)
{
	return b->p ? (const char *)b->p : "";
}

/* ---- decode -------------------------------------------------------------- */

/* A line of a rundown event (what each session's rundown writes anew) */
static bool is_rundown(const char *line)
{
	return !strncmp(line, "Method/DCStop", 13) || !strncmp(line, "Runtime/Start\t", 14) ||
	       (!strncmp(line, "Loader/", 7) && strstr(line, "DCStop\t") &&
		strstr(line, "DCStop\t") < strchr(line, '\t') + 1);
}

/* How many rundowns the demo ran, from its stderr (after it exited) */
static unsigned int rundowns_of(const struct th_demo *d)
{
	struct bytebuf err = { 0 };
	unsigned int n = 0;
	const char *p;

	cr_assert_eq(th_read_file(d->err, &err), 0);
	for (p = strstr(text(&err), ": published-before "); p;
	     p = strstr(p + 1, ": published-before "))
		n++;
	bb_free(&err);
	return n;
}

Test(runtime, traceevent_decodes_gc_heap_dump_and_rundown_as_written, .timeout = 240)
{
	TH_NEED_TRACEDUMP(dll);
	struct bytebuf clr = { 0 }, heap = { 0 }, expect = { 0 }, report = { 0 };
	struct lines got, want;
	struct th_demo d;
	char *dir = th_tmpdir(), *trace, *exp, *rep;
	char *args[] = { "--heap-nodes", "3000", "--alloc-threads", "1", "--jit-threads", "1",
			 "--jit-rate", "50", "--rate", "20", "--duration", "120",
			 "--expect", NULL, "--heap-report", NULL, NULL };
	static const char *const must[] = {
		"GC/Triggered", "GC/SuspendEEStart", "GC/SuspendEEStop", "GC/Start", "GC/Stop",
		"GC/HeapStats", "GC/RestartEEStart", "GC/RestartEEStop", "GC/AllocationTick",
		"Type/BulkType", "GC/BulkNode", "GC/BulkEdge", "GC/BulkRootEdge",
		"Method/DCStopInit", "Method/DCStopVerbose", "Loader/ModuleDCStop",
		"Loader/AssemblyDCStop", "Loader/AppDomainDCStop", "Runtime/Start",
		"Method/DCStopComplete", "SessionEnd",
	};
	size_t i, j, unmatched = 0, foreign = 0;
	const char *dig, *end;
	unsigned int rundowns;

	cr_assert(dir);
	trace = th_fmt("%s/t.nettrace", dir);
	exp = th_fmt("%s/expect.txt", dir);
	rep = th_fmt("%s/heap-report.txt", dir);
	args[13] = exp;
	args[15] = rep;
	th_demo_start(&d, dir, args);
	/* GCHeapSnapshot at Verbose, as dotnet-gcdump asks; Verbose also brings
	 * GCAllocationTick (level 5) */
	collect(&d, "Microsoft-Windows-DotNETRuntime:0x1980001:5,Ringpipe-Demo:0:4", 4, trace);
	th_demo_stop(&d);

	tracedump(dll, "clr", trace, &clr);
	cr_assert(strstr(text(&clr), "#lost\t0\n"), "events lost: %.300s", text(&clr));
	cr_assert_eq(th_read_file(exp, &expect), 0);
	split((char *)clr.p, &got);
	split((char *)expect.p, &want);
	for (i = 0; i < sizeof(must) / sizeof(must[0]); i++)
		cr_assert_gt(count_named(&got, must[i]), 0, "no %s in the trace", must[i]);
	cr_assert_eq(count_named(&got, "SessionEnd"), 1, "SessionEnd must come exactly once");

	/* every decoded event is one the demo wrote, with these values */
	for (i = 0; i < got.n; i++) {
		for (j = 0; j < want.n; j++)
			if (!want.used[j] && matches(want.v[j], got.v[i]))
				break;
		cr_assert(j < want.n, "TraceEvent decoded an event the demo did not write with "
			  "these values:\n  %s", got.v[i]);
		want.used[j] = true;
	}
	/* and what the demo wrote is there: only ordinary GC events racing the
	 * end of the session may be missing. A tool elsewhere on the host
	 * (an agent that traces every runtime it finds) may have run a session
	 * of its own in the demo: its rundown is in the expect file too, and
	 * not in this trace; the demo's stderr says how many rundowns ran. */
	rundowns = rundowns_of(&d);
	for (j = 0; j < want.n; j++) {
		if (want.used[j] || !strncmp(want.v[j], "heap-digest\t", 12))
			continue;
		if (rundowns > 1 && is_rundown(want.v[j])) {
			foreign++;
			continue;
		}
		cr_assert(!strncmp(want.v[j], "GC/", 3) && strncmp(want.v[j], "GC/Bulk", 7),
			  "written but not decoded: %s", want.v[j]);
		unmatched++;
	}
	cr_assert_leq(unmatched, 12, "%zu GC events written but not in the trace", unmatched);
	if (foreign)
		cr_log_warn("%zu rundown events of %u other sessions in the demo (not this test's)",
			    foreign, rundowns - 1);

	/* the bulk elements, decoded through TraceEvent's typed accessors */
	tracedump(dll, "heap", trace, &heap);
	cr_assert_eq(th_read_file(rep, &report), 0, "no heap report");
	cr_assert(report.len > 0 && !strncmp(text(&heap), text(&report), report.len),
		  "TraceEvent's heap dump:\n%s\ndiffers from the demo's report:\n%s", text(&heap),
		  text(&report));
	cr_assert(strstr(text(&heap), "\nindex-gaps 0\n"), "%s", text(&heap));
	cr_assert(strstr(text(&heap), "\nedge-targets-unknown 0\n"), "%s", text(&heap));
	dig = strstr(text(&heap), "\ndigest ");
	cr_assert(dig);
	dig += 8;
	end = strchr(dig, '\n');
	{
		/* "digest nodes=A edges=B roots=C types=D" vs the expect file's
		 * "heap-digest\tgc=N\tnodes=A\tedges=B\troots=C\ttypes=D" */
		const char *h = NULL;
		char a[256], b[256];
		size_t k;

		/* split() cut the expect file into lines */
		for (k = 0; k < want.n && !h; k++)
			if (!strncmp(want.v[k], "heap-digest\t", 12))
				h = want.v[k];
		cr_assert(h, "the demo wrote no heap-digest line");
		h = strstr(h, "nodes=");
		cr_assert(h && end);
		snprintf(a, sizeof(a), "%.*s", (int)(end - dig), dig);
		snprintf(b, sizeof(b), "%s", h);
		for (k = 0; b[k]; k++)
			if (b[k] == '\t')
				b[k] = ' ';
		cr_assert_str_eq(a, b, "element digests differ: TraceEvent %s, demo %s", a, b);
	}
	/* the walk's GC bracket: an induced, non-concurrent gen-2 GC */
	{
		const char *g = strstr(text(&report), "gc ");
		char want_start[128];

		cr_assert(g);
		snprintf(want_start, sizeof(want_start), "GC/Start\tCount=%d\tDepth=2\tReason=1\tType=0",
			 atoi(g + 3));
		for (i = 0; i < got.n && !matches(want_start, got.v[i]); i++)
			;
		cr_assert(i < got.n, "no %s", want_start);
	}

	free(got.v), free(got.used), free(want.v), free(want.used);
	bb_free(&clr), bb_free(&heap), bb_free(&expect), bb_free(&report);
	free(trace), free(exp), free(rep);
	th_rmdir(dir);
}

/* ---- rundown ------------------------------------------------------------- */

struct rundown_run {
	struct bytebuf clr, err;
	struct lines got;
	uint64_t before, emitted, code_base;
	uint32_t per_thread[64];
	unsigned nthreads;
};

/* 8 JIT threads publishing throughout; a session with rundown stops meanwhile. */
static void rundown_run(const char *dll, struct rundown_run *r)
{
	char *dir = th_tmpdir(), *trace;
	/* live methods enough that none is unloaded in the run: each thread's
	 * prefix must then be complete (test_demo_profile.c checks reuse) */
	char *args[] = { "--heap-nodes", "1000", "--alloc-threads", "0", "--jit-threads", "8",
			 "--jit-rate", "2000", "--jit-live", "65536", "--duration", "120", NULL };
	struct th_demo d;
	const char *p;
	int sid;

	cr_assert(dir);
	memset(r, 0, sizeof(*r));
	trace = th_fmt("%s/t.nettrace", dir);
	th_demo_start(&d, dir, args);
	collect(&d, "Microsoft-Windows-DotNETRuntime:0x1:4", 2, trace);
	th_demo_stop(&d);
	cr_assert_eq(th_read_file(d.err, &r->err), 0);
	p = strstr(text(&r->err), "jit-code-base 0x");
	cr_assert(p, "the demo printed no jit-code-base: %s", text(&r->err));
	r->code_base = strtoull(p + 14, NULL, 16);
	p = strstr(text(&r->err), "rundown session ");
	cr_assert(p, "the demo printed no rundown line: %s", text(&r->err));
	cr_assert_eq(sscanf(p, "rundown session %d: published-before %" SCNu64 " emitted %" SCNu64,
			    &sid, &r->before, &r->emitted), 3, "%s", p);
	p = strstr(p, "per-thread-before ");
	cr_assert(p);
	p += strlen("per-thread-before ");
	while (r->nthreads < 64) {
		char *e;

		r->per_thread[r->nthreads++] = (uint32_t)strtoul(p, &e, 10);
		if (*e != ',')
			break;
		p = e + 1;
	}
	cr_assert_eq(r->nthreads, 8);
	cr_assert_gt(r->before, 1000, "too few methods published before rundown: %" PRIu64,
		     r->before);
	tracedump(dll, "clr", trace, &r->clr);
	cr_assert(strstr(text(&r->clr), "#lost\t0\n"), "events lost");
	split((char *)r->clr.p, &r->got);
	free(trace);
	th_rmdir(dir);
}

static void rundown_free(struct rundown_run *r)
{
	free(r->got.v);
	free(r->got.used);
	bb_free(&r->clr);
	bb_free(&r->err);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

Test(runtime, rundown_lists_each_method_published_before_it_exactly_once, .timeout = 240)
{
	TH_NEED_TRACEDUMP(dll);
	struct rundown_run r;
	uint64_t *ids, n = 0, i;
	uint32_t seen[8] = { 0 };

	rundown_run(dll, &r);
	ids = calloc(r.got.n + 1, sizeof(*ids));
	cr_assert(ids);
	for (i = 0; i < r.got.n; i++) {
		const char *v;
		size_t len;

		/* the published methods; the demo's own code is listed too */
		if (strncmp(r.got.v[i], "Method/DCStopVerbose\t", 21) ||
		    !strstr(r.got.v[i], "\tMethodNamespace=Demo.Jit.T"))
			continue;
		v = field(r.got.v[i], "MethodID", &len);
		cr_assert(v, "%s", r.got.v[i]);
		ids[n++] = strtoull(v, NULL, 10);
	}
	cr_assert_eq(n, r.emitted, "the demo wrote %" PRIu64 " MethodDCEndVerbose, TraceEvent "
		     "decoded %" PRIu64, r.emitted, n);
	cr_assert_geq(n, r.before);
	qsort(ids, n, sizeof(*ids), cmp_u64);
	for (i = 0; i < n; i++) {
		uint64_t t = (ids[i] >> 40) - 1, idx = ids[i] & ((1ull << 40) - 1);

		cr_assert(i == 0 || ids[i] != ids[i - 1], "MethodID %" PRIu64 " appears twice", ids[i]);
		cr_assert_lt(t, 8, "MethodID %" PRIu64 " names no JIT thread", ids[i]);
		/* sorted: each thread's indices must run 0, 1, 2, ... without a hole */
		cr_assert_eq(idx, seen[t], "thread %" PRIu64 ": method %" PRIu64 " missing", t,
			     (uint64_t)seen[t]);
		seen[t]++;
	}
	for (i = 0; i < 8; i++)
		cr_assert_geq(seen[i], r.per_thread[i], "thread %" PRIu64 " published %u methods "
			      "before rundown began, rundown listed %u", i, r.per_thread[i], seen[i]);
	free(ids);
	rundown_free(&r);
}

Test(runtime, rundown_method_events_are_never_torn, .timeout = 240)
{
	TH_NEED_TRACEDUMP(dll);
	struct rundown_run r;
	size_t i, checked = 0;

	rundown_run(dll, &r);
	for (i = 0; i < r.got.n; i++) {
		const char *line = r.got.v[i];
		uint64_t id, t, idx;
		char want[512];
		const char *v;
		size_t len;

		if (strncmp(line, "Method/DCStopVerbose\t", 21) ||
		    !strstr(line, "\tMethodNamespace=Demo.Jit.T"))
			continue;
		v = field(line, "MethodID", &len);
		cr_assert(v);
		id = strtoull(v, NULL, 10);
		t = (id >> 40) - 1;
		idx = id & ((1ull << 40) - 1);
		/* every field follows from (thread, index): see tools/demo/jit.c */
		snprintf(want, sizeof(want),
			 "Method/DCStopVerbose\tMethodID=%" PRIu64 "\tModuleID=%" PRIu64
			 "\tMethodStartAddress=%" PRIu64 "\tMethodSize=%" PRIu64
			 "\tMethodToken=%" PRIu64 "\tMethodFlags=8\tMethodNamespace=Demo.Jit.T%" PRIu64
			 "\tMethodName=M%" PRIu64 "_%" PRIu64
			 "\tMethodSignature=void  (int32,class System.String)\tReJITID=0",
			 id, (uint64_t)0x7f3a10100000ull,
			 (uint64_t)(r.code_base + t * (1ull << 28) + idx * 256),
			 16 + idx % 200, (uint64_t)(0x06000000ull | (idx & 0xffffff)), t, t, idx);
		cr_assert(matches(want, line), "torn or wrong method event:\n  got  %s\n  want %s",
			  line, want);
		checked++;
	}
	cr_assert_eq(checked, r.emitted);
	rundown_free(&r);
}

/* ---- heap snapshots through dotnet-gcdump and ringpipe gcdump ------------- */

/* Sanitizer builds walk a tenth of the heap (the acceptance size runs in
 * the plain build). */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define HEAP_NODES "200000"
#else
#define HEAP_NODES "2000000"
#endif

struct type_row {
	char name[200];
	uint64_t count, bytes;
};

struct heap_truth {
	uint64_t gc, nodes, edges, roots;
	struct type_row rows[64];
	size_t nrows;
};

/* The demo's --heap-report of its last walk. */
static void read_heap_report(const char *path, struct heap_truth *h)
{
	struct bytebuf b = { 0 };
	char *save = NULL, *line;

	memset(h, 0, sizeof(*h));
	cr_assert_eq(th_read_file(path, &b), 0, "no heap report at %s", path);
	bb_append(&b, "", 1);
	for (line = strtok_r((char *)b.p, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		struct type_row *r = &h->rows[h->nrows];
		int off = 0;

		if (sscanf(line, "gc %" SCNu64, &h->gc) == 1 ||
		    sscanf(line, "nodes %" SCNu64, &h->nodes) == 1 ||
		    sscanf(line, "edges %" SCNu64, &h->edges) == 1 ||
		    sscanf(line, "roots %" SCNu64, &h->roots) == 1)
			continue;
		if (h->nrows < 64 &&
		    sscanf(line, "type %" SCNu64 " %" SCNu64 " %n", &r->count, &r->bytes, &off) == 2) {
			snprintf(r->name, sizeof(r->name), "%s", line + off);
			h->nrows++;
		}
	}
	bb_free(&b);
	cr_assert_gt(h->nrows, 0, "the heap report lists no types");
}

/* dotnet-gcdump spells generic instantiations Name<A,B>, BulkType Name`2[A,B]. */
static void gcdump_spelling(const char *in, char *out, size_t len)
{
	const char *tick = strchr(in, '`');
	size_t n;

	if (!tick || !strchr(tick, '[')) {
		snprintf(out, len, "%s", in);
		return;
	}
	n = strlen(in);
	snprintf(out, len, "%.*s<%.*s>", (int)(tick - in), in,
		 (int)(n - 1 - (size_t)(strchr(tick, '[') + 1 - in)), strchr(tick, '[') + 1);
}

/*
 * Object count per type in `dotnet-gcdump report` output. Rows look like
 * "   <bytes>   <count>  <Type>[ (Bytes > 10K)]  [<module>]"; the size
 * buckets of one type are added up.
 */
static uint64_t gcdump_count(const char *report, const char *type)
{
	const char *p = report;
	uint64_t total = 0;
	size_t tl = strlen(type);

	while ((p = strstr(p, type))) {
		const char *ls = p, *after = p + tl;

		while (ls > report && ls[-1] != '\n')
			ls--;
		/* the name starts after two numeric columns and ends at " (" or "  [" */
		if (p > ls + 1 && p[-1] == ' ' && p[-2] == ' ' &&
		    (!strncmp(after, "  [", 3) || !strncmp(after, " (Bytes", 7))) {
			char cols[64];
			uint64_t count = 0;
			const char *c;
			size_t k = 0;
			int field = 0;

			/* second whitespace-separated column, commas dropped */
			for (c = ls; c < p && k < sizeof(cols) - 1; c++) {
				if (*c == ' ') {
					if (k && ++field == 2)
						break;
					if (k)
						k = 0;
					continue;
				}
				if (*c != ',')
					cols[k++] = *c;
			}
			cols[k] = 0;
			count = strtoull(cols, NULL, 10);
			total += count;
		}
		p = after;
	}
	return total;
}

static void run_ok(const char *cmd, const char *cwd, struct bytebuf *out)
{
	char *full = th_fmt("cd '%s' && %s 2>&1", cwd, cmd);
	int rc = th_run(full, out);

	bb_append(out, "", 1);
	cr_assert_eq(rc, 0, "%s: exit %d:\n%.3000s", cmd, rc, (char *)out->p);
	free(full);
}

/*
 * The acceptance run: a 2,000,000-node heap, the demo's buffer capped at
 * 1 MB. dotnet-gcdump asks for Block buffering (CollectTracing6), so the heap
 * walk waits for the drainer instead of dropping: its report lists every type
 * with exactly the demo's object count, and `ringpipe gcdump` agrees.
 */
Test(runtime, dotnet_gcdump_and_ringpipe_gcdump_agree_on_a_2m_node_heap_at_1mb_block,
     .timeout = 600)
{
	TH_NEED_DOTNET_TOOL("dotnet-gcdump");
	struct bytebuf out = { 0 }, rep = { 0 };
	struct heap_truth h;
	struct th_demo d;
	char *dir = th_tmpdir(), *hr = th_fmt("%s/heap.txt", dir), *cmd;
	char *args[] = { "--heap-nodes", HEAP_NODES, "--max-buffer-mb", "1", "--alloc-threads", "2",
			 "--duration", "600", "--heap-report", hr, NULL };
	size_t i;

	th_demo_start(&d, dir, args);
	cmd = th_fmt("'%s/dotnet-gcdump' collect -p %d -o heap.gcdump", th_dotnet_tools(), (int)d.pid);
	run_ok(cmd, dir, &out);
	free(cmd);
	read_heap_report(hr, &h);
	cr_assert_eq(h.nodes, strtoull(HEAP_NODES, NULL, 10));
	cmd = th_fmt("'%s/dotnet-gcdump' report heap.gcdump", th_dotnet_tools());
	run_ok(cmd, dir, &rep);
	free(cmd);
	for (i = 0; i < h.nrows; i++) {
		char name[256];

		gcdump_spelling(h.rows[i].name, name, sizeof(name));
		cr_assert_eq(gcdump_count((char *)rep.p, name), h.rows[i].count,
			     "dotnet-gcdump counts %" PRIu64 " %s, the demo walked %" PRIu64
			     ":\n%.4000s", gcdump_count((char *)rep.p, name), name,
			     h.rows[i].count, (char *)rep.p);
	}

	/* ringpipe gcdump, on the next snapshot (the heap changed in between) */
	out.len = 0;
	cmd = th_fmt("'%s' gcdump collect -p %d -o heap.nettrace", th_tool(), (int)d.pid);
	run_ok(cmd, dir, &out);
	free(cmd);
	read_heap_report(hr, &h);
	{
		char line[300];

		snprintf(line, sizeof(line), "heap snapshot of GC #%" PRIu64 "\nnodes %" PRIu64
			 "\nedges %" PRIu64 "\nroots %" PRIu64 " ", h.gc, h.nodes, h.edges, h.roots);
		cr_assert_not_null(strstr((char *)out.p, line), "want \"%s\" in:\n%.3000s", line,
				   (char *)out.p);
		cr_assert_not_null(strstr((char *)out.p, ", 0 lost (EventsLost)"), "%.3000s",
				   (char *)out.p);
		for (i = 0; i < h.nrows; i++) {
			snprintf(line, sizeof(line), "%16" PRIu64 " %12" PRIu64 "  %s\n",
				 h.rows[i].bytes, h.rows[i].count, h.rows[i].name);
			cr_assert_not_null(strstr((char *)out.p, line), "want \"%s\" in:\n%.3000s",
					   line, (char *)out.p);
		}
	}
	th_demo_stop(&d);
	bb_free(&out);
	bb_free(&rep);
	free(hr);
	th_rmdir(dir);
}

/* The same walk in Drop mode at 1 MB cannot fit: ringpipe gcdump must say the
 * trace lost events and print no graph. */
Test(runtime, ringpipe_gcdump_reports_the_loss_of_a_drop_mode_snapshot, .timeout = 600)
{
	struct bytebuf out = { 0 };
	struct th_demo d;
	char *dir = th_tmpdir(), *cmd;
	char *args[] = { "--heap-nodes", HEAP_NODES, "--max-buffer-mb", "1", "--duration", "600",
			 NULL };
	int rc;

	th_demo_start(&d, dir, args);
	cmd = th_fmt("cd '%s' && '%s' gcdump collect -p %d --buffering-mode drop -o heap.nettrace 2>&1",
		  dir, th_tool(), (int)d.pid);
	rc = th_run(cmd, &out);
	bb_append(&out, "", 1);
#ifdef __SANITIZE_THREAD__
	/* ThreadSanitizer slows the demo's heap walk (the producer) far more
	 * than the drainer: the burst may then fit, and a complete snapshot
	 * correctly reported complete is no failure, only no test of loss */
	if (rc == 0 && strstr((char *)out.p, ", 0 lost (EventsLost)"))
		cr_skip_test("under ThreadSanitizer the Drop-mode heap walk lost nothing "
			     "(the instrumented writer is slower than the drainer)");
#endif
	cr_assert_eq(rc, 1, "exit %d:\n%.3000s", rc, (char *)out.p);
	cr_assert_not_null(strstr((char *)out.p, "INCOMPLETE: the trace lost "), "%.3000s",
			   (char *)out.p);
	cr_assert_not_null(strstr((char *)out.p, "no graph printed"), "%.3000s", (char *)out.p);
	cr_assert_null(strstr((char *)out.p, "\ntypes "), "no type table: %.3000s", (char *)out.p);
	free(cmd);
	th_demo_stop(&d);
	bb_free(&out);
	th_rmdir(dir);
}

/* ---- sample profiler: each sample on the thread it sampled ----------------- */

/* tid of a dump line ("tid":N), or 0 */
static uint64_t line_tid(const char *line)
{
	const char *t = strstr(line, "\"tid\":");

	return t ? strtoull(t + 6, NULL, 10) : 0;
}

static bool tid_in(const uint64_t *set, size_t n, uint64_t tid)
{
	for (size_t i = 0; i < n; i++)
		if (set[i] == tid)
			return true;
	return false;
}

/*
 * The demo's sampler thread writes a ThreadSample for every demo thread. As
 * in EventPipe, TraceEvent must show each sample on the sampled thread: the
 * managed ones (Type 2) on exactly the two writer threads, which write the
 * Tick events, and never on the sampler, which writes nothing else. The
 * sampler stays the capture thread, so nothing reads as lost.
 */
Test(runtime, thread_samples_are_shown_on_the_sampled_threads, .timeout = 120)
{
	TH_NEED_TRACEDUMP(dll);
	char *dir = th_tmpdir(), *path = th_fmt("%s/samples.nettrace", dir);
	char *extra[] = { "--duration", "60", "--threads", "2", "--rate", "100", "--alloc-threads",
			  "0", "--jit-threads", "0", NULL };
	uint64_t ticks[8], managed[8];
	size_t nt = 0, nm = 0, samples = 0, i;
	struct bytebuf out = { 0 };
	struct th_demo d;
	char *line, *save = NULL;

	th_demo_start(&d, dir, extra);
	collect(&d, "Ringpipe-Demo,Microsoft-DotNETCore-SampleProfiler", 2, path);
	th_demo_stop(&d);
	tracedump(dll, "dump", path, &out);
	for (line = strtok_r((char *)out.p, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		uint64_t tid = line_tid(line);

		if (strstr(line, "\"name\":\"Tick\"") && !tid_in(ticks, nt, tid)) {
			cr_assert_lt(nt, 8u, "more Tick threads than writers");
			ticks[nt++] = tid;
		} else if (strstr(line, "\"name\":\"Thread/Sample\"")) {
			samples++;
			if (strstr(line, "\"Type\":2") && !tid_in(managed, nm, tid)) {
				cr_assert_lt(nm, 8u, "managed samples on too many threads: %s", line);
				managed[nm++] = tid;
			}
		} else if (strstr(line, "\"summary\":true")) {
			cr_assert(strstr(line, "\"lost\":0,"), "%s", line);
		}
	}
	cr_assert_eq(nt, 2, "Tick events from %zu threads, expected the 2 writers", nt);
	cr_assert_gt(samples, 20, "only %zu samples in 2 s at 1000/s per thread", samples);
	cr_assert_eq(nm, 2, "managed samples on %zu threads, expected the 2 writers", nm);
	for (i = 0; i < nm; i++)
		cr_assert(tid_in(ticks, nt, managed[i]),
			  "a managed sample on thread %" PRIu64 ", which wrote no Tick", managed[i]);
	bb_free(&out);
	free(path);
	th_rmdir(dir);
}
