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
 * The consumer treats everything in shared memory as hostile.  Its own
 * position (r->cons, and r->published, what it last stored) is the truth:
 * consumer_pos in shared memory is only a copy for producers, rewritten
 * on every release whether or not anything was consumed, so a scribbled
 * value heals by the next pass.  The producer position is accepted only
 * within one ring after the reader's position; anything else (behind it,
 * or more than a ring ahead) is counted, reported, and repaired: the ring
 * restarts empty at the reader's position (its unread space zeroed, the
 * producer position set back to it).  Len words are range-checked against
 * private copies of the geometry, a record header is copied once and
 * validated, and on a corrupt record the reader counts, reports and skips
 * to the (validated) producer position.  It never reads or writes outside
 * [data, data + 2 * data_size).  Drop counters are not in the rings: the
 * producers keep them in a memfd sealed against every other writer
 * (abi.h, struct rp_shm_counts), and readers take them as they are.
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
/* The slow path gives up (the caller counts the write as dropped: full)
 * after this many lost CASes: each is another write of producer_pos. */
#define RING_RESERVE_TRIES 64

/* The reader's own counters: written by the consumer only, read by anyone. */
static inline void ring_bump(uint64_t *c, uint64_t n)
{
	rp_store_relaxed(c, *c + n);
}

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

	for (int tries = 0;; tries++) {
		/* a failed CAS means another write of producer_pos (a producer
		 * made progress, or a process scribbles on it): retry, a
		 * bounded number of times */
		if (tries == RING_RESERVE_TRIES)
			return NULL;
		/* pairs with the store_release of consumer_pos in
		 * rp_ring_release(), as in rp_ring_reserve() */
		cons = rp_load_acquire(&h->consumer_pos);
		pos = rp_load_relaxed(&h->producer_pos);
		used = pos - cons;
		/* used > size only if someone scribbled on the positions */
		if (used > r->size || r->size - used < len)
			return NULL;
		if (rp_cas_weak_relaxed(&h->producer_pos, &pos, pos + len))
			break;
	}
	rp_ring_reuse_acquire(r);
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

/* Zeroes ring positions [lo, hi), at most a ring of them, inside whole
 * 8-byte words: positions a scribbled producer_pos made misaligned are
 * rounded inwards, so no byte outside the range is touched. */
static void ring_zero(struct rp_ring *r, uint64_t lo, uint64_t hi)
{
	lo = (lo + RP_REC_ALIGN - 1) & ~(uint64_t)(RP_REC_ALIGN - 1);
	hi &= ~(uint64_t)(RP_REC_ALIGN - 1);
	if ((int64_t)(hi - lo) <= 0)
		return;
	if (hi - lo > r->size)
		lo = hi - r->size;
	/* the offset is below size and the length at most size: inside the
	 * double mapping */
	memset(r->data + (lo & (r->size - 1)), 0, hi - lo);
}

/* The reader's figures into the shared header, for observers in other
 * processes: stored whenever they differ, so a scribbled copy heals. */
static void ring_mirror(struct rp_ring *r)
{
	struct rp_shm_ring *h = r->hdr;
	uint64_t corrupt = r->n_corrupt + r->n_cons_repairs;

	if (rp_load_relaxed(&h->corrupt) != corrupt)
		rp_store_relaxed(&h->corrupt, corrupt);
	if (rp_load_relaxed(&h->stale_skipped) != r->n_stale)
		rp_store_relaxed(&h->stale_skipped, r->n_stale);
	if (rp_load_relaxed(&h->skipped_bytes) != r->n_skipped_bytes)
		rp_store_relaxed(&h->skipped_bytes, r->n_skipped_bytes);
}

/* Where a skip of everything unparseable ends: the producer position now
 * if it is plausible and past prod (the one accepted earlier), else prod.
 * Skipping only to an older position would leave the reader in the middle
 * of what it cannot parse, to be stuck there once more. */
static uint64_t ring_latest_prod(struct rp_ring *r, uint64_t prod)
{
	uint64_t now = rp_load_relaxed(&r->hdr->producer_pos);

	if (now - r->cons <= r->size && now - r->cons > prod - r->cons)
		return r->prod_seen = now;
	return prod;
}

/* Throw away everything up to the producer position (validated: within one
 * ring after the reader's position). */
static int ring_skip_corrupt(struct rp_ring *r, uint64_t prod, const char *why)
{
	uint64_t pos = r->cons, skip;

	prod = ring_latest_prod(r, prod);
	skip = prod - pos;

	ring_bump(&r->n_corrupt, 1);
	ring_bump(&r->n_skipped_bytes, skip);
	ring_mirror(r);
	ring_report(r, pos,
		    "ring %u: corrupt data at position %" PRIu64 " (offset %" PRIu64 "): %s; "
		    "skipping to producer position %" PRIu64,
		    r->index, pos, pos & r->mask, why, prod);
	r->cons = prod;
	r->peek_len = 0;
	r->stuck_since_ns = 0;
	return -EBADMSG;
}

