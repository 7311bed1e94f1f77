// SPDX-License-Identifier: MIT
/*
 * The semaphore of the ringpipe:event USDT probe (see usdt.h). Its own file
 * so that libringpipe.a carries it in one member that the write path's
 * member pulls in; the probe sites live in write.c.
 */
#include "usdt.h"

#ifndef RP_NO_USDT
/* ".probes" is where sys/sdt.h semaphores live: tracers and tools such as
 * `readelf -n` expect it, and the ELF note records this variable's address.
 * A counter, not a flag: every attached tracer adds one. */
__attribute__((section(".probes"), used)) unsigned short ringpipe_event_semaphore;
#endif
