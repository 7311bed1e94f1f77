// SPDX-License-Identifier: MIT
/*
 * The write path (user/producer/write.c): invariant 1 of
 * Documentation/design.md, checked by the kernel. A writer thread installs a
 * seccomp filter that kills the process on any system call but exit, then
 * writes; if an enabled write into a ring with room, a write that drops on a
 * full ring, or a disabled event made a single syscall, the child process
 * dies of SIGSYS and the test fails. Also: every attempt advances the
 * thread's sequence number.
 */
#include <errno.h>
#include <inttypes.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "atomics.h"
#include "helpers.h"
#include "nettrace_read.h"
#include "ringpipe/ringpipe.h"
#include "session.h"

static const struct rp_field fields[] = {
	{ "A", RP_TYPE_U64, 0, 0, NULL },
	{ "B", RP_TYPE_U64, 0, 0, NULL },
	{ "C", RP_TYPE_U64, 0, 0, NULL },
	{ "D", RP_TYPE_U64, 0, 0, NULL },
};

/* Allows exit(2) of the calling thread and nothing else. */
static int forbid_syscalls(void)
{
	struct sock_filter insns[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_exit, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
	};
	struct sock_fprog prog = { (unsigned short)(sizeof(insns) / sizeof(insns[0])), insns };

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
		return -errno;
	if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog))
		return -errno;
	return 0;
}

enum sandbox_job {
	JOB_WRITE_ROOM,		/* enabled writes into a ring with room */
	JOB_WRITE_FULL,		/* enabled writes into a full ring (Drop: drops) */
	JOB_DISABLED,		/* writes of an event no session enables */
	JOB_CONTROL_GETPID,	/* the control: one getpid() must be fatal */
};

struct sandbox {
	enum sandbox_job job;
	struct rp_event *ev, *off;
	uint32_t n;
	uint32_t ok, dropped, other;
	int filter_err;
};

static void *sandbox_writer(void *arg)
{
	struct sandbox *b = arg;
	uint64_t p[4] = { 1, 2, 3, 4 };
	uint32_t i;

	/* first write: thread registration, clock set-up (syscalls allowed) */
	rp_event_write(b->ev, p, sizeof(p));
	rp_event_write(b->off, p, sizeof(p));
	b->filter_err = forbid_syscalls();
	if (b->filter_err)
		return NULL;
	if (b->job == JOB_CONTROL_GETPID)
		(void)syscall(SYS_getpid);
	for (i = 0; i < b->n; i++) {
		int rc;

		p[0] = i;
		rc = rp_event_write(b->job == JOB_DISABLED ? b->off : b->ev, p, sizeof(p));
		if (rc == 0)
			b->ok++;
		else if (rc == -ENOBUFS)
			b->dropped++;
		else
			b->other++;
	}
	/* a raw exit: pthread_exit() would run destructors that make syscalls;
	 * the kernel still clears the tid, so the join below returns */
	syscall(SYS_exit, 0);
	return NULL;
}

/* In a child process: a session, a writer under the filter, the checks.
 * Exit status 0: all held; 10+: which check failed. */
