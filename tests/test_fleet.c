// SPDX-License-Identifier: MIT
/*
 * The fleet's ClickHouse side: the HTTP client (wire/http_conn.c; its TLS,
 * proxies and exactly-once rule in test_http_conn.c), the
 * ClickHouse client and its URLs (fleet/clickhouse.c), the RowBinary encoder
 * (wire/rowbinary.c), the schema (fleet/fleet_schema.h) and `ringpipe fleet
 * init|query` (cmd_fleet.c), against a real clickhouse-server that each
 * test starts on loopback (tests/clickhouse_node.h) and stops. Without the
 * server those tests skip, with the reason, unless RINGPIPE_REQUIRE_FLEET=1.
 */
#include <inttypes.h>
#include <poll.h>

#include "fleet/clickhouse.h"
#include "clickhouse_node.h"
#include "fleet/fleet_schema.h"
#include "helpers.h"
#include "wire/rowbinary.h"

static struct th_ch_node node;

/* Stops the test's server also when an assertion ended the test early */
static void node_fini(void)
{
	th_ch_stop(&node);
}

static void node_up(const struct th_ch_opts *o)
{
	th_ch_init(&node);
	th_ch_start(&node, o);
}

static void client_of(struct ch_client *c, const char *url)
{
	struct ch_target t;
	char err[512];

	cr_assert_eq(ch_target_parse(&t, url, err, sizeof(err)), 0, "%s: %s", url, err);
	cr_assert_eq(ch_client_init(c, &t, 60000), 0);
	/* the tests name the database in every statement */
	c->use_database = false;
}

/* The answer to sql, which must succeed; the caller frees it */
static char *answer(struct ch_client *c, const char *sql)
{
	return th_ch_answer(c, sql);
}

