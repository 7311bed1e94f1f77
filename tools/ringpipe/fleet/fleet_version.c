// SPDX-License-Identifier: MIT
/*
 * The fleet schema's version on a server, and version 1's migration
 * (fleet_version.h).
 *
 * The migration, on ClickHouse 18.16: a stack id is in the sorting key of
 * stacks, which an ALTER cannot update, so its rows are inserted again
 * under the new id and the old ones deleted; events is updated in place.
 * The old-to-new map goes in the statements as literal arrays
 * (transform()), MIGRATE_CHUNK stacks a statement: each statement stays
 * within the server's max_query_size (256 KiB) and, on a cluster, a
 * ZooKeeper node (1 MB), at the cost of one pass over events' stack_id
 * column per chunk.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fleet/fleet_version.h"
#include "wire/rowbinary.h"
#include "common/tool_util.h"

#define MIGRATE_CHUNK 2048
#define MUTATION_POLL_NS 200000000L

int fleet_layout_read(struct ch_client *c, const char *db, struct fleet_layout *l, char *err,
		      size_t errlen)
{
	struct bytebuf q = { 0 }, out = { 0 };
	char *line, *save = NULL, answer[64];
	bool view = false, any = false;
	size_t i, n;
	int rc;

	memset(l, 0, sizeof(*l));
	bb_printf(&q, "SELECT name FROM system.tables WHERE database = ");
	ch_sql_quote(&q, db);
	bb_printf(&q, " FORMAT TabSeparated");
	bb_append(&q, "", 1);
	rc = q.oom ? -ENOMEM : ch_exec(c, (const char *)q.p, NULL, 0, &out, err, errlen);
	for (line = rc || !out.p ? NULL : strtok_r((char *)out.p, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		view |= !strcmp(line, FLEET_VERSION_VIEW);
		for (i = 0; i < FLEET_NTABLES; i++) {
			n = strlen(fleet_tables[i].name);
			if (strncmp(line, fleet_tables[i].name, n))
				continue;
			if (!strcmp(line + n, FLEET_LOCAL_SUFFIX))
				l->cluster = true;
			else if (line[n])
				continue;
			l->has[i] = true;
			any = true;
		}
	}
	bb_free(&q);
	bb_free(&out);
	if (rc || !view) {
		l->version = any ? 1 : 0;
		return rc;
	}
	bb_printf(&q, "SELECT version FROM `%s`.`" FLEET_VERSION_VIEW "`", db);
	bb_append(&q, "", 1);
	rc = q.oom ? -ENOMEM : ch_query_line(c, (const char *)q.p, answer, sizeof(answer), err,
					     errlen);
	bb_free(&q);
	if (rc)
		return rc;
	l->version = (unsigned)strtoul(answer, &line, 10);
	if (!l->version || *line)
		return tool_set_err(err, errlen, -EBADMSG, "database %s: its %s says '%s', not a "
				    "fleet schema version", db, FLEET_VERSION_VIEW, answer);
	return 0;
}

static int newer_than(const struct fleet_layout *l, const char *db, const char *who, char *err,
		 size_t errlen)
{
	return tool_set_err(err, errlen, -EPROTONOSUPPORT, "database %s holds fleet schema "
			    "version %u, newer than %s (%d): use the ringpipe that made it, or a "
			    "newer one", db, l->version, who, FLEET_SCHEMA_VERSION);
}

int fleet_version_readable(const struct fleet_layout *l, const char *db, char *err,
			   size_t errlen)
{
	if (l->version <= FLEET_SCHEMA_VERSION)
		return 0;
	return newer_than(l, db, "this ringpipe reads", err, errlen);
}

int fleet_version_writable(const struct fleet_layout *l, const char *db, char *err,
			   size_t errlen)
{
	if (l->version == FLEET_SCHEMA_VERSION)
		return 0;
	if (!l->version)
		return tool_set_err(err, errlen, -EPROTONOSUPPORT, "database %s has no fleet "
				    "tables: create them with 'ringpipe fleet init'", db);
	if (l->version == 1)
		return tool_set_err(err, errlen, -EPROTONOSUPPORT, "database %s holds fleet "
				    "schema version 1, whose stack ids this agent does not write "
				    "(their hash had a wrong offset basis): stop the agents of "
				    "version 1 and run 'ringpipe fleet init', which migrates it to "
				    "version %d", db, FLEET_SCHEMA_VERSION);
	return newer_than(l, db, "this agent writes", err, errlen);
}

/* ---- the migration ----------------------------------------------------- */

struct stack_map {
	uint64_t *old_ids, *new_ids;
	size_t n, cap;
};

