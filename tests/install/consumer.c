/* SPDX-License-Identifier: MIT */
/*
 * A program that uses the installed library the way an application does:
 * only the public headers, flags from pkg-config. scripts/check-install.sh
 * builds this one file as C11 (linked against libringpipe.so and against
 * libringpipe.a), as C99 and as C++17, and runs every build.
 *
 *   consumer TRACE
 *
 * It defines a provider with one event, starts the diagnostics server,
 * starts a Block-mode session writing the nettrace file TRACE, writes
 * NR_EVENTS events (flat and vectored), waits for the drainer to serialize
 * them, stops, and checks the callbacks, the counters and the file. It
 * prints "ringpipe VERSION abi N", then "ok: ..." and exits 0; on any
 * failure it says what was expected and what it saw, and exits 1.
 *
 * The code is valid C99 and C++11 alike: structs are zeroed with memset
 * (no designated initializers, no compound literals), and void * is cast.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <ringpipe/ringpipe.h>
#include <ringpipe/abi.h>

#define PROVIDER "Ringpipe-InstallCheck"
#define NR_EVENTS 1000
#define EVENT_ID 7
#define FIXED_LEN 12 /* u32 Index, u64 Value */

static int failures;

#define CHECK(cond, ...)                                                  \
	do {                                                              \
		if (!(cond)) {                                            \
			fprintf(stderr, "consumer: line %d: ", __LINE__); \
			fprintf(stderr, __VA_ARGS__);                     \
			fputc('\n', stderr);                              \
			failures++;                                       \
		}                                                         \
	} while (0)

/* what the provider's callbacks saw; they run on the thread that starts
 * and stops the session */
struct seen {
	int enables;
	int disables;
	int stoppings;
	int session_id;
};

static void on_enable(struct rp_provider *p, int session_id, bool enabled, uint64_t keywords,
		      uint8_t level, const char *args, void *ctx)
{
	struct seen *seen = (struct seen *)ctx;

	(void)p;
	(void)keywords;
	(void)level;
	(void)args;
	if (enabled)
		seen->enables++;
	else
		seen->disables++;
	seen->session_id = session_id;
}

static void on_stopping(struct rp_provider *p, int session_id, uint64_t keywords, uint8_t level,
			void *ctx)
{
	struct seen *seen = (struct seen *)ctx;

	(void)p;
	(void)session_id;
	(void)keywords;
	(void)level;
	seen->stoppings++;
}

static void sleep_ms(long ms)
{
	struct timespec ts;

	ts.tv_sec = ms / 1000;
	ts.tv_nsec = (ms % 1000) * 1000000L;
	nanosleep(&ts, NULL);
}

/* The fixed part of a payload, little-endian as nettrace wants it (the
 * library runs on little-endian hosts only). */
static void put_fixed(unsigned char *buf, uint32_t index, uint64_t value)
{
	memcpy(buf, &index, 4);
	memcpy(buf + 4, &value, 8);
}

/* An ASCII string as UTF-16LE with its terminating NUL; returns bytes. */
static size_t put_utf16(unsigned char *buf, const char *s)
{
	size_t n = 0;

	do {
		buf[n++] = (unsigned char)*s;
		buf[n++] = 0;
	} while (*s++);
	return n;
}

/* Writes the events: even ones flat, odd ones vectored with an activity id. */
static void write_events(struct rp_event *ev)
{
	unsigned char flat[FIXED_LEN + 64], fixed[FIXED_LEN], name[64];
	struct rp_write_opts wo;
	uint8_t activity[16];
	struct iovec iov[2];
	size_t len;
	int i, rc;

	memset(activity, 0xa5, sizeof(activity));
	memset(&wo, 0, sizeof(wo));
	wo.sz = sizeof(wo);
	wo.activity_id = activity;
	for (i = 0; i < NR_EVENTS; i++) {
		if (i % 2 == 0) {
			put_fixed(flat, (uint32_t)i, (uint64_t)i * 3);
			len = FIXED_LEN + put_utf16(flat + FIXED_LEN, "flat");
			rc = rp_event_write(ev, flat, len);
		} else {
			put_fixed(fixed, (uint32_t)i, (uint64_t)i * 3);
			iov[0].iov_base = fixed;
			iov[0].iov_len = FIXED_LEN;
			iov[1].iov_base = name;
			iov[1].iov_len = put_utf16(name, "vectored");
			rc = rp_event_writev(ev, iov, 2, &wo);
		}
		CHECK(rc == 0, "event %d: write returned %d, expected 0 (Block mode loses nothing)",
		      i, rc);
	}
}

