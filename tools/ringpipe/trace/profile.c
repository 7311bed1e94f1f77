// SPDX-License-Identifier: MIT
/*
 * Profiles from traces (see profile.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/bytebuf.h"
#include "common/fnv1a.h"
#include "trace/profile.h"
#include "common/tool_util.h"
#include "capture/sample_out.h"

bool prof_is_thread_sample(const struct nt_rec *rec)
{
	return rec->meta && rec->meta->event_id == PROF_DOTNET_EV_THREAD_SAMPLE &&
	       !strcmp(rec->meta->provider, PROF_DOTNET_SAMPLER);
}

bool prof_is_sample(const struct nt_rec *rec)
{
	return rec->meta && ((rec->meta->event_id == SAMPLER_EV_SAMPLE &&
			      !strcmp(rec->meta->provider, SAMPLER_PROVIDER) &&
			      rec->payload_len >= SAMPLE_PAYLOAD_LEN) ||
			     prof_is_thread_sample(rec));
}

void prof_get_stack(const struct nt_reader *r, const struct nt_rec *rec, struct prof_stack *s)
{
	uint32_t ps = nt_reader_info(r)->pointer_size, i;

	s->pid = (uint32_t)rec->pid;
	s->tid = (uint32_t)rec->tid;
	s->cpu = rec->cpu;
	s->n = 0;
	s->nk = 0;
	s->thread_time = prof_is_thread_sample(rec);
	s->sample = prof_is_sample(rec);
	if (s->sample && !s->thread_time)
		s->pid = le32_get(rec->payload + 20);	/* the sampled process */
	if (ps == 8 || ps == 4)
		for (i = 0; i + ps <= rec->stack_bytes && s->n < sizeof(s->ips) / 8; i += ps)
			s->ips[s->n++] = ps == 8 ? le64_get(rec->stack + i) : le32_get(rec->stack + i);
	/* a ThreadSample's stack is the thread's managed frames, leaf first;
	 * the event's header names the sampled thread */
	if (s->sample && !s->thread_time) {
		s->cpu = le32_get(rec->payload);
		s->nk = le32_get(rec->payload + 12);
		if (s->nk > s->n)
			s->nk = s->n;
	}
}

bool prof_frame_leaf(const struct prof_stack *s, uint32_t i)
{
	return s->sample && (i == 0 || i == s->nk);
}

const char *prof_func_name(struct sym_table *t, const struct prof_stack *s, uint32_t i,
			   char *buf, size_t len)
{
	struct sym_result r;

	if (sym_lookup(t, s->pid, s->ips[i], prof_frame_leaf(s, i), &r) && r.function)
		snprintf(buf, len, "%s!%s", r.module, r.function);
	else if (r.module)
		snprintf(buf, len, "%s+0x%" PRIx64, r.module, r.offset);
	else
		snprintf(buf, len, "0x%" PRIx64, s->ips[i]);
	return buf;
}

/* ---- the string table ---------------------------------------------------- */

int64_t prof_strtab_get(struct prof_strtab *t, const char *s)
{
	uint64_t h = fnv1a64_str(fnv1a64_start(), s), v;

	if (hmap_get(&t->idx, h, &v) && !strcmp(t->s[v - 1], s))
		return (int64_t)v - 1;
	if (array_grow((void **)&t->s, &t->cap, t->n, sizeof(*t->s), 256))
		return -1;
	t->s[t->n] = strdup(s);
	if (!t->s[t->n])
		return -1;
	/* a hash collision leaves the first string indexed: the second is
	 * then a separate frame with the same name, which costs nothing */
	if (!hmap_get(&t->idx, h, &v))
		hmap_put(&t->idx, h, t->n + 1);
	return (int64_t)t->n++;
}

void prof_strtab_free(struct prof_strtab *t)
{
	size_t i;

	for (i = 0; i < t->n; i++)
		free(t->s[i]);
	free(t->s);
	hmap_free(&t->idx);
}

/* ---- passes over a trace -------------------------------------------------- */

int prof_load_symbols(const char *path, struct sym_table *syms, struct prof_scan *scan,
		      struct tool_progress *pg)
{
	struct nt_reader *r = nt_reader_open(path);
	struct nt_rec rec;
	bool first = true;
	int err;

	if (!r)
		return -errno;
	while ((err = nt_reader_next(r, &rec)) > 0) {
		if (pg) {
			uint64_t total, done = nt_reader_offset(r, &total);

			tool_progress(pg, done, 2 * total);
		}
		sym_add_from_event(syms, &rec);
		if (first || rec.ts < scan->t0)
			scan->t0 = rec.ts;
		if (first || rec.ts > scan->t1)
			scan->t1 = rec.ts;
		first = false;
		scan->nsamples += prof_is_sample(&rec);
		scan->nthread_samples += prof_is_thread_sample(&rec);
	}
	nt_reader_free(r);
	return err < 0 ? err : 0;
}

struct fcount {
	int64_t frame;
	uint64_t n;
};

static int cmp_fcount(const void *a, const void *b)
{
	const struct fcount *x = a, *y = b;

	if (x->n != y->n)
		return x->n < y->n ? 1 : -1;
	return (x->frame > y->frame) - (x->frame < y->frame);
}

int prof_top_functions(const char *path, FILE *out, size_t top)
{
	struct prof_scan scan = { 0 };
	struct prof_strtab frames = { 0 };
	struct hmap counts = { 0 };
	struct fcount *fc = NULL;
	struct prof_stack *s = malloc(sizeof(*s));
	struct sym_table *syms = sym_table_new();
	struct nt_reader *r = NULL;
	struct nt_rec rec;
	uint64_t total = 0;
	char buf[1024];
	size_t i, n = 0;
	int err;

	if (!s || !syms) {
		err = -ENOMEM;
		goto out;
	}
	sym_use_perf_maps(syms, true);
	err = prof_load_symbols(path, syms, &scan, NULL);
	if (err || !scan.nsamples)
		goto out;
	r = nt_reader_open(path);
	if (!r) {
		err = -errno;
		goto out;
	}
	while ((err = nt_reader_next(r, &rec)) > 0) {
		int64_t fi;
		uint64_t v = 0;

		if (!prof_is_sample(&rec))
			continue;
		prof_get_stack(r, &rec, s);
		if (!s->n)
			continue;
		total++;
		fi = prof_strtab_get(&frames, prof_func_name(syms, s, 0, buf, sizeof(buf)));
		hmap_get(&counts, (uint64_t)fi, &v);
		hmap_put(&counts, (uint64_t)fi, v + 1);
	}
	fc = calloc(frames.n + 1, sizeof(*fc));
	if (!fc) {
		err = -ENOMEM;
		goto out;
	}
	for (i = 0; i < frames.n; i++) {
		uint64_t v = 0;

		hmap_get(&counts, i, &v);
		fc[n++] = (struct fcount){ (int64_t)i, v };
	}
	qsort(fc, n, sizeof(*fc), cmp_fcount);
	fprintf(out, "\ntop functions (leaf frame of %" PRIu64 " samples):\n", total);
	for (i = 0; i < n && i < top; i++)
		fprintf(out, "  %10" PRIu64 "  %5.1f%%  %s\n", fc[i].n,
			100.0 * (double)fc[i].n / (double)(total ? total : 1), frames.s[fc[i].frame]);
out:
	free(fc);
	free(s);
	hmap_free(&counts);
	prof_strtab_free(&frames);
	nt_reader_free(r);
	sym_table_free(syms);
	return err < 0 ? err : 0;
}
