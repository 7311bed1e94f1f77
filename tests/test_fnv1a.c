// SPDX-License-Identifier: MIT
/*
 * The tools' one FNV-1a (common/fnv1a.h) against the published 64-bit test
 * vectors, and its steps against the whole.
 */
#include <inttypes.h>

#include "common/fnv1a.h"
#include "helpers.h"

/* FNV-1a 64 of the bytes of s, from the published table of test vectors */
static const struct {
	const char *s;
	uint64_t hash;
} vectors[] = {
	{ "", 0xcbf29ce484222325ull },
	{ "a", 0xaf63dc4c8601ec8cull },
	{ "b", 0xaf63df4c8601f1a5ull },
	{ "foobar", 0x85944171f73967e8ull },
};

Test(fnv1a, strings_hash_to_the_published_vectors)
{
	size_t i;

	for (i = 0; i < sizeof(vectors) / sizeof(vectors[0]); i++) {
		uint64_t by_str = fnv1a64_str(fnv1a64_start(), vectors[i].s);
		uint64_t by_bytes = fnv1a64_bytes(fnv1a64_start(), vectors[i].s,
						  strlen(vectors[i].s));

		cr_assert_eq(by_str, vectors[i].hash, "\"%s\": expected %#" PRIx64 ", got %#"
			     PRIx64, vectors[i].s, vectors[i].hash, by_str);
		cr_assert_eq(by_bytes, vectors[i].hash, "\"%s\" as bytes: expected %#" PRIx64
			     ", got %#" PRIx64, vectors[i].s, vectors[i].hash, by_bytes);
	}
	cr_assert_eq(fnv1a64_start(), 14695981039346656037ull, "the offset basis");
}

Test(fnv1a, parts_hash_as_their_concatenation)
{
	uint64_t h = fnv1a64_str(fnv1a64_start(), "foo");

	h = fnv1a64_bytes(h, "b", 1);
	cr_assert_eq(fnv1a64_str(h, "ar"), 0x85944171f73967e8ull, "\"foo\" + \"b\" + \"ar\"");
}

Test(fnv1a, a_u64_hashes_as_its_bytes_least_significant_first)
{
	const uint8_t le[8] = { 0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01 };
	uint64_t want = fnv1a64_bytes(fnv1a64_start(), le, sizeof(le));

	cr_assert_eq(fnv1a64_u64(fnv1a64_start(), 0x0102030405060708ull), want,
		     "0x0102030405060708 as 08 07 06 05 04 03 02 01");
}
