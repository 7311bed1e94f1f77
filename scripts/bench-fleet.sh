#!/usr/bin/env bash
# Throughput of the agent's ClickHouse egress: one clickhouse-server on
# loopback (a private directory and ports), one `ringpipe agent
# --clickhouse`, one agent_producer writing EVENTS events from THREADS
# threads. Times from the producer's start until the agent's status shows
# every event sent and its spool empty, and prints one line: events/s, the
# RowBinary bytes/s sent, and the agent's CPU seconds per million events.
#
#   scripts/bench-fleet.sh [EVENTS_PER_THREAD [THREADS]]     (default 500000 4)
#
# Needs `make` and `make .output/default/tests/agent_producer` first. Runs
# everything at nice 19; stops what it started.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${OUT:-.output/default}
PER_THREAD=${1:-500000}
THREADS=${2:-4}
TOOL=$PWD/$OUT/ringpipe
PRODUCER=$PWD/$OUT/tests/agent_producer
SERVER=${RINGPIPE_CLICKHOUSE_SERVER:-/usr/sbin/clickhouse-server}

for f in "$TOOL" "$PRODUCER" "$SERVER"; do
	[ -x "$f" ] || { echo "bench-fleet: $f is missing (make; make $OUT/tests/agent_producer)" >&2; exit 2; }
done

dir=$(mktemp -d "${TMPDIR:-/tmp}/ringpipe-bench-fleet-XXXXXX")
ch_pid= agent_pid=
cleanup() {
	[ -n "$agent_pid" ] && kill "$agent_pid" 2>/dev/null && wait "$agent_pid" 2>/dev/null || true
	[ -n "$ch_pid" ] && kill "$ch_pid" 2>/dev/null && wait "$ch_pid" 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
http=$(free_port) tcp=$(free_port) inter=$(free_port)
cp /etc/clickhouse-server/users.xml "$dir/"
sed -e "s|/var/lib/clickhouse/|$dir/data/|g" -e "s|/var/log/clickhouse-server/|$dir/|g" \
    -e 's|<yandex>|<yandex><listen_host>127.0.0.1</listen_host>|' \
    -e "s|<http_port>8123</http_port>|<http_port>$http</http_port>|" \
    -e "s|<tcp_port>9000</tcp_port>|<tcp_port>$tcp</tcp_port>|" \
    -e "s|<interserver_http_port>9009</interserver_http_port>|<interserver_http_port>$inter</interserver_http_port>|" \
    /etc/clickhouse-server/config.xml > "$dir/config.xml"
nice -n 19 "$SERVER" --config-file="$dir/config.xml" > "$dir/server.out" 2>&1 &
ch_pid=$!
url="http://127.0.0.1:$http/"
for _ in $(seq 100); do
	curl -s "127.0.0.1:$http/ping" 2>/dev/null | grep -q Ok && break
	sleep 0.1
done
"$TOOL" fleet init --clickhouse "$url" 2>/dev/null

nice -n 19 "$TOOL" agent --socket "$dir/agent.sock" --output-dir "$dir/out" --providers AgentTest \
	--buffering-mode block --buffer-mb 16 --clickhouse "$url" --host-id bench --quiet &
agent_pid=$!
for _ in $(seq 100); do
	"$TOOL" agent status --socket "$dir/agent.sock" > /dev/null 2>&1 && break
	sleep 0.1
done

cpu_of() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
json_num() { sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p"; }

total=$((PER_THREAD * THREADS))
hz=$(getconf CLK_TCK)
cpu0=$(cpu_of "$agent_pid")
t0=$(date +%s.%N)
RINGPIPE_AGENT=$dir/agent.sock nice -n 19 "$PRODUCER" AgentTest "$THREADS" "$PER_THREAD" > "$dir/producer.json"
t_written=$(date +%s.%N)
while :; do
	st=$("$TOOL" agent status --json --socket "$dir/agent.sock")
	sent=$(echo "$st" | json_num events_sent)
	spooled=$(echo "$st" | json_num spool_batches)
	pending=$(echo "$st" | json_num files_pending)
	[ "${sent:-0}" -ge "$total" ] && [ "${spooled:-1}" = 0 ] && [ "${pending:-1}" = 0 ] && break
	sleep 0.05
done
t1=$(date +%s.%N)
cpu1=$(cpu_of "$agent_pid")
bytes=$(echo "$st" | json_num bytes_sent)
rows=$("$TOOL" fleet query --clickhouse "$url" --format TabSeparated \
	"SELECT count() FROM events WHERE host = 'bench' AND provider = 'AgentTest'")
[ "$rows" = "$total" ] || { echo "bench-fleet: $rows rows in events, $total written" >&2; exit 1; }
"$TOOL" fleet check --clickhouse "$url" --host bench > "$dir/check.txt" ||
	{ cat "$dir/check.txt" >&2; exit 1; }

python3 - "$total" "$t0" "$t_written" "$t1" "$cpu0" "$cpu1" "$hz" "$bytes" "$THREADS" <<'EOF'
import sys
n, t0, tw, t1, c0, c1, hz, b, th = sys.argv[1:]
n = int(n); secs = float(t1) - float(t0); cpu = (int(c1) - int(c0)) / int(hz)
print(f"fleet egress: {n} events from {th} threads into one ClickHouse node in {secs:.2f} s "
      f"(written in {float(tw) - float(t0):.2f} s): {n / secs:,.0f} rows/s, "
      f"{int(b) / secs / 1e6:.1f} MB/s RowBinary, agent CPU {cpu / (n / 1e6):.2f} s per "
      f"million events; fleet check 0")
EOF
