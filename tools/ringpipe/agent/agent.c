// SPDX-License-Identifier: MIT
/*
 * The host agent (agent.h). One thread serves the socket: it accepts,
 * takes each peer's identity from SO_PEERCRED and /proc (never from what
 * the peer says), answers HELLO with the host's configuration, and on READY
 * maps the process's memfd (rp_shm_open_fd() checks it as untrusted) and
 * starts a remote session: the library's own drainer, in this process,
 * reading the rings another process writes, writing that process's trace.
 * The drainer names records through lookup(), which reads the events the
 * process described; a description sent before a record was written is in
 * the socket's queue by the time the record can be read, so a miss drains
 * the queue once and looks again.
 *
 * A connection that ends without STOPPING is a process that exited or was
 * killed: its remote session is ended all the same, which drains what it
 * committed, and the ProcessEnd event says how it ended, from the zombie's
 * /proc/PID/stat while there is one.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent.h"
#include "session/agent_wire.h"
#include "capture/bpf_capture.h"
#include "core/clock.h"
#include "agent/dotnet.h"
#include "egress/egress.h"
#include "common/fnv1a.h"
#include "trace/agent_report.h"
#include "util/hmap.h"
#include "host/identity.h"
#include "capture/record_sample.h"
#include "trace/retrace.h"
#include "capture/sample_out.h"
#include "symbols/symbolize.h"
#include "ringpipe/abi.h"
#include "ringpipe/ringpipe.h"
#include "session/session.h"
#include "util/thread.h"
#include "common/tool_util.h"
#include "util/utf.h"

#define MAX_CONNS 4096u
#define KEEP_ENDED 1024u	/* ended processes remembered for status */
#define STOP_WAIT_MS 3000	/* agent_stop(): processes answer STOP within this */
#define FREQ_TOLERANCE 100	/* a process's clock may differ by 1/100 */
#define IDLE_LOOK_MS 100
#define SEEN_QUEUE_MAX 65536u	/* pids waiting to be named; more are named later */
#define NAMED_MAX 32768u	/* capture-named processes remembered before the gone are forgotten */
#define SIZE_LOOK_MS 20	/* how often file sizes are held against --rotate-mb, at most */
/* A process whose connection closed: how long it may take to become a
 * zombie (it closed its files first) before it is taken as alive */
#define ZOMBIE_WAIT_MS 200
/* agent_stop(): how long the egress may take to ship what is left; the
 * rest stays in its spool for the next run */
#define EGRESS_STOP_WAIT_MS 30000

enum conn_kind { CONN_NEW, CONN_PROC, CONN_STATUS };

struct conn {
	int fd;
	enum conn_kind kind;
	uint32_t pid, uid;
	struct agent_identity id;
	bool have_id;
	pthread_mutex_t lock;		/* metas, and reads of fd */
	struct rp_agent_desc **metas;	/* by event index */
	size_t nmetas;
	uint8_t *buf;			/* one packet */
	struct rp_session *rs;
	int out_fd;
	char file[512];
	struct thread_final *finals;
	size_t nfinals;
	bool stopping;			/* STOPPING arrived */
	char how[64];
	int exit_status;
	struct rp_session_stats st;
	uint64_t file_bytes0;		/* the session's bytes when its file began */
	uint64_t look_bytes;		/* the session's bytes at the last look at sizes */
	uint32_t files;			/* its files so far (rotation) */
	int next_file;			/* open_next()'s */
	bool drain_held;		/* not drained: the egress is full */
	struct conn *next;
};

struct agent {
	struct agent_opts o;
	char socket_path[108];
	int listen_fd;
	int wake_fd;
	int quit;			/* atomic */
	pthread_t thread;
	pthread_mutex_t lock;		/* the lists, for status */
	struct conn *live, *ended;
	size_t nlive, nended;
	uint64_t joined_total;
	int output_failed;
	/* the agent's own trace */
	struct rp_provider *prov;
	struct rp_event *ev_process, *ev_end, *ev_container, *ev_file;
	struct rp_session *trace;
	char trace_base[480];		/* its files: BASE.nettrace, BASE.2.nettrace, ... */
	int next_trace, next_merged;	/* open_next()'s */
	char trace_file[512];
	uint64_t trace_bytes0;
	/* rotation: when the period began, when sizes were looked at */
	uint64_t period_ns, last_size_ns;
	uint64_t size_look_ns;		/* the next look at sizes after the last one */
	/* processes the kernel capture wrote events of, queued by its
	 * consumer (seen_pid) for a Process event; and those named so, pid
	 * -> start time */
	pthread_mutex_t seen_lock;
	uint32_t *seen_q;
	size_t nseen_q, capseen_q;
	struct hmap named, named_comm;	/* and pid -> hash of the Comm named */
	size_t named_limit;		/* prune_named() past this many; 0: NAMED_MAX */
	/* --merge: the files finished in this period, and the merge of the
	 * last period's, on a thread of its own (done: atomic, it ended) */
	char **closed;
	size_t nclosed, capclosed;
	char merged_base[480];
	struct merge_job {
		char **files;
		size_t n;
		char out[512];
		int rc;
		char note[1024];
	} job;
	pthread_t merge_thread;
	char merged_last[512];		/* the last merged file written */
	bool merging;
	int merge_done;
	char **containers;		/* ids seen, for one Container event each */
	size_t ncontainers;
	struct agent_dotnet *dn;
	struct rp_capture_opts co;	/* a->o.capture's copy, with our session */
	struct rp_capture *cap;
	struct record_sampler *rs;
	struct dn_seen { uint32_t pid; uint64_t start; bool ended; } *dn_seen;
	size_t ndn_seen;
	uint64_t last_dn_ns;
	struct egress *eg;		/* NULL: no --clickhouse */
	struct egress *otlp;		/* NULL: no --otlp */
	bool egress_holding;		/* Block sessions held for the egress */
};

/* A progress line, unless --quiet */
#define say(a, ...) tool_say((a)->o.quiet, "ringpipe agent: ", __VA_ARGS__)

/* ---- the agent's own events ---------------------------------------------- */

/* Are the processes' events Drop-mode ones, which the egress may count as
 * lost when it is full, rather than hold their producers? */
static bool conn_droppable(const struct agent *a)
{
	return a->o.buffering != RP_BUFFERING_BLOCK;
}

static const struct rp_field process_fields[] = {
	{ "Pid", RP_TYPE_U32, 0, 0, NULL },
	{ "NsPids", RP_TYPE_STRING, 0, 0, NULL },
	{ "StartTime", RP_TYPE_U64, 0, 0, NULL },
	{ "Comm", RP_TYPE_STRING, 0, 0, NULL },
	{ "CgroupId", RP_TYPE_U64, 0, 0, NULL },
	{ "CgroupPath", RP_TYPE_STRING, 0, 0, NULL },
	{ "ContainerId", RP_TYPE_STRING, 0, 0, NULL },
	{ "PodUid", RP_TYPE_STRING, 0, 0, NULL },
	{ "Runtime", RP_TYPE_STRING, 0, 0, NULL },
	{ "QosClass", RP_TYPE_STRING, 0, 0, NULL },
	{ "Uid", RP_TYPE_U32, 0, 0, NULL },
	{ "Source", RP_TYPE_STRING, 0, 0, NULL },
	{ "TraceFile", RP_TYPE_STRING, 0, 0, NULL },
};

static const struct rp_field end_fields[] = {
	{ "Pid", RP_TYPE_U32, 0, 0, NULL },
	{ "StartTime", RP_TYPE_U64, 0, 0, NULL },
	{ "How", RP_TYPE_STRING, 0, 0, NULL },
	{ "ExitStatus", RP_TYPE_I32, 0, 0, NULL },
	{ "Events", RP_TYPE_U64, 0, 0, NULL },
	{ "LostFull", RP_TYPE_U64, 0, 0, NULL },
	{ "LostAborted", RP_TYPE_U64, 0, 0, NULL },
	{ "LostOutput", RP_TYPE_U64, 0, 0, NULL },
	{ "LostOther", RP_TYPE_U64, 0, 0, NULL },
	{ "Corrupt", RP_TYPE_U64, 0, 0, NULL },
};

static const struct rp_field file_fields[] = {
	{ "Pid", RP_TYPE_U32, 0, 0, NULL },
	{ "StartTime", RP_TYPE_U64, 0, 0, NULL },
	{ "TraceFile", RP_TYPE_STRING, 0, 0, NULL },
};

