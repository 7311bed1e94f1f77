// SPDX-License-Identifier: MIT
/*
 * A hostile mapper (invariant 6, Documentation/design.md): a second process
 * maps a running session's memfd and writes random and targeted values into
 * every word it shares (ring positions, record lengths, flags, thread ids and
 * sequence numbers, forged records, the session header's control and unused
 * Block words, the heartbeat, drop and reader counters) while producers
 * write.
 *
 * What is checked (each test takes a few seconds), outcomes, never times:
 *   - no crash (ASan clean in the asan build);
 *   - Drop: an rp_event_write() never waits or spins: it runs for at most
 *     WRITE_CPU_BOUND_DROP_NS of its thread's CPU time (10 ms; 50 ms under
 *     sanitizers; observed: tens of microseconds; WRITE_CPU_OUTLIERS writes
 *     may be charged with an interrupt's time). Block: nothing is dropped
 *     while the session runs, whatever the mapper does;
 *   - rp_session_stop() returns, and every write returns;
 *   - once the mapper is gone the session heals: the rings drain (a head it
 *     left uncommitted is skipped once every writer of this process has
 *     been seen outside a write), then HEAL_EVENTS writes return 0 and
 *     every one of them is in the trace;
 *   - the drops are the writers' own, exactly: the session's drop counts
 *     equal the writes that returned -ENOBUFS, and so does EventsLost, in
 *     ringpipe's reader and in TraceEvent (what the mapper destroyed or
 *     forged is corrupt, not lost); events_written and the drops never go
 *     down while the mapper runs;
 *   - the other figures are plausible: corrupt counts at most one per
 *     attempt plus two per mapper write, events written at most the
 *     attempts plus the records the mapper forged.
 */
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>

#include "clock.h"
#include "helpers.h"
#include "nettrace_read.h"
#include "ring.h"
#include "ringpipe/ringpipe.h"
#include "session.h"

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define SLOW 1
#else
#define SLOW 0
#endif

#define NPRODUCERS 3
#define ATTACK_NS 1500000000ull		/* the mapper runs this long */
#define LOAD_AFTER_NS 300000000ull	/* producers go on this long after it */
#define HEAL_EVENTS 200u
#define HEAL_THREAD 77u	/* the payload's thread field of those writes */
/* only turns a hang into a failure: the rings drain after the mapper */
#define HEAL_DEADLINE_NS 60000000000ull
/* Drop never waits: a write runs for at most this long (CPU time of the
 * writing thread; Criterion runs these tests one at a time, but a loaded
 * runner still preempts them, which CPU time does not count) */
#define WRITE_CPU_BOUND_DROP_NS (SLOW ? 50000000ull : 10000000ull)
/* Writes allowed past that bound, each still under ten times it: kernels
 * built without CONFIG_IRQ_TIME_ACCOUNTING (this machine kind's) charge an
 * interrupt's handling, and a virtual CPU's stall inside it, to the thread
 * it interrupted, and a run of a million writes meets one such now and
 * then (seen: 10.5 and 10.7 ms, once in a few CI runs). A write that waits
 * or spins does so again and again, and is caught by the count. */
#define WRITE_CPU_OUTLIERS 2u

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t xorshift(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	*s = x;
	return x * 0x2545f4914f6cdd1dull;
}

static uint64_t test_seed(uint64_t dflt)
{
	const char *v = getenv("RINGPIPE_HOSTILE_SEED");

	return v && *v ? strtoull(v, NULL, 0) | 1 : dflt;
}

static const struct rp_field fields[] = {
	{ "Counter", RP_TYPE_U64, 0, 0, NULL },
	{ "Thread", RP_TYPE_U32, 0, 0, NULL },
	{ "Pad", RP_TYPE_U32, 0, 0, NULL },
};

struct payload {
	uint64_t counter;
	uint32_t thread;
	uint32_t pad;
};

static struct rp_event *make_event(struct rp_provider *p, uint32_t id, const char *name)
{
	struct rp_event_opts eo = { .sz = sizeof(eo), .id = id, .name = name, .level = 4,
				    .nfields = 3, .fields = fields };
	struct rp_event *ev = rp_event_new(p, &eo);

	cr_assert_not_null(ev, "rp_event_new: %s", rp_last_error());
	return ev;
}

/* ---- the mapper: a second process ----------------------------------------- */

/* What the test tells the mapper, and what the mapper did; in a shared
 * anonymous page. */
struct ctl {
	int stop;
	int ready;
	uint32_t meta_id;		/* the Burst event's index: forged records use it */
	uint32_t tids[NPRODUCERS];	/* the producers' thread ids */
	uint64_t seed;
	uint64_t attack_ns;
	unsigned int only;		/* 0: every kind of write; else 1 << kind */
	uint64_t ops;			/* writes done */
	uint64_t ops_by_kind[16];
	uint64_t drops_added;		/* small increments to drop counters */
	uint64_t forged;		/* well-formed records forged */
	char err[200];
};

enum {
	K_PROD, K_CONS, K_LEN, K_BODY, K_HEADER, K_FORGE, K_SESSION, K_RINGHDR, K_DROPS,
	K_COUNTERS, K_NKINDS
};

static void put64(void *p, uint64_t v)
{
	__atomic_store_n((uint64_t *)p, v, __ATOMIC_RELAXED);
}

static void put32(void *p, uint32_t v)
{
	__atomic_store_n((uint32_t *)p, v, __ATOMIC_RELAXED);
}

static uint64_t get64(const void *p)
{
	return __atomic_load_n((const uint64_t *)p, __ATOMIC_RELAXED);
}

/* A value near v, or anywhere. */
static uint64_t near(uint64_t *rng, uint64_t v, uint64_t size)
{
	uint64_t x = xorshift(rng);

	switch (x & 7) {
	case 0: return x;
	case 1: return v + size * (1 + ((x >> 8) & 3)) + ((x >> 16) & 0xfff);
	case 2: return v - 8 * (1 + ((x >> 8) & 511));
	case 3: return v + 4096;
	case 4: return v + 3;
	case 5: return 0;
	case 6: return ~0ull - ((x >> 8) & 0xffff);
	default: return v + 8 * ((x >> 8) & 127);
	}
}

/* A forged record at the producer position, reserved as a producer would
 * (so it lands where the reader looks), with a thread id and sequence
 * number no writer has. */
