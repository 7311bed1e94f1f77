// SPDX-License-Identifier: MIT
/* The Protocol Buffers wire format (protobuf.h) */
#include <errno.h>
#include <string.h>

#include "wire/protobuf.h"

#define VARINT_MAX 10

static void key(struct bytebuf *b, uint32_t field, enum pb_wire w)
{
	if (!bb_reserve(b, VARINT_MAX))
		bb_varu64(b, (uint64_t)field << 3 | w);
}

void pb_varint(struct bytebuf *b, uint32_t field, uint64_t v)
{
	key(b, field, PB_VARINT);
	if (!bb_reserve(b, VARINT_MAX))
		bb_varu64(b, v);
}

void pb_fixed64(struct bytebuf *b, uint32_t field, uint64_t v)
{
	key(b, field, PB_I64);
	bb_append_u64(b, v);
}

void pb_fixed32(struct bytebuf *b, uint32_t field, uint32_t v)
{
	key(b, field, PB_I32);
	bb_append_u32(b, v);
}

void pb_double(struct bytebuf *b, uint32_t field, double v)
{
	uint64_t u;

	memcpy(&u, &v, sizeof(u));
	pb_fixed64(b, field, u);
}

void pb_bytes(struct bytebuf *b, uint32_t field, const void *p, size_t n)
{
	key(b, field, PB_LEN);
	if (!bb_reserve(b, VARINT_MAX))
		bb_varu64(b, n);
	bb_append(b, p, n);
}

void pb_string(struct bytebuf *b, uint32_t field, const char *s)
{
	pb_bytes(b, field, s, strlen(s));
}

size_t pb_open(const struct bytebuf *b)
{
	return b->len;
}

static size_t varint_size(uint64_t v)
{
	size_t n = 1;

	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

void pb_close(struct bytebuf *b, size_t mark, uint32_t field)
{
	uint64_t k = (uint64_t)field << 3 | PB_LEN;
	size_t body = b->len - mark, head = varint_size(k) + varint_size(body), end;

	if (b->oom || bb_reserve(b, head))
		return;
	memmove(b->p + mark + head, b->p + mark, body);
	end = b->len + head;
	b->len = mark;
	bb_varu64(b, k);
	bb_varu64(b, body);
	b->len = end;
}

static int varint_read(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
	unsigned shift = 0;

	*v = 0;
	while (*p < end && shift < 64) {
		uint8_t c = *(*p)++;

		*v |= (uint64_t)(c & 0x7f) << shift;
		if (!(c & 0x80))
			return 0;
		shift += 7;
	}
	return -EBADMSG;
}

int pb_next(const uint8_t **p, const uint8_t *end, struct pb_field *f)
{
	uint64_t k;

	if (*p >= end)
		return 0;
	memset(f, 0, sizeof(*f));
	if (varint_read(p, end, &k) || k >> 3 == 0 || k >> 3 > UINT32_MAX)
		return -EBADMSG;
	f->number = (uint32_t)(k >> 3);
	f->wire = (enum pb_wire)(k & 7);
	switch (f->wire) {
	case PB_VARINT:
		return varint_read(p, end, &f->u) ? -EBADMSG : 1;
	case PB_I64:
	case PB_I32: {
		size_t n = f->wire == PB_I64 ? 8 : 4;

		if ((size_t)(end - *p) < n)
			return -EBADMSG;
		memcpy(&f->u, *p, n);	/* little-endian, as the host */
		*p += n;
		return 1;
	}
	case PB_LEN:
		if (varint_read(p, end, &f->u) || f->u > (uint64_t)(end - *p))
			return -EBADMSG;
		f->p = *p;
		f->len = (size_t)f->u;
		*p += f->len;
		return 1;
	}
	return -EBADMSG;	/* groups (3, 4) and the unused types 6, 7 */
}
