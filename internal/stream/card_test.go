package stream

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/store"
)

// An event that names a few card fields sets those and keeps the others; a null clears
// one; an event naming every field (the form before) replaces the state as before.
func TestACardTakesTheFieldsAnEventChanged(t *testing.T) {
	at := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	c := Card{Status: "active", ConsecutiveFailures: 3,
		LastFailure: &store.Failure{At: at, Class: "rejected", Message: "the role refused the write"},
		Failing:     &store.Failing{ConsecutiveFailures: 3}}
	changes := map[string]json.RawMessage{}
	if err := json.Unmarshal([]byte(`{"last_delivery":{"at":"2026-12-02T10:01:00Z","event_id":"ev-1"},"consecutive_failures":0,"failing":null,"unknown":1}`), &changes); err != nil {
		t.Fatal(err)
	}
	if err := c.ApplyChanges(changes); err != nil {
		t.Fatal(err)
	}
	if c.Status != "active" || c.ConsecutiveFailures != 0 || c.Failing != nil || c.LastDelivery == nil ||
		c.LastDelivery.EventID != "ev-1" || c.LastFailure == nil || c.LastFailure.Message != "the role refused the write" {
		t.Fatalf("card after the delivery: %+v", c.State())
	}
	full := map[string]json.RawMessage{}
	json.Unmarshal([]byte(`{"status":"paused","consecutive_failures":0,"last_failure":null,"last_delivery":null,"disabled":null,"failing":null,"pending":null}`), &full)
	if err := c.ApplyChanges(full); err != nil {
		t.Fatal(err)
	}
	if c.State() != (CardState{Status: "paused"}) {
		t.Fatalf("card after a whole state: %+v", c.State())
	}
	if err := c.ApplyChanges(map[string]json.RawMessage{"consecutive_failures": json.RawMessage(`"many"`)}); err == nil {
		t.Fatal("a state field of the wrong type was taken")
	}
}
