/* SPDX-License-Identifier: MIT */
/*
 * The tools' HTTP client: what the fleet commands, the agent's ClickHouse
 * egress and its OTLP egress speak, over libcurl. One request at a time on
 * one keep-alive connection (an easy handle, and a multi handle whose
 * connection cache keeps that one connection between requests), HTTP/1.1,
 * plain or TLS, through the environment's proxy, and the one parser of the
 * tools' URLs (http_url_parse(), over libcurl's URL API).
 *
 * A server closes a keep-alive connection that stayed idle too long
 * (ClickHouse after 3 s by default), and that is only seen when the next
 * request finds it closed. libcurl sends a request on a reused connection
 * that failed before any byte of the answer arrived once more on a new
 * connection: the server most likely closed it idle and never read that
 * request. Most likely is not surely, so a request that must not run twice
 * says so (no_resend), and goes on a connection of its own (see
 * http_conn_request()) so that libcurl never has a reason to send it again.
 */
#ifndef RINGPIPE_HTTP_CONN_H
#define RINGPIPE_HTTP_CONN_H

#include <stdbool.h>
#include <stddef.h>

#include "util/bytebuf.h"

#define HTTP_FILE_MAX 1024	/* a certificate's or key's path */

/* Where a server is: what http_url_parse() takes out of a URL */
struct http_url {
	bool https;
	char host[256];		/* a name or an address; an IPv6 one without its [] */
	char port[8];
	char path[1024];	/* "/" at least, percent-encoded as the URL had it */
	char query[2048];	/* after the '?' (encoded as given); "" without one */
};

/*
 * Parses an http:// or https:// URL (libcurl's URL API: IPv6 literals in
 * [], percent-encoding kept as given, the fragment ignored) into u, with
 * the default port of its scheme when it names none. A user or password
 * in the URL is refused: credentials travel in headers. 0, or -EINVAL with
 * why in err.
 */
int http_url_parse(struct http_url *u, const char *url, const char *http_port,
		   const char *https_port, char *err, size_t errlen);

/* What an https connection trusts, and who it is */
struct http_tls {
	/* the CAs the server's certificate must chain to, a PEM file, and
	 * only those; "": $SSL_CERT_FILE when set, else the system's store */
	char cacert[HTTP_FILE_MAX];
	char cert[HTTP_FILE_MAX];	/* a client certificate, PEM; "": none */
	char key[HTTP_FILE_MAX];	/* its private key, PEM; "": in cert */
};

/* Sets t from the options --cacert, --cert and --key (each may be NULL).
 * 0, or -EINVAL with why in err (a path too long, --key without --cert). */
int http_tls_set(struct http_tls *t, const char *cacert, const char *cert, const char *key,
		 char *err, size_t errlen);

/* How request bodies go: as they are, or gzip-compressed with
 * Content-Encoding: gzip (ClickHouse decompresses those, 18.16 included;
 * OTLP/HTTP receivers must) */
enum http_body_encoding {
	HTTP_BODY_IDENTITY,
	HTTP_BODY_GZIP,
};

/* "gzip" or "none" (--compress): 0, or -EINVAL */
int http_body_encoding_parse(const char *name, enum http_body_encoding *out);

struct http_conn {
	char host[256];		/* an IPv6 address without its [] */
	char port[8];
	char origin[300];	/* "http://HOST:PORT", "https://[V6]:PORT": the requests' base */
	char where[270];	/* HOST:PORT or [V6]:PORT, for messages */
	bool https;
	struct http_tls tls;
	enum http_body_encoding encoding;
	int timeout_ms;		/* for the connect, and for every wait for the peer */
	/* the socket of the connection kept open after the last request, -1
	 * when none: libcurl's, to look at (poll for a hang-up), not to use */
	int fd;
	void *easy, *multi;	/* CURL *, CURLM *; NULL until the first request */
	struct bytebuf packed;	/* a gzip-compressed body */
	char curl_error[256];	/* CURL_ERROR_SIZE: libcurl's words on the last failure */
};

struct http_request {
	const char *method;	/* "GET", "POST" */
	const char *target;	/* the path and query, percent-encoded already */
	const char *headers;	/* more header lines, each ending in "\r\n"; or NULL */
	const void *body;
	size_t body_len;
	/* never sent a second time, not even on a reused connection that
	 * failed before any answer: a server that executed it and then died
	 * before answering looks the same, and an INSERT sent again would be
	 * applied twice (the caller looks before it retries) */
	bool no_resend;
};

struct http_response {
	int status;		/* 200, 404, ... */
	struct bytebuf body;	/* NUL-terminated (not counted in len) */
};

/*
 * Sets up c for host:port, over TLS when https, trusting and presenting
 * what tls says (NULL: the defaults), with timeout_ms for the connect and
 * for every wait for the peer; request bodies go as encoding says. Nothing
 * is connected until the first request. 0, or -EINVAL when host or port do
 * not fit.
 */
int http_conn_init(struct http_conn *c, bool https, const char *host, const char *port,
		   const struct http_tls *tls, int timeout_ms);

/*
 * Sends rq and reads the whole response into r (whose body the caller
 * frees with http_response_free(), also after a failure). 0 when a response
 * was read, whatever its status; otherwise a negative errno with what
 * failed, and with what, in err: -ECONNREFUSED, -ETIMEDOUT, -EHOSTUNREACH
 * (no such host), -EBADMSG (not HTTP), -ECONNRESET, -EKEYREJECTED (the
 * server's certificate is not trusted), -EPROTO (TLS failed otherwise),
 * -ENOMEM, ...
 */
int http_conn_request(struct http_conn *c, const struct http_request *rq,
		      struct http_response *r, char *err, size_t errlen);

/* Closes the connection (the next request opens a new one); c stays set up. */
void http_conn_close(struct http_conn *c);
/* Closes and frees what c holds; accepts any c that http_conn_init() saw,
 * also one it refused. */
void http_conn_free(struct http_conn *c);

void http_response_free(struct http_response *r);

#endif /* RINGPIPE_HTTP_CONN_H */
