// SPDX-License-Identifier: MIT
/*
 * The fleet on a cluster under faults: ZooKeeper and four real
 * clickhouse-server nodes on loopback, two shards of two replicas
 * (clickhouse_node.h), `fleet init --cluster`, and three real agents with
 * host ids of their own, each given every server (`--clickhouse` four
 * times) and fed by a paced producer (agent_producer.c), so that every
 * fault falls in the middle of their streams: a replica killed and back, a
 * whole shard down for 30 s, an agent killed with SIGKILL while it ships and
 * started again, every server restarted. At the end `fleet check` is clean
 * for every host and the rows are what the producers said they wrote, less
 * what the loss rows count: no duplicate, no gap. Without the servers the
 * test skips, with the reason, unless RINGPIPE_REQUIRE_FLEET=1.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/inotify.h>

#include "agent_helpers.h"
#include "clickhouse_node.h"
#include "helpers.h"

#define NSHARDS 2
#define NREPLICAS 2
#define NNODES (NSHARDS * NREPLICAS)
#define NAGENTS 3
#define OUTAGE_MS 180000	/* a hang guard on each thing an outage must see */

static struct th_zk zk;
static struct th_ch_node nodes[NNODES];
static struct th_agent_env agents[NAGENTS];
static pid_t producers[NAGENTS];

static uint64_t t_start;

/* What the test is at, on stderr (the log of a run that failed) */
#define say(...)                                                                \
	(fprintf(stderr, "fleet_cluster: %6.1f s: ", (th_now_ms() - t_start) / 1000.0), \
	 fprintf(stderr, __VA_ARGS__), fputc('\n', stderr))

static void cluster_fini(void)
{
	int i;

	for (i = 0; i < NAGENTS; i++) {
		th_kill_wait(&producers[i]);
		th_agent_env_kill(&agents[i]);
	}
	/* the servers' data goes with them: no need to wait for a clean stop */
	th_ch_discard_all(nodes, NNODES);
	th_zk_stop(&zk);
}

/* The server of shard s, replica r */
static struct th_ch_node *node_of(int s, int r)
{
	return &nodes[s * NREPLICAS + r];
}

/* The shard a host's rows go to: the Distributed table's cityHash64(host)
 * over shards of equal weight, as the server computes it */
static int shard_of(const char *host)
{
	return (int)(th_ch_ask_u64(nodes[0].url, th_fmt("SELECT cityHash64('%s') %% %d", host,
							 NSHARDS)));
}

struct cluster_agent {
	char host[32];
	const char *mode;	/* block or drop */
	const char *spool_mb;
	int shard;		/* whose replicas it is given */
	int first_replica;	/* the one it talks to first */
	long events;		/* its producer's, one thread */
	char *progress, *said;	/* the producer's files */
};

/* The agent of slot i, given the replicas of its shard */
static void agent_up(int i, const struct cluster_agent *ca)
{
	/* a batch per file, a file every 2 s: a part per batch and table in
	 * ClickHouse, fewer parts than the default of a file a second */
	char *more[32] = { "--providers", "AgentTest", "--buffering-mode", (char *)ca->mode,
			   "--buffer-mb", "4", "--clickhouse-dialect", "legacy", "--host-id",
			   (char *)ca->host, "--spool-mb", (char *)ca->spool_mb,
			   "--clickhouse-shard", "--rotate-s", "2" };
	int n = 15, k;

	for (k = 0; k < NREPLICAS; k++) {
		more[n++] = "--clickhouse";
		more[n++] = node_of(ca->shard, (ca->first_replica + k) % NREPLICAS)->url;
	}
	more[n] = NULL;
	th_agent_up_argv(&agents[i], more);
}

