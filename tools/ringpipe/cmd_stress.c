// SPDX-License-Identifier: MIT
/*
 * ringpipe stress: load a live session from many threads and account for
 * every event.
 *
 * The command defines a provider with one event, starts a session on it
 * (rp_session_start), lets T threads write N events each through
 * rp_event_write() as fast as they can, and stops the session. It then
 * prints one JSON line in which written + dropped = attempted must hold.
 *
 * Payload schema (exact for every --payload BYTES >= 16):
 *
 *   Counter u64      per-thread counter, 1..N
 *   Thread  u32      thread index, 0..T-1
 *   Pad     u32      0
 *   Tail    u8       only when BYTES == 17
 *   Data    u8[]     only when BYTES >= 18: u16 count (BYTES - 18), then
 *                    that many filler bytes
 *
 * Counting. rp_session_stats() cannot be called after rp_session_stop()
 * (stop frees the session), so once the writers are joined the command waits
 * until the drainer has serialized everything that was not dropped
 * (events_written + dropped == attempted), takes the stats then, and stops.
 * "written" is the drainer's own count. If the drainer makes no progress for
 * a while the wait gives up, "written" becomes attempted - dropped and a
 * warning says so.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/atomics.h"
#include "core/clock.h"
#include "cmds.h"
#include "core/futex.h"
#include "ringpipe/ringpipe.h"
#include "session/session.h"		/* rp_drain_throttle_ns: the drainer test hook */
#include "common/tool_opts.h"
#include "common/tool_util.h"

#define ST_MAX_THREADS 1024u
#define ST_MAX_EVENTS 4000000000ull	/* per thread: sequence numbers are u32 */
#define ST_MIN_PAYLOAD 16u
#define ST_MAX_PAYLOAD 65535u
#define ST_MAX_BUFFER_MB 65536u
#define ST_MAX_THROTTLE_US 10000000u	/* 10 s */
#define ST_PROGRESS_AFTER_NS 2000000000ull
#define ST_PROGRESS_EVERY_NS 1000000000ull
#define ST_STALL_NS 5000000000ull	/* drainer without progress: give up waiting */

static const char stress_usage[] =
"usage: ringpipe stress -o FILE [--threads T] [--events N] [--payload BYTES]\n"
"                       [--buffer-mb M] [--mode drop|block] [--format v5|v6]\n"
"                       [--provider NAME] [--throttle-us U] [--block-timeout D]\n"
"\n"
"Starts one session on provider NAME (default Ringpipe-Stress) with an M MiB\n"
"buffer, lets T threads write N events each (BYTES of payload) through\n"
"rp_event_write() as fast as they can, stops the session and prints one JSON\n"
"line: attempted, written, dropped by reason, the writers' elapsed time,\n"
"ns/event (per thread), events/s (all threads), output bytes, and the\n"
"drainer's late, corrupt and wakeup counts. written + dropped = attempted.\n"
"\n"
"Payload: Counter u64, Thread u32, Pad u32, then Tail u8 when BYTES is 17, or\n"
"Data, an array of u8 (u16 count, BYTES-18 bytes), when BYTES >= 18.\n";

static const char stress_usage_end[] =
"A mode or option the library refuses ends the command with the library's\n"
"message and exit status 1.\n";

struct stress_cfg {
	uint32_t threads;
	uint64_t events;
	uint32_t payload;
	uint64_t buffer_mb;
	int mode;		/* enum rp_buffering */
	int format;		/* 5 or 6 */
	const char *out;
	const char *provider;
	uint64_t throttle_us;
	uint32_t block_timeout_ms;
};

/*
 * Start gate: 0 wait, 1 go, -1 abort (a thread could not be created). A
 * futex word, not a condition variable: a broadcast makes every woken
 * writer take the condition's mutex in turn, and with hundreds of writers
 * on a few CPUs that convoy took milliseconds of the timed run.
 */
struct gate {
	int32_t state;
};

