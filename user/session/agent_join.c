// SPDX-License-Identifier: MIT
/*
 * Joining the host agent (Documentation/agent.md). From the library's
 * constructor on, a background thread looks for the agent's socket
 * (RINGPIPE_AGENT, else /run/ringpipe/agent.sock; RINGPIPE_AGENT=0 turns
 * this off), retrying with backoff while there is none: nobody waits for it,
 * and a process without an agent pays one stat() a second. Connected, it
 * starts a session with the host's configuration whose rings the agent
 * drains (rp_session_start_external()): the events are described to the
 * agent before any record can name them, and the memfd goes over the socket.
 *
 * The thread also stands in for the drainer of a Block session: parked
 * producers wait in this process's queue (park.c), so when the agent hands
 * ring space back (it bumps space_freed) the thread admits them. Whether
 * the agent lives is what the kernel says: its end of the socket hangs up
 * when it exits, and its pidfd (where its pid is visible here) becomes
 * readable. A stopped, frozen or slow agent is alive, and the waiters wait
 * for it. Once it is gone the thread aborts the queue (waiters drop,
 * counted as aborted, and nobody parks again), ends the session, and
 * looks for the next agent.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "agent_wire.h"
#include "atomics.h"
#include "clock.h"
#include "config.h"
#include "futex.h"
#include "session.h"
#include "thread.h"

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 1000
#define ANSWER_MS 2000		/* the agent answers HELLO and STOPPING within this */
#define DESCRIBE_MS 200		/* a describe waits this long for room, at most */
#define IDLE_POLL_MS 200
#define WATCH_MS 2		/* a Block watcher's sleep while producers wait */

static struct {
	pthread_once_t once;
	pthread_t thread;
	bool started;
	bool disabled;
	int quit_fd;		/* eventfd: the process is exiting */
	int sock;		/* the connection, or -1 (read by describe()) */
	int broken;		/* atomic: a describe failed, end the session */
	struct rp_session *session;
	uint64_t space_seen;
} join = { .once = PTHREAD_ONCE_INIT, .quit_fd = -1, .sock = -1 };

static void agent_path(char *out, size_t len)
{
	const char *v = getenv("RINGPIPE_AGENT");

	snprintf(out, len, "%s", v && *v ? v : RP_AGENT_DEFAULT_SOCKET);
}

/* Sleeps ms, or less when the process exits: true when it does. */
static bool wait_quit(int ms)
{
	struct pollfd p = { .fd = join.quit_fd, .events = POLLIN };

	return poll(&p, 1, ms) > 0;
}

static int describe(void *ctx, const struct rp_event *ev)
{
	struct bytebuf b = { 0 };
	struct rp_am_meta m = { 0 };
	int sock = rp_load_relaxed(&join.sock), err;

	(void)ctx;
	if (sock < 0)
		return -ENOTCONN;
	bb_append(&b, &m, sizeof(m));
	err = rp_agent_desc_encode(&ev->desc, &b);
	if (!err) {
		struct rp_am_meta *mp = (struct rp_am_meta *)b.p;

		mp->h = rp_agent_hdr(RP_AM_META, (uint32_t)b.len, 0);
		mp->index = ev->index;
		mp->desc_len = (uint32_t)(b.len - sizeof(m));
		err = rp_agent_send(sock, b.p, b.len, -1, DESCRIBE_MS);
	}
	bb_free(&b);
	if (err)
		rp_store_relaxed(&join.broken, 1);
	return err;
}

static int ready(void *ctx, struct rp_session *s)
{
	struct rp_am_ready r = { .h = rp_agent_hdr(RP_AM_READY, sizeof(r), 0) };

	(void)ctx;
	r.sync_ticks = s->sync_ticks;
	r.sync_unix_ns = s->sync_unix_ns;
	r.tick_freq = rp_clock_frequency();
	r.session_id = rp_shm_header(s->shm)->session_id;
	{
		int fds[2] = { rp_shm_fd(s->shm), rp_shm_counts_fd(s->shm) };

		return rp_agent_send_fds(join.sock, &r, sizeof(r), fds, 2, ANSWER_MS);
	}
}

