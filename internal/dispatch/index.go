package dispatch

import (
	"cmp"
	"slices"
	"sync"

	"github.com/mercamap/relay/internal/destination"
)

// index is the configured destinations by account, for the API's reads: a request made
// with an account's token costs that account's destinations, never a walk or a sort of
// every destination. The sorted lists it hands out are shared and read-only: each is
// built when first asked for after its account's set changed (the whole list after any
// change), so a reader sorts nothing while nothing changes. It has its own lock, so no
// reader holds the one every worker needs; the Dispatcher changes it together with
// dests, under mu. It holds the dispatcher's pointers (Dispatcher.dests), never a copy of
// a definition of its own, and never writes through them.
type index struct {
	mu        sync.Mutex
	byAccount map[string]map[string]*destination.Destination // account → id → definition
	sorted    map[string][]destination.Destination           // account → its list by id; absent: build it
	all       []destination.Destination                      // every one by id; nil: build it
}

func newIndex() *index {
	return &index{byAccount: map[string]map[string]*destination.Destination{}, sorted: map[string][]destination.Destination{}}
}

// reset makes the index hold dests (by id) and nothing else.
func (x *index) reset(dests map[string]*destination.Destination) {
	byAccount := map[string]map[string]*destination.Destination{}
	for id, d := range dests {
		m := byAccount[d.Account]
		if m == nil {
			m = map[string]*destination.Destination{}
			byAccount[d.Account] = m
		}
		m[id] = d
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.byAccount, x.sorted, x.all = byAccount, map[string][]destination.Destination{}, nil
}

// put adds or redefines d; prev is the definition it replaces, nil when none (its
// account may not be d's).
func (x *index) put(d, prev *destination.Destination) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if prev != nil {
		x.forget(*prev)
	}
	m := x.byAccount[d.Account]
	if m == nil {
		m = map[string]*destination.Destination{}
		x.byAccount[d.Account] = m
	}
	m[d.ID] = d
	delete(x.sorted, d.Account)
	x.all = nil
}

// remove forgets d.
func (x *index) remove(d destination.Destination) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.forget(d)
}

// forget drops d and the lists that held it; under mu.
func (x *index) forget(d destination.Destination) {
	if m := x.byAccount[d.Account]; m != nil {
		delete(m, d.ID)
		if len(m) == 0 {
			delete(x.byAccount, d.Account)
		}
	}
	delete(x.sorted, d.Account)
	x.all = nil
}

// account returns acct's destinations sorted by id (shared: read-only).
func (x *index) account(acct string) []destination.Destination {
	x.mu.Lock()
	defer x.mu.Unlock()
	if list, ok := x.sorted[acct]; ok {
		return list
	}
	m := x.byAccount[acct]
	if len(m) == 0 {
		return nil // not kept: an unknown name must not grow the map
	}
	list := make([]destination.Destination, 0, len(m))
	for _, d := range m {
		list = append(list, *d)
	}
	slices.SortFunc(list, byID)
	x.sorted[acct] = list
	return list
}

// every returns all destinations sorted by id (shared: read-only).
func (x *index) every() []destination.Destination {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.all == nil {
		n := 0
		for _, m := range x.byAccount {
			n += len(m)
		}
		all := make([]destination.Destination, 0, n)
		for _, m := range x.byAccount {
			for _, d := range m {
				all = append(all, *d)
			}
		}
		slices.SortFunc(all, byID)
		x.all = all
	}
	return x.all
}

// counts returns how many destinations each account has (a new map: the caller's).
func (x *index) counts() map[string]int {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := make(map[string]int, len(x.byAccount))
	for acct, m := range x.byAccount {
		out[acct] = len(m)
	}
	return out
}

func byID(a, b destination.Destination) int { return cmp.Compare(a.ID, b.ID) }
