// SPDX-License-Identifier: MIT
/*
 * The contract at the edges of providers, events and writes: every schema
 * rp_event_new() accepts is one the nettrace writer can describe (the rest
 * are refused at definition, with errno and a message naming the field),
 * limits that depend on the nettrace format are refused when a session of
 * that format would meet them, and a write that returns 0 is in the trace,
 * whatever its size. TraceEvent (tests/interop/TraceDump) judges the traces;
 * without the .NET SDK those tests skip, unless RINGPIPE_REQUIRE_INTEROP=1.
 */
#include <inttypes.h>
#include <string.h>

#include "helpers.h"
#include "nettrace_read.h"
#include "ringpipe/ringpipe.h"
#include "session.h"

/* ---- helpers ------------------------------------------------------------ */

static struct rp_provider *provider(const char *name, const uint8_t *guid)
{
	struct rp_provider_opts po = { .sz = sizeof(po), .name = name, .guid = guid };
	struct rp_provider *p = rp_provider_new(&po);

	cr_assert_not_null(p, "rp_provider_new(%s): %s", name, rp_last_error());
	return p;
}

static struct rp_event *try_event(struct rp_provider *p, uint32_t id, const char *name,
				  const struct rp_field *f, uint16_t n)
{
	struct rp_event_opts eo = { .sz = sizeof(eo), .id = id, .name = name, .level = 4,
				    .nfields = n, .fields = f };

	errno = 0;
	return rp_event_new(p, &eo);
}

static struct rp_event *event(struct rp_provider *p, uint32_t id, const char *name,
			      const struct rp_field *f, uint16_t n)
{
	struct rp_event *ev = try_event(p, id, name, f, n);

	cr_assert_not_null(ev, "rp_event_new(%s): %s", name, rp_last_error());
	return ev;
}

/* rp_event_new() refuses the schema: NULL, EINVAL, and a message that
 * contains `want`. */
static void expect_refused(struct rp_provider *p, const char *what, const struct rp_field *f,
			   uint16_t n, const char *want)
{
	struct rp_event *ev = try_event(p, 9, "Refused", f, n);
	int e = errno;

	cr_assert_null(ev, "%s: rp_event_new accepted a schema the writer cannot describe", what);
	cr_assert_eq(e, EINVAL, "%s: errno %d, expected EINVAL", what, e);
	cr_assert(strstr(rp_last_error(), want),
		  "%s: rp_last_error() is \"%s\", expected it to say \"%s\"", what, rp_last_error(),
		  want);
	cr_assert(strstr(rp_last_error(), "\"Refused\""),
		  "%s: rp_last_error() does not name the event: \"%s\"", what, rp_last_error());
}

static struct rp_session *try_start(const char *path, const char *const *names, uint32_t n,
				    int format, int buffering, uint64_t budget, uint64_t rundown)
{
	struct rp_provider_config pc[8] = { 0 };
	struct rp_session_opts so = { .sz = sizeof(so), .providers = pc, .nproviders = n,
				      .format = format, .buffering = buffering,
				      .buffer_bytes = budget, .path = path, .fd = -1,
				      .rundown_keywords = rundown };
	uint32_t i;

	for (i = 0; i < n; i++)
		pc[i].name = names[i];
	errno = 0;
	return rp_session_start(&so);
}

static struct rp_session *start(const char *path, const char *name, int format, int buffering,
				uint64_t budget)
{
	struct rp_session *s = try_start(path, &name, 1, format, buffering, budget, 0);

	cr_assert_not_null(s, "rp_session_start(V%d): %s", format, rp_last_error());
	return s;
}

static char *trace_path(const char *dir, const char *name)
{
	char *p;

	cr_assert(asprintf(&p, "%s/%s.nettrace", dir, name) > 0);
	return p;
}

/* TraceEvent's "counts" of a trace: "<Provider>/<EventName>\t<n>" lines and
 * "#lost\t<n>"; it must have read the whole file. */
static void te_counts(const char *dll, const char *path, struct bytebuf *out)
{
	char *cmd;
	int rc;

	cr_assert(asprintf(&cmd, "dotnet '%s' counts '%s'", dll, path) > 0);
	rc = th_run(cmd, out);
	free(cmd);
	cr_assert_eq(rc, 0, "TraceEvent could not read %s: %s", path, (char *)out->p);
}