static const struct rp_field container_fields[] = {
	{ "ContainerId", RP_TYPE_STRING, 0, 0, NULL },
	{ "PodUid", RP_TYPE_STRING, 0, 0, NULL },
	{ "Runtime", RP_TYPE_STRING, 0, 0, NULL },
	{ "QosClass", RP_TYPE_STRING, 0, 0, NULL },
	{ "CgroupPath", RP_TYPE_STRING, 0, 0, NULL },
};

/* The capture's consumer: a process it wrote an event of. Named by the
 * agent's loop (name_seen()), which reads /proc, off this thread. */
static void on_seen_pid(void *ctx, uint32_t pid)
{
	struct agent *a = ctx;

	pthread_mutex_lock(&a->seen_lock);
	if (a->nseen_q < SEEN_QUEUE_MAX &&
	    !array_grow((void **)&a->seen_q, &a->capseen_q, a->nseen_q, sizeof(*a->seen_q), 64))
		a->seen_q[a->nseen_q++] = pid;
	pthread_mutex_unlock(&a->seen_lock);
}

static int open_trace(struct agent *a)
{
	struct rp_provider_opts po = { .sz = sizeof(po), .name = "Ringpipe-Agent" };
	struct rp_event_opts eo = { .sz = sizeof(eo), .level = 4 };
	struct rp_provider_config pc[16] = { { .name = "Ringpipe-Agent", .level = 5 } };
	struct rp_session_opts so = { .sz = sizeof(so), .fd = -1 };
	uint32_t npc = 1;
	char when[32];
	time_t now = time(NULL);

	/* the agent drains others; it does not join itself */
	rp_agent_join_disable();
	a->prov = rp_provider_new(&po);
	if (!a->prov)
		return -errno;
	eo.id = 1, eo.name = "Process", eo.fields = process_fields;
	eo.nfields = sizeof(process_fields) / sizeof(process_fields[0]);
	a->ev_process = rp_event_new(a->prov, &eo);
	eo.id = 2, eo.name = "ProcessEnd", eo.fields = end_fields;
	eo.nfields = sizeof(end_fields) / sizeof(end_fields[0]);
	a->ev_end = rp_event_new(a->prov, &eo);
	eo.id = 3, eo.name = "Container", eo.fields = container_fields;
	eo.nfields = sizeof(container_fields) / sizeof(container_fields[0]);
	a->ev_container = rp_event_new(a->prov, &eo);
	eo.id = 4, eo.name = "TraceFile", eo.fields = file_fields;
	eo.nfields = sizeof(file_fields) / sizeof(file_fields[0]);
	a->ev_file = rp_event_new(a->prov, &eo);
	if (!a->ev_process || !a->ev_end || !a->ev_container || !a->ev_file)
		return -errno;
	strftime(when, sizeof(when), "%Y%m%d_%H%M%S", localtime(&now));
	snprintf(a->trace_base, sizeof(a->trace_base), "%.400s/ringpipe-agent_%d_%s", a->o.out_dir,
		 getpid(), when);
	snprintf(a->trace_file, sizeof(a->trace_file), "%s.nettrace", a->trace_base);
	snprintf(a->merged_base, sizeof(a->merged_base), "%.400s/" AGENT_MERGED_PREFIX "%d_%s",
		 a->o.out_dir, getpid(), when);
	if (a->o.capture || a->o.sample_hz) {
		/* kernel events, probes and samples of every process go into
		 * this trace: each carries its Pid and CgroupId, to be joined
		 * with the Process events */
		const char *names[12];
		char err[512];
		size_t k, n = 0;

		a->co = a->o.capture ? *a->o.capture : (struct rp_capture_opts){ .sz = sizeof(a->co) };
		a->co.pid = 0;
		a->co.seen_pid = on_seen_pid;
		a->co.seen_pid_ctx = a;
		if (rp_capture_check_privilege(err, sizeof(err)) ||
		    rp_capture_define(&a->co, err, sizeof(err)) ||
		    (a->o.sample_hz && record_sampler_define())) {
			fprintf(stderr, "ringpipe agent: kernel capture: %s\n", err);
			return -EPERM;
		}
		if (a->o.capture)
			n = rp_capture_provider_names(&a->co, names, 12);
		for (k = 0; k < n; k++)
			pc[npc++] = (struct rp_provider_config){ .name = names[k] };
		if (a->o.sample_hz) {
			pc[npc++] = (struct rp_provider_config){ .name = SAMPLER_PROVIDER };
			pc[npc++] = (struct rp_provider_config){ .name = SYM_PROVIDER };
		}
	}
	so.path = a->trace_file;
	so.format = 6;
	so.providers = pc;
	so.nproviders = npc;
	a->trace = rp_session_start(&so);
	if (!a->trace) {
		fprintf(stderr, "ringpipe agent: %s: %s\n", a->trace_file, rp_last_error());
		return -EIO;
	}
	if (a->o.capture || a->o.sample_hz) {
		char err[512] = "";

		a->co.session = a->trace;
		a->cap = rp_capture_open(&a->co, err, sizeof(err));
		if (a->cap && a->o.sample_hz)
			a->rs = record_sampler_open(a->cap, a->o.sample_hz, 0, err, sizeof(err));
		if (!a->cap || (a->o.sample_hz && !a->rs) || rp_capture_start(a->cap)) {
			fprintf(stderr, "ringpipe agent: kernel capture: %s\n",
				err[0] ? err : "cannot start its consumer thread");
			return -EIO;
		}
	}
	return 0;
}

static void close_capture(struct agent *a)
{
	if (!a->cap)
		return;
	rp_capture_stop(a->cap);
	record_sampler_close(a->rs, NULL);	/* the queued samples first */
	a->rs = NULL;
}

static void put_str(struct bytebuf *b, const char *s)
{
	utf8_to_utf16z(b, s ? s : "");
}

/* Writes the payload built in b (unless building it ran out of memory)
 * and frees it. */
static void emit_built(struct rp_event *ev, struct bytebuf *b)
{
	if (!b->oom)
		rp_event_write(ev, b->p, b->len);
	bb_free(b);
}

static void emit_container(struct agent *a, const struct agent_identity *id)
{
	struct bytebuf b = { 0 };
	char **n;
	size_t i;

	if (!id->tags.container_id[0])
		return;
	for (i = 0; i < a->ncontainers; i++)
		if (!strcmp(a->containers[i], id->tags.container_id))
			return;
	n = realloc(a->containers, (a->ncontainers + 1) * sizeof(*n));
	if (!n)
		return;
	a->containers = n;
	n[a->ncontainers] = strdup(id->tags.container_id);
	if (!n[a->ncontainers])
		return;
	a->ncontainers++;
	put_str(&b, id->tags.container_id);
	put_str(&b, id->tags.pod_uid);
	put_str(&b, id->tags.runtime);
	put_str(&b, id->tags.qos);
	put_str(&b, id->cgroup_path);
	emit_built(a->ev_container, &b);
}

static void emit_process(struct agent *a, const struct agent_identity *id, uint32_t uid,
			 const char *source, const char *file)
{
	struct bytebuf b = { 0 };
	char nspids[256];

	emit_container(a, id);
	agent_identity_nspids_str(id, nspids, sizeof(nspids));
	bb_append_u32(&b, id->pid);
	put_str(&b, nspids);
	bb_append_u64(&b, id->start_time);
	put_str(&b, id->comm);
	bb_append_u64(&b, id->cgroup_id);
	put_str(&b, id->cgroup_path);
	put_str(&b, id->tags.container_id);
	put_str(&b, id->tags.pod_uid);
	put_str(&b, id->tags.runtime);
	put_str(&b, id->tags.qos);
	bb_append_u32(&b, uid);
	put_str(&b, source);
	put_str(&b, file);
	emit_built(a->ev_process, &b);
}

/* unknown: events lost for no reason known (a .NET stream's EventsLost),
 * counted with the other reasons */
static void emit_end(struct agent *a, uint32_t pid, uint64_t start, const char *how, int status,
		     const struct rp_session_stats *st, uint64_t unknown)
{
	struct bytebuf b = { 0 };
	uint64_t other = unknown;
	int i;

	for (i = 0; i < RP_DROP_REASON_NR; i++)
		if (i != RP_DROP_REASON_FULL && i != RP_DROP_REASON_ABORTED &&
		    i != RP_DROP_REASON_OUTPUT)
			other += st->dropped[i];
	bb_append_u32(&b, pid);
	bb_append_u64(&b, start);
	put_str(&b, how);
	bb_append_u32(&b, (uint32_t)status);
	bb_append_u64(&b, st->events_written);
	bb_append_u64(&b, st->dropped[RP_DROP_REASON_FULL]);
	bb_append_u64(&b, st->dropped[RP_DROP_REASON_ABORTED]);
	bb_append_u64(&b, st->dropped[RP_DROP_REASON_OUTPUT]);
	bb_append_u64(&b, other);
	bb_append_u64(&b, st->corrupt_records);
	emit_built(a->ev_end, &b);
}

