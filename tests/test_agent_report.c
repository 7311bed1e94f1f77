// SPDX-License-Identifier: MIT
/*
 * ringpipe report DIR: the summary of an agent output directory. The
 * directory is built by hand with the nettrace writer (process traces with
 * known counts and a sequence gap, and agent traces whose Ringpipe-Agent
 * payloads are encoded here byte by byte, as the agent lays them out), so
 * every number the real tool prints is known in advance.
 */
#include <inttypes.h>
#include <string.h>

#include "helpers.h"
#include "nettrace.h"

#define C1 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define C2 "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
#define POD1 "5f2b7c1e-0000-4a4a-8b8b-000000000001"
#define POD2 "5f2b7c1e-0000-4a4a-8b8b-000000000002"
#define AGENT1 "ringpipe-agent_4242_20240501_101500.nettrace"
#define AGENT2 "ringpipe-agent_4343_20240501_111500.nettrace"

static const struct nt_field tick_fields[] = { { "V", NT_U32, 0, 0, NULL } };
static const struct nt_event_desc tick_desc = {
	"Test-Service", NULL, 1, "Tick", 0, 0, 4, 0, 1, tick_fields
};

/* The agent's three events, field for field as agent.c declares them. */
static const struct nt_field process_fields[] = {
	{ "Pid", NT_U32, 0, 0, NULL }, { "NsPids", NT_STRING, 0, 0, NULL },
	{ "StartTime", NT_U64, 0, 0, NULL }, { "Comm", NT_STRING, 0, 0, NULL },
	{ "CgroupId", NT_U64, 0, 0, NULL }, { "CgroupPath", NT_STRING, 0, 0, NULL },
	{ "ContainerId", NT_STRING, 0, 0, NULL }, { "PodUid", NT_STRING, 0, 0, NULL },
	{ "Runtime", NT_STRING, 0, 0, NULL }, { "QosClass", NT_STRING, 0, 0, NULL },
	{ "Uid", NT_U32, 0, 0, NULL }, { "Source", NT_STRING, 0, 0, NULL },
	{ "TraceFile", NT_STRING, 0, 0, NULL },
};
static const struct nt_field end_fields[] = {
	{ "Pid", NT_U32, 0, 0, NULL }, { "StartTime", NT_U64, 0, 0, NULL },
	{ "How", NT_STRING, 0, 0, NULL }, { "ExitStatus", NT_I32, 0, 0, NULL },
	{ "Events", NT_U64, 0, 0, NULL }, { "LostFull", NT_U64, 0, 0, NULL },
	{ "LostAborted", NT_U64, 0, 0, NULL }, { "LostOutput", NT_U64, 0, 0, NULL },
	{ "LostOther", NT_U64, 0, 0, NULL }, { "Corrupt", NT_U64, 0, 0, NULL },
};
static const struct nt_field container_fields[] = {
	{ "ContainerId", NT_STRING, 0, 0, NULL }, { "PodUid", NT_STRING, 0, 0, NULL },
	{ "Runtime", NT_STRING, 0, 0, NULL }, { "QosClass", NT_STRING, 0, 0, NULL },
	{ "CgroupPath", NT_STRING, 0, 0, NULL },
};
static const struct nt_event_desc process_desc = {
	"Ringpipe-Agent", NULL, 1, "Process", 0, 0, 4, 0, 13, process_fields
};
static const struct nt_event_desc end_desc = {
	"Ringpipe-Agent", NULL, 2, "ProcessEnd", 0, 0, 4, 0, 10, end_fields
};
static const struct nt_event_desc container_desc = {
	"Ringpipe-Agent", NULL, 3, "Container", 0, 0, 4, 0, 5, container_fields
};

/* One trace being written into a directory. */
struct tw {
	struct nt_fd_sink sink;
	struct nt_writer *w;
	uint32_t pid, seq;
	uint64_t ts;
	int fd;
};

static void tw_open(struct tw *t, const char *dir, const char *name, uint32_t pid,
		    uint64_t unix_s)
{
	struct nt_writer_opts o = {
		.sz = sizeof(o), .format = NT_FORMAT_V6, .pid = pid, .nr_cpus = 2,
		.pointer_size = 8, .sync_ticks = 10, .tick_freq = 1000000,
		.sync_unix_ns = unix_s * 1000000000ull,
	};
	char *path;

	cr_assert(asprintf(&path, "%s/%s", dir, name) > 0);
	t->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	cr_assert(t->fd >= 0, "%s: %s", path, strerror(errno));
	free(path);
	nt_fd_sink_init(&t->sink, t->fd);
	t->w = nt_writer_new(&t->sink.base, &o);
	cr_assert_not_null(t->w, "nt_writer_new: %s", strerror(errno));
	t->pid = pid;
	t->seq = 1;
	t->ts = 100;
}

