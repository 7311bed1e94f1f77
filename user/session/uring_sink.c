// SPDX-License-Identifier: MIT
/*
 * io_uring output sink: see uring_sink.h for what it promises.
 *
 * Buffers. nbufs buffers of buf_size bytes live in one anonymous mapping
 * and, except for sockets, are registered with the ring so writes can use
 * IORING_OP_WRITE_FIXED (no page pinning per request). Each buffer is
 * FREE, FILLING (exactly one: s->cur), PENDING (full, stream mode only,
 * queued in s->pending in fill order) or INFLIGHT. writev() copies into
 * the FILLING buffer; when it is full it is pushed and another FREE buffer
 * is taken, waiting for a completion when there is none.
 *
 * Order. In file mode every buffer carries its own offset, so writes may
 * complete in any order. In stream mode (sockets, pipes, ttys, O_APPEND)
 * at most one write is in flight and buffers go out in fill order; a short
 * write is resubmitted before anything else, so bytes never reorder.
 * IOSQE_IO_LINK would not help here: a link only spans one submission and
 * a short write breaks it.
 *
 * FIFOs are always written with write(2) under a SIGPIPE guard: an
 * io_uring retry of a pipe write can run as task work on return from any
 * syscall of this thread, outside any guard, and raise SIGPIPE there.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomics.h"
#include "uring_sink.h"

_Static_assert(offsetof(struct rp_uring_sink, base) == 0,
	       "nt_writer calls back with &s->base; us_writev casts it back");

enum { US_FREE, US_FILLING, US_PENDING, US_INFLIGHT };

/* user_data of the cancel request sent by rp_uring_sink_free() */
#define US_TAG_CANCEL (~0ull)

struct us_buf {
	char *data;
	size_t len;		/* bytes in the buffer */
	size_t done;		/* of those, bytes the kernel accepted */
	uint64_t off;		/* file mode: file offset of data[0] */
	int state;
};

enum us_env { US_ENV_NONE, US_ENV_URING, US_ENV_WRITE };

static int us_fallback_logged;

static void us_log_fallback(const char *what, int err)
{
	if (rp_xchg_relaxed(&us_fallback_logged, 1))	/* the first caller logs */
		return;
	fprintf(stderr, "ringpipe: io_uring unavailable (%s: %s); writing with write(2)\n",
		what, strerror(-err));
}

static int us_env_mode(enum us_env *mode)
{
	const char *v = getenv("RINGPIPE_IO");

	*mode = US_ENV_NONE;
	if (!v || !*v)
		return 0;
	if (!strcmp(v, "uring")) {
		*mode = US_ENV_URING;
		return 0;
	}
	if (!strcmp(v, "write")) {
		*mode = US_ENV_WRITE;
		return 0;
	}
	fprintf(stderr, "ringpipe: RINGPIPE_IO='%s' is not valid: use 'uring' or 'write' "
		"(or leave it unset to pick io_uring when it works)\n", v);
	return -EINVAL;
}

static int us_set_err(struct rp_uring_sink *s, int err)
{
	if (!s->err)
		s->err = err;
	return s->err;
}

/* Blocks until fd is writable (after -EAGAIN on a non-blocking fd). */
static void us_wait_writable(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLOUT };

	while (poll(&p, 1, -1) < 0 && errno == EINTR)
		;
}

/*
 * write(2) to a FIFO with SIGPIPE blocked in this thread; a SIGPIPE the
 * write raised (and only that one) is consumed before the mask is restored.
 */
static ssize_t us_fifo_write(int fd, const void *p, size_t n)
{
	static const struct timespec zero;
	sigset_t pipe_set, old, pending;
	bool was_pending;
	ssize_t r;
	int e;

	sigemptyset(&pipe_set);
	sigaddset(&pipe_set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
	was_pending = !sigpending(&pending) && sigismember(&pending, SIGPIPE);
	r = write(fd, p, n);
	e = errno;
	/* the reader going away mid-write gives a short count and a SIGPIPE */
	if (!was_pending && ((r < 0 && e == EPIPE) || (r >= 0 && (size_t)r < n)) &&
	    !sigpending(&pending) && sigismember(&pending, SIGPIPE))
		while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR)
			;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	errno = e;
	return r;
}

