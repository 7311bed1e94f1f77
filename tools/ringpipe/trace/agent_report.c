// SPDX-License-Identifier: MIT
/*
 * ringpipe report DIR (agent_report.h): one row per process trace, one per
 * container, and totals, from an agent's output directory.
 *
 * The counts come from the process traces themselves, read the way
 * TraceEvent would read them (every event, EventsLost from the sequence
 * numbers), not from the agent's ProcessEnd: what the user can open is what
 * is reported. The agent's traces only name things. An agent that restarted
 * left one trace per run, and a process that joined again (its own restart
 * of tracing, or the new agent) has one file per join: every trace is read,
 * and each file is paired with the Process event of its own join.
 *
 * A process the agent saw only through its kernel capture (Source
 * "kernel": CPython through its USDT probes, anything --kernel exec or
 * --sample saw) has no file of its own: its row counts its events in the
 * agent's traces, and it gets no ProcessEnd.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "trace/agent_report.h"
#include "util/bytebuf.h"
#include "util/hmap.h"
#include "nettrace_read.h"
#include "common/tool_util.h"
#include "util/utf.h"

#define AR_PROVIDER "Ringpipe-Agent"
#define AR_AGENT_PREFIX "ringpipe-agent_"
#define AR_SUFFIX ".nettrace"
#define AR_MAX_FIELDS 32
#define AR_CID_SHORT 12		/* container ids are shown as docker ps shows them */

/* One Ringpipe-Agent/Process event, with the ProcessEnd that closed it. */
struct ar_tag {
	uint32_t pid;
	uint64_t start;
	char *comm, *container, *pod, *runtime, *qos, *source;
	char *file;			/* base name of TraceFile */
	int64_t sync;			/* when its agent trace began: the run's order */
	size_t seq;			/* order of reading */
	bool ended;
	char *how;
	int32_t exit_status;
	bool claimed;			/* a process trace is paired with it */
};

/* One Ringpipe-Agent/Container event. */
struct ar_cinfo {
	char *id, *pod, *runtime, *qos;
};

/* One agent trace. */
struct ar_trace {
	char *name;
	uint64_t events;
	char *error;
};

/* One process trace. */
struct ar_proc {
	char *name;
	bool have_pid, have_start;
	uint32_t pid;
	uint64_t start;
	uint64_t join;			/* N of NAME.N.nettrace / NAME-N.nettrace; 1 */
	char *comm;			/* from the file name */
	bool dotnet;
	uint64_t events;
	int64_t lost;
	int64_t hdr_pid;		/* the trace's own process id, -1 unknown */
	char *error;
	const struct ar_tag *tag;
	bool seen_only;			/* no file: its events are in the agent's traces */
};

struct ar_crow {
	const char *id, *pod, *runtime, *qos;
	uint64_t procs, events;
	int64_t lost;
	bool have_last;			/* the last process counted, to count a */
	uint32_t last_pid;		/* process that joined twice once */
	uint64_t last_start;
};

struct ar {
	const char *dir;
	struct ar_trace *tr;
	size_t ntr, captr;
	struct ar_tag *tags;
	size_t ntags, captags;
	struct ar_cinfo *ci;
	size_t nci, capci;
	struct ar_proc *procs;
	size_t nprocs, capprocs;
	struct ar_crow *crows;
	size_t ncrows, capcrows;
	struct hmap kev;		/* pid -> events in the agent's traces */
	size_t nseen;			/* rows of seen_only processes */
	uint64_t distinct;		/* processes, a process that joined twice once */
	uint64_t events, untagged, errors;
	int64_t lost;
};

/* ---- file names ------------------------------------------------------------ */

bool agent_report_is_dir(const char *path)
{
	struct stat st;

	return !stat(path, &st) && S_ISDIR(st.st_mode);
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);

	return n >= k && !memcmp(s + n - k, suffix, k);
}

/* n decimal digits at s, at most max; false for none, others or more. */
static bool parse_dec(const char *s, size_t n, uint64_t max, uint64_t *out)
{
	uint64_t v = 0;
	size_t i;

	if (!n || n > 20)
		return false;
	for (i = 0; i < n; i++) {
		unsigned int d = (unsigned int)(s[i] - '0');

		if (d > 9 || v > (max - d) / 10)
			return false;
		v = v * 10 + d;
	}
	*out = v;
	return true;
}

/*
 * The agent's own trace is ringpipe-agent_PID_YYYYMMDD_HHMMSS.nettrace; a
 * process named ringpipe-agent would be ringpipe-agent_PID_START.nettrace
 * (one '_' fewer), and a longer comm starting so cannot exist (15 bytes).
 */
