/* SPDX-License-Identifier: MIT */
/*
 * UTF-8 / UTF-16LE conversions shared by the nettrace writer and reader and
 * the IPC protocol (both formats carry UTF-16 strings; ringpipe's API is
 * UTF-8). Invalid input never fails: it becomes U+FFFD.
 */
#ifndef RINGPIPE_UTF_H
#define RINGPIPE_UTF_H

#include <stddef.h>
#include <stdint.h>

#include "bytebuf.h"

/* Next code point of UTF-8 text in [*p, end); invalid, overlong or surrogate
 * sequences give U+FFFD and advance past the bytes examined. */
uint32_t utf8_next(const uint8_t **p, const uint8_t *end);
/* Writes cp as UTF-8 (1 to 4 bytes) at o; returns the count. */
size_t utf8_put(char *o, uint32_t cp);
/* Appends `units` UTF-16LE code units as UTF-8 (unpaired surrogates become
 * U+FFFD); no terminator. */
void utf16le_to_utf8(struct bytebuf *b, const uint8_t *s, size_t units);

#endif /* RINGPIPE_UTF_H */
