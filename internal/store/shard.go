package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The only place that knows whether the store runs on one server or on Redis Cluster.
// Everything else asks these helpers which server holds a key, which keys one command
// may span, and which servers are masters.

// masterFor is the client of the server that holds key: the one server, or on Redis
// Cluster the master of key's slot. Commands of one pipeline of it share a connection,
// so a WAIT at its end covers the writes before it.
func (s *Store) masterFor(ctx context.Context, key string) (redis.UniversalClient, error) {
	if c, ok := s.rdb.(*redis.ClusterClient); ok {
		return c.MasterForKey(ctx, key)
	}
	return s.rdb, nil
}

// slotOf names what one multi-key command may span: on Redis Cluster the keys of one
// hash slot, on one server any keys (all are "slot" 0).
func (s *Store) slotOf(key string) int {
	if _, ok := s.rdb.(*redis.ClusterClient); ok {
		return slot(key)
	}
	return 0
}

// refresh has a cluster client reload its map of slots to masters, after a master sent
// an error (it moved a slot, or it is gone and its replica took over).
func (s *Store) refresh(ctx context.Context) {
	if c, ok := s.rdb.(*redis.ClusterClient); ok {
		c.ReloadState(ctx)
	}
}

// forEachMaster runs fn on every master: the one server, or each cluster master.
func (s *Store) forEachMaster(ctx context.Context, fn func(context.Context, redis.UniversalClient) error) error {
	if c, ok := s.rdb.(*redis.ClusterClient); ok {
		return c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return fn(ctx, m) })
	}
	return fn(ctx, s.rdb)
}

// waitTimeout bounds each WAIT: a replica that has not acknowledged by then fails the
// write (NotReplicatedError), which is retried, not reported done.
const waitTimeout = 2 * time.Second

// NotReplicatedError says fewer replicas than redis.min_replicas acknowledged a write
// within waitTimeout. The master holds the write, but a failover could lose it, so it
// is not reported done; writing it again is safe (each script is idempotent).
type NotReplicatedError struct{ Acked, Want int }

func (e *NotReplicatedError) Error() string {
	return fmt.Sprintf("only %d of %d replicas acknowledged the write within %s", e.Acked, e.Want, waitTimeout)
}

// call is one script call: its keys (all in the slot of the first) and arguments.
type call struct {
	keys []string
	args []any
}

// evalAll runs script once per call: one pipeline per master holding the calls, the
// masters in parallel, the calls to one master in their order. With wait and
// MinReplicas > 0 each pipeline ends in WAIT, and a master whose replicas fall short
// fails it. cmds[i] answers calls[i]; on an error no result is reported.
func (s *Store) evalAll(ctx context.Context, script *redis.Script, calls []call, wait bool) ([]*redis.Cmd, error) {
	type group struct {
		client redis.UniversalClient
		idx    []int
	}
	var groups []*group
	byClient := map[redis.UniversalClient]*group{}
	for i, c := range calls {
		m, err := s.masterFor(ctx, c.keys[0])
		if err != nil {
			s.refresh(ctx)
			return nil, err
		}
		g, ok := byClient[m]
		if !ok {
			g = &group{client: m}
			byClient[m] = g
			groups = append(groups, g)
		}
		g.idx = append(g.idx, i)
	}
	cmds := make([]*redis.Cmd, len(calls))
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for gi, g := range groups {
		wg.Go(func() { errs[gi] = s.evalOn(ctx, g.client, script, calls, g.idx, cmds, wait) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		s.refresh(ctx)
		return nil, err
	}
	return cmds, nil
}

// evalOn runs the calls idx on one master in one pipeline (loading the script once
// when the master does not have it: a promoted replica starts with none).
func (s *Store) evalOn(ctx context.Context, m redis.UniversalClient, script *redis.Script, calls []call, idx []int, cmds []*redis.Cmd, wait bool) error {
	for loaded := false; ; loaded = true {
		pipe := m.Pipeline()
		for _, i := range idx {
			cmds[i] = script.EvalSha(ctx, pipe, calls[i].keys, calls[i].args...)
		}
		var acked *redis.Cmd
		if wait && s.minReplicas > 0 {
			acked = pipe.Do(ctx, "wait", s.minReplicas, waitTimeout.Milliseconds())
		}
		_, err := pipe.Exec(ctx)
		if err != nil && !loaded && redis.HasErrorPrefix(err, "NOSCRIPT") {
			if err := script.Load(ctx, m).Err(); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		if acked != nil {
			if n, err := acked.Int(); err != nil || n < s.minReplicas {
				return &NotReplicatedError{Acked: n, Want: s.minReplicas}
			}
		}
		return nil
	}
}
