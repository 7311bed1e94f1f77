// SPDX-License-Identifier: MIT
/*
 * Finished trace files into OTLP logs requests (egress_otlp.h).
 *
 * Records keep the file's order. A new ResourceLogs starts whenever the
 * process changes (in a per-process file: never) and a new ScopeLogs
 * whenever the provider does, so a batch of one process and one provider
 * is one resource with one scope, however many records it holds.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "egress/egress_otlp.h"
#include "host/identity.h"
#include "nettrace_read.h"
#include "wire/otlp_logs.h"
#include "wire/rowbinary.h"

#define OTLP_MAGIC "RPOL"
#define OTLP_VERSION 1
#define HEADER_LEN (4 + 1 + 4 + 8 + 4 + 8)
#define MAX_ATTRS 40		/* the decoded fields (32 at most) and ours */
#define LOSS_SCOPE "ringpipe-agent"

/* A batch being made */
struct otlp_batch {
	struct otlp_writer w;
	struct bytebuf *out;
	const struct egress_name *n;
	uint64_t observed_ns;
	uint32_t records;
	bool have_pid;
	uint32_t pid;			/* the open resource's */
	const char *provider;		/* the open scope's, NULL: none */
};

static uint64_t wall_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static struct otlp_kv kv_str(const char *key, const char *v)
{
	return (struct otlp_kv){ .key = key, .type = OTLP_STRING, .s = v, .len = strlen(v) };
}

static struct otlp_kv kv_int(const char *key, int64_t v)
{
	return (struct otlp_kv){ .key = key, .type = OTLP_INT, .i = v };
}

static void batch_begin(struct otlp_batch *b, const struct egress_name *n, struct bytebuf *out)
{
	memset(b, 0, sizeof(*b));
	b->out = out;
	b->n = n;
	b->observed_ns = wall_ns();
	out->len = 0;
	bb_append(out, OTLP_MAGIC, 4);
	bb_append_u8(out, OTLP_VERSION);
	/* stream, seq, records and len are filled in by batch_finish() */
	bb_append(out, (const uint8_t[HEADER_LEN - 5]){ 0 }, HEADER_LEN - 5);
	otlp_begin(&b->w, out);
}

/* What a resource says of its process ("" and 0: not known) */
struct otlp_process {
	uint32_t pid;
	uint64_t start_time;
	const char *comm, *container_id, *pod_uid;
};

/* The process of an identity, or of a pid alone (id NULL) */
static struct otlp_process process_of(uint32_t pid, const struct agent_identity *id)
{
	if (!id || id->pid != pid)
		return (struct otlp_process){ .pid = pid, .comm = "", .container_id = "",
					      .pod_uid = "" };
	return (struct otlp_process){ pid, id->start_time, id->comm, id->tags.container_id,
				      id->tags.pod_uid };
}

/*
 * The resource of a process. service.instance.id tells apart the processes
 * of one name (and receivers such as the Aspire dashboard merge resources
 * of the same name and instance): host, pid and start time, which pid
 * reuse does not repeat.
 */
static void open_resource(struct otlp_batch *b, const struct otlp_process *p)
{
	struct otlp_kv kv[8];
	char instance[320];
	size_t n = 0;

	if (b->have_pid && b->pid == p->pid)
		return;
	snprintf(instance, sizeof(instance), "%s/%" PRIu32 "/%" PRIu64, b->n->host, p->pid,
		 p->start_time);
	kv[n++] = kv_str("service.name", p->comm[0] ? p->comm : "unknown_service");
	kv[n++] = kv_str("service.instance.id", instance);
	kv[n++] = kv_str("host.name", b->n->host);
	kv[n++] = kv_int("process.pid", p->pid);
	if (p->container_id[0])
		kv[n++] = kv_str("container.id", p->container_id);
	if (p->pod_uid[0])
		kv[n++] = kv_str("k8s.pod.uid", p->pod_uid);
	otlp_resource(&b->w, kv, n);
	b->have_pid = true;
	b->pid = p->pid;
	b->provider = NULL;
}

