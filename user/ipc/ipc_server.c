// SPDX-License-Identifier: MIT
/*
 * The diagnostics IPC server: dotnet-trace, dotnet-counters and dotnet-gcdump
 * talk to this process as if it were a .NET runtime (Documentation/ipc.md).
 *
 * Threads. One accept thread polls the listen sockets, the idle connections
 * of connect ("reverse") ports, a stop eventfd and a reap eventfd. Every
 * connection it gets runs on its own thread, which reads one request (under
 * a deadline), answers, and closes, except CollectTracing: that thread sends
 * the OK, starts a session writing into the same socket and then watches the
 * socket (client gone), its wake eventfd (StopTracing) and the stop eventfd,
 * and stops the session. So a slow client or a stream never blocks the
 * accept loop, and each session has exactly one owner that stops it.
 *
 * Floods. A connection must send its 20-byte header within
 * rp_ipc_header_timeout_ms and its whole request within
 * rp_ipc_read_timeout_ms. At most MAX_CONNS connections wait for or are
 * being served at once (streams do not count: the session slots bound
 * them). When the table is full, the oldest connection still waiting for
 * its request (never an advertised reverse one) makes room for a newcomer
 * once it has been in EVICT_MIN_AGE_MS and has nothing unread in its
 * socket: it is marked under ipc_lock and woken through its wake eventfd,
 * on which its reads also poll; until then newcomers wait in the listen
 * backlog (LISTEN_BACKLOG deep). A connection that has its whole request is
 * never evicted (admission() has the details). The accept thread does
 * little work per connection and takes at most 64 per port per turn, and
 * each connection has its own thread, so none can hold the server.
 *
 * Memory. Every IPC session is charged what its rings can take; a request
 * that would take the total over the cap (rp_ipc_opts.max_memory_bytes,
 * RINGPIPE_IPC_MAX_MEMORY_MB, or a quarter of RAM) is refused with Fail
 * before anything is allocated; the charge is returned when it stops.
 *
 * Lifetimes. ipc_lock guards the server state and the connection list. A
 * connection thread marks itself done under the lock and pokes the reap
 * eventfd; the accept thread joins and frees done connections. Stop wakes
 * everyone through the stop eventfd, joins the accept thread, waits for the
 * connection threads (after a grace period it shuts down the sockets of those
 * stuck writing to a client that stopped reading), joins them, and only then
 * closes the descriptors everyone polled.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "atomics.h"
#include "clock.h"
#include "ipc.h"
#include "nettrace.h"
#include "procfs.h"
#include "session.h"
#include "thread.h"

extern char **environ;

int rp_ipc_read_timeout_ms = 5000;
int rp_ipc_header_timeout_ms = 1000;
int rp_ipc_stop_grace_ms = 10000;

#define MAX_CONNS 128			/* waiting for or being served (streams aside) */
/* connection threads, live or finishing: the table, the streams, and the
 * evicted ones on their way out */
#define MAX_CONN_THREADS (2 * MAX_CONNS + RP_MAX_SESSIONS)
#define CONN_ROOM_WAIT_MS 100		/* for evicted threads to finish */
#define EVICT_MIN_AGE_MS 100		/* a newcomer's time to send its request */
#define LISTEN_BACKLOG 4096		/* the kernel caps it at net.core.somaxconn */
#define SEND_TIMEOUT_MS 10000		/* a client that does not read its reply */
#define SUSPEND_NOTICE_MS 5000
#define RECONNECT_MIN_MS 10
#define RECONNECT_MAX_MS 500
#define MAX_BUFFER_MB 1024u
#define EVENTPIPE_PROVIDER "Microsoft-DotNETCore-EventPipe"

enum srv_state {
	SRV_IDLE = 0,
	SRV_RUNNING,
	SRV_STOPPING,
};

struct port {
	char path[IPC_PATH_MAX];
	bool connect;
	bool suspend;
	bool resumed;			/* under ipc_lock */
	bool created;			/* a listen socket file we made: unlink it */
	int fd;				/* listen socket, or the idle advertised connection */
	uint32_t backoff_ms;		/* connect ports: accept thread only */
	uint64_t next_try_ns;
};

enum conn_phase {
	CONN_READING = 0,		/* no whole request yet: may be evicted */
	CONN_SERVING,			/* has its request: never evicted */
};

struct conn {
	pthread_t th;
	int fd;				/* -1 once closed; set to -1 under ipc_lock */
	int port;			/* the port it came through */
	int wake;			/* eventfd: eviction while reading, StopTracing
					 * for this connection's session while streaming */
	int stop;			/* the server's stop eventfd */
	bool done;			/* under ipc_lock */
	bool streaming;			/* under ipc_lock: owns session session_id */
	bool evictable;			/* a listen port's (not an advertised one) */
	bool evicted;			/* under ipc_lock */
	int phase;			/* enum conn_phase, under ipc_lock */
	uint64_t since;			/* accepted (rp_clock_mono_ns) */
	uint64_t charge;		/* bytes of the memory cap its session holds */
	uint64_t session_id;
	struct conn *next;		/* newest first */
};

static struct {
	int state;			/* enum srv_state */
	int stop_efd, reap_efd;
	pthread_t accept_th;
	struct port ports[IPC_MAX_PORTS + 1];
	int nports;
	struct conn *conns;
	int nconns;
	uint64_t next_id;
	int waiters;			/* threads blocked in a suspended start */
	pid_t owner;
	bool log;
	uint64_t max_buffer_bytes;	/* rp_ipc_opts: cap on a client's buffer; 0: none */
	char runtime_version[64];	/* rp_ipc_opts: ProcessInfo2/3's; "": ours */
	uint64_t mem_cap;		/* all IPC sessions together (under ipc_lock) */
	uint64_t mem_used;
	uint64_t evictions;		/* since start, for the log */
} srv = { .stop_efd = -1, .reap_efd = -1 };

static pthread_mutex_t ipc_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t env_lock = PTHREAD_MUTEX_INITIALIZER;	/* setenv vs environ */
static pthread_cond_t ipc_cond;
static pthread_once_t ipc_once = PTHREAD_ONCE_INIT;
static uint8_t cookie[16];
static bool cookie_set;
static struct conn *fork_orphans;	/* connections of the parent, in a child */

/* ---- small helpers ----------------------------------------------------- */

static int ms_until(uint64_t deadline)
{
	uint64_t now = rp_clock_mono_ns();

	if (now >= deadline)
		return 0;
	return (int)((deadline - now + 999999) / 1000000);
}

/* A rp_clock_mono_ns() deadline for pthread_cond_timedwait(): ipc_cond
 * waits on CLOCK_MONOTONIC (pthread_condattr_setclock), the same clock. */
static void deadline_ts(struct timespec *ts, uint64_t deadline)
{
	ts->tv_sec = (time_t)(deadline / 1000000000ull);
	ts->tv_nsec = (long)(deadline % 1000000000ull);
}

