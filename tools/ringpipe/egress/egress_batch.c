// SPDX-License-Identifier: MIT
/*
 * Finished trace files into batches of fleet rows (egress_batch.h).
 *
 * Everything a batch holds comes from the file and the process's identity,
 * nothing from the clock or the order files arrive in, so the same file
 * cut again (a restarted agent) gives the same bytes. Events fill batches of
 * batch_rows; the metadata the file defined by a batch's end goes with that
 * batch; the process and container rows go with the first; what the file
 * lost (its threads' sequence gaps, and EventsLost beyond them) goes with
 * the last, once the whole file was read. A stack goes as one row of
 * stacks per (pid, stack) and batch, named by a hash of its frames, so the
 * same stack in many batches and files is one row once the
 * ReplacingMergeTree merged them; its frames are named at the batch's end,
 * with what the file told about the process's modules and methods by then.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "egress/egress_batch.h"
#include "util/hmap.h"
#include "host/identity.h"
#include "nettrace_read.h"
#include "trace/profile.h"
#include "wire/rowbinary.h"
#include "symbols/symbolize.h"
#include "util/utf.h"

#define BATCH_MAGIC "RPEB"
/* 2: stack ids of fleet schema version 2. A batch of 1 that an agent
 * before it left in the spool carries version 1's: egress_batch_upgrade()
 * gives it version 2's before it is sent. */
#define BATCH_VERSION 2
#define MAX_DECODED_FIELDS 32

/* The order a batch's tables are sent in: losses first, the manifest last */
static const enum fleet_table_id send_order[] = {
	FLEET_LOSSES, FLEET_EVENTS, FLEET_EVENT_META, FLEET_STACKS, FLEET_PROCESSES,
	FLEET_CONTAINERS, FLEET_BATCHES,
};

struct batch_rows {
	struct bytebuf body[FLEET_NTABLES];
	uint32_t rows[FLEET_NTABLES];
	uint64_t first_ns, last_ns;
};

static struct fleet_str fstr(const char *s)
{
	return (struct fleet_str){ s ? s : "", s ? strlen(s) : 0 };
}

bool egress_table_counted(enum fleet_table_id t)
{
	return t == FLEET_EVENTS || t == FLEET_LOSSES;
}

static void rows_reset(struct batch_rows *b)
{
	size_t i;

	for (i = 0; i < FLEET_NTABLES; i++) {
		b->body[i].len = 0;
		b->body[i].oom = 0;
		b->rows[i] = 0;
	}
	b->first_ns = b->last_ns = 0;
}

static void rows_free(struct batch_rows *b)
{
	size_t i;

	for (i = 0; i < FLEET_NTABLES; i++)
		bb_free(&b->body[i]);
}

static void rows_add(struct batch_rows *b, const struct egress_name *n, enum fleet_table_id t,
		     const union fleet_value *row)
{
	fleet_row_encode(&b->body[t], n->dialect, &fleet_tables[t], row);
	b->rows[t]++;
}

static void rows_time(struct batch_rows *b, uint64_t ns)
{
	if (!b->first_ns || ns < b->first_ns)
		b->first_ns = ns;
	if (ns > b->last_ns)
		b->last_ns = ns;
}

static void manifest_row(struct batch_rows *b, const struct egress_name *n, uint32_t stream,
			 uint64_t seq)
{
	union fleet_value row[FB_NCOLS];
	uint64_t bytes = 0;
	size_t i;

	memset(row, 0, sizeof(row));
	for (i = 0; i < FLEET_NTABLES; i++)
		bytes += b->body[i].len;
	row[FB_HOST].s = fstr(n->host);
	memcpy(row[FB_BOOT_ID].uuid, n->boot_id, 16);
	memcpy(row[FB_AGENT_RUN].uuid, n->agent_run, 16);
	row[FB_STREAM].u = stream;
	row[FB_SEQ].u = seq;
	row[FB_EVENTS_ROWS].u = b->rows[FLEET_EVENTS];
	row[FB_EVENT_META_ROWS].u = b->rows[FLEET_EVENT_META];
	row[FB_STACKS_ROWS].u = b->rows[FLEET_STACKS];
	row[FB_PROCESSES_ROWS].u = b->rows[FLEET_PROCESSES];
	row[FB_CONTAINERS_ROWS].u = b->rows[FLEET_CONTAINERS];
	row[FB_LOSSES_ROWS].u = b->rows[FLEET_LOSSES];
	row[FB_FIRST_TIME].u = b->first_ns;
	row[FB_LAST_TIME].u = b->last_ns;
	/* from the batch's own events, not the clock: a batch cut again is
	 * the same bytes */
	row[FB_SENT].u = b->last_ns / 1000000000ull;
	row[FB_BYTES].u = bytes;
	rows_add(b, n, FLEET_BATCHES, row);
}