/*
 * The shared producer position is behind the reader's, or more than a ring
 * ahead: no honest producer can have put it there (a producer moves it only
 * forward, by at most the space that consumer_pos leaves, and the reader
 * published nothing past its own position). Nothing between the reader and
 * that position can be trusted, and following it could take the reader
 * backwards or make it read a ring of garbage, so the ring restarts empty
 * at the reader's position: the space not held by the reader is zeroed
 * (free space must read zero) and producer_pos is set back to the reader's
 * position. Producers meanwhile see a full ring (the position is more than
 * a ring from consumer_pos), so they do not write into the space being
 * zeroed. What the reader knew was there (up to the last producer position
 * it accepted) counts as skipped.
 */
static int ring_bad_producer(struct rp_ring *r, uint64_t prod)
{
	uint64_t pos = r->cons, held = pos - r->published, known = r->prod_seen - pos;
	__u64 expect = prod;	/* the ABI's type, for the CAS */

	if (known > r->size)
		known = 0;
	ring_bump(&r->n_corrupt, 1);
	ring_bump(&r->n_prod_repairs, 1);
	ring_bump(&r->n_skipped_bytes, known);
	ring_mirror(r);
	ring_report(r, pos,
		    "ring %u: corrupt data at position %" PRIu64 " (offset %" PRIu64 "): producer "
		    "position %" PRIu64 " is not within %" PRIu64 " bytes after the consumer position %"
		    PRIu64 " (%s); the ring restarts empty at the consumer position",
		    r->index, pos, pos & r->mask, prod, r->size, pos,
		    (int64_t)(prod - pos) < 0 ? "behind it" : "too far ahead");
	/* the held records [published, cons) stay; the rest of the ring is
	 * zeroed */
	if (held < r->size)
		ring_zero(r, pos, r->published + r->size);
	r->prod_seen = pos;
	r->peek_len = 0;
	r->stuck_since_ns = 0;
	/* release: pairs with the producers' CAS on producer_pos (their record
	 * writes follow the CAS), so the zeroing lands before their writes. A
	 * failed CAS (the position moved again) is seen by the next peek. */
	rp_cas_acq_rel(&r->hdr->producer_pos, &expect, pos);
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
 * Normally its writer is between reserve and commit, and it is waited for,
 * however long it takes: a writer stopped, frozen or starved in the middle
 * of a write commits when it runs again. The record is skipped only on a
 * fact: every writer is out (rp_shm_skip_uncommitted(): a stop, a process
 * that died), or the judge says no writer can still commit it (a writer
 * that died, or a record another process forged). Skipped by its BUSY
 * length when that is sane, else up to the producer position.
 */
static int ring_not_committed(struct rp_ring *r, uint32_t lenw, uint64_t prod, uint64_t avail)
{
	struct rp_shm *shm = r->shm;
	uint64_t now = ring_mono_ns(), pos = r->cons, target;
	uint32_t len = lenw & RP_REC_LEN_MASK;
	const char *why;

	if (!r->stuck_since_ns || r->stuck_pos != pos) {
		r->stuck_pos = pos;
		r->stuck_since_ns = now ? now : 1;
		r->stuck_token = 0;
		if (!rp_load_relaxed(&shm->skip_uncommitted))
			return -EAGAIN;
	}
	if (rp_load_relaxed(&shm->skip_uncommitted)) {
		why = "every writer is out";
	} else {
		/* time decides only when to ask: a head is usually committed
		 * within a pass, and asking costs a barrier */
		if (!shm->stale_judge || now - r->stuck_since_ns < RP_RING_STALE_LOOK_NS ||
		    !shm->stale_judge(shm->stale_ctx, &r->stuck_token))
			return -EAGAIN;
		/* its writer may have committed it and left just before the
		 * judge looked: pairs with the store_release of the len word
		 * in the commit (seen after the writer's exit, as the judge
		 * saw it) */
		lenw = rp_load_acquire((const uint32_t *)(r->data + (pos & r->mask)));
		if (lenw && !(lenw & RP_REC_BUSY)) {
			r->stuck_since_ns = 0;
			return -EAGAIN;
		}
		len = lenw & RP_REC_LEN_MASK;
		why = "no writer can commit it";
	}

	if ((lenw & RP_REC_BUSY) && ring_len_ok(r, len, avail)) {
		target = pos + len;
	} else {
		/* length unknown: nothing after it can be parsed */
		target = ring_latest_prod(r, prod);
	}
	ring_bump(&r->n_stale, 1);
	ring_bump(&r->n_skipped_bytes, target - pos);
	ring_mirror(r);
	ring_report(r, pos,
		    "ring %u: record at position %" PRIu64 " (offset %" PRIu64 ") not committed "
		    "(len word 0x%08x) and %s; skipping %" PRIu64 " bytes",
		    r->index, pos, pos & r->mask, lenw, why, target - pos);
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
	/* Use the producer position we last accepted until we have consumed
	 * up to it: producers CAS that cache line on every event, so reading
	 * it per record would cost the drainer a cache miss per record. */
	prod = r->prod_seen;
	avail = prod - r->cons;
	if (!avail || avail > r->size) {
		/* relaxed: only a bound; a record's contents are published by
		 * its own len word (the acquire below), not by producer_pos */
		prod = rp_load_relaxed(&r->hdr->producer_pos);
		avail = prod - r->cons;
		/* behind the reader (wraps to huge) or more than a ring ahead */
		if (avail > r->size)
			return ring_bad_producer(r, prod);
		r->prod_seen = prod;
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

void rp_ring_release(struct rp_ring *r)
{
	rp_ring_release_to(r, r->cons);
}

void rp_ring_release_to(struct rp_ring *r, uint64_t to)
{
	uint64_t from = r->published, n = to - from, seen;

	/* only what was read can be handed back: published <= to <= cons */
	if (n > r->cons - from)
		to = r->cons, n = to - from;
	if (!n) {
		/* Nothing new, but consumer_pos is rewritten if it is not what we
		 * stored: a scribbled value would make producers see the ring
		 * full (or free space that is not free) until we next consume,
		 * which, with nothing to read, would be never. */
		seen = rp_load_relaxed(&r->hdr->consumer_pos);
		if (seen != from) {
			ring_bump(&r->n_cons_repairs, 1);
			ring_report(r, from,
				    "ring %u: consumer position found at %" PRIu64 ", the reader's is %"
				    PRIu64 " (offset %" PRIu64 "): rewritten", r->index, seen, from,
				    from & r->mask);
			/* pairs with the load_acquire of consumer_pos in
			 * rp_ring_reserve(), as below */
			rp_store_release(&r->hdr->consumer_pos, from);
		}
		ring_mirror(r);
		return;
	}
	/* Zero what we consumed so that free space reads as zero (see the top
	 * of this file): [from, to). Producers reserve at most a ring past
	 * consumer_pos (from), so none of that space is theirs yet. Only when
	 * a scribbled position misled them (or we skipped past a ring in one
	 * go) can [from, to) reach into space in use, whose offsets repeat a
	 * ring later: then only the part that is not within a ring before the
	 * producer position is zeroed, and never more than a ring. */
	{
		uint64_t lo = from, p = rp_load_relaxed(&r->hdr->producer_pos);

		if (p - to <= r->size && (int64_t)(p - r->size - lo) > 0)
			lo = p - r->size;
		ring_zero(r, lo, to);
	}
	/* pairs with the load_acquire of consumer_pos in rp_ring_reserve()
	 * and rp_ring_reserve_slow(): producers see the zeroing, and the end
	 * of our reads, before they reuse the space. Stored whatever the
	 * shared word holds now: a scribbled value heals here too */
	rp_store_release(&r->hdr->consumer_pos, to);
	r->published = to;
	ring_mirror(r);
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

uint64_t rp_ring_pending(const struct rp_ring *r)
{
	uint64_t n = rp_load_relaxed(&r->hdr->producer_pos) - r->cons;

	return n > r->size ? UINT64_MAX : n;
}

uint64_t rp_ring_corrupt_count(const struct rp_ring *r)
{
	return rp_load_relaxed(&r->n_corrupt) + rp_load_relaxed(&r->n_cons_repairs);
}

uint64_t rp_ring_stale_count(const struct rp_ring *r)
{
	return rp_load_relaxed(&r->n_stale);
}

uint64_t rp_ring_skipped_bytes(const struct rp_ring *r)
{
	return rp_load_relaxed(&r->n_skipped_bytes);
}

uint64_t rp_ring_lost_bound(const struct rp_ring *r)
{
	/* a record is at least a header long, and each skip may have cut
	 * one more at its start. Records that producers wrote over while a
	 * scribbled position misled them are not in it: no reader can see
	 * how many there were, and a ring's worth per repair would let a
	 * forger claim any gap it likes */
	return (rp_ring_skipped_bytes(r) + RING_REC_HDR - 1) / RING_REC_HDR +
	       rp_ring_corrupt_count(r) + rp_ring_stale_count(r);
}

uint64_t rp_ring_drops(struct rp_ring *r, unsigned int reason)
{
	/* relaxed: a figure; the producers' adds are relaxed too */
	return reason < RP_DROP_NR ? rp_load_relaxed(&r->drops[reason]) : 0;
}

void rp_shm_drops(struct rp_shm *s, uint64_t out[RP_DROP_NR])
{
	for (uint32_t k = 0; k < s->nr_rings; k++)
		for (unsigned int i = 0; i < RP_DROP_NR; i++)
			out[i] += rp_ring_drops(&s->rings[k], i);
}

