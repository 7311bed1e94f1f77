// SPDX-License-Identifier: MIT
/*
 * Counters (System.Diagnostics.Metrics) read by the real dotnet-counters:
 * instruments of the public API, the library's System.Runtime meter in
 * ringpipe-demo, the demo's GC publisher, and `dotnet-counters monitor` on a
 * real terminal (tmux). The process under test is this test's own (the
 * diagnostics server runs in it) or ringpipe-demo.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>

#include "clr_events.h"
#include "heap.h"
#include "helpers.h"
#include "metrics.h"
#include "ringpipe/ringpipe.h"

/* ---- helpers ---------------------------------------------------------- */

static void server_start(void)
{
	struct rp_ipc_opts o = { .sz = sizeof(o) };
	int rc = rp_ipc_server_start(&o);

	cr_assert(rc == 0 || rc == -EBUSY, "rp_ipc_server_start: %d (%s)", rc, rp_last_error());
}

/* Runs dotnet-counters collect against pid into out (the file's text). */
static void counters_collect(pid_t pid, const char *args, const char *format, struct bytebuf *out)
{
	struct bytebuf log = { 0 };
	char *dir = th_tmpdir(), *path, *cmd;

	cr_assert(dir);
	cr_assert(asprintf(&path, "%s/counters.%s", dir, format) > 0);
	cr_assert(asprintf(&cmd, "%s/dotnet-counters collect -p %d %s --refresh-interval 1 "
			   "--duration 00:00:05 --format %s -o %s 2>&1 </dev/null",
			   th_dotnet_tools(), (int)pid, args, format, path) > 0);
	cr_assert_eq(th_run(cmd, &log), 0, "dotnet-counters collect: %s", (char *)log.p);
	cr_assert_eq(th_read_file(path, out), 0, "no %s written: %s", format, (char *)log.p);
	free(cmd);
	free(path);
	bb_free(&log);
	th_rmdir(dir);
}

/*
 * The values of CSV rows "TIME,PROVIDER,NAME,VALUE", where name is the
 * counter's name, unit and tags and its type, as dotnet-counters prints
 * them ("x.count ({op} / 1 sec),Rate"); up to max.
 */
static int csv_values(const char *csv, const char *provider, const char *name, double *v, int max)
{
	char *key;
	const char *p = csv;
	int n = 0;

	cr_assert(asprintf(&key, ",%s,%s,", provider, name) > 0);
	while ((p = strstr(p, key)) && n < max) {
		p += strlen(key);
		v[n++] = strtod(p, NULL);
	}
	free(key);
	return n;
}

/* ---- instruments of the public API -------------------------------------- */

static struct rp_instrument *t_gauge, *t_counter, *t_updown, *t_hist;
static int t_stop;

static void *recorder_main(void *arg)
{
	(void)arg;
	while (!__atomic_load_n(&t_stop, __ATOMIC_RELAXED)) {
		int i;

		cr_assert_eq(rp_instrument_record(t_gauge, 42.5), 0);
		cr_assert_eq(rp_instrument_add(t_counter, 7), 0);
		cr_assert_eq(rp_instrument_add(t_updown, 5), 0);
		cr_assert_eq(rp_instrument_add(t_updown, -2), 0);
		for (i = 1; i <= 100; i++)
			cr_assert_eq(rp_instrument_record(t_hist, i), 0);
		/* at most 1024 measurements an interval: no sampling */
		usleep(200 * 1000);
	}
	return NULL;
}

static struct rp_instrument *instrument(struct rp_meter *m, int kind, const char *name,
					const char *unit)
{
	struct rp_instrument_opts o = { .sz = sizeof(o), .kind = kind, .name = name, .unit = unit };
	struct rp_instrument *in = rp_instrument_new(m, &o);

	cr_assert(in, "rp_instrument_new(%s): %s", name, rp_last_error());
	return in;
}

