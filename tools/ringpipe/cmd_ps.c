// SPDX-License-Identifier: MIT
/*
 * ringpipe ps: list the processes that have a diagnostic socket.
 *
 * Like the .NET tools' `ps`, this needs no protocol: a process is listed when
 * a socket named dotnet-diagnostic-<pid>-<digits>-socket exists for it (in
 * its own $TMPDIR, ours, or /tmp) and the pid is alive. That covers .NET
 * runtimes and programs that run ringpipe's IPC server. -v asks each one for
 * ProcessInfo and shows its runtime, architecture and socket.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmds.h"
#include "ipc_client.h"
#include "common/tool_opts.h"
#include "common/tool_util.h"

static const char ps_usage[] =
"usage: ringpipe ps [-v]\n"
"\n"
"Lists the processes that have a diagnostic socket (.NET runtimes and programs\n"
"running ringpipe's IPC server): pid, name and command line, in pid order.\n";

struct ps_cfg {
	bool verbose;
};

static const struct tool_opt ps_opts[] = {
	TOOL_FLAG("verbose", 'v', struct ps_cfg, verbose,
		  "also ask each process for ProcessInfo and print its\n"
		  "entry assembly, runtime version, OS/architecture and\n"
		  "socket path"),
	TOOL_OPTS_END
};

static const struct tool_cmd ps_cmd = { .name = "ps", .usage = ps_usage, .opts = ps_opts };

/* /proc/<pid>/<what> with NULs turned into spaces, trailing ones dropped. */
static void proc_text(int pid, const char *what, char *out, size_t len)
{
	char path[64];
	size_t n, i;
	FILE *f;

	out[0] = 0;
	snprintf(path, sizeof(path), "/proc/%d/%s", pid, what);
	f = fopen(path, "re");
	if (!f)
		return;
	n = fread(out, 1, len - 1, f);
	fclose(f);
	out[n] = 0;
	for (i = 0; i < n; i++)
		if (out[i] == 0 || out[i] == '\n')
			out[i] = ' ';
	while (n && out[n - 1] == ' ')
		out[--n] = 0;
}

static void print_info(const char *sock)
{
	struct ipcc_endpoint ep;
	struct ipcc_process_info pi;
	uint32_t hr;
	char msg[256];
	int rc;

	ipcc_endpoint_init_path(&ep, sock);
	rc = ipcc_process_info(&ep, &pi, &hr, 2000);
	if (rc) {
		printf("         process info: %s\n", ipcc_strerror(rc, hr, msg, sizeof(msg)));
	} else {
		printf("         runtime: %s %s, %s %s%s%s (ProcessInfo%s)\n",
		       pi.entry_assembly && *pi.entry_assembly ? pi.entry_assembly : "-",
		       pi.clr_version && *pi.clr_version ? pi.clr_version : "-",
		       pi.os, pi.arch, pi.rid ? ", " : "", pi.rid ? pi.rid : "",
		       pi.version == 1 ? "" : pi.version == 2 ? "2" : "3");
		ipcc_process_info_free(&pi);
	}
	printf("         socket:  %s\n", sock);
}

int cmd_ps(int argc, char **argv)
{
	struct ps_cfg cfg = { 0 };
	struct dirent *de;
	int *pids = NULL;
	size_t n = 0, cap = 0, k;
	DIR *d;

	struct tool_args rest;
	int rc = tool_opts_parse(&ps_cmd, argc, argv, &cfg, &rest);

	if (rc != TOOL_OPTS_RUN)
		return rc;
	d = opendir("/proc");
	if (!d)
		return tool_err("ps", "/proc: %s", strerror(errno));
	while ((de = readdir(d))) {
		const char *c;

		for (c = de->d_name; isdigit((unsigned char)*c); c++)
			;
		if (*c || c == de->d_name)
			continue;
		if (n == cap) {
			int *np;

			cap = cap ? cap * 2 : 256;
			np = realloc(pids, cap * sizeof(*pids));
			if (!np) {
				closedir(d);
				free(pids);
				return tool_err("ps", "out of memory");
			}
			pids = np;
		}
		pids[n++] = atoi(de->d_name);
	}
	closedir(d);
	/* /proc lists in pid order already, but do not rely on it */
	for (k = 1; k < n; k++) {
		int v = pids[k];
		size_t j = k;

		for (; j > 0 && pids[j - 1] > v; j--)
			pids[j] = pids[j - 1];
		pids[j] = v;
	}

	printf("%7s  %-16s %s\n", "PID", "NAME", "COMMAND");
	for (k = 0; k < n; k++) {
		char sock[IPCC_PATH_MAX], name[64], cmdline[4096];

		if (pids[k] == (int)getpid() || ipcc_find_socket(pids[k], sock, sizeof(sock)))
			continue;
		proc_text(pids[k], "comm", name, sizeof(name));
		proc_text(pids[k], "cmdline", cmdline, sizeof(cmdline));
		if (!*name && !*cmdline)
			continue;	/* exited meanwhile */
		printf("%7d  %-16s %s\n", pids[k], name, cmdline);
		if (cfg.verbose)
			print_info(sock);
	}
	fflush(stdout);
	free(pids);
	return 0;
}