static void efd_signal(int fd)
{
	uint64_t one = 1;

	if (fd >= 0 && write(fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		perror("ringpipe: ipc: eventfd");
}

static void efd_drain(int fd)
{
	uint64_t v;

	if (read(fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		perror("ringpipe: ipc: eventfd");
}


/*
 * Reads exactly n bytes before the deadline; *got says how many came,
 * whatever the outcome. 0 once all n are in, or -ENODATA (EOF first),
 * -ETIMEDOUT, -ECANCELED (the server is stopping, or wake: the connection
 * was evicted) or another -errno.
 */
static int read_full(int fd, int stop, int wake, void *buf, size_t n, uint64_t deadline,
		     size_t *got)
{
	*got = 0;
	while (*got < n) {
		struct pollfd pf[3] = { { .fd = fd, .events = POLLIN },
					{ .fd = stop, .events = POLLIN },
					{ .fd = wake, .events = POLLIN } };
		int left = ms_until(deadline), r;
		ssize_t k;

		if (!left)
			return -ETIMEDOUT;
		r = poll(pf, 3, left);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (pf[1].revents || pf[2].revents)
			return -ECANCELED;
		if (!r)
			continue;
		k = recv(fd, (char *)buf + *got, n - *got, MSG_DONTWAIT);
		if (!k)
			return -ENODATA;
		if (k < 0) {
			if (errno == EAGAIN || errno == EINTR)
				continue;
			return -errno;
		}
		*got += (size_t)k;
	}
	return 0;
}

/* Sends every byte before SEND_TIMEOUT_MS; 0 or a negative errno. */
static int send_all(int fd, int stop, const void *buf, size_t n)
{
	uint64_t deadline = rp_clock_mono_ns() + SEND_TIMEOUT_MS * 1000000ull;
	size_t done = 0;

	while (done < n) {
		ssize_t k = send(fd, (const char *)buf + done, n - done, MSG_DONTWAIT | MSG_NOSIGNAL);

		if (k > 0) {
			done += (size_t)k;
			continue;
		}
		if (k < 0 && errno != EAGAIN && errno != EINTR)
			return -errno;
		{
			struct pollfd pf[2] = { { .fd = fd, .events = POLLOUT },
						{ .fd = stop, .events = POLLIN } };
			int left = ms_until(deadline);

			if (!left)
				return -ETIMEDOUT;
			if (poll(pf, 2, left) < 0 && errno != EINTR)
				return -errno;
			if (pf[1].revents)
				return -ECANCELED;
		}
	}
	return 0;
}

/* ---- process facts ----------------------------------------------------- */

unsigned long long rp_proc_start_ticks(pid_t pid)
{
	struct rp_proc_stat st;
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	return rp_proc_stat_read(AT_FDCWD, path, &st) ? 0 : rp_proc_stat_u64(&st, 22, 0);
}

/* The runtime's disambiguation key: our own start time. */
static unsigned long long start_time_key(void)
{
	return rp_proc_start_ticks(getpid());
}

int rp_ipc_default_path(char *out, size_t len)
{
	const char *tmp = getenv("TMPDIR");
	size_t tl;
	int n;

	if (!tmp || !*tmp)
		tmp = "/tmp/";
	tl = strlen(tmp);
	n = snprintf(out, len, "%s%sdotnet-diagnostic-%d-%llu-socket", tmp,
		     tmp[tl - 1] == '/' ? "" : "/", (int)getpid(), start_time_key());
	if (n < 0 || (size_t)n >= len || n >= IPC_PATH_MAX)
		return -ENAMETOOLONG;
	return 0;
}

/* /proc/self/cmdline with the arguments joined by spaces. */
static char *command_line(void)
{
	struct bytebuf b = { 0 };
	char buf[4096];
	ssize_t n;
	size_t i;
	int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);

	if (fd >= 0) {
		while ((n = read(fd, buf, sizeof(buf))) > 0)
			bb_append(&b, buf, (size_t)n);
		close(fd);
	}
	while (b.len && !b.p[b.len - 1])
		b.len--;
	for (i = 0; i < b.len; i++)
		if (!b.p[i])
			b.p[i] = ' ';
	if (bb_append(&b, "", 1)) {
		bb_free(&b);
		return strdup("");
	}
	return (char *)b.p;
}

#if defined(__x86_64__)
#define ARCH "x64"
#define RID_ARCH "x64"
#elif defined(__aarch64__)
#define ARCH "arm64"
#define RID_ARCH "arm64"
#elif defined(__i386__)
#define ARCH "x86"
#define RID_ARCH "x86"
#elif defined(__arm__)
#define ARCH "arm32"
#define RID_ARCH "arm"
#elif defined(__riscv) && __riscv_xlen == 64
#define ARCH "riscv64"
#define RID_ARCH "riscv64"
#elif defined(__s390x__)
#define ARCH "s390x"
#define RID_ARCH "s390x"
#else
#define ARCH "Unknown"
#define RID_ARCH "unknown"
#endif
#ifdef __GLIBC__
#define RID_OS "linux-"
#else
#define RID_OS "linux-musl-"
#endif

/* ---- replies ----------------------------------------------------------- */

static void ipc_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* One line, one write(2): lines of concurrent connections never mix. */
static void ipc_log(const char *fmt, ...)
{
	static const char prefix[] = "ringpipe: ipc: ";
	char line[1024];
	size_t len = sizeof(prefix) - 1, off = 0;
	va_list ap;
	int k;

	if (!srv.log)
		return;
	memcpy(line, prefix, len);
	va_start(ap, fmt);
	k = vsnprintf(line + len, sizeof(line) - len - 1, fmt, ap);	/* room for '\n' */
	va_end(ap);
	if (k > 0)
		len += (size_t)k < sizeof(line) - len - 1 ? (size_t)k : sizeof(line) - len - 2;
	line[len++] = '\n';
	while (off < len) {
		ssize_t w = write(STDERR_FILENO, line + off, len - off);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			break;
		off += (size_t)w;
	}
}

static void reply_error(struct conn *c, uint32_t hr)
{
	uint8_t b[24];

	send_all(c->fd, c->stop, b, ipc_reply_error(b, hr));
}

static int reply_code(struct conn *c, uint32_t code)
{
	uint8_t b[24];

	return send_all(c->fd, c->stop, b, ipc_reply_ok_code(b, code));
}

/* ---- commands ---------------------------------------------------------- */

/* Streams until the client leaves, StopTracing, or the server stops. */
static void watch_stream(struct conn *c)
{
	char scratch[512];

	for (;;) {
		struct pollfd pf[3] = {
			{ .fd = c->fd, .events = POLLIN | POLLRDHUP },
			{ .fd = c->wake, .events = POLLIN },
			{ .fd = c->stop, .events = POLLIN },
		};
		ssize_t k;

		if (poll(pf, 3, -1) < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		if (pf[1].revents || pf[2].revents)
			return;
		if (pf[0].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))
			return;
		if (pf[0].revents & POLLIN) {
			/* clients send nothing on a stream; discard whatever comes */
			k = recv(c->fd, scratch, sizeof(scratch), MSG_DONTWAIT);
			if (!k || (k < 0 && errno != EAGAIN && errno != EINTR))
				return;
		}
	}
}

static bool free_slot_exists(void)
{
	bool found = false;
	int i;

	pthread_mutex_lock(&rp_control_lock);
	for (i = 0; i < RP_MAX_SESSIONS && !found; i++)
		found = rp_load_relaxed(&rp_slots[i].state) == SLOT_FREE;
	pthread_mutex_unlock(&rp_control_lock);
	return found;
}

/*
 * What a session with this ring budget can take: one ring per possible CPU,
 * a power of two no larger than its share, but never under the minimum
 * ring (session.c), so a small budget on many CPUs takes more.
 */
static uint64_t ring_charge(uint64_t budget)
{
	uint64_t floor = (uint64_t)rp_shm_possible_cpus() * RP_RING_MIN_DATA_SIZE;

	return budget > floor ? budget : floor;
}

#define MIB(b) ((unsigned long long)((b) >> 20))

static void do_collect(struct conn *c, const struct ipc_collect *col)
{
	struct rp_session_opts so = { .sz = sizeof(so), .fd = -1 };
	struct rp_provider_config *pc;
	struct rp_session *s;
	uint8_t reply[28];
	uint64_t id, grant, limit, charge, cap, left;
	bool have_eventpipe = false;
	uint32_t i, npc = col->nproviders;
	int err;

	if (col->session_type != 0) {
		ipc_log("CollectTracing%u: user_events sessions are not supported", col->version);
		reply_error(c, IPC_HR_NOT_SUPPORTED);
		return;
	}
	if (col->format == 0) {
		ipc_log("CollectTracing%u: the NetPerf format is not supported", col->version);
		reply_error(c, IPC_HR_NOT_SUPPORTED);
		return;
	}
	/* one more: the runtime enables its own EventPipe provider in every
	 * session (its ProcessInfo event names the process in PerfView and
	 * TraceLog); a process that defines it does the same here */
	pc = calloc(col->nproviders + 1, sizeof(*pc));
	if (!pc) {
		reply_error(c, IPC_HR_FAIL);
		return;
	}
	for (i = 0; i < col->nproviders; i++) {
		const struct ipc_provider *p = &col->providers[i];

		pc[i].name = p->name;
		pc[i].keywords = p->keywords;
		pc[i].level = (uint8_t)p->level;
		pc[i].args = p->args && p->args[0] ? p->args : NULL;
		if (!strcmp(p->name, EVENTPIPE_PROVIDER))
			have_eventpipe = true;
	}
	if (!have_eventpipe)
		pc[npc++].name = EVENTPIPE_PROVIDER;	/* every keyword and level */

	/* the common way a start fails, refused while an error can still be sent
	 * (a slot can still be taken between this look and the start) */
	if (!free_slot_exists()) {
		ipc_log("CollectTracing%u: %d sessions are running already", col->version,
			RP_MAX_SESSIONS);
		reply_error(c, IPC_HR_FAIL);
		free(pc);
		return;
	}

	/* the budget: clamped per session, then charged against the cap of all
	 * IPC sessions together; past the cap, refused before any allocation */
	limit = (uint64_t)MAX_BUFFER_MB << 20;
	if (srv.max_buffer_bytes && srv.max_buffer_bytes < limit)
		limit = srv.max_buffer_bytes;
	grant = (uint64_t)col->buffer_mb << 20;
	if (grant > limit)
		grant = limit;
	charge = ring_charge(grant);

	pthread_mutex_lock(&ipc_lock);
	if (srv.state != SRV_RUNNING) {
		pthread_mutex_unlock(&ipc_lock);
		free(pc);
		return;
	}
	cap = srv.mem_cap;
	left = cap - srv.mem_used;
	if (charge > left) {
		pthread_mutex_unlock(&ipc_lock);
		ipc_log("CollectTracing%u: refused: %u MiB asked, the session would take %llu MiB "
			"and %llu MiB are left of the %llu MiB cap on IPC sessions "
			"(rp_ipc_opts.max_memory_bytes, RINGPIPE_IPC_MAX_MEMORY_MB)",
			col->version, col->buffer_mb, MIB(charge + (1u << 20) - 1), MIB(left),
			MIB(cap));
		reply_error(c, IPC_HR_FAIL);
		free(pc);
		return;
	}
	srv.mem_used += charge;
	c->charge = charge;
	id = ++srv.next_id;
	c->session_id = id;
	c->streaming = true;	/* out of the table: the accept thread may admit one more */
	efd_signal(srv.reap_efd);
	pthread_mutex_unlock(&ipc_lock);
	if (grant < (uint64_t)col->buffer_mb << 20)
		ipc_log("CollectTracing%u: %u MiB asked, %llu MiB granted (at most %llu MiB per "
			"session); %llu MiB of the %llu MiB cap on IPC sessions are left",
			col->version, col->buffer_mb, MIB(grant), MIB(limit), MIB(left - charge),
			MIB(cap));

	so.providers = pc;
	so.nproviders = npc;
	so.format = NT_FORMAT_V5;
	so.buffering = col->buffering == 1 ? RP_BUFFERING_BLOCK : RP_BUFFERING_DROP;
	so.buffer_bytes = grant;
	so.fd = c->fd;
	so.rundown_keywords = col->rundown_keyword;
	so.kind = RP_SESSION_STREAMING;
	/* as the runtime does: the session collects before the reply (a client
	 * that resumes the program right after the OK misses nothing), but the
	 * socket carries the OK first and the trace after it: the session starts
	 * held (no output, enable callbacks deferred) until the OK is sent */
	s = rp_session_start_ex(&so, RP_START_HELD);
	if (!s) {
		ipc_log("CollectTracing%u: the session could not start: %s", col->version,
			rp_last_error());
		reply_error(c, IPC_HR_FAIL);
		goto out;
	}
	if (send_all(c->fd, c->stop, reply, ipc_reply_ok_u64(reply, id))) {
		rp_session_stop(s);
		goto out;
	}
	rp_session_release(s);
	watch_stream(c);
	err = rp_session_stop(s);
	if (err && err != -EPIPE && err != -ECONNRESET)
		ipc_log("session %llu ended with output error %d", (unsigned long long)id, err);
out:
	pthread_mutex_lock(&ipc_lock);
	c->streaming = false;
	srv.mem_used -= c->charge;
	c->charge = 0;
	pthread_mutex_unlock(&ipc_lock);
	free(pc);
}

static void do_stop_tracing(struct conn *c, uint64_t id)
{
	struct conn *o;
	uint8_t reply[28];
	bool found = false;

	pthread_mutex_lock(&ipc_lock);
	for (o = srv.conns; o; o = o->next)
		if (o->streaming && o->session_id == id) {
			efd_signal(o->wake);
			found = true;
		}
	pthread_mutex_unlock(&ipc_lock);
	/* like the runtime, an id that is not running (any more) is not an error */
	if (!found)
		ipc_log("StopTracing: no running session %llu", (unsigned long long)id);
	send_all(c->fd, c->stop, reply, ipc_reply_ok_u64(reply, id));
}

static void do_process_info(struct conn *c, int version)
{
	struct ipc_process_info pi = { 0 };
	struct bytebuf b = { 0 };
	char version_str[64];
	char *cmdline = command_line();

	if (srv.runtime_version[0])
		snprintf(version_str, sizeof(version_str), "%s", srv.runtime_version);
	else
		snprintf(version_str, sizeof(version_str), "ringpipe %s", rp_version());
	pi.pid = (uint64_t)getpid();
	memcpy(pi.cookie, cookie, 16);
	pi.command_line = cmdline ? cmdline : "";
	pi.os = "Linux";
	pi.arch = ARCH;
	pi.assembly = program_invocation_short_name;
	pi.clr_version = version_str;
	pi.rid = RID_OS RID_ARCH;
	if (ipc_process_info_encode(&b, version, &pi))
		reply_error(c, IPC_HR_FAIL);
	else
		send_all(c->fd, c->stop, b.p, b.len);
	bb_free(&b);
	free(cmdline);
}

static void do_environment(struct conn *c)
{
	struct bytebuf reply = { 0 }, cont = { 0 };
	int err;

	pthread_mutex_lock(&env_lock);
	err = ipc_environment_encode(&reply, &cont, environ);
	pthread_mutex_unlock(&env_lock);
	if (err)
		reply_error(c, IPC_HR_FAIL);
	else if (!send_all(c->fd, c->stop, reply.p, reply.len))
		send_all(c->fd, c->stop, cont.p, cont.len);
	bb_free(&reply);
	bb_free(&cont);
}

static void do_setenv(struct conn *c, const char *name, const char *value)
{
	int r;

	pthread_mutex_lock(&env_lock);
	r = value ? setenv(name, value, 1) : unsetenv(name);
	pthread_mutex_unlock(&env_lock);
	if (r)
		reply_error(c, IPC_HR_FAIL);
	else
		reply_code(c, IPC_HR_OK);
}

static void do_resume(struct conn *c)
{
	pthread_mutex_lock(&ipc_lock);
	srv.ports[c->port].resumed = true;
	pthread_cond_broadcast(&ipc_cond);
	pthread_mutex_unlock(&ipc_lock);
	reply_code(c, IPC_HR_OK);
}

/* ---- connections ------------------------------------------------------- */

static void conn_close(struct conn *c)
{
	char scratch[4096];
	int fd, i;

	pthread_mutex_lock(&ipc_lock);
	fd = c->fd;
	c->fd = -1;
	pthread_mutex_unlock(&ipc_lock);
	if (fd < 0)
		return;
	/* unread bytes at close would turn the client's EOF into ECONNRESET */
	for (i = 0; i < 64 && recv(fd, scratch, sizeof(scratch), MSG_DONTWAIT) > 0; i++)
		;
	shutdown(fd, SHUT_WR);
	close(fd);
}

static unsigned long long ms_since(uint64_t t0)
{
	return (unsigned long long)((rp_clock_mono_ns() - t0) / 1000000u);
}

/* A read was cancelled: by the server's stop (quietly), or an eviction. */
static void log_cancelled(struct conn *c, size_t got)
{
	unsigned long long total;
	bool evicted;

	pthread_mutex_lock(&ipc_lock);
	evicted = c->evicted;
	total = (unsigned long long)srv.evictions;
	pthread_mutex_unlock(&ipc_lock);
	if (evicted)
		ipc_log("evicted an idle connection after %llu ms and %zu bytes of its request: "
			"%d connections were waiting or being served (%llu evicted since start)",
			ms_since(c->since), got, MAX_CONNS, total);
}

static void serve(struct conn *c)
{
	int hdr_ms = rp_ipc_header_timeout_ms < rp_ipc_read_timeout_ms ? rp_ipc_header_timeout_ms :
									 rp_ipc_read_timeout_ms;
	uint64_t deadline = c->since + (uint64_t)rp_ipc_read_timeout_ms * 1000000ull;
	uint64_t hdr_deadline = c->since + (uint64_t)hdr_ms * 1000000ull;
	uint8_t hdr[IPC_HEADER_SIZE], *buf = NULL;
	struct ipc_header h;
	struct ipc_error err;
	struct ipc_msg m;
	size_t got;
	bool evicted;
	int r;

	r = read_full(c->fd, c->stop, c->wake, hdr, sizeof(hdr), hdr_deadline, &got);
	if (r == -ECANCELED) {
		log_cancelled(c, got);
		return;
	}
	if (r == -ENODATA && !got)
		return;		/* connected and left (a probe) */
	if (r) {
		ipc_log("request header: %s after %zu bytes (%llu ms)",
			r == -ETIMEDOUT ? "timed out" : r == -ENODATA ? "connection closed" :
									strerror(-r),
			got, ms_since(c->since));
		reply_error(c, IPC_HR_BAD_ENCODING);
		return;
	}
	if (ipc_header_parse(hdr, sizeof(hdr), &h, &err)) {
		ipc_log("refused a request: %s", err.msg);
		reply_error(c, err.hresult);
		return;
	}
	buf = malloc(h.size);
	if (!buf) {
		reply_error(c, IPC_HR_FAIL);
		return;
	}
	memcpy(buf, hdr, sizeof(hdr));
	r = read_full(c->fd, c->stop, c->wake, buf + IPC_HEADER_SIZE, h.size - IPC_HEADER_SIZE,
		      deadline, &got);
	if (r) {
		free(buf);
		if (r == -ECANCELED) {
			log_cancelled(c, IPC_HEADER_SIZE + got);
			return;
		}
		ipc_log("request of %u bytes: the payload %s after %zu bytes (%llu ms)", h.size,
			r == -ETIMEDOUT ? "did not arrive in time" : "was cut short",
			IPC_HEADER_SIZE + got, ms_since(c->since));
		reply_error(c, IPC_HR_BAD_ENCODING);
		return;
	}
	/* the whole request is in: from now on it is served, never evicted.
	 * One chosen for eviction as its last bytes came in is served all the
	 * same (the table is one over for a moment): its wake is drained, it
	 * will mean StopTracing */
	pthread_mutex_lock(&ipc_lock);
	evicted = c->evicted;
	c->phase = CONN_SERVING;
	c->evicted = false;
	if (evicted)
		efd_drain(c->wake);
	pthread_mutex_unlock(&ipc_lock);
	if (ipc_msg_parse(buf, h.size, &m, &err)) {
		free(buf);
		ipc_log("refused a request (set 0x%02x id 0x%02x): %s", h.set, h.id, err.msg);
		reply_error(c, err.hresult);
		return;
	}
	free(buf);
	switch (m.kind) {
	case IPC_MSG_COLLECT_TRACING:
		do_collect(c, &m.u.collect);
		break;
	case IPC_MSG_STOP_TRACING:
		do_stop_tracing(c, m.u.session_id);
		break;
	case IPC_MSG_PROCESS_INFO:
		do_process_info(c, m.u.info_version);
		break;
	case IPC_MSG_RESUME_RUNTIME:
		do_resume(c);
		break;
	case IPC_MSG_PROCESS_ENVIRONMENT:
		do_environment(c);
		break;
	case IPC_MSG_SET_ENVIRONMENT:
		do_setenv(c, m.u.setenv.name, m.u.setenv.value);
		break;
	}
	ipc_msg_free(&m);
}

static void *conn_main(void *arg)
{
	struct conn *c = arg;

	serve(c);
	conn_close(c);
	pthread_mutex_lock(&ipc_lock);
	c->done = true;
	pthread_cond_broadcast(&ipc_cond);
	/* the reap eventfd stays open until every connection is joined */
	efd_signal(srv.reap_efd);
	pthread_mutex_unlock(&ipc_lock);
	return NULL;
}

static void conn_free(struct conn *c)
{
	if (c->wake >= 0)
		close(c->wake);
	if (c->fd >= 0)
		close(c->fd);
	free(c);
}

static bool conns_done(void)
{
	struct conn *c;

	for (c = srv.conns; c; c = c->next)
		if (c->done)
			return true;
	return false;
}

static void conn_reap(void);

/*
 * Room for one more connection thread (accept thread): joins finished
 * ones, and waits up to CONN_ROOM_WAIT_MS for evicted ones to finish.
 */
static bool conn_room(void)
{
	struct timespec ts;
	bool room;

	deadline_ts(&ts, rp_clock_mono_ns() + CONN_ROOM_WAIT_MS * 1000000ull);
	pthread_mutex_lock(&ipc_lock);
	while (srv.nconns >= MAX_CONN_THREADS && srv.state == SRV_RUNNING) {
		if (conns_done()) {
			pthread_mutex_unlock(&ipc_lock);
			conn_reap();
			pthread_mutex_lock(&ipc_lock);
			continue;
		}
		if (pthread_cond_timedwait(&ipc_cond, &ipc_lock, &ts) == ETIMEDOUT)
			break;
	}
	room = srv.nconns < MAX_CONN_THREADS;
	pthread_mutex_unlock(&ipc_lock);
	return room;
}

/* Bytes waiting in a connection's socket that its thread has not read yet. */
static int pending_bytes(int fd)
{
	int n = 0;

	return fd >= 0 && !ioctl(fd, FIONREAD, &n) ? n : 0;
}

/*
 * Whether a listen port's connection can be admitted now (ipc_lock held).
 * 0 when the table has room, or when it is full but a connection still
 * waiting for its request has been there EVICT_MIN_AGE_MS with nothing
 * unread in its socket: the oldest such one is then the victim. One with
 * bytes waiting is never taken: its thread is about to read them (it may
 * just not have run yet), so that is a wait of a millisecond. Else the ms
 * until the oldest waiting one is old enough, or -1 when none waits (every
 * one has its request): the newcomer stays in the listen backlog
 * meanwhile. So a newcomer always has EVICT_MIN_AGE_MS to send its
 * request, and a flood gets no more than MAX_CONNS connections in per
 * EVICT_MIN_AGE_MS. victim may be NULL: only the answer is wanted.
 */
static int admission(struct conn **victim)
{
	struct conn *cand[MAX_CONN_THREADS], *c, *oldest;
	uint64_t now = rp_clock_mono_ns(), min_age = EVICT_MIN_AGE_MS * 1000000ull;
	int n = 0, live = 0, i, w;

	if (victim)
		*victim = NULL;
	for (c = srv.conns; c; c = c->next) {
		if (c->done || c->evicted || c->streaming)
			continue;
		live++;
		if (c->phase == CONN_READING && c->evictable && n < MAX_CONN_THREADS)
			cand[n++] = c;		/* newest first */
	}
	if (live < MAX_CONNS)
		return 0;
	if (!n)
		return -1;
	oldest = cand[n - 1];
	if (now - oldest->since < min_age) {
		w = ms_until(oldest->since + min_age);
		return w ? w : 1;
	}
	for (i = n - 1; i >= 0 && now - cand[i]->since >= min_age; i--)
		if (!pending_bytes(cand[i]->fd)) {
			if (victim)
				*victim = cand[i];
			return 0;
		}
	return 1;
}

static int admission_wait(void)
{
	int w;

	pthread_mutex_lock(&ipc_lock);
	w = admission(NULL);
	pthread_mutex_unlock(&ipc_lock);
	return w;
}

/* Hands a connected socket to a new connection thread (accept thread). */
static void conn_spawn(int fd, int port)
{
	struct conn *c = calloc(1, sizeof(*c)), *victim = NULL;
	bool room;

	if (!c) {
		close(fd);
		return;
	}
	c->fd = fd;
	c->port = port;
	c->stop = srv.stop_efd;
	c->since = rp_clock_mono_ns();
	c->evictable = !srv.ports[port].connect;
	c->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	room = conn_room();
	pthread_mutex_lock(&ipc_lock);
	/* the accept thread accepted it because admission() said so, and only
	 * it adds connections; advertised connections are always admitted */
	if (room && c->evictable && !admission(&victim) && victim) {
		victim->evicted = true;
		srv.evictions++;
		efd_signal(victim->wake);
	}
	if (!room) {
		int n = srv.nconns;

		pthread_mutex_unlock(&ipc_lock);
		ipc_log("dropped a connection: %d connection threads", n);
		conn_free(c);
		return;
	}
	if (c->wake < 0 || srv.state != SRV_RUNNING ||
	    rp_thread_start(&c->th, "rp-ipc-conn", conn_main, c)) {
		pthread_mutex_unlock(&ipc_lock);
		ipc_log("dropped a connection: %s", c->wake < 0 ? "no eventfd" :
			srv.state != SRV_RUNNING ? "the server is stopping" : "no thread");
		conn_free(c);
		return;
	}
	c->next = srv.conns;
	srv.conns = c;
	srv.nconns++;
	pthread_mutex_unlock(&ipc_lock);
}

/* Joins and frees finished connections (accept thread). */
static void conn_reap(void)
{
	struct conn *done = NULL, **pp, *c;

	pthread_mutex_lock(&ipc_lock);
	for (pp = &srv.conns; (c = *pp);) {
		if (c->done) {
			*pp = c->next;
			srv.nconns--;
			c->next = done;
			done = c;
		} else {
			pp = &c->next;
		}
	}
	pthread_mutex_unlock(&ipc_lock);
	while ((c = done)) {
		done = c->next;
		pthread_join(c->th, NULL);
		conn_free(c);
	}
}

/* ---- ports ------------------------------------------------------------- */

static int sun_addr(struct sockaddr_un *a, const char *path)
{
	memset(a, 0, sizeof(*a));
	a->sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(a->sun_path))
		return -ENAMETOOLONG;
	strcpy(a->sun_path, path);
	return 0;
}

/* A socket file nobody listens on (left by a process that died). */
static bool stale_socket(const struct sockaddr_un *a)
{
	struct stat st;
	int fd, r;

	if (lstat(a->sun_path, &st) || !S_ISSOCK(st.st_mode))
		return false;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return false;
	r = connect(fd, (const struct sockaddr *)a, sizeof(*a));
	close(fd);
	return r < 0 && errno == ECONNREFUSED;
}

/*
 * The name a listen port binds before it listens: ".rp-" + the final file
 * name, in the same directory; "" when that does not fit a socket path.
 */
static void bind_name(const char *path, char *out, size_t len)
{
	const char *base = strrchr(path, '/');
	size_t dir = base ? (size_t)(base - path) + 1 : 0, rest = strlen(path + dir);

	*out = '\0';
	if (dir + 4 + rest >= len)
		return;
	memcpy(out, path, dir);
	memcpy(out + dir, ".rp-", 4);
	memcpy(out + dir + 4, path + dir, rest + 1);
}

/*
 * As the runtime: socket, fchmod 0600, bind, listen (with a deeper backlog
 * than the runtime's 255: a burst of connections must queue, not fail with
 * EAGAIN, while the accept thread catches up). The socket is
 * bound under a temporary name and renamed once it listens: a tool that
 * finds the file (dotnet-trace ps, ringpipe collect) can connect at once,
 * instead of being refused between bind() and listen().
 */
static int port_listen(struct port *p)
{
	struct sockaddr_un a, t;
	char tmp[sizeof(t.sun_path)];
	int fd, err;

	err = sun_addr(&a, p->path);
	if (err) {
		rp_set_error("%s: too long for a Unix socket path", p->path);
		return err;
	}
	bind_name(p->path, tmp, sizeof(tmp));
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		goto fail;
	if (fchmod(fd, 0600))
		goto fail;
	if (*tmp && !sun_addr(&t, tmp)) {
		/* a live process owns the name: refused, as bind() would */
		if (access(p->path, F_OK) == 0 && !stale_socket(&a)) {
			errno = EADDRINUSE;
			goto fail;
		}
		unlink(tmp);	/* left by a process that died before its rename */
		if (bind(fd, (struct sockaddr *)&t, sizeof(t)) || listen(fd, LISTEN_BACKLOG))
			goto fail_tmp;
		if (rename(tmp, p->path))
			goto fail_tmp;
		p->created = true;
		p->fd = fd;
		return 0;
	}
	if (bind(fd, (struct sockaddr *)&a, sizeof(a))) {
		if (errno != EADDRINUSE || !stale_socket(&a))
			goto fail;
		unlink(p->path);
		if (bind(fd, (struct sockaddr *)&a, sizeof(a)))
			goto fail;
	}
	p->created = true;
	if (listen(fd, LISTEN_BACKLOG))
		goto fail;
	p->fd = fd;
	return 0;
fail_tmp:
	err = errno;
	unlink(tmp);
	errno = err;
fail:
	err = -errno;
	rp_set_error("diagnostic port %s: %s", p->path, strerror(errno));
	if (fd >= 0)
		close(fd);
	if (p->created)
		unlink(p->path);
	p->created = false;
	return err;
}

/* Connect ports: connect and advertise (accept thread). */
static void port_connect(struct port *p)
{
	uint8_t adv[IPC_ADVERTISE_SIZE];
	struct sockaddr_un a;
	int fd;

	if (sun_addr(&a, p->path))
		goto retry;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		goto retry;
	ipc_advertise_put(adv, cookie, (uint64_t)getpid());
	/* a Unix connect completes at once or fails (EAGAIN: backlog full) */
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) ||
	    send(fd, adv, sizeof(adv), MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)sizeof(adv) ||
	    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)) {
		close(fd);
		goto retry;
	}
	p->fd = fd;
	p->backoff_ms = RECONNECT_MIN_MS;
	return;
