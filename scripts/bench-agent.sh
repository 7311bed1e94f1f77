#!/usr/bin/env bash
# The host agent's costs, measured in this run (make bench; Documentation/agent.md):
#
#   scripts/bench-agent.sh [--quick]
#
#   idle     agent CPU (% of one CPU) and resident memory with N processes
#            joined and writing nothing, over a 10 s window (5 s with --quick)
#   drain    one process, 2 writers, Drop, 64 MiB: events/s it wrote, what
#            the agent lost, the agent's CPU seconds per million events
#   write    the producer's cost per event (1 writer, 32-byte payload)
#            with the agent as its drainer against the library's in-process
#            drainer (RINGPIPE_OUTPUT), ROUNDS alternating rounds, medians
#
# Prints "key value" lines; scripts/run-bench.sh tables them.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-.output/default}
tool=$OUT/ringpipe
prod=$OUT/tests/agent_producer
quick=0
[ "${1:-}" = --quick ] && quick=1
nidle=${NIDLE:-50}
window=10
[ $quick = 1 ] && window=5
rounds=${ROUNDS:-5}
[ $quick = 1 ] && rounds=3
events=2000000
[ $quick = 1 ] && events=1000000

for f in "$tool" "$prod"; do
	[ -x "$f" ] || { echo "skip not built: $f (make tests)"; exit 0; }
done
work=$(mktemp -d "${TMPDIR:-/tmp}/ringpipe-bench-agent.XXXXXX") || exit 1
pids=()
cleanup() {
	[ ${#pids[@]} -gt 0 ] && kill -9 "${pids[@]}" 2>/dev/null
	wait 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT
hz=$(getconf CLK_TCK)

# cpu_ticks PID: utime + stime
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
rss_kb() { awk '/^VmRSS/ { print $2 }' "/proc/$1/status"; }

agent_up() {	# agent_up MODE BUFFER_MB
	rm -rf "$work/out" "$work/agent.sock"
	"$tool" agent --quiet --socket "$work/agent.sock" --output-dir "$work/out" \
		--providers AgentBench --buffering-mode "$1" --buffer-mb "$2" 2>>"$work/agent.err" &
	agent=$!
	for _ in $(seq 100); do [ -S "$work/agent.sock" ] && break; sleep 0.05; done
	sleep 0.2
}
agent_down() { kill -TERM "$agent"; wait "$agent" 2>/dev/null; }

# ---- idle -------------------------------------------------------------------
echo "bench-agent: idle, $nidle processes joined ..." >&2
agent_up drop 1
for i in $(seq "$nidle"); do
	RINGPIPE_AGENT=$work/agent.sock "$prod" AgentBench 1 0 idle >/dev/null 2>>"$work/prod.err" &
	pids+=($!)
done
# every one joined: the agent's status lists them
for _ in $(seq 200); do
	n=$("$tool" agent status --json --socket "$work/agent.sock" 2>/dev/null | grep -o '"state":"joined"' | wc -l)
	[ "$n" -ge "$nidle" ] && break
	sleep 0.1
done
echo "agent_idle_joined $n"
p0=0
for p in "${pids[@]}"; do p0=$((p0 + $(cpu_ticks "$p"))); done
a0=$(cpu_ticks "$agent")
sleep "$window"
a1=$(cpu_ticks "$agent")
p1=0
for p in "${pids[@]}"; do p1=$((p1 + $(cpu_ticks "$p"))); done
awk -v d=$((a1 - a0)) -v hz="$hz" -v w="$window" 'BEGIN { printf "agent_idle_cpu_pct %.2f\n", 100 * d / hz / w }'
awk -v d=$((p1 - p0)) -v hz="$hz" -v w="$window" -v n="$nidle" \
	'BEGIN { printf "process_idle_cpu_pct %.3f\n", 100 * d / hz / w / n }'
echo "agent_idle_rss_kb $(rss_kb "$agent")"
kill -9 "${pids[@]}" 2>/dev/null
{ wait "${pids[@]}"; } 2>/dev/null
pids=()
agent_down

# ---- drain --------------------------------------------------------------------
echo "bench-agent: drain, $events events ..." >&2
agent_up drop 64
a0=$(cpu_ticks "$agent")
t0=$(date +%s.%N)
line=$(RINGPIPE_AGENT=$work/agent.sock "$prod" AgentBench 2 $((events / 2)) 2>>"$work/prod.err")
t1=$(date +%s.%N)
a1=$(cpu_ticks "$agent")
agent_down
w=$(sed -n 's/.*"written":\([0-9]*\).*/\1/p' <<<"$line")
d=$(sed -n 's/.*"dropped":\([0-9]*\).*/\1/p' <<<"$line")
awk -v w="$w" -v d="$d" -v t0="$t0" -v t1="$t1" -v c=$((a1 - a0)) -v hz="$hz" 'BEGIN {
	printf "drain_events_per_s %.0f\n", (w + d) / (t1 - t0)
	printf "drain_dropped %d\n", d
	printf "drain_agent_cpu_s_per_M %.3f\n", c / hz / ((w + d) / 1e6)
}'

# ---- write cost -------------------------------------------------------------------
echo "bench-agent: write cost, $rounds rounds ..." >&2
agent_up drop 16
: >"$work/agent.ns"
: >"$work/local.ns"
for r in $(seq "$rounds"); do
	RINGPIPE_AGENT=$work/agent.sock "$prod" AgentBench 1 $events 2>>"$work/prod.err" |
		sed -n 's/.*"ns_per_event":\([0-9.]*\).*/\1/p' >>"$work/agent.ns"
	RINGPIPE_AGENT=0 RINGPIPE_OUTPUT="$work/local.nettrace" RINGPIPE_PROVIDERS=AgentBench \
		"$prod" AgentBench 1 $events 2>>"$work/prod.err" |
		sed -n 's/.*"ns_per_event":\([0-9.]*\).*/\1/p' >>"$work/local.ns"
done
agent_down
median() { sort -n "$1" | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2); else print "nan" }'; }
ma=$(median "$work/agent.ns")
ml=$(median "$work/local.ns")
echo "write_ns_agent $ma"
echo "write_ns_inprocess $ml"
awk -v a="$ma" -v l="$ml" 'BEGIN { if (l > 0) printf "write_ratio_agent_to_inprocess %.2f\n", a / l }'
