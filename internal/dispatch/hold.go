package dispatch

import (
	"sync/atomic"
	"time"

	"github.com/mercamap/relay/internal/store"
)

// hold is this replica's hold of one account (store.Hold, store/lease.go): the leases
// of every destination of the account it holds are renewed, and lapse, together. A
// renewal moves one time for all of them (until), so nothing is done per destination
// while the hold lives; only a hold that lapsed, was lost, or whose account's control
// stream moved touches its workers.
type hold struct {
	key   store.Hold
	until atomic.Pointer[time.Time] // the leases are surely ours until then
	// workers are the hold's workers (under Dispatcher.mu).
	workers map[*worker]struct{}
	// lastControl is the account's control stream's last id at the hold's last renewal
	// ("" before its first): only the lease round touches it.
	lastControl string
	renewedOnce bool
}

// held says the hold's leases are surely still ours at now: on the monotonic clock (a
// frozen process), and on the wall clock too (a machine that was suspended: Linux's
// monotonic clock stands still meanwhile, the hold in Redis does not).
func (h *hold) held(now time.Time) bool { return before(now, h.until.Load()) }

// before says now is surely before until (nil: never).
func before(now time.Time, until *time.Time) bool {
	return until != nil && now.Before(*until) && now.Round(0).Before(until.Round(0))
}

// extend makes the leases ours until until (never earlier than they already were), and
// reports whether they had lapsed at now: the workers parked then must be told.
func (h *hold) extend(now, until time.Time) (lapsed bool) {
	for {
		old := h.until.Load()
		lapsed = !before(now, old) // judged on the time loaded, which the swap below replaces
		if old != nil && !until.After(*old) {
			return lapsed
		}
		if h.until.CompareAndSwap(old, &until) {
			return lapsed
		}
	}
}
