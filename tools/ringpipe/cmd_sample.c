// SPDX-License-Identifier: MIT
/*
 * ringpipe sample: CPU sampling with BPF into a nettrace file.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "cmds.h"
#include "capture/cpu_sampler.h"
#include "util/hmap.h"
#include "capture/sample_out.h"
#include "symbols/symbolize.h"
#include "common/tool_opts.h"
#include "common/tool_util.h"

#define SA_MAX_DURATION_NS 1000000000000000000ull	/* about 31 years */

static const char sample_usage[] =
"usage: ringpipe sample [-p PID | -a] [-F HZ] [--duration D] -o FILE [options]\n"
"       ringpipe sample [-F HZ] -o FILE [options] -- CMD [ARG...]\n"
"\n"
"Samples the stacks (kernel and user) of a process, of every process (-a), or\n"
"of a command it starts, HZ times a second on each CPU, with a BPF program on\n"
"a perf event, and writes a nettrace file: Ringpipe-Sampler/Sample events on\n"
"the sampled threads with the stack as the event's stack, plus the modules\n"
"mapped by each sampled process (Ringpipe-Symbols), so that 'ringpipe report'\n"
"and 'ringpipe convert' symbolize the frames after the process has exited.\n";

static const char sample_usage_end[] =
"Needs CAP_BPF and CAP_PERFMON (or root). Frames need frame pointers to\n"
"unwind past the leaf (gcc/clang -fno-omit-frame-pointer).\n"
"Prints a JSON line: {\"samples\":N,\"dropped\":N,\"event\":\"...\",\"modules\":N}.\n";

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig)
{
	stop_flag = 1;
}

struct ctx {
	struct sample_writer *w;
	struct sym_table *syms;
	struct hmap seen;	/* pids snapshotted */
	uint32_t *pids;
	size_t npids, cappids;
	int err;
};

/* Snapshots a process the first time one of its threads is sampled, while
 * it is surely alive (it was running a moment ago). */
static void note_pid(struct ctx *c, uint32_t pid, uint64_t ts)
{
	uint64_t v;

	if (hmap_get(&c->seen, pid, &v))
		return;
	if (hmap_put(&c->seen, pid, 1) ||
	    array_grow((void **)&c->pids, &c->cappids, c->npids, sizeof(*c->pids), 64)) {
		c->err = -ENOMEM;
		return;
	}
	c->pids[c->npids++] = pid;
	sym_snapshot_pid(c->syms, pid);
	if (sample_writer_symbols(c->w, c->syms, ts))
		c->err = -ENOMEM;
}

static int on_sample(void *arg, const struct rp_sample_rec *r)
{
	struct ctx *c = arg;
	int err;

	note_pid(c, r->pid, r->ts_ns);
	err = sampler_write(c->w, r);
	if (err && !c->err)
		c->err = err;
	return 0;
}

static void resnapshot(struct ctx *c)
{
	uint64_t now = rp_clock_mono_ns();
	size_t i;

	/* mappings appear after the first look (dlopen, a JIT's code) */
	for (i = 0; i < c->npids; i++)
		sym_snapshot_pid(c->syms, c->pids[i]);
	if (sample_writer_symbols(c->w, c->syms, now))
		c->err = -ENOMEM;
}

struct sample_cfg {
	struct cpu_sampler_opts so;
	const char *out;
	const char *cgroup;	/* --cgroup: the directory */
	char **cmd;		/* -- CMD ARGS... */
	bool all;		/* -a */
	uint64_t dur_ns;	/* 0: until Ctrl-C, or until the process ends */
};

enum { SAMPLE_EVENT = 1 };

