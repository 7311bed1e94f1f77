// SPDX-License-Identifier: MIT
/*
 * fleet export (fleet_export.h): events rows back into nettrace.
 *
 * Every query names its columns through fleet_schema.h (the lists give the
 * names, fleet_column_parts() the time's columns in the table's dialect),
 * and identifies a process, an event type and a stack by a cityHash64 the
 * server computes over the same typed columns in every table: events,
 * event_meta and stacks then agree on a key without strings crossing
 * twice. The answers are RowBinary, read by the small cursor below.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fleet/fleet_export.h"
#include "fleet/fleet_schema.h"
#include "util/hmap.h"
#include "nettrace/nettrace.h"
#include "wire/rowbinary.h"
#include "common/tool_util.h"

#define EXPORT_PAGE_ROWS 50000
#define EXPORT_MAX_FIELDS 64
/* A thread's sequence number before its first event (the writer's seq_base) */
#define EXPORT_SEQ_BASE 1u
/* The writer's largest stack: its rows are u16-sized */
#define EXPORT_MAX_FRAMES (65527u / 8)

/* ---- RowBinary answers ------------------------------------------------ */

static struct fleet_str cur_string(struct rb_cursor *c)
{
	struct fleet_str s;

	s.p = (const char *)rb_get_bytes(c, &s.len);
	return s;
}

static char *str_dup(struct fleet_str s)
{
	return strndup(s.p, s.len);
}

/* ---- the SQL ---------------------------------------------------------- */

struct export_run {
	struct ch_client *c;
	const struct fleet_export_opts *o;
	struct fleet_export_totals *t;
	enum fleet_dialect dialect;
	struct bytebuf sel;		/* the rows' condition, with --host's */
	struct bytebuf sql, answer;
	char *err;
	size_t errlen;

	struct nt_writer *w;
	struct nt_fd_sink sink;
	int fd;
	struct hmap meta_ids;		/* event type key -> metadata id */
	struct hmap stack_index;	/* stack key -> index in stacks */
	struct { size_t off; uint32_t n; } *stacks;
	size_t nstacks, capstacks;
	uint64_t *frames;
	size_t nframes, capframes;
	struct hmap thread_seq;		/* pid << 32 | tid -> last sequence number */
	uint64_t rows, with_stack, first_ns, last_ns;
	uint64_t first_proc;		/* the process key of the first event */
	uint32_t first_pid;
};

static const char *col(enum fleet_table_id t, int i)
{
	return fleet_tables[t].cols[i].name;
}

/* The time column i of t as UInt64 nanoseconds since the epoch, either dialect */
static void time_ns_sql(struct bytebuf *b, enum fleet_table_id t, int i, enum fleet_dialect d)
{
	struct fleet_column_part parts[2];

	if (fleet_column_parts(&fleet_tables[t].cols[i], d, parts) == 2)
		bb_printf(b, "(toUInt64(`%s`) * 1000000000 + `%s`)", parts[0].name,
			  parts[1].name);
	else
		bb_printf(b, "toUInt64(toUnixTimestamp64Nano(`%s`))", parts[0].name);
}

/* cityHash64 over columns of t: the same typed values hash the same in
 * every table. 18.16 hashes no UUID: those go as their text. */
static void key_sql(struct bytebuf *b, enum fleet_table_id t, const int *cols, int n)
{
	int i;

	bb_printf(b, "cityHash64(");
	for (i = 0; i < n; i++) {
		bool uuid = fleet_tables[t].cols[cols[i]].kind == FK_UUID;

		bb_printf(b, "%s%s`%s`%s", i ? ", " : "", uuid ? "toString(" : "",
			  col(t, cols[i]), uuid ? ")" : "");
	}
	bb_printf(b, ")");
}

/* A process: (host, boot_id, pid) */
static void proc_key_sql(struct bytebuf *b, enum fleet_table_id t)
{
	static const int ev[] = { FE_HOST, FE_BOOT_ID, FE_PID };
	static const int pr[] = { FP_HOST, FP_BOOT_ID, FP_PID };

	key_sql(b, t, t == FLEET_EVENTS ? ev : pr, 3);
}

/* An event type of a process: (host, boot_id, pid, provider, event_id) */
static void meta_key_sql(struct bytebuf *b, enum fleet_table_id t)
{
	static const int ev[] = { FE_HOST, FE_BOOT_ID, FE_PID, FE_PROVIDER, FE_EVENT_ID };
	static const int me[] = { FM_HOST, FM_BOOT_ID, FM_PID, FM_PROVIDER, FM_EVENT_ID };

	key_sql(b, t, t == FLEET_EVENTS ? ev : me, 5);
}

