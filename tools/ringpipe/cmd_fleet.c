// SPDX-License-Identifier: MIT
/*
 * ringpipe fleet: the ClickHouse side of the fleet. `init` creates the
 * schema of fleet/fleet_schema.h in the dialect the server's version calls
 * for; `query` runs a statement and prints the answer; `check` says
 * whether every batch the agents sent is whole and there once
 * (fleet_check.h); `export` writes the events a condition selects to a
 * nettrace file (fleet_export.h); `top` prints canned tables of events,
 * GC pauses and functions (fleet_top.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fleet/clickhouse.h"
#include "cmds.h"
#include "fleet/fleet_check.h"
#include "fleet/fleet_export.h"
#include "fleet/fleet_schema.h"
#include "nettrace/nettrace.h"
#include "fleet/fleet_top.h"
#include "fleet/fleet_version.h"
#include "common/tool_opts.h"
#include "common/tool_util.h"

static const char fleet_usage[] =
"usage: ringpipe fleet init --clickhouse URL [--cluster NAME] [--dialect legacy|current]\n"
"                           [--print] [CREDENTIALS]\n"
"       ringpipe fleet query --clickhouse URL [--format FORMAT] [CREDENTIALS] SQL\n"
"       ringpipe fleet check --clickhouse URL [--host H] [CREDENTIALS]\n"
"       ringpipe fleet export --clickhouse URL --where COND -o FILE.nettrace\n"
"                             [--format v5|v6] [--host H] [CREDENTIALS]\n"
"       ringpipe fleet top --clickhouse URL [--host H] [--since DURATION]\n"
"                          [--limit N] [CREDENTIALS] [events|gc|functions]\n"
"\n"
"URL is ClickHouse's HTTP interface: http[s]://HOST[:PORT]/[?database=NAME\n"
"&user=U&password=P&SETTING=VALUE...] (port 8123, 8443 for https, and database\n"
CH_DEFAULT_DATABASE " by default; other parameters are ClickHouse settings, passed on\n"
"with every statement).\n"
"CREDENTIALS: --user U, and --password P or --password-file FILE (its first\n"
"line), which take precedence over the URL's.\n"
"TLS (https): --cacert FILE trusts only the CAs in FILE (PEM; default:\n"
"$SSL_CERT_FILE, else the system's CA store); --cert FILE and --key FILE\n"
"present a client certificate (PEM; the key may be in the --cert FILE).\n"
"--compress gzip sends request bodies gzip-compressed (default: none).\n"
"Proxies come from http_proxy, https_proxy and no_proxy; loopback goes\n"
"direct unless no_proxy is set.\n"
"\n"
"init   creates the database and the tables events, event_meta, stacks,\n"
"       processes, containers, losses and batches (the manifest of what each\n"
"       agent sent), each only if it does not exist, so it may run again, and\n"
"       last the view schema_version: the schema's version, 2. A database of\n"
"       version 1 (made before it: stack ids of a hash with a wrong offset\n"
"       basis) is migrated first, each stack id recomputed from its frames;\n"
"       stop the agents of version 1 before. A newer version is refused. The\n"
"       types follow 'SELECT version()': DateTime64, LowCardinality and Map on\n"
"       ClickHouse 22 and later ('current'), DateTime plus nanoseconds, String\n"
"       and Nested before ('legacy'); --dialect overrides. --cluster NAME\n"
"       creates them ON CLUSTER: ReplicatedMergeTree tables TABLE_local (ZooKeeper\n"
"       path /clickhouse/tables/{shard}/DATABASE/TABLE, replica {replica}: the\n"
"       servers need those macros) and Distributed tables over them, sharded\n"
"       by cityHash64(host). --print prints the statements instead of running\n"
"       them (with --dialect it needs no server).\n"
"query  runs SQL in the URL's database and prints the server's answer, in\n"
"       FORMAT (default TabSeparatedWithNames; a FORMAT clause in SQL wins).\n"
"check  for every host (or H), agent run and stream the agents shipped: the\n"
"       batches run 1, 2, ... without a gap, each has one manifest row, and\n"
"       the events and losses tables hold exactly the rows its manifest says.\n"
"       Prints a line per host and agent run (streams, batches, events, events\n"
"       lost, problems) and each problem in words. Run it once the agents\n"
"       have shipped: a batch still in flight shows as a problem.\n"
"export writes the events rows COND selects (SQL over the columns of events,\n"
"       e.g. \"container_id = '5d1e...'\" or \"pid = 4242 AND event_name =\n"
"       'GCStart'\"; --host H adds host = 'H'), in time order, to FILE as\n"
"       nettrace, which TraceEvent, PerfView and 'ringpipe dump' read: the\n"
"       provider, name and fields of each event from event_meta, its pid, tid,\n"
"       time (ns since the epoch), activity ids, payload bytes, and its stack\n"
"       when the stacks table has it. --format v6 (the default) holds any\n"
"       number of processes; v5 holds one. Rows are read a page at a time,\n"
"       with a line on stderr per page of a long export. A selection without\n"
"       rows writes no file and exits 1.\n"
"top    tables of what the agents shipped in the last DURATION (default 1h;\n"
"       '0' for all of it), of every host or H, N rows each (default 20):\n"
"       events     events per container and provider (a process outside a\n"
"                  container shows as '-', unless the agent named its\n"
"                  container in its own trace)\n"
"       gc         GC pauses per container and runtime: .NET from\n"
"                  GC/SuspendEEStart to GC/RestartEEStop (GC/Start to GC/Stop\n"
"                  without suspensions), CPython and HotSpot from their USDT\n"
"                  GC/Start to GC/Stop; count, total, p50, p99 and max in ms\n"
"       functions  the hottest functions of the CPU samples (agent --sample):\n"
"                  samples whose leaf frame is the function (SELF) and whose\n"
"                  stack holds it (TOTAL)\n"
"       Without a name, all three.\n"
"check, export and top read databases of schema versions 1 and 2.\n";

static const char fleet_usage_end[] =
"Exit status: 0 on success (check: everything is accounted for); 1 when the\n"
"server cannot be reached or refuses the statement (its message is printed),\n"
"check found a problem, or export selected no row; 2 on a usage error.\n"
"See Documentation/fleet.md for the schema.\n";

struct fleet_args {
	const char *sub;		/* "init", "query", "check", "export" or "top" */
	const char *url, *cluster, *dialect, *user, *password, *password_file, *format, *host;
	const char *cacert, *cert, *key, *compress;	/* the transport */
	const char *where, *output;	/* export's */
	const char *sql;
	const char *since, *limit, *what;	/* top */
	uint64_t timeout_s;
	bool print;
};