/* A number in the agent's status JSON */
static uint64_t status_num(const struct th_agent_env *e, const char *name)
{
	struct bytebuf b = { 0 };
	char *key = th_fmt("\"%s\":", name), *at;
	uint64_t n;

	cr_assert_eq(agent_status_query(e->sock, true, &b), 0, "the agent does not answer");
	at = strstr(th_text(&b), key);
	cr_assert_not_null(at, "no %s in the status: %s", name, th_text(&b));
	n = strtoull(at + strlen(key), NULL, 10);
	bb_free(&b);
	return n;
}

/* The batches in an agent's spool, counted on disk: a fact that does not
 * need the agent to answer (spool.c names them NUMBER.batch) */
/*
 * A watch on e's spool directory for a batch leaving it (unlinked once the
 * server acknowledged it), with the calling thread raised to SCHED_FIFO
 * (*raised: false when the kernel refused, for want of the privilege, and
 * the thread stays as it was).
 */
static int spool_watch_start(const struct th_agent_env *e, bool *raised)
{
	struct sched_param sp = { .sched_priority = 10 };
	int fd = inotify_init1(IN_CLOEXEC);

	cr_assert_geq(fd, 0, "inotify_init1: %s", strerror(errno));
	cr_assert_geq(inotify_add_watch(fd, th_fmt("%s/spool", e->out), IN_DELETE | IN_MOVED_FROM),
		      0, "inotify_add_watch: %s", strerror(errno));
	*raised = sched_setscheduler(0, SCHED_FIFO, &sp) == 0;
	if (!*raised)
		cr_log_info("SCHED_FIFO refused (%s): the spool is watched at normal priority",
			    strerror(errno));
	return fd;
}

/* Waits for a NUMBER.batch file to leave the watched spool (a hang guard
 * of guard_ms, no verdict from time). */
static void spool_watch_wait(int fd, int guard_ms)
{
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	struct pollfd p = { .fd = fd, .events = POLLIN };

	for (;;) {
		ssize_t n, off;

		cr_assert_eq(poll(&p, 1, guard_ms), 1, "no batch left the spool in %d ms",
			     guard_ms);
		n = read(fd, buf, sizeof(buf));
		cr_assert_gt(n, 0, "inotify read: %s", strerror(errno));
		for (off = 0; off < n;) {
			const struct inotify_event *ev = (const void *)(buf + off);
			size_t len = ev->len ? strlen(ev->name) : 0;

			if (len > 6 && !strcmp(ev->name + len - 6, ".batch"))
				return;
			off += (ssize_t)(sizeof(*ev) + ev->len);
		}
	}
}

static void spool_watch_end(int fd, bool raised)
{
	struct sched_param sp = { .sched_priority = 0 };

	if (raised)
		sched_setscheduler(0, SCHED_OTHER, &sp);
	close(fd);
}

static unsigned int spool_files(const struct th_agent_env *e)
{
	char *dir = th_fmt("%s/spool", e->out);
	DIR *d = opendir(dir);
	struct dirent *de;
	unsigned int n = 0;
	size_t len;

	cr_assert_not_null(d, "%s: %s", dir, strerror(errno));
	while ((de = readdir(d))) {
		len = strlen(de->d_name);
		if (len > 6 && !strcmp(de->d_name + len - 6, ".batch"))
			n++;
	}
	closedir(d);
	free(dir);
	return n;
}

/* `ringpipe fleet query` through one server: every host's events, as
 * "host\tcount" lines */
static const char *events_by_host(const struct th_ch_node *n)
{
	struct bytebuf out = { 0 };
	int rc = th_tool_run(th_fmt("fleet query --clickhouse '%s' --format TabSeparated \"SELECT "
				    "host, count() FROM events WHERE provider = 'AgentTest' GROUP BY "
				    "host ORDER BY host\"", n->url), &out);

	cr_assert_eq(rc, 0, "fleet query through %s: %s", n->url, th_text(&out));
	return th_text(&out);
}

