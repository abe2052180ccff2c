package store

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Group commit. Each destination's worker commits one outcome at a time, but a replica
// runs many workers: the commits that arrive while one round trip is in flight go
// together in the next, one pipeline per master. Each is still its own script (atomic
// on its own, in its destination's slot); a pipeline only saves the round trips and the
// system calls, on Redis's side and ours. A commit that arrives when none is in flight
// is sent at once, by its own goroutine: no wait is added.

// scriptCall is one script call waiting in a group, and then its answer.
type scriptCall struct {
	keys []string
	args []any
	res  any
	err  error
	wake chan bool // true: lead the next round; false: res and err are set
}

// group runs the calls of one script that arrive together as one round trip per master.
// Its zero value is ready.
type group struct {
	mu    sync.Mutex
	queue []*scriptCall
	busy  bool // a round is in flight; its leader hands over to the queue's first
}

// run sends a call of script with the calls waiting beside it, and returns its answer.
func (g *group) run(ctx context.Context, s *Store, script *redis.Script, c *scriptCall) (any, error) {
	c.wake = make(chan bool, 1)
	g.mu.Lock()
	g.queue = append(g.queue, c)
	if g.busy {
		g.mu.Unlock()
		if lead := <-c.wake; !lead {
			return c.res, c.err
		}
		g.mu.Lock() // this call leads the next round: the queue still holds it
	}
	g.busy = true
	calls := g.queue
	g.queue = nil
	g.mu.Unlock()

	s.runCalls(context.WithoutCancel(ctx), script, calls)

	g.mu.Lock()
	if len(g.queue) > 0 {
		g.queue[0].wake <- true
	} else {
		g.busy = false
	}
	g.mu.Unlock()
	for _, o := range calls {
		if o != c {
			o.wake <- false
		}
	}
	return c.res, c.err
}

// runCalls runs each call's script: one pipeline per master, the masters in parallel.
// Each call gets its own answer (a script's error is its call's alone); a call the
// master had no script for (a promoted replica starts with none) is sent again after
// loading it, and only that call: the others ran.
func (s *Store) runCalls(ctx context.Context, script *redis.Script, calls []*scriptCall) {
	byMaster := map[redis.UniversalClient][]*scriptCall{}
	for _, c := range calls {
		m, err := s.masterFor(ctx, c.keys[0])
		if err != nil {
			s.refresh(ctx)
			c.err = err
			continue
		}
		byMaster[m] = append(byMaster[m], c)
	}
	var wg sync.WaitGroup
	for m, cs := range byMaster {
		wg.Go(func() {
			if s.pipeCalls(ctx, m, script, cs) {
				s.refresh(ctx)
			}
		})
	}
	wg.Wait()
}

// pipeCalls runs calls on master m in one pipeline; failed says a call met an error
// other than its script's own (the connection, a moved slot).
func (s *Store) pipeCalls(ctx context.Context, m redis.UniversalClient, script *redis.Script, calls []*scriptCall) (failed bool) {
	for loaded := false; ; loaded = true {
		pipe := m.Pipeline()
		cmds := make([]*redis.Cmd, len(calls))
		for i, c := range calls {
			cmds[i] = script.EvalSha(ctx, pipe, c.keys, c.args...)
		}
		_, _ = pipe.Exec(ctx) // each cmd holds its own answer
		var again []*scriptCall
		for i, c := range calls {
			c.res, c.err = cmds[i].Result()
			switch {
			case c.err == nil, c.err == redis.Nil:
			case redis.HasErrorPrefix(c.err, "NOSCRIPT") && !loaded:
				again = append(again, c)
			case !isScriptReply(c.err):
				failed = true
			}
		}
		if len(again) == 0 {
			return failed
		}
		if err := script.Load(ctx, m).Err(); err != nil {
			for _, c := range again {
				c.err = err
			}
			return true
		}
		calls = again
	}
}

// isScriptReply says err is an answer a script gave (redis.error_reply), not a failure
// to reach or run it.
func isScriptReply(err error) bool {
	for _, p := range []string{"STALE", "UNKNOWN"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}
