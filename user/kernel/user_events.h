/* SPDX-License-Identifier: MIT */
/*
 * Publishing a provider's events as Linux user_events tracepoints as well
 * (kernel >= 6.4 with CONFIG_USER_EVENTS; Documentation/kernel.md).
 *
 * Opt-in with RINGPIPE_USER_EVENTS: "1" or "*" for every provider, or a
 * comma-separated list of provider names. Each event of such a provider is
 * registered as the tracepoint user_events:ringpipe_<pid>_<provider>_<event>_<id>
 * (non-alphanumerics become '_'): the pid keeps processes from colliding.
 *
 * The kernel's enable bit is bit 63 of the event's own session mask
 * (enable_addr = &ev->hot.sessions, enable_size 8): a tracer enabling the
 * tracepoint makes the mask non-zero, so rp_event_enabled() and the write
 * path's single load see it and nothing is added to the disabled path. Session
 * slot 63 is therefore reserved (SLOT_RESERVED) once the first tracepoint is
 * registered: such a process runs at most 63 sessions. The kernel sets and
 * clears the bit with atomic bit operations, and every change ringpipe makes
 * to the mask is an atomic read-modify-write of other bits, so neither loses
 * the other's update.
 *
 * Where user_events is missing (this is decided once, when the first event
 * of an opted-in provider is defined) the provider works as before,
 * rp_last_error() says why and the reason is printed to stderr once.
 */
#ifndef RINGPIPE_USER_EVENTS_H
#define RINGPIPE_USER_EVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

struct rp_event;

#define RP_UE_SLOT 63
#define RP_UE_BIT (1ull << RP_UE_SLOT)

/*
 * The runtime check: can user_events_data under TRACEFS (NULL: the
 * standard mounts) be opened for writing? 0 when it can; otherwise a
 * negative errno and a one-line reason in why (-ENOENT: the kernel lacks
 * user_events, or tracefs is not mounted).
 */
int rp_ue_check(const char *tracefs, char *why, size_t n);

/* Does RINGPIPE_USER_EVENTS ask for this provider? */
bool rp_ue_wanted(const char *provider);

/*
 * Under rp_control_lock, for a new event of an opted-in provider: registers
 * its tracepoint. 0, or a negative errno with rp_last_error() set (the
 * event itself stays usable).
 */
int rp_ue_register(struct rp_event *ev);

/* The tracepoint's name, or NULL when the event has none. */
const char *rp_ue_name(const struct rp_event *ev);

/* The write path, with bit 63 set: one writev() to user_events_data. */
int rp_ue_write(const struct rp_event *ev, const struct iovec *iov, int iovcnt, size_t len);

#endif /* RINGPIPE_USER_EVENTS_H */
