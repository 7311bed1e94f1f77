// SPDX-License-Identifier: MIT
/*
 * Output faults: a full filesystem, a pipe whose reader stalls and then
 * dies, a socket closed by its peer; Drop and Block. The session ends with
 * a clear error, every writer returns, and what reached the output plus
 * what was counted as dropped is exactly what was attempted: after the
 * error every attempt is a drop of its own reason (output), and what the
 * drainer had serialized but could not get out is counted too. Writers
 * write until their writes return the output's error, however much the
 * output took before it failed and however much Drop lost on the way.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "helpers.h"
#include "ringpipe/ringpipe.h"

#define WRITERS 2
#define BEFORE_FAULT 3	/* writes of the main thread before the fault */
/* a writer that has not met the output's error after this long: a hang */
#define WRITE_FOR_NS 120000000000ull

static const struct rp_field fields[] = {
	{ "A", RP_TYPE_U64, 0, 0, NULL },
	{ "B", RP_TYPE_U64, 0, 0, NULL },
	{ "C", RP_TYPE_U64, 0, 0, NULL },
	{ "D", RP_TYPE_U64, 0, 0, NULL },
};

struct writer {
	struct rp_event *ev;
	int want_err;		/* the output's error: the last write returns it */
	uint64_t ok, refused;
	int other_rc;
	bool met;		/* a write returned want_err */
};

static void *writer_main(void *arg)
{
	struct writer *w = arg;
	uint64_t p[4] = { 0 }, i, end = rp_clock_mono_ns() + WRITE_FOR_NS;

	for (i = 0; !w->met; i++) {
		int rc;

		p[0] = i;
		/* paced a little, so that in Drop mode the drainer keeps up and
		 * the output, not the ring, is what fills */
		if (!(i & 4095)) {
			usleep(500);
			if (rp_clock_mono_ns() > end)
				break;
		}
		rc = rp_event_write(w->ev, p, sizeof(p));
		if (!rc)
			w->ok++;
		else if (rc == -ENOBUFS || rc == -ENOSPC || rc == -EPIPE || rc == -ECONNRESET)
			w->refused++;
		else if (!w->other_rc)
			w->other_rc = rc;
		w->met = rc == w->want_err;
	}
	return NULL;
}

static uint64_t drops(const struct rp_session_stats *st)
{
	uint64_t n = 0;
	int r;

	for (r = 0; r < RP_DROP_REASON_NR; r++)
		n += st->dropped[r];
	return n;
}

/* Writes into a session on path or fd until the output fails; checks the
 * accounting and returns stop's result. */
static int run(const char *name, int mode, const char *path, int fd, int want_err)
{
	struct rp_provider_opts po = { .sz = sizeof(po), .name = name };
	struct rp_event_opts eo = { .sz = sizeof(eo), .id = 1, .name = "E", .level = 4,
				    .nfields = 4, .fields = fields };
	struct rp_provider_config pc = { .name = name };
	struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
				      .buffer_bytes = 1 << 20, .buffering = mode, .path = path,
				      .fd = fd };
	struct rp_session_stats st = { .sz = sizeof(st) };
	struct rp_event *ev = rp_event_new(rp_provider_new(&po), &eo);
	struct writer w[WRITERS];
	pthread_t th[WRITERS];
	struct rp_session *s;
	uint64_t attempted = BEFORE_FAULT, ok = 0, refused = 0, t0;
	uint64_t p[4] = { 0 }, output_drops;
	int i, err;

	cr_assert_not_null(ev, "%s", rp_last_error());
	s = rp_session_start(&so);
	cr_assert_not_null(s, "%s", rp_last_error());
	/* this thread writes before the fault and once after it (below): its
	 * first write goes the full way, its second makes its view of the
	 * ring, its third and the one after the fault take the flat path */
	for (i = 0; i < BEFORE_FAULT; i++) {
		cr_assert_eq(rp_event_write(ev, p, sizeof(p)), 0);
		ok++;
	}
	for (i = 0; i < WRITERS; i++) {
		w[i] = (struct writer){ .ev = ev, .want_err = want_err };
		cr_assert_eq(pthread_create(&th[i], NULL, writer_main, &w[i]), 0);
	}
	for (i = 0; i < WRITERS; i++) {
		pthread_join(th[i], NULL);
		cr_assert_eq(w[i].other_rc, 0, "%s: a write returned %d", name, w[i].other_rc);
		cr_assert(w[i].met, "%s: writer %d wrote %" PRIu64 " events in %llu s and never met "
			  "the output's error %d", name, i, w[i].ok + w[i].refused,
			  WRITE_FOR_NS / 1000000000, want_err);
		ok += w[i].ok;
		refused += w[i].refused;
		attempted += w[i].ok + w[i].refused;
	}
	/* the drainer goes on consuming after the error: wait until the error
	 * came (a reader may die after everything was serialized) and every
	 * attempt is accounted for */
	t0 = rp_clock_mono_ns();
	do {
		cr_assert_eq(rp_session_stats(s, &st), 0);
		if (st.events_written + drops(&st) >= attempted && st.output_error)
			break;
		usleep(1000);
	} while (rp_clock_mono_ns() - t0 < 60000000000ull);
	cr_assert_eq(st.output_error, want_err, "%s: output error %d, expected %d", name,
		     st.output_error, want_err);
	cr_assert_eq(st.events_written + drops(&st), attempted,
		     "%s: %" PRIu64 " captured + %" PRIu64 " dropped != %" PRIu64 " attempted", name,
		     st.events_written, drops(&st), attempted);
	cr_assert_gt(st.dropped[RP_DROP_REASON_OUTPUT], 0, "%s: no drop counted as output", name);
	/* every refused write is a counted drop; the drainer also counts what
	 * it had taken in but could not get out */
	cr_assert_leq(refused, drops(&st), "%s: %" PRIu64 " writes refused, %" PRIu64 " counted",
		      name, refused, drops(&st));
	cr_assert_eq(ok + refused, attempted);
	if (mode == RP_BUFFERING_BLOCK)
		cr_assert_eq(st.dropped[RP_DROP_REASON_FULL], 0, "%s: Block dropped as full", name);
	/* after the fault every attempt returns the error, counted as output */
	output_drops = st.dropped[RP_DROP_REASON_OUTPUT];
	err = rp_event_write(ev, p, sizeof(p));
	cr_assert_eq(err, want_err, "%s: a write after the fault returned %d, expected %d", name,
		     err, want_err);
	cr_assert_eq(rp_session_stats(s, &st), 0);
	cr_assert_eq(st.dropped[RP_DROP_REASON_OUTPUT], output_drops + 1,
		     "%s: the write after the fault was not counted as an output drop", name);
	err = rp_session_stop(s);
	cr_assert_eq(err, want_err, "%s: stop returned %d, expected %d", name, err, want_err);
	return err;
}

