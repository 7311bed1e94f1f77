/* SPDX-License-Identifier: MIT */
/*
 * The Protocol Buffers wire format, as much as the OTLP egress needs:
 * writing fields into a bytebuf, and reading the fields of a message back
 * (an OTLP response, and the tests).
 *
 * A field is a varint key (field number << 3 | wire type) and its value:
 * a varint, 8 or 4 little-endian bytes, or a varint length and that many
 * bytes (strings, bytes, embedded messages). An embedded message's length
 * comes before it, so it is written in place after pb_open() and given
 * its key and length by pb_close(), which moves it up by those few bytes.
 * Errors of memory are the bytebuf's: its oom flag, checked once at the end.
 */
#ifndef RINGPIPE_PROTOBUF_H
#define RINGPIPE_PROTOBUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/bytebuf.h"

enum pb_wire {
	PB_VARINT = 0,
	PB_I64 = 1,
	PB_LEN = 2,
	PB_I32 = 5,
};

void pb_varint(struct bytebuf *b, uint32_t field, uint64_t v);
void pb_fixed64(struct bytebuf *b, uint32_t field, uint64_t v);
void pb_fixed32(struct bytebuf *b, uint32_t field, uint32_t v);
void pb_double(struct bytebuf *b, uint32_t field, double v);
void pb_bytes(struct bytebuf *b, uint32_t field, const void *p, size_t n);
void pb_string(struct bytebuf *b, uint32_t field, const char *s);

/* An embedded message: what is written between pb_open() and pb_close()
 * becomes field `field` of the message around it. */
size_t pb_open(const struct bytebuf *b);
void pb_close(struct bytebuf *b, size_t mark, uint32_t field);

/* One field read from a message */
struct pb_field {
	uint32_t number;
	enum pb_wire wire;
	uint64_t u;		/* PB_VARINT, PB_I64, PB_I32 */
	const uint8_t *p;	/* PB_LEN: the bytes */
	size_t len;
};

/* The field at *p (before end) into f, *p moved past it: 1, 0 at end, or
 * -EBADMSG when the bytes are not a field (a group, a length past end). */
int pb_next(const uint8_t **p, const uint8_t *end, struct pb_field *f);

#endif /* RINGPIPE_PROTOBUF_H */