static void forge(struct ctl *c, struct rp_ring *r, uint64_t *rng)
{
	struct rp_shm_ring *h = r->hdr;
	uint64_t x = xorshift(rng), pos = get64(&h->producer_pos);
	uint32_t len = (uint32_t)rp_record_size(0, 0, sizeof(struct payload));
	struct rp_shm_record *rec;
	struct payload pl = { .counter = x, .thread = 999 };
	uint32_t tid, seq;

	if (!__atomic_compare_exchange_n(&h->producer_pos, &pos, pos + len, 0, __ATOMIC_RELAXED,
					 __ATOMIC_RELAXED))
		return;
	rec = (struct rp_shm_record *)(r->data + (pos & r->mask));
	switch ((x >> 8) & 7) {
	case 0: tid = 0; break;
	case 1: tid = 0x7fffffffu; break;
	case 2: tid = 5000000u; break;
	case 3: case 4: tid = c->tids[(x >> 12) % NPRODUCERS]; break;
	default: tid = 1 + (uint32_t)((x >> 16) % 4000000u); break;
	}
	switch ((x >> 40) & 7) {
	case 0: seq = 0; break;
	case 1: seq = 1; break;
	case 2: seq = 0x80000000u; break;
	case 3: seq = 0xffffffffu; break;
	case 4: seq = 2; break;
	default: seq = (uint32_t)(x >> 24); break;
	}
	rp_record_fill(rec, c->meta_id, x >> 3, tid, seq, 0, sizeof(pl), (uint32_t)(x >> 50));
	memcpy(rec + 1, &pl, sizeof(pl));
	__atomic_store_n(&rec->len, len, __ATOMIC_RELEASE);
	c->forged++;
}

static void mapper_op(struct ctl *c, struct rp_shm *v, uint64_t *rng)
{
	uint64_t x = xorshift(rng), y = xorshift(rng);
	unsigned int kind = (unsigned int)(x % K_NKINDS);
	struct rp_ring *r = rp_shm_ring(v, (uint32_t)((x >> 8) % rp_shm_nr_rings(v)));
	struct rp_shm_ring *h = r->hdr;
	struct rp_shm_session *sh = rp_shm_header(v);
	uint64_t size = r->size, prod = get64(&h->producer_pos), cons = get64(&h->consumer_pos);
	unsigned char *at;

	if (c->only && !(c->only & (1u << kind)))
		return;
	c->ops++;
	c->ops_by_kind[kind]++;
	switch (kind) {
	case K_PROD:
		put64(&h->producer_pos, near(rng, (y & 1) ? prod : cons, size));
		break;
	case K_CONS:
		put64(&h->consumer_pos, near(rng, (y & 1) ? prod : cons, size));
		break;
	case K_LEN: {
		/* the len word of the record the reader reads next, or of the
		 * one being written */
		static const uint32_t lens[] = { 0, 61, 16, 4096, 0x3fff0000u, RP_REC_BUSY | 64,
						 RP_REC_BUSY, RP_REC_DISCARD | 48, 48, 64, 0xffffffffu };

		at = r->data + ((((y >> 1) & 1) ? cons : prod - 48) & r->mask);
		put32(at, (y & 0x100) ? (uint32_t)(y >> 32) : lens[(y >> 8) % 11]);
		break;
	}
	case K_BODY:
		/* anywhere in the data area (both copies) */
		at = r->data + ((y >> 4) % (2 * size - 8) & ~7ull);
		put64(at, xorshift(rng));
		break;
	case K_HEADER: {
		/* a field of a record near the reader: tid, seq, meta, flags,
		 * payload length, cpu */
		struct rp_shm_record *rec = (void *)(r->data + ((cons + 8 * ((y >> 8) & 63)) & r->mask));
		uint32_t w = (uint32_t)(y >> 32);

		switch (y & 7) {
		case 0: put32(&rec->tid, 0); break;
		case 1: put32(&rec->tid, w); break;
		case 2: put32(&rec->seq, w); break;
		case 3: put32(&rec->seq, rec->seq + 0x10000000u); break;
		case 4: put32(&rec->meta_id, w & 0xff); break;
		case 5: put32((char *)rec + 24, w); break;	/* flags + payload_len */
		case 6: put32(&rec->cpu, w); break;
		default: put64(&rec->timestamp, (uint64_t)w << (y & 31)); break;
		}
		break;
	}
	case K_FORGE:
		forge(c, r, rng);
		break;
	case K_SESSION: {
		/* control words, the unused Block words, geometry */
		uint32_t w = (uint32_t)(y >> 32);

		switch (y % 14) {
		case 0: put32(&sh->abort, w | 1); break;
		case 1: put32(&sh->space_freed, w); break;
		case 2: put32(&sh->waiter_head, w); break;
		case 3: {
			struct rp_shm_waiter *wt = &sh->waiters[(y >> 8) % RP_SHM_WAITER_SLOTS];

			put32(&wt->futex, w);
			put32(&wt->tid, w ^ 1);
			put32(&wt->ticket, w ^ 2);
			put32(&wt->state, w ^ 3);
			break;
		}
		case 4: put64(&sh->drainer_timeout_ns, (y >> 8) & 1 ? 0 : ~0ull); break;
		case 5: put64(&sh->drainer_heartbeat_ns, (y >> 8) & 1 ? 0 : (uint64_t)w << 20); break;
		case 6: put32(&sh->drainer_idle, w & 1); break;
		case 7: __atomic_fetch_add(&sh->drainer_wake, 1, __ATOMIC_RELAXED); break;
		case 8: put32(&sh->wake_watermark, (y >> 8) & 1 ? 0 : w); break;
		case 9: put32(&sh->drainer_pid, w); break;
		case 10: put32(&sh->drainer_tid, w); break;
		case 11: put32(&sh->nr_rings, w); break;
		case 12: put64(&sh->ring_data_size, y); break;
		default: put32(&sh->max_record, w); break;
		}
		break;
	}
	case K_RINGHDR:
		switch (y & 3) {
		case 0: put32(&h->magic, (uint32_t)(y >> 32)); break;
		case 1: put64(&h->data_size, y >> 8); break;
		case 2: put64(&h->data_offset, y >> 8); break;
		default: put32(&h->max_record, (uint32_t)(y >> 32)); break;
		}
		break;
	case K_DROPS: {
		__u64 *d = &h->drops[(y >> 8) % RP_DROP_SLOTS];
		uint64_t cur = get64(d);

		switch (y & 7) {
		case 0: put64(d, 10000000000000000000ull); break;
		case 1: put64(d, 0); break;
		case 2: put64(d, ~0ull); break;
		case 3: put64(d, cur + (1ull << 41)); break;
		case 4: put64(d, cur - 1); break;
		case 5: put64(d, xorshift(rng)); break;
		default: {
			/* plausible: small, and slower than real drops could
			 * come; no reader can tell these from real ones */
			uint64_t k = 1 + ((y >> 16) & 255);

			__atomic_fetch_add(d, k, __ATOMIC_RELAXED);
			c->drops_added += k;
			break;
		}
		}
		break;
	}
	default:	/* K_COUNTERS: the reader's own figures */
		put64((y & 1) ? &h->corrupt : (y & 2) ? &h->stale_skipped : &h->skipped_bytes,
		      xorshift(rng));
		break;
	}
}

