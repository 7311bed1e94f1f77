// SPDX-License-Identifier: MIT
/*
 * Tests for the shared-memory rings (user/core/ring.c, user/core/shm.c) and
 * the ABI in include/ringpipe/abi.h.  Every failure message says what was
 * expected and what was seen.
 */
#include "criterion_compat.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "ring.h"

#define KIB 1024u

static struct rp_shm *mk_shm(uint32_t nr_rings, uint64_t data_size)
{
	struct rp_shm_opts o = { .sz = sizeof(o), .nr_rings = nr_rings, .data_size = data_size };
	struct rp_shm *s = rp_shm_create(&o);

	cr_assert_not_null(s, "rp_shm_create(%u rings, %" PRIu64 " bytes): expected a session, got NULL (%s)",
			   nr_rings, data_size, strerror(errno));
	return s;
}

static uint8_t pat(uint32_t seq, uint32_t i)
{
	return (uint8_t)(seq * 131u + i * 7u + 1u);
}

/* Write one committed record with a patterned payload; NULL if full. */
static struct rp_shm_record *put(struct rp_ring *r, uint32_t meta, uint32_t seq, uint16_t plen)
{
	struct rp_shm_record *rec = rp_ring_reserve(r, (uint32_t)rp_record_size(0, 0, plen));
	uint8_t *p;

	if (!rec)
		return NULL;
	rp_record_fill(rec, meta, 1000u + seq, 4242u, seq, 0, plen, r->index);
	p = rp_record_payload(rec, 0);
	for (uint32_t i = 0; i < plen; i++)
		p[i] = pat(seq, i);
	rp_ring_commit(rec);
	return rec;
}

static void check_payload(const struct rp_ring_item *it, uint32_t seq, uint16_t plen)
{
	const uint8_t *p = it->payload;

	cr_assert_eq(it->hdr.payload_len, plen, "payload_len: expected %u, seen %u", plen,
		     it->hdr.payload_len);
	for (uint32_t i = 0; i < plen; i++)
		cr_assert_eq(p[i], pat(seq, i), "payload byte %u of seq %u: expected 0x%02x, seen 0x%02x",
			     i, seq, pat(seq, i), p[i]);
}

static uint64_t prod_pos(struct rp_ring *r)
{
	return __atomic_load_n(&r->hdr->producer_pos, __ATOMIC_RELAXED);
}

static uint64_t cons_pos(struct rp_ring *r)
{
	return __atomic_load_n(&r->hdr->consumer_pos, __ATOMIC_RELAXED);
}

/* ---- basic producer / consumer ---------------------------------------- */

Test(ring, roundtrip)
{
	struct rp_shm *s = mk_shm(2, 64 * KIB);
	struct rp_ring *r = rp_shm_ring(s, 1);
	struct rp_ring_item it;
	int err;

	cr_assert_eq(rp_shm_nr_rings(s), 2, "nr_rings: expected 2, seen %u", rp_shm_nr_rings(s));
	cr_assert_eq(rp_ring_peek(r, &it), -EAGAIN, "empty ring: expected -EAGAIN");
	cr_assert_not_null(put(r, 7, 1, 32), "reserve in an empty ring failed");
	cr_assert_not_null(put(r, 8, 2, 5), "second reserve failed");
	cr_assert_eq(prod_pos(r), 64 + 40, "producer_pos: expected 104 (32+32 + 32+5 padded), seen %" PRIu64,
		     prod_pos(r));

	err = rp_ring_peek(r, &it);
	cr_assert_eq(err, 0, "peek: expected a record, got %d (%s)", err, rp_ring_last_error(r));
	cr_assert_eq(it.hdr.meta_id, 7, "meta_id: expected 7, seen %u", it.hdr.meta_id);
	cr_assert_eq(it.hdr.timestamp, 1001, "timestamp: expected 1001, seen %" PRIu64,
		     (uint64_t)it.hdr.timestamp);
	cr_assert_eq(it.hdr.tid, 4242, "tid: expected 4242, seen %u", it.hdr.tid);
	cr_assert_eq(it.hdr.seq, 1, "seq: expected 1, seen %u", it.hdr.seq);
	cr_assert_eq(it.hdr.cpu, 1, "cpu: expected 1, seen %u", it.hdr.cpu);
	cr_assert_eq(it.len, 64, "len: expected 64, seen %u", it.len);
	cr_assert_eq(it.pos, 0, "pos: expected 0, seen %" PRIu64, it.pos);
	cr_assert_null(it.stack, "no stack flag but stack pointer set");
	check_payload(&it, 1, 32);
	/* peek again without advancing: same record */
	cr_assert_eq(rp_ring_peek(r, &it), 0, "re-peek failed");
	cr_assert_eq(it.hdr.seq, 1, "re-peek: expected seq 1 again, seen %u", it.hdr.seq);
	rp_ring_consume(r);
	cr_assert_eq(cons_pos(r), 64, "consumer_pos after one record: expected 64, seen %" PRIu64,
		     cons_pos(r));

	cr_assert_eq(rp_ring_peek(r, &it), 0, "second record missing: %s", rp_ring_last_error(r));
	cr_assert_eq(it.hdr.meta_id, 8, "meta_id: expected 8, seen %u", it.hdr.meta_id);
	check_payload(&it, 2, 5);
	rp_ring_consume(r);
	cr_assert_eq(rp_ring_peek(r, &it), -EAGAIN, "drained ring: expected -EAGAIN");
	cr_assert_eq(cons_pos(r), prod_pos(r), "drained: consumer_pos %" PRIu64 " != producer_pos %" PRIu64,
		     cons_pos(r), prod_pos(r));
	/* the other ring saw nothing */
	cr_assert_eq(prod_pos(rp_shm_ring(s, 0)), 0, "ring 0 producer_pos moved");
	/* consumed space is zeroed again (the free-space invariant) */
	for (uint32_t i = 0; i < 104; i++)
		cr_assert_eq(r->data[i], 0, "byte %u of consumed space: expected 0, seen 0x%02x", i,
			     r->data[i]);
	rp_shm_destroy(s);
}

Test(ring, optional_parts_layout)
{
	struct rp_shm *s = mk_shm(1, 64 * KIB);
	struct rp_ring *r = rp_shm_ring(s, 0);
	uint16_t flags = RP_REC_F_ACTIVITY | RP_REC_F_STACK;
	uint64_t size = rp_record_size(flags, 3, 11);
	struct rp_shm_record *rec;
	struct rp_shm_activity *act;
	struct rp_shm_stack *st;
	struct rp_ring_item it;
	uint64_t *ips;

	cr_assert_eq(size, 32 + 32 + 8 + 24 + 16, "record size: expected 112, seen %" PRIu64, size);
	cr_assert_eq(rp_record_stack_off(flags), 64, "stack offset: expected 64, seen %u",
		     rp_record_stack_off(flags));
	cr_assert_eq(rp_record_payload_off(flags, 3), 96, "payload offset: expected 96, seen %" PRIu64,
		     (uint64_t)rp_record_payload_off(flags, 3));
	cr_assert_eq(rp_record_payload_off(RP_REC_F_STACK, 0xffffffffu), 32 + 8 + 8ull * 0xffffffffu,
		     "payload offset must not overflow for huge stack counts");

	rec = rp_ring_reserve(r, (uint32_t)size);
	cr_assert_not_null(rec, "reserve %" PRIu64 " failed", size);
	rp_record_fill(rec, 3, 99, 1, 0, flags, 11, 0);
	act = (struct rp_shm_activity *)((char *)rec + rp_record_activity_off(flags));
	memset(act->activity_id, 0xaa, 16);
	memset(act->related_activity_id, 0xbb, 16);
	st = (struct rp_shm_stack *)((char *)rec + rp_record_stack_off(flags));
	st->nr = 3;
	st->__reserved = 0;
	ips = (uint64_t *)(st + 1);
	ips[0] = 0x1111;
	ips[1] = 0x2222;
	ips[2] = 0x3333;
	memcpy(rp_record_payload(rec, 3), "hello world", 11);
	rp_ring_commit(rec);

	cr_assert_eq(rp_ring_peek(r, &it), 0, "peek failed: %s", rp_ring_last_error(r));
	cr_assert_not_null(it.activity, "activity flag set but no activity pointer");
	cr_assert_eq(it.activity->related_activity_id[15], 0xbb, "related activity byte: expected 0xbb, seen 0x%02x",
		     it.activity->related_activity_id[15]);
	cr_assert_eq(it.stack_nr, 3, "stack_nr: expected 3, seen %u", it.stack_nr);
	cr_assert_eq(it.stack[2], 0x3333, "ip[2]: expected 0x3333, seen 0x%" PRIx64, it.stack[2]);
	cr_assert_eq(memcmp(it.payload, "hello world", 11), 0, "payload differs");
	cr_assert_eq((const char *)it.payload - (const char *)it.rec, 96, "payload offset in item: expected 96");
	rp_shm_destroy(s);
}

/* ABI 2: the thread block sits between the activity ids and the stack. */
Test(ring, thread_block_layout)
{
	struct rp_shm *s = mk_shm(1, 64 * KIB);
	struct rp_ring *r = rp_shm_ring(s, 0);
	uint16_t all = RP_REC_F_ACTIVITY | RP_REC_F_THREAD | RP_REC_F_STACK;
	uint16_t flags = RP_REC_F_THREAD;
	struct rp_shm_record *rec;
	struct rp_shm_thread th;
	struct rp_ring_item it;

	cr_assert_eq(rp_record_thread_off(all), 64, "thread block after the activity ids");
	cr_assert_eq(rp_record_stack_off(all), 72, "stack after the thread block");
	cr_assert_eq(rp_record_size(all, 3, 11), 120, "32 + 32 + 8 + 8 + 24 + 11, padded to 8");
	cr_assert_eq(rp_record_thread_off(flags), 32, "thread block right after the header");
	cr_assert_eq(rp_record_payload_off(flags, 0), 40, "payload after the thread block");

	rec = rp_ring_reserve(r, (uint32_t)rp_record_size(flags, 0, 5));
	cr_assert_not_null(rec);
	rp_record_fill(rec, 3, 99, 1, 7, flags, 5, 0);
	th = (struct rp_shm_thread){ .tid = 4242 };
	memcpy((char *)rec + rp_record_thread_off(flags), &th, sizeof(th));
	memcpy(rp_record_payload(rec, 0), "about", 5);
	rp_ring_commit(rec);
	cr_assert_eq(rp_ring_peek(r, &it), 0, "peek failed: %s", rp_ring_last_error(r));
	cr_assert_eq(it.hdr.flags, RP_REC_F_THREAD);
	cr_assert_eq(it.hdr.tid, 1, "the header keeps the writer's tid");
	memcpy(&th, (const char *)it.rec + rp_record_thread_off(it.hdr.flags), sizeof(th));
	cr_assert_eq(th.tid, 4242, "thread block: expected 4242, seen %u", th.tid);
	cr_assert_eq(memcmp(it.payload, "about", 5), 0, "payload differs");
	rp_shm_destroy(s);
}

