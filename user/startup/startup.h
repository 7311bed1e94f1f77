/* SPDX-License-Identifier: MIT */
/* The environment's startup session and diagnostics server (startup.c). */
#ifndef RINGPIPE_STARTUP_H
#define RINGPIPE_STARTUP_H

/* Starts the environment-configured session if RINGPIPE_OUTPUT is set, and
 * the diagnostics server if the environment asks for it. */
void rp_startup_session(void);

#endif /* RINGPIPE_STARTUP_H */
