// SPDX-License-Identifier: MIT
/*
 * Symbolizer (see symbolize.h).
 *
 * Address translation for a file mapping: the file offset of ip is
 *   ip - mapping.start + mapping.offset,
 * and the PT_LOAD segment holding that file offset turns it into the ELF
 * virtual address symbols are expressed in:
 *   vaddr = fileoff - p_offset + p_vaddr.
 * This is right for executables (ET_EXEC), PIEs and shared objects (ET_DYN)
 * alike, whatever load bias the kernel chose, and needs no knowledge of
 * which mapping was the first of the module.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <libelf.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fnv1a.h"
#include "util/hmap.h"
#include "symbols/managed_methods.h"
#include "symbols/symbolize.h"
#include "util/utf.h"

struct esym {
	uint64_t addr, size;
	const char *name;	/* in the module's string pool */
};

struct seg {
	uint64_t off, filesz, vaddr;
};

/* One ELF file, read on first use. */
struct elf_mod {
	char *path;
	char *base;		/* basename of path */
	bool loaded, usable;
	char build_id[41];
	struct seg *segs;
	size_t nsegs;
	struct esym *syms;
	size_t nsyms, capsyms;
	char **names;		/* owned symbol names */
	size_t nnames, capnames;
};

struct map_ent {
	struct sym_module m;
	struct elf_mod *mod;
};

struct sym_table {
	struct map_ent *maps;		/* sorted by (pid, start) when `sorted` */
	size_t nmaps, capmaps;
	bool sorted;
	struct sym_jit *jits;		/* sorted by (pid, start) when `jsorted` */
	size_t njits, capjits;
	bool jsorted;
	struct elf_mod **mods;
	size_t nmods, capmods;
	struct hmap snapped;		/* hashes of mappings seen by snapshots */
	struct hmap threads;		/* pid << 32 | tid -> index in tnames */
	char **tnames;
	size_t ntnames, captnames;
	struct mm_table *mm;		/* .NET methods from the trace's CLR events */
	bool perf_fallback;		/* read /tmp/perf-PID.map on a miss */
	struct hmap perf_tried;		/* pids whose perf map was looked for */
	bool kernel_loaded;
	struct esym *ksyms;
	size_t nksyms;
	char *kpool;
};

static bool elf_ok;

static void elf_setup(void)
{
	elf_ok = elf_version(EV_CURRENT) != EV_NONE;
}

struct sym_table *sym_table_new(void)
{
	/* once per process, whichever thread comes first: the agent's
	 * egresses cut batches, and so symbolize, on threads of their own */
	static pthread_once_t elf_once = PTHREAD_ONCE_INIT;

	pthread_once(&elf_once, elf_setup);
	if (!elf_ok) {
		errno = ENOTSUP;
		return NULL;
	}
	return calloc(1, sizeof(struct sym_table));
}

static void mod_free(struct elf_mod *m)
{
	size_t i;

	if (!m)
		return;
	for (i = 0; i < m->nnames; i++)
		free(m->names[i]);
	free(m->names);
	free(m->syms);
	free(m->segs);
	free(m->path);
	free(m);
}

void sym_forget_processes(struct sym_table *t)
{
	size_t i;

	for (i = 0; i < t->nmaps; i++)
		free(t->maps[i].m.path);
	for (i = 0; i < t->njits; i++)
		free(t->jits[i].name);
	for (i = 0; i < t->ntnames; i++)
		free(t->tnames[i]);
	t->nmaps = t->njits = t->ntnames = 0;
	t->sorted = t->jsorted = false;
	hmap_clear(&t->threads);
	hmap_clear(&t->snapped);
	hmap_clear(&t->perf_tried);
	mm_table_free(t->mm);
	t->mm = NULL;
}

void sym_table_free(struct sym_table *t)
{
	size_t i;

	if (!t)
		return;
	sym_forget_processes(t);
	for (i = 0; i < t->nmods; i++)
		mod_free(t->mods[i]);
	free(t->maps);
	free(t->jits);
	free(t->mods);
	free(t->tnames);
	hmap_free(&t->threads);
	hmap_free(&t->snapped);
	hmap_free(&t->perf_tried);
	free(t->ksyms);
	free(t->kpool);
	free(t);
}

