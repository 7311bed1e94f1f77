// SPDX-License-Identifier: MIT
/*
 * ringpipe-demo: a minimal "runtime" that .NET's diagnostic tools and
 * `ringpipe collect` can attach to.
 *
 * It starts ringpipe's diagnostics IPC server (rp_ipc_server_start), so it
 * shows up in `dotnet-trace ps` / `ringpipe ps`, and defines these providers:
 *
 *   Ringpipe-Demo            Tick (id 1): Counter u64, Thread u32, Text string
 *                            WorkStart (id 2, opcode Start) / WorkStop (id 3,
 *                            opcode Stop): WorkId u64 -- TraceEvent names them
 *                            Work/Start and Work/Stop
 *                            SessionEnd (id 4): cumulative totals, written by
 *                            the stopping callback into each stopping session
 *   Ringpipe-Demo-Counters   EventCounters, published every N seconds while a
 *                            session enables the provider with the argument
 *                            EventCounterIntervalSec=N (what dotnet-counters
 *                            sends): "working-set" (Mean, MB) and "ticks/sec"
 *                            (Sum: Tick events written in the interval)
 *
 * The EventCounters payload has the shape the .NET runtime writes and
 * dotnet-counters parses: one unnamed struct field holding a struct named
 * "Payload" with the counter's fields.
 *
 *   Microsoft-Windows-DotNETRuntime, ...Rundown,
 *   Microsoft-DotNETCore-SampleProfiler and Microsoft-DotNETCore-EventPipe
 *                            (ProcessInfo): the managed-runtime side, in
 *                            clr_events.c (encoders), heap.c (heap, GCs,
 *                            the heap walk dotnet-gcdump triggers), jit.c
 *                            (managed code, method tables, live JIT events,
 *                            rundown) and sampler.c (CPU samples with stacks)
 *
 * Each of T threads writes RATE Tick events per second and, around every
 * tenth tick, a Work/Start - Work/Stop pair. Runs for --duration seconds
 * (0: until SIGINT/SIGTERM), then prints "ticks N traced M": the Tick events written, and of
 * them those a session took and has (the write, with RP_WRITE_REPORT_NO_SESSION, returned 0):
 * with one session, exactly the Tick events in its trace.
 *
 * --work-threads N threads burn CPU in managed code with a known split:
 * Demo.Worker.Run calls Compute, Hash and Parse, which run the same loop 5,
 * 3 and 2 units long, so a CPU profile puts 50 %, 30 % and 20 % of the
 * workers' samples in them. Every thread's loop is managed code
 * (SAMPLER_MANAGED): the profiles name Demo.Program.Main, Demo.Writer.Run, ...
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ringpipe/ringpipe.h"

#include "core/atomics.h"
#include "util/bytebuf.h"
#include "core/clock.h"
#include "clr_events.h"
#include "heap.h"
#include "jit.h"
#include "metrics.h"
#include "sampler.h"
#include "common/tool_opts.h"
#include "util/utf.h"

#define DEMO_MAX_THREADS 256u
#define DEMO_MAX_RATE 10000000u
#define DEMO_MAX_DURATION (100u * 365 * 86400)

static const char demo_usage[] =
"usage: ringpipe-demo [--duration SECONDS] [--rate EVENTS_PER_SEC] [--threads N]\n"
"                     [--heap-nodes N] [--seed S] [--alloc-threads N]\n"
"                     [--jit-threads N] [--jit-rate N] [--max-buffer-mb N]\n"
"                     [--jit-live N] [--work-threads N]\n"
"                     [--heap-report FILE] [--expect FILE]\n"
"\n"
"Starts ringpipe's diagnostics IPC server, prints its pid and socket, and lets\n"
"N threads (default 1, at most 256) write RATE Tick events per second each\n"
"(default 10, at most 10000000) to the provider Ringpipe-Demo, with a\n"
"Work/Start - Work/Stop pair around every tenth tick. The provider\n"
"Ringpipe-Demo-Counters publishes EventCounters (working-set, ticks/sec)\n"
"when enabled with EventCounterIntervalSec=N; the System.Runtime meter\n"
"(System.Diagnostics.Metrics, what dotnet-counters asks for by default) has\n"
"the process's CPU time and working set and the demo's GC counts and\n"
"allocations. Runs for SECONDS (default 0:\n"
"until SIGINT or SIGTERM), then prints \"ticks N traced M\" (Tick events\n"
"written, and of them those a session took).\n"
"\n"
"It also behaves as a small managed runtime (Microsoft-Windows-DotNETRuntime),\n"
"shaped by --heap-nodes to --expect below.\n";

static const char demo_usage_end[] =
"Enabling the runtime provider with GCHeapCollect (0x800000) at level 4 or more\n"
"(what dotnet-gcdump does) runs an induced gen-2 GC that walks the heap. A\n"
"session with rundown gets MethodDCEndVerbose for every live method and for\n"
"the demo's own managed code, whose stacks Microsoft-DotNETCore-SampleProfiler\n"
"samples once a millisecond.\n"
"Ringpipe-Demo writes SessionEnd (cumulative totals) into a stopping session.\n";

/* ---- state ---------------------------------------------------------------- */

