/* SPDX-License-Identifier: MIT */
/*
 * ringpipe report DIR: the summary of a `ringpipe agent` output directory.
 *
 * Every COMM_PID_STARTTIME[.N].nettrace and dotnet-COMM-PID-STARTTIME[-N]
 * .nettrace in DIR is read with the nettrace reader (events, EventsLost);
 * every ringpipe-agent_PID_DATE.nettrace (one per agent run) gives the tags:
 * its Ringpipe-Agent/Process events name each process's container and pod,
 * ProcessEnd how it ended, Container the container's runtime and QoS. A
 * process trace is matched to its Process event by the file the event
 * names, else by (Pid, StartTime) from the file name. Hidden files (the
 * agent's .dotnet-*.part streams still being received) are left out.
 */
#ifndef RINGPIPE_TOOL_AGENT_REPORT_H
#define RINGPIPE_TOOL_AGENT_REPORT_H

#include <stdbool.h>

/* The agent's merged files (--merge): all of a period's traces in one,
 * which report and merge leave out of a directory they read, since every
 * event in them is in another file there too */
#define AGENT_MERGED_PREFIX "ringpipe-host_"

/* Whether path names a directory (what `report` then summarizes). */
bool agent_report_is_dir(const char *path);

/*
 * Prints the summary of dir to stdout, as text or one JSON object
 * {"processes":[...],"containers":[...],"totals":{...}}. Returns the exit
 * status: 0, or 1 when the directory cannot be listed, holds no trace, or
 * a trace in it could not be read whole (after printing everything else).
 */
int agent_report_dir(const char *dir, bool json);

#endif
