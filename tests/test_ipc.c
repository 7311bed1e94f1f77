// SPDX-License-Identifier: MIT
/*
 * The diagnostics IPC server: the message parser and reply encoders, then
 * the server over real Unix sockets, driven by a small client written here
 * (its encoder is independent of user/ipc/ipc_proto.c on purpose) the way
 * dotnet-trace, dotnet-counters and dotnet-gcdump drive a .NET runtime.
 */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "clock.h"
#include "helpers.h"
#include "ipc.h"
#include "ipc_client.h"
#include "nettrace_read.h"
#include "ringpipe/ringpipe.h"
#include "session.h"

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define SCALE 5
#else
#define SCALE 1
#endif

#define HR_BAD_ENCODING 0x80131384u
#define HR_UNKNOWN_COMMAND 0x80131385u
#define HR_UNKNOWN_MAGIC 0x80131386u
#define HR_NOT_SUPPORTED 0x80131515u

/* ---- a client-side encoder -------------------------------------------- */

static void req_begin(struct bytebuf *b, uint8_t set, uint8_t id)
{
	static const uint8_t magic[14] = { 'D', 'O', 'T', 'N', 'E', 'T', '_', 'I', 'P', 'C',
					   '_', 'V', '1', 0 };
	uint8_t rest[6] = { 0, 0, set, id, 0, 0 };

	b->len = 0;
	bb_append(b, magic, 14);
	bb_append(b, rest, 6);
}

static void req_end(struct bytebuf *b)
{
	uint16_t sz = (uint16_t)b->len;

	cr_assert(!b->oom, "out of memory building a request");
	cr_assert_leq(b->len, 65535, "a request fits 64 KiB");
	memcpy(b->p + 14, &sz, 2);
}

/* count (incl. NUL) + UTF-16 of an ASCII string; NULL: count 0 (not utf.c's
 * encoder: the server's strings are checked against this one) */
static void wstr(struct bytebuf *b, const char *s)
{
	size_t i, n;

	if (!s) {
		bb_append_u32(b, 0);
		return;
	}
	n = strlen(s);
	bb_append_u32(b, (uint32_t)n + 1);
	for (i = 0; i <= n; i++)
		bb_append_u16(b, (uint8_t)s[i]);
}

struct prov {
	const char *name;
	uint64_t keywords;
	uint32_t level;
	const char *args;
};

struct collect_req {
	int version;		/* 1..6 */
	uint32_t buffer_mb;
	uint32_t format;
	bool rundown;		/* v2, v3 */
	uint64_t rundown_kw;	/* v4+ */
	bool stackwalk;		/* v3+ */
	uint32_t mode;		/* v6 */
	int nprov;
	struct prov prov[4];
};

static void build_collect(struct bytebuf *b, const struct collect_req *c)
{
	int i;

	req_begin(b, 0x02, (uint8_t)(0x01 + c->version));
	if (c->version >= 5)
		bb_append_u32(b, 0);	/* streaming session */
	bb_append_u32(b, c->buffer_mb);
	bb_append_u32(b, c->format);
	if (c->version == 2 || c->version == 3)
		bb_append_u8(b, c->rundown);
	if (c->version >= 4)
		bb_append_u64(b, c->rundown_kw);
	if (c->version >= 3)
		bb_append_u8(b, c->stackwalk);
	bb_append_u32(b, (uint32_t)c->nprov);
	for (i = 0; i < c->nprov; i++) {
		bb_append_u64(b, c->prov[i].keywords);
		bb_append_u32(b, c->prov[i].level);
		wstr(b, c->prov[i].name);
		wstr(b, c->prov[i].args);
		if (c->version >= 5) {
			bb_append_u8(b, 0);
			bb_append_u32(b, 0);	/* no event filter */
		}
	}
	if (c->version == 6)
		bb_append_u32(b, c->mode);
	req_end(b);
}

static void build_simple(struct bytebuf *b, uint8_t set, uint8_t id)
{
	req_begin(b, set, id);
	req_end(b);
}

static void build_stop(struct bytebuf *b, uint64_t id)
{
	req_begin(b, 0x02, 0x01);
	bb_append_u64(b, id);
	req_end(b);
}

/* ---- client-side transport -------------------------------------------- */

static int cl_connect(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = 20 };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	cr_assert_geq(fd, 0);
	cr_assert_lt(strlen(path), sizeof(a.sun_path));
	strcpy(a.sun_path, path);
	cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0, "connect %s: %s", path,
		     strerror(errno));
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

static void cl_send(int fd, const void *p, size_t n)
{
	cr_assert_eq(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n, "send: %s", strerror(errno));
}

/* Bytes read: n, or fewer at EOF / timeout / error. */
static size_t read_exact(int fd, void *p, size_t n)
{
	size_t got = 0;

	while (got < n) {
		ssize_t k = read(fd, (char *)p + got, n - got);

		if (k <= 0) {
			if (k < 0 && errno == EINTR)
				continue;
			break;
		}
		got += (size_t)k;
	}
	return got;
}

struct reply {
	bool ok;		/* a whole reply arrived */
	uint16_t size;
	uint8_t set, id;
	uint8_t payload[65536];
	size_t len;
};

static void read_reply(int fd, struct reply *r)
{
	uint8_t h[20];

	memset(r, 0, sizeof(*r));
	if (read_exact(fd, h, 20) != 20)
		return;
	cr_assert_eq(memcmp(h, "DOTNET_IPC_V1", 14), 0, "reply magic");
	memcpy(&r->size, h + 14, 2);
	r->set = h[16];
	r->id = h[17];
	cr_assert_geq(r->size, 20, "reply size %u", r->size);
	r->len = r->size - 20u;
	r->ok = read_exact(fd, r->payload, r->len) == r->len;
}

static struct reply *roundtrip(const char *path, const struct bytebuf *req)
{
	struct reply *r = malloc(sizeof(*r));
	int fd = cl_connect(path);

	cl_send(fd, req->p, req->len);
	read_reply(fd, r);
	close(fd);
	return r;
}

static void expect_error(const struct reply *r, uint32_t hr, const char *what)
{
	cr_assert(r->ok, "%s: expected an error reply, got none", what);
	cr_assert_eq(r->set, 0xFF, "%s: reply set 0x%x", what, r->set);
	cr_assert_eq(r->id, 0xFF, "%s: expected an error reply, got id 0x%x", what, r->id);
	cr_assert_eq(r->size, 24, "%s: error reply size %u", what, r->size);
	cr_assert_eq(le32_get(r->payload), hr, "%s: HRESULT 0x%08x, expected 0x%08x", what,
		     le32_get(r->payload), hr);
}

/* A protocol string from a reply, as ASCII ('?' for anything else). */
static char *rdstr(const struct reply *r, size_t *off)
{
	uint32_t n, i;
	char *s;

	cr_assert_leq(*off + 4, r->len, "string count inside the payload");
	n = le32_get(r->payload + *off);
	*off += 4;
	cr_assert_geq(n, 1, "a server never sends string count 0");
	cr_assert_leq(*off + 2 * (size_t)n, r->len, "string inside the payload");
	s = malloc(n);
	for (i = 0; i < n; i++) {
		uint16_t u;

		memcpy(&u, r->payload + *off + 2 * i, 2);
		s[i] = u < 0x80 ? (char)u : '?';
	}
	cr_assert_eq(s[n - 1], 0, "string ends with NUL");
	*off += 2 * (size_t)n;
	return s;
}

static void expect_str(const struct reply *r, size_t *off, const char *want)
{
	char *s = rdstr(r, off);

	cr_assert_str_eq(s, want, "string '%s', expected '%s'", s, want);
	free(s);
}

/* ProcessInfo (v1) answers with our pid: the server is alive and well. */
static void check_alive(const char *path, const char *after)
{
	struct bytebuf b = { 0 };
	struct reply *r;

	build_simple(&b, 0x04, 0x00);
	r = roundtrip(path, &b);
	cr_assert(r->ok && r->set == 0xFF && r->id == 0x00,
		  "after %s the server must still answer ProcessInfo", after);
	cr_assert_eq(le64_get(r->payload), (uint64_t)getpid(), "ProcessInfo pid after %s", after);
	free(r);
	bb_free(&b);
}

/* ---- fixtures ----------------------------------------------------------- */

static char *server_dir;
static char server_path[128];

/* TMPDIR is a fresh directory; start the server with opts (NULL: defaults). */
static void start_server(const struct rp_ipc_opts *opts)
{
	int err;

	server_dir = th_tmpdir();
	cr_assert_not_null(server_dir);
	setenv("TMPDIR", server_dir, 1);
	err = rp_ipc_server_start(opts);
	cr_assert_eq(err, 0, "rp_ipc_server_start: %d %s", err, rp_last_error());
	cr_assert_eq(rp_ipc_default_path(server_path, sizeof(server_path)), 0);
}

static void end_server(void)
{
	rp_ipc_server_stop();
	th_rmdir(server_dir);
	server_dir = NULL;
}

static const struct rp_field ev_fields[] = {
	{ "Counter", RP_TYPE_U64, 0, 0, NULL },
	{ "Pad", RP_TYPE_U64, 0, 0, NULL },
};

struct ev_payload {
	uint64_t counter;
	uint64_t pad;
};

static struct rp_event *test_event(const char *provider)
{
	struct rp_provider_opts po = { .sz = sizeof(po), .name = provider };
	struct rp_provider *p = rp_provider_new(&po);
	struct rp_event_opts eo = { .sz = sizeof(eo), .id = 7, .name = "Tick", .level = 4,
				    .keywords = 0x10, .nfields = 2, .fields = ev_fields };
	struct rp_event *ev;

	cr_assert_not_null(p, "%s", rp_last_error());
	ev = rp_event_new(p, &eo);
	cr_assert_not_null(ev, "%s", rp_last_error());
	return ev;
}

static void wait_enabled(struct rp_event *ev, bool want, const char *why)
{
	int i;

	for (i = 0; i < 12000 && rp_event_enabled(ev) != want; i++)	/* a 60 s hang guard */
		usleep(5000);
	cr_assert_eq(rp_event_enabled(ev), want, "%s", why);
}

/* Waits until n sessions enable the event (the OK goes out before the
 * session starts, so a client cannot know it directly). */
static void wait_sessions(struct rp_event *ev, int n, const char *why)
{
	const struct rp_event_hot *h = (const void *)ev;
	int i;

	for (i = 0; i < 12000 && __builtin_popcountll(__atomic_load_n(&h->sessions, __ATOMIC_RELAXED)) != n; i++)
		usleep(5000);
	cr_assert_eq(__builtin_popcountll(__atomic_load_n(&h->sessions, __ATOMIC_RELAXED)), n, "%s", why);
}

/* Reads a stream socket to EOF on its own thread. */
struct stream {
	int fd;
	size_t chunk;		/* bytes per read (0: 64 KiB) */
	useconds_t delay;	/* pause after each read: a slow reader */
	size_t limit;		/* hang up after this many bytes (0: read to EOF) */
	struct bytebuf got;
	pthread_t th;
};

static void *stream_main(void *arg)
{
	struct stream *s = arg;
	size_t chunk = s->chunk ? s->chunk : 65536;
	char *buf = malloc(chunk);
	ssize_t n;

	while ((n = read(s->fd, buf, chunk)) > 0) {
		bb_append(&s->got, buf, (size_t)n);
		if (s->limit && s->got.len >= s->limit)
			break;
		if (s->delay)
			usleep(s->delay);
	}
	free(buf);
	return NULL;
}

/* Sends a CollectTracing request; returns the socket, *id from the OK. */
static int collect(const char *path, const struct collect_req *c, uint64_t *id)
{
	struct bytebuf b = { 0 };
	struct reply *r = malloc(sizeof(*r));
	int fd = cl_connect(path);

	build_collect(&b, c);
	cl_send(fd, b.p, b.len);
	read_reply(fd, r);
	cr_assert(r->ok && r->set == 0xFF && r->id == 0x00 && r->size == 28,
		  "CollectTracing%d: OK with a u64 (set 0x%x id 0x%x size %u)", c->version, r->set,
		  r->id, r->size);
	*id = le64_get(r->payload);
	cr_assert_neq(*id, 0, "session ids are never 0");
	free(r);
	bb_free(&b);
	return fd;
}

static void stop_tracing(const char *path, uint64_t id)
{
	struct bytebuf b = { 0 };
	struct reply *r;

	build_stop(&b, id);
	r = roundtrip(path, &b);
	cr_assert(r->ok && r->id == 0x00 && r->size == 28, "StopTracing: OK with the id");
	cr_assert_eq(le64_get(r->payload), id, "StopTracing echoes the id");
	free(r);
	bb_free(&b);
}

