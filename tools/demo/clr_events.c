// SPDX-License-Identifier: MIT
/*
 * CLR event definitions and byte-exact payload encoders (see clr_events.h).
 *
 * The events are registered the way the runtime registers them: an empty
 * name and no field list. Readers know CLR events by (provider, id,
 * version) and TraceEvent decodes them with its own templates; the bulk
 * events' payloads (a u32 Count followed by packed structs) could not be
 * described by nettrace field metadata anyway. The layouts therefore live
 * in the encoders below, one put per manifest <data> element, in manifest
 * order.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "clr_events.h"
#include "util/utf.h"

/* ---- providers ---------------------------------------------------------- */

static const uint8_t guid_runtime[16] = {	/* e13c0d23-ccbc-4e12-931b-d9cc2eee27e4 */
	0x23, 0x0d, 0x3c, 0xe1, 0xbc, 0xcc, 0x12, 0x4e,
	0x93, 0x1b, 0xd9, 0xcc, 0x2e, 0xee, 0x27, 0xe4 };
static const uint8_t guid_rundown[16] = {	/* a669021c-c450-4609-a035-5af59af4df18 */
	0x1c, 0x02, 0x69, 0xa6, 0x50, 0xc4, 0x09, 0x46,
	0xa0, 0x35, 0x5a, 0xf5, 0x9a, 0xf4, 0xdf, 0x18 };
static const uint8_t guid_sampler[16] = {	/* 3c530d44-97ae-513a-1e6d-783e8f8e03a9 */
	0x44, 0x0d, 0x53, 0x3c, 0xae, 0x97, 0x3a, 0x51,
	0x1e, 0x6d, 0x78, 0x3e, 0x8f, 0x8e, 0x03, 0xa9 };
/* none is declared anywhere: the EventSource hash of the name, as readers derive it */
static const uint8_t guid_eventpipe[16] = {	/* 92f528a6-f5b8-5160-a7ee-b33da7739e29 */
	0xa6, 0x28, 0xf5, 0x92, 0xb8, 0xf5, 0x60, 0x51,
	0xa7, 0xee, 0xb3, 0x3d, 0xa7, 0x73, 0x9e, 0x29 };

static struct rp_event *ev_gc_start, *ev_gc_end, *ev_restart_end, *ev_heap_stats,
	*ev_restart_begin, *ev_suspend_end, *ev_suspend_begin, *ev_alloc_tick, *ev_triggered,
	*ev_bulk_type, *ev_bulk_root, *ev_bulk_node, *ev_bulk_edge, *ev_module_load;
static struct rp_event *ev_rd_method, *ev_rd_complete, *ev_rd_init, *ev_rd_module,
	*ev_rd_assembly, *ev_rd_appdomain, *ev_rd_runtime;
static struct rp_event *ev_sample;
static struct rp_event *ev_method_load, *ev_method_unload, *ev_jitting_started;
static struct rp_event *ev_process_info;

static const struct rp_field process_info_fields[] = {
	{ "CommandLine", RP_TYPE_STRING, 0, 0, NULL },
	{ "OSInformation", RP_TYPE_STRING, 0, 0, NULL },
	{ "ArchInformation", RP_TYPE_STRING, 0, 0, NULL },
};

static void process_info_stopping(struct rp_provider *provider, int session_id,
				  uint64_t keywords, uint8_t level, void *ctx);

static struct rp_event *def(struct rp_provider *p, uint32_t id, uint8_t version, uint8_t level,
			    uint8_t opcode, uint64_t keywords, bool *ok)
{
	struct rp_event_opts o = { .sz = sizeof(o), .id = id, .name = "", .version = version,
				   .level = level, .opcode = opcode, .keywords = keywords };
	struct rp_event *ev = rp_event_new(p, &o);

	if (!ev)
		*ok = false;
	return ev;
}

