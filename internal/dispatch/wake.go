package dispatch

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mercamap/relay/internal/store"
)

// maxFollowers bounds the blocking reads the log followers hold open, each on its own
// Redis connection: on Redis Cluster one per hash slot with followed accounts. The
// groups past it are read without blocking, once every Poll each.
const maxFollowers = 32

// followCount is the most entries of one stream a follower's read takes.
const followCount = 256

// watchLogs follows the logs and control streams of every account this replica holds
// leases in: one blocking read per group of accounts (store.LogGroups: all of them on
// one server, one hash slot's on Redis Cluster). The entries it reads go into each
// account's feed for all its destinations, and wake them; the control entries reach the
// worker they name. Every Poll (at most a second), and at once when a lease round took
// an account's first lease, it looks at the leases held then: an account whose first
// lease was just taken is followed from then on, one with none left is no longer read.
// A group's follower keeps running while its accounts change: it is handed the new list
// and woken (store.Wake), and starts only the accounts new to it, so an account that
// joins costs the others nothing (their workers keep what they know). This is the
// replica's only loop: nothing runs per destination.
func (d *Dispatcher) watchLogs(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	var running []*groupFollower
	defer func() {
		for _, f := range running {
			f.stop()
		}
	}()
	for ctx.Err() == nil {
		groups := d.opts.Store.LogGroups(d.leasedAccounts())
		// A group is the follower already reading one of its accounts (an account
		// never changes slot), else a new one.
		of := map[string]*groupFollower{}
		for _, f := range running {
			for _, acct := range f.accounts() {
				of[acct] = f
			}
		}
		var next []*groupFollower
		kept := map[*groupFollower]bool{}
		for i, g := range groups {
			var f *groupFollower
			for _, acct := range g {
				if f = of[acct]; f != nil {
					break
				}
			}
			if f != nil && !kept[f] {
				kept[f] = true
				if was := f.accounts(); !slices.Equal(was, g) {
					f.set(g)
					// Wake its blocking read through an account it reads now.
					if err := d.opts.Store.Wake(ctx, was[0]); err != nil && ctx.Err() == nil {
						d.opts.Logger.Warn("cannot wake the log follower; it sees the change within a second", "error", err)
					}
				}
				next = append(next, f)
				continue
			}
			block := time.Second
			if i >= maxFollowers {
				block = -1 // no BLOCK: read, then wait Poll
			}
			fctx, stop := context.WithCancel(ctx)
			f = &groupFollower{stop: stop}
			f.set(g)
			next = append(next, f)
			wg.Go(func() { d.follow(fctx, f, block) })
		}
		for _, f := range running {
			if !kept[f] {
				f.stop()
			}
		}
		running = next
		t := time.NewTimer(min(d.opts.Poll, time.Second))
		select {
		case <-ctx.Done():
		case <-t.C:
		case <-d.rewatch: // a first lease in an account: follow it now
		}
		t.Stop()
	}
}

// groupFollower is one group's follower (follow): the accounts it reads, which the
// watcher changes while it runs.
type groupFollower struct {
	accts atomic.Pointer[groupAccounts]
	stop  context.CancelFunc
}

// groupAccounts is a group's accounts, as listed and as a set.
type groupAccounts struct {
	list []string
	has  map[string]bool
}

func (f *groupFollower) accounts() []string { return f.accts.Load().list }

func (f *groupFollower) set(accts []string) {
	g := &groupAccounts{list: accts, has: make(map[string]bool, len(accts))}
	for _, a := range accts {
		g.has[a] = true
	}
	f.accts.Store(g)
}

// leasedAccounts returns the accounts this replica holds leases in, each once.
func (d *Dispatcher) leasedAccounts() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]string, 0, len(d.accounts))
	for acct := range d.accounts {
		out = append(out, acct)
	}
	return out
}