struct worker {
	/* written by the worker, read by the main thread */
	uint64_t done;			/* atomic: events attempted so far */
	uint64_t refused;		/* rp_event_write() != 0 */
	uint64_t loop_ns;
	int bad_rc;			/* first return value other than 0 / -ENOBUFS */
	/* set up by the main thread */
	pthread_t th;
	struct rp_event *ev;
	struct gate *gate;
	uint32_t *finished;		/* atomic: workers that are done */
	uint32_t index;
	uint64_t n;
	uint32_t len;
} __attribute__((aligned(64)));

static void st_sleep_ms(unsigned int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/* Builds the fixed part of a payload: everything but Counter. */
static void payload_init(uint8_t *p, uint32_t len, uint32_t index)
{
	uint32_t pad = 0, k;

	memset(p, 0, len);
	memcpy(p + 8, &index, 4);
	memcpy(p + 12, &pad, 4);
	if (len == 17) {
		p[16] = 0xa5;
	} else if (len >= 18) {
		uint16_t count = (uint16_t)(len - 18);

		memcpy(p + 16, &count, 2);
		for (k = 0; k < count; k++)
			p[18 + k] = (uint8_t)(k * 7 + index);
	}
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	uint8_t *p = malloc(w->len);
	uint64_t i, t0, refused = 0;
	int go;

	/* pairs with the store_release of state in gate_open() */
	while (!(go = rp_load_acquire(&w->gate->state)))
		rp_futex_wait((uint32_t *)&w->gate->state, 0, 0);
	if (go < 0 || !p) {
		if (!p)
			w->bad_rc = -ENOMEM;
		free(p);
		rp_add_relaxed(w->finished, 1);
		return NULL;
	}
	payload_init(p, w->len, w->index);

	t0 = rp_clock_mono_ns();
	for (i = 1; i <= w->n; i++) {
		int rc;

		memcpy(p, &i, 8);
		rc = rp_event_write(w->ev, p, w->len);
		if (rp_unlikely(rc)) {
			refused++;
			/* -ENOBUFS: dropped; another errno: the session's
			 * output failed and the write was dropped for it (both
			 * counted); -EINVAL and -ENOMEM are our own mistakes */
			if ((rc == -EINVAL || rc == -ENOMEM) && !w->bad_rc)
				w->bad_rc = rc;
		}
		if (rp_unlikely(!(i & 1023)))
			rp_store_relaxed(&w->done, i);
	}
	w->loop_ns = rp_clock_mono_ns() - t0;
	w->refused = refused;
	rp_store_relaxed(&w->done, w->n);
	free(p);
	rp_add_relaxed(w->finished, 1);
	return NULL;
}

static void gate_open(struct gate *g, int32_t state)
{
	/* pairs with the load_acquire of state in worker_main() */
	rp_store_release(&g->state, state);
	rp_futex_wake((uint32_t *)&g->state, INT32_MAX);
}

static uint64_t drops_total(const struct rp_session_stats *st)
{
	uint64_t n = 0;
	int r;

	for (r = 0; r < RP_DROP_REASON_NR; r++)
		n += st->dropped[r];
	return n;
}

enum { STRESS_MODE = 1, STRESS_FORMAT, STRESS_BLOCK_TIMEOUT };

#define STRESS(m) struct stress_cfg, m

static const struct tool_opt stress_opts[] = {
	TOOL_STRING(NULL, 'o', "FILE", STRESS(out), "the trace (required)", .nonempty = true),
	TOOL_UINT("threads", 0, "T", 1, ST_MAX_THREADS, STRESS(threads),
		  "writer threads, 1..1024 (default 2)"),
	TOOL_UINT("events", 0, "N", 1, ST_MAX_EVENTS, STRESS(events),
		  "events per thread, 1..4000000000 (default 1000000)"),
	TOOL_UINT("payload", 0, "BYTES", ST_MIN_PAYLOAD, ST_MAX_PAYLOAD, STRESS(payload),
		  "payload bytes, 16..65535 (default 32)"),
	TOOL_UINT("buffer-mb", 0, "M", 1, ST_MAX_BUFFER_MB, STRESS(buffer_mb),
		  "the session's buffer in MiB, 1..65536 (default 64)"),
	TOOL_TAKE(TOOL_OPT_STRING, "mode", 0, "drop|block", STRESS_MODE,
		  "the buffering mode (default drop)"),
	TOOL_TAKE(TOOL_OPT_STRING, "buffering-mode", 0, "drop|block", STRESS_MODE,
		  "another name for --mode"),
	TOOL_TAKE(TOOL_OPT_STRING, "format", 0, "v5|v6", STRESS_FORMAT,
		  "nettrace version (default v5)"),
	TOOL_STRING("provider", 0, "NAME", STRESS(provider),
		    "the provider, 1 to 255 bytes (default Ringpipe-Stress)", .nonempty = true),
	TOOL_UINT("throttle-us", 0, "U", 0, ST_MAX_THROTTLE_US, STRESS(throttle_us),
		  "the drainer sleeps U microseconds after every pass\n"
		  "(a test hook, so that Drop mode visibly drops; 0..10000000)"),
	TOOL_TAKE(TOOL_OPT_STRING, "block-timeout", 0, "D", STRESS_BLOCK_TIMEOUT,
		  "bounds one write's wait in Block mode (500ms, 2s): past\n"
		  "it the write drops, counted as timeout, and the session\n"
		  "stays Block. Default 0: no bound, a write waits as long\n"
		  "as the session runs"),
	TOOL_OPTS_END
};

static int stress_take(void *cfg, const struct tool_opt *o, char *v, uint64_t num)
{
	struct stress_cfg *c = cfg;

	if (o->id == STRESS_MODE) {
		if (!strcmp(v, "drop"))
			c->mode = RP_BUFFERING_DROP;
		else if (!strcmp(v, "block"))
			c->mode = RP_BUFFERING_BLOCK;
		else
			return tool_err("stress", "--%s must be drop or block, not '%s'", o->name,
					v), 2;
	} else if (o->id == STRESS_FORMAT) {
		if (!strcmp(v, "v5"))
			c->format = 5;
		else if (!strcmp(v, "v6"))
			c->format = 6;
		else
			return tool_err("stress", "--format must be v5 or v6, not '%s'", v), 2;
	} else if (tool_parse_block_timeout(v, &c->block_timeout_ms)) {	/* --block-timeout */
		return tool_err("stress", "--block-timeout must be a time of at least 1ms (500ms, "
				"2s) or 0 for none, not '%s'", v), 2;
	}
	return 0;
}

static const struct tool_cmd stress_cmd = {
	.name = "stress", .usage = stress_usage, .usage_end = stress_usage_end,
	.opts = stress_opts, .take = stress_take,
};

static struct rp_event *define_event(const char *provider, uint32_t len)
{
	struct rp_field fields[4] = {
		{ "Counter", RP_TYPE_U64, 0, 0, NULL },
		{ "Thread", RP_TYPE_U32, 0, 0, NULL },
		{ "Pad", RP_TYPE_U32, 0, 0, NULL },
		{ NULL, 0, 0, 0, NULL },
	};
	struct rp_provider_opts po = { .sz = sizeof(po), .name = provider };
	struct rp_event_opts eo = { .sz = sizeof(eo), .id = 1, .name = "Stress", .level = 4,
				    .nfields = 3, .fields = fields };
	struct rp_provider *p;

	if (len == 17) {
		fields[3] = (struct rp_field){ "Tail", RP_TYPE_U8, 0, 0, NULL };
		eo.nfields = 4;
	} else if (len >= 18) {
		fields[3] = (struct rp_field){ "Data", RP_TYPE_ARRAY, RP_TYPE_U8, 0, NULL };
		eo.nfields = 4;
	}
	p = rp_provider_new(&po);
	if (!p)
		return NULL;
	return rp_event_new(p, &eo);
}

/* Joins every started worker; prints progress on a terminal. */
static void wait_writers(struct worker *w, uint32_t nw, const uint32_t *finished,
			 uint64_t total, uint64_t t0, bool progress)
{
	uint64_t last = 0;
	uint32_t k;

	while (progress && rp_load_relaxed(finished) < nw) {
		uint64_t now, sum = 0;

		st_sleep_ms(50);
		now = rp_clock_mono_ns();
		if (now - t0 < ST_PROGRESS_AFTER_NS || now - last < ST_PROGRESS_EVERY_NS)
			continue;
		last = now;
		for (k = 0; k < nw; k++)
			sum += rp_load_relaxed(&w[k].done);
		fprintf(stderr, "ringpipe stress: %" PRIu64 " of %" PRIu64 " events written (%.0f%%)\n",
			sum, total, 100.0 * (double)sum / (double)total);
	}
	for (k = 0; k < nw; k++)
		pthread_join(w[k].th, NULL);
}

/*
 * Waits until the drainer has serialized everything that was not dropped.
 * Returns true when it has; st holds the last stats read either way.
 */
static bool wait_drained(struct rp_session *s, uint64_t attempted, uint64_t throttle_ns,
			 struct rp_session_stats *st, bool progress)
{
	uint64_t start = rp_clock_mono_ns(), last_change = start, last_print = 0, prev = UINT64_MAX;
	uint64_t stall = ST_STALL_NS > 3 * throttle_ns ? ST_STALL_NS : 3 * throttle_ns;

	for (;;) {
		uint64_t now;

		st->sz = sizeof(*st);
		if (rp_session_stats(s, st))
			return false;
		/* after an output error too: the drainer goes on consuming,
		 * counting what it cannot write */
		if (st->events_written + drops_total(st) >= attempted)
			return true;
		now = rp_clock_mono_ns();
		if (st->events_written != prev) {
			prev = st->events_written;
			last_change = now;
		} else if (now - last_change > stall) {
			return false;
		}
		if (progress && now - start >= ST_PROGRESS_AFTER_NS &&
		    now - last_print >= ST_PROGRESS_EVERY_NS) {
			last_print = now;
			fprintf(stderr, "ringpipe stress: draining, %" PRIu64 " of %" PRIu64
				" events serialized\n", st->events_written,
				attempted - drops_total(st));
		}
		st_sleep_ms(1);
	}
}

int cmd_stress(int argc, char **argv)
{
	struct stress_cfg c = { .threads = 2, .events = 1000000, .payload = 32, .buffer_mb = 64,
				.mode = RP_BUFFERING_DROP, .format = 5,
				.provider = "Ringpipe-Stress" };
	struct gate gate = { 0 };
	struct rp_session_stats st = { .sz = sizeof(st) };
	struct rp_provider_config pc = { 0 };
	struct rp_session_opts so = { .sz = sizeof(so) };
	struct rp_session *s;
	struct rp_event *ev;
	struct worker *w;
	struct stat fst;
	uint64_t attempted, dropped, written, refused = 0, t0, t1, t_start, t_stop, bytes;
	double ns_sum = 0, elapsed;
	uint32_t finished = 0, started = 0, k;
	struct tool_args rest;
	bool progress = isatty(STDERR_FILENO), drained;
	int rc, err, bad_rc = 0;

	rc = tool_opts_parse(&stress_cmd, argc, argv, &c, &rest);
	if (rc != TOOL_OPTS_RUN)
		return rc;
	if (!c.out)
		return tool_err("stress", "-o FILE is required (see --help)"), 2;
	if (strlen(c.provider) > 255)
		return tool_err("stress", "--provider needs a name of 1 to 255 bytes"), 2;

	ev = define_event(c.provider, c.payload);
	if (!ev)
		return tool_err("stress", "cannot define the event: %s",
				*rp_last_error() ? rp_last_error() : strerror(errno));
	w = aligned_alloc(64, sizeof(*w) * c.threads);
	if (!w)
		return tool_err("stress", "out of memory");
	memset(w, 0, sizeof(*w) * c.threads);

	pc.name = c.provider;
	so.providers = &pc;
	so.nproviders = 1;
	so.format = c.format;
	so.buffering = c.mode;
	so.block_timeout_ms = c.block_timeout_ms;
	so.buffer_bytes = c.buffer_mb << 20;
	so.path = c.out;
	so.fd = -1;
	rp_store_relaxed(&rp_drain_throttle_ns, c.throttle_us * 1000);

	t_start = rp_clock_mono_ns();
	s = rp_session_start(&so);
	if (!s) {
		err = errno;
		free(w);
		return tool_err("stress", "cannot start the session: %s",
				*rp_last_error() ? rp_last_error() : strerror(err));
	}

	for (k = 0; k < c.threads; k++) {
		w[k].ev = ev;
		w[k].gate = &gate;
		w[k].finished = &finished;
		w[k].index = k;
		w[k].n = c.events;
		w[k].len = c.payload;
		err = pthread_create(&w[k].th, NULL, worker_main, &w[k]);
		if (err) {
			gate_open(&gate, -1);
			wait_writers(w, started, &finished, 1, 0, false);
			rp_session_stop(s);
			free(w);
			return tool_err("stress", "cannot create writer thread %u: %s", k,
					strerror(err));
		}
		started++;
	}
	t0 = rp_clock_mono_ns();
	gate_open(&gate, 1);
	attempted = (uint64_t)c.threads * c.events;
	wait_writers(w, c.threads, &finished, attempted, t0, progress);
	t1 = rp_clock_mono_ns();

	for (k = 0; k < c.threads; k++) {
		refused += w[k].refused;
		ns_sum += (double)w[k].loop_ns / (double)w[k].n;
		if (w[k].bad_rc && !bad_rc)
			bad_rc = w[k].bad_rc;
	}

	drained = wait_drained(s, attempted, c.throttle_us * 1000, &st, progress);
	err = rp_session_stop(s);
	t_stop = rp_clock_mono_ns();
	free(w);

	dropped = drops_total(&st);
	written = drained ? st.events_written : attempted - dropped;
	if (!drained)
		fprintf(stderr, "ringpipe stress: warning: the drainer had serialized %" PRIu64
			" events before stop; \"written\" is attempted - dropped\n",
			st.events_written);
	/* after an output error the drainer also counts what it could not get
	 * out, writes that had returned 0 among them */
	if (refused > dropped || (!st.output_error && refused != dropped))
		fprintf(stderr, "ringpipe stress: warning: %" PRIu64 " writes returned an error "
			"but the session counted %" PRIu64 " drops\n", refused, dropped);
	bytes = stat(c.out, &fst) == 0 && S_ISREG(fst.st_mode) ? (uint64_t)fst.st_size :
		st.bytes_written;
	elapsed = (double)(t1 - t0) / 1e9;

	printf("{\"attempted\":%" PRIu64 ",\"written\":%" PRIu64 ",\"dropped\":{\"full\":%" PRIu64
	       ",\"too_big\":%" PRIu64 ",\"no_session\":%" PRIu64 ",\"aborted\":%" PRIu64
	       ",\"alloc\":%" PRIu64 ",\"output\":%" PRIu64 ",\"timeout\":%" PRIu64 "},"
	       "\"elapsed_s\":%.6f,\"ns_per_event\":%.2f,"
	       "\"events_per_s\":%.0f,\"bytes\":%" PRIu64 ",\"late\":%" PRIu64 ",\"corrupt\":%"
	       PRIu64 ",\"wakeups\":%" PRIu64 ",\"mode\":\"%s\",\"format\":\"v%d\","
	       "\"total_s\":%.6f}\n",
	       attempted, written, st.dropped[RP_DROP_REASON_FULL],
	       st.dropped[RP_DROP_REASON_TOO_BIG], st.dropped[RP_DROP_REASON_NO_SESSION],
	       st.dropped[RP_DROP_REASON_ABORTED], st.dropped[RP_DROP_REASON_ALLOC],
	       st.dropped[RP_DROP_REASON_OUTPUT], st.dropped[RP_DROP_REASON_TIMEOUT], elapsed,
	       ns_sum / c.threads, elapsed > 0 ? (double)attempted / elapsed : 0.0, bytes,
	       st.late_events, st.corrupt_records, st.drainer_wakeups,
	       c.mode == RP_BUFFERING_BLOCK ? "block" : "drop", c.format,
	       (double)(t_stop - t_start) / 1e9);
	fflush(stdout);

	if (bad_rc)
		return tool_err("stress", "rp_event_write failed: %s", strerror(-bad_rc));
	if (err)
		return tool_err("stress", "%s: the session ended with an error: %s", c.out,
				strerror(-err));
	return 0;
}
