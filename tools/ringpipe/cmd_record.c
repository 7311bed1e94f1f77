// SPDX-License-Identifier: MIT
/*
 * ringpipe record: one in-process session whose events come from the kernel
 * (BPF on USDT probes of unmodified runtimes, scheduler tracepoints) rather
 * than from producers linked with libringpipe. The capture providers are
 * ordinary ringpipe providers, so the session's drainer merges their events
 * by timestamp and writes one nettrace file like any other session.
 *
 * Stops on Ctrl-C or SIGTERM, at the end of --duration, or when the traced
 * process (-p) or command (-- CMD) exits; whatever the BPF ring buffer still
 * holds is written before the trace is closed.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "capture/bpf_capture.h"
#include "core/clock.h"
#include "cmds.h"
#include "capture/record_sample.h"
#include "ringpipe/ringpipe.h"
#include "capture/sample_out.h"
#include "symbols/symbolize.h"
#include "common/tool_opts.h"
#include "common/tool_util.h"

#define RE_TICK_MS 100
#define RE_MAX_USDT 16
#define RE_MAX_PROVIDERS 32
#define RE_MAX_DURATION_NS (100ull * 365 * 86400 * 1000000000ull)

static const char record_usage[] =
"usage: ringpipe record [-p PID | -a] [options] -o FILE\n"
"       ringpipe record [options] -o FILE -- CMD [ARGS...]\n"
"\n"
"Records kernel-assisted events into a nettrace file: USDT probes of\n"
"unmodified runtimes and scheduler tracepoints, through BPF, each a\n"
"self-describing event of its own provider (see ringpipe(1) and\n"
"Documentation/kernel.md). Needs CAP_BPF and CAP_PERFMON (or root).\n";

static const char record_usage_end[] =
"-- CMD [ARGS...] starts CMD, traces it from its exec and stops when it exits.\n";

static volatile sig_atomic_t re_stop;

static void on_signal(int sig)
{
	(void)sig;
	re_stop = 1;
}

/* "Name[:Keywords[:Level]]": keywords decimal or 0x-hex. */
static int parse_provider(char *spec, struct rp_provider_config *pc)
{
	char *kw = strchr(spec, ':'), *lv = NULL, *end;

	memset(pc, 0, sizeof(*pc));
	pc->name = spec;
	if (kw) {
		*kw++ = 0;
		lv = strchr(kw, ':');
		if (lv)
			*lv++ = 0;
		if (*kw) {
			errno = 0;
			pc->keywords = strtoull(kw, &end, 0);
			if (errno || *end)
				return -EINVAL;
		}
		if (lv && *lv) {
			unsigned long l = strtoul(lv, &end, 10);

			if (*end || l > 5)
				return -EINVAL;
			pc->level = (uint8_t)l;
		}
	}
	return *spec ? 0 : -EINVAL;
}

struct record_cfg {
	struct rp_capture_opts co;
	const char *usdt[RE_MAX_USDT];
	const char *out;
	const char *providers_arg;	/* --providers */
	char *providers;	/* a copy, cut up into the session's providers */
	uint64_t duration_ns;
	int format;
	uint32_t sample_hz;	/* --sample: 0 when off */
	bool all;
	char **cmd;
};

enum { RECORD_USDT = 1, RECORD_KERNEL, RECORD_FORMAT, RECORD_BUFFER };

