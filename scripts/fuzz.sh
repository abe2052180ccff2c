#!/usr/bin/env bash
# Runs every Go fuzz target for a bounded time (FUZZTIME, default 10s each), one after
# the other. Seed corpora live in each package's testdata/fuzz; new crashers land there.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-10s}
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
