// SPDX-License-Identifier: MIT
/*
 * nettrace serializer, V5 and V6.
 *
 * Events, metadata, stacks (and in V6 threads and label lists) accumulate in
 * one buffer per block kind. Before an event block goes out, every block it
 * may reference is flushed first, in the order metadata, stacks, threads,
 * labels, events, so a definition always precedes its use. Each block is
 * handed to the sink as one iovec: framing bytes, content, trailer.
 *
 * Sequence numbers. TraceEvent counts EventsLost from gaps in each capture
 * thread's numbers. Three cases need care, all handled here:
 *   - a thread whose first events were dropped: a V5 reader takes the first
 *     number it sees as the start, so a sequence point declares the thread at
 *     seq_base before its first event; a V6 reader starts every declared
 *     thread at 0, so V6 numbers are shifted to make seq_base + 1 read as 1;
 *   - a thread id reused by a new thread that restarts its numbering: in V5
 *     the file keeps one continuous numbering per thread id (an offset per
 *     incarnation); in V6 the new incarnation gets a new thread index;
 *   - drops after a thread's last written event: nt_writer_note_seq() and the
 *     next sequence point carry the higher number.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hmap.h"
#include "nettrace.h"
#include "utf.h"

#define NT_V5_BLOCK_VERSION 2
#define NT_DEFAULT_BLOCK (96u * 1024)
#define NT_V6_MAX_BLOCK (16u * 1024 * 1024 - 1)
#define NT_EVENT_HEADER_MAX 96
/* Largest metadata record body. V6: a row's size is a u16. V5: the record
 * is the payload of a metadata event, whose size TraceEvent reads as 32 bits
 * (it reads records of 1 MB); the writer bounds it at 1 MiB, which no event
 * whose V6 row fits comes near (a V5 record is at most about twice as big) */
#define NT_V6_MAX_META 65535u
#define NT_V5_MAX_META (1024u * 1024)

enum {
	V6_END = 0, V6_TRACE = 1, V6_EVENT = 2, V6_METADATA = 3, V6_SP = 4,
	V6_STACK = 5, V6_THREAD = 6, V6_REMOVE_THREAD = 7, V6_LABELS = 8,
};

enum {
	HF_META = 0x01, HF_SEQ = 0x02, HF_TID = 0x04, HF_STACK = 0x08,
	HF_ACTIVITY = 0x10, HF_RELATED = 0x20, HF_SORTED = 0x40, HF_SIZE = 0x80,
};

/* Previous-header state for compressed headers; zeroed at each block. */
struct hdr_state {
	uint32_t meta;
	uint32_t seq;
	uint64_t capture;
	uint64_t tid;
	uint32_t cpu;
	uint32_t stack;
	uint64_t ts;
	uint32_t label;
	uint32_t size;
	uint8_t activity[16];
	uint8_t related[16];
	/* V5: activity / related may be non-zero (false after the block reset
	 * zeroed them), so events without ids skip the 16-byte compares */
	bool act_set, rel_set;
};

struct wthread {
	uint32_t pid;
	uint64_t tid;
	uint64_t index;		/* V6 thread index; V5: tid */
	uint32_t last_raw;	/* last sequence number given by the caller */
	uint32_t last_file;	/* last sequence number written to the file */
	uint32_t offset;	/* file = raw + offset (V5 continuity across reuse) */
	bool in_file;		/* the reader knows this thread (event or SP) */
	bool has_raw;
};

struct stack_ent {
	uint64_t hash;
	uint32_t id;
	uint32_t depth;
	size_t off;		/* into stack_store */
};

struct label_ent {
	uint8_t act[16];
	uint8_t rel[16];
};

/* Event block ends remembered: more than the blocks an output can hold in
 * flight (the io_uring sink buffers at most a few MiB, blocks are ~100 KiB). */
#define NT_BLOCK_ENDS 256u

struct eblock {
	struct bytebuf buf;
	struct hdr_state st;
	uint64_t min_ts, max_ts;
	uint32_t nevents;
};

struct nt_writer {
	struct nt_sink *sink;
	int format;
	uint32_t pid, nr_cpus, pointer_size, sampling;
	uint64_t sync_ticks, freq, sync_unix_ns;
	uint32_t block_bytes;
	uint32_t seq_base;
	int err;
	uint64_t off;		/* bytes handed to the sink */
	uint64_t nevents;
	uint64_t last_ts;
	/* where recent event blocks end in the stream, with the events written
	 * up to each end: after an output error, which events made it out */
	struct { uint64_t end, events; } ends[NT_BLOCK_ENDS];
	uint32_t nends;		/* entries written, ever (index % NT_BLOCK_ENDS) */
	uint64_t emitted;	/* events in event blocks handed to the sink */

	uint32_t next_meta;
	struct eblock meta;
	struct eblock events;

	/* stacks interned since the last sequence point */
	struct bytebuf stacks;		/* block content being built */
	uint32_t stack_first, stack_count, next_stack;
	struct bytebuf stack_store;	/* u64 IPs of every interned stack */
	struct stack_ent *sents;
	size_t nsents, capsents;
	struct hmap stack_map;		/* hash -> index into sents (chain via probing) */

	/* V6 threads and labels */
	struct bytebuf threads_blk;
	struct bytebuf labels_blk;
	uint32_t label_first, label_count, next_label;
	struct label_ent *labels;
	size_t nlabels, caplabels;
	uint64_t next_index;

	struct wthread *threads;
	size_t nthreads, capthreads;
	struct hmap thread_map;		/* key -> index into threads */
	struct wthread *last_thread;
};

/* ---- sinks ------------------------------------------------------------ */

static int mem_sink_writev(struct nt_sink *sink, const struct iovec *iov, int n)
{
	struct nt_mem_sink *s = (struct nt_mem_sink *)sink;
	int i;

	for (i = 0; i < n; i++)
		if (bb_append(&s->buf, iov[i].iov_base, iov[i].iov_len))
			return -ENOMEM;
	return 0;
}

void nt_mem_sink_init(struct nt_mem_sink *s)
{
	memset(s, 0, sizeof(*s));
	s->base.writev = mem_sink_writev;
}

void nt_mem_sink_fini(struct nt_mem_sink *s)
{
	bb_free(&s->buf);
}

static int fd_sink_writev(struct nt_sink *sink, const struct iovec *iov, int n)
{
	struct nt_fd_sink *s = (struct nt_fd_sink *)sink;
	struct iovec v[8];
	int i, cnt;

	if (n > 8)
		return -EINVAL;
	for (i = 0; i < n; i++)
		v[i] = iov[i];
	i = 0;
	cnt = n;
	while (i < cnt) {
		ssize_t w = writev(s->fd, v + i, cnt - i);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		s->bytes += (uint64_t)w;
		while (i < cnt && (size_t)w >= v[i].iov_len) {
			w -= (ssize_t)v[i].iov_len;
			i++;
		}
		if (i < cnt) {
			v[i].iov_base = (char *)v[i].iov_base + w;
			v[i].iov_len -= (size_t)w;
		}
	}
	return 0;
}

