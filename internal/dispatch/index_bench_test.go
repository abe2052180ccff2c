package dispatch

import (
	"fmt"
	"testing"

	"github.com/mercamap/relay/internal/destination"
)

// BenchmarkDestinationListsAmong100000 times what the API asks of the dispatcher with
// 100,000 destinations configured (10 per account): every one sorted (an admin's list),
// and one account's (an account token's list, connectors, stream routes).
//
//	go test -run=NONE -bench=DestinationListsAmong -benchtime=200x ./internal/dispatch/
func BenchmarkDestinationListsAmong100000(b *testing.B) {
	dests := make([]destination.Destination, 100_000)
	for i := range dests {
		dests[i] = destination.Destination{ID: fmt.Sprintf("d-%06d", (i*7919)%100_000), Account: fmt.Sprintf("acct-%05d", i%10_000),
			Connector: destination.PubSub, ProjectID: "p", TopicID: "t"}
	}
	d := New(Options{})
	d.dests = ownByID(dests)
	d.index.reset(d.dests) // as SetDestinations does, without Redis
	b.Run("every", func(b *testing.B) {
		for range b.N {
			if len(d.Destinations()) != len(dests) {
				b.Fatal("short")
			}
		}
	})
	b.Run("one_account", func(b *testing.B) {
		for i := range b.N {
			if len(d.AccountDestinations(fmt.Sprintf("acct-%05d", i%10_000))) != 10 {
				b.Fatal("short")
			}
		}
	})
}
