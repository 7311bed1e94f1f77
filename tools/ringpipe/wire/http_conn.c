// SPDX-License-Identifier: MIT
/*
 * The HTTP client of http_conn.h, over libcurl. A request runs in our own
 * loop over the connection's multi handle rather than in
 * curl_easy_perform(), so that the timeout is what it always was here: a
 * bound on each wait for the peer (the connect, then every stretch without
 * a byte moving either way), not on the whole exchange, which a long
 * export or a large insert may rightly take longer than.
 */
#include <curl/curl.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <zlib.h>

#include "core/clock.h"
#include "wire/http_conn.h"
#include "common/tool_util.h"

/*
 * Proxies come from the environment as libcurl reads it (http_proxy,
 * https_proxy, all_proxy, no_proxy). Without a no_proxy of the user's, a
 * loopback server is reached directly: a proxy elsewhere would reach its
 * own loopback, not ours. A no_proxy that is set replaces this default.
 */
#define HTTP_NO_PROXY_DEFAULT "localhost,127.0.0.0/8,::1"

/* ---- URLs -------------------------------------------------------------------- */

static pthread_once_t http_global_once = PTHREAD_ONCE_INIT;
static CURLcode http_global_rc = CURLE_FAILED_INIT;

/* curl_global_init() is not thread-safe in every libcurl: once, whoever comes first */
static void http_global_init(void)
{
	http_global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static int http_global(void)
{
	pthread_once(&http_global_once, http_global_init);
	return http_global_rc == CURLE_OK ? 0 : -ENOMEM;
}

/* A part of h into out (len bytes): 0, 1 when the URL has none, or -EINVAL */
static int http_url_part(CURLU *h, CURLUPart what, char *out, size_t len)
{
	char *v = NULL;
	CURLUcode uc = curl_url_get(h, what, &v, 0);
	int rc = 0;

	if (uc == CURLUE_NO_PORT || uc == CURLUE_NO_QUERY || uc == CURLUE_NO_USER ||
	    uc == CURLUE_NO_PASSWORD)
		return 1;
	if (uc)
		return -EINVAL;
	if (strlen(v) >= len)
		rc = -EINVAL;
	else
		strcpy(out, v);
	curl_free(v);
	return rc;
}

static int http_url_why(CURLUcode uc, char *err, size_t errlen)
{
	if (uc == CURLUE_BAD_PORT_NUMBER)
		return tool_set_err(err, errlen, -EINVAL,
				    "the port must be a number from 1 to 65535");
	if (uc == CURLUE_NO_HOST || uc == CURLUE_BAD_HOSTNAME)
		return tool_set_err(err, errlen, -EINVAL, "no host, or a malformed host name");
	return tool_set_err(err, errlen, -EINVAL, "%s", curl_url_strerror(uc));
}

int http_url_parse(struct http_url *u, const char *url, const char *http_port,
		   const char *https_port, char *err, size_t errlen)
{
	char host[260], scratch[8];
	CURLUcode uc;
	CURLU *h;
	int rc;

	memset(u, 0, sizeof(*u));
	if (strncasecmp(url, "http://", 7) && strncasecmp(url, "https://", 8))
		return tool_set_err(err, errlen, -EINVAL,
				    "the URL must start with http:// or https://");
	if (http_global() || !(h = curl_url()))
		return tool_set_err(err, errlen, -ENOMEM, "%s", strerror(ENOMEM));
	uc = curl_url_set(h, CURLUPART_URL, url, 0);
	if (uc) {
		rc = http_url_why(uc, err, errlen);
		goto out;
	}
	u->https = !strncasecmp(url, "https://", 8);
	if (http_url_part(h, CURLUPART_USER, scratch, sizeof(scratch)) != 1 ||
	    http_url_part(h, CURLUPART_PASSWORD, scratch, sizeof(scratch)) != 1) {
		rc = tool_set_err(err, errlen, -EINVAL,
				  "a user or password in the URL is not taken (they would travel "
				  "in the clear to a proxy and into logs): give them as options");
		goto out;
	}
	if (http_url_part(h, CURLUPART_HOST, host, sizeof(host))) {
		rc = tool_set_err(err, errlen, -EINVAL, "no host, or a host name too long");
		goto out;
	}
	/* an IPv6 literal comes in brackets: the address alone is the host */
	if (host[0] == '[') {
		host[strcspn(host, "]")] = '\0';
		memmove(host, host + 1, strlen(host));
	}
	if (!host[0] || strlen(host) >= sizeof(u->host)) {
		rc = tool_set_err(err, errlen, -EINVAL, "no host, or a host name too long");
		goto out;
	}
	strcpy(u->host, host);
	rc = http_url_part(h, CURLUPART_PORT, u->port, sizeof(u->port));
	if (rc == 1)
		snprintf(u->port, sizeof(u->port), "%s", u->https ? https_port : http_port);
	if (rc < 0 || atoi(u->port) < 1 || atoi(u->port) > 65535) {
		rc = http_url_why(CURLUE_BAD_PORT_NUMBER, err, errlen);
		goto out;
	}
	if (http_url_part(h, CURLUPART_PATH, u->path, sizeof(u->path)) < 0 ||
	    http_url_part(h, CURLUPART_QUERY, u->query, sizeof(u->query)) < 0) {
		rc = tool_set_err(err, errlen, -EINVAL, "the path or the query is too long");
		goto out;
	}
	if (!u->path[0])
		strcpy(u->path, "/");
	rc = 0;
out:
	curl_url_cleanup(h);
	return rc;
}

/* ---- TLS and encodings --------------------------------------------------------- */

static int http_tls_file(char dst[HTTP_FILE_MAX], const char *path, const char *opt, char *err,
			 size_t errlen)
{
	if (!path)
		return 0;
	if (!path[0] || strlen(path) >= HTTP_FILE_MAX)
		return tool_set_err(err, errlen, -EINVAL, "%s: the path is empty or longer than "
				    "%d bytes", opt, HTTP_FILE_MAX - 1);
	/* said now, by name, rather than as a TLS failure at the first request */
	if (access(path, R_OK))
		return tool_set_err(err, errlen, -errno, "%s %s: %s", opt, path, strerror(errno));
	strcpy(dst, path);
	return 0;
}

int http_tls_set(struct http_tls *t, const char *cacert, const char *cert, const char *key,
		 char *err, size_t errlen)
{
	int rc;

	memset(t, 0, sizeof(*t));
	if (key && !cert)
		return tool_set_err(err, errlen, -EINVAL,
				    "--key is the private key of --cert's client certificate: "
				    "give --cert FILE too");
	if ((rc = http_tls_file(t->cacert, cacert, "--cacert", err, errlen)) ||
	    (rc = http_tls_file(t->cert, cert, "--cert", err, errlen)) ||
	    (rc = http_tls_file(t->key, key, "--key", err, errlen)))
		return rc;
	return 0;
}

int http_body_encoding_parse(const char *name, enum http_body_encoding *out)
{
	if (!strcmp(name, "gzip"))
		*out = HTTP_BODY_GZIP;
	else if (!strcmp(name, "none"))
		*out = HTTP_BODY_IDENTITY;
	else
		return -EINVAL;
	return 0;
}

/* n bytes at p, gzip-compressed, into out (emptied first). 0, -ENOMEM or -EFBIG. */
static int http_gzip(struct bytebuf *out, const void *p, size_t n)
{
	z_stream z = { 0 };
	uLong bound;
	int zrc;

	out->len = 0;
	if (n > UINT_MAX)
		return -EFBIG;
	/* level 1: the agent shares its host with what it traces, and most of
	 * what gzip saves on rows it saves at its fastest level already;
	 * windowBits 15 + 16 asks for the gzip wrapper */
	if (deflateInit2(&z, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
		return -ENOMEM;
	bound = deflateBound(&z, (uLong)n);
	if (bound > UINT_MAX || bb_reserve(out, bound)) {
		deflateEnd(&z);
		return bound > UINT_MAX ? -EFBIG : -ENOMEM;
	}
	z.next_in = (Bytef *)p;
	z.avail_in = (uInt)n;
	z.next_out = out->p;
	z.avail_out = (uInt)bound;
	zrc = deflate(&z, Z_FINISH);
	out->len = z.total_out;
	deflateEnd(&z);
	return zrc == Z_STREAM_END ? 0 : -ENOMEM;
}

/* ---- the connection ---------------------------------------------------------- */

int http_conn_init(struct http_conn *c, bool https, const char *host, const char *port,
		   const struct http_tls *tls, int timeout_ms)
{
	bool v6 = strchr(host, ':') != NULL;
	int n;

	memset(c, 0, sizeof(*c));
	c->fd = -1;
	c->https = https;
	c->timeout_ms = timeout_ms > 0 ? timeout_ms : 30000;
	if (tls)
		c->tls = *tls;
	n = snprintf(c->where, sizeof(c->where), v6 ? "[%s]:%s" : "%s:%s", host, port);
	if (!host[0] || strlen(host) >= 256 || strlen(port) >= 8 || n < 0 ||
	    (size_t)n >= sizeof(c->where))
		return -EINVAL;
	strcpy(c->host, host);
	strcpy(c->port, port);
	snprintf(c->origin, sizeof(c->origin), "%s://%s", https ? "https" : "http", c->where);
	return 0;
}

void http_conn_close(struct http_conn *c)
{
	/* the multi handle's connection cache holds the kept connection */
	if (c->easy)
		curl_easy_cleanup(c->easy);
	if (c->multi)
		curl_multi_cleanup(c->multi);
	c->easy = c->multi = NULL;
	c->fd = -1;
}

void http_conn_free(struct http_conn *c)
{
	http_conn_close(c);
	bb_free(&c->packed);
}

void http_response_free(struct http_response *r)
{
	bb_free(&r->body);
}

/* One request's state, seen by libcurl's callbacks */
struct http_exchange {
	struct http_response *r;
	uint64_t active_ns;	/* when a byte last moved, or the connection came */
	curl_off_t up, down;	/* body bytes sent and received, as last seen */
	bool connected;		/* the connection (and TLS, and any proxy tunnel) is up */
	bool answered;		/* a byte of the answer came */
	bool oom;
};

static size_t http_on_body(char *p, size_t size, size_t n, void *ctx)
{
	struct http_exchange *x = ctx;

	x->answered = true;
	x->active_ns = rp_clock_mono_ns();
	if (bb_append(&x->r->body, p, size * n)) {
		x->oom = true;
		return 0;	/* libcurl stops with CURLE_WRITE_ERROR */
	}
	return size * n;
}

static size_t http_on_header(char *p, size_t size, size_t n, void *ctx)
{
	struct http_exchange *x = ctx;

	(void)p;
	x->answered = true;
	x->active_ns = rp_clock_mono_ns();
	return size * n;
}

static int http_on_connected(void *ctx, char *primary_ip, char *local_ip, int primary_port,
			     int local_port)
{
	struct http_exchange *x = ctx;

	(void)primary_ip, (void)local_ip, (void)primary_port, (void)local_port;
	x->connected = true;
	x->active_ns = rp_clock_mono_ns();
	return CURL_PREREQFUNC_OK;
}

/* Called on every turn of the loop: a body byte that moved is activity */
static int http_on_progress(void *ctx, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
			    curl_off_t ulnow)
{
	struct http_exchange *x = ctx;

	(void)dltotal, (void)ultotal;
	if (dlnow != x->down || ulnow != x->up) {
		x->down = dlnow;
		x->up = ulnow;
		x->active_ns = rp_clock_mono_ns();
	}
	return 0;
}

/* The easy and multi handles with what stays the same from request to request */
static int http_handles(struct http_conn *c, struct http_exchange *x)
{
	CURL *e;
	CURLcode cc = CURLE_OK;

	if (!c->easy) {
		if (http_global() || !(c->easy = curl_easy_init()) ||
		    !(c->multi = curl_multi_init())) {
			http_conn_close(c);
			return -ENOMEM;
		}
		/* one connection kept: an insert's fresh one replaces the idle one */
		curl_multi_setopt(c->multi, CURLMOPT_MAXCONNECTS, 1L);
		e = c->easy;
#define HTTP_SET(opt, v) (cc = cc ? cc : curl_easy_setopt(e, opt, v))
		HTTP_SET(CURLOPT_ERRORBUFFER, c->curl_error);
		HTTP_SET(CURLOPT_PROTOCOLS_STR, "http,https");
		HTTP_SET(CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
		HTTP_SET(CURLOPT_CONNECTTIMEOUT_MS, (long)c->timeout_ms);
		HTTP_SET(CURLOPT_WRITEFUNCTION, http_on_body);
		HTTP_SET(CURLOPT_HEADERFUNCTION, http_on_header);
		HTTP_SET(CURLOPT_PREREQFUNCTION, http_on_connected);
		HTTP_SET(CURLOPT_XFERINFOFUNCTION, http_on_progress);
		HTTP_SET(CURLOPT_NOPROGRESS, 0L);
		/* a proxy's answer to CONNECT is not the server's */
		HTTP_SET(CURLOPT_SUPPRESS_CONNECT_HEADERS, 1L);
		if (!getenv("no_proxy") && !getenv("NO_PROXY"))
			HTTP_SET(CURLOPT_NOPROXY, HTTP_NO_PROXY_DEFAULT);
		if (c->tls.cacert[0]) {
			/* --cacert: these CAs, and not the system's too */
			HTTP_SET(CURLOPT_CAINFO, c->tls.cacert);
			HTTP_SET(CURLOPT_CAPATH, (char *)NULL);
		} else if (getenv("SSL_CERT_FILE") && getenv("SSL_CERT_FILE")[0]) {
			/* OpenSSL's own variable for its default CA file, which
			 * libcurl's compiled-in default would otherwise hide */
			HTTP_SET(CURLOPT_CAINFO, getenv("SSL_CERT_FILE"));
		}
		if (c->tls.cert[0]) {
			HTTP_SET(CURLOPT_SSLCERT, c->tls.cert);
			HTTP_SET(CURLOPT_SSLKEY, c->tls.key[0] ? c->tls.key : c->tls.cert);
		}
#undef HTTP_SET
		if (cc) {
			http_conn_close(c);
			return cc == CURLE_OUT_OF_MEMORY ? -ENOMEM : -EINVAL;
		}
	}
	e = c->easy;
	curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
	curl_easy_setopt(e, CURLOPT_PREREQDATA, x);
	curl_easy_setopt(e, CURLOPT_XFERINFODATA, x);
	return 0;
}

/* Appends a header line of len bytes to *l: 0, or -ENOMEM */
static int http_header_add(struct curl_slist **l, const char *line, size_t len)
{
	char *copy = strndup(line, len);
	struct curl_slist *n = copy ? curl_slist_append(*l, copy) : NULL;

	free(copy);
	if (!n)
		return -ENOMEM;
	*l = n;
	return 0;
}

/* The request's headers as libcurl takes them into *l: 0, or -ENOMEM */
static int http_header_list(const struct http_request *rq, bool gzip, struct curl_slist **l)
{
	const char *h = rq->headers ? rq->headers : "";
	bool typed = false;

	while (*h) {
		size_t len = strcspn(h, "\r\n");

		typed |= len >= 13 && !strncasecmp(h, "Content-Type:", 13);
		if (len && http_header_add(l, h, len))
			return -ENOMEM;
		h += len;
		h += strspn(h, "\r\n");
	}
	/* libcurl would wait for a "100 Continue" before a large body, and
	 * label a POST as a form; the servers here want neither */
	if (http_header_add(l, "Expect:", 7) ||
	    (!typed && http_header_add(l, "Content-Type:", 13)) ||
	    (gzip && http_header_add(l, "Content-Encoding: gzip", 22)))
		return -ENOMEM;
	return 0;
}

/* The request's own options: method, URL, body, headers */
static int http_setup_request(struct http_conn *c, const struct http_request *rq,
			      struct bytebuf *url, struct curl_slist *headers)
{
	CURL *e = c->easy;
	bool get = !strcmp(rq->method, "GET");
	const void *body = rq->body_len ? rq->body : "";
	size_t len = rq->body_len;
	CURLcode cc = CURLE_OK;
	int rc;

	if (!get && rq->body_len && c->encoding == HTTP_BODY_GZIP) {
		if ((rc = http_gzip(&c->packed, rq->body, rq->body_len)))
			return rc;
		body = c->packed.p;
		len = c->packed.len;
	}
	bb_printf(url, "%s%s%s", c->origin, rq->target[0] == '/' ? "" : "/", rq->target);
	bb_append(url, "", 1);
	if (url->oom)
		return -ENOMEM;
#define HTTP_SET(opt, v) (cc = cc ? cc : curl_easy_setopt(e, opt, v))
	HTTP_SET(CURLOPT_URL, (const char *)url->p);
	HTTP_SET(CURLOPT_HTTPHEADER, headers);
	/*
	 * libcurl sends a request again, on a new connection, when the reused
	 * connection it went on failed before any byte of the answer came
	 * (Curl_retry_request(): only ever for a reused connection). A request
	 * that must not run twice therefore never goes on a reused one: a
	 * fresh connection has no retry, whatever happens to it, and its
	 * failure is the caller's to look into. The cost is a connect (and a
	 * TLS handshake) per insert, small beside what an insert costs the
	 * server; and an insert no longer fails on a connection the server
	 * closed idle a moment before.
	 */
	HTTP_SET(CURLOPT_FRESH_CONNECT, rq->no_resend ? 1L : 0L);
	if (get) {
		HTTP_SET(CURLOPT_HTTPGET, 1L);
		HTTP_SET(CURLOPT_CUSTOMREQUEST, NULL);
	} else {
		/* the body is ours until the request returns: no copy */
		HTTP_SET(CURLOPT_POST, 1L);
		HTTP_SET(CURLOPT_POSTFIELDS, body);
		HTTP_SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
		HTTP_SET(CURLOPT_CUSTOMREQUEST, strcmp(rq->method, "POST") ? rq->method : NULL);
	}
#undef HTTP_SET
	return cc == CURLE_OK ? 0 : cc == CURLE_OUT_OF_MEMORY ? -ENOMEM : -EINVAL;
}

/*
 * Runs the request on the multi handle until it ends, or until no byte
 * moved for the timeout once connected (libcurl bounds the connect
 * itself). The result in *cc; -ETIMEDOUT when our bound ended it.
 */
static int http_run(struct http_conn *c, struct http_exchange *x, CURLcode *cc)
{
	uint64_t bound_ns = (uint64_t)c->timeout_ms * 1000000ull;
	int running = 1, rc = 0;
	CURLMsg *m;
	int left;

	x->active_ns = rp_clock_mono_ns();
	*cc = CURLE_OK;
	if (curl_multi_add_handle(c->multi, c->easy))
		return -ENOMEM;
	for (;;) {
		uint64_t now, idle;

		if (curl_multi_perform(c->multi, &running)) {
			rc = -ENOMEM;
			break;
		}
		if (!running)
			break;
		now = rp_clock_mono_ns();
		idle = now - x->active_ns;
		if (x->connected && idle >= bound_ns) {
			rc = -ETIMEDOUT;
			break;
		}
		/* libcurl's own timers (the connect's bound) shorten the wait */
		curl_multi_poll(c->multi, NULL, 0,
				(int)((bound_ns - (idle < bound_ns ? idle : 0)) / 1000000ull) + 1, NULL);
	}
	while ((m = curl_multi_info_read(c->multi, &left)))
		if (m->msg == CURLMSG_DONE)
			*cc = m->data.result;
	if (!rc && !*cc) {
		curl_socket_t s = CURL_SOCKET_BAD;

		/* asked before the handle leaves the multi, whose cache holds it */
		if (curl_easy_getinfo(c->easy, CURLINFO_ACTIVESOCKET, &s) || s == CURL_SOCKET_BAD)
			s = -1;
		c->fd = (int)s;
	} else {
		c->fd = -1;
	}
	/* a request cut short leaves with its connection, which libcurl closes */
	curl_multi_remove_handle(c->multi, c->easy);
	return rc;
}

/* What failed, in words, as a negative errno */
static int http_explain(struct http_conn *c, CURLcode cc, const struct http_exchange *x,
			char *err, size_t errlen)
{
	const char *why = c->curl_error[0] ? c->curl_error : curl_easy_strerror(cc);
	const char *ca_env = getenv("SSL_CERT_FILE");
	char named[300];
	long os_errno = 0;
	bool proxied;

	if (ca_env && !ca_env[0])
		ca_env = NULL;
	snprintf(named, sizeof(named), " %s port %s ", c->host, c->port);
	proxied = !strstr(why, named);

	curl_easy_getinfo(c->easy, CURLINFO_OS_ERRNO, &os_errno);
	switch (cc) {
	case CURLE_COULDNT_RESOLVE_HOST:
		return tool_set_err(err, errlen, -EHOSTUNREACH, "cannot resolve host %s: %s",
				    c->where, why);
	case CURLE_COULDNT_RESOLVE_PROXY:
		return tool_set_err(err, errlen, -EHOSTUNREACH,
				    "cannot resolve the proxy (the *_proxy environment variables) "
				    "for %s: %s", c->where, why);
	case CURLE_COULDNT_CONNECT:
		if (!os_errno)	/* not the socket's: a proxy's tunnel refused, say */
			return tool_set_err(err, errlen, -ECONNREFUSED, "cannot connect to %s: %s",
					    c->where, why);
		/* libcurl's words name what it connected to: a proxy, when
		 * they do not name the server */
		return tool_set_err(err, errlen, -(int)os_errno, "cannot connect to %s: %s%s%s%s%s",
				    c->where, strerror((int)os_errno),
				    os_errno == ECONNREFUSED ?
					    " (is the server running and listening on that port?)" :
					    "", proxied ? " (through a proxy of the environment: " : "",
				    proxied ? why : "", proxied ? ")" : "");
	case CURLE_OPERATION_TIMEDOUT:
		if (!x->connected)
			return tool_set_err(err, errlen, -ETIMEDOUT,
					    "cannot connect to %s: no answer within %d ms", c->where,
					    c->timeout_ms);
		return tool_set_err(err, errlen, -ETIMEDOUT, "%s did not answer within %d ms",
				    c->where, c->timeout_ms);
	case CURLE_PEER_FAILED_VERIFICATION:
		return tool_set_err(err, errlen, -EKEYREJECTED,
				    "%s/: the server's certificate is not trusted: %s (trusted: %s%s; "
				    "--cacert FILE names the CA that signed it)", c->origin, why,
				    c->tls.cacert[0] || ca_env ? "the CAs in " : "the system's CA store",
				    c->tls.cacert[0] ? c->tls.cacert : ca_env ? ca_env : "");
	case CURLE_SSL_CACERT_BADFILE:
		return tool_set_err(err, errlen, -ENOENT, "%s/: cannot read the CA file: %s",
				    c->origin, why);
	case CURLE_SSL_CERTPROBLEM:
		return tool_set_err(err, errlen, -EINVAL,
				    "%s/: cannot use the client certificate %s: %s", c->origin,
				    c->tls.cert, why);
	case CURLE_SSL_CONNECT_ERROR:
		return tool_set_err(err, errlen, -EPROTO, "%s/: TLS failed: %s%s", c->origin, why,
				    strstr(why, "wrong version number") ?
					    " (is it an https port?)" : "");
	case CURLE_GOT_NOTHING:
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_PARTIAL_FILE:
		/* libcurl's words add nothing to "Empty reply from server"; a
		 * TLS server that wants a client certificate (TLS 1.3) hangs
		 * up once it has read the request */
		return tool_set_err(err, errlen, -ECONNRESET, "%s closed the connection %s%s%s%s%s",
				    c->where, x->answered ? "in the middle of its answer" :
				    "before answering", cc == CURLE_GOT_NOTHING ? "" : " (",
				    cc == CURLE_GOT_NOTHING ? "" : why,
				    cc == CURLE_GOT_NOTHING ? "" : ")",
				    c->https && !c->tls.cert[0] && !x->answered ?
					    "; a server that wants a client certificate does so: "
					    "--cert FILE" : "");
	case CURLE_WEIRD_SERVER_REPLY:
	case CURLE_UNSUPPORTED_PROTOCOL:
		return tool_set_err(err, errlen, -EBADMSG,
				    "%s sent a malformed HTTP response (is it an HTTP port?): %s",
				    c->where, why);
	case CURLE_OUT_OF_MEMORY:
		return tool_set_err(err, errlen, -ENOMEM, "%s", strerror(ENOMEM));
	case CURLE_WRITE_ERROR:
		if (x->oom)
			return tool_set_err(err, errlen, -ENOMEM, "%s", strerror(ENOMEM));
		break;
	default:
		break;
	}
	return tool_set_err(err, errlen, -EIO, "request to %s failed: %s", c->where, why);
}

int http_conn_request(struct http_conn *c, const struct http_request *rq,
		      struct http_response *r, char *err, size_t errlen)
{
	struct http_exchange x = { .r = r };
	struct bytebuf url = { 0 };
	struct curl_slist *headers = NULL;
	CURLcode cc = CURLE_OK;
	long status = 0;
	int rc;

	r->status = 0;
	r->body.len = 0;
	c->curl_error[0] = '\0';
	if ((rc = http_handles(c, &x)))
		return tool_set_err(err, errlen, rc, "cannot set up a request to %s: %s", c->where,
				    strerror(-rc));
	rc = http_header_list(rq, c->encoding == HTTP_BODY_GZIP && rq->body_len &&
			      strcmp(rq->method, "GET"), &headers);
	if (!rc)
		rc = http_setup_request(c, rq, &url, headers);
	if (rc) {
		tool_set_err(err, errlen, rc, "cannot set up a request to %s: %s", c->where,
			     strerror(-rc));
		goto out;
	}
	rc = http_run(c, &x, &cc);
	if (rc == -ETIMEDOUT) {
		tool_set_err(err, errlen, rc, "%s did not answer within %d ms", c->where,
			     c->timeout_ms);
	} else if (rc) {
		tool_set_err(err, errlen, rc, "request to %s failed: %s", c->where, strerror(-rc));
	} else if (cc) {
		rc = http_explain(c, cc, &x, err, errlen);
	} else if (bb_append(&r->body, "", 1)) {
		rc = tool_set_err(err, errlen, -ENOMEM, "%s", strerror(ENOMEM));
	} else {
		r->body.len--;
		curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &status);
		r->status = (int)status;
	}
out:
	/* libcurl keeps the pointers until the next request sets its own */
	curl_easy_setopt(c->easy, CURLOPT_HTTPHEADER, NULL);
	curl_slist_free_all(headers);
	bb_free(&url);
	if (c->packed.cap > (4u << 20))
		bb_free(&c->packed);
	return rc;
}
