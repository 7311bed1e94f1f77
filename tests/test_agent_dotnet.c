// SPDX-License-Identifier: MIT
/*
 * The host agent's .NET streams (tools/ringpipe/agent/dotnet.c) and the
 * retrace under them (retrace.c).
 *
 * Retrace is checked without a runtime: a V5 trace written by ringpipe's
 * writer the way the runtime lays one out (each thread's run in a block,
 * only its first event IsSorted, so the reader hands events out of
 * timestamp order), with stacks, activity ids, nested fields and a gap
 * of three, copied to V6 under another pid; ringpipe's reader and
 * TraceEvent must see the same events, fields, stacks, timestamps and
 * EventsLost, and the new pid everywhere. A stream cut in the middle of a
 * block keeps every whole block's events.
 *
 * The agent is checked against real .NET processes (tests/interop/
 * DotnetApp): one in its own pid and mount namespace with a private /tmp,
 * started suspended (DOTNET_DefaultDiagnosticPortSuspend=1: it waits for
 * the agent's ResumeRuntime, so the trace holds every event it wrote); one
 * started after the agent, which must be found within scan_ms, and whose
 * session agent_dotnet_stop() ends while the process runs on; one killed
 * with SIGKILL mid-trace. Each agent traces only the test's own
 * descendants (the host may run other tests' .NET processes). Without
 * dotnet or TraceDump these skip with the reason, unless
 * RINGPIPE_REQUIRE_INTEROP=1, which makes them fail.
 */
#include <inttypes.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "atomics.h"
#include "clock.h"
#include "agent/dotnet.h"
#include "helpers.h"
#include "ipc.h"		/* rp_proc_start_ticks: the key of a socket's name */
#include "ipc_client.h"
#include "nettrace_read.h"
#include "trace/retrace.h"
#include "ringpipe/ringpipe.h"

/* ---- helpers ---------------------------------------------------------------- */

static uint64_t now_ms(void)
{
	return rp_clock_mono_ns() / 1000000u;
}

/* TraceEvent's dump and counts of file; each must read it without error. */
static void te_dump(const char *te, const char *file, struct bytebuf *out)
{
	int rc = th_run_fmt(out, "dotnet '%s' dump '%s' 2>&1", te, file);

	cr_assert_eq(rc, 0, "TraceEvent could not read %s (exit %d): %.2000s", file, rc, th_text(out));
	cr_assert(strstr(th_text(out), "\"error\":null}"), "TraceEvent: %.2000s", th_text(out));
}

static void te_counts(const char *te, const char *file, struct bytebuf *out)
{
	int rc = th_run_fmt(out, "dotnet '%s' counts '%s' 2>&1", te, file);

	cr_assert_eq(rc, 0, "TraceEvent could not count %s (exit %d): %s", file, rc, th_text(out));
}

/* Events of a canonical dump whose pid is not pid; *events counts them all. */
static uint64_t wrong_pids(const char *dump, uint32_t pid, uint64_t *events)
{
	char want[32];
	const char *l;
	uint64_t bad = 0;

	snprintf(want, sizeof(want), "\"pid\":%u,", pid);
	*events = 0;
	for (l = dump; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : l + strlen(l)) {
		const char *nl = strchr(l, '\n');
		size_t n = nl ? (size_t)(nl - l) : strlen(l);
		const char *at;

		if (!n || !strncmp(l, "{\"summary\"", 10))
			continue;
		(*events)++;
		at = memmem(l, n, want, strlen(want));
		bad += !at;
	}
	return bad;
}

/* The N of every Ringpipe-DotnetApp Tick in a dump, in dump order. */
static size_t tick_values(const char *dump, uint64_t *v, size_t max)
{
	static const char prov[] = "\"provider\":\"Ringpipe-DotnetApp\"",
			  name[] = "\"name\":\"Tick\"", field[] = "\"fields\":{\"N\":";
	const char *l, *nl;
	size_t n = 0;

	for (l = dump; *l; l = nl ? nl + 1 : l + strlen(l)) {
		size_t len;
		const char *f;

		nl = strchr(l, '\n');
		len = nl ? (size_t)(nl - l) : strlen(l);
		if (!memmem(l, len, prov, sizeof(prov) - 1) ||
		    !memmem(l, len, name, sizeof(name) - 1))
			continue;
		f = memmem(l, len, field, sizeof(field) - 1);
		if (!f)
			continue;
		if (n < max)
			v[n] = strtoull(f + sizeof(field) - 1, NULL, 10);
		n++;
	}
	return n;
}

/* ---- a V5 trace laid out as the runtime lays it out ------------------------------ */

#define SRC_PID 77u
#define NEW_PID 4242u

static const struct nt_field work_fields[] = {
	{ "Id", NT_U32, 0, 0, NULL },
	{ "Name", NT_STRING, 0, 0, NULL },
	{ "Samples", NT_ARRAY, NT_U16, 0, NULL },
};
static const struct nt_field point_members[] = {
	{ "X", NT_I32, 0, 0, NULL },
	{ "Y", NT_F64, 0, 0, NULL },
};
static const struct nt_field point_fields[] = {
	{ "P", NT_OBJECT, 0, 2, point_members },
	{ "Flag", NT_BOOL, 0, 0, NULL },
	{ "Tags", NT_ARRAY, NT_OBJECT, 2, point_members },
};
static const struct nt_field ping_fields[] = { { "V", NT_U32, 0, 0, NULL } };

enum { K_START, K_STOP, K_POINT, K_PING, K_BARE, K_GC, K_N };

static const struct nt_event_desc descs[K_N] = {
	[K_START] = { "Test-Agent", NULL, 1, "WorkStart", 0x10, 1, 4, 1, 3, work_fields },
	[K_STOP] = { "Test-Agent", NULL, 2, "WorkStop", 0x10, 1, 4, 2, 3, work_fields },
	[K_POINT] = { "Test-Agent", NULL, 3, "Point", 0x20, 0, 5, 0, 3, point_fields },
	[K_PING] = { "Other-Source", NULL, 9, "Ping", 0, 2, 2, 0, 1, ping_fields },
	[K_BARE] = { "Other-Source", NULL, 10, "Bare", 0, 0, 4, 0, 0, NULL },
	/* the runtime's GC/Start as it writes it: no name, no field list */
	[K_GC] = { "Microsoft-Windows-DotNETRuntime", NULL, 1, "", 0x1, 2, 4, 0, 0, NULL },
};

static void payload(struct bytebuf *b, int kind, uint32_t v)
{
	double y = v * 0.25;
	int32_t x = -(int32_t)v;

	b->len = 0;
	cr_assert_eq(bb_reserve(b, 256), 0);
	switch (kind) {
	case K_START:
	case K_STOP:
		bb_u32(b, v);
		bb_put(b, "w\0o\0r\0k\0\0\0", 10);
		bb_u16(b, 3);
		bb_u16(b, (uint16_t)v);
		bb_u16(b, 7);
		bb_u16(b, 65535);
		break;
	case K_POINT:
		bb_u32(b, (uint32_t)x);
		bb_put(b, &y, 8);
		bb_u32(b, v & 1);
		bb_u16(b, 2);
		bb_u32(b, 1);
		bb_put(b, &y, 8);
		bb_u32(b, 2);
		bb_put(b, &y, 8);
		break;
	case K_PING:
		bb_u32(b, v);
		break;
	case K_BARE:
		bb_put(b, "\x01\x02\x03", 3);
		break;
	case K_GC:
		bb_u32(b, v);		/* Count */
		bb_u32(b, 1);		/* Depth */
		bb_u32(b, 0);		/* Reason */
		bb_u32(b, 0);		/* Type */
		bb_u16(b, 7);		/* ClrInstanceID */
		bb_u64(b, v);		/* ClientSequenceNumber */
		break;
	}
}

struct src_ev {
	int kind;
	uint64_t tid, capture;
	uint32_t seq;
	uint64_t ts;
	bool sorted;
	int stack;		/* 0: none, else depth */
	bool activity, related;
};

/*
 * Block 1: each thread's run, only its first event sorted, thread 102's
 * first earlier than 101's (handed out after it, out of order), and 102
 * losing 4..6. A sequence point. Block 2: one event per thread sorted,
 * one written by thread 103 on behalf of thread 104.
 */