static uint64_t te_count(const struct bytebuf *b, const char *key)
{
	const char *p = (const char *)b->p;
	size_t kl = strlen(key);

	while (p && *p) {
		if (!strncmp(p, key, kl) && p[kl] == '\t')
			return strtoull(p + kl + 1, NULL, 10);
		p = strchr(p, '\n');
		if (p)
			p++;
	}
	return 0;
}

/* TraceEvent's canonical dump (tests/interop/README.md). */
static void te_dump(const char *dll, const char *path, struct bytebuf *out)
{
	char *cmd;
	int rc;

	cr_assert(asprintf(&cmd, "dotnet '%s' dump '%s'", dll, path) > 0);
	rc = th_run(cmd, out);
	free(cmd);
	cr_assert_eq(rc, 0, "TraceEvent could not read %s", path);
}

/* n UInt32 fields named F0000000000000000000.. (20 characters each): the
 * metadata takes 24 bytes a field in V6 (UTF-8) and 46 in V5 (UTF-16). */
static struct rp_field *many_fields(uint16_t n)
{
	struct rp_field *f = calloc(n, sizeof(*f));
	uint16_t i;

	cr_assert_not_null(f);
	for (i = 0; i < n; i++) {
		char *name;

		cr_assert(asprintf(&name, "F%019u", i) > 0);
		f[i] = (struct rp_field){ name, RP_TYPE_U32, 0, 0, NULL };
	}
	return f;
}

static void free_many(struct rp_field *f, uint16_t n)
{
	uint16_t i;

	for (i = 0; i < n; i++)
		free((char *)f[i].name);
	free(f);
}

/* ---- schemas refused at definition ---------------------------------------- */

Test(provider, array_of_arrays_is_refused)
{
	static const struct rp_field matrix[] = { { "Matrix", RP_TYPE_ARRAY, RP_TYPE_ARRAY, 0, NULL } };
	static const struct rp_field inner[] = { { "Row", RP_TYPE_ARRAY, RP_TYPE_ARRAY, 0, NULL } };
	static const struct rp_field outer[] = { { "Id", RP_TYPE_U32, 0, 0, NULL },
						 { "Grid", RP_TYPE_OBJECT, 0, 1, inner } };
	struct rp_provider *p = provider("Test-Schema-Arrays", NULL);

	expect_refused(p, "array of arrays", matrix, 1,
		       "field \"Matrix\": an array of arrays cannot be described");
	expect_refused(p, "nested array of arrays", outer, 2,
		       "field \"Grid.Row\": an array of arrays cannot be described");
}

Test(provider, type_codes_outside_rp_type_are_refused)
{
	static const uint8_t bad[] = { 0, 2, 15, 20, 21, 22, 99, 255 };
	struct rp_provider *p = provider("Test-Schema-Types", NULL);
	size_t i;

	for (i = 0; i < sizeof(bad); i++) {
		struct rp_field f[2] = { { "Ok", RP_TYPE_U64, 0, 0, NULL },
					 { "Odd", bad[i], 0, 0, NULL } };
		struct rp_field a[1] = { { "List", RP_TYPE_ARRAY, bad[i], 0, NULL } };
		char want[96], what[32];

		snprintf(what, sizeof(what), "type %u", bad[i]);
		snprintf(want, sizeof(want), "field \"Odd\": type code %u is not an enum rp_type value",
			 bad[i]);
		expect_refused(p, what, f, 2, want);
		snprintf(what, sizeof(what), "array of type %u", bad[i]);
		snprintf(want, sizeof(want),
			 "field \"List\": element type code %u is not an enum rp_type value", bad[i]);
		expect_refused(p, what, a, 1, want);
	}
}

Test(provider, objects_without_members_are_refused)
{
	static const struct rp_field empty[] = { { "Empty", RP_TYPE_OBJECT, 0, 0, NULL } };
	static const struct rp_field listed[] = { { "X", RP_TYPE_U8, 0, 0, NULL } };
	/* a member list given, but nfields 0 */
	static const struct rp_field zero[] = { { "Zero", RP_TYPE_OBJECT, 0, 0, listed } };
	static const struct rp_field arr[] = { { "Items", RP_TYPE_ARRAY, RP_TYPE_OBJECT, 0, NULL } };
	static const struct rp_field deep[] = { { "Outer", RP_TYPE_OBJECT, 0, 1, empty } };
	struct rp_provider *p = provider("Test-Schema-Empty", NULL);

	expect_refused(p, "empty object", empty, 1,
		       "field \"Empty\": an object needs at least one member");
	expect_refused(p, "object with nfields 0", zero, 1,
		       "field \"Zero\": an object needs at least one member");
	expect_refused(p, "array of empty objects", arr, 1,
		       "field \"Items[]\": the array's element object needs at least one member");
	expect_refused(p, "nested empty object", deep, 1,
		       "field \"Outer.Empty\": an object needs at least one member");
}

