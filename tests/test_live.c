// SPDX-License-Identifier: MIT
/*
 * Live streams as the .NET tools consume them: dotnet-trace's stopping event
 * ends its trace, because the drainer sends events that trickle in instead
 * of holding them for the next sequence point. This process is the target:
 * it runs the diagnostics IPC server, writes a trigger event once
 * dotnet-trace's session enabled its provider, and waits for that session
 * to be stopped (its provider disabled by dotnet-trace's StopTracing). How
 * long after the trigger that takes (tens of milliseconds on a quiet host)
 * is bench_latency's "stopping event" row, not a verdict here.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "atomics.h"
#include "clock.h"
#include "helpers.h"
#include "nettrace_read.h"
#include "ringpipe/ringpipe.h"
#include "watch.h"

static struct enable_watch live;

/* The trigger of round r in file, read back with ringpipe's reader. */
static bool has_trigger(const char *file, uint32_t r)
{
	struct nt_reader *rd = nt_reader_open(file);
	struct nt_rec rec;
	bool seen = false;
	int rc;

	cr_assert_not_null(rd, "cannot read %s", file);
	while ((rc = nt_reader_next(rd, &rec)) == 1)
		if (rec.meta && !strcmp(rec.meta->name, "Trigger") && rec.payload_len == 4 &&
		    !memcmp(rec.payload, &r, 4))
			seen = true;
	cr_assert_eq(rc, 0, "%s: %s", file, nt_reader_errmsg(rd));
	nt_reader_free(rd);
	return seen;
}

Test(live, dotnet_trace_stops_after_its_stopping_event, .timeout = 900)
{
	static const struct rp_field fields[] = { { "Round", RP_TYPE_U32, 0, 0, NULL } };
	struct rp_provider_opts po = { .sz = sizeof(po), .name = "Ringpipe-Test-Live",
				       .enable_cb = enable_watch_cb, .cb_ctx = &live };
	struct rp_event_opts tick = { .sz = sizeof(tick), .id = 1, .name = "Tick", .level = 4,
				      .nfields = 1, .fields = fields };
	struct rp_event_opts trig = { .sz = sizeof(trig), .id = 2, .name = "Trigger", .level = 4,
				      .nfields = 1, .fields = fields };
	struct rp_ipc_opts io = { .sz = sizeof(io) };
	struct rp_provider *p;
	struct rp_event *ev_tick, *ev_trig;
	char *dir = th_tmpdir(), *cmd;

	TH_NEED_DOTNET_TOOL("dotnet-trace");
	cr_assert_not_null(dir);
	p = rp_provider_new(&po);
	ev_tick = rp_event_new(p, &tick);
	ev_trig = rp_event_new(p, &trig);
	cr_assert(ev_tick && ev_trig, "%s", rp_last_error());
	cr_assert_eq(rp_ipc_server_start(&io), 0, "%s", rp_last_error());

	for (uint32_t round = 0; round < 3; round++) {
		uint64_t t0, t1, deadline;
		pid_t pid;
		int status;

		cr_assert(asprintf(&cmd, "cd %s && exec %s/dotnet-trace collect -p %d "
				   "--providers Ringpipe-Test-Live "
				   "--stopping-event-provider-name Ringpipe-Test-Live "
				   "--stopping-event-event-name Trigger "
				   "-o %s/live%u.nettrace >%s/dotnet-trace%u.log 2>&1",
				   dir, th_dotnet_tools(), (int)getpid(), dir, round, dir,
				   round) > 0);
		pid = fork();
		cr_assert_geq(pid, 0);
		if (!pid) {
			execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
			_exit(127);
		}
		free(cmd);
		/* its session is up once the provider is enabled */
		deadline = rp_clock_mono_ns() + 120000000000ull;
		while (!rp_load_relaxed(&live.enabled) && rp_clock_mono_ns() < deadline)
			usleep(1000);
		cr_assert(rp_load_relaxed(&live.enabled), "dotnet-trace never enabled the provider");
		/* events before the trigger, so the stream is flowing; then a
		 * pause, so the trigger trickles in alone */
		for (uint32_t i = 0; i < 50; i++) {
			rp_event_write(ev_tick, &i, sizeof(i));
			usleep(10000);
		}
		usleep(300000 + round * 110000);
		rp_store_relaxed(&live.disabled_ns, 0);
		t0 = rp_clock_mono_ns();
		cr_assert_eq(rp_event_write(ev_trig, &round, sizeof(round)), 0);
		/* no other event comes: only the trigger, delivered while the
		 * session runs, can stop it (the deadline is a hang guard) */
		deadline = t0 + 120000000000ull;
		while (rp_load_relaxed(&live.enabled) && rp_clock_mono_ns() < deadline)
			usleep(1000);
		t1 = rp_load_relaxed(&live.disabled_ns);
		cr_assert(t1 && !rp_load_relaxed(&live.enabled),
			  "dotnet-trace did not stop its session within 120 s of the trigger");
		cr_assert_eq(waitpid(pid, &status, 0), pid);
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			  "dotnet-trace exited with status %d (log in %s)", status, dir);
		cr_log_info("round %u: session stopped %.1f ms after the trigger", round,
			    (double)(t1 - t0) / 1e6);
		cmd = th_fmt("%s/live%u.nettrace", dir, round);
		cr_assert(has_trigger(cmd, round), "round %u's trigger is not in %s", round, cmd);
		free(cmd);
	}
	rp_ipc_server_stop();
	th_rmdir(dir);
}

