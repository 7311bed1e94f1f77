// SPDX-License-Identifier: MIT
/*
 * Counters: meters and instruments, published through the provider
 * "System.Diagnostics.Metrics" in the events and payloads of .NET's
 * MetricsEventSource, which dotnet-counters parses (Documentation/counters.md).
 * The value events are version 2 (the instrument id last): dotnet-counters
 * reads the fields by position and by the event's version, so ids, versions
 * and field order here are the wire format.
 *
 * Threads. Application threads create meters and instruments and record
 * measurements. Enable callbacks only queue a command. One counters thread,
 * started when a session enables the provider and gone when the last such
 * session is, owns every session's state: it applies the commands, calls the
 * observable callbacks, aggregates and writes every event, holding no lock
 * while it writes (a Block session may park it). While nobody listens no
 * thread runs and a measurement costs one load and a branch.
 *
 * Sessions are independent (.NET's source takes one listener at a time):
 * each has its own SessionId, interval, instrument list and limits, and
 * every session sees the others' events, which its SessionId filters out.
 */
#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "atomics.h"
#include "bytebuf.h"
#include "clock.h"
#include "error.h"
#include "park.h"
#include "session.h"
#include "slots.h"
#include "thread.h"
#include "utf.h"

#define M_MAX_INSTRUMENTS 4096u
#define M_MAX_OBSERVED 512u	/* measurements one callback may return */
#define M_HIST_SAMPLES 1024u	/* kept per histogram and interval, then sampled */
#define M_NAME_MAX 255u

/* MetricsEventSource's keywords */
#define KW_MESSAGES 0x1ull
#define KW_VALUES 0x2ull
#define KW_PUBLISHING 0x4ull

struct rp_meter {
	char *name;
	char *version;
};

/* One session's histogram measurements of the current interval. */
struct hist_acc {
	uint64_t count;			/* every measurement */
	double sum;
	uint32_t n;			/* kept in v[] */
	uint64_t rng;			/* replacement once v[] is full */
	double v[M_HIST_SAMPLES];
};

struct rp_instrument {
	uint64_t sessions;		/* slots listening; the fast path loads it */
	uint64_t total_bits;		/* counters: the running sum, a double */
	uint64_t last_bits;		/* gauges: the last value, a double */
	uint32_t has_last;		/* gauges: last_bits was written */
	int kind;
	uint32_t id;			/* >= 1, the events' instrumentId */
	const struct rp_meter *meter;
	char *name;
	char *unit;
	char *desc;
	rp_observe_fn observe;
	void *ctx;
	pthread_mutex_t hlock;		/* histograms: acc[] and their contents */
	struct hist_acc *acc[RP_MAX_SESSIONS];
};

/* A time series of one session: an instrument and its tags. */
struct series {
	uint32_t id;
	char *tags;
	double base;			/* counters: the sum when the session began */
	double last;			/* the value reported last */
	bool seen;
};

/* A session's state, owned by the counters thread. */
struct msession {
	int slot;
	char *sid;
	uint64_t interval_ns;
	uint32_t max_series, max_hist, nhist;
	char **specs;
	uint32_t nspecs;
	uint64_t next_ns;		/* CLOCK_MONOTONIC of the next collection */
	uint64_t start_ft;		/* FILETIME of the interval's start */
	uint32_t known;			/* instruments announced: ids 1..known */
	bool enumerated;		/* InitialInstrumentEnumerationComplete sent */
	bool series_limit, hist_limit;
	struct series *series;
	size_t nseries, capseries;
};

struct mcmd {
	struct mcmd *next;
	int slot;
	bool enable;
	char *args;
};

enum { TH_NONE, TH_RUNNING, TH_EXITED };

/* m_lock: the instrument table's length, the command queue, the thread's
 * state. Instruments below m_ninst never change once published. */
static pthread_mutex_t m_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t m_cond;
static struct rp_instrument *m_insts[M_MAX_INSTRUMENTS];
static uint32_t m_ninst;
static struct mcmd *m_cmds, **m_cmds_tail = &m_cmds;
static int m_th_state;
static bool m_ready;		/* the provider's events exist */
static pthread_t m_th;
static pthread_once_t m_once = PTHREAD_ONCE_INIT;
static int m_init_err;

/* the counters thread's own */
static struct msession *m_sess[RP_MAX_SESSIONS];
static struct rp_measurement m_obs[M_MAX_OBSERVED];

enum {
	EV_MESSAGE = 1,
	EV_COLLECTION_START = 2,
	EV_COLLECTION_STOP = 3,
	EV_COUNTER = 4,
	EV_GAUGE = 5,
	EV_HISTOGRAM = 6,
	EV_BEGIN = 7,
	EV_END = 8,
	EV_ERROR = 9,
	EV_ENUM_DONE = 10,
	EV_PUBLISHED = 11,
	EV_SERIES_LIMIT = 12,
	EV_HIST_LIMIT = 13,
	EV_OBSERVE_ERROR = 14,
	EV_MULTI_SESSION = 15,
	EV_UPDOWN = 16,
	EV_NR = 17,
};
static struct rp_event *m_ev[EV_NR];

/* ---- the provider's events ------------------------------------------- */

