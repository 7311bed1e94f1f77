/* SPDX-License-Identifier: MIT */
/* Provider lists and modes as users spell them (environment, CLI, IPC). */
#ifndef RINGPIPE_CONFIG_H
#define RINGPIPE_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "ringpipe/ringpipe.h"

/* "Name[:Keywords[:Level[:key=value;...]]],..." -> configs (free with
 * rp_providers_free); on error -EINVAL and a message in err. */
int rp_providers_parse(const char *spec, struct rp_provider_config **out, uint32_t *n,
		       char *err, size_t errlen);
/* A decimal or 0x-hex number of len bytes, all of them; -1 otherwise. */
int rp_config_u64(const char *s, size_t len, uint64_t *out);
void rp_providers_free(struct rp_provider_config *p, uint32_t n);
/* "drop" / "block" (or 0 / 1); anything else is -EINVAL, never coerced. */
int rp_buffering_parse(const char *s, int *mode);

#endif /* RINGPIPE_CONFIG_H */
