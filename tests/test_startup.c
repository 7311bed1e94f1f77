// SPDX-License-Identifier: MIT
/*
 * The environment-configured startup session and the provider-list syntax
 * shared by the environment, the CLI and IPC.
 */
#include <inttypes.h>
#include <string.h>
#include <sys/wait.h>

#include "helpers.h"
#include "nettrace_read.h"
#include "ringpipe/ringpipe.h"
#include "config.h"
#include "startup.h"

Test(startup, provider_lists_parse)
{
	struct rp_provider_config *p;
	uint32_t n;
	char err[256];

	cr_assert_eq(rp_providers_parse("A,B:0x30,C:5:Verbose,D::Warning:k=v;x=y:z", &p, &n, err,
					sizeof(err)), 0, "%s", err);
	cr_assert_eq(n, 4);
	cr_assert_str_eq(p[0].name, "A");
	cr_assert_eq(p[0].keywords, 0);
	cr_assert_eq(p[0].level, 0);
	cr_assert_str_eq(p[1].name, "B");
	cr_assert_eq(p[1].keywords, 0x30);
	cr_assert_eq(p[2].keywords, 5);
	cr_assert_eq(p[2].level, 5);
	cr_assert_eq(p[3].keywords, 0);
	cr_assert_eq(p[3].level, 3);
	cr_assert_str_eq(p[3].args, "k=v;x=y:z");
	rp_providers_free(p, n);
}

Test(startup, bad_provider_lists_say_what_is_wrong)
{
	static const struct {
		const char *spec, *msg;
	} cases[] = {
		{ "", "no provider" },
		{ "A,", "trailing ','" },
		{ ":0x1", "empty provider name" },
		{ "A:zz", "keywords 'zz' of A" },
		{ "A:1:Loud", "level 'Loud' of A" },
		{ "A:1:9", "level '9' of A" },
	};
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct rp_provider_config *p;
		uint32_t n;
		char err[256] = "";

		cr_assert_eq(rp_providers_parse(cases[i].spec, &p, &n, err, sizeof(err)), -EINVAL,
			     "'%s' must be refused", cases[i].spec);
		cr_assert(strstr(err, cases[i].msg), "'%s': message '%s' lacks '%s'", cases[i].spec,
			  err, cases[i].msg);
	}
}

Test(startup, buffering_modes_are_strict)
{
	int m = -1;

	cr_assert_eq(rp_buffering_parse("drop", &m), 0);
	cr_assert_eq(m, RP_BUFFERING_DROP);
	cr_assert_eq(rp_buffering_parse("Block", &m), 0);
	cr_assert_eq(m, RP_BUFFERING_BLOCK);
	cr_assert_eq(rp_buffering_parse("2", &m), -EINVAL);
	cr_assert_eq(rp_buffering_parse("dropp", &m), -EINVAL);
	cr_assert_eq(rp_buffering_parse("", &m), -EINVAL);
}

static const struct rp_field fields[] = { { "N", RP_TYPE_U32, 0, 0, NULL } };

/* In a child: the environment starts a session before the program defines
 * anything; the program's events are traced and the trace ends at exit. */
static int child_program(void)
{
	struct rp_provider_opts po = { .sz = sizeof(po), .name = "Test-Startup" };
	struct rp_event_opts eo = { .sz = sizeof(eo), .id = 1, .name = "Tick", .nfields = 1,
				    .fields = fields };
	struct rp_provider *p;
	struct rp_event *ev;
	uint32_t i;

	rp_startup_session();
	p = rp_provider_new(&po);
	ev = p ? rp_event_new(p, &eo) : NULL;
	if (!ev || !rp_event_enabled(ev))
		return 3;
	for (i = 0; i < 5000; i++)
		if (rp_event_write(ev, &i, sizeof(i)))
			return 4;
	return 0;	/* exit() stops the startup session */
}

