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
 *
 * Cost per event. A drainer writes millions of events a second on the CPUs
 * its producers run on, nearly all of them plain (no stack, no activity
 * ids, on the thread they are about) and repeating their thread's event
 * type and CPU. Three ways in, each doing the same to the bytes: any event
 * (event_any()); a plain one (event_plain(): a thread cache, the header
 * compared field by field with the previous one); and the next events of
 * threads by token, in batches (nt_writer_events_next(): nothing looked
 * up, and a run of one thread's events costs a flag byte and a time delta
 * per header). Varints of up to five bytes are written as one word, thread
 * ids as bytes encoded once.
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
	/* stack, label, act_set or rel_set is set: a plain header must clear
	 * them (one test for the four) */
	bool extra;
};

struct wthread {
	uint32_t pid;
	uint64_t tid;
	uint64_t index;		/* V6 thread index; V5: tid */
	/* index as the LEB128 bytes a header carries (index_len of them;
	 * 0: it takes more than 8, encode it each time) */
	uint64_t index_var;
	uint8_t index_len;
	uint32_t last_raw;	/* last sequence number given by the caller */
	uint32_t last_file;	/* last sequence number written to the file */
	uint32_t offset;	/* file = raw + offset (V5 continuity across reuse) */
	bool in_file;		/* the reader knows this thread (event or SP) */
	bool has_raw;
	/* what nt_writer_events_next() repeats: the event type, CPU and order
	 * flag of the thread's last plain event; next_ok: its numbers are as
	 * that event left them */
	bool next_ok, next_sorted;
	uint32_t next_meta, next_cpu;
	/* the ids and CPU of a header that follows another thread's (capture
	 * index, next_cpu, index: switch_len bytes; 0: encode them) */
	uint8_t switch_len;
	uint8_t switch_bytes[24];
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

/* Threads found by key without a hash map probe: direct-mapped, a
 * collision just goes to the map; emptied when the thread table moves. */
#define NT_THREAD_CACHE 256u

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
	struct wthread *thread_cache[NT_THREAD_CACHE];
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

const char *nt_type_name(uint8_t t)
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
					"nettrace V6", sub, f[i].type, nt_type_name(f[i].type));
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
	/* capture and tid already encoded (wthread.index_var), or len 0 */
	uint64_t capture_var, tid_var;
	uint8_t capture_len, tid_len;
	bool sorted;
};

static const uint8_t zero_guid[16];

/* LEB128 at o, with room reserved; returns the end. The values a header
 * carries (time deltas, ids, sizes, and a sequence delta between two
 * threads, which is often 2^32 - 1) take up to five bytes: those go
 * without a loop. */
static inline __attribute__((always_inline)) uint8_t *var_put(uint8_t *o, uint64_t v)
{
	uint32_t x;

	if (__builtin_expect(v < 0x80, 1)) {
		*o = (uint8_t)v;
		return o + 1;
	}
	/* seven bits a byte, the continuation bit on all but the last, put
	 * together in a word and stored at once (the room reserved takes the
	 * bytes of the word past the encoding; what follows overwrites them) */
	x = (uint32_t)(v & 0x7f) | 0x80 | (uint32_t)((v << 1) & 0x7f00);
	if (v < 0x4000) {
		memcpy(o, &x, 2);
		return o + 2;
	}
	x |= 0x8000 | (uint32_t)((v << 2) & 0x7f0000);
	if (v < 0x200000) {
		memcpy(o, &x, 4);
		return o + 3;
	}
	x |= 0x800000 | (uint32_t)((v << 3) & 0x7f000000);
	if (v < 0x10000000) {
		memcpy(o, &x, 4);
		return o + 4;
	}
	if (v < 0x800000000ull) {
		x |= 0x80000000u;
		memcpy(o, &x, 4);
		o[4] = (uint8_t)(v >> 28);
		return o + 5;
	}
	do {
		*o++ = (uint8_t)(v | 0x80);
		v >>= 7;
	} while (v >= 0x80);
	*o++ = (uint8_t)v;
	return o;
}

/* A thread id or index: its encoding made once (an 8-byte store, the bytes
 * past the encoding are overwritten by what follows or lie in the room
 * reserved), else encoded now. */
static inline __attribute__((always_inline)) uint8_t *id_put(uint8_t *o, uint64_t v,
							     uint64_t var, unsigned int len)
{
	if (__builtin_expect(len != 0, 1)) {
		memcpy(o, &var, 8);
		return o + len;
	}
	return var_put(o, v);
}