#define S(n) { n, RP_TYPE_STRING, 0, 0, NULL }
static const struct rp_field f_message[] = { S("Message") };
static const struct rp_field f_collection[] = {
	S("sessionId"),
	{ "intervalStartTime", RP_TYPE_DATETIME, 0, 0, NULL },
	{ "intervalEndTime", RP_TYPE_DATETIME, 0, 0, NULL },
};
static const struct rp_field f_rate[] = {
	S("sessionId"), S("meterName"), S("meterVersion"), S("instrumentName"), S("unit"),
	S("tags"), S("rate"), S("value"), { "instrumentId", RP_TYPE_I32, 0, 0, NULL },
};
static const struct rp_field f_gauge[] = {
	S("sessionId"), S("meterName"), S("meterVersion"), S("instrumentName"), S("unit"),
	S("tags"), S("lastValue"), { "instrumentId", RP_TYPE_I32, 0, 0, NULL },
};
static const struct rp_field f_hist[] = {
	S("sessionId"), S("meterName"), S("meterVersion"), S("instrumentName"), S("unit"),
	S("tags"), S("quantiles"), { "count", RP_TYPE_I32, 0, 0, NULL },
	{ "sum", RP_TYPE_F64, 0, 0, NULL }, { "instrumentId", RP_TYPE_I32, 0, 0, NULL },
};
static const struct rp_field f_instrument[] = {
	S("sessionId"), S("meterName"), S("meterVersion"), S("instrumentName"),
	S("instrumentType"), S("unit"), S("description"), S("instrumentTags"), S("meterTags"),
	S("meterScopeHash"), { "instrumentId", RP_TYPE_I32, 0, 0, NULL },
};
static const struct rp_field f_error[] = { S("sessionId"), S("errorMessage") };
static const struct rp_field f_sid[] = { S("sessionId") };
static const struct rp_field f_running[] = { S("runningSessionId") };
#undef S

struct ev_def {
	uint32_t id;
	const char *name;
	uint8_t version;
	uint64_t keywords;
	const struct rp_field *fields;
	uint16_t nfields;
};

#define F(a) a, (uint16_t)(sizeof(a) / sizeof((a)[0]))
static const struct ev_def m_defs[] = {
	{ EV_MESSAGE, "Message", 0, KW_MESSAGES, F(f_message) },
	{ EV_COLLECTION_START, "CollectionStart", 0, KW_VALUES, F(f_collection) },
	{ EV_COLLECTION_STOP, "CollectionStop", 0, KW_VALUES, F(f_collection) },
	{ EV_COUNTER, "CounterRateValuePublished", 2, KW_VALUES, F(f_rate) },
	{ EV_GAUGE, "GaugeValuePublished", 2, KW_VALUES, F(f_gauge) },
	{ EV_HISTOGRAM, "HistogramValuePublished", 2, KW_VALUES, F(f_hist) },
	{ EV_BEGIN, "BeginInstrumentReporting", 2, KW_VALUES, F(f_instrument) },
	{ EV_END, "EndInstrumentReporting", 2, KW_VALUES, F(f_instrument) },
	{ EV_ERROR, "Error", 0, KW_MESSAGES | KW_VALUES | KW_PUBLISHING, F(f_error) },
	{ EV_ENUM_DONE, "InitialInstrumentEnumerationComplete", 0, KW_VALUES | KW_PUBLISHING,
	  F(f_sid) },
	{ EV_PUBLISHED, "InstrumentPublished", 2, KW_PUBLISHING, F(f_instrument) },
	{ EV_SERIES_LIMIT, "TimeSeriesLimitReached", 0, KW_VALUES, F(f_sid) },
	{ EV_HIST_LIMIT, "HistogramLimitReached", 0, KW_VALUES, F(f_sid) },
	{ EV_OBSERVE_ERROR, "ObservableInstrumentCallbackError", 0, KW_VALUES, F(f_error) },
	{ EV_MULTI_SESSION, "MultipleSessionsNotSupportedError", 0,
	  KW_MESSAGES | KW_VALUES | KW_PUBLISHING, F(f_running) },
	{ EV_UPDOWN, "UpDownCounterRateValuePublished", 2, KW_VALUES, F(f_rate) },
};
#undef F

/* .NET's instrument type names (Instrument.GetType().Name), by kind */
static const char *const m_type_names[] = {
	"Counter`1", "UpDownCounter`1", "Gauge`1", "Histogram`1",
	"ObservableCounter`1", "ObservableUpDownCounter`1", "ObservableGauge`1",
};

/* ---- payloads ------------------------------------------------------------ */

static void put_str(struct bytebuf *b, const char *s)
{
	if (utf8_to_utf16z(b, s ? s : ""))
		b->oom = 1;
}

static void put_f64(struct bytebuf *b, double v)
{
	uint64_t u;

	memcpy(&u, &v, sizeof(u));
	bb_append_u64(b, u);
}

/* Writes a built payload; a full ring or a failed output is counted by the
 * write path like any event's, so there is nothing to do with the result. */
static void emit(int ev, struct bytebuf *b)
{
	if (m_ev[ev] && !b->oom && rp_event_enabled(m_ev[ev]))
		(void)rp_event_write(m_ev[ev], b->p, b->len);
	b->len = 0;
	b->oom = 0;
}

/* The shortest text double.TryParse(InvariantCulture) reads back exactly; the
 * counters thread runs in the C locale, so the point is a point. */
static void fmt_num(char *o, size_t n, double v)
{
	snprintf(o, n, "%.15g", v);
	if (strtod(o, NULL) != v)
		snprintf(o, n, "%.17g", v);
}

static uint64_t now_filetime(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	/* 100 ns ticks since 1601-01-01 */
	return (uint64_t)ts.tv_sec * 10000000ull + (uint64_t)ts.tv_nsec / 100 +
	       116444736000000000ull;
}

static void emit_sid(int ev, const struct msession *s, struct bytebuf *b)
{
	put_str(b, s->sid);
	emit(ev, b);
}

static void emit_error(int ev, const struct msession *s, const char *msg, struct bytebuf *b)
{
	put_str(b, s->sid);
	put_str(b, msg);
	emit(ev, b);
}

static void emit_instrument(int ev, const struct msession *s, const struct rp_instrument *in,
			    struct bytebuf *b)
{
	put_str(b, s->sid);
	put_str(b, in->meter->name);
	put_str(b, in->meter->version);
	put_str(b, in->name);
	put_str(b, m_type_names[in->kind]);
	put_str(b, in->unit);
	put_str(b, in->desc);
	put_str(b, "");		/* instrumentTags */
	put_str(b, "");		/* meterTags */
	put_str(b, "");		/* meterScopeHash */
	bb_append_u32(b, in->id);
	emit(ev, b);
}

