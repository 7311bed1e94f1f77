// SPDX-License-Identifier: MIT
/*
 * How soon things happen: the figures the tests do not judge, since a loaded
 * host stretches every one of them (invariant 10 of Documentation/design.md;
 * the tests keep the outcomes: every event arrives, the session stops,
 * nothing is lost while the drainer holds back).
 *
 *   bench_latency [--quick] [--kv]
 *
 *   missed wake   every producer wake suppressed (the rp_test_no_drainer_wake
 *                 hook), a burst of 6,000 64-byte records into the idle
 *                 drainer's 1 MiB Drop session: first write until the
 *                 drainer has written them all. By design the drainer's idle
 *                 sleep (20 ms) bounds it.
 *   wake          the same with wakes, 7,000 records (past the ring's wake
 *                 watermark, within the ring): the writer that crosses the
 *                 watermark wakes the drainer; how many bursts moved its wake
 *                 word.
 *   live lag      a streaming session to a socket; an event every 230 ms
 *                 (out of step with the 1 s sequence points), from its write
 *                 until its bytes reach the reader.
 *   stopping event  dotnet-trace collect --stopping-event-* against this
 *                 process's IPC server: the trigger's write until
 *                 dotnet-trace's StopTracing disabled the provider (skipped
 *                 without dotnet-trace in RINGPIPE_DOTNET_TOOLS, default
 *                 .output/dotnet-tools).
 *   stop          rp_session_stop() of an idle Drop session; of a 1 MiB Block
 *                 session whose 4 writers write flat out (parked, most of
 *                 them), until it returned and until the last writer was out.
 *   step aside    a writer pinned to a CPU writes 20 bursts of 200,000 events
 *                 30 ms apart; the drainer's CPU (/proc) is looked at every
 *                 200 us during bursts: the share of looks that find it on the
 *                 writer's CPU (step_aside() in drain.c moves it off).
 *   holding back  a writer pinned to every CPU puts 3/8 of its 32 MiB ring in
 *                 it at once: the bursts the drainer did not read a byte of
 *                 before the first writer finished (defer_for() in drain.c);
 *                 then bursts of 7/8, which must lose nothing.
 *
 * Each figure is the median over the runs, min and max beside it. --kv
 * prints "key value" lines instead of the table.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "atomics.h"
#include "clock.h"
#include "ringpipe/ringpipe.h"
#include "session.h"
#include "bench_env.h"
#include "bench_event.h"
#include "watch.h"

static bool quick, kv;
static char tmpdir[4096];
static cpu_set_t allowed_cpus;
static int cpus[2], nr_cpus;

static double ms_of(uint64_t ns)
{
	return (double)ns / 1e6;
}

/* ---- output ---------------------------------------------------------------- */

/* One row: a measure's median, min and max over n runs, and a note. */
static void row(const char *key, const char *what, const double *v, unsigned int n,
		const char *note)
{
	struct stat3 s;

	if (!n) {
		if (kv)
			printf("%s.skip %s\n", key, note);
		else
			printf("| %s | — | — | — | 0 | %s |\n", what, note);
		return;
	}
	s = summarize(v, n);
	if (kv)
		printf("%s %.3f\n%s_min %.3f\n%s_max %.3f\n", key, s.med, key, s.min, key, s.max);
	else
		printf("| %s | %.2f | %.2f | %.2f | %u | %s |\n", what, s.med, s.min, s.max, n,
		       note);
}

/* ---- the drainer's wake ------------------------------------------------------ */

static const struct rp_field four_u64[] = {
	{ "A", RP_TYPE_U64, 0, 0, NULL },
	{ "B", RP_TYPE_U64, 0, 0, NULL },
	{ "C", RP_TYPE_U64, 0, 0, NULL },
	{ "D", RP_TYPE_U64, 0, 0, NULL },
};

static struct rp_event *event_of(const char *prov, const struct rp_field *f, uint32_t nf)
{
	struct rp_provider_opts po = { .sz = sizeof(po), .name = prov };
	struct rp_event_opts eo = { .sz = sizeof(eo), .id = 1, .name = "E", .level = 4,
				    .nfields = nf, .fields = f };
	struct rp_provider *p = rp_provider_new(&po);
	struct rp_event *ev = p ? rp_event_new(p, &eo) : NULL;

