// Package sinktest is the conformance suite every Sink must pass: ordering, the body's
// shape, and the class of each failure its bus can answer with. It is test support only:
// the relay never imports it, and it never talks to anything but the backend it is given.
package sinktest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/failures"
)

// Sink is dispatch's seam, repeated here so the suite does not import dispatch.
type Sink interface {
	Send(ctx context.Context, d destination.Destination, m destination.Message) error
}

// Backend is one fresh sink and bus for one subtest.
type Backend struct {
	Sink Sink
	Dest destination.Destination
	// Read returns everything that arrived at Dest since the backend was made, in
	// arrival order, after waiting (a bounded poll) until at least n have arrived.
	// It fails the test when n do not arrive in time.
	Read func(t *testing.T, n int) []Received
	// Faults names each failure the bus can answer with. Inject makes the next Send
	// fail that way without writing anything; the Send after it works again.
	Faults map[string]Fault
}

// Fault is one injected failure and the class Classify must give it.
type Fault struct {
	Inject func(t *testing.T)
	Want   failures.Class
}

// Received is one event as a receiver reads it off the bus.
type Received struct {
	Body         map[string]any    // the decoded JSON the receiver got
	Attributes   map[string]string // Pub/Sub attributes; nil for a bus that has none
	PartitionKey string            // Kinesis's partition key, Pub/Sub's ordering key; "" elsewhere
}

// Run runs the suite; newBackend is called once per subtest.
func Run(t *testing.T, newBackend func(t *testing.T) Backend) {
	t.Run("EventsArriveInOrderExactlyOnce", func(t *testing.T) { testOrder(t, newBackend(t)) })
	t.Run("BodyHasTheContractShape", func(t *testing.T) { testBody(t, newBackend(t)) })
	t.Run("RenderIsWhatArrives", func(t *testing.T) { testRender(t, newBackend(t)) })
	t.Run("Faults", func(t *testing.T) {
		names := slices.Sorted(maps.Keys(newBackend(t).Faults))
		if len(names) == 0 {
			t.Fatal("the backend names no faults: every bus can fail")
		}
		for _, name := range names {
			t.Run(name, func(t *testing.T) { testFault(t, newBackend(t), name) })
		}
	})
}

// Message returns the i-th test message for d: distinct id and event_id, nested data
// with camelCase keys and an array, and one of three store ids (every fourth none).
func Message(d destination.Destination, i int) destination.Message {
	eventID := fmt.Sprintf("fetcher.job.completed.job-%03d", i)
	store := ""
	if i%4 != 3 {
		store = fmt.Sprintf("store-%d", i%3)
	}
	data := map[string]any{
		"job_id":   fmt.Sprintf("job-%03d", i),
		"result":   map[string]any{"sizeBytes": 1000 + i, "pages": []any{"a", "b"}},
		"metadata": map[string]any{"store_id": store},
	}
	raw, _ := json.Marshal(data)
	return destination.Message{
		ID:            destination.MessageID(d.ID, eventID),
		Type:          "job.completed",
		EventID:       eventID,
		CreatedAt:     time.Date(2026, 11, 29, 12, 0, i%60, 0, time.UTC).Format(time.RFC3339),
		Data:          raw,
		SchemaVersion: "1",
		StoreID:       store,
		Account:       d.Account,
	}
}

func send(t *testing.T, b Backend, m destination.Message) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	return b.Sink.Send(ctx, b.Dest, m)
}

func testOrder(t *testing.T, b Backend) {
	const n = 30
	var sent []destination.Message
	for i := range n {
		m := Message(b.Dest, i)
		if err := send(t, b, m); err != nil {
			t.Fatalf("send %d: %v (%+v)", i, err, failures.Classify(err))
		}
		sent = append(sent, m)
	}
	got := b.Read(t, n)
	if len(got) != n {
		t.Fatalf("%d events arrived, want exactly %d", len(got), n)
	}
	for i, r := range got {
		if r.Body["event_id"] != sent[i].EventID || r.Body["id"] != sent[i].ID {
			t.Fatalf("event %d arrived as id=%v event_id=%v, want %s %s (out of order or repeated)",
				i, r.Body["id"], r.Body["event_id"], sent[i].ID, sent[i].EventID)
		}
		checkKeyAndAttributes(t, r, sent[i])
	}
}

