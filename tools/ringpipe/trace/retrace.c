// SPDX-License-Identifier: MIT
/*
 * Retrace (see retrace.h): every event of one or more nettrace streams
 * written again, under other pids and in another framing. A copy is the
 * merge of one source under one pid: both run the same code.
 *
 * Sequence numbers and EventsLost. The reader counts EventsLost from gaps
 * in each capture thread's numbers when it parses a block, with the
 * reference reader's rules and quirks (a new V5 thread counts nothing
 * before its first event, a V6 thread starts at 0, sequence points report
 * drops after a thread's last event). The output is renumbered: each
 * capture thread counts from the writer's seq_base, advancing by one per
 * event plus the gap the source showed before it, so the output shows the
 * same gaps in the same places. The gaps are taken from the source's
 * numbers, bounded by what the source's reader has counted so far (it
 * parses ahead of what it hands out), so the output never counts more
 * than the source; whatever the source counted that no gap explains
 * (sequence points, quirks) is noted on a thread at the end
 * (nt_writer_note_seq()), and the final sequence point reports it. The
 * totals are equal, source by source, so a merge's EventsLost is the sum.
 *
 * Ordering. Events come in each reader's dispatch order, which is not
 * always in timestamp order across threads (the runtime marks only the
 * first event of each thread's run IsSorted; queued events are released
 * by later sorted ones). A merge takes, of the sources' next events, the
 * earliest on the output's clock (a k-way merge: each source is one
 * sorted-as-handed-out run). The writer's contract is that sorted events
 * come in non-decreasing timestamp order across all threads, so an event
 * is marked sorted only when no event before it is later; the others go
 * unsorted and the reader queues them until a later sorted event. A
 * reader checks an unsorted event's number against the capture thread of
 * the block's last sorted event (TraceEvent's EventCache does), so an
 * unsorted event of another capture thread starts a new block, where the
 * first event sets the thread.
 *
 * Clocks. Each source's ticks are mapped onto the output's clock through
 * both anchors (sync ticks at a wall-clock time, and the tick frequency).
 * The header stores the wall clock in milliseconds only (SYSTEMTIME,
 * truncated), so two anchors of one clock can disagree by up to a
 * millisecond: when the frequencies are equal and the anchors agree that
 * closely (two processes of one host, both counting CLOCK_MONOTONIC
 * nanoseconds), the ticks are taken as they are, exactly; with equal
 * frequencies otherwise they are shifted by a whole number of ticks; with
 * different frequencies they are scaled.
 *
 * Identities. A source's event types are defined in the output once each,
 * keyed by the source and its reader's metadata; stacks are interned by
 * the writer by content. A source's capture thread (keyed within its
 * source) maps to an output capture thread keyed by (pid, thread id),
 * which is how the V6 writer declares its threads: thread 1 of one
 * process and thread 1 of another stay two threads, each with its own
 * numbering, while two sources that show the same thread of the same
 * process share its numbering (each event still advances it by one plus
 * its gap, so the losses add up).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/hmap.h"
#include "trace/retrace.h"
#include "common/tool_util.h"

/* The writer's default seq_base: a capture thread's number before its
 * first event (retrace_writer_opts() leaves it) */
#define RT_SEQ_BASE 1u
/* Events between the output's sequence points: stack and label tables
 * are interned per region, in the writer and in every reader */
#define RT_SP_EVERY 100000u
/* The writer's largest stack (its rows are u16-sized) */
#define RT_MAX_STACK_BYTES 65527u
/* Lost events noted at once: a reader takes a negative difference for a
 * wrap, so one report stays well under 2^31 */
#define RT_LOST_STEP 0x40000000ull
/* How far two anchors of one clock can disagree: the millisecond the
 * header's SYSTEMTIME truncates, plus the time between reading the tick
 * counter and the wall clock when each anchor was taken */
#define RT_SAME_CLOCK_NS (1000000 + 20000)
#define RT_NS_PER_S 1000000000
/* Where clock arithmetic saturates: far beyond any u64 tick, far below
 * where adding a u64 to it could overflow */
#define RT_I128_SAT ((__int128)1 << 100)

struct rt_src_thread {		/* a capture thread of a source */
	uint32_t last_seq;
	uint32_t out;		/* index into rt.out */
	bool written;		/* an event of it was written */
};

struct rt_out {			/* a capture thread of the output */
	uint32_t pid;		/* 0: the writer's default */
	uint64_t tid;
	uint32_t raw;		/* last number handed to the writer */
	bool noted;		/* raw moved on without an event written */
	bool written;		/* an event of it was written */
};

enum rt_clock_kind {
	RT_CLOCK_SAME,		/* the output's own ticks */
	RT_CLOCK_SHIFT,		/* the same frequency: out = ts + shift */
	RT_CLOCK_SCALE,		/* another frequency: through nanoseconds */
};

struct rt_clock {
	enum rt_clock_kind kind;
	__int128 shift;
	__int128 wall_ns;	/* SCALE: the source's anchor after the output's */
	uint64_t src_ticks, src_freq, out_ticks, out_freq;
};

struct rt_source {
	struct nt_reader *r;
	struct retrace_stats st;	/* this source's counts */
	uint32_t pid;		/* every event's; with own_pid, those that name none */
	bool own_pid;
	int format;
	uint32_t ptr_size;
	struct rt_clock clock;
	struct hmap metas;	/* nt_meta address -> output's id, 0: not definable */
	struct hmap threads;	/* (pid, capture thread) key -> index into thr */
	struct rt_src_thread *thr;
	size_t nthr, capthr;
	int64_t counted;	/* EventsLost the output's gaps show for it so far */
	uint32_t last_out;	/* output thread of its last event written */
	bool any;		/* an event of it was written */
	struct nt_rec head;	/* its next event, not yet written */
	uint64_t head_ts;	/* head's timestamp on the output's clock */
};

struct rt {
	struct nt_writer *w;
	int out_format;
	struct rt_source *src;
	size_t nsrc;
	size_t *heap;		/* sources with a head, earliest head first */
	size_t nheap;
	struct hmap outs;	/* (pid, thread id) key -> index into out */
	struct rt_out *out;
	size_t nout, capout;
	uint64_t *ips;
	size_t capips;
	uint64_t max_ts;	/* latest timestamp written */
	uint32_t last_out;	/* output thread of the last event written */
	bool any;		/* an event was written */
	uint32_t since_sp;
	uint64_t unreported;	/* losses noted since the last sequence point */
	uint64_t events_seen;	/* for the progress line */
};

