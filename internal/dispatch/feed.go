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
// shared by the account's workers: one read of the log for all of them. The entries
// follow the log id from with nothing left out, so a worker whose cursor lies in that
// stretch finds exactly what the log holds after it.
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
	d.mu.Lock()
	defer d.mu.Unlock()
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
// newest feedMax.
func (f *feed) add(by *follower, es []store.LogEntry) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.owner != by {
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
	i, _ := slices.BinarySearchFunc(f.entries, cursor, func(e store.LogEntry, id string) int {
		return store.CompareIDs(e.ID, id)
	})
	if i < len(f.entries) && f.entries[i].ID == cursor {
		i++
	}
	return f.entries[i:min(i+n, len(f.entries)):min(i+n, len(f.entries))], true
}
