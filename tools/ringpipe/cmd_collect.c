// SPDX-License-Identifier: MIT
/*
 * ringpipe collect: record a trace from a process through its diagnostics IPC
 * socket, the way dotnet-trace does, and check the result with ringpipe's
 * reader. ringpipe stop: stop a session by id.
 *
 * Attach mode (-p PID): CollectTracing on one connection, whose socket then
 * carries the nettrace stream, ResumeRuntime on a second (a no-op unless the
 * runtime waits at startup), StopTracing on a third when the duration ends or
 * on Ctrl-C; the runtime then flushes, writes rundown and the end tag, and
 * closes the stream, which is read to its end.
 *
 * Launch mode (-- CMD ARGS...): we listen on a socket of our own and start
 * CMD with DOTNET_DiagnosticPorts (and RINGPIPE_DIAGNOSTIC_PORTS) set to
 * "<path>,connect,suspend". The runtime connects, sends an ADVR_V1
 * advertise and waits. A runtime in connect mode takes one command per
 * connection and then reconnects, so CollectTracing goes on the first
 * advertised connection and ResumeRuntime on the next: the session exists
 * before the program's first event. The stream ends when the program exits,
 * or with StopTracing on yet another connection.
 *
 * The stop request runs on a thread of its own while this thread keeps
 * draining the stream: the runtime writes rundown into the stream before it
 * answers, so waiting for the answer without reading could deadlock.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cmds.h"
#include "ipc_client.h"
#include "nettrace.h"
#include "config.h"

#define CO_REPLY_TIMEOUT_MS 30000
#define CO_RESUME_TIMEOUT_MS 10000
#define CO_PROGRESS_MS 250
#define CO_READ_CHUNK (1u << 20)
#define CO_MAX_BUFFER_MB 1048576u
#define CO_CHILD_GRACE_MS 5000
#define CO_STOP_GRACE_MS 2000

static const char collect_usage[] =
"usage: ringpipe collect -p PID [options]\n"
"       ringpipe collect [options] -- CMD [ARGS...]\n"
"\n"
"Records a nettrace file from a .NET process or a program running ringpipe's\n"
"IPC server, through its diagnostic socket (what dotnet-trace collect does).\n"
"With -- CMD, starts CMD suspended with DOTNET_DiagnosticPorts pointing at a\n"
"socket of ours, so it is traced from its first event; the trace ends when it\n"
"exits. Ctrl-C or the end of --duration stops the session cleanly (a second\n"
"Ctrl-C abandons the rest of the stream). The file is then read back and a\n"
"summary printed: events per provider and EventsLost.\n"
"\n"
"options:\n"
"  -p, --process-id PID       the process to trace\n"
"  --providers SPEC           Name[:Keywords[:Level[:key=value;...]]],...\n"
"                             (keywords default 0 = all, level 4 = Informational)\n"
"                             default: Microsoft-Windows-DotNETRuntime:0x100003801D:4,\n"
"                             Microsoft-DotNETCore-SampleProfiler:0xF00000000000:4\n"
"  --buffering-mode drop|block  drop (default, CollectTracing2) or block\n"
"                             (non-lossy, CollectTracing6: .NET 11+ or ringpipe)\n"
"  --duration TIME            SECONDS, HH:MM:SS or DD:HH:MM:SS\n"
"  --format v5                nettrace V5 (the only format the runtime streams)\n"
"  --buffer-mb N              the runtime's buffer, 1..1048576 MB (default 256)\n"
"  --no-rundown               no rundown events at the end\n"
"  -o, --output FILE          default: <name>_<pid>.nettrace\n"
"  --allow-loss               exit 0 even when events were lost\n"
"\n"
"Exit status: 0 on success; 1 when the session failed, the trace does not read\n"
"back, or events were lost (EventsLost > 0) without --allow-loss; 2 on a usage\n"
"error.\n";

static const char stop_usage[] =
"usage: ringpipe stop -p PID --session ID\n"
"\n"
"Stops the EventPipe session ID (decimal or 0x hex, as collect prints it) in\n"
"process PID: sends StopTracing, after which the runtime ends the session's\n"
"stream.\n";

struct collect_cfg {
	int64_t pid;
	const char *providers;
	int buffering;
	uint64_t duration_ms;
	const char *out;
	bool allow_loss;
	bool rundown;
	bool until_heap_snapshot;	/* stop once the heap snapshot's GCEnd is in */
	uint32_t buffer_mb;
	char **cmd;
};

static volatile sig_atomic_t co_signals;
static int *volatile co_cancel;		/* waits the first signal aborts */

static void co_on_signal(int sig)
{
	int *c = co_cancel;

	(void)sig;
	if (co_signals < 100)
		co_signals++;
	if (c)
		__atomic_store_n(c, 1, __ATOMIC_RELEASE);
}

