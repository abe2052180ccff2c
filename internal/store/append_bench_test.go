package store_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/testpeer"
)

// The append benchmarks run against a private real Redis (testpeer.StartRedis): one event
// per call is the round-trip-bound path, 64 per call the pipelined one. BenchmarkBare* do
// the bare operation of the same size (a Lua SET NX PX + XADD of the 1 KB body, through
// go-redis) in the same run: report AppendX beside BareX, as a ratio.

func BenchmarkAppendOne(b *testing.B)      { benchmarkAppend(b, 1, 1<<10) }
func BenchmarkAppendBatch64(b *testing.B)  { benchmarkAppend(b, 64, 1<<10) }
func BenchmarkAppendBatch256(b *testing.B) { benchmarkAppend(b, 256, 1<<10) } // a full prefetch window

// The body-size benchmarks report redis-µs/event beside events/s: AppendBatch passes the
// body in a plain XADD, BareLua* passes it through a script as the append did before
// (Redis's Lua copies each argument into a string and hashes all of its bytes).
func BenchmarkAppendBatch64Body16KB(b *testing.B)  { benchmarkAppend(b, 64, 16<<10) }
func BenchmarkAppendBatch64Body64KB(b *testing.B)  { benchmarkAppend(b, 64, 64<<10) }
func BenchmarkBareLuaBatch64Body16KB(b *testing.B) { benchmarkBareSize(b, 64, 16<<10) }
func BenchmarkBareLuaBatch64Body64KB(b *testing.B) { benchmarkBareSize(b, 64, 64<<10) }

// The spread benchmarks append 256-event batches over 64 accounts, on one server and on
// a Redis Cluster of 3 masters (+ 3 replicas), with and without WAIT for one replica.
// Beside events/s they report redis-µs/event: the CPU the Redis masters spent (INFO
// cpu, summed over masters) per event, the cost a capacity model divides a master by.
func BenchmarkAppendSpreadSingle(b *testing.B) {
	benchmarkSpread(b, store.Options{URL: testpeer.StartRedis(b).URL()})
}
func BenchmarkAppendSpreadCluster(b *testing.B) {
	benchmarkSpread(b, store.Options{URL: testpeer.StartRedisCluster(b).URL()})
}
func BenchmarkAppendSpreadClusterWait1(b *testing.B) {
	benchmarkSpread(b, store.Options{URL: testpeer.StartRedisCluster(b).URL(), MinReplicas: 1})
}

