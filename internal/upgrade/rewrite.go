package upgrade

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Rewrite is a format change that must rewrite keys already in Redis. Once Format is
// in force, one replica at a time walks every key matching Match on every master (SCAN,
// its cursor kept in Redis: a replica that stops leaves it where it was, the next one
// goes on from there) and calls Apply on each, at most Rate keys a second, so the walk
// never competes with deliveries. Apply must be idempotent: SCAN may return a key twice,
// and a walk cut short repeats its last batch.
type Rewrite struct {
	Name   string // names its progress: relay:{replicas}:rewrite:<Name>, the metrics' label
	Format int    // it runs once this format is in force
	Match  string // the SCAN MATCH pattern of the keys it rewrites
	Rate   int    // keys a second (0: 500)
	Apply  func(ctx context.Context, rdb redis.Cmdable, key string) error
}

func rewriteKey(name string) string     { return "relay:{replicas}:rewrite:" + name }
func rewriteLockKey(name string) string { return "relay:{replicas}:rewrite:" + name + ":lock" }

// rewriter runs a keeper's rewrites.
type rewriter struct {
	k             *Keeper
	keys          *prometheus.CounterVec
	done, pending *prometheus.GaugeVec
}

func newRewriter(k *Keeper) *rewriter {
	r := &rewriter{k: k,
		keys: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "relay_upgrade_rewrite_keys_total",
			Help: "Keys a background rewrite has rewritten on this replica."}, []string{"rewrite"}),
		done: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "relay_upgrade_rewrite_done",
			Help: "1 once a background rewrite has walked every master to its end."}, []string{"rewrite"}),
		pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "relay_upgrade_rewrite_masters_pending",
			Help: "Masters a background rewrite has still to walk (as this replica last saw)."}, []string{"rewrite"}),
	}
	if k.o.Registerer != nil {
		k.o.Registerer.MustRegister(r.keys, r.done, r.pending)
	}
	return r
}

// run walks each rewrite whose format is in force and which is not done, one after the
// other, checking again every heartbeat until all are done or ctx ends.
func (r *rewriter) run(ctx context.Context) {
	if len(r.k.o.Rewrites) == 0 {
		return
	}
	t := time.NewTicker(max(r.k.o.TTL/3, 100*time.Millisecond))
	defer t.Stop()
	for {
		all := true
		for _, rw := range r.k.o.Rewrites {
			if ctx.Err() != nil {
				return
			}
			if r.k.Writes() < rw.Format {
				all = false
				continue
			}
			done, err := r.walk(ctx, rw)
			if err != nil && ctx.Err() == nil {
				r.k.o.Logger.Warn("background rewrite paused; it goes on from where it was", "rewrite", rw.Name, "error", err)
			}
			all = all && done
		}
		if all {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// walk takes rw's lock and walks what is left of it; it says whether rw is done (by
// this replica or another). A walk another replica holds returns not done.
func (r *rewriter) walk(ctx context.Context, rw Rewrite) (bool, error) {
	rdb := r.k.o.Store.Client()
	if d, err := rdb.HGet(ctx, rewriteKey(rw.Name), "done").Result(); err == nil && d == "1" {
		r.done.WithLabelValues(rw.Name).Set(1)
		r.pending.WithLabelValues(rw.Name).Set(0)
		return true, nil
	}
	hold := 3 * r.k.o.TTL
	ok, err := rdb.SetNX(ctx, rewriteLockKey(rw.Name), r.k.o.Owner, hold).Result()
	if err != nil || !ok {
		return false, err
	}
	defer rdb.Del(context.WithoutCancel(ctx), rewriteLockKey(rw.Name))

	masters, err := mastersOf(ctx, rdb)
	if err != nil {
		return false, err
	}
	rate := rw.Rate
	if rate <= 0 {
		rate = 500
	}
	batch := min(max(rate/10, 1), 1000)
	tick := time.Duration(batch) * time.Second / time.Duration(rate)
	cursors, err := rdb.HGetAll(ctx, rewriteKey(rw.Name)).Result()
	if err != nil {
		return false, err
	}
	pending := 0
	for _, m := range masters {
		if cursors["cursor:"+m.addr] != "end" {
			pending++
		}
	}
	for _, m := range masters {
		field := "cursor:" + m.addr
		state := cursors[field]
		if state == "end" {
			continue
		}
		r.pending.WithLabelValues(rw.Name).Set(float64(pending))
		cursor, _ := strconv.ParseUint(state, 10, 64)
		for {
			start := time.Now()
			keys, next, err := m.client.Scan(ctx, cursor, rw.Match, int64(batch)).Result()
			if err != nil {
				return false, err
			}
			for _, key := range keys {
				if err := rw.Apply(ctx, rdb, key); err != nil {
					return false, fmt.Errorf("%s: %w", key, err)
				}
				r.keys.WithLabelValues(rw.Name).Inc()
			}
			saved := strconv.FormatUint(next, 10)
			if next == 0 {
				saved = "end"
			}
			if err := rdb.HSet(ctx, rewriteKey(rw.Name), field, saved).Err(); err != nil {
				return false, err
			}
			if err := rdb.PExpire(ctx, rewriteLockKey(rw.Name), hold).Err(); err != nil {
				return false, err
			}
			if next == 0 {
				pending--
				break
			}
			cursor = next
			select { // at most rate keys a second
			case <-ctx.Done():
				return false, ctx.Err()
			case <-time.After(tick - time.Since(start)):
			}
		}
	}
	if err := rdb.HSet(ctx, rewriteKey(rw.Name), "done", "1").Err(); err != nil {
		return false, err
	}
	r.done.WithLabelValues(rw.Name).Set(1)
	r.pending.WithLabelValues(rw.Name).Set(0)
	r.k.o.Logger.Info("background rewrite done", "rewrite", rw.Name, "masters", len(masters))
	return true, nil
}

// master is one master node to SCAN, by its address.
type master struct {
	addr   string
	client redis.Cmdable
}

// mastersOf lists the masters of a Redis Cluster, or the one server.
func mastersOf(ctx context.Context, rdb redis.UniversalClient) ([]master, error) {
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return []master{{addr: "single", client: rdb}}, nil
	}
	var mu sync.Mutex
	var out []master
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		out = append(out, master{addr: c.Options().Addr, client: c})
		return nil
	})
	slices.SortFunc(out, func(a, b master) int { return strings.Compare(a.addr, b.addr) })
	return out, err
}