/* Parses a received stream: events of `provider`, EventsLost, clean end. */
static uint64_t count_events(const struct bytebuf *got, const char *provider, int64_t *lost,
			     uint64_t *max_counter)
{
	struct nt_reader *r = nt_reader_new_mem(got->p, got->len);
	struct nt_rec rec;
	uint64_t n = 0, prev = 0;
	int err;

	cr_assert_not_null(r, "the stream (%zu bytes) opens as nettrace", got->len);
	cr_assert_eq(nt_reader_info(r)->format, 5, "IPC sessions stream nettrace V5");
	cr_assert_eq(nt_reader_info(r)->pid, getpid());
	while ((err = nt_reader_next(r, &rec)) > 0) {
		uint64_t c;

		if (strcmp(rec.meta->provider, provider))
			continue;
		cr_assert_str_eq(rec.meta->name, "Tick");
		cr_assert_eq(rec.payload_len, sizeof(struct ev_payload));
		memcpy(&c, rec.payload, 8);
		cr_assert_gt(c, prev, "events in the order they were written");
		prev = c;
		n++;
	}
	cr_assert_eq(err, 0, "the stream ends cleanly: %s", nt_reader_errmsg(r));
	if (lost)
		*lost = nt_reader_lost(r);
	if (max_counter)
		*max_counter = prev;
	nt_reader_free(r);
	return n;
}

static uint64_t write_events(struct rp_event *ev, uint64_t first, uint64_t n)
{
	struct ev_payload p = { 0 };
	uint64_t i, ok = 0;

	for (i = 0; i < n; i++) {
		p.counter = first + i;
		if (rp_event_write(ev, &p, sizeof(p)) == 0)
			ok++;
	}
	return ok;
}

/* ====================================================================== */
/* parser and encoders                                                     */
/* ====================================================================== */

Test(ipc, proto_worked_example_collect2)
{
	/* CollectTracing2 with buffer 256 MB, format 1, rundown, one provider
	 * (keywords 0x1, level 4, no arguments), byte for byte as the protocol
	 * lays it out (user/ipc/ipc.h): 99 bytes of payload, 119 in all */
	static const char name[] = "Microsoft-Windows-DotNETRuntime";
	struct bytebuf b = { 0 };
	struct ipc_msg m;
	struct ipc_error e;
	size_t i;

	req_begin(&b, 0x02, 0x03);
	bb_append_u32(&b, 256);
	bb_append_u32(&b, 1);
	bb_append_u8(&b, 1);
	bb_append_u32(&b, 1);
	bb_append_u64(&b, 1);
	bb_append_u32(&b, 4);
	bb_append_u32(&b, 32);
	for (i = 0; i < 32; i++) {
		uint16_t u = (uint8_t)name[i];

		bb_append(&b, &u, 2);
	}
	bb_append_u32(&b, 1);
	bb_append_u8(&b, 0);
	bb_append_u8(&b, 0);
	req_end(&b);
	cr_assert_eq(b.len, 119, "the worked example is 119 bytes");
	cr_assert_eq(b.p[14], 0x77);

	cr_assert_eq(ipc_msg_parse(b.p, b.len, &m, &e), 0, "%s", e.msg);
	cr_assert_eq(m.kind, IPC_MSG_COLLECT_TRACING);
	cr_assert_eq(m.u.collect.version, 2);
	cr_assert_eq(m.u.collect.buffer_mb, 256);
	cr_assert_eq(m.u.collect.format, 1);
	cr_assert_eq(m.u.collect.rundown_keyword, 0x80020139ull, "requestRundown: default keyword");
	cr_assert(m.u.collect.stackwalk, "CollectTracing2 walks stacks");
	cr_assert_eq(m.u.collect.buffering, 0);
	cr_assert_eq(m.u.collect.nproviders, 1);
	cr_assert_str_eq(m.u.collect.providers[0].name, name);
	cr_assert_eq(m.u.collect.providers[0].keywords, 1);
	cr_assert_eq(m.u.collect.providers[0].level, 4);
	cr_assert_str_eq(m.u.collect.providers[0].args, "", "count 1 is the empty string");
	ipc_msg_free(&m);
	bb_free(&b);
}

Test(ipc, proto_every_collect_version)
{
	struct collect_req c = { .buffer_mb = 64, .format = 1, .rundown_kw = 0x123,
				 .stackwalk = false, .mode = 1, .nprov = 2,
				 .prov = { { "A", 0xF0, 5, "k=v;x=y" }, { "B", 0, 0, NULL } } };
	struct bytebuf b = { 0 };
	int v;

	for (v = 1; v <= 6; v++) {
		struct ipc_msg m;
		struct ipc_error e;
		const struct ipc_collect *col = &m.u.collect;

		c.version = v;
		c.rundown = v == 2;
		build_collect(&b, &c);
		cr_assert_eq(ipc_msg_parse(b.p, b.len, &m, &e), 0, "v%d: %s", v, e.msg);
		cr_assert_eq(col->version, v);
		cr_assert_eq(col->session_type, 0);
		cr_assert_eq(col->buffer_mb, 64);
		cr_assert_eq(col->nproviders, 2);
		cr_assert_str_eq(col->providers[0].name, "A");
		cr_assert_eq(col->providers[0].keywords, 0xF0);
		cr_assert_eq(col->providers[0].level, 5);
		cr_assert_str_eq(col->providers[0].args, "k=v;x=y");
		cr_assert_null(col->providers[1].args, "count 0 is null");
		switch (v) {
		case 1:
			cr_assert_eq(col->rundown_keyword, 0x80020139ull);
			cr_assert(col->stackwalk);
			break;
		case 2:
			cr_assert_eq(col->rundown_keyword, 0x80020139ull);
			cr_assert(col->stackwalk);
			break;
		case 3:
			cr_assert_eq(col->rundown_keyword, 0, "requestRundown false: no rundown");
			cr_assert(!col->stackwalk, "requestStackwalk false");
			break;
		default:
			cr_assert_eq(col->rundown_keyword, 0x123, "v%d rundown keyword", v);
			cr_assert(!col->stackwalk);
			break;
		}
		cr_assert_eq(col->buffering, v == 6 ? 1u : 0u, "v%d buffering mode", v);
		ipc_msg_free(&m);
	}
	bb_free(&b);
}

Test(ipc, proto_collect5_filters_and_user_events)
{
	struct bytebuf b = { 0 };
	struct ipc_msg m;
	struct ipc_error e;

	/* streaming, with an allow-list of event ids */
	req_begin(&b, 0x02, 0x06);
	bb_append_u32(&b, 0);
	bb_append_u32(&b, 16);
	bb_append_u32(&b, 1);
	bb_append_u64(&b, 0);
	bb_append_u8(&b, 1);
	bb_append_u32(&b, 1);
	bb_append_u64(&b, 0x1);
	bb_append_u32(&b, 4);
	wstr(&b, "P");
	wstr(&b, "");
	bb_append_u8(&b, 1);
	bb_append_u32(&b, 3);
	bb_append_u32(&b, 10);
	bb_append_u32(&b, 11);
	bb_append_u32(&b, 12);
	req_end(&b);
	cr_assert_eq(ipc_msg_parse(b.p, b.len, &m, &e), 0, "%s", e.msg);
	cr_assert(m.u.collect.providers[0].filter_enable);
	cr_assert_eq(m.u.collect.providers[0].nevent_ids, 3);
	cr_assert_eq(m.u.collect.providers[0].event_ids[2], 12);
	ipc_msg_free(&m);

	/* user_events: no buffer/format/stackwalk, tracepoint sets */
	req_begin(&b, 0x02, 0x07);
	bb_append_u32(&b, 1);
	bb_append_u64(&b, 0);
	bb_append_u32(&b, 1);
	bb_append_u64(&b, 0x1);
	bb_append_u32(&b, 4);
	wstr(&b, "P");
	wstr(&b, NULL);
	bb_append_u8(&b, 0);
	bb_append_u32(&b, 0);
	wstr(&b, "dflt");
	bb_append_u32(&b, 2);
	wstr(&b, "tp_a");
	bb_append_u32(&b, 1);
	bb_append_u32(&b, 5);
	wstr(&b, "tp_b");
	bb_append_u32(&b, 2);
	bb_append_u32(&b, 6);
	bb_append_u32(&b, 7);
	req_end(&b);
	cr_assert_eq(ipc_msg_parse(b.p, b.len, &m, &e), 0, "%s", e.msg);
	cr_assert_eq(m.u.collect.session_type, 1);
	cr_assert(!m.u.collect.stackwalk);
	cr_assert_eq(m.u.collect.buffering, 0, "v6 user_events has no buffering field");
	cr_assert_str_eq(m.u.collect.providers[0].default_tracepoint, "dflt");
	cr_assert_eq(m.u.collect.providers[0].ntracepoint_sets, 2);
	cr_assert_str_eq(m.u.collect.providers[0].tracepoint_sets[1].name, "tp_b");
	cr_assert_eq(m.u.collect.providers[0].tracepoint_sets[1].ids[1], 7);
	ipc_msg_free(&m);

	/* the same id in two sets */
	memcpy(b.p + b.len - 4, "\x05\0\0\0", 4);
	cr_assert_eq(ipc_msg_parse(b.p, b.len, &m, &e), -EBADMSG);
	cr_assert(strstr(e.msg, "event id 5"), "%s", e.msg);
	bb_free(&b);
}

Test(ipc, proto_utf16_strings)
{
	/* "é" + U+1F600 as a pair + a lone high surrogate + NUL */
	static const uint16_t units[] = { 0x00E9, 0xD83D, 0xDE00, 0xD800, 0 };
	struct bytebuf b = { 0 }, s = { 0 };
	struct ipc_msg m;
	struct ipc_error e;
	uint32_t n;

	req_begin(&b, 0x04, 0x03);	/* SetEnvironmentVariable */
	bb_append_u32(&b, 5);
	bb_append(&b, units, sizeof(units));
	wstr(&b, "v");
	req_end(&b);
	cr_assert_eq(ipc_msg_parse(b.p, b.len, &m, &e), 0, "%s", e.msg);
	cr_assert_str_eq(m.u.setenv.name, "\xC3\xA9\xF0\x9F\x98\x80\xEF\xBF\xBD",
			 "UTF-16 to UTF-8, a lone surrogate as U+FFFD");
	ipc_msg_free(&m);

	/* and back: UTF-8 in, UTF-16 out, invalid bytes as U+FFFD */
	cr_assert_eq(ipc_string_put(&s, "\xC3\xA9\xF0\x9F\x98\x80\xFFz", SIZE_MAX), 0);
	n = le32_get(s.p);
	cr_assert_eq(n, 6, "é, a pair, U+FFFD, z, NUL: %u units", n);
	cr_assert_eq(memcmp(s.p + 4, "\xE9\x00\x3D\xD8\x00\xDE\xFD\xFF\x7A\x00\x00\x00", 12), 0);
	/* a cut never splits the pair */
	s.len = 0;
	cr_assert_eq(ipc_string_put(&s, "a\xF0\x9F\x98\x80", 2), 0);
	cr_assert_eq(le32_get(s.p), 2, "'a' and the NUL; the pair does not fit");
	s.len = 0;
	cr_assert_eq(ipc_string_put(&s, NULL, SIZE_MAX), 0);
	cr_assert_eq(le32_get(s.p), 1, "NULL goes out as \"\" (count 1), never count 0");
	bb_free(&s);
	bb_free(&b);
}

/* The client's encoder refuses what is not UTF-8 (the command then names
 * the provider) where the server's replaces it: a tool must not enable a
 * provider the user did not name. */
Test(ipc, client_strings_refuse_malformed_utf8)
{
	struct bytebuf b = { 0 };

	cr_assert_eq(ipcc_put_string(&b, "P\xC3\xA9"), 0, "well-formed UTF-8 is sent");
	cr_assert(b.len == 4 + 6 && le32_get(b.p) == 3 && !memcmp(b.p + 4, "P\0\xE9\0\0\0", 6),
		  "as count 3, then 'P', U+00E9, NUL (%zu bytes)", b.len);
	b.len = 0;
	cr_assert_eq(ipcc_put_string(&b, "\xEF\xBF\xBD"), 0, "a real U+FFFD is well-formed");
	cr_assert(le32_get(b.p) == 2 && !memcmp(b.p + 4, "\xFD\xFF", 2), "and sent as it is");
	b.len = 0;
	cr_assert_eq(ipcc_put_string(&b, "ok"), 0);
	cr_assert_eq(ipcc_put_string(&b, "bad\xC0\x80"), -EILSEQ, "an overlong NUL is refused");
	cr_assert_eq(ipcc_put_string(&b, "\xED\xA0\x80"), -EILSEQ, "a surrogate is refused");
	cr_assert_eq(ipcc_put_string(&b, "cut\xE2\x82"), -EILSEQ, "a cut sequence is refused");
	cr_assert_eq(b.len, 4 + 6, "a refused string leaves nothing behind (%zu bytes)", b.len);
	cr_assert_eq(ipcc_put_string(&b, NULL), 0);
	cr_assert_eq(le32_get(b.p + 10), 0, "NULL is count 0 from the client");
	bb_free(&b);
}