Test(counters, instruments_of_the_public_api_are_read_by_dotnet_counters, .timeout = 120)
{
	struct rp_meter_opts mo = { .sz = sizeof(mo), .name = "Ringpipe.Test", .version = "1.0" };
	struct bytebuf csv = { 0 };
	double v[64];
	bool exact[3] = { false, false, false };
	pthread_t th;
	struct rp_meter *m;
	int n, i, q;

	TH_NEED_DOTNET_TOOL("dotnet-counters");
	m = rp_meter_new(&mo);
	cr_assert(m, "rp_meter_new: %s", rp_last_error());
	t_gauge = instrument(m, RP_INSTRUMENT_GAUGE, "test.gauge", "By");
	t_counter = instrument(m, RP_INSTRUMENT_COUNTER, "test.counter", "{op}");
	t_updown = instrument(m, RP_INSTRUMENT_UPDOWN_COUNTER, "test.updown", "{item}");
	t_hist = instrument(m, RP_INSTRUMENT_HISTOGRAM, "test.latency", "ms");
	cr_assert(!rp_instrument_enabled(t_gauge), "nobody listens yet, but the gauge is enabled");
	server_start();
	cr_assert_eq(pthread_create(&th, NULL, recorder_main, NULL), 0);
	counters_collect(getpid(), "--counters Ringpipe.Test", "csv", &csv);
	__atomic_store_n(&t_stop, 1, __ATOMIC_RELAXED);
	pthread_join(th, NULL);

	n = csv_values((char *)csv.p, "Ringpipe.Test", "test.gauge (By),Metric", v, 64);
	cr_assert_gt(n, 0, "no gauge rows in:\n%s", (char *)csv.p);
	for (i = 0; i < n; i++)
		cr_assert_eq(v[i], 42.5, "gauge: expected 42.5, saw %g", v[i]);

	/* every interval's increment is a whole number of the recorder's adds */
	n = csv_values((char *)csv.p, "Ringpipe.Test", "test.counter ({op} / 1 sec),Rate", v, 64);
	cr_assert_gt(n, 0, "no counter rows in:\n%s", (char *)csv.p);
	for (i = 0, q = 0; i < n; i++) {
		cr_assert_eq(fmod(v[i], 7), 0, "counter: %g is not a multiple of 7", v[i]);
		q += v[i] > 0;
	}
	cr_assert_gt(q, 0, "the counter never increased:\n%s", (char *)csv.p);

	/* up-down: +5 -2 per round; dotnet-counters shows the sum, 3 per round */
	n = csv_values((char *)csv.p, "Ringpipe.Test", "test.updown ({item}),Metric", v, 64);
	cr_assert_gt(n, 0, "no up-down rows in:\n%s", (char *)csv.p);
	for (i = 0; i < n; i++)
		cr_assert(v[i] > 0 && fmod(v[i], 3) == 0 && (i == 0 || v[i] >= v[i - 1]),
			  "up-down: %g is not a growing multiple of 3", v[i]);

	/* each round records 1..100: the percentiles are 50, 95, 99 (an
	 * interval that ends inside a round moves them a little) */
	for (q = 0; q < 3; q++) {
		static const char *const names[] = {
			"test.latency (ms)[Percentile=50],Metric",
			"test.latency (ms)[Percentile=95],Metric",
			"test.latency (ms)[Percentile=99],Metric",
		};
		static const double want[] = { 50, 95, 99 }, lo[] = { 40, 85, 90 };

		n = csv_values((char *)csv.p, "Ringpipe.Test", names[q], v, 64);
		cr_assert_gt(n, 0, "no %s rows in:\n%s", names[q], (char *)csv.p);
		for (i = 0; i < n; i++) {
			cr_assert(v[i] >= lo[q] && v[i] <= 100, "%s: %g", names[q], v[i]);
			exact[q] |= v[i] == want[q];
		}
		cr_assert(exact[q], "%s: no interval shows %g:\n%s", names[q], want[q],
			  (char *)csv.p);
	}
	rp_ipc_server_stop();
	bb_free(&csv);
}

/* Sessions are independent: two dotnet-counters at once, each its own meter
 * (.NET's source would refuse the second). */