/* A stack of a process: (host, boot_id, pid, stack_id) */
static void stack_key_sql(struct bytebuf *b, enum fleet_table_id t)
{
	static const int ev[] = { FE_HOST, FE_BOOT_ID, FE_PID, FE_STACK_ID };
	static const int st[] = { FS_HOST, FS_BOOT_ID, FS_PID, FS_STACK_ID };

	key_sql(b, t, t == FLEET_EVENTS ? ev : st, 4);
}

/* "KEY GLOBAL IN (SELECT KEY FROM events WHERE selection [AND more])": the
 * rows of a small table that the selected events name (GLOBAL: on
 * Distributed tables the set is built once, from all shards; 18.16 refuses
 * a distributed subquery in a distributed query otherwise) */
static void in_selection_sql(struct export_run *x, void (*key)(struct bytebuf *, enum fleet_table_id),
			     const char *alias, const char *more)
{
	bb_printf(&x->sql, " WHERE %s GLOBAL IN (SELECT ", alias);
	key(&x->sql, FLEET_EVENTS);
	bb_printf(&x->sql, " FROM `events` WHERE %s%s)", (const char *)x->sel.p, more);
}

/* Runs x->sql (RowBinary) into x->answer: 0, or the error in x->err */
static int export_query(struct export_run *x, const char *what)
{
	char why[4096];
	int rc;

	bb_printf(&x->sql, " FORMAT RowBinary");
	bb_append(&x->sql, "", 1);
	x->answer.len = 0;
	if (x->sql.oom)
		return tool_set_err(x->err, x->errlen, -ENOMEM, "%s: %s", what, strerror(ENOMEM));
	rc = ch_exec(x->c, (const char *)x->sql.p, NULL, 0, &x->answer, why, sizeof(why));
	x->sql.len = 0;
	if (rc)
		return tool_set_err(x->err, x->errlen, rc, "%s: %s", what, why);
	return 0;
}

/* An answer that does not parse: most likely a server error after the
 * first bytes (the status was sent already), so its end is shown */
static int export_bad_answer(struct export_run *x, const char *what)
{
	size_t n = x->answer.len, from = n > 300 ? n - 300 : 0;
	size_t i;

	for (i = from; i < n; i++)
		if (x->answer.p[i] < 0x20 || x->answer.p[i] > 0x7e)
			x->answer.p[i] = ' ';
	return tool_set_err(x->err, x->errlen, -EBADMSG,
			    "%s: the server's answer is not the RowBinary asked for; it ends "
			    "with: %.*s", what, (int)(n - from), (const char *)x->answer.p + from);
}

static struct rb_cursor answer_cursor(const struct export_run *x)
{
	return (struct rb_cursor){ x->answer.p, x->answer.p + x->answer.len, false };
}

/* The table's dialect, from its columns: a legacy time has a NAME_ns column */
static int export_dialect(struct export_run *x)
{
	char line[64], why[4096];
	unsigned long legacy = 0, cols = 0;
	int rc;

	rc = ch_query_line(x->c, "SELECT countIf(name = 'time_ns'), count() FROM system.columns "
			   "WHERE database = currentDatabase() AND table = 'events' "
			   "FORMAT TabSeparated", line, sizeof(line), why, sizeof(why));
	if (rc)
		return tool_set_err(x->err, x->errlen, rc, "%s", why);
	if (sscanf(line, "%lu\t%lu", &legacy, &cols) != 2)
		return tool_set_err(x->err, x->errlen, -EBADMSG,
				    "unexpected answer about the events table: '%s'", line);
	if (!cols)
		return tool_set_err(x->err, x->errlen, -ENOENT,
				    "database %s has no events table (create the fleet tables "
				    "with 'ringpipe fleet init', or name the database with "
				    "?database=NAME)", x->c->target.database);
	x->dialect = legacy ? FLEET_LEGACY : FLEET_CURRENT;
	return 0;
}

/* ---- the processes ---------------------------------------------------- */

struct export_proc {
	uint64_t key;
	char *host;
	uint32_t pid;
	uint64_t rows;
};

/* The selection's processes, first seen first; names the first, checks
 * what the format can hold. 0, -ENOENT (no rows) or -EXDEV (V5, several). */