int clr_events_init(const struct clr_callbacks *cb)
{
	struct rp_provider_opts po = { .sz = sizeof(po) };
	struct rp_provider *rt, *rd, *sp, *ep;
	struct rp_event_opts pio = { .sz = sizeof(pio), .id = 1, .name = "ProcessInfo",
				     .version = 1, .level = 0, .nfields = 3,
				     .fields = process_info_fields };
	bool ok = true;

	po.name = "Microsoft-Windows-DotNETRuntime";
	po.guid = guid_runtime;
	po.enable_cb = cb ? cb->runtime_enable : NULL;
	rt = rp_provider_new(&po);
	po.name = RP_RUNDOWN_PROVIDER;
	po.guid = guid_rundown;
	po.enable_cb = NULL;
	po.stopping_cb = cb ? cb->rundown_stopping : NULL;
	rd = rp_provider_new(&po);
	po.name = "Microsoft-DotNETCore-SampleProfiler";
	po.guid = guid_sampler;
	po.enable_cb = cb ? cb->sampler_enable : NULL;
	po.stopping_cb = NULL;
	sp = rp_provider_new(&po);
	po.name = CLR_EVENTPIPE_PROVIDER;
	po.guid = guid_eventpipe;
	po.enable_cb = NULL;
	po.stopping_cb = process_info_stopping;
	ep = rp_provider_new(&po);
	if (!rt || !rd || !sp || !ep)
		return -1;

	/* id, version, level, opcode, keywords: as the CLR manifest defines them */
	ev_gc_start = def(rt, 1, 2, 4, 1, CLR_KW_GC, &ok);
	ev_gc_end = def(rt, 2, 1, 4, 2, CLR_KW_GC, &ok);
	ev_restart_end = def(rt, 3, 1, 4, 132, CLR_KW_GC, &ok);
	ev_heap_stats = def(rt, 4, 2, 4, 133, CLR_KW_GC, &ok);
	ev_restart_begin = def(rt, 7, 1, 4, 136, CLR_KW_GC, &ok);
	ev_suspend_end = def(rt, 8, 1, 4, 137, CLR_KW_GC, &ok);
	ev_suspend_begin = def(rt, 9, 1, 4, 10, CLR_KW_GC, &ok);
	ev_alloc_tick = def(rt, 10, 4, 5, 11, CLR_KW_GC, &ok);
	ev_triggered = def(rt, 35, 0, 4, 35, CLR_KW_GC, &ok);
	ev_bulk_type = def(rt, 15, 0, 4, 10, CLR_KW_TYPE, &ok);
	ev_bulk_root = def(rt, 16, 0, 4, 20, CLR_KW_GCHEAPDUMP, &ok);
	ev_bulk_node = def(rt, 18, 0, 4, 22, CLR_KW_GCHEAPDUMP, &ok);
	ev_bulk_edge = def(rt, 19, 0, 4, 23, CLR_KW_GCHEAPDUMP, &ok);
	ev_module_load = def(rt, 152, 2, 4, 33, 0x20000008ull, &ok);
	ev_method_load = def(rt, 143, 2, 4, 37, CLR_KW_JIT | 0x20, &ok);
	ev_method_unload = def(rt, 144, 2, 4, 38, CLR_KW_JIT | 0x20, &ok);
	ev_jitting_started = def(rt, 145, 1, 5, 42, CLR_KW_JIT, &ok);

	ev_rd_method = def(rd, 144, 2, 4, 40, 0x30, &ok);
	ev_rd_complete = def(rd, 146, 1, 4, 15, 0x20038, &ok);
	ev_rd_init = def(rd, 148, 1, 4, 17, 0x20038, &ok);
	ev_rd_module = def(rd, 154, 2, 4, 36, 0x20000008ull, &ok);
	ev_rd_assembly = def(rd, 156, 1, 4, 40, 0x8, &ok);
	ev_rd_appdomain = def(rd, 158, 1, 4, 44, 0x8, &ok);
	ev_rd_runtime = def(rd, 187, 0, 4, 1, 0, &ok);

	ev_sample = def(sp, 0, 0, 4, 0, 0, &ok);
	/* the one event with field metadata: EventPipe describes it so */
	ev_process_info = rp_event_new(ep, &pio);
	return ok && ev_process_info ? 0 : -1;
}

/* ---- the expect file ---------------------------------------------------- */

static int expect_fd = -1;

int clr_expect_open(const char *path)
{
	if (!path)
		return 0;
	expect_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	return expect_fd < 0 ? -errno : 0;
}

bool clr_expecting(void)
{
	return expect_fd >= 0;
}

