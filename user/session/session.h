/* SPDX-License-Identifier: MIT */
/*
 * Sessions, providers, the write path and the drainer: shared internals.
 *
 * Lifetimes (invariant 7, Documentation/design.md). A session occupies one of
 * 64 slots. Writers find sessions through the bit mask in each event and the
 * slot table, never through a pointer they keep. A writer announces itself in
 * its thread's `in_write` word before it reads a slot's state, and stop waits
 * until every registered thread is outside a write after it marked the slot
 * STOPPING, so no writer touches rings that are being unmapped. The announce
 * costs no fence on the writer's side: stop issues
 * membarrier(PRIVATE_EXPEDITED), which orders every running thread's store
 * before stop reads it (writers fall back to a full fence where the kernel
 * lacks membarrier).
 */
#ifndef RINGPIPE_SESSION_H
#define RINGPIPE_SESSION_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "util/error.h"
#include "nettrace/nettrace.h"
#include "producer/park.h"
#include "core/ring.h"
#include "ringpipe/ringpipe.h"
#include "core/slots.h"
#include "producer/threads.h"


struct rp_provider {
	char *name;
	uint8_t guid[16];
	bool has_guid;
	rp_enable_fn enable_cb;
	rp_session_stopping_fn stopping_cb;
	void *cb_ctx;
	uint64_t enabled_sessions;	/* under the control lock */
	struct rp_event *events;	/* list, under the control lock */
	struct rp_provider *next;
	bool ue;			/* publishes user_events tracepoints too */
};

struct rp_event {
	struct rp_event_hot hot;	/* must stay first: rp_event_enabled() */
	uint32_t index;			/* global, >= 1: the record's meta_id */
	struct rp_provider *provider;
	struct nt_event_desc desc;	/* strings and fields owned */
	struct rp_event *next;		/* in provider->events */
	struct rp_ue_event *ue;		/* its user_events tracepoint, or NULL */
};

struct session_cfg {
	struct rp_provider_config *providers;	/* strings owned */
	uint32_t nproviders;
};

struct thread_final {
	uint32_t tid;
	uint32_t seq;
};

/*
 * A session whose drainer is the host agent, in another process
 * (agent_join.c): the rings are handed over instead of drained here.
 */
struct rp_external_drainer {
	/* Under rp_control_lock, for every event defined before the session
	 * and every one defined while it runs, before any record can name it:
	 * the agent learns what the record's meta_id means. An error ends
	 * nothing here: the agent counts records it cannot name as corrupt. */
	int (*describe)(void *ctx, const struct rp_event *ev);
	/* The rings exist and no writer can reach them yet: hand them over. */
	int (*ready)(void *ctx, struct rp_session *s);
	/* Every writer is out and s->finals holds their last numbers: the
	 * agent drains the rest. Returns once it has, or within its bound. */
	int (*stop)(void *ctx, struct rp_session *s);
	void *ctx;
};

/* The other side: rings of another process drained here (the agent). Their
 * events are named by lookup, not by this process's registry. */
struct rp_remote_opts {
	int format;			/* NT_FORMAT_V5 or NT_FORMAT_V6 */
	uint32_t process_id;		/* every event's pid: the host pid */
	uint64_t sync_ticks, sync_unix_ns;	/* the process's, from READY */
	uint64_t tick_freq;		/* the process's clock */
	int out_fd;			/* the trace goes here (not closed) */
	/* an idle drainer looks again after this long, at most (0: 20 ms):
	 * the bound of a wake the process's writers did not send */
	uint64_t idle_sleep_ns;
	/* when the trace's current file has grown this many bytes (0: never),
	 * the drainer writes 1 to size_fd (an eventfd), once per file: the
	 * owner rotates by size, to within a drainer pass of it, however
	 * fast the file grows */
	uint64_t size_notify_bytes;
	int size_fd;
	const struct nt_event_desc *(*lookup)(void *ctx, uint32_t index);
	void *lookup_ctx;
};