/* The rows, named, in the spool's layout (egress_batch.h) */
static int rows_finish(struct batch_rows *b, const struct egress_name *n, uint32_t stream,
		       uint64_t seq, struct bytebuf *out)
{
	size_t hl = strlen(n->host), i, nsec = 0;

	manifest_row(b, n, stream, seq);
	for (i = 0; i < FLEET_NTABLES; i++) {
		if (b->body[i].oom)
			return -ENOMEM;
		nsec += b->rows[i] > 0;
	}
	out->len = 0;
	bb_append(out, BATCH_MAGIC, 4);
	bb_append_u8(out, BATCH_VERSION);
	bb_append_u8(out, (uint8_t)n->dialect);
	bb_append_u16(out, (uint16_t)hl);
	bb_append(out, n->host, hl);
	bb_append(out, n->agent_run, 16);
	bb_append_u32(out, stream);
	bb_append_u64(out, seq);
	bb_append_u8(out, (uint8_t)nsec);
	for (i = 0; i < sizeof(send_order) / sizeof(send_order[0]); i++) {
		enum fleet_table_id t = send_order[i];

		if (!b->rows[t])
			continue;
		bb_append_u8(out, (uint8_t)t);
		bb_append_u32(out, b->rows[t]);
		bb_append_u64(out, b->body[t].len);
		bb_append(out, b->body[t].p, b->body[t].len);
	}
	return out->oom ? -ENOMEM : 0;
}

struct reader_pos {
	const uint8_t *p, *end;
};

static bool take(struct reader_pos *r, void *dst, size_t n)
{
	if ((size_t)(r->end - r->p) < n)
		return false;
	memcpy(dst, r->p, n);
	r->p += n;
	return true;
}

static int section_parse(struct reader_pos *r, struct egress_section *s)
{
	uint8_t t;
	uint64_t len;

	if (!take(r, &t, 1) || t >= FLEET_NTABLES || !take(r, &s->rows, 4) || !take(r, &len, 8) ||
	    len > (uint64_t)(r->end - r->p))
		return -EBADMSG;
	s->table = (enum fleet_table_id)t;
	s->body = r->p;
	s->len = (size_t)len;
	r->p += len;
	return 0;
}

int egress_batch_parse(const void *p, size_t len, struct egress_batch *b)
{
	struct reader_pos r = { p, (const uint8_t *)p + len };
	uint8_t magic[4], version, nsec;
	uint16_t hl;
	size_t i;

	memset(b, 0, sizeof(*b));
	if (!take(&r, magic, 4) || memcmp(magic, BATCH_MAGIC, 4) || !take(&r, &version, 1) ||
	    !version || version > BATCH_VERSION || !take(&r, &b->dialect, 1) ||
	    !take(&r, &hl, 2) || hl >= sizeof(b->host) || !take(&r, b->host, hl) ||
	    !take(&r, b->agent_run, 16) || !take(&r, &b->stream, 4) || !take(&r, &b->seq, 8) ||
	    !take(&r, &nsec, 1) || nsec > FLEET_NTABLES)
		return -EBADMSG;
	for (i = 0; i < nsec; i++)
		if (section_parse(&r, &b->sections[i]))
			return -EBADMSG;
	b->nsections = nsec;
	b->stack_ids = version == 1 ? 1 : FLEET_SCHEMA_VERSION;
	/* the manifest is last, and only there: a batch without it could
	 * never be acknowledged */
	if (!nsec || b->sections[nsec - 1].table != FLEET_BATCHES || r.p != r.end)
		return -EBADMSG;
	return 0;
}

/* The section of table t in b, or NULL */
static const struct egress_section *section_of(const struct egress_batch *b,
					       enum fleet_table_id t)
{
	size_t i;

	for (i = 0; i < b->nsections; i++)
		if (b->sections[i].table == t)
			return &b->sections[i];
	return NULL;
}

/*
 * Each stacks row in body under its version-2 id, the old ids into map
 * (old -> new). The rows are rewritten in place: an id is 8 bytes in
 * either version, so the batch keeps its length and its manifest row.
 */
