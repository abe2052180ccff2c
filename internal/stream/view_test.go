package stream

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/dispatch"
	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/testpeer"
)

// viewRig is Channels over a real Redis and a real (not running) Dispatcher, and a
// second Store client: another replica, through which the state changes.
type viewRig struct {
	t     testing.TB
	ours  *store.Store
	other *store.Store
	disp  *dispatch.Dispatcher
	c     *Channels
	dests []destination.Destination
}

// viewDests are one destination of each connector, of one account.
func viewDests() []destination.Destination {
	return []destination.Destination{
		{ID: "orders-bus", Account: "acct_view", Connector: destination.EventBridge,
			BusARN:  "arn:aws:events:us-east-1:111122223333:event-bus/orders",
			RoleARN: "arn:aws:iam::111122223333:role/mercamap-delivery"},
		{ID: "orders-stream", Account: "acct_view", Connector: destination.Kinesis,
			StreamARN: "arn:aws:kinesis:eu-west-1:111122223333:stream/orders",
			RoleARN:   "arn:aws:iam::111122223333:role/mercamap-delivery",
			KMSKeyARN: "arn:aws:kms:eu-west-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"},
		{ID: "orders-topic", Account: "acct_view", Connector: destination.PubSub, ProjectID: "acme-prod", TopicID: "relay-events"},
	}
}

var viewIdentity = destination.Identity{Name: "mercamap", AWSPrincipalARN: "arn:aws:iam::999999999999:role/relay-delivery",
	GCPServiceAccount: "relay@relay-prod.iam.gserviceaccount.com"}