/* ---- ELF files --------------------------------------------------------- */

static void hex_id(const uint8_t *p, size_t n, char out[41])
{
	size_t i;

	if (n > 20)
		n = 20;
	for (i = 0; i < n; i++)
		snprintf(out + 2 * i, 3, "%02x", p[i]);
	out[2 * n] = 0;
}

static void elf_build_id(Elf *e, char out[41])
{
	Elf_Scn *scn = NULL;

	out[0] = 0;
	while ((scn = elf_nextscn(e, scn))) {
		GElf_Shdr sh;
		Elf_Data *d;
		size_t off = 0, noff, doff;
		GElf_Nhdr nh;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_NOTE)
			continue;
		d = elf_getdata(scn, NULL);
		while (d && (off = gelf_getnote(d, off, &nh, &noff, &doff)) > 0) {
			if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 &&
			    !memcmp((char *)d->d_buf + noff, "GNU", 4)) {
				hex_id((uint8_t *)d->d_buf + doff, nh.n_descsz, out);
				return;
			}
		}
	}
}

int sym_file_build_id(const char *path, char out[41])
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	Elf *e;

	out[0] = 0;
	if (fd < 0)
		return -errno;
	e = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (e) {
		elf_build_id(e, out);
		elf_end(e);
	}
	close(fd);
	return e ? 0 : -EINVAL;
}

static int cmp_esym(const void *a, const void *b)
{
	const struct esym *x = a, *y = b;

	if (x->addr != y->addr)
		return x->addr < y->addr ? -1 : 1;
	/* sized symbols first, so that a lookup prefers them over labels */
	return (x->size < y->size) - (x->size > y->size);
}

/* Adds the function symbols of one symbol table section. */
static int read_symtab(struct elf_mod *m, Elf *e, Elf_Scn *scn, const GElf_Shdr *sh)
{
	Elf_Data *d = elf_getdata(scn, NULL);
	size_t i, n;

	if (!d || !sh->sh_entsize)
		return 0;
	n = sh->sh_size / sh->sh_entsize;
	for (i = 0; i < n; i++) {
		GElf_Sym s;
		const char *name;
		int type;

		if (!gelf_getsym(d, (int)i, &s) || s.st_shndx == SHN_UNDEF || !s.st_value)
			continue;
		type = GELF_ST_TYPE(s.st_info);
		if (type != STT_FUNC && type != STT_GNU_IFUNC)
			continue;
		name = elf_strptr(e, sh->sh_link, s.st_name);
		if (!name || !*name)
			continue;
		if (array_grow((void **)&m->syms, &m->capsyms, m->nsyms, sizeof(*m->syms), 1024) ||
		    array_grow((void **)&m->names, &m->capnames, m->nnames, sizeof(*m->names), 1024))
			return -ENOMEM;
		m->names[m->nnames] = strdup(name);
		if (!m->names[m->nnames])
			return -ENOMEM;
		m->syms[m->nsyms++] = (struct esym){ s.st_value, s.st_size, m->names[m->nnames++] };
	}
	return 0;
}

/* Reads segments (only when segs is wanted) and symbols of one file. */
static int read_elf(struct elf_mod *m, const char *path, bool segs, char build_id[41])
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	Elf_Scn *scn = NULL;
	size_t i, nph;
	Elf *e;
	int err = 0;

	if (fd < 0)
		return -errno;
	e = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!e || elf_kind(e) != ELF_K_ELF) {
		err = -ENOEXEC;
		goto out;
	}
	if (build_id)
		elf_build_id(e, build_id);
	if (segs && !elf_getphdrnum(e, &nph)) {
		m->segs = calloc(nph ? nph : 1, sizeof(*m->segs));
		if (!m->segs) {
			err = -ENOMEM;
			goto out;
		}
		for (i = 0; i < nph; i++) {
			GElf_Phdr ph;

			if (gelf_getphdr(e, (int)i, &ph) && ph.p_type == PT_LOAD)
				m->segs[m->nsegs++] = (struct seg){ ph.p_offset, ph.p_filesz,
								    ph.p_vaddr };
		}
	}
	while ((scn = elf_nextscn(e, scn))) {
		GElf_Shdr sh;

		if (!gelf_getshdr(scn, &sh))
			continue;
		/* NOBITS: a .symtab stripped into a debug file keeps its header */
		if ((sh.sh_type == SHT_SYMTAB || sh.sh_type == SHT_DYNSYM) &&
		    (err = read_symtab(m, e, scn, &sh)))
			goto out;
	}
