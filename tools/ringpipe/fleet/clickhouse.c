// SPDX-License-Identifier: MIT
/*
 * The ClickHouse HTTP client of clickhouse.h.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "fleet/clickhouse.h"
#include "common/tool_util.h"

static int ch_hex(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c = (char)tolower((unsigned char)c);
	return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Percent-decodes n bytes of s into out (NUL-terminated): 0, or -EINVAL
 * when it is malformed, holds a NUL or does not fit. */
static int ch_unescape(const char *s, size_t n, char *out, size_t len)
{
	size_t i, o = 0;

	for (i = 0; i < n; i++) {
		int c = (unsigned char)s[i];

		if (c == '%') {
			int hi = i + 2 < n ? ch_hex(s[i + 1]) : -1;
			int lo = hi >= 0 ? ch_hex(s[i + 2]) : -1;

			if (lo < 0)
				return -EINVAL;
			c = hi << 4 | lo;
			i += 2;
		} else if (c == '+') {
			c = ' ';
		}
		if (!c || o + 1 >= len)
			return -EINVAL;
		out[o++] = (char)c;
	}
	out[o] = '\0';
	return 0;
}

static void ch_escape(struct bytebuf *b, const char *s)
{
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~')
			bb_append_u8(b, c);
		else
			bb_printf(b, "%%%02X", c);
	}
}

/* One k=v of the query string: ours are kept, the server's settings passed on */
static int ch_parse_param(struct ch_target *t, const char *p, size_t n, char *err,
			  size_t errlen)
{
	const char *eq = memchr(p, '=', n);
	size_t klen = eq ? (size_t)(eq - p) : n, vlen = eq ? n - klen - 1 : 0;
	struct { const char *key; char *dst; size_t len; } ours[] = {
		{ "database", t->database, sizeof(t->database) },
		{ "user", t->user, sizeof(t->user) },
		{ "password", t->password, sizeof(t->password) },
	};
	size_t i, used = strlen(t->settings);

	for (i = 0; i < sizeof(ours) / sizeof(ours[0]); i++) {
		if (klen != strlen(ours[i].key) || memcmp(p, ours[i].key, klen))
			continue;
		if (ch_unescape(eq ? eq + 1 : p + n, vlen, ours[i].dst, ours[i].len))
			return tool_set_err(err, errlen, -EINVAL,
					    "the value of '%s' is malformed or too long",
					    ours[i].key);
		return 0;
	}
	if (used + n + 2 > sizeof(t->settings))
		return tool_set_err(err, errlen, -EINVAL, "too many URL parameters");
	snprintf(t->settings + used, sizeof(t->settings) - used, "%s%.*s", used ? "&" : "",
		 (int)n, p);
	return 0;
}

static int ch_parse_query(struct ch_target *t, const char *q, char *err, size_t errlen)
{
	while (*q) {
		size_t n = strcspn(q, "&");
		int rc = n ? ch_parse_param(t, q, n, err, errlen) : 0;

		if (rc)
			return rc;
		q += n + (q[n] == '&');
	}
	return 0;
}

int ch_target_parse(struct ch_target *t, const char *url, char *err, size_t errlen)
{
	struct http_url u;
	char why[256];
	int rc;

	memset(t, 0, sizeof(*t));
	if ((rc = http_url_parse(&u, url, CH_DEFAULT_PORT, CH_DEFAULT_HTTPS_PORT, why,
				 sizeof(why))))
		return tool_set_err(err, errlen, rc,
				    "'%s': %s (ClickHouse's HTTP interface: http://HOST[:8123]/ "
				    "or https://HOST[:8443]/)", url, why);
	t->https = u.https;
	strcpy(t->host, u.host);
	strcpy(t->port, u.port);
	if (strcmp(u.path, "/"))
		return tool_set_err(err, errlen, -EINVAL,
				    "'%s': the path must be '/' (the database "
				    "goes in ?database=NAME)",
				    url);
	if ((rc = ch_parse_query(t, u.query, why, sizeof(why))))
		return tool_set_err(err, errlen, rc, "'%s': %s", url, why);
	if (!t->database[0])
		strcpy(t->database, CH_DEFAULT_DATABASE);
	return 0;
}

int ch_target_read_password(struct ch_target *t, const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "r");
	char line[sizeof(t->password) + 2];
	size_t n;

	if (!f)
		return tool_set_err(err, errlen, -errno, "cannot read the password file %s: %s",
				    path, strerror(errno));
	if (!fgets(line, sizeof(line), f))
		line[0] = '\0';
	fclose(f);
	n = strcspn(line, "\r\n");
	if (n >= sizeof(t->password))
		return tool_set_err(err, errlen, -EINVAL,
				    "the password in %s is longer than %zu bytes", path,
				    sizeof(t->password) - 1);
	memcpy(t->password, line, n);
	t->password[n] = '\0';
	return 0;
}

