// SPDX-License-Identifier: MIT
/*
 * Heap snapshots from traces (see gc_heap.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/bytebuf.h"
#include "trace/gc_heap.h"
#include "nettrace_read.h"
#include "util/utf.h"

enum clr_event_id {
	EV_GC_START = 1,
	EV_GC_END = 2,
	EV_BULK_TYPE = 15,
	EV_BULK_ROOT_EDGE = 16,
	EV_BULK_NODE = 18,
	EV_BULK_EDGE = 19,
};

enum { GC_REASON_INDUCED = 1, GC_TYPE_NONCONCURRENT = 0 };

/* x64 element sizes of the packed bulk arrays */
#define NODE_ELEM 32u
#define EDGE_ELEM 12u
#define ROOT_ELEM 21u
#define BULK_HDR 10u		/* Index u32, Count u32, ClrInstanceID u16 */

const char *const gc_heap_stream_name[3] = { "GCBulkNode", "GCBulkEdge", "GCBulkRootEdge" };

static struct gc_heap_type *type_get(struct gc_heap *h, uint64_t id)
{
	uint64_t ix;

	if (hmap_get(&h->type_index, id, &ix))
		return &h->types[ix - 1];
	if (array_grow((void **)&h->types, &h->captypes, h->ntypes, sizeof(*h->types), 256))
		return NULL;
	h->types[h->ntypes] = (struct gc_heap_type){ .id = id };
	if (hmap_put(&h->type_index, id, h->ntypes + 1))
		return NULL;
	return &h->types[h->ntypes++];
}

/* UTF-16LE, NUL-terminated, at p (at most end): its length in bytes with the
 * NUL, or 0 when unterminated. */
static size_t utf16z_len(const uint8_t *p, const uint8_t *end)
{
	const uint8_t *q;

	for (q = p; q + 1 < end; q += 2)
		if (!q[0] && !q[1])
			return (size_t)(q - p) + 2;
	return 0;
}

static void on_bulk_type(struct gc_heap *h, const uint8_t *p, uint32_t len)
{
	const uint8_t *end = p + len, *q;
	uint32_t count, i;

	if (len < 6) {
		h->malformed++;
		return;
	}
	count = le32_get(p);
	q = p + 6;
	for (i = 0; i < count; i++) {
		struct gc_heap_type *t;
		uint64_t id;
		uint32_t nparams;
		size_t slen;

		/* TypeID u64, ModuleID u64, TypeNameID u32, Flags u32,
		 * CorElementType u8, Name utf16z, TypeParameterCount u32, ... */
		if (end - q < 25) {
			h->malformed++;
			return;
		}
		id = le64_get(q);
		q += 25;
		slen = utf16z_len(q, end);
		if (!slen || end - q < (ptrdiff_t)slen + 4) {
			h->malformed++;
			return;
		}
		t = type_get(h, id);
		if (t && !t->name) {
			struct bytebuf b = { 0 };

			utf16le_to_utf8(&b, q, slen / 2 - 1);
			bb_append(&b, "", 1);
			if (!b.oom)
				t->name = (char *)b.p;
			else
				bb_free(&b);
		}
		q += slen;
		nparams = le32_get(q);
		q += 4;
		if ((uint64_t)(end - q) < (uint64_t)nparams * 8) {
			h->malformed++;
			return;
		}
		q += (size_t)nparams * 8;
	}
}

/* Checks a bulk header and this stream's Index; returns the element count. */
static int bulk_header(struct gc_heap *h, int stream, const uint8_t *p, uint32_t len,
		       uint32_t elem, uint32_t *count)
{
	uint32_t index = le32_get(p);

	if (len < BULK_HDR) {
		h->malformed++;
		return -1;
	}
	*count = le32_get(p + 4);
	if ((uint64_t)*count * elem > len - BULK_HDR) {
		h->malformed++;
		return -1;
	}
	if (index != h->next_index[stream])
		h->index_gaps[stream] += index > h->next_index[stream] ?
					 index - h->next_index[stream] : 1;
	h->next_index[stream] = index + 1;
	return 0;
}