/* Every writer is out: the agent gets the last numbers and drains the rest. */
static int stop(void *ctx, struct rp_session *s)
{
	uint8_t buf[256];
	size_t i = 0;
	uint64_t end;

	(void)ctx;
	if (join.sock < 0)
		return 0;
	pthread_mutex_lock(&s->final_lock);
	do {
		size_t n = s->nfinals - i < RP_AM_FINALS_PER_MSG ? s->nfinals - i : RP_AM_FINALS_PER_MSG;
		size_t len = sizeof(struct rp_am_finals) + n * sizeof(struct rp_am_final);
		struct rp_am_finals *f = malloc(len);
		size_t k;

		if (!f)
			break;
		f->h = rp_agent_hdr(RP_AM_FINALS, (uint32_t)len, 0);
		f->n = (uint32_t)n;
		f->__pad = 0;
		for (k = 0; k < n; k++) {
			struct rp_am_final *e = (struct rp_am_final *)(f + 1) + k;

			e->tid = s->finals[i + k].tid;
			e->seq = s->finals[i + k].seq;
		}
		i += n;
		if (rp_agent_send(join.sock, f, len, -1, ANSWER_MS)) {
			free(f);
			pthread_mutex_unlock(&s->final_lock);
			return 0;	/* the agent is gone: nothing to wait for */
		}
		free(f);
	} while (i < s->nfinals);
	pthread_mutex_unlock(&s->final_lock);
	{
		struct rp_agent_hdr h = rp_agent_hdr(RP_AM_STOPPING, sizeof(h), 0);

		if (rp_agent_send(join.sock, &h, sizeof(h), -1, ANSWER_MS))
			return 0;
	}
	/* its drainer may be asleep: the kick reaches it across processes */
	rp_drainer_kick(s);
	end = rp_clock_mono_ns() + ANSWER_MS * 1000000ull;
	for (;;) {
		uint64_t now = rp_clock_mono_ns();
		ssize_t n;

		if (now >= end)
			break;
		n = rp_agent_recv(join.sock, buf, sizeof(buf), NULL, (int)((end - now) / 1000000ull) + 1);
		if (n <= 0 && n != -EMSGSIZE)
			break;
		if (n >= (ssize_t)sizeof(struct rp_agent_hdr) && !rp_agent_hdr_check(buf, (size_t)n) &&
		    ((struct rp_agent_hdr *)buf)->type == RP_AM_DRAINED)
			break;
	}
	return 0;
}

static const struct rp_external_drainer agent_drainer = {
	.describe = describe,
	.ready = ready,
	.stop = stop,
};

/* Admits Block waiters as far as the agent handed space back. */
static void admit(struct rp_session *s)
{
	uint32_t i, n = rp_shm_nr_rings(s->shm);

	for (i = 0; i < n; i++) {
		struct rp_ring *r = rp_shm_ring(s->shm, i);
		/* hints written by the agent and by producers: the worst a
		 * scribbled one does is admit a waiter that finds no room
		 * and queues again */
		uint64_t prod = rp_load_relaxed(&r->hdr->producer_pos);
		uint64_t cons = rp_load_acquire(&r->hdr->consumer_pos);
		uint64_t used = prod - cons;

		rp_block_space_freed(s->slot, used < r->size ? r->size - used : 0);
	}
}

static bool block_waiting(const struct rp_session *s)
{
	const struct rp_block_queue *q = &rp_block_queues[s->slot];

	return rp_load_relaxed(&q->tail) != rp_load_relaxed(&q->admit) ||
	       rp_load_relaxed(&q->room_waiters);
}

/*
 * A Block session: sleeps on space_freed until the agent frees space (while
 * this process has waiters) or a producer starts to wait (while it has
 * none), at most ms, then admits as far as the rings have room.
 */
static void watch_space(struct rp_session *s, int ms)
{
	struct rp_shm_session *h = rp_shm_header(s->shm);
	bool waiting = block_waiting(s);
	uint32_t seen;

	/* the other half of the pairs in drain.c's release() and park.c: the
	 * flag is visible before the looks at space_freed and at the queue,
	 * so a bump or a new waiter after them finds the flag and wakes this
	 * thread, and one before them is seen here */
	rp_store_relaxed(&h->space_watch, waiting ? RP_SPACE_WATCH_FREED : RP_SPACE_WATCH_PARKED);
	rp_smp_mb();
	seen = rp_load_relaxed(&h->space_freed);
	if (seen == join.space_seen && waiting == block_waiting(s))
		rp_futex_wait(&h->space_freed, seen, (uint64_t)ms * 1000000ull);
	join.space_seen = rp_load_relaxed(&h->space_freed);
	if (block_waiting(s))
		admit(s);
}