retry:
	p->next_try_ns = rp_clock_mono_ns() + (uint64_t)p->backoff_ms * 1000000ull;
	p->backoff_ms = p->backoff_ms * 5 / 4;
	if (p->backoff_ms > RECONNECT_MAX_MS)
		p->backoff_ms = RECONNECT_MAX_MS;
}

static void port_accept(int i)
{
	struct port *p = &srv.ports[i];
	int k;

	/* at most 64 a turn, so that the other ports and the reaping get theirs */
	for (k = 0; k < 64 && !admission_wait(); k++) {
		int fd = accept4(p->fd, NULL, NULL, SOCK_CLOEXEC);

		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
				ipc_log("accept on %s: %s", p->path, strerror(errno));
			return;
		}
		conn_spawn(fd, i);
	}
}

/* Activity on an advertised idle connection: a request, or a hang-up. */
static void port_connected_ready(int i)
{
	struct port *p = &srv.ports[i];
	char b;
	ssize_t k = recv(p->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);

	if (k < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (k > 0) {
		/* one command per connection: hand it over, advertise anew */
		conn_spawn(p->fd, i);
		p->fd = -1;
		p->next_try_ns = 0;
		return;
	}
	close(p->fd);		/* the tool hung up: reconnect after a pause */
	p->fd = -1;
	p->next_try_ns = rp_clock_mono_ns() + (uint64_t)p->backoff_ms * 1000000ull;
}

static void *accept_main(void *arg)
{
	struct pollfd pf[2 + IPC_MAX_PORTS + 1];
	int map[2 + IPC_MAX_PORTS + 1];

	(void)arg;
	for (;;) {
		uint64_t now = rp_clock_mono_ns();
		int np = 0, i, timeout = -1, admit = admission_wait();

		/* a full table: newcomers wait in the listen backlog until one can
		 * be evicted (a timeout) or one finishes (the reap eventfd) */
		if (admit > 0)
			timeout = admit;
		pf[np].fd = srv.stop_efd, pf[np].events = POLLIN, map[np++] = -1;
		pf[np].fd = srv.reap_efd, pf[np].events = POLLIN, map[np++] = -1;
		for (i = 0; i < srv.nports; i++) {
			struct port *p = &srv.ports[i];

			if (!p->connect && admit)
				continue;
			if (p->connect && p->fd < 0) {
				int wait = p->next_try_ns > now ? ms_until(p->next_try_ns) : 0;

				if (timeout < 0 || wait < timeout)
					timeout = wait;
				continue;
			}
			pf[np].fd = p->fd;
			pf[np].events = p->connect ? POLLIN | POLLRDHUP : POLLIN;
			map[np++] = i;
		}
		if (poll(pf, (nfds_t)np, timeout) < 0 && errno != EINTR) {
			perror("ringpipe: ipc: poll");
			break;
		}
		if (pf[0].revents)
			break;
		if (pf[1].revents) {
			efd_drain(srv.reap_efd);
			conn_reap();
		}
		for (i = 2; i < np; i++) {
			if (!pf[i].revents)
				continue;
			if (srv.ports[map[i]].connect)
				port_connected_ready(map[i]);
			else
				port_accept(map[i]);
		}
		now = rp_clock_mono_ns();
		for (i = 0; i < srv.nports; i++) {
			struct port *p = &srv.ports[i];

			if (p->connect && p->fd < 0 && p->next_try_ns <= now)
				port_connect(p);
		}
	}
	return NULL;
}

/* ---- start and stop ---------------------------------------------------- */

static void ipc_atexit(void)
{
	bool mine;

	pthread_mutex_lock(&ipc_lock);
	mine = srv.state == SRV_RUNNING && srv.owner == getpid();
	pthread_mutex_unlock(&ipc_lock);
	if (mine)
		rp_ipc_server_stop();
}

static void fork_prepare(void)
{
	pthread_mutex_lock(&ipc_lock);
	pthread_mutex_lock(&env_lock);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&env_lock);
	pthread_mutex_unlock(&ipc_lock);
}

