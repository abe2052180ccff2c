package main

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	rtmetrics "runtime/metrics"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/benchkit"
	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/dispatch"
	"github.com/mercamap/relay/internal/registry"
	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/testpeer"
)

// loadBenchDests is how many API destinations BenchmarkLoadAPIDestinations loads.
const loadBenchDests = 10_000

// BenchmarkLoadAPIDestinations times what a replica does with the destinations the API
// made (issue 54), against a real Redis holding loadBenchDests of them, 10 an account,
// every one's state already stored (a restart: nothing is new). Besides the figures per
// op it reports them per destination: allocs/dest, B/dest, cpu-ns/dest (this process's
// CPU, user and system, Redis's not counted) and gc-cpu-ns/dest (the part of it the
// runtime reckons the garbage collector's). Two parts:
// start, what serve does at start (startFromRedis): the registry read whole, merged
// with the file's (none), and handed to a new dispatcher (SetDestinations: its map, its
// index, each destination's fingerprint and ensure); and reload, a replica that fell
// behind the change stream reading the registry again (apiSource.reloadAll: every
// destination upserted).
//
//	go test -run=NONE -bench=LoadAPIDestinations -benchtime=10x -count=3 ./cmd/relay/
func BenchmarkLoadAPIDestinations(b *testing.B) {
	ctx := context.Background()
	st, err := store.Open(testpeer.RedisURL(b))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	reg := registry.New(st.Client())
	created := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	for i := range loadBenchDests {
		rec := registry.Record{ID: fmt.Sprintf("dest-%06d", i), Account: fmt.Sprintf("acct-%04d", i/10),
			ExternalID: fmt.Sprintf("relay-%032x", i), CreatedAt: created.Add(time.Duration(i) * time.Second)}
		switch i % 3 {
		case 0:
			rec.Connector = string(destination.EventBridge)
			rec.BusARN = fmt.Sprintf("arn:aws:events:us-east-1:111122223333:event-bus/bus-%06d", i)
			rec.RoleARN = fmt.Sprintf("arn:aws:iam::111122223333:role/relay-%06d", i)
			rec.Events = []string{"job.completed", "job.failed"}
		case 1:
			rec.Connector = string(destination.Kinesis)
			rec.StreamARN = fmt.Sprintf("arn:aws:kinesis:eu-west-1:111122223333:stream/s-%06d", i)
			rec.RoleARN = fmt.Sprintf("arn:aws:iam::111122223333:role/relay-%06d", i)
			rec.InFlight = 8
		default:
			rec.Connector = string(destination.PubSub)
			rec.ProjectID, rec.TopicID = "project-1", fmt.Sprintf("topic-%06d", i)
			rec.MaxRate = 50
		}
		if _, _, err := reg.Create(ctx, rec, "", 1000); err != nil {
			b.Fatal(err)
		}
	}
	newSource := func() *apiSource {
		return &apiSource{reg: reg, disp: dispatch.New(dispatch.Options{Store: st}), log: slog.New(slog.DiscardHandler)}
	}
	start := func(b *testing.B) {
		src := newSource()
		all, err := src.load(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		if len(all) != loadBenchDests {
			b.Fatalf("%d destinations loaded, want %d", len(all), loadBenchDests)
		}
		if err := src.disp.SetDestinations(ctx, all); err != nil {
			b.Fatal(err)
		}
	}
	start(b) // every destination's state stored: what follows is a restart
	b.Run("start", func(b *testing.B) {
		perDestination(b, func() { start(b) })
	})
	b.Run("reload", func(b *testing.B) {
		src := newSource()
		all, err := src.load(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := src.disp.SetDestinations(ctx, all); err != nil {
			b.Fatal(err)
		}
		perDestination(b, func() { src.reloadAll(ctx) })
		if len(src.disp.Destinations()) != loadBenchDests {
			b.Fatalf("%d destinations after a reload, want %d", len(src.disp.Destinations()), loadBenchDests)
		}
	})
}

// perDestination runs op b.N times and reports, besides the figures per op, the
// allocations, bytes, CPU time and the garbage collector's CPU time per destination
// loaded (loadBenchDests an op).
func perDestination(b *testing.B, op func()) {
	b.ReportAllocs()
	runtime.GC()
	gc := []rtmetrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	rtmetrics.Read(gc)
	gcBefore := gc[0].Value.Float64()
	cpu := benchkit.SelfCPU()
	b.ResetTimer()
	for range b.N {
		op()
	}
	b.StopTimer()
	cpu = benchkit.SelfCPU() - cpu
	rtmetrics.Read(gc) // before ReadMemStats, whose stop of the world it would count
	runtime.ReadMemStats(&after)
	n := float64(b.N * loadBenchDests)
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/n, "allocs/dest")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/n, "B/dest")
	b.ReportMetric(float64(cpu.Nanoseconds())/n, "cpu-ns/dest")
	b.ReportMetric((gc[0].Value.Float64()-gcBefore)*1e9/n, "gc-cpu-ns/dest")
}
