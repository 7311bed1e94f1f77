// SPDX-License-Identifier: MIT
/*
 * Session shared memory: create the memfd, map it (every ring's data
 * twice, back to back), and map an fd received from elsewhere after
 * validating every header field against the fd itself.
 *
 * File (memfd "ringpipe-session"), offsets:
 *
 *   0                      session header (8 KiB)
 *   H                      ring 0 header (4 KiB)
 *   H + 4K                 ring 0 data (data_size)
 *   H + (4K + D)           ring 1 header ...
 *   total = H + nr * (4K + D), sealed F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL
 *
 * Address space (one PROT_NONE reservation, pieces mapped MAP_FIXED):
 *
 *   base                   session header
 *   base + H + i * stride  ring i header | data | data again | guard page
 *   stride = 4K + 2 * D + page
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ring.h"

#define SHM_NAME		"ringpipe-session"
#define SHM_HDR_SIZE		((uint64_t)sizeof(struct rp_shm_session))
#define SHM_SEALS_WANTED	(F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

/* Bytes of opts beyond what this build knows must be zero. */
static bool shm_opts_valid(const void *opts, size_t known)
{
	const unsigned char *p = opts;
	size_t sz;

	if (!opts)
		return true;
	memcpy(&sz, opts, sizeof(sz));
	if (sz < sizeof(size_t))
		return false;
	for (size_t i = known; i < sz; i++)
		if (p[i])
			return false;
	return true;
}

#define SHM_OFFSETOFEND(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))
#define SHM_OPT(opts, type, field, def)						\
	((opts) && (opts)->sz >= SHM_OFFSETOFEND(type, field) ? (opts)->field : (def))

struct shm_geom {
	uint32_t nr_rings;
	uint32_t max_record;
	uint64_t data_size;
	uint64_t page_size;
	uint64_t file_size;	/* memfd size */
	uint64_t file_stride;	/* ring header + data */
	uint64_t va_stride;	/* ring header + 2 * data + guard page */
	uint64_t va_size;
};

static uint64_t shm_page_size(void)
{
	long ps = sysconf(_SC_PAGESIZE);

	return ps > 0 ? (uint64_t)ps : 4096u;
}

static uint32_t shm_max_record(uint64_t data_size)
{
	uint64_t quarter = data_size / 4;

	return quarter < RP_REC_MAX_SIZE ? (uint32_t)quarter : RP_REC_MAX_SIZE;
}

/* Compute and bound-check the geometry; why gets a reason on failure. */
static int shm_geometry(uint32_t nr_rings, uint64_t data_size, struct shm_geom *g,
			char *why, size_t whylen)
{
	uint64_t page = shm_page_size();

	if (page > RP_SHM_RING_HDR_SIZE) {
		snprintf(why, whylen, "page size %" PRIu64 " is larger than the %u-byte ring header",
			 page, RP_SHM_RING_HDR_SIZE);
		return -ENOTSUP;
	}
	if (nr_rings < 1 || nr_rings > RP_SHM_MAX_RINGS) {
		snprintf(why, whylen, "ring count %u is not in 1..%u", nr_rings, RP_SHM_MAX_RINGS);
		return -EINVAL;
	}
	if (data_size < RP_SHM_MIN_DATA_SIZE || data_size > RP_SHM_MAX_DATA_SIZE ||
	    (data_size & (data_size - 1)) || data_size % page) {
		snprintf(why, whylen, "ring data size %" PRIu64 " is not a power of two in %llu..%llu "
			 "and a multiple of the page size %" PRIu64, data_size,
			 RP_SHM_MIN_DATA_SIZE, RP_SHM_MAX_DATA_SIZE, page);
		return -EINVAL;
	}
	/* no overflow: nr <= 2^12, data <= 2^30 */
	g->nr_rings = nr_rings;
	g->data_size = data_size;
	g->page_size = page;
	g->max_record = shm_max_record(data_size);
	g->file_stride = RP_SHM_RING_HDR_SIZE + data_size;
	g->file_size = SHM_HDR_SIZE + (uint64_t)nr_rings * g->file_stride;
	g->va_stride = RP_SHM_RING_HDR_SIZE + 2 * data_size + page;
	g->va_size = SHM_HDR_SIZE + (uint64_t)nr_rings * g->va_stride;
	if (g->va_size > SIZE_MAX / 2) {
		snprintf(why, whylen, "mapping would need %" PRIu64 " bytes of address space",
			 g->va_size);
		return -ENOMEM;
	}
	return 0;
}