/* The child has none of the server's threads: forget the server (its
 * sockets stay the parent's; the child's atexit leaves them alone). */
static void fork_child(void)
{
	pthread_condattr_t ca;
	struct conn *c;
	int i;

	/* waiters of the parent's threads are gone with them */
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&ipc_cond, &ca);
	pthread_condattr_destroy(&ca);
	cookie_set = false;
	if (srv.state != SRV_IDLE) {
		/* close()s only: the child may call nothing that is not
		 * async-signal-safe (no free()); the records stay reachable */
		for (c = srv.conns; c; c = c->next) {
			if (c->fd >= 0)
				close(c->fd);
			if (c->wake >= 0)
				close(c->wake);
			c->fd = c->wake = -1;
			if (!c->next) {
				c->next = fork_orphans;
				break;
			}
		}
		if (srv.conns)
			fork_orphans = srv.conns;
		srv.conns = NULL;
		for (i = 0; i < srv.nports; i++)
			if (srv.ports[i].fd >= 0)
				close(srv.ports[i].fd);
		close(srv.stop_efd);
		close(srv.reap_efd);
		srv.stop_efd = srv.reap_efd = -1;
		srv.nports = srv.nconns = srv.waiters = 0;
		srv.state = SRV_IDLE;
	}
	pthread_mutex_unlock(&env_lock);
	pthread_mutex_unlock(&ipc_lock);
}