Test(ring, discard_is_skipped)
{
	struct rp_shm *s = mk_shm(1, 64 * KIB);
	struct rp_ring *r = rp_shm_ring(s, 0);
	struct rp_shm_record *rec;
	struct rp_ring_item it;

	rec = rp_ring_reserve(r, 64);
	cr_assert_not_null(rec, "reserve failed");
	rp_ring_discard(rec);
	put(r, 1, 5, 8);
	cr_assert_eq(rp_ring_peek(r, &it), 0, "peek after a discard: %s", rp_ring_last_error(r));
	cr_assert_eq(it.hdr.seq, 5, "expected the committed record (seq 5) after the discard, seen seq %u",
		     it.hdr.seq);
	cr_assert_eq(it.pos, 64, "record position: expected 64, seen %" PRIu64, it.pos);
	rp_ring_consume(r);
	cr_assert_eq(cons_pos(r), 64 + 40, "consumer_pos: expected 104, seen %" PRIu64, cons_pos(r));
	rp_shm_destroy(s);
}

/* A record that starts near the end of the data area continues in the
 * mirror: contiguous in memory, and the tail lands at the area's start. */
Test(ring, mirror_keeps_records_contiguous)
{
	const uint64_t size = 16 * KIB;
	struct rp_shm *s = mk_shm(1, size);
	struct rp_ring *r = rp_shm_ring(s, 0);
	struct rp_shm_record *rec;
	struct rp_ring_item it;
	uint32_t seq = 0;
	uint64_t off;

	/* 1000-byte payload records (1032 B): 15 of them end at 15480 */
	while (prod_pos(r) + 1032 <= size - 200) {
		cr_assert_not_null(put(r, 1, seq++, 1000), "filling reserve failed at %" PRIu64, prod_pos(r));
		cr_assert_eq(rp_ring_peek(r, &it), 0, "peek: %s", rp_ring_last_error(r));
		rp_ring_consume(r);
	}
	off = prod_pos(r);
	rec = put(r, 2, seq, 1000);
	cr_assert_not_null(rec, "reserve of the wrapping record failed");
	cr_assert_eq((unsigned char *)rec, r->data + off, "record address: expected data+%" PRIu64, off);
	cr_assert_gt(off + 1032, size, "test setup: record at %" PRIu64 " should cross the end %" PRIu64,
		     off, size);
	/* bytes past the end are the same physical bytes as the start */
	for (uint64_t i = size; i < off + 1032; i++)
		cr_assert_eq(r->data[i], r->data[i - size],
			     "mirror byte %" PRIu64 ": expected 0x%02x (data[%" PRIu64 "]), seen 0x%02x",
			     i, r->data[i - size], i - size, r->data[i]);
	cr_assert_eq(r->data[0], pat(seq, (uint32_t)(size - off - 32)),
		     "data[0] should hold payload byte %" PRIu64 " of the wrapping record", size - off - 32);
	cr_assert_eq(rp_ring_peek(r, &it), 0, "peek wrapping record: %s", rp_ring_last_error(r));
	cr_assert_eq(it.hdr.meta_id, 2, "meta_id: expected 2, seen %u", it.hdr.meta_id);
	check_payload(&it, seq, 1000);
	rp_ring_consume(r);
	/* and the next one starts in the right place, past the wrap */
	cr_assert_not_null(put(r, 3, seq + 1, 10), "reserve after wrap failed");
	cr_assert_eq(rp_ring_peek(r, &it), 0, "peek after wrap: %s", rp_ring_last_error(r));
	cr_assert_eq((const unsigned char *)it.rec, r->data + ((off + 1032) & (size - 1)),
		     "post-wrap record not at offset %" PRIu64, (off + 1032) & (size - 1));
	check_payload(&it, seq + 1, 10);
	rp_shm_destroy(s);
}

Test(ring, full_returns_null_and_never_overwrites)
{
	const uint64_t size = 8 * KIB;
	struct rp_shm *s = mk_shm(1, size);
	struct rp_ring *r = rp_shm_ring(s, 0);
	struct rp_ring_item it;
	uint32_t n = 0;
	uint64_t before;

	while (put(r, 1, n, 100))	/* 136-byte records */
		n++;
	cr_assert_eq(n, size / 136, "records that fit: expected %" PRIu64 ", seen %u", size / 136, n);
	before = prod_pos(r);
	cr_assert_null(put(r, 1, n, 100), "reserve on a full ring: expected NULL");
	cr_assert_null(rp_ring_reserve(r, 64), "64-byte reserve with %" PRIu64 " free: expected NULL",
		       size - before);
	cr_assert_not_null(rp_ring_reserve(r, 32), "32-byte reserve should fit the %" PRIu64 " free bytes",
			   size - before);
	rp_ring_count_drop(r, RP_DROP_FULL);
	rp_ring_count_drop(r, RP_DROP_FULL);
	cr_assert_eq(rp_ring_drops(r, RP_DROP_FULL), 2, "drop counter: expected 2, seen %" PRIu64,
		     rp_ring_drops(r, RP_DROP_FULL));
	cr_assert_eq(rp_ring_drops(r, RP_DROP_TOO_BIG), 0, "too_big counter moved");
	/* every record is intact */
	for (uint32_t i = 0; i < n; i++) {
		cr_assert_eq(rp_ring_peek(r, &it), 0, "record %u: %s", i, rp_ring_last_error(r));
		cr_assert_eq(it.hdr.seq, i, "seq: expected %u, seen %u", i, it.hdr.seq);
		check_payload(&it, i, 100);
		rp_ring_advance(r);
	}
	/* the 32-byte reservation is still BUSY: it blocks, nothing is lost */
	cr_assert_eq(rp_ring_peek(r, &it), -EAGAIN, "BUSY head: expected -EAGAIN");
	cr_assert_null(put(r, 1, 0, 100), "space must not be reusable before release");
	rp_ring_release(r);
	cr_assert_not_null(put(r, 1, 0, 100), "after release the space should be reusable");
	rp_shm_destroy(s);
}

Test(ring, too_big_and_too_small)
{
	struct rp_shm *s = mk_shm(1, 8 * KIB);
	struct rp_ring *r = rp_shm_ring(s, 0);

	cr_assert_eq(r->max_record, 2048, "max record for 8 KiB: expected 2048, seen %u", r->max_record);
	cr_assert_eq(rp_shm_header(s)->max_record, 2048, "header max record: expected 2048");
	cr_assert_null(rp_ring_reserve(r, 2049), "2049 bytes > max: expected NULL");
	cr_assert_null(rp_ring_reserve(r, 0xffffffffu), "4 GiB: expected NULL (no overflow)");
	cr_assert_null(rp_ring_reserve(r, 31), "smaller than a header: expected NULL");
	cr_assert_eq(prod_pos(r), 0, "rejected reserves must not move producer_pos");
	cr_assert_not_null(rp_ring_reserve(r, 2048), "exactly max: expected a record");
	rp_shm_destroy(s);

	s = mk_shm(1, 1u << 20);
	cr_assert_eq(rp_shm_ring(s, 0)->max_record, RP_REC_MAX_SIZE,
		     "max record for 1 MiB: expected the 64 KiB cap, seen %u", rp_shm_ring(s, 0)->max_record);
	rp_shm_destroy(s);
}

static int drain_count(void *ctx, struct rp_ring *r, const struct rp_ring_item *it)
{
	uint32_t *expect = ctx;

	if (it->hdr.seq != *expect)
		return -1;
	(*expect)++;
	return 0;
}

Test(ring, drain_callback_and_budget)
{
	struct rp_shm *s = mk_shm(1, 64 * KIB);
	struct rp_ring *r = rp_shm_ring(s, 0);
	uint32_t next = 0;
	long n;

	for (uint32_t i = 0; i < 100; i++)
		cr_assert_not_null(put(r, 1, i, 16), "put %u", i);
	n = rp_ring_drain(r, drain_count, &next, 30);
	cr_assert_eq(n, 30, "drain with max 30: expected 30, seen %ld", n);
	cr_assert_eq(cons_pos(r), 30 * 48, "drain publishes: consumer_pos expected %u, seen %" PRIu64,
		     30 * 48, cons_pos(r));
	n = rp_ring_drain(r, drain_count, &next, 1000);
	cr_assert_eq(n, 70, "second drain: expected 70, seen %ld", n);
	cr_assert_eq(next, 100, "callback saw %u records in order, expected 100", next);
	rp_shm_destroy(s);
}

Test(ring, current_cpu_matches_sched_getcpu)
{
	struct rp_shm *s = mk_shm(3, 16 * KIB);
	cpu_set_t orig, one;
	int tested = 0;

	cr_assert_eq(sched_getaffinity(0, sizeof(orig), &orig), 0, "sched_getaffinity");
	for (int c = 0; c < CPU_SETSIZE && tested < 8; c++) {
		unsigned int cpu;
		struct rp_ring *r;

		if (!CPU_ISSET(c, &orig))
			continue;
		CPU_ZERO(&one);
		CPU_SET(c, &one);
		cr_assert_eq(sched_setaffinity(0, sizeof(one), &one), 0, "pin to cpu %d", c);
		sched_yield();
		cpu = rp_ring_current_cpu();
		cr_assert_eq(cpu, (unsigned int)c, "pinned to cpu %d, rp_ring_current_cpu() says %u", c, cpu);
		r = rp_shm_current_ring(s);
		cr_assert_eq(r->index, (unsigned int)c % 3, "cpu %d: expected ring %d, got ring %u", c,
			     c % 3, r->index);
		tested++;
	}
	sched_setaffinity(0, sizeof(orig), &orig);
	cr_assert_gt(tested, 0, "no CPU to test on");
#ifdef RP_HAVE_RSEQ
	cr_log_info("rseq registered: %s (__rseq_size %u)", __rseq_size >= 8 ? "yes" : "no", __rseq_size);
#endif
	rp_shm_destroy(s);
}

/* ---- session create / destroy ----------------------------------------- */

