// SPDX-License-Identifier: MIT
/*
 * The agent's OTLP egress end to end (egress/egress_otlp.c): a real Aspire
 * dashboard as the OTLP/HTTP receiver (aspire_node.h), a real `ringpipe
 * agent --otlp`, real producers (agent_producer.c) on the host and in a
 * kubepods-style container. What the dashboard's telemetry API shows is
 * held against what the producers said they wrote: every event a log
 * record, on a resource with the process's host.name, process.pid,
 * container.id and k8s.pod.uid, its fields as attributes. Without the
 * dashboard these tests skip, with the reason, unless
 * RINGPIPE_REQUIRE_FLEET=1.
 */
#include <errno.h>
#include <inttypes.h>

#include "agent_helpers.h"
#include "aspire_node.h"
#include "fleet/clickhouse.h"
#include "helpers.h"
#include "host/identity.h"
#include "wire.h"

static struct th_aspire dash;
static struct th_ch_node node;	/* for the test of both sinks */
static struct th_agent_env agent;
static pid_t started[2];	/* producers a test started */
static char *made_cgroup;

/* Whatever a test started goes, also when an assertion ended it early */
static void otlp_fini(void)
{
	th_kill_started(started, 2);
	th_agent_env_kill(&agent);
	th_aspire_stop(&dash);
	th_ch_stop(&node);
	th_cgroup_remove(&made_cgroup);
}

static struct th_agent_env *agent_env(void)
{
	return th_agent_env_init(&agent);
}

static void agent_up_otlp(struct th_agent_env *e, const char *url, const char *host)
{
	char *more[] = { "--providers", "AgentTest", "--buffering-mode", "block", "--otlp",
			 (char *)url, "--otlp-header", "X-Test=ringpipe", "--host-id",
			 (char *)host, NULL };

	th_agent_up_argv(e, more);
}

/*
 * One resource's part of the dashboard's answer. The API gives OTLP/JSON,
 * one {"scopeLogs":[...],"resource":{...}} per resource; our records hold
 * no such text, so the answer is cut at each "{\"scopeLogs\":[".
 */
struct seen_resource {
	const char *start, *end;
	char pid[16], host[64], container[80], pod[40];
};

#define RESOURCE_START "{\"scopeLogs\":["

/* needle in [start, end), or NULL. Bounded: strstr() would look to the
 * answer's end (and ASan's strstr() measures all of it on every call);
 * and by memchr() to the next candidate, not memmem(): a sanitizer checks
 * the whole range memmem() is given on every call, which over an answer
 * of 12 MB and 44,000 hits took TSan past the test's timeout. */
static const char *find_in(const char *start, const char *end, const char *needle)
{
	size_t len = strlen(needle);
	const char *p = start;

	while (p && (size_t)(end - p) >= len) {
		if (!memcmp(p, needle, len))
			return p;
		p = memchr(p + 1, needle[0], (size_t)(end - p - 1));
	}
	return NULL;
}

static size_t count_in(const char *start, const char *end, const char *needle)
{
	size_t n = 0, len = strlen(needle);
	const char *p = start;

	while ((p = find_in(p, end, needle))) {
		n++;
		p += len;
	}
	return n;
}

/* The string value of attribute key in [start, end), "" if absent */
static void attr_of(const char *start, const char *end, const char *key, char *out, size_t len)
{
	const char *needle = th_fmt("{\"key\":\"%s\",\"value\":{\"stringValue\":\"", key);
	const char *p = find_in(start, end, needle), *q;

	out[0] = 0;
	if (!p)
		return;
	p += strlen(needle);
	q = find_in(p, end, "\"");
	if (q && (size_t)(q - p) < len) {
		memcpy(out, p, (size_t)(q - p));
		out[q - p] = 0;
	}
}

