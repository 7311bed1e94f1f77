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
#include "config.h"
#include "duration.h"
#include "startup.h"

static struct rp_session *startup;

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

		if (rp_config_u64(v, strlen(v), &mb) || !mb || mb > 65536) {
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
	v = getenv("RINGPIPE_BLOCK_TIMEOUT");
	if (v && *v && strcmp(v, "0")) {
		uint64_t ns;

		if (rp_duration_parse(v, &ns) || ns < 1000000 || ns > UINT32_MAX * 1000000ull) {
			startup_fail("RINGPIPE_BLOCK_TIMEOUT", v,
				     "must be a time of at least 1ms (500ms, 2s), or 0 for none");
			goto out;
		}
		so.block_timeout_ms = (uint32_t)(ns / 1000000);
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

/* Programs linking libringpipe (statically or not) get the environment's
 * startup session before main(). */
__attribute__((constructor)) static void ringpipe_startup(void)
{
	rp_startup_session();
	/* and the host agent, when there is one (Documentation/agent.md) */
	rp_agent_join_start();
}