Test(shm, create_rejects_bad_options)
{
	struct rp_shm_opts o = { .sz = sizeof(o), .nr_rings = 1, .data_size = 12 * KIB };
	struct {
		struct rp_shm_opts o;
		uint64_t future;
	} big = { .o = { .sz = sizeof(big), .nr_rings = 1 }, .future = 1 };

	errno = 0;
	cr_assert_null(rp_shm_create(&o), "data size 12 KiB (not a power of two): expected NULL");
	cr_assert_eq(errno, EINVAL, "expected EINVAL, seen %d", errno);
	o.data_size = 2048;
	cr_assert_null(rp_shm_create(&o), "data size 2 KiB (< page): expected NULL");
	o.data_size = 2 * RP_SHM_MAX_DATA_SIZE;
	cr_assert_null(rp_shm_create(&o), "data size 2 GiB: expected NULL");
	o.data_size = 0;
	o.nr_rings = RP_SHM_MAX_RINGS + 1;
	cr_assert_null(rp_shm_create(&o), "%u rings: expected NULL", RP_SHM_MAX_RINGS + 1);
	o.nr_rings = 1;
	o.mode = 2;
	errno = 0;
	cr_assert_null(rp_shm_create(&o), "mode 2: unknown modes must be rejected, not coerced");
	cr_assert_eq(errno, EINVAL, "mode 2: expected EINVAL, seen %d", errno);
	errno = 0;
	cr_assert_null(rp_shm_create(&big.o), "opts with unknown nonzero trailing bytes: expected NULL");
	cr_assert_eq(errno, EINVAL, "expected EINVAL, seen %d", errno);
	big.future = 0;
	struct rp_shm *s = rp_shm_create(&big.o);
	cr_assert_not_null(s, "opts with zero trailing bytes should be accepted: %s", strerror(errno));
	rp_shm_destroy(s);
	rp_shm_destroy(NULL);	/* accepts NULL */
}

Test(shm, defaults_and_header)
{
	struct rp_shm_opts o = { .sz = sizeof(o), .mode = RP_SHM_MODE_BLOCK, .session_id = 77 };
	struct rp_shm *s = rp_shm_create(&o);
	struct rp_shm_session *h;
	struct stat st;
	int seals;

	cr_assert_not_null(s, "create with defaults: %s", strerror(errno));
	h = rp_shm_header(s);
	cr_assert_eq(h->magic, RP_ABI_MAGIC, "magic");
	cr_assert_eq(h->version, RP_ABI_VERSION, "version");
	cr_assert_eq(h->nr_rings, rp_shm_possible_cpus(), "default rings: expected %u possible CPUs, seen %u",
		     rp_shm_possible_cpus(), h->nr_rings);
	cr_assert_eq(h->ring_data_size, RP_SHM_DEFAULT_DATA_SIZE, "default data size");
	cr_assert_eq(h->flags & RP_SHM_F_MODE_MASK, RP_SHM_MODE_BLOCK, "mode: expected Block");
	cr_assert_eq(h->session_id, 77, "session id: expected 77, seen %" PRIu64, (uint64_t)h->session_id);
	cr_assert_eq(fstat(rp_shm_fd(s), &st), 0, "fstat");
	cr_assert_eq((uint64_t)st.st_size, h->total_size, "fd size %lld != header total %" PRIu64,
		     (long long)st.st_size, (uint64_t)h->total_size);
	cr_assert_eq((uint64_t)st.st_size, 8192 + (uint64_t)h->nr_rings * (4096 + RP_SHM_DEFAULT_DATA_SIZE),
		     "file layout size");
	seals = fcntl(rp_shm_fd(s), F_GET_SEALS);
	cr_assert(seals & F_SEAL_SHRINK, "memfd must be sealed against shrinking (seals 0x%x)", seals);
	for (uint32_t i = 0; i < h->nr_rings; i++) {
		struct rp_ring *r = rp_shm_ring(s, i);

		cr_assert_eq(r->hdr->cpu, i, "ring %u cpu field: seen %u", i, r->hdr->cpu);
		/* header page and data are adjacent in the mapping */
		cr_assert_eq((unsigned char *)r->hdr + 4096, r->data, "ring %u data not right after header", i);
		cr_assert_eq(r->hdr->data_offset, 8192 + (uint64_t)i * (4096 + RP_SHM_DEFAULT_DATA_SIZE) + 4096,
			     "ring %u data offset", i);
	}
	cr_assert_null(rp_shm_ring(s, h->nr_rings), "ring index out of range: expected NULL");
	rp_shm_destroy(s);
}

/* A second mapping of the same fd in this process sees the same bytes. */
Test(shm, open_fd_shares_memory)
{
	struct rp_shm *s = mk_shm(2, 16 * KIB), *v;
	char err[256] = "";
	struct rp_shm_open_opts oo = { .sz = sizeof(oo), .errbuf = err, .errbuf_len = sizeof(err) };
	struct rp_ring_item it;

	v = rp_shm_open_fd(rp_shm_fd(s), &oo);
	cr_assert_not_null(v, "open_fd of a fresh session failed: %s (%s)", err, strerror(errno));
	cr_assert_neq(rp_shm_fd(v), rp_shm_fd(s), "open_fd must dup, not take, the fd");
	for (uint32_t i = 0; i < 40; i++)
		cr_assert_not_null(put(rp_shm_ring(s, 1), 9, i, 300), "put %u", i);
	for (uint32_t i = 0; i < 40; i++) {
		cr_assert_eq(rp_ring_peek(rp_shm_ring(v, 1), &it), 0, "reader record %u: %s", i,
			     rp_ring_last_error(rp_shm_ring(v, 1)));
		check_payload(&it, i, 300);
		rp_ring_consume(rp_shm_ring(v, 1));
	}
	cr_assert_eq(cons_pos(rp_shm_ring(s, 1)), 40 * 336, "creator sees the reader's consumer_pos");
	rp_shm_destroy(v);
	rp_shm_destroy(s);
}

/* ---- validated mapping: hostile fds ------------------------------------ */

/* Copy a valid session into a fresh memfd of file_size bytes, with the
 * session header replaced by *h, sealed unless told otherwise. */
static int craft_fd(const struct rp_shm *src, const struct rp_shm_session *h, uint64_t file_size,
		    bool seal)
{
	int fd = memfd_create("crafted", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	static unsigned char buf[64 * KIB];
	uint64_t src_size = rp_shm_header(src)->total_size;

	cr_assert_geq(fd, 0, "memfd_create");
	cr_assert_eq(ftruncate(fd, (off_t)file_size), 0, "ftruncate");
	for (uint64_t off = 0; off < src_size && off < file_size; off += sizeof(buf)) {
		uint64_t n = src_size - off < sizeof(buf) ? src_size - off : sizeof(buf);

		if (n > file_size - off)
			n = file_size - off;
		cr_assert_eq(pread(rp_shm_fd(src), buf, n, (off_t)off), (ssize_t)n, "pread");
		cr_assert_eq(pwrite(fd, buf, n, (off_t)off), (ssize_t)n, "pwrite");
	}
	cr_assert_eq(pwrite(fd, h, file_size < sizeof(*h) ? file_size : sizeof(*h), 0),
		     (ssize_t)(file_size < sizeof(*h) ? file_size : sizeof(*h)), "pwrite header");
	if (seal)
		cr_assert_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0, "seal");
	return fd;
}

static void expect_refused(const struct rp_shm *src, const struct rp_shm_session *h, uint64_t file_size,
			   bool seal, int want_errno, const char *want_text, const char *what)
{
	char err[256] = "";
	struct rp_shm_open_opts oo = { .sz = sizeof(oo), .errbuf = err, .errbuf_len = sizeof(err) };
	int fd = craft_fd(src, h, file_size, seal);
	struct rp_shm *v;

	errno = 0;
	v = rp_shm_open_fd(fd, &oo);
	cr_assert_null(v, "%s: expected the fd to be refused, it was mapped", what);
	cr_assert_eq(errno, want_errno, "%s: expected errno %d (%s), seen %d (%s); message: %s", what,
		     want_errno, strerror(want_errno), errno, strerror(errno), err);
	cr_assert_not_null(strstr(err, want_text), "%s: message should mention '%s', seen '%s'", what,
			   want_text, err);
	close(fd);
}

Test(shm, open_fd_rejects_hostile_headers)
{
	struct rp_shm *s = mk_shm(2, 16 * KIB);
	struct rp_shm_session good = *rp_shm_header(s), h;
	uint64_t total = good.total_size;
	char err[256] = "";
	struct rp_shm_open_opts oo = { .sz = sizeof(oo), .errbuf = err, .errbuf_len = sizeof(err) };
	struct rp_shm *v;
	int fd;

	/* the untouched copy is accepted: the checks below test one thing each */
	fd = craft_fd(s, &good, total, true);
	v = rp_shm_open_fd(fd, &oo);
	cr_assert_not_null(v, "a faithful copy should be accepted: %s", err);
	rp_shm_destroy(v);
	close(fd);

	expect_refused(s, &good, total - 4096, true, EBADMSG, "truncated", "file one page short");
	expect_refused(s, &good, 100, true, EBADMSG, "truncated", "file shorter than the header");
	expect_refused(s, &good, total + 4096, true, EBADMSG, "oversized", "file one page long");
	expect_refused(s, &good, total, false, EPERM, "F_SEAL_SHRINK", "unsealed fd");

	h = good; h.magic ^= 1;
	expect_refused(s, &h, total, true, EPROTO, "magic", "wrong magic");
	h = good; h.version = RP_ABI_VERSION + 1;
	expect_refused(s, &h, total, true, EPROTONOSUPPORT, "version", "wrong version");
	h = good; h.nr_rings = 0;
	expect_refused(s, &h, total, true, EBADMSG, "ring count", "zero rings");
	h = good; h.nr_rings = 0x7fffffff;
	expect_refused(s, &h, total, true, EBADMSG, "ring count", "absurd ring count");
	h = good; h.ring_data_size = 12 * KIB;
	expect_refused(s, &h, total, true, EBADMSG, "power of two", "data size not a power of two");
	h = good; h.ring_data_size = 1ull << 62;
	expect_refused(s, &h, total, true, EBADMSG, "data size", "absurd data size");
	h = good; h.nr_rings = 3;
	expect_refused(s, &h, total, true, EBADMSG, "total size", "ring count disagrees with total size");
	h = good; h.nr_rings = 3; h.total_size = total + 4096 + 16 * KIB;
	expect_refused(s, &h, total, true, EBADMSG, "truncated", "consistent header, fd too small");
	h = good; h.max_record = 1u << 20;
	expect_refused(s, &h, total, true, EBADMSG, "max record", "max record too large");
	h = good; h.hdr_size = 4096;
	expect_refused(s, &h, total, true, EBADMSG, "header sizes", "wrong header size");
	h = good; h.flags = 2;
	expect_refused(s, &h, total, true, EBADMSG, "mode", "unknown mode");
	h = good; h.page_size = 65536;
	expect_refused(s, &h, total, true, EBADMSG, "page size", "foreign page size");

	/* a ring header inside the file that disagrees */
	rp_shm_ring(s, 1)->hdr->cpu = 5;
	expect_refused(s, &good, total, true, EBADMSG, "ring 1 header", "ring header cpu mismatch");
	rp_shm_ring(s, 1)->hdr->cpu = 1;
	rp_shm_ring(s, 0)->hdr->data_size = 1ull << 40;
	expect_refused(s, &good, total, true, EBADMSG, "ring 0 header", "ring header data size mismatch");

	/* not a regular file */
	{
		int p[2];

		cr_assert_eq(pipe(p), 0, "pipe");
		errno = 0;
		cr_assert_null(rp_shm_open_fd(p[0], &oo), "a pipe: expected refusal");
		cr_assert_eq(errno, EBADF, "a pipe: expected EBADF, seen %d", errno);
		close(p[0]);
		close(p[1]);
	}
	rp_shm_destroy(s);
}