	if (!ev) {
		fprintf(stderr, "bench_latency: %s: %s\n", prov, rp_last_error());
		exit(1);
	}
	return ev;
}

static struct rp_session *session_to(const char *prov, const char *path, int fd, uint64_t bytes,
				     int mode)
{
	static struct rp_provider_config pc;
	struct rp_session_opts so = { .sz = sizeof(so), .nproviders = 1, .buffer_bytes = bytes,
				      .path = path, .fd = fd, .buffering = mode };
	struct rp_session *s;

	pc = (struct rp_provider_config){ .name = prov };
	so.providers = &pc;
	s = rp_session_start(&so);
	if (!s) {
		fprintf(stderr, "bench_latency: rp_session_start: %s\n", rp_last_error());
		exit(1);
	}
	return s;
}

static uint64_t written(struct rp_session *s)
{
	struct rp_session_stats st = { .sz = sizeof(st) };

	rp_session_stats(s, &st);
	return st.events_written;
}

/* Until the drainer sleeps on its idle futex (false after 10 s). */
static bool until_idle(struct rp_session *s)
{
	struct rp_shm_session *h = rp_shm_header(s->shm);

	for (int i = 0; i < 50000; i++) {
		if (rp_load_relaxed(&h->drainer_idle)) {
			usleep(1000);
			return true;
		}
		usleep(200);
	}
	return false;
}

/* n records at once; ns until the drainer has written them (0: not in 10 s) */
static uint64_t burst(struct rp_session *s, struct rp_event *ev, uint64_t base, uint32_t n)
{
	uint64_t p[4] = { 0 }, t0 = rp_clock_mono_ns();

	for (uint32_t i = 0; i < n; i++)
		rp_event_write(ev, p, sizeof(p));
	while (written(s) < base + n) {
		if (rp_clock_mono_ns() - t0 > 10000000000ull)
			return 0;
		usleep(100);
	}
	return rp_clock_mono_ns() - t0;
}

static void wake_rows(void)
{
	struct rp_event *ev = event_of("Bench-Latency-Wake", four_u64, 4);
	struct rp_session *s = session_to("Bench-Latency-Wake", "/dev/null", -1, 1 << 20,
					  RP_BUFFERING_DROP);
	struct rp_shm_session *h = rp_shm_header(s->shm);
	unsigned int rounds = quick ? 5 : 10, nm = 0, nw = 0, woken = 0;
	double missed[64], wake[64];
	uint64_t base = 0;
	char note[128];

	rp_store_relaxed(&rp_test_no_drainer_wake, 1);
	for (unsigned int r = 0; r < rounds; r++) {
		uint64_t l;

		if (!until_idle(s))
			break;
		l = burst(s, ev, base, 6000);
		base += 6000;
		if (l)
			missed[nm++] = ms_of(l);
	}
	rp_store_relaxed(&rp_test_no_drainer_wake, 0);
	for (unsigned int r = 0; r < 2 * rounds; r++) {
		uint32_t w0;
		uint64_t l;

		if (!until_idle(s))
			break;
		w0 = rp_load_relaxed(&h->drainer_wake);
		l = burst(s, ev, base, 7000);
		base += 7000;
		woken += rp_load_relaxed(&h->drainer_wake) != w0;
		if (l)
			wake[nw++] = ms_of(l);
	}
	rp_session_stop(s);
	row("missed_wake_ms", "a burst nobody announced (every wake suppressed): first write to "
	    "all written (ms)", missed, nm, "bound by design: the idle sleep, 20 ms");
	snprintf(note, sizeof(note), "%u of %u bursts woke the drainer", woken, 2 * rounds);
	row("wake_ms", "a burst past the wake watermark, wakes on: first write to all written (ms)",
	    wake, nw, note);
	if (kv)
		printf("wake_woken %u\nwake_bursts %u\n", woken, 2 * rounds);
}

/* ---- a live stream's lag ------------------------------------------------------ */