static int demo_stop;				/* atomic: set by signals and main */
static uint64_t demo_ticks;			/* atomic: Tick events written */
static uint64_t demo_traced;			/* atomic: of which a session took */
/* a Tick write that no session took says so (not 0) */
static const struct rp_write_opts tick_opts = {
	.sz = sizeof(tick_opts), .flags = RP_WRITE_REPORT_NO_SESSION,
};

static struct rp_event *ev_tick, *ev_work_start, *ev_work_stop;
static struct rp_event *ev_counter_mean, *ev_counter_sum, *ev_session_end;

static pthread_mutex_t ctr_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ctr_cond = PTHREAD_COND_INITIALIZER;
static uint32_t ctr_interval_s[RP_MAX_SESSIONS];	/* 0: session publishes nothing */

struct demo_thread {
	pthread_t th;
	uint32_t index;
	uint64_t rate;
};

static bool stopping(void)
{
	return rp_load_relaxed(&demo_stop);
}

static void request_stop(void)
{
	rp_store_relaxed(&demo_stop, 1);
}

static void on_signal(int sig)
{
	(void)sig;
	request_stop();
}

/* ---- payloads ------------------------------------------------------------- */

/* Writes a payload built in b, unless building it ran out of memory. */
static void write_built(struct rp_event *ev, const struct bytebuf *b)
{
	if (!b->oom)
		rp_event_write(ev, b->p, b->len);
}

static void put_f64(struct bytebuf *b, double v) { bb_append(b, &v, 8); }
static void put_f32(struct bytebuf *b, float v) { bb_append(b, &v, 4); }

/* ---- providers -------------------------------------------------------------- */

static const struct rp_field tick_fields[] = {
	{ "Counter", RP_TYPE_U64, 0, 0, NULL },
	{ "Thread", RP_TYPE_U32, 0, 0, NULL },
	{ "Text", RP_TYPE_STRING, 0, 0, NULL },
};

static const struct rp_field work_fields[] = {
	{ "WorkId", RP_TYPE_U64, 0, 0, NULL },
};

static const struct rp_field session_end_fields[] = {
	{ "SessionId", RP_TYPE_U32, 0, 0, NULL },
	{ "Ticks", RP_TYPE_U64, 0, 0, NULL },
	{ "GCs", RP_TYPE_U64, 0, 0, NULL },
	{ "Allocations", RP_TYPE_U64, 0, 0, NULL },
	{ "AllocatedBytes", RP_TYPE_U64, 0, 0, NULL },
	{ "MethodsPublished", RP_TYPE_U64, 0, 0, NULL },
};

/* The fields of a Mean counter's payload, in the runtime's order. */
static const struct rp_field mean_fields[] = {
	{ "Name", RP_TYPE_STRING, 0, 0, NULL },
	{ "DisplayName", RP_TYPE_STRING, 0, 0, NULL },
	{ "Mean", RP_TYPE_F64, 0, 0, NULL },
	{ "StandardDeviation", RP_TYPE_F64, 0, 0, NULL },
	{ "Count", RP_TYPE_I32, 0, 0, NULL },
	{ "Min", RP_TYPE_F64, 0, 0, NULL },
	{ "Max", RP_TYPE_F64, 0, 0, NULL },
	{ "IntervalSec", RP_TYPE_F32, 0, 0, NULL },
	{ "Series", RP_TYPE_STRING, 0, 0, NULL },
	{ "CounterType", RP_TYPE_STRING, 0, 0, NULL },
	{ "Metadata", RP_TYPE_STRING, 0, 0, NULL },
	{ "DisplayUnits", RP_TYPE_STRING, 0, 0, NULL },
};

