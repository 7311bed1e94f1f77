#!/usr/bin/env bash
# The LTTng-UST contender of `make bench` (scripts/run-bench.sh runs it).
#
#   scripts/bench-lttng.sh LTTNG_BENCH QUICK(0|1) WORKDIR [--sweep [REPS]]
#
# Starts its own lttng-sessiond (user space only, --no-kernel), runs
# bench/lttng_bench under recording sessions it creates, kills the daemon
# (by its pid) on the way out, and prints "key value" lines. When LTTng
# cannot run here it prints "skip REASON" and nothing else.
#
#   producer rows  a per-CPU, per-user UST channel in discard mode, written
#                  to disk by the consumer daemon, 8 x 16 MiB sub-buffers per
#                  CPU (128 MiB, as ringpipe's 256 MiB session on 2 CPUs;
#                  8 x 4 MiB with --quick) so that it does not discard, gone
#                  through once before timing; 1 and 2 pinned writer threads.
#   disabled rows  the daemon running, no session enabling the tracepoint.
#   end to end     1,000,000 events (2 writers) into 4 x 128 KiB sub-buffers
#                  per CPU (1 MiB on 2 CPUs): discard mode, then
#                  --blocking-timeout=inf with LTTNG_UST_ALLOW_BLOCKING=1 in
#                  the writer's environment (LTTng's blocking mode); time from
#                  the first write until `lttng stop` returned (it waits
#                  until the consumer daemon wrote everything out); loss =
#                  the channel's "Discarded events" / events written.
#   --sweep        instead of all of the above, the thread sweep of "Block at
#                  production shape" (bench_block --sweep is ringpipe's side):
#                  T = 1, 2, 8, 32, 128 unpinned writer threads (`lttng_bench
#                  sweep`) write 1,000,000 events in all into 4 sub-buffers
#                  per CPU adding up to 1 MiB and to 16 MiB on all CPUs, discard
#                  mode and blocking mode (as end to end), timed and counted
#                  as end to end, plus the writer process's context switches
#                  per 1000 events. REPS repetitions (default 5, 3 with QUICK=1)
#                  of every case in turn; medians ("sweep.MODE.BUF.tT.KEY").
set -uo pipefail
BIN=$1
QUICK=$2
WORK=$3
SWEEP=0 SWEEP_REPS=5
[ "$QUICK" = 1 ] && SWEEP_REPS=3
if [ "${4:-}" = --sweep ]; then
	SWEEP=1
	SWEEP_REPS=${5:-$SWEEP_REPS}
fi

# warm: events per thread before the timed repetitions, enough to go once
# through the channel's pages (8 x SUB per CPU; ~44 bytes an event)
reps=7 e2e_reps=5 n=1000000 ndis=20000000 sub=16M warm=4000000
if [ "$QUICK" = 1 ]; then reps=3 e2e_reps=2 n=500000 ndis=10000000 sub=4M warm=1000000; fi

. "$(dirname "$0")/bench-common.sh"

command -v lttng >/dev/null 2>&1 && command -v lttng-sessiond >/dev/null 2>&1 ||
	skip "lttng-tools not installed (make deps)"
[ -x "$BIN" ] || skip "lttng_bench not built (liblttng-ust-dev not installed: make deps)"

mkdir -p "$WORK"
export LTTNG_HOME=$WORK
# As root, lttng-sessiond serves the whole machine from /var/run/lttng,
# whatever LTTNG_HOME says (only trace output follows LTTNG_HOME): never
# share a daemon someone else started, nor kill it.
if lttng list >/dev/null 2>&1; then
	skip "another lttng-sessiond already answers (as root its socket is machine-wide: /var/run/lttng)"
fi

sessiond=
cleanup() {
	if [ -n "$sessiond" ]; then
		lttng destroy --all >/dev/null 2>&1
		kill "$sessiond" 2>/dev/null
		wait "$sessiond" 2>/dev/null
	fi
}
trap cleanup EXIT
lttng-sessiond --no-kernel >"$WORK/sessiond.log" 2>&1 &
sessiond=$!
for _ in $(seq 50); do
	lttng list >/dev/null 2>&1 && break
	kill -0 "$sessiond" 2>/dev/null || skip "lttng-sessiond exited: $(tail -1 "$WORK/sessiond.log")"
	sleep 0.1
done
lttng list >/dev/null 2>&1 || skip "lttng-sessiond did not answer within 5 s"

rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }
daemons_rss_kb() {
	local sum=0 p
	for p in $sessiond $(pgrep -P "$sessiond"); do
		sum=$((sum + $(rss_kb "$p")))
	done
	echo "$sum"
}
# The channel's discarded events. LTTng-UST 2.13.9 here sometimes reports
# the count with bit 63 set (2^63 + n); n alone is the count (the bytes on
# disk per delivered event agree with runs that report it plain), so the bit
# is cleared, in two exact halves (awk's numbers are doubles).
discarded() {
	lttng list "$1" | awk '/Discarded events:/ {
		v = $3
		if (length(v) == 19 && v >= "9223372036854775808")
			v = (substr(v, 1, 10) - 9223372036) * 1e9 + (substr(v, 11) - 854775808)
		s += v
	} END { printf "%.0f\n", s }'
}