/* The next event of the trace's one thread, seq advanced by 1 + skip (the
 * skipped numbers are events the reader counts as EventsLost). */
static void tw_event(struct tw *t, uint32_t meta, const void *p, size_t n, uint32_t skip)
{
	struct nt_event ev = { .meta_id = meta, .tid = t->pid, .payload = p,
			       .payload_len = (uint32_t)n, .sorted = true };

	t->seq += 1 + skip;
	ev.seq = t->seq;
	ev.ts = t->ts++;
	cr_assert_eq(nt_writer_event(t->w, &ev), 0);
}

static void tw_close(struct tw *t)
{
	cr_assert_eq(nt_writer_finish(t->w, t->ts + 10), 0);
	nt_writer_free(t->w);
	cr_assert_eq(close(t->fd), 0);
}

/* A process trace: `events` Tick events, with `gap` numbers skipped after
 * the third. */
static void process_file(const char *dir, const char *name, uint32_t pid, unsigned int events,
			 uint32_t gap)
{
	struct tw t;
	uint32_t id, i;

	tw_open(&t, dir, name, pid, 1714550000);
	cr_assert_eq(nt_writer_define(t.w, &tick_desc, &id), 0);
	for (i = 0; i < events; i++)
		tw_event(&t, id, &i, 4, i == 3 ? gap : 0);
	tw_close(&t);
}

/* Payload encoders, by hand: little-endian numbers, UTF-16LE strings with
 * a NUL unit (ASCII here, so each unit is the byte and a zero). */
static void put_u32(struct bytebuf *b, uint32_t v)
{
	uint8_t x[4] = { (uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24) };

	bb_append(b, x, 4);
}

static void put_u64(struct bytebuf *b, uint64_t v)
{
	put_u32(b, (uint32_t)v);
	put_u32(b, (uint32_t)(v >> 32));
}

static void put_str(struct bytebuf *b, const char *s)
{
	for (;; s++) {
		uint8_t u[2] = { (uint8_t)*s, 0 };

		bb_append(b, u, 2);
		if (!*s)
			break;
	}
}

struct agent_ids {
	uint32_t process, end, container;
};

static void agent_open(struct tw *t, const char *dir, const char *name, uint32_t pid,
		       uint64_t unix_s, struct agent_ids *ids)
{
	tw_open(t, dir, name, pid, unix_s);
	cr_assert_eq(nt_writer_define(t->w, &process_desc, &ids->process), 0);
	cr_assert_eq(nt_writer_define(t->w, &end_desc, &ids->end), 0);
	cr_assert_eq(nt_writer_define(t->w, &container_desc, &ids->container), 0);
}

static void agent_process(struct tw *t, const struct agent_ids *ids, uint32_t pid, uint64_t start,
			  const char *comm, const char *cid, const char *pod, const char *runtime,
			  const char *qos, const char *source, const char *file)
{
	struct bytebuf b = { 0 };
	char nspids[16];

	snprintf(nspids, sizeof(nspids), "%u", pid);
	put_u32(&b, pid);
	put_str(&b, nspids);
	put_u64(&b, start);
	put_str(&b, comm);
	put_u64(&b, 4000 + pid);
	put_str(&b, *cid ? "/kubepods.slice/x.scope" : "/system.slice/x.service");
	put_str(&b, cid);
	put_str(&b, pod);
	put_str(&b, runtime);
	put_str(&b, qos);
	put_u32(&b, 1000);
	put_str(&b, source);
	put_str(&b, file);
	cr_assert(!b.oom);
	tw_event(t, ids->process, b.p, b.len, 0);
	bb_free(&b);
}

static void agent_end(struct tw *t, const struct agent_ids *ids, uint32_t pid, uint64_t start,
		      const char *how, int32_t status, uint64_t events)
{
	struct bytebuf b = { 0 };
	int i;

	put_u32(&b, pid);
	put_u64(&b, start);
	put_str(&b, how);
	put_u32(&b, (uint32_t)status);
	put_u64(&b, events);
	for (i = 0; i < 5; i++)
		put_u64(&b, 0);
	cr_assert(!b.oom);
	tw_event(t, ids->end, b.p, b.len, 0);
	bb_free(&b);
}

