// SPDX-License-Identifier: MIT
/*
 * TraceEvent is the judge: traces ringpipe writes, and the runtime-written
 * traces in $RINGPIPE_SHARED/testdata, are read by TraceEvent (tests/interop/TraceDump)
 * and by ringpipe's reader, and the two canonical dumps must be identical.
 * Without the .NET SDK these tests skip with that reason, unless
 * RINGPIPE_REQUIRE_INTEROP=1, which turns the skip into a failure.
 */
#include <inttypes.h>
#include <string.h>

#include "helpers.h"
#include "nettrace_read.h"
#include "tracegen.h"

static void gen_file(const char *path, const struct tracegen_opts *o, struct tracegen_result *res)
{
	struct nt_mem_sink s;

	nt_mem_sink_init(&s);
	cr_assert_eq(tracegen_write(&s.base, o, res), 0);
	cr_assert_eq(th_write_file(path, s.buf.p, s.buf.len), 0);
	nt_mem_sink_fini(&s);
}

/* ringpipe's canonical dump of a file, in memory. */
static int our_dump(const char *path, struct bytebuf *out)
{
	struct nt_reader *r = nt_reader_open(path);
	struct nt_rec rec;
	uint64_t n = 0;
	int err;

	cr_assert_not_null(r, "open %s", path);
	while ((err = nt_reader_next(r, &rec)) > 0) {
		nt_dump_event(r, &rec, out);
		n++;
	}
	nt_dump_summary(r, n, err < 0, out);
	bb_append(out, "", 1);
	out->len--;
	nt_reader_free(r);
	return err;
}

static void assert_same_text(const char *what, const char *ours, const char *theirs)
{
	const char *a = ours, *b = theirs;
	size_t line = 1;

	while (*a && *a == *b) {
		if (*a == '\n')
			line++;
		a++;
		b++;
	}
	if (*a || *b) {
		const char *ea = strchr(a, '\n'), *eb = strchr(b, '\n');
		const char *la = a, *lb = b;

		while (la > ours && la[-1] != '\n')
			la--;
		while (lb > theirs && lb[-1] != '\n')
			lb--;
		cr_assert_fail("%s: dumps differ at line %zu\n  ringpipe:   %.*s\n  TraceEvent: %.*s", what,
			line, (int)(ea ? ea - la : (long)strlen(la)), la,
			(int)(eb ? eb - lb : (long)strlen(lb)), lb);
	}
}

static void compare_with_traceevent(const char *dll, const char *path, const char *what)
{
	struct bytebuf ours = { 0 }, theirs = { 0 };
	char *cmd;
	int rc;

	our_dump(path, &ours);
	cr_assert(asprintf(&cmd, "dotnet '%s' dump '%s'", dll, path) > 0);
	rc = th_run(cmd, &theirs);
	free(cmd);
	cr_assert_eq(rc, 0, "%s: TraceEvent failed (exit %d); its summary: %s", what, rc,
		     theirs.len > 200 ? (char *)theirs.p + theirs.len - 200 : (char *)theirs.p);
	assert_same_text(what, (char *)ours.p, (char *)theirs.p);
	bb_free(&ours);
	bb_free(&theirs);
}

static void roundtrip(int format, const char *name)
{
	TH_NEED_TRACEDUMP(dll);
	char *dir = th_tmpdir(), *path;
	struct tracegen_opts o = { .format = format, .events = 20000, .threads = 6,
				   .gap_every = 61, .lead_gap = 2, .tail_gap = 3,
				   .sp_every = 3000, .seed = 7 };
	struct tracegen_result res;
	struct bytebuf out = { 0 };

	cr_assert(asprintf(&path, "%s/%s.nettrace", dir, name) > 0);
	gen_file(path, &o, &res);
	compare_with_traceevent(dll, path, name);
	/* and TraceEvent's EventsLost is exactly the injected gaps */
	our_dump(path, &out);
	{
		char want[128];

		snprintf(want, sizeof(want), "{\"summary\":true,\"events\":%" PRIu64 ",\"lost\":%" PRIu64
			 ",\"error\":null}", res.written, res.lost);
		cr_assert(strstr((char *)out.p, want), "expected summary %s", want);
	}
	bb_free(&out);
	free(path);
	th_rmdir(dir);
}