/* The fields every value event starts with. */
static void put_head(struct bytebuf *b, const struct msession *s, const struct rp_instrument *in,
		     const char *tags)
{
	put_str(b, s->sid);
	put_str(b, in->meter->name);
	put_str(b, in->meter->version);
	put_str(b, in->name);
	put_str(b, in->unit);
	put_str(b, tags);
}

static void emit_rate(const struct msession *s, const struct rp_instrument *in, const char *tags,
		      double rate, double value, struct bytebuf *b)
{
	char r[40], v[40];
	bool updown = in->kind == RP_INSTRUMENT_UPDOWN_COUNTER ||
		      in->kind == RP_INSTRUMENT_OBSERVABLE_UPDOWN_COUNTER;

	fmt_num(r, sizeof(r), rate);
	fmt_num(v, sizeof(v), value);
	put_head(b, s, in, tags);
	put_str(b, r);
	put_str(b, v);
	bb_append_u32(b, in->id);
	emit(updown ? EV_UPDOWN : EV_COUNTER, b);
}

static void emit_gauge(const struct msession *s, const struct rp_instrument *in, const char *tags,
		       double value, struct bytebuf *b)
{
	char v[40];

	fmt_num(v, sizeof(v), value);
	put_head(b, s, in, tags);
	put_str(b, v);
	bb_append_u32(b, in->id);
	emit(EV_GAUGE, b);
}

/* ---- arguments -------------------------------------------------------- */

/*
 * The value of key in "key=value;key=value" filter arguments, as a copy, or
 * NULL. A value in double quotes may hold ';' and '=' (how the .NET client
 * writes such values).
 */
static char *arg_get(const char *args, const char *key)
{
	size_t klen = strlen(key);
	const char *p = args;

	while (p && *p) {
		const char *eq = strchr(p, '='), *v, *end;

		if (!eq)
			return NULL;
		v = eq + 1;
		if (*v == '"') {
			v++;
			end = strchr(v, '"');
			if (!end)
				end = v + strlen(v);
		} else {
			end = strchr(v, ';');
			if (!end)
				end = v + strlen(v);
		}
		if ((size_t)(eq - p) == klen && !strncmp(p, key, klen))
			return strndup(v, (size_t)(end - v));
		p = *end == '"' ? end + 1 : end;
		while (*p == ';')
			p++;
	}
	return NULL;
}

static double arg_double(const char *args, const char *key, double dflt)
{
	char *v = arg_get(args, key), *end;
	double d;

	if (!v)
		return dflt;
	d = strtod(v, &end);
	if (end == v || *end || !isfinite(d))
		d = dflt;
	free(v);
	return d;
}

/* "Meter" and "Meter\instrument" specs, split on the separators .NET takes */
static int parse_specs(struct msession *s, const char *metrics)
{
	char *copy, *tok, *save = NULL;

	if (!metrics)
		return 0;
	copy = strdup(metrics);
	if (!copy)
		return -ENOMEM;
	for (tok = strtok_r(copy, ",;\r\n", &save); tok; tok = strtok_r(NULL, ",;\r\n", &save)) {
		char **n, *t;

		while (*tok == ' ')
			tok++;
		t = tok + strlen(tok);
		while (t > tok && t[-1] == ' ')
			*--t = 0;
		if (!*tok)
			continue;
		n = realloc(s->specs, (s->nspecs + 1) * sizeof(*n));
		if (!n || !(n[s->nspecs] = strdup(tok))) {
			if (n)
				s->specs = n;
			free(copy);
			return -ENOMEM;
		}
		s->specs = n;
		s->nspecs++;
	}
	free(copy);
	return 0;
}

static bool spec_match(const struct msession *s, const struct rp_instrument *in)
{
	size_t ml = strlen(in->meter->name);
	uint32_t i;

	for (i = 0; i < s->nspecs; i++) {
		const char *sp = s->specs[i];

		if (strncmp(sp, in->meter->name, ml))
			continue;
		if (!sp[ml] || (sp[ml] == '\\' && !strcmp(sp + ml + 1, in->name)))
			return true;
	}
	return false;
}

/* ---- sessions -------------------------------------------------------- */

static void msession_free(struct msession *s)
{
	size_t i;

	if (!s)
		return;
	for (i = 0; i < s->nseries; i++)
		free(s->series[i].tags);
	free(s->series);
	for (i = 0; i < s->nspecs; i++)
		free(s->specs[i]);
	free(s->specs);
	free(s->sid);
	free(s);
}

static struct msession *msession_new(int slot, const char *args)
{
	struct msession *s = calloc(1, sizeof(*s));
	double iv, mx;
	char *metrics;

	if (!s)
		return NULL;
	s->slot = slot;
	s->sid = arg_get(args, "SessionId");
	if (!s->sid)
		s->sid = strdup("");
	/* the defaults and the floor of MetricsEventSource */
	iv = arg_double(args, "RefreshInterval", 1.0);
	if (iv < 0.1)
		iv = 0.1;
	if (iv > 86400)
		iv = 86400;
	s->interval_ns = (uint64_t)(iv * 1e9);
	mx = arg_double(args, "MaxTimeSeries", 1000);
	s->max_series = mx >= 0 && mx <= 1e9 ? (uint32_t)mx : 1000;
	mx = arg_double(args, "MaxHistograms", 20);
	s->max_hist = mx >= 0 && mx <= 1e9 ? (uint32_t)mx : 20;
	metrics = arg_get(args, "Metrics");
	if (!s->sid || parse_specs(s, metrics)) {
		free(metrics);
		msession_free(s);
		return NULL;
	}
	free(metrics);
	s->next_ns = rp_clock_mono_ns() + s->interval_ns;
	s->start_ft = now_filetime();
	return s;
}

