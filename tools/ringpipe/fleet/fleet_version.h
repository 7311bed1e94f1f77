/* SPDX-License-Identifier: MIT */
/*
 * A database's fleet schema version (fleet_schema.h, FLEET_SCHEMA_VERSION)
 * as a server shows it, who may use it, and the migration of a version-1
 * database to this version, which `ringpipe fleet init` runs.
 *
 * Readers (fleet check, export, top) read versions 1 and 2: they compare
 * stack ids between events and stacks, never recompute one, and the rest
 * of the tables is the same in both. The agent writes version 2's ids, so
 * it ships only into a version-2 database. A newer version than this
 * ringpipe's is refused by all of them.
 */
#ifndef RINGPIPE_FLEET_VERSION_H
#define RINGPIPE_FLEET_VERSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "fleet/clickhouse.h"
#include "fleet/fleet_schema.h"

/* What a server holds of the fleet schema in one database */
struct fleet_layout {
	unsigned version;	/* 0: no fleet table; 1: tables without the version's view */
	bool cluster;		/* the tables are a cluster's: TABLE_local under TABLE */
	bool has[FLEET_NTABLES];	/* which tables there are (on a cluster, their _local) */
};

/* db's layout on the server c talks to. 0, or <0 with why in err. */
int fleet_layout_read(struct ch_client *c, const char *db, struct fleet_layout *l, char *err,
		      size_t errlen);

/*
 * Can this ringpipe read l (fleet check, export, top)? 0 for versions up to
 * FLEET_SCHEMA_VERSION (and for none: the queries then say which table is
 * missing), or -EPROTONOSUPPORT with why in err.
 */
int fleet_version_readable(const struct fleet_layout *l, const char *db, char *err,
			   size_t errlen);

/*
 * May this ringpipe's agent ship into l? 0 for FLEET_SCHEMA_VERSION, or
 * -EPROTONOSUPPORT with why and what to run in err.
 */
int fleet_version_writable(const struct fleet_layout *l, const char *db, char *err,
			   size_t errlen);

struct fleet_migration {
	uint64_t stack_ids;	/* version-1 stack ids given their version-2 id */
	uint64_t foreign;	/* stack ids no version-1 hash of their frames: left */
	uint64_t statements;	/* INSERT and ALTER statements run */
};

/*
 * Gives the stacks and events of a version-1 database (l, as read just
 * before) version 2's stack ids: each distinct stack of the stacks table
 * gets its version-2 id from its frames (fleet_stack_id_upgrade()); its
 * rows are inserted again under it, the events that name it are updated
 * (ALTER TABLE events UPDATE) and its old rows deleted (ALTER TABLE stacks
 * DELETE), the update before the delete, so that an interrupted migration
 * run again still finds every old id. Waits until this server's mutations
 * are done (on a cluster the other servers finish theirs in the
 * background), saying so on notes when it waits. Records no version: the
 * caller runs fleet_schema_ddl() next, which creates any table missing and
 * the version's view last. A cluster's tables need o->cluster. 0, or <0
 * with why in err.
 */
int fleet_migrate(struct ch_client *c, const struct fleet_ddl_opts *o,
		  const struct fleet_layout *l, FILE *notes, struct fleet_migration *m, char *err,
		  size_t errlen);

#endif /* RINGPIPE_FLEET_VERSION_H */
