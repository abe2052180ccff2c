package main

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/dispatch"
	"github.com/mercamap/relay/internal/registry"
)

// apiSource is the second source of accounts and destinations on a replica: those the API made,
// read from the registry at start and then from its change stream (one blocking read per
// replica, nothing per destination), each change handed to the dispatcher as it comes.
// What the file defines wins over a registry entry of the same id.
type apiSource struct {
	reg  *registry.Registry
	disp *dispatch.Dispatcher
	log  *slog.Logger

	// onAccounts is called, outside the locks, when the API's accounts changed.
	onAccounts func()

	// applying is held while changes go to the dispatcher, and while a reload gives it
	// the merged set (setDestinations).
	applying sync.Mutex

	mu sync.Mutex
	// dests is by id; a reading of the registry fills it with pointers into the one list
	// the registry gave, so none is written through: a change puts a new one.
	dests    map[string]*destination.Destination
	accounts map[string]config.Account // by id
	file     map[string]bool           // the file's destination ids
	pos      string                    // the change stream, read up to here
}

// accountList is the accounts the API made, by id.
func (a *apiSource) accountList() []config.Account {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]config.Account, 0, len(a.accounts))
	for _, id := range slices.Sorted(maps.Keys(a.accounts)) {
		out = append(out, a.accounts[id])
	}
	return out
}

// changeWait is how long one read of the change stream blocks.
const changeWait = 5 * time.Second

// load reads the whole registry and returns it with the file's destinations, the file's
// winning on a shared id: what the dispatcher takes at start.
func (a *apiSource) load(ctx context.Context, file []destination.Destination) ([]destination.Destination, error) {
	recs, pos, err := a.reg.Destinations(ctx)
	if err != nil {
		return nil, err
	}
	accts, err := a.reg.AllAccounts(ctx)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.accounts = make(map[string]config.Account, len(accts))
	for _, r := range accts {
		a.accounts[r.ID] = r.Account()
	}
	a.dests = byID(recs)
	a.pos = pos
	return a.mergeLocked(file), nil
}

// byID maps each of dests by its id to itself: pointers into dests, not copies.
func byID(dests []destination.Destination) map[string]*destination.Destination {
	m := make(map[string]*destination.Destination, len(dests))
	for i := range dests {
		m[dests[i].ID] = &dests[i]
	}
	return m
}

// merged is the file's destinations with the registry's (the file's win on a shared id):
// what a reload gives the dispatcher, so a SIGHUP never removes what the API made.
func (a *apiSource) merged(file []destination.Destination) []destination.Destination {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.mergeLocked(file)
}

