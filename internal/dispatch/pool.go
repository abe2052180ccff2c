package dispatch

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/store"
)

// A destination has no goroutine of its own. A worker waiting for work is parked: a few
// fields and, at most, a timer (a backoff, a setup check). It is queued when it has
// something to do (its account's log grew, a control entry, a lease renewal after a
// lapse, its timer ran out, or it was stopped),
// and a pool of at most Options.MaxActive goroutines runs the passes of queued workers,
// one pass of one worker at a time, in the order they were queued. A pool goroutine ends
// when the queue is empty, so an idle relay holds no goroutine (and no grown stack) per
// destination, only per account log it follows.

// The states of a worker (life.state).
const (
	parked  = iota // waiting for new events or a control change; no timer
	backoff        // waiting for its timer (a backoff, a setup check): only it (or a stop) queues it
	queued         // waiting for a pool goroutine
	running        // a pool goroutine runs its pass
	ended          // finished: its write in flight committed, it runs no more
)

// life is where a worker stands between passes; guarded by its mu. A parked worker holds
// no context of its own: each turn makes one, child of the dispatcher's, that a stop
// cancels.
type life struct {
	parent context.Context // the dispatcher's Run: its end stops every worker

	mu       sync.Mutex
	state    int
	stopped  bool
	cancel   context.CancelFunc // the running turn's context, nil between turns
	woken    bool               // woken while running: it runs again at once rather than parking
	timer    *time.Timer        // queues it at the end of its backoff
	gen      int                // counts the timers set, so a timer replaced while firing does nothing
	finished chan struct{}
}

// startWorker makes the worker of a lease just taken and queues its first pass.
func (d *Dispatcher) startWorker(ctx context.Context, dest destination.Destination, token int64, h *hold) *worker {
	w := &worker{d: d, dest: dest, token: token, holding: h, stale: true,
		log: d.opts.Logger.With("destination", dest.ID)}
	w.life = life{parent: ctx, state: parked, finished: make(chan struct{})}
	w.ready()
	return w
}

// stop ends the worker: it finishes its write in flight, commits it and runs no more.
func (w *worker) stop() {
	l := &w.life
	l.mu.Lock()
	l.stopped = true
	if l.cancel != nil {
		l.cancel()
	}
	l.mu.Unlock()
	w.ready() // its next turn sees the stop and ends it
}

func (w *worker) done() bool {
	select {
	case <-w.life.finished:
		return true
	default:
		return false
	}
}

// wake tells a worker its account's log grew: a parked one is queued; one in backoff
// keeps waiting (new events do not shorten a backoff or a setup check's wait).
func (w *worker) wake() {
	l := &w.life
	l.mu.Lock()
	defer l.mu.Unlock()
	switch l.state {
	case parked:
		w.queueLocked()
	case running:
		l.woken = true // the pass may have read the log before the news: it runs again
	}
}

// changed tells a worker its stored state changed (a control entry, an API call on this
// replica): it reads the state before any write, and is queued even from a backoff, so
// a pending destination that a test, an activation or another replica's setup check made
// active delivers at once rather than at its next scheduled check.
func (w *worker) changed() {
	w.markStale()
	l := &w.life
	l.mu.Lock()
	defer l.mu.Unlock()
	switch l.state {
	case parked, backoff:
		w.queueLocked()
	case running:
		l.woken = true
	}
}

// ready queues a worker that is parked or in backoff.
func (w *worker) ready() {
	l := &w.life
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state == parked || l.state == backoff {
		w.queueLocked()
	}
}

func (w *worker) queueLocked() {
	l := &w.life
	l.state = queued
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	w.d.enqueue(w)
}

// waitLocked sets the worker in state (parked or backoff) until its timer queues it
// after wait (or something else does first); with no wait, no timer is set.
func (w *worker) waitLocked(state int, wait time.Duration) {
	l := &w.life
	l.state = state
	l.gen++
	gen := l.gen
	if wait <= 0 {
		return
	}
	l.timer = time.AfterFunc(wait, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.gen == gen && (l.state == parked || l.state == backoff) {
			l.timer = nil
			w.queueLocked()
		}
	})
}

// pool is the dispatcher's run queue and the goroutines serving it.
type pool struct {
	mu      sync.Mutex
	queue   []*worker
	serving int // pool goroutines running; at most Options.MaxActive
}

// enqueue adds w to the run queue, starting a pool goroutine if fewer than MaxActive run.
func (d *Dispatcher) enqueue(w *worker) {
	p := &d.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	p.queue = append(p.queue, w)
	if p.serving < d.opts.MaxActive {
		p.serving++
		go d.serve()
	}
}

// contended says workers wait for a pool goroutine while every one is busy.
func (d *Dispatcher) contended() bool {
	p := &d.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue) > 0 && p.serving >= d.opts.MaxActive
}

// serve runs the queued workers' turns until the queue is empty.
func (d *Dispatcher) serve() {
	p := &d.pool
	for {
		p.mu.Lock()
		if len(p.queue) == 0 {
			p.serving--
			p.queue = nil // let go of the array, which may have grown large
			p.mu.Unlock()
			return
		}
		w := p.queue[0]
		p.queue[0] = nil
		p.queue = p.queue[1:]
		p.mu.Unlock()
		w.turn()
	}
}

// turn runs one pass of the worker, then parks it, sets it in backoff, queues it again
// (more to do) or ends it (stopped, or its lease is another's).
func (w *worker) turn() {
	l := &w.life
	l.mu.Lock()
	if l.stopped || l.parent.Err() != nil {
		l.mu.Unlock()
		w.end()
		return
	}
	ctx, cancel := context.WithCancel(l.parent)
	l.cancel, l.state, l.woken = cancel, running, false // a wake-up from here on runs it again
	l.mu.Unlock()

	log := w.log
	idle, err := w.pass(ctx, log)
	stopped := ctx.Err() != nil
	l.mu.Lock()
	l.cancel = nil
	l.mu.Unlock()
	cancel()
	if errors.Is(err, store.ErrStaleLease) {
		log.Warn("lease superseded; another replica delivers now")
		w.end()
		return
	}
	if stopped {
		w.end()
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var wait idleFor
	switch {
	case errors.As(err, &wait):
		// A destination in backoff must not keep others from their turn. A pause,
		// disable or activation meanwhile (from any replica) marks its state stale,
		// which the next pass reads before the retry.
		w.waitLocked(backoff, wait.pause)
	case idle && !l.woken:
		w.waitLocked(parked, 0)
	default:
		w.queueLocked()
	}
}

// end finishes the worker: its write in flight and the commits on their way are
// recorded, and it runs no more.
func (w *worker) end() {
	w.settle()
	l := &w.life
	l.mu.Lock()
	defer l.mu.Unlock()
	l.state = ended
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	close(l.finished)
	w.d.leases.workerEnded(w) // unlisted at the next lease round
	if l.stopped {
		w.d.kickBalance() // a redefined destination's new worker may start now
	}
}
