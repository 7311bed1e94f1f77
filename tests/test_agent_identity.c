// SPDX-License-Identifier: MIT
/*
 * The agent's process identity and container tags: every cgroup path form of
 * Documentation/agent.md (and what must not pass for one), the choice between
 * the lines of /proc/PID/cgroup, then real kernel objects: kubepods-style
 * cgroups made under the cgroup2 mount (and the v1 hierarchies), processes in
 * nested pid namespaces moved into them, each fact checked against an
 * independent read (the kernel's handle for the cgroup id, SCM_CREDENTIALS
 * for the host pid, our own parse of status and stat).
 */
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <sched.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/statfs.h>

#include "helpers.h"
#include "host/identity.h"

#define ID "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0"
#define ID2 "aaaabbbbccccddddeeeeffff0000111122223333444455556666777788889999"
#define UID "d3b07384-d113-4ec9-8a2b-1e5f0c6a7b89"
#define UID_ "d3b07384_d113_4ec9_8a2b_1e5f0c6a7b89"
#define KSB "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" UID_ ".slice"
_Static_assert(sizeof(ID) == 65 && sizeof(ID2) == 65 && sizeof(UID) == 37, "test ids");

struct tag_case {
	const char *path, *id, *pod, *runtime, *qos;
};

static const struct tag_case tag_cases[] = {
	/* containerd, systemd driver, each QoS class */
	{ KSB "/cri-containerd-" ID ".scope", ID, UID, "containerd", "burstable" },
	{ "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" UID_
	  ".slice/cri-containerd-" ID ".scope", ID, UID, "containerd", "besteffort" },
	{ "/kubepods.slice/kubepods-pod" UID_ ".slice/cri-containerd-" ID ".scope",
	  ID, UID, "containerd", "guaranteed" },
	/* cgroupfs driver: bare id, runtime unknown */
	{ "/kubepods/burstable/pod" UID "/" ID, ID, UID, "", "burstable" },
	{ "/kubepods/besteffort/pod" UID "/" ID, ID, UID, "", "besteffort" },
	{ "/kubepods/pod" UID "/" ID, ID, UID, "", "guaranteed" },
	/* cri-o, both drivers */
	{ "/kubepods/burstable/pod" UID "/crio-" ID, ID, UID, "cri-o", "burstable" },
	{ "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" UID_
	  ".slice/crio-" ID ".scope", ID, UID, "cri-o", "besteffort" },
	/* cri-o's monitor is not the container, but it is in the pod */
	{ "/kubepods/burstable/pod" UID "/crio-conmon-" ID ".scope", "", UID, "", "burstable" },
	/* docker */
	{ "/system.slice/docker-" ID ".scope", ID, "", "docker", "" },
	{ "/docker/" ID, ID, "", "docker", "" },
	{ "/system.slice/docker-" ID ".scope/init", ID, "", "docker", "" },
	/* dockershim under the systemd driver: bare id in the pod slice */
	{ "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" UID_ ".slice/" ID,
	  ID, UID, "", "besteffort" },
	/* cgroup v1 variants: slice:prefix:id, wherever the slice sits */
	{ KSB ":cri-containerd:" ID, ID, UID, "containerd", "burstable" },
	{ "/system.slice/containerd.service/kubepods-burstable-pod" UID_ ".slice:cri-containerd:" ID,
	  ID, UID, "containerd", "burstable" },
	{ "/system.slice/containerd.service/kubepods-pod" UID_ ".slice:cri-containerd:" ID,
	  ID, UID, "containerd", "guaranteed" },
	{ "/kubepods-pod" UID_ ".slice:unknown:" ID, "", UID, "", "guaranteed" },
	/* containerd without Kubernetes, podman */
	{ "/system.slice/cri-containerd-" ID ".scope", ID, "", "containerd", "" },
	{ "/system.slice/nerdctl-" ID ".scope", ID, "", "containerd", "" },
	{ "/default/" ID, ID, "", "", "" },
	{ "/machine.slice/libpod-" ID ".scope", ID, "", "podman", "" },
	/* kind: a node container holding kubelet's tree; the innermost wins,
	 * and the outer /docker/ does not make the pod's container docker's */
	{ "/system.slice/docker-" ID2 ".scope/kubelet.slice/kubelet-kubepods.slice/"
	  "kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod" UID_
	  ".slice/cri-containerd-" ID ".scope", ID, UID, "containerd", "besteffort" },
	{ "/docker/" ID2 "/kubepods/burstable/pod" UID "/" ID, ID, UID, "", "burstable" },
	/* kind in a pod: the inner pod is the process's */
	{ "/kubepods/burstable/pod0a0b0c0d-1111-2222-3333-444455556666/" ID2 "/kubelet.slice/"
	  "kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod"
	  UID_ ".slice/cri-containerd-" ID ".scope", ID, UID, "containerd", "besteffort" },
	/* no container: wrong length, case, suffix; plain hosts */
	{ "/system.slice/docker-0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f.scope",
	  "", "", "", "" },
	{ "/docker/" ID "0", "", "", "", "" },
	{ "/docker/0F1E2D3C4B5A69788796A5B4C3D2E1F00F1E2D3C4B5A69788796A5B4C3D2E1F0", "", "", "", "" },
	{ "/system.slice/docker-" ID ".scopex", "", "", "", "" },
	{ "/system.slice/docker-" ID ".scope.bak", "", "", "", "" },
	{ "/system.slice/cri-containerd-" ID "x.scope", "", "", "", "" },
	{ KSB ":cri-containerd:0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f",
	  "", UID, "", "burstable" },
	{ "/process_api/365e9bc3843c6aa3d66a07603bb78e74", "", "", "", "" },
	{ "/user.slice/user-1000.slice/session-2.scope", "", "", "", "" },
	{ "/user.slice/user-1000.slice/user@1000.service/app.slice/app-org.gnome.Terminal.slice/"
	  "vte-spawn-0f1e2d3c.scope", "", "", "", "" },
	{ "/system.slice/containerd.service", "", "", "", "" },
	{ "/kubepods.slice/kubepods-burstable.slice", "", "", "", "" },
	{ "/kubepods/burstable", "", "", "", "" },
	{ "", "", "", "", "" },
	{ "/", "", "", "", "" },
	{ "//////", "", "", "", "" },
	{ "garbage", "", "", "", "" },
	{ ":::", "", "", "", "" },
	{ "kubepods-pod.slice", "", "", "", "" },
	/* bad pod uids: the container stays, the pod (and its class) does not */
	{ "/kubepods/burstable/pod" "d3b07384-d113-4ec9-8a2b-1e5f0c6a7b8" "/" ID, ID, "", "", "" },
	{ "/kubepods/burstable/pod" UID "0/" ID, ID, "", "", "" },
	{ "/kubepods/pod" UID_ "/" ID, ID, "", "", "" },
	{ "/kubepods/pod" "D3B07384-D113-4EC9-8A2B-1E5F0C6A7B89" "/" ID, ID, "", "", "" },
	{ "/kubepods/pod" "d3b07384-d113-4ec9-8a2b1-e5f0c6a7b89" "/" ID, ID, "", "", "" },
	{ "/kubepods/weird/pod" UID "/" ID, ID, "", "", "" },
	{ "/elsewhere/burstable/pod" UID "/" ID, ID, "", "", "" },
	{ "/kubepods.slice/kubepods-pod" UID ".slice/cri-containerd-" ID ".scope",
	  ID, "", "containerd", "" },
	{ "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" UID_ "x.slice/"
	  "cri-containerd-" ID ".scope", ID, "", "containerd", "" },
	{ "/kubepods.slice/kubepods-burstable.slice/xkubepods-burstable-pod" UID_ ".slice",
	  "", "", "", "" },
};

