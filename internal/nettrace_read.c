// SPDX-License-Identifier: MIT
/*
 * nettrace reader, V4/V5 and V6.
 *
 * The input is untrusted: every length, count and offset is checked against
 * the enclosing block before use, and an error names the file offset and
 * what was expected there. Nothing recurses on input-controlled depth beyond
 * a fixed bound.
 *
 * Dispatch order and EventsLost follow TraceEvent's event cache: an event
 * flagged IsSorted first releases every queued event with a smaller
 * timestamp (in timestamp order), then itself; unsorted events wait in the
 * queue; a sequence point or the end of the stream releases everything.
 * Sequence numbers are checked per capture thread with 32-bit wrap-around
 * arithmetic, including the reader's quirks (the capture thread switches
 * only at sorted events; in V5 a previous number of 0 counts nothing).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hmap.h"
#include "nettrace_read.h"
#include "utf.h"

#define MAX_FIELD_DEPTH 16

struct rthread {
	int32_t seq;		/* TraceEvent's EventPipeThread.SequenceNumber */
};

struct v6thread {
	int64_t pid;
	int64_t tid;
};

struct label {
	uint8_t act[16];
	uint8_t rel[16];
};

struct cur {
	const uint8_t *p;	/* file base */
	size_t pos;		/* absolute offset */
	size_t end;		/* absolute end of the enclosing region */
};

struct nt_reader {
	const uint8_t *data;
	size_t len;
	void *map;		/* mmap'ed or malloc'ed file, owned */
	size_t map_len;
	bool map_is_malloc;

	struct nt_reader_info info;
	size_t pos;		/* next object / block */
	bool done;		/* end of stream reached */
	int err;
	char errmsg[256];

	struct nt_meta **metas;	/* in definition order */
	size_t nmetas, capmetas;
	struct hmap meta_by_id;	/* id -> index into metas */

	struct hmap stacks;	/* id -> (offset << 20 | bytes) */
	struct hmap threads;	/* capture id/index -> index into rthreads */
	struct rthread *rthreads;
	size_t nrthreads, caprthreads;
	struct hmap v6threads;	/* index -> index into v6t */
	struct v6thread *v6t;
	size_t nv6t, capv6t;
	struct hmap labels;	/* id -> index into labelv */
	struct label *labelv;
	size_t nlabelv, caplabelv;

	struct nt_rec *pending;	/* unsorted, waiting for dispatch */
	size_t npending, cappending;
	struct nt_rec *out;	/* ready, in dispatch order */
	size_t nout, outhead, capout;

	int64_t lost;
};

