// SPDX-License-Identifier: MIT
/*
 * Producer-side cost of the shared-memory ring, against the floor.
 *
 *   bench_ring [--quick]
 *
 * Prints a markdown table: ns/event (median of the repetitions, with min
 * and max), the ratio to the matching floor row, and drops.  Every event
 * carries a 32-byte payload and, unless the row says otherwise, a
 * timestamp from rp_clock_now() (calibrated TSC when available).
 *
 *   floor  single-writer per-CPU ring: ring chosen by the rseq CPU number,
 *          plain position load, header + memcpy, store-release commit.
 *          No atomic RMW: the cheapest correct design for one writer.
 *   rp     rp_shm_current_ring() + rp_ring_reserve() (CAS) + fill + memcpy
 *          + rp_ring_commit().
 *
 * The measured producers never see a full ring: the rings are big enough
 * for one repetition (drained between repetitions, untimed), except in
 * the "concurrent drainer" row, where a consumer thread on another CPU
 * drains a 1 MiB ring while the producer runs and drops are reported.
 * Threads are pinned, one per CPU.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "bench_event.h"
#include "clock.h"
#include "ring.h"

#define PAYLOAD 32u
#define REC_SIZE 64u	/* 32-byte header + 32-byte payload */

static unsigned int reps = 7;
static unsigned int passes = 16;	/* ring-fulls per repetition */
static uint64_t n_events = 1u << 16;	/* per pass: exactly one ring-full */
static uint64_t big_ring;		/* n_events * REC_SIZE = 4 MiB, power of two */

static volatile uint64_t sink;
static int cpus[2];
static int nr_cpus;

static uint32_t gettid32(void)
{
	return (uint32_t)syscall(SYS_gettid);
}

/* ---- floor ------------------------------------------------------------ */

struct floor_ring {
	unsigned char *data;
	uint64_t pos;
	uint64_t mask;
} __attribute__((aligned(64)));

static struct floor_ring floor_rings[64];
static unsigned int floor_n;

static inline void floor_write(uint32_t tid, uint32_t seq, const void *payload, int with_ts)
{
	unsigned int cpu = rp_ring_current_cpu();
	struct floor_ring *f = &floor_rings[cpu < floor_n ? cpu : cpu % floor_n];
	struct rp_shm_record *rec = (struct rp_shm_record *)(f->data + (f->pos & f->mask));

	f->pos += REC_SIZE;
	rp_record_fill(rec, 7, with_ts ? rp_clock_now() : 0, tid, seq, 0, PAYLOAD, cpu);
	memcpy(rec + 1, payload, PAYLOAD);
	/* nobody reads the floor ring; the release store is what a real
	 * single-writer commit would pay */
	rp_store_release(&rec->len, REC_SIZE);
}

/* one pass of n_events; returns ns */
static uint64_t floor_pass(int with_ts)
{
	uint64_t payload[4] = { 1, 2, 3, 4 };
	uint32_t tid = gettid32();
	uint64_t t0, t1;

	t0 = rp_clock_mono_ns();
	for (uint64_t i = 0; i < n_events; i++) {
		payload[0] = i;
		floor_write(tid, (uint32_t)i, payload, with_ts);
	}
	t1 = rp_clock_mono_ns();
	__asm__ __volatile__("" ::: "memory");
	return t1 - t0;
}

struct floor_arg {
	int cpu;
	int with_ts;
	uint64_t ns;
	pthread_barrier_t *start;
};

static void *floor_thread(void *p)
{
	struct floor_arg *a = p;

	bench_pin(a->cpu);
	pthread_barrier_wait(a->start);
	a->ns = floor_pass(a->with_ts);
	return NULL;
}

/* nthreads writers, one per CPU (and so one floor ring each); ns/event */
static double run_floor(int nthreads, int with_ts)
{
	struct floor_arg args[2];
	pthread_t th[2];
	pthread_barrier_t bar;
	double sum = 0;

	for (unsigned int p = 0; p < passes; p++) {
		pthread_barrier_init(&bar, NULL, (unsigned int)nthreads);
		for (int t = 0; t < nthreads; t++) {
			args[t] = (struct floor_arg){ .cpu = cpus[t], .with_ts = with_ts, .start = &bar };
			pthread_create(&th[t], NULL, floor_thread, &args[t]);
		}
		for (int t = 0; t < nthreads; t++) {
			pthread_join(th[t], NULL);
			sum += (double)args[t].ns;
		}
		pthread_barrier_destroy(&bar);
	}
	return sum / nthreads / (double)(n_events * passes);
}

/* ---- rp ring ------------------------------------------------------------ */