static int export_processes(struct export_run *x)
{
	struct export_proc *procs = NULL;
	size_t n = 0, cap = 0, i, j;
	struct rb_cursor cur;
	uint64_t total = 0, clashes = 0;
	int rc;

	bb_printf(&x->sql, "SELECT ");
	proc_key_sql(&x->sql, FLEET_EVENTS);
	bb_printf(&x->sql, " AS rp_proc, any(`%s`), any(`%s`), count(), min(", col(FLEET_EVENTS, FE_HOST),
		  col(FLEET_EVENTS, FE_PID));
	time_ns_sql(&x->sql, FLEET_EVENTS, FE_TIME, x->dialect);
	bb_printf(&x->sql, ") AS rp_first, max(");
	time_ns_sql(&x->sql, FLEET_EVENTS, FE_TIME, x->dialect);
	bb_printf(&x->sql, "), countIf(`%s` != 0) FROM `events` WHERE %s GROUP BY rp_proc "
		  "ORDER BY rp_first, rp_proc", col(FLEET_EVENTS, FE_STACK_ID),
		  (const char *)x->sel.p);
	if ((rc = export_query(x, "selecting the events")))
		return rc;
	cur = answer_cursor(x);
	while (cur.p < cur.end && !cur.bad) {
		struct export_proc p;
		uint64_t first, last;

		if (array_grow((void **)&procs, &cap, n, sizeof(*procs), 16)) {
			rc = tool_set_err(x->err, x->errlen, -ENOMEM, "%s", strerror(ENOMEM));
			goto out;
		}
		p.key = rb_get_fixed(&cur, 8);
		p.host = str_dup(cur_string(&cur));
		p.pid = (uint32_t)rb_get_fixed(&cur, 4);
		p.rows = rb_get_fixed(&cur, 8);
		first = rb_get_fixed(&cur, 8);
		last = rb_get_fixed(&cur, 8);
		x->with_stack += rb_get_fixed(&cur, 8);
		procs[n++] = p;
		if (!p.host)
			cur.bad = true;
		if (n == 1 || first < x->first_ns)
			x->first_ns = first;
		if (last > x->last_ns)
			x->last_ns = last;
		total += p.rows;
	}
	if (cur.bad) {
		rc = export_bad_answer(x, "selecting the events");
		goto out;
	}
	if (!n) {
		rc = tool_set_err(x->err, x->errlen, -ENOENT, "no events row matches --where "
				  "'%s'%s%s", x->o->where, x->o->host ? " on host " : "",
				  x->o->host ? x->o->host : "");
		goto out;
	}
	x->rows = total;
	x->first_pid = procs[0].pid;
	x->first_proc = procs[0].key;
	x->t->processes = n;
	for (i = 0; i < n; i++) {
		bool new_host = true, pid_seen = false;

		for (j = 0; j < i; j++) {
			new_host &= strcmp(procs[j].host, procs[i].host) != 0;
			pid_seen |= procs[j].pid == procs[i].pid;
		}
		x->t->hosts += new_host;
		clashes += pid_seen;
	}
	snprintf(x->t->first_process, sizeof(x->t->first_process), "host %s pid %" PRIu32,
		 procs[0].host, procs[0].pid);
	if (x->o->format == NT_FORMAT_V5 && n > 1) {
		rc = tool_set_err(x->err, x->errlen, -EXDEV,
				  "the selection holds %zu processes (host %s pid %" PRIu32
				  ", host %s pid %" PRIu32 "%s), and a V5 file has one process "
				  "id: use --format v6, or narrow --where to one process", n,
				  procs[0].host, procs[0].pid, procs[1].host, procs[1].pid,
				  n > 2 ? ", ..." : "");
		goto out;
	}
	if (clashes && x->o->notes)
		fprintf(x->o->notes, "ringpipe fleet: export: warning: %" PRIu64 " of the %zu "
			"processes share a pid with another host's or boot's: TraceEvent shows "
			"each such pair as one process (narrow --where, or --host)\n", clashes, n);
	rc = 0;
out:
	for (i = 0; i < n; i++)
		free(procs[i].host);
	free(procs);
	return rc;
}

/* The name the processes table has for the first process, for the summary */
static int export_first_name(struct export_run *x)
{
	struct rb_cursor cur;
	struct fleet_str comm;
	size_t used;
	int rc;

	bb_printf(&x->sql, "SELECT any(`%s`) FROM `processes` FINAL WHERE ",
		  col(FLEET_PROCESSES, FP_COMM));
	proc_key_sql(&x->sql, FLEET_PROCESSES);
	bb_printf(&x->sql, " = %" PRIu64, x->first_proc);
	if ((rc = export_query(x, "reading the processes")))
		return rc;
	cur = answer_cursor(x);
	comm = cur_string(&cur);
	used = strlen(x->t->first_process);
	if (!cur.bad && comm.len)
		snprintf(x->t->first_process + used, sizeof(x->t->first_process) - used,
			 " (%.*s)", (int)comm.len, comm.p);
	return 0;
}

