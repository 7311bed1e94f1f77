// SPDX-License-Identifier: MIT
/*
 * The end of a session: stopping callbacks write into the stopping session
 * only and exactly once, even when sessions overlap and stop concurrently;
 * rundown is enabled for the stopping session alone; and end-of-session
 * writes are never lost to a full ring while the drainer runs.
 */
#include <inttypes.h>
#include <pthread.h>
#include <string.h>

#include "helpers.h"
#include "nettrace_read.h"
#include "ringpipe/ringpipe.h"

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define ROUNDS 5
#define BURST 20000u
#else
#define ROUNDS 25
#define BURST 200000u
#endif

static const struct rp_field end_fields[] = {
	{ "SessionId", RP_TYPE_U32, 0, 0, NULL },
	{ "Sequence", RP_TYPE_U64, 0, 0, NULL },
};

struct end_payload {
	uint32_t session_id;
	uint64_t seq;
} __attribute__((packed));

static struct rp_provider *new_provider(const char *name, rp_session_stopping_fn cb, void *ctx)
{
	struct rp_provider_opts po = { .sz = sizeof(po), .name = name, .stopping_cb = cb,
				       .cb_ctx = ctx };
	struct rp_provider *p = rp_provider_new(&po);

	cr_assert_not_null(p, "rp_provider_new: %s", rp_last_error());
	return p;
}

static struct rp_event *new_event(struct rp_provider *p, uint32_t id, const char *name,
				  uint64_t keywords)
{
	struct rp_event_opts eo = { .sz = sizeof(eo), .id = id, .name = name, .level = 4,
				    .keywords = keywords, .nfields = 2, .fields = end_fields };
	struct rp_event *ev = rp_event_new(p, &eo);

	cr_assert_not_null(ev, "rp_event_new: %s", rp_last_error());
	return ev;
}

/* Events named `name` in a trace, and how many carry `session_id`. */
struct end_count {
	uint64_t named, mine, other_named;
	int64_t lost;
};

static struct end_count count_named(const char *path, const char *name, uint32_t session_id)
{
	struct nt_reader *r = nt_reader_open(path);
	struct end_count c = { 0 };
	struct nt_rec rec;
	int err;

	cr_assert_not_null(r, "cannot open %s", path);
	while ((err = nt_reader_next(r, &rec)) > 0) {
		struct end_payload ep;

		if (strcmp(rec.meta->raw_name, name)) {
			c.other_named++;
			continue;
		}
		c.named++;
		cr_assert_eq(rec.payload_len, sizeof(ep));
		memcpy(&ep, rec.payload, sizeof(ep));
		if (ep.session_id == session_id)
			c.mine++;
	}
	cr_assert_eq(err, 0, "%s: %s", path, nt_reader_errmsg(r));
	c.lost = nt_reader_lost(r);
	nt_reader_free(r);
	return c;
}

/* ---- overlapping sessions, concurrent stops ------------------------------- */

static struct rp_event *ev_end, *ev_busy;
static uint64_t end_calls[RP_MAX_SESSIONS];	/* atomic */

static void end_cb(struct rp_provider *p, int session_id, uint64_t keywords, uint8_t level,
		   void *ctx)
{
	struct end_payload ep = { (uint32_t)session_id,
				  __atomic_add_fetch(&end_calls[session_id], 1, __ATOMIC_RELAXED) };

	cr_assert_eq(rp_event_write(ev_end, &ep, sizeof(ep)), 0);
}

struct busy {
	int stop;		/* atomic */
};

static void *busy_main(void *arg)
{
	struct busy *b = arg;
	struct end_payload ep = { 0xffffffffu, 0 };

	while (!__atomic_load_n(&b->stop, __ATOMIC_RELAXED)) {
		ep.seq++;
		rp_event_write(ev_busy, &ep, sizeof(ep));
	}
	return NULL;
}

struct stopper {
	struct rp_session *s;
	pthread_barrier_t *go;
	int rc;
};

static void *stopper_main(void *arg)
{
	struct stopper *st = arg;

	pthread_barrier_wait(st->go);
	st->rc = rp_session_stop(st->s);
	return NULL;
}

static struct rp_session *start_to(const char *path, const struct rp_provider_config *pc,
				   uint32_t npc, int buffering)
{
	struct rp_session_opts so = { .sz = sizeof(so), .providers = pc, .nproviders = npc,
				      .path = path, .buffering = buffering,
				      .buffer_bytes = 1 << 20 };
	struct rp_session *s = rp_session_start(&so);

	cr_assert_not_null(s, "rp_session_start: %s", rp_last_error());
	return s;
}