/* ... and of an incrementing (Sum) counter's. */
static const struct rp_field sum_fields[] = {
	{ "Name", RP_TYPE_STRING, 0, 0, NULL },
	{ "DisplayName", RP_TYPE_STRING, 0, 0, NULL },
	{ "DisplayRateTimeScale", RP_TYPE_STRING, 0, 0, NULL },
	{ "Increment", RP_TYPE_F64, 0, 0, NULL },
	{ "IntervalSec", RP_TYPE_F32, 0, 0, NULL },
	{ "Metadata", RP_TYPE_STRING, 0, 0, NULL },
	{ "Series", RP_TYPE_STRING, 0, 0, NULL },
	{ "CounterType", RP_TYPE_STRING, 0, 0, NULL },
	{ "DisplayUnits", RP_TYPE_STRING, 0, 0, NULL },
};

static const struct rp_field mean_payload[] = {
	{ "Payload", RP_TYPE_OBJECT, 0, sizeof(mean_fields) / sizeof(mean_fields[0]), mean_fields },
};
static const struct rp_field sum_payload[] = {
	{ "Payload", RP_TYPE_OBJECT, 0, sizeof(sum_fields) / sizeof(sum_fields[0]), sum_fields },
};
static const struct rp_field mean_top[] = { { "", RP_TYPE_OBJECT, 0, 1, mean_payload } };
static const struct rp_field sum_top[] = { { "", RP_TYPE_OBJECT, 0, 1, sum_payload } };

/* EventCounterIntervalSec from "key=value;..." args; 0 when absent or bad. */
static uint32_t interval_arg(const char *args)
{
	static const char key[] = "EventCounterIntervalSec=";
	const char *p = args;

	while (p && *p) {
		if (!strncmp(p, key, sizeof(key) - 1)) {
			char *end;
			double v = strtod(p + sizeof(key) - 1, &end);

			if ((*end == 0 || *end == ';') && v >= 1 && v <= 86400)
				return (uint32_t)v;
			return 0;
		}
		p = strchr(p, ';');
		if (p)
			p++;
	}
	return 0;
}

static void counters_enable(struct rp_provider *provider, int session_id, bool enabled,
			    uint64_t keywords, uint8_t level, const char *args, void *ctx)
{
	(void)provider, (void)keywords, (void)level, (void)ctx;
	if (session_id < 0 || session_id >= RP_MAX_SESSIONS)
		return;
	pthread_mutex_lock(&ctr_lock);
	ctr_interval_s[session_id] = enabled ? interval_arg(args) : 0;
	pthread_cond_broadcast(&ctr_cond);
	pthread_mutex_unlock(&ctr_lock);
}

/*
 * Ringpipe-Demo's stopping callback: totals that belong to the end of a
 * session. The library calls it once per stopping session that enables the
 * provider, on the stopping thread, whose events then go to that session
 * only; so each session gets its SessionEnd exactly once.
 */
static void demo_stopping(struct rp_provider *provider, int session_id, uint64_t keywords,
			  uint8_t level, void *ctx)
{
	uint64_t ticks = rp_load_relaxed(&demo_ticks);
	uint64_t gcs = heap_gc_count(), allocs = heap_alloc_count(), bytes = heap_alloc_bytes();
	uint64_t methods = jit_published();
	uint32_t sid = (uint32_t)session_id;
	/* a session may end while define_providers() still makes the
	 * event: pairs with its store_release */
	struct rp_event *end = rp_load_acquire(&ev_session_end);
	struct bytebuf p = { 0 };

	(void)provider, (void)keywords, (void)level, (void)ctx;
	bb_append_u32(&p, sid);
	bb_append_u64(&p, ticks);
	bb_append_u64(&p, gcs);
	bb_append_u64(&p, allocs);
	bb_append_u64(&p, bytes);
	bb_append_u64(&p, methods);
	if (!p.oom && end && rp_event_enabled(end) && rp_event_write(end, p.p, p.len) == 0)
		clr_expect("SessionEnd\tSessionId=%u\tTicks=%" PRIu64 "\tGCs=%" PRIu64
			   "\tAllocations=%" PRIu64 "\tAllocatedBytes=%" PRIu64
			   "\tMethodsPublished=%" PRIu64, sid, ticks, gcs, allocs, bytes, methods);
	bb_free(&p);
	fprintf(stderr, "session-end session %d: ticks %" PRIu64 " gcs %" PRIu64 " allocations %"
		PRIu64 " methods %" PRIu64 "\n", session_id, ticks, gcs, allocs, methods);
}

