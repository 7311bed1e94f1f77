// SPDX-License-Identifier: MIT
/*
 * ringpipe convert: a nettrace file's samples and spans for other viewers.
 *
 *   speedscope  one sampled profile per thread (speedscope's own JSON);
 *   chrome      Chrome trace-event JSON (chrome://tracing, Perfetto UI,
 *               speedscope): Start/Stop pairs as complete ("X") slices,
 *               samples as instant events referring to "stackFrames" and
 *               listed in "samples", other events as instants;
 *   text        one block per event in the manner of `perf script`.
 *
 * Samples are Ringpipe-Sampler/Sample events (ringpipe sample, record
 * --sample) and the .NET runtime's SampleProfiler ThreadSample events
 * (ringpipe collect, dotnet-trace). Frames are symbolized with what the
 * trace carries: module maps (Ringpipe-Symbols events) and the CLR method
 * and module events (MethodLoad, rundown), so the file is read twice:
 * symbols first. Documentation/profiles.md says more.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmds.h"
#include "util/hmap.h"
#include "nettrace_read.h"
#include "trace/profile.h"
#include "capture/sample_out.h"
#include "symbols/symbolize.h"
#include "common/tool_opts.h"
#include "common/tool_util.h"
#include "util/utf.h"

static const char convert_usage[] =
"usage: ringpipe convert --to speedscope|chrome|text FILE [-o OUT]\n"
"\n"
"Converts a nettrace file's CPU samples (ringpipe sample's, or the .NET\n"
"runtime's SampleProfiler ThreadSample events) and spans, symbolizing stack\n"
"frames with the module maps the trace carries (as 'ringpipe sample' writes\n"
"them), its .NET method load and rundown events, perf map files and\n"
"/proc/kallsyms:\n"
"  speedscope  a sampled profile per thread, for https://www.speedscope.app\n"
"  chrome      Chrome trace-event JSON, for Perfetto UI and chrome://tracing:\n"
"              Start/Stop event pairs as complete slices, samples with their\n"
"              stacks\n"
"  text        every event, then its symbolized frames (like 'perf script')\n"
"Writes to OUT, or to stdout.\n";

enum fmt { F_SPEEDSCOPE, F_CHROME, F_TEXT };

struct conv {
	struct nt_reader *r;
	struct sym_table *syms;
	const struct nt_reader_info *info;
	struct prof_scan scan;		/* the time range */
	FILE *out;
	struct tool_progress pg;	/* the second pass: the second half */
};

static void conv_progress(struct conv *c)
{
	uint64_t total, done = nt_reader_offset(c->r, &total);

	tool_progress(&c->pg, total + done, 2 * total);
}

static double rel_us(const struct conv *c, uint64_t ts)
{
	uint64_t f = c->info->tick_freq ? c->info->tick_freq : 1;

	return ts < c->scan.t0 ? 0.0 : (double)(ts - c->scan.t0) * 1e6 / (double)f;
}

/* ---- text -------------------------------------------------------------- */

static void text_event(struct conv *c, const struct nt_rec *rec, struct prof_stack *s)
{
	const char *comm;
	uint64_t f = c->info->tick_freq ? c->info->tick_freq : 1;
	uint64_t rel = rec->ts >= c->scan.t0 ? rec->ts - c->scan.t0 : 0;
	char buf[1024], cpu[16];
	uint32_t i;

	prof_get_stack(c->r, rec, s);
	comm = sym_thread_name(c->syms, s->pid, (uint32_t)rec->tid);
	/* the runtime's events know no CPU: 0xffffffff */
	if (s->cpu == UINT32_MAX)
		snprintf(cpu, sizeof(cpu), "---");
	else
		snprintf(cpu, sizeof(cpu), "%03u", s->cpu);
	fprintf(c->out, "%-16s %" PRIu32 "/%" PRId64 " [%s] %" PRIu64 ".%09" PRIu64 ": %s/%s\n",
		comm ? comm : "?", s->pid, rec->tid, cpu, rel / f,
		(uint64_t)((rel % f) * 1000000000ull / f), rec->meta->provider, rec->meta->name);
	for (i = 0; i < s->n; i++)
		fprintf(c->out, "\t%16" PRIx64 " %s\n", s->ips[i],
			sym_format(c->syms, s->pid, s->ips[i], prof_frame_leaf(s, i), buf,
				   sizeof(buf)));
	if (s->n)
		fputc('\n', c->out);
}

