// SPDX-License-Identifier: MIT
/*
 * The drainer: one thread per session. It reads committed records in place
 * in the session's rings (every record validated: the rings are shared
 * memory and untrusted), merges them by timestamp and hands them to the
 * nettrace writer, which writes through the output sink. Nothing is copied
 * on the way: a record read is held in its ring (a small per-ring window
 * keeps its validated header and position, in timestamp order) and the ring
 * space is handed back to producers only once the record was serialized.
 *
 * Ordering. A writer stamps its record after reserving it, so a record the
 * drainer has not seen yet was reserved after the drainer's last look at the
 * ring's producer position, and is younger than that look. Each pass notes,
 * per ring, the producer position and the time just before reading it. A
 * ring read to its end holds nothing older than this pass's time; a ring
 * whose reading stopped early (a record still being written, or the per-pass
 * cap) holds nothing older than the time of the latest look whose position
 * had not passed the stopping point. A backlog written between two looks
 * (the drainer was busy or parked) that the window may not take whole gets
 * bounds of its own from a lookahead that reads only headers (look_ahead()),
 * so it is merged out as it is read instead of having to be read whole
 * first; one the window takes is read to the next look within a few passes,
 * without the walk. Records older than the smallest of these horizons are
 * merged out, oldest first, every one marked sorted; the windows stay in
 * timestamp order by insertion from the back. The result
 * is a global timestamp order without guessing at how long a writer may be
 * preempted. (A record that still arrives after younger ones were written,
 * which clock skew between CPUs could cause, takes the last written
 * timestamp and is counted as late.)
 *
 * Cost. The drainer shares the CPUs with the producers, so what it spends
 * per event is taken from them. Nearly every record is plain (no activity
 * ids, stack or thread block) and its thread's next, with the event type
 * and CPU of the thread's last one: emit() checks those against the
 * thread's state in its home slot and queues the record by the writer's
 * token for the thread, and the queue goes to the writer in one call per
 * EMIT_BATCH (nt_writer_events_next()), before anything else is written.
 *
 * Sleeping. With nothing to do the drainer declares itself idle and sleeps on
 * the session's futex word with a timeout; producers wake it only when it is
 * idle and a ring holds more than the watermark. Stop wakes it explicitly.
 * A producer's commit and its look at the idle flag, against the drainer's
 * idle flag and its look at the rings, are a store-buffering pair: the
 * drainer's rp_fence_heavy() and the producers' rp_fence_light() close it
 * for producers in this process (fence.h). For any other writer the bound
 * of a missed wake is by design IDLE_SLEEP_NS (a remote session's own
 * idle_sleep_ns, in the agent): the drainer never sleeps
 * longer before it looks again (test_drain shows both).
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "atomics.h"
#include "clock.h"
#include "fence.h"
#include "futex.h"
#include "session.h"
#include "thread.h"
#include "uring_sink.h"

#define BATCH_SLEEP_NS 100000l		/* under a trickle, gather 100 us per pass */
#define BUSY_BATCH 4096u		/* a pass this full: go again at once */
#define PASS_RECORDS 8192u		/* records read per ring per pass, at most */
#define WIN 16384u			/* records read and held per ring (power of two) */
#define NHIST 256u			/* producer positions remembered per ring */
#define LOOK_CHUNK (64u << 10)		/* bytes per lookahead bound */
#define IDLE_SLEEP_NS 20000000ll	/* 20 ms */
/* Under a trickle, events wait in an open block at most this long before
 * it goes out: a live reader (dotnet-trace's stopping event, a stream
 * consumer) sees them within tens of milliseconds, while a flood still
 * fills whole blocks. */
#define FLUSH_AGE_NS 20000000ull	/* 20 ms */
#define PASS_SKIPS 4u			/* corrupt or stale skips per ring per pass */
#define EMIT_BATCH 64u			/* records handed to the writer in one call */
#define STOP_GRACE_NS 100000000ull	/* stopping: passes reading nothing end it */
/* No Linux thread id is larger (PID_MAX_LIMIT on 64-bit): a record naming
 * one, or thread 0, is corrupt. */
#define TID_MAX 4194304u
/* Writer threads whose sequence numbers the drainer follows; past it the
 * table starts over (only thousands of short-lived threads get there). */
#define SEQ_MAX_THREADS (1u << 17)

/* A record read but not serialized yet: the header as the peek validated
 * it (timestamp possibly clamped, see collect()), the body stays in ring
 * memory. */
struct held {
	struct rp_shm_record h;
	uint64_t pos;
	uint32_t stack_nr;
	uint32_t __pad;
};

struct bound {
	uint64_t pos, t;	/* every record at pos or later has ts >= t */
};

/*
 * A look at whether a ring's writers moved it: its producer position and,
 * as a writer of a full ring moves its drop count instead, that count. Only
 * signs, whatever a process mapping the ring writes there.
 */
struct ring_look {
	uint64_t prod, full;
};

struct rqueue {
	struct rp_ring *r;	/* the ring read (rp_shm_ring(), looked up once) */
	/* records read and held, in timestamp order: a circular window */
	struct held *w;
	uint32_t head, n;
	uint32_t cap;		/* a power of two; 0 until the ring first has data */
	bool pos_sorted;	/* also in position order (no record overtook one) */
	/* looks at the producer position: (position, time just before reading
	 * it), oldest first; hist[0] is the latest look that had not passed
	 * the reader, when there is one */
	struct bound hist[NHIST];
	uint32_t nhist;
	/* bounds from looking ahead at a backlog, in position order */
	struct bound *syn;
	size_t syn_head, syn_n, syn_cap;
	/* lookahead runs walked but not turned into bounds yet: that needs a
	 * walk that reached a look's position */
	struct bound *pre;	/* (run start, smallest ts in the run) */
	size_t npre, pre_cap;
	uint64_t pre_end;	/* where the walk stopped */
	bool pre_oom;
	uint64_t horizon;	/* nothing older than this is left unread */
	/* the ring at the drainer's last look at its own CPU (step_aside()),
	 * and at defer_for()'s last look (at the idle sleep, first) */
	struct ring_look step, defer;
	uint64_t stop_from;	/* the reader's position when stop began */
};

/*
 * What the drainer accepts of each writer thread's sequence numbers (the
 * header's tid and seq come from shared memory; TraceEvent counts
 * EventsLost from their gaps). raw: the last number accepted; out: the
 * number the trace carries for it, which differs from raw once a jump was
 * not believed (see seq_accept()); cand: a number rejected last, which the
 * thread's next record may confirm.
 */
struct seqstate {
	uint32_t tid;		/* 0: free slot */
	uint32_t raw;
	uint32_t out;
	uint32_t cand;
	bool has_raw, has_cand;
	bool cand_back;		/* cand was not above raw: maybe a new thread */
	/* the writer's token for the thread (nt_writer_events_next()), 0:
	 * none, and the event index and CPU of the plain record it was given
	 * for, which a repeat must have */
	uint32_t token;
	uint32_t meta_index;
	uint32_t cpu;
	/* attempts lost in gaps believed but not shown: the drops not yet
	 * shown when they were read (show_gap()), shown at the end if drops
	 * are left to show then (show_unshown()) */
	uint32_t unshown;
};

struct seqtab {
	struct seqstate *v;
	uint32_t cap;		/* a power of two, or 0 */
	uint32_t n;
	struct seqstate *last;	/* the last thread looked up */
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
	uint64_t unflushed_ns;	/* CLOCK_MONOTONIC when the open blocks got
				 * their first event, 0: nothing unflushed */
	uint64_t written;	/* events serialized */
	uint64_t stream_base;	/* of those, the ones in streams that ended
				 * (rotations): all of them out */
	uint64_t written_out;	/* stats.events_written: in blocks the
				 * output accepted whole; never goes down */
	uint64_t sp_written;	/* written at the last sequence point */
	uint64_t lost;		/* events consumed but not written: output failed */
	uint64_t bytes_before;	/* written to the streams rotated away */
	bool size_told;		/* size_notify_bytes passed in this stream */
	int running;		/* atomic: the thread runs (start order, private:
				 * the shared drainer_tid is for other readers) */
	bool failed;
	/* sequence numbers: an upper bound on the attempts lost so far
	 * (validated drops and ring losses, refreshed after a pass read its
	 * records and at least every millisecond; records this reader threw
	 * away, as it refuses them), and how much of it gaps in the trace
	 * claim */
	struct seqtab seqs;
	uint64_t rejected;	/* records read and refused by emit() */
	uint64_t loss_bound;
	uint64_t attributed;
	/* of the gaps believed, what the trace shows as lost: the producers'
	 * drops (their own counters, last read), and how much of them gaps
	 * showed (show_lost()) */
	uint64_t drops_seen;
	uint64_t shown;
	uint64_t pass, loss_pass;
	uint64_t loss_ns;	/* CLOCK_MONOTONIC of the last refresh */
	uint64_t stop_ns;	/* CLOCK_MONOTONIC when stop was first seen */
	/* records that repeat their thread's last (emit()), waiting to go to
	 * the writer in one call: the events, and each one's record and
	 * number, should the writer not take it by its token */
	struct nt_next batch[EMIT_BATCH];
	struct {
		const struct held *hd;
		uint32_t seq;
	} pend[EMIT_BATCH];
	uint32_t nbatch;
	/* step_aside(): the rings are one per CPU; the next look; the last
	 * move, and the least time between two */
	bool step_ok;
	uint64_t step_next_ns, step_last_ns, step_gap_ns;
	/* defer_for(): the session may hold back; armed by an idle sleep
	 * (the drainer had caught up), disarmed by the first pass after it;
	 * the first look after the sleep (0: not yet) */
	bool defer_ok, defer_armed;
	uint64_t defer_since_ns;
};

