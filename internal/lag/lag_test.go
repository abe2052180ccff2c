package lag

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/dispatch"
	"github.com/mercamap/relay/internal/failures"
	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/testpeer"
	"github.com/mercamap/relay/internal/waittest"
)

const acct = "acct_lag"

// gateSink is a bus that does not take events while stalled is set, except as many as
// allow says.
type gateSink struct {
	stalled atomic.Bool
	allow   atomic.Int64
}

func (g *gateSink) Send(context.Context, destination.Destination, destination.Message) error {
	if g.stalled.Load() && g.allow.Add(-1) < 0 {
		return failures.NewNotTaken("the bus is throttling", nil)
	}
	return nil
}

func bus(id string) destination.Destination {
	return destination.Destination{ID: id, Account: acct, Connector: destination.EventBridge,
		BusARN:  "arn:aws:events:us-east-1:111122223333:event-bus/" + id,
		RoleARN: "arn:aws:iam::111122223333:role/relay"}
}

type rig struct {
	t     *testing.T
	store *store.Store
	disp  *dispatch.Dispatcher
	s     *Sampler
	reg   *prometheus.Registry
	n     int
}

func newRig(t *testing.T, sink dispatch.Sink, dests ...destination.Destination) *rig {
	t.Helper()
	st, err := store.Open(testpeer.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	disp := dispatch.New(dispatch.Options{Store: st, Poll: 20 * time.Millisecond,
		Sinks: map[destination.Connector]dispatch.Sink{destination.EventBridge: sink},
		Delivery: config.Delivery{NotTakenBackoff: config.Backoff{Initial: 5 * time.Millisecond, Max: 20 * time.Millisecond},
			MaxMessageAge: time.Hour, DisableAfter: 20, LeaseTTL: time.Second, ChannelRetention: time.Hour, AttemptsRetention: time.Hour}})
	if err := disp.SetDestinations(context.Background(), dests); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = disp.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	r := &rig{t: t, store: st, disp: disp, s: New(Options{Store: st, Held: disp.Held}), reg: prometheus.NewRegistry()}
	r.reg.MustRegister(r.s)
	waitFor(t, "the leases", func() bool { return len(disp.Held()) == len(dests) })
	return r
}

func (r *rig) publish(n int) {
	r.t.Helper()
	var batch []store.Append
	for range n {
		r.n++
		batch = append(batch, store.Append{Accounts: []string{acct}, Entry: store.Entry{
			EventID: fmt.Sprintf("fetcher.job.completed.job-%06d", r.n), Type: "job.completed",
			Time: time.Now().UTC().Format(time.RFC3339Nano), SchemaVersion: "1.0.0",
			Data: []byte(fmt.Sprintf(`{"jobId":"job-%06d","metadata":{"store_id":"st_1"}}`, r.n)),
		}})
	}
	if _, err := r.store.AppendBatch(context.Background(), batch, time.Hour, time.Hour); err != nil {
		r.t.Fatal(err)
	}
}

// sample takes a sample and returns the gauges of dest as /metrics shows them.
func (r *rig) sample(dest string) (events, age float64) {
	r.t.Helper()
	if err := r.s.Sample(context.Background()); err != nil {
		r.t.Fatal(err)
	}
	lags, err := r.reg.Gather()
	if err != nil {
		r.t.Fatal(err)
	}
	found := 0
	for _, mf := range lags {
		for _, m := range mf.GetMetric() {
			var id string
			for _, l := range m.GetLabel() {
				if l.GetName() == "destination" {
					id = l.GetValue()
				}
			}
			if id != dest {
				continue
			}
			switch mf.GetName() {
			case "relay_destination_lag_events":
				events, found = m.GetGauge().GetValue(), found+1
			case "relay_destination_oldest_undelivered_age_seconds":
				age, found = m.GetGauge().GetValue(), found+1
			}
		}
	}
	if found != 2 {
		r.t.Fatalf("lag gauges of %s not exported", dest)
	}
	return events, age
}

// waitFor is waittest.For with the lag tests' limit, 20 s.
func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	waittest.For(t, 20*time.Second, what, ok)
}

