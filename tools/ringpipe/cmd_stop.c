// SPDX-License-Identifier: MIT
/*
 * ringpipe stop: stop a tracing session by id, through the process's
 * diagnostics IPC socket.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmds.h"
#include "ipc_client.h"
#include "common/tool_opts.h"
#include "common/tool_util.h"

#define STOP_REPLY_TIMEOUT_MS 30000

static const char stop_usage[] =
"usage: ringpipe stop -p PID --session ID\n"
"\n"
"Stops the EventPipe session ID (decimal or 0x hex, as collect prints it) in\n"
"process PID: sends StopTracing, after which the runtime ends the session's\n"
"stream.\n";

/* Decimal or 0x-hex u64. */
static int parse_id(const char *s, uint64_t *out)
{
	char *end;

	if (!s || !*s || *s == '-' || *s == '+' || *s == ' ')
		return -EINVAL;
	errno = 0;
	*out = strtoull(s, &end, s[0] == '0' && (s[1] == 'x' || s[1] == 'X') ? 16 : 10);
	return errno || *end || end == s ? -EINVAL : 0;
}

enum { STOP_SESSION = 1 };

struct stop_cfg {
	pid_t pid;
	uint64_t id;
};

static const struct tool_opt stop_opts[] = {
	TOOL_UINT("process-id", 'p', "PID", 1, INT32_MAX, struct stop_cfg, pid, "the process",
		  .bad = "takes a process id (a whole number > 0)"),
	TOOL_TAKE(TOOL_OPT_STRING, "session", 0, "ID", STOP_SESSION,
		  "the session, as collect printed it"),
	TOOL_OPTS_END
};

static int stop_take(void *cfg, const struct tool_opt *o, char *v, uint64_t num)
{
	struct stop_cfg *c = cfg;

	if (parse_id(v, &c->id) || !c->id)
		return tool_err("stop", "--session takes a session id (decimal or 0x hex, not 0), "
				"not '%s'", v), 2;
	return 0;
}

static const struct tool_cmd stop_cmd = { .name = "stop", .usage = stop_usage,
					  .opts = stop_opts, .take = stop_take };

int cmd_stop(int argc, char **argv)
{
	struct stop_cfg c = { 0 };
	struct ipcc_endpoint ep;
	char sock[IPCC_PATH_MAX], msg[256];
	pid_t pid;
	uint64_t id;
	uint32_t hr;
	struct tool_args rest;
	int rc = tool_opts_parse(&stop_cmd, argc, argv, &c, &rest);

	if (rc != TOOL_OPTS_RUN)
		return rc;
	if (!c.pid || !c.id)
		return tool_err("stop", "-p PID and --session ID are required (see --help)"), 2;
	pid = c.pid;
	id = c.id;
	rc = ipcc_find_socket(pid, sock, sizeof(sock));
	if (rc == -ESRCH)
		return tool_err("stop", "no process with pid %d", (int)pid);
	if (rc)
		return tool_err("stop", "pid %d has no diagnostic socket", (int)pid);
	ipcc_endpoint_init_path(&ep, sock);
	rc = ipcc_stop_tracing(&ep, id, &hr, STOP_REPLY_TIMEOUT_MS);
	if (rc)
		return tool_err("stop", "StopTracing 0x%" PRIx64 " in pid %d: %s", id, (int)pid,
				ipcc_strerror(rc, hr, msg, sizeof(msg)));
	printf("stopped session 0x%" PRIx64 " in pid %d\n", id, (int)pid);
	return 0;
}