static bool is_agent_trace(const char *name)
{
	const char *p = name + strlen(AR_AGENT_PREFIX);
	size_t i, unders = 0, n;

	if (strncmp(name, AR_AGENT_PREFIX, strlen(AR_AGENT_PREFIX)) || *p < '0' || *p > '9')
		return false;
	n = strlen(p) - strlen(AR_SUFFIX);
	for (i = 0; i < n; i++)
		unders += p[i] == '_';
	return unders >= 2;
}

/* Splits off the last run of digits after sep at the end of [s, s + *n):
 * its value, and *n shortened to before sep. */
static bool cut_number(const char *s, size_t *n, char sep, uint64_t max, uint64_t *v)
{
	size_t i = *n;

	while (i && s[i - 1] >= '0' && s[i - 1] <= '9')
		i--;
	if (i == *n || !i || s[i - 1] != sep || !parse_dec(s + i, *n - i, max, v))
		return false;
	*n = i - 1;
	return true;
}

/*
 * COMM_PID_START[.N].nettrace: read from the right, since a comm may hold
 * '_' and '.' (but a '.N' is only ever digits after the start time).
 */
static void parse_ringpipe_name(struct ar_proc *p)
{
	const char *s = p->name;
	size_t n = strlen(s) - strlen(AR_SUFFIX), m = n;
	uint64_t join, start, pid;

	if (cut_number(s, &m, '.', UINT32_MAX, &join) && join >= 2)
		n = m;
	else
		join = 1;
	m = n;
	if (!cut_number(s, &m, '_', UINT64_MAX, &start) ||
	    !cut_number(s, &m, '_', UINT32_MAX, &pid))
		return;
	p->have_pid = p->have_start = true;
	p->pid = (uint32_t)pid;
	p->start = start;
	p->join = join;
	p->comm = m ? strndup(s, m) : NULL;
}

/*
 * dotnet-NAME-PID-START[-N].nettrace. NAME may end in "-<digits>", so three
 * trailing numbers are either NAME-PID-START or PID-START-N: the trace's
 * own process id (its header) decides, else the shorter reading wins (a
 * second runtime in one process is the rare case).
 */
static void parse_dotnet_name(struct ar_proc *p)
{
	const char *s = p->name + strlen("dotnet-");
	size_t n = strlen(s) - strlen(AR_SUFFIX), m = n, k;
	uint64_t t1, t2, t3 = 0;
	bool three;

	if (!cut_number(s, &m, '-', UINT64_MAX, &t1) ||
	    !cut_number(s, &m, '-', UINT64_MAX, &t2) || !m)
		return;
	k = m;
	three = cut_number(s, &k, '-', UINT32_MAX, &t3) && k && t1 >= 2 && t2 <= UINT32_MAX;
	if (three && p->hdr_pid == (int64_t)t3 && p->hdr_pid != (int64_t)t2) {
		p->pid = (uint32_t)t3;
		p->start = t2;
		p->join = t1;
		m = k;
	} else if (t2 <= UINT32_MAX) {
		p->pid = (uint32_t)t2;
		p->start = t1;
		p->join = 1;
	} else {
		return;
	}
	p->have_pid = p->have_start = true;
	p->comm = strndup(s, m);
}

/* ---- the agent's events ----------------------------------------------------- */

struct ar_val {
	const char *name;
	uint8_t code;
	const uint8_t *p;
	uint32_t len;			/* strings: bytes before the NUL unit */
};

/*
 * The payload's fields by the event's own field list, as far as they can
 * be walked: the agent writes numbers and strings only, and a field the
 * list names but the payload does not hold is treated as absent. Decoding
 * by name rather than by position keeps older and newer agents readable.
 */
static size_t decode(const struct nt_rec *rec, struct ar_val *v, size_t max)
{
	const struct nt_meta *m = rec->meta;
	uint32_t off = 0, len = rec->payload_len;
	size_t n = 0;
	uint16_t i;

	if (!m->has_fields)
		return 0;
	for (i = 0; i < m->nfields && n < max && off < len; i++) {
		uint8_t code = m->fields[i].type.code;
		int sz = nt_type_fixed_size(code);
		uint32_t flen, skip;

		if (sz > 0) {
			flen = skip = (uint32_t)sz;
		} else if (code == NT_STRING) {
			size_t units = utf16le_strlen(rec->payload + off, len - off);

			if (units == SIZE_MAX)
				break;
			flen = (uint32_t)units * 2;
			skip = flen + 2;
		} else {
			break;
		}
		if (skip > len - off)
			break;
		v[n++] = (struct ar_val){ m->fields[i].name, code, rec->payload + off, flen };
		off += skip;
	}
	return n;
}