static int map_add(struct stack_map *m, uint64_t old_id, uint64_t new_id)
{
	if (m->n == m->cap) {
		size_t cap = m->cap ? m->cap * 2 : 1024;
		uint64_t *o = realloc(m->old_ids, cap * sizeof(*o)), *n;

		if (!o)
			return -ENOMEM;
		m->old_ids = o;
		n = realloc(m->new_ids, cap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		m->new_ids = n;
		m->cap = cap;
	}
	m->old_ids[m->n] = old_id;
	m->new_ids[m->n++] = new_id;
	return 0;
}

/* Every distinct stack of db's stacks table, its version-2 id into m */
static int map_stacks(struct ch_client *c, const char *db, struct stack_map *m,
		      struct fleet_migration *t, char *err, size_t errlen)
{
	struct bytebuf q = { 0 }, out = { 0 };
	struct rb_cursor cur;
	uint64_t *frames = NULL, old_id, new_id, n, i;
	size_t cap = 0;
	int rc;

	/* frames are a function of the id: any row's are the stack's */
	bb_printf(&q, "SELECT stack_id, any(frames) FROM `%s`.`stacks` GROUP BY stack_id "
		  "FORMAT RowBinary", db);
	bb_append(&q, "", 1);
	rc = q.oom ? -ENOMEM : ch_exec(c, (const char *)q.p, NULL, 0, &out, err, errlen);
	bb_free(&q);
	cur = (struct rb_cursor){ out.p, out.p + (rc ? 0 : out.len), false };
	while (!rc && cur.p < cur.end) {
		old_id = rb_get_fixed(&cur, 8);
		n = rb_get_count(&cur);
		if (n > (uint64_t)(cur.end - cur.p) / 8) {
			cur.bad = true;
			break;
		}
		if (n > cap) {
			uint64_t *f = realloc(frames, n * sizeof(*f));

			if (!f) {
				rc = tool_set_err(err, errlen, -ENOMEM, "%s", strerror(ENOMEM));
				break;
			}
			frames = f;
			cap = n;
		}
		for (i = 0; i < n; i++)
			frames[i] = rb_get_fixed(&cur, 8);
		if (fleet_stack_id_upgrade(old_id, frames, (uint32_t)n, &new_id)) {
			t->foreign++;
			continue;
		}
		if (map_add(m, old_id, new_id))
			rc = tool_set_err(err, errlen, -ENOMEM, "%s", strerror(ENOMEM));
		t->stack_ids++;
	}
	if (!rc && cur.bad)
		rc = tool_set_err(err, errlen, -EBADMSG, "the stacks of database %s came back "
				  "cut short", db);
	free(frames);
	bb_free(&out);
	return rc;
}

/* "a, b, c" of ids[0..n) */
static void id_list(struct bytebuf *b, const uint64_t *ids, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		bb_printf(b, "%s%" PRIu64, i ? ", " : "", ids[i]);
}

/* stack_id mapped from olds to news, other ids as they are */
static void mapped_id(struct bytebuf *b, const struct stack_map *m, size_t at, size_t n)
{
	bb_printf(b, "transform(stack_id, CAST([");
	id_list(b, m->old_ids + at, n);
	bb_printf(b, "] AS Array(UInt64)), CAST([");
	id_list(b, m->new_ids + at, n);
	bb_printf(b, "] AS Array(UInt64)), stack_id)");
}

static void where_old(struct bytebuf *b, const struct stack_map *m, size_t at, size_t n)
{
	bb_printf(b, " WHERE stack_id IN (");
	id_list(b, m->old_ids + at, n);
	bb_printf(b, ")");
}

/* "ALTER TABLE db.name" of one server's table, on a cluster on every server */
static void alter_table(struct bytebuf *b, const struct fleet_ddl_opts *o,
			const struct fleet_layout *l, enum fleet_table_id t)
{
	bb_printf(b, "ALTER TABLE `%s`.`%s%s`", o->database, fleet_tables[t].name,
		  l->cluster ? FLEET_LOCAL_SUFFIX : "");
	if (l->cluster)
		bb_printf(b, " ON CLUSTER `%s`", o->cluster);
}

/* The statement in sql (emptied after), counted in t */
static int run_statement(struct ch_client *c, struct bytebuf *sql, struct fleet_migration *t,
			 char *err, size_t errlen)
{
	int rc;

	bb_append(sql, "", 1);
	rc = sql->oom ? tool_set_err(err, errlen, -ENOMEM, "%s", strerror(ENOMEM)) :
			ch_exec(c, (const char *)sql->p, NULL, 0, NULL, err, errlen);
	sql->len = 0;
	t->statements += !rc;
	return rc;
}

/* The stacks m[at..at+n) under their new ids: rows again, events, old rows out */
static int migrate_chunk(struct ch_client *c, const struct fleet_ddl_opts *o,
			 const struct fleet_layout *l, const struct stack_map *m, size_t at,
			 size_t n, struct fleet_migration *t, char *err, size_t errlen)
{
	const struct fleet_table *st = &fleet_tables[FLEET_STACKS];
	struct bytebuf sql = { 0 };
	size_t i;
	int rc;

	/* through the Distributed table on a cluster: synchronously (the
	 * client's settings), so the rows are on their shards before the old
	 * ones go */
	bb_printf(&sql, "INSERT INTO `%s`.`%s` (", o->database, st->name);
	for (i = 0; i < st->ncols; i++)
		bb_printf(&sql, "%s`%s`", i ? ", " : "", st->cols[i].name);
	bb_printf(&sql, ") SELECT ");
	for (i = 0; i < st->ncols; i++) {
		bb_printf(&sql, "%s", i ? ", " : "");
		if (i == FS_STACK_ID)
			mapped_id(&sql, m, at, n);
		else
			bb_printf(&sql, "`%s`", st->cols[i].name);
	}
	bb_printf(&sql, " FROM `%s`.`%s`", o->database, st->name);
	where_old(&sql, m, at, n);
	rc = run_statement(c, &sql, t, err, errlen);
	if (!rc && l->has[FLEET_EVENTS]) {
		alter_table(&sql, o, l, FLEET_EVENTS);
		bb_printf(&sql, " UPDATE stack_id = ");
		mapped_id(&sql, m, at, n);
		where_old(&sql, m, at, n);
		rc = run_statement(c, &sql, t, err, errlen);
	}
	if (!rc) {
		alter_table(&sql, o, l, FLEET_STACKS);
		bb_printf(&sql, " DELETE");
		where_old(&sql, m, at, n);
		rc = run_statement(c, &sql, t, err, errlen);
	}
	bb_free(&sql);
	return rc;
}

/* Until the server c talks to has done every mutation of db */
static int mutations_wait(struct ch_client *c, const char *db, FILE *notes, char *err,
			  size_t errlen)
{
	struct bytebuf q = { 0 };
	char line[64], *parts;
	bool said = false;
	int rc;

	bb_printf(&q, "SELECT count(), sum(parts_to_do) FROM system.mutations WHERE database = ");
	ch_sql_quote(&q, db);
	bb_printf(&q, " AND NOT is_done");
	bb_append(&q, "", 1);
	if (q.oom)
		return tool_set_err(err, errlen, -ENOMEM, "%s", strerror(ENOMEM));
	while (!(rc = ch_query_line(c, (const char *)q.p, line, sizeof(line), err, errlen)) &&
	       strtoull(line, &parts, 10)) {
		if (!said && notes)
			fprintf(notes, "ringpipe fleet: init: waiting for the server to rewrite "
				"the stack ids: %llu mutations, %llu parts to do\n",
				strtoull(line, NULL, 10), strtoull(parts, NULL, 10));
		said = true;
		nanosleep(&(struct timespec){ 0, MUTATION_POLL_NS }, NULL);
	}
	bb_free(&q);
	return rc;
}

int fleet_migrate(struct ch_client *c, const struct fleet_ddl_opts *o,
		  const struct fleet_layout *l, FILE *notes, struct fleet_migration *m, char *err,
		  size_t errlen)
{
	struct stack_map map = { 0 };
	size_t at, used = strlen(c->target.settings);
	int rc = 0;

	memset(m, 0, sizeof(*m));
	if (l->cluster && !o->cluster)
		return tool_set_err(err, errlen, -EINVAL, "database %s holds a cluster's tables "
				    "(%s%s under %s): give --cluster NAME to migrate them on every "
				    "server", o->database, fleet_tables[FLEET_STACKS].name,
				    FLEET_LOCAL_SUFFIX, fleet_tables[FLEET_STACKS].name);
	if (!l->has[FLEET_STACKS])
		return 0;	/* no stack was named: nothing to migrate */
	if (l->cluster)
		snprintf(c->target.settings + used, sizeof(c->target.settings) - used,
			 "%sinsert_distributed_sync=1", used ? "&" : "");
	rc = map_stacks(c, o->database, &map, m, err, errlen);
	for (at = 0; !rc && at < map.n; at += MIGRATE_CHUNK)
		rc = migrate_chunk(c, o, l, &map, at,
				   map.n - at < MIGRATE_CHUNK ? map.n - at : MIGRATE_CHUNK, m, err,
				   errlen);
	if (!rc && map.n)
		rc = mutations_wait(c, o->database, notes, err, errlen);
	c->target.settings[used] = 0;
	free(map.old_ids);
	free(map.new_ids);
	return rc;
}
