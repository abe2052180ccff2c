package store

import (
	"context"
	"time"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/store/storetest"
)

// What the store's own tests need of it that the relay does not (as net/http's
// export_test.go): the tests of other packages take the same from storetest.

// AcquireLease takes the destination's lease for owner, or renews it when owner holds
// it already. It returns the fencing token, or 0 when another replica holds the lease.
// With Options.MinReplicas the token is returned only once that many replicas hold it,
// so a failover cannot hand the same token to a second holder.
func (s *Store) AcquireLease(ctx context.Context, r Ref, owner string, ttl time.Duration) (int64, error) {
	leases, err := s.AcquireLeases(ctx, []Ref{r}, owner, ttl)
	if err != nil {
		return 0, err
	}
	return leases[0].Token, nil
}

// LeaseHolder names the replica holding the destination's lease and its fencing token
// ("" and 0 when none does): storetest.LeaseHolder.
func (s *Store) LeaseHolder(ctx context.Context, r Ref) (string, int64, error) {
	return storetest.LeaseHolder(ctx, s.rdb, r.Account, r.ID)
}

// LastLogID is the id of the newest entry of an account's log, "0-0" when it is empty:
// storetest.LastLogID.
func (s *Store) LastLogID(ctx context.Context, acct string) (string, error) {
	return storetest.LastLogID(ctx, s.rdb, acct)
}

// DestinationLag reads one destination's position (for its card), like the sampler.
func (s *Store) DestinationLag(ctx context.Context, r Ref) (LagReading, error) {
	readings, err := LagCmd{lagScript.Run(ctx, s.rdb, lagKeys(r.Account, []string{r.ID}))}.Result()
	if err != nil {
		return LagReading{}, err
	}
	if len(readings) != 1 || !readings[0].Found {
		return LagReading{}, destination.ErrNotFound
	}
	return readings[0], nil
}
