// SPDX-License-Identifier: MIT
#include <errno.h>
#include <string.h>

#include "utf.h"

uint32_t utf8_next(const uint8_t **ps, const uint8_t *end)
{
	const uint8_t *s = *ps;
	uint32_t c = *s++, need, min;

	if (c < 0x80) {
		*ps = s;
		return c;
	} else if ((c & 0xe0) == 0xc0) {
		c &= 0x1f; need = 1; min = 0x80;
	} else if ((c & 0xf0) == 0xe0) {
		c &= 0x0f; need = 2; min = 0x800;
	} else if ((c & 0xf8) == 0xf0) {
		c &= 0x07; need = 3; min = 0x10000;
	} else {
		*ps = s;
		return 0xfffd;
	}
	while (need--) {
		if (s >= end || (*s & 0xc0) != 0x80) {
			*ps = s;
			return 0xfffd;
		}
		c = (c << 6) | (*s++ & 0x3f);
	}
	*ps = s;
	if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
		return 0xfffd;
	return c;
}

size_t utf8_put(char *o, uint32_t cp)
{
	if (cp < 0x80) {
		o[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (char)(0xc0 | (cp >> 6));
		o[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (char)(0xe0 | (cp >> 12));
		o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		o[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	o[0] = (char)(0xf0 | (cp >> 18));
	o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
	o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
	o[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

void utf16le_to_utf8(struct bytebuf *b, const uint8_t *s, size_t units)
{
	size_t i;

	if (bb_reserve(b, units * 3 + 1))
		return;
	for (i = 0; i < units; i++) {
		uint32_t c = (uint32_t)s[2 * i] | (uint32_t)s[2 * i + 1] << 8;

		if (c >= 0xd800 && c < 0xdc00 && i + 1 < units) {
			uint32_t d = (uint32_t)s[2 * i + 2] | (uint32_t)s[2 * i + 3] << 8;

			if (d >= 0xdc00 && d < 0xe000) {
				c = 0x10000 + ((c - 0xd800) << 10) + (d - 0xdc00);
				i++;
			} else {
				c = 0xfffd;
			}
		} else if (c >= 0xd800 && c < 0xe000) {
			c = 0xfffd;
		}
		/* 3 bytes reserved per unit; a pair (2 units) needs only 4 */
		b->len += utf8_put((char *)b->p + b->len, c);
	}
}

size_t utf16_put(uint16_t *o, uint32_t cp)
{
	if (cp < 0x10000) {
		o[0] = (uint16_t)cp;
		return 1;
	}
	cp -= 0x10000;
	o[0] = (uint16_t)(0xd800 | (cp >> 10));
	o[1] = (uint16_t)(0xdc00 | (cp & 0x3ff));
	return 2;
}

long utf8_to_utf16le(struct bytebuf *b, const char *str, size_t len, int nul)
{
	const uint8_t *s = (const uint8_t *)str, *end = s + len;
	uint8_t *o, *start;

	/* every input byte gives at most one unit (a 4-byte sequence, two) */
	if (bb_reserve(b, len * 2 + 2))
		return -ENOMEM;
	/* through a local pointer: stores into b->p could alias b itself */
	o = start = b->p + b->len;
	while (s < end) {
		uint16_t u[2];
		size_t k, n;

		if (*s < 0x80) {	/* ASCII, most text: one unit, no decoding */
			o[0] = *s++;
			o[1] = 0;
			o += 2;
			continue;
		}
		n = utf16_put(u, utf8_next(&s, end));
		for (k = 0; k < n; k++, o += 2)
			memcpy(o, &u[k], 2);	/* little-endian host (bytebuf.h) */
	}
	if (nul) {
		o[0] = o[1] = 0;
		o += 2;
	}
	b->len += (size_t)(o - start);
	return (long)((o - start) / 2);
}

int utf8_to_utf16z(struct bytebuf *b, const char *s)
{
	s = s ? s : "";
	return utf8_to_utf16le(b, s, strlen(s), 1) < 0 ? -ENOMEM : 0;
}

bool utf8_valid(const char *str, size_t len)
{
	const uint8_t *s = (const uint8_t *)str, *end = s + len;

	while (s < end) {
		const uint8_t *at = s;

		/* utf8_next() gives U+FFFD for what it cannot decode; the only
		 * well-formed way to spell U+FFFD itself is EF BF BD (every
		 * 3-byte sequence that starts with EF decodes) */
		if (utf8_next(&s, end) == 0xfffd && (s - at != 3 || *at != 0xef))
			return false;
	}
	return true;
}

size_t utf16le_strlen(const uint8_t *s, size_t bytes)
{
	size_t i;

	for (i = 0; i + 1 < bytes; i += 2)
		if (!s[i] && !s[i + 1])
			return i / 2;
	return SIZE_MAX;
}
