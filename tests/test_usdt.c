// SPDX-License-Identifier: MIT
/*
 * libringpipe's USDT probe ringpipe:event (user/kernel/usdt.h): the ELF note
 * and its semaphore in libringpipe.so and libringpipe.a, the armed path
 * without a tracer, and bpftrace attached by pid counting exactly the events
 * a process wrote (through the shared and the static library).
 *
 * The bpftrace tests need root (or CAP_BPF + CAP_PERFMON) and bpftrace
 * (make deps installs it). Without the privilege they skip with the reason;
 * without bpftrace they skip too, unless RINGPIPE_REQUIRE_INTEROP=1, which
 * makes that a failure.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/wait.h>

#include "clock.h"
#include "helpers.h"
#include "ringpipe/ringpipe.h"

#ifndef RP_NO_USDT
extern unsigned short ringpipe_event_semaphore;	/* user/kernel/usdt.c */
#endif

/* Directory of this test binary: the writers are built next to it and the
 * libraries one level up. */
static const char *test_dir(void)
{
	static char dir[PATH_MAX];

	if (!dir[0]) {
		ssize_t n = readlink("/proc/self/exe", dir, sizeof(dir) - 1);

		cr_assert_gt(n, 0);
		dir[n] = 0;
		dirname(dir);
	}
	return dir;
}

static char *out_path(const char *rel)
{
	char *p, *r;

	cr_assert(asprintf(&p, "%s/%s", test_dir(), rel) > 0);
	r = realpath(p, NULL);
	cr_assert_not_null(r, "%s is missing (make tests builds it)", p);
	free(p);
	return r;
}

/* The "Semaphore: 0x..." of the ringpipe:event note in `readelf -n FILE`
 * (0 when absent); *nprobes counts the ringpipe:event notes. */
static uint64_t note_semaphore(const char *file, int *nprobes)
{
	struct bytebuf out = { 0 };
	char *cmd, *p;
	uint64_t sem = 0;
	int n = 0;

	cr_assert(asprintf(&cmd, "readelf -n '%s' 2>&1", file) > 0);
	cr_assert_eq(th_run(cmd, &out), 0, "%s failed: %s", cmd, ((char *)out.p));
	for (p = ((char *)out.p); p && (p = strstr(p, "Provider: ringpipe")); p++) {
		char *name = strstr(p, "Name: "), *s = strstr(p, "Semaphore: ");

		cr_assert(name && s, "truncated note in %s", file);
		if (strncmp(name + 6, "event\n", 6))
			continue;
		n++;
		sem = strtoull(s + 11, NULL, 16);
	}
	free(cmd);
	bb_free(&out);
	*nprobes = n;
	return sem;
}

/* The value of a symbol in FILE's static symbol table (0 when absent). */
static uint64_t nm_symbol(const char *file, const char *sym)
{
	struct bytebuf out = { 0 };
	char *cmd;
	uint64_t v = 0;

	cr_assert(asprintf(&cmd, "nm '%s' 2>/dev/null | awk '$3 == \"%s\" { print $1 }'", file,
			   sym) > 0);
	cr_assert_eq(th_run(cmd, &out), 0);
	if (out.len)
		v = strtoull(((char *)out.p), NULL, 16);
	free(cmd);
	bb_free(&out);
	return v;
}

Test(usdt, note_and_semaphore_in_both_libraries)
{
	char *so = out_path("../libringpipe.so"), *a = out_path("../libringpipe.a");
	char *exe = out_path("usdt_writer_static");
	uint64_t sem, sym;
	int n;

	/* shared library: the note, and its semaphore is the variable */
	sem = note_semaphore(so, &n);
	cr_assert_geq(n, 1, "no ringpipe:event note in %s", so);
	cr_assert_neq(sem, 0, "the probe in %s has no semaphore", so);
	sym = nm_symbol(so, "ringpipe_event_semaphore");
	cr_assert_eq(sem, sym, "the note's semaphore 0x%" PRIx64 " is not ringpipe_event_semaphore "
		     "(0x%" PRIx64 ")", sem, sym);

	/* static library: the note is in the archive (its address resolves
	 * when a program links it) ... */
	note_semaphore(a, &n);
	cr_assert_geq(n, 1, "no ringpipe:event note in %s", a);
	/* ... and a program linked with it carries a resolved one */
	sem = note_semaphore(exe, &n);
	cr_assert_geq(n, 1, "no ringpipe:event note in %s", exe);
	cr_assert_neq(sem, 0);
	cr_assert_eq(sem, nm_symbol(exe, "ringpipe_event_semaphore"));
	free(so);
	free(a);
	free(exe);
}

/*
 * The armed branch without a tracer: the probe site is a nop then, but its
 * arguments are evaluated, including for an empty writev (no first
 * segment). Writes must behave exactly as unarmed. Raising the semaphore by
 * hand is what a tracer does through /proc/PID/mem.
 */