static int fail(struct nt_reader *r, size_t off, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int fail(struct nt_reader *r, size_t off, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (r->err)
		return r->err;
	n = snprintf(r->errmsg, sizeof(r->errmsg), "offset %zu (0x%zx): ", off, off);
	va_start(ap, fmt);
	vsnprintf(r->errmsg + n, sizeof(r->errmsg) - (size_t)n, fmt, ap);
	va_end(ap);
	r->err = -EBADMSG;
	return r->err;
}

static int fail_nomem(struct nt_reader *r)
{
	if (!r->err) {
		snprintf(r->errmsg, sizeof(r->errmsg), "out of memory");
		r->err = -ENOMEM;
	}
	return r->err;
}

/* ---- bounded cursor ---------------------------------------------------- */

#define NEED(r, c, n, what)                                                        \
	do {                                                                       \
		if ((c)->end - (c)->pos < (size_t)(n))                             \
			return fail((r), (c)->pos,                                 \
				    "expected %s (%zu bytes), only %zu left%s", (what), \
				    (size_t)(n), (c)->end - (c)->pos,              \
				    (c)->end == (r)->len ? " in the file" : " in the block"); \
	} while (0)

static uint8_t rd8(struct cur *c) { return c->p[c->pos++]; }

static uint16_t rd16(struct cur *c)
{
	uint16_t v;

	memcpy(&v, c->p + c->pos, 2);
	c->pos += 2;
	return v;
}

static uint32_t rd32(struct cur *c)
{
	uint32_t v;

	memcpy(&v, c->p + c->pos, 4);
	c->pos += 4;
	return v;
}

static uint64_t rd64(struct cur *c)
{
	uint64_t v;

	memcpy(&v, c->p + c->pos, 8);
	c->pos += 8;
	return v;
}

static int rdvar(struct nt_reader *r, struct cur *c, uint64_t *v, int maxbytes,
		 const char *what)
{
	uint64_t x = 0;
	int i;

	*v = 0;
	for (i = 0; i < maxbytes; i++) {
		uint8_t b;

		if (c->pos >= c->end)
			return fail(r, c->pos, "truncated varint (%s)", what);
		b = c->p[c->pos++];
		x |= (uint64_t)(b & 0x7f) << (7 * i);
		if (!(b & 0x80)) {
			*v = x;
			return 0;
		}
	}
	return fail(r, c->pos, "varint too long (%s)", what);
}

static int rdvar32(struct nt_reader *r, struct cur *c, uint32_t *v, const char *what)
{
	uint64_t x = 0;
	int err = rdvar(r, c, &x, 5, what);

	*v = (uint32_t)x;
	return err;
}

static int rdvar64(struct nt_reader *r, struct cur *c, uint64_t *v, const char *what)
{
	return rdvar(r, c, v, 10, what);
}

/* Reads a NUL-terminated UTF-16LE string into a new UTF-8 C string. */
static int rd_utf16z(struct nt_reader *r, struct cur *c, char **out, const char *what)
{
	size_t units = utf16le_strlen(c->p + c->pos, c->end - c->pos);
	struct bytebuf b = { 0 };

	if (units == SIZE_MAX)
		return fail(r, c->pos, "unterminated UTF-16 string (%s)", what);
	utf16le_to_utf8(&b, c->p + c->pos, units);
	c->pos += 2 * units + 2;
	if (bb_append(&b, "", 1)) {
		bb_free(&b);
		return fail_nomem(r);
	}
	*out = (char *)b.p;
	return 0;
}

static int rd_str8(struct nt_reader *r, struct cur *c, char **out, const char *what)
{
	uint32_t n;
	int err = rdvar32(r, c, &n, what);

	if (err)
		return err;
	NEED(r, c, n, what);
	*out = malloc((size_t)n + 1);
	if (!*out)
		return fail_nomem(r);
	memcpy(*out, c->p + c->pos, n);
	(*out)[n] = 0;
	c->pos += n;
	return 0;
}

/* ---- metadata ---------------------------------------------------------- */

static void free_fields(struct nt_rfield *f, uint16_t n);

static void free_type(struct nt_rtype *t)
{
	if (t->elem) {
		free_type(t->elem);
		free(t->elem);
	}
	free_fields(t->fields, t->nfields);
}

static void free_fields(struct nt_rfield *f, uint16_t n)
{
	uint16_t i;

	if (!f)
		return;
	for (i = 0; i < n; i++) {
		free(f[i].name);
		free_type(&f[i].type);
	}
	free(f);
}

static void free_meta(struct nt_meta *m)
{
	if (!m)
		return;
	free(m->provider);
	free(m->raw_name);
	free(m->name);
	free_fields(m->fields, m->nfields);
	free(m);
}

enum layout { L_V1, L_V2, L_V6 };

static int parse_fields(struct nt_reader *r, struct cur *c, enum layout l, int depth,
			struct nt_rfield **out, uint16_t *nout);

/* Returns 1 for a type TraceEvent does not accept in this layout (the V5
 * reader then drops the event's fields), 0 when parsed, <0 on error. */
static int parse_type(struct nt_reader *r, struct cur *c, enum layout l, int depth,
		      struct nt_rtype *t)
{
	uint32_t code;
	int err;

	if (depth > MAX_FIELD_DEPTH)
		return fail(r, c->pos, "field types nested deeper than %d", MAX_FIELD_DEPTH);
	if (l == L_V6) {
		NEED(r, c, 1, "type code");
		code = rd8(c);
	} else {
		NEED(r, c, 4, "type code");
		code = rd32(c);
	}
	t->code = (uint8_t)code;
	switch (code) {
	case NT_BOOL: case NT_CHAR: case NT_I8: case NT_U8: case NT_I16: case NT_U16:
	case NT_I32: case NT_U32: case NT_I64: case NT_U64: case NT_F32: case NT_F64:
	case NT_DECIMAL: case NT_DATETIME: case NT_GUID: case NT_STRING:
		return 0;
	case NT_OBJECT:
		return parse_fields(r, c, l, depth + 1, &t->fields, &t->nfields);
	case NT_ARRAY:
		if (l == L_V1)
			return 1;
		t->elem = calloc(1, sizeof(*t->elem));
		if (!t->elem)
			return fail_nomem(r);
		err = parse_type(r, c, l, depth + 1, t->elem);
		return err;
	case NT_VARINT: case NT_VARUINT:
		return l == L_V6 ? 0 : 1;
	default:
		if (l == L_V6)
			return fail(r, c->pos, "unsupported field type code %u", code);
		return 1;
	}
}

static int parse_fields(struct nt_reader *r, struct cur *c, enum layout l, int depth,
			struct nt_rfield **out, uint16_t *nout)
{
	struct nt_rfield *f;
	uint32_t n, i;
	int err = 0;

	*out = NULL;
	*nout = 0;
	if (l == L_V6) {
		NEED(r, c, 2, "field count");
		n = rd16(c);
	} else {
		NEED(r, c, 4, "field count");
		n = rd32(c);
		if (n > 65535)
			return 1;
	}
	/* every field takes at least 3 bytes: a cheap bound on the count */
	if ((size_t)n * 3 > c->end - c->pos)
		return l == L_V6 ? fail(r, c->pos, "field count %u exceeds the metadata", n) : 1;
	if (!n)
		return 0;
	f = calloc(n, sizeof(*f));
	if (!f)
		return fail_nomem(r);
	*out = f;
	*nout = (uint16_t)n;
	for (i = 0; i < n && !err; i++) {
		if (l == L_V6) {
			struct cur fc = *c;
			uint16_t size;

			NEED(r, c, 2, "field size");
			size = rd16(c);
			NEED(r, c, size, "field definition");
			fc.pos = c->pos;
			fc.end = c->pos + size;
			c->pos += size;
			err = rd_str8(r, &fc, &f[i].name, "field name");
			if (!err)
				err = parse_type(r, &fc, l, depth, &f[i].type);
		} else if (l == L_V2) {
			struct cur fc = *c;
			int32_t size;

			NEED(r, c, 4, "field size");
			size = (int32_t)rd32(c);
			if (size < 4 || (size_t)(size - 4) > c->end - c->pos)
				return 1;
			fc.pos = c->pos;
			fc.end = c->pos + (size_t)(size - 4);
			c->pos += (size_t)(size - 4);
			err = rd_utf16z(r, &fc, &f[i].name, "field name");
			if (!err)
				err = parse_type(r, &fc, l, depth, &f[i].type);
		} else {
			err = parse_type(r, c, l, depth, &f[i].type);
			if (!err)
				err = rd_utf16z(r, c, &f[i].name, "field name");
		}
	}
	return err;
}

static bool ends_with_ci(const char *s, const char *suf)
{
	size_t a = strlen(s), b = strlen(suf);

	return a >= b && !strcasecmp(s + a - b, suf);
}

static const char *const opcode_names[10] = {
	"Info", "Start", "Stop", "DataCollectionStart", "DataCollectionStop",
	"Extension", "Reply", "Resume", "Suspend", "Transfer",
};

/*
 * TraceEvent's transforms after reading metadata, and its event naming:
 * without an explicit opcode a name ending in Start/Stop implies opcode 1/2;
 * a Start/Stop suffix matching the opcode is cut from the task name; the
 * event name is the task name, plus "/" and the opcode name when the opcode
 * is not 0. Nameless CLR events take their name and opcode from the
 * runtime's manifest; other nameless events are "EventID(N)".
 */
static int finish_meta(struct nt_reader *r, struct nt_meta *m, bool guid_given,
		       bool opcode_given)
{
	struct bytebuf b = { 0 };
	const char *clr;
	char *task;
	size_t n;

	if (!guid_given)
		nt_provider_guid(m->provider, m->guid);
	if (!m->raw_name)
		m->raw_name = strdup("");
	if (!m->raw_name)
		return fail_nomem(r);
	if (!m->raw_name[0]) {
		uint8_t op = 0;

		clr = nt_clr_event_name(m->provider, m->event_id, &op);
		if (clr) {
			m->opcode = op;
			m->name = strdup(clr);
		} else {
			bb_printf(&b, "EventID(%u)", m->event_id);
			bb_append(&b, "", 1);
			m->name = (char *)b.p;
		}
		return m->name ? 0 : fail_nomem(r);
	}
	task = strdup(m->raw_name);
	if (!task)
		return fail_nomem(r);
	if (!opcode_given) {
		if (ends_with_ci(task, "Start"))
			m->opcode = 1;
		else if (ends_with_ci(task, "Stop"))
			m->opcode = 2;
	}
	n = strlen(task);
	if (m->opcode == 1 && ends_with_ci(task, "Start"))
		task[n - 5] = 0;
	else if (m->opcode == 2 && ends_with_ci(task, "Stop"))
		task[n - 4] = 0;
	if (m->opcode == 0) {
		m->name = task;
		return 0;
	}
	if (m->opcode < 10)
		bb_printf(&b, "%s/%s", task, opcode_names[m->opcode]);
	else
		bb_printf(&b, "%s/%u", task, m->opcode);
	bb_append(&b, "", 1);
	free(task);
	m->name = (char *)b.p;
	return m->name ? 0 : fail_nomem(r);
}

static int add_meta(struct nt_reader *r, struct nt_meta *m, size_t off)
{
	if (hmap_get(&r->meta_by_id, m->id, NULL)) {
		int err = fail(r, off, "metadata id %u is already in use", m->id);

		free_meta(m);
		return err;
	}
	if (array_grow((void **)&r->metas, &r->capmetas, r->nmetas, sizeof(*r->metas), 64)) {
		free_meta(m);
		return fail_nomem(r);
	}
	if (hmap_put(&r->meta_by_id, m->id, r->nmetas)) {
		free_meta(m);
		return fail_nomem(r);
	}
	r->metas[r->nmetas++] = m;
	return 0;
}

/* V4/V5: the payload of a metadata record in a MetadataBlock. */
static int parse_meta_v5(struct nt_reader *r, struct cur *c)
{
	struct nt_meta *m = calloc(1, sizeof(*m));
	size_t start = c->pos;
	bool opcode_given = false;
	int err;

	if (!m)
		return fail_nomem(r);
	if (c->end - c->pos < 4) {
		free(m);
		return fail(r, c->pos, "expected metadata id");
	}
	m->id = rd32(c);
	if (!m->id) {
		free(m);
		return fail(r, start, "metadata id 0 is reserved");
	}
	err = rd_utf16z(r, c, &m->provider, "provider name");
	if (!err && c->end - c->pos < 4)
		err = fail(r, c->pos, "expected event id");
	if (!err) {
		m->event_id = (uint16_t)rd32(c);
		err = rd_utf16z(r, c, &m->raw_name, "event name");
	}
	if (!err && c->end - c->pos < 16)
		err = fail(r, c->pos, "expected keywords, version and level (16 bytes)");
	if (err) {
		free_meta(m);
		return err;
	}
	m->keywords = rd64(c);
	m->version = (uint8_t)rd32(c);
	m->level = (uint8_t)rd32(c);

	if (c->pos < c->end) {
		err = parse_fields(r, c, L_V1, 0, &m->fields, &m->nfields);
		if (err < 0) {
			free_meta(m);
			return err;
		}
		if (err > 0) {
			/* TraceEvent drops the fields of unparsable metadata */
			free_fields(m->fields, m->nfields);
			m->fields = NULL;
			m->nfields = 0;
			c->pos = c->end;
		} else {
			m->has_fields = true;
		}
		/* tags: i32 length, u8 kind, payload */
		while (c->pos < c->end) {
			struct cur tc = *c;
			int32_t tlen;
			uint8_t kind;

			if (c->end - c->pos < 5) {
				free_meta(m);
				return fail(r, c->pos, "truncated metadata tag");
			}
			tlen = (int32_t)rd32(c);
			kind = rd8(c);
			if (tlen < 0 || (size_t)tlen > c->end - c->pos) {
				free_meta(m);
				return fail(r, c->pos - 5, "metadata tag length %d exceeds the record", tlen);
			}
			tc.pos = c->pos;
			tc.end = c->pos + (size_t)tlen;
			c->pos += (size_t)tlen;
			if (kind == 1 && tlen >= 1) {
				m->opcode = tc.p[tc.pos];
				opcode_given = true;
			} else if (kind == 2) {
				struct nt_rfield *f;
				uint16_t nf;

				err = parse_fields(r, &tc, L_V2, 0, &f, &nf);
				if (err < 0) {
					free_fields(f, nf);
					free_meta(m);
					return err;
				}
				free_fields(m->fields, m->nfields);
				m->fields = err ? NULL : f;
				m->nfields = err ? 0 : nf;
				m->has_fields = !err;
				if (err)
					free_fields(f, nf);
				err = 0;
			}
		}
	}
	err = finish_meta(r, m, false, opcode_given);
	if (err) {
		free_meta(m);
		return err;
	}
	return add_meta(r, m, start);
}

/* V6: one metadata row (after its u16 size). */
static int parse_meta_v6(struct nt_reader *r, struct cur *c)
{
	struct nt_meta *m = calloc(1, sizeof(*m));
	size_t start = c->pos;
	bool guid_given = false, opcode_given = false;
	uint32_t v;
	int err;

	if (!m)
		return fail_nomem(r);
	err = rdvar32(r, c, &m->id, "metadata id");
	if (!err && !m->id)
		err = fail(r, start, "metadata id 0 is reserved");
	if (!err)
		err = rd_str8(r, c, &m->provider, "provider name");
	if (!err)
		err = rdvar32(r, c, &v, "event id");
	if (!err) {
		m->event_id = (uint16_t)v;
		err = rd_str8(r, c, &m->raw_name, "event name");
	}
	if (!err)
		err = parse_fields(r, c, L_V6, 0, &m->fields, &m->nfields);
	if (!err) {
		struct cur oc = *c;
		uint16_t osz;

		m->has_fields = true;
		if (c->end - c->pos < 2) {
			err = fail(r, c->pos, "expected optional metadata size");
			goto out;
		}
		osz = rd16(c);
		if (osz > c->end - c->pos) {
			err = fail(r, c->pos - 2, "optional metadata size %u exceeds the row", osz);
			goto out;
		}
		oc.pos = c->pos;
		oc.end = c->pos + osz;
		c->pos = oc.end;
		while (!err && oc.pos < oc.end) {
			uint8_t kind = rd8(&oc);
			char *s1 = NULL, *s2 = NULL;

			switch (kind) {
			case 1: case 8: case 9:
				if (oc.pos >= oc.end) {
					err = fail(r, oc.pos, "truncated optional metadata");
					break;
				}
				v = rd8(&oc);
				opcode_given |= kind == 1;
				if (kind == 1)
					m->opcode = (uint8_t)v;
				else if (kind == 8)
					m->level = (uint8_t)v;
				else
					m->version = (uint8_t)v;
				break;
			case 3:
				if (oc.end - oc.pos < 8) {
					err = fail(r, oc.pos, "truncated keywords");
					break;
				}
				m->keywords = rd64(&oc);
				break;
			case 4: case 5:
				err = rd_str8(r, &oc, &s1, "message or description");
				break;
			case 6:
				err = rd_str8(r, &oc, &s1, "attribute key");
				if (!err)
					err = rd_str8(r, &oc, &s2, "attribute value");
				break;
			case 7:
				if (oc.end - oc.pos < 16) {
					err = fail(r, oc.pos, "truncated provider GUID");
					break;
				}
				memcpy(m->guid, oc.p + oc.pos, 16);
				oc.pos += 16;
				guid_given = memcmp(m->guid, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 16);
				break;
			default:
				err = fail(r, oc.pos - 1, "unknown optional metadata kind %u", kind);
			}
			free(s1);
			free(s2);
		}
	}
out:
	if (!err)
		err = finish_meta(r, m, guid_given, opcode_given);
	if (err) {
		free_meta(m);
		return err;
	}
	return add_meta(r, m, start);
}

/* ---- event headers ----------------------------------------------------- */

struct hdr {
	uint32_t meta;
	int32_t seq;
	uint64_t capture;
	uint64_t thread;
	uint32_t cpu;
	uint32_t stack;
	uint64_t ts;
	uint32_t label;
	uint8_t act[16];
	uint8_t rel[16];
	uint32_t size;
	bool sorted;
};

static int read_header(struct nt_reader *r, struct cur *c, bool compressed, struct hdr *h)
{
	bool v6 = r->info.format == 6;
	uint64_t v;
	int err = 0;

	if (!compressed) {
		size_t need = v6 ? 52 : 4 + 4 + 4 + 8 + 8 + 4 + 4 + 8 + 16 + 16 + 4;
		uint32_t m;

		NEED(r, c, need, "uncompressed event header");
		c->pos += 4;			/* EventSize: unreliable, unused */
		m = rd32(c);
		h->meta = m & 0x7fffffff;
		h->sorted = !(m & 0x80000000);
		h->seq = (int32_t)rd32(c);
		if (v6) {
			h->thread = rd64(c);
			h->capture = rd64(c);
		} else {
			h->thread = rd64(c);
			h->capture = rd64(c);
		}
		h->cpu = rd32(c);
		h->stack = rd32(c);
		h->ts = rd64(c);
		if (v6) {
			h->label = rd32(c);
		} else {
			memcpy(h->act, c->p + c->pos, 16);
			memcpy(h->rel, c->p + c->pos + 16, 16);
			c->pos += 32;
		}
		h->size = rd32(c);
		return 0;
	}

	NEED(r, c, 1, "event header flags");
	{
		uint8_t f = rd8(c);
		uint32_t u32;

		if (f & 0x01) {
			err = rdvar32(r, c, &h->meta, "metadata id");
			if (err)
				return err;
		}
		if (f & 0x02) {
			err = rdvar32(r, c, &u32, "sequence delta");
			if (!err)
				h->seq = (int32_t)((uint32_t)h->seq + u32 + 1);
			if (!err)
				err = rdvar64(r, c, &h->capture, "capture thread");
			if (!err)
				err = rdvar32(r, c, &h->cpu, "processor number");
			if (err)
				return err;
		} else if (h->meta != 0) {
			h->seq = (int32_t)((uint32_t)h->seq + 1);
		}
		if (f & 0x04) {
			err = rdvar64(r, c, &h->thread, "thread");
			if (err)
				return err;
		}
		if (f & 0x08) {
			err = rdvar32(r, c, &h->stack, "stack id");
			if (err)
				return err;
		}
		err = rdvar64(r, c, &v, "timestamp delta");
		if (err)
			return err;
		h->ts += v;
		if (v6) {
			if (f & 0x10) {
				err = rdvar32(r, c, &h->label, "label list id");
				if (err)
					return err;
			}
		} else {
			if (f & 0x10) {
				NEED(r, c, 16, "activity id");
				memcpy(h->act, c->p + c->pos, 16);
				c->pos += 16;
			}
			if (f & 0x20) {
				NEED(r, c, 16, "related activity id");
				memcpy(h->rel, c->p + c->pos, 16);
				c->pos += 16;
			}
		}
		h->sorted = (f & 0x40) != 0;
		if (f & 0x80) {
			err = rdvar32(r, c, &h->size, "payload size");
			if (err)
				return err;
		}
	}
	return 0;
}

/* ---- threads and sequence numbers (TraceEvent's model) ----------------- */

static struct rthread *get_or_add_thread(struct nt_reader *r, uint64_t id, int32_t seq)
{
	uint64_t v;

	if (hmap_get(&r->threads, id, &v))
		return &r->rthreads[v];
	if (array_grow((void **)&r->rthreads, &r->caprthreads, r->nrthreads, sizeof(*r->rthreads), 64))
		return NULL;
	if (hmap_put(&r->threads, id, r->nrthreads))
		return NULL;
	r->rthreads[r->nrthreads].seq = seq;
	return &r->rthreads[r->nrthreads++];
}

static void notify_dropped(struct nt_reader *r, int32_t last, int32_t expected)
{
	if (r->info.format >= 6 || last != 0) {
		int32_t d = (int32_t)((uint32_t)expected - (uint32_t)last);

		if (d < 0)
			d = INT32_MAX;
		if (d > 0)
			r->lost += d;
	}
}

/* ---- dispatch ---------------------------------------------------------- */

static int push_out(struct nt_reader *r, const struct nt_rec *rec)
{
	if (array_grow((void **)&r->out, &r->capout, r->nout, sizeof(*r->out), 1024))
		return fail_nomem(r);
	r->out[r->nout++] = *rec;
	return 0;
}

static int cmp_rec_ts(const void *a, const void *b)
{
	const struct nt_rec *x = a, *y = b;

	if (x->ts != y->ts)
		return x->ts < y->ts ? -1 : 1;
	/* queue order among equal timestamps */
	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Releases queued events with ts < stop, in timestamp order. */
static int sort_and_dispatch(struct nt_reader *r, uint64_t stop, bool all)
{
	size_t i, k = 0, start = r->nout;
	int err = 0;

	if (!r->npending)
		return 0;
	for (i = 0; i < r->npending; i++) {
		if (all || r->pending[i].ts < stop)
			err = err ? err : push_out(r, &r->pending[i]);
		else
			r->pending[k++] = r->pending[i];
	}
	r->npending = k;
	if (err)
		return err;
	/* nothing released (every event at or after stop): r->out may still
	 * be NULL, and NULL + 0 is undefined */
	if (r->nout > start)
		qsort(r->out + start, r->nout - start, sizeof(*r->out), cmp_rec_ts);
	return 0;
}

static int resolve_thread_v6(struct nt_reader *r, uint64_t index, size_t off,
			     int64_t *pid, int64_t *tid)
{
	uint64_t v;

	if (!hmap_get(&r->v6threads, index, &v))
		return fail(r, off, "reference to unknown thread index %llu",
			    (unsigned long long)index);
	*pid = r->v6t[v].pid;
	*tid = r->v6t[v].tid;
	return 0;
}

static bool clr_stackless(const struct nt_meta *m)
{
	/* TraceEvent ignores stacks on CLR rundown and method bookkeeping events */
	if (!strcmp(m->provider, "Microsoft-Windows-DotNETRuntimeRundown"))
		return true;
	return !strcmp(m->provider, "Microsoft-Windows-DotNETRuntime") &&
	       ((m->event_id >= 140 && m->event_id <= 144) || m->event_id == 190);
}

static int parse_event_block(struct nt_reader *r, struct cur *c)
{
	struct hdr h;
	struct rthread *th;
	uint16_t hsize, flags;
	bool compressed;

	NEED(r, c, 4, "event block header");
	hsize = rd16(c);
	flags = rd16(c);
	if (hsize < 20)
		return fail(r, c->pos - 4, "event block header size %u is below 20", hsize);
	NEED(r, c, (size_t)hsize - 4, "event block header");
	c->pos += (size_t)hsize - 4;
	compressed = flags & 1;
	if (c->pos >= c->end)
		return fail(r, c->pos, "event block holds no event");

	memset(&h, 0, sizeof(h));
	{
		/* the reader takes the first event's capture thread as current */
		struct cur t = *c;
		struct hdr fh = h;
		int err = read_header(r, &t, compressed, &fh);

		if (err)
			return err;
		th = get_or_add_thread(r, fh.capture, (int32_t)((uint32_t)fh.seq - 1));
		if (!th)
			return fail_nomem(r);
	}

	while (c->pos < c->end) {
		struct nt_rec rec;
		uint64_t v;
		size_t off = c->pos;
		int err = read_header(r, c, compressed, &h);

		if (err)
			return err;
		if (h.size > c->end - c->pos)
			return fail(r, off, "event payload of %u bytes runs past the block end (%zu bytes left)",
				    h.size, c->end - c->pos);
		if (h.sorted) {
			th = get_or_add_thread(r, h.capture, (int32_t)((uint32_t)h.seq - 1));
			if (!th)
				return fail_nomem(r);
		}
		notify_dropped(r, th->seq, (int32_t)((uint32_t)h.seq - 1));
		th->seq = h.seq;

		memset(&rec, 0, sizeof(rec));
		if (!hmap_get(&r->meta_by_id, h.meta, &v))
			return fail(r, off, "event references undefined metadata id %u", h.meta);
		rec.meta = r->metas[v];
		rec.seq = (uint32_t)h.seq;
		rec.capture_thread = h.capture;
		rec.cpu = h.cpu;
		rec.ts = h.ts;
		rec.payload = c->p + c->pos;
		rec.payload_len = h.size;
		rec.sorted = h.sorted;
		rec.offset = off;
		if (r->info.format == 6) {
			int64_t cpid, ctid;

			err = resolve_thread_v6(r, h.capture, off, &cpid, &ctid);
			if (!err)
				err = resolve_thread_v6(r, h.thread, off, &rec.pid, &rec.tid);
			if (err)
				return err;
			if (h.label) {
				if (!hmap_get(&r->labels, h.label, &v))
					return fail(r, off, "reference to undefined label list %u", h.label);
				memcpy(rec.activity, r->labelv[v].act, 16);
				memcpy(rec.related, r->labelv[v].rel, 16);
			}
		} else {
			rec.pid = r->info.pid;
			rec.tid = (int32_t)h.thread;	/* EVENT_RECORD holds 32 bits */
			memcpy(rec.activity, h.act, 16);
			memcpy(rec.related, h.rel, 16);
		}
		if (h.stack && hmap_get(&r->stacks, h.stack, &v) && !clr_stackless(rec.meta)) {
			rec.stack = c->p + (v >> 20);
			rec.stack_bytes = (uint32_t)(v & 0xfffff);
		}
		c->pos += h.size;

		if (h.sorted) {
			err = sort_and_dispatch(r, h.ts, false);
			if (!err)
				err = push_out(r, &rec);
		} else {
			if (array_grow((void **)&r->pending, &r->cappending, r->npending, sizeof(*r->pending), 1024))
				return fail_nomem(r);
			r->pending[r->npending++] = rec;
		}
		if (err)
			return err;
	}
	return 0;
}

/* A V6 row (metadata, thread): u16 size, then the row, which *row covers;
 * c moves past it. */
static int v6_row(struct nt_reader *r, struct cur *c, struct cur *row, const char *size_what,
		  const char *what)
{
	uint16_t rs;

	NEED(r, c, 2, size_what);
	rs = rd16(c);
	NEED(r, c, rs, what);
	*row = (struct cur){ .p = c->p, .pos = c->pos, .end = c->pos + rs };
	c->pos += rs;
	return 0;
}

static int parse_metadata_block(struct nt_reader *r, struct cur *c)
{
	if (r->info.format == 6) {
		uint16_t hsize;

		NEED(r, c, 2, "metadata block header size");
		hsize = rd16(c);
		NEED(r, c, hsize, "metadata block header");
		c->pos += hsize;
		while (c->pos < c->end) {
			struct cur rc;
			int err = v6_row(r, c, &rc, "metadata row size", "metadata row");

			if (!err)
				err = parse_meta_v6(r, &rc);
			if (err)
				return err;
		}
		return 0;
	} else {
		struct hdr h;
		uint16_t hsize, flags;

		NEED(r, c, 4, "metadata block header");
		hsize = rd16(c);
		flags = rd16(c);
		if (hsize < 20)
			return fail(r, c->pos - 4, "metadata block header size %u is below 20", hsize);
		NEED(r, c, (size_t)hsize - 4, "metadata block header");
		c->pos += (size_t)hsize - 4;
		memset(&h, 0, sizeof(h));
		while (c->pos < c->end) {
			struct cur mc = *c;
			size_t off = c->pos;
			int err = read_header(r, c, flags & 1, &h);

			if (err)
				return err;
			if (h.size > c->end - c->pos)
				return fail(r, off, "metadata payload of %u bytes runs past the block end",
					    h.size);
			mc.pos = c->pos;
			mc.end = c->pos + h.size;
			c->pos += h.size;
			err = parse_meta_v5(r, &mc);
			if (err)
				return err;
		}
		return 0;
	}
}

static int parse_stack_block(struct nt_reader *r, struct cur *c)
{
	uint32_t id, count;

	NEED(r, c, 8, "stack block header");
	id = rd32(c);
	count = rd32(c);
	(void)count;		/* the reader walks to the block end */
	while (c->pos < c->end) {
		uint32_t size;

		NEED(r, c, 4, "stack size");
		size = rd32(c);
		NEED(r, c, size, "stack addresses");
		if (size > 0xfffff)
			return fail(r, c->pos - 4, "stack of %u bytes is larger than 1 MiB", size);
		if (hmap_get(&r->stacks, id, NULL))
			return fail(r, c->pos - 4, "stack id %u defined twice", id);
		if (c->pos > (SIZE_MAX >> 21))
			return fail(r, c->pos, "file too large for the stack table");
		if (hmap_put(&r->stacks, id, ((uint64_t)c->pos << 20) | size))
			return fail_nomem(r);
		c->pos += size;
		id++;
	}
	return 0;
}

static int parse_sp_block(struct nt_reader *r, struct cur *c)
{
	uint32_t flags = 0, n, i;
	int err;

	NEED(r, c, 8, "sequence point timestamp");
	c->pos += 8;
	if (r->info.format == 6) {
		NEED(r, c, 8, "sequence point flags and count");
		flags = rd32(c);
	} else {
		NEED(r, c, 4, "sequence point thread count");
	}
	n = rd32(c);
	err = sort_and_dispatch(r, 0, true);
	if (err)
		return err;
	for (i = 0; i < n; i++) {
		uint64_t id;
		int32_t seq;
		struct rthread *t;

		if (r->info.format == 6) {
			uint32_t s;

			err = rdvar64(r, c, &id, "sequence point thread index");
			if (!err)
				err = rdvar32(r, c, &s, "sequence point sequence number");
			if (err)
				return err;
			seq = (int32_t)s;
		} else {
			NEED(r, c, 12, "sequence point thread entry");
			id = rd64(c);
			seq = (int32_t)rd32(c);
		}
		t = get_or_add_thread(r, id, seq);
		if (!t)
			return fail_nomem(r);
		notify_dropped(r, t->seq, seq);
		t->seq = seq;
	}
	/* stacks and label lists are valid until the next sequence point */
	hmap_clear(&r->stacks);
	hmap_clear(&r->labels);
	r->nlabelv = 0;
	if (flags & 1) {
		hmap_clear(&r->threads);
		r->nrthreads = 0;
		hmap_clear(&r->v6threads);
		r->nv6t = 0;
	}
	if (flags & 2) {
		/* ids may be reused from here on; the old records stay alive
		 * for events already dispatched and for the report */
		hmap_clear(&r->meta_by_id);
	}
	return 0;
}

static int parse_thread_block(struct nt_reader *r, struct cur *c)
{
	while (c->pos < c->end) {
		struct cur rc;
		uint64_t index, v;
		struct v6thread t = { -1, -1 };
		int err = v6_row(r, c, &rc, "thread row size", "thread row");
		size_t row_at;

		if (err)
			return err;
		row_at = rc.pos;
		t.pid = r->info.pid;
		err = rdvar64(r, &rc, &index, "thread index");
		if (err)
			return err;
		while (rc.pos < rc.end) {
			uint8_t kind = rd8(&rc);
			char *s1 = NULL, *s2 = NULL;

			switch (kind) {
			case 1:
				err = rd_str8(r, &rc, &s1, "thread name");
				break;
			case 2:
				err = rdvar64(r, &rc, &v, "OS process id");
				t.pid = (int64_t)v;
				break;
			case 3:
				err = rdvar64(r, &rc, &v, "OS thread id");
				t.tid = (int64_t)v;
				break;
			case 4:
				err = rd_str8(r, &rc, &s1, "thread key");
				if (!err)
					err = rd_str8(r, &rc, &s2, "thread value");
				break;
			default:
				err = fail(r, rc.pos - 1, "unknown thread info kind %u", kind);
			}
			free(s1);
			free(s2);
			if (err)
				return err;
		}
		if (hmap_get(&r->v6threads, index, NULL))
			return fail(r, row_at, "duplicate thread index %llu",
				    (unsigned long long)index);
		if (array_grow((void **)&r->v6t, &r->capv6t, r->nv6t, sizeof(*r->v6t), 64))
			return fail_nomem(r);
		if (hmap_put(&r->v6threads, index, r->nv6t))
			return fail_nomem(r);
		r->v6t[r->nv6t++] = t;
		/* a declared thread starts at sequence number 0 */
		if (!get_or_add_thread(r, index, 0))
			return fail_nomem(r);
	}
	return 0;
}

static int parse_remove_thread_block(struct nt_reader *r, struct cur *c)
{
	while (c->pos < c->end) {
		uint64_t index, v;
		uint32_t seq;
		int err = rdvar64(r, c, &index, "removed thread index");

		if (!err)
			err = rdvar32(r, c, &seq, "removed thread sequence number");
		if (err)
			return err;
		if (!hmap_get(&r->v6threads, index, NULL))
			return fail(r, c->pos, "removal of unknown thread index %llu",
				    (unsigned long long)index);
		if (hmap_get(&r->threads, index, &v)) {
			notify_dropped(r, r->rthreads[v].seq, (int32_t)seq);
			r->rthreads[v].seq = (int32_t)seq;
		}
	}
	return 0;
}

static int parse_label_block(struct nt_reader *r, struct cur *c)
{
	uint32_t first, count, i;

	NEED(r, c, 8, "label list block header");
	first = rd32(c);
	count = rd32(c);
	if (count > c->end - c->pos)
		return fail(r, c->pos - 4, "label list count %u exceeds the block", count);
	for (i = 0; i < count; i++) {
		struct label l;
		bool last = false;

		memset(&l, 0, sizeof(l));
		while (!last) {
			uint8_t kind;
			char *s1 = NULL, *s2 = NULL;
			uint64_t v;
			int err = 0;

			NEED(r, c, 1, "label kind");
			kind = rd8(c);
			last = kind & 0x80;
			switch (kind & 0x7f) {
			case 1: case 2: case 3:
				NEED(r, c, 16, "label GUID");
				if ((kind & 0x7f) == 1)
					memcpy(l.act, c->p + c->pos, 16);
				else if ((kind & 0x7f) == 2)
					memcpy(l.rel, c->p + c->pos, 16);
				c->pos += 16;
				break;
			case 4:
				NEED(r, c, 8, "span id");
				c->pos += 8;
				break;
			case 5:
				err = rd_str8(r, c, &s1, "label key");
				if (!err)
					err = rd_str8(r, c, &s2, "label value");
				break;
			case 6:
				err = rd_str8(r, c, &s1, "label key");
				if (!err)
					err = rdvar64(r, c, &v, "label value");
				break;
			case 7: case 9: case 10:
				NEED(r, c, 1, "label byte");
				c->pos += 1;
				break;
			case 8:
				NEED(r, c, 8, "label keywords");
				c->pos += 8;
				break;
			default:
				err = fail(r, c->pos - 1, "unknown label kind %u", kind & 0x7f);
			}
			free(s1);
			free(s2);
			if (err)
				return err;
		}
		if (array_grow((void **)&r->labelv, &r->caplabelv, r->nlabelv, sizeof(*r->labelv), 64))
			return fail_nomem(r);
		if (hmap_put(&r->labels, (uint64_t)first + i, r->nlabelv))
			return fail_nomem(r);
		r->labelv[r->nlabelv++] = l;
	}
	return 0;
}

/* ---- stream framing ---------------------------------------------------- */

static int parse_trace_payload(struct nt_reader *r, struct cur *c, bool v6)
{
	uint16_t st[8];
	int64_t freq;
	struct tm tm;
	time_t secs;
	uint32_t i, nkv;

	NEED(r, c, v6 ? 40 : 48, "trace header");
	memcpy(st, c->p + c->pos, 16);
	c->pos += 16;
	if (st[1] < 1 || st[1] > 12 || st[3] < 1 || st[3] > 31 || st[4] > 23 || st[5] > 59 ||
	    st[6] > 59 || st[7] > 999 || st[0] < 1601 || st[0] > 9999)
		return fail(r, c->pos - 16, "invalid trace start date %u-%u-%u %u:%u:%u.%u",
			    st[0], st[1], st[3], st[4], st[5], st[6], st[7]);
	memset(&tm, 0, sizeof(tm));
	tm.tm_year = st[0] - 1900;
	tm.tm_mon = st[1] - 1;
	tm.tm_mday = st[3];
	tm.tm_hour = st[4];
	tm.tm_min = st[5];
	tm.tm_sec = st[6];
	secs = timegm(&tm);
	/* dates past 2262 do not fit in nanoseconds: saturate */
	if (__builtin_mul_overflow((int64_t)secs, (int64_t)1000000000, &r->info.sync_unix_ns) ||
	    __builtin_add_overflow(r->info.sync_unix_ns, (int64_t)st[7] * 1000000,
				   &r->info.sync_unix_ns))
		r->info.sync_unix_ns = INT64_MAX;
	r->info.sync_ticks = rd64(c);
	freq = (int64_t)rd64(c);
	if (freq <= 0)
		return fail(r, c->pos - 8, "tick frequency %lld is not positive", (long long)freq);
	r->info.tick_freq = (uint64_t)freq;
	r->info.pointer_size = rd32(c);
	if (r->info.pointer_size != 4 && r->info.pointer_size != 8)
		return fail(r, c->pos - 4, "pointer size %u is neither 4 nor 8",
			    r->info.pointer_size);
	if (!v6) {
		r->info.pid = (int32_t)rd32(c);
		r->info.nr_cpus = rd32(c);
		r->info.sampling_interval = rd32(c);
		return 0;
	}
	nkv = rd32(c);
	for (i = 0; i < nkv; i++) {
		char *k = NULL, *v = NULL;
		int err = rd_str8(r, c, &k, "trace key");

		if (!err)
			err = rd_str8(r, c, &v, "trace value");
		if (!err) {
			if (!strcmp(k, "ProcessId"))
				r->info.pid = strtoll(v, NULL, 10);
			else if (!strcmp(k, "HardwareThreadCount"))
				r->info.nr_cpus = (uint32_t)strtoul(v, NULL, 10);
			else if (!strcmp(k, "ExpectedCPUSamplingRate"))
				r->info.sampling_interval = (uint32_t)strtoul(v, NULL, 10);
		}
		free(k);
		free(v);
		if (err)
			return err;
	}
	return 0;
}

/* V5 object header; returns the type name in name[40]. */
static int parse_object_header(struct nt_reader *r, struct cur *c, char name[40],
			       int32_t *version)
{
	size_t off = c->pos;
	uint32_t len;

	NEED(r, c, 3 + 12, "object header");
	if (c->p[c->pos] != 0x05)
		return fail(r, off, "expected BeginPrivateObject tag 0x05, found 0x%02x",
			    c->p[c->pos]);
	if (c->p[c->pos + 1] != 0x05)
		return fail(r, off + 1, "expected BeginPrivateObject tag 0x05 for the type, found 0x%02x",
			    c->p[c->pos + 1]);
	if (c->p[c->pos + 2] != 0x01)
		return fail(r, off + 2, "expected NullReference tag 0x01, found 0x%02x",
			    c->p[c->pos + 2]);
	c->pos += 3;
	*version = (int32_t)rd32(c);
	c->pos += 4;			/* minimum reader version: not checked */
	len = rd32(c);
	if (len > 38)
		return fail(r, c->pos - 4, "type name length %u is out of range (0..38)", len);
	NEED(r, c, (size_t)len + 1, "type name");
	memcpy(name, c->p + c->pos, len);
	name[len] = 0;
	c->pos += len;
	if (c->p[c->pos] != 0x06)
		return fail(r, c->pos, "expected EndObject tag 0x06 after the type, found 0x%02x",
			    c->p[c->pos]);
	c->pos++;
	return 0;
}

static int parse_next_v5(struct nt_reader *r)
{
	struct cur c = { r->data, r->pos, r->len };
	char name[40];
	int32_t version, size;
	size_t pad, off;
	int err;

	if (c.pos >= c.end)
		return fail(r, c.pos, "unexpected end of file: expected an object (0x05) or the end-of-stream tag (0x01)");
	if (c.p[c.pos] == 0x01) {
		r->done = true;
		r->pos = c.pos + 1;
		return sort_and_dispatch(r, 0, true);
	}
	err = parse_object_header(r, &c, name, &version);
	if (err)
		return err;
	if (version > 2)
		return fail(r, r->pos, "%s version %d is newer than 2", name, version);
	off = c.pos;
	NEED(r, &c, 4, "block size");
	size = (int32_t)rd32(&c);
	pad = (4 - (c.pos & 3)) & 3;
	if (size < 0 || c.end - c.pos < pad || (size_t)size > c.end - c.pos - pad)
		return fail(r, off, "%s block size %d runs past the end of the file (%zu bytes left)",
			    name, size, c.end - c.pos);
	c.pos += pad;
	{
		struct cur b = { r->data, c.pos, c.pos + (size_t)size };

		if (!strcmp(name, "EventBlock"))
			err = parse_event_block(r, &b);
		else if (!strcmp(name, "MetadataBlock"))
			err = parse_metadata_block(r, &b);
		else if (!strcmp(name, "StackBlock"))
			err = parse_stack_block(r, &b);
		else if (!strcmp(name, "SPBlock"))
			err = parse_sp_block(r, &b);
		else
			err = fail(r, r->pos, "unknown object type \"%s\"", name);
		/* trailing bytes in an SP block are ignored, as TraceEvent does */
		if (err)
			return err;
	}
	c.pos += (size_t)size;
	if (c.pos >= c.end || c.p[c.pos] != 0x06)
		return fail(r, c.pos, "expected EndObject tag 0x06 after the %s block%s", name,
			    c.pos >= c.end ? ", found the end of the file" : "");
	r->pos = c.pos + 1;
	return 0;
}

static int parse_next_v6(struct nt_reader *r)
{
	struct cur c = { r->data, r->pos, r->len };
	uint32_t x, size, kind;
	int err = 0;

	if (c.end - c.pos < 4)
		return fail(r, c.pos, "unexpected end of file: expected a block header (the stream ends with an EndOfStream block)");
	x = rd32(&c);
	size = x & 0xffffff;
	kind = x >> 24;
	if (size > c.end - c.pos)
		return fail(r, r->pos, "block of kind %u and %u bytes runs past the end of the file (%zu bytes left)",
			    kind, size, c.end - c.pos);
	{
		struct cur b = { r->data, c.pos, c.pos + size };

		switch (kind) {
		case 0:
			r->done = true;
			err = sort_and_dispatch(r, 0, true);
			break;
		case 1:
			err = fail(r, r->pos, "a second trace block");
			break;
		case 2: err = parse_event_block(r, &b); break;
		case 3: err = parse_metadata_block(r, &b); break;
		case 4: err = parse_sp_block(r, &b); break;
		case 5: err = parse_stack_block(r, &b); break;
		case 6: err = parse_thread_block(r, &b); break;
		case 7: err = parse_remove_thread_block(r, &b); break;
		case 8: err = parse_label_block(r, &b); break;
		default: break;		/* unknown kinds are skipped */
		}
	}
	r->pos = c.pos + size;
	return err;
}

static int parse_stream_header(struct nt_reader *r)
{
	struct cur c = { r->data, 0, r->len };
	uint32_t x;

	NEED(r, &c, 12, "stream header");
	if (memcmp(c.p, "Nettrace", 8))
		return fail(r, 0, "not a nettrace file: expected the magic \"Nettrace\"");
	c.pos = 8;
	x = rd32(&c);
	if (x == 0) {
		int32_t major;

		NEED(r, &c, 8, "format version");
		major = (int32_t)rd32(&c);
		c.pos += 4;
		if (major != 6)
			return fail(r, 12, "unsupported nettrace major version %d (expected 6)", major);
		r->info.format = 6;
		NEED(r, &c, 4, "trace block header");
		x = rd32(&c);
		if (x >> 24 != 1)
			return fail(r, c.pos - 4, "expected the trace block (kind 1), found kind %u",
				    x >> 24);
		if ((x & 0xffffff) > c.end - c.pos)
			return fail(r, c.pos - 4, "trace block runs past the end of the file");
		{
			struct cur b = { r->data, c.pos, c.pos + (x & 0xffffff) };
			int err = parse_trace_payload(r, &b, true);

			if (err)
				return err;
		}
		r->pos = c.pos + (x & 0xffffff);
		return 0;
	}
	if (x != 20 || c.end - c.pos < 20 || memcmp(c.p + c.pos, "!FastSerialization.1", 20))
		return fail(r, 8, "invalid FastSerialization header: expected length 20 and \"!FastSerialization.1\"");
	c.pos += 20;
	{
		char name[40];
		int32_t version;
		int err = parse_object_header(r, &c, name, &version);

		if (err)
			return err;
		if (strcmp(name, "Trace"))
			return fail(r, 32, "expected the Trace object, found \"%s\"", name);
		if (version != 4)
			return fail(r, 32, "Trace object version %d is not 4", version);
		r->info.format = 5;
		err = parse_trace_payload(r, &c, false);
		if (err)
			return err;
		if (c.pos >= c.end || c.p[c.pos] != 0x06)
			return fail(r, c.pos, "expected EndObject tag 0x06 after the Trace object");
		r->pos = c.pos + 1;
	}
	return 0;
}

/* ---- public ------------------------------------------------------------ */

struct nt_reader *nt_reader_new_mem(const void *data, size_t len)
{
	struct nt_reader *r = calloc(1, sizeof(*r));

	if (!r)
		return errno = ENOMEM, NULL;
	r->data = data;
	r->len = len;
	r->info.pid = -1;
	parse_stream_header(r);		/* an error surfaces at the first next() */
	return r;
}

struct nt_reader *nt_reader_open(const char *path)
{
	struct nt_reader *r;
	struct stat st;
	void *map = NULL;
	bool is_malloc = false;
	size_t len = 0;
	int fd, e;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) < 0)
		goto fail;
	if (S_ISREG(st.st_mode) && st.st_size > 0) {
		len = (size_t)st.st_size;
		map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
		if (map == MAP_FAILED)
			goto fail;
	} else {
		/* pipes and the like: read everything */
		struct bytebuf b = { 0 };

		for (;;) {
			ssize_t n;

			if (bb_reserve(&b, 1 << 16)) {
				bb_free(&b);
				errno = ENOMEM;
				goto fail;
			}
			n = read(fd, b.p + b.len, b.cap - b.len);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0) {
				e = errno;
				bb_free(&b);
				errno = e;
				goto fail;
			}
			if (!n)
				break;
			b.len += (size_t)n;
		}
		map = b.p;
		len = b.len;
		is_malloc = true;
	}
	close(fd);
	r = nt_reader_new_mem(map ? map : "", len);
	if (!r) {
		e = errno;
		if (is_malloc)
			free(map);
		else if (map)
			munmap(map, len);
		errno = e;
		return NULL;
	}
	r->map = map;
	r->map_len = len;
	r->map_is_malloc = is_malloc;
	return r;