Test(provider, missing_names_and_member_lists_are_refused)
{
	static const struct rp_field noname[] = { { "A", RP_TYPE_U8, 0, 0, NULL },
						  { NULL, RP_TYPE_U8, 0, 0, NULL } };
	static const struct rp_field nolist[] = { { "Obj", RP_TYPE_OBJECT, 0, 2, NULL } };
	struct rp_provider *p = provider("Test-Schema-Names", NULL);

	expect_refused(p, "unnamed field", noname, 2, "field 2 has no name");
	expect_refused(p, "object with no member list", nolist, 1,
		       "field \"Obj\": nfields is 2 but fields is NULL");
	expect_refused(p, "nfields without fields", NULL, 3, "nfields is 3 but fields is NULL");
}

/* levels[i] is an object whose only member is levels[i + 1]; the last holds
 * a UInt32. */
static struct rp_field *nested(int objects, struct rp_field *store)
{
	int i;

	store[objects] = (struct rp_field){ "Leaf", RP_TYPE_U32, 0, 0, NULL };
	for (i = objects - 1; i >= 0; i--) {
		static char names[16][8];

		snprintf(names[i], sizeof(names[i]), "L%d", i + 1);
		store[i] = (struct rp_field){ names[i], RP_TYPE_OBJECT, 0, 1, &store[i + 1] };
	}
	return store;
}

Test(provider, nesting_deeper_than_eight_is_refused)
{
	struct rp_field store[16];
	struct rp_provider *p = provider("Test-Schema-Deep", NULL);

	expect_refused(p, "9 nested objects", nested(9, store), 1,
		       "field \"L1.L2.L3.L4.L5.L6.L7.L8.L9\": members nested more than 8 levels deep");
	cr_assert_not_null(try_event(p, 2, "Deepest", nested(8, store), 1),
			   "8 nested objects are allowed: %s", rp_last_error());
}

Test(provider, metadata_over_both_formats_limits_is_refused)
{
	/* 30000 fields: 720 KB of V6 metadata (limit 65535), 1.38 MB in V5
	 * (limit 1 MiB) */
	struct rp_field *f = many_fields(30000);
	struct rp_provider *p = provider("Test-Schema-Huge", NULL);
	struct rp_event *ev = try_event(p, 3, "Huge", f, 30000);
	int e = errno;

	cr_assert_null(ev, "an event no format can describe was accepted");
	cr_assert_eq(e, EINVAL);
	cr_assert(strstr(rp_last_error(), "in nettrace V5, over the 1048576-byte limit"),
		  "rp_last_error(): %s", rp_last_error());
	cr_assert(strstr(rp_last_error(), "in nettrace V6, over the 65535-byte limit"),
		  "rp_last_error(): %s", rp_last_error());
	cr_assert(strstr(rp_last_error(), "event 3 \"Huge\" of provider \"Test-Schema-Huge\""),
		  "rp_last_error(): %s", rp_last_error());
	free_many(f, 30000);
}

/* ---- limits of one format: refused where that format meets them ----------- */

/* 3000 fields: 72 KB of metadata in V6 (over its 65535-byte rows), 138 KB
 * in V5 (fine). */
#define V6_ONLY_FIELDS 3000