static void agent_container(struct tw *t, const struct agent_ids *ids, const char *cid,
			    const char *pod, const char *runtime, const char *qos)
{
	struct bytebuf b = { 0 };

	put_str(&b, cid);
	put_str(&b, pod);
	put_str(&b, runtime);
	put_str(&b, qos);
	put_str(&b, "/kubepods.slice/x.scope");
	cr_assert(!b.oom);
	tw_event(t, ids->container, b.p, b.len, 0);
	bb_free(&b);
}

/*
 * What an agent that restarted once leaves behind:
 *   web_1001_5000.nettrace      7 events   C1, ended "stopped" (agent 1)
 *   web_1001_5000.2.nettrace    3 events   C1, rejoined the second agent, still running
 *   worker_1002_6000.nettrace   5 events, EventsLost 3   C1, "killed by signal 9"
 *   dotnet-api-2-1005-9000.nettrace  6 events   C2 (.NET, named by its part file)
 *   cron_1003_7000.nettrace     4 events   outside any container (agent 2)
 *   lonely_1004_8000.nettrace   2 events   no Process event anywhere
 * plus a hidden .part stream still being received, which is not a trace yet.
 */
static char *build_dir(void)
{
	char *dir = th_tmpdir(), *part;
	struct agent_ids ids;
	struct tw t;

	cr_assert_not_null(dir);
	process_file(dir, "web_1001_5000.nettrace", 1001, 7, 0);
	process_file(dir, "web_1001_5000.2.nettrace", 1001, 3, 0);
	process_file(dir, "worker_1002_6000.nettrace", 1002, 5, 3);
	process_file(dir, "dotnet-api-2-1005-9000.nettrace", 1005, 6, 0);
	process_file(dir, "cron_1003_7000.nettrace", 1003, 4, 0);
	process_file(dir, "lonely_1004_8000.nettrace", 1004, 2, 0);
	cr_assert(asprintf(&part, "%s/.dotnet-1006-9100.part", dir) > 0);
	cr_assert_eq(th_write_file(part, "half a stream", 13), 0);
	free(part);

	agent_open(&t, dir, AGENT1, 4242, 1714550000, &ids);
	agent_container(&t, &ids, C1, POD1, "containerd", "burstable");
	agent_process(&t, &ids, 1001, 5000, "web", C1, POD1, "containerd", "burstable", "ringpipe",
		      "/var/lib/ringpipe/out/web_1001_5000.nettrace");
	agent_process(&t, &ids, 1002, 6000, "worker", C1, POD1, "containerd", "burstable",
		      "ringpipe", "/var/lib/ringpipe/out/worker_1002_6000.nettrace");
	/* the runtime knew no QoS here: the Container event's is used */
	agent_container(&t, &ids, C2, POD2, "docker", "besteffort");
	agent_process(&t, &ids, 1005, 9000, "api-2", C2, POD2, "docker", "", "dotnet",
		      "/var/lib/ringpipe/out/.dotnet-1005-9000.part");
	agent_end(&t, &ids, 1002, 6000, "killed by signal 9", -1, 5);
	agent_end(&t, &ids, 1001, 5000, "stopped", 0, 7);
	agent_end(&t, &ids, 1005, 9000, "exited", -1, 6);
	tw_close(&t);

	agent_open(&t, dir, AGENT2, 4343, 1714553600, &ids);
	agent_container(&t, &ids, C1, POD1, "containerd", "burstable");
	agent_process(&t, &ids, 1001, 5000, "web", C1, POD1, "containerd", "burstable", "ringpipe",
		      "/var/lib/ringpipe/out/web_1001_5000.2.nettrace");
	agent_process(&t, &ids, 1003, 7000, "cron", "", "", "", "", "ringpipe",
		      "/var/lib/ringpipe/out/cron_1003_7000.nettrace");
	agent_end(&t, &ids, 1003, 7000, "exited with status 3", 3, 4);
	tw_close(&t);
	return dir;
}

static void assert_has(const char *out, const char *want)
{
	cr_assert(strstr(out, want), "expected\n%s\nin\n%s", want, out);
}