void nt_fd_sink_init(struct nt_fd_sink *s, int fd)
{
	memset(s, 0, sizeof(*s));
	s->base.writev = fd_sink_writev;
	s->fd = fd;
}

/* ---- low-level output ------------------------------------------------- */

static int emit(struct nt_writer *w, const struct iovec *iov, int n)
{
	int i, err;

	if (w->err)
		return w->err;
	err = w->sink->writev(w->sink, iov, n);
	if (err) {
		w->err = err;
		return err;
	}
	for (i = 0; i < n; i++)
		w->off += iov[i].iov_len;
	return 0;
}

/* V5 object header: BeginPrivateObject, type descriptor, EndObject. */
static size_t v5_object_header(uint8_t *o, const char *type, int version)
{
	uint32_t len = (uint32_t)strlen(type);
	int32_t v = version;
	size_t n = 0;

	o[n++] = 0x05;
	o[n++] = 0x05;
	o[n++] = 0x01;
	memcpy(o + n, &v, 4); n += 4;	/* Version */
	memcpy(o + n, &v, 4); n += 4;	/* MinimumReaderVersion */
	memcpy(o + n, &len, 4); n += 4;
	memcpy(o + n, type, len); n += len;
	o[n++] = 0x06;
	return n;
}

/* Writes one block: V5 object with BlockSize and alignment padding, or a V6
 * block header. */
static int emit_block(struct nt_writer *w, const char *v5_type, int v6_kind,
		      const void *content, size_t len)
{
	static const uint8_t end_object = 0x06;
	uint8_t hdr[64];
	struct iovec iov[3];
	size_t n;

	if (w->format == NT_FORMAT_V6) {
		uint32_t x;

		if (len > NT_V6_MAX_BLOCK)
			return w->err = -E2BIG;
		x = (uint32_t)len | ((uint32_t)v6_kind << 24);
		memcpy(hdr, &x, 4);
		iov[0] = (struct iovec){ hdr, 4 };
		iov[1] = (struct iovec){ (void *)content, len };
		return emit(w, iov, len ? 2 : 1);
	}

	n = v5_object_header(hdr, v5_type, NT_V5_BLOCK_VERSION);
	{
		int32_t size = (int32_t)len;
		size_t pad;

		memcpy(hdr + n, &size, 4);
		n += 4;
		/* the byte after the padding sits at an absolute offset that is a
		 * multiple of 4 */
		pad = (4 - ((w->off + n) & 3)) & 3;
		memset(hdr + n, 0, pad);
		n += pad;
	}
	iov[0] = (struct iovec){ hdr, n };
	iov[1] = (struct iovec){ (void *)content, len };
	iov[2] = (struct iovec){ (void *)&end_object, 1 };
	return emit(w, iov, 3);
}

/* ---- strings ---------------------------------------------------------- */

/* Appends `s` as UTF-16LE with a NUL terminator. */
static int put_utf16z(struct bytebuf *b, const char *s)
{
	return utf8_to_utf16z(b, s);
}

static int put_str8(struct bytebuf *b, const char *s)
{
	size_t n;

	s = s ? s : "";
	n = strlen(s);

	if (bb_reserve(b, n + 5))
		return -ENOMEM;
	bb_varu32(b, (uint32_t)n);
	bb_put(b, s, n);
	return 0;
}

/* ---- metadata encoding ------------------------------------------------ */

/* Does the field take a member list (an object, or an array of objects)? */
static bool has_members(const struct nt_field *f)
{
	return f->type == NT_OBJECT || (f->type == NT_ARRAY && f->elem_type == NT_OBJECT);
}

static bool fields_have_array(const struct nt_field *f, uint16_t n)
{
	uint16_t i;

	for (i = 0; i < n; i++) {
		if (f[i].type == NT_ARRAY)
			return true;
		if (has_members(&f[i]) && fields_have_array(f[i].fields, f[i].nfields))
			return true;
	}
	return false;
}

static const char *type_label(uint8_t t)
{
	static const char *const names[] = {
		[NT_OBJECT] = "Object", [NT_BOOL] = "Boolean", [NT_CHAR] = "Char",
		[NT_I8] = "SByte", [NT_U8] = "Byte", [NT_I16] = "Int16", [NT_U16] = "UInt16",
		[NT_I32] = "Int32", [NT_U32] = "UInt32", [NT_I64] = "Int64", [NT_U64] = "UInt64",
		[NT_F32] = "Single", [NT_F64] = "Double", [NT_DECIMAL] = "Decimal",
		[NT_DATETIME] = "DateTime", [NT_GUID] = "Guid", [NT_STRING] = "String",
		[NT_ARRAY] = "Array", [NT_VARINT] = "VarInt", [NT_VARUINT] = "VarUInt",
	};

	return t < sizeof(names) / sizeof(names[0]) && names[t] ? names[t] : "unknown";
}

static bool type_valid(uint8_t t, int format)
{
	if (t == NT_OBJECT || (t >= NT_BOOL && t <= NT_ARRAY))
		return true;
	return format == NT_FORMAT_V6 && (t == NT_VARINT || t == NT_VARUINT);
}

