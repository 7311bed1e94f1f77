// SPDX-License-Identifier: MIT
/*
 * user_events publication (user/kernel/user_events.c): the runtime check
 * against the filesystem, a provider that asked for user_events on a kernel
 * without them, and, where the kernel has them, a real registration, the
 * enable bit flipped through tracefs, a write read back from the trace
 * buffer.
 *
 * On a kernel without CONFIG_USER_EVENTS the last test skips with the
 * check's reason; the others run everywhere, so the skip hides nothing but
 * the part the kernel cannot do.
 */
#include <fcntl.h>

#include "clock.h"
#include "helpers.h"
#include "ringpipe/ringpipe.h"
#include "session.h"
#include "user_events.h"

static void touch(const char *dir, const char *name)
{
	char *p;

	cr_assert(asprintf(&p, "%s/%s", dir, name) > 0);
	cr_assert_eq(th_write_file(p, "", 0), 0);
	free(p);
}

Test(user_events, runtime_check_matches_the_filesystem)
{
	char why[512] = "";
	char *dir;
	int rc;

	/* the real tracefs: available exactly when the file opens */
	rc = rp_ue_check(NULL, why, sizeof(why));
	if (access("/sys/kernel/tracing/user_events_data", F_OK) == 0 ||
	    access("/sys/kernel/debug/tracing/user_events_data", F_OK) == 0) {
		cr_assert(rc == 0 || rc == -EACCES || rc == -EPERM, "%d: %s", rc, why);
	} else {
		cr_assert_eq(rc, -ENOENT, "%s", why);
		cr_assert(strstr(why, "user_events: "), "%s", why);
		if (access("/sys/kernel/tracing/README", F_OK) == 0)
			cr_assert_str_eq(why, "user_events: not available in this kernel "
				"(CONFIG_USER_EVENTS is off: /sys/kernel/tracing/user_events_data "
				"missing)");
		else
			cr_assert(strstr(why, "tracefs is not mounted at /sys/kernel/tracing"),
				  "%s", why);
	}
	/* stand-in trees: each verdict follows what is there */
	dir = th_tmpdir();
	cr_assert_not_null(dir);
	cr_assert_eq(rp_ue_check(dir, why, sizeof(why)), -ENOENT);
	cr_assert(strstr(why, "tracefs is not mounted at"), "%s", why);
	touch(dir, "README");
	cr_assert_eq(rp_ue_check(dir, why, sizeof(why)), -ENOENT);
	cr_assert(strstr(why, "CONFIG_USER_EVENTS is off"), "%s", why);
	cr_assert(strstr(why, dir), "the message names the path: %s", why);
	touch(dir, "user_events_data");
	cr_assert_eq(rp_ue_check(dir, why, sizeof(why)), 0, "%s", why);
	th_rmdir(dir);
}

Test(user_events, opt_in_parsing)
{
	setenv("RINGPIPE_USER_EVENTS", "A-B,My-Provider,Z", 1);
	cr_assert(rp_ue_wanted("My-Provider"));
	cr_assert(rp_ue_wanted("Z"));
	cr_assert_not(rp_ue_wanted("My"));
	cr_assert_not(rp_ue_wanted("My-Provider-2"));
	setenv("RINGPIPE_USER_EVENTS", "1", 1);
	cr_assert(rp_ue_wanted("anything"));
	setenv("RINGPIPE_USER_EVENTS", "0", 1);
	cr_assert_not(rp_ue_wanted("anything"));
	unsetenv("RINGPIPE_USER_EVENTS");
	cr_assert_not(rp_ue_wanted("anything"));
}

/* Without user_events in the kernel, an opted-in provider behaves exactly
 * like any other and says why it publishes nothing; with them, its event
 * gets a tracepoint and slot 63 is reserved. Either way sessions work. */
