package dispatch

import (
	"context"
	"hash/fnv"
	"maps"
	"slices"
	"time"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/store"
)

// balance renews the leases this replica holds and takes free ones up to its fair
// share (destinations / live replicas), so replicas spread the work and a dead
// replica's destinations move to the others once its leases expire. Redis is asked in
// one round trip per step, and never while holding the lock workers need.
func (d *Dispatcher) balance(ctx context.Context) {
	ttl := d.opts.Delivery.LeaseTTL
	live, err := d.opts.Store.Heartbeat(ctx, d.opts.Owner, ttl)
	if err != nil {
		d.opts.Logger.Warn("lease round skipped: redis unreachable", "error", err)
		return
	}

	d.mu.Lock()
	var held []*worker
	for _, w := range d.workers {
		if w.done() {
			d.removeWorker(w)
			continue
		}
		held = append(held, w)
	}
	d.mu.Unlock()

	d.renew(ctx, held, ttl)
	d.live.Store(max(live, 1))

	// Nothing to take while this replica holds its share, or every destination: an idle
	// round walks no destination.
	d.mu.Lock()
	share := (len(d.dests) + int(max(live, 1)) - 1) / int(max(live, 1))
	room := share - len(d.workers)
	if room <= 0 || len(d.workers) == len(d.dests) {
		n := len(d.workers)
		d.mu.Unlock()
		d.opts.Metrics.Leases.Set(float64(n))
		return
	}
	ids := make([]string, 0, len(d.dests))
	for id := range d.dests {
		if _, ok := d.workers[id]; !ok {
			ids = append(ids, id)
		}
	}
	d.mu.Unlock()

	// Each replica walks the destinations from its own starting point, so replicas
	// starting together do not all race for the same ones.
	slices.Sort(ids)
	if n := len(ids); n > 0 {
		h := fnv.New32a()
		h.Write([]byte(d.opts.Owner))
		start := int(h.Sum32() % uint32(n))
		ids = append(ids[start:], ids[:start]...)
	}
	d.mu.Lock()
	candidates := make([]destination.Destination, 0, len(ids))
	for _, id := range ids {
		if dest, ok := d.dests[id]; ok {
			candidates = append(candidates, dest)
		}
	}
	d.mu.Unlock()
	d.acquire(ctx, candidates, room, ttl)
}

// renew renews this replica's holds of the accounts of held, one script call per
// account however many of its destinations it holds (store/lease.go). A hold that
// lapsed stops its workers (another replica may hold their leases now). A renewal
// that kept a hold makes its leases ours for most of ttl from when it was sent; when
// the account's control stream moved since the hold's last renewal (or this is its
// first), its workers compare the destinations' control versions with the state in
// hand, so a change whose control entry this replica missed is read before any write.
// Only the lease round (Run's goroutine) calls it: it alone touches d.lastControl.
func (d *Dispatcher) renew(ctx context.Context, held []*worker, ttl time.Duration) {
	byHold := map[store.Hold][]*worker{}
	for _, w := range held {
		h := store.Hold{Account: w.dest.Account, Gen: w.gen}
		byHold[h] = append(byHold[h], w)
	}
	for h := range d.lastControl {
		if _, ok := byHold[h]; !ok {
			delete(d.lastControl, h)
		}
	}
	holds := slices.Collect(maps.Keys(byHold))
	sent := time.Now()
	renewals, err := d.opts.Store.RenewHolds(ctx, holds, d.opts.Owner, ttl)
	if err != nil {
		return // the leases run out on their own (validUntil) unless the next round renews them
	}
	var moved []*worker
	var movedHolds []int
	for i, h := range holds {
		ws := byHold[h]
		switch last, seen := d.lastControl[h]; {
		case !renewals[i].Held:
			// Stop them, but keep them listed until each has finished its write in
			// flight: only then may a new worker (with a new token) start for it.
			d.opts.Logger.Warn("leases lost: this replica's hold of the account lapsed", "account", h.Account, "destinations", len(ws))
			for _, w := range ws {
				w.stop()
			}
			delete(d.lastControl, h)
		case !seen || last != renewals[i].LastControl:
			moved = append(moved, ws...)
			movedHolds = append(movedHolds, i)
		default:
			for _, w := range ws {
				w.renewed(sent, ttl, 0)
			}
		}
	}
	if len(moved) == 0 {
		return
	}
	refs := make([]store.Ref, len(moved))
	for i, w := range moved {
		refs[i] = ref(w.dest)
	}
	versions, err := d.opts.Store.ControlVersions(ctx, refs)
	for i, w := range moved {
		if err != nil {
			w.renewed(sent, ttl, 0) // compared at the next round: the stream is not recorded as seen
			continue
		}
		w.renewed(sent, ttl, versions[i])
	}
	if err == nil {
		for _, i := range movedHolds {
			d.lastControl[holds[i]] = renewals[i].LastControl
		}
	}
}

