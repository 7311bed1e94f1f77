// SPDX-License-Identifier: MIT
/*
 * fleet top (fleet_top.h). Each table is one or two grouped queries whose
 * answers (TabSeparated) are folded here: rows of processes outside a
 * container get the container the agent named for their pid, GC events
 * are paired per process (or thread) in time order, and the results are
 * sorted and printed with their columns aligned.
 */
#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/bytebuf.h"
#include "fleet/fleet_schema.h"
#include "fleet/fleet_top.h"
#include "util/hmap.h"
#include "trace/profile.h"
#include "common/tool_util.h"

#define TOP_MAX_COLS 8
#define TOP_CONTAINER_CHARS 12	/* a container id as `docker ps` shortens it */
#define TOP_FUNCTION_CHARS 100

struct top_ctx {
	struct ch_client *c;
	const struct fleet_top_opts *o;
	enum fleet_dialect dialect;
	const char *db;
	struct bytebuf where;	/* " WHERE time >= ... AND host = ..." */
	struct prof_strtab strs;	/* hosts, containers, providers */
	struct hmap pid_container;	/* host index << 32 | pid -> container index */
	void *acc;		/* what the query at hand's rows go into */
	uint64_t samples;	/* CPU samples with a stack, for the shares */
	char *err;
	size_t errlen;
};

int fleet_top_what(const char *s, unsigned *what)
{
	if (!strcmp(s, "events"))
		*what = FLEET_TOP_EVENTS;
	else if (!strcmp(s, "gc"))
		*what = FLEET_TOP_GC;
	else if (!strcmp(s, "functions"))
		*what = FLEET_TOP_FUNCTIONS;
	else
		return -EINVAL;
	return 0;
}

/* ---- answers ------------------------------------------------------------- */

/* Undoes TabSeparated's escapes of one column, in place */
static void tsv_unescape(char *s)
{
	static const char from[] = "btnfr0", to[] = "\b\t\n\f\r";
	char *o = s;

	for (; *s; s++) {
		const char *k;

		if (*s != '\\' || !s[1]) {
			*o++ = *s;
			continue;
		}
		s++;
		k = strchr(from, *s);
		if (k && *s == '0')
			continue;	/* a NUL byte: left out of a C string */
		*o++ = k ? to[k - from] : *s;
	}
	*o = 0;
}

typedef int (*top_row_fn)(struct top_ctx *t, char **col);

/* Runs sql (FORMAT TabSeparated) and calls row() with each line's ncols
 * columns. 0, or a negative errno with why in t->err. */
static int top_query(struct top_ctx *t, struct bytebuf *sql, size_t ncols, top_row_fn row)
{
	struct bytebuf out = { 0 };
	char *line, *save = NULL;
	int rc;

	bb_printf(sql, " FORMAT TabSeparated");
	bb_append(sql, "", 1);
	rc = sql->oom ? tool_set_err(t->err, t->errlen, -ENOMEM, "%s", strerror(ENOMEM)) :
	     ch_exec(t->c, (const char *)sql->p, NULL, 0, &out, t->err, t->errlen);
	for (line = rc || !out.p ? NULL : strtok_r((char *)out.p, "\n", &save); line && !rc;
	     line = strtok_r(NULL, "\n", &save)) {
		char *col[TOP_MAX_COLS], *p = line;
		size_t n = 0;

		while (n < ncols) {
			col[n++] = p;
			p = strchr(p, '\t');
			if (!p)
				break;
			*p++ = 0;
		}
		if (n != ncols || p)
			rc = tool_set_err(t->err, t->errlen, -EBADMSG, "unexpected answer (%zu "
					  "columns wanted): %.100s", ncols, line);
		for (size_t i = 0; !rc && i < n; i++)
			tsv_unescape(col[i]);
		if (!rc)
			rc = row(t, col);
	}
	bb_free(&out);
	sql->len = 0;
	return rc;
}

static int64_t top_str(struct top_ctx *t, const char *s)
{
	int64_t i = prof_strtab_get(&t->strs, s);

	if (i < 0)
		tool_set_err(t->err, t->errlen, -ENOMEM, "%s", strerror(ENOMEM));
	return i;
}

/* Where each pid outside a container lives, from the agent's Process
 * events (the last one of a pid wins: a pid reused later is the newer
 * process) */
static int pid_row(struct top_ctx *t, char **col)
{
	int64_t h = top_str(t, col[0]), cid = top_str(t, col[2]);

	if (h < 0 || cid < 0)
		return -ENOMEM;
	return hmap_put(&t->pid_container, (uint64_t)h << 32 | strtoul(col[1], NULL, 10),
			(uint64_t)cid);
}