static const struct src_ev src_events[] = {
	{ K_START, 101, 101, 2, 100, true, 3, true, false },
	{ K_POINT, 101, 101, 3, 130, false, 0, false, false },
	{ K_PING, 101, 101, 4, 160, false, 5, false, false },
	{ K_PING, 102, 102, 2, 90, true, 0, false, false },
	{ K_POINT, 102, 102, 3, 140, false, 2, true, true },
	{ K_START, 102, 102, 7, 170, false, 0, false, false },
	{ K_GC, 103, 103, 2, 150, true, 4, true, false },
	{ K_BARE, 103, 103, 3, 180, false, 0, false, false },
	{ -1, 0, 0, 0, 200, false, 0, false, false },	/* sequence point */
	{ K_STOP, 101, 101, 5, 210, true, 3, true, true },
	{ K_PING, 101, 101, 6, 240, false, 0, false, false },
	{ K_POINT, 102, 102, 8, 220, true, 1, false, false },
	{ K_PING, 104, 103, 4, 230, true, 2, false, false },
};
#define SRC_EVENTS 12u

static struct nt_writer *src_writer(struct nt_mem_sink *s, int format)
{
	struct nt_writer_opts o = {
		.sz = sizeof(o), .format = format, .pid = SRC_PID, .nr_cpus = 4,
		.pointer_size = 8, .sync_ticks = 10, .tick_freq = 10000000,
		.sync_unix_ns = 1700000000ull * 1000000000ull, .sampling_interval_ns = 1000000,
	};
	struct nt_writer *w;

	nt_mem_sink_init(s);
	w = nt_writer_new(&s->base, &o);
	cr_assert_not_null(w, "nt_writer_new: %s", strerror(errno));
	return w;
}

/* The source trace; *after_first: the stream's length once block 1 is out. */
static void write_source(struct nt_mem_sink *s, int format, uint64_t *after_sp)
{
	struct nt_writer *w = src_writer(s, format);
	struct bytebuf pl = { 0 };
	uint32_t ids[K_N], i;

	for (i = 0; i < K_N; i++)
		cr_assert_eq(nt_writer_define(w, &descs[i], &ids[i]), 0, "define %u", i);
	for (i = 0; i < sizeof(src_events) / sizeof(src_events[0]); i++) {
		const struct src_ev *e = &src_events[i];
		uint64_t stack[8] = { 0x401000 + i, 0x7f0000001234ull, 0x7f0000005678ull + i,
				      0x10, 0x20, 0x30, 0x40, 0x50 };
		uint8_t act[16] = { 0xa1, (uint8_t)i, 3 }, rel[16] = { 0xb2, 0, (uint8_t)i };
		struct nt_event ev = {
			.seq = e->seq, .tid = e->tid, .capture_tid = e->capture,
			.cpu = (uint32_t)(i % 4), .ts = e->ts, .sorted = e->sorted,
			.stack = e->stack ? stack : NULL, .stack_depth = (uint32_t)e->stack,
			.activity = e->activity ? act : NULL, .related = e->related ? rel : NULL,
		};

		if (e->kind < 0) {
			cr_assert_eq(nt_writer_sequence_point(w, e->ts), 0);
			if (after_sp)
				*after_sp = nt_writer_bytes(w);
			continue;
		}
		payload(&pl, e->kind, i + 1);
		ev.meta_id = ids[e->kind];
		ev.payload = pl.p;
		ev.payload_len = (uint32_t)pl.len;
		cr_assert_eq(nt_writer_event(w, &ev), 0, "event %u", i);
	}
	cr_assert_eq(nt_writer_finish(w, 300), 0);
	nt_writer_free(w);
	bb_free(&pl);
}

/* Every record of a trace, with copies of what the reader hands out. */
struct rrec {
	struct nt_rec rec;	/* rec.meta, payload, stack: gone with the reader */
	char *dump;		/* nt_dump_event(), pid as it is */
	uint8_t *payload, *stack;
	char *name;		/* of the metadata */
	uint8_t opcode, guid[16];
};

struct rtrace {
	struct rrec *v;
	size_t n;
	int64_t lost;
	struct nt_reader_info info;
};

static void read_trace(const void *p, size_t len, struct rtrace *t)
{
	struct nt_reader *r = nt_reader_new_mem(p, len);
	struct nt_rec rec;
	int rc;

	memset(t, 0, sizeof(*t));
	cr_assert_not_null(r);
	while ((rc = nt_reader_next(r, &rec)) > 0) {
		struct bytebuf d = { 0 };
		struct rrec *x;

		t->v = realloc(t->v, (t->n + 1) * sizeof(*t->v));
		cr_assert_not_null(t->v);
		x = &t->v[t->n++];
		nt_dump_event(r, &rec, &d);
		bb_append(&d, "", 1);
		x->rec = rec;
		x->dump = (char *)d.p;
		x->name = strdup(rec.meta->name);
		x->opcode = rec.meta->opcode;
		memcpy(x->guid, rec.meta->guid, 16);
		x->payload = malloc(rec.payload_len + 1);
		x->stack = malloc(rec.stack_bytes + 1);
		memcpy(x->payload, rec.payload, rec.payload_len);
		if (rec.stack_bytes)
			memcpy(x->stack, rec.stack, rec.stack_bytes);
	}
	cr_assert_eq(rc, 0, "reader: %s", nt_reader_errmsg(r) ? nt_reader_errmsg(r) : "?");
	t->lost = nt_reader_lost(r);
	t->info = *nt_reader_info(r);
	nt_reader_free(r);
}

static void free_trace(struct rtrace *t)
{
	size_t i;

	for (i = 0; i < t->n; i++) {
		free(t->v[i].dump);
		free(t->v[i].name);
		free(t->v[i].payload);
		free(t->v[i].stack);
	}
	free(t->v);
}

/* s with every `"pid":from,` made `"pid":to,`. One pass, by hand: a
 * strstr() loop over a dump of 100k lines is quadratic under ASan, whose
 * strstr() measures the whole haystack at every call. */
static char *with_pid(const char *s, uint32_t from, uint32_t to)
{
	char a[32], b[32];
	struct bytebuf out = { 0 };
	const char *run = s, *p;
	size_t al, bl;

	snprintf(a, sizeof(a), "\"pid\":%u,", from);
	snprintf(b, sizeof(b), "\"pid\":%u,", to);
	al = strlen(a);
	bl = strlen(b);
	for (p = s; *p; p++) {
		if (*p != '"' || strncmp(p, a, al))
			continue;
		bb_append(&out, run, (size_t)(p - run));
		bb_append(&out, b, bl);
		run = p + al;
		p = run - 1;
	}
	bb_append(&out, run, strlen(run) + 1);
	return (char *)out.p;
}

static void retrace_mem(const struct nt_mem_sink *src, struct nt_mem_sink *dst,
			struct retrace_stats *st)
{
	struct nt_reader *r = nt_reader_new_mem(src->buf.p, src->buf.len);
	struct nt_writer_opts o;
	struct nt_writer *w;

	cr_assert_not_null(r);
	nt_mem_sink_init(dst);
	retrace_writer_opts(r, NT_FORMAT_V6, NEW_PID, &o);
	w = nt_writer_new(&dst->base, &o);
	cr_assert_not_null(w, "nt_writer_new: %s", strerror(errno));
	cr_assert_eq(retrace_copy_stats(r, w, NEW_PID, st), 0, "retrace: %s", st->read_msg);
	cr_assert_eq(nt_writer_finish(w, st->max_ts), 0);
	nt_writer_free(w);
	nt_reader_free(r);
}

/* ---- retrace ------------------------------------------------------------------ */