static const struct ar_val *find(const struct ar_val *v, size_t n, const char *name)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (!strcmp(v[i].name, name))
			return &v[i];
	return NULL;
}

/* An integer field (its bits, zero-extended); 0 when absent. */
static uint64_t get_uint(const struct ar_val *v, size_t n, const char *name)
{
	const struct ar_val *f = find(v, n, name);
	uint64_t x = 0;

	if (!f || f->code == NT_STRING || f->len > 8 || f->code == NT_F32 || f->code == NT_F64)
		return 0;
	memcpy(&x, f->p, f->len);
	return x;
}

/* A string field as UTF-8 ("" when absent); NULL when out of memory. */
static char *get_str(const struct ar_val *v, size_t n, const char *name)
{
	const struct ar_val *f = find(v, n, name);
	struct bytebuf b = { 0 };

	if (f && f->code == NT_STRING)
		utf16le_to_utf8(&b, f->p, f->len / 2);
	bb_append(&b, "", 1);
	if (b.oom) {
		bb_free(&b);
		return NULL;
	}
	return (char *)b.p;
}

static void tag_free(struct ar_tag *t)
{
	free(t->comm);
	free(t->container);
	free(t->pod);
	free(t->runtime);
	free(t->qos);
	free(t->source);
	free(t->file);
	free(t->how);
}

static int on_process(struct ar *a, const struct ar_val *v, size_t n, int64_t sync)
{
	struct ar_tag t = { 0 };
	char *path, *base;

	t.pid = (uint32_t)get_uint(v, n, "Pid");
	t.start = get_uint(v, n, "StartTime");
	t.comm = get_str(v, n, "Comm");
	t.container = get_str(v, n, "ContainerId");
	t.pod = get_str(v, n, "PodUid");
	t.runtime = get_str(v, n, "Runtime");
	t.qos = get_str(v, n, "QosClass");
	t.source = get_str(v, n, "Source");
	path = get_str(v, n, "TraceFile");
	t.sync = sync;
	t.seq = a->ntags;
	/* the agent names the file with its output directory as it was
	 * given; the directory reported may be the same one by another path */
	base = path ? strrchr(path, '/') : NULL;
	t.file = path ? strdup(base ? base + 1 : path) : NULL;
	free(path);
	if (!t.comm || !t.container || !t.pod || !t.runtime || !t.qos || !t.source || !t.file ||
	    array_grow((void **)&a->tags, &a->captags, a->ntags, sizeof(*a->tags), 64)) {
		tag_free(&t);
		return -ENOMEM;
	}
	a->tags[a->ntags++] = t;
	return 0;
}

/* A ProcessEnd closes the earliest open join of that process in the same
 * agent run, else in an earlier run (which the process outlived). */
static bool is_seen(const struct ar_tag *t)
{
	return !strcmp(t->source, "kernel");
}

/* Could this ProcessEnd close tag t? Only a join's (the capture's naming
 * of a process ends with nothing). */
static bool ends(const struct ar_tag *t, uint32_t pid, uint64_t start)
{
	return !t->ended && t->pid == pid && t->start == start && !is_seen(t);
}

static int on_end(struct ar *a, const struct ar_val *v, size_t n, size_t first_of_trace)
{
	uint32_t pid = (uint32_t)get_uint(v, n, "Pid");
	uint64_t start = get_uint(v, n, "StartTime");
	struct ar_tag *t = NULL;
	size_t i;

	for (i = first_of_trace; i < a->ntags && !t; i++)
		if (ends(&a->tags[i], pid, start))
			t = &a->tags[i];
	for (i = 0; i < first_of_trace && !t; i++)
		if (ends(&a->tags[i], pid, start))
			t = &a->tags[i];
	if (!t)
		return 0;	/* a process whose Process event is lost: nothing to name */
	t->how = get_str(v, n, "How");
	if (!t->how)
		return -ENOMEM;
	t->ended = true;
	t->exit_status = (int32_t)(uint32_t)get_uint(v, n, "ExitStatus");
	return 0;
}

static int on_container(struct ar *a, const struct ar_val *v, size_t n)
{
	struct ar_cinfo c = { 0 };

	c.id = get_str(v, n, "ContainerId");
	c.pod = get_str(v, n, "PodUid");
	c.runtime = get_str(v, n, "Runtime");
	c.qos = get_str(v, n, "QosClass");
	if (!c.id || !c.pod || !c.runtime || !c.qos ||
	    array_grow((void **)&a->ci, &a->capci, a->nci, sizeof(*a->ci), 16)) {
		free(c.id);
		free(c.pod);
		free(c.runtime);
		free(c.qos);
		return -ENOMEM;
	}
	a->ci[a->nci++] = c;
	return 0;
}