static int upgrade_stacks(uint8_t *body, size_t len, enum fleet_dialect d, struct hmap *map)
{
	const struct fleet_table *t = &fleet_tables[FLEET_STACKS];
	/* the frames the agent puts in a row: those of one prof_stack */
	uint64_t frames[sizeof(((struct prof_stack *)0)->ips) / sizeof(uint64_t)];
	uint64_t old_id, new_id, n, i;
	const uint8_t *end = body + len;
	size_t at[FS_NCOLS], row;
	uint8_t *p;

	for (p = body; p < end; p += row) {
		struct rb_cursor c;

		row = fleet_row_measure(p, end, d, t, at);
		if (!row)
			return -EBADMSG;
		c = (struct rb_cursor){ p + at[FS_FRAMES], end, false };
		n = rb_get_count(&c);
		if (n > sizeof(frames) / sizeof(frames[0]))
			continue;	/* not one the agent made: left as it is */
		for (i = 0; i < n; i++)
			frames[i] = rb_get_fixed(&c, 8);
		memcpy(&old_id, p + at[FS_STACK_ID], 8);
		if (fleet_stack_id_upgrade(old_id, frames, (uint32_t)n, &new_id))
			continue;
		memcpy(p + at[FS_STACK_ID], &new_id, 8);
		if (hmap_put(map, old_id, new_id))
			return -ENOMEM;
	}
	return 0;
}

static int upgrade_events(uint8_t *body, size_t len, enum fleet_dialect d,
			  const struct hmap *map)
{
	const struct fleet_table *t = &fleet_tables[FLEET_EVENTS];
	const uint8_t *end = body + len;
	uint64_t id, new_id;
	size_t at[FE_NCOLS], row;
	uint8_t *p;

	for (p = body; p < end; p += row) {
		row = fleet_row_measure(p, end, d, t, at);
		if (!row)
			return -EBADMSG;
		memcpy(&id, p + at[FE_STACK_ID], 8);
		if (id && hmap_get(map, id, &new_id))
			memcpy(p + at[FE_STACK_ID], &new_id, 8);
	}
	return 0;
}

int egress_batch_upgrade(struct egress_batch *b)
{
	const struct egress_section *stacks = section_of(b, FLEET_STACKS);
	const struct egress_section *events = section_of(b, FLEET_EVENTS);
	enum fleet_dialect d = (enum fleet_dialect)b->dialect;
	struct hmap map = { 0 };
	int rc = 0;

	if (b->stack_ids == FLEET_SCHEMA_VERSION)
		return 0;
	/* the sections point into the caller's copy of the batch
	 * (spool_next()'s), which is written here */
	if (stacks)
		rc = upgrade_stacks((uint8_t *)stacks->body, stacks->len, d, &map);
	if (!rc && events && map.count)
		rc = upgrade_events((uint8_t *)events->body, events->len, d, &map);
	hmap_free(&map);
	if (!rc)
		b->stack_ids = FLEET_SCHEMA_VERSION;
	return rc;
}

static void loss_row(struct batch_rows *b, const struct egress_name *n, uint32_t stream,
		     uint64_t seq, const struct egress_loss *l)
{
	union fleet_value row[FL_NCOLS];

	memset(row, 0, sizeof(row));
	row[FL_TIME].u = l->time_ns;
	row[FL_HOST].s = fstr(n->host);
	memcpy(row[FL_BOOT_ID].uuid, n->boot_id, 16);
	row[FL_CONTAINER_ID].s = fstr(l->container_id);
	row[FL_PID].u = l->pid;
	row[FL_TID].u = l->tid;
	row[FL_REASON].s = fstr(l->reason);
	row[FL_COUNT].u = l->count;
	memcpy(row[FL_AGENT_RUN].uuid, n->agent_run, 16);
	row[FL_STREAM].u = stream;
	row[FL_BATCH_SEQ].u = seq;
	rows_add(b, n, FLEET_LOSSES, row);
	rows_time(b, l->time_ns);
}

int egress_loss_batch(const struct egress_name *n, uint32_t stream, uint64_t seq,
		      const struct egress_loss *l, size_t nl, struct bytebuf *out)
{
	struct batch_rows b = { 0 };
	size_t i;
	int rc;

	for (i = 0; i < nl; i++)
		loss_row(&b, n, stream, seq, &l[i]);
	rc = rows_finish(&b, n, stream, seq, out);
	rows_free(&b);
	return rc;
}

/* ---- a file's batches ---------------------------------------------------- */

struct source_thread {
	uint64_t capture_thread;
	uint32_t pid, tid;
	uint32_t last_seq;
	uint64_t last_ns;
	uint64_t gaps;		/* events its sequence numbers skipped */
};

/*
 * The symbol table between files: the ELF files and the kernel's symbols it
 * read stay (a file a second, each naming frames of libc and the kernel,
 * would read them again each second), its processes are forgotten at each
 * file's end (a file names them itself: a rotated file of the agent's
 * describes its modules again). One file at a time has it; another one
 * open meanwhile (a second egress) gets a table of its own. Renewed every
 * SYMS_REUSE files, so that an ELF file replaced on disk is read again.
 */
#define SYMS_REUSE 256

static pthread_mutex_t syms_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sym_table *syms_kept;
static unsigned syms_uses;

static struct sym_table *syms_take(void)
{
	struct sym_table *t;

