package dispatch

import (
	"context"
	"hash/fnv"
	"slices"
	"time"
)

// balance renews the leases this replica holds and takes free ones up to its fair
// share (destinations / live replicas), so replicas spread the work and a dead
// replica's destinations move to the others once its leases expire.
func (d *Dispatcher) balance(ctx context.Context) {
	ttl := d.opts.Delivery.LeaseTTL
	live, err := d.opts.Store.Heartbeat(ctx, d.opts.Owner, ttl)
	if err != nil {
		d.opts.Logger.Warn("lease round skipped: redis unreachable", "error", err)
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()

	for id, w := range d.workers {
		if w.done() {
			delete(d.workers, id)
			continue
		}
		token, err := d.opts.Store.AcquireLease(ctx, ref(w.dest), d.opts.Owner, ttl)
		if err != nil {
			continue // keep working: a stale token cannot commit anyway
		}
		if token != w.token {
			d.opts.Logger.Warn("lease lost", "destination", id)
			w.stop()
			delete(d.workers, id)
		}
	}

	ids := make([]string, 0, len(d.dests))
	for id := range d.dests {
		ids = append(ids, id)
	}
	// Each replica walks the destinations from its own starting point, so replicas
	// starting together do not all race for the same ones.
	slices.Sort(ids)
	if n := len(ids); n > 0 {
		h := fnv.New32a()
		h.Write([]byte(d.opts.Owner))
		start := int(h.Sum32() % uint32(n))
		ids = append(ids[start:], ids[:start]...)
	}
	share := (len(ids) + int(max(live, 1)) - 1) / int(max(live, 1))
	for _, id := range ids {
		if len(d.workers) >= share {
			break
		}
		if _, held := d.workers[id]; held {
			continue
		}
		dest := d.dests[id]
		token, err := d.opts.Store.AcquireLease(ctx, ref(dest), d.opts.Owner, ttl)
		if err != nil || token == 0 {
			continue
		}
		w := d.startWorker(ctx, dest, token)
		d.workers[id] = w
	}
	d.opts.Metrics.Leases.Set(float64(len(d.workers)))
}

// stopAll stops every worker (each finishes its write in flight) and releases leases.
func (d *Dispatcher) stopAll() {
	d.mu.Lock()
	workers := d.workers
	d.workers = map[string]*worker{}
	d.mu.Unlock()
	for _, w := range workers {
		w.stop()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, w := range workers {
		<-w.finished
		_ = d.opts.Store.ReleaseLease(ctx, ref(w.dest), d.opts.Owner, w.token)
	}
	d.opts.Metrics.Leases.Set(0)
}