/* `ringpipe ARGS` (stdout and stderr) into out; its exit status */
static int tool(struct bytebuf *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int tool(struct bytebuf *out, const char *fmt, ...)
{
	va_list ap;
	char *args;
	int rc;

	va_start(ap, fmt);
	cr_assert(vasprintf(&args, fmt, ap) > 0);
	va_end(ap);
	rc = th_tool_run(args, out);
	free(args);
	return rc;
}

static void fleet_init_ok(void)
{
	struct bytebuf out = { 0 };
	int rc = tool(&out, "fleet init --clickhouse '%s?database=rp'", node.url);

	cr_assert_eq(rc, 0, "expected fleet init to succeed, got %d:\n%s", rc, th_text(&out));
	cr_assert(strstr(th_text(&out), "legacy schema"),
		  "expected 18.16 to get the legacy schema, init said:\n%s", th_text(&out));
	bb_free(&out);
}

/* "name\ttype\n" of every column of t as fleet_schema.h says the server lists them */
static char *schema_columns(const struct fleet_table *t, enum fleet_dialect d)
{
	struct bytebuf b = { 0 };
	struct fleet_column_part parts[2];
	size_t i;
	int j, n;

	for (i = 0; i < t->ncols; i++) {
		n = fleet_column_parts(&t->cols[i], d, parts);
		for (j = 0; j < n; j++)
			bb_printf(&b, "%s\t%s\n", parts[j].name, parts[j].type);
	}
	bb_append(&b, "", 1);
	return (char *)b.p;
}

static enum fleet_dialect server_dialect(struct ch_client *c)
{
	char version[64], err[512];
	enum fleet_dialect d;

	cr_assert_eq(ch_query_line(c, "SELECT version()", version, sizeof(version), err,
				   sizeof(err)), 0, "%s", err);
	cr_assert_eq(fleet_dialect_of(version, &d), 0, "version '%s'", version);
	return d;
}

Test(fleet, init_creates_every_table_with_the_columns_of_fleet_schema, .timeout = 120,
     .fini = node_fini)
{
	struct ch_client c;
	enum fleet_dialect d;
	size_t i;

	node_up(NULL);
	fleet_init_ok();
	client_of(&c, node.url);
	d = server_dialect(&c);
	cr_assert_eq(d, FLEET_LEGACY, "ClickHouse 18.16 has no DateTime64 or Map");
	for (i = 0; i < FLEET_NTABLES; i++) {
		const struct fleet_table *t = &fleet_tables[i];
		char *sql = th_fmt("SELECT name, type FROM system.columns WHERE database = 'rp' "
				   "AND table = '%s' FORMAT TabSeparated", t->name);
		char *engine_sql = th_fmt("SELECT engine FROM system.tables WHERE database = 'rp' "
					  "AND name = '%s' FORMAT TabSeparated", t->name);
		char *want = schema_columns(t, d), *got = answer(&c, sql);
		char *engine = answer(&c, engine_sql);

		cr_assert_str_eq(got, want, "table %s: expected the columns\n%s\ngot\n%s", t->name,
				 want, got);
		cr_assert_str_eq(engine, t->engine == FLEET_REPLACE ? "ReplacingMergeTree\n" :
				 "MergeTree\n", "table %s: engine %s", t->name, engine);
		free(sql);
		free(engine_sql);
		free(want);
		free(got);
		free(engine);
	}
	ch_client_free(&c);
}

Test(fleet, init_twice_succeeds_and_keeps_the_rows, .timeout = 120, .fini = node_fini)
{
	struct ch_client c;
	char *n;

	node_up(NULL);
	fleet_init_ok();
	client_of(&c, node.url);
	free(answer(&c, "INSERT INTO rp.containers (host, container_id) VALUES ('h1', 'c1')"));
	fleet_init_ok();
	n = answer(&c, "SELECT count() FROM system.tables WHERE database = 'rp'");
	cr_assert_str_eq(n, "8\n", "expected the 7 tables and the version's view after a second "
			 "init, got %s", n);
	free(n);
	n = answer(&c, "SELECT host, container_id FROM rp.containers FORMAT TabSeparated");
	cr_assert_str_eq(n, "h1\tc1\n", "expected the row inserted before the second init, got "
			 "'%s'", n);
	free(n);
	ch_client_free(&c);
}

/* ---- RowBinary -------------------------------------------------------------- */

#define STR(s) { s, sizeof(s) - 1 }

/* Two events with every column set, the second at the extremes of its types */
static void events_rows(union fleet_value rows[2][FE_NCOLS], uint8_t *payload, size_t len)
{
	static const struct fleet_str names[] = { STR("Reason"), STR("Count") };
	static const struct fleet_str values[] = { STR("GC\t'quoted'"), STR("42") };
	size_t i;

	for (i = 0; i < len; i++)
		payload[i] = (uint8_t)(i * 7);	/* NULs and bytes >= 0x80 among them */
	memset(rows, 0, sizeof(union fleet_value) * 2 * FE_NCOLS);
	for (i = 0; i < 2; i++) {
		union fleet_value *r = rows[i];

		r[FE_TIME].u = i ? 4294967295ull * 1000000000ull + 999999999u :
			       1700000000123456789ull;
		r[FE_HOST].s = (struct fleet_str)STR("node-1");
		rb_uuid_parse("00112233-4455-6677-8899-aabbccddeeff", r[FE_BOOT_ID].uuid);
		r[FE_CONTAINER_ID].s = i ? (struct fleet_str){ "", 0 } :
					   (struct fleet_str)STR("c0ffee");
		r[FE_POD_UID].s = (struct fleet_str)STR("0d1e2f30-0000-4000-8000-000000000001");
		r[FE_PID].u = i ? UINT32_MAX : 4242;
		r[FE_TID].u = 4243 + i;
		r[FE_THREAD_SEQ].u = 7;
		r[FE_PROVIDER].s = (struct fleet_str)STR("Microsoft-Windows-DotNETRuntime");
		r[FE_EVENT_ID].u = 1;
		r[FE_EVENT_NAME].s = (struct fleet_str)STR("GCStart");
		r[FE_LEVEL].u = i ? 255 : 4;
		r[FE_KEYWORDS].u = i ? UINT64_MAX : 1;
		rb_uuid_parse("ffeeddcc-bbaa-9988-7766-554433221100", r[FE_ACTIVITY_ID].uuid);
		r[FE_STACK_ID].u = 0x8000000000000001ull;
		r[FE_PAYLOAD].s = (struct fleet_str){ (const char *)payload, i ? 0 : len };
		r[FE_FIELDS].fields.names = names;
		r[FE_FIELDS].fields.values = values;
		r[FE_FIELDS].fields.n = i ? 0 : 2;
		rb_uuid_parse("12345678-9abc-def0-1234-56789abcdef0", r[FE_AGENT_RUN].uuid);
		r[FE_STREAM].u = 3;
		r[FE_BATCH_SEQ].u = 99;
	}
}

static char *hex_of(const uint8_t *p, size_t n)
{
	char *s = calloc(2 * n + 1, 1);
	size_t i;

	cr_assert_not_null(s);
	for (i = 0; i < n; i++)
		sprintf(s + 2 * i, "%02X", p[i]);
	return s;
}

static void insert(struct ch_client *c, const char *sql, const struct bytebuf *rows)
{
	char err[4096];
	int rc = ch_exec(c, sql, rows->p, rows->len, NULL, err, sizeof(err));

	cr_assert_not(rows->oom);
	cr_assert_eq(rc, 0, "expected the insert to succeed, got %d: %s", rc, err);
}

Test(fleet, events_encoded_with_the_schema_read_back_exactly, .timeout = 120, .fini = node_fini)
{
	union fleet_value rows[2][FE_NCOLS];
	const struct fleet_table *t = &fleet_tables[FLEET_EVENTS];
	struct bytebuf body = { 0 }, sql = { 0 };
	struct ch_client c;
	uint8_t payload[300];
	char *got, *want, *hex;

	node_up(NULL);
	fleet_init_ok();
	client_of(&c, node.url);
	events_rows(rows, payload, sizeof(payload));
	fleet_row_encode(&body, server_dialect(&c), t, rows[0]);
	fleet_row_encode(&body, server_dialect(&c), t, rows[1]);
	fleet_insert_sql(&sql, server_dialect(&c), "rp", t);
	bb_append(&sql, "", 1);
	insert(&c, (const char *)sql.p, &body);
	got = answer(&c, "SELECT toUnixTimestamp(time), time_ns, host, boot_id, container_id, "
		     "pod_uid, pid, tid, thread_seq, provider, event_id, event_name, level, "
		     "keywords, activity_id, related_activity_id, stack_id, hex(payload), "
		     "fields.name, fields.value, agent_run, stream, batch_seq "
		     "FROM rp.events ORDER BY tid FORMAT TabSeparated");
	hex = hex_of(payload, sizeof(payload));
	want = th_fmt("1700000000\t123456789\tnode-1\t00112233-4455-6677-8899-aabbccddeeff\t"
		      "c0ffee\t0d1e2f30-0000-4000-8000-000000000001\t4242\t4243\t7\t"
		      "Microsoft-Windows-DotNETRuntime\t1\tGCStart\t4\t1\t"
		      "ffeeddcc-bbaa-9988-7766-554433221100\t00000000-0000-0000-0000-000000000000\t"
		      "9223372036854775809\t%s\t['Reason','Count']\t['GC\\t\\'quoted\\'','42']\t"
		      "12345678-9abc-def0-1234-56789abcdef0\t3\t99\n"
		      "4294967295\t999999999\tnode-1\t00112233-4455-6677-8899-aabbccddeeff\t"
		      "\t0d1e2f30-0000-4000-8000-000000000001\t4294967295\t4244\t7\t"
		      "Microsoft-Windows-DotNETRuntime\t1\tGCStart\t255\t18446744073709551615\t"
		      "ffeeddcc-bbaa-9988-7766-554433221100\t00000000-0000-0000-0000-000000000000\t"
		      "9223372036854775809\t\t[]\t[]\t"
		      "12345678-9abc-def0-1234-56789abcdef0\t3\t99\n", hex);
	cr_assert_str_eq(got, want, "expected\n%s\ngot\n%s", want, got);
	free(got);
	free(want);
	free(hex);
	bb_free(&body);
	bb_free(&sql);
	ch_client_free(&c);
}

/* One row of every type the encoder writes, at values that show a wrong byte order or width */
static void every_type_row(struct bytebuf *b, const char *long_text)
{
	static const uint64_t u64s[] = { 0, 1, UINT64_MAX };
	uint8_t id[16];

	rb_u8(b, 0xfe);
	rb_u16(b, 0xfedc);
	rb_u32(b, 0xfedcba98);
	rb_u64(b, 0xfedcba9876543210ull);
	rb_i8(b, INT8_MIN);
	rb_i16(b, -2);
	rb_i32(b, INT32_MIN);
	rb_i64(b, INT64_MIN);
	rb_f64(b, -1.5e300);
	rb_cstring(b, long_text);	/* 300 bytes: a two-byte LEB128 length */
	rb_fixed_string(b, "ab", 2, 4);
	rb_uuid_parse("01234567-89ab-cdef-0f1e-2d3c4b5a6978", id);
	rb_uuid(b, id);
	rb_count(b, 3);
	rb_u64(b, u64s[0]);
	rb_u64(b, u64s[1]);
	rb_u64(b, u64s[2]);
	rb_count(b, 2);
	rb_cstring(b, "");
	rb_string(b, "a\0b", 3);
	rb_datetime(b, 1700000000);
}

Test(fleet, every_rowbinary_type_round_trips, .timeout = 120, .fini = node_fini)
{
	struct bytebuf body = { 0 };
	struct ch_client c;
	char long_text[301], *got, *want;

	node_up(NULL);
	client_of(&c, node.url);
	free(answer(&c, "CREATE TABLE default.every_type (u8 UInt8, u16 UInt16, u32 UInt32, "
		    "u64 UInt64, i8 Int8, i16 Int16, i32 Int32, i64 Int64, f64 Float64, "
		    "s String, fs FixedString(4), id UUID, a Array(UInt64), sa Array(String), "
		    "dt DateTime) ENGINE = Memory"));
	memset(long_text, 'x', 300);
	long_text[300] = '\0';
	every_type_row(&body, long_text);
	insert(&c, "INSERT INTO default.every_type FORMAT RowBinary", &body);
	got = answer(&c, "SELECT u8, u16, u32, u64, i8, i16, i32, i64, f64, length(s), "
		     "replaceAll(s, 'x', ''), hex(fs), id, a, sa, toUnixTimestamp(dt) "
		     "FROM default.every_type FORMAT TabSeparated");
	want = th_fmt("254\t65244\t4275878552\t18364758544493064720\t-128\t-2\t-2147483648\t"
		      "-9223372036854775808\t-1.5e300\t300\t\t61620000\t"
		      "01234567-89ab-cdef-0f1e-2d3c4b5a6978\t[0,1,18446744073709551615]\t"
		      "['','a\\0b']\t1700000000\n");
	cr_assert_str_eq(got, want, "expected\n%s\ngot\n%s", want, got);
	free(got);
	free(want);
	bb_free(&body);
	ch_client_free(&c);
}

/* ---- ringpipe fleet query ------------------------------------------------------ */

Test(fleet, query_prints_the_rows_with_their_names, .timeout = 120, .fini = node_fini)
{
	struct bytebuf out = { 0 };
	int rc;

	node_up(NULL);
	rc = tool(&out, "fleet query --clickhouse '%s?database=system' "
		  "'SELECT number AS n, toString(number * 2) AS twice FROM numbers LIMIT 3'",
		  node.url);
	cr_assert_eq(rc, 0, "expected fleet query to succeed, got %d: %s", rc, th_text(&out));
	cr_assert_str_eq(th_text(&out), "n\ttwice\n0\t0\n1\t2\n2\t4\n",
			 "expected TabSeparatedWithNames, got:\n%s", th_text(&out));
	out.len = 0;
	rc = tool(&out, "fleet query --clickhouse '%s?database=system' --format JSONEachRow "
		  "'SELECT number AS n FROM numbers LIMIT 2'", node.url);
	cr_assert_eq(rc, 0, "%s", th_text(&out));
	cr_assert_str_eq(th_text(&out), "{\"n\":\"0\"}\n{\"n\":\"1\"}\n",
			 "expected --format JSONEachRow to reach the server, got:\n%s",
			 th_text(&out));
	bb_free(&out);
}

Test(fleet, a_bad_query_fails_with_the_servers_message, .timeout = 120, .fini = node_fini)
{
	struct bytebuf out = { 0 };
	int rc;

	node_up(NULL);
	rc = tool(&out, "fleet query --clickhouse '%s?database=system' 'SELEC 1'", node.url);
	cr_assert_eq(rc, 1, "expected exit status 1 for a syntax error, got %d: %s", rc,
		     th_text(&out));
	cr_assert(strstr(th_text(&out), "Code: 62, e.displayText() = DB::Exception: Syntax error"),
		  "expected ClickHouse's syntax error, got: %s", th_text(&out));
	out.len = 0;
	rc = tool(&out, "fleet query --clickhouse '%s?database=system' "
		  "'SELECT 1 FROM no_such_table'", node.url);
	cr_assert_eq(rc, 1, "expected exit status 1, got %d: %s", rc, th_text(&out));
	cr_assert(strstr(th_text(&out), "Code: 60") && strstr(th_text(&out), "no_such_table"),
		  "expected ClickHouse's unknown table error, got: %s", th_text(&out));
	bb_free(&out);
}

Test(fleet, a_closed_port_is_a_connection_refused)
{
	struct bytebuf out = { 0 };
	uint16_t port = th_free_port();
	char *where = th_fmt("127.0.0.1:%u", port);
	int rc = tool(&out, "fleet query --clickhouse http://%s/ 'SELECT 1'", where);

	cr_assert_eq(rc, 1, "expected exit status 1, got %d: %s", rc, th_text(&out));
	cr_assert(strstr(th_text(&out), "cannot connect to") && strstr(th_text(&out), where) &&
		  strstr(th_text(&out), "Connection refused"),
		  "expected 'cannot connect to %s: Connection refused', got: %s", where,
		  th_text(&out));
	free(where);
	bb_free(&out);
}

Test(fleet, a_server_that_never_answers_times_out)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	struct ch_client c;
	struct ch_target t;
	char url[64], err[512];
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), rc;

	/* the kernel completes the handshake of a listening socket: connected, never answered */
	cr_assert_eq(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(listen(lfd, 4), 0);
	cr_assert_eq(getsockname(lfd, (struct sockaddr *)&sa, &len), 0);
	snprintf(url, sizeof(url), "http://127.0.0.1:%u/", ntohs(sa.sin_port));
	cr_assert_eq(ch_target_parse(&t, url, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(ch_client_init(&c, &t, 300), 0);
	rc = ch_exec(&c, "SELECT 1", NULL, 0, NULL, err, sizeof(err));
	cr_assert_eq(rc, -ETIMEDOUT, "expected -ETIMEDOUT, got %d: %s", rc, err);
	cr_assert(strstr(err, "did not answer within 300 ms"), "got: %s", err);
	ch_client_free(&c);
	close(lfd);
}

Test(fleet, the_native_ports_answer_names_the_http_port, .timeout = 120, .fini = node_fini)
{
	struct bytebuf out = { 0 };
	char *want;
	int rc;

	node_up(NULL);
	rc = tool(&out, "fleet query --clickhouse http://127.0.0.1:%u/ --timeout 5 'SELECT 1'",
		  node.tcp_port);
	want = th_fmt("You must use port %u for HTTP", node.http_port);
	cr_assert_eq(rc, 1, "expected exit status 1, got %d: %s", rc, th_text(&out));
	cr_assert(strstr(th_text(&out), want), "expected the server's '%s', got: %s", want,
		  th_text(&out));
	free(want);
	bb_free(&out);
}

Test(fleet, a_wrong_password_gets_the_servers_refusal, .timeout = 120, .fini = node_fini)
{
	struct th_ch_opts o = {
		.users_xml = "<fleet><password>s3cret</password><networks><ip>127.0.0.1</ip>"
			     "</networks><profile>default</profile><quota>default</quota></fleet>",
	};
	struct bytebuf out = { 0 };
	char *pwfile;
	int rc;

	node_up(&o);
	rc = tool(&out,
		  "fleet query --clickhouse '%s?database=system' --user fleet --password wrong "
		  "'SELECT user FROM system.processes'",
		  node.url);
	cr_assert_eq(rc, 1, "expected exit status 1, got %d: %s", rc, th_text(&out));
	cr_assert(strstr(th_text(&out), "Code: 193") &&
		  strstr(th_text(&out), "Wrong password for user fleet"),
		  "expected ClickHouse's wrong password error, got: %s", th_text(&out));
	pwfile = th_fmt("%s/password", node.dir);
	cr_assert_eq(th_write_file(pwfile, "s3cret\n", 7), 0);
	out.len = 0;
	rc = tool(&out,
		  "fleet query --clickhouse '%s?database=system&user=fleet' --password-file '%s' "
		  "'SELECT user FROM system.processes'",
		  node.url, pwfile);
	cr_assert_eq(rc, 0, "expected the password file's password to be taken, got %d: %s", rc,
		     th_text(&out));
	cr_assert_str_eq(th_text(&out), "user\nfleet\n", "got: %s", th_text(&out));
	free(pwfile);
	bb_free(&out);
}

Test(fleet, a_keep_alive_connection_closed_while_idle_is_reopened, .timeout = 120,
     .fini = node_fini)
{
	struct th_ch_opts o = { .keep_alive_timeout_s = 1 };
	struct ch_client c;
	char *a;

	node_up(&o);
	client_of(&c, node.url);
	free(answer(&c, "SELECT 1"));
	cr_assert_geq(c.conn.fd, 0, "expected the connection kept open after an answer");
	/* the server closes it after 1 s idle: its end of the socket hangs up
	 * (a hang guard of 60 s) */
	{
		struct pollfd pf = { .fd = c.conn.fd, .events = POLLIN | POLLRDHUP };

		cr_assert_eq(poll(&pf, 1, 60000), 1, "the server kept the idle connection 60 s");
	}
	a = answer(&c, "SELECT 2");
	cr_assert_str_eq(a, "2\n", "expected the second query answered on a new connection");
	free(a);
	ch_client_free(&c);
}

/* ---- URLs, dialects and statements, without a server -------------------------------- */

Test(fleet, urls_give_host_port_database_credentials_and_settings)
{
	struct ch_target t;
	char err[512];

	cr_assert_eq(ch_target_parse(&t,
				     "http://ch.example:9123/?database=fleet&user=a%40b"
				     "&password=p%26w+d&insert_quorum=2",
				     err, sizeof(err)),
		     0, "%s", err);
	cr_assert_str_eq(t.host, "ch.example");
	cr_assert_str_eq(t.port, "9123");
	cr_assert_str_eq(t.database, "fleet");
	cr_assert_str_eq(t.user, "a@b");
	cr_assert_str_eq(t.password, "p&w d");
	cr_assert_str_eq(t.settings, "insert_quorum=2", "expected the setting passed on, got '%s'",
			 t.settings);
	cr_assert_eq(ch_target_parse(&t, "http://[::1]", err, sizeof(err)), 0, "%s", err);
	cr_assert_str_eq(t.host, "::1");
	cr_assert_str_eq(t.port, CH_DEFAULT_PORT);
	cr_assert_str_eq(t.database, CH_DEFAULT_DATABASE);
	cr_assert_eq(ch_target_parse(&t, "https://h/", err, sizeof(err)), 0, "%s", err);
	cr_assert(t.https);
	cr_assert_str_eq(t.port, CH_DEFAULT_HTTPS_PORT);
	cr_assert_eq(ch_target_parse(&t, "ftp://h/", err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, "must start with http:// or https://"), "got: %s", err);
	cr_assert_eq(ch_target_parse(&t, "http://h:70000/", err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, "port"), "got: %s", err);
	cr_assert_eq(ch_target_parse(&t, "http://h/db", err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, "?database=NAME"), "got: %s", err);
	cr_assert_eq(ch_target_parse(&t, "http://h/?user=%4", err, sizeof(err)), -EINVAL);
}

Test(fleet, the_dialect_follows_the_major_version)
{
	enum fleet_dialect d = FLEET_CURRENT;

	cr_assert_eq(fleet_dialect_of("18.16.1", &d), 0);
	cr_assert_eq(d, FLEET_LEGACY);
	cr_assert_eq(fleet_dialect_of("21.8.15.7", &d), 0);
	cr_assert_eq(d, FLEET_LEGACY);
	cr_assert_eq(fleet_dialect_of("22.3.2.1", &d), 0);
	cr_assert_eq(d, FLEET_CURRENT);
	cr_assert_eq(fleet_dialect_of("24.8.1", &d), 0);
	cr_assert_eq(d, FLEET_CURRENT);
	cr_assert_eq(fleet_dialect_of("v24", &d), -EINVAL);
}

/* An events row with a value in every column, for the byte-level test */
static void sample_event_row(union fleet_value *row, struct fleet_str *names,
			     struct fleet_str *values)
{
	size_t i;

	memset(row, 0, sizeof(*row) * FE_NCOLS);
	row[FE_TIME].u = 1700000000123456789ull;
	row[FE_HOST].s = (struct fleet_str){ "h", 1 };
	for (i = 0; i < 16; i++) {
		row[FE_BOOT_ID].uuid[i] = (uint8_t)i;
		row[FE_ACTIVITY_ID].uuid[i] = (uint8_t)(0x20 + i);
		row[FE_AGENT_RUN].uuid[i] = (uint8_t)(0x40 + i);
	}
	row[FE_CONTAINER_ID].s = (struct fleet_str){ "c", 1 };
	row[FE_PID].u = 7;
	row[FE_TID].u = 8;
	row[FE_THREAD_SEQ].u = 9;
	row[FE_PROVIDER].s = (struct fleet_str){ "P", 1 };
	row[FE_EVENT_ID].u = 3;
	row[FE_EVENT_NAME].s = (struct fleet_str){ "E", 1 };
	row[FE_LEVEL].u = 4;
	row[FE_KEYWORDS].u = 0x1122334455667788ull;
	row[FE_STACK_ID].u = 5;
	row[FE_PAYLOAD].s = (struct fleet_str){ "xy", 2 };
	names[0] = (struct fleet_str){ "A", 1 };
	values[0] = (struct fleet_str){ "12", 2 };
	row[FE_FIELDS].fields.names = names;
	row[FE_FIELDS].fields.values = values;
	row[FE_FIELDS].fields.n = 1;
	row[FE_STREAM].u = 2;
	row[FE_BATCH_SEQ].u = 6;
}

/* The bytes of a UUID whose text-order bytes are base, base+1, ...: each
 * 8-byte half reversed */
static void uuid_bytes(struct bytebuf *b, uint8_t base)
{
	int i;

	for (i = 7; i >= 0; i--)
		bb_append_u8(b, (uint8_t)(base + i));
	for (i = 15; i >= 8; i--)
		bb_append_u8(b, (uint8_t)(base + i));
}

/* The rows the agent sends are checked against a server of the legacy
 * dialect elsewhere; the current dialect has no server here, so both are
 * checked here byte for byte against RowBinary's layout, column by column */
Test(fleet, an_events_row_is_rowbinary_byte_for_byte_in_both_dialects)
{
	static const uint8_t zero16[16];
	union fleet_value row[FE_NCOLS];
	struct fleet_str names[1], values[1];
	enum fleet_dialect d;

	sample_event_row(row, names, values);
	for (d = FLEET_LEGACY; d <= FLEET_CURRENT; d++) {
		struct bytebuf got = { 0 }, want = { 0 };

		if (d == FLEET_CURRENT) {
			bb_append_u64(&want, 1700000000123456789ull);	/* DateTime64(9) */
		} else {
			bb_append_u32(&want, 1700000000u);	/* DateTime, then ns */
			bb_append_u32(&want, 123456789u);
		}
		bb_append(&want, "\001h", 2);
		uuid_bytes(&want, 0);
		bb_append(&want, "\001c\000", 3);	/* container, an empty pod */
		bb_append_u32(&want, 7);
		bb_append_u32(&want, 8);
		bb_append_u32(&want, 9);
		bb_append(&want, "\001P", 2);
		bb_append_u32(&want, 3);
		bb_append(&want, "\001E\004", 3);	/* the name, the level (UInt8) */
		bb_append_u64(&want, 0x1122334455667788ull);
		uuid_bytes(&want, 0x20);
		bb_append(&want, zero16, 16);		/* no related activity */
		bb_append_u64(&want, 5);
		bb_append(&want, "\002xy", 3);
		if (d == FLEET_CURRENT)	/* Map: one pair, key then value */
			bb_append(&want, "\001\001A\00212", 6);
		else			/* Nested: the names, then the values */
			bb_append(&want, "\001\001A\001\00212", 7);
		uuid_bytes(&want, 0x40);
		bb_append_u32(&want, 2);
		bb_append_u64(&want, 6);

		fleet_row_encode(&got, d, &fleet_tables[FLEET_EVENTS], row);
		cr_assert(!got.oom && !want.oom);
		cr_assert_eq(got.len, want.len, "%s dialect: expected %zu bytes, got %zu",
			     fleet_dialect_name(d), want.len, got.len);
		cr_assert(!memcmp(got.p, want.p, want.len), "%s dialect: the bytes differ",
			  fleet_dialect_name(d));
		bb_free(&got);
		bb_free(&want);
	}
}

Test(fleet, the_current_dialect_on_a_cluster_is_replicated_and_distributed)
{
	struct bytebuf out = { 0 };
	int rc = tool(&out, "fleet init --print --dialect current --cluster fleet1");
	const char *s = th_text(&out);

	cr_assert_eq(rc, 0, "expected --print to need no server, got %d: %s", rc, s);
	cr_assert(strstr(s, "`time` DateTime64(9) CODEC(Delta, ZSTD(1))") &&
		  strstr(s, "`fields` Map(LowCardinality(String), String)") &&
		  strstr(s, "`host` LowCardinality(String)"),
		  "expected the current types, got:\n%s", s);
	cr_assert(strstr(s, "CREATE TABLE IF NOT EXISTS `ringpipe`.`events_local` ON CLUSTER "
			 "`fleet1`") &&
		  strstr(s, "ReplicatedMergeTree('/clickhouse/tables/{shard}/ringpipe/events', "
			 "'{replica}')") &&
		  strstr(s, "ENGINE = Distributed(fleet1, ringpipe, events_local, "
			 "cityHash64(host))"),
		  "expected replicated local tables under Distributed ones, got:\n%s", s);
	cr_assert_not(strstr(s, "time_ns"), "a current server needs no nanosecond column");
	bb_free(&out);
}

/* ---- a cluster: two shards, ZooKeeper ------------------------------------------------ */

static struct th_ch_node node_b;
static struct th_zk zk;

static void cluster_fini(void)
{
	th_ch_stop(&node);
	th_ch_stop(&node_b);
	th_zk_stop(&zk);
}

/* Starts node (shard 01) and node_b (shard 02) of cluster "fleet" */
static void cluster_up(void)
{
	struct th_ch_node two[2];

	th_ch_cluster_start(&zk, two, 2, 1, "fleet");
	node = two[0];
	node_b = two[1];
}

/* Rows of events for hosts h0..h(n-1), one each */
static void hosts_rows(struct bytebuf *body, enum fleet_dialect d, int n)
{
	union fleet_value row[FE_NCOLS];
	char host[8];
	int i;

	for (i = 0; i < n; i++) {
		memset(row, 0, sizeof(row));
		snprintf(host, sizeof(host), "h%d", i);
		row[FE_TIME].u = 1700000000000000000ull + (uint64_t)i;
		row[FE_HOST].s = (struct fleet_str){ host, strlen(host) };
		row[FE_PID].u = (uint64_t)i;
		fleet_row_encode(body, d, &fleet_tables[FLEET_EVENTS], row);
	}
}

Test(fleet, init_on_a_cluster_shards_events_by_host_over_replicated_tables, .timeout = 240,
     .fini = cluster_fini)
{
	struct bytebuf out = { 0 }, body = { 0 }, sql = { 0 };
	struct ch_client a, b;
	char *url, *got, *local_a, *local_b;

	cluster_up();
	{
		/* node and node_b as the cluster's array, for a server started
		 * again there */
		struct th_ch_node both[2] = { node, node_b };

		th_ch_fleet_init_cluster(both, 2, th_fmt("%s?database=rp", node.url), "fleet");
		node = both[0];
		node_b = both[1];
	}
	/* a synchronous insert: the rows are on their shards when it returns */
	url = th_fmt("%s?insert_distributed_sync=1", node.url);
	client_of(&a, url);
	client_of(&b, node_b.url);
	got = answer(&b, "SELECT engine FROM system.tables WHERE database = 'rp' AND "
		     "name IN ('events', 'events_local') ORDER BY name FORMAT TabSeparated");
	cr_assert_str_eq(got, "Distributed\nReplicatedMergeTree\n",
			 "expected node b to have the cluster's tables, got:\n%s", got);
	free(got);
	hosts_rows(&body, server_dialect(&a), 20);
	fleet_insert_sql(&sql, server_dialect(&a), "rp", &fleet_tables[FLEET_EVENTS]);
	bb_append(&sql, "", 1);
	insert(&a, (const char *)sql.p, &body);
	got = answer(&b, "SELECT count(), uniqExact(host) FROM rp.events FORMAT TabSeparated");
	cr_assert_str_eq(got, "20\t20\n", "expected all 20 rows through either node, got %s", got);
	local_a = answer(&a, "SELECT count() FROM rp.events_local FORMAT TabSeparated");
	local_b = answer(&b, "SELECT count() FROM rp.events_local FORMAT TabSeparated");
	cr_assert(atoi(local_a) > 0 && atoi(local_b) > 0 && atoi(local_a) + atoi(local_b) == 20,
		  "expected the 20 hosts split over both shards, got %s and %s", local_a, local_b);
	free(got);
	free(local_a);
	free(local_b);
	free(url);
	bb_free(&out);
	bb_free(&body);
	bb_free(&sql);
	ch_client_free(&a);
	ch_client_free(&b);
}
