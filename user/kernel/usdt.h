/* SPDX-License-Identifier: MIT */
/*
 * libringpipe's own USDT probe, ringpipe:event (Documentation/kernel.md).
 *
 * Fired by the write path once per rp_event_write()/rp_event_writev() call
 * that found the event enabled by at least one session (its session mask
 * non-zero) and whose payload is valid: exactly the writes that become
 * attempts (a sequence number in some session), captured or dropped. A
 * disabled event never reaches it, so the disabled path stays one load and a
 * branch (invariant 1, Documentation/design.md) and a tracer counts the
 * events sessions saw, not every call site that happened to run.
 *
 * Arguments (bpftrace arg0..arg7):
 *   arg0  const char *      provider name
 *   arg1  const char *      event name ("" for events known by id)
 *   arg2  uint32            event id within the provider
 *   arg3  const void *      payload: its first (for rp_event_write() its
 *                           only) segment, NULL when there is none
 *   arg4  uint64            payload length in bytes, all segments
 *   arg5  uint64            session mask (bit n: session slot n; for an
 *                           event with a user_events tracepoint, bit 63
 *                           is that tracepoint's enable bit)
 *   arg6  const struct iovec *  every segment (rp_event_write(): one)
 *   arg7  int32             segment count
 *
 * Guarded by the probe's semaphore: the tracer (bpftrace -p, libbpf's
 * attach_usdt) raises it while attached, and until then the site costs one
 * load of the semaphore and a not-taken branch; the arguments are computed
 * only inside the branch. Build with -DRP_NO_USDT to leave it out.
 */
#ifndef RINGPIPE_USDT_H
#define RINGPIPE_USDT_H

#include <stdint.h>
#include <sys/uio.h>

#include "core/atomics.h"

#ifndef RP_NO_USDT

#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

/* Named by sys/sdt.h's convention <provider>_<probe>_semaphore; defined in
 * usdt.c, in the ".probes" section where tracers expect it. Hidden like
 * every internal symbol: tracers find it through the probe's ELF note
 * (its link-time address), not through the dynamic symbol table. */
extern unsigned short ringpipe_event_semaphore;

/* Non-zero while a tracer is attached to ringpipe:event. */
static inline int rp_usdt_event_armed(void)
{
	/* Relaxed: the kernel (uprobe reference counter) or the tracer
	 * (through /proc/PID/mem) raises it from outside; nothing in this
	 * process pairs with it and a write that misses the very first
	 * moment of an attach is no different from one made just before. */
	return rp_unlikely(rp_load_relaxed(&ringpipe_event_semaphore));
}

#define RP_USDT_EVENT(ev, iov, iovcnt, len, mask)					\
	do {										\
		if (rp_usdt_event_armed())						\
			STAP_PROBE8(ringpipe, event, (ev)->provider->name,		\
				    (ev)->desc.name, (uint32_t)(ev)->desc.event_id,	\
				    (iovcnt) > 0 ? (iov)[0].iov_base : (void *)0,	\
				    (uint64_t)(len), (uint64_t)(mask), (iov),		\
				    (int32_t)(iovcnt));					\
	} while (0)

#else

static inline int rp_usdt_event_armed(void)
{
	return 0;
}

#define RP_USDT_EVENT(ev, iov, iovcnt, len, mask) do { } while (0)

#endif /* RP_NO_USDT */

#endif /* RINGPIPE_USDT_H */
