// SPDX-License-Identifier: MIT
/*
 * The drainer: one thread per session. It copies committed records out of
 * the session's rings (every record validated: the rings are shared memory
 * and untrusted), merges them by timestamp and hands them to the nettrace
 * writer, which writes through the output sink.
 *
 * Ordering. A writer stamps its record after reserving it, so a record the
 * drainer has not seen yet was reserved after the drainer's last look at the
 * ring's producer position, and is younger than that look. Each pass notes,
 * per ring, the producer position and the time just before reading it. A
 * ring read to its end holds nothing older than this pass's time; a ring
 * whose reading stopped early (a record still being written, or the per-pass
 * cap) holds nothing older than the time of the latest look whose position
 * had not passed the stopping point. Records older than the smallest of these
 * horizons are merged out, oldest first, every one marked sorted; per-ring
 * queues stay in timestamp order by insertion from the back. The result is a
 * global timestamp order without guessing at how long a writer may be
 * preempted. (A record that still arrives after younger ones were written,
 * which clock skew between CPUs could cause, takes the last written
 * timestamp and is counted as late.)
 *
 * Sleeping. With nothing to do the drainer declares itself idle and sleeps on
 * the session's futex word with a timeout; producers wake it only when it is
 * idle and a ring holds more than the watermark. Stop wakes it explicitly.
 */
#include <errno.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "atomics.h"
#include "clock.h"
#include "session.h"
#include "uring_sink.h"

#define BATCH_SLEEP_NS 100000l		/* under a trickle, gather 100 us per pass */
#define BUSY_BATCH 4096u		/* a pass this full: go again at once */
#define PASS_RECORDS 16384u		/* records read per ring per pass, at most */
#define NHIST 256u			/* producer positions remembered per ring */
#define IDLE_SLEEP_NS 20000000ll	/* 20 ms */

struct qrec {
	uint64_t ts;
	uint32_t off;		/* into the ring queue's byte arena */
	uint32_t len;		/* record length as copied */
};

struct rqueue {
	struct qrec *q;
	size_t head, n, cap;
	struct bytebuf arena;
	size_t live;		/* arena bytes of the records still queued */
	/* looks at the producer position: (position, time just before reading
	 * it), oldest first; hist[0] is the latest look that had not passed
	 * the consumer, when there is one */
	struct { uint64_t pos, t; } hist[NHIST];
	uint32_t nhist;
	uint64_t horizon;	/* nothing older than this is left unread */
};

struct drainer {
	struct rp_session *s;
	struct rqueue *rq;
	uint32_t nr;
	struct rp_uring_sink *usink;
	struct nt_writer *w;
	uint32_t *meta_ids;	/* event index -> nettrace metadata id */
	size_t nmeta_ids;
	uint64_t last_ts;
	uint64_t last_sp_ns;
	bool failed;
};

uint64_t rp_drain_throttle_ns;
int rp_drain_pause;
int rp_drain_freeze;
uint64_t rp_drain_waiter_wakeups;

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void set_output_error(struct drainer *d, int err)
{
	struct rp_session *s = d->s;
	int zero = 0;

	if (d->failed)
		return;
	d->failed = true;
	__atomic_compare_exchange_n(&s->output_error, &zero, err, false, __ATOMIC_RELAXED,
				    __ATOMIC_RELAXED);
	/* the reader went away or the disk failed: stop collecting (writers
	 * then skip the session); stop() still tears it down */
	pthread_mutex_lock(&rp_control_lock);
	if (rp_load_relaxed(&rp_slots[s->slot].state) == SLOT_RUNNING) {
		struct rp_provider *cbs[1];
		const struct rp_provider_config *cfgs[1];

		rp_enable_session(s->slot, &s->cfg, false, cbs, cfgs, 0);
	}
	pthread_mutex_unlock(&rp_control_lock);
}

static int rq_push(struct rqueue *q, const struct rp_ring_item *it)
{
	struct qrec r;
	size_t i;

	if (q->head + q->n == q->cap) {
		if (q->head && q->head >= q->cap / 2) {	/* amortized: slide when half is free */
			memmove(q->q, q->q + q->head, q->n * sizeof(*q->q));
			q->head = 0;
		} else {
			size_t nc = q->cap ? q->cap * 2 : 1024;
			struct qrec *nq = realloc(q->q, nc * sizeof(*nq));

			if (!nq)
				return -ENOMEM;
			q->q = nq;
			q->cap = nc;
		}
	}
	if (q->arena.len + it->len > UINT32_MAX || bb_append(&q->arena, it->rec, it->len))
		return -ENOMEM;
	/* the header copy the ring validated, not the shared bytes */
	memcpy(q->arena.p + q->arena.len - it->len, &it->hdr, sizeof(it->hdr));
	r.ts = it->hdr.timestamp;
	r.off = (uint32_t)(q->arena.len - it->len);
	r.len = it->len;
	/* keep the queue in timestamp order: insert from the back */
	i = q->head + q->n;
	while (i > q->head && q->q[i - 1].ts > r.ts) {
		q->q[i] = q->q[i - 1];
		i--;
	}
	q->q[i] = r;
	q->n++;
	q->live += r.len;
	return 0;
}

