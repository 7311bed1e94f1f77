// SPDX-License-Identifier: MIT
/*
 * Ring consumer and producer slow path.
 *
 * Data area of one ring, positions are free-running byte counts:
 *
 *      consumer_pos (published)      producer_pos
 *            |                             |
 *   ... zero | committed | BUSY | committed | zero (free) ...
 *            |<------- at most data_size ------->|
 *
 * Invariants the protocol keeps:
 *   - producer_pos - consumer_pos <= data_size (reserve checks it);
 *   - every byte of free space is zero: the consumer zeroes what it
 *     consumed before it publishes the new consumer_pos (release), and a
 *     producer only writes after acquiring that position.  A record start
 *     therefore reads 0 until its producer has stored BUSY|len, so the
 *     consumer can never mistake stale bytes from the previous lap for a
 *     committed record, without any lock between "CAS the position" and
 *     "write the header" (the job a spinlock does in kernel/bpf/ringbuf.c);
 *   - records never wrap: the data pages are mapped twice back to back,
 *     and a record is at most min(64 KiB, data_size / 4) bytes.
 *
 * The consumer treats everything in shared memory as hostile: positions
 * and len words are range-checked against its own copies, a record
 * header is copied once and validated, and on corruption it counts,
 * reports, and skips to the producer position.  It never reads outside
 * [data, data + 2 * data_size).
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "ring.h"

#define RING_REC_HDR ((uint32_t)sizeof(struct rp_shm_record))

static uint64_t ring_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void rp_ring_setup(struct rp_ring *r, struct rp_shm *s, uint32_t index,
		   struct rp_shm_ring *hdr, unsigned char *data)
{
	memset(r, 0, sizeof(*r));
	r->hdr = hdr;
	r->data = data;
	r->size = s->data_size;
	r->mask = (s->data_size - 1) & ~(uint64_t)(RP_REC_ALIGN - 1);
	r->max_record = s->max_record;
	r->index = index;
	r->shm = s;
	/* pairs with the store_release of consumer_pos in rp_ring_release() of
	 * the previous consumer (maybe another process): its zeroing of the
	 * free space is visible to us */
	r->cons = rp_load_acquire(&hdr->consumer_pos);
	r->published = r->cons;
	r->prod_seen = r->cons;
}

struct rp_shm_record *rp_ring_reserve_slow(struct rp_ring *r, uint32_t len)
{
	struct rp_shm_ring *h = r->hdr;
	struct rp_shm_record *rec;
	__u64 cons, pos, used;

	for (;;) {
		/* pairs with the store_release of consumer_pos in
		 * rp_ring_release(), as in rp_ring_reserve() */
		cons = rp_load_acquire(&h->consumer_pos);
		pos = rp_load_relaxed(&h->producer_pos);
		used = pos - cons;
		/* used > size only if someone scribbled on the positions */
		if (used > r->size || r->size - used < len)
			return NULL;
		/* a failed CAS means another producer made progress: retry */
		if (rp_cas_weak_relaxed(&h->producer_pos, &pos, pos + len))
			break;
	}
	rec = (struct rp_shm_record *)(r->data + (pos & r->mask));
	rp_store_relaxed(&rec->len, len | RP_REC_BUSY);	/* see rp_ring_reserve() */
	return rec;
}