static const struct tool_opt record_opts[] = {
	TOOL_UINT("process-id", 'p', "PID", 1, INT32_MAX, struct record_cfg, co.pid,
		  "trace that process (kernel events: and its children)",
		  .bad = "takes a process id (a whole number > 0)"),
	TOOL_FLAG("all", 'a', struct record_cfg, all, "trace every process"),
	TOOL_TAKE(TOOL_OPT_STRING, "usdt", 0, "WHAT[,WHAT...]", RECORD_USDT,
		  "python     CPython gc__start/gc__done\n"
		  "jvm        HotSpot GC, memory pools, class loading,\n"
		  "           method compiles, thread starts\n"
		  "BINARY:PROVIDER:PROBE  any USDT probe (first 6 args)"),
	TOOL_TAKE(TOOL_OPT_STRING, "kernel", 0, "LIST", RECORD_KERNEL,
		  "exec (exec, fork, exit) and/or sched (context switches)"),
	TOOL_UINT("sample", 0, "HZ", 1, 100000, struct record_cfg, sample_hz,
		  "CPU samples with kernel and user stacks, HZ per CPU\n"
		  "(cpu-clock, or cycles where the CPU has them), and\n"
		  "what symbolizing them needs (ringpipe report, convert)",
		  .bad = "takes a rate in Hz (1..100000)"),
	TOOL_STRING("providers", 0, "LIST", struct record_cfg, providers_arg,
		    "Name[:Keywords[:Level]],... of the capture providers\n"
		    "to enable (default: every one the options above use)"),
	TOOL_DURATION("duration", 0, "TIME", 1, RE_MAX_DURATION_NS, struct record_cfg, duration_ns,
		      "SECONDS[.FRACTION], a number with a unit (ns, us, ms,\n"
		      "s, m, h: 500ms, 2m), HH:MM:SS or DD:HH:MM:SS"),
	TOOL_TAKE(TOOL_OPT_STRING, "format", 0, "5|6", RECORD_FORMAT,
		  "nettrace version (default 5)"),
	TOOL_TAKE_NUMBER(TOOL_OPT_MIB, "buffer-mb", 0, "N", 1, 1024, RECORD_BUFFER,
			 "BPF ring buffer size, power of two (default 8)",
			 .bad = "takes a power of two from 1 to 1024"),
	TOOL_STRING("output", 'o', "FILE", struct record_cfg, out, "the trace (required)"),
	TOOL_OPTS_END
};

static int record_take(void *cfg, const struct tool_opt *o, char *v, uint64_t num)
{
	struct record_cfg *c = cfg;
	char err[256];

	if (o->id == RECORD_USDT &&
	    rp_capture_parse_usdt(&c->co, v, c->usdt, RE_MAX_USDT, err, sizeof(err)))
		return tool_err("record", "%s", err), 2;
	if (o->id == RECORD_KERNEL && rp_capture_parse_kernel(&c->co, v, err, sizeof(err)))
		return tool_err("record", "%s", err), 2;
	if (o->id == RECORD_FORMAT) {
		if (strcmp(v, "5") && strcmp(v, "6") && strcmp(v, "v5") && strcmp(v, "v6"))
			return tool_err("record", "--format takes 5 or 6, not '%s'", v), 2;
		c->format = v[strlen(v) - 1] - '0';
	}
	if (o->id == RECORD_BUFFER) {
		if (num & (num - 1))
			return tool_err("record", "--buffer-mb takes a power of two from 1 to "
					"1024, not '%s'", v), 2;
		c->co.ringbuf_bytes = (uint32_t)num;
	}
	return 0;
}

static const struct tool_cmd record_cmd = {
	.name = "record", .usage = record_usage, .usage_end = record_usage_end,
	.opts = record_opts, .take = record_take, .cmdline = true,
};

/* Parses argv into c; TOOL_OPTS_RUN, or the exit status. */
static int parse_args(int argc, char **argv, struct record_cfg *c)
{
	struct tool_args rest;
	int rc = tool_opts_parse(&record_cmd, argc, argv, c, &rest);

	if (rc != TOOL_OPTS_RUN)
		return rc;
	if (rest.dashdash && !rest.argc)
		return tool_err("record", "'--' must be followed by a command to run"), 2;
	c->cmd = rest.argc ? rest.argv : NULL;
	if (!c->out)
		return tool_err("record", "-o FILE is required"), 2;
	if (!!c->co.pid + c->all + !!c->cmd != 1)
		return tool_err("record", "give exactly one of -p PID, -a, or -- CMD"), 2;
	if (!c->co.python && !c->co.jvm && !c->co.nusdt && !c->co.kernel_proc &&
	    !c->co.kernel_sched && !c->sample_hz)
		return tool_err("record", "nothing to record: give --usdt, --kernel and/or "
				"--sample"), 2;
	if (c->providers_arg && !(c->providers = strdup(c->providers_arg)))
		return tool_err("record", "out of memory");
	c->co.usdt = c->usdt;
	return TOOL_OPTS_RUN;
}