Test(provider, v6_session_refuses_to_start_with_an_event_only_v5_can_carry, .timeout = 120)
{
	TH_NEED_TRACEDUMP(dll);
	char *dir = th_tmpdir(), *p5 = trace_path(dir, "v5"), *p6 = trace_path(dir, "v6");
	struct rp_field *f = many_fields(V6_ONLY_FIELDS);
	uint32_t payload[V6_ONLY_FIELDS];
	struct rp_provider *p = provider("Test-V6-Limit", NULL);
	struct rp_event *ev = event(p, 4, "Wide", f, V6_ONLY_FIELDS);
	struct rp_session *s;
	struct bytebuf te = { 0 };
	int i, ok = 0;

	s = try_start(p6, (const char *const[]){ "Test-V6-Limit" }, 1, 6, RP_BUFFERING_DROP, 0, 0);
	cr_assert_null(s, "a V6 session started although it cannot write event \"Wide\"");
	cr_assert_eq(errno, EINVAL);
	cr_assert(strstr(rp_last_error(), "nettrace V6 cannot carry event 4 \"Wide\" of provider "
			 "\"Test-V6-Limit\""), "rp_last_error(): %s", rp_last_error());
	cr_assert(strstr(rp_last_error(), "over the 65535-byte limit"), "%s", rp_last_error());
	cr_assert(strstr(rp_last_error(), "(use format 5)"), "%s", rp_last_error());

	/* V5 carries it, every field readable */
	for (i = 0; i < V6_ONLY_FIELDS; i++)
		payload[i] = (uint32_t)i;
	s = start(p5, "Test-V6-Limit", 5, RP_BUFFERING_DROP, 0);
	for (i = 0; i < 20; i++)
		ok += rp_event_write(ev, payload, sizeof(payload)) == 0;
	cr_assert_eq(rp_session_stop(s), 0);
	cr_assert_eq(ok, 20);
	te_counts(dll, p5, &te);
	cr_assert_eq(te_count(&te, "Test-V6-Limit/Wide"), 20, "TraceEvent: %s", (char *)te.p);
	cr_assert_eq(te_count(&te, "#lost"), 0);
	te.len = 0;
	te_dump(dll, p5, &te);
	cr_assert(strstr((char *)te.p, "\"F0000000000000002999\":2999}"),
		  "TraceEvent did not decode the last field");
	bb_free(&te);
	free_many(f, V6_ONLY_FIELDS);
	free(p5);
	free(p6);
	th_rmdir(dir);
}

Test(provider, event_only_v5_can_carry_is_refused_while_a_v6_session_collects_it, .timeout = 120)
{
	TH_NEED_TRACEDUMP(dll);
	static const struct rp_field small[] = { { "N", RP_TYPE_U32, 0, 0, NULL } };
	char *dir = th_tmpdir(), *p6 = trace_path(dir, "v6");
	struct rp_field *f = many_fields(V6_ONLY_FIELDS);
	struct rp_provider *p = provider("Test-V6-Running", NULL), *other;
	struct rp_session *s = start(p6, "Test-V6-Running", 6, RP_BUFFERING_DROP, 0);
	struct rp_event *ev, *ok_ev;
	struct bytebuf te = { 0 };
	char want[96];
	uint32_t i, n = 0;

	ev = try_event(p, 5, "Wide", f, V6_ONLY_FIELDS);
	cr_assert_null(ev, "an event the running V6 session cannot write was accepted");
	cr_assert_eq(errno, EINVAL);
	snprintf(want, sizeof(want), "session %d, which collects it, writes V6", rp_session_id(s));
	cr_assert(strstr(rp_last_error(), want), "rp_last_error(): %s", rp_last_error());
	cr_assert(strstr(rp_last_error(), "event 5 \"Wide\" of provider \"Test-V6-Running\""),
		  "rp_last_error(): %s", rp_last_error());
	/* the same schema in a provider the session does not collect is fine */
	other = provider("Test-V6-Elsewhere", NULL);
	cr_assert_not_null(try_event(other, 5, "Wide", f, V6_ONLY_FIELDS), "%s", rp_last_error());
	/* and the provider's well-formed events still reach the trace */
	ok_ev = event(p, 6, "Small", small, 1);
	for (i = 0; i < 100; i++)
		n += rp_event_write(ok_ev, &i, sizeof(i)) == 0;
	cr_assert_eq(rp_session_stop(s), 0);
	te_counts(dll, p6, &te);
	cr_assert_eq(te_count(&te, "Test-V6-Running/Small"), n, "TraceEvent: %s", (char *)te.p);
	cr_assert_eq(n, 100);
	bb_free(&te);
	free_many(f, V6_ONLY_FIELDS);
	free(p6);
	th_rmdir(dir);
}

Test(provider, v6_session_with_rundown_refuses_a_rundown_event_only_v5_can_carry)
{
	struct rp_field *f = many_fields(V6_ONLY_FIELDS);
	struct rp_provider *rd = provider(RP_RUNDOWN_PROVIDER, NULL);
	struct rp_event_opts eo = { .sz = sizeof(eo), .id = 144, .name = "WideEnd",
				    .keywords = 0x10, .nfields = V6_ONLY_FIELDS, .fields = f };
	const char *names[] = { "Test-Rundown-Other" };
	struct rp_session *s;

	cr_assert_not_null(rp_event_new(rd, &eo), "%s", rp_last_error());
	s = try_start("/dev/null", names, 1, 6, RP_BUFFERING_DROP, 0, 0x10);
	cr_assert_null(s, "a V6 session with rundown started although it cannot write WideEnd");
	cr_assert(strstr(rp_last_error(), "nettrace V6 cannot carry event 144 \"WideEnd\""),
		  "rp_last_error(): %s", rp_last_error());
	/* rundown keywords that do not take the event: starts */
	s = try_start("/dev/null", names, 1, 6, RP_BUFFERING_DROP, 0, 0x20);
	cr_assert_not_null(s, "%s", rp_last_error());
	cr_assert_eq(rp_session_stop(s), 0);
	free_many(f, V6_ONLY_FIELDS);
}

