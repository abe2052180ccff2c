package dispatch

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/mercamap/relay/internal/assume"
	"github.com/mercamap/relay/internal/awstest"
	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/failures"
	kinesissink "github.com/mercamap/relay/internal/sinks/kinesis"
	"github.com/mercamap/relay/internal/store"
)

// expiredToken is the bus's answer to a write signed with a session past its expiry.
var expiredToken = awstest.Failure{Status: 400, Code: "ExpiredTokenException", Message: "The security token included in the request is expired"}

// withoutPut is a permissions policy that trusts nothing to write: the role may describe
// buses and streams, but neither events:PutEvents nor kinesis:PutRecord.
const withoutPut = `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["events:DescribeEventBus","kinesis:DescribeStream"],"Resource":"*"}]}`

// TestEverySessionFollowsItsOwnDeniedProbe is the check of "a probe before each new
// session", from STS's own call log. Two destinations, each naming its own role, go
// through every path that makes or keeps a session: the setup check, deliveries, a
// write the bus answers ExpiredTokenException (the session is dropped: a new one), writes
// refused with AccessDeniedException, injected and by a role that really lacks
// events:PutEvents, up to a disable by 20 of them (the session is kept: no STS call),
// a re-activation after that disable (the kept session writes) followed by an expired
// session (a new one), and "Send a test" (a new one). In the log of each role, every
// session granted with the destination's ExternalId comes right after a request for the
// same role that STS refused, made with another ExternalId (a fresh one each time), the
// same RoleSessionName and the deny-all session policy: no session was ever made without
// its own probe, however recent the last one.
func TestEverySessionFollowsItsOwnDeniedProbe(t *testing.T) {
	sts, eb, sink := eventBridgeBehindSTS(t) // the default STS budget: 16 calls a minute per destination
	orders, audit := bus("orders", "111122223333"), bus("audit", "444455556666")
	orders.PinnedExternalID, orders.Events = "ext-orders-1", []string{"job.completed"}
	audit.PinnedExternalID, audit.Events = "ext-audit-1", []string{"job.failed"} // one type each: one writer at a time
	dests := []destination.Destination{orders, audit}
	for _, d := range dests {
		sts.RequireExternalID(d.RoleARN, d.PinnedExternalID)
	}
	r := newRig(t, newTestSink(nil), dests...)
	r.d.opts.Sinks[destination.EventBridge] = sink
	ctx := context.Background()

	// The outside truth: STS's log for a role, the sessions it granted with the real
	// ExternalId, and the key that signed each entry on the bus.
	calls := func(d destination.Destination) int { return sts.Calls()[d.RoleARN] }
	sessions := func(d destination.Destination) []awstest.AssumeRoleRequest {
		var out []awstest.AssumeRoleRequest
		for _, q := range sts.Requests() {
			if q.RoleARN == d.RoleARN && q.Granted && q.ExternalID == d.PinnedExternalID {
				out = append(out, q)
			}
		}
		return out
	}
	lastKey := func(d destination.Destination) string { s := sessions(d); return s[len(s)-1].AccessKeyID }
	signer := func(d destination.Destination, eventID string) (string, bool) {
		for _, e := range eb.Entries() {
			var body struct {
				EventID string `json:"event_id"`
			}
			if e.EventBusName == d.BusARN && json.Unmarshal([]byte(e.Detail), &body) == nil && body.EventID == eventID {
				return e.AccessKeyID, true
			}
		}
		return "", false
	}
	arrive := func(d destination.Destination, what string, ids ...string) {
		t.Helper()
		waitFor(t, what, func() bool {
			for _, id := range ids {
				if _, ok := signer(d, id); !ok {
					return false
				}
			}
			return true
		})
	}
	signedBy := func(d destination.Destination, key, what string, ids ...string) {
		t.Helper()
		for _, id := range ids {
			if got, _ := signer(d, id); got != key {
				t.Errorf("%s: %s %s was signed with %s, want the session %s", d.ID, what, id, got, key)
			}
		}
	}
	made := map[string]int{} // path → sessions STS granted with the real ExternalId through it
	count := func(path string, d destination.Destination, before, want int) {
		t.Helper()
		got := len(sessions(d)) - before
		made[path] += got
		if got != want {
			t.Errorf("%s: %d new sessions through %s, want %d", d.ID, got, path, want)
		}
	}

	// The setup check: each pending destination's probe and session make it active.
	r.start()
	waitFor(t, "both destinations active", func() bool {
		return r.state(orders.ID).Status == store.Active && r.state(audit.ID).Status == store.Active
	})
	for _, d := range dests {
		if got := r.state(d.ID).ExternalID; got != d.PinnedExternalID {
			t.Fatalf("%s: ExternalId %q, want the pinned %q", d.ID, got, d.PinnedExternalID)
		}
		count("the setup check", d, 0, 1)
	}

	// Deliveries reuse the session.
	before := map[string]int{orders.ID: calls(orders), audit.ID: calls(audit)}
	ids := r.publish("job.completed", "job.failed", "job.completed", "job.failed")
	arrive(orders, "orders' deliveries", ids[0], ids[2])
	arrive(audit, "audit's deliveries", ids[1], ids[3])
	for _, d := range dests {
		if n := calls(d) - before[d.ID]; n != 0 {
			t.Errorf("%s: %d STS calls for two deliveries on a live session, want 0", d.ID, n)
		}
	}
	signedBy(orders, lastKey(orders), "delivery", ids[0], ids[2])
	signedBy(audit, lastKey(audit), "delivery", ids[1], ids[3])

	// An expired session is dropped: the write is not taken, and its retry takes a new
	// session, probe first.
	for _, c := range []struct {
		d   destination.Destination
		typ string
	}{{orders, "job.completed"}, {audit, "job.failed"}} {
		n := len(sessions(c.d))
		eb.FailNext(1, expiredToken)
		id := r.publish(c.typ)
		arrive(c.d, c.d.ID+"'s event after an expired session", id...)
		count("ExpiredTokenException", c.d, n, 1)
		signedBy(c.d, lastKey(c.d), "the retry after ExpiredTokenException", id...)
		if n := countIn(r.channelTypes(store.DestinationChannel(c.d.ID)), "delivery.not_taken"); n != 1 {
			t.Errorf("%s: %d delivery.not_taken, want 1 (the write with the expired session)", c.d.ID, n)
		}
	}

	// Writes the bus refuses with AccessDeniedException keep the session: three
	// rejections, then a delivery on the same session, and no STS call.
	n, c, key := len(sessions(orders)), calls(orders), lastKey(orders)
	eb.FailNext(3, awstest.AccessDeniedException)
	r.publish("job.completed", "job.completed", "job.completed")
	waitFor(t, "orders' three rejections", func() bool { return r.state(orders.ID).ConsecutiveFailures == 3 })
	ok := r.publish("job.completed")
	arrive(orders, "orders' delivery after three AccessDeniedException", ok...)
	count("AccessDeniedException", orders, n, 0)
	if got := calls(orders) - c; got != 0 {
		t.Errorf("orders: %d STS calls for three writes refused with AccessDeniedException and a delivery, want 0", got)
	}
	signedBy(orders, key, "the delivery after three AccessDeniedException", ok...)

	// The audit role really lacks events:PutEvents: 20 refused writes disable it, on one
	// session. The customer fixes the policy and re-activates: the kept session writes.
	n, c, key = len(sessions(audit)), calls(audit), lastKey(audit)
	sts.SetPermissionsPolicy(audit.RoleARN, withoutPut)
	r.publish(slices.Repeat([]string{"job.failed"}, 20)...)
	// Waited for until disabled, or until STS sees a call: a session per refused write
	// is decided wrong at its first call (and the STS budget would hold the writes back).
	waitFor(t, "audit disabled by the rejections", func() bool {
		return r.state(audit.ID).Status == store.Disabled || calls(audit) != c
	})
	if got := calls(audit) - c; got != 0 {
		t.Fatalf("audit: %d STS calls for writes its role's permissions refused, want 0", got)
	}
	sts.SetPermissionsPolicy(audit.RoleARN, `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"events:PutEvents","Resource":"`+audit.BusARN+`"}]}`)
	if _, err := r.d.Activate(ctx, audit.ID, false); err != nil {
		t.Fatal(err)
	}
	ok = r.publish("job.failed")
	arrive(audit, "audit's delivery after its re-activation", ok...)
	count("the disable and re-activation", audit, n, 0)
	signedBy(audit, key, "the delivery after the re-activation", ok...)
	// The re-activated destination's session expires: the next is made, probe first.
	n = len(sessions(audit))
	eb.FailNext(1, expiredToken)
	ok = r.publish("job.failed")
	arrive(audit, "audit's event after an expired session, re-activated", ok...)
	count("ExpiredTokenException after the re-activation", audit, n, 1)
	signedBy(audit, lastKey(audit), "the retry after the re-activation's expired session", ok...)

	// "Send a test" walks the whole path: a fresh probe and session, then the test write.
	for _, d := range dests {
		n := len(sessions(d))
		out, err := r.d.Test(ctx, d.ID)
		if err != nil || out.Class != failures.Delivered {
			t.Fatalf("%s: send a test = %+v, %v; want delivered", d.ID, out, err)
		}
		count("send a test", d, n, 1)
		var test []awstest.Entry
		for _, e := range eb.Entries() {
			if e.EventBusName == d.BusARN && e.DetailType == destination.TestType {
				test = append(test, e)
			}
		}
		if len(test) != 1 || test[0].AccessKeyID != lastKey(d) {
			t.Errorf("%s: test entries on the bus %+v, want one signed with the test's new session %s", d.ID, test, lastKey(d))
		}
	}

	// STS's log, role by role: each session right after its own refused probe.
	reqs := sts.Requests()
	total := 0
	for _, d := range dests {
		var log []awstest.AssumeRoleRequest
		for _, q := range reqs {
			if q.RoleARN == d.RoleARN {
				log = append(log, q)
			}
		}
		probes := map[string]bool{}
		for i, q := range log {
			if q.Granted && q.ExternalID != d.PinnedExternalID {
				t.Errorf("%s: STS granted request %d, made with ExternalId %q, which is not the destination's", d.ID, i, q.ExternalID)
			}
			if !q.Granted || q.ExternalID != d.PinnedExternalID {
				continue
			}
			total++
			if i == 0 {
				t.Errorf("%s: session %s is the role's first request: no probe before it", d.ID, q.AccessKeyID)
				continue
			}
			p := log[i-1]
			switch {
			case p.Granted:
				t.Errorf("%s: session %s (request %d) follows a granted request (%s, ExternalId %q), not a refused probe",
					d.ID, q.AccessKeyID, i, p.AccessKeyID, p.ExternalID)
			case p.ExternalID == d.PinnedExternalID:
				t.Errorf("%s: session %s (request %d) follows a refused request with the real ExternalId, not a probe", d.ID, q.AccessKeyID, i)
			case p.RoleSessionName != q.RoleSessionName:
				t.Errorf("%s: session %s is named %q, its probe %q: a trust policy could tell them apart",
					d.ID, q.AccessKeyID, q.RoleSessionName, p.RoleSessionName)
			case p.Policy != destination.DenyAllPolicy():
				t.Errorf("%s: the probe before session %s had session policy %s, want the deny-all %s",
					d.ID, q.AccessKeyID, p.Policy, destination.DenyAllPolicy())
			case probes[p.ExternalID]:
				t.Errorf("%s: the probe before session %s reused the wrong ExternalId %q: each probe's is fresh", d.ID, q.AccessKeyID, p.ExternalID)
			}
			probes[p.ExternalID] = true
		}
	}
	if want := 7; total != want { // orders: setup, expired, test; audit: setup, expired, expired after re-activation, test
		t.Errorf("%d sessions in STS's log, want %d", total, want)
	}
	for _, path := range []string{"the setup check", "ExpiredTokenException", "ExpiredTokenException after the re-activation", "send a test"} {
		if made[path] == 0 {
			t.Errorf("no session was made through %s: the check above saw none of them", path)
		}
	}
	t.Logf("sessions by path: %v; STS calls: %v", made, sts.Calls())
}

