package main

import (
	"testing"
	"time"
)

// TestAnAccountsActionLimitHoldsAcrossTwoReplicas: the account token pauses its
// destination over and over, alternating between two replicas. The limit of 6 actions
// an hour for the account (and for the destination) is one budget in Redis, not one per
// replica: exactly 6 of the 20 are answered, the rest 429 RESOURCE_EXHAUSTED with
// Retry-After, whichever replica is asked.
func TestAnAccountsActionLimitHoldsAcrossTwoReplicas(t *testing.T) {
	rs := startReplicasWith(t, 2, replicaOptions{
		api: "actions_per_destination: {count: 6, per: 1h}, actions_per_account: {count: 6, per: 1h}"})
	answered := 0
	for i := range 20 {
		a := httpPost(t, rs.apis[i%2]+busDest+"/pause", replicasAcctToken, "")
		switch {
		case a.status == 200:
			answered++
		case a.status != 429 || a.header.Get("Retry-After") == "":
			t.Fatalf("pause %d on relay %d: %d %s; want 200 or 429 with Retry-After", i+1, i%2, a.status, a.body)
		}
	}
	if answered != 6 {
		t.Fatalf("%d of 20 pauses over two replicas were carried out, want the account's 6 an hour (one replica alone gave 6)", answered)
	}
}

// TestTheSTSBudgetHoldsAcrossTwoReplicas: "send a test" asked alternately of two
// replicas (each test is a probe and a session) spends one STS budget for the
// destination, kept in Redis: with 4 calls an hour, the first setup check's probe and
// session (refused: the customer had not trusted the role yet) and the first test's
// (which passes and delivers) are all STS sees; every other test answers 429 with Retry-After and
// reaches neither STS nor the bus. One replica's budget each would have let 8 through.
func TestTheSTSBudgetHoldsAcrossTwoReplicas(t *testing.T) {
	rs := startReplicasWith(t, 2, replicaOptions{untrusted: true, setupCheck: "{initial: 10m, max: 15m}",
		stsBudget: "{per_destination: {count: 4, per: 1h}, per_account: {count: 8, per: 1h}}"})
	// The first setup check runs before the customer trusts the role: refused, and the
	// next is 10 minutes away.
	waitUntil(t, 30*time.Second, "the setup check's probe and session", func() bool { return len(rs.sts.Requests()) >= 2 })
	rs.trustRole()
	delivered, held := 0, 0
	for i := range 6 {
		a := httpPost(t, rs.apis[i%2]+busDest+"/test", replicasAcctToken, "")
		switch {
		case a.status == 200:
			delivered++
		case a.status == 429 && a.header.Get("Retry-After") != "":
			held++
		default:
			t.Fatalf("test %d on relay %d: %d %s; want 200 or 429 with Retry-After", i+1, i%2, a.status, a.body)
		}
	}
	if n := len(rs.sts.Requests()); n != 4 || delivered != 1 || held != 5 {
		t.Fatalf("STS saw %d calls, %d tests delivered and %d held back; want 4 calls (the check's and one test's), 1 and 5: %+v\n%s", n, delivered, held, rs.sts.Requests(), rs.logTails())
	}
	tests := 0
	for _, e := range rs.bus.Entries() {
		if e.DetailType == "relay.test" {
			tests++
		}
	}
	if tests != 1 {
		t.Fatalf("the bus holds %d test events, want 1", tests)
	}
}
