/* SPDX-License-Identifier: MIT */
/*
 * Durations on the command line: one grammar for every option that takes a
 * time (collect --duration, record --duration, sample --duration, gcdump
 * --timeout, ...).
 *
 *   DD:HH:MM:SS    days, hours (0..23), minutes and seconds (0..59), as
 *                  dotnet-trace's --duration takes them
 *   HH:MM:SS       hours (any count), minutes and seconds (0..59)
 *   NUMBER[UNIT]   a decimal number, with a fraction if wanted (1.5, .25),
 *                  in UNIT: ns, us, ms, s, m or h; a bare number is seconds
 *
 * No sign, no spaces, no exponent. The result is rounded to the nearest
 * nanosecond; "0" parses (as 0), so a caller that needs a positive time
 * checks for that itself.
 */
#ifndef RINGPIPE_DURATION_H
#define RINGPIPE_DURATION_H

#include <stdint.h>

/* Parses s into *ns; 0, or -EINVAL (empty, malformed, or more than
 * UINT64_MAX ns) with *ns unchanged. */
int rp_duration_parse(const char *s, uint64_t *ns);

#endif /* RINGPIPE_DURATION_H */
