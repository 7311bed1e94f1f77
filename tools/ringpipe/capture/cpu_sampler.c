// SPDX-License-Identifier: MIT
/*
 * CPU sampler loader (see cpu_sampler.h).
 *
 * One perf event per CPU rather than one per thread of the target: threads
 * the target creates later are covered without tracking clone(), and the
 * BPF program filters by thread group id, which costs a compare per tick.
 */
#include <errno.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <bpf/libbpf.h>

#include "core/atomics.h"
#include "capture/cpu_sampler.h"
#include "sample.skel.h"

struct cpu_sampler {
	struct sample_bpf *skel;
	struct ring_buffer *rb;
	int ncpu;
	int *fds;
	struct bpf_link **links;
	cpu_sampler_cb cb;
	void *ctx;
	const char *event;
};

static int on_record(void *ctx, void *data, size_t size)
{
	struct cpu_sampler *s = ctx;
	const struct rp_sample_rec *r = data;

	/* the ring buffer is ours alone, but a short record would be a
	 * layout mismatch between the two sides: never read past it */
	if (size < sizeof(*r) || r->type != RP_SAMPLE_REC_TYPE)
		return 0;
	return s->cb(s->ctx, r);
}

static int open_event(uint32_t type, uint64_t config, uint32_t hz, int cpu)
{
	struct perf_event_attr a;

	memset(&a, 0, sizeof(a));
	a.size = sizeof(a);
	a.type = type;
	a.config = config;
	if (type == PERF_TYPE_SOFTWARE) {
		/* cpu-clock counts nanoseconds: a fixed period is exactly HZ,
		 * where frequency mode starts low and takes a while to adapt */
		a.sample_period = 1000000000ull / hz;
	} else {
		a.freq = 1;
		a.sample_freq = hz;
	}
	a.disabled = 0;
	return (int)syscall(SYS_perf_event_open, &a, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC);
}

static int libbpf_quiet(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	/* libbpf's warnings duplicate the error this module reports itself;
	 * RINGPIPE_BPF_DEBUG=1 shows them when diagnosing a load failure */
	if (getenv("RINGPIPE_BPF_DEBUG"))
		return vfprintf(stderr, fmt, ap);
	return 0;
}

static void set_err(char *err, size_t errlen, int e, const char *what)
{
	if (e == EPERM || e == EACCES)
		snprintf(err, errlen, "%s: %s (CPU sampling needs CAP_BPF and CAP_PERFMON, "
			 "or root)", what, strerror(e));
	else
		snprintf(err, errlen, "%s: %s", what, strerror(e));
}