static void closed_add(struct agent *a, const char *path, const struct agent_identity *id,
		       bool droppable);

static void emit_file(struct agent *a, uint32_t pid, uint64_t start, const char *file)
{
	struct bytebuf b = { 0 };

	bb_append_u32(&b, pid);
	bb_append_u64(&b, start);
	put_str(&b, file);
	emit_built(a->ev_file, &b);
}

/* ---- connections ------------------------------------------------------------ */

static void wake(struct agent *a)
{
	uint64_t one = 1;

	if (write(a->wake_fd, &one, sizeof(one)) < 0)
		return;	/* the counter is full: the loop is awake anyway */
}

static int send_hdr(int fd, uint16_t type)
{
	struct rp_agent_hdr h = rp_agent_hdr(type, sizeof(h), 0);

	return rp_agent_send(fd, &h, sizeof(h), -1, 100);
}

static const struct nt_event_desc *lookup(void *ctx, uint32_t index);

/* A packet from a process, under c->lock. Returns false when the
 * connection must end (a packet no honest process sends). */
static bool handle(struct conn *c, const uint8_t *p, size_t n)
{
	const struct rp_agent_hdr *h = (const void *)p;
	char why[256];

	if (rp_agent_hdr_check(p, n))
		return false;
	switch (h->type) {
	case RP_AM_META: {
		const struct rp_am_meta *m = (const void *)p;
		struct rp_agent_desc *d;

		if (n < sizeof(*m) || m->desc_len != n - sizeof(*m) || !m->index ||
		    m->index > (1u << 24))
			return false;
		d = rp_agent_desc_decode(m + 1, m->desc_len, NT_FORMAT_V6, why, sizeof(why));
		if (!d)
			return true;	/* its records are refused as corrupt, and counted */
		if (m->index >= c->nmetas) {
			size_t nn = (size_t)m->index * 2 + 16;
			struct rp_agent_desc **v = realloc(c->metas, nn * sizeof(*v));

			if (!v) {
				free(d);
				return true;
			}
			memset(v + c->nmetas, 0, (nn - c->nmetas) * sizeof(*v));
			c->metas = v;
			c->nmetas = nn;
		}
		/* a described index keeps its first description: the
		 * drainer may hold a pointer to it */
		if (c->metas[m->index])
			free(d);
		else
			c->metas[m->index] = d;
		return true;
	}
	case RP_AM_FINALS: {
		const struct rp_am_finals *f = (const void *)p;
		struct thread_final *v;

		if (n < sizeof(*f) || f->n > RP_AM_FINALS_PER_MSG ||
		    n != sizeof(*f) + (size_t)f->n * sizeof(struct rp_am_final) ||
		    c->nfinals + f->n > (1u << 22))
			return false;
		v = realloc(c->finals, (c->nfinals + f->n + 1) * sizeof(*v));
		if (!v)
			return true;
		c->finals = v;
		memcpy(v + c->nfinals, f + 1, (size_t)f->n * sizeof(*v));
		c->nfinals += f->n;
		return true;
	}
	case RP_AM_STOPPING:
		c->stopping = true;
		return true;
	default:
		return false;
	}
}

static const struct nt_event_desc *lookup(void *ctx, uint32_t index)
{
	struct conn *c = ctx;
	const struct nt_event_desc *d = NULL;

	pthread_mutex_lock(&c->lock);
	if (index >= c->nmetas || !c->metas[index]) {
		/* described before it was written: the description waits in
		 * the socket's queue. Read what is there, without waiting */
		for (;;) {
			int fd;
			ssize_t n = rp_agent_recv(c->fd, c->buf, RP_AGENT_MAX_MSG, &fd, 0);

			if (fd >= 0)
				close(fd);
			if (n <= 0)
				break;
			if (!handle(c, c->buf, (size_t)n))
				break;
		}
	}
	if (index < c->nmetas && c->metas[index])
		d = &c->metas[index]->desc;
	pthread_mutex_unlock(&c->lock);
	return d;
}

static void file_name(struct agent *a, struct conn *c)
{
	char comm[17];
	size_t i;

	snprintf(comm, sizeof(comm), "%s", c->have_id && c->id.comm[0] ? c->id.comm : "process");
	for (i = 0; comm[i]; i++)
		if (comm[i] == '/' || comm[i] == ' ' || comm[i] < 32)
			comm[i] = '_';
	snprintf(c->file, sizeof(c->file), "%s/%s_%u_%llu.nettrace", a->o.out_dir, comm, c->pid,
		 (unsigned long long)c->id.start_time);
}

/* BASE.nettrace, or the first of BASE.2.nettrace, BASE.3.nettrace, ...
 * that does not exist yet, created; its name in path. *next (0 at first)
 * remembers where the search stopped, so a file rotated for the
 * thousandth time is not looked for a thousand times. */
static int open_next(const char *base, char *path, size_t len, int *next)
{
	int n, fd;

	for (n = *next > 1 ? *next : 1; n < 1000000; n++) {
		*next = n + 1;
		if (n > 1)
			snprintf(path, len, "%s.%d.nettrace", base, n);
		else
			snprintf(path, len, "%s.nettrace", base);
		fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (fd >= 0 || errno != EEXIST)
			return fd;
	}
	return errno = EEXIST, -1;
}

/* The process's trace file, new: a process that joins again (it restarted
 * its session, or the agent restarted) or whose file rotates gets
 * NAME.2.nettrace, and so on. */
static int open_file(struct agent *a, struct conn *c)
{
	char base[480];

	file_name(a, c);
	snprintf(base, sizeof(base), "%.*s", (int)(strlen(c->file) - strlen(".nettrace")) & 0x1ff,
		 c->file);
	return open_next(base, c->file, sizeof(c->file), &c->next_file);
}

/* READY: the rings. 0, or the connection ends. */
static int adopt(struct agent *a, struct conn *c, const struct rp_am_ready *r, int fd,
		 int counts_fd)
{
	char err[200] = "";
	struct rp_shm_open_opts oo = { .sz = sizeof(oo), .errbuf = err, .errbuf_len = sizeof(err) };
	struct rp_remote_opts ro = { 0 };
	uint64_t mine = rp_clock_frequency();
	struct rp_shm *shm;

	if (c->rs || fd < 0)
		return -EPROTO;
	if (r->tick_freq < mine - mine / FREQ_TOLERANCE || r->tick_freq > mine + mine / FREQ_TOLERANCE) {
		say(a, "pid %u: its clock runs at %llu Hz, ours at %llu (RINGPIPE_CLOCK differs?): "
		    "refused", c->pid, (unsigned long long)r->tick_freq, (unsigned long long)mine);
		return -EPROTO;
	}
	shm = rp_shm_open_fd(fd, &oo);
	if (!shm) {
		say(a, "pid %u: its rings are refused: %s", c->pid, err);
		return -EPROTO;
	}
	/* its drops, as its producers counted them: only they can write there */
	if (counts_fd < 0 || rp_shm_attach_counts(shm, counts_fd, &oo)) {
		say(a, "pid %u: its rings are refused: %s", c->pid,
		    counts_fd < 0 ? "no drop counters came with them" : err);
		rp_shm_destroy(shm);
		return -EPROTO;
	}
	c->out_fd = open_file(a, c);
	if (c->out_fd < 0) {
		say(a, "%s: %s", c->file, strerror(errno));
		rp_shm_destroy(shm);
		return -errno;
	}
	ro.format = NT_FORMAT_V6;
	ro.process_id = c->pid;
	ro.sync_ticks = r->sync_ticks;
	ro.sync_unix_ns = r->sync_unix_ns;
	ro.tick_freq = r->tick_freq;
	ro.out_fd = c->out_fd;
	/* fifty idle processes cost fifty drainers' wakes: each looks every
	 * IDLE_LOOK_MS when nothing wakes it, which bounds how late a
	 * trickle below the wake watermark is read */
	ro.idle_sleep_ns = IDLE_LOOK_MS * 1000000ull;
	/* --rotate-mb: the drainer wakes the loop when the file passes the
	 * size, so a burst from an idle process (looked at every SIZE_LOOK_MS)
	 * rotates at once */
	ro.size_notify_bytes = a->o.rotate_bytes;
	ro.size_fd = a->wake_fd;
	ro.lookup = lookup;
	ro.lookup_ctx = c;
	c->rs = rp_remote_session_start(shm, &ro);
	if (!c->rs) {
		say(a, "pid %u: cannot drain its rings: %s", c->pid, strerror(errno));
		rp_shm_destroy(shm);
		close(c->out_fd);
		c->out_fd = -1;
		return -EIO;
	}
	c->files = 1;
	emit_process(a, &c->id, c->uid, "ringpipe", c->file);
	say(a, "pid %u (%s) joined%s%s", c->pid, c->id.comm, c->id.tags.container_id[0] ? ", container " : "",
	    c->id.tags.container_id);
	return 0;
}

