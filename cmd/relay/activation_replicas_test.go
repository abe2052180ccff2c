package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/store/storetest"
)

// A pending destination made active delivers at once, on whichever replica holds its
// lease: not at its next scheduled setup check. Each test below runs two replicas whose
// scheduled check is 10 minutes away (delivery.setup_check {initial: 10m}), so only the
// activation itself can start delivery within the 30 s the tests wait. The events
// published while the destination was pending are delivered too: a check that passes,
// or an activation of a pending destination, leaves the cursor at the point the
// destination was added (docs/api.md, the card's `status`; docs/operator-guide.md).

// TestAPendingDestinationTestedOnTheReplicaWithoutTheLeaseDeliversAtOnce: the customer
// fixes the role's trust policy and sends a test through the replica that does not hold
// the destination's lease. The test answers "delivered", and the holder then delivers,
// within seconds, the events that waited while pending and those published after, in
// the publisher's confirmed order.
func TestAPendingDestinationTestedOnTheReplicaWithoutTheLeaseDeliversAtOnce(t *testing.T) {
	pendingMadeActive(t, otherReplica, sendTest)
}

// TestAPendingDestinationTestedOnTheLeaseHolderDeliversAtOnce: the same, with the test
// sent through the replica that holds the lease (its worker waits on its setup check's
// timer when the test passes).
func TestAPendingDestinationTestedOnTheLeaseHolderDeliversAtOnce(t *testing.T) {
	pendingMadeActive(t, leaseHolder, sendTest)
}

// TestAPendingDestinationActivatedOnTheReplicaWithoutTheLeaseDeliversAtOnce: the
// customer fixes the trust policy and an operator activates the destination (no body:
// POST …/activate) through the replica without the lease, instead of a test. The holder
// delivers the events that waited and those published after, in order, within seconds.
func TestAPendingDestinationActivatedOnTheReplicaWithoutTheLeaseDeliversAtOnce(t *testing.T) {
	pendingMadeActive(t, otherReplica, activate)
}

// Which replica the activation is asked of.
const (
	otherReplica = "the replica without the lease"
	leaseHolder  = "the lease holder"
)

// How a pending destination is made active: it returns whether a relay.test event
// was written to the bus.
type activation func(t *testing.T, rs *replicaSet, api string) (wroteTestEvent bool)

// sendTest is "Send a test" with the account's token: it must answer delivered.
func sendTest(t *testing.T, rs *replicaSet, api string) bool {
	t.Helper()
	a := httpPost(t, api+busDest+"/test", replicasAcctToken, "")
	var out struct {
		Outcome string `json:"outcome"`
		Message string `json:"message"`
	}
	if a.status != 200 || json.Unmarshal([]byte(a.body), &out) != nil || out.Outcome != "delivered" {
		t.Fatalf("test: %d %s; want 200 with outcome delivered\n%s", a.status, a.body, rs.logTails())
	}
	return true
}

// activate is an admin's POST …/activate with no body: the card must say active.
func activate(t *testing.T, rs *replicaSet, api string) bool {
	t.Helper()
	a := httpPost(t, api+busDest+"/activate", replicasAdminToken, "")
	var card struct {
		Status string `json:"status"`
	}
	if a.status != 200 || json.Unmarshal([]byte(a.body), &card) != nil || card.Status != "active" {
		t.Fatalf("activate: %d %s; want 200 with the card active\n%s", a.status, a.body, rs.logTails())
	}
	return false
}

