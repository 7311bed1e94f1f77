/* SPDX-License-Identifier: MIT */
/*
 * ringpipe shared-memory ABI.
 *
 * Everything in this header describes bytes that live in a memfd shared
 * between producers (any thread of any process that maps the session),
 * the drainer, and possibly an out-of-process reader, and later the BPF
 * programs.  Rules:
 *
 *   - fixed-width types only (__u8 .. __u64), explicit padding, no
 *     pointers, no bitfields, no enums in structs;
 *   - every struct size and every field a reader depends on is pinned by
 *     a static assertion below, so an accidental layout change fails the
 *     build instead of corrupting a reader;
 *   - fields written by different parties sit on different 64-byte cache
 *     lines (producer position, consumer position, drop counters, reader
 *     counters, each Block-mode word);
 *   - a change to any of this bumps RP_ABI_VERSION.
 *
 * The byte-level description with an ASCII picture of the file and of
 * the mapping is in Documentation/ring-abi.md.
 */
#ifndef RINGPIPE_ABI_H
#define RINGPIPE_ABI_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* "RINGPIPE" read as a little-endian u64: shows up as text in a hexdump. */
#define RP_ABI_MAGIC		0x45504950474e4952ULL
/* 2: records may carry the thread they are about (RP_REC_F_THREAD) */
/* 3: records up to 67664 bytes; Block mode's waiter queue left shared memory */
/* 4: space_freed and space_watch */
/* 5: drop counters in a memfd of their own, sealed against every writer but
 *    their creator (struct rp_shm_counts); the ring headers' drops and the
 *    session's drainer_timeout_ns are unused, zero */
#define RP_ABI_VERSION		5u
/* "RPRG": first word of every ring header, catches a mis-computed offset. */
#define RP_SHM_RING_MAGIC	0x47525052u

#define RP_SHM_CACHELINE	64u
/* Size of the ring header page.  The ABI fixes it at 4096; a reader on a
 * system whose page size differs refuses the session (see page_size). */
#define RP_SHM_RING_HDR_SIZE	4096u
#define RP_SHM_WAITER_SLOTS	64u

/* Limits a reader enforces before trusting a header. */
#define RP_SHM_MAX_RINGS	4096u
#define RP_SHM_MIN_DATA_SIZE	4096ULL
#define RP_SHM_MAX_DATA_SIZE	(1ULL << 30)
/* Largest record any ring accepts; a ring also caps it at data_size / 4. */
/* Largest record any ring accepts: header, activity ids, thread block, 256
 * stack frames and a 65535-byte payload. A ring also caps it at data_size / 4. */
#define RP_REC_MAX_SIZE		67664u
#define RP_REC_ALIGN		8u

/* rp_shm_session.flags */
#define RP_SHM_F_MODE_MASK	0x3u	/* low bits: buffering mode */
#define RP_SHM_MODE_DROP	0u	/* full ring: drop, count, seq++ */
#define RP_SHM_MODE_BLOCK	1u	/* full ring: park in FIFO (Block mode) */
#define RP_SHM_F_KNOWN		RP_SHM_F_MODE_MASK

/* Per-ring drop counters, indexed by reason. */
#define RP_DROP_FULL		0u	/* no space in the ring */
#define RP_DROP_TOO_BIG		1u	/* record larger than the ring's max */
#define RP_DROP_NO_SESSION	2u	/* session gone while writing */
#define RP_DROP_ABORTED		3u	/* Block: the session stopped, or its agent went away */
#define RP_DROP_ALLOC_FAIL	4u	/* allocation failure (never parks) */
#define RP_DROP_OUTPUT		5u	/* the session's output failed */
#define RP_DROP_TIMEOUT		6u	/* Block: a wait passed the session's own bound */
#define RP_DROP_NR		7u

/* space_watch: the watcher sleeps on space_freed and wants a wake from the
 * drainer when it frees space (its process has waiters), or from a producer
 * of its process that starts to wait (it has none yet). */
