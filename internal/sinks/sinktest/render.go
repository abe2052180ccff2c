package sinktest

import (
	"encoding/json"
	"maps"
	"reflect"
	"testing"

	"github.com/mercamap/relay/internal/destination"
)

// Renderer is a sink that says what it writes without writing it (the console's attempt
// detail shows that); dispatch.Renderer, repeated here.
type Renderer interface {
	Render(d destination.Destination, m destination.Message) (destination.Sent, error)
}

// testRender checks that what Render says a message becomes is what a receiver reads
// off the bus once Send wrote it: the body, the partition key, the attributes.
func testRender(t *testing.T, b Backend) {
	r, ok := b.Sink.(Renderer)
	if !ok {
		t.Skip("this sink does not render")
	}
	m := Message(b.Dest, 1)
	sent, err := r.Render(b.Dest, m)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	if err := send(t, b, m); err != nil {
		t.Fatalf("send: %v", err)
	}
	got := b.Read(t, 1)[0]
	var text, key string
	var attrs map[string]string
	switch {
	case sent.EventBridge != nil:
		text = sent.EventBridge.Detail
	case sent.Kinesis != nil:
		text, key = sent.Kinesis.Data, sent.Kinesis.PartitionKey
	case sent.PubSub != nil:
		text, attrs, key = sent.PubSub.Data, sent.PubSub.Attributes, sent.PubSub.OrderingKey
	default:
		t.Fatalf("render gave no connector's part: %+v", sent)
	}
	var body map[string]any
	if err := json.Unmarshal([]byte(text), &body); err != nil {
		t.Fatalf("the rendered body is not JSON: %v\n%s", err, text)
	}
	if !reflect.DeepEqual(normalize(body), normalize(got.Body)) {
		t.Errorf("rendered body %v, received %v", body, got.Body)
	}
	if key != got.PartitionKey {
		t.Errorf("rendered partition key %q, received %q", key, got.PartitionKey)
	}
	if got.Attributes != nil && !maps.Equal(attrs, got.Attributes) {
		t.Errorf("rendered attributes %v, received %v", attrs, got.Attributes)
	}
}
