// SPDX-License-Identifier: MIT
/*
 * Serializer throughput: 32-byte events through the nettrace writer into
 * memory, single thread, next to a plain memcpy of the same payload bytes in
 * the same run. Prints markdown rows; medians of repeated runs.
 *
 * The same events also go through the drainer's way in (each thread's
 * first with nt_writer_event_plain(), the rest by token in batches of 64,
 * nt_writer_events_next()): timed, and checked (untimed, by a hash of every
 * byte) to write exactly what nt_writer_event() writes, in V5 and V6.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_event.h"
#include "clock.h"
#include "common/fnv1a.h"
#include "nettrace.h"

/* A sink that copies into a fixed buffer, wrapping: memory bandwidth, no
 * allocation, like handing blocks to a preallocated I/O buffer. */
struct wrap_sink {
	struct nt_sink base;
	uint8_t *buf;
	size_t cap, pos;
	uint64_t bytes;
};

static int wrap_writev(struct nt_sink *sink, const struct iovec *iov, int n)
{
	struct wrap_sink *s = (struct wrap_sink *)sink;
	int i;

	for (i = 0; i < n; i++) {
		if (s->pos + iov[i].iov_len > s->cap)
			s->pos = 0;
		memcpy(s->buf + s->pos, iov[i].iov_base, iov[i].iov_len);
		s->pos += iov[i].iov_len;
		s->bytes += iov[i].iov_len;
	}
	return 0;
}

/* A sink that only hashes (FNV-1a) and counts what it is given. */
struct hash_sink {
	struct nt_sink base;
	uint64_t h, bytes;
};

static int hash_writev(struct nt_sink *sink, const struct iovec *iov, int n)
{
	struct hash_sink *s = (struct hash_sink *)sink;
	int i;

	for (i = 0; i < n; i++) {
		s->h = fnv1a64_bytes(s->h, iov[i].iov_base, iov[i].iov_len);
		s->bytes += iov[i].iov_len;
	}
	return 0;
}

static const struct nt_field fields[] = {
	{ "A", NT_U64, 0, 0, NULL }, { "B", NT_U32, 0, 0, NULL },
	{ "C", NT_U32, 0, 0, NULL }, { "Name", NT_STRING, 0, 0, NULL },
};
static const struct nt_event_desc desc = { "Bench", NULL, 1, "Small", 0, 0, 4, 0, 4, fields };

#define NEXT_BATCH 64u

/*
 * n events of 4 threads taking turns into sink, through nt_writer_event()
 * (by_token false) or the drainer's way (by_token true). 0, or 1 when the
 * writer refused something.
 */
static int write_events(struct nt_sink *sink, int format, uint64_t n, bool by_token)
{
	struct nt_writer_opts o = { .sz = sizeof(o), .format = format, .pid = 1,
				    .tick_freq = 1000000000, .pointer_size = 8, .sync_unix_ns = 1,
				    .nr_cpus = 2 };
	struct small payload = { .name = SMALL_NAME };
	struct small pay[NEXT_BATCH];
	struct nt_next batch[NEXT_BATCH];
	uint32_t id, seq[4] = { 1, 1, 1, 1 }, token[4] = { 0 };
	struct nt_writer *w = nt_writer_new(sink, &o);
	unsigned int nb = 0;
	uint64_t i;

	if (!w || nt_writer_define(w, &desc, &id))
		return 1;
	for (i = 0; i < n; i++) {
		struct nt_event ev = { .meta_id = id, .tid = 100 + (i & 3), .ts = 1000 + i,
				       .payload = &payload, .payload_len = PAYLOAD,
				       .cpu = (uint32_t)(i & 1), .sorted = true };

		ev.seq = ++seq[i & 3];
		payload.counter = i;
		if (!by_token) {
			if (nt_writer_event(w, &ev))
				return 1;
			continue;
		}
		if (!token[i & 3]) {
			int t = nt_writer_event_plain(w, &ev);

			if (t <= 0)
				return 1;
			token[i & 3] = (uint32_t)t;
			continue;
		}
		/* the batch points at its payloads until it is written */
		pay[nb] = payload;
		batch[nb] = (struct nt_next){ .token = token[i & 3], .payload_len = PAYLOAD,
					      .ts = ev.ts, .payload = &pay[nb] };
		if (++nb == NEXT_BATCH || i + 1 == n) {
			if (nt_writer_events_next(w, batch, nb) != nb)
				return 1;
			nb = 0;
		}
	}
	nt_writer_finish(w, 1000 + n);
	nt_writer_free(w);
	return 0;
}

