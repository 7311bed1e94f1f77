// SPDX-License-Identifier: MIT
/*
 * utf.c, the one UTF-8 / UTF-16LE converter of the nettrace writer and
 * reader, the IPC protocol and the demo: well-formed text converts exactly
 * both ways; whatever is not well-formed (overlong forms, truncated or
 * stray bytes, surrogates) becomes U+FFFD without swallowing the text after
 * it; NUL is data when a length says so and a terminator when asked for.
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "helpers.h"
#include "utf.h"

#define FFFD 0xfffdu

/* What utf8_next() makes of len bytes: each code point and the bytes it took. */
struct walk {
	uint32_t cp[16];
	size_t took[16];
	size_t n;
};

static struct walk walk(const char *s, size_t len)
{
	const uint8_t *p = (const uint8_t *)s, *end = p + len;
	struct walk w = { .n = 0 };

	while (p < end && w.n < 16) {
		const uint8_t *at = p;

		w.cp[w.n] = utf8_next(&p, end);
		w.took[w.n++] = (size_t)(p - at);
	}
	cr_assert_eq(p, end, "utf8_next() stopped %zu bytes short of the end", (size_t)(end - p));
	return w;
}

/* Expects exactly n code points cp[], taking took[] bytes each. */
static void expect_walk(const char *what, const char *s, size_t len, size_t n,
			const uint32_t *cp, const size_t *took)
{
	struct walk w = walk(s, len);
	size_t i;

	cr_assert_eq(w.n, n, "%s: %zu code points, expected %zu", what, w.n, n);
	for (i = 0; i < n; i++) {
		cr_assert_eq(w.cp[i], cp[i], "%s: code point %zu is U+%04" PRIX32 ", expected U+%04"
			     PRIX32, what, i, w.cp[i], cp[i]);
		cr_assert_eq(w.took[i], took[i], "%s: code point %zu took %zu bytes, expected %zu",
			     what, i, w.took[i], took[i]);
	}
}

#define EXPECT_WALK(what, lit, ...)                                              \
	do {                                                                     \
		static const struct { uint32_t cp; size_t took; } e_[] = { __VA_ARGS__ }; \
		uint32_t cp_[16];                                                \
		size_t took_[16], i_;                                            \
		for (i_ = 0; i_ < sizeof(e_) / sizeof(e_[0]); i_++)              \
			cp_[i_] = e_[i_].cp, took_[i_] = e_[i_].took;            \
		expect_walk(what, lit, sizeof(lit) - 1, sizeof(e_) / sizeof(e_[0]), cp_, took_); \
	} while (0)

/* utf8_to_utf16le() of a literal (its length, no NUL) gives units[]. */
static void expect_utf16(const char *what, const char *s, size_t len, const uint16_t *units,
			 size_t n)
{
	struct bytebuf b = { 0 };
	long got = utf8_to_utf16le(&b, s, len, 0);

	cr_assert_eq(got, (long)n, "%s: %ld units, expected %zu", what, got, n);
	cr_assert_eq(b.len, 2 * n, "%s: %zu bytes appended, expected %zu", what, b.len, 2 * n);
	for (size_t i = 0; i < n; i++) {
		uint16_t u;

		memcpy(&u, b.p + 2 * i, 2);
		cr_assert_eq(u, units[i], "%s: unit %zu is 0x%04x, expected 0x%04x", what, i, u,
			     units[i]);
	}
	bb_free(&b);
}

#define EXPECT_UTF16(what, lit, ...)                                             \
	do {                                                                     \
		static const uint16_t u_[] = { __VA_ARGS__ };                    \
		expect_utf16(what, lit, sizeof(lit) - 1, u_, sizeof(u_) / sizeof(u_[0])); \
	} while (0)

/* utf16le_to_utf8() of units[] gives the bytes of want (its length). */
static void expect_utf8(const char *what, const uint16_t *units, size_t n, const char *want,
			size_t want_len)
{
	struct bytebuf b = { 0 };

	utf16le_to_utf8(&b, (const uint8_t *)units, n);
	cr_assert(!b.oom, "%s: out of memory", what);
	cr_assert_eq(b.len, want_len, "%s: %zu UTF-8 bytes, expected %zu", what, b.len, want_len);
	cr_assert(!memcmp(b.p, want, want_len), "%s: the bytes differ", what);
	bb_free(&b);
}

