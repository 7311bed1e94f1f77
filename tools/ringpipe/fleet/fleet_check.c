// SPDX-License-Identifier: MIT
/*
 * fleet check (fleet_check.h). Three grouped queries, each one row per
 * batch: the manifest (how many manifest rows, and the rows it promises),
 * the events table's rows, and the losses table's rows and the events they
 * count. The groups are joined here by the batch's name, then each
 * (host, agent run, stream) is walked in sequence order. Stacks rows are
 * not counted per batch (a ReplacingMergeTree folds the same stack sent
 * by many batches): what is checked is that every stack an event names
 * has its row.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "util/bytebuf.h"
#include "fleet/clickhouse.h"
#include "fleet/fleet_check.h"
#include "common/fnv1a.h"
#include "util/hmap.h"
#include "common/tool_util.h"

struct check_batch {
	char *host;
	char run[37];
	uint32_t stream;
	uint64_t seq;
	uint64_t manifests, want_events, want_losses;
	uint64_t manifest_kinds;	/* distinct manifests among them */
	uint64_t events, loss_rows, lost;
};

struct check_set {
	struct check_batch *v;
	size_t n, cap;
	struct hmap index;	/* hash of the name -> index in v */
};

/* One grouped row: the batch's name and four numbers */
struct check_row {
	const char *host, *run;
	uint32_t stream;
	uint64_t seq, a, b, c, d;
};

static uint64_t name_hash(const struct check_row *r)
{
	uint64_t h = fnv1a64_str(fnv1a64_str(fnv1a64_start(), r->host), r->run);

	return hmap_hash(h ^ hmap_hash(((uint64_t)r->stream << 40) ^ r->seq));
}

static bool same_name(const struct check_batch *b, const struct check_row *r)
{
	return b->stream == r->stream && b->seq == r->seq && !strcmp(b->run, r->run) &&
	       !strcmp(b->host, r->host);
}

/* The batch r names, added when new; NULL when out of memory */
static struct check_batch *batch_of(struct check_set *s, const struct check_row *r)
{
	uint64_t h = name_hash(r), i;
	struct check_batch *b;

	/* a hash shared by two names: the next value of h is tried */
	for (; hmap_get(&s->index, h, &i); h++)
		if (same_name(&s->v[i], r))
			return &s->v[i];
	if (array_grow((void **)&s->v, &s->cap, s->n, sizeof(*s->v), 256) ||
	    hmap_put(&s->index, h, s->n))
		return NULL;
	b = &s->v[s->n];
	memset(b, 0, sizeof(*b));
	b->host = strdup(r->host);
	snprintf(b->run, sizeof(b->run), "%s", r->run);
	b->stream = r->stream;
	b->seq = r->seq;
	if (!b->host)
		return NULL;
	s->n++;
	return b;
}

static void set_free(struct check_set *s)
{
	size_t i;

	for (i = 0; i < s->n; i++)
		free(s->v[i].host);
	free(s->v);
	hmap_free(&s->index);
}

/* A TabSeparated line of eight columns into r (in place): 0 or -EBADMSG */
static int row_parse(char *line, struct check_row *r)
{
	char *col[8], *save = NULL;
	size_t n = 0;

	for (char *t = strtok_r(line, "\t", &save); t && n < 8; t = strtok_r(NULL, "\t", &save))
		col[n++] = t;
	if (n != 8)
		return -EBADMSG;
	r->host = col[0];
	r->run = col[1];
	r->stream = (uint32_t)strtoul(col[2], NULL, 10);
	r->seq = strtoull(col[3], NULL, 10);
	r->a = strtoull(col[4], NULL, 10);
	r->b = strtoull(col[5], NULL, 10);
	r->c = strtoull(col[6], NULL, 10);
	r->d = strtoull(col[7], NULL, 10);
	return 0;
}

enum check_source { FROM_MANIFEST, FROM_EVENTS, FROM_LOSSES };

static void take_row(struct check_batch *b, enum check_source src, const struct check_row *r)
{
	switch (src) {
	case FROM_MANIFEST:
		b->manifests = r->a;
		b->want_events = r->b;
		b->want_losses = r->c;
		b->manifest_kinds = r->d;
		break;
	case FROM_EVENTS:
		b->events = r->a;
		break;
	case FROM_LOSSES:
		b->loss_rows = r->a;
		b->lost = r->b;
		break;
	}
}

