// SPDX-License-Identifier: MIT
/*
 * The tools' HTTP client (wire/http_conn.c, over libcurl) where it meets
 * the network: https to a real ClickHouse 18.16 with a certificate from a
 * CA the test makes (clickhouse_node.h), a client certificate, what
 * crosses loopback (read off the wire with a packet socket), gzip bodies
 * the server decompresses, proxies from the environment, IPv6 literals,
 * and the exactly-once rule: a request marked no_resend is never sent a
 * second time by the HTTP layer, while libcurl does send an ordinary one
 * again when a reused connection dies before answering. The last ones
 * talk to a peer the test runs on a real socket, which records every
 * request and answers, or hangs up, as the request asks.
 */
#include <arpa/inet.h>
#include <inttypes.h>
#include <pthread.h>
#include <sys/socket.h>

#include "fleet/clickhouse.h"
#include "clickhouse_node.h"
#include "helpers.h"
#include "wire.h"

static struct th_ch_node node;

static void node_fini(void)
{
	th_ch_stop(&node);
}

/* The node's URL in its default database (fleet commands default to ringpipe's) */
static char *db_url(void)
{
	return th_fmt("%s?database=default", node.url);
}

/* The same on the plain HTTP port, also when RINGPIPE_TEST_CH_TLS=1 hands out https */
static char *http_db_url(void)
{
	return th_fmt("http://127.0.0.1:%u/?database=default", node.http_port);
}

/* `ringpipe ARGS` without SSL_CERT_FILE (the test CA trusted only where
 * --cacert names it), stdout and stderr into out; its exit status */
static int tool_bare(struct bytebuf *out, const char *args)
{
	return th_run_fmt(out, "env -u SSL_CERT_FILE '%s' %s 2>&1", th_tool(), args);
}

/* ---- a peer that records requests ------------------------------------------------ */

/*
 * Accepts connections on a loopback port (v4 or v6), a thread per
 * connection, and reads HTTP/1.1 requests with a Content-Length. A request
 * holding VANISH-ONCE-<token> is read whole and answered by a hang-up the
 * first time its token comes, and answered normally after; any other gets
 * `answer`. Every request is kept as it came, with its connection's number
 * and its number on that connection. A peer that speaks first sends
 * `answer` as soon as a connection comes, before any request, and hangs up
 * once the client does.
 */
struct peer {
	int lfd;
	uint16_t port;
	const char *answer;
	bool speak_first;
	pthread_t acceptor;
	pthread_mutex_t lock;
	struct bytebuf seen;	/* "@conn C req R\n" and the request, for each */
	unsigned conns;
	char vanished[8][64];
	size_t nvanished;
	int fds[16];
	pthread_t handlers[16];
};

struct peer_conn {
	struct peer *p;
	int fd;
	unsigned num;
};

