// SPDX-License-Identifier: MIT
/*
 * `ringpipe ps`, `collect` and `stop`, and the IPC client under them.
 *
 * The client's request bytes are checked against the worked example of the
 * protocol notes, its socket discovery and reverse-mode advertise handling
 * against fake peers, and the CLI's usage errors without any runtime. The
 * interop tests then run the real thing: tests/interop/DotnetApp (a .NET
 * program with an EventSource) is listed by `ringpipe ps`, traced through
 * `ringpipe collect -p`, and launched under `ringpipe collect -- dotnet ...`
 * so that the trace starts at its first event; TraceEvent must read every
 * file. Without the .NET SDK these skip with the reason, unless
 * RINGPIPE_REQUIRE_INTEROP=1, which makes them fail. The same checks run
 * against ringpipe-demo (ringpipe's own IPC server) when it is built.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>

#include "clock.h"
#include "helpers.h"
#include "ipc.h"		/* rp_proc_start_ticks: the key of a socket's name */
#include "ipc_client.h"


/* ---- helpers ------------------------------------------------------------- */

static uint64_t now_ms(void)
{
	return rp_clock_mono_ns() / 1000000u;
}

/* Reads exactly n bytes within timeout_ms; 0, or -ETIMEDOUT, -ECONNRESET, -errno. */
static int read_exact(int fd, void *buf, size_t n, int timeout_ms)
{
	uint64_t deadline = now_ms() + (uint64_t)timeout_ms;
	uint8_t *p = buf;

	while (n) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		uint64_t now = now_ms();
		ssize_t got;

		if (now >= deadline)
			return -ETIMEDOUT;
		if (poll(&pf, 1, (int)(deadline - now)) <= 0)
			continue;
		got = read(fd, p, n);
		if (got < 0 && errno != EINTR && errno != EAGAIN)
			return -errno;
		if (got == 0)
			return -ECONNRESET;
		if (got > 0) {
			p += got;
			n -= (size_t)got;
		}
	}
	return 0;
}

/* The directory of the ringpipe tool, where ringpipe-demo is built too. */
static char *demo_path(void)
{
	const char *env = getenv("RINGPIPE_DEMO"), *tool = th_tool(), *slash;
	char *p = NULL;

	if (env && *env)
		return strdup(env);
	slash = strrchr(tool, '/');
	cr_assert(asprintf(&p, "%.*sringpipe-demo", slash ? (int)(slash - tool + 1) : 0,
			   tool) > 0);
	return p;
}

struct proc {
	pid_t pid;
	int out_fd;		/* its stdout */
	char line[256];
};

/* Starts argv with stdout on a pipe; waits for its "pid N" line. */
static void proc_start(struct proc *p, char *const argv[])
{
	int pfd[2];
	size_t n = 0;
	uint64_t deadline;

	cr_assert_eq(pipe2(pfd, O_CLOEXEC), 0);
	p->pid = fork();
	cr_assert_geq(p->pid, 0);
	if (p->pid == 0) {
		dup2(pfd[1], STDOUT_FILENO);
		execvp(argv[0], argv);
		_exit(127);
	}
	close(pfd[1]);
	p->out_fd = pfd[0];
	deadline = now_ms() + 120000;	/* a .NET start on a loaded host: seconds */
	while (now_ms() < deadline && n < sizeof(p->line) - 1) {
		struct pollfd pf = { .fd = p->out_fd, .events = POLLIN };
		ssize_t got;

		if (poll(&pf, 1, 100) <= 0)
			continue;
		got = read(p->out_fd, p->line + n, 1);
		if (got <= 0)
			break;
		if (p->line[n] == '\n') {
			p->line[n] = 0;
			break;
		}
		n++;
	}
	cr_assert(!strncmp(p->line, "pid ", 4), "%s did not print its pid (got '%s')", argv[0],
		  p->line);
	cr_assert_eq(atoi(p->line + 4), p->pid, "%s", p->line);
}

/* Waits (a hang guard of 60 s) until a diagnostic socket for pid exists. */
static void wait_socket(pid_t pid)
{
	char path[IPCC_PATH_MAX];
	int i;

	for (i = 0; i < 1200; i++) {
		if (!ipcc_find_socket(pid, path, sizeof(path)))
			return;
		usleep(50000);
	}
	cr_assert_fail("pid %d never created its diagnostic socket", (int)pid);
}

/* Waits until the trace in file has grown 1 KiB past its first bytes (the
 * header and the first block): events are in it, and flowing. A hang
 * guard of 60 s. */
static void wait_trace_grows(const char *file)
{
	uint64_t deadline = now_ms() + 60000, first = 0;
	struct stat sb;

	for (;;) {
		uint64_t size = stat(file, &sb) ? 0 : (uint64_t)sb.st_size;

		if (!first)
			first = size;
		if (first && size >= first + 1024)
			return;
		cr_assert_lt(now_ms(), deadline, "%s stayed at %" PRIu64 " bytes for 60 s", file,
			     size);
		usleep(10000);
	}
}

static void proc_kill(struct proc *p)
{
	if (p->pid > 0) {
		kill(p->pid, SIGKILL);
		waitpid(p->pid, NULL, 0);
	}
	if (p->out_fd >= 0)
		close(p->out_fd);
}

/* TraceEvent's counts of file; asserts that it read the file without error. */
static void te_counts(const char *dll, const char *file, struct bytebuf *out)
{
	int rc = th_run_fmt(out, "dotnet '%s' counts '%s' 2>&1", dll, file);

	cr_assert_eq(rc, 0, "TraceEvent could not read %s (exit %d): %s", file, rc, th_text(out));
}

/* ---- the client, without a runtime --------------------------------------- */

