// SPDX-License-Identifier: MIT
/*
 * Providers and events: definition, the global event table the drainer reads
 * metadata from, and which sessions enable which events.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "atomics.h"
#include "session.h"
#include "user_events.h"

static struct rp_provider *providers;

/*
 * Events by global index, in chunks that never move: the drainer looks an
 * index up without the control lock. A chunk pointer is published with a
 * release store before any record can carry an index in it.
 */
#define EV_CHUNK 1024u
#define EV_CHUNKS 1024u
static struct rp_event **ev_chunks[EV_CHUNKS];
static uint32_t ev_count;	/* under rp_control_lock */

struct rp_event *rp_event_by_index(uint32_t index)
{
	struct rp_event **chunk;

	if (!index || index / EV_CHUNK >= EV_CHUNKS)
		return NULL;
	/* pairs with the store_release in rp_event_new() */
	chunk = rp_load_acquire(&ev_chunks[index / EV_CHUNK]);
	return chunk ? rp_load_acquire(&chunk[index % EV_CHUNK]) : NULL;
}

static void free_fields(struct nt_field *f, uint16_t n)
{
	uint16_t i;

	if (!f)
		return;
	for (i = 0; i < n; i++) {
		free((char *)f[i].name);
		free_fields((struct nt_field *)f[i].fields, f[i].nfields);
	}
	free(f);
}

static int copy_fields(const struct rp_field *src, uint16_t n, int depth,
		       const struct nt_field **out)
{
	struct nt_field *f;
	uint16_t i;

	*out = NULL;
	if (!n)
		return 0;
	if (!src || depth > 8)
		return -EINVAL;
	f = calloc(n, sizeof(*f));
	if (!f)
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		if (!src[i].name) {
			free_fields(f, n);
			return -EINVAL;
		}
		f[i].name = strdup(src[i].name);
		f[i].type = src[i].type;
		f[i].elem_type = src[i].elem_type;
		f[i].nfields = src[i].nfields;
		if (!f[i].name || copy_fields(src[i].fields, src[i].nfields, depth + 1, &f[i].fields)) {
			free_fields(f, n);
			return -ENOMEM;
		}
	}
	*out = f;
	return 0;
}

static bool provider_in(const struct rp_provider *p, const struct session_cfg *cfg,
			const struct rp_provider_config **which);

RP_API struct rp_provider *rp_provider_new(const struct rp_provider_opts *uopts)
{
	struct rp_provider_opts o = { 0 };
	struct rp_provider *p;

	if (!uopts || uopts->sz < sizeof(size_t)) {
		rp_set_error("rp_provider_new: options missing or sz not set");
		return errno = EINVAL, NULL;
	}
	memcpy(&o, uopts, uopts->sz < sizeof(o) ? uopts->sz : sizeof(o));
	if (!o.name || !o.name[0] || strlen(o.name) > 255) {
		rp_set_error("rp_provider_new: a provider needs a name of 1 to 255 bytes");
		return errno = EINVAL, NULL;
	}
	p = calloc(1, sizeof(*p));
	if (!p || !(p->name = strdup(o.name))) {
		free(p);
		return errno = ENOMEM, NULL;
	}
	if (o.guid) {
		memcpy(p->guid, o.guid, 16);
		p->has_guid = true;
	} else {
		nt_provider_guid(o.name, p->guid);
	}
	p->enable_cb = o.enable_cb;
	p->stopping_cb = o.stopping_cb;
	p->cb_ctx = o.cb_ctx;
	p->ue = rp_ue_wanted(p->name);
	{
		/* sessions already running that name this provider enable it now */
		struct rp_provider_config cbcfg[RP_MAX_SESSIONS];
		int cbslot[RP_MAX_SESSIONS], i, n = 0;

		pthread_mutex_lock(&rp_control_lock);
		p->next = providers;
		providers = p;
		for (i = 0; i < RP_MAX_SESSIONS; i++) {
			struct rp_session *sess = rp_slots[i].session;
			const struct rp_provider_config *pc;

			if (!sess || rp_load_acquire(&rp_slots[i].state) != SLOT_RUNNING ||
			    !provider_in(p, &sess->cfg, &pc))
				continue;
			p->enabled_sessions |= 1ull << i;
			cbcfg[n] = *pc;
			cbslot[n++] = i;
		}
		pthread_mutex_unlock(&rp_control_lock);
		for (i = 0; p->enable_cb && i < n; i++)
			p->enable_cb(p, cbslot[i], true, cbcfg[i].keywords, cbcfg[i].level,
				     cbcfg[i].args, p->cb_ctx);
	}
	return p;
}

