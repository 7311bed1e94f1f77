// SPDX-License-Identifier: MIT
/* Provider lists and buffering modes as users spell them: the environment,
 * the command line and the IPC server all parse them here. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config.h"

static const struct {
	const char *name;
	uint8_t level;
} level_names[] = {
	{ "LogAlways", 0 }, { "Critical", 1 }, { "Error", 2 }, { "Warning", 3 },
	{ "Informational", 4 }, { "Verbose", 5 },
};

void rp_providers_free(struct rp_provider_config *p, uint32_t n)
{
	uint32_t i;

	for (i = 0; p && i < n; i++) {
		free((char *)p[i].name);
		free((char *)p[i].args);
	}
	free(p);
}

int rp_config_u64(const char *s, size_t len, uint64_t *out)
{
	char buf[32], *end;
	int base = 10;

	if (!len || len >= sizeof(buf))
		return -1;
	memcpy(buf, s, len);
	buf[len] = 0;
	if (len > 2 && buf[0] == '0' && (buf[1] == 'x' || buf[1] == 'X'))
		base = 16;
	else if (!isdigit((unsigned char)buf[0]))
		return -1;
	errno = 0;
	*out = strtoull(buf, &end, base);
	return errno || *end ? -1 : 0;
}

int rp_providers_parse(const char *spec, struct rp_provider_config **out, uint32_t *nout,
		       char *err, size_t errlen)
{
	struct rp_provider_config *v = NULL;
	uint32_t n = 0, cap = 0;
	const char *p = spec;

	*out = NULL;
	*nout = 0;
	if (!spec || !*spec) {
		snprintf(err, errlen, "no provider given");
		return -EINVAL;
	}
	while (*p) {
		const char *end = strchr(p, ','), *f[4] = { 0 };
		size_t len = end ? (size_t)(end - p) : strlen(p), fl[4] = { 0 };
		struct rp_provider_config c = { 0 };
		const char *q = p;
		int k = 0;

		/* up to 4 ':'-separated parts; the 4th (args) may hold ':' */
		while (k < 4) {
			const char *colon = k < 3 ? memchr(q, ':', len - (size_t)(q - p)) : NULL;

			f[k] = q;
			fl[k] = colon ? (size_t)(colon - q) : len - (size_t)(q - p);
			k++;
			if (!colon)
				break;
			q = colon + 1;
		}
		if (!fl[0]) {
			snprintf(err, errlen, "empty provider name in '%.*s'", (int)len, p);
			goto fail;
		}
		if (k > 1 && fl[1] && rp_config_u64(f[1], fl[1], &c.keywords)) {
			snprintf(err, errlen, "keywords '%.*s' of %.*s are not a number (use 0x... for hex)",
				 (int)fl[1], f[1], (int)fl[0], f[0]);
			goto fail;
		}
		if (k > 2 && fl[2]) {
			uint64_t lv;
			size_t i;

			if (!rp_config_u64(f[2], fl[2], &lv) && lv <= 5) {
				c.level = (uint8_t)lv;
			} else {
				for (i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++)
					if (strlen(level_names[i].name) == fl[2] &&
					    !strncasecmp(level_names[i].name, f[2], fl[2]))
						break;
				if (i == sizeof(level_names) / sizeof(level_names[0])) {
					snprintf(err, errlen,
						 "level '%.*s' of %.*s is not 0-5 or a level name (Critical, Error, Warning, Informational, Verbose)",
						 (int)fl[2], f[2], (int)fl[0], f[0]);
					goto fail;
				}
				c.level = level_names[i].level;
			}
		}
		if (n == cap) {
			struct rp_provider_config *nv;

			cap = cap ? cap * 2 : 4;
			nv = realloc(v, cap * sizeof(*nv));
			if (!nv)
				goto nomem;
			v = nv;
		}
		c.name = strndup(f[0], fl[0]);
		c.args = k > 3 && fl[3] ? strndup(f[3], fl[3]) : NULL;
		v[n++] = c;
		if (!c.name || (k > 3 && fl[3] && !c.args))
			goto nomem;
		if (!end)
			break;
		p = end + 1;
		if (!*p) {
			snprintf(err, errlen, "trailing ',' in the provider list");
			goto fail;
		}
	}
	*out = v;
	*nout = n;
	return 0;
nomem:
	snprintf(err, errlen, "out of memory");
fail:
	rp_providers_free(v, n);
	return -EINVAL;
}

int rp_buffering_parse(const char *s, int *mode)
{
	if (!strcasecmp(s, "drop") || !strcmp(s, "0")) {
		*mode = RP_BUFFERING_DROP;
		return 0;
	}
	if (!strcasecmp(s, "block") || !strcmp(s, "1")) {
		*mode = RP_BUFFERING_BLOCK;
		return 0;
	}
	return -EINVAL;
}