struct rp_session {
	int slot;			/* -1: a remote session (no slot here) */
	uint32_t gen;
	struct session_cfg cfg;
	struct rp_shm *shm;
	int format;
	uint32_t process_id;		/* the trace header's; 0: getpid() */
	/* the trace's clock sync, taken before any writer can reach the
	 * session: a held or deferred session's trace starts later than its
	 * first events, which must not be older than the sync point */
	uint64_t sync_ticks, sync_unix_ns;
	int out_fd;
	bool own_fd;
	bool is_socket;
	bool deferred;			/* RP_SESSION_DEFERRED: drained only at stop */
	int held;			/* atomic: started held, nothing written yet */
	/* atomic: rp_session_hold_drain(); not drained until released */
	int drain_hold;
	/* enable callbacks held back until rp_session_release(): the
	 * providers from this one on (rp_enable_session()'s head) */
	struct rp_provider *held_from;
	uint32_t sp_interval_ms;
	uint64_t block_timeout_ns;	/* Block: the bound on one wait; 0: none */
	uint64_t rundown_keywords;
	const struct rp_external_drainer *ext;	/* drained by the agent */
	/* a remote session: how records' meta_ids are named, the clock */
	const struct nt_event_desc *(*remote_lookup)(void *ctx, uint32_t index);
	void *remote_ctx;
	uint64_t tick_freq;		/* 0: this process's clock */
	uint64_t idle_sleep_ns;		/* 0: drain.c's IDLE_SLEEP_NS */
	uint64_t size_notify_bytes;	/* rp_remote_opts' */
	int size_fd;			/* rp_remote_opts' */

	/* drainer */
	pthread_t drainer;
	bool drainer_started;
	void *drainer_ctx;		/* struct drainer, drain.c */
	int stop_requested;		/* atomic: stop asked the drainer to finish */
	int output_error;		/* atomic */
	/* An external writer (the BPF bridge of ringpipe record) writes
	 * events stamped before they reach the rings. It publishes, in ticks,
	 * a time before which it has written everything; the drainer merges
	 * nothing younger. 0: no such writer. Store with release after the
	 * writes; the drainer loads it with acquire before it reads the rings. */
	uint64_t ext_horizon;
	struct drain_stats {
		uint64_t events_written;
		uint64_t bytes_written;
		uint64_t corrupt;
		uint64_t late;
		uint64_t wakeups;
		uint64_t moves;		/* step_aside() in drain.c */
		uint64_t deferrals;	/* defer_for() in drain.c */
		uint64_t sps;
		uint64_t output_lost;	/* events the drainer could not get out
					 * after its output failed */
	} stats;			/* written by the drainer, read with relaxed atomics */

	/* rotation (rp_session_rotate()): the caller stores rotate_fd, then
	 * rotate_req with release; the drainer switches between passes and
	 * clears rotate_req with release, rotate_err saying how it went */
	uint32_t rotate_req;		/* atomic */
	int rotate_fd;
	int rotate_err;

	/* final sequence numbers of threads, handed to the drainer at stop */
	pthread_mutex_t final_lock;
	struct thread_final *finals;
	size_t nfinals, capfinals;
};


/* provider.c */
struct rp_event *rp_event_by_index(uint32_t index);
bool rp_event_matches(const struct rp_event *ev, const struct session_cfg *cfg,
		      const struct rp_provider_config **which);
/* Under rp_control_lock: set or clear a session's bit in every matching
 * event and provider. Returns the list's head as of then, for
 * rp_enable_callbacks(). */
struct rp_provider *rp_enable_session(int slot, const struct session_cfg *cfg, bool enable);
/* Outside the lock: the enable callback of every provider from `from` on
 * (a head rp_enable_session() returned) that cfg names, however many. */
void rp_enable_callbacks(struct rp_provider *from, const struct session_cfg *cfg, int slot,
			 bool enable);

/* Under rp_control_lock, at stop: the providers whose stopping callback must
 * run for the session, in order, the rundown provider last (enabled for this
 * session with rundown_keywords when they are not 0). */