uint64_t rp_drain_throttle_ns;
int rp_drain_pause;
int rp_drain_freeze;
uint64_t rp_drain_paused_looks;

static void publish_bytes(struct drainer *d)
{
	/* no writer after a failed rotation */
	uint64_t in_stream = d->w ? nt_writer_bytes(d->w) : 0;

	rp_store_relaxed(&d->s->stats.bytes_written, d->bytes_before + in_stream);
	if (rp_unlikely(d->s->size_notify_bytes) && !d->size_told &&
	    in_stream >= d->s->size_notify_bytes) {
		uint64_t one = 1;

		d->size_told = true;
		/* it fails only on a counter at its maximum, which wakes the
		 * owner as well */
		if (write(d->s->size_fd, &one, sizeof(one)) < 0)
			return;
	}
}

/* Events in the event blocks the output has accepted whole, all streams. */
static uint64_t events_out(struct drainer *d)
{
	struct rp_uring_sink_stats st;

	if (!d->w || !d->usink)
		return d->stream_base;
	rp_uring_sink_stats(d->usink, &st);
	return d->stream_base + nt_writer_events_within(d->w, st.bytes);
}

/*
 * stats.events_written: what the output accepted, not what was serialized,
 * so that it never goes down. Once serialized, an event is either accepted
 * with its block, or lost with it when the output fails (and counted then,
 * account_failed_output()): a figure that counted it at once would have to
 * take it back. Completions the sink has not looked at yet are reaped
 * first, without waiting.
 */
static void publish_written(struct drainer *d)
{
	uint64_t out;

	if (d->usink)
		rp_uring_sink_reap(d->usink);
	out = events_out(d);
	if (out > d->written_out) {
		d->written_out = out;
		rp_store_relaxed(&d->s->stats.events_written, out);
	}
}

/*
 * After an output error: of the events serialized, only those in event
 * blocks the output accepted whole are in the trace; the rest (the block
 * being built, buffers the sink never got out) are lost, and counted.
 */
static void account_failed_output(struct drainer *d)
{
	uint64_t out;

	rp_uring_sink_flush(d->usink);	/* waits for writes in flight */
	out = events_out(d);
	if (out < d->written) {
		d->lost += d->written - out;
		d->written = out;
	}
	publish_written(d);
	rp_store_relaxed(&d->s->stats.output_lost, d->lost);
}

static void set_output_error(struct drainer *d, int err)
{
	struct rp_session *s = d->s;
	int zero = 0;

	if (d->failed)
		return;
	d->failed = true;
	/* the first error stays. Readers load it relaxed: a figure, not a
	 * handshake, so nothing pairs with the CAS's ordering */
	rp_cas_acq_rel(&s->output_error, &zero, err);
	/* the reader went away or the disk failed. The session's events stay
	 * enabled: every later attempt is a drop counted as RP_DROP_OUTPUT and
	 * returns the error (write.c), and the drainer goes on emptying the
	 * rings, counting what it cannot write, so nobody waits for it */
	if (s->slot >= 0) {
		rp_store_relaxed(&rp_slots[s->slot].flat_gen, RP_SLOT_NOT_FLAT);
		rp_store_relaxed(&rp_slots[s->slot].output_error, err);
	}
	account_failed_output(d);
}

static inline struct held *win_at(struct rqueue *q, uint32_t i)
{
	return &q->w[(q->head + i) & (q->cap - 1)];
}

/* The window of a ring, allocated when it first has data: at most as many
 * records as the ring can hold. */
static int win_alloc(struct rqueue *q, const struct rp_ring *r)
{
	uint64_t cap = r->size / sizeof(struct rp_shm_record);

	if (cap > WIN)
		cap = WIN;
	q->w = malloc(cap * sizeof(*q->w));
	if (!q->w)
		return -ENOMEM;
	q->cap = (uint32_t)cap;
	q->pos_sorted = true;
	return 0;
}

/* Where ring space can be handed back: the oldest position still held. */
static uint64_t win_min_pos(struct rqueue *q, uint64_t cons)
{
	uint64_t min = cons;
	uint32_t i;

	if (!q->n) {
		q->pos_sorted = true;
		return cons;
	}
	if (q->pos_sorted)
		return win_at(q, 0)->pos;
	for (i = 0; i < q->n; i++)
		if (win_at(q, i)->pos < min)
			min = win_at(q, i)->pos;
	return min;
}

/* The first record of an event type: its description, defined to the
 * writer. 0 when the index names no event (or without memory). */
static uint32_t meta_define(struct drainer *d, uint32_t index)
{
	const struct nt_event_desc *desc;
	struct rp_event *ev;
	uint32_t id;

	if (d->s->remote_lookup) {
		desc = d->s->remote_lookup(d->s->remote_ctx, index);
	} else {
		ev = rp_event_by_index(index);
		desc = ev ? &ev->desc : NULL;
	}
	if (!desc)
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
	if (nt_writer_define(d->w, desc, &id))
		return 0;
	d->meta_ids[index] = id;
	return id;
}

/* The nettrace metadata id of an event index: one load once defined. */
static inline uint32_t meta_for(struct drainer *d, uint32_t index)
{
	if (rp_likely(index < d->nmeta_ids && d->meta_ids[index]))
		return d->meta_ids[index];
	return meta_define(d, index);
}

/* ---- threads and sequence numbers -------------------------------------- */

/* Where a thread's state is looked for first (t->cap is not 0). */
static inline uint32_t seq_home(const struct seqtab *t, uint32_t tid)
{
	return (tid * 2654435761u) & (t->cap - 1);
}

static struct seqstate *seq_slot(struct seqtab *t, uint32_t tid)
{
	uint32_t i;

	for (i = seq_home(t, tid); t->v[i].tid; i = (i + 1) & (t->cap - 1))
		if (t->v[i].tid == tid)
			return &t->v[i];
	return &t->v[i];
}

/* The thread's state (created empty), or NULL without memory. */
static struct seqstate *seq_get(struct seqtab *t, uint32_t tid, bool create);

/* The same for a record: a thread already followed sits in its home slot
 * but for collisions, found without a call. */
static inline struct seqstate *seq_find(struct seqtab *t, uint32_t tid)
{
	if (rp_likely(t->cap)) {
		struct seqstate *e = &t->v[seq_home(t, tid)];

		if (rp_likely(e->tid == tid))
			return e;
	}
	return seq_get(t, tid, true);
}

static struct seqstate *seq_get(struct seqtab *t, uint32_t tid, bool create)
{
	struct seqstate *e;

	if (t->last && t->last->tid == tid)
		return t->last;
	if (t->cap) {
		e = seq_slot(t, tid);
		if (e->tid)
			return t->last = e;
	}
	if (!create)
		return NULL;
	if (t->n >= SEQ_MAX_THREADS) {
		/* start over: forgotten threads are judged afresh */
		memset(t->v, 0, (size_t)t->cap * sizeof(*t->v));
		t->n = 0;
	}
	if ((t->n + 1) * 2 > t->cap) {
		uint32_t cap = t->cap ? t->cap * 2 : 256, i;
		struct seqtab nt = { .cap = cap };

		nt.v = calloc(cap, sizeof(*nt.v));
		if (!nt.v)
			return NULL;
		for (i = 0; i < t->cap; i++)
			if (t->v[i].tid)
				*seq_slot(&nt, t->v[i].tid) = t->v[i];
		free(t->v);
		nt.n = t->n;
		*t = nt;
	}
	e = seq_slot(t, tid);
	memset(e, 0, sizeof(*e));
	e->tid = tid;
	t->n++;
	return t->last = e;
}

/*
 * How many more lost attempts gaps may claim: the bound on what was lost,
 * less what earlier gaps claimed. The bound counts the producers' drops
 * (rp_shm_drops(): their own counters, which no other process can write),
 * every record this reader refused
 * and what the rings gave up (rp_ring_lost_bound()); refreshed at most
 * once per pass, always after the pass read its records (collect() does it
 * every millisecond, loss_budget() when a gap needs it and the pass has not
 * yet), so it includes every drop that happened before any record held.
 */