Test(counters, two_sessions_at_once_each_get_their_own_counters, .timeout = 120)
{
	struct rp_meter_opts mo = { .sz = sizeof(mo), .name = "Ringpipe.Test2" };
	struct bytebuf log = { 0 }, a = { 0 }, b = { 0 };
	char *dir = th_tmpdir(), *cmd, *pa, *pb;
	double v[256];
	pthread_t th;
	struct rp_meter *m;
	int n, i, q;

	TH_NEED_DOTNET_TOOL("dotnet-counters");
	cr_assert(dir);
	m = rp_meter_new(&mo);
	cr_assert(m);
	t_gauge = instrument(m, RP_INSTRUMENT_GAUGE, "test.gauge", "By");
	t_counter = instrument(m, RP_INSTRUMENT_COUNTER, "test.counter", "{op}");
	t_updown = instrument(m, RP_INSTRUMENT_UPDOWN_COUNTER, "test.updown", "{item}");
	t_hist = instrument(m, RP_INSTRUMENT_HISTOGRAM, "test.latency", "ms");
	server_start();
	cr_assert_eq(pthread_create(&th, NULL, recorder_main, NULL), 0);
	cr_assert(asprintf(&pa, "%s/a.csv", dir) > 0 && asprintf(&pb, "%s/b.csv", dir) > 0);
	cr_assert(asprintf(&cmd, "T=%s/dotnet-counters; "
			   "$T collect -p %d --counters Ringpipe.Test2 --refresh-interval 1 "
			   "--duration 00:00:05 --format csv -o %s </dev/null >%s/a.log 2>&1 & "
			   "$T collect -p %d --counters Ringpipe --refresh-interval 1 "
			   "--duration 00:00:05 --format csv -o %s </dev/null 2>&1 && wait $!",
			   th_dotnet_tools(), getpid(), pa, dir, getpid(), pb) > 0);
	cr_assert_eq(th_run(cmd, &log), 0, "dotnet-counters: %s", (char *)log.p);
	__atomic_store_n(&t_stop, 1, __ATOMIC_RELAXED);
	pthread_join(th, NULL);
	cr_assert_eq(th_read_file(pa, &a), 0, "no %s", pa);
	cr_assert_eq(th_read_file(pb, &b), 0, "no %s", pb);

	n = csv_values((char *)a.p, "Ringpipe.Test2", "test.gauge (By),Metric", v, 256);
	cr_assert_gt(n, 0, "session A has no gauge:\n%s", (char *)a.p);
	for (i = 0; i < n; i++)
		cr_assert_eq(v[i], 42.5, "gauge: expected 42.5, saw %g", v[i]);
	cr_assert_null(strstr((char *)a.p, ",Ringpipe,"), "session B's counters reached A:\n%s",
		       (char *)a.p);
	cr_assert_null(strstr((char *)b.p, "Ringpipe.Test2"), "session A's counters reached B:\n%s",
		       (char *)b.p);

	/* B: the library's meter, with each session's figures: its own
	 * session writes events every interval */
	cr_assert(strstr((char *)b.p, "ringpipe.session.events_written ({event} / 1 sec)[session="),
		  "no events written in:\n%s", (char *)b.p);
	cr_assert(strstr((char *)b.p, ";reason=full],Rate,0"), "no drops by reason in:\n%s",
		  (char *)b.p);
	for (q = 0, i = 0; i < RP_MAX_SESSIONS; i++) {
		char name[128];
		int k;

		snprintf(name, sizeof(name),
			 "ringpipe.session.events_written ({event} / 1 sec)[session=%d],Rate", i);
		n = csv_values((char *)b.p, "Ringpipe", name, v, 256);
		for (k = 0; k < n; k++)
			q += v[k] > 0;
	}
	cr_assert_gt(q, 0, "no session wrote an event:\n%s", (char *)b.p);
	rp_ipc_server_stop();
	free(cmd);
	free(pa);
	free(pb);
	bb_free(&log);
	bb_free(&a);
	bb_free(&b);
	th_rmdir(dir);
}

Test(counters, instruments_refuse_what_they_cannot_publish)
{
	struct rp_meter_opts mo = { .sz = sizeof(mo), .name = "Ringpipe.Refusals" };
	struct rp_instrument_opts o = { .sz = sizeof(o), .kind = RP_INSTRUMENT_OBSERVABLE_GAUGE,
					.name = "x" };
	struct rp_meter *m = rp_meter_new(&mo);
	struct rp_instrument *c;

	cr_assert(m);
	errno = 0;
	cr_assert_null(rp_instrument_new(m, &o), "an observable gauge without a callback");
	cr_assert_eq(errno, EINVAL);
	cr_assert(strstr(rp_last_error(), "callback"), "message: %s", rp_last_error());
	o.kind = 99;
	cr_assert_null(rp_instrument_new(m, &o), "kind 99");
	o.kind = RP_INSTRUMENT_COUNTER;
	o.name = "";
	cr_assert_null(rp_instrument_new(m, &o), "an empty name");
	mo.name = NULL;
	cr_assert_null(rp_meter_new(&mo), "a meter without a name");
	o.name = "c";
	c = rp_instrument_new(m, &o);
	cr_assert(c);
	cr_assert_eq(rp_instrument_add(c, -1), -EINVAL, "a counter took a negative delta");
	cr_assert_eq(rp_instrument_add(c, NAN), -EINVAL, "a counter took NaN");
	cr_assert_eq(rp_instrument_record(c, 1), -EINVAL, "a counter took record()");
	/* nobody listens: accepted, and not kept */
	cr_assert_eq(rp_instrument_add(c, 1), 0);
}

