// SPDX-License-Identifier: MIT
#include <linux/membarrier.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fence.h"

int rp_membarrier_ok;
static pthread_once_t fence_once = PTHREAD_ONCE_INIT;

static void fence_register(void)
{
	if (syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0)
		rp_store_relaxed(&rp_membarrier_ok, 1);
}

void rp_fence_init(void)
{
	pthread_once(&fence_once, fence_register);
}

void rp_fence_heavy(void)
{
	/* pairs with rp_fence_light() in every producer (see fence.h) */
	if (rp_load_relaxed(&rp_membarrier_ok) &&
	    syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0)
		return;
	/* never registered, or refused: producers that read the flag from now
	 * on pay full barriers of their own */
	rp_store_relaxed(&rp_membarrier_ok, 0);
	rp_smp_mb();
}
