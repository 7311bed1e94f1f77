/* SPDX-License-Identifier: MIT */
/*
 * io_uring output sink for the nettrace writer (internal API).
 *
 * The sink copies whatever the writer hands it into a few preallocated
 * buffers and writes a buffer only when it is full, so every write the
 * kernel sees is at least one buffer (>= 64 KiB) except the partial buffer
 * that rp_uring_sink_flush() pushes out.  Buffer size matters far more than
 * the syscall API (bench_sink, Documentation/performance.md), and one small
 * write per submit+wait through io_uring is slower than write(2) (liburing
 * issue 912).
 *
 *   regular file / block device  IORING_OP_WRITE_FIXED from registered
 *                                buffers at offsets the sink tracks (from
 *                                the fd's offset at creation), up to
 *                                nr_bufs writes in flight
 *   socket                       IORING_OP_SEND, MSG_NOSIGNAL, one in flight
 *   tty, char device, O_APPEND   IORING_OP_WRITE_FIXED at offset -1, one
 *                                in flight (stream order is exact)
 *   pipe / FIFO                  always write(2), with SIGPIPE blocked in
 *                                the calling thread (see uring_sink.c)
 *
 * A peer that went away comes back as -EPIPE / -ECONNRESET, never as a
 * SIGPIPE: sends carry MSG_NOSIGNAL, and a SIGPIPE that a write to a FIFO
 * raises is consumed before the signal mask is restored.
 *
 * Fallback: when io_uring cannot be used (io_uring_setup fails with ENOSYS,
 * EPERM under kernel.io_uring_disabled, ENOMEM from memlock limits, or
 * buffer registration fails) the sink writes the same full buffers
 * synchronously with write(2) / send(MSG_NOSIGNAL), and says why once per
 * process on stderr.  RINGPIPE_IO=uring|write overrides the choice (and
 * opts.force_write); with "uring" a failure to set up io_uring is an error
 * rather than a fallback.  Any other non-empty value is rejected (EINVAL).
 *
 * Errors are sticky: after the first failed write every call returns it.
 * After a flush on a regular file the fd's offset is at the end of what
 * was written, as if write(2) had been used.
 *
 * Not thread-safe: one thread (the session drainer) drives a sink.
 */
#ifndef RP_URING_SINK_H
#define RP_URING_SINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <liburing.h>

#include "nettrace/nettrace.h"

#define RP_URING_SINK_DEFAULT_BUF	(256u * 1024)
#define RP_URING_SINK_MIN_BUF		(64u * 1024)
#define RP_URING_SINK_MAX_BUF		(64u * 1024 * 1024)
#define RP_URING_SINK_DEFAULT_NBUFS	4u
#define RP_URING_SINK_MAX_NBUFS		64u

struct rp_uring_sink_opts {
	size_t sz;		/* sizeof(struct rp_uring_sink_opts) */
	size_t buf_size;	/* bytes per buffer; 0: 256 KiB; 64 KiB .. 64 MiB */
	unsigned int nr_bufs;	/* 0: 4; at most 64 (write(2) mode uses one) */
	bool force_write;	/* use write(2) even if io_uring works */
	bool is_socket;		/* treat fd as a socket (also detected by fstat) */
};
#define RP_URING_SINK_OPTS_LAST_FIELD is_socket

struct rp_uring_sink_stats {
	uint64_t bytes;		/* bytes the kernel accepted */
	uint64_t writes;	/* buffers submitted (not counting resubmissions) */
	uint64_t partial_writes; /* of those, partial buffers pushed by a flush */
	uint64_t resubmits;	/* remainders of short writes, EINTR/EAGAIN retries */
	uint64_t max_write;	/* largest buffer submitted */
	uint64_t min_write;	/* smallest full buffer submitted (0: none yet) */
	uint64_t min_any_write;	/* smallest buffer submitted, partial ones included */
	uint64_t last_write;	/* size of the most recently submitted buffer */
};

struct us_buf;

/*
 * Only `base` is for callers: give &s->base to nt_writer_new().  The rest is
 * private to uring_sink.c (here so that `base` is reachable without a call).
 */
struct rp_uring_sink {
	struct nt_sink base;		/* must stay first */
	int fd;
	int err;			/* sticky, negative errno */
	bool uring;			/* io_uring mode (else write(2)) */
	bool sock;			/* send(MSG_NOSIGNAL) / IORING_OP_SEND */
	bool fifo;			/* write with SIGPIPE blocked */
	bool stream;			/* offset -1, one write in flight */
	size_t buf_size;
	unsigned int nbufs;
	unsigned int cur;		/* buffer being filled */
	unsigned int inflight;
	unsigned int *pending;		/* stream mode: full buffers, FIFO */
	unsigned int pend_head, pend_len;
	struct us_buf *bufs;
	void *mem;			/* one mapping for every buffer */
	size_t mem_len;
	uint64_t off;			/* file mode: offset of the next buffer */
	struct rp_uring_sink_stats st;
	struct io_uring ring;
};

/*
 * A sink writing to fd (not owned: the caller closes it). opts may be NULL.
 * NULL with errno set on failure.
 */
struct rp_uring_sink *rp_uring_sink_new(int fd, const struct rp_uring_sink_opts *opts);
/* Writes nothing: flush first. Waits for (after cancelling) any write still
 * in flight, then releases the ring and the buffers. Accepts NULL. */
void rp_uring_sink_free(struct rp_uring_sink *s);
struct nt_sink *rp_uring_sink_base(struct rp_uring_sink *s);
/* Takes the completions that are ready, without waiting (the stats count
 * them); 0 or the sink's error. */
int rp_uring_sink_reap(struct rp_uring_sink *s);
/* Submits the partial buffer and waits for every write; 0 or the first error. */
int rp_uring_sink_flush(struct rp_uring_sink *s);
/* "io_uring" or "write(2)". */
const char *rp_uring_sink_mode(const struct rp_uring_sink *s);
/* The sticky error (0 when fine). */
int rp_uring_sink_error(const struct rp_uring_sink *s);
void rp_uring_sink_stats(const struct rp_uring_sink *s, struct rp_uring_sink_stats *st);

#endif /* RP_URING_SINK_H */
