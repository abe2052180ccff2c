package api

import (
	"encoding/json"
	"strconv"

	"github.com/mercamap/relay/internal/destination"
)

// A destination's delivery settings in a create's or a change's body: in_flight (its
// window) and max_rate (its cap on writes per second). Each may be left out, be null
// (the relay's default window; no cap) or hold a value, which must be in range: a 0 is
// refused rather than read as "unset", which is what null says.

// nullable is a body field that is absent (Set false), null (Set, Raw nil) or a value
// (Raw, read by its caller, so a value of the wrong type is a problem of its field, in
// a sentence naming it, not a decoding error of the whole body).
type nullable struct {
	Set bool
	Raw json.RawMessage
}

// UnmarshalJSON is called for a field that is present, null included.
func (n *nullable) UnmarshalJSON(b []byte) error {
	n.Set = true
	if string(b) != "null" {
		n.Raw = append(json.RawMessage(nil), b...)
	}
	return nil
}

// settingsOf sets d's InFlight and MaxRate from a body's in_flight and max_rate: a value
// sets one, null clears it, absent leaves it as d has it. What cannot be one is a field
// problem, in the config's words, and leaves d's as it was.
func settingsOf(inFlight, maxRate nullable, d *destination.Destination) []fieldProblem {
	var ps []fieldProblem
	if inFlight.Set {
		if n, msg := readInFlight(inFlight.Raw); msg != "" {
			ps = append(ps, fieldProblem{Field: "in_flight", Message: msg})
		} else {
			d.InFlight = n
		}
	}
	if maxRate.Set {
		if r, msg := readMaxRate(maxRate.Raw); msg != "" {
			ps = append(ps, fieldProblem{Field: "max_rate", Message: msg})
		} else {
			d.MaxRate = r
		}
	}
	return ps
}

// readInFlight reads an in_flight value (nil: null, unset); msg says why it is not one.
func readInFlight(raw json.RawMessage) (n int, msg string) {
	if raw == nil {
		return 0, ""
	}
	if err := json.Unmarshal(raw, &n); err != nil {
		return 0, "in_flight is not a whole number: it is how many writes may be in flight at once, from 1 (one at a time, in arrival order) to " +
			strconv.Itoa(destination.MaxInFlight) + "; null for the relay's default"
	}
	return n, destination.InFlightProblem(n)
}

// readMaxRate reads a max_rate value (nil: null, no cap); msg says why it is not one.
func readMaxRate(raw json.RawMessage) (r float64, msg string) {
	if raw == nil {
		return 0, ""
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return 0, "max_rate is not a number: it caps the writes per second, more than 0 and at most " +
			strconv.Itoa(destination.MaxRateLimit) + "; null for no cap"
	}
	return r, destination.MaxRateProblem(r)
}