/* ---- metadata --------------------------------------------------------- */

/* An event type as the file will describe it */
struct export_type {
	uint64_t key;
	char *provider, *name;
	uint32_t event_id, version;
	uint8_t level, opcode;
	uint64_t keywords;
	bool from_meta;			/* an event_meta row described it */
	uint16_t nfields;
	bool has_fields;		/* every field's type is one nettrace can say */
	struct nt_field fields[EXPORT_MAX_FIELDS];
	char *field_names[EXPORT_MAX_FIELDS];
};

static void type_free(struct export_type *ty)
{
	uint16_t i;

	free(ty->provider);
	free(ty->name);
	for (i = 0; i < ty->nfields; i++)
		free(ty->field_names[i]);
	ty->provider = ty->name = NULL;
	ty->nfields = 0;
}

/* The type code nt_type_name() calls name; 0 when none, or one whose
 * element or member types the row does not give (arrays, objects) */
static uint8_t type_code(struct fleet_str name)
{
	uint8_t code;

	for (code = NT_BOOL; code <= NT_VARUINT; code++) {
		const char *n = nt_type_name(code);

		if (code != NT_ARRAY && strlen(n) == name.len && !memcmp(n, name.p, name.len))
			return code;
	}
	return 0;
}

/* field_names and field_types of an event_meta row into ty */
static void type_fields(struct export_type *ty, struct rb_cursor *cur)
{
	uint64_t n = rb_get_count(cur), i;
	struct fleet_str name;

	ty->has_fields = n <= EXPORT_MAX_FIELDS;
	for (i = 0; i < n; i++) {
		name = cur_string(cur);
		if (i < EXPORT_MAX_FIELDS) {
			ty->field_names[i] = str_dup(name);
			ty->fields[i].name = ty->field_names[i];
			ty->has_fields &= ty->field_names[i] != NULL;
			ty->nfields = (uint16_t)(i + 1);
		}
	}
	if (rb_get_count(cur) != n)
		cur->bad = true;
	for (i = 0; i < n && !cur->bad; i++) {
		uint8_t code = type_code(cur_string(cur));

		if (i < EXPORT_MAX_FIELDS)
			ty->fields[i].type = code;
		ty->has_fields &= code != 0;
	}
}

struct type_list {
	struct export_type *v;
	size_t n, cap;
	struct hmap index;		/* key -> index in v */
};

/* Adds ty to l (which takes its strings); a key l has already is
 * replaced by an event_meta row (they come in version order: a later one
 * is newer), and kept over a description from the events rows */
static int type_add(struct export_run *x, struct type_list *l, struct export_type *ty)
{
	uint64_t at;

	if (hmap_get(&l->index, ty->key, &at)) {
		if (!ty->from_meta) {
			type_free(ty);
			return 0;
		}
		type_free(&l->v[at]);
		l->v[at] = *ty;
		return 0;
	}
	if (array_grow((void **)&l->v, &l->cap, l->n, sizeof(*l->v), 16) ||
	    hmap_put(&l->index, ty->key, l->n)) {
		type_free(ty);
		return tool_set_err(x->err, x->errlen, -ENOMEM, "%s", strerror(ENOMEM));
	}
	l->v[l->n++] = *ty;
	return 0;
}

/*
 * The selection's event types into l: from_meta, their event_meta rows
 * (ordered by version); else as the events rows name them (provider, event
 * id, name, level, keywords; no fields), for the types without such a row.
 * Both answers start with the same columns.
 */
