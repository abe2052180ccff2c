package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mercamap/relay/internal/testpeer"
)

// TestCommitsMadeAtOnceShareRoundTripsAndEachKeepsItsOwnAnswer: 60 destinations of
// accounts spread over the slots commit at the same moment. Each commit is recorded on
// its own destination (cursor, count), the one with a stale token alone is refused, and
// on one server they took far fewer round trips than commits.
func TestCommitsMadeAtOnceShareRoundTripsAndEachKeepsItsOwnAnswer(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *Store) {
		ctx := context.Background()
		const n = 60
		refs := make([]Ref, n)
		tokens := make([]int64, n)
		ids := make([][2]string, n)
		for i := range refs {
			refs[i] = Ref{Account: fmt.Sprintf("acct_group_%d", i%12), ID: fmt.Sprintf("dest-%d", i), Connector: "eventbridge"}
			tokens[i], ids[i] = activeWithLease(t, st, refs[i])
		}
		counter := &testpeer.RoundTrips{}
		_, single := st.rdb.(*redis.Client)
		if single {
			st.rdb.AddHook(counter)
		}
		const stale = 7
		results := make([]Committed, n)
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range refs {
			wg.Go(func() {
				<-start
				token := tokens[i]
				if i == stale {
					token++
				}
				results[i], errs[i] = st.Commit(ctx, Commit{Ref: refs[i], Token: token, Kind: KindDelivered,
					Cursor: ids[i][0], EventID: "ev", DisableAfter: 20,
					ChannelRetention: time.Hour, AttemptsRetention: time.Hour})
			})
		}
		close(start)
		wg.Wait()
		trips := counter.N.Load()
		for i := range refs {
			if i == stale {
				if !errors.Is(errs[i], ErrStaleLease) {
					t.Errorf("the stale commit: %v, want ErrStaleLease", errs[i])
				}
				continue
			}
			if errs[i] != nil || results[i].Cursor != ids[i][0] {
				t.Errorf("commit %d: %+v, %v; want its own cursor %s", i, results[i], errs[i], ids[i][0])
			}
			s, err := st.LoadState(ctx, refs[i])
			if err != nil || s.Cursor != ids[i][0] || s.LastDelivery == nil {
				t.Errorf("state of %s: %+v, %v", refs[i].ID, s, err)
			}
		}
		if single && trips > n/2 {
			t.Errorf("%d commits made at once took %d round trips, want them shared", n, trips)
		}
	})
}
