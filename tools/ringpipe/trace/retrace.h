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
 *
 * A merge does the same for several streams at once, into one V6 stream in
 * which every event keeps its own process id (or its source's forced one):
 * events in time order across the sources, each source's timestamps put
 * on the output's clock, each source's EventsLost carried, so the output's
 * is their sum. A copy is the merge of one stream under one pid.
 */
#ifndef RINGPIPE_AGENT_RETRACE_H
#define RINGPIPE_AGENT_RETRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nettrace_read.h"

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
	uint32_t processes;	/* distinct pids among the events written */
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
 * Options for the writer of a merge of r[0..n) (n >= 1): V6; the clock of
 * the source whose wall-clock anchor is earliest (the other sources' events
 * map to ticks after it); the first source's pid (pids[0], or when that is
 * 0 or pids is NULL the pid r[0]'s header names) and sampling rate; the
 * largest CPU count and pointer size (narrower IPs are zero-extended).
 * retrace_merge() expects a writer made with these options.
 */
void retrace_merge_writer_opts(struct nt_reader **r, const uint32_t *pids, size_t n,
			       struct nt_writer_opts *o);

/*
 * Writes every remaining event of the n sources r[] into w, a V6 writer
 * made with retrace_merge_writer_opts(), in timestamp order on w's clock.
 * pids[i] nonzero puts every event of r[i] under that pid (a V5 stream of
 * a process in a container, stamped with its host pid); 0 (or pids NULL)
 * keeps each event's own: the V6 thread's process, else the stream's
 * default pid. Each source's event types, capture threads, sequence gaps
 * and EventsLost are carried as retrace_copy_stats() carries them, so w's
 * EventsLost is the sum of the sources' (st->lost, plus st->skipped).
 * Capture threads are told apart by (pid, thread id), as the V6 writer
 * declares them: one process's thread 1 is not another's.
 *
 * st sums the sources' counts (max_ts: the latest timestamp written, on
 * w's clock; read_err/read_msg: the first source that failed); each, when
 * not NULL, holds n entries with every source's own (max_ts on w's
 * clock). The stream stays open: end it with nt_writer_finish(w,
 * st->max_ts). 0; the first reader error (a corrupt or cut-short source
 * ends there, after its events before it, while the others go on); or
 * the writer's error.
 */
int retrace_merge(struct nt_reader **r, const uint32_t *pids, size_t n, struct nt_writer *w,
		  struct retrace_stats *st);
int retrace_merge_each(struct nt_reader **r, const uint32_t *pids, size_t n,
		       struct nt_writer *w, struct retrace_stats *st, struct retrace_stats *each);

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

/*
 * The merge of files in[0..n) into out (V6, every event under its own
 * pid), through a hidden temporary file renamed into place once complete.
 * The inputs are read, never written: one cut short is read as
 * retrace_repair_file() would leave it (its whole blocks), in a private
 * mapping. 0 when out was written, with note saying, one line per input
 * that has something to say ("FILE: ..."), which were cut short or
 * stopped reading early and what was kept; otherwise -errno with note
 * saying "FILE: why" (an input that is not nettrace, or is unreadable, or
 * whose trace header does not read), and no out. pg, when not NULL, shows
 * how much of the inputs has been read (tool_util.h).
 */
struct tool_progress;
int retrace_merge_files(const char *const *in, size_t n, const char *out,
			struct retrace_stats *st, char *note, size_t notelen,
			struct tool_progress *pg);

#endif /* RINGPIPE_AGENT_RETRACE_H */
