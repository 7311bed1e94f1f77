// SPDX-License-Identifier: MIT
/*
 * The host agent's .NET streams (see dotnet.h).
 *
 * Threads. One scanner, which reads /proc and never talks IPC, and one
 * thread per session, from its start to its file: a runtime that never
 * answers (stopped, wedged) holds only its own thread. Its waits are
 * bounded (the start requests by their timeouts, the stream after
 * StopTracing by AGENT_DN_STOP_WAIT_MS) and cancelled by the stop; the one
 * wait the IPC client cannot bound, a connect() to a listen queue that is
 * full, is avoided by never trying a stopped process (whose queue is what
 * fills), and survived by the stop, which leaves such a thread behind. The
 * scanner and agent_dotnet_stop() are the only writers of the process
 * list; a session thread writes its entry's public fields under the lock.
 *
 * Discovery. The socket is the truth (ipcc_find_socket(), which looks
 * through /proc/<pid>/root with the pid the process has in its own
 * namespace, in the TMPDIR of its environment), but looking for it costs
 * a read of the process's environment and a directory scan, too much for
 * every process every second. Two cheap signs pick the candidates:
 *   - its /tmp (through its root, listed once per scan per directory)
 *     holds a dotnet-diagnostic-<pid>-<key>-socket with its own inner pid
 *     and its start time as the key, as a runtime names its socket (any
 *     runtime: CoreCLR, single-file, NativeAOT);
 *   - its maps show libcoreclr.so (a runtime whose TMPDIR is elsewhere),
 *     looked at while its image is new (an exec changes the comm), since
 *     the runtime maps the library a moment after the exec.
 * A poked pid skips both and is looked for directly, every DN_POKE_MS for
 * DN_POKE_WINDOW_MS.
 */
#include <dirent.h>
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
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/atomics.h"
#include "core/clock.h"
#include "capture/collect.h"
#include "session/config.h"
#include "agent/dotnet.h"
#include "common/tool_util.h"
#include "util/hmap.h"
#include "host/identity.h"
#include "ipc_client.h"
#include "nettrace/nettrace.h"
#include "trace/retrace.h"
#include "util/thread.h"

#define DN_DEFAULT_SCAN_MS 1000u
#define DN_REPLY_TIMEOUT_MS 10000
#define DN_RESUME_TIMEOUT_MS 5000
#define DN_STOP_REPLY_MS 1000
#define DN_POLL_MS 100
#define DN_POKE_MS 50u
#define DN_POKE_WINDOW_MS 3000u
#define DN_MAX_POKES 64u
/* An image this new has its maps looked at every scan */
#define DN_YOUNG_MS 10000u
/* Finished entries of processes that are gone, kept for agent_dotnet_list() */
#define DN_KEEP_FINISHED 256u
#define DN_READ_CHUNK (256u * 1024)
/* The longest wait between attempts on a process that keeps failing */
#define DN_MAX_RETRY_MS 60000u
/* How long stop waits for a session thread still in its IPC past
 * AGENT_DN_STOP_WAIT_MS: its waits are bounded by then, but for a
 * connect() to a listen queue that is full */
#define DN_STOP_GRACE_MS 2000u
/* The longest output directory: "/dotnet-<comm 15>-<pid 10>-<start 20>-<n
 * 10>.nettrace" (76 bytes) must fit agent_dotnet_proc.file after it */
#define DN_MAX_DIR ((unsigned int)sizeof(((struct agent_dotnet_proc *)0)->file) - 1 - 76)

struct dn_proc {
	struct agent_dotnet *a;
	struct agent_dotnet_proc pub;	/* a->lock */
	char sock[IPCC_PATH_MAX];	/* the session thread's copy of pub.socket */
	char part[sizeof(((struct agent_dotnet_proc *)0)->file)];
	char final[sizeof(((struct agent_dotnet_proc *)0)->file)];
	uint32_t incarnation;		/* another runtime in the same process: 2, 3, ... */
	dev_t sock_dev;			/* the socket traced */
	ino_t sock_ino;
	struct ipcc_endpoint ep;	/* the start requests; ep.cancel aborts them */
	pthread_t th;
	bool th_live;			/* created, not yet joined (scanner, stop) */
	int done;			/* atomic: the session thread is returning */
	int quit;			/* atomic: end the session now */
	uint64_t retry_at;		/* FAILED: not before (ms); UINT64_MAX: never (a->lock) */
	uint32_t seen_gen;		/* the last scan that saw the process (scanner) */
	int result;			/* for stop: 0, -ETIMEDOUT, -EIO (session thread) */
	char last_fail[128];		/* the last failure said (whoever fails it) */
	uint32_t fails;			/* failures in a row, for the back-off */
	int finishing;			/* atomic: the stream is over, the file being written */
};

/* A process image the scanner looked at: (pid, start time, comm). */
struct dn_image {
	uint32_t pid;
	uint32_t gen;
	uint64_t start;
	uint64_t first_ms;
	char comm[17];
	bool coreclr;
};

/* A tmp directory listed in this scan: the sockets' (pid, key) */
struct dn_dir {
	dev_t dev;
	ino_t ino;
	struct { uint32_t pid; uint64_t key; } *names;
	size_t n, cap;
};

struct dn_poke {
	uint32_t pid;
	uint64_t until;
};

struct agent_dotnet {
	struct agent_dotnet_opts o;
	char *out_dir;
	struct rp_provider_config *prov;
	uint32_t nprov;
	struct ipcc_collect_opts co;	/* what every session asks for */
	pid_t self;

