// SPDX-License-Identifier: MIT
/*
 * Capture programs of `ringpipe record`: USDT probes of unmodified runtimes
 * (CPython, HotSpot, any BINARY:PROVIDER:PROBE) and scheduler tracepoints.
 * Each hit becomes one record (bpf/capture.h) in the `events` ring buffer,
 * which the user-side bridge turns into ringpipe events.
 *
 * Kept deliberately dumb: no aggregation, no string formatting; the hot part
 * is one ring buffer reservation, a few reads and a submit. Filtering by
 * process happens here, not in user space, so an untraced process pays only
 * the uprobe/tracepoint entry.
 */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/usdt.bpf.h>

#include "capture.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* Set by the loader before load (read-only afterwards). */
const volatile __u32 self_tgid = 0;	/* never trace the recorder itself */
const volatile __u32 filter_tasks = 0;	/* 1: only processes in `tracked` */
const volatile __u32 want_switch = 0;	/* sched_switch is costly: opt-in */

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20);	/* resized by the loader */
} events SEC(".maps");

/* tgids being traced; children are added at fork so `-- CMD` and -p follow
 * a process tree. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u8);
} tracked SEC(".maps");

/* Records lost because the ring buffer was full, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} drops SEC(".maps");

static __always_inline bool want_tgid(__u32 tgid)
{
	if (tgid == self_tgid)
		return false;
	if (!filter_tasks)
		return true;
	return bpf_map_lookup_elem(&tracked, &tgid) != NULL;
}

static __always_inline bool want_current(void)
{
	return want_tgid((__u32)(bpf_get_current_pid_tgid() >> 32));
}

static __always_inline void count_drop(void)
{
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&drops, &zero);

	if (n)
		(*n)++;
}

/* Reserves a record of `size` bytes and fills the common header. */
static __always_inline void *rec_reserve(__u32 size, __u16 type)
{
	struct rp_bpf_hdr *h = bpf_ringbuf_reserve(&events, size, 0);
	__u64 id;

	if (!h) {
		count_drop();
		return NULL;
	}
	id = bpf_get_current_pid_tgid();
	h->type = type;
	h->size = (__u16)size;
	h->cpu = bpf_get_smp_processor_id();
	h->pid = (__u32)(id >> 32);
	h->tid = (__u32)id;
	h->ts_ns = bpf_ktime_get_ns();
	h->cgroup_id = bpf_get_current_cgroup_id();
	h->cookie = 0;
	return h;
}

/* Copies a counted (not NUL-terminated) user string into a fixed array;
 * returns the bytes kept. `cap` must be a power of two for the mask. */
#define COPY_USTR(dst, src, len, cap)						\
	({									\
		__u32 n_ = (__u32)(len);					\
		if (n_ > (cap) - 1)						\
			n_ = (cap) - 1;						\
		/* hide the clamp from the optimizer: the verifier must see \
		 * the mask on the very register passed as the size */	\
		asm volatile("" : "+r"(n_));					\
		n_ &= (cap) - 1;						\
		if (bpf_probe_read_user((dst), n_, (const void *)(src)))	\
			n_ = 0;							\
		(dst)[n_ & ((cap) - 1)] = 0;					\
		(__u16)n_;							\
	})

/* ---- CPython (python:*) ------------------------------------------------ */

SEC("usdt")
int BPF_USDT(py_gc_start, int generation)
{
	struct rp_bpf_py_gc *r;

	if (!want_current())
		return 0;
	r = rec_reserve(sizeof(*r), RP_BPF_REC_PY_GC_START);
	if (!r)
		return 0;
	r->value = generation;
	bpf_ringbuf_submit(r, 0);
	return 0;
}

SEC("usdt")
int BPF_USDT(py_gc_done, long collected)
{
	struct rp_bpf_py_gc *r;

	if (!want_current())
		return 0;
	r = rec_reserve(sizeof(*r), RP_BPF_REC_PY_GC_DONE);
	if (!r)
		return 0;
	r->value = collected;
	bpf_ringbuf_submit(r, 0);
	return 0;
}

/* ---- HotSpot (hotspot:*) ----------------------------------------------- */

SEC("usdt")
int BPF_USDT(jvm_gc_begin, int full)
{
	struct rp_bpf_jvm_gc *r;

	if (!want_current())
		return 0;
	r = rec_reserve(sizeof(*r), RP_BPF_REC_JVM_GC_BEGIN);
	if (!r)
		return 0;
	r->full = full & 0xff;		/* a C++ bool in a byte register */
	r->__pad = 0;
	bpf_ringbuf_submit(r, 0);
	return 0;
}

SEC("usdt")
int BPF_USDT(jvm_gc_end)
{
	struct rp_bpf_jvm_gc *r;

	if (!want_current())
		return 0;
	r = rec_reserve(sizeof(*r), RP_BPF_REC_JVM_GC_END);
	if (!r)
		return 0;
	r->full = 0;
	r->__pad = 0;
	bpf_ringbuf_submit(r, 0);
	return 0;
}