static char *path_of(const struct ar *a, const char *name)
{
	char *p = NULL;

	if (asprintf(&p, "%s/%s", a->dir, name) < 0)
		return NULL;
	return p;
}

/* Why a trace could not be read, from the reader or errno. */
static char *reader_error(struct nt_reader *r, int err)
{
	const char *msg = r ? nt_reader_errmsg(r) : NULL;

	return strdup(msg && *msg ? msg : strerror(err));
}

/* Reads one agent trace into the tag tables; 0, or -ENOMEM. A trace that
 * is corrupt past some point still gives what came before. */
static int read_agent_trace(struct ar *a, struct ar_trace *t)
{
	char *path = path_of(a, t->name);
	struct ar_val v[AR_MAX_FIELDS];
	struct nt_reader *r;
	struct nt_rec rec;
	size_t first = a->ntags;
	int64_t sync = 0;
	int err = 0;

	if (!path)
		return -ENOMEM;
	r = nt_reader_open(path);
	free(path);
	if (!r) {
		t->error = reader_error(NULL, errno);
		return t->error ? 0 : -ENOMEM;
	}
	while ((err = nt_reader_next(r, &rec)) > 0) {
		const struct nt_meta *m = rec.meta;
		const char *name = m->raw_name[0] ? m->raw_name : m->name;
		int e = 0;
		size_t n;

		if (!t->events++)
			sync = nt_reader_info(r)->sync_unix_ns;
		if (strcmp(m->provider, AR_PROVIDER)) {
			uint64_t k = 0;

			/* a capture's event, on the process it is about */
			hmap_get(&a->kev, (uint64_t)rec.pid, &k);
			if (hmap_put(&a->kev, (uint64_t)rec.pid, k + 1)) {
				nt_reader_free(r);
				return -ENOMEM;
			}
			continue;
		}
		n = decode(&rec, v, AR_MAX_FIELDS);
		if (!strcmp(name, "Process"))
			e = on_process(a, v, n, sync);
		else if (!strcmp(name, "ProcessEnd"))
			e = on_end(a, v, n, first);
		else if (!strcmp(name, "Container"))
			e = on_container(a, v, n);
		if (e) {
			nt_reader_free(r);
			return e;
		}
	}
	if (err < 0) {
		t->error = reader_error(r, -err);
		if (!t->error) {
			nt_reader_free(r);
			return -ENOMEM;
		}
	}
	nt_reader_free(r);
	return 0;
}

/* ---- the process traces ---------------------------------------------------- */

static int read_proc(struct ar *a, struct ar_proc *p)
{
	char *path = path_of(a, p->name);
	struct nt_reader *r;
	struct nt_rec rec;
	int err;

	if (!path)
		return -ENOMEM;
	r = nt_reader_open(path);
	free(path);
	if (!r) {
		p->error = reader_error(NULL, errno);
		return p->error ? 0 : -ENOMEM;
	}
	while ((err = nt_reader_next(r, &rec)) > 0)
		if (!p->events++)
			p->hdr_pid = rec.pid;
	if (nt_reader_info(r)->pid > 0)
		p->hdr_pid = nt_reader_info(r)->pid;
	p->lost = nt_reader_lost(r);
	if (err < 0) {
		p->error = reader_error(r, -err);
		if (!p->error) {
			nt_reader_free(r);
			return -ENOMEM;
		}
	}
	nt_reader_free(r);
	if (!strncmp(p->name, "dotnet-", strlen("dotnet-")))
		parse_dotnet_name(p);
	else
		parse_ringpipe_name(p);
	if (!p->have_pid && p->hdr_pid > 0 && p->hdr_pid <= UINT32_MAX) {
		/* a trace named otherwise still says whose it is */
		p->have_pid = true;
		p->pid = (uint32_t)p->hdr_pid;
	}
	return 0;
}

static int cmp_proc(const void *x, const void *y);

/* Is tag t the Process event of p's own join? The agent names the file in
 * it; a .NET stream is named by its part file, .dotnet-PID-START[-N].part,
 * which ends the final dotnet-NAME-PID-START[-N].nettrace the same way. */
static bool names_file(const struct ar_tag *t, const struct ar_proc *p)
{
	const char *key;
	size_t klen, n = strlen(p->name);

	if (!strcmp(t->file, p->name))
		return true;
	if (!p->dotnet || strncmp(t->file, ".dotnet-", 8) || !ends_with(t->file, ".part"))
		return false;
	key = t->file + 8;
	klen = strlen(key) - strlen(".part");
	n -= strlen(AR_SUFFIX);
	return klen && n > klen + strlen("dotnet-") && p->name[n - klen - 1] == '-' &&
	       !memcmp(p->name + n - klen, key, klen);
}

