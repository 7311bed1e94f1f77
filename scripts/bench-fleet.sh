#!/usr/bin/env bash
# Throughput of the agent's ClickHouse egress, on loopback (private
# directories and ports): one `ringpipe agent --clickhouse` fed by one
# agent_producer writing EVENTS events from THREADS threads, first into one
# clickhouse-server, then into a cluster of two shards of two replicas with
# ZooKeeper (`fleet init --cluster`; the agent with --clickhouse-shard and
# the two replicas of its host's shard). Each run is timed from the
# producer's start until the agent's status shows every event sent and its
# spool empty, and checked (every row there, `fleet check` 0). Beside each,
# ClickHouse's own RowBinary inserts of the same rows (exported from the
# table, posted with curl into copies of the schema: the Distributed table
# on the cluster), all in one insert, then in the agent's batches one
# after another, then in its batches as many at a time as the agent has
# senders, to show whether the agent or the server sets the pace.
# Prints one line per run: rows/s, the RowBinary bytes/s sent, the agent's
# CPU seconds per million events, how long its senders were at ClickHouse
# (when that is most of the run, the server sets the pace), and
# ClickHouse's own rows/s.
#
#   scripts/bench-fleet.sh [EVENTS_PER_THREAD [THREADS]]     (default 500000 4)
#
# FLEET_CLUSTER=0 leaves the cluster out (it needs java and ZooKeeper).
# FLEET_SENDERS=N runs the agent with --clickhouse-senders N (default: the
# agent's own default).
#
# Everything shares the machine's CPUs, so the agent's CPU is taken from
# the servers' while ClickHouse's own inserts have the machine to
# themselves. FLEET_PIN=1 runs the servers (ClickHouse, ZooKeeper) on the
# last CPU and the agent, its producer and curl on the others, as if they
# were two hosts (on 2 CPUs the servers then have one CPU, and two inserts
# at once gain nothing).
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
JAVA=${RINGPIPE_JAVA:-/usr/bin/java}
CLUSTER=${FLEET_CLUSTER:-1}
SENDERS=${FLEET_SENDERS:-}
ncpu=$(nproc)
server_cpus=() client_cpus=()
if [ "${FLEET_PIN:-0}" = 1 ] && [ "$ncpu" -ge 2 ] && command -v taskset > /dev/null; then
	server_cpus=(taskset -c "$((ncpu - 1))")
	client_cpus=(taskset -c "0-$((ncpu - 2))")
fi

for f in "$TOOL" "$PRODUCER" "$SERVER"; do
	[ -x "$f" ] || { echo "bench-fleet: $f is missing (make; make $OUT/tests/agent_producer)" >&2; exit 2; }
done
if [ "$CLUSTER" = 1 ] && { [ ! -x "$JAVA" ] || [ ! -r /usr/share/java/zookeeper.jar ]; }; then
	echo "bench-fleet: java or ZooKeeper is missing (make deps; or FLEET_CLUSTER=0)" >&2
	exit 2
fi

dir=$(mktemp -d "${TMPDIR:-/tmp}/ringpipe-bench-fleet-XXXXXX")
pids=() agent_pid=
cleanup() {
	[ -n "$agent_pid" ] && kill "$agent_pid" 2>/dev/null && wait "$agent_pid" 2>/dev/null || true
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$dir"
}
trap cleanup EXIT

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
declare -A HTTP TCP

# node_ports NAME: its ports, before any configuration names them
node_ports() {
	HTTP[$1]=$(free_port) TCP[$1]=$(free_port)
}

# node_up NAME [CONFIG_D_XML]: a server on NAME's ports, ready when this returns
node_up() {
	local d=$dir/$1 inter
	inter=$(free_port)
	mkdir -p "$d/config.d"
	cp /etc/clickhouse-server/users.xml "$d/"
	sed -e "s|/var/lib/clickhouse/|$d/data/|g" -e "s|/var/log/clickhouse-server/|$d/|g" \
	    -e 's|<yandex>|<yandex><listen_host>127.0.0.1</listen_host><interserver_http_host>127.0.0.1</interserver_http_host>|' \
	    -e "s|<http_port>8123</http_port>|<http_port>${HTTP[$1]}</http_port>|" \
	    -e "s|<tcp_port>9000</tcp_port>|<tcp_port>${TCP[$1]}</tcp_port>|" \
	    -e "s|<interserver_http_port>9009</interserver_http_port>|<interserver_http_port>$inter</interserver_http_port>|" \
	    /etc/clickhouse-server/config.xml > "$d/config.xml"
	[ -n "${2:-}" ] && echo "$2" > "$d/config.d/cluster.xml"
	nice -n 19 "${server_cpus[@]}" "$SERVER" --config-file="$d/config.xml" > "$d/server.out" 2>&1 &
	pids+=($!)
	for _ in $(seq 300); do
		curl -s "127.0.0.1:${HTTP[$1]}/ping" 2>/dev/null | grep -q Ok && return 0
		sleep 0.1
	done
	echo "bench-fleet: clickhouse-server $1 did not answer (see $d)" >&2
	exit 1
}

