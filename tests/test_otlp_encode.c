// SPDX-License-Identifier: MIT
/*
 * The protobuf writer and reader (tools/ringpipe/wire/protobuf.h) and the
 * OTLP logs messages on them (otlp_logs.h), held against encodings worked
 * out by hand from the protobuf wire format and the field numbers of
 * opentelemetry-proto (logs/v1, common/v1, resource/v1, collector/logs/v1).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "helpers.h"
#include "wire/otlp_logs.h"
#include "wire/protobuf.h"

static void expect_bytes(const struct bytebuf *b, const uint8_t *want, size_t n)
{
	size_t i;

	cr_assert_eq(b->oom, 0);
	cr_assert_eq(b->len, n, "%zu bytes, expected %zu", b->len, n);
	for (i = 0; i < n; i++)
		cr_assert_eq(b->p[i], want[i], "byte %zu is 0x%02x, expected 0x%02x", i, b->p[i],
			     want[i]);
}

Test(otlp_encode, one_record_request_is_the_hand_encoded_bytes)
{
	static const uint8_t want[] = {
		0x0a, 0x4c,			/* request.resource_logs, 76 bytes */
		0x0a, 0x0a,			/*  resource, 10 */
		0x0a, 0x08,			/*   attributes, 8 */
		0x0a, 0x01, 'k',		/*    key "k" */
		0x12, 0x03, 0x0a, 0x01, 'v',	/*    value { string_value "v" } */
		0x12, 0x3e,			/*  scope_logs, 62 */
		0x0a, 0x03, 0x0a, 0x01, 'P',	/*   scope { name "P" } */
		0x12, 0x37,			/*   log_records, 55 */
		0x09, 0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, /* time, fixed64 */
		0x10, 0x09,			/*    severity_number 9 (INFO) */
		0x1a, 0x01, 'I',		/*    severity_text "I" */
		0x2a, 0x03, 0x0a, 0x01, 'E',	/*    body { string_value "E" } */
		0x32, 0x10, 0x0a, 0x01, 'n',	/*    attributes { key "n" */
		0x12, 0x0b, 0x18,		/*     value { int_value -1: ten bytes } } */
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
		0x32, 0x07, 0x0a, 0x01, 'b',	/*    attributes { key "b" */
		0x12, 0x02, 0x10, 0x01,		/*     value { bool_value true } } */
		0x59, 0x02, 0, 0, 0, 0, 0, 0, 0, /*    observed_time (field 11), fixed64 2 */
	};
	struct otlp_kv res = { .key = "k", .type = OTLP_STRING, .s = "v", .len = 1 };
	struct otlp_kv attrs[] = {
		{ .key = "n", .type = OTLP_INT, .i = -1 },
		{ .key = "b", .type = OTLP_BOOL, .i = 1 },
	};
	struct otlp_record r = { .time_ns = 0x0102030405060708ull, .observed_ns = 2,
				 .severity = 9, .severity_text = "I", .body = "E",
				 .attrs = attrs, .nattrs = 2 };
	struct bytebuf b = { 0 };
	struct otlp_writer w;

	otlp_begin(&w, &b);
	otlp_resource(&w, &res, 1);
	otlp_scope(&w, "P");
	otlp_log(&w, &r);
	cr_assert_eq(otlp_finish(&w), 0);
	expect_bytes(&b, want, sizeof(want));
	bb_free(&b);
}

Test(otlp_encode, a_new_scope_and_resource_close_the_open_ones)
{
	struct bytebuf b = { 0 };
	struct otlp_writer w;
	struct otlp_kv d = { .key = "d", .type = OTLP_DOUBLE, .d = 1.0 };
	struct otlp_record r = { .attrs = &d, .nattrs = 1 };

	otlp_begin(&w, &b);
	otlp_resource(&w, NULL, 0);
	otlp_scope(&w, "A");
	otlp_scope(&w, "B");
	otlp_resource(&w, NULL, 0);
	otlp_scope(&w, "C");
	otlp_log(&w, &r);
	cr_assert_eq(otlp_finish(&w), 0);
	{
		/* the record: attributes { key "d" value { double_value 1.0 } },
		 * 1.0 is 0x3ff0000000000000, little-endian */
		static const uint8_t tail[] = {
			0x12, 0x10,			/*   log_records, 16 */
			0x32, 0x0e, 0x0a, 0x01, 'd',	/*    attributes, 14: key "d" */
			0x12, 0x09, 0x21, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f,
		};
		static const uint8_t head[] = {
			0x0a, 0x10, 0x0a, 0x00,		/* resource_logs, 16; resource {} */
			0x12, 0x05, 0x0a, 0x03, 0x0a, 0x01, 'A', /* scope_logs { scope { "A" } } */
			0x12, 0x05, 0x0a, 0x03, 0x0a, 0x01, 'B', /* no records in either */
			0x0a, 0x1b, 0x0a, 0x00,		/* resource_logs, 27; resource {} */
			0x12, 0x17,			/*  scope_logs, 23 */
			0x0a, 0x03, 0x0a, 0x01, 'C',
		};
		uint8_t all[sizeof(head) + sizeof(tail)];

		memcpy(all, head, sizeof(head));
		memcpy(all + sizeof(head), tail, sizeof(tail));
		expect_bytes(&b, all, sizeof(all));
	}
	bb_free(&b);
}