func testBody(t *testing.T, b Backend) {
	m := Message(b.Dest, 1)
	if err := send(t, b, m); err != nil {
		t.Fatalf("send: %v", err)
	}
	got := b.Read(t, 1)[0].Body
	for k, want := range map[string]string{"id": m.ID, "type": m.Type, "event_id": m.EventID, "created_at": m.CreatedAt} {
		if got[k] != want {
			t.Errorf("body %q = %v, want %q", k, got[k], want)
		}
	}
	if data, ok := got["data"]; ok {
		var want any
		json.Unmarshal(m.Data, &want)
		if !reflect.DeepEqual(normalize(data), normalize(want)) {
			t.Errorf("body data = %v, want the event body %s", data, m.Data)
		}
		return
	}
	// Flattened (Kinesis): one level of snake_case keys, array items by index.
	flat := map[string]any{"data_job_id": "job-001", "data_result_size_bytes": 1001.0,
		"data_result_pages_0": "a", "data_result_pages_1": "b", "data_metadata_store_id": m.StoreID}
	for k, want := range flat {
		if !reflect.DeepEqual(normalize(got[k]), want) {
			t.Errorf("flattened body %q = %#v, want %#v (body: %v)", k, got[k], want, got)
		}
	}
	for k, v := range got {
		if _, nested := v.(map[string]any); nested {
			t.Errorf("flattened body key %q holds an object: want one level", k)
		}
	}
}

func testFault(t *testing.T, b Backend, name string) {
	f := b.Faults[name]
	failed, next := Message(b.Dest, 7), Message(b.Dest, 8)
	f.Inject(t)
	err := send(t, b, failed)
	o := failures.Classify(err)
	if err == nil || o.Class != f.Want {
		t.Fatalf("after injecting %s, Send = %v classified %q, want %q", name, err, o.Class, f.Want)
	}
	if o.Message == "" {
		t.Fatalf("%s: classified without a sentence for the card", name)
	}
	// A not-taken event is retried by dispatch and lands; a rejected one has ended, and
	// the next event goes through. Either way exactly one write reaches the bus.
	want := next
	if f.Want == failures.NotTaken {
		want = failed
	}
	// A session the fault refused waits out its backoff first (failures.Wait), as
	// dispatch waits before the next attempt.
	err = send(t, b, want)
	for deadline := time.Now().Add(10 * time.Second); failures.Wait(err) > 0 && time.Now().Before(deadline); {
		time.Sleep(failures.Wait(err))
		err = send(t, b, want)
	}
	if err != nil {
		t.Fatalf("%s: the send after the fault failed: %v", name, err)
	}
	got := b.Read(t, 1)
	if len(got) != 1 || got[0].Body["event_id"] != want.EventID {
		t.Fatalf("%s: the bus holds %d events, want only %s: %v", name, len(got), want.EventID, got)
	}
}

// checkKeyAndAttributes checks what a bus carries beside the body, when it carries it.
func checkKeyAndAttributes(t *testing.T, r Received, m destination.Message) {
	t.Helper()
	if r.PartitionKey != "" {
		want := m.StoreID
		if want == "" {
			want = m.Account
		}
		if r.PartitionKey != want {
			t.Errorf("%s: partition key %q, want %q (the store id, else the account)", m.EventID, r.PartitionKey, want)
		}
	}
	if r.Attributes == nil {
		return
	}
	want := map[string]string{"event_type": m.Type, "event_id": m.EventID, "event_version": m.SchemaVersion}
	if m.StoreID != "" {
		want["store_id"] = m.StoreID
	}
	for k, v := range want {
		if r.Attributes[k] != v {
			t.Errorf("%s: attribute %s = %q, want %q", m.EventID, k, r.Attributes[k], v)
		}
	}
}

// normalize turns numbers into float64 so decoded and expected values compare equal.
func normalize(v any) any {
	b, _ := json.Marshal(v)
	var out any
	json.Unmarshal(b, &out)
	return out
}
