// SPDX-License-Identifier: MIT
/*
 * The BPF side of `ringpipe record` (see bpf_capture.h).
 *
 * Data path: capture.bpf.c submits fixed-layout records (bpf/capture.h) to
 * a BPF ring buffer; one consumer thread here polls it, checks each record's
 * type and size, encodes the payload of the matching ringpipe event and
 * writes it with rp_event_write_origin(): the event keeps the thread, CPU
 * and time of the probe hit instead of the consumer's.
 *
 * Clocks: bpf_ktime_get_ns() is CLOCK_MONOTONIC. The consumer converts it to
 * the library's tick clock (TSC or CLOCK_MONOTONIC, core/clock.h) against an
 * anchor pair (ticks, monotonic ns) it refreshes every 100 ms, so the
 * conversion error stays at the calibration error over 100 ms (well under a
 * microsecond) and the events sort among ring events on one timeline.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <linux/capability.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "core/atomics.h"
#include "capture/bpf_capture.h"
#include "util/bytebuf.h"
#include "capture.h"
#include "capture.skel.h"
#include "core/clock.h"
#include "util/hmap.h"
#include "ringpipe/ringpipe.h"
#include "session/session.h"
#include "util/thread.h"
#include "util/utf.h"
#include "producer/write_origin.h"

#define ANCHOR_REFRESH_NS 100000000ull
/* A BPF program stamps its record right after reserving it and submits it
 * microseconds later; a record the consumer did not see yet can be older
 * than the consumer's pass only by that window, bounded generously here
 * (a program preempted between reserve and submit for longer than this
 * would make its event late: written with the last timestamp, counted). */
#define SUBMIT_SLACK_NS 1000000ull
#define MAX_LINKS 64
#define MAX_USDT 16
#define PAYLOAD_MAX 2048
#define SEEN_PIDS_MAX 65536u	/* pids seen_pid was told of, before it starts over */

/* ---- providers and events ---------------------------------------------- */

enum {
	EV_PY_GC_START, EV_PY_GC_DONE,
	EV_JVM_GC_BEGIN, EV_JVM_GC_END, EV_JVM_POOL_BEGIN, EV_JVM_POOL_END,
	EV_JVM_CLASS, EV_JVM_COMPILE_BEGIN, EV_JVM_COMPILE_END, EV_JVM_THREAD,
	EV_EXEC, EV_FORK, EV_EXIT, EV_SWITCH, EV_CGROUP,
	EV_NR,
};

/* Appended to every BPF-captured event. */
#define COMMON_FIELDS							\
	{ .name = "Pid", .type = RP_TYPE_U32 },				\
	{ .name = "CgroupId", .type = RP_TYPE_U64 },			\
	{ .name = "KtimeNs", .type = RP_TYPE_U64 }

static const struct rp_field f_py_gc_start[] = {
	{ .name = "Generation", .type = RP_TYPE_I32 }, COMMON_FIELDS,
};
static const struct rp_field f_py_gc_done[] = {
	{ .name = "Collected", .type = RP_TYPE_I64 }, COMMON_FIELDS,
};
static const struct rp_field f_jvm_gc_begin[] = {
	{ .name = "Full", .type = RP_TYPE_BOOL }, COMMON_FIELDS,
};
static const struct rp_field f_jvm_gc_end[] = { COMMON_FIELDS };
static const struct rp_field f_jvm_pool[] = {
	{ .name = "Manager", .type = RP_TYPE_STRING },
	{ .name = "Pool", .type = RP_TYPE_STRING },
	{ .name = "Initial", .type = RP_TYPE_U64 },
	{ .name = "Used", .type = RP_TYPE_U64 },
	{ .name = "Committed", .type = RP_TYPE_U64 },
	{ .name = "Max", .type = RP_TYPE_U64 },
	COMMON_FIELDS,
};
static const struct rp_field f_jvm_class[] = {
	{ .name = "ClassName", .type = RP_TYPE_STRING },
	{ .name = "ClassLoaderId", .type = RP_TYPE_U64 },
	{ .name = "IsShared", .type = RP_TYPE_BOOL },
	COMMON_FIELDS,
};
static const struct rp_field f_jvm_compile_begin[] = {
	{ .name = "Compiler", .type = RP_TYPE_STRING },
	{ .name = "ClassName", .type = RP_TYPE_STRING },
	{ .name = "MethodName", .type = RP_TYPE_STRING },
	{ .name = "Signature", .type = RP_TYPE_STRING },
	COMMON_FIELDS,
};
static const struct rp_field f_jvm_compile_end[] = {
	{ .name = "Compiler", .type = RP_TYPE_STRING },
	{ .name = "ClassName", .type = RP_TYPE_STRING },
	{ .name = "MethodName", .type = RP_TYPE_STRING },
	{ .name = "Signature", .type = RP_TYPE_STRING },
	{ .name = "Success", .type = RP_TYPE_BOOL },
	COMMON_FIELDS,
};
static const struct rp_field f_jvm_thread[] = {
	{ .name = "ThreadName", .type = RP_TYPE_STRING },
	{ .name = "JavaThreadId", .type = RP_TYPE_U64 },
	{ .name = "NativeThreadId", .type = RP_TYPE_U64 },
	{ .name = "IsDaemon", .type = RP_TYPE_BOOL },
	COMMON_FIELDS,
};
static const struct rp_field f_exec[] = {
	{ .name = "Filename", .type = RP_TYPE_STRING },
	{ .name = "Comm", .type = RP_TYPE_STRING },
	{ .name = "OldTid", .type = RP_TYPE_U32 },
	COMMON_FIELDS,
};
static const struct rp_field f_fork[] = {
	{ .name = "ChildPid", .type = RP_TYPE_U32 },
	{ .name = "ChildTid", .type = RP_TYPE_U32 },
	{ .name = "Comm", .type = RP_TYPE_STRING },
	COMMON_FIELDS,
};
static const struct rp_field f_exit[] = {
	{ .name = "ExitCode", .type = RP_TYPE_I32 },
	{ .name = "GroupDead", .type = RP_TYPE_BOOL },
	{ .name = "Comm", .type = RP_TYPE_STRING },
	COMMON_FIELDS,
};
static const struct rp_field f_switch[] = {
	{ .name = "NextPid", .type = RP_TYPE_U32 },
	{ .name = "NextTid", .type = RP_TYPE_U32 },
	{ .name = "PrevState", .type = RP_TYPE_I64 },
	{ .name = "PrevComm", .type = RP_TYPE_STRING },
	{ .name = "NextComm", .type = RP_TYPE_STRING },
	COMMON_FIELDS,
};
static const struct rp_field f_cgroup[] = {
	{ .name = "CgroupId", .type = RP_TYPE_U64 },
	{ .name = "Path", .type = RP_TYPE_STRING },
};