void retrace_writer_opts(const struct nt_reader *r, int format, uint32_t pid,
			 struct nt_writer_opts *o)
{
	const struct nt_reader_info *in = nt_reader_info(r);

	memset(o, 0, sizeof(*o));
	o->sz = sizeof(*o);
	o->format = format;
	o->pid = pid;
	o->nr_cpus = in->nr_cpus;
	o->pointer_size = in->pointer_size;
	o->sync_ticks = in->sync_ticks;
	o->tick_freq = in->tick_freq;
	/* 0 would mean "now" to the writer; the epoch is the closest we can
	 * say for a source that claims it */
	o->sync_unix_ns = in->sync_unix_ns > 0 ? (uint64_t)in->sync_unix_ns : 1;
	o->sampling_interval_ns = in->sampling_interval;
}

/* A pid the writer can carry, or 0 */
static uint32_t rt_pid_of(int64_t pid)
{
	return pid > 0 && pid <= UINT32_MAX ? (uint32_t)pid : 0;
}

/* The pid of a merge's header: its first source's */
static uint32_t rt_header_pid(struct nt_reader **r, const uint32_t *pids)
{
	return pids && pids[0] ? pids[0] : rt_pid_of(nt_reader_info(r[0])->pid);
}

/*
 * The source whose clock a merge keeps: the earliest wall-clock anchor, so
 * that the other sources' events, which follow their own anchors, map to
 * ticks after the output's anchor rather than below it.
 */
static size_t rt_clock_source(struct nt_reader **r, size_t n)
{
	size_t i, best = 0;

	for (i = 1; i < n; i++)
		if (nt_reader_info(r[i])->sync_unix_ns < nt_reader_info(r[best])->sync_unix_ns)
			best = i;
	return best;
}

void retrace_merge_writer_opts(struct nt_reader **r, const uint32_t *pids, size_t n,
			       struct nt_writer_opts *o)
{
	size_t i;

	retrace_writer_opts(r[rt_clock_source(r, n)], NT_FORMAT_V6, rt_header_pid(r, pids), o);
	o->sampling_interval_ns = nt_reader_info(r[0])->sampling_interval;
	for (i = 0; i < n; i++) {
		const struct nt_reader_info *in = nt_reader_info(r[i]);

		if (in->nr_cpus > o->nr_cpus)
			o->nr_cpus = in->nr_cpus;
		if (in->pointer_size != 4)
			o->pointer_size = 8;
	}
}

/* ---- clocks -------------------------------------------------------------- */

/* a * b / c rounded down (c > 0), saturating where a * b overflows */
static __int128 rt_muldiv(__int128 a, __int128 b, __int128 c)
{
	__int128 p, q;

	if (__builtin_mul_overflow(a, b, &p))
		return (a < 0) != (b < 0) ? -RT_I128_SAT : RT_I128_SAT;
	if (p > RT_I128_SAT)
		p = RT_I128_SAT;
	if (p < -RT_I128_SAT)
		p = -RT_I128_SAT;
	q = p / c;
	return p % c < 0 ? q - 1 : q;
}

static void rt_clock_init(struct rt_clock *k, const struct nt_reader_info *src,
			  const struct nt_reader_info *out)
{
	__int128 wall = (__int128)src->sync_unix_ns - out->sync_unix_ns;

	memset(k, 0, sizeof(*k));
	k->src_ticks = src->sync_ticks;
	k->src_freq = src->tick_freq ? src->tick_freq : 1;
	k->out_ticks = out->sync_ticks;
	k->out_freq = out->tick_freq ? out->tick_freq : 1;
	k->wall_ns = wall;
	if (k->src_freq == k->out_freq) {
		/* where the source's anchor falls on the output's clock, by
		 * the wall clock, against where its ticks say it is */
		__int128 by_wall = (__int128)k->out_ticks + rt_muldiv(wall, k->out_freq, RT_NS_PER_S);
		__int128 apart = rt_muldiv((__int128)k->src_ticks - by_wall, RT_NS_PER_S,
					   k->out_freq);

		if (apart >= -RT_SAME_CLOCK_NS && apart <= RT_SAME_CLOCK_NS) {
			k->kind = RT_CLOCK_SAME;
		} else {
			k->kind = RT_CLOCK_SHIFT;
			k->shift = by_wall - k->src_ticks;
		}
		return;
	}
	k->kind = RT_CLOCK_SCALE;
}

/* ts of the source on the output's clock (monotonic in ts) */
static uint64_t rt_clock_map(const struct rt_clock *k, uint64_t ts)
{
	__int128 v;

	switch (k->kind) {
	case RT_CLOCK_SAME:
		return ts;
	case RT_CLOCK_SHIFT:
		v = (__int128)ts + k->shift;
		break;
	default:
		/* through nanoseconds after the output's anchor: two steps
		 * keep every product in range for any u64 tick */
		v = k->wall_ns + rt_muldiv((__int128)ts - k->src_ticks, RT_NS_PER_S, k->src_freq);
		v = (__int128)k->out_ticks + rt_muldiv(v, k->out_freq, RT_NS_PER_S);
		break;
	}
	if (v < 0)
		return 0;
	return v > (__int128)UINT64_MAX ? UINT64_MAX : (uint64_t)v;
}

/* ---- metadata ------------------------------------------------------------ */

static void rt_free_fields(struct nt_field *f, uint16_t n)
{
	uint16_t i;

	if (!f)
		return;
	for (i = 0; i < n; i++)
		rt_free_fields((struct nt_field *)f[i].fields, f[i].nfields);
	free(f);
}

/*
 * The reader's field tree as the writer's (names borrowed from the
 * reader). 0; -EINVAL for a tree nt_field cannot hold (an array of arrays:
 * one element type per array); -ENOMEM.
 */
static int rt_conv_fields(const struct nt_rfield *in, uint16_t n, int depth,
			  struct nt_field **out)
{
	struct nt_field *f;
	uint16_t i;
	int err = 0;

