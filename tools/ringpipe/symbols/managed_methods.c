// SPDX-License-Identifier: MIT
/*
 * Managed code ranges from CLR method and module events (see
 * managed_methods.h).
 *
 * Several events usually describe the same code (a MethodLoadVerbose while
 * tracing, then the rundown's MethodDCEndVerbose), and tiered compilation
 * gives one method several ranges, one per code version, all of which may
 * still run. So every range is kept, sorted by start, identical ones once;
 * a lookup takes the nearest range starting at or below the address that
 * covers it. Names of modules are resolved at lookup time, because the
 * rundown may list a module after the methods that refer to it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/bytebuf.h"
#include "util/hmap.h"
#include "symbols/managed_methods.h"
#include "util/utf.h"

struct mm_method {
	uint32_t pid;
	uint64_t start, size;
	uint64_t method_id, module_id;
	const char *name;	/* owned by the table's names[], or NULL: named later */
	size_t order;		/* insertion order, so sorting keeps the latest first */
};

struct mm_module {
	uint32_t pid;
	uint64_t id;
	char *name;
};

struct mm_table {
	struct mm_method *m;
	size_t n, cap;
	bool sorted;
	char **names;
	size_t nnames, capnames;
	struct mm_module *mods;
	size_t nmods, capmods;
	struct hmap mod_idx;	/* key of (pid, id) -> index in mods */
	struct hmap id_names;	/* key of (pid, method id) -> name index + 1 */
};

/* Longest lookup walk back over ranges that start below an address but end
 * before it; ranges only overlap when code was freed and reused. */
#define MM_MAX_WALK 64

static uint64_t mm_key(uint32_t pid, uint64_t id)
{
	return hmap_hash(id) ^ hmap_hash((uint64_t)pid << 1 | 1);
}

struct mm_table *mm_table_new(void)
{
	return calloc(1, sizeof(struct mm_table));
}

void mm_table_free(struct mm_table *t)
{
	size_t i;

	if (!t)
		return;
	for (i = 0; i < t->nnames; i++)
		free(t->names[i]);
	for (i = 0; i < t->nmods; i++)
		free(t->mods[i].name);
	free(t->names);
	free(t->mods);
	free(t->m);
	hmap_free(&t->mod_idx);
	hmap_free(&t->id_names);
	free(t);
}

static const char *mm_intern(struct mm_table *t, const char *s)
{
	if (array_grow((void **)&t->names, &t->capnames, t->nnames, sizeof(*t->names), 256))
		return NULL;
	t->names[t->nnames] = strdup(s);
	return t->names[t->nnames] ? t->names[t->nnames++] : NULL;
}

int mm_add_method(struct mm_table *t, uint32_t pid, uint64_t start, uint64_t size,
		  uint64_t method_id, uint64_t module_id, const char *name)
{
	const char *n = NULL;

	if (!size || start + size < start)
		return -EINVAL;
	if (name && *name) {
		n = mm_intern(t, name);
		if (!n)
			return -ENOMEM;
		/* a later non-verbose event for this method borrows the name */
		if (method_id && hmap_put(&t->id_names, mm_key(pid, method_id), t->nnames))
			return -ENOMEM;
	}
	if (array_grow((void **)&t->m, &t->cap, t->n, sizeof(*t->m), 1024))
		return -ENOMEM;
	t->m[t->n] = (struct mm_method){ pid, start, size, method_id, module_id, n, t->n };
	t->n++;
	t->sorted = false;
	return 0;
}

/* "/usr/share/dotnet/.../System.Private.CoreLib.dll" -> "System.Private.CoreLib",
 * as TraceEvent names a module in a frame. */
static void module_name(const char *path, struct bytebuf *out)
{
	const char *base = strrchr(path, '/'), *bs = strrchr(path, '\\');
	size_t len;

	if (bs && (!base || bs > base))
		base = bs;
	base = base ? base + 1 : path;
	len = strlen(base);
	if (len > 4 && (!strcasecmp(base + len - 4, ".dll") || !strcasecmp(base + len - 4, ".exe")))
		len -= 4;
	if (len > 3 && !strncasecmp(base + len - 3, ".ni", 3))
		len -= 3;
	out->len = 0;
	bb_append(out, base, len);
	bb_append(out, "", 1);
}

