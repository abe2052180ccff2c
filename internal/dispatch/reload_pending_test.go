package dispatch

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/store"
)

// TestAReloadThatFixesAPendingDestinationStartsDeliveryAtOnce: a destination names a
// role with a typo, so it stays pending; the operator's reload fixes the ARN. Its worker
// is redefined, and the new one takes the lease back and checks the setup at once: the
// events that waited, then new ones, reach the bus in order, without waiting for the
// next lease round (40 s here), the old lease to run out (2 min) or the next scheduled
// setup check (10 min).
func TestAReloadThatFixesAPendingDestinationStartsDeliveryAtOnce(t *testing.T) {
	sts, eb, sink := eventBridgeBehindSTS(t)
	dest := bus("orders", "111122223333")
	dest.PinnedExternalID = "ext-reload-1"
	sts.RequireExternalID(dest.RoleARN, dest.PinnedExternalID) // the role exists and trusts us
	typo := dest
	typo.RoleARN = "arn:aws:iam::111122223333:role/rleay"

	r := newRig(t, newTestSink(nil), typo)
	r.d.opts.Sinks[destination.EventBridge] = sink
	r.d.opts.Delivery.LeaseTTL = 2 * time.Minute
	r.d.opts.Delivery.SetupCheck.Initial, r.d.opts.Delivery.SetupCheck.Max = 10*time.Minute, 15*time.Minute
	r.start()
	before := r.publish("job.completed", "job.failed", "job.completed")
	waitFor(t, "the first setup check failing on the typo", func() bool {
		p := r.state("orders").Pending
		return p != nil && p.Message != ""
	})

	if err := r.d.SetDestinations(context.Background(), []destination.Destination{dest}); err != nil {
		t.Fatal(err)
	}
	after := r.publish("job.completed", "job.completed")
	waitFor(t, "the five events on the bus after the reload", func() bool { return len(eb.Entries()) >= 5 })
	got, err := eb.EventIDs(dest.BusARN)
	if err != nil {
		t.Fatal(err)
	}
	if want := slices.Concat(before, after); !slices.Equal(got, want) {
		t.Fatalf("the bus got %v, want the 3 that waited, then the 2 new ones, in order", got)
	}
	if st := r.state("orders"); st.Status != store.Active {
		t.Fatalf("after the reload: %s, want active", st.Status)
	}
}
