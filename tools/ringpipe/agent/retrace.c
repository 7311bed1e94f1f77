// SPDX-License-Identifier: MIT
/*
 * Retrace (see retrace.h): every event of a nettrace stream written again,
 * under another pid and in another framing.
 *
 * Sequence numbers and EventsLost. The reader counts EventsLost from gaps
 * in each capture thread's numbers when it parses a block, with the
 * reference reader's rules and quirks (a new V5 thread counts nothing
 * before its first event, a V6 thread starts at 0, sequence points report
 * drops after a thread's last event). The copy is renumbered: each capture
 * thread counts from the writer's seq_base, advancing by one per event plus
 * the gap the source showed before it, so the copy shows the same gaps in
 * the same places. The gaps are taken from the source's numbers, bounded by
 * what the reader has counted so far (it parses ahead of what it hands
 * out), so the copy never counts more than the source; whatever the source
 * counted that no gap explains (sequence points, quirks) is noted on a
 * thread at the end (nt_writer_note_seq()), and the final sequence point
 * reports it. The totals are equal.
 *
 * Ordering. Events come in the reader's dispatch order, which is not
 * always in timestamp order across threads (the runtime marks only the
 * first event of each thread's run IsSorted; queued events are released
 * by later sorted ones). The writer's contract is that sorted events come
 * in non-decreasing timestamp order across all threads, so an event is
 * marked sorted only when no event before it is later; the others go
 * unsorted and the reader queues them until a later sorted event. A
 * reader checks an unsorted event's number against the capture thread of
 * the block's last sorted event (TraceEvent's EventCache does), so an
 * unsorted event of another capture thread starts a new block, where the
 * first event sets the thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hmap.h"
#include "retrace.h"

/* The writer's default seq_base: a capture thread's number before its
 * first event (retrace_writer_opts() leaves it) */
#define RT_SEQ_BASE 1u
/* Events between the copy's sequence points: stack and label tables are
 * interned per region, in the writer and in every reader */
#define RT_SP_EVERY 100000u
/* The writer's largest stack (its rows are u16-sized) */
#define RT_MAX_STACK_BYTES 65527u
/* Lost events noted at once: a reader takes a negative difference for a
 * wrap, so one report stays well under 2^31 */
#define RT_LOST_STEP 0x40000000ull

struct rt_src {			/* a capture thread of the source */
	uint32_t last_seq;
	uint32_t out;		/* index into rt.out */
};

struct rt_out {			/* a capture thread of the copy */
	uint64_t tid;
	uint32_t raw;		/* last number handed to the writer */
	bool noted;		/* raw moved on without an event written */
};

struct rt {
	struct nt_reader *r;
	struct nt_writer *w;
	struct retrace_stats *st;
	uint32_t pid;
	int src_format, out_format;
	uint32_t ptr_size;
	struct hmap metas;	/* source nt_meta address -> copy's id, 0: not definable */
	struct hmap srcs;	/* source capture thread -> index into src */
	struct rt_src *src;
	size_t nsrc, capsrc;
	struct hmap outs;	/* copy's capture thread id -> index into out */
	struct rt_out *out;
	size_t nout, capout;
	uint64_t *ips;
	size_t capips;
	int64_t counted;	/* EventsLost the copy's gaps show so far */
	uint64_t last_cap;	/* capture thread of the last event written */
	bool any;		/* an event was written */
	uint32_t since_sp;
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
static int rt_define(struct rt *t, const struct nt_meta *m, uint32_t *id)
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
		t->st->types_renamed++;
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
	t->st->types++;
	t->st->types_bare += bare && m->has_fields;
	return 0;
}

/* ---- threads --------------------------------------------------------------- */

static int rt_out_get(struct rt *t, uint64_t tid, uint32_t *idx)
{
	uint64_t v;

	if (hmap_get(&t->outs, tid, &v)) {
		*idx = (uint32_t)v;
		return 0;
	}
	if (array_grow((void **)&t->out, &t->capout, t->nout, sizeof(*t->out), 16) ||
	    hmap_put(&t->outs, tid, t->nout))
		return -ENOMEM;
	t->out[t->nout] = (struct rt_out){ .tid = tid, .raw = RT_SEQ_BASE };
	*idx = (uint32_t)t->nout++;
	return 0;
}

