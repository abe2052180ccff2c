// Package dispatch delivers each account's events to its destinations: one worker per
// destination this replica holds a lease for, its writes in flight up to the
// destination's window, each ordering key's in arrival order (windowed.go, package window).
// A replica reads each account's log once for all its destinations (feed.go), learns
// of state changes from a control stream read with it (wake.go), and commits outcomes
// behind the writes (committer.go). It acts on what failures decides and never writes
// to a bus itself: the Sinks do.
package dispatch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/store"
)

// A Sink writes one event to one destination and says what happened, in a form
// failures.Classify understands. It never retries on its own: dispatch does.
type Sink interface {
	Send(ctx context.Context, d destination.Destination, m destination.Message) error
}

// Nudger is told, without blocking, that a script just wrote an operator event
// (destination.disabled) to an account's outbox, so it is published now rather than at
// the next sweep (notify.Drainer).
type Nudger interface {
	Nudge()
}

// Options configure a Dispatcher.
type Options struct {
	Store    *store.Store
	Sinks    map[destination.Connector]Sink
	Delivery config.Delivery
	Owner    string           // this replica's name in leases; random when empty
	Accounts []config.Account // for each account's store id path; SetAccounts replaces them
	Outbox   Nudger           // nil: operator events wait for the outbox's periodic sweep
	Logger   *slog.Logger     // nil: discarded
	Metrics  *Metrics         // nil: not exported
	// Poll is how often the log watcher looks at the leases held, and how long a log
	// follower waits after a Redis error (default 1s). No destination polls.
	Poll time.Duration
	// MaxActive bounds how many workers run a pass (read, write, commit) at once
	// (default 256): the goroutines of the pool that runs them (pool.go). With thousands
	// of destinations waking together, the rest wait their turn in its queue instead of
	// each holding a decoded batch and a grown stack.
	MaxActive int
	Now       func() time.Time // nil: time.Now
	Tracer    Tracer           // nil: no traces (trace.go)
	// LogRetention is how long the account logs keep events every destination has
	// passed (delivery.replay_window): the oldest point a replay may start from, and
	// what trimLogs keeps. 0: no bound is checked, nothing is trimmed.
	LogRetention time.Duration
	// TrimEvery is how often an account's log is trimmed to LogRetention (trim.go);
	// zero: a minute.
	TrimEvery time.Duration
	// StateFormat is the state format in force (upgrade.Keeper.Writes): from 2 on, a
	// commit also records what ended past the cursor (store.Commit.Done). nil: 1.
	StateFormat func() int
}

// Dispatcher runs the workers of the destinations this replica holds leases for.
type Dispatcher struct {
	opts       Options
	storePaths atomic.Pointer[map[string][]string] // per account; read for each message
	pool       pool                                // runs the passes of the workers with work

	mu sync.Mutex
	// dests is by id, as configured: pointers into the dispatcher's own copy of each
	// list it was given (SetDestinations, Upsert), never written through (a change puts
	// a new pointer), so index shares them rather than holding copies.
	dests      map[string]*destination.Destination
	index      *index                          // dests by account, for the API (index.go); changed with dests
	loaded     bool                            // SetDestinations ran once: later calls are reloads
	workers    map[string]*worker              // by id, the leases held
	accounts   map[string]map[*worker]struct{} // the same workers by account, to wake on new events
	feedsMu    sync.Mutex                      // guards feeds (apart from mu: ingest's handoff takes it)
	feeds      map[string]*feed                // by account: its log as last read (feed.go)
	committers map[string]*committer           // by account (committer.go)
	ended      atomic.Bool                     // Run returned: commits give up on an unreachable Redis sooner
	// rebalance asks Run for a lease round now: a reload added or redefined destinations,
	// whose workers start at once rather than at the next tick.
	rebalance chan struct{}
	// rewatch tells the log watcher that a lease round took the first lease of an
	// account: its log is followed now, not at the watcher's next look.
	rewatch chan struct{}
	// runCtx is Run's context, which every worker lives in (nil before Run; under mu).
	runCtx context.Context
	// making counts, by id, the creates this replica's API has under way (Making).
	making map[string]int
	leases leases // this replica's holds and leases (lease.go, hold.go)
}

