package ingest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/mercamap/relay/internal/jobevent"
	"github.com/mercamap/relay/internal/testpeer"
	"github.com/mercamap/relay/internal/waittest"
)

// gauges gathers the lag collector into name → value; a missing gauge is absent.
func gauges(t *testing.T, c *Consumer) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c.LagCollector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf.GetMetric()[0].GetGauge().GetValue()
	}
	return out
}

func TestIngestLagShowsTheQueueBacklogAndTheHeldBatchWhileRedisIsDown(t *testing.T) {
	redis := testpeer.StartRedis(t)
	r := newRig(t, testpeer.SharedRabbitMQ(t), redis.URL(), "relay-test-ingest-lag")
	c := New(r.opts)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = c.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	waittest.For(t, 30*time.Second, "consumer connected", c.Connected)

	g := gauges(t, c)
	if g["relay_broker_connected"] != 1 || g["relay_ingest_queue_messages"] != 0 || g["relay_ingest_queue_consumers"] != 1 ||
		g["relay_ingest_oldest_unacked_age_seconds"] != 0 {
		t.Fatalf("idle ingest: %v", g)
	}

	redis.Stop(t)
	var msgs []amqp.Publishing
	for i := range 200 {
		job := jobevent.Job{ID: fmt.Sprintf("0190f2a4-2222-7000-8000-%012d", i), Status: "completed"}
		msgs = append(msgs, jobevent.Build(job, r.topo.Exchange, r.key, time.Now()))
	}
	r.publish(r.channel(), "job.completed", msgs...)
	var first float64
	waittest.For(t, 20*time.Second, "a held batch and a backlog", func() bool {
		g = gauges(t, c)
		first = g["relay_ingest_oldest_unacked_age_seconds"]
		// Prefetch 64: the rest waits ready in the queue.
		return first > 0 && g["relay_ingest_queue_messages"] >= 200-64
	})
	waittest.For(t, 20*time.Second, "the held batch to age", func() bool {
		return gauges(t, c)["relay_ingest_oldest_unacked_age_seconds"] > first
	})

	redis.Start(t)
	waittest.For(t, 30*time.Second, "the backlog to drain", func() bool {
		g = gauges(t, c)
		return g["relay_ingest_queue_messages"] == 0 && g["relay_ingest_oldest_unacked_age_seconds"] == 0
	})
	cancel()
	wg.Wait()
	if g = gauges(t, c); g["relay_broker_connected"] != 0 {
		t.Fatalf("stopped ingest: %v", g)
	}
	if _, ok := g["relay_ingest_queue_messages"]; ok {
		t.Fatalf("stopped ingest still reports a queue depth: %v", g)
	}
}