#define NF(a) (uint16_t)(sizeof(a) / sizeof((a)[0]))

static const struct ev_def {
	int provider;		/* 0 python, 1 jvm, 2 kernel */
	uint32_t id;
	const char *name;
	uint8_t opcode;
	uint16_t nfields;
	const struct rp_field *fields;
} ev_defs[EV_NR] = {
	/* opcodes 1/2 (Start/Stop) where TraceEvent names begin/end pairs */
	[EV_PY_GC_START] = { 0, 1, "GCStart", 1, NF(f_py_gc_start), f_py_gc_start },
	[EV_PY_GC_DONE] = { 0, 2, "GCStop", 2, NF(f_py_gc_done), f_py_gc_done },
	[EV_JVM_GC_BEGIN] = { 1, 1, "GCStart", 1, NF(f_jvm_gc_begin), f_jvm_gc_begin },
	[EV_JVM_GC_END] = { 1, 2, "GCStop", 2, NF(f_jvm_gc_end), f_jvm_gc_end },
	[EV_JVM_POOL_BEGIN] = { 1, 3, "MemPoolGCStart", 1, NF(f_jvm_pool), f_jvm_pool },
	[EV_JVM_POOL_END] = { 1, 4, "MemPoolGCStop", 2, NF(f_jvm_pool), f_jvm_pool },
	[EV_JVM_CLASS] = { 1, 5, "ClassLoaded", 0, NF(f_jvm_class), f_jvm_class },
	[EV_JVM_COMPILE_BEGIN] = { 1, 6, "MethodCompileStart", 1, NF(f_jvm_compile_begin),
				   f_jvm_compile_begin },
	[EV_JVM_COMPILE_END] = { 1, 7, "MethodCompileStop", 2, NF(f_jvm_compile_end),
				 f_jvm_compile_end },
	[EV_JVM_THREAD] = { 1, 8, "ThreadStart", 0, NF(f_jvm_thread), f_jvm_thread },
	[EV_EXEC] = { 2, 1, "Exec", 0, NF(f_exec), f_exec },
	[EV_FORK] = { 2, 2, "Fork", 0, NF(f_fork), f_fork },
	[EV_EXIT] = { 2, 3, "Exit", 0, NF(f_exit), f_exit },
	[EV_SWITCH] = { 2, 4, "Switch", 0, NF(f_switch), f_switch },
	[EV_CGROUP] = { 2, 5, "CgroupMap", 0, NF(f_cgroup), f_cgroup },
};

static const char *const prov_names[3] = {
	RP_CAP_PROVIDER_PYTHON, RP_CAP_PROVIDER_JVM, RP_CAP_PROVIDER_KERNEL,
};

static pthread_mutex_t def_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rp_provider *providers[3];
static struct rp_event *events[EV_NR];

/* Generic --usdt probes: one event per distinct spec, kept process-wide. */
struct usdt_spec {
	char *binary, *provider, *probe;
	char *prov_name;		/* Ringpipe-Usdt-<provider> */
	struct rp_provider *prov;
	struct rp_event *ev;
};
static struct usdt_spec usdt_specs[MAX_USDT];
static size_t nusdt_specs;

static const struct rp_field f_usdt[RP_BPF_USDT_ARGS + 3] = {
	{ .name = "Arg0", .type = RP_TYPE_U64 }, { .name = "Arg1", .type = RP_TYPE_U64 },
	{ .name = "Arg2", .type = RP_TYPE_U64 }, { .name = "Arg3", .type = RP_TYPE_U64 },
	{ .name = "Arg4", .type = RP_TYPE_U64 }, { .name = "Arg5", .type = RP_TYPE_U64 },
	COMMON_FIELDS,
};

static int parse_usdt(const char *spec, char **bin, char **prov, char **probe)
{
	const char *c2 = strrchr(spec, ':'), *c1;

	if (!c2 || c2 == spec)
		return -EINVAL;
	for (c1 = c2 - 1; c1 > spec && *c1 != ':'; c1--)
		;
	if (c1 == spec || c2 - c1 < 2 || !c2[1])
		return -EINVAL;
	*bin = strndup(spec, (size_t)(c1 - spec));
	*prov = strndup(c1 + 1, (size_t)(c2 - c1 - 1));
	*probe = strdup(c2 + 1);
	if (!*bin || !*prov || !*probe)
		return -ENOMEM;
	return 0;
}

static struct rp_provider *provider_named(const char *name)
{
	struct rp_provider_opts po = { .sz = sizeof(po), .name = name };

	return rp_provider_new(&po);
}

static int define_usdt(const char *spec, char *err, size_t errlen)
{
	struct usdt_spec *u;
	struct rp_provider *p = NULL;
	struct rp_event_opts eo = { .sz = sizeof(eo) };
	char *bin = NULL, *prov = NULL, *probe = NULL;
	size_t i;
	uint32_t id = 1;

	if (parse_usdt(spec, &bin, &prov, &probe)) {
		snprintf(err, errlen, "bad --usdt '%s': want BINARY:PROVIDER:PROBE", spec);
		free(bin), free(prov), free(probe);
		return -EINVAL;
	}
	for (i = 0; i < nusdt_specs; i++) {
		u = &usdt_specs[i];
		if (!strcmp(u->provider, prov)) {
			if (!strcmp(u->probe, probe) && !strcmp(u->binary, bin)) {
				free(bin), free(prov), free(probe);
				return 0;	/* defined by an earlier call */
			}
			id++;
		}
	}
	if (nusdt_specs == MAX_USDT) {
		snprintf(err, errlen, "at most %d --usdt probes", MAX_USDT);
		free(bin), free(prov), free(probe);
		return -E2BIG;
	}
	u = &usdt_specs[nusdt_specs];
	u->binary = bin;
	u->provider = prov;
	u->probe = probe;
	if (asprintf(&u->prov_name, "%s%s", RP_CAP_PROVIDER_USDT_PREFIX, prov) < 0)
		return -ENOMEM;
	/* probes of one USDT provider are events of one ringpipe provider */
	for (i = 0; i < nusdt_specs && !p; i++)
		if (!strcmp(usdt_specs[i].provider, prov))
			p = usdt_specs[i].prov;
	if (!p)
		p = provider_named(u->prov_name);
	if (!p) {
		snprintf(err, errlen, "cannot define provider %s: %s", u->prov_name, rp_last_error());
		return -errno;
	}
	u->prov = p;
	eo.id = id;
	eo.name = probe;
	eo.level = 4;
	eo.nfields = NF(f_usdt);
	eo.fields = f_usdt;
	u->ev = rp_event_new(p, &eo);
	if (!u->ev) {
		snprintf(err, errlen, "cannot define event %s/%s: %s", u->prov_name, probe,
			 rp_last_error());
		return -errno;
	}
	nusdt_specs++;
	return 0;
}

