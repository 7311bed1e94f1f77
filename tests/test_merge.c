// SPDX-License-Identifier: MIT
/*
 * ringpipe merge (tools/ringpipe/cmd_merge.c) and the merge under it
 * (retrace_merge*() in tools/ringpipe/trace/retrace.c).
 *
 * The sources are written with ringpipe's writer, each event carrying a
 * value V unique over all sources, so every event of the output can be
 * traced back to the one it came from: its pid, thread, timestamp, type
 * and payload must be the source's. Three V6 streams of different
 * processes (one of them holding a second process) and a V5 stream laid
 * out as the runtime lays one out (each thread's run in a block, only its
 * first event IsSorted), all with thread ids 1 and 2, with sequence gaps
 * and drops after threads' last events. ringpipe's reader checks every
 * event; TraceEvent (TraceDump) must read the output without error, with
 * each process's events, EventsLost the sum of the sources' as it counts
 * them, and timestamps that never go back. Without dotnet or TraceDump
 * those parts skip with the reason, unless RINGPIPE_REQUIRE_INTEROP=1.
 */
#include <inttypes.h>

#include "helpers.h"
#include "nettrace_read.h"
#include "trace/retrace.h"

/* A whole second: the trace header keeps the wall clock in milliseconds */
#define WALL0 (1700000000ull * 1000000000ull)
#define MS 1000000ull
#define GHZ 1000000000ull
/* V of source i's event k: (i + 1) * V_SPAN + k */
#define V_SPAN 100000u

static const struct nt_field ping_fields[] = {
	{ "V", NT_U32, 0, 0, NULL },
	{ "Who", NT_STRING, 0, 0, NULL },
};
static const struct nt_field beta_fields[] = {
	{ "V", NT_U32, 0, 0, NULL },
	{ "Ratio", NT_F64, 0, 0, NULL },
	{ "Tags", NT_ARRAY, NT_U16, 0, NULL },
};
static const struct nt_event_desc ping_desc = {
	"Test-Merge", NULL, 1, "Ping", 0x1, 1, 4, 0, 2, ping_fields };
static const struct nt_event_desc beta_desc = {
	"Test-Merge", NULL, 2, "Beta", 0x2, 0, 5, 0, 3, beta_fields };

/* ---- sources ------------------------------------------------------------------ */

struct gen {
	int format;
	uint32_t pid;
	uint32_t second_pid;	/* V6: every 4th event, from k = 3, of this process's thread 1 */
	uint64_t sync_ticks, freq, sync_unix_ns;
	uint64_t t0, step;	/* the first event's ticks, and between events */
	uint32_t n;
	uint32_t v0;
	char who;
	uint32_t gap_at;	/* 0, or: 2 numbers skipped before event k */
	uint32_t tail;		/* numbers dropped after thread 2's last event */
	uint32_t ghost;		/* numbers dropped by thread 9, which writes nothing */
	bool runs;		/* each thread's run of 50 in a block, its first sorted */
	bool stacks;		/* a stack on every 5th event */
};

static uint32_t gen_pid(const struct gen *g, uint32_t k)
{
	return g->second_pid && k % 4 == 3 ? g->second_pid : g->pid;
}

static uint32_t gen_tid(const struct gen *g, uint32_t k)
{
	return g->second_pid && k % 4 == 3 ? 1 : 1 + k % 2;
}

/* which of the source's three (pid, thread) pairs k is on */
static int gen_slot(const struct gen *g, uint32_t k)
{
	return g->second_pid && k % 4 == 3 ? 2 : (int)(k % 2);
}

static uint64_t gen_ts(const struct gen *g, uint32_t k)
{
	return g->t0 + (uint64_t)k * g->step;
}

static bool gen_beta(uint32_t k)
{
	return k % 3 == 0;
}

static void event_payload(struct bytebuf *b, uint32_t v, bool beta, char who)
{
	double ratio = v * 0.25;

	b->len = 0;
	cr_assert_eq(bb_reserve(b, 64), 0);
	bb_u32(b, v);
	if (beta) {
		bb_put(b, &ratio, 8);
		bb_u16(b, 2);
		bb_u16(b, (uint16_t)v);
		bb_u16(b, 7);
	} else {
		bb_u16(b, (uint16_t)who);
		bb_u16(b, 0);
	}
}

static void gen_stack(uint32_t v, uint64_t ips[2])
{
	ips[0] = 0x401000u + v;
	ips[1] = 0x7f0000001234ull;
}

static void gen_event(const struct gen *g, struct nt_writer *w, const uint32_t ids[2],
		      uint32_t k, uint32_t *seq, bool sorted)
{
	struct bytebuf pl = { 0 };
	uint64_t ips[2];
	uint32_t v = g->v0 + k;
	struct nt_event ev = {
		.meta_id = ids[gen_beta(k)], .tid = gen_tid(g, k), .cpu = k % 3,
		.ts = gen_ts(g, k), .sorted = sorted,
		.pid = g->format == NT_FORMAT_V6 ? gen_pid(g, k) : 0,
	};

	if (g->gap_at && k == g->gap_at)
		*seq += 2;
	ev.seq = ++*seq;
	if (g->stacks && k % 5 == 0) {
		gen_stack(v, ips);
		ev.stack = ips;
		ev.stack_depth = 2;
	}
	event_payload(&pl, v, gen_beta(k), g->who);
	ev.payload = pl.p;
	ev.payload_len = (uint32_t)pl.len;
	cr_assert_eq(nt_writer_event(w, &ev), 0, "source event %u", k);
	bb_free(&pl);
}

static void write_gen(const struct gen *g, struct nt_mem_sink *m)
{
	struct nt_writer_opts o = {
		.sz = sizeof(o), .format = g->format, .pid = g->pid, .nr_cpus = 4,
		.pointer_size = 8, .sync_ticks = g->sync_ticks, .tick_freq = g->freq,
		.sync_unix_ns = g->sync_unix_ns,
	};
	uint32_t ids[2], seq[3] = { 1, 1, 1 }, k;
	struct nt_writer *w;

	nt_mem_sink_init(m);
	w = nt_writer_new(&m->base, &o);
	cr_assert_not_null(w, "nt_writer_new: %s", strerror(errno));
	cr_assert_eq(nt_writer_define(w, &ping_desc, &ids[0]), 0);
	cr_assert_eq(nt_writer_define(w, &beta_desc, &ids[1]), 0);
	if (!g->runs) {
		for (k = 0; k < g->n; k++)
			gen_event(g, w, ids, k, &seq[gen_slot(g, k)], true);
	} else {
		uint32_t first, slot;

		/* the runtime's layout: the reader holds the runs back and
		 * hands them out in time order */
		for (first = 0; first < g->n; first += 50) {
			for (slot = 0; slot < 2; slot++)
				for (k = first + slot; k < first + 50 && k < g->n; k += 2)
					gen_event(g, w, ids, k, &seq[slot], k < first + 2);
			cr_assert_eq(nt_writer_flush(w), 0);
		}
	}
	if (g->tail)
		cr_assert_eq(nt_writer_note_seq(w, g->pid, 2, seq[1] + g->tail), 0);
	if (g->ghost)
		cr_assert_eq(nt_writer_note_seq(w, g->pid, 9, 1 + g->ghost), 0);
	cr_assert_eq(nt_writer_finish(w, gen_ts(g, g->n)), 0);
	nt_writer_free(w);
}