static void expect_tags(const struct agent_tags *t, const struct tag_case *c, const char *what)
{
	cr_assert_str_eq(t->container_id, c->id, "%s: container_id of %s", what, c->path);
	cr_assert_str_eq(t->pod_uid, c->pod, "%s: pod_uid of %s", what, c->path);
	cr_assert_str_eq(t->runtime, c->runtime, "%s: runtime of %s", what, c->path);
	cr_assert_str_eq(t->qos, c->qos, "%s: qos of %s", what, c->path);
}

Test(agent_identity, tags_of_every_form)
{
	size_t i;

	for (i = 0; i < sizeof(tag_cases) / sizeof(tag_cases[0]); i++) {
		/* an exact heap copy, so that reading past it is an ASan error */
		char *p = strdup(tag_cases[i].path);
		struct agent_tags t;

		memset(&t, 0xa5, sizeof(t));	/* must be cleared, not left over */
		cr_assert_eq(agent_cgroup_tags(p, &t), 0);
		expect_tags(&t, &tag_cases[i], "tags");
		free(p);
	}
}

static char *repeat(const char *unit, size_t times, const char *tail)
{
	size_t u = strlen(unit), n = strlen(tail), i;
	char *s = malloc(u * times + n + 1);

	cr_assert_not_null(s);
	for (i = 0; i < times; i++)
		memcpy(s + i * u, unit, u);
	memcpy(s + u * times, tail, n + 1);
	return s;
}

Test(agent_identity, tags_of_hostile_paths)
{
	static const struct tag_case docker = { "", ID, "", "docker", "" }, none = { "", "", "", "", "" };
	struct agent_tags t;
	char *s;

	s = repeat("/", 1 << 20, "");
	agent_cgroup_tags(s, &t);
	expect_tags(&t, &none, "a megabyte of slashes");
	free(s);
	s = repeat("a", 1 << 20, "");
	agent_cgroup_tags(s, &t);
	expect_tags(&t, &none, "a megabyte-long name");
	free(s);
	/* many "kubepods-" that are not a slice's own: linear, and no pod */
	s = repeat("xkubepods-", 100000, "pod" UID_ ".slice");
	agent_cgroup_tags(s, &t);
	expect_tags(&t, &none, "fake slices");
	free(s);
	s = repeat(":", 100000, ID);
	agent_cgroup_tags(s, &t);
	expect_tags(&t, &none, "colons");
	free(s);
	/* deep, but the leaf is still found */
	s = repeat("/x", 100000, "/docker/" ID);
	agent_cgroup_tags(s, &t);
	expect_tags(&t, &docker, "deep docker");
	free(s);
	s = repeat(ID, 1000, "");
	agent_cgroup_tags(s, &t);
	expect_tags(&t, &none, "a thousand ids in one name");
	free(s);
}

/* An exact heap copy of len bytes, no NUL after: reads past it trip ASan. */
static int choose(const char *text, size_t len, struct agent_cgroup_choice *c)
{
	char *p = malloc(len ? len : 1);
	int rc;

	memcpy(p, text, len);
	memset(c, 0x5a, sizeof(*c));
	rc = agent_cgroup_choose(p, len, c);
	free(p);
	return rc;
}

#define CHOOSE(lit, c) choose(lit, sizeof(lit) - 1, c)