static void mapper_main(struct ctl *c, int fd)
{
	char err[200] = "";
	struct rp_shm_open_opts oo = { .sz = sizeof(oo), .errbuf = err, .errbuf_len = sizeof(err) };
	struct rp_shm *v = rp_shm_open_fd(fd, &oo);
	uint64_t rng = c->seed, t0 = now_ns();

	if (!v) {
		snprintf(c->err, sizeof(c->err), "rp_shm_open_fd: %s", err);
		_exit(2);
	}
	__atomic_store_n(&c->ready, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&c->stop, __ATOMIC_ACQUIRE) && now_ns() - t0 < c->attack_ns) {
		mapper_op(c, v, &rng);
		/* bursts, then a pause: about 10^4 to 10^5 writes a second */
		if (!(xorshift(&rng) & 7)) {
			struct timespec ts = { 0, 20000 };

			nanosleep(&ts, NULL);
		}
	}
	_exit(0);
}

static pid_t mapper_start(struct ctl *c, struct rp_session *s)
{
	pid_t pid = fork();

	cr_assert_geq(pid, 0, "fork");
	if (pid == 0)
		mapper_main(c, rp_shm_fd(s->shm));
	while (!__atomic_load_n(&c->ready, __ATOMIC_ACQUIRE)) {
		int st;

		if (waitpid(pid, &st, WNOHANG) == pid)
			cr_assert_fail("the mapper exited early (0x%x): %s", st, c->err);
		usleep(1000);
	}
	return pid;
}

static void mapper_wait(struct ctl *c, pid_t pid)
{
	int st;

	__atomic_store_n(&c->stop, 1, __ATOMIC_RELEASE);
	cr_assert_eq(waitpid(pid, &st, 0), pid, "waitpid");
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "mapper: status 0x%x: %s", st, c->err);
}

static struct ctl *ctl_new(uint64_t seed, uint64_t attack_ns, unsigned int only)
{
	struct ctl *c = mmap(NULL, sizeof(*c), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
			     -1, 0);

	cr_assert_neq(c, MAP_FAILED, "mmap");
	memset(c, 0, sizeof(*c));
	c->seed = seed;
	c->attack_ns = attack_ns;
	c->only = only;
	return c;
}

/* ---- producers ------------------------------------------------------------- */

#ifdef __SANITIZE_THREAD__
/*
 * The mapper moves positions under the producers, so two of them can be
 * handed the same bytes, and a reader's repair zeroes bytes that a misled
 * producer is still writing: races on the ring data are what this test
 * provokes, on memory another process writes anyway. ThreadSanitizer is
 * told to ignore the producer threads' plain accesses; everything else
 * (the drainer against the statistics readers and against itself, the
 * positions and len words, which are atomics) it still checks.
 */
void AnnotateIgnoreReadsBegin(const char *file, int line);
void AnnotateIgnoreReadsEnd(const char *file, int line);
void AnnotateIgnoreWritesBegin(const char *file, int line);
void AnnotateIgnoreWritesEnd(const char *file, int line);
#define IGNORE_PRODUCER_RACES(on)						\
	((on) ? (AnnotateIgnoreReadsBegin(__FILE__, __LINE__),			\
		 AnnotateIgnoreWritesBegin(__FILE__, __LINE__)) :		\
		(AnnotateIgnoreWritesEnd(__FILE__, __LINE__),			\
		 AnnotateIgnoreReadsEnd(__FILE__, __LINE__)))
#else
#define IGNORE_PRODUCER_RACES(on) ((void)(on))
#endif

struct producer {
	struct rp_event *ev;
	uint32_t index;
	uint32_t tid;
	int *stop;
	int started;
	uint64_t attempts, ok, nobufs, other;
	uint64_t max_ns, max_cpu_ns;
	uint64_t over_cpu;	/* writes that ran past WRITE_CPU_BOUND_DROP_NS */
	int last_other;
};

static void *producer_main(void *arg)
{
	struct producer *p = arg;
	struct payload pl = { .thread = p->index };

	p->tid = (uint32_t)gettid();
	__atomic_store_n(&p->started, 1, __ATOMIC_RELEASE);
	IGNORE_PRODUCER_RACES(true);
	while (!__atomic_load_n(p->stop, __ATOMIC_ACQUIRE)) {
		uint64_t t0 = now_ns(), c0 = cpu_ns(), dt, dc;
		int rc;

		pl.counter = ++p->attempts;
		rc = rp_event_write(p->ev, &pl, sizeof(pl));
		dc = cpu_ns() - c0;
		dt = now_ns() - t0;
		if (dt > p->max_ns)
			p->max_ns = dt;
		if (dc > p->max_cpu_ns)
			p->max_cpu_ns = dc;
		if (dc > WRITE_CPU_BOUND_DROP_NS)
			p->over_cpu++;
		if (!rc)
			p->ok++;
		else if (rc == -ENOBUFS)
			p->nobufs++;
		else
			p->other++, p->last_other = rc;
		if (!(p->attempts & 255))
			sched_yield();	/* leave the mapper and the drainer some CPU */
	}
	IGNORE_PRODUCER_RACES(false);
	return NULL;
}

/* ---- reading the trace ----------------------------------------------------- */