/* How a process that left without STOPPING ended, from its zombie. A
 * process that is dying closes its files (our socket) before it becomes a
 * zombie: one that is exiting is given a moment to get there (one that
 * lives on is not waited for). */
static void how_it_ended(struct conn *c)
{
	struct agent_proc_stat ps;
	int err = agent_proc_stat(c->pid, &ps), i;

	for (i = 0; i < ZOMBIE_WAIT_MS && !err && ps.exiting && ps.state != 'Z' && c->have_id &&
		    ps.start_time == c->id.start_time; i++) {
		struct timespec ts = { 0, 1000000 };

		nanosleep(&ts, NULL);
		err = agent_proc_stat(c->pid, &ps);
	}

	c->exit_status = -1;
	if ((err && err != -EBADMSG) || (!err && c->have_id && ps.start_time != c->id.start_time)) {
		snprintf(c->how, sizeof(c->how), "exited");	/* reaped (or its pid reused) */
		return;
	}
	if (err || ps.state != 'Z' || ps.exit_code < 0) {
		snprintf(c->how, sizeof(c->how), "disconnected");
		return;
	}
	c->exit_status = ps.exit_code;
	if (ps.exit_code & 0x7f)
		snprintf(c->how, sizeof(c->how), "killed by signal %d", ps.exit_code & 0x7f);
	else
		snprintf(c->how, sizeof(c->how), "exited with status %d", (ps.exit_code >> 8) & 0xff);
}

static void conn_free(struct conn *c)
{
	size_t i;

	for (i = 0; i < c->nmetas; i++)
		free(c->metas[i]);
	free(c->metas);
	free(c->finals);
	free(c->buf);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

/* The end of a process's connection: its session drained to the end. */
static void conn_end(struct agent *a, struct conn *c, bool answer)
{
	struct conn **pp;

	if (c->rs) {
		c->st.sz = sizeof(c->st);
		if (!c->stopping)
			how_it_ended(c);
		else
			snprintf(c->how, sizeof(c->how), "stopped");
		if (rp_remote_session_end(c->rs, c->finals, c->nfinals, &c->st))
			a->output_failed = 1;
		c->rs = NULL;
		if (c->out_fd >= 0 && close(c->out_fd))
			a->output_failed = 1;
		c->out_fd = -1;
		closed_add(a, c->file, c->have_id ? &c->id : NULL, conn_droppable(a));
		if (answer && c->stopping)
			send_hdr(c->fd, RP_AM_DRAINED);
		emit_end(a, c->pid, c->id.start_time, c->how, c->exit_status, &c->st, 0);
		say(a, "pid %u (%s) %s: %llu events", c->pid, c->id.comm, c->how,
		    (unsigned long long)c->st.events_written);
	}
	close(c->fd);
	c->fd = -1;
	pthread_mutex_lock(&a->lock);
	for (pp = &a->live; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			a->nlive--;
			break;
		}
	if (c->kind == CONN_PROC && c->have_id) {
		c->next = a->ended;
		a->ended = c;
		a->nended++;
		c = NULL;
		if (a->nended > KEEP_ENDED) {
			struct conn *e = a->ended;

			while (e->next && e->next->next)
				e = e->next;
			conn_free(e->next);
			e->next = NULL;
			a->nended--;
		}
	}
	pthread_mutex_unlock(&a->lock);
	if (c)
		conn_free(c);
}

static void status_text(struct agent *a, bool json, struct bytebuf *out);

/* One packet on a connection that is not a process yet. */
static bool first_packet(struct agent *a, struct conn *c, const uint8_t *p, size_t n)
{
	const struct rp_agent_hdr *h = (const void *)p;

	if (rp_agent_hdr_check(p, n))
		return false;
	if (h->type == RP_AM_STATUS) {
		struct bytebuf b = { 0 };

		c->kind = CONN_STATUS;
		status_text(a, h->flags & RP_AM_F_JSON, &b);
		rp_agent_send_text(c->fd, RP_AM_STATUS_REPLY, (const char *)b.p, b.len, 1000);
		bb_free(&b);
		return false;	/* answered: the connection ends */
	}
	if (h->type == RP_AM_HELLO && n == sizeof(struct rp_am_hello)) {
		const struct rp_am_hello *hello = (const void *)p;
		const char *spec = a->o.providers ? a->o.providers : "";
		size_t sl = strlen(spec);
		uint8_t *q;
		struct rp_am_config *cf;

		if (hello->abi_version != RP_ABI_VERSION) {
			char why[128];
			int k = snprintf(why, sizeof(why), "ring ABI %u, the agent reads %u",
					 hello->abi_version, RP_ABI_VERSION);

			rp_agent_send_text(c->fd, RP_AM_REFUSE, why, (size_t)k, 1000);
			return false;
		}
		c->kind = CONN_PROC;
		c->have_id = !agent_identity_read(c->pid, &c->id);
		if (!c->have_id) {
			memset(&c->id, 0, sizeof(c->id));
			c->id.pid = c->pid;
		}
		q = calloc(1, sizeof(*cf) + sl);
		if (!q)
			return false;
		cf = (struct rp_am_config *)q;
		cf->h = rp_agent_hdr(RP_AM_CONFIG, (uint32_t)(sizeof(*cf) + sl), 0);
		cf->buffering = (uint32_t)a->o.buffering;
		cf->format = NT_FORMAT_V6;
		cf->buffer_bytes = a->o.buffer_bytes;
		cf->block_timeout_ms = a->o.block_timeout_ms;
		cf->spec_len = (uint32_t)sl;
		memcpy(cf + 1, spec, sl);
		if (rp_agent_send(c->fd, q, sizeof(*cf) + sl, -1, 1000)) {
			free(q);
			return false;
		}
		free(q);
		a->joined_total++;
		return true;
	}
	return false;
}

/* Readable: one packet. False when the connection is over. */
static bool conn_read(struct agent *a, struct conn *c)
{
	int fds[2] = { -1, -1 }, fd;
	ssize_t n;
	bool ok;

	pthread_mutex_lock(&c->lock);
	n = rp_agent_recv_fds(c->fd, c->buf, RP_AGENT_MAX_MSG, fds, 2, 0);
	fd = fds[0];
	if (fds[1] >= 0 && (n < (ssize_t)sizeof(struct rp_am_ready) ||
			    ((struct rp_agent_hdr *)c->buf)->type != RP_AM_READY)) {
		close(fds[1]);	/* only READY brings a second one */
		fds[1] = -1;
	}
	if (n == -ETIMEDOUT) {
		/* lookup() took it first */
		pthread_mutex_unlock(&c->lock);
		return true;
	}
	if (n <= 0) {
		pthread_mutex_unlock(&c->lock);
		if (fd >= 0)
			close(fd);
		return false;
	}
	if (c->kind == CONN_NEW) {
		ok = first_packet(a, c, c->buf, (size_t)n);
	} else if (n == sizeof(struct rp_am_ready) && !rp_agent_hdr_check(c->buf, (size_t)n) &&
		   ((struct rp_agent_hdr *)c->buf)->type == RP_AM_READY) {
		struct rp_am_ready r;

		memcpy(&r, c->buf, sizeof(r));
		pthread_mutex_unlock(&c->lock);
		ok = !adopt(a, c, &r, fd, fds[1]);
		close(fd);	/* mapped (or refused): the fds are not needed */
		if (fds[1] >= 0)
			close(fds[1]);
		return ok;
	} else {
		ok = handle(c, c->buf, (size_t)n);
	}
	pthread_mutex_unlock(&c->lock);
	if (fd >= 0)
		close(fd);
	return ok;
}

static void conn_accept(struct agent *a)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);
	struct conn *c;
	int fd = accept4(a->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

	if (fd < 0)
		return;
	if (a->nlive >= MAX_CONNS || getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len)) {
		close(fd);
		return;
	}
	c = calloc(1, sizeof(*c));
	if (!c || !(c->buf = malloc(RP_AGENT_MAX_MSG))) {
		free(c);
		close(fd);
		return;
	}
	pthread_mutex_init(&c->lock, NULL);
	c->fd = fd;
	c->out_fd = -1;
	c->exit_status = -1;	/* unknown, unless its zombie tells */
	/* who it is: the kernel says, not the peer */
	c->pid = (uint32_t)cr.pid;
	c->uid = (uint32_t)cr.uid;
	pthread_mutex_lock(&a->lock);
	c->next = a->live;
	a->live = c;
	a->nlive++;
	pthread_mutex_unlock(&a->lock);
}

