#!/usr/bin/env bash
# End-to-end delivery benchmark (cmd/loadtest bench): private RabbitMQ and Redis
# (scripts/peers.sh, own ports), one `relay serve` per run, delivering to EventBridge
# destinations on an in-process copy of the sandbox's EventBridge and STS (internal/awstest)
# that notes when it took each entry. Each run: N destinations in one account, E events
# published with confirms (as fast as confirms allow, or at a fixed rate); it reports
# deliveries/s, latency from publish to the bus's answer (p50/p99/max), duplicates and the
# relay's RSS (/proc/PID/status), beside a bare PutEvents loop on the same bus in the same
# run. The markdown report goes to stdout; progress to stderr.
#
#   make bench                       (or scripts/bench.sh [-runs 1:2000:0,100:200:0] [-bare 5s])
#
# Ports: BENCH_E2E_REDIS_PORT 17579, BENCH_E2E_RABBIT_PORT 26872 (+1 dist), BENCH_E2E_EPMD_PORT 24669.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v go >/dev/null || export PATH=/usr/local/go/bin:$PATH

export REDIS_PORT=${BENCH_E2E_REDIS_PORT:-17579}
export RABBIT_PORT=${BENCH_E2E_RABBIT_PORT:-26872}
export RABBIT_DIST_PORT=${BENCH_E2E_RABBIT_DIST_PORT:-26873}
export EPMD_PORT=${BENCH_E2E_EPMD_PORT:-24669}

state=$(mktemp -d "${TMPDIR:-/tmp}/relay-bench-e2e.XXXXXX")
cleanup() {
	local rc=$?
	scripts/peers.sh stop "$state" >/dev/null 2>&1 || true
	if ((rc != 0)); then echo "bench: state kept in $state" >&2; else rm -rf "$state"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

scripts/peers.sh install
eval "$(scripts/peers.sh start "$state")"
echo "bench: building relay and loadtest into $state" >&2
go build -o "$state/relay" ./cmd/relay
go build -o "$state/loadtest" ./cmd/loadtest
"$state/loadtest" bench -relay "$state/relay" -state "$state" \
	-amqp "$RELAY_TEST_AMQP_URL" -redis "$RELAY_TEST_REDIS_URL" "$@"
