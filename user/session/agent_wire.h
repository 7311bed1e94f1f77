/* SPDX-License-Identifier: MIT */
/*
 * The host agent's socket: what a libringpipe process and `ringpipe agent`
 * say to each other (Documentation/agent.md has the conversation).
 *
 * A SOCK_SEQPACKET Unix socket, one message per packet, little-endian, every
 * message a struct rp_agent_hdr and a body. The process says hello; the agent
 * answers with the host's configuration; the process describes its events
 * (META, before any record can name them), starts a session whose drainer is
 * the agent, and hands the session's memfd over with READY (SCM_RIGHTS). At
 * the end it sends its threads' last sequence numbers (FINALS) and STOPPING,
 * and the agent answers DRAINED once everything is in the trace. The agent
 * may ask for the end with STOP. Anyone may ask the agent for its STATUS.
 *
 * Nothing a process says about itself is believed: its identity is the
 * socket's SO_PEERCRED. Every length and count is checked by the reader.
 */
#ifndef RINGPIPE_AGENT_WIRE_H
#define RINGPIPE_AGENT_WIRE_H

#include <assert.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "util/bytebuf.h"
#include "nettrace/nettrace.h"

#define RP_AGENT_MAGIC 0x47415052u	/* "RPAG" */
#define RP_AGENT_WIRE_VERSION 1u
#define RP_AGENT_DEFAULT_SOCKET "/run/ringpipe/agent.sock"
/* The largest packet either side sends or accepts. */
#define RP_AGENT_MAX_MSG (128u << 10)

enum rp_agent_type {
	RP_AM_HELLO = 1,	/* process -> agent */
	RP_AM_CONFIG = 2,	/* agent -> process */
	RP_AM_META = 3,		/* process -> agent: one event's description */
	RP_AM_READY = 4,	/* process -> agent, with the session memfd and
				 * its sealed drop counters' memfd */
	RP_AM_FINALS = 5,	/* process -> agent: last sequence numbers */
	RP_AM_STOPPING = 6,	/* process -> agent: every writer is out */
	RP_AM_DRAINED = 7,	/* agent -> process: all of it is in the trace */
	RP_AM_STOP = 8,		/* agent -> process: end the session */
	RP_AM_STATUS = 9,	/* client -> agent */
	RP_AM_STATUS_REPLY = 10, /* agent -> client: text, in pieces */
	RP_AM_REFUSE = 11,	/* either way: why, as text; the connection ends */
};

struct rp_agent_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	uint32_t len;		/* the whole packet, header included */
	uint32_t flags;		/* per type; STATUS_REPLY: RP_AM_F_MORE */
};
static_assert(sizeof(struct rp_agent_hdr) == 16, "agent header size");

#define RP_AM_F_MORE 0x1u	/* STATUS_REPLY, REFUSE: more pieces of the text follow */
#define RP_AM_F_JSON 0x2u	/* STATUS: answer in JSON */

struct rp_am_hello {
	struct rp_agent_hdr h;
	uint32_t abi_version;	/* RP_ABI_VERSION of the process's library */
	uint32_t pid_claimed;	/* getpid() as the process sees it; the agent ignores it */
};
static_assert(sizeof(struct rp_am_hello) == 24, "hello size");

struct rp_am_config {
	struct rp_agent_hdr h;
	uint32_t buffering;	/* RP_BUFFERING_DROP or RP_BUFFERING_BLOCK */
	uint32_t format;	/* the nettrace version the agent writes (6) */
	uint64_t buffer_bytes;	/* the process's rings in all; 0: its default */
	uint32_t block_timeout_ms; /* Block: the bound on one write's wait; 0: none */
	uint32_t spec_len;	/* bytes of the provider list that follows, no NUL */
	/* "Name[:Keywords[:Level[:args]]],...", as `ringpipe collect` takes it */
};
static_assert(sizeof(struct rp_am_config) == 40, "config size");

