// SPDX-License-Identifier: MIT
/*
 * user_events publication (see user_events.h). Cold paths (registration)
 * take rp_control_lock through their caller; the write is one writev().
 *
 * ABI facts used (kernel Documentation/trace/user_events.rst): registration
 * is the DIAG_IOCSREG ioctl on an open user_events_data with a packed
 * struct user_reg (size, enable_bit, enable_size 4 or 8, flags, enable_addr,
 * name_args, and write_index returned); the kernel keeps the bit at
 * enable_addr in this process set while anything (ftrace, perf, eBPF)
 * enables the tracepoint; a write is writev() on the same fd whose first 4
 * bytes are the write_index. A "__rel_loc" field is a u32 holding
 * (size << 16 | offset), offset counted from the end of that u32.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "session.h"
#include "user_events.h"

/* The kernel's registration record (packed, 28 bytes). Our own definition:
 * Debian 12's linux-libc-dev predates <linux/user_events.h>. */
struct ue_reg {
	uint32_t size;
	uint8_t enable_bit;
	uint8_t enable_size;
	uint16_t flags;
	uint64_t enable_addr;
	uint64_t name_args;
	uint32_t write_index;
} __attribute__((packed));

_Static_assert(sizeof(struct ue_reg) == 28, "struct user_reg is 28 bytes");

/* The ABI encodes a pointer type in the ioctl number, hence the '*'. */
#define UE_IOC_REG _IOWR('*', 0, struct ue_reg *)

#define UE_NAME_MAX 160
#define UE_MAX_IOV 64

struct rp_ue_event {
	uint32_t write_index;
	char name[UE_NAME_MAX];
};

static int ue_fd = -1;
static int ue_state;		/* 0 untried, 1 open, -errno: unavailable */
static uint64_t ue_write_errors;	/* atomic; writes the kernel refused */

static const char *const tracefs_dirs[] = { "/sys/kernel/tracing", "/sys/kernel/debug/tracing" };

static int check_one(const char *dir, int *fd, char *why, size_t n)
{
	char path[512];
	int f;

	snprintf(path, sizeof(path), "%s/user_events_data", dir);
	f = open(path, O_RDWR | O_CLOEXEC);
	if (f >= 0) {
		if (fd)
			*fd = f;
		else
			close(f);
		return 0;
	}
	if (errno == ENOENT) {
		char readme[512];

		/* tracefs mounted (it always has README) but no user_events
		 * file: the kernel was built without it */
		snprintf(readme, sizeof(readme), "%s/README", dir);
		if (access(readme, F_OK) == 0)
			snprintf(why, n, "user_events: not available in this kernel "
				 "(CONFIG_USER_EVENTS is off: %s missing)", path);
		else
			snprintf(why, n, "user_events: tracefs is not mounted at %s "
				 "(mount -t tracefs nodev %s)", dir, dir);
		return -ENOENT;
	}
	snprintf(why, n, "user_events: cannot open %s: %s", path, strerror(errno));
	return -errno;
}

static int check_open(const char *tracefs, int *fd, char *why, size_t n)
{
	char first[256] = "";
	int rc, first_rc = -ENOENT;
	size_t i;

	if (tracefs)
		return check_one(tracefs, fd, why, n);
	/* the standard mount first; debugfs's copy where only that exists */
	for (i = 0; i < sizeof(tracefs_dirs) / sizeof(tracefs_dirs[0]); i++) {
		rc = check_one(tracefs_dirs[i], fd, why, n);
		if (!rc)
			return 0;
		if (i == 0) {
			snprintf(first, sizeof(first), "%s", why);
			first_rc = rc;
		}
	}
	/* the reason about the standard location is the one worth reading */
	snprintf(why, n, "%s", first);
	return first_rc;
}

int rp_ue_check(const char *tracefs, char *why, size_t n)
{
	return check_open(tracefs, NULL, why, n);
}

bool rp_ue_wanted(const char *provider)
{
	const char *v = getenv("RINGPIPE_USER_EVENTS"), *p;
	size_t len = strlen(provider);

	if (!v || !*v || !strcmp(v, "0"))
		return false;
	if (!strcmp(v, "1") || !strcmp(v, "*"))
		return true;
	for (p = v; *p;) {
		const char *end = strchr(p, ',');
		size_t l = end ? (size_t)(end - p) : strlen(p);

		if (l == len && !strncmp(p, provider, len))
			return true;
		if (!end)
			break;
		p = end + 1;
	}
	return false;
}