struct prod_arg {
	struct rp_shm *s;
	int cpu;
	int with_ts;
	uint64_t events;
	uint64_t ns;
	uint64_t drops;
	pthread_barrier_t *start;
};

static void *rp_producer(void *p)
{
	struct prod_arg *a = p;
	uint64_t payload[4] = { 1, 2, 3, 4 };
	uint32_t tid;
	uint64_t t0, t1, drops = 0;

	if (a->cpu >= 0)
		bench_pin(a->cpu);
	tid = gettid32();
	if (a->start)
		pthread_barrier_wait(a->start);
	t0 = rp_clock_mono_ns();
	for (uint64_t i = 0; i < a->events; i++) {
		struct rp_ring *r = rp_shm_current_ring(a->s);
		struct rp_shm_record *rec = rp_ring_reserve(r, REC_SIZE);

		if (rp_unlikely(!rec)) {
			rp_ring_count_drop(r, RP_DROP_FULL);
			drops++;
			continue;
		}
		payload[0] = i;
		rp_record_fill(rec, 7, a->with_ts ? rp_clock_now() : 0, tid, (uint32_t)i, 0, PAYLOAD,
			       r->index);
		memcpy(rec + 1, payload, PAYLOAD);
		rp_ring_commit(rec);
	}
	t1 = rp_clock_mono_ns();
	a->ns = t1 - t0;
	a->drops = drops;
	return NULL;
}

static void drain_all(struct rp_shm *s)
{
	for (uint32_t i = 0; i < rp_shm_nr_rings(s); i++)
		while (rp_ring_drain(rp_shm_ring(s, i), NULL, NULL, 1L << 40) > 0)
			;
}

/* nthreads producers, one per CPU; returns mean ns/event over threads */
static double run_rp(struct rp_shm *s, int nthreads, int with_ts, uint64_t *drops)
{
	struct prod_arg args[2];
	pthread_t th[2];
	pthread_barrier_t bar;
	double sum = 0;

	for (unsigned int p = 0; p < passes; p++) {
		pthread_barrier_init(&bar, NULL, (unsigned int)nthreads);
		for (int t = 0; t < nthreads; t++) {
			args[t] = (struct prod_arg){ .s = s, .cpu = cpus[t], .with_ts = with_ts,
						     .events = n_events, .start = &bar };
			pthread_create(&th[t], NULL, rp_producer, &args[t]);
		}
		for (int t = 0; t < nthreads; t++) {
			pthread_join(th[t], NULL);
			sum += (double)args[t].ns;
			*drops += args[t].drops;
		}
		pthread_barrier_destroy(&bar);
		drain_all(s);	/* untimed: reset for the next pass */
	}
	return sum / nthreads / (double)(n_events * passes);
}

/* ---- concurrent drainer ------------------------------------------------- */

struct drainer {
	struct rp_shm *s;
	int cpu;
	int stop;
	uint64_t records;
};

static void *drainer_main(void *p)
{
	struct drainer *d = p;

	bench_pin(d->cpu);
	/* pairs with the store_release of stop in run_rp_drained() */
	while (!rp_load_acquire(&d->stop)) {
		long got = 0;

		/* a drainer works in batches past a watermark (a quarter of
		 * the ring) and naps otherwise; spinning on the head record
		 * would bounce the producer's cache line on every event */
		for (uint32_t i = 0; i < rp_shm_nr_rings(d->s); i++) {
			struct rp_ring *r = rp_shm_ring(d->s, i);

			if (rp_load_relaxed(&r->hdr->producer_pos) - r->cons >= r->size / 4)
				got += rp_ring_drain(r, NULL, NULL, 1L << 40);
		}
		d->records += (uint64_t)got;
		if (!got)
			rp_clock_sleep_ns(20000);
	}
	return NULL;
}

static double run_rp_drained(struct rp_shm *s, uint64_t *drops)
{
	struct drainer d = { .s = s, .cpu = cpus[1] };
	struct prod_arg a = { .s = s, .cpu = cpus[0], .with_ts = 1, .events = n_events * passes };
	pthread_t dt, pt;

	pthread_create(&dt, NULL, drainer_main, &d);
	pthread_create(&pt, NULL, rp_producer, &a);
	pthread_join(pt, NULL);
	/* pairs with the load_acquire of stop in drainer_main() */
	rp_store_release(&d.stop, 1);
	pthread_join(dt, NULL);
	drain_all(s);
	*drops += a.drops;
	return (double)a.ns / (double)a.events;
}

/* ---- drain rate ---------------------------------------------------------- */

static int drain_touch(void *ctx, struct rp_ring *r, const struct rp_ring_item *it)
{
	uint64_t v;

	memcpy(&v, it->payload, sizeof(v));
	*(uint64_t *)ctx += v + it->hdr.timestamp;
	return 0;
}

