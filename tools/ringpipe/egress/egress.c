// SPDX-License-Identifier: MIT
/*
 * The agent's ClickHouse egress (egress.h): a cutter thread and senders
 * (egress_opts.senders), so that batches are cut while the server takes
 * the ones before, two or more at a time:
 *
 *   the cutter:  egress_file() ─► files ─► batches (egress_batch.c) ─► spool_put() ─┐
 *                                                       the oldest no sender holds │
 *   each sender: ClickHouse ◄── losses, events, small tables ◄── batch ◄───────────┘
 *                ◄── the manifest rows of up to MANIFEST_BATCHES batches, last
 *                all 200 ─► spool_ack()
 *
 * Exactly once on a plain MergeTree, which keeps a row sent twice: a batch
 * is sent blind only on its first attempt in the run that made it. Sent
 * again (the attempt failed, or the batch is a previous run's, found in
 * the spool), it is looked up first: a manifest row means all of it
 * arrived (the manifest goes last) and it is acknowledged without sending;
 * otherwise each counted table (events, losses) is asked how many rows of
 * this batch it has, and only a table that has none is sent. That is sound
 * because one RowBinary INSERT of a batch is one block: the server writes
 * a block as one part per partition, made visible when the part is
 * renamed into place, so a table's rows of a batch are all there or none,
 * as long as the batch falls in one partition (a day); one that spans
 * midnight is two parts, and a crash between them leaves a part count
 * that `fleet check` reports. The small tables are ReplacingMergeTree,
 * keyed by what the rows are: sending them again only replaces them.
 *
 * Several servers: a failed send moves to the next at once, and the same
 * batch, looked up there, goes to it. On a cluster the servers are the
 * replicas of one shard and the tables its replicated TABLE_local ones
 * (egress_opts.shard): a replica that has not fetched a batch another one
 * took finds none of it and is sent it again, and drops it as a block it
 * has the hash of (ZooKeeper keeps the shard's last 100), so that too
 * lands once.
 *
 * A full spool: the file at hand waits (its next batch is held in memory)
 * and egress_full() says so, which holds the agent's Block sessions. Files
 * of Drop sessions that arrive meanwhile are not shipped: their events are
 * counted as lost ("egress_full"), and that loss goes out in a batch of its
 * own, which may use the spool's last LOSS_RESERVE bytes that event batches
 * leave free, so the losses are shipped first when the server returns.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "core/atomics.h"
#include "fleet/clickhouse.h"
#include "core/clock.h"
#include "egress/egress.h"
#include "egress/egress_batch.h"
#include "egress/egress_otlp.h"
#include "egress/egress_sidecar.h"
#include "fleet/fleet_version.h"
#include "wire/http_conn.h"
#include "host/identity.h"
#include "nettrace_read.h"
#include "wire/otlp_logs.h"
#include "wire/rowbinary.h"
#include "egress/spool.h"
#include "util/thread.h"
#include "common/tool_util.h"

#define CH_TIMEOUT_MS 10000
#define BACKOFF_FIRST_MS 100
#define BACKOFF_MAX_MS 10000
#define IDLE_WAIT_MS 200
#define OTLP_BATCH_ROWS 8192u	/* records per OTLP request at most */
#define OTLP_BATCH_BYTES (2u << 20)	/* and its bytes, passed by one record at most */
#define LOSS_MAX 4096		/* distinct (pid, container) losses held for shipping */
/* The manifest rows of this many batches go in one insert at most, and
 * wait this long at most for more, or until their batches hold half
 * of the spool (they stay in it until then, and the cutter waits for
 * room): an insert of a few rows costs about what one of 50,000 does on
 * 18.16 (on a replicated table, a block registered in ZooKeeper each),
 * so one per batch took a third of the time. While there are no more
 * batches they go at once. A replicated table drops a block sent again
 * only when it is the same block, so a batch whose group of manifest
 * rows failed, sent again alone, may leave a second copy of its row
 * there; the row is a function of the batch, and fleet check counts
 * copies of it once. */
#define MANIFEST_BATCHES 16
#define MANIFEST_HOLD_NS 1000000000ull

struct egress_pending {
	char *path;
	struct egress_sidecar note;	/* its name, how it is cut, whose it is */
	struct egress_pending *next;
};

/*
 * One sender: its own keep-alive connection, the batch it sends now and
 * the manifest rows it holds. Several send at once (egress_opts.senders):
 * the server spends much of an insert waiting (a part written and
 * renamed, a replicated block registered in ZooKeeper), and a second
 * insert meanwhile takes rows it would not otherwise. A batch is sent by
 * one sender at a time: a sender takes the oldest batch no other one
 * holds (oldest_free()). A batch looked up before it is sent (again) goes alone,
 * with nothing else in flight or held, so the lookups see what is in and
 * nothing arrives beside them: recovery is one batch at a time, as with
 * one sender.
 */
struct egress_sender {
	struct egress *e;
	pthread_t thread;
	struct ch_client ch;		/* to e->servers[server] */
	bool have_ch;			/* ch was initialised */
	size_t server;
	/* under e->pick: the batch being sent (0: none), and the batches
	 * whose rows are in, their manifest rows waiting to go in one insert
	 * (send_manifests()); still in the spool until that is in */
	uint64_t flight;
	struct bytebuf manifest_rows;
	uint64_t manifest_nums[MANIFEST_BATCHES];
	size_t manifest_n;
	uint32_t manifest_nrows;
	uint64_t manifest_bytes;	/* their batches' bytes */
	uint8_t manifest_dialect;
	uint64_t manifest_since_ns;	/* when the first of them came */
};

struct egress {
	struct egress_opts o;
	char host[256];
	struct egress_name name;
	struct ch_target servers[EGRESS_MAX_SERVERS];
	char where[EGRESS_MAX_SERVERS][270];	/* each one's HOST:PORT, for messages */
	/* under lock: the server the senders use; a failure moves it on */
	size_t nservers, server;
	size_t failed_in_row;		/* under lock: sends failed since the last success */
	const char *table_suffix;	/* "", or FLEET_LOCAL_SUFFIX with o.shard */
	/* --otlp: the receiver, its path, and the notes' suffix (a file may go
	 * to both sinks, each with its own note) */
	bool otlp;
	struct http_conn http;
	char otlp_path[1024];
	const char *note_suffix;
	struct spool *spool;
	uint64_t spool_max, loss_reserve;
	pthread_t cutter;
	struct egress_sender senders[EGRESS_MAX_SENDERS];
	size_t nsenders, senders_running;	/* senders_running: under lock */
	/* which sender sends which batch: the senders' flight and manifest
	 * rows, failed_num, alone; and every spool_ack(), so
	 * that a batch is taken out and let go of at once (a sender reads
	 * the batch it holds outside the lock) */
	pthread_mutex_t pick;
	pthread_mutex_t lock;		/* the queue, the losses, the status, wakes */
	pthread_cond_t cond;		/* wakes either thread: wake() */
	uint64_t wakes;			/* under lock: how many wake() calls */
	struct egress_pending *head, **tail;
	size_t npending;
	int quit;			/* atomic: stop now */
	int stopping;			/* atomic: stop once all is shipped */
	int full;			/* atomic */
	int done;			/* atomic: every sender returned */
	int cutter_done;		/* atomic: the cutter returned */
	bool cutting;			/* under lock: a file is being cut */
	/* atomic: the dialect is in name.dialect; rows are encoded in the
	 * server's, so the cutter waits for the sender to learn it */
	int dialect_known;
	/* under pick: the database holds the schema version whose stack ids
	 * the batches carry; nothing is sent before */
	bool schema_checked;
	bool said_upgrade;	/* under pick: the first batch of version 1 was said */
	/* the cutter's own */
	struct egress_source *cur;
	char *cur_path;
	struct egress_name cur_name;	/* the batches' name: a note found may be a
					 * previous run's */
	struct bytebuf held;		/* a batch made, waiting for room in the spool */
	struct bytebuf loss_batch;
	uint32_t loss_stream;		/* the next loss batch's; 0: not taken yet */
	bool have_held;
	uint32_t next_stream;		/* under lock */
	uint64_t retry_at_ns, backoff_ms;	/* under lock */
	bool outage;				/* under lock */
	/* under pick: the last spooled batch a failure left in doubt (its
	 * own send, or a manifest insert failed): this and every older one
	 * is looked up when sent again; 0: none (numbers start at 1) */
	uint64_t failed_num;
	struct egress_sender *alone;	/* under pick: sends a batch looked up */
	/* losses waiting for a batch (under lock) */
	struct egress_loss_acc {
		uint32_t pid;
		const char *reason;	/* a literal */
		char container_id[65];
		char comm[17], pod_uid[37];
		uint64_t start_time;
		uint64_t count;
		uint64_t time_ns;
	} *losses;
	size_t nlosses, caplosses;
	/* status (under lock) */
	char last_error[512];
	uint64_t batches_sent, batches_already, rows_sent[FLEET_NTABLES], bytes_sent;
	uint64_t retries, outages, files_done, files_given_up, lost_full, unshipped;
	uint64_t records_sent, records_rejected, batches_rejected;	/* OTLP */
	/* the time some sender was at the receiver: when it is most of the
	 * time, the receiver sets the pace */
	uint64_t send_ns;
	uint64_t all_busy_ns;		/* the time every sender was there */
	size_t busy;			/* senders at the receiver now */
	uint64_t busy_since_ns, all_busy_since_ns;
	/* from the start of the first round that sent something to the end
	 * of the last one: the rows sent over this is the rate the receiver
	 * took them at, without the wait for the first file and the last */
	uint64_t first_send_ns, last_sent_ns;
};

