#!/usr/bin/env bash
# The .NET EventPipe contender of `make bench` (scripts/run-bench.sh runs it).
#
#   scripts/bench-eventpipe.sh EVENTPIPEBENCH_DLL RINGPIPE_TOOL QUICK(0|1) WORKDIR
#
# Runs bench/EventPipeBench (a C# EventSource writing the comparison's
# 32-byte event) under a file-streaming EventPipe session started through
# the runtime's environment variables, and prints "key value" lines; when
# it cannot run, "skip REASON" and nothing else. Events in the traces are
# counted with `ringpipe report` (the project's nettrace reader, which
# agrees with TraceEvent on EventPipe's files: tests/interop).
#
#   producer rows  a 1024 MiB session (DOTNET_EventPipeCircularMB), so that
#                  it does not drop; stack walks off (DOTNET_EventPipeEnableStackwalk=0)
#                  as the other contenders take none; one extra row with
#                  EventPipe's default, a stack with every event.
#   disabled rows  no session: EventSource.IsEnabled() is false.
#   end to end     1,000,000 events (2 writers) into a 1 MiB session; time
#                  from the first write until the process exited (the
#                  runtime ends an environment-started session, and writes
#                  the end of the trace, at shutdown); loss = events missing
#                  from the trace. Block (DOTNET_EventPipeBufferingMode=1)
#                  only on a runtime that has it (.NET 11 and later). Then
#                  the same into 1024 MiB ("big": nothing lost), for the
#                  rate at which EventPipe writes its file.
set -uo pipefail
DLL=$1
RP=$2
QUICK=$3
WORK=$4

reps=7 e2e_reps=5 n=1000000 nstack=100000 ndis=20000000
if [ "$QUICK" = 1 ]; then reps=3 e2e_reps=2 n=500000 nstack=20000 ndis=10000000; fi

. "$(dirname "$0")/bench-common.sh"
command -v dotnet >/dev/null 2>&1 || skip "the .NET SDK (dotnet) is not installed"
[ -f "$DLL" ] || skip "bench/EventPipeBench did not build (see .output/eventpipe-bench.log)"
[ -x "$RP" ] || skip "no ringpipe tool to count the events"
mkdir -p "$WORK"

TRACE=$WORK/eventpipe.nettrace
# Only the benchmark's own process gets these: a dotnet started by this
# script for anything else would write its own trace over ours.
ep_env=(DOTNET_EnableEventPipe=1 "DOTNET_EventPipeOutputPath=$TRACE"
	"DOTNET_EventPipeConfig=Ringpipe-Bench:0xFFFFFFFFFFFFFFFF:5"
	DOTNET_EventPipeOutputStreaming=1 DOTNET_EventPipeRundown=0)
# events of the benchmark's event in the trace
counted() { "$RP" report "$TRACE" 2>/dev/null | awk '/Ringpipe-Bench\/Small/ && !f { print $1; f = 1 } END { if (!f) print 0 }'; }
now_ns() { date +%s%N; }

out=$(dotnet "$DLL" producer 1 1000 1) || skip "EventPipeBench does not run: $(dotnet "$DLL" producer 1 1000 1 2>&1 | tail -1)"
runtime=$(val runtime <<<"$out")
echo "runtime $runtime"

# ---- producer cost
for t in 1 2; do
	rm -f "$TRACE"
	out=$(env "${ep_env[@]}" DOTNET_EventPipeCircularMB=1024 DOTNET_EventPipeEnableStackwalk=0 \
		dotnet "$DLL" producer "$t" "$n" "$reps") || skip "EventPipeBench producer failed"
	[ "$(val enabled <<<"$out")" = 1 ] || skip "the EventPipe session did not enable the EventSource"
	echo "en$t $(val ns_med <<<"$out")"
	echo "en${t}_min $(val ns_min <<<"$out")"
	echo "en${t}_max $(val ns_max <<<"$out")"
	echo "en${t}_lost $(( $(val attempted <<<"$out") - $(counted) ))"
done
rm -f "$TRACE"
out=$(env "${ep_env[@]}" DOTNET_EventPipeCircularMB=1024 dotnet "$DLL" producer 1 "$nstack" "$reps") ||
	skip "EventPipeBench producer failed"
echo "stack1 $(val ns_med <<<"$out")"
for t in 1 2; do
	out=$(dotnet "$DLL" producer "$t" "$ndis" "$reps") || skip "EventPipeBench producer failed"
	[ "$(val enabled <<<"$out")" = 0 ] || skip "the EventSource was enabled without a session"
	echo "dis$t $(val ns_med <<<"$out")"
done

# ---- end to end, 1 MiB
major=${runtime%%.*}
modes=(drop)
if [ "${major:-0}" -ge 11 ]; then
	modes+=(block)
else
	echo "block.unsupported .NET $runtime has no Block buffering for EventPipe (.NET 11 adds it)"
fi
out=$(dotnet "$DLL" burst 2 1000000) || skip "EventPipeBench burst failed"
hwm0=$(val hwm_kb <<<"$out")
: >"$WORK/e2e.txt"
for k in $(seq "$e2e_reps"); do
	for mode in "${modes[@]}" big; do
		extra=() mb=1
		[ $mode = block ] && extra=(DOTNET_EventPipeBufferingMode=1)
		[ $mode = big ] && mb=1024
		rm -f "$TRACE"
		out=$(env "${ep_env[@]}" DOTNET_EventPipeCircularMB=$mb DOTNET_EventPipeEnableStackwalk=0 \
			"${extra[@]}" dotnet "$DLL" burst 2 1000000) || skip "EventPipeBench burst failed"
		t_end=$(now_ns)
		att=$(val attempted <<<"$out")
		first=$(val first_write_unix_ns <<<"$out")
		got=$(counted)
		bytes=$(stat -c %s "$TRACE" 2>/dev/null || echo 0)
		[ "$k" = 1 ] && [ $mode = drop ] && echo "rss_kb $(( $(val hwm_kb <<<"$out") - hwm0 ))"
		e2e_record $mode "$att" "$(awk -v ns=$(( t_end - first )) 'BEGIN { printf "%.9f", ns / 1e9 }')" \
			"$(( att - got ))" "$bytes"
	done
done
rm -f "$TRACE"
e2e_summary "${modes[@]}" big
