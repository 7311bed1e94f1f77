// SPDX-License-Identifier: MIT
/*
 * nettrace writer and reader: byte layout, round trips, sequence accounting,
 * and hostile input. TraceEvent's own verdicts are in test_interop.c.
 */
#include <inttypes.h>
#include <string.h>

#include "helpers.h"
#include "hmap.h"
#include "nettrace_read.h"
#include "tracegen.h"
#include "utf.h"

static const struct nt_field one_u32[] = { { "V", NT_U32, 0, 0, NULL } };
static const struct nt_event_desc plain_desc = {
	"Test-Provider", NULL, 7, "Plain", 0, 0, 4, 0, 1, one_u32
};

static struct nt_writer *new_writer(struct nt_mem_sink *s, int format)
{
	struct nt_writer_opts o = {
		.sz = sizeof(o), .format = format, .pid = 77, .nr_cpus = 2,
		.pointer_size = 8, .sync_ticks = 10, .tick_freq = 1000000,
		.sync_unix_ns = 1700000000ull * 1000000000ull,
	};
	struct nt_writer *w;

	nt_mem_sink_init(s);
	w = nt_writer_new(&s->base, &o);
	cr_assert_not_null(w, "nt_writer_new failed: %s", strerror(errno));
	return w;
}

static int put_plain(struct nt_writer *w, uint32_t meta, uint64_t tid, uint32_t seq,
		     uint64_t ts, uint32_t v)
{
	struct nt_event ev = { .meta_id = meta, .seq = seq, .tid = tid, .ts = ts,
			       .payload = &v, .payload_len = 4, .sorted = true };

	return nt_writer_event(w, &ev);
}

struct read_stats {
	uint64_t events;
	int64_t lost;
	int err;
	char errmsg[256];
};

static struct read_stats read_all(const void *p, size_t n)
{
	struct read_stats st = { 0 };
	struct nt_reader *r = nt_reader_new_mem(p, n);
	struct nt_rec rec;

	cr_assert_not_null(r);
	while ((st.err = nt_reader_next(r, &rec)) > 0)
		st.events++;
	st.lost = nt_reader_lost(r);
	if (st.err < 0)
		snprintf(st.errmsg, sizeof(st.errmsg), "%s", nt_reader_errmsg(r));
	nt_reader_free(r);
	return st;
}