static uint64_t co_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ---- argument parsing --------------------------------------------------- */

/* SECONDS[.FRACTION], HH:MM:SS or DD:HH:MM:SS -> ms (> 0). */
static int parse_duration(const char *s, uint64_t *ms)
{
	uint64_t part[4], n = 0;
	const char *p = s;
	int k = 0;

	if (!*s)
		return -EINVAL;
	if (!strchr(s, ':')) {
		uint64_t whole = 0, frac = 0, scale = 1000;

		for (; *p >= '0' && *p <= '9'; p++) {
			whole = whole * 10 + (uint64_t)(*p - '0');
			if (whole > 100ull * 365 * 86400)
				return -EINVAL;
		}
		if (p == s)
			return -EINVAL;
		if (*p == '.') {
			p++;
			if (!(*p >= '0' && *p <= '9'))
				return -EINVAL;
			for (; *p >= '0' && *p <= '9'; p++) {
				scale /= 10;
				frac += (uint64_t)(*p - '0') * scale;
			}
		}
		if (*p)
			return -EINVAL;
		*ms = whole * 1000 + frac;
		return *ms ? 0 : -EINVAL;
	}
	for (;;) {
		const char *start = p;

		for (n = 0; *p >= '0' && *p <= '9' && p - start < 9; p++)
			n = n * 10 + (uint64_t)(*p - '0');
		if (p == start || k == 4)
			return -EINVAL;
		part[k++] = n;
		if (!*p)
			break;
		if (*p != ':')
			return -EINVAL;
		p++;
	}
	if (k == 3) {
		if (part[1] > 59 || part[2] > 59)
			return -EINVAL;
		*ms = ((part[0] * 60 + part[1]) * 60 + part[2]) * 1000;
	} else if (k == 4) {
		if (part[1] > 23 || part[2] > 59 || part[3] > 59)
			return -EINVAL;
		*ms = (((part[0] * 24 + part[1]) * 60 + part[2]) * 60 + part[3]) * 1000;
	} else {
		return -EINVAL;
	}
	return *ms ? 0 : -EINVAL;
}

/* Decimal or 0x-hex u64. */
static int parse_id(const char *s, uint64_t *out)
{
	char *end;

	if (!s || !*s || *s == '-' || *s == '+' || *s == ' ')
		return -EINVAL;
	errno = 0;
	*out = strtoull(s, &end, s[0] == '0' && (s[1] == 'x' || s[1] == 'X') ? 16 : 10);
	return errno || *end || end == s ? -EINVAL : 0;
}

static int parse_pid(const char *cmd, const char *v, int64_t *pid)
{
	uint64_t n;

	if (parse_u64(v, 0x7fffffff, &n) || !n)
		return tool_err(cmd, "-p takes a process id (a whole number > 0), not '%s'", v), 2;
	*pid = (int64_t)n;
	return 0;
}

static int parse_collect_args(int argc, char **argv, struct collect_cfg *c, bool *help)
{
	int i;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			*help = true;
			return 0;
		}
		if (!strcmp(a, "--")) {
			if (i + 1 >= argc)
				return tool_err("collect", "'--' must be followed by a command to run"), 2;
			c->cmd = argv + i + 1;
			break;
		}
		if (!strcmp(a, "--allow-loss")) {
			c->allow_loss = true;
			continue;
		}
		if (!strcmp(a, "--no-rundown")) {
			c->rundown = false;
			continue;
		}
		if (!strcmp(a, "--until-heap-snapshot")) {	/* for ringpipe gcdump */
			c->until_heap_snapshot = true;
			continue;
		}
		if (strcmp(a, "-p") && strcmp(a, "--process-id") && strcmp(a, "--providers") &&
		    strcmp(a, "--buffering-mode") && strcmp(a, "--duration") &&
		    strcmp(a, "--format") && strcmp(a, "-o") && strcmp(a, "--output") &&
		    strcmp(a, "--buffer-mb"))
			return tool_err("collect", "unknown option '%s' (see --help)", a), 2;
		if (!v)
			return tool_err("collect", "option '%s' needs a value (see --help)", a), 2;
		i++;
		if (!strcmp(a, "-p") || !strcmp(a, "--process-id")) {
			int rc = parse_pid("collect", v, &c->pid);

			if (rc)
				return rc;
		} else if (!strcmp(a, "--providers")) {
			if (!*v)
				return tool_err("collect", "--providers needs a provider list"), 2;
			c->providers = v;
		} else if (!strcmp(a, "--buffering-mode")) {
			if (rp_buffering_parse(v, &c->buffering))
				return tool_err("collect", "--buffering-mode must be drop or block, not '%s'",
						v), 2;
		} else if (!strcmp(a, "--duration")) {
			if (parse_duration(v, &c->duration_ms))
				return tool_err("collect", "--duration takes SECONDS (> 0), HH:MM:SS or "
						"DD:HH:MM:SS, not '%s'", v), 2;
		} else if (!strcmp(a, "--format")) {
			if (strcmp(v, "v5") && strcmp(v, "V5") && strcasecmp(v, "nettrace"))
				return tool_err("collect", "--format must be v5 (the runtime streams "
						"nettrace V5 only), not '%s'", v), 2;
		} else if (!strcmp(a, "--buffer-mb")) {
			uint64_t n;

			if (parse_u64(v, UINT64_MAX, &n) || !n || n > CO_MAX_BUFFER_MB)
				return tool_err("collect", "--buffer-mb must be between 1 and %u, not '%s'",
						CO_MAX_BUFFER_MB, v), 2;
			c->buffer_mb = (uint32_t)n;
		} else {
			if (!*v)
				return tool_err("collect", "-o needs a file name"), 2;
			c->out = v;
		}
	}
	if (c->pid && c->cmd)
		return tool_err("collect", "give either -p PID or -- CMD, not both"), 2;
	if (!c->pid && !c->cmd)
		return tool_err("collect", "-p PID or -- CMD is required (see --help)"), 2;
	return 0;
}

