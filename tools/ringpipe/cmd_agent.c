// SPDX-License-Identifier: MIT
/*
 * ringpipe agent: the host-wide session (agent/agent.h), and
 * ringpipe agent status: what it sees.
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent/agent.h"
#include "trace/agent_report.h"
#include "session/agent_wire.h"
#include "capture/bpf_capture.h"
#include "cmds.h"
#include "capture/collect.h"
#include "egress/egress.h"
#include "session/config.h"
#include "common/tool_opts.h"
#include "common/tool_util.h"

static const char agent_usage[] =
"usage: ringpipe agent [options]          serve the host: processes join, .NET is traced\n"
"       ringpipe agent status [--json] [--socket PATH]\n";

static const char agent_usage_end[] =
"Output: one nettrace V6 file per process, every event on its host pid\n"
"(COMM_PID_STARTTIME.nettrace, dotnet-COMM-PID-STARTTIME.nettrace for .NET), and the\n"
"agent's own trace (ringpipe-agent_PID_DATE.nettrace) with one Ringpipe-Agent/Process event per\n"
"process (pid, NSpid chain, start time, cgroup, container id, pod uid, runtime, QoS),\n"
"a ProcessEnd (how it ended, events, losses by reason) and one Container event per\n"
"container. 'ringpipe report' reads each. See Documentation/agent.md.\n";

#define MAX_USDT 16

/* What the egress options make: ClickHouse's, the OTLP receiver's */
struct egress_args {
	struct egress_opts ch, otlp;
	char spool[4096], otlp_spool[4200];
	char headers[4096];	/* --otlp-header's, as header lines */
	size_t headers_len;
};

/* --otlp-header K=V: K an HTTP header name, V without line breaks */
static int otlp_header(struct egress_args *ea, const char *v)
{
	static const char token[] = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyz"
				    "ABCDEFGHIJKLMNOPQRSTUVWXYZ";
	const char *eq = strchr(v, '=');
	size_t kl = eq ? (size_t)(eq - v) : 0;
	int n;

	if (!eq || !kl || strspn(v, token) != kl || strpbrk(eq + 1, "\r\n"))
		return tool_err("agent", "--otlp-header takes NAME=VALUE (an HTTP header name, "
				"such as Authorization=Bearer TOKEN), not '%s'", v), 2;
	n = snprintf(ea->headers + ea->headers_len, sizeof(ea->headers) - ea->headers_len,
		     "%.*s: %s\r\n", (int)kl, v, eq + 1);
	if (n < 0 || (size_t)n >= sizeof(ea->headers) - ea->headers_len)
		return tool_err("agent", "the --otlp-header values are longer than %zu bytes "
				"together", sizeof(ea->headers) - 1), 2;
	ea->headers_len += (size_t)n;
	ea->otlp.otlp_headers = ea->headers;
	return 0;
}

/* The egresses' defaults, once every option is read */
static int egress_finish(struct agent_opts *o, struct egress_args *ea)
{
	struct egress_opts *eo = &ea->ch, *ot = &ea->otlp;

	if (eo->dialect && strcmp(eo->dialect, "legacy") && strcmp(eo->dialect, "current"))
		return tool_err("agent", "--clickhouse-dialect must be legacy or current, not '%s'",
				eo->dialect), 2;
	if (eo->compress && strcmp(eo->compress, "gzip") && strcmp(eo->compress, "none"))
		return tool_err("agent", "--compress must be gzip or none, not '%s'", eo->compress),
		       2;
	if (eo->key && !eo->cert)
		return tool_err("agent", "--key is the private key of --cert's client "
				"certificate: give --cert FILE too"), 2;
	if (!eo->nurls && (eo->user || eo->password_file || eo->dialect || eo->shard))
		return tool_err("agent", "the --clickhouse-* options need --clickhouse URL"), 2;
	if (!ot->otlp_url && ot->otlp_headers)
		return tool_err("agent", "--otlp-header needs --otlp URL"), 2;
	if (!eo->nurls && !ot->otlp_url) {
		if (eo->host_id || eo->spool_dir || eo->spool_bytes || eo->cacert || eo->cert ||
		    eo->compress)
			return tool_err("agent", "the --host-id, --spool-*, --cacert, --cert and "
					"--compress options need --clickhouse URL or --otlp URL"), 2;
		return 0;
	}
	if (!eo->spool_dir) {
		snprintf(ea->spool, sizeof(ea->spool), "%s/spool", o->out_dir);
		eo->spool_dir = ea->spool;
	}
	eo->quiet = o->quiet;
	eo->notes_dir = o->out_dir;
	/* batches leave about once a second: a file is shipped once finished */
	if (!o->rotate_s)
		o->rotate_s = 1;
	if (ot->otlp_url) {
		/* the same host, spool size and files; a spool of its own */
		const char *url = ot->otlp_url, *headers = ot->otlp_headers;

		*ot = *eo;
		ot->nurls = 0;
		ot->shard = false;
		ot->user = ot->password_file = ot->dialect = NULL;
		ot->otlp_url = url;
		ot->otlp_headers = headers;
		if (eo->nurls) {
			snprintf(ea->otlp_spool, sizeof(ea->otlp_spool), "%s-otlp", eo->spool_dir);
			ot->spool_dir = ea->otlp_spool;
		}
		o->otlp = ot;
	}
	if (eo->nurls)
		o->egress = eo;
	return 0;
}

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
	stop_signal = sig;
}