// pendingMadeActive runs one case: two replicas, the role not trusted; three events
// published while pending (nothing reaches the bus); the holder's first setup check has
// failed (its next one 10 minutes away). The customer trusts the role, act is asked of
// askOf, five more events are published; within 30 s the bus must hold all eight once
// each, in the publisher's confirmed order, plus the test event if act wrote one.
func pendingMadeActive(t *testing.T, askOf string, act activation) {
	rs := startReplicasWith(t, 2, replicaOptions{setupCheck: "{initial: 10m, max: 15m}", untrusted: true})
	st, err := store.Open(rs.redisURL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()

	// Three events arrive while the role does not trust us yet.
	rs.publish(0, 3, 16)
	waitUntil(t, 30*time.Second, "the three events in the account's log", func() bool {
		return st.Client().XLen(ctx, storetest.LogKey("acct_1")).Val() == 3
	})
	// One replica holds the lease, and its worker ran the first setup check, which
	// failed: the card is pending, its next check 10 minutes away.
	var lease string
	waitUntil(t, 30*time.Second, "a replica holding the lease", func() bool {
		var err error
		lease, err = leaseOf(st, "acct_1", "orders-bus")
		return err == nil && lease != ""
	})
	var card struct {
		Status  string              `json:"status"`
		Pending *store.PendingCheck `json:"pending"`
	}
	waitUntil(t, 30*time.Second, "the card pending, its first setup check failed", func() bool {
		a := httpDo(t, "GET", rs.apis[0]+busDest, replicasAcctToken)
		return a.status == 200 && json.Unmarshal([]byte(a.body), &card) == nil &&
			card.Status == "pending" && card.Pending != nil && card.Pending.Message != ""
	})
	if wait := time.Until(card.Pending.NextCheck); wait < 5*time.Minute {
		t.Fatalf("the next setup check is in %s, want about 10 minutes: a scheduled check could start delivery", wait)
	}
	if n := len(rs.bus.Entries()); n != 0 {
		t.Fatalf("%d entries reached the bus while the destination was pending, want none", n)
	}
	pid := leasePID(t, lease)
	holder := slices.IndexFunc(rs.procs, func(c *exec.Cmd) bool { return c.Process.Pid == pid })
	if holder < 0 {
		t.Fatalf("lease holder %q is neither replica", lease)
	}
	asked := holder
	if askOf == otherReplica {
		asked = 1 - holder
	}

	rs.trustRole() // the customer fixes the trust policy
	// Far below the 10 minutes of the next scheduled check.
	const bound = 30 * time.Second
	start := time.Now()
	wantTests := 0
	if act(t, rs, rs.apis[asked]) {
		wantTests = 1
	}
	rs.publish(3, 8, 16)
	want := rs.confirmedIDs()
	if len(want) != 8 {
		t.Fatalf("%d of 8 publishes confirmed", len(want))
	}

	var events []string
	var tests int
	read := func() {
		events, tests = nil, 0
		for _, e := range rs.bus.Entries() {
			if e.DetailType == "relay.test" {
				tests++
				continue
			}
			var body struct {
				EventID string `json:"event_id"`
			}
			if err := json.Unmarshal([]byte(e.Detail), &body); err != nil {
				t.Fatalf("detail %q: %v", e.Detail, err)
			}
			events = append(events, body.EventID)
		}
	}
	for read(); len(events) < len(want) || tests < wantTests; read() {
		if time.Since(start) > bound {
			t.Fatalf("%s after the activation asked of %s (relay %d), the bus holds %d of the %d events and %d of %d test events; want all of them (3 published while pending, 5 after)\n%s",
				bound, askOf, asked, len(events), len(want), tests, wantTests, rs.logTails())
		}
		time.Sleep(20 * time.Millisecond) // polling the bus between reads
	}
	t.Logf("all %d events at the bus %s after the activation asked of %s", len(want), time.Since(start).Round(time.Millisecond), askOf)
	if !slices.Equal(events, want) || tests != wantTests {
		t.Fatalf("the bus received events %v and %d test events; want, once each and in the publisher's confirmed order, %v and %d test events\n%s",
			events, tests, want, wantTests, rs.logTails())
	}
	a := httpDo(t, "GET", rs.apis[1-asked]+busDest, replicasAcctToken)
	if err := json.Unmarshal([]byte(a.body), &card); a.status != 200 || err != nil || card.Status != "active" {
		t.Fatalf("the card on the other replica: %d %s; want active", a.status, a.body)
	}
}