int rp_capture_define(const struct rp_capture_opts *o, char *err, size_t errlen)
{
	int i, rc = 0;
	size_t k;

	pthread_mutex_lock(&def_lock);
	if (!providers[0]) {
		for (i = 0; i < 3; i++) {
			providers[i] = provider_named(prov_names[i]);
			if (!providers[i]) {
				snprintf(err, errlen, "cannot define provider %s: %s", prov_names[i],
					 rp_last_error());
				rc = -errno;
				goto out;
			}
		}
		for (i = 0; i < EV_NR; i++) {
			const struct ev_def *d = &ev_defs[i];
			struct rp_event_opts eo = {
				.sz = sizeof(eo), .id = d->id, .name = d->name, .level = 4,
				.opcode = d->opcode, .nfields = d->nfields, .fields = d->fields,
			};

			events[i] = rp_event_new(providers[d->provider], &eo);
			if (!events[i]) {
				snprintf(err, errlen, "cannot define event %s: %s", d->name,
					 rp_last_error());
				rc = -errno;
				goto out;
			}
		}
	}
	for (k = 0; o && k < o->nusdt && !rc; k++)
		rc = define_usdt(o->usdt[k], err, errlen);
out:
	pthread_mutex_unlock(&def_lock);
	return rc;
}

size_t rp_capture_provider_names(const struct rp_capture_opts *o, const char **names, size_t max)
{
	size_t n = 0, k, j;

	if (o->python && n < max)
		names[n++] = RP_CAP_PROVIDER_PYTHON;
	if (o->jvm && n < max)
		names[n++] = RP_CAP_PROVIDER_JVM;
	/* the kernel provider also carries the cgroup map */
	if (n < max)
		names[n++] = RP_CAP_PROVIDER_KERNEL;
	for (k = 0; k < o->nusdt; k++) {
		char *bin, *prov, *probe;
		const char *name = NULL;

		if (parse_usdt(o->usdt[k], &bin, &prov, &probe) == 0)
			for (j = 0; j < nusdt_specs && !name; j++)
				if (!strcmp(usdt_specs[j].provider, prov))
					name = usdt_specs[j].prov_name;
		free(bin), free(prov), free(probe);
		for (j = 0; name && j < n; j++)
			if (!strcmp(names[j], name))
				name = NULL;
		if (name && n < max)
			names[n++] = name;
	}
	return n;
}

/* ---- privilege ----------------------------------------------------------- */

int rp_capture_check_privilege(char *msg, size_t len)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[2];
	uint64_t eff;
	const char *missing;

	memset(d, 0, sizeof(d));
	if (syscall(SYS_capget, &h, d)) {
		snprintf(msg, len, "cannot read this process's capabilities: %s", strerror(errno));
		return -errno;
	}
	eff = ((uint64_t)d[1].effective << 32) | d[0].effective;
#define HAS(cap) ((eff >> (cap)) & 1)
	/* CAP_SYS_ADMIN covers both on every kernel; since 5.8 CAP_BPF loads
	 * programs and CAP_PERFMON attaches uprobes and tracepoints */
	if (HAS(CAP_SYS_ADMIN) || (HAS(CAP_BPF) && HAS(CAP_PERFMON)))
		return 0;
	missing = !HAS(CAP_BPF) && !HAS(CAP_PERFMON) ? "CAP_BPF and CAP_PERFMON"
		  : !HAS(CAP_BPF) ? "CAP_BPF" : "CAP_PERFMON";
#undef HAS
	snprintf(msg, len,
		 "kernel-assisted capture needs %s (or CAP_SYS_ADMIN) to load BPF programs and "
		 "attach probes; run as root or grant them (setcap cap_bpf,cap_perfmon+ep)",
		 missing);
	return -EPERM;
}

/* ---- cgroup ids to paths ------------------------------------------------- */

/* cgroup2 ids are the inode numbers of the cgroup directories: a walk of
 * /sys/fs/cgroup finds them. The table caches every directory seen (and
 * ids that stayed unknown, so a vanished cgroup costs one walk). */
struct cg_ent {
	uint64_t id;
	char *path;
	bool announced;
};

struct cg_table {
	struct cg_ent *e;
	size_t n, cap;
};

static struct cg_table *walk_table;	/* nftw has no context argument */

static struct cg_ent *cg_find(struct cg_table *t, uint64_t id)
{
	size_t i;

	for (i = 0; i < t->n; i++)
		if (t->e[i].id == id)
			return &t->e[i];
	return NULL;
}

static struct cg_ent *cg_add(struct cg_table *t, uint64_t id, const char *path)
{
	struct cg_ent *e;

	if (array_grow((void **)&t->e, &t->cap, t->n, sizeof(*t->e), 64))
		return NULL;
	e = &t->e[t->n];
	e->id = id;
	e->path = strdup(path);
	e->announced = false;
	if (!e->path)
		return NULL;
	t->n++;
	return e;
}

static int walk_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	const char *rel = path + strlen("/sys/fs/cgroup");

	if (flag == FTW_D && !cg_find(walk_table, st->st_ino))
		cg_add(walk_table, st->st_ino, *rel ? rel : "/");
	return 0;
}

static struct cg_ent *cg_resolve(struct cg_table *t, uint64_t id)
{
	struct cg_ent *e = cg_find(t, id);

	if (e)
		return e;
	walk_table = t;
	nftw("/sys/fs/cgroup", walk_one, 32, FTW_PHYS | FTW_MOUNT);
	walk_table = NULL;
	e = cg_find(t, id);
	return e ? e : cg_add(t, id, "");
}

/* ---- the capture ---------------------------------------------------------- */

struct tid_seq {
	uint32_t tid;
	uint32_t seq;
};

/*
 * An event waiting for the end of the consumer's pass. Sequence numbers
 * must rise with time within each origin thread (the drainer writes events
 * in timestamp order and TraceEvent counts a step back as a loss), but the
 * probes' ring buffer and the sampler's are read one after the other: a
 * thread's sample may be older than its exec. So a pass queues what it
 * reads from every source, sorts it by timestamp, and only then numbers and
 * writes it.
 */
struct pending {
	uint64_t ts_ns;
	uint64_t order;		/* queue order: ties keep it */
	struct rp_event *ev;
	uint32_t pid, tid, cpu;
	size_t off;		/* payload, then the stack, in pend_bytes */
	uint32_t len, nstack;
	uint64_t *written, *drops;	/* the source's counters (atomic) */
};