	pthread_mutex_t lock;		/* the list, public fields, pokes, stopping */
	pthread_cond_t cond;		/* a poke or the stop wakes the scanner */
	pthread_mutex_t log_lock;	/* one log call at a time */
	pthread_t scanner;
	bool scanner_live;
	bool stopping;
	/* agent_dotnet_finish() ran: its result, and threads it left behind */
	bool finished;
	int finish_rc;
	size_t stuck;
	bool poked;
	struct dn_poke pokes[DN_MAX_POKES];
	size_t npokes;

	struct dn_proc **procs;		/* in the order found */
	size_t nprocs, capprocs;

	/* the scanner's own */
	struct dn_image *images;
	size_t nimages, capimages;
	struct hmap image_at;		/* pid -> index into images */
	struct dn_dir *dirs;
	size_t ndirs, capdirs;
	uint32_t gen;
};

static uint64_t dn_now_ms(void)
{
	return rp_clock_mono_ns() / 1000000u;
}

/* snprintf into a fixed field, where cutting a long message or path is
 * what is wanted (the caller checked the lengths that matter) */
static void dn_fmt(char *dst, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void dn_fmt(char *dst, size_t len, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(dst, len, fmt, ap);
	va_end(ap);
}

static void dn_emit(const struct agent_dotnet_opts *o, const char *msg)
{
	if (o->log)
		o->log(o->log_ctx, msg);
	else
		fprintf(stderr, "ringpipe agent: %s\n", msg);
}

static void dn_log(struct agent_dotnet *a, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void dn_log(struct agent_dotnet *a, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&a->log_lock);
	dn_emit(&a->o, msg);
	pthread_mutex_unlock(&a->log_lock);
}

/* ---- /proc ------------------------------------------------------------------ */

static bool dn_maps_coreclr(uint32_t pid)
{
	char path[64], *line = NULL;
	size_t cap = 0;
	bool found = false;
	FILE *f;

	dn_fmt(path, sizeof(path), "/proc/%u/maps", pid);
	f = fopen(path, "re");
	if (!f)
		return false;
	while (!found && getline(&line, &cap, f) > 0)
		found = strstr(line, "/libcoreclr.so") != NULL;
	free(line);
	fclose(f);
	return found;
}

/* dotnet-diagnostic-<pid>-<key>-socket: true with both. */
static bool dn_socket_name(const char *name, uint32_t *pid, uint64_t *key)
{
	static const char pre[] = "dotnet-diagnostic-";
	const char *p = name + sizeof(pre) - 1;
	char *end;

	if (strncmp(name, pre, sizeof(pre) - 1) || *p < '0' || *p > '9')
		return false;
	*pid = (uint32_t)strtoul(p, &end, 10);
	if (*end != '-' || end[1] < '0' || end[1] > '9')
		return false;
	*key = strtoull(end + 1, &end, 10);
	return !strcmp(end, "-socket");
}

static void dn_dirs_reset(struct agent_dotnet *a)
{
	size_t i;

	for (i = 0; i < a->ndirs; i++)
		free(a->dirs[i].names);
	a->ndirs = 0;
}

/* The sockets named in pid's /tmp (through its root), listed once per
 * scan per directory; NULL when it cannot be read. */
static const struct dn_dir *dn_dir_of(struct agent_dotnet *a, uint32_t pid)
{
	char path[64];
	struct dn_dir *dd;
	struct dirent *de;
	struct stat sb;
	size_t i;
	DIR *d;

	dn_fmt(path, sizeof(path), "/proc/%u/root/tmp", pid);
	if (stat(path, &sb) || !S_ISDIR(sb.st_mode))
		return NULL;
	for (i = 0; i < a->ndirs; i++)
		if (a->dirs[i].dev == sb.st_dev && a->dirs[i].ino == sb.st_ino)
			return &a->dirs[i];
	if (array_grow((void **)&a->dirs, &a->capdirs, a->ndirs, sizeof(*a->dirs), 16))
		return NULL;
	dd = &a->dirs[a->ndirs++];
	memset(dd, 0, sizeof(*dd));
	dd->dev = sb.st_dev;
	dd->ino = sb.st_ino;
	d = opendir(path);
	if (!d)
		return dd;
	while ((de = readdir(d))) {
		uint32_t p;
		uint64_t key;

		if (!dn_socket_name(de->d_name, &p, &key) ||
		    array_grow((void **)&dd->names, &dd->cap, dd->n, sizeof(*dd->names), 16))
			continue;
		dd->names[dd->n].pid = p;
		dd->names[dd->n].key = key;
		dd->n++;
	}
	closedir(d);
	return dd;
}

/* The scanner's record of pid's current image, made afresh for a new one. */
static struct dn_image *dn_image(struct agent_dotnet *a, uint32_t pid, uint64_t start,
				 const char *comm, uint64_t now)
{
	struct dn_image *im;
	uint64_t v;

	if (hmap_get(&a->image_at, pid, &v)) {
		im = &a->images[v];
	} else {
		if (array_grow((void **)&a->images, &a->capimages, a->nimages,
			       sizeof(*a->images), 16) ||
		    hmap_put(&a->image_at, pid, a->nimages))
			return NULL;
		im = &a->images[a->nimages++];
		im->pid = pid;
		im->start = start + 1;	/* differs: made afresh below */
	}
	if (im->start != start || strcmp(im->comm, comm)) {
		im->start = start;
		dn_fmt(im->comm, sizeof(im->comm), "%s", comm);
		im->first_ms = now;
		im->coreclr = false;
	}
	im->gen = a->gen;
	return im;
}

/* Drops the images of processes the last scan did not see. */
static void dn_images_compact(struct agent_dotnet *a)
{
	size_t i, k = 0;

	hmap_clear(&a->image_at);
	for (i = 0; i < a->nimages; i++) {
		if (a->images[i].gen != a->gen)
			continue;
		a->images[k] = a->images[i];
		/* the table had room for all of them: this cannot fail */
		hmap_put(&a->image_at, a->images[k].pid, k);
		k++;
	}
	a->nimages = k;
}

/* Is pid worth looking for a socket (the cheap signs)? */
static bool dn_candidate(struct agent_dotnet *a, uint32_t pid, uint64_t start,
			 const char *comm, uint64_t now)
{
	struct dn_image *im = dn_image(a, pid, start, comm, now);
	const struct dn_dir *dd;

	if (!im)
		return true;	/* no memory for the cache: look, rather than miss it */
	if (im->coreclr)
		return true;
	dd = dn_dir_of(a, pid);
	if (dd && dd->n) {
		uint32_t inner = (uint32_t)ipcc_inner_pid((pid_t)pid);
		size_t i;

		for (i = 0; i < dd->n; i++)
			if (dd->names[i].pid == inner &&
			    (dd->names[i].key == start || !dd->names[i].key))
				return true;
	}
	if (now - im->first_ms < DN_YOUNG_MS)
		im->coreclr = dn_maps_coreclr(pid);
	return im->coreclr;
}

/* ---- a session --------------------------------------------------------------- */

static int dn_state(struct dn_proc *p)
{
	int s;

	pthread_mutex_lock(&p->a->lock);
	s = p->pub.state;
	pthread_mutex_unlock(&p->a->lock);
	return s;
}

static void dn_fail(struct dn_proc *p, uint64_t retry_ms, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void dn_fail(struct dn_proc *p, uint64_t retry_ms, const char *fmt, ...)
{
	struct agent_dotnet *a = p->a;
	char msg[512];
	bool same;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	/* a process that keeps failing the same way is said once, and tried
	 * less and less often */
	same = !strncmp(p->last_fail, msg, sizeof(p->last_fail) - 1);
	dn_fmt(p->last_fail, sizeof(p->last_fail), "%s", msg);
	if (retry_ms != UINT64_MAX) {
		retry_ms <<= p->fails < 4 ? p->fails : 4;
		if (retry_ms > DN_MAX_RETRY_MS)
			retry_ms = DN_MAX_RETRY_MS;
		p->fails++;
	}
	pthread_mutex_lock(&a->lock);
	p->pub.state = AGENT_DN_FAILED;
	dn_fmt(p->pub.error, sizeof(p->pub.error), "%s", msg);
	p->retry_at = retry_ms == UINT64_MAX ? UINT64_MAX : dn_now_ms() + retry_ms;
	pthread_mutex_unlock(&a->lock);
	if (!same)
		dn_log(a, "pid %u (%s): %s%s", p->pub.pid, p->pub.comm, msg,
		       retry_ms == UINT64_MAX ? "" : " (trying again later)");
}

/* The answers of a runtime without CollectTracing6 (.NET 10 and older). */
static bool dn_block_refused(int rc, uint32_t hr)
{
	return rc == -EREMOTEIO && (hr == IPCC_HR_UNKNOWN_COMMAND || hr == IPCC_HR_BAD_ENCODING);
}

/* StopTracing sent on a connection of its own; the fd its answer comes
 * on, or -errno. The answer is read by the loop that drains the stream:
 * the runtime writes rundown into the stream before it answers. */
static int dn_send_stop(struct dn_proc *p, uint64_t session)
{
	struct ipcc_endpoint ep;
	int fd, rc;

	ipcc_endpoint_init_path(&ep, p->sock);
	fd = ipcc_endpoint_open(&ep, 0);
	if (fd < 0)
		return fd;
	rc = ipcc_send_request(fd, IPCC_SET_EVENTPIPE, IPCC_EP_STOP_TRACING, &session,
			       sizeof(session));
	if (rc) {
		close(fd);
		return rc;
	}
	return fd;
}

/*
 * Copies the stream into out until it ends, sending StopTracing once quit
 * is set and then waiting at most AGENT_DN_STOP_WAIT_MS. 0 when the stream
 * ended; otherwise -errno with why[] saying what ended the copy.
 */
static int dn_stream(struct dn_proc *p, int sfd, int out, uint64_t session, char *why,
		     size_t whylen)
{
	uint8_t *buf = malloc(DN_READ_CHUNK);
	struct ipcc_reply *reply = malloc(sizeof(*reply));
	uint64_t deadline = 0;
	bool stop_sent = false;
	int stop_fd = -1, rc = 0;

	if (!buf || !reply) {
		dn_fmt(why, whylen, "out of memory");
		rc = -ENOMEM;
		goto out;
	}
	for (;;) {
		struct pollfd pf[2] = {
			{ .fd = sfd, .events = POLLIN },
			{ .fd = stop_fd, .events = POLLIN },
		};
		uint64_t now = dn_now_ms();
		ssize_t got;
		int n;

		/* pairs with the store_release of quit in agent_dotnet_stop() */
		if (!stop_sent && rp_load_acquire(&p->quit)) {
			char msg[256];

			stop_sent = true;
			deadline = now + AGENT_DN_STOP_WAIT_MS;
			stop_fd = dn_send_stop(p, session);
			if (stop_fd < 0)
				/* the process may be ending the stream itself */
				dn_log(p->a, "pid %u (%s): StopTracing: %s", p->pub.pid,
				       p->pub.comm, ipcc_strerror(stop_fd, 0, msg, sizeof(msg)));
		}
		if (stop_sent && now >= deadline) {
			dn_fmt(why, whylen, "the stream did not end within %u ms of StopTracing: "
				 "kept what had arrived", AGENT_DN_STOP_WAIT_MS);
			rc = -ETIMEDOUT;
			break;
		}
		n = poll(pf, stop_fd >= 0 ? 2 : 1, DN_POLL_MS);
		if (n < 0 && errno != EINTR) {
			rc = -errno;
			dn_fmt(why, whylen, "poll: %s", strerror(errno));
			break;
		}
		if (n <= 0)
			continue;
		if (stop_fd >= 0 && pf[1].revents) {
			int r = ipcc_read_reply(stop_fd, reply, DN_STOP_REPLY_MS, NULL);

			if (r) {
				char msg[256];

				dn_log(p->a, "pid %u (%s): StopTracing: %s", p->pub.pid,
				       p->pub.comm,
				       ipcc_strerror(r, reply->hresult, msg, sizeof(msg)));
			}
			close(stop_fd);
			stop_fd = -1;
		}
		if (!pf[0].revents)
			continue;
		got = read(sfd, buf, DN_READ_CHUNK);
		if (got < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (got < 0 && errno == ECONNRESET)
			break;		/* the runtime went away: what arrived is the trace */
		if (got < 0) {
			rc = -errno;
			dn_fmt(why, whylen, "reading the stream: %s", strerror(errno));
			break;
		}
		if (got == 0)
			break;
		rc = tool_write_all(out, buf, (size_t)got);
		if (rc) {
			dn_fmt(why, whylen, "%s: %s", p->part, strerror(-rc));
			break;
		}
		pthread_mutex_lock(&p->a->lock);
		p->pub.bytes += (uint64_t)got;
		pthread_mutex_unlock(&p->a->lock);
	}
out:
	if (stop_fd >= 0)
		close(stop_fd);
	free(reply);
	free(buf);
	return rc;
}

/* The stream is over: its part read back into the final file. */
static void dn_finish(struct dn_proc *p, int stream_rc, const char *stream_why)
{
	struct agent_dotnet *a = p->a;
	struct retrace_stats st;
	char note[512], err[768];
	uint64_t bytes;
	int rc;

	pthread_mutex_lock(&a->lock);
	bytes = p->pub.bytes;
	pthread_mutex_unlock(&a->lock);
	if (!bytes) {
		unlink(p->part);
		pthread_mutex_lock(&a->lock);
		p->pub.state = AGENT_DN_ENDED;
		p->pub.file[0] = 0;
		dn_fmt(p->pub.error, sizeof(p->pub.error), "%s",
			 stream_rc ? stream_why : "the stream ended before any data arrived");
		pthread_mutex_unlock(&a->lock);
		dn_log(a, "pid %u (%s): no trace: %s", p->pub.pid, p->pub.comm, p->pub.error);
		return;
	}
	rc = retrace_file(p->part, p->final, p->pub.pid, NT_FORMAT_V6, &st, note, sizeof(note));
	if (rc) {
		p->result = -EIO;
		dn_fail(p, UINT64_MAX, "%s (the raw stream is kept in %s)", note, p->part);
		return;
	}
	unlink(p->part);
	dn_fmt(err, sizeof(err), "%s%s%s", stream_rc ? stream_why : "",
		 stream_rc && note[0] ? "; " : "", note);
	if (st.skipped) {
		size_t used = strlen(err);

		dn_fmt(err + used, sizeof(err) - used, "%s%" PRIu64 " events left out (the file "
			 "counts them lost)", used ? "; " : "", st.skipped);
	}
	pthread_mutex_lock(&a->lock);
	p->pub.state = AGENT_DN_ENDED;
	p->pub.events = st.events;
	p->pub.lost = st.lost;
	dn_fmt(p->pub.file, sizeof(p->pub.file), "%s", p->final);
	dn_fmt(p->pub.error, sizeof(p->pub.error), "%s", err);
	pthread_mutex_unlock(&a->lock);
	dn_log(a, "pid %u (%s): %" PRIu64 " events, %" PRId64 " lost, in %s%s%s", p->pub.pid,
	       p->pub.comm, st.events, st.lost, p->final, err[0] ? ": " : "", err);
}

static void *dn_session_main(void *arg)
{
	struct dn_proc *p = arg;
	struct agent_dotnet *a = p->a;
	struct ipcc_collect_opts co = a->co;
	char msg[256], why[256] = "";
	uint64_t session = 0;
	int sfd = -1, out, rc;
	uint32_t hr = 0;

	rc = ipcc_collect_tracing(&p->ep, &co, &session, &sfd, &hr, DN_REPLY_TIMEOUT_MS);
	if (co.buffering == RP_BUFFERING_BLOCK && dn_block_refused(rc, hr)) {
		dn_log(a, "pid %u (%s): warning: the runtime does not support Block buffering "
		       "(CollectTracing6 needs .NET 11 or later); falling back to Drop, which "
		       "loses events when its buffer fills (EventsLost counts them)", p->pub.pid,
		       p->pub.comm);
		co.buffering = RP_BUFFERING_DROP;
		rc = ipcc_collect_tracing(&p->ep, &co, &session, &sfd, &hr, DN_REPLY_TIMEOUT_MS);
	}
	if (rc == -ECANCELED) {
		dn_fail(p, UINT64_MAX, "the agent stopped before the session started");
		goto out;
	}
	if (rc) {
		dn_fail(p, AGENT_DN_RETRY_MS, "cannot start a session through %s: %s", p->sock,
			ipcc_strerror(rc, hr, msg, sizeof(msg)));
		goto out;
	}
	out = open(p->part, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (out < 0) {
		rc = errno;
		close(sfd);	/* the runtime ends a session whose reader went away */
		dn_fail(p, AGENT_DN_RETRY_MS, "%s: %s", p->part, strerror(rc));
		goto out;
	}
	p->fails = 0;
	pthread_mutex_lock(&a->lock);
	p->pub.state = AGENT_DN_TRACING;
	p->pub.buffering = co.buffering;
	dn_fmt(p->pub.file, sizeof(p->pub.file), "%s", p->part);
	pthread_mutex_unlock(&a->lock);
	if (p->pub.inner_pid != p->pub.pid)
		dn_log(a, "pid %u (%s, pid %u in its namespace): session 0x%" PRIx64 " through "
		       "%s, into %s", p->pub.pid, p->pub.comm, p->pub.inner_pid, session, p->sock,
		       p->part);
	else
		dn_log(a, "pid %u (%s): session 0x%" PRIx64 " through %s, into %s", p->pub.pid,
		       p->pub.comm, session, p->sock, p->part);
	/* a runtime started with DOTNET_DefaultDiagnosticPortSuspend=1 waits
	 * for this, now that its session exists; for any other a no-op */
	rc = ipcc_resume_runtime(&p->ep, &hr, DN_RESUME_TIMEOUT_MS);
	if (rc && rc != -ECANCELED &&
	    !(rc == -EREMOTEIO && (hr == IPCC_HR_UNKNOWN_COMMAND || hr == IPCC_HR_INVALID_ARG)))
		dn_log(a, "pid %u (%s): warning: ResumeRuntime: %s", p->pub.pid, p->pub.comm,
		       ipcc_strerror(rc, hr, msg, sizeof(msg)));
	rc = dn_stream(p, sfd, out, session, why, sizeof(why));
	close(sfd);
	if (rc == -ETIMEDOUT)
		p->result = rc;
	else if (rc)
		p->result = -EIO;
	/* what is not on disk does not read back */
	if (fsync(out) < 0 && errno != EINVAL) {
		dn_fmt(why, sizeof(why), "%s: %s", p->part, strerror(errno));
		rc = p->result = -EIO;
	}
	if (close(out) < 0 && !rc) {
		dn_fmt(why, sizeof(why), "%s: %s", p->part, strerror(errno));
		rc = p->result = -EIO;
	}
	/* pairs with the load_acquire of finishing in agent_dotnet_stop():
	 * from here on the thread does local work, which it is waited for */
	rp_store_release(&p->finishing, 1);
	dn_finish(p, rc, why);
out:
	/* pairs with the load_acquire of done in the scanner's reaping */
	rp_store_release(&p->done, 1);
	return NULL;
}

/* ---- the scanner ---------------------------------------------------------------- */

/* The newest entry for (pid, start), or NULL. */
static struct dn_proc *dn_find(struct agent_dotnet *a, uint32_t pid, uint64_t start)
{
	size_t i = a->nprocs;

	while (i--)
		if (a->procs[i]->pub.pid == pid && a->procs[i]->pub.start_time == start)
			return a->procs[i];
	return NULL;
}

/* Characters a file name takes as they are; others become '_'. */
static void dn_clean_name(const char *in, char *out, size_t len)
{
	size_t i;

	for (i = 0; in[i] && i + 1 < len; i++) {
		char c = in[i];

		out[i] = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			 (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_' ? c : '_';
	}
	out[i] = 0;
	if (!i)
		dn_fmt(out, len, "process");
}

/* A new entry, with file names no other trace uses; NULL after a message. */
static struct dn_proc *dn_new(struct agent_dotnet *a, uint32_t pid, uint64_t start,
			      const char *comm, uint32_t incarnation)
{
	struct dn_proc *p = calloc(1, sizeof(*p));
	char name[17], sfx[16] = "";
	uint32_t n;
	int err;

	if (!p) {
		dn_log(a, "pid %u (%s): out of memory", pid, comm);
		return NULL;
	}
	p->a = a;
	p->pub.pid = pid;
	p->pub.start_time = start;
	p->pub.inner_pid = (uint32_t)ipcc_inner_pid((pid_t)pid);
	dn_fmt(p->pub.comm, sizeof(p->pub.comm), "%s", comm);
	dn_clean_name(comm, name, sizeof(name));
	/* a trace from before (an earlier agent, another runtime of this
	 * process) keeps its file */
	for (n = incarnation ? incarnation : 1;; n++) {
		if (n > 1)
			dn_fmt(sfx, sizeof(sfx), "-%u", n);
		if ((size_t)snprintf(p->part, sizeof(p->part), "%s/.dotnet-%u-%" PRIu64 "%s.part",
				     a->out_dir, pid, start, sfx) >= sizeof(p->part) ||
		    (size_t)snprintf(p->final, sizeof(p->final), "%s/dotnet-%s-%u-%" PRIu64
				     "%s.nettrace", a->out_dir, name, pid, start, sfx) >=
		    sizeof(p->final)) {
			dn_log(a, "pid %u (%s): %s: the file names are too long", pid, comm,
			       a->out_dir);
			free(p);
			return NULL;
		}
		if (access(p->part, F_OK) && access(p->final, F_OK))
			break;
	}
	p->incarnation = n;
	dn_fmt(p->pub.file, sizeof(p->pub.file), "%s", p->part);
	/* agent_dotnet_list() reads the list under the lock: it may move */
	pthread_mutex_lock(&a->lock);
	err = array_grow((void **)&a->procs, &a->capprocs, a->nprocs, sizeof(*a->procs), 16);
	if (!err)
		a->procs[a->nprocs++] = p;
	pthread_mutex_unlock(&a->lock);
	if (err) {
		dn_log(a, "pid %u (%s): out of memory", pid, comm);
		free(p);
		return NULL;
	}
	return p;
}

/* Starts (or starts again) p's session through sock. */
static void dn_launch(struct agent_dotnet *a, struct dn_proc *p, const char *sock,
		      const struct stat *sb)
{
	int err;

	dn_fmt(p->sock, sizeof(p->sock), "%s", sock);
	p->sock_dev = sb->st_dev;
	p->sock_ino = sb->st_ino;
	ipcc_endpoint_init_path(&p->ep, sock);
	p->done = 0;
	p->quit = 0;
	p->finishing = 0;
	p->result = 0;
	pthread_mutex_lock(&a->lock);
	p->pub.state = AGENT_DN_STARTING;
	p->pub.error[0] = 0;
	p->pub.bytes = 0;
	p->pub.attempts++;
	dn_fmt(p->pub.socket, sizeof(p->pub.socket), "%s", sock);
	pthread_mutex_unlock(&a->lock);
	err = -rp_thread_start(&p->th, "rp-dotnet", dn_session_main, p);
	if (err) {
		dn_fail(p, AGENT_DN_RETRY_MS, "cannot start a thread: %s", strerror(err));
		return;
	}
	p->th_live = true;
}

/*
 * Looks at pid: a new process with a socket gets a session; a failed one
 * another, once its retry time has come; an ended one whose process now
 * runs another runtime (a new socket) a new entry. forced: a poke, which
 * looks for the socket without the cheap signs.
 */
static void dn_look(struct agent_dotnet *a, uint32_t pid, bool forced, uint64_t now)
{
	struct agent_proc_stat ps;
	char sock[IPCC_PATH_MAX];
	const char *comm = ps.comm;
	struct dn_proc *p;
	struct stat sb;
	uint64_t start, retry_at = 0;
	int state = -1;

	if (pid == (uint32_t)a->self || (a->o.filter && !a->o.filter(a->o.filter_ctx, pid)))
		return;
	if (agent_proc_stat(pid, &ps))
		return;
	start = ps.start_time;
	p = dn_find(a, pid, start);
	if (p)
		p->seen_gen = a->gen;
	/*
	 * A stopped process (SIGSTOP, a debugger) takes connections, which
	 * the kernel queues, and answers none: every attempt would leave one
	 * in its listen queue until it is full and a connect() blocks. Its
	 * turn comes when it runs again.
	 */
	if (ps.state == 'T' || ps.state == 't')
		return;
	if (p) {
		if (p->th_live)
			return;		/* its thread is still at work */
		pthread_mutex_lock(&a->lock);
		state = p->pub.state;
		retry_at = p->retry_at;
		pthread_mutex_unlock(&a->lock);
		if (state == AGENT_DN_FAILED && now < retry_at)
			return;
	}
	if (!forced && !dn_candidate(a, pid, start, comm, now))
		return;
	if (ipcc_find_socket((pid_t)pid, sock, sizeof(sock)) || stat(sock, &sb))
		return;
	if (p && state == AGENT_DN_ENDED) {
		if (sb.st_dev == p->sock_dev && sb.st_ino == p->sock_ino)
			return;		/* the runtime we traced, whose stream ended */
		p = dn_new(a, pid, start, comm, p->incarnation + 1);
	} else if (!p) {
		p = dn_new(a, pid, start, comm, 1);
	}
	if (p)
		dn_launch(a, p, sock, &sb);
}

/* Joins the session threads that have returned. */
static void dn_reap(struct agent_dotnet *a)
{
	size_t i;

	for (i = 0; i < a->nprocs; i++) {
		struct dn_proc *p = a->procs[i];

		/* pairs with the store_release of done in dn_session_main() */
		if (p->th_live && rp_load_acquire(&p->done)) {
			pthread_join(p->th, NULL);
			p->th_live = false;
		}
	}
}

/* Forgets the oldest finished entries of processes that are gone, beyond
 * DN_KEEP_FINISHED. */
static void dn_prune(struct agent_dotnet *a)
{
	size_t i, k, gone = 0;

	for (i = 0; i < a->nprocs; i++)
		gone += !a->procs[i]->th_live && a->procs[i]->seen_gen != a->gen;
	if (gone <= DN_KEEP_FINISHED)
		return;
	pthread_mutex_lock(&a->lock);
	for (i = k = 0; i < a->nprocs; i++) {
		struct dn_proc *p = a->procs[i];

		if (gone > DN_KEEP_FINISHED && !p->th_live && p->seen_gen != a->gen) {
			free(p);
			gone--;
			continue;
		}
		a->procs[k++] = p;
	}
	a->nprocs = k;
	pthread_mutex_unlock(&a->lock);
}

static void dn_scan(struct agent_dotnet *a, uint64_t now)
{
	struct dirent *de;
	DIR *d = opendir("/proc");

	if (!d) {
		dn_log(a, "/proc: %s", strerror(errno));
		return;
	}
	a->gen++;
	dn_dirs_reset(a);
	while ((de = readdir(d))) {
		char *end;
		unsigned long pid = strtoul(de->d_name, &end, 10);

		if (*end || !pid || pid > UINT32_MAX)
			continue;
		dn_look(a, (uint32_t)pid, false, now);
	}
	closedir(d);
	dn_dirs_reset(a);
	dn_images_compact(a);
	dn_prune(a);
}

/* Pokes due now: looked at until found or until their window ends. */
static void dn_pokes(struct agent_dotnet *a, uint64_t now)
{
	struct dn_poke due[DN_MAX_POKES];
	size_t i, n;

	pthread_mutex_lock(&a->lock);
	n = a->npokes;
	memcpy(due, a->pokes, n * sizeof(*due));
	a->poked = false;
	pthread_mutex_unlock(&a->lock);
	for (i = 0; i < n; i++) {
		struct agent_proc_stat ps;
		struct dn_proc *p = NULL;
		size_t k;
		bool gone;

		dn_look(a, due[i].pid, true, now);
		gone = agent_proc_stat(due[i].pid, &ps) != 0;
		if (!gone)
			p = dn_find(a, due[i].pid, ps.start_time);
		/* done with it once it has a session (or an attempt that
		 * failed for a reason other than a missing socket), once it
		 * is gone, or once its window is over */
		if (!gone && now < due[i].until && (!p || dn_state(p) == AGENT_DN_FAILED))
			continue;
		pthread_mutex_lock(&a->lock);
		for (k = 0; k < a->npokes; k++) {
			if (a->pokes[k].pid == due[i].pid && a->pokes[k].until == due[i].until) {
				a->pokes[k] = a->pokes[--a->npokes];
				break;
			}
		}
		pthread_mutex_unlock(&a->lock);
	}
}

static void *dn_scan_main(void *arg)
{
	struct agent_dotnet *a = arg;
	uint64_t next_scan = 0;

	pthread_mutex_lock(&a->lock);
	while (!a->stopping) {
		uint64_t now, wake;
		struct timespec ts;

		pthread_mutex_unlock(&a->lock);
		now = dn_now_ms();
		dn_reap(a);
		if (now >= next_scan) {
			dn_scan(a, now);
			next_scan = now + a->o.scan_ms;
		}
		dn_pokes(a, now);
		pthread_mutex_lock(&a->lock);
		wake = next_scan;
		if (a->npokes && now + DN_POKE_MS < wake)
			wake = now + DN_POKE_MS;
		while (!a->stopping && !a->poked) {
			uint64_t t = dn_now_ms(), left;

			if (t >= wake)
				break;
			left = wake - t;
			clock_gettime(CLOCK_MONOTONIC, &ts);
			ts.tv_sec += (time_t)(left / 1000);
			ts.tv_nsec += (long)(left % 1000) * 1000000L;
			if (ts.tv_nsec >= 1000000000L) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000L;
			}
			pthread_cond_timedwait(&a->cond, &a->lock, &ts);
		}
	}
	pthread_mutex_unlock(&a->lock);
	return NULL;
}

/* ---- API ---------------------------------------------------------------------- */

static void dn_free(struct agent_dotnet *a)
{
	size_t i;

	for (i = 0; i < a->nprocs; i++)
		free(a->procs[i]);
	free(a->procs);
	free(a->images);
	hmap_free(&a->image_at);
	dn_dirs_reset(a);
	free(a->dirs);
	rp_providers_free(a->prov, a->nprov);
	free(a->out_dir);
	free(a);
}

static struct agent_dotnet *dn_start_fail(struct agent_dotnet *a, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static struct agent_dotnet *dn_start_fail(struct agent_dotnet *a, int err, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	dn_emit(&a->o, msg);
	dn_free(a);
	errno = err;
	return NULL;
}

struct agent_dotnet *agent_dotnet_start(const struct agent_dotnet_opts *o)
{
	struct agent_dotnet *a;
	struct bytebuf probe = { 0 };
	pthread_condattr_t ca;
	struct stat sb;
	char msg[512];
	uint8_t id;
	int err;

	if (!o || o->sz < sizeof(size_t))
		return errno = EINVAL, NULL;
	a = calloc(1, sizeof(*a));
	if (!a)
		return errno = ENOMEM, NULL;
	/* an older caller's shorter struct: the fields it lacks stay 0 */
	memcpy(&a->o, o, o->sz < sizeof(a->o) ? o->sz : sizeof(a->o));
	a->o.sz = sizeof(a->o);
	a->o.providers = NULL;	/* parsed below; the caller's string need not live on */
	if (!a->o.scan_ms)
		a->o.scan_ms = DN_DEFAULT_SCAN_MS;
	if (!a->o.buffer_mb)
		a->o.buffer_mb = COLLECT_DEFAULT_BUFFER_MB;
	if (a->o.buffering != RP_BUFFERING_DROP && a->o.buffering != RP_BUFFERING_BLOCK)
		return dn_start_fail(a, EINVAL, "buffering mode %d is neither Drop (%d) nor "
				     "Block (%d)", a->o.buffering, RP_BUFFERING_DROP,
				     RP_BUFFERING_BLOCK);
	if (a->o.buffer_mb > COLLECT_MAX_BUFFER_MB)
		return dn_start_fail(a, EINVAL, "the buffer must be 1..%u MiB, not %" PRIu32,
				     COLLECT_MAX_BUFFER_MB, a->o.buffer_mb);
	if (!o->out_dir || !o->out_dir[0])
		return dn_start_fail(a, EINVAL, "no output directory");
	if (stat(o->out_dir, &sb))
		err = errno;
	else if (!S_ISDIR(sb.st_mode))
		err = ENOTDIR;
	else if (access(o->out_dir, W_OK | X_OK))
		err = errno;
	else
		err = 0;
	if (err)
		return dn_start_fail(a, err, "%s: %s", o->out_dir, strerror(err));
	/* absolute: the program may change its directory later */
	a->out_dir = realpath(o->out_dir, NULL);
	if (!a->out_dir)
		return dn_start_fail(a, errno, "%s: %s", o->out_dir, strerror(errno));
	if (strlen(a->out_dir) > DN_MAX_DIR)
		return dn_start_fail(a, ENAMETOOLONG, "%s: the output directory's name is over "
				     "%u bytes, too long for the trace names under it",
				     a->out_dir, DN_MAX_DIR);
	a->o.out_dir = a->out_dir;
	if (collect_dotnet_providers(o->providers, &a->prov, &a->nprov, msg, sizeof(msg)))
		return dn_start_fail(a, EINVAL, "providers: %s", msg);
	a->co = (struct ipcc_collect_opts){ .providers = a->prov, .nproviders = a->nprov,
					    .buffer_mb = a->o.buffer_mb, .rundown = true,
					    .buffering = a->o.buffering };
	/* what every runtime would refuse, refused now */
	err = ipcc_collect_payload(&a->co, &probe, &id, msg, sizeof(msg));
	bb_free(&probe);
	if (err)
		return dn_start_fail(a, -err, "%s", msg);
	a->self = getpid();
	pthread_mutex_init(&a->lock, NULL);
	pthread_mutex_init(&a->log_lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&a->cond, &ca);
	pthread_condattr_destroy(&ca);
	err = -rp_thread_start(&a->scanner, "rp-dotnet-scan", dn_scan_main, a);
	if (err) {
		pthread_cond_destroy(&a->cond);
		pthread_mutex_destroy(&a->lock);
		pthread_mutex_destroy(&a->log_lock);
		return dn_start_fail(a, err, "cannot start the scanner thread: %s", strerror(err));
	}
	a->scanner_live = true;
	return a;
}

void agent_dotnet_poke(struct agent_dotnet *a, uint32_t host_pid)
{
	uint64_t until = dn_now_ms() + DN_POKE_WINDOW_MS;
	size_t i;

	if (!a || !host_pid)
		return;
	pthread_mutex_lock(&a->lock);
	if (!a->stopping) {
		for (i = 0; i < a->npokes && a->pokes[i].pid != host_pid; i++)
			;
		if (i < a->npokes)
			a->pokes[i].until = until;
		else if (a->npokes < DN_MAX_POKES)
			a->pokes[a->npokes++] = (struct dn_poke){ host_pid, until };
		/* a full list: the next periodic scan finds it */
		a->poked = true;
		pthread_cond_signal(&a->cond);
	}
	pthread_mutex_unlock(&a->lock);
}

size_t agent_dotnet_list(struct agent_dotnet *a, struct agent_dotnet_proc *out, size_t max)
{
	size_t i, n;

	if (!a)
		return 0;
	pthread_mutex_lock(&a->lock);
	n = a->nprocs;
	for (i = 0; i < n && i < max; i++)
		out[i] = a->procs[i]->pub;
	pthread_mutex_unlock(&a->lock);
	return n;
}

int agent_dotnet_finish(struct agent_dotnet *a)
{
	uint64_t deadline = dn_now_ms() + AGENT_DN_STOP_WAIT_MS + DN_STOP_GRACE_MS;
	size_t i, live = 0, stuck = 0;
	int rc = 0;

	if (!a)
		return 0;
	if (a->finished)
		return a->finish_rc;
	pthread_mutex_lock(&a->lock);
	a->stopping = true;
	pthread_cond_broadcast(&a->cond);
	pthread_mutex_unlock(&a->lock);
	if (a->scanner_live)
		pthread_join(a->scanner, NULL);
	/* every session is told first, so they end together, in one
	 * AGENT_DN_STOP_WAIT_MS rather than one each */
	for (i = 0; i < a->nprocs; i++) {
		struct dn_proc *p = a->procs[i];

		if (!p->th_live)
			continue;
		/* pairs with the store_release of done in dn_session_main() */
		live += !rp_load_acquire(&p->done);
		/* pairs with the load_acquire of quit in dn_stream() */
		rp_store_release(&p->quit, 1);
		/* pairs with the load_acquire of the cancel flag in the IPC
		 * client's waits: a session still starting gives up */
		rp_store_release(&p->ep.cancel, 1);
	}
	if (live)
		dn_log(a, "stopping %zu session%s", live, live == 1 ? "" : "s");
	/* a thread writing its file is waited for; one still in its IPC past
	 * the deadline is stuck where nothing can reach it */
	for (;;) {
		bool waiting = false;

		stuck = 0;
		for (i = 0; i < a->nprocs; i++) {
			struct dn_proc *p = a->procs[i];

			if (!p->th_live || rp_load_acquire(&p->done))
				continue;
			if (rp_load_acquire(&p->finishing) || dn_now_ms() < deadline)
				waiting = true;
			else
				stuck++;
		}
		if (!waiting)
			break;
		rp_clock_sleep_ns(10 * 1000000ull);
	}
	for (i = 0; i < a->nprocs; i++) {
		struct dn_proc *p = a->procs[i];

		if (!p->th_live)
			continue;
		if (!rp_load_acquire(&p->done)) {
			dn_log(a, "pid %u (%s): the session thread is stuck in its IPC (a "
			       "connect() to a runtime that accepts nothing?); leaving it behind",
			       p->pub.pid, p->pub.comm);
			pthread_detach(p->th);
			p->th_live = false;
			rc = rc ? rc : -ETIMEDOUT;
			continue;
		}
		pthread_join(p->th, NULL);
		p->th_live = false;
		if (!rc && p->result)
			rc = p->result;
	}
	a->finished = true;
	a->finish_rc = rc;
	a->stuck = stuck;
	return rc;
}

int agent_dotnet_stop(struct agent_dotnet *a)
{
	int rc;

	if (!a)
		return 0;
	rc = agent_dotnet_finish(a);
	/* a thread left behind still uses the agent: it is not freed */
	if (a->stuck)
		return rc;
	pthread_cond_destroy(&a->cond);
	pthread_mutex_destroy(&a->lock);
	pthread_mutex_destroy(&a->log_lock);
	dn_free(a);
	return rc;
}