func benchmarkSpread(b *testing.B, o store.Options) {
	st, err := store.Connect(o)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	batch := make([]store.Append, 256)
	for i := range batch {
		batch[i] = store.Append{Entry: benchEntry(), Accounts: []string{"acct_" + strconv.Itoa(i%64)}}
	}
	if _, err := st.AppendBatch(ctx, batch[:64], time.Hour, time.Hour); err != nil { // loads the script on every master
		b.Fatal(err)
	}
	cpu0 := mastersCPU(b, st)
	seq := 0
	for b.Loop() {
		for i := range batch {
			seq++
			batch[i].Entry.EventID = "fetcher.job.completed.spread-" + strconv.Itoa(seq)
		}
		if _, err := st.AppendBatch(ctx, batch, time.Hour, time.Hour); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(seq)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric((mastersCPU(b, st)-cpu0).Seconds()*1e6/float64(seq), "redis-µs/event")
}

// mastersCPU is the CPU time (user + sys) the masters have used, summed.
func mastersCPU(b *testing.B, st *store.Store) time.Duration {
	var masters []redis.UniversalClient
	if c, ok := st.Client().(*redis.ClusterClient); ok {
		var mu sync.Mutex
		_ = c.ForEachMaster(context.Background(), func(_ context.Context, m *redis.Client) error {
			mu.Lock()
			masters = append(masters, m)
			mu.Unlock()
			return nil
		})
	} else {
		masters = []redis.UniversalClient{st.Client()}
	}
	var total float64
	for _, m := range masters {
		info, err := m.Info(context.Background(), "cpu").Result()
		if err != nil {
			b.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			k, v, _ := strings.Cut(line, ":")
			if k == "used_cpu_sys" || k == "used_cpu_user" {
				f, _ := strconv.ParseFloat(v, 64)
				total += f
			}
		}
	}
	return time.Duration(total * float64(time.Second))
}

func BenchmarkBareOne(b *testing.B)     { benchmarkBare(b, 1) }
func BenchmarkBareBatch64(b *testing.B) { benchmarkBare(b, 64) }

// benchmarkAppend appends batches of size new events (bodies of body bytes, one account
// each) and reports events/s and the Redis CPU per event.
func benchmarkAppend(b *testing.B, size, body int) {
	st, err := store.Open(testpeer.StartRedis(b).URL())
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	batch := make([]store.Append, size)
	for i := range batch {
		batch[i] = store.Append{Entry: benchEntrySized(body), Accounts: []string{"acct_bench"}}
	}
	// Warm the connection and load the script outside the timed loop.
	if _, err := st.AppendBatch(ctx, []store.Append{{Entry: benchEntry(), Accounts: []string{"acct_warm"}}}, time.Hour, time.Hour); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(size * len(batch[0].Entry.Data)))
	b.ReportAllocs()
	cpu0 := mastersCPU(b, st)
	seq := 0
	for b.Loop() {
		for i := range batch {
			seq++
			batch[i].Entry.EventID = "fetcher.job.completed.bench-" + strconv.Itoa(seq)
		}
		results, err := st.AppendBatch(ctx, batch, time.Hour, time.Hour)
		if err != nil {
			b.Fatal(err)
		}
		if results[size-1].Duplicate() {
			b.Fatal("a new event was taken for a duplicate")
		}
	}
	b.ReportMetric(float64(seq)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric((mastersCPU(b, st)-cpu0).Seconds()*1e6/float64(seq), "redis-µs/event")
}

// bareScript is the least an append must do: the dedup marker and the log entry.
var bareScript = redis.NewScript(`
if redis.call('SET', KEYS[1], '1', 'NX', 'PX', ARGV[1]) then
  return redis.call('XADD', KEYS[2], '*', 'data', ARGV[2])
end
return ''
`)

// benchmarkBare runs bareScript size times per round trip and reports events/s.
func benchmarkBare(b *testing.B, size int) { benchmarkBareSize(b, size, 1<<10) }

// benchmarkBareSize is benchmarkBare with bodies of body bytes; it also reports the
// Redis CPU per event.
func benchmarkBareSize(b *testing.B, size, body int) {
	peer := testpeer.StartRedis(b)
	rdb := redis.NewClient(&redis.Options{Addr: peer.Addr()})
	defer rdb.Close()
	st, err := store.Open(peer.URL()) // for mastersCPU
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	data := benchEntrySized(body).Data
	if err := bareScript.Load(ctx, rdb).Err(); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(size * len(data)))
	b.ReportAllocs()
	cpu0 := mastersCPU(b, st)
	seq := 0
	for b.Loop() {
		pipe := rdb.Pipeline()
		for range size {
			seq++
			bareScript.EvalSha(ctx, pipe, []string{"bare:{a}:seen:" + strconv.Itoa(seq), "bare:{a}:log"}, 3600000, data)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(seq)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric((mastersCPU(b, st)-cpu0).Seconds()*1e6/float64(seq), "redis-µs/event")
}

// benchEntry is an entry the size of a Worker event padded to a 1 KB body.
func benchEntry() store.Entry { return benchEntrySized(1 << 10) }

// benchEntrySized is benchEntry with its body padded to body bytes.
func benchEntrySized(body int) store.Entry {
	return store.Entry{
		Type:          "job.completed",
		CEType:        "studio.lerian.job.completed",
		Source:        "//lerian.fetcher/worker",
		Time:          "2026-11-29T12:00:00.123456789Z",
		Tenant:        "single-tenant",
		Subject:       "0190f2a4-2222-7333-8444-555566667777",
		SchemaVersion: "1.0.0",
		Data:          []byte(`{"jobId":"0190f2a4-2222-7333-8444-555566667777","status":"completed","metadata":{"pad":"` + strings.Repeat("x", body-91) + `"}}`),
	}
}
