// SPDX-License-Identifier: MIT
/*
 * The fleet schema's types per dialect, its DDL and its row encoder, all
 * from the lists in fleet_schema.h.
 */
#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fleet/fleet_schema.h"
#include "common/fnv1a.h"
#include "wire/rowbinary.h"

#define FLEET_COLUMN(index, name, kind) [index] = { name, kind },
static const struct fleet_column events_cols[] = { FLEET_EVENTS_COLUMNS(FLEET_COLUMN) };
static const struct fleet_column event_meta_cols[] = { FLEET_EVENT_META_COLUMNS(FLEET_COLUMN) };
static const struct fleet_column stacks_cols[] = { FLEET_STACKS_COLUMNS(FLEET_COLUMN) };
static const struct fleet_column processes_cols[] = { FLEET_PROCESSES_COLUMNS(FLEET_COLUMN) };
static const struct fleet_column containers_cols[] = { FLEET_CONTAINERS_COLUMNS(FLEET_COLUMN) };
static const struct fleet_column losses_cols[] = { FLEET_LOSSES_COLUMNS(FLEET_COLUMN) };
static const struct fleet_column batches_cols[] = { FLEET_BATCHES_COLUMNS(FLEET_COLUMN) };
#undef FLEET_COLUMN

/* FLEET_EVENTS_COLUMNS -> events_cols: the lists are named after their tables */
#define FLEET_COLS_OF(columns) FLEET_COLS_##columns
#define FLEET_COLS_FLEET_EVENTS_COLUMNS events_cols
#define FLEET_COLS_FLEET_EVENT_META_COLUMNS event_meta_cols
#define FLEET_COLS_FLEET_STACKS_COLUMNS stacks_cols
#define FLEET_COLS_FLEET_PROCESSES_COLUMNS processes_cols
#define FLEET_COLS_FLEET_CONTAINERS_COLUMNS containers_cols
#define FLEET_COLS_FLEET_LOSSES_COLUMNS losses_cols
#define FLEET_COLS_FLEET_BATCHES_COLUMNS batches_cols

#define FLEET_TABLE(index, tname, columns, eng, partition, order)		\
	[index] = { .name = tname, .cols = FLEET_COLS_OF(columns),		\
		    .ncols = sizeof(FLEET_COLS_OF(columns)) / sizeof(struct fleet_column), \
		    .engine = eng, .partition_by = partition, .order_by = order },
const struct fleet_table fleet_tables[FLEET_NTABLES] = { FLEET_TABLES(FLEET_TABLE) };
#undef FLEET_TABLE

/* The type of a kind that is one column; NULL for the kinds that are two in legacy */
static const char *fleet_type(enum fleet_kind k, enum fleet_dialect d)
{
	bool cur = d == FLEET_CURRENT;

	switch (k) {
	case FK_U8: return "UInt8";
	case FK_U32: return "UInt32";
	case FK_U64: return "UInt64";
	case FK_I32: return "Int32";
	case FK_STRING: return "String";
	case FK_TAG: return cur ? "LowCardinality(String)" : "String";
	case FK_UUID: return "UUID";
	case FK_DATETIME: return "DateTime";
	case FK_TIME: return cur ? "DateTime64(9)" : NULL;
	case FK_U64_ARRAY: return "Array(UInt64)";
	case FK_STRING_ARRAY: return "Array(String)";
	case FK_FIELDS: return cur ? "Map(LowCardinality(String), String)" : NULL;
	}
	return NULL;
}

/* The compression a current server applies to a kind, beyond its default */
static const char *fleet_codec(enum fleet_kind k)
{
	switch (k) {
	case FK_TIME: return " CODEC(Delta, ZSTD(1))";	/* times of a part ascend */
	case FK_STRING: case FK_FIELDS: case FK_STRING_ARRAY: return " CODEC(ZSTD(1))";
	default: return "";
	}
}

int fleet_column_parts(const struct fleet_column *col, enum fleet_dialect d,
		       struct fleet_column_part parts[2])
{
	const char *type = fleet_type(col->kind, d);