/* Waits until the producer of agent i wrote at least n events */
static void progress_wait(const struct cluster_agent *ca, uint64_t n, int timeout_ms)
{
	uint64_t end = th_now_ms() + (uint64_t)timeout_ms;

	while (th_progress_of(ca->progress) < n) {
		cr_assert_lt(th_now_ms(), end, "the producer of %s did not write %" PRIu64 " events "
			     "in %d ms", ca->host, n, timeout_ms);
		th_sleep_ms(20);
	}
}

static uint64_t rows_of(const char *what, const char *table, const char *host, int pid)
{
	return th_ch_ask_u64(nodes[0].url, th_fmt("SELECT %s FROM ringpipe.%s WHERE host = '%s' "
						  "AND pid = %d", what, table, host, pid));
}

/* Waits until n's own table (not the Distributed one) holds want events of
 * host and pid: replicas fetch from each other in the background */
static void local_rows_wait(const struct th_ch_node *n, const char *host, int pid,
			    uint64_t want)
{
	uint64_t end = th_now_ms() + 60000, have;

	for (;;) {
		have = th_ch_ask_u64(n->url, th_fmt("SELECT count() FROM ringpipe.events_local "
						    "WHERE host = '%s' AND pid = %d", host, pid));
		if (have == want)
			return;
		cr_assert_lt(th_now_ms(), end, "%s holds %" PRIu64 " events of %s, not %" PRIu64,
			     n->url, have, host, want);
		th_sleep_ms(200);
	}
}

/*
 * Waits until every replica of every shard holds the same rows of host in
 * its own tables, twice in a row: a 200 means one replica has a batch, the
 * others fetch it in the background, and a count through a Distributed
 * table reads any one of them (one that had not fetched the last batches
 * yet was read once, right after the agents shipped: what it lacked looked
 * lost).
 */
static void replicas_agree_wait(const char *host)
{
	static const char *const tables[] = { "events_local", "losses_local", "batches_local" };
	uint64_t end = th_now_ms() + 120000, first, other;
	int s, r, agreed;
	size_t t;

	for (s = 0; s < NSHARDS; s++) {
		for (t = 0; t < sizeof(tables) / sizeof(tables[0]); t++) {
			char *q = th_fmt("SELECT count() FROM ringpipe.%s WHERE host = '%s'",
					 tables[t], host);

			for (agreed = 0; agreed < 2;) {
				first = th_ch_ask_u64(node_of(s, 0)->url, q);
				for (r = 1; r < NREPLICAS; r++) {
					other = th_ch_ask_u64(node_of(s, r)->url, q);
					if (other != first)
						break;
				}
				if (r < NREPLICAS) {
					agreed = 0;
					cr_assert_lt(th_now_ms(), end, "shard %d's replicas hold %"
						     PRIu64 " and %" PRIu64 " rows of %s in %s", s + 1,
						     first, other, host, tables[t]);
				} else {
					agreed++;
				}
				th_sleep_ms(200);
			}
			free(q);
		}
	}
}

static void fleet_init_cluster(void)
{
	th_ch_fleet_init_cluster(nodes, NNODES, nodes[0].url, "fleet");
}

