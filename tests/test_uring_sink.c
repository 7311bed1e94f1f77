// SPDX-License-Identifier: MIT
/*
 * io_uring output sink: byte-exact output to files, sockets and pipes in
 * both modes, write sizes, errors (sticky, EPIPE without SIGPIPE), the
 * write(2) fallback when io_uring is refused, and RINGPIPE_IO.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#include "helpers.h"
#include "nettrace.h"
#include "tracegen.h"
#include "uring_sink.h"

#define KiB 1024u

/* M_AUTO: no force_write, whatever mode the sink picks (FIFOs: write(2)) */
enum mode { M_URING, M_WRITE, M_AUTO };

static const char *mode_name(enum mode m)
{
	return m == M_URING ? "io_uring" : m == M_WRITE ? "write(2)" : "auto";
}

/* The trace every test writes: 200k events, every event kind, gaps. */
static const struct tracegen_opts gen_opts = {
	.format = NT_FORMAT_V5, .events = 200000, .threads = 4, .gap_every = 997,
	.sp_every = 50000, .seed = 42,
};

static void reference_trace(struct nt_mem_sink *ref, const struct tracegen_opts *o)
{
	struct tracegen_result res;

	nt_mem_sink_init(ref);
	cr_assert_eq(tracegen_write(&ref->base, o, &res), 0);
	cr_assert_eq(res.written, o->events);
	cr_assert_gt(ref->buf.len, 4 * 256 * KiB, "the trace should span many buffers");
}

static void assert_same(const void *got, size_t got_len, const void *want, size_t want_len,
			const char *what)
{
	size_t i, n = got_len < want_len ? got_len : want_len;

	for (i = 0; i < n; i++)
		if (((const uint8_t *)got)[i] != ((const uint8_t *)want)[i])
			break;
	cr_assert(i == n && got_len == want_len,
		  "%s: %zu bytes, want %zu; first difference at offset %zu", what, got_len,
		  want_len, i);
}

static struct rp_uring_sink *new_sink(int fd, enum mode m, size_t buf_size, unsigned int nbufs)
{
	struct rp_uring_sink_opts o = { .sz = sizeof(o), .buf_size = buf_size, .nr_bufs = nbufs,
					.force_write = m == M_WRITE };
	struct rp_uring_sink *s;

	unsetenv("RINGPIPE_IO");
	s = rp_uring_sink_new(fd, &o);
	cr_assert_not_null(s, "rp_uring_sink_new: %s", strerror(errno));
	if (m == M_URING && strcmp(rp_uring_sink_mode(s), "io_uring")) {
		rp_uring_sink_free(s);
		cr_skip_test("io_uring is not usable here (see the message on stderr)");
	}
	if (m != M_AUTO)
		cr_assert_str_eq(rp_uring_sink_mode(s), mode_name(m));
	return s;
}

/* Every buffer submitted is a full one except the single partial flush. */
static void assert_write_sizes(const struct rp_uring_sink *s, size_t buf_size, size_t total)
{
	struct rp_uring_sink_stats st;

	rp_uring_sink_stats(s, &st);
	cr_assert_eq(st.bytes, total);
	cr_assert_geq(st.min_write, 64 * KiB, "smallest full write %" PRIu64, st.min_write);
	cr_assert_eq(st.min_write, buf_size);
	cr_assert_eq(st.max_write, buf_size);
	cr_assert_eq(st.partial_writes, total % buf_size ? 1u : 0u);
	cr_assert_eq(st.writes, (total + buf_size - 1) / buf_size,
		     "%" PRIu64 " writes for %zu bytes in %zu-byte buffers", st.writes, total,
		     buf_size);
	cr_assert_eq(st.last_write, total % buf_size ? total % buf_size : buf_size);
}

/* ---- files ------------------------------------------------------------ */