	pthread_mutex_lock(&syms_lock);
	t = syms_kept;
	syms_kept = NULL;
	if (t && ++syms_uses >= SYMS_REUSE) {
		sym_table_free(t);
		t = NULL;
		syms_uses = 0;
	}
	pthread_mutex_unlock(&syms_lock);
	return t ? t : sym_table_new();
}

static void syms_give_back(struct sym_table *t)
{
	if (!t)
		return;
	sym_forget_processes(t);
	pthread_mutex_lock(&syms_lock);
	if (!syms_kept) {
		syms_kept = t;
		t = NULL;
	}
	pthread_mutex_unlock(&syms_lock);
	sym_table_free(t);
}

/* A stack an event of the batch at hand referenced: its frames are in
 * egress_source.frames from `first` */
struct batch_stack {
	uint32_t pid, sym_pid;	/* its row's pid; the process to name frames in */
	uint64_t stack_id;
	size_t first;
	uint32_t n, nk;		/* frames; of them the kernel's, leaf first */
	bool sample;		/* frames 0 and nk are interrupted instructions */
};

struct egress_source {
	struct nt_reader *r;
	const struct nt_reader_info *info;
	bool have_id;
	struct agent_identity id;
	uint32_t stream;
	uint64_t next_seq;
	size_t metas_done;
	bool eof;
	char damage[256];	/* why the file ended early, "" if it did not */
	uint64_t events;
	struct sym_table *syms;	/* the modules and methods the file described */
	struct prof_stack *stack;	/* the event at hand's */
	struct hmap batch_stack_index;	/* (pid, stack id) -> 1: in stacks[] */
	struct batch_stack *stacks;
	size_t nstacks, capstacks;
	uint64_t *frames;
	size_t nframes, capframes;
	struct hmap thread_index;	/* capture thread -> index in threads */
	struct source_thread *threads;
	size_t nthreads, capthreads;
	struct batch_rows rows;
	struct bytebuf text;	/* the decoded fields of the event at hand */
	/* egress_source_event()'s event at hand */
	struct nt_rec rec;
	struct fleet_str names[MAX_DECODED_FIELDS], values[MAX_DECODED_FIELDS];
};

struct egress_source *egress_source_open(const char *path, const struct agent_identity *id,
					 uint32_t stream, char *err, size_t errlen)
{
	struct egress_source *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->r = nt_reader_open(path);
	if (!s->r) {
		int e = errno;

		snprintf(err, errlen, "%s: %s", path, strerror(e));
		free(s);
		errno = e;
		return NULL;
	}
	s->info = nt_reader_info(s->r);
	s->syms = syms_take();
	s->stack = malloc(sizeof(*s->stack));
	if (!s->syms || !s->stack) {
		snprintf(err, errlen, "%s: %s", path, strerror(ENOMEM));
		egress_source_close(s);
		errno = ENOMEM;
		return NULL;
	}
	if (id) {
		s->have_id = true;
		s->id = *id;
	}
	s->stream = stream;
	s->next_seq = 1;
	return s;
}

void egress_source_close(struct egress_source *s)
{
	if (!s)
		return;
	nt_reader_free(s->r);
	hmap_free(&s->thread_index);
	free(s->threads);
	rows_free(&s->rows);
	bb_free(&s->text);
	syms_give_back(s->syms);
	free(s->stack);
	hmap_free(&s->batch_stack_index);
	free(s->stacks);
	free(s->frames);
	free(s);
}

static uint64_t event_ns(const struct egress_source *s, uint64_t ts)
{
	const struct nt_reader_info *in = s->info;
	__int128 d = (__int128)ts - (__int128)in->sync_ticks;

	if (!in->tick_freq)
		return (uint64_t)in->sync_unix_ns;
	return (uint64_t)((__int128)in->sync_unix_ns + d * 1000000000 / (__int128)in->tick_freq);
}

static const char *container_of(const struct egress_source *s)
{
	return s->have_id ? s->id.tags.container_id : "";
}