/* The CollectTracing2 worked example of the protocol notes, byte for byte. */
Test(collect, collect_tracing2_request_matches_the_worked_example)
{
	static const uint8_t want_head[] = {
		0x44, 0x4F, 0x54, 0x4E, 0x45, 0x54, 0x5F, 0x49, 0x50, 0x43, 0x5F, 0x56, 0x31, 0x00,
		0x77, 0x00, 0x02, 0x03, 0x00, 0x00,
		0x00, 0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01,
		0x01, 0x00, 0x00, 0x00,
		0x01, 0, 0, 0, 0, 0, 0, 0, 0x04, 0, 0, 0,
		0x20, 0x00, 0x00, 0x00, 0x4D, 0x00,
	};
	static const uint8_t want_tail[] = { 0x65, 0x00, 0x00, 0x00, 0x01, 0, 0, 0, 0x00, 0x00 };
	struct rp_provider_config pc = { .name = "Microsoft-Windows-DotNETRuntime",
					 .keywords = 1, .level = 4 };
	struct ipcc_collect_opts o = { .providers = &pc, .nproviders = 1, .buffer_mb = 256,
				       .rundown = true, .buffering = RP_BUFFERING_DROP };
	struct bytebuf b = { 0 };
	uint8_t msg[256], id;
	char err[128];
	int sv[2];

	cr_assert_eq(ipcc_collect_payload(&o, &b, &id, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(id, IPCC_EP_COLLECT_TRACING2);
	cr_assert_eq(b.len, 99u);
	/* through the real send path */
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	cr_assert_eq(ipcc_send_request(sv[0], IPCC_SET_EVENTPIPE, id, b.p, b.len), 0);
	cr_assert_eq(read_exact(sv[1], msg, 119, 1000), 0);
	cr_assert_eq(memcmp(msg, want_head, sizeof(want_head)), 0);
	cr_assert_eq(memcmp(msg + 119 - sizeof(want_tail), want_tail, sizeof(want_tail)), 0);
	close(sv[0]);
	close(sv[1]);
	bb_free(&b);
}

/* Block mode is CollectTracing6: CT5's layout plus a trailing bufferingMode 1. */
Test(collect, block_mode_is_collect_tracing6)
{
	struct rp_provider_config pc[2] = { { .name = "A", .keywords = 0x10, .level = 5,
					      .args = "EventCounterIntervalSec=1" },
					    { .name = "B\xc3\xa9", .level = 0 } };
	struct ipcc_collect_opts o = { .providers = pc, .nproviders = 2, .buffer_mb = 64,
				       .rundown = false, .buffering = RP_BUFFERING_BLOCK };
	struct bytebuf b = { 0 };
	uint64_t rundown;
	uint32_t u;
	uint8_t id;
	char err[128];
	size_t off, args_units = strlen(pc[0].args) + 1;

	cr_assert_eq(ipcc_collect_payload(&o, &b, &id, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(id, IPCC_EP_COLLECT_TRACING6);
	memcpy(&u, b.p, 4);
	cr_assert_eq(u, 0, "session_type");
	memcpy(&u, b.p + 4, 4);
	cr_assert_eq(u, 64);
	memcpy(&u, b.p + 8, 4);
	cr_assert_eq(u, 1, "format");
	memcpy(&rundown, b.p + 12, 8);
	cr_assert_eq(rundown, 0);
	cr_assert_eq(b.p[20], 1, "stackwalk");
	memcpy(&u, b.p + 21, 4);
	cr_assert_eq(u, 2);
	/* provider A: keywords, level, name "A" (2 units), args, filter */
	off = 25 + 8 + 4 + 4 + 4 + 4 + 2 * args_units + 1 + 4;
	/* provider B: name is 'B', U+00E9, NUL */
	memcpy(&u, b.p + off + 12, 4);
	cr_assert_eq(u, 3);
	cr_assert_eq(b.p[off + 16 + 2], 0xe9);
	memcpy(&u, b.p + b.len - 4, 4);
	cr_assert_eq(u, 1, "bufferingMode");
	cr_assert_eq(b.len, off + 8 + 4 + 4 + 6 + 4 + 2 + 1 + 4 + 4);
	bb_free(&b);

	/* bad input is refused, never coerced */
	o.buffering = 2;
	cr_assert_eq(ipcc_collect_payload(&o, &b, &id, err, sizeof(err)), -EINVAL);
	o.buffering = RP_BUFFERING_DROP;
	pc[1].level = 6;
	cr_assert_eq(ipcc_collect_payload(&o, &b, &id, err, sizeof(err)), -EINVAL);
	pc[1].level = 4;
	pc[1].name = "bad\xff";
	cr_assert_eq(ipcc_collect_payload(&o, &b, &id, err, sizeof(err)), -EINVAL);
	bb_free(&b);
}

/* Replies: OK with payload, error HRESULT, garbage, a server that hangs up. */
Test(collect, replies_and_errors_are_decoded)
{
	static const uint8_t ok[28] = { 'D', 'O', 'T', 'N', 'E', 'T', '_', 'I', 'P', 'C', '_', 'V',
					'1', 0, 28, 0, 0xff, 0x00, 0, 0, 0x34, 0x12, 0, 0, 0, 0,
					0, 0 };
	static const uint8_t err[24] = { 'D', 'O', 'T', 'N', 'E', 'T', '_', 'I', 'P', 'C', '_',
					 'V', '1', 0, 24, 0, 0xff, 0xff, 0, 0, 0x85, 0x13, 0x13,
					 0x80 };
	struct ipcc_reply *r = malloc(sizeof(*r));
	int sv[2];

	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	cr_assert_eq(write(sv[1], ok, sizeof(ok)), (ssize_t)sizeof(ok));
	cr_assert_eq(ipcc_read_reply(sv[0], r, 1000, NULL), 0);
	cr_assert_eq(r->len, 8);
	cr_assert_eq(r->payload[0], 0x34);
	cr_assert_eq(write(sv[1], err, sizeof(err)), (ssize_t)sizeof(err));
	cr_assert_eq(ipcc_read_reply(sv[0], r, 1000, NULL), -EREMOTEIO);
	cr_assert_eq(r->hresult, IPCC_HR_UNKNOWN_COMMAND);
	cr_assert_eq(write(sv[1], "HTTP/1.1 200 OK\r\nA: b\r\n\r\n", 25), 25);
	cr_assert_eq(ipcc_read_reply(sv[0], r, 1000, NULL), -EBADMSG);
	cr_assert_eq(ipcc_read_reply(sv[0], r, 100, NULL), -ETIMEDOUT);
	close(sv[1]);
	cr_assert_eq(ipcc_read_reply(sv[0], r, 1000, NULL), -ECONNRESET);
	close(sv[0]);
	free(r);
}

static int bind_at(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "bind %s", path);
	return fd;
}

/* -p finds dotnet-diagnostic-<pid>-<digits>-socket, the newest one. */
/*
 * The process's own socket (its start time as the key) wins over a newer
 * one; a socket older than the process (left by an earlier process with
 * the same pid) is never taken; otherwise the newest well-formed name.
 */
Test(collect, find_socket_takes_the_process_own_socket)
{
	char *dir = strdup("/tmp/rp-sock-XXXXXX"), *a, *b, *c, *d, found[IPCC_PATH_MAX];
	struct timespec old[2] = { { 1000000, 0 }, { 1000000, 0 } };
	int pid = (int)getpid(), fa, fb, fc;

	/* /tmp, not $TMPDIR: socket paths must stay under 108 bytes */
	cr_assert_not_null(mkdtemp(dir));
	cr_assert(asprintf(&a, "%s/dotnet-diagnostic-%d-%llu-socket", dir, pid,
			   rp_proc_start_ticks(pid)) > 0);
	cr_assert(asprintf(&b, "%s/dotnet-diagnostic-%d-222-socket", dir, pid) > 0);
	cr_assert(asprintf(&c, "%s/dotnet-diagnostic-%d-3x3-socket", dir, pid) > 0);
	cr_assert(asprintf(&d, "%s/dotnet-diagnostic-%d-444-socket", dir, pid) > 0);
	fa = bind_at(a);
	usleep(20000);
	fb = bind_at(b);	/* newer than a, but not this process's key */
	fc = bind_at(c);
	cr_assert_eq(th_write_file(d, "not a socket", 12), 0);
	setenv("TMPDIR", dir, 1);
	cr_assert_eq(ipcc_find_socket(pid, found, sizeof(found)), 0);
	cr_assert_str_eq(found, a, "the process's own key wins over a newer name");
	unlink(a);
	cr_assert_eq(ipcc_find_socket(pid, found, sizeof(found)), 0);
	cr_assert_str_eq(found, b, "another key, not older than the process");
	cr_assert_eq(utimensat(AT_FDCWD, b, old, 0), 0);
	cr_assert_eq(ipcc_find_socket(pid, found, sizeof(found)), -ENOENT,
		     "a socket older than the process is a previous process's: %s", found);
	unlink(b);
	cr_assert_eq(ipcc_find_socket(pid, found, sizeof(found)), -ENOENT);
	cr_assert_eq(ipcc_find_socket(0x7ffffff0, found, sizeof(found)), -ESRCH);
	close(fa);
	close(fb);
	close(fc);
	free(a);
	free(b);
	free(c);
	free(d);
	th_rmdir(dir);
}

/* Connects to path and sends an advertise; the connection stays open. */
static int advertise(const char *path, const char *magic, uint64_t pid)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	uint8_t adv[IPCC_ADVERTISE_SIZE] = { 0 };
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)))
		_exit(3);
	memcpy(adv, magic, 8);
	memset(adv + 8, 0xab, 16);
	memcpy(adv + 24, &pid, 8);
	if (write(fd, adv, sizeof(adv)) != (ssize_t)sizeof(adv))
		_exit(4);
	return fd;
}

