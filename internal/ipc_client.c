// SPDX-License-Identifier: MIT
/*
 * Client side of the .NET diagnostics IPC protocol (see ipc_client.h).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "atomics.h"
#include "clock.h"
#include "ipc.h"
#include "ipc_client.h"
#include "utf.h"

static const uint8_t ipcc_magic[14] = "DOTNET_IPC_V1";	/* with its NUL */
static const uint8_t adv_magic[8] = "ADVR_V1";

#define IPCC_SLICE_MS 100
#define IPCC_ADVERTISE_WAIT_MS 1000

/* ---- small I/O helpers -------------------------------------------------- */

static uint64_t ipcc_now_ms(void)
{
	return rp_clock_mono_ns() / 1000000u;
}

static bool cancelled(const int *cancel)
{
	/* pairs with the store_release of ep->cancel by the thread that stops
	 * the waits (collect's stop path, its signal handler) */
	return cancel && rp_load_acquire(cancel);
}

/*
 * Waits until fd is ready for events: 1, or -ETIMEDOUT, -ECANCELED, -errno.
 * timeout_ms < 0 waits forever (still in slices, for the cancel flag).
 */
static int wait_fd(int fd, short events, int timeout_ms, const int *cancel)
{
	uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : ipcc_now_ms() + (uint64_t)timeout_ms;

	for (;;) {
		struct pollfd pfd = { .fd = fd, .events = events };
		uint64_t now = ipcc_now_ms();
		int slice = IPCC_SLICE_MS, n;

		if (cancelled(cancel))
			return -ECANCELED;
		if (now >= deadline)
			return -ETIMEDOUT;
		if (deadline - now < (uint64_t)slice)
			slice = (int)(deadline - now);
		n = poll(&pfd, 1, slice);
		if (n < 0 && errno != EINTR)
			return -errno;
		if (n > 0)
			return 1;
	}
}

static int read_full(int fd, void *buf, size_t n, int timeout_ms, const int *cancel)
{
	uint8_t *p = buf;
	uint64_t deadline = timeout_ms < 0 ? 0 : ipcc_now_ms() + (uint64_t)timeout_ms;

	while (n) {
		int left = -1, rc;
		ssize_t got;

		if (timeout_ms >= 0) {
			uint64_t now = ipcc_now_ms();

			if (now >= deadline)
				return -ETIMEDOUT;
			left = (int)(deadline - now);
		}
		rc = wait_fd(fd, POLLIN, left, cancel);
		if (rc < 0)
			return rc;
		got = read(fd, p, n);
		if (got < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return -errno;
		}
		if (got == 0)
			return -ECONNRESET;
		p += got;
		n -= (size_t)got;
	}
	return 0;
}

static int write_full(int fd, const void *buf, size_t n)
{
	const uint8_t *p = buf;

	while (n) {
		ssize_t put = send(fd, p, n, MSG_NOSIGNAL);

		if (put < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN) {
				int rc = wait_fd(fd, POLLOUT, 30000, NULL);

				if (rc < 0)
					return rc;
				continue;
			}
			return -errno;
		}
		p += put;
		n -= (size_t)put;
	}
	return 0;
}

/* ---- strings ------------------------------------------------------------ */

/*
 * Refuses text that is not UTF-8 (-EILSEQ: the caller names the provider)
 * rather than sending U+FFFD in its place: a provider name with a
 * replacement character in it would enable nothing the user asked for.
 */
int ipcc_put_string(struct bytebuf *b, const char *utf8)
{
	size_t count_at = b->len, n;
	uint32_t count;
	long units;

	if (bb_reserve(b, 4))
		return -ENOMEM;
	bb_u32(b, 0);
	if (!utf8)
		return 0;
	n = strlen(utf8);
	if (!utf8_valid(utf8, n)) {
		b->len = count_at;
		return -EILSEQ;
	}
	units = utf8_to_utf16le(b, utf8, n, 1);
	if (units < 0) {
		b->len = count_at;
		return -ENOMEM;
	}
	count = (uint32_t)units;
	memcpy(b->p + count_at, &count, 4);
	return 0;
}