out:
	if (e)
		elf_end(e);
	close(fd);
	return err;
}

static void mod_load(struct elf_mod *m)
{
	char dbg[128];
	size_t i, j;

	m->loaded = true;
	if (read_elf(m, m->path, true, m->build_id))
		return;
	/* a distribution's separate debug file holds the full .symtab */
	if (strlen(m->build_id) > 2) {
		snprintf(dbg, sizeof(dbg), "/usr/lib/debug/.build-id/%.2s/%s.debug",
			 m->build_id, m->build_id + 2);
		if (!access(dbg, R_OK))
			read_elf(m, dbg, false, NULL);
	}
	array_sort(m->syms, m->nsyms, sizeof(*m->syms), cmp_esym);
	/* .symtab and .dynsym list most functions twice */
	for (i = 0, j = 0; i < m->nsyms; i++)
		if (!j || m->syms[i].addr != m->syms[j - 1].addr)
			m->syms[j++] = m->syms[i];
	m->nsyms = j;
	m->usable = true;
}

static struct elf_mod *mod_get(struct sym_table *t, const char *path)
{
	struct elf_mod *m;
	const char *slash;
	size_t i;

	for (i = 0; i < t->nmods; i++)
		if (!strcmp(t->mods[i]->path, path))
			return t->mods[i];
	if (array_grow((void **)&t->mods, &t->capmods, t->nmods, sizeof(*t->mods), 16))
		return NULL;
	m = calloc(1, sizeof(*m));
	if (!m || !(m->path = strdup(path))) {
		free(m);
		return NULL;
	}
	slash = strrchr(m->path, '/');
	m->base = slash ? (char *)slash + 1 : m->path;
	t->mods[t->nmods++] = m;
	return m;
}

/* Nearest symbol at or below addr that plausibly covers it. */
static const struct esym *find_sym(const struct esym *s, size_t n, uint64_t addr)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (s[mid].addr <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (!lo)
		return NULL;
	s += lo - 1;
	/* a sized symbol must cover addr; an unsized one (hand-written
	 * assembly) is taken up to the next symbol */
	if (s->size && addr >= s->addr + s->size)
		return NULL;
	return s;
}

/* ---- tables ------------------------------------------------------------ */

int sym_add_module(struct sym_table *t, uint32_t pid, uint64_t start, uint64_t end,
		   uint64_t offset, const char *path, const char *build_id)
{
	struct map_ent *e;
	size_t i;

	if (end <= start || !path || !*path)
		return -EINVAL;
	for (i = 0; i < t->nmaps; i++) {
		e = &t->maps[i];
		if (e->m.pid == pid && e->m.start == start && e->m.end == end &&
		    e->m.offset == offset && !strcmp(e->m.path, path))
			return 0;
	}
	/* a newer mapping over an older one of the same process (exec, or an
	 * munmap then mmap) replaces it: mappings arrive in time order */
	for (i = 0; i < t->nmaps;) {
		e = &t->maps[i];
		if (e->m.pid == pid && e->m.start < end && start < e->m.end) {
			free(e->m.path);
			t->maps[i] = t->maps[--t->nmaps];
			continue;
		}
		i++;
	}
	if (array_grow((void **)&t->maps, &t->capmaps, t->nmaps, sizeof(*t->maps), 64))
		return -ENOMEM;
	e = &t->maps[t->nmaps];
	memset(e, 0, sizeof(*e));
	e->m = (struct sym_module){ pid, start, end, offset, strdup(path), "" };
	if (!e->m.path)
		return -ENOMEM;
	if (build_id)
		snprintf(e->m.build_id, sizeof(e->m.build_id), "%s", build_id);
	t->nmaps++;
	t->sorted = false;
	return 1;
}