static void process_rows(struct egress_source *s, const struct egress_name *n)
{
	union fleet_value row[(int)FP_NCOLS > (int)FC_NCOLS ? (int)FP_NCOLS : (int)FC_NCOLS];
	uint64_t nspids[AGENT_MAX_NSPIDS];
	uint32_t i;

	if (!s->have_id)
		return;
	for (i = 0; i < s->id.nnspids; i++)
		nspids[i] = s->id.nspids[i];
	memset(row, 0, sizeof(row));
	row[FP_TIME].u = (uint64_t)s->info->sync_unix_ns;
	row[FP_HOST].s = fstr(n->host);
	memcpy(row[FP_BOOT_ID].uuid, n->boot_id, 16);
	row[FP_PID].u = s->id.pid;
	row[FP_START_TIME].u = s->id.start_time;
	row[FP_NSPIDS].u64s.v = nspids;
	row[FP_NSPIDS].u64s.n = s->id.nnspids;
	row[FP_COMM].s = fstr(s->id.comm);
	row[FP_CGROUP_PATH].s = fstr(s->id.cgroup_path);
	row[FP_CONTAINER_ID].s = fstr(s->id.tags.container_id);
	row[FP_POD_UID].s = fstr(s->id.tags.pod_uid);
	row[FP_SOURCE].s = fstr("ringpipe");
	row[FP_EXIT_CODE].i = -1;
	rows_add(&s->rows, n, FLEET_PROCESSES, row);
	if (!s->id.tags.container_id[0])
		return;
	memset(row, 0, sizeof(row));
	row[FC_TIME].u = (uint64_t)s->info->sync_unix_ns;
	row[FC_HOST].s = fstr(n->host);
	row[FC_CONTAINER_ID].s = fstr(s->id.tags.container_id);
	row[FC_POD_UID].s = fstr(s->id.tags.pod_uid);
	row[FC_RUNTIME].s = fstr(s->id.tags.runtime);
	row[FC_QOS].s = fstr(s->id.tags.qos);
	row[FC_CGROUP_PATH].s = fstr(s->id.cgroup_path);
	rows_add(&s->rows, n, FLEET_CONTAINERS, row);
}

/* The metadata the file defined since the last batch */
static void meta_rows(struct egress_source *s, const struct egress_name *n)
{
	size_t nm = nt_reader_nmeta(s->r);

	for (; s->metas_done < nm; s->metas_done++) {
		const struct nt_meta *m = nt_reader_meta(s->r, s->metas_done);
		struct fleet_str names[64], types[64];
		union fleet_value row[FM_NCOLS];
		uint16_t i, nf = m->has_fields ? (m->nfields < 64 ? m->nfields : 64) : 0;

		for (i = 0; i < nf; i++) {
			names[i] = fstr(m->fields[i].name);
			types[i] = fstr(nt_type_name(m->fields[i].type.code));
		}
		memset(row, 0, sizeof(row));
		row[FM_HOST].s = fstr(n->host);
		memcpy(row[FM_BOOT_ID].uuid, n->boot_id, 16);
		row[FM_PID].u = s->have_id ? s->id.pid : 0;
		row[FM_PROVIDER].s = fstr(m->provider);
		row[FM_EVENT_ID].u = m->event_id;
		row[FM_EVENT_NAME].s = fstr(m->name);
		row[FM_VERSION].u = m->version;
		row[FM_LEVEL].u = m->level;
		row[FM_KEYWORDS].u = m->keywords;
		row[FM_OPCODE].u = m->opcode;
		row[FM_FIELD_NAMES].strs.v = names;
		row[FM_FIELD_NAMES].strs.n = nf;
		row[FM_FIELD_TYPES].strs.v = types;
		row[FM_FIELD_TYPES].strs.n = nf;
		rows_add(&s->rows, n, FLEET_EVENT_META, row);
	}
}

/* Decimal text of v, negative when neg: printf's %llu costs more than the
 * rest of an event's row, and a digit at a time half of the decoding, so
 * two digits at a time from a table of 00..99 */
static void decimal_text(struct bytebuf *t, uint64_t v, bool neg)
{
	static const char pairs[201] =
		"00010203040506070809101112131415161718192021222324252627282930313233343536373839"
		"40414243444546474849505152535455565758596061626364656667686970717273747576777879"
		"8081828384858687888990919293949596979899";
	char digits[21];
	size_t n = sizeof(digits);

	while (v >= 100) {
		uint64_t r = v % 100;

		v /= 100;
		n -= 2;
		memcpy(digits + n, pairs + 2 * r, 2);
	}
	if (v >= 10) {
		n -= 2;
		memcpy(digits + n, pairs + 2 * v, 2);
	} else {
		digits[--n] = (char)('0' + v);
	}
	if (neg)
		digits[--n] = '-';
	bb_append(t, digits + n, sizeof(digits) - n);
}

/* One scalar field as text at *p; false when its type has no text here */
static bool field_text(struct bytebuf *t, uint8_t code, const uint8_t **p, const uint8_t *end)
{
	static const uint8_t width[] = {
		[NT_BOOL] = 4, [NT_I8] = 1, [NT_U8] = 1, [NT_I16] = 2, [NT_U16] = 2,
		[NT_I32] = 4, [NT_U32] = 4, [NT_I64] = 8, [NT_U64] = 8, [NT_F64] = 8,
	};
	uint64_t u = 0;
	size_t w = code < sizeof(width) ? width[code] : 0, units;

	if (code == NT_STRING) {
		units = utf16le_strlen(*p, (size_t)(end - *p));
		if (units == SIZE_MAX)
			return false;
		utf16le_to_utf8(t, *p, units);
		*p += (units + 1) * 2;
		return true;
	}
	if (!w || (size_t)(end - *p) < w)
		return false;
	memcpy(&u, *p, w);
	*p += w;
	if (code == NT_F64) {
		double d;

		memcpy(&d, &u, 8);
		bb_printf(t, "%.17g", d);
	} else if (code == NT_I8 || code == NT_I16 || code == NT_I32 || code == NT_I64) {
		int64_t v = (int64_t)(u << (64 - 8 * w)) >> (64 - 8 * w);

		decimal_text(t, v < 0 ? 0 - (uint64_t)v : (uint64_t)v, v < 0);
	} else {
		decimal_text(t, u, false);
	}
	return true;
}