/* Reads a protocol string at *p into a new UTF-8 string ("" for count 0). */
static int get_string(const uint8_t **p, const uint8_t *end, char **out)
{
	struct bytebuf s = { 0 };
	uint32_t count, units;

	*out = NULL;
	if (end - *p < 4)
		return -EBADMSG;
	memcpy(&count, *p, 4);
	*p += 4;
	if (count > (uint32_t)(end - *p) / 2)
		return -EBADMSG;
	/* the final NUL is the terminator; a unit missing it, or a NUL
	 * before it, is decoded like any other */
	units = count;
	if (units && !(*p)[2 * (units - 1)] && !(*p)[2 * (units - 1) + 1])
		units--;
	utf16le_to_utf8(&s, *p, units);
	if (s.oom || bb_append(&s, "", 1)) {
		bb_free(&s);
		return -ENOMEM;
	}
	*p += 2 * (size_t)count;
	*out = (char *)s.p;
	return 0;
}

/* ---- finding sockets ---------------------------------------------------- */

static void with_slash(const char *dir, char *out, size_t len)
{
	size_t n = strlen(dir);

	snprintf(out, len, "%s%s", dir, n && dir[n - 1] == '/' ? "" : "/");
}

void ipcc_client_tmpdir(char *out, size_t len)
{
	const char *t = getenv("TMPDIR");

	with_slash(t && *t ? t : "/tmp", out, len);
}

/* TMPDIR of pid's initial environment, with a trailing '/', or ours. */
static void target_tmpdir(pid_t pid, char *out, size_t len)
{
	char path[64], *env = NULL, *p;
	size_t cap = 0, n = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
	f = fopen(path, "re");
	if (f) {
		char buf[4096];
		size_t got;

		while ((got = fread(buf, 1, sizeof(buf), f)) > 0) {
			if (n + got + 1 > cap) {
				char *ne;

				cap = (n + got + 1) * 2;
				ne = realloc(env, cap);
				if (!ne)
					break;
				env = ne;
			}
			memcpy(env + n, buf, got);
			n += got;
		}
		fclose(f);
	}
	if (env) {
		env[n] = 0;
		for (p = env; p < env + n; p += strlen(p) + 1) {
			if (!strncmp(p, "TMPDIR=", 7) && p[7]) {
				with_slash(p + 7, out, len);
				free(env);
				return;
			}
		}
		free(env);
	}
	ipcc_client_tmpdir(out, len);
}

/* The pid in pid's innermost pid namespace (NSpid's last field), or pid. */
pid_t ipcc_inner_pid(pid_t pid)
{
	char path[64], line[256];
	pid_t inner = pid;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return pid;
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, "NSpid:", 6)) {
			char *tok, *save = NULL;

			for (tok = strtok_r(line + 6, " \t\n", &save); tok;
			     tok = strtok_r(NULL, " \t\n", &save))
				inner = (pid_t)atoi(tok);
			break;
		}
	}
	fclose(f);
	return inner > 0 ? inner : pid;
}

/* Does name match dotnet-diagnostic-<pid>-<digits>-socket? */
static bool socket_name_matches(const char *name, pid_t pid)
{
	char prefix[64];
	size_t pl, n = strlen(name), i;

	pl = (size_t)snprintf(prefix, sizeof(prefix), "dotnet-diagnostic-%d-", (int)pid);
	if (n <= pl + 7 || strncmp(name, prefix, pl) || strcmp(name + n - 7, "-socket"))
		return false;
	for (i = pl; i < n - 7; i++)
		if (name[i] < '0' || name[i] > '9')
			return false;
	return true;
}

/* The <key> of a name socket_name_matches() accepted: "...-<key>-socket". */
static unsigned long long name_key(const char *name)
{
	size_t end = strlen(name) - 7, i = end;	/* at "-socket" */

	while (i > 0 && name[i - 1] != '-')
		i--;
	return i < end ? strtoull(name + i, NULL, 10) : 0;
}

