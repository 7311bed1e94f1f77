/* SPDX-License-Identifier: MIT */
/*
 * Test harness: real clickhouse-server nodes on loopback, each in a temporary
 * directory with its own free ports (http, tcp, interserver), configured from
 * a rewritten copy of the packaged config.xml and users.xml
 * (Documentation/fleet.md, "Trying it on one machine"). A node dies with the
 * test process that started it (PR_SET_PDEATHSIG), so a crashed test leaves
 * none running.
 *
 * One node: th_ch_init(), th_ch_start(), ..., th_ch_stop(). A cluster:
 * th_zk_start() a ZooKeeper, init every node first (that picks their
 * ports), then start each with options whose <remote_servers>, <macros> and
 * <zookeeper> name the others' ports.
 *
 * Without clickhouse-server (or java and ZooKeeper) the caller skips, with
 * the reason, unless RINGPIPE_REQUIRE_FLEET=1, which makes that a failure.
 *
 * TLS: a node started with th_ch_opts.tls, or every node when
 * RINGPIPE_TEST_CH_TLS=1, also serves https on its https_port, with a
 * certificate (for 127.0.0.1, ::1 and localhost) from a CA the test process
 * makes with openssl (th_tls_dir()), and hands out an https:// URL. The
 * process's SSL_CERT_FILE then names that CA, so that every client the test
 * runs, in the process or as a command, trusts it without --cacert: the
 * whole fleet suite runs over https with that switch.
 */
#ifndef RINGPIPE_TEST_CLICKHOUSE_NODE_H
#define RINGPIPE_TEST_CLICKHOUSE_NODE_H

#include <netinet/in.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>

#include "fleet/clickhouse.h"
#include "helpers.h"
#include "wire/http_conn.h"

#define TH_CH_CONFIG_DIR "/etc/clickhouse-server"

struct th_ch_opts {
	const char *users_xml;		/* more users, put inside <users> */
	const char *remote_servers_xml;	/* the clusters, inside <remote_servers> */
	const char *macros_xml;		/* inside <macros>: <shard>, <replica> */
	const char *zookeeper_xml;	/* inside <zookeeper>: <node><host>..</host>.. */
	unsigned keep_alive_timeout_s;	/* 0: the packaged one (3 s) */
	bool tls;			/* serve https too, and hand out its URL */
	bool tls_client_cert;		/* https wants a client certificate of the CA */
};

struct th_ch_node {
	char *dir;
	pid_t pid;		/* 0 when not running */
	uint16_t http_port, tcp_port, interserver_port, https_port;
	bool tls;		/* url is https */
	bool tls_client_cert;	/* its https wants a client certificate */
	uint16_t url_port;	/* the port url names: https_port with tls, else http_port */
	char url[128];		/* http://127.0.0.1:HTTP/ or https://127.0.0.1:HTTPS/ */
};

static inline const char *th_ch_server(void)
{
	return th_env("RINGPIPE_CLICKHOUSE_SERVER", "/usr/sbin/clickhouse-server");
}

static inline bool th_require_fleet(void)
{
	const char *v = getenv("RINGPIPE_REQUIRE_FLEET");

	return v && !strcmp(v, "1");
}

/* Skips (or fails, with RINGPIPE_REQUIRE_FLEET=1) without a server to start. */
#define TH_NEED_CLICKHOUSE()                                                    \
	do {                                                                    \
		if (access(th_ch_server(), X_OK) ||                             \
		    access(TH_CH_CONFIG_DIR "/config.xml", R_OK)) {             \
			if (th_require_fleet())                                 \
				cr_assert_fail("RINGPIPE_REQUIRE_FLEET=1 but %s or "    \
					       TH_CH_CONFIG_DIR "/config.xml is "       \
					       "missing (make deps installs "           \
					       "clickhouse-server)", th_ch_server());   \
			cr_skip_test("%s is not installed (make deps installs "  \
				     "clickhouse-server)", th_ch_server());     \
		}                                                               \
	} while (0)

