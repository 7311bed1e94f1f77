/* SPDX-License-Identifier: MIT */
/*
 * A client for the .NET diagnostics IPC protocol (DOTNET_IPC_V1) over Unix
 * sockets: finding a process's diagnostic socket, the reverse ("connect")
 * mode in which the runtime connects to us and advertises itself, and the
 * commands `ringpipe ps`, `collect` and `stop` need (ProcessInfo,
 * CollectTracing2/6, StopTracing, ResumeRuntime). The byte layouts are those
 * of user/ipc/ipc.h (dotnet/diagnostics' ipc-protocol.md).
 *
 * Every blocking wait polls in short slices and gives up with -ECANCELED as
 * soon as the endpoint's cancel flag is set, so another thread can abort it.
 * Errors are negative errno values; -EREMOTEIO means the server answered with
 * an error, whose HRESULT is then in *hr.
 */
#ifndef RINGPIPE_TOOL_IPC_CLIENT_H
#define RINGPIPE_TOOL_IPC_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/un.h>

#include "util/bytebuf.h"
#include "ringpipe/ringpipe.h"

#define IPCC_HEADER_SIZE 20u
#define IPCC_MAX_MESSAGE 65535u
#define IPCC_ADVERTISE_SIZE 34u
#define IPCC_PATH_MAX ((int)sizeof(((struct sockaddr_un *)0)->sun_path))

/* command sets and ids */
#define IPCC_SET_EVENTPIPE 0x02
#define IPCC_SET_PROCESS 0x04
#define IPCC_SET_SERVER 0xff

#define IPCC_EP_STOP_TRACING 0x01
#define IPCC_EP_COLLECT_TRACING2 0x03
#define IPCC_EP_COLLECT_TRACING6 0x07

#define IPCC_PROC_INFO 0x00
#define IPCC_PROC_RESUME_RUNTIME 0x01
#define IPCC_PROC_INFO2 0x04
#define IPCC_PROC_INFO3 0x08

#define IPCC_SERVER_OK 0x00
#define IPCC_SERVER_ERROR 0xff

/* HRESULTs a server answers with */
#define IPCC_HR_BAD_ENCODING 0x80131384u
#define IPCC_HR_UNKNOWN_COMMAND 0x80131385u
#define IPCC_HR_UNKNOWN_MAGIC 0x80131386u
#define IPCC_HR_NOT_SUPPORTED 0x80131515u
#define IPCC_HR_FAIL 0x80004005u
#define IPCC_HR_INVALID_ARG 0x80070057u

/* The rundown keyword the runtime applies when a client asks for rundown. */
#define IPCC_DEFAULT_RUNDOWN_KEYWORD 0x80020139ull

/* ---- finding sockets --------------------------------------------------- */

/*
 * The socket the process pid listens on: dotnet-diagnostic-<pid>-<key>-socket
 * in the target's $TMPDIR (read from /proc/<pid>/environ; else ours, else
 * /tmp). The one whose key is the process's start time wins; else the
 * newest by modification time that is not older than the process (an
 * older one was left by a previous process with the same pid). For a
 * process in another pid namespace the search goes through
 * /proc/<pid>/root with the pid it has there. 0, -ESRCH (no such
 * process), -ENOENT (no socket), -ENAMETOOLONG.
 */
int ipcc_find_socket(pid_t pid, char *path, size_t len);

/* The pid in pid's innermost pid namespace (NSpid's last field), or pid. */
pid_t ipcc_inner_pid(pid_t pid);

/* The directory (with a trailing '/') a process of ours would put its socket in. */
void ipcc_client_tmpdir(char *out, size_t len);

/* ---- endpoints --------------------------------------------------------- */

/*
 * Where commands go. Connect mode: each command connects to `path`. Reverse
 * mode (listen_fd >= 0): each command takes the next connection a runtime
 * made to our listening socket and advertised itself on (ADVR_V1), keeping
 * only advertises from expect_pid when it is > 0.
 */
