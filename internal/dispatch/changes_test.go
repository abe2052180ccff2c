package dispatch

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
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
	waitFor(t, "the first lease round", func() bool { return r.d.leases.live.Load() > 0 })

	req, answered := context.WithCancel(context.Background())
	if err := r.d.Upsert(req, bus("orders", "111122223333")); err != nil {
		t.Fatal(err)
	}
	answered()
	ids := r.publish("job.completed", "job.completed", "job.failed")
	waitFor(t, "the three events at the new destination", func() bool { return slices.Equal(sink.got("orders"), ids) })
}

// TestAnAccountThatJoinsCostsTheOthersNothing: the first destination of a new account
// has the log follower read one more account. The follower keeps running for the
// accounts it read already, so their workers keep the state they hold: a thousand
// destinations of another account cost Redis no read each (counted by Redis itself,
// INFO commandstats), and the new one delivers at once.
func TestAnAccountThatJoinsCostsTheOthersNothing(t *testing.T) {
	const held = 1000
	var dests []destination.Destination
	for i := range held {
		dests = append(dests, bus(fmt.Sprintf("d%04d", i), "111122223333"))
	}
	sink := newTestSink(nil)
	r := newRig(t, sink)
	cfg := delivery()
	cfg.LeaseTTL = time.Minute // no lease lapses on a loaded machine: a lapse reads the state too
	r.d = New(Options{Store: r.store, Delivery: cfg, Outbox: r.nudges, Poll: 20 * time.Millisecond,
		Sinks:        map[destination.Connector]Sink{destination.EventBridge: sink},
		LogRetention: 2 * time.Hour})
	ctx := context.Background()
	if err := r.d.SetDestinations(ctx, dests); err != nil {
		t.Fatal(err)
	}
	r.start()
	ids := r.publish("job.completed")
	waitFor(t, "every destination leased and delivering", func() bool {
		for _, d := range dests {
			if !slices.Equal(sink.got(d.ID), ids) {
				return false
			}
		}
		return true
	})
	// A worker reads its state with one HGETALL (store.LoadState).
	reads := func() int64 {
		info, err := r.store.Client().Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "cmdstat_hgetall:calls="); ok {
				n, _ := strconv.ParseInt(strings.SplitN(v, ",", 2)[0], 10, 64)
				return n
			}
		}
		t.Fatal("INFO commandstats counts no HGETALL")
		return 0
	}

	before := reads()
	joiner := bus("joiner", "444455556666")
	joiner.Account = "acct_joins"
	if err := r.d.Upsert(ctx, joiner); err != nil {
		t.Fatal(err)
	}
	got, err := r.publishTo("acct_joins", "job.completed")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new account's event at its destination", func() bool { return slices.Equal(sink.got("joiner"), got) })
	if n := reads() - before; n >= held/2 {
		t.Errorf("the join cost Redis %d state reads: the other account's %d workers read their state again", n, held)
	}
	more := r.publish("job.failed")
	waitFor(t, "the first account still delivering", func() bool {
		for _, d := range dests {
			if !slices.Equal(sink.got(d.ID), append(slices.Clone(ids), more...)) {
				return false
			}
		}
		return true
	})
}