static char *write_gen_file(const struct gen *g, const char *dir, const char *name)
{
	struct nt_mem_sink m;
	char *path = th_fmt("%s/%s", dir, name);

	write_gen(g, &m);
	cr_assert_eq(th_write_file(path, m.buf.p, m.buf.len), 0);
	nt_mem_sink_fini(&m);
	return path;
}

/* Events and EventsLost of a file, as ringpipe's reader counts them. */
static void our_counts(const char *path, uint64_t *events, int64_t *lost)
{
	struct nt_reader *r = nt_reader_open(path);
	struct nt_rec rec;
	int rc;

	cr_assert_not_null(r, "%s: %s", path, strerror(errno));
	*events = 0;
	while ((rc = nt_reader_next(r, &rec)) > 0)
		(*events)++;
	cr_assert_eq(rc, 0, "%s: %s", path, nt_reader_errmsg(r));
	*lost = nt_reader_lost(r);
	nt_reader_free(r);
}

/*
 * The four sources, all on one clock (the CLOCK_MONOTONIC nanoseconds of
 * one host, each anchored when its session started, sub-millisecond
 * parts of the anchors' wall clock lost in the header), interleaved in
 * time, all with threads 1 and 2.
 */
#define NSRC 4
static const struct gen four[NSRC] = {
	{ NT_FORMAT_V6, 1001, 0, 1 * GHZ, GHZ, WALL0, 1 * GHZ + 1000, 4000, 3000,
	  1 * V_SPAN, 'a', 700, 3, 5, false, false },
	{ NT_FORMAT_V6, 1002, 1012, 1 * GHZ + 700400, GHZ, WALL0 + 700400, 1 * GHZ + 2000, 3000,
	  4000, 2 * V_SPAN, 'b', 1234, 0, 0, false, false },
	{ NT_FORMAT_V6, 1003, 0, 1 * GHZ + 5 * MS, GHZ, WALL0 + 5 * MS, 1 * GHZ + 3000, 6000,
	  2000, 3 * V_SPAN, 'c', 0, 0, 0, false, true },
	{ NT_FORMAT_V5, 7, 0, 1 * GHZ + 2 * MS + 1, GHZ, WALL0 + 2 * MS, 1 * GHZ + 500, 4000,
	  3000, 4 * V_SPAN, 'd', 2001, 4, 0, true, false },
};
/* what each source's reader counts: the gaps, the tails, the ghost */
static const int64_t four_lost[NSRC] = { 2 + 3 + 5, 2, 0, 2 + 4 };

/* The source and event index of value v */
static const struct gen *find_gen(const struct gen *srcs, size_t n, uint32_t v, uint32_t *k)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (v >= srcs[i].v0 && v < srcs[i].v0 + srcs[i].n) {
			*k = v - srcs[i].v0;
			return &srcs[i];
		}
	return NULL;
}

/* ---- what the output must be ----------------------------------------------------- */

struct seen {
	uint64_t events;
	uint64_t per_pid[5];		/* counted for pids[] */
	uint32_t pids[5];
	uint64_t cap_key[16];		/* capture thread -> (pid << 32 | tid) */
	uint64_t cap[16];
	size_t ncap;
	int64_t lost;
	struct nt_reader_info info;
};

/* The capture thread of (pid, tid) must be one, and only theirs. */
static void note_capture(struct seen *s, uint64_t cap, uint32_t pid, uint32_t tid)
{
	uint64_t key = (uint64_t)pid << 32 | tid;
	size_t i;

	for (i = 0; i < s->ncap; i++) {
		if (s->cap[i] == cap || s->cap_key[i] == key) {
			cr_assert(s->cap[i] == cap && s->cap_key[i] == key,
				  "pid %u tid %u on capture thread %" PRIu64 ", shared with pid %"
				  PRIu64 " tid %" PRIu64 " on %" PRIu64, pid, tid, cap,
				  s->cap_key[i] >> 32, s->cap_key[i] & 0xffffffffu, s->cap[i]);
			return;
		}
	}
	cr_assert_lt(s->ncap, 16);
	s->cap[s->ncap] = cap;
	s->cap_key[s->ncap++] = key;
}

/*
 * Reads a merge of srcs with ringpipe's reader: every event is its
 * source's (pid, or forced[i] when given, thread, timestamp on the
 * output's clock, type, payload, stack), in non-decreasing time order.
 * ts_of(): the timestamp each source's event must have in the output.
 */
typedef uint64_t (*ts_fn)(const struct gen *g, uint32_t k);

static void check_output(const void *p, size_t len, const struct gen *srcs, size_t n,
			 const uint32_t *forced, ts_fn ts_of, struct seen *s)
{
	struct nt_reader *r = nt_reader_new_mem(p, len);
	struct bytebuf want = { 0 };
	struct nt_rec rec;
	uint64_t last_ts = 0;
	int rc;

	memset(s, 0, sizeof(*s));
	cr_assert_not_null(r);
	while ((rc = nt_reader_next(r, &rec)) > 0) {
		const struct gen *g;
		uint32_t v, k, pid;
		size_t i;

		cr_assert_geq(rec.payload_len, 4);
		memcpy(&v, rec.payload, 4);
		g = find_gen(srcs, n, v, &k);
		cr_assert_not_null(g, "event with V=%u from no source", v);
		pid = forced && forced[g - srcs] ? forced[g - srcs] : gen_pid(g, k);
		cr_assert_eq(rec.pid, pid, "V=%u: pid %" PRId64 ", not %u", v, rec.pid, pid);
		cr_assert_eq(rec.tid, gen_tid(g, k), "V=%u: tid %" PRId64, v, rec.tid);
		cr_assert_eq(rec.ts, ts_of(g, k), "V=%u: ts %" PRIu64 ", not %" PRIu64, v, rec.ts,
			     ts_of(g, k));
		cr_assert_geq(rec.ts, last_ts, "V=%u at %" PRIu64 " after %" PRIu64, v, rec.ts,
			      last_ts);
		last_ts = rec.ts;
		cr_assert_str_eq(rec.meta->provider, "Test-Merge");
		cr_assert_str_eq(rec.meta->name, gen_beta(k) ? "Beta" : "Ping", "V=%u", v);
		cr_assert_eq(rec.meta->nfields, gen_beta(k) ? 3 : 2);
		event_payload(&want, v, gen_beta(k), g->who);
		cr_assert_eq(rec.payload_len, want.len, "V=%u: payload", v);
		cr_assert_eq(memcmp(rec.payload, want.p, want.len), 0, "V=%u: payload", v);
		if (g->stacks && k % 5 == 0) {
			uint64_t ips[2];

			gen_stack(v, ips);
			cr_assert_eq(rec.stack_bytes, 16, "V=%u: stack", v);
			cr_assert_eq(memcmp(rec.stack, ips, 16), 0, "V=%u: stack", v);
		} else {
			cr_assert_eq(rec.stack_bytes, 0, "V=%u: a stack from nowhere", v);
		}
		note_capture(s, rec.capture_thread, pid, gen_tid(g, k));
		for (i = 0; i < 5 && s->pids[i] && s->pids[i] != pid; i++)
			;
		cr_assert_lt(i, 5, "more than 5 pids");
		s->pids[i] = pid;
		s->per_pid[i]++;
		s->events++;
	}
	cr_assert_eq(rc, 0, "the merge does not read: %s", nt_reader_errmsg(r));
	s->lost = nt_reader_lost(r);
	s->info = *nt_reader_info(r);
	nt_reader_free(r);
	bb_free(&want);
}

