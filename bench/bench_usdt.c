// SPDX-License-Identifier: MIT
/*
 * What the ringpipe:event USDT probe (user/kernel/usdt.h) costs a producer.
 *
 *   bench_usdt [--quick]        the table (runs the measurements below)
 *   bench_usdt --one            one measurement, "key value" lines
 *   bench_usdt --one --armed    the same, waiting for a tracer first
 *
 * Two builds of this file: bench_usdt links the library as shipped,
 * usdt_off (next to it) links the same library with write.c compiled with
 * -DRP_NO_USDT, so the two differ only by the probe site. The table
 * alternates one process of each, 15 rounds (5 with --quick), so
 * load that comes and goes hits both alike; every figure is the median
 * over the rounds, and the added cost is the median of the per-round
 * differences.
 *
 * A measurement: the 32-byte event of bench_event.h written with
 * rp_event_write() into a 64 MiB Drop session by one thread pinned to a
 * CPU, its ring pre-faulted and the session's drainer parked (the
 * rp_drain_throttle_ns hook), 200,000 events per repetition, 7 repetitions,
 * their median: the producer path alone, where one more load and branch
 * would show most. The disabled row is the unguarded call for an event no
 * session enables, which never reaches the probe.
 *
 * Noise: every round also runs the baseline a second time; the difference
 * between the two baseline runs is what "within noise" is measured against
 * (on a shared 2-CPU VM it is easily a few ns).
 *
 * Armed: with root and bpftrace, one more process runs with bpftrace
 * attached to ringpipe:event by pid (a program that only counts), 200,000
 * events: the cost of a hit (uprobe trap + BPF program) per event.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "ring.h"
#include "ringpipe/ringpipe.h"
#include "session.h"
#include "bench_event.h"

#ifndef RP_NO_USDT
extern unsigned short ringpipe_event_semaphore;	/* user/kernel/usdt.c */
#endif

#define INNER_REPS 7
#define MAX_ROUNDS 32

static volatile sig_atomic_t traced;

static void on_sigusr1(int sig)
{
	(void)sig;
	traced = 1;
}

static void die(const char *what)
{
	fprintf(stderr, "bench_usdt: %s: %s (%s)\n", what, strerror(errno), rp_last_error());
	exit(1);
}

static double write_loop(struct rp_event *ev, uint64_t n)
{
	struct small s = { .name = SMALL_NAME };
	uint64_t t0, t1, refused = 0;

	t0 = rp_clock_mono_ns();
	for (uint64_t i = 1; i <= n; i++) {
		s.counter = i;
		refused += rp_event_write(ev, &s, sizeof(s)) != 0;
	}
	t1 = rp_clock_mono_ns();
	if (refused && ev)
		fprintf(stderr, "bench_usdt: %" PRIu64 " writes refused\n", refused);
	return (double)(t1 - t0) / (double)n;
}