/*
 * Pairs each process trace with a Process event: first the one that names
 * its file, then an unpaired one of the same (Pid, StartTime) in the order
 * the joins happened, and last any of the same process (its tags are the
 * same whichever join they were written for).
 */
static void match(struct ar *a)
{
	size_t i, k;

	for (i = 0; i < a->nprocs; i++)
		for (k = 0; k < a->ntags && !a->procs[i].tag; k++)
			if (!a->tags[k].claimed && names_file(&a->tags[k], &a->procs[i])) {
				a->tags[k].claimed = true;
				a->procs[i].tag = &a->tags[k];
			}
	for (i = 0; i < a->nprocs; i++) {
		struct ar_proc *p = &a->procs[i];

		if (p->tag || !p->have_start)
			continue;
		for (k = 0; k < a->ntags && !p->tag; k++)
			if (!a->tags[k].claimed && !is_seen(&a->tags[k]) && a->tags[k].pid == p->pid &&
			    a->tags[k].start == p->start) {
				a->tags[k].claimed = true;
				p->tag = &a->tags[k];
			}
		for (k = 0; k < a->ntags && !p->tag; k++)
			if (!is_seen(&a->tags[k]) && a->tags[k].pid == p->pid &&
			    a->tags[k].start == p->start)
				p->tag = &a->tags[k];
		for (k = 0; k < a->ntags && !p->tag; k++)
			if (a->tags[k].pid == p->pid && a->tags[k].start == p->start)
				p->tag = &a->tags[k];
	}
}

/* A row per process only the capture saw (no file of its own), named by
 * its latest Process event (an exec renames it). */
static int add_seen(struct ar *a)
{
	size_t nfiles = a->nprocs, i, k;

	for (i = 0; i < a->ntags; i++) {
		const struct ar_tag *t = &a->tags[i];
		struct ar_proc *row = NULL;
		uint64_t n = 0;

		if (!is_seen(t))
			continue;
		for (k = 0; k < a->nprocs && !row; k++)
			if (a->procs[k].have_start && a->procs[k].pid == t->pid &&
			    a->procs[k].start == t->start)
				row = &a->procs[k];
		if (row) {
			if (row->seen_only)
				row->tag = t;	/* later: the tags are in order */
			continue;
		}
		if (array_grow((void **)&a->procs, &a->capprocs, a->nprocs, sizeof(*a->procs), 64))
			return -ENOMEM;
		hmap_get(&a->kev, t->pid, &n);
		a->procs[a->nprocs] = (struct ar_proc){
			.name = strdup(t->file), .have_pid = true, .have_start = true,
			.pid = t->pid, .start = t->start, .join = 1, .events = n,
			.hdr_pid = t->pid, .tag = t, .seen_only = true,
		};
		if (!a->procs[a->nprocs].name)
			return -ENOMEM;
		a->nprocs++;
		a->nseen++;
	}
	if (a->nprocs != nfiles)
		array_sort(a->procs, a->nprocs, sizeof(*a->procs), cmp_proc);
	return 0;
}

static const struct ar_cinfo *cinfo(const struct ar *a, const char *id)
{
	size_t i;

	for (i = 0; i < a->nci; i++)
		if (!strcmp(a->ci[i].id, id))
			return &a->ci[i];
	return NULL;
}

static const char *first_set(const char *x, const char *y)
{
	return x && *x ? x : y && *y ? y : "";
}

static int account(struct ar *a)
{
	size_t i, k;

	for (i = 0; i < a->nprocs; i++) {
		const struct ar_proc *p = &a->procs[i];
		const struct ar_proc *prev = i ? &a->procs[i - 1] : NULL;
		bool same = prev && p->have_start && prev->have_start && p->pid == prev->pid &&
			    p->start == prev->start;
		struct ar_crow *c = NULL;

		a->distinct += !same;
		a->events += p->events;
		a->lost += p->lost;
		a->errors += !!p->error;
		a->untagged += !p->tag;
		if (!p->tag || !p->tag->container[0])
			continue;
		for (k = 0; k < a->ncrows && !c; k++)
			if (!strcmp(a->crows[k].id, p->tag->container))
				c = &a->crows[k];
		if (!c) {
			const struct ar_cinfo *ci = cinfo(a, p->tag->container);

			if (array_grow((void **)&a->crows, &a->capcrows, a->ncrows,
				       sizeof(*a->crows), 16))
				return -ENOMEM;
			c = &a->crows[a->ncrows++];
			*c = (struct ar_crow){
				.id = p->tag->container,
				.pod = first_set(p->tag->pod, ci ? ci->pod : NULL),
				.runtime = first_set(p->tag->runtime, ci ? ci->runtime : NULL),
				.qos = first_set(p->tag->qos, ci ? ci->qos : NULL),
			};
		}
		/* the rows are sorted by process: its joins are adjacent */
		if (!c->have_last || !p->have_start || c->last_pid != p->pid ||
		    c->last_start != p->start)
			c->procs++;
		c->have_last = p->have_start;
		c->last_pid = p->pid;
		c->last_start = p->start;
		c->events += p->events;
		c->lost += p->lost;
	}
	for (i = 0; i < a->ntr; i++)
		a->errors += !!a->tr[i].error;
	return 0;
}