static void file_roundtrip(enum mode m, size_t buf_size, unsigned int nbufs, int format)
{
	static const char prefix[] = "PREFIX: bytes that were in the file before the sink";
	struct tracegen_opts go = gen_opts;
	struct nt_mem_sink ref;
	struct tracegen_result res;
	struct bytebuf got = { 0 };
	struct rp_uring_sink *s;
	char *dir = th_tmpdir(), *path = NULL;
	int fd;

	go.format = format;
	reference_trace(&ref, &go);
	cr_assert_not_null(dir);
	cr_assert_geq(asprintf(&path, "%s/out.nettrace", dir), 0);
	fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0644);
	cr_assert_geq(fd, 0);
	/* the sink must start at the fd's offset, not at 0 */
	cr_assert_eq(write(fd, prefix, sizeof(prefix)), (ssize_t)sizeof(prefix));

	s = new_sink(fd, m, buf_size, nbufs);
	cr_assert_eq(tracegen_write(&s->base, &go, &res), 0);
	cr_assert_eq(rp_uring_sink_flush(s), 0);
	assert_write_sizes(s, buf_size ? buf_size : 256 * KiB, ref.buf.len);
	/* the fd's offset ends where write(2) would have left it */
	cr_assert_eq(lseek(fd, 0, SEEK_CUR), (off_t)(sizeof(prefix) + ref.buf.len));
	/* a second flush is harmless */
	cr_assert_eq(rp_uring_sink_flush(s), 0);
	rp_uring_sink_free(s);
	close(fd);

	cr_assert_eq(th_read_file(path, &got), 0);
	cr_assert_geq(got.len, sizeof(prefix));
	cr_assert_eq(memcmp(got.p, prefix, sizeof(prefix)), 0, "the prefix was overwritten");
	assert_same(got.p + sizeof(prefix), got.len - sizeof(prefix), ref.buf.p, ref.buf.len,
		    mode_name(m));
	bb_free(&got);
	nt_mem_sink_fini(&ref);
	free(path);
	th_rmdir(dir);
}

Test(uring_sink, file_identical_uring)
{
	file_roundtrip(M_URING, 0, 0, NT_FORMAT_V5);
}

Test(uring_sink, file_identical_uring_small_buffers_v6)
{
	/* 64 KiB buffers, 8 in flight: many out-of-order completions */
	file_roundtrip(M_URING, 64 * KiB, 8, NT_FORMAT_V6);
}

Test(uring_sink, file_identical_write)
{
	file_roundtrip(M_WRITE, 0, 0, NT_FORMAT_V5);
}

Test(uring_sink, file_identical_write_small_buffers_v6)
{
	file_roundtrip(M_WRITE, 64 * KiB, 0, NT_FORMAT_V6);
}

/* O_APPEND ignores offsets: the sink must write it as a stream, in order. */
Test(uring_sink, append_file_keeps_order)
{
	struct nt_mem_sink ref;
	struct tracegen_result res;
	struct bytebuf got = { 0 };
	struct rp_uring_sink *s;
	char *dir = th_tmpdir(), *path = NULL;
	int fd;

	reference_trace(&ref, &gen_opts);
	cr_assert_geq(asprintf(&path, "%s/append.nettrace", dir), 0);
	fd = open(path, O_CREAT | O_WRONLY | O_TRUNC | O_APPEND, 0644);
	cr_assert_geq(fd, 0);
	s = new_sink(fd, M_URING, 64 * KiB, 8);
	cr_assert_eq(tracegen_write(&s->base, &gen_opts, &res), 0);
	cr_assert_eq(rp_uring_sink_flush(s), 0);
	rp_uring_sink_free(s);
	close(fd);
	cr_assert_eq(th_read_file(path, &got), 0);
	assert_same(got.p, got.len, ref.buf.p, ref.buf.len, "O_APPEND");
	bb_free(&got);
	nt_mem_sink_fini(&ref);
	free(path);
	th_rmdir(dir);
}

/* ---- sockets and pipes ------------------------------------------------ */

struct reader {
	int fd;
	size_t stop_after;	/* 0: read to EOF; else close after this many bytes */
	struct bytebuf got;
};

