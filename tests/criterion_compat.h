/* SPDX-License-Identifier: MIT */
/*
 * Criterion, or under ThreadSanitizer a minimal stand-in with the same
 * Test()/cr_assert*() surface.
 */
#ifndef RINGPIPE_CRITERION_COMPAT_H
#define RINGPIPE_CRITERION_COMPAT_H

#ifdef __SANITIZE_THREAD__
/*
 * Criterion 2.4 cannot start under ThreadSanitizer: its BoxFort arena is
 * mmap'ed MAP_FIXED at a random address that TSan's layout reserves
 * (Snaipe/Criterion#274).  Under TSan these tests therefore run on a tiny
 * built-in runner with the same Test()/cr_assert*() surface: one fork per
 * test, a hard timeout, PASS/FAIL lines and a non-zero exit on failure.
 * Our main() takes precedence over the one in libcriterion.
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* the options of Criterion's Test() that these tests use: .timeout (s) and
 * .fini, which also runs when an assertion ends the test (it stops the
 * servers a test started) */
struct mini_opts {
	int first_;		/* so that the options given need no other */
	double timeout;
	void (*fini)(void);
};

struct mini_test {
	const char *suite, *name;
	void (*fn)(void);
	const struct mini_opts *opts;
};
static struct mini_test mini_tests[64];
static int mini_ntests;
static void (*mini_fini)(void);	/* the running test's .fini */

#define Test(suite, name, ...)							\
	static void suite##__##name(void);					\
	static const struct mini_opts suite##__##name##__opts = { .first_ = 0, __VA_ARGS__ }; \
	__attribute__((constructor)) static void suite##__##name##__reg(void)	\
	{									\
		if (mini_ntests < 64)						\
			mini_tests[mini_ntests++] = (struct mini_test){		\
				#suite, #name, suite##__##name,			\
				&suite##__##name##__opts };			\
	}									\
	static void suite##__##name(void)

__attribute__((format(printf, 4, 5), noreturn))
static void mini_fail(const char *file, int line, const char *expr, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s:%d: assertion failed: %s\n  ", file, line, expr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	if (mini_fini)
		mini_fini();
	_exit(1);
}

#define cr_assert(c, ...)	do { if (!(c)) mini_fail(__FILE__, __LINE__, #c, " " __VA_ARGS__); } while (0)
#define cr_assert_not(c, ...)	cr_assert(!(c), __VA_ARGS__)
#define cr_assert_eq(a, b, ...)	cr_assert((a) == (b), __VA_ARGS__)
#define cr_assert_neq(a, b, ...) cr_assert((a) != (b), __VA_ARGS__)
#define cr_assert_lt(a, b, ...)	cr_assert((a) < (b), __VA_ARGS__)
#define cr_assert_leq(a, b, ...) cr_assert((a) <= (b), __VA_ARGS__)
#define cr_assert_gt(a, b, ...)	cr_assert((a) > (b), __VA_ARGS__)
#define cr_assert_geq(a, b, ...) cr_assert((a) >= (b), __VA_ARGS__)
#define cr_assert_null(p, ...)	cr_assert((p) == NULL, __VA_ARGS__)
#define cr_assert_not_null(p, ...) cr_assert((p) != NULL, __VA_ARGS__)
#define cr_assert_str_eq(a, b, ...) cr_assert(strcmp((a), (b)) == 0, __VA_ARGS__)
#define cr_assert_fail(...)	mini_fail(__FILE__, __LINE__, "fail", " " __VA_ARGS__)
#define cr_skip_test(...)	(fprintf(stderr, "[SKIP] " __VA_ARGS__), fputc('\n', stderr), _exit(77))
#define cr_log_info(...)	(fprintf(stderr, "[----] " __VA_ARGS__), fputc('\n', stderr))
#define cr_log_warn(...)	(fprintf(stderr, "[WARN] " __VA_ARGS__), fputc('\n', stderr))

/* the library's agent-join thread (user/session/agent_join.c) */
void rp_agent_join_disable(void);

int main(int argc, char **argv)
{
	int failed = 0;

	/* TSan cannot follow a fork of a process with threads: the runner
	 * stops the library's one thread before it forks the tests */
	rp_agent_join_disable();

	for (int i = 0; i < mini_ntests; i++) {
		const struct mini_test *t = &mini_tests[i];
		int status = 0;
		pid_t pid;

		if (argc > 1 && !strstr(t->name, argv[1]) && !strstr(t->suite, argv[1]))
			continue;
		fflush(NULL);
		pid = fork();
		if (pid == 0) {
			alarm(t->opts->timeout > 120 ? (unsigned int)t->opts->timeout : 120);
			mini_fini = t->opts->fini;
			t->fn();
			if (mini_fini)
				mini_fini();
			exit(0);	/* not _exit: lets TSan turn reports into exit code 66 */
		}
		if (pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
		    WEXITSTATUS(status) == 77) {
			printf("[SKIP] %s::%s\n", t->suite, t->name);
			continue;
		}
		if (pid < 0 || !WIFEXITED(status) || WEXITSTATUS(status)) {
			failed++;
			printf("[FAIL] %s::%s (status 0x%x)\n", t->suite, t->name, status);
		} else {
			printf("[PASS] %s::%s\n", t->suite, t->name);
		}
	}
	printf("[====] Synthesis: Tested: %d | Failing: %d (TSan mini-runner)\n", mini_ntests, failed);
	return failed ? 1 : 0;
}
#else
#include <criterion/criterion.h>
#endif

#endif /* RINGPIPE_CRITERION_COMPAT_H */