int sym_add_jit(struct sym_table *t, uint32_t pid, uint64_t start, uint64_t size,
		const char *name)
{
	struct sym_jit *j;

	if (array_grow((void **)&t->jits, &t->capjits, t->njits, sizeof(*t->jits), 64))
		return -ENOMEM;
	j = &t->jits[t->njits];
	*j = (struct sym_jit){ pid, start, size, strdup(name) };
	if (!j->name)
		return -ENOMEM;
	t->njits++;
	t->jsorted = false;
	return 0;
}

int sym_add_thread(struct sym_table *t, uint32_t pid, uint32_t tid, const char *name)
{
	uint64_t key = (uint64_t)pid << 32 | tid, v;

	if (hmap_get(&t->threads, key, &v)) {
		char *n = strdup(name);

		if (!n)
			return -ENOMEM;
		free(t->tnames[v]);
		t->tnames[v] = n;
		return 0;
	}
	if (array_grow((void **)&t->tnames, &t->captnames, t->ntnames, sizeof(*t->tnames), 64))
		return -ENOMEM;
	t->tnames[t->ntnames] = strdup(name);
	if (!t->tnames[t->ntnames])
		return -ENOMEM;
	if (hmap_put(&t->threads, key, t->ntnames))
		return -ENOMEM;
	t->ntnames++;
	return 0;
}

const char *sym_thread_name(const struct sym_table *t, uint32_t pid, uint32_t tid)
{
	uint64_t v;

	return hmap_get(&t->threads, (uint64_t)pid << 32 | tid, &v) ? t->tnames[v] : NULL;
}

size_t sym_nmodules(const struct sym_table *t)
{
	return t->nmaps;
}

const struct sym_module *sym_module_at(const struct sym_table *t, size_t i)
{
	return &t->maps[i].m;
}

size_t sym_njit(const struct sym_table *t)
{
	return t->njits;
}

const struct sym_jit *sym_jit_at(const struct sym_table *t, size_t i)
{
	return &t->jits[i];
}

void sym_use_perf_maps(struct sym_table *t, bool on)
{
	t->perf_fallback = on;
}

size_t sym_nmanaged(struct sym_table *t)
{
	return mm_nmethods(t->mm);
}

int sym_load_perf_map(struct sym_table *t, uint32_t pid, const char *path)
{
	FILE *f = fopen(path, "re");
	char line[4096];
	int n = 0;

	if (!f)
		return -errno;
	/* each line: START SIZE NAME, the numbers in hex (with or without
	 * 0x), the name running to the end of the line (it may hold spaces) */
	while (fgets(line, sizeof(line), f)) {
		char *p = line, *end;
		uint64_t start, size;
		size_t len;

		start = strtoull(p, &end, 16);
		if (end == p || !isspace((unsigned char)*end))
			continue;
		p = end;
		size = strtoull(p, &end, 16);
		if (end == p || !isspace((unsigned char)*end))
			continue;
		p = end;
		while (*p == ' ' || *p == '\t')
			p++;
		len = strcspn(p, "\r\n");
		p[len] = 0;
		if (!*p || !size)
			continue;
		if (sym_add_jit(t, pid, start, size, p)) {
			fclose(f);
			return -ENOMEM;
		}
		n++;
	}
	fclose(f);
	return n;
}

/* Replaces what t knows of pid's perf map with the file's current lines. */
static void snap_perf_map(struct sym_table *t, uint32_t pid)
{
	char path[64];
	size_t i, j;

	snprintf(path, sizeof(path), "/tmp/perf-%u.map", pid);
	if (access(path, R_OK))
		return;
	/* a map is rewritten as code is generated: keep the latest */
	for (i = 0, j = 0; i < t->njits; i++) {
		if (t->jits[i].pid == pid)
			free(t->jits[i].name);
		else
			t->jits[j++] = t->jits[i];
	}
	t->njits = j;
	sym_load_perf_map(t, pid, path);
	hmap_put(&t->perf_tried, pid, 1);
}

