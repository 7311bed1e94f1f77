#!/usr/bin/env bash
# `make bench`: ringpipe side by side with LTTng-UST, .NET EventPipe and the
# floor, measured in this run on this machine, as one markdown table.
#
#   scripts/run-bench.sh [--quick] [--details]
#
#   --quick    one round (CI; well under a minute on a quiet machine)
#   --details  afterwards, every bench/bench_* program's own tables (the
#              ring, session, Block, sink and serializer figures, and
#              bench_usdt: the unarmed USDT probe against a build without it)
#
# Each contender prints "key value" lines (bench_session --kv, bench_block
# --e2e, scripts/bench-lttng.sh, scripts/bench-eventpipe.sh), all in their
# --quick sizes; this script only merges and tables them and computes the
# ratios. A full run is ROUNDS (5) rounds of every contender in turn, each
# figure the median over the rounds (worst and best runs: the extremes):
# on a shared 2-CPU machine load comes and goes over minutes, and rounds
# spread it over all contenders alike instead of over whichever ran then.
# Progress goes to
# stderr, so stdout is the table alone. A contender that cannot run gets
# its reason in its cells, never a number.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-.output/default}
OUTPUT=${OUTPUT:-.output}

quick=0 details=0
for a in "$@"; do
	case $a in
	--quick) quick=1 ;;
	--details) details=1 ;;
	*) echo "usage: $0 [--quick] [--details]" >&2; exit 2 ;;
	esac
done
qarg=()
[ $quick = 1 ] && qarg=(--quick)
rounds=${ROUNDS:-5}
[ $quick = 1 ] && rounds=1