static void us_note_write(struct rp_uring_sink *s, size_t len, bool partial)
{
	struct rp_uring_sink_stats *st = &s->st;

	st->writes++;
	if (partial)
		st->partial_writes++;
	else if (!st->min_write || len < st->min_write)
		st->min_write = len;
	if (!st->min_any_write || len < st->min_any_write)
		st->min_any_write = len;
	if (len > st->max_write)
		st->max_write = len;
	st->last_write = len;
}

/* ---- write(2) mode ---------------------------------------------------- */

static int us_sync_write(struct rp_uring_sink *s, struct us_buf *b)
{
	int err = 0;

	while (b->done < b->len) {
		const char *p = b->data + b->done;
		size_t n = b->len - b->done;
		ssize_t r;

		if (s->sock)
			r = send(s->fd, p, n, MSG_NOSIGNAL);
		else if (s->fifo)
			r = us_fifo_write(s->fd, p, n);
		else
			r = write(s->fd, p, n);
		if (r < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				us_wait_writable(s->fd);
			} else if (errno != EINTR) {
				err = -errno;
				break;
			}
			s->st.resubmits++;
			continue;
		}
		if (r == 0) {
			err = -EIO;	/* no progress on a non-empty write */
			break;
		}
		b->done += (size_t)r;
		s->st.bytes += (uint64_t)r;
		if (b->done < b->len)
			s->st.resubmits++;
	}
	b->len = b->done = 0;
	return err ? us_set_err(s, err) : 0;
}

/* ---- io_uring mode ---------------------------------------------------- */

static int us_ring_init(struct rp_uring_sink *s, const char **what)
{
	struct io_uring_params p;
	struct iovec *iov;
	unsigned int i;
	int err;

	/* one SQE per buffer, plus the cancel in rp_uring_sink_free() */
	memset(&p, 0, sizeof(p));
	p.flags = IORING_SETUP_COOP_TASKRUN;
	err = io_uring_queue_init_params(s->nbufs + 1, &s->ring, &p);
	if (err == -EINVAL) {	/* before 5.19: no COOP_TASKRUN */
		memset(&p, 0, sizeof(p));
		err = io_uring_queue_init_params(s->nbufs + 1, &s->ring, &p);
	}
	if (err) {
		*what = "io_uring_queue_init";
		return err;
	}
	if (s->sock)		/* IORING_OP_SEND takes plain buffers */
		return 0;
	iov = calloc(s->nbufs, sizeof(*iov));
	if (!iov) {
		err = -ENOMEM;
	} else {
		for (i = 0; i < s->nbufs; i++) {
			iov[i].iov_base = s->bufs[i].data;
			iov[i].iov_len = s->buf_size;
		}
		err = io_uring_register_buffers(&s->ring, iov, s->nbufs);
		free(iov);
	}
	if (err) {
		io_uring_queue_exit(&s->ring);
		*what = "io_uring_register_buffers";
	}
	return err;
}

static void us_release(struct rp_uring_sink *s, struct us_buf *b)
{
	b->state = US_FREE;
	b->len = b->done = 0;
}