struct rp_am_meta {
	struct rp_agent_hdr h;
	uint32_t index;		/* the records' meta_id */
	uint32_t desc_len;	/* bytes of the encoded description that follow */
};
static_assert(sizeof(struct rp_am_meta) == 24, "meta size");

struct rp_am_ready {
	struct rp_agent_hdr h;
	uint64_t sync_ticks;	/* the trace's clock sync (session.h) */
	uint64_t sync_unix_ns;
	uint64_t tick_freq;	/* the process's clock, ticks per second */
	uint64_t session_id;
};
static_assert(sizeof(struct rp_am_ready) == 48, "ready size");

struct rp_am_final {
	uint32_t tid;
	uint32_t seq;
};
struct rp_am_finals {
	struct rp_agent_hdr h;
	uint32_t n;		/* entries that follow */
	uint32_t __pad;
};
static_assert(sizeof(struct rp_am_finals) == 24, "finals size");
#define RP_AM_FINALS_PER_MSG 8192u

/*
 * An event's description as META carries it:
 *   u32 event_id, u64 keywords, u8 version, u8 level, u8 opcode,
 *   u8 has_guid, [16 bytes guid if has_guid], str provider, str name,
 *   u16 nfields (0xffff: no field list), then each field:
 *   str name, u8 type, u8 elem_type, u16 nfields, its members.
 * A str is a u16 length and that many UTF-8 bytes, no NUL.
 */
#define RP_AM_NO_FIELDS 0xffffu

/* Appends d's encoding to out; -ENOMEM, or -E2BIG past RP_AGENT_MAX_MSG. */
int rp_agent_desc_encode(const struct nt_event_desc *d, struct bytebuf *out);

/* A decoded description, in one allocation (free() it). */
struct rp_agent_desc {
	struct nt_event_desc desc;
	uint8_t guid[16];
};
/* NULL with a reason in why when the bytes are not a description the
 * writer of format can write (nt_event_desc_check()). */
struct rp_agent_desc *rp_agent_desc_decode(const void *p, size_t len, int format, char *why,
					   size_t whylen);

/* A header for type with len bytes in all. */
static inline struct rp_agent_hdr rp_agent_hdr(uint16_t type, uint32_t len, uint32_t flags)
{
	struct rp_agent_hdr h = { RP_AGENT_MAGIC, RP_AGENT_WIRE_VERSION, type, len, flags };

	return h;
}

/* 0 when the first n bytes of a packet are a plausible header of its length. */
static inline int rp_agent_hdr_check(const void *p, size_t n)
{
	const struct rp_agent_hdr *h = p;

	if (n < sizeof(*h) || h->magic != RP_AGENT_MAGIC || h->version != RP_AGENT_WIRE_VERSION ||
	    h->len != n)
		return -EBADMSG;
	return 0;
}

/* Sends one packet, with fd (>= 0) as SCM_RIGHTS; waits at most timeout_ms
 * for room. 0 or a negative errno. */
int rp_agent_send(int sock, const void *p, size_t n, int fd, int timeout_ms);
/* The same with up to RP_AGENT_MAX_FDS fds beside the packet. */
#define RP_AGENT_MAX_FDS 2
int rp_agent_send_fds(int sock, const void *p, size_t n, const int *fds, int nfds, int timeout_ms);
/* Sends n bytes of text as packets of type, every one but the last flagged
 * RP_AM_F_MORE; 0 or a negative errno. */
int rp_agent_send_text(int sock, uint16_t type, const char *s, size_t n, int timeout_ms);
/* Receives one packet into buf (at most cap bytes): its length, 0 at the end
 * of the connection, -ETIMEDOUT, or another negative errno. A passed fd goes
 * to *fd (when fd is not NULL; -1 when none), any other is closed. */
ssize_t rp_agent_recv(int sock, void *buf, size_t cap, int *fd, int timeout_ms);
/* The same, the first maxfds passed fds into fds[] (-1 where none came). */
ssize_t rp_agent_recv_fds(int sock, void *buf, size_t cap, int *fds, int maxfds, int timeout_ms);

#endif /* RINGPIPE_AGENT_WIRE_H */