static int run_child(char **env_kv, struct bytebuf *err_out)
{
	int pfd[2], st;
	pid_t pid;

	cr_assert_eq(pipe(pfd), 0);
	pid = fork();
	if (pid == 0) {
		int i;

		dup2(pfd[1], 2);
		for (i = 0; env_kv[i]; i += 2)
			setenv(env_kv[i], env_kv[i + 1], 1);
		exit(child_program());
	}
	close(pfd[1]);
	{
		char buf[4096];
		ssize_t n;

		while ((n = read(pfd[0], buf, sizeof(buf))) > 0)
			bb_append(err_out, buf, (size_t)n);
		bb_append(err_out, "", 1);
	}
	close(pfd[0]);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

Test(startup, environment_starts_a_session_from_the_first_event, .timeout = 60)
{
	char *dir = th_tmpdir(), *out, *want;
	char *env[] = { "RINGPIPE_OUTPUT", NULL, "RINGPIPE_PROVIDERS", "Test-Startup:0:4",
			"RINGPIPE_FORMAT", "v6", "RINGPIPE_BUFFER_MB", "2", NULL };
	struct bytebuf err = { 0 };
	struct nt_reader *r;
	struct nt_rec rec;
	uint64_t n = 0;
	int rc;

	cr_assert(asprintf(&out, "%s/startup-{pid}.nettrace", dir) > 0);
	env[1] = out;
	rc = run_child(env, &err);
	cr_assert_eq(rc, 0, "child: %d, stderr: %s", rc, (char *)err.p);
	cr_assert(asprintf(&want, "ls %s/startup-*.nettrace >/dev/null", dir) > 0);
	cr_assert_eq(system(want), 0, "{pid} expanded into a file name");
	free(want);
	cr_assert(asprintf(&want, "%s", dir) > 0);
	{
		struct bytebuf ls = { 0 };
		char *cmd;

		cr_assert(asprintf(&cmd, "ls %s/startup-*.nettrace", dir) > 0);
		th_run(cmd, &ls);
		ls.p[strcspn((char *)ls.p, "\n")] = 0;
		r = nt_reader_open((char *)ls.p);
		cr_assert_not_null(r, "%s", (char *)ls.p);
		free(cmd);
		bb_free(&ls);
	}
	while (nt_reader_next(r, &rec) > 0) {
		uint32_t v;

		memcpy(&v, rec.payload, 4);
		cr_assert_eq(v, n, "event %" PRIu64 " carries %u", n, v);
		n++;
	}
	cr_assert_null(nt_reader_errmsg(r), "%s", nt_reader_errmsg(r));
	cr_assert_eq(nt_reader_info(r)->format, 6);
	cr_assert_eq(n, 5000, "every event from the first one on");
	cr_assert_eq(nt_reader_lost(r), 0);
	nt_reader_free(r);
	bb_free(&err);
	free(want);
	free(out);
	th_rmdir(dir);
}

Test(startup, bad_environment_is_reported_and_the_program_runs_on, .timeout = 60)
{
	static const struct {
		const char *var, *val, *msg;
	} cases[] = {
		{ "RINGPIPE_FORMAT", "v7", "RINGPIPE_FORMAT=v7: must be v5 or v6" },
		{ "RINGPIPE_BUFFERING_MODE", "lossy", "RINGPIPE_BUFFERING_MODE=lossy: must be drop or block" },
		{ "RINGPIPE_BUFFER_MB", "-3", "RINGPIPE_BUFFER_MB=-3" },
		{ "RINGPIPE_PROVIDERS", "A:1:Loud", "level 'Loud' of A" },
		{ "DOTNET_EventPipeBufferingMode", "2", "must be 0 (Drop) or 1 (Block)" },
		{ "DOTNET_EventPipeBufferingMode", "Block", "must be 0 (Drop) or 1 (Block)" },
	};
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *env[] = { "RINGPIPE_OUTPUT", "/dev/null", "RINGPIPE_PROVIDERS", "Test-Startup",
				(char *)cases[i].var, (char *)cases[i].val, NULL };
		struct bytebuf err = { 0 };
		int rc = run_child(env, &err);

		/* 3: the event stayed disabled because no session started */
		cr_assert_eq(rc, 3, "%s=%s: child exit %d", cases[i].var, cases[i].val, rc);
		cr_assert(strstr((char *)err.p, cases[i].msg), "stderr '%s' lacks '%s'",
			  (char *)err.p, cases[i].msg);
		cr_assert(strstr((char *)err.p, "not started"), "%s", (char *)err.p);
		bb_free(&err);
	}
}