/* ---- speedscope -------------------------------------------------------- */

struct prof {
	uint32_t pid, tid;
	struct bytebuf samples, weights;
	uint64_t n;
	uint64_t total;		/* sum of the weights, ns */
	struct bytebuf pending;	/* a ThreadSample's frames, weighed at the next one */
	uint64_t pending_ts;
	bool has_pending;
};

struct profs {
	struct hmap idx;
	struct prof *p;
	size_t n, cap;
};

static struct prof *prof_get(struct profs *ps, uint32_t pid, uint32_t tid)
{
	uint64_t key = (uint64_t)pid << 32 | tid, v;

	if (hmap_get(&ps->idx, key, &v))
		return &ps->p[v];
	if (array_grow((void **)&ps->p, &ps->cap, ps->n, sizeof(*ps->p), 16) ||
	    hmap_put(&ps->idx, key, ps->n))
		return NULL;
	memset(&ps->p[ps->n], 0, sizeof(*ps->p));
	ps->p[ps->n].pid = pid;
	ps->p[ps->n].tid = tid;
	return &ps->p[ps->n++];
}

static void prof_emit(struct prof *p, const struct bytebuf *frames, uint64_t weight)
{
	bb_printf(&p->samples, "%s[", p->n ? "," : "");
	if (frames->len)
		bb_append(&p->samples, frames->p, frames->len);
	bb_printf(&p->samples, "]");
	bb_printf(&p->weights, "%s%" PRIu64, p->n ? "," : "", weight);
	p->total += weight;
	p->n++;
}

static uint64_t ticks_ns(const struct conv *c, uint64_t ticks)
{
	uint64_t f = c->info->tick_freq ? c->info->tick_freq : 1;

	return (uint64_t)((double)ticks * 1e9 / (double)f);
}