struct rp_capture {
	struct capture_bpf *skel;
	struct ring_buffer *rb;
	struct bpf_link *links[MAX_LINKS];
	size_t nlinks;
	pthread_t thread;
	bool started;
	struct rp_session *session;
	int stop;			/* atomic */
	uint32_t poll_ms;
	struct rp_clock_anchor anchor;
	uint64_t anchor_mono;
	struct cg_table cg;
	/* origin threads' sequence numbers (open addressing, tid 0 = empty) */
	struct tid_seq *seqs;
	size_t nseqs, capseqs;
	struct rp_capture_stats st;	/* consumer thread; read with relaxed loads */
	struct {
		rp_capture_source_fn poll;
		rp_capture_source_fn quiesce;
		void *ctx;
	} sources[4];
	size_t nsources;
	/* one pass's events, written in timestamp order at its end */
	struct pending *pend;
	size_t npend, cappend;
	struct bytebuf pend_bytes;
	struct bytebuf payload;		/* the record being encoded */
	void (*seen_pid)(void *ctx, uint32_t pid);
	void *seen_pid_ctx;
	struct hmap seen;		/* pids told to seen_pid */
};

/* counters written by the consumer, read by the progress line */
#define ST_INC(c, f) rp_add_relaxed(&(c)->st.f, 1)

static uint32_t *seq_slot(struct rp_capture *c, uint32_t tid)
{
	size_t i, mask;

	if (c->nseqs * 2 >= c->capseqs) {
		size_t nc = c->capseqs ? c->capseqs * 2 : 1024;
		struct tid_seq *n = calloc(nc, sizeof(*n));

		if (!n)
			return NULL;
		for (i = 0; i < c->capseqs; i++) {
			size_t j;

			if (!c->seqs[i].tid)
				continue;
			for (j = c->seqs[i].tid * 2654435761u & (nc - 1); n[j].tid; j = (j + 1) & (nc - 1))
				;
			n[j] = c->seqs[i];
		}
		free(c->seqs);
		c->seqs = n;
		c->capseqs = nc;
	}
	mask = c->capseqs - 1;
	for (i = tid * 2654435761u & mask; c->seqs[i].tid; i = (i + 1) & mask)
		if (c->seqs[i].tid == tid)
			return &c->seqs[i].seq;
	c->seqs[i].tid = tid;
	c->seqs[i].seq = 1;	/* the library's "before the first attempt" */
	c->nseqs++;
	return &c->seqs[i].seq;
}

/*
 * Payload encoding, little-endian as nettrace wants (x86 and arm64 are).
 * Each appender reserves its room; a failed allocation sets the buffer's
 * sticky oom, checked once per record.
 */
static void pl_u32(struct bytebuf *b, uint32_t v) { bb_append(b, &v, 4); }
static void pl_u64(struct bytebuf *b, uint64_t v) { bb_append(b, &v, 8); }
static void pl_bool(struct bytebuf *b, bool v) { pl_u32(b, v ? 1 : 0); }

/* UTF-8 bytes (up to n, stopping at a NUL) as UTF-16LE with a terminator. */
static void pl_str(struct bytebuf *b, const char *s, size_t n)
{
	utf8_to_utf16le(b, s, strnlen(s, n), 1);
}

/* Java names come as "java/lang/String": shown as TraceEvent users expect */
static void pl_jname(struct bytebuf *b, const char *s, size_t n)
{
	char tmp[RP_BPF_NAME_LEN];
	size_t i;

	if (n >= sizeof(tmp))
		n = sizeof(tmp) - 1;
	for (i = 0; i < n && s[i]; i++)
		tmp[i] = s[i] == '/' ? '.' : s[i];
	pl_str(b, tmp, i);
}

static void pl_common(struct bytebuf *b, const struct rp_bpf_hdr *h)
{
	pl_u32(b, h->pid);
	pl_u64(b, h->cgroup_id);
	pl_u64(b, h->ts_ns);
}

static void write_cgroup(struct rp_capture *c, uint64_t id)
{
	struct cg_ent *e;
	struct bytebuf b = { 0 };	/* not c->payload: that holds the event */

	if (!rp_event_enabled(events[EV_CGROUP]))
		return;
	e = cg_resolve(&c->cg, id);
	if (!e || e->announced)
		return;
	e->announced = true;
	pl_u64(&b, id);
	pl_str(&b, e->path, strlen(e->path));
	if (!b.oom && rp_event_write(events[EV_CGROUP], b.p, b.len) == 0)
		ST_INC(c, cgroups);
	bb_free(&b);
}

#define BODY(type, var) \
	const struct type *var = (const void *)h; \
	if (size < sizeof(*var)) \
		goto bad