#define RP_SPACE_WATCH_FREED	1u
#define RP_SPACE_WATCH_PARKED	2u
#define RP_DROP_SLOTS		8u	/* slots reserved in the ABI */

/*
 * Block-mode waiter slot. Unused since ABI version 3: a session's producers
 * wait in a queue of their own process (user/producer/park.h), which no
 * other process can touch, so no shared word can keep a producer asleep or
 * end a session. The slots, waiter_head and abort stay in the
 * layout, zero.
 */
struct rp_shm_waiter {
	__u32 futex;		/* wake counter: incremented by every waker */
	__u32 tid;		/* OS tid of the parked producer */
	__u32 ticket;		/* ticket this slot currently serves */
	__u32 state;		/* reserved, 0 */
	__u8 __pad[48];
};

/*
 * Session header: offset 0 of the memfd, 8192 bytes (two pages).
 * Page 0 holds geometry and control words, page 1 the waiter slots.
 */
struct rp_shm_session {
	/* 0x000: immutable once the fd is handed out */
	__u64 magic;		/* RP_ABI_MAGIC, written last at creation */
	__u32 version;		/* RP_ABI_VERSION */
	__u32 hdr_size;		/* sizeof(struct rp_shm_session) */
	__u32 ring_hdr_size;	/* RP_SHM_RING_HDR_SIZE */
	__u32 nr_rings;		/* 1 .. RP_SHM_MAX_RINGS */
	__u64 ring_data_size;	/* power of two, >= page_size */
	__u64 session_id;
	__u32 flags;		/* RP_SHM_F_*, mode in the low bits */
	__u32 page_size;	/* page size of the creator */
	__u32 max_record;	/* min(RP_REC_MAX_SIZE, ring_data_size / 4) */
	__u32 record_hdr_size;	/* sizeof(struct rp_shm_record) */
	__u64 total_size;	/* size of the memfd, exactly */

	/* 0x040: immutable tuning */
	__u64 drainer_timeout_ns; /* unused since version 5, zero: nothing takes
				   * a drainer for dead by the time it was silent */
	__u32 wake_watermark;	/* bytes pending before a producer wakes the drainer */
	__u32 creator_pid;
	__u8 __pad1[48];

	/* 0x080: unused since version 3 (was the Block abort flag), zero */
	__u32 abort;
	__u8 __pad2[60];

	/* 0x0c0: drainer liveness; written only by the drainer */
	__u32 drainer_pid;
	__u32 drainer_tid;
	__u64 drainer_heartbeat_ns; /* CLOCK_MONOTONIC, refreshed while it runs */
	__u8 __pad3[48];

	/* 0x100: drainer wakeup.  Producers FUTEX_WAKE drainer_wake only when
	 * pending bytes cross wake_watermark or drainer_idle != 0 (the drainer
	 * declared it is about to sleep), never once per event. */
	__u32 drainer_wake;	/* futex word the drainer sleeps on */
	__u32 drainer_idle;
	__u8 __pad4[56];

	/* 0x140: since version 4, bumped by a drainer in another process after
	 * it handed ring space back, and FUTEX_WAKEd when space_watch is set:
	 * the producers' process watches it to admit its Block waiters. A
	 * hint: a scribbled value only wakes that watcher early. */
	__u32 space_freed;
	__u32 space_watch;	/* RP_SPACE_WATCH_*: who should wake the watcher */
	__u8 __pad5[56];

	/* 0x180: unused since version 3 (was the ticket served) */
	__u32 waiter_head;
	__u8 __pad6[60];

	/* 0x1c0 .. 0xfff: reserved, zero */
	__u8 __reserved[4096 - 0x1c0];

	/* 0x1000: one cache line per waiter */
	struct rp_shm_waiter waiters[RP_SHM_WAITER_SLOTS];
};

/*
 * Ring header: one page in front of each ring's data area.
 * Positions are free-running byte counts (never wrap in practice); the
 * byte offset in the data area is pos & (data_size - 1).
 */
