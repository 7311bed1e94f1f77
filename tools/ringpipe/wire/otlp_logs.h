/* SPDX-License-Identifier: MIT */
/*
 * OTLP logs, encoded as protobuf (protobuf.h): an ExportLogsServiceRequest
 * (opentelemetry-proto collector/logs/v1) written front to back, and the
 * ExportLogsServiceResponse a receiver answers, read.
 *
 *   request:  resource_logs*  { resource { attributes* }
 *                               scope_logs* { scope { name } log_records* } }
 *
 * A writer opens a resource, writes its attributes, opens a scope, writes
 * its records, and so on; closing what is open is implied by opening the
 * next one of the same level and by otlp_finish().
 */
#ifndef RINGPIPE_OTLP_LOGS_H
#define RINGPIPE_OTLP_LOGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/bytebuf.h"

enum otlp_type {
	OTLP_STRING,
	OTLP_BOOL,
	OTLP_INT,
	OTLP_DOUBLE,
	OTLP_BYTES,
};

/* An attribute: a key and a value of one type */
struct otlp_kv {
	const char *key;
	enum otlp_type type;
	const char *s;		/* OTLP_STRING (UTF-8), OTLP_BYTES */
	size_t len;		/* of s */
	int64_t i;		/* OTLP_INT, OTLP_BOOL (0 or 1) */
	double d;		/* OTLP_DOUBLE */
};

struct otlp_record {
	uint64_t time_ns;		/* when it happened, 0: unknown */
	uint64_t observed_ns;		/* when the sender saw it */
	uint32_t severity;		/* SeverityNumber, 0: unspecified */
	const char *severity_text;	/* NULL: none */
	const char *body;		/* a string body */
	const struct otlp_kv *attrs;
	size_t nattrs;
};

struct otlp_writer {
	struct bytebuf *b;
	size_t resource_logs, scope_logs;	/* where the open ones start */
	bool in_resource, in_scope;
};

/* Starts a request into b (appended to what b holds). */
void otlp_begin(struct otlp_writer *w, struct bytebuf *b);
/* A new ResourceLogs with these resource attributes. */
void otlp_resource(struct otlp_writer *w, const struct otlp_kv *attrs, size_t n);
/* A new ScopeLogs in the open resource, its scope named name. */
void otlp_scope(struct otlp_writer *w, const char *name);
/* A LogRecord in the open scope. */
void otlp_log(struct otlp_writer *w, const struct otlp_record *r);
/* Closes what is open: 0, or -ENOMEM (the buffer's oom). */
int otlp_finish(struct otlp_writer *w);

/* ExportLogsServiceResponse: partial_success's rejected_log_records and
 * error_message (both 0 / "" for a full success, also for an empty body) */
struct otlp_response {
	int64_t rejected;
	char message[512];
};

/* Reads a response body: 0, or -EBADMSG when it is not protobuf of one. */
int otlp_response_parse(const void *p, size_t len, struct otlp_response *r);

/* OTLP's SeverityNumber for an EventLevel (0 LogAlways .. 5 Verbose), and
 * its name ("Critical", ...) as severity_text */
uint32_t otlp_severity_of_level(uint8_t level);
const char *otlp_level_name(uint8_t level);

#endif /* RINGPIPE_OTLP_LOGS_H */