	*out = NULL;
	if (!n)
		return 0;
	/* the writer refuses deeper trees anyway; this bounds the recursion */
	if (depth > NT_MAX_FIELD_DEPTH)
		return -EINVAL;
	f = calloc(n, sizeof(*f));
	if (!f)
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		const struct nt_rtype *t = &in[i].type, *members = NULL;

		f[i].name = in[i].name ? in[i].name : "";
		f[i].type = t->code;
		if (t->code == NT_ARRAY) {
			if (!t->elem || t->elem->code == NT_ARRAY) {
				err = -EINVAL;
				break;
			}
			f[i].elem_type = t->elem->code;
			if (t->elem->code == NT_OBJECT)
				members = t->elem;
		} else if (t->code == NT_OBJECT) {
			members = t;
		}
		if (members) {
			struct nt_field *sub;

			err = rt_conv_fields(members->fields, members->nfields, depth + 1, &sub);
			if (err)
				break;
			f[i].fields = sub;
			f[i].nfields = members->nfields;
		}
	}
	if (err) {
		rt_free_fields(f, n);
		return err;
	}
	*out = f;
	return 0;
}

static bool rt_ends_with(const char *s, const char *suf)
{
	size_t a = strlen(s), b = strlen(suf);

	return a >= b && !strcasecmp(s + a - b, suf);
}

/*
 * Defines m in the copy: *id, or 0 when even its bare description is
 * refused (its events are then left out, counted). 0 or -ENOMEM.
 */
static int rt_define(struct rt *t, struct retrace_stats *st, const struct nt_meta *m,
		     uint32_t *id)
{
	/* a field list with no fields, which is not the same as no list */
	static const struct nt_field no_fields[1];
	struct nt_event_desc d = {
		.provider = m->provider,
		.provider_guid = m->guid,
		.event_id = m->event_id,
		.name = m->raw_name ? m->raw_name : "",
		.keywords = m->keywords,
		.version = m->version,
		.level = m->level,
		/*
		 * The reader keeps the opcode after TraceEvent's implied
		 * Start/Stop, not the stored one. Written again it names the
		 * event the same way: an implied 1 or 2 stored explicitly
		 * reads back the same, and a nameless event takes its name
		 * (and, for the runtime's events, its opcode) from its id.
		 * The one exception: an explicit 0 on a name that ends in
		 * Start or Stop, which the writer cannot store (it writes no
		 * opcode for 0, and the reader then implies one).
		 */
		.opcode = m->opcode,
	};
	struct nt_field *f = NULL;
	bool bare = !m->has_fields;
	char why[256];
	int err;

	*id = 0;
	if (!bare) {
		err = rt_conv_fields(m->fields, m->nfields, 0, &f);
		if (err == -ENOMEM)
			return err;
		if (err) {
			bare = true;
		} else {
			d.fields = f ? f : no_fields;
			d.nfields = m->nfields;
			if (nt_event_desc_check(&d, t->out_format, why, sizeof(why))) {
				d.fields = NULL;
				d.nfields = 0;
				bare = true;
			}
		}
	}
	if (m->raw_name && m->raw_name[0] && !m->opcode &&
	    (rt_ends_with(m->raw_name, "Start") || rt_ends_with(m->raw_name, "Stop")))
		st->types_renamed++;
	err = nt_writer_define(t->w, &d, id);
	if ((err == -EINVAL || err == -E2BIG) && d.fields && !nt_writer_error(t->w)) {
		/* the check should have said so; the events still count more
		 * than their field names */
		d.fields = NULL;
		d.nfields = 0;
		bare = true;
		err = nt_writer_define(t->w, &d, id);
	}
	rt_free_fields(f, m->nfields);
	if (err == -ENOMEM || nt_writer_error(t->w))
		return err;
	if (err) {
		*id = 0;
		return 0;
	}
	st->types++;
	st->types_bare += bare && m->has_fields;
	return 0;
}

/* ---- threads --------------------------------------------------------------- */

/* The key of an output capture thread: the V6 writer's own key for a
 * thread, so that the two agree on which events share one */
static uint64_t rt_out_key(uint32_t pid, uint64_t tid)
{
	return ((uint64_t)pid << 32) ^ tid;
}

static int rt_out_get(struct rt *t, uint32_t pid, uint64_t tid, uint32_t *idx)
{
	uint64_t key = rt_out_key(pid, tid), v;

	if (hmap_get(&t->outs, key, &v)) {
		*idx = (uint32_t)v;
		return 0;
	}
	if (array_grow((void **)&t->out, &t->capout, t->nout, sizeof(*t->out), 16) ||
	    hmap_put(&t->outs, key, t->nout))
		return -ENOMEM;
	t->out[t->nout] = (struct rt_out){ .pid = pid, .tid = tid, .raw = RT_SEQ_BASE };
	*idx = (uint32_t)t->nout++;
	return 0;
}

/* The pid rec goes under in the output */
static uint32_t rt_event_pid(const struct rt_source *s, const struct nt_rec *rec)
{
	uint32_t pid = s->own_pid ? rt_pid_of(rec->pid) : 0;

	return pid ? pid : s->pid;
}

/*
 * The source's capture thread of rec (which stays put until the next call),
 * and the gap (events lost just before it) the source shows there, before
 * bounding.
 */
static int rt_thread(struct rt *t, struct rt_source *s, const struct nt_rec *rec,
		     struct rt_src_thread **th, uint32_t *gap)
{
	uint32_t pid = rt_event_pid(s, rec);
	/* the pid too: a V6 capture thread could carry events of threads of
	 * several processes, which the output keeps apart */
	uint64_t key = rt_out_key(pid, rec->capture_thread), v;
	uint32_t oi;
	int err;

