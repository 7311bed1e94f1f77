#!/usr/bin/env bash
# `make run`: the main job on the built-in demo. Four threads write two
# million events through the public API into a Block-mode session whose
# rings hold only 1 MiB: producers park instead of dropping, the io_uring
# drainer streams nettrace to a file, and the trace is reported by ringpipe
# and (when the .NET SDK is here) by TraceEvent, which must count every event.
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
