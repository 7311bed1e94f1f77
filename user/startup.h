/* SPDX-License-Identifier: MIT */
/* Provider lists and modes as users spell them (environment, CLI, IPC). */
#ifndef RINGPIPE_STARTUP_H
#define RINGPIPE_STARTUP_H

#include <stddef.h>
#include <stdint.h>

#include "ringpipe/ringpipe.h"

/* "Name[:Keywords[:Level[:key=value;...]]],..." -> configs (free with
 * rp_providers_free); on error -EINVAL and a message in err. */
int rp_providers_parse(const char *spec, struct rp_provider_config **out, uint32_t *n,
		       char *err, size_t errlen);
void rp_providers_free(struct rp_provider_config *p, uint32_t n);
/* "drop" / "block" (or 0 / 1); anything else is -EINVAL, never coerced. */
int rp_buffering_parse(const char *s, int *mode);
/* Starts the environment-configured session if RINGPIPE_OUTPUT is set. */
void rp_startup_session(void);

#endif /* RINGPIPE_STARTUP_H */
