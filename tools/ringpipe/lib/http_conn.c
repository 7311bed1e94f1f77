// SPDX-License-Identifier: MIT
/*
 * The HTTP/1.1 client of http_conn.h. The socket is non-blocking and every
 * wait goes through poll() with the connection's timeout, so a peer that
 * stops answering costs at most that long per wait, never a hang.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "http_conn.h"
#include "tool_util.h"

/* A response whose status line and headers do not fit is not one we asked for */
#define HTTP_MAX_HEAD (64u << 10)
#define HTTP_READ_CHUNK (64u << 10)

int http_conn_init(struct http_conn *c, const char *host, const char *port, int timeout_ms)
{
	memset(c, 0, sizeof(*c));
	c->fd = -1;
	c->timeout_ms = timeout_ms > 0 ? timeout_ms : 30000;
	if (strlen(host) >= sizeof(c->host) || strlen(port) >= sizeof(c->port))
		return -EINVAL;
	strcpy(c->host, host);
	strcpy(c->port, port);
	return 0;
}

void http_conn_close(struct http_conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->reused = false;
	c->in.len = 0;
	c->in_pos = 0;
}

void http_conn_free(struct http_conn *c)
{
	http_conn_close(c);
	bb_free(&c->in);
}

void http_response_free(struct http_response *r)
{
	bb_free(&r->body);
}

/* Waits for events on fd: 0, or -ETIMEDOUT after the connection's timeout. */
static int http_wait(const struct http_conn *c, short events)
{
	struct pollfd p = { .fd = c->fd, .events = events };
	int n;

	do
		n = poll(&p, 1, c->timeout_ms);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	return n ? 0 : -ETIMEDOUT;
}

/* One address: a non-blocking connect, waited for. 0 or -errno. */
static int http_connect_addr(struct http_conn *c, const struct addrinfo *ai)
{
	int one = 1, soerr = 0, rc;
	socklen_t sl = sizeof(soerr);

	c->fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
		       ai->ai_protocol);
	if (c->fd < 0)
		return -errno;
	/* a request goes out as headers then body: no waiting for an ACK between them */
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(c->fd, ai->ai_addr, ai->ai_addrlen) == 0)
		return 0;
	if (errno != EINPROGRESS)
		rc = -errno;
	else if ((rc = http_wait(c, POLLOUT)) == 0 &&
		 getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr)
		rc = -soerr;
	if (rc)
		http_conn_close(c);
	return rc;
}

static int http_connect(struct http_conn *c, char *err, size_t errlen)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	struct addrinfo *res, *ai;
	int rc = getaddrinfo(c->host, c->port, &hints, &res);

	if (rc)
		return tool_set_err(err, errlen, -EHOSTUNREACH, "cannot resolve host '%s': %s",
				    c->host, gai_strerror(rc));
	rc = -EHOSTUNREACH;
	for (ai = res; ai && rc; ai = ai->ai_next)
		rc = http_connect_addr(c, ai);
	freeaddrinfo(res);
	if (rc == -ETIMEDOUT)
		return tool_set_err(err, errlen, rc,
				    "cannot connect to %s:%s: no answer within %d ms", c->host,
				    c->port, c->timeout_ms);
	if (rc)
		return tool_set_err(err, errlen, rc, "cannot connect to %s:%s: %s%s", c->host,
				    c->port, strerror(-rc),
				    rc == -ECONNREFUSED ?
					    " (is the server running and listening on that port?)" :
					    "");
	c->reused = false;
	return 0;
}

/* Sends the iovecs whole. 0 or -errno. */
static int http_send_all(struct http_conn *c, struct iovec *iov, int n)
{
	while (n) {
		struct msghdr m = { .msg_iov = iov, .msg_iovlen = (size_t)n };
		ssize_t w = sendmsg(c->fd, &m, MSG_NOSIGNAL);
		int rc;

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno != EAGAIN)
			return -errno;
		if (w < 0) {
			if ((rc = http_wait(c, POLLOUT)))
				return rc;
			continue;
		}
		while (n && (size_t)w >= iov->iov_len) {
			w -= (ssize_t)iov->iov_len;
			iov++;
			n--;
		}
		if (n) {
			iov->iov_base = (char *)iov->iov_base + w;
			iov->iov_len -= (size_t)w;
		}
	}
	return 0;
}