static void take_notes(struct egress *e, const char *dir);
#define egress_say(e, ...)                                                          \
	tool_say((e)->o.quiet,                                                      \
		 (e)->otlp ? "ringpipe agent: otlp egress: " : "ringpipe agent: egress: ", \
		 __VA_ARGS__)

/* ---- names ------------------------------------------------------------------- */

static void read_boot_id(uint8_t id[16])
{
	char text[64] = "";
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");

	if (f) {
		if (!fgets(text, sizeof(text), f))
			text[0] = 0;
		fclose(f);
	}
	text[strcspn(text, "\n")] = 0;
	if (rb_uuid_parse(text, id))
		memset(id, 0, 16);
}

/* A random (version 4) UUID: one per start of the agent */
static int new_run_id(uint8_t id[16])
{
	if (getrandom(id, 16, 0) != 16)
		return -errno;
	id[6] = (uint8_t)((id[6] & 0x0f) | 0x40);
	id[8] = (uint8_t)((id[8] & 0x3f) | 0x80);
	return 0;
}

/* Sets *tls and *encoding from the options: 0, or -EINVAL after saying why */
static int egress_transport(const struct egress *e, struct http_tls *tls,
			    enum http_body_encoding *encoding)
{
	char err[512];

	if (http_tls_set(tls, e->o.cacert, e->o.cert, e->o.key, err, sizeof(err))) {
		fprintf(stderr, "ringpipe agent: %s\n", err);
		return -EINVAL;
	}
	*encoding = HTTP_BODY_IDENTITY;
	if (e->o.compress && http_body_encoding_parse(e->o.compress, encoding)) {
		fprintf(stderr, "ringpipe agent: --compress must be gzip or none, not '%s'\n",
			e->o.compress);
		return -EINVAL;
	}
	return 0;
}

/* http[s]://HOST[:PORT][/PATH]: PATH is where logs go when it ends in
 * /v1/logs, else the base that /v1/logs is added to (as OTLP exporters do
 * with OTEL_EXPORTER_OTLP_ENDPOINT) */
static int otlp_setup(struct egress *e)
{
	const char *url = e->o.otlp_url;
	enum http_body_encoding encoding;
	struct http_tls tls;
	struct http_url u;
	char why[256];
	size_t pl;

	if (http_url_parse(&u, url, "4318", "4318", why, sizeof(why))) {
		fprintf(stderr, "ringpipe agent: --otlp '%s': %s (an OTLP/HTTP receiver, "
			"http[s]://HOST[:PORT][/PATH], port 4318 by default)\n", url, why);
		return -EINVAL;
	}
	if (u.query[0]) {
		fprintf(stderr, "ringpipe agent: --otlp '%s': a query is not supported (give "
			"http[s]://HOST[:PORT][/PATH])\n", url);
		return -EINVAL;
	}
	pl = strlen(u.path);
	if (pl + sizeof("/v1/logs") > sizeof(e->otlp_path)) {
		fprintf(stderr, "ringpipe agent: --otlp '%s': the path is too long\n", url);
		return -EINVAL;
	}
	if (pl >= 8 && !strcmp(u.path + pl - 8, "/v1/logs"))
		strcpy(e->otlp_path, u.path);
	else
		sprintf(e->otlp_path, "%s%sv1/logs", u.path, u.path[pl - 1] == '/' ? "" : "/");
	if (egress_transport(e, &tls, &encoding))
		return -EINVAL;
	if (http_conn_init(&e->http, u.https, u.host, u.port, &tls, CH_TIMEOUT_MS)) {
		fprintf(stderr, "ringpipe agent: --otlp '%s': bad host or port\n", url);
		return -EINVAL;
	}
	e->http.encoding = encoding;
	return 0;
}

/* One --clickhouse URL as a target, with the user, password and transport
 * options, and where it is in words; false after saying what is wrong */
static bool server_parse(struct egress *e, const char *url, struct ch_target *t,
			 char where[270])
{
	struct ch_client probe;
	char err[512];
	size_t used;

	if (ch_target_parse(t, url, err, sizeof(err))) {
		fprintf(stderr, "ringpipe agent: --clickhouse %s\n", err);
		return false;
	}
	if (e->o.user)
		snprintf(t->user, sizeof(t->user), "%s", e->o.user);
	if (e->o.password_file && ch_target_read_password(t, e->o.password_file, err, sizeof(err))) {
		fprintf(stderr, "ringpipe agent: %s\n", err);
		return false;
	}
	if (egress_transport(e, &t->tls, &t->encoding))
		return false;
	/* on a Distributed table, a 200 is durable only when the insert
	 * waited for the shards */
	used = strlen(t->settings);
	snprintf(t->settings + used, sizeof(t->settings) - used, "%sinsert_distributed_sync=1",
		 used ? "&" : "");
	if (!fleet_name_ok(t->database) || ch_client_init(&probe, t, CH_TIMEOUT_MS)) {
		fprintf(stderr, "ringpipe agent: --clickhouse %s: bad host or database name\n", url);
		return false;
	}
	snprintf(where, 270, "%s", probe.conn.where);
	ch_client_free(&probe);
	return true;
}

/* The sender's connection to the server the senders use now, when it is
 * not to that one already */
static void sender_follow(struct egress_sender *s)
{
	struct egress *e = s->e;
	size_t i;

	pthread_mutex_lock(&e->lock);
	i = e->server;
	pthread_mutex_unlock(&e->lock);
	if (e->otlp || (s->have_ch && s->server == i))
		return;
	/* a zeroed client's fd is 0, which is not the client's to close */
	if (s->have_ch)
		ch_client_free(&s->ch);
	s->have_ch = true;
	s->server = i;
	/* the targets were checked by server_parse() */
	ch_client_init(&s->ch, &e->servers[i], CH_TIMEOUT_MS);
	s->ch.use_database = false;
}

static int client_setup(struct egress *e)
{
	size_t i;

	if (!e->o.nurls || e->o.nurls > EGRESS_MAX_SERVERS) {
		fprintf(stderr, "ringpipe agent: --clickhouse is given 1 to %d times, not %zu\n",
			EGRESS_MAX_SERVERS, e->o.nurls);
		return -EINVAL;
	}
	for (i = 0; i < e->o.nurls; i++) {
		if (!server_parse(e, e->o.urls[i], &e->servers[i], e->where[i]))
			return -EINVAL;
		/* a batch is looked up where it was sent: one database for all */
		if (strcmp(e->servers[i].database, e->servers[0].database)) {
			fprintf(stderr, "ringpipe agent: --clickhouse %s names database %s, %s names "
				"%s: the servers of one egress share the database (give every URL "
				"the same ?database=)\n", e->o.urls[i], e->servers[i].database,
				e->o.urls[0], e->servers[0].database);
			return -EINVAL;
		}
	}
	e->nservers = e->o.nurls;
	e->table_suffix = e->o.shard ? FLEET_LOCAL_SUFFIX : "";
	return 0;
}

