// SPDX-License-Identifier: MIT
/*
 * The simulated managed heap (see heap.h).
 *
 * Objects live in a fixed array of slots; references are slot numbers, so
 * the graph's shape never changes and a walk always sees exactly N live
 * objects. "Allocating" replaces the object in a slot with a new one of the
 * same type at a fresh address (the old one is garbage), which is enough to
 * give the GC events realistic numbers without a real collector.
 *
 * Stop-the-world: an allocating thread runs between world_enter() and
 * world_leave() (its "cooperative mode") and leaves at least every
 * ALLOC_BATCH allocations, before it sleeps and before it collects. A GC
 * sets gc_active, which keeps threads from entering, and waits until none
 * is inside. Each thread only touches the slots it owns (slot % threads), so
 * allocating threads never race each other, and the world lock orders all
 * of their writes before the GC's reads.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/atomics.h"
#include "core/clock.h"
#include "heap.h"
#include "sampler.h"

#define ALLOC_BATCH 64u
#define TICK_BYTES (100u * 1024u)		/* GCAllocationTick every ~100 KB per thread */
#define GEN0_BUDGET (4u * 1024u * 1024u)	/* bytes allocated between ordinary GCs */
#define LOH_THRESHOLD 85000u
#define ALLOC_BYTES_PER_SEC (4u * 1024u * 1024u) /* per allocating thread */
#define MAX_REFS 4

enum { COR_CLASS = 0x12, COR_STRING = 0x0e, COR_SZARRAY = 0x1d };

struct type_def {
	const char *name;
	uint8_t module;
	uint8_t cor;
	uint32_t flags;
	uint32_t size;			/* base size; arrays and strings add a length */
	uint32_t per_elem;		/* 0: fixed size */
	bool refs;			/* can hold references */
	uint32_t weight;		/* relative frequency */
};

static const struct type_def types[] = {
	{ "System.Object", 0, COR_CLASS, 0, 24, 0, false, 3 },
	{ "System.String", 0, COR_STRING, 0, 22, 2, false, 14 },
	{ "System.Object[]", 0, COR_SZARRAY, CLR_TYPEFLAG_ARRAY, 24, 8, true, 6 },
	{ "System.Byte[]", 0, COR_SZARRAY, CLR_TYPEFLAG_ARRAY, 24, 1, false, 4 },
	{ "System.Int32[]", 0, COR_SZARRAY, CLR_TYPEFLAG_ARRAY, 24, 4, false, 2 },
	{ "System.Action", 0, COR_CLASS, 0x1 /* Delegate */, 64, 0, true, 2 },
	{ "System.Collections.Generic.List`1[Demo.Order]", 0, COR_CLASS, 0, 32, 0, true, 5 },
	{ "System.Collections.Generic.Dictionary`2[System.String,Demo.Customer]", 0, COR_CLASS, 0,
	  80, 0, true, 2 },
	{ "System.Threading.Thread", 0, COR_CLASS, CLR_TYPEFLAG_FINALIZABLE, 72, 0, true, 1 },
	{ "Demo.Node", 1, COR_CLASS, 0, 40, 0, true, 16 },
	{ "Demo.Customer", 1, COR_CLASS, 0, 56, 0, true, 6 },
	{ "Demo.Order", 1, COR_CLASS, 0, 48, 0, true, 10 },
	{ "Demo.OrderLine", 1, COR_CLASS, 0, 40, 0, true, 12 },
	{ "Demo.Cache", 1, COR_CLASS, 0, 64, 0, true, 1 },
	{ "Demo.Session", 1, COR_CLASS, CLR_TYPEFLAG_FINALIZABLE, 48, 0, true, 2 },
	{ "Demo.Buffer", 1, COR_CLASS, 0, 32, 0, true, 3 },
};
#define NTYPES (sizeof(types) / sizeof(types[0]))
#define TYPE_CACHE 13	/* Demo.Cache: the root object */


static uint64_t type_id(unsigned t)
{
	return 0x7f3a30000000ull + (uint64_t)t * 0x80;
}