static int load(struct ch_client *c, struct check_set *s, enum check_source src, const char *host,
		char *err, size_t errlen)
{
	/* a batch's manifest row is a function of the batch (its counts
	 * and sizes), so copies of it are told from rows that disagree by
	 * those */
	static const char *const what[] = {
		[FROM_MANIFEST] = "seq, count(), max(events_rows), max(losses_rows), "
				  "uniqExact(events_rows, event_meta_rows, stacks_rows, "
				  "processes_rows, containers_rows, losses_rows, bytes) "
				  "FROM `%s`.`batches`",
		[FROM_EVENTS] = "batch_seq, count(), 0, 0, 0 FROM `%s`.`events`",
		[FROM_LOSSES] = "batch_seq, count(), sum(count), 0, 0 FROM `%s`.`losses`",
	};
	struct bytebuf q = { 0 }, out = { 0 };
	char *line, *save = NULL;
	int rc;

	bb_printf(&q, "SELECT host, toString(agent_run), stream, ");
	bb_printf(&q, what[src], c->target.database);
	if (host) {
		bb_printf(&q, " WHERE host = ");
		ch_sql_quote(&q, host);
	}
	bb_printf(&q, " GROUP BY host, agent_run, stream, %s FORMAT TabSeparated",
		  src == FROM_MANIFEST ? "seq" : "batch_seq");
	bb_append(&q, "", 1);
	rc = q.oom ? -ENOMEM : ch_exec(c, (const char *)q.p, NULL, 0, &out, err, errlen);
	for (line = rc || !out.p ? NULL : strtok_r((char *)out.p, "\n", &save); line && !rc;
	     line = strtok_r(NULL, "\n", &save)) {
		struct check_row r;
		struct check_batch *b;

		if (row_parse(line, &r))
			rc = tool_set_err(err, errlen, -EBADMSG, "unexpected answer: %.100s", line);
		else if (!(b = batch_of(s, &r)))
			rc = tool_set_err(err, errlen, -ENOMEM, "%s", strerror(ENOMEM));
		else
			take_row(b, src, &r);
	}
	bb_free(&q);
	bb_free(&out);
	return rc;
}

static int batch_order(const void *x, const void *y)
{
	const struct check_batch *a = x, *b = y;
	int d = strcmp(a->host, b->host);

	if (!d)
		d = strcmp(a->run, b->run);
	if (!d)
		d = a->stream < b->stream ? -1 : a->stream > b->stream;
	if (!d)
		d = a->seq < b->seq ? -1 : a->seq > b->seq;
	return d;
}

static bool same_stream(const struct check_batch *a, const struct check_batch *b)
{
	return a->stream == b->stream && !strcmp(a->run, b->run) && !strcmp(a->host, b->host);
}

