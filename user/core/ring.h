/* SPDX-License-Identifier: MIT */
/*
 * Per-CPU shared-memory rings of a session (internal API).
 *
 * A session is one memfd ("ringpipe-session") holding a session header
 * and nr_rings rings; see include/ringpipe/abi.h for the bytes and
 * Documentation/ring-abi.md for the picture.  This header has the fast
 * path (reserve / commit / discard, current CPU) inline; everything rare
 * or slow lives in ring.c (consumer) and shm.c (create / map / validate).
 *
 * Producer protocol (any number of threads, any process):
 *
 *   rec = rp_ring_reserve(r, rp_record_size(flags, nr_ips, payload_len));
 *   if (!rec) { rp_ring_count_drop(r, RP_DROP_FULL or RP_DROP_TOO_BIG); ... }
 *   fill *rec (rp_record_fill()) and the optional parts
 *   rp_ring_commit(rec);          or rp_ring_discard(rec);
 *
 * reserve never blocks and never makes a syscall: one CAS on the producer
 * position, checked against the consumer position.  A full ring returns
 * NULL; the caller counts the drop and bumps its thread sequence number.
 *
 * Consumer protocol (exactly one consumer per ring at a time, in this or
 * another process; it treats the ring as untrusted):
 *
 *   while (!(err = rp_ring_peek(r, &it))) { use it.*; rp_ring_advance(r); }
 *   rp_ring_release(r);           publish: frees the space for producers
 *
 * or rp_ring_drain() which does exactly that with a callback.
 */
#ifndef RP_RING_H
#define RP_RING_H

#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#ifdef __SANITIZE_THREAD__
#include <sanitizer/tsan_interface.h>
#endif

#if defined(__has_include)
#if __has_include(<sys/rseq.h>)
#include <sys/rseq.h>
#define RP_HAVE_RSEQ 1
#endif
#endif

#include <ringpipe/abi.h>
#include <ringpipe/ringpipe.h>

#include "atomics.h"

#define RP_SHM_DEFAULT_DATA_SIZE	(1u << 20)
/* A head found uncommitted this long is asked about (rp_stale_judge_fn):
 * time only decides when to ask, never the answer */
#define RP_RING_STALE_LOOK_NS		1000000ull

/*
 * The largest record a write makes: header, activity ids, thread block,
 * RP_WRITE_MAX_GIVEN_FRAMES stack frames and a 65535-byte payload (the
 * largest rp_event_write() accepts), padded: 67664 bytes. A session's rings
 * are sized so that their max record (min(RP_REC_MAX_SIZE, data_size / 4))
 * holds it: session.c, and the pin below.
 */
#define RP_RING_LARGEST_RECORD							\
	((uint32_t)((sizeof(struct rp_shm_record) + sizeof(struct rp_shm_activity) + \
		     sizeof(struct rp_shm_thread) + sizeof(struct rp_shm_stack) +	\
		     RP_WRITE_MAX_GIVEN_FRAMES * sizeof(__u64) + 65535u +		\
		     RP_REC_ALIGN - 1) & ~(RP_REC_ALIGN - 1)))
/* The smallest ring a session makes: its quarter holds the largest record. */
#define RP_RING_MIN_DATA_SIZE		(512u << 10)
_Static_assert(RP_RING_MIN_DATA_SIZE / 4 >= RP_RING_LARGEST_RECORD,
	       "a session's smallest ring takes the largest record");
_Static_assert(RP_REC_MAX_SIZE >= RP_RING_LARGEST_RECORD,
	       "the ABI's record limit takes the largest record");

struct rp_ring;
struct rp_shm;

/*
 * Whether the writer of an uncommitted head can still commit it. Asked by
 * the consumer about a head that stays uncommitted, again on each later
 * look while it does; *token starts at 0 for each such head and is the
 * judge's to keep between calls. True: the record is nobody's, and is
 * skipped. The in-process drainer answers from the thread registry
 * (rp_writers_mark() in threads.h); without a judge a head waits for its
 * writer until rp_shm_skip_uncommitted().
 */
typedef bool (*rp_stale_judge_fn)(void *ctx, uint64_t *token);

/* Called for every corruption or stale-record skip a consumer reports.
 * msg names the ring, the CPU, the position and offset, and the reason. */
