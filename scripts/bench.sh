#!/usr/bin/env bash
# The relay's end-to-end benchmarks on private local peers, judged against the aims of
# issues 23 and 30 and written into docs/benchmarks.md (between its "make bench" markers;
# everything else in the file is left alone). `cmd/loadtest bench` runs one `relay serve`
# per row, delivering to EventBridge destinations on a copy of the sandbox's EventBridge
# (internal/awstest) in a process of its own (`loadtest bus`, which notes when it answered
# each entry) and STS; each row beside its bare path measured in the same run:
#
# - 1 destination, 1 KB at 200/s, at 2,000/s and as fast as confirmed, beside the bare
#   pipeline (a bare consumer putting each delivery on the same bus): latency (p50, p99,
#   p99.9 relay-added) and throughput aims.
# - 0 destinations: ingest alone (nothing reads the account's log): Redis CPU per
#   ingested event, the denominator of "Redis CPU per delivery"; and Redis memory per
#   event kept (used_memory before a repetition's first publish and once the log holds
#   its 20,000 events, per event).
# - 1 destination, 10,000 events of 1 KB once (the memory row): used_memory from before
#   its first publish to its last delivery committed, less its events × the per-event
#   figure, per delivery; then MEMORY USAGE of the destination's keys (and its share of
#   the account's channel) at rest; with the per-event figure, a week at 1,000 events/s
#   to 10,000 destinations.
# - 100, 1,000, 10,000 and 100,000 destinations, beside the bare fan-out (one SDK writer
#   per destination, one write at a time, same bus, same signing, no relay, no Redis);
#   the 10,000 row also reads Redis's and the relay's CPU over 15 s with nothing published
#   (leased idle destinations).
# - 1,000 destinations again on a private Redis Cluster of 3 masters + 3 replicas
#   (cmd/loadtest redis-cluster, started like the tests' through internal/testpeer).
# - The bus late (issue 53): 1 destination at 300/s and 100 destinations as fast as
#   confirmed, the relay writing through a delay proxy (internal/netdelay) with the bus
#   at once, 20 ms and 100 ms late; judged on deliveries/s against min(offered,
#   destinations × window / round trip, the same row at once), no bare path.
# Every row reports the CPU per delivery of the relay, Redis, the broker, the bus and the
# load process (publisher, or the bare path's consumer or writers). Each of a row's runs
# is followed by one of its bare path (ABAB…); the throughput rows are judged on their
# whole-system CPU per delivery over the bare path's, pair by pair: at least 5 pairs
# (4 at 100,000 destinations, 1 for the memory rows), more while a verdict is unsure;
# a row of two or more runs them in two sittings, the first half in a first pass over
# the rows and the rest in a second, each on a fresh relay and bare path.
# The report starts with the aims of issues 23, 30, 31, 46 and 53, each with its figure, its
# spread and its verdict (met, NOT met, unsure); with BENCH_DOC unset that table is
# printed on stdout too. Ingest beside a bare
# consumer (issue 17's ingest aims) is `make bench-ingest`'s, no longer part of this run.
#
#   make bench                          all of it, then docs/benchmarks.md is updated
#   scripts/bench.sh -runs 1:2000:200   only these rows on one server (destinations:events:rate[:bytes[:repeats[:most]]][@delay]),
#                                       then the cluster's rows (BENCH_CLUSTER_RUNS)
#   BENCH_CLUSTER_RUNS=none BENCH_API=0 BENCH_DOC=- scripts/bench.sh -runs late
#                                       only the rows with the bus late (about 3 minutes)
#   BENCH_DOC=- scripts/bench.sh        print the report instead of writing the doc
#   BENCH_CLUSTER_RUNS=<rows>|none      the cluster's rows (default 1000:20:0:1024:5); none: no cluster started
#   BENCH_CLUSTER_ONLY=1 scripts/bench.sh   only the rows that compare the cluster with the server:
#                                       1,000 destinations on each (a shorter run)
#   BENCH_API=<n>|0                     destinations made through the API after the rows (default 100000; 0: none)
#   BENCH_HISTORY=<file>|""             earlier runs' estimates: the least width of the interval of each aim
#                                       they widen (CPU, cluster, Redis, p99; default docs/bench-history.tsv;
#                                       empty: each run's own pairs alone)
#   BENCH_KEEP=1                        keep the state directory (each relay's log) after a passing run too
#   BENCH_BASELINE=<rev>                also run the 1,000-destination row with `relay` built at that git rev
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
	if ((rc != 0)) || [[ -n ${BENCH_KEEP:-} ]]; then echo "bench: state kept in $state" >&2; else rm -rf "$state"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

scripts/peers.sh install
peer_env=$(scripts/peers.sh start "$state") # fails the script when a port is taken
eval "$peer_env"
echo "bench: building relay and loadtest into $state" >&2
go build -o "$state/relay" ./cmd/relay
go build -o "$state/loadtest" ./cmd/loadtest

# The baseline relay, only when BENCH_BASELINE names a git rev.
baseline_args=()
baseline=${BENCH_BASELINE:-none}
if [[ $baseline != none ]]; then
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

e2e=("$@")
[[ -z ${BENCH_CLUSTER_ONLY:-} ]] || e2e=(-runs 1000:20:0:1024:5)
cluster_runs=${BENCH_CLUSTER_RUNS:-1000:20:0:1024:5}
cluster_args=()
if [[ $cluster_runs != none ]]; then
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
	cluster_args=(-cluster-redis "$BENCH_CLUSTER_REDIS_URL" -cluster-runs "$cluster_runs")
fi

report=$state/report.md
{
	echo "## Latest \`make bench\` run"
	echo
	echo "Written by \`scripts/bench.sh\` $(date -u '+%Y-%m-%d %H:%M UTC') at commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet -- . ':!docs/benchmarks.md' 2>/dev/null || echo ' with uncommitted changes'). Private RabbitMQ and Redis from \`scripts/peers.sh\`; how each part is measured is in the sections below this one."
	echo
} >"$report"
echo "bench: end to end (cmd/loadtest bench)" >&2
"$state/loadtest" bench -relay "$state/relay" -state "$state" -rabbit-pid "$(<"$state/rabbit.pid")" \
	-amqp "$RELAY_TEST_AMQP_URL" -redis "$RELAY_TEST_REDIS_URL" "${cluster_args[@]}" \
	-aims-out "$state/aims.md" -api "${BENCH_API:-100000}" "${baseline_args[@]}" "${e2e[@]}" \
	-history "${BENCH_HISTORY-docs/bench-history.tsv}" -commit "$(git rev-parse --short HEAD 2>/dev/null || echo '?')" >"$state/e2e.md"
took="$((SECONDS / 60)) min $((SECONDS % 60)) s"
{
	cat "$state/aims.md"
	echo "The whole run (peers, builds, every row) took $took; load average at its end $(cut -d' ' -f1-3 /proc/loadavg)."
	echo
	cat "$state/e2e.md"
} >>"$report"
echo "bench: $took in all" >&2
# A row that failed (its figure says "failed: …") keeps the state directory: each relay's
# log is in it, and the run itself still passes.
if grep -q '| failed: ' "$state/aims.md"; then
	export BENCH_KEEP=1
	echo "bench: a row failed; its relay's log is in $state" >&2
fi

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