# session NAME SUBBUF NUM [enable-channel options...]
session() {
	local name=$1 sub=$2 num=$3
	shift 3
	lttng create "$name" --output="$WORK/$name" >/dev/null &&
	lttng enable-channel --userspace --buffers-uid --subbuf-size="$sub" --num-subbuf="$num" \
		--discard "$@" c0 -s "$name" >/dev/null &&
	lttng enable-event --userspace --channel=c0 -s "$name" 'ringpipe_bench:small' >/dev/null &&
	lttng start "$name" >/dev/null
}
destroy() { lttng destroy "$1" >/dev/null 2>&1; rm -rf "${WORK:?}/$1"; }

echo "version $(lttng --version | grep -oE '[0-9]+\.[0-9]+\.[0-9]+' | head -1)"

# ---- the thread sweep (--sweep): nothing else
if [ $SWEEP = 1 ]; then
	ncpu=$(nproc)
	: >"$WORK/sweep.txt"
	for k in $(seq "$SWEEP_REPS"); do
		for buf in 1m 16m; do
			bytes=$((1 << 20))
			[ $buf = 16m ] && bytes=$((16 << 20))
			sb=$((bytes / ncpu / 4))
			for t in 1 2 8 32 128; do
				for mode in block drop; do
					opts=() env=()
					if [ $mode = block ]; then
						opts=(--blocking-timeout=inf)
						env=(LTTNG_UST_ALLOW_BLOCKING=1)
					fi
					session sw "$sb" 4 "${opts[@]}" ||
						skip "could not create the $buf session"
					out=$(env "${env[@]}" "$BIN" sweep "$t" 1000000 "lttng stop sw >/dev/null") ||
						skip "lttng_bench sweep failed"
					[ "$(val stop_rc <<<"$out")" = 0 ] || skip "lttng stop failed"
					[ "$(val enabled <<<"$out")" = 1 ] || skip "the tracepoint was not enabled"
					lost=$(discarded sw)
					awk -v key="sweep.$mode.$buf.t$t" -v a="$(val attempted <<<"$out")" \
					    -v s="$(val secs <<<"$out")" -v w="$(val write_secs <<<"$out")" \
					    -v l="$lost" -v cs="$(val nvcsw <<<"$out")" \
					    -v ics="$(val nivcsw <<<"$out")" 'BEGIN {
						if (l > a) l = a
						printf "%s evs %.0f\n%s dlv %.0f\n%s loss %.4f\n", key, a / s, key, (a - l) / s, key, 100 * l / a
						printf "%s cs %.3f\n%s ics %.3f\n%s write_ms %.1f\n", key, 1000 * cs / a, key, 1000 * ics / a, key, 1000 * w
					}' >>"$WORK/sweep.txt"
					destroy sw
				done
			done
		done
	done
	echo "sweep.total 1000000"
	echo "sweep.reps $SWEEP_REPS"
	awk '{ print $1 }' "$WORK/sweep.txt" | awk '!seen[$0]++' | while read -r key; do
		for m in evs dlv loss cs ics write_ms; do
			echo "$key.$m $(awk -v k="$key" -v m=$m '$1 == k && $2 == m { print $3 }' "$WORK/sweep.txt" | median)"
		done
		echo "$key.loss_max $(awk -v k="$key" '$1 == k && $2 == "loss" { print $3 }' "$WORK/sweep.txt" | sort -g | tail -1)"
	done
	echo "ok 1"
	exit 0
fi
echo "sessiond_rss_kb $(daemons_rss_kb)"

# ---- producer cost, enabled and disabled
for t in 1 2; do
	session prod "$sub" 8 || skip "could not create a recording session (see $WORK/sessiond.log)"
	out=$("$BIN" producer "$t" "$n" "$reps" "$warm") || skip "lttng_bench producer failed"
	[ "$(val enabled <<<"$out")" = 1 ] || skip "the tracepoint was not enabled by the session"
	lttng stop prod >/dev/null
	echo "en$t $(val ns_med <<<"$out")"
	echo "en${t}_min $(val ns_min <<<"$out")"
	echo "en${t}_max $(val ns_max <<<"$out")"
	echo "en${t}_discarded $(discarded prod)"
	destroy prod
done
for t in 1 2; do
	out=$("$BIN" producer "$t" "$ndis" "$reps") || skip "lttng_bench producer failed"
	[ "$(val enabled <<<"$out")" = 0 ] || skip "the tracepoint was enabled without a session"
	echo "dis$t $(val ns_med <<<"$out")"
done

# ---- end to end: 1 MiB, discard and blocking, alternating
: >"$WORK/e2e.txt"
for k in $(seq "$e2e_reps"); do
	for mode in drop block; do
		opts=() env=()
		if [ $mode = block ]; then
			opts=(--blocking-timeout=inf)
			env=(LTTNG_UST_ALLOW_BLOCKING=1)
		fi
		session e2e 128K 4 "${opts[@]}" || skip "could not create the 1 MiB session"
		out=$(env "${env[@]}" "$BIN" burst 2 1000000 "lttng stop e2e >/dev/null") ||
			skip "lttng_bench burst failed"
		[ "$(val stop_rc <<<"$out")" = 0 ] || skip "lttng stop failed"
		att=$(val attempted <<<"$out")
		secs=$(val secs <<<"$out")
		lost=$(discarded e2e)
		bytes=$(du -sb "$WORK/e2e" | awk '{ print $1 }')
		[ "$k" = 1 ] && [ $mode = drop ] && echo "rss_kb $(daemons_rss_kb)"
		e2e_record $mode "$att" "$secs" "$lost" "$bytes"
		destroy e2e
	done
done
e2e_summary drop block