struct status_cfg {
	bool json;
	const char *socket;
};

static const struct tool_opt status_opts[] = {
	TOOL_FLAG("json", 0, struct status_cfg, json, "one JSON object instead of the text"),
	TOOL_STRING("socket", 0, "PATH", struct status_cfg, socket,
		    "the agent's socket (default " RP_AGENT_DEFAULT_SOCKET ")"),
	TOOL_OPTS_END
};

static const struct tool_cmd status_cmd = { .name = "agent status", .usage = agent_usage,
					    .opts = status_opts };

static int cmd_status(int argc, char **argv)
{
	struct status_cfg c = { 0 };
	struct tool_args rest;
	struct bytebuf b = { 0 };
	int err = tool_opts_parse(&status_cmd, argc, argv, &c, &rest);

	if (err != TOOL_OPTS_RUN)
		return err;
	err = agent_status_query(c.socket, c.json, &b);
	if (err) {
		tool_err("agent status", "%s: %s%s", c.socket ? c.socket : RP_AGENT_DEFAULT_SOCKET,
			 strerror(-err), err == -ENOENT || err == -ECONNREFUSED ?
			 " (is 'ringpipe agent' running? --socket names another)" : "");
		bb_free(&b);
		return 1;
	}
	fwrite(b.p, 1, b.len, stdout);
	bb_free(&b);
	return 0;
}

/* What the options make */
struct agent_cfg {
	struct agent_opts o;
	struct egress_args ea;
	struct rp_capture_opts co;	/* --kernel, --usdt */
	const char *usdt[MAX_USDT];
	uint64_t duration_ns;
};

enum { AGENT_PROVIDERS = 1, AGENT_DOTNET_PROVIDERS, AGENT_BUFFERING, AGENT_BLOCK_TIMEOUT,
       AGENT_KERNEL, AGENT_USDT, AGENT_CLICKHOUSE, AGENT_OTLP_HEADER };

#define AGENT(m) struct agent_cfg, o.m
#define EGRESS(m) struct agent_cfg, ea.ch.m
/* "1 to 8": the number in a message */
#define AGENT_STR(x) #x
#define AGENT_XSTR(x) AGENT_STR(x)

