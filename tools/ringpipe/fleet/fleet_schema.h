/* SPDX-License-Identifier: MIT */
/*
 * The fleet schema: every ClickHouse table ringpipe writes, its columns in
 * order with their kinds, its engine and keys. This header is the one place
 * they are written down: `ringpipe fleet init` generates its DDL from these
 * lists and the egress encodes its RowBinary rows from them
 * (fleet_row_encode()), so the two cannot disagree on a column's place or
 * type. Documentation/fleet.md shows the resulting tables.
 *
 * Two dialects. A current server (22 and later) gets DateTime64(9),
 * LowCardinality(String), Map(String, String) and column codecs; an older
 * one (18.x to 21.x; 18.16 is what installs here) has none of them without
 * experimental settings, and gets the legacy forms: a time is a DateTime of
 * seconds plus a UInt32 NAME_ns of nanoseconds within it, a tag is a plain
 * String, and name/value fields are a Nested NAME(name String, value
 * String), that is two parallel arrays NAME.name and NAME.value.
 */
#ifndef RINGPIPE_FLEET_SCHEMA_H
#define RINGPIPE_FLEET_SCHEMA_H

#include <stddef.h>
#include <stdint.h>

#include "util/bytebuf.h"

enum fleet_dialect {
	FLEET_LEGACY,		/* ClickHouse before 22 */
	FLEET_CURRENT,		/* ClickHouse 22 and later */
};

/* What a column holds; fleet_column_parts() gives its ClickHouse type per dialect. */
enum fleet_kind {
	FK_U8,
	FK_U32,
	FK_U64,
	FK_I32,
	FK_STRING,		/* any bytes */
	FK_TAG,			/* a string with few distinct values (host, provider, container) */
	FK_UUID,		/* 16 bytes in text order */
	FK_DATETIME,		/* seconds since the epoch */
	FK_TIME,		/* nanoseconds since the epoch */
	FK_U64_ARRAY,
	FK_STRING_ARRAY,
	FK_FIELDS,		/* name/value string pairs (an event's decoded fields) */
};

/*
 * The tables' columns in their order: C(INDEX, "name", kind). A row is an
 * array of union fleet_value indexed by INDEX.
 */
#define FLEET_EVENTS_COLUMNS(C)						\
	C(FE_TIME, "time", FK_TIME)					\
	C(FE_HOST, "host", FK_TAG)					\
	C(FE_BOOT_ID, "boot_id", FK_UUID)	/* the host's kernel boot */	\
	C(FE_CONTAINER_ID, "container_id", FK_TAG)			\
	C(FE_POD_UID, "pod_uid", FK_TAG)				\
	C(FE_PID, "pid", FK_U32)		/* host pid */			\
	C(FE_TID, "tid", FK_U32)					\
	C(FE_THREAD_SEQ, "thread_seq", FK_U32)	/* the thread's event sequence number */ \
	C(FE_PROVIDER, "provider", FK_TAG)				\
	C(FE_EVENT_ID, "event_id", FK_U32)				\
	C(FE_EVENT_NAME, "event_name", FK_TAG)				\
	C(FE_LEVEL, "level", FK_U8)					\
	C(FE_KEYWORDS, "keywords", FK_U64)				\
	C(FE_ACTIVITY_ID, "activity_id", FK_UUID)			\
	C(FE_RELATED_ACTIVITY_ID, "related_activity_id", FK_UUID)	\
	C(FE_STACK_ID, "stack_id", FK_U64)	/* 0: none; else fleet_stack_id() */ \
	C(FE_PAYLOAD, "payload", FK_STRING)	/* the event's payload as written */ \
	C(FE_FIELDS, "fields", FK_FIELDS)	/* the payload decoded, as text */ \
	C(FE_AGENT_RUN, "agent_run", FK_UUID)	/* with stream and batch_seq: the batch */ \
	C(FE_STREAM, "stream", FK_U32)					\
	C(FE_BATCH_SEQ, "batch_seq", FK_U64)

#define FLEET_EVENT_META_COLUMNS(C)					\
	C(FM_HOST, "host", FK_TAG)					\
	C(FM_BOOT_ID, "boot_id", FK_UUID)				\
	C(FM_PID, "pid", FK_U32)					\
	C(FM_PROVIDER, "provider", FK_TAG)				\
	C(FM_EVENT_ID, "event_id", FK_U32)				\
	C(FM_EVENT_NAME, "event_name", FK_TAG)				\
	C(FM_VERSION, "version", FK_U32)				\
	C(FM_LEVEL, "level", FK_U8)					\
	C(FM_KEYWORDS, "keywords", FK_U64)				\
	C(FM_OPCODE, "opcode", FK_U8)					\
	C(FM_FIELD_NAMES, "field_names", FK_STRING_ARRAY)		\
	C(FM_FIELD_TYPES, "field_types", FK_STRING_ARRAY)