static int speedscope(struct conv *c, const char *path)
{
	struct profs ps = { 0 };
	struct prof_strtab frames = { 0 };
	struct nt_rec rec;
	struct prof_stack *s = malloc(sizeof(*s));
	struct bytebuf fr = { 0 };
	uint64_t weight = c->info->sampling_interval;
	char buf[1024];
	size_t i;
	int err;

	if (!s)
		return -ENOMEM;
	/* the sampling interval in ns is each sample's weight; a trace whose
	 * header does not say gets 1 ms, like the runtime's default */
	if (!weight)
		weight = 1000000;
	while ((err = nt_reader_next(c->r, &rec)) > 0) {
		struct prof *p;
		uint32_t k;

		conv_progress(c);
		if (!prof_is_sample(&rec))
			continue;
		prof_get_stack(c->r, &rec, s);
		p = prof_get(&ps, s->pid, s->tid);
		if (!p) {
			err = -ENOMEM;
			break;
		}
		/* speedscope wants the root first */
		fr.len = 0;
		for (k = s->n; k-- > 0;) {
			int64_t fi = prof_strtab_get(&frames, prof_func_name(c->syms, s, k, buf,
									     sizeof(buf)));

			bb_printf(&fr, "%" PRId64 "%s", fi, k ? "," : "");
		}
		if (!s->thread_time) {
			/* a CPU timer's sample stands for one sampling period */
			prof_emit(p, &fr, weight);
			continue;
		}
		/*
		 * The runtime samples every managed thread in turn, so a
		 * thread's stack holds from its sample until its next one, as
		 * TraceEvent's thread time computer weighs it; the last sample
		 * of a thread gets one sampling period.
		 */
		if (p->has_pending)
			prof_emit(p, &p->pending, rec.ts > p->pending_ts ?
				  ticks_ns(c, rec.ts - p->pending_ts) : 0);
		p->pending.len = 0;
		if (fr.len)
			bb_append(&p->pending, fr.p, fr.len);
		p->pending_ts = rec.ts;
		p->has_pending = true;
	}
	for (i = 0; i < ps.n; i++)
		if (ps.p[i].has_pending)
			prof_emit(&ps.p[i], &ps.p[i].pending, weight);
	if (fr.oom)
		err = -ENOMEM;
	for (i = 0; i < ps.n && err >= 0; i++)
		if (ps.p[i].samples.oom || ps.p[i].weights.oom || ps.p[i].pending.oom)
			err = -ENOMEM;
	if (err >= 0) {
		fprintf(c->out, "{\"$schema\":\"https://www.speedscope.app/file-format-schema.json\","
			"\"exporter\":\"ringpipe convert\",\"name\":");
		nt_json_fputs(path, c->out);
		fprintf(c->out, ",\"activeProfileIndex\":0,\"shared\":{\"frames\":[");
		for (i = 0; i < frames.n; i++) {
			fprintf(c->out, "%s{\"name\":", i ? "," : "");
			nt_json_fputs(frames.s[i], c->out);
			fputc('}', c->out);
		}
		fprintf(c->out, "]},\"profiles\":[");
		for (i = 0; i < ps.n; i++) {
			struct prof *p = &ps.p[i];
			const char *comm = sym_thread_name(c->syms, p->pid, p->tid);

			snprintf(buf, sizeof(buf), "%s pid %u tid %u", comm ? comm : "thread", p->pid,
				 p->tid);
			fprintf(c->out, "%s{\"type\":\"sampled\",\"name\":", i ? "," : "");
			nt_json_fputs(buf, c->out);
			fprintf(c->out, ",\"unit\":\"nanoseconds\",\"startValue\":0,\"endValue\":%"
				PRIu64 ",\"samples\":[", p->total);
			bb_fwrite(&p->samples, c->out);
			fprintf(c->out, "],\"weights\":[");
			bb_fwrite(&p->weights, c->out);
			fprintf(c->out, "]}");
		}
		fprintf(c->out, "]}\n");
	}
	for (i = 0; i < ps.n; i++) {
		bb_free(&ps.p[i].samples);
		bb_free(&ps.p[i].weights);
		bb_free(&ps.p[i].pending);
	}
	bb_free(&fr);
	free(ps.p);
	hmap_free(&ps.idx);
	prof_strtab_free(&frames);
	free(s);
	return err < 0 ? err : 0;
}

/* ---- chrome ------------------------------------------------------------ */

struct open_span {
	char *name;
	uint64_t ts;
};

/* A thread's Start events still waiting for their Stop, innermost last. */
struct open_spans {
	struct open_span *s;
	size_t n, cap;
};

struct tstate {
	struct hmap idx;	/* pid << 32 | tid -> index */
	struct open_spans *t;
	uint32_t *pid, *tid;
	size_t n, cap, cappid, captid;
};

static struct open_spans *spans_of(struct tstate *ts, uint32_t pid, uint32_t tid)
{
	uint64_t key = (uint64_t)pid << 32 | tid, v;

	if (hmap_get(&ts->idx, key, &v))
		return &ts->t[v];
	if (array_grow((void **)&ts->t, &ts->cap, ts->n, sizeof(*ts->t), 16) ||
	    array_grow((void **)&ts->pid, &ts->cappid, ts->n, sizeof(*ts->pid), 16) ||
	    array_grow((void **)&ts->tid, &ts->captid, ts->n, sizeof(*ts->tid), 16) ||
	    hmap_put(&ts->idx, key, ts->n))
		return NULL;
	memset(&ts->t[ts->n], 0, sizeof(*ts->t));
	ts->pid[ts->n] = pid;
	ts->tid[ts->n] = tid;
	return &ts->t[ts->n++];
}

/* "Request/Start" and "RequestStart" both name the span "Request". */
static void span_name(const struct nt_meta *m, char *buf, size_t len)
{
	size_t n = strlen(m->name);
	const char *suffix = m->opcode == 1 ? "Start" : "Stop";
	size_t sl = strlen(suffix);

	if (n > sl && !strcmp(m->name + n - sl, suffix)) {
		n -= sl;
		if (n && m->name[n - 1] == '/')
			n--;
	}
	snprintf(buf, len, "%s/%.*s", m->provider, (int)n, m->name);
}