static void rq_compact(struct rqueue *q)
{
	size_t i, first;

	if (q->n == 0) {
		q->head = 0;
		q->arena.len = 0;
		q->live = 0;
		return;
	}
	/* compact only when most of the arena is dead: amortized O(1) a byte */
	if (q->arena.len < (1u << 20) || q->live * 2 > q->arena.len)
		return;
	/* drop the arena bytes before the oldest record still queued */
	first = q->q[q->head].off;
	for (i = q->head; i < q->head + q->n; i++)
		if (q->q[i].off < first)
			first = q->q[i].off;
	if (!first)
		return;
	memmove(q->arena.p, q->arena.p + first, q->arena.len - first);
	q->arena.len -= first;
	for (i = q->head; i < q->head + q->n; i++)
		q->q[i].off -= (uint32_t)first;
}

static uint32_t meta_for(struct drainer *d, uint32_t index)
{
	struct rp_event *ev;
	uint32_t id;

	if (index < d->nmeta_ids && d->meta_ids[index])
		return d->meta_ids[index];
	ev = rp_event_by_index(index);
	if (!ev)
		return 0;
	if (index >= d->nmeta_ids) {
		size_t nn = (size_t)index * 2 + 64;
		uint32_t *n = realloc(d->meta_ids, nn * sizeof(*n));

		if (!n)
			return 0;
		memset(n + d->nmeta_ids, 0, (nn - d->nmeta_ids) * sizeof(*n));
		d->meta_ids = n;
		d->nmeta_ids = nn;
	}
	if (nt_writer_define(d->w, &ev->desc, &id))
		return 0;
	d->meta_ids[index] = id;
	return id;
}

/* Serializes one copied record; a record naming no known event is corrupt. */
static void emit(struct drainer *d, const uint8_t *p, uint64_t ts)
{
	const struct rp_shm_record *h = (const void *)p;
	const struct rp_shm_activity *a = NULL;
	struct nt_event ev = { 0 };
	uint32_t nips = 0;
	int err;

	if (d->failed)
		return;
	ev.meta_id = meta_for(d, h->meta_id);
	if (!ev.meta_id) {
		rp_add_relaxed(&d->s->stats.corrupt, 1);
		return;
	}
	if (h->flags & RP_REC_F_ACTIVITY)
		a = (const void *)(p + rp_record_activity_off(h->flags));
	if (h->flags & RP_REC_F_STACK) {
		const struct rp_shm_stack *st = (const void *)(p + rp_record_stack_off(h->flags));

		nips = st->nr;
		ev.stack = (const uint64_t *)(st + 1);
		ev.stack_depth = nips;
	}
	if (ts < d->last_ts) {
		ts = d->last_ts;
		rp_add_relaxed(&d->s->stats.late, 1);
	}
	d->last_ts = ts;
	ev.seq = h->seq;
	ev.tid = h->tid;
	ev.cpu = h->cpu;
	ev.ts = ts;
	ev.activity = a ? a->activity_id : NULL;
	ev.related = a ? a->related_activity_id : NULL;
	ev.payload = p + rp_record_payload_off(h->flags, nips);
	ev.payload_len = h->payload_len;
	ev.sorted = true;
	err = nt_writer_event(d->w, &ev);
	if (err == -EINVAL || err == -E2BIG) {
		rp_add_relaxed(&d->s->stats.corrupt, 1);
		return;
	}
	if (err) {
		set_output_error(d, err);
		return;
	}
	rp_add_relaxed(&d->s->stats.events_written, 1);
}

/* Records a look at the producer position taken at time t. */
static void hist_push(struct rqueue *q, uint64_t pos, uint64_t t)
{
	uint32_t i, k;

	if (q->nhist == NHIST) {
		/* thin out: dropping a look only makes horizons earlier (safe) */
		for (i = 1, k = 1; i < q->nhist; i += 2)
			q->hist[k++] = q->hist[i];
		q->nhist = k;
	}
	q->hist[q->nhist].pos = pos;
	q->hist[q->nhist].t = t;
	q->nhist++;
}