static int export_read_types(struct export_run *x, struct type_list *l, bool from_meta)
{
	enum fleet_table_id t = from_meta ? FLEET_EVENT_META : FLEET_EVENTS;
	const char *what = from_meta ? "reading event_meta" : "reading the event types";
	const char *fn = from_meta ? "" : "any";
	struct rb_cursor cur;
	int rc;

	bb_printf(&x->sql, "SELECT ");
	meta_key_sql(&x->sql, t);
	bb_printf(&x->sql, " AS rp_meta, %s(`%s`), %s(`%s`), %s(`%s`), %s(`%s`), %s(`%s`)",
		  fn, col(t, from_meta ? FM_PROVIDER : FE_PROVIDER),
		  fn, col(t, from_meta ? FM_EVENT_ID : FE_EVENT_ID),
		  fn, col(t, from_meta ? FM_EVENT_NAME : FE_EVENT_NAME),
		  fn, col(t, from_meta ? FM_LEVEL : FE_LEVEL),
		  fn, col(t, from_meta ? FM_KEYWORDS : FE_KEYWORDS));
	if (from_meta) {
		bb_printf(&x->sql, ", `%s`, `%s`, `%s`, `%s` FROM `event_meta` FINAL",
			  col(t, FM_VERSION), col(t, FM_OPCODE), col(t, FM_FIELD_NAMES),
			  col(t, FM_FIELD_TYPES));
		in_selection_sql(x, meta_key_sql, "rp_meta", "");
		bb_printf(&x->sql, " ORDER BY rp_meta, `%s`", col(t, FM_VERSION));
	} else {
		bb_printf(&x->sql, " FROM `events` WHERE %s GROUP BY rp_meta",
			  (const char *)x->sel.p);
	}
	if ((rc = export_query(x, what)))
		return rc;
	cur = answer_cursor(x);
	while (cur.p < cur.end && !cur.bad) {
		struct export_type ty = { .from_meta = from_meta };

		ty.key = rb_get_fixed(&cur, 8);
		ty.provider = str_dup(cur_string(&cur));
		ty.event_id = (uint32_t)rb_get_fixed(&cur, 4);
		ty.name = str_dup(cur_string(&cur));
		ty.level = (uint8_t)rb_get_fixed(&cur, 1);
		ty.keywords = rb_get_fixed(&cur, 8);
		if (from_meta) {
			ty.version = (uint32_t)rb_get_fixed(&cur, 4);
			ty.opcode = (uint8_t)rb_get_fixed(&cur, 1);
			type_fields(&ty, &cur);
		}
		if (!ty.provider || !ty.name || cur.bad) {
			cur.bad = true;
			type_free(&ty);
			break;
		}
		if ((rc = type_add(x, l, &ty)))
			return rc;
	}
	return cur.bad ? export_bad_answer(x, what) : 0;
}

/*
 * The name to write for the name a reader made of it (what event_meta
 * keeps: TraceEvent's EventName), so that a reader makes the same again: an
 * opcode's "/Start" (or "/N") comes off, as a reader adds it back to the
 * task's name; "EventID(N)" was a nameless event, and is one again.
 */
static const char *raw_event_name(const struct export_type *ty, char *buf, size_t len)
{
	const char *slash = strrchr(ty->name, '/');
	char nameless[32];

	snprintf(nameless, sizeof(nameless), "EventID(%" PRIu32 ")", ty->event_id);
	if (!strcmp(ty->name, nameless))
		return "";
	if (!ty->opcode || !slash || slash == ty->name)
		return ty->name;
	snprintf(buf, len, "%.*s", (int)(slash - ty->name), ty->name);
	return buf;
}

/* Defines ty in the file; a field list the format cannot say is left out
 * (the payload bytes are there all the same) */
static int export_define(struct export_run *x, const struct export_type *ty)
{
	char task[256];
	struct nt_event_desc d = {
		.provider = ty->provider, .event_id = ty->event_id,
		.name = raw_event_name(ty, task, sizeof(task)), .keywords = ty->keywords,
		.version = (uint8_t)ty->version, .level = ty->level, .opcode = ty->opcode,
	};
	uint32_t id;
	int rc;

	if (ty->has_fields && ty->nfields) {
		d.nfields = ty->nfields;
		d.fields = ty->fields;
		if (nt_event_desc_check(&d, x->o->format, NULL, 0)) {
			d.nfields = 0;
			d.fields = NULL;
		}
	}
	rc = nt_writer_define(x->w, &d, &id);
	if (!rc && hmap_put(&x->meta_ids, ty->key, id))
		rc = -ENOMEM;
	if (rc)
		return tool_set_err(x->err, x->errlen, rc, "cannot describe %s event %" PRIu32
				    " (%s) in the file: %s", ty->provider, ty->event_id,
				    ty->name, strerror(-rc));
	return 0;
}

static int export_metadata(struct export_run *x)
{
	struct type_list l = { 0 };
	size_t i;
	int rc;

	rc = export_read_types(x, &l, true);
	if (!rc)
		rc = export_read_types(x, &l, false);
	for (i = 0; i < l.n; i++) {
		if (!rc)
			rc = export_define(x, &l.v[i]);
		x->t->no_meta += !l.v[i].from_meta;
		type_free(&l.v[i]);
	}
	x->t->event_types = l.n;
	free(l.v);
	hmap_free(&l.index);
	return rc;
}

/* ---- stacks ----------------------------------------------------------- */

/* The stacks rows of the selection's stack ids; none at all is fine (an
 * egress that does not ship stacks yet) */
