// SPDX-License-Identifier: MIT
/*
 * Canonical JSON dump of decoded events (tests/interop/README.md). The same
 * text comes out of TraceEvent through tests/interop/TraceDump, so a byte
 * comparison of the two dumps checks every header field and payload value.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "nettrace_read.h"
#include "utf.h"

void nt_json_string(struct bytebuf *out, const char *s, size_t n)
{
	const uint8_t *p = (const uint8_t *)s, *end = p + n;

	/* at most 6 bytes out per byte in ("\u001f"); U+FFFD, 3 bytes, stands
	 * for at least one byte */
	if (bb_reserve(out, n * 6 + 2))
		return;
	bb_u8(out, '"');
	while (p < end) {
		uint32_t cp = *p;
		char enc[8];

		if (cp >= 0x80) {
			/* JSON is UTF-8: what is not (a stray byte, a
			 * surrogate, an overlong form) goes out as U+FFFD */
			cp = utf8_next(&p, end);
			bb_put(out, enc, utf8_put(enc, cp));
			continue;
		}
		p++;
		if (cp == '"' || cp == '\\') {
			bb_u8(out, '\\');
			bb_u8(out, (uint8_t)cp);
		} else if (cp < 0x20) {
			snprintf(enc, sizeof(enc), "\\u%04x", cp);
			bb_put(out, enc, 6);
		} else {
			bb_u8(out, (uint8_t)cp);
		}
	}
	bb_u8(out, '"');
}

void nt_json_cstring(struct bytebuf *out, const char *s)
{
	nt_json_string(out, s ? s : "", s ? strlen(s) : 0);
}

void nt_json_fputs(const char *s, FILE *f)
{
	struct bytebuf b = { 0 };

	nt_json_cstring(&b, s);
	bb_fwrite(&b, f);
	bb_free(&b);
}

static void json_guid(struct bytebuf *out, const uint8_t g[16])
{
	char s[37];

	nt_guid_format(g, s);
	bb_printf(out, "\"%s\"", s);
}

struct pl {
	const uint8_t *p;
	size_t pos, len;
};

static bool take(struct pl *pl, size_t n, const uint8_t **at)
{
	if (pl->len - pl->pos < n)
		return false;
	*at = pl->p + pl->pos;
	pl->pos += n;
	return true;
}

static bool dump_fields(struct bytebuf *out, struct pl *pl, const struct nt_rfield *f,
			uint16_t n, int depth);

/* One value; false when the payload is too short for it. */
static bool dump_value(struct bytebuf *out, struct pl *pl, const struct nt_rtype *t, int depth)
{
	const uint8_t *a = NULL;
	union {
		uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32;
		int32_t i32; uint64_t u64; int64_t i64;
	} v;
	/* a fixed-size value is taken whole first, by the one size table */
	int sz = nt_type_fixed_size(t->code);

	if (sz > 0 && !take(pl, (size_t)sz, &a))
		return false;
	switch (t->code) {
	case NT_BOOL:
		memcpy(&v.u32, a, 4);
		bb_printf(out, v.u32 ? "true" : "false");
		return true;
	case NT_CHAR: case NT_U16:
		memcpy(&v.u16, a, 2);
		bb_printf(out, "%u", v.u16);
		return true;
	case NT_I16:
		memcpy(&v.i16, a, 2);
		bb_printf(out, "%d", v.i16);
		return true;
	case NT_I8:
		memcpy(&v.i8, a, 1);
		bb_printf(out, "%d", v.i8);
		return true;
	case NT_U8:
		bb_printf(out, "%u", a[0]);
		return true;
	case NT_I32:
		memcpy(&v.i32, a, 4);
		bb_printf(out, "%d", v.i32);
		return true;
	case NT_U32:
		memcpy(&v.u32, a, 4);
		bb_printf(out, "%u", v.u32);
		return true;
	case NT_I64: case NT_DATETIME:
		memcpy(&v.i64, a, 8);
		bb_printf(out, "%" PRId64, v.i64);
		return true;
	case NT_U64:
		memcpy(&v.u64, a, 8);
		bb_printf(out, "%" PRIu64, v.u64);
		return true;
	case NT_F32:
		memcpy(&v.u32, a, 4);
		bb_printf(out, "\"f32:0x%08x\"", v.u32);
		return true;
	case NT_F64:
		memcpy(&v.u64, a, 8);
		bb_printf(out, "\"f64:0x%016" PRIx64 "\"", v.u64);
		return true;
	case NT_GUID:
		json_guid(out, a);
		return true;
	case NT_DECIMAL:
		bb_printf(out, "\"?Decimal\"");
		return true;
	case NT_STRING: {
		size_t units = utf16le_strlen(pl->p + pl->pos, pl->len - pl->pos);
		struct bytebuf s = { 0 };

		if (units == SIZE_MAX)
			return false;
		utf16le_to_utf8(&s, pl->p + pl->pos, units);
		pl->pos += 2 * units + 2;
		nt_json_string(out, (const char *)s.p, s.len);
		bb_free(&s);
		return true;
	}
	case NT_VARINT: case NT_VARUINT: {
		uint64_t x = 0;
		int i;

		for (i = 0; i < 10; i++) {
			if (!take(pl, 1, &a))
				return false;
			x |= (uint64_t)(a[0] & 0x7f) << (7 * i);
			if (!(a[0] & 0x80))
				break;
		}
		if (t->code == NT_VARINT)
			bb_printf(out, "%" PRId64, (int64_t)((x >> 1) ^ (~(x & 1) + 1)));
		else
			bb_printf(out, "%" PRIu64, x);
		return true;
	}
	case NT_ARRAY: {
		uint16_t cnt, i;

		if (!take(pl, 2, &a) || !t->elem || depth > 16)
			return false;
		memcpy(&cnt, a, 2);
		bb_printf(out, "[");
		for (i = 0; i < cnt; i++) {
			if (i)
				bb_printf(out, ",");
			if (!dump_value(out, pl, t->elem, depth + 1))
				return false;
		}
		bb_printf(out, "]");
		return true;
	}
	case NT_OBJECT:
		if (depth > 16)
			return false;
		return dump_fields(out, pl, t->fields, t->nfields, depth + 1);
	default:
		bb_printf(out, "\"?type%u\"", t->code);
		return true;
	}
}