static struct rp_event *new_event(struct rp_provider *p, uint32_t id, const char *name,
				  uint8_t level, uint8_t opcode, const struct rp_field *f,
				  uint16_t nf)
{
	struct rp_event_opts o = { .sz = sizeof(o), .id = id, .name = name, .level = level,
				   .opcode = opcode, .nfields = nf, .fields = f };

	return rp_event_new(p, &o);
}

static int define_providers(void)
{
	struct rp_provider_opts po = { .sz = sizeof(po), .name = "Ringpipe-Demo",
				       .stopping_cb = demo_stopping };
	struct rp_provider *demo, *ctr;
	struct clr_callbacks cb = { .runtime_enable = heap_runtime_enable,
				    .sampler_enable = sampler_enable,
				    .rundown_stopping = jit_rundown_stopping };

	if (clr_events_init(&cb))
		return -1;
	demo = rp_provider_new(&po);
	po.name = "Ringpipe-Demo-Counters";
	po.stopping_cb = NULL;
	po.enable_cb = counters_enable;
	ctr = rp_provider_new(&po);
	if (!demo || !ctr)
		return -1;
	ev_tick = new_event(demo, 1, "Tick", 4, 0, tick_fields, 3);
	ev_work_start = new_event(demo, 2, "WorkStart", 4, 1, work_fields, 1);
	ev_work_stop = new_event(demo, 3, "WorkStop", 4, 2, work_fields, 1);
	ev_counter_mean = new_event(ctr, 1, "EventCounters", 0, 0, mean_top, 1);
	ev_counter_sum = new_event(ctr, 2, "EventCounters", 0, 0, sum_top, 1);
	/* the provider's stopping callback reads it, on whichever thread
	 * stops a session: pairs with the load_acquire in demo_stopping() */
	rp_store_release(&ev_session_end,
			 new_event(demo, 4, "SessionEnd", 4, 0, session_end_fields,
				   sizeof(session_end_fields) / sizeof(session_end_fields[0])));
	return ev_tick && ev_work_start && ev_work_stop && ev_counter_mean && ev_counter_sum &&
		ev_session_end ? 0 : -1;
}

/* ---- counters ------------------------------------------------------------- */

static double working_set_mb(void)
{
	unsigned long size = 0, rss = 0;
	FILE *f = fopen("/proc/self/statm", "re");

	if (!f)
		return 0;
	if (fscanf(f, "%lu %lu", &size, &rss) != 2)
		rss = 0;
	fclose(f);
	return (double)rss * (double)sysconf(_SC_PAGESIZE) / 1e6;
}

static void publish(uint32_t interval_s, double elapsed_s, uint64_t ticks)
{
	char series[64];
	struct bytebuf p = { 0 };
	double ws = working_set_mb();

	snprintf(series, sizeof(series), "Interval=%u", interval_s * 1000);
	utf8_to_utf16z(&p, "working-set");
	utf8_to_utf16z(&p, "Working Set");
	put_f64(&p, ws);
	put_f64(&p, 0.0);
	bb_append_u32(&p, 1);
	put_f64(&p, ws);
	put_f64(&p, ws);
	put_f32(&p, (float)elapsed_s);
	utf8_to_utf16z(&p, series);
	utf8_to_utf16z(&p, "Mean");
	utf8_to_utf16z(&p, "");
	utf8_to_utf16z(&p, "MB");
	write_built(ev_counter_mean, &p);

	p.len = 0;
	utf8_to_utf16z(&p, "ticks/sec");
	utf8_to_utf16z(&p, "Ticks");
	utf8_to_utf16z(&p, "00:00:01");
	put_f64(&p, (double)ticks);
	put_f32(&p, (float)elapsed_s);
	utf8_to_utf16z(&p, "");
	utf8_to_utf16z(&p, series);
	utf8_to_utf16z(&p, "Sum");
	utf8_to_utf16z(&p, "");
	write_built(ev_counter_sum, &p);
	bb_free(&p);
}