/* ---- .NET processes ------------------------------------------------------- */

static void name_dotnet(struct agent *a, const struct agent_dotnet_proc *p)
{
	struct agent_identity id;

	if (agent_identity_read(p->pid, &id) || id.start_time != p->start_time) {
		memset(&id, 0, sizeof(id));
		id.pid = p->pid;
		id.start_time = p->start_time;
		id.nnspids = 1;
		id.nspids[0] = p->pid;
		snprintf(id.comm, sizeof(id.comm), "%s", p->comm);
	}
	emit_process(a, &id, 0, "dotnet", p->file);
}

/* New .NET processes get their Process event, ended streams their
 * ProcessEnd; final: after agent_dotnet_finish(), every stream has ended,
 * and one the agent stopped (the process lives on) says so. */
static void dotnet_poll(struct agent *a, bool final)
{
	struct agent_dotnet_proc v[256];
	size_t n, i, k;

	if (!a->dn)
		return;
	n = agent_dotnet_list(a->dn, v, 256);
	if (n > 256)
		n = 256;
	for (i = 0; i < n; i++) {
		struct dn_seen *s = NULL;

		for (k = 0; k < a->ndn_seen; k++)
			if (a->dn_seen[k].pid == v[i].pid && a->dn_seen[k].start == v[i].start_time)
				s = &a->dn_seen[k];
		if (!s) {
			struct dn_seen *ns = realloc(a->dn_seen, (a->ndn_seen + 1) * sizeof(*ns));

			if (!ns)
				continue;
			a->dn_seen = ns;
			s = &ns[a->ndn_seen++];
			s->pid = v[i].pid;
			s->start = v[i].start_time;
			s->ended = false;
			name_dotnet(a, &v[i]);
			say(a, ".NET pid %u (%s) traced through %s", v[i].pid, v[i].comm, v[i].socket);
		}
		if (!s->ended && (v[i].state == AGENT_DN_ENDED ||
				  (final && v[i].state == AGENT_DN_FAILED))) {
			struct rp_session_stats st = { 0 };
			struct agent_proc_stat ps;
			char how[64];
			bool lives = !agent_proc_stat(v[i].pid, &ps) && ps.start_time == v[i].start_time &&
				     ps.state != 'Z';

			s->ended = true;
			st.events_written = v[i].events;
			snprintf(how, sizeof(how), "%s", v[i].state == AGENT_DN_FAILED ? "not traced" :
				 final && lives ? "stopped" : "exited");
			/* what the stream lost, as its reader counted it: the
			 * runtime says nothing of why */
			emit_end(a, v[i].pid, v[i].start_time, how, -1, &st,
				 v[i].lost > 0 ? (uint64_t)v[i].lost : 0);
			if (v[i].state == AGENT_DN_ENDED)
				closed_add(a, v[i].file, NULL, conn_droppable(a));
		}
	}
}

/* ---- processes only the kernel capture sees ------------------------------- */

static bool known_pid(const struct agent *a, uint32_t pid)
{
	const struct conn *c;
	size_t i;

	for (c = a->live; c; c = c->next)
		if (c->pid == pid && c->kind == CONN_PROC)
			return true;
	for (i = 0; i < a->ndn_seen; i++)
		if (a->dn_seen[i].pid == pid && !a->dn_seen[i].ended)
			return true;
	return false;
}

static uint64_t comm_hash(const char *s)
{
	return fnv1a64_str(fnv1a64_start(), s);
}

/* The owner of /proc/PID: the process's effective uid */
static uint32_t uid_of(uint32_t pid)
{
	char path[32];
	struct stat st;

	snprintf(path, sizeof(path), "/proc/%u", pid);
	return stat(path, &st) ? 0 : (uint32_t)st.st_uid;
}

/*
 * The capture-named processes still there, the others forgotten (a
 * host that execs all day names millions); emit: each named again, into
 * a new file of the agent's trace. A process that cannot be looked at
 * any more is gone.
 */
static void prune_named(struct agent *a, bool emit)
{
	struct hmap keep = { 0 }, keep_comm = { 0 };
	size_t i;

	for (i = 0; i < a->named.cap; i++) {
		struct agent_identity id;
		uint32_t pid = (uint32_t)a->named.keys[i];
		uint64_t comm = 0;

		if (!a->named.used[i] || agent_identity_read(pid, &id) ||
		    id.start_time != a->named.vals[i])
			continue;
		hmap_get(&a->named_comm, pid, &comm);
		if (hmap_put(&keep, pid, id.start_time) || hmap_put(&keep_comm, pid, comm))
			continue;
		if (emit && !known_pid(a, pid))
			emit_process(a, &id, uid_of(pid), "kernel", a->trace_file);
	}
	hmap_free(&a->named);
	hmap_free(&a->named_comm);
	a->named = keep;
	a->named_comm = keep_comm;
}

/* A Process event (Source "kernel") for each process the capture wrote
 * events of that neither joined nor is traced as .NET, once per (pid,
 * start time). One gone before it is looked at is not named: what it
 * was is no longer there to read. */
static void name_seen(struct agent *a)
{
	uint32_t *q;
	size_t n, i;

	pthread_mutex_lock(&a->seen_lock);
	q = a->seen_q;
	n = a->nseen_q;
	a->seen_q = NULL;
	a->nseen_q = a->capseen_q = 0;
	pthread_mutex_unlock(&a->seen_lock);
	if (n && a->named.count >= (a->named_limit ? a->named_limit : NAMED_MAX)) {
		prune_named(a, false);
		/* as many alive: not again until twice as many */
		a->named_limit = a->named.count * 2 > NAMED_MAX ? a->named.count * 2 : NAMED_MAX;
	}
	for (i = 0; i < n; i++) {
		struct agent_identity id;
		uint64_t start, comm;

		if (q[i] == (uint32_t)getpid() || known_pid(a, q[i]) || agent_identity_read(q[i], &id))
			continue;
		/* an exec changes the Comm: named again */
		if (hmap_get(&a->named, q[i], &start) && start == id.start_time &&
		    hmap_get(&a->named_comm, q[i], &comm) && comm == comm_hash(id.comm))
			continue;
		if (hmap_put(&a->named, q[i], id.start_time) ||
		    hmap_put(&a->named_comm, q[i], comm_hash(id.comm)))
			continue;
		emit_process(a, &id, uid_of(q[i]), "kernel", a->trace_file);
		/* new, or it exec'ed: a runtime it starts is looked for now,
		 * not at the next scan */
		if (a->dn)
			agent_dotnet_poke(a->dn, q[i]);
	}
	free(q);
}

/* ---- merged files (--merge) ------------------------------------------------- */

/* A trace finished: it goes to ClickHouse, and into the period's merged
 * file. id: the process whose file it is, NULL for a file of many. */
static void closed_add(struct agent *a, const char *path, const struct agent_identity *id,
		       bool droppable)
{
	char *p;

	if (a->eg && path[0])
		egress_file(a->eg, path, id, droppable);
	if (a->otlp && path[0])
		egress_file(a->otlp, path, id, droppable);
	if (!a->o.merge || !path[0])
		return;
	p = strdup(path);
	if (!p || array_grow((void **)&a->closed, &a->capclosed, a->nclosed, sizeof(*a->closed), 16)) {
		free(p);
		say(a, "out of memory: %s is left out of the merged file", path);
		return;
	}
	a->closed[a->nclosed++] = p;
}

static void *merge_main(void *arg)
{
	struct agent *a = arg;
	struct retrace_stats st = { 0 };

	a->job.rc = retrace_merge_files((const char *const *)a->job.files, a->job.n, a->job.out, &st,
					a->job.note, sizeof(a->job.note), NULL);
	/* pairs with the load_acquire in merge_reap(): the job's results */
	rp_store_release(&a->merge_done, 1);
	return NULL;
}