static __always_inline int pool_gc(struct pt_regs *ctx, __u16 type)
{
	struct rp_bpf_jvm_pool_gc *r;
	long mgr = 0, mgr_len = 0, pool = 0, pool_len = 0;
	long init = 0, used = 0, committed = 0, max = 0;

	if (!want_current())
		return 0;
	/* (manager name, len, pool name, len, initial, used, committed, max) */
	bpf_usdt_arg(ctx, 0, &mgr);
	bpf_usdt_arg(ctx, 1, &mgr_len);
	bpf_usdt_arg(ctx, 2, &pool);
	bpf_usdt_arg(ctx, 3, &pool_len);
	bpf_usdt_arg(ctx, 4, &init);
	bpf_usdt_arg(ctx, 5, &used);
	bpf_usdt_arg(ctx, 6, &committed);
	bpf_usdt_arg(ctx, 7, &max);
	r = rec_reserve(sizeof(*r), type);
	if (!r)
		return 0;
	r->initial = init;
	r->used = used;
	r->committed = committed;
	r->max = max;
	r->__pad = 0;
	r->manager_len = COPY_USTR(r->manager, mgr, mgr_len, RP_BPF_SHORT_LEN);
	r->pool_len = COPY_USTR(r->pool, pool, pool_len, RP_BPF_SHORT_LEN);
	bpf_ringbuf_submit(r, 0);
	return 0;
}

SEC("usdt")
int jvm_pool_gc_begin(struct pt_regs *ctx)
{
	return pool_gc(ctx, RP_BPF_REC_JVM_POOL_GC_BEGIN);
}

SEC("usdt")
int jvm_pool_gc_end(struct pt_regs *ctx)
{
	return pool_gc(ctx, RP_BPF_REC_JVM_POOL_GC_END);
}

SEC("usdt")
int BPF_USDT(jvm_class_loaded, void *name, int name_len, void *loader, int shared)
{
	struct rp_bpf_jvm_class *r;

	if (!want_current())
		return 0;
	r = rec_reserve(sizeof(*r), RP_BPF_REC_JVM_CLASS_LOADED);
	if (!r)
		return 0;
	r->loader_id = (__u64)loader;
	r->shared = shared & 0xff;
	r->__pad = 0;
	r->name_len = COPY_USTR(r->name, name, name_len, RP_BPF_NAME_LEN);
	bpf_ringbuf_submit(r, 0);
	return 0;
}

static __always_inline int compile(struct pt_regs *ctx, __u16 type)
{
	struct rp_bpf_jvm_compile *r;
	long comp = 0, comp_len = 0, cls = 0, cls_len = 0;
	long m = 0, m_len = 0, sig = 0, sig_len = 0, ok = 0;

	if (!want_current())
		return 0;
	/* (compiler, len, class, len, method, len, signature, len[, success]) */
	bpf_usdt_arg(ctx, 0, &comp);
	bpf_usdt_arg(ctx, 1, &comp_len);
	bpf_usdt_arg(ctx, 2, &cls);
	bpf_usdt_arg(ctx, 3, &cls_len);
	bpf_usdt_arg(ctx, 4, &m);
	bpf_usdt_arg(ctx, 5, &m_len);
	bpf_usdt_arg(ctx, 6, &sig);
	bpf_usdt_arg(ctx, 7, &sig_len);
	if (type == RP_BPF_REC_JVM_COMPILE_END)
		bpf_usdt_arg(ctx, 8, &ok);
	r = rec_reserve(sizeof(*r), type);
	if (!r)
		return 0;
	r->success = ok & 0xff;
	r->__pad = 0;
	r->compiler_len = COPY_USTR(r->compiler, comp, comp_len, RP_BPF_SHORT_LEN);
	r->class_len = COPY_USTR(r->klass, cls, cls_len, RP_BPF_NAME_LEN);
	r->method_len = COPY_USTR(r->method, m, m_len, RP_BPF_SHORT_LEN);
	r->sig_len = COPY_USTR(r->sig, sig, sig_len, RP_BPF_NAME_LEN);
	bpf_ringbuf_submit(r, 0);
	return 0;
}

SEC("usdt")
int jvm_compile_begin(struct pt_regs *ctx)
{
	return compile(ctx, RP_BPF_REC_JVM_COMPILE_BEGIN);
}

SEC("usdt")
int jvm_compile_end(struct pt_regs *ctx)
{
	return compile(ctx, RP_BPF_REC_JVM_COMPILE_END);
}