#define LIVE_ROW "live stream: a trickled event, write to the reader (ms)"

static void live_rows(void)
{
	static const struct rp_field text[] = { { "Text", RP_TYPE_STRING, 0, 0, NULL } };
	struct rp_event *ev = event_of("Bench-Latency-Live", text, 1);
	struct stream_reader rd = { .lock = PTHREAD_MUTEX_INITIALIZER };
	unsigned int events = quick ? 4 : 8, n = 0;
	struct rp_session *s;
	double lag[64];
	pthread_t th;
	int sv[2];

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) {
		row("live_lag_ms", LIVE_ROW, NULL, 0, "no socket pair");
		return;
	}
	rd.fd = sv[1];
	if (pthread_create(&th, NULL, stream_reader_main, &rd)) {
		row("live_lag_ms", LIVE_ROW, NULL, 0, "no reader thread");
		return;
	}
	s = session_to("Bench-Latency-Live", NULL, sv[0], 0, RP_BUFFERING_DROP);
	for (unsigned int k = 0; k < events; k++) {
		char marker[32];
		uint16_t u16[32];
		uint64_t t0, t1;
		size_t len;

		usleep(230000);
		len = (size_t)snprintf(marker, sizeof(marker), "LAGMARK%02u", k);
		for (size_t i = 0; i <= len; i++)
			u16[i] = (uint16_t)marker[i];
		t0 = rp_clock_mono_ns();
		rp_event_write(ev, u16, (len + 1) * 2);
		t1 = stream_reader_arrival(&rd, marker, 30000000000ull);
		if (t1)
			lag[n++] = ms_of(t1 - t0);
	}
	rp_session_stop(s);
	close(sv[0]);
	pthread_join(th, NULL);
	close(sv[1]);
	stream_reader_free(&rd);
	row("live_lag_ms", LIVE_ROW, lag, n,
	    n == events ? "events 230 ms apart" : "some never arrived in 30 s");
}

/* ---- dotnet-trace's stopping event -------------------------------------------- */

static struct enable_watch live;