// follow reads the logs and control streams of gf's accounts (one group of
// store.LogGroups) until ctx ends, each read blocking up to block (below zero: not
// blocking, and Poll between reads). Before each read it takes up the accounts gf
// lists now: one no longer listed is dropped, one new to it starts (startFollowing).
// Where it starts, or starts again after an error, it may have missed entries of both:
// the feeds start over at the logs' ends and every worker of the group reads its state
// again.
func (d *Dispatcher) follow(ctx context.Context, gf *groupFollower, block time.Duration) {
	at := map[string]store.FollowPoint{}
	me := &follower{}
	defer func() {
		for acct := range at {
			d.feedOf(acct).stop(me)
		}
	}()
	var seen *groupAccounts
	for ctx.Err() == nil {
		g := gf.accts.Load()
		accts := g.list
		if g != seen { // the watcher changed the list
			seen = g
			for acct := range at {
				if !g.has[acct] {
					d.feedOf(acct).stop(me)
					delete(at, acct)
				}
			}
		}
		if len(at) < len(accts) && !d.startFollowing(ctx, me, accts, at) {
			sleep(ctx, d.opts.Poll)
			continue
		}
		wait, now := block, time.Now()
		for acct, p := range at {
			if at[acct] = d.feedOf(acct).plan(me, p, now); at[acct].SkipLog && wait > ownQuiet {
				wait = ownQuiet // a log left out is read again within ownQuiet
			}
		}
		got, err := d.opts.Store.FollowLogs(ctx, at, wait, followCount)
		if err != nil {
			if ctx.Err() == nil {
				d.opts.Logger.Warn("cannot follow the account logs; starting over", "accounts", len(accts), "error", err)
			}
			for acct := range at {
				d.feedOf(acct).stop(me)
			}
			clear(at)
			sleep(ctx, d.opts.Poll)
			continue
		}
		for _, c := range got.Controls {
			d.controlled(c)
		}
		for acct, es := range got.Entries {
			if d.feedOf(acct).add(me, es) { // else handed over already, workers woken then
				d.notify(acct)
			}
		}
		if block < 0 && len(got.Entries) == 0 && len(got.Controls) == 0 {
			sleep(ctx, d.opts.Poll)
		}
	}
}

// startFollowing finds where each account of accts not yet in at starts (the ends of
// its log and control stream) and makes its workers read their state again.
func (d *Dispatcher) startFollowing(ctx context.Context, me *follower, accts []string, at map[string]store.FollowPoint) bool {
	for _, acct := range accts {
		if _, ok := at[acct]; ok {
			continue
		}
		p, err := d.opts.Store.FollowStart(ctx, acct)
		if err != nil {
			return false
		}
		at[acct] = p
		d.feedOf(acct).start(me, p.Log)
		d.staleAll(acct)
	}
	return true
}

// controlled passes a control entry to the worker it names, if this replica holds its
// lease: the state in hand is stale, and a status change that asked for an answer
// stops its writes first, then is answered.
func (d *Dispatcher) controlled(c store.Control) {
	d.mu.Lock()
	w := d.workers[c.Destination]
	d.mu.Unlock()
	if w == nil || w.dest.Account != c.Account {
		return // another replica's, or nobody's: the next holder reads the state first
	}
	if c.Ack == "" && w.knows(c.Version) {
		return // the state in hand holds it already
	}
	if c.Ack != "" {
		inFlight := w.halt()
		if err := d.opts.Store.Ack(context.Background(), c.Account, c.Ack, w.token, inFlight); err != nil {
			d.opts.Logger.Warn("status change not answered", "destination", c.Destination, "error", err)
		}
	}
	w.changed()
}

// staleAll makes every worker of acct read its state before its next write, and wakes it.
func (d *Dispatcher) staleAll(acct string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for w := range d.accounts[acct] {
		w.changed()
	}
}

// notify wakes the workers of acct: its log grew.
func (d *Dispatcher) notify(acct string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for w := range d.accounts[acct] {
		w.wake()
	}
}

// touch tells this replica's worker of dest, if any, that its state changed (an API
// call on this replica): it need not wait for the control entry.
func (d *Dispatcher) touch(id string) {
	d.mu.Lock()
	w := d.workers[id]
	d.mu.Unlock()
	if w != nil {
		w.changed()
	}
}

// addWorker lists w as the worker of its destination; d.mu is held. The first worker
// of an account has the log watcher follow its log at once.
func (d *Dispatcher) addWorker(w *worker) {
	d.workers[w.dest.ID] = w
	acct := d.accounts[w.dest.Account]
	if acct == nil {
		acct = map[*worker]struct{}{}
		d.accounts[w.dest.Account] = acct
		signal(d.rewatch)
	}
	acct[w] = struct{}{}
	w.holding.workers[w] = struct{}{}
}

// removeWorker unlists w; d.mu is held.
func (d *Dispatcher) removeWorker(w *worker) {
	if d.workers[w.dest.ID] == w {
		delete(d.workers, w.dest.ID)
	}
	delete(d.accounts[w.dest.Account], w)
	if len(d.accounts[w.dest.Account]) == 0 {
		delete(d.accounts, w.dest.Account)
	}
	delete(w.holding.workers, w)
	if len(w.holding.workers) == 0 && d.leases.holds[w.holding.key] == w.holding {
		delete(d.leases.holds, w.holding.key)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
