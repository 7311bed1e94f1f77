// SPDX-License-Identifier: MIT
/*
 * The sample profiler (see sampler.h).
 *
 * Each registered thread owns a slot. A round of samples moves each slot
 * through IDLE -> REQUESTED (the sampler, then tgkill) -> WRITING -> DONE
 * (the thread's signal handler, which alone writes the slot's frames) ->
 * IDLE (the sampler, once it copied them). Only the sampler requests and
 * only the handler writes frames, so the two never touch the frames at the
 * same time; rounds are serialized (round_lock) because the enable callback
 * takes one too. A thread that has not answered by the round's deadline
 * (not scheduled yet) keeps its request: its answer is collected by a later
 * round, and it is not signalled again meanwhile.
 *
 * Each sample names the sampled thread (rp_write_opts.thread_id): readers
 * show it on that thread while the sampler stays its capture thread, so the
 * sequence numbers that count losses remain the sampler's own.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include "core/atomics.h"
#include "core/clock.h"
#include "clr_events.h"
#include "sampler.h"

#define MAX_SAMPLED 256
#define ROUND_WAIT_NS (2 * 1000000ull)		/* a periodic round's deadline */
#define FIRST_ROUND_WAIT_NS (200 * 1000000ull)	/* the enable callback's rounds' */
#define FIRST_ROUNDS_NS (2000 * 1000000ull)	/* ... and all of them together */
/* An IPC session's trace starts (its header's sync time) when its drainer
 * notices the release, polling every 5 ms, while the enable callbacks run at
 * once: a sample from before that time counts for nothing in TraceEvent.
 * So the first round waits this long (see the report on drain.c). */
#define FIRST_ROUND_DELAY_NS (20 * 1000000ull)
#define POLL_NS 50000ull

enum { SLOT_IDLE, SLOT_REQUESTED, SLOT_WRITING, SLOT_DONE };

struct slot {
	uint32_t tid;			/* lock; 0: free */
	uint32_t type;			/* lock; ThreadSample Type: 2 managed, 1 external */
	uint32_t state;			/* atomic: SLOT_* */
	uint32_t nframes;		/* the handler's, before DONE */
	uintptr_t stack_hi;		/* the thread's; frames lie below */
	uintptr_t anchor_ip, anchor_fp;	/* the registering frame: stacks in native code */
	uint64_t frames[SAMPLER_MAX_FRAMES];
} __attribute__((aligned(64)));

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t round_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static uint64_t sessions;		/* lock: sessions enabling the provider */
static bool stop, started;		/* lock */
static struct slot slots[MAX_SAMPLED];
static uint32_t nslots;			/* lock: slots ever used */
static __thread struct slot *self;	/* this thread's slot, for its signal handler */
static int sample_sig;
static pid_t pid;
static pthread_t th;

/* ---- managed code ----------------------------------------------------------- */

static struct sampler_code codes[SAMPLER_MAX_CODE];
static uint32_t ncodes;				/* release-stored by sampler_code_add */
static pthread_mutex_t code_lock = PTHREAD_MUTEX_INITIALIZER;

int sampler_code_add(const struct sampler_code *c, size_t n)
{
	uint32_t k;

	pthread_mutex_lock(&code_lock);
	k = rp_load_relaxed(&ncodes);
	if (k + n > SAMPLER_MAX_CODE) {
		pthread_mutex_unlock(&code_lock);
		return -ENOSPC;
	}
	memcpy(&codes[k], c, n * sizeof(*c));
	/* pairs with the acquire load in sampler_code_contains() and jit_rundown():
	 * the entries are complete before the count covers them */
	rp_store_release(&ncodes, k + (uint32_t)n);
	pthread_mutex_unlock(&code_lock);
	return 0;
}

const struct sampler_code *sampler_code_find(uint64_t ip)
{
	/* pairs with the release store in sampler_code_add() */
	uint32_t n = rp_load_acquire(&ncodes), k;

	for (k = 0; k < n; k++)
		if (ip >= (uintptr_t)codes[k].start && ip < (uintptr_t)codes[k].end)
			return &codes[k];
	return NULL;
}

