// SPDX-License-Identifier: MIT
/*
 * The probe of lttng_tp.h, compiled once: linked into lttng_bench itself
 * rather than preloaded, as an application instrumented statically would be.
 */
#define LTTNG_UST_TRACEPOINT_CREATE_PROBES
#define LTTNG_UST_TRACEPOINT_DEFINE
#include "lttng_tp.h"