/* Reverse mode: bad magic and other pids are dropped, the right one is used. */
Test(collect, reverse_mode_takes_only_the_expected_advertise)
{
	char *dir = th_tmpdir(), *path;
	struct ipcc_endpoint ep;
	int lfd, fd;
	pid_t child;

	cr_assert(asprintf(&path, "%s/rev.sock", dir) > 0);
	lfd = ipcc_reverse_listen(path);
	cr_assert_geq(lfd, 0, "%s", strerror(-lfd));
	child = fork();
	if (child == 0) {
		/* connections queue in the order they are made: no timing */
		int fds[3] = { advertise(path, "ADVR_V2", 4242), advertise(path, "ADVR_V1", 777),
			       advertise(path, "ADVR_V1", 4242) };
		uint8_t c;

		/* stay connected until the other side hangs up */
		for (int i = 0; i < 3; i++)
			while (read(fds[i], &c, 1) > 0)
				;
		_exit(0);
	}
	ipcc_endpoint_init_reverse(&ep, lfd, 4242);
	fd = ipcc_endpoint_open(&ep, 60000);	/* a hang guard */
	cr_assert_geq(fd, 0, "%s", strerror(-fd));
	cr_assert_eq(ep.adv_pid, 4242u);
	cr_assert_eq(ep.cookie[0], 0xab);
	cr_assert_eq(ep.ignored, 2);
	close(fd);
	/* nobody else connects: a timeout, and a cancel flag ends the wait */
	cr_assert_eq(ipcc_endpoint_open(&ep, 200), -ETIMEDOUT);
	ep.cancel = 1;
	cr_assert_eq(ipcc_endpoint_open(&ep, -1), -ECANCELED);
	waitpid(child, NULL, 0);
	close(lfd);
	free(path);
	th_rmdir(dir);
}

/* ---- the CLI's usage errors ------------------------------------------------ */

Test(collect, usage_errors_exit_2_with_a_message)
{
	static const struct {
		const char *args, *msg;
	} cases[] = {
		{ "collect -p 1 --buffering-mode fast", "--buffering-mode must be drop or block, not 'fast'" },
		{ "collect -p 1 --buffering-mode ''", "--buffering-mode must be drop or block" },
		{ "collect -p 1 --buffering-mode 2", "--buffering-mode must be drop or block, not '2'" },
		{ "collect -p 1 --duration 0", "--duration takes" },
		{ "collect -p 1 --duration 1:99:00", "--duration takes" },
		{ "collect -p 1 --duration 5x", "--duration takes" },
		{ "collect -p 1 --format v6", "--format must be v5" },
		{ "collect -p abc", "-p takes a process id" },
		{ "collect -p 1 --providers 'A:zz'", "--providers: keywords 'zz'" },
		{ "collect -p 1 --providers 'A,'", "--providers: trailing ','" },
		{ "collect -p 1 --buffer-mb 0", "--buffer-mb must be between" },
		{ "collect -p 1 --bogus", "unknown option '--bogus'" },
		{ "collect -p 1 -o", "needs a value" },
		{ "collect", "-p PID or -- CMD is required" },
		{ "collect -p 1 -- true", "either -p PID or -- CMD" },
		{ "collect --", "must be followed by a command" },
		{ "stop -p 1", "--session ID are required" },
		{ "stop -p 1 --session xyz", "--session takes a session id" },
		{ "ps --bogus", "unknown option" },
	};
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct bytebuf out = { 0 };
		int rc = th_run_fmt(&out, "'%s' %s 2>&1", th_tool(), cases[i].args);

		cr_assert_eq(rc, 2, "'ringpipe %s' exited %d, not 2: %s", cases[i].args, rc,
			     th_text(&out));
		cr_assert(strstr(th_text(&out), cases[i].msg), "'ringpipe %s' said '%s', not '%s'",
			  cases[i].args, th_text(&out), cases[i].msg);
		bb_free(&out);
	}
}

