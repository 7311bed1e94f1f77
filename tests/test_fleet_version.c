// SPDX-License-Identifier: MIT
/*
 * The fleet schema's version (fleet/fleet_version.c): stack ids of each
 * version; a version-1 database, as ringpipe made and filled it before the
 * version existed, read by fleet check and fleet export, refused to the
 * agent and migrated by fleet init, on one server and on a cluster; a
 * newer version refused by all of them; a batch an agent of version 1 left
 * in its spool, shipped with version 2's ids (egress/egress_batch.c).
 * Against a real clickhouse-server on loopback (clickhouse_node.h); those
 * tests skip without it, with the reason, unless RINGPIPE_REQUIRE_FLEET=1.
 */
#include <inttypes.h>

#include "agent_helpers.h"
#include "fleet/clickhouse.h"
#include "clickhouse_node.h"
#include "egress/egress_batch.h"
#include "fleet/fleet_schema.h"
#include "fleet/fleet_version.h"
#include "common/fnv1a.h"
#include "helpers.h"
#include "nettrace_read.h"
#include "egress/spool.h"

#define HOST "v1-host"
#define PID 4242
#define FOREIGN_ID 12345u	/* a stacks row's id that no version hashed */

static struct th_ch_node node;

static void node_fini(void)
{
	th_ch_stop(&node);
}

struct test_stack {
	uint64_t frames[4];
	uint32_t n, nk;
};

/* A CPU sample's stack (two kernel frames, then the user's) and a managed one */
static const struct test_stack stacks[] = {
	{ { 0xffffffff81000010ull, 0xffffffff81000020ull, 0x401000, 0x401100 }, 4, 2 },
	{ { 0x402000, 0x402100, 0x402200 }, 3, 0 },
};

/* Version 1's stack id, as the agent computed it then: FNV-1a's steps from
 * an offset basis with a digit dropped */
static uint64_t v1_stack_id(const uint64_t *frames, uint32_t n, uint32_t nk)
{
	uint64_t h = 1469598103934665603ull;
	uint32_t i, b;

	for (i = 0; i <= n; i++) {
		uint64_t v = i < n ? frames[i] : nk;

		for (b = 0; b < 64; b += 8)
			h = (h ^ ((v >> b) & 0xff)) * 1099511628211ull;
	}
	return h ? h : 1;
}

/* Version 2's, from what Documentation/fleet.md says it hashes: each
 * frame's 8 bytes, least significant first, then the kernel frames' count
 * the same way, FNV-1a 64 over all of them; 0 is 1 */
static uint64_t v2_stack_id(const uint64_t *frames, uint32_t n, uint32_t nk)
{
	uint8_t bytes[8 * 8];
	uint32_t i, b;
	uint64_t h;

	cr_assert_lt(n, 8u);
	for (i = 0; i <= n; i++)
		for (b = 0; b < 8; b++)
			bytes[8 * i + b] = (uint8_t)((i < n ? frames[i] : nk) >> (8 * b));
	h = fnv1a64_bytes(fnv1a64_start(), bytes, 8 * (n + 1));
	return h ? h : 1;
}

Test(fleet_version, stack_ids_are_fnv1a_of_the_frames_then_the_kernel_count)
{
	size_t i;

	for (i = 0; i < sizeof(stacks) / sizeof(stacks[0]); i++) {
		const struct test_stack *s = &stacks[i];
		uint64_t v2 = v2_stack_id(s->frames, s->n, s->nk);

		cr_assert_eq(fleet_stack_id(2, s->frames, s->n, s->nk), v2,
			     "stack %zu: expected FNV-1a %#" PRIx64 ", got %#" PRIx64, i, v2,
			     fleet_stack_id(2, s->frames, s->n, s->nk));
		cr_assert_eq(fleet_stack_id(FLEET_SCHEMA_VERSION, s->frames, s->n, s->nk), v2);
		cr_assert_eq(fleet_stack_id(1, s->frames, s->n, s->nk),
			     v1_stack_id(s->frames, s->n, s->nk), "stack %zu: version 1's id", i);
		cr_assert_neq(v2, v1_stack_id(s->frames, s->n, s->nk));
	}
}

