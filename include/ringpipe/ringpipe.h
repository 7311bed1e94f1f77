/* SPDX-License-Identifier: MIT */
/*
 * ringpipe public API.
 *
 * An application (or a managed runtime) defines providers and their events,
 * then writes events. A session collects the enabled events through per-CPU
 * shared-memory rings and a drainer thread that serializes them to nettrace
 * (the format TraceEvent, PerfView and dotnet-trace read), to a file or to a
 * stream socket.
 *
 * Conventions (Documentation/naming.md): functions are rp_<object>_<verb>,
 * handles are opaque, options structs carry their size in the first field so
 * they can grow, errors are negative errno values and constructors that
 * return NULL set errno. Only symbols marked RP_API are exported from
 * libringpipe.so (user/libringpipe.map lists them).
 */
#ifndef RINGPIPE_RINGPIPE_H
#define RINGPIPE_RINGPIPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RP_API __attribute__((visibility("default")))

#define RP_VERSION_MAJOR 0
#define RP_VERSION_MINOR 3
#define RP_VERSION_PATCH 0

/* The library's version as "MAJOR.MINOR.PATCH". */
RP_API const char *rp_version(void);

/* ---- schemas ----------------------------------------------------------- */

/* Field types; the values are nettrace's type codes. rp_event_new() refuses
 * any other code (nettrace's Decimal, 15, and the V6-only 20 and 21 too). */
enum rp_type {
	RP_TYPE_OBJECT = 1,	/* nested struct: `fields` lists its members */
	RP_TYPE_BOOL = 3,	/* 4 bytes, 0 or 1 */
	RP_TYPE_CHAR16 = 4,	/* one UTF-16 code unit */
	RP_TYPE_I8 = 5,
	RP_TYPE_U8 = 6,
	RP_TYPE_I16 = 7,
	RP_TYPE_U16 = 8,
	RP_TYPE_I32 = 9,
	RP_TYPE_U32 = 10,
	RP_TYPE_I64 = 11,
	RP_TYPE_U64 = 12,
	RP_TYPE_F32 = 13,
	RP_TYPE_F64 = 14,
	RP_TYPE_DATETIME = 16,	/* FILETIME: 100 ns ticks since 1601, 8 bytes */
	RP_TYPE_GUID = 17,	/* 16 bytes, .NET System.Guid layout */
	RP_TYPE_STRING = 18,	/* UTF-16LE, NUL-terminated */
	RP_TYPE_ARRAY = 19,	/* u16 element count, then the elements */
};

struct rp_field {
	const char *name;
	uint8_t type;		/* enum rp_type */
	uint8_t elem_type;	/* RP_TYPE_ARRAY: the element type */
	uint16_t nfields;	/* RP_TYPE_OBJECT, or an array of objects */
	const struct rp_field *fields;
};

/* ---- providers and events ---------------------------------------------- */

struct rp_provider;
struct rp_event;

/*
 * Called when a session enables or disables the provider: session_id is the
 * session's slot (0..63), keywords and level what the session asked for, and
 * args its "key=value;key=value" filter arguments (NULL when none). A
 * session's drainer is already running when its enable callback fires, so a
 * callback may write a burst of events (a heap walk).
 */
typedef void (*rp_enable_fn)(struct rp_provider *provider, int session_id, bool enabled,
			     uint64_t keywords, uint8_t level, const char *args, void *ctx);

/*
 * Called on the thread that stops a session, once for each provider the
 * session enables, after the session stopped taking other threads' events and
 * before its last events are drained: the place for data that belongs to the
 * end of a session (cumulative counters, rundown). While it runs, the
 * calling thread's events go to the stopping session only, and when a ring is
 * full the thread waits for that session's drainer instead of dropping; it
 * never queues behind Block-mode producers. keywords and level are what the
 * stopping session enabled the provider with.
 *
 * Rundown: a session started with rundown_keywords != 0 also enables the
 * provider named RP_RUNDOWN_PROVIDER (if one exists) with those keywords at
 * level 5, for itself only and only while stopping; that provider's stopping
 * callback runs last and should write the rundown.
 */
typedef void (*rp_session_stopping_fn)(struct rp_provider *provider, int session_id,
				       uint64_t keywords, uint8_t level, void *ctx);

#define RP_RUNDOWN_PROVIDER "Microsoft-Windows-DotNETRuntimeRundown"

struct rp_provider_opts {
	size_t sz;			/* sizeof(struct rp_provider_opts) */
	const char *name;		/* e.g. "MyCompany-MyService" */
	const uint8_t *guid;		/* 16 bytes, or NULL: derived from the name */
	rp_enable_fn enable_cb;
	void *cb_ctx;			/* passed to both callbacks */
	rp_session_stopping_fn stopping_cb;
};