func newViewRig(t testing.TB, viewCache int) *viewRig {
	t.Helper()
	url := testpeer.RedisURL(t)
	open := func() *store.Store {
		st, err := store.Open(url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	g := &viewRig{t: t, ours: open(), other: open(), dests: viewDests()}
	g.disp = dispatch.New(dispatch.Options{Store: g.ours, Delivery: config.Delivery{ChannelRetention: time.Hour, LeaseTTL: time.Second}})
	if err := g.disp.SetDestinations(context.Background(), g.dests); err != nil {
		t.Fatal(err)
	}
	g.c = New(Options{Store: g.ours, Directory: g.disp, Identity: viewIdentity, ViewCache: viewCache})
	return g
}

func ref(d destination.Destination) store.Ref {
	return store.Ref{Account: d.Account, ID: d.ID, Connector: string(d.Connector)}
}

// check reads each destination's card twice and compares both, as JSON, with one built
// fresh from the state Redis holds now: the first answer after a change must show it.
// The second must be the same view (no new one built), unless the destination is
// pending (its check is stored without an event, so its state is always read); every
// view built after the first keeps the static part's maps (shared, not rebuilt) while
// the definition, identity and ExternalId hold.
func (g *viewRig) check(step string, want func(Card) bool) {
	g.t.Helper()
	ctx := context.Background()
	for _, d := range g.dests {
		before := g.c.views.get(d.ID)
		first, err := g.c.Card(ctx, d)
		if err != nil {
			g.t.Fatalf("%s, %s: %v", step, d.ID, err)
		}
		v := g.c.views.get(d.ID)
		second, err := g.c.Card(ctx, d)
		if err != nil {
			g.t.Fatal(err)
		}
		st, err := g.ours.LoadState(ctx, ref(d))
		if err != nil {
			g.t.Fatal(err)
		}
		fresh := NewCard(d, st, *g.c.identity.Load(), g.c.opts.Window)
		a, b, f := marshal(g.t, first), marshal(g.t, second), marshal(g.t, fresh)
		if !bytes.Equal(a, f) || !bytes.Equal(b, f) {
			g.t.Fatalf("%s, %s: served\n%s\n%s\nfresh\n%s", step, d.ID, a, b, f)
		}
		if !want(first) {
			g.t.Fatalf("%s, %s: the card does not show the change: %s", step, d.ID, a)
		}
		if st.Status != store.Pending && g.c.views.get(d.ID) != v {
			g.t.Fatalf("%s, %s: nothing changed, yet the second answer built a new view", step, d.ID)
		}
		if before != nil && before.static == v.static && !sameMaps(before.card, v.card) {
			g.t.Fatalf("%s, %s: the static part was built again", step, d.ID)
		}
	}
}

func marshal(t testing.TB, c Card) []byte {
	t.Helper()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sameMaps reports whether two cards share their Target and Setup maps.
func sameMaps(a, b Card) bool {
	return reflect.ValueOf(a.Target).Pointer() == reflect.ValueOf(b.Target).Pointer() &&
		reflect.ValueOf(a.Setup).Pointer() == reflect.ValueOf(b.Setup).Pointer()
}

// TestACardServedFromTheViewIsTheCardBuiltFreshAfterEachChange: for a destination of
// each connector, every kind of state change made by another replica (a setup check
// that did not pass, one that did, a pause, an activation, a delivery's commit, a
// rejection's, an operator's disable), a new identity and a redefinition show on the
// next answer, and every answer is byte for byte the card built fresh from Redis.
func TestACardServedFromTheViewIsTheCardBuiltFreshAfterEachChange(t *testing.T) {
	g := newViewRig(t, 0)
	ctx := context.Background()
	anyCard := func(Card) bool { return true }
	g.check("added (pending)", func(c Card) bool { return c.Status == store.Pending })

	for _, d := range g.dests {
		if _, err := g.other.SetupChecked(ctx, ref(d), false, store.PendingCheck{At: time.Now().UTC(), Message: "the role is missing"}, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	g.check("a setup check that did not pass", func(c Card) bool { return c.Pending != nil && c.Pending.Message == "the role is missing" })
	for _, d := range g.dests {
		if _, err := g.other.SetupChecked(ctx, ref(d), true, store.PendingCheck{}, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	g.check("the setup check passed", func(c Card) bool { return c.Status == store.Active && c.Pending == nil })

	g.each(func(d destination.Destination) error {
		_, err := g.other.ChangeStatus(ctx, store.StatusChange{Ref: ref(d), Status: store.Paused, ChannelRetention: time.Hour})
		return err
	})
	g.check("paused", func(c Card) bool { return c.Status == store.Paused })
	g.each(func(d destination.Destination) error {
		_, err := g.other.ChangeStatus(ctx, store.StatusChange{Ref: ref(d), Status: store.Active, ChannelRetention: time.Hour})
		return err
	})
	g.check("activated", func(c Card) bool { return c.Status == store.Active })

	// Deliveries and rejections, committed under the other replica's lease.
	tokens := map[string]int64{}
	g.each(func(d destination.Destination) (err error) {
		var leases []store.Lease
		if leases, err = g.other.AcquireLeases(ctx, []store.Ref{ref(d)}, "other", time.Minute); err == nil {
			tokens[d.ID] = leases[0].Token
		}
		return err
	})
	got, err := g.other.AppendBatch(ctx, []store.Append{{Accounts: []string{"acct_view"},
		Entry: store.Entry{EventID: "fetcher.job.completed.view-1", Type: "job.completed", Data: []byte(`{}`)}}}, time.Hour, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	commit := func(kind string) {
		g.each(func(d destination.Destination) error {
			_, err := g.other.Commit(ctx, store.Commit{Ref: ref(d), Token: tokens[d.ID], Kind: kind, Cursor: got[0][0],
				EventID: "fetcher.job.completed.view-1", Message: "AccessDenied: the role refused the write",
				DisableAfter: 20, WarnAfter: []int{1}, ChannelRetention: time.Hour, AttemptsRetention: time.Hour})
			return err
		})
	}
	commit(store.KindDelivered)
	g.check("a delivery committed", func(c Card) bool { return c.LastDelivery != nil })
	commit(store.KindRejected)
	g.check("a rejection committed", func(c Card) bool { return c.LastFailure != nil && c.Failing != nil })

	g.each(func(d destination.Destination) error {
		_, err := g.other.ChangeStatus(ctx, store.StatusChange{Ref: ref(d), Status: store.Disabled, Reason: "abuse",
			Operator: true, ChannelRetention: time.Hour})
		return err
	})
	g.check("disabled by an operator", func(c Card) bool {
		return c.Status == store.Disabled && c.Disabled != nil && c.Disabled.By == store.DisabledByOperator
	})
	g.check("nothing changed", anyCard)

	id := viewIdentity
	id.AWSPrincipalARN = "arn:aws:iam::999999999999:role/relay-delivery-2"
	id.GCPServiceAccount = "relay2@relay-prod.iam.gserviceaccount.com"
	g.c.SetIdentity(id)
	g.check("a new identity", func(c Card) bool {
		b, _ := json.Marshal(c.Setup)
		return bytes.Contains(b, []byte("relay-delivery-2")) || bytes.Contains(b, []byte("relay2@"))
	})

	g.dests[0].BusARN += "-v2"
	g.dests[1].KMSKeyARN = ""
	g.dests[2].TopicID += "-v2"
	if err := g.disp.SetDestinations(ctx, g.dests); err != nil {
		t.Fatal(err)
	}
	g.check("redefined", func(c Card) bool {
		return c.Target["bus_arn"] == g.dests[0].BusARN || (c.Connector == "kinesis" && c.Target["kms_key_arn"] == "") ||
			c.Target["topic_id"] == g.dests[2].TopicID
	})
}

func (g *viewRig) each(f func(destination.Destination) error) {
	g.t.Helper()
	for _, d := range g.dests {
		if err := f(d); err != nil {
			g.t.Fatalf("%s: %v", d.ID, err)
		}
	}
}

// TestTheViewCacheKeepsAtMostItsLimitAndForgetsADeletedDestination: with room for two
// views, three destinations' cards are still right, two views are kept; a destination
// whose state is gone answers destination.ErrNotFound and its view is dropped.
func TestTheViewCacheKeepsAtMostItsLimitAndForgetsADeletedDestination(t *testing.T) {
	g := newViewRig(t, 2)
	for range 3 {
		g.check("read", func(Card) bool { return true })
		if n := g.c.views.len(); n > 2 {
			t.Fatalf("%d views kept, limit 2", n)
		}
	}
	ctx := context.Background()
	d := g.dests[2]
	if _, err := g.c.Card(ctx, d); err != nil {
		t.Fatal(err)
	}
	if err := g.other.Forget(ctx, ref(d)); err != nil {
		t.Fatal(err)
	}
	if _, err := g.c.Card(ctx, d); err != destination.ErrNotFound {
		t.Fatalf("deleted: %v, want destination.ErrNotFound", err)
	}
	if g.c.views.get(d.ID) != nil {
		t.Fatal("a deleted destination's view is kept")
	}
}

// BenchmarkCardAndLag times one card read as the destination routes make it (card and
// lag), its state unchanged since the last read, over a private Redis on loopback.
//
//	go test -run=NONE -bench=CardAndLag -benchmem ./internal/stream/
func BenchmarkCardAndLag(b *testing.B) {
	g := newViewRig(b, 0)
	ctx := context.Background()
	d := g.dests[0]
	b.ResetTimer()
	for range b.N {
		if _, _, err := g.c.CardAndLag(ctx, d); err != nil {
			b.Fatal(err)
		}
	}
}