static void ipc_init_once(void)
{
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&ipc_cond, &ca);
	pthread_condattr_destroy(&ca);
	pthread_atfork(fork_prepare, fork_parent, fork_child);
	atexit(ipc_atexit);
}

static void make_cookie(void)
{
	size_t got = 0;

	if (cookie_set)
		return;
	while (got < sizeof(cookie)) {
		ssize_t n = getrandom(cookie + got, sizeof(cookie) - got, 0);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		got += (size_t)n;
	}
	if (got < sizeof(cookie)) {
		/* no entropy source: still unique enough per process and boot */
		uint64_t a = rp_clock_mono_ns(), b = (uint64_t)getpid() << 32 ^ start_time_key();

		memcpy(cookie, &a, 8);
		memcpy(cookie + 8, &b, 8);
	}
	cookie_set = true;
}

/* A .NET DWORD setting (CLRConfig reads hex): 0 with *out, or -1 when the
 * variable is unset or not a number (the runtime then uses its default). */
static int env_dword(const char *name, unsigned long *out)
{
	const char *v = getenv(name);
	char *end;

	if (!v || !*v)
		return -1;
	errno = 0;
	*out = strtoul(v, &end, 16);
	return *end || errno ? -1 : 0;
}

static bool env_is_zero(const char *name)
{
	unsigned long v;

	return !env_dword(name, &v) && v == 0;
}