/*
 * A loopback TCP port that was free a moment ago, outside the kernel's
 * ephemeral range (ip_local_port_range): a port from inside it can be handed
 * to any outgoing connection (an agent's, another server's) while the
 * server that owns it is down, and a restarted server would find it taken.
 * Outside the range only an explicit bind takes it; picked at random so
 * that tests running side by side do not pick the same one.
 */
static inline uint16_t th_free_port(void)
{
	static unsigned int seed;	/* one sequence per process: each call a new port */
	unsigned int lo = 32768, hi = 60999, base, span;
	FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
	int i;

	if (!seed)
		seed = ((unsigned int)getpid() << 16) ^ (unsigned int)time(NULL) ^ 1u;
	if (f) {
		if (fscanf(f, "%u %u", &lo, &hi) != 2)
			lo = 32768, hi = 60999;
		fclose(f);
	}
	/* below the range if there is room there, else above it */
	if (lo > 12000)
		base = 10000, span = lo - 10000;
	else
		base = hi + 1, span = 65535 - hi;
	cr_assert_gt(span, 0, "no ports outside the ephemeral range %u-%u", lo, hi);
	for (i = 0; i < 10000; i++) {
		uint16_t port = (uint16_t)(base + (unsigned int)rand_r(&seed) % span);
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port),
					 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), ok;

		cr_assert_geq(fd, 0, "socket: %s", strerror(errno));
		ok = !bind(fd, (struct sockaddr *)&a, sizeof(a));
		close(fd);
		if (ok)
			return port;
	}
	cr_assert_fail("no free loopback port outside the ephemeral range %u-%u", lo, hi);
	return 0;
}

/* Does RINGPIPE_TEST_CH_TLS=1 put every node on https? */
static inline bool th_ch_tls_all(void)
{
	return !strcmp(th_env("RINGPIPE_TEST_CH_TLS", "0"), "1");
}

/* Where th_tls_dir() made the material; NULL before */
static inline char **th_tls_dir_made(void)
{
	static char *dir;

	return &dir;
}

/* At exit: the material goes (RINGPIPE_KEEP=1 keeps it) */
static inline void th_tls_remove(void)
{
	char **dir = th_tls_dir_made();

	if (*dir && !getenv("RINGPIPE_KEEP"))
		th_rmdir(*dir);
	*dir = NULL;
}

/* Runs a shell command that must succeed (openssl's), with its output on failure */
static inline void th_sh_ok(const char *cmd)
{
	struct bytebuf out = { 0 };
	char *full = th_fmt("( %s ) 2>&1", cmd);
	int rc = th_run(full, &out);

	cr_assert_eq(rc, 0, "'%s' failed (%d): %s", cmd, rc, th_text(&out));
	free(full);
	bb_free(&out);
}

/*
 * The test process's TLS material, made once with the openssl command in a
 * directory removed when the process exits: ca.pem (the CA) and ca.key;
 * server.pem and server.key, for 127.0.0.1, ::1 and localhost, from that CA;
 * client.pem and client.key, a client certificate from it; other-ca.pem, a
 * CA that signed none of them. EC P-256 keys: made at once, and no
 * Diffie-Hellman parameters to generate.
 */
