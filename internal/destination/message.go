package destination

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// Message is one event as written to one destination.
type Message struct {
	ID            string          // msg_…: stable for one event at one destination (a retry keeps it)
	Type          string          // short type: the routing key (job.completed), or relay.test
	EventID       string          // the input ce-id: receivers dedup on it
	CreatedAt     string          // ce-time, RFC 3339
	Data          json.RawMessage // the event body, passed through
	SchemaVersion string          // ce-schemaversion (Pub/Sub attribute event_version)
	StoreID       string          // the event's store id, "" when it names none
	Account       string          // the destination's account (Kinesis partition key fallback)
}

// TestType is the type of the clearly marked event "send a test" writes.
const TestType = "relay.test"

// MessageID derives the stable body id of an event at a destination.
func MessageID(destinationID, eventID string) string {
	sum := sha256.Sum256([]byte(destinationID + "\x00" + eventID))
	return "msg_" + hex.EncodeToString(sum[:12])
}

// Body is the JSON every connector writes:
// {"id","type","data","event_id","created_at"}.
func (m Message) Body() []byte {
	data := m.Data
	if len(data) == 0 {
		data = json.RawMessage("null")
	}
	b, _ := json.Marshal(struct {
		ID        string          `json:"id"`
		Type      string          `json:"type"`
		Data      json.RawMessage `json:"data"`
		EventID   string          `json:"event_id"`
		CreatedAt string          `json:"created_at"`
	}{m.ID, m.Type, data, m.EventID, m.CreatedAt})
	return b // Data is verified JSON, so marshalling cannot fail
}