static void open_scope(struct otlp_batch *b, const char *provider)
{
	if (b->provider && !strcmp(b->provider, provider))
		return;
	otlp_scope(&b->w, provider);
	b->provider = provider;
}

/* A decoded field as an attribute of its type (the text is what the
 * ClickHouse rows hold; numbers are numbers again here) */
static struct otlp_kv field_kv(const char *key, uint8_t type, const struct fleet_str *v,
			       char *num, size_t numlen)
{
	struct otlp_kv kv = { .key = key, .type = OTLP_STRING, .s = v->p, .len = v->len };

	if (type == NT_STRING || v->len >= numlen)
		return kv;
	memcpy(num, v->p, v->len);
	num[v->len] = 0;
	if (type == NT_F64) {
		kv.type = OTLP_DOUBLE;
		kv.d = strtod(num, NULL);
	} else if (type == NT_BOOL) {
		kv.type = OTLP_BOOL;
		kv.i = strcmp(num, "0") != 0;
	} else if (type == NT_U64 && num[0] != '-' && strtoull(num, NULL, 10) > INT64_MAX) {
		return kv;	/* beyond OTLP's int64: kept as its text */
	} else {
		kv.type = OTLP_INT;
		kv.i = strtoll(num, NULL, 10);
	}
	return kv;
}

static bool uuid_zero(const uint8_t u[16])
{
	static const uint8_t zero[16];

	return !memcmp(u, zero, 16);
}

static void event_record(struct otlp_batch *b, const struct egress_source *s,
			 const struct egress_event *ev)
{
	struct otlp_process proc = process_of(ev->pid, egress_source_identity(s));
	const struct nt_meta *m = ev->rec->meta;
	struct otlp_kv kv[MAX_ATTRS];
	char nums[MAX_ATTRS][24], activity[37], related[37];
	struct otlp_record r = { 0 };
	size_t n = 0, i;

	/* a file of many processes (the agent's own) has no identity: each
	 * of its processes is a resource of a pid alone */
	open_resource(b, &proc);
	open_scope(b, m && m->provider ? m->provider : "");
	for (i = 0; i < ev->nfields && n < MAX_ATTRS - 6; i++, n++)
		kv[n] = field_kv(ev->names[i].p, m->fields[i].type.code, &ev->values[i], nums[n],
				 sizeof(nums[n]));
	kv[n++] = kv_int("event.id", m ? m->event_id : 0);
	kv[n++] = kv_int("thread.id", ev->rec->tid);
	if (m && m->keywords)
		kv[n++] = kv_int("event.keywords", (int64_t)m->keywords);
	if (!ev->nfields && ev->rec->payload_len)
		kv[n++] = (struct otlp_kv){ .key = "event.payload", .type = OTLP_BYTES,
					    .s = (const char *)ev->rec->payload,
					    .len = ev->rec->payload_len };
	if (!uuid_zero(ev->rec->activity)) {
		rb_uuid_format(ev->rec->activity, activity);
		kv[n++] = kv_str("event.activity_id", activity);
	}
	if (!uuid_zero(ev->rec->related)) {
		rb_uuid_format(ev->rec->related, related);
		kv[n++] = kv_str("event.related_activity_id", related);
	}
	r.time_ns = ev->time_ns;
	r.observed_ns = b->observed_ns;
	r.severity = otlp_severity_of_level(m ? m->level : 0);
	r.severity_text = otlp_level_name(m ? m->level : 0);
	r.body = m && m->name ? m->name : "";
	r.attrs = kv;
	r.nattrs = n;
	otlp_log(&b->w, &r);
	b->records++;
}