// take tries, at once, to lease destinations just added here (Upsert), within this
// replica's share as the last lease round counted the live replicas: no renewal of
// what it holds, so a create costs the same with 100,000 others. What it does not
// take waits for the next round, as before.
func (d *Dispatcher) take(dests []destination.Destination) {
	live := max(d.live.Load(), 1)
	d.mu.Lock()
	ctx := d.runCtx // the workers outlive the request that added them
	if ctx == nil || ctx.Err() != nil {
		d.mu.Unlock()
		d.kickBalance() // not running yet (or any more): the lease round takes them
		return
	}
	share := (len(d.dests) + int(live) - 1) / int(live)
	room := share - len(d.workers)
	var candidates []destination.Destination
	for _, dest := range dests {
		if _, held := d.workers[dest.ID]; !held {
			candidates = append(candidates, dest)
		}
	}
	d.mu.Unlock()
	d.acquire(ctx, candidates, room, d.opts.Delivery.LeaseTTL)
}

// acquire takes the free leases of candidates, up to room, and starts their workers;
// candidates is the caller's own slice, which it overwrites.
func (d *Dispatcher) acquire(ctx context.Context, candidates []destination.Destination, room int, ttl time.Duration) {
	d.acquiring.Lock()
	defer d.acquiring.Unlock()
	// Another acquire may have started some while this one waited: a second worker of
	// the same destination would write beside the first, unlisted and never stopped.
	d.mu.Lock()
	candidates = slices.DeleteFunc(candidates, func(dest destination.Destination) bool {
		_, held := d.workers[dest.ID]
		return held
	})
	d.mu.Unlock()
	if room <= 0 || len(candidates) == 0 {
		d.opts.Metrics.Leases.Set(float64(d.heldCount()))
		return
	}
	// Only free leases count against our share: leases other replicas hold must not
	// use it up, or two replicas each holding some could both stop short forever. When
	// every candidate fits, there is nothing to choose: AcquireLeases takes the free
	// ones and leaves the rest (one round trip fewer, under the lock every create's
	// take waits on).
	refs := make([]store.Ref, 0, len(candidates))
	for _, dest := range candidates {
		refs = append(refs, ref(dest))
	}
	want := candidates
	if len(candidates) > room {
		free, err := d.opts.Store.LeasesFree(ctx, refs, d.opts.Owner)
		if err != nil {
			return
		}
		want = nil
		for i, dest := range candidates {
			if free[i] && len(want) < room {
				want = append(want, dest)
			}
		}
	}
	refs = refs[:0]
	for _, dest := range want {
		refs = append(refs, ref(dest))
	}
	sent := time.Now()
	leases, err := d.opts.Store.AcquireLeases(ctx, refs, d.opts.Owner, ttl)
	if err != nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, dest := range want {
		current, configured := d.dests[dest.ID]
		if leases[i].Token == 0 || !configured || current.Fingerprint() != dest.Fingerprint() {
			continue // taken by another replica, or the config changed meanwhile
		}
		d.addWorker(d.startWorker(ctx, dest, leases[i], sent.Add(ttl-ttl/10)))
	}
	d.opts.Metrics.Leases.Set(float64(len(d.workers)))
}

func (d *Dispatcher) heldCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.workers)
}

// stopAll stops every worker (each finishes its write in flight) and releases its
// holds, so every destination it held is free at once.
func (d *Dispatcher) stopAll() {
	d.mu.Lock()
	workers := d.workers
	d.workers, d.accounts = map[string]*worker{}, map[string]map[*worker]struct{}{}
	d.mu.Unlock()
	for _, w := range workers {
		w.stop()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	holds := map[store.Hold]bool{}
	for _, w := range workers {
		<-w.life.finished
		holds[store.Hold{Account: w.dest.Account, Gen: w.gen}] = true
	}
	if err := d.opts.Store.ReleaseHolds(ctx, slices.Collect(maps.Keys(holds)), d.opts.Owner); err != nil {
		// They run out after lease_ttl: the next holder waits that long, nothing more.
		d.opts.Logger.Warn("leases not released at stop: they run out after the lease TTL", "accounts", len(holds), "error", err)
	}
	d.opts.Metrics.Leases.Set(0)
}