const struct sampler_code *sampler_code_table(uint32_t *n)
{
	/* pairs with the release store in sampler_code_add() */
	*n = rp_load_acquire(&ncodes);
	return codes;
}

/* ---- the sampled thread's side: the signal handler ------------------------ */

static void context_regs(const ucontext_t *uc, uintptr_t *ip, uintptr_t *fp, uintptr_t *sp)
{
#if defined(__x86_64__)
	*ip = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
	*fp = (uintptr_t)uc->uc_mcontext.gregs[REG_RBP];
	*sp = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
#elif defined(__aarch64__)
	*ip = (uintptr_t)uc->uc_mcontext.pc;
	*fp = (uintptr_t)uc->uc_mcontext.regs[29];
	*sp = (uintptr_t)uc->uc_mcontext.sp;
#else
	(void)uc;
	*ip = *fp = *sp = 0;		/* no walk: samples without stacks */
#endif
}

/*
 * Frame-pointer walk of the interrupted thread, async-signal-safe: it reads
 * only its own stack, between the interrupted stack pointer and the stack's
 * top, each frame record above the last, so a broken chain ends the walk
 * instead of faulting.
 */
/* not instrumented: the frame records sit between other frames' redzones */
__attribute__((no_sanitize_address)) static uint32_t walk(struct slot *s, const ucontext_t *uc)
{
	uintptr_t ip, fp, sp, hi = s->stack_hi;
	uint32_t n = 0;

	const struct sampler_code *c;

	context_regs(uc, &ip, &fp, &sp);
	if (!ip)
		return 0;
	c = sampler_code_find(ip);
	if (!c) {
		/* native code, whose frames we cannot walk: from the managed
		 * frame that registered the thread, which is below it */
		ip = s->anchor_ip;
		fp = s->anchor_fp;
	}
	s->frames[n++] = ip;
	/* a frameless leaf: its caller is the return address on top of the
	 * stack, and fp is still the caller's frame */
	if (c && c->frameless && sp + 8 <= hi && !(sp & 7) &&
	    sampler_code_contains(*(const uintptr_t *)sp))
		s->frames[n++] = *(const uintptr_t *)sp;
	while (n < SAMPLER_MAX_FRAMES && fp >= sp && fp + 16 <= hi && !(fp & 7)) {
		/* a frame record: { the caller's fp, the return address } */
		const uintptr_t *rec = (const uintptr_t *)fp;

		if (!rec[1])
			break;
		s->frames[n++] = rec[1];
		if (rec[0] <= fp)
			break;
		fp = rec[0];
	}
	return n;
}

static void on_sample_signal(int sig, siginfo_t *si, void *uc)
{
	struct slot *s = self;
	uint32_t want = SLOT_REQUESTED;
	int saved = errno;

	(void)sig, (void)si;
	/* acquire: pairs with nothing the sampler wrote but the request; the
	 * CAS makes WRITING exclusive with the sampler's reads of the frames */
	if (s && rp_cas_acq_rel(&s->state, &want, SLOT_WRITING)) {
		s->nframes = walk(s, uc);
		/* pairs with the acquire load of state in collect(): the frames
		 * are complete before DONE is seen */
		rp_store_release(&s->state, SLOT_DONE);
	}
	errno = saved;
}

static void install(void)
{
	struct sigaction sa;

	pid = getpid();
	sample_sig = SIGRTMIN + 3;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_sample_signal;
	/* interrupted system calls restart; sleeps may end early, which every
	 * demo loop tolerates (it recomputes what is due) */
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaction(sample_sig, &sa, NULL);
}

/* ---- registration ------------------------------------------------------------ */

