#!/usr/bin/env bash
# `make run`: the main job on the built-in demo. Writes a trace and prints
# ringpipe's report of it (and, when the .NET SDK is there, TraceEvent's
# verdict on the same file).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-.output/default}
TRACE=.output/demo.nettrace

echo "== ringpipe gen: a synthetic trace, 4 threads, every field type, deliberate drops"
"$OUT"/ringpipe gen -o "$TRACE" --events 200000 --threads 4 --gap-every 5000 --sp-every 50000
echo
echo "== ringpipe report $TRACE"
"$OUT"/ringpipe report "$TRACE"
if command -v dotnet >/dev/null 2>&1 && [ -f .output/interop/TraceDump.dll ]; then
	echo
	echo "== TraceEvent reads the same file (event counts, then EventsLost)"
	dotnet .output/interop/TraceDump.dll counts "$TRACE"
fi
