package dispatch

import (
	"maps"
	"slices"

	"github.com/mercamap/relay/internal/destination"
)

// Held returns the destinations this replica holds a lease for (and so delivers for),
// sorted by id. The API's queue-depth gauge reports only these, so each replica's
// scrape covers its own share and the cost stays bounded.
func (d *Dispatcher) Held() []destination.Destination {
	d.mu.Lock()
	defer d.mu.Unlock()
	ids := slices.Sorted(maps.Keys(d.workers))
	out := make([]destination.Destination, 0, len(ids))
	for _, id := range ids {
		if w := d.workers[id]; !w.done() {
			out = append(out, w.dest)
		}
	}
	return out
}