void clr_expect(const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	int n;

	if (expect_fd < 0)
		return;
	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n > sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	/* one write() on an O_APPEND fd: lines from several threads never interleave */
	if (write(expect_fd, line, (size_t)n) != n)
		return;
}

/* ---- payload building --------------------------------------------------- */

static const uint8_t zero_guid[16];

/*
 * True when the event went to the sessions that enable it; callers write the
 * expect line only then, so the file lists what the library accepted.
 */
static bool emit(struct rp_event *ev, const void *p, size_t n)
{
	return rp_event_enabled(ev) && rp_event_write(ev, p, n) == 0;
}

/* emit() of a payload built in b, which it frees; an incomplete payload (the
 * builder ran out of memory) is not written. */
static bool emit_built(struct rp_event *ev, struct bytebuf *b)
{
	bool ok = !b->oom && emit(ev, b->p, b->len);

	bb_free(b);
	return ok;
}

/* ---- GC lifecycle ------------------------------------------------------- */

void clr_gc_triggered(uint32_t reason)
{
	struct bytebuf p = { 0 };

	bb_append_u32(&p, reason);
	bb_append_u16(&p, CLR_INSTANCE_ID);
	if (emit_built(ev_triggered, &p))
		clr_expect("GC/Triggered\tReason=%u\tClrInstanceID=%u", reason, CLR_INSTANCE_ID);
}

void clr_gc_suspend_begin(uint32_t reason, uint32_t count)
{
	struct bytebuf p = { 0 };

	bb_append_u32(&p, reason);
	bb_append_u32(&p, count);
	bb_append_u16(&p, CLR_INSTANCE_ID);
	if (emit_built(ev_suspend_begin, &p))
		clr_expect("GC/SuspendEEStart\tReason=%u\tCount=%u\tClrInstanceID=%u", reason, count,
			   CLR_INSTANCE_ID);
}

/* The four GCNoUserData events: just ClrInstanceID. */
static void no_user_data(struct rp_event *ev, const char *name)
{
	uint16_t id = CLR_INSTANCE_ID;

	if (emit(ev, &id, 2))
		clr_expect("%s\tClrInstanceID=%u", name, CLR_INSTANCE_ID);
}

void clr_gc_suspend_end(void) { no_user_data(ev_suspend_end, "GC/SuspendEEStop"); }
void clr_gc_restart_begin(void) { no_user_data(ev_restart_begin, "GC/RestartEEStart"); }
void clr_gc_restart_end(void) { no_user_data(ev_restart_end, "GC/RestartEEStop"); }

void clr_gc_start(uint32_t count, uint32_t depth, uint32_t reason, uint32_t type)
{
	struct bytebuf p = { 0 };

	bb_append_u32(&p, count);
	bb_append_u32(&p, depth);
	bb_append_u32(&p, reason);
	bb_append_u32(&p, type);
	bb_append_u16(&p, CLR_INSTANCE_ID);
	bb_append_u64(&p, 0);		/* ClientSequenceNumber: always 0 on Unix */
	if (emit_built(ev_gc_start, &p))
		clr_expect("GC/Start\tCount=%u\tDepth=%u\tReason=%u\tType=%u\tClrInstanceID=%u"
			   "\tClientSequenceNumber=0", count, depth, reason, type, CLR_INSTANCE_ID);
}

void clr_gc_end(uint32_t count, uint32_t depth)
{
	struct bytebuf p = { 0 };

	bb_append_u32(&p, count);
	bb_append_u32(&p, depth);
	bb_append_u16(&p, CLR_INSTANCE_ID);
	if (emit_built(ev_gc_end, &p))
		clr_expect("GC/Stop\tCount=%u\tDepth=%u\tClrInstanceID=%u", count, depth,
			   CLR_INSTANCE_ID);
}