__attribute__((noinline)) void sampler_add_self(bool managed)
{
	/* the caller's frame: its return address and its frame pointer, which
	 * the frame record of this call saved */
	uintptr_t ip = (uintptr_t)__builtin_return_address(0);
	uintptr_t fp = *(const uintptr_t *)__builtin_frame_address(0);
	uintptr_t hi = 0;
	pthread_attr_t a;
	struct slot *s = NULL;
	void *lo;
	size_t sz;
	uint32_t k;

	pthread_once(&once, install);
	if (!pthread_getattr_np(pthread_self(), &a)) {
		if (!pthread_attr_getstack(&a, &lo, &sz))
			hi = (uintptr_t)lo + sz;
		pthread_attr_destroy(&a);
	}
	pthread_mutex_lock(&lock);
	for (k = 0; k < MAX_SAMPLED && !s; k++)	/* beyond that, threads go unsampled */
		if (!slots[k].tid)
			s = &slots[k];
	if (s) {
		s->tid = (uint32_t)syscall(SYS_gettid);
		s->type = managed ? 2 : 1;
		s->stack_hi = hi;
		s->anchor_ip = ip;
		s->anchor_fp = fp;
		rp_store_relaxed(&s->state, SLOT_IDLE);	/* not requested: publishes nothing */
		if ((uint32_t)(s - slots) + 1 > nslots)
			nslots = (uint32_t)(s - slots) + 1;
	}
	pthread_mutex_unlock(&lock);
	/* the handler runs on this thread: the compiler must not publish the
	 * pointer before the slot is filled */
	rp_compiler_barrier();
	self = s;
}

void sampler_remove_self(void)
{
	struct slot *s = self;

	self = NULL;
	/* a handler that interrupts us from here on does nothing */
	rp_compiler_barrier();
	if (!s)
		return;
	pthread_mutex_lock(&lock);
	s->tid = 0;
	rp_store_relaxed(&s->state, SLOT_IDLE);	/* a pending request is dropped */
	pthread_mutex_unlock(&lock);
}

/* ---- the sampler's side: rounds ----------------------------------------------- */

struct req {
	struct slot *s;
	uint32_t tid, type;
};

/* Signals every idle registered thread; lists those with a request out. */
static uint32_t request(struct req *r)
{
	uint32_t k, n = 0;

	pthread_mutex_lock(&lock);
	for (k = 0; k < nslots; k++) {
		struct slot *s = &slots[k];
		uint32_t st;

		if (!s->tid)
			continue;
		st = rp_load_relaxed(&s->state);
		if (st == SLOT_IDLE) {
			/* publishes nothing: the handler writes, we only read later */
			rp_store_relaxed(&s->state, SLOT_REQUESTED);
			/* under the lock: the thread is registered, so alive */
			if (syscall(SYS_tgkill, pid, s->tid, sample_sig)) {
				rp_store_relaxed(&s->state, SLOT_IDLE);
				continue;
			}
		}
		r[n++] = (struct req){ s, s->tid, s->type };
	}
	pthread_mutex_unlock(&lock);
	return n;
}

static bool answered(const struct slot *s)
{
	/* pairs with the release store of DONE in on_sample_signal() */
	uint32_t st = rp_load_acquire(&s->state);

	return st != SLOT_REQUESTED && st != SLOT_WRITING;
}

/* Writes the sample of each thread that answered, counting them per slot in got. */
static uint32_t collect(const struct req *r, uint32_t n, uint8_t *got)
{
	uint64_t frames[SAMPLER_MAX_FRAMES];
	uint32_t k, i, m, written = 0;

	for (k = 0; k < n; k++) {
		struct slot *s = r[k].s;

		/* pairs with the release store of DONE in on_sample_signal() */
		if (rp_load_acquire(&s->state) != SLOT_DONE)
			continue;
		/* only managed frames, as the runtime's stack walk reports */
		for (i = m = 0; i < s->nframes && i < SAMPLER_MAX_FRAMES; i++)
			if (sampler_code_contains(s->frames[i]))
				frames[m++] = s->frames[i];
		/* pairs with the acquire of the handler's CAS: our reads of the
		 * frames are done before a new request lets it write them */
		rp_store_release(&s->state, SLOT_IDLE);
		clr_thread_sample(r[k].type, r[k].tid, frames, m);
		if (got && got[s - slots] < UINT8_MAX)
			got[s - slots]++;
		written++;
	}
	return written;
}