static inline const char *th_tls_dir(void)
{
	char **made = th_tls_dir_made(), *dir, *cmd;

	if (*made)
		return *made;
	if (system("command -v openssl >/dev/null 2>&1")) {
		if (th_require_fleet())
			cr_assert_fail("RINGPIPE_REQUIRE_FLEET=1 but the openssl command is missing "
				       "(Debian's openssl package)");
		cr_skip_test("the openssl command is not installed (Debian's openssl package)");
	}
	dir = th_tmpdir();
	cr_assert_not_null(dir, "no temporary directory: %s", strerror(errno));
	/* once per process: th_tls_dir_made() is NULL only until here */
	atexit(th_tls_remove);
#define TH_EC "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
	cmd = th_fmt("cd '%s' && "
		     "openssl req -x509 " TH_EC " -keyout ca.key -out ca.pem -days 7 "
		     "-subj '/CN=ringpipe test CA' && "
		     "openssl req -x509 " TH_EC " -keyout other-ca.key -out other-ca.pem -days 7 "
		     "-subj '/CN=ringpipe other CA' && "
		     "openssl req " TH_EC " -keyout server.key -out server.csr -subj '/CN=localhost' && "
		     "printf 'subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost\n' > server.ext && "
		     "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
		     "-days 7 -extfile server.ext -out server.pem && "
		     "openssl req " TH_EC " -keyout client.key -out client.csr "
		     "-subj '/CN=ringpipe-agent' && "
		     "printf 'extendedKeyUsage=clientAuth\n' > client.ext && "
		     "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
		     "-days 7 -extfile client.ext -out client.pem && "
		     "chmod a+r *.key", dir);
#undef TH_EC
	*made = dir;
	th_sh_ok(cmd);
	free(cmd);
	return dir;
}

/* A file of the TLS material (th_tls_dir()); the caller frees it */
static inline char *th_tls_file(const char *name)
{
	return th_fmt("%s/%s", th_tls_dir(), name);
}

/* The node's URL, on https when it serves it */
static inline void th_ch_set_url(struct th_ch_node *n)
{
	n->url_port = n->tls ? n->https_port : n->http_port;
	snprintf(n->url, sizeof(n->url), "%s://127.0.0.1:%u/", n->tls ? "https" : "http",
		 n->url_port);
}

/* https from here on: the URL, and SSL_CERT_FILE naming the test's CA for
 * every client the process starts */
static inline void th_ch_use_tls(struct th_ch_node *n)
{
	char *ca = th_tls_file("ca.pem");

	n->tls = true;
	setenv("SSL_CERT_FILE", ca, 1);
	free(ca);
	th_ch_set_url(n);
}

static inline void th_ch_pick_ports(struct th_ch_node *n)
{
	uint16_t *ports[] = { &n->http_port, &n->tcp_port, &n->interserver_port, &n->https_port };
	size_t i, j;
	bool again;

	for (i = 0; i < sizeof(ports) / sizeof(ports[0]); i++) {
		do {
			*ports[i] = th_free_port();
			for (again = false, j = 0; j < i; j++)
				again |= *ports[j] == *ports[i];
		} while (again);
	}
	th_ch_set_url(n);
}

/* A temporary directory and free ports; nothing runs yet. */
static inline void th_ch_init(struct th_ch_node *n)
{
	TH_NEED_CLICKHOUSE();
	memset(n, 0, sizeof(*n));
	n->dir = th_tmpdir();
	cr_assert_not_null(n->dir, "no temporary directory: %s", strerror(errno));
	th_ch_pick_ports(n);
	if (th_ch_tls_all())
		th_ch_use_tls(n);
}

/* Replaces what lies between the first `open` and the `close` after it. */
static inline void th_xml_replace(struct bytebuf *x, const char *open, const char *close,
				  const char *with, bool keep_tags)
{
	char *s = (char *)x->p, *a = strstr(s, open), *b = a ? strstr(a, close) : NULL;
	struct bytebuf out = { 0 };

	cr_assert(a && b, "%s...%s is not in the packaged config.xml", open, close);
	if (keep_tags) {
		a += strlen(open);
	} else {
		b += strlen(close);
	}
	bb_append(&out, s, (size_t)(a - s));
	bb_append(&out, with, strlen(with));
	bb_append(&out, b, strlen(b) + 1);
	cr_assert_not(out.oom);
	bb_free(x);
	*x = out;
	x->len--;
}

/* The content of <tag> (its first one) */
static inline void th_xml_set(struct bytebuf *x, const char *tag, const char *value)
{
	char open[64], close[64];

	snprintf(open, sizeof(open), "<%s>", tag);
	snprintf(close, sizeof(close), "</%s>", tag);
	th_xml_replace(x, open, close, value, true);
}

