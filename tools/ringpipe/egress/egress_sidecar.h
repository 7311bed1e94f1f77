/* SPDX-License-Identifier: MIT */
/*
 * A finished file's shipping note, FILE.ship beside it: the batches' name
 * (agent run, stream), how they are cut, and the process it belongs to.
 * Written when the file is handed to the egress, removed once its last
 * batch is in the spool. A restarted agent finds the notes of files it had
 * not finished spooling and cuts each again under the same name: the same
 * batches, byte for byte, so those already spooled or sent are recognised.
 */
#ifndef RINGPIPE_AGENT_EGRESS_SIDECAR_H
#define RINGPIPE_AGENT_EGRESS_SIDECAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "host/identity.h"

#define EGRESS_SIDECAR_SUFFIX ".ship"
/* the OTLP egress's notes: a file may wait for both (and ".otlp-ship" does
 * not end in ".ship") */
#define EGRESS_OTLP_SIDECAR_SUFFIX ".otlp-ship"

struct egress_sidecar {
	uint8_t agent_run[16];
	uint32_t stream;
	uint32_t batch_rows;
	uint64_t batch_bytes;
	bool droppable;
	bool have_id;
	struct agent_identity id;	/* the parts rows use: pid, start time, NSpid,
					 * comm, cgroup path, tags */
};

/* Writes file's note, FILE then suffix, whole (a .tmp renamed), 0 or -errno. */
int egress_sidecar_write(const char *file, const char *suffix, const struct egress_sidecar *n);
/* Reads the note at path (FILE.ship): 0, or -EBADMSG / -errno. */
int egress_sidecar_read(const char *path, struct egress_sidecar *n);
void egress_sidecar_remove(const char *file, const char *suffix);

#endif /* RINGPIPE_AGENT_EGRESS_SIDECAR_H */
