/* SPDX-License-Identifier: MIT */
/*
 * The .NET diagnostics IPC protocol (DOTNET_IPC_V1): message parsing and
 * reply encoding (ipc_proto.c, pure: no I/O, no global state, fuzzed by
 * tests/fuzz/fuzz_ipc.c) and the server's internal knobs (ipc_server.c).
 *
 * Wire facts (dotnet/diagnostics, documentation/design-docs/ipc-protocol.md;
 * Documentation/ipc.md): little-endian, no padding;
 * a message is a 20-byte header (magic "DOTNET_IPC_V1\0", u16 total size,
 * u8 command set, u8 command id, u16 reserved) and a payload. A string is a
 * u32 count of UTF-16 units including the final NUL, then the units; count 0
 * means null. Replies use command set 0xFF: id 0x00 OK, 0xFF error with an
 * int32 HRESULT.
 */
#ifndef RINGPIPE_IPC_H
#define RINGPIPE_IPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "util/bytebuf.h"

#define IPC_MAGIC "DOTNET_IPC_V1"	/* 13 characters + NUL = 14 bytes */
#define IPC_MAGIC_LEN 14
#define IPC_HEADER_SIZE 20
#define IPC_MAX_MESSAGE 65535u
#define IPC_MAX_PROVIDERS 1000u
#define IPC_MAX_LEVEL 5u

#define IPC_ADVERTISE_MAGIC "ADVR_V1"	/* 7 characters + NUL = 8 bytes */
#define IPC_ADVERTISE_SIZE 34

/* Rundown keyword of CollectTracing 1-3 when rundown is requested. */
#define IPC_DEFAULT_RUNDOWN_KEYWORD 0x80020139ull

enum ipc_command_set {
	IPC_SET_DUMP = 0x01,
	IPC_SET_EVENTPIPE = 0x02,
	IPC_SET_PROFILER = 0x03,
	IPC_SET_PROCESS = 0x04,
	IPC_SET_SERVER = 0xFF,
};

enum ipc_eventpipe_id {
	IPC_EP_STOP_TRACING = 0x01,
	IPC_EP_COLLECT_TRACING = 0x02,	/* CollectTracing N is 0x01 + N, N = 1..6 */
	IPC_EP_COLLECT_TRACING6 = 0x07,
};

enum ipc_process_id {
	IPC_PROC_INFO = 0x00,
	IPC_PROC_RESUME_RUNTIME = 0x01,
	IPC_PROC_ENVIRONMENT = 0x02,
	IPC_PROC_SET_ENV = 0x03,
	IPC_PROC_INFO2 = 0x04,
	IPC_PROC_ENABLE_PERFMAP = 0x05,
	IPC_PROC_DISABLE_PERFMAP = 0x06,
	IPC_PROC_STARTUP_HOOK = 0x07,
	IPC_PROC_INFO3 = 0x08,
};

enum ipc_server_id {
	IPC_SERVER_OK = 0x00,
	IPC_SERVER_ERROR = 0xFF,
};

/* HRESULTs the runtime sends (ds-types.h). */
#define IPC_HR_OK 0x00000000u
#define IPC_HR_BAD_ENCODING 0x80131384u
#define IPC_HR_UNKNOWN_COMMAND 0x80131385u
#define IPC_HR_UNKNOWN_MAGIC 0x80131386u
#define IPC_HR_NOT_SUPPORTED 0x80131515u
#define IPC_HR_FAIL 0x80004005u
#define IPC_HR_INVALID_ARG 0x80070057u

struct ipc_header {
	uint16_t size;		/* whole message, header included */
	uint8_t set;		/* enum ipc_command_set */
	uint8_t id;
	uint16_t reserved;
};

/* Why a message was refused: the HRESULT to answer with and a message. */
struct ipc_error {
	uint32_t hresult;
	char msg[200];
};