/* Replaces the element from open to close by <tag>content</tag> */
static inline void th_xml_wrap(struct bytebuf *x, const char *open, const char *close,
			       const char *tag, const char *content)
{
	char *with = th_fmt("<%s>%s</%s>", tag, content, tag);

	th_xml_replace(x, open, close, with, false);
	free(with);
}

/*
 * https on n->https_port (the packaged config.xml has it commented out),
 * with the test CA's server certificate in <openSSL><server>. Its
 * <dhParamsFile> goes: with EC keys the handshake needs no DH parameters,
 * and 18.16 starts without the file. A client certificate, when asked for,
 * is verified against the test CA (Poco's verificationMode strict: a client
 * without one is refused).
 */
static inline void th_ch_write_tls_config(const struct th_ch_node *n, struct bytebuf *x)
{
	char *v = th_fmt("<yandex>\n    <https_port>%u</https_port>\n", n->https_port);

	th_xml_replace(x, "<yandex>\n", "\n", v, false);
	free(v);
	v = th_tls_file("server.pem");
	th_xml_set(x, "certificateFile", v);
	free(v);
	v = th_tls_file("server.key");
	th_xml_set(x, "privateKeyFile", v);
	free(v);
	th_xml_replace(x, "<dhParamsFile>", "</dhParamsFile>", "", false);
	if (n->tls_client_cert) {
		char *ca = th_tls_file("ca.pem");

		v = th_fmt("<verificationMode>strict</verificationMode><caConfig>%s</caConfig>", ca);
		th_xml_replace(x, "<verificationMode>", "</verificationMode>", v, false);
		free(ca);
		free(v);
	}
}

static inline void th_ch_write_config(const struct th_ch_node *n, const struct th_ch_opts *o)
{
	struct bytebuf x = { 0 };
	char *v;

	cr_assert_eq(th_read_file(TH_CH_CONFIG_DIR "/config.xml", &x), 0);
	/* loopback only: a test's server must not be reachable from elsewhere */
	th_xml_replace(&x, "<yandex>", "\n", "<yandex>\n    <listen_host>127.0.0.1</listen_host>\n"
		       "    <interserver_http_host>127.0.0.1</interserver_http_host>\n", false);
#define TH_SET_PATH(tag, fmt) \
	(v = th_fmt(fmt, n->dir), th_xml_set(&x, tag, v), free(v))
	TH_SET_PATH("log", "%s/server.log");
	TH_SET_PATH("errorlog", "%s/server.err.log");
	TH_SET_PATH("path", "%s/data/");
	TH_SET_PATH("tmp_path", "%s/tmp/");
	TH_SET_PATH("user_files_path", "%s/user_files/");
	TH_SET_PATH("format_schema_path", "%s/format_schemas/");
#undef TH_SET_PATH
#define TH_SET_PORT(tag, port) \
	(v = th_fmt("%u", port), th_xml_set(&x, tag, v), free(v))
	TH_SET_PORT("http_port", n->http_port);
	TH_SET_PORT("tcp_port", n->tcp_port);
	TH_SET_PORT("interserver_http_port", n->interserver_port);
	if (o && o->keep_alive_timeout_s)
		TH_SET_PORT("keep_alive_timeout", o->keep_alive_timeout_s);
#undef TH_SET_PORT
	if (n->tls)
		th_ch_write_tls_config(n, &x);
	if (o && o->remote_servers_xml)
		th_xml_wrap(&x, "<remote_servers", "</remote_servers>", "remote_servers",
			    o->remote_servers_xml);
	if (o && o->zookeeper_xml)
		th_xml_wrap(&x, "<zookeeper incl", "/>", "zookeeper", o->zookeeper_xml);
	if (o && o->macros_xml)
		th_xml_wrap(&x, "<macros incl", "/>", "macros", o->macros_xml);
	v = th_fmt("%s/config.xml", n->dir);
	cr_assert_eq(th_write_file(v, x.p, x.len), 0, "cannot write %s", v);
	free(v);
	bb_free(&x);
}

