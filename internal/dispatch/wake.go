package dispatch

import (
	"context"
	"strings"
	"sync"
	"time"
)

// maxFollowers bounds the blocking reads the log watcher holds open, each on its own
// Redis connection: on Redis Cluster one per hash slot with followed accounts. Accounts
// past it are not followed; their workers find new events by polling (Options.Poll).
const maxFollowers = 32

// watchLogs follows the logs of every account with destinations and wakes that
// account's workers when events arrive, so an idle worker does not have to poll fast.
// A blocking read covers one group of accounts (store.LogGroups: all of them on one
// server, one hash slot's on Redis Cluster), so each group has its own follower. Every
// Poll (at most a second) it looks at the destinations configured then: an account
// added by a reload is followed from then on, one removed is no longer read.
func (d *Dispatcher) watchLogs(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	running := map[string]context.CancelFunc{} // group (its accounts, joined) → its follower
	defer func() {
		for _, stop := range running {
			stop()
		}
	}()
	for ctx.Err() == nil {
		groups := d.opts.Store.LogGroups(d.configuredAccounts())
		wanted := map[string]bool{}
		for _, g := range groups[:min(len(groups), maxFollowers)] {
			key := strings.Join(g, ",")
			wanted[key] = true
			if _, ok := running[key]; ok {
				continue
			}
			fctx, stop := context.WithCancel(ctx)
			running[key] = stop
			wg.Go(func() { d.follow(fctx, g) })
		}
		for key, stop := range running {
			if !wanted[key] {
				stop()
				delete(running, key)
			}
		}
		sleep(ctx, min(d.opts.Poll, time.Second))
	}
}

// configuredAccounts returns the accounts with destinations, each once: without a copy of
// every destination each time (watchLogs asks every second).
func (d *Dispatcher) configuredAccounts() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	seen := map[string]bool{}
	var out []string
	for _, dest := range d.dests {
		if !seen[dest.Account] {
			seen[dest.Account] = true
			out = append(out, dest.Account)
		}
	}
	return out
}

// follow wakes the workers of accts (one group of store.LogGroups) whenever their logs
// grow, until ctx ends.
func (d *Dispatcher) follow(ctx context.Context, accts []string) {
	after := map[string]string{}
	for ctx.Err() == nil {
		for _, acct := range accts {
			if _, ok := after[acct]; ok {
				continue
			}
			id, err := d.opts.Store.LastLogID(ctx, acct)
			if err != nil {
				break
			}
			after[acct] = id
		}
		if len(after) < len(accts) {
			sleep(ctx, d.opts.Poll) // workers still poll on their own meanwhile
			continue
		}
		news, err := d.opts.Store.WaitLogs(ctx, after, time.Second)
		if err != nil {
			sleep(ctx, d.opts.Poll)
			continue
		}
		for acct, id := range news {
			after[acct] = id
			d.notify(acct)
		}
	}
}

// notify wakes the workers of acct: its log grew, or one of its destinations changed.
func (d *Dispatcher) notify(acct string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for w := range d.accounts[acct] {
		w.wake()
	}
}

// addWorker lists w as the worker of its destination; d.mu is held.
func (d *Dispatcher) addWorker(w *worker) {
	d.workers[w.dest.ID] = w
	acct := d.accounts[w.dest.Account]
	if acct == nil {
		acct = map[*worker]struct{}{}
		d.accounts[w.dest.Account] = acct
	}
	acct[w] = struct{}{}
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
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