#define FLEET(m) struct fleet_args, m

/* what every subcommand takes: the server, and how to talk to it */
static const struct tool_opt fleet_common[] = {
	TOOL_STRING("clickhouse", 0, "URL", FLEET(url), "ClickHouse's HTTP interface (above)"),
	TOOL_STRING("user", 0, "U", FLEET(user), "the user (default: the URL's)"),
	TOOL_STRING("password", 0, "P", FLEET(password), "the password (default: the URL's)"),
	TOOL_STRING("password-file", 0, "FILE", FLEET(password_file),
		    "the password, the first line of FILE"),
	TOOL_UINT("timeout", 0, "S", 1, 3600, FLEET(timeout_s),
		  "bounds the connect and every wait for the server, in\n"
		  "seconds (default 30)", .bad = "takes seconds, 1 to 3600"),
	TOOL_STRING("cacert", 0, "FILE", FLEET(cacert),
		    "https: trust only the CAs in FILE (PEM; default:\n"
		    "$SSL_CERT_FILE, else the system's CA store)"),
	TOOL_STRING("cert", 0, "FILE", FLEET(cert), "https: present this client certificate (PEM)"),
	TOOL_STRING("key", 0, "FILE", FLEET(key), "the client certificate's key (default: in --cert)"),
	TOOL_STRING("compress", 0, "gzip|none", FLEET(compress),
		    "compress request bodies (default none)"),
	TOOL_OPTS_END
};

static const struct tool_opt fleet_init_opts[] = {
	TOOL_STRING("cluster", 0, "NAME", FLEET(cluster), "create the tables ON CLUSTER NAME"),
	TOOL_STRING("dialect", 0, "legacy|current", FLEET(dialect),
		    "the tables' types (default: from the server's version)"),
	TOOL_FLAG("print", 0, FLEET(print), "print the statements instead of running them"),
	TOOL_OPTS_END
};

static const struct tool_opt fleet_query_opts[] = {
	TOOL_STRING("format", 0, "FORMAT", FLEET(format),
		    "the answer's format (default TabSeparatedWithNames)"),
	TOOL_OPTS_END
};

static const struct tool_opt fleet_check_opts[] = {
	TOOL_STRING("host", 0, "H", FLEET(host), "only this host"),
	TOOL_OPTS_END
};