	snprintf(parts[0].name, sizeof(parts[0].name), "%s", col->name);
	parts[0].type = type;
	if (type)
		return 1;
	if (col->kind == FK_TIME) {
		parts[0].type = "DateTime";
		snprintf(parts[1].name, sizeof(parts[1].name), "%s_ns", col->name);
		parts[1].type = "UInt32";
	} else {
		snprintf(parts[0].name, sizeof(parts[0].name), "%s.name", col->name);
		parts[0].type = "Array(String)";
		snprintf(parts[1].name, sizeof(parts[1].name), "%s.value", col->name);
		parts[1].type = "Array(String)";
	}
	return 2;
}

/* One column's definition in CREATE TABLE */
static void fleet_column_ddl(struct bytebuf *b, const struct fleet_column *col,
			     enum fleet_dialect d)
{
	struct fleet_column_part parts[2];
	int i, n;

	if (d == FLEET_CURRENT) {
		bb_printf(b, "`%s` %s%s", col->name, fleet_type(col->kind, d),
			  fleet_codec(col->kind));
		return;
	}
	if (col->kind == FK_FIELDS) {
		/* a Nested column is inserted as its two arrays, name then value */
		bb_printf(b, "`%s` Nested(name String, value String)", col->name);
		return;
	}
	n = fleet_column_parts(col, d, parts);
	for (i = 0; i < n; i++)
		bb_printf(b, "%s`%s` %s", i ? ", " : "", parts[i].name, parts[i].type);
}

/*
 * A row is encoded in two passes: the most bytes its values can take, one
 * bb_reserve() for all of them, then plain stores through a local pointer.
 * Checked appends cost as much as the rest of an event's row, and the
 * agent encodes about a million events a second; the events table's row
 * is unrolled from its column list, so that its kinds are constants and
 * no switch is left to mispredict.
 */
#define ENCODER static inline __attribute__((always_inline))

static size_t strings_max(const struct fleet_str *v, size_t n)
{
	size_t i, need = BB_VARU64_MAX;

	for (i = 0; i < n; i++)
		need += BB_VARU64_MAX + v[i].len;
	return need;
}

/* The most bytes value v of kind k takes */
ENCODER size_t value_max(enum fleet_kind k, const union fleet_value *v)
{
	switch (k) {
	case FK_U8: return 1;
	case FK_U32: case FK_I32: case FK_DATETIME: return 4;
	case FK_U64: case FK_TIME: return 8;
	case FK_STRING: case FK_TAG: return BB_VARU64_MAX + v->s.len;
	case FK_UUID: return 16;
	case FK_U64_ARRAY: return BB_VARU64_MAX + 8 * v->u64s.n;
	case FK_STRING_ARRAY: return strings_max(v->strs.v, v->strs.n);
	case FK_FIELDS:
		/* legacy: two arrays; current: a count and the pairs */
		return strings_max(v->fields.names, v->fields.n) +
		       strings_max(v->fields.values, v->fields.n);
	}
	return 0;
}

static uint8_t *put_strings(uint8_t *o, const struct fleet_str *v, size_t n)
{
	size_t i;

	o = bb_varu64_at(o, n);
	for (i = 0; i < n; i++)
		o = rb_put_string(o, v[i].p, v[i].len);
	return o;
}

static uint8_t *put_fields(uint8_t *o, enum fleet_dialect d, const union fleet_value *v)
{
	size_t i;

	if (d == FLEET_LEGACY) {
		/* the Nested column's two arrays, names then values */
		o = put_strings(o, v->fields.names, v->fields.n);
		return put_strings(o, v->fields.values, v->fields.n);
	}
	o = bb_varu64_at(o, v->fields.n);	/* Map: its pairs, key then value */
	for (i = 0; i < v->fields.n; i++) {
		o = rb_put_string(o, v->fields.names[i].p, v->fields.names[i].len);
		o = rb_put_string(o, v->fields.values[i].p, v->fields.values[i].len);
	}
	return o;
}