static void chrome_ev(struct conv *c, bool *first, const char *ph, const char *name,
		      const char *cat, uint32_t pid, uint32_t tid, uint64_t ts)
{
	fprintf(c->out, "%s\n{\"ph\":\"%s\",\"name\":", *first ? "" : ",", ph);
	*first = false;
	nt_json_fputs(name, c->out);
	fprintf(c->out, ",\"cat\":");
	nt_json_fputs(cat, c->out);
	fprintf(c->out, ",\"pid\":%u,\"tid\":%u,\"ts\":%.3f", pid, tid, rel_us(c, ts));
}

/* A span from its Start to ts, as a complete event: Perfetto and
 * chrome://tracing need no matching E for it, so none can go missing. */
static void chrome_span(struct conv *c, bool *first, const struct open_span *sp, const char *cat,
			uint32_t pid, uint32_t tid, uint64_t ts)
{
	chrome_ev(c, first, "X", sp->name, cat, pid, tid, sp->ts);
	fprintf(c->out, ",\"dur\":%.3f}", ts > sp->ts ? rel_us(c, ts) - rel_us(c, sp->ts) : 0.0);
}

static int chrome(struct conv *c)
{
	struct tstate ts = { 0 };
	struct hmap nodes = { 0 };	/* parent << 32 | frame -> node id */
	struct prof_strtab frames = { 0 };
	struct bytebuf sf = { 0 }, samples = { 0 };
	struct nt_rec rec;
	struct prof_stack *s = malloc(sizeof(*s));
	uint64_t nnodes = 0;
	bool first = true;
	char buf[1024], name[512];
	size_t i, k;
	int err;

	if (!s)
		return -ENOMEM;
	fprintf(c->out, "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"exporter\":\"ringpipe convert\"},"
		"\"traceEvents\":[");
	while ((err = nt_reader_next(c->r, &rec)) > 0) {
		uint32_t pid = (uint32_t)rec.pid, tid = (uint32_t)rec.tid;
		const struct nt_meta *m = rec.meta;
		struct open_spans *os;

		conv_progress(c);
		if (!strcmp(m->provider, SYM_PROVIDER)) {
			if (m->event_id == SYM_EV_THREAD && rec.payload_len >= 10) {
				/* this event's name: a thread renamed later (exec)
				 * gets a second M event, which wins from then on */
				struct bytebuf nb = { 0 };
				size_t units = 0;

				while (8 + 2 * units + 1 < rec.payload_len &&
				       (rec.payload[8 + 2 * units] | rec.payload[9 + 2 * units]))
					units++;
				utf16le_to_utf8(&nb, rec.payload + 8, units);
				bb_append(&nb, "", 1);
				fprintf(c->out, "%s\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%u,"
					"\"tid\":%u,\"args\":{\"name\":", first ? "" : ",", pid, tid);
				nt_json_fputs(nb.p ? (const char *)nb.p : "?", c->out);
				fprintf(c->out, "}}");
				first = false;
				bb_free(&nb);
			}
			continue;
		}
		if (prof_is_sample(&rec)) {
			uint64_t parent = 0;	/* 0: no parent; node ids start at 1 */

			prof_get_stack(c->r, &rec, s);
			for (k = s->n; k-- > 0;) {
				int64_t fi = prof_strtab_get(&frames,
							     prof_func_name(c->syms, s, (uint32_t)k,
									    buf, sizeof(buf)));
				uint64_t key = parent << 32 | (uint64_t)fi, id;

				if (!hmap_get(&nodes, key, &id)) {
					id = ++nnodes;
					hmap_put(&nodes, key, id);
					bb_printf(&sf, "%s\"%" PRIu64 "\":{\"category\":\"%s\",\"name\":",
						  id > 1 ? "," : "", id,
						  k < s->nk ? "kernel" : "user");
					nt_json_string(&sf, frames.s[fi], strlen(frames.s[fi]));
					if (parent)
						bb_printf(&sf, ",\"parent\":\"%" PRIu64 "\"", parent);
					bb_printf(&sf, "}");
				}
				parent = id;
			}
			chrome_ev(c, &first, "i", "Sample", m->provider, pid, tid, rec.ts);
			fprintf(c->out, ",\"s\":\"t\"");
			if (parent) {
				fprintf(c->out, ",\"sf\":\"%" PRIu64 "\",\"args\":{\"leaf\":", parent);
				nt_json_fputs(prof_func_name(c->syms, s, 0, buf, sizeof(buf)), c->out);
				/* the runtime's sampler knows no CPU, but whether the
				 * thread was in managed code (2) or outside it (1) */
				if (!s->thread_time)
					fprintf(c->out, ",\"cpu\":%u}", s->cpu);
				else if (rec.payload_len >= 4)
					fprintf(c->out, ",\"type\":\"%s\"}",
						le32_get(rec.payload) == 2 ? "managed" :
						le32_get(rec.payload) == 1 ? "external" : "error");
				else
					fputc('}', c->out);
				bb_printf(&samples, "%s{\"cat\":\"cpu\",\"name\":\"cpu-sample\",\"pid\":%u,"
					  "\"tid\":%u,\"ts\":%.3f,\"sf\":\"%" PRIu64 "\",\"weight\":1}",
					  samples.len ? "," : "", pid, tid, rel_us(c, rec.ts), parent);
			}
			fputc('}', c->out);
			continue;
		}
		os = spans_of(&ts, pid, tid);
		if (!os) {
			err = -ENOMEM;
			break;
		}
		if (m->opcode == 1) {
			span_name(m, name, sizeof(name));
			if (array_grow((void **)&os->s, &os->cap, os->n, sizeof(*os->s), 8) ||
			    !(os->s[os->n].name = strdup(name))) {
				err = -ENOMEM;
				break;
			}
			os->s[os->n++].ts = rec.ts;
			continue;
		}
		if (m->opcode == 2) {
			span_name(m, name, sizeof(name));
			for (k = os->n; k-- > 0;)
				if (!strcmp(os->s[k].name, name))
					break;
			if (k != (size_t)-1) {
				/* slices nest: a Stop closes what opened after its Start */
				while (os->n > k) {
					os->n--;
					chrome_span(c, &first, &os->s[os->n], m->provider, pid, tid,
						    rec.ts);
					free(os->s[os->n].name);
				}
				continue;
			}
			/* a Stop without its Start: shown as an instant */
		}
		snprintf(name, sizeof(name), "%s/%s", m->provider, m->name);
		chrome_ev(c, &first, "i", name, m->provider, pid, tid, rec.ts);
		fprintf(c->out, ",\"s\":\"t\"}");
	}
	/* a Start whose Stop never came is an instant: a slice drawn to the
	 * end of the trace would claim a duration nobody measured */
	for (i = 0; i < ts.n; i++) {
		struct open_spans *os = &ts.t[i];

		while (os->n) {
			os->n--;
			if (err >= 0) {
				chrome_ev(c, &first, "i", os->s[os->n].name, "", ts.pid[i],
					  ts.tid[i], os->s[os->n].ts);
				fprintf(c->out, ",\"s\":\"t\",\"args\":{\"stop\":"
					"\"none in the trace\"}}");
			}
			free(os->s[os->n].name);
		}
		free(os->s);
	}
	fprintf(c->out, "\n],\"stackFrames\":{");
	bb_fwrite(&sf, c->out);
	fprintf(c->out, "},\"samples\":[");
	bb_fwrite(&samples, c->out);
	fprintf(c->out, "]}\n");
	if (sf.oom || samples.oom)
		err = -ENOMEM;
	free(ts.t);
	free(ts.pid);
	free(ts.tid);
	hmap_free(&ts.idx);
	hmap_free(&nodes);
	prof_strtab_free(&frames);
	bb_free(&sf);
	bb_free(&samples);
	free(s);
	return err < 0 ? err : 0;
}