struct obj {
	uint64_t addr;
	uint32_t size;
	uint16_t type;
	uint8_t gen;			/* 0, 1, 2, or 3 for the large object heap */
	uint8_t nref;
	uint32_t ref[MAX_REFS];		/* slot numbers */
};

struct root {
	uint32_t slot;
	uint8_t kind;
	uint32_t flags;
	uint64_t id;
};

static struct obj *objs;
static uint32_t nobjs;
static struct root *roots;
static uint32_t nroots, nroots_cap;
static uint32_t pinned_roots, handle_roots;
static const char *report_path;
static uint32_t nthreads;

/* ---- stop-the-world ------------------------------------------------------ */

static pthread_mutex_t world_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t world_cond = PTHREAD_COND_INITIALIZER;
static bool gc_active;			/* world_lock */
static uint32_t in_world;		/* world_lock: threads between enter and leave */

static void world_enter(void)
{
	pthread_mutex_lock(&world_lock);
	while (gc_active)
		pthread_cond_wait(&world_cond, &world_lock);
	in_world++;
	pthread_mutex_unlock(&world_lock);
}

static void world_leave(void)
{
	pthread_mutex_lock(&world_lock);
	in_world--;
	pthread_cond_broadcast(&world_cond);
	pthread_mutex_unlock(&world_lock);
}

/* Waits for the running GC (if any) to end, then stops the allocating threads. */
static void suspend_world(void)
{
	pthread_mutex_lock(&world_lock);
	while (gc_active)
		pthread_cond_wait(&world_cond, &world_lock);
	gc_active = true;
	while (in_world)
		pthread_cond_wait(&world_cond, &world_lock);
	pthread_mutex_unlock(&world_lock);
}

static void restart_world(void)
{
	pthread_mutex_lock(&world_lock);
	gc_active = false;
	pthread_cond_broadcast(&world_cond);
	pthread_mutex_unlock(&world_lock);
}

/* ---- counters ------------------------------------------------------------- */

static uint32_t gc_count;		/* written with the world stopped */
static uint64_t total_allocs, total_alloc_bytes;	/* atomic, relaxed: totals only */
static uint64_t since_gc;		/* atomic: bytes allocated since the last GC */
static uint32_t gc_seq;			/* world stopped: ordinary GCs, picks gen1 */

uint64_t heap_gc_count(void)
{
	return rp_load_relaxed(&gc_count);
}

uint64_t heap_alloc_count(void)
{
	return rp_load_relaxed(&total_allocs);
}

uint64_t heap_alloc_bytes(void)
{
	return rp_load_relaxed(&total_alloc_bytes);
}

/* ---- building ------------------------------------------------------------- */

static uint64_t rnd(uint64_t *s)
{
	/* xorshift64*: deterministic for a --seed, cheap, good enough for shapes */
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545f4914f6cdd1dull;
}

static uint32_t weight_sum;

static unsigned pick_type(uint64_t *s)
{
	uint32_t w = (uint32_t)(rnd(s) % weight_sum);
	unsigned t;

	for (t = 0; t < NTYPES; t++) {
		if (w < types[t].weight)
			return t;
		w -= types[t].weight;
	}
	return 0;
}

static uint32_t obj_size(unsigned t, uint64_t *s)
{
	const struct type_def *d = &types[t];
	uint64_t len;

	if (!d->per_elem)
		return d->size;
	/* one byte array in 500 is large enough for the large object heap */
	if (d->per_elem == 1 && rnd(s) % 500 == 0)
		len = LOH_THRESHOLD + rnd(s) % 100000;
	else
		len = rnd(s) % 64;
	return (uint32_t)((d->size + len * d->per_elem + 7) & ~7ull);
}

static uint8_t gen_of(uint32_t size, uint8_t gen)
{
	return size >= LOH_THRESHOLD ? 3 : gen;
}

static int add_root(uint32_t slot, uint8_t kind, uint32_t flags, uint64_t id)
{
	if (nroots == nroots_cap) {
		uint32_t cap = nroots_cap ? nroots_cap * 2 : 256;
		struct root *r = realloc(roots, cap * sizeof(*r));

		if (!r)
			return -1;
		roots = r;
		nroots_cap = cap;
	}
	roots[nroots++] = (struct root){ slot, kind, flags, id };
	return 0;
}