/* ---- the first events of a session ---------------------------------------- */

#define BURST_EVENTS 2000u

static struct rp_event *burst_ev;

static void burst_enable(struct rp_provider *provider, int session_id, bool enabled,
			 uint64_t keywords, uint8_t level, const char *args, void *ctx)
{
	if (!enabled)
		return;
	for (uint32_t i = 0; i < BURST_EVENTS; i++)
		rp_event_write(burst_ev, &i, sizeof(i));
}

/*
 * Events an enable callback writes at once (a heap walk, a rundown of
 * state) are the session's first: the trace's clock sync point must not be
 * younger than they are, or TraceEvent discards them. An IPC session starts
 * held until its reply is out, so its trace header is written later than
 * those events; the sync point is taken when the session starts.
 */
Test(live, events_from_the_enable_callback_are_not_older_than_the_trace, .timeout = 180)
{
	TH_NEED_TRACEDUMP(dll);
	static const struct rp_field fields[] = { { "I", RP_TYPE_U32, 0, 0, NULL } };
	struct rp_provider_opts po = { .sz = sizeof(po), .name = "Ringpipe-Test-Burst",
				       .enable_cb = burst_enable };
	struct rp_event_opts eo = { .sz = sizeof(eo), .id = 1, .name = "Burst", .level = 4,
				    .nfields = 1, .fields = fields };
	struct rp_ipc_opts io = { .sz = sizeof(io) };
	struct bytebuf out = { 0 };
	char *dir = th_tmpdir(), *cmd, want[64];

	TH_NEED_DOTNET_TOOL("dotnet-trace");
	cr_assert_not_null(dir);
	burst_ev = rp_event_new(rp_provider_new(&po), &eo);
	cr_assert_not_null(burst_ev, "%s", rp_last_error());
	cr_assert_eq(rp_ipc_server_start(&io), 0, "%s", rp_last_error());
	cr_assert(asprintf(&cmd, "cd %s && %s/dotnet-trace collect -p %d --providers "
			   "Ringpipe-Test-Burst --duration 00:00:01 -o %s/burst.nettrace 2>&1",
			   dir, th_dotnet_tools(), (int)getpid(), dir) > 0);
	cr_assert_eq(th_run(cmd, &out), 0, "dotnet-trace collect: %s", (char *)out.p);
	free(cmd);
	rp_ipc_server_stop();
	out.len = 0;
	cr_assert(asprintf(&cmd, "dotnet '%s' counts '%s/burst.nettrace'", dll, dir) > 0);
	cr_assert_eq(th_run(cmd, &out), 0, "TraceEvent: %s", (char *)out.p);
	free(cmd);
	snprintf(want, sizeof(want), "Ringpipe-Test-Burst/Burst\t%u\n", BURST_EVENTS);
	cr_assert(strstr((char *)out.p, want), "TraceEvent does not count %u Burst events:\n%s",
		  BURST_EVENTS, (char *)out.p);
	bb_free(&out);
	/* and none is stamped before the trace's sync point (TraceLog and the
	 * tools built on it, dotnet-stack among them, drop such samples) */
	{
		struct nt_reader *rd;
		struct nt_rec rec;
		uint64_t sync, older = 0, n = 0;
		int rc;

		cr_assert(asprintf(&cmd, "%s/burst.nettrace", dir) > 0);
		rd = nt_reader_open(cmd);
		cr_assert_not_null(rd, "cannot read %s", cmd);
		free(cmd);
		sync = nt_reader_info(rd)->sync_ticks;
		while ((rc = nt_reader_next(rd, &rec)) == 1) {
			if (!rec.meta || strcmp(rec.meta->provider, "Ringpipe-Test-Burst"))
				continue;
			n++;
			older += rec.ts < sync;
		}
		cr_assert_eq(rc, 0, "reader: %s", nt_reader_errmsg(rd));
		cr_assert_eq(n, BURST_EVENTS);
		cr_assert_eq(older, 0, "%" PRIu64 " of %" PRIu64 " events are older than the trace's "
			     "sync point", older, n);
		nt_reader_free(rd);
	}
	th_rmdir(dir);
}