static void refresh_losses(struct drainer *d, uint64_t now)
{
	uint64_t drops[RP_DROP_NR] = { 0 }, g = d->rejected;
	uint32_t i;

	d->loss_pass = d->pass;
	d->loss_ns = now;
	rp_shm_drops(d->s->shm, drops);
	d->drops_seen = 0;
	for (i = 0; i < RP_DROP_NR; i++)
		d->drops_seen += drops[i];
	g += d->drops_seen;
	for (i = 0; i < d->nr; i++)
		g += rp_ring_lost_bound(rp_shm_ring(d->s->shm, i));
	if (g > d->loss_bound)
		d->loss_bound = g;
}

static uint64_t loss_budget(struct drainer *d)
{
	if (d->loss_pass != d->pass)
		refresh_losses(d, rp_clock_mono_ns());
	return d->loss_bound > d->attributed ? d->loss_bound - d->attributed : 0;
}

/* A gap of g lost attempts, if the budget allows it. */
static bool claim(struct drainer *d, uint32_t g)
{
	if (g && g > loss_budget(d))
		return false;
	d->attributed += g;
	return true;
}

/*
 * How much of a believed gap of g the trace shows as lost: as far as the
 * producers' drops not shown yet cover it. A gap is believed as far as the
 * loss budget covers it (claim()), which also counts the records this
 * reader refused or the rings gave up; but only what the writers dropped,
 * and so returned an error for, is EventsLost. A record that a process
 * mapping the rings destroyed, renumbered or forged is corrupt (counted
 * there, corrupt_records and skipped_bytes), never a loss: the trace's
 * EventsLost is the writers' drops, which such a process can neither hide
 * (the counters are sealed, abi.h) nor inflate. Per thread it may show
 * elsewhere than it happened when a mapper made gaps of its own.
 */
static uint32_t show_lost(struct drainer *d, uint32_t g)
{
	if (!g)
		return 0;
	if (d->drops_seen - d->shown < g) {
		uint64_t drops[RP_DROP_NR] = { 0 };
		uint32_t i;

		/* a drop that made this gap came before the record after it,
		 * which this pass read: the counters hold it by now */
		rp_shm_drops(d->s->shm, drops);
		d->drops_seen = 0;
		for (i = 0; i < RP_DROP_NR; i++)
			d->drops_seen += drops[i];
	}
	if (d->drops_seen - d->shown < g)
		g = (uint32_t)(d->drops_seen > d->shown ? d->drops_seen - d->shown : 0);
	d->shown += g;
	return g;
}

/* show_lost() for a gap of g in thread e's numbers; what it does not show
 * waits in e->unshown. */
static uint32_t show_gap(struct drainer *d, struct seqstate *e, uint32_t g)
{
	uint32_t shown = show_lost(d, g);

	e->unshown += g - shown;
	return shown;
}

/* A new thread's first number in the trace, with its leading losses shown
 * (show_gap()): a number that does not go up on prev makes the writer
 * start the thread afresh, else the same gap shows as a jump. */
static uint32_t seq_restart(struct drainer *d, struct seqstate *e, uint32_t raw, uint32_t prev)
{
	uint32_t first = RP_SEQ_BASE + 1 + show_gap(d, e, raw - RP_SEQ_BASE - 1);

	return (int32_t)(first - prev) <= 0 ? first : prev + (first - RP_SEQ_BASE);
}

/* As much of a gap of g as the budget allows. */
static uint32_t claim_upto(struct drainer *d, uint32_t g)
{
	uint64_t left = g ? loss_budget(d) : 0;

	if (g > left)
		g = (uint32_t)left;
	d->attributed += g;
	return g;
}

/*
 * Whether a record of thread tid with sequence number raw is believed, and
 * the number the trace gives it (*out). A thread's numbers go up by one per
 * write attempt, so its next record has the next number, or jumps by
 * attempts that were lost, which the loss budget must cover; a number at or
 * below the last is a new thread reusing the id, whose own leading losses
 * the budget must cover. Anything else is refused as corrupt, and
 * remembered: when the thread's next record follows on from the refused one
 * (so that was genuine), the thread goes on from there, as a new thread if
 * the refused number was lower and the budget covers that, else with the
 * gap from the refused record on, as far as the budget covers it, not the
 * jump. So a forged number costs a thread at most one record, and the trace
 * never shows more lost than the reader can account for (the thread's
 * final number is claimed from the same budget: seq_final()).
 */
static bool seq_accept_slow(struct drainer *d, struct seqstate *e, uint32_t raw,
			    uint32_t *out)
{
	uint32_t last, step, prev;

	if (!e) {		/* no memory to follow it: as written */
		*out = raw;
		return true;
	}
	last = e->has_raw ? e->raw : RP_SEQ_BASE;
	prev = e->has_raw ? e->out : RP_SEQ_BASE;
	step = raw - last;
	if (!e->has_raw && raw == RP_SEQ_BASE) {
		/* a first record numbered "before the first attempt": no
		 * write path makes one, but it claims no loss either */
		*out = raw;
	} else if (rp_likely(step == 1)) {
		*out = prev + 1;
	} else if ((int32_t)step > 0 && claim(d, step - 1)) {
		*out = prev + 1 + show_gap(d, e, step - 1);
	} else if ((int32_t)step <= 0 && e->has_raw && (int32_t)(raw - RP_SEQ_BASE) > 0 &&
		   claim(d, raw - RP_SEQ_BASE - 1)) {
		/* a new thread with this id (ids are reused once the kernel's
		 * pid space wraps), its leading losses covered */
		*out = seq_restart(d, e, raw, prev);
	} else if (e->has_cand && (int32_t)(raw - e->cand) > 0) {
		if (e->cand_back && (int32_t)(raw - RP_SEQ_BASE) > 0 &&
		    claim(d, raw - RP_SEQ_BASE - 1))
			/* the refused one began a new thread with this id */
			*out = seq_restart(d, e, raw, prev);
		else
			/* lost: the refused record and those after it */
			*out = prev + 1 + show_gap(d, e, claim_upto(d, raw - e->cand));
	} else {
		e->cand = raw;
		e->has_cand = true;
		e->cand_back = (int32_t)step <= 0;
		return false;
	}
	e->out = *out;
	e->raw = raw;
	e->has_raw = true;
	e->has_cand = false;
	return true;
}

/* What seq_accept() gives a record numbered one above its thread's last:
 * the thread's next number in the trace. */
static inline uint32_t seq_next(struct seqstate *e, uint32_t raw)
{
	e->raw = raw;
	e->has_cand = false;
	return ++e->out;
}

static inline bool seq_accept(struct drainer *d, uint32_t tid, uint32_t raw, uint32_t *out)
{
	struct seqstate *e = seq_find(&d->seqs, tid);

	/* nearly every record: its thread's next number */
	if (rp_likely(e && e->has_raw && raw - e->raw == 1)) {
		*out = seq_next(e, raw);
		return true;
	}
	return seq_accept_slow(d, e, raw, out);
}

/*
 * A thread's final number (process memory: trusted) in the trace's terms:
 * the attempts after its last record, as far as the loss budget covers
 * them (they are drops, so an honest budget covers them exactly). False
 * when there is nothing to note.
 */
static bool seq_final(struct drainer *d, uint32_t tid, uint32_t raw, uint32_t *out)
{
	struct seqstate *e = seq_get(&d->seqs, tid, false);
	uint32_t last = e && e->has_raw ? e->raw : RP_SEQ_BASE;
	uint32_t prev = e && e->has_raw ? e->out : RP_SEQ_BASE;
	uint32_t g;

	if ((int32_t)(raw - last) <= 0)
		return false;
	g = claim_upto(d, raw - last);
	g = e ? show_gap(d, e, g) : show_lost(d, g);
	*out = prev + g;
	if (e) {
		e->out = *out;
		e->raw = raw;
		e->has_raw = true;
	}
	return g != 0;
}

/*
 * At the end of the trace, drops not shown yet (a mapper's gaps took their
 * place when they were read) go to the threads with gaps believed but not
 * shown, each as far as its own, as a last number: so the trace's
 * EventsLost is every drop, wherever gaps allow it to show.
 */
static void show_unshown(struct drainer *d)
{
	uint32_t i;

	for (i = 0; i < d->seqs.cap && !d->failed; i++) {
		struct seqstate *e = &d->seqs.v[i];
		uint32_t g;

		if (!e->tid || !e->unshown)
			continue;
		g = show_lost(d, e->unshown);
		e->unshown -= g;
		if (!g)
			break;
		e->out += g;
		nt_writer_note_seq(d->w, 0, e->tid, e->out);
	}
}

/* A record the drainer read and will not write: corrupt. It enters the loss
 * bound at once, not at the next refresh_losses() (which counts it as well
 * and keeps the larger bound): a pass that reads a refused record and the
 * record that confirms it (seq_accept_slow()) would otherwise claim the
 * lost one from a budget without it, and the trace would not show it. */
