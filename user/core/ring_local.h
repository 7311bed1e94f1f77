/* SPDX-License-Identifier: MIT */
/*
 * Reserving in the ring of the CPU the writer runs on, without a locked
 * instruction.
 *
 * A session has one ring per possible CPU, so every writer of ring c runs on
 * CPU c, except for a moment when it is migrated or preempted between
 * reading its CPU number and moving the ring's producer position. A
 * restartable sequence (rseq, which glibc registers for every thread) turns
 * that moment into a restart: the kernel sends a thread that is preempted,
 * migrated or signalled inside the sequence back to its abort label, before
 * the single store that commits the reservation. So the reservation is a
 * load, a compare and a plain store, instead of a lock cmpxchg (about 13 ns
 * on the machines we measure; Documentation/performance.md).
 *
 * The plain store is safe only if no writer of the ring runs elsewhere, so
 * it is all or nothing per session: a session whose rings are one per
 * possible CPU, started where rseq works, is reserved this way by every
 * writer, which on an abort re-reads its CPU and tries that CPU's ring; any
 * other session is reserved with rp_ring_reserve()'s CAS by every writer.
 * (A CAS writer that read its CPU and then migrated would otherwise race a
 * plain store on the ring it had picked.) Used on x86-64, not under
 * ThreadSanitizer, which cannot see the asm's accesses.
 */
#ifndef RP_RING_LOCAL_H
#define RP_RING_LOCAL_H

#include "ring.h"

#if defined(__x86_64__) && defined(RP_HAVE_RSEQ) && !defined(__SANITIZE_THREAD__) && \
	!defined(RP_NO_RSEQ_RESERVE)
#define RP_RSEQ_RESERVE 1
#endif

#ifdef RP_RSEQ_RESERVE
static inline struct rseq *rp_rseq_area(void)
{
	char *tp;

	__asm__("mov %%fs:0, %0" : "=r"(tp));
	return (struct rseq *)(tp + __rseq_offset);
}

/*
 * One attempt: 0 and *pos on success, 1 when the ring has no room for len,
 * -1 when the sequence was aborted (preempted, migrated, signalled) or the
 * thread is no longer on cpu. The consumer position (*pcons) and the ring
 * size (*psize) are read inside the sequence as memory operands: they need
 * no register of their own, which the writer's fast path is short of.
 */
static inline int rp_rseq_bump(struct rseq *rs, uint32_t cpu, __u64 *ppos, const __u64 *pcons,
			       const uint64_t *psize, __u64 len, __u64 *pos)
{
	__u64 p, used;

	/* The descriptor lives in its own section; numeric labels, since the
	 * block is inlined many times: 1 start, 2 post-commit, 4 abort. The
	 * load of *pcons is an acquire on x86: it pairs with the consumer's
	 * store_release of consumer_pos (its reads of the space we may reuse
	 * happen before our writes into it). */
	__asm__ goto(
		".pushsection __rseq_cs, \"aw\"\n\t"
		".balign 32\n\t"
		"3:\n\t"
		".long 0x0, 0x0\n\t"
		".quad 1f, (2f - 1f), 4f\n\t"
		".popsection\n\t"
		"leaq 3b(%%rip), %[p]\n\t"
		"movq %[p], %[rseq_cs]\n\t"
		"1:\n\t"
		"cmpl %[cpu], %[cpu_id]\n\t"
		"jnz %l[aborted]\n\t"
		"movq %[ppos], %[p]\n\t"
		"movq %[p], %[used]\n\t"
		"subq %[cons], %[used]\n\t"
		/* used > size: positions scribbled on (a consumer position
		 * ahead of ours wraps used around), read as full; else full
		 * when used + len > size (no wrap: used <= size) */
		"cmpq %[size], %[used]\n\t"
		"ja %l[full]\n\t"
		"addq %[len], %[used]\n\t"
		"cmpq %[size], %[used]\n\t"
		"ja %l[full]\n\t"
		"leaq (%[p], %[len]), %[used]\n\t"
		"movq %[used], %[ppos]\n\t"	/* the commit */
		"2:\n\t"
		".pushsection __rseq_failure, \"ax\"\n\t"
		/* the signature the kernel checks before the abort label,
		 * encoded as a trapping instruction (ud1) */
		".byte 0x0f, 0xb9, 0x3d\n\t"
		".long 0x53053053\n\t"
		"4:\n\t"
		"jmp %l[aborted]\n\t"
		".popsection\n\t"
		: [p] "=&r"(p), [used] "=&r"(used), [rseq_cs] "=m"(rs->rseq_cs), [ppos] "+m"(*ppos)
		: [cpu] "r"(cpu), [cpu_id] "m"(rs->cpu_id), [len] "r"(len), [cons] "m"(*pcons),
		  [size] "m"(*psize)
		: "memory", "cc"
		: aborted, full);
	*pos = p;
	return 0;
aborted:
	return -1;
full:
	return 1;
}

