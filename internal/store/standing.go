package store

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Standing is the part of a destination's state a list filters on: its status and
// whether it is failing (a warning threshold of rejections in a row reached).
type Standing struct {
	Found   bool
	Status  string
	Failing bool
}

// Standings reads the standing of each destination in one round trip: a pipeline of
// one HMGET of two fields per destination (so destinations of different accounts may
// live on different cluster slots). The cost is the number of refs, never a log's size.
func (s *Store) Standings(ctx context.Context, refs []Ref) ([]Standing, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, len(refs))
	for i, r := range refs {
		cmds[i] = pipe.HMGet(ctx, destKey(r.Account, r.ID), "status", "failing")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	out := make([]Standing, len(refs))
	for i, c := range cmds {
		v := c.Val()
		status, _ := v[0].(string)
		failing, _ := v[1].(string)
		out[i] = Standing{Found: status != "", Status: status, Failing: failing != "" && failing != "false"}
	}
	return out, nil
}
