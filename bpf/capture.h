/* SPDX-License-Identifier: MIT */
/*
 * Records that cross the BPF ring buffer, from the capture programs
 * (bpf/NAME.bpf.c) to the user-side bridge (tools/ringpipe/capture/bpf_capture.c).
 *
 * This one header is compiled by clang for the BPF target (after vmlinux.h,
 * which defines the __u* types) and by the host compiler (which gets them
 * from <linux/types.h>), so both sides agree on every byte. Rules, as in
 * include/ringpipe/abi.h: fixed-width types, explicit padding, no pointers,
 * sizes pinned by static asserts. Every record starts with the same 40-byte
 * header; `type` says which body follows and `size` is the whole record, so
 * the reader can bounds-check before it trusts the body.
 *
 * Strings read from the traced process are copied into fixed arrays (a ring
 * buffer reservation must have a size the verifier can bound) with their
 * length in a separate field; they are not NUL-terminated when full.
 */
#ifndef RINGPIPE_BPF_CAPTURE_H
#define RINGPIPE_BPF_CAPTURE_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

enum rp_bpf_rec_type {
	RP_BPF_REC_PY_GC_START = 1,
	RP_BPF_REC_PY_GC_DONE = 2,
	RP_BPF_REC_JVM_GC_BEGIN = 3,
	RP_BPF_REC_JVM_GC_END = 4,
	RP_BPF_REC_JVM_POOL_GC_BEGIN = 5,
	RP_BPF_REC_JVM_POOL_GC_END = 6,
	RP_BPF_REC_JVM_CLASS_LOADED = 7,
	RP_BPF_REC_JVM_COMPILE_BEGIN = 8,
	RP_BPF_REC_JVM_COMPILE_END = 9,
	RP_BPF_REC_JVM_THREAD_START = 10,
	RP_BPF_REC_USDT_GENERIC = 11,	/* --usdt BINARY:PROVIDER:PROBE */
	RP_BPF_REC_EXEC = 12,
	RP_BPF_REC_FORK = 13,
	RP_BPF_REC_EXIT = 14,
	RP_BPF_REC_SWITCH = 15,
	/* Reserved for the CPU-sampling program (bpf/sample.bpf.c): a perf
	 * cpu-clock sample with user and kernel stacks. Its body is defined by
	 * that program; the value is fixed here so the types never collide. */
	RP_BPF_REC_SAMPLE = 16,
	RP_BPF_REC_NR,
};

#define RP_BPF_COMM_LEN 16	/* the kernel's TASK_COMM_LEN */
#define RP_BPF_NAME_LEN 128	/* Java class / method names, truncated */
#define RP_BPF_SHORT_LEN 64	/* compiler, pool, manager, thread names */
#define RP_BPF_PATH_LEN 256	/* exec'd file name */
#define RP_BPF_USDT_ARGS 6	/* generic probes: first arguments kept */

/* Common header: who and when, for every record. */
struct rp_bpf_hdr {
	__u16 type;		/* enum rp_bpf_rec_type */
	__u16 size;		/* whole record, header included */
	__u32 cpu;		/* bpf_get_smp_processor_id() */
	__u32 pid;		/* tgid of the current task */
	__u32 tid;		/* its thread id */
	__u64 ts_ns;		/* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
	__u64 cgroup_id;	/* bpf_get_current_cgroup_id(): cgroup2 dir inode */
	__u64 cookie;		/* generic USDT: which probe spec; else 0 */
};

/* PY_GC_START: generation; PY_GC_DONE: collected (3.11 passes no
 * "uncollectable" to gc__done, so it is not captured). */
struct rp_bpf_py_gc {
	struct rp_bpf_hdr h;
	__s64 value;		/* generation, or objects collected */
};

/* JVM_GC_BEGIN: full collection requested; JVM_GC_END: nothing. */
struct rp_bpf_jvm_gc {
	struct rp_bpf_hdr h;
	__u32 full;
	__u32 __pad;
};

struct rp_bpf_jvm_pool_gc {
	struct rp_bpf_hdr h;
	__u64 initial, used, committed, max;
	__u16 manager_len, pool_len;
	__u32 __pad;
	char manager[RP_BPF_SHORT_LEN];
	char pool[RP_BPF_SHORT_LEN];
};

struct rp_bpf_jvm_class {
	struct rp_bpf_hdr h;
	__u64 loader_id;
	__u32 shared;
	__u16 name_len;
	__u16 __pad;
	char name[RP_BPF_NAME_LEN];	/* "java/lang/String" form */
};

struct rp_bpf_jvm_compile {
	struct rp_bpf_hdr h;
	__u32 success;		/* COMPILE_END only */
	__u16 compiler_len, class_len, method_len, sig_len;
	__u16 __pad;
	char compiler[RP_BPF_SHORT_LEN];
	char klass[RP_BPF_NAME_LEN];
	char method[RP_BPF_SHORT_LEN];
	char sig[RP_BPF_NAME_LEN];
};

struct rp_bpf_jvm_thread {
	struct rp_bpf_hdr h;
	__u64 java_tid;
	__u64 native_tid;
	__u32 daemon;
	__u16 name_len;
	__u16 __pad;
	char name[RP_BPF_SHORT_LEN];
};