static void why_set(char *why, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void why_set(char *why, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (!why || !len)
		return;
	va_start(ap, fmt);
	vsnprintf(why, len, fmt, ap);
	va_end(ap);
}

/*
 * Can every field be described in `format`? -EINVAL with the reason in why
 * (naming the field by its path, "Outer.Inner", "Items[]") otherwise.
 * `path` is the enclosing field's path ("" at the top).
 */
static int check_fields(const struct nt_field *f, uint16_t n, int format, int depth,
			const char *path, char *why, size_t whylen)
{
	uint16_t i;

	if (depth > NT_MAX_FIELD_DEPTH) {
		why_set(why, whylen, "field \"%s\": members nested more than %d levels deep",
			path, NT_MAX_FIELD_DEPTH);
		return -EINVAL;
	}
	if (n && !f) {
		why_set(why, whylen, "%s%s%s%u members but no member list", path[0] ? "field \"" : "",
			path, path[0] ? "\": " : "", n);
		return -EINVAL;
	}
	for (i = 0; i < n; i++) {
		char sub[256];

		if (!f[i].name) {
			why_set(why, whylen, "field %u%s%s%s has no name", i + 1,
				path[0] ? " of \"" : "", path, path[0] ? "\"" : "");
			return -EINVAL;
		}
		snprintf(sub, sizeof(sub), "%s%s%s", path, path[0] ? "." : "", f[i].name);
		if (!type_valid(f[i].type, format)) {
			if (f[i].type == NT_VARINT || f[i].type == NT_VARUINT)
				why_set(why, whylen, "field \"%s\": type %u (%s) exists only in "
					"nettrace V6", sub, f[i].type, type_label(f[i].type));
			else
				why_set(why, whylen, "field \"%s\": type code %u is not a nettrace "
					"field type", sub, f[i].type);
			return -EINVAL;
		}
		if (f[i].type == NT_ARRAY) {
			if (f[i].elem_type == NT_ARRAY) {
				why_set(why, whylen, "field \"%s\": an array of arrays cannot be "
					"described (one element type per array)", sub);
				return -EINVAL;
			}
			if (!type_valid(f[i].elem_type, format)) {
				why_set(why, whylen, "field \"%s\": array element type %u is not a "
					"nettrace field type%s", sub, f[i].elem_type,
					f[i].elem_type == NT_VARINT || f[i].elem_type == NT_VARUINT
					? " in V5 (V6 only)" : "");
				return -EINVAL;
			}
			if (strlen(sub) + 2 < sizeof(sub))
				strcat(sub, "[]");
		}
		if (!has_members(&f[i]))
			continue;
		if (!f[i].nfields || !f[i].fields) {
			why_set(why, whylen, "field \"%s\": %s needs at least one member", sub,
				f[i].type == NT_ARRAY ? "the array's element object" : "an object");
			return -EINVAL;
		}
		if (check_fields(f[i].fields, f[i].nfields, format, depth + 1, sub, why, whylen))
			return -EINVAL;
	}
	return 0;
}

static int put_i32(struct bytebuf *b, int32_t v)
{
	return bb_append(b, &v, 4);
}

/* V1 field list: i32 count, then {i32 type, [object: nested list], utf16z name}. */
static int put_fields_v1(struct bytebuf *b, const struct nt_field *f, uint16_t n)
{
	uint16_t i;

	if (put_i32(b, n))
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		if (put_i32(b, f[i].type))
			return -ENOMEM;
		if (f[i].type == NT_OBJECT && put_fields_v1(b, f[i].fields, f[i].nfields))
			return -ENOMEM;
		if (put_utf16z(b, f[i].name))
			return -ENOMEM;
	}
	return 0;
}

/* V2 field list (the V2Params tag): i32 count, then per field
 * {i32 size incl. itself, utf16z name, i32 type, [array: i32 elem type
 * (+ nested list for objects)], [object: nested list]}. */
static int put_fields_v2(struct bytebuf *b, const struct nt_field *f, uint16_t n)
{
	uint16_t i;

	if (put_i32(b, n))
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		size_t start = b->len;
		int32_t size;

		if (put_i32(b, 0) || put_utf16z(b, f[i].name) || put_i32(b, f[i].type))
			return -ENOMEM;
		if (f[i].type == NT_ARRAY) {
			if (put_i32(b, f[i].elem_type))
				return -ENOMEM;
			if (f[i].elem_type == NT_OBJECT &&
			    put_fields_v2(b, f[i].fields, f[i].nfields))
				return -ENOMEM;
		} else if (f[i].type == NT_OBJECT &&
			   put_fields_v2(b, f[i].fields, f[i].nfields)) {
			return -ENOMEM;
		}
		size = (int32_t)(b->len - start);
		memcpy(b->p + start, &size, 4);
	}
	return 0;
}

/* V6 field list: u16 count, then {u16 size, str8 name, type}. */
static int put_fields_v6(struct bytebuf *b, const struct nt_field *f, uint16_t n);

static int put_type_v6(struct bytebuf *b, uint8_t type, uint8_t elem,
		       const struct nt_field *sub, uint16_t nsub)
{
	if (bb_append(b, &type, 1))
		return -ENOMEM;
	if (type == NT_ARRAY)
		return put_type_v6(b, elem, 0, sub, nsub);
	if (type == NT_OBJECT)
		return put_fields_v6(b, sub, nsub);
	return 0;
}

static int put_fields_v6(struct bytebuf *b, const struct nt_field *f, uint16_t n)
{
	uint16_t i;

	if (bb_append(b, &n, 2))
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		size_t start = b->len;
		uint16_t size;

		if (bb_append(b, "\0\0", 2) || put_str8(b, f[i].name) ||
		    put_type_v6(b, f[i].type, f[i].elem_type, f[i].fields, f[i].nfields))
			return -ENOMEM;
		if (b->len - start - 2 > UINT16_MAX)
			return -E2BIG;
		size = (uint16_t)(b->len - start - 2);
		memcpy(b->p + start, &size, 2);
	}
	return 0;
}

/* ---- compressed event headers ----------------------------------------- */

static void eblock_reset(struct eblock *eb)
{
	eb->buf.len = 0;
	memset(&eb->st, 0, sizeof(eb->st));
	eb->min_ts = UINT64_MAX;
	eb->max_ts = 0;
	eb->nevents = 0;
	/* block header: HeaderSize, Flags (compressed), Min/Max timestamps */
	if (!bb_reserve(&eb->buf, 20)) {
		bb_u16(&eb->buf, 20);
		bb_u16(&eb->buf, 1);
		bb_u64(&eb->buf, 0);
		bb_u64(&eb->buf, 0);
	}
}

struct hdr_in {
	uint32_t meta, seq, cpu, stack, label, size;
	uint64_t capture, tid, ts;
	const uint8_t *act, *rel;
	bool sorted;
};

static const uint8_t zero_guid[16];