struct summary {
	uint64_t events, burst, heal;
	/* Heal events in all: a scribbled meta_id can make a Burst record
	 * read as one (heal counts only those the main thread wrote) */
	uint64_t heal_all;
	int64_t lost;
};

static struct summary read_own(const char *path)
{
	struct summary t = { 0 };
	struct nt_reader *r = nt_reader_open(path);
	struct nt_rec rec;
	int err;

	cr_assert_not_null(r, "cannot open %s", path);
	while ((err = nt_reader_next(r, &rec)) > 0) {
		t.events++;
		if (!strcmp(rec.meta->raw_name, "Burst"))
			t.burst++;
		else if (!strcmp(rec.meta->raw_name, "Heal")) {
			struct payload pl = { 0 };

			memcpy(&pl, rec.payload, rec.payload_len < sizeof(pl) ? rec.payload_len : sizeof(pl));
			t.heal_all++;
			t.heal += pl.thread == HEAL_THREAD && pl.counter < HEAL_EVENTS;
		}
	}
	cr_assert_eq(err, 0, "ringpipe's reader: %s", nt_reader_errmsg(r));
	t.lost = nt_reader_lost(r);
	nt_reader_free(r);
	return t;
}

/* TraceEvent's counts; false when the dumper is not available. */
static bool read_traceevent(const char *path, const char *prov, struct summary *t)
{
	const char *why = NULL, *dll = th_tracedump(&why), *p;
	struct bytebuf out = { 0 };
	char *cmd, key[128];
	int rc;

	if (!dll) {
		if (th_require_interop())
			cr_assert_fail("RINGPIPE_REQUIRE_INTEROP=1 but %s", why);
		cr_log_info("TraceEvent not consulted: %s", why);
		return false;
	}
	memset(t, 0, sizeof(*t));
	cr_assert(asprintf(&cmd, "dotnet '%s' counts '%s' 2>&1", dll, path) > 0);
	rc = th_run(cmd, &out);
	cr_assert_eq(rc, 0, "TraceEvent could not read the trace: %s", (char *)out.p);
	snprintf(key, sizeof(key), "%s/Burst\t", prov);
	p = strstr((char *)out.p, key);
	t->burst = p ? strtoull(p + strlen(key), NULL, 10) : 0;
	snprintf(key, sizeof(key), "%s/Heal\t", prov);
	p = strstr((char *)out.p, key);
	t->heal = p ? strtoull(p + strlen(key), NULL, 10) : 0;
	p = strstr((char *)out.p, "#lost\t");
	cr_assert_not_null(p, "no #lost line: %s", (char *)out.p);
	t->lost = strtoll(p + 6, NULL, 10);
	bb_free(&out);
	free(cmd);
	return true;
}

/* ---- the scenario ---------------------------------------------------------- */

struct outcome {
	uint64_t attempts, ok, nobufs, max_write_ns, max_cpu_ns, over_cpu, heal_max_ns, heal_ns,
		 stop_ns;
	struct rp_session_stats st;
	struct summary own, te;
	bool have_te;
};

static void run_hostile(int mode, uint64_t seed, uint64_t attack_ns, unsigned int only,
			struct outcome *o)
{
	char prov[64], *dir = th_tmpdir(), *path;
	struct rp_provider *p;
	struct rp_event *burst, *heal;
	struct rp_provider_config pc;
	struct rp_session_opts so = { .sz = sizeof(so), .nproviders = 1, .buffer_bytes = 1 << 20,
				      .buffering = mode };
	struct producer pr[NPRODUCERS];
	pthread_t th[NPRODUCERS];
	struct rp_session *s;
	struct ctl *c = ctl_new(seed, attack_ns, only);
	struct payload pl = { .thread = HEAL_THREAD };
	uint64_t t0, written, lost_bound;
	int stop = 0, i, k;
	pid_t pid;

	memset(o, 0, sizeof(*o));
	snprintf(prov, sizeof(prov), "Test-Hostile-%s-%u", mode ? "Block" : "Drop", only);
	{
		struct rp_provider_opts po = { .sz = sizeof(po), .name = prov };

		p = rp_provider_new(&po);
		cr_assert_not_null(p, "rp_provider_new: %s", rp_last_error());
	}
	burst = make_event(p, 1, "Burst");
	heal = make_event(p, 2, "Heal");
	pc = (struct rp_provider_config){ .name = prov };
	so.providers = &pc;
	cr_assert(asprintf(&path, "%s/hostile.nettrace", dir) > 0);
	so.path = path;
	s = rp_session_start(&so);
	cr_assert_not_null(s, "%s", rp_last_error());

	for (i = 0; i < NPRODUCERS; i++) {
		pr[i] = (struct producer){ .ev = burst, .index = (uint32_t)i, .stop = &stop };
		cr_assert_eq(pthread_create(&th[i], NULL, producer_main, &pr[i]), 0);
	}
	for (i = 0; i < NPRODUCERS; i++) {
		while (!__atomic_load_n(&pr[i].started, __ATOMIC_ACQUIRE))
			usleep(100);
		c->tids[i] = pr[i].tid;
	}
	c->meta_id = burst->index;
	cr_log_info("%s: seed 0x%" PRIx64 ", mapper for %" PRIu64 " ms", prov, seed,
		    attack_ns / 1000000);

	pid = mapper_start(c, s);
	/* meanwhile: the figures never go back (events_written is what the
	 * output took; drops are the producers' own counters) */
	{
		struct rp_session_stats prev = { .sz = sizeof(prev) }, now = { .sz = sizeof(now) };
		uint64_t until = now_ns() + attack_ns;

		while (now_ns() < until) {
			uint64_t pd = 0, nd = 0;

			cr_assert_eq(rp_session_stats(s, &now), 0);
			for (i = 0; i < RP_DROP_REASON_NR; i++)
				pd += prev.dropped[i], nd += now.dropped[i];
			cr_assert_geq(now.events_written, prev.events_written,
				      "%s: events_written went from %" PRIu64 " to %" PRIu64, prov,
				      prev.events_written, now.events_written);
			cr_assert_geq(nd, pd, "%s: drops went from %" PRIu64 " to %" PRIu64, prov, pd, nd);
			prev = now;
			usleep(1000);
		}
	}
	mapper_wait(c, pid);
	/* the producers go on for a while with the mapper gone */
	usleep((useconds_t)(LOAD_AFTER_NS / 1000));
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	for (i = 0; i < NPRODUCERS; i++) {
		pthread_join(th[i], NULL);
		o->attempts += pr[i].attempts;
		o->ok += pr[i].ok;
		o->nobufs += pr[i].nobufs;
		if (pr[i].max_ns > o->max_write_ns)
			o->max_write_ns = pr[i].max_ns;
		if (pr[i].max_cpu_ns > o->max_cpu_ns)
			o->max_cpu_ns = pr[i].max_cpu_ns;
		o->over_cpu += pr[i].over_cpu;
		cr_assert_eq(pr[i].other, 0, "producer %d: %" PRIu64 " writes returned %d", i,
			     pr[i].other, pr[i].last_other);
	}