/*
 * Providers and their events live until the process exits. Refused (NULL,
 * errno EINVAL, rp_last_error() says why): no name, or one over 255 bytes.
 *
 * The GUID: nettrace V6 carries it in every event's metadata. V5 has no
 * place for one: readers derive a provider's GUID from its name (the CLR
 * providers' fixed GUIDs, else the EventSource name hash), so in a V5 trace
 * the events of a provider whose explicit GUID is not the name's are shown
 * under the name's GUID. They are written all the same.
 */
RP_API struct rp_provider *rp_provider_new(const struct rp_provider_opts *opts);

struct rp_event_opts {
	size_t sz;			/* sizeof(struct rp_event_opts) */
	uint32_t id;			/* event id within the provider, <= 65535 */
	const char *name;		/* "" for runtime events known by id */
	uint8_t version;
	uint8_t level;			/* 1 critical .. 5 verbose; 0 always */
	uint8_t opcode;
	uint64_t keywords;
	uint16_t nfields;
	const struct rp_field *fields;	/* copied */
};

/*
 * Defines an event. Everything it accepts can be written: a schema that the
 * nettrace writer cannot describe is refused here (NULL, errno EINVAL,
 * rp_last_error() naming the event, the field by its path, "Outer.Inner" or
 * "Items[]", and the reason), never lost later. Refused:
 *   - an id over 65535; nfields > 0 with fields NULL; a field without a name;
 *   - a type code that is not an enum rp_type value (0, 2, 15, 20 and up),
 *     as a field's type or as an array's element type;
 *   - an array of arrays (one element type per array);
 *   - an object, or an array's element object, without members;
 *   - members nested more than 8 levels below the event's own fields;
 *   - metadata over the limit of both nettrace formats (V6: 65535 bytes per
 *     metadata record, strings in UTF-8; V5: 1 MiB, strings in UTF-16).
 * An event only one format can describe (metadata between the two limits)
 * is accepted, but refused while a running session of the other format
 * collects it; a session of that format that would collect it refuses to
 * start (rp_session_start).
 */
RP_API struct rp_event *rp_event_new(struct rp_provider *provider, const struct rp_event_opts *opts);

/* The first member of every event: the sessions that enable it. */
struct rp_event_hot {
	uint64_t sessions;
};

/* One load and a branch: is any session collecting this event? */
static inline bool rp_event_enabled(const struct rp_event *ev)
{
	return __atomic_load_n(&((const struct rp_event_hot *)(const void *)ev)->sessions,
			       __ATOMIC_RELAXED) != 0;
}

#define RP_WRITE_STACK 0x1u	/* capture the caller's stack (frame pointers) */
/* the event's stack is opts->stack[0..nstack), innermost frame first (at
 * most RP_WRITE_MAX_GIVEN_FRAMES are kept): for events describing another
 * context, such as CPU samples captured by BPF. Wins over RP_WRITE_STACK. */
#define RP_WRITE_STACK_GIVEN 0x2u
#define RP_WRITE_MAX_GIVEN_FRAMES 256u
/* A write that no session took returns RP_WRITE_NO_SESSION instead of 0, so
 * that a producer can keep its own ledger: 0 is then "in the trace of every
 * session that took it", never "nobody took it" (see rp_event_writev). */
#define RP_WRITE_REPORT_NO_SESSION 0x4u

/* What a write with RP_WRITE_REPORT_NO_SESSION returns when no session took
 * it: the event is enabled by none, or only by sessions that were stopping
 * (a positive value: not an error, and not a capture). */
#define RP_WRITE_NO_SESSION 1

struct rp_write_opts {
	size_t sz;			/* sizeof(struct rp_write_opts) */
	const uint8_t *activity_id;	/* 16 bytes or NULL */
	const uint8_t *related_activity_id;
	uint32_t flags;			/* RP_WRITE_* */
	const uint64_t *stack;		/* RP_WRITE_STACK_GIVEN: instruction pointers */
	uint32_t nstack;
	/* the OS thread the event is about when it is not the writer: a
	 * runtime's sampler writing a ThreadSample for each thread it sampled.
	 * Readers show the event on that thread; the writer stays its capture
	 * thread, whose sequence numbers count losses. 0: the writer. */
	uint32_t thread_id;
};