void clr_gc_heap_stats(const struct clr_heap_stats *h)
{
	struct bytebuf p = { 0 };
	int g;

	for (g = 0; g < 4; g++) {
		bb_append_u64(&p, h->gen_size[g]);
		bb_append_u64(&p, h->promoted[g]);
	}
	bb_append_u64(&p, h->finalization_promoted_size);
	bb_append_u64(&p, h->finalization_promoted_count);
	bb_append_u32(&p, h->pinned_objects);
	bb_append_u32(&p, h->sink_blocks);
	bb_append_u32(&p, h->gc_handles);
	bb_append_u16(&p, CLR_INSTANCE_ID);
	bb_append_u64(&p, h->gen_size[4]);
	bb_append_u64(&p, h->promoted[4]);
	if (emit_built(ev_heap_stats, &p))
		clr_expect("GC/HeapStats\tGenerationSize0=%" PRIu64 "\tTotalPromotedSize0=%" PRIu64
			   "\tGenerationSize1=%" PRIu64 "\tTotalPromotedSize1=%" PRIu64
			   "\tGenerationSize2=%" PRIu64 "\tTotalPromotedSize2=%" PRIu64
			   "\tGenerationSize3=%" PRIu64 "\tTotalPromotedSize3=%" PRIu64
			   "\tFinalizationPromotedSize=%" PRIu64 "\tFinalizationPromotedCount=%" PRIu64
			   "\tPinnedObjectCount=%u\tSinkBlockCount=%u\tGCHandleCount=%u"
			   "\tClrInstanceID=%u\tGenerationSize4=%" PRIu64 "\tTotalPromotedSize4=%" PRIu64,
			   h->gen_size[0], h->promoted[0], h->gen_size[1], h->promoted[1],
			   h->gen_size[2], h->promoted[2], h->gen_size[3], h->promoted[3],
			   h->finalization_promoted_size, h->finalization_promoted_count,
			   h->pinned_objects, h->sink_blocks, h->gc_handles, CLR_INSTANCE_ID,
			   h->gen_size[4], h->promoted[4]);
}

void clr_gc_alloc_tick(uint32_t amount, uint32_t kind, uint64_t amount64, uint64_t type_id,
		       const char *type_name, uint32_t heap_index, uint64_t address,
		       uint64_t object_size)
{
	struct bytebuf p = { 0 };

	if (!rp_event_enabled(ev_alloc_tick))
		return;
	bb_append_u32(&p, amount);
	bb_append_u32(&p, kind);
	bb_append_u16(&p, CLR_INSTANCE_ID);
	bb_append_u64(&p, amount64);
	bb_append_u64(&p, type_id);	/* win:Pointer, 8 bytes on the 64-bit targets we build for */
	utf8_to_utf16z(&p, type_name);
	bb_append_u32(&p, heap_index);
	bb_append_u64(&p, address);
	bb_append_u64(&p, object_size);
	if (emit_built(ev_alloc_tick, &p))
		clr_expect("GC/AllocationTick\tAllocationAmount=%u\tAllocationKind=%u\tClrInstanceID=%u"
			   "\tAllocationAmount64=%" PRIu64 "\tTypeID=%" PRIu64 "\tTypeName=%s"
			   "\tHeapIndex=%u\tAddress=%" PRIu64 "\tObjectSize=%" PRIu64,
			   amount, kind, CLR_INSTANCE_ID, amount64, type_id, type_name, heap_index,
			   address, object_size);
}

bool clr_heapdump_enabled(void)
{
	return rp_event_enabled(ev_bulk_node);
}

/* ---- bulk events -------------------------------------------------------- */

/* Header bytes before the elements, and the fixed element sizes (x64). */
static const size_t bulk_header[CLR_BULK_NR] = { 10, 10, 10, 6 };
static const size_t bulk_elem[CLR_BULK_NR] = { 32, 12, 21, 0 };
static const char *const bulk_name[CLR_BULK_NR] = {
	"GC/BulkNode", "GC/BulkEdge", "GC/BulkRootEdge", "Type/BulkType" };

/* The runtime leaves 0x100 bytes of headroom under the 64 KB event limit. */
#define BULK_LIMIT (65536u - 0x100u)

uint64_t clr_digest_step(uint64_t digest, uint64_t position, uint64_t value)
{
	/* order-sensitive: the same values at other positions fold differently */
	digest ^= value + position * 0x9e3779b97f4a7c15ull;
	return digest * 0x100000001b3ull;
}

void clr_bulk_begin(struct clr_bulk *b, enum clr_bulk_kind kind)
{
	b->kind = kind;
	b->index = 0;
	b->count = 0;
	b->elements = 0;
	b->digest = 0xcbf29ce484222325ull;
	b->len = bulk_header[kind];
}

