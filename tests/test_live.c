// SPDX-License-Identifier: MIT
/*
 * Live streams as the .NET tools consume them: dotnet-trace's stopping event
 * ends its trace soon after the event, because the drainer sends events
 * that trickle in within tens of milliseconds instead of holding them for
 * the next sequence point. This process is the target: it runs the
 * diagnostics IPC server, writes a trigger event once dotnet-trace's
 * session enabled its provider, and times how long after the write that
 * session is stopped (its provider disabled by dotnet-trace's StopTracing).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "atomics.h"
#include "clock.h"
#include "helpers.h"
#include "ringpipe/ringpipe.h"

#define STOP_BOUND_NS 200000000ull	/* the acceptance bound: 200 ms */

static int live_enabled;		/* atomic: sessions enabling the provider */
static uint64_t live_disabled_ns;	/* atomic: when the last one disabled it */

static void live_enable(struct rp_provider *provider, int session_id, bool enabled,
			uint64_t keywords, uint8_t level, const char *args, void *ctx)
{
	if (enabled) {
		rp_add_relaxed(&live_enabled, 1);
	} else {
		rp_store_relaxed(&live_disabled_ns, rp_clock_mono_ns());
		rp_add_relaxed(&live_enabled, -1);
	}
}

Test(live, dotnet_trace_stops_within_200_ms_of_its_stopping_event, .timeout = 180)
{
	static const struct rp_field fields[] = { { "Round", RP_TYPE_U32, 0, 0, NULL } };
	struct rp_provider_opts po = { .sz = sizeof(po), .name = "Ringpipe-Test-Live",
				       .enable_cb = live_enable };
	struct rp_event_opts tick = { .sz = sizeof(tick), .id = 1, .name = "Tick", .level = 4,
				      .nfields = 1, .fields = fields };
	struct rp_event_opts trig = { .sz = sizeof(trig), .id = 2, .name = "Trigger", .level = 4,
				      .nfields = 1, .fields = fields };
	struct rp_ipc_opts io = { .sz = sizeof(io) };
	struct rp_provider *p;
	struct rp_event *ev_tick, *ev_trig;
	char *dir = th_tmpdir(), *cmd;
	uint64_t worst = 0;

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
		deadline = rp_clock_mono_ns() + 60000000000ull;
		while (!rp_load_relaxed(&live_enabled) && rp_clock_mono_ns() < deadline)
			usleep(1000);
		cr_assert(rp_load_relaxed(&live_enabled), "dotnet-trace never enabled the provider");
		/* events before the trigger, so the stream is flowing; then a
		 * pause, so the trigger trickles in alone */
		for (uint32_t i = 0; i < 50; i++) {
			rp_event_write(ev_tick, &i, sizeof(i));
			usleep(10000);
		}
		usleep(300000 + round * 110000);
		rp_store_relaxed(&live_disabled_ns, 0);
		t0 = rp_clock_mono_ns();
		cr_assert_eq(rp_event_write(ev_trig, &round, sizeof(round)), 0);
		deadline = t0 + 30000000000ull;
		while (rp_load_relaxed(&live_enabled) && rp_clock_mono_ns() < deadline)
			usleep(1000);
		t1 = rp_load_relaxed(&live_disabled_ns);
		cr_assert(t1 && !rp_load_relaxed(&live_enabled),
			  "dotnet-trace did not stop its session within 30 s of the trigger");
		cr_assert_eq(waitpid(pid, &status, 0), pid);
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			  "dotnet-trace exited with status %d (log in %s)", status, dir);
		cr_log_info("round %u: session stopped %.1f ms after the trigger", round,
			    (double)(t1 - t0) / 1e6);
		if (t1 - t0 > worst)
			worst = t1 - t0;
	}
	rp_ipc_server_stop();
	cr_assert(worst <= STOP_BOUND_NS, "dotnet-trace stopped %.1f ms after its stopping event "
		  "(bound %.0f ms)", (double)worst / 1e6, STOP_BOUND_NS / 1e6);
	th_rmdir(dir);
}