static void *reader_main(void *arg)
{
	struct reader *r = arg;
	char buf[32768];
	ssize_t n;

	for (;;) {
		n = read(r->fd, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		bb_append(&r->got, buf, (size_t)n);
		if (r->stop_after && r->got.len >= r->stop_after)
			break;
	}
	close(r->fd);
	return NULL;
}

static void stream_roundtrip(enum mode m, bool use_pipe, bool nonblock)
{
	struct nt_mem_sink ref;
	struct tracegen_result res;
	struct reader rd = { 0 };
	struct rp_uring_sink *s;
	pthread_t th;
	int sv[2], sndbuf = 16 * 1024;

	reference_trace(&ref, &gen_opts);
	if (use_pipe) {
		cr_assert_eq(pipe(sv), 0);
		rd.fd = sv[0];
		sv[0] = sv[1];
	} else {
		cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
		/* a small send buffer forces partial sends */
		cr_assert_eq(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)), 0);
		rd.fd = sv[1];
	}
	if (nonblock)
		cr_assert_eq(fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK), 0);
	cr_assert_eq(pthread_create(&th, NULL, reader_main, &rd), 0);

	s = new_sink(sv[0], use_pipe ? M_AUTO : m, 0, 0);
	if (use_pipe)	/* see uring_sink.c: io_uring could raise SIGPIPE on a pipe */
		cr_assert_str_eq(rp_uring_sink_mode(s), "write(2)");
	cr_assert_eq(tracegen_write(&s->base, &gen_opts, &res), 0);
	cr_assert_eq(rp_uring_sink_flush(s), 0);
	assert_write_sizes(s, 256 * KiB, ref.buf.len);
	rp_uring_sink_free(s);
	close(sv[0]);
	cr_assert_eq(pthread_join(th, NULL), 0);

	assert_same(rd.got.p, rd.got.len, ref.buf.p, ref.buf.len,
		    use_pipe ? "pipe" : mode_name(m));
	bb_free(&rd.got);
	nt_mem_sink_fini(&ref);
}

Test(uring_sink, socket_exact_bytes_uring)
{
	stream_roundtrip(M_URING, false, false);
}

Test(uring_sink, socket_exact_bytes_uring_nonblocking)
{
	stream_roundtrip(M_URING, false, true);
}

Test(uring_sink, socket_exact_bytes_write)
{
	stream_roundtrip(M_WRITE, false, false);
}

Test(uring_sink, socket_exact_bytes_write_nonblocking)
{
	stream_roundtrip(M_WRITE, false, true);
}

Test(uring_sink, pipe_exact_bytes)
{
	stream_roundtrip(M_AUTO, true, false);
}

/*
 * The reader takes 200 KiB and closes: the writer must get -EPIPE or
 * -ECONNRESET (sticky), and must not die of SIGPIPE (default disposition).
 */
static void peer_goes_away(enum mode m, bool use_pipe)
{
	static uint8_t block[96 * 1024];
	struct iovec iov[3];
	struct reader rd = { .stop_after = 200 * KiB };
	struct rp_uring_sink *s;
	sigset_t pend;
	pthread_t th;
	uint64_t sent = 0;
	int sv[2], err = 0;

	cr_assert_neq(signal(SIGPIPE, SIG_DFL), SIG_ERR);
	if (use_pipe) {
		cr_assert_eq(pipe(sv), 0);
		rd.fd = sv[0];
		sv[0] = sv[1];
	} else {
		cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
		rd.fd = sv[1];
	}
	cr_assert_eq(pthread_create(&th, NULL, reader_main, &rd), 0);
	s = new_sink(sv[0], use_pipe ? M_AUTO : m, 64 * KiB, 4);
	memset(block, 0xab, sizeof(block));
	iov[0] = (struct iovec){ block, 20 };
	iov[1] = (struct iovec){ block + 20, sizeof(block) - 21 };
	iov[2] = (struct iovec){ block + sizeof(block) - 1, 1 };
	while (!err && sent < 256ull * 1024 * 1024) {
		err = s->base.writev(&s->base, iov, 3);
		sent += sizeof(block);
	}
	if (!err)
		err = rp_uring_sink_flush(s);
	cr_assert(err == -EPIPE || err == -ECONNRESET, "got %d (%s)", err, strerror(-err));
	/* sticky */
	cr_assert_eq(s->base.writev(&s->base, iov, 3), err);
	cr_assert_eq(rp_uring_sink_flush(s), err);
	cr_assert_eq(rp_uring_sink_error(s), err);
	rp_uring_sink_free(s);
	close(sv[0]);
	cr_assert_eq(pthread_join(th, NULL), 0);
	cr_assert_geq(rd.got.len, 200 * KiB);
	/* no SIGPIPE left pending or blocked behind our back */
	cr_assert_eq(sigpending(&pend), 0);
	cr_assert_not(sigismember(&pend, SIGPIPE));
	cr_assert_eq(pthread_sigmask(SIG_BLOCK, NULL, &pend), 0);
	cr_assert_not(sigismember(&pend, SIGPIPE));
	bb_free(&rd.got);
}

