package upgrade

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/store/storetest"
	"github.com/mercamap/relay/internal/testpeer"
)

// A history of releases for the tests: 0.3.0 brings format 2 (reads 1 and 2), 0.4.0
// drops format 1.
var (
	r010 = Release{Version: Unnumbered, Reads: []int{1}, Writes: []int{1}}
	r020 = Release{Version: "0.2.0", Previous: Unnumbered, Reads: []int{1}, Writes: []int{1}}
	r030 = Release{Version: "0.3.0", Previous: "0.2.0", Reads: []int{1, 2}, Writes: []int{1, 2}}
	r040 = Release{Version: "0.4.0", Previous: "0.3.0", Reads: []int{2}, Writes: []int{2}}
)

// knownTo is what a build of release r knows: every release up to it.
func knownTo(r Release) []Release {
	all := []Release{r010, r020, r030, r040}
	for i, k := range all {
		if k.Version == r.Version {
			return all[:i+1]
		}
	}
	return all
}

const ttl = 300 * time.Millisecond

// onEachRedis runs test on a private Redis server and on the shared Redis Cluster.
func onEachRedis(t *testing.T, test func(t *testing.T, st *store.Store)) {
	t.Run("single", func(t *testing.T) { test(t, open(t, testpeer.RedisURL(t))) })
	t.Run("cluster", func(t *testing.T) { test(t, open(t, testpeer.SharedRedisCluster(t).URL())) })
}

func open(t *testing.T, url string) *store.Store {
	t.Helper()
	st, err := store.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// replica is one running replica of a release: its lease heartbeat (as dispatch beats
// it) and its keeper, until stopped.
type replica struct {
	k       *Keeper
	stopped chan error // what Stop was called with
	cancel  context.CancelFunc
	done    sync.WaitGroup
}

// start starts a replica of r named owner; its Start error, if any, is returned.
func start(t *testing.T, st *store.Store, owner string, r Release) (*replica, error) {
	t.Helper()
	rep := &replica{stopped: make(chan error, 1)}
	rep.k = New(Options{Store: st, Owner: owner, Release: r, Known: knownTo(r), TTL: ttl,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Stop:   func(err error) { rep.stopped <- err }})
	ctx, cancel := context.WithCancel(context.Background())
	if err := rep.k.Start(ctx); err != nil {
		cancel()
		return nil, err
	}
	rep.cancel = cancel
	rep.done.Add(2)
	go func() { defer rep.done.Done(); rep.k.Run(ctx) }()
	go func() { defer rep.done.Done(); leaseHeartbeat(ctx, st, owner) }()
	t.Cleanup(rep.stop)
	return rep, nil
}

func (r *replica) stop() {
	if r.cancel != nil {
		r.cancel()
		r.done.Wait()
	}
}

// leaseHeartbeat beats owner's lease heartbeat as dispatch does (every ttl/3) until ctx
// ends, then leaves.
func leaseHeartbeat(ctx context.Context, st *store.Store, owner string) {
	for ctx.Err() == nil {
		_, _ = st.Heartbeat(ctx, owner, ttl)
		select {
		case <-ctx.Done():
		case <-time.After(ttl / 3):
		}
	}
	_ = st.Leave(context.Background(), owner)
}

// unnumbered beats a heartbeat with no version, as b01080b's replicas do, until stop
// (or the test's end).
func unnumbered(t *testing.T, st *store.Store, owner string) (stop func()) {
	if _, err := st.Heartbeat(context.Background(), owner, ttl); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); leaseHeartbeat(ctx, st, owner) }()
	stop = func() { cancel(); wg.Wait() }
	t.Cleanup(stop)
	return stop
}

// The keys tests elsewhere read through storetest are the ones this package writes.
func TestStoretestKeysAreUpgradesOwn(t *testing.T) {
	if storetest.AboutKey != aboutKey || storetest.DeploymentKey != deploymentKey {
		t.Errorf("storetest names %q and %q where upgrade writes %q and %q", storetest.AboutKey, storetest.DeploymentKey, aboutKey, deploymentKey)
	}
}

