package dispatch

import (
	"context"
	"time"
)

// watchLogs follows the logs of every account with destinations and wakes that
// account's workers when events arrive, so an idle worker does not have to poll fast.
// Each round follows the accounts of the destinations configured then: one added by a
// reload is followed from its next round, one removed is no longer read.
func (d *Dispatcher) watchLogs(ctx context.Context) {
	after := map[string]string{}
	for ctx.Err() == nil {
		wanted := map[string]bool{}
		for _, dest := range d.Destinations() {
			wanted[dest.Account] = true
			if _, ok := after[dest.Account]; !ok {
				id, err := d.opts.Store.LastLogID(ctx, dest.Account)
				if err != nil {
					break
				}
				after[dest.Account] = id
			}
		}
		for acct := range after {
			if !wanted[acct] {
				delete(after, acct)
			}
		}
		if len(after) == 0 {
			sleep(ctx, d.opts.Poll)
			continue
		}
		news, err := d.opts.Store.WaitLogs(ctx, after, time.Second)
		if err != nil {
			sleep(ctx, d.opts.Poll) // workers still poll on their own meanwhile
			continue
		}
		for acct, id := range news {
			after[acct] = id
			d.notify(acct)
		}
	}
}

// wakeChan returns the channel that is closed when acct's log grows.
func (d *Dispatcher) wakeChan(acct string) <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	ch, ok := d.wake[acct]
	if !ok {
		ch = make(chan struct{})
		d.wake[acct] = ch
	}
	return ch
}

func (d *Dispatcher) notify(acct string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if ch, ok := d.wake[acct]; ok {
		close(ch)
		delete(d.wake, acct)
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