/* Wall-clock second the process started at (boot time + start ticks); 0: unknown. */
static time_t proc_start_wall(unsigned long long ticks)
{
	char line[256];
	long hz = sysconf(_SC_CLK_TCK);
	time_t btime = 0;
	FILE *f;

	if (!ticks || hz <= 0 || !(f = fopen("/proc/stat", "re")))
		return 0;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "btime ", 6))
			btime = (time_t)strtoll(line + 6, NULL, 10);
	fclose(f);
	return btime ? btime + (time_t)(ticks / (unsigned long long)hz) : 0;
}

/*
 * The socket of the process in dir. Runtimes name it after their start
 * time (field 22 of /proc/self/stat), so a name with the process's key is
 * its own; a file with another key is accepted only if it is not older
 * than the process, because pids are reused and a runtime killed with
 * SIGKILL leaves its socket file behind. Newest first within a rank.
 * 0 (found), -ENOENT, -ENAMETOOLONG.
 */
static int scan_dir(const char *dir, pid_t name_pid, unsigned long long key, time_t started,
		    char *best, size_t len)
{
	struct timespec newest = { 0, 0 };
	bool too_long = false;
	int best_rank = 0;
	struct dirent *de;
	DIR *d = opendir(dir);

	if (!d)
		return -ENOENT;
	while ((de = readdir(d))) {
		char full[4096];
		struct stat st;
		int rank;

		if (!socket_name_matches(de->d_name, name_pid))
			continue;
		if ((size_t)snprintf(full, sizeof(full), "%s%s", dir, de->d_name) >= sizeof(full))
			continue;
		if (stat(full, &st) || !S_ISSOCK(st.st_mode))
			continue;
		if (strlen(full) >= (size_t)IPCC_PATH_MAX || strlen(full) >= len) {
			too_long = true;
			continue;
		}
		rank = key && name_key(de->d_name) == key ? 2 :
		       !started || st.st_mtim.tv_sec + 1 >= started ? 1 : 0;
		if (!rank || rank < best_rank)
			continue;
		if (rank > best_rank || st.st_mtim.tv_sec > newest.tv_sec ||
		    (st.st_mtim.tv_sec == newest.tv_sec && st.st_mtim.tv_nsec > newest.tv_nsec)) {
			newest = st.st_mtim;
			best_rank = rank;
			snprintf(best, len, "%s", full);
		}
	}
	closedir(d);
	return best_rank ? 0 : too_long ? -ENAMETOOLONG : -ENOENT;
}

int ipcc_find_socket(pid_t pid, char *path, size_t len)
{
	char dir[4096], tmp[2048], proc[64];
	unsigned long long key;
	time_t started;
	pid_t inner;
	int rc;

	if (pid <= 0)
		return -ESRCH;
	snprintf(proc, sizeof(proc), "/proc/%d", (int)pid);
	if (access(proc, F_OK))
		return -ESRCH;
	key = rp_proc_start_ticks(pid);
	started = proc_start_wall(key);
	target_tmpdir(pid, tmp, sizeof(tmp));
	inner = ipcc_inner_pid(pid);
	if (inner != pid) {
		/* another pid namespace: its /tmp through its root, its own pid */
		snprintf(dir, sizeof(dir), "/proc/%d/root%s", (int)pid, tmp);
		rc = scan_dir(dir, inner, key, started, path, len);
		if (rc != -ENOENT)
			return rc;
	}
	rc = scan_dir(tmp, pid, key, started, path, len);
	if (rc == -ENOENT) {
		char mine[2048];

		ipcc_client_tmpdir(mine, sizeof(mine));
		if (strcmp(mine, tmp))
			rc = scan_dir(mine, pid, key, started, path, len);
	}
	return rc;
}

/* ---- endpoints ---------------------------------------------------------- */

void ipcc_endpoint_init_path(struct ipcc_endpoint *ep, const char *path)
{
	memset(ep, 0, sizeof(*ep));
	snprintf(ep->path, sizeof(ep->path), "%s", path);
	ep->listen_fd = -1;
	ep->pending_fd = -1;
}