static inline void th_ch_write_users(const struct th_ch_node *n, const struct th_ch_opts *o)
{
	struct bytebuf x = { 0 };
	char *path = th_fmt("%s/users.xml", n->dir);

	/* without a users.xml beside config.xml the server does not start */
	cr_assert_eq(th_read_file(TH_CH_CONFIG_DIR "/users.xml", &x), 0);
	if (o && o->users_xml) {
		char *with = th_fmt("%s</users>", o->users_xml);

		th_xml_replace(&x, "</users>", "</users>", with, false);
		free(with);
	}
	cr_assert_eq(th_write_file(path, x.p, x.len), 0, "cannot write %s", path);
	free(path);
	bb_free(&x);
}

/*
 * Starts argv[0] in dir with its output in dir/out_name; it dies with the
 * test process, whatever ends that (a failed assertion, a crash).
 */
static inline pid_t th_daemon_spawn(const char *dir, const char *out_name, char *const argv[])
{
	char *out = th_fmt("%s/%s", dir, out_name);
	pid_t parent = getpid(), pid;

	fflush(NULL);
	pid = fork();
	cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		if (chdir(dir) == 0)
			execv(argv[0], argv);
		_exit(127);
	}
	free(out);
	return pid;
}

/* SIGTERM, then SIGKILL after 20 s; *pid becomes 0. Accepts 0. */
static inline void th_daemon_stop(pid_t *pid)
{
	int i, st;

	if (*pid <= 0)
		return;
	kill(*pid, SIGTERM);
	for (i = 0; i < 400 && waitpid(*pid, &st, WNOHANG) != *pid; i++)
		usleep(50000);
	if (i == 400) {
		kill(*pid, SIGKILL);
		waitpid(*pid, &st, 0);
	}
	*pid = 0;
}

static inline void th_ch_spawn(struct th_ch_node *n)
{
	char *config = th_fmt("--config-file=%s/config.xml", n->dir);
	char *argv[] = { (char *)th_ch_server(), config, NULL };

	n->pid = th_daemon_spawn(n->dir, "server.out", argv);
	free(config);
}

/* Does GET /ping answer "Ok." on the port of the node's URL? */
static inline bool th_ch_ping(const struct th_ch_node *n)
{
	struct http_conn c;
	struct http_response r = { 0 };
	struct http_request rq = { .method = "GET", .target = "/ping" };
	struct http_tls tls = { 0 };
	char port[8], err[256];
	bool ok;

	if (n->tls && n->tls_client_cert) {
		char *cert = th_tls_file("client.pem"), *key = th_tls_file("client.key");

		cr_assert_eq(http_tls_set(&tls, NULL, cert, key, err, sizeof(err)), 0, "%s", err);
		free(cert);
		free(key);
	}
	snprintf(port, sizeof(port), "%u", n->url_port);
	http_conn_init(&c, n->tls, "127.0.0.1", port, &tls, 1000);
	ok = !http_conn_request(&c, &rq, &r, err, sizeof(err)) && r.status == 200 && r.body.p &&
	     !strncmp((char *)r.body.p, "Ok.", 3);
	http_response_free(&r);
	http_conn_free(&c);
	return ok;
}

/* Waits for /ping: true; false when the server exited (its status in *st). */
static inline bool th_ch_wait_ready(struct th_ch_node *n, int *st)
{
	int i;

	for (i = 0; i < 2400; i++) {	/* 120 s: a loaded host starts it slowly */
		if (waitpid(n->pid, st, WNOHANG) == n->pid) {
			n->pid = 0;
			return false;
		}
		if (th_ch_ping(n))
			return true;
		usleep(50000);
	}
	cr_assert_fail("clickhouse-server (pid %d, %s) did not answer /ping on port %u in 120 s",
		       n->pid, n->dir, n->http_port);
	return false;
}