static void index_set(struct wthread *t, uint64_t index)
{
	uint8_t tmp[16] = { 0 };
	size_t n = (size_t)(var_put(tmp, index) - tmp);

	t->index = index;
	t->index_len = n <= 8 ? (uint8_t)n : 0;
	memcpy(&t->index_var, tmp, 8);
	t->switch_len = 0;	/* made anew from the new index (next_token()) */
}

/* V5 activity ids: which of them differ from the previous header's
 * (HF_ACTIVITY, HF_RELATED). Only events that carry ids, or follow one
 * that did, get here; act and rel are never NULL. */
static unsigned int activity_flags_v5(const struct hdr_state *st, bool has_act, bool has_rel,
				      const uint8_t *act, const uint8_t *rel)
{
	unsigned int f = 0;

	if ((has_act || st->act_set) && memcmp(act, st->activity, 16) != 0)
		f |= HF_ACTIVITY;
	if ((has_rel || st->rel_set) && memcmp(rel, st->related, 16) != 0)
		f |= HF_RELATED;
	return f;
}

/* Writes the ids that differ and remembers them. */
static uint8_t *put_activity_v5(struct hdr_state *st, bool has_act, bool has_rel,
				const uint8_t *act, const uint8_t *rel, unsigned int f,
				uint8_t *o)
{
	if (f & HF_ACTIVITY) {
		memcpy(o, act, 16);
		o += 16;
	}
	if (f & HF_RELATED) {
		memcpy(o, rel, 16);
		o += 16;
	}
	if (has_act || st->act_set) {
		memcpy(st->activity, act, 16);
		st->act_set = memcmp(act, zero_guid, 16) != 0;
	}
	if (has_rel || st->rel_set) {
		memcpy(st->related, rel, 16);
		st->rel_set = memcmp(rel, zero_guid, 16) != 0;
	}
	return o;
}

/*
 * Encodes one compressed header; the caller reserved NT_EVENT_HEADER_MAX
 * (the largest header is 88 bytes; the word stores of id_put() and
 * var_put() reach a few bytes past a field, never past byte 96, and what
 * follows overwrites them). Fields that match the
 * previous header cost a compare, no encoding: inlined into the event path
 * so that h stays in registers.
 */
static inline __attribute__((always_inline)) void put_header(struct eblock *eb, int format,
							     const struct hdr_in *h)
{
	struct hdr_state *st = &eb->st;
	uint8_t *start = eb->buf.p + eb->buf.len, *o = start + 1;
	unsigned int flags = h->sorted ? HF_SORTED : 0;

	if (h->meta != st->meta) {
		flags |= HF_META;
		o = var_put(o, h->meta);
	}
	if (h->capture != st->capture || h->cpu != st->cpu || h->seq != st->seq + 1 ||
	    (h->meta == 0 && h->seq != st->seq)) {
		flags |= HF_SEQ;
		o = var_put(o, (uint32_t)(h->seq - st->seq - 1));
		o = id_put(o, h->capture, h->capture_var, h->capture_len);
		o = var_put(o, h->cpu);
	}
	if (h->tid != st->tid) {
		flags |= HF_TID;
		o = id_put(o, h->tid, h->tid_var, h->tid_len);
	}
	if (h->stack != st->stack) {
		flags |= HF_STACK;
		o = var_put(o, h->stack);
	}
	o = var_put(o, h->ts - st->ts);
	if (format == NT_FORMAT_V6) {
		if (h->label != st->label) {
			flags |= HF_ACTIVITY;
			o = var_put(o, h->label);
		}
	} else if (__builtin_expect(h->act || h->rel || st->act_set || st->rel_set, 0)) {
		const uint8_t *act = h->act ? h->act : zero_guid;
		const uint8_t *rel = h->rel ? h->rel : zero_guid;
		unsigned int f = activity_flags_v5(st, h->act, h->rel, act, rel);

		flags |= f;
		o = put_activity_v5(st, h->act, h->rel, act, rel, f, o);
	}
	if (h->size != st->size) {
		flags |= HF_SIZE;
		o = var_put(o, h->size);
	}
	*start = (uint8_t)flags;
	eb->buf.len = (size_t)(o - eb->buf.p);

	st->meta = h->meta;
	st->seq = h->seq;
	st->capture = h->capture;
	st->cpu = h->cpu;
	st->tid = h->tid;
	st->stack = h->stack;
	st->ts = h->ts;
	st->label = h->label;
	st->size = h->size;
	st->extra = h->stack || h->label || st->act_set || st->rel_set;
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
		struct hdr_in h = { .size = (uint32_t)p.len, .sorted = true };	/* ids: 0 */

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

	index_set(t, w->next_index++);
	bb_varu64(&rb, t->index);
	bb_u8(&rb, 2);			/* OSProcessId */
	bb_varu64(&rb, t->pid);
	bb_u8(&rb, 3);			/* OSThreadId */
	bb_varu64(&rb, t->tid);
	rs = (uint16_t)(rb.len - 2);
	memcpy(row, &rs, 2);
	return bb_append(&w->threads_blk, row, rb.len) ? -ENOMEM : 0;
}