struct convert_cfg {
	const char *to, *out;
};

static const struct tool_opt convert_opts[] = {
	TOOL_STRING("to", 0, "speedscope|chrome|text", struct convert_cfg, to,
		    "the output's format (required)"),
	TOOL_STRING(NULL, 'o', "OUT", struct convert_cfg, out,
		    "where to write it (default: stdout)"),
	TOOL_OPTS_END
};

static const struct tool_cmd convert_cmd = { .name = "convert", .usage = convert_usage,
					     .opts = convert_opts, .max_args = 1 };

/* Parses argv into the input, the output and its format; TOOL_OPTS_RUN, or
 * the exit status. */
static int convert_parse(int argc, char **argv, const char **path, const char **outp,
			 enum fmt *f)
{
	struct convert_cfg c = { 0 };
	struct tool_args rest;
	int rc = tool_opts_parse(&convert_cmd, argc, argv, &c, &rest);

	if (rc != TOOL_OPTS_RUN)
		return rc;
	if (!c.to || !rest.argc)
		return tool_opts_help(stderr, &convert_cmd), 2;
	*path = rest.argv[0];
	*outp = c.out;
	if (!strcmp(c.to, "speedscope"))
		*f = F_SPEEDSCOPE;
	else if (!strcmp(c.to, "chrome"))
		*f = F_CHROME;
	else if (!strcmp(c.to, "text"))
		*f = F_TEXT;
	else
		return tool_err("convert", "--to must be speedscope, chrome or text, not '%s'",
				c.to), 2;
	return TOOL_OPTS_RUN;
}