/* The server's own words on why it stopped: its error log, else its output */
static inline char *th_ch_log_tail(const struct th_ch_node *n)
{
	struct bytebuf b = { 0 };
	char *err_log = th_fmt("%s/server.err.log", n->dir), *out = th_fmt("%s/server.out", n->dir);
	char *tail;

	if (th_read_file(err_log, &b) || !b.len)
		th_read_file(out, &b);
	tail = th_fmt("%.600s", b.len > 600 ? (char *)b.p + b.len - 600 : th_text(&b));
	free(err_log);
	free(out);
	bb_free(&b);
	return tail;
}

/*
 * Writes the configuration and starts the server; returns once it answers.
 * A port taken meanwhile by someone else is met with new ports, twice
 * (only a lone node may move: a cluster's configs name each other's).
 */
static inline void th_ch_start(struct th_ch_node *n, const struct th_ch_opts *o)
{
	int attempt, st = 0;

	if (o && o->tls && !n->tls)
		th_ch_use_tls(n);
	n->tls_client_cert = n->tls && o && o->tls_client_cert;
	for (attempt = 0; attempt < 3; attempt++) {
		char *tail;

		th_ch_write_config(n, o);
		th_ch_write_users(n, o);
		th_ch_spawn(n);
		if (th_ch_wait_ready(n, &st))
			return;
		tail = th_ch_log_tail(n);
		if (!strstr(tail, "Address already in use") || (o && o->remote_servers_xml))
			cr_assert_fail("clickhouse-server exited (status 0x%x) before it answered: "
				       "...%s", st, tail);
		free(tail);
		th_ch_pick_ports(n);
	}
	cr_assert_fail("clickhouse-server found its ports taken three times");
}

/* Stops the server (th_daemon_stop()) and removes its directory. Accepts a
 * node that never started, and one stopped already. */
static inline void th_ch_stop(struct th_ch_node *n)
{
	th_daemon_stop(&n->pid);
	if (n->dir)
		th_rmdir(n->dir);
	n->dir = NULL;
}

/* Stops n servers at once (SIGTERM to all, then th_daemon_stop() each):
 * a server may take seconds to stop */
static inline void th_ch_halt_all(struct th_ch_node *nodes, int n)
{
	int i;

	for (i = 0; i < n; i++)
		if (nodes[i].pid > 0)
			kill(nodes[i].pid, SIGTERM);
	for (i = 0; i < n; i++)
		th_daemon_stop(&nodes[i].pid);
}

/* Starts a stopped node again, on its configuration, data and ports */
static inline void th_ch_restart(struct th_ch_node *n)
{
	int st = 0;

	cr_assert_eq(n->pid, 0, "the node runs already");
	th_ch_spawn(n);
	cr_assert(th_ch_wait_ready(n, &st), "clickhouse-server (%s) did not come back (status "
		  "0x%x): ...%s", n->dir, st, th_ch_log_tail(n));
}

/* SIGKILL: a server that dies without a word */
static inline void th_ch_kill(struct th_ch_node *n)
{
	th_kill_wait(&n->pid);
}

/* Kills n servers and removes their directories, all at once: a server
 * that ran for a while leaves thousands of files (a part per insert and
 * table), and their removal is what takes time */
static inline void th_ch_discard_all(struct th_ch_node *nodes, int n)
{
	struct bytebuf cmd = { 0 };
	int i;

	for (i = 0; i < n; i++)
		th_ch_kill(&nodes[i]);
	for (i = 0; i < n && !getenv("RINGPIPE_KEEP"); i++)
		if (nodes[i].dir)
			bb_printf(&cmd, "rm -rf '%s' & ", nodes[i].dir);
	bb_printf(&cmd, "wait");
	bb_append(&cmd, "", 1);
	if (!cmd.oom && system((const char *)cmd.p) == -1)
		perror("rm");
	bb_free(&cmd);
	for (i = 0; i < n; i++) {
		free(nodes[i].dir);
		nodes[i].dir = NULL;
	}
}

/* The answer of c's server to sql, which must succeed; the caller frees it */
static inline char *th_ch_answer(struct ch_client *c, const char *sql)
{
	struct bytebuf out = { 0 };
	char err[4096];
	int rc = ch_exec(c, sql, NULL, 0, &out, err, sizeof(err));

	cr_assert_eq(rc, 0, "expected '%.300s' to succeed, got %d: %s", sql, rc, err);
	return out.p ? (char *)out.p : strdup("");
}