static void field_of(struct top_ctx *t, struct bytebuf *sql, const char *name)
{
	if (t->dialect == FLEET_LEGACY)
		bb_printf(sql, "fields.value[indexOf(fields.name, '%s')]", name);
	else
		bb_printf(sql, "fields['%s']", name);
}

/* A row's time in nanoseconds: legacy rows keep them beside the seconds */
static void time_ns_of(struct top_ctx *t, struct bytebuf *sql)
{
	if (t->dialect == FLEET_LEGACY)
		bb_printf(sql, "toUInt64(time) * 1000000000 + time_ns");
	else
		bb_printf(sql, "toUnixTimestamp64Nano(time)");
}

/* (a pid named twice within a second, say before and after its exec,
 * is told apart by the nanoseconds) */
static int load_pid_containers(struct top_ctx *t, struct bytebuf *sql)
{
	/* the event is the agent's; the process it names is its Pid field */
	bb_printf(sql, "SELECT host, toUInt32OrZero(");
	field_of(t, sql, "Pid");
	bb_printf(sql, ") AS process, argMax(");
	field_of(t, sql, "ContainerId");
	bb_printf(sql, ", ");
	time_ns_of(t, sql);
	bb_printf(sql, ") AS cid FROM `%s`.`events` WHERE provider = 'Ringpipe-Agent' AND "
		  "event_name = 'Process'", t->db);
	if (t->o->host) {
		bb_printf(sql, " AND host = ");
		ch_sql_quote(sql, t->o->host);
	}
	bb_printf(sql, " GROUP BY host, process HAVING cid != ''");
	return top_query(t, sql, 3, pid_row);
}

/* The container of a row: its own, else its pid's (-1: out of memory) */
static int64_t container_of(struct top_ctx *t, int64_t host, const char *container,
			    const char *pid)
{
	uint64_t v;

	if (!container[0] &&
	    hmap_get(&t->pid_container, (uint64_t)host << 32 | strtoul(pid, NULL, 10), &v))
		return (int64_t)v;
	return top_str(t, container);
}

/* ---- the printed table ----------------------------------------------------- */

struct top_table {
	size_t ncols;
	const char *head[TOP_MAX_COLS];
	bool right[TOP_MAX_COLS];	/* numbers: aligned right */
	char **cells;			/* row-major, ncols per row */
	size_t ncells, cap;
	bool oom;
};