/* ---- a write that returns 0 is in the trace --------------------------------- */

#define JUDGE_WRITES 50u

struct judged {
	struct rp_event *ev;
	const char *key;		/* TraceEvent's "<Provider>/<EventName>" */
	const void *payload;
	size_t len;
	uint32_t ok;			/* writes that returned 0 */
};

Test(provider, every_write_that_returns_0_is_in_the_trace, .timeout = 300)
{
	TH_NEED_TRACEDUMP(dll);
	static const uint8_t guid[16] = { 0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe,
					  0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef };
	static const struct rp_field point[] = { { "X", RP_TYPE_I32, 0, 0, NULL },
						 { "Y", RP_TYPE_I32, 0, 0, NULL } };
	static const struct rp_field shapes[] = {
		{ "Count", RP_TYPE_U16, 0, 0, NULL },
		{ "Points", RP_TYPE_ARRAY, RP_TYPE_OBJECT, 2, point },
		{ "Tags", RP_TYPE_ARRAY, RP_TYPE_STRING, 0, NULL },
		{ "Flag", RP_TYPE_BOOL, 0, 0, NULL },
		{ "When", RP_TYPE_DATETIME, 0, 0, NULL },
		{ "Id", RP_TYPE_GUID, 0, 0, NULL },
		{ "Ratio", RP_TYPE_F64, 0, 0, NULL },
	};
	static const struct rp_field one[] = { { "V", RP_TYPE_U32, 0, 0, NULL } };
	/* Count, 2 points, 1 tag "a", Flag, When, Id, Ratio */
	static const uint8_t shapes_payload[] = {
		7, 0,  2, 0,  1, 0, 0, 0,  2, 0, 0, 0,  3, 0, 0, 0,  4, 0, 0, 0,
		1, 0,  'a', 0, 0, 0,  1, 0, 0, 0,  1, 2, 3, 4, 5, 6, 7, 8,
		1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,  0, 0, 0, 0, 0, 0, 0xf0, 0x3f,
	};
	static const uint32_t seven = 7;
	char *dir = th_tmpdir(), *paths[2] = { trace_path(dir, "judge-v5"), trace_path(dir, "judge-v6") };
	const char *names[] = { "Test-Judge", "Test-Judge-Guid" };
	struct rp_provider *pj = provider("Test-Judge", NULL);
	struct rp_provider *pg = provider("Test-Judge-Guid", guid);
	struct rp_field store[16], *wide = many_fields(2000);
	uint32_t wide_payload[2000];
	struct rp_session *s[2];
	struct judged j[6];
	uint32_t i, k, nj = 0;
	int t;

	for (i = 0; i < 2000; i++)
		wide_payload[i] = i;
	/* the GUID is not the one the name derives to: V6 carries it, V5 names
	 * the provider only (readers derive its GUID) */
	j[nj++] = (struct judged){ event(pg, 1, "Guided", one, 1), "Test-Judge-Guid/Guided",
				   &seven, 4, 0 };
	/* 92 KB of metadata in V5 (UTF-16), 48 KB in V6 */
	j[nj++] = (struct judged){ event(pj, 2, "Wide", wide, 2000), "Test-Judge/Wide",
				   wide_payload, sizeof(wide_payload), 0 };
	j[nj++] = (struct judged){ event(pj, 3, "Deepest", nested(8, store), 1),
				   "Test-Judge/Deepest", &seven, 4, 0 };
	j[nj++] = (struct judged){ event(pj, 4, "Shapes", shapes, 7), "Test-Judge/Shapes",
				   shapes_payload, sizeof(shapes_payload), 0 };
	j[nj++] = (struct judged){ event(pj, 5, "NoFields", NULL, 0), "Test-Judge/NoFields",
				   NULL, 0, 0 };
	j[nj++] = (struct judged){ event(pg, 6, "Later", one, 1), "Test-Judge-Guid/Later",
				   &seven, 4, 0 };
	for (t = 0; t < 2; t++) {
		s[t] = try_start(paths[t], names, 2, 5 + t, RP_BUFFERING_BLOCK, 0, 0);
		cr_assert_not_null(s[t], "V%d: %s", 5 + t, rp_last_error());
	}
	for (k = 0; k < JUDGE_WRITES; k++)
		for (i = 0; i < nj; i++)
			j[i].ok += rp_event_write(j[i].ev, j[i].payload, j[i].len) == 0;
	for (t = 0; t < 2; t++) {
		struct rp_session_stats st = { .sz = sizeof(st) };

		cr_assert_eq(rp_session_stats(s[t], &st), 0);
		cr_assert_eq(st.corrupt_records, 0, "V%d: %" PRIu64 " records skipped", 5 + t,
			     st.corrupt_records);
		cr_assert_eq(rp_session_stop(s[t]), 0);
	}
	for (t = 0; t < 2; t++) {
		struct bytebuf te = { 0 };
		char want[160], gs[37];
		uint8_t g[16];

		te_counts(dll, paths[t], &te);
		for (i = 0; i < nj; i++) {
			cr_assert_eq(j[i].ok, JUDGE_WRITES, "%s: %u of %u writes returned 0", j[i].key,
				     j[i].ok, JUDGE_WRITES);
			cr_assert_eq(te_count(&te, j[i].key), j[i].ok,
				     "V%d: %s: %u writes returned 0, TraceEvent read %" PRIu64
				     "\n%s", 5 + t, j[i].key, j[i].ok, te_count(&te, j[i].key),
				     (char *)te.p);
		}
		cr_assert_eq(te_count(&te, "#lost"), 0, "V%d: EventsLost", 5 + t);
		te.len = 0;
		te_dump(dll, paths[t], &te);
		/* what the events say, as TraceEvent decodes it */
		cr_assert(strstr((char *)te.p, "\"L1\":{\"L2\":{\"L3\":{\"L4\":{\"L5\":{\"L6\":{\"L7\":"
				 "{\"L8\":{\"Leaf\":7}}}}}}}}"), "V%d: the deepest event's field", 5 + t);
		cr_assert(strstr((char *)te.p, "\"F0000000000000001999\":1999}"),
			  "V%d: the wide event's last field", 5 + t);
		cr_assert(strstr((char *)te.p, "\"Points\":[{\"X\":1,\"Y\":2},{\"X\":3,\"Y\":4}],"
				 "\"Tags\":[\"a\"],\"Flag\":true"), "V%d: the shapes event", 5 + t);
		if (t == 1) {
			nt_guid_format(guid, gs);
		} else {
			nt_provider_guid("Test-Judge-Guid", g);
			nt_guid_format(g, gs);
		}
		snprintf(want, sizeof(want), "{\"provider\":\"Test-Judge-Guid\",\"guid\":\"%s\"", gs);
		cr_assert(strstr((char *)te.p, want), "V%d: expected %s", 5 + t, want);
		bb_free(&te);
	}
	free_many(wide, 2000);
	free(paths[0]);
	free(paths[1]);
	th_rmdir(dir);
}

