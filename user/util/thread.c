// SPDX-License-Identifier: MIT
/* Threads the library starts (see thread.h). */
#include <pthread.h>
#include <signal.h>

#include "thread.h"

int rp_thread_start(pthread_t *th, const char *name, void *(*fn)(void *), void *arg)
{
	sigset_t all, old;
	int e;

	/* the new thread inherits the mask in force at its creation */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	e = pthread_create(th, NULL, fn, arg);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (!e && name)
		pthread_setname_np(*th, name);	/* a name is a convenience only */
	return -e;
}