int sym_snapshot_pid(struct sym_table *t, uint32_t pid)
{
	char path[64], line[4096 + 256];
	FILE *f;
	int added = 0, err;

	snprintf(path, sizeof(path), "/proc/%u/maps", pid);
	f = fopen(path, "re");
	if (!f) {
		err = -errno;
		/* the runtime leaves its perf map behind when it exits, and the
		 * code generated since the last look is only named there */
		snap_perf_map(t, pid);
		return err;
	}
	while (fgets(line, sizeof(line), f)) {
		unsigned long long start, end, off;
		char perms[8], file[4096], bid[41], bypid[4200];
		int n, rc;
		size_t len;

		file[0] = 0;
		n = sscanf(line, "%llx-%llx %7s %llx %*s %*s %4095[^\n]", &start, &end, perms,
			   &off, file);
		/* only code matters to a stack: executable mappings of files */
		if (n < 5 || perms[2] != 'x' || file[0] != '/')
			continue;
		len = strlen(file);
		if (len > 10 && !strcmp(file + len - 10, " (deleted)"))
			file[len - 10] = 0;
		{
			/* seen by an earlier snapshot: skip before reading the
			 * file's build id, the costly part of a periodic look */
			uint64_t h = hmap_hash(pid ^ hmap_hash(start ^ hmap_hash(end ^
					hmap_hash(off ^ fnv1a64_str(fnv1a64_start(), file))))), v;

			if (hmap_get(&t->snapped, h, &v))
				continue;
			if (hmap_put(&t->snapped, h, 1)) {
				fclose(f);
				return -ENOMEM;
			}
		}
		/* through the process's root, so a container's files are found */
		snprintf(bypid, sizeof(bypid), "/proc/%u/root%s", pid, file);
		if (sym_file_build_id(bypid, bid) && sym_file_build_id(file, bid))
			bid[0] = 0;
		rc = sym_add_module(t, pid, start, end, off, file, bid);
		if (rc < 0 && rc != -EINVAL) {
			fclose(f);
			return rc;
		}
		added += rc > 0;
	}
	fclose(f);
	snap_perf_map(t, pid);
	return added;
}

/* ---- trace events ------------------------------------------------------ */

struct pl {
	const uint8_t *p, *end;
	bool bad;
};

static uint64_t pl_int(struct pl *c, size_t n)
{
	uint64_t v = 0;

	if ((size_t)(c->end - c->p) < n) {
		c->bad = true;
		return 0;
	}
	v = n == 4 ? le32_get(c->p) : le64_get(c->p);
	c->p += n;
	return v;
}

/* A NUL-terminated UTF-16LE string, as UTF-8 in b. */
static const char *pl_str(struct pl *c, struct bytebuf *b)
{
	size_t units = 0;

	b->len = 0;
	while ((size_t)(c->end - c->p) >= 2 * units + 2 &&
	       (c->p[2 * units] | c->p[2 * units + 1]))
		units++;
	if ((size_t)(c->end - c->p) < 2 * units + 2) {
		c->bad = true;
		return "";
	}
	utf16le_to_utf8(b, c->p, units);
	bb_append(b, "", 1);
	c->p += 2 * units + 2;
	return (const char *)b->p;
}