/* ---- out-of-process reader over SCM_RIGHTS ---------------------------- */

#define OOP_RECORDS 100000u

static int send_fd(int sock, int fd)
{
	char byte = 'F';
	struct iovec iov = { .iov_base = &byte, .iov_len = 1 };
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			      .msg_controllen = sizeof(u.buf) };
	struct cmsghdr *c;

	memset(u.buf, 0, sizeof(u.buf));
	c = CMSG_FIRSTHDR(&msg);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	return sendmsg(sock, &msg, 0) == 1 ? 0 : -1;
}

static int recv_fd(int sock)
{
	char byte;
	struct iovec iov = { .iov_base = &byte, .iov_len = 1 };
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			      .msg_controllen = sizeof(u.buf) };
	struct cmsghdr *c;
	int fd;

	if (recvmsg(sock, &msg, MSG_CMSG_CLOEXEC) != 1)
		return -1;
	c = CMSG_FIRSTHDR(&msg);
	if (!c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
		return -1;
	memcpy(&fd, CMSG_DATA(c), sizeof(int));
	return fd;
}

static uint16_t oop_len(uint32_t seq)
{
	return (uint16_t)(1 + (seq * 37u) % 700u);
}

/* Child: map what it was sent, drain OOP_RECORDS, check every byte.
 * Reports through the socket; never uses Criterion. */
static void oop_child(int sock)
{
	char err[256] = "", msg[512];
	struct rp_shm_open_opts oo = { .sz = sizeof(oo), .errbuf = err, .errbuf_len = sizeof(err) };
	uint64_t deadline = rp_clock_mono_ns() + 20000000000ull;
	struct rp_ring_item it;
	struct rp_shm *s;
	uint32_t next = 0;
	int fd, rc;

	fd = recv_fd(sock);
	if (fd < 0) {
		snprintf(msg, sizeof(msg), "child: no fd received over SCM_RIGHTS");
		goto out_fail;
	}
	s = rp_shm_open_fd(fd, &oo);
	close(fd);
	if (!s) {
		snprintf(msg, sizeof(msg), "child: rp_shm_open_fd refused the session: %s", err);
		goto out_fail;
	}
	while (next < OOP_RECORDS) {
		struct rp_ring *r = rp_shm_ring(s, 1);

		rc = rp_ring_peek(r, &it);
		if (rc == -EAGAIN) {
			rp_ring_release(r);
			if (rp_clock_mono_ns() > deadline) {
				snprintf(msg, sizeof(msg), "child: timed out after %u records", next);
				goto out_fail;
			}
			sched_yield();
			continue;
		}
		if (rc) {
			snprintf(msg, sizeof(msg), "child: peek %d at record %u: %s", rc, next,
				 rp_ring_last_error(r));
			goto out_fail;
		}
		if (it.hdr.seq != next || it.hdr.meta_id != 77 || it.hdr.payload_len != oop_len(next)) {
			snprintf(msg, sizeof(msg), "child: record %u: expected seq %u meta 77 len %u, seen "
				 "seq %u meta %u len %u", next, next, oop_len(next), it.hdr.seq,
				 it.hdr.meta_id, it.hdr.payload_len);
			goto out_fail;
		}
		for (uint32_t i = 0; i < it.hdr.payload_len; i++) {
			uint8_t b = ((const uint8_t *)it.payload)[i];

			if (b != pat(next, i)) {
				snprintf(msg, sizeof(msg), "child: record %u byte %u: expected 0x%02x, seen 0x%02x",
					 next, i, pat(next, i), b);
				goto out_fail;
			}
		}
		rp_ring_advance(r);
		if ((++next & 63) == 0)
			rp_ring_release(r);
	}
	rp_ring_release(rp_shm_ring(s, 1));
	snprintf(msg, sizeof(msg), "ok %u", next);
	if (write(sock, msg, strlen(msg)) < 0)
		_exit(3);
	rp_shm_destroy(s);
	_exit(0);

out_fail:
	if (write(sock, msg, strlen(msg)) < 0)
		_exit(3);
	_exit(1);
}

Test(oop, reader_over_scm_rights_sees_every_byte, .timeout = 60)
{
	struct rp_shm *s = mk_shm(2, 64 * KIB);
	struct rp_ring *r = rp_shm_ring(s, 1);
	char msg[512] = "";
	uint64_t full_spins = 0;
	int sv[2], status;
	ssize_t n;
	pid_t pid;

	cr_assert_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0, "socketpair");
	pid = fork();
	cr_assert_geq(pid, 0, "fork");
	if (pid == 0) {
		close(sv[0]);
		oop_child(sv[1]);
	}
	close(sv[1]);
	cr_assert_eq(send_fd(sv[0], rp_shm_fd(s)), 0, "sendmsg SCM_RIGHTS: %s", strerror(errno));
	for (uint32_t seq = 0; seq < OOP_RECORDS; seq++) {
		while (!put(r, 77, seq, oop_len(seq))) {
			full_spins++;
			if (waitpid(pid, &status, WNOHANG) == pid) {
				n = read(sv[0], msg, sizeof(msg) - 1);
				cr_assert_fail("child exited early (status 0x%x) at seq %u: %s", status, seq,
					       n > 0 ? msg : "(no message)");
			}
			sched_yield();
		}
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid, "waitpid");
	n = read(sv[0], msg, sizeof(msg) - 1);
	msg[n > 0 ? n : 0] = '\0';
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "child reader: expected exit 0, seen status 0x%x: %s", status, msg);
	cr_assert_eq(cons_pos(r), prod_pos(r), "child drained everything: consumer_pos %" PRIu64
		     " producer_pos %" PRIu64, cons_pos(r), prod_pos(r));
	cr_assert_eq(rp_ring_corrupt_count(r), 0, "no corruption expected, counter says %" PRIu64,
		     rp_ring_corrupt_count(r));
	cr_log_info("oop: %u records, producer waited on a full ring %" PRIu64 " times", OOP_RECORDS,
		    full_spins);
	close(sv[0]);
	rp_shm_destroy(s);
}

/* ---- multi-producer: exact accounting --------------------------------- */

#define MP_THREADS 4
#define MP_PER_THREAD 200000u
#define MP_PAYLOAD 16

struct mp_state {
	struct rp_shm *s;
	int producers_done;
	uint64_t dropped[MP_THREADS];
	uint64_t discarded[MP_THREADS];
	uint64_t seen[MP_THREADS];
	uint8_t *seen_map[MP_THREADS];
	int64_t last_seq[64][MP_THREADS];	/* per ring, per thread */
	char fail[256];
	int failed;
};

struct mp_arg {
	struct mp_state *st;
	uint32_t id;
};

static void *mp_producer(void *p)
{
	struct mp_arg *a = p;
	struct mp_state *st = a->st;
	uint32_t rsize = (uint32_t)rp_record_size(0, 0, MP_PAYLOAD);

	for (uint32_t seq = 0; seq < MP_PER_THREAD; seq++) {
		struct rp_ring *r = rp_shm_current_ring(st->s);
		struct rp_shm_record *rec = rp_ring_reserve(r, rsize);
		uint64_t v[2] = { seq, ~(uint64_t)seq ^ a->id };

		if (!rec) {
			rp_ring_count_drop(r, RP_DROP_FULL);
			st->dropped[a->id]++;
			/* back off so that the consumer (which may share a CPU
			 * with us) gets to run and the ring cycles many times */
			sched_yield();
			continue;
		}
		rp_record_fill(rec, 100 + a->id, rp_clock_now(), a->id, seq, 0, MP_PAYLOAD,
			       rp_ring_current_cpu());
		if (seq % 61 == 60) {
			rp_ring_discard(rec);
			st->discarded[a->id]++;
			continue;
		}
		memcpy(rp_record_payload(rec, 0), v, sizeof(v));
		rp_ring_commit(rec);
	}
	return NULL;
}

static int mp_on_record(void *ctx, struct rp_ring *r, const struct rp_ring_item *it)
{
	struct mp_state *st = ctx;
	uint32_t t = it->hdr.tid, seq = it->hdr.seq;
	uint64_t v[2];

	if (st->failed)
		return 0;
	if (t >= MP_THREADS || seq >= MP_PER_THREAD || it->hdr.meta_id != 100 + t ||
	    it->hdr.payload_len != MP_PAYLOAD) {
		snprintf(st->fail, sizeof(st->fail), "ring %u: bad record tid %u seq %u meta %u len %u",
			 r->index, t, seq, it->hdr.meta_id, it->hdr.payload_len);
		st->failed = 1;
		return 0;
	}
	memcpy(v, it->payload, sizeof(v));
	if (v[0] != seq || v[1] != (~(uint64_t)seq ^ t)) {
		snprintf(st->fail, sizeof(st->fail), "tid %u seq %u: payload mismatch", t, seq);
		st->failed = 1;
		return 0;
	}
	if (st->seen_map[t][seq]) {
		snprintf(st->fail, sizeof(st->fail), "tid %u seq %u seen twice", t, seq);
		st->failed = 1;
		return 0;
	}
	if ((int64_t)seq <= st->last_seq[r->index][t]) {
		snprintf(st->fail, sizeof(st->fail), "ring %u tid %u: seq %u after %" PRId64 " (not increasing)",
			 r->index, t, seq, st->last_seq[r->index][t]);
		st->failed = 1;
		return 0;
	}
	st->last_seq[r->index][t] = seq;
	st->seen_map[t][seq] = 1;
	st->seen[t]++;
	return 0;
}

