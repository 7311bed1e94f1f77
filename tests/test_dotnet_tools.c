// SPDX-License-Identifier: MIT
/*
 * The real .NET diagnostic tools (dotnet-trace, dotnet-counters), unchanged,
 * against ringpipe-demo: a process using libringpipe looks like a .NET
 * process to them. TraceEvent judges the traces they write.
 */
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>

#include "helpers.h"

static const char *demo_bin(void)
{
	return th_env("RINGPIPE_DEMO", ".output/default/ringpipe-demo");
}

struct demo {
	pid_t pid;
	char out[256];
};

/* Starts ringpipe-demo writing Tick events; returns once its socket exists. */
static void demo_start(struct demo *d, const char *rate)
{
	int i;

	snprintf(d->out, sizeof(d->out), "%s/ringpipe-demo-%d.out", th_env("TMPDIR", "/tmp"),
		 getpid());
	d->pid = fork();
	if (d->pid == 0) {
		int fd = open(d->out, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		dup2(fd, 1);
		dup2(fd, 2);
		execl(demo_bin(), "ringpipe-demo", "--duration", "60", "--rate", rate, (char *)NULL);
		_exit(127);
	}
	cr_assert_gt(d->pid, 0);
	for (i = 0; i < 6000; i++) {	/* a 60 s hang guard */
		struct bytebuf b = { 0 };

		th_read_file(d->out, &b);
		if (b.p && strstr((char *)b.p, "socket "))
			i = 10000;
		bb_free(&b);
		if (i < 10000)
			usleep(10000);
	}
	cr_assert_eq(i, 10001, "ringpipe-demo did not start its diagnostics server");
}

static void demo_stop(struct demo *d)
{
	int st;

	kill(d->pid, SIGTERM);
	waitpid(d->pid, &st, 0);
	unlink(d->out);
}

static void counts(const char *path, struct bytebuf *out)
{
	TH_NEED_TRACEDUMP(dll);
	char *cmd;

	cr_assert(asprintf(&cmd, "dotnet '%s' counts '%s'", dll, path) > 0);
	cr_assert_eq(th_run(cmd, out), 0, "TraceEvent could not read %s: %s", path, (char *)out->p);
	free(cmd);
}

Test(dotnet_tools, dotnet_trace_ps_and_collect_see_a_ringpipe_process, .timeout = 180)
{
	struct demo d;
	struct bytebuf out = { 0 }, c = { 0 };
	char *dir, *cmd, pidstr[32];

	TH_NEED_DOTNET_TOOL("dotnet-trace");
	dir = th_tmpdir();
	demo_start(&d, "500");
	snprintf(pidstr, sizeof(pidstr), " %d ", d.pid);
	cr_assert(asprintf(&cmd, "%s/dotnet-trace ps", th_dotnet_tools()) > 0);
	cr_assert_eq(th_run(cmd, &out), 0);
	cr_assert(strstr((char *)out.p, pidstr) && strstr((char *)out.p, "ringpipe-demo"),
		  "dotnet-trace ps does not list pid %d: %s", d.pid, (char *)out.p);
	free(cmd);

	out.len = 0;
	cr_assert(asprintf(&cmd, "cd %s && %s/dotnet-trace collect -p %d --providers Ringpipe-Demo "
			   "--duration 00:00:03 -o %s/drop.nettrace 2>&1", dir, th_dotnet_tools(), d.pid, dir) > 0);
	cr_assert_eq(th_run(cmd, &out), 0, "dotnet-trace collect: %s", (char *)out.p);
	free(cmd);
	cr_assert(asprintf(&cmd, "%s/drop.nettrace", dir) > 0);
	counts(cmd, &c);
	cr_assert(strstr((char *)c.p, "Ringpipe-Demo/Tick\t"), "%s", (char *)c.p);
	cr_assert(strstr((char *)c.p, "#lost\t0\n"), "events lost: %s", (char *)c.p);
	free(cmd);

	/* CollectTracing6: a Block session */
	out.len = c.len = 0;
	cr_assert(asprintf(&cmd, "cd %s && %s/dotnet-trace collect -p %d --providers Ringpipe-Demo "
			   "--buffering-mode Block --duration 00:00:02 -o %s/block.nettrace 2>&1",
			   dir, th_dotnet_tools(), d.pid, dir) > 0);
	cr_assert_eq(th_run(cmd, &out), 0, "dotnet-trace collect --buffering-mode Block: %s",
		     (char *)out.p);
	free(cmd);
	cr_assert(asprintf(&cmd, "%s/block.nettrace", dir) > 0);
	counts(cmd, &c);
	cr_assert(strstr((char *)c.p, "Ringpipe-Demo/Tick\t"), "%s", (char *)c.p);
	cr_assert(strstr((char *)c.p, "#lost\t0\n"), "%s", (char *)c.p);
	free(cmd);

	demo_stop(&d);
	bb_free(&out);
	bb_free(&c);
	th_rmdir(dir);
}

Test(dotnet_tools, dotnet_counters_reads_the_demo_counters, .timeout = 120)
{
	struct demo d;
	struct bytebuf out = { 0 }, csv = { 0 };
	char *dir, *cmd, *path;

	TH_NEED_DOTNET_TOOL("dotnet-counters");
	dir = th_tmpdir();
	demo_start(&d, "200");
	cr_assert(asprintf(&path, "%s/counters.csv", dir) > 0);
	cr_assert(asprintf(&cmd, "%s/dotnet-counters collect -p %d --counters Ringpipe-Demo-Counters "
			   "--refresh-interval 1 --duration 00:00:04 --format csv -o %s 2>&1 </dev/null",
			   th_dotnet_tools(), d.pid, path) > 0);
	cr_assert_eq(th_run(cmd, &out), 0, "dotnet-counters: %s", (char *)out.p);
	cr_assert_eq(th_read_file(path, &csv), 0, "no CSV written: %s", (char *)out.p);
	cr_assert(strstr((char *)csv.p, "Ringpipe-Demo-Counters,Working Set"),
		  "no demo counter in: %s", (char *)csv.p);
	cr_assert(strstr((char *)csv.p, "Ringpipe-Demo-Counters,Ticks"), "%s", (char *)csv.p);
	demo_stop(&d);
	free(cmd);
	free(path);
	bb_free(&out);
	bb_free(&csv);
	th_rmdir(dir);
}
