/* SPDX-License-Identifier: MIT */
/*
 * FNV-1a, 64 bits: the tools' one string and frame hash. Each byte is
 * XORed into the state, which is then multiplied by the prime; the state
 * starts at the offset basis. A hash is built in steps, so that several
 * parts (two strings, frames and a count) hash as their concatenation:
 *
 *	uint64_t h = fnv1a64_start();
 *	h = fnv1a64_str(h, host);
 *	h = fnv1a64_u64(h, n);
 *
 * Some of its hashes outlive the process (the fleet's stack ids, the
 * spool's first checksums): the constants are FNV's published ones, and
 * stay so.
 */
#ifndef RINGPIPE_FNV1A_H
#define RINGPIPE_FNV1A_H

#include <stddef.h>
#include <stdint.h>

#define FNV1A64_OFFSET_BASIS 14695981039346656037ull
#define FNV1A64_PRIME 1099511628211ull

static inline uint64_t fnv1a64_start(void)
{
	return FNV1A64_OFFSET_BASIS;
}

static inline uint64_t fnv1a64_bytes(uint64_t h, const void *p, size_t n)
{
	const uint8_t *b = p;
	size_t i;

	for (i = 0; i < n; i++)
		h = (h ^ b[i]) * FNV1A64_PRIME;
	return h;
}

/* v as its 8 bytes, least significant first (whatever the host's order) */
static inline uint64_t fnv1a64_u64(uint64_t h, uint64_t v)
{
	int shift;

	for (shift = 0; shift < 64; shift += 8)
		h = (h ^ ((v >> shift) & 0xff)) * FNV1A64_PRIME;
	return h;
}

/* The bytes of s up to its NUL (not the NUL) */
static inline uint64_t fnv1a64_str(uint64_t h, const char *s)
{
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * FNV1A64_PRIME;
	return h;
}

#endif /* RINGPIPE_FNV1A_H */