static void refuse(struct drainer *d)
{
	d->rejected++;
	d->loss_bound++;
	rp_add_relaxed(&d->s->stats.corrupt, 1);
}

/* The timestamp a record goes out with: a record older than the last one
 * written (clock skew between CPUs) takes its time, and is counted. */
static inline uint64_t emit_ts(struct drainer *d, uint64_t ts)
{
	if (rp_unlikely(ts < d->last_ts)) {
		ts = d->last_ts;
		rp_add_relaxed(&d->s->stats.late, 1);
	}
	return d->last_ts = ts;
}

/* What the writer said to a record's event. */
static void emit_result(struct drainer *d, int err)
{
	if (!err) {
		d->written++;	/* published once per merge (an atomic add per event costs) */
		return;
	}
	if (err == -EINVAL || err == -E2BIG) {
		refuse(d);
		return;
	}
	set_output_error(d, err);
	d->lost++;
}

/* emit() for a record with activity ids, a stack or a thread block. */
static __attribute__((noinline)) void emit_full(struct drainer *d, const unsigned char *rec,
						const struct held *hd, uint32_t meta_id)
{
	uint16_t flags = hd->h.flags;
	struct nt_event ev;

	/* field by field: a zeroing initializer of the whole struct is a
	 * string store, which costs more per event than the rest of this */
	ev.meta_id = meta_id;
	ev.pid = 0;
	ev.tid = hd->h.tid;
	ev.capture_tid = 0;
	ev.stack_depth = 0;
	ev.stack = NULL;
	ev.activity = ev.related = NULL;
	if (flags & RP_REC_F_ACTIVITY) {
		const struct rp_shm_activity *a = (const void *)(rec + rp_record_activity_off(flags));

		ev.activity = a->activity_id;
		ev.related = a->related_activity_id;
	}
	if (flags & RP_REC_F_STACK) {
		ev.stack = (const uint64_t *)(rec + rp_record_stack_off(flags) +
					      sizeof(struct rp_shm_stack));
		ev.stack_depth = hd->stack_nr;
	}
	if (flags & RP_REC_F_THREAD) {
		const struct rp_shm_thread *th = (const void *)(rec + rp_record_thread_off(flags));
		uint32_t about = rp_load_relaxed(&th->tid);	/* read once */

		if (!about || about > TID_MAX) {
			refuse(d);
			return;
		}
		/* shown on the thread it is about, counted on its writer's */
		ev.capture_tid = ev.tid;
		ev.tid = about;
		/* and on its process, when a writer of this process (the BPF
		 * bridge) says which: a remote process's word is not taken,
		 * V5 has one process only */
		if (d->s->slot >= 0 && d->s->format == NT_FORMAT_V6) {
			uint32_t pid = rp_load_relaxed(&th->pid);

			if (pid && pid <= TID_MAX)
				ev.pid = pid;
		}
	}
	if (!seq_accept(d, hd->h.tid, hd->h.seq, &ev.seq)) {
		refuse(d);
		return;
	}
	{
		/* the writer's repeat of the thread's last plain event is off */
		struct seqstate *e = seq_get(&d->seqs, hd->h.tid, false);

		if (e)
			e->token = 0;
	}
	ev.ts = emit_ts(d, hd->h.timestamp);
	ev.cpu = hd->h.cpu;
	ev.payload = rec + rp_record_payload_off(flags, hd->stack_nr);
	ev.payload_len = hd->h.payload_len;
	ev.sorted = true;
	emit_result(d, nt_writer_event(d->w, &ev));
}

/* A plain record of thread e (NULL: no memory to follow it), numbered seq
 * for the trace, through the writer's plain entry, keeping the token it
 * gives. */
static void emit_plain(struct drainer *d, struct seqstate *e, const struct held *hd,
		       uint32_t meta_id, const unsigned char *payload, uint64_t ts, uint32_t seq)
{
	struct nt_event ev;
	int err;

	ev.meta_id = meta_id;
	ev.seq = seq;
	ev.tid = hd->h.tid;
	ev.cpu = hd->h.cpu;
	ev.ts = ts;
	ev.payload = payload;
	ev.payload_len = hd->h.payload_len;
	ev.sorted = true;
	err = nt_writer_event_plain(d->w, &ev);
	if (!e) {
		emit_result(d, err > 0 ? 0 : err);
	} else if (err > 0) {
		e->token = (uint32_t)err;
		e->meta_index = hd->h.meta_id;
		e->cpu = hd->h.cpu;
		d->written++;
	} else {
		e->token = 0;	/* the writer did not take the number */
		emit_result(d, err);
	}
}

/* A record that is not plain, or whose thread is new or did not go up by
 * one: the checks in full. */
static __attribute__((noinline)) void emit_any(struct drainer *d, const unsigned char *rec,
					       const struct held *hd)
{
	uint16_t flags = hd->h.flags;
	uint32_t tid = hd->h.tid, meta_id = meta_for(d, hd->h.meta_id), out;

	if (!meta_id || !tid || tid > TID_MAX) {
		refuse(d);
		return;
	}
	if (flags & (RP_REC_F_ACTIVITY | RP_REC_F_STACK | RP_REC_F_THREAD)) {
		emit_full(d, rec, hd, meta_id);
		return;
	}
	if (!seq_accept(d, tid, hd->h.seq, &out)) {
		refuse(d);
		return;
	}
	/* seq_accept() made the thread's state, unless memory ran out */
	emit_plain(d, seq_get(&d->seqs, tid, false), hd, meta_id,
		   rec + rp_record_payload_off(flags, 0), emit_ts(d, hd->h.timestamp), out);
}

/* Hands the waiting repeats to the writer (before anything else is
 * written, and at the end of a merge). */
static void flush_batch(struct drainer *d)
{
	uint32_t n = d->nbatch, i = 0, k;

	d->nbatch = 0;
	while (i < n) {
		const struct held *hd;
		int err;

		k = nt_writer_events_next(d->w, d->batch + i, n - i);
		d->written += k;	/* published once per merge (an atomic add per event costs) */
		i += k;
		if (i == n)
			break;
		err = nt_writer_error(d->w);
		if (err) {
			/* what nt_writer_event() failing on each would count */
			set_output_error(d, err);
			d->lost += n - i;
			break;
		}
		/* its token went stale: the plain entry, with its number */
		hd = d->pend[i].hd;
		emit_plain(d, seq_get(&d->seqs, hd->h.tid, false), hd, meta_for(d, hd->h.meta_id),
			   d->batch[i].payload, d->batch[i].ts, d->pend[i].seq);
		i++;
	}
}

/* Serializes one held record straight from ring memory (its ring space is
 * not handed back before this). A record naming no known event, a thread id
 * no thread can have, or a sequence number its thread cannot have reached
 * is corrupt. Offsets come from the validated header copy, so a producer
 * scribbling on the record since can change the payload bytes, never where
 * they lie. Nearly every record is plain (no ids, stack or thread block)
 * and the next of a thread followed, found in its home slot: those are
 * checked here, and most repeat the thread's event type and CPU, which the
 * writer's token carries. The rest go to emit_any(). */