typedef void (*rp_ring_report_fn)(void *ctx, const struct rp_ring *r, uint64_t pos,
				  const char *msg);

struct rp_shm_opts {
	size_t sz;			/* sizeof(struct rp_shm_opts) */
	uint32_t nr_rings;		/* 0: number of possible CPUs */
	uint32_t mode;			/* RP_SHM_MODE_DROP (default) or _BLOCK */
	uint64_t data_size;		/* per ring, power of two; 0: 1 MiB */
	uint64_t session_id;		/* 0: random */
	uint64_t __unused_ns;		/* was a drainer timeout; ignored */
	uint32_t wake_watermark;	/* bytes; 0: data_size / 2 */
	uint32_t __pad;
};
#define rp_shm_opts__last_field wake_watermark

struct rp_shm_open_opts {
	size_t sz;			/* sizeof(struct rp_shm_open_opts) */
	char *errbuf;			/* receives why the fd was refused */
	size_t errbuf_len;
};
#define rp_shm_open_opts__last_field errbuf_len

/*
 * One ring as seen by this process.  The first cache line is read-mostly
 * (producers); the consumer's private state starts on the next one so an
 * in-process drainer does not bounce it.  Never shared across processes:
 * every field here is this process's trusted copy.
 */
struct rp_ring {
	struct rp_shm_ring *hdr;	/* shared ring header */
	unsigned char *data;		/* data area, mapped twice back to back */
	uint64_t size;			/* data size, power of two */
	uint64_t mask;			/* (size - 1) & ~7: offsets stay 8-aligned */
	uint32_t max_record;
	uint32_t index;
	struct rp_shm *shm;
	/* this ring's drop counters, by reason: in the creator's sealed
	 * counts memfd (abi.h), which only its producers write; an opener
	 * without the counts fd has a private zeroed line instead */
	uint64_t *drops;
	/* the consumer is another process (the agent): its order is told to
	 * ThreadSanitizer (rp_ring_reuse_acquire()); read by TSan builds only */
	bool consumer_elsewhere;

	/* consumer-local state: the reader's own position is authoritative;
	 * consumer_pos in shared memory is only its published copy */
	uint64_t cons __attribute__((aligned(64))); /* next position to read */
	uint64_t published;		/* last consumer_pos we stored */
	uint64_t prod_seen;		/* producer_pos as last accepted: within
					 * size bytes after cons */
	uint32_t peek_len;		/* record returned by the last peek, or 0 */
	uint32_t __pad;
	uint64_t stuck_pos;		/* head position that is not committed */
	uint64_t stuck_since_ns;	/* CLOCK_MONOTONIC when first seen, 0: none */
	uint64_t stuck_token;		/* the judge's, for this head */
	/* the reader's own figures, written by the consumer only, read by
	 * anyone (relaxed atomics); mirrored into the shared header */
	uint64_t n_corrupt;		/* -EBADMSG: corrupt records or positions */
	uint64_t n_stale;		/* -ESTALE: uncommitted heads nobody owned */
	uint64_t n_skipped_bytes;	/* ring bytes given up by those two */
	uint64_t n_prod_repairs;	/* producer_pos found implausible, reset */
	uint64_t n_cons_repairs;	/* consumer_pos found scribbled, rewritten */
	char err[200];			/* last corruption / stale report */
} __attribute__((aligned(64)));

/* A mapped session: creator (rp_shm_create) or reader (rp_shm_open_fd).
 * The first line is what writers read; what readers change is further on. */
struct rp_shm {
	struct rp_ring *rings;
	uint32_t nr_rings;
	uint32_t max_record;
	uint64_t data_size;
	struct rp_shm_session *hdr;
	int fd;
	bool creator;
	void *map_base;			/* whole reserved address range */
	size_t map_len;
	rp_ring_report_fn report;
	void *report_ctx;
	rp_stale_judge_fn stale_judge;	/* set before any consumer runs */
	void *stale_ctx;
	int skip_uncommitted;		/* atomic: every writer is out, skip at once */
	/* the drop counters (abi.h, struct rp_shm_counts) */
	int counts_fd;			/* the creator's, to hand over; else -1 */
	void *counts_map;		/* writable for the creator, read-only for
					 * an opener that attached it */
	size_t counts_len;
	struct rp_shm_ring_counts *local_counts;	/* an opener's until attached */
} __attribute__((aligned(64)));

