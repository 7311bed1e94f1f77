// SPDX-License-Identifier: MIT
/*
 * Process identity and container tags (see identity.h). Whatever comes from
 * /proc is parsed as length-bounded spans, never as C strings: cgroup names
 * are chosen by whoever owns a delegated subtree, so they are hostile input.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>	/* PATH_MAX */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "host/identity.h"
#include "util/procfs.h"

#define READ_MAX (64u << 20)	/* environ is bounded by the stack rlimit: room */
#define N(a) (sizeof(a) / sizeof((a)[0]))
#define HEX "0123456789abcdef"

struct span {
	const char *p;	/* NULL: nothing left (see cut()) */
	size_t n;
};

/* The next sep-delimited piece of *rest into *tok; false once *rest is spent. */
static bool cut(struct span *rest, char sep, struct span *tok)
{
	const char *at;

	if (!rest->p)
		return false;
	at = memchr(rest->p, sep, rest->n);
	*tok = (struct span){ rest->p, at ? (size_t)(at - rest->p) : rest->n };
	if (at)
		*rest = (struct span){ at + 1, rest->n - tok->n - 1 };
	else
		rest->p = NULL;
	return true;
}

/* Consumes lit from the front of *s if it is there. */
static bool eat(struct span *s, const char *lit)
{
	size_t l = strlen(lit);

	if (s->n < l || memcmp(s->p, lit, l))
		return false;
	*s = (struct span){ s->p + l, s->n - l };
	return true;
}

/* How many leading bytes of s are in set */
static size_t span_spn(struct span s, const char *set)
{
	size_t i;

	for (i = 0; i < s.n && s.p[i] && strchr(set, s.p[i]); i++)
		;
	return i;
}

static bool eq(struct span s, const char *lit)
{
	return eat(&s, lit) && !s.n;
}

/* a container id: exactly 64 lower-case hex */
static bool is_id(const char *s, size_t n)
{
	return n == 64 && span_spn((struct span){ s, n }, HEX) == n;
}

/* 8-4-4-4-12 lower-case hex, sep between the groups */
static bool is_uid(const char *s, size_t n, char sep)
{
	size_t i;

	for (i = 0; n == 36 && i < n; i++)
		if (i == 8 || i == 13 || i == 18 || i == 23 ? s[i] != sep : !strchr(HEX, s[i]) || !s[i])
			return false;
	return n == 36;
}

static void set_pod(struct agent_tags *t, const char *uid, const char *qos)
{
	size_t i;

	for (i = 0; i < 36; i++)
		t->pod_uid[i] = uid[i] == '_' ? '-' : uid[i];
	t->pod_uid[36] = '\0';
	snprintf(t->qos, sizeof(t->qos), "%s", qos);
}

static void set_container(struct agent_tags *t, const char *id, const char *runtime)
{
	memcpy(t->container_id, id, 64);
	t->container_id[64] = '\0';
	snprintf(t->runtime, sizeof(t->runtime), "%s", runtime);
}

static const char *const qos_levels[] = { "burstable", "besteffort" };

/* <prefix>-<id>[.scope] (systemd drivers), or <slice>:<prefix>:<id> (v1) */
static const struct {
	const char *prefix, *runtime;
} runtimes[] = {
	{ "cri-containerd", "containerd" },
	{ "crio", "cri-o" },
	{ "docker", "docker" },
	{ "libpod", "podman" },
	{ "nerdctl", "containerd" },
};

/*
 * systemd driver: [<root>-]kubepods[-<qos>]-pod<uid with _>.slice. A slice's
 * name spells its ancestry, so the name alone will do, wherever it sits
 * (containerd on v1 hangs it under /system.slice/containerd.service).
 */
static void pod_slice(struct agent_tags *t, struct span c)
{
	const char *k = c.p, *end = c.p + c.n, *qos = "guaranteed";
	struct span r, q;
	size_t i;

	if (c.n < 6 || memcmp(end - 6, ".slice", 6))
		return;
	while ((k = memmem(k, end - k, "kubepods-", 9)) && k != c.p && k[-1] != '-')
		k++;
	if (!k || k + 9 > end - 6)
		return;
	r = (struct span){ k + 9, end - k - 9 - 6 };
	for (i = 0; i < N(qos_levels); i++) {
		q = r;
		if (eat(&q, qos_levels[i]) && eat(&q, "-")) {
			qos = qos_levels[i], r = q;
			break;
		}
	}
	if (eat(&r, "pod") && is_uid(r.p, r.n, '_'))
		set_pod(t, r.p, qos);
}

