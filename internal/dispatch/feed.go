package dispatch

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/mercamap/relay/internal/store"
)

// feedMax is how many of an account's newest log entries a replica keeps in memory for
// its destinations there (the feed). A destination further behind reads its own
// backlog from Redis until it is back within them.
const feedMax = 1024

// feed is the stretch of one account's log this replica's follower read last (wake.go),
// shared by the account's workers: one read of the log for all of them, and what this
// replica's own appends added (handoff), which reach the workers without waiting for
// that read. The entries follow the log id from with nothing left out, so a worker
// whose cursor lies in that stretch finds exactly what the log holds after it.
type feed struct {
	mu      sync.Mutex
	owner   *follower // the follower filling it; nil: none, nothing is known
	from    string
	entries []store.LogEntry
	// ownAt is when an append of this replica last handed entries over; missed, that
	// one did not follow the feed's last entry (another replica appended between): the
	// follower reads the log at once (plan).
	ownAt  time.Time
	missed bool
}

// ownQuiet is how long after this replica's last append to an account its follower
// leaves the account's log out of its reads (plan): the appends hand their entries over
// themselves, and a read of them would cost a round trip and a wake-up each. Meanwhile
// the follower reads at least this often, so an entry another replica appended after
// this replica's last append is read within it.
const ownQuiet = 250 * time.Millisecond

// follower names one run of follow: a feed takes entries from the run that started it
// only, so a follower ending as another starts (the accounts of a slot changed) cannot
// undo the new one's start.
type follower struct{ _ byte }

// feedOf returns the account's feed, making it on first use.
func (d *Dispatcher) feedOf(acct string) *feed {
	d.feedsMu.Lock()
	defer d.feedsMu.Unlock()
	f := d.feeds[acct]
	if f == nil {
		f = &feed{}
		d.feeds[acct] = f
	}
	return f
}

// start has follower by fill the feed from log id from on (the log's end when it
// starts): what it held before is forgotten.
func (f *feed) start(by *follower, from string) {
	f.mu.Lock()
	f.owner, f.from, f.entries = by, from, nil
	f.mu.Unlock()
}

// stop empties the feed if by still fills it.
func (f *feed) stop(by *follower) {
	f.mu.Lock()
	if f.owner == by {
		f.owner, f.from, f.entries = nil, "", nil
	}
	f.mu.Unlock()
}

// add appends entries by read that follow the feed's last one in the log, keeping the
// newest feedMax, and reports whether any was new. Those the feed holds already (an
// append of this replica handed them over first: handoff, which woke the workers) are
// skipped: the read follows the log from where it started, so what it brings past the
// feed's last entry follows that entry.
func (f *feed) add(by *follower, es []store.LogEntry) (grew bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.owner != by {
		return false
	}
	last := f.last()
	for len(es) > 0 && store.CompareIDs(es[0].ID, last) <= 0 {
		if !f.holds(es[0].ID) {
			// A run was taken that did not follow (never, while Run.After is the log's
			// last id): the feed missed this entry. It starts over past the read, so a
			// worker behind it reads the log itself rather than skip what it missed.
			f.from, f.entries = es[len(es)-1].ID, nil
			return true
		}
		es = es[1:]
	}
	f.put(es)
	return len(es) > 0
}

// holds reports whether the feed has the entry id (or starts after it); f.mu is held.
func (f *feed) holds(id string) bool {
	if store.CompareIDs(id, f.from) <= 0 {
		return true
	}
	_, found := f.find(id)
	return found
}

// find is where id is, or would go, among the feed's entries (in log order); f.mu is held.
func (f *feed) find(id string) (i int, found bool) {
	return slices.BinarySearchFunc(f.entries, id, func(e store.LogEntry, id string) int {
		return store.CompareIDs(e.ID, id)
	})
}