static int sandbox_child(enum sandbox_job job, int mode, uint32_t n)
{
	struct rp_provider_opts po = { .sz = sizeof(po), .name = "Test-Write-Sandbox" };
	struct rp_provider_opts po_off = { .sz = sizeof(po_off), .name = "Test-Write-Off" };
	struct rp_event_opts eo = { .sz = sizeof(eo), .id = 1, .name = "E", .level = 4,
				    .nfields = 4, .fields = fields };
	struct rp_provider_config pc = { .name = "Test-Write-Sandbox" };
	struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
				      .buffer_bytes = 1 << 20, .buffering = mode, .path = "/dev/null" };
	struct rp_session_stats st = { .sz = sizeof(st) };
	struct sandbox b = { .job = job, .n = n };
	struct rp_session *s;
	pthread_t th;

	b.ev = rp_event_new(rp_provider_new(&po), &eo);
	b.off = rp_event_new(rp_provider_new(&po_off), &eo);
	if (!b.ev || !b.off)
		return 10;
	s = rp_session_start(&so);
	if (!s)
		return 11;
	if (job == JOB_WRITE_FULL) {
		/* a paused drainer is alive and never idle: producers have
		 * nobody to wake, and the ring fills */
		rp_store_relaxed(&rp_drain_pause, 1);
		usleep(50000);	/* longer than an idle sleep that had begun */
	}
	if (pthread_create(&th, NULL, sandbox_writer, &b))
		return 12;
	pthread_join(th, NULL);
	rp_store_relaxed(&rp_drain_pause, 0);
	if (b.filter_err)
		return 13;
	if (rp_session_stop(s))
		return 14;
	(void)st;
	if (b.other)
		return 15;
	switch (job) {
	case JOB_WRITE_ROOM:
		return b.ok == n && !b.dropped ? 0 : 16;
	case JOB_WRITE_FULL:
		return b.dropped > 0 && b.ok + b.dropped == n ? 0 : 17;
	case JOB_DISABLED:
		return b.ok == n ? 0 : 18;
	case JOB_CONTROL_GETPID:
		return 19;	/* the getpid() should have killed us */
	}
	return 20;
}

/* Runs a job in a child; returns its wait status. */
static int sandbox(enum sandbox_job job, int mode, uint32_t n)
{
	int status;
	pid_t pid;

#ifdef __SANITIZE_THREAD__
	/* TSan's runtime makes system calls of its own inside the writer and
	 * learns of a thread's end only through pthread_exit(): it would be
	 * judged, not the library (the plain and ASan builds run these) */
	cr_skip_test("seccomp sandbox: not under ThreadSanitizer, whose runtime makes syscalls "
		     "in the writer thread");
#endif
	fflush(NULL);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (!pid)
		_exit(sandbox_child(job, mode, n));
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	return status;
}

static void expect_clean(int status, const char *what)
{
	cr_assert_not(WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS,
		      "%s made a system call (killed by the seccomp filter)", what);
	cr_assert(WIFEXITED(status), "%s: child died of signal %d", what,
		  WIFSIGNALED(status) ? WTERMSIG(status) : 0);
	cr_assert_eq(WEXITSTATUS(status), 0, "%s: check %d failed in the child", what,
		     WEXITSTATUS(status));
}

Test(write, the_filter_kills_a_writer_that_makes_a_syscall)
{
	int status = sandbox(JOB_CONTROL_GETPID, RP_BUFFERING_DROP, 1);

	cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS,
		  "the control's getpid() must be fatal, or the other tests prove nothing "
		  "(status %#x)", status);
}

/* 1,500 records of 64 bytes stay under a session's wake watermark (a
 * quarter of a 512 KiB ring):
 * no write has a reason to wake the drainer */
Test(write, an_enabled_write_with_room_makes_no_syscall_drop)
{
	expect_clean(sandbox(JOB_WRITE_ROOM, RP_BUFFERING_DROP, 1500), "a Drop write with room");
}

Test(write, an_enabled_write_with_room_makes_no_syscall_block)
{
	expect_clean(sandbox(JOB_WRITE_ROOM, RP_BUFFERING_BLOCK, 1500), "a Block write with room");
}

Test(write, a_write_to_a_full_ring_drops_without_a_syscall)
{
	/* 1 MiB over the CPUs' rings, 64-byte records: 40,000 overflow */
	expect_clean(sandbox(JOB_WRITE_FULL, RP_BUFFERING_DROP, 40000), "a write to a full ring");
}

Test(write, a_disabled_event_makes_no_syscall)
{
	expect_clean(sandbox(JOB_DISABLED, RP_BUFFERING_DROP, 100000), "a disabled write");
}

/* ---- sequence numbers --------------------------------------------------- */

