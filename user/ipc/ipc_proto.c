// SPDX-License-Identifier: MIT
/*
 * DOTNET_IPC_V1 messages: strict parsing of requests and encoding of
 * replies. Pure functions over byte buffers, so the fuzzer can drive them.
 *
 * Every read is bounds-checked against what is left of the message; a count
 * is checked against the bytes that remain before anything is allocated for
 * it, so a message can never make the parser allocate much more than its own
 * size (65535 bytes at most).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ipc.h"
#include "utf.h"

/* ---- errors ------------------------------------------------------------ */

static int ipc_fail(struct ipc_error *err, uint32_t hr, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int ipc_fail(struct ipc_error *err, uint32_t hr, const char *fmt, ...)
{
	va_list ap;

	err->hresult = hr;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	switch (hr) {
	case IPC_HR_UNKNOWN_MAGIC:
		return -EPROTO;
	case IPC_HR_UNKNOWN_COMMAND:
		return -EOPNOTSUPP;
	case IPC_HR_FAIL:
		return -ENOMEM;
	default:
		return -EBADMSG;
	}
}

/* ---- payload reader ---------------------------------------------------- */

struct rd {
	const uint8_t *p;
	size_t len, off;	/* payload bytes, read position */
	struct ipc_error *err;
};

static size_t rd_left(const struct rd *r)
{
	return r->len - r->off;
}

static int rd_need(struct rd *r, size_t n, const char *what)
{
	if (rd_left(r) >= n)
		return 0;
	return ipc_fail(r->err, IPC_HR_BAD_ENCODING,
			"payload ends at byte %zu of %zu, inside %s (needs %zu bytes)", r->off,
			r->len, what, n);
}

static int rd_bytes(struct rd *r, void *out, size_t n, const char *what)
{
	int e = rd_need(r, n, what);

	if (e)
		return e;
	memcpy(out, r->p + r->off, n);	/* unaligned, little-endian host */
	r->off += n;
	return 0;
}

static int rd_u8(struct rd *r, uint8_t *v, const char *what)
{
	return rd_bytes(r, v, 1, what);
}

static int rd_u32(struct rd *r, uint32_t *v, const char *what)
{
	return rd_bytes(r, v, 4, what);
}

static int rd_u64(struct rd *r, uint64_t *v, const char *what)
{
	return rd_bytes(r, v, 8, what);
}

static int rd_bool(struct rd *r, bool *v, const char *what)
{
	uint8_t b;
	int e = rd_u8(r, &b, what);

	if (!e)
		*v = b != 0;
	return e;
}


/*
 * A protocol string as UTF-8. Count 0 is null: *out = NULL. Otherwise the
 * count must fit the payload, the last unit must be NUL and no other unit
 * may be (a C string could not carry it). Unpaired surrogates become U+FFFD.
 */
static int rd_string(struct rd *r, char **out, const char *what)
{
	struct bytebuf s;
	const uint8_t *u;
	uint32_t count;
	size_t nul;

	*out = NULL;
	if (rd_u32(r, &count, what))
		return -EBADMSG;
	if (!count)
		return 0;
	if (count > rd_left(r) / 2)
		return ipc_fail(r->err, IPC_HR_BAD_ENCODING,
				"%s: string of %u UTF-16 units but only %zu payload bytes left", what,
				count, rd_left(r));
	u = r->p + r->off;
	if (u[2 * (count - 1)] || u[2 * (count - 1) + 1])
		return ipc_fail(r->err, IPC_HR_BAD_ENCODING,
				"%s: string of %u units does not end with a NUL", what, count);
	nul = utf16le_strlen(u, 2 * (size_t)(count - 1));
	if (nul != SIZE_MAX)
		return ipc_fail(r->err, IPC_HR_BAD_ENCODING,
				"%s: NUL inside the string at unit %zu of %u", what, nul, count);
	/* UTF-16 unit -> at most 3 UTF-8 bytes (a pair of 2 units -> 4), and
	 * the terminator: sized exactly, and the conversion fits in it */
	if (bb_init(&s, (size_t)count * 3 + 1))
		return ipc_fail(r->err, IPC_HR_FAIL, "%s: out of memory", what);
	utf16le_to_utf8(&s, u, count - 1);
	s.p[s.len] = 0;
	r->off += (size_t)count * 2;
	*out = (char *)s.p;
	return 0;
}

/* array<u32>: count, then the elements; count checked against the payload. */
static int rd_u32_array(struct rd *r, uint32_t **out, uint32_t *n, const char *what)
{
	uint32_t count;

	*out = NULL;
	*n = 0;
	if (rd_u32(r, &count, what))
		return -EBADMSG;
	if (!count)
		return 0;
	if (count > rd_left(r) / 4)
		return ipc_fail(r->err, IPC_HR_BAD_ENCODING,
				"%s: %u ids but only %zu payload bytes left", what, count, rd_left(r));
	*out = malloc((size_t)count * 4);
	if (!*out)
		return ipc_fail(r->err, IPC_HR_FAIL, "%s: out of memory", what);
	memcpy(*out, r->p + r->off, (size_t)count * 4);
	r->off += (size_t)count * 4;
	*n = count;
	return 0;
}

/* ---- header ------------------------------------------------------------ */

int ipc_header_parse(const void *buf, size_t len, struct ipc_header *h, struct ipc_error *err)
{
	const uint8_t *p = buf;

	memset(h, 0, sizeof(*h));
	if (len < IPC_HEADER_SIZE)
		return ipc_fail(err, IPC_HR_BAD_ENCODING, "header truncated: %zu of %d bytes", len,
				IPC_HEADER_SIZE);
	/* the runtime compares the magic as a C string: these 14 bytes exactly */
	if (memcmp(p, IPC_MAGIC, IPC_MAGIC_LEN))
		return ipc_fail(err, IPC_HR_UNKNOWN_MAGIC, "bad magic: not \"%s\"", IPC_MAGIC);
	memcpy(&h->size, p + 14, 2);
	h->set = p[16];
	h->id = p[17];
	memcpy(&h->reserved, p + 18, 2);
	if (h->size < IPC_HEADER_SIZE)
		return ipc_fail(err, IPC_HR_BAD_ENCODING,
				"size field %u is smaller than the %d-byte header", h->size,
				IPC_HEADER_SIZE);
	return 0;
}

/* ---- EventPipe --------------------------------------------------------- */

static void provider_free(struct ipc_provider *p)
{
	uint32_t i;

	free(p->name);
	free(p->args);
	free(p->event_ids);
	free(p->default_tracepoint);
	for (i = 0; i < p->ntracepoint_sets; i++) {
		free(p->tracepoint_sets[i].name);
		free(p->tracepoint_sets[i].ids);
	}
	free(p->tracepoint_sets);
}

static void collect_free(struct ipc_collect *c)
{
	uint32_t i;

	for (i = 0; i < c->nproviders; i++)
		provider_free(&c->providers[i]);
	free(c->providers);
	c->providers = NULL;
	c->nproviders = 0;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* user_events tracepoint config of one provider (CollectTracing5/6, type 1). */
static int parse_tracepoints(struct rd *r, struct ipc_provider *p, uint32_t idx)
{
	uint32_t count, i, total = 0, k = 0, *all;
	int e;

	e = rd_string(r, &p->default_tracepoint, "default tracepoint name");
	if (e)
		return e;
	if (rd_u32(r, &count, "tracepoint set count"))
		return -EBADMSG;
	/* each set is at least a string count and an array count */
	if (count > rd_left(r) / 8)
		return ipc_fail(r->err, IPC_HR_BAD_ENCODING,
				"provider %u: %u tracepoint sets but only %zu payload bytes left", idx,
				count, rd_left(r));
	if (!count && !p->default_tracepoint)
		return ipc_fail(r->err, IPC_HR_BAD_ENCODING,
				"provider %u: user_events config has neither a default tracepoint nor tracepoint sets",
				idx);
	if (count) {
		p->tracepoint_sets = calloc(count, sizeof(*p->tracepoint_sets));
		if (!p->tracepoint_sets)
			return ipc_fail(r->err, IPC_HR_FAIL, "out of memory");
	}
	for (i = 0; i < count; i++) {
		struct ipc_tracepoint_set *ts = &p->tracepoint_sets[i];

		p->ntracepoint_sets = i + 1;
		e = rd_string(r, &ts->name, "tracepoint name");
		if (e)
			return e;
		if (!ts->name || !ts->name[0])
			return ipc_fail(r->err, IPC_HR_BAD_ENCODING,
					"provider %u: tracepoint set %u has no name", idx, i);
		e = rd_u32_array(r, &ts->ids, &ts->nids, "tracepoint event ids");
		if (e)
			return e;
		if (!ts->nids)
			return ipc_fail(r->err, IPC_HR_BAD_ENCODING,
					"provider %u: tracepoint set '%s' lists no event id", idx, ts->name);
		total += ts->nids;	/* bounded by the payload: no overflow */
	}
	if (total < 2)
		return 0;
	/* an event id may belong to one set only */
	all = malloc((size_t)total * 4);
	if (!all)
		return ipc_fail(r->err, IPC_HR_FAIL, "out of memory");
	for (i = 0; i < count; i++) {
		memcpy(all + k, p->tracepoint_sets[i].ids, (size_t)p->tracepoint_sets[i].nids * 4);
		k += p->tracepoint_sets[i].nids;
	}
	qsort(all, total, 4, cmp_u32);
	for (i = 1; i < total; i++)
		if (all[i] == all[i - 1]) {
			uint32_t dup = all[i];

			free(all);
			return ipc_fail(r->err, IPC_HR_BAD_ENCODING,
					"provider %u: event id %u is in more than one tracepoint set",
					idx, dup);
		}
	free(all);
	return 0;
}

static int parse_providers(struct rd *r, struct ipc_collect *c)
{
	uint32_t count, i;
	int e;

	if (rd_u32(r, &count, "provider count"))
		return -EBADMSG;
	if (!count || count > IPC_MAX_PROVIDERS)
		return ipc_fail(r->err, IPC_HR_BAD_ENCODING,
				"%u providers: a session needs 1 to %u", count, IPC_MAX_PROVIDERS);
	/* keywords, level, two string counts: 20 bytes at least each */
	if (count > rd_left(r) / 20)
		return ipc_fail(r->err, IPC_HR_BAD_ENCODING,
				"%u providers cannot fit in the %zu payload bytes left", count,
				rd_left(r));
	c->providers = calloc(count, sizeof(*c->providers));
	if (!c->providers)
		return ipc_fail(r->err, IPC_HR_FAIL, "out of memory");
	for (i = 0; i < count; i++) {
		struct ipc_provider *p = &c->providers[i];

		c->nproviders = i + 1;
		if (rd_u64(r, &p->keywords, "provider keywords") ||
		    rd_u32(r, &p->level, "provider level"))
			return -EBADMSG;
		if (p->level > IPC_MAX_LEVEL)
			return ipc_fail(r->err, IPC_HR_BAD_ENCODING,
					"provider %u: level %u is over 5 (Verbose)", i, p->level);
		e = rd_string(r, &p->name, "provider name");
		if (e)
			return e;
		if (!p->name || !p->name[0])
			return ipc_fail(r->err, IPC_HR_BAD_ENCODING, "provider %u has no name", i);
		e = rd_string(r, &p->args, "provider arguments");
		if (e)
			return e;
		if (c->version < 5)
			continue;
		if (rd_bool(r, &p->filter_enable, "event filter flag"))
			return -EBADMSG;
		e = rd_u32_array(r, &p->event_ids, &p->nevent_ids, "event filter ids");
		if (e)
			return e;
		if (c->session_type == 1) {
			e = parse_tracepoints(r, p, i);
			if (e)
				return e;
		}
	}
	return 0;
}

static int parse_collect(struct rd *r, uint8_t version, struct ipc_collect *c)
{
	bool streaming = true, rundown;
	int e;

	c->version = version;
	c->stackwalk = true;
	if (version >= 5) {
		if (rd_u32(r, &c->session_type, "session type"))
			return -EBADMSG;
		if (c->session_type > 1)
			return ipc_fail(r->err, IPC_HR_BAD_ENCODING,
					"session type %u is neither 0 (streaming) nor 1 (user_events)",
					c->session_type);
		streaming = c->session_type == 0;
	}
	if (streaming) {
		if (rd_u32(r, &c->buffer_mb, "circularBufferMB") ||
		    rd_u32(r, &c->format, "format"))
			return -EBADMSG;
		if (!c->buffer_mb)
			return ipc_fail(r->err, IPC_HR_BAD_ENCODING, "circularBufferMB is 0");
		if (c->format > 1)
			return ipc_fail(r->err, IPC_HR_BAD_ENCODING,
					"format %u is neither 0 (NetPerf) nor 1 (NetTrace)", c->format);
	} else {
		c->stackwalk = false;
	}
	switch (version) {
	case 1:
		c->rundown_keyword = IPC_DEFAULT_RUNDOWN_KEYWORD;
		break;
	case 2:
	case 3:
		if (rd_bool(r, &rundown, "requestRundown"))
			return -EBADMSG;
		c->rundown_keyword = rundown ? IPC_DEFAULT_RUNDOWN_KEYWORD : 0;
		if (version == 3 && rd_bool(r, &c->stackwalk, "requestStackwalk"))
			return -EBADMSG;
		break;
	default:
		if (rd_u64(r, &c->rundown_keyword, "rundownKeyword"))
			return -EBADMSG;
		if (streaming && rd_bool(r, &c->stackwalk, "requestStackwalk"))
			return -EBADMSG;
		break;
	}
	e = parse_providers(r, c);
	if (e)
		return e;
	if (version == 6 && streaming) {
		if (rd_u32(r, &c->buffering, "bufferingMode"))
			return -EBADMSG;
		if (c->buffering > 1)
			return ipc_fail(r->err, IPC_HR_BAD_ENCODING,
					"buffering mode %u is neither 0 (Drop) nor 1 (Block)",
					c->buffering);
	}
	return 0;
}

/* ---- messages ---------------------------------------------------------- */

static int parse_eventpipe(struct rd *r, struct ipc_msg *m)
{
	uint8_t id = m->hdr.id;

	if (id == IPC_EP_STOP_TRACING) {
		m->kind = IPC_MSG_STOP_TRACING;
		return rd_u64(r, &m->u.session_id, "StopTracing session id");
	}
	if (id >= IPC_EP_COLLECT_TRACING && id <= IPC_EP_COLLECT_TRACING6) {
		int e;

		m->kind = IPC_MSG_COLLECT_TRACING;
		e = parse_collect(r, (uint8_t)(id - IPC_EP_COLLECT_TRACING + 1), &m->u.collect);
		if (e)
			collect_free(&m->u.collect);
		return e;
	}
	return ipc_fail(r->err, IPC_HR_UNKNOWN_COMMAND, "unknown EventPipe command 0x%02x", id);
}

static int parse_process(struct rd *r, struct ipc_msg *m)
{
	int e;

	switch (m->hdr.id) {
	case IPC_PROC_INFO:
		m->kind = IPC_MSG_PROCESS_INFO;
		m->u.info_version = 1;
		return 0;
	case IPC_PROC_INFO2:
		m->kind = IPC_MSG_PROCESS_INFO;
		m->u.info_version = 2;
		return 0;
	case IPC_PROC_INFO3:
		m->kind = IPC_MSG_PROCESS_INFO;
		m->u.info_version = 3;
		return 0;
	case IPC_PROC_RESUME_RUNTIME:
		m->kind = IPC_MSG_RESUME_RUNTIME;
		return 0;
	case IPC_PROC_ENVIRONMENT:
		m->kind = IPC_MSG_PROCESS_ENVIRONMENT;
		return 0;
	case IPC_PROC_SET_ENV:
		m->kind = IPC_MSG_SET_ENVIRONMENT;
		e = rd_string(r, &m->u.setenv.name, "variable name");
		if (!e && (!m->u.setenv.name || !m->u.setenv.name[0] ||
			   strchr(m->u.setenv.name, '=')))
			e = ipc_fail(r->err, IPC_HR_BAD_ENCODING,
				     "environment variable name is empty or contains '='");
		if (!e)
			e = rd_string(r, &m->u.setenv.value, "variable value");
		if (e) {
			free(m->u.setenv.name);
			free(m->u.setenv.value);
			m->u.setenv.name = m->u.setenv.value = NULL;
		}
		return e;
	default:
		return ipc_fail(r->err, IPC_HR_UNKNOWN_COMMAND,
				"process command 0x%02x is not supported", m->hdr.id);
	}
}

int ipc_msg_parse(const void *buf, size_t len, struct ipc_msg *m, struct ipc_error *err)
{
	struct rd r = { .err = err };
	int e;

	memset(m, 0, sizeof(*m));
	memset(err, 0, sizeof(*err));
	e = ipc_header_parse(buf, len, &m->hdr, err);
	if (e)
		return e;
	if (m->hdr.size > len)
		return ipc_fail(err, IPC_HR_BAD_ENCODING,
				"message of %u bytes (size field) but only %zu bytes arrived",
				m->hdr.size, len);
	r.p = (const uint8_t *)buf + IPC_HEADER_SIZE;
	r.len = m->hdr.size - IPC_HEADER_SIZE;
	switch (m->hdr.set) {
	case IPC_SET_EVENTPIPE:
		e = parse_eventpipe(&r, m);
		break;
	case IPC_SET_PROCESS:
		e = parse_process(&r, m);
		break;
	case IPC_SET_DUMP:
	case IPC_SET_PROFILER:
		e = ipc_fail(err, IPC_HR_UNKNOWN_COMMAND, "%s commands are not supported",
			     m->hdr.set == IPC_SET_DUMP ? "dump" : "profiler");
		break;
	default:
		e = ipc_fail(err, IPC_HR_UNKNOWN_COMMAND, "unknown command set 0x%02x",
			     m->hdr.set);
		break;
	}
	if (e)
		m->kind = 0;
	return e;
}

void ipc_msg_free(struct ipc_msg *m)
{
	if (!m)
		return;
	switch (m->kind) {
	case IPC_MSG_COLLECT_TRACING:
		collect_free(&m->u.collect);
		break;
	case IPC_MSG_SET_ENVIRONMENT:
		free(m->u.setenv.name);
		free(m->u.setenv.value);
		break;
	default:
		break;
	}
	memset(m, 0, sizeof(*m));
}

/* ---- encoding ---------------------------------------------------------- */

void ipc_header_put(uint8_t out[IPC_HEADER_SIZE], uint16_t size, uint8_t set, uint8_t id)
{
	memcpy(out, IPC_MAGIC, IPC_MAGIC_LEN);
	memcpy(out + 14, &size, 2);
	out[16] = set;
	out[17] = id;
	out[18] = out[19] = 0;
}

size_t ipc_reply_ok_u64(uint8_t out[28], uint64_t v)
{
	ipc_header_put(out, 28, IPC_SET_SERVER, IPC_SERVER_OK);
	memcpy(out + 20, &v, 8);
	return 28;
}

size_t ipc_reply_ok_code(uint8_t out[24], uint32_t code)
{
	ipc_header_put(out, 24, IPC_SET_SERVER, IPC_SERVER_OK);
	memcpy(out + 20, &code, 4);
	return 24;
}

size_t ipc_reply_error(uint8_t out[24], uint32_t hresult)
{
	ipc_header_put(out, 24, IPC_SET_SERVER, IPC_SERVER_ERROR);
	memcpy(out + 20, &hresult, 4);
	return 24;
}

void ipc_advertise_put(uint8_t out[IPC_ADVERTISE_SIZE], const uint8_t cookie[16], uint64_t pid)
{
	memcpy(out, IPC_ADVERTISE_MAGIC, 8);
	memcpy(out + 8, cookie, 16);
	memcpy(out + 24, &pid, 8);
	out[32] = out[33] = 0;
}


int ipc_string_put(struct bytebuf *b, const char *s, size_t max_units)
{
	size_t start = b->len, units;
	uint32_t count;
	uint16_t last;
	long n;

	if (bb_reserve(b, 4))
		return -ENOMEM;
	bb_u32(b, 0);		/* patched below */
	s = s ? s : "";
	n = utf8_to_utf16le(b, s, strlen(s), 1);
	if (n < 0) {
		b->len = start;
		return -ENOMEM;
	}
	units = (size_t)n - 1;	/* before the NUL */
	if (units > max_units) {
		/* cut at max_units, and before a pair that would be split (the
		 * encoder writes a high surrogate only as a pair's first half);
		 * the NUL moves to the cut, within what was written */
		units = max_units;
		if (units) {
			memcpy(&last, b->p + start + 4 + 2 * (units - 1), 2);
			if (last >= 0xD800 && last < 0xDC00)
				units--;
		}
		b->len = start + 4 + 2 * units;
		bb_u16(b, 0);
	}
	count = (uint32_t)(units + 1);
	memcpy(b->p + start, &count, 4);
	return 0;
}

int ipc_process_info_encode(struct bytebuf *b, int version, const struct ipc_process_info *pi)
{
	struct bytebuf tail = { 0 };
	size_t start = b->len, fixed, room;
	uint16_t size;
	int e = -ENOMEM;

	if (version < 1 || version > 3)
		return -EINVAL;
	/* the strings after the command line first, to know what is left for it */
	if (ipc_string_put(&tail, pi->os, SIZE_MAX) || ipc_string_put(&tail, pi->arch, SIZE_MAX))
		goto out;
	if (version >= 2 && (ipc_string_put(&tail, pi->assembly, 1024) ||
			     ipc_string_put(&tail, pi->clr_version, 1024)))
		goto out;
	if (version == 3 && ipc_string_put(&tail, pi->rid, 1024))
		goto out;
	fixed = IPC_HEADER_SIZE + (version == 3 ? 4 : 0) + 8 + 16 + 4 + 2 + tail.len;
	if (fixed > IPC_MAX_MESSAGE) {
		e = -EINVAL;
		goto out;
	}
	room = (IPC_MAX_MESSAGE - fixed) / 2;
	if (bb_reserve(b, IPC_HEADER_SIZE + 4 + 8 + 16))
		goto out;
	b->len += IPC_HEADER_SIZE;	/* header once the size is known */
	if (version == 3)
		bb_u32(b, 1);		/* ProcessInfo3 layout version */
	bb_u64(b, pi->pid);
	bb_put(b, pi->cookie, 16);
	if (ipc_string_put(b, pi->command_line, room) || bb_append(b, tail.p, tail.len))
		goto out;
	size = (uint16_t)(b->len - start);
	ipc_header_put(b->p + start, size, IPC_SET_SERVER, IPC_SERVER_OK);
	e = 0;
out:
	if (e)
		b->len = start;
	bb_free(&tail);
	return e;
}

int ipc_environment_encode(struct bytebuf *reply, struct bytebuf *cont, char *const *env)
{
	size_t i, start = cont->len;
	uint32_t count = 0, total;
	uint16_t zero = 0;

	if (bb_reserve(cont, 4))
		return -ENOMEM;
	bb_u32(cont, 0);
	for (i = 0; env && env[i]; i++) {
		if (!strchr(env[i], '='))
			continue;	/* the client requires NAME=VALUE */
		if (ipc_string_put(cont, env[i], SIZE_MAX))
			return -ENOMEM;
		count++;
		if (cont->len - start > UINT32_MAX)
			return -E2BIG;
	}
	memcpy(cont->p + start, &count, 4);
	total = (uint32_t)(cont->len - start);
	if (bb_reserve(reply, 26))
		return -ENOMEM;
	ipc_header_put(reply->p + reply->len, 26, IPC_SET_SERVER, IPC_SERVER_OK);
	reply->len += IPC_HEADER_SIZE;
	bb_u32(reply, total);
	bb_put(reply, &zero, 2);
	return 0;
}

/* ---- DOTNET_DiagnosticPorts -------------------------------------------- */

int ipc_ports_parse(const char *spec, struct ipc_port_cfg *out, size_t max, size_t *n,
		    char *err, size_t errlen)
{
	const char *p = spec ? spec : "";

	*n = 0;
	while (*p) {
		size_t clen = strcspn(p, ";");
		const char *end = p + clen, *q = p;
		bool have_addr = false, have_type = false, have_mode = false;
		struct ipc_port_cfg c = { .connect = true, .suspend = true };

		while (q < end) {
			size_t ilen = strcspn(q, ",;");

			if (ilen > (size_t)(end - q))
				ilen = (size_t)(end - q);
			if (!ilen) {
				q++;	/* empty item: ignored, as the runtime's strtok does */
				continue;
			}
			if (!have_addr) {
				if (ilen >= IPC_PATH_MAX) {
					snprintf(err, errlen,
						 "port address '%.*s' is %zu bytes; a Unix socket path holds at most %d",
						 (int)ilen, q, ilen, IPC_PATH_MAX - 1);
					return -EINVAL;
				}
				memcpy(c.path, q, ilen);
				c.path[ilen] = 0;
				have_addr = true;
			} else if (ilen == 7 && !strncasecmp(q, "connect", 7)) {
				if (!have_type)
					c.connect = true;
				have_type = true;
			} else if (ilen == 6 && !strncasecmp(q, "listen", 6)) {
				if (!have_type)
					c.connect = false;
				have_type = true;
			} else if (ilen == 7 && !strncasecmp(q, "suspend", 7)) {
				if (!have_mode)
					c.suspend = true;
				have_mode = true;
			} else if (ilen == 9 && !strncasecmp(q, "nosuspend", 9)) {
				if (!have_mode)
					c.suspend = false;
				have_mode = true;
			} else {
				snprintf(err, errlen,
					 "unknown tag '%.*s' for port '%s' (use connect, listen, suspend or nosuspend)",
					 (int)ilen, q, c.path);
				return -EINVAL;
			}
			q += ilen;
		}
		if (have_addr) {
			if (*n >= max) {
				snprintf(err, errlen, "more than %zu diagnostic ports", max);
				return -EINVAL;
			}
			out[(*n)++] = c;
		}
		p = *end ? end + 1 : end;
	}
	return 0;
}