static void stopping_event_rows(void)
{
	static const struct rp_field fields[] = { { "Round", RP_TYPE_U32, 0, 0, NULL } };
	struct rp_provider_opts po = { .sz = sizeof(po), .name = "Bench-Latency-Stop",
				       .enable_cb = enable_watch_cb, .cb_ctx = &live };
	struct rp_event_opts tick = { .sz = sizeof(tick), .id = 1, .name = "Tick", .level = 4,
				      .nfields = 1, .fields = fields };
	struct rp_event_opts trig = { .sz = sizeof(trig), .id = 2, .name = "Trigger", .level = 4,
				      .nfields = 1, .fields = fields };
	const char *tools = getenv("RINGPIPE_DOTNET_TOOLS");
	struct rp_ipc_opts io = { .sz = sizeof(io) };
	unsigned int rounds = quick ? 2 : 5, n = 0;
	struct rp_event *ev_tick, *ev_trig;
	char trace_bin[4096], why[4400] = "";
	struct rp_provider *p;
	bool serving = false;
	double lat[64];

	snprintf(why, sizeof(why), "%s/dotnet-trace",
		 tools && *tools ? tools : ".output/dotnet-tools");
	/* absolute: the child runs in another directory */
	why[0] = realpath(why, trace_bin) ? 0 : why[0];
	if (why[0] || access(trace_bin, X_OK) || system("command -v dotnet >/dev/null 2>&1")) {
		row("stopping_event_ms", "dotnet-trace --stopping-event-*: trigger written to its "
		    "session stopped (ms)", NULL, 0, "not run: dotnet-trace is not installed "
		    "(make deps)");
		return;
	}
	p = rp_provider_new(&po);
	ev_tick = p ? rp_event_new(p, &tick) : NULL;
	ev_trig = p ? rp_event_new(p, &trig) : NULL;
	if (!ev_tick || !ev_trig || rp_ipc_server_start(&io)) {
		snprintf(why, sizeof(why), "not run: %s", rp_last_error());
		rounds = 0;
	} else {
		serving = true;
	}
	for (uint32_t r = 0; r < rounds; r++) {
		char out[4200], log[4200];
		uint64_t t0, t1, deadline;
		pid_t pid;
		int st;

		snprintf(out, sizeof(out), "%s/stop%u.nettrace", tmpdir, r);
		snprintf(log, sizeof(log), "%s/dotnet-trace%u.log", tmpdir, r);
		/* the child's stdout becomes its log: nothing of ours to repeat */
		fflush(stdout);
		pid = fork();
		if (pid < 0)
			break;
		if (!pid) {
			char self[16];
			FILE *f = freopen(log, "w", stdout);

			if (!f || dup2(fileno(stdout), 2) < 0 || chdir(tmpdir))
				_exit(126);
			snprintf(self, sizeof(self), "%d", (int)getppid());
			execl(trace_bin, "dotnet-trace", "collect", "-p", self, "--providers",
			      "Bench-Latency-Stop", "--stopping-event-provider-name",
			      "Bench-Latency-Stop", "--stopping-event-event-name", "Trigger", "-o",
			      out, (char *)NULL);
			_exit(127);
		}
		deadline = rp_clock_mono_ns() + 120000000000ull;
		while (!rp_load_relaxed(&live.enabled) && rp_clock_mono_ns() < deadline &&
		       waitpid(pid, &st, WNOHANG) == 0)
			usleep(1000);
		if (!rp_load_relaxed(&live.enabled)) {
			kill(pid, SIGKILL);
			waitpid(pid, NULL, 0);
			snprintf(why, sizeof(why),
				 "dotnet-trace never enabled the provider (log %s)", log);
			break;
		}
		/* the stream flowing, then a pause: the trigger trickles in alone */
		for (uint32_t i = 0; i < 50; i++) {
			rp_event_write(ev_tick, &i, sizeof(i));
			usleep(10000);
		}
		usleep(300000 + r * 110000);
		rp_store_relaxed(&live.disabled_ns, 0);
		t0 = rp_clock_mono_ns();
		rp_event_write(ev_trig, &r, sizeof(r));
		deadline = t0 + 60000000000ull;
		while (rp_load_relaxed(&live.enabled) && rp_clock_mono_ns() < deadline)
			usleep(1000);
		t1 = rp_load_relaxed(&live.disabled_ns);
		if (!t1 || rp_load_relaxed(&live.enabled)) {
			kill(pid, SIGKILL);
			waitpid(pid, NULL, 0);
			snprintf(why, sizeof(why), "dotnet-trace did not stop in 60 s (log %s)",
				 log);
			break;
		}
		waitpid(pid, &st, 0);
		lat[n++] = ms_of(t1 - t0);
		unlink(out);
		unlink(log);
	}
	if (serving)
		rp_ipc_server_stop();
	row("stopping_event_ms", "dotnet-trace --stopping-event-*: trigger written to its session "
	    "stopped (ms)", lat, n, why[0] ? why : "the trigger alone after a 0.3-0.8 s pause");
}

/* ---- stop ------------------------------------------------------------------- */

struct stop_writer {
	struct rp_event *ev;
	int *quit;		/* atomic */
	uint64_t out_ns;	/* when it left its loop */
};

static void *stop_writer_main(void *arg)
{
	struct stop_writer *w = arg;
	struct small sm = { .name = SMALL_NAME };

	while (!rp_load_relaxed(w->quit)) {
		sm.counter++;
		rp_event_write(w->ev, &sm, sizeof(sm));
	}
	w->out_ns = rp_clock_mono_ns();
	return NULL;
}