static const struct tool_opt agent_opts[] = {
	TOOL_TAKE(TOOL_OPT_STRING, "providers", 0, "SPEC", AGENT_PROVIDERS,
		  "what every libringpipe process on the host collects:\n"
		  "Name[:Keywords[:Level[:args]]],... as for 'collect'"),
	TOOL_TAKE(TOOL_OPT_STRING, "buffering-mode", 0, "M", AGENT_BUFFERING,
		  "drop (default) or block, for every joined process"),
	TOOL_TAKE(TOOL_OPT_STRING, "block-timeout", 0, "D", AGENT_BLOCK_TIMEOUT,
		  "Block: a write waits at most D (500ms, 2s, ...), then\n"
		  "drops, counted as timeout; default: no bound (a write\n"
		  "waits while the agent lives, however slowly it reads)"),
	TOOL_MIB("buffer-mb", 0, "N", 1, 65536, AGENT(buffer_bytes),
		 "ring memory per process (default: the library's 16 MiB)",
		 .bad = "must be 1 to 65536"),
	TOOL_FLAG("dotnet", 0, AGENT(dotnet),
		  "also trace every .NET process through its diagnostics\n"
		  "socket, in containers too (found by its innermost NSpid)"),
	TOOL_TAKE(TOOL_OPT_STRING, "dotnet-providers", 0, "SPEC", AGENT_DOTNET_PROVIDERS,
		  "what .NET processes collect (default: dotnet-trace's profile)"),
	TOOL_STRING("output-dir", 0, "DIR", AGENT(out_dir),
		    "where the traces go (default: ./ringpipe-agent)", .nonempty = true),
	TOOL_STRING("socket", 0, "PATH", AGENT(socket_path),
		    "the socket processes join (default " RP_AGENT_DEFAULT_SOCKET ";\n"
		    "a process finds another one through RINGPIPE_AGENT=PATH)", .nonempty = true),
	TOOL_DURATION("duration", 0, "D", 1, UINT64_MAX, struct agent_cfg, duration_ns,
		      "stop after D (30s, 5m, ...); default: at SIGINT or SIGTERM",
		      .bad = "must be a time such as 30s or 5m"),
	TOOL_MIB("rotate-mb", 0, "N", 1, 1u << 20, AGENT(rotate_bytes),
		 "a process's file, or the agent's, goes on in the next\n"
		 "(NAME.2.nettrace, NAME.3...) once it holds N MiB",
		 .bad = "must be 1 to 1048576 (MiB)"),
	TOOL_UINT("rotate-s", 0, "N", 1, 31u * 24 * 3600, AGENT(rotate_s),
		  "every file goes on in its next at the end of each N\n"
		  "seconds (each file reads alone; .NET files are written\n"
		  "whole when their stream ends and do not rotate)",
		  .bad = "must be 1 to 2678400 (seconds)"),
	TOOL_FLAG("merge", 0, AGENT(merge),
		  "also merge the traces of each --rotate-s period (without\n"
		  "it, of the whole run) into one multi-process V6 file,\n"
		  AGENT_MERGED_PREFIX "PID_DATE[.N].nettrace, every event on its\n"
		  "own pid (as 'ringpipe merge' does)"),
	TOOL_TAKE(TOOL_OPT_STRING, "kernel", 0, "exec,sched", AGENT_KERNEL,
		  "process exec/fork/exit and context switches of every\n"
		  "process, through BPF (needs CAP_BPF and CAP_PERFMON)"),
	TOOL_TAKE(TOOL_OPT_STRING, "usdt", 0, "python,jvm,BINARY:PROVIDER:PROBE", AGENT_USDT,
		  "runtime USDT probes in every process (CPython GC,\n"
		  "HotSpot, any probe), also in containers"),
	TOOL_UINT("sample", 0, "HZ", 1, 100000, AGENT(sample_hz),
		  "CPU samples with kernel and user stacks of every process\n"
		  "(these three go to the agent's own trace; each event\n"
		  "carries its Pid and CgroupId)", .bad = "takes a rate in Hz (1..100000)"),
	TOOL_TAKE(TOOL_OPT_STRING, "clickhouse", 0, "URL", AGENT_CLICKHOUSE,
		  "also ship every finished file to ClickHouse's HTTP\n"
		  "interface (http[s]://HOST[:PORT]/?database=NAME; create\n"
		  "the tables with 'ringpipe fleet init'): batches of at most\n"
		  "100,000 events, spooled on disk before they are sent,\n"
		  "sent again until acknowledged, each row exactly once;\n"
		  "files rotate every second unless --rotate-s says otherwise.\n"
		  "Given several times (up to 8 servers, one database): a\n"
		  "failed send goes to the next server at once, and backs\n"
		  "off once all of them failed", .nonempty = true),
	TOOL_FLAG("clickhouse-shard", 0, EGRESS(shard),
		  "the --clickhouse servers are the replicas of one shard of a\n"
		  "cluster ('fleet init --cluster'): rows go into its\n"
		  "replicated TABLE_local tables, so that the host ships on\n"
		  "while another shard is down (see Documentation/fleet.md)"),
	TOOL_UINT("clickhouse-senders", 0, "N", 1, EGRESS_MAX_SENDERS, EGRESS(senders),
		  "inserts in flight at once, each on its own connection\n"
		  "(1 to 8, default 2): the server takes more rows per\n"
		  "second while another insert waits on its disk or ZooKeeper",
		  .bad = "must be 1 to " AGENT_XSTR(EGRESS_MAX_SENDERS)),
	TOOL_STRING("clickhouse-user", 0, "U", EGRESS(user),
		    "the ClickHouse user (default: the URL's, else default)", .nonempty = true),
	TOOL_STRING("clickhouse-password-file", 0, "F", EGRESS(password_file),
		    "the password, the first line of F", .nonempty = true),
	TOOL_STRING("clickhouse-dialect", 0, "D", EGRESS(dialect),
		    "legacy (before 22) or current: the tables' types, so that\n"
		    "batches are made before the server first answers\n"
		    "(default: from the server's version)", .nonempty = true),
	TOOL_STRING("otlp", 0, "URL", struct agent_cfg, ea.otlp.otlp_url,
		    "also (or instead) send every finished file as OTLP logs\n"
		    "to an OpenTelemetry receiver's OTLP/HTTP endpoint\n"
		    "(http[s]://HOST[:PORT][/PATH]; port 4318, and /v1/logs is\n"
		    "added to a PATH that does not end in it): one log record\n"
		    "per event, one resource per process (host.name,\n"
		    "process.pid, container.id, k8s.pod.uid), protobuf, spooled\n"
		    "and sent again on 429, 5xx and connection errors", .nonempty = true),
	TOOL_TAKE(TOOL_OPT_STRING, "otlp-header", 0, "K=V", AGENT_OTLP_HEADER,
		  "a header on every OTLP request, e.g.\n"
		  "Authorization='Bearer TOKEN'; may be given again", .nonempty = true),
	TOOL_STRING("cacert", 0, "FILE", EGRESS(cacert),
		    "https: trust only the CAs in FILE (PEM; default:\n"
		    "$SSL_CERT_FILE, else the system's CA store)", .nonempty = true),
	TOOL_STRING("cert", 0, "FILE", EGRESS(cert),
		    "https: present the client certificate in FILE (PEM)", .nonempty = true),
	TOOL_STRING("key", 0, "FILE", EGRESS(key),
		    "its private key (PEM; default: in the --cert FILE).\n"
		    "Proxies come from http_proxy, https_proxy and no_proxy;\n"
		    "loopback goes direct unless no_proxy is set", .nonempty = true),
	TOOL_STRING("compress", 0, "gzip|none", EGRESS(compress),
		    "request bodies (ClickHouse inserts, OTLP requests) go\n"
		    "gzip-compressed, with Content-Encoding: gzip (default: none)",
		    .nonempty = true),
	TOOL_STRING("host-id", 0, "NAME", EGRESS(host_id),
		    "the host's name in every row and record (default: the\n"
		    "host name)", .nonempty = true),
	TOOL_STRING("spool-dir", 0, "DIR", EGRESS(spool_dir),
		    "where batches wait until acknowledged (default:\n"
		    "OUTPUT-DIR/spool; with --clickhouse and --otlp both, the\n"
		    "OTLP batches wait in DIR-otlp); a restarted agent sends\n"
		    "what it finds", .nonempty = true),
	TOOL_MIB("spool-mb", 0, "N", 1, 1u << 20, EGRESS(spool_bytes),
		 "the spool's size (default 256); when it is full, Block\n"
		 "processes park until it has room, and the events of Drop\n"
		 "processes are counted as lost (reason egress_full)",
		 .bad = "must be 1 to 1048576 (MiB)"),
	TOOL_FLAG("quiet", 0, AGENT(quiet), "no progress lines"),
	TOOL_OPTS_END
};