/* Encodes one compressed header; the caller reserved NT_EVENT_HEADER_MAX. */
static void put_header(struct eblock *eb, int format, const struct hdr_in *h)
{
	struct hdr_state *st = &eb->st;
	struct bytebuf *b = &eb->buf;
	const uint8_t *act = h->act ? h->act : zero_guid;
	const uint8_t *rel = h->rel ? h->rel : zero_guid;
	uint8_t flags = 0;

	if (h->meta != st->meta)
		flags |= HF_META;
	if (h->capture != st->capture || h->cpu != st->cpu || h->seq != st->seq + 1 ||
	    (h->meta == 0 && h->seq != st->seq))
		flags |= HF_SEQ;
	if (h->tid != st->tid)
		flags |= HF_TID;
	if (h->stack != st->stack)
		flags |= HF_STACK;
	if (format == NT_FORMAT_V6) {
		if (h->label != st->label)
			flags |= HF_ACTIVITY;
	} else {
		if (h->act || st->act_set ? memcmp(act, st->activity, 16) != 0 : false)
			flags |= HF_ACTIVITY;
		if (h->rel || st->rel_set ? memcmp(rel, st->related, 16) != 0 : false)
			flags |= HF_RELATED;
	}
	if (h->sorted)
		flags |= HF_SORTED;
	if (h->size != st->size)
		flags |= HF_SIZE;

	bb_u8(b, flags);
	if (flags & HF_META)
		bb_varu32(b, h->meta);
	if (flags & HF_SEQ) {
		bb_varu32(b, h->seq - st->seq - 1);
		bb_varu64(b, h->capture);
		bb_varu32(b, h->cpu);
	}
	if (flags & HF_TID)
		bb_varu64(b, h->tid);
	if (flags & HF_STACK)
		bb_varu32(b, h->stack);
	bb_varu64(b, h->ts - st->ts);
	if (format == NT_FORMAT_V6) {
		if (flags & HF_ACTIVITY)
			bb_varu32(b, h->label);
	} else {
		if (flags & HF_ACTIVITY)
			bb_put(b, act, 16);
		if (flags & HF_RELATED)
			bb_put(b, rel, 16);
	}
	if (flags & HF_SIZE)
		bb_varu32(b, h->size);

	st->meta = h->meta;
	st->seq = h->seq;
	st->capture = h->capture;
	st->cpu = h->cpu;
	st->tid = h->tid;
	st->stack = h->stack;
	st->ts = h->ts;
	st->label = h->label;
	st->size = h->size;
	if (format != NT_FORMAT_V6) {
		if (h->act || st->act_set) {
			memcpy(st->activity, act, 16);
			st->act_set = memcmp(act, zero_guid, 16) != 0;
		}
		if (h->rel || st->rel_set) {
			memcpy(st->related, rel, 16);
			st->rel_set = memcmp(rel, zero_guid, 16) != 0;
		}
	}
	if (h->ts < eb->min_ts)
		eb->min_ts = h->ts;
	if (h->ts > eb->max_ts)
		eb->max_ts = h->ts;
	eb->nevents++;
}

/* ---- block flushing --------------------------------------------------- */

static int flush_eblock(struct nt_writer *w, struct eblock *eb, const char *v5_type,
			int v6_kind)
{
	int err;

	if (!eb->nevents && !(w->format == NT_FORMAT_V6 && v6_kind == V6_METADATA &&
			      eb->buf.len > 2))
		return 0;
	if (eb->buf.oom)
		return w->err = -ENOMEM;
	if (v6_kind == V6_EVENT || w->format != NT_FORMAT_V6) {
		memcpy(eb->buf.p + 4, &eb->min_ts, 8);
		memcpy(eb->buf.p + 12, &eb->max_ts, 8);
	}
	err = emit_block(w, v5_type, v6_kind, eb->buf.p, eb->buf.len);
	if (w->format == NT_FORMAT_V6 && v6_kind == V6_METADATA) {
		/* V6 metadata: u16 HeaderSize (0), then rows */
		eb->buf.len = 0;
		eb->nevents = 0;
		if (!bb_reserve(&eb->buf, 2))
			bb_u16(&eb->buf, 0);
	} else {
		eblock_reset(eb);
	}
	return err;
}

static int flush_stacks(struct nt_writer *w)
{
	int err;

	if (!w->stack_count)
		return 0;
	memcpy(w->stacks.p, &w->stack_first, 4);
	memcpy(w->stacks.p + 4, &w->stack_count, 4);
	err = emit_block(w, "StackBlock", V6_STACK, w->stacks.p, w->stacks.len);
	w->stacks.len = 8;
	w->stack_first = w->next_stack;
	w->stack_count = 0;
	return err;
}

static int flush_threads(struct nt_writer *w)
{
	int err;

	if (!w->threads_blk.len)
		return 0;
	err = emit_block(w, NULL, V6_THREAD, w->threads_blk.p, w->threads_blk.len);
	w->threads_blk.len = 0;
	return err;
}

static int flush_labels(struct nt_writer *w)
{
	int err;

	if (!w->label_count)
		return 0;
	memcpy(w->labels_blk.p, &w->label_first, 4);
	memcpy(w->labels_blk.p + 4, &w->label_count, 4);
	err = emit_block(w, NULL, V6_LABELS, w->labels_blk.p, w->labels_blk.len);
	w->labels_blk.len = 8;
	w->label_first = w->next_label;
	w->label_count = 0;
	return err;
}

/* Everything an event block may reference goes out before it. */
static int flush_all(struct nt_writer *w)
{
	int err;

	err = flush_eblock(w, &w->meta, "MetadataBlock", V6_METADATA);
	if (!err)
		err = flush_stacks(w);
	if (!err && w->format == NT_FORMAT_V6) {
		err = flush_threads(w);
		if (!err)
			err = flush_labels(w);
	}
	if (!err) {
		uint32_t n = w->events.nevents;

		err = flush_eblock(w, &w->events, "EventBlock", V6_EVENT);
		if (!err && n) {
			uint32_t i = w->nends++ % NT_BLOCK_ENDS;

			w->emitted += n;
			w->ends[i].end = w->off;
			w->ends[i].events = w->emitted;
		}
	}
	return err;
}

/* ---- construction ----------------------------------------------------- */

static void systemtime(uint64_t unix_ns, uint16_t st[8])
{
	time_t secs = (time_t)(unix_ns / 1000000000ull);
	struct tm tm;

	gmtime_r(&secs, &tm);
	st[0] = (uint16_t)(tm.tm_year + 1900);
	st[1] = (uint16_t)(tm.tm_mon + 1);
	st[2] = (uint16_t)tm.tm_wday;
	st[3] = (uint16_t)tm.tm_mday;
	st[4] = (uint16_t)tm.tm_hour;
	st[5] = (uint16_t)tm.tm_min;
	st[6] = (uint16_t)tm.tm_sec;
	st[7] = (uint16_t)((unix_ns / 1000000ull) % 1000);
}