Test(agent_dotnet, retrace_round_trip_keeps_every_event_under_the_new_pid, .timeout = 120)
{
	struct nt_mem_sink src, dst;
	struct retrace_stats st;
	struct rtrace a, b;
	uint64_t cap_map[8][2] = { { 0 } }, last_seq[8][2] = { { 0 } };
	size_t ncap = 0, i, k;
	uint64_t n = 0;

	write_source(&src, NT_FORMAT_V5, NULL);
	retrace_mem(&src, &dst, &st);
	read_trace(src.buf.p, src.buf.len, &a);
	read_trace(dst.buf.p, dst.buf.len, &b);

	/* the source is what the test means it to be */
	cr_assert_eq(a.info.format, 5);
	cr_assert_eq(a.n, SRC_EVENTS);
	cr_assert_eq(a.lost, 3, "source EventsLost %" PRId64, a.lost);
	cr_assert_lt(a.v[1].rec.ts, a.v[0].rec.ts,
		     "the source must hand out an event out of order");

	cr_assert_eq(st.events, SRC_EVENTS);
	cr_assert_eq(st.lost, 3);
	cr_assert_eq(st.skipped, 0);
	cr_assert_eq(st.types, K_N);
	cr_assert_eq(st.types_bare, 0);
	cr_assert_eq(st.types_renamed, 0);
	cr_assert_geq(st.unsorted, 1, "the out-of-order event must go unsorted");
	cr_assert_eq(st.max_ts, 240);

	cr_assert_eq(b.info.format, 6);
	cr_assert_eq(b.info.pid, NEW_PID);
	cr_assert_eq(b.info.sync_ticks, a.info.sync_ticks);
	cr_assert_eq(b.info.tick_freq, a.info.tick_freq);
	cr_assert_eq(b.info.sync_unix_ns, a.info.sync_unix_ns);
	cr_assert_eq(b.info.pointer_size, a.info.pointer_size);
	cr_assert_eq(b.info.nr_cpus, a.info.nr_cpus);
	cr_assert_eq(b.n, a.n, "events: source %zu, copy %zu", a.n, b.n);
	cr_assert_eq(b.lost, a.lost, "EventsLost: source %" PRId64 ", copy %" PRId64, a.lost,
		     b.lost);

	for (i = 0; i < a.n; i++) {
		const struct nt_rec *x = &a.v[i].rec, *y = &b.v[i].rec;
		char *want = with_pid(a.v[i].dump, SRC_PID, NEW_PID);

		cr_assert_eq(y->pid, NEW_PID, "event %zu: pid %" PRId64, i, y->pid);
		/* provider, GUID, id, name, version, opcode, level, keywords,
		 * thread, timestamp, activity ids, stack and every field */
		cr_assert_str_eq(b.v[i].dump, want, "event %zu:\n%s\n%s", i, b.v[i].dump, want);
		free(want);
		cr_assert_eq(y->cpu, x->cpu, "event %zu: cpu", i);
		cr_assert_eq(y->ts, x->ts);
		cr_assert_eq(y->tid, x->tid);
		cr_assert_eq(y->payload_len, x->payload_len);
		cr_assert_eq(memcmp(b.v[i].payload, a.v[i].payload, x->payload_len), 0);
		cr_assert_eq(y->stack_bytes, x->stack_bytes, "event %zu: stack", i);
		cr_assert_eq(memcmp(b.v[i].stack, a.v[i].stack, x->stack_bytes), 0);
		cr_assert_eq(memcmp(y->activity, x->activity, 16), 0);
		cr_assert_eq(memcmp(y->related, x->related, 16), 0);
		cr_assert_eq(b.v[i].opcode, a.v[i].opcode);
		cr_assert_str_eq(b.v[i].name, a.v[i].name);
		cr_assert_eq(memcmp(b.v[i].guid, a.v[i].guid, 16), 0);
		/* capture threads correspond one to one, with the same gaps */
		for (k = 0; k < ncap && cap_map[k][0] != x->capture_thread; k++)
			;
		if (k == ncap) {
			cr_assert_lt(ncap, 8);
			cap_map[ncap][0] = x->capture_thread;
			cap_map[ncap][1] = y->capture_thread;
			ncap++;
		} else {
			cr_assert_eq(cap_map[k][1], y->capture_thread,
				     "event %zu: capture thread", i);
			cr_assert_eq(x->seq - (uint32_t)last_seq[k][0],
				     y->seq - (uint32_t)last_seq[k][1],
				     "event %zu: sequence gap", i);
		}
		last_seq[k][0] = x->seq;
		last_seq[k][1] = y->seq;
		n++;
	}
	cr_assert_eq(ncap, 3, "capture threads 101, 102, 103");
	for (i = 0; i < ncap; i++)
		for (k = i + 1; k < ncap; k++)
			cr_assert_neq(cap_map[i][1], cap_map[k][1]);
	cr_assert_eq(n, SRC_EVENTS);

	/* and TraceEvent sees the same, event for event */
	{
		const char *why = NULL, *te = th_tracedump(&why);
		struct bytebuf da = { 0 }, db = { 0 }, ca = { 0 }, cb = { 0 };
		char *dir, *fa, *fb, *want;
		uint64_t events;

		if (!te) {
			free_trace(&a);
			free_trace(&b);
			nt_mem_sink_fini(&src);
			nt_mem_sink_fini(&dst);
			TH_SKIP_OR_FAIL("%s (ringpipe's reader agreed)", why);
		}
		dir = th_tmpdir();
		cr_assert_not_null(dir);
		fa = th_fmt("%s/source.nettrace", dir);
		fb = th_fmt("%s/copy.nettrace", dir);
		cr_assert_eq(th_write_file(fa, src.buf.p, src.buf.len), 0);
		cr_assert_eq(th_write_file(fb, dst.buf.p, dst.buf.len), 0);
		te_dump(te, fa, &da);
		te_dump(te, fb, &db);
		cr_assert(strstr(th_text(&da),
				 "{\"summary\":true,\"events\":12,\"lost\":3,\"error\":null}"),
			  "%s", th_text(&da));
		cr_assert_eq(wrong_pids(th_text(&db), NEW_PID, &events), 0, "%s", th_text(&db));
		cr_assert_eq(events, SRC_EVENTS);
		want = with_pid(th_text(&da), SRC_PID, NEW_PID);
		cr_assert_str_eq(th_text(&db), want, "TraceEvent:\nsource:\n%s\ncopy:\n%s", want,
				 th_text(&db));
		free(want);
		te_counts(te, fa, &ca);
		te_counts(te, fb, &cb);
		cr_assert_str_eq(th_text(&cb), th_text(&ca));
		cr_assert(strstr(th_text(&cb), "#lost\t3"), "%s", th_text(&cb));
		cr_assert_eq(th_count_of(th_text(&cb), "Test-Agent/Work/Start"), 2, "%s", th_text(&cb));
		bb_free(&da);
		bb_free(&db);
		bb_free(&ca);
		bb_free(&cb);
		free(fa);
		free(fb);
		th_rmdir(dir);
	}
	free_trace(&a);
	free_trace(&b);
	nt_mem_sink_fini(&src);
	nt_mem_sink_fini(&dst);
}

/* Losses a sequence point reports (after a thread's last event, a thread
 * whose every event was dropped) are carried too. */
Test(agent_dotnet, retrace_carries_losses_no_event_shows)
{
	struct nt_mem_sink src, dst;
	struct retrace_stats st;
	struct nt_writer *w = src_writer(&src, NT_FORMAT_V5);
	struct bytebuf pl = { 0 };
	struct rtrace a, b;
	uint32_t id, s;

	cr_assert_eq(nt_writer_define(w, &descs[K_PING], &id), 0);
	payload(&pl, K_PING, 1);
	for (s = 2; s <= 5; s++) {
		struct nt_event ev = { .meta_id = id, .seq = s, .tid = 7, .ts = 100 + s,
				       .payload = pl.p, .payload_len = (uint32_t)pl.len,
				       .sorted = true };

		cr_assert_eq(nt_writer_event(w, &ev), 0);
	}
	cr_assert_eq(nt_writer_note_seq(w, 0, 7, 9), 0);	/* 6..9 dropped */
	cr_assert_eq(nt_writer_note_seq(w, 0, 8, 6), 0);	/* 2..6, nothing written */
	cr_assert_eq(nt_writer_finish(w, 500), 0);
	nt_writer_free(w);
	retrace_mem(&src, &dst, &st);
	read_trace(src.buf.p, src.buf.len, &a);
	read_trace(dst.buf.p, dst.buf.len, &b);
	cr_assert_eq(a.lost, 9, "source EventsLost %" PRId64, a.lost);
	cr_assert_eq(b.lost, a.lost, "copy EventsLost %" PRId64, b.lost);
	cr_assert_eq(b.n, 4);
	free_trace(&a);
	free_trace(&b);
	bb_free(&pl);
	nt_mem_sink_fini(&src);
	nt_mem_sink_fini(&dst);
}

/*
 * A stream cut in the middle of a block: the framing walk finds where the
 * whole blocks end, and retrace_file() keeps all of their events, also
 * those a reader holds back for ordering when it meets the cut.
 */