#define PROC(pid, start, comm, cid, pod, runtime, qos, source, tagged, how, status, events, \
	     lost, file)							\
	"{\"pid\":" pid ",\"start_time\":" start ",\"comm\":" comm ",\"container_id\":" cid \
	",\"pod_uid\":" pod ",\"runtime\":" runtime ",\"qos\":" qos ",\"source\":" source \
	",\"tagged\":" tagged ",\"how\":" how ",\"exit_status\":" status ",\"events\":" events \
	",\"lost\":" lost ",\"file\":\"" file "\",\"error\":null}"

static void assert_processes(const char *o)
{
	assert_has(o, PROC("1001", "5000", "\"web\"", "\"" C1 "\"", "\"" POD1 "\"",
			   "\"containerd\"", "\"burstable\"", "\"ringpipe\"", "true", "\"stopped\"",
			   "0", "7", "0", "web_1001_5000.nettrace"));
	assert_has(o, PROC("1001", "5000", "\"web\"", "\"" C1 "\"", "\"" POD1 "\"",
			   "\"containerd\"", "\"burstable\"", "\"ringpipe\"", "true", "null", "null",
			   "3", "0", "web_1001_5000.2.nettrace"));
	assert_has(o, PROC("1002", "6000", "\"worker\"", "\"" C1 "\"", "\"" POD1 "\"",
			   "\"containerd\"", "\"burstable\"", "\"ringpipe\"", "true",
			   "\"killed by signal 9\"", "-1", "5", "3", "worker_1002_6000.nettrace"));
	assert_has(o, PROC("1003", "7000", "\"cron\"", "null", "null", "null", "null",
			   "\"ringpipe\"", "true", "\"exited with status 3\"", "3", "4", "0",
			   "cron_1003_7000.nettrace"));
	assert_has(o, PROC("1004", "8000", "\"lonely\"", "null", "null", "null", "null",
			   "\"ringpipe\"", "false", "null", "null", "2", "0",
			   "lonely_1004_8000.nettrace"));
	assert_has(o, PROC("1005", "9000", "\"api-2\"", "\"" C2 "\"", "\"" POD2 "\"", "\"docker\"",
			   "null", "\"dotnet\"", "true", "\"exited\"", "-1", "6", "0",
			   "dotnet-api-2-1005-9000.nettrace"));
	cr_assert_null(strstr(o, ".part"), "the part stream is not a trace: %s", o);
	/* the agent's own traces are not processes */
	cr_assert_null(strstr(o, "\"file\":\"" AGENT1 "\",\"error\""), "%s", o);
	cr_assert_null(strstr(o, "\"file\":\"" AGENT2 "\",\"error\""), "%s", o);
}

static void assert_containers(const char *o)
{
	/* web's two joins are one process; worker's gap is C1's EventsLost */
	assert_has(o, "\"containers\":[{\"container_id\":\"" C1 "\",\"pod_uid\":\"" POD1
		   "\",\"runtime\":\"containerd\",\"qos\":\"burstable\",\"processes\":2,"
		   "\"events\":15,\"lost\":3},{\"container_id\":\"" C2 "\",\"pod_uid\":\"" POD2
		   "\",\"runtime\":\"docker\",\"qos\":\"besteffort\",\"processes\":1,"
		   "\"events\":6,\"lost\":0}]");
}

Test(agent_report, json_counts_every_process_and_container, .timeout = 60)
{
	char *dir = build_dir(), *args;
	struct bytebuf out = { 0 };
	const char *o;

	cr_assert(asprintf(&args, "report '%s' --json", dir) > 0);
	cr_assert_eq(th_tool_run(args, &out), 0, "%s", (char *)out.p);
	o = (const char *)out.p;
	cr_assert_eq(o[0], '{', "one JSON object: %s", o);
	cr_assert_eq(strchr(o, '\n'), o + out.len - 1, "one line: %s", o);
	assert_has(o, "\"processes\":[{\"pid\":1001,");
	assert_processes(o);
	assert_containers(o);
	assert_has(o, "\"totals\":{\"files\":6,\"processes\":5,\"containers\":2,\"untagged\":1,"
		   "\"events\":27,\"lost\":3,\"errors\":0,\"agent_traces\":2}}\n");
	assert_has(o, "\"agent_traces\":[{\"file\":\"" AGENT1 "\",\"events\":8,\"error\":null},"
		   "{\"file\":\"" AGENT2 "\",\"events\":4,\"error\":null}]");
	free(args);
	bb_free(&out);
	th_rmdir(dir);
}