Test(collect, missing_targets_are_clear_errors)
{
	struct bytebuf out = { 0 };
	int rc;

	rc = th_run_fmt(&out, "'%s' collect -p 2147483646 2>&1", th_tool());
	cr_assert_eq(rc, 1, "%s", th_text(&out));
	cr_assert(strstr(th_text(&out), "no process with pid 2147483646"), "%s", th_text(&out));
	bb_free(&out);
	/* a live process without a socket: ourselves */
	rc = th_run_fmt(&out, "'%s' collect -p %d 2>&1", th_tool(), (int)getpid());
	cr_assert_eq(rc, 1, "%s", th_text(&out));
	cr_assert(strstr(th_text(&out), "has no diagnostic socket"), "%s", th_text(&out));
	bb_free(&out);
	rc = th_run_fmt(&out, "'%s' collect -- /nonexistent/program 2>&1", th_tool());
	cr_assert_eq(rc, 1, "%s", th_text(&out));
	cr_assert(strstr(th_text(&out), "cannot run '/nonexistent/program'"), "%s", th_text(&out));
	bb_free(&out);
	rc = th_run_fmt(&out, "'%s' collect -- true 2>&1", th_tool());
	cr_assert_eq(rc, 1, "%s", th_text(&out));
	cr_assert(strstr(th_text(&out), "before its runtime connected"), "%s", th_text(&out));
	bb_free(&out);
}

/* ---- against a real .NET runtime ------------------------------------------ */

Test(collect_interop, ps_lists_a_dotnet_process, .timeout = 120)
{
	const char *dll = th_dotnet_app();
	char *argv[] = { "dotnet", (char *)dll, "--duration", "30", NULL }, want[64];
	struct proc app = { .out_fd = -1 };
	struct bytebuf out = { 0 };
	int rc;

	proc_start(&app, argv);
	wait_socket(app.pid);
	rc = th_run_fmt(&out, "'%s' ps 2>&1", th_tool());
	cr_assert_eq(rc, 0, "%s", th_text(&out));
	snprintf(want, sizeof(want), "\n%7d  dotnet ", (int)app.pid);
	cr_assert(strstr(th_text(&out), want), "pid %d not listed:\n%s", (int)app.pid, th_text(&out));
	cr_assert(strstr(th_text(&out), "DotnetApp.dll --duration 30"), "%s", th_text(&out));
	bb_free(&out);
	rc = th_run_fmt(&out, "'%s' ps -v 2>&1", th_tool());
	cr_assert_eq(rc, 0, "%s", th_text(&out));
	cr_assert(strstr(th_text(&out), "runtime: DotnetApp "), "ProcessInfo not shown:\n%s",
		  th_text(&out));
	bb_free(&out);
	proc_kill(&app);
}

Test(collect_interop, collect_attaches_to_a_dotnet_process, .timeout = 120)
{
	TH_NEED_TRACEDUMP(te);
	const char *dll = th_dotnet_app();
	char *argv[] = { "dotnet", (char *)dll, "--duration", "30", "--rate", "50", NULL };
	char *dir = th_tmpdir(), *file;
	struct proc app = { .out_fd = -1 };
	struct bytebuf out = { 0 }, counts = { 0 };
	uint64_t ticks;
	int rc;

	cr_assert(asprintf(&file, "%s/attach.nettrace", dir) > 0);
	proc_start(&app, argv);
	wait_socket(app.pid);
	rc = th_run_fmt(&out, "'%s' collect -p %d --providers "
		     "Ringpipe-DotnetApp,Microsoft-Windows-DotNETRuntime:0x1:4 --duration 3 "
		     "-o '%s' 2>&1", th_tool(), (int)app.pid, file);
	cr_assert_eq(rc, 0, "collect exited %d: %s", rc, th_text(&out));
	cr_assert(strstr(th_text(&out), " 0 lost (EventsLost)"), "%s", th_text(&out));
	te_counts(te, file, &counts);
	ticks = th_count_of(th_text(&counts), "Ringpipe-DotnetApp/Tick");
	/* 3 s at 50/s */
	cr_assert(ticks >= 100 && ticks <= 200, "%" PRIu64 " Tick events:\n%s", ticks,
		  th_text(&counts));
	cr_assert_gt(th_count_of(th_text(&counts), "Microsoft-Windows-DotNETRuntime/GC/Start"), 0,
		     "no GC events:\n%s", th_text(&counts));
	cr_assert(strstr(th_text(&counts), "#lost\t0"), "%s", th_text(&counts));

	bb_free(&out);
	bb_free(&counts);
	proc_kill(&app);
	free(file);
	th_rmdir(dir);
}

