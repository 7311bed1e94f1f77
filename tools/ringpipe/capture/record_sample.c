// SPDX-License-Identifier: MIT
/*
 * `ringpipe record --sample HZ`: CPU samples in the recording session.
 *
 * The sampler's BPF ring buffer is drained by the capture's consumer thread
 * (a capture source), so a sample reaches the session under the same merge
 * horizon as the probes' events and is never late; its event carries the
 * sampled thread, the sample's time and CPU, and the stack (kernel frames,
 * then user frames) as the event's stack. What symbolization needs travels
 * in the trace too, as in `ringpipe sample`: a process's mappings
 * (Ringpipe-Symbols/ModuleLoad, with build ids) when its first sample comes
 * and again every second, perf-map JIT symbols, and thread names.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/atomics.h"
#include "util/bytebuf.h"
#include "core/clock.h"
#include "capture/cpu_sampler.h"
#include "common/fnv1a.h"
#include "util/hmap.h"
#include "capture/record_sample.h"
#include "capture/sample_out.h"
#include "symbols/symbolize.h"

#define RESNAPSHOT_NS 1000000000ull
#define COMMS_MAX (1u << 20)	/* threads whose name is remembered */

#define RP_FIELD(n, t) { .name = n, .type = RP_TYPE_##t },
static const struct rp_field f_sample[] = { SAMPLE_FIELDS(RP_FIELD) };
static const struct rp_field f_module[] = { SYM_MODULE_FIELDS(RP_FIELD) };
static const struct rp_field f_jit[] = { SYM_JIT_FIELDS(RP_FIELD) };
static const struct rp_field f_thread[] = { SYM_THREAD_FIELDS(RP_FIELD) };

static struct rp_event *ev_sample, *ev_module, *ev_jit, *ev_thread;

struct record_sampler {
	struct rp_capture *cap;
	struct cpu_sampler *s;
	struct sym_table *syms;
	struct hmap seen;		/* pid -> 1: snapshotted */
	struct hmap names;		/* pid << 32 | tid -> hash of the name written */
	struct hmap comms;		/* the same, kept across a restate: an exec
					 * changes it */
	uint32_t *pids;
	size_t npids, cappids;
	size_t modules_done, jits_done;
	uint64_t last_snap_ns;
	uint64_t samples, written, write_drops;	/* atomic: bumped as written */
	int restate;			/* atomic: write every symbol again */
	struct bytebuf pl;
};

static struct rp_event *define(struct rp_provider *p, uint32_t id, const char *name,
			       const struct rp_field *f, uint16_t n)
{
	struct rp_event_opts eo = { .sz = sizeof(eo), .id = id, .name = name, .level = 4,
				    .nfields = n, .fields = f };

	return rp_event_new(p, &eo);
}

int record_sampler_define(void)
{
	struct rp_provider_opts po = { .sz = sizeof(po), .name = SAMPLER_PROVIDER };
	struct rp_provider *ps, *py;

	if (ev_sample)
		return 0;
	ps = rp_provider_new(&po);
	po.name = SYM_PROVIDER;
	py = rp_provider_new(&po);
	if (!ps || !py)
		return -ENOMEM;
	ev_sample = define(ps, SAMPLER_EV_SAMPLE, "Sample", f_sample, SAMPLE_NFIELDS(f_sample));
	ev_module = define(py, SYM_EV_MODULE, "ModuleLoad", f_module, SAMPLE_NFIELDS(f_module));
	ev_jit = define(py, SYM_EV_JIT, "JitSymbol", f_jit, SAMPLE_NFIELDS(f_jit));
	ev_thread = define(py, SYM_EV_THREAD, "Thread", f_thread, SAMPLE_NFIELDS(f_thread));
	return ev_sample && ev_module && ev_jit && ev_thread ? 0 : -ENOMEM;
}

static void count(struct record_sampler *rs, int rc)
{
	if (rc == -ENOBUFS)
		rp_add_relaxed(&rs->write_drops, 1);
}

/* Modules and JIT symbols the table learned since the last call, written
 * now by this (the consumer) thread. */
static void write_symbols(struct record_sampler *rs)
{
	for (; rs->modules_done < sym_nmodules(rs->syms); rs->modules_done++) {
		rs->pl.len = 0;
		sample_enc_module(&rs->pl, sym_module_at(rs->syms, rs->modules_done));
		if (!rs->pl.oom)
			count(rs, rp_event_write(ev_module, rs->pl.p, rs->pl.len));
	}
	for (; rs->jits_done < sym_njit(rs->syms); rs->jits_done++) {
		rs->pl.len = 0;
		sample_enc_jit(&rs->pl, sym_jit_at(rs->syms, rs->jits_done));
		if (!rs->pl.oom)
			count(rs, rp_event_write(ev_jit, rs->pl.p, rs->pl.len));
	}
}

/* A thread's name, as an event of that thread, when it is new or changed
 * (or all of them again after a restate). true when it changed since the
 * thread's last sample (an exec, most likely). */