/* The whitespace-separated words of the line that ends with `file`. */
static int row_words(const char *out, const char *file, char words[16][96])
{
	const char *p = out, *eol;
	size_t flen = strlen(file);
	int n = 0;

	for (;; p = eol + 1) {
		eol = strchr(p, '\n');
		cr_assert_not_null(eol, "no row for %s in\n%s", file, out);
		if ((size_t)(eol - p) > flen && !memcmp(eol - flen, file, flen) &&
		    eol[-(long)flen - 1] == ' ')
			break;
	}
	while (p < eol && n < 16) {
		size_t k = 0;

		while (p < eol && *p == ' ')
			p++;
		while (p < eol && *p != ' ' && k < 95)
			words[n][k++] = *p++;
		words[n][k] = 0;
		if (k)
			n++;
	}
	return n;
}

static void assert_row(const char *out, const char *file, const char *pid, const char *comm,
		       const char *cid, const char *pod, const char *source, const char *events,
		       const char *lost)
{
	char w[16][96];
	int n = row_words(out, file, w);

	cr_assert(n >= 9, "row of %s: %d words\n%s", file, n, out);
	cr_assert_str_eq(w[0], pid, "%s\n%s", file, out);
	cr_assert_str_eq(w[1], comm, "%s\n%s", file, out);
	cr_assert_str_eq(w[2], cid, "%s\n%s", file, out);
	cr_assert_str_eq(w[3], pod, "%s\n%s", file, out);
	cr_assert_str_eq(w[4], source, "%s\n%s", file, out);
	cr_assert_str_eq(w[n - 3], events, "%s\n%s", file, out);
	cr_assert_str_eq(w[n - 2], lost, "%s\n%s", file, out);
}

Test(agent_report, text_table_per_process_and_container, .timeout = 60)
{
	char *dir = build_dir(), *args;
	struct bytebuf out = { 0 };
	const char *o;

	cr_assert(asprintf(&args, "report '%s'", dir) > 0);
	cr_assert_eq(th_tool_run(args, &out), 0, "%s", (char *)out.p);
	o = (const char *)out.p;
	/* container ids are cut to 12 characters in the table */
	cr_assert_null(strstr(o, C1), "%s", o);
	assert_row(o, "web_1001_5000.nettrace", "1001", "web", "0123456789ab", POD1, "ringpipe",
		   "7", "0");
	assert_row(o, "web_1001_5000.2.nettrace", "1001", "web", "0123456789ab", POD1, "ringpipe",
		   "3", "0");
	assert_row(o, "worker_1002_6000.nettrace", "1002", "worker", "0123456789ab", POD1,
		   "ringpipe", "5", "3");
	assert_row(o, "cron_1003_7000.nettrace", "1003", "cron", "-", "-", "ringpipe", "4", "0");
	assert_row(o, "lonely_1004_8000.nettrace", "1004", "lonely", "-", "-", "ringpipe", "2",
		   "0");
	assert_row(o, "dotnet-api-2-1005-9000.nettrace", "1005", "api-2", "fedcba987654", POD2,
		   "dotnet", "6", "0");
	assert_has(o, "killed by signal 9");
	assert_has(o, "exited with status 3");
	assert_has(o, "  0123456789ab  " POD1 "  containerd    burstable             2          15"
		   "         3\n");
	assert_has(o, "  fedcba987654  " POD2 "  docker        besteffort            1           6"
		   "         0\n");
	assert_has(o, "total       5 processes in 6 files (1 untagged), 2 containers, 27 events, "
		   "3 lost (EventsLost)\n");
	free(args);
	bb_free(&out);
	th_rmdir(dir);
}