/* ---- ringpipe-demo: the library's System.Runtime meter ------------------ */

/* The numbers after `"value": ` of the JSON events named name. */
static int json_values(const char *json, const char *name, double *v, int max)
{
	char *key;
	const char *p = json;
	int n = 0;

	cr_assert(asprintf(&key, "\"name\": \"%s\"", name) > 0);
	while ((p = strstr(p, key)) && n < max) {
		const char *val = strstr(p, "\"value\": ");

		p += strlen(key);
		if (!val)
			break;
		v[n++] = strtod(val + strlen("\"value\": "), NULL);
	}
	free(key);
	return n;
}

Test(counters, dotnet_counters_default_counters_show_the_demos_process, .timeout = 120)
{
	char *args[] = { "--duration", "60", "--rate", "200", NULL };
	struct bytebuf json = { 0 };
	char *dir = th_tmpdir();
	struct th_demo d;
	double v[64];
	int n, i;

	TH_NEED_DOTNET_TOOL("dotnet-counters");
	cr_assert_not_null(dir);
	th_demo_start(&d, dir, args);
	/* no --counters: dotnet-counters asks for the System.Runtime meter */
	counters_collect(d.pid, "", "json", &json);
	th_demo_stop(&d);
	th_rmdir(dir);

	cr_assert(strstr((char *)json.p, "\"provider\": \"System.Runtime\""),
		  "no System.Runtime counter in:\n%s", (char *)json.p);
	n = json_values((char *)json.p, "dotnet.process.memory.working_set (By)", v, 64);
	cr_assert_gt(n, 0, "no working set in:\n%s", (char *)json.p);
	for (i = 0; i < n; i++)
		cr_assert_gt(v[i], 1 << 20, "a working set of %g bytes", v[i]);
	n = json_values((char *)json.p, "dotnet.process.cpu.time (s / 1 sec)", v, 64);
	cr_assert_gt(n, 0, "no CPU time in:\n%s", (char *)json.p);
	for (i = 0; i < n; i++)
		cr_assert(v[i] >= 0 && v[i] <= 64, "CPU time rate %g", v[i]);
	n = json_values((char *)json.p, "dotnet.process.cpu.count ({cpu})", v, 64);
	cr_assert_gt(n, 0, "no CPU count in:\n%s", (char *)json.p);
	cr_assert_eq(v[0], (double)sysconf(_SC_NPROCESSORS_ONLN));
	bb_free(&json);
}

/* ---- the demo's GC publisher, in this process ------------------------- */

Test(counters, demo_publisher_reports_the_heap_models_figures, .timeout = 120)
{
	struct heap_opts ho = { .nodes = 5000, .seed = 1, .alloc_threads = 1 };
	struct bytebuf csv = { 0 };
	double v[64], sum = 0, gcs[64];
	int n, i, ng;

	TH_NEED_DOTNET_TOOL("dotnet-counters");
	cr_assert_eq(clr_events_init(NULL), 0);
	cr_assert_eq(heap_init(&ho), 0);
	cr_assert_eq(heap_start(), 0);
	cr_assert_eq(demo_metrics_start(), 0, "demo_metrics_start: %s", rp_last_error());
	cr_assert_eq(demo_metrics_start(), 0, "a second start is a resume");
	server_start();
	counters_collect(getpid(), "--counters System.Runtime", "csv", &csv);

	/* the allocation rate: what the heap model allocated, per interval */
	n = csv_values((char *)csv.p, "System.Runtime",
		       "dotnet.gc.heap.total_allocated (By / 1 sec),Rate", v, 64);
	cr_assert_gt(n, 0, "no allocation rate in:\n%s", (char *)csv.p);
	for (i = 0; i < n; i++) {
		cr_assert_geq(v[i], 0, "a negative allocation rate %g", v[i]);
		sum += v[i];
	}
	cr_assert_gt(sum, 0, "nothing allocated:\n%s", (char *)csv.p);
	cr_assert_leq(sum, (double)heap_alloc_bytes(), "more allocated (%g) than the heap did (%"
		      PRIu64 ")", sum, heap_alloc_bytes());
	ng = csv_values((char *)csv.p, "System.Runtime",
			"dotnet.gc.collections ({collection} / 1 sec),Rate", gcs, 64);
	cr_assert_gt(ng, 0, "no GC count in:\n%s", (char *)csv.p);
	for (i = 0, sum = 0; i < ng; i++)
		sum += gcs[i];
	cr_assert_leq(sum, (double)heap_gc_count(), "%g GCs reported, %" PRIu64 " happened", sum,
		      heap_gc_count());
	/* the library's meter of the same name comes along */
	cr_assert(strstr((char *)csv.p, "System.Runtime,dotnet.process.memory.working_set (By)"),
		  "no working set in:\n%s", (char *)csv.p);
	demo_metrics_stop();
	rp_ipc_server_stop();
	heap_stop();
	bb_free(&csv);
}

