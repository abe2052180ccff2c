package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/store/storetest"
)

// Redis memory: a memory row's used_memory before its repetitions and after its last
// delivery is committed, what its destination's keys hold (issue 30's aims), and the
// ingest row's growth and dedup markers.

// keyMemory is one key's MEMORY USAGE, times the share of it a destination carries;
// perEvent, for a stream, its MEMORY USAGE over what it holds (what one attempt line or
// one channel event costs while it is kept): an attempt log's lines (XLEN); a channel's
// events, which its entries stand for (a run is one entry for many: internal/store
// lua.go), from its first entry's sequence to its counter, at most the channel's count
// bound.
type keyMemory struct {
	key      string
	bytes    float64
	perEvent float64
}

// readMemory reads, after a memory row's repetitions, used_memory once its destinations
// have committed their last delivery, and what each of the destination's keys holds.
func readMemory(ctx context.Context, res *benchResult, rdb redis.UniversalClient) string {
	for i := range res.dests {
		if !waitCommitted(ctx, rdb, "d"+strconv.Itoa(i), 10*time.Second) {
			return "memory: the destination's cursor did not reach the log's last entry within 10 s"
		}
	}
	var err error
	if res.memAfter, err = usedMemory(ctx, rdb); err != nil {
		return "INFO memory: " + err.Error()
	}
	if res.destMemory, err = destinationMemory(ctx, rdb, "acct_bench", "d0", res.dests); err != nil {
		return "MEMORY USAGE: " + err.Error()
	}
	return ""
}

// waitCommitted waits until destination id's cursor (its card's cursor field) is the
// bench account's last log entry: what it delivered is committed, attempts and channel
// events written.
func waitCommitted(ctx context.Context, rdb redis.UniversalClient, id string, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		last, err := rdb.XRevRangeN(ctx, benchLogKey, "+", "-", 1).Result()
		if err == nil && len(last) == 1 && rdb.HGet(ctx, storetest.DestKey("acct_bench", id), "cursor").Val() == last[0].ID {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// usedMemory is used_memory of INFO memory, summed over every master, in bytes.
func usedMemory(ctx context.Context, rdb redis.UniversalClient) (int64, error) {
	var total atomic.Int64
	err := forEachMaster(ctx, rdb, func(ctx context.Context, m *redis.Client) error {
		info, err := m.Info(ctx, "memory").Result()
		if err != nil {
			return err
		}
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return fmt.Errorf("used_memory %q", v)
				}
				total.Add(n)
				return nil
			}
		}
		return fmt.Errorf("%s: no used_memory", m.Options().Addr)
	})
	return total.Load(), err
}

// destinationMemory is what destination id of acct (of dests destinations) holds in
// Redis: MEMORY USAGE … SAMPLES 0 (every element counted) of each key of the account
// that destKeyShare gives it a share of, times that share. One SCAN of the account's
// keys on every master.
func destinationMemory(ctx context.Context, rdb redis.UniversalClient, acct, id string, dests int) ([]keyMemory, error) {
	var mu sync.Mutex
	var out []keyMemory
	err := forEachMaster(ctx, rdb, func(ctx context.Context, m *redis.Client) error {
		iter := m.Scan(ctx, 0, storetest.AccountPattern(acct), 1000).Iterator()
		for iter.Next(ctx) {
			share := destKeyShare(iter.Val(), acct, id, dests)
			if share == 0 {
				continue
			}
			n, err := m.MemoryUsage(ctx, iter.Val(), 0).Result()
			if err != nil {
				return fmt.Errorf("%s: %w", iter.Val(), err)
			}
			km := keyMemory{key: iter.Val(), bytes: share * float64(n)}
			if t, err := m.Type(ctx, km.key).Result(); err == nil && t == "stream" {
				if held := streamHolds(ctx, m, km.key); held > 0 {
					km.perEvent = float64(n) / float64(held)
				}
			}
			mu.Lock()
			out = append(out, km)
			mu.Unlock()
		}
		return iter.Err()
	})
	slices.SortFunc(out, func(a, b keyMemory) int { return cmp.Compare(b.bytes, a.bytes) })
	return out, err
}

// streamHolds is how many attempt lines or channel events stream key holds (keyMemory),
// 0 when it cannot tell.
func streamHolds(ctx context.Context, m *redis.Client, key string) int64 {
	if !strings.Contains(key, ":chan:") {
		n, _ := m.XLen(ctx, key).Result()
		return n
	}
	first, err := m.XRangeN(ctx, key, "-", "+", 1).Result()
	last, err2 := m.Get(ctx, key+":seq").Int64()
	if err != nil || err2 != nil || len(first) == 0 {
		return 0
	}
	from, _ := strconv.ParseInt(strings.SplitN(first[0].ID, "-", 2)[0], 10, 64)
	return min(last-from+1, int64(store.DefaultBounds.ChannelEvents))
}

// keysMemory is MEMORY USAGE … SAMPLES 0 summed over the keys matching pattern, on
// every master.
func keysMemory(ctx context.Context, rdb redis.UniversalClient, pattern string) (int64, error) {
	var total atomic.Int64
	err := forEachMaster(ctx, rdb, func(ctx context.Context, m *redis.Client) error {
		iter := m.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			n, err := m.MemoryUsage(ctx, iter.Val(), 0).Result()
			if err != nil {
				return fmt.Errorf("%s: %w", iter.Val(), err)
			}
			total.Add(n)
		}
		return iter.Err()
	})
	return total.Load(), err
}

// destKeyShare is the share of key that destination id of acct carries when the account
// has dests destinations (internal/store keys.go): all of every key named after it (its
// card, lease, attempts, retries, its channel and the channel's counter), 1/dests of
// the account's channel and its counter, none of the rest.
func destKeyShare(key, acct, id string, dests int) float64 {
	prefix := storetest.AccountPrefix(acct)
	switch {
	case !strings.HasPrefix(key, prefix):
		return 0
	case strings.HasSuffix(key, ":"+id), strings.HasSuffix(key, ":destination:"+id+":seq"):
		return 1
	case key == prefix+"chan:account:"+acct, key == prefix+"chan:account:"+acct+":seq":
		return 1 / float64(max(dests, 1))
	}
	return 0
}