Test(agent_report, an_unreadable_file_is_listed_and_fails_the_run, .timeout = 60)
{
	char *dir = build_dir(), *args, *path;
	struct bytebuf out = { 0 };
	const char *o;

	cr_assert(asprintf(&path, "%s/broken_1007_9200.nettrace", dir) > 0);
	cr_assert_eq(th_write_file(path, "Nettrace but not really a trace", 31), 0);
	free(path);
	cr_assert(asprintf(&args, "report '%s' --json", dir) > 0);
	cr_assert_eq(th_tool_run(args, &out), 1, "%s", (char *)out.p);
	o = (const char *)out.p;
	/* everything else is still there, counted as before */
	assert_processes(o);
	assert_containers(o);
	assert_has(o, "{\"pid\":1007,\"start_time\":9200,\"comm\":\"broken\",\"container_id\":null,");
	assert_has(o, "\"file\":\"broken_1007_9200.nettrace\",\"error\":\"");
	assert_has(o, "\"totals\":{\"files\":7,\"processes\":6,\"containers\":2,\"untagged\":2,"
		   "\"events\":27,\"lost\":3,\"errors\":1,\"agent_traces\":2}}\n");
	/* and after the summary, the reason on stderr */
	assert_has(o, "}}\nringpipe report: ");
	assert_has(o, "/broken_1007_9200.nettrace: ");
	free(args);

	out.len = 0;
	cr_assert(asprintf(&args, "report '%s'", dir) > 0);
	cr_assert_eq(th_tool_run(args, &out), 1, "%s", (char *)out.p);
	o = (const char *)out.p;
	assert_row(o, "worker_1002_6000.nettrace", "1002", "worker", "0123456789ab", POD1,
		   "ringpipe", "5", "3");
	assert_row(o, "broken_1007_9200.nettrace", "1007", "broken", "-", "-", "ringpipe", "0",
		   "0");
	assert_has(o, "broken_1007_9200.nettrace\n            error: ");
	assert_has(o, ", 1 unreadable\n");
	free(args);
	bb_free(&out);
	th_rmdir(dir);
}

Test(agent_report, a_truncated_agent_trace_still_tags_what_it_holds, .timeout = 60)
{
	char *dir = build_dir(), *args;
	struct bytebuf out = { 0 };

	/* the second agent was killed mid-block: its trace ends early */
	cr_assert(asprintf(&args, "f='%s/" AGENT2 "'; head -c $(($(stat -c %%s \"$f\") - 40)) "
			   "\"$f\" > \"$f.cut\" && mv \"$f.cut\" \"$f\"", dir) > 0);
	cr_assert_eq(th_run(args, NULL), 0);
	free(args);
	cr_assert(asprintf(&args, "report '%s' --json", dir) > 0);
	cr_assert_eq(th_tool_run(args, &out), 1, "%s", (char *)out.p);
	assert_has((char *)out.p, "{\"file\":\"" AGENT2 "\",\"events\":");
	cr_assert_null(strstr((char *)out.p, "{\"file\":\"" AGENT2 "\",\"events\":4,\"error\":null"),
		       "%s", (char *)out.p);
	/* agent 1's tags do not depend on agent 2's trace */
	assert_has((char *)out.p, PROC("1002", "6000", "\"worker\"", "\"" C1 "\"", "\"" POD1 "\"",
				       "\"containerd\"", "\"burstable\"", "\"ringpipe\"", "true",
				       "\"killed by signal 9\"", "-1", "5", "3",
				       "worker_1002_6000.nettrace"));
	assert_has((char *)out.p, "\"errors\":1,");
	free(args);
	bb_free(&out);
	th_rmdir(dir);
}

Test(agent_report, single_file_report_is_unchanged_and_help_names_dir, .timeout = 60)
{
	char *dir = build_dir(), *args;
	struct bytebuf out = { 0 };

	cr_assert(asprintf(&args, "report '%s/worker_1002_6000.nettrace' --json", dir) > 0);
	cr_assert_eq(th_tool_run(args, &out), 0, "%s", (char *)out.p);
	assert_has((char *)out.p, "{\"file\":");
	assert_has((char *)out.p, "\"format\":6,\"events\":5,\"lost\":3,");
	cr_assert_null(strstr((char *)out.p, "\"processes\":["), "%s", (char *)out.p);
	free(args);
	out.len = 0;
	cr_assert_eq(th_tool_run("report --help", &out), 0, "%s", (char *)out.p);
	assert_has((char *)out.p, "ringpipe report DIR [--json]");
	bb_free(&out);
	th_rmdir(dir);
}

Test(agent_report, an_empty_directory_is_an_error)
{
	char *dir = th_tmpdir(), *args;
	struct bytebuf out = { 0 };

	cr_assert_not_null(dir);
	cr_assert(asprintf(&args, "report '%s'", dir) > 0);
	cr_assert_eq(th_tool_run(args, &out), 1, "%s", (char *)out.p);
	assert_has((char *)out.p, "no nettrace files here");
	free(args);
	bb_free(&out);
	th_rmdir(dir);
}