static void on_event(struct gc_heap *h, const struct nt_rec *rec)
{
	const struct nt_meta *m = rec->meta;
	const uint8_t *p = rec->payload;
	uint32_t len = rec->payload_len, count, i;

	if (strcmp(m->provider, GC_HEAP_PROVIDER))
		return;
	switch (m->event_id) {
	case EV_BULK_TYPE:
		on_bulk_type(h, p, len);
		return;
	case EV_GC_START:
		/* Count u32, Depth u32, Reason u32, Type u32 */
		if (len >= 16 && !h->open && !h->closed && le32_get(p + 4) >= 2 &&
		    le32_get(p + 8) == GC_REASON_INDUCED && le32_get(p + 12) == GC_TYPE_NONCONCURRENT) {
			h->open = true;
			h->gc_count = le32_get(p);
		}
		return;
	case EV_GC_END:
		if (len >= 4 && h->open && !h->closed && le32_get(p) == h->gc_count)
			h->closed = true;
		return;
	case EV_BULK_NODE:
	case EV_BULK_EDGE:
	case EV_BULK_ROOT_EDGE:
		break;
	default:
		return;
	}
	if (!h->open || h->closed) {
		h->events_outside++;
		return;
	}
	if (m->event_id == EV_BULK_NODE) {
		if (bulk_header(h, 0, p, len, NODE_ELEM, &count))
			return;
		for (i = 0; i < count; i++) {
			const uint8_t *e = p + BULK_HDR + (size_t)i * NODE_ELEM;
			struct gc_heap_type *t = type_get(h, le64_get(e + 16));
			uint64_t size = le64_get(e + 8);

			h->nodes++;
			h->node_bytes += size;
			h->edges_expected += le64_get(e + 24);
			if (t) {
				t->count++;
				t->bytes += size;
			}
		}
	} else if (m->event_id == EV_BULK_EDGE) {
		if (bulk_header(h, 1, p, len, EDGE_ELEM, &count))
			return;
		h->edges += count;
	} else {
		if (bulk_header(h, 2, p, len, ROOT_ELEM, &count))
			return;
		h->roots += count;
		for (i = 0; i < count; i++) {
			uint8_t kind = p[BULK_HDR + (size_t)i * ROOT_ELEM + 8];

			if (kind < 6)
				h->roots_by_kind[kind]++;
		}
	}
}

void gc_heap_free(struct gc_heap *h)
{
	size_t i;

	for (i = 0; i < h->ntypes; i++)
		free(h->types[i].name);
	free(h->types);
	hmap_free(&h->type_index);
}

/* Reads a trace held in memory into h; returns EventsLost or -errno. */
static int64_t heap_read(struct gc_heap *h, const void *data, size_t len, bool tolerate_tail,
			 char *err, size_t errlen)
{
	struct nt_reader *r = nt_reader_new_mem(data, len);
	struct nt_rec rec;
	int64_t lost;
	int rc;

	if (!r) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	while ((rc = nt_reader_next(r, &rec)) > 0) {
		on_event(h, &rec);
		if (tolerate_tail && h->closed)
			break;
	}
	if (rc < 0 && !tolerate_tail) {
		snprintf(err, errlen, "%s", nt_reader_errmsg(r));
		nt_reader_free(r);
		return rc;
	}
	lost = nt_reader_lost(r);
	nt_reader_free(r);
	return lost;
}

/* Maps fd read-only; *map is NULL for an empty file. 0 or -errno. */
static int map_fd(int fd, void **map, size_t *len)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return -errno;
	*len = (size_t)st.st_size;
	*map = NULL;
	if (!*len)
		return 0;
	*map = mmap(NULL, *len, PROT_READ, MAP_PRIVATE, fd, 0);
	if (*map == MAP_FAILED) {
		*map = NULL;
		return -errno;
	}
	return 0;
}

int64_t gc_heap_read_file(struct gc_heap *h, const char *path, char *err, size_t errlen)
{
	void *map;
	size_t len;
	int64_t lost;
	int fd, rc;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		snprintf(err, errlen, "%s", strerror(errno));
		return -1;
	}
	rc = map_fd(fd, &map, &len);
	close(fd);
	if (rc) {
		snprintf(err, errlen, "%s", strerror(-rc));
		return -1;
	}
	if (!map) {
		snprintf(err, errlen, "empty file");
		return -1;
	}
	lost = heap_read(h, map, len, false, err, errlen);
	munmap(map, len);
	return lost < 0 ? -1 : lost;
}

bool gc_heap_trace_complete(int out_fd)
{
	struct gc_heap h = { 0 };
	char path[64], err[8];
	void *map;
	size_t len;
	bool done;
	int fd;

	/* the output is open write-only: map it through a read-only open */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", out_fd);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	if (map_fd(fd, &map, &len) || !map) {
		close(fd);
		return false;
	}
	close(fd);
	heap_read(&h, map, len, true, err, sizeof(err));
	done = h.closed;
	munmap(map, len);
	gc_heap_free(&h);
	return done;
}