/* Drops looks superseded by a later one that had not passed cons either,
 * and returns the time of the latest look whose position was <= cons (0
 * when none is left: hold everything). */
static uint64_t hist_horizon(struct rqueue *q, uint64_t cons)
{
	uint32_t drop = 0;

	while (drop + 1 < q->nhist && q->hist[drop + 1].pos <= cons)
		drop++;
	if (drop) {
		memmove(q->hist, q->hist + drop, (q->nhist - drop) * sizeof(q->hist[0]));
		q->nhist -= drop;
	}
	return q->nhist && q->hist[0].pos <= cons ? q->hist[0].t : 0;
}

/* Copies what the rings hold; returns records copied. Sets each queue's
 * horizon (see the top of this file). */
static size_t collect(struct drainer *d)
{
	size_t total = 0;
	uint32_t i;

	for (i = 0; i < d->nr; i++) {
		struct rp_ring *r = rp_shm_ring(d->s->shm, i);
		struct rqueue *q = &d->rq[i];
		struct rp_ring_item it;
		uint64_t look = rp_clock_now(), prod;
		size_t n = 0;
		int err;

		/* pairs with the producers' CAS on producer_pos: a position
		 * past this one was reserved after this load, after `look` */
		prod = rp_load_acquire(&r->hdr->producer_pos);
		hist_push(q, prod, look);
		/* a bounded bite per pass: passes stay short, so looks are taken
		 * often and a backlog is merged out as it is read instead of
		 * piling up in the queues */
		while (n < PASS_RECORDS && (err = rp_ring_peek(r, &it)) != -EAGAIN) {
			if (err == -EBADMSG || err == -ESTALE) {
				rp_add_relaxed(&d->s->stats.corrupt, 1);
				continue;	/* the ring skipped past it */
			}
			if (err || rq_push(q, &it))
				break;
			rp_ring_advance(r);
			n++;
		}
		/* stopped before the producer (a record still being written, or
		 * the bite): what is left is younger than the last look that had
		 * not passed the stopping point */
		q->horizon = hist_horizon(q, r->cons);
		if (r->cons >= prod)
			q->horizon = look;	/* read past the look: nothing older left */
		/* pairs with the producers' load_acquire of consumer_pos */
		rp_ring_release(r);
		total += n;
		if (n)
			rp_drainer_wake_waiters(d->s->shm);
	}
	return total;
}

/* Merges queued records older than horizon, oldest first. */
static size_t merge_out(struct drainer *d, uint64_t horizon)
{
	size_t n = 0;

	for (;;) {
		struct rqueue *best = NULL;
		uint32_t i;

		for (i = 0; i < d->nr; i++) {
			struct rqueue *q = &d->rq[i];

			if (q->n && q->q[q->head].ts <= horizon &&
			    (!best || q->q[q->head].ts < best->q[best->head].ts))
				best = q;
		}
		if (!best)
			break;
		emit(d, best->arena.p + best->q[best->head].off, best->q[best->head].ts);
		best->live -= best->q[best->head].len;
		best->head++;
		best->n--;
		n++;
	}
	for (uint32_t i = 0; i < d->nr; i++)
		rq_compact(&d->rq[i]);
	return n;
}

static bool rings_empty(struct drainer *d)
{
	uint32_t i;

	for (i = 0; i < d->nr; i++) {
		struct rp_shm_ring *h = rp_shm_ring(d->s->shm, i)->hdr;

		if (rp_load_relaxed(&h->producer_pos) != rp_load_relaxed(&h->consumer_pos))
			return false;
	}
	return true;
}

static void sleep_idle(struct drainer *d, int64_t ns)
{
	struct rp_shm_session *h = rp_shm_header(d->s->shm);
	uint32_t word = rp_load_relaxed(&h->drainer_wake);
	struct timespec to = { ns / 1000000000, ns % 1000000000 };

	rp_store_relaxed(&h->drainer_idle, 1);
	/* pairs with the producers' commit: after declaring idle, look again,
	 * so a record committed before a producer read the idle flag is seen */
	rp_smp_mb();
	if (rings_empty(d) && !rp_load_relaxed(&d->s->stop_requested))
		syscall(SYS_futex, &h->drainer_wake, FUTEX_WAIT, word, &to, NULL, 0);
	rp_store_relaxed(&h->drainer_idle, 0);
	rp_add_relaxed(&d->s->stats.wakeups, 1);
}