/* ---- the directory ----------------------------------------------------------- */

static int cmp_name(const void *x, const void *y)
{
	return strcmp(((const struct ar_trace *)x)->name, ((const struct ar_trace *)y)->name);
}

static int cmp_u64(uint64_t x, uint64_t y)
{
	return (x > y) - (x < y);
}

static int cmp_proc(const void *x, const void *y)
{
	const struct ar_proc *p = x, *q = y;
	int c;

	if (p->have_pid != q->have_pid)
		return p->have_pid ? -1 : 1;
	if ((c = cmp_u64(p->pid, q->pid)) || (c = cmp_u64(p->start, q->start)) ||
	    (c = cmp_u64(p->join, q->join)))
		return c;
	return strcmp(p->name, q->name);
}

/* Agent runs in the order they began, then as read. */
static int cmp_tag(const void *x, const void *y)
{
	const struct ar_tag *s = x, *t = y;

	if (s->sync != t->sync)
		return s->sync < t->sync ? -1 : 1;
	return cmp_u64(s->seq, t->seq);
}

static int cmp_crow(const void *x, const void *y)
{
	return strcmp(((const struct ar_crow *)x)->id, ((const struct ar_crow *)y)->id);
}

static int list_dir(struct ar *a)
{
	DIR *d = opendir(a->dir);
	struct dirent *e;
	int err = 0;

	if (!d)
		return -errno;
	while (!err && (e = readdir(d))) {
		struct stat st;
		char *name;

		/* hidden: the .dotnet-*.part streams still being received */
		if (e->d_name[0] == '.' || !ends_with(e->d_name, AR_SUFFIX) ||
		    strlen(e->d_name) == strlen(AR_SUFFIX) ||
		    !strncmp(e->d_name, AGENT_MERGED_PREFIX, strlen(AGENT_MERGED_PREFIX)))
			continue;
		if (fstatat(dirfd(d), e->d_name, &st, 0) || !S_ISREG(st.st_mode))
			continue;
		name = strdup(e->d_name);
		if (!name) {
			err = -ENOMEM;
		} else if (is_agent_trace(name)) {
			if (array_grow((void **)&a->tr, &a->captr, a->ntr, sizeof(*a->tr), 4))
				err = -ENOMEM, free(name);
			else
				a->tr[a->ntr++] = (struct ar_trace){ .name = name };
		} else {
			if (array_grow((void **)&a->procs, &a->capprocs, a->nprocs,
				       sizeof(*a->procs), 64))
				err = -ENOMEM, free(name);
			else
				a->procs[a->nprocs++] = (struct ar_proc){
					.name = name, .join = 1, .hdr_pid = -1,
					.dotnet = !strncmp(name, "dotnet-", 7),
				};
		}
	}
	closedir(d);
	return err;
}

/* ---- output ------------------------------------------------------------------ */

/* Appends a string literal. */
#define PUT(b, lit) bb_append(b, lit, sizeof(lit) - 1)

/* A tag, or null where the agent said nothing. */
static void json_opt(struct bytebuf *b, const char *key, const char *s)
{
	bb_printf(b, ",\"%s\":", key);
	if (s && *s)
		nt_json_cstring(b, s);
	else
		PUT(b, "null");
}

static const char *proc_source(const struct ar_proc *p)
{
	if (p->tag && p->tag->source[0])
		return p->tag->source;
	return p->dotnet ? "dotnet" : "ringpipe";
}

static const char *proc_comm(const struct ar_proc *p)
{
	if (p->tag && p->tag->comm[0])
		return p->tag->comm;
	return p->comm ? p->comm : "";
}