// handoff appends the entries an append of this replica just added to the log, when
// they follow the feed's last entry (after): nothing came between, so the account's
// workers need not wait for the follower's read of them. It reports whether it took
// them; when not (another append came between, or the feed is not filled), the
// follower's read brings them as before.
// A run that does not follow marks the feed missed; wake is true when that is new (the
// follower is to be woken to read the log).
func (f *feed) handoff(after string, es []store.LogEntry, now time.Time) (took, wake bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.owner == nil {
		return false, false
	}
	f.ownAt = now
	if n := len(es); n > 0 && f.holds(es[n-1].ID) {
		return false, false // the follower's read brought the run first: nothing was missed
	}
	if after == "" || after != f.last() {
		wake, f.missed = !f.missed, true
		return false, wake
	}
	f.put(es)
	return true, false
}

// plan is where by's next read of the account starts, from p (where the last one
// left it): the log left out while this replica's own appends hand its entries over
// (ownQuiet), read again from the feed's last entry once they stop or one of them
// missed (the feed holds the log up to there, so the read brings only what it lacks).
func (f *feed) plan(by *follower, p store.FollowPoint, now time.Time) store.FollowPoint {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.owner != by {
		p.SkipLog = false
		return p
	}
	hot := !f.ownAt.IsZero() && now.Sub(f.ownAt) < ownQuiet && !f.missed
	if f.missed || (p.SkipLog && !hot) {
		p.Log = f.last()
	}
	f.missed, p.SkipLog = false, hot
	return p
}

// last is the id of the feed's last entry, or where it starts when it has none.
func (f *feed) last() string {
	if n := len(f.entries); n > 0 {
		return f.entries[n-1].ID
	}
	return f.from
}

// put appends es, keeping the newest feedMax; f.mu is held.
func (f *feed) put(es []store.LogEntry) {
	if len(es) == 0 {
		return
	}
	f.entries = append(f.entries, es...)
	if over := len(f.entries) - feedMax; over > 0 {
		f.from = f.entries[over-1].ID
		// A copy: the old array, which workers may still read, is left alone.
		f.entries = slices.Clone(f.entries[over:])
	}
}

// after returns up to n entries that follow cursor in the log, from memory. ok is false
// when the feed does not reach back to cursor: the caller reads the log itself. An
// empty answer with ok means nothing is known past cursor yet. The slice is shared: it
// must not be changed.
func (f *feed) after(cursor string, n int) (es []store.LogEntry, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.owner == nil || store.CompareIDs(cursor, f.from) < 0 {
		return nil, false
	}
	i, found := f.find(cursor)
	if found {
		i++
	}
	return f.entries[i:min(i+n, len(f.entries)):min(i+n, len(f.entries))], true
}

// Appended takes what this replica's ingest just added to account logs (store.Run):
// an account whose workers run here gets the entries into its feed and its workers
// woken at once, one hop before the follower's read of the same entries (which the feed
// then skips). While its appends go on, the follower does not read that log (plan). A
// run that does not follow the feed's last entry (another replica appended between) is
// left to a read of the log, which a wake of the follower makes at once.
// The log stays the truth: nothing here is kept that the log does not hold.
func (d *Dispatcher) Appended(runs []store.Run) {
	now := time.Now()
	for _, r := range runs {
		d.feedsMu.Lock()
		f := d.feeds[r.Account]
		d.feedsMu.Unlock()
		if f == nil {
			continue
		}
		took, wake := f.handoff(r.After, r.Entries, now)
		if took {
			d.opts.Metrics.HandedOver.Add(float64(len(r.Entries)))
			d.notify(r.Account)
		}
		if wake {
			go d.wakeFollower(r.Account)
		}
	}
}

// wakeFollower has the follower of acct, blocked in its read, read again now.
func (d *Dispatcher) wakeFollower(acct string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := d.opts.Store.Wake(ctx, acct); err != nil {
		d.opts.Logger.Warn("cannot wake the log follower; it reads the log within its quiet time", "account", acct, "error", err)
	}
}
