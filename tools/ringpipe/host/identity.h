/* SPDX-License-Identifier: MIT */
/*
 * Process identity for the host agent: who a host pid is (its pid in every
 * pid namespace, its start time, comm, TMPDIR) and which container and pod
 * it runs in, from its cgroup path (forms: Documentation/agent.md, "Identity
 * and tags"). Everything comes from /proc and the cgroup2
 * mount; nothing here asks a container runtime or the Kubernetes API.
 */
#ifndef RINGPIPE_AGENT_IDENTITY_H
#define RINGPIPE_AGENT_IDENTITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * The kernel nests pid namespaces up to MAX_PID_NS_LEVEL (32) levels below
 * the initial one, so a chain has up to 33 pids: every legal chain fits.
 */
#define AGENT_MAX_NSPIDS 33

/* Tags parsed from a cgroup path alone. */
struct agent_tags {
	char container_id[65];	/* 64 lower-case hex, "" if none */
	char pod_uid[37];	/* 8-4-4-4-12 lower-case hex with '-', "" if none */
	char runtime[16];	/* "containerd", "cri-o", "docker", "podman" or "" */
	char qos[16];		/* "guaranteed", "burstable", "besteffort"; "" outside a pod */
};

/*
 * Pure parsing of one cgroup path: always 0, with the tags filled (all
 * empty when the path is not a container's). The innermost container in
 * the path wins, and so does the innermost pod. A pod uid that is not
 * 8-4-4-4-12 lower-case hex leaves pod_uid and qos empty.
 */
int agent_cgroup_tags(const char *cgroup_path, struct agent_tags *t);

/* What a /proc/PID/cgroup file says, by the rules of agent_cgroup_choose(). */
struct agent_cgroup_choice {
	char path[1024];	/* the chosen path; "" if none, or too long to fit */
	char unified[4096];	/* the 0:: (cgroup v2) path; "" if none, or too long */
	struct agent_tags tags;	/* of the chosen path (also when it was too long) */
};

/*
 * Chooses the path that names the container from the text of a
 * /proc/PID/cgroup (len bytes, not NUL-terminated, any bytes): the 0:: path
 * if it yields a container id, else the name=systemd one if it does, else
 * the first other v1 line that does; failing all, the 0:: path, else the
 * name=systemd one. Malformed lines (and lines with NUL bytes) are skipped.
 * 0, or -ENOENT when no line gives a path.
 */
int agent_cgroup_choose(const char *text, size_t len, struct agent_cgroup_choice *c);

struct agent_identity {
	uint32_t pid;				/* host pid (as given) */
	uint32_t nspids[AGENT_MAX_NSPIDS];	/* NSpid, outermost first: nspids[0] == pid */
	uint32_t nnspids;			/* 1 when not in a child pid namespace */
	uint64_t start_time;			/* /proc/PID/stat field 22: with pid, the reuse-safe key */
	char comm[17];				/* /proc/PID/comm without the newline */
	char cgroup_path[1024];			/* agent_cgroup_choose()'s path */
	uint64_t cgroup_id;			/* the 0:: cgroup's id, as bpf_get_current_cgroup_id() gives it; 0 if unknown */
	struct agent_tags tags;			/* of cgroup_path */
	char tmpdir[256];			/* TMPDIR from /proc/PID/environ, "/tmp" without one,
						 * "" if it is too long to fit */
};

/*
 * Reads a process's identity from /proc (and the cgroup2 mount): 0, -ESRCH
 * when the process is gone, or another negative errno. Unreadable optional
 * parts (the cgroup, the environment) are left empty rather than failing.
 * Every file is read through one /proc/PID directory, so all parts belong
 * to one process even if the pid is reused meanwhile.
 */
int agent_identity_read(uint32_t pid, struct agent_identity *id);

/* What /proc/PID/stat says: comm (between the first '(' and the last ')'),
 * state (field 3), start time (22), exit code (52: a zombie's wait status;
 * -1 on kernels without it). 0, -ESRCH (gone), -EBADMSG. */
struct agent_proc_stat {
	char comm[17];
	char state;
	bool exiting;		/* field 9 has PF_EXITING: it is dying, not a zombie yet */
	uint64_t start_time;
	int exit_code;
};
int agent_proc_stat(uint32_t pid, struct agent_proc_stat *st);

/*
 * The same through a /proc/PID directory the caller opened (O_DIRECTORY):
 * that fd pins the process, so once it has exited this gives -ESRCH, never
 * another process that got the same pid.
 */
int agent_identity_read_dir(int proc_pid_dirfd, uint32_t pid, struct agent_identity *id);

/* The innermost pid (the one the process sees for itself). */
static inline uint32_t agent_identity_inner_pid(const struct agent_identity *id)
{
	return id->nspids[id->nnspids - 1];
}

/*
 * Where cgroup2 is mounted with its root visible (from /proc/self/mountinfo:
 * /sys/fs/cgroup on a unified host, /sys/fs/cgroup/unified on a hybrid one);
 * NULL if nowhere. Looked up once.
 */
const char *agent_cgroup2_mount(void);

/* NSpid as text, "123,45,1" (outermost first), into buf; "" if it does not
 * all fit, since a cut list would read as a shorter, wrong chain. */
void agent_identity_nspids_str(const struct agent_identity *id, char *buf, size_t len);

#endif /* RINGPIPE_AGENT_IDENTITY_H */