static bool level_ok(uint8_t want, uint8_t have)
{
	/* 0 on either side means "always" */
	return !want || !have || have <= want;
}

bool rp_event_matches(const struct rp_event *ev, const struct session_cfg *cfg,
		      const struct rp_provider_config **which)
{
	uint32_t i;

	for (i = 0; i < cfg->nproviders; i++) {
		const struct rp_provider_config *pc = &cfg->providers[i];

		if (strcmp(pc->name, ev->provider->name))
			continue;
		if (which)
			*which = pc;
		if (pc->keywords && ev->desc.keywords && !(pc->keywords & ev->desc.keywords))
			return false;
		return level_ok(pc->level, ev->desc.level);
	}
	return false;
}

static bool provider_in(const struct rp_provider *p, const struct session_cfg *cfg,
			const struct rp_provider_config **which)
{
	uint32_t i;

	for (i = 0; i < cfg->nproviders; i++) {
		if (!strcmp(cfg->providers[i].name, p->name)) {
			*which = &cfg->providers[i];
			return true;
		}
	}
	return false;
}

size_t rp_enable_session(int slot, const struct session_cfg *cfg, bool enable,
			 struct rp_provider **cbs, const struct rp_provider_config **cfgs,
			 size_t max)
{
	uint64_t bit = 1ull << slot;
	struct rp_provider *p;
	size_t n = 0;

	for (p = providers; p; p = p->next) {
		const struct rp_provider_config *pc;
		struct rp_event *ev;

		if (!provider_in(p, cfg, &pc))
			continue;
		for (ev = p->events; ev; ev = ev->next) {
			if (!enable)
				__atomic_fetch_and(&ev->hot.sessions, ~bit, __ATOMIC_RELAXED);
			else if (rp_event_matches(ev, cfg, NULL))
				__atomic_fetch_or(&ev->hot.sessions, bit, __ATOMIC_RELAXED);
		}
		if (enable)
			p->enabled_sessions |= bit;
		else
			p->enabled_sessions &= ~bit;
		if (p->enable_cb && n < max) {
			cbs[n] = p;
			cfgs[n] = pc;
			n++;
		}
	}
	return n;
}

size_t rp_stopping_hooks(int slot, const struct session_cfg *cfg, uint64_t rundown_keywords,
			 struct rp_stopping_hook *hooks, size_t max)
{
	uint64_t bit = 1ull << slot;
	struct rp_provider *p, *rundown = NULL;
	size_t n = 0;

	for (p = providers; p; p = p->next) {
		const struct rp_provider_config *pc;

		if (!strcmp(p->name, RP_RUNDOWN_PROVIDER)) {
			rundown = p;
			if (rundown_keywords)
				continue;	/* its callback runs once, last */
		}
		if (!p->stopping_cb || !(p->enabled_sessions & bit) || !provider_in(p, cfg, &pc) ||
		    n == max)
			continue;
		hooks[n++] = (struct rp_stopping_hook){ p, pc->keywords, pc->level };
	}
	if (rundown && rundown_keywords) {
		struct rp_event *ev;

		/* enabled for this session only, and only while it stops: the
		 * rundown events reach no other session (writes of the stopping
		 * thread are confined to it as well) */
		for (ev = rundown->events; ev; ev = ev->next)
			if (!ev->desc.keywords || (ev->desc.keywords & rundown_keywords))
				__atomic_fetch_or(&ev->hot.sessions, bit, __ATOMIC_RELAXED);
		if (rundown->stopping_cb && n < max)
			hooks[n++] = (struct rp_stopping_hook){ rundown, rundown_keywords, 5 };
	}
	return n;
}