int main(int argc, char **argv)
{
	static const struct rp_field fields[] = {
		{ "Index", RP_TYPE_U32, 0, 0, NULL },
		{ "Value", RP_TYPE_U64, 0, 0, NULL },
		{ "Name", RP_TYPE_STRING, 0, 0, NULL },
	};
	static unsigned char too_big[65536];
	struct rp_provider_opts po;
	struct rp_event_opts eo;
	struct rp_provider_config pc;
	struct rp_session_opts so;
	struct rp_session_stats st;
	struct rp_ipc_opts io;
	struct seen seen;
	struct rp_provider *prov;
	struct rp_event *ev;
	struct rp_session *s;
	char magic[8];
	struct stat sb;
	FILE *f;
	int i, rc, sid;

	if (argc != 2) {
		fprintf(stderr, "usage: consumer TRACE\n");
		return 2;
	}
	printf("ringpipe %s abi %u\n", rp_version(), (unsigned)RP_ABI_VERSION);
	CHECK(sizeof(struct rp_shm_record) == 32, "record header is %zu bytes, expected 32",
	      sizeof(struct rp_shm_record));

	/* options structs: zeroed, then sz and what differs from the defaults */
	memset(&po, 0, sizeof(po));
	memset(&eo, 0, sizeof(eo));
	memset(&pc, 0, sizeof(pc));
	memset(&so, 0, sizeof(so));
	memset(&st, 0, sizeof(st));
	memset(&io, 0, sizeof(io));
	memset(&seen, 0, sizeof(seen));
	seen.session_id = -1;
	po.sz = sizeof(po);
	po.name = PROVIDER;
	po.enable_cb = on_enable;
	po.stopping_cb = on_stopping;
	po.cb_ctx = &seen;
	prov = rp_provider_new(&po);
	if (!prov) {
		fprintf(stderr, "consumer: rp_provider_new: %s (%s)\n", strerror(errno),
			rp_last_error());
		return 1;
	}
	eo.sz = sizeof(eo);
	eo.id = EVENT_ID;
	eo.name = "Sample";
	eo.level = 4;
	eo.nfields = (uint16_t)(sizeof(fields) / sizeof(fields[0]));
	eo.fields = fields;
	ev = rp_event_new(prov, &eo);
	if (!ev) {
		fprintf(stderr, "consumer: rp_event_new: %s (%s)\n", strerror(errno),
			rp_last_error());
		return 1;
	}
	CHECK(!rp_event_enabled(ev), "event enabled before any session started");

	/* the diagnostics server (its socket goes to $TMPDIR) */
	io.sz = sizeof(io);
	rc = rp_ipc_server_start(&io);
	CHECK(rc == 0, "rp_ipc_server_start returned %d (%s), expected 0", rc, rp_last_error());

	/* bad options are refused with EINVAL and a message */
	pc.name = PROVIDER;
	so.sz = sizeof(so);
	so.providers = &pc;
	so.nproviders = 1;
	so.path = argv[1];
	so.buffering = 7;
	errno = 0;
	s = rp_session_start(&so);
	CHECK(!s && errno == EINVAL, "buffering mode 7: got %p, errno %d, expected NULL, EINVAL",
	      (void *)s, errno);
	CHECK(rp_last_error()[0] != '\0', "buffering mode 7: rp_last_error() is empty");

	so.buffering = RP_BUFFERING_BLOCK;
	so.buffer_bytes = 1u << 20;
	s = rp_session_start(&so);
	if (!s) {
		fprintf(stderr, "consumer: rp_session_start: %s (%s)\n", strerror(errno),
			rp_last_error());
		return 1;
	}
	sid = rp_session_id(s);
	CHECK(sid >= 0 && sid < RP_MAX_SESSIONS, "session id %d is not 0..%d", sid,
	      RP_MAX_SESSIONS - 1);
	CHECK(seen.enables == 1 && seen.session_id == sid,
	      "enable callback: %d calls for session %d, expected 1 for session %d", seen.enables,
	      seen.session_id, sid);
	CHECK(rp_event_enabled(ev), "event not enabled while the session runs");

	rc = rp_event_write(ev, too_big, sizeof(too_big));
	CHECK(rc == -EINVAL, "a 65536-byte payload: write returned %d, expected %d", rc, -EINVAL);

	write_events(ev);

	/* the drainer streams while the session runs: wait for all of it */
	st.sz = sizeof(st);
	for (i = 0; i < 10000; i++) {
		rc = rp_session_stats(s, &st);
		if (rc || st.events_written >= NR_EVENTS)
			break;
		sleep_ms(1);
	}
	CHECK(rc == 0, "rp_session_stats returned %d", rc);
	CHECK(st.events_written == NR_EVENTS, "events_written %llu, expected %d",
	      (unsigned long long)st.events_written, NR_EVENTS);
	for (i = 0; i < RP_DROP_REASON_NR; i++)
		CHECK(st.dropped[i] == 0, "dropped[%d] is %llu, expected 0", i,
		      (unsigned long long)st.dropped[i]);
	CHECK(st.corrupt_records == 0 && st.output_error == 0,
	      "corrupt_records %llu, output_error %d, expected 0 and 0",
	      (unsigned long long)st.corrupt_records, st.output_error);

	rc = rp_session_stop(s);
	CHECK(rc == 0, "rp_session_stop returned %d, expected 0", rc);
	CHECK(seen.stoppings == 1 && seen.disables == 1,
	      "callbacks at stop: %d stopping, %d disable, expected 1 and 1", seen.stoppings,
	      seen.disables);
	CHECK(!rp_event_enabled(ev), "event still enabled after the session stopped");
	rp_ipc_server_stop();

	/* the trace: a nettrace file holding at least every payload's fixed
	 * part, and at least what the drainer had written before stop (the
	 * sink buffers, so that may still have been 0) */
	if (stat(argv[1], &sb) != 0) {
		fprintf(stderr, "consumer: %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	CHECK((uint64_t)sb.st_size > (uint64_t)NR_EVENTS * FIXED_LEN &&
		      (uint64_t)sb.st_size >= st.bytes_written,
	      "%s: %lld bytes, expected more than %d and at least %llu", argv[1],
	      (long long)sb.st_size, NR_EVENTS * FIXED_LEN, (unsigned long long)st.bytes_written);
	f = fopen(argv[1], "rb");
	CHECK(f && fread(magic, 1, sizeof(magic), f) == sizeof(magic) &&
		      !memcmp(magic, "Nettrace", sizeof(magic)),
	      "%s does not start with \"Nettrace\"", argv[1]);
	if (f)
		fclose(f);

	if (failures) {
		fprintf(stderr, "consumer: %d check(s) failed\n", failures);
		return 1;
	}
	printf("ok: %d events, %lld bytes, session %d\n", NR_EVENTS, (long long)sb.st_size, sid);
	return 0;
}