/*
 * The copy's capture thread for rec and the gap (events lost just before
 * it) the source shows there, before bounding.
 */
static int rt_thread(struct rt *t, const struct nt_rec *rec, struct rt_out **o, uint32_t *gap)
{
	uint64_t v;
	uint32_t oi;
	int err;

	if (hmap_get(&t->srcs, rec->capture_thread, &v)) {
		struct rt_src *s = &t->src[v];
		int32_t d = (int32_t)(rec->seq - s->last_seq);

		/* d <= 0: a thread id reused by a new thread that numbers
		 * afresh; what the reader makes of it shows in its total */
		*gap = d > 1 ? (uint32_t)d - 1 : 0;
		s->last_seq = rec->seq;
		*o = &t->out[s->out];
		return 0;
	}
	/*
	 * V5 names the capture thread by its OS id. V6 by an index whose OS
	 * id the reader does not hand out: the event's own thread stands in
	 * (a capture thread writes its own events, but for the rare event
	 * written on another's behalf).
	 */
	err = rt_out_get(t, t->src_format == NT_FORMAT_V6 ? (uint64_t)(uint32_t)rec->tid :
			 rec->capture_thread, &oi);
	if (err || array_grow((void **)&t->src, &t->capsrc, t->nsrc, sizeof(*t->src), 16) ||
	    hmap_put(&t->srcs, rec->capture_thread, t->nsrc))
		return -ENOMEM;
	t->src[t->nsrc++] = (struct rt_src){ .last_seq = rec->seq, .out = oi };
	/* a V6 thread is declared at 0: numbers before its first are lost;
	 * a new V5 thread counts nothing before its first */
	*gap = t->src_format == NT_FORMAT_V6 && rec->seq > 1 ? rec->seq - 1 : 0;
	*o = &t->out[oi];
	return 0;
}

/* ---- events ---------------------------------------------------------------- */

static bool rt_zero16(const uint8_t *p)
{
	static const uint8_t z[16];

	return !memcmp(p, z, 16);
}

static int rt_event(struct rt *t, const struct nt_rec *rec)
{
	struct retrace_stats *st = t->st;
	struct nt_event ev = { 0 };
	struct rt_out *o;
	uint32_t gap, n = 0, i;
	int64_t budget;
	uint64_t v;
	int err;

	if (!hmap_get(&t->metas, (uint64_t)(uintptr_t)rec->meta, &v)) {
		uint32_t id;

		err = rt_define(t, rec->meta, &id);
		if (err)
			return err;
		if (hmap_put(&t->metas, (uint64_t)(uintptr_t)rec->meta, id))
			return -ENOMEM;
		v = id;
	}
	err = rt_thread(t, rec, &o, &gap);
	if (err)
		return err;
	budget = nt_reader_lost(t->r) - t->counted;
	if (budget < 0)
		budget = 0;
	if ((int64_t)gap > budget)
		gap = (uint32_t)budget;
	t->counted += gap;
	o->raw += 1 + gap;

	ev.meta_id = (uint32_t)v;
	ev.seq = o->raw;
	ev.pid = t->pid;
	ev.tid = (uint64_t)(uint32_t)rec->tid;
	ev.capture_tid = o->tid;
	ev.cpu = rec->cpu;
	ev.ts = rec->ts;
	ev.activity = rt_zero16(rec->activity) ? NULL : rec->activity;
	ev.related = rt_zero16(rec->related) ? NULL : rec->related;
	ev.payload = rec->payload;
	ev.payload_len = rec->payload_len;
	if (!ev.meta_id || rec->payload_len > UINT16_MAX)
		goto skip;
	if (rec->stack_bytes >= t->ptr_size) {
		n = rec->stack_bytes / t->ptr_size;
		if ((uint64_t)n * t->ptr_size > RT_MAX_STACK_BYTES) {
			/* the innermost frames come first: keep those */
			n = RT_MAX_STACK_BYTES / t->ptr_size;
			st->stacks_cut++;
		}
		if (n && array_grow((void **)&t->ips, &t->capips, n - 1, sizeof(*t->ips), 16))
			return -ENOMEM;
		for (i = 0; i < n; i++) {
			const uint8_t *ip = rec->stack + (size_t)i * t->ptr_size;

			t->ips[i] = t->ptr_size == 8 ? le64_get(ip) : le32_get(ip);
		}
		ev.stack = t->ips;
		ev.stack_depth = n;
	}
	ev.sorted = !t->any || rec->ts >= st->max_ts;
	if (!ev.sorted) {
		st->unsorted++;
		if (o->tid != t->last_cap) {
			err = nt_writer_flush(t->w);
			if (err)
				return err;
		}
	}
	err = nt_writer_event(t->w, &ev);
	if (err) {
		/* refused before the writer took its number (payload or
		 * thread id out of its range): leave it out, counted */
		if (!nt_writer_error(t->w) && (err == -EINVAL || err == -E2BIG || err == -EXDEV))
			goto skip;
		return err;
	}
	st->events++;
	if (!t->any || rec->ts > st->max_ts)
		st->max_ts = rec->ts;
	t->any = true;
	t->last_cap = o->tid;
	o->noted = false;
	if (++t->since_sp >= RT_SP_EVERY) {
		t->since_sp = 0;
		return nt_writer_sequence_point(t->w, st->max_ts);
	}
	return 0;
skip:
	/* its number is used: the thread's next event, or the note at the
	 * end, shows it as lost */
	st->skipped++;
	o->noted = true;
	return 0;
}

