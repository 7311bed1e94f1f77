// SPDX-License-Identifier: MIT
/*
 * Samples and symbol facts into nettrace (see sample_out.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <ringpipe/ringpipe.h>

#include "util/bytebuf.h"
#include "common/fnv1a.h"
#include "core/clock.h"
#include "util/hmap.h"
#include "nettrace/nettrace.h"
#include "capture/sample_out.h"
#include "util/utf.h"

enum { M_SAMPLE, M_MODULE, M_JIT, M_THREAD, M_NR };

#define NT_FIELD(n, t) { n, NT_##t, 0, 0, NULL },
static const struct nt_field sample_fields[] = { SAMPLE_FIELDS(NT_FIELD) };
static const struct nt_field module_fields[] = { SYM_MODULE_FIELDS(NT_FIELD) };
static const struct nt_field jit_fields[] = { SYM_JIT_FIELDS(NT_FIELD) };
static const struct nt_field thread_fields[] = { SYM_THREAD_FIELDS(NT_FIELD) };

static const struct nt_event_desc descs[M_NR] = {
	[M_SAMPLE] = { .provider = SAMPLER_PROVIDER, .event_id = SAMPLER_EV_SAMPLE,
		       .name = "Sample", .level = 4, .nfields = SAMPLE_NFIELDS(sample_fields),
		       .fields = sample_fields },
	[M_MODULE] = { .provider = SYM_PROVIDER, .event_id = SYM_EV_MODULE,
		       .name = "ModuleLoad", .level = 4, .nfields = SAMPLE_NFIELDS(module_fields),
		       .fields = module_fields },
	[M_JIT] = { .provider = SYM_PROVIDER, .event_id = SYM_EV_JIT,
		    .name = "JitSymbol", .level = 4, .nfields = SAMPLE_NFIELDS(jit_fields),
		    .fields = jit_fields },
	[M_THREAD] = { .provider = SYM_PROVIDER, .event_id = SYM_EV_THREAD,
		       .name = "Thread", .level = 4, .nfields = SAMPLE_NFIELDS(thread_fields),
		       .fields = thread_fields },
};

/* A queued event: its bytes live in the writer's pool. */
struct qev {
	uint64_t ts;
	uint64_t order;		/* queue order: ties keep it */
	uint32_t pid, tid, cpu;
	uint8_t kind;
	uint32_t nstack;
	size_t stack_off;	/* in pool, 8-byte IPs */
	size_t payload_off;
	uint32_t payload_len;
};

struct sample_writer {
	struct sample_writer_opts o;
	struct qev *q;
	size_t nq, capq;
	struct bytebuf pool;
	struct hmap threads;	/* pid << 32 | tid: name queued */
	size_t modules_done, jits_done;
	uint64_t samples;
};

/* Appenders that reserve room (bytebuf's bb_uN leave that to the caller);
 * a failure sets the buffer's sticky oom, checked once per event. */
static void app8(struct bytebuf *b, uint8_t v) { bb_append(b, &v, 1); }
static void app32(struct bytebuf *b, uint32_t v) { bb_append(b, &v, 4); }
static void app64(struct bytebuf *b, uint64_t v) { bb_append(b, &v, 8); }

void sample_payload(const struct rp_sample_rec *r, uint8_t out[SAMPLE_PAYLOAD_LEN])
{
	uint32_t nk = r->nkernel, nu = r->nuser;

	memcpy(out, &r->cpu, 4);
	memcpy(out + 4, &r->cgroup_id, 8);
	memcpy(out + 12, &nk, 4);
	memcpy(out + 16, &nu, 4);
	/* the sampled process: in a trace of several processes (ringpipe
	 * record) the event's own process id is the recorder's */
	memcpy(out + 20, &r->pid, 4);
}

/* UTF-8 text as UTF-16LE with a terminator. */
static void put_str16(struct bytebuf *b, const char *s)
{
	utf8_to_utf16le(b, s, strlen(s), 1);
}