static int on_record(void *ctx, void *data, size_t size)
{
	struct rp_capture *c = ctx;
	const struct rp_bpf_hdr *h = data;
	struct bytebuf *b = &c->payload;
	struct rp_event *ev = NULL;

	ST_INC(c, records);
	b->len = 0;
	if (size < sizeof(*h) || h->size > size)
		goto bad;
	switch (h->type) {
	case RP_BPF_REC_PY_GC_START: {
		BODY(rp_bpf_py_gc, r);
		pl_u32(b, (uint32_t)(int32_t)r->value);
		ev = events[EV_PY_GC_START];
		break;
	}
	case RP_BPF_REC_PY_GC_DONE: {
		BODY(rp_bpf_py_gc, r);
		pl_u64(b, (uint64_t)r->value);
		ev = events[EV_PY_GC_DONE];
		break;
	}
	case RP_BPF_REC_JVM_GC_BEGIN: {
		BODY(rp_bpf_jvm_gc, r);
		pl_bool(b, r->full);
		ev = events[EV_JVM_GC_BEGIN];
		break;
	}
	case RP_BPF_REC_JVM_GC_END: {
		BODY(rp_bpf_jvm_gc, r);
		(void)r;
		ev = events[EV_JVM_GC_END];
		break;
	}
	case RP_BPF_REC_JVM_POOL_GC_BEGIN:
	case RP_BPF_REC_JVM_POOL_GC_END: {
		BODY(rp_bpf_jvm_pool_gc, r);
		pl_str(b, r->manager, r->manager_len);
		pl_str(b, r->pool, r->pool_len);
		pl_u64(b, r->initial);
		pl_u64(b, r->used);
		pl_u64(b, r->committed);
		pl_u64(b, r->max);
		ev = events[h->type == RP_BPF_REC_JVM_POOL_GC_BEGIN ? EV_JVM_POOL_BEGIN
								     : EV_JVM_POOL_END];
		break;
	}
	case RP_BPF_REC_JVM_CLASS_LOADED: {
		BODY(rp_bpf_jvm_class, r);
		pl_jname(b, r->name, r->name_len);
		pl_u64(b, r->loader_id);
		pl_bool(b, r->shared);
		ev = events[EV_JVM_CLASS];
		break;
	}
	case RP_BPF_REC_JVM_COMPILE_BEGIN:
	case RP_BPF_REC_JVM_COMPILE_END: {
		BODY(rp_bpf_jvm_compile, r);
		pl_str(b, r->compiler, r->compiler_len);
		pl_jname(b, r->klass, r->class_len);
		pl_str(b, r->method, r->method_len);
		pl_str(b, r->sig, r->sig_len);
		if (h->type == RP_BPF_REC_JVM_COMPILE_END)
			pl_bool(b, r->success);
		ev = events[h->type == RP_BPF_REC_JVM_COMPILE_BEGIN ? EV_JVM_COMPILE_BEGIN
								     : EV_JVM_COMPILE_END];
		break;
	}
	case RP_BPF_REC_JVM_THREAD_START: {
		BODY(rp_bpf_jvm_thread, r);
		pl_str(b, r->name, r->name_len);
		pl_u64(b, r->java_tid);
		pl_u64(b, r->native_tid);
		pl_bool(b, r->daemon);
		ev = events[EV_JVM_THREAD];
		break;
	}
	case RP_BPF_REC_USDT_GENERIC: {
		BODY(rp_bpf_usdt, r);
		uint32_t k;

		if (h->cookie >= nusdt_specs)
			goto bad;
		for (k = 0; k < RP_BPF_USDT_ARGS; k++)
			pl_u64(b, k < r->nargs ? r->args[k] : 0);
		ev = usdt_specs[h->cookie].ev;
		break;
	}
	case RP_BPF_REC_EXEC: {
		BODY(rp_bpf_exec, r);
		pl_str(b, r->filename, r->filename_len);
		pl_str(b, r->comm, sizeof(r->comm));
		pl_u32(b, r->old_pid);
		ev = events[EV_EXEC];
		break;
	}
	case RP_BPF_REC_FORK: {
		BODY(rp_bpf_fork, r);
		pl_u32(b, r->child_pid);
		pl_u32(b, r->child_tid);
		pl_str(b, r->comm, sizeof(r->comm));
		ev = events[EV_FORK];
		break;
	}
	case RP_BPF_REC_EXIT: {
		BODY(rp_bpf_exit, r);
		pl_u32(b, (uint32_t)r->exit_code);
		pl_bool(b, r->group_dead);
		pl_str(b, r->comm, sizeof(r->comm));
		ev = events[EV_EXIT];
		break;
	}
	case RP_BPF_REC_SWITCH: {
		BODY(rp_bpf_switch, r);
		pl_u32(b, r->next_pid);
		pl_u32(b, r->next_tid);
		pl_u64(b, (uint64_t)r->prev_state);
		pl_str(b, r->prev_comm, sizeof(r->prev_comm));
		pl_str(b, r->next_comm, sizeof(r->next_comm));
		ev = events[EV_SWITCH];
		break;
	}
	default:
		goto bad;
	}
	pl_common(b, h);
	if (b->oom) {
		/* start afresh: oom is sticky, the next record may fit */
		bb_free(b);
		goto bad;
	}
	if (b->len > PAYLOAD_MAX || !ev)
		goto bad;
	write_cgroup(c, h->cgroup_id);
	rp_capture_queue(c, ev, h->ts_ns, h->pid, h->tid, h->cpu, b->p, (uint32_t)b->len, NULL, 0,
			 &c->st.written, &c->st.write_drops);
	return 0;
bad:
	ST_INC(c, bad);
	return 0;
}

static void refresh_anchor(struct rp_capture *c)
{
	uint64_t now = rp_clock_mono_ns();

	if (now - c->anchor_mono >= ANCHOR_REFRESH_NS) {
		rp_clock_anchor_now(&c->anchor);
		c->anchor_mono = now;
	}
}

/*
 * Tells the session's drainer that every BPF event stamped before mono_ns
 * is in its rings now. The drainer then merges ring events past a BPF event
 * only once that event is written, so a BPF event is never late however
 * long this thread waited for the CPU; the price is that ring events wait
 * for this thread too (at most poll_ms plus its scheduling delay).
 */
static void publish_horizon(struct rp_capture *c, uint64_t mono_ns)
{
	uint64_t t;

	if (!c->session)
		return;
	t = rp_clock_from_mono_ns_at(mono_ns - SUBMIT_SLACK_NS, &c->anchor);
	/* pairs with the load_acquire of ext_horizon in drainer_main(): our
	 * ring writes are committed before the drainer can see this horizon */
	rp_store_release(&c->session->ext_horizon, t ? t : 1);
}

int rp_capture_queue(struct rp_capture *c, struct rp_event *ev, uint64_t ts_ns, uint32_t pid,
		     uint32_t tid, uint32_t cpu, const void *payload, uint32_t len,
		     const uint64_t *stack, uint32_t nstack, uint64_t *written, uint64_t *drops)
{
	struct pending *p;

	/* not an attempt when no session takes the event: no number used */
	if (!rp_event_enabled(ev))
		return 0;
	if (array_grow((void **)&c->pend, &c->cappend, c->npend, sizeof(*c->pend), 256))
		goto oom;
	while (c->pend_bytes.len % 8)
		bb_append(&c->pend_bytes, "", 1);
	p = &c->pend[c->npend];
	*p = (struct pending){ .ts_ns = ts_ns, .order = c->npend, .ev = ev, .pid = pid, .tid = tid,
			       .cpu = cpu, .off = c->pend_bytes.len, .len = len,
			       .nstack = nstack, .written = written, .drops = drops };
	bb_append(&c->pend_bytes, payload, len);
	while (c->pend_bytes.len % 8)
		bb_append(&c->pend_bytes, "", 1);
	bb_append(&c->pend_bytes, stack, (size_t)nstack * 8);
	if (c->pend_bytes.oom)
		goto oom;
	c->npend++;
	return 0;
oom:
	rp_add_relaxed(drops, 1);
	return -ENOMEM;
}

static int cmp_pending(const void *a, const void *b)
{
	const struct pending *x = a, *y = b;

	if (x->ts_ns != y->ts_ns)
		return x->ts_ns < y->ts_ns ? -1 : 1;
	return x->order < y->order ? -1 : x->order > y->order;
}

/* A process's first event, for seen_pid. The set starts over when it is
 * large: a pid told again costs its observer a look, nothing more. */
static void tell_pid(struct rp_capture *c, uint32_t pid)
{
	if (hmap_get(&c->seen, pid, NULL))
		return;
	if (c->seen.count >= SEEN_PIDS_MAX)
		hmap_clear(&c->seen);
	if (!hmap_put(&c->seen, pid, 1))
		c->seen_pid(c->seen_pid_ctx, pid);
}

