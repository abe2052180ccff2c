package dispatch

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/mercamap/relay/internal/destination"
)

// TestTheAccountIndexFollowsEveryChangeOfTheDestinations: through SetDestinations (a
// load, a reload that drops and adds), Upsert (new, redefined, moved to another account)
// and Remove, each account's list, the counts and the whole sorted list are what the
// configured set says; an account's list is the same shared slice until its own set
// changes, and the whole list is not rebuilt by a call that follows no change.
func TestTheAccountIndexFollowsEveryChangeOfTheDestinations(t *testing.T) {
	ctx := context.Background()
	dest := func(acct string, i int) destination.Destination {
		return destination.Destination{ID: fmt.Sprintf("%s-d%02d", acct, i), Account: acct, Connector: destination.PubSub,
			ProjectID: "p", TopicID: fmt.Sprintf("t%d", i)}
	}
	var initial []destination.Destination
	for i := 9; i >= 0; i-- { // not in id order
		initial = append(initial, dest("acct_a", i), dest("acct_b", i%3))
	}
	r := newRig(t, newTestSink(nil), initial...)
	d := r.d

	// agree checks the index against the configured set itself.
	agree := func(step string) {
		t.Helper()
		d.mu.Lock()
		byAccount := map[string][]destination.Destination{}
		var all []destination.Destination
		for _, dd := range d.dests {
			byAccount[dd.Account] = append(byAccount[dd.Account], *dd)
			all = append(all, *dd)
		}
		d.mu.Unlock()
		counts := d.DestinationCounts()
		if len(counts) != len(byAccount) {
			t.Fatalf("%s: counts %v for %d accounts", step, counts, len(byAccount))
		}
		for acct, want := range byAccount {
			slices.SortFunc(want, byID)
			got := d.AccountDestinations(acct)
			if !slices.EqualFunc(got, want, sameDest) || counts[acct] != len(want) {
				t.Fatalf("%s: %s's list %v (count %d), want %v", step, acct, ids(got), counts[acct], ids(want))
			}
		}
		slices.SortFunc(all, byID)
		if got := d.Destinations(); !slices.EqualFunc(got, all, sameDest) {
			t.Fatalf("%s: every destination %v, want %v", step, ids(got), ids(all))
		}
		if got := d.AccountDestinations("acct_none"); len(got) != 0 {
			t.Fatalf("%s: an account with none lists %v", step, ids(got))
		}
	}
	agree("loaded")

	// Shared until its own account changes.
	a, b, all := d.AccountDestinations("acct_a"), d.AccountDestinations("acct_b"), d.Destinations()
	if &d.AccountDestinations("acct_a")[0] != &a[0] || &d.Destinations()[0] != &all[0] {
		t.Fatal("a second call with no change built the list again")
	}
	if err := d.Upsert(ctx, dest("acct_b", 7)); err != nil {
		t.Fatal(err)
	}
	agree("a new destination of acct_b")
	if &d.AccountDestinations("acct_a")[0] != &a[0] {
		t.Fatal("a change of acct_b built acct_a's list again")
	}
	if &d.AccountDestinations("acct_b")[0] == &b[0] {
		t.Fatal("acct_b's list was not built again after its change")
	}

	redefined := dest("acct_a", 3)
	redefined.TopicID = "t3-v2"
	if err := d.Upsert(ctx, redefined); err != nil {
		t.Fatal(err)
	}
	agree("redefined")
	moved := dest("acct_a", 4)
	moved.Account = "acct_c" // the same id, now another account's
	if err := d.Upsert(ctx, moved); err != nil {
		t.Fatal(err)
	}
	agree("moved to acct_c")
	d.Remove("acct_b-d00", "acct_b-d01", "acct_b-d02", "acct_b-d07", "no-such-id")
	agree("acct_b's removed")
	if n, ok := d.DestinationCounts()["acct_b"]; ok {
		t.Fatalf("an account with none left counts %d", n)
	}
	if err := d.SetDestinations(ctx, []destination.Destination{dest("acct_b", 1), dest("acct_d", 0), dest("acct_a", 5)}); err != nil {
		t.Fatal(err)
	}
	agree("reloaded")
}

func sameDest(a, b destination.Destination) bool {
	return a.ID == b.ID && a.Account == b.Account && a.Fingerprint() == b.Fingerprint()
}

func ids(ds []destination.Destination) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.ID
	}
	return out
}