static uint64_t seen_pid(const struct seen *s, uint32_t pid)
{
	size_t i;

	for (i = 0; i < 5; i++)
		if (s->pids[i] == pid)
			return s->per_pid[i];
	return 0;
}

/* the four sources share one clock: their ticks are taken as they are */
static uint64_t same_ts(const struct gen *g, uint32_t k)
{
	return gen_ts(g, k);
}

/* ---- TraceEvent ------------------------------------------------------------------- */

/* The number after "key": in line[0..len), or UINT64_MAX. */
static uint64_t num_after(const char *line, size_t len, const char *key)
{
	const char *at = memmem(line, len, key, strlen(key));

	return at ? strtoull(at + strlen(key), NULL, 10) : UINT64_MAX;
}

struct te_view {
	uint64_t events, lost, backwards;
	uint64_t by_pid[5];
	uint32_t pids[5];
};

/*
 * TraceEvent's dump of file, which it must read to the end without an
 * error; its events counted per pid, and how often a timestamp went back.
 */
static void te_view(const char *te, const char *file, struct te_view *v, struct bytebuf *dump)
{
	const char *l, *nl, *sum;
	uint64_t last = 0;
	int rc;

	memset(v, 0, sizeof(*v));
	dump->len = 0;
	rc = th_run_fmt(dump, "dotnet '%s' dump '%s' 2>&1", te, file);
	sum = strstr(th_text(dump), "{\"summary\":true");
	cr_assert_eq(rc, 0, "TraceEvent fails on %s (exit %d): %.3000s", file, rc,
		     sum ? sum : th_text(dump));
	cr_assert_not_null(sum);
	cr_assert(strstr(sum, "\"error\":null}"), "TraceEvent: %s", sum);
	v->lost = num_after(sum, strlen(sum), "\"lost\":");
	for (l = th_text(dump); l < sum; l = nl + 1) {
		size_t len, i;
		uint64_t ts, pid;

		nl = strchr(l, '\n');
		cr_assert_not_null(nl);
		len = (size_t)(nl - l);
		ts = num_after(l, len, "\"ts\":");
		pid = num_after(l, len, "\"pid\":");
		v->backwards += ts < last;
		last = ts;
		for (i = 0; i < 5 && v->pids[i] && v->pids[i] != pid; i++)
			;
		cr_assert_lt(i, 5);
		v->pids[i] = (uint32_t)pid;
		v->by_pid[i]++;
		v->events++;
	}
}

static uint64_t te_pid(const struct te_view *v, uint32_t pid)
{
	size_t i;

	for (i = 0; i < 5; i++)
		if (v->pids[i] == pid)
			return v->by_pid[i];
	return 0;
}

/* EventsLost of file as TraceEvent counts it */
static uint64_t te_lost(const char *te, const char *file)
{
	struct bytebuf out = { 0 };
	uint64_t lost;
	int rc = th_run_fmt(&out, "dotnet '%s' counts '%s' 2>&1", te, file);

	cr_assert_eq(rc, 0, "TraceEvent cannot count %s: %s", file, th_text(&out));
	cr_assert(strstr(th_text(&out), "#lost\t"), "%s", th_text(&out));
	lost = th_count_of(th_text(&out), "#lost");
	bb_free(&out);
	return lost;
}

/* The dump line of the event with value v: it has text in it. */
static void te_line_has(const struct bytebuf *dump, uint32_t v, const char *text)
{
	char key[32];
	const char *at, *eol;

	snprintf(key, sizeof(key), "\"fields\":{\"V\":%u,", v);
	at = strstr(th_text(dump), key);
	cr_assert_not_null(at, "no event with V=%u in TraceEvent's dump", v);
	eol = strchr(at, '\n');
	while (at > th_text(dump) && at[-1] != '\n')
		at--;
	cr_assert(memmem(at, (size_t)(eol - at), text, strlen(text)),
		  "V=%u: no %s in %.*s", v, text, (int)(eol - at), at);
}

/* ---- merges --------------------------------------------------------------------- */