/*
 * Writes the queued events stamped before limit_ns, in time order, and keeps
 * the younger ones for a later pass: a source read later in this pass may
 * still deliver an event older than those (another source's record stamped
 * just before it was read), and it must not come after them.
 */
static void flush_before(struct rp_capture *c, uint64_t limit_ns)
{
	struct bytebuf keep = { 0 };
	size_t i, n = 0;

	array_sort(c->pend, c->npend, sizeof(*c->pend), cmp_pending);
	for (i = 0; i < c->npend && c->pend[i].ts_ns < limit_ns; i++) {
		const struct pending *p = &c->pend[i];
		const uint8_t *base = c->pend_bytes.p + p->off;
		struct iovec iov = { (void *)base, p->len };
		struct rp_write_opts o = { .sz = sizeof(o), .flags = RP_WRITE_STACK_GIVEN,
					   .nstack = p->nstack };
		struct rp_write_origin org;
		int rc;

		o.stack = (const uint64_t *)(const void *)(base + ((p->len + 7) & ~7u));
		if (rp_capture_origin(c, p->ts_ns, p->pid, p->tid, p->cpu, &org)) {
			rp_add_relaxed(p->drops, 1);
			continue;
		}
		rc = rp_event_write_origin(p->ev, &iov, 1, &org, p->nstack ? &o : NULL);
		if (rc == -ENOBUFS)
			rp_add_relaxed(p->drops, 1);
		else if (!rc)
			rp_add_relaxed(p->written, 1);
		if (c->seen_pid && p->pid)
			tell_pid(c, p->pid);
	}
	/* the rest moves to the front, its bytes to a fresh buffer */
	for (; i < c->npend; i++) {
		struct pending p = c->pend[i];
		size_t end = p.off + ((p.len + 7) & ~(size_t)7) + (size_t)p.nstack * 8;

		bb_append(&keep, c->pend_bytes.p + p.off, end - p.off);
		p.off = keep.len - (end - p.off);
		p.order = n;
		c->pend[n++] = p;
	}
	if (keep.oom) {
		for (i = 0; i < n; i++)
			rp_add_relaxed(c->pend[i].drops, 1);
		n = 0;
	}
	bb_free(&c->pend_bytes);
	c->pend_bytes = keep;
	c->npend = n;
}

void rp_capture_flush(struct rp_capture *c)
{
	flush_before(c, UINT64_MAX);
}

static void poll_sources(struct rp_capture *c)
{
	size_t i;

	for (i = 0; i < c->nsources; i++)
		c->sources[i].poll(c->sources[i].ctx);
}

int rp_capture_add_source(struct rp_capture *c, rp_capture_source_fn poll,
			  rp_capture_source_fn quiesce, void *ctx)
{
	if (c->started || c->nsources == sizeof(c->sources) / sizeof(c->sources[0]))
		return -EBUSY;
	c->sources[c->nsources].poll = poll;
	c->sources[c->nsources].quiesce = quiesce;
	c->sources[c->nsources++].ctx = ctx;
	return 0;
}

int rp_capture_origin(struct rp_capture *c, uint64_t ts_ns, uint32_t pid, uint32_t tid,
		      uint32_t cpu, struct rp_write_origin *org)
{
	uint32_t *seq = seq_slot(c, tid);

	if (!seq)
		return -ENOMEM;
	/* one step per attempt, captured or not: EventsLost stays exact */
	(*seq)++;
	org->ts = rp_clock_from_mono_ns_at(ts_ns, &c->anchor);
	org->tid = tid;
	org->pid = pid;
	org->seq = *seq;
	org->cpu = cpu;
	return 0;
}

static void *consumer_main(void *arg)
{
	struct rp_capture *c = arg;

	/* pairs with the store_release of stop in rp_capture_stop(): once it
	 * is seen, the probes are detached and every source has quiesced, so
	 * the last pass below takes all that remains */
	while (!rp_load_acquire(&c->stop)) {
		uint64_t t;

		refresh_anchor(c);
		/* everything submitted before t is consumed by this pass */
		t = rp_clock_mono_ns();
		if (ring_buffer__consume(c->rb) < 0 && errno != EINTR)
			break;
		poll_sources(c);
		/* what is stamped before t - slack was submitted before t, so
		 * every source has delivered it in this pass */
		flush_before(c, t - SUBMIT_SLACK_NS);
		publish_horizon(c, t);
		/* the ring buffer wakes us per submitted record (no
		 * BPF_RB_NO_WAKEUP); the timeout bounds how stale the horizon
		 * gets while the probes are quiet */
		if (ring_buffer__poll(c->rb, (int)c->poll_ms) < 0 && errno != EINTR)
			break;
	}
	refresh_anchor(c);
	ring_buffer__consume(c->rb);
	poll_sources(c);
	rp_capture_flush(c);
	return NULL;
}

/* ---- attaching ------------------------------------------------------------- */

static int libbpf_quiet(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	if (level == LIBBPF_WARN || getenv("RINGPIPE_BPF_DEBUG"))
		return vfprintf(stderr, fmt, ap);
	return 0;
}

/* Path of the first mapping of pid whose file name contains `needle`. */
static int find_mapping(pid_t pid, const char *needle, char *out, size_t len)
{
	char path[64], line[PATH_MAX + 256];
	FILE *f;
	int rc = -ENOENT;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		char *p = strchr(line, '/');

		if (!p || !strstr(p, needle))
			continue;
		p[strcspn(p, "\n")] = 0;
		snprintf(out, len, "%s", p);
		rc = 0;
		break;
	}
	fclose(f);
	return rc;
}

static int python_binary(const struct rp_capture_opts *o, char *out, size_t len)
{
	char exe[64];
	ssize_t n;

	if (o->python_path) {
		snprintf(out, len, "%s", o->python_path);
		return 0;
	}
	if (o->pid > 0) {
		/* an embedding or shared build keeps the probes in libpython */
		if (find_mapping(o->pid, "/libpython3", out, len) == 0)
			return 0;
		snprintf(exe, sizeof(exe), "/proc/%d/exe", (int)o->pid);
		n = readlink(exe, out, len - 1);
		if (n > 0) {
			out[n] = 0;
			/* a traced child may not have exec'd python yet */
			if (strstr(out, "python"))
				return 0;
		}
	}
	snprintf(out, len, "/usr/bin/python3.11");
	return 0;
}

static int jvm_library(const struct rp_capture_opts *o, char *out, size_t len)
{
	const char *home = getenv("JAVA_HOME");
	char p[PATH_MAX];

	if (o->jvm_path) {
		snprintf(out, len, "%s", o->jvm_path);
		return 0;
	}
	if (o->pid > 0 && find_mapping(o->pid, "/libjvm.so", out, len) == 0)
		return 0;
	snprintf(p, sizeof(p), "%s/lib/server/libjvm.so",
		 home && *home ? home : "/usr/lib/jvm/default-java");
	if (!realpath(p, out) &&
	    !realpath("/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so", out))
		return -ENOENT;
	return 0;
}