static void merge_said(struct agent *a)
{
	size_t i;

	if (a->job.rc) {
		say(a, "%s not written: %s", a->job.out,
		    a->job.note[0] ? a->job.note : strerror(-a->job.rc));
		unlink(a->job.out);	/* the name it held */
	} else {
		say(a, "merged %zu files into %s%s%s", a->job.n, a->job.out, a->job.note[0] ? "; " : "",
		    a->job.note);
		memcpy(a->merged_last, a->job.out, sizeof(a->merged_last));
	}
	for (i = 0; i < a->job.n; i++)
		free(a->job.files[i]);
	free(a->job.files);
	a->job.files = NULL;
	a->job.n = 0;
}

/* The merge of the last period, when it is over (wait: once it is). */
static void merge_reap(struct agent *a, bool wait)
{
	if (!a->merging || (!wait && !rp_load_acquire(&a->merge_done)))
		return;
	pthread_join(a->merge_thread, NULL);
	a->merging = false;
	merge_said(a);
}

/* The files finished so far, merged into the next AGENT_MERGED_PREFIX
 * file: on a thread of its own, so that a large merge holds up no
 * process joining, or here (at stop). A merge still running when the
 * next period ends leaves that period's files for the one after. */
static void merge_start(struct agent *a, bool here)
{
	size_t i, k;
	int fd;

	merge_reap(a, here);
	if (a->merging)
		return;
	/* a file that is not there (a .NET stream whose copy failed) or
	 * empty (a rotation that could not start it) would fail the whole
	 * merge: it is left out */
	for (i = k = 0; i < a->nclosed; i++) {
		struct stat st;
		bool gone = stat(a->closed[i], &st) != 0;

		if (gone || !st.st_size) {
			say(a, "%s: %s; left out of the merged file", a->closed[i],
			    gone ? strerror(errno) : "empty");
			free(a->closed[i]);
		} else {
			a->closed[k++] = a->closed[i];
		}
	}
	a->nclosed = k;
	if (!a->nclosed)
		return;
	fd = open_next(a->merged_base, a->job.out, sizeof(a->job.out), &a->next_merged);
	if (fd < 0) {
		say(a, "%s: %s", a->job.out, strerror(errno));
		return;
	}
	close(fd);	/* the name is ours; the merge renames its file onto it */
	a->job.files = a->closed;
	a->job.n = a->nclosed;
	a->closed = NULL;
	a->nclosed = a->capclosed = 0;
	a->job.note[0] = 0;
	rp_store_relaxed(&a->merge_done, 0);
	if (!here && !rp_thread_start(&a->merge_thread, "rp-merge", merge_main, a)) {
		a->merging = true;
		return;
	}
	merge_main(a);
	merge_said(a);
}

/* ---- rotation -------------------------------------------------------------- */

static uint64_t bytes_of(struct rp_session *s)
{
	struct rp_session_stats st = { .sz = sizeof(st) };

	rp_session_stats(s, &st);
	return st.bytes_written;
}

/* The process's trace goes on in its next file. */
static void rotate_conn(struct agent *a, struct conn *c)
{
	char old[sizeof(c->file)];
	int fd, err;

	memcpy(old, c->file, sizeof(old));
	fd = open_file(a, c);
	if (fd < 0) {
		say(a, "%s: %s; %s goes on", c->file, strerror(errno), old);
		memcpy(c->file, old, sizeof(old));
		return;
	}
	err = rp_session_rotate(c->rs, fd);
	if (err) {
		say(a, "pid %u: cannot go on in %s: %s", c->pid, c->file, strerror(-err));
		close(fd);
		unlink(c->file);
		memcpy(c->file, old, sizeof(old));
		return;
	}
	if (close(c->out_fd))
		a->output_failed = 1;
	c->out_fd = fd;
	c->file_bytes0 = bytes_of(c->rs);
	c->files++;
	closed_add(a, old, c->have_id ? &c->id : NULL, conn_droppable(a));
	emit_file(a, c->pid, c->id.start_time, c->file);
}

/* The agent's own trace goes on in its next file, which names again every
 * process and container still there, and every symbol, so it reads alone. */
static void rotate_trace(struct agent *a)
{
	struct agent_dotnet_proc v[256];
	char path[sizeof(a->trace_file)];
	struct conn *c;
	size_t n = 0, i, k;
	int fd = open_next(a->trace_base, path, sizeof(path), &a->next_trace), err;

	if (fd < 0) {
		say(a, "%s: %s; %s goes on", path, strerror(errno), a->trace_file);
		return;
	}
	err = rp_session_rotate(a->trace, fd);
	if (err) {
		say(a, "cannot go on in %s: %s", path, strerror(-err));
		close(fd);
		unlink(path);
		return;
	}
	closed_add(a, a->trace_file, NULL, false);
	pthread_mutex_lock(&a->lock);
	memcpy(a->trace_file, path, sizeof(path));
	pthread_mutex_unlock(&a->lock);
	a->trace_bytes0 = bytes_of(a->trace);
	while (a->ncontainers)
		free(a->containers[--a->ncontainers]);
	for (c = a->live; c; c = c->next)
		if (c->kind == CONN_PROC && c->rs)
			emit_process(a, &c->id, c->uid, "ringpipe", c->file);
	if (a->dn)
		n = agent_dotnet_list(a->dn, v, 256);
	for (i = 0; i < n && i < 256; i++)
		for (k = 0; k < a->ndn_seen; k++)
			if (a->dn_seen[k].pid == v[i].pid && a->dn_seen[k].start == v[i].start_time &&
			    !a->dn_seen[k].ended)
				name_dotnet(a, &v[i]);
	prune_named(a, true);
	record_sampler_restate(a->rs);
}

/*
 * When to look at a file's size again: at the latest after SIZE_LOOK_MS,
 * sooner when at the rate it grew since the last look it would reach the
 * limit before that (half the time it would take, at least 1 ms), so that
 * a file written at hundreds of MB/s passes --rotate-mb by about a
 * millisecond's writing rather than SIZE_LOOK_MS's, while an idle agent
 * still wakes only every SIZE_LOOK_MS.
 */
static uint64_t size_look_after(const struct agent *a, uint64_t used, uint64_t grew,
				uint64_t dt_ns)
{
	uint64_t left = used < a->o.rotate_bytes ? a->o.rotate_bytes - used : 0, t;

	if (!grew || !dt_ns)
		return SIZE_LOOK_MS * 1000000ull;
	t = (uint64_t)((double)left / (double)grew * (double)dt_ns / 2);
	if (t < 1000000ull)
		return 1000000ull;
	return t < SIZE_LOOK_MS * 1000000ull ? t : SIZE_LOOK_MS * 1000000ull;
}

/* --rotate-s: every file at each period's end; --rotate-mb: a file that
 * grew that much since it began. */
static void rotate_check(struct agent *a, uint64_t now)
{
	bool period = a->o.rotate_s && now - a->period_ns >= a->o.rotate_s * 1000000000ull;
	uint64_t dt = now - a->last_size_ns, next = SIZE_LOOK_MS * 1000000ull;
	struct conn *c;

	if (period)
		a->period_ns = now;
	else if (!a->o.rotate_bytes || dt < a->size_look_ns)
		return;
	a->last_size_ns = now;
	for (c = a->live; c; c = c->next) {
		uint64_t bytes, t;

		if (c->kind != CONN_PROC || !c->rs || c->drain_held)
			continue;
		bytes = bytes_of(c->rs);
		if (period || (a->o.rotate_bytes && bytes - c->file_bytes0 >= a->o.rotate_bytes))
			rotate_conn(a, c);
		t = size_look_after(a, bytes - c->file_bytes0, bytes - c->look_bytes, dt);
		c->look_bytes = bytes;
		if (t < next)
			next = t;
	}
	a->size_look_ns = next;
	if (period || (a->o.rotate_bytes && bytes_of(a->trace) - a->trace_bytes0 >= a->o.rotate_bytes))
		rotate_trace(a);
	if (period && a->o.merge)
		merge_start(a, false);
}

/* ---- the egress's room ------------------------------------------------------ */

/* While the egress is full, Block sessions are not drained, so that their
 * producers park; Drop sessions go on and the egress counts what it
 * cannot take. A process that joins meanwhile is held at its first look. */
static void hold_check(struct agent *a)
{
	bool full = (egress_full(a->eg) || egress_full(a->otlp)) && !conn_droppable(a);
	struct conn *c;

	if (full != a->egress_holding)
		say(a, full ? "the egress is full: Block processes are not drained until it has room"
			    : "the egress has room again: every process is drained");
	a->egress_holding = full;
	for (c = a->live; c; c = c->next)
		if (c->kind == CONN_PROC && c->rs && c->drain_held != full) {
			rp_session_hold_drain(c->rs, full);
			c->drain_held = full;
		}
}

