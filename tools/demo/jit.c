// SPDX-License-Identifier: MIT
/*
 * Simulated JIT and rundown (see jit.h).
 *
 * Each JIT thread owns one table of `capacity` slots, which it alone writes,
 * and a count of the methods it published. Method i lives in slot
 * i % capacity until method i + capacity replaces it (the old one is
 * unloaded first). A slot is guarded by a sequence number, odd while its
 * owner rewrites it: rundown copies a slot between two loads of the
 * sequence and keeps the copy only if both were the same even value, so a
 * method is either complete in the rundown or absent (replaced meanwhile),
 * never torn. Each slot is read once per rundown and a method lives in one
 * slot, so none is listed twice. Neither side takes a lock or waits for the
 * other.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/atomics.h"
#include "core/clock.h"
#include "clr_events.h"
#include "jit.h"
#include "sampler.h"

/* Every field is stored and loaded atomically (relaxed): a reader may copy a
 * slot while its owner rewrites it, and then discards the copy. The names
 * follow from method_id (method_names()). */
struct jit_entry {
	uint32_t seq;			/* even: stable (0: never written), odd: rewriting */
	uint32_t size, token, flags;
	uint64_t method_id;
	uint64_t start;
} __attribute__((aligned(64)));		/* a publish dirties its slot's line only */

struct jit_names {
	char ns[16];			/* "Demo.Jit.T<t>" */
	char name[24];			/* "M<t>_<i>" */
};

struct jit_table {
	struct jit_entry *e;
	uint32_t count;			/* release-stored by the owner, acquire-loaded by rundown */
	pthread_t th;
	bool started;
} __attribute__((aligned(64)));		/* owners never share a cache line */

static struct jit_table *tables;
static uint32_t nthreads, capacity, rate;
static uint64_t code_base = JIT_CODE_FALLBACK;	/* set once, before any thread publishes */
static int jit_stop_flag;			/* atomic */

#define JIT_SIGNATURE "void  (int32,class System.String)"
#define JIT_METHOD_FLAGS 0x8u		/* Jitted */
#define JIT_IL_SIZE(i) (8 + (uint32_t)((i) % 100))

/* Code methods' MethodIDs and tokens, apart from the published methods'. */
#define JIT_CODE_METHOD_ID(k) (0x7f3a30000000ull + (uint64_t)(k) * 64)
#define JIT_CODE_TOKEN(k) (0x06001000u + (uint32_t)(k))

/* ---- published methods ----------------------------------------------------- */

static char *put_dec(char *p, uint64_t v)
{
	char tmp[24];
	int n = 0;

	do
		tmp[n++] = (char)('0' + v % 10);
	while ((v /= 10));
	while (n)
		*p++ = tmp[--n];
	*p = 0;
	return p;
}