void ipcc_endpoint_init_reverse(struct ipcc_endpoint *ep, int listen_fd, int64_t expect_pid)
{
	memset(ep, 0, sizeof(*ep));
	ep->listen_fd = listen_fd;
	ep->pending_fd = -1;
	ep->expect_pid = expect_pid;
}

static int sock_addr(const char *path, struct sockaddr_un *sa)
{
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(sa->sun_path))
		return -ENAMETOOLONG;
	memcpy(sa->sun_path, path, strlen(path));
	return 0;
}

/*
 * A runtime creates its socket file with bind() and only then listens: a
 * tool that found the file in between is refused. Refusals are retried for
 * CONNECT_REFUSED_MS before the socket is taken for a dead process's.
 */
#define CONNECT_REFUSED_MS 300
#define CONNECT_RETRY_MS 10

static int connect_path(const char *path)
{
	struct sockaddr_un sa;
	int fd, rc = sock_addr(path, &sa), tries = 0;

	if (rc)
		return rc;
	for (;;) {
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -errno;
		while ((rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa))) < 0 && errno == EINTR)
			;
		if (!rc)
			return fd;
		rc = -errno;
		close(fd);	/* a fresh socket for the next try */
		if (rc != -ECONNREFUSED || ++tries >= CONNECT_REFUSED_MS / CONNECT_RETRY_MS)
			return rc;
		rp_clock_sleep_ns(CONNECT_RETRY_MS * 1000000ull);
	}
}

