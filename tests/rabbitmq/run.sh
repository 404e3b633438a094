#!/usr/bin/env bash
# A live RabbitMQ run of follow mode (see README.md): a private RabbitMQ on loopback, a stream
# queue published with confirms, the node following its directory while RabbitMQ's retention
# deletes segments, one node SIGKILL and one broker restart under load; then every
# confirmed message must be in the remote tier exactly once, byte for byte.
#
#   tests/rabbitmq/run.sh [--duration SECONDS] [--rate MSGS_PER_S] [--work DIR] [--keep]
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)

duration=120
rate=600
work=""
keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    --duration) duration=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    *) echo "usage: $0 [--duration SECONDS] [--rate MSGS_PER_S] [--work DIR] [--keep]" >&2; exit 2 ;;
  esac
done

rmq_bin=/usr/lib/rabbitmq/bin
py=/usr/bin/python3 # Debian's, where python3-pika is
for need in "$rmq_bin/rabbitmq-server" "$rmq_bin/rabbitmqctl" "$py"; do
  [ -x "$need" ] || { echo "missing $need: apt-get install rabbitmq-server python3-pika" >&2; exit 2; }
done
"$py" -c 'import pika' 2>/dev/null || { echo "missing pika: apt-get install python3-pika" >&2; exit 2; }

[ -n "$work" ] || work=$(mktemp -d /tmp/streamtier-rabbitmq-XXXXXX)
mkdir -p "$work"
work=$(cd "$work" && pwd)
say() { echo "rabbitmq-run: $(date +%T) $*" >&2; }

say "work directory $work"
go build -o "$work/node" ./cmd/node # before HOME moves: Go's caches stay where they are

# A private broker: its own node name, ports, data, logs and Erlang cookie.
port=$((25672 + RANDOM % 2000))
export HOME=$work/home
export RABBITMQ_NODENAME=streamtier$port@localhost
export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
export RABBITMQ_NODE_PORT=$port
export RABBITMQ_DIST_PORT=$((port + 10000))
export RABBITMQ_MNESIA_BASE=$work/mnesia
export RABBITMQ_LOG_BASE=$work/rabbit-log
export RABBITMQ_PID_FILE=$work/rabbit.pid
export RABBITMQ_ENABLED_PLUGINS_FILE=$work/enabled_plugins
export RABBITMQ_CONFIG_FILE=$work/rabbitmq
mkdir -p "$HOME" "$RABBITMQ_MNESIA_BASE" "$RABBITMQ_LOG_BASE"
echo '[].' > "$RABBITMQ_ENABLED_PLUGINS_FILE"
cat > "$work/rabbitmq.conf" <<EOF
loopback_users = none
listeners.tcp.default = 127.0.0.1:$port
EOF

rabbit_pid=""
node_pid=""
cleanup() {
  set +e
  [ -n "$node_pid" ] && kill "$node_pid" 2>/dev/null && wait "$node_pid" 2>/dev/null
  [ -n "$pub_pid" ] && kill "$pub_pid" 2>/dev/null
  stop_rabbit
  if [ "$keep" = 0 ] && [ "${ok:-0}" = 1 ]; then rm -rf "$work"; else echo "rabbitmq-run: work directory kept: $work" >&2; fi
}
start_rabbit() {
  "$rmq_bin/rabbitmq-server" < /dev/null > "$work/rabbit-$1.out" 2>&1 &
  rabbit_pid=$!
  "$rmq_bin/rabbitmqctl" wait --timeout 120 "$RABBITMQ_PID_FILE" > /dev/null
  say "RabbitMQ $RABBITMQ_NODENAME up on 127.0.0.1:$port (pid $rabbit_pid)"
}
stop_rabbit() {
  [ -n "$rabbit_pid" ] || return 0
  "$rmq_bin/rabbitmqctl" stop > /dev/null 2>&1 || kill "$rabbit_pid" 2>/dev/null
  wait "$rabbit_pid" 2>/dev/null || true
  rabbit_pid=""
}
pub_pid=""
trap cleanup EXIT

start_rabbit 1

# A stream queue whose retention deletes segments while the node follows: 512 KiB
# segments, 4 MiB kept (about 7 s of the load).
"$py" - "$port" <<'EOF'
import sys, pika
conn = pika.BlockingConnection(pika.ConnectionParameters(host="127.0.0.1", port=int(sys.argv[1])))
conn.channel().queue_declare(queue="orders", durable=True, arguments={
    "x-queue-type": "stream", "x-max-length-bytes": 4 << 20, "x-stream-max-segment-size-bytes": 512 << 10})
conn.close()
EOF
stream_dir=$(find "$RABBITMQ_MNESIA_BASE" -type d -path '*/stream/__orders_*' | head -1)
[ -n "$stream_dir" ] || { echo "no stream directory for orders under $RABBITMQ_MNESIA_BASE" >&2; exit 1; }
say "stream directory $stream_dir"

# The fragment target must be well below what RabbitMQ keeps (4 MiB): with the default
# (64 MiB) every segment is deleted before a fragment of it is cut, and the node can only
# declare gaps.
cat > "$work/node.yaml" <<EOF
data_dir: $work/node-data
follow_interval: 200ms
streams:
  - id: orders
    log_dir: $stream_dir
    follow: true
    fragment_target_size: 512KiB
    fragment_max_age: 2s
    persist_interval: 500ms
EOF
start_node() {
  "$work/node" run --config "$work/node.yaml" --progress off >> "$work/node-$1.log" 2>&1 &
  node_pid=$!
  say "node run $1 (pid $node_pid)"
}

"$py" tests/rabbitmq/publish.py --port "$port" --queue orders --rate "$rate" --duration "$duration" \
  --confirmed "$work/confirmed" --unconfirmed "$work/unconfirmed" 2> "$work/publish.err" &
pub_pid=$!
start_node 1

# A node SIGKILL at a quarter of the run, a broker restart at half of it, both under load.
sleep $((duration / 4))
kill -KILL "$node_pid"; wait "$node_pid" 2>/dev/null || true
say "node SIGKILLed"
start_node 2
sleep $((duration / 4))
say "restarting RabbitMQ"
stop_rabbit
start_rabbit 2
wait "$pub_pid"; pub_pid=""
say "publisher done: $(tail -1 "$work/publish.err")"

# The node must catch up with everything RabbitMQ committed; then it stops cleanly.
"$work/node" await orders --offset committed --timeout 120s --config "$work/node.yaml" > "$work/await.json"
say "node caught up: $(cat "$work/await.json")"
kill -TERM "$node_pid"; wait "$node_pid" || { echo "node did not stop cleanly" >&2; exit 1; }
node_pid=""
stop_rabbit

# What the remote tier holds, read from the bucket alone (no node, no local log).
"$work/node" read orders --offline --format records --config "$work/node.yaml" > "$work/records.jsonl" 2> "$work/read.err"
"$work/node" verify orders --config "$work/node.yaml" > "$work/verify.txt" 2>&1 || { cat "$work/verify.txt" >&2; exit 1; }
say "verify: $(tail -1 "$work/verify.txt")"
grep -h '"message":"the local log diverged\|declare\|"gap' "$work"/node-*.log | head -5 >&2 || true
"$py" tests/rabbitmq/check.py --records "$work/records.jsonl" --confirmed "$work/confirmed" --unconfirmed "$work/unconfirmed"
ok=1
say "every confirmed message is in the remote tier exactly once"
