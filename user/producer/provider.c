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

/* The field types of the API (enum rp_type): nettrace's codes without
 * Decimal (15), which TraceEvent cannot decode, and the V6-only 20-21. */
static bool api_type(uint8_t t)
{
	return t == RP_TYPE_OBJECT || (t >= RP_TYPE_BOOL && t <= RP_TYPE_F64) ||
	       (t >= RP_TYPE_DATETIME && t <= RP_TYPE_ARRAY);
}

static bool takes_members(uint8_t type, uint8_t elem)
{
	return type == RP_TYPE_OBJECT || (type == RP_TYPE_ARRAY && elem == RP_TYPE_OBJECT);
}

/*
 * Copies a field list, refusing type codes the API does not define (-EINVAL,
 * the reason in why). Member lists are copied for objects and arrays of
 * objects only; what else the writer cannot describe, nt_event_desc_check()
 * finds on the copy. `path` names the enclosing field in messages.
 */
static int copy_fields(const struct rp_field *src, uint16_t n, int depth, const char *path,
		       const struct nt_field **out, char *why, size_t whylen)
{
	struct nt_field *f;
	uint16_t i;
	int err;

	*out = NULL;
	if (!n)
		return 0;
	if (!src) {
		if (path[0])
			snprintf(why, whylen, "field \"%s\": nfields is %u but fields is NULL",
				 path, n);
		else
			snprintf(why, whylen, "nfields is %u but fields is NULL", n);
		return -EINVAL;
	}
	if (depth > NT_MAX_FIELD_DEPTH) {
		/* also ends a member list that contains itself */
		snprintf(why, whylen, "field \"%s\": members nested more than %d levels deep",
			 path, NT_MAX_FIELD_DEPTH);
		return -EINVAL;
	}
	f = calloc(n, sizeof(*f));
	if (!f)
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		char sub[200];

		if (!src[i].name) {
			snprintf(why, whylen, "field %u%s%s%s has no name", i + 1,
				 path[0] ? " of \"" : "", path, path[0] ? "\"" : "");
			err = -EINVAL;
			goto fail;
		}
		snprintf(sub, sizeof(sub), "%s%s%s", path, path[0] ? "." : "", src[i].name);
		if (!api_type(src[i].type) ||
		    (src[i].type == RP_TYPE_ARRAY && !api_type(src[i].elem_type))) {
			snprintf(why, whylen, "field \"%s\": %stype code %u is not an enum rp_type "
				 "value", sub, src[i].type == RP_TYPE_ARRAY ? "element " : "",
				 src[i].type == RP_TYPE_ARRAY ? src[i].elem_type : src[i].type);
			err = -EINVAL;
			goto fail;
		}
		f[i].name = strdup(src[i].name);
		f[i].type = src[i].type;
		f[i].elem_type = src[i].type == RP_TYPE_ARRAY ? src[i].elem_type : 0;
		if (!f[i].name) {
			err = -ENOMEM;
			goto fail;
		}
		if (!takes_members(src[i].type, src[i].elem_type))
			continue;
		if (src[i].type == RP_TYPE_ARRAY && strlen(sub) + 2 < sizeof(sub))
			strcat(sub, "[]");
		f[i].nfields = src[i].nfields;
		err = copy_fields(src[i].fields, src[i].nfields, depth + 1, sub, &f[i].fields,
				  why, whylen);
		if (err)
			goto fail;
	}
	*out = f;
	return 0;
fail:
	free_fields(f, n);
	return err;
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

			/* under the control lock, which orders it already; the
			 * acquire pairs with the store_release of RUNNING in
			 * rp_session_start_ex() for readers outside it */
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

struct rp_provider *rp_enable_session(int slot, const struct session_cfg *cfg, bool enable)
{
	uint64_t bit = 1ull << slot;
	struct rp_provider *p;