zk_up() {
	local d=$dir/zk port
	port=$(free_port)
	mkdir -p "$d"
	printf 'tickTime=500\ndataDir=%s\nclientPort=%s\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\n4lw.commands.whitelist=ruok\n' \
		"$d" "$port" > "$d/zoo.cfg"
	nice -n 19 "${server_cpus[@]}" "$JAVA" -Xmx128m -cp "/etc/zookeeper/conf:/usr/share/java/*" \
		org.apache.zookeeper.server.quorum.QuorumPeerMain "$d/zoo.cfg" > "$d/zk.out" 2>&1 &
	pids+=($!)
	for _ in $(seq 300); do
		[ "$(timeout 1 python3 -c "import socket,sys; s=socket.create_connection(('127.0.0.1',$port)); s.send(b'ruok'); print(s.recv(4).decode())" 2>/dev/null)" = imok ] && { ZK_PORT=$port; return 0; }
		sleep 0.1
	done
	echo "bench-fleet: ZooKeeper did not answer (see $d)" >&2
	exit 1
}

cpu_of() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
json_num() { sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p"; }

# ch_own URL SENDERS [CLUSTER]: ClickHouse's own RowBinary inserts of the
# agent's rows, into copies of the schema: all in one insert (database
# bench_one), then batch by batch as the agent cut them, one insert after
# another (bench_batches), then SENDERS at a time (bench_together), events
# only; prints the three rows/s
ch_own() {
	local url=$1 senders=$2 cluster_opt=() t0 t1 t2 t3 n m k sel s b i=0
	[ -n "${3:-}" ] && cluster_opt=(--cluster "$3")
	for db in bench_one bench_batches bench_together; do
		"$TOOL" fleet init --clickhouse "${url}?database=$db" "${cluster_opt[@]}" > /dev/null 2>&1
	done
	sel="SELECT * FROM ringpipe.events WHERE host = 'bench' AND provider = 'AgentTest'"
	curl -sf "$url" --data-binary "$sel FORMAT RowBinary" > "$dir/rows.bin"
	curl -sf "$url" --data-binary "SELECT DISTINCT stream, batch_seq FROM ($sel) FORMAT TabSeparated" |
	while read -r s b; do
		curl -sf "$url" --data-binary "$sel AND stream = $s AND batch_seq = $b FORMAT RowBinary" \
			> "$dir/batch.$i.bin"
		i=$((i + 1))
	done
	t0=$(date +%s.%N)
	ch_insert "$url" bench_one "$dir/rows.bin"
	t1=$(date +%s.%N)
	for f in "$dir"/batch.*.bin; do ch_insert "$url" bench_batches "$f"; done
	t2=$(date +%s.%N)
	printf '%s\0' "$dir"/batch.*.bin |
		"${client_cpus[@]}" xargs -0 -P "$senders" -I{} curl -sf --data-binary @{} -o /dev/null \
			"${url}?insert_distributed_sync=1&query=INSERT%20INTO%20bench_together.events%20FORMAT%20RowBinary"
	t3=$(date +%s.%N)
	rm -f "$dir"/batch.*.bin
	n=$(curl -sf "$url" --data-binary "SELECT count() FROM bench_one.events")
	m=$(curl -sf "$url" --data-binary "SELECT count() FROM bench_batches.events")
	k=$(curl -sf "$url" --data-binary "SELECT count() FROM bench_together.events")
	[ "$n" = "$total" ] && [ "$m" = "$total" ] && [ "$k" = "$total" ] ||
		{ echo "bench-fleet: ClickHouse's own inserts left $n, $m and $k rows of $total" >&2; exit 1; }
	python3 -c "print(f'{$total / ($t1 - $t0):,.0f} rows/s in one insert, {$total / ($t2 - $t1):,.0f} rows/s in the agent\'s batches one after another, {$total / ($t3 - $t2):,.0f} rows/s $senders at a time')"
}

# ch_insert URL DATABASE FILE: FILE's RowBinary rows into DATABASE.events
ch_insert() {
	"${client_cpus[@]}" curl -sf "${1}?insert_distributed_sync=1&query=INSERT%20INTO%20$2.events%20FORMAT%20RowBinary" \
		--data-binary @"$3" > /dev/null
}

total=$((PER_THREAD * THREADS))
hz=$(getconf CLK_TCK)

# run_agent WHAT QUERY_URL AGENT_OPTIONS...: one timed run, one line
run_agent() {
	local what=$1 url=$2 cpu0 cpu1 t0 tw t1 st sent spooled pending bytes rows own
	shift 2
	rm -rf "$dir/out" "$dir/agent.sock"
	nice -n 19 "${client_cpus[@]}" "$TOOL" agent --socket "$dir/agent.sock" --output-dir "$dir/out" --providers AgentTest \
		--buffering-mode block --buffer-mb 16 --host-id bench --quiet \
		${SENDERS:+--clickhouse-senders "$SENDERS"} "$@" &
	agent_pid=$!
	for _ in $(seq 100); do
		"$TOOL" agent status --socket "$dir/agent.sock" > /dev/null 2>&1 && break
		sleep 0.1
	done
	cpu0=$(cpu_of "$agent_pid")
	t0=$(date +%s.%N)
	RINGPIPE_AGENT=$dir/agent.sock nice -n 19 "${client_cpus[@]}" "$PRODUCER" AgentTest "$THREADS" "$PER_THREAD" > "$dir/producer.json"
	tw=$(date +%s.%N)
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
	kill "$agent_pid" && wait "$agent_pid" || true
	agent_pid=
	bytes=$(echo "$st" | json_num bytes_sent)
	send_ms=$(echo "$st" | json_num send_ms)
	all_ms=$(echo "$st" | json_num all_senders_ms)
	window_ms=$(echo "$st" | json_num send_window_ms)
	senders=$(echo "$st" | json_num senders)
	# on the cluster a replica fetches what its twin took in the background,
	# and a Distributed read may ask the one that has not yet
	for _ in $(seq 300); do
		rows=$("$TOOL" fleet query --clickhouse "$url" --format TabSeparated \
			"SELECT count() FROM events WHERE host = 'bench' AND provider = 'AgentTest'")
		[ "$rows" = "$total" ] && break
		sleep 0.2
	done
	[ "$rows" = "$total" ] || { echo "bench-fleet: $rows rows in events, $total written" >&2; exit 1; }
	for try in $(seq 10); do
		"$TOOL" fleet check --clickhouse "$url" --host bench > "$dir/check.txt" && break
		[ "$try" = 10 ] && { cat "$dir/check.txt" >&2; exit 1; }
		sleep 0.5
	done
	own=$(ch_own "$url" "${senders:-1}" "${CLUSTER_NAME:-}")
	python3 - "$total" "$t0" "$tw" "$t1" "$cpu0" "$cpu1" "$hz" "$bytes" "$THREADS" "$what" "$own" \
		"${send_ms:-0}" "${senders:-1}" "${all_ms:-0}" "${window_ms:-0}" <<'EOF'
import sys
n, t0, tw, t1, c0, c1, hz, b, th, what, own, send_ms, senders, all_ms, window_ms = sys.argv[1:]
window = max(int(window_ms), 1) / 1000
n = int(n); secs = float(t1) - float(t0); cpu = (int(c1) - int(c0)) / int(hz)
print(f"fleet egress: {n} events from {th} threads into {what} in {secs:.2f} s "
      f"(written in {float(tw) - float(t0):.2f} s): {n / secs:,.0f} rows/s from the first "
      f"write to the last acknowledgement, {n / window:,.0f} rows/s over the {window:.2f} s "
      f"from the first insert to the last, {int(b) / window / 1e6:.1f} MB/s RowBinary; "
      f"agent CPU {cpu / (n / 1e6):.2f} s per million events; of those {window:.2f} s, "
      f"{int(send_ms) / 1000:.2f} s with an insert in flight and {int(all_ms) / 1000:.2f} s "
      f"with all {senders} senders' in flight; fleet check 0; ClickHouse's own RowBinary "
      f"inserts of the same rows: {own}")
EOF
}

# ---- one node
node_ports one
node_up one
"$TOOL" fleet init --clickhouse "http://127.0.0.1:${HTTP[one]}/" > /dev/null 2>&1
run_agent "one ClickHouse node" "http://127.0.0.1:${HTTP[one]}/" \
	--clickhouse "http://127.0.0.1:${HTTP[one]}/"
[ "$CLUSTER" = 1 ] || exit 0
# the node's merges would take CPU from the cluster's run
kill "${pids[0]}" && wait "${pids[0]}" 2>/dev/null || true

# ---- two shards of two replicas, ZooKeeper
zk_up
names=(s1r1 s1r2 s2r1 s2r2)
for n in "${names[@]}"; do node_ports "$n"; done
shards=
for s in 1 2; do
	shards+="<shard><internal_replication>true</internal_replication>"
	for r in 1 2; do
		shards+="<replica><host>127.0.0.1</host><port>${TCP[s${s}r${r}]}</port></replica>"
	done
	shards+="</shard>"
done
for n in "${names[@]}"; do
	node_up "$n" "<yandex><remote_servers replace=\"replace\"><fleet>$shards</fleet></remote_servers>
<zookeeper replace=\"replace\"><node><host>127.0.0.1</host><port>$ZK_PORT</port></node></zookeeper>
<macros replace=\"replace\"><shard>0${n:1:1}</shard><replica>$n</replica></macros></yandex>"
done
first="http://127.0.0.1:${HTTP[s1r1]}/"
"$TOOL" fleet init --clickhouse "$first" --cluster fleet > /dev/null 2>&1
# the agent ships to the replicas of the shard its host's rows belong to
shard=$(( $(curl -sf "$first" --data-binary "SELECT cityHash64('bench') % 2") + 1 ))
CLUSTER_NAME=fleet run_agent "a 2-shard x 2-replica cluster (shard $shard's replicas)" "$first" \
	--clickhouse-shard --clickhouse "http://127.0.0.1:${HTTP[s${shard}r1]}/" \
	--clickhouse "http://127.0.0.1:${HTTP[s${shard}r2]}/"
