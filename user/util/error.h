/* SPDX-License-Identifier: MIT */
/* The text behind rp_last_error(): one per thread, set where an error starts. */
#ifndef RINGPIPE_ERROR_H
#define RINGPIPE_ERROR_H

void rp_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif /* RINGPIPE_ERROR_H */