static void full_filesystem(int mode, const char *name)
{
	char *dir = th_tmpdir(), path[600];

	cr_assert_not_null(dir);
	/* in a mount namespace of this test's own process, so that a failed
	 * assertion cannot leave the small filesystem mounted behind it */
	if (!unshare(CLONE_NEWNS))
		mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL);
	if (mount("ringpipe-test", dir, "tmpfs", 0, "size=1m")) {
		int e = errno;

		th_rmdir(dir);
		cr_skip_test("cannot mount a 1 MiB tmpfs to fill (%s): needs CAP_SYS_ADMIN",
			     strerror(e));
	}
	snprintf(path, sizeof(path), "%s/full.nettrace", dir);
	run(name, mode, path, -1, -ENOSPC);
	umount2(dir, MNT_DETACH);
	th_rmdir(dir);
}

Test(output, a_full_filesystem_counts_every_loss_drop)
{
	full_filesystem(RP_BUFFERING_DROP, "Test-Output-Full-Drop");
}

Test(output, a_full_filesystem_counts_every_loss_block)
{
	full_filesystem(RP_BUFFERING_BLOCK, "Test-Output-Full-Block");
}

struct reader {
	int fd;
	size_t take;		/* bytes read before closing */
	unsigned stall_ms;	/* sleep before reading at all */
};

static void *reader_main(void *arg)
{
	struct reader *r = arg;
	char buf[65536];
	size_t got = 0;

	if (r->stall_ms)
		usleep(r->stall_ms * 1000u);
	while (got < r->take) {
		ssize_t n = read(r->fd, buf, sizeof(buf));

		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(r->fd);
	return NULL;
}

static void dying_reader(int mode, const char *name, bool socket, unsigned stall_ms)
{
	struct reader rd;
	pthread_t th;
	int fds[2];

	signal(SIGPIPE, SIG_IGN);
	if (socket)
		cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
	else
		cr_assert_eq(pipe(fds), 0);
	rd = (struct reader){ .fd = fds[0], .take = 256 << 10, .stall_ms = stall_ms };
	cr_assert_eq(pthread_create(&th, NULL, reader_main, &rd), 0);
	run(name, mode, NULL, fds[1], -EPIPE);
	pthread_join(th, NULL);
	close(fds[1]);
}

Test(output, a_pipe_reader_that_stalls_then_dies_drop)
{
	dying_reader(RP_BUFFERING_DROP, "Test-Output-Pipe-Drop", false, 300);
}

Test(output, a_pipe_reader_that_stalls_then_dies_block)
{
	dying_reader(RP_BUFFERING_BLOCK, "Test-Output-Pipe-Block", false, 300);
}

Test(output, a_socket_closed_by_its_peer_drop)
{
	dying_reader(RP_BUFFERING_DROP, "Test-Output-Sock-Drop", true, 0);
}

Test(output, a_socket_closed_by_its_peer_block)
{
	dying_reader(RP_BUFFERING_BLOCK, "Test-Output-Sock-Block", true, 0);
}