fail:
	e = errno;
	close(fd);
	errno = e;
	return NULL;
}

void nt_reader_free(struct nt_reader *r)
{
	size_t i;

	if (!r)
		return;
	for (i = 0; i < r->nmetas; i++)
		free_meta(r->metas[i]);
	free(r->metas);
	hmap_free(&r->meta_by_id);
	hmap_free(&r->stacks);
	hmap_free(&r->threads);
	free(r->rthreads);
	hmap_free(&r->v6threads);
	free(r->v6t);
	hmap_free(&r->labels);
	free(r->labelv);
	free(r->pending);
	free(r->out);
	if (r->map_is_malloc)
		free(r->map);
	else if (r->map)
		munmap(r->map, r->map_len);
	free(r);
}

const struct nt_reader_info *nt_reader_info(const struct nt_reader *r)
{
	return &r->info;
}

int nt_reader_next(struct nt_reader *r, struct nt_rec *rec)
{
	while (r->outhead == r->nout) {
		int err;

		r->outhead = r->nout = 0;
		if (r->err)
			return r->err;
		if (r->done)
			return 0;
		err = r->info.format == 6 ? parse_next_v6(r) : parse_next_v5(r);
		if (err && r->outhead == r->nout)
			return err;
		if (err)
			break;	/* hand out what was dispatched before the error */
	}
	*rec = r->out[r->outhead++];
	((struct nt_meta *)rec->meta)->count++;
	return 1;
}

const char *nt_reader_errmsg(const struct nt_reader *r)
{
	return r->err ? r->errmsg : NULL;
}

uint64_t nt_reader_offset(const struct nt_reader *r, uint64_t *total)
{
	if (total)
		*total = r->len;
	return r->done ? r->len : r->pos < r->len ? r->pos : r->len;
}

int64_t nt_reader_lost(const struct nt_reader *r)
{
	return r->lost;
}

size_t nt_reader_nmeta(const struct nt_reader *r)
{
	return r->nmetas;
}

const struct nt_meta *nt_reader_meta(const struct nt_reader *r, size_t i)
{
	return i < r->nmetas ? r->metas[i] : NULL;
}
