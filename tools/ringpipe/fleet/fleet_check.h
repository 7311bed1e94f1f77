/* SPDX-License-Identifier: MIT */
/*
 * `ringpipe fleet check`: is everything the agents sent accounted for?
 * For every (host, agent run, stream): batch numbers run 1, 2, ... without
 * a gap (a missing number is excused only by loss rows of that batch),
 * each batch has exactly one manifest row, and the events and losses
 * tables hold exactly the rows the manifest says for it.
 */
#ifndef RINGPIPE_FLEET_CHECK_H
#define RINGPIPE_FLEET_CHECK_H

#include <stdio.h>

#include "fleet/clickhouse.h"

struct fleet_check_totals {
	unsigned long long runs, streams, batches, events, lost, problems;
};

/*
 * Checks the batches of host (NULL: every host) in c's database, printing
 * a summary per host and agent run and every problem in words to out.
 * 0 with *t filled (t->problems == 0: all accounted for), or a negative
 * errno with why in err (the server failed).
 */
int fleet_check(struct ch_client *c, const char *host, FILE *out, struct fleet_check_totals *t,
		char *err, size_t errlen);

#endif /* RINGPIPE_FLEET_CHECK_H */
