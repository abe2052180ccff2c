package dispatch

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/destination"
)

// TestADestinationAddedWhileRunningDeliversOnceTheRequestThatAddedItHasEnded: a
// destination the API adds (Upsert, with the request's context) is leased at once and
// keeps delivering after that request ended, with no lease round to start it (the rounds
// here are minutes apart): its worker lives as long as the dispatcher, not the request.
func TestADestinationAddedWhileRunningDeliversOnceTheRequestThatAddedItHasEnded(t *testing.T) {
	sink := newTestSink(nil)
	r := newRig(t, sink)
	cfg := delivery()
	cfg.LeaseTTL = 10 * time.Minute // a lease round every 200 s: only Upsert's take starts the worker in time
	r.d = New(Options{Store: r.store, Delivery: cfg, Outbox: r.nudges, Poll: 20 * time.Millisecond,
		Sinks:        map[destination.Connector]Sink{destination.EventBridge: sink},
		LogRetention: 2 * time.Hour})
	if err := r.d.SetDestinations(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	r.start()
	waitFor(t, "the first lease round", func() bool { return r.d.live.Load() > 0 })

	req, answered := context.WithCancel(context.Background())
	if err := r.d.Upsert(req, bus("orders", "111122223333")); err != nil {
		t.Fatal(err)
	}
	answered()
	ids := r.publish("job.completed", "job.completed", "job.failed")
	waitFor(t, "the three events at the new destination", func() bool { return slices.Equal(sink.got("orders"), ids) })
}
