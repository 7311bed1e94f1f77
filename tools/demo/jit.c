// SPDX-License-Identifier: MIT
/*
 * Simulated JIT and rundown (see jit.h).
 *
 * Each JIT thread owns one table: an array of entries it alone writes and a
 * count. Publishing fills entry[count] with plain stores, then stores
 * count + 1 with release semantics; rundown loads the count with acquire
 * semantics and reads entries below it, which are complete and never written
 * again. Neither side takes a lock or waits for the other: a method whose
 * count store lands after rundown loaded the count is simply missed, and an
 * entry is read at most once per rundown, so it cannot be duplicated.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "atomics.h"
#include "clock.h"
#include "clr_events.h"
#include "jit.h"
#include "sampler.h"

struct jit_entry {
	uint64_t method_id;
	uint64_t start;
	uint32_t size, token, flags;
	char ns[16];			/* "Demo.Jit.T<t>" */
	char name[24];			/* "M<t>_<i>" */
	char pad[8];			/* one cache line per entry: a publish dirties one line */
} __attribute__((aligned(64)));

struct jit_table {
	struct jit_entry *e;
	uint32_t count;			/* release-stored by the owner, acquire-loaded by rundown */
	pthread_t th;
	bool started;
} __attribute__((aligned(64)));		/* owners never share a cache line */

static struct jit_table *tables;
static uint32_t nthreads, capacity, rate;
static int jit_stop_flag;			/* atomic */

#define JIT_SIGNATURE "void  (int32,class System.String)"
#define JIT_METHOD_FLAGS 0x8u		/* Jitted */

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

	nthreads = o->threads;
	capacity = o->capacity;
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
	return 0;
}

bool jit_publish(uint32_t t)
{
	struct jit_table *tb = &tables[t];
	/* only this thread stores count: a relaxed load of its own value is enough */
	uint32_t i = rp_load_relaxed(&tb->count);
	struct jit_entry *e;
	char *p;

	if (i >= capacity)
		return false;
	e = &tb->e[i];
	e->method_id = JIT_METHOD_ID(t, i);
	e->start = 0x7f3b00000000ull + ((uint64_t)t << 32) + (uint64_t)i * 256;
	e->size = 16 + i % 200;
	e->token = 0x06000000u | (i & 0xffffffu);
	e->flags = JIT_METHOD_FLAGS;
	memcpy(e->ns, "Demo.Jit.T", 10);
	put_dec(e->ns + 10, t);
	e->name[0] = 'M';
	p = put_dec(e->name + 1, t);
	*p++ = '_';
	put_dec(p, i);
	/* pairs with the acquire loads of the count in jit_rundown(): the
	 * entry is complete before the count that covers it is visible */
	rp_store_release(&tb->count, i + 1);
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

static void *jit_main(void *arg)
{
	uint32_t t = (uint32_t)(uintptr_t)arg;
	uint64_t start = rp_clock_mono_ns(), n = 0;

	sampler_add_self(true);
	while (!rp_load_relaxed(&jit_stop_flag)) {
		uint64_t el = rp_clock_mono_ns() - start;
		uint64_t due = rate ? el / 1000 * rate / 1000000 + 1 : n + 64;

		while (n < due && jit_publish(t))
			n++;
		if (n < due)			/* full: nothing left to publish */
			rp_clock_sleep_ns(50 * 1000000ull);
		else if (rate)
			rp_clock_sleep_ns(1000000ull);
	}
	sampler_remove_self();
	return NULL;
}

int jit_start(void)
{
	uint32_t t;

	for (t = 0; t < nthreads; t++) {
		if (pthread_create(&tables[t].th, NULL, jit_main, (void *)(uintptr_t)t))
			return -1;
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
	}
	clr_rd_dcend_init();
	for (t = 0; t < nthreads && clr_rd_methods_enabled(); t++) {
		const struct jit_table *tb = &tables[t];
		/* a fresh load: methods published since are included when seen;
		 * entries below the count are complete (pairs with the release
		 * store of the count in jit_publish()) */
		uint32_t n = rp_load_acquire(&tb->count), i;

		for (i = 0; i < n; i++) {
			const struct jit_entry *e = &tb->e[i];
			struct clr_method cm = {
				.method_id = e->method_id, .module_id = mods[CLR_DEMO_MODULE].module_id,
				.start = e->start, .rejit_id = 0, .size = e->size, .token = e->token,
				.flags = e->flags, .ns = e->ns, .name = e->name,
				.signature = JIT_SIGNATURE,
			};

			clr_rd_method(&cm);
			r->emitted++;
		}
	}
	for (m = 0; m < nmods; m++)
		clr_rd_module(&mods[m]);
	for (m = 0; m < nmods; m++)
		clr_rd_assembly(&mods[m], 0x7f3a50000000ull);
	clr_rd_appdomain(0x7f3a50000000ull, "ringpipe-demo");
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
	fprintf(stderr, "rundown session %d: published-before %" PRIu64 " emitted %" PRIu64 "\n",
		session_id, r.before, r.emitted);
	/* per thread, so a test can check that each thread's prefix is complete */
	for (t = 0; t < nthreads && t < JIT_MAX_THREADS && n < sizeof(line) - 12; t++)
		n += (size_t)snprintf(line + n, sizeof(line) - n, "%s%u", t ? "," : "", r.per_thread[t]);
	line[n] = 0;
	fprintf(stderr, "rundown session %d: per-thread-before %s\n", session_id, line);
}
