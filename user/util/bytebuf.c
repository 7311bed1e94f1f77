// SPDX-License-Identifier: MIT
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "bytebuf.h"

int bb_grow(struct bytebuf *b, size_t need)
{
	size_t ncap = b->cap ? b->cap : 256;
	uint8_t *np;

	if (b->oom)
		return -ENOMEM;
	while (ncap - b->len < need) {
		if (ncap > SIZE_MAX / 2)
			goto fail;
		ncap *= 2;
	}
	np = realloc(b->p, ncap);
	if (!np)
		goto fail;
	b->p = np;
	b->cap = ncap;
	return 0;
fail:
	b->oom = 1;
	return -ENOMEM;
}

int bb_init(struct bytebuf *b, size_t n)
{
	*b = (struct bytebuf){ .p = malloc(n ? n : 1) };
	if (!b->p) {
		b->oom = 1;
		return -ENOMEM;
	}
	b->cap = n;
	return 0;
}

void bb_fwrite(const struct bytebuf *b, FILE *f)
{
	if (b->len)
		fwrite(b->p, 1, b->len, f);
}

void bb_free(struct bytebuf *b)
{
	free(b->p);
	b->p = NULL;
	b->len = b->cap = 0;
	b->oom = 0;
}

void bb_printf(struct bytebuf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (bb_reserve(b, 64))
		return;
	va_start(ap, fmt);
	n = vsnprintf((char *)b->p + b->len, b->cap - b->len, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n >= b->cap - b->len) {
		if (bb_reserve(b, (size_t)n + 1))
			return;
		va_start(ap, fmt);
		vsnprintf((char *)b->p + b->len, b->cap - b->len, fmt, ap);
		va_end(ap);
	}
	b->len += (size_t)n;
}

int array_grow(void **arr, size_t *cap, size_t n, size_t elem, size_t first)
{
	size_t nc = *cap ? *cap : first;
	void *p;

	if (n < *cap)
		return 0;
	while (nc <= n) {
		if (nc > SIZE_MAX / 2 / elem)
			return -ENOMEM;
		nc *= 2;
	}
	p = realloc(*arr, nc * elem);
	if (!p)
		return -ENOMEM;
	*arr = p;
	*cap = nc;
	return 0;
}
