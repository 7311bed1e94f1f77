// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tracegen.h"
#include "utf.h"

#define PROVIDER "Ringpipe-Demo"

static const struct nt_field scalar_fields[] = {
	{ "Flag", NT_BOOL, 0, 0, NULL },
	{ "Letter", NT_CHAR, 0, 0, NULL },
	{ "S8", NT_I8, 0, 0, NULL },
	{ "U8", NT_U8, 0, 0, NULL },
	{ "S16", NT_I16, 0, 0, NULL },
	{ "U16", NT_U16, 0, 0, NULL },
	{ "S32", NT_I32, 0, 0, NULL },
	{ "U32", NT_U32, 0, 0, NULL },
	{ "S64", NT_I64, 0, 0, NULL },
	{ "U64", NT_U64, 0, 0, NULL },
	{ "F32", NT_F32, 0, 0, NULL },
	{ "F64", NT_F64, 0, 0, NULL },
	{ "Id", NT_GUID, 0, 0, NULL },
	{ "Text", NT_STRING, 0, 0, NULL },
	{ "When", NT_DATETIME, 0, 0, NULL },
};

static const struct nt_field pair_fields[] = {
	{ "Key", NT_I32, 0, 0, NULL },
	{ "Value", NT_STRING, 0, 0, NULL },
};

static const struct nt_field array_fields[] = {
	{ "Count", NT_U32, 0, 0, NULL },
	{ "Values", NT_ARRAY, NT_U32, 0, NULL },
	{ "Bytes", NT_ARRAY, NT_U8, 0, NULL },
	{ "Pairs", NT_ARRAY, NT_OBJECT, 2, pair_fields },
};

static const struct nt_field inner_fields[] = {
	{ "Y", NT_U64, 0, 0, NULL },
	{ "Label", NT_STRING, 0, 0, NULL },
};

static const struct nt_field outer_fields[] = {
	{ "X", NT_I32, 0, 0, NULL },
	{ "Inner", NT_OBJECT, 0, 2, inner_fields },
	{ "Z", NT_I16, 0, 0, NULL },
};

static const struct nt_field nested_fields[] = {
	{ "Outer", NT_OBJECT, 0, 3, outer_fields },
	{ "Tail", NT_U8, 0, 0, NULL },
};

static const struct nt_field request_fields[] = {
	{ "RequestId", NT_U64, 0, 0, NULL },
	{ "Path", NT_STRING, 0, 0, NULL },
};

static const struct nt_field small_fields[] = {
	{ "A", NT_U64, 0, 0, NULL },
	{ "B", NT_U32, 0, 0, NULL },
	{ "C", NT_U32, 0, 0, NULL },
	{ "Name", NT_STRING, 0, 0, NULL },	/* 7 chars + NUL: 16 bytes */
};

static const struct nt_field var_fields[] = {
	{ "Signed", NT_VARINT, 0, 0, NULL },
	{ "Unsigned", NT_VARUINT, 0, 0, NULL },
};

enum { EV_SCALARS, EV_ARRAYS, EV_NESTED, EV_REQ_START, EV_REQ_STOP, EV_TICK,
       EV_SMALL, EV_EMPTY, EV_VAR, EV_COUNT };

static const struct nt_event_desc descs[EV_COUNT] = {
	[EV_SCALARS] = { PROVIDER, NULL, 1, "AllScalars", 0x1, 1, 4, 0, 15, scalar_fields },
	[EV_ARRAYS] = { PROVIDER, NULL, 2, "Arrays", 0x2, 0, 4, 0, 4, array_fields },
	[EV_NESTED] = { PROVIDER, NULL, 3, "Nested", 0x4, 2, 5, 0, 2, nested_fields },
	[EV_REQ_START] = { PROVIDER, NULL, 4, "RequestStart", 0x8, 0, 4, 0, 2, request_fields },
	[EV_REQ_STOP] = { PROVIDER, NULL, 5, "RequestStop", 0x8, 0, 4, 0, 2, request_fields },
	[EV_TICK] = { PROVIDER, NULL, 6, "Tick", 0x10, 0, 2, 10, 4, small_fields },
	[EV_SMALL] = { PROVIDER, NULL, 7, "Small", 0x20, 0, 4, 0, 4, small_fields },
	[EV_EMPTY] = { "Ringpipe-Demo-Other", NULL, 1, "Empty", 0, 0, 1, 0, 0, NULL },
	[EV_VAR] = { PROVIDER, NULL, 8, "VarInts", 0x40, 0, 4, 0, 2, var_fields },
};