Test(nettrace, sha1_vectors)
{
	uint8_t h[20];
	char hex[41];
	int i;

	sha1("abc", 3, h);
	for (i = 0; i < 20; i++)
		sprintf(hex + 2 * i, "%02x", h[i]);
	cr_assert_str_eq(hex, "a9993e364706816aba3e25717850c26c9cd0d89d");
	sha1("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56, h);
	for (i = 0; i < 20; i++)
		sprintf(hex + 2 * i, "%02x", h[i]);
	cr_assert_str_eq(hex, "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
}

Test(nettrace, provider_guids)
{
	uint8_t g[16];
	char s[37];

	/* EventSource name hash: the System.Runtime counters provider */
	nt_provider_guid("System.Runtime", g);
	nt_guid_format(g, s);
	cr_assert_str_eq(s, "49592c0f-5a05-516d-aa4b-a64e02026c89");
	/* fixed CLR GUID */
	nt_provider_guid("Microsoft-Windows-DotNETRuntime", g);
	nt_guid_format(g, s);
	cr_assert_str_eq(s, "e13c0d23-ccbc-4e12-931b-d9cc2eee27e4");
	cr_assert_eq(nt_guid_parse("e13c0d23-ccbc-4e12-931b-d9cc2eee27e4", g), 0);
	nt_guid_format(g, s);
	cr_assert_str_eq(s, "e13c0d23-ccbc-4e12-931b-d9cc2eee27e4");
	cr_assert_neq(nt_guid_parse("e13c0d23-ccbc-4e12-931b-d9cc2eee27e", g), 0);
}

Test(nettrace, v5_stream_header_and_trace_object)
{
	struct nt_mem_sink s;
	struct nt_writer *w = new_writer(&s, NT_FORMAT_V5);
	const uint8_t *p;
	int32_t v;

	cr_assert_eq(nt_writer_finish(w, 10), 0);
	p = s.buf.p;
	cr_assert_eq(memcmp(p, "Nettrace", 8), 0);
	memcpy(&v, p + 8, 4);
	cr_assert_eq(v, 20, "FastSerialization header length: expected 20, got %d", v);
	cr_assert_eq(memcmp(p + 12, "!FastSerialization.1", 20), 0);
	/* 05 05 01 version 4, min 4, "Trace", 06, 48 bytes, 06 */
	cr_assert_eq(memcmp(p + 32, "\x05\x05\x01\x04\0\0\0\x04\0\0\0\x05\0\0\0Trace\x06", 21), 0);
	cr_assert_eq(p[32 + 21 + 48], 0x06, "EndObject after the 48-byte Trace payload");
	/* year 2023 from sync_unix_ns 1.7e9 s, pid 77 */
	{
		uint16_t year;
		uint32_t pid;

		memcpy(&year, p + 53, 2);
		memcpy(&pid, p + 53 + 36, 4);
		cr_assert_eq(year, 2023);
		cr_assert_eq(pid, 77);
	}
	cr_assert_eq(p[s.buf.len - 1], 0x01, "stream ends with the NullReference tag");
	{
		struct read_stats st = read_all(s.buf.p, s.buf.len);

		cr_assert_eq(st.err, 0, "%s", st.errmsg);
		cr_assert_eq(st.events, 0);
	}
	nt_writer_free(w);
	nt_mem_sink_fini(&s);
}

/* Independent walk over V5 objects: checks tags, alignment and sizes. */
Test(nettrace, v5_blocks_are_aligned_and_framed)
{
	struct nt_mem_sink s;
	struct tracegen_opts o = { .format = NT_FORMAT_V5, .events = 5000, .threads = 3,
				   .sp_every = 1000 };
	struct tracegen_result res;
	size_t pos = 32, nblocks = 0;
	const uint8_t *p;

	nt_mem_sink_init(&s);
	cr_assert_eq(tracegen_write(&s.base, &o, &res), 0);
	p = s.buf.p;
	/* skip the Trace object */
	pos += 21 + 48 + 1;
	while (p[pos] == 0x05) {
		uint32_t len;
		int32_t size;

		cr_assert_eq(p[pos + 1], 0x05);
		cr_assert_eq(p[pos + 2], 0x01);
		memcpy(&len, p + pos + 11, 4);
		cr_assert(len >= 7 && len <= 13, "type name length %u", len);
		pos += 15 + len;
		cr_assert_eq(p[pos], 0x06);
		pos++;
		memcpy(&size, p + pos, 4);
		pos += 4;
		while (pos & 3) {
			cr_assert_eq(p[pos], 0, "padding must be zero");
			pos++;
		}
		cr_assert(size > 0 && pos + (size_t)size < s.buf.len);
		pos += (size_t)size;
		cr_assert_eq(p[pos], 0x06, "EndObject after block at %zu", pos);
		pos++;
		nblocks++;
	}
	cr_assert_eq(p[pos], 0x01);
	cr_assert_eq(pos + 1, s.buf.len, "nothing after the end-of-stream tag");
	cr_assert(nblocks >= 10, "expected metadata, stack, event and SP blocks, saw %zu", nblocks);
	nt_mem_sink_fini(&s);
}

static void roundtrip(int format)
{
	struct nt_mem_sink s;
	struct tracegen_opts o = { .format = format, .events = 30000, .threads = 5,
				   .gap_every = 97, .lead_gap = 3, .tail_gap = 2,
				   .sp_every = 4000, .seed = 99 };
	struct tracegen_result res;
	struct nt_reader *r;
	struct nt_rec rec;
	struct hmap last_seq = { 0 }, last_ts = { 0 };
	uint64_t n = 0, per_name[16] = { 0 };
	int err;
	size_t i;

	nt_mem_sink_init(&s);
	cr_assert_eq(tracegen_write(&s.base, &o, &res), 0);
	r = nt_reader_new_mem(s.buf.p, s.buf.len);
	while ((err = nt_reader_next(r, &rec)) > 0) {
		uint64_t key = ((uint64_t)rec.pid << 32) | (uint64_t)rec.tid, v;

		n++;
		if (hmap_get(&last_seq, key, &v))
			cr_assert_gt(rec.seq, (uint32_t)v, "thread %" PRId64 " sequence went back",
				     rec.tid);
		if (hmap_get(&last_ts, key, &v))
			cr_assert_geq(rec.ts, v, "thread %" PRId64 " time went back", rec.tid);
		hmap_put(&last_seq, key, rec.seq);
		hmap_put(&last_ts, key, rec.ts);
		cr_assert(rec.meta->event_id < 16);
	}
	cr_assert_eq(err, 0, "reader error: %s", nt_reader_errmsg(r));
	cr_assert_eq(n, res.written, "events: wrote %" PRIu64 ", read %" PRIu64, res.written, n);
	cr_assert_eq(nt_reader_lost(r), (int64_t)res.lost,
		     "EventsLost: injected %" PRIu64 ", counted %" PRId64, res.lost,
		     nt_reader_lost(r));
	cr_assert_gt(res.lost, 0);
	cr_assert_eq(last_seq.count, 5, "5 capture threads");
	/* counts per event type agree with what the generator wrote */
	for (i = 0; i < nt_reader_nmeta(r); i++) {
		const struct nt_meta *m = nt_reader_meta(r, i);

		if (!strcmp(m->provider, "Ringpipe-Demo"))
			per_name[m->event_id] += m->count;
	}
	cr_assert_eq(per_name[1], res.per_event[0]);
	cr_assert_eq(per_name[7], res.per_event[6]);
	nt_reader_free(r);
	hmap_free(&last_seq);
	hmap_free(&last_ts);
	nt_mem_sink_fini(&s);
}

Test(nettrace, roundtrip_v5) { roundtrip(NT_FORMAT_V5); }
Test(nettrace, roundtrip_v6) { roundtrip(NT_FORMAT_V6); }

/* A known event decodes to a known canonical line. */
Test(nettrace, canonical_dump_of_known_values)
{
	static const struct nt_field f[] = {
		{ "B", NT_BOOL, 0, 0, NULL }, { "I", NT_I32, 0, 0, NULL },
		{ "D", NT_F64, 0, 0, NULL }, { "S", NT_STRING, 0, 0, NULL },
		{ "A", NT_ARRAY, NT_U16, 0, NULL },
	};
	const struct nt_event_desc d = { "My-Source", NULL, 3, "WorkStart", 0x5, 2, 4, 0, 5, f };
	struct nt_mem_sink s;
	struct nt_writer *w = new_writer(&s, NT_FORMAT_V5);
	struct bytebuf pl = { 0 }, out = { 0 };
	struct nt_event ev = { .seq = 2, .tid = 55, .ts = 1234, .sorted = true };
	uint64_t stack[2] = { 0x10, 0xabc };
	uint8_t act[16] = { 1, 2, 3 };
	struct nt_reader *r;
	struct nt_rec rec;
	double dv = 1.5;
	uint32_t id;

	cr_assert_eq(nt_writer_define(w, &d, &id), 0);
	bb_reserve(&pl, 64);
	bb_u32(&pl, 1);
	bb_u32(&pl, (uint32_t)-5);
	bb_put(&pl, &dv, 8);
	bb_put(&pl, "q\0\"\0\n\0\0\0", 8);	/* q " \n */
	bb_u16(&pl, 2);
	bb_u16(&pl, 7);
	bb_u16(&pl, 65535);
	ev.meta_id = id;
	ev.payload = pl.p;
	ev.payload_len = (uint32_t)pl.len;
	ev.stack = stack;
	ev.stack_depth = 2;
	ev.activity = act;
	cr_assert_eq(nt_writer_event(w, &ev), 0);
	cr_assert_eq(nt_writer_finish(w, 2000), 0);

	r = nt_reader_new_mem(s.buf.p, s.buf.len);
	cr_assert_eq(nt_reader_next(r, &rec), 1, "%s", nt_reader_errmsg(r) ?: "");
	nt_dump_event(r, &rec, &out);
	bb_append(&out, "", 1);
	{
		uint8_t g[16];
		char gs[37], want[1024];

		nt_provider_guid("My-Source", g);
		nt_guid_format(g, gs);
		snprintf(want, sizeof(want),
			 "{\"provider\":\"My-Source\",\"guid\":\"%s\",\"id\":3,\"name\":\"Work/Start\","
			 "\"version\":2,\"opcode\":1,\"level\":4,\"keywords\":\"0x0000000000000005\","
			 "\"pid\":77,\"tid\":55,\"ts\":1234,"
			 "\"activity\":\"00030201-0000-0000-0000-000000000000\","
			 "\"related\":\"00000000-0000-0000-0000-000000000000\","
			 "\"stack\":[\"0x10\",\"0xabc\"],"
			 "\"fields\":{\"B\":true,\"I\":-5,\"D\":\"f64:0x3ff8000000000000\","
			 "\"S\":\"q\\\"\\u000a\",\"A\":[7,65535]}}\n", gs);
		cr_assert_str_eq((char *)out.p, want);
	}
	cr_assert_eq(nt_reader_next(r, &rec), 0);
	nt_reader_free(r);
	nt_writer_free(w);
	nt_mem_sink_fini(&s);
	bb_free(&pl);
	bb_free(&out);
}

static void sequence_case(int format, void (*body)(struct nt_writer *, uint32_t), int64_t want)
{
	struct nt_mem_sink s;
	struct nt_writer *w = new_writer(&s, format);
	struct read_stats st;
	uint32_t id;

	cr_assert_eq(nt_writer_define(w, &plain_desc, &id), 0);
	body(w, id);
	cr_assert_eq(nt_writer_finish(w, 100000), 0);
	st = read_all(s.buf.p, s.buf.len);
	cr_assert_eq(st.err, 0, "%s", st.errmsg);
	cr_assert_eq(st.lost, want, "V%d: EventsLost expected %" PRId64 ", got %" PRId64, format,
		     want, st.lost);
	nt_writer_free(w);
	nt_mem_sink_fini(&s);
}

static void leading_gap(struct nt_writer *w, uint32_t id)
{
	/* first event of thread 5 has seq 7: seq 2..6 were dropped */
	cr_assert_eq(put_plain(w, id, 5, 7, 100, 1), 0);
	cr_assert_eq(put_plain(w, id, 5, 8, 101, 2), 0);
	cr_assert_eq(put_plain(w, id, 6, 2, 102, 3), 0);
}

static void reused_tid(struct nt_writer *w, uint32_t id)
{
	uint32_t s;

	for (s = 2; s <= 10; s++)
		cr_assert_eq(put_plain(w, id, 9, s, 100 + s, s), 0);
	/* a new thread with the same id restarts at 2 and loses 3 and 4 */
	cr_assert_eq(put_plain(w, id, 9, 2, 200, 0), 0);
	cr_assert_eq(put_plain(w, id, 9, 5, 201, 0), 0);
}

static void dropped_everything(struct nt_writer *w, uint32_t id)
{
	cr_assert_eq(put_plain(w, id, 3, 2, 100, 1), 0);
	/* thread 4 never got an event through: attempts 2..9 dropped */
	cr_assert_eq(nt_writer_note_seq(w, 0, 4, 9), 0);
	/* thread 3 dropped its last two */
	cr_assert_eq(nt_writer_note_seq(w, 0, 3, 4), 0);
	cr_assert_eq(put_plain(w, id, 8, 2, 300, 1), 0);
}

Test(nettrace, leading_gap_counts_v5) { sequence_case(NT_FORMAT_V5, leading_gap, 5); }
Test(nettrace, leading_gap_counts_v6) { sequence_case(NT_FORMAT_V6, leading_gap, 5); }
Test(nettrace, reused_thread_id_v5) { sequence_case(NT_FORMAT_V5, reused_tid, 2); }
Test(nettrace, reused_thread_id_v6) { sequence_case(NT_FORMAT_V6, reused_tid, 2); }
Test(nettrace, notes_without_events_v5) { sequence_case(NT_FORMAT_V5, dropped_everything, 10); }
Test(nettrace, notes_without_events_v6) { sequence_case(NT_FORMAT_V6, dropped_everything, 10); }

Test(nettrace, writer_rejects_bad_input)
{
	static const struct nt_field bad_type[] = { { "X", 2, 0, 0, NULL } };
	static const struct nt_field v6_only[] = { { "X", NT_VARINT, 0, 0, NULL } };
	const struct nt_event_desc d1 = { "P", NULL, 1, "E", 0, 0, 0, 0, 1, bad_type };
	const struct nt_event_desc d2 = { "P", NULL, 1, "E", 0, 0, 0, 0, 1, v6_only };
	const struct nt_event_desc d3 = { "", NULL, 1, "E", 0, 0, 0, 0, 0, NULL };
	struct nt_mem_sink s;
	struct nt_writer *w = new_writer(&s, NT_FORMAT_V5);
	struct nt_writer_opts bad = { .sz = sizeof(bad), .format = 7, .tick_freq = 1 };
	uint32_t id;

	cr_assert_eq(nt_writer_define(w, &d1, &id), -EINVAL);
	cr_assert_eq(nt_writer_define(w, &d2, &id), -EINVAL, "VarInt is V6-only");
	cr_assert_eq(nt_writer_define(w, &d3, &id), -EINVAL);
	cr_assert_eq(put_plain(w, 99, 1, 2, 5, 0), -EINVAL, "undefined metadata id");
	{
		struct nt_event ev = { .meta_id = 1, .seq = 2, .tid = 1, .pid = 5 };

		cr_assert_eq(nt_writer_define(w, &plain_desc, &id), 0);
		ev.meta_id = id;
		cr_assert_eq(nt_writer_event(w, &ev), -EXDEV, "V5 holds one process");
	}
	cr_assert_null(nt_writer_new(&s.base, &bad));
	cr_assert_eq(errno, EINVAL);
	nt_writer_free(w);
	nt_mem_sink_fini(&s);
}

static void make_sample(int format, struct nt_mem_sink *s)
{
	struct tracegen_opts o = { .format = format, .events = 300, .threads = 3,
				   .gap_every = 10, .sp_every = 100, .seed = 5 };
	struct tracegen_result res;

	nt_mem_sink_init(s);
	cr_assert_eq(tracegen_write(&s->base, &o, &res), 0);
}

/* Every truncation is an error naming an offset, never a crash or hang. */
static void truncations(int format)
{
	struct nt_mem_sink s;
	size_t len;

	make_sample(format, &s);
	for (len = 0; len < s.buf.len; len++) {
		uint8_t *copy = malloc(len ? len : 1);
		struct read_stats st;

		memcpy(copy, s.buf.p, len);
		st = read_all(copy, len);	/* exact-size buffer: ASan sees overreads */
		cr_assert_lt(st.err, 0, "V%d truncated to %zu of %zu bytes read without error",
			     format, len, s.buf.len);
		cr_assert(strstr(st.errmsg, "offset ") == st.errmsg, "message: %s", st.errmsg);
		free(copy);
	}
	nt_mem_sink_fini(&s);
}

Test(nettrace, truncated_v5_files_fail_cleanly) { truncations(NT_FORMAT_V5); }
Test(nettrace, truncated_v6_files_fail_cleanly) { truncations(NT_FORMAT_V6); }

static void corruptions(int format)
{
	struct nt_mem_sink s;
	uint64_t seed = 42;
	int i, errors = 0;

	make_sample(format, &s);
	for (i = 0; i < 3000; i++) {
		uint8_t *copy = malloc(s.buf.len);
		struct read_stats st;
		int k;

		memcpy(copy, s.buf.p, s.buf.len);
		for (k = 0; k < 1 + i % 4; k++) {
			seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
			copy[(seed >> 33) % s.buf.len] ^= (uint8_t)(1u << ((seed >> 20) & 7));
		}
		st = read_all(copy, s.buf.len);
		if (st.err < 0) {
			errors++;
			cr_assert(strlen(st.errmsg) > 0);
		}
		free(copy);
	}
	cr_assert_gt(errors, 100, "bit flips should often be detected, saw %d", errors);
	nt_mem_sink_fini(&s);
}

Test(nettrace, corrupt_v5_files_never_crash) { corruptions(NT_FORMAT_V5); }
Test(nettrace, corrupt_v6_files_never_crash) { corruptions(NT_FORMAT_V6); }

Test(nettrace, not_a_nettrace_file)
{
	struct read_stats st = read_all("Nettrac", 7);

	cr_assert_lt(st.err, 0);
	st = read_all("NotTrace\x14\0\0\0!FastSerialization.1", 32);
	cr_assert_lt(st.err, 0);
	cr_assert(strstr(st.errmsg, "magic"), "%s", st.errmsg);
	st = read_all("Nettrace\0\0\0\0\x07\0\0\0\0\0\0\0", 20);
	cr_assert(strstr(st.errmsg, "major version 7"), "%s", st.errmsg);
}

/*
 * JSON is UTF-8: a stray byte, a cut sequence, an overlong form or a
 * surrogate in a name comes out as U+FFFD, never as itself, and what is
 * valid comes out as it is.
 */
Test(nettrace, json_strings_are_valid_utf8_whatever_comes_in)
{
	static const struct {
		const char *in, *out;
	} cases[] = {
		{ "plain", "\"plain\"" },
		{ "q\"b\\\n", "\"q\\\"b\\\\\\u000a\"" },
		{ "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"" },
		{ "a\xff" "b", "\"a\xef\xbf\xbd" "b\"" },
		{ "cut\xc3", "\"cut\xef\xbf\xbd\"" },
		{ "over\xc0\xaf", "\"over\xef\xbf\xbd\"" },
		{ "sur\xed\xa0\x80", "\"sur\xef\xbf\xbd\"" },
		{ "big\xf4\x90\x80\x80", "\"big\xef\xbf\xbd\"" },
	};
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct bytebuf b = { 0 };

		nt_json_cstring(&b, cases[i].in);
		cr_assert(utf8_valid((const char *)b.p, b.len), "case %zu: not UTF-8", i);
		cr_assert(b.len == strlen(cases[i].out) && !memcmp(b.p, cases[i].out, b.len),
			  "case %zu: '%.*s', not '%s'", i, (int)b.len, (const char *)b.p,
			  cases[i].out);
		bb_free(&b);
	}
}