Test(stopping, overlapping_sessions_stopped_concurrently_get_end_data_once, .timeout = 300)
{
	static const struct rp_provider_config pc[] = {
		{ .name = "Test-End" },
		{ .name = "Test-Busy" },
	};
	char *dir = th_tmpdir();
	struct rp_provider *pend;
	struct busy b = { 0 };
	pthread_t busy_th[2];
	char path_c[512];
	struct rp_session *c;
	int round, i;

	pend = new_provider("Test-End", end_cb, NULL);
	ev_end = new_event(pend, 1, "End", 0);
	ev_busy = new_event(new_provider("Test-Busy", NULL, NULL), 1, "Busy", 0);

	/* a third session runs through every round: it must get no one
	 * else's end data, and its own once when it stops */
	snprintf(path_c, sizeof(path_c), "%s/c.nettrace", dir);
	c = start_to(path_c, pc, 2, RP_BUFFERING_DROP);
	for (i = 0; i < 2; i++)
		cr_assert_eq(pthread_create(&busy_th[i], NULL, busy_main, &b), 0);

	for (round = 0; round < ROUNDS; round++) {
		pthread_barrier_t go;
		struct stopper st[2];
		pthread_t th[2];
		char path[2][512];
		int slot[2];

		pthread_barrier_init(&go, NULL, 2);
		for (i = 0; i < 2; i++) {
			snprintf(path[i], sizeof(path[i]), "%s/r%d-%d.nettrace", dir, round, i);
			/* one Drop, one Block: both kinds stop concurrently */
			st[i] = (struct stopper){ start_to(path[i], pc, 2, i), &go, -1 };
			slot[i] = rp_session_id(st[i].s);
			end_calls[slot[i]] = 0;
		}
		cr_assert_neq(slot[0], slot[1]);
		for (i = 0; i < 2; i++)
			cr_assert_eq(pthread_create(&th[i], NULL, stopper_main, &st[i]), 0);
		for (i = 0; i < 2; i++) {
			pthread_join(th[i], NULL);
			cr_assert_eq(st[i].rc, 0, "stop: %d", st[i].rc);
		}
		pthread_barrier_destroy(&go);
		for (i = 0; i < 2; i++) {
			struct end_count n = count_named(path[i], "End", (uint32_t)slot[i]);

			cr_assert_eq(__atomic_load_n(&end_calls[slot[i]], __ATOMIC_RELAXED), 1,
				     "round %d: the callback ran once for session %d", round, slot[i]);
			cr_assert_eq(n.named, 1, "round %d: session %d got %" PRIu64 " End events",
				     round, slot[i], n.named);
			cr_assert_eq(n.mine, 1, "round %d: session %d got another session's End",
				     round, slot[i]);
			/* (the busy writers outrun a 1 MiB buffer: Busy events
			 * may be lost, counted; End never is) */
		}
	}
	__atomic_store_n(&b.stop, 1, __ATOMIC_RELAXED);
	for (i = 0; i < 2; i++)
		pthread_join(busy_th[i], NULL);
	cr_assert_eq(rp_session_stop(c), 0);
	{
		struct end_count n = count_named(path_c, "End", 0);

		cr_assert_eq(n.named, 1, "the long session got %" PRIu64 " End events, want its own",
			     n.named);
		cr_assert_eq(n.mine, 1);	/* it was the first session: slot 0 */
	}
	cr_assert(!rp_event_enabled(ev_end));
	th_rmdir(dir);
}

/* ---- rundown -------------------------------------------------------------- */

static struct rp_event *ev_method, *ev_other;
static uint64_t rundown_calls, rundown_kw;
static uint8_t rundown_level;

static void rundown_cb(struct rp_provider *p, int session_id, uint64_t keywords, uint8_t level,
		       void *ctx)
{
	struct end_payload ep = { (uint32_t)session_id, 0 };
	uint32_t i;

	rundown_calls++;
	rundown_kw = keywords;
	rundown_level = level;
	cr_assert(rp_event_enabled(ev_method), "rundown enables its events while stopping");
	for (i = 0; i < BURST; i++) {
		ep.seq = i;
		cr_assert_eq(rp_event_write(ev_method, &ep, sizeof(ep)), 0);
		cr_assert_eq(rp_event_write(ev_other, &ep, sizeof(ep)), 0);
	}
}

/*
 * A Block session with a 64 KiB buffer asks for rundown; a second session
 * does not. Rundown writes far more than the buffer holds: every event
 * reaches the stopping session (the thread waits for the drainer, it does
 * not park or drop), none reaches the other, and only the keywords asked for
 * are enabled.
 */
