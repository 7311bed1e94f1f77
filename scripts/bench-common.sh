# Sourced by the contender scripts (bench-lttng.sh, bench-eventpipe.sh): what
# they report the same way. Each prints "key value" lines for run-bench.sh;
# $WORK is the script's working directory.

# skip REASON: the contender cannot run here; run-bench.sh shows why
skip() { echo "skip $*"; exit 0; }
# val KEY: the value of "KEY value" on stdin
val() { awk -v k="$1" '$1 == k { print $2 }'; }
# median of the numbers on stdin, one per line
median() { sort -g | awk '{ v[NR] = $1 } END { printf "%.4f\n", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# e2e_record MODE ATTEMPTED SECONDS LOST BYTES: one end-to-end run's rates
e2e_record() {
	awk -v m="$1" -v a="$2" -v s="$3" -v l="$4" -v b="$5" 'BEGIN {
		printf "%s evs %.0f\n%s loss %.4f\n%s mbs %.3f\n", m, a / s, m, 100 * l / a, m, b / s / 1e6
	}' >>"$WORK/e2e.txt"
}

# e2e_summary MODE...: each mode's medians and worst loss over the runs
# e2e_record wrote, then the line that says the script finished
e2e_summary() {
	local mode key
	echo "attempted 1000000"
	for mode in "$@"; do
		for key in evs loss mbs; do
			echo "$mode.$key $(awk -v m="$mode" -v k=$key '$1 == m && $2 == k { print $3 }' "$WORK/e2e.txt" | median)"
		done
		echo "$mode.loss_max $(awk -v m="$mode" '$1 == m && $2 == "loss" { print $3 }' "$WORK/e2e.txt" | sort -g | tail -1)"
	done
	echo "ok 1"
}