static int attach_usdt(struct rp_capture *c, struct bpf_program *prog, pid_t pid, const char *bin,
		       const char *prov, const char *probe, uint64_t cookie, char *err, size_t errlen)
{
	LIBBPF_OPTS(bpf_usdt_opts, uo, .usdt_cookie = cookie);
	struct bpf_link *l;

	if (c->nlinks == MAX_LINKS) {
		snprintf(err, errlen, "too many probes");
		return -E2BIG;
	}
	l = bpf_program__attach_usdt(prog, pid > 0 ? pid : -1, bin, prov, probe, &uo);
	if (!l) {
		int e = -errno;

		snprintf(err, errlen, "cannot attach to USDT %s:%s in %s%s: %s", prov, probe, bin,
			 pid > 0 ? " (that process)" : "", strerror(-e));
		return e;
	}
	c->links[c->nlinks++] = l;
	return 0;
}

static int attach_prog(struct rp_capture *c, struct bpf_program *prog, const char *what,
		       char *err, size_t errlen)
{
	struct bpf_link *l = bpf_program__attach(prog);

	if (!l) {
		int e = -errno;

		snprintf(err, errlen, "cannot attach to %s: %s", what, strerror(-e));
		return e;
	}
	c->links[c->nlinks++] = l;
	return 0;
}

struct rp_capture *rp_capture_open(const struct rp_capture_opts *o, char *err, size_t errlen)
{
	struct rp_capture *c;
	struct capture_bpf *sk;
	char bin[PATH_MAX];
	size_t k;
	int rc;

	if (rp_capture_check_privilege(err, errlen))
		return NULL;
	rc = rp_capture_define(o, err, errlen);
	if (rc)
		return NULL;
	c = calloc(1, sizeof(*c));
	if (!c) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	c->poll_ms = o->poll_ms ? o->poll_ms : 5;
	c->session = o->session;
	c->seen_pid = o->seen_pid;
	c->seen_pid_ctx = o->seen_pid_ctx;
	if (bb_reserve(&c->payload, PAYLOAD_MAX)) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	libbpf_set_print(libbpf_quiet);
	sk = capture_bpf__open();
	if (!sk) {
		snprintf(err, errlen, "cannot open the BPF object: %s", strerror(errno));
		goto fail;
	}
	c->skel = sk;
	sk->rodata->self_tgid = (uint32_t)getpid();
	sk->rodata->filter_tasks = o->pid > 0;
	sk->rodata->want_switch = o->kernel_sched;
	bpf_map__set_max_entries(sk->maps.events, o->ringbuf_bytes ? o->ringbuf_bytes : 8u << 20);
	/* load only what is attached: the verifier's work and the probes
	 * HotSpot's libjvm lacks in other builds stay out of the way */
	bpf_program__set_autoload(sk->progs.py_gc_start, o->python);
	bpf_program__set_autoload(sk->progs.py_gc_done, o->python);
	bpf_program__set_autoload(sk->progs.jvm_gc_begin, o->jvm);
	bpf_program__set_autoload(sk->progs.jvm_gc_end, o->jvm);
	bpf_program__set_autoload(sk->progs.jvm_pool_gc_begin, o->jvm);
	bpf_program__set_autoload(sk->progs.jvm_pool_gc_end, o->jvm);
	bpf_program__set_autoload(sk->progs.jvm_class_loaded, o->jvm);
	bpf_program__set_autoload(sk->progs.jvm_compile_begin, o->jvm);
	bpf_program__set_autoload(sk->progs.jvm_compile_end, o->jvm);
	bpf_program__set_autoload(sk->progs.jvm_thread_start, o->jvm);
	bpf_program__set_autoload(sk->progs.usdt_generic, o->nusdt > 0);
	bpf_program__set_autoload(sk->progs.on_exec, o->kernel_proc);
	bpf_program__set_autoload(sk->progs.on_fork, o->kernel_proc || o->pid > 0);
	bpf_program__set_autoload(sk->progs.on_exit, o->kernel_proc || o->pid > 0);
	bpf_program__set_autoload(sk->progs.on_switch, o->kernel_sched);
	rc = capture_bpf__load(sk);
	if (rc) {
		snprintf(err, errlen, "cannot load the BPF programs: %s (RINGPIPE_BPF_DEBUG=1 shows "
			 "the verifier log)", strerror(-rc));
		goto fail;
	}
	if (o->pid > 0) {
		uint32_t key = (uint32_t)o->pid;
		uint8_t one = 1;

		bpf_map__update_elem(sk->maps.tracked, &key, sizeof(key), &one, sizeof(one), BPF_ANY);
	}
	if (o->python) {
		python_binary(o, bin, sizeof(bin));
		if (attach_usdt(c, sk->progs.py_gc_start, o->pid, bin, "python", "gc__start", 0, err,
				errlen) ||
		    attach_usdt(c, sk->progs.py_gc_done, o->pid, bin, "python", "gc__done", 0, err,
				errlen))
			goto fail;
	}
	if (o->jvm) {
		static const struct { const char *probe; int prog; } jp[] = {
			{ "gc__begin", 0 }, { "gc__end", 1 }, { "mem__pool__gc__begin", 2 },
			{ "mem__pool__gc__end", 3 }, { "class__loaded", 4 },
			{ "method__compile__begin", 5 }, { "method__compile__end", 6 },
			{ "thread__start", 7 },
		};
		struct bpf_program *progs[] = {
			sk->progs.jvm_gc_begin, sk->progs.jvm_gc_end, sk->progs.jvm_pool_gc_begin,
			sk->progs.jvm_pool_gc_end, sk->progs.jvm_class_loaded,
			sk->progs.jvm_compile_begin, sk->progs.jvm_compile_end,
			sk->progs.jvm_thread_start,
		};

		if (jvm_library(o, bin, sizeof(bin))) {
			snprintf(err, errlen, "no libjvm.so found: set JAVA_HOME or pass -p PID of a JVM");
			goto fail;
		}
		for (k = 0; k < sizeof(jp) / sizeof(jp[0]); k++)
			if (attach_usdt(c, progs[jp[k].prog], o->pid, bin, "hotspot", jp[k].probe, 0,
					err, errlen))
				goto fail;
	}
	for (k = 0; k < o->nusdt; k++) {
		char *b = NULL, *prov = NULL, *probe = NULL;
		size_t j;

		parse_usdt(o->usdt[k], &b, &prov, &probe);
		for (j = 0; j < nusdt_specs; j++)
			if (!strcmp(usdt_specs[j].binary, b) && !strcmp(usdt_specs[j].provider, prov) &&
			    !strcmp(usdt_specs[j].probe, probe))
				break;
		rc = j < nusdt_specs ? attach_usdt(c, sk->progs.usdt_generic, o->pid, b, prov, probe,
						   j, err, errlen) : -ENOENT;
		free(b), free(prov), free(probe);
		if (rc)
			goto fail;
	}
	if (o->kernel_proc &&
	    attach_prog(c, sk->progs.on_exec, "tracepoint sched_process_exec", err, errlen))
		goto fail;
	if ((o->kernel_proc || o->pid > 0) &&
	    (attach_prog(c, sk->progs.on_fork, "tracepoint sched_process_fork", err, errlen) ||
	     attach_prog(c, sk->progs.on_exit, "tracepoint sched_process_exit", err, errlen)))
		goto fail;
	if (o->kernel_sched &&
	    attach_prog(c, sk->progs.on_switch, "tracepoint sched_switch", err, errlen))
		goto fail;
	c->rb = ring_buffer__new(bpf_map__fd(sk->maps.events), on_record, c, NULL);
	if (!c->rb) {
		snprintf(err, errlen, "cannot map the BPF ring buffer: %s", strerror(errno));
		goto fail;
	}
	rp_clock_init();
	rp_clock_anchor_now(&c->anchor);
	c->anchor_mono = rp_clock_mono_ns();
	return c;
fail:
	rp_capture_close(c);
	return NULL;
}

