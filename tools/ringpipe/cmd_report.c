// SPDX-License-Identifier: MIT
/*
 * ringpipe report / ringpipe dump: read a nettrace file with ringpipe's reader.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/agent_report.h"
#include "cmds.h"
#include "util/hmap.h"
#include "nettrace_read.h"
#include "trace/profile.h"
#include "common/tool_opts.h"
#include "common/tool_util.h"
#include "util/utf.h"

static const char report_usage[] =
"usage: ringpipe report FILE [--json]\n"
"       ringpipe report DIR [--json]\n"
"\n"
"Reads a nettrace file (V4/V5 or V6) and prints its duration, events per\n"
"provider, per event and per thread, EventsLost (counted as TraceEvent counts\n"
"it), how many events carry stacks, and the events with the most payload bytes.\n"
"--json prints one JSON object: {\"events\":N,\"lost\":N,\"providers\":{...},...}.\n"
"A truncated or corrupt file is reported with the offset and what was expected\n"
"there, after a summary of what could be read; the exit status is then 1.\n"
"\n"
"DIR is a 'ringpipe agent' output directory: every process trace in it is read\n"
"and listed (pid, comm, container, pod, source, how it ended, events,\n"
"EventsLost, file), then every container (pod, runtime, QoS, processes,\n"
"events, EventsLost) and the totals. Tags come from the agent's traces\n"
"(ringpipe-agent_*.nettrace, all of them when the agent restarted); a trace\n"
"the agent did not name is listed untagged. --json prints one JSON object:\n"
"{\"processes\":[...],\"containers\":[...],\"totals\":{...}}. A file that cannot\n"
"be read is listed with its error, and the exit status is then 1.\n";

struct tcount {
	int64_t pid, tid;
	uint64_t n;
};

static int cmp_meta_count(const void *a, const void *b)
{
	const struct nt_meta *x = *(const struct nt_meta *const *)a;
	const struct nt_meta *y = *(const struct nt_meta *const *)b;

	if (x->count != y->count)
		return x->count < y->count ? 1 : -1;
	return strcmp(x->name, y->name);
}

struct payload_sum {
	const struct nt_meta *m;
	uint64_t bytes;
};

static int cmp_bytes(const void *a, const void *b)
{
	const struct payload_sum *x = a, *y = b;

	if (x->bytes != y->bytes)
		return x->bytes < y->bytes ? 1 : -1;
	return 0;
}

/* ---- cgroups ---------------------------------------------------------------
 * BPF-captured events (ringpipe record, ringpipe sample) carry a CgroupId
 * field; record also writes one Ringpipe-Kernel/CgroupMap event (CgroupId,
 * Path) per id it saw. The report counts events per cgroup and names each. */

/* Byte offset of the named field in this event's payload, or -1 when the
 * fields before it cannot be walked (arrays, structs) or it is absent. */
static long field_offset(const struct nt_meta *m, const uint8_t *p, uint32_t len,
			 const char *name, uint8_t *code)
{
	uint32_t off = 0;
	uint16_t i;

	if (!m->has_fields)
		return -1;
	for (i = 0; i < m->nfields; i++) {
		int sz = nt_type_fixed_size(m->fields[i].type.code);

		if (!strcmp(m->fields[i].name, name)) {
			*code = m->fields[i].type.code;
			return off;
		}
		if (sz < 0)
			return -1;
		if (sz) {
			off += (uint32_t)sz;
		} else {
			while (off + 1 < len && (p[off] || p[off + 1]))
				off += 2;
			off += 2;
		}
		if (off > len)
			return -1;
	}
	return -1;
}

struct cgroup_row {
	uint64_t id, n;
	char *path;
};

struct cgroups {
	struct cgroup_row *v;
	size_t n, cap;
	struct hmap index;	/* id -> index + 1 */
};

static struct cgroup_row *cgroup_row(struct cgroups *c, uint64_t id)
{
	uint64_t ix;

