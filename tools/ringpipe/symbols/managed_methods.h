/* SPDX-License-Identifier: MIT */
/*
 * Managed code ranges of .NET processes, from the trace itself.
 *
 * The runtime describes every method it has code for: when a method is
 * compiled (Microsoft-Windows-DotNETRuntime MethodLoad / MethodLoadVerbose,
 * with the Jit or NGen keyword) and, at the end of a session, everything
 * still loaded (Microsoft-Windows-DotNETRuntimeRundown MethodDCStart /
 * MethodDCEnd, Verbose or not, covering precompiled ReadyToRun code too).
 * Each event carries MethodStartAddress, MethodSize and the method's
 * namespace, name and signature; ModuleLoad / ModuleDCStart / ModuleDCEnd
 * (and their DomainModule forms) name the module a MethodID's ModuleID
 * refers to. That is what TraceEvent's TraceLog resolves managed frames
 * with, so a trace converts without the process, its perf map or its files.
 *
 * Names read as TraceEvent writes them: "Module!Namespace.Name(args)", the
 * module being the IL file's name without ".dll", the arguments taken from
 * the signature's parenthesized part.
 */
#ifndef RINGPIPE_TOOL_MANAGED_METHODS_H
#define RINGPIPE_TOOL_MANAGED_METHODS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nettrace_read.h"

#define MM_RUNTIME_PROVIDER "Microsoft-Windows-DotNETRuntime"
#define MM_RUNDOWN_PROVIDER "Microsoft-Windows-DotNETRuntimeRundown"

struct mm_table;

struct mm_table *mm_table_new(void);
void mm_table_free(struct mm_table *t);

/* Adds a method's code range; name is "Namespace.Name(args)". 0 or -errno
 * (-EINVAL for an empty range). */
int mm_add_method(struct mm_table *t, uint32_t pid, uint64_t start, uint64_t size,
		  uint64_t method_id, uint64_t module_id, const char *name);
/* Names a module by the path of its IL (or native) image. 0 or -errno. */
int mm_add_module(struct mm_table *t, uint32_t pid, uint64_t module_id, const char *path);

/* Feeds one event: the method and module events above are parsed, others
 * ignored. true when the event was one of them and well formed. */
bool mm_add_from_event(struct mm_table *t, const struct nt_rec *rec);

struct mm_result {
	const char *module;	/* "System.Private.CoreLib", or "?" when unnamed */
	const char *name;	/* "System.Threading.Thread.Sleep(int32)" */
	uint64_t start;		/* the method's first byte */
};

/* The method whose code holds addr in process pid; false when none does. */
bool mm_lookup(struct mm_table *t, uint32_t pid, uint64_t addr, struct mm_result *r);

/* Methods and modules known (for diagnostics and tests). */
size_t mm_nmethods(struct mm_table *t);
size_t mm_nmodules(const struct mm_table *t);

#endif
