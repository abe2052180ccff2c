#!/usr/bin/env bash
# A short fault drill of the relay on private local peers (cmd/loadtest drill):
# RabbitMQ (scripts/peers.sh), Redis with AOF (appendfsync always), kinesalite, the cloud
# sandbox (cmd/sandbox) and two `relay serve` replicas sharing one config (3 destinations,
# one per connector, lease_ttl 2s). Under a steady publish load (200 events/s for 90 s) it
# SIGKILLs a replica every 5 s and starts it again, restarts RabbitMQ once and SIGKILLs
# and restarts Redis once. Two sink faults sit in proxies the load command owns, between
# the replicas and the sandbox: EventBridge answers every second PutEvents with
# ThrottlingException from t+5s for 60 s (-throttle-at, -throttle-for), and the path to
# Kinesis stops answering from t+75s for 55 s, until more than the relay's 30 s write
# timeout after the last replica kill (t+85s), so a write times out in a replica the
# drill does not kill first (-stall-at, -stall-for; a length of 0 turns a fault off).
# Then it waits for everything to drain and checks, from the sandbox's /arrived and the
# account log in Redis, that every confirmed event reached each matching destination at
# least once, that the log and each destination's first arrivals follow the publisher's
# confirmed order (the order the queue received them), and that no destination ended
# disabled; duplicates are counted. Exits non-zero when the check fails. Everything
# listens on 127.0.0.1 only.
#
#   make drill                     (or scripts/drill.sh [loadtest drill flags], e.g. -rate 100 -duration 30s)
#   DRILL_KEEP=1 scripts/drill.sh  keep the state directory (logs, AOF) for a look afterwards (kept on failure too)
#
# Ports (below 32768, away from peers.sh's, the demo's and bench-ingest's defaults):
# DRILL_REDIS_PORT 17479, DRILL_RABBIT_PORT 26772 (+1 dist), DRILL_EPMD_PORT 24569,
# sandbox 24680-24683 and 24685, kinesalite 24684; the fault proxies take free ports on 127.0.0.1.
#
# DRILL_CLUSTER=1 (scripts/drill-cluster.sh, make drill-cluster) drills on clusters instead:
# no peers.sh peers; the load command starts a Redis Cluster (3 masters + 3 replicas) and a
# 3-node RabbitMQ cluster itself (internal/testpeer, free ports in 20000-32000), and the
# sandbox and kinesalite move to 24690-24695 so both drills can run at once.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v go >/dev/null || export PATH=/usr/local/go/bin:$PATH

export REDIS_PORT=${DRILL_REDIS_PORT:-17479}
export RABBIT_PORT=${DRILL_RABBIT_PORT:-26772}
export RABBIT_DIST_PORT=${DRILL_RABBIT_DIST_PORT:-26773}
export EPMD_PORT=${DRILL_EPMD_PORT:-24569}
STS_PORT=24680 EVENTS_PORT=24681 PUBSUB_PORT=24682 SANDBOX_PORT=24683 KINESALITE_PORT=24684 KINESIS_PORT=24685
if [[ -n ${DRILL_CLUSTER:-} ]]; then
	STS_PORT=24690 EVENTS_PORT=24691 PUBSUB_PORT=24692 SANDBOX_PORT=24693 KINESALITE_PORT=24694 KINESIS_PORT=24695
fi
KINESALITE_DIR=${KINESALITE_DIR:-$HOME/.cache/relay-test/kinesalite-3.3.3}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# start_redis DIR: our own Redis with AOF fsynced on every write, its pid in DIR/redis.pid
# (peers.sh then takes it for its own and only starts RabbitMQ).
start_redis() {
	local dir=$1 i
	mkdir -p "$dir/redis"
	setsid redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly yes --appendfsync always \
		--dir "$dir/redis" --daemonize no --logfile '' </dev/null >>"$dir/redis.log" 2>&1 &
	echo $! >"$dir/redis.pid"
	disown $! 2>/dev/null || true
	for ((i = 0; i < 200; i++)); do
		[[ $(redis-cli -p "$REDIS_PORT" ping 2>/dev/null) == PONG ]] && return 0
		sleep 0.05
	done
	echo "drill: redis did not answer on 127.0.0.1:$REDIS_PORT" >&2
	return 1
}

# wait_gone PID SECONDS
wait_gone() {
	local i
	for ((i = 0; i < $2 * 10; i++)); do
		kill -0 "$1" 2>/dev/null || return 0
		sleep 0.1
	done
	return 1
}