	if (hmap_get(&c->index, id, &ix))
		return &c->v[ix - 1];
	if (array_grow((void **)&c->v, &c->cap, c->n, sizeof(*c->v), 16) ||
	    hmap_put(&c->index, id, c->n + 1))
		return NULL;
	c->v[c->n] = (struct cgroup_row){ .id = id };
	return &c->v[c->n++];
}

static void cgroup_account(struct cgroups *c, const struct nt_rec *rec)
{
	const struct nt_meta *m = rec->meta;
	struct cgroup_row *row;
	uint64_t id;
	uint8_t code = 0;
	long off = field_offset(m, rec->payload, rec->payload_len, "CgroupId", &code);

	if (off < 0 || code != 12 || (uint64_t)off + 8 > rec->payload_len)
		return;
	id = le64_get(rec->payload + off);
	row = cgroup_row(c, id);
	if (!row)
		return;
	if (!strcmp(m->provider, "Ringpipe-Kernel") && !strcmp(m->raw_name, "CgroupMap")) {
		long poff = field_offset(m, rec->payload, rec->payload_len, "Path", &code);

		if (poff >= 0 && code == 18 && !row->path) {
			struct bytebuf b = { 0 };
			uint32_t units = 0;

			while ((uint64_t)poff + 2 * units + 1 < rec->payload_len &&
			       (rec->payload[poff + 2 * units] || rec->payload[poff + 2 * units + 1]))
				units++;
			utf16le_to_utf8(&b, rec->payload + poff, units);
			bb_append(&b, "", 1);
			row->path = b.oom ? (bb_free(&b), NULL) : (char *)b.p;
		}
		return;		/* the map itself is not an event of that cgroup */
	}
	row->n++;
}

static int cmp_cgroup(const void *a, const void *b)
{
	const struct cgroup_row *x = a, *y = b;

	return x->n != y->n ? (x->n < y->n ? 1 : -1) : (x->id > y->id) - (x->id < y->id);
}

static void cgroups_free(struct cgroups *c)
{
	size_t i;

	for (i = 0; i < c->n; i++)
		free(c->v[i].path);
	free(c->v);
	hmap_free(&c->index);
}

/*
 * One row of "events by provider/event". Metadata that differ only in
 * version (Method/DCStopVerbose V1 and V2) are one row: TraceEvent gives
 * them one name. The runtime's GCDynamicEvent (id 39) carries the name of
 * the event it stands for in its payload (TraceEvent names it so, as
 * GC/CommittedUsage), and is counted under that name.
 */
struct ev_row {
	const char *provider;
	char *name;
	uint32_t id;
	uint64_t count;
};

#define CLR_RUNTIME "Microsoft-Windows-DotNETRuntime"
#define CLR_GC_DYNAMIC_EVENT 39

struct dyn_count {
	char *name;		/* "GC/<Name>" */
	uint64_t n;
};

/* What one pass over a trace counted. */
struct report {
	struct nt_reader *r;
	int err;			/* the reader's last result: < 0 at malformed data */
	uint64_t events, with_stack, first_ts, last_ts;
	struct tcount *tc;		/* per thread, in order of appearance */
	size_t ntc, captc;
	struct hmap tmap;		/* pid << 32 | tid -> index in tc */
	struct hmap bytes_by_meta;	/* metadata -> payload bytes */
	size_t nm;
	const struct nt_meta **metas;	/* by count, largest first */
	struct payload_sum *ps;		/* by payload bytes, largest first */
	struct cgroups cg;
	struct ev_row *rows;		/* by count, largest first */
	size_t nrows;
	struct dyn_count *dyn;		/* GCDynamicEvent, by payload name */
	size_t ndyn, capdyn;
	uint64_t dyn_total;
};

static bool is_gc_dynamic(const struct nt_meta *m)
{
	return m->event_id == CLR_GC_DYNAMIC_EVENT && !m->raw_name[0] &&
	       !strcmp(m->provider, CLR_RUNTIME);
}

