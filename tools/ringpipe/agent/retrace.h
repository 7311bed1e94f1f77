/* SPDX-License-Identifier: MIT */
/*
 * Retrace: a nettrace stream read with nt_reader written again through an
 * nt_writer, every event under one process id. The host agent turns a .NET
 * runtime's stream (V5, stamped with the pid the process has inside its
 * container) into a V6 file stamped with the process's host pid.
 *
 * What is kept: every event's metadata (provider, GUID, id, name, keywords,
 * version, level, opcode, field tree), timestamp, thread, capture thread,
 * CPU, activity and related activity ids, stack, payload, and EventsLost.
 * What changes: the pid, the framing (the writer's format), sequence
 * numbers (renumbered per capture thread with the same gaps), metadata and
 * stack ids, and which events carry IsSorted (see retrace.c).
 */
#ifndef RINGPIPE_AGENT_RETRACE_H
#define RINGPIPE_AGENT_RETRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nettrace.h"

struct retrace_stats {
	uint64_t events;	/* events written */
	uint64_t skipped;	/* events the writer cannot take (payload over
				 * 64 KiB, thread id over 32 bits): left out,
				 * and counted in the copy's EventsLost */
	uint64_t unsorted;	/* written without IsSorted: earlier than one before them */
	uint64_t stacks_cut;	/* stacks over the writer's 64 KiB, cut to their innermost frames */
	int64_t lost;		/* EventsLost of the source as read (the copy has lost + skipped) */
	uint64_t max_ts;	/* latest timestamp copied: what nt_writer_finish() takes */
	uint32_t types;		/* event types defined */
	uint32_t types_bare;	/* of which without their field list: the writer's
				 * format cannot describe it (an array of arrays) */
	uint32_t types_renamed;	/* of which TraceEvent will name differently: the
				 * reader does not keep the stored opcode, and an
				 * explicit opcode 0 on a name ending in Start or
				 * Stop cannot be written again */
	int read_err;		/* 0, or the reader's error: the events before it are copied */
	char read_msg[256];
};

/*
 * Options for a writer that keeps r's clock (sync_ticks, sync_unix_ns,
 * tick_freq), pointer size, CPU count and sampling rate, so that
 * timestamps and stacks mean the same in the copy.
 */
void retrace_writer_opts(const struct nt_reader *r, int format, uint32_t pid,
			 struct nt_writer_opts *o);

/*
 * Copies every remaining event of r into w under pid, and r's EventsLost.
 * The stream stays open: end it with nt_writer_finish(w, st->max_ts).
 * 0; the reader's error (negative errno) when the source is corrupt or cut
 * short, after copying every event read before it; or the writer's error.
 * retrace_copy() is the same with only the event count.
 */
int retrace_copy_stats(struct nt_reader *r, struct nt_writer *w, uint32_t pid,
		       struct retrace_stats *st);
int retrace_copy(struct nt_reader *r, struct nt_writer *w, uint32_t pid, uint64_t *events);

/*
 * How much of a stream is whole: a stream cut short (its writer died in the
 * middle of a block) holds its header and whole blocks, then part of one.
 */
struct retrace_extent {
	int format;		/* 5 or 6; 0 when even the header is incomplete */
	uint64_t whole;		/* bytes of the header and of whole blocks */
	uint64_t len;		/* bytes in the stream */
	bool ended;		/* the end-of-stream mark follows the whole blocks */
};

/* Walks the framing of p[0..len) (not the blocks' contents). */
void retrace_extent(const void *p, size_t len, struct retrace_extent *x);

/*
 * Ends the stream in file path after its last whole block: cuts what
 * follows and appends the end-of-stream mark, so a reader hands out every
 * event of the whole blocks (a reader that meets the cut gives up there,
 * and events it held back for ordering are never handed out). Nothing
 * changes in a stream that ended. 0, -ENODATA (not even a whole header),
 * or -errno; *x says what was found.
 */
int retrace_repair_file(const char *path, struct retrace_extent *x);

/*
 * The whole job on files: repairs in (which is modified when it was cut
 * short), copies it under pid into out in format, through a hidden
 * temporary file renamed into place once complete. 0 when out was
 * written, even when the source was cut short or is corrupt partway (note
 * says so, and what was kept); otherwise -errno with note saying why, and
 * no out.
 */
int retrace_file(const char *in, const char *out, uint32_t pid, int format,
		 struct retrace_stats *st, char *note, size_t notelen);

#endif /* RINGPIPE_AGENT_RETRACE_H */
