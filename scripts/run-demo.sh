#!/usr/bin/env bash
# `make run`: the main job on the built-in demo.
#  1. Four threads write two million events through the public API into a
#     Block-mode session whose rings hold only 1 MiB: producers park instead
#     of dropping, the io_uring drainer streams nettrace to a file, and the
#     trace is reported by ringpipe and (with the .NET SDK) by TraceEvent.
#  2. ringpipe-demo, a simulated managed runtime, holds a 500,000-object heap
#     with its buffer capped at 1 MB. `ringpipe gcdump collect` opens a Block
#     session through its diagnostics socket: the runtime walks its heap
#     inside the enable callback, the walk waits for the drainer instead of
#     dropping, rundown runs at the stop, and the heap graph is rebuilt from
#     the trace. dotnet-gcdump does the same when make deps installed it.
#  3. A host agent on a private socket: ringpipe-demo joins it by itself
#     (RINGPIPE_AGENT), hands its rings over and is drained from the agent's
#     process; `ringpipe agent status` and `ringpipe report DIR` show it.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-.output/default}
TRACE=.output/demo.nettrace

echo "== ringpipe stress: 4 threads x 500000 events, 1 MiB of rings, Block mode"
"$OUT"/ringpipe stress --threads 4 --events 500000 --buffer-mb 1 --mode block -o "$TRACE"
echo
echo "== ringpipe report $TRACE"
"$OUT"/ringpipe report "$TRACE"
if command -v dotnet >/dev/null 2>&1 && [ -f .output/interop/TraceDump.dll ]; then
	echo
	echo "== TraceEvent reads the same file (events per provider/event, then EventsLost)"
	dotnet .output/interop/TraceDump.dll counts "$TRACE"
fi

echo
echo "== ringpipe-demo: a managed heap of 500000 objects, IPC buffers capped at 1 MB"
"$OUT"/ringpipe-demo --heap-nodes 500000 --max-buffer-mb 1 --duration 300 \
	--heap-report .output/demo-heap.txt >.output/demo-runtime.out 2>.output/demo-runtime.err &
DEMO=$!
trap 'kill $DEMO 2>/dev/null; wait $DEMO 2>/dev/null || true' EXIT
for _ in $(seq 100); do
	grep -q socket .output/demo-runtime.out 2>/dev/null && break
	sleep 0.05
done
echo "== ringpipe gcdump collect -p $DEMO (Block session, heap walk, rundown, report)"
# --force: the previous run's snapshot is replaced, as the trace above is
"$OUT"/ringpipe gcdump collect --force -p "$DEMO" -o .output/demo-heap.nettrace
echo
echo "== what the demo says it walked (.output/demo-heap.txt)"
head -5 .output/demo-heap.txt
GCDUMP=.output/dotnet-tools/dotnet-gcdump
if [ -x "$GCDUMP" ]; then
	echo
	echo "== dotnet-gcdump collect -p $DEMO, then dotnet-gcdump report (top rows)"
	"$GCDUMP" collect -p "$DEMO" -o .output/demo.gcdump >/dev/null
	"$GCDUMP" report .output/demo.gcdump | head -12
fi

echo
echo "== ringpipe agent: the demo joins a host agent by itself (2 writer threads, Block, 2 s)"
AGENT_DIR=.output/demo-agent
rm -rf "$AGENT_DIR"
mkdir -p "$AGENT_DIR"
"$OUT"/ringpipe agent --quiet --socket "$AGENT_DIR/agent.sock" --output-dir "$AGENT_DIR" \
	--providers Ringpipe-Demo --buffering-mode block --duration 30s &
AGENT=$!
trap 'kill $DEMO $AGENT 2>/dev/null; wait $DEMO $AGENT 2>/dev/null || true' EXIT
for _ in $(seq 100); do [ -S "$AGENT_DIR/agent.sock" ] && break; sleep 0.05; done
RINGPIPE_AGENT=$AGENT_DIR/agent.sock "$OUT"/ringpipe-demo --threads 2 --rate 50000 --duration 2 \
	--alloc-threads 0 --jit-threads 0 --heap-nodes 1000 2>/dev/null | grep '^ticks'
"$OUT"/ringpipe agent status --socket "$AGENT_DIR/agent.sock" | tail -n +3
kill -TERM "$AGENT"
wait "$AGENT" 2>/dev/null || true
echo
echo "== ringpipe report $AGENT_DIR (every process the agent drained, by container)"
"$OUT"/ringpipe report "$AGENT_DIR"
