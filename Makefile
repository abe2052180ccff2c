# make test runs against peers from .ci/run (RELAY_TEST_* set) or, without them, against
# servers the tests start themselves (internal/testpeer).
# make peers-up prints export lines: eval "$(make -s peers-up)" to point tests at .peers/.

PEERS_DIR := .peers

.PHONY: test peers-up peers-down build demo bench bench-ingest drill drill-cluster fuzz

# The store suite runs each test on one server and on Redis Cluster; the ingest suite
# runs again with RELAY_TEST_REDIS=cluster (one shared cluster for the test binary).
# Tests that compare or bound wall times (RELAY_TEST_ALONE) run last, alone on the machine.
test:
	go vet ./...
	go test -count=1 -timeout 15m ./...
	RELAY_TEST_REDIS=cluster go test -count=1 -timeout 5m ./internal/ingest/
	RELAY_TEST_ALONE=1 go test -count=1 -timeout 5m -run 'TestScrapingABigBacklogDoesNotSlowOtherAccounts' ./internal/api/
	RELAY_TEST_ALONE=1 go test -count=1 -timeout 10m -run 'TestBusesFarAwayTakeEveryEventWithinTheirRoundTripsInOrder' ./cmd/relay/

peers-up:
	scripts/peers.sh start $(PEERS_DIR)

peers-down:
	scripts/peers.sh stop $(PEERS_DIR)

build:
	go build -o bin/relay ./cmd/relay

demo:
	scripts/demo.sh

bench-ingest:
	scripts/bench-ingest.sh

fuzz:
	scripts/fuzz.sh

bench:
	scripts/bench.sh

drill:
	scripts/drill.sh

drill-cluster:
	scripts/drill-cluster.sh
