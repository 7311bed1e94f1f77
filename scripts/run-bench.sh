#!/usr/bin/env bash
# `make bench`: every benchmark, one markdown table. BENCH_ARGS=--quick for
# a short run (CI), nothing for the full one used in Documentation/performance.md.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-.output/default}
echo "ringpipe benchmarks ($(nproc) CPUs, $(uname -r), $(date -u +%Y-%m-%d)) $*"
echo
echo "| benchmark | result | | |"
echo "|---|---|---|---|"
rc=0
for b in "$OUT"/bench/bench_*; do
	[ -x "$b" ] || continue
	"$b" "$@" || { echo "| $(basename "$b") | FAILED | | |"; rc=1; }
done
exit $rc
