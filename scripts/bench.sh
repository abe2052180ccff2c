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
#    (the "bare pipeline"), and relay-added latency is the relay's percentile minus it;
#    many-destination rows run a "bare fan-out" beside them (one SDK writer per destination,
#    one write at a time, same bus, same signing, no relay and no Redis). Every row reports
#    the CPU per delivery of the relay, Redis, the broker and the load process (publisher +
#    bus). The rows judged by an aim run three times (medians).
# 3. The same on Redis Cluster, beside the single server in the same run: a private cluster
#    of 3 masters + 3 replicas (cmd/loadtest redis-cluster, started like the tests' through
#    internal/testpeer) runs the 1 KB ingest and the 1,000-destination row again
#    (loadtest bench -cluster-redis); both report each Redis master's CPU per event and
#    per delivery (ingest: the master processes' CPU; end to end: INFO cpu).
# 4. The baseline: `relay` built at BENCH_BASELINE (a git rev, default f3cbb5e, the one
#    issue 17 measured; "none" skips it) from `git archive` into the state directory runs
#    the 1,000-destination row too, so "Redis CPU per delivery halved" compares two
#    figures of the same run.
# The report starts with the aims of issue 17, each with its figure and verdict; with
# BENCH_DOC unset that table is printed on stdout too.
#
#   make bench                          all of it, then docs/benchmarks.md is updated
#   scripts/bench.sh -runs 1:2000:200   end to end only, these rows (destinations:events:rate[:bytes[:repeats]])
#   BENCH_DOC=- scripts/bench.sh        print the report instead of writing the doc
#   BENCH_CLUSTER_ONLY=1 scripts/bench.sh   only the rows that compare the cluster with the server:
#                                       1 KB ingest and 1,000 destinations on each (a shorter run)
#   BENCH_BASELINE=<rev>|none           the baseline relay (full runs only, unless set: then always)
#
# Progress goes to stderr. Ports: BENCH_E2E_REDIS_PORT 17579, BENCH_E2E_RABBIT_PORT 26872
# (+1 dist), BENCH_E2E_EPMD_PORT 24669; the Redis Cluster takes free random ports in
# 20000-32000 (internal/testpeer), checked free when it starts. Everything listens on
# 127.0.0.1 only.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v go >/dev/null || export PATH=/usr/local/go/bin:$PATH

export REDIS_PORT=${BENCH_E2E_REDIS_PORT:-17579}
export RABBIT_PORT=${BENCH_E2E_RABBIT_PORT:-26872}
export RABBIT_DIST_PORT=${BENCH_E2E_RABBIT_DIST_PORT:-26873}
export EPMD_PORT=${BENCH_E2E_EPMD_PORT:-24669}
doc=${BENCH_DOC:-docs/benchmarks.md}