/* Was the level of the n-th entry of spec given (non-empty third field)? */
static bool level_given(const char *spec, uint32_t n)
{
	const char *p = spec, *end;
	int colons = 0;

	while (n--) {
		p = strchr(p, ',');
		if (!p)
			return false;
		p++;
	}
	end = strchr(p, ',');
	if (!end)
		end = p + strlen(p);
	for (; p < end; p++) {
		if (*p != ':')
			continue;
		if (++colons == 2)
			return p + 1 < end && p[1] != ':';
	}
	return false;
}

static int build_providers(const struct collect_cfg *c, struct rp_provider_config **out,
			   uint32_t *n)
{
	static const char default_spec[] =
		"Microsoft-Windows-DotNETRuntime:0x100003801D:4,"
		"Microsoft-DotNETCore-SampleProfiler:0xF00000000000:4";
	const char *spec = c->providers ? c->providers : default_spec;
	char err[256];
	uint32_t i;

	if (rp_providers_parse(spec, out, n, err, sizeof(err)))
		return tool_err("collect", "--providers: %s", err), 2;
	for (i = 0; i < *n; i++)
		if (!level_given(spec, i))
			(*out)[i].level = 4;	/* Informational, as dotnet-trace */
	return 0;
}

/* ---- the stop thread ---------------------------------------------------- */

struct stopper {
	pthread_t th;
	struct ipcc_endpoint *ep;
	uint64_t session;
	int rc;			/* valid once done */
	uint32_t hr;
	int done;		/* atomic */
};

