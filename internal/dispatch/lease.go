package dispatch

import (
	"context"
	"hash/fnv"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/store"
)

// leases is this replica's lease state, apart from its workers (Dispatcher.workers): the
// holds of accounts, the workers that ended and the leases held with no worker, both
// waiting for the next lease round, and the replicas that round counted. Each field
// says what guards it.
type leases struct {
	// live is how many replicas the last lease round counted (take's share).
	live atomic.Int64
	// acquiring lets one acquire run at a time (a lease round, a new destination's
	// take): two at once could each start a worker for the same destination.
	acquiring sync.Mutex
	// holds are this replica's holds of accounts, each with the workers of its leases
	// (hold.go; under Dispatcher.mu).
	holds map[store.Hold]*hold
	// ended are workers that finished since the last lease round, which unlists them
	// (under endedMu, which is taken alone: a worker ends holding its own lock).
	endedMu sync.Mutex
	ended   []*worker
	// unfreed are leases this replica holds with no worker, to free (freeLeases; under
	// acquiring).
	unfreed []store.Held
}

// workerEnded records a worker that finished, for the next lease round to unlist.
func (l *leases) workerEnded(w *worker) {
	l.endedMu.Lock()
	l.ended = append(l.ended, w)
	l.endedMu.Unlock()
}

// takeEnded returns the workers that ended since it was last called.
func (l *leases) takeEnded() []*worker {
	l.endedMu.Lock()
	defer l.endedMu.Unlock()
	ended := l.ended
	l.ended = nil
	return ended
}

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

	// Unlist the workers that ended since the last round (a stopped worker stays listed
	// until its write in flight is done, so no second worker starts beside it), and free
	// their leases. Under acquiring: no acquire here takes one back in between, which
	// the release would then free under its new worker.
	d.leases.acquiring.Lock()
	ended := d.leases.takeEnded()
	d.mu.Lock()
	for _, w := range ended {
		d.removeWorker(w)
		d.leases.unfreed = append(d.leases.unfreed, store.Held{Ref: ref(w.dest), Gen: w.holding.key.Gen})
	}
	holds := slices.Collect(maps.Values(d.leases.holds))
	d.mu.Unlock()
	d.freeLeases(ctx)
	d.leases.acquiring.Unlock()

	d.renew(ctx, holds, ttl)
	d.leases.live.Store(max(live, 1))

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
			candidates = append(candidates, *dest)
		}
	}
	d.mu.Unlock()
	d.acquire(ctx, candidates, room, ttl)
}

// leaseCallTimeout bounds a lease call that a stop does not cut short.
const leaseCallTimeout = 5 * time.Second

// freeLeases frees the leases this replica holds with no worker listed (unfreed): a
// worker that ended with no successor, a lease an acquire took but did not start. Its
// hold of the account lives on with its other leases, so unfreed they would stay held
// by a replica that does not run them. Those freed go to any replica at once; on a
// Redis error they wait for the next round. d.leases.acquiring is held: no acquire here
// takes one back meanwhile, which the release would then free under its new worker.
func (d *Dispatcher) freeLeases(ctx context.Context) {
	if len(d.leases.unfreed) == 0 {
		return
	}
	d.mu.Lock()
	free := slices.DeleteFunc(d.leases.unfreed, func(l store.Held) bool {
		_, running := d.workers[l.ID] // taken back here since: its worker holds it
		return running
	})
	d.mu.Unlock()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leaseCallTimeout) // as acquire's
	defer cancel()
	if err := d.opts.Store.ReleaseLeases(rctx, free, d.opts.Owner); err != nil {
		d.leases.unfreed = free
		d.opts.Logger.Warn("leases not released; retried at the next lease round", "leases", len(free), "error", err)
		return
	}
	d.leases.unfreed = nil
}

