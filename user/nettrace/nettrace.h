/* SPDX-License-Identifier: MIT */
/*
 * nettrace writer and reader (internal API).
 *
 * nettrace is the trace format TraceEvent, PerfView, dotnet-trace and
 * dotnet-gcdump read. Two framings exist:
 *   V5  FastSerialization objects (what the .NET runtime writes), one process;
 *   V6  typed blocks, thread blocks and label lists, several processes.
 * Documentation/nettrace.md describes what ringpipe writes and why; the byte
 * layout follows perfview's NetTraceFormat_v5.md (V5) and NetTraceFormat.md
 * (V6), in microsoft/perfview src/TraceEvent/EventPipe/.
 *
 * Ordering contract of the writer: events handed to nt_writer_event() with
 * `sorted` set must come in non-decreasing timestamp order across all threads
 * (the drainer's merge provides that); the writer marks them IsSorted so the
 * reader dispatches each at once.
 */
#ifndef RINGPIPE_NETTRACE_H
#define RINGPIPE_NETTRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "util/bytebuf.h"

enum nt_format {
	NT_FORMAT_V5 = 5,
	NT_FORMAT_V6 = 6,
};

/* Payload type codes (shared by V5 and V6 metadata). */
enum nt_type {
	NT_OBJECT = 1,
	NT_BOOL = 3,		/* 4 bytes */
	NT_CHAR = 4,		/* UTF-16 code unit */
	NT_I8 = 5,
	NT_U8 = 6,
	NT_I16 = 7,
	NT_U16 = 8,
	NT_I32 = 9,
	NT_U32 = 10,
	NT_I64 = 11,
	NT_U64 = 12,
	NT_F32 = 13,
	NT_F64 = 14,
	NT_DECIMAL = 15,
	NT_DATETIME = 16,	/* FILETIME, 8 bytes */
	NT_GUID = 17,
	NT_STRING = 18,		/* UTF-16LE, NUL-terminated */
	NT_ARRAY = 19,		/* u16 count, then elements */
	NT_VARINT = 20,		/* V6 only */
	NT_VARUINT = 21,	/* V6 only */
};

/* How many payload bytes a value of type code takes: its size for the
 * fixed-size types, 0 for NT_STRING (up to its NUL unit), -1 for the types
 * whose size depends on their contents (objects, arrays, varints) or that
 * are unknown. The one table writers, readers and the tools decode by. */
static inline int nt_type_fixed_size(uint8_t code)
{
	switch (code) {
	case NT_I8: case NT_U8: return 1;
	case NT_CHAR: case NT_I16: case NT_U16: return 2;
	case NT_BOOL: case NT_I32: case NT_U32: case NT_F32: return 4;
	case NT_I64: case NT_U64: case NT_F64: case NT_DATETIME: return 8;
	case NT_DECIMAL: case NT_GUID: return 16;
	case NT_STRING: return 0;
	default: return -1;
	}
}

/* Field schema. An array's element type is `elem_type`; an object (or an
 * array of objects) lists its members in `fields` (at least one). Member
 * lists nest at most NT_MAX_FIELD_DEPTH levels below the event's own. */
#define NT_MAX_FIELD_DEPTH 8
struct nt_field {
	const char *name;
	uint8_t type;
	uint8_t elem_type;
	uint16_t nfields;
	const struct nt_field *fields;
};

struct nt_event_desc {
	const char *provider;
	const uint8_t *provider_guid;	/* NULL: derived from the name as TraceEvent
					 * does. V6 only: V5 readers always derive it */
	uint32_t event_id;
	const char *name;		/* may be "" (CLR runtime events) */
	uint64_t keywords;
	uint8_t version;
	uint8_t level;
	uint8_t opcode;
	uint16_t nfields;
	const struct nt_field *fields;	/* NULL with nfields 0: no field list at all */
};

/*
 * Output sink. The writer hands over whole blocks as an iovec (object header,
 * padding, block content) so a sink can submit them without another copy.
 */
struct nt_sink {
	/* Write every byte of iov[0..n); 0 or a negative errno. */
	int (*writev)(struct nt_sink *sink, const struct iovec *iov, int n);
};

struct nt_mem_sink {
	struct nt_sink base;
	struct bytebuf buf;
};

struct nt_fd_sink {
	struct nt_sink base;
	int fd;
	uint64_t bytes;
};

void nt_mem_sink_init(struct nt_mem_sink *s);
void nt_mem_sink_fini(struct nt_mem_sink *s);
void nt_fd_sink_init(struct nt_fd_sink *s, int fd);

struct nt_writer_opts {
	size_t sz;			/* sizeof(struct nt_writer_opts) */
	int format;			/* NT_FORMAT_V5 (default) or NT_FORMAT_V6 */
	uint32_t pid;			/* default process id (V5: the only one) */
	uint32_t nr_cpus;		/* 0: sysconf */
	uint32_t pointer_size;		/* 0: sizeof(void *) */
	uint64_t sync_ticks;		/* timestamp taken at sync_unix_ns */
	uint64_t tick_freq;		/* ticks per second, > 0 */
	uint64_t sync_unix_ns;		/* wall clock at sync_ticks; 0: now */
	uint32_t sampling_interval_ns;	/* ExpectedCPUSamplingRate; 0: 1 ms */
	uint32_t block_bytes;		/* event block flush threshold; 0: 96 KiB */
	uint32_t seq_base;		/* a thread's sequence number before its first event; 0: 1 */
};
#define NT_WRITER_OPTS_LAST_FIELD seq_base