/* The resources of the answer whose process.pid is pid ("" : of any) */
static size_t resources_of(const char *json, const char *pid, struct seen_resource *r, size_t max)
{
	const char *all_end = json + strlen(json), *p = find_in(json, all_end, RESOURCE_START);
	size_t n = 0;

	while (p && n < max) {
		const char *next = find_in(p + 1, all_end, RESOURCE_START);
		struct seen_resource *s = &r[n];

		s->start = p;
		s->end = next ? next : all_end;
		/* resource attributes are last in each part */
		attr_of(s->start, s->end, "process.pid", s->pid, sizeof(s->pid));
		attr_of(s->start, s->end, "host.name", s->host, sizeof(s->host));
		attr_of(s->start, s->end, "container.id", s->container, sizeof(s->container));
		attr_of(s->start, s->end, "k8s.pod.uid", s->pod, sizeof(s->pod));
		if (!*pid || !strcmp(pid, s->pid))
			n++;
		p = next;
	}
	return n;
}

/* The one resource of pid, with the Tick records of our producer */
static struct seen_resource one_resource(const char *json, const char *pid)
{
	struct seen_resource r[4];
	size_t n = resources_of(json, pid, r, 4);

	cr_assert_eq(n, 1u, "%zu resources of pid %s, expected one", n, pid);
	return r[0];
}

static size_t ticks_of(const struct seen_resource *r)
{
	return count_in(r->start, r->end, "\"body\":{\"stringValue\":\"Tick\"}");
}

/* The pid of the resource in container id ("" : none) */
static void pid_of_container(const char *json, const char *id, char *pid, size_t len)
{
	struct seen_resource r[64];
	size_t n = resources_of(json, "", r, 64), i, found = 0;

	pid[0] = 0;
	for (i = 0; i < n; i++)
		if (!strcmp(r[i].container, id)) {
			snprintf(pid, len, "%s", r[i].pid);
			found++;
		}
	cr_assert_eq(found, 1u, "%zu resources in container %s, expected one", found, id);
}

Test(otlp, every_event_is_a_record_on_its_process_and_container, .timeout = 240,
     .fini = otlp_fini)
{
	static const char id[] = "7a1e2f3a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d3e4f5b";
	const char *mnt;
	struct th_agent_env *e;
	struct bytebuf logs = { 0 };
	struct seen_resource host_r, pod_r;
	struct th_said host_said, pod_said;
	char uid[37], *cg, pod_pid[16], *host_pid;

	TH_NEED_ASPIRE();
	mnt = th_need_container();
	th_aspire_init(&dash);
	th_aspire_start(&dash);
	e = agent_env();
	agent_up_otlp(e, dash.otlp_url, "otlp-a");
	cg = th_pod_container_make(mnt, id, uid, &made_cgroup);
	/* the host's file is one of 44,000 events, 4.5 MB as OTLP: more than
	 * a receiver takes in one request (the Aspire dashboard refuses 6 MB) */
	th_host_and_pod_producers(e, cg, started, 22000, 1500, &host_said, &pod_said);
	/* the agent ships what is left when it stops */
	cr_assert_eq(th_agent_down(e), 0, "the agent did not stop cleanly");

	th_aspire_logs(&dash, &logs);
	/* the host's producer: every event a record, on its own resource */
	host_pid = th_fmt("%d", host_said.pid);
	host_r = one_resource(th_text(&logs), host_pid);
	cr_assert_eq(ticks_of(&host_r), 44000u, "records of the host's producer");
	cr_assert_str_eq(host_r.host, "otlp-a");
	cr_assert_str_eq(host_r.container, "", "the host's producer is in no container");
	cr_assert_str_eq(host_r.pod, "");
	cr_assert_eq(count_in(host_r.start, host_r.end, "\"scope\":{\"name\":\"AgentTest\"}"), 1u,
		     "one scope, the provider");
	cr_assert_eq(count_in(host_r.start, host_r.end, "\"severityNumber\":9,"), 44000u,
		     "level 4 (Informational) is INFO, 9");
	/* the fields: each thread counted 0..21999, each value once per thread */
	cr_assert_eq(count_in(host_r.start, host_r.end,
			      "{\"key\":\"N\",\"value\":{\"stringValue\":\"21999\"}}"), 2u);
	cr_assert_eq(count_in(host_r.start, host_r.end,
			      "{\"key\":\"N\",\"value\":{\"stringValue\":\"0\"}}"), 2u);
	cr_assert_eq(count_in(host_r.start, host_r.end,
			      "{\"key\":\"Thread\",\"value\":{\"stringValue\":\"1\"}}"), 22000u);
	cr_assert_eq(count_in(host_r.start, host_r.end, "\"EventsLost\""), 0u);
	/* the container's: on its host pid, with its container and pod */
	pid_of_container(th_text(&logs), id, pod_pid, sizeof(pod_pid));
	cr_assert(strcmp(pod_pid, "1") && strcmp(pod_pid, host_pid),
		  "the container's producer is on its host pid, not %s", pod_pid);
	pod_r = one_resource(th_text(&logs), pod_pid);
	cr_assert_eq(ticks_of(&pod_r), 3000u, "records of the container's producer");
	cr_assert_str_eq(pod_r.host, "otlp-a");
	cr_assert_str_eq(pod_r.pod, uid);
	cr_assert_eq(count_in(pod_r.start, pod_r.end,
			      "{\"key\":\"N\",\"value\":{\"stringValue\":\"1499\"}}"), 2u);
	bb_free(&logs);
}