static uint32_t thread_cache_slot(uint32_t pid, uint64_t tid)
{
	return (uint32_t)(((((uint64_t)pid << 32) ^ tid) * 0x9e3779b97f4a7c15ull) >> 56) &
	       (NT_THREAD_CACHE - 1);
}

static struct wthread *get_thread_slow(struct nt_writer *w, uint32_t pid, uint64_t tid)
{
	uint64_t key = thread_key(w, pid, tid), v;
	struct wthread *t;

	if (hmap_get(&w->thread_map, key, &v))
		goto out;
	if (w->nthreads == w->capthreads)
		memset(w->thread_cache, 0, sizeof(w->thread_cache));	/* the table moves */
	if (array_grow((void **)&w->threads, &w->capthreads, w->nthreads, sizeof(*w->threads), 64))
		return NULL;
	if (hmap_put(&w->thread_map, key, w->nthreads))
		return NULL;
	v = w->nthreads;
	t = &w->threads[w->nthreads++];
	memset(t, 0, sizeof(*t));
	t->pid = pid;
	t->tid = tid;
	index_set(t, tid);
	if (w->format == NT_FORMAT_V6) {
		/* a declared V6 thread starts at sequence number 0 in the
		 * reader, so the file numbers from seq_base + 1 -> 1 */
		t->offset = 0u - w->seq_base;
		if (declare_thread_v6(w, t))
			return NULL;
	}
out:
	return w->thread_cache[thread_cache_slot(pid, tid)] = &w->threads[v];
}

/* The thread's state (created when new), or NULL without memory. The
 * cache answers every event of a thread already seen, bar collisions. */
