#!/usr/bin/env bash
# Runs every test: the Criterion unit and integration binaries (the interop
# ones included), then each libFuzzer target briefly over its seed corpus.
# Ends with one line "N passed, N failed, N skipped" counting test cases.
set -uo pipefail
cd "$(dirname "$0")/.."

OUT=${OUT:-.output/default}
OUTPUT=${OUTPUT:-.output}
FUZZ_SECONDS=${FUZZ_SECONDS:-20}
# TESTS="test_block test_ipc": only these binaries, and no fuzzing
TESTS=${TESTS:-}
# OUT and OUTPUT may be relative to the tree or absolute
abs_out=$OUT abs_output=$OUTPUT
[ "${OUT#/}" = "$OUT" ] && abs_out=$PWD/$OUT
[ "${OUTPUT#/}" = "$OUTPUT" ] && abs_output=$PWD/$OUTPUT
export RINGPIPE_TOOL=${RINGPIPE_TOOL:-$abs_out/ringpipe}
export RINGPIPE_DEMO=${RINGPIPE_DEMO:-$abs_out/ringpipe-demo}
export RINGPIPE_DOTNET_TOOLS=${RINGPIPE_DOTNET_TOOLS:-$abs_output/dotnet-tools}
export RINGPIPE_INTEROP_DLL=${RINGPIPE_INTEROP_DLL:-$abs_output/interop/TraceDump.dll}
if [ -z "${RINGPIPE_SHARED:-}" ]; then
	RINGPIPE_SHARED=$(cd .. && pwd)/shared
fi
export RINGPIPE_SHARED
export DOTNET_CLI_TELEMETRY_OPTOUT=1 DOTNET_NOLOGO=1
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/lsan.supp}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# Criterion prints [SKIP] lines (with the reason) only at verbosity 1
export CRITERION_VERBOSITY_LEVEL=${CRITERION_VERBOSITY_LEVEL:-1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan.supp}

passed=0 failed=0 skipped=0
# failures again at the very end: CI logs are often read from the tail
recap=""
logdir=$OUTPUT/test-logs
mkdir -p "$logdir"

# A binary whose log has not grown for STALL_SECONDS (no test started or
# ended) may hang: the stacks of all its processes' threads go to a file
# beside its log, once, so that a hang in CI (which ends at the test's
# Criterion timeout) leaves more than "Timed out". Nothing is decided here.
STALL_SECONDS=${STALL_SECONDS:-300}
descendants() {
	local p
	for p in $(ps -o pid= --ppid "$1" 2>/dev/null); do
		echo "$p"
		descendants "$p"
	done
}
watch_stall() {
	local pid=$1 log=$2 out=$3 age p
	command -v gdb >/dev/null 2>&1 || return 0
	while kill -0 "$pid" 2>/dev/null; do
		sleep 10
		age=$(( $(date +%s) - $(stat -c %Y "$log" 2>/dev/null || date +%s) ))
		[ "$age" -ge "$STALL_SECONDS" ] || continue
		for p in "$pid" $(descendants "$pid"); do
			echo "=== pid $p: $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)"
			timeout 60 gdb -p "$p" -batch -nx -ex 'thread apply all bt' 2>&1 |
				grep -v '^\[New \|^Download\|^warning: '
		done >"$out"
		return 0
	done
}