struct rp_shm_ring {
	/* 0x000: immutable */
	__u32 magic;		/* RP_SHM_RING_MAGIC */
	__u32 cpu;		/* ring index = CPU index for per-CPU sessions */
	__u64 data_size;	/* == session.ring_data_size */
	__u64 data_offset;	/* file offset of this ring's data */
	__u32 max_record;	/* == session.max_record */
	__u32 flags;		/* reserved, 0 */
	__u8 __pad0[32];

	/* 0x040: producers only (CAS in reserve) */
	__u64 producer_pos;
	__u8 __pad1[56];

	/* 0x080: the consumer only (store-release in release) */
	__u64 consumer_pos;
	__u8 __pad2[56];

	/* 0x0c0: unused since version 5, zero: the drop counters are in the
	 * sealed counts memfd (struct rp_shm_counts), which no process that
	 * maps this one can write */
	__u64 drops[RP_DROP_SLOTS];

	/* 0x100: reader-side counters, written by the consumer */
	__u64 corrupt;		/* corrupt records / positions found */
	__u64 stale_skipped;	/* records left BUSY too long and skipped */
	__u64 skipped_bytes;	/* bytes thrown away by those skips */
	__u8 __pad3[40];

	__u8 __reserved[RP_SHM_RING_HDR_SIZE - 0x140];
};

/*
 * Drop counters (since version 5): a second memfd, "ringpipe-counts", of
 * one header line and one line per ring, rounded up to whole pages. Its
 * creator (the producers' process) maps it writable, then seals it with
 * F_SEAL_FUTURE_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL: from
 * then on no process, its creator included, can map it writable again or
 * write() to it, so only the creator's producers move the counters, with
 * relaxed atomic adds, and a reader in another process (the agent) maps it
 * read-only and trusts what it reads. A reader refuses a counts fd without
 * those seals.
 */
#define RP_COUNTS_MAGIC		0x53544e554f435052ULL	/* "RPCOUNTS" */

struct rp_shm_counts {
	__u64 magic;		/* RP_COUNTS_MAGIC */
	__u32 version;		/* RP_ABI_VERSION */
	__u32 nr_rings;		/* == the session's */
	__u64 session_id;	/* == the session's */
	__u8 __pad[40];
	/* then nr_rings of: */
};

struct rp_shm_ring_counts {
	__u64 drops[RP_DROP_SLOTS];	/* by reason (RP_DROP_*) */
};

/* The counts memfd's size for nr rings, before rounding to pages. */
static inline __u64 rp_shm_counts_size(__u32 nr_rings)
{
	return (__u64)sizeof(struct rp_shm_counts) +
	       (__u64)nr_rings * sizeof(struct rp_shm_ring_counts);
}

/*
 * Record header.  Records are 8-byte aligned and never wrap (the data
 * area is mapped twice back to back).  Layout of one record:
 *
 *   struct rp_shm_record                    32 bytes
 *   struct rp_shm_activity                  32 bytes  if RP_REC_F_ACTIVITY
 *   struct rp_shm_stack + nr * __u64        8 + 8*nr  if RP_REC_F_STACK
 *   payload                                 payload_len bytes
 *   zero padding to a multiple of 8
 *
 * len is total length including the header and padding, i.e. exactly
 * rp_record_size(flags, nr, payload_len).
 */
struct rp_shm_record {
	__u32 len;		/* RP_REC_BUSY | RP_REC_DISCARD | length */
	__u32 meta_id;		/* metadata (event) id */
	__u64 timestamp;	/* rp_clock ticks */
	__u32 tid;		/* OS thread id of the writer */
	__u32 seq;		/* writer's per-thread sequence number */
	__u16 flags;		/* RP_REC_F_* */
	__u16 payload_len;
	__u32 cpu;		/* CPU the writer ran on at reserve time */
};

#define RP_REC_BUSY		0x80000000u	/* reserved, not committed yet */
#define RP_REC_DISCARD		0x40000000u	/* committed as "skip me" */
#define RP_REC_LEN_MASK		0x3fffffffu

