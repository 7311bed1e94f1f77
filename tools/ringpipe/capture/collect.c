// SPDX-License-Identifier: MIT
/*
 * The collect engine (see collect.h): a trace from a process through its
 * diagnostics IPC socket, the way dotnet-trace does, checked with
 * ringpipe's reader.
 *
 * Attach mode (pid): CollectTracing on one connection, whose socket then
 * carries the nettrace stream, ResumeRuntime on a second (a no-op unless the
 * runtime waits at startup), StopTracing on a third when the duration ends or
 * on Ctrl-C; the runtime then flushes, writes rundown and the end tag, and
 * closes the stream, which is read to its end.
 *
 * Launch mode (cmd): we listen on a socket of our own and start CMD with
 * DOTNET_DiagnosticPorts (and RINGPIPE_DIAGNOSTIC_PORTS) set to
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
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/atomics.h"
#include "core/clock.h"
#include "capture/collect.h"
#include "session/config.h"
#include "ipc_client.h"
#include "nettrace_read.h"
#include "util/procfs.h"
#include "common/tool_util.h"
#include "util/thread.h"

#define CO_REPLY_TIMEOUT_MS 30000
#define CO_RESUME_TIMEOUT_MS 10000
#define CO_PROGRESS_MS 250
#define CO_READ_CHUNK (1u << 20)
#define CO_CHILD_GRACE_MS 5000
#define CO_STOP_GRACE_MS 2000

/* Stop requests from signals: 1 stops the session, 2 abandons the stream. */
static volatile sig_atomic_t co_signals;
static uint64_t co_first_signal_ms;	/* the signal handler's own */
static int *volatile co_cancel;		/* waits the first signal aborts */
static const char *co_tool = "collect";	/* the command messages name */

static uint64_t co_now_ms(void)
{
	return rp_clock_mono_ns() / 1000000u;
}

/*
 * SIGINT and SIGTERM (each blocked while the handler runs, and in the
 * engine's other threads, so it never runs twice at once). timeout(1)
 * signals its child and then the child's process group, and a terminal's
 * Ctrl-C reaches a whole group too: two signals that close together are
 * one request to stop, not a second, deliberate one.
 */
static void co_on_signal(int sig)
{
	int *c = co_cancel;
	struct timespec ts;
	uint64_t now;

	(void)sig;
	/* clock_gettime is async-signal-safe; rp_clock_mono_ns() need not be */
	clock_gettime(CLOCK_MONOTONIC, &ts);
	now = (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
	if (!co_signals) {
		co_first_signal_ms = now;
		co_signals = 1;
	} else if (co_signals == 1 && now - co_first_signal_ms >= COLLECT_SIGNAL_WINDOW_MS) {
		co_signals = 2;
	}
	if (c)
		/* pairs with the load_acquire of the cancel flag in the IPC
		 * client's waits (internal/ipc_client.c): they give up */
		rp_store_release(c, 1);
}

static void co_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void co_note(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "ringpipe %s: ", co_tool);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
}

/* Is pid stopped (state T: SIGSTOP, SIGTSTP; t: a tracer's stop)? Such a
 * process accepts connections (the kernel queues them) but never answers. */
static bool proc_stopped(pid_t pid)
{
	struct rp_proc_stat st;
	char path[64];

	if (pid <= 0)
		return false;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	return !rp_proc_stat_read(AT_FDCWD, path, &st) && (st.state == 'T' || st.state == 't');
}

/*
 * While a request waits for its answer, a watchdog thread looks at the
 * target: stopped for COLLECT_STOPPED_MS, it cancels the wait, which then
 * fails with -ECANCELED and fired set. A slow but running target is waited
 * for as long as the request's own timeout.
 */
struct watchdog {
	pthread_t th;
	pid_t pid;
	int *cancel;
	int quit;		/* atomic */
	int fired;		/* atomic */
	bool running;
};

#define CO_WATCH_MS 100

