/* SPDX-License-Identifier: MIT */
/*
 * Memory-order helpers.  All shared-memory accesses that another thread or
 * process may race with go through these, so that the ordering is visible
 * at the call site and ThreadSanitizer sees real atomics.
 *
 * House rule (Documentation/contributing.md, Style): every acquire, release
 * or fence carries a comment "pairs with <function>/<side>" at its call site.
 */
#ifndef RP_ATOMICS_H
#define RP_ATOMICS_H

#define rp_load_relaxed(p)	__atomic_load_n((p), __ATOMIC_RELAXED)
#define rp_load_acquire(p)	__atomic_load_n((p), __ATOMIC_ACQUIRE)
#define rp_store_relaxed(p, v)	__atomic_store_n((p), (v), __ATOMIC_RELAXED)
#define rp_store_release(p, v)	__atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define rp_add_relaxed(p, v)	((void)__atomic_fetch_add((p), (v), __ATOMIC_RELAXED))
#define rp_fetch_add_relaxed(p, v) __atomic_fetch_add((p), (v), __ATOMIC_RELAXED)
#define rp_xchg_relaxed(p, v)	__atomic_exchange_n((p), (v), __ATOMIC_RELAXED)

#define rp_fetch_add_release(p, v) __atomic_fetch_add((p), (v), __ATOMIC_RELEASE)
#define rp_fetch_add_acq_rel(p, v) __atomic_fetch_add((p), (v), __ATOMIC_ACQ_REL)
#define rp_fetch_sub_release(p, v) __atomic_fetch_sub((p), (v), __ATOMIC_RELEASE)
#define rp_or_relaxed(p, v)	((void)__atomic_fetch_or((p), (v), __ATOMIC_RELAXED))
#define rp_and_relaxed(p, v)	((void)__atomic_fetch_and((p), (v), __ATOMIC_RELAXED))
#define rp_xchg_acq_rel(p, v)	__atomic_exchange_n((p), (v), __ATOMIC_ACQ_REL)
/* Strong CAS, relaxed on failure: true when *p was *expected. */
#define rp_cas_acq_rel(p, expected, desired)					\
	__atomic_compare_exchange_n((p), (expected), (desired), 0,		\
				    __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)
/* A compiler barrier: orders this thread's accesses for the compiler only.
 * The other side of such a pairing pays for the hardware order (membarrier,
 * see futex.h's asymmetric fence). */
#define rp_compiler_barrier()	__atomic_signal_fence(__ATOMIC_SEQ_CST)

/* Weak CAS: on failure *expected is refreshed with the current value. */
#define rp_cas_weak_relaxed(p, expected, desired)				\
	__atomic_compare_exchange_n((p), (expected), (desired), 1,		\
				    __ATOMIC_RELAXED, __ATOMIC_RELAXED)

/*
 * Full barrier.  GCC's TSan does not model __atomic_thread_fence and warns
 * (-Wtsan, fatal under -Werror); under TSan use a seq_cst RMW on a private
 * word instead, which is a full barrier on every architecture we build
 * for, though TSan only models it for that word.
 */
#ifdef __SANITIZE_THREAD__
static inline void rp_smp_mb(void)
{
	static int dummy;

	(void)__atomic_fetch_add(&dummy, 0, __ATOMIC_SEQ_CST);
}
#else
#define rp_smp_mb()		__atomic_thread_fence(__ATOMIC_SEQ_CST)
#endif

/* Spin-wait hint. */
#if defined(__x86_64__) || defined(__i386__)
#define rp_cpu_relax()		__builtin_ia32_pause()
#elif defined(__aarch64__)
#define rp_cpu_relax()		__asm__ __volatile__("yield" ::: "memory")
#else
#define rp_cpu_relax()		__asm__ __volatile__("" ::: "memory")
#endif

#define rp_likely(x)		__builtin_expect(!!(x), 1)
#define rp_unlikely(x)		__builtin_expect(!!(x), 0)

#endif /* RP_ATOMICS_H */
