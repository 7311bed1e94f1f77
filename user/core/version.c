// SPDX-License-Identifier: MIT
#include "ringpipe/ringpipe.h"

#define RP_STR2(x) #x
#define RP_STR(x) RP_STR2(x)

RP_API const char *rp_version(void)
{
	return RP_STR(RP_VERSION_MAJOR) "." RP_STR(RP_VERSION_MINOR) "." RP_STR(RP_VERSION_PATCH);
}