static int start_session(const struct rp_am_config *c, const char *spec)
{
	struct rp_session_opts so = { .sz = sizeof(so) };
	struct rp_provider_config *prov = NULL;
	uint32_t nprov = 0;
	char err[256];

	/* an agent that traces only .NET processes names no provider: the
	 * session then collects nothing, and the process stays joined */
	if (*spec && rp_providers_parse(spec, &prov, &nprov, err, sizeof(err))) {
		rp_set_error("the agent's providers: %s", err);
		return -EINVAL;
	}
	so.format = (int)c->format;
	so.buffering = (int)c->buffering;
	so.buffer_bytes = c->buffer_bytes;
	so.block_timeout_ms = c->block_timeout_ms;
	so.providers = prov;
	so.nproviders = nprov;
	so.fd = -1;
	rp_store_relaxed(&join.broken, 0);
	join.space_seen = 0;
	join.session = rp_session_start_external(&so, &agent_drainer);
	rp_providers_free(prov, nprov);
	return join.session ? 0 : -errno;
}

/*
 * A pidfd of the agent at the other end of sock (SO_PEERCRED's pid, as this
 * process's pid namespace sees it), or -1: an agent whose pid is not
 * visible here (another pid namespace) is watched through its socket only.
 */
static int agent_pidfd(int sock)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);
	long fd;

	if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cr, &len) || cr.pid <= 0)
		return -1;
	fd = syscall(SYS_pidfd_open, cr.pid, 0);
	return fd < 0 ? -1 : (int)fd;
}

/* One connection: 0 when it ended because the process exits. */
static int converse(int sock)
{
	struct rp_am_hello hello = { .h = rp_agent_hdr(RP_AM_HELLO, sizeof(hello), 0) };
	uint8_t *buf = malloc(RP_AGENT_MAX_MSG);
	struct rp_am_config *c = (struct rp_am_config *)buf;
	bool quitting = false, refused = false, gone = false;
	int pidfd = -1;
	ssize_t n;

	if (!buf)
		return -ENOMEM;
	hello.abi_version = RP_ABI_VERSION;
	hello.pid_claimed = (uint32_t)getpid();
	if (rp_agent_send(sock, &hello, sizeof(hello), -1, ANSWER_MS))
		goto out;
	n = rp_agent_recv(sock, buf, RP_AGENT_MAX_MSG - 1, NULL, ANSWER_MS);
	if (n < (ssize_t)sizeof(*c) || rp_agent_hdr_check(buf, (size_t)n) ||
	    c->h.type != RP_AM_CONFIG || c->spec_len != (size_t)n - sizeof(*c)) {
		refused = n > 0;	/* an agent that refuses, or garbage */
		goto out;
	}
	buf[n] = 0;
	rp_store_relaxed(&join.sock, sock);
	if (start_session(c, (const char *)(c + 1))) {
		rp_store_relaxed(&join.sock, -1);
		rp_agent_send_text(sock, RP_AM_REFUSE, rp_last_error(), strlen(rp_last_error()), 100);
		refused = true;
		goto out;
	}
	pidfd = agent_pidfd(sock);
	for (;;) {
		struct rp_session *s = join.session;
		struct pollfd p[3] = { { .fd = sock, .events = POLLIN },
				       { .fd = join.quit_fd, .events = POLLIN },
				       { .fd = pidfd, .events = POLLIN } };
		bool block = rp_slots[s->slot].block;

		/* a Block session sleeps on its rings' word, and looks at the
		 * socket between sleeps; a Drop one only has the socket */
		if (block)
			watch_space(s, block_waiting(s) ? WATCH_MS : IDLE_POLL_MS);
		if (poll(p, pidfd >= 0 ? 3 : 2, block ? 0 : IDLE_POLL_MS) < 0 && errno != EINTR)
			break;
		if (p[1].revents) {
			quitting = true;
			break;
		}
		if (rp_load_relaxed(&join.broken))
			break;
		if (pidfd >= 0 && p[2].revents) {
			/* the agent exited (its socket may live on in a child
			 * that inherited it) */
			rp_store_relaxed(&join.sock, -1);
			gone = true;
			break;
		}
		if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
			int fd;

			n = rp_agent_recv(sock, buf, RP_AGENT_MAX_MSG, &fd, 0);
			if (fd >= 0)
				close(fd);
			if (n == 0 || (n < 0 && n != -ETIMEDOUT && n != -EMSGSIZE)) {
				/* the agent went away: the session cannot
				 * be drained, end it without waiting */
				rp_store_relaxed(&join.sock, -1);
				gone = true;
				break;
			}
			if (n > 0 && !rp_agent_hdr_check(buf, (size_t)n) &&
			    ((struct rp_agent_hdr *)buf)->type == RP_AM_STOP)
				break;
		}
	}
	/* with nobody to drain it, waiters give up now, counted as aborted,
	 * and so does a stopping callback that finds its ring full */
	if (gone)
		rp_block_abort(join.session->slot);
	rp_session_stop(join.session);
	join.session = NULL;
	rp_store_relaxed(&join.sock, -1);