static void print_json(const struct ar *a, struct bytebuf *b)
{
	size_t i;

	PUT(b, "{\"dir\":");
	nt_json_cstring(b, a->dir);
	PUT(b, ",\"agent_traces\":[");
	for (i = 0; i < a->ntr; i++) {
		bb_printf(b, "%s{\"file\":", i ? "," : "");
		nt_json_cstring(b, a->tr[i].name);
		bb_printf(b, ",\"events\":%" PRIu64, a->tr[i].events);
		json_opt(b, "error", a->tr[i].error);
		PUT(b, "}");
	}
	PUT(b, "],\"processes\":[");
	for (i = 0; i < a->nprocs; i++) {
		const struct ar_proc *p = &a->procs[i];
		const struct ar_tag *t = p->tag;

		bb_printf(b, "%s{", i ? "," : "");
		if (p->have_pid)
			bb_printf(b, "\"pid\":%" PRIu32, p->pid);
		else
			bb_printf(b, "\"pid\":null");
		if (p->have_start)
			bb_printf(b, ",\"start_time\":%" PRIu64, p->start);
		else
			bb_printf(b, ",\"start_time\":null");
		json_opt(b, "comm", proc_comm(p));
		json_opt(b, "container_id", t ? t->container : NULL);
		json_opt(b, "pod_uid", t ? t->pod : NULL);
		json_opt(b, "runtime", t ? t->runtime : NULL);
		json_opt(b, "qos", t ? t->qos : NULL);
		json_opt(b, "source", proc_source(p));
		bb_printf(b, ",\"tagged\":%s", t ? "true" : "false");
		json_opt(b, "how", t && t->ended ? t->how : NULL);
		if (t && t->ended)
			bb_printf(b, ",\"exit_status\":%" PRId32, t->exit_status);
		else
			bb_printf(b, ",\"exit_status\":null");
		bb_printf(b, ",\"events\":%" PRIu64 ",\"lost\":%" PRId64 ",\"file\":", p->events,
			  p->lost);
		nt_json_cstring(b, p->name);
		json_opt(b, "error", p->error);
		PUT(b, "}");
	}
	PUT(b, "],\"containers\":[");
	for (i = 0; i < a->ncrows; i++) {
		const struct ar_crow *c = &a->crows[i];

		bb_printf(b, "%s{\"container_id\":", i ? "," : "");
		nt_json_cstring(b, c->id);
		json_opt(b, "pod_uid", c->pod);
		json_opt(b, "runtime", c->runtime);
		json_opt(b, "qos", c->qos);
		bb_printf(b, ",\"processes\":%" PRIu64 ",\"events\":%" PRIu64 ",\"lost\":%" PRId64
			  "}", c->procs, c->events, c->lost);
	}
	bb_printf(b, "],\"totals\":{\"files\":%zu,\"processes\":%" PRIu64 ",\"containers\":%zu,"
		  "\"untagged\":%" PRIu64 ",\"events\":%" PRIu64 ",\"lost\":%" PRId64
		  ",\"errors\":%" PRIu64 ",\"agent_traces\":%zu}}\n", a->nprocs - a->nseen, a->distinct,
		  a->ncrows, a->untagged, a->events, a->lost, a->errors, a->ntr);
}

static const char *dash(const char *s)
{
	return s && *s ? s : "-";
}

static void print_text(const struct ar *a)
{
	size_t i;

	printf("directory   %s\n", a->dir);
	printf("agent       %zu trace%s", a->ntr, a->ntr == 1 ? "" : "s");
	for (i = 0; i < a->ntr; i++)
		printf("%s%s%s", i ? ", " : ": ", a->tr[i].name, a->tr[i].error ? " (unreadable)" : "");
	printf("%s\n", a->ntr ? "" : " (no ringpipe-agent_*.nettrace: processes are untagged)");

	printf("\nprocesses:\n");
	printf("  %8s  %-16s  %-12s  %-36s  %-8s  %-22s  %10s  %8s  %s\n", "PID", "COMM",
	       "CONTAINER", "POD", "SOURCE", "HOW", "EVENTS", "LOST", "FILE");
	for (i = 0; i < a->nprocs; i++) {
		const struct ar_proc *p = &a->procs[i];
		const struct ar_tag *t = p->tag;
		char pid[16] = "-";

		if (p->have_pid)
			snprintf(pid, sizeof(pid), "%" PRIu32, p->pid);
		printf("  %8s  %-16s  %-12.*s  %-36s  %-8s  %-22s  %10" PRIu64 "  %8" PRId64 "  %s\n",
		       pid, dash(proc_comm(p)), AR_CID_SHORT, dash(t ? t->container : NULL),
		       dash(t ? t->pod : NULL), proc_source(p),
		       t ? (t->ended ? t->how : p->seen_only ? "-" : "(no ProcessEnd)") : "-",
		       p->events, p->lost,
		       p->name);
		if (p->error)
			printf("  %8s  error: %s\n", "", p->error);
	}

	printf("\ncontainers:\n");
	if (!a->ncrows)
		printf("  (none)\n");
	else
		printf("  %-12s  %-36s  %-12s  %-12s  %9s  %10s  %8s\n", "CONTAINER", "POD",
		       "RUNTIME", "QOS", "PROCESSES", "EVENTS", "LOST");
	for (i = 0; i < a->ncrows; i++) {
		const struct ar_crow *c = &a->crows[i];

		printf("  %-12.*s  %-36s  %-12s  %-12s  %9" PRIu64 "  %10" PRIu64 "  %8" PRId64 "\n",
		       AR_CID_SHORT, c->id, dash(c->pod), dash(c->runtime), dash(c->qos), c->procs,
		       c->events, c->lost);
	}

	printf("\ntotal       %" PRIu64 " process%s in %zu file%s (%" PRIu64 " untagged), "
	       "%zu container%s, %" PRIu64 " events, %" PRId64 " lost (EventsLost)",
	       a->distinct, a->distinct == 1 ? "" : "es", a->nprocs - a->nseen,
	       a->nprocs - a->nseen == 1 ? "" : "s",
	       a->untagged, a->ncrows, a->ncrows == 1 ? "" : "s", a->events, a->lost);
	if (a->errors)
		printf(", %" PRIu64 " unreadable", a->errors);
	printf("\n");
}