	for (p = providers; p; p = p->next) {
		const struct rp_provider_config *pc;
		struct rp_event *ev;

		if (!provider_in(p, cfg, &pc))
			continue;
		for (ev = p->events; ev; ev = ev->next) {
			if (!enable)
				rp_and_relaxed(&ev->hot.sessions, ~bit);
			else if (rp_event_matches(ev, cfg, NULL))
				rp_or_relaxed(&ev->hot.sessions, bit);
		}
		if (enable)
			p->enabled_sessions |= bit;
		else
			p->enabled_sessions &= ~bit;
	}
	return providers;
}

void rp_enable_callbacks(struct rp_provider *from, const struct session_cfg *cfg, int slot,
			 bool enable)
{
	struct rp_provider *p;

	/* outside the control lock: the list only grows at its head, and a
	 * provider's next, name and callback never change once it is on it,
	 * so the walk from a head taken under the lock sees exactly those
	 * providers (the lock's unlock and lock order their writes before) */
	for (p = from; p; p = p->next) {
		const struct rp_provider_config *pc;

		if (p->enable_cb && provider_in(p, cfg, &pc))
			p->enable_cb(p, slot, enable, pc->keywords, pc->level, pc->args, p->cb_ctx);
	}
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
		if (!p->stopping_cb || !(p->enabled_sessions & bit) || !provider_in(p, cfg, &pc))
			continue;
		if (n < max)
			hooks[n] = (struct rp_stopping_hook){ p, pc->keywords, pc->level };
		n++;
	}
	if (rundown && rundown_keywords) {
		struct rp_event *ev;

		/* enabled for this session only, and only while it stops: the
		 * rundown events reach no other session (writes of the stopping
		 * thread are confined to it as well) */
		for (ev = rundown->events; ev; ev = ev->next)
			if (!ev->desc.keywords || (ev->desc.keywords & rundown_keywords))
				rp_or_relaxed(&ev->hot.sessions, bit);
		if (rundown->stopping_cb) {
			if (n < max)
				hooks[n] = (struct rp_stopping_hook){ rundown, rundown_keywords, 5 };
			n++;
		}
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
			rp_and_relaxed(&ev->hot.sessions, ~(1ull << slot));
	}
}

static void event_free(struct rp_event *ev)
{
	free_fields((struct nt_field *)ev->desc.fields, ev->desc.nfields);
	free((char *)ev->desc.name);
	free(ev);
}

/* Would the session collect ev, now or as rundown when it stops? Under the
 * control lock. */
static bool session_takes(const struct rp_session *sess, const struct rp_event *ev)
{
	return rp_event_matches(ev, &sess->cfg, NULL) ||
	       (sess->rundown_keywords && !strcmp(ev->provider->name, RP_RUNDOWN_PROVIDER) &&
		(!ev->desc.keywords || (ev->desc.keywords & sess->rundown_keywords)));
}

/*
 * An event is refused at definition when neither nettrace format can
 * describe it (a field list with no encoding, metadata over both formats'
 * limits), and when only one can and a running session that writes the
 * other would collect it. A session started later refuses to start instead
 * (session.c), so a write that returns 0 always ends up in the trace.
 */
