// SPDX-License-Identifier: MIT
/*
 * The command line's duration grammar (see duration.h).
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "duration.h"

#define NS_PER_S 1000000000ull
/* fraction digits beyond these are below a nanosecond in every unit
 * (10^-18 h is 3.6e-6 ns) */
#define FRAC_DIGITS_MAX 18

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

/* Digits at *p into *v (advancing *p); false on overflow. */
static bool digits(const char **p, uint64_t *v)
{
	uint64_t n = 0;

	for (; is_digit(**p); (*p)++)
		if (__builtin_mul_overflow(n, 10, &n) ||
		    __builtin_add_overflow(n, (uint64_t)(**p - '0'), &n))
			return false;
	*v = n;
	return true;
}

/* [DD:]HH:MM:SS */
static int parse_clock(const char *s, uint64_t *ns)
{
	uint64_t part[4], days = 0, hours, secs;
	const char *p = s;
	int k = 0;

	for (;;) {
		const char *start = p;

		if (k == 4 || !digits(&p, &part[k]) || p == start)
			return -EINVAL;
		k++;
		if (!*p)
			break;
		if (*p++ != ':')
			return -EINVAL;
	}
	if (k == 4) {
		days = part[0];
		if (part[1] > 23)
			return -EINVAL;
	} else if (k != 3) {
		return -EINVAL;
	}
	hours = part[k - 3];
	if (part[k - 2] > 59 || part[k - 1] > 59)
		return -EINVAL;
	if (__builtin_mul_overflow(days, 24, &secs) ||
	    __builtin_add_overflow(secs, hours, &secs) ||
	    __builtin_mul_overflow(secs, 60, &secs) ||
	    __builtin_add_overflow(secs, part[k - 2], &secs) ||
	    __builtin_mul_overflow(secs, 60, &secs) ||
	    __builtin_add_overflow(secs, part[k - 1], &secs) ||
	    __builtin_mul_overflow(secs, NS_PER_S, &secs))
		return -EINVAL;
	*ns = secs;
	return 0;
}

static const struct {
	const char *suffix;
	uint64_t ns;
} units[] = {
	{ "", NS_PER_S },	/* a bare number is seconds */
	{ "ns", 1 },
	{ "us", 1000 },
	{ "ms", 1000000 },
	{ "s", NS_PER_S },
	{ "m", 60 * NS_PER_S },
	{ "h", 3600 * NS_PER_S },
};

/* NUMBER[UNIT] */
static int parse_number(const char *s, uint64_t *ns)
{
	uint64_t whole = 0, frac = 0, scale = 1, unit = 0, v;
	unsigned int nfrac = 0;
	const char *p = s;
	size_t i;

	if (!digits(&p, &whole))
		return -EINVAL;
	if (*p == '.') {
		const char *start = ++p;

		for (; is_digit(*p); p++) {
			if (nfrac == FRAC_DIGITS_MAX)
				continue;	/* checked, too small to count */
			frac = frac * 10 + (uint64_t)(*p - '0');
			scale *= 10;
			nfrac++;
		}
		if (p == start)
			return -EINVAL;	/* "5." */
	} else if (p == s) {
		return -EINVAL;		/* no digit at all */
	}
	for (i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (!strcmp(p, units[i].suffix)) {
			unit = units[i].ns;
			break;
		}
	if (!unit)
		return -EINVAL;
	if (__builtin_mul_overflow(whole, unit, &v) ||
	    __builtin_add_overflow(v, (uint64_t)(((unsigned __int128)frac * unit + scale / 2) /
						  scale), &v))
		return -EINVAL;
	*ns = v;
	return 0;
}

int rp_duration_parse(const char *s, uint64_t *ns)
{
	if (!s || !*s)
		return -EINVAL;
	return strchr(s, ':') ? parse_clock(s, ns) : parse_number(s, ns);
}