static void cell(struct top_table *tb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void cell(struct top_table *tb, const char *fmt, ...)
{
	va_list ap;
	char *s = NULL;

	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		s = NULL;
	va_end(ap);
	if (!s || array_grow((void **)&tb->cells, &tb->cap, tb->ncells, sizeof(*tb->cells), 64)) {
		free(s);
		tb->oom = true;
		return;
	}
	tb->cells[tb->ncells++] = s;
}

/* n with a comma between thousands: "1,234,567" */
static const char *thousands(uint64_t n, char buf[32])
{
	char digits[24];
	int len = snprintf(digits, sizeof(digits), "%" PRIu64, n), i, o = 0;

	for (i = 0; i < len; i++) {
		if (i && (len - i) % 3 == 0)
			buf[o++] = ',';
		buf[o++] = digits[i];
	}
	buf[o] = 0;
	return buf;
}

static void cell_count(struct top_table *tb, uint64_t n)
{
	char buf[32];

	cell(tb, "%s", thousands(n, buf));
}

static void cell_share(struct top_table *tb, uint64_t n, uint64_t total)
{
	cell(tb, "%.1f%%", total ? 100.0 * (double)n / (double)total : 0.0);
}

static void cell_ms(struct top_table *tb, uint64_t ns)
{
	char buf[32];

	/* whole milliseconds with their thousands, then three decimals */
	cell(tb, "%s.%03" PRIu64, thousands(ns / 1000000, buf), ns / 1000 % 1000);
}

static void cell_container(struct top_table *tb, const char *id)
{
	cell(tb, "%.*s", TOP_CONTAINER_CHARS, id[0] ? id : "-");
}

static int table_print(struct top_table *tb, FILE *out, char *err, size_t errlen)
{
	size_t w[TOP_MAX_COLS], i, j, rows = tb->ncells / tb->ncols;

	if (tb->oom)
		return tool_set_err(err, errlen, -ENOMEM, "%s", strerror(ENOMEM));
	for (j = 0; j < tb->ncols; j++)
		w[j] = strlen(tb->head[j]);
	for (i = 0; i < tb->ncells; i++)
		if (strlen(tb->cells[i]) > w[i % tb->ncols])
			w[i % tb->ncols] = strlen(tb->cells[i]);
	for (i = 0; i <= rows; i++) {
		for (j = 0; j < tb->ncols; j++) {
			const char *s = i ? tb->cells[(i - 1) * tb->ncols + j] : tb->head[j];
			bool last = j + 1 == tb->ncols;

			/* the last column is not padded: no trailing blanks */
			fprintf(out, "%s%*s", j ? "  " : "",
				tb->right[j] ? (int)w[j] : last ? 0 : -(int)w[j], s);
		}
		fputc('\n', out);
	}
	if (!rows)
		fprintf(out, "(none)\n");
	return 0;
}

static void table_free(struct top_table *tb)
{
	size_t i;

	for (i = 0; i < tb->ncells; i++)
		free(tb->cells[i]);
	free(tb->cells);
}

/* ---- events per container and provider ------------------------------------ */

struct event_group {
	int64_t host, container, provider;
	uint64_t n;
};

struct event_groups {
	struct event_group *v;
	size_t n, cap;
	struct hmap index;	/* hash of the three names -> index in v */
	uint64_t total;
};

static int event_row(struct top_ctx *t, char **col)
{
	struct event_groups *g = t->acc;
	int64_t h = top_str(t, col[0]), c = h < 0 ? -1 : container_of(t, h, col[1], col[2]);
	int64_t p = top_str(t, col[3]);
	uint64_t n = strtoull(col[4], NULL, 10), key, i;

	if (h < 0 || c < 0 || p < 0)
		return -ENOMEM;
	g->total += n;
	key = hmap_hash((uint64_t)h ^ hmap_hash((uint64_t)c ^ hmap_hash((uint64_t)p)));
	/* a hash shared by two groups: the next key is tried */
	for (; hmap_get(&g->index, key, &i); key++)
		if (g->v[i].host == h && g->v[i].container == c && g->v[i].provider == p) {
			g->v[i].n += n;
			return 0;
		}
	if (array_grow((void **)&g->v, &g->cap, g->n, sizeof(*g->v), 64) ||
	    hmap_put(&g->index, key, g->n))
		return tool_set_err(t->err, t->errlen, -ENOMEM, "%s", strerror(ENOMEM));
	g->v[g->n++] = (struct event_group){ h, c, p, n };
	return 0;
}

static int by_events(const void *x, const void *y)
{
	const struct event_group *a = x, *b = y;

	if (a->n != b->n)
		return a->n < b->n ? 1 : -1;
	if (a->host != b->host)
		return a->host < b->host ? -1 : 1;
	if (a->container != b->container)
		return a->container < b->container ? -1 : 1;
	return (a->provider > b->provider) - (a->provider < b->provider);
}

static int top_events(struct top_ctx *t, struct bytebuf *sql, FILE *out)
{
	struct event_groups g = { 0 };
	struct top_table tb = {
		.ncols = 5, .head = { "HOST", "CONTAINER", "PROVIDER", "EVENTS", "SHARE" },
		.right = { false, false, false, true, true },
	};
	char buf[32];
	size_t i;
	int rc;

	bb_printf(sql, "SELECT host, container_id, pid, provider, count() FROM `%s`.`events`%s "
		  "GROUP BY host, container_id, pid, provider", t->db, (const char *)t->where.p);
	t->acc = &g;
	rc = top_query(t, sql, 5, event_row);
	if (!rc) {
		if (g.n)
			qsort(g.v, g.n, sizeof(*g.v), by_events);
		for (i = 0; i < g.n && i < t->o->limit; i++) {
			cell(&tb, "%s", t->strs.s[g.v[i].host]);
			cell_container(&tb, t->strs.s[g.v[i].container]);
			cell(&tb, "%s", t->strs.s[g.v[i].provider]);
			cell_count(&tb, g.v[i].n);
			cell_share(&tb, g.v[i].n, g.total);
		}
		fprintf(out, "events per container and provider: %s events in %zu groups%s\n",
			thousands(g.total, buf), g.n, g.n > t->o->limit ? ", the largest shown" : "");
		rc = table_print(&tb, out, t->err, t->errlen);
	}
	table_free(&tb);
	free(g.v);
	hmap_free(&g.index);
	return rc;
}

/* ---- GC pauses per container ------------------------------------------------ */

#define CLR_PROVIDER "Microsoft-Windows-DotNETRuntime"
enum {
	CLR_GC_START = 1, CLR_GC_STOP = 2, CLR_RESTART_EE_STOP = 3, CLR_SUSPEND_EE_START = 9,
	USDT_GC_START = 1, USDT_GC_STOP = 2,	/* Ringpipe-Usdt-CPython and -HotSpot */
};

static const char *const gc_runtimes[] = { "clr", "cpython", "hotspot" };

struct gc_event {
	int64_t host, container;
	uint32_t pid, tid, event_id;
	uint8_t runtime;	/* index in gc_runtimes */
	uint64_t ns;
};

struct gc_group {
	int64_t host, container;
	uint8_t runtime;
	uint64_t *pauses;	/* ns */
	size_t n, cap;
	uint64_t total;
};

struct gc_set {
	struct gc_event *ev;
	size_t nev, capev;
	struct gc_group *g;
	size_t ng, capg;
};

static int gc_row(struct top_ctx *t, char **col)
{
	struct gc_set *s = t->acc;
	int64_t h = top_str(t, col[0]), c = h < 0 ? -1 : container_of(t, h, col[1], col[2]);
	struct gc_event *e;

	if (h < 0 || c < 0 ||
	    array_grow((void **)&s->ev, &s->capev, s->nev, sizeof(*s->ev), 256))
		return tool_set_err(t->err, t->errlen, -ENOMEM, "%s", strerror(ENOMEM));
	e = &s->ev[s->nev++];
	e->host = h;
	e->container = c;
	e->pid = (uint32_t)strtoul(col[2], NULL, 10);
	e->tid = (uint32_t)strtoul(col[3], NULL, 10);
	e->runtime = !strcmp(col[4], CLR_PROVIDER) ? 0 : strstr(col[4], "CPython") ? 1 : 2;
	e->event_id = (uint32_t)strtoul(col[5], NULL, 10);
	e->ns = strtoull(col[6], NULL, 10);
	return 0;
}

static int gc_pause(struct gc_set *s, const struct gc_event *e, uint64_t ns)
{
	struct gc_group *g = NULL;
	size_t i;

	for (i = 0; i < s->ng && !g; i++)
		if (s->g[i].host == e->host && s->g[i].container == e->container &&
		    s->g[i].runtime == e->runtime)
			g = &s->g[i];
	if (!g) {
		if (array_grow((void **)&s->g, &s->capg, s->ng, sizeof(*s->g), 16))
			return -ENOMEM;
		g = &s->g[s->ng++];
		*g = (struct gc_group){ .host = e->host, .container = e->container,
					.runtime = e->runtime };
	}
	if (array_grow((void **)&g->pauses, &g->cap, g->n, sizeof(*g->pauses), 64))
		return -ENOMEM;
	g->pauses[g->n++] = ns;
	g->total += ns;
	return 0;
}

/*
 * The pauses of one process, ev[0..n) in time order. .NET: from each
 * SuspendEEStart to the RestartEEStop after it, the world stopped; a
 * process that writes no suspensions (the GC keyword without them) from
 * each GC/Start to its GC/Stop. The probes: from GC/Start to GC/Stop on
 * the same thread. A start without its end (cut by the time range) is
 * not a pause.
 */
static int gc_process(struct gc_set *s, const struct gc_event *ev, size_t n)
{
	struct hmap open = { 0 };	/* runtime << 32 | tid (0 for .NET) -> start ns + 1 */
	bool suspends = false;
	size_t i;
	int rc = 0;

	for (i = 0; i < n; i++)
		suspends |= !ev[i].runtime && (ev[i].event_id == CLR_SUSPEND_EE_START ||
					      ev[i].event_id == CLR_RESTART_EE_STOP);
	for (i = 0; i < n && !rc; i++) {
		const struct gc_event *e = &ev[i];
		uint32_t start = e->runtime ? USDT_GC_START : suspends ? CLR_SUSPEND_EE_START :
				 CLR_GC_START;
		uint32_t stop = e->runtime ? USDT_GC_STOP : suspends ? CLR_RESTART_EE_STOP :
				CLR_GC_STOP;
		uint64_t key = (uint64_t)e->runtime << 32 | (e->runtime ? e->tid : 0), t0;

		if (e->event_id == start)
			rc = hmap_put(&open, key, e->ns + 1);
		else if (e->event_id == stop && hmap_get(&open, key, &t0) && t0) {
			rc = gc_pause(s, e, e->ns + 1 - t0);
			if (!rc)
				rc = hmap_put(&open, key, 0);
		}
	}
	hmap_free(&open);
	return rc;
}

static int cmp_u64(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;

	return (a > b) - (a < b);
}

static int by_total_pause(const void *x, const void *y)
{
	const struct gc_group *a = x, *b = y;

	if (a->total != b->total)
		return a->total < b->total ? 1 : -1;
	return (a->container > b->container) - (a->container < b->container);
}

/* The nearest-rank percentile p of sorted v[0..n), n > 0 */
static uint64_t percentile(const uint64_t *v, size_t n, unsigned p)
{
	size_t rank = (n * p + 99) / 100;

	return v[rank ? rank - 1 : 0];
}

static int top_gc(struct top_ctx *t, struct bytebuf *sql, FILE *out)
{
	struct gc_set s = { 0 };
	struct top_table tb = {
		.ncols = 8,
		.head = { "HOST", "CONTAINER", "RUNTIME", "GCS", "TOTAL_MS", "P50_MS", "P99_MS",
			  "MAX_MS" },
		.right = { false, false, false, true, true, true, true, true },
	};
	uint64_t pauses = 0;
	size_t i, j;
	char buf[32];
	int rc;

	bb_printf(sql, "SELECT host, container_id, pid, tid, provider, event_id, ");
	time_ns_of(t, sql);
	bb_printf(sql, " AS ns FROM `%s`.`events`%s AND ((provider = '" CLR_PROVIDER "' AND "
		  "event_id IN (1, 2, 3, 9)) OR (provider IN ('Ringpipe-Usdt-CPython', "
		  "'Ringpipe-Usdt-HotSpot') AND event_id IN (1, 2))) ORDER BY host, pid, ns", t->db,
		  (const char *)t->where.p);
	t->acc = &s;
	rc = top_query(t, sql, 7, gc_row);
	for (i = 0; !rc && i < s.nev; i = j) {
		for (j = i; j < s.nev && s.ev[j].host == s.ev[i].host && s.ev[j].pid == s.ev[i].pid;
		     j++)
			;
		if (gc_process(&s, &s.ev[i], j - i))
			rc = tool_set_err(t->err, t->errlen, -ENOMEM, "%s", strerror(ENOMEM));
	}
	if (!rc) {
		if (s.ng)
			qsort(s.g, s.ng, sizeof(*s.g), by_total_pause);
		for (i = 0; i < s.ng; i++) {
			struct gc_group *g = &s.g[i];

			pauses += g->n;
			if (i >= t->o->limit)
				continue;
			qsort(g->pauses, g->n, sizeof(*g->pauses), cmp_u64);
			cell(&tb, "%s", t->strs.s[g->host]);
			cell_container(&tb, t->strs.s[g->container]);
			cell(&tb, "%s", gc_runtimes[g->runtime]);
			cell_count(&tb, g->n);
			cell_ms(&tb, g->total);
			cell_ms(&tb, percentile(g->pauses, g->n, 50));
			cell_ms(&tb, percentile(g->pauses, g->n, 99));
			cell_ms(&tb, g->pauses[g->n - 1]);
		}
		fprintf(out, "GC pauses per container: %s pauses in %zu groups%s\n",
			thousands(pauses, buf), s.ng, s.ng > t->o->limit ? ", the longest shown" :
			"");
		rc = table_print(&tb, out, t->err, t->errlen);
	}
	table_free(&tb);
	for (i = 0; i < s.ng; i++)
		free(s.g[i].pauses);
	free(s.g);
	free(s.ev);
	return rc;
}

/* ---- the hottest functions --------------------------------------------------- */

#define SAMPLES_WHERE " AND stack_id != 0 AND provider = 'Ringpipe-Sampler' AND event_id = 1"

static int samples_row(struct top_ctx *t, char **col)
{
	t->samples = strtoull(col[0], NULL, 10);
	return 0;
}

static int function_row(struct top_ctx *t, char **col)
{
	struct top_table *tb = t->acc;
	uint64_t self = strtoull(col[1], NULL, 10), total = strtoull(col[2], NULL, 10);

	cell(tb, "%.*s", TOP_FUNCTION_CHARS, col[0][0] ? col[0] : "[unknown]");
	cell_count(tb, self);
	cell_share(tb, self, t->samples);
	cell_count(tb, total);
	cell_share(tb, total, t->samples);
	return 0;
}

/*
 * Samples per stack, joined with the stacks' symbols (of the rows of a
 * stack not merged yet, the one that names most frames: a batch cut
 * before the file described a module sends the same stack unnamed), then
 * each stack's
 * distinct symbols (ARRAY JOIN, a symbol kept at its first position):
 * position 1 is the leaf, where the sample's time is spent (self); any
 * position counts once per sample (total, inclusive).
 */
static int top_functions(struct top_ctx *t, struct bytebuf *sql, FILE *out)
{
	struct top_table tb = {
		.ncols = 5, .head = { "FUNCTION", "SELF", "SELF%", "TOTAL", "TOTAL%" },
		.right = { false, true, true, true, true },
	};
	char buf[32];
	int rc;

	t->samples = 0;
	bb_printf(sql, "SELECT count() FROM `%s`.`events`%s" SAMPLES_WHERE, t->db,
		  (const char *)t->where.p);
	rc = top_query(t, sql, 1, samples_row);
	bb_printf(sql, "SELECT sym, sumIf(n, pos = 1) AS self, sum(n) AS total FROM (SELECT n, "
		  "symbols FROM (SELECT host, boot_id, pid, stack_id, count() AS n FROM "
		  "`%s`.`events`%s" SAMPLES_WHERE " GROUP BY host, boot_id, pid, stack_id) ANY "
		  "INNER JOIN (SELECT host, boot_id, pid, stack_id, argMax(symbols, arrayCount(s -> s "
		  "!= '', symbols)) AS symbols FROM "
		  "`%s`.`stacks` GROUP BY host, boot_id, pid, stack_id) USING (host, boot_id, pid, "
		  "stack_id)) ARRAY JOIN symbols AS sym, arrayEnumerate(symbols) AS pos WHERE pos = "
		  "1 OR (sym != '' AND indexOf(symbols, sym) = pos) GROUP BY sym ORDER BY self "
		  "DESC, total DESC, sym LIMIT %" PRIu64, t->db, (const char *)t->where.p, t->db,
		  t->o->limit);
	t->acc = &tb;
	if (!rc)
		rc = top_query(t, sql, 3, function_row);
	if (!rc) {
		fprintf(out, "hottest functions: %s CPU samples, by leaf frame (SELF) and anywhere "
			"on the stack (TOTAL)\n", thousands(t->samples, buf));
		rc = table_print(&tb, out, t->err, t->errlen);
	}
	table_free(&tb);
	return rc;
}

/* ---- all of them -------------------------------------------------------------- */

int fleet_top(struct ch_client *c, const struct fleet_top_opts *o, FILE *out, char *err,
	      size_t errlen)
{
	struct top_ctx t = { .c = c, .o = o, .db = c->target.database, .err = err,
			     .errlen = errlen };
	struct bytebuf sql = { 0 };
	char version[64];
	int rc = ch_query_line(c, "SELECT version()", version, sizeof(version), err, errlen);
	bool first = true;

	if (!rc && fleet_dialect_of(version, &t.dialect))
		rc = tool_set_err(err, errlen, -EBADMSG, "the server's version '%s' is not a "
				  "version number", version);
	/* the time range as seconds since the epoch: compares with a DateTime
	 * and a DateTime64 alike */
	bb_printf(&t.where, " WHERE time >= toDateTime(%" PRIu64 ")",
		  o->since_s && o->since_s < (uint64_t)time(NULL) ? (uint64_t)time(NULL) - o->since_s
								  : 0);
	if (o->host) {
		bb_printf(&t.where, " AND host = ");
		ch_sql_quote(&t.where, o->host);
	}
	bb_append(&t.where, "", 1);
	if (!rc && t.where.oom)
		rc = tool_set_err(err, errlen, -ENOMEM, "%s", strerror(ENOMEM));
	if (!rc && o->what & (FLEET_TOP_EVENTS | FLEET_TOP_GC))
		rc = load_pid_containers(&t, &sql);
	if (!rc && o->what & FLEET_TOP_EVENTS) {
		rc = top_events(&t, &sql, out);
		first = false;
	}
	if (!rc && o->what & FLEET_TOP_GC) {
		fputs(first ? "" : "\n", out);
		rc = top_gc(&t, &sql, out);
		first = false;
	}
	if (!rc && o->what & FLEET_TOP_FUNCTIONS) {
		fputs(first ? "" : "\n", out);
		rc = top_functions(&t, &sql, out);
	}
	bb_free(&sql);
	bb_free(&t.where);
	prof_strtab_free(&t.strs);
	hmap_free(&t.pid_container);
	return rc;
}
