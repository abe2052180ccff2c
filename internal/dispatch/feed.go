package dispatch

import (
	"slices"
	"sync"

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
}

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
func (f *feed) handoff(after string, es []store.LogEntry) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.owner == nil || after == "" || after != f.last() {
		return false
	}
	f.put(es)
	return true
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
// then skips). A run that does not follow the feed's last entry is left to that read.
// The log stays the truth: nothing here is kept that the log does not hold.
func (d *Dispatcher) Appended(runs []store.Run) {
	for _, r := range runs {
		d.feedsMu.Lock()
		f := d.feeds[r.Account]
		d.feedsMu.Unlock()
		if f != nil && f.handoff(r.After, r.Entries) {
			d.opts.Metrics.HandedOver.Add(float64(len(r.Entries)))
			d.notify(r.Account)
		}
	}
}