Test(fleet_version, a_version_1_id_upgrades_through_its_kernel_count)
{
	const struct test_stack *s = &stacks[0];
	uint64_t v2;
	uint32_t nk;

	for (nk = 0; nk <= s->n; nk++) {
		cr_assert_eq(fleet_stack_id_upgrade(v1_stack_id(s->frames, s->n, nk), s->frames,
						    s->n, &v2), 0, "nk %u", nk);
		cr_assert_eq(v2, v2_stack_id(s->frames, s->n, nk), "nk %u: expected %#" PRIx64
			     ", got %#" PRIx64, nk, v2_stack_id(s->frames, s->n, nk), v2);
	}
	cr_assert_eq(fleet_stack_id_upgrade(v2_stack_id(s->frames, s->n, 2), s->frames, s->n,
					    &v2), -ENOENT, "a version-2 id is no version-1 id");
	cr_assert_eq(fleet_stack_id_upgrade(FOREIGN_ID, s->frames, s->n, &v2), -ENOENT);
	cr_assert_eq(fleet_stack_id_upgrade(v1_stack_id(NULL, 0, 0), NULL, 0, &v2), 0);
	cr_assert_eq(v2, v2_stack_id(NULL, 0, 0), "no frames at all");
}

/* ---- against a server ------------------------------------------------------ */

