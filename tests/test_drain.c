// SPDX-License-Identifier: MIT
/*
 * The drainer (user/session/drain.c): how it sleeps and wakes, and the
 * figures it reports while a session runs.
 *
 * The wake handshake (fence.h): a producer commits, then reads the drainer's
 * idle flag; the drainer raises the flag, then looks at the rings. Closed by
 * an asymmetric fence for producers in this process; for any other writer
 * the designed bound of a missed wake is the drainer's idle sleep (20 ms).
 * The tests here judge what happens; how soon (the missed wake, the wake,
 * a live stream's lag) is measured by bench/bench_latency.c.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "helpers.h"
#include "ringpipe/ringpipe.h"
#include "watch.h"
#include "session.h"

/* A hang guard for every wait here: a loaded host is slow, not stuck */
#define HANG_NS 60000000000ull

static const struct rp_field fields[] = {
	{ "A", RP_TYPE_U64, 0, 0, NULL },
	{ "B", RP_TYPE_U64, 0, 0, NULL },
	{ "C", RP_TYPE_U64, 0, 0, NULL },
	{ "D", RP_TYPE_U64, 0, 0, NULL },
};

static struct rp_event *event(const char *prov)
{
	struct rp_provider_opts po = { .sz = sizeof(po), .name = prov };
	struct rp_event_opts eo = { .sz = sizeof(eo), .id = 1, .name = "E", .level = 4,
				    .nfields = 4, .fields = fields };
	struct rp_event *ev = rp_event_new(rp_provider_new(&po), &eo);

	cr_assert_not_null(ev, "%s", rp_last_error());
	return ev;
}

static struct rp_session *start(const char *prov, const char *path, uint64_t bytes)
{
	static struct rp_provider_config pc;
	struct rp_session_opts so = { .sz = sizeof(so), .nproviders = 1, .buffer_bytes = bytes,
				      .path = path };
	struct rp_session *s;

	pc = (struct rp_provider_config){ .name = prov };
	so.providers = &pc;
	s = rp_session_start(&so);
	cr_assert_not_null(s, "%s", rp_last_error());
	return s;
}

/* Waits until the drainer has declared itself idle (about to sleep on its
 * futex); the bound is a hang guard. */
static void until_idle(struct rp_session *s)
{
	struct rp_shm_session *h = rp_shm_header(s->shm);
	uint64_t end = rp_clock_mono_ns() + HANG_NS;

	while (!rp_load_relaxed(&h->drainer_idle)) {
		cr_assert_lt(rp_clock_mono_ns(), end, "the drainer never went idle");
		usleep(200);
	}
}

/* Writes n events at once (more than the wake watermark when n is large)
 * and waits until the drainer has written them all out. */
static void burst(struct rp_session *s, struct rp_event *ev, uint64_t base, uint32_t n)
{
	struct rp_session_stats st;
	uint64_t p[4] = { 0 };
	uint32_t i;

	for (i = 0; i < n; i++)
		cr_assert_eq(rp_event_write(ev, p, sizeof(p)), 0);
	th_wait_written(s, base + n, HANG_NS / 1000000, &st);
	cr_assert_eq(st.events_written, base + n, "the drainer wrote %" PRIu64 " of the %" PRIu64
		     " events in %llu s", st.events_written, base + n, HANG_NS / 1000000000);
}

/* With every producer wake suppressed (as if each were missed), a burst
 * still reaches the output: the drainer's idle sleep ends, and it finds
 * the records itself. (How soon, the idle sleep's 20 ms by design, is
 * bench_latency's "missed wake" row.) */
Test(drain, a_missed_wake_still_gets_the_burst_out, .timeout = 600)
{
	struct rp_event *ev = event("Test-Drain-Missed");
	struct rp_session *s = start("Test-Drain-Missed", "/dev/null", 1 << 20);
	uint64_t base = 0;
	int round;

	rp_store_relaxed(&rp_test_no_drainer_wake, 1);
	for (round = 0; round < 10; round++) {
		until_idle(s);
		/* 6,000 records of 64 bytes: over the watermark of a 512 KiB ring */
		burst(s, ev, base, 6000);
		base += 6000;
	}
	rp_store_relaxed(&rp_test_no_drainer_wake, 0);
	cr_assert_eq(rp_session_stop(s), 0);
}

/* With wakes on, a burst over the watermark into an idle drainer wakes it:
 * the producer that crosses the watermark bumps the drainer's wake word
 * before its FUTEX_WAKE. A round whose writer lost its CPU for longer
 * than the idle sleep finds the drainer awake already (it woke on its
 * own), so not every round must; some must, and every burst gets out.
 * (How soon is bench_latency's "wake" row.) */