// renew renews this replica's holds, one script call per account however many of its
// destinations it holds (store/lease.go): a renewal that kept a hold makes all its
// leases ours for most of ttl from when it was sent, with nothing done per
// destination. Only three things touch a hold's workers: a hold that lapsed here (its
// workers parked; they read their state and run again), a hold lost in Redis (its
// workers stop: another replica may hold their leases now), and an account whose
// control stream moved since the hold's last renewal, or a hold's first renewal (its
// workers compare the destinations' control versions with the state in hand, so a
// change whose control entry this replica missed is read before any write). Only the
// lease round (Run's goroutine) calls it: it alone touches hold.lastControl.
func (d *Dispatcher) renew(ctx context.Context, holds []*hold, ttl time.Duration) {
	if len(holds) == 0 {
		return
	}
	keys, since := make([]store.Hold, len(holds)), make([]string, len(holds))
	for i, h := range holds {
		keys[i] = h.key
		if h.renewedOnce {
			since[i] = h.lastControl
		}
	}
	sent := time.Now()
	renewals, err := d.opts.Store.RenewHolds(ctx, keys, since, d.opts.Owner, ttl)
	if err != nil {
		return // the leases run out on their own (hold.until) unless the next round renews them
	}
	workersOf := func(h *hold) []*worker {
		d.mu.Lock()
		defer d.mu.Unlock()
		return slices.Collect(maps.Keys(h.workers))
	}
	// A hold whose account's control stream moved has its workers compare their
	// control versions before its leases are extended: a change this replica missed
	// (a pause at P) is in hand before any write the renewal allows, so no write starts
	// after an unanswered pause on a renewal Redis ran after it.
	var moved []*worker
	var movedHolds []int
	kept := make([]bool, len(holds))
	for i, h := range holds {
		if !renewals[i].Held {
			ws := workersOf(h)
			// Stop them, but keep them listed until each has finished its write in
			// flight: only then may a new worker (with a new token) start for it.
			d.opts.Logger.Warn("leases lost: this replica's hold of the account lapsed", "account", h.key.Account, "destinations", len(ws))
			for _, w := range ws {
				w.stop()
			}
			continue
		}
		kept[i] = true
		switch r := renewals[i]; {
		case h.renewedOnce && h.lastControl == r.LastControl:
			// nothing changed in the account since the last renewal
		case !h.renewedOnce || r.Every:
			moved = append(moved, workersOf(h)...)
			movedHolds = append(movedHolds, i)
		default: // only the destinations the entries since name
			d.mu.Lock()
			for _, id := range r.Changed {
				if w := d.workers[id]; w != nil && w.holding == h {
					moved = append(moved, w)
				}
			}
			d.mu.Unlock()
			movedHolds = append(movedHolds, i)
		}
	}
	if len(moved) > 0 {
		refs := make([]store.Ref, len(moved))
		for i, w := range moved {
			refs[i] = ref(w.dest)
		}
		versions, err := d.opts.Store.ControlVersions(ctx, refs)
		for _, i := range movedHolds {
			if err != nil {
				kept[i] = false // not extended: compared again at the next round
				continue
			}
			holds[i].lastControl, holds[i].renewedOnce = renewals[i].LastControl, true
		}
		if err == nil {
			for i, w := range moved {
				w.controlAt(versions[i])
			}
		}
	}
	for i, h := range holds {
		if kept[i] && h.extend(time.Now(), sent.Add(ttl-ttl/10)) {
			for _, w := range workersOf(h) {
				w.changed()
			}
		}
	}
}

