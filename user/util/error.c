// SPDX-License-Identifier: MIT
#include <stdarg.h>
#include <stdio.h>

#include "error.h"
#include "ringpipe/ringpipe.h"

static __thread char last_error[256];

void rp_set_error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
}

RP_API const char *rp_last_error(void)
{
	return last_error;
}