/* Publishes at the shortest interval any session asked for. */
SAMPLER_MANAGED(counters_run) static void *counters_main(void *arg)
{
	uint64_t last = rp_clock_mono_ns(), last_ticks = rp_load_relaxed(&demo_ticks);

	(void)arg;
	sampler_add_self(false);
	while (!stopping()) {
		uint32_t interval = 0;
		uint64_t now;
		int i;

		pthread_mutex_lock(&ctr_lock);
		for (i = 0; i < RP_MAX_SESSIONS; i++)
			if (ctr_interval_s[i] && (!interval || ctr_interval_s[i] < interval))
				interval = ctr_interval_s[i];
		if (!interval) {
			struct timespec ts;

			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += 100 * 1000000L;
			if (ts.tv_nsec >= 1000000000L)
				ts.tv_sec++, ts.tv_nsec -= 1000000000L;
			pthread_cond_timedwait(&ctr_cond, &ctr_lock, &ts);
			pthread_mutex_unlock(&ctr_lock);
			last = rp_clock_mono_ns();
			last_ticks = rp_load_relaxed(&demo_ticks);
			continue;
		}
		pthread_mutex_unlock(&ctr_lock);
		now = rp_clock_mono_ns();
		if (now - last >= (uint64_t)interval * 1000000000ull) {
			uint64_t t = rp_load_relaxed(&demo_ticks);

			publish(interval, (double)(now - last) / 1e9, t - last_ticks);
			last = now;
			last_ticks = t;
		}
		rp_clock_sleep_ns(20 * 1000000ull);
	}
	sampler_remove_self();
	return NULL;
}

/* ---- CPU workers ----------------------------------------------------------- */

#define WORK_UNIT 1000000u	/* iterations of the loop below: about 1 ms, longer than a
				 * sampling period, so no period can alias with a cycle */
static uint64_t work_sink;		/* atomic: keeps the workers' results alive */

/* The same code in each method, so a unit costs the same in each. */
static inline __attribute__((always_inline)) uint64_t work_spin(uint64_t x, uint32_t units)
{
	uint64_t i;

	for (i = 0; i < (uint64_t)units * WORK_UNIT; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		__asm__ __volatile__("" : "+r"(x));	/* no shortcut through the loop */
	}
	return x;
}

SAMPLER_MANAGED(work_compute) static uint64_t work_compute(uint64_t x) { return work_spin(x, 5); }
SAMPLER_MANAGED(work_hash) static uint64_t work_hash(uint64_t x) { return work_spin(x, 3); }
SAMPLER_MANAGED(work_parse) static uint64_t work_parse(uint64_t x) { return work_spin(x, 2); }

SAMPLER_MANAGED(work_run) static void *worker_main(void *arg)
{
	uint64_t x = (uintptr_t)arg + 1;

	sampler_add_self(true);
	while (!stopping()) {
		x = work_compute(x);
		x = work_hash(x);
		x = work_parse(x);
	}
	rp_store_relaxed(&work_sink, x);
	sampler_remove_self();
	return NULL;
}

/* ---- writers ------------------------------------------------------------- */