struct bad_case {
	const char *what;
	int err;
	uint32_t hr;
	const char *msg;	/* a piece of the message */
};

static void expect_parse_error(const struct bytebuf *b, const struct bad_case *c)
{
	struct ipc_msg m;
	struct ipc_error e;
	int r = ipc_msg_parse(b->p, b->len, &m, &e);

	cr_assert_eq(r, c->err, "%s: parse returned %d, expected %d (%s)", c->what, r, c->err,
		     e.msg);
	cr_assert_eq(e.hresult, c->hr, "%s: HRESULT 0x%08x", c->what, e.hresult);
	cr_assert(strstr(e.msg, c->msg), "%s: message '%s' lacks '%s'", c->what, e.msg, c->msg);
}

Test(ipc, proto_rejects_bad_input_with_a_reason)
{
	struct collect_req ok = { .version = 2, .buffer_mb = 16, .format = 1, .nprov = 1,
				  .prov = { { "P", 0, 4, "" } } };
	struct collect_req c;
	struct bytebuf b = { 0 };
	size_t i;

	build_collect(&b, &ok);
	for (i = 0; i < 20; i++) {
		struct bytebuf t = { 0 };

		bb_append(&t, b.p, i);
		expect_parse_error(&t, &(struct bad_case){ "truncated header", -EBADMSG,
							   HR_BAD_ENCODING, "header truncated" });
		bb_free(&t);
	}
	b.p[3] = 'X';
	expect_parse_error(&b, &(struct bad_case){ "wrong magic", -EPROTO, HR_UNKNOWN_MAGIC, "magic" });
	b.p[3] = 'N';
	b.p[13] = '!';
	expect_parse_error(&b, &(struct bad_case){ "magic without NUL", -EPROTO, HR_UNKNOWN_MAGIC,
						   "magic" });
	b.p[13] = 0;
	b.p[14] = 19, b.p[15] = 0;
	expect_parse_error(&b, &(struct bad_case){ "size under 20", -EBADMSG, HR_BAD_ENCODING,
						   "smaller than" });
	b.p[14] = 0xFF, b.p[15] = 0xFF;
	expect_parse_error(&b, &(struct bad_case){ "size over the bytes", -EBADMSG, HR_BAD_ENCODING,
						   "only" });
	build_collect(&b, &ok);
	b.len -= 1;
	expect_parse_error(&b, &(struct bad_case){ "short payload", -EBADMSG, HR_BAD_ENCODING,
						   "only" });
	/* size shorter than the bytes: the message is what size says */
	b.p[14] -= 6;
	expect_parse_error(&b, &(struct bad_case){ "payload cut by size", -EBADMSG,
						   HR_BAD_ENCODING, "payload ends" });

	/* absurd string length: the name's count */
	build_collect(&b, &ok);
	memcpy(b.p + 20 + 4 + 4 + 1 + 4 + 8 + 4, "\xFF\xFF\xFF\x7F", 4);
	expect_parse_error(&b, &(struct bad_case){ "absurd string length", -EBADMSG,
						   HR_BAD_ENCODING, "provider name" });
	build_collect(&b, &ok);
	memcpy(b.p + 20 + 4 + 4 + 1 + 4 + 8 + 4, "\x03\0\0\0", 4);	/* "P" + NUL is 2 */
	expect_parse_error(&b, &(struct bad_case){ "string without its NUL", -EBADMSG,
						   HR_BAD_ENCODING, "NUL" });
	c = ok;
	c.prov[0].name = "PQ";
	build_collect(&b, &c);
	memcpy(b.p + 20 + 4 + 4 + 1 + 4 + 8 + 4 + 4 + 2, "\0\0", 2);	/* 'P', NUL, NUL */
	expect_parse_error(&b, &(struct bad_case){ "NUL inside a string", -EBADMSG,
						   HR_BAD_ENCODING, "NUL inside the string at unit 1" });

	c = ok;
	c.prov[0].level = 6;
	build_collect(&b, &c);
	expect_parse_error(&b, &(struct bad_case){ "level 6", -EBADMSG, HR_BAD_ENCODING, "level 6" });
	c = ok;
	c.prov[0].name = "";
	build_collect(&b, &c);
	expect_parse_error(&b, &(struct bad_case){ "empty name", -EBADMSG, HR_BAD_ENCODING,
						   "no name" });
	c = ok;
	c.nprov = 0;
	build_collect(&b, &c);
	expect_parse_error(&b, &(struct bad_case){ "no provider", -EBADMSG, HR_BAD_ENCODING,
						   "0 providers" });
	build_collect(&b, &ok);
	memcpy(b.p + 20 + 9, "\xE9\x03\0\0", 4);	/* 1001 providers */
	expect_parse_error(&b, &(struct bad_case){ "1001 providers", -EBADMSG, HR_BAD_ENCODING,
						   "1001 providers" });
	memcpy(b.p + 20 + 9, "\x64\0\0\0", 4);	/* 100 providers in 16 bytes */
	expect_parse_error(&b, &(struct bad_case){ "providers past the end", -EBADMSG,
						   HR_BAD_ENCODING, "cannot fit" });
	c = ok;
	c.buffer_mb = 0;
	build_collect(&b, &c);
	expect_parse_error(&b, &(struct bad_case){ "buffer 0", -EBADMSG, HR_BAD_ENCODING,
						   "circularBufferMB" });
	c = ok;
	c.format = 2;
	build_collect(&b, &c);
	expect_parse_error(&b, &(struct bad_case){ "format 2", -EBADMSG, HR_BAD_ENCODING,
						   "format 2" });
	c = ok;
	c.version = 6;
	c.mode = 7;
	build_collect(&b, &c);
	expect_parse_error(&b, &(struct bad_case){ "buffering mode 7", -EBADMSG, HR_BAD_ENCODING,
						   "buffering mode 7" });
	c.mode = 1;
	build_collect(&b, &c);
	b.len -= 4;
	b.p[14] -= 4;
	expect_parse_error(&b, &(struct bad_case){ "v6 without its mode", -EBADMSG,
						   HR_BAD_ENCODING, "bufferingMode" });
	build_collect(&b, &c);
	b.p[20] = 2;	/* session type */
	expect_parse_error(&b, &(struct bad_case){ "session type 2", -EBADMSG, HR_BAD_ENCODING,
						   "session type 2" });

	req_begin(&b, 0x02, 0x01);
	bb_append_u32(&b, 1);
	req_end(&b);
	expect_parse_error(&b, &(struct bad_case){ "StopTracing with 4 bytes", -EBADMSG,
						   HR_BAD_ENCODING, "session id" });
	build_simple(&b, 0x42, 0x00);
	expect_parse_error(&b, &(struct bad_case){ "command set 0x42", -EOPNOTSUPP,
						   HR_UNKNOWN_COMMAND, "0x42" });
	build_simple(&b, 0x02, 0x08);
	expect_parse_error(&b, &(struct bad_case){ "EventPipe 0x08", -EOPNOTSUPP,
						   HR_UNKNOWN_COMMAND, "EventPipe" });
	build_simple(&b, 0x01, 0x03);
	expect_parse_error(&b, &(struct bad_case){ "GenerateCoreDump3", -EOPNOTSUPP,
						   HR_UNKNOWN_COMMAND, "dump" });
	build_simple(&b, 0x03, 0x01);
	expect_parse_error(&b, &(struct bad_case){ "AttachProfiler", -EOPNOTSUPP,
						   HR_UNKNOWN_COMMAND, "profiler" });
	build_simple(&b, 0x04, 0x05);
	expect_parse_error(&b, &(struct bad_case){ "EnablePerfMap", -EOPNOTSUPP,
						   HR_UNKNOWN_COMMAND, "0x05" });
	build_simple(&b, 0xFF, 0x00);
	expect_parse_error(&b, &(struct bad_case){ "a reply sent as a request", -EOPNOTSUPP,
						   HR_UNKNOWN_COMMAND, "0xff" });
	req_begin(&b, 0x04, 0x03);
	wstr(&b, "A=B");
	wstr(&b, "v");
	req_end(&b);
	expect_parse_error(&b, &(struct bad_case){ "name with '='", -EBADMSG, HR_BAD_ENCODING,
						   "'='" });
	req_begin(&b, 0x04, 0x03);
	bb_append_u32(&b, 4);
	bb_append(&b, "A\0\0\0B\0\0\0", 8);
	wstr(&b, "v");
	req_end(&b);
	expect_parse_error(&b, &(struct bad_case){ "NUL inside a name", -EBADMSG, HR_BAD_ENCODING,
						   "NUL inside" });
	bb_free(&b);
}

Test(ipc, proto_replies)
{
	struct ipc_process_info pi = { .pid = 4242, .command_line = "/bin/app --flag",
				       .os = "Linux", .arch = "x64", .assembly = "app",
				       .clr_version = "ringpipe 0.1.0", .rid = "linux-x64" };
	struct reply *r = calloc(1, sizeof(*r));
	struct bytebuf b = { 0 }, cont = { 0 };
	uint8_t out[28];
	size_t off;
	char *big;
	int v;

	cr_assert_eq(ipc_reply_ok_u64(out, 0x1122334455667788ull), 28);
	cr_assert_eq(memcmp(out, "DOTNET_IPC_V1\0\x1c\0\xff\0\0\0\x88\x77", 22), 0);
	cr_assert_eq(ipc_reply_error(out, HR_BAD_ENCODING), 24);
	cr_assert_eq(memcmp(out + 14, "\x18\0\xff\xff\0\0\x84\x13\x13\x80", 10), 0);
	cr_assert_eq(ipc_reply_ok_code(out, 0), 24);
	cr_assert_eq(memcmp(out + 14, "\x18\0\xff\0\0\0\0\0\0\0", 10), 0);

	memset(pi.cookie, 0xAB, 16);
	for (v = 1; v <= 3; v++) {
		b.len = 0;
		cr_assert_eq(ipc_process_info_encode(&b, v, &pi), 0);
		memcpy(&r->size, b.p + 14, 2);
		cr_assert_eq(r->size, b.len, "v%d size field is the message length", v);
		cr_assert_eq(b.p[16], 0xFF);
		cr_assert_eq(b.p[17], 0x00);
		r->len = b.len - 20;
		memcpy(r->payload, b.p + 20, r->len);
		off = 0;
		if (v == 3) {
			cr_assert_eq(le32_get(r->payload), 1, "ProcessInfo3 version field");
			off = 4;
		}
		cr_assert_eq(le64_get(r->payload + off), 4242);
		cr_assert_eq(r->payload[off + 8], 0xAB);
		off += 24;
		expect_str(r, &off, "/bin/app --flag");
		expect_str(r, &off, "Linux");
		expect_str(r, &off, "x64");
		if (v >= 2) {
			expect_str(r, &off, "app");
			expect_str(r, &off, "ringpipe 0.1.0");
		}
		if (v == 3)
			expect_str(r, &off, "linux-x64");
		cr_assert_eq(off, r->len, "v%d: nothing after the last field", v);
	}
	/* a command line too long for one message is cut to fit */
	big = malloc(100000);
	memset(big, 'x', 99999);
	big[99999] = 0;
	pi.command_line = big;
	b.len = 0;
	cr_assert_eq(ipc_process_info_encode(&b, 3, &pi), 0);
	cr_assert_leq(b.len, 65535);
	cr_assert_geq(b.len, 65530, "the command line uses the room there is");
	memcpy(&r->size, b.p + 14, 2);
	cr_assert_eq(r->size, b.len);
	r->len = b.len - 20;
	memcpy(r->payload, b.p + 20, r->len);
	off = 28;
	free(rdstr(r, &off));
	expect_str(r, &off, "Linux");
	free(big);

	/* environment: entries without '=' are skipped; sizes add up */
	{
		char *env[] = { "A=1", "NOEQUALS", "B=", NULL };

		b.len = 0;
		cr_assert_eq(ipc_environment_encode(&b, &cont, env), 0);
		cr_assert_eq(b.len, 26);
		cr_assert_eq(b.p[14], 26);
		cr_assert_eq(le32_get(b.p + 20), cont.len, "nIncomingBytes is the continuation's length");
		cr_assert_eq(cont.len, 4 + (4 + 8) + (4 + 6));
		cr_assert_eq(le32_get(cont.p), 2);
	}
	{
		uint8_t adv[34], cookie[16];

		memset(cookie, 0x5A, 16);
		ipc_advertise_put(adv, cookie, 77);
		cr_assert_eq(memcmp(adv, "ADVR_V1\0", 8), 0);
		cr_assert_eq(adv[8], 0x5A);
		cr_assert_eq(le64_get(adv + 24), 77);
		cr_assert_eq(adv[32] | adv[33], 0);
	}
	bb_free(&cont);
	bb_free(&b);
	free(r);
}