#define RP_REC_F_ACTIVITY	0x0001u	/* activity id + related activity id */
#define RP_REC_F_STACK		0x0002u	/* stack: count + instruction pointers */
#define RP_REC_F_THREAD		0x0004u	/* the thread the event is about */
#define RP_REC_F_KNOWN		(RP_REC_F_ACTIVITY | RP_REC_F_STACK | RP_REC_F_THREAD)

struct rp_shm_activity {
	__u8 activity_id[16];
	__u8 related_activity_id[16];
};

/*
 * The thread an event is about when that is not its writer (a sampler's
 * ThreadSample for each thread it sampled). The header's tid and seq stay
 * the writer's: readers count losses per writing thread.
 */
struct rp_shm_thread {
	__u32 tid;		/* OS thread id */
	/* since version 4: the process of that thread when the writer
	 * knows it is not its own (a BPF bridge writing for every process),
	 * else 0. A drainer in another process never believes it. */
	__u32 pid;
};

struct rp_shm_stack {
	__u32 nr;		/* number of ips that follow */
	__u32 __reserved;	/* 0; keeps ips 8-byte aligned */
	/* __u64 ips[nr] follows */
};

/* Where each optional part lives, from the start of the record. */
static inline __u32 rp_record_activity_off(__u16 flags)
{
	(void)flags;
	return (__u32)sizeof(struct rp_shm_record);
}

static inline __u32 rp_record_thread_off(__u16 flags)
{
	return rp_record_activity_off(flags) +
	       ((flags & RP_REC_F_ACTIVITY) ? (__u32)sizeof(struct rp_shm_activity) : 0);
}

static inline __u32 rp_record_stack_off(__u16 flags)
{
	return rp_record_thread_off(flags) +
	       ((flags & RP_REC_F_THREAD) ? (__u32)sizeof(struct rp_shm_thread) : 0);
}

/* 64-bit so that a hostile stack count cannot overflow the sum. */
static inline __u64 rp_record_payload_off(__u16 flags, __u32 stack_nr)
{
	__u64 off = rp_record_stack_off(flags);

	if (flags & RP_REC_F_STACK)
		off += sizeof(struct rp_shm_stack) + (__u64)stack_nr * sizeof(__u64);
	return off;
}

static inline __u64 rp_record_size(__u16 flags, __u32 stack_nr, __u16 payload_len)
{
	__u64 end = rp_record_payload_off(flags, stack_nr) + payload_len;

	return (end + RP_REC_ALIGN - 1) & ~(__u64)(RP_REC_ALIGN - 1);
}

/*
 * Layout pins.  If one of these fires, bump RP_ABI_VERSION and update
 * Documentation/ring-abi.md.
 *
 * RP__PIN(cond, msg) is a compile-time assertion that works wherever this
 * public header is included: _Static_assert in C11 and later, static_assert
 * in C++11 and later, and elsewhere (C99) a typedef of an array whose size
 * is -1 when cond is false, named after the line so that every pin declares
 * its own type; there the message only documents the pin.
 */