Test(agent_identity, choice_between_cgroup_lines)
{
	struct agent_cgroup_choice c;

	/* the unified path wins when it names the container */
	cr_assert_eq(CHOOSE("1:name=systemd:/docker/" ID2 "\n0::/docker/" ID "\n", &c), 0);
	cr_assert_str_eq(c.path, "/docker/" ID);
	cr_assert_str_eq(c.unified, "/docker/" ID);
	cr_assert_str_eq(c.tags.container_id, ID);
	/* else name=systemd, before other v1 lines, whatever the order */
	cr_assert_eq(CHOOSE("4:memory:/docker/" ID2 "\n1:name=systemd:" KSB "/cri-containerd-" ID
			    ".scope\n0::/user.slice\n", &c), 0);
	cr_assert_str_eq(c.path, KSB "/cri-containerd-" ID ".scope");
	cr_assert_str_eq(c.unified, "/user.slice");
	cr_assert_str_eq(c.tags.pod_uid, UID);
	cr_assert_str_eq(c.tags.qos, "burstable");
	/* name=systemd co-mounted with a controller still counts as it */
	cr_assert_eq(CHOOSE("4:memory:/docker/" ID2 "\n3:cpu,name=systemd:/docker/" ID "\n", &c), 0);
	cr_assert_str_eq(c.tags.container_id, ID);
	/* else the first other v1 line that names one */
	cr_assert_eq(CHOOSE("9:name=systemd:/\n5:pids:/\n4:memory:/docker/" ID2
			    "\n3:cpu:/docker/" ID "\n0::/\n", &c), 0);
	cr_assert_str_eq(c.path, "/docker/" ID2);
	cr_assert_str_eq(c.unified, "/");
	/* none does: the 0:: path, else the name=systemd one */
	cr_assert_eq(CHOOSE("4:memory:/a\n1:name=systemd:/b\n0::/c\n", &c), 0);
	cr_assert_str_eq(c.path, "/c");
	cr_assert_str_eq(c.tags.container_id, "");
	cr_assert_eq(CHOOSE("4:memory:/a\n1:name=systemd:/b\n", &c), 0);
	cr_assert_str_eq(c.path, "/b");
	cr_assert_str_eq(c.unified, "");
	/* nothing usable */
	cr_assert_eq(CHOOSE("4:memory:/a\n", &c), -ENOENT);
	cr_assert_str_eq(c.path, "");
	cr_assert_str_eq(c.tags.container_id, "");
	cr_assert_eq(CHOOSE("", &c), -ENOENT);
	cr_assert_str_eq(c.unified, "");
	/* a pure-v1 host: the id from name=systemd, no unified path */
	cr_assert_eq(CHOOSE("1:name=systemd:/docker/" ID "\n", &c), 0);
	cr_assert_str_eq(c.path, "/docker/" ID);
	cr_assert_str_eq(c.unified, "");
}

Test(agent_identity, choice_from_hostile_cgroup_files)
{
	struct agent_cgroup_choice c;
	unsigned char rnd[4096];
	char *s, *line;
	int i, j;

	/* no newline at the end */
	cr_assert_eq(CHOOSE("0::/docker/" ID, &c), 0);
	cr_assert_str_eq(c.path, "/docker/" ID);
	/* a NUL byte makes a line unusable: the next one is taken */
	cr_assert_eq(CHOOSE("0::/docker/\0" ID "\n1:name=systemd:/docker/" ID2 "\n", &c), 0);
	cr_assert_str_eq(c.unified, "");
	cr_assert_str_eq(c.tags.container_id, ID2);
	/* malformed lines are skipped */
	cr_assert_eq(CHOOSE("\n\n:::\nx:y:/docker/" ID2 "\n0:/docker/" ID2 "\n12::relative/" ID2
			    "\n-1::/docker/" ID2 "\n0::\n:name=systemd:/docker/" ID2 "\n5:pids:/ok\n",
			    &c), -ENOENT);
	cr_assert_eq(CHOOSE("0x::/docker/" ID2 "\n0::/ok\n", &c), 0);
	cr_assert_str_eq(c.path, "/ok");
	/* ':' belongs to the path after the second one */
	cr_assert_eq(CHOOSE("0::" KSB ":cri-containerd:" ID "\n", &c), 0);
	cr_assert_str_eq(c.path, KSB ":cri-containerd:" ID);
	cr_assert_str_eq(c.tags.runtime, "containerd");
	/* too long to hold: the tags still come through, never a cut path */
	s = repeat("/x", 1000, "/docker/" ID);
	line = th_fmt("0::%s\n", s);
	cr_assert_eq(choose(line, strlen(line), &c), 0);
	cr_assert_str_eq(c.path, "");
	cr_assert_str_eq(c.unified, s);
	cr_assert_str_eq(c.tags.container_id, ID);
	free(line);
	free(s);
	s = repeat("/x", 3000, "/docker/" ID);
	line = th_fmt("0::%s\n", s);
	cr_assert_eq(choose(line, strlen(line), &c), 0);
	cr_assert_str_eq(c.path, "");
	cr_assert_str_eq(c.unified, "");
	cr_assert_str_eq(c.tags.container_id, ID);
	free(line);
	free(s);
	/* random bytes drawn from the file's alphabet: nothing but sane output */
	for (i = 0; i < 2000; i++) {
		static const char alpha[] = "0123456789abcdef:/\n\0-_.slicepodkubecri";

		cr_assert_eq(getrandom(rnd, sizeof(rnd), 0), (ssize_t)sizeof(rnd));
		for (j = 0; j < (int)sizeof(rnd); j++)
			rnd[j] = alpha[rnd[j] % (sizeof(alpha) - 1)];
		choose((char *)rnd, rnd[0] % 2 ? sizeof(rnd) : rnd[1] * 16u, &c);
		cr_assert_lt(strlen(c.path), sizeof(c.path));
		cr_assert(strlen(c.tags.container_id) == 0 || strlen(c.tags.container_id) == 64);
	}
}