/* ---- the server -------------------------------------------------------------- */

static void note_failure(struct egress_sender *s, const char *err)
{
	struct egress *e = s->e;
	uint64_t now = rp_clock_mono_ns();
	bool first = false;

	pthread_mutex_lock(&e->lock);
	snprintf(e->last_error, sizeof(e->last_error), "%s", err);
	/* another sender moved on from this server already: this one
	 * follows it, at once, and its failure is that one's, not a new
	 * retry (so retries count what the servers did, not how many
	 * senders saw it) */
	if (!e->otlp && s->server != e->server)
		goto unlock;
	e->retries++;
	first = !e->outage;
	if (first)
		e->outages++;
	e->outage = true;
	/* the next server at once, while one of them has not failed yet;
	 * the same batch goes there (a replicated table drops a copy of a
	 * block that another server of its shard took) */
	e->failed_in_row++;
	if (e->nservers > 1) {
		e->server = (e->server + 1) % e->nservers;
		if (e->failed_in_row % e->nservers) {
			e->retry_at_ns = now;
			goto unlock;
		}
	}
	e->backoff_ms = e->backoff_ms ? e->backoff_ms * 2 : BACKOFF_FIRST_MS;
	if (e->backoff_ms > BACKOFF_MAX_MS)
		e->backoff_ms = BACKOFF_MAX_MS;
	e->retry_at_ns = now + e->backoff_ms * 1000000ull;
unlock:
	pthread_mutex_unlock(&e->lock);
	if (first)
		egress_say(e, "%s; batches wait in the spool and are sent again, with backoff", err);
}

static const char *sink_name(const struct egress *e)
{
	return e->otlp ? "the OTLP receiver" : "ClickHouse";
}

/* HOST:PORT of the server the senders use (under lock) */
static const char *server_where(const struct egress *e)
{
	return e->otlp ? e->http.where : e->where[e->server];
}

static void note_success(struct egress *e)
{
	char where[270];
	bool was_out;

	pthread_mutex_lock(&e->lock);
	was_out = e->outage;
	if (was_out) {
		snprintf(where, sizeof(where), "%s", server_where(e));
		e->last_error[0] = 0;
	}
	e->outage = false;
	e->failed_in_row = 0;
	e->backoff_ms = 0;
	e->retry_at_ns = 0;
	pthread_mutex_unlock(&e->lock);
	if (was_out)
		egress_say(e, "%s at %s answers again", sink_name(e), where);
}

/* The dialect rows are encoded in: the server's, asked once */
static int learn_dialect(struct egress_sender *s, char *err, size_t errlen)
{
	struct egress *e = s->e;
	char version[64];
	int rc = ch_query_line(&s->ch, "SELECT version()", version, sizeof(version), err, errlen);

	if (rc)
		return rc;
	if (fleet_dialect_of(version, &e->name.dialect)) {
		snprintf(err, errlen, "ClickHouse answered version '%s', not a version number",
			 version);
		return -EPROTO;
	}
	/* pairs with the acquire in cutter_main(): the cutter reads name */
	rp_store_release(&e->dialect_known, 1);
	egress_say(e, "ClickHouse %s at %s:%s, database %s (%s schema)", version,
		   s->ch.target.host, s->ch.target.port, s->ch.target.database,
		   fleet_dialect_name(e->name.dialect));
	return 0;
}

/* Is the database of the version this agent writes? Until it is, batches
 * wait in the spool: an old database is migrated by `fleet init` */
static int check_schema(struct egress_sender *s, char *err, size_t errlen)
{
	struct fleet_layout l;
	char why[384];
	int rc = fleet_layout_read(&s->ch, s->ch.target.database, &l, err, errlen);

	if (rc)
		return rc;	/* the server's failure, said as every other */
	rc = fleet_version_writable(&l, s->ch.target.database, why, sizeof(why));
	if (rc)
		snprintf(err, errlen, "ClickHouse at %s:%s: %s", s->ch.target.host,
			 s->ch.target.port, why);
	return rc;
}

/* How many rows of batch b table t holds (the manifest: rows for b's seq) */
static int rows_of_batch(struct egress_sender *s, const struct egress_batch *b,
			 enum fleet_table_id t, uint64_t *n, char *err, size_t errlen)
{
	struct egress *e = s->e;
	struct bytebuf q = { 0 };
	char run[37], line[64];
	int rc;

	rb_uuid_format(b->agent_run, run);
	bb_printf(&q, "SELECT count() FROM `%s`.`%s%s` WHERE host = ", s->ch.target.database,
		  fleet_tables[t].name, e->table_suffix);
	ch_sql_quote(&q, b->host);
	bb_printf(&q, " AND agent_run = toUUID('%s') AND stream = %u AND %s = %llu", run, b->stream,
		  t == FLEET_BATCHES ? "seq" : "batch_seq", (unsigned long long)b->seq);
	bb_append(&q, "", 1);
	rc = q.oom ? -ENOMEM : ch_query_line(&s->ch, (const char *)q.p, line, sizeof(line), err,
					     errlen);
	bb_free(&q);
	if (!rc)
		*n = strtoull(line, NULL, 10);
	return rc;
}

static int insert_section(struct egress_sender *s, const struct egress_batch *b,
			  const struct egress_section *sec, char *err, size_t errlen)
{
	struct egress *e = s->e;
	struct bytebuf sql = { 0 };
	int rc;

	fleet_insert_sql_into(&sql, (enum fleet_dialect)b->dialect, s->ch.target.database,
			      &fleet_tables[sec->table], e->table_suffix);
	bb_append(&sql, "", 1);
	rc = sql.oom ? -ENOMEM : ch_exec(&s->ch, (const char *)sql.p, sec->body, sec->len, NULL,
					 err, errlen);
	bb_free(&sql);
	if (!rc) {
		pthread_mutex_lock(&e->lock);
		e->rows_sent[sec->table] += sec->rows;
		e->bytes_sent += sec->len;
		pthread_mutex_unlock(&e->lock);
	}
	return rc;
}

/* Is a section sent again already there? (see the top of the file) */
static int section_arrived(struct egress_sender *s, const struct egress_batch *b,
			   const struct egress_section *sec, bool *arrived, char *err, size_t errlen)
{
	uint64_t n = 0;
	int rc;

	*arrived = false;
	if (!egress_table_counted(sec->table))
		return 0;
	rc = rows_of_batch(s, b, sec->table, &n, err, errlen);
	if (rc)
		return rc;
	if (n && n != sec->rows)
		egress_say(s->e, "batch %u/%llu: %s holds %llu of its %u rows; the rest is sent",
			   b->stream, (unsigned long long)b->seq, fleet_tables[sec->table].name,
			   (unsigned long long)n, sec->rows);
	*arrived = n == sec->rows;
	return 0;
}

/*
 * Sends a spooled batch's rows, all but its manifest (the last section),
 * which send_manifests() inserts with those of the next batches. 0 once
 * its rows are in ClickHouse, 1 when its manifest row is there already
 * (all of it is), <0 when a send failed.
 */
static int send_batch_rows(struct egress_sender *s, const struct egress_batch *b, bool again,
			   char *err, size_t errlen)
{
	struct egress *e = s->e;
	uint64_t have = 0;
	size_t i;
	int rc;

	if (again) {
		rc = rows_of_batch(s, b, FLEET_BATCHES, &have, err, errlen);
		if (rc)
			return rc;
		if (have) {
			pthread_mutex_lock(&e->lock);
			e->batches_already++;
			pthread_mutex_unlock(&e->lock);
			return 1;
		}
	}
	for (i = 0; i + 1 < b->nsections; i++) {
		bool arrived = false;

		if (again && (rc = section_arrived(s, b, &b->sections[i], &arrived, err, errlen)))
			return rc;
		if (!arrived && (rc = insert_section(s, b, &b->sections[i], err, errlen)))
			return rc;
	}
	return 0;
}

static void manifests_clear(struct egress_sender *s)
{
	s->manifest_n = 0;
	s->manifest_nrows = 0;
	s->manifest_bytes = 0;
	s->manifest_rows.len = 0;
	s->manifest_rows.oom = 0;
}

