// SPDX-License-Identifier: MIT
/*
 * ringpipe merge: nettrace files, one process each or several (the host
 * agent's, a .NET runtime's, a collect's), into one V6 file in which every
 * event keeps its own process id. The work is retrace_merge_files()
 * (trace/retrace.c); this is its command line: the inputs, a directory
 * standing for the *.nettrace files in it, and the summary.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "trace/agent_report.h"
#include "cmds.h"
#include "trace/retrace.h"
#include "common/tool_opts.h"
#include "common/tool_util.h"

static const char merge_usage[] =
"usage: ringpipe merge -o OUT FILE|DIR...\n"
"\n"
"Merges nettrace files (V5 or V6) into one V6 file OUT, in which every event\n"
"keeps its own process id and the events of all files are in time order: each\n"
"file's timestamps are put on the clock of the file that started first.\n"
"Event types, stacks, threads and sequence numbers are kept per file, and\n"
"OUT's EventsLost is the sum of the files'. A directory stands for every\n"
"*.nettrace file in it, in name order (hidden files, OUT and the agent's own\n"
"merged " AGENT_MERGED_PREFIX "* files excepted). A file\n"
"cut short (its writer died in the middle of a block) gives its whole blocks,\n"
"with a note, and the merge succeeds; a file damaged inside a block gives the\n"
"events before the damage, with a note, and the merge exits 1. The input files\n"
"are never changed.\n"
"Prints one summary line on standard error.\n";

struct merge_inputs {
	char **path;
	size_t n, cap;
};

static int inputs_add(struct merge_inputs *in, const char *path)
{
	char *copy = strdup(path);

	if (!copy || array_grow((void **)&in->path, &in->cap, in->n, sizeof(*in->path), 16)) {
		free(copy);
		return -ENOMEM;
	}
	in->path[in->n++] = copy;
	return 0;
}

static void inputs_free(struct merge_inputs *in)
{
	size_t i;

	for (i = 0; i < in->n; i++)
		free(in->path[i]);
	free(in->path);
}

static int cmp_path(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool is_trace_name(const char *name)
{
	static const char ext[] = ".nettrace";
	size_t n = strlen(name);

	/* hidden: an output in progress (the agent's parts, a merge's own
	 * temporary file) */
	return name[0] != '.' && n > sizeof(ext) - 1 && !strcmp(name + n - (sizeof(ext) - 1), ext);
}

/*
 * Adds the *.nettrace regular files of dir, sorted, leaving out the file
 * out is (when it exists). 0; 1 after saying why.
 */
static int inputs_add_dir(struct merge_inputs *in, const char *dir, const struct stat *out_st)
{
	size_t first = in->n, len = strlen(dir);
	const char *sep = len && dir[len - 1] == '/' ? "" : "/";
	struct dirent *e;
	DIR *d = opendir(dir);
	int rc = 0;

	if (!d)
		return tool_err("merge", "%s: %s", dir, strerror(errno));
	while (!rc && (e = readdir(d))) {
		struct stat sb;
		char *path;

		/* an agent's merged files hold what the others do */
		if (!is_trace_name(e->d_name) ||
		    !strncmp(e->d_name, AGENT_MERGED_PREFIX, strlen(AGENT_MERGED_PREFIX)))
			continue;
		if (asprintf(&path, "%s%s%s", dir, sep, e->d_name) < 0) {
			rc = tool_err("merge", "%s", strerror(ENOMEM));
			break;
		}
		if (stat(path, &sb) || !S_ISREG(sb.st_mode) ||
		    (out_st && sb.st_dev == out_st->st_dev && sb.st_ino == out_st->st_ino)) {
			free(path);
			continue;
		}
		if (!sb.st_size)
			/* a file whose writer was killed before its first
			 * byte (named, never begun): nothing to merge */
			fprintf(stderr, "ringpipe merge: %s: empty, left out\n", path);
		else if (inputs_add(in, path))
			rc = tool_err("merge", "%s", strerror(ENOMEM));
		free(path);
	}
	closedir(d);
	if (rc)
		return rc;
	if (in->n == first)
		return tool_err("merge", "%s: no *.nettrace file in it", dir);
	qsort(in->path + first, in->n - first, sizeof(*in->path), cmp_path);
	return 0;
}

/* Prints note, one "ringpipe merge: " line per line of it. */
static void print_note(const char *note)
{
	const char *l, *nl;

	for (l = note; *l; l = nl ? nl + 1 : l + strlen(l)) {
		nl = strchr(l, '\n');
		fprintf(stderr, "ringpipe merge: %.*s\n", (int)(nl ? (size_t)(nl - l) : strlen(l)), l);
	}
}

struct merge_cfg {
	const char *out;
};

static const struct tool_opt merge_opts[] = {
	TOOL_STRING(NULL, 'o', "OUT", struct merge_cfg, out, "the merged file (required)"),
	TOOL_OPTS_END
};

static const struct tool_cmd merge_cmd = { .name = "merge", .usage = merge_usage,
					   .opts = merge_opts, .max_args = -1 };

int cmd_merge(int argc, char **argv)
{
	struct merge_inputs in = { 0 };
	struct retrace_stats st;
	struct stat out_st, sb;
	struct merge_cfg c = { 0 };
	struct tool_args rest;
	const char *out;
	bool have_out_st;
	char note[8192];
	int i, rc = tool_opts_parse(&merge_cmd, argc, argv, &c, &rest), err;

	if (rc != TOOL_OPTS_RUN)
		return rc;
	out = c.out;
	if (!out)
		return tool_err("merge", "-o OUT is required (see --help)"), 2;
	if (!rest.argc)
		return tool_err("merge", "no input files (see --help)"), 2;
	rc = 0;
	/* OUT as it is now: left out of a directory that holds it */
	have_out_st = !stat(out, &out_st);
	for (i = 0; i < rest.argc && !rc; i++) {
		if (!stat(rest.argv[i], &sb) && S_ISDIR(sb.st_mode))
			rc = inputs_add_dir(&in, rest.argv[i], have_out_st ? &out_st : NULL);
		else if (inputs_add(&in, rest.argv[i]))
			rc = tool_err("merge", "%s", strerror(ENOMEM));
	}
	if (!rc) {
		struct tool_progress pg;

		tool_progress_init(&pg, "merge");
		err = retrace_merge_files((const char *const *)in.path, in.n, out, &st, note,
					  sizeof(note), &pg);
		tool_progress_end(&pg);
		if (err) {
			rc = tool_err("merge", "%s", note);
		} else {
			print_note(note);
			/* EventsLost as a reader of OUT counts it: what the files
			 * lost, and events the writer could not take (counted,
			 * never silent) */
			fprintf(stderr, "ringpipe merge: %s: %zu files, %" PRIu64 " events, %u "
				"processes, EventsLost %" PRId64, out, in.n, st.events, st.processes,
				st.lost + (int64_t)st.skipped);
			if (st.skipped)
				fprintf(stderr, " (of which %" PRIu64 " events the V6 format cannot "
					"hold, left out)", st.skipped);
			fputc('\n', stderr);
			/* a stream cut short was repaired to its whole blocks
			 * before reading, so a read that still stops early met
			 * damage inside a block: OUT holds what came before it,
			 * and the exit status says the merge is not whole */
			if (st.read_err)
				rc = tool_err("merge", "an input is corrupt (its line above): %s "
					      "holds the events before the damage only", out);
		}
	}
	inputs_free(&in);
	return rc;
}