/* `ringpipe stop` ends a collect that runs without a duration. */
Test(collect_interop, stop_ends_a_session_by_id, .timeout = 120)
{
	TH_NEED_TRACEDUMP(te);
	const char *dll = th_dotnet_app();
	char *argv[] = { "dotnet", (char *)dll, "--duration", "30", NULL };
	char *dir = th_tmpdir(), *file, *log, id[32] = "";
	struct proc app = { .out_fd = -1 };
	struct bytebuf out = { 0 }, counts = { 0 };
	pid_t collector;
	int i, st;

	cr_assert(asprintf(&file, "%s/stop.nettrace", dir) > 0);
	cr_assert(asprintf(&log, "%s/collect.log", dir) > 0);
	proc_start(&app, argv);
	wait_socket(app.pid);
	collector = fork();
	if (collector == 0) {
		char pid[16];
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		snprintf(pid, sizeof(pid), "%d", (int)app.pid);
		dup2(fd, STDERR_FILENO);
		dup2(fd, STDOUT_FILENO);
		execl(th_tool(), th_tool(), "collect", "-p", pid, "--providers",
		      "Ringpipe-DotnetApp", "-o", file, (char *)NULL);
		_exit(127);
	}
	for (i = 0; i < 1200 && !*id; i++) {
		struct bytebuf l = { 0 };
		const char *s;

		usleep(50000);
		if (th_read_file(log, &l) == 0 && (s = strstr(th_text(&l), "session 0x")))
			snprintf(id, sizeof(id), "%.*s", (int)strspn(s + 8, "0x123456789abcdef"),
				 s + 8);
		bb_free(&l);
	}
	cr_assert(*id, "collect did not print its session id");
	wait_trace_grows(file);
	cr_assert_eq(th_run_fmt(&out, "'%s' stop -p %d --session %s 2>&1", th_tool(), (int)app.pid,
			     id), 0, "%s", th_text(&out));
	cr_assert_eq(waitpid(collector, &st, 0), collector);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "collect ended with 0x%x", st);
	te_counts(te, file, &counts);
	cr_assert_gt(th_count_of(th_text(&counts), "Ringpipe-DotnetApp/Tick"), 0, "%s", th_text(&counts));
	bb_free(&out);
	bb_free(&counts);
	proc_kill(&app);
	free(file);
	free(log);
	th_rmdir(dir);
}

/*
 * collect -- CMD: the runtime starts suspended and connects to us, so the
 * trace holds every Tick the program wrote, from N=1.
 */
static void launch_from_first_event(const char *te, const char *cmd, const char *provider,
				    const char *event, const char *first)
{
	char *dir = th_tmpdir(), *file, *dump = NULL;
	struct bytebuf out = { 0 }, counts = { 0 }, d = { 0 };
	const char *t;
	uint64_t written, traced;
	int rc;

	cr_assert(asprintf(&file, "%s/launch.nettrace", dir) > 0);
	rc = th_run_fmt(&out, "'%s' collect --providers %s -o '%s' -- %s 2>&1", th_tool(), provider,
		     file, cmd);
	cr_assert_eq(rc, 0, "collect exited %d: %s", rc, th_text(&out));
	t = strstr(th_text(&out), "ticks ");
	cr_assert_not_null(t, "the program did not finish: %s", th_text(&out));
	written = strtoull(t + 6, NULL, 10);
	te_counts(te, file, &counts);
	traced = th_count_of(th_text(&counts), event);
	cr_assert_eq(traced, written, "the program wrote %" PRIu64 " ticks, the trace has %"
		     PRIu64 ":\n%s\n%s", written, traced, th_text(&counts), th_text(&out));
	cr_assert(strstr(th_text(&counts), "#lost\t0"), "%s", th_text(&counts));
	cr_assert(asprintf(&dump, "dotnet '%s' dump '%s' | grep -m1 '%s'", te, file, first) > 0);
	cr_assert_eq(th_run(dump, &d), 0, "the first event (%s) is not in the trace", first);
	free(dump);
	bb_free(&d);
	bb_free(&out);
	bb_free(&counts);
	free(file);
	th_rmdir(dir);
}

Test(collect_interop, collect_launch_traces_a_dotnet_program_from_its_first_event,
     .timeout = 120)
{
	TH_NEED_TRACEDUMP(te);
	const char *dll = th_dotnet_app();
	char *cmd = NULL;

	cr_assert(asprintf(&cmd, "dotnet '%s' --duration 2 --rate 50", dll) > 0);
	launch_from_first_event(te, cmd, "Ringpipe-DotnetApp,Microsoft-Windows-DotNETRuntime:0x1:4",
				"Ringpipe-DotnetApp/Tick", "\"fields\":{\"N\":1}");
	free(cmd);
}

/* .NET 10 has no CollectTracing6: Block is refused with a clear message. */
Test(collect_interop, block_mode_needs_a_runtime_that_has_it, .timeout = 120)
{
	TH_NEED_TRACEDUMP(te);
	const char *dll = th_dotnet_app();
	char *argv[] = { "dotnet", (char *)dll, "--duration", "30", NULL };
	char *dir = th_tmpdir(), *file;
	struct proc app = { .out_fd = -1 };
	struct bytebuf out = { 0 }, counts = { 0 };
	int rc;

	cr_assert(asprintf(&file, "%s/block.nettrace", dir) > 0);
	proc_start(&app, argv);
	wait_socket(app.pid);
	rc = th_run_fmt(&out, "'%s' collect -p %d --providers Ringpipe-DotnetApp --buffering-mode "
		     "block --duration 1 -o '%s' 2>&1", th_tool(), (int)app.pid, file);
	if (rc == 0) {
		/* a runtime with CollectTracing6 */
		te_counts(te, file, &counts);
		cr_assert(strstr(th_text(&counts), "#lost\t0"), "%s", th_text(&counts));
	} else {
		cr_assert_eq(rc, 1, "%s", th_text(&out));
		cr_assert(strstr(th_text(&out), "does not support --buffering-mode block"), "%s",
			  th_text(&out));
		cr_assert_neq(access(file, F_OK), 0, "a failed session left %s behind", file);
	}
	bb_free(&out);
	bb_free(&counts);
	proc_kill(&app);
	free(file);
	th_rmdir(dir);
}

/* ---- signals, stopped targets, exit status, names ------------------------ */

/* `ringpipe ARGS >log 2>&1` in the background; its pid once it printed its
 * session id (a hang guard of 120 s). */
