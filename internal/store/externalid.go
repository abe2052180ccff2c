package store

import (
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// ExternalIDs returns the ExternalId stored for each ref ("" where none was issued yet),
// in one round trip. It changes nothing.
func (s *Store) ExternalIDs(ctx context.Context, refs []Ref) ([]string, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(refs))
	for i, r := range refs {
		cmds[i] = pipe.HGet(ctx, destKey(r.Account, r.ID), "external_id")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	out := make([]string, len(refs))
	for i, c := range cmds {
		out[i] = c.Val()
	}
	return out, nil
}

// IssuedExternalID is one destination's stored ExternalId.
type IssuedExternalID struct {
	Ref
	ExternalID string
}

// AllExternalIDs returns the ExternalId of every destination with stored state,
// configured or not (a removed destination keeps its state for when it comes back).
// It scans the destination keys of every master; it changes nothing.
func (s *Store) AllExternalIDs(ctx context.Context) ([]IssuedExternalID, error) {
	var (
		mu   sync.Mutex
		refs []Ref
	)
	err := s.forEachMaster(ctx, func(ctx context.Context, m redis.UniversalClient) error {
		iter := m.Scan(ctx, 0, "relay:{*}:dest:*", 1000).Iterator()
		for iter.Next(ctx) {
			if r, ok := parseDestKey(iter.Val()); ok {
				mu.Lock()
				refs = append(refs, r)
				mu.Unlock()
			}
		}
		return iter.Err()
	})
	if err != nil {
		return nil, err
	}
	ids, err := s.ExternalIDs(ctx, refs)
	if err != nil {
		return nil, err
	}
	var out []IssuedExternalID
	for i, r := range refs {
		if ids[i] != "" {
			out = append(out, IssuedExternalID{r, ids[i]})
		}
	}
	return out, nil
}

// parseDestKey reads the account and id out of destKey's "relay:{acct}:dest:id".
func parseDestKey(key string) (Ref, bool) {
	rest, ok := strings.CutPrefix(key, "relay:{")
	if !ok {
		return Ref{}, false
	}
	acct, id, ok := strings.Cut(rest, "}:dest:")
	if !ok || acct == "" || id == "" {
		return Ref{}, false
	}
	return Ref{Account: acct, ID: id}, true
}
