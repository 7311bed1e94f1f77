// SPDX-License-Identifier: MIT
/*
 * libFuzzer target for the host agent's event descriptions (META,
 * user/session/agent_wire.c): bytes from any process that connects. Any
 * input must give a description the V6 writer accepts, or a reason, never
 * a crash, an overread, a leak or a hang; and a description that decoded
 * must encode to bytes that decode to the same description.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void same_fields(const struct nt_field *a, const struct nt_field *b, uint16_t n)
{
	uint16_t i;

	for (i = 0; i < n; i++) {
		if (strcmp(a[i].name, b[i].name) || a[i].type != b[i].type ||
		    a[i].elem_type != b[i].elem_type || a[i].nfields != b[i].nfields)
			abort();
		if (a[i].nfields)
			same_fields(a[i].fields, b[i].fields, a[i].nfields);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char why[256];
	struct rp_agent_desc *d = rp_agent_desc_decode(data, size, NT_FORMAT_V6, why, sizeof(why));
	struct rp_agent_desc *e;
	struct bytebuf b = { 0 };

	if (!d) {
		if (!why[0])
			abort();	/* a refusal always says why */
		return 0;
	}
	if (rp_agent_desc_encode(&d->desc, &b))
		abort();
	e = rp_agent_desc_decode(b.p, b.len, NT_FORMAT_V6, why, sizeof(why));
	if (!e || strcmp(d->desc.provider, e->desc.provider) || strcmp(d->desc.name, e->desc.name) ||
	    d->desc.event_id != e->desc.event_id || d->desc.keywords != e->desc.keywords ||
	    d->desc.nfields != e->desc.nfields || !d->desc.fields != !e->desc.fields ||
	    !d->desc.provider_guid != !e->desc.provider_guid)
		abort();
	if (d->desc.nfields)
		same_fields(d->desc.fields, e->desc.fields, d->desc.nfields);
	free(e);
	free(d);
	bb_free(&b);
	return 0;
}