func status(t *testing.T, st *store.Store) Status {
	t.Helper()
	s, err := ReadStatus(context.Background(), st, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10 s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func refusal(t *testing.T, err error, words ...string) {
	t.Helper()
	var refused *RefusedError
	if !errors.As(err, &refused) {
		t.Fatalf("start: %v, want a refusal", err)
	}
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("refusal %q does not say %q", err, w)
		}
	}
}

func TestANewFormatIsWrittenOnlyOnceTheLastReplicaThatCannotReadItHasLeft(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *store.Store) {
		old, err := start(t, st, "old-a", r020)
		if err != nil {
			t.Fatal(err)
		}
		nu, err := start(t, st, "new-a", r030)
		if err != nil {
			t.Fatal(err)
		}
		// Several heartbeats later the new release still writes the old format.
		for range 3 {
			nu.k.round(context.Background())
		}
		if got := nu.k.Writes(); got != 1 {
			t.Fatalf("relay 0.3.0 beside a 0.2.0 replica writes format %d, want 1", got)
		}
		s := status(t, st)
		if s.Format != 1 || len(s.Replicas) != 2 {
			t.Fatalf("status: format %d, %d replicas, want 1 and 2: %+v", s.Format, len(s.Replicas), s)
		}
		if p := s.Pending(r030); !strings.Contains(p, "old-a") || !strings.Contains(p, "waits") {
			t.Fatalf("pending %q does not name the replica the switch waits for", p)
		}
		if _, err := Finish(context.Background(), st, ttl, r030); err == nil || !strings.Contains(err.Error(), "old-a") {
			t.Fatalf("finish beside a 0.2.0 replica: %v, want refused naming it", err)
		}

		old.stop()
		waitFor(t, "the switch to format 2 once the 0.2.0 replica left", func() bool { return nu.k.Writes() == 2 })
		s = status(t, st)
		if s.Format != 2 || s.FormatSince != "0.3.0" || s.SwitchedAt.IsZero() || s.Pending(r030) != "" {
			t.Fatalf("after the switch: %+v", s)
		}
		// A rollback past the switch is refused in words naming both releases.
		_, err = start(t, st, "old-b", r020)
		refusal(t, err, "relay 0.2.0 cannot start", "state format 2", "0.3.0")
	})
}

func TestFinishSwitchesOnceNoLiveReplicaNeedsTheOldFormat(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *store.Store) {
		stopOld := unnumbered(t, st, "b01080b-replica")
		// As if the first numbered release had brought format 2.
		r020f2 := Release{Version: "0.2.0", Previous: Unnumbered, Reads: []int{1, 2}, Writes: []int{1, 2}}
		nu, err := start(t, st, "new-a", r020f2)
		if err != nil {
			t.Fatal(err)
		}
		// A replica whose heartbeat names no version is the unnumbered release's.
		s := status(t, st)
		var seen bool
		for _, r := range s.Replicas {
			if r.Owner == "b01080b-replica" {
				seen = !r.Numbered && r.Release.Version == Unnumbered
			}
		}
		if !seen {
			t.Fatalf("the unnumbered replica is not listed as %s: %+v", Unnumbered, s.Replicas)
		}
		if _, err := Finish(context.Background(), st, ttl, r020f2); err == nil {
			t.Fatal("finish beside an unnumbered replica: switched, want refused")
		}
		stopOld()
		// finish does not wait for a heartbeat of the keeper's own.
		waitFor(t, "the unnumbered heartbeat lapsed", func() bool { return len(status(t, st).Waiting(2)) == 0 })
		said, err := Finish(context.Background(), st, ttl, r020f2)
		if err != nil || !strings.Contains(said, "switched") {
			t.Fatalf("finish: %q, %v", said, err)
		}
		waitFor(t, "the running replica writing format 2", func() bool { return nu.k.Writes() == 2 })
		said, err = Finish(context.Background(), st, ttl, r020f2)
		if err != nil || !strings.Contains(said, "nothing to finish") {
			t.Fatalf("a second finish: %q, %v", said, err)
		}
	})
}