/* A GCDynamicEvent's payload opens with its name, UTF-16LE, NUL-ended. */
static int count_dynamic(struct report *rp, const struct nt_rec *rec)
{
	struct bytebuf b = { 0 };
	uint32_t units = 0;
	size_t i;

	while (2 * units + 1 < rec->payload_len &&
	       (rec->payload[2 * units] || rec->payload[2 * units + 1]))
		units++;
	if (!units || 2 * units + 1 >= rec->payload_len || units > 64)
		return 0;	/* unnamed: stays under the event's own name */
	bb_append(&b, "GC/", 3);
	utf16le_to_utf8(&b, rec->payload, units);
	bb_append(&b, "", 1);
	if (b.oom)
		return bb_free(&b), 0;
	for (i = 0; i < rp->ndyn && strcmp(rp->dyn[i].name, (char *)b.p); i++)
		;
	if (i == rp->ndyn) {
		if (array_grow((void **)&rp->dyn, &rp->capdyn, rp->ndyn, sizeof(*rp->dyn), 8)) {
			bb_free(&b);
			return -ENOMEM;
		}
		rp->dyn[rp->ndyn++] = (struct dyn_count){ (char *)b.p, 0 };
	} else {
		bb_free(&b);
	}
	rp->dyn[i].n++;
	rp->dyn_total++;
	return 0;
}

static int cmp_row(const void *a, const void *b)
{
	const struct ev_row *x = a, *y = b;
	int c;

	if (x->count != y->count)
		return x->count < y->count ? 1 : -1;
	c = strcmp(x->provider, y->provider);
	return c ? c : strcmp(x->name, y->name);
}

static int add_row(struct report *rp, size_t *cap, const char *provider, const char *name,
		   uint32_t id, uint64_t count)
{
	size_t i;

	for (i = 0; i < rp->nrows; i++) {
		struct ev_row *r = &rp->rows[i];

		if (r->id == id && !strcmp(r->provider, provider) && !strcmp(r->name, name)) {
			r->count += count;
			return 0;
		}
	}
	if (array_grow((void **)&rp->rows, cap, rp->nrows, sizeof(*rp->rows), 64))
		return -ENOMEM;
	rp->rows[rp->nrows] = (struct ev_row){ provider, strdup(name), id, count };
	if (!rp->rows[rp->nrows].name)
		return -ENOMEM;
	rp->nrows++;
	return 0;
}

static int build_rows(struct report *rp)
{
	size_t i, cap = 0;

	for (i = 0; i < rp->nm; i++) {
		const struct nt_meta *m = rp->metas[i];
		uint64_t n = m->count;

		if (is_gc_dynamic(m)) {
			/* the named ones are rows of their own, below */
			n = n > rp->dyn_total ? n - rp->dyn_total : 0;
			if (!n && rp->dyn_total)
				continue;
		}
		if (add_row(rp, &cap, m->provider, m->name, m->event_id, n))
			return -ENOMEM;
	}
	for (i = 0; i < rp->ndyn; i++)
		if (add_row(rp, &cap, CLR_RUNTIME, rp->dyn[i].name, CLR_GC_DYNAMIC_EVENT,
			    rp->dyn[i].n))
			return -ENOMEM;
	if (rp->rows)
		qsort(rp->rows, rp->nrows, sizeof(*rp->rows), cmp_row);
	return 0;
}

/* Reads the whole trace into rp; 0, or 1 after a message (out of memory).
 * A malformed tail ends the pass early: rp->err says so. */