static const struct tool_opt fleet_export_opts[] = {
	TOOL_STRING("where", 0, "COND", FLEET(where), "the events rows to export (required)"),
	TOOL_STRING("output", 'o', "FILE", FLEET(output), "the nettrace file to write (required)"),
	TOOL_STRING("format", 0, "v5|v6", FLEET(format), "nettrace version (default v6)"),
	TOOL_STRING("host", 0, "H", FLEET(host), "only this host"),
	TOOL_OPTS_END
};

static const struct tool_opt fleet_top_opts[] = {
	TOOL_STRING("host", 0, "H", FLEET(host), "only this host"),
	TOOL_STRING("since", 0, "DURATION", FLEET(since),
		    "what was shipped in the last DURATION (default 1h; 0: all)"),
	TOOL_STRING("limit", 0, "N", FLEET(limit), "rows per table (default 20)"),
	TOOL_OPTS_END
};

#define FLEET_SUB(sub, max) { .name = "fleet " #sub, .usage = fleet_usage, \
			      .usage_end = fleet_usage_end, .opts = fleet_##sub##_opts, \
			      .common = fleet_common, .max_args = (max) }

static const struct tool_cmd fleet_subs[] = {
	FLEET_SUB(init, 0), FLEET_SUB(query, 1), FLEET_SUB(check, 0), FLEET_SUB(export, 0),
	FLEET_SUB(top, 1),
};

static const struct tool_opt fleet_opts[] = { TOOL_OPTS_END };
static const struct tool_cmd *const fleet_also[] = {
	&fleet_subs[0], &fleet_subs[1], &fleet_subs[2], &fleet_subs[3], &fleet_subs[4], NULL
};
static const struct tool_cmd fleet_cmd = {
	.name = "fleet", .usage = fleet_usage, .usage_end = fleet_usage_end, .opts = fleet_opts,
	.common = fleet_common, .also = fleet_also,
};

static int fleet_check_args(const struct fleet_args *a)
{
	if (!a->url && !(a->print && a->dialect))
		return tool_err("fleet", "%s: --clickhouse URL is required (see --help)", a->sub),
		       2;
	if (a->password && a->password_file)
		return tool_err("fleet", "give --password or --password-file, not both"), 2;
	if (a->compress && strcmp(a->compress, "gzip") && strcmp(a->compress, "none"))
		return tool_err("fleet", "--compress must be gzip or none, not '%s'", a->compress),
		       2;
	if (!strcmp(a->sub, "query") && !a->sql)
		return tool_err("fleet", "query: no SQL statement given (see --help)"), 2;
	if (a->cluster && !fleet_name_ok(a->cluster))
		return tool_err("fleet", "--cluster '%s': a cluster name is letters, digits and "
				"'_' (as in <remote_servers>)", a->cluster), 2;
	if (a->dialect && strcmp(a->dialect, "legacy") && strcmp(a->dialect, "current"))
		return tool_err("fleet", "--dialect must be legacy or current, not '%s'",
				a->dialect), 2;
	if (strcmp(a->sub, "export"))
		return 0;
	if (!a->where || !a->where[0])
		return tool_err("fleet", "export: --where COND is required: the condition on "
				"events rows to export (--where 1 for all of them)"), 2;
	if (!a->output || !a->output[0])
		return tool_err("fleet", "export: -o FILE.nettrace is required: where to write "
				"the trace"), 2;
	if (a->format && strcmp(a->format, "v5") && strcmp(a->format, "v6"))
		return tool_err("fleet", "export: --format must be v5 or v6, not '%s'",
				a->format), 2;
	return 0;
}

/* argv[0] is the subcommand, one of fleet_subs. TOOL_OPTS_RUN, or the exit status. */
static int fleet_parse(struct fleet_args *a, const struct tool_cmd *sub, int argc, char **argv)
{
	struct tool_args rest;
	int rc;

	a->sub = argv[0];
	a->timeout_s = 30;
	rc = tool_opts_parse(sub, argc, argv, a, &rest);
	if (rc != TOOL_OPTS_RUN)
		return rc;
	if (rest.argc && !strcmp(a->sub, "query"))
		a->sql = rest.argv[0];
	else if (rest.argc)
		a->what = rest.argv[0];
	rc = fleet_check_args(a);
	return rc ? rc : TOOL_OPTS_RUN;
}