static inline struct wthread *get_thread(struct nt_writer *w, uint32_t pid, uint64_t tid)
{
	struct wthread *t = w->thread_cache[thread_cache_slot(pid, tid)];

	if (__builtin_expect(t && t->tid == tid && t->pid == pid, 1))
		return t;
	return get_thread_slow(w, pid, tid);
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

/* Copies a payload; the small ones every event carries with two (possibly
 * overlapping) fixed-size moves instead of a call. */
static inline __attribute__((always_inline)) void payload_put(uint8_t *o, const void *src,
							      size_t n)
{
	const uint8_t *p = src;

	if (n >= 16 && n <= 32) {
		memcpy(o, p, 16);
		memcpy(o + n - 16, p + n - 16, 16);
	} else if (n > 32 && n <= 64) {
		memcpy(o, p, 32);
		memcpy(o + n - 32, p + n - 32, 32);
	} else if (n) {
		memcpy(o, p, n);
	}
}

/* Any event: nt_writer_event() below takes the common ones itself. */
static __attribute__((noinline)) int event_any(struct nt_writer *w, const struct nt_event *ev)
{
	struct wthread *t, *ct;
	struct hdr_in h;
	uint32_t stack = 0, label = 0, len = ev->payload_len;
	uint64_t cap_tid;
	size_t tidx = 0;
	bool more = false;	/* a stack or label list grew too */
	uint32_t pid;
	int err;

	if (__builtin_expect(w->err != 0, 0))
		return w->err;
	if (!ev->meta_id || ev->meta_id >= w->next_meta || len > UINT16_MAX ||
	    (len && !ev->payload) || (ev->stack_depth && !ev->stack))
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
	ct->next_ok = false;	/* its numbers may move otherwise than by one */
	if (__builtin_expect(ct->in_file && ct->has_raw && (int32_t)(ev->seq - ct->last_raw) > 0,
			     1)) {
		/* the thread's next number: what prepare_thread() does then */
		ct->last_raw = ev->seq;
		h.seq = ct->last_file = ev->seq + ct->offset;
	} else {
		err = prepare_thread(w, ct, ev->seq, ev->ts, &h.seq);
		if (err)
			return err;
	}
	if (ev->stack_depth) {
		err = intern_stack(w, ev->stack, ev->stack_depth, &stack);
		if (err)
			return err;
		more = true;
	}
	if (w->format == NT_FORMAT_V6 && (ev->activity || ev->related)) {
		err = intern_label(w, ev->activity, ev->related, &label);
		if (err)
			return w->err = err;
		more = true;
	}

	h.meta = ev->meta_id;
	h.capture = ct->index;
	h.capture_var = ct->index_var;
	h.capture_len = ct->index_len;
	h.tid = t->index;
	h.tid_var = t->index_var;
	h.tid_len = t->index_len;
	h.cpu = ev->cpu;
	h.stack = stack;
	h.ts = ev->ts;
	h.act = ev->activity;
	h.rel = ev->related;
	h.label = label;
	h.size = len;
	h.sorted = ev->sorted;
	if (bb_reserve(&w->events.buf, NT_EVENT_HEADER_MAX + len))
		return w->err = -ENOMEM;
	put_header(&w->events, w->format, &h);
	payload_put(w->events.buf.p + w->events.buf.len, ev->payload, len);
	w->events.buf.len += len;
	w->nevents++;
	if (ev->ts > w->last_ts)
		w->last_ts = ev->ts;
	/* the stack and label blocks only grow with an event that has them */
	if (w->events.buf.len >= w->block_bytes ||
	    (more && (w->stacks.len >= w->block_bytes || w->labels_blk.len >= w->block_bytes)))
		return flush_all(w);
	return 0;
}

/* A plain header's last field, its flag byte at start, and the block's
 * time range and count; returns the header's end. */
static inline __attribute__((always_inline)) uint8_t *hdr_end(struct eblock *eb, uint8_t *start,
							      uint8_t *o, unsigned int flags,
							      uint32_t size, uint64_t ts)
{
	struct hdr_state *st = &eb->st;

	if (size != st->size) {
		flags |= HF_SIZE;
		o = var_put(o, size);
		st->size = size;
	}
	*start = (uint8_t)flags;
	if (ts < eb->min_ts)
		eb->min_ts = ts;
	if (ts > eb->max_ts)
		eb->max_ts = ts;
	eb->nevents++;
	return o;
}

/*
 * The header of a plain event (no stack, no activity ids, capture thread =
 * event thread t): what put_header() writes for it, with only what differs
 * from the previous header compared and stored.
 */
static inline __attribute__((always_inline)) uint8_t *put_header_plain(struct eblock *eb,
								       uint8_t *start, int format,
								       uint32_t meta, uint32_t seq,
								       uint32_t cpu,
								       const struct wthread *t,
								       uint64_t ts, uint32_t size,
								       bool sorted, bool use_switch)
{
	struct hdr_state *st = &eb->st;
	uint8_t *o = start + 1;
	unsigned int flags = sorted ? HF_SORTED : 0;
	uint64_t idx = t->index;

	if (meta != st->meta) {
		flags |= HF_META;
		o = var_put(o, meta);
		st->meta = meta;
	}
	if (idx != st->capture || cpu != st->cpu || seq != st->seq + 1) {
		flags |= HF_SEQ;
		o = var_put(o, (uint32_t)(seq - st->seq - 1));
		if (use_switch && idx != st->tid && t->switch_len) {
			/* after another thread's header (two CPUs' events
			 * interleave): capture, CPU and thread in one copy */
			flags |= HF_TID;
			memcpy(o, t->switch_bytes, sizeof(t->switch_bytes));
			o += t->switch_len;
			st->tid = idx;
		} else {
			o = id_put(o, idx, t->index_var, t->index_len);
			o = var_put(o, cpu);
		}
		st->capture = idx;
		st->cpu = cpu;
	}
	st->seq = seq;
	if (idx != st->tid) {
		flags |= HF_TID;
		o = id_put(o, idx, t->index_var, t->index_len);
		st->tid = idx;
	}
	if (__builtin_expect(st->extra, 0)) {
		if (st->stack) {
			flags |= HF_STACK;
			*o++ = 0;
			st->stack = 0;
		}
	}
	o = var_put(o, ts - st->ts);
	st->ts = ts;
	if (__builtin_expect(st->extra, 0)) {
		if (format == NT_FORMAT_V6) {
			if (st->label) {
				flags |= HF_ACTIVITY;
				*o++ = 0;
				st->label = 0;
			}
		} else if (st->act_set || st->rel_set) {
			unsigned int f = activity_flags_v5(st, false, false, zero_guid, zero_guid);

			flags |= f;
			o = put_activity_v5(st, false, false, zero_guid, zero_guid, f, o);
		}
		st->extra = false;	/* all four are clear now */
	}
	return hdr_end(eb, start, o, flags, size, ts);
}

/* The token nt_writer_events_next() takes for t, whose last event, just
 * written, was plain. */
static inline uint32_t next_token(struct nt_writer *w, struct wthread *t, uint32_t meta,
				  uint32_t cpu, bool sorted)
{
	t->next_ok = true;
	t->next_meta = meta;
	t->next_sorted = sorted;
	if (cpu != t->next_cpu || !t->switch_len) {
		uint8_t *o = t->switch_bytes;

		t->next_cpu = cpu;
		t->switch_len = 0;
		if (t->index_len) {
			o = id_put(o, t->index, t->index_var, t->index_len);
			o = var_put(o, cpu);
			o = id_put(o, t->index, t->index_var, t->index_len);
			t->switch_len = (uint8_t)(o - t->switch_bytes);
		}
	}
	return (uint32_t)(t - w->threads) + 1;
}

/* A plain event that the path below does not take (first of its thread, a
 * number that does not go up, a full block, an error): through
 * event_any(), with what nt_writer_event_plain() leaves out zeroed. */
static __attribute__((noinline)) int event_plain_any(struct nt_writer *w,
						     const struct nt_event *ev)
{
	struct nt_event e = {
		.meta_id = ev->meta_id, .seq = ev->seq, .tid = ev->tid, .cpu = ev->cpu,
		.ts = ev->ts, .payload = ev->payload, .payload_len = ev->payload_len,
		.sorted = ev->sorted,
	};
	struct wthread *t;
	int err = event_any(w, &e);
	uint64_t v;

	if (err) {
		/* the thread's number did not move: nothing may repeat it */
		if (hmap_get(&w->thread_map, thread_key(w, w->pid, ev->tid), &v))
			w->threads[v].next_ok = false;
		return err;
	}
	t = get_thread(w, w->pid, ev->tid);	/* event_any() made it */
	if (!t)
		return w->err = -ENOMEM;
	return (int)next_token(w, t, ev->meta_id, ev->cpu, ev->sorted);
}

/*
 * Nearly every event a drainer writes is plain, and of a thread already
 * known whose number goes up, with room in the block: this does for those
 * what event_any() does, with as little as the format needs. Anything else
 * goes to event_any() (plain_only: through event_plain_any()). Returns 0,
 * or with plain_only the thread's token, or a negative errno.
 */
static inline __attribute__((always_inline)) int event_plain(struct nt_writer *w,
							     const struct nt_event *ev,
							     bool plain_only)
{
	struct bytebuf *b = &w->events.buf;
	uint32_t len = ev->payload_len, seq = ev->seq;
	uint64_t tid = ev->tid;
	struct wthread *t;
	uint8_t *o;
	int err;

	/* the thread cache: a thread is there only once event_any() took it
	 * (a V6 tid over 32 bits never is) */
	t = w->thread_cache[thread_cache_slot(w->pid, tid)];
	if (__builtin_expect(w->err || ev->meta_id - 1 >= w->next_meta - 1 || len > UINT16_MAX ||
			     b->cap - b->len < NT_EVENT_HEADER_MAX + len || !t || t->tid != tid ||
			     t->pid != w->pid || !t->in_file || !t->has_raw ||
			     (int32_t)(seq - t->last_raw) <= 0, 0))
		return plain_only ? event_plain_any(w, ev) : event_any(w, ev);
	t->last_raw = seq;
	seq = t->last_file = seq + t->offset;
	o = put_header_plain(&w->events, b->p + b->len, w->format, ev->meta_id, seq, ev->cpu, t,
			     ev->ts, len, ev->sorted, false);
	payload_put(o, ev->payload, len);
	b->len = (size_t)(o + len - b->p);
	w->nevents++;
	if (ev->ts > w->last_ts)
		w->last_ts = ev->ts;
	err = b->len >= w->block_bytes ? flush_all(w) : 0;
	if (!plain_only) {
		t->next_ok = false;	/* a token repeats the plain entry's events only */
		return err;
	}
	if (err)
		return err;
	return (int)next_token(w, t, ev->meta_id, ev->cpu, ev->sorted);
}

int nt_writer_event(struct nt_writer *w, const struct nt_event *ev)
{
	if (__builtin_expect(ev->stack_depth || ev->activity || ev->related || ev->capture_tid ||
			     (ev->pid && ev->pid != w->pid) || (ev->payload_len && !ev->payload),
			     0))
		return event_any(w, ev);
	return event_plain(w, ev, false);
}

int nt_writer_event_plain(struct nt_writer *w, const struct nt_event *ev)
{
	return event_plain(w, ev, true);
}

/*
 * The threads' next events, in a row: nothing of an event but its token,
 * time and payload is read, nothing is looked up, and the checks and the
 * call are paid once per batch. An event of the thread whose event went
 * just before it in the block (a run of one thread) gets the shortest
 * header there is: a flag byte and a time delta.
 */
unsigned int nt_writer_events_next(struct nt_writer *w, const struct nt_next *ev, unsigned int n)
{
	struct eblock *eb = &w->events;
	struct bytebuf *b = &eb->buf;
	struct hdr_state *st = &eb->st;
	const struct wthread *prev = NULL;	/* the thread of the block's last header */
	uint64_t last_ts = w->last_ts;
	unsigned int i, done = 0;
	uint8_t *o, *end;

	if (w->err)
		return 0;
	/* the block's end in a register: b->len is brought up to date before
	 * anything else looks at it (a reserve, the flush, the return) */
	o = b->p + b->len;
	end = b->p + b->cap;
	for (i = 0; i < n; i++) {
		uint32_t len = ev[i].payload_len, seq;
		uint64_t ts = ev[i].ts;
		struct wthread *t;

		if (__builtin_expect(ev[i].token - 1 >= w->nthreads || len > UINT16_MAX ||
				     (len && !ev[i].payload), 0))
			break;
		t = &w->threads[ev[i].token - 1];
		if (__builtin_expect(!t->next_ok, 0))
			break;
		if (__builtin_expect((size_t)(end - o) < NT_EVENT_HEADER_MAX + len, 0)) {
			b->len = (size_t)(o - b->p);
			if (bb_reserve(b, NT_EVENT_HEADER_MAX + len)) {
				w->err = -ENOMEM;
				break;
			}
			o = b->p + b->len;
			end = b->p + b->cap;
		}
		t->last_raw++;
		seq = ++t->last_file;
		if (t == prev) {
			/* what put_header_plain() finds then: only the time, and
			 * maybe the size, differ */
			uint8_t *start = o;
			unsigned int flags = t->next_sorted ? HF_SORTED : 0;

			st->seq = seq;
			o = var_put(o + 1, ts - st->ts);
			st->ts = ts;
			o = hdr_end(eb, start, o, flags, len, ts);
		} else {
			o = put_header_plain(eb, o, w->format, t->next_meta, seq, t->next_cpu, t, ts,
					     len, t->next_sorted, true);
			prev = t;
		}
		payload_put(o, ev[i].payload, len);
		o += len;
		done++;
		if (ts > last_ts)
			last_ts = ts;
		if (__builtin_expect((size_t)(o - b->p) >= w->block_bytes, 0)) {
			b->len = (size_t)(o - b->p);
			w->nevents += done;
			w->last_ts = last_ts;
			done = 0;
			/* a failed flush loses the event that filled the block,
			 * as nt_writer_event() reports it */
			if (flush_all(w))
				return i;
			prev = NULL;	/* a new block starts from nothing */
			o = b->p + b->len;
			end = b->p + b->cap;
		}
	}
	b->len = (size_t)(o - b->p);
	w->nevents += done;
	w->last_ts = last_ts;
	return i;
}

int nt_writer_note_seq(struct nt_writer *w, uint32_t pid, uint64_t capture_tid, uint32_t seq)
{
	struct wthread *t;

	if (w->err)
		return w->err;
	t = get_thread(w, pid ? pid : w->pid, capture_tid);
	if (!t)
		return w->err = -ENOMEM;
	t->next_ok = false;	/* its numbers move on without an event */
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