static bool dump_fields(struct bytebuf *out, struct pl *pl, const struct nt_rfield *f,
			uint16_t n, int depth)
{
	uint16_t i;

	bb_printf(out, "{");
	for (i = 0; i < n; i++) {
		if (i)
			bb_printf(out, ",");
		nt_json_string(out, f[i].name, strlen(f[i].name));
		bb_printf(out, ":");
		if (!dump_value(out, pl, &f[i].type, depth)) {
			bb_printf(out, "\"?truncated\"}");
			return false;
		}
	}
	bb_printf(out, "}");
	return true;
}

void nt_dump_event(const struct nt_reader *r, const struct nt_rec *rec, struct bytebuf *out)
{
	const struct nt_meta *m = rec->meta;
	const struct nt_reader_info *info = nt_reader_info(r);
	struct pl pl = { rec->payload, 0, rec->payload_len };
	uint32_t i, ps = info->pointer_size;

	bb_printf(out, "{\"provider\":");
	nt_json_string(out, m->provider, strlen(m->provider));
	bb_printf(out, ",\"guid\":");
	json_guid(out, m->guid);
	bb_printf(out, ",\"id\":%u,\"name\":", m->event_id);
	nt_json_string(out, m->name, strlen(m->name));
	bb_printf(out, ",\"version\":%u,\"opcode\":%u,\"level\":%u,\"keywords\":\"0x%016" PRIx64
		  "\",\"pid\":%d,\"tid\":%d,\"ts\":%" PRIu64 ",\"activity\":",
		  m->version, m->opcode, m->level, m->keywords, (int32_t)rec->pid,
		  (int32_t)rec->tid, rec->ts);
	json_guid(out, rec->activity);
	bb_printf(out, ",\"related\":");
	json_guid(out, rec->related);
	bb_printf(out, ",\"stack\":[");
	for (i = 0; ps && i + ps <= rec->stack_bytes; i += ps) {
		uint64_t ip = 0;

		memcpy(&ip, rec->stack + i, ps);
		bb_printf(out, "%s\"0x%" PRIx64 "\"", i ? "," : "", ip);
	}
	bb_printf(out, "],\"fields\":");
	if (m->has_fields)
		dump_fields(out, &pl, m->fields, m->nfields, 0);
	else
		bb_printf(out, "{}");
	bb_printf(out, "}\n");
}

void nt_dump_summary(const struct nt_reader *r, uint64_t events, int err, struct bytebuf *out)
{
	bb_printf(out, "{\"summary\":true,\"events\":%" PRIu64 ",\"lost\":%" PRId64 ",\"error\":",
		  events, nt_reader_lost(r));
	if (err) {
		const char *msg = nt_reader_errmsg(r);

		if (!msg)
			msg = "error";
		nt_json_string(out, msg, strlen(msg));
	} else {
		bb_printf(out, "null");
	}
	bb_printf(out, "}\n");
}