Test(otlp_encode, a_long_embedded_message_gets_a_two_byte_length)
{
	struct bytebuf b = { 0 };
	char text[200];
	size_t m;

	memset(text, 'a', sizeof(text));
	bb_append(&b, "\x08\x01", 2);		/* a field before it stays in place */
	m = pb_open(&b);
	pb_bytes(&b, 1, text, sizeof(text));	/* 0a c8 01, then 200 bytes */
	pb_close(&b, m, 2);
	cr_assert_eq(b.len, 2 + 3 + 3 + 200);
	cr_assert_eq(memcmp(b.p, "\x08\x01\x12\xcb\x01\x0a\xc8\x01", 8), 0);
	cr_assert_eq(b.p[b.len - 1], 'a');
	bb_free(&b);
}

Test(otlp_encode, fields_read_back_as_written)
{
	struct bytebuf b = { 0 };
	struct pb_field f;
	const uint8_t *p, *end;

	pb_varint(&b, 1, 300);
	pb_fixed64(&b, 2, 0x1122334455667788ull);
	pb_string(&b, 15, "xy");
	pb_fixed32(&b, 16, 7);
	p = b.p;
	end = b.p + b.len;
	cr_assert_eq(memcmp(b.p, "\x08\xac\x02", 3), 0, "300 is ac 02");
	cr_assert_eq(pb_next(&p, end, &f), 1);
	cr_assert(f.number == 1 && f.wire == PB_VARINT && f.u == 300);
	cr_assert_eq(pb_next(&p, end, &f), 1);
	cr_assert(f.number == 2 && f.wire == PB_I64 && f.u == 0x1122334455667788ull);
	cr_assert_eq(pb_next(&p, end, &f), 1);
	cr_assert(f.number == 15 && f.wire == PB_LEN && f.len == 2 && !memcmp(f.p, "xy", 2));
	cr_assert_eq(pb_next(&p, end, &f), 1);
	cr_assert(f.number == 16 && f.wire == PB_I32 && f.u == 7);
	cr_assert_eq(pb_next(&p, end, &f), 0);
	bb_free(&b);
}

Test(otlp_encode, responses_say_what_was_rejected)
{
	/* partial_success { rejected_log_records 5, error_message "bad" } */
	static const uint8_t partial[] = { 0x0a, 0x07, 0x08, 0x05, 0x12, 0x03, 'b', 'a', 'd' };
	/* a field it does not know (9: varint) before it is skipped */
	static const uint8_t unknown[] = { 0x48, 0x01, 0x0a, 0x02, 0x08, 0x02 };
	static const uint8_t cut[] = { 0x0a, 0x09, 0x08, 0x05 };	/* length past the end */
	static const uint8_t group[] = { 0x0b };			/* wire type 3 */
	struct otlp_response r;

	cr_assert_eq(otlp_response_parse(partial, sizeof(partial), &r), 0);
	cr_assert_eq(r.rejected, 5);
	cr_assert_str_eq(r.message, "bad");
	cr_assert_eq(otlp_response_parse(unknown, sizeof(unknown), &r), 0);
	cr_assert_eq(r.rejected, 2);
	cr_assert_eq(otlp_response_parse("", 0, &r), 0, "an empty body is a full success");
	cr_assert_eq(r.rejected, 0);
	cr_assert_eq(otlp_response_parse(cut, sizeof(cut), &r), -EBADMSG);
	cr_assert_eq(otlp_response_parse(group, sizeof(group), &r), -EBADMSG);
}

Test(otlp_encode, event_levels_map_to_otlp_severities)
{
	static const uint32_t want[] = { 0, 21, 17, 13, 9, 5, 0 };
	static const char *const names[] = { "LogAlways", "Critical", "Error", "Warning",
					     "Informational", "Verbose", "" };
	uint8_t l;

	for (l = 0; l <= 6; l++) {
		cr_assert_eq(otlp_severity_of_level(l), want[l], "level %u", l);
		cr_assert_str_eq(otlp_level_name(l), names[l]);
	}
}