Test(write, every_attempt_advances_the_thread_sequence)
{
	struct rp_provider_opts po = { .sz = sizeof(po), .name = "Test-Write-Seq" };
	struct rp_event_opts eo = { .sz = sizeof(eo), .id = 1, .name = "E", .level = 4,
				    .nfields = 4, .fields = fields };
	struct rp_provider_config pc = { .name = "Test-Write-Seq" };
	struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
				      .buffer_bytes = 1 << 20, .path = "/dev/null" };
	struct rp_event *ev = rp_event_new(rp_provider_new(&po), &eo);
	struct rp_session *s;
	uint64_t p[4] = { 0 };
	uint32_t before, after;
	int slot, i;

	cr_assert_not_null(ev, "%s", rp_last_error());
	s = rp_session_start(&so);
	cr_assert_not_null(s, "%s", rp_last_error());
	slot = rp_session_id(s);
	cr_assert_eq(rp_event_write(ev, p, sizeof(p)), 0);
	before = rp_wt->seq[slot];
	/* captured, refused as too big (-EINVAL is not an attempt), captured */
	cr_assert_eq(rp_event_write(ev, p, sizeof(p)), 0);
	cr_assert_eq(rp_event_write(ev, NULL, 65536), -EINVAL);
	for (i = 0; i < 3; i++)
		cr_assert_eq(rp_event_write(ev, p, sizeof(p)), 0);
	after = rp_wt->seq[slot];
	cr_assert_eq(after - before, 4, "4 attempts advanced the sequence by %u", after - before);
	cr_assert_eq(rp_session_stop(s), 0);
}

static void *unpause_later(void *arg)
{
	(void)arg;
	usleep(100000);
	rp_store_relaxed(&rp_drain_pause, 0);
	return NULL;
}

/*
 * A Drop session's writes take the flat path; the Block session that gets
 * its slot next must not, even for a thread whose generation for the slot
 * is the Drop session's: with its drainer paused, its ring fills and the
 * writer parks until the drainer runs again, and nothing is dropped. A
 * flat write would drop at the first full ring.
 */
Test(write, a_block_session_in_a_slot_a_drop_session_used_parks_instead_of_dropping,
     .timeout = 60)
{
	struct rp_provider_opts po = { .sz = sizeof(po), .name = "Test-Write-Reuse" };
	struct rp_event_opts eo = { .sz = sizeof(eo), .id = 1, .name = "E", .level = 4,
				    .nfields = 4, .fields = fields };
	struct rp_provider_config pc = { .name = "Test-Write-Reuse" };
	struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
				      .buffer_bytes = 1 << 20, .path = "/dev/null",
				      .buffering = RP_BUFFERING_DROP };
	struct rp_session_stats st = { .sz = sizeof(st) };
	struct rp_event *ev = rp_event_new(rp_provider_new(&po), &eo);
	struct rp_session *s;
	uint64_t p[4] = { 0 }, dropped = 0;
	pthread_t th;
	int slot, i;

	cr_assert_not_null(ev, "%s", rp_last_error());
	s = rp_session_start(&so);
	cr_assert_not_null(s, "%s", rp_last_error());
	slot = rp_session_id(s);
	for (i = 0; i < 100; i++)
		cr_assert_eq(rp_event_write(ev, p, sizeof(p)), 0);
	cr_assert_eq(rp_session_stop(s), 0);

	so.buffering = RP_BUFFERING_BLOCK;
	s = rp_session_start(&so);
	cr_assert_not_null(s, "%s", rp_last_error());
	cr_assert_eq(rp_session_id(s), slot, "the Block session took slot %d, not %d",
		     rp_session_id(s), slot);
	rp_store_relaxed(&rp_drain_pause, 1);
	cr_assert_eq(pthread_create(&th, NULL, unpause_later, NULL), 0);
	/* four times what the rings hold: the writer parks while paused */
	for (i = 0; i < (4 << 20) / 64; i++) {
		p[0] = (uint64_t)i;
		cr_assert_eq(rp_event_write(ev, p, sizeof(p)), 0, "write %d refused", i);
	}
	pthread_join(th, NULL);
	cr_assert_eq(rp_session_stats(s, &st), 0);
	for (i = 0; i < RP_DROP_REASON_NR; i++)
		dropped += st.dropped[i];
	cr_assert_eq(dropped, 0, "the Block session dropped %" PRIu64 " events", dropped);
	cr_assert_eq(rp_session_stop(s), 0);
}

/* ---- the local (rseq) reservation -------------------------------------- */

#define MIG_THREADS 8
#define MIG_EVENTS 200000u