static int write_preamble(struct nt_writer *w)
{
	struct bytebuf b = { 0 };
	uint16_t st[8];
	int err;

	systemtime(w->sync_unix_ns, st);
	if (bb_reserve(&b, 256))
		return -ENOMEM;
	bb_put(&b, "Nettrace", 8);
	if (w->format == NT_FORMAT_V6) {
		struct bytebuf t = { 0 };
		char v[3][24];
		const char *keys[3] = { "ProcessId", "HardwareThreadCount",
					"ExpectedCPUSamplingRate" };
		int i;

		bb_u32(&b, 0);
		bb_u32(&b, 6);
		bb_u32(&b, 0);
		struct iovec iov = { b.p, b.len };
		err = emit(w, &iov, 1);
		snprintf(v[0], sizeof(v[0]), "%u", w->pid);
		snprintf(v[1], sizeof(v[1]), "%u", w->nr_cpus);
		snprintf(v[2], sizeof(v[2]), "%u", w->sampling);
		if (!err && bb_reserve(&t, 64))
			err = -ENOMEM;
		if (!err) {
			bb_put(&t, st, 16);
			bb_u64(&t, w->sync_ticks);
			bb_u64(&t, w->freq);
			bb_u32(&t, w->pointer_size);
			bb_u32(&t, 3);
			for (i = 0; i < 3 && !err; i++)
				if (put_str8(&t, keys[i]) || put_str8(&t, v[i]))
					err = -ENOMEM;
		}
		if (!err)
			err = emit_block(w, NULL, V6_TRACE, t.p, t.len);
		bb_free(&t);
	} else {
		static const char fs[] = "!FastSerialization.1";
		uint8_t hdr[64];
		size_t n;

		bb_u32(&b, (uint32_t)strlen(fs));
		bb_put(&b, fs, strlen(fs));
		n = v5_object_header(hdr, "Trace", 4);
		bb_put(&b, hdr, n);
		bb_put(&b, st, 16);
		bb_u64(&b, w->sync_ticks);
		bb_u64(&b, w->freq);
		bb_u32(&b, w->pointer_size);
		bb_u32(&b, w->pid);
		bb_u32(&b, w->nr_cpus);
		bb_u32(&b, w->sampling);
		bb_u8(&b, 0x06);
		struct iovec iov = { b.p, b.len };
		err = emit(w, &iov, 1);
	}
	bb_free(&b);
	return err;
}

struct nt_writer *nt_writer_new(struct nt_sink *sink, const struct nt_writer_opts *opts)
{
	struct nt_writer *w;
	struct timespec ts;

	struct nt_writer_opts o = { 0 };

	/* an older caller's smaller struct reads as zeros past its end */
	if (!sink || !opts || opts->sz < sizeof(size_t))
		return errno = EINVAL, NULL;
	memcpy(&o, opts, opts->sz < sizeof(o) ? opts->sz : sizeof(o));
	opts = &o;
	if (opts->format && opts->format != NT_FORMAT_V5 && opts->format != NT_FORMAT_V6)
		return errno = EINVAL, NULL;
	if (!opts->tick_freq)
		return errno = EINVAL, NULL;
	if (opts->pointer_size && opts->pointer_size != 4 && opts->pointer_size != 8)
		return errno = EINVAL, NULL;

	w = calloc(1, sizeof(*w));
	if (!w)
		return errno = ENOMEM, NULL;
	w->sink = sink;
	w->format = opts->format ? opts->format : NT_FORMAT_V5;
	w->pid = opts->pid ? opts->pid : (uint32_t)getpid();
	w->nr_cpus = opts->nr_cpus ? opts->nr_cpus : (uint32_t)sysconf(_SC_NPROCESSORS_CONF);
	w->pointer_size = opts->pointer_size ? opts->pointer_size : (uint32_t)sizeof(void *);
	w->sampling = opts->sampling_interval_ns ? opts->sampling_interval_ns : 1000000;
	w->sync_ticks = opts->sync_ticks;
	w->freq = opts->tick_freq;
	w->sync_unix_ns = opts->sync_unix_ns;
	if (!w->sync_unix_ns) {
		clock_gettime(CLOCK_REALTIME, &ts);
		w->sync_unix_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	}
	w->block_bytes = opts->block_bytes ? opts->block_bytes : NT_DEFAULT_BLOCK;
	if (w->block_bytes > NT_V6_MAX_BLOCK / 2)
		w->block_bytes = NT_V6_MAX_BLOCK / 2;
	w->seq_base = opts->seq_base ? opts->seq_base : 1;
	w->next_meta = 1;
	w->next_stack = w->stack_first = 1;
	w->next_label = w->label_first = 1;
	w->next_index = 1;

	if (bb_reserve(&w->events.buf, w->block_bytes + 1024) ||
	    bb_reserve(&w->meta.buf, 4096) || bb_reserve(&w->stacks, 4096) ||
	    bb_reserve(&w->labels_blk, 256))
		goto err_nomem;
	eblock_reset(&w->events);
	if (w->format == NT_FORMAT_V6) {
		bb_u16(&w->meta.buf, 0);
	} else {
		eblock_reset(&w->meta);
	}
	bb_u64(&w->stacks, 0);		/* FirstId, Count: filled at flush */
	bb_u64(&w->labels_blk, 0);

	if (write_preamble(w))
		goto err_free;
	return w;

err_nomem:
	errno = ENOMEM;
	nt_writer_free(w);
	return NULL;
err_free:
	errno = -w->err ? -w->err : EIO;
	{
		int e = errno;

		nt_writer_free(w);
		errno = e;
	}
	return NULL;
}

void nt_writer_free(struct nt_writer *w)
{
	if (!w)
		return;
	bb_free(&w->meta.buf);
	bb_free(&w->events.buf);
	bb_free(&w->stacks);
	bb_free(&w->stack_store);
	free(w->sents);
	hmap_free(&w->stack_map);
	bb_free(&w->threads_blk);
	bb_free(&w->labels_blk);
	free(w->labels);
	free(w->threads);
	hmap_free(&w->thread_map);
	free(w);
}

int nt_writer_format(const struct nt_writer *w) { return w->format; }
uint64_t nt_writer_bytes(const struct nt_writer *w) { return w->off; }
uint64_t nt_writer_events(const struct nt_writer *w) { return w->nevents; }

uint64_t nt_writer_events_within(const struct nt_writer *w, uint64_t bytes)
{
	uint32_t k, n = w->nends < NT_BLOCK_ENDS ? w->nends : NT_BLOCK_ENDS;

	/* newest first: the last block that ends within the bytes out */
	for (k = 0; k < n; k++) {
		uint32_t i = (w->nends - 1 - k) % NT_BLOCK_ENDS;

		if (w->ends[i].end <= bytes)
			return w->ends[i].events;
	}
	/* older than every remembered end (or none out): nothing we know of
	 * reached the output, unless every block did */
	return bytes >= w->off ? w->emitted : 0;
}
int nt_writer_error(const struct nt_writer *w) { return w->err; }

/* ---- metadata --------------------------------------------------------- */

/*
 * The body of the metadata record describing d under metadata id mid: in V6
 * a metadata row (after its u16 RowSize), in V5 the payload of a metadata
 * event. 0, -ENOMEM, or -E2BIG for a V6 field definition over 64 KiB.
 */
static int encode_meta(int format, const struct nt_event_desc *d, uint32_t mid,
		       struct bytebuf *p)
{
	bool v2;

