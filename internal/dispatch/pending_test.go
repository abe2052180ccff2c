package dispatch

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mercamap/relay/internal/assume"
	"github.com/mercamap/relay/internal/awstest"
	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/failures"
	"github.com/mercamap/relay/internal/sinks/eventbridge"
	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/store/storetest"
)

// TestPendingDestinationDeliversWhatArrivedBeforeItsRoleExistedOnceTheTrustPolicyIsSet:
// a bus is added by config before the customer created its role. It starts pending; 30
// events arrive while STS denies the role and the setup check keeps failing, far more
// often than the STS budget lets through: it is never disabled, nothing counts, and the
// card keeps saying what the customer must fix (the trust policy), never the relay's own
// pacing. Once the trust policy is in place the next check makes it active and the 30
// arrive, in publish order, then new ones.
func TestPendingDestinationDeliversWhatArrivedBeforeItsRoleExistedOnceTheTrustPolicyIsSet(t *testing.T) {
	budget := config.STSBudget{PerDestination: config.Rate{Count: 4, Per: 4 * time.Second}, PerAccount: config.Rate{Count: 8, Per: 4 * time.Second}}
	sts, eb, sink := eventBridgeBehindSTSWith(t, budget)

	dest := bus("orders", "111122223333")
	dest.PinnedExternalID = "ext-pending-1"
	r := newRig(t, newTestSink(nil), dest)
	r.d.opts.Sinks[destination.EventBridge] = sink
	if st := r.state("orders"); st.Status != store.Pending {
		t.Fatalf("a destination added by config is %s, want pending", st.Status)
	}
	started := time.Now()
	r.start()
	before := r.publish(slices.Repeat([]string{"job.completed"}, 30)...)
	// Checks are due every 10 to 40 ms; the budget lets one through every 2 s, so most
	// are held back by it, and the card's sentence must outlast them.
	waitFor(t, "the budget spent twice over by failing checks", func() bool { return len(sts.Requests()) >= 8 })
	st := r.state("orders")
	if st.Status != store.Pending || st.ConsecutiveFailures != 0 || len(eb.Entries()) != 0 {
		t.Fatalf("while the role is missing: %s, %d in a row, %d written; want pending, 0, 0",
			st.Status, st.ConsecutiveFailures, len(eb.Entries()))
	}
	if st.Pending == nil || !strings.Contains(st.Pending.Message, "AWS refused to let the relay assume role") ||
		!strings.Contains(st.Pending.Message, "trust policy") || !strings.Contains(st.Pending.Message, dest.PinnedExternalID) ||
		strings.Contains(st.Pending.Message, "paces") {
		t.Fatalf("the card's pending after the budget held checks back: %+v; want the trust policy's refusal, with the ExternalId", st.Pending)
	}
	if !st.Pending.NextCheck.After(st.Pending.At) {
		t.Errorf("the card's next check %s is not after its last (%s): it says when the next check runs", st.Pending.NextCheck, st.Pending.At)
	}
	elapsed := time.Since(started)
	if n, most := len(sts.Requests()), budget.PerDestination.Count+int(float64(budget.PerDestination.Count)*elapsed.Seconds()/budget.PerDestination.Per.Seconds()); n > most {
		t.Errorf("STS saw %d calls in %s, want at most the budget's %d", n, elapsed.Round(time.Millisecond), most)
	}
	t.Logf("the card says: %s", st.Pending.Message)

	// The customer creates the role with the trust policy the card asks for.
	sts.RequireExternalID(dest.RoleARN, dest.PinnedExternalID)
	waitFor(t, "the 30 events on the bus", func() bool { return len(eb.Entries()) >= 30 })
	after := r.publish("job.completed", "job.completed")
	waitFor(t, "the new events", func() bool { return len(eb.Entries()) >= 32 })
	got, err := eb.EventIDs(dest.BusARN)
	if err != nil {
		t.Fatal(err)
	}
	if want := slices.Concat(before, after); !slices.Equal(got, want) {
		t.Fatalf("the bus got %v, want the 30 in publish order, then the 2 new ones", got)
	}
	if st := r.state("orders"); st.Status != store.Active || st.Pending != nil || st.ConsecutiveFailures != 0 {
		t.Fatalf("after the check passed: %+v, want active", st)
	}
	types := r.channelTypes(store.DestinationChannel("orders"))
	if countIn(types, "destination.disabled") != 0 || countIn(types, "destination.activated") != 1 {
		t.Errorf("channel %v: want one destination.activated and no destination.disabled", types)
	}
	for _, n := range r.outbox() {
		t.Errorf("operator event %s in the outbox; a pending destination warns and disables no one", n.Type)
	}
}

// TestPendingDestinationIsCheckedLessOftenWhileItFails: the setup check backs off
// (delivery.setup_check), so a customer who never creates the role costs few STS calls.
func TestPendingDestinationIsCheckedLessOftenWhileItFails(t *testing.T) {
	sink := &checkingSink{testSink: newTestSink(nil), checkErr: failures.NewRejected("the role cannot be assumed", nil)}
	r := newRig(t, sink.testSink, bus("orders", "111122223333"))
	r.d.opts.Sinks[destination.EventBridge] = sink
	r.d.opts.Delivery.SetupCheck.Initial, r.d.opts.Delivery.SetupCheck.Max = 20*time.Millisecond, 320*time.Millisecond
	r.start()
	waitFor(t, "five checks", func() bool { return sink.checks.Load() >= 5 }) // at about 0, 20, 60, 140, 300 ms
	st := r.state("orders")
	if st.Pending == nil || !strings.Contains(st.Pending.Message, "cannot be assumed") {
		t.Fatalf("card's pending: %+v, want the check's sentence", st.Pending)
	}
	gap := st.Pending.NextCheck.Sub(st.Pending.At)
	if gap < 160*time.Millisecond {
		t.Errorf("the fifth check was followed by a wait of %s; want it doubled to at least 160ms", gap)
	}
}