	if (hmap_get(&s->threads, key, &v)) {
		int32_t d = (int32_t)(rec->seq - s->thr[v].last_seq);

		/* d <= 0: a thread id reused by a new thread that numbers
		 * afresh; what the reader makes of it shows in its total */
		*gap = d > 1 ? (uint32_t)d - 1 : 0;
		s->thr[v].last_seq = rec->seq;
		*th = &s->thr[v];
		return 0;
	}
	/*
	 * V5 names the capture thread by its OS id. V6 by an index whose OS
	 * id the reader does not hand out: the event's own thread stands in
	 * (a capture thread writes its own events, but for the rare event
	 * written on another's behalf).
	 */
	err = rt_out_get(t, pid, s->format == NT_FORMAT_V6 ? (uint64_t)(uint32_t)rec->tid :
			 rec->capture_thread, &oi);
	if (err || array_grow((void **)&s->thr, &s->capthr, s->nthr, sizeof(*s->thr), 16) ||
	    hmap_put(&s->threads, key, s->nthr))
		return -ENOMEM;
	*th = &s->thr[s->nthr];
	s->thr[s->nthr++] = (struct rt_src_thread){ .last_seq = rec->seq, .out = oi };
	/* a V6 thread is declared at 0: numbers before its first are lost;
	 * a new V5 thread counts nothing before its first */
	*gap = s->format == NT_FORMAT_V6 && rec->seq > 1 ? rec->seq - 1 : 0;
	return 0;
}

/* ---- events ---------------------------------------------------------------- */

static bool rt_zero16(const uint8_t *p)
{
	static const uint8_t z[16];

	return !memcmp(p, z, 16);
}

/* The writer's output id for rec's event type, defined at its first use */
static int rt_meta_id(struct rt *t, struct rt_source *s, const struct nt_meta *m, uint32_t *id)
{
	uint64_t v;
	int err;

	if (hmap_get(&s->metas, (uint64_t)(uintptr_t)m, &v)) {
		*id = (uint32_t)v;
		return 0;
	}
	err = rt_define(t, &s->st, m, id);
	if (err)
		return err;
	return hmap_put(&s->metas, (uint64_t)(uintptr_t)m, *id) ? -ENOMEM : 0;
}

/* rec's stack as the writer's IPs in ev */
static int rt_stack(struct rt *t, struct rt_source *s, const struct nt_rec *rec,
		    struct nt_event *ev)
{
	uint32_t n, i;

	if (rec->stack_bytes < s->ptr_size)
		return 0;
	n = rec->stack_bytes / s->ptr_size;
	if ((uint64_t)n * s->ptr_size > RT_MAX_STACK_BYTES) {
		/* the innermost frames come first: keep those */
		n = RT_MAX_STACK_BYTES / s->ptr_size;
		s->st.stacks_cut++;
	}
	if (array_grow((void **)&t->ips, &t->capips, n - 1, sizeof(*t->ips), 16))
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		const uint8_t *ip = rec->stack + (size_t)i * s->ptr_size;

		t->ips[i] = s->ptr_size == 8 ? le64_get(ip) : le32_get(ip);
	}
	ev->stack = t->ips;
	ev->stack_depth = n;
	return 0;
}

/* Writes rec of source s, whose timestamp on the output's clock is ts. */
static int rt_event(struct rt *t, struct rt_source *s, const struct nt_rec *rec, uint64_t ts)
{
	struct retrace_stats *st = &s->st;
	struct nt_event ev = { 0 };
	struct rt_src_thread *th;
	struct rt_out *o;
	uint32_t gap, oi;
	int64_t budget;
	int err;

	err = rt_meta_id(t, s, rec->meta, &ev.meta_id);
	if (!err)
		err = rt_thread(t, s, rec, &th, &gap);
	if (err)
		return err;
	oi = th->out;
	o = &t->out[oi];
	budget = nt_reader_lost(s->r) - s->counted;
	if (budget < 0)
		budget = 0;
	if ((int64_t)gap > budget)
		gap = (uint32_t)budget;
	s->counted += gap;
	o->raw += 1 + gap;

	ev.seq = o->raw;
	ev.pid = o->pid;
	ev.tid = (uint64_t)(uint32_t)rec->tid;
	ev.capture_tid = o->tid;
	ev.cpu = rec->cpu;
	ev.ts = ts;
	ev.activity = rt_zero16(rec->activity) ? NULL : rec->activity;
	ev.related = rt_zero16(rec->related) ? NULL : rec->related;
	ev.payload = rec->payload;
	ev.payload_len = rec->payload_len;
	if (!ev.meta_id || rec->payload_len > UINT16_MAX)
		goto skip;
	err = rt_stack(t, s, rec, &ev);
	if (err)
		return err;
	ev.sorted = !t->any || ts >= t->max_ts;
	if (!ev.sorted) {
		st->unsorted++;
		if (oi != t->last_out) {
			err = nt_writer_flush(t->w);
			if (err)
				return err;
		}
	}
	err = nt_writer_event(t->w, &ev);
	if (err) {
		/* refused before the writer took its number (payload or
		 * thread id out of its range, a second pid in V5): leave it
		 * out, counted */
		if (!nt_writer_error(t->w) && (err == -EINVAL || err == -E2BIG || err == -EXDEV))
			goto skip;
		return err;
	}
	st->events++;
	if (!s->any || ts > st->max_ts)
		st->max_ts = ts;
	if (!t->any || ts > t->max_ts)
		t->max_ts = ts;
	s->any = t->any = true;
	s->last_out = t->last_out = oi;
	o->noted = false;
	o->written = th->written = true;
	if (++t->since_sp >= RT_SP_EVERY) {
		t->since_sp = 0;
		return nt_writer_sequence_point(t->w, t->max_ts);
	}
	return 0;
skip:
	/* its number is used: the thread's next event, or the note at the
	 * end, shows it as lost */
	st->skipped++;
	o->noted = true;
	return 0;
}

/* Raises output thread oi's number by rest lost events, in reports a
 * reader takes as positive. */
static int rt_note_lost(struct rt *t, uint32_t oi, int64_t rest)
{
	int err;

	while (rest > 0) {
		uint64_t step = (uint64_t)rest < RT_LOST_STEP ? (uint64_t)rest : RT_LOST_STEP;

		/* one report per sequence point; the last comes with the
		 * caller's nt_writer_finish() */
		if (t->unreported + step > RT_LOST_STEP) {
			err = nt_writer_sequence_point(t->w, t->max_ts);
			if (err)
				return err;
			t->unreported = 0;
		}
		t->out[oi].raw += (uint32_t)step;
		err = nt_writer_note_seq(t->w, t->out[oi].pid, t->out[oi].tid, t->out[oi].raw);
		if (err)
			return err;
		t->unreported += step;
		rest -= (int64_t)step;
	}
	return 0;
}