Test(otlp, a_receiver_that_is_down_gets_everything_once_it_is_up, .timeout = 240,
     .fini = otlp_fini)
{
	struct th_agent_env *e;
	struct bytebuf logs = { 0 };
	struct seen_resource r;
	struct th_said said;
	pid_t p;

	TH_NEED_ASPIRE();
	/* ports chosen, nothing listening on them yet */
	th_aspire_init(&dash);
	e = agent_env();
	agent_up_otlp(e, dash.otlp_url, "otlp-b");
	p = started[0] = th_producer_start(e, "", 1, 3000, th_fmt("%s/p.json", e->dir));
	said = th_producer_wait(p, th_fmt("%s/p.json", e->dir), 60000);
	started[0] = 0;
	cr_assert_eq(said.written, 3000u);
	th_status_wait(e, "\"state\":\"retrying\"", 60000);
	th_status_wait(e, "Connection refused", 60000);
	th_aspire_start(&dash);
	th_status_wait(e, "\"state\":\"ok\"", 60000);
	th_status_wait(e, "\"spool_batches\":0,", 60000);
	cr_assert_eq(th_agent_down(e), 0, "the agent did not stop cleanly");
	th_aspire_logs(&dash, &logs);
	r = one_resource(th_text(&logs), th_fmt("%d", said.pid));
	cr_assert_eq(ticks_of(&r), 3000u, "each event once, after the outage");
	cr_assert_str_eq(r.host, "otlp-b");
	bb_free(&logs);
}

/* OTLP over https (the dashboard's certificate from the test's CA, given
 * with --cacert): every event arrives, and the bearer token the receiver
 * is sent never crosses loopback in the clear */
Test(otlp, over_https_the_bearer_token_crosses_encrypted, .timeout = 240, .fini = otlp_fini)
{
	char *ca, token[48];
	char *more[] = { "--providers", "AgentTest", "--buffering-mode", "block", "--otlp", NULL,
			 "--otlp-header", NULL, "--host-id", "otlp-tls", "--cacert", NULL, NULL };
	struct th_agent_env *e;
	struct bytebuf logs = { 0 }, wire_bytes = { 0 };
	struct seen_resource r;
	struct th_said said;
	struct th_wire w;
	pid_t p;

	TH_NEED_ASPIRE();
	th_aspire_init(&dash);
	th_aspire_use_tls(&dash);
	th_aspire_start(&dash);
	snprintf(token, sizeof(token), "tok-%d-%ld", getpid(), (long)time(NULL));
	more[5] = dash.otlp_url;
	more[7] = th_fmt("Authorization=Bearer %s", token);
	more[11] = ca = th_tls_file("ca.pem");
	th_wire_open(&w, dash.otlp_port);
	e = agent_env();
	th_agent_up_argv(e, more);
	p = started[0] = th_producer_start(e, "", 1, 3000, th_fmt("%s/p.json", e->dir));
	said = th_producer_wait(p, th_fmt("%s/p.json", e->dir), 60000);
	started[0] = 0;
	cr_assert_eq(said.written, 3000u);
	th_status_wait(e, "\"files_pending\":0,", 60000);
	th_status_wait(e, "\"spool_batches\":0,", 60000);
	cr_assert_eq(th_agent_down(e), 0, "the agent did not stop cleanly");
	th_aspire_logs(&dash, &logs);
	r = one_resource(th_text(&logs), th_fmt("%d", said.pid));
	cr_assert_eq(ticks_of(&r), 3000u, "each event once, over https");
	th_wire_read(&w, &wire_bytes);
	cr_assert_not(th_has_bytes(&wire_bytes, token), "the token crossed in the clear");
	cr_assert_not(th_has_bytes(&wire_bytes, "otlp-tls"), "a record crossed in the clear");
	free(ca);
	bb_free(&logs);
	bb_free(&wire_bytes);
}

