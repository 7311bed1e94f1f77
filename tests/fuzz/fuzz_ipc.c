// SPDX-License-Identifier: MIT
/*
 * libFuzzer target for the diagnostics IPC parser (user/ipc/ipc_proto.c): any
 * input must give a message or an error with an HRESULT and a reason, never
 * a crash, an overread, a leak or a hang. A parsed message must satisfy what
 * the server relies on. The same bytes, as text, also go through the
 * DOTNET_DiagnosticPorts parser.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ipc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_collect(const struct ipc_collect *c)
{
	uint32_t i;

	if (c->version < 1 || c->version > 6 || c->session_type > 1 || c->buffering > 1 ||
	    c->format > 1 || !c->nproviders || c->nproviders > IPC_MAX_PROVIDERS)
		abort();
	if (c->session_type == 0 && !c->buffer_mb)
		abort();
	for (i = 0; i < c->nproviders; i++) {
		const struct ipc_provider *p = &c->providers[i];

		if (!p->name || !p->name[0] || p->level > IPC_MAX_LEVEL)
			abort();
		if (p->nevent_ids && !p->event_ids)
			abort();
		/* touch every byte: an overread or a missing NUL shows up */
		(void)strlen(p->name);
		if (p->args)
			(void)strlen(p->args);
		if (p->nevent_ids)
			(void)p->event_ids[p->nevent_ids - 1];
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ipc_port_cfg ports[IPC_MAX_PORTS];
	struct ipc_msg m;
	struct ipc_error e;
	char err[256], *text;
	size_t n;
	int r;

	r = ipc_msg_parse(data, size, &m, &e);
	if (r) {
		/* an error always names its HRESULT and says why */
		if (!e.hresult || !e.msg[0] || m.kind)
			abort();
	} else {
		if (m.hdr.size < IPC_HEADER_SIZE || m.hdr.size > size)
			abort();
		switch (m.kind) {
		case IPC_MSG_COLLECT_TRACING:
			check_collect(&m.u.collect);
			break;
		case IPC_MSG_PROCESS_INFO:
			if (m.u.info_version < 1 || m.u.info_version > 3)
				abort();
			break;
		case IPC_MSG_SET_ENVIRONMENT:
			if (!m.u.setenv.name || !m.u.setenv.name[0] || strchr(m.u.setenv.name, '='))
				abort();
			break;
		default:
			break;
		}
	}
	ipc_msg_free(&m);

	text = malloc(size + 1);
	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = 0;
	if (!ipc_ports_parse(text, ports, IPC_MAX_PORTS, &n, err, sizeof(err))) {
		size_t i;

		for (i = 0; i < n; i++)
			if (!ports[i].path[0] || strlen(ports[i].path) >= IPC_PATH_MAX)
				abort();
	}
	/* and the reply encoder over whatever text came in */
	{
		struct bytebuf b = { 0 };

		if (!ipc_string_put(&b, text, size % 97) && b.len < 6)
			abort();
		bb_free(&b);
	}
	free(text);
	return 0;
}
