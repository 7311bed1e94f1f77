// SPDX-License-Identifier: MIT
/*
 * Session start and stop, and the startup session configured from the
 * environment.
 *
 * Start order (invariant 4, Documentation/design.md): rings, output, drainer
 * thread, slot RUNNING, event masks, then the providers' enable callbacks, so
 * a callback that writes a burst finds a drainer already emptying the rings.
 *
 * Stop order: slot STOPPING and masks cleared (no new writer enters),
 * disable callbacks, quiesce (every writer that got in is out), collect the
 * threads' final sequence numbers, let the drainer empty the rings and end
 * the trace, then unmap. Nothing touches a session after it is freed.
 */
#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomics.h"
#include "clock.h"
#include "futex.h"
#include "ring_local.h"
#include "session.h"

#define DEFAULT_BUFFER (16ull << 20)
/* at least RP_RING_MIN_DATA_SIZE: the largest record fits every ring */
#define MIN_RING RP_RING_MIN_DATA_SIZE

static void cfg_free(struct session_cfg *c)
{
	uint32_t i;

	for (i = 0; i < c->nproviders; i++) {
		free((char *)c->providers[i].name);
		free((char *)c->providers[i].args);
	}
	free(c->providers);
	memset(c, 0, sizeof(*c));
}

static int cfg_copy(struct session_cfg *c, const struct rp_provider_config *p, uint32_t n)
{
	uint32_t i;

	c->providers = calloc(n ? n : 1, sizeof(*c->providers));
	if (!c->providers)
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		if (!p[i].name || !p[i].name[0]) {
			rp_set_error("provider %u has no name", i);
			c->nproviders = i;
			return -EINVAL;
		}
		c->providers[i] = p[i];
		c->providers[i].name = strdup(p[i].name);
		c->providers[i].args = p[i].args ? strdup(p[i].args) : NULL;
		c->nproviders = i + 1;
		if (!c->providers[i].name || (p[i].args && !c->providers[i].args))
			return -ENOMEM;
	}
	return 0;
}

/* Per-ring size: the budget split over CPUs, a power of two, >= 512 KiB
 * (a ring's max record is a quarter of it, and the largest record a write
 * makes, 67664 bytes, must fit). */
static uint64_t ring_size(uint64_t budget, uint32_t nr)
{
	uint64_t per = budget / nr, sz = MIN_RING;

	while (sz * 2 <= per)
		sz *= 2;
	return sz;
}

/*
 * Whether the session's writes may take the flat path (write.c): a Drop
 * session whose rings are reserved locally, timed by the TSC, with room
 * for a record of the largest payload that path copies.
 */
static bool flat_ok(const struct rp_session *s, const struct slot *sl)
{
	return !sl->block && sl->local_rings && rp_clock_source() == RP_CLOCK_TSC &&
	       rp_record_size(0, 0, RP_FLAT_MAX_PAYLOAD) <= s->shm->max_record;
}

/*
 * Every event the session would collect, enabled now or as rundown when it
 * stops, must be one its nettrace format can describe (an event neither
 * format can describe was refused at definition): else -EINVAL, with
 * rp_last_error() naming the first such event. Events defined later are
 * checked against the running session by rp_event_new().
 */
static int check_events(const struct rp_session *s)
{
	struct rp_event *ev;
	uint32_t i;

	for (i = 1; (ev = rp_event_by_index(i)); i++) {
		char why[160];

		if (!rp_event_matches(ev, &s->cfg, NULL) &&
		    !(s->rundown_keywords && !strcmp(ev->provider->name, RP_RUNDOWN_PROVIDER) &&
		      (!ev->desc.keywords || (ev->desc.keywords & s->rundown_keywords))))
			continue;
		if (!nt_event_desc_check(&ev->desc, s->format, why, sizeof(why)))
			continue;
		rp_set_error("nettrace V%d cannot carry event %u \"%s\" of provider \"%s\": %s "
			     "(use format %d)", s->format, ev->desc.event_id, ev->desc.name,
			     ev->desc.provider, why, s->format == NT_FORMAT_V5 ? 6 : 5);
		return -EINVAL;
	}
	return 0;
}

