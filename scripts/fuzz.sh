#!/usr/bin/env bash
# Runs every Go fuzz target for a bounded budget (FUZZTIME, default 100000x: executions
# per target), one after the other. Seed corpora live in each package's testdata/fuzz; new
# crashers land there.
#
# The default budget is a count, not a duration: with a duration, Go 1.26's fuzz
# coordinator can report "context deadline exceeded" as a failure when the time runs out
# while a worker is mid-call (golang/go#75804, fixed in Go 1.27), which failed CI once on a
# loaded machine with no crashing input. A count has no deadline to race. A duration
# (FUZZTIME=10m) still works for long runs by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-100000x}
targets=(
	"./internal/signature FuzzVerify"
	"./internal/signature FuzzJobID"
	"./internal/cloudevent FuzzHeaders"
	"./internal/config FuzzParse"
	"./internal/destination FuzzParseARN"
	"./internal/sinks/kinesis FuzzFlatten"
	"./internal/jsonscan FuzzMember"
	"./internal/jsonscan FuzzValid"
	"./internal/dispatch FuzzStoreID"
	"./internal/destination FuzzBody"
	"./internal/ingest FuzzHeaderFilter"
)
for t in "${targets[@]}"; do
	read -r pkg name <<<"$t"
	echo "==> fuzz $name ($pkg) for $fuzztime"
	go test "$pkg" -run='^$' -fuzz="^${name}\$" -fuzztime="$fuzztime"
done