/*
 * Writes one event into every session that enables it. Returns 0 when every
 * such session captured it (or none enables it): the event is in each of
 * those traces. -ENOBUFS when at least one dropped it (counted by reason in
 * rp_session_stats(); readers see it as EventsLost), the session's output
 * error (negative errno, such as -ENOSPC or -EPIPE) when a session whose
 * output failed dropped it (counted as RP_DROP_REASON_OUTPUT), -EINVAL for
 * a payload over 65535 bytes. With RP_WRITE_REPORT_NO_SESSION in
 * opts->flags, a write no session took returns RP_WRITE_NO_SESSION instead
 * of 0 (rp_event_write() has no options: it returns 0 for both).
 *
 * At a session's edges: a write is the session's when, once the write has
 * begun, it finds the session running; rp_session_stop() first stops taking
 * new writes (every later one is not the session's: it is not counted there
 * and, alone, returns RP_WRITE_NO_SESSION), then waits for the writes that
 * are the session's, so each of those is in its trace or counted in its
 * drops (rp_session_stats(), EventsLost), never neither. The same holds for
 * a stop through the diagnostics IPC (StopTracing) and for the host agent's
 * stop. A write that began before rp_session_start() returned may or may not
 * be the session's; its return value says which.
 *
 * Every payload of 0 to 65535 bytes fits a session's rings, also with
 * activity ids and a stack of up to RP_WRITE_MAX_GIVEN_FRAMES frames (the
 * largest record is 67664 bytes, and each ring's records may be a quarter of
 * the ring, which is at least 512 KiB): no write is ever dropped as too big,
 * and in Block mode nothing is dropped while the drainer is alive, whatever
 * the size.
 */
RP_API int rp_event_write(struct rp_event *ev, const void *payload, size_t len);
RP_API int rp_event_writev(struct rp_event *ev, const struct iovec *iov, int iovcnt,
			   const struct rp_write_opts *opts);

/* ---- sessions ---------------------------------------------------------- */

#define RP_MAX_SESSIONS 64

enum rp_buffering {
	RP_BUFFERING_DROP = 0,	/* full ring: drop and count */
	RP_BUFFERING_BLOCK = 1,	/* full ring: wait, in FIFO order, for the drainer */
};

enum rp_session_kind {
	RP_SESSION_STREAMING = 0,	/* a drainer streams the trace while the session runs */
	RP_SESSION_DEFERRED = 1,	/* events wait in the rings; stop writes the trace.
					 * No continuous drainer, so Block is refused */
};

enum rp_drop_reason {
	RP_DROP_REASON_FULL = 0,
	RP_DROP_REASON_TOO_BIG = 1,
	RP_DROP_REASON_NO_SESSION = 2,
	RP_DROP_REASON_ABORTED = 3,
	RP_DROP_REASON_ALLOC = 4,
	RP_DROP_REASON_OUTPUT = 5,	/* the session's output failed (disk full,
					 * reader gone): every later attempt, and
					 * what had not reached the output yet */
	RP_DROP_REASON_TIMEOUT = 6,	/* Block: the write waited block_timeout_ms,
					 * the bound its session was given */
	RP_DROP_REASON_NR = 7,
};

struct rp_provider_config {
	const char *name;		/* provider name */
	uint64_t keywords;		/* 0: every keyword */
	uint8_t level;			/* 0: every level */
	const char *args;		/* "key=value;..." or NULL */
};

struct rp_session_opts {
	size_t sz;			/* sizeof(struct rp_session_opts) */
	const struct rp_provider_config *providers;
	uint32_t nproviders;
	int format;			/* 5 (default) or 6: nettrace version */
	int buffering;			/* enum rp_buffering */
	uint64_t buffer_bytes;		/* all rings together; 0: 16 MiB. One ring
					 * per CPU, a power of two, at least
					 * 512 KiB each */
	const char *path;		/* output file, or NULL to use fd */
	int fd;				/* output fd (file or stream socket) when path is NULL */
	uint64_t rundown_keywords;	/* != 0: rundown at stop (see rp_session_stopping_fn) */
	uint32_t sp_interval_ms;	/* sequence point interval; 0: 1000 */
	int kind;			/* enum rp_session_kind */
	uint32_t drainer_timeout_ms;	/* ignored since 0.3: a drainer is never
					 * taken for dead because it was silent
					 * (see block_timeout_ms) */
	uint32_t process_id;		/* the process the trace describes, in its
					 * header (readers give every event this
					 * pid); 0: this process. A recorder that
					 * traces another process names it here */
	uint32_t block_timeout_ms;	/* Block: the longest one write waits for
					 * room; past it that write is dropped
					 * (RP_DROP_REASON_TIMEOUT) and the session
					 * stays Block. 0: no bound, a write waits
					 * as long as the session runs */
};

struct rp_session;

