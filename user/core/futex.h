/* SPDX-License-Identifier: MIT */
/*
 * Futex waits and wakes: the only way a ringpipe thread sleeps on a word.
 *
 * The words live in a session's shared memory, which another process (a host
 * agent draining the rings) may map, so these are shared futexes: never
 * FUTEX_PRIVATE_FLAG. A waiter reads the word, checks its condition, then
 * waits for the value it read; a waker changes the word before it wakes, so
 * a wake between the check and the wait makes the wait return at once.
 */
#ifndef RP_FUTEX_H
#define RP_FUTEX_H

#include <errno.h>
#include <linux/futex.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Sleeps while *word == val, at most timeout_ns (0: no timeout). Returns 0
 * when woken or the word differed, -ETIMEDOUT, or -EINTR. */
static inline int rp_futex_wait(uint32_t *word, uint32_t val, uint64_t timeout_ns)
{
	struct timespec to = {
		(time_t)(timeout_ns / 1000000000ull), (long)(timeout_ns % 1000000000ull)
	};
	long rc = syscall(SYS_futex, word, FUTEX_WAIT, val, timeout_ns ? &to : NULL, NULL, 0);

	if (rc && errno == ETIMEDOUT)
		return -ETIMEDOUT;
	if (rc && errno == EINTR)
		return -EINTR;
	return 0;
}

/* Wakes up to n waiters of word (INT32_MAX: all). */
static inline void rp_futex_wake(uint32_t *word, int n)
{
	syscall(SYS_futex, word, FUTEX_WAKE, n, NULL, NULL, 0);
}

#endif /* RP_FUTEX_H */