#define FLEET_STACKS_COLUMNS(C)						\
	C(FS_HOST, "host", FK_TAG)					\
	C(FS_BOOT_ID, "boot_id", FK_UUID)				\
	C(FS_PID, "pid", FK_U32)					\
	C(FS_STACK_ID, "stack_id", FK_U64)				\
	C(FS_FRAMES, "frames", FK_U64_ARRAY)	/* return addresses, innermost first */ \
	C(FS_SYMBOLS, "symbols", FK_STRING_ARRAY)	/* one per frame, "" if unknown */

#define FLEET_PROCESSES_COLUMNS(C)					\
	C(FP_TIME, "time", FK_TIME)		/* when the agent saw it */	\
	C(FP_HOST, "host", FK_TAG)					\
	C(FP_BOOT_ID, "boot_id", FK_UUID)				\
	C(FP_PID, "pid", FK_U32)					\
	C(FP_START_TIME, "start_time", FK_U64)	/* /proc/PID/stat field 22 */	\
	C(FP_NSPIDS, "nspids", FK_U64_ARRAY)	/* NSpid, outermost first */	\
	C(FP_COMM, "comm", FK_STRING)					\
	C(FP_CGROUP_PATH, "cgroup_path", FK_STRING)			\
	C(FP_CONTAINER_ID, "container_id", FK_TAG)			\
	C(FP_POD_UID, "pod_uid", FK_TAG)				\
	C(FP_SOURCE, "source", FK_TAG)		/* joined, dotnet, kernel */	\
	C(FP_EXIT_CODE, "exit_code", FK_I32)	/* -1 while it runs */

#define FLEET_CONTAINERS_COLUMNS(C)					\
	C(FC_TIME, "time", FK_TIME)					\
	C(FC_HOST, "host", FK_TAG)					\
	C(FC_CONTAINER_ID, "container_id", FK_TAG)			\
	C(FC_POD_UID, "pod_uid", FK_TAG)				\
	C(FC_RUNTIME, "runtime", FK_TAG)				\
	C(FC_QOS, "qos", FK_TAG)					\
	C(FC_CGROUP_PATH, "cgroup_path", FK_STRING)

#define FLEET_LOSSES_COLUMNS(C)						\
	C(FL_TIME, "time", FK_TIME)					\
	C(FL_HOST, "host", FK_TAG)					\
	C(FL_BOOT_ID, "boot_id", FK_UUID)				\
	C(FL_CONTAINER_ID, "container_id", FK_TAG)			\
	C(FL_PID, "pid", FK_U32)					\
	C(FL_TID, "tid", FK_U32)					\
	C(FL_REASON, "reason", FK_TAG)		/* full, too_big, no_session, ... */ \
	C(FL_COUNT, "count", FK_U64)					\
	C(FL_AGENT_RUN, "agent_run", FK_UUID)				\
	C(FL_STREAM, "stream", FK_U32)					\
	C(FL_BATCH_SEQ, "batch_seq", FK_U64)

/* The manifest: one row per batch, inserted after the batch's rows */
#define FLEET_BATCHES_COLUMNS(C)					\
	C(FB_HOST, "host", FK_TAG)					\
	C(FB_BOOT_ID, "boot_id", FK_UUID)				\
	C(FB_AGENT_RUN, "agent_run", FK_UUID)	/* one per agent start */	\
	C(FB_STREAM, "stream", FK_U32)					\
	C(FB_SEQ, "seq", FK_U64)		/* 1, 2, ... per stream */	\
	C(FB_EVENTS_ROWS, "events_rows", FK_U32)			\
	C(FB_EVENT_META_ROWS, "event_meta_rows", FK_U32)		\
	C(FB_STACKS_ROWS, "stacks_rows", FK_U32)			\
	C(FB_PROCESSES_ROWS, "processes_rows", FK_U32)			\
	C(FB_CONTAINERS_ROWS, "containers_rows", FK_U32)		\
	C(FB_LOSSES_ROWS, "losses_rows", FK_U32)			\
	C(FB_FIRST_TIME, "first_time", FK_TIME)				\
	C(FB_LAST_TIME, "last_time", FK_TIME)				\
	C(FB_SENT, "sent", FK_DATETIME)					\
	C(FB_BYTES, "bytes", FK_U64)		/* of the batch's RowBinary bodies */