/* Receives more bytes into c->in: how many, 0 at the end of the stream, or -errno. */
static ssize_t http_recv_more(struct http_conn *c)
{
	for (;;) {
		ssize_t r;
		int rc;

		if (bb_reserve(&c->in, HTTP_READ_CHUNK))
			return -ENOMEM;
		r = recv(c->fd, c->in.p + c->in.len, c->in.cap - c->in.len, 0);
		if (r >= 0) {
			c->in.len += (size_t)r;
			return r;
		}
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN)
			return -errno;
		if ((rc = http_wait(c, POLLIN)))
			return rc;
	}
}

/* The unparsed bytes */
static const char *http_avail(const struct http_conn *c, size_t *n)
{
	*n = c->in.len - c->in_pos;
	return (const char *)c->in.p + c->in_pos;
}

/* Where the unparsed bytes start */
static const char *http_cur(const struct http_conn *c)
{
	return (const char *)c->in.p + c->in_pos;
}

/* Makes n unparsed bytes available: 0, -EPIPE when the peer closed first, or -errno. */
static int http_need(struct http_conn *c, size_t n)
{
	while (c->in.len - c->in_pos < n) {
		ssize_t r = http_recv_more(c);

		if (r < 0)
			return (int)r;
		if (!r)
			return -EPIPE;
	}
	return 0;
}

/*
 * Makes a line (up to CRLF) available: its length without the CRLF, or a
 * negative errno (-EBADMSG when none ends within max bytes).
 */
static long http_need_line(struct http_conn *c, size_t max)
{
	size_t scanned = 0;

	for (;;) {
		size_t n;
		const char *p = http_avail(c, &n);
		const char *lf = n > scanned ? memchr(p + scanned, '\n', n - scanned) : NULL;
		int rc;

		if (lf)
			return lf > p && lf[-1] == '\r' ? lf - p - 1 : lf - p;
		if (n > max)
			return -EBADMSG;
		scanned = n;
		if ((rc = http_need(c, n + 1)))
			return rc;
	}
}

/* Consumes a line of len bytes and its line end */
static void http_skip_line(struct http_conn *c, long len)
{
	c->in_pos += (size_t)len;
	if (c->in_pos < c->in.len && c->in.p[c->in_pos] == '\r')
		c->in_pos++;
	c->in_pos++;
}

struct http_head {
	int status;
	bool chunked, close, has_length;
	uint64_t length;
};

static bool http_header_is(const char *line, size_t len, const char *name, const char **value)
{
	size_t n = strlen(name);

	if (len <= n || strncasecmp(line, name, n) || line[n] != ':')
		return false;
	*value = line + n + 1;
	while (*value < line + len && (**value == ' ' || **value == '\t'))
		(*value)++;
	return true;
}

/* Does the header value (up to end) hold token, case-insensitively? */
static bool http_value_has(const char *v, const char *end, const char *token)
{
	size_t n = strlen(token);

	for (; v + n <= end; v++)
		if (!strncasecmp(v, token, n))
			return true;
	return false;
}

static int http_parse_header(struct http_head *h, const char *line, size_t len)
{
	const char *v, *end = line + len;
	char *stop;

	if (http_header_is(line, len, "Content-Length", &v)) {
		errno = 0;
		h->length = strtoull(v, &stop, 10);
		if (stop == v || errno || (stop < end && *stop != ' ' && *stop != '\t'))
			return -EBADMSG;
		h->has_length = true;
	} else if (http_header_is(line, len, "Transfer-Encoding", &v)) {
		h->chunked = http_value_has(v, end, "chunked");
	} else if (http_header_is(line, len, "Connection", &v)) {
		h->close = http_value_has(v, end, "close");
	}
	return 0;
}

