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

#include "agent.h"
#include "agent_report.h"
#include "agent_wire.h"
#include "bpf_capture.h"
#include "cmds.h"
#include "collect.h"
#include "egress.h"
#include "config.h"
#include "tool_util.h"

static const char agent_usage[] =
"usage: ringpipe agent [options]          serve the host: processes join, .NET is traced\n"
"       ringpipe agent status [--json] [--socket PATH]\n"
"\n"
"  --providers SPEC        what every libringpipe process on the host collects:\n"
"                          Name[:Keywords[:Level[:args]]],... as for 'collect'\n"
"  --buffering-mode M      drop (default) or block, for every joined process\n"
"  --block-timeout D       Block: a write waits at most D (500ms, 2s, ...), then\n"
"                          drops, counted as timeout; default: no bound (a write\n"
"                          waits while the agent lives, however slowly it reads)\n"
"  --buffer-mb N           ring memory per process (default: the library's 16 MiB)\n"
"  --dotnet                also trace every .NET process through its diagnostics\n"
"                          socket, in containers too (found by its innermost NSpid)\n"
"  --dotnet-providers SPEC what .NET processes collect (default: dotnet-trace's profile)\n"
"  --output-dir DIR        where the traces go (default: ./ringpipe-agent)\n"
"  --socket PATH           the socket processes join (default " RP_AGENT_DEFAULT_SOCKET ";\n"
"                          a process finds another one through RINGPIPE_AGENT=PATH)\n"
"  --duration D            stop after D (30s, 5m, ...); default: at SIGINT or SIGTERM\n"
"  --rotate-mb N           a process's file, or the agent's, goes on in the next\n"
"                          (NAME.2.nettrace, NAME.3...) once it holds N MiB\n"
"  --rotate-s N            every file goes on in its next at the end of each N\n"
"                          seconds (each file reads alone; .NET files are written\n"
"                          whole when their stream ends and do not rotate)\n"
"  --merge                 also merge the traces of each --rotate-s period (without\n"
"                          it, of the whole run) into one multi-process V6 file,\n"
"                          " AGENT_MERGED_PREFIX "PID_DATE[.N].nettrace, every event on its\n"
"                          own pid (as 'ringpipe merge' does)\n"
"  --kernel exec,sched     process exec/fork/exit and context switches of every\n"
"                          process, through BPF (needs CAP_BPF and CAP_PERFMON)\n"
"  --usdt python,jvm,BINARY:PROVIDER:PROBE\n"
"                          runtime USDT probes in every process (CPython GC,\n"
"                          HotSpot, any probe), also in containers\n"
"  --sample HZ             CPU samples with kernel and user stacks of every process\n"
"                          (these three go to the agent's own trace; each event\n"
"                          carries its Pid and CgroupId)\n"
"  --clickhouse URL        also ship every finished file to ClickHouse's HTTP\n"
"                          interface (http[s]://HOST[:PORT]/?database=NAME; create\n"
"                          the tables with 'ringpipe fleet init'): batches of at most\n"
"                          100,000 events, spooled on disk before they are sent,\n"
"                          sent again until acknowledged, each row exactly once;\n"
"                          files rotate every second unless --rotate-s says otherwise.\n"
"                          Given several times (up to 8 servers, one database): a\n"
"                          failed send goes to the next server at once, and backs\n"
"                          off once all of them failed\n"
"  --clickhouse-shard      the --clickhouse servers are the replicas of one shard of a\n"
"                          cluster ('fleet init --cluster'): rows go into its\n"
"                          replicated TABLE_local tables, so that the host ships on\n"
"                          while another shard is down (see Documentation/fleet.md)\n"
"  --clickhouse-senders N  inserts in flight at once, each on its own connection\n"
"                          (1 to 8, default 2): the server takes more rows per\n"
"                          second while another insert waits on its disk or ZooKeeper\n"
"  --clickhouse-user U     the ClickHouse user (default: the URL's, else default)\n"
"  --clickhouse-password-file F\n"
"                          the password, the first line of F\n"
"  --clickhouse-dialect D  legacy (before 22) or current: the tables' types, so that\n"
"                          batches are made before the server first answers\n"
"                          (default: from the server's version)\n"
"  --otlp URL              also (or instead) send every finished file as OTLP logs\n"
"                          to an OpenTelemetry receiver's OTLP/HTTP endpoint\n"
"                          (http[s]://HOST[:PORT][/PATH]; port 4318, and /v1/logs is\n"
"                          added to a PATH that does not end in it): one log record\n"
"                          per event, one resource per process (host.name,\n"
"                          process.pid, container.id, k8s.pod.uid), protobuf, spooled\n"
"                          and sent again on 429, 5xx and connection errors\n"
"  --otlp-header K=V       a header on every OTLP request, e.g.\n"
"                          Authorization='Bearer TOKEN'; may be given again\n"
"  --cacert FILE           https: trust only the CAs in FILE (PEM; default:\n"
"                          $SSL_CERT_FILE, else the system's CA store)\n"
"  --cert FILE             https: present the client certificate in FILE (PEM)\n"
"  --key FILE              its private key (PEM; default: in the --cert FILE).\n"
"                          Proxies come from http_proxy, https_proxy and no_proxy;\n"
"                          loopback goes direct unless no_proxy is set\n"
"  --compress gzip|none    request bodies (ClickHouse inserts, OTLP requests) go\n"
"                          gzip-compressed, with Content-Encoding: gzip (default: none)\n"
"  --host-id NAME          the host's name in every row and record (default: the\n"
"                          host name)\n"
"  --spool-dir DIR         where batches wait until acknowledged (default:\n"
"                          OUTPUT-DIR/spool; with --clickhouse and --otlp both, the\n"
"                          OTLP batches wait in DIR-otlp); a restarted agent sends\n"
"                          what it finds\n"
"  --spool-mb N            the spool's size (default 256); when it is full, Block\n"
"                          processes park until it has room, and the events of Drop\n"
"                          processes are counted as lost (reason egress_full)\n"
"  --quiet                 no progress lines\n"
"\n"
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