/* The losses no event showed: after each thread's last event, and what
 * each source's reader counted beyond the gaps. */
static int rt_settle(struct rt *t)
{
	size_t i;
	int err;

	for (i = 0; i < t->nout; i++) {
		if (!t->out[i].noted)
			continue;
		err = nt_writer_note_seq(t->w, t->out[i].pid, t->out[i].tid, t->out[i].raw);
		if (err)
			return err;
	}
	for (i = 0; i < t->nsrc; i++) {
		struct rt_source *s = &t->src[i];
		int64_t rest = s->st.lost - s->counted;
		uint32_t oi = s->last_out;

		if (rest <= 0)
			continue;
		/* on the source's thread written last, or a thread 0 of its
		 * process when none of its events was written */
		if (!s->any) {
			err = rt_out_get(t, s->pid, 0, &oi);
			if (err)
				return err;
		}
		err = rt_note_lost(t, oi, rest);
		if (err)
			return err;
	}
	return 0;
}

/* ---- the merge ------------------------------------------------------------- */

static bool rt_before(const struct rt *t, size_t a, size_t b)
{
	uint64_t x = t->src[a].head_ts, y = t->src[b].head_ts;

	/* equal times: the earlier source first, so the result is one order */
	return x < y || (x == y && a < b);
}

/* Restores the heap's order below position i. */
static void rt_heap_down(struct rt *t, size_t i)
{
	for (;;) {
		size_t l = 2 * i + 1, m = i, tmp;

		if (l < t->nheap && rt_before(t, t->heap[l], t->heap[m]))
			m = l;
		if (l + 1 < t->nheap && rt_before(t, t->heap[l + 1], t->heap[m]))
			m = l + 1;
		if (m == i)
			return;
		tmp = t->heap[i];
		t->heap[i] = t->heap[m];
		t->heap[m] = tmp;
		i = m;
	}
}

/* Reads source s's next event into its head: true when there is one. */
static bool rt_pull(struct rt_source *s)
{
	int rc = nt_reader_next(s->r, &s->head);

	if (rc > 0) {
		s->head_ts = rt_clock_map(&s->clock, s->head.ts);
		return true;
	}
	if (rc < 0) {
		const char *msg = nt_reader_errmsg(s->r);

		s->st.read_err = rc;
		snprintf(s->st.read_msg, sizeof(s->st.read_msg), "%s", msg ? msg : strerror(-rc));
	}
	return false;
}

/* Distinct pids among the events written of source s (NULL: of all
 * sources). */
static uint32_t rt_count_pids(const struct rt *t, const struct rt_source *s)
{
	struct hmap seen = { 0 };
	size_t i, n = s ? s->nthr : t->nout;
	uint32_t count = 0;

	for (i = 0; i < n; i++) {
		const struct rt_out *o = &t->out[s ? s->thr[i].out : i];

		if (!(s ? s->thr[i].written : o->written) || hmap_get(&seen, o->pid, NULL))
			continue;
		/* out of memory: a count, not worth failing the trace for */
		if (hmap_put(&seen, o->pid, 1))
			break;
		count++;
	}
	hmap_free(&seen);
	return count;
}

static void rt_sum(const struct retrace_stats *a, struct retrace_stats *sum)
{
	sum->events += a->events;
	sum->skipped += a->skipped;
	sum->unsorted += a->unsorted;
	sum->stacks_cut += a->stacks_cut;
	sum->lost += a->lost;
	sum->types += a->types;
	sum->types_bare += a->types_bare;
	sum->types_renamed += a->types_renamed;
	if (a->read_err && !sum->read_err) {
		sum->read_err = a->read_err;
		memcpy(sum->read_msg, a->read_msg, sizeof(sum->read_msg));
	}
}

/*
 * The one implementation under copy and merge: the n sources r[] into w.
 * pids[i] (pids may be NULL) is the pid of every event of source i; with
 * zero_keeps_own, 0 keeps each event's own instead.
 */
static int rt_run(struct nt_reader **r, const uint32_t *pids, size_t n, bool zero_keeps_own,
		  struct nt_writer *w, struct retrace_stats *st, struct retrace_stats *each,
		  struct tool_progress *pg)
{
	struct rt t = { .w = w, .out_format = nt_writer_format(w) };
	const struct nt_reader_info *clock;
	uint32_t header_pid;
	size_t i;
	int err = 0;

	memset(st, 0, sizeof(*st));
	if (!n)
		return 0;
	t.src = calloc(n, sizeof(*t.src));
	t.heap = calloc(n, sizeof(*t.heap));
	if (!t.src || !t.heap) {
		free(t.src);
		free(t.heap);
		return -ENOMEM;
	}
	t.nsrc = n;
	clock = nt_reader_info(r[rt_clock_source(r, n)]);
	header_pid = rt_header_pid(r, pids);
	for (i = 0; i < n; i++) {
		const struct nt_reader_info *in = nt_reader_info(r[i]);
		struct rt_source *s = &t.src[i];
		uint32_t pid = pids ? pids[i] : 0;

		s->r = r[i];
		s->format = in->format;
		s->ptr_size = in->pointer_size == 4 ? 4 : 8;
		s->own_pid = zero_keeps_own && !pid;
		/* an event that names no pid of its own: the stream's, else
		 * the header's (the writer's default) */
		s->pid = !s->own_pid ? pid : rt_pid_of(in->pid) ? rt_pid_of(in->pid) : header_pid;
		rt_clock_init(&s->clock, in, clock);
	}
	/* every source with an event is in the heap, earliest head on top */
	for (i = 0; i < n; i++) {
		size_t at;

		if (!rt_pull(&t.src[i]))
			continue;
		for (at = t.nheap++; at && rt_before(&t, i, t.heap[(at - 1) / 2]); at = (at - 1) / 2)
			t.heap[at] = t.heap[(at - 1) / 2];
		t.heap[at] = i;
	}
	while (t.nheap) {
		struct rt_source *s = &t.src[t.heap[0]];

		if (pg && !(++t.events_seen & 1023)) {
			uint64_t done = 0, total = 0;

			for (i = 0; i < n; i++) {
				uint64_t len;

				done += nt_reader_offset(r[i], &len);
				total += len;
			}
			tool_progress(pg, done, total);
		}
		err = rt_event(&t, s, &s->head, s->head_ts);
		if (err)
			break;
		if (!rt_pull(s))
			t.heap[0] = t.heap[--t.nheap];
		rt_heap_down(&t, 0);
	}
	for (i = 0; i < n; i++)
		t.src[i].st.lost = nt_reader_lost(t.src[i].r);
	if (!err)
		err = rt_settle(&t);
	for (i = 0; i < n; i++) {
		struct rt_source *s = &t.src[i];

		s->st.processes = rt_count_pids(&t, s);
		rt_sum(&s->st, st);
		if (each)
			each[i] = s->st;
		hmap_free(&s->metas);
		hmap_free(&s->threads);
		free(s->thr);
	}
	st->max_ts = t.max_ts;
	st->processes = rt_count_pids(&t, NULL);
	hmap_free(&t.outs);
	free(t.out);
	free(t.ips);
	free(t.src);
	free(t.heap);
	return err ? err : st->read_err;
}

