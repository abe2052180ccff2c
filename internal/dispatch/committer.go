package dispatch

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/store"
)

// Commits behind the writes. A delivered event's outcome and cursor do not stand
// between two writes of a destination: the worker hands them to its account's
// committer and writes the next event at once. The committer gathers what the
// account's workers on this replica hand it for up to delivery.commit_wait (a few
// milliseconds) and records it in one script (store.CommitBatch), in the order handed
// over; while that script runs, the next group gathers. A worker has at most
// delivery.uncommitted_max outcomes on their way; a crash re-sends those (at least
// once: the message id is stable, so a receiver dedups). Rejections, expiries and
// not-taken attempts are committed before the next write (commitNow): the count of
// rejections in a row decides whether there is a next write at all.

// batchMax is the most commits one script records.
const batchMax = 256

// committer groups the commits of one account's workers on this replica. Its
// goroutine runs only while commits wait: an idle account costs nothing.
type committer struct {
	d *Dispatcher

	mu    sync.Mutex
	queue []*handed
	busy  bool        // a group is gathering (timer set) or being recorded
	timer *time.Timer // set while a group gathers
}

// handed is one commit handed to a committer.
type handed struct {
	c    store.Commit
	w    *worker
	done chan answer // nil: behind the write, nobody waits for it
}

type answer struct {
	res store.Committed
	err error
}

// committerOf returns the account's committer, making it on first use.
func (d *Dispatcher) committerOf(acct string) *committer {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := d.committers[acct]
	if k == nil {
		k = &committer{d: d}
		d.committers[acct] = k
	}
	return k
}

// commit hands c over. With wait it returns c's own answer once it is recorded, after
// every commit handed over before it; without, it returns at once.
func (k *committer) commit(ctx context.Context, w *worker, c store.Commit, wait bool) (store.Committed, error) {
	h := &handed{c: c, w: w}
	if wait {
		h.done = make(chan answer, 1)
	}
	w.commits.add()
	urgent := wait || k.d.opts.Delivery.CommitWait <= 0
	k.mu.Lock()
	k.queue = append(k.queue, h)
	urgent = urgent || len(k.queue) >= batchMax
	switch {
	case !k.busy && urgent:
		k.busy = true
		go k.run()
	case !k.busy:
		k.busy = true
		k.timer = time.AfterFunc(k.d.opts.Delivery.CommitWait, k.fire)
	case urgent && k.timer != nil && k.timer.Stop():
		k.timer = nil // gathering no longer: record now
		go k.run()
	}
	k.mu.Unlock()
	if !wait {
		return store.Committed{}, nil
	}
	a := <-h.done
	return a.res, a.err
}

// hurry records what gathers now, without waiting out commit_wait.
func (k *committer) hurry() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.timer != nil && k.timer.Stop() {
		k.timer = nil
		go k.run()
	}
}

// settle waits until none of w's commits is on its way (its account's committer
// hurried): before the worker reads its stored state, whose cursor would otherwise be
// behind its writes, and before it ends.
func (w *worker) settle() {
	w.d.committerOf(w.dest.Account).hurry()
	w.commits.room(1)
}

func (k *committer) fire() {
	k.mu.Lock()
	k.timer = nil
	k.mu.Unlock()
	k.run()
}

// run records the queue, a group at a time, until it is empty.
func (k *committer) run() {
	for {
		k.mu.Lock()
		n := min(len(k.queue), batchMax)
		if n == 0 {
			k.busy = false
			k.mu.Unlock()
			return
		}
		group := k.queue[:n:n]
		k.queue = k.queue[n:]
		if len(k.queue) == 0 {
			k.queue = nil // let go of the array
		}
		k.mu.Unlock()
		k.record(group)
	}
}

// record commits group in one script, retrying while Redis is unreachable: a write
// that landed must not be forgotten (a crash here re-sends it). After the dispatcher's
// end it gives up once the wait grew past 2 s.
func (k *committer) record(group []*handed) {
	cs := make([]store.Commit, len(group))
	for i, h := range group {
		cs[i] = h.c
	}
	var res []store.Committed
	var errs []error
	wait := 50 * time.Millisecond
	for {
		var err error
		res, errs, err = k.d.opts.Store.CommitBatch(context.Background(), cs)
		if err == nil {
			break
		}
		k.d.opts.Logger.Warn("commit failed; retrying", "account", cs[0].Account, "commits", len(cs), "error", err)
		if k.d.stopping() && wait > 2*time.Second {
			res, errs = make([]store.Committed, len(cs)), make([]error, len(cs))
			for i := range errs {
				errs[i] = errStop
			}
			break
		}
		time.Sleep(wait)
		wait = min(2*wait, 5*time.Second)
	}
	for i, h := range group {
		a := answer{res: res[i], err: errs[i]}
		if a.err == nil && a.res.Disabled {
			k.d.announceDisabled(context.Background(), h.w.dest)
		}
		if a.err == nil && a.res.Warned && k.d.opts.Outbox != nil {
			k.d.opts.Outbox.Nudge() // destination.failing is in the outbox
		}
		if h.done != nil {
			h.done <- a
		} else if errors.Is(a.err, store.ErrStaleLease) || errors.Is(a.err, destination.ErrNotFound) {
			k.d.opts.Logger.Warn("lease superseded; another replica delivers now", "destination", h.w.dest.ID)
			h.w.stop()
		}
		h.w.commits.done()
	}
}

// uncommitted counts a worker's commits on their way to Redis.
type uncommitted struct {
	mu   sync.Mutex
	n    int
	cond *sync.Cond
}

func (u *uncommitted) add() {
	u.mu.Lock()
	u.n++
	u.mu.Unlock()
}

func (u *uncommitted) done() {
	u.mu.Lock()
	u.n--
	if u.cond != nil {
		u.cond.Broadcast()
	}
	u.mu.Unlock()
}

// room waits until fewer than most commits are on their way.
func (u *uncommitted) room(most int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for u.n >= most {
		if u.cond == nil {
			u.cond = sync.NewCond(&u.mu)
		}
		u.cond.Wait()
	}
}