/* Queues the unwritten rest of buffer idx and submits it. */
static int us_submit(struct rp_uring_sink *s, unsigned int idx)
{
	struct us_buf *b = &s->bufs[idx];
	struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);
	const char *p = b->data + b->done;
	unsigned int n = (unsigned int)(b->len - b->done);
	int ret;

	if (!sqe) {	/* cannot happen: at most nbufs + 1 requests exist */
		us_release(s, b);
		return us_set_err(s, -EBUSY);
	}
	if (s->sock)
		io_uring_prep_send(sqe, s->fd, p, n, MSG_NOSIGNAL | MSG_WAITALL);
	else
		io_uring_prep_write_fixed(sqe, s->fd, p, n,
					  s->stream ? (uint64_t)-1 : b->off + b->done, (int)idx);
	sqe->user_data = idx;
	b->state = US_INFLIGHT;
	s->inflight++;
	/* A failed submit leaves the SQE queued; the next wait submits it. */
	do
		ret = io_uring_submit(&s->ring);
	while (ret == -EINTR);
	return ret < 0 ? us_set_err(s, ret) : 0;
}

/* Stream mode: the oldest full buffer goes out when nothing is in flight. */
static void us_stream_next(struct rp_uring_sink *s)
{
	unsigned int idx;

	while (s->pend_len && (s->err || !s->inflight)) {
		idx = s->pending[s->pend_head];
		s->pend_head = (s->pend_head + 1) % s->nbufs;
		s->pend_len--;
		if (s->err)	/* the stream is broken: drop what is queued */
			us_release(s, &s->bufs[idx]);
		else
			us_submit(s, idx);
	}
}

static void us_complete(struct rp_uring_sink *s, uint64_t tag, int res)
{
	struct us_buf *b;

	if (tag >= s->nbufs)	/* the cancel request itself */
		return;
	b = &s->bufs[tag];
	s->inflight--;
	if (res == -EINTR || res == -EAGAIN) {
		if (!s->err) {
			if (res == -EAGAIN)
				us_wait_writable(s->fd);
			s->st.resubmits++;
			us_submit(s, (unsigned int)tag);
			return;
		}
	} else if (res < 0) {
		us_set_err(s, res);
	} else if (res == 0) {
		us_set_err(s, -EIO);	/* no progress on a non-empty write */
	} else {
		b->done += (size_t)res;
		s->st.bytes += (uint64_t)res;
		if (b->done < b->len && !s->err) {
			s->st.resubmits++;
			us_submit(s, (unsigned int)tag);
			return;
		}
	}
	us_release(s, b);
	if (s->stream)
		us_stream_next(s);
}

/* Handles one completion, waiting for it if none is ready. A negative
 * return means the ring itself failed (also made the sticky error). */
static int us_reap(struct rp_uring_sink *s)
{
	struct io_uring_cqe *cqe;
	uint64_t tag;
	int ret, res;

	while (io_uring_peek_cqe(&s->ring, &cqe)) {
		ret = io_uring_submit_and_wait(&s->ring, 1);
		if (ret < 0 && ret != -EINTR && ret != -ETIME)
			return us_set_err(s, ret);
	}
	tag = cqe->user_data;
	res = cqe->res;
	io_uring_cqe_seen(&s->ring, cqe);
	us_complete(s, tag, res);
	return 0;
}

int rp_uring_sink_reap(struct rp_uring_sink *s)
{
	struct io_uring_cqe *cqe;

	if (!s || !s->uring)
		return s ? s->err : 0;
	while (s->inflight && !io_uring_peek_cqe(&s->ring, &cqe)) {
		uint64_t tag = cqe->user_data;
		int res = cqe->res;

		io_uring_cqe_seen(&s->ring, cqe);
		us_complete(s, tag, res);
	}
	return s->err;
}

/* Makes s->cur a FREE buffer, waiting for completions if needed. */
static int us_acquire(struct rp_uring_sink *s)
{
	unsigned int i, k;

	for (;;) {
		for (k = 0; k < s->nbufs; k++) {
			i = (s->cur + 1 + k) % s->nbufs;
			if (s->bufs[i].state == US_FREE) {
				s->cur = i;
				s->bufs[i].state = US_FILLING;
				return s->err;
			}
		}
		if (!s->inflight)	/* nothing will ever free one */
			return us_set_err(s, -EIO);
		if (us_reap(s) < 0)
			return s->err;
	}
}