static void *mp_consumer(void *p)
{
	struct mp_state *st = p;
	uint32_t nr = rp_shm_nr_rings(st->s);
	int done;

	do {
		/* pairs with the store_release in the test body after joining
		 * the producers: everything they committed is visible */
		done = __atomic_load_n(&st->producers_done, __ATOMIC_ACQUIRE);
		long got = 0;

		for (uint32_t i = 0; i < nr; i++)
			got += rp_ring_drain(rp_shm_ring(st->s, i), mp_on_record, st, 1 << 30);
		if (!got && !done)
			sched_yield();
	} while (!done);
	/* after done: one more full pass already ran with done set; run until empty */
	for (uint32_t i = 0; i < nr; i++)
		while (rp_ring_drain(rp_shm_ring(st->s, i), mp_on_record, st, 1 << 30) > 0)
			;
	return NULL;
}

Test(mp, four_producers_exact_accounting, .timeout = 60)
{
	struct mp_state *st = calloc(1, sizeof(*st));
	pthread_t prod[MP_THREADS], cons;
	struct mp_arg args[MP_THREADS];
	uint64_t ring_drops = 0, dropped = 0;

	cr_assert_not_null(st, "calloc");
	st->s = mk_shm(2, 16 * KIB);
	cr_assert_leq(rp_shm_nr_rings(st->s), 64, "test sized for <= 64 rings");
	for (int t = 0; t < MP_THREADS; t++) {
		st->seen_map[t] = calloc(MP_PER_THREAD, 1);
		cr_assert_not_null(st->seen_map[t], "calloc");
		for (int i = 0; i < 64; i++)
			st->last_seq[i][t] = -1;
	}
	rp_clock_init();
	cr_assert_eq(pthread_create(&cons, NULL, mp_consumer, st), 0, "consumer thread");
	for (uint32_t t = 0; t < MP_THREADS; t++) {
		args[t] = (struct mp_arg){ .st = st, .id = t };
		cr_assert_eq(pthread_create(&prod[t], NULL, mp_producer, &args[t]), 0, "producer thread");
	}
	for (int t = 0; t < MP_THREADS; t++)
		pthread_join(prod[t], NULL);
	/* pairs with the load_acquire in mp_consumer() */
	__atomic_store_n(&st->producers_done, 1, __ATOMIC_RELEASE);
	pthread_join(cons, NULL);

	cr_assert_not(st->failed, "consumer found: %s", st->fail);
	for (uint32_t i = 0; i < rp_shm_nr_rings(st->s); i++) {
		struct rp_ring *r = rp_shm_ring(st->s, i);

		ring_drops += rp_ring_drops(r, RP_DROP_FULL);
		cr_assert_eq(rp_ring_corrupt_count(r), 0, "ring %u: corruption reported: %s", i,
			     rp_ring_last_error(r));
		cr_assert_eq(cons_pos(r), prod_pos(r), "ring %u not drained", i);
	}
	for (int t = 0; t < MP_THREADS; t++) {
		uint64_t total = st->seen[t] + st->dropped[t] + st->discarded[t];

		cr_assert_eq(total, MP_PER_THREAD,
			     "thread %d: seen %" PRIu64 " + dropped %" PRIu64 " + discarded %" PRIu64
			     " = %" PRIu64 ", expected exactly %u attempted", t, st->seen[t], st->dropped[t],
			     st->discarded[t], total, MP_PER_THREAD);
		dropped += st->dropped[t];
		for (uint32_t seq = 0; seq < MP_PER_THREAD; seq++) {
			bool want = !(seq % 61 == 60);

			if (!want)
				cr_assert_eq(st->seen_map[t][seq], 0, "thread %d seq %u was discarded but seen", t, seq);
		}
		free(st->seen_map[t]);
	}
	cr_assert_eq(ring_drops, dropped, "ring drop counters: expected %" PRIu64 " (producers' count), seen %" PRIu64,
		     dropped, ring_drops);
	cr_log_info("mp: %d x %u attempted, %" PRIu64 " dropped on full", MP_THREADS, MP_PER_THREAD, dropped);
	rp_shm_destroy(st->s);
	free(st);
}

/* ---- corruption: the consumer survives, reports, recovers -------------- */

struct report_log {
	int calls;
	uint64_t pos;
	char last[256];
};

static void on_report(void *ctx, const struct rp_ring *r, uint64_t pos, const char *msg)
{
	struct report_log *log = ctx;

	log->calls++;
	log->pos = pos;
	snprintf(log->last, sizeof(log->last), "%s", msg);
}

/* Place a hand-made record header at the producer position and publish it
 * by moving producer_pos, the way a buggy or hostile producer could. */
static void forge(struct rp_ring *r, uint32_t lenw, uint16_t flags, uint16_t plen, uint32_t stack_nr,
		  uint64_t advance)
{
	uint64_t pos = prod_pos(r);
	struct rp_shm_record *rec = (struct rp_shm_record *)(r->data + (pos & r->mask));

	rp_record_fill(rec, 1, 2, 3, 4, flags, plen, 0);
	if (flags & RP_REC_F_STACK)
		((struct rp_shm_stack *)((char *)rec + rp_record_stack_off(flags)))->nr = stack_nr;
	__atomic_store_n(&rec->len, lenw, __ATOMIC_RELEASE);
	__atomic_store_n(&r->hdr->producer_pos, pos + advance, __ATOMIC_RELEASE);
}

/* After corruption: report, counter, skip, and valid records still flow. */
static void expect_corrupt_then_recover(struct rp_shm *s, struct rp_ring *r, struct report_log *log,
					uint64_t corrupt_before, const char *want, const char *what)
{
	struct rp_ring_item it;
	uint64_t at = r->cons;
	char offset[64];
	int err;

	err = rp_ring_peek(r, &it);
	cr_assert_eq(err, -EBADMSG, "%s: expected -EBADMSG, seen %d", what, err);
	cr_assert_eq(rp_ring_corrupt_count(r), corrupt_before + 1, "%s: corrupt counter: expected %" PRIu64
		     ", seen %" PRIu64, what, corrupt_before + 1, rp_ring_corrupt_count(r));
	cr_assert_eq(log->calls, (int)corrupt_before + 1, "%s: reporter calls: expected %" PRIu64 ", seen %d",
		     what, corrupt_before + 1, log->calls);
	cr_assert_eq(log->pos, at, "%s: reported position %" PRIu64 ", expected %" PRIu64, what, log->pos, at);
	snprintf(offset, sizeof(offset), "offset %" PRIu64, at & r->mask);
	cr_assert_not_null(strstr(log->last, "ring 0"), "%s: message should name the ring: %s", what, log->last);
	cr_assert_not_null(strstr(log->last, offset), "%s: message should say '%s': %s", what, offset,
			   log->last);
	cr_assert_not_null(strstr(log->last, want), "%s: message should mention '%s': %s", what, want,
			   log->last);
	cr_assert_str_eq(rp_ring_last_error(r), log->last, "%s: last_error differs from the report", what);
	rp_ring_release(r);
	cr_assert_eq(rp_ring_peek(r, &it), -EAGAIN, "%s: after the skip the ring should be empty", what);

	for (uint32_t i = 0; i < 3; i++)
		cr_assert_not_null(put(r, 5, 500 + i, 40), "%s: producing after recovery failed", what);
	for (uint32_t i = 0; i < 3; i++) {
		err = rp_ring_peek(r, &it);
		cr_assert_eq(err, 0, "%s: valid record %u after recovery: peek %d (%s)", what, i, err,
			     rp_ring_last_error(r));
		check_payload(&it, 500 + i, 40);
		rp_ring_consume(r);
	}
	(void)s;
}

Test(corrupt, bad_len_words_and_lengths)
{
	struct rp_shm *s = mk_shm(1, 16 * KIB);
	struct rp_ring *r = rp_shm_ring(s, 0);
	struct report_log log = { 0 };
	struct rp_ring_item it;
	uint64_t n = 0;

	rp_shm_set_reporter(s, on_report, &log);
	put(r, 1, 1, 8);
	cr_assert_eq(rp_ring_peek(r, &it), 0, "warm-up record");
	rp_ring_consume(r);

	forge(r, 0x12345, 0, 0, 0, 64);
	expect_corrupt_then_recover(s, r, &log, n++, "not a multiple of 8", "unaligned len");
	forge(r, 16, 0, 0, 0, 64);
	expect_corrupt_then_recover(s, r, &log, n++, "shorter than", "len below header");
	forge(r, 4096, 0, 0, 0, 64);
	expect_corrupt_then_recover(s, r, &log, n++, "past the producer position", "len past producer");
	forge(r, 8192, 0, 0, 0, 12 * KIB);
	expect_corrupt_then_recover(s, r, &log, n++, "max record", "len above max record");
	forge(r, RP_REC_LEN_MASK & ~7u, 0, 0, 0, 64);
	expect_corrupt_then_recover(s, r, &log, n++, "max record", "len near 1 GiB");
	forge(r, 64, RP_REC_F_STACK, 0, 0xffffffffu, 64);
	expect_corrupt_then_recover(s, r, &log, n++, "stack ips", "huge stack count");
	/* 32 + 8 + 3 * 8 = 64 would be exact: 4 ips is one too many */
	forge(r, 64, RP_REC_F_STACK, 0, 4, 64);
	expect_corrupt_then_recover(s, r, &log, n++, "stack ips", "stack count one too many");
	forge(r, 64, 0, 1000, 0, 64);
	expect_corrupt_then_recover(s, r, &log, n++, "payload", "payload longer than record");
	forge(r, 64, 0, 1, 0, 64);
	expect_corrupt_then_recover(s, r, &log, n++, "payload", "payload shorter than record");
	forge(r, 64, 0x80, 32, 0, 64);
	expect_corrupt_then_recover(s, r, &log, n++, "unknown record flags", "unknown flags");
	forge(r, 64 | RP_REC_DISCARD, 0, 0, 0, 48);
	expect_corrupt_then_recover(s, r, &log, n++, "past the producer position", "discard past producer");
	rp_shm_destroy(s);
}

Test(corrupt, bad_positions)
{
	const uint64_t size = 16 * KIB;
	struct rp_shm *s = mk_shm(1, size);
	struct rp_ring *r = rp_shm_ring(s, 0);
	struct report_log log = { 0 };
	uint64_t n = 0;

	rp_shm_set_reporter(s, on_report, &log);
	for (uint32_t i = 0; i < 10; i++)
		put(r, 1, i, 100);
	/* producer far ahead of the consumer: more than the ring holds */
	__atomic_store_n(&r->hdr->producer_pos, prod_pos(r) + 10 * size, __ATOMIC_RELAXED);
	expect_corrupt_then_recover(s, r, &log, n++, "producer position", "producer too far ahead");
	cr_assert_eq(r->data[100], 0, "the skip wiped the area (free space must read zero)");
	/* producer behind the consumer */
	__atomic_store_n(&r->hdr->producer_pos, prod_pos(r) - 64, __ATOMIC_RELAXED);
	expect_corrupt_then_recover(s, r, &log, n++, "producer position", "producer behind consumer");
	/* misaligned producer position: accesses stay aligned (UBSan would say) */
	__atomic_store_n(&r->hdr->producer_pos, prod_pos(r) + 3 + 10 * size, __ATOMIC_RELAXED);
	expect_corrupt_then_recover(s, r, &log, n++, "producer position", "misaligned producer position");
	/* a scribbled consumer_pos only makes producers see a full ring */
	__atomic_store_n(&r->hdr->consumer_pos, prod_pos(r) + 4096, __ATOMIC_RELAXED);
	cr_assert_null(rp_ring_reserve(r, 64), "consumer ahead of producer: reserve must refuse");
	rp_shm_destroy(s);
}