static void ring_report(struct rp_ring *r, uint64_t pos, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void ring_report(struct rp_ring *r, uint64_t pos, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(r->err, sizeof(r->err), fmt, ap);
	va_end(ap);
	if (r->shm && r->shm->report)
		r->shm->report(r->shm->report_ctx, r, pos, r->err);
}

/* Throw away everything up to the producer position. */
static int ring_skip_corrupt(struct rp_ring *r, uint64_t prod, const char *why)
{
	uint64_t pos = r->cons, skip = prod - pos;

	rp_add_relaxed(&r->hdr->corrupt, 1);
	rp_add_relaxed(&r->hdr->skipped_bytes, skip > r->size ? r->size : skip);
	ring_report(r, pos,
		    "ring %u: corrupt data at position %" PRIu64 " (offset %" PRIu64 "): %s; "
		    "skipping to producer position %" PRIu64,
		    r->index, pos, pos & r->mask, why, prod);
	r->cons = prod;
	r->peek_len = 0;
	r->stuck_since_ns = 0;
	return -EBADMSG;
}

/* Is len a plausible length for a record with avail bytes after its start?
 * One test: every record the drainer reads goes through it. */
static inline bool ring_len_ok(const struct rp_ring *r, uint32_t len, uint64_t avail)
{
	return len >= RING_REC_HDR && !(len % RP_REC_ALIGN) && len <= r->max_record &&
	       len <= avail;
}

/* Why len fails ring_len_ok(), written into buf; NULL if it does not. */
static const char *ring_check_len(const struct rp_ring *r, uint32_t len, uint64_t avail,
				  char *buf, size_t buflen)
{
	if (len < RING_REC_HDR)
		snprintf(buf, buflen, "length %u is shorter than the %u-byte record header",
			 len, RING_REC_HDR);
	else if (len % RP_REC_ALIGN)
		snprintf(buf, buflen, "length %u is not a multiple of %u", len, RP_REC_ALIGN);
	else if (len > r->max_record)
		snprintf(buf, buflen, "length %u exceeds the ring's max record %u",
			 len, r->max_record);
	else if (len > avail)
		snprintf(buf, buflen, "length %u runs past the producer position (%" PRIu64
			 " bytes available)", len, avail);
	else
		return NULL;
	return buf;
}

/* Copy and validate the header of a committed record of length len. */
static const char *ring_check_body(const unsigned char *rec, uint32_t len,
				   struct rp_ring_item *it, char *buf, size_t buflen)
{
	const struct rp_shm_record *h = &it->hdr;
	uint32_t stack_off, nr = 0;
	uint64_t payload_off, need;

	memcpy(&it->hdr, rec, sizeof(it->hdr));
	if (h->flags & ~RP_REC_F_KNOWN) {
		snprintf(buf, buflen, "unknown record flags 0x%04x", h->flags);
		return buf;
	}
	stack_off = rp_record_stack_off(h->flags);
	if (h->flags & RP_REC_F_STACK) {
		if ((uint64_t)stack_off + sizeof(struct rp_shm_stack) > len) {
			snprintf(buf, buflen, "stack header at +%u runs past the record end %u",
				 stack_off, len);
			return buf;
		}
		memcpy(&nr, rec + stack_off, sizeof(nr));
	}
	payload_off = rp_record_payload_off(h->flags, nr);
	need = rp_record_size(h->flags, nr, h->payload_len);
	if (need != len) {
		snprintf(buf, buflen, "header implies %" PRIu64 " bytes (flags 0x%04x, %u stack ips, "
			 "%u payload bytes) but len is %u", need, h->flags, nr, h->payload_len, len);
		return buf;
	}
	it->len = len;
	it->stack_nr = nr;
	it->activity = (h->flags & RP_REC_F_ACTIVITY)
		       ? (const struct rp_shm_activity *)(rec + rp_record_activity_off(h->flags))
		       : NULL;
	it->stack = (h->flags & RP_REC_F_STACK)
		    ? (const uint64_t *)(rec + stack_off + sizeof(struct rp_shm_stack))
		    : NULL;
	it->payload = rec + payload_off;
	it->rec = (const struct rp_shm_record *)rec;
	return NULL;
}

/*
 * The head record is reserved but not committed (len word 0 or BUSY).
 * Normally its writer is between reserve and commit; if it stays that way
 * longer than shm->stale_ns the writer is presumed dead (killed process)
 * and the record is skipped: by its BUSY length when that is sane, else
 * up to the producer position.
 */
static int ring_not_committed(struct rp_ring *r, uint32_t lenw, uint64_t prod, uint64_t avail)
{
	uint64_t now = ring_mono_ns(), pos = r->cons, target;
	uint32_t len = lenw & RP_REC_LEN_MASK;

	if (!r->stuck_since_ns || r->stuck_pos != pos) {
		r->stuck_pos = pos;
		r->stuck_since_ns = now ? now : 1;
		return -EAGAIN;
	}
	if (now - r->stuck_since_ns < r->shm->stale_ns)
		return -EAGAIN;

	if ((lenw & RP_REC_BUSY) && ring_len_ok(r, len, avail))
		target = pos + len;
	else
		target = prod;	/* length unknown: nothing after it can be parsed */
	rp_add_relaxed(&r->hdr->stale_skipped, 1);
	rp_add_relaxed(&r->hdr->skipped_bytes, target - pos);
	ring_report(r, pos,
		    "ring %u: record at position %" PRIu64 " (offset %" PRIu64 ") not committed for "
		    "%" PRIu64 " ms (len word 0x%08x), writer presumed dead; skipping %" PRIu64 " bytes",
		    r->index, pos, pos & r->mask, (now - r->stuck_since_ns) / 1000000u, lenw,
		    target - pos);
	r->cons = target;
	r->stuck_since_ns = 0;
	return -ESTALE;
}

int rp_ring_peek(struct rp_ring *r, struct rp_ring_item *it)
{
	const unsigned char *rec;
	uint64_t prod, avail;
	uint32_t lenw, len;
	char why[160], msg[200];
	const char *bad;

	r->peek_len = 0;
	/* Use the producer position we last saw until we have consumed up
	 * to it: producers CAS that cache line on every event, so reading it
	 * per record would cost the drainer a cache miss per record. */
	prod = r->prod_seen;
	avail = prod - r->cons;
	if (!avail || avail > r->size) {
		/* relaxed: only a bound; a record's contents are published by
		 * its own len word (the acquire below), not by producer_pos */
		prod = rp_load_relaxed(&r->hdr->producer_pos);
		r->prod_seen = prod;
		avail = prod - r->cons;
	}
	if (avail > r->size) {
		snprintf(msg, sizeof(msg), "producer position %" PRIu64 " is not within %" PRIu64
			 " bytes after the consumer position %" PRIu64, prod, r->size, r->cons);
		return ring_skip_corrupt(r, prod, msg);
	}
	/* every pass consumes >= one record header of avail: bounded */
	while (avail) {
		rec = r->data + (r->cons & r->mask);
		/* pairs with the store_release in rp_ring_commit() and
		 * rp_ring_discard(): the body is visible once len is */
		lenw = rp_load_acquire((const uint32_t *)rec);
		if (!lenw || (lenw & RP_REC_BUSY))
			return ring_not_committed(r, lenw, prod, avail);
		len = lenw & RP_REC_LEN_MASK;
		bad = rp_likely(ring_len_ok(r, len, avail))
		      ? NULL : ring_check_len(r, len, avail, why, sizeof(why));
		if (bad) {
			snprintf(msg, sizeof(msg), "len word 0x%08x: %s", lenw, bad);
			return ring_skip_corrupt(r, prod, msg);
		}
		r->stuck_since_ns = 0;
		if (lenw & RP_REC_DISCARD) {
			r->cons += len;
			avail -= len;
			continue;
		}
		bad = ring_check_body(rec, len, it, why, sizeof(why));
		if (bad)
			return ring_skip_corrupt(r, prod, bad);
		it->pos = r->cons;
		r->peek_len = len;
		return 0;
	}
	r->stuck_since_ns = 0;
	return -EAGAIN;
}

void rp_ring_advance(struct rp_ring *r)
{
	r->cons += r->peek_len;
	r->peek_len = 0;
}

void rp_ring_release(struct rp_ring *r)
{
	rp_ring_release_to(r, r->cons);
}

void rp_ring_release_to(struct rp_ring *r, uint64_t to)
{
	uint64_t from = r->published, n = to - from;

	/* only what was read can be handed back: published <= to <= cons */
	if (n > r->cons - from)
		to = r->cons, n = to - from;
	if (!n)
		return;
	/* Zero what we consumed so that free space reads as zero (see the top
	 * of this file).  n > size only after skipping a corrupt position:
	 * then wipe the whole area.  Offsets are 8-aligned and n <= size, so
	 * this stays inside the double mapping. */
	if (n > r->size)
		memset(r->data, 0, r->size);
	else
		memset(r->data + (from & r->mask), 0, (n + RP_REC_ALIGN - 1) & ~(uint64_t)(RP_REC_ALIGN - 1));
	/* pairs with the load_acquire of consumer_pos in rp_ring_reserve()
	 * and rp_ring_reserve_slow(): producers see the zeroing, and the end
	 * of our reads, before they reuse the space */
	rp_store_release(&r->hdr->consumer_pos, to);
	r->published = to;
}

uint64_t rp_ring_lookahead(struct rp_ring *r, uint64_t from, uint64_t end, uint32_t chunk,
			   rp_ring_chunk_fn fn, void *ctx)
{
	uint64_t pos = from, start = from, min = UINT64_MAX;

	/* never outside what the producer position allows, nor behind the
	 * reader: those bytes may be free space or reused */
	if (from - r->cons > r->size || end - r->cons > r->size || end - from > r->size)
		return from;
	while (pos < end) {
		const unsigned char *rec = r->data + (pos & r->mask);
		/* pairs with the store_release in rp_ring_commit() and
		 * rp_ring_discard(): the timestamp is visible once len is */
		uint32_t lenw = rp_load_acquire((const uint32_t *)rec), len;

		if (!lenw || (lenw & RP_REC_BUSY))
			break;		/* not committed yet */
		len = lenw & RP_REC_LEN_MASK;
		if (!ring_len_ok(r, len, end - pos))
			break;		/* rp_ring_peek() reports it when it gets here */
		if (!(lenw & RP_REC_DISCARD)) {
			uint64_t ts;

			memcpy(&ts, rec + offsetof(struct rp_shm_record, timestamp), sizeof(ts));
			if (ts < min)
				min = ts;
		}
		pos += len;
		if (pos - start >= chunk) {
			fn(ctx, start, min);
			start = pos;
			min = UINT64_MAX;
		}
	}
	if (pos != start)
		fn(ctx, start, min);
	return pos;
}

long rp_ring_drain(struct rp_ring *r, rp_ring_record_fn fn, void *ctx, long max_records)
{
	uint64_t start = r->cons;
	struct rp_ring_item it;
	long n = 0;
	int err, skips = 0;

	while (n < max_records) {
		err = rp_ring_peek(r, &it);
		if (err == -EAGAIN)
			break;
		if (err) {			/* corrupt or stale: skipped, reported */
			if (++skips > 4)
				break;
			continue;
		}
		if (fn && fn(ctx, r, &it) < 0)
			break;			/* not consumed; peeked again next time */
		rp_ring_advance(r);
		n++;
		if (r->cons - start >= r->size)	/* at most one ring's worth per call */
			break;
		/* hand space back in batches while a long drain runs, so that
		 * producers do not see a full ring for the whole call */
		if (r->cons - r->published >= r->size / 8)
			rp_ring_release(r);
	}
	rp_ring_release(r);
	return n;
}

const char *rp_ring_last_error(const struct rp_ring *r)
{
	return r->err;
}

uint64_t rp_ring_drops(const struct rp_ring *r, unsigned int reason)
{
	return rp_load_relaxed(&r->hdr->drops[reason & (RP_DROP_SLOTS - 1)]);
}

uint64_t rp_ring_corrupt_count(const struct rp_ring *r)
{
	return rp_load_relaxed(&r->hdr->corrupt);
}

uint64_t rp_ring_stale_count(const struct rp_ring *r)
{
	return rp_load_relaxed(&r->hdr->stale_skipped);
}