Test(otlp, a_refused_batch_is_counted_not_sent_again, .timeout = 120, .fini = otlp_fini)
{
	struct th_agent_env *e;
	struct bytebuf st = { 0 }, logs = { 0 };
	struct th_said said;
	pid_t p;

	TH_NEED_ASPIRE();
	th_aspire_init(&dash);
	th_aspire_start(&dash);
	e = agent_env();
	/* the dashboard's frontend, not its OTLP port, answers POST /v1/logs
	 * with 401: a 4xx that sending again would not change */
	agent_up_otlp(e, th_fmt("http://127.0.0.1:%u", dash.ui_port), "otlp-c");
	p = started[0] = th_producer_start(e, "", 1, 100, th_fmt("%s/p.json", e->dir));
	said = th_producer_wait(p, th_fmt("%s/p.json", e->dir), 60000);
	started[0] = 0;
	cr_assert_eq(said.written, 100u);
	th_status_wait(e, "\"batches_rejected\":", 60000);
	th_status_wait(e, "\"files_pending\":0,", 60000);
	th_status_wait(e, "\"spool_batches\":0,", 60000);
	cr_assert_eq(agent_status_query(e->sock, true, &st), 0);
	cr_assert(strstr(th_text(&st), "\"retries\":0,"), "a 4xx is not retried: %s",
		  th_text(&st));
	cr_assert(!strstr(th_text(&st), "\"records_rejected\":0,"), "%s", th_text(&st));
	cr_assert_eq(th_agent_down(e), 0, "the agent did not stop cleanly");
	/* the producer's file was one batch, refused whole (the agent's own
	 * trace may have been another) */
	cr_assert_eq(th_read_file(th_fmt("%s/agent.log", e->dir), &st), 0);
	cr_assert(strstr(th_text(&st), "(100 records) refused with 401"), "%s", th_text(&st));
	th_aspire_logs(&dash, &logs);
	cr_assert(strstr(th_text(&logs), "\"totalCount\":0,"), "%s", th_text(&logs));
	bb_free(&st);
	bb_free(&logs);
}

/* The sum of the ringpipe.loss.count attributes in r */
static uint64_t lost_in(const struct seen_resource *r)
{
	static const char key[] = "{\"key\":\"ringpipe.loss.count\",\"value\":{\"stringValue\":\"";
	const char *p = r->start;
	uint64_t n = 0;

	while ((p = find_in(p, r->end, key))) {
		p += strlen(key);
		n += strtoull(p, NULL, 10);
	}
	return n;
}