int jit_init(const struct jit_opts *o)
{
	uint32_t t;
	void *at;

	nthreads = o->threads;
	capacity = o->capacity ? o->capacity : 1;
	if (capacity > JIT_MAX_LIVE)
		capacity = JIT_MAX_LIVE;
	rate = o->rate;
	if (!nthreads)
		return 0;
	tables = aligned_alloc(64, sizeof(*tables) * nthreads);
	if (!tables)
		return -1;
	memset(tables, 0, sizeof(*tables) * nthreads);
	for (t = 0; t < nthreads; t++) {
		tables[t].e = aligned_alloc(64, sizeof(struct jit_entry) * (size_t)capacity);
		if (!tables[t].e)
			return -1;
		/* touched now, so that publishing never takes a page fault (which
		 * would contend on the mm lock with whatever rundown is doing) */
		memset(tables[t].e, 0, sizeof(struct jit_entry) * (size_t)capacity);
	}
	/* the published methods' "code": reserved so that nothing else (a
	 * library, a thread's stack) is ever mapped there and a sample's
	 * address can only be the code it really is */
	at = mmap(NULL, (size_t)nthreads * JIT_CODE_STRIDE, PROT_NONE,
		  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (at == MAP_FAILED)
		fprintf(stderr, "ringpipe-demo: cannot reserve the JIT code range: %s\n",
			strerror(errno));
	else
		code_base = (uintptr_t)at;
	fprintf(stderr, "jit-code-base 0x%" PRIx64 "\n", code_base);
	return 0;
}

/* Method i of thread t, as it is published into slot i % capacity. */
static void method_fill(struct jit_entry *e, uint32_t t, uint64_t i)
{
	uint64_t slot = i % capacity;

	e->method_id = JIT_METHOD_ID(t, i);
	e->start = code_base + t * JIT_CODE_STRIDE + slot * 256;
	e->size = 16 + (uint32_t)(i % 200);
	e->token = 0x06000000u | (uint32_t)(i & 0xffffffu);
	e->flags = JIT_METHOD_FLAGS;
}

static void method_names(uint64_t method_id, struct jit_names *n)
{
	uint64_t t = (method_id >> 40) - 1, i = method_id & ((1ull << 40) - 1);
	char *p;

	memcpy(n->ns, "Demo.Jit.T", 10);
	put_dec(n->ns + 10, t);
	n->name[0] = 'M';
	p = put_dec(n->name + 1, t);
	*p++ = '_';
	put_dec(p, i);
}

static void method_clr(const struct jit_entry *e, struct jit_names *n, struct clr_method *cm)
{
	unsigned nmods;
	const struct clr_module *mods = clr_demo_modules(&nmods);

	method_names(e->method_id, n);
	*cm = (struct clr_method){
		.method_id = e->method_id, .module_id = mods[CLR_DEMO_MODULE].module_id,
		.start = e->start, .rejit_id = 0, .size = e->size, .token = e->token,
		.flags = e->flags, .ns = n->ns, .name = n->name, .signature = JIT_SIGNATURE,
	};
}

/* The slot's fields, one relaxed access each (the sequence orders them). */
static void entry_store(struct jit_entry *e, const struct jit_entry *v)
{
	rp_store_relaxed(&e->size, v->size);
	rp_store_relaxed(&e->token, v->token);
	rp_store_relaxed(&e->flags, v->flags);
	rp_store_relaxed(&e->method_id, v->method_id);
	rp_store_relaxed(&e->start, v->start);
}

static void entry_load(const struct jit_entry *e, struct jit_entry *v)
{
	v->size = rp_load_relaxed(&e->size);
	v->token = rp_load_relaxed(&e->token);
	v->flags = rp_load_relaxed(&e->flags);
	v->method_id = rp_load_relaxed(&e->method_id);
	v->start = rp_load_relaxed(&e->start);
}

bool jit_publish(uint32_t t)
{
	struct jit_table *tb = &tables[t];
	/* only this thread stores count: a relaxed load of its own value is enough */
	uint32_t i = rp_load_relaxed(&tb->count);
	struct jit_entry *e = &tb->e[i % capacity], n, old;
	struct jit_names names;
	struct clr_method cm;
	uint32_t seq;

	if (i >= capacity) {		/* the slot's method is unloaded, its code freed */
		entry_load(e, &old);	/* its own stores: nothing to order */
		method_clr(&old, &names, &cm);
		clr_method_unload(&cm);
	}
	method_fill(&n, t, i);
	method_clr(&n, &names, &cm);
	clr_method_jitting_started(&cm, JIT_IL_SIZE(i));
	/* only this thread stores seq */
	seq = rp_load_relaxed(&e->seq);
	rp_store_relaxed(&e->seq, seq + 1);
	/* pairs with the fence in read_entry(): a reader that copies any of
	 * the new fields sees the odd sequence when it checks again */
	rp_smp_mb();
	entry_store(e, &n);
	/* pairs with the acquire load of seq in read_entry(): the fields are
	 * complete before the even value that vouches for them */
	rp_store_release(&e->seq, seq + 2);
	/* pairs with the acquire loads of the count in jit_rundown() */
	rp_store_release(&tb->count, i + 1);
	clr_method_load(&cm);
	return true;
}

uint64_t jit_published(void)
{
	uint64_t n = 0;
	uint32_t t;

	for (t = 0; t < nthreads; t++)
		n += rp_load_relaxed(&tables[t].count);	/* a total: reads no entry */
	return n;
}

SAMPLER_MANAGED(jit_run) static void *jit_main(void *arg)
{
	uint32_t t = (uint32_t)(uintptr_t)arg;
	uint64_t start = rp_clock_mono_ns(), n = 0;

	sampler_add_self(true);
	while (!rp_load_relaxed(&jit_stop_flag)) {
		uint64_t el = rp_clock_mono_ns() - start;
		uint64_t due = rate ? el / 1000 * rate / 1000000 + 1 : n + 64;

		while (n < due && !rp_load_relaxed(&jit_stop_flag)) {
			jit_publish(t);
			n++;
		}
		if (rate)
			rp_clock_sleep_ns(1000000ull);
	}
	sampler_remove_self();
	return NULL;
}

SAMPLER_CODE_RANGE(jit_run);

int jit_start(void)
{
	static const struct sampler_code code[] = {
		SAMPLER_CODE(jit_run, "Demo.Jit", "CompileLoop", "void  (int32)"),
	};
	uint32_t t;

	if (sampler_code_add(code, 1))
		return -1;
	for (t = 0; t < nthreads; t++) {
		if (pthread_create(&tables[t].th, NULL, jit_main, (void *)(uintptr_t)t))
			return -1;
		pthread_setname_np(tables[t].th, "demo-jit");
		tables[t].started = true;
	}
	return 0;
}

void jit_stop(void)
{
	uint32_t t;

	rp_store_relaxed(&jit_stop_flag, 1);
	for (t = 0; t < nthreads; t++)
		if (tables[t].started)
			pthread_join(tables[t].th, NULL);
	for (t = 0; t < nthreads; t++)
		tables[t].started = false;
	rp_store_relaxed(&jit_stop_flag, 0);
}

/* A consistent copy of a slot's method, or false (empty, or being replaced). */
static bool read_entry(const struct jit_entry *e, struct jit_entry *out)
{
	/* pairs with the release store of the even seq in jit_publish() */
	uint32_t s1 = rp_load_acquire(&e->seq);

	if (!s1 || (s1 & 1))
		return false;
	entry_load(e, out);
	/* pairs with the fence in jit_publish(): orders the copy before the
	 * second load, which then sees the odd value if a rewrite overlapped */
	rp_smp_mb();
	return rp_load_relaxed(&e->seq) == s1;
}

static void rundown_code(struct jit_rundown_result *r)
{
	unsigned nmods;
	const struct clr_module *mods = clr_demo_modules(&nmods);
	uint32_t n, k;
	const struct sampler_code *codes = sampler_code_table(&n);

	for (k = 0; k < n && clr_rd_methods_enabled(); k++) {
		struct clr_method cm = {
			.method_id = JIT_CODE_METHOD_ID(k),
			.module_id = mods[CLR_DEMO_MODULE].module_id,
			.start = (uintptr_t)codes[k].start,
			.size = (uint32_t)(codes[k].end - codes[k].start),
			.token = JIT_CODE_TOKEN(k),
			.flags = JIT_METHOD_FLAGS, .ns = codes[k].ns, .name = codes[k].name,
			.signature = codes[k].signature,
		};

		clr_rd_method(&cm);
		r->code++;
	}
}

void jit_rundown(struct jit_rundown_result *r)
{
	unsigned nmods, m;
	const struct clr_module *mods = clr_demo_modules(&nmods);
	uint32_t t;

	memset(r, 0, sizeof(*r));
	/* what was published when rundown began: pairs with the release store
	 * of the count in jit_publish() */
	for (t = 0; t < nthreads && t < JIT_MAX_THREADS; t++) {
		r->per_thread[t] = rp_load_acquire(&tables[t].count);
		r->before += r->per_thread[t];
		r->live_before += r->per_thread[t] < capacity ? r->per_thread[t] : capacity;
	}
	clr_rd_dcend_init();
	rundown_code(r);
	for (t = 0; t < nthreads && clr_rd_methods_enabled(); t++) {
		const struct jit_table *tb = &tables[t];
		/* a fresh load: slots filled since are included when seen (pairs
		 * with the release store of the count in jit_publish()) */
		uint32_t n = rp_load_acquire(&tb->count), s;

		for (s = 0; s < n && s < capacity; s++) {
			struct jit_entry e;
			struct jit_names names;
			struct clr_method cm;

			/* false: replaced while we looked, the old method is unloaded */
			if (!read_entry(&tb->e[s], &e))
				continue;
			method_clr(&e, &names, &cm);
			clr_rd_method(&cm);
			r->emitted++;
		}
	}
	for (m = 0; m < nmods; m++)
		clr_rd_module(&mods[m]);
	for (m = 0; m < nmods; m++)
		clr_rd_assembly(&mods[m], CLR_APPDOMAIN_ID);
	clr_rd_appdomain(CLR_APPDOMAIN_ID, "ringpipe-demo");
	clr_rd_runtime_info("ringpipe-demo");
	clr_rd_dcend_complete();
}

void jit_rundown_stopping(struct rp_provider *provider, int session_id, uint64_t keywords,
			  uint8_t level, void *ctx)
{
	struct jit_rundown_result r;
	char line[64 + 12 * JIT_MAX_THREADS];
	size_t n = 0;
	uint32_t t;

	(void)provider, (void)keywords, (void)level, (void)ctx;
	jit_rundown(&r);
	fprintf(stderr, "rundown session %d: published-before %" PRIu64 " emitted %" PRIu64
		" live-before %" PRIu64 " code %" PRIu64 "\n", session_id, r.before, r.emitted,
		r.live_before, r.code);
	/* per thread, so a test can check that each thread's prefix is complete */
	for (t = 0; t < nthreads && t < JIT_MAX_THREADS && n < sizeof(line) - 12; t++)
		n += (size_t)snprintf(line + n, sizeof(line) - n, "%s%u", t ? "," : "", r.per_thread[t]);
	line[n] = 0;
	fprintf(stderr, "rundown session %d: per-thread-before %s\n", session_id, line);
}