/* Value v of kind k at o, its room made (value_max()); past it */
ENCODER uint8_t *value_put(uint8_t *o, enum fleet_kind k, enum fleet_dialect d,
			   const union fleet_value *v)
{
	size_t i;

	switch (k) {
	case FK_U8: *o++ = (uint8_t)v->u; return o;
	case FK_U32: case FK_DATETIME: return rb_put_u32(o, (uint32_t)v->u);
	case FK_U64: return rb_put_u64(o, v->u);
	case FK_I32: return rb_put_u32(o, (uint32_t)(int32_t)v->i);
	case FK_STRING: case FK_TAG: return rb_put_string(o, v->s.p, v->s.len);
	case FK_UUID: return rb_put_uuid(o, v->uuid);
	case FK_TIME:
		if (d == FLEET_CURRENT)
			return rb_put_u64(o, v->u);	/* DateTime64(9): ticks of 1 ns */
		o = rb_put_u32(o, (uint32_t)(v->u / 1000000000u));	/* DateTime, then ns */
		return rb_put_u32(o, (uint32_t)(v->u % 1000000000u));
	case FK_U64_ARRAY:
		o = bb_varu64_at(o, v->u64s.n);
		for (i = 0; i < v->u64s.n; i++)
			o = rb_put_u64(o, v->u64s.v[i]);
		return o;
	case FK_STRING_ARRAY: return put_strings(o, v->strs.v, v->strs.n);
	case FK_FIELDS: return put_fields(o, d, v);
	}
	return o;
}

#define EVENT_COLUMN_MAX(index, name, kind) need += value_max(kind, &row[index]);
#define EVENT_COLUMN_PUT(index, name, kind) o = value_put(o, kind, d, &row[index]);

static void event_row_encode(struct bytebuf *b, enum fleet_dialect d,
			     const union fleet_value *row)
{
	size_t need = 0;
	uint8_t *o;

	FLEET_EVENTS_COLUMNS(EVENT_COLUMN_MAX)
	if (bb_reserve(b, need))
		return;		/* b->oom is set, and checked once the batch is done */
	o = b->p + b->len;
	FLEET_EVENTS_COLUMNS(EVENT_COLUMN_PUT)
	b->len = (size_t)(o - b->p);
}

void fleet_row_encode(struct bytebuf *b, enum fleet_dialect d, const struct fleet_table *t,
		      const union fleet_value *row)
{
	size_t i, need = 0;
	uint8_t *o;

	if (t == &fleet_tables[FLEET_EVENTS]) {
		event_row_encode(b, d, row);
		return;
	}
	for (i = 0; i < t->ncols; i++)
		need += value_max(t->cols[i].kind, &row[i]);
	if (bb_reserve(b, need))
		return;
	o = b->p + b->len;
	for (i = 0; i < t->ncols; i++)
		o = value_put(o, t->cols[i].kind, d, &row[i]);
	b->len = (size_t)(o - b->p);
}

static void strings_skip(struct rb_cursor *c, uint64_t n)
{
	uint64_t i;
	size_t len;

	/* each string takes a byte at least: a count beyond the row ends at bad */
	for (i = 0; i < n && !c->bad; i++)
		rb_get_bytes(c, &len);
}

/* Past a value of kind k, as value_put() wrote it */
static void value_skip(struct rb_cursor *c, enum fleet_kind k, enum fleet_dialect d)
{
	uint64_t n;
	size_t len;

	switch (k) {
	case FK_U8: rb_get_fixed(c, 1); return;
	case FK_U32: case FK_I32: case FK_DATETIME: rb_get_fixed(c, 4); return;
	/* a legacy time is a DateTime and its nanoseconds, 4 bytes each */
	case FK_U64: case FK_TIME: rb_get_fixed(c, 8); return;
	case FK_STRING: case FK_TAG: rb_get_bytes(c, &len); return;
	case FK_UUID: rb_get_fixed(c, 8); rb_get_fixed(c, 8); return;
	case FK_U64_ARRAY:
		n = rb_get_count(c);
		if (n > (uint64_t)(c->end - c->p) / 8) {
			c->bad = true;
			return;
		}
		c->p += n * 8;
		return;
	case FK_STRING_ARRAY: strings_skip(c, rb_get_count(c)); return;
	case FK_FIELDS:
		if (d == FLEET_LEGACY) {
			strings_skip(c, rb_get_count(c));
			strings_skip(c, rb_get_count(c));
			return;
		}
		n = rb_get_count(c);
		strings_skip(c, n > UINT64_MAX / 2 ? UINT64_MAX : 2 * n);
		return;
	}
}