/* The waiting manifest rows dropped, after a failure (under pick): each
 * batch of them is looked up when it is sent again, and its manifest row
 * waits again */
static void forget_manifests(struct egress_sender *s, uint64_t failed)
{
	struct egress *e = s->e;

	if (s->manifest_n && s->manifest_nums[s->manifest_n - 1] > failed)
		failed = s->manifest_nums[s->manifest_n - 1];
	if (failed > e->failed_num)
		e->failed_num = failed;
	manifests_clear(s);
}

/* The waiting manifest rows in one insert; then their batches are all
 * in. 1 when they are, <0 when the insert failed (ship_oldest()'s answers) */
static int send_manifests(struct egress_sender *s)
{
	struct egress *e = s->e;
	char err[1024] = "";
	const struct egress_section sec = { FLEET_BATCHES, s->manifest_nrows, s->manifest_rows.p,
					    s->manifest_rows.len };
	const struct egress_batch b = { .dialect = s->manifest_dialect };
	size_t i, n = s->manifest_n;
	int rc;

	if (s->manifest_rows.oom) {
		snprintf(err, sizeof(err), "out of memory");
		rc = -ENOMEM;
	} else {
		rc = insert_section(s, &b, &sec, err, sizeof(err));
	}
	pthread_mutex_lock(&e->pick);
	if (rc) {
		forget_manifests(s, 0);
	} else {
		for (i = 0; i < n; i++)
			spool_ack(e->spool, s->manifest_nums[i]);
		manifests_clear(s);
	}
	pthread_mutex_unlock(&e->pick);
	if (rc) {
		note_failure(s, err);
		return rc;
	}
	pthread_mutex_lock(&e->lock);
	e->batches_sent += n;
	pthread_mutex_unlock(&e->lock);
	note_success(e);
	return 1;
}

/* Batch num's manifest row, to go in with the others' (its rows are in);
 * len: the batch's bytes (under pick) */
static void hold_manifest(struct egress_sender *s, uint64_t num, const struct egress_batch *b,
			  size_t len)
{
	const struct egress_section *m = &b->sections[b->nsections - 1];

	if (!s->manifest_n) {
		s->manifest_since_ns = rp_clock_mono_ns();
		s->manifest_dialect = b->dialect;
	}
	s->manifest_nums[s->manifest_n++] = num;
	s->manifest_nrows += m->rows;
	s->manifest_bytes += len;
	bb_append(&s->manifest_rows, m->body, m->len);
}

/* Are the waiting manifest rows to go in now, before batch b? (b: NULL
 * when no batch is left for this sender). The senders together hold at
 * most half of the spool so. */
static bool manifests_due(const struct egress_sender *s, const struct egress_batch *b)
{
	const struct egress *e = s->e;

	return s->manifest_n &&
	       (!b || s->manifest_n >= MANIFEST_BATCHES || b->dialect != s->manifest_dialect ||
		s->manifest_bytes >= e->spool_max / 2 / e->nsenders ||
		rp_clock_mono_ns() - s->manifest_since_ns >= MANIFEST_HOLD_NS);
}

/* Does a sender other than s hold a batch? (under pick) */
static bool others_hold(const struct egress *e, const struct egress_sender *s)
{
	size_t i;

	for (i = 0; i < e->nsenders; i++)
		if (&e->senders[i] != s && (e->senders[i].flight || e->senders[i].manifest_n))
			return true;
	return false;
}

/* Does a sender hold batch num? (under pick) */
static bool held(const struct egress *e, uint64_t num)
{
	size_t i, j;

	for (i = 0; i < e->nsenders; i++) {
		const struct egress_sender *s = &e->senders[i];

		if (s->flight == num)
			return true;
		for (j = 0; j < s->manifest_n; j++)
			if (s->manifest_nums[j] == num)
				return true;
	}
	return false;
}

/* The number of the oldest spooled batch no sender holds (under pick):
 * 0, or -ENOENT */
static int oldest_free(struct egress *e, uint64_t *num)
{
	uint64_t after = 0;
	int rc;

	while (!(rc = spool_peek(e->spool, after, num)) && held(e, *num))
		after = *num;
	return rc;
}

/* The answer's body as text for a message: the first line, at most 300 bytes */
static const char *answer_text(const struct http_response *r)
{
	const char *t = r->body.p ? (const char *)r->body.p : "";

	return *t ? t : "(no body)";
}

/*
 * A spooled OTLP batch to the receiver, with OTLP/HTTP's rules: 200 is
 * acknowledged (a partial success says how many records it rejected, and
 * why: counted and logged, not sent again); 429 and 5xx are sent again
 * with backoff, as connection errors are; any other answer (400: the
 * request was bad) will not change by sending it again, so the batch is
 * dropped and its records counted as rejected. 0 once acknowledged or
 * dropped, else the failure in err.
 */