Test(agent_dotnet, retrace_keeps_the_whole_blocks_of_a_cut_stream, .timeout = 60)
{
	int formats[] = { NT_FORMAT_V5, NT_FORMAT_V6 }, f;

	for (f = 0; f < 2; f++) {
		struct nt_mem_sink src;
		struct nt_writer *w = src_writer(&src, formats[f]);
		struct bytebuf pl = { 0 }, raw = { 0 };
		struct retrace_extent x;
		struct retrace_stats st;
		struct rtrace t;
		struct nt_reader *r;
		struct nt_rec rec;
		char *dir = th_tmpdir(), *part, *out, note[512];
		uint64_t whole, direct = 0;
		uint32_t id, i;

		cr_assert_eq(nt_writer_define(w, &descs[K_PING], &id), 0);
		payload(&pl, K_PING, 5);
		/* block 1: thread 1's run, only its first sorted, then thread
		 * 2's: held back until a later sorted event or the end */
		for (i = 0; i < 6; i++) {
			struct nt_event ev = { .meta_id = id, .seq = 2 + i % 3, .tid = 1 + i / 3,
					       .ts = 100 + i, .sorted = i % 3 == 0,
					       .payload = pl.p, .payload_len = (uint32_t)pl.len };

			cr_assert_eq(nt_writer_event(w, &ev), 0);
		}
		cr_assert_eq(nt_writer_flush(w), 0);
		whole = nt_writer_bytes(w);
		for (i = 0; i < 50; i++) {
			struct nt_event ev = { .meta_id = id, .seq = 5 + i, .tid = 1, .ts = 200 + i,
					       .sorted = true, .payload = pl.p,
					       .payload_len = (uint32_t)pl.len };

			cr_assert_eq(nt_writer_event(w, &ev), 0);
		}
		cr_assert_eq(nt_writer_finish(w, 400), 0);
		nt_writer_free(w);

		retrace_extent(src.buf.p, src.buf.len, &x);
		cr_assert_eq(x.format, formats[f]);
		cr_assert(x.ended && x.whole == src.buf.len, "V%d: a whole stream", formats[f]);
		/* cut 40 bytes into block 2 */
		retrace_extent(src.buf.p, whole + 40, &x);
		cr_assert_eq(x.format, formats[f]);
		cr_assert_not(x.ended);
		cr_assert_eq(x.whole, whole, "V%d: whole blocks end at %" PRIu64 ", not %" PRIu64,
			     formats[f], whole, x.whole);
		retrace_extent(src.buf.p, 30, &x);
		cr_assert_eq(x.format, 0, "V%d: a header cut short", formats[f]);

		/* what a reader alone makes of the cut: an error, and the
		 * held-back events are lost */
		r = nt_reader_new_mem(src.buf.p, whole + 40);
		while (nt_reader_next(r, &rec) > 0)
			direct++;
		cr_assert_not_null(nt_reader_errmsg(r));
		nt_reader_free(r);
		cr_assert_lt(direct, 6, "V%d: %" PRIu64 " events read up to the cut", formats[f],
			     direct);

		part = th_fmt("%s/.cut.part", dir);
		out = th_fmt("%s/cut.nettrace", dir);
		cr_assert_eq(th_write_file(part, src.buf.p, whole + 40), 0);
		cr_assert_eq(retrace_file(part, out, NEW_PID, NT_FORMAT_V6, &st, note,
					  sizeof(note)), 0, "%s", note);
		cr_assert(strstr(note, "cut short"), "note: %s", note);
		cr_assert_eq(st.events, 6, "V%d: %" PRIu64 " events kept", formats[f], st.events);
		cr_assert_eq(th_read_file(out, &raw), 0);
		read_trace(raw.p, raw.len, &t);
		cr_assert_eq(t.n, 6);
		cr_assert_eq(t.lost, 0);
		for (i = 0; i < t.n; i++)
			cr_assert_eq(t.v[i].rec.pid, NEW_PID);
		free_trace(&t);
		/* no temporary left behind */
		{
			char *tmp = th_fmt("%s/.cut.nettrace.tmp", dir);

			cr_assert_neq(access(tmp, F_OK), 0);
			free(tmp);
		}
		/* a stream that ends before its header is refused, with a reason */
		cr_assert_eq(th_write_file(part, src.buf.p, 30), 0);
		cr_assert_eq(retrace_file(part, out, NEW_PID, NT_FORMAT_V6, &st, note,
					  sizeof(note)), -ENODATA);
		cr_assert(strstr(note, "header"), "%s", note);
		bb_free(&raw);
		bb_free(&pl);
		free(part);
		free(out);
		nt_mem_sink_fini(&src);
		th_rmdir(dir);
	}
}