Test(interop, roundtrip_v5_every_field_matches_traceevent, .timeout = 300)
{
	roundtrip(NT_FORMAT_V5, "roundtrip-v5");
}

Test(interop, roundtrip_v6_every_field_matches_traceevent, .timeout = 300)
{
	roundtrip(NT_FORMAT_V6, "roundtrip-v6");
}

/* A million events: TraceEvent reads them all, with no error and no loss. */
static void million(int format)
{
	TH_NEED_TRACEDUMP(dll);
	char *dir = th_tmpdir(), *path, *cmd, want[128];
	struct tracegen_opts o = { .format = format, .events = 1000000, .threads = 4,
				   .sp_every = 100000, .small_only = true, .seed = 3 };
	struct tracegen_result res;
	struct bytebuf out = { 0 };
	int rc;

	cr_assert(asprintf(&path, "%s/million.nettrace", dir) > 0);
	gen_file(path, &o, &res);
	cr_assert(asprintf(&cmd, "dotnet '%s' counts '%s'", dll, path) > 0);
	rc = th_run(cmd, &out);
	cr_assert_eq(rc, 0, "TraceEvent failed on the 1,000,000-event trace: %s", (char *)out.p);
	cr_assert_str_eq((char *)out.p, "Ringpipe-Demo/Small\t1000000\n#lost\t0\n");
	snprintf(want, sizeof(want), "%" PRIu64, res.written);
	cr_assert_str_eq(want, "1000000");
	free(cmd);
	free(path);
	bb_free(&out);
	th_rmdir(dir);
}

Test(interop, million_events_v5_read_by_traceevent, .timeout = 300) { million(NT_FORMAT_V5); }
Test(interop, million_events_v6_read_by_traceevent, .timeout = 300) { million(NT_FORMAT_V6); }

/* PerfView's path: conversion through TraceLog works on what we write. */
Test(interop, tracelog_converts_generated_traces, .timeout = 300)
{
	TH_NEED_TRACEDUMP(dll);
	char *dir = th_tmpdir(), *path, *cmd;
	int format;

	for (format = NT_FORMAT_V5; format <= NT_FORMAT_V6; format++) {
		struct tracegen_opts o = { .format = format, .events = 5000, .threads = 3,
					   .sp_every = 1000, .seed = 11 };
		struct tracegen_result res;
		struct bytebuf out = { 0 };
		char want[64];
		int rc;

		cr_assert(asprintf(&path, "%s/tl-v%d.nettrace", dir, format) > 0);
		gen_file(path, &o, &res);
		cr_assert(asprintf(&cmd, "dotnet '%s' tracelog '%s'", dll, path) > 0);
		rc = th_run(cmd, &out);
		cr_assert_eq(rc, 0, "TraceLog failed on V%d: %s", format, (char *)out.p);
		snprintf(want, sizeof(want), "tracelog events=%" PRIu64 " lost=0", res.written);
		cr_assert(strstr((char *)out.p, want), "V%d: expected '%s', got '%s'", format, want,
			  (char *)out.p);
		bb_free(&out);
		free(cmd);
		free(path);
	}
	th_rmdir(dir);
}

/* ---- runtime-written traces -------------------------------------------- */

struct count_line {
	char key[256];
	uint64_t n;
};

static size_t parse_counts(char *text, struct count_line *lines, size_t max, const char *sep)
{
	size_t n = 0;
	char *save = NULL, *l;

	for (l = strtok_r(text, "\n", &save); l && n < max; l = strtok_r(NULL, "\n", &save)) {
		char *s = strstr(l, sep);

		if (!s)
			continue;
		if (l[0] == '\xef')		/* UTF-8 byte order mark */
			l += 3;
		snprintf(lines[n].key, sizeof(lines[n].key), "%.*s", (int)(s - l), l);
		lines[n].n = strtoull(s + strlen(sep), NULL, 10);
		n++;
	}
	return n;
}

static uint64_t lookup(const struct count_line *lines, size_t n, const char *key)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (!strcmp(lines[i].key, key))
			return lines[i].n;
	return 0;
}

static int cmp_key(const void *a, const void *b)
{
	return strcmp(((const struct count_line *)a)->key, ((const struct count_line *)b)->key);
}