int cmd_convert(int argc, char **argv)
{
	const char *path = NULL, *outp = NULL;
	struct conv c = { 0 };
	struct nt_rec rec;
	struct prof_stack *s = NULL;
	enum fmt f = F_TEXT;
	int err = 0, rc = convert_parse(argc, argv, &path, &outp, &f);

	if (rc != TOOL_OPTS_RUN)
		return rc;
	rc = 1;
	c.syms = sym_table_new();
	if (!c.syms)
		return tool_err("convert", "libelf: %s", strerror(errno));
	/* a process that has exited leaves its perf map behind */
	sym_use_perf_maps(c.syms, true);
	tool_progress_init(&c.pg, "convert");
	c.pg.passes = 2;	/* symbols first, then the conversion */
	err = prof_load_symbols(path, c.syms, &c.scan, &c.pg);
	tool_progress_end(&c.pg);	/* the second pass draws it again */
	if (err == -ENOENT || err == -EACCES || err == -EISDIR) {
		tool_err("convert", "%s: %s", path, strerror(-err));
		goto out;
	}
	if (c.scan.nthread_samples && !sym_nmanaged(c.syms))
		fprintf(stderr, "ringpipe convert: %s: note: no .NET method events, so managed "
			"frames are named only from perf maps; collect with the runtime's rundown "
			"(the default) or its Jit and Loader keywords\n", path);
	/* a corrupt tail is reported by pass 2, after converting what precedes it */
	c.r = nt_reader_open(path);
	if (!c.r) {
		tool_err("convert", "%s: %s", path, strerror(errno));
		goto out;
	}
	c.info = nt_reader_info(c.r);
	c.out = outp ? fopen(outp, "we") : stdout;
	if (!c.out) {
		tool_err("convert", "%s: %s", outp, strerror(errno));
		goto out;
	}
	if (f == F_SPEEDSCOPE) {
		err = speedscope(&c, path);
	} else if (f == F_CHROME) {
		err = chrome(&c);
	} else {
		s = malloc(sizeof(*s));
		if (!s) {
			err = -ENOMEM;
		} else {
			while ((err = nt_reader_next(c.r, &rec)) > 0) {
				conv_progress(&c);
				if (strcmp(rec.meta->provider, SYM_PROVIDER))
					text_event(&c, &rec, s);
			}
		}
	}
	tool_progress_end(&c.pg);
	if (err < 0) {
		tool_err("convert", "%s: %s", path,
			 err == -ENOMEM ? "out of memory" : nt_reader_errmsg(c.r));
		goto out;
	}
	rc = 0;
out:
	tool_progress_end(&c.pg);
	if (c.out && c.out != stdout && fclose(c.out) && !rc)
		rc = tool_err("convert", "%s: %s", outp, strerror(errno));
	else if (c.out == stdout && fflush(stdout) && !rc)
		rc = tool_err("convert", "stdout: %s", strerror(errno));
	free(s);
	nt_reader_free(c.r);
	sym_table_free(c.syms);
	return rc;
}