void sample_enc_module(struct bytebuf *b, const struct sym_module *m)
{
	app32(b, m->pid);
	app64(b, m->start);
	app64(b, m->end);
	app64(b, m->offset);
	put_str16(b, m->path);
	put_str16(b, m->build_id);
}

void sample_enc_jit(struct bytebuf *b, const struct sym_jit *j)
{
	app32(b, j->pid);
	app64(b, j->start);
	app64(b, j->size);
	put_str16(b, j->name);
}

void sample_enc_thread(struct bytebuf *b, uint32_t pid, uint32_t tid, const char *name)
{
	app32(b, pid);
	app32(b, tid);
	put_str16(b, name);
}

struct sample_writer *sample_writer_new(const struct sample_writer_opts *o)
{
	struct sample_writer *w = calloc(1, sizeof(*w));

	if (w)
		w->o = *o;
	return w;
}

static struct qev *enqueue(struct sample_writer *w, uint8_t kind, uint64_t ts, uint32_t pid,
			   uint32_t tid)
{
	struct qev *e;

	if (array_grow((void **)&w->q, &w->capq, w->nq, sizeof(*w->q), 4096))
		return NULL;
	e = &w->q[w->nq];
	*e = (struct qev){ .ts = ts, .order = w->nq, .pid = pid, .tid = tid, .kind = kind,
			   .payload_off = w->pool.len };
	w->nq++;
	return e;
}

static int thread_name(struct sample_writer *w, uint32_t pid, uint32_t tid, const char *comm,
		       uint64_t ts)
{
	uint64_t key = (uint64_t)pid << 32 | tid, v, h;
	char name[17];
	struct qev *e;

	memcpy(name, comm, 16);
	name[16] = 0;
	/* a thread's name changes at exec and with prctl(PR_SET_NAME): a new
	 * Thread event each time its hash does */
	h = fnv1a64_str(fnv1a64_start(), name);
	if (hmap_get(&w->threads, key, &v) && v == h)
		return 0;
	if (hmap_put(&w->threads, key, h))
		return -ENOMEM;
	e = enqueue(w, M_THREAD, ts, pid, tid);
	if (!e)
		return -ENOMEM;
	sample_enc_thread(&w->pool, pid, tid, name);
	e->payload_len = (uint32_t)(w->pool.len - e->payload_off);
	return w->pool.oom ? -ENOMEM : 0;
}

int sampler_write(struct sample_writer *w, const struct rp_sample_rec *r)
{
	uint32_t nk = r->nkernel < RP_SAMPLE_MAX_FRAMES ? r->nkernel : RP_SAMPLE_MAX_FRAMES;
	uint32_t nu = r->nuser < RP_SAMPLE_MAX_FRAMES ? r->nuser : RP_SAMPLE_MAX_FRAMES;
	uint8_t pl[SAMPLE_PAYLOAD_LEN];
	struct qev *e;
	int err;

	/* the name first: at equal times, queue order decides */
	err = thread_name(w, r->pid, r->tid, r->comm, r->ts_ns);
	if (err)
		return err;
	e = enqueue(w, M_SAMPLE, r->ts_ns, r->pid, r->tid);
	if (!e)
		return -ENOMEM;
	e->cpu = r->cpu;
	sample_payload(r, pl);
	bb_append(&w->pool, pl, sizeof(pl));
	e->payload_len = sizeof(pl);
	/* the 8-byte alignment keeps the stack readable in place */
	while (w->pool.len % 8)
		app8(&w->pool, 0);
	e->stack_off = w->pool.len;
	e->nstack = nk + nu;
	bb_append(&w->pool, r->kstack, nk * 8);
	bb_append(&w->pool, r->ustack, nu * 8);
	w->samples++;
	return w->pool.oom ? -ENOMEM : 0;
}