/* The client the arguments name; 0, or 1 (2 for a malformed URL) after saying why. */
static int fleet_connect(const struct fleet_args *a, struct ch_client *c)
{
	struct ch_target t;
	char err[512];
	int rc;

	if (ch_target_parse(&t, a->url, err, sizeof(err)))
		return tool_err("fleet", "--clickhouse %s", err), 2;
	if (!fleet_name_ok(t.database))
		return tool_err("fleet", "database '%s': a database name is letters, digits and "
				"'_'", t.database), 2;
	if (a->user)
		snprintf(t.user, sizeof(t.user), "%s", a->user);
	if (a->password)
		snprintf(t.password, sizeof(t.password), "%s", a->password);
	if (a->password_file && ch_target_read_password(&t, a->password_file, err, sizeof(err)))
		return tool_err("fleet", "%s", err);
	rc = http_tls_set(&t.tls, a->cacert, a->cert, a->key, err, sizeof(err));
	if (rc)		/* a file that cannot be read is 1, as --password-file's */
		return tool_err("fleet", "%s", err), rc == -EINVAL ? 2 : 1;
	if (a->compress)
		http_body_encoding_parse(a->compress, &t.encoding);
	if (ch_client_init(c, &t, (int)(a->timeout_s * 1000)))
		return tool_err("fleet", "--clickhouse %s: the host name is too long", a->url), 2;
	return 0;
}

struct fleet_init_run {
	struct ch_client *c;	/* NULL: print the statements */
	unsigned statements;
};

static int fleet_init_statement(void *ctx, const char *sql)
{
	struct fleet_init_run *run = ctx;
	char err[4096];
	int rc;

	run->statements++;
	if (!run->c) {
		printf("%s;\n\n", sql);
		return 0;
	}
	rc = ch_exec(run->c, sql, NULL, 0, NULL, err, sizeof(err));
	if (rc)
		tool_err("fleet", "init: %s\n  in: %.200s%s", err, sql,
			 strlen(sql) > 200 ? "..." : "");
	return rc;
}

/* The dialect: --dialect's, else the server's. 0, or 1 after saying why. */
static int fleet_pick_dialect(const struct fleet_args *a, struct ch_client *c,
			      enum fleet_dialect *d, char *version, size_t len)
{
	char err[4096];

	snprintf(version, len, "?");
	if (c && ch_query_line(c, "SELECT version()", version, len, err, sizeof(err)))
		return tool_err("fleet", "init: %s", err);
	if (a->dialect) {
		*d = strcmp(a->dialect, "current") ? FLEET_LEGACY : FLEET_CURRENT;
		return 0;
	}
	if (fleet_dialect_of(version, d))
		return tool_err("fleet", "init: the server's version '%s' is not a version "
				"number; give --dialect legacy or current", version);
	return 0;
}

/*
 * Before the schema's statements: the database's version read, and a
 * version-1 database migrated (the statements then record version 2).
 * 0, or 1 after saying why.
 */
static int fleet_init_migrate(struct ch_client *c, const struct fleet_ddl_opts *o,
			      unsigned *from, struct fleet_migration *m)
{
	struct fleet_layout l;
	char err[4096];

	if (fleet_layout_read(c, o->database, &l, err, sizeof(err)))
		return tool_err("fleet", "init: %s", err);
	*from = l.version;
	if (l.version > FLEET_SCHEMA_VERSION)
		return tool_err("fleet", "init: database %s holds fleet schema version %u, newer "
				"than this ringpipe makes (%d): nothing changed (use the ringpipe "
				"that made it, or a newer one)", o->database, l.version,
				FLEET_SCHEMA_VERSION);
	if (l.version != 1)
		return 0;
	if (fleet_migrate(c, o, &l, stderr, m, err, sizeof(err)))
		return tool_err("fleet", "init: migrating database %s from fleet schema version 1: "
				"%s\n  (it stays version 1; what was done is kept, and 'ringpipe "
				"fleet init' run again goes on from there)", o->database, err);
	return 0;
}