Test(usdt, armed_path_without_tracer)
{
#ifdef RP_NO_USDT
	cr_skip_test("built with RP_NO_USDT: the probe is compiled out");
#else
	struct rp_provider_opts po = { .sz = sizeof(po), .name = "Rp-Usdt-Armed" };
	struct rp_event_opts eo = { .sz = sizeof(eo), .id = 1, .name = "E", .level = 4 };
	struct rp_provider_config pc = { .name = "Rp-Usdt-Armed" };
	struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
				      .format = 5, .path = "/dev/null", .fd = -1,
				      .kind = RP_SESSION_DEFERRED };
	struct rp_session_stats st = { .sz = sizeof(st) };
	struct rp_provider *p = rp_provider_new(&po);
	struct rp_event *ev = rp_event_new(p, &eo);
	struct rp_session *s = rp_session_start(&so);
	uint64_t payload[4] = { 1, 2, 3, 4 };
	struct iovec iov[2] = { { payload, 8 }, { &payload[1], 24 } };

	cr_assert_not_null(s, "%s", rp_last_error());
	__atomic_store_n(&ringpipe_event_semaphore, 1, __ATOMIC_RELAXED);
	cr_assert_eq(rp_event_write(ev, payload, sizeof(payload)), 0);
	cr_assert_eq(rp_event_writev(ev, iov, 2, NULL), 0);
	cr_assert_eq(rp_event_writev(ev, NULL, 0, NULL), 0);
	cr_assert_eq(rp_event_write(ev, NULL, 0), 0);
	/* invalid input is refused before the probe, as before */
	cr_assert_eq(rp_event_write(ev, payload, 70000), -EINVAL);
	__atomic_store_n(&ringpipe_event_semaphore, 0, __ATOMIC_RELAXED);
	cr_assert_eq(rp_session_stats(s, &st), 0);
	for (int r = 0; r < RP_DROP_REASON_NR; r++)
		cr_assert_eq(st.dropped[r], 0);
	cr_assert_eq(rp_session_stop(s), 0);
#endif
}

/* ---- bpftrace ------------------------------------------------------------ */

#define NEED_BPFTRACE()                                                          \
	do {                                                                     \
		if (!th_has_bpf_privilege())                                        \
			cr_skip_test("bpftrace needs root or CAP_BPF + CAP_PERFMON, " \
				     "which this process does not have");          \
		if (system("command -v bpftrace >/dev/null 2>&1") != 0) {         \
			if (th_require_interop())                                \
				cr_assert_fail("RINGPIPE_REQUIRE_INTEROP=1 but bpftrace is " \
					       "not installed (make deps installs it)"); \
			cr_skip_test("bpftrace is not installed (make deps installs it)"); \
		}                                                                \
	} while (0)

