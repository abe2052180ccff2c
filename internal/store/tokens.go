package store

import (
	"context"
	"encoding/hex"
)

// tokensKey is the set of every API token digest ever configured (sha256, hex): never
// a token itself. It has a hash tag of its own, not an account's, so on Redis Cluster
// it lives in one slot of its own and each command on it stays single-slot.
const tokensKey = "relay:{api-tokens}:known"

// RememberTokens records token digests as configured once. A digest recorded here and
// not configured now is a revoked token, on every replica and after every restart.
func (s *Store) RememberTokens(ctx context.Context, digests [][32]byte) error {
	if len(digests) == 0 {
		return nil
	}
	members := make([]any, len(digests))
	for i, d := range digests {
		members[i] = hex.EncodeToString(d[:])
	}
	return s.rdb.SAdd(ctx, tokensKey, members...).Err()
}

// TokenKnown reports whether a token with this digest was configured once, on any
// replica, since Redis holds the relay's state.
func (s *Store) TokenKnown(ctx context.Context, digest [32]byte) (bool, error) {
	return s.rdb.SIsMember(ctx, tokensKey, hex.EncodeToString(digest[:])).Result()
}
