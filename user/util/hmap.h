/* SPDX-License-Identifier: MIT */
/*
 * Open-addressing hash map from u64 keys to u64 values (linear probing,
 * power-of-two capacity, load factor <= 1/2). Used for thread, metadata,
 * stack and label tables, where keys are ids chosen by a writer or read from
 * an untrusted file: lookups cost O(1) expected whatever the ids are.
 */
#ifndef RINGPIPE_HMAP_H
#define RINGPIPE_HMAP_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct hmap {
	uint64_t *keys;
	uint64_t *vals;
	uint8_t *used;
	size_t cap;	/* 0 or a power of two */
	size_t count;
};

static inline uint64_t hmap_hash(uint64_t k)
{
	/* splitmix64 finalizer: spreads sequential ids over the table */
	k ^= k >> 30;
	k *= 0xbf58476d1ce4e5b9ULL;
	k ^= k >> 27;
	k *= 0x94d049bb133111ebULL;
	k ^= k >> 31;
	return k;
}

static inline void hmap_free(struct hmap *m)
{
	free(m->keys);
	free(m->vals);
	free(m->used);
	memset(m, 0, sizeof(*m));
}

static inline void hmap_clear(struct hmap *m)
{
	if (m->used)
		memset(m->used, 0, m->cap);
	m->count = 0;
}

static inline bool hmap_get(const struct hmap *m, uint64_t key, uint64_t *val)
{
	size_t mask, i;

	if (!m->cap)
		return false;
	mask = m->cap - 1;
	for (i = hmap_hash(key) & mask; m->used[i]; i = (i + 1) & mask) {
		if (m->keys[i] == key) {
			if (val)
				*val = m->vals[i];
			return true;
		}
	}
	return false;
}

static inline int hmap_put(struct hmap *m, uint64_t key, uint64_t val);

static inline int hmap_resize(struct hmap *m, size_t ncap)
{
	struct hmap n = { 0 };
	size_t i;

	n.keys = malloc(ncap * sizeof(*n.keys));
	n.vals = malloc(ncap * sizeof(*n.vals));
	n.used = calloc(ncap, 1);
	if (!n.keys || !n.vals || !n.used) {
		hmap_free(&n);
		return -ENOMEM;
	}
	n.cap = ncap;
	for (i = 0; i < m->cap; i++)
		if (m->used[i])
			hmap_put(&n, m->keys[i], m->vals[i]);
	hmap_free(m);
	*m = n;
	return 0;
}

/* Inserts or replaces; 0 or -ENOMEM. */
static inline int hmap_put(struct hmap *m, uint64_t key, uint64_t val)
{
	size_t mask, i;

	if ((m->count + 1) * 2 > m->cap) {
		int err = hmap_resize(m, m->cap ? m->cap * 2 : 16);

		if (err)
			return err;
	}
	mask = m->cap - 1;
	for (i = hmap_hash(key) & mask; m->used[i]; i = (i + 1) & mask) {
		if (m->keys[i] == key) {
			m->vals[i] = val;
			return 0;
		}
	}
	m->used[i] = 1;
	m->keys[i] = key;
	m->vals[i] = val;
	m->count++;
	return 0;
}

#endif /* RINGPIPE_HMAP_H */
