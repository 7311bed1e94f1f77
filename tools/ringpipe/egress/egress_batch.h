/* SPDX-License-Identifier: MIT */
/*
 * The egress's batches (egress.h): how a finished trace file becomes
 * batches of fleet rows, and how a batch is laid out in the spool.
 *
 * A spooled batch is the batch's name and, per table, the RowBinary body of
 * one INSERT and its row count, in the order they are sent: losses first,
 * then events and the small tables, the manifest row (batches) last:
 *
 *   "RPEB" u8 version u8 dialect u16 host_len host[host_len]
 *   agent_run[16] u32 stream u64 seq u8 nsections
 *   nsections x { u8 table u32 rows u64 len body[len] }      little-endian
 */
#ifndef RINGPIPE_AGENT_EGRESS_BATCH_H
#define RINGPIPE_AGENT_EGRESS_BATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/bytebuf.h"
#include "fleet/fleet_schema.h"

struct agent_identity;
struct nt_rec;

/* What a batch is encoded as: the fleet tables' rows for ClickHouse
 * (this file), or an OTLP logs request (egress_otlp.h) */
enum egress_format {
	EGRESS_ROWS,
	EGRESS_OTLP,
};

/* What names every batch of this agent run */
struct egress_name {
	enum egress_format format;
	const char *host;
	uint8_t boot_id[16];
	uint8_t agent_run[16];
	enum fleet_dialect dialect;
	uint32_t batch_rows;	/* events per batch at most */
	uint64_t batch_bytes;	/* and the events' RowBinary bytes, reached at most once */
};

struct egress_section {
	enum fleet_table_id table;
	uint32_t rows;
	const uint8_t *body;
	size_t len;
};

/* A spooled batch, read in place (the pointers are into its bytes) */
struct egress_batch {
	uint8_t dialect;
	uint8_t stack_ids;	/* the fleet schema version its stack ids are of */
	char host[256];
	uint8_t agent_run[16];
	uint32_t stream;
	uint64_t seq;
	size_t nsections;
	struct egress_section sections[FLEET_NTABLES];
};

/* Reads a spooled batch: 0, or -EBADMSG when p is not one. */
int egress_batch_parse(const void *p, size_t len, struct egress_batch *b);

/*
 * A batch that an agent before fleet schema version 2 spooled (stack_ids
 * 1) given version 2's stack ids, in place in the bytes b was parsed from
 * (which must be writable): its stacks rows' ids from their frames
 * (fleet_stack_id_upgrade()) and its events' ids after them. The bytes are
 * then those the current agent makes of the same events, the length the
 * same. 0 (also for a batch of the current version), -EBADMSG for a row
 * that does not read, or -ENOMEM.
 */
int egress_batch_upgrade(struct egress_batch *b);

/* Has t the agent_run, stream and batch_seq columns that tie a row to its batch? */
bool egress_table_counted(enum fleet_table_id t);

/* A loss to ship: what a batch of only losses says */
struct egress_loss {
	uint64_t time_ns;
	uint32_t pid;
	uint32_t tid;
	const char *container_id;
	const char *reason;
	uint64_t count;
	/* the process, for a receiver that names it (OTLP); NULL / 0: unknown */
	const char *comm, *pod_uid;
	uint64_t start_time;
};

/* A batch of losses only (stream, seq) into out. 0, or -ENOMEM. */
int egress_loss_batch(const struct egress_name *n, uint32_t stream, uint64_t seq,
		      const struct egress_loss *l, size_t nl, struct bytebuf *out);

struct egress_source;

/*
 * A finished trace file, to be cut into batches of stream `stream`. id: the
 * process it belongs to, or NULL (each event's own pid, no container).
 * NULL with errno set and why in err.
 */
struct egress_source *egress_source_open(const char *path, const struct agent_identity *id,
					 uint32_t stream, char *err, size_t errlen);
/*
 * The file's next batch into out (emptied first): 1, or 0 when the file
 * gave all of them, or -ENOMEM. A file that turns out damaged ends there:
 * its last batch says so with an "unreadable" loss row, and why goes in
 * err (non-empty).
 */
int egress_source_next(struct egress_source *s, const struct egress_name *n, struct bytebuf *out,
		       char *err, size_t errlen);
void egress_source_close(struct egress_source *s);

/* For other encodings of the same events (egress_otlp.c): */

/* One event of a file, its fields decoded as egress_source_next() puts
 * them in rows (valid until the next call) */
struct egress_event {
	const struct nt_rec *rec;	/* its metadata, thread, activity ids */
	uint64_t time_ns;		/* wall clock, ns since 1970 */
	uint32_t pid;			/* on the host */
	size_t nfields;			/* 0: none decoded */
	const struct fleet_str *names, *values;
};

/* The file's next event: 1, or 0 at its end (when it turns out damaged,
 * with why in err and an "unreadable" loss among its losses). */
int egress_source_event(struct egress_source *s, struct egress_event *ev, char *err,
			size_t errlen);
/* The process the file belongs to, NULL for a file of many */
const struct agent_identity *egress_source_identity(const struct egress_source *s);
/* Has the file given all its batches? */
bool egress_source_ended(const struct egress_source *s);
/* The stream its batches are of */
uint32_t egress_source_stream(const struct egress_source *s);
/* The sequence number of the file's next batch (1, 2, ...), taken */
uint64_t egress_source_take_seq(struct egress_source *s);
/* What the whole file lost, once its events are all read: each thread's
 * sequence gaps, EventsLost beyond them, and whether it was unreadable;
 * each given to fn. */
void egress_source_losses(struct egress_source *s,
			  void (*fn)(void *arg, const struct egress_loss *l), void *arg);

/* The events a file holds and its EventsLost, without rows (a file given
 * up for room). 0, or -errno when it cannot be read. */
int egress_file_count(const char *path, uint64_t *events, uint64_t *lost);

#endif /* RINGPIPE_AGENT_EGRESS_BATCH_H */