int main(int argc, char **argv)
{
	bool quick = argc > 1 && !strcmp(argv[1], "--quick");
	uint64_t n = quick ? 2000000 : 10000000, i;
	int reps = quick ? 3 : 7, rep;
	double ser[16], cpy[16], tok[16];
	uint64_t out_bytes = 0;
	struct small payload = { .name = SMALL_NAME };
	struct wrap_sink sink = { .base.writev = wrap_writev, .cap = 64u << 20 };
	uint8_t *dst = malloc(64u << 20);

	sink.buf = malloc(sink.cap);
	if (!sink.buf || !dst)
		return 1;
	memset(sink.buf, 1, sink.cap);
	memset(dst, 1, 64u << 20);

	for (rep = 0; rep < reps; rep++) {
		struct nt_writer_opts o = { .sz = sizeof(o), .format = NT_FORMAT_V5, .pid = 1,
					    .tick_freq = 1000000000, .pointer_size = 8 };
		struct nt_writer *w;
		uint32_t id, seq[4] = { 1, 1, 1, 1 };
		uint64_t t0;
		size_t pos = 0;

		sink.pos = 0;
		sink.bytes = 0;
		w = nt_writer_new(&sink.base, &o);
		if (!w || nt_writer_define(w, &desc, &id))
			return 1;
		t0 = rp_clock_mono_ns();
		for (i = 0; i < n; i++) {
			struct nt_event ev = { .meta_id = id, .tid = 100 + (i & 3), .ts = 1000 + i,
					       .payload = &payload, .payload_len = PAYLOAD,
					       .sorted = true };

			ev.seq = ++seq[i & 3];
			payload.counter = i;
			if (nt_writer_event(w, &ev))
				return 1;
		}
		nt_writer_finish(w, 1000 + n);
		ser[rep] = (double)(rp_clock_mono_ns() - t0) / 1e9;
		out_bytes = sink.bytes;
		nt_writer_free(w);

		sink.pos = 0;
		sink.bytes = 0;
		t0 = rp_clock_mono_ns();
		if (write_events(&sink.base, NT_FORMAT_V5, n, true))
			return 1;
		tok[rep] = (double)(rp_clock_mono_ns() - t0) / 1e9;

		t0 = rp_clock_mono_ns();
		for (i = 0; i < n; i++) {
			if (pos + PAYLOAD > (64u << 20))
				pos = 0;
			payload.counter = i;
			memcpy(dst + pos, &payload, PAYLOAD);
			pos += PAYLOAD;
		}
		__asm__ volatile("" : : "r"(dst) : "memory");
		cpy[rep] = (double)(rp_clock_mono_ns() - t0) / 1e9;
	}
	{
		double s = summarize(ser, (unsigned int)reps).med;
		double c = summarize(cpy, (unsigned int)reps).med;

		printf("| nettrace serializer, 32-byte events (V5, 4 threads, into memory) | %.1f ns/event | %.1f M events/s | %.0f MB/s out (%.1f B/event) |\n",
		       s * 1e9 / (double)n, (double)n / s / 1e6, (double)out_bytes / s / 1e6,
		       (double)out_bytes / (double)n);
		printf("| memcpy of the same 32-byte payloads | %.1f ns/event | %.1f M events/s | %.0f MB/s |\n",
		       c * 1e9 / (double)n, (double)n / c / 1e6, 32.0 * (double)n / c / 1e6);
		printf("| ratio serializer / memcpy | %.2fx | | |\n", s / c);
	}
	{
		double t = summarize(tok, (unsigned int)reps).med;
		bool same = true;

		/* untimed: the bytes of both ways in, V5 and V6 */
		for (int f = NT_FORMAT_V5; f <= NT_FORMAT_V6; f++) {
			struct hash_sink a = { .base.writev = hash_writev, .h = fnv1a64_start() };
			struct hash_sink b = a;

			if (write_events(&a.base, f, 200000, false) ||
			    write_events(&b.base, f, 200000, true) || a.h != b.h || a.bytes != b.bytes)
				same = false;
		}
		printf("| nettrace serializer, the drainer's way in (plain, then by token in batches of 64; the loop's batching counted) | %.1f ns/event | %.1f M events/s | same bytes as nt_writer_event(), V5 and V6: %s |\n",
		       t * 1e9 / (double)n, (double)n / t / 1e6, same ? "yes" : "**NO**");
		if (!same)
			return 1;
	}
	free(sink.buf);
	free(dst);
	return 0;
}
