package client

import (
	"bytes"
	"encoding/json"
)

// Fields a change may send as null (ChangeDestination's null): the generated bodies
// leave a nil field out, which leaves it unchanged.
const (
	FieldInFlight = "in_flight" // null: the relay's default window (delivery.in_flight)
	FieldMaxRate  = "max_rate"  // null: no cap on writes per second
)

// withNulls is body as a JSON object with each of names set to null; body itself when
// names is empty.
func withNulls(body any, names []string) (any, error) {
	if len(names) == 0 {
		return body, nil
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	fields := map[string]json.RawMessage{}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&fields); err != nil {
		return nil, err
	}
	for _, n := range names {
		fields[n] = json.RawMessage("null")
	}
	return fields, nil
}