static int http_parse_status(struct http_head *h, const char *line, size_t len)
{
	int minor;

	/* "HTTP/1.1 200 OK": a 1.0 server closes after each answer */
	if (len < 12 || memcmp(line, "HTTP/1.", 7) || line[8] != ' ' ||
	    line[9] < '1' || line[9] > '5' || line[10] < '0' || line[10] > '9' ||
	    line[11] < '0' || line[11] > '9' || (len > 12 && line[12] != ' '))
		return -EBADMSG;
	minor = line[7] - '0';
	h->status = (line[9] - '0') * 100 + (line[10] - '0') * 10 + (line[11] - '0');
	h->close = minor == 0;
	return 0;
}

/* Reads a status line and headers, skipping 1xx interim answers. */
static int http_read_head(struct http_conn *c, struct http_head *h)
{
	size_t start;
	long len;
	int rc;

	do {
		*h = (struct http_head){ 0 };
		start = c->in_pos;
		if ((len = http_need_line(c, HTTP_MAX_HEAD)) < 0)
			return (int)len;
		if ((rc = http_parse_status(h, http_cur(c), (size_t)len)))
			return rc;
		http_skip_line(c, len);
		while ((len = http_need_line(c, HTTP_MAX_HEAD)) > 0) {
			if (c->in_pos - start > HTTP_MAX_HEAD)
				return -EBADMSG;
			rc = http_parse_header(h, http_cur(c), (size_t)len);
			if (rc)
				return rc;
			http_skip_line(c, len);
		}
		if (len < 0)
			return (int)len;
		http_skip_line(c, 0);
	} while (h->status < 200);
	return 0;
}

/* Moves n available bytes to the body */
static int http_take(struct http_conn *c, struct bytebuf *body, size_t n)
{
	int rc = http_need(c, n);

	if (rc)
		return rc;
	if (bb_append(body, c->in.p + c->in_pos, n))
		return -ENOMEM;
	c->in_pos += n;
	return 0;
}

static int http_read_chunked(struct http_conn *c, struct bytebuf *body)
{
	for (;;) {
		long len = http_need_line(c, 1024);
		const char *p = http_cur(c);
		uint64_t size;
		char *stop;
		int rc;

		if (len < 0)
			return (int)len;
		/* a chunk size is hex, maybe followed by ";extension" */
		errno = 0;
		size = strtoull(p, &stop, 16);
		if (stop == p || errno || (stop < p + len && *stop != ';' && *stop != ' '))
			return -EBADMSG;
		http_skip_line(c, len);
		if (!size)
			break;
		if (size > SIZE_MAX / 2)
			return -EBADMSG;
		if ((rc = http_take(c, body, (size_t)size)))
			return rc;
		if ((len = http_need_line(c, 2)) != 0)
			return len < 0 ? (int)len : -EBADMSG;
		http_skip_line(c, 0);
	}
	/* trailers, up to the empty line */
	for (;;) {
		long len = http_need_line(c, HTTP_MAX_HEAD);

		if (len < 0)
			return (int)len;
		http_skip_line(c, len);
		if (!len)
			return 0;
	}
}

static int http_read_to_end(struct http_conn *c, struct bytebuf *body)
{
	ssize_t r;

	while ((r = http_recv_more(c)) > 0)
		;
	if (r < 0)
		return (int)r;
	return http_take(c, body, c->in.len - c->in_pos);
}

static int http_read_body(struct http_conn *c, const struct http_head *h, struct bytebuf *body)
{
	if (h->status == 204 || h->status == 304)
		return 0;
	if (h->chunked)
		return http_read_chunked(c, body);
	if (h->has_length)
		return h->length > SIZE_MAX / 2 ? -EBADMSG : http_take(c, body, (size_t)h->length);
	return http_read_to_end(c, body);
}

static int http_send_request(struct http_conn *c, const struct http_request *rq)
{
	struct bytebuf head = { 0 };
	struct iovec iov[2];
	int rc;

	bb_printf(&head, "%s %s HTTP/1.1\r\nHost: %s:%s\r\nContent-Length: %zu\r\n"
		  "Connection: keep-alive\r\n%s\r\n", rq->method, rq->target, c->host, c->port,
		  rq->body_len, rq->headers ? rq->headers : "");
	if (head.oom) {
		bb_free(&head);
		return -ENOMEM;
	}
	iov[0] = (struct iovec){ head.p, head.len };
	iov[1] = (struct iovec){ (void *)rq->body, rq->body_len };
	rc = http_send_all(c, iov, rq->body_len ? 2 : 1);
	bb_free(&head);
	return rc;
}