#define FLEET_COLUMN_INDEX(index, name, kind) index,
enum fleet_events_column { FLEET_EVENTS_COLUMNS(FLEET_COLUMN_INDEX) FE_NCOLS };
enum fleet_event_meta_column { FLEET_EVENT_META_COLUMNS(FLEET_COLUMN_INDEX) FM_NCOLS };
enum fleet_stacks_column { FLEET_STACKS_COLUMNS(FLEET_COLUMN_INDEX) FS_NCOLS };
enum fleet_processes_column { FLEET_PROCESSES_COLUMNS(FLEET_COLUMN_INDEX) FP_NCOLS };
enum fleet_containers_column { FLEET_CONTAINERS_COLUMNS(FLEET_COLUMN_INDEX) FC_NCOLS };
enum fleet_losses_column { FLEET_LOSSES_COLUMNS(FLEET_COLUMN_INDEX) FL_NCOLS };
enum fleet_batches_column { FLEET_BATCHES_COLUMNS(FLEET_COLUMN_INDEX) FB_NCOLS };
#undef FLEET_COLUMN_INDEX

struct fleet_column {
	const char *name;
	enum fleet_kind kind;
};

enum fleet_engine {
	FLEET_APPEND,		/* MergeTree: every row counts (events, losses, the manifest) */
	FLEET_REPLACE,		/* ReplacingMergeTree: the same key sent again is one row */
};

struct fleet_table {
	const char *name;
	const struct fleet_column *cols;
	size_t ncols;
	enum fleet_engine engine;
	const char *partition_by;	/* NULL: one partition (small tables) */
	const char *order_by;
};

/*
 * The tables in the order fleet init creates them, the manifest last:
 * T(INDEX, "name", COLUMNS, engine, PARTITION BY or NULL, ORDER BY). Events
 * and losses are read by host and time range, or by container: the key
 * leads with host (also what a cluster shards by), then container_id (a
 * container lives on one host, and its rows are then contiguous), then
 * time; one partition a day keeps a time range to a few parts and lets old
 * days be dropped whole. The small tables are keyed by what identifies a
 * row, so that a row sent again replaces itself.
 */
#define FLEET_TABLES(T)							\
	T(FLEET_EVENTS, "events", FLEET_EVENTS_COLUMNS, FLEET_APPEND,	\
	  "toYYYYMMDD(time)", "host, container_id, time")			\
	T(FLEET_EVENT_META, "event_meta", FLEET_EVENT_META_COLUMNS, FLEET_REPLACE, \
	  NULL, "host, boot_id, pid, provider, event_id, version")	\
	T(FLEET_STACKS, "stacks", FLEET_STACKS_COLUMNS, FLEET_REPLACE,	\
	  NULL, "host, boot_id, pid, stack_id")				\
	T(FLEET_PROCESSES, "processes", FLEET_PROCESSES_COLUMNS, FLEET_REPLACE, \
	  NULL, "host, boot_id, pid, start_time")			\
	T(FLEET_CONTAINERS, "containers", FLEET_CONTAINERS_COLUMNS, FLEET_REPLACE, \
	  NULL, "host, container_id")					\
	T(FLEET_LOSSES, "losses", FLEET_LOSSES_COLUMNS, FLEET_APPEND,	\
	  "toYYYYMMDD(time)", "host, container_id, time")			\
	T(FLEET_BATCHES, "batches", FLEET_BATCHES_COLUMNS, FLEET_APPEND,	\
	  "toYYYYMM(sent)", "host, agent_run, stream, seq")

#define FLEET_TABLE_INDEX(index, name, columns, engine, partition_by, order_by) index,
enum fleet_table_id { FLEET_TABLES(FLEET_TABLE_INDEX) FLEET_NTABLES };
#undef FLEET_TABLE_INDEX

extern const struct fleet_table fleet_tables[FLEET_NTABLES];

struct fleet_str {
	const char *p;
	size_t len;
};

/* One column's value, by its kind */
union fleet_value {
	uint64_t u;		/* FK_U8, FK_U32, FK_U64; FK_DATETIME: seconds; FK_TIME: ns */
	int64_t i;		/* FK_I32 */
	struct fleet_str s;	/* FK_STRING, FK_TAG */
	uint8_t uuid[16];	/* FK_UUID, in text order */
	struct {
		const uint64_t *v;
		size_t n;
	} u64s;			/* FK_U64_ARRAY */
	struct {
		const struct fleet_str *v;
		size_t n;
	} strs;			/* FK_STRING_ARRAY */
	struct {
		const struct fleet_str *names, *values;
		size_t n;
	} fields;		/* FK_FIELDS */
};