/* ringpipe's counts in the same "key\tcount" form TraceDump prints. */
static void our_counts(const char *path, struct bytebuf *out)
{
	struct nt_reader *r = nt_reader_open(path);
	struct nt_rec rec;
	struct count_line *lines;
	size_t n = 0, i, cap = 256;
	int err;

	cr_assert_not_null(r);
	while ((err = nt_reader_next(r, &rec)) > 0)
		;
	cr_assert_eq(err, 0, "ringpipe's reader failed on %s: %s", path, nt_reader_errmsg(r));
	lines = calloc(cap, sizeof(*lines));
	for (i = 0; i < nt_reader_nmeta(r); i++) {
		const struct nt_meta *m = nt_reader_meta(r, i);
		char key[256];
		size_t k;

		if (!m->count)
			continue;
		snprintf(key, sizeof(key), "%s/%s", m->provider, m->name);
		for (k = 0; k < n && strcmp(lines[k].key, key); k++)
			;
		if (k == n) {
			cr_assert_lt(n, cap);
			snprintf(lines[n++].key, sizeof(lines[0].key), "%s", key);
		}
		lines[k].n += m->count;
	}
	qsort(lines, n, sizeof(*lines), cmp_key);
	for (i = 0; i < n; i++)
		bb_printf(out, "%s\t%" PRIu64 "\n", lines[i].key, lines[i].n);
	bb_printf(out, "#lost\t%" PRId64 "\n", nt_reader_lost(r));
	bb_append(out, "", 1);
	out->len--;
	free(lines);
	nt_reader_free(r);
}

/*
 * The baselines were produced through TraceLog by an older TraceEvent. Two
 * documented differences with TraceEvent 4.0.0's event stream:
 *  - TraceLog leaves out a few bookkeeping events (IL-to-native maps and
 *    verbose method rundown), which the event stream does deliver;
 *  - CLR events 200 and 201 were once named "GC"; 4.0.0 has no template for
 *    them and names them EventID(200) and EventID(201).
 */
static const char *const tracelog_omits[] = {
	"Microsoft-Windows-DotNETRuntime/Method/ILToNativeMap",
	"Microsoft-Windows-DotNETRuntimeRundown/Method/DCStopVerbose",
	"Microsoft-Windows-DotNETRuntimeRundown/Method/ILToNativeMapDCStop",
};

/* Drops the "fields" member (always last) from every dump line, in one pass. */
static void strip_fields(struct bytebuf *b)
{
	char *in = (char *)b->p, *out = in;

	while (*in) {
		char *nl = strchr(in, '\n'), *f;
		size_t len = nl ? (size_t)(nl - in) : strlen(in);

		f = memmem(in, len, ",\"fields\":", 10);
		if (f && !memmem(in, len, "\"summary\"", 9))
			len = (size_t)(f - in);
		memmove(out, in, len);
		out += len;
		if (!nl)
			break;
		*out++ = '\n';
		in = nl + 1;
	}
	*out = 0;
	b->len = (size_t)(out - (char *)b->p);
}

static uint64_t line_ts(const char *l)
{
	const char *t = strstr(l, "\"ts\":");

	return t ? strtoull(t + 5, NULL, 10) : UINT64_MAX;
}

