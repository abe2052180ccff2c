package testpeer

import "github.com/mercamap/relay/internal/benchkit"

// RoundTrips is a go-redis hook (AddHook) that counts what a client sends: one per
// command, one per pipeline. Tests read N to prove what a call costs in round trips.
// It is the bench commands' own counter (benchkit.RoundTrips).
type RoundTrips = benchkit.RoundTrips