void rp_rundown_disable(int slot)
{
	struct rp_provider *p;
	struct rp_event *ev;

	for (p = providers; p; p = p->next) {
		if (strcmp(p->name, RP_RUNDOWN_PROVIDER))
			continue;
		for (ev = p->events; ev; ev = ev->next)
			__atomic_fetch_and(&ev->hot.sessions, ~(1ull << slot), __ATOMIC_RELAXED);
	}
}

RP_API struct rp_event *rp_event_new(struct rp_provider *p, const struct rp_event_opts *uopts)
{
	struct rp_event_opts o = { 0 };
	struct rp_event *ev;
	uint32_t idx;
	int s;

	if (!p || !uopts || uopts->sz < sizeof(size_t)) {
		rp_set_error("rp_event_new: provider or options missing");
		return errno = EINVAL, NULL;
	}
	memcpy(&o, uopts, uopts->sz < sizeof(o) ? uopts->sz : sizeof(o));
	if (o.id > 65535 || (o.nfields && !o.fields)) {
		rp_set_error("rp_event_new: event id over 65535 or fields missing");
		return errno = EINVAL, NULL;
	}
	ev = calloc(1, sizeof(*ev));
	if (!ev)
		return errno = ENOMEM, NULL;
	ev->provider = p;
	ev->desc.provider = p->name;
	ev->desc.provider_guid = p->has_guid ? p->guid : NULL;
	ev->desc.event_id = o.id;
	ev->desc.name = strdup(o.name ? o.name : "");
	ev->desc.keywords = o.keywords;
	ev->desc.version = o.version;
	ev->desc.level = o.level;
	ev->desc.opcode = o.opcode;
	ev->desc.nfields = o.nfields;
	if (!ev->desc.name || copy_fields(o.fields, o.nfields, 0, &ev->desc.fields)) {
		free((char *)ev->desc.name);
		free(ev);
		rp_set_error("rp_event_new: bad field list or out of memory");
		return errno = EINVAL, NULL;
	}
	if (!ev->desc.fields && !o.nfields && o.fields)
		ev->desc.fields = NULL;

	pthread_mutex_lock(&rp_control_lock);
	idx = ev_count + 1;
	if (idx / EV_CHUNK >= EV_CHUNKS) {
		pthread_mutex_unlock(&rp_control_lock);
		rp_set_error("rp_event_new: too many events (%u)", idx);
		free_fields((struct nt_field *)ev->desc.fields, ev->desc.nfields);
		free((char *)ev->desc.name);
		free(ev);
		return errno = ENOSPC, NULL;
	}
	if (!ev_chunks[idx / EV_CHUNK]) {
		struct rp_event **chunk = calloc(EV_CHUNK, sizeof(*chunk));

		if (!chunk) {
			pthread_mutex_unlock(&rp_control_lock);
			free_fields((struct nt_field *)ev->desc.fields, ev->desc.nfields);
			free((char *)ev->desc.name);
			free(ev);
			return errno = ENOMEM, NULL;
		}
		/* pairs with the load_acquire in rp_event_by_index() */
		rp_store_release(&ev_chunks[idx / EV_CHUNK], chunk);
	}
	ev->index = idx;
	/* pairs with the load_acquire in rp_event_by_index(): the drainer
	 * sees a complete event before any record names its index */
	rp_store_release(&ev_chunks[idx / EV_CHUNK][idx % EV_CHUNK], ev);
	ev_count = idx;
	ev->next = p->events;
	p->events = ev;
	if (p->ue)
		rp_ue_register(ev);	/* failure leaves the event as it was */
	/* sessions already running enable it right away */
	for (s = 0; s < RP_MAX_SESSIONS; s++) {
		struct rp_session *sess = rp_slots[s].session;

		if ((p->enabled_sessions & (1ull << s)) && sess &&
		    rp_load_acquire(&rp_slots[s].state) == SLOT_RUNNING &&
		    rp_event_matches(ev, &sess->cfg, NULL))
			__atomic_fetch_or(&ev->hot.sessions, 1ull << s, __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(&rp_control_lock);
	return ev;
}

void rp_events_disable_all(void)
{
	struct rp_provider *p;
	struct rp_event *ev;

	for (p = providers; p; p = p->next) {
		p->enabled_sessions = 0;
		for (ev = p->events; ev; ev = ev->next)
			__atomic_store_n(&ev->hot.sessions, 0, __ATOMIC_RELAXED);
	}
}