static void progress(const struct rp_capture_stats *st, const struct rp_session_stats *ss,
		     uint64_t ms, bool final)
{
	fprintf(stderr, "%srecording: %.1f s, %" PRIu64 " kernel records, %" PRIu64
		" events written, %" PRIu64 " lost%s",
		final ? "" : "\r", (double)ms / 1000, st->records, ss->events_written,
		st->kernel_drops + st->write_drops, final ? "\n" : "   ");
}

/* The session's providers: --providers, or every one the options use
 * (and the sampler's). 0, or the exit status after a message. */
static int record_providers(struct record_cfg *c, struct rp_provider_config *pcs, size_t *np)
{
	const char *names[RE_MAX_PROVIDERS];

	*np = 0;
	if (c->providers) {
		char *save = NULL, *w;

		for (w = strtok_r(c->providers, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
			if (*np == RE_MAX_PROVIDERS || parse_provider(w, &pcs[*np]))
				return tool_err("record", "--providers takes Name[:Keywords[:Level]],..."
						" (at most %d)", RE_MAX_PROVIDERS), 2;
			(*np)++;
		}
	} else {
		size_t k, n = rp_capture_provider_names(&c->co, names, RE_MAX_PROVIDERS - 2);

		for (k = 0; k < n; k++)
			pcs[(*np)++] = (struct rp_provider_config){ .name = names[k] };
		if (c->sample_hz) {
			pcs[(*np)++] = (struct rp_provider_config){ .name = SAMPLER_PROVIDER };
			pcs[(*np)++] = (struct rp_provider_config){ .name = SYM_PROVIDER };
		}
	}
	if (c->sample_hz && record_sampler_define())
		return tool_err("record", "out of memory");
	return 0;
}

/* Waits for Ctrl-C or SIGTERM, the end of the duration or of the traced
 * process; shows progress on a terminal. */
static void record_wait(const struct record_cfg *c, struct rp_capture *cap, struct rp_session *s,
			pid_t *child, int *status, bool tty)
{
	struct rp_session_stats ss = { .sz = sizeof(ss) };
	struct rp_capture_stats st;
	uint64_t t0 = rp_clock_mono_ns(), last = 0;

	while (!re_stop) {
		struct timespec ts = { 0, RE_TICK_MS * 1000000l };
		uint64_t el_ns = rp_clock_mono_ns() - t0, el = el_ns / 1000000u;

		if (c->duration_ns && el_ns >= c->duration_ns)
			break;
		if (*child > 0) {
			if (waitpid(*child, status, WNOHANG) == *child) {
				*child = 0;
				break;
			}
		} else if (c->co.pid > 0 && kill(c->co.pid, 0) && errno == ESRCH) {
			break;	/* the traced process is gone */
		}
		if (tty && el - last >= 1000) {
			last = el;
			rp_capture_stats(cap, &st);
			rp_session_stats(s, &ss);
			progress(&st, &ss, el, false);
		}
		nanosleep(&ts, NULL);
	}
}

/* Records as c says into one session on pcs; the exit status. */
static int record_run(struct record_cfg *c, struct rp_provider_config *pcs, size_t np)
{
	struct rp_session_opts so = { .sz = sizeof(so) };
	struct rp_session_stats ss = { .sz = sizeof(ss) };
	struct rp_capture_stats st;
	struct rp_session *s = NULL;
	struct rp_capture *cap = NULL;
	struct record_sampler *rs = NULL;
	struct sigaction sa;
	char err[512];
	bool tty = isatty(2);
	int rc = 0, go_fd = -1, status = 0;
	pid_t child = 0;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);

	if (c->cmd) {
		child = tool_spawn_held("record", c->cmd, &go_fd);
		if (child < 0) {
			rc = tool_err("record", "cannot start %s: %s", c->cmd[0], strerror(errno));
			goto out;
		}
		c->co.pid = child;
	}
	/* the session first: its drainer runs before the first BPF record */
	so.providers = pcs;
	so.nproviders = (uint32_t)np;
	so.format = c->format;
	so.path = c->out;
	/* one traced process: readers attribute the events to it, not to us */
	so.process_id = c->co.pid > 0 ? (uint32_t)c->co.pid : 0;
	s = rp_session_start(&so);
	if (!s) {
		rc = tool_err("record", "cannot start the session: %s", rp_last_error());
		goto out;
	}
	c->co.session = s;
	cap = rp_capture_open(&c->co, err, sizeof(err));
	if (cap && c->sample_hz) {
		rs = record_sampler_open(cap, c->sample_hz, c->co.pid, err, sizeof(err));
		if (!rs) {
			rc = tool_err("record", "%s", err);
			goto out;
		}
	}
	if (!cap || rp_capture_start(cap)) {
		rc = tool_err("record", "%s", cap ? "cannot start the consumer thread" : err);
		goto out;
	}
	fprintf(stderr, "ringpipe record: %zu probes attached, recording to %s%s\n",
		rp_capture_nlinks(cap), c->out, tty ? " (Ctrl-C to stop)" : "");
	if (go_fd >= 0) {
		if (write(go_fd, "g", 1) != 1)
			rc = tool_err("record", "cannot start %s", c->cmd[0]);
		close(go_fd);
		go_fd = -1;
	}
	record_wait(c, cap, s, &child, &status, tty);
	rp_capture_stop(cap);
	if (rs) {
		struct record_sampler_stats rst = { 0 };

		record_sampler_close(rs, &rst);	/* the queued samples first */
		rs = NULL;
		fprintf(stderr, "ringpipe record: %" PRIu64 " CPU samples (%s), %" PRIu64
			" lost (BPF ring buffer full %" PRIu64 ", session rings full %" PRIu64
			"), %zu mappings described\n", rst.samples, rst.event ? rst.event : "?",
			rst.kernel_drops + rst.write_drops, rst.kernel_drops, rst.write_drops,
			rst.modules);
	}
	rp_capture_stats(cap, &st);
	/* read before stop frees the session; the capture is stopped, so the
	 * final drain only merges what is queued and adds no late events */
	rp_session_stats(s, &ss);
	rc = rp_session_stop(s);
	s = NULL;
	if (tty)
		fputc('\n', stderr);
	fprintf(stderr, "ringpipe record: %" PRIu64 " kernel records, %" PRIu64 " written, %" PRIu64
		" lost (BPF ring buffer full %" PRIu64 ", session rings full %" PRIu64 "), %" PRIu64
		" late, %" PRIu64 " malformed; %s\n",
		st.records, st.written, st.kernel_drops + st.write_drops, st.kernel_drops,
		st.write_drops, ss.late_events, st.bad, c->out);
	if (rc)
		rc = tool_err("record", "writing %s failed: %s", c->out, strerror(-rc));
out:
	if (go_fd >= 0)
		close(go_fd);	/* the held child sees EOF and exits 127 */
	record_sampler_close(rs, NULL);
	if (s)
		rp_session_stop(s);
	rp_capture_close(cap);
	if (child > 0) {
		if (rc)
			kill(child, SIGTERM);
		waitpid(child, &status, 0);
	}
	return rc;
}

int cmd_record(int argc, char **argv)
{
	struct record_cfg c = { .co = { .sz = sizeof(c.co) }, .format = 5 };
	struct rp_provider_config pcs[RE_MAX_PROVIDERS];
	char err[512];
	size_t np;
	int rc = parse_args(argc, argv, &c);

	if (rc != TOOL_OPTS_RUN) {
		/* rc as it is */
	} else if (rp_capture_check_privilege(err, sizeof(err)) ||
		   rp_capture_define(&c.co, err, sizeof(err))) {
		rc = tool_err("record", "%s", err);
	} else if (!(rc = record_providers(&c, pcs, &np))) {
		rc = record_run(&c, pcs, np);
	}
	free(c.providers);
	return rc;
}