	/* healed: the rings drain (a head the mapper left uncommitted is
	 * skipped once every writer of this process has been seen outside a
	 * write), then every write is captured */
	t0 = now_ns();
	for (;;) {
		uint32_t q, busy = 0;

		/* empty as producers see it: everything read and handed back */
		for (q = 0; q < rp_shm_nr_rings(s->shm); q++) {
			const struct rp_shm_ring *h = rp_shm_ring(s->shm, q)->hdr;

			busy += rp_load_relaxed(&h->producer_pos) != rp_load_relaxed(&h->consumer_pos);
		}
		if (!busy)
			break;
		if (now_ns() - t0 > HEAL_DEADLINE_NS)
			for (q = 0; q < rp_shm_nr_rings(s->shm); q++) {
				struct rp_ring *r = rp_shm_ring(s->shm, q);

				const uint32_t *w = (const uint32_t *)(r->data + (r->cons & r->mask));

				cr_log_info("ring %u: head %08x %08x %08x %08x %08x %08x %08x %08x "
					    "stuck since %" PRIu64 " ms", q, w[0], w[1], w[2], w[3], w[4],
					    w[5], w[6], w[7], r->stuck_since_ns ?
					    (now_ns() - r->stuck_since_ns) / 1000000 : 0);
				cr_log_info("ring %u: cons %" PRIu64 " P %" PRIu64 " C %" PRIu64
					    " stale %" PRIu64 " corrupt %" PRIu64 ": %s", q, r->cons,
					    (uint64_t)r->hdr->producer_pos,
					    (uint64_t)r->hdr->consumer_pos, rp_ring_stale_count(r),
					    rp_ring_corrupt_count(r), rp_ring_last_error(r));
			}
		cr_assert_leq(now_ns() - t0, HEAL_DEADLINE_NS, "%s: %u rings still not drained %" PRIu64
			      " ms after the producers stopped", prov, busy, (now_ns() - t0) / 1000000);
		usleep(1000);
	}
	o->heal_ns = now_ns() - t0;
	for (k = 0; k < (int)HEAL_EVENTS; k++) {
		uint64_t dt;
		int rc;

		pl.counter = (uint64_t)k;
		t0 = now_ns();
		rc = rp_event_write(heal, &pl, sizeof(pl));
		dt = now_ns() - t0;
		if (dt > o->heal_max_ns)
			o->heal_max_ns = dt;
		if (rc) {
			for (uint32_t q = 0; q < rp_shm_nr_rings(s->shm); q++) {
				struct rp_ring *r = rp_shm_ring(s->shm, q);

				cr_log_info("ring %u: cons %" PRIu64 " published %" PRIu64 " prod_seen %"
					    PRIu64 " P %" PRIu64 " C %" PRIu64 " last error: %s", q,
					    r->cons, r->published, r->prod_seen,
					    (uint64_t)r->hdr->producer_pos, (uint64_t)r->hdr->consumer_pos,
					    rp_ring_last_error(r));
			}
		}
		cr_assert_eq(rc, 0, "%s: write %d after the mapper left returned %d", prov, k, rc);
	}
	/* wait until the drainer has written them (or give up after 2 s) */
	for (k = 0, written = UINT64_MAX; k < 200; k++) {
		o->st = (struct rp_session_stats){ .sz = sizeof(o->st) };
		cr_assert_eq(rp_session_stats(s, &o->st), 0);
		if (o->st.events_written == written)
			break;
		written = o->st.events_written;
		usleep(10000);
	}
	t0 = now_ns();
	cr_assert_eq(rp_session_stop(s), 0, "%s: stop", prov);
	o->stop_ns = now_ns() - t0;

	cr_log_info("%s: %" PRIu64 " attempts (%" PRIu64 " captured), longest write %" PRIu64
		    " us (cpu %" PRIu64 " us), drained %" PRIu64 " ms after, stop %" PRIu64
		    " us; mapper: %" PRIu64
		    " writes, %" PRIu64 " forged records, "
		    "%" PRIu64 " plausible drop increments; stats: written %" PRIu64 ", dropped full %"
		    PRIu64 " aborted %" PRIu64 ", corrupt %" PRIu64 ", skipped %" PRIu64 " bytes, late %"
		    PRIu64, prov, o->attempts, o->ok, o->max_write_ns / 1000, o->max_cpu_ns / 1000,
		    o->heal_ns / 1000000,
		    o->stop_ns / 1000,
		    c->ops, c->forged, c->drops_added, o->st.events_written,
		    o->st.dropped[RP_DROP_REASON_FULL], o->st.dropped[RP_DROP_REASON_ABORTED],
		    o->st.corrupt_records, o->st.skipped_bytes, o->st.late_events);

	/* a Drop write never waits or spins, whatever the mapper does: a
	 * bound on the writing thread's own CPU time, which load does not
	 * stretch (the wall-clock figures are only reported above) */
	if (mode == RP_BUFFERING_DROP) {
		cr_assert_leq(o->over_cpu, WRITE_CPU_OUTLIERS, "%s: %" PRIu64 " writes ran for more "
			      "than %" PRIu64 " us (the longest %" PRIu64 " us)", prov, o->over_cpu,
			      (uint64_t)(WRITE_CPU_BOUND_DROP_NS / 1000), o->max_cpu_ns / 1000);
		cr_assert_leq(o->max_cpu_ns, 10 * WRITE_CPU_BOUND_DROP_NS, "%s: a write ran for %" PRIu64
			      " us", prov, o->max_cpu_ns / 1000);
	}