static int export_stacks(struct export_run *x)
{
	struct rb_cursor cur;
	int rc;

	if (!x->with_stack)
		return 0;
	bb_printf(&x->sql, "SELECT ");
	stack_key_sql(&x->sql, FLEET_STACKS);
	bb_printf(&x->sql, " AS rp_stack, any(`%s`) FROM `stacks` FINAL",
		  col(FLEET_STACKS, FS_FRAMES));
	bb_printf(&x->sql, " WHERE rp_stack GLOBAL IN (SELECT ");
	stack_key_sql(&x->sql, FLEET_EVENTS);
	bb_printf(&x->sql, " FROM `events` WHERE %s AND `%s` != 0) GROUP BY rp_stack",
		  (const char *)x->sel.p, col(FLEET_EVENTS, FE_STACK_ID));
	if ((rc = export_query(x, "reading stacks")))
		return rc;
	cur = answer_cursor(x);
	while (cur.p < cur.end && !cur.bad) {
		uint64_t key = rb_get_fixed(&cur, 8), n = rb_get_count(&cur), i;

		if (n > (uint64_t)(cur.end - cur.p) / 8) {
			cur.bad = true;
			break;
		}
		if (array_grow((void **)&x->stacks, &x->capstacks, x->nstacks,
			       sizeof(*x->stacks), 64) ||
		    array_grow((void **)&x->frames, &x->capframes, x->nframes + n,
			       sizeof(*x->frames), 1024) ||
		    hmap_put(&x->stack_index, key, x->nstacks))
			return tool_set_err(x->err, x->errlen, -ENOMEM, "%s", strerror(ENOMEM));
		x->stacks[x->nstacks].off = x->nframes;
		x->stacks[x->nstacks].n = (uint32_t)n;
		x->nstacks++;
		for (i = 0; i < n; i++)
			x->frames[x->nframes++] = rb_get_fixed(&cur, 8);
	}
	return cur.bad ? export_bad_answer(x, "reading stacks") : 0;
}

/* ---- events ----------------------------------------------------------- */

/*
 * Where a page ends, in the rows' order: time, process, thread, thread_seq,
 * stream, batch_seq. Rows of the same thread and time differ in thread_seq
 * (or, sent twice, in their batch), so a key is nearly always one row's;
 * `same` counts the rows with the last key, which the next page, asked for
 * from that key on, skips: a duplicate of the last row is neither lost nor
 * read twice.
 */
struct page_key {
	uint64_t ns, proc, batch_seq;
	uint32_t tid, thread_seq, stream;
};

static bool key_eq(const struct page_key *a, const struct page_key *b)
{
	return a->ns == b->ns && a->proc == b->proc && a->tid == b->tid &&
	       a->thread_seq == b->thread_seq && a->stream == b->stream &&
	       a->batch_seq == b->batch_seq;
}

/* The order's columns, as a tuple's members */
static void page_order_sql(struct export_run *x)
{
	time_ns_sql(&x->sql, FLEET_EVENTS, FE_TIME, x->dialect);
	bb_printf(&x->sql, ", ");
	proc_key_sql(&x->sql, FLEET_EVENTS);
	bb_printf(&x->sql, ", `%s`, `%s`, `%s`, `%s`", col(FLEET_EVENTS, FE_TID),
		  col(FLEET_EVENTS, FE_THREAD_SEQ), col(FLEET_EVENTS, FE_STREAM),
		  col(FLEET_EVENTS, FE_BATCH_SEQ));
}