static void maybe_sequence_point(struct drainer *d, uint64_t now)
{
	int err;

	if (now - d->last_sp_ns < (uint64_t)d->s->sp_interval_ms * 1000000ull || d->failed)
		return;
	d->last_sp_ns = now;
	err = nt_writer_sequence_point(d->w, d->last_ts);
	if (!err)
		err = rp_uring_sink_flush(d->usink);
	if (err)
		set_output_error(d, err);
	rp_add_relaxed(&d->s->stats.sps, 1);
	rp_store_relaxed(&d->s->stats.bytes_written, nt_writer_bytes(d->w));
}

static void heartbeat(struct drainer *d)
{
	struct rp_shm_session *h = rp_shm_header(d->s->shm);

	rp_store_relaxed(&h->drainer_heartbeat_ns, mono_ns());
}

/* Starts the trace: the writer writes the stream header through the sink. */
static int open_trace(struct drainer *d)
{
	struct nt_writer_opts wo = { .sz = sizeof(wo) };

	wo.format = d->s->format;
	wo.pid = (uint32_t)getpid();
	wo.tick_freq = rp_clock_frequency();
	wo.sync_ticks = rp_clock_now();
	d->w = nt_writer_new(&d->usink->base, &wo);
	if (!d->w) {
		rp_set_error("cannot start the trace: %s", strerror(errno));
		return -errno;
	}
	return 0;
}

static void *drainer_main(void *arg)
{
	struct drainer *d = arg;
	struct rp_session *s = d->s;
	struct rp_shm_session *h = rp_shm_header(s->shm);
	size_t i;

	d->last_sp_ns = mono_ns();
	heartbeat(d);
	rp_store_relaxed(&h->drainer_pid, (uint32_t)getpid());
	/* pairs with the load_acquire in rp_drainer_start() */
	rp_store_release(&h->drainer_tid, (uint32_t)syscall(SYS_gettid));
	/* held: alive (heartbeat) but silent until released or stopped; pairs
	 * with the store_release of `held` in rp_drainer_release() */
	while (rp_load_acquire(&s->held) && !rp_load_acquire(&s->stop_requested)) {
		struct timespec ts = { 0, 5000000 };

		heartbeat(d);
		nanosleep(&ts, NULL);
	}
	if (!d->w) {
		int err = open_trace(d);

		if (err) {
			set_output_error(d, err);
			return d;
		}
	}
	for (;;) {
		/* pairs with the store_release in rp_drainer_stop(): once seen,
		 * every writer is out and everything is committed */
		bool stopping = rp_load_acquire(&s->stop_requested);

		if (rp_unlikely(rp_load_relaxed(&rp_drain_pause) || rp_load_relaxed(&rp_drain_freeze)) &&
		    !stopping) {
			struct timespec ts = { 0, 1000000 };

			/* test hooks: paused still beats its heart, frozen looks dead */
			if (!rp_load_relaxed(&rp_drain_freeze))
				heartbeat(d);
			nanosleep(&ts, NULL);
			continue;
		}
		/* before the rings are read: see ext_horizon in session.h */
		uint64_t ext = rp_load_acquire(&s->ext_horizon);
		size_t got = collect(d);
		uint64_t horizon = ext ? ext : UINT64_MAX;

		heartbeat(d);
		for (i = 0; i < d->nr; i++)
			if (d->rq[i].horizon < horizon)
				horizon = d->rq[i].horizon;
		merge_out(d, horizon);
		maybe_sequence_point(d, mono_ns());
		if (stopping && rings_empty(d))
			break;
		if (rp_load_relaxed(&rp_drain_throttle_ns) && !stopping) {
			uint64_t t = rp_load_relaxed(&rp_drain_throttle_ns);
			struct timespec ts = { (time_t)(t / 1000000000ull), (long)(t % 1000000000ull) };

			nanosleep(&ts, NULL);
		}
		if (stopping || got >= BUSY_BATCH)
			continue;	/* keep up with a flood */
		{
			bool queued = false;

			for (i = 0; i < d->nr; i++)
				queued |= d->rq[i].n != 0;
			if (queued || !rings_empty(d)) {
				/* a trickle, or records held for a writer still
				 * filling an older one: let a batch build up
				 * without telling producers we are idle */
				struct timespec ts = { 0, BATCH_SLEEP_NS };

				nanosleep(&ts, NULL);
			} else {
				sleep_idle(d, IDLE_SLEEP_NS);
			}
		}
	}
	merge_out(d, UINT64_MAX);

	/* the last attempts of every thread, so trailing drops are counted */
	pthread_mutex_lock(&s->final_lock);
	for (i = 0; i < s->nfinals && !d->failed; i++)
		nt_writer_note_seq(d->w, 0, s->finals[i].tid, s->finals[i].seq);
	pthread_mutex_unlock(&s->final_lock);
	if (!d->failed) {
		int err = nt_writer_finish(d->w, d->last_ts + 1);

		if (!err)
			err = rp_uring_sink_flush(d->usink);
		if (err)
			set_output_error(d, err);
		rp_add_relaxed(&s->stats.sps, 1);
	}
	rp_store_relaxed(&s->stats.bytes_written, nt_writer_bytes(d->w));
	return d;
}