Test(fleet_cluster, faults_of_replicas_shards_agents_and_servers_lose_nothing, .timeout = 1200,
     .fini = cluster_fini)
{
	struct cluster_agent ca[NAGENTS] = {
		/* on the shard that goes down: a Block agent with room for the
		 * outage, whose producer ends during it, killed while it ships
		 * what it spooled */
		{ .mode = "block", .spool_mb = "256", .events = 20000 },
		/* on the same shard: a Drop agent whose small spool fills in the
		 * outage, so that files are given up and counted lost */
		{ .mode = "drop", .spool_mb = "1", .events = 120000 },
		/* on the other shard: Block, through every fault */
		{ .mode = "block", .spool_mb = "256", .events = 120000 },
	};
	struct th_said said[NAGENTS];
	struct bytebuf out = { 0 };
	int i, down, up, candidate, found = 0;
	uint64_t sent_before, spooled, t_down;
	bool rt_raised;
	int watch;
	const char *text;

	TH_NEED_CLICKHOUSE();
	t_start = th_now_ms();
	th_ch_cluster_start(&zk, nodes, NSHARDS, NREPLICAS, "fleet");
	fleet_init_cluster();

	/* host ids: two on the shard that goes down, one on the other */
	snprintf(ca[0].host, sizeof(ca[0].host), "cluster-0");
	down = shard_of(ca[0].host);
	up = 1 - down;
	for (candidate = 1; found < 2 && candidate < 64; candidate++) {
		char host[32];
		int s;

		snprintf(host, sizeof(host), "cluster-%d", candidate);
		s = shard_of(host);
		if (s == down && !ca[1].host[0]) {
			snprintf(ca[1].host, sizeof(ca[1].host), "%s", host);
			found++;
		} else if (s == up && !ca[2].host[0]) {
			snprintf(ca[2].host, sizeof(ca[2].host), "%s", host);
			found++;
		}
	}
	cr_assert_eq(found, 2, "no host ids for both shards");
	/* each agent is given the replicas of its host's shard (the one a
	 * Distributed insert would choose); agent 0 talks first to the
	 * replica that is killed */
	ca[0].shard = ca[1].shard = down;
	ca[2].shard = up;
	ca[0].first_replica = 1;
	for (i = 0; i < NAGENTS; i++) {
		th_agent_env_init(&agents[i]);
		agent_up(i, &ca[i]);
		ca[i].progress = th_fmt("%s/progress", agents[i].dir);
		ca[i].said = th_fmt("%s/p.json", agents[i].dir);
		/* about 2,000 events a second: the faults fall mid-stream */
		producers[i] = th_producer_start_more(&agents[i], "", 1, ca[i].events,
						      th_fmt("paced '%s' 400", ca[i].progress),
						      ca[i].said);
	}
	for (i = 0; i < NAGENTS; i++)
		progress_wait(&ca[i], 1, 60000);

	/* every host's events through one server's Distributed table (a
	 * batch leaves about once a second) */
	for (i = 0; i < NAGENTS; i++) {
		uint64_t end = th_now_ms() + 60000;

		while (!status_num(&agents[i], "batches_sent")) {
			cr_assert_lt(th_now_ms(), end, "agent %d sent no batch in 60 s", i);
			th_sleep_ms(50);
		}
	}
	say("the cluster is up, the agents ship");
	text = events_by_host(node_of(up, 0));
	for (i = 0; i < NAGENTS; i++)
		cr_assert(strstr(text, th_fmt("%s\t", ca[i].host)), "no events of %s through one "
			  "server: %s", ca[i].host, text);
	/* fleet top through the other shard's server: every host, with the
	 * provider its producer writes */
	{
		struct bytebuf top = { 0 };

		cr_assert_eq(th_tool_run(th_fmt("fleet top --clickhouse '%s' --since 0 events",
						node_of(1 - up, 1)->url), &top), 0, "fleet top: %s",
			     th_text(&top));
		for (i = 0; i < NAGENTS; i++)
			cr_assert(strstr(th_text(&top), ca[i].host), "fleet top names no %s: %s",
				  ca[i].host, th_text(&top));
		cr_assert(strstr(th_text(&top), "AgentTest"), "%s", th_text(&top));
		bb_free(&top);
	}

	/* one replica killed: its shard's other replica takes the inserts */
	say("a replica of shard %d killed", down + 1);
	th_ch_kill(node_of(down, 1));
	sent_before = status_num(&agents[0], "batches_sent");
	{
		uint64_t end = th_now_ms() + 60000;	/* a hang guard */

		while (status_num(&agents[0], "batches_sent") <= sent_before) {
			cr_assert_lt(th_now_ms(), end, "agent 0 sent nothing in 60 s while one "
				     "replica of its shard was down");
			th_sleep_ms(50);
		}
	}
	th_ch_restart(node_of(down, 1));

	/* the whole shard down until its hosts' agents have spooled, the Drop
	 * one has filled its spool and the other shard's agent has shipped
	 * on (each a hang guard of OUTAGE_MS) */
	say("shard %d down", down + 1);
	th_ch_kill(node_of(down, 0));
	th_ch_kill(node_of(down, 1));
	t_down = th_now_ms();
	sent_before = status_num(&agents[2], "batches_sent");
	said[0] = th_producer_wait(producers[0], ca[0].said, OUTAGE_MS);
	producers[0] = 0;
	say("the producer of agent 0 ended");
	th_status_wait(&agents[1], "\"full\":true", OUTAGE_MS);
	while (status_num(&agents[2], "batches_sent") <= sent_before + 5) {
		cr_assert_lt(th_now_ms(), t_down + 2 * OUTAGE_MS, "the agent of the other shard "
			     "shipped %" PRIu64 " batches while this one was down",
			     status_num(&agents[2], "batches_sent") - sent_before);
		th_sleep_ms(50);
	}
	/* four batches at least, so that some are left when the first has
	 * gone: two senders ship two at once (a file every 2 s: they come) */
	while ((spooled = spool_files(&agents[0])) < 4) {
		cr_assert_lt(th_now_ms(), t_down + 2 * OUTAGE_MS, "agent 0 spooled %" PRIu64
			     " batches while its shard was down", spooled);
		th_sleep_ms(50);
	}
	/* agent 0 killed while it ships its spool, and started again. The
	 * kernel says when its first batch leaves the spool (inotify: the
	 * file's name goes), to this thread, raised above the CPU hogs of a
	 * loaded host for the moment (SCHED_FIFO), which stops the agent
	 * there: what is left is counted before the kill. The next batch
	 * needs an insert's round trip to the server; the wakeup does not. */
	watch = spool_watch_start(&agents[0], &rt_raised);
	say("shard %d back", down + 1);
	th_ch_restart(node_of(down, 0));
	th_ch_restart(node_of(down, 1));
	spool_watch_wait(watch, OUTAGE_MS);
	cr_assert_eq(kill(agents[0].agent, SIGSTOP), 0);
	spool_watch_end(watch, rt_raised);
	spooled = spool_files(&agents[0]);
	th_kill_wait(&agents[0].agent);
	cr_assert_gt(spooled, 0u, "agent 0 had shipped everything before it was stopped");
	say("agent 0 killed with %" PRIu64 " batches spooled, started again", spooled);
	agent_up(0, &ca[0]);

	/* every server restarted, the producers of agents 1 and 2 still writing */
	cr_assert_eq(waitpid(producers[1], NULL, WNOHANG), 0, "producer 1 ended too soon");
	cr_assert_eq(waitpid(producers[2], NULL, WNOHANG), 0, "producer 2 ended too soon");
	say("every server restarted");
	th_ch_halt_all(nodes, NNODES);
	for (i = 0; i < NNODES; i++)
		th_ch_restart(&nodes[i]);
	say("every server is back");

	for (i = 1; i < NAGENTS; i++) {
		said[i] = th_producer_wait(producers[i], ca[i].said, 180000);
		producers[i] = 0;
	}
	say("the producers ended");
	for (i = 0; i < NAGENTS; i++) {
		th_shipped_wait(&agents[i], 120000);
		cr_assert_eq(th_agent_down(&agents[i]), 0, "agent %d did not stop cleanly", i);
	}
	{
		/* the restarted agent took up the killed one's spool */
		struct bytebuf log = { 0 };

		cr_assert_eq(th_read_file(th_fmt("%s/agent.log", agents[0].dir), &log), 0);
		cr_assert(strstr(th_text(&log), "batches from an earlier run"), "%s", th_text(&log));
		bb_free(&log);
	}

	for (i = 0; i < NAGENTS; i++)
		replicas_agree_wait(ca[i].host);
	text = events_by_host(node_of(down, 0));
	for (i = 0; i < NAGENTS; i++) {
		uint64_t events = rows_of("count()", "events", ca[i].host, said[i].pid);
		uint64_t lost = rows_of("sum(count)", "losses", ca[i].host, said[i].pid);

		cr_assert_eq(events + lost, said[i].written + said[i].dropped,
			     "%s: %" PRIu64 " events and %" PRIu64 " lost, the producer tried %llu",
			     ca[i].host, events, lost, said[i].written + said[i].dropped);
		cr_assert_eq(rows_of("uniqExact(payload)", "events", ca[i].host, said[i].pid),
			     events, "%s: an event arrived twice", ca[i].host);
		cr_assert(strstr(text, th_fmt("%s\t%" PRIu64 "\n", ca[i].host, events)),
			  "fleet query does not count %" PRIu64 " events of %s: %s", events,
			  ca[i].host, text);
		out.len = 0;
		cr_assert_eq(th_tool_run(th_fmt("fleet check --clickhouse '%s' --host '%s'",
						nodes[i].url, ca[i].host), &out), 0,
			     "fleet check %s: %s", ca[i].host, th_text(&out));
		cr_assert(strstr(th_text(&out), "all accounted for"), "%s", th_text(&out));
		say("%s (%s, shard %d): %llu written, %llu dropped; %" PRIu64 " events, %" PRIu64
		    " lost in ClickHouse", ca[i].host, ca[i].mode, ca[i].shard + 1, said[i].written,
		    said[i].dropped, events, lost);
		if (strcmp(ca[i].mode, "block"))
			continue;
		cr_assert_eq(said[i].dropped, 0u, "%s: Block dropped %llu", ca[i].host,
			     said[i].dropped);
		cr_assert_eq(lost, 0u, "%s: Block lost %" PRIu64, ca[i].host, lost);
	}
	/* each replica of a host's shard has all of its rows once it caught
	 * up (a replica killed fetches what the other took), the other shard
	 * none */
	for (i = 0; i < NAGENTS; i++) {
		uint64_t want = rows_of("count()", "events", ca[i].host, said[i].pid);
		int s, r;

		for (s = 0; s < NSHARDS; s++)
			for (r = 0; r < NREPLICAS; r++)
				local_rows_wait(node_of(s, r), ca[i].host, said[i].pid,
						s == ca[i].shard ? want : 0);
	}
	cr_assert_gt(th_ch_ask_u64(nodes[0].url, th_fmt("SELECT sum(count) FROM ringpipe.losses "
							"WHERE host = '%s' AND reason = "
							"'egress_full'", ca[1].host)), 0u,
		     "the Drop agent's full spool counted nothing lost");
	bb_free(&out);
}

