#!/usr/bin/env bash
# `make bench`: ringpipe side by side with LTTng-UST, .NET EventPipe and the
# floor, measured in this run on this machine, as one markdown table; then
# the thread sweep "Block mode at production shape" as a second one; then
# the host agent's table, the Block stall table (bench/bench_stall.c: a
# Block session whose process, cgroup, pipe reader or agent is stopped,
# frozen or throttled for 0.5, 2 and 10 s; 2 s alone with --quick) and the
# fleet egress.
#
#   scripts/run-bench.sh [--quick] [--details] [--sweep]
#
#   --quick    one round and 3 sweep repetitions (CI; 2-3 minutes)
#   --sweep    the thread sweep alone (its table only)
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
# The sweep (bench_block --sweep --kv, scripts/bench-lttng.sh --sweep: T =
# 1, 2, 8, 32, 128 unpinned writers, 1,000,000 events in all, 1 MiB and
# 16 MiB, Block and Drop / blocking and discard) runs after the rounds:
# SWEEP_REPS (5; 3 with --quick) repetitions, ringpipe and LTTng-UST
# alternating, one repetition of every case each time (ringpipe's three,
# SWEEP_RP_RUNS: its 20 cases take about a second, LTTng-UST's about half
# a minute, so its figures cost little to take from three times as many
# runs, and a ratio of two medians of this host's runs, which spread by
# a third, needs them); its figures are the medians over them, its ratios
# are computed here. After the host agent's and the fleet egress's tables,
# bench_latency's: how soon the drainer wakes, a live stream's lag,
# dotnet-trace's stopping event, stop times and where the drainer runs,
# the figures the tests do not judge (invariant 10, Documentation/design.md).
# Progress goes to stderr, so stdout is the tables alone. A contender that
# cannot run gets its reason in its cells, never a number.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-.output/default}
OUTPUT=${OUTPUT:-.output}

quick=0 details=0 sweep_only=0
for a in "$@"; do
	case $a in
	--quick) quick=1 ;;
	--details) details=1 ;;
	--sweep) sweep_only=1 ;;
	*) echo "usage: $0 [--quick] [--details] [--sweep]" >&2; exit 2 ;;
	esac
done
qarg=()
[ $quick = 1 ] && qarg=(--quick)
rounds=${ROUNDS:-5}
[ $quick = 1 ] && rounds=1
sweep_reps=${SWEEP_REPS:-5}
[ $quick = 1 ] && sweep_reps=3
sweep_rp_runs=${SWEEP_RP_RUNS:-3}