int mm_add_module(struct mm_table *t, uint32_t pid, uint64_t module_id, const char *path)
{
	struct bytebuf b = { 0 };
	uint64_t key = mm_key(pid, module_id), v;
	char *name;

	if (!path || !*path)
		return -EINVAL;
	module_name(path, &b);
	if (b.oom) {
		bb_free(&b);
		return -ENOMEM;
	}
	name = (char *)b.p;
	if (hmap_get(&t->mod_idx, key, &v) && t->mods[v].pid == pid &&
	    t->mods[v].id == module_id) {
		/* the same ModuleID again (load, then rundown): newest wins */
		free(t->mods[v].name);
		t->mods[v].name = name;
		return 0;
	}
	if (array_grow((void **)&t->mods, &t->capmods, t->nmods, sizeof(*t->mods), 64) ||
	    hmap_put(&t->mod_idx, key, t->nmods)) {
		free(name);
		return -ENOMEM;
	}
	t->mods[t->nmods++] = (struct mm_module){ pid, module_id, name };
	return 0;
}

/* ---- event payloads ------------------------------------------------------- */

struct mm_cur {
	const uint8_t *p, *end;
	bool bad;
};

static uint64_t cur_int(struct mm_cur *c, size_t n)
{
	uint64_t v;

	if ((size_t)(c->end - c->p) < n) {
		c->bad = true;
		return 0;
	}
	v = n == 4 ? le32_get(c->p) : le64_get(c->p);
	c->p += n;
	return v;
}

/* A NUL-terminated UTF-16LE string, appended to b as UTF-8 (no NUL). */
static void cur_str(struct mm_cur *c, struct bytebuf *b)
{
	size_t units = 0, avail = (size_t)(c->end - c->p) / 2;

	while (units < avail && (c->p[2 * units] | c->p[2 * units + 1]))
		units++;
	if (units == avail) {
		c->bad = true;
		return;
	}
	utf16le_to_utf8(b, c->p, units);
	c->p += 2 * units + 2;
}

/* MethodID, ModuleID, MethodStartAddress, MethodSize, MethodToken,
 * MethodFlags[, MethodNamespace, MethodName, MethodSignature]: the common
 * head of every MethodLoad, MethodUnload and MethodDC event version. */
static bool parse_method(struct mm_table *t, const struct nt_rec *rec, bool verbose)
{
	struct mm_cur c = { rec->payload, rec->payload + rec->payload_len, false };
	uint64_t id = cur_int(&c, 8), module = cur_int(&c, 8), start = cur_int(&c, 8);
	uint64_t size = cur_int(&c, 4);
	struct bytebuf name = { 0 }, sig = { 0 };
	const char *args;
	bool ok = false;

	cur_int(&c, 4);	/* MethodToken */
	cur_int(&c, 4);	/* MethodFlags */
	if (verbose) {
		size_t nslen;

		cur_str(&c, &name);
		nslen = name.len;
		if (nslen)
			bb_append(&name, ".", 1);
		cur_str(&c, &name);
		/* no method name: no dot after the namespace either */
		if (name.len == nslen + !!nslen)
			name.len = nslen;
		cur_str(&c, &sig);
		bb_append(&sig, "", 1);
		/* "instance void  (class System.String[])": TraceEvent keeps the
		 * argument list only */
		args = sig.p ? strchr((const char *)sig.p, '(') : NULL;
		if (args)
			bb_append(&name, args, strlen(args));
		bb_append(&name, "", 1);
		if (name.oom || sig.oom)
			c.bad = true;
	}
	if (!c.bad)
		ok = !mm_add_method(t, (uint32_t)rec->pid, start, size, id, module,
				    verbose ? (const char *)name.p : NULL);
	bb_free(&name);
	bb_free(&sig);
	return ok;
}

/* ModuleID, AssemblyID, [AppDomainID,] ModuleFlags, Reserved1, ModuleILPath,
 * ModuleNativePath: the head of the Module and DomainModule events. */
static bool parse_module(struct mm_table *t, const struct nt_rec *rec, bool domain)
{
	struct mm_cur c = { rec->payload, rec->payload + rec->payload_len, false };
	uint64_t id = cur_int(&c, 8);
	struct bytebuf il = { 0 }, native = { 0 };
	bool ok = false;

	cur_int(&c, 8);	/* AssemblyID */
	if (domain)
		cur_int(&c, 8);	/* AppDomainID */
	cur_int(&c, 4);	/* ModuleFlags */
	cur_int(&c, 4);	/* Reserved1 */
	cur_str(&c, &il);
	cur_str(&c, &native);
	bb_append(&il, "", 1);
	bb_append(&native, "", 1);
	if (!c.bad && !il.oom && !native.oom)
		ok = !mm_add_module(t, (uint32_t)rec->pid, id,
				    il.len > 1 ? (const char *)il.p : (const char *)native.p);
	bb_free(&il);
	bb_free(&native);
	return ok;
}

