/* SPDX-License-Identifier: MIT */
/*
 * Asymmetric fences for the store-then-load handshakes between producers
 * and the library's own threads.
 *
 * Two handshakes have the shape "I store, then load what you store": a
 * producer announces itself (in_write) and then reads a slot's state, while
 * stop marks the slot and then scans the announcements; a producer commits a
 * record and then reads the drainer's idle flag, while the drainer raises
 * the flag and then looks at the rings. Without a full barrier on both sides
 * each can miss the other's store (store buffering). Producers write
 * millions of times a second and must not pay a barrier each time, so the
 * cost moves to the rare side: rp_fence_light() on the producer is a
 * compiler barrier, and rp_fence_heavy() on the other side is
 * membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED), which makes every running
 * thread of the process execute a full barrier before it returns. Where the
 * kernel lacks membarrier both sides pay a full barrier.
 *
 * membarrier orders only the threads of the calling process: a drainer in
 * another process (a host agent) gets no such guarantee, and a missed wake
 * there costs at most its idle timeout (see sleep_idle() in drain.c).
 */
#ifndef RP_FENCE_H
#define RP_FENCE_H

#include <stdbool.h>

#include "atomics.h"

/* 1 once the process registered for expedited membarrier; set once by
 * rp_fence_init() before any thread relies on it. */
extern int rp_membarrier_ok;

/* Registers the process for expedited membarrier (once; cheap after). */
void rp_fence_init(void);

/* The producers' half: free when membarrier works. */
static inline void rp_fence_light(void)
{
	if (rp_likely(rp_load_relaxed(&rp_membarrier_ok)))
		rp_compiler_barrier();
	else
		rp_smp_mb();
}

/* The rare side's half: after it, every store another thread of this
 * process made before its rp_fence_light() is visible, and this thread's
 * earlier stores are visible to what any thread loads after its
 * rp_fence_light(). */
void rp_fence_heavy(void);

#endif /* RP_FENCE_H */