int retrace_copy_stats(struct nt_reader *r, struct nt_writer *w, uint32_t pid,
		       struct retrace_stats *st)
{
	return rt_run(&r, &pid, 1, false, w, st, NULL, NULL);
}

int retrace_copy(struct nt_reader *r, struct nt_writer *w, uint32_t pid, uint64_t *events)
{
	struct retrace_stats st;
	int err = retrace_copy_stats(r, w, pid, &st);

	if (events)
		*events = st.events;
	return err;
}

int retrace_merge_each(struct nt_reader **r, const uint32_t *pids, size_t n,
		       struct nt_writer *w, struct retrace_stats *st, struct retrace_stats *each)
{
	return rt_run(r, pids, n, true, w, st, each, NULL);
}

int retrace_merge(struct nt_reader **r, const uint32_t *pids, size_t n, struct nt_writer *w,
		  struct retrace_stats *st)
{
	return rt_run(r, pids, n, true, w, st, NULL, NULL);
}

/* ---- whole streams ---------------------------------------------------------- */

/* Bytes of the FastSerialization object header at pos (type name in
 * name[39]), or 0 when there is none whole. */
static size_t rt_object_header(const uint8_t *b, size_t len, size_t pos, char name[39])
{
	uint32_t n;

	if (len - pos < 15 || b[pos] != 0x05 || b[pos + 1] != 0x05 || b[pos + 2] != 0x01)
		return 0;
	n = le32_get(b + pos + 11);
	if (n > 38 || len - pos - 15 < (size_t)n + 1 || b[pos + 15 + n] != 0x06)
		return 0;
	memcpy(name, b + pos + 15, n);
	name[n] = 0;
	return 15 + (size_t)n + 1;
}

void retrace_extent(const void *p, size_t len, struct retrace_extent *x)
{
	const uint8_t *b = p;
	char name[39];
	size_t pos, n;

	memset(x, 0, sizeof(*x));
	x->len = len;
	if (len < 12 || memcmp(b, "Nettrace", 8))
		return;
	if (le32_get(b + 8) == 0) {
		uint32_t h;

		/* V6: magic, 0, major, minor, then blocks of (u32 size |
		 * kind << 24) and content, the first the trace block */
		if (len < 24 || le32_get(b + 12) != 6)
			return;
		h = le32_get(b + 20);
		if (h >> 24 != 1 || (h & 0xffffff) > len - 24)
			return;
		x->format = NT_FORMAT_V6;
		x->whole = pos = 24 + (h & 0xffffff);
		while (len - pos >= 4) {
			h = le32_get(b + pos);
			if ((h & 0xffffff) > len - pos - 4)
				break;
			x->whole = pos += 4 + (h & 0xffffff);
			if (h >> 24 == 0) {
				x->ended = true;
				break;
			}
		}
		return;
	}
	/* V5: magic, "!FastSerialization.1", the Trace object (version 4: a
	 * 48-byte payload), then objects of (header, i32 size, padding to 4,
	 * content, EndObject 0x06) until NullReference 0x01 */
	if (le32_get(b + 8) != 20 || len < 32 || memcmp(b + 12, "!FastSerialization.1", 20))
		return;
	n = rt_object_header(b, len, 32, name);
	if (!n || strcmp(name, "Trace"))
		return;
	pos = 32 + n;
	if (len - pos < 49 || b[pos + 48] != 0x06)
		return;
	x->format = NT_FORMAT_V5;
	x->whole = pos += 49;
	while (pos < len) {
		size_t q, pad;
		int32_t size;

		if (b[pos] == 0x01) {
			x->ended = true;
			x->whole = pos + 1;
			break;
		}
		n = rt_object_header(b, len, pos, name);
		if (!n || len - pos - n < 4)
			break;
		q = pos + n;
		size = (int32_t)le32_get(b + q);
		q += 4;
		pad = (4 - (q & 3)) & 3;
		if (size < 0 || len - q < pad + (size_t)size + 1)
			break;
		q += pad + (size_t)size;
		if (b[q] != 0x06)
			break;
		x->whole = pos = q + 1;
	}
}

int retrace_repair_file(const char *path, struct retrace_extent *x)
{
	static const uint8_t end_v5 = 0x01, end_v6[4];
	struct stat sb;
	void *map;
	int fd, err = 0;

	memset(x, 0, sizeof(*x));
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &sb) < 0) {
		err = -errno;
		goto out;
	}
	if (sb.st_size <= 0) {
		err = -ENODATA;
		goto out;
	}
	map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED) {
		err = -errno;
		goto out;
	}
	retrace_extent(map, (size_t)sb.st_size, x);
	munmap(map, (size_t)sb.st_size);
	if (!x->format) {
		err = -ENODATA;
		goto out;
	}
	if (x->ended)
		goto out;
	if (ftruncate(fd, (off_t)x->whole) < 0 ||
	    pwrite(fd, x->format == NT_FORMAT_V6 ? (const void *)end_v6 : &end_v5,
		   x->format == NT_FORMAT_V6 ? sizeof(end_v6) : 1, (off_t)x->whole) < 0)
		err = -errno;
out:
	close(fd);
	return err;
}