state=$(mktemp -d "${TMPDIR:-/tmp}/relay-bench.XXXXXX")
cluster_pid=
cleanup() {
	local rc=$?
	if [[ -n $cluster_pid ]]; then kill -TERM "$cluster_pid" 2>/dev/null || true; wait "$cluster_pid" 2>/dev/null || true; fi
	scripts/peers.sh stop "$state" >/dev/null 2>&1 || true
	if ((rc != 0)); then echo "bench: state kept in $state" >&2; else rm -rf "$state"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

scripts/peers.sh install
peer_env=$(scripts/peers.sh start "$state") # fails the script when a port is taken
eval "$peer_env"
echo "bench: building relay, loadtest and benchingest into $state" >&2
go build -o "$state/relay" ./cmd/relay
go build -o "$state/loadtest" ./cmd/loadtest
go build -o "$state/benchingest" ./cmd/benchingest

# The baseline relay: in a full run (no arguments, not BENCH_CLUSTER_ONLY), or whenever
# BENCH_BASELINE is set.
baseline_args=()
baseline=${BENCH_BASELINE:-}
if [[ -z $baseline && $# -eq 0 && -z ${BENCH_CLUSTER_ONLY:-} ]]; then baseline=f3cbb5e; fi
if [[ -n $baseline && $baseline != none ]]; then
	rev=$(git rev-parse --short "$baseline^{commit}")
	echo "bench: building the baseline relay at $rev into $state/relay-$rev" >&2
	mkdir -p "$state/baseline-src"
	if git archive "$rev" | tar -x -C "$state/baseline-src" &&
		(cd "$state/baseline-src" && go build -o "$state/relay-$rev" ./cmd/relay); then
		baseline_args=(-baseline-relay "$state/relay-$rev" -baseline-label "$rev")
	else
		echo "bench: the baseline relay at $rev did not build: today's figures only" >&2
	fi
fi

echo "bench: starting a Redis Cluster (3 masters + 3 replicas) under $state/rcluster" >&2
"$state/loadtest" redis-cluster -dir "$state/rcluster" -env "$state/rcluster.env" 2>"$state/rcluster.log" &
cluster_pid=$!
for ((i = 0; i < 600; i++)); do
	[[ -s $state/rcluster.env ]] && break
	kill -0 "$cluster_pid" 2>/dev/null || { cat "$state/rcluster.log" >&2; echo "bench: the Redis Cluster did not start" >&2; exit 1; }
	sleep 0.1
done
[[ -s $state/rcluster.env ]] || { echo "bench: the Redis Cluster was not ready within 60 s" >&2; exit 1; }
source "$state/rcluster.env"

# ingest SIZE N WARMUP [benchingest flags]: one ingest measurement into the report.
ingest() {
	local size=$1 n=$2 warm=$3
	shift 3
	"$state/benchingest" -prefill -size "$size" -n "$n" -warmup "$warm" -amqp "$RELAY_TEST_AMQP_URL" -flushdb \
		-summary "$state/ingest.jsonl" "$@" >>"$ingest_md"
	echo >>"$ingest_md"
}

report=$state/report.md ingest_md=$state/ingest.md
: >"$ingest_md"
: >"$state/ingest.jsonl"
{
	echo "## Latest \`make bench\` run"
	echo
	echo "Written by \`scripts/bench.sh\` $(date -u '+%Y-%m-%d %H:%M UTC') at commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet -- . ':!docs/benchmarks.md' 2>/dev/null || echo ' with uncommitted changes'). Private RabbitMQ and Redis from \`scripts/peers.sh\`; how each part is measured is in the sections below this one."
	echo
} >"$report"
e2e=("$@")
if (($# == 0)); then
	# 1 KB events (the aim's), then larger ones: how ingest grows with event size; then
	# 1 KB on the cluster.
	sizes=(1024:50000:5000 16384:10000:1000 65536:3000:300)
	[[ -z ${BENCH_CLUSTER_ONLY:-} ]] || { sizes=(1024:50000:5000); e2e=(-runs 1000:20:0); }
	for size_n in "${sizes[@]}"; do
		IFS=: read -r size n warm <<<"$size_n"
		echo "bench: ingest of $size B events (cmd/benchingest -prefill, 3 runs)" >&2
		ingest "$size" "$n" "$warm" -redis "$RELAY_TEST_REDIS_URL" \
			-peer-pids "rabbitmq=$(<"$state/rabbit.pid"),redis=$(<"$state/redis.pid")"
	done
	echo "bench: ingest of 1024 B events on the Redis Cluster (cmd/benchingest -prefill, 3 runs)" >&2
	ingest 1024 50000 5000 -redis "$BENCH_CLUSTER_REDIS_URL" -redis-label "Redis Cluster, 3 masters + 3 replicas" \
		-peer-pids "rabbitmq=$(<"$state/rabbit.pid"),$BENCH_CLUSTER_REDIS_MASTERS"
	echo "On the cluster the bench's account has one slot, so one master: its column is the cost of each event on the master that holds it; the other masters idle." >>"$ingest_md"
	echo >>"$ingest_md"
fi
echo "bench: end to end (cmd/loadtest bench)" >&2
"$state/loadtest" bench -relay "$state/relay" -state "$state" -rabbit-pid "$(<"$state/rabbit.pid")" \
	-amqp "$RELAY_TEST_AMQP_URL" -redis "$RELAY_TEST_REDIS_URL" -cluster-redis "$BENCH_CLUSTER_REDIS_URL" \
	-ingest-summary "$state/ingest.jsonl" -aims-out "$state/aims.md" "${baseline_args[@]}" "${e2e[@]}" >"$state/e2e.md"
cat "$state/aims.md" "$ingest_md" "$state/e2e.md" >>"$report"
echo "bench: $(( SECONDS / 60 )) min $(( SECONDS % 60 )) s in all" >&2

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
cat "$state/aims.md"
