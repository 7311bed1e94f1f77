// SPDX-License-Identifier: MIT
/*
 * Shipping notes (egress_sidecar.h): a few "key value" lines, readable by
 * a person who wonders why a file is still there.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "egress/egress_sidecar.h"
#include "wire/rowbinary.h"

static void note_print(FILE *f, const struct egress_sidecar *n)
{
	const struct agent_identity *id = &n->id;
	char run[37];
	uint32_t i;

	rb_uuid_format(n->agent_run, run);
	fprintf(f, "agent_run %s\nstream %" PRIu32 "\nbatch_rows %" PRIu32 "\nbatch_bytes %" PRIu64
		"\ndroppable %d\n", run, n->stream, n->batch_rows, n->batch_bytes, n->droppable);
	if (!n->have_id)
		return;
	fprintf(f, "pid %" PRIu32 "\nstart_time %" PRIu64 "\nnspids ", id->pid, id->start_time);
	for (i = 0; i < id->nnspids; i++)
		fprintf(f, "%s%" PRIu32, i ? "," : "", id->nspids[i]);
	fprintf(f, "\ncomm %s\ncgroup_path %s\ncontainer_id %s\npod_uid %s\nruntime %s\nqos %s\n",
		id->comm, id->cgroup_path, id->tags.container_id, id->tags.pod_uid,
		id->tags.runtime, id->tags.qos);
}

int egress_sidecar_write(const char *file, const char *suffix, const struct egress_sidecar *n)
{
	char path[4096], tmp[4200];
	FILE *f;
	int err = 0;

	snprintf(path, sizeof(path), "%s%s", file, suffix);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	if (!f)
		return -errno;
	note_print(f, n);
	if (fflush(f) || ferror(f))
		err = -errno;
	if (fclose(f) && !err)
		err = -errno;
	if (!err && rename(tmp, path))
		err = -errno;
	if (err)
		unlink(tmp);
	return err;
}

static void text_to(char *dst, size_t len, const char *v)
{
	snprintf(dst, len, "%s", v);
}

static void nspids_parse(struct agent_identity *id, const char *v)
{
	char *end;

	for (id->nnspids = 0; *v && id->nnspids < AGENT_MAX_NSPIDS; v = end + (*end == ',')) {
		id->nspids[id->nnspids++] = (uint32_t)strtoul(v, &end, 10);
		if (end == v)
			break;
	}
}

/* One "key value" line into n; false for a key it does not know */
static bool note_line(struct egress_sidecar *n, const char *key, const char *v)
{
	struct agent_identity *id = &n->id;

	if (!strcmp(key, "agent_run"))
		return !rb_uuid_parse(v, n->agent_run);
	if (!strcmp(key, "stream"))
		n->stream = (uint32_t)strtoul(v, NULL, 10);
	else if (!strcmp(key, "batch_rows"))
		n->batch_rows = (uint32_t)strtoul(v, NULL, 10);
	else if (!strcmp(key, "batch_bytes"))
		n->batch_bytes = strtoull(v, NULL, 10);
	else if (!strcmp(key, "droppable"))
		n->droppable = atoi(v) != 0;
	else if (!strcmp(key, "pid"))
		n->have_id = true, id->pid = (uint32_t)strtoul(v, NULL, 10);
	else if (!strcmp(key, "start_time"))
		id->start_time = strtoull(v, NULL, 10);
	else if (!strcmp(key, "nspids"))
		nspids_parse(id, v);
	else if (!strcmp(key, "comm"))
		text_to(id->comm, sizeof(id->comm), v);
	else if (!strcmp(key, "cgroup_path"))
		text_to(id->cgroup_path, sizeof(id->cgroup_path), v);
	else if (!strcmp(key, "container_id"))
		text_to(id->tags.container_id, sizeof(id->tags.container_id), v);
	else if (!strcmp(key, "pod_uid"))
		text_to(id->tags.pod_uid, sizeof(id->tags.pod_uid), v);
	else if (!strcmp(key, "runtime"))
		text_to(id->tags.runtime, sizeof(id->tags.runtime), v);
	else if (!strcmp(key, "qos"))
		text_to(id->tags.qos, sizeof(id->tags.qos), v);
	else
		return false;
	return true;
}

int egress_sidecar_read(const char *path, struct egress_sidecar *n)
{
	char line[2048];
	bool run = false;
	FILE *f = fopen(path, "r");
	int err = 0;

	if (!f)
		return -errno;
	memset(n, 0, sizeof(*n));
	while (!err && fgets(line, sizeof(line), f)) {
		char *sp = strchr(line, ' ');

		line[strcspn(line, "\n")] = 0;
		if (!sp)
			continue;	/* an empty value: nothing to set */
		*sp = 0;
		if (!note_line(n, line, sp + 1))
			err = -EBADMSG;
		run |= !strcmp(line, "agent_run");
	}
	fclose(f);
	if (!err && (!run || !n->stream || !n->batch_rows || !n->batch_bytes))
		err = -EBADMSG;
	if (n->have_id && !n->id.nnspids)
		n->id.nspids[n->id.nnspids++] = n->id.pid;
	return err;
}

void egress_sidecar_remove(const char *file, const char *suffix)
{
	char path[4096];

	snprintf(path, sizeof(path), "%s%s", file, suffix);
	unlink(path);
}
