// SPDX-License-Identifier: MIT
/*
 * OTLP logs as protobuf (otlp_logs.h). Field numbers are those of
 * opentelemetry-proto: collector/logs/v1, logs/v1, common/v1, resource/v1.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "wire/otlp_logs.h"
#include "wire/protobuf.h"

/* ExportLogsServiceRequest */
#define REQ_RESOURCE_LOGS 1
/* ResourceLogs */
#define RL_RESOURCE 1
#define RL_SCOPE_LOGS 2
/* Resource */
#define RES_ATTRIBUTES 1
/* ScopeLogs */
#define SL_SCOPE 1
#define SL_LOG_RECORDS 2
/* InstrumentationScope */
#define SCOPE_NAME 1
/* LogRecord */
#define LR_TIME 1		/* fixed64 */
#define LR_SEVERITY_NUMBER 2
#define LR_SEVERITY_TEXT 3
#define LR_BODY 5
#define LR_ATTRIBUTES 6
#define LR_OBSERVED_TIME 11	/* fixed64 */
/* KeyValue */
#define KV_KEY 1
#define KV_VALUE 2
/* AnyValue */
#define AV_STRING 1
#define AV_BOOL 2
#define AV_INT 3
#define AV_DOUBLE 4
#define AV_BYTES 7
/* ExportLogsServiceResponse, ExportLogsPartialSuccess */
#define RESP_PARTIAL_SUCCESS 1
#define PS_REJECTED 1
#define PS_MESSAGE 2

static void any_string(struct bytebuf *b, uint32_t field, const char *s, size_t len)
{
	size_t m = pb_open(b);

	pb_bytes(b, AV_STRING, s, len);
	pb_close(b, m, field);
}

static void key_value(struct bytebuf *b, uint32_t field, const struct otlp_kv *kv)
{
	size_t m = pb_open(b), v;

	pb_string(b, KV_KEY, kv->key);
	v = pb_open(b);
	switch (kv->type) {
	case OTLP_STRING:
		pb_bytes(b, AV_STRING, kv->s, kv->len);
		break;
	case OTLP_BOOL:
		pb_varint(b, AV_BOOL, kv->i != 0);
		break;
	case OTLP_INT:
		pb_varint(b, AV_INT, (uint64_t)kv->i);	/* int64: two's complement */
		break;
	case OTLP_DOUBLE:
		pb_double(b, AV_DOUBLE, kv->d);
		break;
	case OTLP_BYTES:
		pb_bytes(b, AV_BYTES, kv->s, kv->len);
		break;
	}
	pb_close(b, v, KV_VALUE);
	pb_close(b, m, field);
}

void otlp_begin(struct otlp_writer *w, struct bytebuf *b)
{
	memset(w, 0, sizeof(*w));
	w->b = b;
}

static void close_scope(struct otlp_writer *w)
{
	if (w->in_scope)
		pb_close(w->b, w->scope_logs, RL_SCOPE_LOGS);
	w->in_scope = false;
}

static void close_resource(struct otlp_writer *w)
{
	close_scope(w);
	if (w->in_resource)
		pb_close(w->b, w->resource_logs, REQ_RESOURCE_LOGS);
	w->in_resource = false;
}

void otlp_resource(struct otlp_writer *w, const struct otlp_kv *attrs, size_t n)
{
	size_t m, i;

	close_resource(w);
	w->resource_logs = pb_open(w->b);
	w->in_resource = true;
	m = pb_open(w->b);
	for (i = 0; i < n; i++)
		key_value(w->b, RES_ATTRIBUTES, &attrs[i]);
	pb_close(w->b, m, RL_RESOURCE);
}

void otlp_scope(struct otlp_writer *w, const char *name)
{
	size_t m;

	close_scope(w);
	w->scope_logs = pb_open(w->b);
	w->in_scope = true;
	m = pb_open(w->b);
	pb_string(w->b, SCOPE_NAME, name);
	pb_close(w->b, m, SL_SCOPE);
}

void otlp_log(struct otlp_writer *w, const struct otlp_record *r)
{
	size_t m = pb_open(w->b), i;

	/* proto3: a field at its default value is left out */
	if (r->time_ns)
		pb_fixed64(w->b, LR_TIME, r->time_ns);
	if (r->severity)
		pb_varint(w->b, LR_SEVERITY_NUMBER, r->severity);
	if (r->severity_text && *r->severity_text)
		pb_string(w->b, LR_SEVERITY_TEXT, r->severity_text);
	if (r->body)
		any_string(w->b, LR_BODY, r->body, strlen(r->body));
	for (i = 0; i < r->nattrs; i++)
		key_value(w->b, LR_ATTRIBUTES, &r->attrs[i]);
	if (r->observed_ns)
		pb_fixed64(w->b, LR_OBSERVED_TIME, r->observed_ns);
	pb_close(w->b, m, SL_LOG_RECORDS);
}

int otlp_finish(struct otlp_writer *w)
{
	close_resource(w);
	return w->b->oom ? -ENOMEM : 0;
}

static int partial_success(const uint8_t *p, const uint8_t *end, struct otlp_response *r)
{
	struct pb_field f;
	int rc;

	while ((rc = pb_next(&p, end, &f)) > 0) {
		if (f.number == PS_REJECTED && f.wire == PB_VARINT)
			r->rejected = (int64_t)f.u;
		else if (f.number == PS_MESSAGE && f.wire == PB_LEN)
			snprintf(r->message, sizeof(r->message), "%.*s", (int)f.len, (const char *)f.p);
	}
	return rc;
}

int otlp_response_parse(const void *body, size_t len, struct otlp_response *r)
{
	const uint8_t *p = body, *end = p + len;
	struct pb_field f;
	int rc;

	memset(r, 0, sizeof(*r));
	/* fields it does not know are skipped, as protobuf readers do */
	while ((rc = pb_next(&p, end, &f)) > 0)
		if (f.number == RESP_PARTIAL_SUCCESS && f.wire == PB_LEN &&
		    partial_success(f.p, f.p + f.len, r))
			return -EBADMSG;
	return rc ? -EBADMSG : 0;
}

uint32_t otlp_severity_of_level(uint8_t level)
{
	/* Critical FATAL, Error ERROR, Warning WARN, Informational INFO,
	 * Verbose DEBUG; LogAlways has no severity of its own */
	static const uint8_t number[] = { 0, 21, 17, 13, 9, 5 };

	return level < sizeof(number) ? number[level] : 0;
}

const char *otlp_level_name(uint8_t level)
{
	static const char *const name[] = { "LogAlways", "Critical", "Error", "Warning",
					    "Informational", "Verbose" };

	return level < sizeof(name) / sizeof(name[0]) ? name[level] : "";
}
