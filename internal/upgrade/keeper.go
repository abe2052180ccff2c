package upgrade

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mercamap/relay/internal/store"
)

// Options configure a Keeper.
type Options struct {
	Store   *store.Store
	Owner   string    // this replica's name, as its lease heartbeat names it
	Release Release   // this build's release
	Known   []Release // every release this build knows, oldest first (Releases)
	// TTL is how long a heartbeat counts as live (delivery.lease_ttl, as the lease
	// heartbeat's); the keeper beats every TTL/3.
	TTL        time.Duration
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// Stop is called when the format in force became one this release cannot read while
	// it ran (a switch raced its start): the replica must stop, with err's sentence.
	Stop func(err error)
	// Rewrites are this release's background rewrites of existing keys, each run once
	// its format is in force (none in 0.2.0).
	Rewrites []Rewrite
}

// Keeper is one replica's part in a roll: its heartbeat entry, the start's checks, the
// switch to a newer format once every live replica reads it, and the format to write.
type Keeper struct {
	o      Options
	format atomic.Int64
	m      metrics
	rw     *rewriter

	lastUnreadable atomic.Value // string: which values reportUnreadable last logged
}

type metrics struct {
	format, target, pending, unreadable prometheus.Gauge
	replicas                            *prometheus.GaugeVec
}

// New returns a Keeper; Start, then Run.
func New(o Options) *Keeper {
	k := &Keeper{o: o, m: metrics{
		format: prometheus.NewGauge(prometheus.GaugeOpts{Name: "relay_state_format",
			Help: "The state format in force: the one every replica writes (relay upgrade status)."}),
		target: prometheus.NewGauge(prometheus.GaugeOpts{Name: "relay_state_format_target",
			Help: "The newest state format this replica's release writes; above relay_state_format while a switch is pending."}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "relay_upgrade_pending",
			Help: "1 while a switch to a newer state format waits for live replicas that cannot read it."}),
		replicas: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "relay_upgrade_replicas",
			Help: "Live replicas by the release they run, as their heartbeats say."}, []string{"version"}),
		unreadable: prometheus.NewGauge(prometheus.GaugeOpts{Name: "relay_upgrade_unreadable",
			Help: "Values of the deployment's state in Redis this replica cannot read (relay upgrade status lists them); no state format switch is made while above 0."}),
	}}
	k.format.Store(1)
	k.rw = newRewriter(k)
	if o.Registerer != nil {
		o.Registerer.MustRegister(k.m.format, k.m.target, k.m.pending, k.m.unreadable, k.m.replicas)
	}
	k.m.target.Set(float64(o.Release.Target()))
	return k
}

// Writes is the state format this replica writes now: the one in force. A release that
// brings a new format writes the old one until the deployment switches.
func (k *Keeper) Writes() int { return int(k.format.Load()) }

// Start checks the deployment before this replica writes anything: a *RefusedError says
// why it may not run here (a format it cannot read, a release more than one away);
// any other error is Redis's (wait and try again). Then it records the format in force
// (1 where nothing was recorded yet) and this release, and announces itself.
func (k *Keeper) Start(ctx context.Context) error {
	s, err := ReadStatus(ctx, k.o.Store, k.o.TTL)
	if err != nil {
		return err
	}
	if err := s.Refuse(k.o.Release, k.o.Known); err != nil {
		return err
	}
	rdb := k.o.Store.Client()
	if err := rdb.HSetNX(ctx, deploymentKey, "format", strconv.Itoa(s.Format)).Err(); err != nil {
		return fmt.Errorf("deployment state: %w", err)
	}
	if s.Release == "" || newer(k.o.Release.Version, s.Release) {
		err := setIf(ctx, rdb, "release", s.Release, map[string]string{"release": k.o.Release.Version, "release_previous": k.o.Release.Previous})
		if err != nil && !errors.Is(err, errChanged) {
			return err
		}
	}
	if err := announce(ctx, rdb, k.o.Owner, k.o.Release, s.Format, k.o.TTL); err != nil {
		return fmt.Errorf("replica heartbeat: %w", err)
	}
	me := k.o.Release
	me.Writes = []int{s.Format}
	s.Replicas = append(s.Replicas, Replica{Owner: k.o.Owner, Release: me, Seen: time.Now(), Numbered: true}) // as announced
	k.observe(s)
	return nil
}

// Run beats until ctx ends, then removes this replica's heartbeat entry. The background
// rewrites run beside it.
func (k *Keeper) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); k.rw.run(ctx) }()
	defer wg.Wait()
	t := time.NewTicker(max(k.o.TTL/3, 100*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			lctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if err := leave(lctx, k.o.Store.Client(), k.o.Owner); err != nil {
				k.o.Logger.Warn("could not remove this replica's heartbeat entry; it lapses by itself", "error", err)
			}
			return
		case <-t.C:
			k.round(ctx)
		}
	}
}