/* The --clickhouse and --otlp families: 1 when opt is not one of them, 0
 * when taken, 2 after saying what is wrong */
static int egress_option(struct egress_args *ea, const char *opt, const char *v)
{
	static const char *const names[] = {
		"--clickhouse", "--clickhouse-user", "--clickhouse-password-file",
		"--clickhouse-dialect", "--host-id", "--spool-dir", "--otlp", "--otlp-header",
		"--spool-mb", "--clickhouse-senders", "--cacert", "--cert", "--key", "--compress",
	};
	struct egress_opts *eo = &ea->ch;
	const char **slots[] = { NULL, &eo->user, &eo->password_file, &eo->dialect,
				 &eo->host_id, &eo->spool_dir, &ea->otlp.otlp_url, NULL, NULL, NULL,
				 &eo->cacert, &eo->cert, &eo->key, &eo->compress };
	uint64_t mb;
	size_t i;

	for (i = 0; i < sizeof(names) / sizeof(names[0]) && strcmp(opt, names[i]); i++)
		;
	if (i == sizeof(names) / sizeof(names[0]))
		return 1;
	if (!v || !*v)
		return tool_err("agent", "option '%s' needs a value (see --help)", opt), 2;
	if (!strcmp(opt, "--otlp-header")) {
		return otlp_header(ea, v);
	} else if (i == 0) {
		if (eo->nurls == EGRESS_MAX_SERVERS)
			return tool_err("agent", "--clickhouse is given at most %d times (the servers "
					"of one cluster)", EGRESS_MAX_SERVERS), 2;
		eo->urls[eo->nurls++] = v;
	} else if (slots[i]) {
		*slots[i] = v;
	} else if (!strcmp(opt, "--clickhouse-senders")) {
		if (tool_parse_u64(v, EGRESS_MAX_SENDERS, &mb) || !mb)
			return tool_err("agent", "--clickhouse-senders must be 1 to %d, not '%s'",
					EGRESS_MAX_SENDERS, v), 2;
		eo->senders = (uint32_t)mb;
	} else {
		if (tool_parse_u64(v, 1u << 20, &mb) || !mb)
			return tool_err("agent", "--spool-mb must be 1 to 1048576 (MiB), not '%s'", v), 2;
		eo->spool_bytes = mb << 20;
	}
	if (eo->dialect && strcmp(eo->dialect, "legacy") && strcmp(eo->dialect, "current"))
		return tool_err("agent", "--clickhouse-dialect must be legacy or current, not '%s'",
				eo->dialect), 2;
	if (eo->compress && strcmp(eo->compress, "gzip") && strcmp(eo->compress, "none"))
		return tool_err("agent", "--compress must be gzip or none, not '%s'", eo->compress),
		       2;
	if (eo->key && !eo->cert)
		return tool_err("agent", "--key is the private key of --cert's client "
				"certificate: give --cert FILE too"), 2;
	return 0;
}