static int report_read(struct report *rp)
{
	struct tool_progress pg;
	struct nt_rec rec;
	size_t i;

	tool_progress_init(&pg, "report");
	while ((rp->err = nt_reader_next(rp->r, &rec)) > 0) {
		uint64_t key = ((uint64_t)(uint32_t)rec.pid << 32) | (uint32_t)rec.tid, v, total;
		uint64_t done = nt_reader_offset(rp->r, &total);

		tool_progress(&pg, done, total);
		if (!rp->events)
			rp->first_ts = rec.ts;
		if (rec.ts > rp->last_ts)
			rp->last_ts = rec.ts;
		rp->events++;
		if (rec.stack_bytes)
			rp->with_stack++;
		if (!hmap_get(&rp->tmap, key, &v)) {
			if (array_grow((void **)&rp->tc, &rp->captc, rp->ntc, sizeof(*rp->tc), 64))
				break;
			rp->tc[rp->ntc] = (struct tcount){ rec.pid, rec.tid, 0 };
			v = rp->ntc++;
			hmap_put(&rp->tmap, key, v);
		}
		rp->tc[v].n++;
		if (!hmap_get(&rp->bytes_by_meta, (uintptr_t)rec.meta, &v))
			v = 0;
		hmap_put(&rp->bytes_by_meta, (uintptr_t)rec.meta, v + rec.payload_len);
		cgroup_account(&rp->cg, &rec);
		if (is_gc_dynamic(rec.meta) && count_dynamic(rp, &rec))
			break;
	}
	tool_progress_end(&pg);
	if (rp->err > 0)	/* the loop broke off */
		return tool_err("report", "out of memory");
	array_sort(rp->cg.v, rp->cg.n, sizeof(*rp->cg.v), cmp_cgroup);

	rp->nm = nt_reader_nmeta(rp->r);
	rp->metas = calloc(rp->nm + 1, sizeof(*rp->metas));
	rp->ps = calloc(rp->nm + 1, sizeof(*rp->ps));
	if (!rp->metas || !rp->ps)
		return tool_err("report", "out of memory");
	for (i = 0; i < rp->nm; i++) {
		uint64_t v = 0;

		rp->metas[i] = nt_reader_meta(rp->r, i);
		hmap_get(&rp->bytes_by_meta, (uintptr_t)rp->metas[i], &v);
		rp->ps[i] = (struct payload_sum){ rp->metas[i], v };
	}
	qsort(rp->metas, rp->nm, sizeof(*rp->metas), cmp_meta_count);
	qsort(rp->ps, rp->nm, sizeof(*rp->ps), cmp_bytes);
	if (build_rows(rp))
		return tool_err("report", "out of memory");
	return 0;
}

static void report_json(const struct report *rp, const char *path, double dur)
{
	const struct nt_reader *r = rp->r;
	size_t i, k, nm = rp->nm;
	bool first = true;

	printf("{\"file\":");
	nt_json_fputs(path, stdout);
	printf(",\"format\":%d,\"events\":%" PRIu64 ",\"lost\":%" PRId64
	       ",\"duration_s\":%.9f,\"events_with_stack\":%" PRIu64 ",\"providers\":{",
	       nt_reader_info(r)->format, rp->events, nt_reader_lost(r), dur, rp->with_stack);
	/* providers: sum over metadata, in order of first definition */
	for (i = 0; i < nm; i++) {
		const struct nt_meta *m = nt_reader_meta(r, i);
		uint64_t sum = 0;

		for (k = 0; k < i; k++)
			if (!strcmp(nt_reader_meta(r, k)->provider, m->provider))
				break;
		if (k < i)
			continue;
		for (k = i; k < nm; k++)
			if (!strcmp(nt_reader_meta(r, k)->provider, m->provider))
				sum += nt_reader_meta(r, k)->count;
		printf("%s", first ? "" : ",");
		first = false;
		nt_json_fputs(m->provider, stdout);
		printf(":%" PRIu64, sum);
	}
	printf("},\"by_event\":[");
	for (i = 0; i < rp->nrows; i++) {
		printf("%s{\"provider\":", i ? "," : "");
		nt_json_fputs(rp->rows[i].provider, stdout);
		printf(",\"id\":%u,\"name\":", rp->rows[i].id);
		nt_json_fputs(rp->rows[i].name, stdout);
		printf(",\"count\":%" PRIu64 "}", rp->rows[i].count);
	}
	printf("],\"threads\":[");
	for (i = 0; i < rp->ntc; i++)
		printf("%s{\"pid\":%" PRId64 ",\"tid\":%" PRId64 ",\"count\":%" PRIu64 "}",
		       i ? "," : "", rp->tc[i].pid, rp->tc[i].tid, rp->tc[i].n);
	printf("],\"cgroups\":[");
	for (i = 0; i < rp->cg.n; i++) {
		printf("%s{\"id\":%" PRIu64 ",\"path\":", i ? "," : "", rp->cg.v[i].id);
		if (rp->cg.v[i].path)
			nt_json_fputs(rp->cg.v[i].path, stdout);
		else
			printf("null");
		printf(",\"count\":%" PRIu64 "}", rp->cg.v[i].n);
	}
	printf("],\"error\":");
	if (rp->err < 0)
		nt_json_fputs(nt_reader_errmsg(r), stdout);
	else
		printf("null");
	printf("}\n");
}