/* A column as the server lists it (system.columns): a kind may be two of them */
struct fleet_column_part {
	char name[64];
	const char *type;
};

/* The ClickHouse columns col is in dialect d: how many (1 or 2), in parts. */
int fleet_column_parts(const struct fleet_column *col, enum fleet_dialect d,
		       struct fleet_column_part parts[2]);

/* Appends one row of t (t->ncols values, in column order) in RowBinary. */
void fleet_row_encode(struct bytebuf *b, enum fleet_dialect d, const struct fleet_table *t,
		      const union fleet_value *row);

/*
 * The row of t that starts at p, as fleet_row_encode() wrote it in
 * dialect d: its length, with where each column starts (offsets from p)
 * in at[0..t->ncols) unless at is NULL. 0 when the row runs past end.
 */
size_t fleet_row_measure(const uint8_t *p, const uint8_t *end, enum fleet_dialect d,
			 const struct fleet_table *t, size_t *at);

/*
 * The schema's version, which a database records in a view of one row
 * (SELECT version FROM schema_version), created after every table, so a
 * database with the version has all of them. Version 1 is the tables
 * without that view, as ringpipe made them before it: their stack ids were
 * FNV-1a's algorithm from an offset basis with a digit dropped
 * (1469598103934665603). Version 2's are FNV-1a (fleet_stack_id()).
 * fleet_version.h reads a database's version and migrates version 1.
 */
#define FLEET_SCHEMA_VERSION 2
#define FLEET_VERSION_VIEW "schema_version"

/*
 * The stack id of frames ips[0..n), innermost first, whose first nk are the
 * kernel's, as schema version `version` (1 or 2) names it: FNV-1a 64 over
 * each frame's 8 bytes, least significant first, then nk's 8 bytes the
 * same way; never 0 (0 is "no stack": a hash of 0 is 1). A function of the
 * stack alone, so every batch, file and agent run names a stack the same.
 */
uint64_t fleet_stack_id(unsigned version, const uint64_t *ips, uint32_t n, uint32_t nk);

/*
 * The version-2 id of the stack of frames ips[0..n) that version 1 named
 * v1_id: 0, or -ENOENT when v1_id is no version-1 id of these frames (a
 * version-2 id already, or not ringpipe's). Version 1 rows do not keep how
 * many frames are the kernel's: that count is the one whose version-1 id
 * is v1_id.
 */
int fleet_stack_id_upgrade(uint64_t v1_id, const uint64_t *ips, uint32_t n, uint64_t *v2_id);

/* On a cluster (fleet init --cluster) every table is <name>_local, the
 * replicated table of each shard, under the Distributed <name> */
#define FLEET_LOCAL_SUFFIX "_local"

/* "INSERT INTO db.table (columns...) FORMAT RowBinary" into sql. */
void fleet_insert_sql(struct bytebuf *sql, enum fleet_dialect d, const char *db,
		      const struct fleet_table *t);

/* The same into db.<table name><suffix>: FLEET_LOCAL_SUFFIX for a
 * cluster's replicated table of one shard */
void fleet_insert_sql_into(struct bytebuf *sql, enum fleet_dialect d, const char *db,
			   const struct fleet_table *t, const char *suffix);

/*
 * The dialect for a server's `SELECT version()` text ("18.16.1"): 0, or
 * -EINVAL when it does not start with a major version number.
 */
int fleet_dialect_of(const char *version, enum fleet_dialect *d);
const char *fleet_dialect_name(enum fleet_dialect d);

struct fleet_ddl_opts {
	enum fleet_dialect dialect;
	const char *database;
	const char *cluster;	/* NULL: plain local tables */
};

/*
 * Calls run() with each statement that creates the schema, in order (the
 * database, then each table; on a cluster each table's replicated local
 * table <name>_local, then the Distributed <name> over it; last the
 * version's view, on every server of a cluster), every one CREATE ... IF
 * NOT EXISTS. Stops at the first nonzero run() and returns it; -ENOMEM if
 * a statement cannot be built; 0.
 */
int fleet_schema_ddl(const struct fleet_ddl_opts *o, int (*run)(void *ctx, const char *sql),
		     void *ctx);

/* Is s a name the DDL may use unquoted ([A-Za-z_][A-Za-z0-9_]*, 1..63 bytes)? */
int fleet_name_ok(const char *s);

#endif /* RINGPIPE_FLEET_SCHEMA_H */
