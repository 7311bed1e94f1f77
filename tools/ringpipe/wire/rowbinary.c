// SPDX-License-Identifier: MIT
/*
 * RowBinary's variable-length values (rowbinary.h).
 */
#include <errno.h>

#include "wire/rowbinary.h"

void rb_count(struct bytebuf *b, uint64_t n)
{
	if (!bb_reserve(b, BB_VARU64_MAX))
		bb_varu64(b, n);
}

void rb_string(struct bytebuf *b, const void *p, size_t len)
{
	rb_count(b, len);
	bb_append(b, p, len);
}

void rb_cstring(struct bytebuf *b, const char *s)
{
	rb_string(b, s, s ? strlen(s) : 0);
}

void rb_fixed_string(struct bytebuf *b, const void *s, size_t len, size_t n)
{
	size_t have = len < n ? len : n;

	if (bb_reserve(b, n))
		return;
	if (have)
		bb_put(b, s, have);
	memset(b->p + b->len, 0, n - have);
	b->len += n - have;
}

void rb_uuid(struct bytebuf *b, const uint8_t uuid[16])
{
	/* ClickHouse keeps a UUID as two UInt64 halves, each little-endian on the wire */
	if (!bb_reserve(b, 16))
		b->len = (size_t)(rb_put_uuid(b->p + b->len, uuid) - b->p);
}

static int hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int rb_uuid_parse(const char *text, uint8_t uuid[16])
{
	int i, n = 0;

	for (i = 0; i < 36; i++) {
		int hi, lo;

		if (i == 8 || i == 13 || i == 18 || i == 23) {
			if (text[i] != '-')
				return -EINVAL;
			continue;
		}
		hi = hex_digit(text[i]);
		lo = hi < 0 ? -1 : hex_digit(text[i + 1]);
		if (lo < 0)
			return -EINVAL;
		uuid[n++] = (uint8_t)(hi << 4 | lo);
		i++;
	}
	return text[36] ? -EINVAL : 0;
}

void rb_uuid_format(const uint8_t uuid[16], char text[37])
{
	static const char hex[] = "0123456789abcdef";
	size_t i, o = 0;

	for (i = 0; i < 16; i++) {
		if (i == 4 || i == 6 || i == 8 || i == 10)
			text[o++] = '-';
		text[o++] = hex[uuid[i] >> 4];
		text[o++] = hex[uuid[i] & 15];
	}
	text[o] = 0;
}