struct mig_writer {
	struct rp_event *ev;
	uint32_t index;
	pid_t tid;
	int failed;
};

static int mig_stop;

static void *mig_writer_main(void *arg)
{
	struct mig_writer *w = arg;
	uint64_t p[4];
	uint32_t i;

	/* pairs with the load_acquire in migrator_main() */
	rp_store_release(&w->tid, (pid_t)syscall(SYS_gettid));
	for (i = 0; i < MIG_EVENTS; i++) {
		p[0] = w->index;
		p[1] = i;
		p[2] = ~(uint64_t)i;
		p[3] = (uint64_t)w->index << 32 | i;
		if (rp_event_write(w->ev, p, sizeof(p)))
			w->failed++;
	}
	return NULL;
}

/* Moves the writers between the CPUs every few hundred microseconds, so
 * that reservations are cut by migrations and preemptions. */
static void *migrator_main(void *arg)
{
	struct mig_writer *w = arg;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned k = 0;

	while (!rp_load_relaxed(&mig_stop)) {
		int i;

		for (i = 0; i < MIG_THREADS; i++) {
			/* pairs with the store_release in mig_writer_main() */
			pid_t tid = rp_load_acquire(&w[i].tid);
			cpu_set_t set;

			if (!tid)
				continue;
			CPU_ZERO(&set);
			CPU_SET((int)((k + (unsigned)i) % (unsigned)ncpu), &set);
			sched_setaffinity(tid, sizeof(set), &set);
		}
		k++;
		usleep(300);
	}
	return NULL;
}

/* Every event written exactly once, its payload intact, while writers are
 * migrated under their reservations: the local reservation (a restartable
 * sequence where the machine has it) never hands one slot to two writers.
 * In a Drop session the writes take the flat path, whose view of the ring
 * of one CPU (write.c) must follow the writer to the next: a view kept
 * across a migration would write into the ring of another CPU, whose own
 * writers reserve in it with plain stores. */
static void migrate_writers(int buffering)
{
	struct rp_provider_opts po = { .sz = sizeof(po), .name = "Test-Write-Migrate" };
	struct rp_event_opts eo = { .sz = sizeof(eo), .id = 1, .name = "E", .level = 4,
				    .nfields = 4, .fields = fields };
	struct rp_provider_config pc = { .name = "Test-Write-Migrate" };
	struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
				      .buffer_bytes = 256 << 20, .buffering = buffering };
	struct mig_writer w[MIG_THREADS];
	pthread_t th[MIG_THREADS], mig;
	char *dir = th_tmpdir(), path[512];
	struct rp_session *s;
	struct nt_reader *rd;
	struct nt_rec rec;
	uint8_t *seen;
	uint64_t total = 0;
	int i, rc;

	cr_assert_not_null(dir);
	snprintf(path, sizeof(path), "%s/migrate.nettrace", dir);
	so.path = path;
	for (i = 0; i < MIG_THREADS; i++)
		w[i] = (struct mig_writer){ .ev = rp_event_new(rp_provider_new(&po), &eo),
					    .index = (uint32_t)i };
	cr_assert_not_null(w[0].ev, "%s", rp_last_error());
	for (i = 1; i < MIG_THREADS; i++)
		w[i].ev = w[0].ev;
	s = rp_session_start(&so);
	cr_assert_not_null(s, "%s", rp_last_error());
	cr_log_info("local reservation: %s", rp_slots[rp_session_id(s)].local_rings ?
		    "yes (rseq)" : "no (CAS)");
	rp_store_relaxed(&mig_stop, 0);
	for (i = 0; i < MIG_THREADS; i++)
		cr_assert_eq(pthread_create(&th[i], NULL, mig_writer_main, &w[i]), 0);
	cr_assert_eq(pthread_create(&mig, NULL, migrator_main, w), 0);
	for (i = 0; i < MIG_THREADS; i++) {
		pthread_join(th[i], NULL);
		cr_assert_eq(w[i].failed, 0, "writer %d: %d writes failed", i, w[i].failed);
	}
	rp_store_relaxed(&mig_stop, 1);
	pthread_join(mig, NULL);
	cr_assert_eq(rp_session_stop(s), 0);

	seen = calloc((size_t)MIG_THREADS * MIG_EVENTS, 1);
	cr_assert_not_null(seen);
	rd = nt_reader_open(path);
	cr_assert_not_null(rd);
	while ((rc = nt_reader_next(rd, &rec)) == 1) {
		uint64_t p[4];

		if (!rec.meta || strcmp(rec.meta->provider, "Test-Write-Migrate"))
			continue;
		cr_assert_eq(rec.payload_len, sizeof(p));
		memcpy(p, rec.payload, sizeof(p));
		cr_assert(p[0] < MIG_THREADS && p[1] < MIG_EVENTS, "a payload from nowhere");
		cr_assert_eq(p[2], ~p[1], "payload torn");
		cr_assert_eq(p[3], p[0] << 32 | p[1], "payload torn");
		cr_assert_not(seen[p[0] * MIG_EVENTS + p[1]]++, "event %" PRIu64 "/%" PRIu64
			      " twice", p[0], p[1]);
		total++;
	}
	cr_assert_eq(rc, 0, "reader: %s", nt_reader_errmsg(rd));
	cr_assert_eq(total, (uint64_t)MIG_THREADS * MIG_EVENTS, "%" PRIu64 " of %u events",
		     total, MIG_THREADS * MIG_EVENTS);
	cr_assert_eq(nt_reader_lost(rd), 0);
	nt_reader_free(rd);
	free(seen);
	th_rmdir(dir);
}