Test(agent_identity, nspids_as_text)
{
	struct agent_identity id = { .nnspids = 3, .nspids = { 123, 45, 1 } };
	char buf[400];
	int i;

	agent_identity_nspids_str(&id, buf, sizeof(buf));
	cr_assert_str_eq(buf, "123,45,1");
	agent_identity_nspids_str(&id, buf, 9);
	cr_assert_str_eq(buf, "123,45,1");
	/* one byte short: no list rather than a shorter, wrong one */
	agent_identity_nspids_str(&id, buf, 8);
	cr_assert_str_eq(buf, "");
	buf[0] = 'x';
	agent_identity_nspids_str(&id, buf, 0);
	cr_assert_eq(buf[0], 'x');
	id.nnspids = AGENT_MAX_NSPIDS;
	for (i = 0; i < AGENT_MAX_NSPIDS; i++)
		id.nspids[i] = UINT32_MAX;
	agent_identity_nspids_str(&id, buf, sizeof(buf));
	cr_assert_eq(strlen(buf), AGENT_MAX_NSPIDS * 11 - 1);
	cr_assert_eq(agent_identity_inner_pid(&id), UINT32_MAX);
}

/* ---- independent reads of what the kernel says ---------------------- */

static char *slurp(const char *path)
{
	struct bytebuf b = { 0 };

	if (th_read_file(path, &b))
		return NULL;
	return (char *)b.p;
}

static uint64_t stat_start_time(pid_t pid)
{
	char *path = th_fmt("/proc/%d/stat", pid), *s = slurp(path);
	unsigned long long v = 0;

	cr_assert_not_null(s, "%s", path);
	/* fields 3 to 21 skipped, 22 is the start time */
	cr_assert_eq(sscanf(strrchr(s, ')') + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u "
			    "%*u %*u %*d %*d %*d %*d %*d %*d %llu", &v), 1);
	free(s);
	free(path);
	return v;
}

static int status_nspids(pid_t pid, uint32_t *out)
{
	char *path = th_fmt("/proc/%d/status", pid), *s = slurp(path), *line, *tok, *save;
	int n = 0;

	cr_assert_not_null(s, "%s", path);
	line = strstr(s, "\nNSpid:");
	cr_assert_not_null(line);
	line = strtok_r(line + 7, "\n", &save);
	for (tok = strtok_r(line, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save))
		out[n++] = strtoul(tok, NULL, 10);
	free(s);
	free(path);
	return n;
}

static char *comm_of(pid_t pid)
{
	char *path = th_fmt("/proc/%d/comm", pid), *s = slurp(path);

	cr_assert_not_null(s);
	s[strcspn(s, "\n")] = '\0';
	free(path);
	return s;
}

/* The 0:: path of /proc/PID/cgroup, or NULL. */
static char *unified_of(pid_t pid)
{
	char *path = th_fmt("/proc/%d/cgroup", pid), *s = slurp(path), *line, *save, *out = NULL;

	cr_assert_not_null(s, "%s", path);
	for (line = strtok_r(s, "\n", &save); line && !out; line = strtok_r(NULL, "\n", &save))
		if (!strncmp(line, "0::", 3))
			out = strdup(line + 3);
	free(s);
	free(path);
	return out;
}

/* The cgroup's id as the kernel hands it out in a file handle. */
static uint64_t handle_id(const char *dir)
{
	struct {
		struct file_handle h;
		unsigned char room[MAX_HANDLE_SZ];
	} fh = { .h.handle_bytes = MAX_HANDLE_SZ };
	uint64_t v;
	int mount_id;

	cr_assert_eq(name_to_handle_at(AT_FDCWD, dir, &fh.h, &mount_id, 0), 0,
		     "name_to_handle_at(%s): %s", dir, strerror(errno));
	cr_assert_eq(fh.h.handle_bytes, 8, "a kernfs handle is the 8-byte id");
	memcpy(&v, fh.h.f_handle, 8);
	return v;
}

/* Whether pid is listed in dir/cgroup.procs. */
static bool procs_has(const char *dir, pid_t pid)
{
	char *path = th_fmt("%s/cgroup.procs", dir), *s = slurp(path), *tok, *save;
	bool found = false;

	cr_assert_not_null(s, "%s", path);
	for (tok = strtok_r(s, "\n", &save); tok && !found; tok = strtok_r(NULL, "\n", &save))
		found = atoi(tok) == pid;
	free(s);
	free(path);
	return found;
}

/* The identity against our own reads: pid chain, start time, comm. */
static void expect_process(const struct agent_identity *id, pid_t pid, uint32_t depth)
{
	uint32_t chain[64];
	uint32_t n = status_nspids(pid, chain), i;
	char *comm = comm_of(pid);

	cr_assert_eq(id->pid, (uint32_t)pid);
	cr_assert_eq(n, depth + 1, "the kernel lists %u pids for %u namespaces below ours",
		     n, depth);
	cr_assert_eq(id->nnspids, n);
	for (i = 0; i < n; i++)
		cr_assert_eq(id->nspids[i], chain[i], "NSpid[%u]", i);
	cr_assert_eq(id->nspids[0], (uint32_t)pid);
	if (depth)
		cr_assert_eq(agent_identity_inner_pid(id), 1, "pid 1 of its own namespace");
	cr_assert_eq(id->start_time, stat_start_time(pid));
	cr_assert_str_eq(id->comm, comm);
	free(comm);
}

static void expect_cgroup(const struct agent_identity *id, const char *mnt, const char *path)
{
	char *dir = th_fmt("%s%s", mnt, path);
	struct stat st;

	cr_assert_eq(stat(dir, &st), 0, "%s", dir);
	cr_assert_neq(id->cgroup_id, 0);
	cr_assert_eq(id->cgroup_id, (uint64_t)st.st_ino);
	cr_assert_eq(id->cgroup_id, handle_id(dir));
	free(dir);
}

/* ---- processes and cgroups made for a test, and their cleanup -------- */

static struct {
	int lock;
	int nmade, nprocs;
	char made[32][PATH_MAX];	/* directories we created, parents first */
	pid_t top[64], inner[64];
} made = { .lock = -1 };

/* Kills what we started, then removes what we made, deepest first; also
 * Criterion's fini, so that it runs when an assertion has failed. */