/* "<dir>/.<base>.tmp" for out "<dir>/<base>" */
static int rt_tmp_name(const char *out, char *buf, size_t len)
{
	const char *slash = strrchr(out, '/');
	int n;

	if (slash)
		n = snprintf(buf, len, "%.*s/.%s.tmp", (int)(slash - out), out, slash + 1);
	else
		n = snprintf(buf, len, ".%s.tmp", out);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* Appends a sentence to note, after "; " when it holds one already. */
static void rt_note_add(char *note, size_t notelen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void rt_note_add(char *note, size_t notelen, const char *fmt, ...)
{
	size_t used = strlen(note);
	va_list ap;

	if (used && used + 2 < notelen) {
		memcpy(note + used, "; ", 3);
		used += 2;
	}
	if (used + 1 >= notelen)
		return;
	va_start(ap, fmt);
	vsnprintf(note + used, notelen - used, fmt, ap);
	va_end(ap);
}

/* What the framing walk found, when the stream did not end as it should. */
static void rt_note_extent(char *note, size_t notelen, const struct retrace_extent *x)
{
	if (!x->ended && x->whole < x->len)
		rt_note_add(note, notelen, "the stream was cut short after %" PRIu64 " bytes: the "
			    "last %" PRIu64 " (part of a block) were dropped, the whole blocks kept",
			    x->len, x->len - x->whole);
	else if (!x->ended)
		rt_note_add(note, notelen, "the stream ended without its end-of-stream mark, "
			    "after %" PRIu64 " bytes of whole blocks: all kept", x->len);
}

static void rt_note_read_err(char *note, size_t notelen, const struct retrace_stats *st)
{
	if (st->read_err)
		rt_note_add(note, notelen, "reading stopped early (the events before it are "
			    "kept): %s", st->read_msg);
}

static void rt_note_no_header(char *note, size_t notelen, const struct retrace_extent *x)
{
	rt_note_add(note, notelen, "the stream ended after %" PRIu64 " bytes, before the end of "
		    "its trace header: nothing to keep", x->len);
}

/* Writes the events of a trace into w (fills *st); 0, or -errno. */
typedef int (*rt_fill_fn)(void *ctx, struct nt_writer *w, struct retrace_stats *st);

/*
 * Writes file out with a writer of options o that fill() feeds, through a
 * hidden temporary file renamed into place once complete. A reader error
 * that fill() returns (st->read_err) is not a failure: the events before
 * it are the trace. 0, or -errno with note saying why, and no out.
 */
static int rt_write_out(const char *out, const struct nt_writer_opts *o, rt_fill_fn fill,
			void *ctx, const char *what, struct retrace_stats *st, char *note,
			size_t notelen)
{
	struct nt_writer *w = NULL;
	struct nt_fd_sink sink;
	char tmp[4096];
	int fd, err;

	err = rt_tmp_name(out, tmp, sizeof(tmp));
	if (err) {
		snprintf(note, notelen, "%s: the name is too long", out);
		return err;
	}
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		err = -errno;
		snprintf(note, notelen, "%s: %s", tmp, strerror(errno));
		return err;
	}
	nt_fd_sink_init(&sink, fd);
	w = nt_writer_new(&sink.base, o);
	if (!w) {
		err = -errno;
		snprintf(note, notelen, "cannot start the %s: %s", what, strerror(errno));
		goto fail;
	}
	err = fill(ctx, w, st);
	if (err && err == st->read_err)
		err = 0;
	if (!err)
		err = nt_writer_finish(w, st->max_ts);
	if (err) {
		snprintf(note, notelen, "%s: writing the %s: %s", tmp, what, strerror(-err));
		goto fail;
	}
	if (fsync(fd) < 0)
		err = -errno;
	if (close(fd) < 0 && !err)
		err = -errno;
	fd = -1;
	if (err) {
		snprintf(note, notelen, "%s: %s", tmp, strerror(-err));
		goto fail;
	}
	if (rename(tmp, out) < 0) {
		err = -errno;
		snprintf(note, notelen, "%s: %s", out, strerror(errno));
		goto fail;
	}
	nt_writer_free(w);
	return 0;
fail:
	if (fd >= 0)
		close(fd);
	unlink(tmp);
	nt_writer_free(w);
	return err;
}

/* ---- one file ---------------------------------------------------------------- */

struct rt_copy_job {
	struct nt_reader *r;
	uint32_t pid;
};

static int rt_fill_copy(void *ctx, struct nt_writer *w, struct retrace_stats *st)
{
	struct rt_copy_job *job = ctx;

	return retrace_copy_stats(job->r, w, job->pid, st);
}

int retrace_file(const char *in, const char *out, uint32_t pid, int format,
		 struct retrace_stats *st, char *note, size_t notelen)
{
	struct rt_copy_job job = { .pid = pid };
	struct nt_writer_opts o;
	struct retrace_extent x;
	char spare[1];
	int err;

	memset(st, 0, sizeof(*st));
	if (!note || !notelen) {
		note = spare;
		notelen = sizeof(spare);
	}
	note[0] = 0;
	err = retrace_repair_file(in, &x);
	if (err == -ENODATA) {
		rt_note_no_header(note, notelen, &x);
		return err;
	}
	if (err) {
		snprintf(note, notelen, "%s: %s", in, strerror(-err));
		return err;
	}
	job.r = nt_reader_open(in);
	if (!job.r) {
		err = -errno;
		snprintf(note, notelen, "%s: %s", in, strerror(errno));
		return err;
	}
	if (nt_reader_errmsg(job.r)) {
		/* the header parsed into garbage: no clock to write a copy with */
		snprintf(note, notelen, "%s: the trace header does not read: %s", in,
			 nt_reader_errmsg(job.r));
		nt_reader_free(job.r);
		return -EBADMSG;
	}
	retrace_writer_opts(job.r, format, pid, &o);
	err = rt_write_out(out, &o, rt_fill_copy, &job, "copy", st, note, notelen);
	nt_reader_free(job.r);
	if (err)
		return err;
	rt_note_extent(note, notelen, &x);
	rt_note_read_err(note, notelen, st);
	return 0;
}

/* ---- many files ---------------------------------------------------------------- */

/*
 * An input of a merge: its file mapped privately, with room after its end
 * for an end-of-stream mark, so that a stream cut short reads as
 * retrace_repair_file() would leave it while the file stays as it is.
 */
struct rt_input {
	uint8_t *map;
	size_t maplen;
	struct retrace_extent x;
};

/* The mark after the whole blocks; the mapping keeps 4 bytes for it */
#define RT_END_MARK_MAX 4u

static void rt_input_close(struct rt_input *in)
{
	if (in->map)
		munmap(in->map, in->maplen);
	in->map = NULL;
}

/*
 * Maps path and walks its framing. 0 with the bytes a reader may read in
 * *len; -errno, or -ENODATA (not a nettrace stream, or not even its whole
 * header), with note saying "path: why".
 */
static int rt_input_open(struct rt_input *in, const char *path, size_t *len, char *note,
			 size_t notelen)
{
	struct stat sb;
	void *at;
	size_t n;
	int fd, err = 0;

	memset(in, 0, sizeof(*in));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &sb) < 0) {
		err = -errno;
		goto fail;
	}
	if (S_ISDIR(sb.st_mode)) {
		err = -EISDIR;
		goto fail;
	}
	if (!S_ISREG(sb.st_mode) || sb.st_size <= 0) {
		snprintf(note, notelen, "%s: %s", path, S_ISREG(sb.st_mode) ? "the file is empty" :
			 "not a regular file");
		close(fd);
		return -ENODATA;
	}
	n = (size_t)sb.st_size;
	/* anonymous zeros first, then the file over their start: the bytes
	 * past its end are there to write whatever its length */
	in->maplen = n + RT_END_MARK_MAX;
	in->map = mmap(NULL, in->maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);
	if (in->map == MAP_FAILED) {
		in->map = NULL;
		err = -errno;
		goto fail;
	}
	at = mmap(in->map, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, fd, 0);
	if (at == MAP_FAILED) {
		err = -errno;
		goto fail;
	}
	close(fd);
	fd = -1;
	retrace_extent(in->map, n, &in->x);
	if (!in->x.format) {
		if (n >= 8 && memcmp(in->map, "Nettrace", 8)) {
			snprintf(note, notelen, "%s: not a nettrace file (it does not begin with "
				 "\"Nettrace\")", path);
		} else {
			snprintf(note, notelen, "%s: ", path);
			rt_note_no_header(note + strlen(note), notelen - strlen(note), &in->x);
		}
		rt_input_close(in);
		return -ENODATA;
	}
	*len = n;
	if (!in->x.ended) {
		/* what retrace_repair_file() writes into the file, here into
		 * the private copy of its pages only */
		if (in->x.format == NT_FORMAT_V6) {
			memset(in->map + in->x.whole, 0, 4);
			*len = in->x.whole + 4;
		} else {
			in->map[in->x.whole] = 0x01;
			*len = in->x.whole + 1;
		}
	}
	return 0;