Test(uring_sink, socket_peer_closes_uring)
{
	peer_goes_away(M_URING, false);
}

Test(uring_sink, socket_peer_closes_write)
{
	peer_goes_away(M_WRITE, false);
}

Test(uring_sink, pipe_peer_closes)
{
	peer_goes_away(M_AUTO, true);
}

/* A peer that never reads: free() must cancel the stuck send, not hang,
 * and not free buffers the kernel still reads (ASan). */
Test(uring_sink, free_with_writes_in_flight)
{
	static uint8_t block[3 * 64 * 1024];
	struct iovec iov = { block, sizeof(block) };
	struct rp_uring_sink *s;
	int sv[2], sndbuf = 4096;

	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	cr_assert_eq(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)), 0);
	s = new_sink(sv[0], M_URING, 64 * KiB, 4);
	/* three full buffers: one send stuck in flight, two queued behind it */
	cr_assert_eq(s->base.writev(&s->base, &iov, 1), 0);
	rp_uring_sink_free(s);
	close(sv[0]);
	close(sv[1]);
}

/* ---- write errors ----------------------------------------------------- */

static void write_error(enum mode m, const char *path, int flags, int want)
{
	static uint8_t block[1024 * 1024];
	struct iovec iov = { block, sizeof(block) };
	struct rp_uring_sink *s;
	int fd = open(path, flags), err;

	if (fd < 0 && !strcmp(path, "/dev/full"))
		cr_skip_test("/dev/full: %s", strerror(errno));
	cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
	s = new_sink(fd, m, 64 * KiB, 4);
	err = s->base.writev(&s->base, &iov, 1);
	if (!err)
		err = rp_uring_sink_flush(s);
	cr_assert_eq(err, want, "%s %s: got %d (%s), want %d", mode_name(m), path, err,
		     strerror(-err), want);
	cr_assert_eq(s->base.writev(&s->base, &iov, 1), want, "the error must be sticky");
	cr_assert_eq(rp_uring_sink_flush(s), want);
	rp_uring_sink_free(s);
	close(fd);
}

static void readonly_file(enum mode m)
{
	char *dir = th_tmpdir(), *path = NULL;

	cr_assert_geq(asprintf(&path, "%s/ro", dir), 0);
	cr_assert_eq(th_write_file(path, "x", 1), 0);
	write_error(m, path, O_RDONLY, -EBADF);
	free(path);
	th_rmdir(dir);
}

Test(uring_sink, readonly_file_uring)
{
	readonly_file(M_URING);
}

Test(uring_sink, readonly_file_write)
{
	readonly_file(M_WRITE);
}

Test(uring_sink, dev_full_uring)
{
	write_error(M_URING, "/dev/full", O_WRONLY, -ENOSPC);
}

Test(uring_sink, dev_full_write)
{
	write_error(M_WRITE, "/dev/full", O_WRONLY, -ENOSPC);
}

