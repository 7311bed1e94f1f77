// SPDX-License-Identifier: MIT
/*
 * Names TraceEvent gives to CLR runtime events. The runtime writes these
 * events with an empty name and no field list; readers know them by provider
 * and event id. The table holds facts (ids and names), filled from the CLR
 * event manifest (dotnet/runtime, src/coreclr/vm/ClrEtwAll.man).
 */
#include <string.h>

#include "nettrace.h"

struct clr_name {
	uint8_t provider;	/* index into providers[] */
	uint16_t id;
	uint8_t opcode;
	const char *name;
};

static const char *const providers[] = {
	"Microsoft-Windows-DotNETRuntime",
	"Microsoft-Windows-DotNETRuntimeRundown",
	"Microsoft-Windows-DotNETRuntimePrivate",
	"Microsoft-DotNETCore-SampleProfiler",
	"Microsoft-DotNETCore-EventPipe",
};

static const struct clr_name names[] = {
#include "clr_names.inc"
};

const char *nt_clr_event_name(const char *provider, uint32_t event_id, uint8_t *opcode)
{
	size_t i, p;

	for (p = 0; p < sizeof(providers) / sizeof(providers[0]); p++)
		if (!strcmp(provider, providers[p]))
			break;
	if (p == sizeof(providers) / sizeof(providers[0]))
		return NULL;
	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (names[i].provider == p && names[i].id == event_id) {
			*opcode = names[i].opcode;
			return names[i].name;
		}
	return NULL;
}
