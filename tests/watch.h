/* SPDX-License-Identifier: MIT */
/*
 * What a test and bench_latency watch a session through: a live stream's
 * reader that notes when each byte came, the bytes the drainer has read
 * from every ring, and a provider's enable callback that notes when the
 * last session disabled it. The tests judge what arrives; the benchmark
 * takes the times.
 */
#ifndef RINGPIPE_TESTS_WATCH_H
#define RINGPIPE_TESTS_WATCH_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "atomics.h"
#include "clock.h"
#include "ringpipe/ringpipe.h"
#include "session.h"

/* ---- a live stream's reader ----------------------------------------------- */

struct stream_reader {
	int fd;
	unsigned char *buf;
	size_t len, cap;
	uint64_t *arrival;	/* arrival[i]: CLOCK_MONOTONIC when byte i came */
	pthread_mutex_t lock;
};

/* The reader thread: reads fd until end of stream. */
static inline void *stream_reader_main(void *arg)
{
	struct stream_reader *r = arg;
	unsigned char chunk[65536];
	ssize_t n;

	while ((n = read(r->fd, chunk, sizeof(chunk))) > 0) {
		uint64_t t = rp_clock_mono_ns();

		pthread_mutex_lock(&r->lock);
		if (r->len + (size_t)n > r->cap) {
			r->cap = (r->len + (size_t)n) * 2;
			r->buf = realloc(r->buf, r->cap);
			r->arrival = realloc(r->arrival, r->cap * sizeof(uint64_t));
			if (!r->buf || !r->arrival) {
				fprintf(stderr, "stream reader: out of memory\n");
				abort();
			}
		}
		memcpy(r->buf + r->len, chunk, (size_t)n);
		for (ssize_t i = 0; i < n; i++)
			r->arrival[r->len + (size_t)i] = t;
		r->len += (size_t)n;
		pthread_mutex_unlock(&r->lock);
	}
	return NULL;
}

/* When the UTF-16LE form of the ASCII marker (as a string field carries
 * it) reached the reader; 0 if it had not within wait_ns. */
static inline uint64_t stream_reader_arrival(struct stream_reader *rd, const char *marker,
					     uint64_t wait_ns)
{
	size_t n = strlen(marker), m = 2 * n;
	uint64_t end = rp_clock_mono_ns() + wait_ns;
	char wire[128];

	if (m > sizeof(wire))
		return 0;
	for (size_t i = 0; i < n; i++) {
		wire[2 * i] = marker[i];
		wire[2 * i + 1] = 0;
	}
	for (;;) {
		uint64_t t = 0;

		pthread_mutex_lock(&rd->lock);
		for (size_t i = 0; rd->len >= m && i <= rd->len - m; i++)
			if (!memcmp(rd->buf + i, wire, m)) {
				t = rd->arrival[i + m - 1];
				break;
			}
		pthread_mutex_unlock(&rd->lock);
		if (t)
			return t;
		if (rp_clock_mono_ns() >= end)
			return 0;
		usleep(1000);
	}
}

static inline void stream_reader_free(struct stream_reader *rd)
{
	free(rd->buf);
	free(rd->arrival);
	rd->buf = NULL;
	rd->arrival = NULL;
	rd->len = rd->cap = 0;
}

/* ---- the drainer's progress ------------------------------------------------ */

/* Bytes the drainer has handed back in every ring of the session: what it
 * has read. Relaxed: a sample for a counter, ordering nothing. */
static inline uint64_t session_bytes_read(struct rp_session *s)
{
	uint64_t sum = 0;

	for (uint32_t i = 0; i < rp_shm_nr_rings(s->shm); i++)
		sum += rp_load_relaxed(&rp_shm_ring(s->shm, i)->hdr->consumer_pos);
	return sum;
}

/* ---- a provider's enablement ------------------------------------------------ */

struct enable_watch {
	int enabled;		/* atomic: sessions enabling the provider */
	uint64_t disabled_ns;	/* atomic: when the last one disabled it */
};

/* The provider's enable_cb, with its enable_watch as cb_ctx. */
static inline void enable_watch_cb(struct rp_provider *provider, int session_id, bool enabled,
				   uint64_t keywords, uint8_t level, const char *args, void *ctx)
{
	struct enable_watch *w = ctx;

	(void)provider, (void)session_id, (void)keywords, (void)level, (void)args;
	if (enabled) {
		rp_add_relaxed(&w->enabled, 1);
	} else {
		rp_store_relaxed(&w->disabled_ns, rp_clock_mono_ns());
		rp_add_relaxed(&w->enabled, -1);
	}
}

#endif