int rp_capture_track(struct rp_capture *c, pid_t pid)
{
	uint32_t key = (uint32_t)pid;
	uint8_t one = 1;

	return bpf_map__update_elem(c->skel->maps.tracked, &key, sizeof(key), &one, sizeof(one),
				    BPF_ANY);
}

size_t rp_capture_nlinks(const struct rp_capture *c)
{
	return c->nlinks;
}

int rp_capture_start(struct rp_capture *c)
{
	int err;

	/* a horizon from the start: until the consumer's first pass ends (a
	 * slow one when the first sample makes it read a process's ELF files)
	 * the drainer must not merge ring events past records not read yet */
	rp_clock_anchor_now(&c->anchor);
	c->anchor_mono = rp_clock_mono_ns();
	publish_horizon(c, c->anchor_mono);
	err = rp_thread_start(&c->thread, "rp-capture", consumer_main, c);
	if (err)
		return err;
	c->started = true;
	return 0;
}

static void destroy_links(struct rp_capture *c)
{
	size_t i;

	for (i = 0; i < c->nlinks; i++)
		bpf_link__destroy(c->links[i]);
	c->nlinks = 0;
}

void rp_capture_stop(struct rp_capture *c)
{
	if (!c)
		return;
	/* no new records once detached, the other sources' included; the
	 * consumer's last pass takes whatever was submitted before, while
	 * the horizon still holds the drainer back */
	destroy_links(c);
	for (size_t i = 0; i < c->nsources; i++) {
		if (c->sources[i].quiesce)
			c->sources[i].quiesce(c->sources[i].ctx);
		/* once: close() stops again, after the source may be freed */
		c->sources[i].quiesce = NULL;
	}
	/* pairs with the load_acquire of stop in consumer_main() */
	rp_store_release(&c->stop, 1);
	if (c->started) {
		pthread_join(c->thread, NULL);
		c->started = false;
	} else if (c->rb) {
		ring_buffer__consume(c->rb);
		rp_capture_flush(c);
	}
	/* nothing more comes from us: the drainer stops waiting. The session
	 * may be stopped (freed) after this, and close() stops again: forget it */
	if (c->session)
		/* pairs with the load_acquire of ext_horizon in drainer_main():
		 * the consumer's last writes (it was joined above) come first */
		rp_store_release(&c->session->ext_horizon, 0);
	c->session = NULL;
}

void rp_capture_stats(struct rp_capture *c, struct rp_capture_stats *st)
{
	uint64_t *per_cpu;
	int ncpu = libbpf_num_possible_cpus(), i;
	uint32_t zero = 0;

	st->records = rp_load_relaxed(&c->st.records);
	st->written = rp_load_relaxed(&c->st.written);
	st->write_drops = rp_load_relaxed(&c->st.write_drops);
	st->bad = rp_load_relaxed(&c->st.bad);
	st->cgroups = rp_load_relaxed(&c->st.cgroups);
	st->kernel_drops = 0;
	if (ncpu <= 0 || !c->skel)
		return;
	per_cpu = calloc((size_t)ncpu, sizeof(*per_cpu));
	if (per_cpu && !bpf_map__lookup_elem(c->skel->maps.drops, &zero, sizeof(zero), per_cpu,
					     (size_t)ncpu * sizeof(*per_cpu), 0))
		for (i = 0; i < ncpu; i++)
			st->kernel_drops += per_cpu[i];
	free(per_cpu);
}

void rp_capture_close(struct rp_capture *c)
{
	size_t i;

	if (!c)
		return;
	rp_capture_stop(c);
	ring_buffer__free(c->rb);
	capture_bpf__destroy(c->skel);
	for (i = 0; i < c->cg.n; i++)
		free(c->cg.e[i].path);
	free(c->cg.e);
	free(c->seqs);
	free(c->pend);
	bb_free(&c->pend_bytes);
	bb_free(&c->payload);
	hmap_free(&c->seen);
	free(c);
}

int rp_capture_parse_usdt(struct rp_capture_opts *o, char *list, const char **usdt, size_t max,
			  char *err, size_t errlen)
{
	char *save = NULL, *w;

	for (w = strtok_r(list, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
		if (!strcmp(w, "python")) {
			o->python = true;
		} else if (!strcmp(w, "jvm") || !strcmp(w, "java") || !strcmp(w, "hotspot")) {
			o->jvm = true;
		} else if (strchr(w, ':')) {
			if (o->nusdt == max) {
				snprintf(err, errlen, "at most %zu --usdt probes", max);
				return -EINVAL;
			}
			usdt[o->nusdt++] = w;
		} else {
			snprintf(err, errlen, "--usdt takes python, jvm or BINARY:PROVIDER:PROBE, "
				 "not '%s'", w);
			return -EINVAL;
		}
	}
	o->usdt = usdt;
	return 0;
}

int rp_capture_parse_kernel(struct rp_capture_opts *o, char *list, char *err, size_t errlen)
{
	char *save = NULL, *w;

	for (w = strtok_r(list, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
		if (!strcmp(w, "exec") || !strcmp(w, "proc")) {
			o->kernel_proc = true;
		} else if (!strcmp(w, "sched")) {
			o->kernel_sched = true;
		} else {
			snprintf(err, errlen, "--kernel takes exec and/or sched, not '%s'", w);
			return -EINVAL;
		}
	}
	return 0;
}