/* The session's series for (instrument, tags), made on first use; NULL past
 * MaxTimeSeries (reported once) or without memory. */
static struct series *series_get(struct msession *s, uint32_t id, const char *tags,
				 struct bytebuf *b)
{
	struct series *se;
	size_t i;

	for (i = 0; i < s->nseries; i++)
		if (s->series[i].id == id && !strcmp(s->series[i].tags, tags))
			return &s->series[i];
	if (s->nseries >= s->max_series) {
		if (!s->series_limit)
			emit_sid(EV_SERIES_LIMIT, s, b);
		s->series_limit = true;
		return NULL;
	}
	if (array_grow((void **)&s->series, &s->capseries, s->nseries + 1, sizeof(*se), 16))
		return NULL;
	se = &s->series[s->nseries];
	memset(se, 0, sizeof(*se));
	se->id = id;
	se->tags = strdup(tags);
	if (!se->tags)
		return NULL;
	s->nseries++;
	return se;
}

static double bits_double(const uint64_t *p)
{
	uint64_t u = rp_load_relaxed(p);
	double d;

	memcpy(&d, &u, sizeof(d));
	return d;
}

static bool is_observable(int kind)
{
	return kind >= RP_INSTRUMENT_OBSERVABLE_COUNTER;
}

/*
 * Calls an observable instrument's callback and hands each finite
 * measurement to its series: publish false takes the session's starting
 * point (the first interval's rate is then a real difference).
 */
static void observe(struct msession *s, struct rp_instrument *in, bool publish, struct bytebuf *b)
{
	int n = in->observe(in, m_obs, M_MAX_OBSERVED, in->ctx), i;

	if (n < 0 || n > (int)M_MAX_OBSERVED) {
		char msg[512];

		snprintf(msg, sizeof(msg), "the callback of %s\\%s failed: %s", in->meter->name,
			 in->name, n < 0 ? strerror(-n) : "it returned more than it was given");
		if (publish)
			emit_error(EV_OBSERVE_ERROR, s, msg, b);
		return;
	}
	for (i = 0; i < n; i++) {
		double v = m_obs[i].value;
		const char *tags = m_obs[i].tags ? m_obs[i].tags : "";
		struct series *se;

		if (!isfinite(v) || !(se = series_get(s, in->id, tags, b)))
			continue;
		if (!se->seen)
			se->last = v;
		se->seen = true;
		if (!publish) {
			se->last = v;
			continue;
		}
		if (in->kind == RP_INSTRUMENT_OBSERVABLE_GAUGE)
			emit_gauge(s, in, tags, v, b);
		else
			emit_rate(s, in, tags, v - se->last, v, b);
		se->last = v;
	}
}

/* Starts listening to an instrument the session names. */
static void m_listen(struct msession *s, struct rp_instrument *in, struct bytebuf *b)
{
	uint64_t bit = 1ull << s->slot;
	struct series *se = NULL;

	if (in->kind == RP_INSTRUMENT_HISTOGRAM) {
		struct hist_acc *acc;

		if (s->nhist >= s->max_hist) {
			if (!s->hist_limit)
				emit_sid(EV_HIST_LIMIT, s, b);
			s->hist_limit = true;
			return;
		}
		acc = calloc(1, sizeof(*acc));
		if (!acc)
			return;
		acc->rng = 0x9e3779b97f4a7c15ull ^ in->id;
		pthread_mutex_lock(&in->hlock);
		free(in->acc[s->slot]);
		in->acc[s->slot] = acc;
		pthread_mutex_unlock(&in->hlock);
		s->nhist++;
	}
	if (!is_observable(in->kind) && !(se = series_get(s, in->id, "", b)))
		return;
	emit_instrument(EV_BEGIN, s, in, b);
	if (is_observable(in->kind)) {
		rp_or_relaxed(&in->sessions, bit);
		observe(s, in, false, b);
		return;
	}
	rp_or_relaxed(&in->sessions, bit);
	/* what was added before this session listened is not its */
	se->base = bits_double(&in->total_bits);
	se->last = 0;
}

