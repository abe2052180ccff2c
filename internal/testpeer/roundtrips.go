package testpeer

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// RoundTrips is a go-redis hook (AddHook) that counts what a client sends: one per
// command, one per pipeline. Tests read N to prove what a call costs in round trips.
type RoundTrips struct{ N atomic.Int64 }

func (*RoundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *RoundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { r.N.Add(1); return next(ctx, cmd) }
}

func (r *RoundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { r.N.Add(1); return next(ctx, cmds) }
}