static bool env_is_nonzero(const char *name)
{
	unsigned long v;

	return !env_dword(name, &v) && v != 0;
}

static int diagnostics_disabled(void)
{
	const char *v = getenv("RINGPIPE_ENABLE_DIAGNOSTICS");

	if (v && *v) {
		if (!strcmp(v, "0"))
			return -ECANCELED;
		if (strcmp(v, "1")) {
			rp_set_error("RINGPIPE_ENABLE_DIAGNOSTICS=%s: must be 0 or 1", v);
			return -EINVAL;
		}
	}
	if (env_is_zero("DOTNET_EnableDiagnostics") || env_is_zero("COMPlus_EnableDiagnostics") ||
	    env_is_zero("DOTNET_EnableDiagnostics_IPC") || env_is_zero("COMPlus_EnableDiagnostics_IPC")) {
		rp_set_error("diagnostics are disabled by the environment");
		return -ECANCELED;
	}
	return 0;
}

/* The configured ports: opts, then RINGPIPE_DIAGNOSTIC_PORTS, then .NET's. */
static int configured_ports(const char *ports, struct ipc_port_cfg *cfg, size_t *n)
{
	static const char *const vars[] = { "RINGPIPE_DIAGNOSTIC_PORTS", "DOTNET_DiagnosticPorts",
					    "COMPlus_DiagnosticPorts" };
	const char *spec = ports, *src = "rp_ipc_opts.ports";
	char err[256];
	size_t i;

	for (i = 0; !spec && i < sizeof(vars) / sizeof(vars[0]); i++) {
		const char *v = getenv(vars[i]);

		if (v && *v)
			spec = v, src = vars[i];
	}
	*n = 0;
	if (!spec)
		return 0;
	if (ipc_ports_parse(spec, cfg, IPC_MAX_PORTS, n, err, sizeof(err))) {
		rp_set_error("%s=%s: %s", src, spec, err);
		return -EINVAL;
	}
	return 0;
}

