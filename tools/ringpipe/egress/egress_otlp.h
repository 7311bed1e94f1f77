/* SPDX-License-Identifier: MIT */
/*
 * The egress's batches for an OpenTelemetry receiver (--otlp): the same
 * files cut the same way as for ClickHouse (egress_batch.h), encoded as an
 * OTLP ExportLogsServiceRequest (otlp_logs.h), one log record per event.
 *
 * One ResourceLogs per process (host.name, process.pid, service.name,
 * service.instance.id, and container.id, k8s.pod.uid when it has them),
 * one ScopeLogs per provider, named by it; each record's body is the
 * event's name, its severity from the event's level, its attributes the
 * decoded fields and the event's id, thread and activity ids. What a file
 * lost is a record too: body "EventsLost" in scope "ringpipe-agent", with
 * attributes ringpipe.loss.reason and ringpipe.loss.count.
 *
 * A spooled OTLP batch (little-endian):
 *   "RPOL" u8 version u32 stream u64 seq u32 records u64 len body[len]
 * where body is the request as sent (Content-Type application/x-protobuf).
 */
#ifndef RINGPIPE_AGENT_EGRESS_OTLP_H
#define RINGPIPE_AGENT_EGRESS_OTLP_H

#include <stddef.h>
#include <stdint.h>

#include "util/bytebuf.h"
#include "egress/egress_batch.h"

struct egress_otlp_batch {
	uint32_t stream;
	uint64_t seq;
	uint32_t records;	/* log records in body */
	const uint8_t *body;	/* into the spooled bytes */
	size_t len;
};

/* The file's next batch into out (emptied first): 1, 0 when the file gave
 * all of them, -ENOMEM. A damaged file ends there, why in err. */
int egress_otlp_next(struct egress_source *s, const struct egress_name *n, struct bytebuf *out,
		     char *err, size_t errlen);

/* A batch of loss records only (the egress_full counts): 0, or -ENOMEM. */
int egress_otlp_loss_batch(const struct egress_name *n, uint32_t stream, uint64_t seq,
			   const struct egress_loss *l, size_t nl, struct bytebuf *out);

/* Reads a spooled batch: 0, or -EBADMSG when p is not one. */
int egress_otlp_parse(const void *p, size_t len, struct egress_otlp_batch *b);

#endif /* RINGPIPE_AGENT_EGRESS_OTLP_H */