#define EXPECT_UTF8(what, lit, ...)                                              \
	do {                                                                     \
		static const uint16_t u_[] = { __VA_ARGS__ };                    \
		expect_utf8(what, u_, sizeof(u_) / sizeof(u_[0]), lit, sizeof(lit) - 1); \
	} while (0)

#define VALID(lit) utf8_valid(lit, sizeof(lit) - 1)

Test(utf, ascii_passes_through_both_ways_unchanged)
{
	static const char text[] = "Hello, world! ~{}\x7f";
	struct bytebuf b = { 0 }, back = { 0 };
	size_t i, n = sizeof(text) - 1;

	cr_assert_eq(utf8_to_utf16le(&b, text, n, 0), (long)n, "one unit per ASCII byte");
	for (i = 0; i < n; i++)
		cr_assert(b.p[2 * i] == (uint8_t)text[i] && b.p[2 * i + 1] == 0,
			  "unit %zu is %02x %02x, expected %02x 00", i, b.p[2 * i], b.p[2 * i + 1],
			  (uint8_t)text[i]);
	utf16le_to_utf8(&back, b.p, n);
	cr_assert_eq(back.len, n, "back to %zu UTF-8 bytes, expected %zu", back.len, n);
	cr_assert(!memcmp(back.p, text, n), "the text came back changed");
	cr_assert(VALID(text), "ASCII is valid UTF-8");
	bb_free(&b);
	bb_free(&back);
}

Test(utf, two_three_and_four_byte_sequences_decode_to_their_code_points)
{
	EXPECT_WALK("U+0080, the first 2-byte", "\xC2\x80", { 0x80, 2 });
	EXPECT_WALK("e acute", "\xC3\xA9", { 0xE9, 2 });
	EXPECT_WALK("U+07FF, the last 2-byte", "\xDF\xBF", { 0x7FF, 2 });
	EXPECT_WALK("U+0800, the first 3-byte", "\xE0\xA0\x80", { 0x800, 3 });
	EXPECT_WALK("euro sign", "\xE2\x82\xAC", { 0x20AC, 3 });
	EXPECT_WALK("U+FFFF, the last 3-byte", "\xEF\xBF\xBF", { 0xFFFF, 3 });
	EXPECT_WALK("U+10000, the first 4-byte", "\xF0\x90\x80\x80", { 0x10000, 4 });
	EXPECT_WALK("grinning face", "\xF0\x9F\x98\x80", { 0x1F600, 4 });
	EXPECT_WALK("U+10FFFF, the last scalar value", "\xF4\x8F\xBF\xBF", { 0x10FFFF, 4 });
	EXPECT_WALK("mixed", "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80z",
		    { 'a', 1 }, { 0xE9, 2 }, { 0x20AC, 3 }, { 0x1F600, 4 }, { 'z', 1 });
	EXPECT_UTF16("mixed to UTF-16", "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80z",
		     'a', 0xE9, 0x20AC, 0xD83D, 0xDE00, 'z');
	cr_assert(VALID("a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80z"), "well-formed text is valid");
	cr_assert(VALID("\xEF\xBF\xBD"), "U+FFFD spelled out is valid, not a decoding failure");
}