uint64_t rp_ipc_default_memory_cap(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);

	if (pages <= 0 || psz <= 0)
		return (uint64_t)IPC_FALLBACK_MEMORY_MB << 20;
	return (uint64_t)pages * (uint64_t)psz / 4;
}

uint64_t rp_ipc_memory_cap(void)
{
	uint64_t v;

	pthread_mutex_lock(&ipc_lock);
	v = srv.state == SRV_IDLE ? 0 : srv.mem_cap;
	pthread_mutex_unlock(&ipc_lock);
	return v;
}

uint64_t rp_ipc_memory_used(void)
{
	uint64_t v;

	pthread_mutex_lock(&ipc_lock);
	v = srv.mem_used;
	pthread_mutex_unlock(&ipc_lock);
	return v;
}

/* The cap on all IPC sessions' memory: the option, else the environment,
 * else a quarter of RAM. 0 or -EINVAL with a message. */
static int memory_cap(uint64_t opt, uint64_t *cap)
{
	const char *v = getenv("RINGPIPE_IPC_MAX_MEMORY_MB");
	unsigned long long mb;
	char *end;

	if (opt) {
		*cap = opt;
		return 0;
	}
	if (!v || !*v) {
		*cap = rp_ipc_default_memory_cap();
		return 0;
	}
	errno = 0;
	mb = strtoull(v, &end, 10);
	if (*v < '0' || *v > '9' || *end || errno || !mb || mb > (UINT64_MAX >> 20)) {
		rp_set_error("RINGPIPE_IPC_MAX_MEMORY_MB=%s: must be a number of MiB, 1 or more",
			     v);
		return -EINVAL;
	}
	*cap = (uint64_t)mb << 20;
	return 0;
}

static bool any_suspended(void)
{
	int i;

	for (i = 0; i < srv.nports; i++)
		if (srv.ports[i].suspend && !srv.ports[i].resumed)
			return true;
	return false;
}

/* Closes the ports and descriptors of a server whose threads are gone. */
static void teardown_ports(void)
{
	int i;

	for (i = 0; i < srv.nports; i++) {
		struct port *p = &srv.ports[i];

		if (p->fd >= 0)
			close(p->fd);
		p->fd = -1;
		if (p->created)
			unlink(p->path);
		p->created = false;
	}
	srv.nports = 0;
	if (srv.stop_efd >= 0)
		close(srv.stop_efd);
	if (srv.reap_efd >= 0)
		close(srv.reap_efd);
	srv.stop_efd = srv.reap_efd = -1;
}