void clr_bulk_flush(struct clr_bulk *b)
{
	static struct rp_event **const evs[CLR_BULK_NR] = {
		&ev_bulk_node, &ev_bulk_edge, &ev_bulk_root, &ev_bulk_type };
	uint16_t clr = CLR_INSTANCE_ID;
	bool ok;

	if (!b->count)
		return;
	if (b->kind == CLR_BULK_TYPE) {
		memcpy(b->buf, &b->count, 4);
		memcpy(b->buf + 4, &clr, 2);
	} else {
		memcpy(b->buf, &b->index, 4);
		memcpy(b->buf + 4, &b->count, 4);
		memcpy(b->buf + 8, &clr, 2);
	}
	ok = emit(*evs[b->kind], b->buf, b->len);
	if (ok && b->kind == CLR_BULK_TYPE)
		clr_expect("%s\tCount=%u\tClrInstanceID=%u", bulk_name[b->kind], b->count,
			   CLR_INSTANCE_ID);
	else if (ok)
		clr_expect("%s\tIndex=%u\tCount=%u\tClrInstanceID=%u", bulk_name[b->kind], b->index,
			   b->count, CLR_INSTANCE_ID);
	b->index++;
	b->count = 0;
	b->len = bulk_header[b->kind];
}

/* Makes room for an element of n bytes, flushing a full event first. */
static uint8_t *bulk_room(struct clr_bulk *b, size_t n)
{
	uint8_t *at;

	if (b->len + n > BULK_LIMIT)
		clr_bulk_flush(b);
	at = b->buf + b->len;
	b->len += n;
	b->count++;
	return at;
}

#define FOLD(b, v) ((b)->digest = clr_digest_step((b)->digest, (b)->elements, (uint64_t)(v)))

void clr_bulk_node(struct clr_bulk *b, uint64_t address, uint64_t size, uint64_t type_id,
		   uint64_t edge_count)
{
	uint8_t *at = bulk_room(b, bulk_elem[CLR_BULK_NODE]);

	memcpy(at, &address, 8);
	memcpy(at + 8, &size, 8);
	memcpy(at + 16, &type_id, 8);
	memcpy(at + 24, &edge_count, 8);
	FOLD(b, address), FOLD(b, size), FOLD(b, type_id), FOLD(b, edge_count);
	b->elements++;
}

void clr_bulk_edge(struct clr_bulk *b, uint64_t target)
{
	uint8_t *at = bulk_room(b, bulk_elem[CLR_BULK_EDGE]);
	uint32_t field = 0;	/* ReferencingFieldID: the runtime always writes 0 */

	memcpy(at, &target, 8);
	memcpy(at + 8, &field, 4);
	FOLD(b, target);
	b->elements++;
}

void clr_bulk_root(struct clr_bulk *b, uint64_t address, uint8_t kind, uint32_t flags,
		   uint64_t root_id)
{
	uint8_t *at = bulk_room(b, bulk_elem[CLR_BULK_ROOT]);

	memcpy(at, &address, 8);
	at[8] = kind;
	memcpy(at + 9, &flags, 4);
	memcpy(at + 13, &root_id, 8);
	FOLD(b, address), FOLD(b, kind), FOLD(b, flags), FOLD(b, root_id);
	b->elements++;
}

void clr_bulk_type(struct clr_bulk *b, uint64_t type_id, uint64_t module_id, uint32_t flags,
		   uint8_t cor_element_type, const char *name)
{
	struct bytebuf name16 = { 0 };
	uint32_t name_id = 0, nparams = 0;
	size_t n, k;
	uint8_t *at;

	if (utf8_to_utf16z(&name16, name))
		return;		/* out of memory: the element is left out, digest and all */
	n = 8 + 8 + 4 + 4 + 1 + name16.len + 4;
	at = bulk_room(b, n);
	/* TypeID, ModuleID, TypeNameID, Flags, CorElementType, Name, TypeParameterCount */
	memcpy(at, &type_id, 8);
	memcpy(at + 8, &module_id, 8);
	memcpy(at + 16, &name_id, 4);
	memcpy(at + 20, &flags, 4);
	at[24] = cor_element_type;
	memcpy(at + 25, name16.p, name16.len);
	memcpy(at + 25 + name16.len, &nparams, 4);
	bb_free(&name16);
	FOLD(b, type_id), FOLD(b, module_id), FOLD(b, flags), FOLD(b, cor_element_type);
	for (k = 0; name[k]; k++)
		FOLD(b, (uint8_t)name[k]);
	b->elements++;
}

