package upgrade

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/mercamap/relay/internal/store"
)

// ReleaseRewrites are this release's background rewrites of keys already in Redis, each
// run once its state format is in force (Options.Rewrites), applied through st (nil:
// for their names alone, as MarkDone takes them).
func ReleaseRewrites(st *store.Store) []Rewrite {
	return []Rewrite{{
		// The channel counters of destinations deleted before format 2, kept for good
		// then, get the life a delete leaves one from format 2 on (store.Forget,
		// Store.SetDeletedCounterLife).
		Name: "deleted-destination-counters", Format: store.CounterLifetime, Match: store.CounterPattern,
		Apply: func(ctx context.Context, rdb redis.Cmdable, key string) error {
			return st.ExpireDeletedCounter(ctx, rdb, key)
		},
	}}
}

// MarkDone records rws as walked to their end without walking them. Only for a Redis
// that holds nothing an earlier release wrote, so nothing a walk would rewrite: the
// bench empties Redis for each relay it starts, and a deployment makes each walk once,
// not once per relay. Never on a deployment's Redis.
func MarkDone(ctx context.Context, rdb redis.Cmdable, rws []Rewrite) error {
	for _, rw := range rws {
		if err := rdb.HSet(ctx, rewriteKey(rw.Name), "done", "1").Err(); err != nil {
			return err
		}
	}
	return nil
}
