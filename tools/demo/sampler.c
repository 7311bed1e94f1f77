// SPDX-License-Identifier: MIT
/*
 * The sample profiler (see sampler.h).
 *
 * Each sample names the sampled thread (rp_write_opts.thread_id): readers
 * show it on that thread while the sampler stays its capture thread, so the
 * sequence numbers that count losses remain the sampler's own.
 */
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "clr_events.h"
#include "sampler.h"

#define SAMPLE_PERIOD_NS (10 * 1000000L)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static uint64_t sessions;		/* lock: sessions enabling the provider */
static bool stop, started;		/* lock */
#define MAX_SAMPLED 256
struct sampled {
	uint32_t tid;
	uint32_t type;		/* ThreadSample Type: 2 managed, 1 external */
};
static struct sampled sampled[MAX_SAMPLED];	/* lock */
static uint32_t n_sampled;			/* lock */
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

void sampler_add_self(bool managed)
{
	pthread_mutex_lock(&lock);
	if (n_sampled < MAX_SAMPLED)	/* beyond that, threads go unsampled */
		sampled[n_sampled++] = (struct sampled){ (uint32_t)gettid(), managed ? 2 : 1 };
	pthread_mutex_unlock(&lock);
}

void sampler_remove_self(void)
{
	uint32_t tid = (uint32_t)gettid(), k;

	pthread_mutex_lock(&lock);
	for (k = 0; k < n_sampled; k++) {
		if (sampled[k].tid == tid) {
			sampled[k] = sampled[--n_sampled];
			break;
		}
	}
	pthread_mutex_unlock(&lock);
}

static void *sampler_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&lock);
	while (!stop) {
		struct sampled now[MAX_SAMPLED];
		uint32_t n, k;

		if (!sessions) {
			pthread_cond_wait(&cond, &lock);
			continue;
		}
		n = n_sampled;
		memcpy(now, sampled, n * sizeof(*now));
		pthread_mutex_unlock(&lock);
		for (k = 0; k < n; k++)
			clr_thread_sample(now[k].type, now[k].tid);
		rp_clock_sleep_ns(SAMPLE_PERIOD_NS);
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