Test(ipc, proto_diagnostic_ports_syntax)
{
	struct ipc_port_cfg p[IPC_MAX_PORTS];
	char err[256] = "", longp[200];
	size_t n;

	cr_assert_eq(ipc_ports_parse("/tmp/a.sock", p, IPC_MAX_PORTS, &n, err, sizeof(err)), 0);
	cr_assert_eq(n, 1);
	cr_assert(p[0].connect && p[0].suspend, "defaults: connect, suspend");
	cr_assert_eq(ipc_ports_parse(";/a,LISTEN,nosuspend;;/b,suspend,connect,listen,nosuspend;",
				     p, IPC_MAX_PORTS, &n, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(n, 2);
	cr_assert_str_eq(p[0].path, "/a");
	cr_assert(!p[0].connect && !p[0].suspend);
	cr_assert_str_eq(p[1].path, "/b");
	cr_assert(p[1].connect && p[1].suspend, "the first tag of a kind wins");
	cr_assert_eq(ipc_ports_parse(",,nosuspend,connect", p, IPC_MAX_PORTS, &n, err, sizeof(err)),
		     0);
	cr_assert_str_eq(p[0].path, "nosuspend", "the first item is the address");
	cr_assert_eq(ipc_ports_parse("", p, IPC_MAX_PORTS, &n, err, sizeof(err)), 0);
	cr_assert_eq(n, 0);
	cr_assert_eq(ipc_ports_parse("/a,lisen", p, IPC_MAX_PORTS, &n, err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, "unknown tag 'lisen'"), "%s", err);
	memset(longp, 'a', sizeof(longp) - 1);
	longp[sizeof(longp) - 1] = 0;
	cr_assert_eq(ipc_ports_parse(longp, p, IPC_MAX_PORTS, &n, err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, "Unix socket path"), "%s", err);
	cr_assert_eq(ipc_ports_parse("a;b;c", p, 2, &n, err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, "more than 2"), "%s", err);
}

/* Every seed of the fuzz corpus is a real message: it parses, or it is a
 * "bad-*" seed and is refused. */
Test(ipc, proto_fuzz_corpus_seeds_parse)
{
	const char *dir = "tests/fuzz/corpus/ipc";
	DIR *d = opendir(dir);
	struct dirent *de;
	int good = 0, bad = 0;

	if (!d)
		cr_skip_test("%s not found (run from the source tree)", dir);
	while ((de = readdir(d))) {
		struct bytebuf b = { 0 };
		struct ipc_msg m;
		struct ipc_error e;
		char path[512];
		int r;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		cr_assert_eq(th_read_file(path, &b), 0, "%s", path);
		r = ipc_msg_parse(b.p, b.len, &m, &e);
		if (!strncmp(de->d_name, "bad-", 4)) {
			cr_assert_neq(r, 0, "%s must be refused", de->d_name);
			bad++;
		} else {
			cr_assert_eq(r, 0, "%s: %s", de->d_name, e.msg);
			good++;
		}
		ipc_msg_free(&m);
		bb_free(&b);
	}
	closedir(d);
	cr_assert_geq(good, 10, "the corpus holds the real messages (%d)", good);
	cr_assert_geq(bad, 1);
}

/* ====================================================================== */
/* the server over real sockets                                            */
/* ====================================================================== */

static unsigned long long proc_starttime(void)
{
	struct bytebuf b = { 0 };
	char *p, *save = NULL, *tok;
	unsigned long long v = 0;
	int field = 3;

	cr_assert_eq(th_read_file("/proc/self/stat", &b), 0);
	p = strrchr((char *)b.p, ')');
	for (tok = strtok_r(p + 1, " ", &save); tok; tok = strtok_r(NULL, " ", &save), field++)
		if (field == 22) {
			v = strtoull(tok, NULL, 10);
			break;
		}
	bb_free(&b);
	return v;
}

Test(ipc, default_socket_answers_process_info, .timeout = 60)
{
	struct bytebuf b = { 0 }, cmd = { 0 };
	struct stat st;
	char want[256];
	size_t off, i;
	int v;

	start_server(NULL);
	snprintf(want, sizeof(want), "%s/dotnet-diagnostic-%d-%llu-socket", server_dir, getpid(),
		 proc_starttime());
	cr_assert_str_eq(server_path, want, "named as the runtime names it");
	cr_assert_eq(stat(want, &st), 0, "%s exists", want);
	cr_assert(S_ISSOCK(st.st_mode));
	cr_assert_eq(st.st_mode & 0777, 0600, "mode %o, expected 0600", st.st_mode & 0777);

	cr_assert_eq(th_read_file("/proc/self/cmdline", &cmd), 0);
	while (cmd.len && !cmd.p[cmd.len - 1])
		cmd.len--;
	for (i = 0; i < cmd.len; i++)
		if (!cmd.p[i])
			cmd.p[i] = ' ';
	cmd.p[cmd.len] = 0;

	for (v = 1; v <= 3; v++) {
		static const uint8_t ids[] = { 0, 0x00, 0x04, 0x08 };
		struct reply *r;
		uint8_t zero[16] = { 0 };
		char *s;

		build_simple(&b, 0x04, ids[v]);
		r = roundtrip(server_path, &b);
		cr_assert(r->ok && r->set == 0xFF && r->id == 0x00, "ProcessInfo%d: OK", v);
		off = v == 3 ? 4 : 0;
		if (v == 3)
			cr_assert_eq(le32_get(r->payload), 1);
		cr_assert_eq(le64_get(r->payload + off), (uint64_t)getpid());
		cr_assert_neq(memcmp(r->payload + off + 8, zero, 16), 0, "a random cookie");
		off += 24;
		s = rdstr(r, &off);
		cr_assert_str_eq(s, (char *)cmd.p, "the command line, arguments joined by spaces");
		free(s);
		expect_str(r, &off, "Linux");
		s = rdstr(r, &off);
#if defined(__x86_64__)
		cr_assert_str_eq(s, "x64");
#elif defined(__aarch64__)
		cr_assert_str_eq(s, "arm64");
#endif
		free(s);
		if (v >= 2) {
			s = rdstr(r, &off);
			cr_assert_str_eq(s, program_invocation_short_name);
			free(s);
			{
				char ours[64];

				snprintf(ours, sizeof(ours), "ringpipe %s", rp_version());
				expect_str(r, &off, ours);
			}
		}
		if (v == 3) {
			s = rdstr(r, &off);
#if defined(__x86_64__) && defined(__GLIBC__)
			cr_assert_str_eq(s, "linux-x64");
#endif
			free(s);
		}
		cr_assert_eq(off, r->len);
		free(r);
	}
	end_server();
	cr_assert_neq(access(want, F_OK), 0, "the socket is unlinked at stop");
	bb_free(&b);
	bb_free(&cmd);
}

Test(ipc, collect2_streams_and_stop_tracing_ends_it, .timeout = 120)
{
	struct rp_event *ev = test_event("Test-Ipc-Collect");
	struct collect_req c = { .version = 2, .buffer_mb = 16, .format = 1, .rundown = true,
				 .nprov = 2, .prov = { { "Test-Ipc-Collect", 0x10, 4, "" },
						       { "Some-Other-Provider", 0, 5, "a=b" } } };
	struct stream st = { 0 };
	uint64_t id, n = 20000 / SCALE, got;
	int64_t lost;

	start_server(NULL);
	cr_assert(!rp_event_enabled(ev));
	st.fd = collect(server_path, &c, &id);
	wait_enabled(ev, true, "CollectTracing2 enables the provider");
	cr_assert_eq(pthread_create(&st.th, NULL, stream_main, &st), 0);
	cr_assert_eq(write_events(ev, 1, n), n, "a 16 MiB session captures every event");
	/* a second connection stops it: the stream ends with EOF */
	stop_tracing(server_path, id);
	pthread_join(st.th, NULL);
	close(st.fd);
	cr_assert(!rp_event_enabled(ev), "stopped");
	got = count_events(&st.got, "Test-Ipc-Collect", &lost, NULL);
	cr_assert_eq(got, n, "%" PRIu64 " of %" PRIu64 " events in the stream", got, n);
	cr_assert_eq(lost, 0);
	check_alive(server_path, "a whole session");
	bb_free(&st.got);
	end_server();
}

/* Writes until the first write that does not return 0, at most max. */
static uint64_t write_until_drop(struct rp_event *ev, uint64_t max, uint64_t *ok)
{
	struct ev_payload p = { 0 };
	uint64_t i;

	*ok = 0;
	for (i = 1; i <= max; i++) {
		p.counter = i;
		if (rp_event_write(ev, &p, sizeof(p)))
			return i;
		(*ok)++;
	}
	return 0;
}

static bool some_block_slot(void)
{
	bool found = false;
	int i;

	pthread_mutex_lock(&rp_control_lock);
	for (i = 0; i < RP_MAX_SESSIONS; i++)
		if (rp_slots[i].state == SLOT_RUNNING && rp_slots[i].block)
			found = true;
	pthread_mutex_unlock(&rp_control_lock);
	return found;
}

Test(ipc, collect6_block_mode_loses_nothing_to_a_slow_reader, .timeout = 300)
{
	struct rp_event *ev = test_event("Test-Ipc-Block");
	struct collect_req c = { .version = 6, .buffer_mb = 1, .format = 1, .stackwalk = false,
				 .mode = 1, .nprov = 1, .prov = { { "Test-Ipc-Block", 0, 5, NULL } } };
	struct stream st = { .chunk = 4096, .delay = 300 };
	uint64_t id, n = SCALE > 1 ? 100000 : 200000, ok, got, first_drop;
	int64_t lost;

	start_server(NULL);

	/* Drop (mode 0) for contrast: the same slow reader makes writes drop */
	c.mode = 0;
	st.fd = collect(server_path, &c, &id);
	wait_enabled(ev, true, "CollectTracing6 Drop session");
	cr_assert(!some_block_slot(), "mode 0 is a Drop session");
	cr_assert_eq(pthread_create(&st.th, NULL, stream_main, &st), 0);
	first_drop = write_until_drop(ev, 20 * n, &ok);
	cr_assert_gt(first_drop, 0, "a 1 MiB Drop session behind a slow reader drops");
	stop_tracing(server_path, id);
	pthread_join(st.th, NULL);
	close(st.fd);
	wait_enabled(ev, false, "the Drop session ended");
	bb_free(&st.got);

	/* Block (mode 1): more than the buffer holds, nothing lost */
	memset(&st, 0, sizeof(st));
	st.chunk = 4096;
	st.delay = 300;
	c.mode = 1;
	st.fd = collect(server_path, &c, &id);
	wait_enabled(ev, true, "CollectTracing6 Block session");
	cr_assert(some_block_slot(), "mode 1 is a Block session");
	cr_assert_eq(pthread_create(&st.th, NULL, stream_main, &st), 0);
	ok = write_events(ev, 1, n);
	cr_assert_eq(ok, n, "Block: every write succeeds (%" PRIu64 " of %" PRIu64 ")", ok, n);
	stop_tracing(server_path, id);
	pthread_join(st.th, NULL);
	close(st.fd);
	cr_assert_gt(n * sizeof(struct ev_payload), 1u << 20,
		     "the payloads alone are more than the 1 MiB buffer holds");
	got = count_events(&st.got, "Test-Ipc-Block", &lost, NULL);
	cr_assert_eq(got, n, "Block: %" PRIu64 " of %" PRIu64 " events arrived", got, n);
	cr_assert_eq(lost, 0);
	bb_free(&st.got);
	end_server();
}

Test(ipc, collect6_bad_buffering_mode_is_bad_encoding, .timeout = 60)
{
	struct collect_req c = { .version = 6, .buffer_mb = 1, .format = 1, .mode = 7, .nprov = 1,
				 .prov = { { "Test-Ipc-Mode", 0, 5, NULL } } };
	struct bytebuf b = { 0 };
	struct reply *r;

	start_server(NULL);
	build_collect(&b, &c);
	r = roundtrip(server_path, &b);
	expect_error(r, HR_BAD_ENCODING, "CollectTracing6 with buffering mode 7");
	free(r);
	check_alive(server_path, "buffering mode 7");
	bb_free(&b);
	end_server();
}

Test(ipc, unsupported_sessions_are_declined, .timeout = 60)
{
	struct collect_req c = { .version = 2, .buffer_mb = 1, .format = 0, .nprov = 1,
				 .prov = { { "Test-Ipc-NetPerf", 0, 5, NULL } } };
	struct bytebuf b = { 0 };
	struct reply *r;

	start_server(NULL);
	build_collect(&b, &c);
	r = roundtrip(server_path, &b);
	expect_error(r, HR_NOT_SUPPORTED, "the NetPerf format");
	free(r);

	/* a user_events session (CollectTracing5, type 1) */
	req_begin(&b, 0x02, 0x06);
	bb_append_u32(&b, 1);
	bb_append_u64(&b, 0);
	bb_append_u32(&b, 1);
	bb_append_u64(&b, 0);
	bb_append_u32(&b, 4);
	wstr(&b, "P");
	wstr(&b, NULL);
	bb_append_u8(&b, 0);
	bb_append_u32(&b, 0);
	wstr(&b, "tp");
	bb_append_u32(&b, 0);
	req_end(&b);
	r = roundtrip(server_path, &b);
	expect_error(r, HR_NOT_SUPPORTED, "a user_events session");
	free(r);
	check_alive(server_path, "declined sessions");
	bb_free(&b);
	end_server();
}

Test(ipc, no_free_session_slot_is_a_fail_reply, .timeout = 120)
{
	struct collect_req c = { .version = 2, .buffer_mb = 1, .format = 1, .nprov = 1,
				 .prov = { { "Test-Ipc-Full", 0, 5, NULL } } };
	struct rp_provider_config pc = { .name = "Test-Ipc-Full-Local" };
	struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
				      .path = "/dev/null", .buffer_bytes = 64 << 10 };
	struct rp_session *s[RP_MAX_SESSIONS];
	struct bytebuf b = { 0 };
	struct reply *r;
	int i;

	start_server(NULL);
	for (i = 0; i < RP_MAX_SESSIONS; i++) {
		s[i] = rp_session_start(&so);
		cr_assert_not_null(s[i], "session %d: %s", i, rp_last_error());
	}
	build_collect(&b, &c);
	r = roundtrip(server_path, &b);
	expect_error(r, 0x80004005u, "CollectTracing with 64 sessions running");
	free(r);
	for (i = 0; i < RP_MAX_SESSIONS; i++)
		rp_session_stop(s[i]);
	check_alive(server_path, "64 sessions");
	bb_free(&b);
	end_server();
}

/* Sends raw bytes, optionally half-closes, and reads what comes back. */
static struct reply *raw_exchange(const char *path, const void *p, size_t n, bool shut)
{
	struct reply *r = malloc(sizeof(*r));
	int fd = cl_connect(path);

	if (n)
		cl_send(fd, p, n);
	if (shut)
		shutdown(fd, SHUT_WR);
	read_reply(fd, r);
	close(fd);
	return r;
}

Test(ipc, bad_input_gets_an_error_and_the_server_keeps_serving, .timeout = 120)
{
	struct collect_req ok = { .version = 2, .buffer_mb = 16, .format = 1, .nprov = 1,
				  .prov = { { "P", 0, 4, "" } } };
	struct bytebuf b = { 0 };
	struct reply *r;
	uint8_t *junk;
	int fd;

	start_server(NULL);

	build_collect(&b, &ok);
	r = raw_exchange(server_path, b.p, 10, true);
	expect_error(r, HR_BAD_ENCODING, "a truncated header");
	free(r);
	check_alive(server_path, "a truncated header");

	/* size says 65535, 30 bytes come, then the client half-closes */
	b.p[14] = 0xFF, b.p[15] = 0xFF;
	r = raw_exchange(server_path, b.p, 30, true);
	expect_error(r, HR_BAD_ENCODING, "an oversized size field");
	free(r);
	check_alive(server_path, "an oversized size field");

	b.p[14] = 4, b.p[15] = 0;
	r = raw_exchange(server_path, b.p, b.len, false);
	expect_error(r, HR_BAD_ENCODING, "a size field under 20");
	free(r);
	check_alive(server_path, "a size field under 20");

	build_collect(&b, &ok);
	b.p[0] = 'd';
	r = raw_exchange(server_path, b.p, b.len, false);
	expect_error(r, HR_UNKNOWN_MAGIC, "a wrong magic");
	free(r);
	check_alive(server_path, "a wrong magic");

	build_collect(&b, &ok);
	memcpy(b.p + 20 + 4 + 4 + 1 + 4 + 8 + 4, "\xFF\xFF\xFF\xFF", 4);
	r = raw_exchange(server_path, b.p, b.len, false);
	expect_error(r, HR_BAD_ENCODING, "an absurd string length");
	free(r);
	check_alive(server_path, "an absurd string length");

	build_simple(&b, 0x42, 0x01);
	r = raw_exchange(server_path, b.p, b.len, false);
	expect_error(r, HR_UNKNOWN_COMMAND, "an unknown command set");
	free(r);
	check_alive(server_path, "an unknown command set");

	build_simple(&b, 0x01, 0x03);
	r = raw_exchange(server_path, b.p, b.len, false);
	expect_error(r, HR_UNKNOWN_COMMAND, "GenerateCoreDump3 (tools fall back, then give up)");
	free(r);

	build_simple(&b, 0x02, 0x01);	/* StopTracing without its id */
	r = raw_exchange(server_path, b.p, b.len, false);
	expect_error(r, HR_BAD_ENCODING, "StopTracing without an id");
	free(r);

	/* 64 KiB of garbage */
	junk = malloc(65536);
	for (size_t i = 0; i < 65536; i++)
		junk[i] = (uint8_t)(i * 7919u >> 3);
	fd = cl_connect(server_path);
	/* the server answers after 20 bytes and may close before all is sent */
	for (size_t off = 0; off < 65536;) {
		ssize_t k = send(fd, junk + off, 65536 - off, MSG_NOSIGNAL);

		if (k <= 0)
			break;
		off += (size_t)k;
	}
	r = malloc(sizeof(*r));
	read_reply(fd, r);
	close(fd);
	expect_error(r, HR_UNKNOWN_MAGIC, "64 KiB of garbage");
	free(r);
	free(junk);
	check_alive(server_path, "64 KiB of garbage");

	/* a probe: connect and close */
	fd = cl_connect(server_path);
	close(fd);
	check_alive(server_path, "a connect-and-close probe");
	bb_free(&b);
	end_server();
}

Test(ipc, a_silent_client_times_out_without_blocking_others, .timeout = 60)
{
	struct reply *r = malloc(sizeof(*r));
	uint64_t t0;
	double secs;
	int fd;

	rp_ipc_read_timeout_ms = 500;
	start_server(NULL);
	t0 = rp_clock_mono_ns();
	fd = cl_connect(server_path);
	/* others are served while it says nothing */
	check_alive(server_path, "a silent client connected");
	read_reply(fd, r);
	secs = (double)(rp_clock_mono_ns() - t0) / 1e9;
	expect_error(r, HR_BAD_ENCODING, "a client that sent nothing");
	cr_assert_geq(secs, 0.4, "the server waited for the request (%.2f s)", secs);
	/* and gave up on it (a hang guard: how long past its deadline is load) */
	cr_assert_lt(secs, 60.0, "the server gave up on the silent client (%.2f s)", secs);
	cr_assert_eq(read(fd, r->payload, 1), 0, "then closed the connection");
	close(fd);
	free(r);
	check_alive(server_path, "a silent client");
	end_server();
}

Test(ipc, a_client_vanishing_mid_stream_ends_its_session, .timeout = 120)
{
	struct rp_event *ev = test_event("Test-Ipc-Vanish");
	struct collect_req c = { .version = 2, .buffer_mb = 4, .format = 1, .nprov = 1,
				 .prov = { { "Test-Ipc-Vanish", 0, 5, NULL } } };
	struct stream st = { .limit = 4096 };
	uint64_t id, k = 1;
	int i;

	start_server(NULL);
	st.fd = collect(server_path, &c, &id);
	wait_enabled(ev, true, "the session started");
	cr_assert_eq(pthread_create(&st.th, NULL, stream_main, &st), 0);
	write_events(ev, k, 10000);
	k += 10000;
	pthread_join(st.th, NULL);
	close(st.fd);	/* the tool is killed */
	for (i = 0; i < 12000 && rp_event_enabled(ev); i++) {
		write_events(ev, k, 100);
		k += 100;
		usleep(5000);
	}
	cr_assert(!rp_event_enabled(ev), "the session of a vanished client ends");
	check_alive(server_path, "a client vanishing mid-stream");
	/* and the id is gone: StopTracing is still answered OK, as the runtime does */
	stop_tracing(server_path, id);
	bb_free(&st.got);
	end_server();
}

Test(ipc, server_stop_ends_running_sessions, .timeout = 120)
{
	struct rp_event *ev = test_event("Test-Ipc-ServerStop");
	struct collect_req c = { .version = 4, .buffer_mb = 8, .format = 1, .rundown_kw = 0,
				 .stackwalk = true, .nprov = 1,
				 .prov = { { "Test-Ipc-ServerStop", 0, 5, NULL } } };
	struct stream st = { 0 };
	uint64_t id;
	char path[128];

	start_server(NULL);
	strcpy(path, server_path);
	st.fd = collect(server_path, &c, &id);
	wait_enabled(ev, true, "CollectTracing4 session");
	cr_assert_eq(pthread_create(&st.th, NULL, stream_main, &st), 0);
	cr_assert_eq(write_events(ev, 1, 1000), 1000);
	end_server();
	cr_assert(!rp_event_enabled(ev), "stopping the server stops its sessions");
	pthread_join(st.th, NULL);
	close(st.fd);
	cr_assert_eq(count_events(&st.got, "Test-Ipc-ServerStop", NULL, NULL), 1000,
		     "the stream was flushed and ended");
	cr_assert_neq(access(path, F_OK), 0, "the socket is gone");
	bb_free(&st.got);
}

Test(ipc, server_stop_is_bounded_by_a_reader_that_stopped_reading, .timeout = 120)
{
	struct rp_event *ev = test_event("Test-Ipc-Stalled");
	struct collect_req c = { .version = 2, .buffer_mb = 1, .format = 1, .nprov = 1,
				 .prov = { { "Test-Ipc-Stalled", 0, 5, NULL } } };
	uint64_t id, t0;
	double secs;
	int fd, i;

	rp_ipc_stop_grace_ms = 300;
	start_server(NULL);
	fd = collect(server_path, &c, &id);	/* and never reads the stream */
	wait_enabled(ev, true, "the session started");
	/* fill the socket buffers so the drainer blocks writing */
	for (i = 0; i < 50; i++) {
		write_events(ev, (uint64_t)i * 20000 + 1, 20000);
		usleep(2000);
	}
	t0 = rp_clock_mono_ns();
	end_server();
	secs = (double)(rp_clock_mono_ns() - t0) / 1e9;
	cr_assert(!rp_event_enabled(ev), "the session is stopped");
	/* it returned at all (a hang guard, not a measure) */
	cr_assert_lt(secs, 60.0, "stop returned after %.2f s despite the stalled reader", secs);
	close(fd);
}

Test(ipc, disabled_by_the_environment, .timeout = 60)
{
	static const char *const vars[][2] = {
		{ "DOTNET_EnableDiagnostics", "0" },
		{ "RINGPIPE_ENABLE_DIAGNOSTICS", "0" },
		{ "DOTNET_EnableDiagnostics_IPC", "0" },
		{ "COMPlus_EnableDiagnostics", "0" },
	};
	char *dir = th_tmpdir();
	size_t i;

	setenv("TMPDIR", dir, 1);
	for (i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
		struct rp_ipc_opts o = { .sz = sizeof(o) };
		struct dirent *de;
		DIR *d;
		int n = 0;

		setenv(vars[i][0], vars[i][1], 1);
		cr_assert_eq(rp_ipc_server_start(&o), -ECANCELED, "%s=0 turns the server off",
			     vars[i][0]);
		d = opendir(dir);
		while ((de = readdir(d)))
			n += de->d_name[0] != '.';
		closedir(d);
		cr_assert_eq(n, 0, "%s=0: no socket is created", vars[i][0]);
		unsetenv(vars[i][0]);
	}
	setenv("RINGPIPE_ENABLE_DIAGNOSTICS", "maybe", 1);
	cr_assert_eq(rp_ipc_server_start(NULL), -EINVAL);
	cr_assert(strstr(rp_last_error(), "RINGPIPE_ENABLE_DIAGNOSTICS=maybe"), "%s",
		  rp_last_error());
	setenv("RINGPIPE_ENABLE_DIAGNOSTICS", "1", 1);
	setenv("DOTNET_EnableDiagnostics", "1", 1);
	cr_assert_eq(rp_ipc_server_start(NULL), 0, "%s", rp_last_error());
	rp_ipc_server_stop();
	th_rmdir(dir);
}

struct start_arg {
	struct rp_ipc_opts opts;
	int ret;
	int returned;		/* atomic */
};

static void *start_main(void *arg)
{
	struct start_arg *a = arg;

	a->ret = rp_ipc_server_start(&a->opts);
	__atomic_store_n(&a->returned, 1, __ATOMIC_RELEASE);
	return NULL;
}

static int listen_at(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	strcpy(a.sun_path, path);
	cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0, "bind %s", path);
	cr_assert_eq(listen(fd, 8), 0);
	return fd;
}

