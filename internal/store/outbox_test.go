package store

import (
	"context"
	"encoding/json"
	"testing"
	"time"
)

func TestOutboxEntryIsHeldByOneDrainerUntilItIsLeftStale(t *testing.T) {
	onEachRedis(t, testOutboxEntryIsHeldByOneDrainerUntilItIsLeftStale)
}

func testOutboxEntryIsHeldByOneDrainerUntilItIsLeftStale(t *testing.T, s *Store) {
	ctx := context.Background()
	r := Ref{Account: "acct_1", ID: "orders-bus", Connector: "eventbridge"}
	if _, err := s.Ensure(ctx, r, "relay-ext", "fp", time.Hour); err != nil {
		t.Fatal(err)
	}
	if got, err := s.TakeOutbox(ctx, r.Account, "a", time.Hour, 10); err != nil || len(got) != 0 {
		t.Fatalf("empty outbox: %v, %v", got, err)
	}
	if _, err := s.SetStatus(ctx, r, Disabled, "customer asked", time.Hour); err != nil {
		t.Fatal(err)
	}
	// The script wrote the event under the account's hash tag, in its Redis Cluster slot.
	if n, err := s.Client().XLen(ctx, outboxKey("acct_1")).Result(); err != nil || n != 1 {
		t.Fatalf("outbox length %d, %v; want 1", n, err)
	}

	a, err := s.TakeOutbox(ctx, r.Account, "a", time.Hour, 10)
	if err != nil || len(a) != 1 {
		t.Fatalf("a takes: %v, %v", a, err)
	}
	var ev OperatorEvent
	if err := json.Unmarshal(a[0].Body, &ev); err != nil || ev.ID != a[0].ID || a[0].Type != "destination.disabled" {
		t.Fatalf("entry %+v: %v", a[0], err)
	}
	if b, err := s.TakeOutbox(ctx, r.Account, "b", time.Hour, 10); err != nil || len(b) != 0 {
		t.Fatalf("b took an entry a holds: %v, %v", b, err)
	}
	// a's publish failed: a gets it again, with the same id.
	again, err := s.TakeOutbox(ctx, r.Account, "a", time.Hour, 10)
	if err != nil || len(again) != 1 || again[0].ID != a[0].ID {
		t.Fatalf("a again: %v, %v", again, err)
	}
	// a died: once a has held it for stale, b takes it over, and a no longer has it.
	b, err := s.TakeOutbox(ctx, r.Account, "b", 0, 10)
	if err != nil || len(b) != 1 || b[0].ID != a[0].ID {
		t.Fatalf("b takes over: %v, %v", b, err)
	}
	if got, err := s.TakeOutbox(ctx, r.Account, "a", time.Hour, 10); err != nil || len(got) != 0 {
		t.Fatalf("a still got the entry b took over: %v, %v", got, err)
	}
	if err := s.AckOutbox(ctx, r.Account, b[0].StreamID); err != nil {
		t.Fatal(err)
	}
	if left, err := s.Outbox(ctx, r.Account); err != nil || len(left) != 0 {
		t.Fatalf("after the ack: %v, %v", left, err)
	}
	if err := s.LeaveOutbox(ctx, r.Account, "b"); err != nil {
		t.Fatal(err)
	}
}