static void ar_free(struct ar *a)
{
	size_t i;

	for (i = 0; i < a->ntr; i++) {
		free(a->tr[i].name);
		free(a->tr[i].error);
	}
	free(a->tr);
	for (i = 0; i < a->ntags; i++)
		tag_free(&a->tags[i]);
	free(a->tags);
	for (i = 0; i < a->nci; i++) {
		free(a->ci[i].id);
		free(a->ci[i].pod);
		free(a->ci[i].runtime);
		free(a->ci[i].qos);
	}
	free(a->ci);
	for (i = 0; i < a->nprocs; i++) {
		free(a->procs[i].name);
		free(a->procs[i].comm);
		free(a->procs[i].error);
	}
	free(a->procs);
	free(a->crows);
	hmap_free(&a->kev);
}

int agent_report_dir(const char *dir_arg, bool json)
{
	char *dir = strdup(dir_arg);
	struct ar a = { .dir = dir };
	struct bytebuf b = { 0 };
	size_t i;
	int err, rc = 0;

	if (!dir)
		return tool_err("report", "out of memory");
	/* "out/" and "out" name the same files: say it one way */
	for (i = strlen(dir); i > 1 && dir[i - 1] == '/'; i--)
		dir[i - 1] = 0;
	err = list_dir(&a);
	if (err && err != -ENOMEM) {
		rc = tool_err("report", "%s: %s", dir, strerror(-err));
		err = 0;
		goto out;
	}
	if (err)
		goto out;
	if (!a.nprocs && !a.ntr) {
		tool_err("report", "%s: no nettrace files here (is it a 'ringpipe agent' "
			 "--output-dir?)", dir);
		rc = 1;
		goto out;
	}
	array_sort(a.tr, a.ntr, sizeof(*a.tr), cmp_name);
	for (i = 0; i < a.ntr && !err; i++)
		err = read_agent_trace(&a, &a.tr[i]);
	for (i = 0; i < a.nprocs && !err; i++)
		err = read_proc(&a, &a.procs[i]);
	if (err)
		goto out;
	/* pointers into tags are taken only after this */
	array_sort(a.tags, a.ntags, sizeof(*a.tags), cmp_tag);
	array_sort(a.procs, a.nprocs, sizeof(*a.procs), cmp_proc);
	match(&a);
	err = add_seen(&a);
	if (!err)
		err = account(&a);
	if (err)
		goto out;
	array_sort(a.crows, a.ncrows, sizeof(*a.crows), cmp_crow);
	fflush(stdout);
	if (json) {
		print_json(&a, &b);
		if (b.oom) {
			err = -ENOMEM;
			goto out;
		}
		bb_fwrite(&b, stdout);
	} else {
		print_text(&a);
	}
	fflush(stdout);
	/* after the summary, as for one file: what could not be read, and why */
	for (i = 0; i < a.ntr; i++)
		if (a.tr[i].error)
			tool_err("report", "%s/%s: %s", dir, a.tr[i].name, a.tr[i].error);
	for (i = 0; i < a.nprocs; i++)
		if (a.procs[i].error)
			tool_err("report", "%s/%s: %s", dir, a.procs[i].name, a.procs[i].error);
	rc = a.errors ? 1 : 0;
out:
	if (err)
		rc = err == -ENOMEM ? tool_err("report", "out of memory") : 1;
	bb_free(&b);
	ar_free(&a);
	free(dir);
	return rc;
}
