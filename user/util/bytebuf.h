/* SPDX-License-Identifier: MIT */
/*
 * Growable byte buffer with little-endian and LEB128 appenders.
 *
 * The nettrace writer assembles every block in one of these and the reader's
 * error and JSON paths format into them. Appenders assume the caller reserved
 * room with bb_reserve() first, so the per-event encoder does one capacity
 * check per event instead of one per field.
 */
#ifndef RINGPIPE_BYTEBUF_H
#define RINGPIPE_BYTEBUF_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct bytebuf {
	uint8_t *p;
	size_t len;
	size_t cap;
	int oom;	/* sticky: an allocation failed, contents are incomplete */
};

int bb_grow(struct bytebuf *b, size_t need);
/* Starts b empty with room for exactly n bytes, where the size is known and
 * bb_grow()'s rounding up (256 bytes at least, then doubling) is not wanted.
 * 0, or -ENOMEM with b empty and oom set. */
int bb_init(struct bytebuf *b, size_t n);
void bb_free(struct bytebuf *b);
/* Writes the contents to f (an empty buffer may have no storage, which
 * fwrite must not be given). */
void bb_fwrite(const struct bytebuf *b, FILE *f);
/* Append printf-formatted text (not NUL-terminated in the count). */
void bb_printf(struct bytebuf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Ensure room for n more bytes; 0 or -ENOMEM. */
static inline int bb_reserve(struct bytebuf *b, size_t n)
{
	if (__builtin_expect(b->cap - b->len >= n, 1))
		return 0;
	return bb_grow(b, n);
}

/* Little-endian loads from unaligned bytes (x86-64 and arm64 are LE). */
static inline uint32_t le32_get(const void *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return v;
}

static inline uint64_t le64_get(const void *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

static inline void bb_put(struct bytebuf *b, const void *src, size_t n)
{
	memcpy(b->p + b->len, src, n);
	b->len += n;
}

static inline int bb_append(struct bytebuf *b, const void *src, size_t n)
{
	if (!n)
		return 0;	/* b->p may still be NULL: no memcpy(NULL, ...) */
	if (bb_reserve(b, n))
		return -1;
	bb_put(b, src, n);
	return 0;
}

static inline void bb_u8(struct bytebuf *b, uint8_t v)
{
	b->p[b->len++] = v;
}

static inline void bb_u16(struct bytebuf *b, uint16_t v)
{
	memcpy(b->p + b->len, &v, 2);	/* x86_64 and aarch64 are little-endian */
	b->len += 2;
}

static inline void bb_u32(struct bytebuf *b, uint32_t v)
{
	memcpy(b->p + b->len, &v, 4);
	b->len += 4;
}

static inline void bb_u64(struct bytebuf *b, uint64_t v)
{
	memcpy(b->p + b->len, &v, 8);
	b->len += 8;
}

/*
 * Checked appenders, for builders that do not reserve up front (a payload
 * assembled field by field, once per event or request): each makes its own
 * room. On allocation failure the value is dropped and b->oom stays set, so
 * a builder checks b->oom once, when it is done.
 */
static inline int bb_append_u8(struct bytebuf *b, uint8_t v)
{
	return bb_append(b, &v, 1);
}

static inline int bb_append_u16(struct bytebuf *b, uint16_t v)
{
	return bb_append(b, &v, 2);
}

static inline int bb_append_u32(struct bytebuf *b, uint32_t v)
{
	return bb_append(b, &v, 4);
}

static inline int bb_append_u64(struct bytebuf *b, uint64_t v)
{
	return bb_append(b, &v, 8);
}

/* LEB128: at most 10 bytes for 64 bits. */
#define BB_VARU64_MAX 10

/* v as LEB128 at o, its room made; returns the end (for encoders that
 * keep their own write pointer) */
static inline uint8_t *bb_varu64_at(uint8_t *o, uint64_t v)
{
	while (v >= 0x80) {
		*o++ = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	*o++ = (uint8_t)v;
	return o;
}

static inline void bb_varu64(struct bytebuf *b, uint64_t v)
{
	b->len = (size_t)(bb_varu64_at(b->p + b->len, v) - b->p);
}

static inline void bb_varu32(struct bytebuf *b, uint32_t v)
{
	bb_varu64(b, v);
}

/*
 * Makes room for element n of a growable array (*cap elements of elem bytes;
 * the capacity doubles, starting at first). 0, or -ENOMEM with the array
 * left as it was.
 */
int array_grow(void **arr, size_t *cap, size_t n, size_t elem, size_t first);

/* qsort() for arrays grown with array_grow(): an array that never grew is
 * NULL, and qsort's base must not be, even for no elements. */
static inline void array_sort(void *arr, size_t n, size_t elem,
			      int (*cmp)(const void *, const void *))
{
	if (n)
		qsort(arr, n, elem, cmp);
}

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ringpipe's serializers assume a little-endian host"
#endif

#endif /* RINGPIPE_BYTEBUF_H */