/* Called with rp_control_lock held: opens the file once, and reserves the
 * session slot whose bit the kernel will flip. */
static int ue_open_locked(void)
{
	char why[384];
	int fd = -1, rc;

	if (ue_state)
		return ue_state > 0 ? 0 : ue_state;
	rc = check_open(NULL, &fd, why, sizeof(why));
	if (!rc && rp_load_relaxed(&rp_slots[RP_UE_SLOT].state) != SLOT_FREE) {
		/* slot allocation happens under the same lock: no race */
		snprintf(why, sizeof(why), "user_events: session slot %d is in use; define the "
			 "events of user_events providers before the 64th session starts",
			 RP_UE_SLOT);
		close(fd);
		rc = -EBUSY;
	}
	if (rc) {
		ue_state = rc;
		rp_set_error("%s", why);
		/* once per process: a provider that asked for user_events
		 * deserves to know, but every event repeating it would be noise */
		fprintf(stderr, "ringpipe: %s\n", why);
		return rc;
	}
	rp_store_relaxed(&rp_slots[RP_UE_SLOT].state, SLOT_RESERVED);
	ue_fd = fd;
	ue_state = 1;
	return 0;
}

static void sanitize(char *dst, const char *src)
{
	for (; *src; src++, dst++)
		*dst = (*src >= 'a' && *src <= 'z') || (*src >= 'A' && *src <= 'Z') ||
		       (*src >= '0' && *src <= '9') ? *src : '_';
	*dst = 0;
}

int rp_ue_register(struct rp_event *ev)
{
	struct rp_ue_event *ue;
	struct ue_reg reg;
	char prov[48], name[48], *args = NULL;
	int rc = ue_open_locked();

	if (rc)
		return rc;
	ue = calloc(1, sizeof(*ue));
	if (!ue)
		return -ENOMEM;
	/* long provider or event names are cut: the pid and the id keep the
	 * result unique within and across processes */
	snprintf(prov, sizeof(prov), "%s", ev->provider->name);
	snprintf(name, sizeof(name), "%s", ev->desc.name[0] ? ev->desc.name : "event");
	sanitize(prov, prov);
	sanitize(name, name);
	snprintf(ue->name, sizeof(ue->name), "ringpipe_%d_%s_%s_%u", (int)getpid(), prov, name,
		 ev->desc.event_id);
	/* the payload as the ring records it (nettrace field encoding), one
	 * dynamic byte array: decoders take the schema from the event's
	 * provider and id, as in the nettrace metadata */
	if (asprintf(&args, "%s __rel_loc u8[] payload", ue->name) < 0) {
		free(ue);
		return -ENOMEM;
	}
	memset(&reg, 0, sizeof(reg));
	reg.size = sizeof(reg);
	reg.enable_bit = RP_UE_SLOT;
	reg.enable_size = sizeof(ev->hot.sessions);
	reg.enable_addr = (uint64_t)(uintptr_t)&ev->hot.sessions;
	reg.name_args = (uint64_t)(uintptr_t)args;
	if (ioctl(ue_fd, UE_IOC_REG, &reg) < 0) {
		rc = -errno;
		rp_set_error("user_events: registering '%s' failed: %s", args, strerror(errno));
		free(args);
		free(ue);
		return rc;
	}
	free(args);
	ue->write_index = reg.write_index;
	ev->ue = ue;
	return 0;
}

const char *rp_ue_name(const struct rp_event *ev)
{
	return ev->ue ? ev->ue->name : NULL;
}

int rp_ue_write(const struct rp_event *ev, const struct iovec *iov, int iovcnt, size_t len)
{
	struct iovec v[UE_MAX_IOV + 2];
	uint32_t rel_loc = (uint32_t)len << 16;	/* the payload follows right after */
	const struct rp_ue_event *ue = ev->ue;
	int k;

	/* slot 63 is reserved once anything is registered, so bit 63 comes
	 * from the kernel and the event has a registration; be safe anyway */
	if (!ue || iovcnt > UE_MAX_IOV)
		return -EINVAL;
	v[0] = (struct iovec){ (void *)&ue->write_index, sizeof(ue->write_index) };
	v[1] = (struct iovec){ &rel_loc, sizeof(rel_loc) };
	for (k = 0; k < iovcnt; k++)
		v[k + 2] = iov[k];
	if (writev(ue_fd, v, iovcnt + 2) < 0) {
		rp_add_relaxed(&ue_write_errors, 1);
		return -errno;
	}
	return 0;
}