Test(utf, every_scalar_value_round_trips_through_utf8_and_utf16)
{
	struct bytebuf b = { 0 };
	uint32_t cp, bad = 0, first_bad = 0;
	const char *why = NULL;

	for (cp = 0; cp <= 0x10FFFF; cp++) {
		char u8[4];
		uint16_t u16[2];
		const uint8_t *p = (const uint8_t *)u8;
		size_t n8, n16, want8 = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
		const char *err = NULL;

		if (cp >= 0xD800 && cp <= 0xDFFF)
			continue;	/* not scalar values: see the lone surrogate test */
		n8 = utf8_put(u8, cp);
		n16 = utf16_put(u16, cp);
		b.len = 0;
		utf16le_to_utf8(&b, (const uint8_t *)u16, n16);
		if (n8 != want8)
			err = "utf8_put() wrote the wrong number of bytes";
		else if (utf8_next(&p, p + n8) != cp || p != (const uint8_t *)u8 + n8)
			err = "utf8_next() did not read back what utf8_put() wrote";
		else if (n16 != (cp >= 0x10000 ? 2u : 1u))
			err = "utf16_put() wrote the wrong number of units";
		else if (b.oom || b.len != n8 || memcmp(b.p, u8, n8))
			err = "utf16le_to_utf8() of utf16_put()'s units is not utf8_put()'s bytes";
		if (err && !bad++) {
			first_bad = cp;
			why = err;
		}
	}
	cr_assert_eq(bad, 0, "%" PRIu32 " code points failed, the first U+%04" PRIX32 ": %s", bad,
		     first_bad, why ? why : "");
	bb_free(&b);
}

Test(utf, surrogate_pairs_are_made_from_four_byte_sequences_and_read_back)
{
	EXPECT_UTF16("U+10000", "\xF0\x90\x80\x80", 0xD800, 0xDC00);
	EXPECT_UTF16("U+1F600", "\xF0\x9F\x98\x80", 0xD83D, 0xDE00);
	EXPECT_UTF16("U+10FFFF", "\xF4\x8F\xBF\xBF", 0xDBFF, 0xDFFF);
	EXPECT_UTF8("pair D800 DC00", "\xF0\x90\x80\x80", 0xD800, 0xDC00);
	EXPECT_UTF8("pair D83D DE00", "\xF0\x9F\x98\x80", 0xD83D, 0xDE00);
	EXPECT_UTF8("pair DBFF DFFF", "\xF4\x8F\xBF\xBF", 0xDBFF, 0xDFFF);
	EXPECT_UTF8("pairs between BMP text", "x\xF0\x9F\x98\x80y\xF4\x8F\xBF\xBF", 'x', 0xD83D,
		    0xDE00, 'y', 0xDBFF, 0xDFFF);
}

Test(utf, overlong_forms_are_replaced_not_decoded)
{
	EXPECT_WALK("NUL in 2 bytes", "\xC0\x80", { FFFD, 2 });
	EXPECT_WALK("U+007F in 2 bytes", "\xC1\xBF", { FFFD, 2 });
	EXPECT_WALK("'/' in 3 bytes", "\xE0\x80\xAF", { FFFD, 3 });
	EXPECT_WALK("U+07FF in 3 bytes", "\xE0\x9F\xBF", { FFFD, 3 });
	EXPECT_WALK("'/' in 4 bytes", "\xF0\x80\x80\xAF", { FFFD, 4 });
	EXPECT_WALK("U+FFFF in 4 bytes", "\xF0\x8F\xBF\xBF", { FFFD, 4 });
	EXPECT_UTF16("an overlong NUL does not end the text", "a\xC0\x80z", 'a', FFFD, 'z');
	cr_assert(!VALID("\xC0\x80"), "overlong NUL is not valid");
	cr_assert(!VALID("\xE0\x80\xAF"), "3-byte overlong is not valid");
	cr_assert(!VALID("\xF0\x8F\xBF\xBF"), "4-byte overlong is not valid");
}

Test(utf, truncated_sequences_give_one_replacement_and_keep_what_follows)
{
	static const char euro[] = "\xE2\x82\xAC";
	const uint8_t *p = (const uint8_t *)euro;

	EXPECT_WALK("lead byte at the end", "\xC3", { FFFD, 1 });
	EXPECT_WALK("3-byte cut after 2", "\xE2\x82", { FFFD, 2 });
	EXPECT_WALK("4-byte cut after 3", "\xF0\x9F\x98", { FFFD, 3 });
	EXPECT_WALK("cut before ASCII", "\xE2\x82" "A", { FFFD, 2 }, { 'A', 1 });
	EXPECT_WALK("cut before another sequence", "\xF0\x9F\xC3\xA9", { FFFD, 2 }, { 0xE9, 2 });
	EXPECT_UTF16("cut, then text", "\xE2\x82" "ab", FFFD, 'a', 'b');
	/* the end bounds the read: a whole sequence past it is not used */
	cr_assert_eq(utf8_next(&p, p + 2), FFFD, "a sequence cut by the end is U+FFFD");
	cr_assert_eq(p, (const uint8_t *)euro + 2, "and it advances to the end, not past it");
	cr_assert(!VALID("\xE2\x82"), "a truncated sequence is not valid");
	cr_assert(!utf8_valid("\xC3\xA9", 1), "nor one cut by the length");
}