static const struct tool_opt sample_opts[] = {
	TOOL_UINT(NULL, 'p', "PID", 1, INT32_MAX, struct sample_cfg, so.pid,
		  "sample this process (all its threads)",
		  .bad = "takes a process id (a whole number > 0)"),
	TOOL_FLAG(NULL, 'a', struct sample_cfg, all, "sample every process"),
	TOOL_UINT(NULL, 'F', "HZ", 1, 100000, struct sample_cfg, so.freq_hz,
		  "samples per second per CPU (default 99, at most 100000)",
		  .bad = "takes a frequency from 1 to 100000 Hz"),
	TOOL_DURATION("duration", 0, "D", 1, SA_MAX_DURATION_NS, struct sample_cfg, dur_ns,
		      "stop after D (seconds, a number with a unit: 500ms,\n"
		      "2s, 1m, 1h; or HH:MM:SS);\n"
		      "default: until Ctrl-C, or until CMD exits"),
	TOOL_STRING("cgroup", 0, "PATH", struct sample_cfg, cgroup,
		    "only threads in this cgroup v2 (e.g.\n"
		    "/sys/fs/cgroup/system.slice/foo.service)"),
	TOOL_TAKE(TOOL_OPT_STRING, "event", 0, "E", SAMPLE_EVENT,
		  "auto (cycles where the CPU has counters, else\n"
		  "cpu-clock), cycles or cpu-clock"),
	TOOL_FLAG("no-kernel", 0, struct sample_cfg, so.no_kernel_stacks,
		  "do not capture kernel stacks"),
	TOOL_STRING(NULL, 'o', "FILE", struct sample_cfg, out, "output file (required)"),
	TOOL_OPTS_END
};

static int sample_take(void *cfg, const struct tool_opt *o, char *v, uint64_t num)
{
	struct sample_cfg *c = cfg;

	if (!strcmp(v, "auto"))
		c->so.event = CPU_SAMPLER_EVENT_AUTO;
	else if (!strcmp(v, "cycles"))
		c->so.event = CPU_SAMPLER_EVENT_CYCLES;
	else if (!strcmp(v, "cpu-clock"))
		c->so.event = CPU_SAMPLER_EVENT_CPU_CLOCK;
	else
		return tool_err("sample", "--event must be auto, cycles or cpu-clock, not '%s'",
				v), 2;
	return 0;
}

static const struct tool_cmd sample_cmd = {
	.name = "sample", .usage = sample_usage, .usage_end = sample_usage_end,
	.opts = sample_opts, .take = sample_take, .cmdline = true,
};

/* Parses and checks argv into c; TOOL_OPTS_RUN, or the exit status (1, 2). */
static int parse_args(int argc, char **argv, struct sample_cfg *c)
{
	struct tool_args rest;
	int rc = tool_opts_parse(&sample_cmd, argc, argv, c, &rest);

	if (rc != TOOL_OPTS_RUN)
		return rc;
	if (rest.dashdash && !rest.argc)
		return tool_err("sample", "'--' must be followed by a command"), 2;
	c->cmd = rest.argc ? rest.argv : NULL;
	if (!c->out)
		return tool_err("sample", "-o FILE is required (see --help)"), 2;
	if ((c->so.pid != 0) + c->all + (c->cmd != NULL) != 1)
		return tool_err("sample", "give exactly one of -p PID, -a or -- CMD"), 2;
	if (c->so.pid && kill((pid_t)c->so.pid, 0) && errno == ESRCH)
		return tool_err("sample", "no process %u", c->so.pid);
	if (c->cgroup) {
		struct statfs sf;
		struct stat st;

		/* on cgroup v2 a cgroup's id is its directory's inode number;
		 * a v1 hierarchy's inode numbers mean nothing to the BPF side */
		if (stat(c->cgroup, &st) || !S_ISDIR(st.st_mode) || statfs(c->cgroup, &sf) ||
		    sf.f_type != CGROUP2_SUPER_MAGIC)
			return tool_err("sample", "--cgroup %s: not a cgroup v2 directory (see "
					"/proc/PID/cgroup, the line starting with 0::)", c->cgroup);
		c->so.cgroup_id = st.st_ino;
	}
	return TOOL_OPTS_RUN;
}