Test(stopping, rundown_reaches_the_stopping_session_only_and_loses_nothing, .timeout = 300)
{
	static const struct rp_provider_config pa[] = { { .name = "Test-Busy" } };
	char *dir = th_tmpdir();
	struct rp_provider *prd;
	struct rp_session *a, *b;
	char path_a[512], path_b[512];

	prd = new_provider(RP_RUNDOWN_PROVIDER, rundown_cb, NULL);
	ev_method = new_event(prd, 144, "MethodDCEndVerbose", 0x10);
	ev_other = new_event(prd, 10, "NotAsked", 0x1000);
	ev_busy = new_event(new_provider("Test-Busy", NULL, NULL), 1, "Busy", 0);
	snprintf(path_a, sizeof(path_a), "%s/a.nettrace", dir);
	snprintf(path_b, sizeof(path_b), "%s/b.nettrace", dir);
	{
		struct rp_session_opts so = { .sz = sizeof(so), .providers = pa, .nproviders = 1,
					      .path = path_a, .buffering = RP_BUFFERING_BLOCK,
					      .buffer_bytes = 64 << 10, .rundown_keywords = 0x30 };

		a = rp_session_start(&so);
		cr_assert_not_null(a, "%s", rp_last_error());
		so.path = path_b;
		so.rundown_keywords = 0;
		so.buffering = RP_BUFFERING_DROP;
		b = rp_session_start(&so);
		cr_assert_not_null(b, "%s", rp_last_error());
	}
	cr_assert(!rp_event_enabled(ev_method), "rundown events are off while sessions run");
	cr_assert_eq(rp_session_stop(a), 0);
	cr_assert_eq(rundown_calls, 1);
	cr_assert_eq(rundown_kw, 0x30);
	cr_assert_eq(rundown_level, 5);
	cr_assert(!rp_event_enabled(ev_method), "and off again after the stop");
	cr_assert_eq(rp_session_stop(b), 0);
	cr_assert_eq(rundown_calls, 1, "no rundown for a session that did not ask");

	{
		struct end_count n = count_named(path_a, "MethodDCEndVerbose", 0);

		cr_assert_eq(n.named, BURST, "rundown events: %" PRIu64 " of %u", n.named, BURST);
		cr_assert_eq(n.other_named, 0, "only the keywords asked for");
		cr_assert_eq(n.lost, 0);
		n = count_named(path_b, "MethodDCEndVerbose", 0);
		cr_assert_eq(n.named + n.other_named, 0, "the other session got rundown events");
	}
	th_rmdir(dir);
}

/* ---- full rings at the end ------------------------------------------------ */

static void burst_cb(struct rp_provider *p, int session_id, uint64_t keywords, uint8_t level,
		     void *ctx)
{
	struct end_payload ep = { (uint32_t)session_id, 0 };
	uint32_t i;

	for (i = 0; i < BURST; i++) {
		ep.seq = i;
		cr_assert_eq(rp_event_write(ev_end, &ep, sizeof(ep)), 0);
	}
}

static void burst_case(int kind, int buffering)
{
	static const struct rp_provider_config pc[] = { { .name = "Test-Burst" } };
	char *dir = th_tmpdir();
	struct rp_session_opts so = { .sz = sizeof(so), .providers = pc, .nproviders = 1,
				      .buffering = buffering, .kind = kind,
				      .buffer_bytes = 64 << 10 };
	char path[512];
	struct rp_session *s;
	struct end_count n;

	ev_end = new_event(new_provider("Test-Burst", burst_cb, NULL), 1, "End", 0);
	snprintf(path, sizeof(path), "%s/burst.nettrace", dir);
	so.path = path;
	s = rp_session_start(&so);
	cr_assert_not_null(s, "%s", rp_last_error());
	cr_assert_eq(rp_session_stop(s), 0);
	n = count_named(path, "End", (uint32_t)0);
	cr_assert_eq(n.named, BURST, "%" PRIu64 " of %u end-of-session events", n.named, BURST);
	cr_assert_eq(n.mine, BURST);
	cr_assert_eq(n.lost, 0);
	th_rmdir(dir);
}

Test(stopping, end_writes_outlast_a_full_ring_drop, .timeout = 300)
{
	burst_case(RP_SESSION_STREAMING, RP_BUFFERING_DROP);
}

Test(stopping, end_writes_outlast_a_full_ring_block, .timeout = 300)
{
	burst_case(RP_SESSION_STREAMING, RP_BUFFERING_BLOCK);
}

Test(stopping, end_writes_outlast_a_full_ring_deferred, .timeout = 300)
{
	burst_case(RP_SESSION_DEFERRED, RP_BUFFERING_DROP);
}