/* ---- every payload size the header allows ---------------------------------- */

#define SWEEP_LO 65505u
#define SWEEP_HI 65535u
#define SWEEP_N (SWEEP_HI - SWEEP_LO + 1)
#define VARIANTS 5

static const char *const variant_names[VARIANTS] = {
	"plain", "activity ids", "256 given frames", "activity ids + 256 frames + thread",
	"captured stack",
};

/* payload: u16 element count, then variant, then a pattern */
static void fill_blob(uint8_t *b, uint32_t len, int variant)
{
	uint16_t count = (uint16_t)(len - 2);
	uint32_t i;

	memcpy(b, &count, 2);
	b[2] = (uint8_t)variant;
	for (i = 3; i < len; i++)
		b[i] = (uint8_t)(i * 7 + len);
}

static int write_variant(struct rp_event *ev, const uint8_t *b, size_t len, int variant)
{
	static const uint8_t act[16] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16 };
	static const uint8_t rel[16] = { 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1 };
	static uint64_t ips[RP_WRITE_MAX_GIVEN_FRAMES];
	struct iovec iov = { (void *)b, len };
	struct rp_write_opts wo = { .sz = sizeof(wo) };
	uint32_t i;

	for (i = 0; i < RP_WRITE_MAX_GIVEN_FRAMES; i++)
		ips[i] = 0x7f0000001000ull + i * 16;
	switch (variant) {
	case 0:
		return rp_event_write(ev, b, len);
	case 1:
		wo.activity_id = act;
		wo.related_activity_id = rel;
		break;
	case 2:
		wo.flags = RP_WRITE_STACK_GIVEN;
		wo.stack = ips;
		wo.nstack = RP_WRITE_MAX_GIVEN_FRAMES;
		break;
	case 3:
		/* the largest record a write makes */
		wo.activity_id = act;
		wo.related_activity_id = rel;
		wo.flags = RP_WRITE_STACK_GIVEN;
		wo.stack = ips;
		wo.nstack = RP_WRITE_MAX_GIVEN_FRAMES;
		wo.thread_id = 4242;
		break;
	default:
		wo.flags = RP_WRITE_STACK;
		break;
	}
	return rp_event_writev(ev, &iov, 1, &wo);
}

