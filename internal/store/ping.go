package store

import (
	"context"
	"sync"
	"time"
)

// pingTimeout bounds one PING in the background: it may outlive the caller that started
// it, and the next callers wait on it rather than pile up new ones.
const pingTimeout = 5 * time.Second

// pinger runs at most one Redis PING at a time, in the background, so a caller can stop
// waiting for it: go-redis may block on a peer that accepts and never answers for longer
// than a context asks (its dial and read timeouts), and a probe or a scrape must not.
type pinger struct {
	mu     sync.Mutex
	flight *pingFlight // the PING in progress, nil when none
}

type pingFlight struct {
	done chan struct{} // closed once err is set
	err  error
}

// PingWithin joins the PING in progress, or starts one, and waits for it at most d.
// answered is false when it did not end in time; err is the PING's when it did.
func (s *Store) PingWithin(ctx context.Context, d time.Duration) (answered bool, err error) {
	p := &s.ping
	p.mu.Lock()
	f := p.flight
	if f == nil {
		f = &pingFlight{done: make(chan struct{})}
		p.flight = f
		go func() {
			pctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
			f.err = s.rdb.Ping(pctx).Err()
			cancel()
			p.mu.Lock()
			p.flight = nil
			p.mu.Unlock()
			close(f.done)
		}()
	}
	p.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-f.done:
		return true, f.err
	case <-t.C:
		return false, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}