work=$(mktemp -d "${TMPDIR:-/tmp}/ringpipe-bench.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
t_start=$(date +%s)
load_start=$(cut -d' ' -f1 /proc/loadavg)

# run NAME CMD...: CMD's stdout into $work/NAME.kv; on failure a "skip"
# line carrying its last words, so the table says why
run() {
	local name=$1
	shift
	echo "bench: $phase $r/$nphase: $name ..." >&2
	if ! "$@" >"$work/$name.$r.kv" 2>>"$work/$name.err"; then
		echo "skip failed: $(tail -1 "$work/$name.err" | tr '|' '/')" >>"$work/$name.$r.kv"
	fi
}
phase=round nphase=$rounds
[ $sweep_only = 1 ] && rounds=0
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
phase="sweep repetition" nphase=$sweep_reps
t_sweep=$(date +%s)
load_sweep=$(cut -d' ' -f1 /proc/loadavg)
for rep in $(seq "$sweep_reps"); do
	for i in $(seq "$sweep_rp_runs"); do	# each run its own file: merge() takes the median of all
		r=$rep.$i
		run rps "$OUT/bench/bench_block" --sweep --kv --reps 1
	done
	r=$rep
	if [ -x "$OUT/bench/lttng_bench" ]; then
		run lts scripts/bench-lttng.sh "$OUT/bench/lttng_bench" 1 "$work/lttng-sweep" --sweep 1
	else
		echo "skip not built: liblttng-ust-dev is not installed (make deps)" >"$work/lts.$r.kv"
	fi
done
secs_sweep=$(( $(date +%s) - t_sweep ))
load_sweep="$load_sweep -> $(cut -d' ' -f1 /proc/loadavg)"

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
contenders="rp rpe lt ep rps lts"
[ $sweep_only = 1 ] && contenders="rps lts"
for f in $contenders; do merge $f | sed "s/^/$f./"; done >"$OUTPUT/bench-last.kv"
for f in $contenders; do sed "s/^/$f: /" "$work/$f.err" 2>/dev/null; done >"$OUTPUT/bench-last.log"
[ $sweep_only = 1 ] ||
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
		tg = sprintf("≤ 1.5x floor: %s; ≥ 5x cheaper than LTTng: %s; ≥ 20x cheaper than EventPipe: %s",
			     rp > 0 && fl > 0 ? met(rp <= 1.5 * fl) : "—",
			     rp > 0 && lt > 0 ? met(5 * rp <= lt) : "—",
			     rp > 0 && ep > 0 ? met(20 * rp <= ep) : "—")
		# the writer threads CPU time beside the wall time: the gap is
		# what the drainer took from their CPUs
		printf "| producer, enabled, %d thread%s (ns/event) | %s | %s | %s | %s | %s | %s | %s | %s |\n",
		       t, (t > 1 ? "s" : ""),
		       ns("rp", "en" t) (why("rp") == "" && has("rp.en" t "_cpu") ? sprintf(" (writer thread CPU time %.2f)", v["rp.en" t "_cpu"]) : ""),
		       ns("rp", "floor" t),
		       ns("lt", "en" t) (has("lt.en" t "_discarded") ? " (discarded " v["lt.en" t "_discarded"] ")" : ""),
		       ns("ep", "en" t) (has("ep.en" t "_lost") ? " (lost " v["ep.en" t "_lost"] ")" : ""),
		       (rp > 0 && fl > 0 ? sprintf("%.2fx", rp / fl) : "—"),
		       cost_ratio(rp, lt), cost_ratio(rp, ep), tg
	}
	# bursts past the half of a ring: the drainer no longer holds back
	# and takes its share of the CPUs the writers use (no target: the cost of a
	# drainer that must keep up, beside the row above)
	if (has("rp.en2_long")) {
		rp = why("rp") == "" ? num("rp.en2_long") : -1; fl = num("rp.floor2")
		printf "| producer, enabled, 2 threads, bursts of 3/4 of a ring: the drainer drains among the writers (ns/event) | %s (writer thread CPU time %.2f) | %s | — | — | %s | — | — | — |\n",
		       ns("rp", "en2_long"), v["rp.en2_long_cpu"], ns("rp", "floor2"),
		       (rp > 0 && fl > 0 ? sprintf("%.2fx", rp / fl) : "—")
	}
	# the write path alone: on 2 CPUs with 2 writers, a drainer that has
	# work takes its share of them, which is the gap to the row above
	for (t = 1; t <= 2; t++) {
		rp = why("rp") == "" ? num("rp.pk" t) : -1; fl = num("rp.floor" t)
		printf "| producer, enabled, %d thread%s, drainer parked: the write path alone (ns/event) | %s | %s | — | — | %s | — | — | ≤ 1.5x floor: %s |\n",
		       t, (t > 1 ? "s" : ""), ns("rp", "pk" t), ns("rp", "floor" t),
		       (rp > 0 && fl > 0 ? sprintf("%.2fx", rp / fl) : "—"),
		       (rp > 0 && fl > 0 ? met(rp <= 1.5 * fl) : "—")
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

# ---- the thread sweep: one row per buffer, T and contender
awk -v cpus="$(nproc)" -v reps="$sweep_reps" -v rpruns="$sweep_rp_runs" -v secs="$secs_sweep" -v load="$load_sweep" \
	-v kernel="$(uname -r)" -v date="$(date -u +%Y-%m-%d)" -v cmd="make bench${*:+ BENCH_ARGS=$*}" '
{ k = $1; $1 = ""; v[k] = substr($0, 2) }
function has(k) { return (k in v) && v[k] != "" }
function why(c) { return has(c ".skip") ? "not run: " v[c ".skip"] : "" }
function num(k) { return has(k) ? v[k] + 0 : -1 }
# value of key k of contender c for mode m, buffer b, T t ("" when missing)
function sv(c, m, b, t, k) { return c ".sweep." m "." b ".t" t "." k }
function cell(c, m, b, t, k, fmt, scale) {
	return has(sv(c, m, b, t, k)) ? sprintf(fmt, v[sv(c, m, b, t, k)] / scale) : "missing"
}
function row(c, m, name, b, bname, t,    w, base, rel, park) {
	w = why(c)
	if (w != "") {
		printf "| %s | %d | %s | %s | — | — | — | — | — | — | — | — |\n", bname, t, name, w
		return
	}
	park = "— | — | — | —"
	if (c == "rps" && m == "block" && !has(sv(c, m, b, t, "park_p50")))
		park = "no parks | — | — | —"
	else if (c == "rps" && m == "block")
		park = cell(c, m, b, t, "park_p50", "%.2f", 1000) " | " cell(c, m, b, t, "park_p99", "%.2f", 1000) " | " \
		       cell(c, m, b, t, "park_p999", "%.2f", 1000) " | " cell(c, m, b, t, "park_top", "%.2f", 1000)
	rel = "—"
	if (c == "rps" && m == "block") {
		base = num(sv(c, m, b, 2, "evs"))
		if (base > 0 && num(sv(c, m, b, t, "evs")) > 0)
			rel = sprintf("%.0f %%", 100 * num(sv(c, m, b, t, "evs")) / base)
	}
	printf "| %s | %d | %s | %s | %s | %s%s | %s | %s | %s |\n", bname, t, name,
	       cell(c, m, b, t, "evs", "%.2f", 1e6), cell(c, m, b, t, "dlv", "%.2f", 1e6),
	       cell(c, m, b, t, "loss", "%.2f %%", 1),
	       (num(sv(c, m, b, t, "loss_max")) > num(sv(c, m, b, t, "loss")) ? sprintf(" (worst %.2f %%)", num(sv(c, m, b, t, "loss_max"))) : ""),
	       cell(c, m, b, t, "cs", "%.2f", 1), park, rel
}
END {
	nt = split("1 2 8 32 128", T, " ")
	split("1m 16m", B, " "); split("1 MiB|16 MiB", BN, "|")
	ltv = has("lts.version") ? "LTTng-UST " v["lts.version"] : "LTTng-UST"
	printf "\n### Block mode at production shape: thread sweep\n\n"
	printf "`%s`, the sweep: %s s, load average %s; kernel %s, %s. ", cmd, secs, load, kernel, date
	printf "1,000,000 32-byte events in all, split over T writer threads, not pinned, on %s CPUs. ", cpus
	printf "ringpipe (`bench_block --sweep`): rp_event_write() into a streaming session of 1 MiB or 16 MiB (one ring per CPU), Block or Drop, timed from the first write until rp_session_stop() returned; delivered and loss from the trace read back with the library'"'"'s reader. "
	printf "%s (`bench-lttng.sh --sweep`): 4 sub-buffers per CPU adding up to the same total, blocking mode (`--blocking-timeout=inf`, `LTTNG_UST_ALLOW_BLOCKING=1`) or discard mode, timed until `lttng stop` returned; loss = the channel'"'"'s Discarded events. ", ltv
	printf "Context switches: the writer process'"'"'s voluntary ones (getrusage ru_nvcsw) over the timed span, per 1,000 events. Park times: every park of a ringpipe Block run (rp_bench_park_hook), that run'"'"'s percentiles (medians over the runs that parked). "
	printf "Every figure the median over %d repetitions, the two tracers alternating (ringpipe: %d runs of every case in each, %d in all); compare within this run only.\n\n", reps, rpruns, reps * rpruns
	print "| buffer | T | tracer, mode | M events/s attempted | M events/s delivered | loss (median; worst run) | voluntary cs / 1,000 events | park p50 (ms) | park p99 (ms) | park p99.9 (ms) | park max (ms) | ringpipe Block vs its T=2 |"
	print "|---|---|---|---|---|---|---|---|---|---|---|---|"
	for (b = 1; b <= 2; b++)
		for (i = 1; i <= nt; i++) {
			row("rps", "block", "ringpipe Block", B[b], BN[b], T[i])
			row("rps", "drop", "ringpipe Drop", B[b], BN[b], T[i])
			row("lts", "block", "LTTng blocking", B[b], BN[b], T[i])
			row("lts", "drop", "LTTng discard", B[b], BN[b], T[i])
		}
	print ""
	if (why("rps") != "") { print "ringpipe: " why("rps"); exit }
	for (b = 1; b <= 2; b++) {
		line = ""; ok = 1; base = num(sv("rps", "block", B[b], 2, "evs"))
		for (i = 1; i <= nt; i++) {
			if (T[i] == 2) continue
			x = num(sv("rps", "block", B[b], T[i], "evs"))
			line = line sprintf("%sT=%d %.0f %%", line == "" ? "" : ", ", T[i], base > 0 ? 100 * x / base : 0)
			if ((T[i] == 32 || T[i] == 128) && !(base > 0 && x >= 0.8 * base)) ok = 0
		}
		printf "- ringpipe Block events/s as %% of its T=2 figure (%.2f M/s), %s: %s; within 80 %% at T=32 and T=128 (invariant 3a): %s\n",
		       base / 1e6, BN[b], line, ok ? "met" : "**missed**"
	}
	for (b = 1; b <= 2; b++) {
		lt = why("lts") != "" ? "LTTng " why("lts") : \
		     sprintf("LTTng blocking %.2f, discard %.2f", num(sv("lts", "block", B[b], 32, "cs")), num(sv("lts", "drop", B[b], 32, "cs")))
		printf "- voluntary context switches per 1,000 events at T=32, %s: ringpipe Block %.2f, Drop %.2f; %s\n", BN[b],
		       num(sv("rps", "block", B[b], 32, "cs")), num(sv("rps", "drop", B[b], 32, "cs")), lt
	}
	if (why("lts") == "")
		for (b = 1; b <= 2; b++) {
			line = ""
			for (i = 1; i <= nt; i++) {
				x = num(sv("rps", "block", B[b], T[i], "dlv")); y = num(sv("lts", "block", B[b], T[i], "dlv"))
				line = line sprintf("%sT=%d %s", i > 1 ? ", " : "", T[i], x > 0 && y > 0 ? sprintf("%.1fx", x / y) : "—")
			}
			printf "- delivered events/s, ringpipe Block / LTTng blocking, %s: %s\n", BN[b], line
		}
	bad = 0
	for (b = 1; b <= 2; b++)
		for (i = 1; i <= nt; i++)
			if (num(sv("rps", "block", B[b], T[i], "incomplete_max")) != 0) bad = 1
	printf "- ringpipe Block, zero loss (every event of every run in the trace, once): %s\n", bad ? "**missed**" : "met"
}' "$OUTPUT/bench-last.kv"
# ---- the host agent: its own table (scripts/bench-agent.sh)
if [ $sweep_only = 0 ]; then
	echo "bench: the host agent ..." >&2
	OUT=$OUT scripts/bench-agent.sh "${qarg[@]}" >"$work/agent.kv" 2>>"$work/agent.err" ||
		echo "skip failed: $(tail -1 "$work/agent.err")" >>"$work/agent.kv"
	awk '
	$1 == "skip" { $1 = ""; skip = $0 }
	{ v[$1] = $2 }
	END {
		printf "\n### The host agent (`ringpipe agent`)\n\n"
		if (skip != "") { printf "Not measured:%s\n", skip; exit }
		printf "| measure | value |\n|---|---|\n"
		printf "| agent CPU at idle, %s processes joined | %s %% of one CPU |\n", v["agent_idle_joined"], v["agent_idle_cpu_pct"]
		printf "| agent resident memory, same | %.1f MB |\n", v["agent_idle_rss_kb"] / 1024
		printf "| a joined process at idle (its join thread) | %s %% of one CPU |\n", v["process_idle_cpu_pct"]
		printf "| one process, 2 writers, Drop, 64 MiB: events/s | %.2f M (dropped %s) |\n", v["drain_events_per_s"] / 1e6, v["drain_dropped"]
		printf "| agent CPU per million events drained | %s s |\n", v["drain_agent_cpu_s_per_M"]
		printf "| write, 1 writer, agent as drainer | %s ns |\n", v["write_ns_agent"]
		printf "| write, 1 writer, in-process drainer | %s ns |\n", v["write_ns_inprocess"]
		printf "| ratio agent / in-process | %s× |\n", v["write_ratio_agent_to_inprocess"]
	}' "$work/agent.kv"
fi

# ---- Block under stalls: the storm of test_stall stopped, frozen,
# throttled, its pipe reader and its agent stopped (bench/bench_stall.c)
if [ $sweep_only = 0 ]; then
	echo "bench: the Block stall table ..." >&2
	if ! "$OUT/bench/bench_stall" "${qarg[@]}" 2>>"$work/stall.err"; then
		echo "- bench_stall did not measure every row (the cells say why; its last words: $(tail -1 "$work/stall.err"))"
		echo "skip failed: bench_stall" >"$work/stall.kv"
	fi
fi

# ---- the fleet egress: one agent into one ClickHouse node, then into a 2x2
# cluster, each beside ClickHouse's own insert of the rows (scripts/bench-fleet.sh)
if [ $sweep_only = 0 ]; then
	echo "bench: the fleet egress ..." >&2
	printf "\n### The fleet egress (\`ringpipe agent --clickhouse\`, one node and a 2 x 2 cluster on loopback)\n\n"
	# the agent's cutter alone, no server: what has to keep ahead of ClickHouse
	if line=$("$OUT/bench/bench_egress" "${qarg[@]}" 2>"$work/egress.err"); then
		echo "- $line"
	else
		echo "- The cutter alone: not measured: $(tail -1 "$work/egress.err")"
		echo "skip failed: bench_egress" >"$work/egress.kv"
	fi
	fleet_args=(500000 4)
	[ $quick = 1 ] && fleet_args=(250000 2)
	if line=$(OUT=$OUT scripts/bench-fleet.sh "${fleet_args[@]}" 2>"$work/fleet.err"); then
		echo "$line" | sed 's/^/- /'
	else
		echo "Not measured: $(tail -1 "$work/fleet.err")"
		echo "skip failed: fleet" >"$work/fleet.kv"
	fi
fi

# ---- latencies and the drainer's placement: bench_latency's own table
if [ $sweep_only = 0 ]; then
	echo "bench: latencies and the drainer's placement ..." >&2
	if table=$(RINGPIPE_DOTNET_TOOLS=${RINGPIPE_DOTNET_TOOLS:-$OUTPUT/dotnet-tools} \
		   "$OUT/bench/bench_latency" "${qarg[@]}" 2>"$work/latency.err"); then
		echo "$table"
	else
		printf "\n### Latencies and the drainer's placement (bench_latency)\n\n"
		echo "Not measured: $(tail -1 "$work/latency.err")"
		echo "skip failed: bench_latency" >"$work/latency.kv"
	fi
fi

rc=0
grep -q '^skip failed' "$work"/*.kv && rc=1
# a ringpipe Block run of the sweep that lost or duplicated an event
awk '$1 ~ /^rps\.sweep\.block\..*\.incomplete_max$/ && $2 != 0 { bad = 1 } END { exit !bad }' \
	"$OUTPUT/bench-last.kv" && rc=1

if [ $details = 1 ]; then
	echo
	echo "## Details: every benchmark's own tables"
	for b in "$OUT"/bench/bench_*; do
		[ -x "$b" ] || continue
		"$b" "${qarg[@]}" || { echo "| $(basename "$b") | FAILED | | |"; rc=1; }
	done
	# the sweep's own table (min-max, involuntary switches, parks per 1000 events)
	"$OUT/bench/bench_block" --sweep "${qarg[@]}" || { echo "bench_block --sweep: FAILED"; rc=1; }
fi
exit $rc