int heap_init(const struct heap_opts *o)
{
	uint64_t s = o->seed * 0x9e3779b97f4a7c15ull + 0x1234567ull, addr = 0x7d0000000000ull;
	uint32_t i, cursor = 0, stack_roots = 0;
	unsigned t;

	if (!s)
		s = 1;
	for (t = 0; t < NTYPES; t++)
		weight_sum += types[t].weight;
	nobjs = (uint32_t)o->nodes;
	nthreads = o->alloc_threads;
	report_path = o->report;
	objs = calloc(nobjs, sizeof(*objs));
	if (!objs) {
		fprintf(stderr, "ringpipe-demo: cannot allocate a heap of %u objects\n", nobjs);
		return -1;
	}
	for (i = 0; i < nobjs; i++) {
		struct obj *ob = &objs[i];

		ob->type = (uint16_t)(i == 0 ? TYPE_CACHE : pick_type(&s));
		ob->size = obj_size(ob->type, &s);
		ob->addr = addr;
		ob->gen = gen_of(ob->size, 2);
		addr += ob->size;
		if (i == 0)
			continue;
		/*
		 * Parent: a recent container with room (locality, like real
		 * object graphs), else the oldest container with room; no
		 * container at all makes the object a stack root.
		 */
		{
			uint32_t p = (uint32_t)(rnd(&s) % (i < 64 ? i : 64));
			struct obj *par = &objs[i - 1 - p];

			if (!types[par->type].refs || par->nref >= MAX_REFS - 1) {
				while (cursor < i && (!types[objs[cursor].type].refs ||
						      objs[cursor].nref >= MAX_REFS - 1))
					cursor++;
				par = cursor < i ? &objs[cursor] : NULL;
			}
			if (par) {
				par->ref[par->nref++] = i;
			} else if (add_root(i, CLR_ROOT_STACK, 0,
					    0x7ffd00000000ull + 8ull * stack_roots++)) {
				return -1;
			}
		}
	}
	/* cross references: one container in eight points somewhere else too */
	for (i = 0; i < nobjs; i++)
		if (types[objs[i].type].refs && objs[i].nref < MAX_REFS && rnd(&s) % 8 == 0)
			objs[i].ref[objs[i].nref++] = (uint32_t)(rnd(&s) % nobjs);
	/* roots: the cache on the stack, then handles, pinned handles, weak handles
	 * and finalizer-queue entries, about one per 500 objects */
	if (add_root(0, CLR_ROOT_STACK, 0, 0x7ffd00000000ull + 8ull * stack_roots++))
		return -1;
	for (i = 0; i < nobjs / 500 + 4; i++) {
		uint32_t slot = (uint32_t)(rnd(&s) % nobjs), k = i % 8;
		uint64_t handle = 0x7f3a40000000ull + 8ull * i;
		int rc;

		if (k < 4) {
			rc = add_root(slot, CLR_ROOT_HANDLE, 0, handle), handle_roots++;
		} else if (k == 4) {
			rc = add_root(slot, CLR_ROOT_HANDLE, CLR_ROOTFLAG_PINNING, handle);
			handle_roots++, pinned_roots++;
		} else if (k == 5) {
			rc = add_root(slot, CLR_ROOT_HANDLE, CLR_ROOTFLAG_WEAK, handle), handle_roots++;
		} else if (k == 6) {
			rc = add_root(slot, CLR_ROOT_STACK, 0, 0x7ffd00000000ull + 8ull * stack_roots++);
		} else {
			rc = add_root(slot, CLR_ROOT_FINALIZER, 0, 0);
		}
		if (rc)
			return -1;
	}
	return 0;
}

/* ---- GC ------------------------------------------------------------------ */

static void heap_stats(struct clr_heap_stats *hs, uint32_t depth)
{
	uint32_t i;

	memset(hs, 0, sizeof(*hs));
	for (i = 0; i < nobjs; i++)
		hs->gen_size[objs[i].gen] += objs[i].size;
	/* everything survives: the dead objects are the ones already replaced */
	for (i = 0; i <= depth && i < 4; i++)
		hs->promoted[i] = hs->gen_size[i];
	hs->promoted[3] = depth >= 2 ? hs->gen_size[3] : 0;
	hs->pinned_objects = pinned_roots;
	hs->gc_handles = handle_roots;
}