static void stop_rows(void)
{
	struct rp_event *ev = event_of("Bench-Latency-Stop-Session", small_fields, 4);
	unsigned int rounds = quick ? 5 : 11, ni = 0, nb = 0;
	double idle[64], ret[64], out[64];

	for (unsigned int r = 0; r < rounds; r++) {
		struct rp_session *s = session_to("Bench-Latency-Stop-Session", "/dev/null", -1,
						  1 << 20, RP_BUFFERING_DROP);
		struct small sm = { .name = SMALL_NAME };
		uint64_t t0;

		rp_event_write(ev, &sm, sizeof(sm));
		while (written(s) < 1)
			usleep(100);
		until_idle(s);
		t0 = rp_clock_mono_ns();
		if (!rp_session_stop(s))
			idle[ni++] = ms_of(rp_clock_mono_ns() - t0);
	}
	for (unsigned int r = 0; r < rounds; r++) {
		struct rp_session *s = session_to("Bench-Latency-Stop-Session", "/dev/null", -1,
						  1 << 20, RP_BUFFERING_BLOCK);
		struct stop_writer w[4];
		pthread_t th[4];
		int quit = 0, rc;
		uint64_t t0, t1, last = 0;

		for (int i = 0; i < 4; i++) {
			w[i] = (struct stop_writer){ .ev = ev, .quit = &quit };
			pthread_create(&th[i], NULL, stop_writer_main, &w[i]);
		}
		usleep(100000);
		rp_store_relaxed(&quit, 1);
		t0 = rp_clock_mono_ns();
		rc = rp_session_stop(s);
		t1 = rp_clock_mono_ns();
		for (int i = 0; i < 4; i++) {
			pthread_join(th[i], NULL);
			if (w[i].out_ns > last)
				last = w[i].out_ns;
		}
		if (!rc) {
			ret[nb] = ms_of(t1 - t0);
			out[nb++] = ms_of(last > t0 ? last - t0 : 0);
		}
	}
	row("stop_idle_ms", "rp_session_stop(), an idle Drop session (ms)", idle, ni, "1 MiB, "
	    "to /dev/null");
	row("stop_block_ms", "rp_session_stop(), a Block session whose 4 writers write flat out "
	    "(ms)", ret, nb, "1 MiB, to /dev/null");
	row("stop_block_out_ms", "the same: stop called to the last writer out of its write (ms)",
	    out, nb, "parked writers are woken by the stop");
}

/* ---- where the drainer runs ----------------------------------------------------- */

/* The CPU a thread of this process is on (/proc, field 39), or -1. */
static int task_cpu(pid_t tid)
{
	char file[64], buf[1024], *p;
	int cpu = -1, field;
	FILE *f;

	snprintf(file, sizeof(file), "/proc/self/task/%d/stat", (int)tid);
	f = fopen(file, "r");
	if (!f)
		return -1;
	p = fgets(buf, sizeof(buf), f) ? strrchr(buf, ')') : NULL;
	fclose(f);
	for (field = 2; p && field < 39; field++)
		p = strchr(p + 1, ' ');
	if (!p || sscanf(p + 1, "%d", &cpu) != 1)
		return -1;
	return cpu;
}

struct burst_writer {
	struct rp_event *ev;
	int cpu;
	int in_burst;		/* atomic */
	int done;		/* atomic */
};

static void *burst_writer_main(void *arg)
{
	struct burst_writer *w = arg;
	struct small sm = { .thread = 1, .name = SMALL_NAME };

	bench_pin(w->cpu);
	for (int b = 0; b < 20; b++) {
		usleep(30000);
		rp_store_relaxed(&w->in_burst, 1);
		for (uint32_t i = 0; i < 200000; i++) {
			sm.counter++;
			rp_event_write(w->ev, &sm, sizeof(sm));
		}
		rp_store_relaxed(&w->in_burst, 0);
	}
	/* pairs with the load_acquire of done in step_aside_rows() */
	rp_store_release(&w->done, 1);
	return NULL;
}