static uint64_t rnd(uint64_t *s)
{
	/* xorshift64*: deterministic for a seed */
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545f4914f6cdd1dULL;
}

static void put_var(struct bytebuf *b, uint64_t v)
{
	bb_reserve(b, 10);
	bb_varu64(b, v);
}

static const char *const words[] = { "alpha", "beta \"quoted\"", "gamma\\path", "",
				     "tab\there", "ümlaut-free", "line\nbreak", "omega" };

static void build_payload(struct bytebuf *b, int ev, uint64_t i, uint64_t *s)
{
	uint64_t r = rnd(s);

	b->len = 0;
	bb_reserve(b, 256);
	switch (ev) {
	case EV_SCALARS: {
		float f = (float)(r % 1000) / 7.0f;
		double d = (double)r / 3.0;
		uint8_t g[16];
		int64_t ft = 132000000000000000LL + (int64_t)(r % 100000000000LL);

		bb_u32(b, (uint32_t)(r & 1));
		bb_u16(b, (uint16_t)('A' + r % 26));
		bb_u8(b, (uint8_t)(int8_t)-(int)(r % 100));
		bb_u8(b, (uint8_t)(r >> 8));
		bb_u16(b, (uint16_t)(int16_t)-(int)(r % 30000));
		bb_u16(b, (uint16_t)(r >> 16));
		bb_u32(b, (uint32_t)(int32_t)-(int32_t)(r % 2000000000));
		bb_u32(b, (uint32_t)(r >> 32));
		bb_u64(b, (uint64_t)-(int64_t)(r >> 2));
		bb_u64(b, r);
		bb_put(b, &f, 4);
		bb_put(b, &d, 8);
		memcpy(g, &r, 8);
		memcpy(g + 8, &i, 8);
		bb_put(b, g, 16);
		utf8_to_utf16z(b, words[r % 8]);
		bb_reserve(b, 8);
		bb_u64(b, (uint64_t)ft);
		break;
	}
	case EV_ARRAYS: {
		uint16_t n = (uint16_t)(r % 5), k;

		bb_u32(b, n);
		bb_u16(b, n);
		for (k = 0; k < n; k++)
			bb_u32(b, (uint32_t)(r >> k));
		bb_u16(b, (uint16_t)(n + 1));
		for (k = 0; k <= n; k++)
			bb_u8(b, (uint8_t)(r >> (8 * k)));
		bb_u16(b, (uint16_t)(n % 3));
		for (k = 0; k < n % 3; k++) {
			bb_reserve(b, 4);
			bb_u32(b, k + 1);
			utf8_to_utf16z(b, words[(r + k) % 8]);
		}
		break;
	}
	case EV_NESTED:
		bb_u32(b, (uint32_t)-(int32_t)(r % 1000));
		bb_u64(b, r);
		utf8_to_utf16z(b, words[r % 8]);
		bb_reserve(b, 3);
		bb_u16(b, (uint16_t)(r >> 48));
		bb_u8(b, 7);
		break;
	case EV_REQ_START: case EV_REQ_STOP:
		bb_u64(b, i);
		utf8_to_utf16z(b, "/api/items");
		break;
	case EV_TICK: case EV_SMALL:
		bb_u64(b, i);
		bb_u32(b, (uint32_t)r);
		bb_u32(b, (uint32_t)(r >> 32));
		utf8_to_utf16z(b, "ringpip");	/* 8 + 4 + 4 + 16 = 32 bytes */
		break;
	case EV_EMPTY:
		break;
	case EV_VAR:
		put_var(b, (r & 1) ? ((r >> 1) << 1) : (((r >> 1) << 1) | 1));
		put_var(b, r >> (r % 60));
		break;
	}
}

struct gthread {
	uint32_t pid;
	uint64_t tid;
	uint32_t seq;		/* last used sequence number */
	uint64_t count;
};