struct cpu_sampler *cpu_sampler_start(const struct cpu_sampler_opts *o, cpu_sampler_cb cb,
				      void *ctx, char *err, size_t errlen)
{
	struct cpu_sampler *s;
	uint32_t hz = o->freq_hz ? o->freq_hz : 99;
	int i, e;

	libbpf_set_print(libbpf_quiet);
	s = calloc(1, sizeof(*s));
	if (!s) {
		set_err(err, errlen, ENOMEM, "sampler");
		errno = ENOMEM;
		return NULL;
	}
	s->cb = cb;
	s->ctx = ctx;
	s->ncpu = libbpf_num_possible_cpus();
	if (s->ncpu <= 0) {
		e = -s->ncpu;
		set_err(err, errlen, e, "counting CPUs");
		goto fail;
	}
	s->fds = malloc(s->ncpu * sizeof(*s->fds));
	s->links = calloc(s->ncpu, sizeof(*s->links));
	if (!s->fds || !s->links) {
		e = ENOMEM;
		set_err(err, errlen, e, "sampler");
		goto fail;
	}
	for (i = 0; i < s->ncpu; i++)
		s->fds[i] = -1;

	s->skel = sample_bpf__open();
	if (!s->skel) {
		e = errno;
		set_err(err, errlen, e, "opening the BPF sampler");
		goto fail;
	}
	s->skel->rodata->targ_tgid = o->pid;
	s->skel->rodata->targ_cgroup = o->cgroup_id;
	s->skel->rodata->want_kernel = !o->no_kernel_stacks;
	e = -sample_bpf__load(s->skel);
	if (e) {
		set_err(err, errlen, e, "loading the BPF sampler");
		goto fail;
	}

	for (i = 0; i < s->ncpu; i++) {
		int fd = -1;

		if (o->event != CPU_SAMPLER_EVENT_CPU_CLOCK) {
			fd = open_event(PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, hz, i);
			if (fd >= 0)
				s->event = "cycles";
			else if (o->event == CPU_SAMPLER_EVENT_CYCLES && errno != ENODEV) {
				e = errno == ENOENT || errno == EOPNOTSUPP ? ENODEV : errno;
				set_err(err, errlen, e, "perf_event_open(cycles)");
				goto fail;
			}
		}
		if (fd < 0 && o->event != CPU_SAMPLER_EVENT_CYCLES) {
			fd = open_event(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK, hz, i);
			if (fd >= 0)
				s->event = "cpu-clock";
		}
		if (fd < 0) {
			/* a possible CPU that is offline has nothing to sample */
			if (errno == ENODEV && o->event != CPU_SAMPLER_EVENT_CYCLES)
				continue;
			e = errno;
			set_err(err, errlen, e, o->event == CPU_SAMPLER_EVENT_CYCLES ?
				"perf_event_open(cycles): this machine has no hardware counters" :
				"perf_event_open(cpu-clock)");
			goto fail;
		}
		s->fds[i] = fd;
		s->links[i] = bpf_program__attach_perf_event(s->skel->progs.rp_sample, fd);
		if (!s->links[i]) {
			e = errno;
			set_err(err, errlen, e, "attaching the BPF sampler to a perf event");
			goto fail;
		}
	}
	if (!s->event) {
		e = ENODEV;
		set_err(err, errlen, e, "no CPU to sample");
		goto fail;
	}
	s->rb = ring_buffer__new(bpf_map__fd(s->skel->maps.samples), on_record, s, NULL);
	if (!s->rb) {
		e = errno;
		set_err(err, errlen, e, "opening the BPF ring buffer");
		goto fail;
	}
	return s;
fail:
	cpu_sampler_stop(s);
	errno = e;
	return NULL;
}

int cpu_sampler_poll(struct cpu_sampler *s, int timeout_ms)
{
	int n = ring_buffer__poll(s->rb, timeout_ms), m;

	if (n < 0 && n != -EINTR)
		return n;
	/* the BPF side wakes the reader only when the buffer is filling up:
	 * after the wait, take whatever arrived without a wakeup */
	m = ring_buffer__consume(s->rb);
	if (m < 0)
		return m;
	return (n > 0 ? n : 0) + m;
}

const char *cpu_sampler_event_name(const struct cpu_sampler *s)
{
	return s->event;
}

uint64_t cpu_sampler_dropped(const struct cpu_sampler *s)
{
	/* bumped by the BPF program on every CPU: a counter, no ordering */
	return rp_load_relaxed(&s->skel->bss->dropped);
}

void cpu_sampler_quiesce(struct cpu_sampler *s)
{
	int i;

	for (i = 0; s->links && i < s->ncpu; i++) {
		bpf_link__destroy(s->links[i]);
		s->links[i] = NULL;
	}
	for (i = 0; s->fds && i < s->ncpu; i++) {
		if (s->fds[i] >= 0)
			close(s->fds[i]);
		s->fds[i] = -1;
	}
}

void cpu_sampler_stop(struct cpu_sampler *s)
{
	if (!s)
		return;
	/* stop the ticks first, so that the drain below sees a final state */
	cpu_sampler_quiesce(s);
	if (s->rb) {
		ring_buffer__consume(s->rb);
		ring_buffer__free(s->rb);
	}
	sample_bpf__destroy(s->skel);
	free(s->links);
	free(s->fds);
	free(s);
}