static int fleet_init(const struct fleet_args *a)
{
	struct ch_client client;
	struct fleet_init_run run = { 0 };
	struct fleet_ddl_opts o = { .cluster = a->cluster };
	struct fleet_migration m = { 0 };
	bool connect = !(a->print && a->dialect);
	unsigned from = 0;
	char version[64];
	int rc;

	if (connect && (rc = fleet_connect(a, &client)))
		return rc;
	if (connect) {
		/* the database may not exist yet: every statement names it itself */
		client.use_database = false;
		o.database = client.target.database;
	} else {
		o.database = CH_DEFAULT_DATABASE;
	}
	run.c = connect && !a->print ? &client : NULL;
	rc = fleet_pick_dialect(a, connect ? &client : NULL, &o.dialect, version,
				sizeof(version));
	if (!rc && run.c)
		rc = fleet_init_migrate(&client, &o, &from, &m);
	if (!rc && fleet_schema_ddl(&o, fleet_init_statement, &run))
		rc = 1;
	if (!rc && from == 1)
		fprintf(stderr, "ringpipe fleet: init: database %s migrated from fleet schema "
			"version 1 to %d: %" PRIu64 " stack ids recomputed from their frames (%"
			PRIu64 " statements)\n", o.database, FLEET_SCHEMA_VERSION, m.stack_ids,
			m.statements);
	if (!rc && from == 1 && m.foreign)
		fprintf(stderr, "ringpipe fleet: init: %" PRIu64 " stack ids of database %s are no "
			"version-1 hash of their frames, left as they are\n", m.foreign,
			o.database);
	if (!rc && run.c)
		fprintf(stderr,
			"ringpipe fleet: init: ClickHouse %s at %s:%s: database %s, %d "
			"tables (%s schema, version %d%s%s), %u statements\n",
			version, client.target.host, client.target.port, o.database, FLEET_NTABLES,
			fleet_dialect_name(o.dialect), FLEET_SCHEMA_VERSION,
			a->cluster ? ", on cluster " : "", a->cluster ? a->cluster : "",
			run.statements);
	if (connect)
		ch_client_free(&client);
	return rc;
}

static int fleet_query(const struct fleet_args *a)
{
	struct ch_client client;
	struct bytebuf out = { 0 };
	char err[4096];
	size_t used;
	int rc = fleet_connect(a, &client);

	if (rc)
		return rc;
	/* the server's default for statements without a FORMAT clause */
	used = strlen(client.target.settings);
	snprintf(client.target.settings + used, sizeof(client.target.settings) - used,
		 "%sdefault_format=%s", used ? "&" : "",
		 a->format ? a->format : "TabSeparatedWithNames");
	rc = ch_exec(&client, a->sql, NULL, 0, &out, err, sizeof(err));
	if (rc)
		rc = tool_err("fleet", "query: %s%s", err, strstr(err, "Code: 81,") ?
			      "\n  (create it with 'ringpipe fleet init', or name the database "
			      "with ?database=NAME)" : "");
	else
		bb_fwrite(&out, stdout);
	bb_free(&out);
	ch_client_free(&client);
	return rc;
}

/*
 * For check, export and top: is the database's schema version one this
 * ringpipe reads? 0, or 1 after saying why. A version-1 database is read
 * as it is, with a note.
 */
static int fleet_readable(const struct fleet_args *a, struct ch_client *c)
{
	struct fleet_layout l;
	char err[4096];

	if (fleet_layout_read(c, c->target.database, &l, err, sizeof(err)) ||
	    fleet_version_readable(&l, c->target.database, err, sizeof(err)))
		return tool_err("fleet", "%s: %s", a->sub, err);
	if (l.version == 1)
		fprintf(stderr, "ringpipe fleet: %s: database %s holds fleet schema version 1 "
			"(stack ids of a hash with a wrong offset basis), read as it is; 'ringpipe "
			"fleet init' migrates it to version %d\n", a->sub, c->target.database,
			FLEET_SCHEMA_VERSION);
	return 0;
}

static int fleet_run_check(const struct fleet_args *a)
{
	struct ch_client client;
	struct fleet_check_totals t;
	char err[4096];
	int rc = fleet_connect(a, &client);

	if (rc)
		return rc;
	client.use_database = false;
	if (fleet_readable(a, &client)) {
		ch_client_free(&client);
		return 1;
	}
	rc = fleet_check(&client, a->host, stdout, &t, err, sizeof(err));
	if (rc)
		rc = tool_err("fleet", "check: %s%s", err, strstr(err, "Code: 60,") ||
			      strstr(err, "Code: 81,") ? "\n  (no fleet tables there: 'ringpipe "
			      "fleet init' creates them)" : "");
	else if (t.problems)
		printf("%llu problem%s: not everything is accounted for\n", t.problems,
		       t.problems == 1 ? "" : "s"), rc = 1;
	else
		printf("all accounted for: %llu batches in %llu streams of %llu agent runs, %llu "
		       "events, %llu lost\n", t.batches, t.streams, t.runs, t.events, t.lost);
	ch_client_free(&client);
	return rc;
}