static inline __attribute__((always_inline)) void emit(struct drainer *d, const struct rp_ring *r,
						   const struct held *hd)
{
	const unsigned char *rec = r->data + (hd->pos & r->mask);
	uint16_t flags = hd->h.flags;
	uint32_t tid = hd->h.tid, k, meta_id;
	struct seqstate *e;
	bool next;

	if (rp_unlikely(d->failed)) {
		d->lost++;	/* consumed, never written: counted (output) */
		return;
	}
	e = rp_likely(d->seqs.cap) ? &d->seqs.v[seq_home(&d->seqs, tid)] : NULL;
	/* a plain record, the next of a thread followed (which has a valid
	 * id: a free slot has no raw) */
	next = e && e->tid == tid && e->has_raw && hd->h.seq - e->raw == 1 &&
	       !(flags & (RP_REC_F_ACTIVITY | RP_REC_F_STACK | RP_REC_F_THREAD));
	/* and a repeat of its token's record, whose event type is defined */
	if (rp_likely(next && e->token && e->meta_index == hd->h.meta_id &&
		      e->cpu == hd->h.cpu)) {
		k = d->nbatch++;
		d->batch[k].token = e->token;
		d->batch[k].payload_len = hd->h.payload_len;
		d->batch[k].ts = emit_ts(d, hd->h.timestamp);
		d->batch[k].payload = rec + rp_record_payload_off(0, 0);	/* plain */
		d->pend[k].hd = hd;
		d->pend[k].seq = seq_next(e, hd->h.seq);
		if (rp_unlikely(k + 1 == EMIT_BATCH))
			flush_batch(d);
		return;
	}
	flush_batch(d);		/* the order stays */
	if (rp_unlikely(!next)) {
		emit_any(d, rec, hd);
		return;
	}
	/* the next of a thread followed, but not a repeat of its last */
	meta_id = meta_for(d, hd->h.meta_id);
	if (rp_unlikely(!meta_id)) {
		refuse(d);
		return;
	}
	k = seq_next(e, hd->h.seq);
	emit_plain(d, e, hd, meta_id, rec + rp_record_payload_off(0, 0),
		   emit_ts(d, hd->h.timestamp), k);
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

/* The same for the lookahead bounds (the oldest are dropped at the next
 * append). */
static uint64_t syn_horizon(struct rqueue *q, uint64_t cons)
{
	while (q->syn_n > 1 && q->syn[q->syn_head + 1].pos <= cons) {
		q->syn_head++;
		q->syn_n--;
	}
	return q->syn_n && q->syn[q->syn_head].pos <= cons ? q->syn[q->syn_head].t : 0;
}

static void pre_chunk(void *ctx, uint64_t pos, uint64_t min_ts)
{
	struct rqueue *q = ctx;

	if (array_grow((void **)&q->pre, &q->pre_cap, q->npre, sizeof(*q->pre), 256)) {
		q->pre_oom = true;	/* bounds only get weaker: safe */
		return;
	}
	q->pre[q->npre++] = (struct bound){ .pos = pos, .t = min_ts };
}

/*
 * A backlog written while the drainer took no look at the ring (it was busy
 * or parked) has no look between the reader and the producer: its horizon
 * would stay at the last look before it until the whole backlog was read,
 * and the window would fill first. So walk ahead (headers only, nothing
 * copied) to the position of this pass's look (prod, taken at time look),
 * noting the smallest timestamp of every run of LOOK_CHUNK bytes; once the
 * walk reaches prod, every run start p gets the bound "min over the runs
 * from p on, and look", since records past prod are younger than the look.
 */
static void look_ahead(struct rqueue *q, struct rp_ring *r, uint64_t prod, uint64_t look)
{
	uint64_t m;
	size_t i;

	if (q->pre_end < r->cons || q->pre_end - r->cons > r->size) {
		/* the reader overtook the walk (it skipped garbage, or read it
		 * all): start over from the reader */
		q->npre = 0;
		q->pre_oom = false;
		q->pre_end = r->cons;
	}
	if (prod - q->pre_end > r->size)
		return;
	q->pre_end = rp_ring_lookahead(r, q->pre_end, prod, LOOK_CHUNK, pre_chunk, q);
	if (q->pre_end != prod || !q->npre)
		return;
	if (q->pre_oom) {
		q->npre = 0;
		q->pre_oom = false;
		return;
	}
	if (q->syn_head + q->syn_n + q->npre > q->syn_cap) {
		if (q->syn_head) {
			memmove(q->syn, q->syn + q->syn_head, q->syn_n * sizeof(*q->syn));
			q->syn_head = 0;
		}
		/* room for syn_n + npre bounds (npre > 0 here) */
		if (array_grow((void **)&q->syn, &q->syn_cap, q->syn_n + q->npre - 1,
			       sizeof(*q->syn), 256)) {
			q->npre = 0;
			return;
		}
	}
	/* suffix minima, from the back */
	m = look;
	for (i = q->npre; i-- > 0;) {
		if (q->pre[i].t < m)
			m = q->pre[i].t;
		q->pre[i].t = m;
	}
	memcpy(q->syn + q->syn_head + q->syn_n, q->pre, q->npre * sizeof(*q->pre));
	q->syn_n += q->npre;
	q->npre = 0;
}

/* Reads what the rings hold into the windows; returns records read. Sets
 * each queue's horizon (see the top of this file). */
static size_t collect(struct drainer *d)
{
	size_t total = 0;
	uint32_t i;

	for (i = 0; i < d->nr; i++) {
		struct rqueue *q = &d->rq[i];
		struct rp_ring *r = q->r;
		struct rp_ring_item it;
		uint64_t look = rp_clock_now(), prod, lim = look, hh, sh;
		uint32_t n = 0, room, skips = 0, head, cnt, mask;
		struct held *w;
		bool pos_sorted;
		int err;

		/* pairs with the producers' CAS on producer_pos: a position
		 * past this one was reserved after this load, after `look` */
		prod = rp_load_acquire(&r->hdr->producer_pos);
		/* a position not within a ring of the reader's is no look at
		 * all (the peek below repairs it); leaving a look out only
		 * makes horizons earlier */
		if (prod - r->cons <= r->size)
			hist_push(q, prod, look);
		if (!q->cap && prod != r->cons && win_alloc(q, r))
			continue;	/* no memory: leave it in the ring for now */
		room = q->cap - q->n;
		if (room > PASS_RECORDS)
			room = PASS_RECORDS;
		/* the window in registers while it is filled (nothing else
		 * touches it meanwhile); cap is 0 only when room is */
		w = q->w;
		head = q->head;
		cnt = q->n;
		mask = q->cap - 1;
		pos_sorted = q->pos_sorted;
		/* a bounded bite per pass: passes stay short, so looks are taken
		 * often and the window is merged out as it is read */
		while (n < room) {
			struct held *hd;
			uint64_t ts;
			uint32_t k;

			err = rp_ring_peek_fast(r, &it);
			if (rp_unlikely(err)) {
				if (err != -EBADMSG && err != -ESTALE)
					break;	/* -EAGAIN: nothing committed next */
				/* the ring skipped past it, and counted it; a
				 * ring that keeps going bad waits for the next
				 * pass, so the others are read meanwhile */
				if (++skips >= PASS_SKIPS)
					break;
				continue;
			}
			ts = it.hdr.timestamp;
			if (rp_unlikely(ts > lim)) {
				/* committed before we read it, so stamped before
				 * now: a later stamp is garbage (or clock skew),
				 * and must not hold the ring space forever */
				lim = rp_clock_now();
				if (ts > lim)
					ts = lim;
			}
			/* held in timestamp order, by insertion from the
			 * back: a ring is nearly sorted already */
			k = cnt;
			if (rp_unlikely(k && w[(head + k - 1) & mask].h.timestamp > ts)) {
				do {
					w[(head + k) & mask] = w[(head + k - 1) & mask];
					k--;
				} while (k > 0 && w[(head + k - 1) & mask].h.timestamp > ts);
				pos_sorted = false;
			}
			hd = &w[(head + k) & mask];
			hd->h = it.hdr;
			hd->h.len = it.len;
			hd->h.timestamp = ts;
			hd->pos = it.pos;
			hd->stack_nr = it.stack_nr;
			cnt++;
			rp_ring_advance(r);
			n++;
		}
		q->n = cnt;
		q->pos_sorted = pos_sorted;
		/* a backlog that the window may not take whole before the
		 * reader gets to this look (room for records of the smallest
		 * size): bounds from looking ahead, or the window could fill
		 * with records the horizon holds back. One it does take is read
		 * to the look within a few passes, and the looks bound it then,
		 * without a walk through its headers */
		if (r->cons < prod && prod - r->cons <= r->size &&
		    prod - r->cons > (uint64_t)(q->cap - q->n) * sizeof(struct rp_shm_record))
			look_ahead(q, r, prod, look);
		/* stopped before the producer (a record still being written, or
		 * the bite): what is left is younger than the last look that had
		 * not passed the stopping point, and than the lookahead bound */
		hh = hist_horizon(q, r->cons);
		sh = syn_horizon(q, r->cons);
		q->horizon = hh > sh ? hh : sh;
		if (r->cons >= prod)
			q->horizon = look;	/* read past the look: nothing older left */
		total += n;
	}
	/* the drop counters at least every millisecond, even when no gap
	 * needs them: the shorter the interval, the less a scribble on them
	 * costs and the tighter their plausibility bound */
	{
		uint64_t now = rp_clock_mono_ns();

		if (now - d->loss_ns >= 1000000)
			refresh_losses(d, now);
	}
	return total;
}

/* Hands back the ring space of everything serialized (and skipped). */
static void release(struct drainer *d)
{
	bool freed = false;
	uint32_t i;

	for (i = 0; i < d->nr; i++) {
		struct rp_ring *r = d->rq[i].r;
		uint64_t before = r->published;

		/* pairs with the producers' load_acquire of consumer_pos */
		rp_ring_release_to(r, win_min_pos(&d->rq[i], r->cons));
		if (r->published != before) {
			/* from what the drainer saw itself, never re-read */
			uint64_t used = r->prod_seen > r->published ? r->prod_seen - r->published : 0;

			freed = true;
			if (d->s->slot >= 0)
				rp_block_space_freed(d->s->slot, used < r->size ? r->size - used : 0);
		}
	}
	if (freed && d->s->slot < 0) {
		struct rp_shm_session *h = rp_shm_header(d->s->shm);

		/* the producers' process admits its waiters when this moves.
		 * A store-buffering pair with the watcher (agent_join.c): it
		 * sets space_watch, fences, then sleeps only while space_freed
		 * is the value it saw; the fence here orders the bump before
		 * the look at space_watch, so one of the two sees the other */
		rp_add_relaxed(&h->space_freed, 1);
		rp_smp_mb();
		if (rp_load_relaxed(&h->space_watch) == RP_SPACE_WATCH_FREED)
			rp_futex_wake(&h->space_freed, 1);
	}
}

/* Emits q's held records from the oldest while they are no younger than
 * limit (the first one is). Only this moves the window (emit() leaves it
 * alone), so its head and count stay in registers. */
static inline size_t run_out(struct drainer *d, struct rqueue *q, uint64_t limit)
{
	struct held *w = q->w;
	uint32_t head = q->head, cnt = q->n, mask = q->cap - 1;
	size_t n = 0;

	do {
		emit(d, q->r, &w[head]);
		head = (head + 1) & mask;
		cnt--;
		n++;
	} while (cnt && w[head].h.timestamp <= limit);
	q->head = head;
	q->n = cnt;
	return n;
}

/*
 * Two rings holding records (two CPUs writing): record by record, the one
 * whose head is older goes out; on equal heads the ring being emitted goes
 * on, which is what the runs of merge_out() do, so the order is the same.
 * Their writers take turns by the event, so there are no runs to speak of,
 * and looking at two heads costs less than starting runs.
 */
static size_t merge_two(struct drainer *d, struct rqueue *cur, struct rqueue *oth,
			uint64_t horizon)
{
	size_t n = 0;

	for (;;) {
		struct held *hd;

		if (!cur->n || (oth->n && oth->w[oth->head].h.timestamp < cur->w[cur->head].h.timestamp)) {
			struct rqueue *t = cur;

			cur = oth;
			oth = t;
		}
		if (!cur->n)
			break;
		hd = &cur->w[cur->head];
		if (hd->h.timestamp > horizon)
			break;
		emit(d, cur->r, hd);
		cur->head = (cur->head + 1) & (cur->cap - 1);
		cur->n--;
		n++;
	}
	return n;
}

/* Serializes held records older than horizon, oldest first, straight from
 * the rings: the oldest head goes out, with every record of its ring that
 * is no younger than the other rings' heads. */
static size_t merge_out(struct drainer *d, uint64_t horizon)
{
	size_t n = 0;

	for (;;) {
		struct rqueue *best = NULL, *other = NULL;
		uint64_t min = UINT64_MAX, next = UINT64_MAX;
		uint32_t i, active = 0;

		/* one look at every head: the oldest (the first ring of
		 * equals), and the oldest of the others */
		for (i = 0; i < d->nr; i++) {
			struct rqueue *q = &d->rq[i];
			uint64_t ts;

			if (!q->n)
				continue;
			active++;
			ts = q->w[q->head].h.timestamp;
			if (ts < min) {
				next = min;
				other = best;
				min = ts;
				best = q;
			} else if (ts < next) {
				next = ts;
				other = q;
			}
		}
		if (!best || min > horizon)
			break;
		if (active == 1) {
			n += run_out(d, best, horizon);
			break;
		}
		if (active == 2) {
			/* nothing else holds records: all that can go, goes */
			n += merge_two(d, best, other, horizon);
			break;
		}
		/* emit a run: up to the next oldest head of another ring */
		n += run_out(d, best, next < horizon ? next : horizon);
	}
	flush_batch(d);
	/* only the drainer writes them: plain stores, read with relaxed loads;
	 * the bytes are what the writer produced so far (the sink may still
	 * hold the tail of them until its next flush), the events what the
	 * output took */
	publish_written(d);
	rp_store_relaxed(&d->s->stats.output_lost, d->lost);
	if (n && d->w)
		publish_bytes(d);
	return n;
}

static bool windows_full(struct drainer *d)
{
	uint32_t i;

	for (i = 0; i < d->nr; i++)
		if (d->rq[i].cap && d->rq[i].n == d->rq[i].cap)
			return true;
	return false;
}

/*
 * A full window whose records are all younger than the horizon: only a ring
 * whose timestamps run far out of order (thousands of writers preempted
 * between reserving and stamping, or garbage) gets here. Waiting would not
 * help, so the oldest held record goes out; anything older that is still
 * unread will be counted as late.
 */
static void force_out(struct drainer *d)
{
	uint64_t oldest = UINT64_MAX;
	uint32_t i;

	for (i = 0; i < d->nr; i++)
		if (d->rq[i].n && win_at(&d->rq[i], 0)->h.timestamp < oldest)
			oldest = win_at(&d->rq[i], 0)->h.timestamp;
	merge_out(d, oldest);
}

/* Nothing unread: the reader's own position is at the producer position
 * of every ring (never the shared consumer position, which anyone can
 * write). A producer position that makes no sense counts as unread: the
 * next pass repairs it. Records held in the windows are the caller's. */
static bool rings_empty(struct drainer *d)
{
	uint32_t i;

	for (i = 0; i < d->nr; i++)
		if (rp_ring_pending(rp_shm_ring(d->s->shm, i)))
			return false;
	return true;
}

/*
 * Whether the last passes after a stop are done. Every writer of this
 * process is out by then and everything it wrote is committed, so a record
 * still uncommitted is a dead writer's or another process's: it is skipped
 * at once instead of after the stale timeout. What remains is read as far
 * as it goes, but a ring is not read for more than two rings' worth after
 * the stop began (only a process that goes on writing into it, or forging
 * records, could make it longer), and passes that read nothing for
 * STOP_GRACE_NS end it (only positions moved again and again can do that).
 */
static bool stop_done(struct drainer *d, size_t got)
{
	uint64_t now = rp_clock_mono_ns();
	uint32_t i;

	if (!d->stop_ns) {
		d->stop_ns = now ? now : 1;
		rp_shm_skip_uncommitted(d->s->shm);
		for (i = 0; i < d->nr; i++)
			d->rq[i].stop_from = rp_shm_ring(d->s->shm, i)->cons;
	}
	if (rings_empty(d))
		return true;
	if (!got && now - d->stop_ns > STOP_GRACE_NS)
		return true;
	for (i = 0; i < d->nr; i++) {
		const struct rp_ring *r = rp_shm_ring(d->s->shm, i);

		if (rp_ring_pending(r) && r->cons - d->rq[i].stop_from < 2 * r->size)
			return false;
	}
	return true;
}

/* A new look at r into *l: whether the ring moved since the one before
 * (relaxed: nothing is read on their word). */
static bool ring_look_moved(const struct rp_ring *r, struct ring_look *l)
{
	struct ring_look now = {
		.prod = rp_load_relaxed(&r->hdr->producer_pos),
		.full = rp_load_relaxed(&r->drops[RP_DROP_FULL]),
	};
	bool moved = now.prod != l->prod || now.full != l->full;

	*l = now;
	return moved;
}

#define STEP_LOOK_NS 1000000ull		/* a look at the drainer's CPU, at most */
#define STEP_GAP_MIN_NS 10000000ull	/* between two moves, at least */
#define STEP_GAP_MAX_NS 1000000000ull

/*
 * The drainer off a writer's CPU. Schedulers that pack threads onto few
 * CPUs (the kernels of some virtual machines do) can wake the drainer on
 * the CPU of the writer that woke it, and keep it there while another CPU
 * idles: the two then take turns, and the writer runs at the speed of
 * half a CPU. Rings are one per CPU, so a ring whose producer position
 * moved since the last look is a CPU with a writer on it. When the
 * drainer runs on one of those, it moves to a CPU it may use whose ring
 * was quiet (rp_thread_move_off()), if there is one. Moves closer
 * together than twice the gap double the gap (writers everywhere: the
 * drainer would only bounce), up to a second; a look that finds no writer
 * on the drainer's CPU resets it.
 */
static void step_aside(struct drainer *d, uint64_t now)
{
	unsigned int cpu;
	cpu_set_t busy;
	bool mine;
	uint32_t i;

	if (!d->step_ok || now < d->step_next_ns)
		return;
	d->step_next_ns = now + STEP_LOOK_NS;
	cpu = rp_ring_current_cpu();
	CPU_ZERO(&busy);
	for (i = 0; i < d->nr && i < CPU_SETSIZE; i++)
		if (ring_look_moved(d->rq[i].r, &d->rq[i].step))
			CPU_SET(i, &busy);
	mine = cpu < CPU_SETSIZE && CPU_ISSET(cpu, &busy);
	if (!mine) {
		d->step_gap_ns = STEP_GAP_MIN_NS;
		return;
	}
	if (now - d->step_last_ns < d->step_gap_ns || !rp_thread_move_off(&busy))
		return;
	if (now - d->step_last_ns < 2 * d->step_gap_ns) {
		d->step_gap_ns *= 2;
		if (d->step_gap_ns > STEP_GAP_MAX_NS)
			d->step_gap_ns = STEP_GAP_MAX_NS;
	}
	d->step_last_ns = now;
	rp_add_relaxed(&d->s->stats.moves, 1);
}

/*
 * Holding back while writers fill every CPU (defer_for(), Drop sessions).
 * Woken after an idle sleep, a drainer whose every CPU runs a writer would
 * only take CPU time from them, and rings with room left hold their burst
 * as well as an early pass would. So it naps, without the idle flag (no
 * writer pays a wake), until a CPU it may use is quiet (the burst ended, or
 * a CPU has time to spare), a ring holds half its size, or DEFER_MAX_NS
 * passed; then it drains as before, and holds back again only after it has
 * caught up. A nap lasts no longer than the ring with least room would take
 * to reach half full at DEFER_FILL_BYTES_PER_NS: filling the ring within a
 * nap takes writers twice as fast, 32 bytes a ns from one CPU, more than
 * its stores reach in memory larger than its caches (a ring whose room
 * would fit in those gets naps shorter than DEFER_NAP_MIN_NS, which end the
 * deferral). Their measured rate is not trusted for it: writers descheduled
 * during one look come back at full speed in the next.
 */
#define DEFER_MAX_NS 10000000ull	/* a deferral lasts this long at most */
#define DEFER_NAP_MIN_NS 50000ull
#define DEFER_NAP_MAX_NS 1000000ull
#define DEFER_FILL_BYTES_PER_NS 16u

/* How long to nap before the next look; 0: drain now. */
static uint64_t defer_for(struct drainer *d, uint64_t now)
{
	uint64_t nap = DEFER_NAP_MAX_NS;
	cpu_set_t mine;
	uint32_t i;

	if (!d->defer_since_ns)
		d->defer_since_ns = now;
	else if (now - d->defer_since_ns >= DEFER_MAX_NS)
		return 0;
	if (sched_getaffinity(0, sizeof(mine), &mine))
		return 0;
	for (i = 0; i < d->nr; i++) {
		struct rqueue *q = &d->rq[i];
		const struct rp_ring *r = q->r;
		bool quiet = !ring_look_moved(r, &q->defer);
		/* a scribbled position ends the deferral */
		uint64_t used = q->defer.prod - r->published, half = r->size / 2, t;

		if (used >= half)
			return 0;
		if (quiet && i < CPU_SETSIZE && CPU_ISSET(i, &mine))
			return 0;	/* a CPU no writer used: drain there */
		t = (half - used) / DEFER_FILL_BYTES_PER_NS;
		if (t < nap)
			nap = t;
	}
	if (now + nap - d->defer_since_ns > DEFER_MAX_NS)
		nap = d->defer_since_ns + DEFER_MAX_NS - now;
	return nap >= DEFER_NAP_MIN_NS ? nap : 0;
}

static void sleep_idle(struct drainer *d, int64_t ns)
{
	struct rp_shm_session *h = rp_shm_header(d->s->shm);
	uint32_t word = rp_load_relaxed(&h->drainer_wake);

	rp_store_relaxed(&h->drainer_idle, 1);
	/* pairs with rp_fence_light() between a producer's commit and its load
	 * of drainer_idle (wake_drainer() in write.c): either that producer
	 * sees the flag and wakes us, or its record is visible to the look at
	 * the rings below. The writers of a remote session are in another
	 * process, which the fence does not reach: there a plain full fence
	 * orders this thread, and idle_sleep_ns bounds a wake they miss */
	if (d->s->slot >= 0)
		rp_fence_heavy();
	else
		rp_smp_mb();
	if (rings_empty(d) && !rp_load_relaxed(&d->s->stop_requested)) {
		/* caught up: the positions defer_for() compares its first look
		 * with */
		if (d->defer_ok) {
			uint32_t i;

			for (i = 0; i < d->nr; i++)
				(void)ring_look_moved(d->rq[i].r, &d->rq[i].defer);
			d->defer_armed = true;
			d->defer_since_ns = 0;
		}
		rp_futex_wait(&h->drainer_wake, word, (uint64_t)ns);
	}
	rp_store_relaxed(&h->drainer_idle, 0);
	rp_add_relaxed(&d->s->stats.wakeups, 1);
}

static void maybe_sequence_point(struct drainer *d, uint64_t now)
{
	int err;

	if (now - d->last_sp_ns < (uint64_t)d->s->sp_interval_ms * 1000000ull || d->failed)
		return;
	d->last_sp_ns = now;
	/* the agent's many idle processes: a sequence point that would only
	 * repeat the last one is not written */
	if (d->s->slot < 0 && d->written == d->sp_written)
		return;
	d->sp_written = d->written;
	d->unflushed_ns = 0;	/* the sequence point flushes every block */
	err = nt_writer_sequence_point(d->w, d->last_ts);
	if (!err)
		err = rp_uring_sink_flush(d->usink);
	if (err)
		set_output_error(d, err);
	rp_add_relaxed(&d->s->stats.sps, 1);
	publish_bytes(d);
}

/*
 * Events that trickle in go out FLUSH_AGE_NS after the first of them was
 * written, without waiting for the next sequence point. Returns how long
 * the drainer may sleep before that is due (INT64_MAX: nothing waits).
 */
static int64_t flush_aged(struct drainer *d, uint64_t now)
{
	int err;

	if (d->failed || !d->w || !nt_writer_unflushed(d->w)) {
		d->unflushed_ns = 0;
		return INT64_MAX;
	}
	if (!d->unflushed_ns)
		d->unflushed_ns = now;
	if (now - d->unflushed_ns < FLUSH_AGE_NS)
		return (int64_t)(d->unflushed_ns + FLUSH_AGE_NS - now);
	d->unflushed_ns = 0;
	err = nt_writer_flush(d->w);
	if (!err)
		err = rp_uring_sink_flush(d->usink);
	if (err)
		set_output_error(d, err);
	publish_bytes(d);
	return INT64_MAX;
}

static void heartbeat(struct drainer *d)
{
	struct rp_shm_session *h = rp_shm_header(d->s->shm);

	rp_store_relaxed(&h->drainer_heartbeat_ns, rp_clock_mono_ns());
}

/* Starts the trace: the writer writes the stream header through the sink. */
static int open_trace(struct drainer *d)
{
	struct nt_writer_opts wo = { .sz = sizeof(wo) };

	wo.format = d->s->format;
	wo.pid = d->s->process_id ? d->s->process_id : (uint32_t)getpid();
	wo.tick_freq = d->s->tick_freq ? d->s->tick_freq : rp_clock_frequency();
	wo.sync_ticks = d->s->sync_ticks;
	wo.sync_unix_ns = d->s->sync_unix_ns;
	d->w = nt_writer_new(&d->usink->base, &wo);
	if (!d->w) {
		rp_set_error("cannot start the trace: %s", strerror(errno));
		return -errno;
	}
	return 0;
}

/*
 * rp_session_rotate()'s switch, between passes: records held for the
 * horizon stay held and go to the new stream, which starts where this one
 * ends. The writer's state is per stream (event types, stacks, threads'
 * numbers), so it is made anew, and the numbers the trace shows start
 * again from the base, while what was accepted of each thread (raw) goes
 * on: a gap across the switch still shows, in the new stream.
 */
static void rotate(struct drainer *d)
{
	struct rp_session *s = d->s;
	struct rp_uring_sink_opts so = { .sz = sizeof(so) };
	struct rp_uring_sink *sink;
	struct stat st;
	int err = 0;
	uint32_t i;

	/* the new output first: without it the old stream goes on, whole */
	so.is_socket = !fstat(s->rotate_fd, &st) && S_ISSOCK(st.st_mode);
	sink = rp_uring_sink_new(s->rotate_fd, &so);
	if (!sink) {
		s->rotate_err = -errno;
		return;
	}
	if (!d->failed) {
		err = nt_writer_finish(d->w, d->last_ts + 1);
		if (!err)
			err = rp_uring_sink_flush(d->usink);
		if (err)
			set_output_error(d, err);
		else
			rp_add_relaxed(&s->stats.sps, 1);
	}
	/* the old stream's events: all out, or (failed) counted as lost */
	publish_written(d);
	d->stream_base = d->written;
	d->bytes_before += nt_writer_bytes(d->w);
	nt_writer_free(d->w);
	d->w = NULL;
	rp_uring_sink_free(d->usink);
	d->usink = sink;
	s->out_fd = s->rotate_fd;
	s->is_socket = so.is_socket;
	if (d->nmeta_ids)
		memset(d->meta_ids, 0, d->nmeta_ids * sizeof(*d->meta_ids));
	/* a new writer: its tokens are its own */
	for (i = 0; i < d->seqs.cap; i++) {
		d->seqs.v[i].out = RP_SEQ_BASE;
		d->seqs.v[i].token = 0;
	}
	if (!d->failed) {
		int e = open_trace(d);

		if (e) {
			set_output_error(d, e);
			err = err ? err : e;
		}
	}
	d->sp_written = d->written;
	d->size_told = false;
	publish_bytes(d);
	s->rotate_err = err;
}

/*
 * rp_session_hold_drain(): is this pass skipped? Producers wait for as long
 * as the hold lasts (nothing takes a drainer that frees nothing for dead),
 * so a held session is not read at all until it is released or stopped.
 * The flag only says whether to read the rings, it publishes nothing:
 * relaxed, read anew every pass.
 */
static bool held_now(struct drainer *d)
{
	return rp_unlikely(rp_load_relaxed(&d->s->drain_hold));
}

static void *drainer_main(void *arg)
{
	struct drainer *d = arg;
	struct rp_session *s = d->s;
	struct rp_shm_session *h = rp_shm_header(s->shm);
	size_t i;

	d->last_sp_ns = rp_clock_mono_ns();
	heartbeat(d);
	rp_store_relaxed(&h->drainer_pid, (uint32_t)getpid());
	rp_store_relaxed(&h->drainer_tid, (uint32_t)syscall(SYS_gettid));
	/* pairs with the load_acquire in rp_drainer_start() */
	rp_store_release(&d->running, 1);
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

		d->pass++;	/* loss_budget() samples anew */

		if (rp_unlikely(rp_load_relaxed(&rp_drain_pause) || rp_load_relaxed(&rp_drain_freeze) ||
				held_now(d)) && !stopping) {
			struct timespec ts = { 0, 1000000 };

			/* held and the test hook paused still beat the heart
			 * (a hint for readers of the shared header); frozen,
			 * it does not */
			if (!rp_load_relaxed(&rp_drain_freeze))
				heartbeat(d);
			rp_add_relaxed(&rp_drain_paused_looks, 1);
			nanosleep(&ts, NULL);
			continue;
		}
		if (d->defer_armed) {
			/* a look that finds no cause for a nap disarms, so a
			 * deferral's naps begin with its first look */
			bool first = !d->defer_since_ns;
			uint64_t nap = stopping || rp_load_relaxed(&s->rotate_req) ? 0 :
				       defer_for(d, rp_clock_mono_ns());

			if (nap) {
				struct timespec ts = { 0, (long)nap };

				if (first)
					rp_add_relaxed(&s->stats.deferrals, 1);
				heartbeat(d);
				nanosleep(&ts, NULL);
				continue;
			}
			d->defer_armed = false;
		}
		/* before the rings are read (see ext_horizon in session.h):
		 * pairs with the external writer's store_release of it */
		uint64_t ext = rp_load_acquire(&s->ext_horizon);
		size_t got = collect(d);
		uint64_t horizon = ext ? ext : UINT64_MAX;

		heartbeat(d);
		for (i = 0; i < d->nr; i++)
			if (d->rq[i].horizon < horizon)
				horizon = d->rq[i].horizon;
		if (!merge_out(d, horizon) && windows_full(d))
			force_out(d);
		release(d);
		{
			uint64_t now = rp_clock_mono_ns();

			maybe_sequence_point(d, now);
			step_aside(d, now);
		}
		/* pairs with the store_release in rp_session_rotate() */
		if (rp_load_acquire(&s->rotate_req) && !stopping) {
			rotate(d);
			/* pairs with the load_acquire in rp_session_rotate() */
			rp_store_release(&s->rotate_req, 0);
			rp_futex_wake(&s->rotate_req, 1);
		}
		if (stopping && stop_done(d, got))
			break;
		if (rp_load_relaxed(&rp_drain_throttle_ns) && !stopping) {
			uint64_t t = rp_load_relaxed(&rp_drain_throttle_ns);
			uint32_t *wake = &rp_shm_header(d->s->shm)->drainer_wake;

			/* rp_drainer_kick() (stop, a test) cuts it short */
			rp_futex_wait(wake, rp_load_relaxed(wake), t);
		}
		if (stopping || got >= BUSY_BATCH)
			continue;	/* keep up with a flood */
		/* Block writers waiting for room: this drainer paces them, and
		 * a pause to gather a batch would only keep them waiting. A pass
		 * that found nothing still pauses: what holds it up is a record
		 * still being written, whose writer needs the CPU more */
		if (got && d->s->slot >= 0 && rp_block_waiting(d->s->slot))
			continue;
		{
			int64_t due = flush_aged(d, rp_clock_mono_ns());
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
				int64_t idle = d->s->idle_sleep_ns ? (int64_t)d->s->idle_sleep_ns :
					       IDLE_SLEEP_NS;

				if (d->s->slot >= 0 && rp_block_drainer_idle(d->s->slot) &&
				    idle > (int64_t)RP_BLOCK_IDLE_POLL_NS)
					idle = (int64_t)RP_BLOCK_IDLE_POLL_NS;

				sleep_idle(d, due < idle ? due : idle);
			}
		}
	}
	merge_out(d, UINT64_MAX);
	release(d);

	/* the last attempts of every thread, so trailing drops are counted;
	 * every writer is out, so a fresh look at the drop counters holds
	 * every drop */
	d->pass++;
	pthread_mutex_lock(&s->final_lock);
	for (i = 0; i < s->nfinals && !d->failed; i++) {
		uint32_t seq;

		if (seq_final(d, s->finals[i].tid, s->finals[i].seq, &seq))
			nt_writer_note_seq(d->w, 0, s->finals[i].tid, seq);
	}
	pthread_mutex_unlock(&s->final_lock);
	show_unshown(d);
	if (!d->failed) {
		int err = nt_writer_finish(d->w, d->last_ts + 1);

		if (!err)
			err = rp_uring_sink_flush(d->usink);
		if (err)
			set_output_error(d, err);
		rp_add_relaxed(&s->stats.sps, 1);
	}
	publish_written(d);
	rp_store_relaxed(&s->stats.output_lost, d->lost);
	publish_bytes(d);
	return d;
}