	/* the drops are the writers' own, exactly: a mapper can neither hide
	 * nor add any (they are counted in memory it cannot write) */
	{
		uint64_t dropped = 0;

		for (i = 0; i < RP_DROP_REASON_NR; i++)
			dropped += o->st.dropped[i];
		cr_assert_eq(dropped, o->nobufs, "%s: the session counted %" PRIu64 " drops, the "
			     "writers were told -ENOBUFS %" PRIu64 " times", prov, dropped, o->nobufs);
		if (mode == RP_BUFFERING_BLOCK)
			cr_assert_eq(dropped, 0, "%s: Block dropped %" PRIu64 " while the session ran",
				     prov, dropped);
	}

	/* the figures are plausible */
	{
		uint64_t dropped = 0, attempts = o->attempts + HEAL_EVENTS;

		for (i = 0; i < RP_DROP_REASON_NR; i++)
			dropped += o->st.dropped[i];
		cr_assert_leq(dropped, attempts + c->drops_added,
			      "%s: %" PRIu64 " drops for %" PRIu64 " attempts (+%" PRIu64 " added)",
			      prov, dropped, attempts, c->drops_added);
		cr_assert_leq(o->st.corrupt_records, attempts + 2 * c->ops,
			      "%s: %" PRIu64 " corrupt for %" PRIu64 " attempts and %" PRIu64
			      " mapper writes", prov, o->st.corrupt_records, attempts, c->ops);
		cr_assert_leq(o->st.events_written, attempts + c->forged,
			      "%s: %" PRIu64 " written for %" PRIu64 " attempts", prov,
			      o->st.events_written, attempts);
		cr_assert_leq(o->st.skipped_bytes,
			      (o->st.corrupt_records + 1) * (so.buffer_bytes + (1u << 20)),
			      "%s: %" PRIu64 " bytes skipped", prov, o->st.skipped_bytes);
	}

	/* the trace */
	o->own = read_own(path);
	cr_assert_eq(o->own.heal, HEAL_EVENTS, "%s: %" PRIu64 " of %u writes after the mapper "
		     "left are in the trace", prov, o->own.heal, HEAL_EVENTS);
	cr_assert_leq(o->own.burst, o->ok + c->forged, "%s: more events than captured", prov);
	/* EventsLost is the writers' drops, exactly: what the mapper destroyed
	 * or forged is corrupt (corrupt_records, skipped_bytes), never a loss
	 * the writers did not see */
	cr_assert_eq((uint64_t)o->own.lost, o->nobufs,
		     "%s: EventsLost %" PRId64 ", the writers' drops %" PRIu64, prov, o->own.lost,
		     o->nobufs);
	lost_bound = o->nobufs;
	o->have_te = read_traceevent(path, prov, &o->te);
	if (o->have_te) {
		cr_log_info("%s: TraceEvent: %" PRIu64 " Burst, %" PRIu64 " Heal, EventsLost %" PRId64
			    "; ringpipe's reader: %" PRIu64 " Burst, EventsLost %" PRId64, prov,
			    o->te.burst, o->te.heal, o->te.lost, o->own.burst, o->own.lost);
		cr_assert_eq(o->te.heal, o->own.heal_all, "%s: TraceEvent sees %" PRIu64 " Heal "
			     "events, ringpipe's reader %" PRIu64, prov, o->te.heal, o->own.heal_all);
		cr_assert_geq(o->te.lost, 0, "%s: TraceEvent EventsLost %" PRId64, prov, o->te.lost);
		cr_assert_lt(o->te.lost, (int64_t)INT_MAX, "%s: EventsLost saturated", prov);
		cr_assert_eq((uint64_t)o->te.lost, lost_bound,
			     "%s: TraceEvent EventsLost %" PRId64 ", the writers' drops %" PRIu64, prov,
			     o->te.lost, lost_bound);
		cr_assert_leq(o->te.burst, o->ok + c->forged, "%s: TraceEvent: more events than "
			      "captured", prov);
	}
	munmap(c, sizeof(*c));
	free(path);
	th_rmdir(dir);
}

Test(hostile, drop_session_survives_a_mapper, .timeout = 120)
{
	struct outcome o;

	run_hostile(RP_BUFFERING_DROP, test_seed(0x5eed0001), ATTACK_NS, 0, &o);
}

Test(hostile, block_session_survives_a_mapper, .timeout = 120)
{
	struct outcome o;

	run_hostile(RP_BUFFERING_BLOCK, test_seed(0x5eed0002), ATTACK_NS, 0, &o);
}

/* The same with the mapper on the positions only: the worst for progress. */
Test(hostile, drop_session_survives_position_scribbles, .timeout = 120)
{
	struct outcome o;

	run_hostile(RP_BUFFERING_DROP, test_seed(0x5eed0003), ATTACK_NS,
		    1u << K_PROD | 1u << K_CONS | 1u << K_LEN, &o);
}

Test(hostile, block_session_survives_position_scribbles, .timeout = 120)
{
	struct outcome o;

	run_hostile(RP_BUFFERING_BLOCK, test_seed(0x5eed0004), ATTACK_NS,
		    1u << K_PROD | 1u << K_CONS | 1u << K_LEN, &o);
}

/* Forged records and scribbled headers only: the sequence-number and
 * thread-id checks, and the drop counters. */
Test(hostile, forged_records_and_counters_stay_plausible, .timeout = 120)
{
	struct outcome o;

	run_hostile(RP_BUFFERING_DROP, test_seed(0x5eed0005), ATTACK_NS,
		    1u << K_FORGE | 1u << K_HEADER | 1u << K_DROPS | 1u << K_COUNTERS, &o);
	cr_assert_gt(o.st.corrupt_records, 0, "forged records must be found");
}

/* ---- the hang of the issue: one 8-byte write --------------------------------- */

/* Until the drainer has written n events (at most 5 s). */
static void wait_written(struct rp_session *s, uint64_t n)
{
	struct rp_session_stats st;

	th_wait_written(s, n, 5000, &st);
	cr_assert_geq(st.events_written, n, "the drainer wrote %" PRIu64 " of %" PRIu64 " events",
		      st.events_written, n);
}

/*
 * consumer_pos = producer_pos + 4096 on every ring, rewritten by the other
 * process as fast as it can for a while: producers see full rings at most
 * until the drainer's next pass, stop returns, and writes after it are
 * captured (the times are logged, never asserted).
 */