int ch_client_init(struct ch_client *c, const struct ch_target *t, int timeout_ms)
{
	int rc;

	c->target = *t;
	c->use_database = true;
	rc = http_conn_init(&c->conn, t->https, t->host, t->port, &t->tls, timeout_ms);
	c->conn.encoding = t->encoding;
	return rc;
}

void ch_client_free(struct ch_client *c)
{
	http_conn_free(&c->conn);
}

/* "/?database=...&settings&query=..." (the statement goes in the URL when the
 * body is its data) */
static void ch_request_target(const struct ch_client *c, struct bytebuf *b, const char *sql,
			      bool sql_in_url)
{
	const char *sep = "";

	bb_printf(b, "/?");
	if (c->use_database) {
		bb_printf(b, "database=");
		ch_escape(b, c->target.database);
		sep = "&";
	}
	if (c->target.settings[0]) {
		bb_printf(b, "%s%s", sep, c->target.settings);
		sep = "&";
	}
	if (sql_in_url) {
		bb_printf(b, "%squery=", sep);
		ch_escape(b, sql);
	}
	bb_append(b, "", 1);
}

static void ch_auth_headers(const struct ch_target *t, struct bytebuf *b)
{
	if (t->user[0] || t->password[0])
		bb_printf(b, "X-ClickHouse-User: %s\r\nX-ClickHouse-Key: %s\r\n",
			  t->user[0] ? t->user : "default", t->password);
	bb_append(b, "", 1);
}

/* The server's answer to a failed statement, as an error */
static int ch_server_error(const struct ch_client *c, const struct http_response *r, char *err,
			   size_t errlen)
{
	const char *body = (const char *)r->body.p;
	int n = (int)r->body.len;
	bool auth = r->status == 401 || r->status == 403 || (body && strstr(body, "Code: 516,"));

	while (n && (body[n - 1] == '\n' || body[n - 1] == '\r'))
		n--;
	if (!n) {
		body = "(no text)";
		n = (int)strlen(body);
	}
	return tool_set_err(err, errlen, auth ? -EACCES : -EREMOTEIO,
			    "ClickHouse at %s answered HTTP %d: %.*s%s", c->conn.where,
			    r->status, n, body,
			    auth ? " (check the user name and the password)" : "");
}

int ch_exec(struct ch_client *c, const char *sql, const void *data, size_t data_len,
	    struct bytebuf *out, char *err, size_t errlen)
{
	struct bytebuf target = { 0 }, headers = { 0 };
	struct http_response r = { 0 };
	struct http_request rq = { .method = "POST" };
	int rc;

	/* a line break in a header value would start a header of its own */
	if (strpbrk(c->target.user, "\r\n") || strpbrk(c->target.password, "\r\n"))
		return tool_set_err(err, errlen, -EINVAL,
				    "the user name or password holds a line break");
	ch_request_target(c, &target, sql, data != NULL);
	ch_auth_headers(&c->target, &headers);
	rq.target = (const char *)target.p;
	rq.headers = (const char *)headers.p;
	rq.body = data ? data : sql;
	rq.body_len = data ? data_len : strlen(sql);
	/* rows sent twice are stored twice (plain MergeTree): the egress looks
	 * before it sends a batch again, so a failed insert must say it failed */
	rq.no_resend = data != NULL;
	if (target.oom || headers.oom)
		rc = tool_set_err(err, errlen, -ENOMEM, "%s", strerror(ENOMEM));
	else
		rc = http_conn_request(&c->conn, &rq, &r, err, errlen);
	if (!rc && r.status != 200)
		rc = ch_server_error(c, &r, err, errlen);
	if (!rc && out && bb_append(out, r.body.p, r.body.len + 1) == 0)
		out->len--;
	http_response_free(&r);
	bb_free(&target);
	bb_free(&headers);
	return rc;
}

int ch_query_line(struct ch_client *c, const char *sql, char *line, size_t len, char *err,
		  size_t errlen)
{
	struct bytebuf out = { 0 };
	int rc = ch_exec(c, sql, NULL, 0, &out, err, errlen);

	if (!rc)
		snprintf(line, len, "%.*s", (int)strcspn(out.p ? (char *)out.p : "", "\n"),
			 out.p ? (char *)out.p : "");
	bb_free(&out);
	return rc;
}

void ch_sql_quote(struct bytebuf *sql, const char *s)
{
	bb_append_u8(sql, '\'');
	for (; *s; s++) {
		if (*s == '\'' || *s == '\\')
			bb_append_u8(sql, '\\');
		bb_append_u8(sql, (uint8_t)*s);
	}
	bb_append_u8(sql, '\'');
}
