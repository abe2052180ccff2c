package dispatch

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/failures"
	"github.com/mercamap/relay/internal/store"
)

func TestReplayFromAnHourBackDeliversEveryEventAgainInOrderThenLiveOnes(t *testing.T) {
	sink := newTestSink(nil)
	r := newRig(t, sink, bus("orders", "111122223333"))
	r.start()
	ids := r.publish(slices.Repeat([]string{"job.completed"}, 1000)...)
	waitFor(t, "1,000 deliveries", func() bool { return len(sink.got("orders")) == 1000 })

	ctx := context.Background()
	res, err := r.d.Replay(ctx, "orders", store.ReplayPoint{From: time.Now().Add(-time.Hour)})
	if err != nil || res.Pending {
		t.Fatalf("replay: %+v, %v", res, err)
	}
	waitFor(t, "the 1,000 again", func() bool { return len(sink.got("orders")) >= 2000 })
	live := r.publish("job.completed", "job.completed")
	waitFor(t, "the live events", func() bool { return len(sink.got("orders")) >= 2002 })
	want := slices.Concat(ids, ids, live)
	if got := sink.got("orders"); !slices.Equal(got, want) {
		t.Fatalf("delivered %d events; want the 1,000, the 1,000 again in order, then the 2 live ones", len(got))
	}
	if n := countIn(r.channelTypes(store.DestinationChannel("orders")), "destination.replayed"); n != 1 {
		t.Errorf("%d destination.replayed channel events, want 1", n)
	}
	log, err := r.store.Attempts(ctx, store.Ref{Account: acct, ID: "orders"}, 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	replayed := 0
	for _, a := range log {
		if a.Outcome == "replayed" {
			replayed++
		}
	}
	if replayed != 1 {
		t.Errorf("%d replay lines in the attempt log, want 1", replayed)
	}

	// Older than the log keeps: refused, naming the oldest point still replayable.
	_, err = r.d.Replay(ctx, "orders", store.ReplayPoint{From: time.Now().Add(-3 * time.Hour)})
	var tooOld store.ErrTooOld
	if !errors.As(err, &tooOld) || tooOld.Oldest.Before(time.Now().Add(-2*time.Hour)) || tooOld.Oldest.After(time.Now().Add(-119*time.Minute)) {
		t.Fatalf("replay 3 h back with 2 h kept: %v, want ErrTooOld naming about 2 h back", err)
	}
}

func TestReplayAfterAnEventOnAPausedDestinationStartsWhenActivated(t *testing.T) {
	sink := newTestSink(nil)
	r := newRig(t, sink, bus("orders", "111122223333"))
	r.start()
	ids := r.publish(slices.Repeat([]string{"job.completed"}, 10)...)
	waitFor(t, "10 deliveries", func() bool { return len(sink.got("orders")) == 10 })
	ctx := context.Background()
	if _, err := r.d.Pause(ctx, "orders", false); err != nil {
		t.Fatal(err)
	}
	res, err := r.d.Replay(ctx, "orders", store.ReplayPoint{AfterEvent: ids[6]})
	if err != nil || !res.Pending {
		t.Fatalf("replay on a paused destination: %+v, %v; want pending", res, err)
	}
	whilePaused := r.publish("job.completed")
	if got := len(sink.got("orders")); got != 10 {
		t.Fatalf("%d deliveries while paused, want 10", got)
	}
	if _, err := r.d.Activate(ctx, "orders", false); err != nil {
		t.Fatal(err)
	}
	want := slices.Concat(ids, ids[7:], whilePaused)
	waitFor(t, "the replay after activation", func() bool { return len(sink.got("orders")) >= len(want) })
	if got := sink.got("orders"); !slices.Equal(got, want) {
		t.Fatalf("delivered %v, want %v", got, want)
	}
	if _, err := r.d.Replay(ctx, "orders", store.ReplayPoint{AfterEvent: "fetcher.never.sent"}); !errors.Is(err, store.ErrNoSuchEvent) {
		t.Fatalf("replay after an unknown event: %v, want ErrNoSuchEvent", err)
	}
}

func TestActivateSinceDisabledSendsWhatArrivedWhileDisabledInOrder(t *testing.T) {
	for _, since := range []string{store.SinceDisabled, ""} {
		t.Run("since="+since, func(t *testing.T) {
			var reject atomic.Bool
			reject.Store(true)
			sink := newTestSink(func(string, destination.Message, int) error {
				if reject.Load() {
					return failures.NewRejected("AccessDenied: the role does not trust our principal", nil)
				}
				return nil
			})
			r := newRig(t, sink, bus("orders", "111122223333"))
			r.start()
			r.publish(slices.Repeat([]string{"job.completed"}, 20)...)
			waitFor(t, "the destination disabled", func() bool { return r.state("orders").Status == store.Disabled })
			missed := r.publish(slices.Repeat([]string{"job.completed"}, 30)...)
			reject.Store(false) // the customer fixed the role
			if _, err := r.d.ActivateSince(context.Background(), "orders", false, since); err != nil {
				t.Fatal(err)
			}
			fresh := r.publish("job.completed", "job.completed")
			waitFor(t, "the new events", func() bool { return slices.Contains(sink.got("orders"), fresh[1]) })
			want := fresh
			if since != "" {
				want = slices.Concat(missed, fresh)
			}
			if got := sink.got("orders"); !slices.Equal(got, want) {
				t.Fatalf("delivered %v, want %v", got, want)
			}
		})
	}
}

func TestWarningsAtFiveAndFifteenOnceEachAndADeliveryStartsARunAnew(t *testing.T) {
	var reject atomic.Bool
	reject.Store(true)
	sink := newTestSink(func(string, destination.Message, int) error {
		if reject.Load() {
			return failures.NewRejected("AccessDeniedException: the role may not call events:PutEvents", nil)
		}
		return nil
	})
	r := newRig(t, sink, bus("orders", "111122223333"))
	r.start()
	failing := func() []store.OperatorEvent {
		var out []store.OperatorEvent
		for _, ev := range r.outbox() {
			if ev.Type == "destination.failing" {
				out = append(out, ev)
			}
		}
		return out
	}

	// 7 rejections, a delivery, then 17: warnings at 5 (first run), 5 and 15 (second).
	r.publish(slices.Repeat([]string{"job.completed"}, 7)...)
	waitFor(t, "7 rejections", func() bool { return r.state("orders").ConsecutiveFailures == 7 })
	if st := r.state("orders"); st.Failing == nil || st.Failing.ConsecutiveFailures != 5 || st.Failing.RejectionsLeft != 15 {
		t.Fatalf("card failing after 7 rejections = %+v, want the warning at 5 with 15 left", st.Failing)
	}
	reject.Store(false)
	ok := r.publish("job.completed")
	waitFor(t, "the delivery", func() bool { return slices.Contains(sink.got("orders"), ok[0]) })
	// The bus has it before Redis has its outcome: wait for the commit.
	waitFor(t, "the delivery committed", func() bool { return r.state("orders").ConsecutiveFailures == 0 })
	if st := r.state("orders"); st.Failing != nil {
		t.Fatalf("card failing after a delivery = %+v, want none", st.Failing)
	}
	reject.Store(true)
	r.publish(slices.Repeat([]string{"job.completed"}, 17)...)
	waitFor(t, "17 rejections", func() bool { return r.state("orders").ConsecutiveFailures == 17 })

	var got []int
	for _, ev := range failing() {
		got = append(got, ev.ConsecutiveFailures)
		if ev.RejectionsLeft != 20-ev.ConsecutiveFailures || ev.LastFailure == nil ||
			ev.LastFailure.Message != "AccessDeniedException: the role may not call events:PutEvents" || ev.Destination != "orders" {
			t.Errorf("destination.failing = %+v", ev)
		}
	}
	if !slices.Equal(got, []int{5, 5, 15}) {
		t.Fatalf("destination.failing at %v rejections in a row, want [5 5 15]", got)
	}
	if st := r.state("orders"); st.Status != store.Active || st.Failing == nil || st.Failing.RejectionsLeft != 5 {
		t.Fatalf("state after 17 = %+v, want active with 5 rejections left on the card", st)
	}
	waitFor(t, "the drainer nudged", func() bool { return r.nudges.n.Load() > 0 })
}