// TestPendingDestinationWhoseRoleLetsAWrongExternalIDInIsMarkedRefusedForSecurity: the
// customer's trust policy matches relay-* instead of the card's ExternalId, so the probe
// with a wrong one is let in. The destination stays pending and nothing is written, but
// the card's pending says security and the reason's code (a status-only view must not
// show it as "being set up"), and relay_setup_refused_total counts it. Once the policy
// names the exact id the destination goes active and the mark is gone.
func TestPendingDestinationWhoseRoleLetsAWrongExternalIDInIsMarkedRefusedForSecurity(t *testing.T) {
	sts, eb, sink := eventBridgeBehindSTS(t)

	dest := bus("orders", "111122223333")
	dest.PinnedExternalID = "relay-0123456789abcdef0123456789abcdef"
	if err := sts.SetTrustPolicy(dest.RoleARN, `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":"`+
		awstest.CallerARN+`"},"Action":"sts:AssumeRole","Condition":{"StringLike":{"sts:ExternalId":"relay-*"}}}]}`); err != nil {
		t.Fatal(err)
	}
	r := newRig(t, newTestSink(nil), dest)
	r.d.opts.Sinks[destination.EventBridge] = sink
	r.start()
	r.publish("job.completed")
	waitFor(t, "the card's pending marked as a security refusal", func() bool {
		p := r.state("orders").Pending
		return p != nil && p.Security
	})
	st := r.state("orders")
	if st.Status != store.Pending || st.Pending.Reason != failures.ReasonExternalIDNotEnforced ||
		!strings.Contains(st.Pending.Message, "let the relay in with a wrong ExternalId") || len(eb.Entries()) != 0 {
		t.Fatalf("status %s, pending %+v, %d written: want pending, reason %s with the sentence, nothing written",
			st.Status, st.Pending, len(eb.Entries()), failures.ReasonExternalIDNotEnforced)
	}
	if n := testutil.ToFloat64(r.d.opts.Metrics.SetupRefused.WithLabelValues(failures.ReasonExternalIDNotEnforced)); n < 1 {
		t.Errorf("relay_setup_refused_total{reason=external_id_not_enforced} = %v, want it counted", n)
	}
	if n := testutil.ToFloat64(r.d.opts.Metrics.SetupRefused.WithLabelValues("setup_incomplete")); n != 0 {
		t.Errorf("relay_setup_refused_total{reason=setup_incomplete} = %v, want 0: this refusal is for security", n)
	}
	// A follower reading the channel sees it too: the next check's event names the reason
	// and carries the marked card state.
	var seen, inState bool
	waitFor(t, "a destination.checked event with the reason and the marked card state", func() bool {
		page, err := r.store.ReadChannel(t.Context(), acct, store.DestinationChannel("orders"), 0, 100000)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range page.Events {
			if ev.Type != "destination.checked" {
				continue
			}
			var data struct {
				Reason string `json:"reason"`
				State  struct {
					Pending *store.PendingCheck `json:"pending"`
				} `json:"state"`
			}
			if err := json.Unmarshal(ev.Data, &data); err != nil {
				t.Fatal(err)
			}
			seen = seen || data.Reason == failures.ReasonExternalIDNotEnforced
			inState = inState || (data.State.Pending != nil && data.State.Pending.Security)
		}
		return seen && inState
	})

	// The customer names the exact ExternalId: the next check passes.
	sts.RequireExternalID(dest.RoleARN, dest.PinnedExternalID)
	waitFor(t, "the event on the bus", func() bool { return len(eb.Entries()) >= 1 })
	if st := r.state("orders"); st.Status != store.Active || st.Pending != nil {
		t.Fatalf("after the fix: %s, pending %+v; want active, no pending", st.Status, st.Pending)
	}
	h, err := r.store.Client().HGet(t.Context(), storetest.DestKey(acct, "orders"), "pending_reason").Result()
	if err == nil {
		t.Errorf("pending_reason %q left on an active destination", h)
	}
}

// eventBridgeBehindSTS is an EventBridge that takes only writes signed with a session
// of its STS, and the real sink reaching both as the relay's principal.
func eventBridgeBehindSTS(t *testing.T) (*awstest.STS, *awstest.EventBridge, *eventbridge.Sink) {
	t.Helper()
	return eventBridgeBehindSTSWith(t, config.STSBudget{})
}

// eventBridgeBehindSTSWith is eventBridgeBehindSTS with an STS budget (zero: the default).
func eventBridgeBehindSTSWith(t *testing.T, budget config.STSBudget) (*awstest.STS, *awstest.EventBridge, *eventbridge.Sink) {
	t.Helper()
	sts := awstest.NewSTS(t)
	eb := awstest.NewEventBridge(t)
	eb.RequireSessionFrom(sts)
	ours := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("AKIDOURS", "ours", "")}
	a := assume.New(assume.Options{STS: assume.NewSTSClient(ours, sts.URL), IdentityName: "mercamap", Budget: budget})
	return sts, eb, eventbridge.New(eventbridge.Options{AWS: ours, Assumer: a, IdentityName: "mercamap", Endpoint: eb.URL})
}