/* cgroupfs driver: kubepods/[<qos>/]pod<uid>, the class given by the parents */
static void pod_dir(struct agent_tags *t, struct span c, struct span up, struct span up2)
{
	const char *qos = eq(up, "kubepods") ? "guaranteed" : NULL;
	size_t i;

	for (i = 0; i < N(qos_levels); i++)
		if (eq(up, qos_levels[i]) && eq(up2, "kubepods"))
			qos = qos_levels[i];
	if (qos && eat(&c, "pod") && is_uid(c.p, c.n, '-'))
		set_pod(t, c.p, qos);
}

/* One path component c, below up, below up2. Later (inner) matches win. */
static void component(struct agent_tags *t, struct span c, struct span up, struct span up2)
{
	struct span id = c, slice, prefix, r;
	bool v1 = cut(&id, ':', &slice) && id.p && cut(&id, ':', &prefix) && id.p &&
		  !memchr(id.p, ':', id.n);
	size_t i;

	pod_slice(t, v1 ? slice : c);
	if (!v1)
		pod_dir(t, c, up, up2);
	/* cgroupfs drivers name the leaf by the bare id: only docker's parent
	 * says whose it is */
	if (!v1 && is_id(c.p, c.n))
		set_container(t, c.p, eq(up, "docker") ? "docker" : "");
	for (i = 0; i < N(runtimes); i++) {
		r = c;
		if (v1 ? eq(prefix, runtimes[i].prefix) && is_id(id.p, id.n) :
			 eat(&r, runtimes[i].prefix) && eat(&r, "-") && r.n >= 64 && is_id(r.p, 64) &&
			 (r.n == 64 || (r.n == 70 && !memcmp(r.p + 64, ".scope", 6))))
			set_container(t, v1 ? id.p : r.p, runtimes[i].runtime);
	}
}

static void tags_parse(struct span path, struct agent_tags *t)
{
	struct span c, up = { "", 0 }, up2 = up;

	memset(t, 0, sizeof(*t));
	while (cut(&path, '/', &c)) {
		if (!c.n)
			continue;
		component(t, c, up, up2);
		up2 = up, up = c;
	}
}

int agent_cgroup_tags(const char *cgroup_path, struct agent_tags *t)
{
	tags_parse((struct span){ cgroup_path, strlen(cgroup_path) }, t);
	return 0;
}

struct cg_line {
	struct span path;	/* .p NULL: no such line */
	struct agent_tags tags;
};

static bool listed(struct span list, const char *name)
{
	struct span tok;

	while (cut(&list, ',', &tok))
		if (eq(tok, name))
			return true;
	return false;
}

static void copy_path(char *dst, size_t cap, struct span s)
{
	/* too long is "", never a cut path that names another cgroup */
	dst[0] = '\0';
	if (s.p && s.n < cap) {
		memcpy(dst, s.p, s.n);
		dst[s.n] = '\0';
	}
}

int agent_cgroup_choose(const char *text, size_t len, struct agent_cgroup_choice *ch)
{
	struct cg_line uni = { 0 }, sysd = { 0 }, other = { 0 }, *pick, *l;
	struct span rest = { text, len }, line, hier, ctrl;

	while (cut(&rest, '\n', &line)) {
		/* hierarchy-ID:controllers:path, where the path may hold ':' */
		if (memchr(line.p, '\0', line.n) || !cut(&line, ':', &hier) || !line.p ||
		    !cut(&line, ':', &ctrl) || !line.p || !line.n || line.p[0] != '/' || !hier.n ||
		    span_spn(hier, "0123456789") != hier.n)
			continue;
		if (eq(hier, "0") && !ctrl.n)
			l = uni.path.p ? NULL : &uni;
		else if (listed(ctrl, "name=systemd"))
			l = sysd.path.p ? NULL : &sysd;
		else
			l = other.tags.container_id[0] ? NULL : &other;
		if (l) {
			l->path = line;
			tags_parse(line, &l->tags);
		}
	}
	pick = uni.tags.container_id[0] ? &uni : sysd.tags.container_id[0] ? &sysd :
	       other.tags.container_id[0] ? &other : uni.path.p ? &uni : sysd.path.p ? &sysd : NULL;
	copy_path(ch->unified, sizeof(ch->unified), uni.path);
	copy_path(ch->path, sizeof(ch->path), pick ? pick->path : (struct span){ 0 });
	ch->tags = pick ? pick->tags : (struct agent_tags){ 0 };
	return pick ? 0 : -ENOENT;
}