static void problem(FILE *out, struct fleet_check_totals *t, const struct check_batch *b,
		    const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void problem(FILE *out, struct fleet_check_totals *t, const struct check_batch *b,
		    const char *fmt, ...)
{
	va_list ap;

	t->problems++;
	fprintf(out, "  problem: host %s, run %s, stream %u, batch %" PRIu64 ": ", b->host, b->run,
		b->stream, b->seq);
	va_start(ap, fmt);
	vfprintf(out, fmt, ap);
	va_end(ap);
	fputc('\n', out);
}

/* One batch against its manifest */
static void check_batch(FILE *out, struct fleet_check_totals *t, const struct check_batch *b)
{
	if (!b->manifests) {
		problem(out, t, b, "no manifest row, but %" PRIu64 " event and %" PRIu64
			" loss rows (a batch half sent, or still in flight)", b->events, b->loss_rows);
		return;
	}
	/* copies of one manifest row say the same once: a replicated
	 * table keeps a second copy when the rows of several batches went in
	 * one insert and one of them went again, alone, after a failure
	 * whose outcome was not known. Rows of the batch that arrived twice
	 * show in the counts below. */
	if (b->manifest_kinds > 1)
		problem(out, t, b, "%" PRIu64 " manifest rows, %" PRIu64 " of them different: "
			"two different batches under one name", b->manifests, b->manifest_kinds);
	if (b->events != b->want_events)
		problem(out, t, b, "%" PRIu64 " event rows, the manifest says %" PRIu64 " (%s)",
			b->events, b->want_events, b->events > b->want_events ? "duplicates" :
			"rows missing");
	if (b->loss_rows != b->want_losses)
		problem(out, t, b, "%" PRIu64 " loss rows, the manifest says %" PRIu64, b->loss_rows,
			b->want_losses);
}

/* A stream's batches from 1 without a gap; v[0..n) are its batches, in order */
static void check_stream(FILE *out, struct fleet_check_totals *t, const struct check_batch *v,
			 size_t n)
{
	uint64_t expect = 1;
	size_t i;

	t->streams++;
	for (i = 0; i < n; i++) {
		const struct check_batch *b = &v[i];

		if (b->seq > expect) {
			struct check_batch gap = *b;

			gap.seq = expect;
			problem(out, t, &gap, "missing%s%" PRIu64 " (no manifest, no rows)",
				b->seq - expect > 1 ? " up to batch " : "",
				b->seq - expect > 1 ? b->seq - 1 : 0);
		}
		expect = b->seq + 1;
		check_batch(out, t, b);
		t->batches += b->manifests ? 1 : 0;
		t->events += b->events;
		t->lost += b->lost;
	}
}

/* One line per host and agent run, then the problems found in it */
static void check_all(FILE *out, struct check_set *s, struct fleet_check_totals *t)
{
	size_t i = 0, j, k;

	fprintf(out, "%-20s %-36s %8s %8s %12s %10s %8s\n", "HOST", "AGENT_RUN", "STREAMS",
		"BATCHES", "EVENTS", "LOST", "PROBLEMS");
	while (i < s->n) {
		struct fleet_check_totals run = { 0 };
		FILE *mem;
		char *text = NULL;
		size_t len = 0;

		mem = open_memstream(&text, &len);
		for (j = i; j < s->n && !strcmp(s->v[j].host, s->v[i].host) &&
			    !strcmp(s->v[j].run, s->v[i].run); j = k) {
			for (k = j; k < s->n && same_stream(&s->v[k], &s->v[j]); k++)
				;
			check_stream(mem ? mem : out, &run, &s->v[j], k - j);
		}
		if (mem)
			fclose(mem);
		fprintf(out, "%-20s %-36s %8llu %8llu %12llu %10llu %8llu\n", s->v[i].host,
			s->v[i].run, run.streams, run.batches, run.events, run.lost, run.problems);
		if (text)
			fputs(text, out);
		free(text);
		t->runs++;
		t->streams += run.streams;
		t->batches += run.batches;
		t->events += run.events;
		t->lost += run.lost;
		t->problems += run.problems;
		i = j;
	}
}

/* Events, per host, whose stack_id has no row in stacks: a problem each
 * host (GLOBAL: on a Distributed table the set is built once, from all
 * shards) */
static int check_stacks(struct ch_client *c, const char *host, FILE *out,
			struct fleet_check_totals *t, char *err, size_t errlen)
{
	const char *db = c->target.database;
	struct bytebuf q = { 0 }, ans = { 0 };
	char *line, *save = NULL;
	int rc;

	bb_printf(&q, "SELECT host, count() FROM `%s`.`events` WHERE stack_id != 0 AND (host, "
		  "boot_id, pid, stack_id) GLOBAL NOT IN (SELECT host, boot_id, pid, stack_id FROM "
		  "`%s`.`stacks`%s", db, db, host ? " WHERE host = " : "");
	if (host)
		ch_sql_quote(&q, host);
	bb_printf(&q, ")%s", host ? " AND host = " : "");
	if (host)
		ch_sql_quote(&q, host);
	bb_printf(&q, " GROUP BY host ORDER BY host FORMAT TabSeparated");
	bb_append(&q, "", 1);
	rc = q.oom ? -ENOMEM : ch_exec(c, (const char *)q.p, NULL, 0, &ans, err, errlen);
	for (line = rc || !ans.p ? NULL : strtok_r((char *)ans.p, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		char *tab = strchr(line, '\t');

		if (!tab)
			continue;
		*tab = 0;
		t->problems++;
		fprintf(out, "  problem: host %s: %s events name a stack that has no stacks row\n",
			line, tab + 1);
	}
	bb_free(&q);
	bb_free(&ans);
	return rc;
}

int fleet_check(struct ch_client *c, const char *host, FILE *out, struct fleet_check_totals *t,
		char *err, size_t errlen)
{
	struct check_set s = { 0 };
	int rc = load(c, &s, FROM_MANIFEST, host, err, errlen);

	memset(t, 0, sizeof(*t));
	if (!rc)
		rc = load(c, &s, FROM_EVENTS, host, err, errlen);
	if (!rc)
		rc = load(c, &s, FROM_LOSSES, host, err, errlen);
	if (!rc) {
		if (s.n)
			qsort(s.v, s.n, sizeof(*s.v), batch_order);
		check_all(out, &s, t);
		rc = check_stacks(c, host, out, t, err, errlen);
	}
	set_free(&s);
	return rc;
}