/*
 * Short writes: past RLIMIT_FSIZE a write is cut short, and the remainder,
 * resubmitted, fails with EFBIG. The file must hold exactly the limit and
 * the error must be reported. Runs in a child (the limit is per process).
 */
static int short_write_child(enum mode m, const char *path)
{
	static uint8_t block[2 * 1024 * 1024];
	const size_t limit = 1024 * 1024 + 1000;	/* not a multiple of a buffer */
	struct rlimit rl = { limit, limit };
	struct iovec iov = { block, sizeof(block) };
	struct rp_uring_sink_opts o = { .sz = sizeof(o), .buf_size = 64 * KiB,
					.force_write = m == M_WRITE };
	struct rp_uring_sink_stats st;
	struct rp_uring_sink *s;
	struct stat sb;
	int fd, err;

	signal(SIGXFSZ, SIG_IGN);
	if (setrlimit(RLIMIT_FSIZE, &rl))
		return 2;
	fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
	s = fd < 0 ? NULL : rp_uring_sink_new(fd, &o);
	if (!s)
		return 1;
	if (strcmp(rp_uring_sink_mode(s), mode_name(m)))
		return 2;
	err = s->base.writev(&s->base, &iov, 1);
	if (!err)
		err = rp_uring_sink_flush(s);
	rp_uring_sink_stats(s, &st);
	rp_uring_sink_free(s);
	if (fstat(fd, &sb) || close(fd))
		return 1;
	printf("%s: err %d, file %lld bytes, accepted %" PRIu64 ", resubmits %" PRIu64 "\n",
	       mode_name(m), err, (long long)sb.st_size, st.bytes, st.resubmits);
	return err == -EFBIG && (size_t)sb.st_size == limit && st.bytes == limit &&
	       st.resubmits >= 1 ? 0 : 1;
}

static void short_write(enum mode m)
{
	char *dir = th_tmpdir(), *path = NULL;
	int status;
	pid_t pid;

	cr_assert_geq(asprintf(&path, "%s/fsize", dir), 0);
	fflush(NULL);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		unsetenv("RINGPIPE_IO");
		status = short_write_child(m, path);
		fflush(NULL);
		_exit(status);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status), "child died: status 0x%x", status);
	if (WEXITSTATUS(status) == 2)
		cr_skip_test("%s or RLIMIT_FSIZE not usable here", mode_name(m));
	cr_assert_eq(WEXITSTATUS(status), 0, "short write not handled (see stdout)");
	free(path);
	th_rmdir(dir);
}

Test(uring_sink, short_write_resubmitted_uring)
{
	short_write(M_URING);
}

Test(uring_sink, short_write_resubmitted_write)
{
	short_write(M_WRITE);
}

/* ---- options and environment ------------------------------------------ */

/* Runs fn with stderr captured into *out (NUL-terminated). */
static void capture_stderr(void (*fn)(void *), void *arg, struct bytebuf *out)
{
	char *dir = th_tmpdir(), *path = NULL;
	int fd, saved;

	cr_assert_geq(asprintf(&path, "%s/stderr", dir), 0);
	fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0644);
	cr_assert_geq(fd, 0);
	fflush(stderr);
	saved = dup(2);
	dup2(fd, 2);
	fn(arg);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	close(fd);
	cr_assert_eq(th_read_file(path, out), 0);
	free(path);
	th_rmdir(dir);
}

struct new_result {
	const char *env;
	bool force_write;
	struct rp_uring_sink *s;
	int err;
};

static void try_new(void *arg)
{
	struct new_result *r = arg;
	struct rp_uring_sink_opts o = { .sz = sizeof(o), .force_write = r->force_write };
	int fd = open("/dev/null", O_WRONLY);

	if (r->env)
		setenv("RINGPIPE_IO", r->env, 1);
	else
		unsetenv("RINGPIPE_IO");
	errno = 0;
	r->s = rp_uring_sink_new(fd, &o);
	r->err = errno;
	unsetenv("RINGPIPE_IO");
	if (r->s) {
		cr_assert_eq(rp_uring_sink_flush(r->s), 0);
		rp_uring_sink_free(r->s);
	}
	close(fd);
}