/* Accepts the runtime's connection and checks its advertise; fd or -1. */
static int accept_advertise(int lfd, uint8_t cookie[16])
{
	struct pollfd pf = { .fd = lfd, .events = POLLIN };
	struct timeval tv = { .tv_sec = 20 };
	uint8_t adv[34];
	uint64_t pid;
	int fd;

	if (poll(&pf, 1, 60000) != 1)
		return -1;
	fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	cr_assert_geq(fd, 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	/* the tool wants all 34 bytes within 250 ms */
	cr_assert_eq(read_exact(fd, adv, 34), 34, "a 34-byte advertise");
	cr_assert_eq(memcmp(adv, "ADVR_V1\0", 8), 0, "advertise magic");
	memcpy(cookie, adv + 8, 16);
	memcpy(&pid, adv + 24, 8);
	cr_assert_eq(pid, (uint64_t)getpid(), "advertised pid");
	cr_assert_eq(adv[32] | adv[33], 0);
	return fd;
}

Test(ipc, connect_port_advertises_and_suspends_until_resume, .timeout = 120)
{
	struct start_arg a = { .opts = { .sz = sizeof(a.opts) } };
	struct bytebuf b = { 0 };
	struct reply *r = malloc(sizeof(*r));
	uint8_t cookie[16], cookie2[16];
	char *dir = th_tmpdir(), port[256], *spec;
	pthread_t th;
	int lfd, fd;

	setenv("TMPDIR", dir, 1);
	snprintf(port, sizeof(port), "%s/tool.sock", dir);
	lfd = listen_at(port);
	cr_assert(asprintf(&spec, "%s,connect,suspend", port) > 0);
	a.opts.ports = spec;
	cr_assert_eq(pthread_create(&th, NULL, start_main, &a), 0);

	fd = accept_advertise(lfd, cookie);
	cr_assert_geq(fd, 0, "the runtime connected to the tool's socket");
	usleep(200000);
	cr_assert(!__atomic_load_n(&a.returned, __ATOMIC_ACQUIRE),
		  "start waits for ResumeRuntime on a suspend port");

	build_simple(&b, 0x04, 0x01);	/* ResumeRuntime on that connection */
	cl_send(fd, b.p, b.len);
	read_reply(fd, r);
	cr_assert(r->ok && r->id == 0x00 && r->size == 24 && le32_get(r->payload) == 0,
		  "ResumeRuntime: OK with code 0");
	close(fd);
	pthread_join(th, NULL);
	cr_assert_eq(a.ret, 0, "start returned %d after ResumeRuntime: %s", a.ret, rp_last_error());

	/* one command per connection: the runtime connects and advertises again */
	fd = accept_advertise(lfd, cookie2);
	cr_assert_geq(fd, 0, "a new advertised connection after the command");
	cr_assert_eq(memcmp(cookie, cookie2, 16), 0, "the same cookie every time");
	build_simple(&b, 0x04, 0x00);
	cl_send(fd, b.p, b.len);
	read_reply(fd, r);
	cr_assert(r->ok && r->id == 0x00, "ProcessInfo over the reverse connection");
	cr_assert_eq(memcmp(r->payload + 8, cookie, 16), 0, "ProcessInfo carries the cookie");
	close(fd);

	/* the tool hangs up an idle connection: the runtime comes back */
	fd = accept_advertise(lfd, cookie2);
	cr_assert_geq(fd, 0);
	close(fd);
	fd = accept_advertise(lfd, cookie2);
	cr_assert_geq(fd, 0, "reconnects after a hang-up");
	close(fd);

	/* the default listen port exists alongside */
	rp_ipc_default_path(server_path, sizeof(server_path));
	check_alive(server_path, "a reverse session");
	rp_ipc_server_stop();
	close(lfd);
	free(spec);
	free(r);
	bb_free(&b);
	th_rmdir(dir);
}

Test(ipc, stop_releases_a_suspended_start, .timeout = 60)
{
	struct start_arg a = { .opts = { .sz = sizeof(a.opts), .no_default_port = true } };
	char *dir = th_tmpdir(), *spec;
	pthread_t th;

	cr_assert(asprintf(&spec, "%s/nobody-listens.sock", dir) > 0);
	a.opts.ports = spec;
	cr_assert_eq(pthread_create(&th, NULL, start_main, &a), 0);
	usleep(200000);
	cr_assert(!__atomic_load_n(&a.returned, __ATOMIC_ACQUIRE), "suspended");
	rp_ipc_server_stop();
	pthread_join(th, NULL);
	cr_assert_eq(a.ret, -ECANCELED, "a stopped server's start returns -ECANCELED (%d)", a.ret);
	free(spec);
	th_rmdir(dir);
}

Test(ipc, listen_ports_and_env_precedence, .timeout = 60)
{
	char *dir, extra[256], *spec;
	struct stat st;

	dir = th_tmpdir();
	setenv("TMPDIR", dir, 1);
	snprintf(extra, sizeof(extra), "%s/extra.sock", dir);
	cr_assert(asprintf(&spec, "%s,listen,nosuspend", extra) > 0);
	setenv("DOTNET_DiagnosticPorts", "/x,bogus-tag", 1);
	setenv("RINGPIPE_DIAGNOSTIC_PORTS", spec, 1);
	cr_assert_eq(rp_ipc_server_start(NULL), 0, "RINGPIPE_DIAGNOSTIC_PORTS wins: %s",
		     rp_last_error());
	cr_assert_eq(stat(extra, &st), 0, "the listen port exists");
	cr_assert_eq(st.st_mode & 0777, 0600);
	check_alive(extra, "a configured listen port");
	rp_ipc_default_path(server_path, sizeof(server_path));
	check_alive(server_path, "the default port next to a listen port");
	cr_assert_eq(rp_ipc_server_start(NULL), -EBUSY, "one server per process");
	rp_ipc_server_stop();
	rp_ipc_server_stop();	/* twice is fine */
	cr_assert_neq(access(extra, F_OK), 0, "listen ports are unlinked at stop");

	unsetenv("RINGPIPE_DIAGNOSTIC_PORTS");
	cr_assert_eq(rp_ipc_server_start(NULL), -EINVAL);
	cr_assert(strstr(rp_last_error(), "DOTNET_DiagnosticPorts") &&
		  strstr(rp_last_error(), "bogus-tag"), "%s", rp_last_error());
	unsetenv("DOTNET_DiagnosticPorts");
	{
		struct rp_ipc_opts o = { .sz = sizeof(o), .no_default_port = true };

		cr_assert_eq(rp_ipc_server_start(&o), -EINVAL, "no port at all");
	}
	/* a stale socket file at a listen path is replaced */
	{
		int fd = listen_at(extra);
		struct rp_ipc_opts o = { .sz = sizeof(o), .ports = spec, .no_default_port = true };

		close(fd);
		cr_assert_eq(rp_ipc_server_start(&o), 0, "%s", rp_last_error());
		check_alive(extra, "a replaced stale socket");
		rp_ipc_server_stop();
	}
	free(spec);
	th_rmdir(dir);
}

Test(ipc, process_environment_and_set_environment_variable, .timeout = 60)
{
	struct bytebuf b = { 0 }, cont = { 0 };
	struct reply *r = malloc(sizeof(*r));
	uint32_t n, count, i;
	size_t off;
	bool found = false;
	char buf[65536];
	ssize_t k;
	int fd;

	setenv("RP_IPC_TEST_VAR", "hello=world", 1);
	start_server(NULL);
	build_simple(&b, 0x04, 0x02);
	fd = cl_connect(server_path);
	cl_send(fd, b.p, b.len);
	read_reply(fd, r);
	cr_assert(r->ok && r->id == 0x00 && r->size == 26, "ProcessEnvironment: OK, size 26");
	n = le32_get(r->payload);
	cr_assert_eq(r->payload[4] | r->payload[5], 0);
	while ((k = read(fd, buf, sizeof(buf))) > 0)
		bb_append(&cont, buf, (size_t)k);
	close(fd);
	cr_assert_eq(cont.len, n, "the continuation is nIncomingBytes long and then EOF");
	count = le32_get(cont.p);
	cr_assert_gt(count, 0);
	r->len = cont.len;
	memcpy(r->payload, cont.p, cont.len < sizeof(r->payload) ? cont.len : sizeof(r->payload));
	cr_assert_lt(cont.len, sizeof(r->payload), "test environment fits");
	off = 4;
	for (i = 0; i < count; i++) {
		char *s = rdstr(r, &off);

		cr_assert(strchr(s, '='), "every entry is NAME=VALUE: %s", s);
		found |= !strcmp(s, "RP_IPC_TEST_VAR=hello=world");
		free(s);
	}
	cr_assert_eq(off, cont.len);
	cr_assert(found, "our variable is in the environment");

	req_begin(&b, 0x04, 0x03);
	wstr(&b, "RP_IPC_SET");
	wstr(&b, "v1");
	req_end(&b);
	free(r);
	r = roundtrip(server_path, &b);
	cr_assert(r->ok && r->id == 0x00 && r->size == 24, "SetEnvironmentVariable: OK");
	cr_assert_str_eq(getenv("RP_IPC_SET") ? getenv("RP_IPC_SET") : "(unset)", "v1");
	free(r);
	req_begin(&b, 0x04, 0x03);
	wstr(&b, "RP_IPC_SET");
	wstr(&b, NULL);
	req_end(&b);
	r = roundtrip(server_path, &b);
	cr_assert(r->ok && r->id == 0x00, "SetEnvironmentVariable with a null value");
	cr_assert_null(getenv("RP_IPC_SET"), "a null value unsets");
	free(r);
	bb_free(&b);
	bb_free(&cont);
	end_server();
}

Test(ipc, a_forked_child_leaves_the_parents_server_alone, .timeout = 60)
{
	int st;
	pid_t pid;

	start_server(NULL);
	pid = fork();
	if (pid == 0) {
		alarm(30);
		rp_ipc_server_stop();	/* the child has no server: a no-op */
#if !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
		/* and may start its own (the sanitizers' allocators are not safe
		 * to use from new threads after a multithreaded fork) */
		if (rp_ipc_server_start(NULL))
			_exit(5);
		rp_ipc_server_stop();
#endif
		_exit(access(server_path, F_OK) ? 4 : 0);
	}
	cr_assert_gt(pid, 0);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status 0x%x", st);
	cr_assert_eq(access(server_path, F_OK), 0, "the parent's socket survives the child");
	check_alive(server_path, "a fork");
	end_server();
}

Test(ipc, many_clients_at_once, .timeout = 120)
{
	enum { N = 24 };
	struct rp_event *ev = test_event("Test-Ipc-Many");
	struct collect_req c = { .version = 3, .buffer_mb = 2, .format = 1, .nprov = 1,
				 .prov = { { "Test-Ipc-Many", 0, 5, NULL } } };
	struct stream st[4];
	uint64_t ids[4];
	int i, fds[N];

	start_server(NULL);
	/* idle clients hold connections while sessions start and others are served */
	for (i = 0; i < N; i++)
		fds[i] = cl_connect(server_path);
	for (i = 0; i < 4; i++) {
		memset(&st[i], 0, sizeof(st[i]));
		st[i].fd = collect(server_path, &c, &ids[i]);
		cr_assert_eq(pthread_create(&st[i].th, NULL, stream_main, &st[i]), 0);
	}
	wait_sessions(ev, 4, "four sessions run");
	cr_assert_eq(write_events(ev, 1, 500), 500);
	for (i = 0; i < 4; i++)
		stop_tracing(server_path, ids[i]);
	for (i = 0; i < 4; i++) {
		pthread_join(st[i].th, NULL);
		close(st[i].fd);
		cr_assert_eq(count_events(&st[i].got, "Test-Ipc-Many", NULL, NULL), 500,
			     "session %d got every event", i);
		bb_free(&st[i].got);
	}
	for (i = 0; i < N; i++)
		close(fds[i]);
	check_alive(server_path, "many clients");
	end_server();
}

/*
 * A tool that sees the socket file connects at once: the file must not
 * exist before the socket listens (dotnet-trace ps and ringpipe collect
 * scan for it and connect right away). A prober on the other CPU spins on
 * the path while the server starts, and connects the moment it appears.
 */
Test(ipc, the_socket_file_appears_only_once_it_listens, .timeout = 120)
{
	char *dir = th_tmpdir(), *spec;
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	const char *path = a.sun_path;
	int round, refused = 0;

	cr_assert_lt(strlen(dir) + sizeof("/race.sock"), sizeof(a.sun_path), "%s: too long", dir);
	memcpy(a.sun_path, dir, strlen(dir));
	memcpy(a.sun_path + strlen(dir), "/race.sock", sizeof("/race.sock"));
	cr_assert(asprintf(&spec, "%s,listen,nosuspend", path) > 0);
	for (round = 0; round < 1000; round++) {
		struct start_arg sa = { .opts = { .sz = sizeof(sa.opts), .ports = spec,
						  .no_default_port = true } };
		pthread_t th;
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

		cr_assert_geq(fd, 0);
		cr_assert_eq(pthread_create(&th, NULL, start_main, &sa), 0);
		while (access(path, F_OK) && !__atomic_load_n(&sa.returned, __ATOMIC_ACQUIRE))
			;
		if (connect(fd, (struct sockaddr *)&a, sizeof(a)) && errno == ECONNREFUSED)
			refused++;
		close(fd);
		pthread_join(th, NULL);
		cr_assert_eq(sa.ret, 0, "start: %s", rp_last_error());
		rp_ipc_server_stop();
	}
	cr_assert_eq(refused, 0, "%d of 1000 connects made as the file appeared were refused",
		     refused);
	free(spec);
	th_rmdir(dir);
}

/* ====================================================================== */
/* floods, deadlines and the memory cap                                     */
/* ====================================================================== */

/* A non-blocking connect: the socket, or -errno (EAGAIN: backlog full). */
static int nb_connect(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), e;

	if (fd < 0)
		return -errno;
	strcpy(a.sun_path, path);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a))) {
		e = errno;
		close(fd);
		return -e;
	}
	return fd;
}