// take tries, at once, to lease destinations just added here (Upsert), within this
// replica's share as the last lease round counted the live replicas: no renewal of
// what it holds, so a create costs the same with 100,000 others. What it does not
// take waits for the next round, as before.
func (d *Dispatcher) take(dests []destination.Destination) {
	live := max(d.leases.live.Load(), 1)
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
	d.leases.acquiring.Lock()
	defer d.leases.acquiring.Unlock()
	// Another acquire may have started some while this one waited: a second worker of
	// the same destination would write beside the first, unlisted and never stopped.
	d.mu.Lock()
	candidates = slices.DeleteFunc(candidates, func(dest destination.Destination) bool {
		_, held := d.workers[dest.ID]
		return held
	})
	d.mu.Unlock()
	if room <= 0 || len(candidates) == 0 || ctx.Err() != nil {
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
	// Not cut short by a stop: an answer lost to it would leave what the scripts took
	// held under a hold this replica never listed, which its stop cannot release (the
	// next holder would wait out the TTL). stopAll waits for this acquire (acquiring).
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leaseCallTimeout)
	taken, err := d.opts.Store.AcquireLeases(actx, refs, d.opts.Owner, ttl)
	cancel()
	if err != nil {
		// The scripts may have run (a WAIT that fell short, one master of several
		// failing): what they took under a hold listed here would stay held with no
		// worker while the hold lives. Free them under each gen listed for their account.
		d.mu.Lock()
		gens := map[string][]string{}
		for key := range d.leases.holds {
			gens[key.Account] = append(gens[key.Account], key.Gen)
		}
		for _, dest := range want {
			for _, gen := range gens[dest.Account] {
				d.leases.unfreed = append(d.leases.unfreed, store.Held{Ref: ref(dest), Gen: gen})
			}
		}
		d.mu.Unlock()
		d.freeLeases(ctx)
		return
	}
	until := sent.Add(ttl - ttl/10)
	d.mu.Lock()
	for i, dest := range want {
		current, configured := d.dests[dest.ID]
		switch {
		case taken[i].Token == 0:
			continue // another replica's
		case !configured || current.Fingerprint() != dest.Fingerprint():
			// Changed meanwhile: taken, but not started. Freed, or it would stay held.
			d.leases.unfreed = append(d.leases.unfreed, store.Held{Ref: ref(dest), Gen: taken[i].Gen})
			continue
		}
		d.addWorker(d.startWorker(ctx, dest, taken[i].Token, d.holdOf(store.Hold{Account: dest.Account, Gen: taken[i].Gen}, until)))
	}
	d.opts.Metrics.Leases.Set(float64(len(d.workers)))
	d.mu.Unlock()
	d.freeLeases(ctx)
}

// holdOf returns this replica's hold key; a new one's leases are ours until until (the
// acquire that named it renewed it in Redis). A hold already listed keeps its time: only
// a renewal extends it, after its workers compared their control versions (renew).
// d.mu is held.
func (d *Dispatcher) holdOf(key store.Hold, until time.Time) *hold {
	h := d.leases.holds[key]
	if h == nil {
		h = &hold{key: key, workers: map[*worker]struct{}{}}
		h.extend(time.Now(), until)
		d.leases.holds[key] = h
	}
	return h
}

func (d *Dispatcher) heldCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.workers)
}

// stopAll stops every worker (each finishes its write in flight) and releases its
// holds, so every destination it held is free at once.
func (d *Dispatcher) stopAll() {
	d.leases.acquiring.Lock() // no take adds a worker or a hold after the swap
	defer d.leases.acquiring.Unlock()
	d.mu.Lock()
	workers, holds := d.workers, slices.Collect(maps.Keys(d.leases.holds))
	d.workers, d.accounts, d.leases.holds = map[string]*worker{}, map[string]map[*worker]struct{}{}, map[store.Hold]*hold{}
	d.mu.Unlock()
	for _, w := range workers {
		w.stop()
	}
	for _, w := range workers {
		<-w.life.finished
	}
	// The release's own time starts once the workers are done (on a loaded machine,
	// hundreds finishing their commits could use up a limit that started before them).
	ctx, cancel := context.WithTimeout(context.Background(), leaseCallTimeout)
	defer cancel()
	if err := d.opts.Store.ReleaseHolds(ctx, holds, d.opts.Owner); err != nil {
		// They run out after lease_ttl: the next holder waits that long, nothing more.
		d.opts.Logger.Warn("leases not released at stop: they run out after the lease TTL", "accounts", len(holds), "error", err)
	}
	d.opts.Metrics.Leases.Set(0)
}