/* --providers and --dotnet-providers: checked here, parsed by the agent */
static int agent_providers(const char *name, const char *v)
{
	struct rp_provider_config *p = NULL;
	uint32_t n = 0;
	char err[256];

	if (rp_providers_parse(v, &p, &n, err, sizeof(err)))
		return tool_err("agent", "--%s: %s", name, err), 2;
	rp_providers_free(p, n);
	return 0;
}

static int agent_take(void *cfg, const struct tool_opt *opt, char *v, uint64_t num)
{
	struct agent_cfg *c = cfg;
	struct egress_opts *eo = &c->ea.ch;
	char err[256];

	switch (opt->id) {
	case AGENT_PROVIDERS:
	case AGENT_DOTNET_PROVIDERS:
		if (agent_providers(opt->name, v))
			return 2;
		*(opt->id == AGENT_PROVIDERS ? &c->o.providers : &c->o.dotnet_providers) = v;
		return 0;
	case AGENT_BUFFERING:
		if (rp_buffering_parse(v, &c->o.buffering))
			return tool_err("agent", "--buffering-mode must be drop or block, not '%s'",
					v), 2;
		return 0;
	case AGENT_BLOCK_TIMEOUT:
		if (tool_parse_block_timeout(v, &c->o.block_timeout_ms))
			return tool_err("agent", "--block-timeout must be a time of at least 1ms "
					"(500ms, 2s) or 0 for none, not '%s'", v), 2;
		return 0;
	case AGENT_KERNEL:
	case AGENT_USDT:
		if (opt->id == AGENT_KERNEL ? rp_capture_parse_kernel(&c->co, v, err, sizeof(err)) :
		    rp_capture_parse_usdt(&c->co, v, c->usdt, MAX_USDT, err, sizeof(err)))
			return tool_err("agent", "%s", err), 2;
		c->o.capture = &c->co;
		return 0;
	case AGENT_CLICKHOUSE:
		if (eo->nurls == EGRESS_MAX_SERVERS)
			return tool_err("agent", "--clickhouse is given at most %d times (the "
					"servers of one cluster)", EGRESS_MAX_SERVERS), 2;
		eo->urls[eo->nurls++] = v;
		return 0;
	default:	/* AGENT_OTLP_HEADER */
		return otlp_header(&c->ea, v);
	}
}