static void scribble_consumer_pos(int mode)
{
	char prov[64], *dir = th_tmpdir(), *path;
	struct rp_provider *p;
	struct rp_event *ev;
	struct rp_provider_config pc;
	struct rp_session_opts so = { .sz = sizeof(so), .nproviders = 1, .buffer_bytes = 1 << 20,
				      .buffering = mode };
	struct rp_session *s;
	struct payload pl = { 0 };
	struct summary t;
	uint64_t t0, dt, max_ns = 0, ok = 0;
	pid_t pid;
	int k, st;

	snprintf(prov, sizeof(prov), "Test-Hostile-Cons-%d", mode);
	{
		struct rp_provider_opts po = { .sz = sizeof(po), .name = prov };

		p = rp_provider_new(&po);
		cr_assert_not_null(p);
	}
	ev = make_event(p, 1, "Heal");
	pc = (struct rp_provider_config){ .name = prov };
	so.providers = &pc;
	cr_assert(asprintf(&path, "%s/cons.nettrace", dir) > 0);
	so.path = path;
	s = rp_session_start(&so);
	cr_assert_not_null(s, "%s", rp_last_error());
	for (k = 0; k < 100; k++)
		cr_assert_eq(rp_event_write(ev, &pl, sizeof(pl)), 0);
	wait_written(s, 100);

	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct rp_shm *v = rp_shm_open_fd(rp_shm_fd(s->shm), NULL);
		uint64_t end = now_ns() + 400000000ull;

		if (!v)
			_exit(2);
		while (now_ns() < end)
			for (uint32_t i = 0; i < rp_shm_nr_rings(v); i++) {
				struct rp_shm_ring *h = rp_shm_ring(v, i)->hdr;

				put64(&h->consumer_pos, get64(&h->producer_pos) + 4096);
			}
		_exit(0);
	}
	/* writes meanwhile: Drop ones may drop, none may wait long */
	for (k = 0; k < 2000; k++) {
		t0 = now_ns();
		ok += rp_event_write(ev, &pl, sizeof(pl)) == 0;
		dt = now_ns() - t0;
		if (dt > max_ns)
			max_ns = dt;
		if (!(k & 15))
			usleep(100);
	}
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && !WEXITSTATUS(st), "scribbler: 0x%x", st);
	/* the scribbler is gone: the drainer's next pass (at the latest when
	 * its idle sleep ends) rewrites every consumer position; then writes
	 * are captured (a Block write would wait, a Drop write would drop:
	 * both count, so the rings are watched rather than probed) */
	t0 = now_ns();
	for (;;) {
		bool sane = true;

		for (uint32_t i = 0; i < rp_shm_nr_rings(s->shm); i++) {
			const struct rp_shm_ring *h = rp_shm_ring(s->shm, i)->hdr;

			if (get64(&h->consumer_pos) > get64(&h->producer_pos))
				sane = false;
		}
		if (sane)
			break;
		cr_assert_leq(now_ns() - t0, HEAL_DEADLINE_NS, "the rings did not heal in %" PRIu64
			      " ms", (uint64_t)(HEAL_DEADLINE_NS / 1000000));
		usleep(1000);
	}
	for (k = 0; k < (int)HEAL_EVENTS; k++)
		cr_assert_eq(rp_event_write(ev, &pl, sizeof(pl)), 0, "write %d after the scribbler", k);
	t0 = now_ns();
	cr_assert_eq(rp_session_stop(s), 0);
	dt = now_ns() - t0;
	cr_log_info("%s: %" PRIu64 " of 2000 writes captured under the scribbler, longest %" PRIu64
		    " us, stop %" PRIu64 " us", prov, ok, max_ns / 1000, dt / 1000);
	t = read_own(path);
	cr_assert_eq(t.heal_all, 100 + ok + HEAL_EVENTS, "%" PRIu64 " events, expected %" PRIu64,
		     t.heal_all, 100 + ok + HEAL_EVENTS);
	cr_assert_eq(t.lost, (int64_t)(2000 - ok), "EventsLost %" PRId64, t.lost);
	free(path);
	th_rmdir(dir);
}

Test(hostile, drop_scribbled_consumer_pos_heals, .timeout = 60)
{
	scribble_consumer_pos(RP_BUFFERING_DROP);
}

Test(hostile, block_scribbled_consumer_pos_heals, .timeout = 60)
{
	scribble_consumer_pos(RP_BUFFERING_BLOCK);
}

/*
 * Stop with a hostile producer position that keeps moving a little past
 * the reader into space nobody wrote (uncommitted, reading zero): the
 * stopping drainer does not wait for those records (every writer of this
 * process is out), and stop returns although the other process never
 * stops (the test's timeout turns a hang into a failure).
 */
Test(hostile, stop_with_positions_moving_returns, .timeout = 60)
{
	char *dir = th_tmpdir(), *path;
	struct rp_provider_opts po = { .sz = sizeof(po), .name = "Test-Hostile-Stop" };
	struct rp_provider *p = rp_provider_new(&po);
	struct rp_event *ev = make_event(p, 1, "Heal");
	struct rp_provider_config pc = { .name = "Test-Hostile-Stop" };
	struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
				      .buffer_bytes = 1 << 20 };
	struct rp_session *s;
	struct payload pl = { 0 };
	struct summary t;
	uint64_t t0, dt;
	pid_t pid;
	int k, st;

	cr_assert(asprintf(&path, "%s/stop.nettrace", dir) > 0);
	so.path = path;
	s = rp_session_start(&so);
	cr_assert_not_null(s, "%s", rp_last_error());
	for (k = 0; k < 100; k++)
		cr_assert_eq(rp_event_write(ev, &pl, sizeof(pl)), 0);
	wait_written(s, 100);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct rp_shm *v = rp_shm_open_fd(rp_shm_fd(s->shm), NULL);
		uint64_t x = 1, end = now_ns() + 10000000000ull;

		if (!v)
			_exit(2);
		/* until killed: a little past the consumer, or past a ring */
		while (now_ns() < end)
			for (uint32_t i = 0; i < rp_shm_nr_rings(v); i++) {
				struct rp_shm_ring *h = rp_shm_ring(v, i)->hdr;
				uint64_t c = get64(&h->consumer_pos);

				xorshift(&x);
				put64(&h->producer_pos, c + ((x & 1) ? 4096 : 3 * v->data_size));
			}
		_exit(0);
	}
	usleep(100000);
	t0 = now_ns();
	cr_assert_eq(rp_session_stop(s), 0);
	dt = now_ns() - t0;
	kill(pid, SIGKILL);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_log_info("stop with moving positions: %" PRIu64 " us", dt / 1000);
	t = read_own(path);
	cr_assert_eq(t.heal_all, 100, "the events written before: %" PRIu64, t.heal_all);
	free(path);
	th_rmdir(dir);
}