static void step_aside_rows(struct rp_event *ev)
{
	unsigned int runs = quick ? 2 : 5, n = 0;
	double share[64];
	uint64_t moves = 0, looks_all = 0;
	char note[160];

	for (unsigned int r = 0; r < runs; r++) {
		struct rp_session *s = session_to("Bench-Latency-Placement", "/dev/null", -1,
						  256 << 20, RP_BUFFERING_DROP);
		struct rp_session_stats st = { .sz = sizeof(st) };
		struct burst_writer w = { .ev = ev, .cpu = cpus[0] };
		pid_t drainer = (pid_t)rp_shm_header(s->shm)->drainer_tid;
		int looks = 0, on_writer = 0;
		pthread_t th;

		pthread_create(&th, NULL, burst_writer_main, &w);
		/* pairs with the store_release of done */
		while (!rp_load_acquire(&w.done)) {
			if (rp_load_relaxed(&w.in_burst)) {
				on_writer += task_cpu(drainer) == w.cpu;
				looks++;
			}
			usleep(200);
		}
		pthread_join(th, NULL);
		rp_session_stats(s, &st);
		rp_session_stop(s);
		moves += st.drainer_moves;
		looks_all += (uint64_t)looks;
		if (looks)
			share[n++] = 100.0 * on_writer / looks;
	}
	snprintf(note, sizeof(note), "%" PRIu64 " looks in all; the drainer moved %" PRIu64
		 " times", looks_all, moves);
	row("step_aside_on_writer_pct", "the drainer on a busy pinned writer's CPU (% of the looks "
	    "during its bursts)", share, n, note);
}

#define FILL_RING_BYTES (32u << 20)
#define MAX_FILLERS 16

struct fill_round {
	struct rp_session *s;
	struct rp_event *ev;
	uint64_t target;
	pthread_barrier_t bar;
	int started, first_done;	/* atomic */
	uint64_t read_at_first, read_at_start, start_ns, first_ns;
};

struct filler {
	struct fill_round *fr;
	int cpu;
};

static void *filler_main(void *arg)
{
	struct filler *f = arg;
	struct fill_round *fr = f->fr;
	const struct rp_shm_ring *h = rp_shm_ring(fr->s->shm, (uint32_t)f->cpu)->hdr;
	struct small sm = { .thread = (uint32_t)f->cpu, .name = SMALL_NAME };
	uint64_t p0;

	bench_pin(f->cpu);
	pthread_barrier_wait(&fr->bar);
	if (!rp_xchg_acq_rel(&fr->started, 1))
		fr->start_ns = rp_clock_mono_ns();
	p0 = rp_load_relaxed(&h->producer_pos);
	do {
		for (int i = 0; i < 256; i++) {
			sm.counter++;
			rp_event_write(fr->ev, &sm, sizeof(sm));
		}
	} while (rp_load_relaxed(&h->producer_pos) - p0 < fr->target);
	if (!rp_xchg_acq_rel(&fr->first_done, 1)) {
		fr->read_at_first = session_bytes_read(fr->s) - fr->read_at_start;
		fr->first_ns = rp_clock_mono_ns();
	}
	return NULL;
}

/* One burst of a writer on every CPU, each putting fraction of its ring in
 * it; what the drainer had read when the first one finished, and how long
 * that took. */