/* `ringpipe agent ARGS` that must fail: its exit status, its words in out */
static int agent_refuses(const char *args, struct bytebuf *out)
{
	out->len = 0;
	return th_tool_run(th_fmt("agent --providers AgentTest --socket '%s/agent.sock' "
				  "--output-dir '%s/out' %s", agents[0].dir, agents[0].dir, args),
			   out);
}

Test(fleet_cluster, server_lists_that_cannot_work_are_refused_with_the_reason,
     .fini = cluster_fini)
{
	struct bytebuf out = { 0 };
	struct bytebuf nine = { 0 };
	int i;

	th_agent_env_init(&agents[0]);
	cr_assert_eq(agent_refuses("--clickhouse-shard", &out), 2, "%s", th_text(&out));
	cr_assert(strstr(th_text(&out), "need --clickhouse URL"), "%s", th_text(&out));
	for (i = 0; i < 9; i++)
		bb_printf(&nine, " --clickhouse http://127.0.0.1:%d/", 8000 + i);
	bb_append(&nine, "", 1);
	cr_assert_eq(agent_refuses((const char *)nine.p, &out), 2, "%s", th_text(&out));
	cr_assert(strstr(th_text(&out), "--clickhouse is given at most 8 times"), "%s",
		  th_text(&out));
	cr_assert_eq(agent_refuses("--clickhouse 'http://127.0.0.1:1/?database=a' --clickhouse "
				   "'http://127.0.0.1:2/?database=b'", &out), 1, "%s", th_text(&out));
	cr_assert(strstr(th_text(&out), "names database b, http://127.0.0.1:1/?database=a names "
			 "a: the servers of one egress share the database"), "%s", th_text(&out));
	for (i = 0; i < 3; i++) {
		static const char *const bad[] = { "0", "9", "two" };

		cr_assert_eq(agent_refuses(th_fmt("--clickhouse http://127.0.0.1:1/ "
						  "--clickhouse-senders %s", bad[i]), &out), 2,
			     "%s", th_text(&out));
		cr_assert(strstr(th_text(&out), "--clickhouse-senders must be 1 to 8"), "%s",
			  th_text(&out));
	}
	bb_free(&out);
	bb_free(&nine);
}