Test(write, reservations_survive_migration_and_preemption, .timeout = 120)
{
	migrate_writers(RP_BUFFERING_BLOCK);
}

/* 8 x 200,000 records of 64 bytes, 102 MB in the 256 MiB session, spread
 * over the rings of the CPUs the writers are moved through in turn: no
 * ring fills, even with the drainer far behind, so nothing drops */
Test(write, flat_writes_survive_migration_and_preemption, .timeout = 120)
{
	migrate_writers(RP_BUFFERING_DROP);
}

/* ---- reservation and copy details --------------------------------------- */

static uint64_t written_or_dropped(struct rp_session *s)
{
	struct rp_session_stats st = { .sz = sizeof(st) };
	uint64_t n;

	cr_assert_eq(rp_session_stats(s, &st), 0);
	n = st.events_written;
	for (int r = 0; r < RP_DROP_REASON_NR; r++)
		n += st.dropped[r];
	return n;
}

/* Writes from CPU 0 until the ring is full; returns how many went in. */
static uint64_t fill_ring(struct rp_event *ev)
{
	uint64_t p[4] = { 0 }, n = 0;
	int rc;

	while ((rc = rp_event_write(ev, p, sizeof(p))) == 0)
		n++;
	cr_assert_eq(rc, -ENOBUFS, "a write to a full ring: %d", rc);
	return n;
}

/*
 * A ring that filled must take a whole ring of writes again once the drainer
 * emptied it, and never more: writers see the space the consumer gave back
 * (a writer that kept reserving against a stale consumer position, as a
 * cached copy of it would, takes none).
 */