static void *stopper_main(void *arg)
{
	struct stopper *s = arg;

	s->rc = ipcc_stop_tracing(s->ep, s->session, &s->hr, -1);
	__atomic_store_n(&s->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* ---- launch mode -------------------------------------------------------- */

struct child {
	pid_t pid;
	bool reaped;
	int status;
};

/* Starts cmd with the diagnostic port variables; 0 or the exit status. */
static int launch(char **cmd, const char *port, struct child *ch)
{
	char *val = NULL;
	int pfd[2], err = 0;
	ssize_t n;

	if (asprintf(&val, "%s,connect,suspend", port) < 0 || pipe2(pfd, O_CLOEXEC) < 0) {
		free(val);
		return tool_err("collect", "cannot start '%s': %s", cmd[0], strerror(errno));
	}
	fflush(NULL);
	ch->pid = fork();
	if (ch->pid < 0) {
		err = errno;
		close(pfd[0]);
		close(pfd[1]);
		free(val);
		return tool_err("collect", "cannot start '%s': %s", cmd[0], strerror(err));
	}
	if (ch->pid == 0) {
		signal(SIGPIPE, SIG_DFL);
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		close(pfd[0]);
		/* Ctrl-C must reach only us: we stop the session, then end the
		 * child. In the background it must not read the terminal. */
		setpgid(0, 0);
		if (isatty(STDIN_FILENO)) {
			int nul = open("/dev/null", O_RDONLY | O_CLOEXEC);

			if (nul >= 0 && nul != STDIN_FILENO) {
				dup2(nul, STDIN_FILENO);
				close(nul);
			}
		}
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (!setenv("DOTNET_DiagnosticPorts", val, 1) &&
		    !setenv("RINGPIPE_DIAGNOSTIC_PORTS", val, 1))
			execvp(cmd[0], cmd);
		err = errno;
		if (write(pfd[1], &err, sizeof(err)) < 0)
			_exit(127);
		_exit(127);
	}
	free(val);
	close(pfd[1]);
	do
		n = read(pfd[0], &err, sizeof(err));
	while (n < 0 && errno == EINTR);
	close(pfd[0]);
	if (n == (ssize_t)sizeof(err)) {
		waitpid(ch->pid, &ch->status, 0);
		ch->reaped = true;
		return tool_err("collect", "cannot run '%s': %s", cmd[0], strerror(err));
	}
	return 0;
}

static bool child_exited(struct child *ch)
{
	if (ch->pid <= 0 || ch->reaped)
		return true;
	if (waitpid(ch->pid, &ch->status, WNOHANG) == ch->pid)
		ch->reaped = true;
	return ch->reaped;
}

/* Waits up to ms for the child to exit; true when it did. */
static bool child_wait(struct child *ch, unsigned int ms)
{
	uint64_t end = co_now_ms() + ms;

	while (!child_exited(ch)) {
		struct timespec ts = { 0, 20 * 1000000L };

		if (co_now_ms() >= end)
			return false;
		nanosleep(&ts, NULL);
	}
	return true;
}

/* Ends a child that outlived the trace: SIGTERM, then SIGKILL. */
static void child_finish(struct child *ch, const char *name)
{
	if (ch->pid <= 0 || child_wait(ch, 200))
		return;
	fprintf(stderr, "ringpipe collect: stopping %s (pid %d)\n", name, (int)ch->pid);
	kill(ch->pid, SIGTERM);
	if (child_wait(ch, CO_CHILD_GRACE_MS))
		return;
	kill(ch->pid, SIGKILL);
	child_wait(ch, CO_CHILD_GRACE_MS);
}

static void describe_status(const struct child *ch, char *buf, size_t len)
{
	if (!ch->reaped)
		snprintf(buf, len, "still running");
	else if (WIFEXITED(ch->status))
		snprintf(buf, len, "exited with status %d", WEXITSTATUS(ch->status));
	else if (WIFSIGNALED(ch->status))
		snprintf(buf, len, "killed by signal %d (%s)", WTERMSIG(ch->status),
			 strsignal(WTERMSIG(ch->status)));
	else
		snprintf(buf, len, "ended");
}

/*
 * Waits for the launched runtime's first advertised connection; fd, or -1
 * after an error message (child exited, Ctrl-C).
 */
static int wait_first_connection(struct ipcc_endpoint *ep, struct child *ch, const char *name)
{
	uint64_t start = co_now_ms();
	bool hinted = false;

	for (;;) {
		char st[128];
		int fd = ipcc_endpoint_open(ep, 200);

		if (fd >= 0)
			return fd;
		if (fd != -ETIMEDOUT && fd != -ECANCELED) {
			tool_err("collect", "waiting for %s to connect: %s", name, strerror(-fd));
			return -1;
		}
		if (co_signals) {
			tool_err("collect", "interrupted before %s connected", name);
			return -1;
		}
		if (child_exited(ch)) {
			describe_status(ch, st, sizeof(st));
			tool_err("collect", "%s %s before its runtime connected to the diagnostic "
				 "port: is it a .NET program (or one running ringpipe's IPC server)?",
				 name, st);
			return -1;
		}
		if (!hinted && co_now_ms() - start > 5000) {
			fprintf(stderr, "ringpipe collect: still waiting for %s (pid %d) to connect "
				"to the diagnostic port%s\n", name, (int)ch->pid,
				ep->ignored ? " (ignored connections from other processes)" : "");
			hinted = true;
		}
	}
}

/* ---- streaming ----------------------------------------------------------- */

static int write_all(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static void progress(bool stopping, uint64_t bytes, uint64_t elapsed_ms)
{
	unsigned long s = (unsigned long)(elapsed_ms / 1000);
	char size[32];

	if (bytes < (1u << 20))
		snprintf(size, sizeof(size), "%.1f KiB", (double)bytes / 1024.0);
	else if (bytes < (1u << 30))
		snprintf(size, sizeof(size), "%.2f MiB", (double)bytes / (1024.0 * 1024.0));
	else
		snprintf(size, sizeof(size), "%.2f GiB", (double)bytes / (1024.0 * 1024.0 * 1024.0));
	fprintf(stderr, "\r\033[K%s %s, %02lu:%02lu:%02lu%s", stopping ? "Stopping: " :
		"Recording:", size, s / 3600, s / 60 % 60, s % 60,
		stopping ? " (waiting for the end of the stream; Ctrl-C again to abandon it)" :
		"  (Ctrl-C to stop)");
}

struct stream_result {
	uint64_t bytes;
	uint64_t elapsed_ms;
	bool stop_sent;		/* we asked the runtime to stop */
	bool abandoned;		/* we closed the stream before its end */
	int write_err;
};

/*
 * Copies the stream to out_fd until EOF, stopping the session on a signal or
 * when the duration ends. Returns 0, or 1 after an error message.
 */
#define CO_SNAPSHOT_CHECK_MS 1000

static int stream(int sfd, int out_fd, struct ipcc_endpoint *ep, uint64_t session,
		  uint64_t duration_ms, bool until_snapshot, struct stream_result *res)
{
	uint64_t checked_at = 0, checked_bytes = 0;
	struct stopper st = { .ep = ep, .session = session };
	bool tty = isatty(STDERR_FILENO), started = false;
	uint64_t t0 = co_now_ms(), last_progress = 0, stop_failed_at = 0;
	uint8_t *buf = malloc(CO_READ_CHUNK);
	int rc = 0;

	memset(res, 0, sizeof(*res));
	if (!buf)
		return tool_err("collect", "out of memory");
	for (;;) {
		uint64_t now = co_now_ms();
		struct pollfd pfd = { .fd = sfd, .events = POLLIN };
		int timeout = CO_PROGRESS_MS, n;
		ssize_t got;

		/* the heap snapshot's end is found by reading what arrived so far
		 * again, at most once a second and only when it grew */
		bool snapshot_done = false;

		if (until_snapshot && !started && res->bytes != checked_bytes &&
		    now - checked_at >= CO_SNAPSHOT_CHECK_MS) {
			checked_at = now;
			checked_bytes = res->bytes;
			snapshot_done = gcdump_trace_complete(out_fd);
		}
		if (!started && (co_signals || snapshot_done ||
				 (duration_ms && now - t0 >= duration_ms))) {
			int err = pthread_create(&st.th, NULL, stopper_main, &st);

			if (err) {
				tool_err("collect", "cannot start the stop request: %s; closing the "
					 "stream", strerror(err));
				res->abandoned = true;
				rc = 1;
				break;
			}
			started = true;
			res->stop_sent = true;
		}
		if (started && co_signals >= 2) {
			if (tty)
				fputc('\n', stderr);
			fprintf(stderr, "ringpipe collect: abandoning the rest of the stream\n");
			res->abandoned = true;
			break;
		}
		/* a failed stop may just mean the process is ending the stream
		 * itself: give the stream a moment to end before giving up */
		if (started && !stop_failed_at && __atomic_load_n(&st.done, __ATOMIC_ACQUIRE) &&
		    st.rc)
			stop_failed_at = now;
		if (stop_failed_at && now - stop_failed_at >= CO_STOP_GRACE_MS) {
			char msg[256];

			if (tty)
				fputc('\n', stderr);
			tool_err("collect", "could not stop the session: %s; closing the stream",
				 ipcc_strerror(st.rc, st.hr, msg, sizeof(msg)));
			res->abandoned = true;
			rc = 1;
			break;
		}
		if (tty && now - last_progress >= CO_PROGRESS_MS) {
			last_progress = now;
			progress(started, res->bytes, now - t0);
		}
		if (!started && duration_ms && t0 + duration_ms - now < (uint64_t)timeout)
			timeout = (int)(t0 + duration_ms - now);
		n = poll(&pfd, 1, timeout);
		if (n < 0 && errno != EINTR) {
			tool_err("collect", "poll: %s", strerror(errno));
			rc = 1;
			break;
		}
		if (n <= 0)
			continue;
		got = read(sfd, buf, CO_READ_CHUNK);
		if (got < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			if (errno == ECONNRESET)
				break;		/* the runtime went away: what we have is the trace */
			tool_err("collect", "reading the trace stream: %s", strerror(errno));
			rc = 1;
			break;
		}
		if (got == 0)
			break;
		if (!res->write_err)
			res->write_err = write_all(out_fd, buf, (size_t)got);
		res->bytes += (uint64_t)got;
		if (res->write_err) {
			tool_err("collect", "writing the trace: %s", strerror(-res->write_err));
			res->abandoned = true;
			rc = 1;
			break;
		}
	}
	res->elapsed_ms = co_now_ms() - t0;
	if (tty) {
		progress(started, res->bytes, res->elapsed_ms);
		fputc('\n', stderr);
	}
	if (started) {
		__atomic_store_n(&ep->cancel, 1, __ATOMIC_RELEASE);
		pthread_join(st.th, NULL);
	}
	free(buf);
	return rc;
}

/* ---- the summary --------------------------------------------------------- */

struct prov_count {
	const char *name;
	uint64_t n;
};

static int cmp_count(const void *a, const void *b)
{
	const struct prov_count *x = a, *y = b;

	if (x->n != y->n)
		return x->n < y->n ? 1 : -1;
	return strcmp(x->name, y->name);
}

/* Reads the file back; returns 0, 1 (unreadable, or loss not allowed). */
static int summarize(const char *path, const struct stream_result *res, bool allow_loss)
{
	struct nt_reader *r = nt_reader_open(path);
	struct prov_count *pc = NULL;
	uint64_t events = 0;
	size_t i, np = 0, nmeta;
	struct nt_rec rec;
	int64_t lost;
	int err;

	if (!r)
		return tool_err("collect", "%s: cannot read the trace back: %s", path,
				strerror(errno));
	while ((err = nt_reader_next(r, &rec)) > 0)
		events++;
	if (err < 0) {
		tool_err("collect", "%s: the trace does not read back: %s", path,
			 nt_reader_errmsg(r));
		nt_reader_free(r);
		return 1;
	}
	lost = nt_reader_lost(r);
	nmeta = nt_reader_nmeta(r);
	pc = calloc(nmeta ? nmeta : 1, sizeof(*pc));
	for (i = 0; pc && i < nmeta; i++) {
		const struct nt_meta *m = nt_reader_meta(r, i);
		size_t k;

		if (!m->count)
			continue;
		for (k = 0; k < np && strcmp(pc[k].name, m->provider); k++)
			;
		if (k == np)
			pc[np++].name = m->provider;
		pc[k].n += m->count;
	}
	printf("%s: %" PRIu64 " bytes, %" PRIu64 " events, %" PRId64 " lost (EventsLost), "
	       "%.1f s\n", path, res->bytes, events, lost, (double)res->elapsed_ms / 1000.0);
	if (pc) {
		qsort(pc, np, sizeof(*pc), cmp_count);
		for (i = 0; i < np; i++)
			printf("  %10" PRIu64 "  %s\n", pc[i].n, pc[i].name);
	}
	fflush(stdout);
	free(pc);
	nt_reader_free(r);
	if (lost > 0 && !allow_loss)
		return tool_err("collect", "%" PRId64 " events were lost; use --buffering-mode block "
				"or a larger --buffer-mb, or pass --allow-loss to accept a lossy "
				"trace", lost);
	return 0;
}

/* ---- collect ------------------------------------------------------------ */

static void base_name(const char *path, char *out, size_t len)
{
	const char *s = strrchr(path, '/');

	snprintf(out, len, "%s", s ? s + 1 : path);
}

static void comm_of(int64_t pid, char *out, size_t len)
{
	char path[64];
	FILE *f;

	snprintf(out, len, "process");
	snprintf(path, sizeof(path), "/proc/%" PRId64 "/comm", pid);
	f = fopen(path, "re");
	if (!f)
		return;
	if (fgets(out, (int)len, f))
		out[strcspn(out, "\n")] = 0;
	fclose(f);
	if (!*out)
		snprintf(out, len, "process");
}

/* Can path be created or overwritten? Checked before a session starts; the
 * file itself is only opened once the session runs, so that a session that
 * cannot start leaves no empty file behind. */
static int check_output(const char *path)
{
	struct stat st;
	char *dir, *slash;
	int ok;

	if (!stat(path, &st)) {
		if (S_ISDIR(st.st_mode))
			return tool_err("collect", "%s: is a directory", path);
		if (access(path, W_OK))
			return tool_err("collect", "%s: %s", path, strerror(errno));
		return 0;
	}
	dir = strdup(path);
	if (!dir)
		return tool_err("collect", "out of memory");
	slash = strrchr(dir, '/');
	if (slash)
		slash[slash == dir ? 1 : 0] = 0;
	ok = !access(slash ? dir : ".", W_OK);
	if (!ok)
		tool_err("collect", "%s: cannot create it in %s: %s", path, slash ? dir : ".",
			 strerror(errno));
	free(dir);
	return ok ? 0 : 1;
}

static int open_output(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	if (fd < 0)
		tool_err("collect", "%s: %s", path, strerror(errno));
	return fd;
}

static const char *session_error(int rc, uint32_t hr, int buffering, char *buf, size_t len)
{
	if (rc == -EREMOTEIO && buffering == RP_BUFFERING_BLOCK &&
	    (hr == IPCC_HR_UNKNOWN_COMMAND || hr == IPCC_HR_BAD_ENCODING))
		snprintf(buf, len, "the runtime does not support --buffering-mode block "
			 "(CollectTracing6 needs .NET 11 or later, or ringpipe's server): %s "
			 "(HRESULT 0x%08" PRIx32 ")", ipcc_hresult_name(hr), hr);
	else
		ipcc_strerror(rc, hr, buf, len);
	return buf;
}

static void resume(struct ipcc_endpoint *ep)
{
	uint32_t hr;
	char msg[256];
	int rc = ipcc_resume_runtime(ep, &hr, CO_RESUME_TIMEOUT_MS);

	if (rc && !(rc == -EREMOTEIO && (hr == IPCC_HR_UNKNOWN_COMMAND ||
					 hr == IPCC_HR_INVALID_ARG)))
		fprintf(stderr, "ringpipe collect: warning: ResumeRuntime failed: %s\n",
			ipcc_strerror(rc, hr, msg, sizeof(msg)));
}

int cmd_collect(int argc, char **argv)
{
	struct collect_cfg c = { .buffering = RP_BUFFERING_DROP, .rundown = true,
				 .buffer_mb = 256 };
	struct ipcc_collect_opts co = { 0 };
	struct rp_provider_config *prov = NULL;
	struct ipcc_endpoint ep;
	struct stream_result res = { 0 };
	struct child ch = { .pid = -1 };
	struct sigaction sa, old_int, old_term, old_pipe;
	char name[256], msg[512], port[IPCC_PATH_MAX + 1], *out_alloc = NULL;
	const char *out;
	uint64_t session = 0;
	uint32_t nprov = 0, hr = 0;
	int rc, listen_fd = -1, sfd = -1, out_fd = -1, status = 1;
	bool help = false;

	rc = parse_collect_args(argc, argv, &c, &help);
	if (rc)
		return rc;
	if (help) {
		fputs(collect_usage, stdout);
		return 0;
	}
	rc = build_providers(&c, &prov, &nprov);
	if (rc)
		return rc;
	co.providers = prov;
	co.nproviders = nprov;
	co.buffer_mb = c.buffer_mb;
	co.rundown = c.rundown;
	co.buffering = c.buffering;
	{
		struct bytebuf probe = { 0 };
		uint8_t id;

		rc = ipcc_collect_payload(&co, &probe, &id, msg, sizeof(msg));
		bb_free(&probe);
		if (rc) {
			rp_providers_free(prov, nprov);
			return tool_err("collect", "%s", msg), 2;
		}
	}

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = co_on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, &old_int);
	sigaction(SIGTERM, &sa, &old_term);
	sa.sa_handler = SIG_IGN;
	sigaction(SIGPIPE, &sa, &old_pipe);

	out = c.out;
	if (out && check_output(out))
		goto done;

	if (c.pid) {
		char sock[IPCC_PATH_MAX], tmp[2048];

		rc = ipcc_find_socket((pid_t)c.pid, sock, sizeof(sock));
		if (rc == -ESRCH) {
			tool_err("collect", "no process with pid %" PRId64, c.pid);
			goto done;
		}
		if (rc) {
			ipcc_client_tmpdir(tmp, sizeof(tmp));
			tool_err("collect", "pid %" PRId64 " has no diagnostic socket "
				 "(dotnet-diagnostic-%" PRId64 "-*-socket in its TMPDIR or %s)%s: is "
				 "it a .NET process or one running ringpipe's IPC server, with "
				 "diagnostics enabled?", c.pid, c.pid, tmp,
				 rc == -ENAMETOOLONG ? "; the path is too long for a Unix socket" : "");
			goto done;
		}
		comm_of(c.pid, name, sizeof(name));
		ipcc_endpoint_init_path(&ep, sock);
		co_cancel = &ep.cancel;
		rc = ipcc_collect_tracing(&ep, &co, &session, &sfd, &hr, CO_REPLY_TIMEOUT_MS);
		co_cancel = NULL;
		if (rc) {
			tool_err("collect", "cannot start a session in pid %" PRId64 " (%s): %s",
				 c.pid, name, session_error(rc, hr, c.buffering, msg, sizeof(msg)));
			goto done;
		}
		__atomic_store_n(&ep.cancel, 0, __ATOMIC_RELEASE);
		if (!out) {
			if (asprintf(&out_alloc, "%s_%" PRId64 ".nettrace", name, c.pid) < 0)
				goto nomem;
			out = out_alloc;
		}
		out_fd = open_output(out);
		if (out_fd < 0)
			goto done;
		fprintf(stderr, "ringpipe collect: session 0x%" PRIx64 " in pid %" PRId64
			" (%s), writing %s\n", session, c.pid, name, out);
		resume(&ep);
	} else {
		char tmp[2048];
		int fd;

		base_name(c.cmd[0], name, sizeof(name));
		ipcc_client_tmpdir(tmp, sizeof(tmp));
		{
			time_t now = time(NULL);
			struct tm tm;
			char stamp[32];

			localtime_r(&now, &tm);
			strftime(stamp, sizeof(stamp), "%Y%m%d_%H%M%S", &tm);
			/* a TMPDIR too long for a socket path: /tmp then */
			if ((size_t)snprintf(port, sizeof(port), "%sringpipe-collect-%d-%s.socket", tmp,
					     (int)getpid(), stamp) >= (size_t)IPCC_PATH_MAX)
				snprintf(port, sizeof(port), "/tmp/ringpipe-collect-%d-%s.socket",
					 (int)getpid(), stamp);
		}
		listen_fd = ipcc_reverse_listen(port);
		if (listen_fd < 0) {
			tool_err("collect", "%s: %s", port, strerror(-listen_fd));
			goto done;
		}
		if (launch(c.cmd, port, &ch))
			goto done;
		ipcc_endpoint_init_reverse(&ep, listen_fd, ch.pid);
		if (!out) {
			if (asprintf(&out_alloc, "%s_%d.nettrace", name, (int)ch.pid) < 0)
				goto nomem;
			out = out_alloc;
			if (check_output(out))
				goto done;
		}
		co_cancel = &ep.cancel;
		fd = wait_first_connection(&ep, &ch, name);
		if (fd < 0) {
			co_cancel = NULL;
			goto done;
		}
		ep.pending_fd = fd;
		rc = ipcc_collect_tracing(&ep, &co, &session, &sfd, &hr, CO_REPLY_TIMEOUT_MS);
		co_cancel = NULL;
		if (rc) {
			tool_err("collect", "cannot start a session in %s (pid %d): %s", name,
				 (int)ch.pid, session_error(rc, hr, c.buffering, msg, sizeof(msg)));
			goto done;
		}
		__atomic_store_n(&ep.cancel, 0, __ATOMIC_RELEASE);
		out_fd = open_output(out);
		if (out_fd < 0)
			goto done;
		fprintf(stderr, "ringpipe collect: session 0x%" PRIx64 " in %s (pid %d), "
			"writing %s\n", session, name, (int)ch.pid, out);
		resume(&ep);
	}

	rc = stream(sfd, out_fd, &ep, session, c.duration_ms, c.until_heap_snapshot, &res);
	close(sfd);
	sfd = -1;
	if (c.pid && !res.stop_sent && !rc)
		fprintf(stderr, "ringpipe collect: pid %" PRId64 " ended the session (did it "
			"exit?)\n", c.pid);
	if (fsync(out_fd) < 0 && errno != EINVAL && !rc)
		rc = tool_err("collect", "%s: %s", out, strerror(errno));
	if (close(out_fd) < 0 && !rc)
		rc = tool_err("collect", "%s: %s", out, strerror(errno));
	out_fd = -1;
	if (ch.pid > 0) {
		char st[128];

		child_finish(&ch, name);
		describe_status(&ch, st, sizeof(st));
		fprintf(stderr, "ringpipe collect: %s (pid %d) %s\n", name, (int)ch.pid, st);
	}
	if (!res.bytes) {
		tool_err("collect", "no trace data arrived (the process ended the session "
			 "before it started?)");
		goto done;
	}
	if (res.abandoned)
		fprintf(stderr, "ringpipe collect: the stream was cut short; %s may be "
			"incomplete\n", out);
	status = summarize(out, &res, c.allow_loss);
	if (!status && rc)
		status = rc;
	goto done;

nomem:
	tool_err("collect", "out of memory");
done:
	if (sfd >= 0)
		close(sfd);	/* the runtime ends a session whose reader went away */
	if (out_fd >= 0)
		close(out_fd);
	if (ch.pid > 0 && !ch.reaped)
		child_finish(&ch, name);
	if (listen_fd >= 0) {
		close(listen_fd);
		unlink(port);
	}
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	sigaction(SIGPIPE, &old_pipe, NULL);
	rp_providers_free(prov, nprov);
	free(out_alloc);
	return status;
}

/* ---- stop ---------------------------------------------------------------- */

int cmd_stop(int argc, char **argv)
{
	struct ipcc_endpoint ep;
	char sock[IPCC_PATH_MAX], msg[256];
	int64_t pid = 0;
	uint64_t id = 0;
	bool have_id = false;
	uint32_t hr;
	int i, rc;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			fputs(stop_usage, stdout);
			return 0;
		}
		if (strcmp(a, "-p") && strcmp(a, "--process-id") && strcmp(a, "--session"))
			return tool_err("stop", "unknown option '%s' (see --help)", a), 2;
		if (!v)
			return tool_err("stop", "option '%s' needs a value (see --help)", a), 2;
		i++;
		if (!strcmp(a, "--session")) {
			if (parse_id(v, &id) || !id)
				return tool_err("stop", "--session takes a session id (decimal or 0x "
						"hex, not 0), not '%s'", v), 2;
			have_id = true;
		} else {
			rc = parse_pid("stop", v, &pid);
			if (rc)
				return rc;
		}
	}
	if (!pid || !have_id)
		return tool_err("stop", "-p PID and --session ID are required (see --help)"), 2;
	rc = ipcc_find_socket((pid_t)pid, sock, sizeof(sock));
	if (rc == -ESRCH)
		return tool_err("stop", "no process with pid %" PRId64, pid);
	if (rc)
		return tool_err("stop", "pid %" PRId64 " has no diagnostic socket", pid);
	ipcc_endpoint_init_path(&ep, sock);
	rc = ipcc_stop_tracing(&ep, id, &hr, CO_REPLY_TIMEOUT_MS);
	if (rc)
		return tool_err("stop", "StopTracing 0x%" PRIx64 " in pid %" PRId64 ": %s", id, pid,
				ipcc_strerror(rc, hr, msg, sizeof(msg)));
	printf("stopped session 0x%" PRIx64 " in pid %" PRId64 "\n", id, pid);
	return 0;
}