/* The losses no event showed: after each thread's last event, and what the
 * source's reader counted beyond the gaps. */
static int rt_settle(struct rt *t)
{
	struct retrace_stats *st = t->st;
	int64_t rest = st->lost - t->counted;
	size_t i;
	int err;

	for (i = 0; i < t->nout; i++) {
		if (!t->out[i].noted)
			continue;
		err = nt_writer_note_seq(t->w, t->pid, t->out[i].tid, t->out[i].raw);
		if (err)
			return err;
	}
	if (rest > 0) {
		uint32_t oi;

		/* on the thread written last, or a thread 0 of a copy with no
		 * event at all */
		err = rt_out_get(t, t->any ? t->last_cap : 0, &oi);
		if (err)
			return err;
		while (rest > 0) {
			uint64_t step = (uint64_t)rest < RT_LOST_STEP ? (uint64_t)rest :
					RT_LOST_STEP;

			t->out[oi].raw += (uint32_t)step;
			err = nt_writer_note_seq(t->w, t->pid, t->out[oi].tid, t->out[oi].raw);
			rest -= (int64_t)step;
			/* one report per sequence point: the last comes with
			 * the caller's nt_writer_finish() */
			if (!err && rest > 0)
				err = nt_writer_sequence_point(t->w, st->max_ts);
			if (err)
				return err;
		}
	}
	return 0;
}

int retrace_copy_stats(struct nt_reader *r, struct nt_writer *w, uint32_t pid,
		       struct retrace_stats *st)
{
	const struct nt_reader_info *in = nt_reader_info(r);
	struct rt t = {
		.r = r, .w = w, .st = st, .pid = pid, .src_format = in->format,
		.out_format = nt_writer_format(w),
		.ptr_size = in->pointer_size == 4 ? 4 : 8,
	};
	struct nt_rec rec;
	int rc, err = 0;

	memset(st, 0, sizeof(*st));
	while ((rc = nt_reader_next(r, &rec)) > 0) {
		err = rt_event(&t, &rec);
		if (err)
			break;
	}
	if (rc < 0) {
		const char *msg = nt_reader_errmsg(r);

		st->read_err = rc;
		snprintf(st->read_msg, sizeof(st->read_msg), "%s", msg ? msg : strerror(-rc));
	}
	st->lost = nt_reader_lost(r);
	if (!err)
		err = rt_settle(&t);
	hmap_free(&t.metas);
	hmap_free(&t.srcs);
	hmap_free(&t.outs);
	free(t.src);
	free(t.out);
	free(t.ips);
	return err ? err : st->read_err;
}