SAMPLER_MANAGED(writer_run) static void *writer_main(void *arg)
{
	struct demo_thread *t = arg;
	uint64_t start = rp_clock_mono_ns(), n = 0, work = 0;
	struct bytebuf p = { 0 };	/* one Tick payload at a time, reused */
	char text[64];

	sampler_add_self(true);
	while (!stopping()) {
		uint64_t due = (rp_clock_mono_ns() - start) / 1000 * t->rate / 1000000;

		for (; n < due && !stopping(); n++) {
			bool pair = n % 10 == 9;
			uint64_t id = ((uint64_t)t->index << 48) | work;

			if (pair && rp_event_enabled(ev_work_start))
				rp_event_write(ev_work_start, &id, 8);
			p.len = 0;
			bb_append_u64(&p, n + 1);
			bb_append_u32(&p, t->index);
			snprintf(text, sizeof(text), "tick %" PRIu64 " of thread %u", n + 1, t->index);
			utf8_to_utf16z(&p, text);
			/* traced: a session took the write and has it (0); not one
			 * that no session took at the edge of a stop
			 * (RP_WRITE_NO_SESSION), nor a drop (negative) */
			if (rp_event_enabled(ev_tick) && !p.oom) {
				struct iovec iov = { p.p, p.len };

				if (!rp_event_writev(ev_tick, &iov, 1, &tick_opts))
					rp_add_relaxed(&demo_traced, 1);
			}
			rp_add_relaxed(&demo_ticks, 1);
			if (pair) {
				if (rp_event_enabled(ev_work_stop))
					rp_event_write(ev_work_stop, &id, 8);
				work++;
			}
		}
		/* sleep until the next tick is due, at most 10 ms */
		{
			uint64_t next = start + (n + 1) * 1000000000ull / t->rate;
			uint64_t now = rp_clock_mono_ns(), cap = 10000000ull;

			if (next > now)
				rp_clock_sleep_ns(next - now < cap ? next - now : cap);
		}
	}
	bb_free(&p);
	sampler_remove_self();
	return NULL;
}

/* ---- main ------------------------------------------------------------------ */

/* Our socket: $TMPDIR (or /tmp)/dotnet-diagnostic-<pid>-*-socket. */
static void print_socket(void)
{
	const char *tmp = getenv("TMPDIR");
	char prefix[64], dir[4096];
	struct dirent *de;
	bool found = false;
	DIR *d;

	snprintf(dir, sizeof(dir), "%s", tmp && *tmp ? tmp : "/tmp");
	snprintf(prefix, sizeof(prefix), "dotnet-diagnostic-%d-", (int)getpid());
	d = opendir(dir);
	while (d && (de = readdir(d))) {
		if (!strncmp(de->d_name, prefix, strlen(prefix))) {
			printf("socket %s%s%s\n", dir, dir[strlen(dir) - 1] == '/' ? "" : "/",
			       de->d_name);
			found = true;
			break;
		}
	}
	if (d)
		closedir(d);
	if (!found)
		printf("socket none (only the configured diagnostic ports)\n");
}

SAMPLER_CODE_RANGE(program_main);
SAMPLER_CODE_RANGE(writer_run);
SAMPLER_CODE_RANGE(counters_run);
SAMPLER_CODE_RANGE(work_run);
SAMPLER_CODE_RANGE(work_compute);
SAMPLER_CODE_RANGE(work_hash);
SAMPLER_CODE_RANGE(work_parse);

#define WORK_SIGNATURE "unsigned int64  (unsigned int64)"

/* The managed code of this file, as rundown names it. */
static const struct sampler_code demo_code[] = {
	SAMPLER_CODE(program_main, "Demo.Program", "Main", "int32  (class System.String[])"),
	SAMPLER_CODE(writer_run, "Demo.Writer", "Run", "void  (int32)"),
	SAMPLER_CODE(counters_run, "Demo.Counters", "Run", "void  ()"),
	SAMPLER_CODE(work_run, "Demo.Worker", "Run", "void  (int32)"),
	SAMPLER_CODE_LEAF(work_compute, "Demo.Worker", "Compute", WORK_SIGNATURE),
	SAMPLER_CODE_LEAF(work_hash, "Demo.Worker", "Hash", WORK_SIGNATURE),
	SAMPLER_CODE_LEAF(work_parse, "Demo.Worker", "Parse", WORK_SIGNATURE),
};

/* What the options make */
struct demo_cfg {
	uint64_t duration_s, rate, threads, heap_nodes, seed, alloc_threads, jit_threads, jit_rate;
	uint64_t max_buffer_mb, jit_live, work_threads;
	const char *report, *expect;
};

#define DEMO(m) struct demo_cfg, m