enum ipc_kind {
	IPC_MSG_COLLECT_TRACING = 1,
	IPC_MSG_STOP_TRACING,
	IPC_MSG_PROCESS_INFO,		/* u.info_version: 1, 2 or 3 */
	IPC_MSG_RESUME_RUNTIME,
	IPC_MSG_PROCESS_ENVIRONMENT,
	IPC_MSG_SET_ENVIRONMENT,
};

struct ipc_tracepoint_set {
	char *name;
	uint32_t nids;
	uint32_t *ids;
};

struct ipc_provider {
	char *name;			/* UTF-8, never empty */
	char *args;			/* UTF-8 filter arguments; NULL when sent as null */
	uint64_t keywords;
	uint32_t level;			/* 0..5 */
	/* CollectTracing5/6: event id filter (allow-list if filter_enable) */
	bool filter_enable;
	uint32_t nevent_ids;
	uint32_t *event_ids;
	/* CollectTracing5/6 user_events sessions (session_type 1) */
	char *default_tracepoint;	/* may be NULL */
	uint32_t ntracepoint_sets;
	struct ipc_tracepoint_set *tracepoint_sets;
};

struct ipc_collect {
	uint8_t version;		/* 1..6 */
	uint32_t session_type;		/* 0 IPC streaming, 1 user_events (v5/v6) */
	uint32_t buffer_mb;		/* > 0 for streaming sessions */
	uint32_t format;		/* 0 NetPerf, 1 NetTrace */
	uint64_t rundown_keyword;	/* 0: no rundown (derived for v1-v3) */
	bool stackwalk;
	uint32_t buffering;		/* v6 streaming: 0 Drop, 1 Block; else 0 */
	uint32_t nproviders;
	struct ipc_provider *providers;
};

struct ipc_msg {
	struct ipc_header hdr;
	enum ipc_kind kind;
	union {
		struct ipc_collect collect;
		uint64_t session_id;		/* StopTracing */
		uint8_t info_version;		/* ProcessInfo 1, 2, 3 */
		struct {
			char *name;		/* never empty */
			char *value;		/* NULL: unset */
		} setenv;
	} u;
};

/*
 * Parses the 20-byte header at buf. 0, or a negative errno with err filled:
 * -EBADMSG (BadEncoding: fewer than 20 bytes, size under 20), -EPROTO
 * (UnknownMagic).
 */
int ipc_header_parse(const void *buf, size_t len, struct ipc_header *h, struct ipc_error *err);

/*
 * Parses one whole message (header and hdr.size - 20 payload bytes; bytes
 * past hdr.size are ignored). 0 with *m filled (free with ipc_msg_free()),
 * or a negative errno with err saying which HRESULT to answer and why:
 * -EBADMSG BadEncoding, -EPROTO UnknownMagic, -EOPNOTSUPP UnknownCommand,
 * -ENOMEM Fail. On error *m holds nothing to free (its header may be set).
 */
int ipc_msg_parse(const void *buf, size_t len, struct ipc_msg *m, struct ipc_error *err);
void ipc_msg_free(struct ipc_msg *m);

/* ---- encoding ---------------------------------------------------------- */

void ipc_header_put(uint8_t out[IPC_HEADER_SIZE], uint16_t size, uint8_t set, uint8_t id);
/* OK + u64 (CollectTracing, StopTracing): 28 bytes. */
size_t ipc_reply_ok_u64(uint8_t out[28], uint64_t v);
/* OK + int32 code (ResumeRuntime, SetEnvironmentVariable): 24 bytes. */
size_t ipc_reply_ok_code(uint8_t out[24], uint32_t code);
/* Error + int32 HRESULT: 24 bytes. */
size_t ipc_reply_error(uint8_t out[24], uint32_t hresult);
/* The reverse-connection advertise: magic, cookie, pid, 0. */
void ipc_advertise_put(uint8_t out[IPC_ADVERTISE_SIZE], const uint8_t cookie[16], uint64_t pid);