// TestARoleWithoutThePutPermissionIsDisabledByTwentyRejectionsOnOneSession: a role
// that trusts us with the destination's ExternalId, but whose permissions policy lacks
// the one write (events:PutEvents, kinesis:PutRecord). 25 events arrive; the bus or
// stream refuses 20 writes with AccessDeniedException, all signed with one session,
// which STS made once, after its one probe: no STS call per refused write. The card
// warns at 5 and 15 (destination.failing to the operator events), is disabled by the
// rejections (destination.disabled after exactly 20 delivery.rejected) and says, as its
// last failure, that the role's permissions refused the write.
func TestARoleWithoutThePutPermissionIsDisabledByTwentyRejectionsOnOneSession(t *testing.T) {
	ours := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("AKIDOURS", "ours", "")}
	t.Run("eventbridge", func(t *testing.T) {
		sts, eb, sink := eventBridgeBehindSTS(t)
		d := bus("orders", "111122223333")
		d.PinnedExternalID = "ext-orders-nowrite"
		r := newRig(t, newTestSink(nil), d)
		r.d.opts.Sinks[destination.EventBridge] = sink
		// The bus logs no key for a write it refused: only how many it received.
		disabledOnOneSession(t, r, sts, d, func() []string { return make([]string, eb.Requests()) },
			func() int { return len(eb.Entries()) })
	})
	t.Run("kinesis", func(t *testing.T) {
		kinesalite := awstest.StartKinesalite(t)
		awstest.CreateStream(t, kinesalite, "orders")
		sts := awstest.NewSTS(t)
		proxy := awstest.NewFaultProxy(t, kinesalite)
		proxy.RequireSessionFrom(sts)
		a := assume.New(assume.Options{STS: assume.NewSTSClient(ours, sts.URL), IdentityName: "mercamap"})
		sink := kinesissink.New(kinesissink.Options{AWS: ours, Assumer: a, Endpoint: proxy.URL})
		d := destination.Destination{ID: "stream", Account: acct, Connector: destination.Kinesis,
			StreamARN: "arn:aws:kinesis:us-east-1:111122223333:stream/orders", RoleARN: "arn:aws:iam::111122223333:role/relay",
			PinnedExternalID: "ext-stream-nowrite"}
		r := newRig(t, newTestSink(nil), d)
		r.d.opts.Sinks[destination.Kinesis] = sink
		disabledOnOneSession(t, r, sts, d, func() (writes []string) {
			for _, c := range proxy.Calls() {
				if c.Operation == "PutRecord" {
					writes = append(writes, c.AccessKeyID)
				}
			}
			return writes
		}, func() int {
			n := 0
			for _, c := range proxy.Calls() {
				if c.Operation == "PutRecord" && !c.Failed {
					n++
				}
			}
			return n
		})
	})
}