static const struct tool_opt demo_opts[] = {
	TOOL_UINT("duration", 0, "SECONDS", 0, DEMO_MAX_DURATION, DEMO(duration_s),
		  "run this long (default 0: until SIGINT or SIGTERM)",
		  .bad = "takes whole seconds (0: until a signal)"),
	TOOL_UINT("rate", 0, "EVENTS_PER_SEC", 1, DEMO_MAX_RATE, DEMO(rate),
		  "Tick events per second per thread (default 10)",
		  .bad = "takes 1..10000000 events per second"),
	TOOL_UINT("threads", 0, "N", 1, DEMO_MAX_THREADS, DEMO(threads),
		  "threads writing Tick events (default 1)", .bad = "takes 1..256"),
	TOOL_UINT("heap-nodes", 0, "N", 1, HEAP_MAX_NODES, DEMO(heap_nodes),
		  "live objects in the simulated heap (default 200000,\n"
		  "at most 16000000)", .bad = "takes 1..16000000 objects"),
	TOOL_UINT("seed", 0, "S", 0, UINT64_MAX, DEMO(seed), "shape of the heap (default 1)",
		  .bad = "takes a number"),
	TOOL_UINT("alloc-threads", 0, "N", 0, HEAP_MAX_ALLOC_THREADS, DEMO(alloc_threads),
		  "threads allocating (GCAllocationTick every ~100 KB) and\n"
		  "triggering gen0/gen1 GCs (default 2, at most 64)", .bad = "takes 0..64"),
	TOOL_UINT("jit-threads", 0, "N", 0, JIT_MAX_THREADS, DEMO(jit_threads),
		  "threads publishing JIT-compiled methods (default 2)", .bad = "takes 0..64"),
	TOOL_UINT("jit-rate", 0, "N", 0, 1000000, DEMO(jit_rate),
		  "methods per second per JIT thread (default 100)",
		  .bad = "takes 0..1000000 methods per second (0: no limit)"),
	TOOL_UINT("jit-live", 0, "N", 1, JIT_MAX_LIVE, DEMO(jit_live),
		  "live methods per JIT thread (default 1024): beyond, the\n"
		  "oldest is unloaded and its slot reused", .bad = "takes 1..1048576 methods"),
	TOOL_UINT("work-threads", 0, "N", 0, 64, DEMO(work_threads),
		  "threads burning CPU in Demo.Worker.Compute, Hash and\n"
		  "Parse: 50 %, 30 % and 20 % of their time (default 0)", .bad = "takes 0..64"),
	TOOL_UINT("max-buffer-mb", 0, "N", 0, 1048576, DEMO(max_buffer_mb),
		  "caps the buffer an IPC client may ask for (0: no cap)",
		  .bad = "takes 0..1048576 MB (0: no cap)"),
	TOOL_STRING("heap-report", 0, "FILE", DEMO(report),
		    "after each heap walk, the walk's totals and per-type\n"
		    "counts (written to FILE.tmp, then renamed)"),
	TOOL_STRING("expect", 0, "FILE", DEMO(expect),
		    "appends one line per GC, bulk-header and rundown event\n"
		    "written: the values a decoder must find"),
	TOOL_OPTS_END
};

static const struct tool_cmd demo_cmd = { .prog = "ringpipe-demo", .usage = demo_usage,
					  .usage_end = demo_usage_end, .opts = demo_opts };