static void *watchdog_main(void *arg)
{
	struct watchdog *w = arg;
	uint64_t stopped_since = 0;

	/* pairs with the store_release of quit in watchdog_stop() */
	while (!rp_load_acquire(&w->quit)) {
		struct timespec ts = { 0, CO_WATCH_MS * 1000000L };
		uint64_t now = co_now_ms();

		if (!proc_stopped(w->pid))
			stopped_since = 0;
		else if (!stopped_since)
			stopped_since = now;
		else if (now - stopped_since >= COLLECT_STOPPED_MS) {
			/* pairs with the load_acquire of fired in
			 * watchdog_stop()'s caller, after the join */
			rp_store_release(&w->fired, 1);
			/* pairs with the load_acquire of the cancel flag in
			 * the IPC client's waits */
			rp_store_release(w->cancel, 1);
			break;
		}
		nanosleep(&ts, NULL);
	}
	return NULL;
}

static void watchdog_start(struct watchdog *w, pid_t pid, int *cancel)
{
	*w = (struct watchdog){ .pid = pid, .cancel = cancel };
	/* without the thread, the request's own timeout still ends the wait */
	w->running = pid > 0 && !rp_thread_start(&w->th, "rp-watchdog", watchdog_main, w);
}

/* Ends the watchdog; true when it gave up on a stopped target. */
static bool watchdog_stop(struct watchdog *w)
{
	if (!w->running)
		return false;
	/* pairs with the load_acquire of quit in watchdog_main() */
	rp_store_release(&w->quit, 1);
	pthread_join(w->th, NULL);
	w->running = false;
	/* pairs with the store_release of fired in watchdog_main() (the
	 * join orders it too) */
	return rp_load_acquire(&w->fired);
}

/* Was field f (1: keywords, 2: level) of the n-th entry given (non-empty)? */
static bool field_given(const char *spec, uint32_t n, int f)
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
		if (++colons == f)
			return p + 1 < end && p[1] != ':';
	}
	return false;
}

int collect_dotnet_providers(const char *providers, struct rp_provider_config **out, uint32_t *n,
			     char *err, size_t errlen)
{
	const char *spec = providers ? providers : COLLECT_DEFAULT_PROVIDERS;
	uint32_t i;

	if (rp_providers_parse(spec, out, n, err, errlen))
		return -EINVAL;
	for (i = 0; i < *n; i++) {
		/* A .NET runtime takes keywords 0 literally (only the events
		 * without keywords), ringpipe's server as "all": an entry
		 * without keywords asks every target for all of them, as
		 * dotnet-trace does. */
		if (!field_given(spec, i, 1))
			(*out)[i].keywords = UINT64_MAX;
		if (!field_given(spec, i, 2))
			(*out)[i].level = 4;	/* Informational, as dotnet-trace */
	}
	return 0;
}

static int build_providers(const char *providers, struct rp_provider_config **out,
			   uint32_t *n)
{
	char err[256];

	if (collect_dotnet_providers(providers, out, n, err, sizeof(err)))
		return tool_err(co_tool, "--providers: %s", err), 2;
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
	/* pairs with the load_acquire of done in stream(): rc and hr first */
	rp_store_release(&s->done, 1);
	return NULL;
}

/* ---- launch mode -------------------------------------------------------- */

struct child {
	pid_t pid;
	bool reaped;
	bool ended_by_us;	/* we signalled it: its status is not its own */
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
		return tool_err(co_tool, "cannot start '%s': %s", cmd[0], strerror(errno));
	}
	fflush(NULL);
	ch->pid = fork();
	if (ch->pid < 0) {
		err = errno;
		close(pfd[0]);
		close(pfd[1]);
		free(val);
		return tool_err(co_tool, "cannot start '%s': %s", cmd[0], strerror(err));
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
		return tool_err(co_tool, "cannot run '%s': %s", cmd[0], strerror(err));
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
	co_note("stopping %s (pid %d)\n", name, (int)ch->pid);
	ch->ended_by_us = true;
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
			tool_err(co_tool, "waiting for %s to connect: %s", name, strerror(-fd));
			return -1;
		}
		if (co_signals) {
			tool_err(co_tool, "interrupted before %s connected", name);
			return -1;
		}
		if (child_exited(ch)) {
			describe_status(ch, st, sizeof(st));
			tool_err(co_tool, "%s %s before its runtime connected to the diagnostic "
				 "port: is it a .NET program (or one running ringpipe's IPC server)?",
				 name, st);
			return -1;
		}
		if (!hinted && co_now_ms() - start > 5000) {
			co_note("still waiting for %s (pid %d) to connect "
				"to the diagnostic port%s\n", name, (int)ch->pid,
				ep->ignored ? " (ignored connections from other processes)" : "");
			hinted = true;
		}
	}
}