/* A client of database rp at url (a server's, with or without settings) */
static void client_of(struct ch_client *c, const char *url)
{
	struct ch_target t;
	char err[512];

	cr_assert_eq(ch_target_parse(&t, th_fmt("%s%sdatabase=rp", url, strchr(url, '?') ? "&" :
						"?"), err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(ch_client_init(c, &t, 60000), 0);
	c->use_database = false;
}

/* The answer to sql, which must succeed; the caller frees it */
static char *answer(struct ch_client *c, const char *sql)
{
	return th_ch_answer(c, sql);
}

static void answer_is(struct ch_client *c, const char *sql, const char *want, const char *what)
{
	char *got = answer(c, sql);

	cr_assert_str_eq(got, want, "%s: expected '%s', got '%s'", what, want, got);
	free(got);
}

/* `ringpipe ARGS` (stdout and stderr) into out, emptied first; its exit status */
static int tool(struct bytebuf *out, const char *args)
{
	out->len = 0;
	return th_tool_run(args, out);
}

static int run_create(void *ctx, const char *sql)
{
	/* version 1 made the same tables, and no view of its version */
	if (strncmp(sql, "CREATE VIEW", 11))
		free(answer(ctx, sql));
	return 0;
}

static const uint8_t boot_id[16] = { 0x61, 0xf0, 0xc4, 0x04, 0x5c, 0xb3, 0x11, 0xe7,
				     0x90, 0x7b, 0xa6, 0x00, 0x6a, 0xd3, 0xdb, 0xa0 };
static const uint8_t agent_run[16] = { 0x27, 0x65, 0x0a, 0xea, 0x73, 0xf5, 0x4d, 0x24,
				       0xbc, 0x9f, 0xef, 0x80, 0x4d, 0x22, 0x72, 0x77 };
static const struct fleet_str no_symbols[4] = { { "", 0 }, { "", 0 }, { "", 0 }, { "", 0 } };
/* the events' stacks in thread order: -1 none */
static const int event_stack[] = { 0, 1, -1, 0 };
#define NEVENTS (sizeof(event_stack) / sizeof(event_stack[0]))
#define T0 1796188494000000000ull

/* The tables of a version-1 database: the same statements, without the view */
static void version_1_tables(struct ch_client *c)
{
	struct fleet_ddl_opts o = { .dialect = FLEET_LEGACY, .database = "rp" };

	cr_assert_eq(fleet_schema_ddl(&o, run_create, c), 0);
}

/* One batch's rows, RowBinary per table */
struct batch_bodies {
	struct bytebuf body[FLEET_NTABLES];
	uint32_t rows[FLEET_NTABLES];
};

static void add_rows(struct batch_bodies *bb, enum fleet_table_id t, const union fleet_value *rows,
		     size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		fleet_row_encode(&bb->body[t], FLEET_LEGACY, &fleet_tables[t],
				 rows + i * fleet_tables[t].ncols);
	bb->rows[t] += (uint32_t)n;
	cr_assert(!bb->body[t].oom);
}

static void bodies_free(struct batch_bodies *bb)
{
	size_t i;

	for (i = 0; i < FLEET_NTABLES; i++)
		bb_free(&bb->body[i]);
}

/*
 * One batch of host's as the agent of version 1 made it: events of which
 * three name a stack by its version-1 id, the stacks rows (the first stack
 * twice, as two batches send it), a stacks row of an id no version hashed,
 * and the manifest row.
 */
static void version_1_batch(struct batch_bodies *bb, const char *host)
{
	union fleet_value st[4][FS_NCOLS], ev[NEVENTS][FE_NCOLS], b[FB_NCOLS];
	static const uint64_t foreign_frames[2] = { 1, 2 };
	struct fleet_str h = { host, strlen(host) };
	size_t i;

	memset(bb, 0, sizeof(*bb));
	memset(st, 0, sizeof(st));
	for (i = 0; i < 4; i++) {
		const struct test_stack *s = &stacks[i < 3 ? i % 2 : 0];

		st[i][FS_HOST].s = h;
		memcpy(st[i][FS_BOOT_ID].uuid, boot_id, 16);
		st[i][FS_PID].u = PID;
		st[i][FS_STACK_ID].u = v1_stack_id(s->frames, s->n, s->nk);
		st[i][FS_FRAMES].u64s.v = s->frames;
		st[i][FS_FRAMES].u64s.n = s->n;
		st[i][FS_SYMBOLS].strs.v = no_symbols;
		st[i][FS_SYMBOLS].strs.n = s->n;
	}
	st[3][FS_STACK_ID].u = FOREIGN_ID;
	st[3][FS_FRAMES].u64s.v = foreign_frames;
	st[3][FS_FRAMES].u64s.n = 2;
	st[3][FS_SYMBOLS].strs.n = 2;
	add_rows(bb, FLEET_STACKS, &st[0][0], 4);

	memset(ev, 0, sizeof(ev));
	for (i = 0; i < NEVENTS; i++) {
		const struct test_stack *s = event_stack[i] < 0 ? NULL : &stacks[event_stack[i]];

		ev[i][FE_TIME].u = T0 + i;
		ev[i][FE_HOST].s = h;
		memcpy(ev[i][FE_BOOT_ID].uuid, boot_id, 16);
		ev[i][FE_PID].u = PID;
		ev[i][FE_TID].u = PID + 1;
		ev[i][FE_THREAD_SEQ].u = i + 1;
		ev[i][FE_PROVIDER].s = (struct fleet_str){ "V1Test", 6 };
		ev[i][FE_EVENT_ID].u = 1;
		ev[i][FE_EVENT_NAME].s = (struct fleet_str){ "Tick", 4 };
		ev[i][FE_LEVEL].u = 4;
		ev[i][FE_STACK_ID].u = s ? v1_stack_id(s->frames, s->n, s->nk) : 0;
		memcpy(ev[i][FE_AGENT_RUN].uuid, agent_run, 16);
		ev[i][FE_STREAM].u = 1;
		ev[i][FE_BATCH_SEQ].u = 1;
	}
	add_rows(bb, FLEET_EVENTS, &ev[0][0], NEVENTS);

	memset(b, 0, sizeof(b));
	b[FB_HOST].s = h;
	memcpy(b[FB_BOOT_ID].uuid, boot_id, 16);
	memcpy(b[FB_AGENT_RUN].uuid, agent_run, 16);
	b[FB_STREAM].u = 1;
	b[FB_SEQ].u = 1;
	b[FB_EVENTS_ROWS].u = NEVENTS;
	b[FB_STACKS_ROWS].u = 3;
	b[FB_FIRST_TIME].u = T0;
	b[FB_LAST_TIME].u = T0 + NEVENTS - 1;
	b[FB_SENT].u = T0 / 1000000000u;
	add_rows(bb, FLEET_BATCHES, b, 1);
}

/* host's version-1 batch put in at c, as that agent sent it */
static void version_1_rows(struct ch_client *c, const char *host)
{
	static const enum fleet_table_id order[] = { FLEET_EVENTS, FLEET_STACKS, FLEET_BATCHES };
	struct batch_bodies bb;
	size_t i;

	version_1_batch(&bb, host);
	for (i = 0; i < 3; i++) {
		struct bytebuf sql = { 0 };
		char err[4096];

		fleet_insert_sql(&sql, FLEET_LEGACY, "rp", &fleet_tables[order[i]]);
		bb_append(&sql, "", 1);
		cr_assert(!sql.oom);
		cr_assert_eq(ch_exec(c, (const char *)sql.p, bb.body[order[i]].p,
				     bb.body[order[i]].len, NULL, err, sizeof(err)), 0, "%s: %s",
			     (const char *)sql.p, err);
		bb_free(&sql);
	}
	bodies_free(&bb);
}

/* fleet check through url of the batches of nhosts hosts (or of host
 * alone): all accounted for, with a note when the database is version 1 */
static void check_reads(const char *url, const char *host, unsigned nhosts, bool version_1)
{
	struct bytebuf out = { 0 };
	int rc = tool(&out, th_fmt("fleet check --clickhouse '%s?database=rp'%s%s", url,
				   host ? " --host " : "", host ? host : ""));

	cr_assert_eq(rc, 0, "fleet check of a version-%d database: %d\n%s", version_1 ? 1 : 2, rc,
		     th_text(&out));
	cr_assert(strstr(th_text(&out), th_fmt("all accounted for: %u batches in %u streams of "
					       "%u agent runs, %zu events", nhosts, nhosts,
					       nhosts, nhosts * NEVENTS)), "%s", th_text(&out));
	cr_assert_eq(strstr(th_text(&out), "holds fleet schema version 1") != NULL, version_1,
		     "the note of version 1 %s:\n%s", version_1 ? "missing" : "said of version 2",
		     th_text(&out));
	bb_free(&out);
}

/* fleet export through url of host's events: each stack found, with its frames */
static void export_reads(const char *url, const char *host)
{
	struct bytebuf out = { 0 };
	char *dir = th_tmpdir(), *file;
	struct nt_reader *r;
	struct nt_rec rec;
	size_t i;
	int rc;

	cr_assert_not_null(dir);
	file = th_fmt("%s/v.nettrace", dir);
	rc = tool(&out, th_fmt("fleet export --clickhouse '%s?database=rp' --host %s --where 1 "
			       "-o '%s'", url, host, file));
	cr_assert_eq(rc, 0, "fleet export: %d\n%s", rc, th_text(&out));
	cr_assert(strstr(th_text(&out), "4 events of 1 processes"), "%s", th_text(&out));
	cr_assert(strstr(th_text(&out), "3 stacks (0 not in the stacks table)"), "%s",
		  th_text(&out));
	r = nt_reader_open(file);
	cr_assert_not_null(r, "%s", file);
	for (i = 0; i < NEVENTS; i++) {
		const struct test_stack *s = event_stack[i] < 0 ? NULL : &stacks[event_stack[i]];

		cr_assert_eq(nt_reader_next(r, &rec), 1, "%s", nt_reader_errmsg(r));
		cr_assert_eq(rec.stack_bytes, s ? 8 * s->n : 0u, "event %zu's stack", i);
		if (s)
			cr_assert_eq(memcmp(rec.stack, s->frames, 8 * s->n), 0,
				     "event %zu: the frames of its stacks row", i);
	}
	cr_assert_eq(nt_reader_next(r, &rec), 0, "%s", nt_reader_errmsg(r));
	nt_reader_free(r);
	th_rmdir(dir);
	bb_free(&out);
}

/* What the agent's egress asks before it sends: refused, with what to run */
static void agent_refused(struct ch_client *c, const char *why)
{
	struct fleet_layout l;
	char err[1024];

	cr_assert_eq(fleet_layout_read(c, "rp", &l, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(fleet_version_writable(&l, "rp", err, sizeof(err)), -EPROTONOSUPPORT);
	cr_assert(strstr(err, why), "expected the agent's refusal to say '%s', got: %s", why, err);
}

/*
 * The stack ids of host's rows (c reads every shard of a cluster) as
 * version 2 names the stacks: its stacks rows under FNV-1a ids alone, the
 * row of an id no version hashed kept, its events naming the new ids
 */
static void stack_ids_are_version_2(struct ch_client *c, const char *host)
{
	uint64_t old_ids[2], new_ids[2];
	char *sql;
	size_t i;

	for (i = 0; i < 2; i++) {
		old_ids[i] = v1_stack_id(stacks[i].frames, stacks[i].n, stacks[i].nk);
		new_ids[i] = v2_stack_id(stacks[i].frames, stacks[i].n, stacks[i].nk);
		sql = th_fmt("SELECT groupUniqArray(stack_id) FROM rp.stacks WHERE host = '%s' AND "
			     "frames = [%" PRIu64 ", %" PRIu64 ", %" PRIu64 "%s]", host,
			     stacks[i].frames[0], stacks[i].frames[1], stacks[i].frames[2],
			     stacks[i].n == 4 ? th_fmt(", %" PRIu64, stacks[i].frames[3]) : "");
		answer_is(c, sql, th_fmt("[%" PRIu64 "]\n", new_ids[i]),
			  th_fmt("%s: stack %zu's rows, under its FNV-1a id alone", host, i));
	}
	answer_is(c, th_fmt("SELECT count() FROM rp.stacks WHERE host = '%s' AND stack_id IN (%"
			    PRIu64 ", %" PRIu64 ")", host, old_ids[0], old_ids[1]), "0\n",
		  th_fmt("%s: rows of the old ids", host));
	answer_is(c, th_fmt("SELECT count() FROM rp.stacks WHERE host = '%s' AND stack_id = %u",
			    host, FOREIGN_ID), "1\n",
		  th_fmt("%s: the row of an id no version hashed", host));
	answer_is(c, th_fmt("SELECT stack_id FROM rp.events WHERE host = '%s' ORDER BY thread_seq "
			    "FORMAT TabSeparated", host),
		  th_fmt("%" PRIu64 "\n%" PRIu64 "\n0\n%" PRIu64 "\n", new_ids[0], new_ids[1],
			 new_ids[0]), th_fmt("%s: the events' stack ids", host));
}

Test(fleet_version, a_version_1_database_is_read_then_migrated_by_init, .timeout = 120,
     .fini = node_fini)
{
	struct bytebuf out = { 0 };
	struct ch_client c;
	int rc;

	TH_NEED_CLICKHOUSE();
	th_ch_init(&node);
	th_ch_start(&node, NULL);
	client_of(&c, node.url);
	version_1_tables(&c);
	version_1_rows(&c, HOST);

	/* read as it is */
	check_reads(node.url, HOST, 1, true);
	export_reads(node.url, HOST);
	agent_refused(&c, "holds fleet schema version 1, whose stack ids this agent does not "
		      "write (their hash had a wrong offset basis): stop the agents of version 1 "
		      "and run 'ringpipe fleet init'");

	rc = tool(&out, th_fmt("fleet init --clickhouse '%s?database=rp'", node.url));
	cr_assert_eq(rc, 0, "fleet init of a version-1 database: %d\n%s", rc, th_text(&out));
	cr_assert(strstr(th_text(&out), "database rp migrated from fleet schema version 1 to 2: "
			 "2 stack ids recomputed from their frames"), "%s", th_text(&out));
	cr_assert(strstr(th_text(&out), "1 stack ids of database rp are no version-1 hash of "
			 "their frames, left as they are"), "%s", th_text(&out));
	cr_assert(strstr(th_text(&out), "(legacy schema, version 2)"), "%s", th_text(&out));

	answer_is(&c, "SELECT version FROM rp.schema_version", "2\n", "the version recorded");
	stack_ids_are_version_2(&c, HOST);

	/* read the same as version 2, and written to by the agent */
	check_reads(node.url, HOST, 1, false);
	export_reads(node.url, HOST);
	{
		struct fleet_layout l;
		char err[1024];

		cr_assert_eq(fleet_layout_read(&c, "rp", &l, err, sizeof(err)), 0, "%s", err);
		cr_assert_eq(l.version, 2u);
		cr_assert_eq(fleet_version_writable(&l, "rp", err, sizeof(err)), 0, "%s", err);
	}

	/* once is enough: init again changes nothing */
	rc = tool(&out, th_fmt("fleet init --clickhouse '%s?database=rp'", node.url));
	cr_assert_eq(rc, 0, "%s", th_text(&out));
	cr_assert_null(strstr(th_text(&out), "migrated"), "%s", th_text(&out));
	stack_ids_are_version_2(&c, HOST);
	bb_free(&out);
	ch_client_free(&c);
}

Test(fleet_version, a_newer_version_is_refused_by_init_and_every_reader, .timeout = 120,
     .fini = node_fini)
{
	struct bytebuf out = { 0 };
	struct ch_client c;
	char *dir, *file;
	int rc;

	TH_NEED_CLICKHOUSE();
	th_ch_init(&node);
	th_ch_start(&node, NULL);
	client_of(&c, node.url);
	agent_refused(&c, "database rp has no fleet tables: create them with 'ringpipe fleet "
		      "init'");
	rc = tool(&out, th_fmt("fleet init --clickhouse '%s?database=rp'", node.url));
	cr_assert_eq(rc, 0, "%s", th_text(&out));
	cr_assert_null(strstr(th_text(&out), "migrated"), "%s", th_text(&out));
	answer_is(&c, "SELECT version FROM rp.schema_version", "2\n", "a new database's version");

	free(answer(&c, "DROP TABLE rp.schema_version"));
	free(answer(&c, "CREATE VIEW rp.schema_version AS SELECT toUInt32(3) AS version"));
	rc = tool(&out, th_fmt("fleet init --clickhouse '%s?database=rp'", node.url));
	cr_assert_eq(rc, 1, "fleet init of a version-3 database: %d\n%s", rc, th_text(&out));
	cr_assert(strstr(th_text(&out), "init: database rp holds fleet schema version 3, newer "
			 "than this ringpipe makes (2): nothing changed"), "%s", th_text(&out));
	answer_is(&c, "SELECT version FROM rp.schema_version", "3\n", "the version, untouched");

	rc = tool(&out, th_fmt("fleet check --clickhouse '%s?database=rp'", node.url));
	cr_assert_eq(rc, 1, "%s", th_text(&out));
	cr_assert(strstr(th_text(&out), "check: database rp holds fleet schema version 3, newer "
			 "than this ringpipe reads (2)"), "%s", th_text(&out));
	rc = tool(&out, th_fmt("fleet top --clickhouse '%s?database=rp'", node.url));
	cr_assert_eq(rc, 1, "%s", th_text(&out));
	cr_assert(strstr(th_text(&out), "top: database rp holds fleet schema version 3"), "%s",
		  th_text(&out));
	dir = th_tmpdir();
	cr_assert_not_null(dir);
	file = th_fmt("%s/v.nettrace", dir);
	rc = tool(&out, th_fmt("fleet export --clickhouse '%s?database=rp' --where 1 -o '%s'",
			       node.url, file));
	cr_assert_eq(rc, 1, "%s", th_text(&out));
	cr_assert(strstr(th_text(&out), "export: database rp holds fleet schema version 3"), "%s",
		  th_text(&out));
	cr_assert_neq(access(file, F_OK), 0, "an export of a version it cannot read");
	agent_refused(&c, "holds fleet schema version 3, newer than this agent writes (2)");
	th_rmdir(dir);
	bb_free(&out);
	ch_client_free(&c);
}

/* ---- a cluster: two shards, ZooKeeper ---------------------------------------- */

static struct th_ch_node node_b;
static struct th_zk zk;

static void cluster_fini(void)
{
	th_ch_stop(&node);
	th_ch_stop(&node_b);
	th_zk_stop(&zk);
}

/* Until the server at url holds no row under a version-1 id in its own
 * tables: the mutations of the migration are done there */
static void old_ids_gone(const char *url)
{
	char *ids = th_fmt("%" PRIu64 ", %" PRIu64,
			   v1_stack_id(stacks[0].frames, stacks[0].n, stacks[0].nk),
			   v1_stack_id(stacks[1].frames, stacks[1].n, stacks[1].nk));
	char *sql = th_fmt("SELECT (SELECT count() FROM rp.events_local WHERE stack_id IN (%s)) + "
			   "(SELECT count() FROM rp.stacks_local WHERE stack_id IN (%s))", ids, ids);

	while (th_ch_ask_u64(th_fmt("%s?database=rp", url), sql))
		usleep(100000);
}

Test(fleet_version, a_version_1_cluster_is_migrated_on_every_shard, .timeout = 300,
     .fini = cluster_fini)
{
	static const char *const hosts[] = { "h0", "h1", "h2", "h3" };
	struct bytebuf out = { 0 };
	struct th_ch_node two[2];
	struct ch_client a, b;
	char *on_a, *on_b;
	size_t i;
	int rc;

	TH_NEED_CLICKHOUSE();
	th_ch_cluster_start(&zk, two, 2, 1, "fleet");
	th_ch_fleet_init_cluster(two, 2, th_fmt("%s?database=rp", two[0].url), "fleet");
	node = two[0];
	node_b = two[1];
	/* version 1 made the same tables on every server, without the view;
	 * its rows went through the Distributed tables, synchronously */
	client_of(&a, th_fmt("%s?insert_distributed_sync=1", node.url));
	client_of(&b, node_b.url);
	free(answer(&a, "DROP TABLE rp.schema_version ON CLUSTER fleet"));
	for (i = 0; i < 4; i++)
		version_1_rows(&a, hosts[i]);
	on_a = answer(&a, "SELECT uniqExact(host) FROM rp.stacks_local");
	on_b = answer(&b, "SELECT uniqExact(host) FROM rp.stacks_local");
	cr_assert(atoi(on_a) > 0 && atoi(on_b) > 0, "expected stacks of the 4 hosts on both "
		  "shards, got %s and %s", on_a, on_b);
	check_reads(node_b.url, NULL, 4, true);

	rc = tool(&out, th_fmt("fleet init --clickhouse '%s?database=rp'", node.url));
	cr_assert_eq(rc, 1, "fleet init of a cluster's database without --cluster: %d\n%s", rc,
		     th_text(&out));
	cr_assert(strstr(th_text(&out), "database rp holds a cluster's tables (stacks_local under "
			 "stacks): give --cluster NAME"), "%s", th_text(&out));
	rc = tool(&out, th_fmt("fleet init --clickhouse '%s?database=rp' --cluster fleet",
			       node.url));
	cr_assert_eq(rc, 0, "fleet init --cluster of a version-1 database: %d\n%s", rc,
		     th_text(&out));
	cr_assert(strstr(th_text(&out), "database rp migrated from fleet schema version 1 to 2: "
			 "2 stack ids recomputed from their frames"), "%s", th_text(&out));

	/* each shard's server applies the mutations to its own tables */
	old_ids_gone(node.url);
	old_ids_gone(node_b.url);
	answer_is(&a, "SELECT version FROM rp.schema_version", "2\n", "the version on shard 1");
	answer_is(&b, "SELECT version FROM rp.schema_version", "2\n", "the version on shard 2");
	for (i = 0; i < 4; i++)
		stack_ids_are_version_2(&b, hosts[i]);
	check_reads(node_b.url, NULL, 4, false);
	for (i = 0; i < 4; i++)
		export_reads(node_b.url, hosts[i]);
	free(on_a);
	free(on_b);
	bb_free(&out);
	ch_client_free(&a);
	ch_client_free(&b);
}

/* ---- a batch an agent of version 1 left in its spool -------------------------- */

static struct th_agent_env agent;

static void agent_fini(void)
{
	th_agent_env_kill(&agent);
	th_ch_stop(&node);
}

/* host's version-1 batch as that agent spooled it (egress_batch.h): batch
 * version 1, the sections in the order they are sent, the manifest last */
static void version_1_spooled(struct bytebuf *out, const char *host)
{
	static const enum fleet_table_id order[] = { FLEET_EVENTS, FLEET_STACKS, FLEET_BATCHES };
	struct batch_bodies bb;
	size_t i;

	version_1_batch(&bb, host);
	bb_append(out, "RPEB", 4);
	bb_append_u8(out, 1);
	bb_append_u8(out, FLEET_LEGACY);
	bb_append_u16(out, (uint16_t)strlen(host));
	bb_append(out, host, strlen(host));
	bb_append(out, agent_run, 16);
	bb_append_u32(out, 1);		/* stream */
	bb_append_u64(out, 1);		/* seq */
	bb_append_u8(out, 3);
	for (i = 0; i < 3; i++) {
		bb_append_u8(out, (uint8_t)order[i]);
		bb_append_u32(out, bb.rows[order[i]]);
		bb_append_u64(out, bb.body[order[i]].len);
		bb_append(out, bb.body[order[i]].p, bb.body[order[i]].len);
	}
	cr_assert(!out->oom);
	bodies_free(&bb);
}

/* The stack ids of table t's rows in batch b, in row order, into ids (n at most) */
static size_t batch_ids(const struct egress_batch *b, enum fleet_table_id t, uint64_t *ids,
			size_t n)
{
	const struct fleet_table *ft = &fleet_tables[t];
	size_t i, k = 0, at[FE_NCOLS], row, col = t == FLEET_EVENTS ? FE_STACK_ID : FS_STACK_ID;

	for (i = 0; i < b->nsections; i++) {
		const uint8_t *p = b->sections[i].body, *end = p + b->sections[i].len;

		if (b->sections[i].table != t)
			continue;
		for (; p < end; p += row) {
			row = fleet_row_measure(p, end, (enum fleet_dialect)b->dialect, ft, at);
			cr_assert_gt(row, 0u, "a row of %s does not read", ft->name);
			cr_assert_lt(k, n);
			memcpy(&ids[k++], p + at[col], 8);
		}
	}
	return k;
}

Test(fleet_version, a_spooled_batch_of_version_1_gets_version_2_stack_ids)
{
	uint64_t v2[2], ev[NEVENTS], st[4];
	struct bytebuf raw = { 0 };
	struct egress_batch b;
	size_t i, len;

	for (i = 0; i < 2; i++)
		v2[i] = v2_stack_id(stacks[i].frames, stacks[i].n, stacks[i].nk);
	version_1_spooled(&raw, HOST);
	len = raw.len;
	cr_assert_eq(egress_batch_parse(raw.p, raw.len, &b), 0, "a batch of version 1 reads");
	cr_assert_eq(b.stack_ids, 1u);
	cr_assert_eq(egress_batch_upgrade(&b), 0);
	cr_assert_eq(b.stack_ids, FLEET_SCHEMA_VERSION);
	cr_assert_eq(raw.len, len);
	cr_assert_eq(batch_ids(&b, FLEET_EVENTS, ev, NEVENTS), NEVENTS);
	cr_assert(ev[0] == v2[0] && ev[1] == v2[1] && ev[2] == 0 && ev[3] == v2[0],
		  "the events' ids: %#" PRIx64 " %#" PRIx64 " %#" PRIx64 " %#" PRIx64 ", expected %#"
		  PRIx64 " %#" PRIx64 " 0 %#" PRIx64, ev[0], ev[1], ev[2], ev[3], v2[0], v2[1], v2[0]);
	cr_assert_eq(batch_ids(&b, FLEET_STACKS, st, 4), 4u);
	cr_assert(st[0] == v2[0] && st[1] == v2[1] && st[2] == v2[0] && st[3] == FOREIGN_ID,
		  "the stacks rows' ids: %#" PRIx64 " %#" PRIx64 " %#" PRIx64 " %#" PRIx64, st[0],
		  st[1], st[2], st[3]);
	/* its bytes say version 1 still: read again, nothing more changes */
	cr_assert_eq(egress_batch_parse(raw.p, raw.len, &b), 0);
	cr_assert_eq(egress_batch_upgrade(&b), 0);
	cr_assert_eq(batch_ids(&b, FLEET_EVENTS, ev, NEVENTS), NEVENTS);
	cr_assert(ev[0] == v2[0] && ev[1] == v2[1] && ev[3] == v2[0], "upgraded twice");
	/* a batch version newer than this agent's is none of its batches */
	raw.p[4] = 3;
	cr_assert_eq(egress_batch_parse(raw.p, raw.len, &b), -EBADMSG);
	bb_free(&raw);
}

Test(fleet_version, an_agent_ships_a_batch_an_older_agent_spooled_with_version_2_stack_ids,
     .timeout = 120, .fini = agent_fini)
{
	struct spool_opts so = { .sz = sizeof(so) };
	struct bytebuf raw = { 0 }, out = { 0 };
	char err[512], *url, *more[13];
	struct ch_client c;
	struct spool *sp;
	uint64_t num;
	int rc;

	TH_NEED_CLICKHOUSE();
	th_ch_init(&node);
	th_ch_start(&node, NULL);
	rc = tool(&out, th_fmt("fleet init --clickhouse '%s?database=rp'", node.url));
	cr_assert_eq(rc, 0, "%s", th_text(&out));
	th_agent_env_init(&agent);
	so.dir = th_fmt("%s/spool", agent.dir);
	sp = spool_open(&so, err, sizeof(err));
	cr_assert_not_null(sp, "%s", err);
	version_1_spooled(&raw, HOST);
	cr_assert_eq(spool_put(sp, raw.p, raw.len, &num), 0);
	spool_close(sp);

	url = th_fmt("%s?database=rp", node.url);
	memcpy(more, (char *[]){ "--providers", "AgentTest", "--clickhouse", url,
				 "--clickhouse-dialect", "legacy", "--host-id", "v1-spool",
				 "--spool-dir", (char *)so.dir, NULL }, 11 * sizeof(char *));
	th_agent_up_argv(&agent, more);
	th_shipped_wait(&agent, 60000);
	cr_assert_eq(th_agent_down(&agent), 0);
	cr_assert_eq(th_read_file(th_fmt("%s/agent.log", agent.dir), &out), 0);
	cr_assert(strstr(th_text(&out), "their stack ids are recomputed as version 2's"), "%s",
		  th_text(&out));

	client_of(&c, node.url);
	stack_ids_are_version_2(&c, HOST);
	check_reads(node.url, HOST, 1, false);
	ch_client_free(&c);
	bb_free(&raw);
	bb_free(&out);
}