/*
 * Starts a session: rings, the drainer thread, then enables the providers
 * (their callbacks fire after the drainer runs). Returns NULL with errno set
 * (EINVAL bad options, EBUSY 64 sessions running); rp_last_error() then says
 * what was wrong. Also EINVAL when the session would collect an event (or,
 * with rundown_keywords, a rundown event) that its nettrace format cannot
 * describe: rp_last_error() names the event and says to use the other
 * format (see rp_event_new).
 *
 * Block mode: a writer that finds its ring full waits, in strict FIFO order
 * with the other waiting writers, until the drainer frees space; nothing is
 * dropped while the session runs and its output works, however slowly it is
 * read: a stopped, frozen or throttled process and a reader that pauses are
 * waited for. A writer gives up only on a fact: the session stops (counted
 * as aborted), its output fails (counted as output), the host agent that
 * drained it exits (aborted), or, only when the session was given one,
 * block_timeout_ms passes for that write (timeout).
 */
RP_API struct rp_session *rp_session_start(const struct rp_session_opts *opts);
/*
 * Disables the providers, waits for writers in flight, drains everything,
 * writes the end of the trace and frees the session. Returns 0 or the first
 * output error (a reader that went away: -EPIPE).
 */
RP_API int rp_session_stop(struct rp_session *s);
RP_API int rp_session_id(const struct rp_session *s);

struct rp_session_stats {
	size_t sz;			/* sizeof(struct rp_session_stats) */
	uint64_t events_written;	/* in event blocks the output accepted;
					 * never goes down (an event still in an
					 * open block counts once its block is out,
					 * within about 20 ms) */
	uint64_t bytes_written;
	uint64_t dropped[RP_DROP_REASON_NR];
	uint64_t corrupt_records;	/* skipped by the drainer's checks */
	uint64_t late_events;		/* arrived after younger events were written */
	uint64_t drainer_wakeups;
	uint64_t sequence_points;
	int output_error;		/* 0 or a negative errno */
	uint64_t skipped_bytes;		/* ring bytes the reader gave up because they
					 * could not be trusted (corrupt records or
					 * positions, writers that never committed);
					 * the events in them show as EventsLost */
	uint64_t drainer_moves;		/* times the drainer left a CPU a writer
					 * was using for one no writer was (the
					 * scheduler had put it there) */
	uint64_t drainer_deferrals;	/* times a Drop session's drainer, woken
					 * with writers on every CPU it may use,
					 * let the rings hold their burst instead
					 * of taking CPU time from them */
};

RP_API int rp_session_stats(const struct rp_session *s, struct rp_session_stats *st);

/* ---- diagnostics IPC server ------------------------------------------- */

/*
 * The .NET diagnostics IPC protocol (DOTNET_IPC_V1) on a Unix socket, so that
 * dotnet-trace, dotnet-counters and dotnet-gcdump drive this process's
 * sessions unchanged. One server per process.
 */
struct rp_ipc_opts {
	size_t sz;			/* sizeof(struct rp_ipc_opts) */
	const char *ports;		/* DOTNET_DiagnosticPorts syntax, or NULL: the
					 * default listen socket in $TMPDIR */
	bool no_default_port;		/* only the ports listed */
	uint64_t max_buffer_bytes;	/* caps a client's requested buffer; 0: no cap */
	uint64_t max_memory_bytes;	/* caps the buffers of all IPC sessions together:
					 * a request past what is left is refused (Fail).
					 * 0: RINGPIPE_IPC_MAX_MEMORY_MB, else 1/4 of
					 * physical RAM; UINT64_MAX: no cap */
	const char *runtime_version;	/* the runtime version ProcessInfo2/3 report
					 * (a runtime built on the library names its
					 * own, e.g. "10.0.0"); NULL: "ringpipe
					 * VERSION". Copied, at most 63 bytes */
};

/*
 * Starts the server (its accept loop runs on its own thread). If a
 * configured port asks for suspension, returns only after a client sent
 * ResumeRuntime (or the server was stopped). 0 or a negative errno;
 * -ECANCELED when RINGPIPE_ENABLE_DIAGNOSTICS=0 or DOTNET_EnableDiagnostics=0
 * turned it off.
 */
RP_API int rp_ipc_server_start(const struct rp_ipc_opts *opts);
/* Stops the server, ends its sessions, unlinks its sockets. */
RP_API void rp_ipc_server_stop(void);

/* ---- counters (System.Diagnostics.Metrics) ---------------------------- */