Test(write, a_ring_that_filled_takes_a_ring_of_writes_again_once_drained, .timeout = 60)
{
	struct rp_provider_opts po = { .sz = sizeof(po), .name = "Test-Write-Refill" };
	struct rp_event_opts eo = { .sz = sizeof(eo), .id = 1, .name = "E", .level = 4,
				    .nfields = 4, .fields = fields };
	struct rp_provider_config pc = { .name = "Test-Write-Refill" };
	struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
				      .buffer_bytes = 0, .path = "/dev/null" };
	struct rp_event *ev = rp_event_new(rp_provider_new(&po), &eo);
	struct rp_session *s;
	uint64_t first, again, total = 0;
	cpu_set_t one;

	cr_assert_not_null(ev, "%s", rp_last_error());
	CPU_ZERO(&one);
	CPU_SET(0, &one);
	cr_assert_eq(sched_setaffinity(0, sizeof(one), &one), 0);
	so.buffer_bytes = (uint64_t)rp_shm_possible_cpus() << 19;	/* 512 KiB rings */
	s = rp_session_start(&so);
	cr_assert_not_null(s, "%s", rp_last_error());
	cr_log_info("local reservation: %s", rp_slots[rp_session_id(s)].local_rings ?
		    "yes (rseq)" : "no (CAS)");
	for (int round = 0; round < 3; round++) {
		rp_store_relaxed(&rp_drain_pause, 1);
		usleep(20000);	/* the drainer may be in a pass: let it finish */
		first = fill_ring(ev);
		total += first + 1;	/* the write that found it full is an attempt */
		rp_store_relaxed(&rp_drain_pause, 0);
		while (written_or_dropped(s) < total)
			usleep(1000);
		rp_store_relaxed(&rp_drain_pause, 1);
		usleep(20000);
		again = fill_ring(ev);
		total += again + 1;
		rp_store_relaxed(&rp_drain_pause, 0);
		/* 512 KiB of 64-byte records at most, less what the drainer
		 * held when it paused */
		cr_assert(first > 4000 && first <= 8192, "the first fill took %" PRIu64, first);
		cr_assert(again > 4000 && again <= 8192,
			  "after the drain the ring took %" PRIu64 " writes (first fill %" PRIu64 ")",
			  again, first);
		while (written_or_dropped(s) < total)
			usleep(1000);
	}
	cr_assert_eq(rp_session_stop(s), 0);
}

/* Payloads are copied inline up to 64 bytes in pieces that overlap: every
 * length from 0 to past that arrives byte for byte. */
Test(write, payloads_of_every_small_length_arrive_intact, .timeout = 60)
{
	struct rp_provider_opts po = { .sz = sizeof(po), .name = "Test-Write-Lengths" };
	struct rp_event_opts eo = { .sz = sizeof(eo), .id = 1, .name = "Raw", .level = 4 };
	struct rp_provider_config pc = { .name = "Test-Write-Lengths" };
	struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
				      .buffering = RP_BUFFERING_BLOCK };
	struct rp_event *ev = rp_event_new(rp_provider_new(&po), &eo);
	char *dir = th_tmpdir(), path[512];
	unsigned char buf[200];
	struct rp_session *s;
	struct nt_reader *rd;
	struct nt_rec rec;
	uint32_t next = 0;
	int rc;

	cr_assert_not_null(ev, "%s", rp_last_error());
	cr_assert_not_null(dir);
	snprintf(path, sizeof(path), "%s/lengths.nettrace", dir);
	so.path = path;
	s = rp_session_start(&so);
	cr_assert_not_null(s, "%s", rp_last_error());
	for (uint32_t len = 0; len < sizeof(buf); len++) {
		for (uint32_t k = 0; k < len; k++)
			buf[k] = (unsigned char)(len * 31 + k * 7 + 1);
		cr_assert_eq(rp_event_write(ev, buf, len), 0);
		/* the vector write copies segment by segment */
		struct iovec iov[3] = { { buf, len / 3 }, { buf + len / 3, len / 3 },
					{ buf + 2 * (len / 3), len - 2 * (len / 3) } };
		cr_assert_eq(rp_event_writev(ev, iov, 3, NULL), 0);
	}
	cr_assert_eq(rp_session_stop(s), 0);
	rd = nt_reader_open(path);
	cr_assert_not_null(rd);
	while ((rc = nt_reader_next(rd, &rec)) == 1) {
		uint32_t len = next / 2;

		if (!rec.meta || strcmp(rec.meta->provider, "Test-Write-Lengths"))
			continue;
		cr_assert_eq(rec.payload_len, len, "event %u: %u bytes, wrote %u", next,
			     rec.payload_len, len);
		for (uint32_t k = 0; k < len; k++)
			cr_assert_eq(((const unsigned char *)rec.payload)[k],
				     (unsigned char)(len * 31 + k * 7 + 1),
				     "event %u (%u bytes): byte %u differs", next, len, k);
		next++;
	}
	cr_assert_eq(rc, 0, "reader: %s", nt_reader_errmsg(rd));
	cr_assert_eq(next, 2 * sizeof(buf), "%u of %zu events", next, 2 * sizeof(buf));
	nt_reader_free(rd);
	th_rmdir(dir);
}
