// SPDX-License-Identifier: MIT
/*
 * The startup session: configured from the environment so a program is traced
 * from its first event without a code change (Documentation/configuration.md).
 *
 *   RINGPIPE_OUTPUT=PATH            start it; "{pid}" in PATH becomes the pid
 *   RINGPIPE_PROVIDERS=SPEC         Name[:Keywords[:Level[:key=value;...]]],...
 *   RINGPIPE_FORMAT=v5|v6           nettrace version (default v5)
 *   RINGPIPE_BUFFER_MB=N            ring budget (default 16)
 *   RINGPIPE_BUFFERING_MODE=drop|block
 *   DOTNET_EventPipeBufferingMode=0|1  the same, as .NET spells it (used when
 *                                   RINGPIPE_BUFFERING_MODE is not set)
 *
 * A malformed value is reported on stderr, naming the variable and what was
 * wrong, and the startup session is not started; the program runs on.
 *
 * RINGPIPE_ENABLE_DIAGNOSTICS=1, RINGPIPE_DIAGNOSTIC_PORTS or
 * DOTNET_DiagnosticPorts also start the diagnostics IPC server here.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "session.h"
#include "startup.h"

static struct rp_session *startup;

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

static int parse_u64_str(const char *s, size_t len, uint64_t *out)
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
		if (k > 1 && fl[1] && parse_u64_str(f[1], fl[1], &c.keywords)) {
			snprintf(err, errlen, "keywords '%.*s' of %.*s are not a number (use 0x... for hex)",
				 (int)fl[1], f[1], (int)fl[0], f[0]);
			goto fail;
		}
		if (k > 2 && fl[2]) {
			uint64_t lv;
			size_t i;

			if (!parse_u64_str(f[2], fl[2], &lv) && lv <= 5) {
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

static void startup_stop(void)
{
	struct rp_session *s = startup;

	startup = NULL;
	if (s && rp_session_stop(s))
		fprintf(stderr, "ringpipe: the startup session's output failed\n");
}

static void startup_fail(const char *var, const char *val, const char *why)
{
	fprintf(stderr, "ringpipe: %s=%s: %s; the startup session was not started\n", var, val, why);
}

/*
 * The diagnostics server starts by itself when the environment asks for it:
 * RINGPIPE_ENABLE_DIAGNOSTICS=1, or diagnostic ports configured (then a
 * suspend port holds the program here, before main(), until a tool resumes it,
 * as the .NET runtime does).
 */
static void startup_ipc(void)
{
	const char *en = getenv("RINGPIPE_ENABLE_DIAGNOSTICS");
	int err;

	if (!(en && !strcmp(en, "1")) && !getenv("RINGPIPE_DIAGNOSTIC_PORTS") &&
	    !getenv("DOTNET_DiagnosticPorts"))
		return;
	err = rp_ipc_server_start(NULL);
	if (err && err != -ECANCELED && err != -EBUSY)
		fprintf(stderr, "ringpipe: the diagnostics server did not start: %s\n",
			*rp_last_error() ? rp_last_error() : strerror(-err));
}

void rp_startup_session(void)
{
	const char *out = getenv("RINGPIPE_OUTPUT"), *v;

	startup_ipc();
	struct rp_session_opts so = { .sz = sizeof(so), .fd = -1 };
	struct rp_provider_config *prov = NULL;
	char err[256], path[4096];
	uint32_t nprov = 0;

	if (!out || !*out || startup)
		return;
	v = getenv("RINGPIPE_PROVIDERS");
	if (rp_providers_parse(v, &prov, &nprov, err, sizeof(err))) {
		startup_fail("RINGPIPE_PROVIDERS", v ? v : "", err);
		return;
	}
	v = getenv("RINGPIPE_FORMAT");
	if (v && *v) {
		if (!strcasecmp(v, "v5") || !strcmp(v, "5"))
			so.format = NT_FORMAT_V5;
		else if (!strcasecmp(v, "v6") || !strcmp(v, "6"))
			so.format = NT_FORMAT_V6;
		else {
			startup_fail("RINGPIPE_FORMAT", v, "must be v5 or v6");
			goto out;
		}
	}
	v = getenv("RINGPIPE_BUFFER_MB");
	if (v && *v) {
		uint64_t mb;

		if (parse_u64_str(v, strlen(v), &mb) || !mb || mb > 65536) {
			startup_fail("RINGPIPE_BUFFER_MB", v, "must be a whole number of MiB from 1 to 65536");
			goto out;
		}
		so.buffer_bytes = mb << 20;
	}
	v = getenv("RINGPIPE_BUFFERING_MODE");
	if (v && *v && rp_buffering_parse(v, &so.buffering)) {
		startup_fail("RINGPIPE_BUFFERING_MODE", v, "must be drop or block");
		goto out;
	}
	/* .NET's spelling, as strict as the runtime: 0 Drop, 1 Block */
	if (!(v && *v) && (v = getenv("DOTNET_EventPipeBufferingMode")) && *v) {
		if (!strcmp(v, "0"))
			so.buffering = RP_BUFFERING_DROP;
		else if (!strcmp(v, "1"))
			so.buffering = RP_BUFFERING_BLOCK;
		else {
			startup_fail("DOTNET_EventPipeBufferingMode", v, "must be 0 (Drop) or 1 (Block)");
			goto out;
		}
	}
	{
		const char *pp = strstr(out, "{pid}");

		if (pp)
			snprintf(path, sizeof(path), "%.*s%d%s", (int)(pp - out), out, getpid(), pp + 5);
		else
			snprintf(path, sizeof(path), "%s", out);
	}
	so.path = path;
	so.providers = prov;
	so.nproviders = nprov;
	startup = rp_session_start(&so);
	if (!startup)
		startup_fail("RINGPIPE_OUTPUT", out, rp_last_error());
	else
		atexit(startup_stop);
out:
	rp_providers_free(prov, nprov);
}