// New returns a Dispatcher; call SetDestinations, then Run.
func New(opts Options) *Dispatcher {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	if opts.Poll <= 0 {
		opts.Poll = time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Delivery.SetupCheck.Initial <= 0 {
		opts.Delivery.SetupCheck.Initial = time.Minute
	}
	opts.Delivery.SetupCheck.Max = max(opts.Delivery.SetupCheck.Max, opts.Delivery.SetupCheck.Initial)
	if opts.Delivery.UncommittedMax <= 0 {
		opts.Delivery.UncommittedMax = 32
	}
	if opts.MaxActive <= 0 {
		opts.MaxActive = 256
	}
	if opts.Owner == "" {
		opts.Owner = "relay-" + randomHex(6)
	}
	d := &Dispatcher{opts: opts, dests: map[string]*destination.Destination{}, index: newIndex(),
		workers: map[string]*worker{}, accounts: map[string]map[*worker]struct{}{},
		feeds: map[string]*feed{}, committers: map[string]*committer{}, leases: leases{holds: map[store.Hold]*hold{}}, rebalance: make(chan struct{}, 1), rewatch: make(chan struct{}, 1)}
	d.SetAccounts(opts.Accounts)
	return d
}

// SetAccounts replaces the accounts' settings delivery reads (each account's store id
// path); messages built from now on use them.
func (d *Dispatcher) SetAccounts(accounts []config.Account) {
	paths := make(map[string][]string, len(accounts))
	for _, a := range accounts {
		paths[a.ID] = a.StoreIDPaths()
	}
	d.storePaths.Store(&paths)
}

// SetDestinations makes the configured destinations exist in Redis (storing each its
// ExternalId on first sight: the config's, pinned or derived, else a random one) and
// replaces the set this dispatcher delivers for. A destination removed from config stops
// at the next lease round and keeps its state; one that was redefined gets
// resync.required on its channel and a fresh worker.
func (d *Dispatcher) SetDestinations(ctx context.Context, dests []destination.Destination) error {
	next := ownByID(dests)
	// Swap first, then touch Redis: a watcher that reacts to resync.required must find
	// the new definition already in place.
	d.mu.Lock()
	prev, reload := d.dests, d.loaded
	for id, w := range d.workers {
		if nd, ok := next[id]; !ok || nd.Fingerprint() != w.dest.Fingerprint() {
			w.stop() // removed or redefined: the lease round starts it again if it is still ours
		}
	}
	d.dests = next
	d.index.reset(next)
	d.mu.Unlock()

	if err := d.ensure(ctx, dests, reload, true); err != nil {
		return err // not loaded yet: a start that tries again announces nothing
	}
	d.mu.Lock()
	d.loaded = true
	d.mu.Unlock()
	for id, old := range prev {
		if _, kept := next[id]; !kept {
			d.resync(ctx, *old, "the destination was removed from config; its state is kept")
		}
	}
	return nil
}

// ownByID maps each of dests by its id (the last of an id wins) to a copy of its own: one
// list copied whole, not one allocation a destination.
func ownByID(dests []destination.Destination) map[string]*destination.Destination {
	own := slices.Clone(dests)
	m := make(map[string]*destination.Destination, len(own))
	for i := range own {
		m[own[i].ID] = &own[i]
	}
	return m
}

// ensure stores the state of dests that Redis does not hold yet, and tells the watchers
// of one that appeared on a running replica (reload) to load a new snapshot; then, with
// kick, asks for a lease round.
func (d *Dispatcher) ensure(ctx context.Context, dests []destination.Destination, reload, kick bool) error {
	retention := d.opts.Delivery.ChannelRetention
	// The ExternalId stored at first sight, and never changed after: the config's
	// (pinned or derived, so an empty Redis gives back the same one), else random.
	// A thousand destinations a round trip.
	for chunk := range slices.Chunk(dests, 1000) {
		es := make([]store.Ensured, len(chunk))
		for i, dest := range chunk {
			ext := dest.ConfiguredExternalID()
			if ext == "" {
				ext = destination.NewExternalID()
			}
			es[i] = store.Ensured{Ref: ref(dest), ExternalID: ext, Fingerprint: dest.Fingerprint(), Announce: reload}
		}
		results, err := d.opts.Store.EnsureMany(ctx, es, retention)
		if err != nil {
			return err
		}
		for i, res := range results {
			if res == "redefined" {
				d.opts.Logger.Info("destination redefined by config", "destination", chunk[i].ID)
			}
		}
	}
	if kick {
		d.kickBalance() // the new destinations' workers start now, not at the next tick
	}
	return nil
}

// kickBalance asks Run for a lease round now (kicks while one is due coalesce): a reload
// added destinations, or a redefined destination's old worker ended, so its new one
// starts at once rather than at the next tick.
func (d *Dispatcher) kickBalance() { signal(d.rebalance) }

// signal puts a token in ch (capacity 1) unless one waits there already: never blocks.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// resync tells the destination's and the account's watchers to load a new snapshot.
func (d *Dispatcher) resync(ctx context.Context, dest destination.Destination, reason string) {
	fields := map[string]any{"destination": dest.ID, "reason": reason}
	if _, err := d.opts.Store.Emit(ctx, ref(dest), "resync.required", fields, d.opts.Delivery.ChannelRetention); err != nil {
		d.opts.Logger.Warn("resync.required not recorded", "destination", dest.ID, "error", err)
	}
}

// Destinations returns the configured destinations, sorted by id. The list is shared
// (built once per change of the set, not per call): read it, never change it.
func (d *Dispatcher) Destinations() []destination.Destination { return d.index.every() }

// AccountDestinations returns acct's configured destinations, sorted by id, at the cost
// of that account's alone (shared, like Destinations': read-only).
func (d *Dispatcher) AccountDestinations(acct string) []destination.Destination {
	return d.index.account(acct)
}

// DestinationCounts returns how many destinations each account has configured.
func (d *Dispatcher) DestinationCounts() map[string]int { return d.index.counts() }

// Destination returns one configured destination.
func (d *Dispatcher) Destination(id string) (destination.Destination, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	dest, ok := d.dests[id]
	if !ok {
		return destination.Destination{}, false
	}
	return *dest, true
}

// Run holds leases and runs workers until ctx is cancelled; then each worker finishes
// its write in flight, its commits are recorded, and its lease is released.
func (d *Dispatcher) Run(ctx context.Context) error {
	d.mu.Lock()
	d.runCtx = ctx // the workers' lifetime, whoever starts them (take)
	d.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); d.watchLogs(ctx) }()
	if d.opts.LogRetention > 0 {
		wg.Add(1)
		go func() { defer wg.Done(); d.trimLogs(ctx) }()
	}
	ttl := d.opts.Delivery.LeaseTTL
	tick := time.NewTicker(ttl / 3)
	defer tick.Stop()
	for {
		d.balance(ctx)
		select {
		case <-ctx.Done():
			d.ended.Store(true)
			d.stopAll()
			wg.Wait()
			_ = d.opts.Store.Leave(context.WithoutCancel(ctx), d.opts.Owner)
			return nil
		case <-tick.C:
		case <-d.rebalance:
		}
	}
}

// stopping says Run's context ended.
func (d *Dispatcher) stopping() bool { return d.ended.Load() }

func ref(dest destination.Destination) store.Ref {
	return store.Ref{Account: dest.Account, ID: dest.ID, Connector: string(dest.Connector)}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read does not fail on Linux
	return hex.EncodeToString(b)
}

// stateFormat is the state format the deployment writes now (Options.StateFormat).
func (d *Dispatcher) stateFormat() int {
	if d.opts.StateFormat == nil {
		return 1
	}
	return d.opts.StateFormat()
}