/*
 * The payload as name/value text when the metadata lists its fields and
 * every one of them is a number or a string; otherwise no fields at all
 * (the raw payload is in every row either way). Returns how many.
 */
static size_t decode_fields(struct egress_source *s, const struct nt_rec *rec,
			    struct fleet_str *names, struct fleet_str *values)
{
	const struct nt_meta *m = rec->meta;
	const uint8_t *p = rec->payload, *end = rec->payload + rec->payload_len;
	size_t ends[MAX_DECODED_FIELDS], i, start = 0;

	s->text.len = 0;
	if (!m || !m->has_fields || !m->nfields || m->nfields > MAX_DECODED_FIELDS)
		return 0;
	for (i = 0; i < m->nfields; i++) {
		if (!field_text(&s->text, m->fields[i].type.code, &p, end) || s->text.oom)
			return 0;
		ends[i] = s->text.len;
	}
	/* the text may have moved while it grew: pointers only now */
	for (i = 0; i < m->nfields; i++) {
		names[i] = fstr(m->fields[i].name);
		values[i] = (struct fleet_str){ (const char *)s->text.p + start, ends[i] - start };
		start = ends[i];
	}
	return m->nfields;
}

/* rec's stack id (0: it has none), its frames kept for the batch's stacks
 * row when this batch did not have that (pid, stack) yet */
static uint64_t event_stack(struct egress_source *s, const struct nt_rec *rec, uint32_t pid)
{
	struct prof_stack *st = s->stack;
	uint64_t id, key;

	if (!rec->stack_bytes)
		return 0;
	prof_get_stack(s->r, rec, st);
	if (!st->n)
		return 0;
	id = fleet_stack_id(FLEET_SCHEMA_VERSION, st->ips, st->n, st->nk);
	key = id ^ hmap_hash(pid);
	if (hmap_get(&s->batch_stack_index, key, NULL))
		return id;
	if (array_grow((void **)&s->stacks, &s->capstacks, s->nstacks, sizeof(*s->stacks), 64) ||
	    array_grow((void **)&s->frames, &s->capframes, s->nframes + st->n - 1,
		       sizeof(*s->frames), 1024) ||
	    hmap_put(&s->batch_stack_index, key, 1))
		return 0;	/* no memory: the event goes without its stack */
	memcpy(s->frames + s->nframes, st->ips, st->n * sizeof(*st->ips));
	s->stacks[s->nstacks++] = (struct batch_stack){
		.pid = pid, .sym_pid = st->pid, .stack_id = id, .first = s->nframes,
		.n = st->n, .nk = st->nk, .sample = st->sample,
	};
	s->nframes += st->n;
	return id;
}

/* One frame's name as `ringpipe report` gives it, "module!function", or
 * nothing when no symbol covers it */
static void frame_name(struct egress_source *s, const struct batch_stack *b, uint32_t i)
{
	bool leaf = b->sample && (i == 0 || i == b->nk);
	struct sym_result r;

	if (sym_lookup(s->syms, b->sym_pid, s->frames[b->first + i], leaf, &r) && r.function)
		bb_printf(&s->text, "%s!%s", r.module ? r.module : "?", r.function);
}

/* The batch's stacks rows, their frames named with what the file said
 * about their processes by now (a module event may follow the first
 * samples in it) */
