package dispatch

import (
	"context"
	"slices"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/store"
)

// Upsert adds or redefines the given destinations, leaving every other one as it is: a
// destination the API made or changed (internal/registry), on the replica that made it
// and on each one that reads the change. Only these are ensured in Redis, so adding one
// costs the same with 100,000 others. A redefined one's worker stops and the next lease
// round starts it on the new definition.
func (d *Dispatcher) Upsert(ctx context.Context, dests ...destination.Destination) error {
	if len(dests) == 0 {
		return nil
	}
	own := slices.Clone(dests) // what d.dests and the index point at: one copy, not one a destination
	d.mu.Lock()
	if d.dests == nil {
		d.dests = map[string]*destination.Destination{}
	}
	for i := range own {
		dest := &own[i]
		if w, ok := d.workers[dest.ID]; ok && w.dest.Fingerprint() != dest.Fingerprint() {
			w.stop()
		}
		d.index.put(dest, d.dests[dest.ID])
		d.dests[dest.ID] = dest // under mu: every reader holds mu (SetDestinations swaps the map)
	}
	d.mu.Unlock()
	if err := d.ensure(ctx, dests, true, false); err != nil {
		return err
	}
	d.take(dests)
	return nil
}

// Making marks id as being made by this replica's API until done is called: the
// registry's change for it comes back through this replica's follower too, possibly
// before the API has cleared what an earlier destination of the id left in Redis, and
// the follower must leave it to the API (IsMaking), whose Upsert takes it once that is
// done. Without it the follower's worker ran its setup check against state the API then
// deleted ("no stored state"), and the new destination waited a whole check backoff.
func (d *Dispatcher) Making(id string) (done func()) {
	d.mu.Lock()
	if d.making == nil {
		d.making = map[string]int{}
	}
	d.making[id]++
	d.mu.Unlock()
	return func() {
		d.mu.Lock()
		if d.making[id]--; d.making[id] <= 0 {
			delete(d.making, id)
		}
		d.mu.Unlock()
	}
}

// IsMaking reports whether this replica's API is making id now (Making).
func (d *Dispatcher) IsMaking(id string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.making[id] > 0
}

// Remove forgets the destinations of ids on this replica: their workers stop at their
// next step and no lease round takes them again. Their state in Redis is the caller's
// (Forget, after the delete's fence).
func (d *Dispatcher) Remove(ids ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, id := range ids {
		if w, ok := d.workers[id]; ok {
			w.stop()
		}
		if dest, ok := d.dests[id]; ok {
			d.index.remove(*dest)
		}
		delete(d.dests, id)
	}
}

// Delete ends a destination for good, on every replica. First the pause's fence: no
// write starts after it, on any replica (WriteInFlight says whether one was under way).
// Then unlist removes it from its source (the registry, whose change the other replicas
// read); when that fails the destination stays, paused, and the error comes back. Then
// the account's watchers are told to load a new snapshot, the destination is removed
// here, and what Redis holds of it is deleted (Forget).
func (d *Dispatcher) Delete(ctx context.Context, id string, unlist func(context.Context) error) (Change, error) {
	dest, ok := d.Destination(id)
	if !ok {
		return Change{}, destination.ErrNotFound
	}
	ch, err := d.setStatus(ctx, id, store.Paused, true, "")
	if err != nil {
		return Change{}, err
	}
	if err := unlist(ctx); err != nil {
		return Change{}, err
	}
	d.resync(ctx, dest, "the destination was deleted")
	d.Remove(id)
	return ch, d.opts.Store.Forget(ctx, ref(dest))
}
