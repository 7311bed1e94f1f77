// SPDX-License-Identifier: MIT
/*
 * The one /proc stat reader: fields counted from the command's last ')',
 * whatever the command holds; a process that is gone said as such.
 */
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "procfs.h"

Test(procfs, a_command_with_spaces_and_parentheses_splits_right)
{
	struct rp_proc_stat st;
	char path[64];
	int p[2];
	pid_t pid;

	cr_assert_eq(pipe(p), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (!pid) {
		char c;

		prctl(PR_SET_NAME, "a) (b) 9 x");
		close(p[1]);
		_exit(read(p[0], &c, 1) < 0);	/* until the test is done */
	}
	close(p[0]);
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	/* the name is set by the child after fork: read until it shows */
	do {
		cr_assert_eq(rp_proc_stat_read(AT_FDCWD, path, &st), 0);
	} while (strcmp(st.comm, "a) (b) 9 x"));
	cr_assert(st.state == 'S' || st.state == 'R', "state %c", st.state);
	cr_assert_geq(st.nfields, 52u, "%u fields", st.nfields);
	cr_assert_eq(rp_proc_stat_u64(&st, 4, 0), (uint64_t)getpid(), "field 4, the parent");
	cr_assert_gt(rp_proc_stat_u64(&st, 22, 0), 0u, "field 22, the start time");
	cr_assert_eq(rp_proc_stat_u64(&st, 53, 7), 7u, "no field 53");
	cr_assert_eq(rp_proc_stat_u64(&st, 2, 7), 7u, "field 2 is text");
	close(p[1]);
	cr_assert_eq(waitpid(pid, NULL, 0), pid);
	cr_assert_eq(rp_proc_stat_read(AT_FDCWD, path, &st), -ESRCH, "a reaped process is gone");
}

Test(procfs, a_stopped_thread_reads_as_stopped_and_a_relative_path_reads_under_dirfd)
{
	struct rp_proc_stat st;
	int dirfd;
	pid_t pid = fork();

	cr_assert_geq(pid, 0);
	if (!pid) {
		pause();
		_exit(0);
	}
	cr_assert_eq(kill(pid, SIGSTOP), 0);
	cr_assert_eq(waitpid(pid, NULL, WUNTRACED), pid);
	dirfd = open(th_fmt("/proc/%d", (int)pid), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	cr_assert_geq(dirfd, 0);
	cr_assert_eq(rp_proc_stat_read(dirfd, "stat", &st), 0);
	cr_assert_eq(st.state, 'T');
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	close(dirfd);
}