static int otlp_send(struct egress *e, const struct egress_otlp_batch *bp, char *err,
		     size_t errlen)
{
	const struct egress_otlp_batch b = *bp;
	struct http_request rq = { .method = "POST", .target = e->otlp_path };
	struct http_response r = { 0 };
	struct otlp_response ok;
	struct bytebuf headers = { 0 };
	int rc;

	bb_printf(&headers, "Content-Type: application/x-protobuf\r\n%s",
		  e->o.otlp_headers ? e->o.otlp_headers : "");
	bb_append(&headers, "", 1);
	if (headers.oom) {
		bb_free(&headers);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	rq.headers = (const char *)headers.p;
	rq.body = b.body;
	rq.body_len = b.len;
	rc = http_conn_request(&e->http, &rq, &r, err, errlen);
	bb_free(&headers);
	if (rc) {
		http_response_free(&r);
		return rc;
	}
	if (r.status == 429 || r.status >= 500) {
		snprintf(err, errlen, "POST %.270s%.200s answered %d: %.300s", e->http.where,
			 e->otlp_path, r.status, answer_text(&r));
		http_response_free(&r);
		return -EAGAIN;
	}
	pthread_mutex_lock(&e->lock);
	if (r.status / 100 != 2) {
		e->batches_rejected++;
		e->records_rejected += b.records;
	} else if (!otlp_response_parse(r.body.p, r.body.len, &ok) && ok.rejected > 0) {
		e->records_rejected += (uint64_t)ok.rejected;
		e->records_sent += b.records > ok.rejected ? b.records - (uint64_t)ok.rejected : 0;
		e->batches_sent++;
	} else {
		ok.rejected = 0;
		e->records_sent += b.records;
		e->batches_sent++;
	}
	e->bytes_sent += b.len;
	pthread_mutex_unlock(&e->lock);
	if (r.status / 100 != 2)
		egress_say(e, "batch %u/%llu (%u records) refused with %d: %.300s; not sent again",
			   b.stream, (unsigned long long)b.seq, b.records, r.status, answer_text(&r));
	else if (ok.rejected > 0)
		egress_say(e, "batch %u/%llu: the receiver rejected %lld of its %u records: %s",
			   b.stream, (unsigned long long)b.seq, (long long)ok.rejected, b.records,
			   ok.message[0] ? ok.message : "(no message)");
	http_response_free(&r);
	return 0;
}

/* s lets go of the batch it took (under pick) */
static void let_go(struct egress_sender *s)
{
	s->flight = 0;
	if (s->e->alone == s)
		s->e->alone = NULL;
}

/*
 * A batch an agent before fleet schema version 2 spooled, given version
 * 2's stack ids in its bytes (under pick): true when it is to be sent;
 * false when its rows do not read (dropped: kept aside it would be kept
 * forever) or memory ran short (tried again).
 */
static bool upgrade_spooled(struct egress *e, uint64_t num, struct egress_batch *b)
{
	int rc = egress_batch_upgrade(b);

	if (rc == -ENOMEM)
		return false;
	if (rc) {
		egress_say(e, "spooled batch %llu of an agent before fleet schema version 2 has "
			   "rows that do not read; dropped", (unsigned long long)num);
		spool_ack(e->spool, num);
		return false;
	}
	if (!e->said_upgrade)
		egress_say(e, "spooled batches of an agent before fleet schema version 2: their "
			   "stack ids are recomputed as version 2's (batch %llu the first)",
			   (unsigned long long)num);
	e->said_upgrade = true;
	return true;
}

/*
 * The oldest spooled batch that no other sender holds, sent by s. 1: one
 * was sent (or set aside as damaged), or waiting manifest rows went in,
 * 0: there is nothing for s now, <0: a send failed.
 */
static int ship_oldest(struct egress_sender *s)
{
	struct egress *e = s->e;
	struct egress_batch b;
	struct egress_otlp_batch ob;
	char err[1024] = "";
	uint64_t num = 0;
	void *data = NULL;
	size_t len = 0;
	bool again;
	int rc;

	/* taken under the lock, read outside it: no other sender reads or
	 * takes out a batch that s holds */
	pthread_mutex_lock(&e->pick);
	/* a batch looked up goes with nothing beside it */
	rc = e->alone ? -ENOENT : oldest_free(e, &num);
	if (!rc)
		s->flight = num;
	pthread_mutex_unlock(&e->pick);
	if (rc)		/* nothing else to send: the manifest rows go now */
		return s->manifest_n ? send_manifests(s) : 0;
	rc = spool_next(e->spool, num - 1, &num, &data, &len);
	pthread_mutex_lock(&e->pick);
	if (rc == -EIO) {
		rc = 1;		/* set aside and counted; the next one */
		goto let_go;
	}
	if (rc) {
		egress_say(e, "the spool cannot be read: %s", strerror(-rc));
		goto let_go;
	}
	if (e->otlp ? egress_otlp_parse(data, len, &ob) : egress_batch_parse(data, len, &b)) {
		/* not a batch of ours: kept aside would be kept forever */
		egress_say(e, "spooled batch %llu is not a batch; dropped", (unsigned long long)num);
		spool_ack(e->spool, num);
		rc = 1;
		goto let_go;
	}
	if (!e->otlp && b.stack_ids != FLEET_SCHEMA_VERSION && !upgrade_spooled(e, num, &b)) {
		rc = 1;		/* dropped, or tried again in the next round */
		goto let_go;
	}
	again = !e->otlp &&
		(num <= e->failed_num || memcmp(b.agent_run, e->name.agent_run, 16));
	/* a batch looked up must find the manifest rows of those before it:
	 * it may be one of them again (a file cut again from its shipping
	 * note while the last run's spool still held its batches) */
	if (!e->otlp && (manifests_due(s, &b) || (again && s->manifest_n))) {
		let_go(s);
		pthread_mutex_unlock(&e->pick);
		free(data);
		return send_manifests(s);	/* and the batch read again after them */
	}
	if (again && others_hold(e, s)) {
		rc = 0;		/* once they are done (the next round: IDLE_WAIT_MS) */
		goto let_go;
	}
	if (again)
		e->alone = s;
	pthread_mutex_unlock(&e->pick);

	if (e->otlp)
		rc = otlp_send(e, &ob, err, sizeof(err));
	else
		rc = send_batch_rows(s, &b, again, err, sizeof(err));
	pthread_mutex_lock(&e->pick);
	if (!rc && !e->otlp)
		hold_manifest(s, num, &b, len);
	else if (rc < 0)
		/* the rows of the batches before it are in, and found so
		 * when they are sent again */
		forget_manifests(s, num);
	else
		spool_ack(e->spool, num);
	let_go(s);
	pthread_mutex_unlock(&e->pick);
	free(data);
	if (rc < 0) {
		note_failure(s, err);
		return rc;
	}
	note_success(e);
	return 1;
let_go:
	let_go(s);
	pthread_mutex_unlock(&e->pick);
	free(data);
	return rc;
}

/* ---- making batches ---------------------------------------------------------- */

static bool spool_room(struct egress *e, size_t len, bool losses)
{
	struct spool_stats st;
	uint64_t limit = e->spool_max - (losses ? 0 : e->loss_reserve);

	spool_stats(e->spool, &st);
	/* the spool adds a header of its own to each batch */
	return st.bytes + len + 64 <= limit;
}

/* A batch into the spool: true when it went in. losses: a batch of losses
 * only, which may take the room event batches leave. */
static bool spool_batch(struct egress *e, const struct bytebuf *b, bool losses)
{
	uint64_t num;
	int rc;

	if (!spool_room(e, b->len, losses))
		rc = -ENOSPC;
	else
		rc = spool_put(e->spool, b->p, b->len, &num);
	if (rc == -ENOSPC || rc == -E2BIG) {
		rp_store_relaxed(&e->full, 1);
		return false;
	}
	if (rc) {
		egress_say(e, "the spool cannot take a batch: %s", strerror(-rc));
		return false;
	}
	return true;
}

/* The held batch into the spool: true when it went in */
static bool put_held(struct egress *e)
{
	if (!spool_batch(e, &e->held, false))
		return false;
	e->have_held = false;
	rp_store_relaxed(&e->full, 0);
	return true;
}

static struct egress_pending *pop_pending(struct egress *e)
{
	struct egress_pending *p;

	pthread_mutex_lock(&e->lock);
	p = e->head;
	if (p) {
		e->head = p->next;
		if (!e->head)
			e->tail = &e->head;
		e->npending--;
		/* still a file waiting, for egress_status(), until it is cut */
		e->cutting = true;
	}
	pthread_mutex_unlock(&e->lock);
	return p;
}

static void pending_free(struct egress_pending *p)
{
	free(p->path);
	free(p);
}

static uint64_t wall_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The losses of pid for reason, counted until a batch takes them (under lock) */
static void count_loss(struct egress *e, const struct egress_pending *p, const char *reason,
		       uint64_t n)
{
	uint32_t pid = p->note.have_id ? p->note.id.pid : 0;
	size_t i;

	if (!n)
		return;
	for (i = 0; i < e->nlosses; i++)
		if (e->losses[i].pid == pid && !strcmp(e->losses[i].reason, reason))
			break;
	if (i == e->nlosses) {
		if (e->nlosses >= LOSS_MAX ||
		    array_grow((void **)&e->losses, &e->caplosses, e->nlosses, sizeof(*e->losses), 16)) {
			egress_say(e, "%llu events of pid %u lost (%s) cannot be counted: too many "
				   "losses wait", (unsigned long long)n, pid, reason);
			return;
		}
		memset(&e->losses[i], 0, sizeof(e->losses[i]));
		e->losses[i].pid = pid;
		e->losses[i].reason = reason;
		if (p->note.have_id) {
			struct egress_loss_acc *a = &e->losses[i];

			snprintf(a->container_id, sizeof(a->container_id), "%s",
				 p->note.id.tags.container_id);
			snprintf(a->comm, sizeof(a->comm), "%s", p->note.id.comm);
			snprintf(a->pod_uid, sizeof(a->pod_uid), "%s", p->note.id.tags.pod_uid);
			a->start_time = p->note.id.start_time;
		}
		e->nlosses++;
	}
	e->losses[i].count += n;
	e->losses[i].time_ns = wall_ns();
}

/* A Drop session's file when there is no room: its events become a loss,
 * and so does what the file itself lost */
static void give_up_file(struct egress *e, const struct egress_pending *p)
{
	uint64_t events = 0, lost = 0;

	if (egress_file_count(p->path, &events, &lost))
		egress_say(e, "%s cannot be read to count its events", p->path);
	pthread_mutex_lock(&e->lock);
	e->files_given_up++;
	e->lost_full += events;
	count_loss(e, p, "egress_full", events);
	count_loss(e, p, "events_lost", lost);
	pthread_mutex_unlock(&e->lock);
	/* counted: a crash before the loss is spooled loses the count (the
	 * file is still in the output directory) */
	egress_sidecar_remove(p->path, e->note_suffix);
}

static uint32_t take_stream(struct egress *e)
{
	uint32_t n;

	pthread_mutex_lock(&e->lock);
	n = e->next_stream++;
	pthread_mutex_unlock(&e->lock);
	return n;
}

/* The losses counted for room, as a batch of their own stream */
static bool make_loss_batch(struct egress *e)
{
	struct egress_loss l[64];
	size_t n, i;
	int rc;

	/* the stream is taken once, and kept until the batch is in: a
	 * number taken meanwhile for a file must not be ours as well */
	if (!e->loss_stream)
		e->loss_stream = take_stream(e);
	pthread_mutex_lock(&e->lock);
	n = e->nlosses < 64 ? e->nlosses : 64;
	for (i = 0; i < n; i++)
		l[i] = (struct egress_loss){ e->losses[i].time_ns, e->losses[i].pid, 0,
					     e->losses[i].container_id, e->losses[i].reason,
					     e->losses[i].count, e->losses[i].comm,
					     e->losses[i].pod_uid, e->losses[i].start_time };
	rc = !n ? -ENOENT : e->otlp ? egress_otlp_loss_batch(&e->name, e->loss_stream, 1, l, n,
							     &e->loss_batch)
		 : egress_loss_batch(&e->name, e->loss_stream, 1, l, n, &e->loss_batch);
	pthread_mutex_unlock(&e->lock);
	/* no room: made again later, with what is counted by then */
	if (rc || !spool_batch(e, &e->loss_batch, true))
		return false;
	e->loss_stream = 0;
	pthread_mutex_lock(&e->lock);
	memmove(e->losses, e->losses + n, (e->nlosses - n) * sizeof(*e->losses));
	e->nlosses -= n;
	pthread_mutex_unlock(&e->lock);
	return true;
}

/* With the spool full, the files of Drop sessions waiting are given up
 * (their events counted lost); the others wait on, in their order */
static bool give_up_droppable(struct egress *e)
{
	struct egress_pending *mine = NULL, **pp, *p;
	bool any = false;

	pthread_mutex_lock(&e->lock);
	for (pp = &e->head; (p = *pp);) {
		if (!p->note.droppable) {
			pp = &p->next;
			continue;
		}
		*pp = p->next;
		e->npending--;
		p->next = mine;
		mine = p;
	}
	for (e->tail = &e->head; *e->tail; e->tail = &(*e->tail)->next)
		;
	pthread_mutex_unlock(&e->lock);
	while ((p = mine)) {
		mine = p->next;
		give_up_file(e, p);
		pending_free(p);
		any = true;
	}
	return any;
}

/* The next file to cut into batches, or NULL */
static bool open_next_file(struct egress *e)
{
	struct egress_pending *p;
	char err[512] = "";

	while ((p = pop_pending(e))) {
		if (p->note.droppable && rp_load_relaxed(&e->full)) {
			give_up_file(e, p);
			pending_free(p);
			continue;
		}
		e->cur = egress_source_open(p->path, p->note.have_id ? &p->note.id : NULL,
					    p->note.stream, err, sizeof(err));
		if (!e->cur) {
			egress_say(e, "%s is not shipped: %s", p->path, err);
			pthread_mutex_lock(&e->lock);
			e->unshipped++;
			pthread_mutex_unlock(&e->lock);
			pending_free(p);
			continue;
		}
		e->cur_name = e->name;
		memcpy(e->cur_name.agent_run, p->note.agent_run, 16);
		e->cur_name.batch_rows = p->note.batch_rows;
		e->cur_name.batch_bytes = p->note.batch_bytes;
		e->cur_path = p->path;
		p->path = NULL;
		pending_free(p);
		return true;
	}
	return false;
}

static bool losses_waiting(struct egress *e)
{
	bool any;

	pthread_mutex_lock(&e->lock);
	any = e->nlosses > 0;
	pthread_mutex_unlock(&e->lock);
	return any;
}

/* One batch made and spooled; false when there is nothing to do or no room */
static bool make_batch(struct egress *e)
{
	char err[512] = "";
	int rc;

	if (losses_waiting(e) && make_loss_batch(e))
			return true;
	if (e->have_held) {
		if (put_held(e))
			return true;
		return give_up_droppable(e);
	}
	if (!e->cur && !open_next_file(e))
		return false;
	rc = e->otlp ? egress_otlp_next(e->cur, &e->cur_name, &e->held, err, sizeof(err))
		     : egress_source_next(e->cur, &e->cur_name, &e->held, err, sizeof(err));
	if (err[0])
		egress_say(e, "a trace ends early: %s (its batches say so)", err);
	if (rc <= 0) {
		if (rc < 0)
			egress_say(e, "out of memory making a batch; the file is not shipped");
		egress_source_close(e->cur);
		e->cur = NULL;
		/* every batch of it is in the spool: a restart need not cut it */
		egress_sidecar_remove(e->cur_path, e->note_suffix);
		free(e->cur_path);
		e->cur_path = NULL;
		pthread_mutex_lock(&e->lock);
		e->files_done++;
		pthread_mutex_unlock(&e->lock);
		return rc == 0;
	}
	e->have_held = true;
	return put_held(e);
}

/* ---- the threads ------------------------------------------------------------- */

/* wake(), with the lock held */
static void wake_locked(struct egress *e)
{
	e->wakes++;
	pthread_cond_broadcast(&e->cond);
}

/* Wakes the other thread: there is a batch, or room, or a file, or a stop */
static void wake(struct egress *e)
{
	pthread_mutex_lock(&e->lock);
	wake_locked(e);
	pthread_mutex_unlock(&e->lock);
}

static uint64_t wakes_now(struct egress *e)
{
	uint64_t n;

	pthread_mutex_lock(&e->lock);
	n = e->wakes;
	pthread_mutex_unlock(&e->lock);
	return n;
}

/* Waits up to ms for a wake() after the one that made the count seen:
 * one that came since is not missed */
static void wait_for_wake(struct egress *e, uint64_t seen, uint64_t ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += (long)(ms % 1000) * 1000000;
	ts.tv_sec += (time_t)(ms / 1000) + ts.tv_nsec / 1000000000;
	ts.tv_nsec %= 1000000000;
	pthread_mutex_lock(&e->lock);
	while (e->wakes == seen && !rp_load_relaxed(&e->quit))
		if (pthread_cond_timedwait(&e->cond, &e->lock, &ts))
			break;
	pthread_mutex_unlock(&e->lock);
}

/* Is there anything left to cut? (the cutter's) */
static bool cutting_left(struct egress *e)
{
	bool left;

	pthread_mutex_lock(&e->lock);
	e->cutting = e->cur || e->have_held;
	left = e->head || e->nlosses || e->cutting;
	pthread_mutex_unlock(&e->lock);
	return left;
}

static void *cutter_main(void *arg)
{
	struct egress *e = arg;

	while (!rp_load_relaxed(&e->quit)) {
		uint64_t seen = wakes_now(e);

		if (rp_load_relaxed(&e->stopping) && !cutting_left(e))
			break;
		/* pairs with the release in learn_dialect() */
		bool made = rp_load_acquire(&e->dialect_known) && make_batch(e);

		cutting_left(e);	/* for egress_status() */
		if (made)
			wake(e);
		else
			wait_for_wake(e, seen, IDLE_WAIT_MS);
	}
	rp_store_release(&e->cutter_done, 1);	/* pairs with the acquire in sender_main() */
	wake(e);
	return NULL;
}

/* What every sender needs first, asked by the first that finds it
 * missing: the server's dialect, and that the database's schema version
 * is this agent's. 0: known already, 1: asked now, or <0 with the failure
 * in err. */
static int learn_server(struct egress_sender *s, char *err, size_t errlen)
{
	struct egress *e = s->e;
	int rc = 0, asked = 0;

	pthread_mutex_lock(&e->pick);
	if (!rp_load_relaxed(&e->dialect_known)) {
		rc = learn_dialect(s, err, errlen);
		if (!rc) {
			wake(e);	/* the cutter makes batches now */
			asked = 1;
		}
	}
	if (!rc && !e->schema_checked) {
		rc = check_schema(s, err, errlen);
		e->schema_checked = !rc;
		asked = !rc;
	}
	pthread_mutex_unlock(&e->pick);
	return rc ? rc : asked;
}

/* A sender's round: what the senders need first, then a batch; true when
 * it got on */
static bool send_round(struct egress_sender *s)
{
	struct egress *e = s->e;
	char err[1024] = "";
	int rc;

	sender_follow(s);
	rc = learn_server(s, err, sizeof(err));
	if (rc < 0) {
		note_failure(s, err);
		return false;
	}
	if (rc)
		note_success(e);
	rc = ship_oldest(s);
	if (rc > 0)
		wake(e);	/* room in the spool, or a batch let go */
	return rc > 0;
}

/* The time senders are at the receiver: a round starts (start), or ends
 * having sent something (got_on) or not. Returns the round's start. */
static uint64_t note_busy(struct egress *e, bool start, bool got_on, uint64_t started)
{
	uint64_t now = rp_clock_mono_ns();

	pthread_mutex_lock(&e->lock);
	if (start) {
		if (!e->busy++)
			e->busy_since_ns = now;
		if (e->busy == e->nsenders)
			e->all_busy_since_ns = now;
	} else {
		if (e->busy == e->nsenders)
			e->all_busy_ns += now - e->all_busy_since_ns;
		if (!--e->busy)
			e->send_ns += now - e->busy_since_ns;
		if (got_on) {
			if (!e->first_send_ns || started < e->first_send_ns)
				e->first_send_ns = started;
			e->last_sent_ns = now;
		}
	}
	pthread_mutex_unlock(&e->lock);
	return now;
}

static void *sender_main(void *arg)
{
	struct egress_sender *s = arg;
	struct egress *e = s->e;
	bool last;

	while (!rp_load_relaxed(&e->quit)) {
		uint64_t seen = wakes_now(e), now = rp_clock_mono_ns(), ms = IDLE_WAIT_MS, retry_at;
		struct spool_stats st;

		spool_stats(e->spool, &st);
		/* pairs with the release at the cutter's end: all it cut is in
		 * the spool */
		if (rp_load_relaxed(&e->stopping) && rp_load_acquire(&e->cutter_done) &&
		    !st.batches)
			break;
		pthread_mutex_lock(&e->lock);
		retry_at = e->retry_at_ns;
		pthread_mutex_unlock(&e->lock);
		if (now >= retry_at) {
			uint64_t started = note_busy(e, true, false, 0);
			bool got_on = send_round(s);

			note_busy(e, false, got_on, started);
			if (got_on)
				continue;
			pthread_mutex_lock(&e->lock);
			retry_at = e->retry_at_ns;
			pthread_mutex_unlock(&e->lock);
		}
		if (retry_at > now && (retry_at - now) / 1000000 < ms)
			ms = (retry_at - now) / 1000000 + 1;
		wait_for_wake(e, seen, ms);
	}
	pthread_mutex_lock(&e->lock);
	last = !--e->senders_running;
	pthread_mutex_unlock(&e->lock);
	if (last)
		rp_store_release(&e->done, 1);	/* pairs with the acquire in egress_stop() */
	wake(e);	/* a sender that waits for this one's batches */
	return NULL;
}

/* What egress_start() made, also half of it (the thread is not running) */
static void egress_free(struct egress *e)
{
	size_t i;

	egress_source_close(e->cur);
	free(e->cur_path);
	while (e->head)
		pending_free(pop_pending(e));
	bb_free(&e->held);
	bb_free(&e->loss_batch);
	for (i = 0; i < EGRESS_MAX_SENDERS; i++) {
		bb_free(&e->senders[i].manifest_rows);
		if (e->senders[i].have_ch)
			ch_client_free(&e->senders[i].ch);
	}
	free(e->losses);
	spool_close(e->spool);
	if (e->otlp)
		http_conn_free(&e->http);
	pthread_cond_destroy(&e->cond);
	pthread_mutex_destroy(&e->pick);
	pthread_mutex_destroy(&e->lock);
	free(e);
}

struct egress *egress_start(const struct egress_opts *uo)
{
	struct egress *e = calloc(1, sizeof(*e));
	struct spool_opts so = { .sz = sizeof(so) };
	char err[512];
	size_t i;

	if (!e)
		return NULL;
	memcpy(&e->o, uo, uo->sz < sizeof(e->o) ? uo->sz : sizeof(e->o));
	e->tail = &e->head;
	e->next_stream = 1;
	pthread_mutex_init(&e->pick, NULL);
	pthread_mutex_init(&e->lock, NULL);
	pthread_cond_init(&e->cond, NULL);
	if (e->o.host_id)
		snprintf(e->host, sizeof(e->host), "%s", e->o.host_id);
	else if (gethostname(e->host, sizeof(e->host) - 1))
		snprintf(e->host, sizeof(e->host), "localhost");
	e->name.host = e->host;
	e->name.batch_rows = e->o.batch_rows ? e->o.batch_rows : EGRESS_BATCH_ROWS;
	read_boot_id(e->name.boot_id);
	e->spool_max = e->o.spool_bytes ? e->o.spool_bytes : (uint64_t)EGRESS_DEFAULT_SPOOL_MB << 20;
	e->loss_reserve = e->spool_max / 16;
	/* a batch must fit in the spool with room to spare for the next */
	e->name.batch_bytes = e->spool_max / 8 < (32u << 20) ? e->spool_max / 8 : (32u << 20);
	if (e->o.dialect) {
		e->name.dialect = strcmp(e->o.dialect, "current") ? FLEET_LEGACY : FLEET_CURRENT;
		e->dialect_known = 1;
	}
	e->otlp = e->o.otlp_url != NULL;
	if (e->otlp) {
		/* receivers cap a request's size (the Aspire dashboard refuses
		 * one of 6 MB with 400; 4 MB pass), and OTLP exporters send a
		 * few thousand records at a time */
		if (e->name.batch_rows > OTLP_BATCH_ROWS)
			e->name.batch_rows = OTLP_BATCH_ROWS;
		if (e->name.batch_bytes > OTLP_BATCH_BYTES)
			e->name.batch_bytes = OTLP_BATCH_BYTES;
	}
	e->note_suffix = e->otlp ? EGRESS_OTLP_SIDECAR_SUFFIX : EGRESS_SIDECAR_SUFFIX;
	if (e->otlp) {
		/* records are not typed by a server's version */
		e->name.format = EGRESS_OTLP;
		e->dialect_known = 1;
		e->schema_checked = true;
	}
	if (new_run_id(e->name.agent_run) || (e->otlp ? otlp_setup(e) : client_setup(e)))
		goto fail;
	so.dir = e->o.spool_dir;
	so.max_bytes = e->spool_max;
	e->spool = spool_open(&so, err, sizeof(err));
	if (!e->spool) {
		fprintf(stderr, "ringpipe agent: the spool: %s\n", err);
		goto fail;
	}
	{
		struct spool_stats st;

		spool_stats(e->spool, &st);
		if (st.found)
			egress_say(e, "%llu batches from an earlier run wait in %s: each is looked "
				   "up before it is sent again", (unsigned long long)st.found,
				   e->o.spool_dir);
	}
	if (e->o.notes_dir)
		take_notes(e, e->o.notes_dir);
	if (rp_thread_start(&e->cutter, "rp-egress-cut", cutter_main, e)) {
		fprintf(stderr, "ringpipe agent: cannot start the egress threads\n");
		goto fail;
	}
	/* OTLP batches go one at a time, on one connection */
	e->nsenders = e->otlp ? 1 : e->o.senders ? e->o.senders : EGRESS_DEFAULT_SENDERS;
	if (e->nsenders > EGRESS_MAX_SENDERS)
		e->nsenders = EGRESS_MAX_SENDERS;
	for (i = 0; i < e->nsenders; i++) {
		char name[16];

		snprintf(name, sizeof(name), "rp-egress-%u", (unsigned)(i % EGRESS_MAX_SENDERS));
		e->senders[i].e = e;
		pthread_mutex_lock(&e->lock);
		e->senders_running++;
		pthread_mutex_unlock(&e->lock);
		if (rp_thread_start(&e->senders[i].thread, name, sender_main, &e->senders[i])) {
			fprintf(stderr, "ringpipe agent: cannot start the egress threads\n");
			rp_store_relaxed(&e->quit, 1);
			wake(e);
			while (i--)
				pthread_join(e->senders[i].thread, NULL);
			pthread_join(e->cutter, NULL);
			goto fail;
		}
	}
	return e;
fail:
	egress_free(e);
	return NULL;
}

static void enqueue(struct egress *e, struct egress_pending *p)
{
	pthread_mutex_lock(&e->lock);
	*e->tail = p;
	e->tail = &p->next;
	e->npending++;
	wake_locked(e);
	pthread_mutex_unlock(&e->lock);
}

void egress_file(struct egress *e, const char *path, const struct agent_identity *id,
		 bool droppable)
{
	struct egress_pending *p;
	int err;

	if (!e)
		return;
	p = calloc(1, sizeof(*p));
	if (!p || !(p->path = strdup(path))) {
		free(p);
		egress_say(e, "out of memory: %s is not shipped", path);
		return;
	}
	memcpy(p->note.agent_run, e->name.agent_run, 16);
	p->note.stream = take_stream(e);
	p->note.batch_rows = e->name.batch_rows;
	p->note.batch_bytes = e->name.batch_bytes;
	p->note.droppable = droppable;
	if (id) {
		p->note.have_id = true;
		p->note.id = *id;
	}
	err = egress_sidecar_write(path, e->note_suffix, &p->note);
	if (err)
		egress_say(e, "%s%s: %s (a restarted agent would not ship it)", path,
			   e->note_suffix, strerror(-err));
	enqueue(e, p);
}

static int name_order(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The notes a previous run left: its files go first, under their names */
static void take_notes(struct egress *e, const char *dir)
{
	size_t n = 0, cap = 0, i, sl = strlen(e->note_suffix);
	char **names = NULL;
	struct dirent *de;
	DIR *d = opendir(dir);

	if (!d)
		return;
	while ((de = readdir(d))) {
		size_t len = strlen(de->d_name);

		if (len > sl && !strcmp(de->d_name + len - sl, e->note_suffix) &&
		    !array_grow((void **)&names, &cap, n, sizeof(*names), 16) &&
		    (names[n] = strdup(de->d_name)))
			n++;
	}
	closedir(d);
	if (n)
		qsort(names, n, sizeof(*names), name_order);
	for (i = 0; i < n; i++) {
		struct egress_pending *p = calloc(1, sizeof(*p));
		char *note = NULL;

		if (p && asprintf(&note, "%s/%s", dir, names[i]) > 0 &&
		    !egress_sidecar_read(note, &p->note) &&
		    (p->path = strndup(note, strlen(note) - sl))) {
			egress_say(e, "%s was not all spooled by the last run: shipped again",
				   p->path);
			enqueue(e, p);
			p = NULL;
		} else if (note) {
			egress_say(e, "%s is not a shipping note: left alone", note);
		}
		if (p)
			pending_free(p);
		free(note);
		free(names[i]);
	}
	free(names);
}

bool egress_full(const struct egress *e)
{
	return e && rp_load_relaxed(&e->full);
}

static void status_json(struct egress *e, const struct spool_stats *st, struct bytebuf *b)
{
	/* the host id and the last error are the user's and the server's words */
	bb_printf(b, "{\"host\":");
	nt_json_string(b, e->host, strlen(e->host));
	bb_printf(b, ",\"last_error\":");
	nt_json_string(b, e->last_error, strlen(e->last_error));
	if (e->otlp)
		bb_printf(b, ",\"otlp_path\":\"%s\",\"records_sent\":%llu,\"records_rejected\":%llu,"
			  "\"batches_rejected\":%llu", e->otlp_path,
			  (unsigned long long)e->records_sent,
			  (unsigned long long)e->records_rejected,
			  (unsigned long long)e->batches_rejected);
	bb_printf(b, ",\"server\":\"%s\",\"state\":\"%s\",\"full\":%s,"
		  "\"batches_sent\":%llu,\"batches_found_sent\":%llu,\"events_sent\":%llu,"
		  "\"losses_sent\":%llu,\"bytes_sent\":%llu,\"retries\":%llu,\"outages\":%llu,"
		  "\"files_pending\":%zu,\"files_given_up\":%llu,\"lost_egress_full\":%llu,"
		  "\"spool_batches\":%llu,\"spool_bytes\":%llu,\"spool_found\":%llu,"
		  "\"servers\":%zu,\"senders\":%zu,\"send_ms\":%llu,\"all_senders_ms\":%llu,"
		  "\"send_window_ms\":%llu}",
		  server_where(e), e->last_error[0] ? "retrying" : "ok",
		  rp_load_relaxed(&e->full) ? "true" : "false",
		  (unsigned long long)e->batches_sent, (unsigned long long)e->batches_already,
		  (unsigned long long)(e->otlp ? e->records_sent : e->rows_sent[FLEET_EVENTS]),
		  (unsigned long long)e->rows_sent[FLEET_LOSSES], (unsigned long long)e->bytes_sent,
		  (unsigned long long)e->retries, (unsigned long long)e->outages,
		  e->npending + e->cutting,
		  (unsigned long long)e->files_given_up, (unsigned long long)e->lost_full,
		  (unsigned long long)st->batches, (unsigned long long)st->bytes,
		  (unsigned long long)st->found, e->nservers, e->nsenders,
		  (unsigned long long)(e->send_ns / 1000000),
		  (unsigned long long)(e->all_busy_ns / 1000000),
		  (unsigned long long)((e->last_sent_ns - e->first_send_ns) / 1000000));
}

void egress_status(struct egress *e, bool json, struct bytebuf *b)
{
	struct spool_stats st;

	spool_stats(e->spool, &st);
	pthread_mutex_lock(&e->lock);
	if (json) {
		status_json(e, &st, b);
	} else {
		bb_printf(b, "egress to %s %s%s", e->otlp ? "OTLP" : "ClickHouse", server_where(e),
			  e->otlp ? e->otlp_path : "");
		if (e->nservers > 1)
			bb_printf(b, " (server %zu of %zu)", e->server + 1, e->nservers);
		bb_printf(b, " as host %s: %s%s%s\n", e->host, e->last_error[0] ? "retrying: " : "ok",
			  e->last_error, rp_load_relaxed(&e->full) ? " (spool full)" : "");
		if (e->otlp)
			bb_printf(b, "  %llu log records accepted, %llu rejected (%llu batches "
				  "refused)\n", (unsigned long long)e->records_sent,
				  (unsigned long long)e->records_rejected,
				  (unsigned long long)e->batches_rejected);
		/* OTLP batches are not looked up, and their losses are records */
		if (!e->otlp)
			bb_printf(b, "  sent %llu batches (%llu found sent already), %llu events, "
				  "%llu losses,", (unsigned long long)e->batches_sent,
				  (unsigned long long)e->batches_already,
				  (unsigned long long)e->rows_sent[FLEET_EVENTS],
				  (unsigned long long)e->rows_sent[FLEET_LOSSES]);
		else
			bb_printf(b, "  sent %llu batches,", (unsigned long long)e->batches_sent);
		bb_printf(b, " %llu bytes; %llu retries in %llu outages\n",
			  (unsigned long long)e->bytes_sent, (unsigned long long)e->retries,
			  (unsigned long long)e->outages);
		bb_printf(b, "  spool %llu batches, %llu of %llu bytes; %zu files waiting; %llu "
			  "files given up for room (%llu events counted lost)\n",
			  (unsigned long long)st.batches, (unsigned long long)st.bytes,
			  (unsigned long long)e->spool_max, e->npending + e->cutting,
			  (unsigned long long)e->files_given_up, (unsigned long long)e->lost_full);
	}
	pthread_mutex_unlock(&e->lock);
}

int egress_stop(struct egress *e, uint32_t wait_ms)
{
	uint64_t end;
	size_t left, i;
	int rc = 0;

	if (!e)
		return 0;
	end = rp_clock_mono_ns() + wait_ms * 1000000ull;
	rp_store_relaxed(&e->stopping, 1);
	wake(e);
	/* the thread ends by itself once all is shipped; past the wait it is
	 * told to stop, and what is spooled stays for the next run */
	while (!rp_load_acquire(&e->done) && rp_clock_mono_ns() < end) {
		struct timespec ts = { 0, 20000000 };

		nanosleep(&ts, NULL);
	}
	rp_store_relaxed(&e->quit, 1);
	wake(e);
	for (i = 0; i < e->nsenders; i++)
		pthread_join(e->senders[i].thread, NULL);
	pthread_join(e->cutter, NULL);
	left = e->npending + (e->cur != NULL);
	if (left) {
		egress_say(e, "stopped with %zu files not yet in the spool: they are not shipped",
			   left);
		rc = 1;
	}
	egress_free(e);
	return rc;
}