/*
 * Meters and their instruments, published the way .NET's MetricsEventSource
 * publishes them: a session that enables the provider "System.Diagnostics.Metrics"
 * with the filter arguments SessionId, Metrics ("Meter" or "Meter\instrument",
 * separated by ',' or ';'), RefreshInterval (seconds), MaxTimeSeries and
 * MaxHistograms gets, every interval, one value event per time series of the
 * instruments it named. `dotnet-counters monitor|collect` reads them
 * unchanged. Nothing is aggregated, no thread runs and no callback is called
 * while no session enables the provider.
 *
 * The library publishes two meters of its own: "System.Runtime" (the
 * process's dotnet.process.cpu.time, dotnet.process.memory.working_set,
 * dotnet.process.cpu.count) and "Ringpipe" (each session's events written,
 * bytes written, events dropped by reason, producers parked).
 *
 * Meters and instruments live until the process exits.
 */
#define RP_METRICS_PROVIDER "System.Diagnostics.Metrics"

struct rp_meter;
struct rp_instrument;

enum rp_instrument_kind {
	RP_INSTRUMENT_COUNTER = 0,		/* monotonic sum: rp_instrument_add(), delta >= 0 */
	RP_INSTRUMENT_UPDOWN_COUNTER = 1,	/* sum: rp_instrument_add(), any delta */
	RP_INSTRUMENT_GAUGE = 2,		/* last value: rp_instrument_record() */
	RP_INSTRUMENT_HISTOGRAM = 3,		/* distribution: rp_instrument_record() */
	RP_INSTRUMENT_OBSERVABLE_COUNTER = 4,	/* callback: the monotonic total */
	RP_INSTRUMENT_OBSERVABLE_UPDOWN_COUNTER = 5, /* callback: the current sum */
	RP_INSTRUMENT_OBSERVABLE_GAUGE = 6,	/* callback: the current value */
};

struct rp_meter_opts {
	size_t sz;			/* sizeof(struct rp_meter_opts) */
	const char *name;		/* e.g. "MyCompany.MyService"; 1 to 255 bytes */
	const char *version;		/* or NULL */
};

/* NULL with errno EINVAL (no name, or one over 255 bytes) or ENOMEM. Two
 * meters may share a name: a session that names it gets both. */
RP_API struct rp_meter *rp_meter_new(const struct rp_meter_opts *opts);

/* One measurement of an observable instrument. */
struct rp_measurement {
	double value;
	/* "key=value,key=value" naming the time series, or NULL: none. Read
	 * until the callback is called again. */
	const char *tags;
};

/*
 * Observes an observable instrument: fills out[0..max) and returns how many
 * it filled (0 to max), or a negative errno, which sessions see as an
 * ObservableInstrumentCallbackError. Called on the library's counters
 * thread, once per collection of each session that listens, never
 * concurrently with itself.
 */
typedef int (*rp_observe_fn)(struct rp_instrument *inst, struct rp_measurement *out,
			     uint32_t max, void *ctx);

struct rp_instrument_opts {
	size_t sz;			/* sizeof(struct rp_instrument_opts) */
	int kind;			/* enum rp_instrument_kind */
	const char *name;		/* e.g. "myservice.requests"; 1 to 255 bytes */
	const char *unit;		/* UCUM, e.g. "By", "s", "{request}"; or NULL */
	const char *description;	/* or NULL */
	rp_observe_fn observe;		/* the observable kinds: required */
	void *ctx;			/* passed to observe */
};

/*
 * NULL with errno EINVAL (bad kind, no name, an observable kind without a
 * callback, a callback for another kind), ENOSPC (4096 instruments exist)
 * or ENOMEM; rp_last_error() says which.
 */
RP_API struct rp_instrument *rp_instrument_new(struct rp_meter *meter,
					       const struct rp_instrument_opts *opts);
/* Whether any session listens to the instrument now (one load): a caller
 * whose measurement is costly may skip it when not. */
RP_API bool rp_instrument_enabled(const struct rp_instrument *inst);
/*
 * Counters and up-down counters: adds delta. Costs one load and a branch
 * while no session listens to the instrument (the measurement is then not
 * kept, as in .NET), else one atomic update. 0; -EINVAL for another kind,
 * a negative or non-finite delta of a counter.
 */
RP_API int rp_instrument_add(struct rp_instrument *inst, double delta);
/*
 * Gauges: the current value; histograms: one measurement (a session gets
 * count, sum and the 50th, 95th and 99th percentiles of each interval). One
 * load and a branch while nobody listens. 0; -EINVAL for another kind or a
 * non-finite value.
 */
RP_API int rp_instrument_record(struct rp_instrument *inst, double value);

/* Text of the last configuration error in this thread ("" when none). */
RP_API const char *rp_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* RINGPIPE_RINGPIPE_H */