RP_API struct rp_event *rp_event_new(struct rp_provider *p, const struct rp_event_opts *uopts)
{
	struct rp_event_opts o = { 0 };
	char why5[200] = "", why6[200] = "";
	struct rp_event *ev;
	int s, err, err5 = 0, err6 = 0;
	uint32_t idx;

	if (!p || !uopts || uopts->sz < sizeof(size_t)) {
		rp_set_error("rp_event_new: provider or options missing");
		return errno = EINVAL, NULL;
	}
	memcpy(&o, uopts, uopts->sz < sizeof(o) ? uopts->sz : sizeof(o));
	if (o.id > 65535) {
		rp_set_error("rp_event_new: event id %u is over 65535", o.id);
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
	if (!ev->desc.name) {
		free(ev);
		rp_set_error("rp_event_new: out of memory");
		return errno = ENOMEM, NULL;
	}
	err = copy_fields(o.fields, o.nfields, 0, "", &ev->desc.fields, why5, sizeof(why5));
	ev->desc.nfields = ev->desc.fields ? o.nfields : 0;
	if (!err) {
		err5 = nt_event_desc_check(&ev->desc, NT_FORMAT_V5, why5, sizeof(why5));
		err6 = nt_event_desc_check(&ev->desc, NT_FORMAT_V6, why6, sizeof(why6));
		if (err5 == -ENOMEM || err6 == -ENOMEM)
			err = -ENOMEM;
		else if (err5 && err6)
			err = -EINVAL;
		if (err == -EINVAL && strcmp(why5, why6)) {
			/* both too big: say both sizes */
			size_t n = strlen(why5);

			snprintf(why5 + n, sizeof(why5) - n, "; %s", why6);
		}
	}
	if (err) {
		if (err == -ENOMEM)
			rp_set_error("rp_event_new: out of memory");
		else
			rp_set_error("rp_event_new: event %u \"%s\" of provider \"%s\": %s", o.id,
				     ev->desc.name, p->name, why5);
		event_free(ev);
		return errno = -err, NULL;
	}

	pthread_mutex_lock(&rp_control_lock);
	for (s = 0; (err5 || err6) && s < RP_MAX_SESSIONS; s++) {
		struct rp_session *sess = rp_slots[s].session;
		/* pairs with the store_release of the state in session.c */
		uint32_t state = rp_load_acquire(&rp_slots[s].state);
		int bad;

		/* a STARTING session checked the events defined before it */
		if (!sess || (state != SLOT_STARTING && state != SLOT_RUNNING))
			continue;
		bad = sess->format == NT_FORMAT_V6 ? err6 : err5;
		if (!bad || !session_takes(sess, ev))
			continue;
		pthread_mutex_unlock(&rp_control_lock);
		rp_set_error("rp_event_new: event %u \"%s\" of provider \"%s\": %s; session %d, "
			     "which collects it, writes V%d", o.id, ev->desc.name, p->name,
			     sess->format == NT_FORMAT_V6 ? why6 : why5, s, sess->format);
		event_free(ev);
		return errno = EINVAL, NULL;
	}
	idx = ev_count + 1;
	if (idx / EV_CHUNK >= EV_CHUNKS) {
		pthread_mutex_unlock(&rp_control_lock);
		rp_set_error("rp_event_new: too many events (%u)", idx);
		event_free(ev);
		return errno = ENOSPC, NULL;
	}
	if (!ev_chunks[idx / EV_CHUNK]) {
		struct rp_event **chunk = calloc(EV_CHUNK, sizeof(*chunk));

		if (!chunk) {
			pthread_mutex_unlock(&rp_control_lock);
			event_free(ev);
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
	/* the agent must know it before any record can name it */
	for (s = 0; s < RP_MAX_SESSIONS; s++) {
		struct rp_session *sess = rp_slots[s].session;
		uint32_t state = rp_load_acquire(&rp_slots[s].state);

		if (sess && sess->ext && (state == SLOT_STARTING || state == SLOT_RUNNING))
			sess->ext->describe(sess->ext->ctx, ev);
	}
	/* sessions already running enable it right away */
	for (s = 0; s < RP_MAX_SESSIONS; s++) {
		struct rp_session *sess = rp_slots[s].session;

		/* pairs with the store_release of RUNNING in session.c */
		if ((p->enabled_sessions & (1ull << s)) && sess &&
		    rp_load_acquire(&rp_slots[s].state) == SLOT_RUNNING &&
		    rp_event_matches(ev, &sess->cfg, NULL))
			rp_or_relaxed(&ev->hot.sessions, 1ull << s);
	}
	pthread_mutex_unlock(&rp_control_lock);
	return ev;
}

int rp_events_describe(const struct rp_external_drainer *ext)
{
	struct rp_provider *p;
	struct rp_event *ev;
	int err;

	for (p = providers; p; p = p->next)
		for (ev = p->events; ev; ev = ev->next) {
			err = ext->describe(ext->ctx, ev);
			if (err)
				return err;
		}
	return 0;
}

void rp_events_disable_all(void)
{
	struct rp_provider *p;
	struct rp_event *ev;

	for (p = providers; p; p = p->next) {
		p->enabled_sessions = 0;
		for (ev = p->events; ev; ev = ev->next)
			rp_store_relaxed(&ev->hot.sessions, 0);
	}
}