Test(merge, three_v6_processes_and_a_v5_one_keep_their_pids_events_and_losses, .timeout = 180)
{
	static const char *names[NSRC] = { "a.nettrace", "b.nettrace", "c.nettrace", "d.nettrace" };
	char *dir = th_tmpdir(), *in[NSRC], *out, note[1024];
	struct retrace_stats st;
	struct bytebuf raw = { 0 };
	struct seen s;
	int64_t sum = 0;
	size_t i;

	cr_assert_not_null(dir);
	for (i = 0; i < NSRC; i++) {
		uint64_t events;
		int64_t lost;

		in[i] = write_gen_file(&four[i], dir, names[i]);
		our_counts(in[i], &events, &lost);
		cr_assert_eq(events, four[i].n, "%s", names[i]);
		cr_assert_eq(lost, four_lost[i], "%s: EventsLost %" PRId64, names[i], lost);
		sum += lost;
	}
	out = th_fmt("%s/merged.nettrace", dir);
	cr_assert_eq(retrace_merge_files((const char *const *)in, NSRC, out, &st, note,
					 sizeof(note), NULL), 0, "%s", note);
	cr_assert_str_eq(note, "", "nothing to say about whole files: %s", note);
	cr_assert_eq(st.events, 3000 + 4000 + 2000 + 3000);
	cr_assert_eq(st.lost, sum);
	cr_assert_eq(st.skipped, 0);
	cr_assert_eq(st.processes, 5, "pids 1001, 1002, 1012, 1003, 7: %u", st.processes);
	cr_assert_eq(st.types, 2 * NSRC, "each source's two types, defined once each");

	cr_assert_eq(th_read_file(out, &raw), 0);
	check_output(raw.p, raw.len, four, NSRC, NULL, same_ts, &s);
	cr_assert_eq(s.info.format, NT_FORMAT_V6);
	cr_assert_eq(s.info.pid, 1001, "the header's pid is the first source's");
	cr_assert_eq(s.info.sync_ticks, four[0].sync_ticks, "the earliest anchor's clock");
	cr_assert_eq(s.info.tick_freq, GHZ);
	cr_assert_eq(s.events, st.events);
	cr_assert_eq(seen_pid(&s, 1001), 3000);
	cr_assert_eq(seen_pid(&s, 1002), 3000);
	cr_assert_eq(seen_pid(&s, 1012), 1000);
	cr_assert_eq(seen_pid(&s, 1003), 2000);
	cr_assert_eq(seen_pid(&s, 7), 3000);
	/* (1001,1) (1001,2) (1002,1) (1002,2) (1012,1) (1003,1) (1003,2) (7,1) (7,2) */
	cr_assert_eq(s.ncap, 9, "one capture thread per process and thread: %zu", s.ncap);
	cr_assert_eq(s.lost, sum, "EventsLost %" PRId64 ", the sources' %" PRId64, s.lost, sum);

	{
		const char *why = NULL, *te = th_tracedump(&why);
		struct bytebuf dump = { 0 };
		struct te_view v;
		uint64_t te_sum = 0;
		char ratio[64];
		double r = (four[3].v0 + 3) * 0.25;
		uint64_t bits;

		if (!te)
			TH_SKIP_OR_FAIL("%s (ringpipe's reader agreed)", why);
		for (i = 0; i < NSRC; i++)
			te_sum += te_lost(te, in[i]);
		cr_assert_eq(te_sum, (uint64_t)sum, "TraceEvent counts %" PRIu64 " lost in the "
			     "sources, ringpipe %" PRId64, te_sum, sum);
		te_view(te, out, &v, &dump);
		cr_assert_eq(v.events, st.events);
		cr_assert_eq(v.lost, te_sum, "EventsLost %" PRIu64 ", the sources' %" PRIu64, v.lost,
			     te_sum);
		cr_assert_eq(v.backwards, 0, "TraceEvent's timestamps went back %" PRIu64 " times",
			     v.backwards);
		cr_assert_eq(te_pid(&v, 1001), 3000);
		cr_assert_eq(te_pid(&v, 1002), 3000);
		cr_assert_eq(te_pid(&v, 1012), 1000);
		cr_assert_eq(te_pid(&v, 1003), 2000);
		cr_assert_eq(te_pid(&v, 7), 3000);
		/* names, fields and values, stacks, from each kind of source */
		te_line_has(&dump, four[1].v0 + 1, "\"name\":\"Ping\"");
		te_line_has(&dump, four[1].v0 + 1, "\"Who\":\"b\"}");
		te_line_has(&dump, four[1].v0 + 3, "\"pid\":1012,\"tid\":1,");
		memcpy(&bits, &r, 8);
		snprintf(ratio, sizeof(ratio), "\"Ratio\":\"f64:0x%016" PRIx64 "\",\"Tags\":[%u,7]",
			 bits, (four[3].v0 + 3) & 0xffff);
		te_line_has(&dump, four[3].v0 + 3, "\"name\":\"Beta\"");
		te_line_has(&dump, four[3].v0 + 3, ratio);
		te_line_has(&dump, four[3].v0 + 3, "\"pid\":7,\"tid\":2,");
		{
			uint64_t ips[2];

			gen_stack(four[2].v0 + 5, ips);
			snprintf(ratio, sizeof(ratio), "\"stack\":[\"0x%" PRIx64 "\",\"0x%" PRIx64 "\"]",
				 ips[0], ips[1]);
			te_line_has(&dump, four[2].v0 + 5, ratio);
		}
		bb_free(&dump);
	}
	for (i = 0; i < NSRC; i++)
		free(in[i]);
	free(out);
	bb_free(&raw);
	th_rmdir(dir);
}

/* Readers in memory, a V5 source forced under its host pid. */
Test(merge, a_forced_pid_puts_every_event_of_its_source_under_it)
{
	struct nt_mem_sink src[NSRC], dst;
	struct nt_reader *r[NSRC];
	struct retrace_stats st, each[NSRC];
	struct nt_writer_opts o;
	struct nt_writer *w;
	const uint32_t pids[NSRC] = { 0, 0, 0, 4004 }, forced_first[NSRC] = { 5005 };
	struct seen s;
	int64_t sum = 0;
	size_t i;

	for (i = 0; i < NSRC; i++) {
		write_gen(&four[i], &src[i]);
		r[i] = nt_reader_new_mem(src[i].buf.p, src[i].buf.len);
		cr_assert_not_null(r[i]);
		sum += four_lost[i];
	}
	retrace_merge_writer_opts(r, forced_first, NSRC, &o);
	cr_assert_eq(o.pid, 5005, "the header takes a forced first pid");
	retrace_merge_writer_opts(r, pids, NSRC, &o);
	cr_assert_eq(o.pid, 1001);
	cr_assert_eq(o.format, NT_FORMAT_V6);
	nt_mem_sink_init(&dst);
	w = nt_writer_new(&dst.base, &o);
	cr_assert_not_null(w);
	cr_assert_eq(retrace_merge_each(r, pids, NSRC, w, &st, each), 0, "%s", st.read_msg);
	cr_assert_eq(nt_writer_finish(w, st.max_ts), 0);
	nt_writer_free(w);
	for (i = 0; i < NSRC; i++) {
		cr_assert_eq(each[i].events, four[i].n, "source %zu", i);
		cr_assert_eq(each[i].lost, four_lost[i], "source %zu", i);
		cr_assert_eq(each[i].types, 2);
	}
	cr_assert_eq(each[1].processes, 2);
	cr_assert_eq(each[3].processes, 1);
	cr_assert_eq(st.lost, sum);
	check_output(dst.buf.p, dst.buf.len, four, NSRC, pids, same_ts, &s);
	cr_assert_eq(seen_pid(&s, 4004), 3000);
	cr_assert_eq(seen_pid(&s, 7), 0, "the V5 stream's own pid is gone");
	cr_assert_eq(s.lost, sum);
	for (i = 0; i < NSRC; i++) {
		nt_reader_free(r[i]);
		nt_mem_sink_fini(&src[i]);
	}
	nt_mem_sink_fini(&dst);
}

