/* SPDX-License-Identifier: MIT */
/*
 * The agent's ClickHouse egress (Documentation/agent.md, "Shipping to
 * ClickHouse"). The agent hands over every trace file it finished; a thread
 * of the egress reads each with the nettrace reader and turns it into
 * batches of rows for the fleet tables (fleet_schema.h). A batch is named
 * (host, agent run, stream, sequence number), written whole to the on-disk
 * spool (spool.h) before it is sent, and taken out of the spool only once
 * ClickHouse acknowledged every table's rows and then the batch's manifest
 * row. A batch sent again (after a failure, or found in the spool at start)
 * is first looked up, so the plain MergeTree tables of a single server,
 * which keep duplicates, still get each row once.
 *
 * One stream is one finished file: its batches are cut by row count only,
 * so the same file always gives the same batches, byte for byte.
 */
#ifndef RINGPIPE_AGENT_EGRESS_H
#define RINGPIPE_AGENT_EGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/bytebuf.h"

struct agent_identity;

#define EGRESS_DEFAULT_SPOOL_MB 256
#define EGRESS_BATCH_ROWS 100000u	/* events per batch at most */
#define EGRESS_MAX_SERVERS 8		/* --clickhouse URLs */
#define EGRESS_MAX_SENDERS 8		/* --clickhouse-senders */
/* inserts in flight at once: two keep the server busy while the other
 * insert waits on its disk and ZooKeeper (Documentation/fleet.md) */
#define EGRESS_DEFAULT_SENDERS 2

struct egress_opts {
	size_t sz;			/* sizeof(struct egress_opts) */
	/* ClickHouse's HTTP interface (clickhouse.h): one server, or several
	 * servers of one cluster (the same database), tried in turn: a failed
	 * send goes to the next one at once, and backs off only once every
	 * one of them failed in a row */
	const char *urls[EGRESS_MAX_SERVERS];
	size_t nurls;
	/* the servers are the replicas of one shard of a cluster (fleet init
	 * --cluster): rows go into, and are looked up in, its replicated
	 * TABLE_local tables, which drop a copy of a block one of them took
	 * already; not the Distributed TABLE, whose synchronous insert needs
	 * every shard up */
	bool shard;
	/* instead of urls: an OTLP/HTTP receiver (http[s]://HOST[:PORT][/PATH]),
	 * sent the same files as OTLP logs (egress_otlp.h); at most once per
	 * acknowledged request, at least once across a lost answer */
	const char *otlp_url;
	const char *otlp_headers;	/* more header lines ("K: V\r\n"), or NULL */
	/* https: the CAs to trust (NULL: $SSL_CERT_FILE, else the system's)
	 * and a client certificate and its key (NULL: none), http_conn.h's
	 * http_tls; the same for every server and the OTLP receiver */
	const char *cacert, *cert, *key;
	const char *compress;		/* request bodies: "gzip", "none" (NULL) */
	const char *user;		/* NULL: the URL's */
	const char *password_file;	/* NULL: the URL's password */
	const char *host_id;		/* NULL: the host name */
	const char *spool_dir;		/* created when missing */
	/* where the files are: the shipping notes (egress_sidecar.h) a
	 * previous run left there are taken up; NULL: none */
	const char *notes_dir;
	uint64_t spool_bytes;		/* 0: EGRESS_DEFAULT_SPOOL_MB MiB */
	uint32_t batch_rows;		/* 0: EGRESS_BATCH_ROWS */
	/* "legacy" or "current": the tables' types, so that batches are made
	 * before the server first answers; NULL: the server's version says */
	const char *dialect;
	bool quiet;
	/* ClickHouse inserts in flight at once, each on its own connection
	 * (1 to EGRESS_MAX_SENDERS); 0: EGRESS_DEFAULT_SENDERS. OTLP: 1. */
	uint32_t senders;
};

struct egress;

/* Opens the spool and starts the thread; NULL with the reason on stderr.
 * An unreachable server is not an error: batches wait in the spool. */
struct egress *egress_start(const struct egress_opts *o);

/*
 * A finished trace file to ship. id: the one process whose file it is
 * (its container and pod tag every event), or NULL for a file of many
 * processes (the agent's own trace), whose events carry their own pid.
 * droppable: it comes from a Drop session, so when the egress is full its
 * events may be counted as lost (reason "egress_full") instead of shipped.
 */
void egress_file(struct egress *e, const char *path, const struct agent_identity *id,
		 bool droppable);

/* Is the egress full (a batch waits for room in the spool)? The agent then
 * throttles its Block sessions (rp_session_hold_drain()), so that their
 * producers park. */
bool egress_full(const struct egress *e);

/* The egress's part of `agent status`: text lines, or a JSON object. */
void egress_status(struct egress *e, bool json, struct bytebuf *out);

/*
 * Ships what was handed over, waiting at most wait_ms for the server, then
 * stops the thread and frees. What is not acknowledged by then stays in the
 * spool for the next run. 0, or 1 when files were left unshipped.
 */
int egress_stop(struct egress *e, uint32_t wait_ms);

#endif /* RINGPIPE_AGENT_EGRESS_H */