static void raise_nofile(rlim_t want)
{
	struct rlimit rl;

	cr_assert_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_cur < want) {
		rl.rlim_cur = rl.rlim_max < want ? rl.rlim_max : want;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	cr_assert_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_cur < want)
		cr_skip_test("RLIMIT_NOFILE %llu < %llu", (unsigned long long)rl.rlim_cur,
			     (unsigned long long)want);
}

static long somaxconn(void)
{
	struct bytebuf b = { 0 };
	long v = 4096;

	if (!th_read_file("/proc/sys/net/core/somaxconn", &b) && b.p)
		v = strtol((const char *)b.p, NULL, 10);
	bb_free(&b);
	return v;
}

static double secs_since(uint64_t t0)
{
	return (double)(rp_clock_mono_ns() - t0) / 1e9;
}

/*
 * The attacker: holds n idle connections (it never sends a byte) and opens
 * a new one as soon as the server closes one, as fast as it can, until
 * stopped, until `until`, or after max_connects connects (loopback only:
 * the server's Unix socket).
 */
struct flood {
	const char *path;
	int n;
	int *fds;
	uint64_t until;
	unsigned max_connects;
	int stop;			/* atomic */
	unsigned connects, refused;
	unsigned closed;		/* atomic */
	pthread_t th;
};