static pid_t spawn(char *const argv[], const char *out_file)
{
	pid_t pid = fork();

	cr_assert_geq(pid, 0);
	if (pid == 0) {
		int fd = open(out_file, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
			_exit(126);
		close(fd);
		execvp(argv[0], argv);
		_exit(127);
	}
	return pid;
}

/* waitpid with a deadline; returns the status, or -1 on timeout */
static int wait_ms(pid_t pid, uint64_t ms)
{
	uint64_t end = rp_clock_mono_ns() + ms * 1000000;
	int st;

	while (rp_clock_mono_ns() < end) {
		pid_t r = waitpid(pid, &st, WNOHANG);

		if (r == pid)
			return st;
		cr_assert_geq(r, 0);
		rp_clock_sleep_ns(10000000);
	}
	return -1;
}

static char *slurp(const char *path)
{
	struct bytebuf b = { 0 };

	th_read_file(path, &b);
	return ((char *)b.p) ? ((char *)b.p) : strdup("");
}

/*
 * The writer (linked with OBJECT, whose note gives the semaphore) writes
 * N counted events, M disabled ones and a few Sync events; bpftrace
 * attached by pid must see exactly the N, with the right arguments.
 */
static void count_with_bpftrace(const char *writer, const char *object, const char *match)
{
	const unsigned long n = 2000, m = 700;
	char *dir = th_tmpdir(), *script, *bt, *trace, *wlog, *blog, *text, *wout, *res;
	char semarg[32], nbuf[32], mbuf[32], pidbuf[32];
	uint64_t sem;
	unsigned long got_n = 0, got_bytes = 0, got_sum = 0, got_mask = 0;
	pid_t wpid, bpid;
	int nprobes, st;

	cr_assert_not_null(dir);
	sem = note_semaphore(object, &nprobes);
	cr_assert(nprobes >= 1 && sem, "no ringpipe:event probe with a semaphore in %s", object);
	snprintf(semarg, sizeof(semarg), "0x%" PRIx64, sem);
	snprintf(nbuf, sizeof(nbuf), "%lu", n);
	snprintf(mbuf, sizeof(mbuf), "%lu", m);
	cr_assert(asprintf(&trace, "%s/w.nettrace", dir) > 0);
	cr_assert(asprintf(&wlog, "%s/writer.log", dir) > 0);
	cr_assert(asprintf(&blog, "%s/bpftrace.log", dir) > 0);
	cr_assert(asprintf(&bt, "%s/count.bt", dir) > 0);

	{
		char *wargv[] = { (char *)writer, semarg, (char *)match, nbuf, mbuf, trace, NULL };

		wpid = spawn(wargv, wlog);
	}
	snprintf(pidbuf, sizeof(pidbuf), "%d", (int)wpid);
	/* Sync (id 9) through both write functions (8 and 16 bytes), then a
	 * signal that releases the writer; everything else is counted, so a
	 * probe that fired for the disabled event (id 8) would show */
	cr_assert(asprintf(&script,
		"usdt:%s:ringpipe:event /pid == %d && arg2 == 9/ {\n"
		"	if (arg4 == 8) { @w = 1; }\n"
		"	if (arg4 == 16) { @v = 1; }\n"
		"	if (@w == 1 && @v == 1 && @sent == 0) { @sent = 1; signal(\"SIGUSR1\"); }\n"
		"}\n"
		"usdt:%s:ringpipe:event /pid == %d && arg2 != 9/ {\n"
		"	@n++; @bytes += arg4; @sum += *(uint64 *)uptr(arg3); @mask |= arg5;\n"
		"	@names[str(arg0), str(arg1)] = count();\n"
		"}\n"
		"END {\n"
		"	printf(\"RESULT n=%%d bytes=%%d sum=%%d mask=%%d\\n\", @n, @bytes, @sum, @mask);\n"
		"	clear(@n); clear(@bytes); clear(@sum); clear(@mask);\n"
		"	clear(@w); clear(@v); clear(@sent);\n"
		"}\n", object, (int)wpid, object, (int)wpid) > 0);
	cr_assert_eq(th_write_file(bt, script, strlen(script)), 0);
	{
		char *bargv[] = { "bpftrace", "--unsafe", "-p", pidbuf, bt, NULL };

		bpid = spawn(bargv, blog);
	}

	/* the writer ends by itself once traced (or after its own 60 s
	 * timeouts); a bpftrace that fails to attach must not leave it waiting */
	for (;;) {
		st = wait_ms(wpid, 100);
		if (st != -1)
			break;
		if (waitpid(bpid, &st, WNOHANG) == bpid) {
			kill(wpid, SIGKILL);
			waitpid(wpid, NULL, 0);
			text = slurp(blog);
			cr_assert_fail("bpftrace ended before the writer (status %d):\n%s", st, text);
		}
	}
	wout = slurp(wlog);
	for (char *c = wout; *c; c++)
		if (*c == '\n')
			*c = ' ';
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the writer failed (%d):\n%s", st, wout);
	/* bpftrace -p ends when its target does; END prints the result */
	st = wait_ms(bpid, 60000);	/* a hang guard */
	if (st == -1) {
		kill(bpid, SIGINT);
		st = wait_ms(bpid, 5000);
		if (st == -1) {
			kill(bpid, SIGKILL);
			waitpid(bpid, NULL, 0);
		}
	}
	text = slurp(blog);
	res = strstr(text, "RESULT ");
	cr_assert_not_null(res, "no result from bpftrace:\n%s", text);
	cr_assert_eq(sscanf(res, "RESULT n=%lu bytes=%lu sum=%lu mask=%lu", &got_n, &got_bytes,
			    &got_sum, &got_mask), 4, "%s", res);
	cr_log_info("%s: bpftrace counted %lu of %lu events (%s)", object, got_n, n, wout);
	cr_assert_eq(got_n, n, "bpftrace counted %lu events, the writer wrote %lu:\n%s", got_n, n,
		     text);
	cr_assert_eq(got_bytes, n * 32, "payload lengths (arg4) sum to %lu", got_bytes);
	cr_assert_eq(got_sum, n * (n + 1) / 2, "payloads (arg3) do not start with 1..N: %lu",
		     got_sum);
	cr_assert_neq(got_mask, 0, "no session bit in the mask (arg5)");
	cr_assert_eq(got_mask & (got_mask - 1), 0, "one session, one bit: 0x%lx", got_mask);
	cr_assert(strstr(text, "@names[Rp-Usdt-Test, Counted]: 2000"),
		  "provider and event names (arg0, arg1) wrong:\n%s", text);
	free(script), free(bt), free(trace), free(wlog), free(blog), free(text), free(wout);
	th_rmdir(dir);
}

Test(usdt, bpftrace_counts_exactly_the_writes_shared_lib, .timeout = 180)
{
	char *writer, *so;

	NEED_BPFTRACE();
	writer = out_path("usdt_writer");
	so = out_path("../libringpipe.so");
	count_with_bpftrace(writer, so, "libringpipe.so");
	free(writer);
	free(so);
}

Test(usdt, bpftrace_counts_exactly_the_writes_static_lib, .timeout = 180)
{
	char *writer;

	NEED_BPFTRACE();
	writer = out_path("usdt_writer_static");
	count_with_bpftrace(writer, writer, "");
	free(writer);
}