static uint64_t fill_round(struct rp_session *s, struct rp_event *ev, double fraction,
			   uint64_t *took_ns)
{
	struct fill_round fr = { .s = s, .ev = ev };
	struct filler f[MAX_FILLERS];
	pthread_t th[MAX_FILLERS];
	int n = 0;

	fr.target = (uint64_t)((double)rp_shm_ring(s->shm, 0)->size * fraction);
	for (int cpu = 0; cpu < CPU_SETSIZE && n < MAX_FILLERS; cpu++)
		if (CPU_ISSET(cpu, &allowed_cpus))
			f[n++] = (struct filler){ .fr = &fr, .cpu = cpu };
	pthread_barrier_init(&fr.bar, NULL, (unsigned int)n);
	fr.read_at_start = session_bytes_read(s);
	for (int i = 0; i < n; i++)
		pthread_create(&th[i], NULL, filler_main, &f[i]);
	for (int i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	pthread_barrier_destroy(&fr.bar);
	*took_ns = fr.first_ns - fr.start_ns;
	/* everything out, then the drainer back asleep */
	until_idle(s);
	usleep(50000);
	return fr.read_at_first;
}

static void hold_back_rows(struct rp_event *ev)
{
	struct rp_session_stats st = { .sz = sizeof(st) };
	unsigned int rounds = quick ? 5 : 10, held = 0, nt = 0;
	double took[64], deferrals;
	uint64_t drops;
	struct rp_session *s;
	char note[200];

	if (CPU_COUNT(&allowed_cpus) > MAX_FILLERS) {
		row("hold_back_held", "bursts of 3/8 of every ring the drainer did not read during",
		    NULL, 0, "not run: more CPUs than writers this bench starts");
		return;
	}
	s = session_to("Bench-Latency-Placement", "/dev/null", -1,
		       (uint64_t)FILL_RING_BYTES * rp_shm_possible_cpus(), RP_BUFFERING_DROP);
	for (unsigned int r = 0; r < rounds; r++) {
		uint64_t t;

		held += fill_round(s, ev, 3.0 / 8, &t) == 0;
		took[nt++] = ms_of(t);
	}
	rp_session_stats(s, &st);
	deferrals = (double)st.drainer_deferrals;
	snprintf(note, sizeof(note), "held back to the end in %u of %u bursts; %.0f deferrals "
		 "(a deferral lasts 10 ms at most)", held, rounds, deferrals);
	row("hold_back_burst_ms", "writers on every CPU, bursts of 3/8 of each 32 MiB ring: the "
	    "first writer's burst (ms)", took, nt, note);
	rp_session_stop(s);
	if (kv)
		printf("hold_back_held %u\nhold_back_rounds %u\nhold_back_deferrals %.0f\n", held,
		       rounds, deferrals);

	s = session_to("Bench-Latency-Placement", "/dev/null", -1,
		       (uint64_t)FILL_RING_BYTES * rp_shm_possible_cpus(), RP_BUFFERING_DROP);
	nt = held = 0;
	for (unsigned int r = 0; r < rounds; r++) {
		uint64_t t;

		held += fill_round(s, ev, 7.0 / 8, &t) == 0;
		took[nt++] = ms_of(t);
	}
	rp_session_stats(s, &st);
	drops = total_drops(&st);
	snprintf(note, sizeof(note), "%" PRIu64 " drops; %" PRIu64 " deferrals; not read during %u "
		 "of %u", drops, st.drainer_deferrals, held, rounds);
	row("hold_back_full_burst_ms", "the same, bursts of 7/8 of each ring (past the half: the "
	    "drainer drains) (ms)", took, nt, note);
	rp_session_stop(s);
	if (kv)
		printf("hold_back_full_drops %" PRIu64 "\nhold_back_full_deferrals %" PRIu64 "\n",
		       drops, st.drainer_deferrals);
}

static void placement_rows(void)
{
	struct rp_event *ev = event_of("Bench-Latency-Placement", small_fields, 4);

	if (nr_cpus < 2) {
		row("step_aside_on_writer_pct", "the drainer's placement", NULL, 0,
		    "not run: needs two CPUs");
		return;
	}
	step_aside_rows(ev);
	hold_back_rows(ev);
}

int main(int argc, char **argv)
{
	char load[64] = "?";
	FILE *f;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick")) {
			quick = true;
		} else if (!strcmp(argv[i], "--kv")) {
			kv = true;
		} else {
			fprintf(stderr, "usage: %s [--quick] [--kv]\n", argv[0]);
			return 2;
		}
	}
	if (bench_env_init("bench_latency", tmpdir, sizeof(tmpdir), &allowed_cpus, cpus, &nr_cpus))
		return 1;
	f = fopen("/proc/loadavg", "r");
	if (f) {
		if (fscanf(f, "%63s", load) != 1)
			snprintf(load, sizeof(load), "?");
		fclose(f);
	}
	if (!kv) {
		printf("\n### Latencies and the drainer's placement (bench_latency%s)\n\n",
		       quick ? " --quick" : "");
		printf("What the tests leave unjudged, measured here: %d CPUs, load average %s "
		       "at the start. Figures in ms unless the row says otherwise; median, min "
		       "and max over the runs.\n\n", CPU_COUNT(&allowed_cpus), load);
		printf("| measure | median | min | max | runs | note |\n");
		printf("|---|---|---|---|---|---|\n");
	}
	wake_rows();
	live_rows();
	stopping_event_rows();
	stop_rows();
	placement_rows();
	rmdir(tmpdir);
	return 0;
}