func TestStalledDestinationLagGrowsThenDrainsToZero(t *testing.T) {
	sink := &gateSink{}
	sink.stalled.Store(true)
	r := newRig(t, sink, bus("stalled"))

	if events, age := r.sample("stalled"); events != 0 || age != 0 {
		t.Fatalf("before any event: lag %v events, %v s; want 0, 0", events, age)
	}
	r.publish(5)
	events, age1 := r.sample("stalled")
	if events != 5 || age1 <= 0 {
		t.Fatalf("5 events waiting: lag %v events, oldest %v s", events, age1)
	}
	r.publish(7)
	events, age2 := r.sample("stalled")
	if events != 12 || age2 <= age1 {
		t.Fatalf("12 events waiting: lag %v events, oldest %v s (was %v s)", events, age2, age1)
	}

	sink.stalled.Store(false)
	waitFor(t, "the backlog to drain", func() bool {
		events, age := r.sample("stalled")
		return events == 0 && age == 0
	})
}

// The backlog is read from positions (the head ordinal less the cursor's); it must stay
// exact through partial deliveries and new events.
func TestLagStaysExactAsEventsArriveAndSomeAreDelivered(t *testing.T) {
	sink := &gateSink{}
	sink.stalled.Store(true)
	r := newRig(t, sink, bus("partial"))
	r.publish(10)
	if events, _ := r.sample("partial"); events != 10 {
		t.Fatalf("first count: %v events, want 10", events)
	}
	sink.allow.Store(4) // the bus takes four, then throttles again
	waitFor(t, "four delivered", func() bool { events, _ := r.sample("partial"); return events == 6 })
	r.publish(5)
	if events, _ := r.sample("partial"); events != 11 {
		t.Fatalf("after 5 more: %v events, want 11", events)
	}
	sink.allow.Store(3)
	waitFor(t, "three more delivered", func() bool { events, _ := r.sample("partial"); return events == 8 })
}

func TestLagGaugesHaveOneSeriesPerDestination(t *testing.T) {
	sink := &gateSink{}
	sink.stalled.Store(true)
	r := newRig(t, sink, bus("a"), bus("b"))
	r.publish(4)
	if err := r.s.Sample(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP relay_destination_lag_events Events of the account log after the destination's cursor (before its event filter): how far behind its account's log head it is. Sampled; destinations this replica delivers for.
# TYPE relay_destination_lag_events gauge
relay_destination_lag_events{account="acct_lag",connector="eventbridge",destination="a"} 4
relay_destination_lag_events{account="acct_lag",connector="eventbridge",destination="b"} 4
`
	if err := testutil.GatherAndCompare(r.reg, strings.NewReader(want), "relay_destination_lag_events"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(r.s, "relay_destination_status"); n != 2 {
		t.Fatalf("relay_destination_status: %d series, want one per destination", n)
	}
}

// rejectingSink rejects every write to the destinations it names and takes the others.
type rejectingSink struct{ reject map[string]bool }

func (s rejectingSink) Send(_ context.Context, d destination.Destination, _ destination.Message) error {
	if s.reject[d.ID] {
		return failures.NewRejected("the bus refuses the write", nil)
	}
	return nil
}

// An operator's deliberate disable and one by rejections are told apart on /metrics:
// relay_destination_status{status="disabled"} carries by="operator" or by="rejections"
// (the card's disabled.by), so the alert that pages can be the rejections' alone; the
// others carry no by.
func TestStatusGaugeSaysWhoDisabledTheDestination(t *testing.T) {
	// Its own AWS account: an operator's disable takes the account's others with it.
	off := bus("switched-off")
	off.BusARN, off.RoleARN = "arn:aws:events:us-east-1:444455556666:event-bus/off", "arn:aws:iam::444455556666:role/relay"
	r := newRig(t, rejectingSink{reject: map[string]bool{"rejected": true}}, bus("rejected"), off, bus("fine"))
	if _, err := r.disp.Disable(context.Background(), "switched-off", "the customer asked us to stop"); err != nil {
		t.Fatal(err)
	}
	r.publish(20) // disable_after: 20 rejections in a row
	waitFor(t, "the rejections' disable", func() bool {
		st, err := r.store.LoadState(context.Background(), store.Ref{Account: acct, ID: "rejected"})
		return err == nil && st.Status == store.Disabled
	})
	if err := r.s.Sample(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP relay_destination_status 1 for the destination's current status (active, paused, disabled); by, for disabled, says who disabled it: rejections (disable_after rejected writes in a row) or operator (an admin's disable).
# TYPE relay_destination_status gauge
relay_destination_status{account="acct_lag",by="",connector="eventbridge",destination="fine",status="active"} 1
relay_destination_status{account="acct_lag",by="operator",connector="eventbridge",destination="switched-off",status="disabled"} 1
relay_destination_status{account="acct_lag",by="rejections",connector="eventbridge",destination="rejected",status="disabled"} 1
`
	if err := testutil.GatherAndCompare(r.reg, strings.NewReader(want), "relay_destination_status"); err != nil {
		t.Fatal(err)
	}
}