int sample_writer_symbols(struct sample_writer *w, struct sym_table *t, uint64_t ts)
{
	for (; w->modules_done < sym_nmodules(t); w->modules_done++) {
		const struct sym_module *m = sym_module_at(t, w->modules_done);
		struct qev *e = enqueue(w, M_MODULE, ts, m->pid, m->pid);

		if (!e)
			return -ENOMEM;
		sample_enc_module(&w->pool, m);
		e->payload_len = (uint32_t)(w->pool.len - e->payload_off);
	}
	for (; w->jits_done < sym_njit(t); w->jits_done++) {
		const struct sym_jit *j = sym_jit_at(t, w->jits_done);
		struct qev *e = enqueue(w, M_JIT, ts, j->pid, j->pid);

		if (!e)
			return -ENOMEM;
		sample_enc_jit(&w->pool, j);
		e->payload_len = (uint32_t)(w->pool.len - e->payload_off);
	}
	return w->pool.oom ? -ENOMEM : 0;
}

uint64_t sample_writer_samples(const struct sample_writer *w)
{
	return w->samples;
}

static int cmp_qev(const void *a, const void *b)
{
	const struct qev *x = a, *y = b;

	if (x->ts != y->ts)
		return x->ts < y->ts ? -1 : 1;
	return x->order < y->order ? -1 : x->order > y->order;
}

int sample_writer_finish(struct sample_writer *w, uint64_t end_ns)
{
	struct nt_writer_opts wo = { .sz = sizeof(wo) };
	struct hmap seqs = { 0 };
	struct nt_fd_sink sink;
	struct nt_writer *nw;
	struct timespec rt;
	uint32_t ids[M_NR];
	size_t i;
	int err = 0;

	if (w->pool.oom) {
		err = -ENOMEM;
		goto out;
	}
	clock_gettime(CLOCK_REALTIME, &rt);
	nt_fd_sink_init(&sink, w->o.fd);
	wo.format = w->o.format;
	wo.pid = w->o.pid;
	/* the trace clock is bpf_ktime_get_ns()'s: CLOCK_MONOTONIC ns */
	wo.tick_freq = 1000000000ull;
	wo.sync_ticks = w->o.t0_ns;
	{
		uint64_t now_mono = rp_clock_mono_ns();
		uint64_t now_rt = (uint64_t)rt.tv_sec * 1000000000ull + (uint64_t)rt.tv_nsec;

		wo.sync_unix_ns = now_rt - (now_mono - w->o.t0_ns);
	}
	wo.sampling_interval_ns = w->o.freq_hz ? 1000000000u / w->o.freq_hz : 0;
	nw = nt_writer_new(&sink.base, &wo);
	if (!nw) {
		err = -errno;
		goto out;
	}
	for (i = 0; i < M_NR && !err; i++)
		err = nt_writer_define(nw, &descs[i], &ids[i]);
	array_sort(w->q, w->nq, sizeof(*w->q), cmp_qev);
	for (i = 0; i < w->nq && !err; i++) {
		const struct qev *q = &w->q[i];
		struct nt_event ev = { 0 };
		uint64_t seq = 1;

		hmap_get(&seqs, (uint64_t)q->pid << 32 | q->tid, &seq);
		seq++;
		if (hmap_put(&seqs, (uint64_t)q->pid << 32 | q->tid, seq)) {
			err = -ENOMEM;
			break;
		}
		ev.meta_id = ids[q->kind];
		ev.seq = (uint32_t)seq;
		ev.pid = q->pid;
		ev.tid = q->tid;
		ev.cpu = q->cpu;
		ev.ts = q->ts;
		ev.payload = w->pool.p + q->payload_off;
		ev.payload_len = q->payload_len;
		ev.stack = q->nstack ? (const uint64_t *)(w->pool.p + q->stack_off) : NULL;
		ev.stack_depth = q->nstack;
		ev.sorted = true;
		err = nt_writer_event(nw, &ev);
	}
	if (!err)
		err = nt_writer_finish(nw, end_ns > (w->nq ? w->q[w->nq - 1].ts : 0) ?
				       end_ns : w->q[w->nq - 1].ts);
	if (!err)
		err = nt_writer_error(nw);
	nt_writer_free(nw);
out:
	hmap_free(&seqs);
	hmap_free(&w->threads);
	bb_free(&w->pool);
	free(w->q);
	free(w);
	return err;
}