/* Samples as cfg says; the exit status. */
static int sample_run(const struct sample_cfg *cfg)
{
	struct cpu_sampler_opts so = cfg->so;
	struct sample_writer_opts wo = { .format = NT_FORMAT_V5 };
	struct ctx c = { 0 };
	const char *out = cfg->out;
	char **cmd = cfg->cmd, err[256];
	bool all = cfg->all;
	uint64_t dur_ns = cfg->dur_ns, t_end, last_snap;
	int fd = -1, go_fd = -1, rc = 1, e;
	pid_t child = 0;
	struct cpu_sampler *s = NULL;
	struct sigaction sa;

	c.syms = sym_table_new();
	if (!c.syms)
		return tool_err("sample", "libelf: %s", strerror(errno));
	fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		tool_err("sample", "%s: %s", out, strerror(errno));
		goto out;
	}
	if (cmd) {
		/* the child waits for the sampler before it execs: its first
		 * instructions are sampled too */
		child = tool_spawn_held("sample", cmd, &go_fd);
		if (child < 0) {
			child = 0;
			tool_err("sample", "cannot start %s: %s", cmd[0], strerror(errno));
			goto out;
		}
		so.pid = (uint32_t)child;
	}
	wo.fd = fd;
	wo.format = all ? NT_FORMAT_V6 : NT_FORMAT_V5;
	wo.pid = so.pid;
	wo.freq_hz = so.freq_hz;
	wo.t0_ns = rp_clock_mono_ns();
	c.w = sample_writer_new(&wo);
	if (!c.w) {
		tool_err("sample", "out of memory");
		goto out;
	}
	if (so.pid && !cmd)
		note_pid(&c, so.pid, wo.t0_ns);

	s = cpu_sampler_start(&so, on_sample, &c, err, sizeof(err));
	if (!s) {
		tool_err("sample", "%s", err);
		goto out;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	if (cmd) {
		if (write(go_fd, "g", 1) != 1) {
			tool_err("sample", "starting %s: %s", cmd[0], strerror(errno));
			goto out;
		}
		close(go_fd);
		go_fd = -1;
	}
	t_end = dur_ns ? rp_clock_mono_ns() + dur_ns : UINT64_MAX;
	last_snap = rp_clock_mono_ns();
	while (!stop_flag && !c.err && rp_clock_mono_ns() < t_end) {
		int n = cpu_sampler_poll(s, 100);
		uint64_t now = rp_clock_mono_ns();

		if (n < 0) {
			tool_err("sample", "reading samples: %s", strerror(-n));
			goto out;
		}
		/* a command's maps change at exec; a process's with dlopen */
		if (now - last_snap > (cmd ? 100000000ull : 1000000000ull)) {
			resnapshot(&c);
			last_snap = now;
		}
		if (cmd) {
			int st;

			if (waitpid(child, &st, WNOHANG) == child) {
				child = 0;
				break;
			}
		} else if (so.pid && kill((pid_t)so.pid, 0) && errno == ESRCH) {
			break;
		}
	}
	resnapshot(&c);
	{
		uint64_t dropped = cpu_sampler_dropped(s);
		const char *ev = cpu_sampler_event_name(s);
		size_t nmod = sym_nmodules(c.syms);
		uint64_t nsamp;

		/* stopping delivers the samples still queued */
		cpu_sampler_stop(s);
		s = NULL;
		nsamp = sample_writer_samples(c.w);
		e = c.err ? c.err : sample_writer_finish(c.w, rp_clock_mono_ns());
		c.w = NULL;
		if (e) {
			tool_err("sample", "%s: %s", out, strerror(-e));
			goto out;
		}
		printf("{\"samples\":%" PRIu64 ",\"dropped\":%" PRIu64 ",\"event\":\"%s\","
		       "\"modules\":%zu}\n", nsamp, dropped, ev, nmod);
	}
	rc = 0;
out:
	cpu_sampler_stop(s);
	if (c.w)
		sample_writer_finish(c.w, rp_clock_mono_ns());
	if (go_fd >= 0)
		close(go_fd);
	if (child > 0) {
		int st;

		/* the command runs on after sampling stopped, as with perf record */
		waitpid(child, &st, 0);
	}
	if (fd >= 0 && close(fd) && !rc)
		rc = tool_err("sample", "%s: %s", out, strerror(errno));
	sym_table_free(c.syms);
	hmap_free(&c.seen);
	free(c.pids);
	return rc;
}

int cmd_sample(int argc, char **argv)
{
	struct sample_cfg c = { .so = { .freq_hz = 99 } };
	int rc = parse_args(argc, argv, &c);

	if (rc != TOOL_OPTS_RUN)
		return rc;
	return sample_run(&c);
}