static const struct tool_cmd agent_status_sub = { .name = "agent status", .opts = status_opts };
static const struct tool_cmd *const agent_subs[] = { &agent_status_sub, NULL };
static const struct tool_cmd agent_cmd = {
	.name = "agent", .usage = agent_usage, .usage_end = agent_usage_end, .opts = agent_opts,
	.take = agent_take, .also = agent_subs,
};

int cmd_agent(int argc, char **argv)
{
	struct agent_cfg c = { .o = { .sz = sizeof(c.o), .out_dir = "ringpipe-agent" },
			       .ea = { .ch.sz = sizeof(c.ea.ch), .otlp.sz = sizeof(c.ea.otlp) },
			       .co = { .sz = sizeof(c.co) } };
	struct sigaction sa = { .sa_handler = on_signal };
	struct tool_args rest;
	struct agent *a;
	struct timespec t0;
	int rc;

	if (argc > 1 && !strcmp(argv[1], "status"))
		return cmd_status(argc - 1, argv + 1);
	rc = tool_opts_parse(&agent_cmd, argc, argv, &c, &rest);
	if (rc != TOOL_OPTS_RUN)
		return rc;
	if (c.o.socket_path && strlen(c.o.socket_path) >= 108)
		return tool_err("agent", "--socket needs a path of 1 to 107 bytes"), 2;
	if (egress_finish(&c.o, &c.ea))
		return 2;
	if (!c.o.providers && !c.o.dotnet && !c.o.capture && !c.o.sample_hz)
		return tool_err("agent", "nothing to collect: give --providers, --dotnet, --kernel, "
				"--usdt or --sample (see --help)"), 2;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	a = agent_start(&c.o);
	if (!a)
		return 1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (!stop_signal) {
		struct timespec now, d = { 0, 50000000 };

		nanosleep(&d, NULL);
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (c.duration_ns && (uint64_t)(now.tv_sec - t0.tv_sec) * 1000000000ull +
				     (uint64_t)now.tv_nsec - (uint64_t)t0.tv_nsec >= c.duration_ns)
			break;
	}
	return agent_stop(a);
}