/* All of dirfd/name into *out (malloc'ed, NUL-terminated; free it even on
 * error): its length, or -errno. */
static ssize_t read_all(int dirfd, const char *name, char **out)
{
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
	size_t n = 0, cap = 4096;
	ssize_t r = 1;
	char *p;

	*out = NULL;
	if (fd < 0)
		return -errno;
	while (r > 0) {
		if (n + 1 == cap && (cap *= 2) > READ_MAX)
			r = -E2BIG;
		else if (!(p = realloc(*out, cap)))
			r = -ENOMEM;
		else if ((r = read(fd, (*out = p) + n, cap - 1 - n)) < 0)
			r = -errno;
		else
			n += r;
	}
	close(fd);
	if (*out)
		(*out)[n] = '\0';
	return r < 0 ? r : (ssize_t)n;
}

/* A dead process's /proc entries answer ENOENT (lookup) or ESRCH (read). */
static int gone(ssize_t err)
{
	return err == -ENOENT || err == -ESRCH ? -ESRCH : (int)err;
}

static int parse_nspids(const char *status, struct agent_identity *id)
{
	const char *s = strstr(status, "\nNSpid:");
	char *e;
	unsigned long v;

	/* kernels before 4.1 have no NSpid: the host pid is all there is */
	id->nspids[0] = id->pid, id->nnspids = 1;
	if (!s)
		return 0;
	/* strtoul stops at the next line: it starts with its name */
	for (id->nnspids = 0, s += 7; (v = strtoul(s, &e, 10)), e != s; s = e) {
		if (id->nnspids == AGENT_MAX_NSPIDS || v > UINT32_MAX)
			return -EOVERFLOW;
		id->nspids[id->nnspids++] = v;
	}
	return id->nnspids ? 0 : -EPROTO;
}

int agent_proc_stat(uint32_t pid, struct agent_proc_stat *st)
{
	struct rp_proc_stat ps;
	char path[64];
	int rc;

	snprintf(path, sizeof(path), "/proc/%u/stat", pid);
	rc = rp_proc_stat_read(AT_FDCWD, path, &ps);
	if (rc)
		return rc;
	if (ps.nfields < 22)
		return -EBADMSG;
	/* TASK_COMM_LEN: what comm holds; stat may show a kernel thread's longer */
	snprintf(st->comm, sizeof(st->comm), "%.*s", (int)sizeof(st->comm) - 1, ps.comm);
	st->state = ps.state;
	st->start_time = rp_proc_stat_u64(&ps, 22, 0);
	st->exit_code = (int)rp_proc_stat_u64(&ps, 52, (uint64_t)-1);
	/* PF_EXITING (include/linux/sched.h): do_exit() has begun */
	st->exiting = rp_proc_stat_u64(&ps, 9, 0) & 0x4u;
	return 0;
}

/* TMPDIR's first value, as getenv() finds it */
static void parse_tmpdir(const char *env, ssize_t n, char *out, size_t cap)
{
	struct span rest = { n >= 0 ? env : NULL, n }, e;

	/* unset or empty, TMPDIR means /tmp to the runtimes */
	snprintf(out, cap, "/tmp");
	while (cut(&rest, '\0', &e))
		if (eat(&e, "TMPDIR=")) {
			if (e.n)
				copy_path(out, cap, e);
			return;
		}
}