/* The egresses' defaults, once every option is read */
static int egress_finish(struct agent_opts *o, struct egress_args *ea)
{
	struct egress_opts *eo = &ea->ch, *ot = &ea->otlp;

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

static int cmd_status(int argc, char **argv)
{
	const char *sock = NULL;
	struct bytebuf b = { 0 };
	bool json = false;
	int i, err;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			json = true;
		else if (!strcmp(argv[i], "--socket") && i + 1 < argc)
			sock = argv[++i];
		else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
			return fputs(agent_usage, stdout), 0;
		else
			return tool_err("agent status", "unknown option '%s' (see --help)", argv[i]), 2;
	}
	err = agent_status_query(sock, json, &b);
	if (err) {
		tool_err("agent status", "%s: %s%s", sock ? sock : RP_AGENT_DEFAULT_SOCKET,
			 strerror(-err), err == -ENOENT || err == -ECONNREFUSED ?
			 " (is 'ringpipe agent' running? --socket names another)" : "");
		bb_free(&b);
		return 1;
	}
	fwrite(b.p, 1, b.len, stdout);
	bb_free(&b);
	return 0;
}

int cmd_agent(int argc, char **argv)
{
	struct agent_opts o = { .sz = sizeof(o), .out_dir = "ringpipe-agent" };
	struct egress_args ea = { .ch.sz = sizeof(ea.ch), .otlp.sz = sizeof(ea.otlp) };
	struct rp_capture_opts co = { .sz = sizeof(co) };
	const char *usdt[MAX_USDT];
	uint64_t duration = 0, mb;
	struct sigaction sa = { .sa_handler = on_signal };
	struct agent *a;
	struct timespec t0;
	int i, taken;

	if (argc > 1 && !strcmp(argv[1], "status"))
		return cmd_status(argc - 1, argv + 1);
	for (i = 1; i < argc; i++) {
		const char *opt = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(opt, "--help") || !strcmp(opt, "-h"))
			return fputs(agent_usage, stdout), 0;
		if (!strcmp(opt, "--dotnet")) {
			o.dotnet = true;
			continue;
		}
		if (!strcmp(opt, "--quiet")) {
			o.quiet = true;
			continue;
		}
		if (!strcmp(opt, "--merge")) {
			o.merge = true;
			continue;
		}
		if (!strcmp(opt, "--clickhouse-shard")) {
			ea.ch.shard = true;
			continue;
		}
		taken = egress_option(&ea, opt, v);
		if (taken != 1) {
			/* once: --clickhouse adds a server, --otlp-header a header
			 * each time */
			if (taken)
				return 2;
			i++;
			continue;
		}
		if (strcmp(opt, "--providers") && strcmp(opt, "--buffering-mode") &&
		    strcmp(opt, "--block-timeout") &&
		    strcmp(opt, "--buffer-mb") && strcmp(opt, "--output-dir") && strcmp(opt, "--socket") &&
		    strcmp(opt, "--duration") && strcmp(opt, "--dotnet-providers") &&
		    strcmp(opt, "--kernel") && strcmp(opt, "--usdt") && strcmp(opt, "--sample") &&
		    strcmp(opt, "--rotate-mb") && strcmp(opt, "--rotate-s"))
			return tool_err("agent", "unknown option '%s' (see --help)", opt), 2;
		if (!v)
			return tool_err("agent", "option '%s' needs a value (see --help)", opt), 2;
		i++;
		if (!strcmp(opt, "--providers") || !strcmp(opt, "--dotnet-providers")) {
			struct rp_provider_config *p = NULL;
			uint32_t n = 0;
			char err[256];

			if (rp_providers_parse(v, &p, &n, err, sizeof(err)))
				return tool_err("agent", "%s: %s", opt, err), 2;
			rp_providers_free(p, n);
			if (!strcmp(opt, "--providers"))
				o.providers = v;
			else
				o.dotnet_providers = v;
		} else if (!strcmp(opt, "--kernel") || !strcmp(opt, "--usdt")) {
			char err[256];
			int bad = !strcmp(opt, "--kernel") ?
				  rp_capture_parse_kernel(&co, argv[i], err, sizeof(err)) :
				  rp_capture_parse_usdt(&co, argv[i], usdt, MAX_USDT, err, sizeof(err));

			if (bad)
				return tool_err("agent", "%s", err), 2;
			o.capture = &co;
		} else if (!strcmp(opt, "--sample")) {
			if (tool_parse_u64(v, 100000, &mb) || !mb)
				return tool_err("agent", "--sample takes a rate in Hz (1..100000), not '%s'", v), 2;
			o.sample_hz = (uint32_t)mb;
		} else if (!strcmp(opt, "--buffering-mode")) {
			if (rp_buffering_parse(v, &o.buffering))
				return tool_err("agent", "--buffering-mode must be drop or block, not '%s'", v), 2;
		} else if (!strcmp(opt, "--block-timeout")) {
			uint64_t ns;

			if (!strcmp(v, "0"))
				ns = 0;
			else if (tool_parse_duration(v, UINT32_MAX * 1000000ull, &ns) || ns < 1000000)
				return tool_err("agent", "--block-timeout must be a time of at least 1ms "
						"(500ms, 2s) or 0 for none, not '%s'", v), 2;
			o.block_timeout_ms = (uint32_t)(ns / 1000000);
		} else if (!strcmp(opt, "--buffer-mb")) {
			if (tool_parse_u64(v, 65536, &mb) || !mb)
				return tool_err("agent", "--buffer-mb must be 1 to 65536, not '%s'", v), 2;
			o.buffer_bytes = mb << 20;
		} else if (!strcmp(opt, "--rotate-mb")) {
			if (tool_parse_u64(v, 1u << 20, &mb) || !mb)
				return tool_err("agent", "--rotate-mb must be 1 to 1048576 (MiB), not '%s'", v), 2;
			o.rotate_bytes = mb << 20;
		} else if (!strcmp(opt, "--rotate-s")) {
			if (tool_parse_u64(v, 31u * 24 * 3600, &mb) || !mb)
				return tool_err("agent", "--rotate-s must be 1 to 2678400 (seconds), not '%s'", v), 2;
			o.rotate_s = (uint32_t)mb;
		} else if (!strcmp(opt, "--output-dir")) {
			if (!*v)
				return tool_err("agent", "--output-dir needs a directory"), 2;
			o.out_dir = v;
		} else if (!strcmp(opt, "--socket")) {
			if (!*v || strlen(v) >= 108)
				return tool_err("agent", "--socket needs a path of 1 to 107 bytes"), 2;
			o.socket_path = v;
		} else if (tool_parse_duration(v, UINT64_MAX, &duration) || !duration) {
			return tool_err("agent", "--duration must be a time such as 30s or 5m, not '%s'", v), 2;
		}
	}
	if (egress_finish(&o, &ea))
		return 2;
	if (!o.providers && !o.dotnet && !o.capture && !o.sample_hz)
		return tool_err("agent", "nothing to collect: give --providers, --dotnet, --kernel, "
				"--usdt or --sample (see --help)"), 2;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	a = agent_start(&o);
	if (!a)
		return 1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (!stop_signal) {
		struct timespec now, d = { 0, 50000000 };

		nanosleep(&d, NULL);
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (duration && (uint64_t)(now.tv_sec - t0.tv_sec) * 1000000000ull + (uint64_t)now.tv_nsec -
				(uint64_t)t0.tv_nsec >= duration)
			break;
	}
	return agent_stop(a);
}