/* Fill ring 0 (untimed), then time one consumer draining it: validation,
 * a read of every record, zeroing and publishing. */
static double run_drain(struct rp_shm *s)
{
	struct rp_ring *r = rp_shm_ring(s, 0);
	uint64_t payload[4] = { 1, 2, 3, 4 }, acc = 0, got = 0, ns = 0, t0;
	long n;

	for (unsigned int p = 0; p < passes; p++) {
		for (uint64_t i = 0; i < n_events; i++) {
			struct rp_shm_record *rec = rp_ring_reserve(r, REC_SIZE);

			if (!rec)
				break;
			payload[0] = i;
			rp_record_fill(rec, 7, i, 1, (uint32_t)i, 0, PAYLOAD, 0);
			memcpy(rec + 1, payload, PAYLOAD);
			rp_ring_commit(rec);
		}
		t0 = rp_clock_mono_ns();
		while ((n = rp_ring_drain(r, drain_touch, &acc, 1L << 40)) > 0)
			got += (uint64_t)n;
		ns += rp_clock_mono_ns() - t0;
	}
	sink = acc;
	return (double)ns / (double)(got ? got : 1);
}

/* ---- clocks alone ------------------------------------------------------- */

static double run_rdtsc(void)
{
	uint64_t t0 = rp_clock_mono_ns(), acc = 0;

	for (uint64_t i = 0; i < n_events * passes; i++)
		acc += rp_clock_rdtsc();
	sink = acc;
	return (double)(rp_clock_mono_ns() - t0) / (double)(n_events * passes);
}

static double run_gettime(void)
{
	uint64_t t0 = rp_clock_mono_ns(), acc = 0;
	struct timespec ts;

	/* the raw call on purpose: this row is clock_gettime()'s own cost,
	 * what every rp_clock_mono_ns() pays */
	for (uint64_t i = 0; i < n_events * passes; i++) {
		clock_gettime(CLOCK_MONOTONIC, &ts);
		acc += (uint64_t)ts.tv_nsec;
	}
	sink = acc;
	return (double)(rp_clock_mono_ns() - t0) / (double)(n_events * passes);
}

static double run_clock_now(void)
{
	uint64_t t0 = rp_clock_mono_ns(), acc = 0;

	for (uint64_t i = 0; i < n_events * passes; i++)
		acc += rp_clock_now();
	sink = acc;
	return (double)(rp_clock_mono_ns() - t0) / (double)(n_events * passes);
}

/* ---- reporting ---------------------------------------------------------- */

struct row {
	const char *name;
	double v[32];
	double med, min, max;
	uint64_t drops;
	int skipped;
};

static void finish(struct row *r)
{
	struct stat3 s = summarize(r->v, reps);

	r->min = s.min;
	r->max = s.max;
	r->med = s.med;
}

static void print_row(const struct row *r, const struct row *base)
{
	char ratio[32] = "—";

	if (r->skipped) {
		printf("| %s | skipped (needs 2 CPUs) | | | | |\n", r->name);
		return;
	}
	if (base)
		snprintf(ratio, sizeof(ratio), "%.2fx", r->med / base->med);
	printf("| %s | %.2f | %.2f | %.2f | %s | %" PRIu64 " |\n", r->name, r->med, r->min, r->max, ratio,
	       r->drops);
}