/* The first line of the answer to sql at url, which must succeed */
static inline char *th_ch_ask(const char *url, const char *sql)
{
	struct ch_client c;
	struct ch_target t;
	char err[2048], line[4096];

	cr_assert_eq(ch_target_parse(&t, url, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(ch_client_init(&c, &t, 60000), 0);
	cr_assert_eq(ch_query_line(&c, sql, line, sizeof(line), err, sizeof(err)), 0,
		     "expected '%s' to succeed: %s", sql, err);
	ch_client_free(&c);
	return strdup(line);	/* th_fmt() refuses an empty string */
}

static inline uint64_t th_ch_ask_u64(const char *url, const char *sql)
{
	char *line = th_ch_ask(url, sql);
	uint64_t n = strtoull(line, NULL, 10);

	free(line);
	return n;
}

/* ---- ZooKeeper, for replicated tables and ON CLUSTER statements ---------- */

struct th_zk {
	char *dir;
	pid_t pid;
	uint16_t port;
};

#define TH_ZK_CLASSPATH "/etc/zookeeper/conf:/usr/share/java/*"
#define TH_ZK_JAR "/usr/share/java/zookeeper.jar"

/* Does the server answer "ruok" with "imok"? */
static inline bool th_zk_ok(const struct th_zk *z)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(z->port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct timeval tv = { 1, 0 };
	char answer[8] = "";
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	bool ok = false;

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (fd >= 0 && !connect(fd, (struct sockaddr *)&a, sizeof(a)) && write(fd, "ruok", 4) == 4)
		ok = read(fd, answer, 4) == 4 && !memcmp(answer, "imok", 4);
	if (fd >= 0)
		close(fd);
	return ok;
}

/* A standalone ZooKeeper on a free loopback port, up when this returns. */
static inline void th_zk_start(struct th_zk *z)
{
	char *cfg, *text, *java = (char *)th_env("RINGPIPE_JAVA", "/usr/bin/java");
	char *argv[] = { java, (char *)"-Xmx128m", (char *)"-cp", (char *)TH_ZK_CLASSPATH,
			 (char *)"org.apache.zookeeper.server.quorum.QuorumPeerMain", NULL, NULL };
	int i, st;

	if (access(java, X_OK) || access(TH_ZK_JAR, R_OK)) {
		if (th_require_fleet())
			cr_assert_fail("RINGPIPE_REQUIRE_FLEET=1 but java or " TH_ZK_JAR " is "
				       "missing (make deps installs zookeeper)");
		cr_skip_test("ZooKeeper is not installed (make deps installs zookeeper)");
	}
	memset(z, 0, sizeof(*z));
	z->dir = th_tmpdir();
	cr_assert_not_null(z->dir);
	z->port = th_free_port();
	cfg = th_fmt("%s/zoo.cfg", z->dir);
	text = th_fmt("tickTime=500\ndataDir=%s\nclientPort=%u\nclientPortAddress=127.0.0.1\n"
		      "admin.enableServer=false\n4lw.commands.whitelist=ruok\n", z->dir, z->port);
	cr_assert_eq(th_write_file(cfg, text, strlen(text)), 0);
	argv[5] = cfg;
	z->pid = th_daemon_spawn(z->dir, "zookeeper.out", argv);
	for (i = 0; i < 2400 && !th_zk_ok(z); i++) {	/* 120 s */
		cr_assert_neq(waitpid(z->pid, &st, WNOHANG), z->pid,
			      "ZooKeeper exited before it answered (see %s/zookeeper.out)", z->dir);
		usleep(50000);
	}
	cr_assert_lt(i, 2400, "ZooKeeper did not answer on port %u in 120 s", z->port);
	free(cfg);
	free(text);
}

static inline void th_zk_stop(struct th_zk *z)
{
	th_daemon_stop(&z->pid);
	if (z->dir)
		th_rmdir(z->dir);
	z->dir = NULL;
}

/* ---- a cluster --------------------------------------------------------------- */

/*
 * Starts ZooKeeper and the cluster `name` of nshards x nreplicas servers,
 * nodes[shard * nreplicas + replica], shard s having the macros shard 0s+1
 * and replica rs+1-r+1; with internal_replication, so that a Distributed
 * insert goes to one replica of a shard and its replicated table copies it
 * to the others. Also with one replica a shard: the tables fleet init makes
 * on a cluster are replicated, and 18.16 refuses an ALTER ... ON CLUSTER
 * of a replicated table on a shard without it (fleet init's migration).
 */
static inline void th_ch_cluster_start(struct th_zk *zk, struct th_ch_node *nodes, int nshards,
				       int nreplicas, const char *name)
{
	struct bytebuf servers = { 0 };
	char *keeper;
	int s, r;

	th_zk_start(zk);
	for (s = 0; s < nshards * nreplicas; s++)
		th_ch_init(&nodes[s]);
	bb_printf(&servers, "<%s>", name);
	for (s = 0; s < nshards; s++) {
		bb_printf(&servers, "<shard><internal_replication>true</internal_replication>");
		for (r = 0; r < nreplicas; r++)
			bb_printf(&servers, "<replica><host>127.0.0.1</host><port>%u</port></replica>",
				  nodes[s * nreplicas + r].tcp_port);
		bb_printf(&servers, "</shard>");
	}
	bb_printf(&servers, "</%s>", name);
	bb_append(&servers, "", 1);
	cr_assert_not(servers.oom);
	keeper = th_fmt("<node><host>127.0.0.1</host><port>%u</port></node>", zk->port);
	for (s = 0; s < nshards; s++)
		for (r = 0; r < nreplicas; r++) {
			char *macros = nreplicas > 1 ?
				th_fmt("<shard>0%d</shard><replica>r%d-%d</replica>", s + 1, s + 1, r + 1) :
				th_fmt("<shard>0%d</shard><replica>r%d</replica>", s + 1, s + 1);
			struct th_ch_opts o = { .remote_servers_xml = (const char *)servers.p,
						.zookeeper_xml = keeper, .macros_xml = macros };

			th_ch_start(&nodes[s * nreplicas + r], &o);
			free(macros);
		}
	bb_free(&servers);
	free(keeper);
}

/*
 * `ringpipe fleet init --clickhouse URL --cluster NAME ARGS` on a cluster of
 * n nodes. A server that died meanwhile is started again and the init (IF
 * NOT EXISTS throughout) run again, at most twice: 18.16 was seen to crash
 * (BaseDaemon: "Address: NULL pointer", in zkutil::ZooKeeper::createImpl)
 * on the first ON CLUSTER statement after its start, a few times in about
 * 20 runs, on a loaded machine. Any other failure is the test's.
 */
static inline void th_ch_fleet_init_cluster(struct th_ch_node *nodes, int n, const char *url,
					    const char *name)
{
	struct bytebuf out = { 0 };
	int attempt, i, st;

	for (attempt = 0;; attempt++) {
		bool restarted = false;

		out.len = 0;
		if (!th_tool_run(th_fmt("fleet init --clickhouse '%s' --cluster %s", url, name),
				 &out))
			break;
		for (i = 0; i < n; i++) {
			if (nodes[i].pid <= 0 || waitpid(nodes[i].pid, &st, WNOHANG) != nodes[i].pid)
				continue;
			fprintf(stderr, "server %d died in fleet init (status 0x%x), started again: "
				"...%s\n", i, st, th_ch_log_tail(&nodes[i]));
			nodes[i].pid = 0;
			th_ch_restart(&nodes[i]);
			restarted = true;
		}
		cr_assert(restarted && attempt < 2, "fleet init: %s", th_text(&out));
	}
	bb_free(&out);
}

#endif /* RINGPIPE_TEST_CLICKHOUSE_NODE_H */
