/* SPDX-License-Identifier: MIT */
/*
 * The LTTng-UST tracepoint the side-by-side benchmark writes: the same
 * event as bench_event.h's "Small" (u64 counter, u32 thread, u32 extra and a
 * short string), 32 payload bytes. LTTng strings are UTF-8, so the string
 * is 15 characters + NUL (16 bytes, the size of ringpipe's "ringpip" in
 * UTF-16) to keep the payload at 32 bytes.
 *
 * This header is read several times by lttng/tracepoint-event.h (that is
 * how LTTng-UST generates the probe), hence the unusual include guard.
 */
#undef LTTNG_UST_TRACEPOINT_PROVIDER
#define LTTNG_UST_TRACEPOINT_PROVIDER ringpipe_bench

#undef LTTNG_UST_TRACEPOINT_INCLUDE
#define LTTNG_UST_TRACEPOINT_INCLUDE "lttng_tp.h"

#if !defined(RINGPIPE_BENCH_LTTNG_TP_H) || defined(LTTNG_UST_TRACEPOINT_HEADER_MULTI_READ)
#define RINGPIPE_BENCH_LTTNG_TP_H

#include <stdint.h>
#include <lttng/tracepoint.h>

#define LTTNG_BENCH_NAME "ringpipe-bench!"	/* 15 characters: 16 bytes with the NUL */

LTTNG_UST_TRACEPOINT_EVENT(ringpipe_bench, small,
	LTTNG_UST_TP_ARGS(uint64_t, counter, uint32_t, thread, uint32_t, extra,
			  const char *, name),
	LTTNG_UST_TP_FIELDS(
		lttng_ust_field_integer(uint64_t, counter, counter)
		lttng_ust_field_integer(uint32_t, thread, thread)
		lttng_ust_field_integer(uint32_t, extra, extra)
		lttng_ust_field_string(name, name)
	)
)

#endif /* RINGPIPE_BENCH_LTTNG_TP_H */

#include <lttng/tracepoint-event.h>
