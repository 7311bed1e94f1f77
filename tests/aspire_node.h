/* SPDX-License-Identifier: MIT */
/*
 * Test harness: a real Aspire dashboard (NuGet Aspire.Dashboard.Sdk.linux-x64,
 * a self-contained build that scripts/deps.sh restores) as the OTLP
 * receiver, on free loopback ports: OTLP/HTTP for the agent to send to, and
 * the frontend, whose telemetry API (GET /api/telemetry/logs) shows what it
 * received, as OTLP/JSON. Unsecured (no API key, anonymous frontend): it
 * listens on loopback only and lives as long as the test. It dies with the
 * test process that started it (PR_SET_PDEATHSIG, clickhouse_node.h's
 * th_daemon_spawn()).
 *
 * Without the package the caller skips, with the reason, unless
 * RINGPIPE_REQUIRE_FLEET=1, which makes that a failure.
 */
#ifndef RINGPIPE_TEST_ASPIRE_NODE_H
#define RINGPIPE_TEST_ASPIRE_NODE_H

#include <stdint.h>

#include "clickhouse_node.h"
#include "helpers.h"
#include "wire/http_conn.h"

#define TH_ASPIRE_VERSION "13.6.5"
/* the dashboard keeps this many log records (its default is 10,000) */
#define TH_ASPIRE_MAX_LOGS 200000

struct th_aspire {
	char *dir;
	pid_t pid;		/* 0 when not running */
	uint16_t otlp_port, ui_port;
	char otlp_url[64];	/* http[s]://127.0.0.1:OTLP (the agent adds /v1/logs) */
	bool tls;		/* OTLP over https: th_aspire_use_tls() */
};

/* The dashboard's executable: RINGPIPE_ASPIRE_DASHBOARD, or where a NuGet
 * restore puts the package (NUGET_PACKAGES, else ~/.nuget/packages) */
static inline const char *th_aspire_bin(void)
{
	static char path[4096];
	const char *pkgs = getenv("NUGET_PACKAGES"), *home = getenv("HOME");

	if (getenv("RINGPIPE_ASPIRE_DASHBOARD"))
		return getenv("RINGPIPE_ASPIRE_DASHBOARD");
	if (pkgs && *pkgs)
		snprintf(path, sizeof(path), "%s", pkgs);
	else
		snprintf(path, sizeof(path), "%s/.nuget/packages", home ? home : "/root");
	snprintf(path + strlen(path), sizeof(path) - strlen(path),
		 "/aspire.dashboard.sdk.linux-x64/" TH_ASPIRE_VERSION "/tools/Aspire.Dashboard");
	return path;
}

/* Skips (or fails, with RINGPIPE_REQUIRE_FLEET=1) without the dashboard. */
#define TH_NEED_ASPIRE()                                                        \
	do {                                                                    \
		if (access(th_aspire_bin(), X_OK)) {                            \
			if (th_require_fleet())                                 \
				cr_assert_fail("RINGPIPE_REQUIRE_FLEET=1 but the "      \
					       "Aspire dashboard %s is missing (make "  \
					       "deps restores Aspire.Dashboard.Sdk."    \
					       "linux-x64 " TH_ASPIRE_VERSION ")",      \
					       th_aspire_bin());                        \
			cr_skip_test("the Aspire dashboard %s is not installed "   \
				     "(make deps restores the NuGet package "  \
				     "Aspire.Dashboard.Sdk.linux-x64 "         \
				     TH_ASPIRE_VERSION ")", th_aspire_bin());   \
		}                                                               \
	} while (0)

/* GET target of the frontend: its status (0: no answer), the body in out */
static inline int th_aspire_get(const struct th_aspire *a, const char *target,
				struct bytebuf *out)
{
	struct http_conn c;
	struct http_request rq = { .method = "GET", .target = target };
	struct http_response r = { 0 };
	char port[8], err[256];
	int status = 0;

	snprintf(port, sizeof(port), "%u", a->ui_port);
	http_conn_init(&c, false, "127.0.0.1", port, NULL, 10000);
	if (!http_conn_request(&c, &rq, &r, err, sizeof(err))) {
		status = r.status;
		if (out && r.body.len)
			bb_append(out, r.body.p, r.body.len);
		if (out && !bb_reserve(out, 1))
			out->p[out->len] = 0;	/* th_text() reads it as a string */
	}
	http_response_free(&r);
	http_conn_free(&c);
	return status;
}

