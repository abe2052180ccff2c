package upgrade

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/mercamap/relay/internal/store"
)

// applied records which keys a rewrite applied to, and how often.
type applied struct {
	mu sync.Mutex
	n  map[string]int
}

func (a *applied) count() (keys, calls int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, c := range a.n {
		keys++
		calls += c
	}
	return keys, calls
}

// moveField is a format-2 rewrite: field v becomes w (idempotent).
func moveField(rate int, a *applied) Rewrite {
	return Rewrite{Name: "move-v", Format: 2, Match: "relay:{*}:rw:*", Rate: rate,
		Apply: func(ctx context.Context, rdb redis.Cmdable, key string) error {
			v, err := rdb.HGet(ctx, key, "v").Result()
			if err == nil {
				_, err = rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
					p.HSet(ctx, key, "w", v)
					p.HDel(ctx, key, "v")
					return nil
				})
			} else if err == redis.Nil {
				err = nil // done already
			}
			if err == nil {
				a.mu.Lock()
				a.n[key]++
				a.mu.Unlock()
			}
			return err
		}}
}

// seedKeys writes n keys of the old form, spread over every slot's owner.
func seedKeys(t *testing.T, st *store.Store, n int) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < n; i += 100 {
		_, err := st.Client().Pipelined(ctx, func(p redis.Pipeliner) error {
			for j := i; j < min(i+100, n); j++ {
				p.HSet(ctx, fmt.Sprintf("relay:{acct_%d}:rw:%d", j%97, j), "v", j)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

func keeperWith(st *store.Store, owner string, r Release, rw Rewrite, reg prometheus.Registerer) *Keeper {
	return New(Options{Store: st, Owner: owner, Release: r, Known: knownTo(r), TTL: ttl, Rewrites: []Rewrite{rw},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: reg})
}

// A rewrite of existing keys waits for its format, runs in the background at its rate,
// and a replica that stops mid-walk leaves it for the next to finish from where it was.
func TestABackgroundRewriteWaitsForItsFormatKeepsItsRateAndResumes(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *store.Store) {
		const n, rate = 1200, 1500
		seedKeys(t, st, n)
		ctx := context.Background()

		// Beside a 0.2.0 replica the format stays 1: nothing is rewritten.
		old, err := start(t, st, "old", r020)
		if err != nil {
			t.Fatal(err)
		}
		first := &applied{n: map[string]int{}}
		reg1 := prometheus.NewRegistry()
		k1 := keeperWith(st, "first", r030, moveField(rate, first), reg1)
		if err := k1.Start(ctx); err != nil {
			t.Fatal(err)
		}
		run1, stop1 := context.WithCancel(ctx)
		done1 := make(chan struct{})
		go func() { defer close(done1); k1.Run(run1) }()
		beats(t, st, "first", 3) // several heartbeats, in which nothing may happen
		if keys, _ := first.count(); keys != 0 || k1.Writes() != 1 {
			t.Fatalf("format %d, %d keys rewritten beside a replica that cannot read format 2", k1.Writes(), keys)
		}

		// The old replica leaves: the switch, then the walk; stopped a third of the way.
		began := time.Now()
		old.stop()
		waitFor(t, "a third of the keys rewritten", func() bool { keys, _ := first.count(); return keys >= n/3 })
		stop1()
		<-done1
		keys1, _ := first.count()
		if keys1 >= n {
			t.Fatalf("the walk was done before it was stopped (%d keys): rate not kept", keys1)
		}
		if got := metricValue(t, reg1, "relay_upgrade_rewrite_keys_total"); int(got) < keys1 {
			t.Errorf("relay_upgrade_rewrite_keys_total %v, want ≥ %d", got, keys1)
		}

		// Another replica goes on from the saved cursors and finishes.
		second := &applied{n: map[string]int{}}
		reg2 := prometheus.NewRegistry()
		k2 := keeperWith(st, "second", r030, moveField(rate, second), reg2)
		if err := k2.Start(ctx); err != nil {
			t.Fatal(err)
		}
		run2, stop2 := context.WithCancel(ctx)
		defer stop2()
		go k2.Run(run2)
		waitFor(t, "the rewrite done", func() bool { return st.Client().HGet(ctx, rewriteKey("move-v"), "done").Val() == "1" })
		elapsed := time.Since(began)
		keys2, _ := second.count()
		if keys2 >= n {
			t.Errorf("the second replica rewrote %d of %d keys: it started over instead of resuming", keys2, n)
		}
		// Every key in the new form, none in the old.
		for j := range n {
			key := fmt.Sprintf("relay:{acct_%d}:rw:%d", j%97, j)
			if h := st.Client().HGetAll(ctx, key).Val(); h["w"] != fmt.Sprint(j) || h["v"] != "" {
				t.Fatalf("%s after the rewrite: %v", key, h)
			}
		}
		// At most rate keys a second: n keys take at least n/rate (less a batch's share).
		if min := time.Duration(n*800/rate)*time.Millisecond - 3*ttl; elapsed < min {
			t.Errorf("%d keys rewritten in %s at %d keys/s: faster than its bound (≥ %s)", n, elapsed, rate, min)
		}
		waitFor(t, "relay_upgrade_rewrite_done 1", func() bool { return metricValue(t, reg2, "relay_upgrade_rewrite_done") == 1 })
	})
}

// metricValue is the sum of name's samples in reg.
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.Metric {
				sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// beats waits until owner's heartbeat entry has been written n more times.
func beats(t *testing.T, st *store.Store, owner string, n int) {
	t.Helper()
	last, seen := "", 0
	waitFor(t, fmt.Sprintf("%d heartbeats of %s", n, owner), func() bool {
		v := st.Client().HGet(context.Background(), aboutKey, owner).Val()
		if v != last {
			last, seen = v, seen+1
		}
		return seen > n
	})
}

// A rewrite marked done (an emptied Redis, as the bench starts each relay on) is not
// walked: nothing is applied, and the replica reports it done.
func TestARewriteMarkedDoneIsNotWalked(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		seedKeys(t, st, 100)
		a := &applied{n: map[string]int{}}
		rw := moveField(1500, a)
		if err := MarkDone(ctx, st.Client(), []Rewrite{rw}); err != nil {
			t.Fatal(err)
		}
		reg := prometheus.NewRegistry()
		k := keeperWith(st, "marked", r030, rw, reg)
		if err := k.Start(ctx); err != nil {
			t.Fatal(err)
		}
		run, stop := context.WithCancel(ctx)
		defer stop()
		go k.Run(run)
		waitFor(t, "relay_upgrade_rewrite_done 1", func() bool { return metricValue(t, reg, "relay_upgrade_rewrite_done") == 1 })
		if keys, _ := a.count(); keys != 0 || k.Writes() != 2 {
			t.Fatalf("format %d, %d keys rewritten by a rewrite marked done", k.Writes(), keys)
		}
		if names := ReleaseRewrites(nil); len(names) == 0 || names[0].Name == "" {
			t.Fatalf("ReleaseRewrites(nil) = %v, want this release's rewrites by name", names)
		}
	})
}