Test(utf, lone_surrogates_become_replacement_characters_both_ways)
{
	/* UTF-8 that spells a surrogate (CESU-8 and the like) */
	EXPECT_WALK("U+D800 spelled in UTF-8", "\xED\xA0\x80", { FFFD, 3 });
	EXPECT_WALK("U+DFFF spelled in UTF-8", "\xED\xBF\xBF", { FFFD, 3 });
	EXPECT_WALK("a CESU-8 pair is two replacements", "\xED\xA0\xBD\xED\xB8\x80",
		    { FFFD, 3 }, { FFFD, 3 });
	EXPECT_WALK("U+D7FF and U+E000 around the range", "\xED\x9F\xBF\xEE\x80\x80",
		    { 0xD7FF, 3 }, { 0xE000, 3 });
	cr_assert(!VALID("\xED\xA0\x80"), "a surrogate in UTF-8 is not valid");
	/* UTF-16 surrogates without their other half */
	EXPECT_UTF8("high surrogate before ASCII", "\xEF\xBF\xBD" "A", 0xD800, 'A');
	EXPECT_UTF8("high surrogate at the end", "a\xEF\xBF\xBD", 'a', 0xD83D);
	EXPECT_UTF8("low surrogate alone", "\xEF\xBF\xBD", 0xDC00);
	EXPECT_UTF8("halves in the wrong order", "\xEF\xBF\xBD\xEF\xBF\xBD", 0xDE00, 0xD83D);
	EXPECT_UTF8("two highs, then a low: the second pairs", "\xEF\xBF\xBD\xF0\x9F\x98\x80",
		    0xD83D, 0xD83D, 0xDE00);
}

Test(utf, invalid_lead_bytes_are_replaced_one_byte_at_a_time)
{
	EXPECT_WALK("continuation bytes as leads", "\x80\xBF" "A", { FFFD, 1 }, { FFFD, 1 },
		    { 'A', 1 });
	EXPECT_WALK("F8..FF lead nothing", "\xF8\xFC\xFE\xFF", { FFFD, 1 }, { FFFD, 1 },
		    { FFFD, 1 }, { FFFD, 1 });
	EXPECT_WALK("above U+10FFFF", "\xF4\x90\x80\x80", { FFFD, 4 });
	EXPECT_WALK("F5 leads past U+10FFFF", "\xF5\x80\x80\x80", { FFFD, 4 });
	EXPECT_UTF16("stray bytes in text", "a\xFF" "b\x80", 'a', FFFD, 'b', FFFD);
	cr_assert(!VALID("\x80"), "a lone continuation byte is not valid");
	cr_assert(!VALID("ok\xFF"), "0xFF is never valid");
	cr_assert(!VALID("\xF4\x90\x80\x80"), "past U+10FFFF is not valid");
}