/* ---- both modes ------------------------------------------------------- */

/* Writes out (or queues) the FILLING buffer and takes the next one. */
static int us_push(struct rp_uring_sink *s, bool partial)
{
	struct us_buf *b = &s->bufs[s->cur];

	us_note_write(s, b->len, partial);
	if (!s->uring)
		return us_sync_write(s, b);
	b->done = 0;
	b->off = s->off;
	s->off += b->len;
	if (s->stream) {
		b->state = US_PENDING;
		s->pending[(s->pend_head + s->pend_len) % s->nbufs] = s->cur;
		s->pend_len++;
		us_stream_next(s);
	} else {
		us_submit(s, s->cur);
	}
	return us_acquire(s);
}

static int us_writev(struct nt_sink *sink, const struct iovec *iov, int n)
{
	struct rp_uring_sink *s = (struct rp_uring_sink *)sink;
	int i;

	if (s->err)
		return s->err;
	if (n < 0 || (n && !iov))
		return -EINVAL;
	for (i = 0; i < n; i++) {
		const char *p = iov[i].iov_base;
		size_t left = iov[i].iov_len;

		while (left) {
			struct us_buf *b = &s->bufs[s->cur];
			size_t k = s->buf_size - b->len;

			if (k > left)
				k = left;
			memcpy(b->data + b->len, p, k);
			b->len += k;
			p += k;
			left -= k;
			if (b->len == s->buf_size && us_push(s, false))
				return s->err;
		}
	}
	return 0;
}

int rp_uring_sink_flush(struct rp_uring_sink *s)
{
	if (!s)
		return -EINVAL;
	if (!s->err && s->bufs[s->cur].len)
		us_push(s, true);
	if (!s->uring)
		return s->err;
	while (s->inflight)	/* nothing is PENDING without a write in flight */
		if (us_reap(s) < 0)
			break;
	/* leave the fd's offset where write(2) would have left it */
	if (!s->err && !s->stream && lseek(s->fd, (off_t)s->off, SEEK_SET) < 0)
		us_set_err(s, -errno);
	return s->err;
}

void rp_uring_sink_free(struct rp_uring_sink *s)
{
	struct io_uring_sqe *sqe;

	if (!s)
		return;
	if (s->uring) {
		/* Kernel writes may still read the buffers: cancel what can be
		 * cancelled, and wait for everything to finish. */
		if (s->inflight) {
			us_set_err(s, -ECANCELED);
			sqe = io_uring_get_sqe(&s->ring);
			if (sqe) {
				io_uring_prep_cancel64(sqe, 0, IORING_ASYNC_CANCEL_ANY);
				sqe->user_data = US_TAG_CANCEL;
			}
			while (s->inflight)
				if (us_reap(s) < 0)
					break;
		}
		io_uring_queue_exit(&s->ring);
	}
	if (s->mem)
		munmap(s->mem, s->mem_len);
	free(s->bufs);
	free(s->pending);
	free(s);
}

struct nt_sink *rp_uring_sink_base(struct rp_uring_sink *s)
{
	return s ? &s->base : NULL;
}

const char *rp_uring_sink_mode(const struct rp_uring_sink *s)
{
	return s && s->uring ? "io_uring" : "write(2)";
}

int rp_uring_sink_error(const struct rp_uring_sink *s)
{
	return s ? s->err : -EINVAL;
}

void rp_uring_sink_stats(const struct rp_uring_sink *s, struct rp_uring_sink_stats *st)
{
	if (s)
		*st = s->st;
	else
		memset(st, 0, sizeof(*st));
}

