package dispatch

import (
	"context"
	"slices"
	"time"
)

// trimLogs trims each account's log to the replay window every Options.TrimEvery: an
// entry older than the window that every destination of the account has delivered
// goes (store.TrimLog); one some destination still has to deliver stays. The work is
// one script per account a round, shared by the replicas (the first to trim an account
// holds it for the round), and reads each destination's cursor only when the log has an
// entry older than the window.
func (d *Dispatcher) trimLogs(ctx context.Context) {
	every := d.opts.TrimEvery
	if every <= 0 {
		every = time.Minute
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for acct, ids := range d.destinationsByAccount() {
			n, err := d.opts.Store.TrimLog(ctx, acct, ids, d.opts.LogRetention, every)
			if err != nil {
				if ctx.Err() == nil {
					d.opts.Logger.Warn("log not trimmed; it keeps its events until the next round", "account", acct, "error", err)
				}
				continue
			}
			if n > 0 {
				d.opts.Logger.Debug("log trimmed to the replay window", "account", acct, "entries", n)
			}
		}
	}
}

// destinationsByAccount is the ids of the configured destinations, by account. An
// account with none is not in it: its log is read by no one and trimmed by age alone.
func (d *Dispatcher) destinationsByAccount() map[string][]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string][]string{}
	for id, dest := range d.dests {
		out[dest.Account] = append(out[dest.Account], id)
	}
	for _, ids := range out {
		slices.Sort(ids)
	}
	return out
}