/* A temporary directory and free ports; nothing runs yet. */
static inline void th_aspire_init(struct th_aspire *a)
{
	TH_NEED_ASPIRE();
	memset(a, 0, sizeof(*a));
	a->dir = th_tmpdir();
	cr_assert_not_null(a->dir, "no temporary directory: %s", strerror(errno));
	a->otlp_port = th_free_port();
	do
		a->ui_port = th_free_port();
	while (a->ui_port == a->otlp_port);
	snprintf(a->otlp_url, sizeof(a->otlp_url), "http://127.0.0.1:%u", a->otlp_port);
}

/* OTLP over https once started, Kestrel's certificate the test CA's
 * server.pem (clickhouse_node.h's th_tls_dir()); its URL says https */
static inline void th_aspire_use_tls(struct th_aspire *a)
{
	a->tls = true;
	snprintf(a->otlp_url, sizeof(a->otlp_url), "https://127.0.0.1:%u", a->otlp_port);
}

/* Starts the dashboard on the ports th_aspire_init() picked and waits
 * until its API answers (its log in dir/dashboard.out). */
static inline void th_aspire_start(struct th_aspire *a)
{
	char *argv[16];
	size_t i, n = 0;
	int st;

	argv[n++] = "/usr/bin/env";
	argv[n++] = th_fmt("ASPNETCORE_URLS=http://127.0.0.1:%u", a->ui_port);
	argv[n++] = th_fmt("ASPIRE_DASHBOARD_OTLP_HTTP_ENDPOINT_URL=%s", a->otlp_url);
	argv[n++] = "ASPIRE_DASHBOARD_UNSECURED_ALLOW_ANONYMOUS=true";
	argv[n++] = "DASHBOARD__OTLP__AUTHMODE=Unsecured";
	argv[n++] = "DASHBOARD__API__AUTHMODE=Unsecured";
	argv[n++] = th_fmt("DASHBOARD__TELEMETRYLIMITS__MAXLOGCOUNT=%d", TH_ASPIRE_MAX_LOGS);
	argv[n++] = "DOTNET_CLI_TELEMETRY_OPTOUT=1";
	if (a->tls) {
		argv[n++] = th_fmt("ASPNETCORE_Kestrel__Certificates__Default__Path=%s",
				   th_tls_file("server.pem"));
		argv[n++] = th_fmt("ASPNETCORE_Kestrel__Certificates__Default__KeyPath=%s",
				   th_tls_file("server.key"));
	}
	argv[n++] = (char *)th_aspire_bin();
	argv[n] = NULL;
	a->pid = th_daemon_spawn(a->dir, "dashboard.out", argv);
	for (i = 0; i < 2400; i++) {	/* 120 s: a loaded host starts it slowly */
		if (waitpid(a->pid, &st, WNOHANG) == a->pid) {
			struct bytebuf log = { 0 };

			a->pid = 0;
			th_read_file(th_fmt("%s/dashboard.out", a->dir), &log);
			cr_assert_fail("the Aspire dashboard exited (status 0x%x): %s", st,
				       th_text(&log));
		}
		if (th_aspire_get(a, "/api/telemetry/logs?limit=1", NULL) == 200)
			return;
		usleep(50000);
	}
	cr_assert_fail("the Aspire dashboard (pid %d, %s) did not answer on port %u in 120 s",
		       a->pid, a->dir, a->ui_port);
}

/* Every log record it holds, as its API gives them (OTLP/JSON) */
static inline void th_aspire_logs(const struct th_aspire *a, struct bytebuf *out)
{
	out->len = 0;
	cr_assert_eq(th_aspire_get(a, th_fmt("/api/telemetry/logs?limit=%d", TH_ASPIRE_MAX_LOGS),
				   out), 200, "GET /api/telemetry/logs: %s", th_text(out));
}

static inline void th_aspire_stop(struct th_aspire *a)
{
	th_daemon_stop(&a->pid);
	if (a->dir && !getenv("RINGPIPE_KEEP"))
		th_rmdir(a->dir);
	a->dir = NULL;
}

#endif /* RINGPIPE_TEST_ASPIRE_NODE_H */
