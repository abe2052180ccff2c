package store

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// LiveReplicas names the replicas whose heartbeat (Heartbeat, every lease round) is
// within ttl, with its time: what a rolling upgrade's checks call live. It writes
// nothing, so a reader such as `relay upgrade status` never counts itself.
func (s *Store) LiveReplicas(ctx context.Context, ttl time.Duration) (map[string]time.Time, error) {
	min := time.Now().Add(-ttl).UnixMilli()
	zs, err := s.rdb.ZRangeByScoreWithScores(ctx, replicasKey, &redis.ZRangeBy{Min: strconv.FormatInt(min, 10), Max: "+inf"}).Result()
	if err != nil {
		return nil, fmt.Errorf("live replicas: %w", err)
	}
	out := make(map[string]time.Time, len(zs))
	for _, z := range zs {
		out[fmt.Sprint(z.Member)] = time.UnixMilli(int64(z.Score))
	}
	return out, nil
}