/* What rp_ring_peek() hands out.  Use the copies (hdr, len, stack_nr),
 * not rec->...: the shared bytes may change under a hostile producer. */
struct rp_ring_item {
	const struct rp_shm_record *rec;	/* in shared memory */
	struct rp_shm_record hdr;		/* validated copy of the header */
	uint64_t pos;				/* ring position of the record */
	uint32_t len;				/* total length */
	uint32_t stack_nr;			/* 0 unless RP_REC_F_STACK */
	const struct rp_shm_activity *activity;	/* NULL unless RP_REC_F_ACTIVITY */
	const uint64_t *stack;			/* NULL unless RP_REC_F_STACK */
	const void *payload;			/* hdr.payload_len bytes */
};

/* shm.c */
struct rp_shm *rp_shm_create(const struct rp_shm_opts *opts);
struct rp_shm *rp_shm_open_fd(int fd, const struct rp_shm_open_opts *opts);
void rp_shm_destroy(struct rp_shm *s);
int rp_shm_fd(const struct rp_shm *s);
struct rp_ring *rp_shm_ring(struct rp_shm *s, uint32_t index);
uint32_t rp_shm_nr_rings(const struct rp_shm *s);
struct rp_shm_session *rp_shm_header(const struct rp_shm *s);
void rp_shm_set_reporter(struct rp_shm *s, rp_ring_report_fn fn, void *ctx);
/* The creator's counts memfd, to hand to a reader with the session's fd;
 * -1 for an opener. */
int rp_shm_counts_fd(const struct rp_shm *s);
/*
 * A reader in another process takes the creator's drop counters: fd is the
 * counts memfd that came with the session's. Refused (negative errno, the
 * reason in opts' errbuf) unless it is sealed against every writer but its
 * creator (F_SEAL_FUTURE_WRITE or F_SEAL_WRITE, and SHRINK, GROW, SEAL),
 * sized for this session's rings, and names this session. Mapped
 * read-only: once attached, this process must not write into the rings
 * (its drops would have nowhere to go). The fd is not kept.
 */
int rp_shm_attach_counts(struct rp_shm *s, int fd, const struct rp_shm_open_opts *opts);
/* Who judges uncommitted heads (before any consumer runs); see
 * rp_stale_judge_fn. */
void rp_shm_set_stale_judge(struct rp_shm *s, rp_stale_judge_fn fn, void *ctx);
/* From now on an uncommitted head is skipped at once: the caller knows that
 * every writer is out (a stop after the writers' quiesce, a process that
 * died). Any thread. */
void rp_shm_skip_uncommitted(struct rp_shm *s);
uint32_t rp_shm_possible_cpus(void);

/* ring.c: consumer */
int rp_ring_peek(struct rp_ring *r, struct rp_ring_item *it);
void rp_ring_release(struct rp_ring *r);
/*
 * For a consumer that reads records in place and hands them back later
 * (the drainer merges straight from ring memory): publish consumption only
 * up to `to`, with published <= to <= cons; the records in [to, cons) stay
 * where they are, unchanged by any honest producer.
 */
void rp_ring_release_to(struct rp_ring *r, uint64_t to);
/*
 * Looks ahead without consuming: walks the committed records in [from, end)
 * (from a record boundary at or after cons, end at most the producer
 * position) and calls fn for each run of about `chunk` bytes with the run's
 * first position and the smallest timestamp in it (UINT64_MAX if it only
 * holds discarded records). Stops at a record that is not committed or
 * whose length is implausible, and leaves it to rp_ring_peek(). Returns the
 * position reached. Timestamps are read from shared memory: a bound for
 * ordering, not validated data.
 */
typedef void (*rp_ring_chunk_fn)(void *ctx, uint64_t pos, uint64_t min_ts);
uint64_t rp_ring_lookahead(struct rp_ring *r, uint64_t from, uint64_t end, uint32_t chunk,
			   rp_ring_chunk_fn fn, void *ctx);