int retrace_copy(struct nt_reader *r, struct nt_writer *w, uint32_t pid, uint64_t *events)
{
	struct retrace_stats st;
	int err = retrace_copy_stats(r, w, pid, &st);

	if (events)
		*events = st.events;
	return err;
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

int retrace_file(const char *in, const char *out, uint32_t pid, int format,
		 struct retrace_stats *st, char *note, size_t notelen)
{
	struct nt_writer_opts o;
	struct nt_writer *w = NULL;
	struct nt_reader *r = NULL;
	struct retrace_extent x;
	struct nt_fd_sink sink;
	char tmp[4096], spare[1];
	bool made = false;
	int fd = -1, err;

	memset(st, 0, sizeof(*st));
	if (!note || !notelen) {
		note = spare;
		notelen = sizeof(spare);
	}
	note[0] = 0;
	err = retrace_repair_file(in, &x);
	if (err == -ENODATA) {
		snprintf(note, notelen, "the stream ended after %" PRIu64 " bytes, before the end "
			 "of its trace header: nothing to keep", x.len);
		return err;
	}
	if (err) {
		snprintf(note, notelen, "%s: %s", in, strerror(-err));
		return err;
	}
	r = nt_reader_open(in);
	if (!r) {
		err = -errno;
		snprintf(note, notelen, "%s: %s", in, strerror(errno));
		return err;
	}
	if (nt_reader_errmsg(r)) {
		/* the header parsed into garbage: no clock to write a copy with */
		snprintf(note, notelen, "%s: the trace header does not read: %s", in,
			 nt_reader_errmsg(r));
		nt_reader_free(r);
		return -EBADMSG;
	}
	err = rt_tmp_name(out, tmp, sizeof(tmp));
	if (err) {
		snprintf(note, notelen, "%s: the name is too long", out);
		goto fail;
	}
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		err = -errno;
		snprintf(note, notelen, "%s: %s", tmp, strerror(errno));
		goto fail;
	}
	made = true;
	nt_fd_sink_init(&sink, fd);
	retrace_writer_opts(r, format, pid, &o);
	w = nt_writer_new(&sink.base, &o);
	if (!w) {
		err = -errno;
		snprintf(note, notelen, "cannot start the copy: %s", strerror(errno));
		goto fail;
	}
	err = retrace_copy_stats(r, w, pid, st);
	if (err && err == st->read_err)
		err = 0;	/* a corrupt stretch: the events before it are the trace */
	if (!err)
		err = nt_writer_finish(w, st->max_ts);
	if (err) {
		snprintf(note, notelen, "%s: writing the copy: %s", tmp, strerror(-err));
		goto fail;
	}
	if (fsync(fd) < 0 || close(fd) < 0) {
		err = -errno;
		fd = -1;
		snprintf(note, notelen, "%s: %s", tmp, strerror(-err));
		goto fail;
	}
	fd = -1;
	if (rename(tmp, out) < 0) {
		err = -errno;
		snprintf(note, notelen, "%s: %s", out, strerror(errno));
		goto fail;
	}
	made = false;
	if (!x.ended && x.whole < x.len)
		snprintf(note, notelen, "the stream was cut short after %" PRIu64 " bytes: the "
			 "last %" PRIu64 " (part of a block) were dropped, the whole blocks kept",
			 x.len, x.len - x.whole);
	else if (!x.ended)
		snprintf(note, notelen, "the stream ended without its end-of-stream mark, after "
			 "%" PRIu64 " bytes of whole blocks: all kept", x.len);
	if (st->read_err) {
		size_t used = strlen(note);

		snprintf(note + used, notelen - used, "%sreading stopped early (the events before "
			 "it are kept): %s", used ? "; " : "", st->read_msg);
	}
	nt_writer_free(w);
	nt_reader_free(r);
	return 0;
fail:
	if (fd >= 0)
		close(fd);
	if (made)
		unlink(tmp);
	nt_writer_free(w);
	nt_reader_free(r);
	return err;
}