static void cleanup(void)
{
	int i, tries;

	for (i = made.nprocs - 1; i >= 0; i--) {
		if (made.inner[i] > 0)
			kill(made.inner[i], SIGKILL);
		kill(made.top[i], SIGKILL);
		waitpid(made.top[i], NULL, 0);
	}
	made.nprocs = 0;
	/* a killed process leaves its cgroup a moment after it is reaped */
	for (i = made.nmade - 1; i >= 0; i--)
		for (tries = 0; rmdir(made.made[i]) && errno == EBUSY && tries < 15000; tries++)
			usleep(2000);
	made.nmade = 0;
	if (made.lock >= 0)
		close(made.lock);
	made.lock = -1;
}

/*
 * Root, a cgroup2 mount, and the lock: the tests run in parallel and share
 * /kubepods.slice and friends, which one must not remove under another.
 */
static const char *need_cgroups(void)
{
	const char *mnt = agent_cgroup2_mount();
	char *lock;

	if (geteuid())
		cr_skip_test("not root: cannot create cgroups or move processes");
	if (!mnt)
		cr_skip_test("no cgroup2 mount in /proc/self/mountinfo");
	lock = th_fmt("%s/ringpipe-test-agent-identity.lock", th_env("TMPDIR", "/tmp"));
	made.lock = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	cr_assert_geq(made.lock, 0, "%s: %s", lock, strerror(errno));
	cr_assert_eq(flock(made.lock, LOCK_EX), 0);
	free(lock);
	return mnt;
}

/*
 * mkdir -p root/path, remembering the levels we created. Levels that were
 * there may be another test program's, which may remove them meanwhile:
 * then it starts again from the top.
 */
static char *cg_make(const char *root, const char *path)
{
	char *dir = th_fmt("%s%s", root, path);
	size_t i, n = strlen(dir);
	int tries = 0, err;

	for (i = strlen(root) + 1; i <= n; i++) {
		if (i < n && dir[i] != '/')
			continue;
		dir[i] = '\0';
		err = mkdir(dir, 0755) ? errno : 0;
		if (!err) {
			cr_assert_lt(made.nmade, 32);
			snprintf(made.made[made.nmade++], PATH_MAX, "%s", dir);
		}
		cr_assert(!err || err == EEXIST || (err == ENOENT && tries < 10), "mkdir %s: %s",
			  dir, strerror(err));
		if (i < n)
			dir[i] = '/';
		if (err == ENOENT)
			i = strlen(root), tries++;
	}
	return dir;
}

static void cg_move(const char *dir, pid_t pid)
{
	char *procs = th_fmt("%s/cgroup.procs", dir), *s = th_fmt("%d\n", pid);

	cr_assert_eq(th_write_file(procs, s, strlen(s)), 0, "moving %d into %s", pid, dir);
	free(procs);
	free(s);
}

static void rand_hex(char *out, size_t n)
{
	unsigned char b[64];
	size_t i;

	cr_assert_leq(n, sizeof(b));
	cr_assert_eq(getrandom(b, n, 0), (ssize_t)n);
	for (i = 0; i < n; i++)
		out[i] = "0123456789abcdef"[b[i] & 15];
	out[n] = '\0';
}

/* A fresh pod uid, with sep between the groups. */
static void rand_uid(char *out, char sep)
{
	rand_hex(out, 36);
	out[8] = out[13] = out[18] = out[23] = sep;
}

/*
 * Runs sleep `depth` pid namespaces below ours: each level unshares a pid
 * namespace and forks the next, then waits for it. The innermost tells us
 * its host pid over a socket with SO_PASSCRED: the kernel translates the
 * sender's pid into our namespace, so no /proc walk is needed. With
 * *probe, it first tries one namespace more and reports the errno in it.
 */
static pid_t spawn(int depth, char *const envp[], int *probe)
{
	char *const argv[] = { "sleep", "30", NULL };
	char cbuf[CMSG_SPACE(sizeof(struct ucred))];
	unsigned char err = 0;
	struct iovec iov = { &err, 1 };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			      .msg_controllen = sizeof(cbuf) };
	struct timeval tv = { .tv_sec = 20 };
	struct ucred cred;
	struct cmsghdr *cm;
	int sv[2], one = 1, i, slot;
	pid_t top, c;
	char *comm, *env, *envs;
	bool done;

	cr_assert_eq(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv), 0);
	cr_assert_eq(setsockopt(sv[0], SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)), 0);
	cr_assert_eq(setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
	cr_assert_lt(made.nprocs, 64);
	top = fork();
	cr_assert_geq(top, 0);
	if (top == 0) {
		/* every level dies with its parent, so killing top ends all */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		for (i = 0; i < depth; i++) {
			if (unshare(CLONE_NEWPID))
				_exit(10);
			c = fork();
			if (c < 0)
				_exit(11);
			if (c > 0) {
				waitpid(c, NULL, 0);
				_exit(0);
			}
			prctl(PR_SET_PDEATHSIG, SIGKILL);
		}
		if (probe && unshare(CLONE_NEWPID))
			err = errno;
		if (send(sv[1], &err, 1, 0) != 1)
			_exit(12);
		execve("/bin/sleep", argv, envp);
		_exit(127);
	}
	slot = made.nprocs++;
	made.top[slot] = top;
	made.inner[slot] = 0;
	close(sv[1]);
	cr_assert_eq(recvmsg(sv[0], &msg, 0), 1, "the innermost process did not report: %s",
		     strerror(errno));
	close(sv[0]);
	cm = CMSG_FIRSTHDR(&msg);
	cr_assert(cm && cm->cmsg_type == SCM_CREDENTIALS);
	memcpy(&cred, CMSG_DATA(cm), sizeof(cred));
	made.inner[slot] = cred.pid;
	if (probe)
		*probe = err;
	/*
	 * Until it is sleep (it execs after telling us), and its exec is done:
	 * comm changes before the new environment is set up, and envp is
	 * never empty here.
	 */
	env = th_fmt("/proc/%d/environ", cred.pid);
	for (i = 0; i < 60000; i++) {	/* a 60 s hang guard */
		comm = comm_of(cred.pid);
		envs = slurp(env);
		done = !strcmp(comm, "sleep") && envs && *envs;
		free(comm);
		free(envs);
		if (done) {
			free(env);
			return cred.pid;
		}
		usleep(1000);
	}
	cr_assert_fail("pid %d never ran sleep", cred.pid);
	return -1;
}