RP_API int rp_ipc_server_start(const struct rp_ipc_opts *uopts)
{
	struct rp_ipc_opts o = { .sz = sizeof(o) };
	struct ipc_port_cfg cfg[IPC_MAX_PORTS];
	uint64_t notice, cap;
	size_t ncfg = 0, i;
	int err;

	if (uopts) {
		if (uopts->sz < sizeof(size_t)) {
			rp_set_error("rp_ipc_server_start: sz not set");
			return -EINVAL;
		}
		memcpy(&o, uopts, uopts->sz < sizeof(o) ? uopts->sz : sizeof(o));
	}
	err = diagnostics_disabled();
	if (err)
		return err;
	err = configured_ports(o.ports, cfg, &ncfg);
	if (err)
		return err;
	err = memory_cap(o.max_memory_bytes, &cap);
	if (err)
		return err;
	pthread_once(&ipc_once, ipc_init_once);

	pthread_mutex_lock(&ipc_lock);
	if (srv.state != SRV_IDLE) {
		pthread_mutex_unlock(&ipc_lock);
		rp_set_error("the diagnostics IPC server is already running");
		return -EBUSY;
	}
	srv.nports = 0;
	srv.conns = NULL;
	srv.nconns = srv.waiters = 0;
	srv.max_buffer_bytes = o.max_buffer_bytes;
	snprintf(srv.runtime_version, sizeof(srv.runtime_version), "%s",
		 o.runtime_version ? o.runtime_version : "");
	srv.mem_cap = cap;
	srv.mem_used = 0;
	srv.evictions = 0;
	srv.log = getenv("RINGPIPE_IPC_LOG") && !strcmp(getenv("RINGPIPE_IPC_LOG"), "1");
	if (!o.no_default_port) {
		struct port *p = &srv.ports[srv.nports++];

		memset(p, 0, sizeof(*p));
		p->fd = -1;
		p->suspend = env_is_nonzero("DOTNET_DefaultDiagnosticPortSuspend") ||
			     env_is_nonzero("COMPlus_DefaultDiagnosticPortSuspend");
		if (rp_ipc_default_path(p->path, sizeof(p->path))) {
			srv.nports = 0;
			pthread_mutex_unlock(&ipc_lock);
			rp_set_error("the default diagnostic socket path does not fit a Unix socket "
				     "(%d bytes at most): shorten TMPDIR", IPC_PATH_MAX - 1);
			return -ENAMETOOLONG;
		}
	}
	for (i = 0; i < ncfg; i++) {
		struct port *p = &srv.ports[srv.nports++];

		memset(p, 0, sizeof(*p));
		p->fd = -1;
		memcpy(p->path, cfg[i].path, sizeof(p->path));
		p->connect = cfg[i].connect;
		p->suspend = cfg[i].suspend;
		p->backoff_ms = RECONNECT_MIN_MS;
	}
	if (!srv.nports) {
		pthread_mutex_unlock(&ipc_lock);
		rp_set_error("no diagnostic port: no_default_port is set and none is configured");
		return -EINVAL;
	}
	make_cookie();
	srv.stop_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	srv.reap_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (srv.stop_efd < 0 || srv.reap_efd < 0) {
		err = -errno;
		rp_set_error("eventfd: %s", strerror(errno));
		goto fail;
	}
	for (i = 0; i < (size_t)srv.nports; i++) {
		if (srv.ports[i].connect)
			continue;
		err = port_listen(&srv.ports[i]);
		if (err)
			goto fail;
	}
	srv.owner = getpid();
	srv.state = SRV_RUNNING;
	err = rp_thread_start(&srv.accept_th, "rp-ipc", accept_main, NULL);
	if (err) {
		srv.state = SRV_IDLE;
		rp_set_error("cannot start the IPC thread: %s", strerror(-err));
		goto fail;
	}

	/* suspend ports: wait until each saw a ResumeRuntime (or stop) */
	notice = rp_clock_mono_ns() + SUSPEND_NOTICE_MS * 1000000ull;
	srv.waiters++;
	while (srv.state == SRV_RUNNING && any_suspended()) {
		struct timespec ts;

		deadline_ts(&ts, notice);
		if (pthread_cond_timedwait(&ipc_cond, &ipc_lock, &ts) == ETIMEDOUT &&
		    notice != UINT64_MAX) {
			fprintf(stderr,
				"ringpipe: waiting for a diagnostics client to send ResumeRuntime on a "
				"suspend port (see DOTNET_DiagnosticPorts)\n");
			notice = UINT64_MAX;
		}
	}
	srv.waiters--;
	err = srv.state == SRV_RUNNING ? 0 : -ECANCELED;
	if (err)
		rp_set_error("the diagnostics IPC server was stopped before ResumeRuntime");
	pthread_cond_broadcast(&ipc_cond);
	pthread_mutex_unlock(&ipc_lock);
	return err;

fail:
	teardown_ports();
	pthread_mutex_unlock(&ipc_lock);
	return err;
}

static bool conns_busy(void)
{
	struct conn *c;

	for (c = srv.conns; c; c = c->next)
		if (!c->done)
			return true;
	return false;
}

RP_API void rp_ipc_server_stop(void)
{
	struct conn *list, *c;
	struct timespec ts;

	pthread_once(&ipc_once, ipc_init_once);
	pthread_mutex_lock(&ipc_lock);
	while (srv.state == SRV_STOPPING)	/* another thread is stopping it */
		pthread_cond_wait(&ipc_cond, &ipc_lock);
	if (srv.state != SRV_RUNNING) {
		pthread_mutex_unlock(&ipc_lock);
		return;
	}
	srv.state = SRV_STOPPING;
	efd_signal(srv.stop_efd);
	pthread_cond_broadcast(&ipc_cond);
	while (srv.waiters)
		pthread_cond_wait(&ipc_cond, &ipc_lock);
	pthread_mutex_unlock(&ipc_lock);

	pthread_join(srv.accept_th, NULL);

	/* connection threads see the stop eventfd; sessions flush and end */
	pthread_mutex_lock(&ipc_lock);
	deadline_ts(&ts, rp_clock_mono_ns() + (uint64_t)rp_ipc_stop_grace_ms * 1000000ull);
	while (conns_busy()) {
		if (pthread_cond_timedwait(&ipc_cond, &ipc_lock, &ts) == ETIMEDOUT) {
			/* a reader that stopped reading: make the drainer's writes fail */
			for (c = srv.conns; c; c = c->next)
				if (!c->done && c->fd >= 0)
					shutdown(c->fd, SHUT_RDWR);
			break;
		}
	}
	while (conns_busy())
		pthread_cond_wait(&ipc_cond, &ipc_lock);
	list = srv.conns;
	srv.conns = NULL;
	srv.nconns = 0;
	pthread_mutex_unlock(&ipc_lock);
	while ((c = list)) {
		list = c->next;
		pthread_join(c->th, NULL);
		conn_free(c);
	}

	pthread_mutex_lock(&ipc_lock);
	teardown_ports();
	srv.state = SRV_IDLE;
	pthread_cond_broadcast(&ipc_cond);
	pthread_mutex_unlock(&ipc_lock);
}