static void session_free(struct rp_session *s)
{
	if (!s)
		return;
	rp_shm_destroy(s->shm);
	if (s->own_fd && s->out_fd >= 0)
		close(s->out_fd);
	cfg_free(&s->cfg);
	pthread_mutex_destroy(&s->final_lock);
	free(s->finals);
	free(s);
}

RP_API struct rp_session *rp_session_start(const struct rp_session_opts *uopts)
{
	return rp_session_start_ex(uopts, 0);
}

void rp_session_release(struct rp_session *s)
{
	if (!s || !rp_load_relaxed(&s->held))
		return;
	rp_drainer_release(s);
	rp_enable_callbacks(s->held_from, &s->cfg, s->slot, true);
	s->held_from = NULL;
}

static struct rp_session *session_start(const struct rp_session_opts *uopts, unsigned int flags,
				       const struct rp_external_drainer *ext);

struct rp_session *rp_session_start_ex(const struct rp_session_opts *uopts, unsigned int flags)
{
	return session_start(uopts, flags, NULL);
}

struct rp_session *rp_session_start_external(const struct rp_session_opts *opts,
					     const struct rp_external_drainer *ext)
{
	return session_start(opts, 0, ext);
}

static struct rp_session *session_start(const struct rp_session_opts *uopts, unsigned int flags,
				       const struct rp_external_drainer *ext)
{
	struct rp_session_opts o = { 0 };
	struct rp_shm_opts so = { .sz = sizeof(so) };
	struct rp_provider *enabled;
	struct rp_session *s;
	struct stat st;
	int slot = -1, err, i;

	if (!uopts || uopts->sz < sizeof(size_t)) {
		rp_set_error("rp_session_start: options missing or sz not set");
		return errno = EINVAL, NULL;
	}
	memcpy(&o, uopts, uopts->sz < sizeof(o) ? uopts->sz : sizeof(o));
	if (o.format == 0)
		o.format = NT_FORMAT_V5;
	if (o.format != NT_FORMAT_V5 && o.format != NT_FORMAT_V6) {
		rp_set_error("nettrace format %d is not 5 or 6", o.format);
		return errno = EINVAL, NULL;
	}
	if (o.buffering != RP_BUFFERING_DROP && o.buffering != RP_BUFFERING_BLOCK) {
		rp_set_error("buffering mode %d is neither Drop (0) nor Block (1)", o.buffering);
		return errno = EINVAL, NULL;
	}
	if (o.kind != RP_SESSION_STREAMING && o.kind != RP_SESSION_DEFERRED) {
		rp_set_error("session kind %d is neither streaming (0) nor deferred (1)", o.kind);
		return errno = EINVAL, NULL;
	}
	if (o.buffering == RP_BUFFERING_BLOCK && o.kind != RP_SESSION_STREAMING) {
		rp_set_error("Block mode needs a continuous drainer; a deferred session has none "
			     "(use Drop, or a streaming session)");
		return errno = EINVAL, NULL;
	}
	if (o.nproviders && !o.providers) {
		rp_set_error("nproviders is %u but providers is NULL", o.nproviders);
		return errno = EINVAL, NULL;
	}
	if (ext && o.kind != RP_SESSION_STREAMING) {
		rp_set_error("a session drained by the agent is a streaming one");
		return errno = EINVAL, NULL;
	}
	if (!ext && !o.path && o.fd < 0) {
		rp_set_error("no output: set path or fd");
		return errno = EINVAL, NULL;
	}
	if (rp_clock_init()) {
		rp_set_error("cannot initialise the clock (RINGPIPE_CLOCK?)");
		return errno = EINVAL, NULL;
	}
	rp_writers_init();

	s = calloc(1, sizeof(*s));
	if (!s)
		return errno = ENOMEM, NULL;
	pthread_mutex_init(&s->final_lock, NULL);
	s->out_fd = -1;
	s->format = o.format;
	s->sp_interval_ms = o.sp_interval_ms ? o.sp_interval_ms : 1000;
	s->rundown_keywords = o.rundown_keywords;
	s->block_timeout_ns = (uint64_t)o.block_timeout_ms * 1000000ull;
	err = cfg_copy(&s->cfg, o.providers, o.nproviders);
	if (!err)
		err = check_events(s);
	if (err)
		goto err_free;

	s->ext = ext;
	if (ext) {
		/* no output here: the agent writes the trace */
	} else if (o.path) {
		s->out_fd = open(o.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (s->out_fd < 0) {
			err = -errno;
			rp_set_error("%s: %s", o.path, strerror(errno));
			goto err_free;
		}
		s->own_fd = true;
	} else {
		s->out_fd = o.fd;
	}
	if (!ext && fstat(s->out_fd, &st) < 0) {
		err = -errno;
		rp_set_error("output fd %d: %s", s->out_fd, strerror(errno));
		goto err_free;
	}
	s->is_socket = !ext && S_ISSOCK(st.st_mode);

	pthread_mutex_lock(&rp_control_lock);
	for (i = 0; i < RP_MAX_SESSIONS; i++) {
		if (rp_load_relaxed(&rp_slots[i].state) == SLOT_FREE) {
			slot = i;
			break;
		}
	}
	if (slot < 0) {
		pthread_mutex_unlock(&rp_control_lock);
		rp_set_error("%d sessions are running already", RP_MAX_SESSIONS);
		err = -EBUSY;
		goto err_free;
	}
	/* again, under the lock: an event defined since the first look saw no
	 * session to check itself against; from here on rp_event_new() sees
	 * this one (STARTING) and checks itself */
	err = check_events(s);
	/* the agent learns every event defined so far; rp_event_new() tells
	 * it of later ones from here on, under the same lock */
	if (!err && ext)
		err = rp_events_describe(ext);
	if (err) {
		pthread_mutex_unlock(&rp_control_lock);
		goto err_free;
	}
	rp_slots[slot].session = s;
	rp_store_relaxed(&rp_slots[slot].state, SLOT_STARTING);
	s->slot = slot;
	s->gen = rp_slot_next_gen(rp_slots[slot].gen);
	pthread_mutex_unlock(&rp_control_lock);

	so.nr_rings = rp_shm_possible_cpus();
	so.data_size = ring_size(o.buffer_bytes ? o.buffer_bytes : DEFAULT_BUFFER, so.nr_rings);
	so.mode = o.buffering == RP_BUFFERING_BLOCK ? RP_SHM_MODE_BLOCK : RP_SHM_MODE_DROP;
	so.wake_watermark = (uint32_t)(so.data_size / 4);
	s->shm = rp_shm_create(&so);
	if (!s->shm) {
		err = -errno;
		rp_set_error("cannot create the rings: %s", strerror(errno));
		goto err_slot;
	}
	for (uint32_t k = 0; ext && k < s->shm->nr_rings; k++)
		s->shm->rings[k].consumer_elsewhere = true;
	s->process_id = o.process_id;
	{
		struct timespec now;

		s->sync_ticks = rp_clock_now();
		clock_gettime(CLOCK_REALTIME, &now);
		s->sync_unix_ns = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
	}
	s->deferred = o.kind == RP_SESSION_DEFERRED;
	s->held = (flags & RP_START_HELD) && !s->deferred;
	if (ext) {
		const struct rp_shm_session *h = rp_shm_header(s->shm);

		rp_block_reset(s->slot, s->block_timeout_ns, h->ring_data_size, h->nr_rings);
		err = ext->ready(ext->ctx, s);
		if (err)
			goto err_slot;
	} else if (!s->deferred) {
		err = rp_drainer_start(s);
		if (err)
			goto err_slot;
	}
	rp_writers_attach(s);

	pthread_mutex_lock(&rp_control_lock);
	rp_slots[slot].session = s;
	rp_slots[slot].shm = s->shm;
	rp_slots[slot].block = o.buffering == RP_BUFFERING_BLOCK;
	rp_store_relaxed(&rp_slots[slot].output_error, 0);
	rp_slots[slot].local_rings = rp_ring_local_ok(rp_shm_nr_rings(s->shm));
	rp_store_relaxed(&rp_slots[slot].gen, s->gen);
	/* pairs with the writers' load_acquire of the state: the rings and
	 * the generation are visible before any writer uses the slot */
	rp_store_release(&rp_slots[slot].state, SLOT_RUNNING);
	/* pairs with the flat write's load_acquire of flat_gen, as the state
	 * above pairs with the full write's */
	if (flat_ok(s, &rp_slots[slot]))
		rp_store_release(&rp_slots[slot].flat_gen, s->gen);
	enabled = rp_enable_session(slot, &s->cfg, true);
	pthread_mutex_unlock(&rp_control_lock);
	if (s->held) {
		s->held_from = enabled;
		return s;
	}
	rp_enable_callbacks(enabled, &s->cfg, slot, true);
	return s;

err_slot:
	if (s->drainer_started)
		rp_drainer_stop(s);
	pthread_mutex_lock(&rp_control_lock);
	rp_slots[slot].session = NULL;
	rp_store_relaxed(&rp_slots[slot].state, SLOT_FREE);
	pthread_mutex_unlock(&rp_control_lock);
err_free:
	session_free(s);
	errno = -err;
	return NULL;
}

struct rp_session *rp_remote_session_start(struct rp_shm *shm, const struct rp_remote_opts *o)
{
	struct rp_session *s;
	struct stat st;
	int err;

	if (!shm || !o || !o->lookup || o->out_fd < 0 ||
	    (o->format != NT_FORMAT_V5 && o->format != NT_FORMAT_V6))
		return errno = EINVAL, NULL;
	if (rp_clock_init())
		return errno = EINVAL, NULL;
	if (fstat(o->out_fd, &st) < 0)
		return NULL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return errno = ENOMEM, NULL;
	pthread_mutex_init(&s->final_lock, NULL);
	s->slot = -1;
	s->shm = shm;
	s->format = o->format;
	s->process_id = o->process_id;
	s->sync_ticks = o->sync_ticks;
	s->sync_unix_ns = o->sync_unix_ns;
	s->tick_freq = o->tick_freq;
	s->out_fd = o->out_fd;
	s->is_socket = S_ISSOCK(st.st_mode);
	s->sp_interval_ms = 1000;
	s->idle_sleep_ns = o->idle_sleep_ns;
	s->size_notify_bytes = o->size_notify_bytes;
	s->size_fd = o->size_fd;
	s->remote_lookup = o->lookup;
	s->remote_ctx = o->lookup_ctx;
	err = rp_drainer_start(s);
	if (err) {
		s->shm = NULL;	/* still the caller's */
		session_free(s);
		errno = -err;
		return NULL;
	}
	return s;
}

int rp_remote_session_end(struct rp_session *s, const struct thread_final *finals, size_t n,
			  struct rp_session_stats *stats)
{
	int err;

	if (!s)
		return -EINVAL;
	for (; n; n--, finals++)
		rp_session_add_final(s, finals->tid, finals->seq);
	err = rp_drainer_stop(s);
	if (stats)
		rp_session_stats(s, stats);
	session_free(s);
	return err;
}

void rp_session_hold_drain(struct rp_session *s, bool hold)
{
	/* the drainer reads it every pass; it orders nothing (drain.c) */
	rp_store_relaxed(&s->drain_hold, hold ? 1 : 0);
}

int rp_session_rotate(struct rp_session *s, int new_fd)
{
	int old;

	if (!s || new_fd < 0)
		return -EINVAL;
	if (!s->drainer_started || s->deferred || rp_load_acquire(&s->held) ||
	    rp_load_acquire(&s->stop_requested))
		return -EBUSY;
	old = s->out_fd;
	s->rotate_fd = new_fd;
	s->rotate_err = 0;
	/* pairs with the drainer's load_acquire between passes: it sees
	 * rotate_fd */
	rp_store_release(&s->rotate_req, 1);
	rp_drainer_kick(s);
	/* pairs with the drainer's store_release once switched: its
	 * rotate_err and out_fd are seen. A pass is milliseconds; the wait
	 * is as long as finishing the old stream on its output takes */
	while (rp_load_acquire(&s->rotate_req))
		rp_futex_wait(&s->rotate_req, 1, 10000000);
	if (s->out_fd != new_fd)
		return s->rotate_err ? s->rotate_err : -EIO;
	if (s->own_fd && old >= 0)
		close(old);
	return 0;
}

/*
 * The end of a session, before anything is disabled: other threads' events
 * stop reaching it (ENDING), the stopping callbacks run on this thread, whose
 * events go to this session only, then rundown. A deferred session's drainer
 * starts first, so these writes find room as it drains.
 */
static int run_stopping_hooks(struct rp_session *s, struct slot *sl, int *hooks_err)
{
	struct rp_stopping_hook *hooks = NULL;
	size_t n = 0, got, i;
	int err = 0;

	if (s->deferred) {
		err = rp_drainer_start(s);
		if (err)
			return err;
	}
	pthread_mutex_lock(&rp_control_lock);
	/* the flat write first (it does not read the state), then: pairs
	 * with the writers' load_acquire of the state: a writer that sees
	 * ENDING skips the session */
	rp_store_relaxed(&sl->flat_gen, RP_SLOT_NOT_FLAT);
	rp_store_release(&sl->state, SLOT_ENDING);
	/* a session stopped while still held (its IPC reply could not be
	 * sent) never started for anyone: no end, and its drainer would not
	 * make room for one. Counted, then taken: no provider enables an
	 * ENDING session, so the count cannot grow in between. */
	if (!rp_load_relaxed(&s->held))
		n = rp_stopping_hooks(s->slot, &s->cfg, s->rundown_keywords, NULL, 0);
	pthread_mutex_unlock(&rp_control_lock);
	if (!n)
		return 0;
	hooks = malloc(n * sizeof(*hooks));
	if (!hooks) {
		/* the session still stops and its trace ends; the caller hears
		 * that the callbacks did not run */
		rp_set_error("rp_session_stop: no memory for the %zu stopping callbacks", n);
		*hooks_err = -ENOMEM;
		return 0;
	}
	pthread_mutex_lock(&rp_control_lock);
	got = rp_stopping_hooks(s->slot, &s->cfg, s->rundown_keywords, hooks, n);
	pthread_mutex_unlock(&rp_control_lock);
	if (got < n)
		n = got;
	if (!rp_thread_begin_ending(s->slot)) {
		for (i = 0; i < n; i++)
			hooks[i].provider->stopping_cb(hooks[i].provider, s->slot,
						       hooks[i].keywords, hooks[i].level,
						       hooks[i].provider->cb_ctx);
		rp_thread_end_ending();
	}
	free(hooks);
	return 0;
}

RP_API int rp_session_stop(struct rp_session *s)
{
	struct rp_provider *enabled;
	struct slot *sl;
	int err, hooks_err = 0;

	if (!s)
		return -EINVAL;
	sl = &rp_slots[s->slot];
	err = run_stopping_hooks(s, sl, &hooks_err);
	pthread_mutex_lock(&rp_control_lock);
	/* the flat write first, then: pairs with the writers' load_acquire
	 * of the state: a writer that sees STOPPING skips the session (and
	 * stop's quiesce waits for the ones that did not, flat ones too) */
	rp_store_relaxed(&sl->flat_gen, RP_SLOT_NOT_FLAT);
	rp_store_release(&sl->state, SLOT_STOPPING);
	enabled = rp_enable_session(s->slot, &s->cfg, false);
	rp_rundown_disable(s->slot);
	pthread_mutex_unlock(&rp_control_lock);
	rp_enable_callbacks(enabled, &s->cfg, s->slot, false);

	/* parked producers give up (counted) so the quiesce below ends */
	if (sl->block)
		rp_block_abort(s->slot);
	rp_writers_quiesce();
	rp_writers_collect_finals(s);
	if (!err)
		err = s->ext ? s->ext->stop(s->ext->ctx, s) : rp_drainer_stop(s);

	pthread_mutex_lock(&rp_control_lock);
	sl->session = NULL;
	sl->shm = NULL;
	sl->block = false;
	/* pairs with the load_acquire of the state by the next session start
	 * and by provider.c's scans: the slot's fields are cleared first */
	rp_store_release(&sl->state, SLOT_FREE);
	pthread_mutex_unlock(&rp_control_lock);
	session_free(s);
	return err ? err : hooks_err;
}

RP_API int rp_session_id(const struct rp_session *s)
{
	return s ? s->slot : -1;
}

/* struct rp_session_stats as callers built against 0.2 know it: six drop
 * reasons. Its sz is below the current struct's, which is how they are told
 * apart. */
struct session_stats_v2 {
	size_t sz;
	uint64_t events_written;
	uint64_t bytes_written;
	uint64_t dropped[6];
	uint64_t corrupt_records;
	uint64_t late_events;
	uint64_t drainer_wakeups;
	uint64_t sequence_points;
	int output_error;
	uint64_t skipped_bytes;
	uint64_t drainer_moves;
	uint64_t drainer_deferrals;
};
_Static_assert(sizeof(struct session_stats_v2) < sizeof(struct rp_session_stats) &&
	       sizeof(struct rp_session_stats) - sizeof(struct session_stats_v2) ==
	       sizeof(uint64_t) * (RP_DROP_REASON_NR - 6),
	       "the current stats differ from 0.2's by the drop reasons added");

RP_API int rp_session_stats(const struct rp_session *s, struct rp_session_stats *ust)
{
	struct rp_session_stats st = { 0 };
	uint32_t i, r;

	if (!s || !ust || ust->sz < sizeof(size_t))
		return -EINVAL;
	st.sz = ust->sz;
	st.events_written = rp_load_relaxed(&s->stats.events_written);
	st.bytes_written = rp_load_relaxed(&s->stats.bytes_written);
	st.corrupt_records = rp_load_relaxed(&s->stats.corrupt);
	st.late_events = rp_load_relaxed(&s->stats.late);
	st.drainer_wakeups = rp_load_relaxed(&s->stats.wakeups);
	st.sequence_points = rp_load_relaxed(&s->stats.sps);
	st.drainer_moves = rp_load_relaxed(&s->stats.moves);
	st.drainer_deferrals = rp_load_relaxed(&s->stats.deferrals);
	st.output_error = rp_load_relaxed(&s->output_error);
	if (s->shm) {
		uint64_t drops[RP_DROP_NR] = { 0 };

		/* the counters producers keep in shared memory, as far as they
		 * are plausible (ring.h, rp_shm_drops()) */
		rp_shm_drops(s->shm, drops);
		for (i = 0; i < RP_DROP_REASON_NR && i < RP_DROP_NR; i++)
			st.dropped[i] = drops[i];
		/* and the rings' own figures: what the reader found corrupt and
		 * what it gave up, counted in this process */
		for (r = 0; r < rp_shm_nr_rings(s->shm); r++) {
			const struct rp_ring *ring = rp_shm_ring(s->shm, r);

			st.corrupt_records += rp_ring_corrupt_count(ring) + rp_ring_stale_count(ring);
			st.skipped_bytes += rp_ring_skipped_bytes(ring);
		}
	}
	/* the drainer's own count: consumed after the output failed */
	st.dropped[RP_DROP_REASON_OUTPUT] += rp_load_relaxed(&s->stats.output_lost);
	if (ust->sz < sizeof(st)) {
		/* a caller built before RP_DROP_REASON_TIMEOUT, whose dropped[]
		 * has six reasons; it cannot have asked for a time bound, but
		 * should one fire, its drops are a give-up like aborted */
		struct session_stats_v2 o;

		memcpy(&o, &st, offsetof(struct session_stats_v2, dropped));
		memcpy(o.dropped, st.dropped, sizeof(o.dropped));
		o.dropped[RP_DROP_REASON_ABORTED] += st.dropped[RP_DROP_REASON_TIMEOUT];
		memcpy(&o.corrupt_records, &st.corrupt_records,
		       sizeof(o) - offsetof(struct session_stats_v2, corrupt_records));
		memcpy(ust, &o, ust->sz < sizeof(o) ? ust->sz : sizeof(o));
		return 0;
	}
	memcpy(ust, &st, sizeof(st));
	return 0;
}
