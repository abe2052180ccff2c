#!/usr/bin/env bash
# The relay's benchmarks on private local peers, written into docs/benchmarks.md
# (between its "make bench" markers; everything else in the file is left alone):
#
# 1. Ingest (cmd/benchingest -prefill): the relay's consumer draining a full quorum queue
#    into Redis, beside a bare amqp091-go consumer on the same broker, median of 3 runs;
#    1 KB events, then 16 KB and 64 KB.
# 2. End to end (cmd/loadtest bench): one `relay serve` per row, delivering to EventBridge
#    destinations on an in-process copy of the sandbox's EventBridge and STS
#    (internal/awstest) that notes when it answered each entry. Rows grow one thing at a
#    time: publish rate, event size, destinations. Each reports deliveries/s, latency from
#    publish to the bus's answer, duplicates and the relay's RSS; one-destination rows also
#    run the same load through a bare consumer that puts each delivery on the same bus
#    (the "bare pipeline"), and relay-added latency is the relay's percentile minus it.
#
#   make bench                          all of it, then docs/benchmarks.md is updated
#   scripts/bench.sh -runs 1:2000:200   end to end only, these rows (destinations:events:rate[:bytes])
#   BENCH_DOC=- scripts/bench.sh        print the report instead of writing the doc
#
# Progress goes to stderr. Ports: BENCH_E2E_REDIS_PORT 17579, BENCH_E2E_RABBIT_PORT 26872
# (+1 dist), BENCH_E2E_EPMD_PORT 24669. Everything listens on 127.0.0.1 only.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v go >/dev/null || export PATH=/usr/local/go/bin:$PATH

export REDIS_PORT=${BENCH_E2E_REDIS_PORT:-17579}
export RABBIT_PORT=${BENCH_E2E_RABBIT_PORT:-26872}
export RABBIT_DIST_PORT=${BENCH_E2E_RABBIT_DIST_PORT:-26873}
export EPMD_PORT=${BENCH_E2E_EPMD_PORT:-24669}
doc=${BENCH_DOC:-docs/benchmarks.md}

state=$(mktemp -d "${TMPDIR:-/tmp}/relay-bench.XXXXXX")
cleanup() {
	local rc=$?
	scripts/peers.sh stop "$state" >/dev/null 2>&1 || true
	if ((rc != 0)); then echo "bench: state kept in $state" >&2; else rm -rf "$state"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

scripts/peers.sh install
eval "$(scripts/peers.sh start "$state")"
echo "bench: building relay, loadtest and benchingest into $state" >&2
go build -o "$state/relay" ./cmd/relay
go build -o "$state/loadtest" ./cmd/loadtest
go build -o "$state/benchingest" ./cmd/benchingest

report=$state/report.md
{
	echo "## Latest \`make bench\` run"
	echo
	echo "Written by \`scripts/bench.sh\` $(date -u '+%Y-%m-%d %H:%M UTC') at commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet -- . ':!docs/benchmarks.md' 2>/dev/null || echo ' with uncommitted changes'). Private RabbitMQ and Redis from \`scripts/peers.sh\`; how each part is measured is in the sections below this one."
	echo
} >"$report"
if (($# == 0)); then
	# 1 KB events (the aim's), then larger ones: how ingest grows with event size.
	for size_n in 1024:50000:5000 16384:10000:1000 65536:3000:300; do
		IFS=: read -r size n warm <<<"$size_n"
		echo "bench: ingest of $size B events (cmd/benchingest -prefill, 3 runs)" >&2
		"$state/benchingest" -prefill -size "$size" -n "$n" -warmup "$warm" \
			-amqp "$RELAY_TEST_AMQP_URL" -redis "$RELAY_TEST_REDIS_URL" -flushdb \
			-peer-pids "rabbitmq=$(<"$state/rabbit.pid"),redis=$(<"$state/redis.pid")" >>"$report"
		echo >>"$report"
	done
fi
echo "bench: end to end (cmd/loadtest bench)" >&2
"$state/loadtest" bench -relay "$state/relay" -state "$state" \
	-amqp "$RELAY_TEST_AMQP_URL" -redis "$RELAY_TEST_REDIS_URL" "$@" >>"$report"

if [[ $doc == - ]]; then
	cat "$report"
	exit 0
fi
begin='<!-- make bench: begin -->' end='<!-- make bench: end -->'
if ! grep -qF "$begin" "$doc" || ! grep -qF "$end" "$doc"; then
	if grep -qF "$begin" "$doc" || grep -qF "$end" "$doc"; then
		echo "bench: $doc has only one of its two markers; left it alone" >&2
		exit 1 # cleanup keeps the state directory, report.md in it
	fi
	printf '\n%s\n%s\n' "$begin" "$end" >>"$doc"
fi
awk -v report="$report" -v begin="$begin" -v end="$end" '
	index($0, begin) == 1 { print; while ((getline line < report) > 0) print line; skip = 1; next }
	index($0, end) == 1 { skip = 0 }
	!skip' "$doc" >"$state/doc.md"
cp "$state/doc.md" "$doc"
echo "bench: wrote $doc" >&2