/* Our reader (which the interop tests hold to TraceEvent's view): every
 * (variant, size) arrived once, with its bytes. */
static void check_blobs(const char *path, uint32_t expect)
{
	static bool seen[VARIANTS][SWEEP_N];
	struct nt_reader *r = nt_reader_open(path);
	struct nt_rec rec;
	uint32_t n = 0;
	int err, v;

	memset(seen, 0, sizeof(seen));
	cr_assert_not_null(r, "open %s", path);
	while ((err = nt_reader_next(r, &rec)) > 0) {
		uint32_t len = rec.payload_len, i;

		if (strcmp(rec.meta->raw_name, "Blob"))
			continue;
		cr_assert(len >= SWEEP_LO && len <= SWEEP_HI, "payload of %u bytes", len);
		v = rec.payload[2];
		cr_assert(v < VARIANTS);
		cr_assert_not(seen[v][len - SWEEP_LO], "%s, %u bytes: twice", variant_names[v], len);
		seen[v][len - SWEEP_LO] = true;
		for (i = 3; i < len; i++)
			cr_assert_eq(rec.payload[i], (uint8_t)(i * 7 + len), "%s, %u bytes: byte %u",
				     variant_names[v], len, i);
		if (v == 2 || v == 3)
			cr_assert_eq(rec.stack_bytes, RP_WRITE_MAX_GIVEN_FRAMES * 8,
				     "%s: the stack", variant_names[v]);
		n++;
	}
	cr_assert_eq(err, 0, "%s: %s", path, nt_reader_errmsg(r));
	cr_assert_eq(n, expect, "%u of %u events in the trace", n, expect);
	nt_reader_free(r);
}

/*
 * Block mode: no payload the header allows is too big for a ring, with or
 * without activity ids and stacks (the largest record: 67664 bytes); each
 * write returns 0 and each event is in the trace. 65536 bytes: -EINVAL.
 */
static void block_sweep(int format, uint64_t budget)
{
	TH_NEED_TRACEDUMP(dll);
	static const struct rp_field blob[] = { { "Data", RP_TYPE_ARRAY, RP_TYPE_U8, 0, NULL } };
	static uint8_t b[65536];
	char *dir = th_tmpdir(), *path = trace_path(dir, "sweep");
	struct rp_provider *p = provider("Test-Big-Payload", NULL);
	struct rp_event *ev = event(p, 1, "Blob", blob, 1);
	struct rp_session_stats st = { .sz = sizeof(st) };
	struct rp_session *s = start(path, "Test-Big-Payload", format, RP_BUFFERING_BLOCK, budget);
	struct iovec iov = { b, sizeof(b) };
	struct bytebuf te = { 0 };
	uint32_t len, i;
	int v;

	for (v = 0; v < VARIANTS; v++) {
		for (len = SWEEP_LO; len <= SWEEP_HI; len++) {
			int rc;

			fill_blob(b, len, v);
			rc = write_variant(ev, b, len, v);
			cr_assert_eq(rc, 0, "Block, %s, %u-byte payload: %d (%s)", variant_names[v],
				     len, rc, strerror(-rc));
		}
	}
	cr_assert_eq(rp_event_write(ev, b, 65536), -EINVAL, "65536 bytes is over the limit");
	cr_assert_eq(rp_event_writev(ev, &iov, 1, NULL), -EINVAL, "65536 bytes (writev)");
	cr_assert_eq(rp_session_stats(s, &st), 0);
	for (i = 0; i < RP_DROP_REASON_NR; i++)
		cr_assert_eq(st.dropped[i], 0, "drop reason %u: %" PRIu64, i, st.dropped[i]);
	cr_assert_eq(rp_session_stop(s), 0);
	check_blobs(path, VARIANTS * SWEEP_N);
	te_counts(dll, path, &te);
	cr_assert_eq(te_count(&te, "Test-Big-Payload/Blob"), VARIANTS * SWEEP_N,
		     "TraceEvent: %s", (char *)te.p);
	cr_assert_eq(te_count(&te, "#lost"), 0);
	bb_free(&te);
	free(path);
	th_rmdir(dir);
}