#if defined(__cplusplus) && __cplusplus >= 201103L
#define RP__PIN(cond, msg) static_assert(cond, msg)
#elif !defined(__cplusplus) && defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define RP__PIN(cond, msg) _Static_assert(cond, msg)
#else
#define RP__PIN(cond, msg) RP__PIN_AT(cond, __LINE__)
#define RP__PIN_AT(cond, line) RP__PIN_NAMED(cond, line)
#define RP__PIN_NAMED(cond, line) typedef char rp__abi_pin_##line[(cond) ? 1 : -1]
#endif
#define RP__OFF(t, f) __builtin_offsetof(struct t, f)
RP__PIN(sizeof(struct rp_shm_waiter) == 64, "waiter slot is one cache line");
RP__PIN(sizeof(struct rp_shm_session) == 8192, "session header is two pages");
RP__PIN(sizeof(struct rp_shm_session) % 4096 == 0, "session header is whole pages");
RP__PIN(RP__OFF(rp_shm_session, version) == 8, "session.version");
RP__PIN(RP__OFF(rp_shm_session, nr_rings) == 20, "session.nr_rings");
RP__PIN(RP__OFF(rp_shm_session, ring_data_size) == 24, "session.ring_data_size");
RP__PIN(RP__OFF(rp_shm_session, total_size) == 56, "session.total_size");
RP__PIN(RP__OFF(rp_shm_session, drainer_timeout_ns) == 0x40, "session.drainer_timeout_ns");
RP__PIN(RP__OFF(rp_shm_session, abort) == 0x80, "session.abort own line");
RP__PIN(RP__OFF(rp_shm_session, drainer_pid) == 0xc0, "session.drainer_* own line");
RP__PIN(RP__OFF(rp_shm_session, drainer_heartbeat_ns) == 0xc8, "session.heartbeat");
RP__PIN(RP__OFF(rp_shm_session, drainer_wake) == 0x100, "session.drainer_wake own line");
RP__PIN(RP__OFF(rp_shm_session, space_freed) == 0x140, "session.space_freed own line");
RP__PIN(RP__OFF(rp_shm_session, waiter_head) == 0x180, "session.waiter_head own line");
RP__PIN(RP__OFF(rp_shm_session, waiters) == 0x1000, "session.waiters on page 1");
RP__PIN(sizeof(struct rp_shm_ring) == RP_SHM_RING_HDR_SIZE, "ring header is one page");
RP__PIN(RP__OFF(rp_shm_ring, data_size) == 8, "ring.data_size");
RP__PIN(RP__OFF(rp_shm_ring, producer_pos) == 0x40, "ring.producer_pos own line");
RP__PIN(RP__OFF(rp_shm_ring, consumer_pos) == 0x80, "ring.consumer_pos own line");
RP__PIN(RP__OFF(rp_shm_ring, drops) == 0xc0, "ring.drops own line");
RP__PIN(RP__OFF(rp_shm_ring, corrupt) == 0x100, "ring.corrupt own line");
RP__PIN(RP_DROP_NR <= RP_DROP_SLOTS, "drop reasons fit the ABI slots");
RP__PIN(sizeof(struct rp_shm_counts) == 64, "counts header is one cache line");
RP__PIN(sizeof(struct rp_shm_ring_counts) == 64, "a ring's counters are one cache line");
RP__PIN(RP__OFF(rp_shm_counts, session_id) == 16, "counts.session_id");
RP__PIN(sizeof(struct rp_shm_record) == 32, "record header");
RP__PIN(RP__OFF(rp_shm_record, meta_id) == 4, "record.meta_id");
RP__PIN(RP__OFF(rp_shm_record, timestamp) == 8, "record.timestamp");
RP__PIN(RP__OFF(rp_shm_record, tid) == 16, "record.tid");
RP__PIN(RP__OFF(rp_shm_record, seq) == 20, "record.seq");
RP__PIN(RP__OFF(rp_shm_record, flags) == 24, "record.flags");
RP__PIN(RP__OFF(rp_shm_record, payload_len) == 26, "record.payload_len");
RP__PIN(RP__OFF(rp_shm_record, cpu) == 28, "record.cpu");
RP__PIN(sizeof(struct rp_shm_activity) == 32, "activity ids");
RP__PIN(sizeof(struct rp_shm_stack) == 8, "stack header");
RP__PIN(sizeof(struct rp_shm_thread) == 8, "thread block");
RP__PIN(sizeof(struct rp_shm_record) % RP_REC_ALIGN == 0, "record header keeps alignment");
RP__PIN(RP_REC_MAX_SIZE <= RP_REC_LEN_MASK, "max record fits the len word");
#undef RP__OFF
#undef RP__PIN
#undef RP__PIN_AT
#undef RP__PIN_NAMED

#endif /* RINGPIPE_ABI_H */
