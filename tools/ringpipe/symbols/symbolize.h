/* SPDX-License-Identifier: MIT */
/*
 * Symbolizer: turns (pid, instruction pointer) into "module!function+0xoff".
 *
 * A process's address space is described by the module mappings captured
 * while it ran (sym_snapshot_pid() reads /proc/PID/maps; a trace carries the
 * same facts as Ringpipe-Symbols/ModuleLoad events, so a process that has
 * exited can still be symbolized, the way perf uses its MMAP records).
 * Symbols come from each module's ELF .symtab and .dynsym (and from
 * /usr/lib/debug/.build-id/ when a debug file exists), JIT code from perf
 * map files (/tmp/perf-PID.map) and kernel addresses from /proc/kallsyms.
 * .NET code is also named from the trace's own CLR method and module events
 * (managed_methods.h), the way TraceEvent does. ELF files are read once per
 * path.
 *
 * A lookup tries, in order: the kernel; the .NET methods; the perf map
 * entries; the file mappings. Generated code comes before mappings because
 * the .NET runtime's W^X double mapping executes JIT code from a shared
 * memory file ("/memfd:doublemapper") that looks like a module but has no
 * symbols of its own.
 */
#ifndef RINGPIPE_TOOL_SYMBOLIZE_H
#define RINGPIPE_TOOL_SYMBOLIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nettrace_read.h"

/* The provider whose events carry what symbolization needs. */
#define SYM_PROVIDER "Ringpipe-Symbols"
enum {
	SYM_EV_MODULE = 1,	/* Pid, Start, End, Offset, Path, BuildId */
	SYM_EV_JIT = 2,		/* Pid, Start, Size, Name (a perf-map entry) */
	SYM_EV_THREAD = 3,	/* Pid, Tid, Name */
};

struct sym_module {
	uint32_t pid;
	uint64_t start, end;	/* mapped range */
	uint64_t offset;	/* file offset of start */
	char *path;
	char build_id[41];	/* lower-case hex, "" when the file has none */
};

struct sym_jit {
	uint32_t pid;
	uint64_t start, size;
	char *name;
};

struct sym_table;

struct sym_table *sym_table_new(void);
void sym_table_free(struct sym_table *t);

/*
 * Forgets every process: its mappings, JIT symbols, thread names and .NET
 * methods, keeping the ELF files and the kernel's symbols already read, so
 * that the next trace's processes are named without reading them again.
 */
void sym_forget_processes(struct sym_table *t);

/* Adds one executable mapping; duplicates are ignored. 0 or -ENOMEM. */
int sym_add_module(struct sym_table *t, uint32_t pid, uint64_t start, uint64_t end,
		   uint64_t offset, const char *path, const char *build_id);
int sym_add_jit(struct sym_table *t, uint32_t pid, uint64_t start, uint64_t size,
		const char *name);
/* Reads the thread's name (the comm) remembered for tid, or NULL. */
int sym_add_thread(struct sym_table *t, uint32_t pid, uint32_t tid, const char *name);
const char *sym_thread_name(const struct sym_table *t, uint32_t pid, uint32_t tid);

/*
 * Snapshot of a live process: its executable file mappings (with their
 * build ids) and its perf map file, added to t. Returns how many mappings
 * were new, or a negative errno (-ENOENT: the process is gone; its perf
 * map, which the runtime leaves behind, is read all the same).
 */
int sym_snapshot_pid(struct sym_table *t, uint32_t pid);
/* Parses a perf map file ("START SIZE name", hex) into t; count or -errno. */
int sym_load_perf_map(struct sym_table *t, uint32_t pid, const char *path);
/* With on, the first lookup in a process reads /tmp/perf-PID.map if it
 * exists (for a trace read after the process exited, when the trace itself
 * carries no JIT symbols; a reused pid would give wrong names, so only the
 * converting commands turn it on). */
void sym_use_perf_maps(struct sym_table *t, bool on);

/* What has been added, for serialization into a trace. */
size_t sym_nmodules(const struct sym_table *t);
const struct sym_module *sym_module_at(const struct sym_table *t, size_t i);
size_t sym_njit(const struct sym_table *t);
const struct sym_jit *sym_jit_at(const struct sym_table *t, size_t i);

/* Feeds a Ringpipe-Symbols event, or a CLR method or module event, read
 * from a trace; other events are ignored. true when the event was used. */
bool sym_add_from_event(struct sym_table *t, const struct nt_rec *rec);
/* .NET method code ranges learnt from CLR events. */
size_t sym_nmanaged(struct sym_table *t);

struct sym_result {
	const char *module;	/* basename, "[kernel]", "[jit]", a .NET module's name
				 * ("System.Private.CoreLib") or NULL (unknown) */
	const char *function;	/* NULL when no symbol covers the address */
	uint64_t offset;	/* from the function, else from the module's file start */
};

/*
 * Looks up ip in process pid. `leaf` says ip is the interrupted
 * instruction; otherwise it is a return address and the call before it is
 * what gets symbolized (a call can be a function's last instruction).
 * Returns true when a module or symbol was found.
 */
bool sym_lookup(struct sym_table *t, uint32_t pid, uint64_t ip, bool leaf, struct sym_result *r);
/* "module!function+0xoff", "module+0xoff" or "0xip"; returns out. */
char *sym_format(struct sym_table *t, uint32_t pid, uint64_t ip, bool leaf, char *out, size_t len);

/* Reads a file's GNU build id as hex into out[41]; 0 or -errno. */
int sym_file_build_id(const char *path, char out[41]);

/* Kernel addresses start here on x86-64 (and every 64-bit Linux port). */
static inline bool sym_is_kernel(uint64_t ip)
{
	return ip >= 0xffff800000000000ull;
}

#endif