/* Survivors of a gen-depth GC move up one generation (gen2 stays). */
static void promote(uint32_t depth)
{
	uint32_t i;

	for (i = 0; i < nobjs; i++) {
		struct obj *ob = &objs[i];

		if (ob->gen < 2 && ob->gen <= depth)
			ob->gen = depth >= 2 ? 2 : (uint8_t)(ob->gen + 1);
	}
}

/* An ordinary GC, the world stopped by the caller. */
static void collect(uint32_t depth, uint32_t reason)
{
	struct clr_heap_stats hs;
	uint32_t count = gc_count + 1;

	rp_store_relaxed(&gc_count, count);
	clr_gc_start(count, depth, reason, 0);
	promote(depth);
	heap_stats(&hs, depth);
	clr_gc_end(count, depth);
	clr_gc_heap_stats(&hs);
}

/* ---- the heap walk ---------------------------------------------------------- */

struct walk_totals {
	uint32_t count;
	uint64_t edges;
	uint64_t cnt[NTYPES], bytes[NTYPES];
};

/* Per-type totals, taken while the world is still stopped. */
static void walk_totals(struct walk_totals *w)
{
	uint32_t i;

	memset(w->cnt, 0, sizeof(w->cnt));
	memset(w->bytes, 0, sizeof(w->bytes));
	for (i = 0; i < nobjs; i++) {
		w->cnt[objs[i].type]++;
		w->bytes[objs[i].type] += objs[i].size;
	}
}

static int write_report(const struct walk_totals *w)
{
	unsigned order[NTYPES], t, u;
	char tmp[4096];
	FILE *f;
	for (t = 0; t < NTYPES; t++)
		order[t] = t;
	/* insertion sort by name (byte order): 16 types */
	for (t = 1; t < NTYPES; t++)
		for (u = t; u > 0 && strcmp(types[order[u - 1]].name, types[order[u]].name) > 0; u--) {
			unsigned x = order[u];

			order[u] = order[u - 1];
			order[u - 1] = x;
		}
	snprintf(tmp, sizeof(tmp), "%s.tmp", report_path);
	f = fopen(tmp, "w");
	if (!f)
		return -errno;
	fprintf(f, "gc %u\nnodes %u\nedges %" PRIu64 "\nroots %u\ntypes %u\n", w->count, nobjs,
		w->edges, nroots, (unsigned)NTYPES);
	for (t = 0; t < NTYPES; t++)
		fprintf(f, "type %" PRIu64 " %" PRIu64 " %s\n", w->cnt[order[t]], w->bytes[order[t]],
			types[order[t]].name);
	if (fclose(f))
		return -errno;
	/* rename: a reader never sees a half-written report */
	return rename(tmp, report_path) ? -errno : 0;
}

static struct clr_bulk bulk[CLR_BULK_NR];

/*
 * The induced gen-2 GC dotnet-gcdump triggers, with the walk inside the
 * GCStart/GCEnd bracket. The runtime interleaves BulkType with the nodes
 * (a type goes out when first met); the reader accepts types at any time,
 * so they all go first here.
 */
static struct walk_totals totals;	/* walk_lock */