static void report_text(const struct report *rp, const char *path, double dur)
{
	const struct nt_reader_info *info = nt_reader_info(rp->r);
	size_t i;

	printf("file        %s (nettrace V%d)\n", path, info->format);
	printf("events      %" PRIu64 "\n", rp->events);
	printf("lost        %" PRId64 " (EventsLost)\n", nt_reader_lost(rp->r));
	printf("duration    %.6f s (%" PRIu64 " ticks/s)\n", dur, info->tick_freq);
	printf("stacks      %" PRIu64 " events carry a stack\n", rp->with_stack);
	printf("\nevents by provider/event:\n");
	for (i = 0; i < rp->nrows; i++)
		if (rp->rows[i].count)
			printf("  %10" PRIu64 "  %s/%s (id %u)\n", rp->rows[i].count,
			       rp->rows[i].provider, rp->rows[i].name, rp->rows[i].id);
	printf("\nevents by thread:\n");
	for (i = 0; i < rp->ntc && i < 20; i++)
		printf("  %10" PRIu64 "  pid %" PRId64 " tid %" PRId64 "\n", rp->tc[i].n,
		       rp->tc[i].pid, rp->tc[i].tid);
	if (rp->ntc > 20)
		printf("  ... %zu threads in all\n", rp->ntc);
	printf("\nheaviest events (payload bytes):\n");
	for (i = 0; i < rp->nm && i < 5 && rp->ps[i].bytes; i++)
		printf("  %10" PRIu64 "  %s/%s\n", rp->ps[i].bytes, rp->ps[i].m->provider,
		       rp->ps[i].m->name);
	if (rp->cg.n) {
		printf("\nevents by cgroup (BPF-captured):\n");
		for (i = 0; i < rp->cg.n; i++)
			printf("  %10" PRIu64 "  %" PRIu64 "  %s\n", rp->cg.v[i].n, rp->cg.v[i].id,
			       rp->cg.v[i].path ? rp->cg.v[i].path :
			       "(no CgroupMap event in the trace)");
	}
	/* CPU samples: where the time went, symbolized */
	fflush(stdout);
	prof_top_functions(path, stdout, 15);
}

static void report_free(struct report *rp)
{
	size_t i;

	for (i = 0; i < rp->nrows; i++)
		free(rp->rows[i].name);
	free(rp->rows);
	for (i = 0; i < rp->ndyn; i++)
		free(rp->dyn[i].name);
	free(rp->dyn);
	free(rp->metas);
	free(rp->ps);
	free(rp->tc);
	hmap_free(&rp->tmap);
	hmap_free(&rp->bytes_by_meta);
	cgroups_free(&rp->cg);
	nt_reader_free(rp->r);
}

/* Is path dotnet-gcdump's own format (FastSerialization, "GCHeapDump")? */
static bool is_gcdump(const char *path)
{
	char head[64];
	size_t n;
	FILE *f = fopen(path, "rbe");

	if (!f)
		return false;
	n = fread(head, 1, sizeof(head), f);
	fclose(f);
	return n >= 40 && memmem(head, n, "!FastSerialization", 18) &&
	       memmem(head, n, "GCHeapDump", 10);
}