typedef int (*rp_ring_record_fn)(void *ctx, struct rp_ring *r, const struct rp_ring_item *it);
long rp_ring_drain(struct rp_ring *r, rp_ring_record_fn fn, void *ctx, long max_records);
const char *rp_ring_last_error(const struct rp_ring *r);
/*
 * Bytes between the reader's own position and the producer position: 0 when
 * everything is read, UINT64_MAX when the shared producer position is not
 * within one ring after the reader's (corrupt: the next rp_ring_peek()
 * counts and repairs it). Never uses the shared consumer position.
 */
uint64_t rp_ring_pending(const struct rp_ring *r);
/*
 * The reader's own figures (any thread may read them): corruption found
 * (-EBADMSG from peek, and scribbled consumer positions rewritten), stale
 * heads skipped (-ESTALE), the ring bytes those skips gave up, and an upper
 * bound on the records this reader threw away from the ring (the bytes given
 * up in records of the smallest size, and one more per skip or repair).
 * Records that producers misled by a scribbled position wrote over are not
 * in it: no reader can see how many there were.
 */
uint64_t rp_ring_corrupt_count(const struct rp_ring *r);
uint64_t rp_ring_stale_count(const struct rp_ring *r);
uint64_t rp_ring_skipped_bytes(const struct rp_ring *r);
uint64_t rp_ring_lost_bound(const struct rp_ring *r);
/*
 * Drop counters: the producers' own, in the sealed counts memfd, which no
 * other process can write (abi.h), so a reader takes them as they are.
 * rp_ring_drops() reads one ring's count for reason; rp_shm_drops() adds
 * every ring's counts per reason into out. Thread-safe.
 */
uint64_t rp_ring_drops(struct rp_ring *r, unsigned int reason);
void rp_shm_drops(struct rp_shm *s, uint64_t out[RP_DROP_NR]);

/* ring.c: producer slow path and setup */
struct rp_shm_record *rp_ring_reserve_slow(struct rp_ring *r, uint32_t len);
void rp_ring_setup(struct rp_ring *r, struct rp_shm *s, uint32_t index,
		   struct rp_shm_ring *hdr, unsigned char *data);

/*
 * Current CPU: glibc's registered rseq area (kept current by the kernel,
 * one TLS load), else sched_getcpu().  The value can be stale by the time
 * it is used; that only costs locality, never correctness, because rings
 * are multi-producer.
 */
static inline unsigned int rp_ring_current_cpu(void)
{
	int cpu;

#ifdef RP_HAVE_RSEQ
	if (rp_likely(__rseq_size >= 8)) {	/* cpu_id_start + cpu_id */
		const char *tp;
		const struct rseq *rs;

#if defined(__x86_64__)
		__asm__("mov %%fs:0, %0" : "=r"(tp));
#else
		tp = (const char *)__builtin_thread_pointer();
#endif
		rs = (const struct rseq *)(tp + __rseq_offset);
		/* written by the kernel on return to user space; a plain
		 * single-copy-atomic read, nothing to pair with */
		cpu = (int)rp_load_relaxed(&rs->cpu_id);
		if (rp_likely(cpu >= 0))
			return (unsigned int)cpu;
	}
#endif
	cpu = sched_getcpu();
	return cpu < 0 ? 0u : (unsigned int)cpu;
}

static inline struct rp_ring *rp_shm_current_ring(struct rp_shm *s)
{
	unsigned int cpu = rp_ring_current_cpu();

	return &s->rings[rp_likely(cpu < s->nr_rings) ? cpu : cpu % s->nr_rings];
}

/*
 * A ring drained by another process is reused by this process's writers
 * in an order ThreadSanitizer cannot see: writer A commits a record, the
 * consumer there reads and zeroes it and releases the space, writer B
 * reserves it again. Under ThreadSanitizer it is told as a little more
 * than that order: a commit into such a ring (rp_ring_reuse_release(),
 * after it) happens before every reservation that follows in that ring
 * (acquire, once the space is ours, before anything is stored into it),
 * whether or not the reservation reuses the committed space. What that
 * could hide is two writers' reservations overlapping, which the
 * reader's record checks catch. The sync object is the ring's header.
 * Rings drained in this process need nothing: the drainer's own acquire
 * and release are seen. Elsewhere both are nothing.
 */
static inline void rp_ring_reuse_acquire(const struct rp_ring *r)
{
#ifdef __SANITIZE_THREAD__
	/* pairs with the __tsan_release in rp_ring_reuse_release() of the
	 * writer whose record this space held */
	if (r->consumer_elsewhere)
		__tsan_acquire((void *)r->hdr);
#else
	(void)r;
#endif
}

