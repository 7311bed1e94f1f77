// SPDX-License-Identifier: MIT
/*
 * Provider GUIDs. EventPipe traces carry provider names, not GUIDs; readers
 * derive the GUID from the name: a few legacy CLR providers have fixed GUIDs,
 * every other name maps to the EventSource name hash (SHA-1 over a fixed
 * namespace followed by the upper-cased name in UTF-16BE, first 16 bytes,
 * version nibble 5). The values below are facts of that convention.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nettrace.h"

/* ---- SHA-1 (FIPS 180-4) ----------------------------------------------- */

struct sha1_ctx {
	uint32_t h[5];
	uint64_t len;
	uint8_t blk[64];
	size_t n;
};

static uint32_t rol(uint32_t x, int k)
{
	return (x << k) | (x >> (32 - k));
}

static void sha1_block(struct sha1_ctx *c, const uint8_t *p)
{
	uint32_t w[80], a, b, d, e, f, k, t, cc;
	int i;

	for (i = 0; i < 16; i++)
		w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
		       (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
	for (; i < 80; i++)
		w[i] = rol(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
	a = c->h[0]; b = c->h[1]; cc = c->h[2]; d = c->h[3]; e = c->h[4];
	for (i = 0; i < 80; i++) {
		if (i < 20) {
			f = (b & cc) | (~b & d);
			k = 0x5a827999;
		} else if (i < 40) {
			f = b ^ cc ^ d;
			k = 0x6ed9eba1;
		} else if (i < 60) {
			f = (b & cc) | (b & d) | (cc & d);
			k = 0x8f1bbcdc;
		} else {
			f = b ^ cc ^ d;
			k = 0xca62c1d6;
		}
		t = rol(a, 5) + f + e + k + w[i];
		e = d; d = cc; cc = rol(b, 30); b = a; a = t;
	}
	c->h[0] += a; c->h[1] += b; c->h[2] += cc; c->h[3] += d; c->h[4] += e;
}

static void sha1_init(struct sha1_ctx *c)
{
	static const uint32_t iv[5] = { 0x67452301, 0xefcdab89, 0x98badcfe,
					0x10325476, 0xc3d2e1f0 };
	memcpy(c->h, iv, sizeof(iv));
	c->len = 0;
	c->n = 0;
}

static void sha1_update(struct sha1_ctx *c, const void *data, size_t len)
{
	const uint8_t *p = data;

	c->len += len;
	while (len) {
		size_t k = 64 - c->n < len ? 64 - c->n : len;

		memcpy(c->blk + c->n, p, k);
		c->n += k;
		p += k;
		len -= k;
		if (c->n == 64) {
			sha1_block(c, c->blk);
			c->n = 0;
		}
	}
}

static void sha1_final(struct sha1_ctx *c, uint8_t out[20])
{
	uint64_t bits = c->len * 8;
	uint8_t pad = 0x80, z = 0, lb[8];
	int i;

	sha1_update(c, &pad, 1);
	while (c->n != 56)
		sha1_update(c, &z, 1);
	for (i = 0; i < 8; i++)
		lb[i] = (uint8_t)(bits >> (56 - 8 * i));
	sha1_update(c, lb, 8);
	for (i = 0; i < 20; i++)
		out[i] = (uint8_t)(c->h[i / 4] >> (24 - 8 * (i % 4)));
}

void sha1(const void *data, size_t len, uint8_t out[20])
{
	struct sha1_ctx c;

	sha1_init(&c);
	sha1_update(&c, data, len);
	sha1_final(&c, out);
}

/* ---- GUIDs ------------------------------------------------------------ */

void nt_guid_format(const uint8_t g[16], char out[37])
{
	uint32_t d1;
	uint16_t d2, d3;

	memcpy(&d1, g, 4);
	memcpy(&d2, g + 4, 2);
	memcpy(&d3, g + 6, 2);
	snprintf(out, 37, "%08x-%04x-%04x-%02x%02x-%02x%02x%02x%02x%02x%02x",
		 d1, d2, d3, g[8], g[9], g[10], g[11], g[12], g[13], g[14], g[15]);
}

int nt_guid_parse(const char *s, uint8_t g[16])
{
	unsigned int d1, d2, d3, b[8];
	uint32_t v1;
	uint16_t v2, v3;
	int n = 0, i;

	if (strlen(s) != 36 ||
	    sscanf(s, "%8x-%4x-%4x-%2x%2x-%2x%2x%2x%2x%2x%2x%n", &d1, &d2, &d3,
		   &b[0], &b[1], &b[2], &b[3], &b[4], &b[5], &b[6], &b[7], &n) != 11 ||
	    n != 36)
		return -1;
	v1 = d1;
	v2 = (uint16_t)d2;
	v3 = (uint16_t)d3;
	memcpy(g, &v1, 4);
	memcpy(g + 4, &v2, 2);
	memcpy(g + 6, &v3, 2);
	for (i = 0; i < 8; i++)
		g[8 + i] = (uint8_t)b[i];
	return 0;
}

static const struct {
	const char *name;
	const char *guid;
} fixed_guids[] = {
	{ "Microsoft-Windows-DotNETRuntime", "e13c0d23-ccbc-4e12-931b-d9cc2eee27e4" },
	{ "Microsoft-Windows-DotNETRuntimeRundown", "a669021c-c450-4609-a035-5af59af4df18" },
	{ "Microsoft-Windows-DotNETRuntimePrivate", "763fd754-7086-4dfe-95eb-c01a46faf4ca" },
	{ "Microsoft-Windows-DotNETRuntimeStress", "cc2bcbba-16b6-4cf3-8990-d74c2e8af500" },
	{ "System.Threading.Tasks.TplEventSource", "2e5dba47-a3d2-4d16-8ee0-6671ffdcd7b5" },
	{ "System.Diagnostics.Eventing.FrameworkEventSource", "8e9f5090-2d75-4d03-8a81-e5afbf85daf1" },
	{ "Microsoft-DotNETCore-SampleProfiler", "3c530d44-97ae-513a-1e6d-783e8f8e03a9" },
};

void nt_provider_guid(const char *name, uint8_t guid[16])
{
	static const uint8_t ns[16] = { 0x48, 0x2c, 0x2d, 0xb2, 0xc3, 0x90, 0x47, 0xc8,
					0x87, 0xf8, 0x1a, 0x15, 0xbf, 0xc1, 0x30, 0xfb };
	struct sha1_ctx c;
	uint8_t h[20];
	size_t i;

	if (!name || !name[0]) {
		memset(guid, 0, 16);
		return;
	}
	for (i = 0; i < sizeof(fixed_guids) / sizeof(fixed_guids[0]); i++) {
		if (!strcmp(name, fixed_guids[i].name)) {
			nt_guid_parse(fixed_guids[i].guid, guid);
			return;
		}
	}
	sha1_init(&c);
	sha1_update(&c, ns, sizeof(ns));
	/* upper-cased (invariant) name as UTF-16BE; names are ASCII in
	 * practice, other bytes are hashed as their own code units */
	for (i = 0; name[i]; i++) {
		uint8_t be[2] = { 0, (uint8_t)toupper((unsigned char)name[i]) };

		sha1_update(&c, be, 2);
	}
	sha1_final(&c, h);
	memcpy(guid, h, 16);
	guid[7] = (uint8_t)((guid[7] & 0x0f) | 0x50);
}