func TestARollbackBeforeTheSwitchStartsAndOneFurtherThanAReleaseIsRefused(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *store.Store) {
		if _, err := start(t, st, "a", r020); err != nil {
			t.Fatal(err)
		}
		if _, err := start(t, st, "b", r030); err != nil {
			t.Fatal(err)
		}
		// Rolling back to 0.2.0 before the switch: allowed.
		if _, err := start(t, st, "c", r020); err != nil {
			t.Fatalf("a rollback before the switch: %v", err)
		}
		// 0.4.0 beside live 0.2.0 replicas: two releases apart.
		_, err := start(t, st, "d", r040)
		refusal(t, err, "relay 0.4.0 cannot start", "0.2.0", "more than one release behind")
		// And the unnumbered release's replica beside 0.3.0.
		_, err = start(t, st, "e", Release{Version: "0.3.0", Previous: "0.2.0", Reads: []int{1, 2}, Writes: []int{1, 2}})
		if err != nil {
			t.Fatalf("a second 0.3.0: %v", err)
		}
	})
}

func TestADeploymentMoreThanOneReleaseAwayIsRefused(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *store.Store) {
		// The deployment last ran 0.2.0; no replica is live now.
		a, err := start(t, st, "a", r020)
		if err != nil {
			t.Fatal(err)
		}
		a.stop()
		waitFor(t, "no live replica", func() bool { return len(status(t, st).Replicas) == 0 })
		_, err = start(t, st, "b", r040)
		refusal(t, err, "relay 0.4.0 cannot start", "this deployment last ran relay 0.2.0", "more than one release behind")
		// 0.4.0 before 0.3.0 has switched to format 2: refused, saying to wait for it.
		// (c beats by hand here, so the switch happens when the test says.)
		c := New(Options{Store: st, Owner: "c", Release: r030, Known: knownTo(r030), TTL: ttl,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err := c.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		_, err = start(t, st, "d", r040)
		refusal(t, err, "relay 0.4.0 cannot start", "still in state format 1", "run relay 0.3.0 until it has switched")
		c.round(context.Background())
		if c.Writes() != 2 {
			t.Fatalf("0.3.0 alone writes format %d after a heartbeat, want 2", c.Writes())
		}
		if _, err := start(t, st, "e", r040); err != nil {
			t.Fatalf("0.4.0 after 0.3.0 switched: %v", err)
		}
	})
}

func TestAReleaseNewerThanThisBuildKnowsIsANeighbourOnlyWhenItSaysSo(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *store.Store) {
		only020 := knownTo(r020)
		discard := slog.New(slog.NewTextHandler(io.Discard, nil))
		// A live 0.3.0 this 0.2.0 build has never heard of, naming 0.2.0 as its previous.
		if err := announce(context.Background(), st.Client(), "n", r030, 1, ttl); err != nil {
			t.Fatal(err)
		}
		k := New(Options{Store: st, Owner: "o", Release: r020, Known: only020, TTL: ttl, Logger: discard})
		if err := k.Start(context.Background()); err != nil {
			t.Fatalf("0.2.0 beside a 0.3.0 that rolls over it: %v", err)
		}
		// A live 0.4.0, which names 0.3.0.
		if err := announce(context.Background(), st.Client(), "m", Release{Version: "0.4.0", Previous: "0.3.0", Reads: []int{1}, Writes: []int{1}}, 1, ttl); err != nil {
			t.Fatal(err)
		}
		k2 := New(Options{Store: st, Owner: "p", Release: r020, Known: only020, TTL: ttl, Logger: discard})
		refusal(t, k2.Start(context.Background()), "relay 0.2.0 cannot start", "live replica m runs relay 0.4.0", "more than one release ahead")
	})
}

func TestAReplicaStopsWhenTheFormatInForceBecomesOneItCannotRead(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *store.Store) {
		old, err := start(t, st, "old", r020)
		if err != nil {
			t.Fatal(err)
		}
		// A switch that raced this replica's start (its heartbeat not yet seen).
		if err := switchTo(context.Background(), st, status(t, st), 2, "0.3.0"); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-old.stopped:
			refusal(t, err, "relay 0.2.0 cannot start", "state format 2")
		case <-time.After(10 * time.Second):
			t.Fatal("the 0.2.0 replica kept running on a format it cannot read")
		}
	})
}