static void *flood_main(void *arg)
{
	struct flood *f = arg;
	struct pollfd *pf = calloc((size_t)f->n, sizeof(*pf));
	int i;

	while (!__atomic_load_n(&f->stop, __ATOMIC_ACQUIRE) && rp_clock_mono_ns() < f->until &&
	       f->connects < f->max_connects) {
		for (i = 0; i < f->n; i++) {
			pf[i].fd = f->fds[i];
			pf[i].events = POLLIN;
			pf[i].revents = 0;
		}
		if (poll(pf, (nfds_t)f->n, 5) < 0 && errno != EINTR)
			break;
		for (i = 0; i < f->n && f->connects < f->max_connects; i++) {
			if (f->fds[i] >= 0 && !pf[i].revents)
				continue;
			if (f->fds[i] >= 0) {
				close(f->fds[i]);
				__atomic_fetch_add(&f->closed, 1, __ATOMIC_RELAXED);
			}
			f->fds[i] = nb_connect(f->path);
			if (f->fds[i] < 0) {
				f->fds[i] = -1;
				f->refused++;
			} else {
				f->connects++;
			}
		}
	}
	free(pf);
	return NULL;
}

/*
 * 300 idle connections (more than the server's table of 128), replaced as
 * soon as the server closes them: throughout, ProcessInfo, CollectTracing
 * and StopTracing are each answered while the flood goes on (how soon is
 * printed: on a loaded host a second is not a verdict), and a stream that
 * lives through the whole flood is never evicted (it loses nothing).
 */
Test(ipc, a_flood_of_idle_connections_does_not_deny_service, .timeout = 180)
{
	enum { IDLE = 300 };
	struct rp_event *ev = test_event("Test-Ipc-Flood");
	struct collect_req c = { .version = 2, .buffer_mb = 1, .format = 1, .nprov = 1,
				 .prov = { { "Test-Ipc-Flood", 0, 5, NULL } } };
	struct flood f = { .n = IDLE, .max_connects = 400000 };
	struct stream keep = { 0 };
	struct bytebuf b = { 0 };
	double worst_info = 0, worst_collect = 0, worst_stop = 0, lat;
	uint64_t keep_id, written = 0, end;
	int rounds = 0, i;

	raise_nofile(4096);
	start_server(NULL);
	keep.fd = collect(server_path, &c, &keep_id);
	cr_assert_eq(pthread_create(&keep.th, NULL, stream_main, &keep), 0);
	wait_enabled(ev, true, "the long-lived session started");

	/* all at once: the backlog takes them, none fails with EAGAIN (unless
	 * net.core.somaxconn caps the backlog under what that needs) */
	f.path = server_path;
	f.fds = malloc(IDLE * sizeof(int));
	for (i = 0; i < IDLE; i++) {
		f.fds[i] = nb_connect(server_path);
		if (f.fds[i] == -EAGAIN && somaxconn() < IDLE) {
			f.fds[i] = -1;	/* the attacker retries it */
			continue;
		}
		cr_assert_geq(f.fds[i], 0, "idle connection %d of %d: connect: %s", i + 1, IDLE,
			      strerror(-f.fds[i]));
	}
	/* the flood lasts until the rounds are done; this is a hang guard */
	f.until = rp_clock_mono_ns() + 120000000000ull * SCALE;
	cr_assert_eq(pthread_create(&f.th, NULL, flood_main, &f), 0);
	/* the flood under way: the server has closed a connection, which the
	 * attacker replaced */
	end = rp_clock_mono_ns() + 60000000000ull;
	while (!__atomic_load_n(&f.closed, __ATOMIC_RELAXED)) {
		cr_assert_lt(rp_clock_mono_ns(), end, "the server closed none of %d idle "
			     "connections in 60 s", IDLE);
		usleep(1000);
	}

	build_simple(&b, 0x04, 0x00);
	end = rp_clock_mono_ns() + 4000000000ull;
	while (rp_clock_mono_ns() < end || rounds < 5) {
		struct stream st = { 0 };
		struct reply *r;
		uint64_t t0 = rp_clock_mono_ns(), id;

		r = roundtrip(server_path, &b);
		lat = secs_since(t0);
		cr_assert(r->ok && r->set == 0xFF && r->id == 0x00,
			  "round %d: ProcessInfo answered under the flood", rounds);
		cr_assert_eq(le64_get(r->payload), (uint64_t)getpid());
		worst_info = lat > worst_info ? lat : worst_info;
		free(r);

		t0 = rp_clock_mono_ns();
		st.fd = collect(server_path, &c, &id);
		lat = secs_since(t0);
		worst_collect = lat > worst_collect ? lat : worst_collect;
		cr_assert_eq(pthread_create(&st.th, NULL, stream_main, &st), 0);
		t0 = rp_clock_mono_ns();
		stop_tracing(server_path, id);
		lat = secs_since(t0);
		worst_stop = lat > worst_stop ? lat : worst_stop;
		pthread_join(st.th, NULL);
		close(st.fd);
		count_events(&st.got, "Test-Ipc-Flood", NULL, NULL);	/* a whole stream */
		bb_free(&st.got);

		cr_assert_eq(write_events(ev, written + 1, 100), 100);
		written += 100;
		rounds++;
		usleep(50000);
	}
	cr_assert_lt(rp_clock_mono_ns(), f.until, "the flood went on through every round");
	__atomic_store_n(&f.stop, 1, __ATOMIC_RELEASE);
	pthread_join(f.th, NULL);
	cr_assert_lt(f.connects, f.max_connects, "the flood went on through every round");
	for (i = 0; i < IDLE; i++)
		if (f.fds[i] >= 0)
			close(f.fds[i]);
	fprintf(stderr,
		"flood: %d rounds; worst ProcessInfo %.1f ms, CollectTracing %.1f ms, StopTracing "
		"%.1f ms; the attacker made %u connects (%u refused), the server closed %u\n",
		rounds, worst_info * 1e3, worst_collect * 1e3, worst_stop * 1e3, f.connects,
		f.refused, f.closed);
	cr_assert_gt(f.closed, IDLE, "the flood churned (%u connections closed)", f.closed);

	stop_tracing(server_path, keep_id);
	pthread_join(keep.th, NULL);
	close(keep.fd);
	cr_assert_eq(count_events(&keep.got, "Test-Ipc-Flood", NULL, NULL), written,
		     "the stream that lived through the flood got every event");
	bb_free(&keep.got);
	free(f.fds);
	bb_free(&b);
	check_alive(server_path, "the flood");
	end_server();
}

/* Waits up to ms for the peer to close fd: true on EOF (or a reset). */
static bool closed_within(int fd, int ms)
{
	struct pollfd pf = { .fd = fd, .events = POLLIN };
	char c;

	if (poll(&pf, 1, ms) != 1)
		return false;
	return recv(fd, &c, 1, MSG_DONTWAIT) <= 0;
}

/* A full table: a newcomer evicts the oldest connection still waiting for
 * its request, and only that one. */
Test(ipc, a_full_table_evicts_the_oldest_idle_connection, .timeout = 60)
{
	enum { TABLE = 128 };
	int fds[TABLE + 1], i;

	raise_nofile(1024);
	rp_ipc_header_timeout_ms = rp_ipc_read_timeout_ms = 30000;
	start_server(NULL);
	for (i = 0; i < TABLE; i++)
		fds[i] = cl_connect(server_path);
	/* accepted in connect order: the 129th evicts the first */
	fds[TABLE] = cl_connect(server_path);
	cr_assert(closed_within(fds[0], 60000), "the oldest idle connection was evicted");
	for (i = 1; i <= TABLE; i++)
		cr_assert(!closed_within(fds[i], i == 1 ? 200 : 0), "connection %d stays", i);
	/* a real request evicts the next oldest and is answered */
	check_alive(server_path, "a full table");
	cr_assert(closed_within(fds[1], 60000), "the next oldest went for ProcessInfo");
	for (i = 2; i <= TABLE; i++)
		cr_assert(!closed_within(fds[i], 0), "connection %d stays", i);
	for (i = 0; i <= TABLE; i++)
		close(fds[i]);
	end_server();
}

/* stderr into a file while a test runs, with the server's log on */
struct capture {
	char *dir, path[256];
	int saved;
};

static void capture_begin(struct capture *k)
{
	int fd;

	k->dir = th_tmpdir();
	cr_assert_not_null(k->dir);
	snprintf(k->path, sizeof(k->path), "%s/stderr", k->dir);
	fd = open(k->path, O_CREAT | O_TRUNC | O_WRONLY | O_APPEND | O_CLOEXEC, 0600);
	cr_assert_geq(fd, 0);
	fflush(stderr);
	k->saved = dup(2);
	cr_assert_geq(k->saved, 0);
	cr_assert_eq(dup2(fd, 2), 2);
	close(fd);
	setenv("RINGPIPE_IPC_LOG", "1", 1);
}

/* What was captured so far (free it). */
static char *capture_text(struct capture *k)
{
	struct bytebuf out = { 0 };

	cr_assert_eq(th_read_file(k->path, &out), 0);
	return (char *)out.p;
}

static void capture_end(struct capture *k)
{
	fflush(stderr);
	dup2(k->saved, 2);
	close(k->saved);
	th_rmdir(k->dir);
}

/* Every line of the log is whole: "ringpipe: ipc: ...\n". */
static void expect_whole_lines(const char *log)
{
	const char *p = log;

	while (*p) {
		const char *nl = strchr(p, '\n');

		cr_assert_not_null(nl, "the log ends with a newline");
		if (!strncmp(p, "ringpipe: ipc: ", 15))
			cr_assert_null(memmem(p + 15, (size_t)(nl - p - 15), "ringpipe: ", 10),
				       "two log lines mixed: %.*s", (int)(nl - p), p);
		p = nl + 1;
	}
}

/* The header has a short deadline of its own; the rest of the request
 * keeps the longer one. Which deadline closed a connection is what the log
 * says: the time it took is at least that deadline, and more on a loaded
 * host. */