# Hooks the load command runs during the drill (DRILL_STATE set by the main run below).
if [[ ${1:-} == restart-rabbit ]]; then
	pid=$(<"$DRILL_STATE/rabbit.pid")
	echo "drill: stopping RabbitMQ (pid $pid, SIGTERM)" >&2
	kill -TERM "$pid"
	wait_gone "$pid" 40 || { kill -KILL "$pid"; wait_gone "$pid" 5; }
	scripts/peers.sh start "$DRILL_STATE" >/dev/null
	exit 0
fi
if [[ ${1:-} == restart-redis ]]; then
	pid=$(<"$DRILL_STATE/redis.pid")
	echo "drill: SIGKILL Redis (pid $pid); starting it again on its AOF" >&2
	kill -KILL "$pid"
	wait_gone "$pid" 10
	start_redis "$DRILL_STATE"
	exit 0
fi

state=$(mktemp -d "${TMPDIR:-/tmp}/relay-drill.XXXXXX")
export DRILL_STATE=$state
pids=()
cleanup() {
	local rc=$? p
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	scripts/peers.sh stop "$state" >/dev/null 2>&1 || true
	if [[ -n ${DRILL_KEEP:-} ]] || ((rc != 0)); then echo "drill: state kept in $state" >&2; else rm -rf "$state"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

scripts/peers.sh install
ports=("$STS_PORT" "$EVENTS_PORT" "$PUBSUB_PORT" "$SANDBOX_PORT" "$KINESALITE_PORT" "$KINESIS_PORT")
[[ -n ${DRILL_CLUSTER:-} ]] || ports+=("$REDIS_PORT" "$RABBIT_PORT")
for p in "${ports[@]}"; do
	! port_open "$p" || { echo "drill: 127.0.0.1:$p is taken; is another drill running?" >&2; exit 1; }
done
if [[ -n ${DRILL_CLUSTER:-} ]]; then
	peer_flags=(-cluster "$state/peers")
else
	start_redis "$state"
	eval "$(scripts/peers.sh start "$state")"
	peer_flags=(-hook "$PWD/scripts/drill.sh" -amqp "$RELAY_TEST_AMQP_URL" -redis "$RELAY_TEST_REDIS_URL")
fi

echo "drill: building relay, sandbox and loadtest into $state" >&2
go build -o "$state/relay" ./cmd/relay
go build -o "$state/sandbox" ./cmd/sandbox
go build -o "$state/loadtest" ./cmd/loadtest

setsid node -e "require('$KINESALITE_DIR/node_modules/kinesalite')({createStreamMs: 50}).listen($KINESALITE_PORT, '127.0.0.1')" \
	</dev/null >"$state/kinesalite.log" 2>&1 &
pids+=($!)
for ((i = 0; i < 200; i++)); do port_open "$KINESALITE_PORT" && break; sleep 0.1; done
setsid "$state/sandbox" --sts "127.0.0.1:$STS_PORT" --events "127.0.0.1:$EVENTS_PORT" --pubsub-port "$PUBSUB_PORT" \
	--admin "127.0.0.1:$SANDBOX_PORT" --kinesis "127.0.0.1:$KINESIS_PORT" --kinesalite "http://127.0.0.1:$KINESALITE_PORT" \
	</dev/null >"$state/sandbox.log" 2>&1 &
pids+=($!)
for ((i = 0; i < 200; i++)); do grep -q 'sandbox: ready' "$state/sandbox.log" && break; sleep 0.1; done
SANDBOX=http://127.0.0.1:$SANDBOX_PORT
curl -sS --fail-with-body -X POST -d '{"name": "drill"}' "$SANDBOX/streams" >/dev/null
curl -sS --fail-with-body -X POST -d '{"project": "relay-drill", "topic": "drill-events", "labels": {"mercamap-account": "acct_drill"}}' \
	"$SANDBOX/topics" >/dev/null

"$state/loadtest" drill -relay "$state/relay" -state "$state" "${peer_flags[@]}" \
	-sts "http://127.0.0.1:$STS_PORT" -events "http://127.0.0.1:$EVENTS_PORT" -kinesis "http://127.0.0.1:$KINESIS_PORT" \
	-pubsub "127.0.0.1:$PUBSUB_PORT" -sandbox "$SANDBOX" "$@"