SEC("usdt")
int BPF_USDT(jvm_thread_start, void *name, int name_len, long java_tid, long native_tid,
	     int daemon)
{
	struct rp_bpf_jvm_thread *r;

	if (!want_current())
		return 0;
	r = rec_reserve(sizeof(*r), RP_BPF_REC_JVM_THREAD_START);
	if (!r)
		return 0;
	r->java_tid = java_tid;
	r->native_tid = native_tid;
	r->daemon = daemon & 0xff;
	r->__pad = 0;
	r->name_len = COPY_USTR(r->name, name, name_len, RP_BPF_SHORT_LEN);
	bpf_ringbuf_submit(r, 0);
	return 0;
}

/* ---- any probe: --usdt BINARY:PROVIDER:PROBE ---------------------------- */

SEC("usdt")
int usdt_generic(struct pt_regs *ctx)
{
	struct rp_bpf_usdt *r;
	int n, i;

	if (!want_current())
		return 0;
	r = rec_reserve(sizeof(*r), RP_BPF_REC_USDT_GENERIC);
	if (!r)
		return 0;
	r->h.cookie = bpf_usdt_cookie(ctx);
	n = bpf_usdt_arg_cnt(ctx);
	if (n < 0)
		n = 0;
	if (n > RP_BPF_USDT_ARGS)
		n = RP_BPF_USDT_ARGS;
	r->nargs = n;
	r->__pad = 0;
	for (i = 0; i < RP_BPF_USDT_ARGS; i++) {
		long v = 0;

		if (i < n)
			bpf_usdt_arg(ctx, i, &v);
		r->args[i] = v;
	}
	bpf_ringbuf_submit(r, 0);
	return 0;
}

/* ---- kernel: process lifetime and scheduling ---------------------------- */

SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	struct rp_bpf_exec *r;
	long n;

	if (!want_current())
		return 0;
	r = rec_reserve(sizeof(*r), RP_BPF_REC_EXEC);
	if (!r)
		return 0;
	r->old_pid = old_pid;
	r->__pad = 0;
	bpf_get_current_comm(r->comm, sizeof(r->comm));
	n = bpf_probe_read_kernel_str(r->filename, sizeof(r->filename), BPF_CORE_READ(bprm, filename));
	r->filename_len = n > 0 ? (__u16)(n - 1) : 0;
	bpf_ringbuf_submit(r, 0);
	return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct *parent, struct task_struct *child)
{
	struct rp_bpf_fork *r;
	__u32 ptgid = BPF_CORE_READ(parent, tgid);
	__u32 ctgid = BPF_CORE_READ(child, tgid);

	if (!want_tgid(ptgid))
		return 0;
	if (filter_tasks && ctgid != ptgid) {
		__u8 one = 1;

		/* follow the tree: the child of a traced process is traced */
		bpf_map_update_elem(&tracked, &ctgid, &one, BPF_ANY);
	}
	r = rec_reserve(sizeof(*r), RP_BPF_REC_FORK);
	if (!r)
		return 0;
	r->child_pid = ctgid;
	r->child_tid = BPF_CORE_READ(child, pid);
	BPF_CORE_READ_STR_INTO(&r->comm, child, comm);
	bpf_ringbuf_submit(r, 0);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_exit, struct task_struct *p)
{
	struct rp_bpf_exit *r;
	__u32 tgid = BPF_CORE_READ(p, tgid);
	bool dead;

	if (!want_tgid(tgid))
		return 0;
	/* do_exit() drops signal->live before this tracepoint: zero means
	 * this was the process's last thread (portable across the kernels
	 * that do and do not pass group_dead to the tracepoint) */
	dead = BPF_CORE_READ(p, signal, live.counter) == 0;
	r = rec_reserve(sizeof(*r), RP_BPF_REC_EXIT);
	if (r) {
		r->exit_code = BPF_CORE_READ(p, exit_code);
		r->group_dead = dead;
		BPF_CORE_READ_STR_INTO(&r->comm, p, comm);
		bpf_ringbuf_submit(r, 0);
	}
	if (dead && filter_tasks)
		bpf_map_delete_elem(&tracked, &tgid);
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(on_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	struct rp_bpf_switch *r;
	__u32 ntgid;

	__u32 ptgid;

	if (!want_switch)
		return 0;
	ptgid = BPF_CORE_READ(prev, tgid);
	ntgid = BPF_CORE_READ(next, tgid);
	/* the recorder's own switches would feed back into its trace */
	if (ptgid == self_tgid || ntgid == self_tgid || (!want_tgid(ptgid) && !want_tgid(ntgid)))
		return 0;
	r = rec_reserve(sizeof(*r), RP_BPF_REC_SWITCH);
	if (!r)
		return 0;
	r->next_pid = ntgid;
	r->next_tid = BPF_CORE_READ(next, pid);
	r->prev_state = preempt ? 0 : (__s64)BPF_CORE_READ(prev, __state);
	BPF_CORE_READ_STR_INTO(&r->prev_comm, prev, comm);
	BPF_CORE_READ_STR_INTO(&r->next_comm, next, comm);
	bpf_ringbuf_submit(r, 0);
	return 0;
}
