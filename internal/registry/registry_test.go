package registry

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/testpeer"
)

func client(t *testing.T) *Registry {
	t.Helper()
	opts, err := redis.ParseURL(testpeer.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	return New(rdb)
}

// TestTheRegistryKeepsOneIdSpaceACapAndItsChangesInOrder: a taken id is refused
// whoever asks; an account's cap counts what it has, a delete gives room back; a retried
// create with its Idempotency-Key makes nothing more; and a follower reads every change
// in order, with the record as it is when read (a put deleted since reads as a delete).
func TestTheRegistryKeepsOneIdSpaceACapAndItsChangesInOrder(t *testing.T) {
	ctx := context.Background()
	g := client(t)
	_, from, err := g.All(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rec := func(id, acct string) Record {
		return Record{ID: id, Account: acct, Connector: "pubsub", CreatedAt: time.Now()}
	}
	if _, made, err := g.Create(ctx, rec("a", "acct_1"), "k1", 2); err != nil || !made {
		t.Fatalf("first create: %v %v", made, err)
	}
	if id, made, err := g.Create(ctx, rec("ignored", "acct_1"), "k1", 2); err != nil || made || id != "a" {
		t.Fatalf("retried create: %q %v %v; want a, nothing made", id, made, err)
	}
	if _, _, err := g.Create(ctx, rec("a", "acct_2"), "", 2); !errors.Is(err, ErrExists) {
		t.Fatalf("another account taking id a: %v; want ErrExists", err)
	}
	if _, _, err := g.Create(ctx, rec("b", "acct_1"), "", 2); err != nil {
		t.Fatal(err)
	}
	if _, _, err := g.Create(ctx, rec("c", "acct_1"), "", 2); !errors.Is(err, ErrCapped) {
		t.Fatalf("past the cap: %v; want ErrCapped", err)
	}
	if err := g.Delete(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if n, _ := g.Count(ctx, "acct_1"); n != 1 {
		t.Fatalf("acct_1 counts %d after a delete, want 1", n)
	}
	if err := g.Delete(ctx, "b"); !errors.Is(err, destination.ErrNotFound) {
		t.Fatalf("a second delete: %v; want destination.ErrNotFound", err)
	}
	changes, next, reload, err := g.Next(ctx, from, time.Second)
	if err != nil || reload || next == from {
		t.Fatalf("next: %v reload=%v", err, reload)
	}
	var got []string
	for _, c := range changes {
		s := c.ID + ":deleted"
		if c.Record != nil {
			s = c.ID + ":" + c.Record.Account
		}
		got = append(got, s)
	}
	want := []string{"a:acct_1", "b:deleted", "b:deleted"} // b's put reads as it is now: gone
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("changes %v, want %v", got, want)
	}
	if err := g.CreateAccount(ctx, AccountRecord{ID: "acct_1", Tenants: []string{"t"}}); err != nil {
		t.Fatal(err)
	}
	if err := g.DeleteAccount(ctx, "acct_1"); !errors.Is(err, ErrBusy) {
		t.Fatalf("deleting an account with a destination: %v; want ErrBusy", err)
	}
}
