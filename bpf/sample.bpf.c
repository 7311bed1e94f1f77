// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * CPU sampling: runs on each perf event overflow (cpu-clock or cycles, one
 * event per CPU) and sends the interrupted thread's identity and its kernel
 * and user stacks to user space through a BPF ring buffer.
 *
 * It reads no kernel structure directly (only helpers), so it needs neither
 * vmlinux.h nor CO-RE relocations and loads on any kernel with BPF ring
 * buffers (5.8+).
 */
#include <linux/types.h>
#include <linux/bpf.h>
#include <linux/bpf_perf_event.h>
#include <bpf/bpf_helpers.h>

#include "capture.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* Set by the loader before load; 0 means no filter. */
const volatile __u32 targ_tgid = 0;
const volatile __u64 targ_cgroup = 0;
const volatile __u8 want_kernel = 1;

/* Samples lost because the ring buffer was full: user space reports them. */
__u64 dropped = 0;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 << 20);
} samples SEC(".maps");

SEC("perf_event")
int rp_sample(struct bpf_perf_event_data *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id;
	struct rp_sample_rec *r;
	long n;

	/* the idle task (pid 0) is not a thread anybody profiles */
	if (!tid)
		return 0;
	if (targ_tgid && tgid != targ_tgid)
		return 0;
	if (targ_cgroup && bpf_get_current_cgroup_id() != targ_cgroup)
		return 0;

	r = bpf_ringbuf_reserve(&samples, sizeof(*r), 0);
	if (!r) {
		__sync_fetch_and_add(&dropped, 1);
		return 0;
	}
	r->type = RP_SAMPLE_REC_TYPE;
	r->pid = tgid;
	r->tid = tid;
	r->cpu = bpf_get_smp_processor_id();
	r->cgroup_id = bpf_get_current_cgroup_id();
	r->ts_ns = bpf_ktime_get_ns();
	bpf_get_current_comm(r->comm, sizeof(r->comm));

	r->nkernel = 0;
	if (want_kernel) {
		n = bpf_get_stack(ctx, r->kstack, sizeof(r->kstack), 0);
		if (n > 0)
			r->nkernel = n / sizeof(__u64);
	}
	/* a thread interrupted in the kernel still has a user stack: the
	 * helper then starts from the registers saved at kernel entry */
	n = bpf_get_stack(ctx, r->ustack, sizeof(r->ustack), BPF_F_USER_STACK);
	r->nuser = n > 0 ? n / sizeof(__u64) : 0;
	/* no wakeup per sample: the reader polls on a timer, and is woken
	 * only when the buffer fills up (a wakeup per sample would cost the
	 * machine a context switch per sample at 999 Hz) */
	bpf_ringbuf_submit(r, bpf_ringbuf_query(&samples, BPF_RB_AVAIL_DATA) > (2 << 20) ?
			   BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP);
	return 0;
}