/* ---- loader and rundown ------------------------------------------------- */

static const struct clr_module demo_modules[] = {
	{ 0x7f3a10000000ull, 0x7f3a20000000ull, 0x8 /* Manifest */,
	  "/usr/share/dotnet/shared/Microsoft.NETCore.App/" CLR_VERSION
	  "/System.Private.CoreLib.dll",
	  "System.Private.CoreLib, Version=" CLR_VERSION ".0, Culture=neutral, "
	  "PublicKeyToken=7cec85d7bea7798e" },
	{ 0x7f3a10100000ull, 0x7f3a20100000ull, 0x8,
	  "/opt/ringpipe-demo/RingpipeDemo.dll",
	  "RingpipeDemo, Version=1.0.0.0, Culture=neutral, PublicKeyToken=null" },
};

const struct clr_module *clr_demo_modules(unsigned *n)
{
	*n = sizeof(demo_modules) / sizeof(demo_modules[0]);
	return demo_modules;
}

/* ModuleLoad_V2 and ModuleDCEnd_V2 share one layout. */
static void module_event(struct rp_event *ev, const char *name, const struct clr_module *m)
{
	struct bytebuf p = { 0 };

	bb_append_u64(&p, m->module_id);
	bb_append_u64(&p, m->assembly_id);
	bb_append_u32(&p, m->flags);
	bb_append_u32(&p, 0);			/* Reserved1 */
	utf8_to_utf16z(&p, m->il_path);
	utf8_to_utf16z(&p, m->il_path);		/* ModuleNativePath: the same image */
	bb_append_u16(&p, CLR_INSTANCE_ID);
	bb_append(&p, zero_guid, 16);	/* ManagedPdbSignature */
	bb_append_u32(&p, 0);			/* ManagedPdbAge */
	utf8_to_utf16z(&p, "");			/* ManagedPdbBuildPath */
	bb_append(&p, zero_guid, 16);	/* NativePdbSignature */
	bb_append_u32(&p, 0);
	utf8_to_utf16z(&p, "");
	if (emit_built(ev, &p))
		/* TraceEvent's module templates do not list ClrInstanceID */
		clr_expect("%s\tModuleID=%" PRIu64 "\tAssemblyID=%" PRIu64 "\tModuleFlags=%u"
			   "\tModuleILPath=%s\tModuleNativePath=%s\tManagedPdbAge=0"
			   "\tManagedPdbBuildPath=\tNativePdbAge=0\tNativePdbBuildPath=",
			   name, m->module_id, m->assembly_id, m->flags, m->il_path, m->il_path);
}

void clr_module_load(const struct clr_module *m)
{
	module_event(ev_module_load, "Loader/ModuleLoad", m);
}

void clr_rd_module(const struct clr_module *m)
{
	module_event(ev_rd_module, "Loader/ModuleDCStop", m);
}

void clr_rd_dcend_init(void) { no_user_data(ev_rd_init, "Method/DCStopInit"); }
void clr_rd_dcend_complete(void) { no_user_data(ev_rd_complete, "Method/DCStopComplete"); }

bool clr_rd_methods_enabled(void)
{
	return rp_event_enabled(ev_rd_method);
}

/* MethodLoadVerbose_V2, MethodUnloadVerbose_V2 and MethodDCEndVerbose_V2
 * share one layout. */