/* ---- sequence numbers and thread ids, one forgery at a time --------------- */

/* A record forged into ring 0 as a producer would write it. */
static void forge_one(struct rp_session *s, uint32_t meta, uint32_t tid, uint32_t seq)
{
	struct rp_ring *r = rp_shm_ring(s->shm, 0);
	struct rp_shm_record *rec = rp_ring_reserve(r, (uint32_t)rp_record_size(0, 0, 16));
	struct payload pl = { .counter = 999999, .thread = 99 };

	cr_assert_not_null(rec);
	rp_record_fill(rec, meta, rp_clock_now(), tid, seq, 0, sizeof(pl), 0);
	memcpy(rec + 1, &pl, sizeof(pl));
	rp_ring_commit(rec);
}

/*
 * Forged thread ids and sequence numbers are refused; a real thread whose
 * id they use loses nothing to them (or one record, to a forged restart,
 * counted as corrupt), EventsLost stays the writers' drops (none), and the
 * old drop counters in the ring headers, set to absurd values, count for
 * nothing. one_pass: the drainer is paused from
 * the first forged record to the last real one, so that it reads them all
 * in one pass (as a drainer kept off its CPU for a while does), where the
 * refusals and the records that claim the loss they leave meet.
 */
static void forged_numbers(bool one_pass)
{
	char *dir = th_tmpdir(), *path;
	struct rp_provider_opts po = { .sz = sizeof(po), .name = "Test-Hostile-Seq" };
	struct rp_provider *p = rp_provider_new(&po);
	struct rp_event *ev = make_event(p, 1, "Burst");
	struct rp_provider_config pc = { .name = "Test-Hostile-Seq" };
	struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
				      .buffer_bytes = 1 << 20 };
	struct rp_session_stats st = { .sz = sizeof(st) };
	struct rp_session *s;
	struct payload pl = { 0 };
	struct summary t, te;
	uint32_t me = (uint32_t)gettid(), i, k;
	uint64_t dropped = 0;

	cr_assert(asprintf(&path, "%s/seq.nettrace", dir) > 0);
	so.path = path;
	s = rp_session_start(&so);
	cr_assert_not_null(s, "%s", rp_last_error());
	for (k = 0; k < 10; k++, pl.counter++)
		cr_assert_eq(rp_event_write(ev, &pl, sizeof(pl)), 0);
	usleep(30000);
	if (one_pass) {
		__atomic_store_n(&rp_drain_pause, 1, __ATOMIC_RELAXED);
		usleep(2000);	/* a pass under way ends; the next one waits */
	}
	/* seq of my next write: 2 + the 10 written */
	forge_one(s, ev->index, 0, 12);			/* thread 0 */
	forge_one(s, ev->index, 5000000, 12);		/* no such thread id */
	forge_one(s, ev->index, me, 0xffffffffu);	/* backwards, past the start */
	forge_one(s, ev->index, me, 12 + 0x80000000u);	/* a jump of 2^31 */
	forge_one(s, ev->index, me + 1, 1u << 30);	/* a new thread 2^30 in */
	/* and the drop counters of every ring near 1e19 */
	for (i = 0; i < rp_shm_nr_rings(s->shm); i++)
		for (k = 0; k < RP_DROP_SLOTS; k++)
			rp_store_relaxed(&rp_shm_ring(s->shm, i)->hdr->drops[k],
					 10000000000000000000ull + k);
	usleep(30000);
	for (k = 0; k < 10; k++, pl.counter++)
		cr_assert_eq(rp_event_write(ev, &pl, sizeof(pl)), 0);
	usleep(30000);
	/* a forged restart of my thread: believed (a reused id, nothing
	 * lost), so my next record looks like a jump and is refused, and the
	 * one after confirms it: one record lost */
	forge_one(s, ev->index, me, 2);
	usleep(30000);
	for (k = 0; k < 10; k++, pl.counter++)
		cr_assert_eq(rp_event_write(ev, &pl, sizeof(pl)), 0);
	__atomic_store_n(&rp_drain_pause, 0, __ATOMIC_RELAXED);
	for (k = 0; k < 400; k++) {	/* 29 real and the forged restart written */
		cr_assert_eq(rp_session_stats(s, &st), 0);
		if (st.events_written >= 30 && st.corrupt_records >= 6)
			break;
		usleep(5000);
	}
	cr_assert_eq(rp_session_stop(s), 0);
	for (k = 0; k < RP_DROP_REASON_NR; k++)
		dropped += st.dropped[k];
	cr_log_info("forged: corrupt %" PRIu64 ", dropped %" PRIu64, st.corrupt_records, dropped);
	cr_assert_eq(dropped, 0, "drop counters set to 1e19 are not reported: %" PRIu64, dropped);
	cr_assert_eq(st.corrupt_records, 6, "five forged records and one real one refused: %" PRIu64,
		     st.corrupt_records);
	t = read_own(path);
	/* 30 real, one forged restart; one real refused (corrupt, above), and
	 * no writer dropped anything: no EventsLost */
	cr_assert_eq(t.burst, 30, "events in the trace: %" PRIu64, t.burst);
	cr_assert_eq(t.lost, 0, "EventsLost: %" PRId64 ", the writers dropped nothing", t.lost);
	if (read_traceevent(path, "Test-Hostile-Seq", &te)) {
		cr_assert_eq(te.burst, 30, "TraceEvent: %" PRIu64 " events", te.burst);
		cr_assert_eq(te.lost, 0, "TraceEvent EventsLost: %" PRId64, te.lost);
	}
	free(path);
	th_rmdir(dir);
}

Test(hostile, forged_numbers_cost_a_thread_at_most_one_record, .timeout = 60)
{
	forged_numbers(false);
}

Test(hostile, forged_numbers_read_in_one_pass_cost_the_same, .timeout = 60)
{
	forged_numbers(true);
}