static char *no_env[] = { "PATH=/usr/bin:/bin", NULL };

/* ---- real processes, real cgroups ------------------------------------ */

Test(agent_identity, containerd_pod_in_pid_namespace, .fini = cleanup)
{
	const char *mnt = need_cgroups();
	char uid[37], uid_[37], cid[65], *path, *dir;
	struct agent_identity id;
	pid_t pid;

	rand_uid(uid, '-');
	memcpy(uid_, uid, sizeof(uid));
	uid_[8] = uid_[13] = uid_[18] = uid_[23] = '_';
	rand_hex(cid, 64);
	path = th_fmt("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%s.slice/"
		      "cri-containerd-%s.scope", uid_, cid);
	dir = cg_make(mnt, path);
	pid = spawn(1, no_env, NULL);
	cg_move(dir, pid);
	cr_assert(procs_has(dir, pid), "the kernel does not list %d in %s", pid, dir);

	cr_assert_eq(agent_identity_read(pid, &id), 0);
	expect_process(&id, pid, 1);
	cr_assert_str_eq(id.comm, "sleep");
	cr_assert_str_eq(id.cgroup_path, path);
	expect_cgroup(&id, mnt, path);
	cr_assert_str_eq(id.tags.container_id, cid);
	cr_assert_str_eq(id.tags.pod_uid, uid);
	cr_assert_str_eq(id.tags.runtime, "containerd");
	cr_assert_str_eq(id.tags.qos, "burstable");
	cr_assert_str_eq(id.tmpdir, "/tmp");
	free(path);
	free(dir);
	cleanup();
}

Test(agent_identity, crio_guaranteed_pod_two_namespaces_deep, .fini = cleanup)
{
	const char *mnt = need_cgroups();
	char uid[37], uid_[37], cid[65], *path, *dir, text[400], want[32];
	struct agent_identity id;
	unsigned int mid = 0;
	int used = 0;
	pid_t pid;

	rand_uid(uid, '-');
	memcpy(uid_, uid, sizeof(uid));
	uid_[8] = uid_[13] = uid_[18] = uid_[23] = '_';
	rand_hex(cid, 64);
	path = th_fmt("/kubepods.slice/kubepods-pod%s.slice/crio-%s.scope", uid_, cid);
	dir = cg_make(mnt, path);
	pid = spawn(2, no_env, NULL);
	cg_move(dir, pid);

	cr_assert_eq(agent_identity_read(pid, &id), 0);
	expect_process(&id, pid, 2);
	/* level 1's init forked it: pid 2 there (or later: a ThreadSanitizer
	 * build's init forks a helper first), pid 1 in its own */
	agent_identity_nspids_str(&id, text, sizeof(text));
	cr_assert_eq(sscanf(text, "%*d,%u,1%n", &mid, &used), 1, "nspids %s", text);
	cr_assert(mid >= 2 && used == (int)strlen(text), "nspids %s", text);
	snprintf(want, sizeof(want), "%d,%u,1", pid, mid);
	cr_assert_str_eq(text, want);
	cr_assert_str_eq(id.cgroup_path, path);
	expect_cgroup(&id, mnt, path);
	cr_assert_str_eq(id.tags.container_id, cid);
	cr_assert_str_eq(id.tags.pod_uid, uid);
	cr_assert_str_eq(id.tags.runtime, "cri-o");
	cr_assert_str_eq(id.tags.qos, "guaranteed");
	free(path);
	free(dir);
	cleanup();
}

Test(agent_identity, cgroupfs_pod_without_pid_namespace, .fini = cleanup)
{
	const char *mnt = need_cgroups();
	char uid[37], cid[65], *path, *dir;
	struct agent_identity id;
	pid_t pid;

	rand_uid(uid, '-');
	rand_hex(cid, 64);
	path = th_fmt("/kubepods/besteffort/pod%s/%s", uid, cid);
	dir = cg_make(mnt, path);
	pid = spawn(0, no_env, NULL);
	cg_move(dir, pid);

	cr_assert_eq(agent_identity_read(pid, &id), 0);
	expect_process(&id, pid, 0);
	cr_assert_eq(agent_identity_inner_pid(&id), (uint32_t)pid);
	cr_assert_str_eq(id.cgroup_path, path);
	expect_cgroup(&id, mnt, path);
	cr_assert_str_eq(id.tags.container_id, cid);
	cr_assert_str_eq(id.tags.pod_uid, uid);
	cr_assert_str_eq(id.tags.runtime, "");
	cr_assert_str_eq(id.tags.qos, "besteffort");
	free(path);
	free(dir);
	cleanup();
}

/* The kernel allows 32 levels below the initial namespace: 33 pids. */
Test(agent_identity, deepest_pid_namespace_chain, .fini = cleanup)
{
	struct agent_identity id;
	int probe = 0;
	pid_t pid;

	uint32_t ours[64];
	int depth = AGENT_MAX_NSPIDS - status_nspids(getpid(), ours);

	if (geteuid())
		cr_skip_test("not root: cannot create pid namespaces");
	pid = spawn(depth, no_env, &probe);
	cr_assert_eq(probe, ENOSPC, "one namespace more should not exist: %s", strerror(probe));
	cr_assert_eq(agent_identity_read(pid, &id), 0);
	expect_process(&id, pid, depth);
	cleanup();
}