static void loss_record(struct otlp_batch *b, const struct agent_identity *id,
			const struct egress_loss *l)
{
	struct otlp_process proc = process_of(l->pid, id);
	struct otlp_kv kv[3];
	struct otlp_record r = { 0 };
	size_t n = 0;

	if (!id) {
		/* a loss of a file given up: what the egress kept of its process */
		proc.start_time = l->start_time;
		proc.comm = l->comm ? l->comm : "";
		proc.container_id = l->container_id ? l->container_id : "";
		proc.pod_uid = l->pod_uid ? l->pod_uid : "";
	}
	open_resource(b, &proc);
	open_scope(b, LOSS_SCOPE);
	kv[n++] = kv_str("ringpipe.loss.reason", l->reason);
	kv[n++] = kv_int("ringpipe.loss.count", (int64_t)l->count);
	if (l->tid)
		kv[n++] = kv_int("thread.id", l->tid);
	r.time_ns = l->time_ns;
	r.observed_ns = b->observed_ns;
	r.severity = otlp_severity_of_level(3);	/* Warning */
	r.severity_text = otlp_level_name(3);
	r.body = "EventsLost";
	r.attrs = kv;
	r.nattrs = n;
	otlp_log(&b->w, &r);
	b->records++;
}

static int batch_finish(struct otlp_batch *b, uint32_t stream, uint64_t seq)
{
	uint8_t *h;

	if (otlp_finish(&b->w) || b->out->oom)
		return -ENOMEM;
	h = b->out->p + 5;
	memcpy(h, &stream, 4);
	memcpy(h + 4, &seq, 8);
	memcpy(h + 12, &b->records, 4);
	memcpy(h + 16, &(uint64_t){ b->out->len - HEADER_LEN }, 8);
	return 0;
}

struct loss_arg {
	struct otlp_batch *b;
	const struct agent_identity *id;
};

static void loss_to_record(void *arg, const struct egress_loss *l)
{
	struct loss_arg *a = arg;

	loss_record(a->b, a->id, l);
}

int egress_otlp_next(struct egress_source *s, const struct egress_name *n, struct bytebuf *out,
		     char *err, size_t errlen)
{
	struct otlp_batch b;
	struct egress_event ev;
	int rc = 0;

	if (egress_source_ended(s))
		return 0;
	batch_begin(&b, n, out);
	while (b.records < n->batch_rows && out->len < n->batch_bytes &&
	       (rc = egress_source_event(s, &ev, err, errlen)) > 0)
		event_record(&b, s, &ev);
	if (!rc) {
		struct loss_arg a = { &b, egress_source_identity(s) };

		egress_source_losses(s, loss_to_record, &a);
		/* a file that ends at a batch's end, and lost nothing, needs
		 * no empty request */
		if (!b.records)
			return 0;
	}
	rc = batch_finish(&b, egress_source_stream(s), egress_source_take_seq(s));
	return rc ? rc : 1;
}

int egress_otlp_loss_batch(const struct egress_name *n, uint32_t stream, uint64_t seq,
			   const struct egress_loss *l, size_t nl, struct bytebuf *out)
{
	struct otlp_batch b;
	size_t i;

	batch_begin(&b, n, out);
	for (i = 0; i < nl; i++)
		loss_record(&b, NULL, &l[i]);
	return batch_finish(&b, stream, seq);
}

int egress_otlp_parse(const void *p, size_t len, struct egress_otlp_batch *b)
{
	const uint8_t *h = p;
	uint64_t body;

	memset(b, 0, sizeof(*b));
	if (len < HEADER_LEN || memcmp(h, OTLP_MAGIC, 4) || h[4] != OTLP_VERSION)
		return -EBADMSG;
	memcpy(&b->stream, h + 5, 4);
	memcpy(&b->seq, h + 9, 8);
	memcpy(&b->records, h + 17, 4);
	memcpy(&body, h + 21, 8);
	if (body != len - HEADER_LEN)
		return -EBADMSG;
	b->body = h + HEADER_LEN;
	b->len = (size_t)body;
	return 0;
}