	if (format == NT_FORMAT_V6) {
		uint8_t opt[64];
		size_t on = 0;
		uint16_t osz;
		int err;

		if (bb_reserve(p, 16))
			return -ENOMEM;
		bb_varu32(p, mid);
		if (put_str8(p, d->provider) || bb_reserve(p, 5))
			return -ENOMEM;
		bb_varu32(p, d->event_id);
		if (put_str8(p, d->name))
			return -ENOMEM;
		err = put_fields_v6(p, d->fields, d->nfields);
		if (err)
			return err;
		if (d->opcode) {
			opt[on++] = 1;
			opt[on++] = d->opcode;
		}
		if (d->keywords) {
			opt[on++] = 3;
			memcpy(opt + on, &d->keywords, 8);
			on += 8;
		}
		if (d->provider_guid) {
			opt[on++] = 7;
			memcpy(opt + on, d->provider_guid, 16);
			on += 16;
		}
		if (d->level) {
			opt[on++] = 8;
			opt[on++] = d->level;
		}
		if (d->version) {
			opt[on++] = 9;
			opt[on++] = d->version;
		}
		osz = (uint16_t)on;
		if (bb_append(p, &osz, 2) || bb_append(p, opt, on))
			return -ENOMEM;
		return 0;
	}

	/* V5 has no place for a provider GUID: readers derive it from the
	 * name (Documentation/nettrace.md), so an explicit one that the name
	 * does not derive to is simply not carried */
	v2 = d->nfields && fields_have_array(d->fields, d->nfields);
	if (put_i32(p, (int32_t)mid) || put_utf16z(p, d->provider) ||
	    put_i32(p, (int32_t)d->event_id) || put_utf16z(p, d->name) ||
	    bb_append(p, &d->keywords, 8) || put_i32(p, d->version) || put_i32(p, d->level))
		return -ENOMEM;
	if (d->fields || d->opcode) {
		if (v2 ? put_i32(p, 0) : put_fields_v1(p, d->fields, d->nfields))
			return -ENOMEM;
	}
	if (d->opcode) {
		/* Opcode tag: length 1, kind 1 */
		if (put_i32(p, 1) || bb_append(p, "\x01", 1) || bb_append(p, &d->opcode, 1))
			return -ENOMEM;
	}
	if (v2) {
		size_t lpos = p->len;
		int32_t tlen;

		if (put_i32(p, 0) || bb_append(p, "\x02", 1) ||
		    put_fields_v2(p, d->fields, d->nfields))
			return -ENOMEM;
		tlen = (int32_t)(p->len - lpos - 5);
		memcpy(p->p + lpos, &tlen, 4);
	}
	return 0;
}

/* The largest metadata record body the format takes. */
static size_t meta_limit(int format)
{
	return format == NT_FORMAT_V6 ? NT_V6_MAX_META : NT_V5_MAX_META;
}

/* Everything about d except its encoded size. */
static int desc_valid(const struct nt_event_desc *d, int format, char *why, size_t whylen)
{
	if (!d || !d->provider || !d->provider[0]) {
		why_set(why, whylen, "the event has no provider name");
		return -EINVAL;
	}
	if (d->event_id > UINT16_MAX) {
		why_set(why, whylen, "event id %u is over 65535", d->event_id);
		return -EINVAL;
	}
	return check_fields(d->fields, d->nfields, format, 0, "", why, whylen);
}

int nt_event_desc_check(const struct nt_event_desc *d, int format, char *why, size_t whylen)
{
	struct bytebuf p = { 0 };
	int err;

	if (format != NT_FORMAT_V5 && format != NT_FORMAT_V6) {
		why_set(why, whylen, "nettrace format %d is not 5 or 6", format);
		return -EINVAL;
	}
	err = desc_valid(d, format, why, whylen);
	if (err)
		return err;
	/* the largest metadata id (a V6 varuint takes up to 5 bytes) */
	err = encode_meta(format, d, UINT32_MAX, &p);
	if (!err && p.len > meta_limit(format))
		err = -E2BIG;
	if (err == -E2BIG && p.len > meta_limit(format))
		why_set(why, whylen, "its metadata takes %zu bytes in nettrace V%d, over the "
			"%zu-byte limit of a V%d metadata record", p.len, format,
			meta_limit(format), format);
	else if (err == -E2BIG)
		why_set(why, whylen, "a field definition takes more than 65535 bytes in "
			"nettrace V6, the limit of one field");
	else if (err)
		why_set(why, whylen, "out of memory");
	bb_free(&p);
	return err;
}

int nt_writer_define(struct nt_writer *w, const struct nt_event_desc *d, uint32_t *id)
{
	struct bytebuf p = { 0 };
	uint32_t mid;
	int err;

	if (w->err)
		return w->err;
	err = desc_valid(d, w->format, NULL, 0);
	if (err)
		return err;
	mid = w->next_meta;
	err = encode_meta(w->format, d, mid, &p);
	if (!err && p.len > meta_limit(w->format))
		err = -E2BIG;
	if (err)
		goto out;
	if (w->format == NT_FORMAT_V6) {
		uint16_t row = (uint16_t)p.len;

		if (bb_append(&w->meta.buf, &row, 2) || bb_append(&w->meta.buf, p.p, p.len)) {
			err = -ENOMEM;
			goto out;
		}
		w->meta.nevents++;
	} else {
		struct hdr_in h = { .size = (uint32_t)p.len, .sorted = true };

		if (bb_reserve(&w->meta.buf, NT_EVENT_HEADER_MAX + p.len)) {
			err = -ENOMEM;
			goto out;
		}
		put_header(&w->meta, w->format, &h);
		bb_put(&w->meta.buf, p.p, p.len);
	}
	w->next_meta++;
	*id = mid;
	if (w->meta.buf.len >= w->block_bytes)
		err = flush_eblock(w, &w->meta, "MetadataBlock", V6_METADATA);
out:
	bb_free(&p);
	return err;
}

/* ---- stacks ----------------------------------------------------------- */

static uint64_t hash_ips(const uint64_t *ips, uint32_t n)
{
	uint64_t h = 0x9e3779b97f4a7c15ULL ^ n;
	uint32_t i;

	for (i = 0; i < n; i++)
		h = hmap_hash(h ^ ips[i]);
	return h;
}