SAMPLER_MANAGED(program_main) int main(int argc, char **argv)
{
	struct demo_cfg c = { .rate = 10, .threads = 1, .heap_nodes = 200000, .seed = 1,
			      .alloc_threads = 2, .jit_threads = 2, .jit_rate = 100,
			      .jit_live = 1024 };
	struct heap_opts ho = { .nodes = 0 };
	struct jit_opts jo = { .threads = 0 };
	struct rp_ipc_opts io = { .sz = sizeof(io) };
	struct tool_args rest;
	struct demo_thread *t;
	pthread_t ctr_th, work_th[64];
	struct sigaction sa;
	uint64_t start;
	int rc;
	uint32_t k, started = 0, workers = 0;

	rc = tool_opts_parse(&demo_cmd, argc, argv, &c, &rest);
	if (rc != TOOL_OPTS_RUN)
		return rc;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);

	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("pid %d\n", (int)getpid());
	if (clr_expect_open(c.expect)) {
		fprintf(stderr, "ringpipe-demo: cannot open %s: %s\n", c.expect, strerror(errno));
		return 1;
	}
	ho.nodes = c.heap_nodes;
	ho.seed = c.seed;
	ho.alloc_threads = (uint32_t)c.alloc_threads;
	ho.report = c.report;
	jo.threads = (uint32_t)c.jit_threads;
	jo.capacity = (uint32_t)c.jit_live;
	jo.rate = (uint32_t)c.jit_rate;
	if (heap_init(&ho) || jit_init(&jo)) {
		fprintf(stderr, "ringpipe-demo: out of memory for the heap or the method tables\n");
		return 1;
	}
	if (sampler_code_add(demo_code, sizeof(demo_code) / sizeof(demo_code[0]))) {
		fprintf(stderr, "ringpipe-demo: too many managed code ranges\n");
		return 1;
	}
	if (define_providers()) {
		fprintf(stderr, "ringpipe-demo: cannot define the providers: %s\n", rp_last_error());
		return 1;
	}
	sampler_add_self(false);	/* the main thread: waits, outside managed code */
	/* the sampler and the allocators run before any session can ask for them */
	if (sampler_start() || heap_start() || jit_start()) {
		fprintf(stderr, "ringpipe-demo: cannot start the runtime's threads\n");
		return 1;
	}
	if (demo_metrics_start()) {
		fprintf(stderr, "ringpipe-demo: cannot define the counters: %s\n", rp_last_error());
		return 1;
	}
	/* With a suspend-mode port this returns once a tool sent ResumeRuntime. */
	io.max_buffer_bytes = c.max_buffer_mb << 20;
	io.runtime_version = CLR_VERSION;
	rc = rp_ipc_server_start(&io);
	if (rc == -EBUSY)
		rc = 0;		/* started already by the startup configuration */
	if (rc == -ECANCELED) {
		printf("socket none (diagnostics disabled)\n");
	} else if (rc) {
		fprintf(stderr, "ringpipe-demo: cannot start the diagnostics server: %s\n",
			*rp_last_error() ? rp_last_error() : strerror(-rc));
		return 1;
	} else {
		print_socket();
	}

	t = calloc(c.threads, sizeof(*t));
	if (!t || pthread_create(&ctr_th, NULL, counters_main, NULL)) {
		fprintf(stderr, "ringpipe-demo: cannot start threads\n");
		rp_ipc_server_stop();
		return 1;
	}
	/* names say which demo threads the sampler samples: all "demo-*" but
	 * demo-sampler, and the main thread */
	pthread_setname_np(ctr_th, "demo-counters");
	for (k = 0; k < c.threads; k++) {
		t[k].index = k;
		t[k].rate = c.rate;
		if (pthread_create(&t[k].th, NULL, writer_main, &t[k])) {
			fprintf(stderr, "ringpipe-demo: cannot start writer thread %u\n", k);
			request_stop();
			break;
		}
		pthread_setname_np(t[k].th, "demo-writer");
		started++;
	}
	for (k = 0; k < c.work_threads; k++) {
		if (pthread_create(&work_th[k], NULL, worker_main, (void *)(uintptr_t)k)) {
			fprintf(stderr, "ringpipe-demo: cannot start worker thread %u\n", k);
			request_stop();
			break;
		}
		pthread_setname_np(work_th[k], "demo-worker");
		workers++;
	}
	start = rp_clock_mono_ns();
	while (!stopping() &&
	       (!c.duration_s || rp_clock_mono_ns() - start < c.duration_s * 1000000000ull))
		rp_clock_sleep_ns(10 * 1000000ull);
	request_stop();
	for (k = 0; k < started; k++)
		pthread_join(t[k].th, NULL);
	for (k = 0; k < workers; k++)
		pthread_join(work_th[k], NULL);
	pthread_join(ctr_th, NULL);
	/* sessions stop (rundown, SessionEnd) while the runtime still runs */
	rp_ipc_server_stop();
	jit_stop();
	demo_metrics_stop();
	heap_stop();
	sampler_remove_self();
	sampler_stop();
	printf("ticks %" PRIu64 " traced %" PRIu64 "\n", rp_load_relaxed(&demo_ticks),
	       rp_load_relaxed(&demo_traced));
	free(t);
	return started == c.threads && workers == c.work_threads ? 0 : 1;
}