func (a *apiSource) mergeLocked(file []destination.Destination) []destination.Destination {
	a.file = make(map[string]bool, len(file))
	for _, d := range file {
		a.file[d.ID] = true
	}
	ids := make([]string, 0, len(a.dests))
	for id := range a.dests {
		if !a.file[id] {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	out := make([]destination.Destination, len(file), len(file)+len(ids))
	copy(out, file)
	for _, id := range ids {
		out = append(out, *a.dests[id])
	}
	return out
}

// run follows the change stream until ctx ends: a destination made or changed on any
// replica is upserted here, a deleted one removed. Redis not answering is waited out.
func (a *apiSource) run(ctx context.Context) {
	for ctx.Err() == nil {
		a.mu.Lock()
		pos := a.pos
		a.mu.Unlock()
		changes, next, reload, err := a.next(ctx, pos)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			a.log.Warn("the registry's changes could not be read; trying again", "error", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		case reload:
			a.log.Info("this replica fell behind the registry's changes; reading it whole")
			a.reloadAll(ctx)
			continue
		}
		a.apply(ctx, changes)
		a.mu.Lock()
		a.pos = next
		a.mu.Unlock()
	}
}

// next is one blocking read of the change stream. A stop does not wait for it: go-redis
// does not cut a blocking read short when its context ends, and a SIGTERMed replica
// waited out the whole changeWait (5 s of every pod's stop in a roll); the read's answer
// is dropped.
func (a *apiSource) next(ctx context.Context, pos string) ([]registry.Change, string, bool, error) {
	type read struct {
		changes []registry.Change
		next    string
		reload  bool
		err     error
	}
	done := make(chan read, 1)
	go func() {
		var r read
		r.changes, r.next, r.reload, r.err = a.reg.Next(ctx, pos, changeWait)
		done <- r
	}()
	select {
	case <-ctx.Done():
		return nil, "", false, ctx.Err()
	case r := <-done:
		return r.changes, r.next, r.reload, r.err
	}
}

// apply hands changes to the dispatcher, in order.
func (a *apiSource) apply(ctx context.Context, changes []registry.Change) {
	a.applying.Lock()
	accountsChanged := a.applyLocked(ctx, changes)
	a.applying.Unlock()
	if accountsChanged && a.onAccounts != nil {
		a.onAccounts()
	}
}

// applyLocked is apply under a.applying; it reports whether an account changed.
func (a *apiSource) applyLocked(ctx context.Context, changes []registry.Change) (accountsChanged bool) {
	for _, c := range changes {
		if c.IsAccount {
			a.mu.Lock()
			if c.Account != nil {
				a.accounts[c.ID] = c.Account.Account()
			} else {
				delete(a.accounts, c.ID)
			}
			a.mu.Unlock()
			accountsChanged = true
			continue
		}
		var nd destination.Destination
		a.mu.Lock()
		fileOwned := a.file[c.ID]
		if c.Record != nil {
			nd = c.Record.Destination()
			a.dests[c.ID] = &nd
		} else {
			delete(a.dests, c.ID)
		}
		a.mu.Unlock()
		if fileOwned {
			continue
		}
		if c.Record == nil {
			a.disp.Remove(c.ID)
			continue
		}
		if a.disp.IsMaking(c.ID) {
			continue // this replica's API is making it, and takes it itself once its old state is gone
		}
		if cur, ok := a.disp.Destination(c.ID); ok && cur.Fingerprint() == nd.Fingerprint() && cur.PinnedExternalID == nd.PinnedExternalID {
			continue // this replica took it already (it made the change): nothing to ensure
		}
		if err := a.disp.Upsert(ctx, nd); err != nil {
			a.log.Warn("a destination the api made could not be taken; the next change or restart takes it", "destination", c.ID, "error", err)
		}
	}
	return accountsChanged
}

// reloadAll reads the registry again and makes the dispatcher's API destinations match.
func (a *apiSource) reloadAll(ctx context.Context) {
	recs, pos, err := a.reg.Destinations(ctx)
	if err != nil {
		a.log.Warn("the registry could not be read", "error", err)
		return
	}
	accts, err := a.reg.AllAccounts(ctx)
	if err != nil {
		a.log.Warn("the registry could not be read", "error", err)
		return
	}
	a.applying.Lock()
	a.mu.Lock()
	a.accounts = make(map[string]config.Account, len(accts))
	for _, r := range accts {
		a.accounts[r.ID] = r.Account()
	}
	old := a.dests
	a.dests = byID(recs)
	// up is recs less the file's ids: recs itself when the file has none of them (the
	// dispatcher only reads it), else a list of its own (a.dests points into recs).
	up := recs
	if slices.ContainsFunc(recs, func(d destination.Destination) bool { return a.file[d.ID] }) {
		up = slices.DeleteFunc(slices.Clone(recs), func(d destination.Destination) bool { return a.file[d.ID] })
	}
	var gone []string
	for id := range old {
		if _, ok := a.dests[id]; !ok && !a.file[id] {
			gone = append(gone, id)
		}
	}
	a.pos = pos
	a.mu.Unlock()
	a.disp.Remove(gone...)
	if err := a.disp.Upsert(ctx, up...); err != nil {
		a.log.Warn("the api's destinations could not be taken", "error", err)
	}
	a.applying.Unlock()
	if a.onAccounts != nil {
		a.onAccounts() // not under a.applying: a reload takes its own lock, then that one
	}
}

// setDestinations gives the dispatcher the file's destinations and the API's (merged)
// through set, while no change is being applied: a change read meanwhile is applied
// after, never lost under the swap.
func (a *apiSource) setDestinations(file []destination.Destination, set func([]destination.Destination) error) error {
	a.applying.Lock()
	defer a.applying.Unlock()
	return set(a.merged(file))
}