struct ipcc_endpoint {
	char path[IPCC_PATH_MAX];
	int listen_fd;
	int pending_fd;		/* accepted and advertised, used by the next command */
	int64_t expect_pid;
	uint8_t cookie[16];	/* from the last advertise */
	uint64_t adv_pid;
	bool have_cookie;
	int cancel;		/* set (rp_store_release) to abort every wait */
	int ignored;		/* advertises dropped (wrong pid or magic) */
};

void ipcc_endpoint_init_path(struct ipcc_endpoint *ep, const char *path);
void ipcc_endpoint_init_reverse(struct ipcc_endpoint *ep, int listen_fd, int64_t expect_pid);
/* A connection ready for one command: fd, or -ETIMEDOUT, -ECANCELED, -errno. */
int ipcc_endpoint_open(struct ipcc_endpoint *ep, int timeout_ms);

/* A listening socket at path (mode 0600) for the reverse mode; fd or -errno. */
int ipcc_reverse_listen(const char *path);

/* ---- messages ---------------------------------------------------------- */

struct ipcc_reply {
	uint8_t cmd_set;
	uint8_t cmd_id;
	uint32_t hresult;	/* error replies */
	uint16_t len;		/* payload bytes */
	uint8_t payload[IPCC_MAX_MESSAGE - IPCC_HEADER_SIZE];
};

int ipcc_send_request(int fd, uint8_t set, uint8_t id, const void *payload, size_t len);
/* 0 for an OK reply, -EREMOTEIO for an error reply (r->hresult), -EBADMSG for
 * a malformed one, -ECONNRESET when the server closed the connection. */
int ipcc_read_reply(int fd, struct ipcc_reply *r, int timeout_ms, const int *cancel);

/* Appends a protocol string: u32 count of UTF-16 units with the NUL, then the
 * units (NULL: count 0). 0, -EILSEQ (not UTF-8), -ENOMEM. */
int ipcc_put_string(struct bytebuf *b, const char *utf8);

/* ---- commands ---------------------------------------------------------- */

struct ipcc_process_info {
	int version;		/* 1, 2 or 3: the ProcessInfo command that answered */
	uint64_t pid;
	uint8_t cookie[16];
	char *command_line;
	char *os;
	char *arch;
	char *entry_assembly;	/* 2, 3 */
	char *clr_version;	/* 2, 3 */
	char *rid;		/* 3 */
};

int ipcc_process_info(struct ipcc_endpoint *ep, struct ipcc_process_info *pi, uint32_t *hr,
		     int timeout_ms);
void ipcc_process_info_free(struct ipcc_process_info *pi);

struct ipcc_collect_opts {
	const struct rp_provider_config *providers;	/* level 0..5 */
	uint32_t nproviders;
	uint32_t buffer_mb;	/* circularBufferMB, > 0 */
	bool rundown;
	int buffering;		/* RP_BUFFERING_DROP: CollectTracing2, BLOCK: CollectTracing6 */
};

/* The request payload and command id for opts; 0 or -EINVAL with err set. */
int ipcc_collect_payload(const struct ipcc_collect_opts *o, struct bytebuf *payload,
			uint8_t *cmd_id, char *err, size_t errlen);
/* Starts a session; on success *stream_fd carries the nettrace stream. */
int ipcc_collect_tracing(struct ipcc_endpoint *ep, const struct ipcc_collect_opts *o,
			uint64_t *session_id, int *stream_fd, uint32_t *hr, int timeout_ms);
int ipcc_stop_tracing(struct ipcc_endpoint *ep, uint64_t session_id, uint32_t *hr,
		     int timeout_ms);
int ipcc_resume_runtime(struct ipcc_endpoint *ep, uint32_t *hr, int timeout_ms);

/* "UnknownCommand (0x80131385)" and the like. */
const char *ipcc_hresult_name(uint32_t hr);
/* A message for an error from the functions above (hr used for -EREMOTEIO). */
const char *ipcc_strerror(int err, uint32_t hr, char *buf, size_t len);

#endif /* RINGPIPE_TOOL_IPC_CLIENT_H */