static bool queue_thread_name(struct record_sampler *rs, const struct rp_sample_rec *r)
{
	uint64_t key = (uint64_t)r->pid << 32 | r->tid, v, h;
	bool seen, changed;
	char name[17];

	memcpy(name, r->comm, 16);
	name[16] = 0;
	h = fnv1a64_str(fnv1a64_start(), name);
	seen = hmap_get(&rs->comms, key, &v);
	changed = seen && v != h;
	/* bounded: forgetting every thread at worst misses one exec, which
	 * the periodic look catches */
	if (!seen && rs->comms.count >= COMMS_MAX)
		hmap_clear(&rs->comms);
	if (!seen || changed)
		hmap_put(&rs->comms, key, h);
	if (hmap_get(&rs->names, key, &v) && v == h)
		return changed;
	if (hmap_put(&rs->names, key, h))
		return changed;
	rs->pl.len = 0;
	sample_enc_thread(&rs->pl, r->pid, r->tid, name);
	if (!rs->pl.oom)
		rp_capture_queue(rs->cap, ev_thread, r->ts_ns, r->pid, r->tid, r->cpu, rs->pl.p,
				 (uint32_t)rs->pl.len, NULL, 0, &rs->written, &rs->write_drops);
	return changed;
}

static int on_sample(void *ctx, const struct rp_sample_rec *r)
{
	struct record_sampler *rs = ctx;
	uint32_t nk = r->nkernel < RP_SAMPLE_MAX_FRAMES ? r->nkernel : RP_SAMPLE_MAX_FRAMES;
	uint32_t nu = r->nuser < RP_SAMPLE_MAX_FRAMES ? r->nuser : RP_SAMPLE_MAX_FRAMES;
	uint64_t stack[2 * RP_SAMPLE_MAX_FRAMES], v;
	uint8_t pl[SAMPLE_PAYLOAD_LEN];

	/* a process is snapshotted at its first sample, while surely alive */
	if (!hmap_get(&rs->seen, r->pid, &v) && !hmap_put(&rs->seen, r->pid, 1) &&
	    !array_grow((void **)&rs->pids, &rs->cappids, rs->npids, sizeof(*rs->pids), 64)) {
		rs->pids[rs->npids++] = r->pid;
		sym_snapshot_pid(rs->syms, r->pid);
		write_symbols(rs);
	}
	/* a process that exec'ed after its first sample (a shell that
	 * became the program) has other modules now: looked at again, not
	 * only at the next periodic look, so that its samples until then
	 * are named too */
	if (queue_thread_name(rs, r)) {
		sym_snapshot_pid(rs->syms, r->pid);
		write_symbols(rs);
	}
	sample_payload(r, pl);
	memcpy(stack, r->kstack, nk * 8);
	memcpy(stack + nk, r->ustack, nu * 8);
	rp_capture_queue(rs->cap, ev_sample, r->ts_ns, r->pid, r->tid, r->cpu, pl, sizeof(pl), stack,
			 nk + nu, &rs->samples, &rs->write_drops);
	return 0;
}

static void resnapshot(struct record_sampler *rs)
{
	size_t i;

	/* mappings appear after the first look (dlopen, a JIT's code) */
	for (i = 0; i < rs->npids; i++)
		sym_snapshot_pid(rs->syms, rs->pids[i]);
	write_symbols(rs);
}

/* The capture source: runs on the consumer thread. */
static int poll_samples(void *ctx)
{
	struct record_sampler *rs = ctx;
	uint64_t now = rp_clock_mono_ns();

	cpu_sampler_poll(rs->s, 0);
	/* a request only: the tables it replays are this thread's */
	if (rp_xchg_relaxed(&rs->restate, 0)) {
		rs->modules_done = rs->jits_done = 0;
		hmap_clear(&rs->names);
		write_symbols(rs);
	}
	if (now - rs->last_snap_ns >= RESNAPSHOT_NS) {
		rs->last_snap_ns = now;
		resnapshot(rs);
	}
	return 0;
}

/* The capture is stopping: no more ticks, its last pass takes the rest. */
static int quiesce_samples(void *ctx)
{
	struct record_sampler *rs = ctx;

	cpu_sampler_quiesce(rs->s);
	return 0;
}

struct record_sampler *record_sampler_open(struct rp_capture *cap, uint32_t hz, pid_t pid,
					   char *err, size_t errlen)
{
	struct cpu_sampler_opts so = { .freq_hz = hz, .pid = pid > 0 ? (uint32_t)pid : 0 };
	struct record_sampler *rs = calloc(1, sizeof(*rs));

	if (!rs || !(rs->syms = sym_table_new())) {
		free(rs);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	rs->cap = cap;
	rs->last_snap_ns = rp_clock_mono_ns();
	rs->s = cpu_sampler_start(&so, on_sample, rs, err, errlen);
	if (!rs->s || rp_capture_add_source(cap, poll_samples, quiesce_samples, rs)) {
		if (rs->s)
			snprintf(err, errlen, "the capture takes no more sources");
		record_sampler_close(rs, NULL);
		return NULL;
	}
	return rs;
}

void record_sampler_restate(struct record_sampler *rs)
{
	if (rs)
		rp_store_relaxed(&rs->restate, 1);
}

void record_sampler_close(struct record_sampler *rs, struct record_sampler_stats *st)
{
	if (!rs)
		return;
	/* the capture's consumer has stopped after quiescing us and taking
	 * every queued sample: a last look at the mappings (events stamped
	 * now, younger than everything written) */
	if (rs->s) {
		resnapshot(rs);
		if (st) {
			st->kernel_drops = cpu_sampler_dropped(rs->s);
			st->event = cpu_sampler_event_name(rs->s);
		}
		cpu_sampler_stop(rs->s);
		rp_capture_flush(rs->cap);
	}
	if (st) {
		st->samples = rp_load_relaxed(&rs->samples);
		st->write_drops = rp_load_relaxed(&rs->write_drops);
		st->modules = sym_nmodules(rs->syms);
	}
	sym_table_free(rs->syms);
	hmap_free(&rs->seen);
	hmap_free(&rs->names);
	hmap_free(&rs->comms);
	free(rs->pids);
	bb_free(&rs->pl);
	free(rs);
}