struct rp_stopping_hook {
	struct rp_provider *provider;
	uint64_t keywords;
	uint8_t level;
};
/* Returns how many there are; fills hooks[] with the first max of them. */
size_t rp_stopping_hooks(int slot, const struct session_cfg *cfg, uint64_t rundown_keywords,
			 struct rp_stopping_hook *hooks, size_t max);
/* Under rp_control_lock: clears the session's bit from the rundown events. */
void rp_rundown_disable(int slot);

/* In a forked child: no session survives, every event is disabled. */
void rp_events_disable_all(void);

/* write.c: test hook; producers never wake the drainer (it then finds
 * their records only when its idle timeout expires). */
extern int rp_test_no_drainer_wake;

/* drain.c */
/* Test hooks: the drainer sleeps this long after every pass (0: never);
 * pauses, or freezes (neither drains; neither ends a producer's wait). */
extern uint64_t rp_drain_throttle_ns;
extern int rp_drain_pause;
extern int rp_drain_freeze;
/* looks the drainers took while paused, frozen or held: a test that pauses
 * knows a drainer is between passes once this moved twice */
extern uint64_t rp_drain_paused_looks;
int rp_drainer_start(struct rp_session *s);
int rp_drainer_stop(struct rp_session *s);
void rp_drainer_release(struct rp_session *s);

/* session.c: start with the output held and the enable callbacks deferred,
 * so a caller can answer on the output socket first (the IPC server replies
 * OK, then the trace follows); rp_session_release() lets both go. */
#define RP_START_HELD 0x1u
struct rp_session *rp_session_start_ex(const struct rp_session_opts *opts, unsigned int flags);
void rp_session_release(struct rp_session *s);
void rp_drainer_kick(struct rp_session *s);
struct rp_session *rp_session_start_external(const struct rp_session_opts *opts,
					     const struct rp_external_drainer *ext);

/* A remote session over shm (taken over: destroyed at the end), drained to
 * o->out_fd from now on; NULL with errno. */
struct rp_session *rp_remote_session_start(struct rp_shm *shm, const struct rp_remote_opts *o);
/* Its end: the last sequence numbers (may be none, when the process died),
 * drained to the end, trace finished. Returns the output's error or 0, and
 * frees s. stats (may be NULL) receives the session's figures first. */
int rp_remote_session_end(struct rp_session *s, const struct thread_final *finals, size_t n,
			  struct rp_session_stats *stats);

/*
 * Stops the draining of s while hold is true, and drains at full speed
 * again when it is false: the agent's egress is full, and a Block
 * session's producers must park (as they do on a full ring) rather than
 * have their events dropped further down. Producers wait for as long as
 * the hold lasts: a drainer that frees nothing is not taken for dead.
 * Stopping the session drains it whatever the hold. A held session should
 * not be rotated: rp_session_rotate() waits for the next pass.
 */
void rp_session_hold_drain(struct rp_session *s, bool hold);

/*
 * Rotation: the trace goes on in new_fd, a stream of its own (header,
 * every event type defined again as it is next used, sequence numbers
 * counted afresh per thread), and the current one is finished (its last
 * sequence point, the end mark) and flushed first, so each file reads
 * alone and together they hold every event exactly once, with the losses
 * in the file where they happened. The clock anchor stays the session's,
 * so timestamps of all the files compare. Returns once the drainer has
 * switched: 0, and the old descriptor is then the caller's to close (or
 * closed here when the session opened it) while new_fd is the session's;
 * or, without a switch, new_fd still the caller's: -EBUSY for a session
 * that is held, deferred, stopping or has no drainer, -EINVAL, or why the
 * new output could not be set up. An error finishing the old stream is
 * the session's output error, as any other. Not concurrently with stop.
 * The stats' bytes_written go on counting across files.
 */
int rp_session_rotate(struct rp_session *s, int new_fd);

/* agent_join.c: once the process has a provider, look for the host agent
 * (Documentation/agent.md); the agent itself stays out. */
void rp_agent_join_start(void);
void rp_agent_join_disable(void);

/* provider.c: under rp_control_lock, ext->describe() for every event. */
int rp_events_describe(const struct rp_external_drainer *ext);

#endif /* RINGPIPE_SESSION_H */