/* ---- streaming ----------------------------------------------------------- */

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
 * Copies the stream to out_fd until EOF, stopping the session on a signal,
 * when the duration ends or when done() says the trace is complete. Returns
 * 0, or 1 after an error message.
 */
#define CO_DONE_CHECK_MS 1000

static int stream(int sfd, int out_fd, struct ipcc_endpoint *ep, uint64_t session,
		  pid_t target, uint64_t duration_ms, collect_done_fn done, void *done_ctx,
		  struct stream_result *res)
{
	uint64_t checked_at = 0, checked_bytes = 0, stopped_since = 0, checked_stop = 0;
	struct stopper st = { .ep = ep, .session = session };
	bool tty = isatty(STDERR_FILENO), started = false;
	uint64_t t0 = co_now_ms(), last_progress = 0, stop_failed_at = 0;
	uint8_t *buf = malloc(CO_READ_CHUNK);
	int rc = 0;

	memset(res, 0, sizeof(*res));
	if (!buf)
		return tool_err(co_tool, "out of memory");
	for (;;) {
		uint64_t now = co_now_ms();
		struct pollfd pfd = { .fd = sfd, .events = POLLIN };
		int timeout = CO_PROGRESS_MS, n;
		ssize_t got;

		/* done() reads what arrived so far again: at most once a
		 * second, and only when it grew */
		bool complete = false;

		if (done && !started && res->bytes != checked_bytes &&
		    now - checked_at >= CO_DONE_CHECK_MS) {
			checked_at = now;
			checked_bytes = res->bytes;
			complete = done(out_fd, done_ctx);
		}
		if (!started && (co_signals || complete ||
				 (duration_ms && now - t0 >= duration_ms))) {
			int err = -rp_thread_start(&st.th, "rp-stopper", stopper_main, &st);

			if (err) {
				tool_err(co_tool, "cannot start the stop request: %s; closing the "
					 "stream", strerror(err));
				res->abandoned = true;
				rc = 1;
				break;
			}
			started = true;
			res->stop_sent = true;
			if (co_signals && !tty)
				co_note("stopping the session (interrupt again, a second or more "
					"later, to abandon the rest of the stream)\n");
		}
		if (started && co_signals >= 2) {
			if (tty)
				fputc('\n', stderr);
			co_note("interrupted again: abandoning the rest of the stream before "
				"the runtime ended it\n");
			res->abandoned = true;
			break;
		}
		/* a stopped target cannot end the stream: give up on it, at
		 * most every CO_PROGRESS_MS a look at its state */
		if (started && target > 0 && now - checked_stop >= CO_PROGRESS_MS) {
			checked_stop = now;
			if (!proc_stopped(target))
				stopped_since = 0;
			else if (!stopped_since)
				stopped_since = now;
			else if (now - stopped_since >= COLLECT_STOPPED_MS) {
				if (tty)
					fputc('\n', stderr);
				tool_err(co_tool, "pid %d is stopped (SIGSTOP or a debugger) and "
					 "has not ended the session for %u s; closing the stream "
					 "(resume it with kill -CONT %d)", (int)target,
					 COLLECT_STOPPED_MS / 1000, (int)target);
				res->abandoned = true;
				rc = 1;
				break;
			}
		}
		/* a failed stop may just mean the process is ending the stream
		 * itself: give the stream a moment to end before giving up */
		/* pairs with the store_release of done in stopper_main():
		 * st.rc is the answer once done is seen */
		if (started && !stop_failed_at && rp_load_acquire(&st.done) && st.rc)
			stop_failed_at = now;
		if (stop_failed_at && now - stop_failed_at >= CO_STOP_GRACE_MS) {
			char msg[256];

			if (tty)
				fputc('\n', stderr);
			tool_err(co_tool, "could not stop the session: %s; closing the stream",
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
			tool_err(co_tool, "poll: %s", strerror(errno));
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
			tool_err(co_tool, "reading the trace stream: %s", strerror(errno));
			rc = 1;
			break;
		}
		if (got == 0)
			break;
		if (!res->write_err)
			res->write_err = tool_write_all(out_fd, buf, (size_t)got);
		res->bytes += (uint64_t)got;
		if (res->write_err) {
			tool_err(co_tool, "writing the trace: %s", strerror(-res->write_err));
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
		/* pairs with the load_acquire of the cancel flag in the IPC
		 * client's waits: a stop request still waiting gives up */
		rp_store_release(&ep->cancel, 1);
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
		return tool_err(co_tool, "%s: cannot read the trace back: %s", path,
				strerror(errno));
	while ((err = nt_reader_next(r, &rec)) > 0)
		events++;
	if (err < 0) {
		tool_err(co_tool, "%s: the trace does not read back: %s", path,
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
		return tool_err(co_tool, "%" PRId64 " events were lost; use --buffering-mode block "
				"or a larger --buffer-mb, or pass --allow-loss to accept a lossy "
				"trace", lost);
	return 0;
}

/* ---- collect ------------------------------------------------------------ */

/*
 * Can path be written? Checked before a session starts; the file itself is
 * only opened once the session runs, so that a session that cannot start
 * leaves no empty file behind. An existing regular file is kept unless
 * force: a second run must not silently replace the first one's trace.
 */
static int check_output(const char *path, bool force)
{
	struct stat st;
	char *dir, *slash;
	int ok;

	if (!stat(path, &st)) {
		if (S_ISDIR(st.st_mode))
			return tool_err(co_tool, "%s: is a directory", path);
		if (S_ISREG(st.st_mode) && !force)
			return tool_err(co_tool, "%s exists; pass --force to overwrite it, or "
					"-o another name", path);
		if (access(path, W_OK))
			return tool_err(co_tool, "%s: %s", path, strerror(errno));
		return 0;
	}
	dir = strdup(path);
	if (!dir)
		return tool_err(co_tool, "out of memory");
	slash = strrchr(dir, '/');
	if (slash)
		slash[slash == dir ? 1 : 0] = 0;
	ok = !access(slash ? dir : ".", W_OK);
	if (!ok)
		tool_err(co_tool, "%s: cannot create it in %s: %s", path, slash ? dir : ".",
			 strerror(errno));
	free(dir);
	return ok ? 0 : 1;
}

static int open_output(const char *path, bool force)
{
	struct stat st;
	int fd;

	/* O_EXCL: a file that appeared since check_output() is not ours */
	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | (force ? O_TRUNC : O_EXCL), 0644);
	if (fd < 0 && errno == EEXIST && !stat(path, &st) && !S_ISREG(st.st_mode))
		fd = open(path, O_WRONLY | O_CLOEXEC);	/* /dev/null, a FIFO */
	if (fd < 0 && errno == EEXIST)
		tool_err(co_tool, "%s exists; pass --force to overwrite it, or -o another name",
			 path);
	else if (fd < 0)
		tool_err(co_tool, "%s: %s", path, strerror(errno));
	return fd;
}

/* The answers of a runtime without CollectTracing6 (.NET 10 and older). */
static bool block_refused(int rc, uint32_t hr)
{
	return rc == -EREMOTEIO && (hr == IPCC_HR_UNKNOWN_COMMAND || hr == IPCC_HR_BAD_ENCODING);
}

static const char *session_error(int rc, uint32_t hr, int buffering, bool stopped, pid_t pid,
				 char *buf, size_t len)
{
	if (stopped)
		snprintf(buf, len, "the process is stopped (SIGSTOP or a debugger) and did not "
			 "answer for %u s; resume it with kill -CONT %d", COLLECT_STOPPED_MS / 1000,
			 (int)pid);
	else if (buffering == RP_BUFFERING_BLOCK && block_refused(rc, hr))
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
		co_note("warning: ResumeRuntime failed: %s\n",
			ipcc_strerror(rc, hr, msg, sizeof(msg)));
}

/* One collection, from the session's start to the summary. */
struct collection {
	const struct collect_opts *o;
	struct ipcc_collect_opts co;
	struct ipcc_endpoint ep;
	struct child ch;		/* launch mode: CMD */
	char name[256];			/* what the process is called (tool_process_name) */
	char port[IPCC_PATH_MAX + 1];	/* launch mode: our listening socket */
	const char *out;
	char out_buf[512];		/* out, when named after the process */
	uint64_t session;
	int listen_fd, sfd, out_fd;
};

/* The default output name, once the target's pid is known; 0 or 1. */
static int name_output(struct collection *k, pid_t pid)
{
	if (k->out)
		return 0;
	tool_output_name(k->name, pid, ".nettrace", k->out_buf, sizeof(k->out_buf));
	k->out = k->out_buf;
	return check_output(k->out, k->o->force);
}

/*
 * CollectTracing on k->ep: 0 with the session and its stream in k, or the
 * error with *msg written. A runtime without Block mode is asked again in
 * Drop when the options allow it; a target that stays stopped is given up
 * on.
 */
static int request_session(struct collection *k, pid_t target, char *msg, size_t len)
{
	struct watchdog w;
	uint32_t hr = 0;
	bool stopped;
	int rc;

	watchdog_start(&w, target, &k->ep.cancel);
	rc = ipcc_collect_tracing(&k->ep, &k->co, &k->session, &k->sfd, &hr, CO_REPLY_TIMEOUT_MS);
	if (k->co.buffering == RP_BUFFERING_BLOCK && k->o->block_fallback &&
	    block_refused(rc, hr)) {
		co_note("warning: the runtime does not support Block buffering (CollectTracing6 "
			"needs .NET 11 or later); falling back to Drop buffering, which loses "
			"events when the buffer fills: the summary says whether any were lost\n");
		k->co.buffering = RP_BUFFERING_DROP;
		/* in launch mode the runtime reconnects after every command:
		 * the retry takes its next connection */
		rc = ipcc_collect_tracing(&k->ep, &k->co, &k->session, &k->sfd, &hr,
					  CO_REPLY_TIMEOUT_MS);
	}
	stopped = watchdog_stop(&w);
	if (rc)
		session_error(rc, hr, k->co.buffering, stopped && rc == -ECANCELED, target, msg,
			      len);
	return rc;
}

/* Attach mode: a session in o->pid, its stream in k->sfd, the output open;
 * 0, or -1 after a message. */
static int start_attached(struct collection *k)
{
	int64_t pid = k->o->pid;
	char sock[IPCC_PATH_MAX], tmp[2048], msg[512];
	int rc;

	rc = ipcc_find_socket((pid_t)pid, sock, sizeof(sock));
	if (rc == -ESRCH) {
		tool_err(co_tool, "no process with pid %" PRId64, pid);
		return -1;
	}
	if (rc) {
		ipcc_client_tmpdir(tmp, sizeof(tmp));
		tool_err(co_tool, "pid %" PRId64 " has no diagnostic socket "
			 "(dotnet-diagnostic-%" PRId64 "-*-socket in its TMPDIR or %s)%s: is "
			 "it a .NET process or one running ringpipe's IPC server, with "
			 "diagnostics enabled?", pid, pid, tmp,
			 rc == -ENAMETOOLONG ? "; the path is too long for a Unix socket" : "");
		return -1;
	}
	tool_process_name((pid_t)pid, k->name, sizeof(k->name));
	if (name_output(k, (pid_t)pid))
		return -1;
	ipcc_endpoint_init_path(&k->ep, sock);
	co_cancel = &k->ep.cancel;
	rc = request_session(k, (pid_t)pid, msg, sizeof(msg));
	co_cancel = NULL;
	if (rc) {
		tool_err(co_tool, "cannot start a session in pid %" PRId64 " (%s): %s", pid,
			 k->name, msg);
		return -1;
	}
	/* no handler can set it now (co_cancel is NULL), and the threads
	 * that read it (watchdog, stop) are joined or not yet created */
	rp_store_relaxed(&k->ep.cancel, 0);
	k->out_fd = open_output(k->out, k->o->force);
	if (k->out_fd < 0)
		return -1;
	co_note("session 0x%" PRIx64 " in pid %" PRId64 " (%s), writing %s\n", k->session, pid,
		k->name, k->out);
	resume(&k->ep);
	return 0;
}

/* Launch mode: o->cmd started on a port of ours, a session in it, its
 * stream in k->sfd, the output open; 0, or -1 after a message. */
static int start_launched(struct collection *k)
{
	char tmp[2048], msg[512], stamp[32];
	time_t now = time(NULL);
	size_t argc = 0;
	struct tm tm;
	int fd, rc;

	while (k->o->cmd[argc])
		argc++;
	tool_program_name((const char *const *)k->o->cmd, argc, k->name, sizeof(k->name));
	ipcc_client_tmpdir(tmp, sizeof(tmp));
	localtime_r(&now, &tm);
	strftime(stamp, sizeof(stamp), "%Y%m%d_%H%M%S", &tm);
	/* a TMPDIR too long for a socket path: /tmp then */
	if ((size_t)snprintf(k->port, sizeof(k->port), "%sringpipe-collect-%d-%s.socket", tmp,
			     (int)getpid(), stamp) >= (size_t)IPCC_PATH_MAX)
		snprintf(k->port, sizeof(k->port), "/tmp/ringpipe-collect-%d-%s.socket",
			 (int)getpid(), stamp);
	k->listen_fd = ipcc_reverse_listen(k->port);
	if (k->listen_fd < 0) {
		tool_err(co_tool, "%s: %s", k->port, strerror(-k->listen_fd));
		return -1;
	}
	if (launch(k->o->cmd, k->port, &k->ch))
		return -1;
	ipcc_endpoint_init_reverse(&k->ep, k->listen_fd, k->ch.pid);
	if (name_output(k, k->ch.pid))
		return -1;
	co_cancel = &k->ep.cancel;
	fd = wait_first_connection(&k->ep, &k->ch, k->name);
	if (fd < 0) {
		co_cancel = NULL;
		return -1;
	}
	k->ep.pending_fd = fd;
	rc = request_session(k, k->ch.pid, msg, sizeof(msg));
	co_cancel = NULL;
	if (rc) {
		tool_err(co_tool, "cannot start a session in %s (pid %d): %s", k->name,
			 (int)k->ch.pid, msg);
		return -1;
	}
	/* no handler can set it now (co_cancel is NULL), and the threads
	 * that read it (watchdog, stop) are joined or not yet created */
	rp_store_relaxed(&k->ep.cancel, 0);
	k->out_fd = open_output(k->out, k->o->force);
	if (k->out_fd < 0)
		return -1;
	co_note("session 0x%" PRIx64 " in %s (pid %d), writing %s\n", k->session, k->name,
		(int)k->ch.pid, k->out);
	resume(&k->ep);
	return 0;
}

/* CMD's own exit status, when it ended by itself (not by our SIGTERM or
 * SIGKILL after the trace), as dotnet-trace returns it; -1 otherwise. */
static int child_status(const struct child *ch)
{
	if (ch->pid <= 0 || !ch->reaped || ch->ended_by_us)
		return -1;
	if (WIFEXITED(ch->status))
		return WEXITSTATUS(ch->status);
	if (WIFSIGNALED(ch->status))
		return 128 + WTERMSIG(ch->status);
	return -1;
}

/* Streams the started session to the file, then reads it back; the exit
 * status. */
static int stream_and_check(struct collection *k)
{
	const struct collect_opts *o = k->o;
	/* whole milliseconds, rounded up: a duration never ends early */
	uint64_t duration_ms = o->duration_ns / 1000000u + !!(o->duration_ns % 1000000u);
	struct stream_result res = { 0 };
	int rc, status, child;

	rc = stream(k->sfd, k->out_fd, &k->ep, k->session, o->pid ? o->pid : k->ch.pid,
		    duration_ms, o->done, o->done_ctx, &res);
	close(k->sfd);
	k->sfd = -1;
	if (o->pid && !res.stop_sent && !rc)
		co_note("pid %d ended the session (did it exit?)\n", (int)o->pid);
	if (fsync(k->out_fd) < 0 && errno != EINVAL && !rc)
		rc = tool_err(co_tool, "%s: %s", k->out, strerror(errno));
	if (close(k->out_fd) < 0 && !rc)
		rc = tool_err(co_tool, "%s: %s", k->out, strerror(errno));
	k->out_fd = -1;
	if (k->ch.pid > 0) {
		char st[128];

		child_finish(&k->ch, k->name);
		describe_status(&k->ch, st, sizeof(st));
		co_note("%s (pid %d) %s\n", k->name, (int)k->ch.pid, st);
	}
	if (!res.bytes)
		return tool_err(co_tool, "no trace data arrived (the process ended the session "
				"before it started?)");
	if (res.abandoned)
		co_note("the stream was cut short; %s may be incomplete\n", k->out);
	status = summarize(k->out, &res, o->allow_loss);
	if (status || rc)
		return status ? status : rc;
	child = child_status(&k->ch);
	if (child > 0)
		co_note("exiting with %s's status, %d\n", k->name, child);
	return child > 0 ? child : 0;
}

int collect_run(const struct collect_opts *o)
{
	struct collection k = { .o = o, .ch = { .pid = -1 }, .out = o->out, .listen_fd = -1,
				.sfd = -1, .out_fd = -1 };
	struct rp_provider_config *prov = NULL;
	struct sigaction sa, old_int, old_term, old_pipe;
	struct bytebuf probe = { 0 };
	char msg[512];
	uint32_t nprov = 0;
	uint8_t id;
	int rc, status = 1;

	co_tool = o->tool ? o->tool : "collect";
	co_signals = 0;
	if (!o->pid == !o->cmd)
		return tool_err(co_tool, o->pid ? "give either -p PID or -- CMD, not both" :
				"-p PID or -- CMD is required (see --help)"), 2;
	if (!o->buffer_mb || o->buffer_mb > COLLECT_MAX_BUFFER_MB)
		return tool_err(co_tool, "--buffer-mb must be between 1 and %u, not %" PRIu32,
				COLLECT_MAX_BUFFER_MB, o->buffer_mb), 2;
	rc = build_providers(o->providers, &prov, &nprov);
	if (rc)
		return rc;
	k.co = (struct ipcc_collect_opts){ .providers = prov, .nproviders = nprov,
					   .buffer_mb = o->buffer_mb, .rundown = o->rundown,
					   .buffering = o->buffering };
	/* what the runtime would refuse is a usage error, before anything starts */
	rc = ipcc_collect_payload(&k.co, &probe, &id, msg, sizeof(msg));
	bb_free(&probe);
	if (rc) {
		rp_providers_free(prov, nprov);
		return tool_err(co_tool, "%s", msg), 2;
	}

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = co_on_signal;
	sigemptyset(&sa.sa_mask);
	/* one handler at a time: it keeps state of its own */
	sigaddset(&sa.sa_mask, SIGINT);
	sigaddset(&sa.sa_mask, SIGTERM);
	sigaction(SIGINT, &sa, &old_int);
	sigaction(SIGTERM, &sa, &old_term);
	sa.sa_handler = SIG_IGN;
	sigaction(SIGPIPE, &sa, &old_pipe);

	if ((!k.out || !check_output(k.out, o->force)) &&
	    !(o->pid ? start_attached(&k) : start_launched(&k)))
		status = stream_and_check(&k);

	if (k.sfd >= 0)
		close(k.sfd);	/* the runtime ends a session whose reader went away */
	if (k.out_fd >= 0)
		close(k.out_fd);
	if (k.ch.pid > 0 && !k.ch.reaped)
		child_finish(&k.ch, k.name);
	if (k.listen_fd >= 0) {
		close(k.listen_fd);
		unlink(k.port);
	}
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	sigaction(SIGPIPE, &old_pipe, NULL);
	rp_providers_free(prov, nprov);
	return status;
}