static uint64_t line_ts(const char *l)
{
	const char *t = strstr(l, "\"ts\":");

	return t ? strtoull(t + 5, NULL, 10) : UINT64_MAX;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * TraceEvent hands out events of different threads with one timestamp in
 * an order its heap decides, not the file's: each run of equal
 * timestamps is put in text order before two dumps are compared.
 */
static char *ts_runs_sorted(const char *dump)
{
	char *copy = strdup(dump), *p, *save = NULL, **lines = NULL;
	struct bytebuf out = { 0 };
	size_t n = 0, cap = 0, i, j;

	cr_assert_not_null(copy);
	for (p = strtok_r(copy, "\n", &save); p; p = strtok_r(NULL, "\n", &save)) {
		if (n == cap) {
			cap = cap ? cap * 2 : 1024;
			lines = realloc(lines, cap * sizeof(*lines));
			cr_assert_not_null(lines);
		}
		lines[n++] = p;
	}
	for (i = 0; i < n; i = j) {
		uint64_t ts = line_ts(lines[i]);

		for (j = i + 1; j < n && line_ts(lines[j]) == ts; j++)
			;
		qsort(lines + i, j - i, sizeof(*lines), cmp_str);
	}
	for (i = 0; i < n; i++)
		bb_printf(&out, "%s\n", lines[i]);
	bb_append(&out, "", 1);
	free(lines);
	free(copy);
	return (char *)out.p;
}

/* ringpipe's own dump of a file, in its dispatch order, pid as it is. */
static void our_dump(const char *path, struct bytebuf *out)
{
	struct nt_reader *r = nt_reader_open(path);
	struct nt_rec rec;
	int rc;

	cr_assert_not_null(r, "%s: %s", path, strerror(errno));
	while ((rc = nt_reader_next(r, &rec)) > 0)
		nt_dump_event(r, &rec, out);
	cr_assert_eq(rc, 0, "%s: %s", path, nt_reader_errmsg(r));
	bb_printf(out, "lost %" PRId64 "\n", nt_reader_lost(r));
	bb_append(out, "", 1);
	out->len--;
	nt_reader_free(r);
}

/*
 * Runtime-written traces (the perfview test inputs in the shared test
 * data): the V6 copy under another pid reads in TraceEvent exactly as the
 * original, event for event, with the same counts and EventsLost.
 */
static void runtime_file(const char *base)
{
	TH_NEED_TRACEDUMP(te);
	char *dir = th_tmpdir(), *src, *copy, *want, note[512];
	struct bytebuf da = { 0 }, db = { 0 }, ca = { 0 }, cb = { 0 };
	struct retrace_stats st;
	struct nt_reader *r;
	uint64_t events;
	uint32_t pid;

	cr_assert_eq(th_run_fmt(NULL, "unzip -q -o '%s/testdata/nettrace/%s.zip' -d '%s'",
			     th_shared(), base, dir), 0, "cannot unzip %s (is unzip installed?)",
		     base);
	src = th_fmt("%s/%s", dir, base);
	copy = th_fmt("%s/copy.nettrace", dir);
	r = nt_reader_open(src);
	cr_assert_not_null(r, "%s: %s", src, strerror(errno));
	pid = (uint32_t)nt_reader_info(r)->pid;
	nt_reader_free(r);
	cr_assert_neq(pid, NEW_PID);
	cr_assert_eq(retrace_file(src, copy, NEW_PID, NT_FORMAT_V6, &st, note, sizeof(note)), 0,
		     "%s", note);
	cr_assert_eq(note[0], 0, "%s: %s", base, note);
	cr_assert_eq(st.read_err, 0);
	cr_assert_eq(st.skipped, 0);
	cr_assert_eq(st.types_renamed, 0);
	/* ringpipe's reader: the same events in the same order */
	our_dump(src, &da);
	our_dump(copy, &db);
	want = with_pid(th_text(&da), pid, NEW_PID);
	cr_assert(!strcmp(th_text(&db), want), "%s: ringpipe reads the copy differently "
		  "(diff %s and %s)", base, src, copy);
	free(want);
	bb_free(&da);
	bb_free(&db);
	/* TraceEvent: the same, but for the order within equal timestamps */
	te_dump(te, src, &da);
	te_dump(te, copy, &db);
	cr_assert_eq(wrong_pids(th_text(&db), NEW_PID, &events), 0, "%s", base);
	cr_assert_eq(events, st.events);
	{
		char *x = with_pid(th_text(&da), pid, NEW_PID), *sx = ts_runs_sorted(x);
		char *sy = ts_runs_sorted(th_text(&db));

		cr_assert(!strcmp(sx, sy), "%s: TraceEvent reads the copy differently "
			  "(diff %s and %s)", base, src, copy);
		free(x);
		free(sx);
		free(sy);
	}
	te_counts(te, src, &ca);
	te_counts(te, copy, &cb);
	cr_assert_str_eq(th_text(&cb), th_text(&ca), "%s", base);
	fprintf(stderr, "%s: %" PRIu64 " events, %" PRId64 " lost, %" PRIu64 " unsorted, "
		"%u types\n", base, st.events, st.lost, st.unsorted, st.types);
	bb_free(&da);
	bb_free(&db);
	bb_free(&ca);
	bb_free(&cb);
	free(src);
	free(copy);
	th_rmdir(dir);
}

Test(agent_dotnet, retrace_of_a_dotnet3_trace_reads_the_same, .timeout = 300)
{
	runtime_file("eventpipe-dotnetcore3.0-win-x64-objver4.nettrace");
}

Test(agent_dotnet, retrace_of_a_dotnet5_trace_with_arrays_reads_the_same, .timeout = 300)
{
	runtime_file("eventpipe-dotnetcore5.0-win-x64-arraytypes.nettrace");
}

Test(agent_dotnet, retrace_of_a_dotnet6_trace_reads_the_same, .timeout = 300)
{
	runtime_file("eventpipe-dotnetcore6.0-win-x64-executioncheckpoints.nettrace");
}

/* ---- the agent against real .NET processes ------------------------------------ */

static pid_t test_pid;

static uint32_t ppid_of(uint32_t pid)
{
	char path[64], buf[512], *r;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%u/stat", pid);
	f = fopen(path, "re");
	if (!f)
		return 0;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	r = strrchr(buf, ')');
	return r && r[1] == ' ' && r[2] ? (uint32_t)strtoul(r + 4, NULL, 10) : 0;
}

/* Only this test's own descendants: the host may run other tests' .NET
 * processes, which are not ours to trace. */
static bool descendant(void *ctx, uint32_t pid)
{
	int depth;

	(void)ctx;
	for (depth = 0; depth < 32 && pid > 1; depth++) {
		pid = ppid_of(pid);
		if (pid == (uint32_t)test_pid)
			return true;
	}
	return false;
}

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static struct bytebuf agent_log;

static void log_line(void *ctx, const char *msg)
{
	(void)ctx;
	pthread_mutex_lock(&log_lock);
	bb_printf(&agent_log, "%s\n", msg);
	pthread_mutex_unlock(&log_lock);
	fprintf(stderr, "[agent] %s\n", msg);
}

static char *log_text(void)
{
	char *s;

	pthread_mutex_lock(&log_lock);
	s = strndup(th_text(&agent_log), agent_log.len);
	pthread_mutex_unlock(&log_lock);
	return s;
}

static struct agent_dotnet *start_agent_with(const char *out_dir, uint32_t scan_ms, int buffering,
					     bool (*filter)(void *ctx, uint32_t pid))
{
	struct agent_dotnet_opts o = {
		.sz = sizeof(o), .providers = "Ringpipe-DotnetApp", .buffering = buffering,
		.buffer_mb = 64, .out_dir = out_dir, .scan_ms = scan_ms, .log = log_line,
		.filter = filter,
	};
	struct agent_dotnet *a;

	test_pid = getpid();
	a = agent_dotnet_start(&o);
	cr_assert_not_null(a, "agent_dotnet_start: %s", strerror(errno));
	return a;
}

static struct agent_dotnet *start_agent(const char *out_dir, uint32_t scan_ms, int buffering)
{
	return start_agent_with(out_dir, scan_ms, buffering, descendant);
}

/* Until the test opens it, the agent sees no process at all: a scan that
 * runs before then finds nothing, whenever it runs. */
static int gate_open;	/* atomic */

static bool descendant_past_gate(void *ctx, uint32_t pid)
{
	/* pairs with the store_release of gate_open in the test */
	return rp_load_acquire(&gate_open) && descendant(ctx, pid);
}

/* The entry for host pid (the newest), true when there is one. */
static bool find_proc(struct agent_dotnet *a, uint32_t pid, struct agent_dotnet_proc *out)
{
	struct agent_dotnet_proc v[64];
	size_t n = agent_dotnet_list(a, v, 64), i = n < 64 ? n : 64;

	while (i--) {
		if (v[i].pid == pid) {
			*out = v[i];
			return true;
		}
	}
	return false;
}

/* Waits until pid's entry is in state (or past it, for TRACING: with
 * bytes); false after ms. */
static bool wait_state(struct agent_dotnet *a, uint32_t pid, int state, uint64_t ms,
		       struct agent_dotnet_proc *out)
{
	uint64_t end = now_ms() + ms;

	do {
		if (find_proc(a, pid, out) && out->state == state &&
		    (state != AGENT_DN_TRACING || out->bytes > 0))
			return true;
		usleep(20000);
	} while (now_ms() < end);
	return false;
}

/* Waits until pid's stream has brought more than `bytes` bytes (events
 * written after those bytes arrived, that is); false after ms. */
static bool wait_bytes(struct agent_dotnet *a, uint32_t pid, uint64_t bytes, uint64_t ms,
		       struct agent_dotnet_proc *out)
{
	uint64_t end = now_ms() + ms;

	do {
		if (find_proc(a, pid, out) && out->bytes > bytes)
			return true;
		usleep(20000);
	} while (now_ms() < end);
	return false;
}

static const char *dotnet_bin(void)
{
	static char path[4096];
	struct bytebuf out = { 0 };

	if (!path[0] && th_run("command -v dotnet", &out) == 0 && out.p) {
		((char *)out.p)[strcspn((char *)out.p, "\n")] = 0;
		if (!realpath((char *)out.p, path))
			snprintf(path, sizeof(path), "%s", (char *)out.p);
	}
	bb_free(&out);
	return path;
}

/* Starts argv with stdout and stderr in out_path; killed if we die. */
static pid_t spawn(char *const argv[], const char *out_path)
{
	pid_t pid = fork();

	cr_assert_geq(pid, 0);
	if (pid == 0) {
		int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (fd >= 0) {
			dup2(fd, STDOUT_FILENO);
			dup2(fd, STDERR_FILENO);
		}
		execvp(argv[0], argv);
		_exit(127);
	}
	return pid;
}

/* Waits for pid to exit within ms; its status, or -1 (still running). */
static int wait_exit(pid_t pid, uint64_t ms)
{
	uint64_t end = now_ms() + ms;
	int st;

	do {
		if (waitpid(pid, &st, WNOHANG) == pid)
			return st;
		usleep(20000);
	} while (now_ms() < end);
	return -1;
}

static void kill_wait(pid_t pid)
{
	int st;

	if (pid <= 0)
		return;
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
}

/* Ends a .NET app with SIGKILL, and removes the socket it cannot. */
static void kill_app(pid_t pid)
{
	char sock[IPCC_PATH_MAX];
	bool have = !ipcc_find_socket(pid, sock, sizeof(sock));

	kill_wait(pid);
	if (have)
		unlink(sock);
}

/* SIGSTOP, and wait until every thread of pid has stopped (kill() returns
 * before they do). */
static void stop_proc(pid_t pid)
{
	char path[64], buf[512], *r;
	int i;

	cr_assert_eq(kill(pid, SIGSTOP), 0);
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	for (i = 0; i < 6000; i++) {
		FILE *f = fopen(path, "re");
		size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;

		if (f)
			fclose(f);
		buf[n] = 0;
		r = strrchr(buf, ')');
		if (r && r[1] == ' ' && r[2] == 'T')
			return;
		usleep(10000);
	}
	cr_assert_fail("pid %d did not stop in 60 s", (int)pid);
}

static uint64_t file_size(const char *path)
{
	struct stat sb;

	return stat(path, &sb) ? 0 : (uint64_t)sb.st_size;
}

/* The final file of an entry; no .part left in dir. */
static void check_files(const char *dir, const struct agent_dotnet_proc *p)
{
	char *want = th_fmt("%s/dotnet-%s-%u-%" PRIu64 ".nettrace", dir, p->comm, p->pid,
			    p->start_time);
	char *part = th_fmt("%s/.dotnet-%u-%" PRIu64 ".part", dir, p->pid, p->start_time);

	cr_assert_str_eq(p->file, want);
	cr_assert_gt(file_size(want), 0, "%s is missing or empty", want);
	cr_assert_neq(access(part, F_OK), 0, "%s was left behind", part);
	free(want);
	free(part);
}

/*
 * A .NET process in its own pid and mount namespaces, with a /tmp of its
 * own: found through /proc/<pid>/root/tmp under its inner pid (1), traced
 * from its first event, every event of the file under its host pid.
 */
Test(agent_dotnet_interop, a_containerised_app_is_traced_under_its_host_pid, .timeout = 240)
{
	TH_NEED_TRACEDUMP(te);
	const char *dll = th_dotnet_app();
	char dllabs[4096], *dir = th_tmpdir(), *appout, *script, *prefix, *log;
	struct bytebuf out = { 0 }, dump = { 0 }, counts = { 0 };
	struct agent_dotnet_proc p;
	struct agent_dotnet *a;
	uint64_t written, traced, events;
	uint32_t host = 0;
	const char *t;
	pid_t ush;
	int st;

	if (th_run_fmt(&out, "unshare -p -m -f --mount-proc sh -c 'mount -t tmpfs tmpfs /tmp' 2>&1"))
		TH_SKIP_OR_FAIL("unshare cannot make pid and mount namespaces here (root is "
				"needed): %s", th_text(&out));
	bb_free(&out);
	cr_assert_not_null(realpath(dll, dllabs));
	cr_assert(dotnet_bin()[0], "dotnet is not on PATH");
	appout = th_fmt("%s/app.out", dir);
	/* the mount namespace shares everything but its /tmp (into which
	 * th_private_tmp_cmd() binds this tree where it lies under /tmp):
	 * absolute paths, and TMPDIR where the runtime's socket is to be */
	script = th_fmt("%s && export TMPDIR=/tmp "
			"DOTNET_DefaultDiagnosticPortSuspend=1 && exec '%s' '%s' --rate 100 "
			"--duration 2", th_private_tmp_cmd(th_fmt("%s/ctmp", dir)), dotnet_bin(),
			dllabs);
	a = start_agent(dir, 200, RP_BUFFERING_DROP);
	{
		char *argv[] = { "unshare", "-p", "-m", "-f", "--mount-proc", "--kill-child",
				 "sh", "-c", script, NULL };

		ush = spawn(argv, appout);
	}
	/* the app waits for the agent's ResumeRuntime, then runs 2 s */
	st = wait_exit(ush, 180000);
	if (st == -1) {
		char *l = log_text();

		kill_wait(ush);
		cr_assert_fail("the app did not finish (the agent never resumed it?); agent "
			       "log:\n%s", l);
	}
	cr_assert_eq(th_read_file(appout, &out), 0);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the app ended with 0x%x: %s", st,
		  th_text(&out));
	t = strstr(th_text(&out), "ticks ");
	cr_assert_not_null(t, "%s", th_text(&out));
	written = strtoull(t + 6, NULL, 10);
	cr_assert_gt(written, 100);
	cr_assert(strstr(th_text(&out), "pid 1\n"), "not pid 1 in its namespace: %s", th_text(&out));

	/* the entry: the only dotnet process among our descendants */
	{
		struct agent_dotnet_proc v[16];
		size_t n = agent_dotnet_list(a, v, 16), i;

		for (i = 0; i < n && i < 16; i++)
			if (!strcmp(v[i].comm, "dotnet"))
				host = v[i].pid;
	}
	log = log_text();
	cr_assert_neq(host, 0, "the agent did not find the app; its log:\n%s", log);
	free(log);
	cr_assert(wait_state(a, host, AGENT_DN_ENDED, 60000, &p), "state %d, error %s", p.state,
		  p.error);
	cr_assert_neq(p.inner_pid, p.pid);
	cr_assert_eq(p.inner_pid, 1);
	prefix = th_fmt("/proc/%u/root/tmp/dotnet-diagnostic-1-", p.pid);
	cr_assert(!strncmp(p.socket, prefix, strlen(prefix)), "socket %s", p.socket);
	cr_assert_gt(p.bytes, 0);
	cr_assert_eq(p.lost, 0);
	cr_assert_eq(agent_dotnet_stop(a), 0);
	check_files(dir, &p);

	te_dump(te, p.file, &dump);
	cr_assert_eq(wrong_pids(th_text(&dump), host, &events), 0,
		     "events not under host pid %u:\n%.3000s", host, th_text(&dump));
	cr_assert_eq(events, p.events, "TraceEvent %" PRIu64 " events, the agent %" PRIu64,
		     events, p.events);
	te_counts(te, p.file, &counts);
	traced = th_count_of(th_text(&counts), "Ringpipe-DotnetApp/Tick");
	cr_assert_eq(traced, written, "the app wrote %" PRIu64 " ticks, the file has %" PRIu64
		     ":\n%s", written, traced, th_text(&counts));
	cr_assert(strstr(th_text(&counts), "#lost\t0"), "%s", th_text(&counts));
	{
		uint64_t v[4096];
		size_t n = tick_values(th_text(&dump), v, 4096), i;

		cr_assert_eq(n, written);
		for (i = 0; i < n && i < 4096; i++)
			cr_assert_eq(v[i], i + 1, "tick %zu is N=%" PRIu64, i, v[i]);
	}
	bb_free(&out);
	bb_free(&dump);
	bb_free(&counts);
	free(prefix);
	free(script);
	free(appout);
	th_rmdir(dir);
}