static inline void rp_ring_reuse_release(const struct rp_ring *r)
{
#ifdef __SANITIZE_THREAD__
	/* pairs with the __tsan_acquire in rp_ring_reuse_acquire() of the
	 * writer that reserves this space next */
	if (r->consumer_elsewhere)
		__tsan_release((void *)r->hdr);
#else
	(void)r;
#endif
}

/*
 * Reserve len bytes (header included; rounded up to 8).  Returns the
 * record with its len word set to BUSY|len, or NULL when the ring is full
 * or len is out of range (< header or > max record): the caller counts
 * the drop (RP_DROP_FULL / RP_DROP_TOO_BIG).
 */
static inline struct rp_shm_record *rp_ring_reserve(struct rp_ring *r, uint32_t len)
{
	struct rp_shm_ring *h = r->hdr;
	struct rp_shm_record *rec;
	__u64 cons, pos, room;	/* the ABI's type, for the CAS */

	/* one compare rejects both len < header and len > max_record */
	if (rp_unlikely(len - (uint32_t)sizeof(*rec) > r->max_record - (uint32_t)sizeof(*rec)))
		return NULL;
	len = (len + RP_REC_ALIGN - 1) & ~(RP_REC_ALIGN - 1);	/* max_record is 8-aligned */
	room = r->size - len;	/* no underflow: len <= max_record <= size / 4 */

	/* pairs with the store_release of consumer_pos in rp_ring_release():
	 * the consumer's last reads of the space we may reuse, and its zeroing
	 * of it, happen before our writes into it */
	cons = rp_load_acquire(&h->consumer_pos);
	/* loaded after cons, so pos >= cons for an honest consumer (it only
	 * publishes positions it read from producer_pos) */
	pos = rp_load_relaxed(&h->producer_pos);
	do {
		/* pos - cons is the space in use; a consumer_pos ahead of the
		 * producer (scribbled on) makes it huge: full, never free.
		 * Whatever the positions say, the record lands at pos & mask
		 * and is at most max_record long: inside the double mapping */
		if (rp_unlikely(pos - cons > room))
			return rp_ring_reserve_slow(r, len);
		/* relaxed: the space is ours once the CAS wins; nobody reads it
		 * before rp_ring_commit() publishes it */
	} while (!rp_cas_weak_relaxed(&h->producer_pos, &pos, pos + len));

	rp_ring_reuse_acquire(r);
	rec = (struct rp_shm_record *)(r->data + (pos & r->mask));
	/* relaxed: BUSY only tells the consumer the length of a record that
	 * is not committed yet; the free space was zero, so it reads 0 until
	 * this store lands and means "not committed" either way */
	rp_store_relaxed(&rec->len, len | RP_REC_BUSY);
	return rec;
}

/* Fill the fixed header of a reserved record (not len). */
static inline void rp_record_fill(struct rp_shm_record *rec, uint32_t meta_id, uint64_t ts,
				  uint32_t tid, uint32_t seq, uint16_t flags,
				  uint16_t payload_len, uint32_t cpu)
{
	rec->meta_id = meta_id;
	rec->timestamp = ts;
	rec->tid = tid;
	rec->seq = seq;
	rec->flags = flags;
	rec->payload_len = payload_len;
	rec->cpu = cpu;
}

/* Where the payload starts, from flags the caller holds (a producer never
 * re-reads its record's flags from shared memory: see rp_ring_commit_len()). */
static inline void *rp_record_payload_at(struct rp_shm_record *rec, uint16_t flags,
					 uint32_t stack_nr)
{
	return (char *)rec + rp_record_payload_off(flags, stack_nr);
}

static inline void *rp_record_payload(struct rp_shm_record *rec, uint32_t stack_nr)
{
	return (char *)rec + rp_record_payload_off(rec->flags, stack_nr);
}

/*
 * Commit a record of the length it was reserved with (len as passed to
 * rp_ring_reserve()), from the producer's own copy: another process mapping
 * the ring may have rewritten the len word meanwhile, and the producer never
 * acts on what it reads back from shared memory.
 */