/* One row's event into the file; its time and tid into key */
static int export_event(struct export_run *x, struct rb_cursor *cur, struct page_key *key)
{
	uint8_t activity[16], related[16];
	uint64_t ns, meta_key, stack_key, meta_id, at, seq, thread;
	struct nt_event ev = { .sorted = true };
	struct fleet_str payload;
	int rc;

	ns = rb_get_fixed(cur, 8);
	meta_key = rb_get_fixed(cur, 8);
	stack_key = rb_get_fixed(cur, 8);
	ev.pid = (uint32_t)rb_get_fixed(cur, 4);
	ev.tid = (uint32_t)rb_get_fixed(cur, 4);
	rb_get_uuid(cur, activity);
	rb_get_uuid(cur, related);
	payload = cur_string(cur);
	key->ns = ns;
	key->tid = ev.tid;
	if (cur->bad)
		return 0;
	if (!hmap_get(&x->meta_ids, meta_key, &meta_id))
		return tool_set_err(x->err, x->errlen, -EAGAIN,
				    "an event of a type the selection did not have a moment ago "
				    "(rows changed while exporting?)");
	if (payload.len > UINT16_MAX)
		return tool_set_err(x->err, x->errlen, -E2BIG, "an event of pid %" PRIu32
				    " at %" PRIu64 " ns has a payload of %zu bytes, more than "
				    "nettrace holds (65535)", ev.pid, ns, payload.len);
	/* numbered afresh per thread of the file: what the selection left out
	 * is not lost */
	thread = (uint64_t)ev.pid << 32 | ev.tid;
	if (!hmap_get(&x->thread_seq, thread, &seq))
		seq = EXPORT_SEQ_BASE;
	if (hmap_put(&x->thread_seq, thread, ++seq))
		return tool_set_err(x->err, x->errlen, -ENOMEM, "%s", strerror(ENOMEM));
	ev.meta_id = (uint32_t)meta_id;
	ev.seq = (uint32_t)seq;
	ev.ts = ns;
	ev.activity = activity;
	ev.related = related;
	ev.payload = payload.p;
	ev.payload_len = (uint32_t)payload.len;
	if (stack_key && hmap_get(&x->stack_index, stack_key, &at)) {
		ev.stack = x->frames + x->stacks[at].off;
		/* the innermost frames of a deeper one */
		ev.stack_depth = x->stacks[at].n < EXPORT_MAX_FRAMES ? x->stacks[at].n :
				 EXPORT_MAX_FRAMES;
		x->t->stacks++;
	} else if (stack_key) {
		x->t->stacks_missing++;
	}
	rc = nt_writer_event(x->w, &ev);
	if (rc < 0)
		return tool_set_err(x->err, x->errlen, rc, "writing %s: %s", x->o->path,
				    strerror(-rc));
	x->t->events++;
	return 0;
}

/*
 * The next page of rows, in order, from *last on (all of them when same is
 * 0), skipping the `same` rows that have it; moves *last and *same to the
 * page's end. How many rows it held, or a negative errno.
 */
static long export_page(struct export_run *x, struct page_key *last, uint64_t *same,
			uint32_t rows)
{
	struct rb_cursor cur;
	long n = 0;
	int rc;

	bb_printf(&x->sql, "SELECT ");
	time_ns_sql(&x->sql, FLEET_EVENTS, FE_TIME, x->dialect);
	bb_printf(&x->sql, ", ");
	meta_key_sql(&x->sql, FLEET_EVENTS);
	bb_printf(&x->sql, ", if(`%s` = 0, toUInt64(0), ", col(FLEET_EVENTS, FE_STACK_ID));
	stack_key_sql(&x->sql, FLEET_EVENTS);
	bb_printf(&x->sql, "), `%s`, `%s`, `%s`, `%s`, `%s`, ", col(FLEET_EVENTS, FE_PID),
		  col(FLEET_EVENTS, FE_TID), col(FLEET_EVENTS, FE_ACTIVITY_ID),
		  col(FLEET_EVENTS, FE_RELATED_ACTIVITY_ID), col(FLEET_EVENTS, FE_PAYLOAD));
	proc_key_sql(&x->sql, FLEET_EVENTS);
	bb_printf(&x->sql, ", `%s`, `%s`, `%s` FROM `events` WHERE %s",
		  col(FLEET_EVENTS, FE_THREAD_SEQ), col(FLEET_EVENTS, FE_STREAM),
		  col(FLEET_EVENTS, FE_BATCH_SEQ), (const char *)x->sel.p);
	if (*same) {
		bb_printf(&x->sql, " AND (");
		page_order_sql(x);
		bb_printf(&x->sql, ") >= (toUInt64(%" PRIu64 "), toUInt64(%" PRIu64 "), %" PRIu32
			  ", %" PRIu32 ", %" PRIu32 ", toUInt64(%" PRIu64 "))", last->ns,
			  last->proc, last->tid, last->thread_seq, last->stream, last->batch_seq);
	}
	bb_printf(&x->sql, " ORDER BY ");
	page_order_sql(x);
	bb_printf(&x->sql, " LIMIT %" PRIu64 ", %" PRIu32, *same, rows);
	if ((rc = export_query(x, "reading events")))
		return rc;
	cur = answer_cursor(x);
	while (cur.p < cur.end && !cur.bad) {
		struct page_key key;

		if ((rc = export_event(x, &cur, &key)))
			return rc;
		key.proc = rb_get_fixed(&cur, 8);
		key.thread_seq = (uint32_t)rb_get_fixed(&cur, 4);
		key.stream = (uint32_t)rb_get_fixed(&cur, 4);
		key.batch_seq = rb_get_fixed(&cur, 8);
		if (*same && key_eq(&key, last)) {
			(*same)++;
		} else {
			*last = key;
			*same = 1;
		}
		n++;
	}
	return cur.bad ? export_bad_answer(x, "reading events") : n;
}