static void stack_rows(struct egress_source *s, const struct egress_name *n)
{
	struct fleet_str *names = NULL;
	size_t *ends = NULL, cap = 0, k;
	uint32_t i;

	for (k = 0; k < s->nstacks; k++) {
		const struct batch_stack *b = &s->stacks[k];
		union fleet_value row[FS_NCOLS];
		size_t start = 0;

		if (b->n > cap) {
			free(names);
			free(ends);
			cap = b->n;
			names = malloc(cap * sizeof(*names));
			ends = malloc(cap * sizeof(*ends));
			if (!names || !ends) {
				s->rows.body[FLEET_STACKS].oom = 1;
				break;
			}
		}
		s->text.len = 0;
		for (i = 0; i < b->n; i++) {
			frame_name(s, b, i);
			ends[i] = s->text.len;
		}
		/* the text may have moved while it grew: pointers only now */
		for (i = 0; i < b->n; i++) {
			names[i] = (struct fleet_str){ (const char *)s->text.p + start,
						       ends[i] - start };
			start = ends[i];
		}
		memset(row, 0, sizeof(row));
		row[FS_HOST].s = fstr(n->host);
		memcpy(row[FS_BOOT_ID].uuid, n->boot_id, 16);
		row[FS_PID].u = b->pid;
		row[FS_STACK_ID].u = b->stack_id;
		row[FS_FRAMES].u64s.v = s->frames + b->first;
		row[FS_FRAMES].u64s.n = b->n;
		row[FS_SYMBOLS].strs.v = names;
		row[FS_SYMBOLS].strs.n = b->n;
		rows_add(&s->rows, n, FLEET_STACKS, row);
	}
	if (s->text.oom)
		s->rows.body[FLEET_STACKS].oom = 1;
	free(names);
	free(ends);
	s->nstacks = s->nframes = 0;
	hmap_clear(&s->batch_stack_index);
}

static struct source_thread *thread_of(struct egress_source *s, const struct nt_rec *rec)
{
	uint64_t i;

	if (hmap_get(&s->thread_index, rec->capture_thread, &i))
		return &s->threads[i];
	if (array_grow((void **)&s->threads, &s->capthreads, s->nthreads, sizeof(*s->threads), 16) ||
	    hmap_put(&s->thread_index, rec->capture_thread, s->nthreads))
		return NULL;
	s->threads[s->nthreads] = (struct source_thread){
		.capture_thread = rec->capture_thread,
		.pid = (uint32_t)rec->pid, .tid = (uint32_t)rec->tid,
		.last_seq = rec->seq - 1,
	};
	return &s->threads[s->nthreads++];
}

/* Sequence numbers a thread skipped are events it could not write */
static void note_seq(struct egress_source *s, const struct nt_rec *rec, uint64_t ns)
{
	struct source_thread *t = thread_of(s, rec);

	if (!t)
		return;
	if (rec->seq > t->last_seq + 1)
		t->gaps += rec->seq - t->last_seq - 1;
	if (rec->seq > t->last_seq)
		t->last_seq = rec->seq;
	t->last_ns = ns;
}

static uint32_t event_pid(const struct egress_source *s, const struct nt_rec *rec)
{
	return rec->pid > 0 ? (uint32_t)rec->pid : s->have_id ? s->id.pid : 0;
}

static void event_row(struct egress_source *s, const struct egress_name *n, const struct nt_rec *rec)
{
	struct fleet_str names[MAX_DECODED_FIELDS], values[MAX_DECODED_FIELDS];
	union fleet_value row[FE_NCOLS];
	const struct nt_meta *m = rec->meta;
	uint64_t ns = event_ns(s, rec->ts);

	memset(row, 0, sizeof(row));
	row[FE_TIME].u = ns;
	row[FE_HOST].s = fstr(n->host);
	memcpy(row[FE_BOOT_ID].uuid, n->boot_id, 16);
	row[FE_CONTAINER_ID].s = fstr(container_of(s));
	row[FE_POD_UID].s = fstr(s->have_id ? s->id.tags.pod_uid : "");
	row[FE_PID].u = event_pid(s, rec);
	row[FE_TID].u = (uint32_t)rec->tid;
	row[FE_THREAD_SEQ].u = rec->seq;
	row[FE_PROVIDER].s = fstr(m ? m->provider : "");
	row[FE_EVENT_ID].u = m ? m->event_id : 0;
	row[FE_EVENT_NAME].s = fstr(m ? m->name : "");
	row[FE_LEVEL].u = m ? m->level : 0;
	row[FE_KEYWORDS].u = m ? m->keywords : 0;
	memcpy(row[FE_ACTIVITY_ID].uuid, rec->activity, 16);
	memcpy(row[FE_RELATED_ACTIVITY_ID].uuid, rec->related, 16);
	row[FE_STACK_ID].u = event_stack(s, rec, (uint32_t)row[FE_PID].u);
	row[FE_PAYLOAD].s = (struct fleet_str){ (const char *)rec->payload, rec->payload_len };
	row[FE_FIELDS].fields.n = decode_fields(s, rec, names, values);
	row[FE_FIELDS].fields.names = names;
	row[FE_FIELDS].fields.values = values;
	memcpy(row[FE_AGENT_RUN].uuid, n->agent_run, 16);
	row[FE_STREAM].u = s->stream;
	row[FE_BATCH_SEQ].u = s->next_seq;
	rows_add(&s->rows, n, FLEET_EVENTS, row);
	rows_time(&s->rows, ns);
	note_seq(s, rec, ns);
	s->events++;
}