static inline void rp_ring_commit_len(struct rp_shm_record *rec, uint32_t len)
{
	/* pairs with the load_acquire of rec->len in rp_ring_peek() and
	 * rp_ring_peek_fast(): the record body is visible before the
	 * consumer sees it committed */
	rp_store_release(&rec->len, (len + RP_REC_ALIGN - 1) & ~(uint32_t)(RP_REC_ALIGN - 1));
}

/* The same, reading the length back from the len word (single-process use:
 * tests, benchmarks). */
static inline void rp_ring_commit(struct rp_shm_record *rec)
{
	uint32_t len = rp_load_relaxed(&rec->len) & RP_REC_LEN_MASK;

	/* pairs with the load_acquire of rec->len in rp_ring_peek() and
	 * rp_ring_peek_fast(): the record body is visible before the
	 * consumer sees it committed */
	rp_store_release(&rec->len, len);
}

/* Give a reserved record back: the consumer skips it silently. */
static inline void rp_ring_discard(struct rp_shm_record *rec)
{
	uint32_t len = rp_load_relaxed(&rec->len) & RP_REC_LEN_MASK;

	/* pairs with the load_acquire of rec->len in rp_ring_peek() (which
	 * rp_ring_peek_fast() leaves a discarded record to) */
	rp_store_release(&rec->len, len | RP_REC_DISCARD);
}

/* Count one dropped event; reason is RP_DROP_* (< RP_DROP_NR). */
static inline void rp_ring_count_drop(struct rp_ring *r, unsigned int reason)
{
	rp_add_relaxed(&r->drops[reason & (RP_DROP_SLOTS - 1)], 1);
}

/* Steps past the record the last peek returned (inline: a reader's loop
 * calls it once a record). */
static inline void rp_ring_advance(struct rp_ring *r)
{
	r->cons += r->peek_len;
	r->peek_len = 0;
}

/*
 * rp_ring_peek() for the record nearly every peek of a busy ring finds:
 * committed, plain (no flag), of the length its payload implies, within
 * what the reader already accepted of the producer position. Inline, so a
 * reader's loop pays neither a call nor the full checks' frame; anything
 * else (nothing to read, a record with parts, a length that does not add
 * up) goes to rp_ring_peek(), which decides and reports as always. A record
 * taken here passes every check of rp_ring_peek() (a length that is the
 * size of a header and a payload is at least a header and aligned), so a
 * record handed out is the same either way (on an error *it means nothing,
 * with either).
 */
static inline int rp_ring_peek_fast(struct rp_ring *r, struct rp_ring_item *it)
{
	uint64_t avail = r->prod_seen - r->cons;
	const unsigned char *rec = r->data + (r->cons & r->mask);
	uint32_t lenw;

	if (__builtin_expect(avail - 1 >= r->size, 0))	/* none, or implausible */
		return rp_ring_peek(r, it);
	/* pairs with the store_release in rp_ring_commit(),
	 * rp_ring_commit_len() and the flat write (write.c): the header is
	 * visible once len is */
	lenw = rp_load_acquire((const uint32_t *)rec);
	if (__builtin_expect(!lenw || (lenw & (RP_REC_BUSY | RP_REC_DISCARD)) ||
			     lenw > r->max_record || lenw > avail, 0))
		return rp_ring_peek(r, it);
	memcpy(&it->hdr, rec, sizeof(it->hdr));
	/* the copy is what is checked and used: the shared bytes may change,
	 * and inline, without the barrier, the compiler could read a field
	 * again from the ring where the caller uses the copy */
	rp_compiler_barrier();
	if (__builtin_expect(it->hdr.flags ||
			     rp_record_size(0, 0, it->hdr.payload_len) != lenw, 0))
		return rp_ring_peek(r, it);
	r->stuck_since_ns = 0;
	r->peek_len = lenw;
	it->rec = (const struct rp_shm_record *)rec;
	it->pos = r->cons;
	it->len = lenw;
	it->stack_nr = 0;
	it->activity = NULL;
	it->stack = NULL;
	it->payload = rec + rp_record_payload_off(0, 0);
	return 0;
}

/* Advance past the peeked record and publish right away. */
static inline void rp_ring_consume(struct rp_ring *r)
{
	rp_ring_advance(r);
	rp_ring_release(r);
}

#endif /* RP_RING_H */