static void method_event(struct rp_event *ev, const char *name, const struct clr_method *m)
{
	struct bytebuf p = { 0 };

	if (!rp_event_enabled(ev))
		return;

	bb_append_u64(&p, m->method_id);
	bb_append_u64(&p, m->module_id);
	bb_append_u64(&p, m->start);
	bb_append_u32(&p, m->size);
	bb_append_u32(&p, m->token);
	bb_append_u32(&p, m->flags);
	utf8_to_utf16z(&p, m->ns);
	utf8_to_utf16z(&p, m->name);
	utf8_to_utf16z(&p, m->signature);
	bb_append_u16(&p, CLR_INSTANCE_ID);
	bb_append_u64(&p, m->rejit_id);
	if (emit_built(ev, &p))
		clr_expect("%s\tMethodID=%" PRIu64 "\tModuleID=%" PRIu64
			   "\tMethodStartAddress=%" PRIu64 "\tMethodSize=%u\tMethodToken=%u"
			   "\tMethodFlags=%u\tMethodNamespace=%s\tMethodName=%s\tMethodSignature=%s"
			   "\tClrInstanceID=%u\tReJITID=%" PRIu64,
			   name, m->method_id, m->module_id, m->start, m->size, m->token, m->flags,
			   m->ns, m->name, m->signature, CLR_INSTANCE_ID, m->rejit_id);
}

void clr_rd_method(const struct clr_method *m)
{
	method_event(ev_rd_method, "Method/DCStopVerbose", m);
}

void clr_method_load(const struct clr_method *m)
{
	method_event(ev_method_load, "Method/LoadVerbose", m);
}

void clr_method_unload(const struct clr_method *m)
{
	method_event(ev_method_unload, "Method/UnloadVerbose", m);
}

void clr_method_jitting_started(const struct clr_method *m, uint32_t il_size)
{
	struct bytebuf p = { 0 };

	if (!rp_event_enabled(ev_jitting_started))
		return;
	bb_append_u64(&p, m->method_id);
	bb_append_u64(&p, m->module_id);
	bb_append_u32(&p, m->token);
	bb_append_u32(&p, il_size);
	utf8_to_utf16z(&p, m->ns);
	utf8_to_utf16z(&p, m->name);
	utf8_to_utf16z(&p, m->signature);
	bb_append_u16(&p, CLR_INSTANCE_ID);
	if (emit_built(ev_jitting_started, &p))
		clr_expect("Method/JittingStarted\tMethodID=%" PRIu64 "\tModuleID=%" PRIu64
			   "\tMethodToken=%u\tMethodILSize=%u\tMethodNamespace=%s\tMethodName=%s"
			   "\tMethodSignature=%s\tClrInstanceID=%u", m->method_id, m->module_id,
			   m->token, il_size, m->ns, m->name, m->signature, CLR_INSTANCE_ID);
}

void clr_rd_assembly(const struct clr_module *m, uint64_t appdomain_id)
{
	struct bytebuf p = { 0 };
	uint32_t flags = 0;

	bb_append_u64(&p, m->assembly_id);
	bb_append_u64(&p, appdomain_id);
	bb_append_u64(&p, 0);			/* BindingID */
	bb_append_u32(&p, flags);
	utf8_to_utf16z(&p, m->assembly_name);
	bb_append_u16(&p, CLR_INSTANCE_ID);
	if (emit_built(ev_rd_assembly, &p))
		clr_expect("Loader/AssemblyDCStop\tAssemblyID=%" PRIu64 "\tAppDomainID=%" PRIu64
			   "\tBindingID=0\tAssemblyFlags=%u\tFullyQualifiedAssemblyName=%s"
			   "\tClrInstanceID=%u", m->assembly_id, appdomain_id, flags,
			   m->assembly_name, CLR_INSTANCE_ID);
}

void clr_rd_appdomain(uint64_t appdomain_id, const char *name)
{
	struct bytebuf p = { 0 };
	uint32_t flags = 0x1, index = 1;	/* Default domain */

	bb_append_u64(&p, appdomain_id);
	bb_append_u32(&p, flags);
	utf8_to_utf16z(&p, name);
	bb_append_u32(&p, index);
	bb_append_u16(&p, CLR_INSTANCE_ID);
	if (emit_built(ev_rd_appdomain, &p))
		clr_expect("Loader/AppDomainDCStop\tAppDomainID=%" PRIu64 "\tAppDomainFlags=%u"
			   "\tAppDomainName=%s\tAppDomainIndex=%u\tClrInstanceID=%u", appdomain_id,
			   flags, name, index, CLR_INSTANCE_ID);
}