// disabledOnOneSession runs the second test on d, r's one destination, behind sts:
// writes are the signing keys of the writes the bus or stream received ("" where it
// does not log them), taken how many of them it took.
func disabledOnOneSession(t *testing.T, r *rig, sts *awstest.STS, d destination.Destination,
	writes func() []string, taken func() int) {
	t.Helper()
	sts.RequireExternalID(d.RoleARN, d.PinnedExternalID) // the trust policy is right
	sts.SetPermissionsPolicy(d.RoleARN, withoutPut)      // the permissions lack the write
	r.start()
	r.publish(slices.Repeat([]string{"job.completed"}, 25)...)
	// STS's log for the role: one probe, then one session.
	stsLog := func() []awstest.AssumeRoleRequest {
		var log []awstest.AssumeRoleRequest
		for _, q := range sts.Requests() {
			if q.RoleARN == d.RoleARN {
				log = append(log, q)
			}
		}
		return log
	}
	// Waited for until disabled, or until STS sees a third call: a session per refused
	// write is decided wrong there (and the STS budget would hold the writes back, not
	// taken and not counted, so the disable would never come).
	waitFor(t, "the destination disabled", func() bool { return r.state(d.ID).Status == store.Disabled || len(stsLog()) > 2 })
	log := stsLog()
	if len(log) != 2 || log[0].Granted || log[0].Policy != destination.DenyAllPolicy() || log[0].ExternalID == d.PinnedExternalID ||
		!log[1].Granted || log[1].ExternalID != d.PinnedExternalID {
		var seen []string
		for _, q := range log {
			seen = append(seen, fmt.Sprintf("{ExternalId %s, granted %v %s}", q.ExternalID, q.Granted, q.AccessKeyID))
		}
		t.Errorf("STS saw %d calls for the role: %v; want 2, a refused probe and one session, for the 20 refused writes", len(log), seen)
	}

	st := r.state(d.ID)
	if st.Disabled == nil || st.Disabled.By != store.DisabledByRejections || st.ConsecutiveFailures != 20 {
		t.Errorf("disabled %+v after %d in a row, want by %q after 20", st.Disabled, st.ConsecutiveFailures, store.DisabledByRejections)
	}
	if f := st.LastFailure; f == nil || f.Class != string(failures.Rejected) ||
		!strings.Contains(f.Message, "the role's permissions do not allow it") || !strings.Contains(f.Message, "check the role's permissions policy") {
		t.Errorf("the card's last failure = %+v, want a rejection saying the role's permissions refused the write", st.LastFailure)
	}

	types := r.channelTypes(store.DestinationChannel(d.ID))
	at := slices.Index(types, "destination.disabled")
	if at < 0 || countIn(types[:at], "delivery.rejected") != 20 || countIn(types, "delivery.rejected") != 20 ||
		countIn(types, "delivery.succeeded")+countIn(types, "delivery.not_taken") != 0 || countIn(types, "destination.disabled") != 1 {
		t.Errorf("channel %v: want exactly 20 delivery.rejected, then one destination.disabled, nothing else delivered or retried", types)
	}

	var warned []int
	var disabled []store.OperatorEvent
	for _, ev := range r.outbox() {
		switch ev.Type {
		case "destination.failing":
			warned = append(warned, ev.ConsecutiveFailures)
			if ev.LastFailure == nil || !strings.Contains(ev.LastFailure.Message, "the role's permissions do not allow it") {
				t.Errorf("destination.failing %+v: want the permissions' refusal as its last failure", ev)
			}
		case "destination.disabled":
			disabled = append(disabled, ev)
		}
	}
	if !slices.Equal(warned, []int{5, 15}) {
		t.Errorf("destination.failing at %v rejections in a row, want [5 15]", warned)
	}
	if len(disabled) != 1 || disabled[0].Destination != d.ID || disabled[0].LastFailure == nil ||
		!strings.Contains(disabled[0].LastFailure.Message, "the role's permissions do not allow it") {
		t.Errorf("destination.disabled operator events %+v, want one with the permissions' refusal", disabled)
	}

	// The 20 refused writes reached the bus or stream, each signed with the one session.
	w := writes()
	if taken() != 0 || len(w) != 20 {
		t.Errorf("the %s received %d writes and took %d, want 20 refused and none taken", d.Connector, len(w), taken())
	}
	for i, key := range w {
		if len(log) > 1 && key != "" && key != log[1].AccessKeyID {
			t.Errorf("write %d was signed with %s, want the one session %s", i+1, key, log[1].AccessKeyID)
		}
	}
}