/*
 * Appends a protocol string (UTF-8 in, UTF-16LE out, invalid bytes become
 * U+FFFD; NULL is sent as "" since clients cannot read count 0). At most
 * max_units code units before the NUL, never splitting a surrogate pair.
 * 0 or -ENOMEM.
 */
int ipc_string_put(struct bytebuf *b, const char *s, size_t max_units);

struct ipc_process_info {
	uint64_t pid;
	uint8_t cookie[16];
	const char *command_line;
	const char *os;
	const char *arch;
	const char *assembly;		/* ProcessInfo2/3 */
	const char *clr_version;	/* ProcessInfo2/3 */
	const char *rid;		/* ProcessInfo3 */
};

/*
 * A whole ProcessInfo reply (header included) for version 1, 2 or 3; the
 * command line is cut so the message stays within 65535 bytes. 0, -EINVAL
 * or -ENOMEM.
 */
int ipc_process_info_encode(struct bytebuf *b, int version, const struct ipc_process_info *pi);

/*
 * ProcessEnvironment: the 26-byte reply (OK, u32 continuation size, u16 0)
 * into reply, then the continuation (u32 count, "NAME=VALUE" strings) into
 * cont. Entries without '=' are skipped. 0 or -ENOMEM (-E2BIG past 4 GiB).
 */
int ipc_environment_encode(struct bytebuf *reply, struct bytebuf *cont, char *const *env);

/* ---- diagnostic port configuration ------------------------------------- */

#define IPC_MAX_PORTS 16
#define IPC_PATH_MAX 108		/* sizeof(sun_path) */

struct ipc_port_cfg {
	char path[IPC_PATH_MAX];
	bool connect;			/* connect (default) or listen */
	bool suspend;			/* suspend (default) or nosuspend */
};

/*
 * DOTNET_DiagnosticPorts syntax: "<address>[,<tag>...][;...]", tags
 * connect|listen|suspend|nosuspend (case-insensitive, the first of a kind
 * wins), empty items ignored. ringpipe refuses unknown tags and addresses
 * that do not fit a Unix socket. 0 with *n ports, or -EINVAL with a message.
 */
int ipc_ports_parse(const char *spec, struct ipc_port_cfg *out, size_t max, size_t *n,
		    char *err, size_t errlen);

/* ---- server internals (ipc_server.c) ----------------------------------- */

/* How long a connection may take to deliver its request (default 5000 ms);
 * tests shorten it. */
extern int rp_ipc_read_timeout_ms;
/* How long it may take to deliver its 20-byte header (default 1000 ms, at
 * most the above): a connection that sends nothing, or drips, is closed
 * after that, with BadEncoding. */
extern int rp_ipc_header_timeout_ms;

/* The cap on the memory of every IPC session together when neither
 * rp_ipc_opts.max_memory_bytes nor RINGPIPE_IPC_MAX_MEMORY_MB sets it: a
 * quarter of physical RAM (IPC_FALLBACK_MEMORY_MB when sysconf cannot say). */
#define IPC_FALLBACK_MEMORY_MB 1024u
uint64_t rp_ipc_default_memory_cap(void);
/* The running server's cap, and what its sessions hold now (bytes; the cap
 * is 0 when no server runs). */
uint64_t rp_ipc_memory_cap(void);
uint64_t rp_ipc_memory_used(void);
/* How long rp_ipc_server_stop() lets sessions flush to their readers before
 * it shuts down the sockets of readers that stopped reading (default 10000
 * ms); tests shorten it. */
extern int rp_ipc_stop_grace_ms;

/* Field 22 of /proc/<pid>/stat (start time in clock ticks since boot): the
 * runtime's disambiguation key in its socket name. 0 when it cannot be
 * read, as the runtime does. */
unsigned long long rp_proc_start_ticks(pid_t pid);

/* The listen socket path the runtime would use for this process:
 * "<tmp>dotnet-diagnostic-<pid>-<key>-socket". 0 or -ENAMETOOLONG. */
int rp_ipc_default_path(char *out, size_t len);

#endif /* RINGPIPE_IPC_H */