int main(int argc, char **argv)
{
	struct row floor_ts = { .name = "floor: single-writer per-CPU ring, plain commit, ts, 32 B" };
	struct row floor_nots = { .name = "floor without timestamp" };
	struct row floor2 = { .name = "floor, 2 threads on 2 CPUs (per thread), ts" };
	struct row rp1 = { .name = "rp ring reserve+commit, 1 thread, ts, 32 B" };
	struct row rp1_nots = { .name = "rp ring reserve+commit, 1 thread, no timestamp" };
	struct row rp2 = { .name = "rp ring reserve+commit, 2 threads on 2 CPUs (per thread), ts" };
	struct row rpd = { .name = "rp ring, 1 thread + drainer on another CPU (1 MiB ring, drains past 1/4 full), ts" };
	struct row drain = { .name = "drain: one consumer, 64 B records, read + validate + zero + publish (ns/record)" };
	struct row tsc = { .name = "rdtsc alone" };
	struct row cgt = { .name = "clock_gettime(CLOCK_MONOTONIC) alone" };
	struct row cnow = { .name = "rp_clock_now() alone" };
	struct rp_shm_opts o = { .sz = sizeof(o) };
	struct rp_shm *big, *small;
	cpu_set_t allowed;
	int err;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick")) {
			reps = 5;
			passes = 2;
		} else {
			fprintf(stderr, "usage: %s [--quick]\n", argv[0]);
			return 2;
		}
	}
	big_ring = n_events * REC_SIZE;

	err = rp_clock_init();
	if (err) {
		fprintf(stderr, "bench_ring: rp_clock_init: %s\n", strerror(-err));
		return 1;
	}
	sched_getaffinity(0, sizeof(allowed), &allowed);
	for (int c = 0; c < CPU_SETSIZE && nr_cpus < 2; c++)
		if (CPU_ISSET(c, &allowed))
			cpus[nr_cpus++] = c;
	if (nr_cpus < 2)
		cpus[1] = -1;

	/* rings as large as one repetition: the producer never sees "full" */
	o.data_size = big_ring;
	big = rp_shm_create(&o);
	o.data_size = 1u << 20;
	small = rp_shm_create(&o);
	if (!big || !small) {
		fprintf(stderr, "bench_ring: rp_shm_create: %s\n", strerror(errno));
		return 1;
	}
	floor_n = rp_shm_nr_rings(big) < 64 ? rp_shm_nr_rings(big) : 64;
	for (unsigned int i = 0; i < floor_n; i++) {
		floor_rings[i].data = mmap(NULL, big_ring, PROT_READ | PROT_WRITE,
					   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
		if (floor_rings[i].data == MAP_FAILED) {
			perror("bench_ring: mmap");
			return 1;
		}
		floor_rings[i].mask = big_ring - 1;
	}
	/* fault in the shared rings too, so neither side pays page faults */
	for (uint32_t i = 0; i < rp_shm_nr_rings(big); i++)
		memset(rp_shm_ring(big, i)->data, 0, big_ring);
	for (uint32_t i = 0; i < rp_shm_nr_rings(small); i++)
		memset(rp_shm_ring(small, i)->data, 0, 1u << 20);

	bench_pin(cpus[0]);
	/* warm-up */
	run_floor(1, 1);
	run_rp(big, 1, 1, &rp1.drops);
	rp1.drops = 0;

	for (unsigned int k = 0; k < reps; k++) {
		bench_pin(cpus[0]);
		floor_ts.v[k] = run_floor(1, 1);
		floor_nots.v[k] = run_floor(1, 0);
		rp1.v[k] = run_rp(big, 1, 1, &rp1.drops);
		rp1_nots.v[k] = run_rp(big, 1, 0, &rp1_nots.drops);
		if (nr_cpus >= 2) {
			floor2.v[k] = run_floor(2, 1);
			rp2.v[k] = run_rp(big, 2, 1, &rp2.drops);
			rpd.v[k] = run_rp_drained(small, &rpd.drops);
		}
		bench_pin(cpus[0]);
		drain.v[k] = run_drain(big);
		tsc.v[k] = run_rdtsc();
		cgt.v[k] = run_gettime();
		cnow.v[k] = run_clock_now();
	}
	rp2.skipped = rpd.skipped = floor2.skipped = nr_cpus < 2;
	finish(&floor_ts);
	finish(&floor_nots);
	finish(&rp1);
	finish(&rp1_nots);
	if (nr_cpus >= 2) {
		finish(&floor2);
		finish(&rp2);
		finish(&rpd);
	}
	finish(&drain);
	finish(&tsc);
	finish(&cgt);
	finish(&cnow);

	printf("\n### ring producer cost (bench_ring%s)\n\n", passes == 2 ? " --quick" : "");
	printf("clock: %s, %.3f GHz; %u repetitions of %u passes x %" PRIu64 " events per thread; "
	       "%" PRIu64 " KiB rings; CPUs %d,%d; %u rings\n\n", rp_clock_source_name(rp_clock_source()),
	       rp_clock_frequency() / 1e9, reps, passes, n_events, big_ring / 1024, cpus[0], cpus[1],
	       rp_shm_nr_rings(big));
	printf("| case | ns/event (median) | min | max | ratio vs floor | drops |\n");
	printf("|---|---|---|---|---|---|\n");
	print_row(&floor_ts, NULL);
	print_row(&floor_nots, NULL);
	print_row(&rp1, &floor_ts);
	print_row(&rp1_nots, &floor_nots);
	print_row(&floor2, NULL);
	print_row(&rp2, &floor2);
	print_row(&rpd, &floor_ts);
	print_row(&drain, NULL);
	print_row(&tsc, NULL);
	print_row(&cgt, NULL);
	print_row(&cnow, NULL);

	rp_shm_destroy(big);
	rp_shm_destroy(small);
	return 0;
}