uint32_t rp_shm_possible_cpus(void)
{
	char buf[256];
	ssize_t n;
	long conf;
	int fd;

	/* "0-N" or "0-3,8-11": the highest id + 1 is what indexes need */
	fd = open("/sys/devices/system/cpu/possible", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (n > 0) {
			unsigned long max = 0, v;
			char *p = buf, *end;

			buf[n] = '\0';
			while (*p) {
				v = strtoul(p, &end, 10);
				if (end == p)
					break;
				if (v > max)
					max = v;
				p = end;
				if (*p == '-' || *p == ',')
					p++;
				else
					break;
			}
			if (max < RP_SHM_MAX_RINGS)
				return (uint32_t)max + 1;
		}
	}
	conf = sysconf(_SC_NPROCESSORS_CONF);
	if (conf < 1)
		return 1;
	return conf > RP_SHM_MAX_RINGS ? RP_SHM_MAX_RINGS : (uint32_t)conf;
}

/* Reserve the address range and map header, rings and mirrors into it. */
static int shm_map(struct rp_shm *s, const struct shm_geom *g)
{
	unsigned char *base, *va;
	uint64_t fo;
	void *p;

	base = mmap(NULL, g->va_size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (base == MAP_FAILED)
		return -errno;
	s->map_base = base;
	s->map_len = g->va_size;

	p = mmap(base, SHM_HDR_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, s->fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	s->hdr = p;

	for (uint32_t i = 0; i < g->nr_rings; i++) {
		va = base + SHM_HDR_SIZE + (uint64_t)i * g->va_stride;
		fo = SHM_HDR_SIZE + (uint64_t)i * g->file_stride;
		p = mmap(va, RP_SHM_RING_HDR_SIZE + g->data_size, PROT_READ | PROT_WRITE,
			 MAP_SHARED | MAP_FIXED, s->fd, (off_t)fo);
		if (p == MAP_FAILED)
			return -errno;
		/* the mirror: the same data pages again, right after */
		p = mmap(va + RP_SHM_RING_HDR_SIZE + g->data_size, g->data_size,
			 PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, s->fd,
			 (off_t)(fo + RP_SHM_RING_HDR_SIZE));
		if (p == MAP_FAILED)
			return -errno;
		/* the guard page after the mirror stays PROT_NONE */
	}
	return 0;
}

static struct rp_shm_ring *shm_ring_hdr(const struct rp_shm *s, const struct shm_geom *g, uint32_t i)
{
	return (struct rp_shm_ring *)((unsigned char *)s->map_base + SHM_HDR_SIZE +
				      (uint64_t)i * g->va_stride);
}

/* Each ring's drops at its line of the counts: the sealed memfd's, or the
 * private ones of an opener that has none. */
static void shm_point_counts(struct rp_shm *s)
{
	struct rp_shm_ring_counts *lines = s->counts_map ?
		(struct rp_shm_ring_counts *)((struct rp_shm_counts *)s->counts_map + 1) :
		s->local_counts;

	for (uint32_t i = 0; i < s->nr_rings; i++)
		s->rings[i].drops = (uint64_t *)lines[i].drops;
}

static size_t shm_counts_len(uint32_t nr_rings)
{
	uint64_t page = shm_page_size();

	return (size_t)((rp_shm_counts_size(nr_rings) + page - 1) / page * page);
}

#define SHM_COUNTS_NAME		"ringpipe-counts"
/* what makes the counts the creator's alone (abi.h) */
#define SHM_COUNTS_SEALS	(F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL)

/*
 * The creator's drop counters: a memfd mapped writable here, then sealed
 * so that nobody (this process included) can map it writable again or
 * write() to it: a process that gets hold of it can only read.
 */
static int shm_create_counts(struct rp_shm *s, uint32_t nr_rings, uint64_t session_id)
{
	struct rp_shm_counts *c;
	void *p;

	s->counts_len = shm_counts_len(nr_rings);
	s->counts_fd = memfd_create(SHM_COUNTS_NAME, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (s->counts_fd < 0)
		return -errno;
	if (ftruncate(s->counts_fd, (off_t)s->counts_len))
		return -errno;
	p = mmap(NULL, s->counts_len, PROT_READ | PROT_WRITE, MAP_SHARED, s->counts_fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	s->counts_map = p;
	c = p;
	c->version = RP_ABI_VERSION;
	c->nr_rings = nr_rings;
	c->session_id = session_id;
	c->magic = RP_COUNTS_MAGIC;
	/* F_SEAL_FUTURE_WRITE: Linux 5.1 */
	if (fcntl(s->counts_fd, F_ADD_SEALS, SHM_COUNTS_SEALS))
		return -errno;
	return 0;
}

int rp_shm_counts_fd(const struct rp_shm *s)
{
	return s->creator ? s->counts_fd : -1;
}


static int shm_alloc_rings(struct rp_shm *s, const struct shm_geom *g)
{
	void *mem;
	int err;

	/* rp_ring is cache-line aligned; calloc would not honour that */
	err = posix_memalign(&mem, 64, (size_t)g->nr_rings * sizeof(struct rp_ring));
	if (err)
		return -err;
	memset(mem, 0, (size_t)g->nr_rings * sizeof(struct rp_ring));
	s->rings = mem;
	s->nr_rings = g->nr_rings;
	s->data_size = g->data_size;
	s->max_record = g->max_record;
	for (uint32_t i = 0; i < g->nr_rings; i++) {
		struct rp_shm_ring *rh = shm_ring_hdr(s, g, i);

		rp_ring_setup(&s->rings[i], s, i, rh, (unsigned char *)rh + RP_SHM_RING_HDR_SIZE);
	}
	shm_point_counts(s);
	return 0;
}

static struct rp_shm *shm_new(void)
{
	struct rp_shm *s;

	/* aligned as its type asks: writers read its first line on every
	 * write, and calloc() could put it beside another thread's data */
	if (posix_memalign((void **)&s, 64, sizeof(*s)))
		return NULL;
	memset(s, 0, sizeof(*s));
	s->fd = -1;
	s->counts_fd = -1;
	return s;
}

void rp_shm_destroy(struct rp_shm *s)
{
	if (!s)
		return;
	if (s->map_base)
		munmap(s->map_base, s->map_len);	/* header, rings, mirrors, guards */
	if (s->fd >= 0)
		close(s->fd);
	if (s->counts_map)
		munmap(s->counts_map, s->counts_len);
	if (s->counts_fd >= 0)
		close(s->counts_fd);
	free(s->local_counts);
	free(s->rings);
	free(s);
}

static uint64_t shm_random_id(void)
{
	uint64_t id = 0;

	if (getrandom(&id, sizeof(id), GRND_NONBLOCK) != sizeof(id) || !id) {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		id = ((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20);
	}
	return id ? id : 1;
}

struct rp_shm *rp_shm_create(const struct rp_shm_opts *opts)
{
	struct rp_shm_session *h;
	struct rp_shm *s = NULL;
	struct shm_geom g;
	uint64_t data_size;
	uint32_t nr, mode, watermark;
	char why[160];
	int err;

	if (!shm_opts_valid(opts, SHM_OFFSETOFEND(struct rp_shm_opts, rp_shm_opts__last_field)))
		return errno = EINVAL, NULL;
	nr = SHM_OPT(opts, struct rp_shm_opts, nr_rings, 0);
	if (!nr)
		nr = rp_shm_possible_cpus();
	data_size = SHM_OPT(opts, struct rp_shm_opts, data_size, 0);
	if (!data_size)
		data_size = RP_SHM_DEFAULT_DATA_SIZE;
	mode = SHM_OPT(opts, struct rp_shm_opts, mode, RP_SHM_MODE_DROP);
	if (mode != RP_SHM_MODE_DROP && mode != RP_SHM_MODE_BLOCK)
		return errno = EINVAL, NULL;	/* unknown modes are rejected, never coerced */
	err = shm_geometry(nr, data_size, &g, why, sizeof(why));
	if (err)
		return errno = -err, NULL;
	watermark = SHM_OPT(opts, struct rp_shm_opts, wake_watermark, 0);
	if (!watermark || watermark > data_size)
		watermark = (uint32_t)(data_size / 2);

	s = shm_new();
	if (!s)
		return errno = ENOMEM, NULL;
	s->creator = true;
	s->fd = memfd_create(SHM_NAME, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (s->fd < 0) {
		err = -errno;
		goto err_out;
	}
	if (ftruncate(s->fd, (off_t)g.file_size) || fcntl(s->fd, F_ADD_SEALS, SHM_SEALS_WANTED)) {
		err = -errno;
		goto err_out;
	}
	err = shm_map(s, &g);
	if (err)
		goto err_out;

	h = s->hdr;
	h->version = RP_ABI_VERSION;
	h->hdr_size = (uint32_t)SHM_HDR_SIZE;
	h->ring_hdr_size = RP_SHM_RING_HDR_SIZE;
	h->nr_rings = g.nr_rings;
	h->ring_data_size = g.data_size;
	h->session_id = SHM_OPT(opts, struct rp_shm_opts, session_id, 0);
	if (!h->session_id)
		h->session_id = shm_random_id();
	h->flags = mode;
	h->page_size = (uint32_t)g.page_size;
	h->max_record = g.max_record;
	h->record_hdr_size = sizeof(struct rp_shm_record);
	h->total_size = g.file_size;
	/* unused since ABI 5: no reader takes a drainer for dead by time */
	h->drainer_timeout_ns = 0;
	h->wake_watermark = watermark;
	h->creator_pid = (uint32_t)getpid();
	for (uint32_t i = 0; i < g.nr_rings; i++) {
		struct rp_shm_ring *rh = shm_ring_hdr(s, &g, i);

		rh->magic = RP_SHM_RING_MAGIC;
		rh->cpu = i;
		rh->data_size = g.data_size;
		rh->data_offset = SHM_HDR_SIZE + (uint64_t)i * g.file_stride + RP_SHM_RING_HDR_SIZE;
		rh->max_record = g.max_record;
	}
	/* magic last: a reader that maps early sees no magic rather than a
	 * half-written header; pairs with the validation in rp_shm_open_fd()
	 * (which also re-checks every field, so this is belt and braces) */
	rp_store_release(&h->magic, RP_ABI_MAGIC);

	err = shm_create_counts(s, g.nr_rings, h->session_id);
	if (err)
		goto err_out;
	err = shm_alloc_rings(s, &g);
	if (err)
		goto err_out;
	return s;

err_out:
	rp_shm_destroy(s);
	return errno = -err, NULL;
}

static void shm_fail(const struct rp_shm_open_opts *opts, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void shm_fail(const struct rp_shm_open_opts *opts, const char *fmt, ...)
{
	char *buf = SHM_OPT(opts, struct rp_shm_open_opts, errbuf, NULL);
	size_t len = SHM_OPT(opts, struct rp_shm_open_opts, errbuf_len, 0);
	va_list ap;

	if (!buf || !len)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, len, fmt, ap);
	va_end(ap);
}

/* Validate a copy of the session header (never the live mapping). */
static int shm_check_header(const struct rp_shm_session *h, uint64_t fd_size, struct shm_geom *g,
			    const struct rp_shm_open_opts *opts)
{
	char why[200];
	int err;

	if (h->magic != RP_ABI_MAGIC) {
		shm_fail(opts, "not a ringpipe session: magic 0x%016" PRIx64 ", expected 0x%016llx",
			 (uint64_t)h->magic, RP_ABI_MAGIC);
		return -EPROTO;
	}
	if (h->version != RP_ABI_VERSION) {
		shm_fail(opts, "session ABI version %u, this reader speaks version %u",
			 h->version, RP_ABI_VERSION);
		return -EPROTONOSUPPORT;
	}
	if (h->hdr_size != SHM_HDR_SIZE || h->ring_hdr_size != RP_SHM_RING_HDR_SIZE ||
	    h->record_hdr_size != sizeof(struct rp_shm_record)) {
		shm_fail(opts, "header sizes %u/%u/%u, expected %" PRIu64 "/%u/%zu "
			 "(session/ring/record)", h->hdr_size, h->ring_hdr_size, h->record_hdr_size,
			 SHM_HDR_SIZE, RP_SHM_RING_HDR_SIZE, sizeof(struct rp_shm_record));
		return -EBADMSG;
	}
	if (h->page_size != shm_page_size()) {
		shm_fail(opts, "session was created with page size %u, ours is %" PRIu64,
			 h->page_size, shm_page_size());
		return -EBADMSG;
	}
	err = shm_geometry(h->nr_rings, h->ring_data_size, g, why, sizeof(why));
	if (err) {
		shm_fail(opts, "bad session geometry: %s", why);
		return -EBADMSG;
	}
	if (h->max_record != g->max_record) {
		shm_fail(opts, "max record %u, expected %u for data size %" PRIu64,
			 h->max_record, g->max_record, g->data_size);
		return -EBADMSG;
	}
	if ((h->flags & ~RP_SHM_F_KNOWN) ||
	    ((h->flags & RP_SHM_F_MODE_MASK) != RP_SHM_MODE_DROP &&
	     (h->flags & RP_SHM_F_MODE_MASK) != RP_SHM_MODE_BLOCK)) {
		shm_fail(opts, "unknown session flags or mode 0x%x", h->flags);
		return -EBADMSG;
	}
	if (h->total_size != g->file_size) {
		shm_fail(opts, "header total size %" PRIu64 " does not match %u rings of %" PRIu64
			 " bytes (%" PRIu64 ")", (uint64_t)h->total_size, g->nr_rings, g->data_size,
			 g->file_size);
		return -EBADMSG;
	}
	if (fd_size != g->file_size) {
		shm_fail(opts, "fd is %" PRIu64 " bytes but the header describes %" PRIu64 " (%s)",
			 fd_size, g->file_size, fd_size < g->file_size ? "truncated" : "oversized");
		return -EBADMSG;
	}
	return 0;
}

/* Validate ring headers in the mapping; copy what we use, trust nothing later. */
static int shm_check_rings(const struct rp_shm *s, const struct shm_geom *g,
			   const struct rp_shm_open_opts *opts)
{
	for (uint32_t i = 0; i < g->nr_rings; i++) {
		const struct rp_shm_ring *rh = shm_ring_hdr(s, g, i);
		uint64_t off = SHM_HDR_SIZE + (uint64_t)i * g->file_stride + RP_SHM_RING_HDR_SIZE;
		uint32_t magic = rp_load_relaxed(&rh->magic), cpu = rp_load_relaxed(&rh->cpu);
		uint32_t maxrec = rp_load_relaxed(&rh->max_record);
		uint64_t dsz = rp_load_relaxed(&rh->data_size), doff = rp_load_relaxed(&rh->data_offset);

		if (magic != RP_SHM_RING_MAGIC || cpu != i || dsz != g->data_size ||
		    doff != off || maxrec != g->max_record) {
			shm_fail(opts, "ring %u header is inconsistent: magic 0x%08x cpu %u data size %"
				 PRIu64 " data offset %" PRIu64 " max record %u (expected 0x%08x %u %"
				 PRIu64 " %" PRIu64 " %u)", i, magic, cpu, dsz, doff, maxrec,
				 RP_SHM_RING_MAGIC, i, g->data_size, off, g->max_record);
			return -EBADMSG;
		}
	}
	return 0;
}

struct rp_shm *rp_shm_open_fd(int fd, const struct rp_shm_open_opts *opts)
{
	struct rp_shm_session hdr;
	struct rp_shm *s = NULL;
	struct shm_geom g;
	struct stat st;
	ssize_t n;
	int seals, err;

	if (!shm_opts_valid(opts, SHM_OFFSETOFEND(struct rp_shm_open_opts,
						  rp_shm_open_opts__last_field)))
		return errno = EINVAL, NULL;
	if (fstat(fd, &st)) {
		err = -errno;
		shm_fail(opts, "fstat(fd %d): %s", fd, strerror(-err));
		return errno = -err, NULL;
	}
	if (!S_ISREG(st.st_mode)) {
		shm_fail(opts, "fd %d is not a memfd / regular file", fd);
		return errno = EBADF, NULL;
	}
	/* Without F_SEAL_SHRINK the peer could truncate the file under our
	 * mapping and turn every read into SIGBUS. */
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
		shm_fail(opts, "fd %d is not sealed against shrinking (F_SEAL_SHRINK); "
			 "a peer could truncate it under the mapping", fd);
		return errno = EPERM, NULL;
	}
	if ((uint64_t)st.st_size < SHM_HDR_SIZE) {
		shm_fail(opts, "fd is %lld bytes, smaller than the %" PRIu64 "-byte session header "
			 "(truncated)", (long long)st.st_size, SHM_HDR_SIZE);
		return errno = EBADMSG, NULL;
	}
	n = pread(fd, &hdr, sizeof(hdr), 0);
	if (n != (ssize_t)sizeof(hdr)) {
		err = n < 0 ? errno : EIO;
		shm_fail(opts, "reading the session header: %s", n < 0 ? strerror(err) : "short read");
		return errno = err, NULL;
	}
	err = shm_check_header(&hdr, (uint64_t)st.st_size, &g, opts);
	if (err)
		return errno = -err, NULL;

	s = shm_new();
	if (!s)
		return errno = ENOMEM, NULL;
	s->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (s->fd < 0) {
		err = -errno;
		shm_fail(opts, "dup(fd %d): %s", fd, strerror(-err));
		goto err_out;
	}
	err = shm_map(s, &g);
	if (err) {
		shm_fail(opts, "mapping %" PRIu64 " bytes of session: %s", g.va_size, strerror(-err));
		goto err_out;
	}
	err = shm_check_rings(s, &g, opts);
	if (err)
		goto err_out;
	/* drops counted here until the creator's counters are attached */
	s->local_counts = calloc(g.nr_rings, sizeof(*s->local_counts));
	if (!s->local_counts) {
		err = -ENOMEM;
		goto err_out;
	}
	err = shm_alloc_rings(s, &g);
	if (err) {
		shm_fail(opts, "allocating %u rings: %s", g.nr_rings, strerror(-err));
		goto err_out;
	}
	return s;

err_out:
	rp_shm_destroy(s);
	return errno = -err, NULL;
}

int rp_shm_fd(const struct rp_shm *s)
{
	return s->fd;
}

struct rp_ring *rp_shm_ring(struct rp_shm *s, uint32_t index)
{
	return index < s->nr_rings ? &s->rings[index] : NULL;
}

uint32_t rp_shm_nr_rings(const struct rp_shm *s)
{
	return s->nr_rings;
}

struct rp_shm_session *rp_shm_header(const struct rp_shm *s)
{
	return s->hdr;
}

void rp_shm_set_reporter(struct rp_shm *s, rp_ring_report_fn fn, void *ctx)
{
	s->report = fn;
	s->report_ctx = ctx;
}

void rp_shm_set_stale_judge(struct rp_shm *s, rp_stale_judge_fn fn, void *ctx)
{
	s->stale_judge = fn;
	s->stale_ctx = ctx;
}

void rp_shm_skip_uncommitted(struct rp_shm *s)
{
	/* read by the consumer, which may run on another thread; it orders
	 * nothing else */
	rp_store_relaxed(&s->skip_uncommitted, 1);
}

int rp_shm_attach_counts(struct rp_shm *s, int fd, const struct rp_shm_open_opts *opts)
{
	struct rp_shm_counts c;
	size_t len = shm_counts_len(s->nr_rings);
	struct stat st;
	int seals;
	void *p;

	if (s->creator || s->counts_map)
		return -EBUSY;
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0) {
		shm_fail(opts, "the drop counters' fd takes no seals: %s", strerror(errno));
		return -EBADF;
	}
	if ((seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) !=
		    (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) ||
	    !(seals & (F_SEAL_FUTURE_WRITE | F_SEAL_WRITE))) {
		shm_fail(opts, "the drop counters' memfd is not sealed against other writers "
			 "(seals 0x%x)", seals);
		return -EPERM;
	}
	if (fstat(fd, &st) || (uint64_t)st.st_size != len) {
		shm_fail(opts, "the drop counters' memfd holds %lld bytes, %zu expected for %u rings",
			 (long long)st.st_size, len, s->nr_rings);
		return -EBADMSG;
	}
	if (pread(fd, &c, sizeof(c), 0) != (ssize_t)sizeof(c) || c.magic != RP_COUNTS_MAGIC ||
	    c.version != RP_ABI_VERSION || c.nr_rings != s->nr_rings ||
	    c.session_id != s->hdr->session_id) {
		shm_fail(opts, "the drop counters' memfd is not this session's (magic 0x%016llx, "
			 "version %u, %u rings)", (unsigned long long)c.magic, c.version, c.nr_rings);
		return -EBADMSG;
	}
	p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	s->counts_map = p;
	s->counts_len = len;
	shm_point_counts(s);
	return 0;
}