static pid_t collector_start(const char *args, const char *log)
{
	uint64_t deadline = now_ms() + 120000;
	pid_t pid = fork();
	char *cmd;

	cr_assert_geq(pid, 0);
	if (pid == 0) {
		/* exec: the pid signalled is ringpipe's, in the test's group */
		if (asprintf(&cmd, "exec '%s' %s >'%s' 2>&1", th_tool(), args, log) < 0)
			_exit(127);
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	while (now_ms() < deadline) {
		struct bytebuf l = { 0 };
		bool started = th_read_file(log, &l) == 0 && strstr(th_text(&l), "session 0x");

		bb_free(&l);
		if (started)
			return pid;
		if (waitpid(pid, NULL, WNOHANG) == pid)
			cr_assert_fail("ringpipe %s ended before its session started", args);
		usleep(50000);
	}
	cr_assert_fail("ringpipe %s did not start a session in 120 s", args);
	return -1;
}

/* Waits (a hang guard of 60 s) until sig is no longer pending for pid. */
static void wait_delivered(pid_t pid, int sig)
{
	uint64_t deadline = now_ms() + 60000;
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	while (now_ms() < deadline) {
		struct bytebuf st = { 0 };
		const char *a, *b;
		bool pending;

		if (th_read_file(path, &st))
			return;
		a = strstr(th_text(&st), "\nSigPnd:\t");
		b = strstr(th_text(&st), "\nShdPnd:\t");
		pending = (a && (strtoull(a + 9, NULL, 16) >> (sig - 1) & 1)) ||
			  (b && (strtoull(b + 9, NULL, 16) >> (sig - 1) & 1));
		bb_free(&st);
		if (!pending)
			return;
		usleep(1000);
	}
	cr_assert_fail("signal %d stayed pending for pid %d", sig, (int)pid);
}

static int exit_status(pid_t pid)
{
	int st;

	cr_assert_eq(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* TraceEvent reads all of file, with Ticks in it and nothing lost. */
static void expect_whole_trace(const char *te, const char *file, const char *log)
{
	struct bytebuf counts = { 0 }, l = { 0 };
	int rc;

	th_read_file(log, &l);
	rc = th_run_fmt(&counts, "dotnet '%s' counts '%s' 2>&1", te, file);
	cr_assert_eq(rc, 0, "TraceEvent could not read %s (exit %d): %s\ncollect said:\n%s", file,
		     rc, th_text(&counts), th_text(&l));
	cr_assert_gt(th_count_of(th_text(&counts), "Ringpipe-DotnetApp/Tick"), 0, "%s", th_text(&counts));
	cr_assert(strstr(th_text(&counts), "#lost\t0"), "%s", th_text(&counts));
	bb_free(&counts);
	bb_free(&l);
}

/*
 * timeout(1) and a terminal signal the process and then its group: two
 * SIGINTs back to back are one request to stop, and the trace must end as
 * the runtime ends it, whole.
 */
Test(collect_interop, two_interrupts_back_to_back_keep_the_whole_trace, .timeout = 120)
{
	TH_NEED_TRACEDUMP(te);
	const char *dll = th_dotnet_app();
	char *argv[] = { "dotnet", (char *)dll, "--duration", "60", "--rate", "50", NULL };
	char *dir = th_tmpdir(), *file, *log, *args;
	struct proc app = { .out_fd = -1 };
	struct bytebuf l = { 0 };
	pid_t c;
	int rc;

	cr_assert(asprintf(&file, "%s/int2.nettrace", dir) > 0);
	cr_assert(asprintf(&log, "%s/collect.log", dir) > 0);
	proc_start(&app, argv);
	wait_socket(app.pid);
	cr_assert(asprintf(&args, "collect -p %d --providers Ringpipe-DotnetApp -o '%s'",
			   (int)app.pid, file) > 0);
	c = collector_start(args, log);
	wait_trace_grows(file);
	/* two deliveries, not one: signals sent while one is still pending
	 * merge into it, so the second goes once the first has arrived */
	kill(c, SIGINT);
	wait_delivered(c, SIGINT);
	kill(c, SIGINT);
	rc = exit_status(c);
	th_read_file(log, &l);
	cr_assert_eq(rc, 0, "collect exited %d after two SIGINTs:\n%s", rc, th_text(&l));
	cr_assert_null(strstr(th_text(&l), "abandoning"), "%s", th_text(&l));
	cr_assert_null(strstr(th_text(&l), "cut short"), "%s", th_text(&l));
	expect_whole_trace(te, file, log);
	/* and ringpipe's reader agrees */
	bb_free(&l);
	rc = th_run_fmt(&l, "'%s' report '%s' 2>&1", th_tool(), file);
	cr_assert_eq(rc, 0, "%s", th_text(&l));
	bb_free(&l);
	proc_kill(&app);
	free(args);
	free(file);
	free(log);
	th_rmdir(dir);
}

/* The report's own reproduction: `timeout -s INT 2 ringpipe collect ...`
 * (--preserve-status: ringpipe's exit status rather than timeout's 124),
 * three times as in the report, since whether the two signals merge into
 * one pending signal is a race. */
Test(collect_interop, timeout_s_int_keeps_the_whole_trace, .timeout = 180)
{
	TH_NEED_TRACEDUMP(te);
	const char *dll = th_dotnet_app();
	char *argv[] = { "dotnet", (char *)dll, "--duration", "60", "--rate", "50", NULL };
	char *dir = th_tmpdir(), *file, *log;
	struct proc app = { .out_fd = -1 };
	int i, rc;

	proc_start(&app, argv);
	wait_socket(app.pid);
	for (i = 0; i < 3; i++) {
		struct bytebuf l = { 0 };

		cr_assert(asprintf(&file, "%s/timeout%d.nettrace", dir, i) > 0);
		cr_assert(asprintf(&log, "%s/collect%d.log", dir, i) > 0);
		rc = th_run_fmt(NULL, "timeout --preserve-status -s INT 2 '%s' collect -p %d "
			     "--providers Ringpipe-DotnetApp -o '%s' >'%s' 2>&1", th_tool(),
			     (int)app.pid, file, log);
		th_read_file(log, &l);
		cr_assert_eq(rc, 0, "run %d: collect under timeout -s INT exited %d:\n%s", i + 1,
			     rc, th_text(&l));
		cr_assert_null(strstr(th_text(&l), "abandoning"), "%s", th_text(&l));
		cr_assert_null(strstr(th_text(&l), "cut short"), "%s", th_text(&l));
		expect_whole_trace(te, file, log);
		bb_free(&l);
		free(file);
		free(log);
	}
	proc_kill(&app);
	th_rmdir(dir);
}

/*
 * A deliberate second Ctrl-C, well after the first, still abandons the
 * stream and says so. The target is stopped so that the first request
 * cannot have been answered when the second comes.
 */
Test(collect_interop, a_later_second_interrupt_abandons_and_says_so, .timeout = 120)
{
	const char *dll = th_dotnet_app();
	char *argv[] = { "dotnet", (char *)dll, "--duration", "60", "--rate", "50", NULL };
	char *dir = th_tmpdir(), *file, *log, *args;
	struct proc app = { .out_fd = -1 };
	struct bytebuf l = { 0 };
	pid_t c;
	int rc;

	cr_assert(asprintf(&file, "%s/abandon.nettrace", dir) > 0);
	cr_assert(asprintf(&log, "%s/collect.log", dir) > 0);
	proc_start(&app, argv);
	wait_socket(app.pid);
	cr_assert(asprintf(&args, "collect -p %d --providers Ringpipe-DotnetApp -o '%s'",
			   (int)app.pid, file) > 0);
	c = collector_start(args, log);
	kill(app.pid, SIGSTOP);
	kill(c, SIGINT);
	/* past the window in which signals are merged, counted from the
	 * first one's arrival: a later arrival only makes the gap longer */
	wait_delivered(c, SIGINT);
	usleep(1500000);
	kill(c, SIGINT);
	rc = exit_status(c);
	kill(app.pid, SIGCONT);
	th_read_file(log, &l);
	cr_assert(strstr(th_text(&l), "abandoning the rest of the stream"),
		  "exit %d:\n%s", rc, th_text(&l));
	cr_assert(strstr(th_text(&l), "may be incomplete"), "%s", th_text(&l));
	bb_free(&l);
	proc_kill(&app);
	free(args);
	free(file);
	free(log);
	th_rmdir(dir);
}

/* A stopped (SIGSTOP) target accepts the connection but never answers:
 * collect must give up on its own, saying why. */
Test(collect_interop, collect_gives_up_on_a_stopped_target, .timeout = 60)
{
	const char *dll = th_dotnet_app();
	char *argv[] = { "dotnet", (char *)dll, "--duration", "60", NULL };
	char *dir = th_tmpdir();
	struct proc app = { .out_fd = -1 };
	struct bytebuf out = { 0 };
	int rc;

	proc_start(&app, argv);
	wait_socket(app.pid);
	kill(app.pid, SIGSTOP);
	rc = th_run_fmt(&out, "'%s' collect -p %d --duration 1 -o '%s/stopped.nettrace' 2>&1",
		     th_tool(), (int)app.pid, dir);
	kill(app.pid, SIGCONT);
	cr_assert_eq(rc, 1, "%s", th_text(&out));
	cr_assert(strstr(th_text(&out), "the process is stopped (SIGSTOP or a debugger) and did "
			 "not answer for 3 s"), "%s", th_text(&out));
	bb_free(&out);
	cr_assert_eq(th_run_fmt(&out, "ls '%s'", dir), 0);
	cr_assert_eq(out.len, 0, "a session that never started left a file: %s", th_text(&out));
	bb_free(&out);
	proc_kill(&app);
	th_rmdir(dir);
}

/* collect -- CMD returns CMD's status, as dotnet-trace does (DotnetApp
 * exits 2 on a bad option, after its runtime started and was traced). */
Test(collect_interop, launch_returns_the_program_exit_status, .timeout = 120)
{
	const char *dll = th_dotnet_app();
	char *dir = th_tmpdir();
	struct bytebuf out = { 0 };
	int rc;

	/* 7: neither collect's own failure (1) nor a usage error (2) */
	rc = th_run_fmt(&out, "'%s' collect --providers Ringpipe-DotnetApp -o '%s/st.nettrace' -- "
		     "dotnet '%s' --duration 1 --exit-code 7 2>&1", th_tool(), dir, dll);
	cr_assert(strstr(th_text(&out), "exited with status 7"), "%s", th_text(&out));
	cr_assert(strstr(th_text(&out), " 0 lost (EventsLost)"), "the trace is good: %s",
		  th_text(&out));
	cr_assert_eq(rc, 7, "collect exited %d, the program 7:\n%s", rc, th_text(&out));
	bb_free(&out);
	cr_assert_eq(th_run_fmt(&out, "'%s' collect --help", th_tool()), 0);
	cr_assert(strstr(th_text(&out), "CMD's\nexit status"), "--help does not say so:\n%s",
		  th_text(&out));
	bb_free(&out);
	th_rmdir(dir);
}

/* A provider without keywords gets all of them from a .NET runtime too
 * (which takes 0 literally: only the events without keywords). */
Test(collect_interop, a_provider_without_keywords_gets_all_of_them, .timeout = 120)
{
	TH_NEED_TRACEDUMP(te);
	const char *dll = th_dotnet_app();
	char *argv[] = { "dotnet", (char *)dll, "--duration", "30", NULL };
	char *dir = th_tmpdir(), *file;
	struct proc app = { .out_fd = -1 };
	struct bytebuf out = { 0 }, counts = { 0 };
	int rc;

	cr_assert(asprintf(&file, "%s/kw.nettrace", dir) > 0);
	proc_start(&app, argv);
	wait_socket(app.pid);
	/* the app forces a GC every second */
	rc = th_run_fmt(&out, "'%s' collect -p %d --providers Microsoft-Windows-DotNETRuntime "
		     "--duration 2.5 --no-rundown -o '%s' 2>&1", th_tool(), (int)app.pid, file);
	cr_assert_eq(rc, 0, "%s", th_text(&out));
	te_counts(te, file, &counts);
	cr_assert_gt(th_count_of(th_text(&counts), "Microsoft-Windows-DotNETRuntime/GC/Start"), 0,
		     "no GC events without keywords:\n%s", th_text(&counts));
	bb_free(&out);
	cr_assert_eq(th_run_fmt(&out, "'%s' collect --help", th_tool()), 0);
	cr_assert_null(strstr(th_text(&out), "0 = all"), "--help still says so:\n%s", th_text(&out));
	bb_free(&out);
	bb_free(&counts);
	proc_kill(&app);
	free(file);
	th_rmdir(dir);
}

/*
 * The default file is named after the program (DotnetApp, not the host
 * "dotnet") and a second run never replaces a file without --force.
 */
Test(collect_interop, default_name_is_the_program_and_files_are_not_overwritten,
     .timeout = 120)
{
	const char *dll = th_dotnet_app();
	char *argv[] = { "dotnet", (char *)dll, "--duration", "30", NULL };
	char *dir = th_tmpdir(), *file, want[64];
	struct proc app = { .out_fd = -1 };
	struct bytebuf out = { 0 }, names = { 0 }, before = { 0 }, after = { 0 };
	int rc;

	proc_start(&app, argv);
	wait_socket(app.pid);
	rc = th_run_fmt(&out, "cd '%s' && '%s' collect -p %d --providers Ringpipe-DotnetApp "
		     "--duration 1 2>&1", dir, th_tool(), (int)app.pid);
	cr_assert_eq(rc, 0, "%s", th_text(&out));
	cr_assert_eq(th_run_fmt(&names, "cd '%s' && ls", dir), 0);
	snprintf(want, sizeof(want), "DotnetApp_%d_", (int)app.pid);
	cr_assert(!strncmp(th_text(&names), want, strlen(want)) &&
		  strstr(th_text(&names), ".nettrace\n") && !strchr(th_text(&names), ' '),
		  "want one %sYYYYMMDD_HHMMSS.nettrace, got:\n%s", want, th_text(&names));
	cr_assert(asprintf(&file, "%s/%.*s", dir, (int)strcspn(th_text(&names), "\n"),
			   th_text(&names)) > 0);
	cr_assert_eq(th_read_file(file, &before), 0);
	/* again into the same file: refused, the first trace kept */
	bb_free(&out);
	rc = th_run_fmt(&out, "'%s' collect -p %d --providers Ringpipe-DotnetApp --duration 1 "
		     "-o '%s' 2>&1", th_tool(), (int)app.pid, file);
	cr_assert_eq(rc, 1, "%s", th_text(&out));
	cr_assert(strstr(th_text(&out), "exists; pass --force to overwrite it"), "%s", th_text(&out));
	cr_assert_eq(th_read_file(file, &after), 0);
	cr_assert(before.len == after.len && !memcmp(before.p, after.p, before.len),
		  "the first trace was changed");
	bb_free(&out);
	rc = th_run_fmt(&out, "'%s' collect -p %d --providers Ringpipe-DotnetApp --duration 1 "
		     "-o '%s' --force 2>&1", th_tool(), (int)app.pid, file);
	cr_assert_eq(rc, 0, "--force: %s", th_text(&out));
	bb_free(&out);
	bb_free(&names);
	bb_free(&before);
	bb_free(&after);
	proc_kill(&app);
	free(file);
	th_rmdir(dir);
}

/* ---- against ringpipe's own server (ringpipe-demo) ------------------------ */

static char *need_demo(void)
{
	char *demo = demo_path();

	if (access(demo, X_OK) != 0) {
		free(demo);
		cr_skip_test("ringpipe-demo is not built (it links once the IPC server is in "
			     "the library)");
	}
	return demo;
}

Test(collect_demo, ps_and_collect_work_on_ringpipe_demo, .timeout = 120)
{
	TH_NEED_TRACEDUMP(te);
	char *demo = need_demo();
	char *argv[] = { demo, "--duration", "30", "--rate", "200", "--threads", "2", NULL };
	char *dir = th_tmpdir(), *file, want[64];
	struct proc app = { .out_fd = -1 };
	struct bytebuf out = { 0 }, counts = { 0 };
	uint64_t start, stop;
	int rc;

	cr_assert(asprintf(&file, "%s/demo.nettrace", dir) > 0);
	proc_start(&app, argv);
	wait_socket(app.pid);
	rc = th_run_fmt(&out, "'%s' ps 2>&1", th_tool());
	cr_assert_eq(rc, 0, "%s", th_text(&out));
	snprintf(want, sizeof(want), "\n%7d  ringpipe-demo ", (int)app.pid);
	cr_assert(strstr(th_text(&out), want), "pid %d not listed:\n%s", (int)app.pid, th_text(&out));
	bb_free(&out);
	rc = th_run_fmt(&out, "'%s' collect -p %d --providers "
		     "'Ringpipe-Demo,Ringpipe-Demo-Counters:0:0:EventCounterIntervalSec=1' "
		     "--buffering-mode block --duration 2.5 -o '%s' 2>&1", th_tool(),
		     (int)app.pid, file);
	cr_assert_eq(rc, 0, "collect exited %d: %s", rc, th_text(&out));
	te_counts(te, file, &counts);
	cr_assert_gt(th_count_of(th_text(&counts), "Ringpipe-Demo/Tick"), 500, "%s", th_text(&counts));
	start = th_count_of(th_text(&counts), "Ringpipe-Demo/Work/Start");
	stop = th_count_of(th_text(&counts), "Ringpipe-Demo/Work/Stop");
	cr_assert(start > 0 && start <= stop + 2 && stop <= start + 2, "%s", th_text(&counts));
	cr_assert_geq(th_count_of(th_text(&counts), "Ringpipe-Demo-Counters/EventCounters"), 2, "%s",
		      th_text(&counts));
	cr_assert(strstr(th_text(&counts), "#lost\t0"), "%s", th_text(&counts));
	bb_free(&out);
	bb_free(&counts);
	proc_kill(&app);
	free(file);
	free(demo);
	th_rmdir(dir);
}

Test(collect_demo, collect_launch_traces_ringpipe_demo_from_its_first_event, .timeout = 120)
{
	TH_NEED_TRACEDUMP(te);
	char *demo = need_demo(), *cmd = NULL;

	cr_assert(asprintf(&cmd, "'%s' --duration 1 --rate 1000", demo) > 0);
	launch_from_first_event(te, cmd, "Ringpipe-Demo", "Ringpipe-Demo/Tick",
				"\"Counter\":1,\"Thread\":0");
	free(cmd);
	free(demo);
}