static void parse_cgroup(const char *text, ssize_t n, struct agent_identity *id)
{
	const char *mnt = agent_cgroup2_mount();
	struct agent_cgroup_choice ch;
	char full[PATH_MAX];
	struct stat st;

	if (n < 0 || agent_cgroup_choose(text, n, &ch))
		return;
	memcpy(id->cgroup_path, ch.path, sizeof(id->cgroup_path));
	id->tags = ch.tags;
	/* "/.." leads out of our cgroup namespace, so out of the mount */
	if (mnt && ch.unified[0] && !strstr(ch.unified, "/..") &&
	    snprintf(full, sizeof(full), "%s%s", mnt, ch.unified) < (int)sizeof(full) &&
	    !stat(full, &st) && S_ISDIR(st.st_mode))
		id->cgroup_id = st.st_ino;
}

int agent_identity_read_dir(int dirfd, uint32_t pid, struct agent_identity *id)
{
	struct rp_proc_stat ps;
	ssize_t n;
	char *buf;
	int rc;

	memset(id, 0, sizeof(*id));
	id->pid = pid;
	n = read_all(dirfd, "status", &buf);
	rc = n < 0 ? gone(n) : parse_nspids(buf, id);
	free(buf);
	if (rc)
		return rc;
	n = read_all(dirfd, "comm", &buf);
	n -= n > 0 && buf[n - 1] == '\n';
	/* kernel threads' names run past TASK_COMM_LEN here: keep its 16 */
	if (n > 0)
		memcpy(id->comm, buf, (size_t)n < sizeof(id->comm) ? (size_t)n : sizeof(id->comm) - 1);
	free(buf);
	if (n < 0)
		return gone(n);
	/* optional parts: unreadable, they stay empty */
	n = read_all(dirfd, "cgroup", &buf);
	parse_cgroup(buf, n, id);
	free(buf);
	n = read_all(dirfd, "environ", &buf);
	parse_tmpdir(buf, n, id->tmpdir, sizeof(id->tmpdir));
	free(buf);
	/* last, so that success says the process outlived the optional reads */
	rc = rp_proc_stat_read(dirfd, "stat", &ps);
	if (rc)
		return rc;
	if (ps.nfields < 22)
		return -EPROTO;
	id->start_time = rp_proc_stat_u64(&ps, 22, 0);
	return 0;
}

int agent_identity_read(uint32_t pid, struct agent_identity *id)
{
	char dir[32];
	int dirfd, rc;

	snprintf(dir, sizeof(dir), "/proc/%u", pid);
	dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0)
		return gone(-errno);
	rc = agent_identity_read_dir(dirfd, pid, id);
	close(dirfd);
	return rc;
}

static char cg2_mount[PATH_MAX];
static pthread_once_t cg2_once = PTHREAD_ONCE_INIT;

static void find_cg2_mount(void)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char *line = NULL, *sep, root[PATH_MAX], *s, *d;
	size_t cap = 0;

	/* id parent major:minor root mount-point options [optional...] - fstype ...;
	 * a mount of a subtree would need our paths rebased: not used */
	while (f && !cg2_mount[0] && getline(&line, &cap, f) > 0)
		if ((sep = strstr(line, " - ")) && !strncmp(sep + 3, "cgroup2 ", 8) &&
		    sscanf(line, "%*s %*s %*s %4095s %4095s", root, cg2_mount) == 2 &&
		    strcmp(root, "/"))
			cg2_mount[0] = '\0';
	/* mountinfo writes ' ', '\t', '\n' and '\\' as \ooo */
	for (s = d = cg2_mount; *s; d++)
		if (s[0] == '\\' && s[1] && s[2] && s[3])
			*d = (s[1] - '0') << 6 | (s[2] - '0') << 3 | (s[3] - '0'), s += 4;
		else
			*d = *s++;
	*d = '\0';
	free(line);
	if (f)
		fclose(f);
}

const char *agent_cgroup2_mount(void)
{
	pthread_once(&cg2_once, find_cg2_mount);
	return cg2_mount[0] ? cg2_mount : NULL;
}

void agent_identity_nspids_str(const struct agent_identity *id, char *buf, size_t len)
{
	size_t at = 0;
	uint32_t i;
	int n;

	for (i = 0; len && i < id->nnspids && i < AGENT_MAX_NSPIDS; i++, at += n)
		if ((n = snprintf(buf + at, len - at, "%s%u", i ? "," : "", id->nspids[i])) < 0 ||
		    (size_t)n >= len - at)
			return (void)(buf[0] = '\0');
	if (len)
		buf[at] = '\0';
}