int rp_drainer_start(struct rp_session *s)
{
	struct rp_uring_sink_opts so = { .sz = sizeof(so), .is_socket = s->is_socket };
	struct drainer *d = calloc(1, sizeof(*d));
	int err;

	if (!d)
		return -ENOMEM;
	d->s = s;
	d->nr = rp_shm_nr_rings(s->shm);
	d->rq = calloc(d->nr, sizeof(*d->rq));
	if (!d->rq) {
		err = -ENOMEM;
		goto err_free;
	}
	d->usink = rp_uring_sink_new(s->out_fd, &so);
	if (!d->usink) {
		err = -errno;
		rp_set_error("cannot set up the output: %s", strerror(errno));
		goto err_free;
	}
	/* a held session writes nothing (not even the trace header) until
	 * rp_session_release(): an IPC reply must go out on the socket first */
	if (!s->held) {
		err = open_trace(d);
		if (err)
			goto err_free;
	}
	s->drainer_ctx = d;
	err = pthread_create(&s->drainer, NULL, drainer_main, d);
	if (err) {
		err = -err;
		s->drainer_ctx = NULL;
		goto err_free;
	}
	s->drainer_started = true;
	/* start order: the drainer is running before start() returns and
	 * before any enable callback fires (pairs with the store_release of
	 * drainer_tid at the top of drainer_main()) */
	while (!rp_load_acquire(&rp_shm_header(s->shm)->drainer_tid))
		sched_yield();
	return 0;

err_free:
	nt_writer_free(d->w);
	rp_uring_sink_free(d->usink);
	free(d->rq);
	free(d);
	return err;
}

void rp_drainer_wake_waiters(struct rp_shm *shm)
{
	struct rp_shm_session *h = rp_shm_header(shm);
	/* pairs with the store_release of waiter_head by an admitted head */
	uint32_t head = rp_load_acquire(&h->waiter_head);
	struct rp_shm_waiter *w;

	if (head == rp_load_acquire(&h->waiter_tail))
		return;
	/* space was freed: wake the head only; it passes the baton on */
	w = &h->waiters[head % RP_SHM_WAITER_SLOTS];
	if (rp_test_admit_hook)
		rp_store_relaxed(&rp_waiter_wake_ns, mono_ns());
	__atomic_fetch_add(&w->futex, 1, __ATOMIC_RELEASE);
	syscall(SYS_futex, &w->futex, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
	rp_add_relaxed(&rp_drain_waiter_wakeups, 1);
}

void rp_drainer_release(struct rp_session *s)
{
	/* pairs with the load_acquire in drainer_main()'s held loop */
	rp_store_release(&s->held, 0);
}

void rp_drainer_kick(struct rp_session *s)
{
	struct rp_shm_session *h = rp_shm_header(s->shm);

	rp_add_relaxed(&h->drainer_wake, 1);
	syscall(SYS_futex, &h->drainer_wake, FUTEX_WAKE, 1, NULL, NULL, 0);
}

int rp_drainer_stop(struct rp_session *s)
{
	struct drainer *d;
	uint32_t i;

	if (!s->drainer_started)
		return 0;
	/* pairs with the load_acquire at the top of the drainer loop */
	rp_store_release(&s->stop_requested, 1);
	rp_drainer_kick(s);
	pthread_join(s->drainer, (void **)&d);
	s->drainer_started = false;
	nt_writer_free(d->w);
	rp_uring_sink_free(d->usink);
	for (i = 0; i < d->nr; i++) {
		free(d->rq[i].q);
		bb_free(&d->rq[i].arena);
	}
	free(d->rq);
	free(d->meta_ids);
	free(d);
	s->drainer_ctx = NULL;
	return rp_load_relaxed(&s->output_error);
}