/*
 * One try at len bytes (8-aligned) in ring r of CPU cpu: 0 and *rec (BUSY
 * until the commit, as in rp_ring_reserve()), or rp_rseq_bump()'s 1 (full)
 * or -1 (restart). Its load of consumer_pos pairs with the consumer's
 * store_release.
 */
static inline __attribute__((always_inline)) int
rp_ring_try_local(struct rseq *rs, uint32_t cpu, struct rp_ring *r, uint32_t len,
		  struct rp_shm_record **rec)
{
	struct rp_shm_ring *h = r->hdr;
	__u64 pos;
	int rc = rp_rseq_bump(rs, cpu, &h->producer_pos, &h->consumer_pos, &r->size, len, &pos);

	if (rp_likely(!rc)) {
		*rec = (struct rp_shm_record *)(r->data + (pos & r->mask));
		rp_store_relaxed(&(*rec)->len, len | RP_REC_BUSY);
	}
	return rc;
}
#endif

/* Whether the rings of a session with nr_rings rings may be reserved
 * locally: one ring per possible CPU, and rseq working in this thread. */
static inline bool rp_ring_local_ok(uint32_t nr_rings)
{
#ifdef RP_RSEQ_RESERVE
	return __rseq_size >= 8 && (int32_t)rp_load_relaxed(&rp_rseq_area()->cpu_id) >= 0 &&
	       nr_rings >= rp_shm_possible_cpus();
#else
	(void)nr_rings;
	return false;
#endif
}

/*
 * Reserves len bytes in the ring of the CPU the caller runs on (*rp: that
 * ring), as rp_ring_reserve() does. local: the session's rings are reserved
 * locally by every writer (rp_ring_local_ok() when it started); then this
 * never falls back to the CAS, which would race the plain stores of the
 * writers on that ring's CPU.
 */
static inline __attribute__((always_inline)) struct rp_shm_record *
rp_ring_reserve_here(struct rp_shm *shm, bool local, struct rp_ring **rp, uint32_t len)
{
#ifdef RP_RSEQ_RESERVE
	struct rp_shm_record *rec;
	struct rseq *rs;
	int tries;

	if (rp_likely(local)) {
		if (rp_unlikely(len - (uint32_t)sizeof(*rec) >
				shm->max_record - (uint32_t)sizeof(*rec))) {
			*rp = rp_shm_current_ring(shm);
			return NULL;
		}
		len = (len + RP_REC_ALIGN - 1) & ~(RP_REC_ALIGN - 1);
		rs = rp_rseq_area();
		/* a retry follows a preemption or a migration: a handful is a
		 * storm of them; the write then drops, counted as full */
		for (tries = 0; tries < 64; tries++) {
			/* the kernel's, single-copy atomic; checked again inside
			 * the sequence before the commit */
			uint32_t cpu = rp_load_relaxed(&rs->cpu_id_start);
			int rc;

			*rp = &shm->rings[cpu < shm->nr_rings ? cpu : 0];
			rc = rp_ring_try_local(rs, cpu, *rp, len, &rec);
			if (rp_likely(!rc))
				return rec;
			if (rc > 0)
				return NULL;	/* full (or positions scribbled on) */
		}
		return NULL;
	}
#else
	(void)local;
#endif
	*rp = rp_shm_current_ring(shm);
	return rp_ring_reserve(*rp, len);
}

#endif /* RP_RING_LOCAL_H */
