package stream

import (
	"sync"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/store"
)

// DefaultViewCache is how many destinations' cards a replica keeps built (Options.ViewCache).
// A card is a few KB (its setup's policy documents), so the cache stays within tens of
// MB however many destinations the config holds.
const DefaultViewCache = 4096

// view is one destination's card as this replica last built it, and what it was built
// from. A view is never changed once made: a newer one replaces it.
type view struct {
	static staticKey
	state  store.State // as read from Redis, at state.Sequence
	card   Card        // its Lag and ReplayableFrom unset
}

// staticKey is what a card's static part (staticCard) is built from, so a view whose
// key is the same serves it again: the definition (its fingerprint, and where and when
// it was made, which the fingerprint leaves out), our identity, and the stored
// ExternalId and creation time.
type staticKey struct {
	fingerprint, managedBy string
	createdAt, storedAt    int64 // Unix ms; 0: none
	identity               destination.Identity
	externalID             string
	window                 int // the window shown when d sets none (Options.Window)
}

func staticKeyOf(d destination.Destination, st store.State, id destination.Identity, window int) staticKey {
	k := staticKey{fingerprint: d.Fingerprint(), managedBy: d.Managed(), identity: id, externalID: st.ExternalID, window: window}
	if !d.CreatedAt.IsZero() {
		k.createdAt = d.CreatedAt.UnixMilli()
	}
	if !st.CreatedAt.IsZero() {
		k.storedAt = st.CreatedAt.UnixMilli()
	}
	return k
}

// newView builds d's view from st, reusing prev's static part when it was built from the
// same key (staticKeyOf(d, st, id)): a state change costs the state fields, not the
// policy documents again.
func newView(prev *view, key staticKey, d destination.Destination, st store.State, id destination.Identity) *view {
	var card Card
	if prev != nil && prev.static == key {
		card = prev.card // the static part's maps are shared, read-only
	} else {
		card = staticCard(d, st, id, key.window)
	}
	card.setStored(st)
	return &view{static: key, state: st, card: card}
}

// views is the replica's bounded cache of built cards, by destination id, safe for
// concurrent requests. When full, adding one evicts another, picked by Go's map order
// (random): no bookkeeping per read, and a destination read often is soon back in.
type views struct {
	mu    sync.Mutex
	limit int
	byID  map[string]*view
}

func newViews(limit int) *views {
	return &views{limit: limit, byID: make(map[string]*view, limit)}
}

// get returns id's view, nil when none is kept.
func (v *views) get(id string) *view {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.byID[id]
}

// put keeps w as id's view.
func (v *views) put(id string, w *view) {
	if v.limit <= 0 {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.byID[id]; !ok && len(v.byID) >= v.limit {
		for other := range v.byID {
			delete(v.byID, other)
			break
		}
	}
	v.byID[id] = w
}

// drop forgets id's view (its state is gone from Redis).
func (v *views) drop(id string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.byID, id)
}

// len is how many views are kept.
func (v *views) len() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.byID)
}