static void heap_walk(void)
{
	struct clr_heap_stats hs;
	uint64_t edges = 0;
	uint32_t count, i;
	unsigned t, m, nmods;
	const struct clr_module *mods = clr_demo_modules(&nmods);

	suspend_world();
	count = gc_count + 1;
	rp_store_relaxed(&gc_count, count);
	clr_gc_triggered(1 /* Induced */);
	clr_gc_suspend_begin(1 /* ForGC */, count);
	clr_gc_suspend_end();
	clr_gc_start(count, 2, 1 /* Induced */, 0 /* NonConcurrent */);

	for (m = 0; m < nmods; m++)
		clr_module_load(&mods[m]);
	clr_bulk_begin(&bulk[CLR_BULK_TYPE], CLR_BULK_TYPE);
	for (t = 0; t < NTYPES; t++)
		clr_bulk_type(&bulk[CLR_BULK_TYPE], type_id(t), mods[types[t].module].module_id,
			      types[t].flags, types[t].cor, types[t].name);
	clr_bulk_flush(&bulk[CLR_BULK_TYPE]);

	clr_bulk_begin(&bulk[CLR_BULK_ROOT], CLR_BULK_ROOT);
	for (i = 0; i < nroots; i++)
		clr_bulk_root(&bulk[CLR_BULK_ROOT], objs[roots[i].slot].addr, roots[i].kind,
			      roots[i].flags, roots[i].id);
	clr_bulk_flush(&bulk[CLR_BULK_ROOT]);

	/* each node, then its EdgeCount targets: the reader pairs them in order */
	clr_bulk_begin(&bulk[CLR_BULK_NODE], CLR_BULK_NODE);
	clr_bulk_begin(&bulk[CLR_BULK_EDGE], CLR_BULK_EDGE);
	for (i = 0; i < nobjs; i++) {
		const struct obj *ob = &objs[i];
		unsigned r;

		clr_bulk_node(&bulk[CLR_BULK_NODE], ob->addr, ob->size, type_id(ob->type), ob->nref);
		for (r = 0; r < ob->nref; r++)
			clr_bulk_edge(&bulk[CLR_BULK_EDGE], objs[ob->ref[r]].addr);
		edges += ob->nref;
	}
	clr_bulk_flush(&bulk[CLR_BULK_NODE]);
	clr_bulk_flush(&bulk[CLR_BULK_EDGE]);
	if (bulk[CLR_BULK_NODE].index)
		clr_expect("heap-digest\tgc=%u\tnodes=%" PRIu64 "\tedges=%" PRIu64 "\troots=%" PRIu64
			   "\ttypes=%" PRIu64, count, bulk[CLR_BULK_NODE].digest,
			   bulk[CLR_BULK_EDGE].digest, bulk[CLR_BULK_ROOT].digest,
			   bulk[CLR_BULK_TYPE].digest);

	totals.count = count;
	totals.edges = edges;
	walk_totals(&totals);
	promote(2);
	heap_stats(&hs, 2);
	clr_gc_end(count, 2);
	clr_gc_heap_stats(&hs);
	clr_gc_restart_begin();
	restart_world();
	clr_gc_restart_end();
	if (report_path) {
		int rc = write_report(&totals);

		if (rc)
			fprintf(stderr, "ringpipe-demo: cannot write %s: %s\n", report_path,
				strerror(-rc));
	}
	fprintf(stderr, "heap walk gc %u: %u nodes, %" PRIu64 " edges, %u roots, %u types\n",
		count, nobjs, edges, nroots, (unsigned)NTYPES);
}

/* Serializes walks: two sessions enabling at once each get their own. */
static pthread_mutex_t walk_lock = PTHREAD_MUTEX_INITIALIZER;

void heap_runtime_enable(struct rp_provider *provider, int session_id, bool enabled,
			 uint64_t keywords, uint8_t level, const char *args, void *ctx)
{
	(void)provider, (void)session_id, (void)args, (void)ctx;
	/* exactly what dotnet-gcdump sends: GCHeapCollect at Informational or more;
	 * level 0 means "all levels" */
	if (!enabled || !(keywords & CLR_KW_GCHEAPCOLLECT) || (level && level < 4) || !objs)
		return;
	pthread_mutex_lock(&walk_lock);
	heap_walk();
	pthread_mutex_unlock(&walk_lock);
}

/* ---- allocating threads ------------------------------------------------------ */

struct mutator {
	pthread_t th;
	uint32_t index;
	uint64_t rng;
	uint64_t next_addr;
	uint64_t since_tick;
};

static struct mutator *muts;
static uint32_t nmuts;
static int heap_stop_flag;		/* atomic */

static bool heap_stopping(void)
{
	return rp_load_relaxed(&heap_stop_flag);
}