/* A v1 hierarchy's mount point, if it is mounted where systemd puts it. */
static const char *v1_mount(const char *dir)
{
	struct statfs sf;

	if (statfs(dir, &sf) || sf.f_type != CGROUP_SUPER_MAGIC)
		cr_skip_test("%s is not a cgroup v1 hierarchy", dir);
	return dir;
}

Test(agent_identity, container_named_by_the_systemd_line, .fini = cleanup)
{
	const char *mnt = need_cgroups(), *sysd = v1_mount("/sys/fs/cgroup/systemd");
	char uid[37], uid_[37], cid[65], tag[17], *path, *plain, *dir, *pdir;
	struct agent_identity id;
	pid_t pid;

	rand_uid(uid, '-');
	memcpy(uid_, uid, sizeof(uid));
	uid_[8] = uid_[13] = uid_[18] = uid_[23] = '_';
	rand_hex(cid, 64);
	rand_hex(tag, 16);
	path = th_fmt("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod%s.slice:"
		      "cri-containerd:%s", uid_, cid);
	plain = th_fmt("/ringpipe-test-%s", tag);
	dir = cg_make(sysd, path);
	pdir = cg_make(mnt, plain);
	pid = spawn(1, no_env, NULL);
	cg_move(dir, pid);
	cg_move(pdir, pid);

	cr_assert_eq(agent_identity_read(pid, &id), 0);
	cr_assert_str_eq(id.cgroup_path, path);
	/* the id is the unified cgroup's, wherever the tags came from */
	expect_cgroup(&id, mnt, plain);
	cr_assert_str_eq(id.tags.container_id, cid);
	cr_assert_str_eq(id.tags.pod_uid, uid);
	cr_assert_str_eq(id.tags.runtime, "containerd");
	cr_assert_str_eq(id.tags.qos, "besteffort");
	free(path);
	free(plain);
	free(dir);
	free(pdir);
	cleanup();
}

Test(agent_identity, container_named_by_another_v1_line, .fini = cleanup)
{
	const char *mnt = need_cgroups(), *pids = v1_mount("/sys/fs/cgroup/pids");
	char cid[65], *path, *dir, *unified;
	struct agent_identity id;
	pid_t pid;

	rand_hex(cid, 64);
	path = th_fmt("/docker/%s", cid);
	dir = cg_make(pids, path);
	pid = spawn(0, no_env, NULL);
	cg_move(dir, pid);

	cr_assert_eq(agent_identity_read(pid, &id), 0);
	cr_assert_str_eq(id.cgroup_path, path);
	cr_assert_str_eq(id.tags.container_id, cid);
	cr_assert_str_eq(id.tags.runtime, "docker");
	/* still in our unified cgroup, whose id it reports */
	unified = unified_of(pid);
	expect_cgroup(&id, mnt, unified);
	free(unified);
	free(path);
	free(dir);
	cleanup();
}

/*
 * Read from inside a cgroup namespace, a process outside it has a path
 * with "/..": it is reported, but no id is made up for it. Its cgroup is
 * named so that the path, taken literally under the mount, would land on
 * a real cgroup directory (the root) with the wrong id.
 */
Test(agent_identity, no_id_for_a_cgroup_outside_our_namespace, .fini = cleanup)
{
	const char *mnt = need_cgroups(), *leaf = strrchr(mnt, '/') + 1;
	char tag[17], *reader_path, *target_path, *here, *there, *procs, *want, me[32];
	struct agent_identity id;
	pid_t pid, reader;
	int fds[2], st;

	rand_hex(tag, 16);
	reader_path = th_fmt("/ringpipe-test-%s/reader", tag);
	target_path = th_fmt("/ringpipe-test-%s/%s", tag, leaf);
	here = cg_make(mnt, reader_path);
	there = cg_make(mnt, target_path);
	procs = th_fmt("%s/cgroup.procs", here);
	pid = spawn(0, no_env, NULL);
	cg_move(there, pid);
	cr_assert_eq(pipe(fds), 0);
	reader = fork();
	cr_assert_geq(reader, 0);
	if (reader == 0) {
		/* our own child, so ours to move: it roots its new namespace here */
		snprintf(me, sizeof(me), "%d\n", getpid());
		if (th_write_file(procs, me, strlen(me)) || unshare(CLONE_NEWCGROUP) ||
		    agent_identity_read(pid, &id) || write(fds[1], &id, sizeof(id)) != sizeof(id))
			_exit(1);
		_exit(0);
	}
	cr_assert_eq(waitpid(reader, &st, 0), reader);
	cr_assert(WIFEXITED(st) && !WEXITSTATUS(st), "the reader failed");
	cr_assert_eq(read(fds[0], &id, sizeof(id)), (ssize_t)sizeof(id));
	want = th_fmt("/../%s", leaf);
	cr_assert_str_eq(id.cgroup_path, want);
	cr_assert_eq(id.cgroup_id, 0, "id %llu made up for %s", (unsigned long long)id.cgroup_id,
		     want);
	close(fds[0]);
	close(fds[1]);
	free(want);
	free(procs);
	free(reader_path);
	free(target_path);
	free(here);
	free(there);
	cleanup();
}