bool mm_add_from_event(struct mm_table *t, const struct nt_rec *rec)
{
	bool runtime, rundown;
	uint32_t id;

	if (!rec->meta || !rec->meta->provider)
		return false;
	runtime = !strcmp(rec->meta->provider, MM_RUNTIME_PROVIDER);
	rundown = !runtime && !strcmp(rec->meta->provider, MM_RUNDOWN_PROVIDER);
	if (!runtime && !rundown)
		return false;
	id = rec->meta->event_id;
	switch (id) {
	case 141: /* MethodLoad / MethodDCStart */
	case 142: /* MethodUnload / MethodDCEnd */
		return parse_method(t, rec, false);
	case 143: /* MethodLoadVerbose / MethodDCStartVerbose */
	case 144: /* MethodUnloadVerbose / MethodDCEndVerbose */
		return parse_method(t, rec, true);
	case 151: /* DomainModuleLoad / DomainModuleDCStart */
		return parse_module(t, rec, true);
	case 152: /* ModuleLoad / DomainModuleDCEnd */
		return parse_module(t, rec, rundown);
	case 153: /* ModuleUnload / ModuleDCStart */
	case 154: /* ModuleDCEnd (rundown) */
		return (runtime && id == 153) || rundown ? parse_module(t, rec, false) : false;
	}
	if (runtime) {
		switch (id) {
		case 137: /* MethodDCStartV2 / MethodDCEndV2 (defunct) */
		case 138:
			return parse_method(t, rec, false);
		case 139: /* MethodDCStartVerboseV2 / MethodDCEndVerboseV2 (defunct) */
		case 140:
			return parse_method(t, rec, true);
		case 149: /* ModuleDCStartV2 / ModuleDCEndV2 (defunct) */
		case 150:
			return parse_module(t, rec, false);
		}
	}
	return false;
}

/* ---- lookup ---------------------------------------------------------------- */

static int cmp_method(const void *a, const void *b)
{
	const struct mm_method *x = a, *y = b;

	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	if (x->start != y->start)
		return x->start < y->start ? -1 : 1;
	if (x->size != y->size)
		return x->size < y->size ? -1 : 1;
	/* the latest event about a range first: its name is the one kept */
	return (x->order < y->order) - (x->order > y->order);
}

static void mm_sort(struct mm_table *t)
{
	size_t i, j;

	for (i = 0; i < t->n; i++) {
		uint64_t v;

		if (!t->m[i].name && t->m[i].method_id &&
		    hmap_get(&t->id_names, mm_key(t->m[i].pid, t->m[i].method_id), &v))
			t->m[i].name = t->names[v - 1];
	}
	array_sort(t->m, t->n, sizeof(*t->m), cmp_method);
	for (i = 0, j = 0; i < t->n; i++) {
		struct mm_method *e = &t->m[i];

		/* a range nobody named cannot symbolize anything */
		if (!e->name)
			continue;
		if (j && t->m[j - 1].pid == e->pid && t->m[j - 1].start == e->start &&
		    t->m[j - 1].size == e->size)
			continue;
		t->m[j++] = *e;
	}
	t->n = j;
	t->sorted = true;
}

static const char *mm_module_of(const struct mm_table *t, uint32_t pid, uint64_t id)
{
	uint64_t v;

	if (hmap_get(&t->mod_idx, mm_key(pid, id), &v) && t->mods[v].pid == pid &&
	    t->mods[v].id == id)
		return t->mods[v].name;
	return "?";
}

bool mm_lookup(struct mm_table *t, uint32_t pid, uint64_t addr, struct mm_result *r)
{
	size_t lo = 0, hi, k;

	if (!t)
		return false;
	if (!t->sorted)
		mm_sort(t);
	hi = t->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct mm_method *e = &t->m[mid];

		if (e->pid < pid || (e->pid == pid && e->start <= addr))
			lo = mid + 1;
		else
			hi = mid;
	}
	for (k = 0; k < MM_MAX_WALK && lo > k; k++) {
		const struct mm_method *e = &t->m[lo - 1 - k];

		if (e->pid != pid)
			break;
		if (addr - e->start < e->size) {
			r->module = mm_module_of(t, pid, e->module_id);
			r->name = e->name;
			r->start = e->start;
			return true;
		}
	}
	return false;
}

size_t mm_nmethods(struct mm_table *t)
{
	if (t && !t->sorted)
		mm_sort(t);
	return t ? t->n : 0;
}

size_t mm_nmodules(const struct mm_table *t)
{
	return t ? t->nmods : 0;
}
