// SPDX-License-Identifier: MIT
/*
 * The sample profiler (see sampler.h).
 *
 * ringpipe writes an event on the calling thread's behalf only, so the
 * samples carry the sampler's thread id rather than the sampled thread's
 * (EventPipe puts the sampled thread there); the count and the Type values
 * are what a reader can rely on.
 */
#include <pthread.h>
#include <time.h>

#include "clr_events.h"
#include "sampler.h"

#define SAMPLE_PERIOD_NS (10 * 1000000L)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static uint64_t sessions;		/* lock: sessions enabling the provider */
static bool stop, started;		/* lock */
static uint32_t n_managed, n_external;	/* lock */
static pthread_t th;

void sampler_enable(struct rp_provider *provider, int session_id, bool enabled,
		    uint64_t keywords, uint8_t level, const char *args, void *ctx)
{
	(void)provider, (void)keywords, (void)level, (void)args, (void)ctx;
	if (session_id < 0 || session_id >= RP_MAX_SESSIONS)
		return;
	pthread_mutex_lock(&lock);
	if (enabled)
		sessions |= 1ull << session_id;
	else
		sessions &= ~(1ull << session_id);
	pthread_cond_broadcast(&cond);
	pthread_mutex_unlock(&lock);
}

void sampler_set_threads(uint32_t managed, uint32_t external)
{
	pthread_mutex_lock(&lock);
	n_managed = managed;
	n_external = external;
	pthread_mutex_unlock(&lock);
}

static void *sampler_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&lock);
	while (!stop) {
		uint32_t m, x, k;

		if (!sessions) {
			pthread_cond_wait(&cond, &lock);
			continue;
		}
		m = n_managed;
		x = n_external;
		pthread_mutex_unlock(&lock);
		for (k = 0; k < m; k++)
			clr_thread_sample(2);	/* Managed */
		for (k = 0; k < x; k++)
			clr_thread_sample(1);	/* External */
		{
			struct timespec ts = { 0, SAMPLE_PERIOD_NS };

			nanosleep(&ts, NULL);
		}
		pthread_mutex_lock(&lock);
	}
	pthread_mutex_unlock(&lock);
	return NULL;
}

int sampler_start(void)
{
	if (pthread_create(&th, NULL, sampler_main, NULL))
		return -1;
	started = true;
	return 0;
}

void sampler_stop(void)
{
	if (!started)
		return;
	pthread_mutex_lock(&lock);
	stop = true;
	pthread_cond_broadcast(&cond);
	pthread_mutex_unlock(&lock);
	pthread_join(th, NULL);
	started = false;
}
