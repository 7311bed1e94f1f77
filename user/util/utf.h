/* SPDX-License-Identifier: MIT */
/*
 * UTF-8 / UTF-16LE conversions shared by the nettrace writer and reader and
 * the IPC protocol (both formats carry UTF-16 strings; ringpipe's API is
 * UTF-8). Invalid input never fails: it becomes U+FFFD.
 */
#ifndef RINGPIPE_UTF_H
#define RINGPIPE_UTF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bytebuf.h"

/* Next code point of UTF-8 text in [*p, end); invalid, overlong or surrogate
 * sequences give U+FFFD and advance past the bytes examined. */
uint32_t utf8_next(const uint8_t **p, const uint8_t *end);
/* Writes cp as UTF-8 (1 to 4 bytes) at o; returns the count. */
size_t utf8_put(char *o, uint32_t cp);
/* cp as UTF-16: one unit, or a surrogate pair (cp >= 0x10000); returns the
 * count. cp must be a scalar value (what utf8_next() returns). */
size_t utf16_put(uint16_t *o, uint32_t cp);
/* Appends len bytes of UTF-8 as UTF-16LE code units, then a NUL unit when
 * nul is set; invalid input becomes U+FFFD. Returns the number of units
 * appended (the NUL included), or -ENOMEM with b unchanged in length. */
long utf8_to_utf16le(struct bytebuf *b, const char *s, size_t len, int nul);
/* The C string s (NULL: "") as NUL-terminated UTF-16LE, as above; 0, or
 * -ENOMEM with b unchanged in length. */
int utf8_to_utf16z(struct bytebuf *b, const char *s);
/* Whether len bytes at s are well-formed UTF-8 (no overlong forms, no
 * surrogates, nothing above U+10FFFF): for the callers that must refuse
 * what utf8_next() would replace. */
bool utf8_valid(const char *s, size_t len);
/* Appends `units` UTF-16LE code units as UTF-8 (unpaired surrogates become
 * U+FFFD); no terminator. On allocation failure b->oom is set and nothing is
 * appended. */
void utf16le_to_utf8(struct bytebuf *b, const uint8_t *s, size_t units);
/* The number of UTF-16LE units before the first NUL unit in the `bytes`
 * bytes at s, or SIZE_MAX when there is none. */
size_t utf16le_strlen(const uint8_t *s, size_t bytes);

#endif /* RINGPIPE_UTF_H */
