#!/usr/bin/env bash
# Measures the relay's ingest beside a bare RabbitMQ consumer in the same run
# (cmd/benchingest), on private peers started for the benchmark and stopped on exit.
#
#   scripts/bench-ingest.sh [benchingest flags]      e.g. -n 20000 -runs 5 -cpuprofile /tmp/relay.pprof
#   scripts/bench-ingest.sh -prefill                  fill each queue first: time the consumers alone
#   BENCH_ARGS='-n 20000' make bench-ingest
#
# The peers use their own ports (below 32768, away from peers.sh's defaults, so a test
# run or `make demo` can go on beside it) and their own Redis, which the benchmark may FLUSHDB.
# The markdown report goes to stdout; progress goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v go >/dev/null || export PATH=/usr/local/go/bin:$PATH

export REDIS_PORT=${BENCH_REDIS_PORT:-17379}
export RABBIT_PORT=${BENCH_RABBIT_PORT:-26672}
export RABBIT_DIST_PORT=${BENCH_RABBIT_DIST_PORT:-26673}
export EPMD_PORT=${BENCH_EPMD_PORT:-24469}

state=$(mktemp -d "${TMPDIR:-/tmp}/relay-bench.XXXXXX")
cleanup() {
	scripts/peers.sh stop "$state" || true
	rm -rf "$state"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

scripts/peers.sh install
peer_env=$(scripts/peers.sh start "$state")
eval "$peer_env"

# shellcheck disable=SC2086 # BENCH_ARGS is a list of flags
go run ./cmd/benchingest \
	-amqp "$RELAY_TEST_AMQP_URL" -redis "$RELAY_TEST_REDIS_URL" -flushdb \
	-peer-pids "rabbitmq=$(<"$state/rabbit.pid"),redis=$(<"$state/redis.pid")" \
	${BENCH_ARGS:-} "$@"
