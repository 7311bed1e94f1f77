// SPDX-License-Identifier: MIT
/*
 * The agent socket's encodings (agent_wire.h): event descriptions both ways,
 * and packets with an fd beside them. The decoder reads bytes another
 * process chose, so it checks every length before it reads, bounds the
 * nesting and the count of fields, and hands what it built to
 * nt_event_desc_check() before anyone uses it.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent_wire.h"
#include "clock.h"

#define MAX_FIELDS_TOTAL 16384u

static void put_str(struct bytebuf *b, const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (n > 0xffff) {
		b->oom = 1;	/* reported as too big below */
		return;
	}
	bb_append_u16(b, (uint16_t)n);
	bb_append(b, s, n);
}

static void put_fields(struct bytebuf *b, const struct nt_field *f, uint16_t n)
{
	uint16_t i;

	for (i = 0; i < n; i++) {
		put_str(b, f[i].name);
		bb_append_u8(b, f[i].type);
		bb_append_u8(b, f[i].elem_type);
		bb_append_u16(b, f[i].nfields);
		put_fields(b, f[i].fields, f[i].fields ? f[i].nfields : 0);
	}
}

int rp_agent_desc_encode(const struct nt_event_desc *d, struct bytebuf *out)
{
	size_t start = out->len;

	bb_append_u32(out, d->event_id);
	bb_append_u64(out, d->keywords);
	bb_append_u8(out, d->version);
	bb_append_u8(out, d->level);
	bb_append_u8(out, d->opcode);
	bb_append_u8(out, d->provider_guid ? 1 : 0);
	if (d->provider_guid)
		bb_append(out, d->provider_guid, 16);
	put_str(out, d->provider);
	put_str(out, d->name);
	bb_append_u16(out, d->fields || d->nfields ? d->nfields : RP_AM_NO_FIELDS);
	put_fields(out, d->fields, d->fields ? d->nfields : 0);
	if (out->oom)
		return -ENOMEM;
	if (out->len - start > RP_AGENT_MAX_MSG - sizeof(struct rp_am_meta))
		return -E2BIG;
	return 0;
}

/* ---- decoding ------------------------------------------------------------ */

struct cur {
	const uint8_t *p, *end;
	bool bad;
};

static const uint8_t *take(struct cur *c, size_t n)
{
	const uint8_t *p = c->p;

	if (c->bad || (size_t)(c->end - c->p) < n) {
		c->bad = true;
		return NULL;
	}
	c->p += n;
	return p;
}

static uint8_t get8(struct cur *c)
{
	const uint8_t *p = take(c, 1);

	return p ? *p : 0;
}

static uint16_t get16(struct cur *c)
{
	const uint8_t *p = take(c, 2);

	return p ? (uint16_t)(p[0] | p[1] << 8) : 0;
}

/* First pass: counts what the description needs, so that it is built in one
 * allocation: fields, and bytes of strings with their NULs. */
static int measure(struct cur *c, uint32_t depth, size_t *nfields, size_t *strbytes)
{
	uint16_t n = get16(c), i;

	if (n == RP_AM_NO_FIELDS && depth == 0)
		return 0;
	if (depth > NT_MAX_FIELD_DEPTH)
		return -1;
	for (i = 0; i < n && !c->bad; i++) {
		uint16_t len = get16(c);

		take(c, len);
		*strbytes += (size_t)len + 1;
		take(c, 2);	/* type, elem_type */
		if (++*nfields > MAX_FIELDS_TOTAL)
			return -1;
		if (measure(c, depth + 1, nfields, strbytes))
			return -1;
	}
	return c->bad ? -1 : 0;
}

struct arena {
	struct nt_field *f;
	char *s;
};

static char *get_str(struct cur *c, struct arena *a)
{
	uint16_t n = get16(c);
	const uint8_t *p = take(c, n);
	char *s = a->s;

	if (!p)
		return NULL;
	memcpy(s, p, n);
	s[n] = 0;
	a->s += n + 1;
	if (memchr(s, 0, n))
		c->bad = true;	/* a NUL inside a name */
	return s;
}

static void build(struct cur *c, struct arena *a, struct nt_field *out, uint16_t n)
{
	uint16_t i;

	for (i = 0; i < n && !c->bad; i++) {
		struct nt_field *f = &out[i];
		uint16_t m;

		f->name = get_str(c, a);
		f->type = get8(c);
		f->elem_type = get8(c);
		m = get16(c);
		f->nfields = m;
		f->fields = m ? a->f : NULL;
		a->f += m;
		build(c, a, (struct nt_field *)f->fields, m);
	}
}