struct report_cfg {
	bool json;
};

static const struct tool_opt report_opts[] = {
	TOOL_FLAG("json", 0, struct report_cfg, json, "one JSON object instead of the text"),
	TOOL_OPTS_END
};

static const struct tool_cmd report_cmd = { .name = "report", .usage = report_usage,
					    .opts = report_opts, .max_args = 1 };

int cmd_report(int argc, char **argv)
{
	struct report_cfg c = { 0 };
	struct tool_args rest;
	const char *path;
	bool json;
	struct report rp = { 0 };
	const struct nt_reader_info *info;
	double dur;
	int rc = tool_opts_parse(&report_cmd, argc, argv, &c, &rest);

	if (rc != TOOL_OPTS_RUN)
		return rc;
	if (!rest.argc)
		return tool_opts_help(stderr, &report_cmd), 2;
	path = rest.argv[0];
	json = c.json;
	if (agent_report_is_dir(path))
		return agent_report_dir(path, json);
	rp.r = nt_reader_open(path);
	if (!rp.r)
		return tool_err("report", "%s: %s", path, strerror(errno));
	rc = report_read(&rp);
	if (rc) {
		report_free(&rp);
		return rc;
	}
	info = nt_reader_info(rp.r);
	/* a file whose header did not parse has no summary to give: only
	 * the reason (a zero-event "nettrace V0" report says nothing true) */
	if (rp.err < 0 && !info->format && !rp.events && !json) {
		if (is_gcdump(path))
			tool_err("report", "%s is a .gcdump file (dotnet-gcdump's heap graph), not "
				 "a nettrace trace: read it with dotnet-gcdump report", path);
		else
			tool_err("report", "%s: %s", path, nt_reader_errmsg(rp.r));
		report_free(&rp);
		return 1;
	}
	dur = info->tick_freq && rp.events ?
		(double)(rp.last_ts - rp.first_ts) / (double)info->tick_freq : 0.0;
	if (json)
		report_json(&rp, path, dur);
	else
		report_text(&rp, path, dur);
	if (rp.err < 0) {
		tool_err("report", "%s: %s", path, nt_reader_errmsg(rp.r));
		rc = 1;
	}
	report_free(&rp);
	return rc;
}

static const char dump_usage[] =
"usage: ringpipe dump FILE\n"
"\n"
"Prints every event as one JSON line, then a summary line\n"
"(format: tests/interop/README.md).\n";

static const struct tool_opt dump_opts[] = { TOOL_OPTS_END };
static const struct tool_cmd dump_cmd = { .name = "dump", .usage = dump_usage,
					  .opts = dump_opts, .max_args = 1 };

int cmd_dump(int argc, char **argv)
{
	struct tool_args rest;
	struct nt_reader *r;
	struct nt_rec rec;
	struct bytebuf out = { 0 };
	const char *path;
	uint64_t n = 0;
	int err = tool_opts_parse(&dump_cmd, argc, argv, NULL, &rest);

	if (err != TOOL_OPTS_RUN)
		return err;
	if (!rest.argc)
		return tool_opts_help(stderr, &dump_cmd), 2;
	path = rest.argv[0];
	r = nt_reader_open(path);
	if (!r)
		return tool_err("dump", "%s: %s", path, strerror(errno));
	while ((err = nt_reader_next(r, &rec)) > 0) {
		nt_dump_event(r, &rec, &out);
		n++;
		if (out.len > (1 << 20)) {
			bb_fwrite(&out, stdout);
			out.len = 0;
		}
	}
	nt_dump_summary(r, n, err < 0, &out);
	bb_fwrite(&out, stdout);
	bb_free(&out);
	if (err < 0)
		tool_err("dump", "%s: %s", path, nt_reader_errmsg(r));
	nt_reader_free(r);
	return err < 0;
}
