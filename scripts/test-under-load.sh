#!/usr/bin/env bash
# `make test-under-load`: the suite `make test` runs (scripts/run-tests.sh,
# with the same environment and TESTS= selection), while CPU hogs keep every
# CPU busy: the tests judge outcomes, never how fast, so they must pass on a
# loaded host too (invariant 10, Documentation/design.md).
#
#   RUNS=3 scripts/test-under-load.sh    the suite three times in a row
#   HOGS=8                               hogs (default: twice the CPUs)
#
# The hogs are `stress-ng --cpu HOGS` where stress-ng is installed (make deps
# installs it), else one shell busy loop per hog; they run in a process group
# of their own and are stopped whatever happens (an error, Ctrl-C). Ends with
# one line per run and exits non-zero if any run failed.
set -uo pipefail
cd "$(dirname "$0")/.."

runs=${RUNS:-1}
hogs=${HOGS:-$((2 * $(nproc)))}
case $runs$hogs in
*[!0-9]*) echo "test-under-load: RUNS and HOGS must be numbers" >&2; exit 2 ;;
esac

hog_pgid=
stop_hogs() {
	[ -n "$hog_pgid" ] || return 0
	kill -TERM -- "-$hog_pgid" 2>/dev/null
	# a busy loop ignores nothing, stress-ng stops its workers on TERM;
	# whatever is left after a second is killed
	for _ in 1 2 3 4 5 6 7 8 9 10; do
		kill -0 -- "-$hog_pgid" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL -- "-$hog_pgid" 2>/dev/null
	hog_pgid=
}
trap stop_hogs EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# setsid: the hogs in a group of their own, which stop_hogs() ends whole
if command -v stress-ng >/dev/null 2>&1; then
	how="stress-ng --cpu $hogs"
	setsid stress-ng --cpu "$hogs" --quiet </dev/null >/dev/null 2>&1 &
else
	how="$hogs busy loops (stress-ng is not installed: make deps)"
	setsid bash -c 'for _ in $(seq "$1"); do (while :; do :; done) & done; wait' \
		hogs "$hogs" </dev/null >/dev/null 2>&1 &
fi
hog_pgid=$!
sleep 1
if ! kill -0 -- "-$hog_pgid" 2>/dev/null; then
	echo "test-under-load: the CPU hogs did not start ($how)" >&2
	exit 1
fi

summary=() failed=0
for r in $(seq "$runs"); do
	echo "test-under-load: run $r of $runs beside $how on $(nproc) CPUs (load average" \
	     "$(cut -d' ' -f1-3 /proc/loadavg))"
	if scripts/run-tests.sh; then
		summary+=("run $r: passed")
	else
		failed=$((failed + 1))
		# the next run writes the same logs: keep this one's aside
		keep="${OUTPUT:-.output}/test-logs.run$r"
		rm -rf "$keep"
		cp -r "${OUTPUT:-.output}/test-logs" "$keep"
		summary+=("run $r: FAILED (its logs: $keep/)")
	fi
done
stop_hogs
echo
printf 'test-under-load: %s\n' "${summary[@]}"
echo "test-under-load: $((runs - failed)) of $runs runs passed beside $how"
[ "$failed" -eq 0 ]
