/* SPDX-License-Identifier: MIT */
/*
 * A bounded on-disk spool of batches waiting to be shipped.
 *
 * An egress writes each batch here before it sends it and takes it out only
 * once the receiver acknowledged it durably, so a batch outlives a failed
 * send, a receiver that is down, and the sender's own crash (SIGKILL, power
 * loss): the next run finds it and sends the same bytes again. Batches are
 * opaque bytes under a 64-bit number that only grows (the next one after a
 * restart is above every number found), kept oldest first.
 *
 * On disk: one file per batch, DIR/<number, 20 digits>.batch, written as a
 * .tmp file, flushed, renamed and the directory flushed, so a batch is either
 * whole or absent after a crash. Each file starts with a header (a magic, the
 * number, the length and a checksum of the bytes): a file that does not
 * match its header (a torn disk, an edit) is set aside as .bad and counted,
 * never sent.
 *
 * Threads: one may put batches while others read and take them out
 * (spool_next(), spool_ack()); spool_stats() and spool_peek() from any.
 * Readers may read at once when each reads and takes out batches the
 * others do not (the caller decides who holds which: spool_peek()).
 */
#ifndef RINGPIPE_SPOOL_H
#define RINGPIPE_SPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct spool;

struct spool_opts {
	size_t sz;		/* sizeof(struct spool_opts) */
	const char *dir;	/* created (one level) when missing */
	uint64_t max_bytes;	/* the batches' bytes at most (headers included); 0: no limit */
};

/*
 * Opens dir and takes in the batches found there (a previous run's), setting
 * aside damaged ones. NULL with errno set and the reason in err.
 */
struct spool *spool_open(const struct spool_opts *o, char *err, size_t errlen);
void spool_close(struct spool *s);

/*
 * Adds a batch, durable on disk when this returns 0; *num: its number.
 * -ENOSPC when it would take the spool past max_bytes (nothing written),
 * -E2BIG when it could never fit, another -errno when the disk failed.
 */
int spool_put(struct spool *s, const void *data, size_t len, uint64_t *num);

/*
 * The oldest batch: its number and a copy of its bytes (*data, malloc()ed,
 * the caller frees it). -ENOENT when the spool is empty, -EIO when its file
 * no longer matches its header (it is set aside and counted; the next call
 * gives the next batch), another -errno when it cannot be read.
 */
int spool_oldest(struct spool *s, uint64_t *num, void **data, size_t *len);

/*
 * The same for the oldest batch numbered above after: a sender that has
 * batches in flight reads on past them (numbers start at 1, so after = 0
 * is spool_oldest()).
 */
int spool_next(struct spool *s, uint64_t after, uint64_t *num, void **data, size_t *len);

/* The number of the oldest batch numbered above after, without reading it:
 * 0, or -ENOENT when there is none. */
int spool_peek(struct spool *s, uint64_t after, uint64_t *num);
/* Takes batch num out (its receiver holds it now). 0, -ENOENT, or -errno. */
int spool_ack(struct spool *s, uint64_t num);

struct spool_stats {
	uint64_t batches, bytes;	/* held now (bytes: on disk, headers included) */
	uint64_t found;			/* batches taken in from an earlier run */
	uint64_t damaged;		/* files set aside as .bad (this run) */
	uint64_t refused;		/* spool_put() calls refused for room */
};

void spool_stats(const struct spool *s, struct spool_stats *st);

/* Tests: sum by the byte table even where SSE4.2 has the CRC32C instruction
 * (hosts without it use the table; both must give the same sums). */
extern bool spool_crc_by_table;

#endif