Test(drain, a_burst_over_the_watermark_wakes_the_idle_drainer, .timeout = 600)
{
	struct rp_event *ev = event("Test-Drain-Wake");
	struct rp_session *s = start("Test-Drain-Wake", "/dev/null", 1 << 20);
	struct rp_shm_session *h = rp_shm_header(s->shm);
	uint64_t base = 0;
	int round, woken = 0;

	for (round = 0; round < 20; round++) {
		uint32_t w0;

		until_idle(s);
		w0 = rp_load_relaxed(&h->drainer_wake);
		/* 7,000 records of 64 bytes: past the watermark (128 KiB),
		 * within the ring (512 KiB) */
		burst(s, ev, base, 7000);
		if (rp_load_relaxed(&h->drainer_wake) != w0)
			woken++;
		base += 7000;
	}
	cr_assert_eq(rp_session_stop(s), 0);
	cr_log_info("%d of 20 bursts woke the drainer", woken);
	cr_assert_geq(woken, 1, "no burst of 20 woke the idle drainer: the wake is lost");
}

/* bytes_written follows the output while the session runs, not only at
 * sequence points and at stop. */
Test(drain, bytes_written_follows_the_output_while_running)
{
	struct rp_event *ev = event("Test-Drain-Bytes");
	char *dir = th_tmpdir(), path[512];
	struct rp_session_stats st = { .sz = sizeof(st) };
	struct rp_session *s;
	struct stat sb;
	uint64_t p[4] = { 0 };
	uint32_t i, n = 20000;

	snprintf(path, sizeof(path), "%s/bytes.nettrace", dir);
	{
		struct rp_provider_config pc = { .name = "Test-Drain-Bytes" };
		struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
					      .buffer_bytes = 8 << 20, .path = path,
					      .sp_interval_ms = 600000 };

		s = rp_session_start(&so);
		cr_assert_not_null(s, "%s", rp_last_error());
	}
	for (i = 0; i < n; i++)
		cr_assert_eq(rp_event_write(ev, p, sizeof(p)), 0);
	th_wait_written(s, n, HANG_NS / 1000000, &st);
	cr_assert_eq(st.events_written, n, "the drainer wrote %" PRIu64 " of %u events",
		     st.events_written, n);
	cr_assert_eq(st.sequence_points, 0, "no sequence point may have passed (600 s interval)");
	/* 20,000 events of 32 payload bytes: at least the full blocks are out */
	cr_assert_geq(st.bytes_written, (uint64_t)n * 32 / 2,
		      "bytes_written %" PRIu64 " lags the %u events written", st.bytes_written, n);
	cr_assert_eq(rp_session_stop(s), 0);
	cr_assert_eq(stat(path, &sb), 0);
	cr_assert_gt((uint64_t)sb.st_size, st.bytes_written);
	th_rmdir(dir);
}

/* ---- live streams --------------------------------------------------------- */

#define LAG_EVENTS 6

/*
 * A live reader sees every event that trickles in while the session runs,
 * each before the next is written: events a few hundred milliseconds apart,
 * each looked for in the stream as it arrives. (The lag, tens of
 * milliseconds on a quiet host, is bench_latency's "live stream" row.)
 */
Test(drain, a_live_stream_shows_every_trickled_event_while_it_runs, .timeout = 600)
{
	static const struct rp_field raw[] = { { "Text", RP_TYPE_STRING, 0, 0, NULL } };
	struct rp_provider_opts po = { .sz = sizeof(po), .name = "Test-Drain-Live" };
	struct rp_event_opts eo = { .sz = sizeof(eo), .id = 1, .name = "Mark", .level = 4,
				    .nfields = 1, .fields = raw };
	struct rp_event *ev = rp_event_new(rp_provider_new(&po), &eo);
	struct rp_provider_config pc = { .name = "Test-Drain-Live" };
	struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1 };
	struct stream_reader rd = { .lock = PTHREAD_MUTEX_INITIALIZER };
	struct rp_session *s;
	pthread_t th;
	int sv[2];

	cr_assert_not_null(ev, "%s", rp_last_error());
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	rd.fd = sv[1];
	cr_assert_eq(pthread_create(&th, NULL, stream_reader_main, &rd), 0);
	so.path = NULL;
	so.fd = sv[0];
	s = rp_session_start(&so);
	cr_assert_not_null(s, "%s", rp_last_error());
	for (int k = 0; k < LAG_EVENTS; k++) {
		char marker[32];
		uint16_t u16[32];
		uint64_t t0, t1;
		size_t n;

		usleep(230000);	/* apart, and not in step with the 1 s points */
		/* the marker as the stream carries it: UTF-16LE */
		n = (size_t)snprintf(marker, sizeof(marker), "LAGMARK%02d", k);
		for (size_t i = 0; i <= n; i++)
			u16[i] = (uint16_t)marker[i];
		t0 = rp_clock_mono_ns();
		cr_assert_eq(rp_event_write(ev, u16, (n + 1) * 2), 0);
		t1 = stream_reader_arrival(&rd, marker, HANG_NS);
		cr_assert(t1, "event %d never reached the live reader (%llu s)", k,
			  HANG_NS / 1000000000);
		cr_log_info("event %d: in the stream %.1f ms after the write", k,
			    (double)(t1 - t0) / 1e6);
	}
	cr_assert_eq(rp_session_stop(s), 0);
	close(sv[0]);
	pthread_join(th, NULL);
	close(sv[1]);
	stream_reader_free(&rd);
}