struct rp_agent_desc *rp_agent_desc_decode(const void *p, size_t len, int format, char *why,
					   size_t whylen)
{
	struct cur c = { p, (const uint8_t *)p + len, false };
	size_t nfields = 0, strbytes = 0;
	struct rp_agent_desc *d;
	struct arena a;
	uint16_t nf, plen, nlen;
	bool has_guid;

	/* fixed part, then the two names, then the fields */
	take(&c, 4 + 8 + 3);
	has_guid = get8(&c) != 0;
	if (has_guid)
		take(&c, 16);
	plen = get16(&c);
	take(&c, plen);
	nlen = get16(&c);
	take(&c, nlen);
	strbytes = (size_t)plen + 1 + nlen + 1;
	if (c.bad || measure(&c, 0, &nfields, &strbytes) || c.p != c.end) {
		snprintf(why, whylen, "malformed event description (%zu bytes)", len);
		return NULL;
	}
	d = calloc(1, sizeof(*d) + nfields * sizeof(struct nt_field) + strbytes);
	if (!d) {
		snprintf(why, whylen, "out of memory");
		return NULL;
	}
	a.f = (struct nt_field *)(d + 1);
	a.s = (char *)(a.f + nfields);
	c.p = p;
	c.bad = false;
	d->desc.event_id = le32_get(take(&c, 4));
	d->desc.keywords = le64_get(take(&c, 8));
	d->desc.version = get8(&c);
	d->desc.level = get8(&c);
	d->desc.opcode = get8(&c);
	if (get8(&c)) {
		memcpy(d->guid, take(&c, 16), 16);
		d->desc.provider_guid = d->guid;
	}
	d->desc.provider = get_str(&c, &a);
	d->desc.name = get_str(&c, &a);
	nf = get16(&c);
	if (nf != RP_AM_NO_FIELDS) {
		d->desc.nfields = nf;
		d->desc.fields = nf ? a.f : NULL;
		if (!nf)
			d->desc.fields = a.f;	/* an empty list, not none */
		a.f += nf;
		build(&c, &a, (struct nt_field *)d->desc.fields, nf);
	}
	if (c.bad || !d->desc.provider || !*d->desc.provider) {
		snprintf(why, whylen, "malformed event description");
		free(d);
		return NULL;
	}
	if (nt_event_desc_check(&d->desc, format, why, whylen)) {
		free(d);
		return NULL;
	}
	return d;
}

/* ---- packets --------------------------------------------------------------- */

static int wait_for(int sock, short ev, int timeout_ms)
{
	struct pollfd pfd = { .fd = sock, .events = ev };
	int rc;

	do
		rc = poll(&pfd, 1, timeout_ms);
	while (rc < 0 && errno == EINTR);
	if (rc < 0)
		return -errno;
	if (!rc)
		return -ETIMEDOUT;
	return 0;
}

int rp_agent_send(int sock, const void *p, size_t n, int fd, int timeout_ms)
{
	return rp_agent_send_fds(sock, p, n, &fd, fd >= 0 ? 1 : 0, timeout_ms);
}

int rp_agent_send_fds(int sock, const void *p, size_t n, const int *fds, int nfds, int timeout_ms)
{
	char cbuf[CMSG_SPACE(sizeof(int) * RP_AGENT_MAX_FDS)];
	struct iovec iov = { (void *)p, n };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
	uint64_t end = rp_clock_mono_ns() + (uint64_t)timeout_ms * 1000000ull;

	if (nfds < 0 || nfds > RP_AGENT_MAX_FDS)
		return -EINVAL;
	if (nfds) {
		struct cmsghdr *cm;

		memset(cbuf, 0, sizeof(cbuf));
		m.msg_control = cbuf;
		m.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
		cm = CMSG_FIRSTHDR(&m);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
		memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfds);
	}
	for (;;) {
		ssize_t w = sendmsg(sock, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
		uint64_t now;
		int err;

		if (w == (ssize_t)n)
			return 0;
		if (w >= 0)
			return -EMSGSIZE;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN)
			return -errno;
		now = rp_clock_mono_ns();
		if (now >= end)
			return -ETIMEDOUT;
		err = wait_for(sock, POLLOUT, (int)((end - now) / 1000000ull) + 1);
		if (err)
			return err;
	}
}

int rp_agent_send_text(int sock, uint16_t type, const char *s, size_t n, int timeout_ms)
{
	size_t off = 0, room = RP_AGENT_MAX_MSG - sizeof(struct rp_agent_hdr);
	uint8_t *p = malloc(RP_AGENT_MAX_MSG);
	int err = 0;

	if (!p)
		return -ENOMEM;
	do {
		size_t k = n - off < room ? n - off : room;
		uint32_t more = off + k < n ? RP_AM_F_MORE : 0;

		*(struct rp_agent_hdr *)p = rp_agent_hdr(type, (uint32_t)(sizeof(struct rp_agent_hdr) + k), more);
		memcpy(p + sizeof(struct rp_agent_hdr), s + off, k);
		err = rp_agent_send(sock, p, sizeof(struct rp_agent_hdr) + k, -1, timeout_ms);
		off += k;
	} while (!err && off < n);
	free(p);
	return err;
}

ssize_t rp_agent_recv(int sock, void *buf, size_t cap, int *fd, int timeout_ms)
{
	return rp_agent_recv_fds(sock, buf, cap, fd, fd ? 1 : 0, timeout_ms);
}

ssize_t rp_agent_recv_fds(int sock, void *buf, size_t cap, int *fds, int maxfds, int timeout_ms)
{
	char cbuf[CMSG_SPACE(sizeof(int) * 4)];
	struct iovec iov = { buf, cap };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			    .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *cm;
	int nfd_got = 0, i;
	ssize_t r;

	for (i = 0; i < maxfds; i++)
		fds[i] = -1;
	if (timeout_ms >= 0) {
		int err = wait_for(sock, POLLIN, timeout_ms);

		if (err)
			return err;
	}
	do
		r = recvmsg(sock, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return errno == EAGAIN ? -ETIMEDOUT : -errno;
	for (cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm)) {
		size_t k, nfd;

		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (k = 0; k < nfd; k++) {
			int f;

			memcpy(&f, CMSG_DATA(cm) + k * sizeof(int), sizeof(int));
			if (nfd_got < maxfds)
				fds[nfd_got++] = f;
			else
				close(f);
		}
	}
	if (m.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
		for (i = 0; i < nfd_got; i++) {
			close(fds[i]);
			fds[i] = -1;
		}
		return -EMSGSIZE;
	}
	return r;
}