/* One step of the xorshift generator the fuzz tests share. */
static uint64_t xs_next(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/* Random garbage everywhere: the consumer must neither crash, hang nor
 * hand out a record outside the mapping, and must work afterwards. */
Test(corrupt, random_garbage_fuzz, .timeout = 60)
{
	const uint64_t size = 8 * KIB;
	struct rp_shm *s = mk_shm(1, size);
	struct rp_ring *r = rp_shm_ring(s, 0);
	struct rp_ring_item it;
	uint64_t rng = 0x9e3779b97f4a7c15ull, records = 0, bad = 0;
	unsigned char *end = r->data + 2 * size;

	rp_shm_skip_uncommitted(s);		/* exercise the stale path too */
	for (int iter = 0; iter < 3000; iter++) {
		uint64_t base = r->cons;

		for (uint64_t i = 0; i < size; i += 8) {
			uint64_t v = xs_next(&rng);

			/* mix in plausible len words so deeper checks run too */
			if ((rng >> 60) < 6)
				v = (v & ~0xffffffffull) | ((rng >> 20) & 0x3f8) | ((rng >> 40) & 1 ? 0 : RP_REC_BUSY * ((rng >> 41) & 1));
			memcpy(r->data + i, &v, 8);
		}
		/* half the time, a run of well-formed records at the head so
		 * the accept path and the garbage after it are both exercised */
		if (rng & 4) {
			uint64_t at = base;

			for (int k = 0; k < (int)((rng >> 8) & 15); k++) {
				uint16_t plen = (uint16_t)((rng >> (k * 3)) & 255);
				uint16_t fl = (uint16_t)((rng >> (k + 20)) & RP_REC_F_KNOWN);
				uint32_t nr = (fl & RP_REC_F_STACK) ? (uint32_t)((rng >> k) & 7) : 0;
				uint32_t len = (uint32_t)rp_record_size(fl, nr, plen);
				struct rp_shm_record *rec = (struct rp_shm_record *)(r->data + (at & r->mask));

				rp_record_fill(rec, 1, 2, 3, (uint32_t)k, fl, plen, 0);
				if (fl & RP_REC_F_STACK)
					((struct rp_shm_stack *)((char *)rec + rp_record_stack_off(fl)))->nr = nr;
				rec->len = len | ((rng >> (k + 40)) & 1 ? 0 : RP_REC_DISCARD * ((k & 3) == 3));
				at += len;
			}
		}
		xs_next(&rng);
		switch (rng & 3) {
		case 0: __atomic_store_n(&r->hdr->producer_pos, rng, __ATOMIC_RELAXED); break;
		case 1: __atomic_store_n(&r->hdr->producer_pos, base + (rng >> 8) % size, __ATOMIC_RELAXED); break;
		case 2: __atomic_store_n(&r->hdr->producer_pos, base + (rng >> 8) % (3 * size), __ATOMIC_RELAXED); break;
		default: __atomic_store_n(&r->hdr->producer_pos, base - (rng >> 8) % 64, __ATOMIC_RELAXED); break;
		}
		for (int k = 0; k < 200; k++) {
			int err = rp_ring_peek(r, &it);

			if (err == -EAGAIN && r->cons == prod_pos(r))
				break;
			cr_assert(err == 0 || err == -EAGAIN || err == -EBADMSG || err == -ESTALE,
				  "iter %d: peek returned %d", iter, err);
			if (err == 0) {
				const unsigned char *p = (const unsigned char *)it.rec;
				const unsigned char *pl = it.payload;

				cr_assert(p >= r->data && p + it.len <= end, "iter %d: record outside the mapping", iter);
				cr_assert(pl >= p && pl + it.hdr.payload_len <= p + it.len,
					  "iter %d: payload outside its record", iter);
				if (it.stack)
					cr_assert((const unsigned char *)(it.stack + it.stack_nr) <= p + it.len,
						  "iter %d: stack outside its record", iter);
				records++;
				rp_ring_advance(r);
			} else if (err == -EBADMSG || err == -ESTALE) {
				bad++;
			}
		}
		rp_ring_release(r);
	}
	cr_assert_gt(bad, 0, "garbage should have been reported at least once");
	cr_assert_gt(records, 0, "the well-formed records should have been accepted at least once");
	cr_assert_eq(rp_ring_corrupt_count(r) + rp_ring_stale_count(r), bad,
		     "counters (%" PRIu64 " corrupt + %" PRIu64 " stale) should equal reports %" PRIu64,
		     rp_ring_corrupt_count(r), rp_ring_stale_count(r), bad);
	cr_log_info("fuzz: %" PRIu64 " plausible records, %" PRIu64 " reports", records, bad);

	/* clean up the ring state the fuzz left and check it still works */
	__atomic_store_n(&r->hdr->producer_pos, r->cons, __ATOMIC_RELAXED);
	memset(r->data, 0, size);
	for (uint32_t i = 0; i < 5; i++)
		cr_assert_not_null(put(r, 1, 900 + i, 24), "put after fuzz");
	for (uint32_t i = 0; i < 5; i++) {
		cr_assert_eq(rp_ring_peek(r, &it), 0, "read after fuzz: %s", rp_ring_last_error(r));
		check_payload(&it, 900 + i, 24);
		rp_ring_consume(r);
	}
	rp_shm_destroy(s);
}

/* The same bytes in both rings: a run of records at the reader's position
 * (mostly plain ones, some with parts, some discarded, some with a length
 * or payload size that does not add up, some still BUSY), then garbage. */
static void twin_fill(struct rp_ring *a, struct rp_ring *b, uint64_t *x)
{
	uint64_t size = a->size, at = a->cons, n = xs_next(x) % 24;
	unsigned char *buf = malloc(size);

	cr_assert_not_null(buf, "malloc of %" PRIu64 " bytes", size);
	for (uint64_t i = 0; i < size; i += 8) {
		uint64_t v = xs_next(x);

		memcpy(buf + i, &v, 8);
	}
	for (uint64_t k = 0; k < n; k++) {
		uint64_t v = xs_next(x);
		uint16_t plen = (uint16_t)(v & 127);
		uint16_t fl = (v >> 8) % 4 ? 0 : (uint16_t)((v >> 12) & RP_REC_F_KNOWN);
		uint32_t nr = (fl & RP_REC_F_STACK) ? (uint32_t)((v >> 16) & 7) : 0;
		uint32_t len = (uint32_t)rp_record_size(fl, nr, plen);
		struct rp_shm_record *rec = (struct rp_shm_record *)(buf + (at & a->mask));

		if ((at & a->mask) + len > size)
			break;
		rp_record_fill(rec, 1, v >> 40, 3, (uint32_t)k, fl, plen, 0);
		if (fl & RP_REC_F_STACK)
			((struct rp_shm_stack *)((char *)rec + rp_record_stack_off(fl)))->nr = nr;
		switch ((v >> 24) % 16) {
		case 0: rec->len = len | RP_REC_DISCARD; break;
		case 1: rec->len = len | RP_REC_BUSY; break;
		case 2: rec->len = len + 8; break;		/* longer than its parts */
		case 3: rec->payload_len = (uint16_t)(plen + 9); rec->len = len; break;
		case 4: rec->flags = 0x80; rec->len = len; break;
		default: rec->len = len; break;
		}
		at += len;
	}
	memcpy(a->data, buf, size);
	memcpy(b->data, buf, size);
	free(buf);
	/* the producer at the run's end, a little before or after it, or
	 * anywhere at all */
	switch (xs_next(x) % 4) {
	case 0: at = xs_next(x); break;
	case 1: at -= xs_next(x) % 64 * 8; break;
	case 2: at += xs_next(x) % 64 * 8; break;
	default: break;
	}
	__atomic_store_n(&a->hdr->producer_pos, at, __ATOMIC_RELAXED);
	__atomic_store_n(&b->hdr->producer_pos, at, __ATOMIC_RELAXED);
}

/* rp_ring_peek_fast() is rp_ring_peek(): two rings with the same bytes, one
 * read with each, give the same answers, records and counters throughout. */
Test(corrupt, fast_peek_answers_as_the_full_one, .timeout = 60)
{
	const uint64_t size = 8 * KIB;
	struct rp_shm *s = mk_shm(2, size);
	struct rp_ring *a = rp_shm_ring(s, 0), *b = rp_shm_ring(s, 1);
	uint64_t x = 0x2545f4914f6cdd1dull, plain = 0, other = 0;

	rp_shm_skip_uncommitted(s);
	for (int iter = 0; iter < 4000; iter++) {
		twin_fill(a, b, &x);
		for (int k = 0; k < 64; k++) {
			struct rp_ring_item ia, ib;
			int ea, eb;

			memset(&ia, 0, sizeof(ia));
			memset(&ib, 0, sizeof(ib));
			ea = rp_ring_peek(a, &ia);
			eb = rp_ring_peek_fast(b, &ib);
			cr_assert_eq(ea, eb, "iter %d, peek %d: rp_ring_peek() %d, the fast one %d",
				     iter, k, ea, eb);
			cr_assert_eq(a->cons, b->cons, "iter %d, peek %d: reader at %" PRIu64 " and %" PRIu64,
				     iter, k, a->cons, b->cons);
			if (ea == -EAGAIN)
				break;
			if (ea)
				continue;
			cr_assert(ia.pos == ib.pos && ia.len == ib.len && ia.stack_nr == ib.stack_nr &&
				  !memcmp(&ia.hdr, &ib.hdr, sizeof(ia.hdr)) &&
				  (const unsigned char *)ia.rec - a->data ==
				  (const unsigned char *)ib.rec - b->data &&
				  (const unsigned char *)ia.payload - a->data ==
				  (const unsigned char *)ib.payload - b->data &&
				  !ia.activity == !ib.activity && !ia.stack == !ib.stack,
				  "iter %d, peek %d: the records differ (pos %" PRIu64 "/%" PRIu64
				  ", len %u/%u)", iter, k, ia.pos, ib.pos, ia.len, ib.len);
			if (ia.hdr.flags)
				other++;
			else
				plain++;
			rp_ring_advance(a);
			rp_ring_advance(b);
		}
		rp_ring_release(a);
		rp_ring_release(b);
	}
	cr_assert_eq(rp_ring_corrupt_count(a), rp_ring_corrupt_count(b),
		     "corrupt counts: %" PRIu64 " and %" PRIu64, rp_ring_corrupt_count(a),
		     rp_ring_corrupt_count(b));
	cr_assert_eq(rp_ring_stale_count(a), rp_ring_stale_count(b),
		     "stale counts: %" PRIu64 " and %" PRIu64, rp_ring_stale_count(a),
		     rp_ring_stale_count(b));
	cr_assert_eq(rp_ring_skipped_bytes(a), rp_ring_skipped_bytes(b),
		     "skipped bytes: %" PRIu64 " and %" PRIu64, rp_ring_skipped_bytes(a),
		     rp_ring_skipped_bytes(b));
	/* both kinds went through, and the bad ones were seen */
	cr_assert_gt(plain, 1000, "plain records read: %" PRIu64, plain);
	cr_assert_gt(other, 100, "records with parts read: %" PRIu64, other);
	cr_assert_gt(rp_ring_corrupt_count(a), 100, "corrupt records seen: %" PRIu64,
		     rp_ring_corrupt_count(a));
	cr_log_info("fast peek: %" PRIu64 " plain and %" PRIu64 " other records, %" PRIu64
		    " corrupt, %" PRIu64 " stale, alike", plain, other, rp_ring_corrupt_count(a),
		    rp_ring_stale_count(a));
	rp_shm_destroy(s);
}

/* ---- dead producers: BUSY (or never-marked) heads are skipped on a fact -- */

/* The judge of these tests: what the thread registry would say of the
 * record's writer, as the test sets it; counts how often it was asked. */
struct judge {
	bool gone;
	unsigned int asked;
};

static bool judge_says(void *ctx, uint64_t *token)
{
	struct judge *j = ctx;

	j->asked++;
	*token = 1;
	return j->gone;
}

/* Past the ring's look delay (RP_RING_STALE_LOOK_NS): the judge is asked
 * at the next peek. Not a verdict: the ring only asks after it. */
static void past_look_delay(void)
{
	usleep(RP_RING_STALE_LOOK_NS / 1000 * 2);
}

Test(stale, busy_head_waits_for_its_writer_then_is_skipped_when_it_is_gone)
{
	struct rp_shm *s = mk_shm(1, 16 * KIB);
	struct rp_ring *r = rp_shm_ring(s, 0);
	struct report_log log = { 0 };
	struct judge j = { .gone = false };
	struct rp_shm_record *dead;
	struct rp_ring_item it;
	int err, i;

	rp_shm_set_reporter(s, on_report, &log);
	rp_shm_set_stale_judge(s, judge_says, &j);
	dead = rp_ring_reserve(r, 96);			/* its writer stops here */
	cr_assert_not_null(dead, "reserve");
	cr_assert_not_null(put(r, 1, 7, 8), "put behind the uncommitted record");
	cr_assert_eq(rp_ring_peek(r, &it), -EAGAIN, "BUSY head must block consumption");
	/* however long its writer is inside the write, the head waits */
	for (i = 0; i < 5; i++) {
		past_look_delay();
		cr_assert_eq(rp_ring_peek(r, &it), -EAGAIN,
			     "look %d: the writer can still commit: expected -EAGAIN", i);
	}
	cr_assert_geq(j.asked, 5, "the judge was asked %u times in 5 looks", j.asked);
	cr_assert_eq(rp_ring_stale_count(r), 0, "nothing skipped while the writer lives");
	j.gone = true;	/* the registry saw every writer leave */
	err = rp_ring_peek(r, &it);
	cr_assert_eq(err, -ESTALE, "the writer is gone: expected -ESTALE, seen %d", err);
	cr_assert_eq(rp_ring_stale_count(r), 1, "stale counter: expected 1, seen %" PRIu64, rp_ring_stale_count(r));
	cr_assert_eq(r->hdr->skipped_bytes, 96, "skipped bytes: expected 96, seen %" PRIu64,
		     (uint64_t)r->hdr->skipped_bytes);
	cr_assert_not_null(strstr(log.last, "not committed"), "report should say why: %s", log.last);
	err = rp_ring_peek(r, &it);
	cr_assert_eq(err, 0, "the committed record behind it: expected 0, seen %d", err);
	cr_assert_eq(it.hdr.seq, 7, "expected seq 7, seen %u", it.hdr.seq);
	rp_ring_consume(r);
	rp_shm_destroy(s);
}

/* A writer that commits and leaves just before the judge looks: the judge
 * finds every writer gone, the record is read all the same. */
struct late_commit {
	struct rp_shm_record *rec;
	uint32_t len;
};

static bool judge_after_commit(void *ctx, uint64_t *token)
{
	struct late_commit *lc = ctx;

	(void)token;
	rp_record_fill(lc->rec, 1, rp_clock_now(), 1234, 9, 0, 8, 0);
	rp_ring_commit_len(lc->rec, lc->len);
	return true;
}

Test(stale, a_head_committed_before_the_verdict_is_read)
{
	struct rp_shm *s = mk_shm(1, 16 * KIB);
	struct rp_ring *r = rp_shm_ring(s, 0);
	struct late_commit lc = { .len = 40 };
	struct rp_ring_item it;
	int err;

	rp_shm_set_stale_judge(s, judge_after_commit, &lc);
	lc.rec = rp_ring_reserve(r, lc.len);
	cr_assert_not_null(lc.rec, "reserve");
	cr_assert_eq(rp_ring_peek(r, &it), -EAGAIN, "BUSY head must block consumption");
	past_look_delay();
	err = rp_ring_peek(r, &it);
	if (err == -EAGAIN)	/* the judge's look, then the record read anew */
		err = rp_ring_peek(r, &it);
	cr_assert_eq(err, 0, "committed: read, not skipped (%d, %s)", err, rp_ring_last_error(r));
	cr_assert_eq(it.hdr.seq, 9, "the late record: seq 9, seen %u", it.hdr.seq);
	cr_assert_eq(rp_ring_stale_count(r), 0, "nothing skipped");
	rp_shm_destroy(s);
}

/* Without a judge (another process's writers) a head waits until the
 * owner says every writer is out. */
Test(stale, without_a_judge_a_head_waits_until_every_writer_is_out)
{
	struct rp_shm *s = mk_shm(1, 16 * KIB);
	struct rp_ring *r = rp_shm_ring(s, 0);
	struct rp_ring_item it;
	int i;

	cr_assert_not_null(rp_ring_reserve(r, 96), "reserve");
	cr_assert_not_null(put(r, 1, 7, 8), "put behind it");
	for (i = 0; i < 3; i++) {
		past_look_delay();
		cr_assert_eq(rp_ring_peek(r, &it), -EAGAIN, "look %d: expected -EAGAIN", i);
	}
	rp_shm_skip_uncommitted(s);
	cr_assert_eq(rp_ring_peek(r, &it), -ESTALE, "every writer is out: skipped");
	cr_assert_eq(rp_ring_peek(r, &it), 0, "the record behind it");
	cr_assert_eq(it.hdr.seq, 7);
	rp_shm_destroy(s);
}

Test(stale, never_marked_head_skips_to_producer)
{
	struct rp_shm *s = mk_shm(1, 16 * KIB);
	struct rp_ring *r = rp_shm_ring(s, 0);
	struct judge j = { .gone = true };
	struct rp_ring_item it;
	int err;

	rp_shm_set_stale_judge(s, judge_says, &j);
	/* a writer killed between the CAS and its BUSY store: len word 0 */
	__atomic_store_n(&r->hdr->producer_pos, 64, __ATOMIC_RELAXED);
	cr_assert_not_null(put(r, 1, 3, 8), "put behind it");
	cr_assert_eq(rp_ring_peek(r, &it), -EAGAIN, "zero len word: not committed yet");
	past_look_delay();
	err = rp_ring_peek(r, &it);
	cr_assert_eq(err, -ESTALE, "expected -ESTALE, seen %d", err);
	cr_assert_eq(r->cons, prod_pos(r), "unknown length: skip to the producer position");
	rp_ring_release(r);
	cr_assert_not_null(put(r, 1, 4, 8), "put after the skip");
	cr_assert_eq(rp_ring_peek(r, &it), 0, "new records flow: %s", rp_ring_last_error(r));
	cr_assert_eq(it.hdr.seq, 4, "expected seq 4, seen %u", it.hdr.seq);
	rp_shm_destroy(s);
}

/* ---- what a reader trusts: its own position, plausible counters --------- */

/* A scribbled consumer_pos costs producers a full ring only until the
 * reader's next release, even with nothing new to consume. */
Test(trust, scribbled_consumer_pos_heals_at_the_next_release)
{
	struct rp_shm *s = mk_shm(1, 16 * KIB);
	struct rp_ring *r = rp_shm_ring(s, 0);
	struct report_log log = { 0 };
	struct rp_ring_item it;
	uint64_t mine;

	rp_shm_set_reporter(s, on_report, &log);
	for (uint32_t i = 0; i < 4; i++)
		cr_assert_not_null(put(r, 1, i, 32));
	for (uint32_t i = 0; i < 4; i++) {
		cr_assert_eq(rp_ring_peek(r, &it), 0);
		rp_ring_consume(r);
	}
	mine = cons_pos(r);
	/* the one 8-byte write: ahead of the producer */
	__atomic_store_n(&r->hdr->consumer_pos, prod_pos(r) + 4096, __ATOMIC_RELAXED);
	cr_assert_null(put(r, 1, 9, 32), "consumer ahead of the producer: the ring reads full");
	cr_assert_eq(rp_ring_pending(r), 0, "the reader decides from its own position: nothing unread");
	cr_assert_eq(rp_ring_peek(r, &it), -EAGAIN, "and reads nothing");
	rp_ring_release(r);
	cr_assert_eq(cons_pos(r), mine, "release rewrites consumer_pos: expected %" PRIu64 ", seen %"
		     PRIu64, mine, cons_pos(r));
	cr_assert_eq(rp_ring_corrupt_count(r), 1, "the repair is counted: %" PRIu64,
		     rp_ring_corrupt_count(r));
	cr_assert_not_null(strstr(log.last, "consumer position"), "and reported: %s", log.last);
	cr_assert_not_null(put(r, 1, 10, 32), "producers write again");
	cr_assert_eq(rp_ring_peek(r, &it), 0);
	check_payload(&it, 10, 32);
	rp_ring_consume(r);
	/* a consumer_pos just ahead of the producer, by less than a record,
	 * also reads full (the fast path used to wrap into "free") */
	__atomic_store_n(&r->hdr->consumer_pos, prod_pos(r) + 8, __ATOMIC_RELAXED);
	cr_assert_null(rp_ring_reserve(r, 64), "consumer 8 bytes ahead: full");
	/* and one far behind: full too (more than a ring in use) */
	__atomic_store_n(&r->hdr->consumer_pos, prod_pos(r) - 2 * 16 * KIB, __ATOMIC_RELAXED);
	cr_assert_null(rp_ring_reserve(r, 64), "consumer two rings behind: full");
	rp_ring_release(r);
	cr_assert_eq(rp_ring_corrupt_count(r), 2, "second repair counted");
	cr_assert_not_null(put(r, 1, 11, 32), "healed again");
	rp_shm_destroy(s);
}

/* A producer position behind the reader or more than a ring ahead: the
 * ring restarts empty at the reader's position, the records the reader
 * still holds in place stay intact, and the position is never followed. */
Test(trust, bad_producer_pos_restarts_the_ring_and_keeps_held_records)
{
	const uint64_t size = 16 * KIB;
	struct rp_shm *s = mk_shm(1, size);
	struct rp_ring *r = rp_shm_ring(s, 0);
	struct rp_ring_item it, held[6];
	uint64_t at;

	for (uint32_t i = 0; i < 6; i++)
		cr_assert_not_null(put(r, 1, i, 40));
	/* read them and hold them in place (no release); the reader looks at
	 * producer_pos again only once it has read up to where it last saw it */
	for (int i = 0; i < 6; i++) {
		cr_assert_eq(rp_ring_peek(r, &held[i]), 0);
		rp_ring_advance(r);
	}
	at = r->cons;
	__atomic_store_n(&r->hdr->producer_pos, at + 5 * size, __ATOMIC_RELAXED);
	cr_assert_eq(rp_ring_peek(r, &it), -EBADMSG, "too far ahead: corrupt");
	cr_assert_eq(r->cons, at, "the reader did not move: %" PRIu64 " != %" PRIu64, r->cons, at);
	cr_assert_eq(prod_pos(r), at, "producer_pos set back to the reader's position");
	for (int i = 0; i < 6; i++)
		check_payload(&held[i], (uint32_t)i, 40);	/* held records untouched */
	cr_assert_eq(rp_ring_skipped_bytes(r), 0, "nothing the reader knew of was given up: %"
		     PRIu64, rp_ring_skipped_bytes(r));
	/* behind the reader */
	__atomic_store_n(&r->hdr->producer_pos, at - 8, __ATOMIC_RELAXED);
	cr_assert_eq(rp_ring_peek(r, &it), -EBADMSG, "behind the reader: corrupt");
	cr_assert_eq(r->cons, at, "never backwards");
	cr_assert_eq(prod_pos(r), at);
	rp_ring_release(r);
	for (uint32_t i = 0; i < 3; i++)
		cr_assert_not_null(put(r, 2, 100 + i, 40), "writes after the repair");
	for (uint32_t i = 0; i < 3; i++) {
		cr_assert_eq(rp_ring_peek(r, &it), 0, "read after the repair: %s", rp_ring_last_error(r));
		check_payload(&it, 100 + i, 40);
		rp_ring_consume(r);
	}
	cr_assert_eq(rp_ring_corrupt_count(r), 2);
	cr_assert_eq(rp_ring_lost_bound(r), 2, "bound: one record per repair: %" PRIu64,
		     rp_ring_lost_bound(r));
	rp_shm_destroy(s);
}

/* Space handed back in one go after the reader passed more than a ring
 * (only a misled producer makes that possible) is zeroed only where it is
 * not in use: the records after the reader survive. */
Test(trust, release_past_a_ring_spares_unread_records)
{
	const uint64_t size = 16 * KIB;
	struct rp_shm *s = mk_shm(1, size);
	struct rp_ring *r = rp_shm_ring(s, 0);
	struct rp_ring_item it;
	uint32_t seq = 0, unread;

	for (; seq < 200; seq++) {		/* 200 x 64 bytes */
		cr_assert_not_null(put(r, 1, seq, 32));
		cr_assert_eq(rp_ring_peek(r, &it), 0);
		rp_ring_advance(r);		/* held, not released */
	}
	/* another process claims everything read is free */
	__atomic_store_n(&r->hdr->consumer_pos, r->cons, __ATOMIC_RELAXED);
	for (; seq < 300; seq++) {
		cr_assert_not_null(put(r, 1, seq, 32), "put %u", seq);
		cr_assert_eq(rp_ring_peek(r, &it), 0);
		check_payload(&it, seq, 32);
		rp_ring_advance(r);
	}
	cr_assert_gt(r->cons - r->published, size, "the reader is more than a ring past published");
	for (unread = seq; seq < unread + 10; seq++)
		cr_assert_not_null(put(r, 1, seq, 32));
	rp_ring_release(r);
	for (uint32_t i = unread; i < seq; i++) {
		cr_assert_eq(rp_ring_peek(r, &it), 0, "unread record %u: %s", i, rp_ring_last_error(r));
		check_payload(&it, i, 32);
		rp_ring_consume(r);
	}
	rp_shm_destroy(s);
}

/* A head that never gets committed is skipped to where the producers are
 * now, not to where they were when it was first seen. */
Test(trust, stale_skip_goes_to_the_latest_producer_pos)
{
	struct rp_shm *s = mk_shm(1, 16 * KIB);
	struct rp_ring *r = rp_shm_ring(s, 0);
	struct rp_ring_item it;

	rp_shm_skip_uncommitted(s);
	__atomic_store_n(&r->hdr->producer_pos, 64, __ATOMIC_RELAXED);	/* len word 0 */
	cr_assert_not_null(put(r, 1, 3, 8));
	for (uint32_t i = 0; i < 5; i++)
		cr_assert_not_null(put(r, 1, 4 + i, 8), "put behind it");
	cr_assert_eq(rp_ring_peek(r, &it), -ESTALE);
	cr_assert_eq(r->cons, prod_pos(r), "skipped to %" PRIu64 ", the producer is at %" PRIu64,
		     r->cons, prod_pos(r));
	cr_assert_eq(rp_ring_stale_count(r), 1);
	cr_assert_eq(rp_ring_skipped_bytes(r), prod_pos(r));
	rp_shm_destroy(s);
}

/*
 * The drop counters are the producers' alone: their memfd is sealed, so a
 * process that gets hold of it (as the agent does, or one that takes it
 * from /proc/PID/fd) can map it only read-only and cannot write() to it;
 * the old counters in the ring headers count for nothing, whatever is
 * written there. A reader attaches only a counts memfd so sealed.
 */
Test(trust, drop_counters_are_the_producers_alone)
{
	struct rp_shm *s = mk_shm(2, 16 * KIB), *v;
	struct rp_ring *r = rp_shm_ring(s, 0);
	struct rp_shm_open_opts oo = { .sz = sizeof(oo) };
	uint64_t all[RP_DROP_NR] = { 0 }, junk = ~0ull;
	int cfd = rp_shm_counts_fd(s), other;
	char path[64];
	void *p;

	cr_assert_geq(cfd, 0, "the creator has a counts memfd");
	for (int i = 0; i < 5; i++)
		rp_ring_count_drop(r, RP_DROP_FULL);
	rp_ring_count_drop(rp_shm_ring(s, 1), RP_DROP_TOO_BIG);
	cr_assert_eq(rp_ring_drops(r, RP_DROP_FULL), 5, "honest drops count");
	/* the words where drop counters were count for nothing */
	__atomic_store_n(&r->hdr->drops[RP_DROP_FULL], 10000000000000000000ull, __ATOMIC_RELAXED);
	cr_assert_eq(rp_ring_drops(r, RP_DROP_FULL), 5, "a scribble in the ring header counts");
	/* nobody maps the counts writable or writes them, through this fd or
	 * a new open of it */
	p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, cfd, 0);
	cr_assert_eq(p, MAP_FAILED, "the counts mapped writable");
	cr_assert_eq(errno, EPERM, "mmap: %s", strerror(errno));
	cr_assert_lt(pwrite(cfd, &junk, sizeof(junk), 64), 0, "the counts written");
	snprintf(path, sizeof(path), "/proc/self/fd/%d", cfd);
	other = open(path, O_RDWR);
	cr_assert_geq(other, 0, "%s: %s", path, strerror(errno));
	cr_assert_eq(mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, other, 0), MAP_FAILED,
		     "the counts mapped writable through a new open");
	cr_assert_lt(pwrite(other, &junk, sizeof(junk), 64), 0, "the counts written through a new open");
	close(other);
	/* a reader elsewhere reads them as they are */
	v = rp_shm_open_fd(rp_shm_fd(s), &oo);
	cr_assert_not_null(v);
	cr_assert_eq(rp_shm_attach_counts(v, cfd, &oo), 0);
	rp_shm_drops(v, all);
	cr_assert_eq(all[RP_DROP_FULL], 5, "the reader's full drops: %" PRIu64, all[RP_DROP_FULL]);
	cr_assert_eq(all[RP_DROP_TOO_BIG], 1);
	rp_ring_count_drop(r, RP_DROP_ABORTED);
	cr_assert_eq(rp_ring_drops(rp_shm_ring(v, 0), RP_DROP_ABORTED), 1, "seen as it happens");
	rp_shm_destroy(v);
	{
		/* a counts memfd without the seals is refused */
		char err[200] = "";
		struct rp_shm_open_opts eo = { .sz = sizeof(eo), .errbuf = err, .errbuf_len = sizeof(err) };
		int fake = memfd_create("fake-counts", MFD_CLOEXEC | MFD_ALLOW_SEALING);

		cr_assert_geq(fake, 0);
		cr_assert_eq(ftruncate(fake, 4096), 0);
		v = rp_shm_open_fd(rp_shm_fd(s), &oo);
		cr_assert_not_null(v);
		cr_assert_eq(rp_shm_attach_counts(v, fake, &eo), -EPERM, "unsealed counts attached");
		cr_assert_not_null(strstr(err, "sealed"), "the refusal says why: %s", err);
		rp_shm_destroy(v);
		close(fake);
	}
	/* the reader's own figures are its own: scribbling their shared copy
	 * changes nothing, and the next release restores the copy */
	__atomic_store_n(&r->hdr->corrupt, 123456789, __ATOMIC_RELAXED);
	cr_assert_eq(rp_ring_corrupt_count(r), 0);
	rp_ring_release(r);
	cr_assert_eq(__atomic_load_n(&r->hdr->corrupt, __ATOMIC_RELAXED), 0);
	rp_shm_destroy(s);
}