/* Copies the caller's opts (of any older, smaller size) over the defaults. */
static int us_opts(const struct rp_uring_sink_opts *in, struct rp_uring_sink_opts *o)
{
	size_t i;

	memset(o, 0, sizeof(*o));
	if (in) {
		if (in->sz < sizeof(size_t))
			return -EINVAL;
		/* a newer caller's extra fields must be zero: we cannot honour them */
		for (i = sizeof(*o); i < in->sz; i++)
			if (((const unsigned char *)in)[i])
				return -EINVAL;
		memcpy(o, in, in->sz < sizeof(*o) ? in->sz : sizeof(*o));
	}
	o->sz = sizeof(*o);
	if (!o->buf_size)
		o->buf_size = RP_URING_SINK_DEFAULT_BUF;
	if (!o->nr_bufs)
		o->nr_bufs = RP_URING_SINK_DEFAULT_NBUFS;
	if (o->buf_size < RP_URING_SINK_MIN_BUF || o->buf_size > RP_URING_SINK_MAX_BUF ||
	    o->nr_bufs > RP_URING_SINK_MAX_NBUFS)
		return -EINVAL;
	return 0;
}

struct rp_uring_sink *rp_uring_sink_new(int fd, const struct rp_uring_sink_opts *opts)
{
	struct rp_uring_sink_opts o;
	struct rp_uring_sink *s = NULL;
	enum us_env env;
	const char *what = NULL;
	struct stat stb;
	bool want_uring;
	unsigned int i;
	off_t pos = -1;
	int err, fl;

	err = us_opts(opts, &o);
	if (err)
		goto err_out;
	err = us_env_mode(&env);
	if (err)
		goto err_out;
	if (fd < 0) {
		err = -EBADF;
		goto err_out;
	}
	if (fstat(fd, &stb) < 0 || (fl = fcntl(fd, F_GETFL)) < 0) {
		err = -errno;
		goto err_out;
	}
	s = calloc(1, sizeof(*s));
	if (!s) {
		err = -ENOMEM;
		goto err_out;
	}
	s->base.writev = us_writev;
	s->fd = fd;
	s->sock = o.is_socket || S_ISSOCK(stb.st_mode);
	s->fifo = !s->sock && S_ISFIFO(stb.st_mode);
	if (!s->sock && (S_ISREG(stb.st_mode) || S_ISBLK(stb.st_mode)) && !(fl & O_APPEND))
		pos = lseek(fd, 0, SEEK_CUR);
	s->stream = pos < 0;
	s->off = pos < 0 ? 0 : (uint64_t)pos;
	want_uring = env == US_ENV_URING || (env == US_ENV_NONE && !o.force_write);
	want_uring = want_uring && !s->fifo;
	s->buf_size = o.buf_size;
	s->nbufs = want_uring ? o.nr_bufs : 1;

	s->mem_len = s->buf_size * s->nbufs;
	s->mem = mmap(NULL, s->mem_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (s->mem == MAP_FAILED) {
		s->mem = NULL;
		err = -errno;
		goto err_out;
	}
	s->bufs = calloc(s->nbufs, sizeof(*s->bufs));
	s->pending = calloc(s->nbufs, sizeof(*s->pending));
	if (!s->bufs || !s->pending) {
		err = -ENOMEM;
		goto err_out;
	}
	for (i = 0; i < s->nbufs; i++)
		s->bufs[i].data = (char *)s->mem + (size_t)i * s->buf_size;

	if (want_uring) {
		err = us_ring_init(s, &what);
		if (!err) {
			s->uring = true;
		} else if (env == US_ENV_URING) {
			fprintf(stderr, "ringpipe: RINGPIPE_IO=uring but io_uring is unavailable "
				"(%s: %s)\n", what, strerror(-err));
			goto err_out;
		} else {
			us_log_fallback(what, err);
			s->nbufs = 1;	/* write(2) needs only one; the rest stay untouched */
		}
	}
	s->cur = 0;
	s->bufs[0].state = US_FILLING;
	return s;

err_out:
	rp_uring_sink_free(s);
	errno = -err;
	return NULL;
}