/* One exchange on the open connection. *answered: a byte of the response came. */
static int http_exchange(struct http_conn *c, const struct http_request *rq,
			 struct http_response *r, bool *answered)
{
	struct http_head h;
	int rc;

	c->in.len = c->in_pos = 0;
	*answered = false;
	if ((rc = http_send_request(c, rq)))
		return rc;
	rc = http_need(c, 1);
	if (rc)
		return rc;
	*answered = true;
	if ((rc = http_read_head(c, &h)) || (rc = http_read_body(c, &h, &r->body)))
		return rc;
	if (bb_append(&r->body, "", 1))
		return -ENOMEM;
	r->body.len--;
	r->status = h.status;
	if (h.close || (!h.has_length && !h.chunked))
		http_conn_close(c);
	else
		c->reused = true;
	return 0;
}

static int http_explain(const struct http_conn *c, int rc, bool answered, char *err,
			size_t errlen)
{
	if (rc == -ETIMEDOUT)
		return tool_set_err(err, errlen, rc, "%s:%s did not answer within %d ms", c->host,
				    c->port, c->timeout_ms);
	if (rc == -EBADMSG)
		return tool_set_err(err, errlen, rc,
				    "%s:%s sent a malformed HTTP response (is it an HTTP port?)",
				    c->host, c->port);
	if (rc == -EPIPE || rc == -ECONNRESET)
		return tool_set_err(err, errlen, -ECONNRESET, "%s:%s closed the connection %s",
				    c->host, c->port,
				    answered ? "in the middle of its answer" : "before answering");
	return tool_set_err(err, errlen, rc, "request to %s:%s failed: %s", c->host, c->port,
			    strerror(-rc));
}

int http_conn_request(struct http_conn *c, const struct http_request *rq,
		      struct http_response *r, char *err, size_t errlen)
{
	bool answered = false, was_reused = c->fd >= 0 && c->reused;
	int rc;

	r->status = 0;
	r->body.len = 0;
	if (c->fd < 0 && (rc = http_connect(c, err, errlen)))
		return rc;
	rc = http_exchange(c, rq, r, &answered);
	if (rc && !answered && was_reused && !rq->no_resend && rc != -ETIMEDOUT && rc != -ENOMEM) {
		/* closed while idle: the server never read this request */
		http_conn_close(c);
		r->body.len = 0;
		if ((rc = http_connect(c, err, errlen)))
			return rc;
		rc = http_exchange(c, rq, r, &answered);
	}
	if (rc) {
		http_conn_close(c);
		return http_explain(c, rc, answered, err, errlen);
	}
	return 0;
}

/* host[:port] or [v6]:port, up to end */
int http_parse_authority(const char *s, const char *end, const char *default_port,
			 char host_out[256], char port_out[8], char *err, size_t errlen)
{
	const char *host = s, *host_end, *colon;
	size_t port_len;

	if (*s == '[') {
		host = s + 1;
		host_end = memchr(host, ']', (size_t)(end - host));
		if (!host_end)
			return tool_set_err(err, errlen, -EINVAL,
					    "the IPv6 address has no closing ']'");
		colon = host_end + 1 < end && host_end[1] == ':' ? host_end + 1 : NULL;
	} else {
		colon = memchr(s, ':', (size_t)(end - s));
		host_end = colon ? colon : end;
	}
	if (host_end == host || (size_t)(host_end - host) >= 256)
		return tool_set_err(err, errlen, -EINVAL, "no host, or a host name too long");
	memcpy(host_out, host, (size_t)(host_end - host));
	port_len = colon ? (size_t)(end - colon - 1) : 0;
	if (!colon) {
		snprintf(port_out, 8, "%s", default_port);
		return 0;
	}
	if (port_len)
		memcpy(port_out, colon + 1, port_len < 8 ? port_len : 0);
	if (!port_len || port_len > 5 || strspn(port_out, "0123456789") < port_len ||
	    atoi(port_out) < 1 || atoi(port_out) > 65535)
		return tool_set_err(err, errlen, -EINVAL,
				    "the port must be a number from 1 to 65535");
	return 0;
}