/* The stale judge of this process's rings (ring.h): a mark first, then
 * looks until every writer inside a write at the mark has left it. */
static bool writers_gone(void *ctx, uint64_t *mark)
{
	(void)ctx;
	if (!*mark)
		*mark = rp_writers_mark();
	return rp_writers_left(*mark);
}

int rp_drainer_start(struct rp_session *s)
{
	struct rp_uring_sink_opts so = { .sz = sizeof(so), .is_socket = s->is_socket };
	struct drainer *d = calloc(1, sizeof(*d));
	uint32_t i;
	int err;

	if (!d)
		return -ENOMEM;
	d->s = s;
	d->nr = rp_shm_nr_rings(s->shm);
	/* rings one per CPU: a ring's writers run on its CPU (step_aside()) */
	d->step_ok = d->nr >= rp_shm_possible_cpus();
	d->step_gap_ns = STEP_GAP_MIN_NS;
	/* a Block session's writers wait for this drainer once a ring is
	 * full, so holding back would only slow them; a remote session's
	 * rings are not this process's CPUs' */
	d->defer_ok = d->step_ok && s->slot >= 0 &&
		      (rp_shm_header(s->shm)->flags & RP_SHM_F_MODE_MASK) == RP_SHM_MODE_DROP;
	d->rq = calloc(d->nr, sizeof(*d->rq));
	if (!d->rq) {
		err = -ENOMEM;
		goto err_free;
	}
	for (i = 0; i < d->nr; i++)
		d->rq[i].r = rp_shm_ring(s->shm, i);
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
	rp_fence_init();	/* sleep_idle()'s heavy fence */
	/* this process's writers: whether one can still commit a head is a
	 * question for the thread registry; another process's (a remote
	 * session) are waited for until that process is gone */
	if (s->slot >= 0)
		rp_shm_set_stale_judge(s->shm, writers_gone, NULL);
	{
		const struct rp_shm_session *h = rp_shm_header(s->shm);

		/* private copies: nothing a process mapping the rings writes
		 * there can change how producers wait */
		if (s->slot >= 0)
			rp_block_reset(s->slot, s->block_timeout_ns, h->ring_data_size,
				       h->nr_rings);
	}
	err = rp_thread_start(&s->drainer, "rp-drain", drainer_main, d);
	if (err) {
		s->drainer_ctx = NULL;
		goto err_free;
	}
	s->drainer_started = true;
	/* start order: the drainer is running before start() returns and
	 * before any enable callback fires (pairs with the store_release of
	 * running at the top of drainer_main()); a private word, so that no
	 * process writing the shared drainer_tid can stall a start */
	while (!rp_load_acquire(&d->running))
		sched_yield();
	return 0;

err_free:
	nt_writer_free(d->w);
	rp_uring_sink_free(d->usink);
	free(d->rq);
	free(d);
	return err;
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
	rp_futex_wake(&h->drainer_wake, 1);
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
		free(d->rq[i].w);
		free(d->rq[i].syn);
		free(d->rq[i].pre);
	}
	free(d->rq);
	free(d->meta_ids);
	free(d->seqs.v);
	free(d);
	s->drainer_ctx = NULL;
	return rp_load_relaxed(&s->output_error);
}