/*
 * A .NET process started after the agent is found by a scan, in Block mode
 * falls back to Drop (.NET 10 has no CollectTracing6); agent_dotnet_stop()
 * ends its session with StopTracing, the runtime writes rundown and ends
 * the stream, and the process runs on. (How long after its socket appeared
 * it was found is printed, not judged: that is the scan period plus
 * whatever the host's load adds.)
 */
Test(agent_dotnet_interop, a_late_app_is_found_and_stop_leaves_it_running, .timeout = 240)
{
	TH_NEED_TRACEDUMP(te);
	const char *dll = th_dotnet_app();
	char *dir = th_tmpdir(), *appout = th_fmt("%s/app.out", dir), *final, *log;
	char *argv[] = { (char *)dotnet_bin(), (char *)dll, "--rate", "100", "--duration", "0",
			 NULL };
	struct bytebuf dump = { 0 }, counts = { 0 };
	struct agent_dotnet_proc p;
	struct agent_dotnet *a;
	uint64_t t_sock = 0, t_found = 0, deadline, events, ticks;
	const uint32_t scan_ms = 500;
	char sock[IPCC_PATH_MAX];
	pid_t app;

	a = start_agent(dir, scan_ms, RP_BUFFERING_BLOCK);
	app = spawn(argv, appout);
	deadline = now_ms() + 120000;
	while (!t_found && now_ms() < deadline) {
		if (!t_sock && !ipcc_find_socket(app, sock, sizeof(sock)))
			t_sock = now_ms();
		if (find_proc(a, (uint32_t)app, &p))
			t_found = now_ms();
		usleep(10000);
	}
	log = log_text();
	cr_assert(t_found, "the app (pid %d) was not found; agent log:\n%s", (int)app, log);
	free(log);
	if (!t_sock)
		t_sock = t_found;	/* found before the test saw the socket */
	fprintf(stderr, "late app found %" PRIu64 " ms after its socket appeared (scan every "
		"%u ms)\n", t_found - t_sock, scan_ms);
	cr_assert(wait_state(a, (uint32_t)app, AGENT_DN_TRACING, 60000, &p), "state %d: %s",
		  p.state, p.error);
	cr_assert_eq(p.inner_pid, p.pid, "not in a namespace of its own");
	cr_assert_eq(p.buffering, RP_BUFFERING_DROP, "Block should fall back to Drop");
	log = log_text();
	cr_assert(strstr(log, "falling back to Drop"), "%s", log);
	free(log);
	/* some ticks into the stream: 4 KiB past what it had brought when the
	 * state said tracing */
	cr_assert(wait_bytes(a, (uint32_t)app, p.bytes + 4096, 60000, &p),
		  "the stream stopped at %" PRIu64 " bytes", p.bytes);
	final = th_fmt("%s/dotnet-%s-%u-%" PRIu64 ".nettrace", dir, p.comm, p.pid, p.start_time);
	cr_assert_eq(agent_dotnet_stop(a), 0, "agent_dotnet_stop");
	cr_assert_eq(wait_exit(app, 1000), -1, "the app ended with the session");
	cr_assert_eq(kill(app, 0), 0);
	p.state = AGENT_DN_ENDED;
	snprintf(p.file, sizeof(p.file), "%s", final);
	check_files(dir, &p);
	log = log_text();
	cr_assert(strstr(log, " lost, in "), "no summary line:\n%s", log);
	free(log);

	te_dump(te, final, &dump);
	cr_assert_eq(wrong_pids(th_text(&dump), (uint32_t)app, &events), 0, "%.3000s", th_text(&dump));
	cr_assert_gt(events, 0);
	te_counts(te, final, &counts);
	ticks = th_count_of(th_text(&counts), "Ringpipe-DotnetApp/Tick");
	cr_assert_gt(ticks, 0, "no tick in the trace:\n%s", th_text(&counts));
	/* the end of a session stopped in time: rundown resolves method names */
	cr_assert(strstr(th_text(&counts), "Microsoft-Windows-DotNETRuntimeRundown/"),
		  "no rundown events:\n%s", th_text(&counts));
	cr_assert(strstr(th_text(&counts), "#lost\t0"), "%s", th_text(&counts));
	kill_app(app);
	bb_free(&dump);
	bb_free(&counts);
	free(final);
	free(appout);
	th_rmdir(dir);
}