void clr_rd_runtime_info(const char *command_line)
{
	/* CoreCLR (Sku 0x2), BCL and VM versions those of the runtime imitated */
	static const uint16_t v[] = { CLR_INSTANCE_ID, 0x2, CLR_VERSION_MAJOR, CLR_VERSION_MINOR,
				      CLR_VERSION_BUILD, 0, CLR_VERSION_MAJOR, CLR_VERSION_MINOR,
				      CLR_VERSION_BUILD, 0 };
	struct bytebuf p = { 0 };
	uint32_t startup_flags = 0;
	uint8_t startup_mode = 0;
	size_t i;

	for (i = 0; i < sizeof(v) / sizeof(v[0]); i++)
		bb_append_u16(&p, v[i]);
	bb_append_u32(&p, startup_flags);
	bb_append_u8(&p, startup_mode);
	utf8_to_utf16z(&p, command_line);
	bb_append(&p, zero_guid, 16);	/* ComObjectGuid */
	utf8_to_utf16z(&p, "libringpipe.so");			/* RuntimeDllPath */
	if (emit_built(ev_rd_runtime, &p))
		clr_expect("Runtime/Start\tClrInstanceID=%u\tSku=2\tBclMajorVersion=%u"
			   "\tBclMinorVersion=%u\tBclBuildNumber=%u\tBclQfeNumber=0"
			   "\tVMMajorVersion=%u\tVMMinorVersion=%u\tVMBuildNumber=%u\tVMQfeNumber=0"
			   "\tStartupFlags=0\tStartupMode=0\tCommandLine=%s"
			   "\tRuntimeDllPath=libringpipe.so", CLR_INSTANCE_ID, CLR_VERSION_MAJOR,
			   CLR_VERSION_MINOR, CLR_VERSION_BUILD, CLR_VERSION_MAJOR,
			   CLR_VERSION_MINOR, CLR_VERSION_BUILD, command_line);
}

/* ---- sample profiler ---------------------------------------------------- */

bool clr_sampler_enabled(void)
{
	return rp_event_enabled(ev_sample);
}

void clr_thread_sample(uint32_t type, uint32_t tid, const uint64_t *frames, uint32_t nframes)
{
	/* the sampled thread's stack, as EventPipe attaches it to the sample */
	struct rp_write_opts o = { .sz = sizeof(o), .thread_id = tid,
				   .flags = nframes ? RP_WRITE_STACK_GIVEN : 0,
				   .stack = frames, .nstack = nframes };
	struct iovec iov = { &type, 4 };

	/* no expect line: samples are not part of what the decode test compares */
	if (rp_event_enabled(ev_sample))
		rp_event_writev(ev_sample, &iov, 1, &o);
}

/* ---- EventPipe's ProcessInfo --------------------------------------------- */

#if defined(__x86_64__)
#define CLR_ARCH "x64"
#elif defined(__aarch64__)
#define CLR_ARCH "arm64"
#elif defined(__i386__)
#define CLR_ARCH "x86"
#elif defined(__arm__)
#define CLR_ARCH "arm"
#else
#define CLR_ARCH "unknown"
#endif

/* /proc/self/cmdline with its NULs as spaces: the runtime's command line. */
static void command_line(char *buf, size_t len)
{
	int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : read(fd, buf, len - 1);
	ssize_t i;

	if (fd >= 0)
		close(fd);
	if (n < 0)
		n = 0;
	while (n > 0 && !buf[n - 1])
		n--;
	for (i = 0; i < n; i++)
		if (!buf[i])
			buf[i] = ' ';
	buf[n] = 0;
}

static void process_info_stopping(struct rp_provider *provider, int session_id,
				  uint64_t keywords, uint8_t level, void *ctx)
{
	struct bytebuf p = { 0 };
	char cmd[4096];

	(void)provider, (void)session_id, (void)keywords, (void)level, (void)ctx;
	command_line(cmd, sizeof(cmd));
	utf8_to_utf16z(&p, cmd);
	utf8_to_utf16z(&p, "Linux");
	utf8_to_utf16z(&p, CLR_ARCH);
	/* no expect line: TraceDump's clr mode, which the expect file is
	 * compared with, shows the CLR providers only */
	emit_built(ev_process_info, &p);
}
