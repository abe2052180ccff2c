package main

import (
	"errors"
	"log/slog"
	"testing"

	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/dispatch"
	"github.com/mercamap/relay/internal/registry"
	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/testpeer"
)

// TestTheFollowerLeavesADestinationThisReplicasAPIIsMakingToTheCreate: the registry's
// change of a destination comes back through the follower of the replica whose API made
// it, and could come before the create cleared what an earlier destination of the id
// left in Redis. Taken then, its worker ran the setup check on the state the create
// deleted next ("the setup check did not run: no such destination") and
// the new destination waited a whole check backoff: make bench saw a create's first
// event not delivered in 30 s. The follower leaves such an id to the create, and takes
// any other change at once.
func TestTheFollowerLeavesADestinationThisReplicasAPIIsMakingToTheCreate(t *testing.T) {
	st, err := store.Open(testpeer.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	disp := dispatch.New(dispatch.Options{Store: st})
	src := &apiSource{disp: disp, log: slog.New(slog.DiscardHandler), dests: map[string]*destination.Destination{},
		accounts: map[string]config.Account{}, file: map[string]bool{}}
	change := func(id string) registry.Change {
		return registry.Change{ID: id, Record: &registry.Record{ID: id, Account: "acct_1", Connector: "eventbridge",
			BusARN: "arn:aws:events:us-east-1:111122223333:event-bus/" + id, RoleARN: "arn:aws:iam::111122223333:role/r",
			ExternalID: "relay-0123456789abcdef0123456789abcd" + id[len(id)-2:]}}
	}
	taken := func(id string) bool {
		_, inDispatcher := disp.Destination(id)
		_, err := st.LoadState(t.Context(), store.Ref{Account: "acct_1", ID: id})
		if inDispatcher != (err == nil) && !errors.Is(err, destination.ErrNotFound) {
			t.Fatalf("%s: in the dispatcher %v, its state: %v", id, inDispatcher, err)
		}
		return inDispatcher && err == nil
	}

	done := disp.Making("made-here-01")
	src.applyLocked(t.Context(), []registry.Change{change("made-here-01"), change("made-elsewhere-02")})
	if taken("made-here-01") {
		t.Fatal("the follower took a destination this replica's API was still making")
	}
	if !taken("made-elsewhere-02") {
		t.Fatal("the follower did not take another replica's destination")
	}
	done()
	src.applyLocked(t.Context(), []registry.Change{change("made-here-01")})
	if !taken("made-here-01") {
		t.Fatal("once the create ended, the follower did not take its change")
	}
}
