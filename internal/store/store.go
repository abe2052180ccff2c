// Package store keeps the relay's durable state in Redis: each account's event log with
// its dedup markers, and (for dispatch) cursors, leases and destination state. Every
// multi-key change is one Lua script, so a crash never leaves half a write behind.
// It knows nothing of sinks or of AMQP.
package store

import (
	"github.com/redis/go-redis/v9"
)

// Store is the Redis-backed state of the relay. It is safe for concurrent use.
type Store struct {
	rdb redis.UniversalClient
}

// New returns a Store over an open Redis client.
func New(rdb redis.UniversalClient) *Store {
	return &Store{rdb: rdb}
}

// Open parses a redis:// or rediss:// URL and returns a Store over a new client.
func Open(url string) (*Store, error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	return New(redis.NewClient(opts)), nil
}

// Client is the underlying client, for health checks.
func (s *Store) Client() redis.UniversalClient { return s.rdb }

// Close closes the client.
func (s *Store) Close() error { return s.rdb.Close() }