/* One process's measurement; prints "enabled NS", "disabled NS". */
static int measure(bool armed)
{
	struct rp_provider_opts po = { .sz = sizeof(po), .name = "Bench-Usdt" };
	struct rp_event_opts on = { .sz = sizeof(on), .id = 1, .name = "Small", .level = 4,
				    .nfields = 4, .fields = small_fields };
	struct rp_event_opts off = { .sz = sizeof(off), .id = 2, .name = "Off", .level = 4,
				     .keywords = 0x2 };
	struct rp_event_opts sync = { .sz = sizeof(sync), .id = 3, .name = "Sync", .level = 4 };
	struct rp_provider_config pc = { .name = "Bench-Usdt", .keywords = 0x1 };
	char path[256];
	struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
				      .format = 5, .buffer_bytes = 64ull << 20, .path = path,
				      .fd = -1 };
	uint64_t n = 200000;
	double en[INNER_REPS], dis[INNER_REPS];
	struct rp_provider *p;
	struct rp_event *ev_on, *ev_off, *ev_sync;
	int cpu = sched_getcpu();

	snprintf(path, sizeof(path), "%s/bench-usdt-%d.nettrace",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
	bench_pin(cpu < 0 ? 0 : cpu);
	p = rp_provider_new(&po);
	ev_on = p ? rp_event_new(p, &on) : NULL;
	ev_off = p ? rp_event_new(p, &off) : NULL;
	ev_sync = p ? rp_event_new(p, &sync) : NULL;
	if (!ev_on || !ev_off || !ev_sync)
		die("rp_event_new");
	for (int k = 0; k < (armed ? 1 : INNER_REPS); k++) {
		struct rp_session *s;
		struct rp_ring *r;

		/* the drainer sleeps after its first pass: the producer alone
		 * (1.1 n events of 64 bytes fit one 32 MiB ring) */
		rp_store_relaxed(&rp_drain_throttle_ns, 3000000000ull);
		s = rp_session_start(&so);
		if (!s)
			die("rp_session_start");
		r = rp_shm_current_ring(s->shm);
		memset(r->data, 0, r->size);	/* pre-fault */
		if (armed) {
#ifndef RP_NO_USDT
			int waited = 0;

			/* the semaphore rises, then the tracer signals once its
			 * program ran (see tests/usdt_writer.c) */
			while (!traced) {
				if (++waited > 60000) {
					fprintf(stderr, "bench_usdt: no tracer within 60 s\n");
					return 1;
				}
				if (__atomic_load_n(&ringpipe_event_semaphore, __ATOMIC_RELAXED))
					rp_event_write(ev_sync, "sync", 4);
				rp_clock_sleep_ns(1000000);
			}
#endif
		} else {
			write_loop(ev_on, n / 10);	/* warm-up */
		}
		en[k] = write_loop(ev_on, n);
		dis[k] = write_loop(ev_off, n);
		rp_store_relaxed(&rp_drain_throttle_ns, 0);
		rp_drainer_kick(s);	/* cut its throttle sleep short */
		if (rp_session_stop(s))
			die("rp_session_stop");
		unlink(path);
	}
	if (armed) {
		printf("armed %.2f\n", en[0]);
	} else {
		printf("enabled %.3f\n", summarize(en, INNER_REPS).med);
		printf("disabled %.3f\n", summarize(dis, INNER_REPS).med);
	}
	return 0;
}

/* Runs `bin --one [--armed]`, parses its two figures. */
static int run_child(const char *bin, bool armed, double *en, double *dis, pid_t *child,
		     const char *tracer_script)
{
	int pfd[2], st;
	pid_t pid, bpid = -1;
	char buf[512] = "";
	ssize_t got, n = 0;

	if (pipe(pfd))
		return -1;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		dup2(pfd[1], 1);
		close(pfd[0]);
		close(pfd[1]);
		execl(bin, bin, "--one", armed ? "--armed" : NULL, (char *)NULL);
		_exit(127);
	}
	close(pfd[1]);
	if (child)
		*child = pid;
	if (tracer_script) {
		char pidbuf[32], *script;
		int fd;

		snprintf(pidbuf, sizeof(pidbuf), "%d", (int)pid);
		if (asprintf(&script, tracer_script, bin, (int)pid, bin, (int)pid) < 0)
			return -1;
		bpid = fork();
		if (bpid == 0) {
			fd = open("/dev/null", O_WRONLY);
			dup2(fd, 1);
			dup2(fd, 2);
			execlp("bpftrace", "bpftrace", "--unsafe", "-p", pidbuf, "-e", script,
			       (char *)NULL);
			_exit(127);
		}
		free(script);
	}
	while ((got = read(pfd[0], buf + n, sizeof(buf) - 1 - (size_t)n)) > 0)
		n += got;
	buf[n] = 0;
	close(pfd[0]);
	waitpid(pid, &st, 0);
	if (bpid > 0) {
		kill(bpid, SIGINT);
		waitpid(bpid, NULL, 0);
	}
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		return -1;
	if (armed)
		return sscanf(buf, "armed %lf", en) == 1 ? 0 : -1;
	return sscanf(buf, "enabled %lf disabled %lf", en, dis) == 2 ? 0 : -1;
}