Test(uring_sink, env_bogus_rejected)
{
	static const char *const bad[] = { "bogus", "URING", "io_uring", "write ", "1" };
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct new_result r = { .env = bad[i] };
		struct bytebuf err = { 0 };

		capture_stderr(try_new, &r, &err);
		cr_assert_null(r.s, "RINGPIPE_IO=%s accepted", bad[i]);
		cr_assert_eq(r.err, EINVAL);
		cr_assert(strstr((char *)err.p, "RINGPIPE_IO") && strstr((char *)err.p, bad[i]),
			  "stderr does not say what was wrong: '%s'", (char *)err.p);
		bb_free(&err);
	}
}

Test(uring_sink, env_forces_mode)
{
	struct rp_uring_sink *s;
	int fd = open("/dev/null", O_WRONLY);

	cr_assert_geq(fd, 0);
	setenv("RINGPIPE_IO", "write", 1);
	s = rp_uring_sink_new(fd, NULL);
	cr_assert_not_null(s);
	cr_assert_str_eq(rp_uring_sink_mode(s), "write(2)");
	rp_uring_sink_free(s);

	/* the environment wins over opts.force_write */
	setenv("RINGPIPE_IO", "uring", 1);
	{
		struct rp_uring_sink_opts o = { .sz = sizeof(o), .force_write = true };

		s = rp_uring_sink_new(fd, &o);
	}
	unsetenv("RINGPIPE_IO");
	if (!s)
		cr_skip_test("io_uring is not usable here: %s", strerror(errno));
	cr_assert_str_eq(rp_uring_sink_mode(s), "io_uring");
	rp_uring_sink_free(s);
	close(fd);
}

Test(uring_sink, opts_checked)
{
	struct rp_uring_sink_opts o = { .sz = sizeof(o) };
	struct {
		struct rp_uring_sink_opts o;
		uint64_t future;
	} big = { .o = { .sz = sizeof(big) } };
	struct rp_uring_sink *s;
	int fd = open("/dev/null", O_WRONLY);

	unsetenv("RINGPIPE_IO");
	cr_assert_geq(fd, 0);
	rp_uring_sink_free(NULL);

	o.buf_size = 64 * KiB - 1;
	errno = 0;
	cr_assert_null(rp_uring_sink_new(fd, &o));
	cr_assert_eq(errno, EINVAL);
	o.buf_size = 0;
	o.nr_bufs = RP_URING_SINK_MAX_NBUFS + 1;
	cr_assert_null(rp_uring_sink_new(fd, &o));
	cr_assert_eq(errno, EINVAL);
	o.nr_bufs = 0;
	o.sz = 2;
	cr_assert_null(rp_uring_sink_new(fd, &o));
	cr_assert_eq(errno, EINVAL);
	cr_assert_null(rp_uring_sink_new(-1, NULL));
	cr_assert_eq(errno, EBADF);

	/* a newer caller's unknown fields: accepted when zero, refused when not */
	s = rp_uring_sink_new(fd, &big.o);
	cr_assert_not_null(s);
	rp_uring_sink_free(s);
	big.future = 1;
	cr_assert_null(rp_uring_sink_new(fd, &big.o));
	cr_assert_eq(errno, EINVAL);

	/* an older caller that only knew sz and buf_size: rest defaulted */
	o.sz = offsetof(struct rp_uring_sink_opts, nr_bufs);
	o.buf_size = 128 * KiB;
	o.force_write = true;	/* beyond sz: must be ignored */
	s = rp_uring_sink_new(fd, &o);
	cr_assert_not_null(s);
	cr_assert_eq(s->buf_size, 128 * KiB);
	if (strcmp(rp_uring_sink_mode(s), "io_uring"))
		cr_log_info("io_uring not usable here; force_write cutoff not checked");
	else
		cr_assert_eq(s->nbufs, RP_URING_SINK_DEFAULT_NBUFS);
	rp_uring_sink_free(s);
	close(fd);
}