struct rp_bpf_usdt {
	struct rp_bpf_hdr h;	/* h.cookie: index of the --usdt spec */
	__u32 nargs;
	__u32 __pad;
	__u64 args[RP_BPF_USDT_ARGS];
};

struct rp_bpf_exec {
	struct rp_bpf_hdr h;
	__u32 old_pid;		/* tid that called exec (differs when a thread did) */
	__u16 filename_len;
	__u16 __pad;
	char comm[RP_BPF_COMM_LEN];
	char filename[RP_BPF_PATH_LEN];
};

/* h.pid/h.tid: the parent (the forking thread). */
struct rp_bpf_fork {
	struct rp_bpf_hdr h;
	__u32 child_pid;	/* tgid: == parent's for a new thread */
	__u32 child_tid;
	char comm[RP_BPF_COMM_LEN];
};

struct rp_bpf_exit {
	struct rp_bpf_hdr h;
	__s32 exit_code;	/* wait(2) status as the kernel keeps it */
	__u32 group_dead;	/* the last thread of the process */
	char comm[RP_BPF_COMM_LEN];
};

/* h.pid/h.tid: the task switched out (current at the tracepoint). */
struct rp_bpf_switch {
	struct rp_bpf_hdr h;
	__u32 next_pid, next_tid;
	__s64 prev_state;	/* 0: preempted while runnable */
	char prev_comm[RP_BPF_COMM_LEN];
	char next_comm[RP_BPF_COMM_LEN];
};

/* The BPF compiler accepts _Static_assert too, but kernel headers on some
 * setups define it away; the host side is where layout mistakes show. */
#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
_Static_assert(sizeof(struct rp_bpf_hdr) == 40, "rp_bpf_hdr layout");
_Static_assert(sizeof(struct rp_bpf_py_gc) == 48, "rp_bpf_py_gc layout");
_Static_assert(sizeof(struct rp_bpf_jvm_gc) == 48, "rp_bpf_jvm_gc layout");
_Static_assert(sizeof(struct rp_bpf_jvm_pool_gc) == 40 + 32 + 8 + 2 * RP_BPF_SHORT_LEN,
	       "rp_bpf_jvm_pool_gc layout");
_Static_assert(sizeof(struct rp_bpf_jvm_class) == 40 + 16 + RP_BPF_NAME_LEN,
	       "rp_bpf_jvm_class layout");
_Static_assert(sizeof(struct rp_bpf_jvm_compile) ==
	       40 + 16 + 2 * RP_BPF_SHORT_LEN + 2 * RP_BPF_NAME_LEN, "rp_bpf_jvm_compile layout");
_Static_assert(sizeof(struct rp_bpf_jvm_thread) == 40 + 24 + RP_BPF_SHORT_LEN,
	       "rp_bpf_jvm_thread layout");
_Static_assert(sizeof(struct rp_bpf_usdt) == 40 + 8 + 8 * RP_BPF_USDT_ARGS, "rp_bpf_usdt layout");
_Static_assert(sizeof(struct rp_bpf_exec) == 40 + 8 + RP_BPF_COMM_LEN + RP_BPF_PATH_LEN,
	       "rp_bpf_exec layout");
_Static_assert(sizeof(struct rp_bpf_fork) == 40 + 8 + RP_BPF_COMM_LEN, "rp_bpf_fork layout");
_Static_assert(sizeof(struct rp_bpf_exit) == 40 + 8 + RP_BPF_COMM_LEN, "rp_bpf_exit layout");
_Static_assert(sizeof(struct rp_bpf_switch) == 40 + 16 + 2 * RP_BPF_COMM_LEN,
	       "rp_bpf_switch layout");
#endif

/*
 * CPU samples (bpf/sample.bpf.c, read by tools/ringpipe/capture/cpu_sampler.c) travel in
 * a ring buffer of their own and start with a 32-bit magic instead of the
 * common header: a sample is mostly its two stacks, and the sampler never
 * sees the other records.
 */
/* perf's default limit (kernel.perf_event_max_stack) is 127 frames */
#define RP_SAMPLE_MAX_FRAMES 127
#define RP_SAMPLE_REC_TYPE 0x53414d50u	/* "SAMP": first word of every sample record */

struct rp_sample_rec {
	__u32 type;		/* RP_SAMPLE_REC_TYPE */
	__u32 pid;		/* thread group id, what user space calls the pid */
	__u32 tid;
	__u32 cpu;
	__u64 cgroup_id;	/* cgroup v2 id: the inode number of the cgroup's directory */
	__u64 ts_ns;		/* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
	__u32 nkernel;		/* valid entries in kstack, innermost first */
	__u32 nuser;		/* valid entries in ustack, innermost first */
	char comm[16];		/* the thread's name */
	__u64 kstack[RP_SAMPLE_MAX_FRAMES];
	__u64 ustack[RP_SAMPLE_MAX_FRAMES];
};

_Static_assert(sizeof(struct rp_sample_rec) == 56 + 2 * 8 * RP_SAMPLE_MAX_FRAMES,
	       "rp_sample_rec layout");
_Static_assert(__builtin_offsetof(struct rp_sample_rec, kstack) == 56, "kstack offset");


#endif /* RINGPIPE_BPF_CAPTURE_H */