/* A process killed mid-trace: its file holds the events up to the cut,
 * one run of ticks without a gap, and the entry says the stream ended. */
Test(agent_dotnet_interop, a_killed_app_leaves_the_events_up_to_the_cut, .timeout = 240)
{
	TH_NEED_TRACEDUMP(te);
	const char *dll = th_dotnet_app();
	char *dir = th_tmpdir(), *appout = th_fmt("%s/app.out", dir);
	char *tmpdir = th_fmt("%s/apptmp", dir), *env = th_fmt("TMPDIR=%s", tmpdir);
	char *argv[] = { "env", env, (char *)dotnet_bin(), (char *)dll, "--rate", "200",
			 "--duration", "0", NULL };
	struct bytebuf dump = { 0 }, counts = { 0 };
	struct agent_dotnet_proc p;
	struct agent_dotnet *a;
	uint64_t events, v[8192];
	size_t n, i;
	pid_t app;

	/* its socket in a TMPDIR of its own, not in /tmp: found by its maps,
	 * and looked for where its environment says */
	cr_assert_eq(mkdir(tmpdir, 0700), 0);
	a = start_agent(dir, 200, RP_BUFFERING_DROP);
	app = spawn(argv, appout);
	cr_assert(wait_state(a, (uint32_t)app, AGENT_DN_TRACING, 120000, &p), "state %d: %s",
		  p.state, p.error);
	cr_assert(!strncmp(p.socket, tmpdir, strlen(tmpdir)), "socket %s", p.socket);
	/* ticks in the stream before the cut: 8 KiB past its first bytes */
	cr_assert(wait_bytes(a, (uint32_t)app, p.bytes + 8192, 60000, &p),
		  "the stream stopped at %" PRIu64 " bytes", p.bytes);
	kill_app(app);
	cr_assert(wait_state(a, (uint32_t)app, AGENT_DN_ENDED, 60000, &p), "state %d: %s",
		  p.state, p.error);
	fprintf(stderr, "killed app: %" PRIu64 " bytes, %" PRIu64 " events, note: %s\n", p.bytes,
		p.events, p.error);
	cr_assert_eq(agent_dotnet_stop(a), 0);
	check_files(dir, &p);
	cr_assert_gt(p.events, 0);

	te_dump(te, p.file, &dump);
	cr_assert_eq(wrong_pids(th_text(&dump), (uint32_t)app, &events), 0, "%.3000s", th_text(&dump));
	cr_assert_eq(events, p.events);
	n = tick_values(th_text(&dump), v, 8192);
	/* what the stream had brought, less what the runtime still held when
	 * it died */
	cr_assert_gt(n, 0, "no tick before the cut");
	for (i = 1; i < n && i < 8192; i++)
		cr_assert_eq(v[i], v[i - 1] + 1, "ticks %" PRIu64 " then %" PRIu64, v[i - 1], v[i]);
	te_counts(te, p.file, &counts);
	cr_assert(strstr(th_text(&counts), "#lost\t0"), "%s", th_text(&counts));
	bb_free(&dump);
	bb_free(&counts);
	free(appout);
	free(tmpdir);
	free(env);
	th_rmdir(dir);
}

/*
 * A poke finds a process long before the next scan: the scans come ten
 * minutes apart, and the first one, at the start, is kept from seeing the
 * app (the filter lets nothing through until the test opens it, just
 * before the poke), so nothing but the poke can find it within the test.
 * The poke comes once the app's socket exists, so that the runtime's start,
 * however slow the host, is not raced against the poke's window.
 */
Test(agent_dotnet_interop, a_poked_app_is_found_before_the_next_scan, .timeout = 300)
{
	const char *dll = th_dotnet_app();
	char *dir = th_tmpdir(), *appout = th_fmt("%s/app.out", dir), *log;
	char *argv[] = { (char *)dotnet_bin(), (char *)dll, "--rate", "20", "--duration", "0",
			 NULL };
	char sock[IPCC_PATH_MAX];
	struct agent_dotnet_proc p;
	struct agent_dotnet *a;
	uint64_t t0, end;
	pid_t app;

	rp_store_relaxed(&gate_open, 0);
	a = start_agent_with(dir, 600000, RP_BUFFERING_DROP, descendant_past_gate);
	app = spawn(argv, appout);
	for (end = now_ms() + 120000; ipcc_find_socket(app, sock, sizeof(sock)); usleep(10000))
		cr_assert_lt(now_ms(), end, "the app made no socket in 120 s");
	cr_assert_not(find_proc(a, (uint32_t)app, &p), "found before the gate opened (state %d)",
		      p.state);
	/* pairs with the load_acquire in descendant_past_gate() */
	rp_store_release(&gate_open, 1);
	t0 = now_ms();
	agent_dotnet_poke(a, (uint32_t)app);
	/* a hang guard, far below the next scan (ten minutes) */
	if (!wait_state(a, (uint32_t)app, AGENT_DN_TRACING, 120000, &p)) {
		log = log_text();
		kill_app(app);
		cr_assert_fail("not traced %" PRIu64 " ms after the poke; agent log:\n%s",
			       now_ms() - t0, log);
	}
	fprintf(stderr, "poked app traced after %" PRIu64 " ms\n", now_ms() - t0);
	cr_assert_eq(agent_dotnet_stop(a), 0);
	cr_assert_eq(wait_exit(app, 500), -1, "the app ended with the session");
	kill_app(app);
	free(appout);
	th_rmdir(dir);
}

/* Waits until pid has exec'ed comm (its /proc comm says so); a hang guard
 * of 60 s */
static void wait_comm(pid_t pid, const char *comm)
{
	char *path = th_fmt("/proc/%d/comm", (int)pid), *want = th_fmt("%s\n", comm);
	uint64_t end = now_ms() + 60000;

	for (;;) {
		struct bytebuf b = { 0 };
		bool is = !th_read_file(path, &b) && !strcmp(th_text(&b), want);

		bb_free(&b);
		if (is)
			break;
		cr_assert_lt(now_ms(), end, "pid %d did not exec %s in 60 s", (int)pid, comm);
		usleep(1000);
	}
	free(path);
	free(want);
}

/*
 * A "runtime" that takes connections and never answers (a socket of the
 * right name that nobody accepts on) holds only its own session thread: a
 * real app is traced meanwhile, while the mute one's start still waits
 * for its answer, and agent_dotnet_stop() cancels that wait rather than
 * leaving it to its timeout (the log says which of the two ended it).
 * The app runs and has its socket before the agent starts, so that the
 * agent's first scan finds both, and the app's session needs only its
 * IPC while the mute one's waits out its reply timeout.
 */