static int export_events(struct export_run *x)
{
	uint32_t page = x->o->page_rows ? x->o->page_rows : EXPORT_PAGE_ROWS;
	struct page_key last = { 0 };
	uint64_t done = 0, same = 0;
	long n;

	do {
		n = export_page(x, &last, &same, page);
		if (n < 0)
			return (int)n;
		done += (uint64_t)n;
		if (x->o->notes && x->rows > page && n)
			fprintf(x->o->notes, "ringpipe fleet: export: %" PRIu64 " of %" PRIu64
				" rows\n", done, x->rows);
	} while ((uint64_t)n == page);
	if (done != x->rows && x->o->notes)
		fprintf(x->o->notes, "ringpipe fleet: export: warning: %" PRIu64 " rows read, "
			"the selection had %" PRIu64 " when the export began (are rows still "
			"arriving?)\n", done, x->rows);
	return 0;
}

/* ---- the whole export ------------------------------------------------- */

static int export_open(struct export_run *x)
{
	/* the header's sync time is a SYSTEMTIME of whole milliseconds: on one,
	 * with a 1 GHz clock, a tick is a nanosecond since the epoch exactly */
	uint64_t sync = x->first_ns / 1000000 * 1000000;
	struct nt_writer_opts wo = {
		.sz = sizeof(wo), .format = x->o->format, .pid = x->first_pid, .nr_cpus = 1,
		.pointer_size = 8, .sync_ticks = sync ? sync : 1000000, .tick_freq = 1000000000,
		.sync_unix_ns = sync ? sync : 1000000, .seq_base = EXPORT_SEQ_BASE,
	};

	x->fd = open(x->o->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (x->fd < 0)
		return tool_set_err(x->err, x->errlen, -errno, "cannot create %s: %s",
				    x->o->path, strerror(errno));
	nt_fd_sink_init(&x->sink, x->fd);
	x->w = nt_writer_new(&x->sink.base, &wo);
	if (!x->w)
		return tool_set_err(x->err, x->errlen, -ENOMEM, "cannot start %s: %s",
				    x->o->path, strerror(errno ? errno : ENOMEM));
	return 0;
}

/* Ends the file; 0, or the error of its last write */
static int export_close(struct export_run *x, bool ok)
{
	int rc = 0;

	if (x->w && ok) {
		rc = nt_writer_finish(x->w, x->last_ns);
		if (rc)
			tool_set_err(x->err, x->errlen, rc, "writing %s: %s", x->o->path,
				     strerror(-rc));
	}
	nt_writer_free(x->w);
	x->w = NULL;
	if (x->fd >= 0 && close(x->fd) && ok && !rc)
		rc = tool_set_err(x->err, x->errlen, -errno, "writing %s: %s", x->o->path,
				  strerror(errno));
	if (x->fd >= 0 && (!ok || rc))
		unlink(x->o->path);
	x->fd = -1;
	return rc;
}

int fleet_export(struct ch_client *c, const struct fleet_export_opts *o,
		 struct fleet_export_totals *t, char *err, size_t errlen)
{
	/* in order: the file is begun once the selection is known not empty
	 * and fit for the format, and its metadata precedes the events */
	static int (*const steps[])(struct export_run *) = {
		export_dialect, export_processes, export_first_name, export_stacks,
		export_open, export_metadata, export_events,
	};
	struct export_run x = { .c = c, .o = o, .t = t, .err = err, .errlen = errlen, .fd = -1 };
	size_t i;
	int rc;

	memset(t, 0, sizeof(*t));
	/* on a line of its own: a "-- comment" in it ends with it */
	bb_printf(&x.sel, "(%s\n)", o->where);
	if (o->host) {
		bb_printf(&x.sel, " AND `%s` = ", col(FLEET_EVENTS, FE_HOST));
		ch_sql_quote(&x.sel, o->host);
	}
	bb_append(&x.sel, "", 1);
	rc = x.sel.oom ? tool_set_err(err, errlen, -ENOMEM, "%s", strerror(ENOMEM)) : 0;
	for (i = 0; !rc && i < sizeof(steps) / sizeof(steps[0]); i++)
		rc = steps[i](&x);
	if (x.fd >= 0) {
		int close_rc = export_close(&x, !rc);

		rc = rc ? rc : close_rc;
	}
	hmap_free(&x.meta_ids);
	hmap_free(&x.stack_index);
	hmap_free(&x.thread_seq);
	free(x.stacks);
	free(x.frames);
	bb_free(&x.sel);
	bb_free(&x.sql);
	bb_free(&x.answer);
	return rc;
}