/* Announces the instruments published since the session last looked. */
static void announce(struct msession *s, uint32_t ninst, struct bytebuf *b)
{
	uint32_t i;

	for (i = s->known; i < ninst; i++) {
		struct rp_instrument *in = m_insts[i];

		emit_instrument(EV_PUBLISHED, s, in, b);
		if (spec_match(s, in))
			m_listen(s, in, b);
	}
	s->known = ninst;
	if (!s->enumerated)
		emit_sid(EV_ENUM_DONE, s, b);
	s->enumerated = true;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void collect_histogram(struct msession *s, struct rp_instrument *in, struct bytebuf *b)
{
	static const double qs[] = { 0.5, 0.95, 0.99 };
	static double v[M_HIST_SAMPLES];	/* the counters thread's */
	char quant[256], num[40];
	uint64_t count = 0;
	double sum = 0;
	uint32_t n = 0, i;
	size_t off = 0;

	pthread_mutex_lock(&in->hlock);
	if (in->acc[s->slot]) {
		struct hist_acc *a = in->acc[s->slot];

		count = a->count;
		sum = a->sum;
		n = a->n;
		memcpy(v, a->v, n * sizeof(v[0]));
		a->count = 0;
		a->sum = 0;
		a->n = 0;
	}
	pthread_mutex_unlock(&in->hlock);
	quant[0] = 0;
	if (n) {
		qsort(v, n, sizeof(v[0]), cmp_double);
		for (i = 0; i < sizeof(qs) / sizeof(qs[0]); i++) {
			/* nearest rank */
			uint32_t r = (uint32_t)ceil(qs[i] * n);

			fmt_num(num, sizeof(num), v[(r ? r : 1) - 1]);
			off += (size_t)snprintf(quant + off, sizeof(quant) - off, "%s%g=%s",
						i ? ";" : "", qs[i], num);
		}
	}
	put_head(b, s, in, "");
	put_str(b, quant);
	bb_append_u32(b, count > INT32_MAX ? INT32_MAX : (uint32_t)count);
	put_f64(b, sum);
	bb_append_u32(b, in->id);
	emit(EV_HISTOGRAM, b);
}

static void collect_one(struct msession *s, struct rp_instrument *in, struct bytebuf *b)
{
	struct series *se;
	double cur;

	switch (in->kind) {
	case RP_INSTRUMENT_COUNTER:
	case RP_INSTRUMENT_UPDOWN_COUNTER:
		if (!(se = series_get(s, in->id, "", b)))
			return;
		cur = bits_double(&in->total_bits) - se->base;
		emit_rate(s, in, "", cur - se->last, cur, b);
		se->last = cur;
		break;
	case RP_INSTRUMENT_GAUGE:
		/* pairs with the store_release of has_last in rp_instrument_record() */
		if (rp_load_acquire(&in->has_last))
			emit_gauge(s, in, "", bits_double(&in->last_bits), b);
		break;
	case RP_INSTRUMENT_HISTOGRAM:
		collect_histogram(s, in, b);
		break;
	default:
		observe(s, in, true, b);
		break;
	}
}

static void collect(struct msession *s, uint64_t now, struct bytebuf *b)
{
	uint64_t bit = 1ull << s->slot, end = now_filetime();
	uint32_t i;

	put_str(b, s->sid);
	bb_append_u64(b, s->start_ft);
	bb_append_u64(b, end);
	emit(EV_COLLECTION_START, b);
	for (i = 0; i < s->known; i++)
		if (rp_load_relaxed(&m_insts[i]->sessions) & bit)
			collect_one(s, m_insts[i], b);
	put_str(b, s->sid);
	bb_append_u64(b, s->start_ft);
	bb_append_u64(b, end);
	emit(EV_COLLECTION_STOP, b);
	s->start_ft = end;
	s->next_ns += s->interval_ns;
	if (s->next_ns <= now)
		s->next_ns = now + s->interval_ns;
}

/* Ends a session's listening; under m_lock (the table's length). */
static void session_end_locked(int slot)
{
	uint64_t bit = 1ull << slot;
	uint32_t i;

	for (i = 0; i < m_ninst; i++) {
		struct rp_instrument *in = m_insts[i];

		rp_and_relaxed(&in->sessions, ~bit);
		if (in->kind == RP_INSTRUMENT_HISTOGRAM) {
			pthread_mutex_lock(&in->hlock);
			free(in->acc[slot]);
			in->acc[slot] = NULL;
			pthread_mutex_unlock(&in->hlock);
		}
	}
	msession_free(m_sess[slot]);
	m_sess[slot] = NULL;
}

/* Under m_lock: applies the queued commands in order. */
static void apply_commands_locked(void)
{
	struct mcmd *c = m_cmds;

	m_cmds = NULL;
	m_cmds_tail = &m_cmds;
	while (c) {
		struct mcmd *next = c->next;

		if (m_sess[c->slot])
			session_end_locked(c->slot);
		if (c->enable)
			m_sess[c->slot] = msession_new(c->slot, c->args);
		free(c->args);
		free(c);
		c = next;
	}
}

static void *m_main(void *arg)
{
	locale_t loc = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
	struct bytebuf b = { 0 };

	(void)arg;
	/* the numbers in the payloads are parsed with the invariant culture */
	if (loc)
		uselocale(loc);
	pthread_mutex_lock(&m_lock);
	for (;;) {
		uint64_t now, next = UINT64_MAX;
		uint32_t ninst;
		int i, live = 0;
		struct timespec ts;

		apply_commands_locked();
		ninst = m_ninst;
		for (i = 0; i < RP_MAX_SESSIONS; i++)
			live += m_sess[i] != NULL;
		if (!live) {
			m_th_state = TH_EXITED;
			break;
		}
		pthread_mutex_unlock(&m_lock);

		now = rp_clock_mono_ns();
		for (i = 0; i < RP_MAX_SESSIONS; i++) {
			struct msession *s = m_sess[i];

			if (!s)
				continue;
			if (s->known < ninst || !s->enumerated)
				announce(s, ninst, &b);
			if (now >= s->next_ns)
				collect(s, now, &b);
			if (s->next_ns < next)
				next = s->next_ns;
		}

		pthread_mutex_lock(&m_lock);
		if (m_cmds)
			continue;
		ts.tv_sec = (time_t)(next / 1000000000ull);
		ts.tv_nsec = (long)(next % 1000000000ull);
		pthread_cond_timedwait(&m_cond, &m_lock, &ts);
	}
	pthread_mutex_unlock(&m_lock);
	bb_free(&b);
	if (loc) {
		uselocale(LC_GLOBAL_LOCALE);
		freelocale(loc);
	}
	return NULL;
}

/* Under m_lock: makes sure the counters thread runs (or will run) for the
 * queued commands. Returns true when the caller must start it, after it
 * joined the previous one, which had ended. */
static bool kick_locked(bool *join)
{
	*join = false;
	if (!m_ready || !m_cmds)
		return false;
	if (m_th_state == TH_RUNNING) {
		pthread_cond_signal(&m_cond);
		return false;
	}
	*join = m_th_state == TH_EXITED;
	m_th_state = TH_RUNNING;
	return true;
}

static void start_thread(bool join)
{
	int err;

	if (join)
		pthread_join(m_th, NULL);
	err = rp_thread_start(&m_th, "rp-counters", m_main, NULL);
	if (!err)
		return;
	/* no thread: no session gets counters, and none waits for them */
	pthread_mutex_lock(&m_lock);
	while (m_cmds) {
		struct mcmd *c = m_cmds;

		m_cmds = c->next;
		free(c->args);
		free(c);
	}
	m_cmds_tail = &m_cmds;
	m_th_state = TH_NONE;
	pthread_mutex_unlock(&m_lock);
}

static void m_enable(struct rp_provider *provider, int slot, bool enabled, uint64_t keywords,
		     uint8_t level, const char *args, void *ctx)
{
	struct mcmd *c;
	bool start, join;

	(void)provider, (void)keywords, (void)level, (void)ctx;
	if (slot < 0 || slot >= RP_MAX_SESSIONS)
		return;
	c = calloc(1, sizeof(*c));
	if (!c)
		return;
	c->slot = slot;
	c->enable = enabled;
	c->args = args ? strdup(args) : NULL;
	pthread_mutex_lock(&m_lock);
	if (!enabled && m_th_state != TH_RUNNING) {
		/* nothing listens for this slot: no thread keeps state */
		pthread_mutex_unlock(&m_lock);
		free(c->args);
		free(c);
		return;
	}
	*m_cmds_tail = c;
	m_cmds_tail = &c->next;
	start = kick_locked(&join);
	pthread_mutex_unlock(&m_lock);
	if (start)
		start_thread(join);
}

/* ---- the public API --------------------------------------------------- */

static bool name_ok(const char *s)
{
	return s && *s && strlen(s) <= M_NAME_MAX;
}

RP_API struct rp_meter *rp_meter_new(const struct rp_meter_opts *uopts)
{
	struct rp_meter_opts o = { 0 };
	struct rp_meter *m;

	if (!uopts || uopts->sz < sizeof(size_t)) {
		rp_set_error("rp_meter_new: options missing or sz not set");
		return errno = EINVAL, NULL;
	}
	memcpy(&o, uopts, uopts->sz < sizeof(o) ? uopts->sz : sizeof(o));
	if (!name_ok(o.name) || (o.version && strlen(o.version) > M_NAME_MAX)) {
		rp_set_error("rp_meter_new: a meter needs a name (and a version, if any) of at "
			     "most 255 bytes");
		return errno = EINVAL, NULL;
	}
	m = calloc(1, sizeof(*m));
	if (!m || !(m->name = strdup(o.name)) || !(m->version = strdup(o.version ? o.version : ""))) {
		if (m)
			free(m->name);
		free(m);
		rp_set_error("rp_meter_new: out of memory");
		return errno = ENOMEM, NULL;
	}
	return m;
}

static void instrument_free(struct rp_instrument *in)
{
	if (!in)
		return;
	free(in->name);
	free(in->unit);
	free(in->desc);
	free(in);
}

RP_API struct rp_instrument *rp_instrument_new(struct rp_meter *meter,
					       const struct rp_instrument_opts *uopts)
{
	struct rp_instrument_opts o = { 0 };
	struct rp_instrument *in;

	if (!meter || !uopts || uopts->sz < sizeof(size_t)) {
		rp_set_error("rp_instrument_new: meter or options missing, or sz not set");
		return errno = EINVAL, NULL;
	}
	memcpy(&o, uopts, uopts->sz < sizeof(o) ? uopts->sz : sizeof(o));
	if (o.kind < RP_INSTRUMENT_COUNTER || o.kind > RP_INSTRUMENT_OBSERVABLE_GAUGE) {
		rp_set_error("rp_instrument_new: kind %d is not an enum rp_instrument_kind", o.kind);
		return errno = EINVAL, NULL;
	}
	if (!name_ok(o.name) || (o.unit && strlen(o.unit) > M_NAME_MAX)) {
		rp_set_error("rp_instrument_new: an instrument needs a name (and a unit, if any) "
			     "of at most 255 bytes");
		return errno = EINVAL, NULL;
	}
	if (is_observable(o.kind) != (o.observe != NULL)) {
		rp_set_error("rp_instrument_new: \"%s\": %s", o.name,
			     o.observe ? "only observable instruments take a callback"
				       : "an observable instrument needs a callback");
		return errno = EINVAL, NULL;
	}
	in = calloc(1, sizeof(*in));
	if (!in || !(in->name = strdup(o.name)) || !(in->unit = strdup(o.unit ? o.unit : "")) ||
	    !(in->desc = strdup(o.description ? o.description : ""))) {
		instrument_free(in);
		rp_set_error("rp_instrument_new: out of memory");
		return errno = ENOMEM, NULL;
	}
	in->kind = o.kind;
	in->meter = meter;
	in->observe = o.observe;
	in->ctx = o.ctx;
	pthread_mutex_init(&in->hlock, NULL);
	pthread_mutex_lock(&m_lock);
	if (m_ninst >= M_MAX_INSTRUMENTS) {
		pthread_mutex_unlock(&m_lock);
		pthread_mutex_destroy(&in->hlock);
		instrument_free(in);
		rp_set_error("rp_instrument_new: %u instruments exist already", M_MAX_INSTRUMENTS);
		return errno = ENOSPC, NULL;
	}
	in->id = m_ninst + 1;
	/* the counters thread reads the slot after taking m_lock */
	m_insts[m_ninst++] = in;
	pthread_mutex_unlock(&m_lock);
	return in;
}

RP_API bool rp_instrument_enabled(const struct rp_instrument *in)
{
	return in && rp_load_relaxed(&in->sessions) != 0;
}

RP_API int rp_instrument_add(struct rp_instrument *in, double delta)
{
	uint64_t old, nw;
	double d;

	if (!in || (in->kind != RP_INSTRUMENT_COUNTER && in->kind != RP_INSTRUMENT_UPDOWN_COUNTER) ||
	    !isfinite(delta) || (in->kind == RP_INSTRUMENT_COUNTER && delta < 0))
		return -EINVAL;
	if (!rp_load_relaxed(&in->sessions))
		return 0;
	old = rp_load_relaxed(&in->total_bits);
	do {
		memcpy(&d, &old, sizeof(d));
		d += delta;
		memcpy(&nw, &d, sizeof(nw));
	} while (!rp_cas_weak_relaxed(&in->total_bits, &old, nw));
	return 0;
}

static void hist_add(struct hist_acc *a, double v)
{
	a->count++;
	a->sum += v;
	if (a->n < M_HIST_SAMPLES) {
		a->v[a->n++] = v;
		return;
	}
	/* reservoir sampling: every measurement kept with equal chance */
	a->rng ^= a->rng << 13;
	a->rng ^= a->rng >> 7;
	a->rng ^= a->rng << 17;
	if (a->rng % a->count < M_HIST_SAMPLES)
		a->v[a->rng % M_HIST_SAMPLES] = v;
}

RP_API int rp_instrument_record(struct rp_instrument *in, double value)
{
	uint64_t mask, u;
	int slot;

	if (!in || (in->kind != RP_INSTRUMENT_GAUGE && in->kind != RP_INSTRUMENT_HISTOGRAM) ||
	    !isfinite(value))
		return -EINVAL;
	mask = rp_load_relaxed(&in->sessions);
	if (!mask)
		return 0;
	if (in->kind == RP_INSTRUMENT_GAUGE) {
		memcpy(&u, &value, sizeof(u));
		rp_store_relaxed(&in->last_bits, u);
		/* pairs with the load_acquire of has_last in collect_one() */
		rp_store_release(&in->has_last, 1);
		return 0;
	}
	pthread_mutex_lock(&in->hlock);
	for (; mask; mask &= mask - 1) {
		slot = __builtin_ctzll(mask);
		if (in->acc[slot])
			hist_add(in->acc[slot], value);
	}
	pthread_mutex_unlock(&in->hlock);
	return 0;
}

/* ---- the library's own meters ------------------------------------------ */

static int observe_cpu_time(struct rp_instrument *in, struct rp_measurement *out, uint32_t max,
			    void *ctx)
{
	struct rusage ru;

	(void)in, (void)ctx;
	if (max < 2 || getrusage(RUSAGE_SELF, &ru))
		return -errno;
	out[0].value = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6;
	out[0].tags = "cpu.mode=user";
	out[1].value = (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
	out[1].tags = "cpu.mode=system";
	return 2;
}

static int observe_working_set(struct rp_instrument *in, struct rp_measurement *out,
			       uint32_t max, void *ctx)
{
	unsigned long size = 0, rss = 0;
	FILE *f = fopen("/proc/self/statm", "re");
	int ok;

	(void)in, (void)ctx, (void)max;
	if (!f)
		return -errno;
	ok = fscanf(f, "%lu %lu", &size, &rss) == 2;
	fclose(f);
	if (!ok)
		return -EIO;
	out[0].value = (double)rss * (double)sysconf(_SC_PAGESIZE);
	out[0].tags = NULL;
	return 1;
}

static int observe_cpu_count(struct rp_instrument *in, struct rp_measurement *out, uint32_t max,
			     void *ctx)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	(void)in, (void)ctx, (void)max;
	out[0].value = n > 0 ? (double)n : 1;
	out[0].tags = NULL;
	return 1;
}

/* A snapshot of the running sessions' figures, taken under the control lock
 * (a RUNNING session is not torn down while it is held). */
struct sess_fig {
	int slot;
	struct rp_session_stats st;
	uint32_t parked;
};

static int session_figures(struct sess_fig *f)
{
	int i, n = 0;

	pthread_mutex_lock(&rp_control_lock);
	for (i = 0; i < RP_MAX_SESSIONS; i++) {
		struct rp_session *s = rp_slots[i].session;

		/* under the control lock, which orders it already */
		if (!s || rp_load_relaxed(&rp_slots[i].state) != SLOT_RUNNING)
			continue;
		f[n].slot = i;
		f[n].st.sz = sizeof(f[n].st);
		rp_session_stats(s, &f[n].st);
		f[n].parked = 0;
		if (rp_slots[i].block) {
			const struct rp_block_queue *q = &rp_block_queues[i];
			int32_t queued = (int32_t)(rp_load_relaxed(&q->tail) -
						   rp_load_relaxed(&q->admit));

			f[n].parked = (queued > 0 ? (uint32_t)queued : 0) +
				      rp_load_relaxed(&q->room_waiters);
		}
		n++;
	}
	pthread_mutex_unlock(&rp_control_lock);
	return n;
}

enum { FIG_EVENTS, FIG_BYTES, FIG_DROPPED, FIG_PARKED };

static const char *const m_drop_names[RP_DROP_REASON_NR] = {
	"full", "too_big", "no_session", "aborted", "alloc", "output", "timeout",
};

/* the counters thread's: the tags of the last observation */
static char m_fig_tags[M_MAX_OBSERVED][48];

static int observe_sessions(struct rp_instrument *in, struct rp_measurement *out, uint32_t max,
			    void *ctx)
{
	static struct sess_fig f[RP_MAX_SESSIONS];
	int which = (int)(intptr_t)ctx, nf = session_figures(f), i, r;
	uint32_t n = 0;

	(void)in;
	for (i = 0; i < nf; i++) {
		if (which == FIG_DROPPED) {
			for (r = 0; r < RP_DROP_REASON_NR && n < max && n < M_MAX_OBSERVED; r++) {
				snprintf(m_fig_tags[n], sizeof(m_fig_tags[n]), "session=%d,reason=%s",
					 f[i].slot, m_drop_names[r]);
				out[n].value = (double)f[i].st.dropped[r];
				out[n].tags = m_fig_tags[n];
				n++;
			}
			continue;
		}
		if (n >= max || n >= M_MAX_OBSERVED)
			break;
		snprintf(m_fig_tags[n], sizeof(m_fig_tags[n]), "session=%d", f[i].slot);
		out[n].value = which == FIG_EVENTS ? (double)f[i].st.events_written :
			       which == FIG_BYTES  ? (double)f[i].st.bytes_written :
						     (double)f[i].parked;
		out[n].tags = m_fig_tags[n];
		n++;
	}
	return (int)n;
}

struct builtin {
	int meter;			/* 0: System.Runtime, 1: Ringpipe */
	int kind;
	const char *name;
	const char *unit;
	const char *desc;
	rp_observe_fn fn;
	intptr_t ctx;
};

static const struct builtin m_builtins[] = {
	{ 0, RP_INSTRUMENT_OBSERVABLE_COUNTER, "dotnet.process.cpu.time", "s",
	  "CPU time used by the process.", observe_cpu_time, 0 },
	{ 0, RP_INSTRUMENT_OBSERVABLE_UPDOWN_COUNTER, "dotnet.process.memory.working_set", "By",
	  "The number of bytes of physical memory mapped to the process context.",
	  observe_working_set, 0 },
	{ 0, RP_INSTRUMENT_OBSERVABLE_UPDOWN_COUNTER, "dotnet.process.cpu.count", "{cpu}",
	  "The number of processors available to the process.", observe_cpu_count, 0 },
	{ 1, RP_INSTRUMENT_OBSERVABLE_COUNTER, "ringpipe.session.events_written", "{event}",
	  "Events each session serialized to its output.", observe_sessions, FIG_EVENTS },
	{ 1, RP_INSTRUMENT_OBSERVABLE_COUNTER, "ringpipe.session.bytes_written", "By",
	  "Bytes each session wrote to its output.", observe_sessions, FIG_BYTES },
	{ 1, RP_INSTRUMENT_OBSERVABLE_COUNTER, "ringpipe.session.events_dropped", "{event}",
	  "Events each session lost, by reason.", observe_sessions, FIG_DROPPED },
	{ 1, RP_INSTRUMENT_OBSERVABLE_UPDOWN_COUNTER, "ringpipe.session.producers_parked",
	  "{thread}", "Producers waiting for room in a Block session.", observe_sessions,
	  FIG_PARKED },
};

static int define_builtins(void)
{
	struct rp_meter_opts mo = { .sz = sizeof(mo), .name = "System.Runtime" };
	struct rp_meter *meters[2];
	size_t i;

	meters[0] = rp_meter_new(&mo);
	mo.name = "Ringpipe";
	mo.version = rp_version();
	meters[1] = rp_meter_new(&mo);
	if (!meters[0] || !meters[1])
		return -errno;
	for (i = 0; i < sizeof(m_builtins) / sizeof(m_builtins[0]); i++) {
		const struct builtin *bi = &m_builtins[i];
		struct rp_instrument_opts io = { .sz = sizeof(io), .kind = bi->kind,
						 .name = bi->name, .unit = bi->unit,
						 .description = bi->desc, .observe = bi->fn,
						 .ctx = (void *)bi->ctx };

		if (!rp_instrument_new(meters[bi->meter], &io))
			return -errno;
	}
	return 0;
}

/* ---- setup ------------------------------------------------------------ */

/* A forked child has no counters thread and no session: start afresh. */
static void m_atfork_child(void)
{
	int i;

	pthread_mutex_init(&m_lock, NULL);
	m_cmds = NULL;		/* leaked: freeing after fork is not worth the risk */
	m_cmds_tail = &m_cmds;
	m_th_state = TH_NONE;
	for (i = 0; i < RP_MAX_SESSIONS; i++)
		m_sess[i] = NULL;
	for (i = 0; i < (int)m_ninst; i++) {
		rp_store_relaxed(&m_insts[i]->sessions, 0);
		pthread_mutex_init(&m_insts[i]->hlock, NULL);
	}
}

static void m_init_once(void)
{
	struct rp_provider_opts po = { .sz = sizeof(po), .name = RP_METRICS_PROVIDER,
				       .enable_cb = m_enable };
	pthread_condattr_t ca;
	struct rp_provider *p;
	bool start = false, join = false;
	size_t i;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&m_cond, &ca);
	pthread_condattr_destroy(&ca);
	pthread_atfork(NULL, NULL, m_atfork_child);
	/* a session already running may enable the provider right here: its
	 * command waits in the queue until the events exist (m_ready) */
	p = rp_provider_new(&po);
	if (!p) {
		m_init_err = -errno;
		return;
	}
	for (i = 0; i < sizeof(m_defs) / sizeof(m_defs[0]); i++) {
		const struct ev_def *d = &m_defs[i];
		struct rp_event_opts eo = { .sz = sizeof(eo), .id = d->id, .name = d->name,
					    .version = d->version, .level = 4,
					    .keywords = d->keywords, .nfields = d->nfields,
					    .fields = d->fields };

		m_ev[d->id] = rp_event_new(p, &eo);
		if (!m_ev[d->id]) {
			m_init_err = -errno;
			return;
		}
	}
	pthread_mutex_lock(&m_lock);
	m_ready = true;
	start = kick_locked(&join);
	pthread_mutex_unlock(&m_lock);
	if (start)
		start_thread(join);
	m_init_err = define_builtins();
}

/*
 * Defines the provider and the library's meters, once; the constructor
 * below calls it, so a program never has to. 0 or -errno.
 */
static int rp_metrics_init(void)
{
	pthread_once(&m_once, m_init_once);
	return m_init_err;
}

/* The library defines the provider and its meters as it loads, so that a
 * tool finds them in any process that links it, without a call. */
__attribute__((constructor)) static void m_ctor(void)
{
	rp_metrics_init();
}

/* At exit, a counters thread that ended after the last session is joined:
 * its resources go back, and thread checkers see nothing left unjoined. One
 * that still runs (a session is listening) is left to the exit. */
__attribute__((destructor)) static void m_dtor(void)
{
	bool join;

	pthread_mutex_lock(&m_lock);
	join = m_th_state == TH_EXITED;
	if (join)
		m_th_state = TH_NONE;
	pthread_mutex_unlock(&m_lock);
	if (join)
		pthread_join(m_th, NULL);
}
