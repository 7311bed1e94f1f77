/* SPDX-License-Identifier: MIT */
/*
 * The CPU-sample record that bpf/sample.bpf.c puts into its BPF ring buffer
 * and tools/ringpipe/sampler.c reads. Shared by both sides so the layout
 * cannot drift; the static asserts pin it (the BPF target and x86-64 agree
 * on these alignments). To be folded into bpf/capture.h, under the record
 * type that header reserves for CPU samples, when the BPF build is unified.
 */
#ifndef RINGPIPE_BPF_SAMPLE_H
#define RINGPIPE_BPF_SAMPLE_H

#ifdef __bpf__
/* the BPF side includes vmlinux.h or linux/types.h before this header */
#else
#include <linux/types.h>
#endif

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

#endif /* RINGPIPE_BPF_SAMPLE_H */