int tracegen_write(struct nt_sink *sink, const struct tracegen_opts *o,
		   struct tracegen_result *res)
{
	struct nt_writer_opts wo = {
		.sz = sizeof(wo),
		.format = o->format,
		.pid = 4242,
		.nr_cpus = 2,
		.pointer_size = 8,
		.sync_ticks = 1000,
		.tick_freq = 1000000000,
		.sync_unix_ns = 1764400000ull * 1000000000ull,
	};
	static const uint64_t frames[] = { 0x7f0000001000, 0x7f0000002222, 0x55550000abcd,
					   0x401000, 0xffffffff81000010, 0x7f00000033ff };
	uint32_t ids[EV_COUNT];
	struct gthread *th;
	struct bytebuf pl = { 0 };
	struct nt_writer *w;
	uint64_t s = o->seed ? o->seed : 0x1234567;
	uint64_t ts = 1000, i;
	uint32_t nthreads = o->threads ? o->threads : 1, t;
	int nev = o->format == NT_FORMAT_V6 ? EV_COUNT : EV_COUNT - 1;
	int err = 0, e;

	memset(res, 0, sizeof(*res));
	th = calloc(nthreads, sizeof(*th));
	if (!th)
		return -ENOMEM;
	w = nt_writer_new(sink, &wo);
	if (!w) {
		free(th);
		return -errno;
	}
	for (e = 0; e < nev && !err; e++)
		err = nt_writer_define(w, &descs[e], &ids[e]);
	for (t = 0; t < nthreads; t++) {
		/* V6 traces span two processes */
		th[t].pid = (o->format == NT_FORMAT_V6 && (t & 1)) ? 4343 : 4242;
		th[t].tid = 10000 + t * 7;
		th[t].seq = 1 + o->lead_gap;	/* seq_base 1 */
	}

	for (i = 0; i < o->events && !err; i++) {
		struct gthread *g = &th[rnd(&s) % nthreads];
		uint64_t r = rnd(&s);
		uint8_t act[16], rel[16];
		uint64_t stack[6];
		struct nt_event ev = { 0 };

		e = o->small_only ? EV_SMALL : (int)(r % (uint64_t)nev);
		build_payload(&pl, e, i, &s);
		if (!g->count)
			res->lost += o->lead_gap;
		if (o->gap_every && g->count && g->count % o->gap_every == 0) {
			g->seq++;		/* a deliberately dropped event */
			res->lost++;
		}
		g->seq++;
		g->count++;
		ts += 1 + (r >> 60);
		ev.meta_id = ids[e];
		ev.seq = g->seq;
		ev.pid = g->pid;
		ev.tid = g->tid;
		ev.cpu = (uint32_t)(r >> 20) & 1;
		ev.ts = ts;
		ev.payload = pl.p;
		ev.payload_len = (uint32_t)pl.len;
		ev.sorted = true;
		if (!o->small_only && (r >> 8) % 3 == 0) {
			uint32_t d = 1 + (uint32_t)((r >> 12) % 6), k;

			for (k = 0; k < d; k++)
				stack[k] = frames[(k + (r >> 16)) % 6];
			ev.stack = stack;
			ev.stack_depth = d;
		}
		if (!o->small_only && (r >> 24) % 4 == 0) {
			memset(act, 0, 16);
			memcpy(act, &g->tid, 8);
			act[15] = (uint8_t)(r >> 30) & 3;
			ev.activity = act;
			if ((r >> 32) & 1) {
				memset(rel, 0xab, 16);
				rel[0] = (uint8_t)(r >> 40);
				ev.related = rel;
			}
		}
		err = nt_writer_event(w, &ev);
		res->per_event[e]++;
		res->written++;
		if (!err && o->sp_every && (i + 1) % o->sp_every == 0)
			err = nt_writer_sequence_point(w, ts);
	}
	for (t = 0; t < nthreads && !err && o->tail_gap; t++) {
		th[t].seq += o->tail_gap;
		res->lost += o->tail_gap + (th[t].count ? 0 : o->lead_gap);
		err = nt_writer_note_seq(w, th[t].pid, th[t].tid, th[t].seq);
	}
	if (!err)
		err = nt_writer_finish(w, ts + 1);
	nt_writer_free(w);
	bb_free(&pl);
	free(th);
	return err;
}