/* One sample of each registered thread that answers in time; how many. */
static uint32_t sample_round(uint64_t wait_ns, uint8_t *got)
{
	static struct req r[MAX_SAMPLED];	/* round_lock */
	uint64_t deadline;
	uint32_t n, k, written;

	pthread_mutex_lock(&round_lock);
	n = request(r);
	deadline = rp_clock_mono_ns() + wait_ns;
	for (;;) {
		for (k = 0; k < n && answered(r[k].s); k++)
			;
		if (k == n || rp_clock_mono_ns() >= deadline)
			break;
		rp_clock_sleep_ns(POLL_NS);
	}
	written = collect(r, n, got);
	pthread_mutex_unlock(&round_lock);
	return written;
}

/* Has every registered thread had `want` samples written? */
static bool all_sampled(const uint8_t *got, uint8_t want)
{
	bool all = true;
	uint32_t k;

	pthread_mutex_lock(&lock);
	for (k = 0; k < nslots && all; k++)
		all = !slots[k].tid || got[k] >= want;
	pthread_mutex_unlock(&lock);
	return all;
}

/*
 * Rounds until every registered thread was sampled twice (a thread that
 * answers a round late counts once, in the next): TraceEvent's thread-time
 * computer (dotnet-stack, the speedscope export) turns a sample into time
 * only at the thread's next one, so a thread sampled once shows nothing.
 */
static void first_samples(int session_id)
{
	uint64_t deadline = rp_clock_mono_ns() + FIRST_ROUNDS_NS;
	uint8_t got[MAX_SAMPLED] = { 0 };
	uint32_t rounds = 0, written = 0;

	rp_clock_sleep_ns(FIRST_ROUND_DELAY_NS);
	do {
		written += sample_round(FIRST_ROUND_WAIT_NS, got);
		rounds++;
	} while (!all_sampled(got, 2) && rp_clock_mono_ns() < deadline);
	fprintf(stderr, "sampler session %d: %u samples in %u rounds at enable%s\n", session_id,
		written, rounds, all_sampled(got, 2) ? "" : ", a thread sampled less than twice");
}

void sampler_enable(struct rp_provider *provider, int session_id, bool enabled,
		    uint64_t keywords, uint8_t level, const char *args, void *ctx)
{
	(void)provider, (void)keywords, (void)level, (void)args, (void)ctx;
	if (session_id < 0 || session_id >= RP_MAX_SESSIONS)
		return;
	pthread_mutex_lock(&lock);
	if (enabled)
		sessions |= 1ull << session_id;
	else
		sessions &= ~(1ull << session_id);
	pthread_cond_broadcast(&cond);
	pthread_mutex_unlock(&lock);
	/* the first samples before the callback returns, so before the session
	 * can stop: every registered thread is in even the shortest session */
	if (enabled)
		first_samples(session_id);
}

static void *sampler_main(void *arg)
{
	uint64_t next = 0, now;

	(void)arg;
	pthread_mutex_lock(&lock);
	while (!stop) {
		if (!sessions) {
			pthread_cond_wait(&cond, &lock);
			next = 0;
			continue;
		}
		pthread_mutex_unlock(&lock);
		/* on a fixed schedule, so that a sleep's overshoot shortens the
		 * next wait instead of lowering the rate; a round that ran late
		 * (a slow writer, a busy machine) restarts the schedule */
		now = rp_clock_mono_ns();
		if (!next || now > next + SAMPLER_PERIOD_NS)
			next = now;
		sample_round(ROUND_WAIT_NS, NULL);
		next += SAMPLER_PERIOD_NS;
		now = rp_clock_mono_ns();
		if (next > now)
			rp_clock_sleep_ns(next - now);
		pthread_mutex_lock(&lock);
	}
	pthread_mutex_unlock(&lock);
	return NULL;
}

int sampler_start(void)
{
	pthread_once(&once, install);
	if (pthread_create(&th, NULL, sampler_main, NULL))
		return -1;
	pthread_setname_np(th, "demo-sampler");
	started = true;
	return 0;
}

void sampler_stop(void)
{
	if (!started)
		return;
	pthread_mutex_lock(&lock);
	stop = true;
	pthread_cond_broadcast(&cond);
	pthread_mutex_unlock(&lock);
	pthread_join(th, NULL);
	started = false;
}