fail:
	snprintf(note, notelen, "%s: %s", path, strerror(-err));
	if (fd >= 0)
		close(fd);
	rt_input_close(in);
	return err;
}

struct rt_merge_job {
	struct nt_reader **r;
	size_t n;
	struct retrace_stats *each;
	struct tool_progress *pg;
};

static int rt_fill_merge(void *ctx, struct nt_writer *w, struct retrace_stats *st)
{
	struct rt_merge_job *job = ctx;

	return rt_run(job->r, NULL, job->n, true, w, st, job->each, job->pg);
}

/* Adds input path's line to the merge's note, when it has something to say. */
static void rt_note_input(char *note, size_t notelen, const char *path,
			  const struct rt_input *in, const struct retrace_stats *st)
{
	char line[1024] = "";
	size_t used;

	rt_note_extent(line, sizeof(line), &in->x);
	rt_note_read_err(line, sizeof(line), st);
	if (!line[0])
		return;
	used = strlen(note);
	if (used + 1 >= notelen)
		return;
	snprintf(note + used, notelen - used, "%s%s: %s", used ? "\n" : "", path, line);
}

int retrace_merge_files(const char *const *in, size_t n, const char *out,
			struct retrace_stats *st, char *note, size_t notelen,
			struct tool_progress *pg)
{
	struct rt_merge_job job = { .n = n, .pg = pg };
	struct rt_input *inputs;
	struct nt_writer_opts o;
	char spare[1];
	size_t i, opened = 0;
	int err = 0;

	memset(st, 0, sizeof(*st));
	if (!note || !notelen) {
		note = spare;
		notelen = sizeof(spare);
	}
	note[0] = 0;
	if (!n) {
		snprintf(note, notelen, "no input to merge");
		return -EINVAL;
	}
	inputs = calloc(n, sizeof(*inputs));
	job.r = calloc(n, sizeof(*job.r));
	job.each = calloc(n, sizeof(*job.each));
	if (!inputs || !job.r || !job.each) {
		snprintf(note, notelen, "%s", strerror(ENOMEM));
		err = -ENOMEM;
		goto out;
	}
	for (opened = 0; opened < n; opened++) {
		size_t len = 0;

		err = rt_input_open(&inputs[opened], in[opened], &len, note, notelen);
		if (err)
			goto out;
		job.r[opened] = nt_reader_new_mem(inputs[opened].map, len);
		if (!job.r[opened]) {
			err = -errno;
			snprintf(note, notelen, "%s: %s", in[opened], strerror(errno));
			rt_input_close(&inputs[opened]);
			goto out;
		}
		if (nt_reader_errmsg(job.r[opened])) {
			/* the header parsed into garbage: no clock to map */
			snprintf(note, notelen, "%s: the trace header does not read: %s",
				 in[opened], nt_reader_errmsg(job.r[opened]));
			err = -EBADMSG;
			opened++;
			goto out;
		}
	}
	retrace_merge_writer_opts(job.r, NULL, n, &o);
	err = rt_write_out(out, &o, rt_fill_merge, &job, "merge", st, note, notelen);
	if (!err)
		for (i = 0; i < n; i++)
			rt_note_input(note, notelen, in[i], &inputs[i], &job.each[i]);
out:
	for (i = 0; i < opened; i++) {
		nt_reader_free(job.r[i]);
		rt_input_close(&inputs[i]);
	}
	free(inputs);
	free(job.r);
	free(job.each);
	return err;
}