bool sym_add_from_event(struct sym_table *t, const struct nt_rec *rec)
{
	struct pl c = { rec->payload, rec->payload + rec->payload_len, false };
	struct bytebuf a = { 0 }, b = { 0 };
	const char *s1, *s2;

	if (!rec->meta || !rec->meta->provider)
		return false;
	if (strcmp(rec->meta->provider, SYM_PROVIDER)) {
		if (strncmp(rec->meta->provider, MM_RUNTIME_PROVIDER, strlen(MM_RUNTIME_PROVIDER)))
			return false;
		if (!t->mm && !(t->mm = mm_table_new()))
			return false;
		return mm_add_from_event(t->mm, rec);
	}
	switch (rec->meta->event_id) {
	case SYM_EV_MODULE: {
		uint32_t pid = (uint32_t)pl_int(&c, 4);
		uint64_t start = pl_int(&c, 8), end = pl_int(&c, 8), off = pl_int(&c, 8);

		s1 = pl_str(&c, &a);
		s2 = pl_str(&c, &b);
		if (!c.bad)
			sym_add_module(t, pid, start, end, off, s1, s2);
		break;
	}
	case SYM_EV_JIT: {
		uint32_t pid = (uint32_t)pl_int(&c, 4);
		uint64_t start = pl_int(&c, 8), size = pl_int(&c, 8);

		s1 = pl_str(&c, &a);
		if (!c.bad)
			sym_add_jit(t, pid, start, size, s1);
		/* the trace has this process's perf map: a file of that name on
		 * this host may be another process's, with the pid reused */
		hmap_put(&t->perf_tried, pid, 1);
		break;
	}
	case SYM_EV_THREAD: {
		uint32_t pid = (uint32_t)pl_int(&c, 4), tid = (uint32_t)pl_int(&c, 4);

		s1 = pl_str(&c, &a);
		if (!c.bad)
			sym_add_thread(t, pid, tid, s1);
		break;
	}
	}
	bb_free(&a);
	bb_free(&b);
	return true;
}

/* ---- lookup ------------------------------------------------------------ */

static int cmp_map(const void *a, const void *b)
{
	const struct map_ent *x = a, *y = b;

	if (x->m.pid != y->m.pid)
		return x->m.pid < y->m.pid ? -1 : 1;
	if (x->m.start != y->m.start)
		return x->m.start < y->m.start ? -1 : 1;
	return 0;
}

static int cmp_jit(const void *a, const void *b)
{
	const struct sym_jit *x = a, *y = b;

	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	if (x->start != y->start)
		return x->start < y->start ? -1 : 1;
	return 0;
}

/* Last entry with (pid, start) <= (pid, ip), by binary search. */
#define FIND_LE(arr, n, PID, START, pid, ip)                                   \
	({                                                                     \
		size_t lo_ = 0, hi_ = (n);                                     \
		while (lo_ < hi_) {                                            \
			size_t mid_ = lo_ + (hi_ - lo_) / 2;                   \
			if ((arr)[mid_].PID < (pid) ||                         \
			    ((arr)[mid_].PID == (pid) && (arr)[mid_].START <= (ip))) \
				lo_ = mid_ + 1;                                \
			else                                                   \
				hi_ = mid_;                                    \
		}                                                              \
		lo_;                                                           \
	})

static void kernel_load(struct sym_table *t)
{
	FILE *f = fopen("/proc/kallsyms", "re");
	char line[512];
	size_t cap = 0, pool = 0, poolcap = 0;

	t->kernel_loaded = true;
	if (!f)
		return;
	/* names go into one pool; offsets become pointers after it stops growing */
	while (fgets(line, sizeof(line), f)) {
		unsigned long long addr;
		char type, name[256];
		size_t len;

		if (sscanf(line, "%llx %c %255s", &addr, &type, name) != 3 || !addr)
			continue;
		if (type != 't' && type != 'T' && type != 'w' && type != 'W')
			continue;
		len = strlen(name) + 1;
		if (array_grow((void **)&t->ksyms, &cap, t->nksyms, sizeof(*t->ksyms), 65536) ||
		    array_grow((void **)&t->kpool, &poolcap, pool + len - 1, 1, 1 << 22))
			break;
		memcpy(t->kpool + pool, name, len);
		t->ksyms[t->nksyms++] = (struct esym){ addr, 0, (const char *)(uintptr_t)pool };
		pool += len;
	}
	fclose(f);
	for (size_t i = 0; i < t->nksyms; i++)
		t->ksyms[i].name = t->kpool + (uintptr_t)t->ksyms[i].name;
	array_sort(t->ksyms, t->nksyms, sizeof(*t->ksyms), cmp_esym);
}