size_t fleet_row_measure(const uint8_t *p, const uint8_t *end, enum fleet_dialect d,
			 const struct fleet_table *t, size_t *at)
{
	struct rb_cursor c = { p, end, false };
	size_t i;

	for (i = 0; i < t->ncols && !c.bad; i++) {
		if (at)
			at[i] = (size_t)(c.p - p);
		value_skip(&c, t->cols[i].kind, d);
	}
	return c.bad ? 0 : (size_t)(c.p - p);
}

/* Version 1's stack ids started from this basis, a digit short of
 * FNV1A64_OFFSET_BASIS: kept to read and migrate what version 1 wrote */
#define FLEET_V1_STACK_BASIS 1469598103934665603ull

static uint64_t frames_hash(uint64_t h, const uint64_t *ips, uint32_t n)
{
	uint32_t i;

	for (i = 0; i < n; i++)
		h = fnv1a64_u64(h, ips[i]);
	return h;
}

uint64_t fleet_stack_id(unsigned version, const uint64_t *ips, uint32_t n, uint32_t nk)
{
	uint64_t h = frames_hash(version == 1 ? FLEET_V1_STACK_BASIS : fnv1a64_start(), ips, n);

	h = fnv1a64_u64(h, nk);
	return h ? h : 1;
}

int fleet_stack_id_upgrade(uint64_t v1_id, const uint64_t *ips, uint32_t n, uint64_t *v2_id)
{
	uint64_t frames = frames_hash(FLEET_V1_STACK_BASIS, ips, n), h;
	uint32_t nk;

	for (nk = 0; nk <= n; nk++) {
		h = fnv1a64_u64(frames, nk);
		if ((h ? h : 1) == v1_id) {
			*v2_id = fleet_stack_id(2, ips, n, nk);
			return 0;
		}
	}
	return -ENOENT;
}

void fleet_insert_sql(struct bytebuf *sql, enum fleet_dialect d, const char *db,
		      const struct fleet_table *t)
{
	fleet_insert_sql_into(sql, d, db, t, "");
}

void fleet_insert_sql_into(struct bytebuf *sql, enum fleet_dialect d, const char *db,
			   const struct fleet_table *t, const char *suffix)
{
	struct fleet_column_part parts[2];
	size_t i;
	int j, n;

	bb_printf(sql, "INSERT INTO `%s`.`%s%s` (", db, t->name, suffix);
	for (i = 0; i < t->ncols; i++) {
		n = fleet_column_parts(&t->cols[i], d, parts);
		for (j = 0; j < n; j++)
			bb_printf(sql, "%s`%s`", i || j ? ", " : "", parts[j].name);
	}
	bb_printf(sql, ") FORMAT RowBinary");
}

int fleet_dialect_of(const char *version, enum fleet_dialect *d)
{
	char *end;
	long major;

	if (!isdigit((unsigned char)version[0]))
		return -EINVAL;
	major = strtol(version, &end, 10);
	if (*end != '.' && *end != '\0')
		return -EINVAL;
	*d = major >= 22 ? FLEET_CURRENT : FLEET_LEGACY;
	return 0;
}

const char *fleet_dialect_name(enum fleet_dialect d)
{
	return d == FLEET_CURRENT ? "current" : "legacy";
}

int fleet_name_ok(const char *s)
{
	size_t i;

	if (!s[0] || strlen(s) > 63 || isdigit((unsigned char)s[0]))
		return 0;
	for (i = 0; s[i]; i++)
		if (!isalnum((unsigned char)s[i]) && s[i] != '_')
			return 0;
	return 1;
}