/* ---- the loop -------------------------------------------------------------- */

static void *agent_main(void *arg)
{
	struct agent *a = arg;
	struct pollfd *p = NULL;
	struct conn **cs = NULL;
	size_t cap = 0;

	while (!rp_load_relaxed(&a->quit)) {
		struct conn *c;
		size_t n = 2, i;
		uint64_t now;

		pthread_mutex_lock(&a->lock);
		if (a->nlive + 2 > cap) {
			size_t nc = (a->nlive + 2) * 2;
			struct pollfd *np = realloc(p, nc * sizeof(*np));
			struct conn **ncs;

			if (np)
				p = np;
			ncs = realloc(cs, nc * sizeof(*ncs));
			if (ncs)
				cs = ncs;
			if (np && ncs)
				cap = nc;
		}
		p[0] = (struct pollfd){ .fd = a->listen_fd, .events = POLLIN };
		p[1] = (struct pollfd){ .fd = a->wake_fd, .events = POLLIN };
		for (c = a->live; c && n < cap; c = c->next) {
			p[n] = (struct pollfd){ .fd = c->fd, .events = POLLIN };
			cs[n++] = c;
		}
		pthread_mutex_unlock(&a->lock);
		/* --rotate-mb: sizes are looked at every SIZE_LOOK_MS, sooner while
		 * a file grows fast (size_look_after()), which bounds how far past
		 * the size a file goes */
		if (poll(p, n, a->o.rotate_bytes ? (int)((a->size_look_ns + 999999) / 1000000) : 200) < 0 &&
		    errno != EINTR)
			break;
		if (p[1].revents) {
			uint64_t v;

			if (read(a->wake_fd, &v, sizeof(v)) < 0)
				v = 0;
			/* it may be a drainer's: a file passed --rotate-mb */
			a->size_look_ns = 0;
		}
		for (i = 2; i < n; i++) {
			c = cs[i];
			if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR)) && !c->stopping)
				continue;
			if (!conn_read(a, c) || c->stopping)
				conn_end(a, c, true);
		}
		if (p[0].revents & POLLIN)
			conn_accept(a);
		now = rp_clock_mono_ns();
		if (now - a->last_dn_ns > 500000000ull) {
			a->last_dn_ns = now;
			dotnet_poll(a, false);
		}
		name_seen(a);
		hold_check(a);
		rotate_check(a, now);
		merge_reap(a, false);
	}
	free(p);
	free(cs);
	return NULL;
}

static int listen_on(struct agent *a)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char dir[108], *slash;
	int fd;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", a->socket_path);
	snprintf(dir, sizeof(dir), "%s", a->socket_path);
	slash = strrchr(dir, '/');
	if (slash && slash != dir) {
		*slash = 0;
		if (mkdir(dir, 0755) && errno != EEXIST) {
			fprintf(stderr, "ringpipe agent: %s: %s\n", dir, strerror(errno));
			return -errno;
		}
	}
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	/* a socket left by an agent that died: take it over, unless one
	 * still answers there */
	if (!access(sa.sun_path, F_OK)) {
		int probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

		if (probe >= 0 && !connect(probe, (struct sockaddr *)&sa, sizeof(sa))) {
			close(probe);
			close(fd);
			fprintf(stderr, "ringpipe agent: another agent serves %s\n", sa.sun_path);
			return -EADDRINUSE;
		}
		if (probe >= 0)
			close(probe);
		unlink(sa.sun_path);
	}
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, 128)) {
		fprintf(stderr, "ringpipe agent: %s: %s\n", sa.sun_path, strerror(errno));
		close(fd);
		return -errno;
	}
	/* any process may join: who it is comes from the kernel */
	chmod(sa.sun_path, 0666);
	a->listen_fd = fd;
	return 0;
}

struct agent *agent_start(const struct agent_opts *uo)
{
	struct agent *a = calloc(1, sizeof(*a));

	if (!a)
		return NULL;
	memcpy(&a->o, uo, uo->sz < sizeof(a->o) ? uo->sz : sizeof(a->o));
	a->listen_fd = a->wake_fd = -1;
	pthread_mutex_init(&a->lock, NULL);
	pthread_mutex_init(&a->seen_lock, NULL);
	a->period_ns = rp_clock_mono_ns();
	a->size_look_ns = SIZE_LOOK_MS * 1000000ull;
	snprintf(a->socket_path, sizeof(a->socket_path), "%s",
		 a->o.socket_path ? a->o.socket_path : RP_AGENT_DEFAULT_SOCKET);
	if (rp_clock_init()) {
		fprintf(stderr, "ringpipe agent: cannot initialise the clock\n");
		goto fail;
	}
	if (mkdir(a->o.out_dir, 0755) && errno != EEXIST) {
		fprintf(stderr, "ringpipe agent: %s: %s\n", a->o.out_dir, strerror(errno));
		goto fail;
	}
	if (open_trace(a))
		goto fail;
	if (a->o.egress && !(a->eg = egress_start(a->o.egress)))
		goto fail;
	if (a->o.otlp && !(a->otlp = egress_start(a->o.otlp)))
		goto fail;
	a->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (a->wake_fd < 0 || listen_on(a))
		goto fail;
	if (a->o.dotnet) {
		struct agent_dotnet_opts d = { .sz = sizeof(d) };

		d.providers = a->o.dotnet_providers;
		d.buffering = a->o.buffering;
		d.out_dir = a->o.out_dir;
		d.scan_ms = a->o.scan_ms;
		a->dn = agent_dotnet_start(&d);
		if (!a->dn) {
			fprintf(stderr, "ringpipe agent: cannot trace .NET processes: %s\n",
				strerror(errno));
			goto fail;
		}
	}
	if (rp_thread_start(&a->thread, "rp-agent", agent_main, a))
		goto fail;
	say(a, "serving %s, writing to %s", a->socket_path, a->o.out_dir);
	return a;
fail:
	if (a->dn)
		agent_dotnet_stop(a->dn);
	if (a->listen_fd >= 0) {
		close(a->listen_fd);
		unlink(a->socket_path);
	}
	if (a->wake_fd >= 0)
		close(a->wake_fd);
	close_capture(a);
	if (a->trace)
		rp_session_stop(a->trace);
	rp_capture_close(a->cap);
	egress_stop(a->eg, 0);
	egress_stop(a->otlp, 0);
	free(a);
	return NULL;
}

int agent_stop(struct agent *a)
{
	uint64_t end;
	struct conn *c, *next;
	int rc;

	if (!a)
		return 0;
	rp_store_relaxed(&a->quit, 1);
	wake(a);
	pthread_join(a->thread, NULL);
	close(a->listen_fd);
	unlink(a->socket_path);
	/* every process ends its session and sends the rest */
	pthread_mutex_lock(&a->lock);
	for (c = a->live; c; c = c->next)
		if (c->kind == CONN_PROC)
			send_hdr(c->fd, RP_AM_STOP);
	pthread_mutex_unlock(&a->lock);
	end = rp_clock_mono_ns() + STOP_WAIT_MS * 1000000ull;
	while (a->live && rp_clock_mono_ns() < end) {
		for (c = a->live; c; c = next) {
			struct pollfd p = { .fd = c->fd, .events = POLLIN };

			next = c->next;
			if (poll(&p, 1, 10) <= 0)
				continue;
			if (!conn_read(a, c) || c->stopping)
				conn_end(a, c, true);
		}
	}
	while (a->live)
		conn_end(a, a->live, false);
	if (a->dn) {
		/* every stream ends (its file written), then its ProcessEnd */
		agent_dotnet_finish(a->dn);
		dotnet_poll(a, true);
		agent_dotnet_stop(a->dn);
		a->dn = NULL;
	}
	close_capture(a);
	rp_session_stop(a->trace);
	rp_capture_close(a->cap);
	a->cap = NULL;
	closed_add(a, a->trace_file, NULL, false);
	merge_start(a, true);
	rc = a->output_failed ? 1 : 0;
	if (egress_stop(a->eg, EGRESS_STOP_WAIT_MS))
		rc = 1;
	a->eg = NULL;
	if (egress_stop(a->otlp, EGRESS_STOP_WAIT_MS))
		rc = 1;
	a->otlp = NULL;
	say(a, "stopped; the agent's trace is %s", a->trace_file);
	while (a->ended) {
		c = a->ended;
		a->ended = c->next;
		conn_free(c);
	}
	while (a->ncontainers)
		free(a->containers[--a->ncontainers]);
	free(a->containers);
	free(a->dn_seen);
	free(a->seen_q);
	while (a->nclosed)
		free(a->closed[--a->nclosed]);
	free(a->closed);
	hmap_free(&a->named);
	hmap_free(&a->named_comm);
	pthread_mutex_destroy(&a->seen_lock);
	close(a->wake_fd);
	free(a);
	return rc;
}