Test(utf, nul_is_data_within_a_length_and_a_terminator_when_asked)
{
	static const uint8_t no_nul_unit[] = { 'A', 0, 0, 'B' };	/* zeros across two units */
	static const uint8_t two_then_nul[] = { 'a', 0, 'b', 0, 0, 0, 'c', 0 };
	struct bytebuf b = { 0 };

	cr_assert_eq(utf8_to_utf16le(&b, "ab", 2, 1), 3, "'a', 'b' and the NUL are 3 units");
	cr_assert(!memcmp(b.p, "a\0b\0\0\0", 6), "the terminator is a 0 unit after the text");
	b.len = 0;
	cr_assert_eq(utf8_to_utf16le(&b, "ab", 2, 0), 2, "without nul, no terminator");
	b.len = 0;
	EXPECT_UTF16("a NUL inside the length is a unit like any other", "a\0b", 'a', 0, 'b');
	EXPECT_UTF8("and back", "a\0b", 'a', 0, 'b');
	cr_assert_eq(utf8_to_utf16z(&b, NULL), 0, "NULL converts as \"\"");
	cr_assert(b.len == 2 && !b.p[0] && !b.p[1], "NULL: one NUL unit, %zu bytes", b.len);
	b.len = 0;
	cr_assert_eq(utf8_to_utf16z(&b, "h\xC3\xA9"), 0, "a C string converts");
	cr_assert(b.len == 6 && !memcmp(b.p, "h\0\xE9\0\0\0", 6), "as 'h', U+00E9, NUL (%zu bytes)",
		  b.len);
	cr_assert_eq(utf16le_strlen(two_then_nul, sizeof(two_then_nul)), 2,
		     "two units before the NUL unit");
	cr_assert_eq(utf16le_strlen(no_nul_unit, sizeof(no_nul_unit)), SIZE_MAX,
		     "zero bytes that straddle two units are no NUL unit");
	cr_assert_eq(utf16le_strlen(two_then_nul, 4), SIZE_MAX, "no NUL within the bytes given");
	cr_assert_eq(utf16le_strlen(two_then_nul + 4, 1), SIZE_MAX, "half a unit is no unit");
	cr_assert_eq(utf16le_strlen(two_then_nul + 4, 2), 0, "an empty string");
	bb_free(&b);
}

Test(utf, conversions_append_and_succeed_without_enomem)
{
	char big[1000];
	struct bytebuf b = { 0 }, full = { .oom = 1 };
	long n;

	memset(big, 'x', sizeof(big));
	cr_assert_eq(bb_append(&b, "pre", 3), 0);
	n = utf8_to_utf16le(&b, "\xC3\xA9", 2, 1);
	cr_assert_eq(n, 2, "U+00E9 and the NUL: %ld units, not an error", n);
	cr_assert(!b.oom, "no allocation failed");
	cr_assert(b.len == 3 + 4 && !memcmp(b.p, "pre\xE9\0\0\0", 7),
		  "appended after what was there (%zu bytes)", b.len);
	/* past the first allocation: the buffer grows as needed */
	n = utf8_to_utf16le(&b, big, sizeof(big), 1);
	cr_assert_eq(n, 1001, "1000 units and the NUL: %ld", n);
	cr_assert(!b.oom && b.len == 7 + 2002, "%zu bytes, expected %d", b.len, 7 + 2002);
	cr_assert(b.p[7] == 'x' && b.p[7 + 1998] == 'x' && !b.p[7 + 2000] && !b.p[7 + 2001],
		  "the long string's first, last and NUL units");
	b.len = 0;
	utf16le_to_utf8(&b, (const uint8_t *)"\xE9\0", 1);
	cr_assert(!b.oom && b.len == 2 && !memcmp(b.p, "\xC3\xA9", 2), "UTF-16 back to UTF-8");
	/* a buffer whose allocation already failed gets nothing, and says so */
	cr_assert_eq(utf8_to_utf16le(&full, "abc", 3, 1), -ENOMEM, "-ENOMEM when it cannot grow");
	cr_assert_eq(full.len, 0, "and nothing appended (%zu bytes)", full.len);
	cr_assert_eq(utf8_to_utf16z(&full, "abc"), -ENOMEM, "utf8_to_utf16z() passes it on");
	utf16le_to_utf8(&full, (const uint8_t *)"a\0", 1);
	cr_assert_eq(full.len, 0, "utf16le_to_utf8() appends nothing either (%zu)", full.len);
	bb_free(&b);
	bb_free(&full);
}

Test(utf, validation_accepts_exactly_well_formed_utf8)
{
	cr_assert(utf8_valid("", 0), "empty text is valid");
	cr_assert(VALID("\xF4\x8F\xBF\xBF\xEF\xBF\xBF\x7F"), "the largest of each length");
	cr_assert(!VALID("ok\xED\xA0\x80ok"), "one bad sequence in the middle is enough");
	cr_assert(!VALID("\xC3\xA9\xC3"), "a cut sequence at the very end too");
}