/* One allocation: a new object replaces the one in a slot this thread owns. */
static uint32_t allocate(struct mutator *m)
{
	uint32_t per = nobjs / nthreads, slot;
	struct obj *ob;

	if (!per)
		return 0;

	/* slot 0 (the root cache) is never replaced */
	slot = (uint32_t)(rnd(&m->rng) % per) * nthreads + m->index;
	if (slot == 0 || slot >= nobjs)
		slot = m->index ? m->index : (nthreads < nobjs ? nthreads : 0);
	if (slot == 0 || slot >= nobjs)
		return 0;
	ob = &objs[slot];
	ob->size = obj_size(ob->type, &m->rng);
	ob->addr = m->next_addr;
	ob->gen = gen_of(ob->size, 0);
	m->next_addr += ob->size;
	m->since_tick += ob->size;
	if (m->since_tick >= TICK_BYTES) {
		clr_gc_alloc_tick((uint32_t)m->since_tick, ob->size >= LOH_THRESHOLD,
				  m->since_tick, type_id(ob->type), types[ob->type].name, 0, ob->addr,
				  ob->size);
		m->since_tick = 0;
	}
	rp_add_relaxed(&total_allocs, 1);
	rp_add_relaxed(&total_alloc_bytes, ob->size);
	rp_add_relaxed(&since_gc, ob->size);
	return ob->size;
}

/* An ordinary GC when the gen0 budget is used up: gen1 one time in four. */
static void maybe_collect(void)
{
	uint32_t depth;

	if (rp_load_relaxed(&since_gc) < GEN0_BUDGET)
		return;
	pthread_mutex_lock(&walk_lock);
	suspend_world();
	/* another thread may have collected while this one waited */
	if (rp_load_relaxed(&since_gc) >= GEN0_BUDGET) {
		rp_store_relaxed(&since_gc, 0);
		depth = ++gc_seq % 4 == 0 ? 1 : 0;
		clr_gc_triggered(0 /* AllocSmall */);
		clr_gc_suspend_begin(1 /* ForGC */, gc_count + 1);
		clr_gc_suspend_end();
		collect(depth, 0 /* AllocSmall */);
		clr_gc_restart_begin();
		restart_world();
		clr_gc_restart_end();
	} else {
		restart_world();
	}
	pthread_mutex_unlock(&walk_lock);
}

/* managed code: the sampler's stacks of an allocating thread end here */
SAMPLER_MANAGED(heap_alloc) static void *mutator_main(void *arg)
{
	struct mutator *m = arg;
	uint64_t start = rp_clock_mono_ns(), bytes = 0;

	sampler_add_self(true);
	while (!heap_stopping()) {
		uint64_t el = rp_clock_mono_ns() - start;
		uint64_t due = el / 1000 * (ALLOC_BYTES_PER_SEC / 1000) / 1000;
		unsigned k;

		world_enter();
		for (k = 0; k < ALLOC_BATCH && bytes < due; k++)
			bytes += allocate(m);
		world_leave();
		maybe_collect();
		if (bytes >= due)	/* outside the world: a GC need not wait */
			rp_clock_sleep_ns(2 * 1000000ull);
	}
	sampler_remove_self();
	return NULL;
}

SAMPLER_CODE_RANGE(heap_alloc);

int heap_start(void)
{
	static const struct sampler_code code[] = {
		SAMPLER_CODE(heap_alloc, "Demo.Heap", "AllocateLoop", "void  (int32)"),
	};
	uint32_t k;

	if (!nthreads)
		return 0;
	if (sampler_code_add(code, 1))
		return -1;
	muts = calloc(nthreads, sizeof(*muts));
	if (!muts)
		return -1;
	for (k = 0; k < nthreads; k++) {
		muts[k].index = k;
		muts[k].rng = 0x5851f42d4c957f2dull * (k + 1) + 1;
		muts[k].next_addr = 0x7e0000000000ull + ((uint64_t)(k + 1) << 36);
		if (pthread_create(&muts[k].th, NULL, mutator_main, &muts[k]))
			return -1;
		pthread_setname_np(muts[k].th, "demo-alloc");
		nmuts++;
	}
	return 0;
}

void heap_stop(void)
{
	uint32_t k;

	rp_store_relaxed(&heap_stop_flag, 1);
	for (k = 0; k < nmuts; k++)
		pthread_join(muts[k].th, NULL);
	free(muts);
	muts = NULL;
	nmuts = 0;
}