Test(fleet_cluster, a_server_that_is_down_is_passed_over_at_once, .timeout = 120,
     .fini = cluster_fini)
{
	struct cluster_agent ca = { .host = "cluster-next", .mode = "block", .spool_mb = "16",
				    .events = 20000 };
	char *more[] = { "--providers", "AgentTest", "--buffering-mode", "block",
			 "--clickhouse-dialect", "legacy", "--host-id", ca.host, "--clickhouse",
			 NULL, "--clickhouse", NULL, NULL };
	struct th_ch_node *n = &nodes[0], *dead = &nodes[1];
	struct th_said said;
	struct bytebuf out = { 0 };
	uint64_t t0;

	TH_NEED_CLICKHOUSE();
	t_start = th_now_ms();
	th_ch_init(n);
	th_ch_start(n, NULL);
	th_ch_init(dead);	/* ports chosen, nothing listens */
	cr_assert_eq(th_tool_run(th_fmt("fleet init --clickhouse '%s'", n->url), &out), 0, "%s",
		     th_text(&out));
	more[9] = dead->url;
	more[11] = n->url;
	th_agent_env_init(&agents[0]);
	th_agent_up_argv(&agents[0], more);
	t0 = th_now_ms();
	producers[0] = th_producer_start(&agents[0], "", 2, ca.events, th_fmt("%s/p.json",
									       agents[0].dir));
	said = th_producer_wait(producers[0], th_fmt("%s/p.json", agents[0].dir), 60000);
	producers[0] = 0;
	th_shipped_wait(&agents[0], 60000);
	/* one failure, on the dead server, and every batch through the next
	 * one, tried at once */
	say("%llu events shipped past a dead server in %" PRIu64 " ms", said.written,
	    th_now_ms() - t0);
	th_status_wait(&agents[0], "\"servers\":2,", 60000);
	th_status_wait(&agents[0], th_fmt("\"server\":\"127.0.0.1:%u\"", n->url_port), 60000);
	th_status_wait(&agents[0], "\"retries\":1,\"outages\":1,", 60000);
	cr_assert_eq(th_agent_down(&agents[0]), 0);
	cr_assert_eq(th_ch_ask_u64(n->url, th_fmt("SELECT count() FROM ringpipe.events WHERE "
						  "host = '%s' AND provider = 'AgentTest'", ca.host)),
		     said.written);
	cr_assert_eq(said.written, 2u * (uint64_t)ca.events);
	out.len = 0;
	cr_assert_eq(th_tool_run(th_fmt("fleet check --clickhouse '%s' --host %s", n->url, ca.host),
				 &out), 0, "%s", th_text(&out));
	bb_free(&out);
}