static int intern_stack(struct nt_writer *w, const uint64_t *ips, uint32_t n, uint32_t *id)
{
	uint64_t h = hash_ips(ips, n), key, v;
	uint32_t bytes = n * w->pointer_size, i;
	struct stack_ent *e;

	/* chained by probing successive keys: h, h+1, ... (collisions rare) */
	for (key = h;; key++) {
		if (!hmap_get(&w->stack_map, key, &v))
			break;
		e = &w->sents[v];
		if (e->depth == n &&
		    !memcmp(w->stack_store.p + e->off, ips, (size_t)n * 8)) {
			*id = e->id;
			return 0;
		}
	}
	if (bytes > 65527)
		return -E2BIG;
	if (array_grow((void **)&w->sents, &w->capsents, w->nsents, sizeof(*w->sents), 256))
		return -ENOMEM;
	if (bb_reserve(&w->stack_store, (size_t)n * 8) ||
	    bb_reserve(&w->stacks, 4 + (size_t)n * 8) ||
	    hmap_put(&w->stack_map, key, w->nsents))
		return -ENOMEM;
	e = &w->sents[w->nsents++];
	e->hash = h;
	e->id = w->next_stack++;
	e->depth = n;
	e->off = w->stack_store.len;
	bb_put(&w->stack_store, ips, (size_t)n * 8);

	bb_u32(&w->stacks, bytes);
	for (i = 0; i < n; i++) {
		if (w->pointer_size == 8)
			bb_u64(&w->stacks, ips[i]);
		else
			bb_u32(&w->stacks, (uint32_t)ips[i]);
	}
	w->stack_count++;
	*id = e->id;
	return 0;
}

/* ---- labels (V6 activity ids) ----------------------------------------- */

static int intern_label(struct nt_writer *w, const uint8_t *act, const uint8_t *rel,
			uint32_t *id)
{
	size_t i;

	if ((!act || !memcmp(act, zero_guid, 16)) && (!rel || !memcmp(rel, zero_guid, 16))) {
		*id = 0;
		return 0;
	}
	act = act ? act : zero_guid;
	rel = rel ? rel : zero_guid;
	/* most recent first: a thread's consecutive events share activities */
	for (i = w->nlabels; i-- > 0;) {
		if (!memcmp(w->labels[i].act, act, 16) && !memcmp(w->labels[i].rel, rel, 16)) {
			*id = (uint32_t)(w->next_label - w->nlabels + i);
			return 0;
		}
		if (w->nlabels - i > 64)
			break;
	}
	if (array_grow((void **)&w->labels, &w->caplabels, w->nlabels, sizeof(*w->labels), 64))
		return -ENOMEM;
	if (bb_reserve(&w->labels_blk, 40))
		return -ENOMEM;
	memcpy(w->labels[w->nlabels].act, act, 16);
	memcpy(w->labels[w->nlabels].rel, rel, 16);
	w->nlabels++;
	/* label kinds: 1 ActivityId, 2 RelatedActivityId; 0x80 ends the list */
	bb_u8(&w->labels_blk, memcmp(rel, zero_guid, 16) ? 1 : 0x81);
	bb_put(&w->labels_blk, act, 16);
	if (memcmp(rel, zero_guid, 16)) {
		bb_u8(&w->labels_blk, 0x82);
		bb_put(&w->labels_blk, rel, 16);
	}
	w->label_count++;
	*id = w->next_label++;
	return 0;
}

/* ---- threads ---------------------------------------------------------- */

static uint64_t thread_key(const struct nt_writer *w, uint32_t pid, uint64_t tid)
{
	if (w->format == NT_FORMAT_V6)
		return ((uint64_t)pid << 32) ^ tid;
	return tid;
}

static int declare_thread_v6(struct nt_writer *w, struct wthread *t)
{
	uint8_t row[40];
	struct bytebuf rb = { row, 2, sizeof(row), 0 };
	uint16_t rs;

	t->index = w->next_index++;
	bb_varu64(&rb, t->index);
	bb_u8(&rb, 2);			/* OSProcessId */
	bb_varu64(&rb, t->pid);
	bb_u8(&rb, 3);			/* OSThreadId */
	bb_varu64(&rb, t->tid);
	rs = (uint16_t)(rb.len - 2);
	memcpy(row, &rs, 2);
	return bb_append(&w->threads_blk, row, rb.len) ? -ENOMEM : 0;
}

static struct wthread *get_thread(struct nt_writer *w, uint32_t pid, uint64_t tid)
{
	uint64_t key = thread_key(w, pid, tid), v;
	struct wthread *t;

	if (w->last_thread && w->last_thread->tid == tid && w->last_thread->pid == pid)
		return w->last_thread;
	if (hmap_get(&w->thread_map, key, &v))
		return w->last_thread = &w->threads[v];
	if (array_grow((void **)&w->threads, &w->capthreads, w->nthreads, sizeof(*w->threads), 64))
		return NULL;
	if (hmap_put(&w->thread_map, key, w->nthreads))
		return NULL;
	t = &w->threads[w->nthreads++];
	memset(t, 0, sizeof(*t));
	t->pid = pid;
	t->tid = tid;
	t->index = tid;
	if (w->format == NT_FORMAT_V6) {
		/* a declared V6 thread starts at sequence number 0 in the
		 * reader, so the file numbers from seq_base + 1 -> 1 */
		t->offset = 0u - w->seq_base;
		if (declare_thread_v6(w, t))
			return NULL;
	}
	return w->last_thread = t;
}

/* Another incarnation of a thread id restarted its numbering. */
static int restart_thread(struct nt_writer *w, struct wthread *t)
{
	if (w->format == NT_FORMAT_V6) {
		/* never reuse an index: the reader's removal logic cannot be
		 * trusted with it, and a fresh index starts a fresh count */
		t->in_file = false;
		t->offset = 0u - w->seq_base;
		t->has_raw = false;
		t->last_file = 0;
		return declare_thread_v6(w, t);
	}
	/* V5: keep the file's numbering continuous for this thread id */
	t->offset = t->last_file - w->seq_base;
	t->has_raw = false;
	return 0;
}

static int write_sp(struct nt_writer *w, uint64_t ts);

/* Maps the caller's sequence number to the file's, declaring the thread to
 * the reader ahead of time when its first events were dropped. */
static int prepare_thread(struct nt_writer *w, struct wthread *t, uint32_t seq,
			  uint64_t ts, uint32_t *file_seq)
{
	int err;

	if (t->has_raw && (int32_t)(seq - t->last_raw) <= 0) {
		err = restart_thread(w, t);
		if (err)
			return err;
	}
	if (w->format == NT_FORMAT_V5 && !t->in_file &&
	    (int32_t)(seq + t->offset - w->seq_base) > 1) {
		/* leading drops: a sequence point at seq_base first, so the gap
		 * up to this event counts as lost */
		t->last_file = w->seq_base + t->offset;
		t->in_file = true;
		err = write_sp(w, ts);
		if (err)
			return err;
	}
	t->in_file = true;
	t->has_raw = true;
	t->last_raw = seq;
	*file_seq = t->last_file = seq + t->offset;
	return 0;
}

