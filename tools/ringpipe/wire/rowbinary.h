/* SPDX-License-Identifier: MIT */
/*
 * ClickHouse's RowBinary format, the encoding side: each row is its columns'
 * values one after the other, in the table's column order, with no
 * separators. Numbers are little-endian; String is a LEB128 byte count and
 * the bytes; FixedString(N) exactly N bytes; Array(T) a LEB128 element count
 * and the elements; DateTime a UInt32 of seconds since the epoch; UUID its
 * two 64-bit halves, each little-endian, the first half first.
 *
 * Every appender makes its own room: on allocation failure the value is
 * dropped and b->oom stays set, so a batch is checked once, when it is done.
 * The reading side (struct rb_cursor) is as forgiving: a value that runs
 * past the end reads as zero or empty and sets bad, checked once a row or
 * an answer is read.
 */
#ifndef RINGPIPE_ROWBINARY_H
#define RINGPIPE_ROWBINARY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "util/bytebuf.h"

/*
 * The same encodings as plain stores at o, for an encoder that made the
 * room for a whole row at once (fleet_row_encode()): each returns the end
 * of what it wrote.
 */
static inline uint8_t *rb_put_u32(uint8_t *o, uint32_t v)
{
	memcpy(o, &v, 4);	/* x86_64 and aarch64 are little-endian */
	return o + 4;
}

static inline uint8_t *rb_put_u64(uint8_t *o, uint64_t v)
{
	memcpy(o, &v, 8);
	return o + 8;
}

/* String: BB_VARU64_MAX + len bytes at most */
static inline uint8_t *rb_put_string(uint8_t *o, const void *p, size_t len)
{
	o = bb_varu64_at(o, len);
	if (len)
		memcpy(o, p, len);
	return o + len;
}

/* UUID from its 16 bytes in text order: each 8-byte half reversed */
static inline uint8_t *rb_put_uuid(uint8_t *o, const uint8_t uuid[16])
{
	uint64_t hi, lo;

	memcpy(&hi, uuid, 8);
	memcpy(&lo, uuid + 8, 8);
	o = rb_put_u64(o, __builtin_bswap64(hi));
	return rb_put_u64(o, __builtin_bswap64(lo));
}

static inline void rb_u8(struct bytebuf *b, uint8_t v)
{
	bb_append_u8(b, v);
}

static inline void rb_u16(struct bytebuf *b, uint16_t v)
{
	bb_append_u16(b, v);
}

static inline void rb_u32(struct bytebuf *b, uint32_t v)
{
	bb_append_u32(b, v);
}

static inline void rb_u64(struct bytebuf *b, uint64_t v)
{
	bb_append_u64(b, v);
}

/* Int8..Int64: two's complement, as the unsigned types */
static inline void rb_i8(struct bytebuf *b, int8_t v)
{
	rb_u8(b, (uint8_t)v);
}

static inline void rb_i16(struct bytebuf *b, int16_t v)
{
	rb_u16(b, (uint16_t)v);
}

static inline void rb_i32(struct bytebuf *b, int32_t v)
{
	rb_u32(b, (uint32_t)v);
}

static inline void rb_i64(struct bytebuf *b, int64_t v)
{
	rb_u64(b, (uint64_t)v);
}

static inline void rb_f64(struct bytebuf *b, double v)
{
	bb_append(b, &v, sizeof(v));
}

/* DateTime: seconds since the epoch (UTC) */
static inline void rb_datetime(struct bytebuf *b, uint32_t unix_seconds)
{
	rb_u32(b, unix_seconds);
}

/* The LEB128 count in front of a String's bytes and an Array's elements */
void rb_count(struct bytebuf *b, uint64_t n);
/* String: any bytes (NUL included), len of them */
void rb_string(struct bytebuf *b, const void *p, size_t len);
/* rb_string() of a NUL-terminated string; NULL is the empty string */
void rb_cstring(struct bytebuf *b, const char *s);
/* FixedString(n): s's first n bytes, padded with NULs if it is shorter */
void rb_fixed_string(struct bytebuf *b, const void *s, size_t len, size_t n);
/* UUID from its 16 bytes in text order (00112233-4455-...: 0x00 first) */
void rb_uuid(struct bytebuf *b, const uint8_t uuid[16]);

/* UUID text (36 characters, any case) to 16 bytes in text order: 0 or -EINVAL */
int rb_uuid_parse(const char *text, uint8_t uuid[16]);
/* 16 bytes in text order to lower-case UUID text and its NUL */
void rb_uuid_format(const uint8_t uuid[16], char text[37]);

/* ---- reading ---------------------------------------------------------- */

struct rb_cursor {
	const uint8_t *p, *end;
	bool bad;		/* ran past the end, or a length beyond it */
};

/* A number of n bytes (1 to 8), little-endian */
static inline uint64_t rb_get_fixed(struct rb_cursor *c, size_t n)
{
	uint64_t v = 0;

	if ((size_t)(c->end - c->p) < n) {
		c->bad = true;
		c->p = c->end;
		return 0;
	}
	memcpy(&v, c->p, n);	/* little-endian, as the host */
	c->p += n;
	return v;
}

/* The LEB128 count of a String's bytes or an Array's elements */
static inline uint64_t rb_get_count(struct rb_cursor *c)
{
	uint64_t v = 0;
	int shift;

	for (shift = 0; shift < 64; shift += 7) {
		uint64_t b = rb_get_fixed(c, 1);

		v |= (b & 0x7f) << shift;
		if (!(b & 0x80))
			return v;
	}
	c->bad = true;
	return 0;
}

/* A String's bytes, in place (not NUL-terminated), and their count in *len */
static inline const uint8_t *rb_get_bytes(struct rb_cursor *c, size_t *len)
{
	uint64_t n = rb_get_count(c);
	const uint8_t *p = c->p;

	if (n > (uint64_t)(c->end - c->p)) {
		c->bad = true;
		c->p = c->end;
		*len = 0;
		return (const uint8_t *)"";
	}
	*len = (size_t)n;
	c->p += n;
	return p;
}

/* A UUID's two little-endian halves back to its 16 bytes in text order */
static inline void rb_get_uuid(struct rb_cursor *c, uint8_t uuid[16])
{
	int i;

	if (c->end - c->p < 16) {
		c->bad = true;
		c->p = c->end;
		memset(uuid, 0, 16);
		return;
	}
	for (i = 0; i < 8; i++) {
		uuid[7 - i] = c->p[i];
		uuid[15 - i] = c->p[8 + i];
	}
	c->p += 16;
}

#endif /* RINGPIPE_ROWBINARY_H */