work=$(mktemp -d "${TMPDIR:-/tmp}/ringpipe-bench.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
t_start=$(date +%s)
load_start=$(cut -d' ' -f1 /proc/loadavg)

# run NAME CMD...: CMD's stdout into $work/NAME.kv; on failure a "skip"
# line carrying its last words, so the table says why
run() {
	local name=$1
	shift
	echo "bench: round $r/$rounds: $name ..." >&2
	if ! "$@" >"$work/$name.$r.kv" 2>>"$work/$name.err"; then
		echo "skip failed: $(tail -1 "$work/$name.err" | tr '|' '/')" >>"$work/$name.$r.kv"
	fi
}
for r in $(seq "$rounds"); do
	run rp "$OUT/bench/bench_session" --kv --quick
	run rpe "$OUT/bench/bench_block" --e2e --quick
	if [ -x "$OUT/bench/lttng_bench" ]; then
		run lt scripts/bench-lttng.sh "$OUT/bench/lttng_bench" 1 "$work/lttng"
	else
		echo "skip not built: liblttng-ust-dev is not installed (make deps)" >"$work/lt.$r.kv"
	fi
	run ep scripts/bench-eventpipe.sh "$OUTPUT/eventpipe-bench/EventPipeBench.dll" \
		"$OUT/ringpipe" 1 "$work/ep"
done

# One contender's rounds into one set of lines: numbers become their median
# over the rounds (keys ending in _max: the largest, _min: the smallest),
# anything else keeps its first value; a round that could not run makes
# the whole contender "skip", with its reason.
merge() {
	cat "$work/$1".*.kv | awk '
	{ k = $1; $1 = ""; x = substr($0, 2)
	  if (k == "skip" && skip == "") skip = x
	  if (!(k in n)) order[++nk] = k
	  vals[k, ++n[k]] = x }
	function isnum(x) { return x ~ /^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$/ }
	END {
		if (skip != "") { print "skip", skip; exit }
		for (i = 1; i <= nk; i++) {
			k = order[i]; m = n[k]; numeric = 1
			for (j = 1; j <= m; j++) { a[j] = vals[k, j]; if (!isnum(a[j])) numeric = 0 }
			if (!numeric || m == 1) { print k, a[1]; continue }
			for (j = 2; j <= m; j++)	# insertion sort, m is small
				for (l = j; l > 1 && a[l - 1] + 0 > a[l] + 0; l--) { t = a[l]; a[l] = a[l - 1]; a[l - 1] = t }
			if (k ~ /_max$/) y = a[m]
			else if (k ~ /_min$/) y = a[1]
			else y = m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
			printf "%s %.6g\n", k, y
		}
	}'
}

# the raw figures stay in $OUTPUT/bench-last.kv (and the contenders' stderr
# in $OUTPUT/bench-last.log), to look into a cell
for f in rp rpe lt ep; do merge $f | sed "s/^/$f./"; done >"$OUTPUT/bench-last.kv"
for f in rp rpe lt ep; do sed "s/^/$f: /" "$work/$f.err" 2>/dev/null; done >"$OUTPUT/bench-last.log"
awk -v cpus="$(nproc)" -v kernel="$(uname -r)" -v date="$(date -u +%Y-%m-%d)" \
	-v rounds="$rounds" -v secs="$(( $(date +%s) - t_start ))" \
	-v load="$load_start -> $(cut -d' ' -f1 /proc/loadavg)" -v cmd="make bench${*:+ BENCH_ARGS=$*}" '
{ k = $1; $1 = ""; v[k] = substr($0, 2) }

function has(k) { return (k in v) && v[k] != "" }
# why a contender has no figures ("" when it has)
function why(c) { return has(c ".skip") ? "not run: " v[c ".skip"] : "" }
function num(k) { return has(k) ? v[k] + 0 : -1 }
function ns(c, k,    w) {
	w = why(c)
	if (w != "") return w
	return has(c "." k) ? sprintf("%.2f", v[c "." k]) : "missing"
}
# ringpipe / contender for a cost: below 1 means ringpipe is cheaper
function cost_ratio(a, b) {
	if (a <= 0 || b <= 0) return "—"
	if (a <= b) return sprintf("%.3f (%.1fx cheaper)", a / b, b / a)
	return sprintf("%.2f (%.1fx dearer)", a / b, a / b)
}
function e2e(c, m,    w) {
	w = why(c)
	if (w != "") return w
	if (has(c "." m ".unsupported")) return "not supported: " v[c "." m ".unsupported"]
	if (!has(c "." m ".evs")) return "missing"
	return sprintf("%.2f M/s, loss %.2f %% (worst run %.2f %%); delivered %.2f M/s",
		       v[c "." m ".evs"] / 1e6, v[c "." m ".loss"], v[c "." m ".loss_max"],
		       v[c "." m ".evs"] * (1 - v[c "." m ".loss"] / 100) / 1e6)
}
function tput_ratio(a, b) {
	if (a <= 0 || b <= 0) return "—"
	return sprintf("%.2fx", a / b)
}
function met(ok) { return ok ? "met" : "**missed**" }
function block_drop(c,    b, d, w) {
	w = why(c)
	if (w != "") return w
	if (has(c ".block.unsupported")) return "not supported: " v[c ".block.unsupported"]
	if (!has(c ".block.evs")) return "no Block mode"
	b = v[c ".block.evs"]; d = v[c ".drop.evs"]
	return sprintf("%.0f %% (delivered: %.0f %%)", 100 * b / d,
		       100 * b * (1 - v[c ".block.loss"] / 100) / (d * (1 - v[c ".drop.loss"] / 100)))
}

END {
	ltv = has("lt.version") ? "LTTng-UST " v["lt.version"] : "LTTng-UST"
	epv = has("ep.runtime") ? ".NET " v["ep.runtime"] " EventPipe" : ".NET EventPipe"
	printf "ringpipe side by side (`%s`, %s s, load average %s): %s CPUs, kernel %s, %s; %s, %s; ",
	       cmd, secs, load, cpus, kernel, date, ltv, epv
	printf "medians over %d round%s of every contender in turn, each the median of %s repetitions; the same 32-byte event everywhere (u64, u32, u32, a short string); ", rounds, (rounds > 1 ? "s" : ""), v["rp.reps"]
	printf "producer figures are ns per event per writer thread, writers pinned one per CPU; "
	printf "end to end: 1,000,000 events from 2 writers into a 1 MiB buffer, first write to trace complete on disk.\n\n"

	print "| measure | ringpipe | floor | LTTng-UST | .NET EventPipe | ringpipe / floor | ringpipe / LTTng-UST | ringpipe / EventPipe | target |"
	print "|---|---|---|---|---|---|---|---|---|"

	for (t = 1; t <= 2; t++) {
		rp = num("rp.en" t); fl = num("rp.floor" t); lt = num("lt.en" t); ep = num("ep.en" t)
		if (why("lt") != "") lt = -1
		if (why("ep") != "") ep = -1
		if (why("rp") != "") rp = -1
		tg = sprintf("≤ 2x floor: %s; ≥ 5x cheaper than LTTng: %s; ≥ 20x cheaper than EventPipe: %s",
			     rp > 0 && fl > 0 ? met(rp <= 2 * fl) : "—",
			     rp > 0 && lt > 0 ? met(5 * rp <= lt) : "—",
			     rp > 0 && ep > 0 ? met(20 * rp <= ep) : "—")
		printf "| producer, enabled, %d thread%s (ns/event) | %s | %s | %s | %s | %s | %s | %s | %s |\n",
		       t, (t > 1 ? "s" : ""), ns("rp", "en" t), ns("rp", "floor" t),
		       ns("lt", "en" t) (has("lt.en" t "_discarded") ? " (discarded " v["lt.en" t "_discarded"] ")" : ""),
		       ns("ep", "en" t) (has("ep.en" t "_lost") ? " (lost " v["ep.en" t "_lost"] ")" : ""),
		       (rp > 0 && fl > 0 ? sprintf("%.2fx", rp / fl) : "—"),
		       cost_ratio(rp, lt), cost_ratio(rp, ep), tg
	}
	for (t = 1; t <= 2; t++) {
		rp = why("rp") == "" ? num("rp.dis" t) : -1
		lt = why("lt") == "" ? num("lt.dis" t) : -1
		ep = why("ep") == "" ? num("ep.dis" t) : -1
		printf "| producer, disabled, %d thread%s (ns/event) | %s%s | — | %s | %s | — | %s | %s | — |\n",
		       t, (t > 1 ? "s" : ""), ns("rp", "dis" t),
		       (t == 1 && has("rp.write_dis1") ? " (guarded by rp_event_enabled(); " sprintf("%.2f", v["rp.write_dis1"]) " unguarded)" : " (guarded)"),
		       ns("lt", "dis" t), ns("ep", "dis" t), cost_ratio(rp, lt), cost_ratio(rp, ep)
	}
	printf "| producer, enabled, 1 thread, EventPipe default: a stack walk per event (ns/event) | — | — | — | %s | — | — | — | — |\n",
	       ns("ep", "stack1")

	printf "| end to end, Drop (LTTng: discard), 1 MiB | %s | — | %s | %s | — | %s | %s | — |\n",
	       e2e("rpe", "drop"), e2e("lt", "drop"), e2e("ep", "drop"),
	       why("rpe") == "" && why("lt") == "" ? tput_ratio(num("rpe.drop.evs"), num("lt.drop.evs")) : "—",
	       why("rpe") == "" && why("ep") == "" ? tput_ratio(num("rpe.drop.evs"), num("ep.drop.evs")) : "—"
	printf "| end to end, Block (LTTng: --blocking-timeout=inf), 1 MiB | %s | — | %s | %s | — | %s | %s | zero loss: %s |\n",
	       e2e("rpe", "block"), e2e("lt", "block"), e2e("ep", "block"),
	       why("rpe") == "" && why("lt") == "" ? tput_ratio(num("rpe.block.evs"), num("lt.block.evs")) : "—",
	       why("rpe") == "" && why("ep") == "" && has("ep.block.evs") ? tput_ratio(num("rpe.block.evs"), num("ep.block.evs")) : "—",
	       why("rpe") == "" ? met(num("rpe.block.loss_max") == 0) : "—"
	printf "| end to end, Block / Drop events/s | %s | — | %s | %s | — | — | — | ≥ 80 %% of Drop: %s |\n",
	       block_drop("rpe"), block_drop("lt"), block_drop("ep"),
	       why("rpe") == "" ? met(num("rpe.block.evs") >= 0.8 * num("rpe.drop.evs")) : "—"
	printf "| drainer: MB/s to the file, end to end Block run (EventPipe: a 1 GiB Drop session, no loss) | %s | — | %s | %s | — | %s | %s | — |\n",
	       why("rpe") != "" ? why("rpe") : sprintf("%.1f", num("rpe.block.mbs")),
	       why("lt") != "" ? why("lt") : sprintf("%.1f", num("lt.block.mbs")),
	       why("ep") != "" ? why("ep") : sprintf("%.1f", num("ep.big.mbs")),
	       why("rpe") == "" && why("lt") == "" ? tput_ratio(num("rpe.block.mbs"), num("lt.block.mbs")) : "—",
	       why("rpe") == "" && why("ep") == "" ? tput_ratio(num("rpe.block.mbs"), num("ep.big.mbs")) : "—"
	rp = why("rp") == "" ? num("rp.rss_mib") : -1
	lt = why("lt") == "" ? (num("lt.rss_kb") - num("lt.sessiond_rss_kb")) / 1024 : -1
	ep = why("ep") == "" ? num("ep.rss_kb") / 1024 : -1
	printf "| resident memory per 1 MiB session, filled (MiB) | %s | — | %s | %s | — | %s | %s | — |\n",
	       why("rp") != "" ? why("rp") : sprintf("%.1f (process RSS growth)", rp),
	       why("lt") != "" ? why("lt") : sprintf("%.1f (lttng-sessiond + consumerd RSS growth)", lt),
	       why("ep") != "" ? why("ep") : sprintf("%.1f (peak RSS growth over an untraced run)", ep),
	       cost_ratio(rp, lt), cost_ratio(rp, ep)
}' "$OUTPUT/bench-last.kv"
rc=0
grep -q '^skip failed' "$work"/*.kv && rc=1

if [ $details = 1 ]; then
	echo
	echo "## Details: every benchmark's own tables"
	for b in "$OUT"/bench/bench_*; do
		[ -x "$b" ] || continue
		"$b" "${qarg[@]}" || { echo "| $(basename "$b") | FAILED | | |"; rc=1; }
	done
fi
exit $rc