static const char peer_ok[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n1\n";

/* Has the request's VANISH-ONCE token come before? Marks it seen. */
static bool peer_vanish(struct peer *p, const char *req)
{
	const char *t = strstr(req, "VANISH-ONCE-");
	size_t n, i;

	if (!t)
		return false;
	n = strspn(t, "ABCDEFGHIJKLMNOPQRSTUVWXYZ-abcdefghijklmnopqrstuvwxyz0123456789");
	for (i = 0; i < p->nvanished; i++)
		if (strlen(p->vanished[i]) == n && !memcmp(p->vanished[i], t, n))
			return false;
	if (p->nvanished < 8)
		snprintf(p->vanished[p->nvanished++], 64, "%.*s", (int)n, t);
	return true;
}

static void *peer_serve(void *arg)
{
	struct peer_conn *pc = arg;
	struct peer *p = pc->p;
	struct bytebuf in = { 0 };
	unsigned reqs = 0;
	char scratch[4096];

	if (p->speak_first) {
		/* read until the client hangs up: closing on unread bytes would
		 * reset the connection before the client read the answer */
		if (send(pc->fd, p->answer, strlen(p->answer), MSG_NOSIGNAL) >= 0)
			while (recv(pc->fd, scratch, sizeof(scratch), 0) > 0)
				;
		goto out;
	}
	for (;;) {
		char *head_end, *cl;
		size_t head, body = 0;
		ssize_t r;
		bool vanish;

		while (!(in.len && (head_end = memmem(in.p, in.len, "\r\n\r\n", 4)))) {
			bb_reserve(&in, 65536);
			if ((r = recv(pc->fd, in.p + in.len, in.cap - in.len - 1, 0)) <= 0)
				goto out;
			in.len += (size_t)r;
		}
		head = (size_t)(head_end - (char *)in.p) + 4;
		in.p[in.len] = 0;
		cl = strcasestr((char *)in.p, "\r\nContent-Length:");
		if (cl && cl < head_end)
			body = strtoul(cl + 17, NULL, 10);
		while (in.len < head + body) {
			bb_reserve(&in, 65536);
			if ((r = recv(pc->fd, in.p + in.len, in.cap - in.len - 1, 0)) <= 0)
				goto out;
			in.len += (size_t)r;
		}
		pthread_mutex_lock(&p->lock);
		bb_printf(&p->seen, "@conn %u req %u\n", pc->num, ++reqs);
		bb_append(&p->seen, in.p, head + body);
		bb_append(&p->seen, "\n", 1);
		{
			char *req = strndup((char *)in.p, head + body);

			vanish = peer_vanish(p, req);
			free(req);
		}
		pthread_mutex_unlock(&p->lock);
		if (vanish)
			goto out;
		if (send(pc->fd, p->answer, strlen(p->answer), MSG_NOSIGNAL) < 0 ||
		    strstr(p->answer, "Connection: close"))
			goto out;
		memmove(in.p, in.p + head + body, in.len - head - body);
		in.len -= head + body;
	}
out:
	shutdown(pc->fd, SHUT_RDWR);
	bb_free(&in);
	free(pc);
	return NULL;
}

static void *peer_accept(void *arg)
{
	struct peer *p = arg;
	int fd;

	while ((fd = accept4(p->lfd, NULL, NULL, SOCK_CLOEXEC)) >= 0) {
		struct peer_conn *pc = calloc(1, sizeof(*pc));

		/* (no assertion on this thread: Criterion's belong to the test's) */
		pthread_mutex_lock(&p->lock);
		if (pc && p->conns < 16) {
			pc->p = p;
			pc->fd = p->fds[p->conns] = fd;
			pc->num = p->conns + 1;
			if (!pthread_create(&p->handlers[p->conns], NULL, peer_serve, pc)) {
				p->conns++;
				pc = NULL;
			}
		}
		pthread_mutex_unlock(&p->lock);
		if (pc) {
			free(pc);
			close(fd);
		}
	}
	return NULL;
}

/* Listens on 127.0.0.1 (or ::1) and serves; false when v6 and no ::1 here */
static bool peer_start(struct peer *p, bool v6, const char *answer, bool speak_first)
{
	struct sockaddr_in6 a6 = { .sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT };
	struct sockaddr_in a4 = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct sockaddr_storage got;
	socklen_t len = sizeof(got);

	memset(p, 0, sizeof(*p));
	p->answer = answer ? answer : peer_ok;
	p->speak_first = speak_first;
	pthread_mutex_init(&p->lock, NULL);
	p->lfd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert_geq(p->lfd, 0);
	if (bind(p->lfd, v6 ? (struct sockaddr *)&a6 : (struct sockaddr *)&a4,
		 v6 ? sizeof(a6) : sizeof(a4))) {
		cr_assert(v6, "bind 127.0.0.1: %s", strerror(errno));
		close(p->lfd);
		return false;
	}
	cr_assert_eq(listen(p->lfd, 16), 0);
	cr_assert_eq(getsockname(p->lfd, (struct sockaddr *)&got, &len), 0);
	p->port = ntohs(v6 ? ((struct sockaddr_in6 *)&got)->sin6_port :
			     ((struct sockaddr_in *)&got)->sin_port);
	cr_assert_eq(pthread_create(&p->acceptor, NULL, peer_accept, p), 0);
	return true;
}

/* Stops accepting, hangs up every connection and waits for the threads */
static void peer_stop(struct peer *p)
{
	unsigned i, n;

	shutdown(p->lfd, SHUT_RDWR);	/* accept() returns: the acceptor ends */
	pthread_join(p->acceptor, NULL);
	pthread_mutex_lock(&p->lock);
	n = p->conns;
	for (i = 0; i < n; i++)
		shutdown(p->fds[i], SHUT_RDWR);
	pthread_mutex_unlock(&p->lock);
	for (i = 0; i < n; i++) {
		pthread_join(p->handlers[i], NULL);
		close(p->fds[i]);
	}
	close(p->lfd);
	bb_append(&p->seen, "", 1);
}

/* How many requests held s */
static unsigned peer_count(struct peer *p, const char *s)
{
	const char *at;
	unsigned n = 0;

	pthread_mutex_lock(&p->lock);
	bb_append(&p->seen, "", 1);
	p->seen.len--;
	for (at = th_text(&p->seen); (at = strstr(at, s)); at += strlen(s))
		n++;
	pthread_mutex_unlock(&p->lock);
	return n;
}

static void client_to(struct ch_client *c, const char *url, int timeout_ms)
{
	struct ch_target t;
	char err[512];

	cr_assert_eq(ch_target_parse(&t, url, err, sizeof(err)), 0, "%s: %s", url, err);
	cr_assert_eq(ch_client_init(c, &t, timeout_ms), 0);
	c->use_database = false;
}

/* ---- https ------------------------------------------------------------------------ */

Test(http_conn, https_is_verified_against_the_cacert_and_another_ca_is_refused, .timeout = 120,
     .fini = node_fini)
{
	struct th_ch_opts o = { .tls = true };
	struct bytebuf out = { 0 };
	char *ca = th_tls_file("ca.pem"), *other = th_tls_file("other-ca.pem"), *url;
	struct peer plain;
	int rc;

	th_ch_init(&node);
	th_ch_start(&node, &o);
	url = th_fmt("https://127.0.0.1:%u/", node.https_port);
	cr_assert_str_eq(node.url, url);
	rc = tool_bare(&out, th_fmt("fleet query --clickhouse '%s?database=default' --cacert '%s' "
				    "'SELECT 40 + 2 AS answer'", url, ca));
	cr_assert_eq(rc, 0, "expected the query over https to succeed, got %d: %s", rc,
		     th_text(&out));
	cr_assert_str_eq(th_text(&out), "answer\n42\n");

	out.len = 0;
	rc = tool_bare(&out, th_fmt("fleet query --clickhouse '%s' --cacert '%s' 'SELECT 1'", url,
				    other));
	cr_assert_eq(rc, 1, "expected a server certificate of another CA refused, got %d: %s", rc,
		     th_text(&out));
	cr_assert(strstr(th_text(&out), th_fmt("https://127.0.0.1:%u/: the server's certificate "
					       "is not trusted", node.https_port)) &&
		  strstr(th_text(&out), "SSL certificate problem") &&
		  strstr(th_text(&out), other),
		  "expected the URL, the verification failure and the CA file, got: %s",
		  th_text(&out));
	/* without --cacert nor SSL_CERT_FILE: the system's store, which does not
	 * know the test's CA */
	out.len = 0;
	rc = tool_bare(&out, th_fmt("fleet query --clickhouse '%s' 'SELECT 1'", url));
	cr_assert_eq(rc, 1, "expected the system store to refuse the test CA, got %d: %s", rc,
		     th_text(&out));
	cr_assert(strstr(th_text(&out), "the system's CA store"), "got: %s", th_text(&out));
	/* https to a port that speaks plain HTTP (a peer that answers at
	 * once: ClickHouse's HTTP port answers a ClientHello only when a byte
	 * of it happens to end a line) */
	peer_start(&plain, false, NULL, true);
	out.len = 0;
	rc = tool_bare(&out, th_fmt("fleet query --clickhouse https://127.0.0.1:%u/ --cacert '%s' "
				    "'SELECT 1'", plain.port, ca));
	cr_assert_eq(rc, 1, "%s", th_text(&out));
	cr_assert(strstr(th_text(&out), "TLS failed") && strstr(th_text(&out), "https port"),
		  "expected the handshake's failure and a hint, got: %s", th_text(&out));
	peer_stop(&plain);
	bb_free(&plain.seen);
	free(ca);
	free(other);
	free(url);
	bb_free(&out);
}

Test(http_conn, a_client_certificate_is_presented_when_the_server_asks, .timeout = 120,
     .fini = node_fini)
{
	struct th_ch_opts o = { .tls = true, .tls_client_cert = true };
	struct bytebuf out = { 0 };
	char *ca = th_tls_file("ca.pem"), *cert = th_tls_file("client.pem");
	char *key = th_tls_file("client.key");
	int rc;

	th_ch_init(&node);
	th_ch_start(&node, &o);
	rc = tool_bare(&out, th_fmt("fleet query --clickhouse '%s' --cacert '%s' 'SELECT 1'",
				    db_url(), ca));
	cr_assert_eq(rc, 1, "expected the server to refuse a client without a certificate, got "
		     "%d: %s", rc, th_text(&out));
	/* TLS 1.3: the server refuses after the handshake, so the client
	 * sees a hang-up (or, should the alert come during it, the alert) */
	cr_assert((strstr(th_text(&out), "closed the connection before answering") &&
		   strstr(th_text(&out), "--cert FILE")) ||
		  (strstr(th_text(&out), "TLS failed") &&
		   strstr(th_text(&out), "certificate required")),
		  "expected the server's refusal and the hint, got: %s", th_text(&out));
	out.len = 0;
	rc = tool_bare(&out, th_fmt("fleet query --clickhouse '%s' --cacert '%s' --cert '%s' "
				    "--key '%s' 'SELECT 7'", db_url(), ca, cert, key));
	cr_assert_eq(rc, 0, "expected the client certificate taken, got %d: %s", rc,
		     th_text(&out));
	cr_assert_str_eq(th_text(&out), "7\n7\n");
	out.len = 0;
	rc = tool_bare(&out, th_fmt("fleet query --clickhouse '%s' --key '%s' 'SELECT 1'",
				    node.url, key));
	cr_assert_eq(rc, 2, "expected --key alone to be a usage error, got %d: %s", rc,
		     th_text(&out));
	free(ca);
	free(cert);
	free(key);
	bb_free(&out);
}

/* The password is read off loopback as it crosses: in the clear over http
 * (which shows that the capture sees it), nowhere over https */
Test(http_conn, the_password_crosses_loopback_only_encrypted_over_https, .timeout = 120,
     .fini = node_fini)
{
	char password[40];
	struct th_ch_opts o = { .tls = true };
	struct bytebuf out = { 0 }, wire_bytes = { 0 };
	struct th_wire w;
	int rc;

	snprintf(password, sizeof(password), "pw-%d-%ld", getpid(), (long)time(NULL));
	o.users_xml = th_fmt("<fleet><password>%s</password><networks><ip>127.0.0.1</ip>"
			     "</networks><profile>default</profile><quota>default</quota></fleet>",
			     password);
	th_ch_init(&node);
	th_ch_start(&node, &o);

	th_wire_open(&w, node.http_port);
	rc = th_tool_run(th_fmt("fleet query --clickhouse http://127.0.0.1:%u/?database=system "
				"--user fleet --password %s 'SELECT user FROM system.processes'",
				node.http_port, password), &out);
	cr_assert_eq(rc, 0, "%s", th_text(&out));
	cr_assert_str_eq(th_text(&out), "user\nfleet\n");
	th_wire_read(&w, &wire_bytes);
	cr_assert(th_has_bytes(&wire_bytes, th_fmt("X-ClickHouse-Key: %s", password)),
		  "over http the capture must see the password header go by");

	out.len = wire_bytes.len = 0;
	th_wire_open(&w, node.https_port);
	rc = th_tool_run(th_fmt("fleet query --clickhouse '%s?database=system' --user fleet "
				"--password %s 'SELECT user FROM system.processes'", node.url,
				password), &out);
	cr_assert_eq(rc, 0, "%s", th_text(&out));
	cr_assert_str_eq(th_text(&out), "user\nfleet\n", "the server took the password");
	th_wire_read(&w, &wire_bytes);
	cr_assert_not(th_has_bytes(&wire_bytes, password),
		      "the password crossed loopback in the clear over https");
	cr_assert_not(th_has_bytes(&wire_bytes, "X-ClickHouse-"), "a header in the clear");
	cr_assert_not(th_has_bytes(&wire_bytes, "system.processes"), "the query in the clear");
	bb_free(&out);
	bb_free(&wire_bytes);
}

/* ---- bodies ----------------------------------------------------------------------- */

/* --compress gzip: the body crosses compressed, with Content-Encoding:
 * gzip, and 18.16 decompresses it by that header alone (no setting) */
Test(http_conn, gzip_bodies_are_decompressed_by_clickhouse, .timeout = 120, .fini = node_fini)
{
	struct bytebuf out = { 0 }, wire_bytes = { 0 };
	struct ch_client c;
	struct th_wire w;
	char *rows;
	int rc;

	th_ch_init(&node);
	th_ch_start(&node, NULL);
	cr_assert_eq(th_tool_run(th_fmt("fleet query --clickhouse '%s' --compress gzip 'CREATE "
					"TABLE default.gz (s String) ENGINE = Memory'", http_db_url()),
				 &out), 0, "%s", th_text(&out));
	out.len = 0;
	th_wire_open(&w, node.http_port);
	rc = th_tool_run(th_fmt("fleet query --clickhouse '%s' --compress gzip \"INSERT INTO "
				"default.gz VALUES ('plainly-visible-row'), "
				"('plainly-visible-row')\"", http_db_url()), &out);
	cr_assert_eq(rc, 0, "%s", th_text(&out));
	th_wire_read(&w, &wire_bytes);
	cr_assert(th_has_bytes(&wire_bytes, "Content-Encoding: gzip"), "no Content-Encoding header");
	cr_assert_not(th_has_bytes(&wire_bytes, "plainly-visible-row"),
		      "the body crossed uncompressed");
	/* rows as an insert's body (ch_exec's data), compressed too */
	client_to(&c, http_db_url(), 60000);
	c.target.encoding = c.conn.encoding = HTTP_BODY_GZIP;
	{
		char err[512];
		static const char tsv[] = "from-the-body\nfrom-the-body\nfrom-the-body\n";

		rc = ch_exec(&c, "INSERT INTO default.gz FORMAT TabSeparated", tsv, strlen(tsv),
			     NULL, err, sizeof(err));
		cr_assert_eq(rc, 0, "%s", err);
	}
	ch_client_free(&c);
	rows = th_ch_ask(db_url(), "SELECT arrayStringConcat(groupArray(s), ',') FROM (SELECT s "
				   "FROM default.gz ORDER BY s)");
	cr_assert_str_eq(rows, "from-the-body,from-the-body,from-the-body,"
			       "plainly-visible-row,plainly-visible-row");
	free(rows);
	out.len = 0;
	cr_assert_eq(th_tool_run(th_fmt("fleet query --clickhouse %s --compress zstd 'SELECT 1'",
					node.url), &out), 2, "%s", th_text(&out));
	cr_assert(strstr(th_text(&out), "--compress must be gzip or none"), "%s", th_text(&out));
	bb_free(&out);
	bb_free(&wire_bytes);
}

/* ---- exactly once ----------------------------------------------------------------- */

/*
 * A query on a kept connection that the peer hangs up on after reading it
 * is sent again by libcurl on a new connection (the peer sees it twice and
 * the caller gets the answer); an insert (a body of rows: no_resend) goes
 * on a connection of its own, and when the peer hangs up on it the caller
 * gets the failure and the peer has seen it once.
 */
Test(http_conn, an_insert_is_never_sent_twice_by_the_http_layer, .timeout = 60)
{
	struct peer p;
	struct ch_client c;
	char err[512];
	int rc;

	peer_start(&p, false, NULL, false);
	client_to(&c, th_fmt("http://127.0.0.1:%u/", p.port), 30000);
	cr_assert_eq(ch_exec(&c, "SELECT 'warm'", NULL, 0, NULL, err, sizeof(err)), 0, "%s",
		     err);
	cr_assert_geq(c.conn.fd, 0, "expected the connection kept");

	rc = ch_exec(&c, "SELECT 'VANISH-ONCE-query'", NULL, 0, NULL, err, sizeof(err));
	cr_assert_eq(rc, 0, "expected libcurl to send the query again, got %d: %s", rc, err);
	cr_assert_eq(peer_count(&p, "VANISH-ONCE-query"), 2,
		     "expected the query seen twice: on the kept connection and a new one");

	rc = ch_exec(&c, "INSERT INTO t FORMAT TabSeparated", "VANISH-ONCE-insert\n", 19, NULL,
		     err, sizeof(err));
	cr_assert_eq(rc, -ECONNRESET, "expected the insert's failure, got %d: %s", rc, err);
	cr_assert(strstr(err, "closed the connection before answering"), "got: %s", err);
	cr_assert_eq(peer_count(&p, "VANISH-ONCE-insert"), 1, "the insert was sent twice");
	/* on a connection of its own: the third, its first request */
	cr_assert(strstr(th_text(&p.seen), "@conn 3 req 1\nPOST /?query=INSERT"),
		  "expected the insert on a fresh connection:\n%s", th_text(&p.seen));
	/* and the next insert, answered, goes on a fresh one too */
	rc = ch_exec(&c, "INSERT INTO t FORMAT TabSeparated", "row\n", 4, NULL, err, sizeof(err));
	cr_assert_eq(rc, 0, "%s", err);
	cr_assert(strstr(th_text(&p.seen), "@conn 4 req 1\nPOST /?query=INSERT"),
		  "expected the second insert on a fresh connection:\n%s", th_text(&p.seen));
	ch_client_free(&c);
	peer_stop(&p);
	bb_free(&p.seen);
}

/* ---- proxies and addresses -------------------------------------------------------- */

static const char proxy_says[] =
	"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 20\r\nConnection: close\r\n\r\n"
	"from the test proxy\n";

/* Loopback goes direct when no_proxy is unset, whatever http_proxy says;
 * with a no_proxy of the user's, it goes through the proxy (in absolute
 * form over http, as a CONNECT tunnel for https, the credentials inside
 * the tunnel only) */
Test(http_conn, loopback_skips_the_environments_proxy_unless_no_proxy_is_set, .timeout = 120,
     .fini = node_fini)
{
	struct bytebuf out = { 0 };
	struct peer proxy;
	int rc;

	th_ch_init(&node);
	th_ch_start(&node, NULL);
	peer_start(&proxy, false, proxy_says, false);
	rc = th_run_fmt(&out, "env -u no_proxy -u NO_PROXY http_proxy=http://127.0.0.1:%u "
			"https_proxy=http://127.0.0.1:%u '%s' fleet query --clickhouse '%s' "
			"'SELECT 5' 2>&1", proxy.port, proxy.port, th_tool(), db_url());
	cr_assert_eq(rc, 0, "expected loopback reached directly, got %d: %s", rc, th_text(&out));
	cr_assert_str_eq(th_text(&out), "5\n5\n");
	cr_assert_eq(peer_count(&proxy, "@conn"), 0, "the proxy was asked:\n%s",
		     th_text(&proxy.seen));

	out.len = 0;
	rc = th_run_fmt(&out, "no_proxy=example.invalid http_proxy=http://127.0.0.1:%u '%s' fleet "
			"query --clickhouse '%s' --password sesame 'SELECT 5' 2>&1", proxy.port,
			th_tool(), http_db_url());
	cr_assert_eq(rc, 1, "%s", th_text(&out));
	cr_assert(strstr(th_text(&out), "answered HTTP 502: from the test proxy"), "%s",
		  th_text(&out));
	cr_assert_eq(peer_count(&proxy, th_fmt("POST http://127.0.0.1:%u/?", node.http_port)), 1,
		     "expected the request in absolute form at the proxy:\n%s",
		     th_text(&proxy.seen));

	out.len = 0;
	rc = th_run_fmt(&out, "no_proxy=example.invalid https_proxy=http://127.0.0.1:%u '%s' fleet "
			"query --clickhouse https://127.0.0.1:%u/ --password sesame 'SELECT 5' "
			"2>&1", proxy.port, th_tool(), node.http_port);
	cr_assert_eq(rc, 1, "%s", th_text(&out));
	cr_assert_eq(peer_count(&proxy, th_fmt("CONNECT 127.0.0.1:%u HTTP/1.1", node.http_port)),
		     1, "expected a CONNECT tunnel:\n%s", th_text(&proxy.seen));
	peer_stop(&proxy);
	cr_assert_eq(peer_count(&proxy, "sesame"), 1,
		     "the password went to the proxy outside the tunnel:\n%s",
		     th_text(&proxy.seen));
	bb_free(&proxy.seen);
	bb_free(&out);
}

Test(http_conn, an_ipv6_literal_is_reached_and_named_in_brackets, .timeout = 60)
{
	struct peer p;
	struct ch_client c;
	char err[512];

	if (!peer_start(&p, true, NULL, false))
		cr_skip_test("this host has no IPv6 loopback (::1): %s", strerror(errno));
	client_to(&c, th_fmt("http://[::1]:%u/", p.port), 30000);
	cr_assert_str_eq(c.target.host, "::1");
	cr_assert_eq(ch_exec(&c, "SELECT 1", NULL, 0, NULL, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(peer_count(&p, th_fmt("\r\nHost: [::1]:%u\r\n", p.port)), 1,
		     "expected Host: [::1]:%u:\n%s", p.port, th_text(&p.seen));
	ch_client_free(&c);
	peer_stop(&p);
	bb_free(&p.seen);
}

/* ---- URLs ------------------------------------------------------------------------- */

Test(http_conn, one_parser_takes_every_url)
{
	struct http_url u;
	char err[512];

	cr_assert_eq(http_url_parse(&u, "https://[fd00::7]/v1/logs", "4318", "4318", err,
				    sizeof(err)), 0, "%s", err);
	cr_assert(u.https);
	cr_assert_str_eq(u.host, "fd00::7");
	cr_assert_str_eq(u.port, "4318");
	cr_assert_str_eq(u.path, "/v1/logs");
	cr_assert_str_eq(u.query, "");
	cr_assert_eq(http_url_parse(&u, "HTTP://Ch.Example:9000?database=x&a=%2B", "8123", "8443",
				    err, sizeof(err)), 0, "%s", err);
	cr_assert_not(u.https);
	cr_assert_str_eq(u.port, "9000");
	cr_assert_str_eq(u.path, "/");
	cr_assert_str_eq(u.query, "database=x&a=%2B", "the query kept as encoded");
	cr_assert_eq(http_url_parse(&u, "https://h", "8123", "8443", err, sizeof(err)), 0);
	cr_assert_str_eq(u.port, "8443");
	cr_assert_eq(http_url_parse(&u, "h:8123", "8123", "8443", err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, "http:// or https://"), "got: %s", err);
	cr_assert_eq(http_url_parse(&u, "http://u:p@h/", "8123", "8443", err, sizeof(err)),
		     -EINVAL);
	cr_assert(strstr(err, "user or password"), "got: %s", err);
	cr_assert_eq(http_url_parse(&u, "http://h:0/", "8123", "8443", err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, "port"), "got: %s", err);
	cr_assert_eq(http_url_parse(&u, "http://[::1/", "8123", "8443", err, sizeof(err)),
		     -EINVAL);
}