int main(int argc, char **argv)
{
	bool quick = false, one = false, armed = false;
	unsigned int rounds;
	double on_en[MAX_ROUNDS], on_dis[MAX_ROUNDS], off_en[MAX_ROUNDS], off_dis[MAX_ROUNDS];
	double diff[MAX_ROUNDS], noise[MAX_ROUNDS], armed_ns = 0;
	char self[4096], off[4096 + 16];
	const char *why_no_armed = NULL;
	struct stat3 a, b, d, x, y, z;
	ssize_t len;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick"))
			quick = true;
		else if (!strcmp(argv[i], "--one"))
			one = true;
		else if (!strcmp(argv[i], "--armed"))
			armed = true;
		else {
			fprintf(stderr, "usage: bench_usdt [--quick] [--one [--armed]]\n");
			return 2;
		}
	}
	if (one) {
		struct sigaction sa = { .sa_handler = on_sigusr1 };

		/* bpftrace's signal() says the probe is armed */
		sigaction(SIGUSR1, &sa, NULL);
		return measure(armed);
	}
#ifdef RP_NO_USDT
	fprintf(stderr, "bench_usdt: this is the build without the probe; run bench_usdt\n");
	return 2;
#endif
	rounds = quick ? 5 : 15;
	len = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (len <= 0)
		die("readlink");
	self[len] = 0;
	snprintf(off, sizeof(off), "%s", self);
	strcpy(strrchr(off, '/') + 1, "usdt_off");
	for (unsigned int r = 0; r < rounds; r++) {
		/* alternate which build goes first */
		const char *first = r % 2 ? off : self, *second = r % 2 ? self : off;
		double e1, d1, e2, d2, e3, d3;

		if (run_child(first, false, &e1, &d1, NULL, NULL) ||
		    run_child(second, false, &e2, &d2, NULL, NULL) ||
		    run_child(off, false, &e3, &d3, NULL, NULL)) {
			fprintf(stderr, "bench_usdt: a measurement failed\n");
			return 1;
		}
		on_en[r] = r % 2 ? e2 : e1;
		on_dis[r] = r % 2 ? d2 : d1;
		off_en[r] = r % 2 ? e1 : e2;
		off_dis[r] = r % 2 ? d1 : d2;
		diff[r] = on_en[r] - off_en[r];
		noise[r] = e3 - off_en[r];
	}
	if (geteuid() != 0)
		why_no_armed = "not root";
	else if (system("command -v bpftrace >/dev/null 2>&1"))
		why_no_armed = "bpftrace not installed";
	else {
		static const char script[] =
			"usdt:%s:ringpipe:event /pid == %d && arg2 == 3/ { signal(\"SIGUSR1\"); }\n"
			"usdt:%s:ringpipe:event /pid == %d && arg2 == 1/ { @n = count(); }\n";

		if (run_child(self, true, &armed_ns, NULL, NULL, script))
			why_no_armed = "the traced run failed";
	}
	a = summarize(on_en, rounds);
	b = summarize(off_en, rounds);
	d = summarize(diff, rounds);
	z = summarize(noise, rounds);
	x = summarize(on_dis, rounds);
	y = summarize(off_dis, rounds);
	printf("\n### USDT probe ringpipe:event: cost to the producer (ns/event; medians over %u "
	       "rounds, each the median of %d x 200k writes, 1 pinned thread, drainer parked)\n\n",
	       rounds, INNER_REPS);
	printf("| measure | median | min | max |\n|---|---|---|---|\n");
	printf("| enabled write, probe compiled in, unarmed | %.2f | %.2f | %.2f |\n", a.med, a.min,
	       a.max);
	printf("| enabled write, built with -DRP_NO_USDT (baseline) | %.2f | %.2f | %.2f |\n", b.med,
	       b.min, b.max);
	printf("| added by the unarmed probe (per-round difference; target ≤ 1 ns: %s) | %.2f | "
	       "%.2f | %.2f |\n", d.med <= 1.0 ? "met" : "**missed**", d.med, d.min, d.max);
	printf("| noise: baseline minus baseline (a second -DRP_NO_USDT run per round) | %.2f | "
	       "%.2f | %.2f |\n", z.med, z.min, z.max);
	printf("| disabled write (unguarded call), probe compiled in | %.2f | %.2f | %.2f |\n", x.med,
	       x.min, x.max);
	printf("| disabled write (unguarded call), -DRP_NO_USDT | %.2f | %.2f | %.2f |\n", y.med,
	       y.min, y.max);
	if (why_no_armed)
		printf("| armed: bpftrace attached, per hit | not run: %s | | |\n", why_no_armed);
	else
		printf("| armed: bpftrace attached (count only), per event | %.0f | | |\n",
		       armed_ns);
	return 0;
}