bool sym_lookup(struct sym_table *t, uint32_t pid, uint64_t ip, bool leaf, struct sym_result *r)
{
	uint64_t addr = leaf || !ip ? ip : ip - 1;
	size_t i;

	memset(r, 0, sizeof(*r));
	if (sym_is_kernel(ip)) {
		const struct esym *s;

		if (!t->kernel_loaded)
			kernel_load(t);
		r->module = "[kernel]";
		s = find_sym(t->ksyms, t->nksyms, addr);
		if (s) {
			r->function = s->name;
			r->offset = ip - s->addr;
		}
		return s != NULL;
	}
	/*
	 * Generated code before file mappings: with W^X (the .NET default) the
	 * runtime executes its JIT code from a shared memory file mapped twice
	 * ("/memfd:doublemapper"), which a snapshot records as a module, but
	 * only the method events and the perf map know what lies inside.
	 */
	if (t->mm) {
		struct mm_result mr;

		if (mm_lookup(t->mm, pid, addr, &mr)) {
			r->module = mr.module;
			r->function = mr.name;
			r->offset = ip - mr.start;
			return true;
		}
	}
	if (t->perf_fallback && !hmap_get(&t->perf_tried, pid, NULL)) {
		char path[64];

		hmap_put(&t->perf_tried, pid, 1);
		snprintf(path, sizeof(path), "/tmp/perf-%u.map", pid);
		sym_load_perf_map(t, pid, path);
	}
	if (!t->jsorted) {
		array_sort(t->jits, t->njits, sizeof(*t->jits), cmp_jit);
		t->jsorted = true;
	}
	i = FIND_LE(t->jits, t->njits, pid, start, pid, addr);
	if (i && t->jits[i - 1].pid == pid && addr < t->jits[i - 1].start + t->jits[i - 1].size) {
		r->module = "[jit]";
		r->function = t->jits[i - 1].name;
		r->offset = ip - t->jits[i - 1].start;
		return true;
	}
	if (!t->sorted) {
		array_sort(t->maps, t->nmaps, sizeof(*t->maps), cmp_map);
		t->sorted = true;
	}
	i = FIND_LE(t->maps, t->nmaps, m.pid, m.start, pid, addr);
	if (i && t->maps[i - 1].m.pid == pid && addr < t->maps[i - 1].m.end) {
		struct map_ent *e = &t->maps[i - 1];
		uint64_t foff = addr - e->m.start + e->m.offset;
		struct elf_mod *m = e->mod;
		size_t k;

		if (!m)
			m = e->mod = mod_get(t, e->m.path);
		if (!m)
			return false;
		if (!m->loaded)
			mod_load(m);
		r->module = m->base;
		r->offset = ip - e->m.start + e->m.offset;
		/* a different file at that path now: its symbols would lie */
		if (!m->usable || (e->m.build_id[0] && m->build_id[0] &&
				   strcmp(e->m.build_id, m->build_id)))
			return true;
		for (k = 0; k < m->nsegs; k++) {
			const struct seg *sg = &m->segs[k];

			if (foff >= sg->off && foff < sg->off + sg->filesz) {
				uint64_t va = foff - sg->off + sg->vaddr;
				const struct esym *s = find_sym(m->syms, m->nsyms, va);

				if (s) {
					r->function = s->name;
					r->offset = va + (ip - addr) - s->addr;
				}
				break;
			}
		}
		return true;
	}
	return false;
}

char *sym_format(struct sym_table *t, uint32_t pid, uint64_t ip, bool leaf, char *out, size_t len)
{
	struct sym_result r;

	if (!sym_lookup(t, pid, ip, leaf, &r) && !r.module)
		snprintf(out, len, "0x%" PRIx64, ip);
	else if (r.function)
		snprintf(out, len, "%s!%s+0x%" PRIx64, r.module, r.function, r.offset);
	else
		snprintf(out, len, "%s+0x%" PRIx64, r.module, r.offset);
	return out;
}