/* A merge of one stream is its copy, byte for byte. */
Test(merge, a_merge_of_one_stream_is_its_retrace_copy)
{
	struct nt_mem_sink src, a, b;
	struct nt_reader *r;
	struct retrace_stats st;
	struct nt_writer_opts o;
	struct nt_writer *w;
	uint32_t pid = 4242;

	write_gen(&four[3], &src);
	r = nt_reader_new_mem(src.buf.p, src.buf.len);
	retrace_writer_opts(r, NT_FORMAT_V6, pid, &o);
	nt_mem_sink_init(&a);
	w = nt_writer_new(&a.base, &o);
	cr_assert_eq(retrace_copy_stats(r, w, pid, &st), 0);
	cr_assert_eq(nt_writer_finish(w, st.max_ts), 0);
	nt_writer_free(w);
	nt_reader_free(r);

	r = nt_reader_new_mem(src.buf.p, src.buf.len);
	retrace_merge_writer_opts(&r, &pid, 1, &o);
	nt_mem_sink_init(&b);
	w = nt_writer_new(&b.base, &o);
	cr_assert_eq(retrace_merge(&r, &pid, 1, w, &st), 0);
	cr_assert_eq(nt_writer_finish(w, st.max_ts), 0);
	nt_writer_free(w);
	nt_reader_free(r);

	cr_assert_eq(st.unsorted, 0, "the reader hands the runs out in order");
	cr_assert_eq(a.buf.len, b.buf.len);
	cr_assert_eq(memcmp(a.buf.p, b.buf.p, a.buf.len), 0);
	nt_mem_sink_fini(&src);
	nt_mem_sink_fini(&a);
	nt_mem_sink_fini(&b);
}

/* ---- clocks --------------------------------------------------------------------- */

/*
 * Four clocks. The earliest anchor is the output's clock, though its
 * source is not the first: A counts ns from 5 s at WALL0. B counts 100 ns
 * ticks from 1000 at WALL0 + 2 ms: scaled. C counts A's ns, anchored 2.5
 * ms after it (the header keeps 2 ms of that): the same clock, its ticks
 * kept exactly (through the anchors it would land 0.5 ms early). D counts
 * ns of another machine from 777 at WALL0 + 1 ms: shifted. Each event
 * lands at its wall-clock time, so they interleave A B C A D B A.
 */
static const struct gen clocks[] = {
	{ NT_FORMAT_V6, 2002, 0, 1000, 10000000, WALL0 + 2 * MS, 1000 + 20000, 20000, 2,
	  1 * V_SPAN, 'B', 0, 0, 0, false, false },
	{ NT_FORMAT_V6, 2001, 0, 5 * GHZ, GHZ, WALL0, 5 * GHZ + 3 * MS, 2 * MS, 3,
	  2 * V_SPAN, 'A', 0, 0, 0, false, false },
	{ NT_FORMAT_V5, 2003, 0, 5 * GHZ + 2500000, GHZ, WALL0 + 2500000, 5 * GHZ + 4500000, 1, 1,
	  3 * V_SPAN, 'C', 0, 0, 0, false, false },
	{ NT_FORMAT_V6, 2004, 0, 777, GHZ, WALL0 + 1 * MS, 777 + 4200000, 1, 1,
	  4 * V_SPAN, 'D', 0, 0, 0, false, false },
};
#define NCLOCKS (sizeof(clocks) / sizeof(clocks[0]))

/* Where each event of clocks[] must land: on A's clock, at its wall time */
static uint64_t wall_ts(const struct gen *g, uint32_t k)
{
	static const uint64_t at_ms10[4][3] = {
		{ 40, 60 },		/* B: 4 and 6 ms */
		{ 30, 50, 70 },		/* A: 3, 5, 7 ms */
		{ 45 },			/* C: 4.5 ms, its own ticks */
		{ 52 },			/* D: 5.2 ms */
	};

	return 5 * GHZ + at_ms10[g - clocks][k] * (MS / 10);
}

Test(merge, sources_on_different_clocks_interleave_in_true_time_order, .timeout = 120)
{
	static const uint32_t order[] = { 200000, 100000, 300000, 200001, 400000, 100001, 200002 };
	struct nt_mem_sink src[NCLOCKS], dst;
	struct nt_reader *r[NCLOCKS];
	struct retrace_stats st;
	struct nt_writer_opts o;
	struct nt_writer *w;
	struct nt_rec rec;
	struct seen s;
	size_t i = 0;
	int rc;

	for (i = 0; i < NCLOCKS; i++) {
		write_gen(&clocks[i], &src[i]);
		r[i] = nt_reader_new_mem(src[i].buf.p, src[i].buf.len);
		cr_assert_not_null(r[i]);
	}
	retrace_merge_writer_opts(r, NULL, NCLOCKS, &o);
	cr_assert_eq(o.tick_freq, GHZ, "A's clock");
	cr_assert_eq(o.sync_ticks, 5 * GHZ);
	cr_assert_eq(o.pid, 2002, "the first source's pid");
	nt_mem_sink_init(&dst);
	w = nt_writer_new(&dst.base, &o);
	cr_assert_eq(retrace_merge(r, NULL, NCLOCKS, w, &st), 0);
	cr_assert_eq(nt_writer_finish(w, st.max_ts), 0);
	nt_writer_free(w);
	cr_assert_eq(st.events, 7);
	cr_assert_eq(st.unsorted, 0);
	check_output(dst.buf.p, dst.buf.len, clocks, NCLOCKS, NULL, wall_ts, &s);
	cr_assert_eq(s.info.pid, 2002);
	for (i = 0; i < NCLOCKS; i++)
		nt_reader_free(r[i]);

	/* and in that order, not only in timestamps that happen to rise */
	r[0] = nt_reader_new_mem(dst.buf.p, dst.buf.len);
	for (i = 0; (rc = nt_reader_next(r[0], &rec)) > 0; i++) {
		uint32_t v;

		memcpy(&v, rec.payload, 4);
		cr_assert_lt(i, 7);
		cr_assert_eq(v, order[i], "event %zu is V=%u, not %u", i, v, order[i]);
	}
	cr_assert_eq(rc, 0);
	cr_assert_eq(i, 7);
	nt_reader_free(r[0]);

	{
		TH_NEED_TRACEDUMP(te);
		char *dir = th_tmpdir(), *file = th_fmt("%s/clocks.nettrace", dir);
		struct bytebuf dump = { 0 };
		const char *l = NULL;
		struct te_view v;

		cr_assert_eq(th_write_file(file, dst.buf.p, dst.buf.len), 0);
		te_view(te, file, &v, &dump);
		cr_assert_eq(v.events, 7);
		cr_assert_eq(v.backwards, 0);
		for (i = 0, l = th_text(&dump); i < 7; i++, l = strchr(l, '\n') + 1) {
			char want[48];

			snprintf(want, sizeof(want), "\"fields\":{\"V\":%u,", order[i]);
			cr_assert(memmem(l, (size_t)(strchr(l, '\n') - l), want, strlen(want)),
				  "TraceEvent's event %zu is not V=%u: %.300s", i, order[i], l);
		}
		bb_free(&dump);
		free(file);
		th_rmdir(dir);
	}
	for (i = 0; i < NCLOCKS; i++)
		nt_mem_sink_fini(&src[i]);
	nt_mem_sink_fini(&dst);
}