/* ---- status ------------------------------------------------------------------ */

static uint64_t lost_of(const struct rp_session_stats *st)
{
	uint64_t n = 0;
	int i;

	for (i = 0; i < RP_DROP_REASON_NR; i++)
		n += st->dropped[i];
	return n;
}

static void proc_line(struct bytebuf *b, bool json, const struct conn *c, bool live, bool *first)
{
	struct rp_session_stats st = { .sz = sizeof(st) };

	if (live && c->rs)
		rp_session_stats(c->rs, &st);
	else if (!live)
		st = c->st;
	if (json) {
		bb_printf(b, "%s{\"pid\":%u,\"start_time\":%llu,\"comm\":", *first ? "" : ",", c->pid,
			  (unsigned long long)c->id.start_time);
		nt_json_cstring(b, c->id.comm);
		bb_printf(b, ",\"source\":\"ringpipe\",\"container_id\":");
		nt_json_cstring(b, c->id.tags.container_id);
		bb_printf(b, ",\"pod_uid\":");
		nt_json_cstring(b, c->id.tags.pod_uid);
		bb_printf(b, ",\"state\":\"%s\",\"events\":%llu,\"lost\":%llu,\"lost_full\":%llu,"
			  "\"lost_aborted\":%llu,\"corrupt\":%llu,\"bytes\":%llu,\"files\":%u,\"file\":",
			  live ? "joined" : c->how, (unsigned long long)st.events_written,
			  (unsigned long long)lost_of(&st),
			  (unsigned long long)st.dropped[RP_DROP_REASON_FULL],
			  (unsigned long long)st.dropped[RP_DROP_REASON_ABORTED],
			  (unsigned long long)st.corrupt_records, (unsigned long long)st.bytes_written,
			  c->files);
		nt_json_cstring(b, c->file);
		bb_printf(b, "}");
	} else {
		bb_printf(b, "%8u  %-16s %-12.12s %-22s %12llu %10llu  %s\n", c->pid, c->id.comm,
			  c->id.tags.container_id[0] ? c->id.tags.container_id : "-",
			  live ? "joined" : c->how, (unsigned long long)st.events_written,
			  (unsigned long long)lost_of(&st), c->file);
	}
	*first = false;
}

static void status_text(struct agent *a, bool json, struct bytebuf *b)
{
	struct agent_dotnet_proc v[256];
	size_t ndn = 0, i;
	bool first = true;
	struct conn *c;

	if (a->dn) {
		ndn = agent_dotnet_list(a->dn, v, 256);
		if (ndn > 256)
			ndn = 256;
	}
	pthread_mutex_lock(&a->lock);
	if (json) {
		bb_printf(b, "{\"pid\":%d,\"socket\":", getpid());
		nt_json_cstring(b, a->socket_path);
		bb_printf(b, ",\"output_dir\":");
		nt_json_cstring(b, a->o.out_dir);
		bb_printf(b, ",\"trace\":");
		nt_json_cstring(b, a->trace_file);
		bb_printf(b, ",\"rotate_mb\":%llu,\"rotate_s\":%u,\"merge\":%s,\"merging\":%s,"
			  "\"merged_last\":", (unsigned long long)(a->o.rotate_bytes >> 20), a->o.rotate_s,
			  a->o.merge ? "true" : "false", a->merging ? "true" : "false");
		if (a->merged_last[0])
			nt_json_cstring(b, a->merged_last);
		else
			bb_printf(b, "null");
		bb_printf(b, ",\"joined_total\":%llu,\"containers\":%zu,\"processes\":[",
			  (unsigned long long)a->joined_total, a->ncontainers);
	} else {
		bb_printf(b, "agent pid %d, socket %s, output %s\n", getpid(), a->socket_path,
			  a->o.out_dir);
		bb_printf(b, "processes: %zu joined now, %llu in all, %zu .NET; containers: %zu\n",
			  a->nlive, (unsigned long long)a->joined_total, ndn, a->ncontainers);
		bb_printf(b, "trace %s; rotation: ", a->trace_file);
		if (a->o.rotate_bytes)
			bb_printf(b, "at %llu MiB%s", (unsigned long long)(a->o.rotate_bytes >> 20),
				  a->o.rotate_s ? ", " : "");
		if (a->o.rotate_s)
			bb_printf(b, "every %u s", a->o.rotate_s);
		if (!a->o.rotate_bytes && !a->o.rotate_s)
			bb_printf(b, "off");
		if (a->o.merge)
			bb_printf(b, "; merge: %s%s", a->merging ? "running, last " : "last ",
				  a->merged_last[0] ? a->merged_last : "none yet");
		bb_printf(b, "\n");
		bb_printf(b, "%8s  %-16s %-12s %-22s %12s %10s  %s\n", "PID", "COMM", "CONTAINER",
			  "STATE", "EVENTS", "LOST", "FILE");
	}
	for (c = a->live; c; c = c->next)
		if (c->kind == CONN_PROC && c->rs)
			proc_line(b, json, c, true, &first);
	for (c = a->ended; c; c = c->next)
		proc_line(b, json, c, false, &first);
	pthread_mutex_unlock(&a->lock);
	for (i = 0; i < ndn; i++) {
		const char *st = v[i].state == AGENT_DN_TRACING ? "tracing" :
				 v[i].state == AGENT_DN_STARTING ? "starting" :
				 v[i].state == AGENT_DN_ENDED ? "exited" : "failed";

		if (json) {
			bb_printf(b, "%s{\"pid\":%u,\"start_time\":%llu,\"comm\":", first ? "" : ",",
				  v[i].pid, (unsigned long long)v[i].start_time);
			nt_json_cstring(b, v[i].comm);
			bb_printf(b, ",\"source\":\"dotnet\",\"state\":\"%s\",\"bytes\":%llu,\"events\":%llu,"
				  "\"lost\":%lld,\"file\":", st, (unsigned long long)v[i].bytes,
				  (unsigned long long)v[i].events, (long long)v[i].lost);
			nt_json_cstring(b, v[i].file);
			bb_printf(b, "}");
			first = false;
		} else {
			bb_printf(b, "%8u  %-16s %-12s %-22s %12llu %10lld  %s\n", v[i].pid, v[i].comm,
				  "(.NET)", st, (unsigned long long)v[i].events, (long long)v[i].lost,
				  v[i].file);
		}
	}
	if (json)
		bb_printf(b, "]");
	if (a->eg) {
		bb_printf(b, "%s", json ? ",\"egress\":" : "");
		egress_status(a->eg, json, b);
	}
	if (a->otlp) {
		bb_printf(b, "%s", json ? ",\"otlp\":" : "");
		egress_status(a->otlp, json, b);
	}
	if (json)
		bb_printf(b, "}\n");
}

int agent_status_query(const char *path, bool json, struct bytebuf *out)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct rp_agent_hdr h = rp_agent_hdr(RP_AM_STATUS, sizeof(h), json ? RP_AM_F_JSON : 0);
	uint8_t *buf;
	int fd, err = 0;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path ? path : RP_AGENT_DEFAULT_SOCKET);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		err = -errno;
		close(fd);
		return err;
	}
	buf = malloc(RP_AGENT_MAX_MSG);
	err = buf ? rp_agent_send(fd, &h, sizeof(h), -1, 2000) : -ENOMEM;
	while (!err) {
		ssize_t n = rp_agent_recv(fd, buf, RP_AGENT_MAX_MSG, NULL, 5000);
		const struct rp_agent_hdr *r = (const void *)buf;

		if (n < 0) {
			err = (int)n;
			break;
		}
		if (n == 0 || rp_agent_hdr_check(buf, (size_t)n) || r->type != RP_AM_STATUS_REPLY) {
			err = n == 0 && out->len ? 0 : -EPROTO;
			break;
		}
		bb_append(out, buf + sizeof(*r), (size_t)n - sizeof(*r));
		if (!(r->flags & RP_AM_F_MORE))
			break;
	}
	free(buf);
	close(fd);
	/* text: NUL-terminated for the caller, not counted */
	bb_append(out, "", 1);
	if (out->len)
		out->len--;
	return out->oom ? -ENOMEM : err;
}