run_criterion() {
	local bin=$1 name log p f c s tested
	name=$(basename "$bin")
	log=$logdir/$name.log
	printf '  %-28s ' "$name"
	# Block mode's and the hostile suite's tests each keep every CPU busy
	# (parked producers, mappers scribbling as fast as they can): side by
	# side they only take longer, with nothing more tested, so those
	# binaries run their tests one at a time (no assertion depends on time;
	# the TSan mini-runner always runs them in turn)
	local args=()
	# test_placement needs a CPU its test leaves idle: one at a time too
	case "$name:$OUT" in
	test_block:*tsan* | test_hostile:*tsan* | test_placement:*tsan*) ;;
	test_block:* | test_hostile:* | test_placement:*) args=(-j1) ;;
	esac
	rm -f "$logdir/$name.stacks"
	"$bin" "${args[@]}" >"$log" 2>&1 &
	local pid=$! watcher rc
	watch_stall "$pid" "$log" "$logdir/$name.stacks" &
	watcher=$!
	wait "$pid"
	rc=$?
	kill "$watcher" 2>/dev/null
	wait "$watcher" 2>/dev/null
	s=$(grep -c '^\[SKIP\]' "$log")
	if grep -q 'Synthesis: Tested:' "$log"; then
		if grep -q 'TSan mini-runner' "$log"; then
			p=$(grep -c '^\[PASS\]' "$log")
			f=$(grep -c '^\[FAIL\]' "$log")
			c=0
			# a skip is two lines there: its reason, then suite::name
			s=$(grep -c '^\[SKIP\] [A-Za-z0-9_]*::' "$log")
		else
			tested=$(sed -n 's/.*Tested: \([0-9]*\).*/\1/p' "$log" | tail -1)
			p=$(sed -n 's/.*Passing: \([0-9]*\).*/\1/p' "$log" | tail -1)
			f=$(sed -n 's/.*Failing: \([0-9]*\).*/\1/p' "$log" | tail -1)
			c=$(sed -n 's/.*Crashing: \([0-9]*\).*/\1/p' "$log" | tail -1)
			# Criterion leaves skipped tests out of Tested and Passing;
			# they show as [SKIP] lines at verbosity 1 (set above)
			: "$tested"
		fi
	else
		p=0 f=1 c=0
	fi
	[ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && [ "$c" -eq 0 ] && f=1
	passed=$((passed + p)); failed=$((failed + f + c)); skipped=$((skipped + s))
	printf '%3d passed, %d failed, %d skipped\n' "$p" "$((f + c))" "$s"
	if [ "$((f + c))" -ne 0 ]; then
		sed 's/^/      /' "$log" | grep -v '^      \[----\] *$' | tail -60
		[ -s "$logdir/$name.stacks" ] &&
			echo "      (it stalled for ${STALL_SECONDS}s: stacks in $logdir/$name.stacks)"
		recap+="  $name:"$'\n'
		# each failed assertion with its message line, and the verdicts
		recap+=$(awk '/Assertion Failed/ { print; n = 3; next }
			!/^\[----\]/ { n = 0 }
			n > 0 && !/^\[----\] *$/ { print; n--; next }
			/\[FAIL\]|CRASH|[Tt]imed out|signal/' "$log" | head -24 | sed 's/^/    /')$'\n'
	fi
	grep '^\[SKIP\]' "$log" | sed 's/^/      /'
}

echo "unit, integration and interop tests ($OUT):"
for bin in "$OUT"/tests/test_*; do
	[ -x "$bin" ] || continue
	if [ -n "$TESTS" ] && ! [[ " $TESTS " == *" $(basename "$bin") "* ]]; then
		continue
	fi
	run_criterion "$bin"
done

[ -z "$TESTS" ] && echo "fuzzing (${FUZZ_SECONDS}s per target, ASan+UBSan):"
for fz in "$OUTPUT"/fuzz/fuzz_*; do
	[ -x "$fz" ] && [ -z "$TESTS" ] || continue
	name=$(basename "$fz")
	corpus=tests/fuzz/corpus/${name#fuzz_}
	work=$(mktemp -d)
	cp -r "$corpus"/. "$work"/ 2>/dev/null
	printf '  %-28s ' "$name"
	if "$fz" -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=2048 \
		-print_final_stats=1 "$work" >"$logdir/$name.log" 2>&1; then
		runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$logdir/$name.log")
		echo "passed (${runs:-?} inputs, no crash)"
		passed=$((passed + 1))
	else
		echo "FAILED"
		tail -40 "$logdir/$name.log" | sed 's/^/      /'
		recap+="  $name: crashed, see $logdir/$name.log"$'\n'
		failed=$((failed + 1))
	fi
	rm -rf "$work"
done

echo
if [ -n "$recap" ]; then
	echo "failed (logs in $logdir):"
	printf '%s' "$recap"
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
