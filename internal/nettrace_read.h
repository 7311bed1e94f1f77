/* SPDX-License-Identifier: MIT */
/*
 * The nettrace reader and its canonical JSON dump: the tools', tests' and
 * fuzzers' way into a trace (libringpipe-internal.a). Applications never
 * read traces, so none of this is in libringpipe.so or libringpipe.a.
 */
#ifndef RINGPIPE_INTERNAL_NETTRACE_READ_H
#define RINGPIPE_INTERNAL_NETTRACE_READ_H

#include <stdio.h>

#include "nettrace/nettrace.h"

/* ---- reader ---------------------------------------------------------- */

struct nt_rfield;

struct nt_rtype {
	uint8_t code;
	struct nt_rtype *elem;		/* arrays */
	uint16_t nfields;		/* objects */
	struct nt_rfield *fields;
};

struct nt_rfield {
	char *name;			/* UTF-8 */
	struct nt_rtype type;
};

struct nt_meta {
	uint32_t id;
	char *provider;
	uint8_t guid[16];
	uint32_t event_id;
	char *raw_name;			/* as stored in the file */
	char *name;			/* TraceEvent's EventName */
	uint64_t keywords;
	uint8_t version;
	uint8_t level;
	uint8_t opcode;			/* after TraceEvent's implied Start/Stop */
	bool has_fields;		/* a usable field list was present */
	uint16_t nfields;
	struct nt_rfield *fields;
	uint64_t count;			/* events dispatched with this metadata */
};

struct nt_rec {
	const struct nt_meta *meta;
	uint32_t seq;
	uint64_t capture_thread;	/* V5: OS thread id, V6: thread index */
	int64_t pid;
	int64_t tid;
	uint32_t cpu;
	uint64_t ts;
	uint8_t activity[16];
	uint8_t related[16];
	const uint8_t *payload;
	uint32_t payload_len;
	const uint8_t *stack;		/* pointer_size-wide IPs */
	uint32_t stack_bytes;
	bool sorted;
	uint64_t offset;		/* file offset of the event header */
};

struct nt_reader;

struct nt_reader_info {
	int format;			/* 5 (covers V4) or 6 */
	uint64_t sync_ticks;
	uint64_t tick_freq;
	int64_t sync_unix_ns;
	uint32_t pointer_size;
	int64_t pid;
	uint32_t nr_cpus;
	uint32_t sampling_interval;
};

/* Opens a whole trace held in memory (not copied; must outlive the reader). */
struct nt_reader *nt_reader_new_mem(const void *data, size_t len);
/* Opens a file (mapped read-only). */
struct nt_reader *nt_reader_open(const char *path);
void nt_reader_free(struct nt_reader *r);
const struct nt_reader_info *nt_reader_info(const struct nt_reader *r);
/*
 * Next event in TraceEvent's dispatch order: 1 with *rec filled, 0 at the end
 * of the stream, or a negative errno with nt_reader_errmsg() saying what was
 * wrong and at which offset. The record stays valid until the next call.
 */
int nt_reader_next(struct nt_reader *r, struct nt_rec *rec);
const char *nt_reader_errmsg(const struct nt_reader *r);
/* How far reading has come: bytes of the stream behind the next block or
 * object, of *total; for a progress line. */
uint64_t nt_reader_offset(const struct nt_reader *r, uint64_t *total);
/* EventsLost, counted the way TraceEvent counts it. */
int64_t nt_reader_lost(const struct nt_reader *r);
/* All metadata seen so far, in definition order. */
size_t nt_reader_nmeta(const struct nt_reader *r);
const struct nt_meta *nt_reader_meta(const struct nt_reader *r, size_t i);

/* Canonical dump (tests/interop/README.md) of one event / the summary. */
void nt_dump_event(const struct nt_reader *r, const struct nt_rec *rec, struct bytebuf *out);
void nt_dump_summary(const struct nt_reader *r, uint64_t events, int err, struct bytebuf *out);
/* A JSON string of n bytes at s: quotes, escapes, and valid UTF-8 out
 * whatever comes in (invalid sequences become U+FFFD). */
void nt_json_string(struct bytebuf *out, const char *s, size_t n);
/* The same of a C string (NULL: ""), appended to out or written to f. */
void nt_json_cstring(struct bytebuf *out, const char *s);
void nt_json_fputs(const char *s, FILE *f);

#endif