out:
	if (pidfd >= 0)
		close(pidfd);
	free(buf);
	return quitting ? 0 : refused ? -ECONNREFUSED : -ECONNRESET;
}

static void *join_main(void *arg)
{
	int backoff = BACKOFF_MIN_MS;

	(void)arg;
	rp_thread_set_no_park(true);
	for (;;) {
		struct sockaddr_un a = { .sun_family = AF_UNIX };
		struct stat st;
		int sock, err;

		agent_path(a.sun_path, sizeof(a.sun_path));
		if (stat(a.sun_path, &st) || !S_ISSOCK(st.st_mode)) {
			if (wait_quit(backoff))
				break;
			backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
			continue;
		}
		sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		if (sock < 0 || connect(sock, (struct sockaddr *)&a, sizeof(a))) {
			if (sock >= 0)
				close(sock);
			if (wait_quit(backoff))
				break;
			backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
			continue;
		}
		err = converse(sock);
		close(sock);
		if (!err)
			break;
		/* an agent that refused us waits for the next agent's restart;
		 * one that went away may come back at once */
		backoff = err == -ECONNREFUSED ? BACKOFF_MAX_MS : BACKOFF_MIN_MS;
		if (wait_quit(backoff))
			break;
	}
	return NULL;
}

static void join_atexit(void)
{
	uint64_t one = 1;
	struct timespec ts;

	if (!join.started)
		return;
	if (write(join.quit_fd, &one, sizeof(one)) < 0)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 3;
	/* the agent gets the tail and the last numbers; a hung one does not
	 * hold the exit for longer than this */
	if (!pthread_timedjoin_np(join.thread, NULL, &ts))
		join.started = false;
}

static void join_fork_child(void)
{
	/* the thread did not come along; the child stays out (a program it
	 * execs joins by itself) */
	join.started = false;
	join.disabled = true;
	join.session = NULL;
	join.sock = -1;
}

static void join_init(void)
{
	const char *v = getenv("RINGPIPE_AGENT");

	if (join.disabled || (v && (!strcmp(v, "0") || !strcmp(v, "off"))))
		return;
	join.quit_fd = eventfd(0, EFD_CLOEXEC);
	if (join.quit_fd < 0)
		return;
	pthread_atfork(NULL, NULL, join_fork_child);
	if (rp_thread_start(&join.thread, "rp-agent-join", join_main, NULL))
		return;
	join.started = true;
	atexit(join_atexit);
}

void rp_agent_join_start(void)
{
	pthread_once(&join.once, join_init);
}

void rp_agent_join_disable(void)
{
	uint64_t one = 1;

	/* a constructor may have started it already (the library's own
	 * meters are a provider): it ends before it connects anywhere */
	join.disabled = true;
	pthread_once(&join.once, join_init);
	if (!join.started || write(join.quit_fd, &one, sizeof(one)) < 0)
		return;
	pthread_join(join.thread, NULL);
	join.started = false;
}