/* " ON CLUSTER `c`", or "" */
static void fleet_on_cluster(struct bytebuf *b, const struct fleet_ddl_opts *o)
{
	if (o->cluster)
		bb_printf(b, " ON CLUSTER `%s`", o->cluster);
}

static void fleet_engine_ddl(struct bytebuf *b, const struct fleet_ddl_opts *o,
			     const struct fleet_table *t)
{
	const char *merge = t->engine == FLEET_REPLACE ? "ReplacingMergeTree" : "MergeTree";

	if (o->cluster)
		/* the same path on every replica of a shard: they replicate each other */
		bb_printf(b, " ENGINE = Replicated%s('/clickhouse/tables/{shard}/%s/%s', "
			  "'{replica}')", merge, o->database, t->name);
	else
		bb_printf(b, " ENGINE = %s()", merge);
	if (t->partition_by)
		bb_printf(b, " PARTITION BY %s", t->partition_by);
	bb_printf(b, " ORDER BY (%s)", t->order_by);
}

/* CREATE TABLE for t: the table itself, or on a cluster its <name>_local */
static void fleet_table_ddl(struct bytebuf *b, const struct fleet_ddl_opts *o,
			    const struct fleet_table *t)
{
	size_t i;

	bb_printf(b, "CREATE TABLE IF NOT EXISTS `%s`.`%s%s`", o->database, t->name,
		  o->cluster ? FLEET_LOCAL_SUFFIX : "");
	fleet_on_cluster(b, o);
	bb_printf(b, " (\n");
	for (i = 0; i < t->ncols; i++) {
		bb_printf(b, "    ");
		fleet_column_ddl(b, &t->cols[i], o->dialect);
		bb_printf(b, "%s\n", i + 1 < t->ncols ? "," : "");
	}
	bb_printf(b, ")");
	fleet_engine_ddl(b, o, t);
}

/* The Distributed table over a cluster's local ones: rows of a host stay on one shard */
static void fleet_distributed_ddl(struct bytebuf *b, const struct fleet_ddl_opts *o,
				  const struct fleet_table *t)
{
	bb_printf(b, "CREATE TABLE IF NOT EXISTS `%s`.`%s`", o->database, t->name);
	fleet_on_cluster(b, o);
	bb_printf(b, " AS `%s`.`%s" FLEET_LOCAL_SUFFIX "` ENGINE = Distributed(%s, %s, %s"
		  FLEET_LOCAL_SUFFIX ", cityHash64(host))", o->database, t->name, o->cluster,
		  o->database, t->name);
}

/* Runs the statement in b (and empties b): run()'s result, or -ENOMEM */
static int fleet_run(struct bytebuf *b, int (*run)(void *ctx, const char *sql), void *ctx)
{
	int rc;

	bb_append(b, "", 1);
	rc = b->oom ? -ENOMEM : run(ctx, (const char *)b->p);
	b->len = 0;
	return rc;
}

int fleet_schema_ddl(const struct fleet_ddl_opts *o, int (*run)(void *ctx, const char *sql),
		     void *ctx)
{
	struct bytebuf b = { 0 };
	size_t i;
	int rc;

	bb_printf(&b, "CREATE DATABASE IF NOT EXISTS `%s`", o->database);
	fleet_on_cluster(&b, o);
	rc = fleet_run(&b, run, ctx);
	for (i = 0; !rc && i < FLEET_NTABLES; i++) {
		fleet_table_ddl(&b, o, &fleet_tables[i]);
		rc = fleet_run(&b, run, ctx);
		if (!rc && o->cluster) {
			fleet_distributed_ddl(&b, o, &fleet_tables[i]);
			rc = fleet_run(&b, run, ctx);
		}
	}
	if (!rc) {
		bb_printf(&b, "CREATE VIEW IF NOT EXISTS `%s`.`" FLEET_VERSION_VIEW "`",
			  o->database);
		fleet_on_cluster(&b, o);
		bb_printf(&b, " AS SELECT toUInt32(%d) AS version", FLEET_SCHEMA_VERSION);
		rc = fleet_run(&b, run, ctx);
	}
	bb_free(&b);
	return rc;
}