/* One event to serialize. */
struct nt_event {
	uint32_t meta_id;		/* from nt_writer_define() */
	uint32_t seq;			/* sequence number of the capture thread */
	uint32_t pid;			/* 0: the trace's default pid */
	uint64_t tid;			/* OS thread id */
	uint64_t capture_tid;		/* 0: same as tid */
	uint32_t cpu;
	uint32_t stack_depth;		/* frames in `stack`; 0: no stack */
	const uint64_t *stack;		/* innermost frame first */
	uint64_t ts;
	const uint8_t *activity;	/* 16 bytes or NULL */
	const uint8_t *related;		/* 16 bytes or NULL */
	const void *payload;
	uint32_t payload_len;
	bool sorted;
};

struct nt_writer;

struct nt_writer *nt_writer_new(struct nt_sink *sink, const struct nt_writer_opts *opts);
/* Flushes nothing; call nt_writer_finish() first to end the stream. */
void nt_writer_free(struct nt_writer *w);
int nt_writer_format(const struct nt_writer *w);

/*
 * Can a writer of `format` describe d? 0, or -EINVAL (a field list the
 * format has no encoding for) or -E2BIG (the metadata record is over the
 * format's size limit) with why[] saying which field or how big. Exactly
 * the descriptions nt_writer_define() accepts pass (the writer runs the
 * same checks), so a caller that checked never loses an event to its
 * metadata.
 */
int nt_event_desc_check(const struct nt_event_desc *d, int format, char *why, size_t whylen);
/* Registers an event type and returns its metadata id (>= 1) in *id;
 * -EINVAL / -E2BIG as nt_event_desc_check() says. */
int nt_writer_define(struct nt_writer *w, const struct nt_event_desc *d, uint32_t *id);
int nt_writer_event(struct nt_writer *w, const struct nt_event *ev);
/*
 * The same for a plain event, the drainer's usual one: only meta_id, seq,
 * tid, cpu, ts, payload, payload_len and sorted are read (the rest counts
 * as zero: no stack, no activity ids, written by the thread it is about,
 * in the trace's default process), and payload is not NULL when
 * payload_len is not 0. Costs less per event than nt_writer_event().
 * Returns a token (below) or a negative errno.
 */
int nt_writer_event_plain(struct nt_writer *w, const struct nt_event *ev);
/*
 * Plain events repeat: most threads write one event type on one CPU, one
 * sequence number after another. nt_writer_event_plain() returns, instead
 * of 0, a token for the event's thread (> 0), and an nt_next with it is
 * the thread's next event: what nt_writer_event_plain() would write for an
 * event with the event type, tid, cpu and sorted flag of the thread's last
 * plain event, its sequence number plus one, and the ts and payload given.
 * A token is good for the writer that gave it; one whose event failed must
 * not be used (the writer did not take that event's number).
 */
struct nt_next {
	uint32_t token;
	uint32_t payload_len;
	uint64_t ts;
	const void *payload;
};
/*
 * Writes ev[0..n) in order, each as its thread's next event; returns how
 * many were written. Fewer than n: ev[returned] was not, nor any after it,
 * because of the writer's error (nt_writer_error()), or because that
 * event's token is invalid or stale (the thread's last event was not
 * written with nt_writer_event_plain() or through its token, or its
 * numbers moved since: nt_writer_note_seq()): write it with
 * nt_writer_event_plain() then, and go on from the next.
 */
unsigned int nt_writer_events_next(struct nt_writer *w, const struct nt_next *ev, unsigned int n);
/* Records that a capture thread reached `seq` without a written event (its
 * later attempts were dropped); the next sequence point reports the gap. */
int nt_writer_note_seq(struct nt_writer *w, uint32_t pid, uint64_t capture_tid, uint32_t seq);
/* Writes every open block now, without a sequence point: what a live reader
 * waits for when events trickle in. */
int nt_writer_flush(struct nt_writer *w);
/* Events written but still in an open block (not handed to the sink). */
uint64_t nt_writer_unflushed(const struct nt_writer *w);
/* Flushes every open block and writes a sequence point at `ts`. */
int nt_writer_sequence_point(struct nt_writer *w, uint64_t ts);
/* Flushes, writes a final sequence point at `ts` and the end-of-stream mark. */
int nt_writer_finish(struct nt_writer *w, uint64_t ts);
/* Bytes handed to the sink so far, and events written. */
uint64_t nt_writer_bytes(const struct nt_writer *w);
uint64_t nt_writer_events(const struct nt_writer *w);
/* Events in the event blocks that lie wholly within the first `bytes` bytes
 * of the stream (what an output that accepted that many holds). */
uint64_t nt_writer_events_within(const struct nt_writer *w, uint64_t bytes);
/* Sticky error of the sink (0 when fine). */
int nt_writer_error(const struct nt_writer *w);

/* ---- shared helpers -------------------------------------------------- */

/* A payload type's .NET name ("Int32", "String", ...; "unknown"). */
const char *nt_type_name(uint8_t type);
/* Provider GUID the way TraceEvent derives it from a provider name. */
void nt_provider_guid(const char *name, uint8_t guid[16]);
/* "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" + NUL (37 bytes). */
void nt_guid_format(const uint8_t guid[16], char out[37]);
int nt_guid_parse(const char *s, uint8_t guid[16]);
/* TraceEvent's name (and in *opcode the opcode its template gives) for a CLR
 * runtime event that carries no name, or NULL. */
const char *nt_clr_event_name(const char *provider, uint32_t event_id, uint8_t *opcode);

void sha1(const void *data, size_t len, uint8_t out[20]);

#endif /* RINGPIPE_NETTRACE_H */
