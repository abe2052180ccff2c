package ingest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mercamap/relay/internal/jobevent"
	"github.com/mercamap/relay/internal/testpeer"
	"github.com/mercamap/relay/internal/waittest"
)

// While one batch is in Redis the next is verified and routed (batches): reloads that
// come meanwhile each return, the log holds every event once in the publisher's order,
// and an event published after a reload is routed by the new table.
func TestReloadsWhileBatchesOverlapReturnAndKeepTheOrder(t *testing.T) {
	r := newRig(t, testpeer.SharedRabbitMQ(t), testpeer.RedisURL(t), "relay-test-overlap")
	r.opts.Prefetch = 16                               // many small batches: many overlaps for a reload to land in
	if err := Declare(r.amqpURL, r.topo); err != nil { // the queue fills before the consumer starts
		t.Fatal(err)
	}
	const total = 1500
	ch := r.channel()
	want := r.publishJobs(ch, "3333", total)

	c := New(r.opts)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = c.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })

	reloads := 0
	for testutil.ToFloat64(r.metrics.Acked) < total {
		returned := make(chan struct{})
		go func() { c.SetRouter(tenantRouter{"single-tenant": account}); close(returned) }()
		select {
		case <-returned:
			reloads++
		case <-time.After(30 * time.Second):
			t.Fatalf("a reload has not returned after 30 s (%d before it did), %v of %d acked", reloads, testutil.ToFloat64(r.metrics.Acked), total)
		}
	}
	log := r.log()
	if len(log) != total {
		t.Fatalf("log holds %d events, want %d", len(log), total)
	}
	for i, e := range log {
		if e.EventID != want[i] {
			t.Fatalf("log entry %d is %s, want %s (the publisher's order)", i, e.EventID, want[i])
		}
	}

	c.SetRouter(tenantRouter{"single-tenant": "acct_2"})
	job := jobevent.Job{ID: "0190f2a4-3333-7000-8000-999999999999", Status: "completed"}
	r.publish(ch, job.RoutingKey(), jobevent.Build(job, r.topo.Exchange, r.key, time.Now()))
	waittest.For(t, 30*time.Second, "the event after the reload stored", func() bool { return testutil.ToFloat64(r.metrics.Stored) == total+1 })
	moved, err := r.store.ReadLog(context.Background(), "acct_2", "0", 10)
	if err != nil || len(moved) != 1 || moved[0].EventID != job.EventID() {
		t.Fatalf("acct_2's log: %+v, %v; want the event published after the reload", moved, err)
	}
	if n := len(r.log()); n != total {
		t.Fatalf("%s's log holds %d events after the reload, want %d", account, n, total)
	}
	t.Logf("%d reloads while %d events were consumed", reloads, total)
}