Test(ipc, a_connection_without_a_header_is_closed_after_the_header_deadline, .timeout = 120)
{
	struct bytebuf b = { 0 };
	struct reply *r = malloc(sizeof(*r));
	struct capture k;
	uint64_t t0;
	double secs;
	char *log, *want;
	size_t sent;
	int fd;

	rp_ipc_read_timeout_ms = 2500;
	capture_begin(&k);
	start_server(NULL);	/* the header deadline is the default, 1 s */

	t0 = rp_clock_mono_ns();
	fd = cl_connect(server_path);
	read_reply(fd, r);
	secs = secs_since(t0);
	close(fd);
	expect_error(r, HR_BAD_ENCODING, "a connection that sent nothing");
	cr_assert_geq(secs, 0.9, "closed %.2f s after it came, before the 1 s header deadline",
		      secs);

	/* a whole header, then a payload that never comes: the request deadline */
	req_begin(&b, 0x04, 0x00);
	bb_append_u32(&b, 0);
	b.p[14] = 100;
	sent = b.len;
	t0 = rp_clock_mono_ns();
	fd = cl_connect(server_path);
	cl_send(fd, b.p, b.len);
	read_reply(fd, r);
	secs = secs_since(t0);
	close(fd);
	expect_error(r, HR_BAD_ENCODING, "a payload that never came");
	cr_assert_geq(secs, 2.3, "closed %.2f s after it came, before the 2.5 s request deadline",
		      secs);
	free(r);
	bb_free(&b);
	check_alive(server_path, "deadlines");
	end_server();
	log = capture_text(&k);
	capture_end(&k);
	cr_assert_not_null(strstr(log, "request header: timed out after 0 bytes"),
			   "the header deadline closed the first:\n%s", log);
	want = th_fmt("request of 100 bytes: the payload did not arrive in time after %zu bytes",
		      sent);
	cr_assert_not_null(strstr(log, want), "the request deadline closed the second:\n%s", log);
	free(want);
	free(log);
}

struct drip {
	int nbytes;
	uint32_t hr;
	pthread_t th;
};

/* Sends nbytes of a header and no more, then waits for the answer. The
 * bytes go in one send: a drip paced in time would race the deadline on a
 * loaded host, and the log must count what arrived, however it came. */
static void *drip_main(void *arg)
{
	struct drip *d = arg;
	struct reply *r = malloc(sizeof(*r));
	struct bytebuf b = { 0 };
	int fd = cl_connect(server_path);

	build_simple(&b, 0x04, 0x00);
	cl_send(fd, b.p, (size_t)d->nbytes);
	read_reply(fd, r);
	d->hr = r->ok && r->id == 0xFF ? le32_get(r->payload) : 0;
	close(fd);
	free(r);
	bb_free(&b);
	return NULL;
}

/* A header that stops short is closed at the header deadline, and the log
 * says how many bytes had come, one whole line per connection even when
 * they all time out at once. */
Test(ipc, a_slow_drip_is_logged_with_the_bytes_it_sent, .timeout = 60)
{
	enum { N = 8 };
	struct drip d[N];
	struct capture k;
	char *log, want[96];
	int i;

	rp_ipc_read_timeout_ms = 700;	/* bounds the header too */
	capture_begin(&k);
	start_server(NULL);
	for (i = 0; i < N; i++) {
		d[i].nbytes = i + 3;	/* 3..10 bytes of 20 */
		cr_assert_eq(pthread_create(&d[i].th, NULL, drip_main, &d[i]), 0);
	}
	for (i = 0; i < N; i++) {
		pthread_join(d[i].th, NULL);
		cr_assert_eq(d[i].hr, HR_BAD_ENCODING, "drip %d: BadEncoding", i);
	}
	end_server();
	log = capture_text(&k);
	capture_end(&k);
	for (i = 0; i < N; i++) {
		snprintf(want, sizeof(want), "request header: timed out after %d bytes",
			 d[i].nbytes);
		cr_assert_not_null(strstr(log, want), "the log has '%s':\n%s", want, log);
	}
	cr_assert_null(strstr(log, "after 0 bytes"), "no drip is logged as silent:\n%s", log);
	expect_whole_lines(log);
	free(log);
}

/* Sends a CollectTracing request; the reply, and *fd open on an OK (else -1). */
static struct reply *try_collect(const struct collect_req *c, int *fd)
{
	struct bytebuf b = { 0 };
	struct reply *r = malloc(sizeof(*r));

	*fd = cl_connect(server_path);
	build_collect(&b, c);
	cl_send(*fd, b.p, b.len);
	read_reply(*fd, r);
	bb_free(&b);
	if (!(r->ok && r->id == 0x00)) {
		close(*fd);
		*fd = -1;
	}
	return r;
}

static void wait_memory_used(uint64_t want, const char *why)
{
	int i;

	for (i = 0; i < 12000 && rp_ipc_memory_used() != want; i++)
		usleep(5000);
	cr_assert_eq(rp_ipc_memory_used(), want, "%s: %llu bytes held, expected %llu", why,
		     (unsigned long long)rp_ipc_memory_used(), (unsigned long long)want);
}

/* The smallest budget (MiB) that costs exactly its size on this machine. */
static uint32_t unit_mb(void)
{
	uint64_t floor = (uint64_t)rp_shm_possible_cpus() * RP_RING_MIN_DATA_SIZE;
	uint32_t mb = (uint32_t)((floor + (1u << 20) - 1) >> 20);

	return mb < 4 ? 4 : mb;
}

/* Over the cap on all IPC sessions: Fail, a log line, and the server goes on. */
Test(ipc, a_collect_over_the_memory_cap_is_refused, .timeout = 120)
{
	const uint32_t u = unit_mb();
	struct rp_ipc_opts o = { .sz = sizeof(o), .max_memory_bytes = 2ull * u << 20 };
	struct collect_req c = { .version = 2, .format = 1, .nprov = 1,
				 .prov = { { "Test-Ipc-Cap", 0, 5, NULL } } };
	struct stream st[2] = { { 0 }, { 0 } };
	struct capture k;
	struct reply *r;
	uint64_t id[2];
	char *log, want[128];
	int fd, i;

	capture_begin(&k);
	start_server(&o);
	c.buffer_mb = 3 * u;
	r = try_collect(&c, &fd);
	expect_error(r, 0x80004005u, "a buffer over the whole cap");
	free(r);
	check_alive(server_path, "a refused CollectTracing");
	cr_assert_eq(rp_ipc_memory_cap(), 2ull * u << 20);
	cr_assert_eq(rp_ipc_memory_used(), 0, "a refused request holds nothing");

	c.buffer_mb = u;
	for (i = 0; i < 2; i++) {
		st[i].fd = collect(server_path, &c, &id[i]);
		cr_assert_eq(pthread_create(&st[i].th, NULL, stream_main, &st[i]), 0);
	}
	wait_memory_used(2ull * u << 20, "two sessions");
	c.buffer_mb = 1;
	r = try_collect(&c, &fd);
	expect_error(r, 0x80004005u, "a buffer over what is left");
	free(r);

	/* a stopped session gives its share back */
	stop_tracing(server_path, id[0]);
	pthread_join(st[0].th, NULL);
	close(st[0].fd);
	wait_memory_used((uint64_t)u << 20, "one session stopped");
	c.buffer_mb = u;
	st[0].got.len = 0;
	st[0].fd = collect(server_path, &c, &id[0]);
	cr_assert_eq(pthread_create(&st[0].th, NULL, stream_main, &st[0]), 0);
	for (i = 0; i < 2; i++) {
		stop_tracing(server_path, id[i]);
		pthread_join(st[i].th, NULL);
		close(st[i].fd);
		count_events(&st[i].got, "Test-Ipc-Cap", NULL, NULL);
		bb_free(&st[i].got);
	}
	wait_memory_used(0, "every session stopped");
	end_server();

	log = capture_text(&k);
	capture_end(&k);
	snprintf(want, sizeof(want), "CollectTracing2: refused: %u MiB asked", 3 * u);
	cr_assert_not_null(strstr(log, want), "the log has '%s':\n%s", want, log);
	snprintf(want, sizeof(want), "of the %u MiB cap", 2 * u);
	cr_assert_not_null(strstr(log, want), "the log names the cap:\n%s", log);
	cr_assert_not_null(strstr(log, "CollectTracing2: refused: 1 MiB asked"), "%s", log);
	free(log);
}

/* A request past the per-session limit is clamped, and the log says to what. */
Test(ipc, a_clamped_buffer_is_logged_with_what_was_granted, .timeout = 60)
{
	const uint32_t u = unit_mb();
	struct rp_ipc_opts o = { .sz = sizeof(o), .max_buffer_bytes = (uint64_t)u << 20 };
	struct collect_req c = { .version = 2, .buffer_mb = 100 * u, .format = 1, .nprov = 1,
				 .prov = { { "Test-Ipc-Clamp", 0, 5, NULL } } };
	struct stream st = { 0 };
	struct capture k;
	uint64_t id;
	char *log, want[128];

	capture_begin(&k);
	start_server(&o);
	st.fd = collect(server_path, &c, &id);
	cr_assert_eq(pthread_create(&st.th, NULL, stream_main, &st), 0);
	/* logged before the OK is sent */
	log = capture_text(&k);
	snprintf(want, sizeof(want), "CollectTracing2: %u MiB asked, %u MiB granted", 100 * u, u);
	cr_assert_not_null(strstr(log, want), "the log has '%s':\n%s", want, log);
	free(log);
	wait_memory_used((uint64_t)u << 20, "the clamped session holds what it was granted");
	stop_tracing(server_path, id);
	pthread_join(st.th, NULL);
	close(st.fd);
	bb_free(&st.got);
	end_server();
	capture_end(&k);
}

static bool ring_charge_of_1g_is_1g(void)
{
	return (uint64_t)rp_shm_possible_cpus() * RP_RING_MIN_DATA_SIZE <= 1ull << 30;
}

/*
 * The default cap is a quarter of physical RAM (Documentation/ipc.md); the
 * environment overrides it, the option overrides both. Where the default
 * admits few 1 GiB sessions, it is checked by opening them (their rings
 * are not touched, so they cost address space, not memory).
 */
Test(ipc, the_memory_cap_defaults_to_a_quarter_of_ram, .timeout = 120)
{
	uint64_t ram = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
	struct collect_req c = { .version = 2, .buffer_mb = 1024, .format = 1, .nprov = 1,
				 .prov = { { "Test-Ipc-Default-Cap", 0, 5, NULL } } };
	struct rp_ipc_opts o = { .sz = sizeof(o), .max_memory_bytes = 96ull << 20 };
	uint64_t cap = ram / 4, n = cap >> 30, i;
	struct stream st[16];
	struct reply *r;
	uint64_t id[16];
	char *tmp = strdup(th_env("TMPDIR", "/tmp"));
	int fd;

	unsetenv("RINGPIPE_IPC_MAX_MEMORY_MB");
	start_server(NULL);
	cr_assert_eq(rp_ipc_memory_cap(), cap, "the default cap: %llu bytes, RAM/4 is %llu",
		     (unsigned long long)rp_ipc_memory_cap(), (unsigned long long)cap);
	if (n >= 1 && n < 16 && ring_charge_of_1g_is_1g()) {
		for (i = 0; i < n; i++) {
			memset(&st[i], 0, sizeof(st[i]));
			st[i].fd = collect(server_path, &c, &id[i]);
			cr_assert_eq(pthread_create(&st[i].th, NULL, stream_main, &st[i]), 0);
		}
		r = try_collect(&c, &fd);
		expect_error(r, 0x80004005u, "one 1 GiB session more than RAM/4 allows");
		free(r);
		for (i = 0; i < n; i++) {
			stop_tracing(server_path, id[i]);
			pthread_join(st[i].th, NULL);
			close(st[i].fd);
			bb_free(&st[i].got);
		}
	}
	end_server();

	/* start_server() points TMPDIR at its own directory: back each time */
	setenv("TMPDIR", tmp, 1);
	setenv("RINGPIPE_IPC_MAX_MEMORY_MB", "64", 1);
	start_server(NULL);
	cr_assert_eq(rp_ipc_memory_cap(), 64ull << 20, "RINGPIPE_IPC_MAX_MEMORY_MB=64");
	end_server();
	setenv("TMPDIR", tmp, 1);
	start_server(&o);
	cr_assert_eq(rp_ipc_memory_cap(), 96ull << 20, "the option wins over the environment");
	end_server();
	setenv("TMPDIR", tmp, 1);
	setenv("RINGPIPE_IPC_MAX_MEMORY_MB", "lots", 1);
	cr_assert_eq(rp_ipc_server_start(NULL), -EINVAL);
	cr_assert(strstr(rp_last_error(), "RINGPIPE_IPC_MAX_MEMORY_MB=lots"), "%s",
		  rp_last_error());
	setenv("RINGPIPE_IPC_MAX_MEMORY_MB", "0", 1);
	cr_assert_eq(rp_ipc_server_start(NULL), -EINVAL, "a cap of 0 MiB is refused");
	unsetenv("RINGPIPE_IPC_MAX_MEMORY_MB");
	free(tmp);
}