/* ---- dotnet-counters monitor on a terminal ----------------------------- */

static bool have_tmux(void)
{
	return system("command -v tmux >/dev/null 2>&1") == 0;
}

/* The line of the screen that names name, or NULL. */
static const char *screen_line(const char *screen, const char *name, char *line, size_t len)
{
	const char *p = strstr(screen, name), *e;

	if (!p)
		return NULL;
	e = strchr(p, '\n');
	if (!e)
		e = p + strlen(p);
	snprintf(line, len, "%.*s", (int)(e - p), p);
	return line;
}

/* The last number on the line ("2,555,904" reads as 2555904), or -1. */
static double last_number(const char *line)
{
	const char *e = line + strlen(line), *s;
	char digits[64];
	size_t n = 0;

	while (e > line && e[-1] == ' ')
		e--;
	s = e;
	while (s > line && (strchr("0123456789.,", s[-1])))
		s--;
	if (s == e)
		return -1;
	for (; s < e && n + 1 < sizeof(digits); s++)
		if (*s != ',')
			digits[n++] = *s;
	digits[n] = 0;
	return strtod(digits, NULL);
}

Test(counters, dotnet_counters_monitor_shows_numbers_not_waiting, .timeout = 120)
{
	struct bytebuf screen = { 0 };
	char *cmd, sock[64], line[512];
	const char *ws = NULL;
	int i;

	TH_NEED_DOTNET_TOOL("dotnet-counters");
	if (!have_tmux()) {
		if (th_require_interop())
			cr_assert_fail("RINGPIPE_REQUIRE_INTEROP=1 but tmux is not installed "
				       "(apt-get install tmux): monitor needs a terminal");
		cr_skip_test("tmux is not installed (apt-get install tmux): dotnet-counters "
			     "monitor needs a real terminal");
	}
	server_start();
	snprintf(sock, sizeof(sock), "rp-counters-%d", getpid());
	/* no options at all: what a user types */
	cr_assert(asprintf(&cmd, "tmux -L %s new-session -d -x 160 -y 40 "
			   "'%s/dotnet-counters monitor -p %d' 2>&1", sock, th_dotnet_tools(),
			   getpid()) > 0);
	cr_assert_eq(th_run(cmd, &screen), 0, "tmux: %s", (char *)screen.p);
	free(cmd);
	cr_assert(asprintf(&cmd, "tmux -L %s capture-pane -p 2>&1", sock) > 0);
	/* until the screen shows the counters (the test's timeout bounds it) */
	for (i = 0; i < 200; i++) {
		screen.len = 0;
		th_run(cmd, &screen);
		ws = screen_line((char *)screen.p, "dotnet.process.memory.working_set", line,
				 sizeof(line));
		if (ws && last_number(ws) > 0 && strstr((char *)screen.p, "user"))
			break;
		usleep(250 * 1000);
	}
	free(cmd);
	cr_assert(asprintf(&cmd, "tmux -L %s kill-server >/dev/null 2>&1", sock) > 0);
	if (system(cmd) == -1)
		perror("tmux kill-server");
	free(cmd);
	rp_ipc_server_stop();

	cr_assert_null(strstr((char *)screen.p, "Waiting for initial payload"),
		       "monitor still waits:\n%s", (char *)screen.p);
	cr_assert(strstr((char *)screen.p, "[System.Runtime]"), "screen:\n%s", (char *)screen.p);
	cr_assert(ws, "no working set on the screen:\n%s", (char *)screen.p);
	cr_assert_gt(last_number(ws), 1 << 20, "working set line: %s", ws);
	cr_assert(screen_line((char *)screen.p, "dotnet.process.cpu.time", line, sizeof(line)),
		  "no CPU time on the screen:\n%s", (char *)screen.p);
	ws = screen_line((char *)screen.p, "dotnet.process.cpu.count", line, sizeof(line));
	cr_assert(ws && last_number(ws) == (double)sysconf(_SC_NPROCESSORS_ONLN),
		  "CPU count line: %s\n%s", ws ? ws : "(none)", (char *)screen.p);
	bb_free(&screen);
}
