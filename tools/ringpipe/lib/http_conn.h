/* SPDX-License-Identifier: MIT */
/*
 * A small HTTP/1.1 client over one keep-alive TCP connection: what the fleet
 * commands and the agent's ClickHouse egress speak. One request at a time
 * (no pipelining); requests carry a Content-Length body; responses may have
 * a Content-Length, a chunked body, or run to the connection's end.
 *
 * A server closes a keep-alive connection that stayed idle too long
 * (ClickHouse after 3 s by default), and that is only seen when the next
 * request finds it closed. A request on a reused connection that fails
 * before any byte of the answer arrived is therefore sent once more on a new
 * connection: the server most likely closed it idle and never read that
 * request. Most likely is not surely, so a request that must not run twice
 * says so (no_resend) and gets the error instead.
 */
#ifndef RINGPIPE_HTTP_CONN_H
#define RINGPIPE_HTTP_CONN_H

#include <stdbool.h>
#include <stddef.h>

#include "bytebuf.h"

struct http_conn {
	char host[256];
	char port[8];
	int timeout_ms;		/* for the connect, and for every wait for the peer */
	int fd;			/* -1 while not connected */
	bool reused;		/* it carried a whole response: the server may close it idle */
	struct bytebuf in;	/* bytes received and not yet parsed, from in_pos */
	size_t in_pos;
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

/* Sets up c for host:port (nothing is connected until the first request).
 * 0, or -EINVAL when host or port do not fit. */
int http_conn_init(struct http_conn *c, const char *host, const char *port, int timeout_ms);

/*
 * Sends rq and reads the whole response into r (whose body the caller
 * frees with http_response_free(), also after a failure). 0 when a response
 * was read, whatever its status; otherwise a negative errno with what
 * failed, and with what, in err: -ECONNREFUSED, -ETIMEDOUT, -EBADMSG (not
 * HTTP), -ECONNRESET, -ENOMEM, ...
 */
int http_conn_request(struct http_conn *c, const struct http_request *rq,
		      struct http_response *r, char *err, size_t errlen);

/* Closes the connection (the next request opens a new one); c stays set up. */
void http_conn_close(struct http_conn *c);
/* Closes and frees what c holds; accepts any c that http_conn_init() saw,
 * also one it refused. */
void http_conn_free(struct http_conn *c);

void http_response_free(struct http_response *r);

/* A URL's host[:port] or [v6]:port, from s up to end, into host_out and
 * port_out (default_port without one; both zeroed by the caller). 0, or
 * -EINVAL with why in err. */
int http_parse_authority(const char *s, const char *end, const char *default_port,
			 char host_out[256], char port_out[8], char *err, size_t errlen);

#endif /* RINGPIPE_HTTP_CONN_H */
