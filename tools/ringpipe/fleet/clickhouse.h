/* SPDX-License-Identifier: MIT */
/*
 * A ClickHouse client over its HTTP interface (http_conn.h): where the
 * server is and who we are from a URL such as
 * http://127.0.0.1:8123/?database=ringpipe&user=U or https://HOST:8443/...
 * (plus options and a password file), queries whose answer comes back as
 * the body, and inserts whose rows are the body. The user and password
 * travel as X-ClickHouse-User and X-ClickHouse-Key headers, never in the
 * URL the server may log; over https, encrypted.
 */
#ifndef RINGPIPE_CLICKHOUSE_H
#define RINGPIPE_CLICKHOUSE_H

#include <stdbool.h>
#include <stddef.h>

#include "util/bytebuf.h"
#include "wire/http_conn.h"

#define CH_DEFAULT_PORT "8123"
#define CH_DEFAULT_HTTPS_PORT "8443"	/* config.xml's https_port, as packaged */
#define CH_DEFAULT_DATABASE "ringpipe"

struct ch_target {
	bool https;
	char host[256];		/* an IPv6 address without its [] */
	char port[8];
	char database[64];	/* CH_DEFAULT_DATABASE when the URL names none */
	char user[128];		/* "" : the server's default user */
	char password[256];
	char settings[1024];	/* the URL's other parameters ("k=v&..."), passed on */
	struct http_tls tls;	/* --cacert, --cert, --key: set after parsing */
	enum http_body_encoding encoding;	/* --compress: request bodies */
};

/* Parses url (http_url_parse()) into t (zeroed first). 0, or -EINVAL with
 * why in err. */
int ch_target_parse(struct ch_target *t, const char *url, char *err, size_t errlen);

/* The password from the first line of path. 0, or -errno with why in err. */
int ch_target_read_password(struct ch_target *t, const char *path, char *err, size_t errlen);

struct ch_client {
	struct ch_target target;
	struct http_conn conn;
	bool use_database;	/* queries name target.database as their default */
};

/* 0, or -EINVAL (the host or port do not fit). */
int ch_client_init(struct ch_client *c, const struct ch_target *t, int timeout_ms);
void ch_client_free(struct ch_client *c);

/*
 * Runs sql; the answer's body into out (NUL-terminated, may be NULL).
 * data: a body for the statement (the rows of an INSERT ... FORMAT F), or
 * NULL. 0, or a negative errno with what failed in err: the connection's
 * failure, or the server's own message ("Code: 62, e.displayText() = ...")
 * with -EACCES for an authentication failure and -EREMOTEIO for others.
 */
int ch_exec(struct ch_client *c, const char *sql, const void *data, size_t data_len,
	    struct bytebuf *out, char *err, size_t errlen);

/* ch_exec() without a body, the answer's first line (without the newline) in
 * line: for one-value queries such as SELECT version(). */
int ch_query_line(struct ch_client *c, const char *sql, char *line, size_t len, char *err,
		  size_t errlen);

/* Appends s as a quoted SQL string literal ('...', with ' and \ escaped). */
void ch_sql_quote(struct bytebuf *sql, const char *s);

#endif /* RINGPIPE_CLICKHOUSE_H */