/* ---- events ----------------------------------------------------------- */

int nt_writer_event(struct nt_writer *w, const struct nt_event *ev)
{
	struct wthread *t, *ct;
	struct hdr_in h;
	uint32_t stack = 0, label = 0;
	uint64_t cap_tid;
	size_t tidx = 0;
	uint32_t pid;
	int err;

	if (__builtin_expect(w->err != 0, 0))
		return w->err;
	if (!ev->meta_id || ev->meta_id >= w->next_meta || ev->payload_len > UINT16_MAX ||
	    (ev->payload_len && !ev->payload) || (ev->stack_depth && !ev->stack))
		return -EINVAL;
	pid = ev->pid ? ev->pid : w->pid;
	if (w->format == NT_FORMAT_V5 && pid != w->pid)
		return -EXDEV;		/* V5 carries one process; use V6 */
	if (w->format == NT_FORMAT_V6 && ev->tid > UINT32_MAX)
		return -EINVAL;
	cap_tid = ev->capture_tid ? ev->capture_tid : ev->tid;

	if (cap_tid != ev->tid) {
		/* the event's thread differs from the capture thread (an event
		 * written on behalf of another thread): look it up first, as a
		 * lookup may move the thread table */
		t = get_thread(w, pid, ev->tid);
		if (!t)
			return w->err = -ENOMEM;
		tidx = (size_t)(t - w->threads);
	}
	ct = get_thread(w, pid, cap_tid);
	if (!ct)
		return w->err = -ENOMEM;
	t = cap_tid != ev->tid ? &w->threads[tidx] : ct;
	err = prepare_thread(w, ct, ev->seq, ev->ts, &h.seq);
	if (err)
		return err;
	if (ev->stack_depth) {
		err = intern_stack(w, ev->stack, ev->stack_depth, &stack);
		if (err)
			return err;
	}
	if (w->format == NT_FORMAT_V6 && (ev->activity || ev->related)) {
		err = intern_label(w, ev->activity, ev->related, &label);
		if (err)
			return w->err = err;
	}

	h.meta = ev->meta_id;
	h.capture = ct->index;
	h.tid = t->index;
	h.cpu = ev->cpu;
	h.stack = stack;
	h.ts = ev->ts;
	h.act = ev->activity;
	h.rel = ev->related;
	h.label = label;
	h.size = ev->payload_len;
	h.sorted = ev->sorted;
	if (bb_reserve(&w->events.buf, NT_EVENT_HEADER_MAX + ev->payload_len))
		return w->err = -ENOMEM;
	put_header(&w->events, w->format, &h);
	bb_put(&w->events.buf, ev->payload, ev->payload_len);
	w->nevents++;
	if (ev->ts > w->last_ts)
		w->last_ts = ev->ts;
	if (w->events.buf.len >= w->block_bytes || w->stacks.len >= w->block_bytes ||
	    w->labels_blk.len >= w->block_bytes)
		return flush_all(w);
	return 0;
}

int nt_writer_note_seq(struct nt_writer *w, uint32_t pid, uint64_t capture_tid, uint32_t seq)
{
	struct wthread *t;

	if (w->err)
		return w->err;
	t = get_thread(w, pid ? pid : w->pid, capture_tid);
	if (!t)
		return w->err = -ENOMEM;
	if (!t->has_raw) {
		t->has_raw = true;
		t->last_raw = w->seq_base;
		t->last_file = w->seq_base + t->offset;
	}
	if (w->format == NT_FORMAT_V5 && !t->in_file && (int32_t)(seq - t->last_raw) > 0) {
		/* nothing of this thread was written, all of its attempts were
		 * dropped: a sequence point declares it at seq_base now, and
		 * the next one reports the gap */
		int err = write_sp(w, w->last_ts);

		if (err)
			return err;
	}
	if ((int32_t)(seq - t->last_raw) > 0) {
		t->last_file += seq - t->last_raw;
		t->last_raw = seq;
	}
	return 0;
}

/* ---- sequence points -------------------------------------------------- */

static int write_sp(struct nt_writer *w, uint64_t ts)
{
	struct bytebuf b = { 0 };
	size_t i, nlisted = 0;
	int err;

	err = flush_all(w);
	if (err)
		return err;
	if (ts < w->last_ts)
		ts = w->last_ts;
	if (bb_reserve(&b, 16 + w->nthreads * 16))
		return w->err = -ENOMEM;
	bb_u64(&b, ts);
	if (w->format == NT_FORMAT_V6)
		bb_u32(&b, 0);		/* flags: keep threads and metadata */
	bb_u32(&b, 0);			/* count, filled below */
	for (i = 0; i < w->nthreads; i++) {
		struct wthread *t = &w->threads[i];

		if (!t->in_file && !t->has_raw)
			continue;
		if (w->format == NT_FORMAT_V6) {
			bb_varu64(&b, t->index);
			bb_varu32(&b, t->last_file);
		} else {
			bb_u64(&b, t->index);
			bb_u32(&b, t->last_file);
		}
		t->in_file = true;
		nlisted++;
	}
	{
		uint32_t c = (uint32_t)nlisted;

		memcpy(b.p + (w->format == NT_FORMAT_V6 ? 12 : 8), &c, 4);
	}
	err = emit_block(w, "SPBlock", V6_SP, b.p, b.len);
	bb_free(&b);

	/* stacks and label lists do not survive a sequence point */
	w->stack_first = w->next_stack = 1;
	w->stack_count = 0;
	w->stacks.len = 8;
	w->stack_store.len = 0;
	w->nsents = 0;
	hmap_clear(&w->stack_map);
	w->label_first = w->next_label = 1;
	w->label_count = 0;
	w->labels_blk.len = 8;
	w->nlabels = 0;
	return err;
}

int nt_writer_flush(struct nt_writer *w)
{
	if (w->err)
		return w->err;
	return flush_all(w);
}

uint64_t nt_writer_unflushed(const struct nt_writer *w)
{
	return w->events.nevents;
}

int nt_writer_sequence_point(struct nt_writer *w, uint64_t ts)
{
	if (w->err)
		return w->err;
	return write_sp(w, ts);
}

int nt_writer_finish(struct nt_writer *w, uint64_t ts)
{
	int err;

	if (w->err)
		return w->err;
	err = write_sp(w, ts);
	if (err)
		return err;
	if (w->format == NT_FORMAT_V6) {
		err = emit_block(w, NULL, V6_END, NULL, 0);
	} else {
		static const uint8_t null_ref = 0x01;
		struct iovec iov = { (void *)&null_ref, 1 };

		err = emit(w, &iov, 1);
	}
	return err;
}
