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
#include "tool_util.h"

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

int cmd_stop(int argc, char **argv)
{
	struct ipcc_endpoint ep;
	char sock[IPCC_PATH_MAX], msg[256];
	pid_t pid = 0;
	uint64_t id = 0;
	bool have_id = false;
	uint32_t hr;
	int i, rc;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			fputs(stop_usage, stdout);
			return 0;
		}
		if (strcmp(a, "-p") && strcmp(a, "--process-id") && strcmp(a, "--session"))
			return tool_err("stop", "unknown option '%s' (see --help)", a), 2;
		if (!v)
			return tool_err("stop", "option '%s' needs a value (see --help)", a), 2;
		i++;
		if (!strcmp(a, "--session")) {
			if (parse_id(v, &id) || !id)
				return tool_err("stop", "--session takes a session id (decimal or 0x "
						"hex, not 0), not '%s'", v), 2;
			have_id = true;
		} else {
			rc = tool_parse_pid("stop", v, &pid);
			if (rc)
				return rc;
		}
	}
	if (!pid || !have_id)
		return tool_err("stop", "-p PID and --session ID are required (see --help)"), 2;
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