static int fleet_run_export(const struct fleet_args *a)
{
	struct ch_client client;
	struct fleet_export_totals t;
	struct fleet_export_opts o = {
		.where = a->where, .host = a->host, .path = a->output, .notes = stderr,
		.format = a->format && !strcmp(a->format, "v5") ? NT_FORMAT_V5 : NT_FORMAT_V6,
	};
	char err[4096];
	int rc = fleet_connect(a, &client);

	if (rc)
		return rc;
	if (fleet_readable(a, &client)) {
		ch_client_free(&client);
		return 1;
	}
	rc = fleet_export(&client, &o, &t, err, sizeof(err));
	if (rc == -ENOENT)
		rc = tool_err("fleet", "export: %s: nothing written", err);
	else if (rc)
		rc = tool_err("fleet", "export: %s", err);
	else
		fprintf(stderr, "ringpipe fleet: export: %s: %" PRIu64 " events of %" PRIu64
			" processes on %" PRIu64 " hosts (first: %s), %" PRIu64 " event types "
			"(%" PRIu64 " without event_meta), %" PRIu64 " stacks (%" PRIu64
			" not in the stacks table), nettrace V%d\n", a->output, t.events,
			t.processes, t.hosts, t.first_process, t.event_types, t.no_meta, t.stacks,
			t.stacks_missing, o.format);
	ch_client_free(&client);
	return rc;
}

/* fleet top's own arguments into o: 0, or 2 after saying what is wrong */
static int fleet_top_args(const struct fleet_args *a, struct fleet_top_opts *o)
{
	uint64_t ns;

	o->what = FLEET_TOP_ALL;
	o->host = a->host;
	o->since_s = 3600;
	o->limit = 20;
	if (a->what && fleet_top_what(a->what, &o->what))
		return tool_err("fleet", "top: '%s' is not a table: events, gc or functions "
				"(or none for all three)", a->what), 2;
	if (a->since && !strcmp(a->since, "0"))
		o->since_s = 0;
	else if (a->since && tool_parse_duration(a->since, 100ull * 365 * 86400 * 1000000000,
						  &ns))
		return tool_err("fleet", "top: --since '%s': give a duration such as 90s, 15m, "
				"2h or 7d (or 0 for everything)", a->since), 2;
	else if (a->since)
		o->since_s = (ns + 999999999) / 1000000000;
	if (a->limit && (tool_parse_u64(a->limit, 1000000, &o->limit) || !o->limit))
		return tool_err("fleet", "top: --limit '%s': give the rows per table, 1 to "
				"1000000", a->limit), 2;
	return 0;
}

static int fleet_run_top(const struct fleet_args *a)
{
	struct fleet_top_opts o;
	struct ch_client client;
	char err[4096];
	int rc = fleet_top_args(a, &o);

	if (rc || (rc = fleet_connect(a, &client)))
		return rc;
	client.use_database = false;
	if (fleet_readable(a, &client)) {
		ch_client_free(&client);
		return 1;
	}
	rc = fleet_top(&client, &o, stdout, err, sizeof(err));
	if (rc)
		rc = tool_err("fleet", "top: %s%s", err, strstr(err, "Code: 60,") ||
			      strstr(err, "Code: 81,") ? "\n  (no fleet tables there: 'ringpipe "
			      "fleet init' creates them)" : "");
	ch_client_free(&client);
	return rc;
}

int cmd_fleet(int argc, char **argv)
{
	struct fleet_args a = { 0 };
	size_t i;
	int rc;

	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		tool_opts_help(argc < 2 ? stderr : stdout, &fleet_cmd);
		return argc < 2 ? 2 : 0;
	}
	for (i = 0; i < sizeof(fleet_subs) / sizeof(fleet_subs[0]); i++)
		if (!strcmp(argv[1], fleet_subs[i].name + strlen("fleet ")))
			break;
	if (i == sizeof(fleet_subs) / sizeof(fleet_subs[0]))
		return tool_err("fleet", "unknown subcommand '%s' (init, query, check, export "
				"or top; see --help)", argv[1]), 2;
	rc = fleet_parse(&a, &fleet_subs[i], argc - 1, argv + 1);
	if (rc != TOOL_OPTS_RUN)
		return rc;
	if (!strcmp(a.sub, "check"))
		return fleet_run_check(&a);
	if (!strcmp(a.sub, "export"))
		return fleet_run_export(&a);
	if (!strcmp(a.sub, "top"))
		return fleet_run_top(&a);
	return !strcmp(a.sub, "init") ? fleet_init(&a) : fleet_query(&a);
}
