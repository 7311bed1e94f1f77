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
#include "common/tool_opts.h"
#include "common/tool_util.h"
#include "tracegen.h"

static const char gen_usage[] =
"usage: ringpipe gen -o FILE [--format v5|v6] [--events N] [--threads T]\n"
"                    [--gap-every N] [--lead-gap N] [--tail-gap N] [--sp-every N]\n"
"                    [--small] [--seed N]\n"
"\n"
"Writes a synthetic nettrace file: every field type, T threads (two processes\n"
"in V6), stacks, activity ids, opcodes and sequence points. The gaps are\n"
"sequence numbers skipped, which a reader must report, summed, as EventsLost.\n"
"Prints a JSON line: {\"written\":N,\"lost\":N,\"bytes\":N}.\n";

struct gen_cfg {
	struct tracegen_opts o;
	const char *out;
};

enum { GEN_FORMAT = 1 };

#define GEN(m) struct gen_cfg, o.m

static const struct tool_opt gen_opts[] = {
	TOOL_STRING(NULL, 'o', "FILE", struct gen_cfg, out, "the trace to write (required)"),
	TOOL_TAKE(TOOL_OPT_STRING, "format", 0, "v5|v6", GEN_FORMAT,
		  "nettrace version (default v5)"),
	TOOL_UINT("events", 0, "N", 0, UINT64_MAX, GEN(events), "events in all (default 10000)"),
	TOOL_UINT("threads", 0, "T", 1, 100000, GEN(threads),
		  "capture threads, 1 to 100000 (default 4)"),
	TOOL_UINT("gap-every", 0, "N", 0, UINT32_MAX, GEN(gap_every),
		  "skip one sequence number every N events of each thread"),
	TOOL_UINT("lead-gap", 0, "N", 0, UINT32_MAX, GEN(lead_gap),
		  "sequence numbers skipped before each thread's first event"),
	TOOL_UINT("tail-gap", 0, "N", 0, UINT32_MAX, GEN(tail_gap),
		  "sequence numbers skipped after each thread's last event"),
	TOOL_UINT("sp-every", 0, "N", 0, UINT32_MAX, GEN(sp_every),
		  "a sequence point every N events (default 10000; 0: at the end)"),
	TOOL_FLAG("small", 0, GEN(small_only), "only the 32-byte 'Small' event"),
	TOOL_UINT("seed", 0, "N", 0, UINT64_MAX, GEN(seed), "the generator's seed"),
	TOOL_OPTS_END
};

static int gen_take(void *cfg, const struct tool_opt *opt, char *v, uint64_t num)
{
	struct gen_cfg *c = cfg;

	if (!strcmp(v, "v5"))
		c->o.format = NT_FORMAT_V5;
	else if (!strcmp(v, "v6"))
		c->o.format = NT_FORMAT_V6;
	else
		return tool_err("gen", "--format must be v5 or v6, not '%s'", v), 2;
	return 0;
}

static const struct tool_cmd gen_cmd = { .name = "gen", .usage = gen_usage, .opts = gen_opts,
					 .take = gen_take };

int cmd_gen(int argc, char **argv)
{
	struct gen_cfg c = { .o = { .format = NT_FORMAT_V5, .events = 10000, .threads = 4,
				    .sp_every = 10000 } };
	struct tracegen_result res;
	struct nt_fd_sink sink;
	struct tool_args rest;
	int fd, err, rc = tool_opts_parse(&gen_cmd, argc, argv, &c, &rest);

	if (rc != TOOL_OPTS_RUN)
		return rc;
	if (!c.out)
		return tool_err("gen", "-o FILE is required (see --help)"), 2;
	fd = open(c.out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return tool_err("gen", "%s: %s", c.out, strerror(errno));
	nt_fd_sink_init(&sink, fd);
	err = tracegen_write(&sink.base, &c.o, &res);
	if (!err && fsync(fd) < 0 && errno != EINVAL)
		err = -errno;
	if (close(fd) < 0 && !err)
		err = -errno;
	if (err)
		return tool_err("gen", "%s: %s", c.out, strerror(-err));
	printf("{\"written\":%" PRIu64 ",\"lost\":%" PRIu64 ",\"bytes\":%" PRIu64 "}\n",
	       res.written, res.lost, sink.bytes);
	return 0;
}