Test(provider, block_takes_payloads_up_to_65535_bytes_v5, .timeout = 300)
{
	block_sweep(5, 0);
}

/* the smallest budget: rings of the minimum size, which parks writers */
Test(provider, block_takes_payloads_up_to_65535_bytes_in_small_rings_v6, .timeout = 300)
{
	block_sweep(6, 64 << 10);
}

/* Drop mode: a ring may be full, but no size the header allows is too big;
 * what was not captured is counted, and the trace holds the rest. */
Test(provider, drop_counts_no_allowed_size_as_too_big, .timeout = 300)
{
	TH_NEED_TRACEDUMP(dll);
	static const struct rp_field blob[] = { { "Data", RP_TYPE_ARRAY, RP_TYPE_U8, 0, NULL } };
	static uint8_t b[65536];
	char *dir = th_tmpdir(), *path = trace_path(dir, "drop");
	struct rp_provider *p = provider("Test-Big-Drop", NULL);
	struct rp_event *ev = event(p, 1, "Blob", blob, 1);
	struct rp_session_stats st = { .sz = sizeof(st) };
	struct rp_session *s = start(path, "Test-Big-Drop", 5, RP_BUFFERING_DROP, 64 << 10);
	struct bytebuf te = { 0 };
	uint32_t len, ok = 0, nobufs = 0;
	int v;

	for (v = 0; v < VARIANTS; v++) {
		for (len = SWEEP_LO; len <= SWEEP_HI; len++) {
			int rc;

			fill_blob(b, len, v);
			rc = write_variant(ev, b, len, v);
			cr_assert(rc == 0 || rc == -ENOBUFS, "%d", rc);
			ok += rc == 0;
			nobufs += rc == -ENOBUFS;
			if (rc)
				usleep(2000);	/* let the drainer catch up */
		}
	}
	cr_assert_eq(rp_session_stats(s, &st), 0);
	cr_assert_eq(st.dropped[RP_DROP_REASON_TOO_BIG], 0,
		     "%" PRIu64 " writes of an allowed size counted too big", st.dropped[RP_DROP_REASON_TOO_BIG]);
	cr_assert_eq(st.dropped[RP_DROP_REASON_FULL], nobufs);
	cr_assert_eq(rp_session_stop(s), 0);
	te_counts(dll, path, &te);
	cr_assert_eq(te_count(&te, "Test-Big-Drop/Blob"), ok, "TraceEvent: %s", (char *)te.p);
	cr_assert_eq(te_count(&te, "#lost"), nobufs);
	cr_assert_gt(ok, 0);
	bb_free(&te);
	free(path);
	th_rmdir(dir);
}

/* Whatever the budget, a session's rings take the largest record a write
 * makes: activity ids, thread block, RP_WRITE_MAX_GIVEN_FRAMES frames and
 * 65535 payload bytes. */
Test(provider, every_session_ring_takes_the_largest_record)
{
	static const uint64_t budgets[] = { 1, 64 << 10, 1 << 20, 0, 256ull << 20 };
	uint64_t largest = rp_record_size(RP_REC_F_ACTIVITY | RP_REC_F_THREAD | RP_REC_F_STACK,
					  RP_WRITE_MAX_GIVEN_FRAMES, 65535);
	size_t i;

	cr_assert_eq(largest, 67664);
	for (i = 0; i < sizeof(budgets) / sizeof(budgets[0]); i++) {
		struct rp_session *s = start("/dev/null", "Test-Geometry", 5, RP_BUFFERING_BLOCK,
					     budgets[i]);
		const struct rp_shm_session *h = rp_shm_header(s->shm);

		cr_assert_geq(h->max_record, largest,
			      "budget %" PRIu64 ": rings of %" PRIu64 " bytes take records of %u "
			      "bytes at most (RP_REC_MAX_SIZE %u), the largest is %" PRIu64,
			      budgets[i], (uint64_t)h->ring_data_size, h->max_record,
			      RP_REC_MAX_SIZE, largest);
		cr_assert_eq(rp_session_stop(s), 0);
	}
}