Test(user_events, opted_in_provider_works_either_way)
{
	char why[512];
	bool avail = rp_ue_check(NULL, why, sizeof(why)) == 0;
	struct rp_provider_opts po = { .sz = sizeof(po), .name = "Rp-Ue-Either" };
	struct rp_event_opts eo = { .sz = sizeof(eo), .id = 3, .name = "Ev", .level = 4 };
	struct rp_provider_config pc = { .name = "Rp-Ue-Either" };
	struct rp_session_opts so = { .sz = sizeof(so), .providers = &pc, .nproviders = 1,
				      .format = 5, .path = "/dev/null", .fd = -1,
				      .kind = RP_SESSION_DEFERRED };
	struct rp_session_stats st = { .sz = sizeof(st) };
	struct rp_provider *p;
	struct rp_event *ev;
	struct rp_session *s;
	uint64_t payload = 42;

	setenv("RINGPIPE_USER_EVENTS", "Rp-Ue-Either", 1);
	p = rp_provider_new(&po);
	cr_assert_not_null(p);
	ev = rp_event_new(p, &eo);
	cr_assert_not_null(ev, "the event must exist whatever the kernel has");
	if (avail) {
		cr_assert_not_null(rp_ue_name(ev), "%s", rp_last_error());
		cr_assert(strstr(rp_ue_name(ev), "_Rp_Ue_Either_Ev_3"), "%s", rp_ue_name(ev));
		cr_assert_eq(rp_slots[RP_UE_SLOT].state, SLOT_RESERVED);
	} else {
		cr_assert_null(rp_ue_name(ev));
		cr_assert_str_eq(rp_last_error(), why);
		cr_assert_eq(rp_slots[RP_UE_SLOT].state, SLOT_FREE, "no slot taken for nothing");
		cr_assert_eq(__atomic_load_n(&ev->hot.sessions, __ATOMIC_RELAXED), 0);
	}
	s = rp_session_start(&so);
	cr_assert_not_null(s, "%s", rp_last_error());
	if (avail)
		cr_assert_neq(rp_session_id(s), RP_UE_SLOT, "slot 63 is user_events' bit");
	cr_assert(rp_event_enabled(ev));
	cr_assert_eq(rp_event_write(ev, &payload, sizeof(payload)), 0);
	cr_assert_eq(rp_session_stats(s, &st), 0);
	for (int r = 0; r < RP_DROP_REASON_NR; r++)
		cr_assert_eq(st.dropped[r], 0);
	cr_assert_eq(rp_session_stop(s), 0);
	cr_assert_eq(__atomic_load_n(&ev->hot.sessions, __ATOMIC_RELAXED) & ~RP_UE_BIT, 0);
	unsetenv("RINGPIPE_USER_EVENTS");
}

static int write_str(const char *path, const char *s)
{
	return th_write_file(path, s, strlen(s));
}

static bool wait_bit(struct rp_event *ev, bool set)
{
	for (int i = 0; i < 60000; i++) {	/* a 60 s hang guard */
		if (!!(__atomic_load_n(&ev->hot.sessions, __ATOMIC_RELAXED) & RP_UE_BIT) == set)
			return true;
		rp_clock_sleep_ns(1000000);
	}
	return false;
}

/* Counts the lines of the ftrace buffer that name the tracepoint. */
static int trace_hits(const char *tracefs, const char *name)
{
	struct bytebuf b = { 0 };
	char *path, *p;
	int n = 0;

	cr_assert(asprintf(&path, "%s/trace", tracefs) > 0);
	cr_assert_eq(th_read_file(path, &b), 0);
	for (p = (char *)b.p; p && (p = strstr(p, name)); p += strlen(name))
		n++;
	bb_free(&b);
	free(path);
	return n;
}

Test(user_events, real_tracepoint_roundtrip, .timeout = 60)
{
	const char *tracefs = "/sys/kernel/tracing";
	char why[512];
	struct rp_provider_opts po = { .sz = sizeof(po), .name = "Rp-Ue-Real" };
	struct rp_event_opts eo = { .sz = sizeof(eo), .id = 5, .name = "Marker", .level = 4 };
	struct rp_provider *p;
	struct rp_event *ev;
	char *enable;
	uint8_t payload[16] = "ringpipe-ue-ok!";
	int rc = rp_ue_check(NULL, why, sizeof(why));

	if (rc)
		cr_skip_test("%s", why);
	if (access("/sys/kernel/tracing/user_events_data", F_OK))
		tracefs = "/sys/kernel/debug/tracing";
	if (geteuid() != 0)
		cr_skip_test("enabling a tracepoint through %s needs root", tracefs);

	setenv("RINGPIPE_USER_EVENTS", "Rp-Ue-Real", 1);
	p = rp_provider_new(&po);
	ev = rp_event_new(p, &eo);
	cr_assert_not_null(ev);
	cr_assert_not_null(rp_ue_name(ev), "registration failed: %s", rp_last_error());

	/* no session, no tracer: disabled, the write publishes nothing */
	cr_assert_not(rp_event_enabled(ev));
	/* opening "trace" for writing with truncation clears the buffer */
	cr_assert(asprintf(&enable, "%s/trace", tracefs) > 0);
	cr_assert_eq(write_str(enable, ""), 0);
	free(enable);

	cr_assert(asprintf(&enable, "%s/events/user_events/%s/enable", tracefs,
			   rp_ue_name(ev)) > 0);
	cr_assert_eq(write_str(enable, "1"), 0, "cannot enable %s", enable);
	cr_assert(wait_bit(ev, true), "the kernel did not set the enable bit");
	cr_assert(rp_event_enabled(ev), "a tracepoint tracer enables the event");
	cr_assert_eq(rp_event_write(ev, payload, sizeof(payload)), 0);
	cr_assert_eq(rp_event_write(ev, payload, sizeof(payload)), 0);
	cr_assert_eq(trace_hits(tracefs, rp_ue_name(ev)), 2, "two writes, two trace lines");

	cr_assert_eq(write_str(enable, "0"), 0);
	cr_assert(wait_bit(ev, false), "the kernel did not clear the enable bit");
	cr_assert_not(rp_event_enabled(ev));
	cr_assert_eq(rp_event_write(ev, payload, sizeof(payload)), 0);
	cr_assert_eq(trace_hits(tracefs, rp_ue_name(ev)), 2, "written while disabled");
	free(enable);
	unsetenv("RINGPIPE_USER_EVENTS");
}
