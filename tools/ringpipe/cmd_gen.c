// SPDX-License-Identifier: MIT
/*
 * ringpipe gen: write a synthetic trace.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cmds.h"
#include "tool_util.h"
#include "tracegen.h"

static const char gen_usage[] =
"usage: ringpipe gen -o FILE [--format v5|v6] [--events N] [--threads T]\n"
"                    [--gap-every N] [--lead-gap N] [--tail-gap N] [--sp-every N]\n"
"                    [--small] [--seed N]\n"
"\n"
"Writes a synthetic nettrace file: every field type, T threads (two processes\n"
"in V6), stacks, activity ids, opcodes and sequence points. --gap-every N skips\n"
"one sequence number every N events of each thread, --lead-gap and --tail-gap\n"
"skip numbers before a thread's first and after its last event; a reader must\n"
"report the sum as EventsLost. --small writes only the 32-byte 'Small' event.\n"
"Prints a JSON line: {\"written\":N,\"lost\":N,\"bytes\":N}.\n"
"Defaults: v5, 10000 events, 4 threads, no gaps, a sequence point every 10000.\n";

int cmd_gen(int argc, char **argv)
{
	struct tracegen_opts o = { .format = NT_FORMAT_V5, .events = 10000, .threads = 4,
				   .sp_every = 10000 };
	struct tracegen_result res;
	struct nt_fd_sink sink;
	const char *out = NULL;
	int i, fd, err;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		uint64_t n;

		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			fputs(gen_usage, stdout);
			return 0;
		}
		if (!strcmp(a, "--small")) {
			o.small_only = true;
			continue;
		}
		if (!v)
			return tool_err("gen", "option '%s' needs a value (see --help)", a), 2;
		i++;
		if (!strcmp(a, "-o")) {
			out = v;
		} else if (!strcmp(a, "--format")) {
			if (!strcmp(v, "v5"))
				o.format = NT_FORMAT_V5;
			else if (!strcmp(v, "v6"))
				o.format = NT_FORMAT_V6;
			else
				return tool_err("gen", "--format must be v5 or v6, not '%s'", v), 2;
		} else {
			uint64_t max = !strcmp(a, "--events") || !strcmp(a, "--seed") ?
				UINT64_MAX : UINT32_MAX;

			if (tool_parse_u64(v, max, &n))
				return tool_err("gen", "%s takes a whole number, not '%s'", a, v), 2;
			if (!strcmp(a, "--events"))
				o.events = n;
			else if (!strcmp(a, "--threads") && n >= 1 && n <= 100000)
				o.threads = (uint32_t)n;
			else if (!strcmp(a, "--gap-every"))
				o.gap_every = (uint32_t)n;
			else if (!strcmp(a, "--lead-gap"))
				o.lead_gap = (uint32_t)n;
			else if (!strcmp(a, "--tail-gap"))
				o.tail_gap = (uint32_t)n;
			else if (!strcmp(a, "--sp-every"))
				o.sp_every = (uint32_t)n;
			else if (!strcmp(a, "--seed"))
				o.seed = n;
			else if (!strcmp(a, "--threads"))
				return tool_err("gen", "--threads must be between 1 and 100000"), 2;
			else
				return tool_err("gen", "unknown option '%s' (see --help)", a), 2;
		}
	}
	if (!out)
		return tool_err("gen", "-o FILE is required (see --help)"), 2;
	fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return tool_err("gen", "%s: %s", out, strerror(errno));
	nt_fd_sink_init(&sink, fd);
	err = tracegen_write(&sink.base, &o, &res);
	if (!err && fsync(fd) < 0 && errno != EINVAL)
		err = -errno;
	if (close(fd) < 0 && !err)
		err = -errno;
	if (err)
		return tool_err("gen", "%s: %s", out, strerror(-err));
	printf("{\"written\":%" PRIu64 ",\"lost\":%" PRIu64 ",\"bytes\":%" PRIu64 "}\n",
	       res.written, res.lost, sink.bytes);
	return 0;
}