/* What the whole file lost: each thread's gaps, then what EventsLost says
 * beyond them (drops after a thread's last event, seen at sequence points) */
void egress_source_losses(struct egress_source *s,
			  void (*fn)(void *arg, const struct egress_loss *l), void *arg)
{
	struct egress_loss l = { .container_id = container_of(s), .reason = "seq_gap" };
	int64_t lost = nt_reader_lost(s->r), gaps = 0;
	size_t i;

	for (i = 0; i < s->nthreads; i++) {
		const struct source_thread *t = &s->threads[i];

		if (!t->gaps)
			continue;
		l.time_ns = t->last_ns;
		l.pid = t->pid;
		l.tid = t->tid;
		l.count = t->gaps;
		gaps += (int64_t)t->gaps;
		fn(arg, &l);
	}
	l.pid = s->have_id ? s->id.pid : 0;
	l.tid = 0;
	l.time_ns = s->rows.last_ns ? s->rows.last_ns : (uint64_t)s->info->sync_unix_ns;
	if (lost > gaps) {
		l.reason = "events_lost";
		l.count = (uint64_t)(lost - gaps);
		fn(arg, &l);
	}
	if (s->damage[0]) {
		l.reason = "unreadable";
		l.count = 0;
		fn(arg, &l);
	}
}

struct loss_rows_arg {
	struct egress_source *s;
	const struct egress_name *n;
};

static void loss_to_row(void *arg, const struct egress_loss *l)
{
	struct loss_rows_arg *a = arg;

	loss_row(&a->s->rows, a->n, a->s->stream, a->s->next_seq, l);
}

static void file_losses(struct egress_source *s, const struct egress_name *n)
{
	struct loss_rows_arg a = { s, n };

	egress_source_losses(s, loss_to_row, &a);
}

int egress_source_event(struct egress_source *s, struct egress_event *ev, char *err,
			size_t errlen)
{
	int rc;

	if (s->eof)
		return 0;
	rc = nt_reader_next(s->r, &s->rec);
	if (rc <= 0) {
		if (rc < 0) {
			snprintf(s->damage, sizeof(s->damage), "%s", nt_reader_errmsg(s->r));
			snprintf(err, errlen, "%s", s->damage);
		}
		s->eof = true;
		return 0;
	}
	ev->rec = &s->rec;
	ev->time_ns = event_ns(s, s->rec.ts);
	ev->pid = event_pid(s, &s->rec);
	ev->nfields = decode_fields(s, &s->rec, s->names, s->values);
	ev->names = s->names;
	ev->values = s->values;
	note_seq(s, &s->rec, ev->time_ns);
	s->events++;
	return 1;
}

const struct agent_identity *egress_source_identity(const struct egress_source *s)
{
	return s->have_id ? &s->id : NULL;
}

bool egress_source_ended(const struct egress_source *s)
{
	return s->eof;
}

uint32_t egress_source_stream(const struct egress_source *s)
{
	return s->stream;
}

uint64_t egress_source_take_seq(struct egress_source *s)
{
	return s->next_seq++;
}

int egress_source_next(struct egress_source *s, const struct egress_name *n, struct bytebuf *out,
		       char *err, size_t errlen)
{
	struct nt_rec rec;
	int rc = 0;

	if (s->eof)
		return 0;
	rows_reset(&s->rows);
	if (s->next_seq == 1)
		process_rows(s, n);
	while (s->rows.rows[FLEET_EVENTS] < n->batch_rows &&
	       s->rows.body[FLEET_EVENTS].len < n->batch_bytes) {
		rc = nt_reader_next(s->r, &rec);
		if (rc <= 0)
			break;
		sym_add_from_event(s->syms, &rec);
		event_row(s, n, &rec);
	}
	if (rc < 0)
		snprintf(s->damage, sizeof(s->damage), "%s", nt_reader_errmsg(s->r));
	meta_rows(s, n);
	stack_rows(s, n);
	if (rc <= 0) {
		/* a file that ends exactly at a batch's end still gives its
		 * losses a batch of their own: the count of batches stays a
		 * function of the file */
		s->eof = true;
		file_losses(s, n);
		if (s->damage[0])
			snprintf(err, errlen, "%s", s->damage);
	}
	rc = rows_finish(&s->rows, n, s->stream, s->next_seq, out);
	if (rc)
		return rc;
	s->next_seq++;
	return 1;
}

int egress_file_count(const char *path, uint64_t *events, uint64_t *lost)
{
	struct nt_reader *r = nt_reader_open(path);
	struct nt_rec rec;

	if (!r)
		return -errno;
	*events = 0;
	while (nt_reader_next(r, &rec) > 0)
		++*events;
	*lost = nt_reader_lost(r) > 0 ? (uint64_t)nt_reader_lost(r) : 0;
	nt_reader_free(r);
	return 0;
}