/* ---- order ----------------------------------------------------------------------- */

struct placed {
	uint64_t offset, ts;
	bool sorted;
};

static int cmp_offset(const void *a, const void *b)
{
	const struct placed *x = a, *y = b;

	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/*
 * Source X (V5) breaks its own IsSorted promise, so its reader hands its
 * events out of order (100, then thread 2's 90), and thread 2 loses two
 * events; Y (V6) is in order. In the merge, X's 90 must go unsorted (an
 * IsSorted event is never earlier than one written before it), and it is
 * on another capture thread than the event before it, which TraceEvent
 * would count its number against in the same block.
 */
Test(merge, an_event_handed_out_of_order_goes_unsorted_and_losses_stay_right, .timeout = 120)
{
	static const struct { uint32_t tid, seq; uint64_t ts; bool sorted; int block; } xs[] = {
		{ 1, 2, 100, true, 1 }, { 1, 3, 130, false, 1 },
		{ 2, 2, 90, true, 1 }, { 2, 3, 140, false, 1 },
		{ 1, 4, 210, true, 2 }, { 2, 6, 220, true, 2 },
	};
	static const uint64_t ys[] = { 95, 135, 215 };
	struct nt_mem_sink src[2], dst;
	struct nt_writer_opts o = {
		.sz = sizeof(o), .format = NT_FORMAT_V5, .pid = 8, .sync_ticks = 10, .tick_freq = GHZ,
		.sync_unix_ns = WALL0, .pointer_size = 8, .nr_cpus = 2,
	};
	struct placed at[16];
	struct bytebuf pl = { 0 };
	struct nt_reader *r[2];
	struct retrace_stats st;
	struct nt_writer *w;
	struct nt_rec rec;
	uint64_t latest = 0;
	uint32_t id, i, n = 0;
	int rc;

	for (i = 0; i < 2; i++) {
		nt_mem_sink_init(&src[i]);
		o.format = i ? NT_FORMAT_V6 : NT_FORMAT_V5;
		o.pid = i ? 9 : 8;
		w = nt_writer_new(&src[i].base, &o);
		cr_assert_not_null(w);
		cr_assert_eq(nt_writer_define(w, &ping_desc, &id), 0);
		for (n = 0; n < (i ? 3u : 6u); n++) {
			struct nt_event ev = { .meta_id = id, .cpu = 0 };

			if (i) {
				ev.tid = 1, ev.seq = 2 + n, ev.ts = ys[n], ev.sorted = true;
			} else {
				ev.tid = xs[n].tid, ev.seq = xs[n].seq, ev.ts = xs[n].ts;
				ev.sorted = xs[n].sorted;
				if (n && xs[n].block != xs[n - 1].block)
					cr_assert_eq(nt_writer_flush(w), 0);
			}
			event_payload(&pl, (i + 1) * V_SPAN + n, false, 'o');
			ev.payload = pl.p;
			ev.payload_len = (uint32_t)pl.len;
			cr_assert_eq(nt_writer_event(w, &ev), 0);
		}
		cr_assert_eq(nt_writer_finish(w, 300), 0);
		nt_writer_free(w);
		r[i] = nt_reader_new_mem(src[i].buf.p, src[i].buf.len);
	}
	retrace_merge_writer_opts(r, NULL, 2, &o);
	nt_mem_sink_init(&dst);
	w = nt_writer_new(&dst.base, &o);
	cr_assert_eq(retrace_merge(r, NULL, 2, w, &st), 0, "%s", st.read_msg);
	cr_assert_eq(nt_writer_finish(w, st.max_ts), 0);
	nt_writer_free(w);
	cr_assert_eq(st.events, 9);
	cr_assert_eq(st.lost, 2);
	cr_assert_geq(st.unsorted, 1, "90 after 100 must go unsorted");

	/* the writer's promise, in the file's own order */
	nt_reader_free(r[0]);
	r[0] = nt_reader_new_mem(dst.buf.p, dst.buf.len);
	for (n = 0; (rc = nt_reader_next(r[0], &rec)) > 0; n++) {
		cr_assert_lt(n, 16);
		at[n] = (struct placed){ rec.offset, rec.ts, rec.sorted };
	}
	cr_assert_eq(rc, 0, "%s", nt_reader_errmsg(r[0]));
	cr_assert_eq(n, 9);
	cr_assert_eq(nt_reader_lost(r[0]), 2);
	qsort(at, n, sizeof(at[0]), cmp_offset);
	for (i = 0; i < n; i++) {
		cr_assert(!at[i].sorted || at[i].ts >= latest, "IsSorted event at %" PRIu64
			  " after one at %" PRIu64, at[i].ts, latest);
		if (at[i].ts > latest)
			latest = at[i].ts;
	}
	{
		TH_NEED_TRACEDUMP(te);
		char *dir = th_tmpdir(), *file = th_fmt("%s/order.nettrace", dir);
		struct bytebuf dump = { 0 };
		struct te_view v;

		cr_assert_eq(th_write_file(file, dst.buf.p, dst.buf.len), 0);
		te_view(te, file, &v, &dump);
		cr_assert_eq(v.events, 9);
		cr_assert_eq(v.lost, 2, "TraceEvent counts %" PRIu64 " lost", v.lost);
		cr_assert_eq(te_pid(&v, 8), 6);
		cr_assert_eq(te_pid(&v, 9), 3);
		bb_free(&dump);
		free(file);
		th_rmdir(dir);
	}
	for (i = 0; i < 2; i++) {
		nt_reader_free(r[i]);
		nt_mem_sink_fini(&src[i]);
	}
	nt_mem_sink_fini(&dst);
	bb_free(&pl);
}

/* ---- files and the command line ---------------------------------------------------- */

/*
 * A source cut 40 bytes into its second event block: six events in the
 * whole first block (thread 2's run held back by the reader until a later
 * sorted event), fifty in the cut one. The file holds the cut stream; *cut
 * is its length.
 */
static char *write_cut(const char *dir, const char *name, int format, uint32_t pid, size_t *cut)
{
	struct nt_writer_opts o = {
		.sz = sizeof(o), .format = format, .pid = pid, .sync_ticks = 10, .tick_freq = GHZ,
		.sync_unix_ns = WALL0, .pointer_size = 8, .nr_cpus = 2,
	};
	struct bytebuf pl = { 0 };
	struct nt_mem_sink m;
	struct nt_writer *w;
	char *path = th_fmt("%s/%s", dir, name);
	uint32_t id, i;

	nt_mem_sink_init(&m);
	w = nt_writer_new(&m.base, &o);
	cr_assert_not_null(w);
	cr_assert_eq(nt_writer_define(w, &ping_desc, &id), 0);
	for (i = 0; i < 56; i++) {
		struct nt_event ev = {
			.meta_id = id, .tid = i < 6 ? 1 + i / 3 : 1, .ts = 100 + i,
			.seq = i < 6 ? 2 + i % 3 : 5 + i - 6, .sorted = i >= 6 || i % 3 == 0,
		};

		event_payload(&pl, pid * 100 + i, false, 'x');
		ev.payload = pl.p;
		ev.payload_len = (uint32_t)pl.len;
		cr_assert_eq(nt_writer_event(w, &ev), 0);
		if (i == 5) {
			cr_assert_eq(nt_writer_flush(w), 0);
			*cut = nt_writer_bytes(w) + 40;
		}
	}
	cr_assert_eq(nt_writer_finish(w, 200), 0);
	nt_writer_free(w);
	cr_assert_lt(*cut, m.buf.len);
	cr_assert_eq(th_write_file(path, m.buf.p, *cut), 0);
	nt_mem_sink_fini(&m);
	bb_free(&pl);
	return path;
}

/* Runs `ringpipe merge ARGS`; its exit status, its output in out. */
static int merge_run(struct bytebuf *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int merge_run(struct bytebuf *out, const char *fmt, ...)
{
	char *args = NULL, *cmd;
	va_list ap;
	int rc;

	va_start(ap, fmt);
	cr_assert_geq(vasprintf(&args, fmt, ap), 0);
	va_end(ap);
	cmd = th_fmt("merge %s", args);
	out->len = 0;
	rc = th_tool_run(cmd, out);
	free(cmd);
	free(args);
	return rc;
}

Test(merge, a_cut_short_input_gives_its_whole_blocks_and_stays_as_it_was, .timeout = 120)
{
	char *dir = th_tmpdir(), *good, *cut5, *cut6, *out, note[2048];
	struct bytebuf o = { 0 }, before5 = { 0 }, before6 = { 0 }, after = { 0 };
	struct retrace_stats st;
	const char *in[3];
	size_t len5, len6;
	uint64_t events;
	int64_t lost;

	good = write_gen_file(&four[0], dir, "good.nettrace");
	cut5 = write_cut(dir, "cut5.nettrace", NT_FORMAT_V5, 55, &len5);
	cut6 = write_cut(dir, "cut6.nettrace", NT_FORMAT_V6, 66, &len6);
	cr_assert_eq(th_read_file(cut5, &before5), 0);
	cr_assert_eq(th_read_file(cut6, &before6), 0);
	out = th_fmt("%s/out.nettrace", dir);
	in[0] = good;
	in[1] = cut5;
	in[2] = cut6;
	cr_assert_eq(retrace_merge_files(in, 3, out, &st, note, sizeof(note), NULL), 0, "%s",
		     note);
	cr_assert_eq(st.events, four[0].n + 6 + 6, "%" PRIu64 " events", st.events);
	cr_assert_eq(st.read_err, 0, "the repaired streams read to their end: %s", st.read_msg);
	cr_assert_eq(st.lost, four_lost[0]);
	{
		char *l5 = th_fmt("%s: the stream was cut short after %zu bytes", cut5, len5);
		char *l6 = th_fmt("%s: the stream was cut short after %zu bytes", cut6, len6);

		cr_assert(strstr(note, l5), "note: %s", note);
		cr_assert(strstr(note, l6), "note: %s", note);
		cr_assert(strstr(note, "the whole blocks kept"), "note: %s", note);
		cr_assert_not(strstr(note, good), "the whole file has nothing to say: %s", note);
		free(l5);
		free(l6);
	}
	our_counts(out, &events, &lost);
	cr_assert_eq(events, st.events);
	cr_assert_eq(lost, four_lost[0]);
	/* read, never written */
	cr_assert_eq(th_read_file(cut5, &after), 0);
	cr_assert(after.len == before5.len && !memcmp(after.p, before5.p, after.len));
	after.len = 0;
	cr_assert_eq(th_read_file(cut6, &after), 0);
	cr_assert(after.len == before6.len && !memcmp(after.p, before6.p, after.len));

	/* the command says so, file by file, and succeeds */
	cr_assert_eq(merge_run(&o, "-o '%s' '%s' '%s' '%s'", out, good, cut5, cut6), 0, "%s",
		     th_text(&o));
	{
		char *l6 = th_fmt("ringpipe merge: %s: the stream was cut short", cut6);

		cr_assert(strstr(th_text(&o), l6), "%s", th_text(&o));
		free(l6);
	}
	cr_assert(strstr(th_text(&o), ": 3 files, 3012 events, 3 processes, EventsLost 10\n"),
		  "%s", th_text(&o));
	bb_free(&o);
	bb_free(&before5);
	bb_free(&before6);
	bb_free(&after);
	free(good);
	free(cut5);
	free(cut6);
	free(out);
	th_rmdir(dir);
}

/*
 * Damage inside a block is not a stream cut short: the merge keeps the
 * events before it, says which file, and exits 1, since its output is not
 * whole.
 */
Test(merge, a_corrupt_input_keeps_what_came_before_and_fails_the_merge, .timeout = 120)
{
	char *dir = th_tmpdir(), *good, *bad, *out;
	struct bytebuf o = { 0 }, b = { 0 };
	uint64_t events;
	int64_t lost;

	good = write_gen_file(&four[0], dir, "good.nettrace");
	bad = write_gen_file(&four[1], dir, "bad.nettrace");
	cr_assert_eq(th_read_file(bad, &b), 0);
	cr_assert_gt(b.len, 4096u);
	/* 512 bytes of 0xff in the middle: record headers and varints no
	 * reader can take, far from the end */
	memset(b.p + b.len / 2, 0xff, 512);
	cr_assert_eq(th_write_file(bad, b.p, b.len), 0);
	out = th_fmt("%s/out.nettrace", dir);
	cr_assert_eq(merge_run(&o, "-o '%s' '%s' '%s'", out, good, bad), 1, "%s", th_text(&o));
	{
		char *line = th_fmt("ringpipe merge: %s: reading stopped early", bad);

		cr_assert(strstr(th_text(&o), line), "%s", th_text(&o));
		free(line);
	}
	cr_assert(strstr(th_text(&o), "an input is corrupt"), "%s", th_text(&o));
	/* what came before the damage is there */
	our_counts(out, &events, &lost);
	cr_assert(events >= four[0].n && events < four[0].n + four[1].n,
		  "%" PRIu64 " events: the good file's %u and a part of the other's", events,
		  (unsigned)four[0].n);
	bb_free(&o);
	bb_free(&b);
	free(good);
	free(bad);
	free(out);
	th_rmdir(dir);
}

Test(merge, bad_inputs_fail_naming_the_file_and_bad_usage_exits_2)
{
	char *dir = th_tmpdir(), *good, *text, *stub, *missing, *out, *empty;
	struct bytebuf o = { 0 };
	struct nt_mem_sink m;

	good = write_gen_file(&four[2], dir, "good.nettrace");
	text = th_fmt("%s/notes.txt", dir);
	cr_assert_eq(th_write_file(text, "just some words, not a trace\n", 29), 0);
	write_gen(&four[2], &m);
	stub = th_fmt("%s/stub.nettrace", dir);
	cr_assert_eq(th_write_file(stub, m.buf.p, 30), 0);
	nt_mem_sink_fini(&m);
	missing = th_fmt("%s/missing.nettrace", dir);
	out = th_fmt("%s/out.nettrace", dir);
	empty = th_fmt("%s/empty", dir);
	cr_assert_eq(mkdir(empty, 0755), 0);

	cr_assert_eq(merge_run(&o, "-o '%s' '%s' '%s'", out, good, text), 1, "%s", th_text(&o));
	{
		char *want = th_fmt("ringpipe merge: %s: not a nettrace file", text);

		cr_assert(strstr(th_text(&o), want), "%s", th_text(&o));
		free(want);
	}
	cr_assert_eq(merge_run(&o, "-o '%s' '%s' '%s'", out, missing, good), 1);
	{
		char *want = th_fmt("ringpipe merge: %s: No such file or directory", missing);

		cr_assert(strstr(th_text(&o), want), "%s", th_text(&o));
		free(want);
	}
	cr_assert_eq(merge_run(&o, "-o '%s' '%s' '%s'", out, good, stub), 1);
	{
		char *want = th_fmt("ringpipe merge: %s: the stream ended after 30 bytes, before "
				    "the end of its trace header", stub);

		cr_assert(strstr(th_text(&o), want), "%s", th_text(&o));
		free(want);
	}
	cr_assert_eq(merge_run(&o, "-o '%s' '%s'", out, empty), 1);
	cr_assert(strstr(th_text(&o), "no *.nettrace file in it"), "%s", th_text(&o));
	/* nothing written, not even half */
	cr_assert_neq(access(out, F_OK), 0, "a failed merge left %s", out);
	{
		char *tmp = th_fmt("%s/.out.nettrace.tmp", dir);

		cr_assert_neq(access(tmp, F_OK), 0, "a failed merge left %s", tmp);
		free(tmp);
	}

	cr_assert_eq(merge_run(&o, "%s", ""), 2, "%s", th_text(&o));
	cr_assert_eq(merge_run(&o, "'%s'", good), 2, "no -o: %s", th_text(&o));
	cr_assert(strstr(th_text(&o), "-o OUT is required"), "%s", th_text(&o));
	cr_assert_eq(merge_run(&o, "%s", "-o"), 2);
	cr_assert_eq(merge_run(&o, "-o '%s'", out), 2, "no input: %s", th_text(&o));
	cr_assert(strstr(th_text(&o), "no input files"), "%s", th_text(&o));
	cr_assert_eq(merge_run(&o, "--frobnicate -o '%s' '%s'", out, good), 2);
	cr_assert(strstr(th_text(&o), "unknown option '--frobnicate'"), "%s", th_text(&o));
	cr_assert_eq(merge_run(&o, "%s", "--help"), 0);
	cr_assert(strstr(th_text(&o), "usage: ringpipe merge -o OUT"), "%s", th_text(&o));
	cr_assert_neq(access(out, F_OK), 0);
	bb_free(&o);
	free(good);
	free(text);
	free(stub);
	free(missing);
	free(out);
	free(empty);
	th_rmdir(dir);
}

/*
 * A directory stands for its *.nettrace files, in name order: not the
 * output (here a stale one, then the merge itself on a second run), not
 * hidden files, not other files, not directories.
 */
Test(merge, a_directory_merges_its_nettrace_files_and_never_its_output, .timeout = 180)
{
	char *dir = th_tmpdir(), *in[3], *out, *junk[4];
	struct bytebuf o = { 0 }, raw = { 0 };
	const struct gen srcs[3] = { four[0], four[1], four[3] };
	struct seen s;
	int run;
	size_t i;

	in[0] = write_gen_file(&srcs[0], dir, "app-1001.nettrace");
	in[1] = write_gen_file(&srcs[1], dir, "app-1002.nettrace");
	in[2] = write_gen_file(&srcs[2], dir, "dotnet-7.nettrace");
	out = th_fmt("%s/all.nettrace", dir);
	junk[0] = th_fmt("%s/README.txt", dir);
	junk[1] = th_fmt("%s/.dotnet-9.part.nettrace", dir);
	junk[2] = out;
	for (i = 0; i < 3; i++)
		cr_assert_eq(th_write_file(junk[i], "not a trace", 11), 0);
	junk[3] = th_fmt("%s/old.nettrace", dir);
	cr_assert_eq(mkdir(junk[3], 0755), 0);
	/* an agent's merged file holds what the others do; an empty one is a
	 * file whose writer died before it began: both left out */
	cr_assert_eq(th_write_file(th_fmt("%s/ringpipe-host_1_20261201.nettrace", dir), "junk", 4), 0);
	cr_assert_eq(th_write_file(th_fmt("%s/app-1003.nettrace", dir), "", 0), 0);

	for (run = 0; run < 2; run++) {
		cr_assert_eq(merge_run(&o, "-o '%s' '%s/'", out, dir), 0, "run %d: %s", run,
			     th_text(&o));
		cr_assert(strstr(th_text(&o), ": 3 files, 10000 events, 4 processes, EventsLost 18\n"),
			  "run %d: %s", run, th_text(&o));
		cr_assert(strstr(th_text(&o), "app-1003.nettrace: empty, left out"), "%s", th_text(&o));
		raw.len = 0;
		cr_assert_eq(th_read_file(out, &raw), 0);
		check_output(raw.p, raw.len, srcs, 3, NULL, same_ts, &s);
		cr_assert_eq(s.events, 10000);
		cr_assert_eq(seen_pid(&s, 1001), 3000);
		cr_assert_eq(seen_pid(&s, 1012), 1000);
		cr_assert_eq(seen_pid(&s, 7), 3000);
		cr_assert_eq(s.lost, 18);
		cr_assert_eq(s.info.pid, 1001, "app-1001 sorts first");
	}
	{
		TH_NEED_TRACEDUMP(te);
		struct bytebuf dump = { 0 };
		struct te_view v;

		te_view(te, out, &v, &dump);
		cr_assert_eq(v.events, 10000);
		cr_assert_eq(v.lost, 18);
		cr_assert_eq(v.backwards, 0);
		cr_assert_eq(te_pid(&v, 1002), 3000);
		cr_assert_eq(te_pid(&v, 7), 3000);
		bb_free(&dump);
	}
	bb_free(&o);
	bb_free(&raw);
	for (i = 0; i < 3; i++)
		free(in[i]);
	free(junk[0]);
	free(junk[1]);
	free(junk[3]);
	free(out);
	th_rmdir(dir);
}
