// SPDX-License-Identifier: MIT
/*
 * Where the library's busy threads run, against a scheduler that puts them
 * beside the application's. These tests need a CPU nothing else uses:
 * scripts/run-tests.sh runs this binary alone, its tests one at a time.
 */
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "helpers.h"
#include "ringpipe/ringpipe.h"
#include "session.h"

static const struct rp_field small_fields[] = {
	{ "Counter", RP_TYPE_U64, 0, 0, NULL },
	{ "Thread", RP_TYPE_U32, 0, 0, NULL },
};

struct small {
	uint64_t counter;
	uint32_t thread;
} __attribute__((packed));

static struct rp_event *small_event(const char *provider)
{
	struct rp_provider_opts po = { .sz = sizeof(po), .name = provider };
	struct rp_event_opts eo = { .sz = sizeof(eo), .id = 1, .name = "Small", .level = 4,
				    .nfields = 2, .fields = small_fields };
	struct rp_provider *p = rp_provider_new(&po);
	struct rp_event *ev;

	cr_assert_not_null(p, "rp_provider_new: %s", rp_last_error());
	ev = rp_event_new(p, &eo);
	cr_assert_not_null(ev, "rp_event_new: %s", rp_last_error());
	return ev;
}

/* The CPUs this process may use, which must be at least two; the test is
 * skipped on a machine (or under a mask) with one. */
static void two_cpus_or_skip(cpu_set_t *all)
{
	cr_assert_eq(sched_getaffinity(0, sizeof(*all), all), 0);
	if (CPU_COUNT(all) < 2)
		cr_skip_test("this process may run on %d CPU: the test needs two to tell them apart",
			     CPU_COUNT(all));
}

#define BURSTS 20
#define BURST_EVENTS 200000u

struct burst_writer {
	struct rp_event *ev;
	int cpu;
	int in_burst;		/* atomic: writing now */
	int done;		/* atomic */
	uint64_t wall_ns, cpu_ns;	/* the bursts' wall and CPU time */
};

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Pinned to its CPU: bursts of writes with pauses between them, long
 * enough for the drainer to empty the rings and go to sleep, so that each
 * burst wakes it. */
static void *burst_writer_main(void *arg)
{
	struct burst_writer *w = arg;
	struct small sm;
	cpu_set_t one;
	int b;

	CPU_ZERO(&one);
	CPU_SET(w->cpu, &one);
	cr_assert_eq(sched_setaffinity(0, sizeof(one), &one), 0);
	sm.counter = 0;
	sm.thread = 1;
	for (b = 0; b < BURSTS; b++) {
		uint64_t t0, c0;

		usleep(30000);
		rp_store_relaxed(&w->in_burst, 1);
		t0 = rp_clock_mono_ns();
		c0 = thread_cpu_ns();
		for (uint32_t i = 0; i < BURST_EVENTS; i++) {
			sm.counter++;
			(void)rp_event_write(w->ev, &sm, sizeof(sm));
		}
		w->cpu_ns += thread_cpu_ns() - c0;
		w->wall_ns += rp_clock_mono_ns() - t0;
		rp_store_relaxed(&w->in_burst, 0);
	}
	rp_store_release(&w->done, 1);
	return NULL;
}

/* The CPU a thread of this process is on (/proc, field 39). */
static int task_cpu(pid_t tid)
{
	char file[64], buf[1024], *p;
	int cpu = -1, field;
	FILE *f;

	snprintf(file, sizeof(file), "/proc/self/task/%d/stat", (int)tid);
	f = fopen(file, "r");
	cr_assert_not_null(f, "%s", file);
	p = fgets(buf, sizeof(buf), f) ? strrchr(buf, ')') : NULL;
	fclose(f);
	cr_assert_not_null(p, "%s: no stat line", file);
	/* field 3 follows the comm's ')' */
	for (field = 2; p && field < 39; field++)
		p = strchr(p + 1, ' ');
	cr_assert(p && sscanf(p + 1, "%d", &cpu) == 1, "%s: no processor field", file);
	return cpu;
}

/* A scheduler that packs threads onto few CPUs (as the kernels of some
 * virtual machines do) can wake the drainer on the CPU of the writer that
 * woke it and keep it there while another CPU idles: the two then take
 * turns. The drainer must leave the writer's CPU for the idle one
 * (step_aside() in drain.c): a writer pinned to one CPU writes bursts,
 * each of which wakes the drainer, and the drainer is found on the
 * writer's CPU in few of the looks taken during the bursts. */
Test(placement, the_drainer_leaves_a_busy_writers_cpu_for_an_idle_one, .timeout = 60)
{
	struct rp_provider_config pc = { .name = "Test-Step-Aside" };
	struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
				      .buffer_bytes = 256 << 20, .path = "/dev/null", .fd = -1 };
	struct rp_session_stats st = { .sz = sizeof(st) };
	struct burst_writer w = { 0 };
	cpu_set_t all;
	struct rp_session *s;
	pthread_t th;
	pid_t drainer;
	int looks = 0, on_writer = 0;

	two_cpus_or_skip(&all);
	while (!CPU_ISSET(w.cpu, &all))
		w.cpu++;
	w.ev = small_event("Test-Step-Aside");
	s = rp_session_start(&so);
	cr_assert_not_null(s, "%s", rp_last_error());
	drainer = (pid_t)rp_shm_header(s->shm)->drainer_tid;
	cr_assert_eq(pthread_create(&th, NULL, burst_writer_main, &w), 0);
	/* pairs with the store_release of done */
	while (!rp_load_acquire(&w.done)) {
		if (rp_load_relaxed(&w.in_burst)) {
			on_writer += task_cpu(drainer) == w.cpu;
			looks++;
		}
		usleep(200);
	}
	pthread_join(th, NULL);
	cr_assert_eq(rp_session_stats(s, &st), 0);
	cr_log_info("the drainer was on the writer's CPU %d in %d of %d looks during bursts; it "
		    "moved %" PRIu64 " times; the bursts lost %.1f %% of their wall time",
		    w.cpu, on_writer, looks, st.drainer_moves,
		    100.0 * (double)(w.wall_ns - w.cpu_ns) / (double)w.wall_ns);
	cr_assert_geq(looks, BURSTS, "only %d looks during %d bursts", looks, BURSTS);
	/* here: 0-15 % of the looks (0-8 % in most runs); left where the
	 * scheduler wakes it, a third to two thirds in most runs (and 4 %
	 * in some) */
	cr_assert_leq(on_writer * 6, looks,
		      "the drainer ran on the busy writer's CPU in %d of %d looks (moved %" PRIu64
		      " times)", on_writer, looks, st.drainer_moves);
	cr_assert_eq(rp_session_stop(s), 0);
}