// round is one heartbeat: announce, read the deployment, switch when due.
func (k *Keeper) round(ctx context.Context) {
	rdb := k.o.Store.Client()
	if err := announce(ctx, rdb, k.o.Owner, k.o.Release, k.Writes(), k.o.TTL); err != nil {
		k.o.Logger.Warn("replica heartbeat skipped: redis unreachable", "error", err)
		return
	}
	s, err := ReadStatus(ctx, k.o.Store, k.o.TTL)
	if err != nil {
		k.o.Logger.Warn("deployment state not read: redis unreachable", "error", err)
		return
	}
	k.reportUnreadable(s.Unreadable)
	if s.Format == 0 {
		// The format in force does not read: this replica goes on with the one it
		// writes (stopping every replica on a value anyone can write would be an
		// outage), and nothing is switched until it is set right.
		s.Format = k.Writes()
		k.observe(s)
		return
	}
	if !k.o.Release.CanRead(s.Format) {
		err := s.Refuse(k.o.Release, k.o.Known)
		k.o.Logger.Error("the deployment switched to a state format this release cannot read; stopping", "error", err)
		if k.o.Stop != nil {
			k.o.Stop(err)
		}
		return
	}
	// A value that does not read may hide a replica that cannot read the target: no
	// switch while any is left.
	if target := k.o.Release.Target(); s.Format < target && len(s.Waiting(target)) == 0 && len(s.Unreadable) == 0 {
		if err := switchTo(ctx, k.o.Store, s, target, k.o.Release.Version); err == nil {
			k.o.Logger.Info("switched the deployment's state format: every live replica reads it", "from", s.Format, "to", target)
			s.Format, s.FormatSince = target, k.o.Release.Version
		} else if !errors.Is(err, errChanged) {
			k.o.Logger.Warn("state format switch failed; tried again next heartbeat", "error", err)
		}
	}
	k.observe(s)
}

// reportUnreadable logs the values of the deployment's keys that do not read when which
// ones they are changed since the last round (once, not every heartbeat: a heartbeat
// entry's value changes with each beat), and counts them.
func (k *Keeper) reportUnreadable(errs []*UnreadableError) {
	k.m.unreadable.Set(float64(len(errs)))
	which := make([]string, len(errs))
	for i, e := range errs {
		which[i] = e.Key + "\x00" + e.Field + "\x00" + e.Why
	}
	key := strings.Join(which, "\x00")
	last, _ := k.lastUnreadable.Swap(key).(string)
	if key == last {
		return
	}
	text := unreadableText(errs)
	if text == "" {
		k.o.Logger.Info("every value of the deployment's state in Redis reads again")
		return
	}
	k.o.Logger.Error("the deployment's state in Redis holds values this release cannot read; no state format switch is made until they are set right (relay upgrade status lists them)",
		"unreadable", text, "writes", k.Writes())
}

func (k *Keeper) observe(s Status) {
	k.format.Store(int64(s.Format))
	k.m.format.Set(float64(s.Format))
	pending := 0.0
	if s.Format < k.o.Release.Target() {
		pending = 1
	}
	k.m.pending.Set(pending)
	k.m.replicas.Reset()
	for _, r := range s.Replicas {
		version := r.Release.Version
		if r.Unreadable != nil {
			version = "unreadable" // its heartbeat names none this replica could read
		}
		k.m.replicas.WithLabelValues(version).Inc()
	}
}

// switchTo moves the format in force from s.Format to target, unless it moved meanwhile.
func switchTo(ctx context.Context, st *store.Store, s Status, target int, by string) error {
	return setIf(ctx, st.Client(), "format", strconv.Itoa(s.Format), map[string]string{"format": strconv.Itoa(target),
		"format_since": by, "switched_at": strconv.FormatInt(time.Now().UnixMilli(), 10)})
}

// Finish switches the deployment to me's newest format now (relay upgrade finish),
// refused while a live replica cannot read it. It says what it did.
func Finish(ctx context.Context, st *store.Store, ttl time.Duration, me Release) (string, error) {
	s, err := ReadStatus(ctx, st, ttl)
	if err != nil {
		return "", err
	}
	if len(s.Unreadable) > 0 {
		return "", &RefusedError{Why: "not switched: Redis holds values of the deployment's state relay " + me.Version + " cannot read: " +
			unreadableText(s.Unreadable) + "; set them right and run relay upgrade finish again", Err: s.Unreadable[0]}
	}
	target := me.Target()
	if s.Format >= target {
		return fmt.Sprintf("nothing to finish: state format %d is in force, and relay %s writes no newer one", s.Format, me.Version), nil
	}
	if waiting := s.Waiting(target); len(waiting) > 0 {
		return "", &RefusedError{Why: "not switched: " + s.Pending(me) + "; stop them (or let the roll finish) and run relay upgrade finish again"}
	}
	if err := switchTo(ctx, st, s, target, me.Version); err != nil {
		return "", err
	}
	return fmt.Sprintf("switched: state format %d is in force (was %d); from now on a release that cannot read it refuses to start", target, s.Format), nil
}