Test(otlp, what_a_full_spool_gave_up_arrives_as_loss_records, .timeout = 240,
     .fini = otlp_fini)
{
	struct th_agent_env *e;
	struct bytebuf logs = { 0 };
	struct seen_resource r;
	struct th_said said;
	uint64_t records, lost;
	char *more[] = { "--providers", "AgentTest", "--buffering-mode", "drop", "--buffer-mb",
			 "1", "--spool-mb", "1", "--otlp", NULL, "--host-id", "otlp-d", NULL };
	pid_t p;

	TH_NEED_ASPIRE();
	/* the receiver down, a 1 MiB spool: the Drop session's files that
	 * find it full are given up, their events counted lost */
	th_aspire_init(&dash);
	e = agent_env();
	more[9] = dash.otlp_url;
	th_agent_up_argv(e, more);
	p = started[0] = th_producer_start_more(e, "", 2, 40000, th_fmt("paced '%s/progress'", e->dir),
					     th_fmt("%s/p.json", e->dir));
	said = th_producer_wait(p, th_fmt("%s/p.json", e->dir), 120000);
	started[0] = 0;
	th_status_wait(e, "\"full\":true", 60000);
	th_aspire_start(&dash);
	th_status_wait(e, "\"full\":false", 60000);
	th_status_wait(e, "\"files_pending\":0,", 60000);
	th_status_wait(e, "\"spool_batches\":0,", 60000);
	cr_assert_eq(th_agent_down(e), 0, "the agent did not stop cleanly");
	th_aspire_logs(&dash, &logs);
	/* the loss records are on the process's resource too */
	r = one_resource(th_text(&logs), th_fmt("%d", said.pid));
	records = ticks_of(&r);
	lost = lost_in(&r);
	cr_log_info("%" PRIu64 " records, %" PRIu64 " counted lost, of %llu written and %llu "
		    "dropped", records, lost, said.written, said.dropped);
	cr_assert(find_in(r.start, r.end, "{\"key\":\"ringpipe.loss.reason\",\"value\":"
				  "{\"stringValue\":\"egress_full\"}}") && lost > 0,
		  "no egress_full loss record (%" PRIu64 " records)", records);
	cr_assert_eq(count_in(r.start, r.end, "\"scope\":{\"name\":\"ringpipe-agent\"}"), 1u);
	cr_assert_eq(records + lost, said.written + said.dropped,
		     "%" PRIu64 " records and %" PRIu64 " lost, the producer tried %llu", records,
		     lost, said.written + said.dropped);
	bb_free(&logs);
}

Test(otlp, beside_clickhouse_both_get_every_event, .timeout = 240, .fini = otlp_fini)
{
	struct th_agent_env *e;
	struct bytebuf logs = { 0 }, out = { 0 };
	struct seen_resource r;
	struct ch_client c;
	struct ch_target t;
	struct th_said said;
	struct stat st;
	char err[512], line[64];
	pid_t p;

	TH_NEED_ASPIRE();
	TH_NEED_CLICKHOUSE();
	th_aspire_init(&dash);
	th_aspire_start(&dash);
	th_ch_init(&node);
	th_ch_start(&node, NULL);
	cr_assert_eq(th_tool_run(th_fmt("fleet init --clickhouse '%s'", node.url), &out), 0,
		     "fleet init: %s", th_text(&out));
	e = agent_env();
	{
		char *more[] = { "--providers", "AgentTest", "--clickhouse", node.url,
				 "--clickhouse-dialect", "legacy", "--otlp",
				 /* the whole path, as given, not a base */
				 th_fmt("%s/v1/logs", dash.otlp_url),
				 "--host-id", "otlp-both", NULL };

		th_agent_up_argv(e, more);
	}
	p = started[0] = th_producer_start(e, "", 2, 2500, th_fmt("%s/p.json", e->dir));
	said = th_producer_wait(p, th_fmt("%s/p.json", e->dir), 60000);
	started[0] = 0;
	cr_assert_eq(said.written, 5000u);
	cr_assert_eq(th_agent_down(e), 0, "the agent did not stop cleanly");
	/* each sink with a spool of its own */
	cr_assert_eq(stat(th_fmt("%s/spool", e->out), &st), 0);
	cr_assert_eq(stat(th_fmt("%s/spool-otlp", e->out), &st), 0);
	th_aspire_logs(&dash, &logs);
	r = one_resource(th_text(&logs), th_fmt("%d", said.pid));
	cr_assert_eq(ticks_of(&r), 5000u, "records in the dashboard");
	cr_assert_eq(ch_target_parse(&t, node.url, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(ch_client_init(&c, &t, 60000), 0);
	cr_assert_eq(ch_query_line(&c, th_fmt("SELECT count() FROM ringpipe.events WHERE host = "
					      "'otlp-both' AND pid = %d", said.pid),
				   line, sizeof(line), err, sizeof(err)), 0, "%s", err);
	cr_assert_str_eq(line, "5000", "rows in ClickHouse");
	ch_client_free(&c);
	bb_free(&out);
	bb_free(&logs);
}