Test(agent_identity, tmpdir_from_the_environment, .fini = cleanup)
{
	char *custom[] = { "A=1", "XTMPDIR=/wrong", "TMPDIR_X=/wrong", "TMPDIR",
			   "TMPDIR=/custom/tmp", "TMPDIR=/second", NULL };
	char *empty[] = { "TMPDIR=", NULL };
	char *huge[] = { NULL, NULL };
	struct agent_identity id;
	char *x;
	pid_t pid;

	/* through a pid namespace, as in a container, where we may */
	pid = spawn(geteuid() ? 0 : 1, custom, NULL);
	cr_assert_eq(agent_identity_read(pid, &id), 0);
	cr_assert_str_eq(id.tmpdir, "/custom/tmp");
	pid = spawn(0, empty, NULL);
	cr_assert_eq(agent_identity_read(pid, &id), 0);
	cr_assert_str_eq(id.tmpdir, "/tmp");
	pid = spawn(0, no_env, NULL);
	cr_assert_eq(agent_identity_read(pid, &id), 0);
	cr_assert_str_eq(id.tmpdir, "/tmp");
	/* longer than the field: unknown, not a cut (wrong) directory */
	x = repeat("x", 300, "");
	huge[0] = th_fmt("TMPDIR=/%s", x);
	pid = spawn(0, huge, NULL);
	cr_assert_eq(agent_identity_read(pid, &id), 0);
	cr_assert_str_eq(id.tmpdir, "");
	free(huge[0]);
	free(x);
	cleanup();
}

Test(agent_identity, ourselves)
{
	struct agent_identity id;
	const char *mnt = agent_cgroup2_mount(), *tmp = th_env("TMPDIR", "/tmp");
	char *unified = unified_of(getpid()), *comm = comm_of(getpid());
	uint32_t ours[64];

	cr_assert_eq(agent_identity_read(getpid(), &id), 0);
	expect_process(&id, getpid(), status_nspids(getpid(), ours) - 1);
	cr_assert_str_eq(id.comm, comm);
	cr_assert_str_eq(id.tmpdir, tmp);
	if (mnt && unified)
		expect_cgroup(&id, mnt, unified);
	free(unified);
	free(comm);
}

Test(agent_identity, cgroup2_mount)
{
	const char *mnt = agent_cgroup2_mount();
	struct statfs sf;

	if (!mnt)
		cr_skip_test("no cgroup2 mount here");
	cr_assert_eq(statfs(mnt, &sf), 0);
	cr_assert_eq(sf.f_type, CGROUP2_SUPER_MAGIC, "%s is not cgroup2", mnt);
	cr_assert_eq(agent_cgroup2_mount(), mnt, "looked up once");
}

/* ---- processes that are gone, or going --------------------------------- */

Test(agent_identity, gone_is_esrch)
{
	struct agent_identity id;
	char *s = slurp("/proc/sys/kernel/pid_max"), *dir;
	pid_t pid;
	int dirfd;

	cr_assert_not_null(s);
	cr_assert_eq(agent_identity_read(strtoul(s, NULL, 10) + 1, &id), -ESRCH);
	cr_assert_eq(agent_identity_read(0, &id), -ESRCH);
	cr_assert_eq(agent_identity_read(UINT32_MAX, &id), -ESRCH);
	free(s);
	pid = fork();
	if (pid == 0) {
		pause();
		_exit(0);
	}
	cr_assert_gt(pid, 0);
	dir = th_fmt("/proc/%d", pid);
	dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	cr_assert_geq(dirfd, 0);
	cr_assert_eq(agent_identity_read_dir(dirfd, pid, &id), 0);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	/* the pinned directory answers for that process only, now gone */
	cr_assert_eq(agent_identity_read_dir(dirfd, pid, &id), -ESRCH);
	cr_assert_eq(agent_identity_read(pid, &id), -ESRCH);
	close(dirfd);
	free(dir);
}

Test(agent_identity, zombie_still_has_an_identity)
{
	struct agent_identity id;
	char *path, *s, *comm = comm_of(getpid());
	pid_t pid = fork();
	int i;

	if (pid == 0)
		_exit(0);
	cr_assert_gt(pid, 0);
	path = th_fmt("/proc/%d/stat", pid);
	for (i = 0; i < 60000; i++) {	/* a 60 s hang guard */
		s = slurp(path);
		if (s && strstr(s, ") Z ")) {
			free(s);
			break;
		}
		free(s);
		usleep(1000);
	}
	cr_assert_lt(i, 60000, "the child did not become a zombie in 60 s");
	/* its memory (and so its environment) is gone, the rest is not */
	cr_assert_eq(agent_identity_read(pid, &id), 0);
	cr_assert_str_eq(id.comm, comm);
	cr_assert_str_eq(id.tmpdir, "/tmp");
	cr_assert_eq(id.start_time, stat_start_time(pid));
	waitpid(pid, NULL, 0);
	cr_assert_eq(agent_identity_read(pid, &id), -ESRCH);
	free(path);
	free(comm);
}

/*
 * Processes that exit (and are reaped at once: SIGCHLD ignored) while we
 * read them: every answer is a whole identity or -ESRCH, nothing else.
 */
Test(agent_identity, exits_while_read)
{
	struct agent_identity id;
	int i, rc, ok = 0, gone = 0;
	unsigned char spin[500];
	pid_t pid;

	cr_assert_eq(getrandom(spin, sizeof(spin), 0), (ssize_t)sizeof(spin));
	signal(SIGCHLD, SIG_IGN);
	for (i = 0; i < (int)sizeof(spin); i++) {
		pid = fork();
		cr_assert_geq(pid, 0);
		if (pid == 0) {
			volatile unsigned long n;

			for (n = 0; n < spin[i] * 1000ul; n++)
				;
			_exit(0);
		}
		rc = agent_identity_read(pid, &id);
		cr_assert(rc == 0 || rc == -ESRCH, "rc %d (%s)", rc, strerror(-rc));
		if (rc == 0) {
			cr_assert_eq(id.nspids[0], (uint32_t)pid);
			cr_assert_neq(id.start_time, 0);
			ok++;
		} else {
			gone++;
		}
	}
	signal(SIGCHLD, SIG_DFL);
	cr_log_info("%d read whole, %d gone mid-read", ok, gone);
}
