package destination

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/mercamap/relay/internal/jsonscan"
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
// {"id","type","data","event_id","created_at"}. Data must be valid JSON (ingest
// verified it). The bytes are json.Marshal's, data compacted and <, >, &, U+2028 and
// U+2029 escaped;
// when Marshal would copy every field unchanged, as for a body Go's json.Marshal
// wrote, Body appends them itself and spares data Marshal's full rescan.
func (m Message) Body() []byte {
	data := m.Data
	if len(data) == 0 {
		data = json.RawMessage("null")
	}
	if !plain(m.ID) || !plain(m.Type) || !plain(m.EventID) || !plain(m.CreatedAt) || !jsonscan.Verbatim(data) {
		return marshalBody(m, data)
	}
	const frame = `{"id":"","type":"","data":,"event_id":"","created_at":""}`
	b := make([]byte, 0, len(frame)+len(m.ID)+len(m.Type)+len(data)+len(m.EventID)+len(m.CreatedAt))
	b = append(append(append(b, `{"id":"`...), m.ID...), `","type":"`...)
	b = append(append(append(b, m.Type...), `","data":`...), data...)
	b = append(append(append(b, `,"event_id":"`...), m.EventID...), `","created_at":"`...)
	return append(append(b, m.CreatedAt...), `"}`...)
}

// marshalBody is Body by json.Marshal, for what Body cannot copy as it is.
func marshalBody(m Message, data json.RawMessage) []byte {
	b, _ := json.Marshal(struct {
		ID        string          `json:"id"`
		Type      string          `json:"type"`
		Data      json.RawMessage `json:"data"`
		EventID   string          `json:"event_id"`
		CreatedAt string          `json:"created_at"`
	}{m.ID, m.Type, data, m.EventID, m.CreatedAt})
	return b // Data is verified JSON, so marshalling cannot fail
}

// plain reports whether json.Marshal writes s between quotes unchanged: printable
// ASCII other than the quote, the backslash and the HTML-escaped <, >, &.
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}