static int cmp_line(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * The order TraceEvent gives events of different threads with the same
 * timestamp is an artefact of its heap; order each run of equal timestamps
 * by text on both sides before comparing.
 */
static void sort_equal_ts_runs(struct bytebuf *b)
{
	size_t n = 0, cap = 1024, i, j;
	char **lines = malloc(cap * sizeof(*lines)), *p, *save = NULL;
	struct bytebuf out = { 0 };

	for (p = strtok_r((char *)b->p, "\n", &save); p; p = strtok_r(NULL, "\n", &save)) {
		if (n == cap)
			lines = realloc(lines, (cap *= 2) * sizeof(*lines));
		lines[n++] = p;
	}
	for (i = 0; i < n; i = j) {
		uint64_t ts = line_ts(lines[i]);

		for (j = i + 1; j < n && line_ts(lines[j]) == ts; j++)
			;
		qsort(lines + i, j - i, sizeof(*lines), cmp_line);
	}
	for (i = 0; i < n; i++)
		bb_printf(&out, "%s\n", lines[i]);
	bb_append(&out, "", 1);
	out.len--;
	free(lines);
	bb_free(b);
	*b = out;
}

static void runtime_file(const char *base)
{
	TH_NEED_TRACEDUMP(dll);
	char *dir = th_tmpdir(), *cmd, *path, *bpath;
	struct bytebuf ours = { 0 }, theirs = { 0 }, baseline = { 0 }, ourc = { 0 };
	struct count_line *bl = calloc(256, sizeof(*bl)), *ol = calloc(256, sizeof(*ol));
	size_t nb, no, i, k;
	int rc;

	cr_assert(asprintf(&cmd, "unzip -q -o '%s/testdata/nettrace/%s.zip' -d '%s'", th_shared(),
			   base, dir) > 0);
	cr_assert_eq(th_run(cmd, NULL), 0, "cannot unzip %s (is unzip installed?)", base);
	free(cmd);
	cr_assert(asprintf(&path, "%s/%s", dir, base) > 0);

	/* 1. counts: ringpipe == TraceEvent, exactly */
	our_counts(path, &ourc);
	cr_assert(asprintf(&cmd, "dotnet '%s' counts '%s'", dll, path) > 0);
	rc = th_run(cmd, &theirs);
	free(cmd);
	cr_assert_eq(rc, 0, "TraceEvent failed on %s", base);
	assert_same_text(base, (char *)ourc.p, (char *)theirs.p);

	/* 2. counts: ringpipe == the baseline, but for the documented differences */
	cr_assert(asprintf(&bpath, "%s/testdata/nettrace/%s.baseline.txt", th_shared(), base) > 0);
	cr_assert_eq(th_read_file(bpath, &baseline), 0, "cannot read %s", bpath);
	nb = parse_counts((char *)baseline.p, bl, 256, ", ");
	no = parse_counts((char *)ourc.p, ol, 256, "\t");
	cr_assert_gt(nb, 0);
	for (i = 0; i < nb; i++) {
		uint64_t got = lookup(ol, no, bl[i].key);

		if (!strcmp(bl[i].key, "Microsoft-Windows-DotNETRuntime/GC"))
			got = lookup(ol, no, "Microsoft-Windows-DotNETRuntime/EventID(200)") +
			      lookup(ol, no, "Microsoft-Windows-DotNETRuntime/EventID(201)");
		cr_assert_eq(got, bl[i].n, "%s: %s: baseline %" PRIu64 ", ringpipe %" PRIu64, base,
			     bl[i].key, bl[i].n, got);
	}
	for (i = 0; i < no; i++) {
		bool known = lookup(bl, nb, ol[i].key) || ol[i].key[0] == '#' ||
			     strstr(ol[i].key, "/EventID(20");

		for (k = 0; k < sizeof(tracelog_omits) / sizeof(tracelog_omits[0]); k++)
			known |= !strcmp(ol[i].key, tracelog_omits[k]);
		cr_assert(known, "%s: ringpipe reports %s, which the baseline lacks", base, ol[i].key);
	}

	/* 3. the whole canonical dump: header fields, stacks, lost counts */
	{
		struct bytebuf a = { 0 }, b = { 0 };

		our_dump(path, &a);
		cr_assert(asprintf(&cmd, "dotnet '%s' dump '%s'", dll, path) > 0);
		cr_assert_eq(th_run(cmd, &b), 0);
		free(cmd);
		/* CLR events carry no field list in the file; TraceEvent decodes
		 * them from its templates. Compare everything before "fields". */
		strip_fields(&a);
		strip_fields(&b);
		sort_equal_ts_runs(&a);
		sort_equal_ts_runs(&b);
		assert_same_text(base, (char *)a.p, (char *)b.p);
		bb_free(&a);
		bb_free(&b);
	}
	bb_free(&ours);
	bb_free(&theirs);
	bb_free(&baseline);
	bb_free(&ourc);
	free(bl);
	free(ol);
	free(path);
	free(bpath);
	th_rmdir(dir);
}

Test(interop, runtime_trace_dotnet3_objver4, .timeout = 300)
{
	runtime_file("eventpipe-dotnetcore3.0-win-x64-objver4.nettrace");
}

Test(interop, runtime_trace_dotnet5_arraytypes, .timeout = 300)
{
	runtime_file("eventpipe-dotnetcore5.0-win-x64-arraytypes.nettrace");
}

Test(interop, runtime_trace_dotnet6_executioncheckpoints, .timeout = 300)
{
	runtime_file("eventpipe-dotnetcore6.0-win-x64-executioncheckpoints.nettrace");
}