/* ---- fallback --------------------------------------------------------- */

/* Makes io_uring_setup fail with EPERM, as kernel.io_uring_disabled=2 does. */
static int deny_io_uring(void)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
#if defined(__x86_64__)
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
#elif defined(__aarch64__)
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_AARCH64, 1, 0),
#else
		BPF_JUMP(BPF_JMP | BPF_JA, 0, 0, 0),	/* unknown arch: skip the check */
#endif
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { .len = sizeof(f) / sizeof(f[0]), .filter = f };

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
		return -errno;
	return syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) ? -errno : 0;
}

/* In a child: exit 0 when all is well, 2 to skip, 1 + message otherwise. */
static int fallback_child(const char *dir)
{
	struct tracegen_opts go = gen_opts;
	struct nt_mem_sink ref;
	struct tracegen_result res;
	struct bytebuf got = { 0 };
	struct rp_uring_sink *s;
	char *path = NULL;
	int fd, k;

	if (deny_io_uring())
		return 2;
	unsetenv("RINGPIPE_IO");
	go.events = 20000;
	nt_mem_sink_init(&ref);
	if (tracegen_write(&ref.base, &go, &res) || asprintf(&path, "%s/fb.nettrace", dir) < 0)
		return 1;
	fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0644);
	/* two sinks: both fall back, the reason is logged once */
	for (k = 0; k < 2; k++) {
		if (ftruncate(fd, 0) || lseek(fd, 0, SEEK_SET))
			return 1;
		s = rp_uring_sink_new(fd, NULL);
		if (!s || strcmp(rp_uring_sink_mode(s), "write(2)")) {
			fprintf(stdout, "sink %d: %s\n", k, s ? rp_uring_sink_mode(s) : strerror(errno));
			return 1;
		}
		if (tracegen_write(&s->base, &go, &res) || rp_uring_sink_flush(s))
			return 1;
		rp_uring_sink_free(s);
		got.len = 0;
		if (th_read_file(path, &got) || got.len != ref.buf.len ||
		    memcmp(got.p, ref.buf.p, got.len)) {
			fprintf(stdout, "sink %d: output differs\n", k);
			return 1;
		}
	}
	/* forcing io_uring when it is refused is an error, not a fallback */
	setenv("RINGPIPE_IO", "uring", 1);
	s = rp_uring_sink_new(fd, NULL);
	if (s || errno != EPERM) {
		fprintf(stdout, "RINGPIPE_IO=uring: %s\n", s ? "accepted" : strerror(errno));
		return 1;
	}
	close(fd);
	return 0;
}

Test(uring_sink, fallback_when_io_uring_refused)
{
	char *dir = th_tmpdir(), *errpath = NULL;
	struct bytebuf err = { 0 };
	const char *p, *msg = "ringpipe: io_uring unavailable (";
	int status, n = 0;
	pid_t pid;

	cr_assert_geq(asprintf(&errpath, "%s/stderr", dir), 0);
	fflush(NULL);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		int fd = open(errpath, O_CREAT | O_WRONLY | O_TRUNC, 0644);

		dup2(fd, 2);
		_exit(fallback_child(dir));
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status), "child died: status 0x%x", status);
	if (WEXITSTATUS(status) == 2)
		cr_skip_test("cannot install a seccomp filter here");
	cr_assert_eq(WEXITSTATUS(status), 0);
	cr_assert_eq(th_read_file(errpath, &err), 0);
	for (p = (char *)err.p; (p = strstr(p, msg)); p++)
		n++;
	cr_assert_eq(n, 1, "fallback logged %d times:\n%s", n, (char *)err.p);
	cr_assert(strstr((char *)err.p, "io_uring_queue_init: Operation not permitted); "
				       "writing with write(2)"), "%s", (char *)err.p);
	bb_free(&err);
	free(errpath);
	th_rmdir(dir);
}