int ipcc_reverse_listen(const char *path)
{
	struct sockaddr_un sa;
	struct stat st;
	int fd, rc = sock_addr(path, &sa);

	if (rc)
		return rc;
	if (!lstat(path, &st) && S_ISSOCK(st.st_mode))
		unlink(path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (fchmod(fd, 0600) < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    listen(fd, 255) < 0) {
		rc = -errno;
		close(fd);
		return rc;
	}
	return fd;
}

/* Accepts one connection and checks its advertise: fd, or -EAGAIN to retry. */
static int accept_advertised(struct ipcc_endpoint *ep)
{
	uint8_t adv[IPCC_ADVERTISE_SIZE];
	uint64_t pid;
	int fd, rc;

	fd = accept4(ep->listen_fd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0)
		return errno == EINTR || errno == EAGAIN || errno == ECONNABORTED ? -EAGAIN : -errno;
	rc = read_full(fd, adv, sizeof(adv), IPCC_ADVERTISE_WAIT_MS, &ep->cancel);
	if (rc == -ECANCELED) {
		close(fd);
		return rc;
	}
	if (rc || memcmp(adv, adv_magic, sizeof(adv_magic))) {
		ep->ignored++;
		close(fd);
		return -EAGAIN;
	}
	memcpy(&pid, adv + 24, 8);
	if (ep->expect_pid > 0 && pid != (uint64_t)ep->expect_pid) {
		ep->ignored++;
		close(fd);
		return -EAGAIN;
	}
	memcpy(ep->cookie, adv + 8, 16);
	ep->adv_pid = pid;
	ep->have_cookie = true;
	return fd;
}

int ipcc_endpoint_open(struct ipcc_endpoint *ep, int timeout_ms)
{
	uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : ipcc_now_ms() + (uint64_t)timeout_ms;

	if (ep->pending_fd >= 0) {
		int fd = ep->pending_fd;

		ep->pending_fd = -1;
		return fd;
	}
	if (ep->listen_fd < 0)
		return connect_path(ep->path);
	for (;;) {
		uint64_t now = ipcc_now_ms();
		int rc;

		if (now >= deadline)
			return -ETIMEDOUT;
		rc = wait_fd(ep->listen_fd, POLLIN,
			     deadline == UINT64_MAX ? -1 : (int)(deadline - now), &ep->cancel);
		if (rc < 0)
			return rc;
		rc = accept_advertised(ep);
		if (rc != -EAGAIN)
			return rc;
	}
}

/* ---- messages ----------------------------------------------------------- */

int ipcc_send_request(int fd, uint8_t set, uint8_t id, const void *payload, size_t len)
{
	uint8_t hdr[IPCC_HEADER_SIZE];
	uint16_t size;
	int rc;

	if (len > IPCC_MAX_MESSAGE - IPCC_HEADER_SIZE)
		return -EMSGSIZE;
	size = (uint16_t)(IPCC_HEADER_SIZE + len);
	memcpy(hdr, ipcc_magic, sizeof(ipcc_magic));
	memcpy(hdr + 14, &size, 2);
	hdr[16] = set;
	hdr[17] = id;
	hdr[18] = hdr[19] = 0;
	rc = write_full(fd, hdr, sizeof(hdr));
	if (!rc && len)
		rc = write_full(fd, payload, len);
	return rc;
}

int ipcc_read_reply(int fd, struct ipcc_reply *r, int timeout_ms, const int *cancel)
{
	uint8_t hdr[IPCC_HEADER_SIZE];
	uint16_t size;
	int rc;

	r->len = 0;
	r->hresult = 0;
	rc = read_full(fd, hdr, sizeof(hdr), timeout_ms, cancel);
	if (rc)
		return rc;
	if (memcmp(hdr, ipcc_magic, sizeof(ipcc_magic)))
		return -EBADMSG;
	memcpy(&size, hdr + 14, 2);
	if (size < IPCC_HEADER_SIZE)
		return -EBADMSG;
	r->cmd_set = hdr[16];
	r->cmd_id = hdr[17];
	r->len = (uint16_t)(size - IPCC_HEADER_SIZE);
	rc = read_full(fd, r->payload, r->len, timeout_ms, cancel);
	if (rc)
		return rc;
	if (r->cmd_id == IPCC_SERVER_ERROR) {
		if (r->len >= 4)
			memcpy(&r->hresult, r->payload, 4);
		else
			r->hresult = IPCC_HR_FAIL;
		return -EREMOTEIO;
	}
	if (r->cmd_id != IPCC_SERVER_OK)
		return -EBADMSG;
	return 0;
}

/*
 * One command on a fresh connection: 0 with the reply in *r, the connection
 * handed over in *keep when keep is not NULL (else closed).
 */
static int request(struct ipcc_endpoint *ep, uint8_t set, uint8_t id, const void *payload,
		   size_t len, struct ipcc_reply *r, uint32_t *hr, int timeout_ms, int *keep)
{
	int fd, rc;

	if (hr)
		*hr = 0;
	fd = ipcc_endpoint_open(ep, timeout_ms);
	if (fd < 0)
		return fd;
	rc = ipcc_send_request(fd, set, id, payload, len);
	if (!rc)
		rc = ipcc_read_reply(fd, r, timeout_ms, &ep->cancel);
	if (rc == -EREMOTEIO && hr)
		*hr = r->hresult;
	if (!rc && keep) {
		*keep = fd;
		return 0;
	}
	close(fd);
	return rc;
}

/* ---- commands ----------------------------------------------------------- */

void ipcc_process_info_free(struct ipcc_process_info *pi)
{
	free(pi->command_line);
	free(pi->os);
	free(pi->arch);
	free(pi->entry_assembly);
	free(pi->clr_version);
	free(pi->rid);
	memset(pi, 0, sizeof(*pi));
}

static int parse_process_info(const struct ipcc_reply *r, int version, struct ipcc_process_info *pi)
{
	const uint8_t *p = r->payload, *end = r->payload + r->len;
	uint32_t v3 = 0;
	int rc;

	memset(pi, 0, sizeof(*pi));
	pi->version = version;
	if (version == 3) {
		if (end - p < 4)
			return -EBADMSG;
		memcpy(&v3, p, 4);
		p += 4;
	}
	if (end - p < 24)
		return -EBADMSG;
	memcpy(&pi->pid, p, 8);
	memcpy(pi->cookie, p + 8, 16);
	p += 24;
	if ((rc = get_string(&p, end, &pi->command_line)) || (rc = get_string(&p, end, &pi->os)) ||
	    (rc = get_string(&p, end, &pi->arch)))
		goto fail;
	if (version >= 2 && ((rc = get_string(&p, end, &pi->entry_assembly)) ||
			     (rc = get_string(&p, end, &pi->clr_version))))
		goto fail;
	if (version == 3 && v3 >= 1 && (rc = get_string(&p, end, &pi->rid)))
		goto fail;
	return 0;
fail:
	ipcc_process_info_free(pi);
	return rc;
}

int ipcc_process_info(struct ipcc_endpoint *ep, struct ipcc_process_info *pi, uint32_t *hr,
		     int timeout_ms)
{
	static const struct {
		uint8_t id;
		int version;
	} tries[] = { { IPCC_PROC_INFO3, 3 }, { IPCC_PROC_INFO2, 2 }, { IPCC_PROC_INFO, 1 } };
	struct ipcc_reply *r = malloc(sizeof(*r));
	size_t i;
	int rc = -ENOTSUP;

	if (!r)
		return -ENOMEM;
	for (i = 0; i < sizeof(tries) / sizeof(tries[0]); i++) {
		rc = request(ep, IPCC_SET_PROCESS, tries[i].id, NULL, 0, r, hr, timeout_ms, NULL);
		if (rc == -EREMOTEIO && r->hresult == IPCC_HR_UNKNOWN_COMMAND)
			continue;
		if (!rc)
			rc = parse_process_info(r, tries[i].version, pi);
		break;
	}
	free(r);
	return rc;
}

int ipcc_collect_payload(const struct ipcc_collect_opts *o, struct bytebuf *b, uint8_t *cmd_id,
			char *err, size_t errlen)
{
	bool block = o->buffering == RP_BUFFERING_BLOCK;
	uint32_t i;

	if (o->buffering != RP_BUFFERING_DROP && !block) {
		snprintf(err, errlen, "unknown buffering mode %d", o->buffering);
		return -EINVAL;
	}
	if (!o->nproviders || o->nproviders > 1000) {
		snprintf(err, errlen, "a session needs 1 to 1000 providers, not %u", o->nproviders);
		return -EINVAL;
	}
	if (!o->buffer_mb) {
		snprintf(err, errlen, "the buffer size must be at least 1 MB");
		return -EINVAL;
	}
	if (bb_reserve(b, 64))
		goto nomem;
	if (block) {
		*cmd_id = IPCC_EP_COLLECT_TRACING6;
		bb_u32(b, 0);			/* session_type: IPC streaming */
		bb_u32(b, o->buffer_mb);
		bb_u32(b, 1);			/* format: nettrace */
		bb_u64(b, o->rundown ? IPCC_DEFAULT_RUNDOWN_KEYWORD : 0);
		bb_u8(b, 1);			/* requestStackwalk */
	} else {
		*cmd_id = IPCC_EP_COLLECT_TRACING2;
		bb_u32(b, o->buffer_mb);
		bb_u32(b, 1);
		bb_u8(b, o->rundown ? 1 : 0);
	}
	bb_u32(b, o->nproviders);
	for (i = 0; i < o->nproviders; i++) {
		const struct rp_provider_config *pc = &o->providers[i];
		int rc;

		if (!pc->name || !*pc->name || pc->level > 5) {
			snprintf(err, errlen, "provider %u: %s", i + 1,
				 !pc->name || !*pc->name ? "empty name" : "level above 5");
			return -EINVAL;
		}
		if (bb_reserve(b, 12))
			goto nomem;
		bb_u64(b, pc->keywords);
		bb_u32(b, pc->level);
		rc = ipcc_put_string(b, pc->name);
		if (!rc)
			rc = ipcc_put_string(b, pc->args ? pc->args : "");
		if (rc == -EILSEQ) {
			snprintf(err, errlen, "provider '%s': not valid UTF-8", pc->name);
			return -EINVAL;
		}
		if (rc)
			goto nomem;
		if (block) {
			if (bb_reserve(b, 5))
				goto nomem;
			bb_u8(b, 0);		/* event filter: deny-list ... */
			bb_u32(b, 0);		/* ... of no ids: every event */
		}
	}
	if (block) {
		if (bb_reserve(b, 4))
			goto nomem;
		bb_u32(b, 1);			/* bufferingMode: Block */
	}
	if (b->oom)
		goto nomem;
	if (b->len > IPCC_MAX_MESSAGE - IPCC_HEADER_SIZE) {
		snprintf(err, errlen, "the request is %zu bytes, over the protocol's limit of %u",
			 b->len + IPCC_HEADER_SIZE, IPCC_MAX_MESSAGE);
		return -EINVAL;
	}
	return 0;
nomem:
	snprintf(err, errlen, "out of memory");
	return -ENOMEM;
}

int ipcc_collect_tracing(struct ipcc_endpoint *ep, const struct ipcc_collect_opts *o,
			uint64_t *session_id, int *stream_fd, uint32_t *hr, int timeout_ms)
{
	struct bytebuf b = { 0 };
	struct ipcc_reply *r;
	char err[256];
	uint8_t id;
	int rc;

	*stream_fd = -1;
	if (hr)
		*hr = 0;
	rc = ipcc_collect_payload(o, &b, &id, err, sizeof(err));
	if (rc) {
		bb_free(&b);
		return rc;
	}
	r = malloc(sizeof(*r));
	if (!r) {
		bb_free(&b);
		return -ENOMEM;
	}
	rc = request(ep, IPCC_SET_EVENTPIPE, id, b.p, b.len, r, hr, timeout_ms, stream_fd);
	if (!rc && r->len < 8) {
		close(*stream_fd);
		*stream_fd = -1;
		rc = -EBADMSG;
	}
	if (!rc)
		memcpy(session_id, r->payload, 8);
	free(r);
	bb_free(&b);
	return rc;
}

int ipcc_stop_tracing(struct ipcc_endpoint *ep, uint64_t session_id, uint32_t *hr, int timeout_ms)
{
	struct ipcc_reply *r = malloc(sizeof(*r));
	int rc;

	if (!r)
		return -ENOMEM;
	rc = request(ep, IPCC_SET_EVENTPIPE, IPCC_EP_STOP_TRACING, &session_id, 8, r, hr,
		     timeout_ms, NULL);
	free(r);
	return rc;
}

int ipcc_resume_runtime(struct ipcc_endpoint *ep, uint32_t *hr, int timeout_ms)
{
	struct ipcc_reply *r = malloc(sizeof(*r));
	int rc;

	if (!r)
		return -ENOMEM;
	rc = request(ep, IPCC_SET_PROCESS, IPCC_PROC_RESUME_RUNTIME, NULL, 0, r, hr, timeout_ms,
		     NULL);
	free(r);
	return rc;
}

const char *ipcc_hresult_name(uint32_t hr)
{
	switch (hr) {
	case IPCC_HR_BAD_ENCODING:
		return "BadEncoding";
	case IPCC_HR_UNKNOWN_COMMAND:
		return "UnknownCommand";
	case IPCC_HR_UNKNOWN_MAGIC:
		return "UnknownMagic";
	case IPCC_HR_NOT_SUPPORTED:
		return "NotSupported";
	case IPCC_HR_FAIL:
		return "Fail";
	case IPCC_HR_INVALID_ARG:
		return "InvalidArg";
	case 0x8013135Bu:
		return "NotYetAvailable";
	case 0x80131371u:
		return "RuntimeUninitialized";
	default:
		return "error";
	}
}

const char *ipcc_strerror(int err, uint32_t hr, char *buf, size_t len)
{
	switch (err) {
	case -EREMOTEIO:
		snprintf(buf, len, "the runtime answered %s (HRESULT 0x%08" PRIx32 ")",
			 ipcc_hresult_name(hr), hr);
		break;
	case -EBADMSG:
		snprintf(buf, len, "malformed reply (not a DOTNET_IPC_V1 diagnostics server?)");
		break;
	case -ECONNRESET:
		snprintf(buf, len, "the runtime closed the connection without answering");
		break;
	case -ECONNREFUSED:
		snprintf(buf, len, "connection refused: nothing listens on the socket (stale socket?)");
		break;
	case -ETIMEDOUT:
		snprintf(buf, len, "no answer in time");
		break;
	default:
		snprintf(buf, len, "%s", strerror(-err));
		break;
	}
	return buf;
}