Test(agent_dotnet_interop, a_runtime_that_never_answers_holds_up_nothing, .timeout = 300)
{
	const char *dll = th_dotnet_app();
	char *dir = th_tmpdir(), *appout = th_fmt("%s/app.out", dir), *sockpath;
	char *argv[] = { (char *)dotnet_bin(), (char *)dll, "--rate", "20", "--duration", "0",
			 NULL };
	char *sleeper_argv[] = { "sleep", "120", NULL }, *deadpath, *log, *cancelled;
	struct sockaddr_un sa = { .sun_family = AF_UNIX }, da = { .sun_family = AF_UNIX };
	struct agent_dotnet_proc p, q, r;
	char sock[IPCC_PATH_MAX];
	struct agent_dotnet *a;
	pid_t app, mute, dead;
	uint64_t end, t_before = 0, t_now;
	bool mute_waits = false;
	int lfd, dfd;

	mute = spawn(sleeper_argv, "/dev/null");
	dead = spawn(sleeper_argv, "/dev/null");
	wait_comm(mute, "sleep");
	wait_comm(dead, "sleep");
	/* and one whose socket nobody listens on: refused, tried again only
	 * after AGENT_DN_RETRY_MS */
	deadpath = th_fmt("/tmp/dotnet-diagnostic-%d-%llu-socket", (int)dead,
			  rp_proc_start_ticks(dead));
	memcpy(da.sun_path, deadpath, strlen(deadpath));
	dfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert_geq(dfd, 0);
	cr_assert_eq(bind(dfd, (struct sockaddr *)&da, sizeof(da)), 0);
	close(dfd);
	sockpath = th_fmt("/tmp/dotnet-diagnostic-%d-%llu-socket", (int)mute,
			  rp_proc_start_ticks(mute));
	cr_assert_lt(strlen(sockpath), sizeof(sa.sun_path));
	memcpy(sa.sun_path, sockpath, strlen(sockpath));
	lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert_geq(lfd, 0);
	cr_assert_eq(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0, "%s: %s", sockpath,
		     strerror(errno));
	cr_assert_eq(listen(lfd, 16), 0);

	app = spawn(argv, appout);
	for (end = now_ms() + 120000; ipcc_find_socket(app, sock, sizeof(sock)); usleep(10000))
		cr_assert_lt(now_ms(), end, "the app made no socket in 120 s");
	a = start_agent(dir, 200, RP_BUFFERING_DROP);
	/* the app traced; the mute process seen at that moment */
	for (end = now_ms() + 120000;; usleep(10000)) {
		bool traced = find_proc(a, (uint32_t)app, &p) && p.state == AGENT_DN_TRACING &&
			      p.bytes > 0;

		if (find_proc(a, (uint32_t)mute, &q) && traced)
			break;
		cr_assert_lt(now_ms(), end, "the app was not traced in 120 s (state %d: %s)",
			     p.state, p.error);
	}
	cr_assert_eq(q.state, AGENT_DN_STARTING, "the mute process: state %d (%s) when the app "
		     "was traced", q.state, q.error);
	cr_assert_str_eq(q.socket, sockpath);
	/* the refused one: failed once, and not tried again before
	 * AGENT_DN_RETRY_MS has passed. It failed after the last look that
	 * did not see it failed (t_before): a look less than that long after
	 * t_before must find it tried once. */
	for (end = now_ms() + 60000;; usleep(20000)) {
		if (find_proc(a, (uint32_t)dead, &r) && r.state == AGENT_DN_FAILED)
			break;
		cr_assert_lt(now_ms(), end, "the dead socket's process: state %d", r.state);
		t_before = now_ms();
	}
	cr_assert(strstr(r.error, "refused"), "%s", r.error);
	usleep(AGENT_DN_RETRY_MS * 1000 / 2);	/* a dozen scans */
	cr_assert(find_proc(a, (uint32_t)dead, &r));
	t_now = now_ms();
	if (t_before && t_now - t_before < AGENT_DN_RETRY_MS)
		cr_assert_eq(r.attempts, 1, "tried %u times within %" PRIu64 " ms of its first "
			     "failure", r.attempts, t_now - t_before);
	else
		fprintf(stderr, "attempts not judged: %" PRIu64 " ms may have passed since the "
			"failure\n", t_before ? t_now - t_before : 0);
	/* the mute one still waits (or waits again): stop ends that wait */
	mute_waits = find_proc(a, (uint32_t)mute, &q) && q.state == AGENT_DN_STARTING;
	cr_assert_eq(agent_dotnet_stop(a), 0);
	log = log_text();
	cancelled = th_fmt("pid %d (sleep): the agent stopped before the session started",
			   (int)mute);
	if (mute_waits)
		cr_assert(strstr(log, cancelled),
			  "the stop did not end the mute process's wait:\n%s", log);
	free(cancelled);
	free(log);
	cr_assert_eq(wait_exit(app, 200), -1, "the app ended with the session");
	kill_app(app);
	kill_wait(mute);
	kill_wait(dead);
	close(lfd);
	unlink(sockpath);
	unlink(deadpath);
	free(sockpath);
	free(deadpath);
	free(appout);
	th_rmdir(dir);
}

/* Options a session could never start with are refused at once, with a
 * message. */
Test(agent_dotnet, bad_options_are_refused_with_a_message)
{
	char *dir = th_tmpdir(), *file = th_fmt("%s/f", dir);
	struct agent_dotnet_opts o = { .sz = sizeof(o), .out_dir = dir, .log = log_line };
	struct agent_dotnet *a;

	cr_assert_eq(th_write_file(file, "x", 1), 0);
	o.buffering = 7;
	cr_assert_null(agent_dotnet_start(&o));
	cr_assert_eq(errno, EINVAL);
	o.buffering = RP_BUFFERING_DROP;
	o.providers = "Bad-Provider:not-a-number";
	cr_assert_null(agent_dotnet_start(&o));
	cr_assert_eq(errno, EINVAL);
	o.providers = NULL;
	o.buffer_mb = 0xffffffffu;
	cr_assert_null(agent_dotnet_start(&o));
	cr_assert_eq(errno, EINVAL);
	o.buffer_mb = 0;
	o.out_dir = NULL;
	cr_assert_null(agent_dotnet_start(&o));
	cr_assert_eq(errno, EINVAL);
	o.out_dir = file;
	cr_assert_null(agent_dotnet_start(&o));
	cr_assert_eq(errno, ENOTDIR);
	o.out_dir = "/nonexistent/ringpipe-agent";
	cr_assert_null(agent_dotnet_start(&o));
	cr_assert_eq(errno, ENOENT);
	{
		char *log = log_text();

		cr_assert(strstr(log, "buffering mode 7"), "%s", log);
		cr_assert(strstr(log, "providers: "), "%s", log);
		cr_assert(strstr(log, "/nonexistent/ringpipe-agent: "), "%s", log);
		free(log);
	}
	/* and the defaults start, and stop with nothing to do */
	o.out_dir = dir;
	test_pid = getpid();
	o.filter = descendant;
	a = agent_dotnet_start(&o);
	cr_assert_not_null(a, "%s", strerror(errno));
	cr_assert_eq(agent_dotnet_list(a, NULL, 0), 0);
	cr_assert_eq(agent_dotnet_stop(a), 0);
	cr_assert_eq(agent_dotnet_stop(NULL), 0);
	free(file);
	th_rmdir(dir);
}

/*
 * A stopped process (SIGSTOP) takes connections and answers none: the
 * scanner leaves it alone until it runs again, and agent_dotnet_stop()
 * gives up on its stream after AGENT_DN_STOP_WAIT_MS, keeping what had
 * arrived.
 */
Test(agent_dotnet_interop, a_stopped_app_is_waited_for_only_so_long, .timeout = 180)
{
	TH_NEED_TRACEDUMP(te);
	const char *dll = th_dotnet_app();
	char *dir = th_tmpdir(), *appout = th_fmt("%s/app.out", dir), *final;
	char *argv[] = { (char *)dotnet_bin(), (char *)dll, "--rate", "100", "--duration", "0",
			 NULL };
	struct bytebuf dump = { 0 };
	struct agent_dotnet_proc p;
	struct agent_dotnet *a;
	char sock[IPCC_PATH_MAX];
	uint64_t t0, took, events;
	pid_t app;
	int i, rc;

	app = spawn(argv, appout);
	for (i = 0; i < 12000 && ipcc_find_socket(app, sock, sizeof(sock)); i++)
		usleep(10000);
	cr_assert_lt(i, 12000, "the app made no socket in 120 s");
	stop_proc(app);
	a = start_agent(dir, 200, RP_BUFFERING_DROP);
	/* however many scans pass while it is stopped, none tries it */
	usleep(1000000);
	cr_assert_not(find_proc(a, (uint32_t)app, &p), "a stopped process was tried (state %d)",
		      p.state);
	cr_assert_eq(kill(app, SIGCONT), 0);
	cr_assert(wait_state(a, (uint32_t)app, AGENT_DN_TRACING, 60000, &p), "state %d: %s",
		  p.state, p.error);
	/* ticks in the stream before it stops again */
	cr_assert(wait_bytes(a, (uint32_t)app, p.bytes + 4096, 60000, &p),
		  "the stream stopped at %" PRIu64 " bytes", p.bytes);
	stop_proc(app);
	final = th_fmt("%s/dotnet-%s-%u-%" PRIu64 ".nettrace", dir, p.comm, p.pid, p.start_time);
	t0 = now_ms();
	rc = agent_dotnet_stop(a);
	took = now_ms() - t0;
	/* it waited for the stream, and then gave up on it rather than
	 * hang (by how much it overran its wait is the host's load, not a
	 * verdict: only a hang guard) */
	cr_assert_eq(rc, -ETIMEDOUT, "agent_dotnet_stop: %d", rc);
	cr_assert_geq(took, AGENT_DN_STOP_WAIT_MS - 100, "agent_dotnet_stop gave up after %" PRIu64
		      " ms", took);
	cr_assert_lt(took, AGENT_DN_STOP_WAIT_MS + 60000, "agent_dotnet_stop took %" PRIu64 " ms",
		     took);
	snprintf(p.file, sizeof(p.file), "%s", final);
	check_files(dir, &p);
	te_dump(te, final, &dump);
	cr_assert_eq(wrong_pids(th_text(&dump), (uint32_t)app, &events), 0, "%.3000s", th_text(&dump));
	cr_assert_gt(tick_values(th_text(&dump), NULL, 0), 0, "no ticks kept");
	kill_app(app);
	bb_free(&dump);
	free(final);
	free(appout);
	th_rmdir(dir);
}
