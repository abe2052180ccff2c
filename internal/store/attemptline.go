package store

import (
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/mercamap/relay/internal/destination"
	"github.com/redis/go-redis/v9"
)

// An attempt line is stored short by the scripts' add_attempt (lua.go); attemptOf reads
// it back exactly. Lines written before the short form read back as they were stored.
// A delivery's outcome on a channel, kept in its short form or as the attempt line it
// stands for (emit_outcome), is read back here too (outcomeData, outcomeEvent).

// outcomes are the outcomes an attempt line names, in the order of add_attempt's
// outcome_code (its digit is the index), each with the type of the channel event it
// makes ("" for an outcome no event has).
var outcomes = [...]struct{ kind, eventType string }{
	{KindDelivered, "delivery.succeeded"},
	{KindRejected, "delivery.rejected"},
	{KindNotTaken, "delivery.not_taken"},
	{KindExpired, "message.expired"},
	{"replayed", ""},
	{"retry_queued", ""},
}

// outcomeOfCode is the outcome add_attempt's outcome_code names, if code is one.
func outcomeOfCode(code string) (string, bool) {
	if len(code) != 1 || code[0] < '0' || int(code[0]-'0') >= len(outcomes) {
		return "", false
	}
	return outcomes[code[0]-'0'].kind, true
}

// outcomeType is the type of the event a commit's outcome makes ("" for an outcome no
// event has).
func outcomeType(kind string) string {
	for _, o := range outcomes {
		if o.kind == kind {
			return o.eventType
		}
	}
	return ""
}

// outcomeClass is the class a delivery outcome's event names, by its type ("" for an
// event of no outcome).
func outcomeClass(typ string) string {
	for _, o := range outcomes {
		if typ != "" && o.eventType == typ {
			return o.kind
		}
	}
	return ""
}

// attemptOf is the attempt a stored line holds.
func attemptOf(m redis.XMessage) Attempt {
	ms, _ := strconv.ParseInt(str(m.Values["at"]), 10, 64)
	outcome := str(m.Values["outcome"])
	if o, ok := outcomeOfCode(outcome); ok {
		outcome = o
	}
	a := Attempt{N: seqOf(m.ID), At: time.UnixMilli(ms).UTC(), EventID: longEventID(str(m.Values["event_id"])),
		Outcome: outcome, Message: longMessage(outcome, str(m.Values["message"]))}
	a.RetryOf, _ = strconv.ParseInt(str(m.Values["retry_of"]), 10, 64)
	a.Retry, _ = strconv.ParseInt(str(m.Values["retry"]), 10, 64)
	return a
}

// longEventID undoes short_event_id: a first byte of 1 or 2 is a Fetcher ce-id of status
// completed or failed, 3 one of the status that follows, each ending in the job's uuid
// (16 bytes); 4 marks an id kept as it is.
func longEventID(s string) string {
	if s == "" || s[0] > 4 {
		return s
	}
	if s[0] == 4 {
		return s[1:]
	}
	if len(s) < 17 {
		return s // not a form add_attempt writes
	}
	status := map[byte]string{1: "completed", 2: "failed"}[s[0]]
	if s[0] == 3 {
		status = s[1 : len(s)-16]
	}
	return "fetcher.job." + status + "." + uuidOf(s[len(s)-16:])
}

// longMessage undoes short_message: empty is the outcome's own word, a first NUL byte
// marks a message kept as it is.
func longMessage(outcome, s string) string {
	switch {
	case s == "":
		return outcome
	case s[0] == 0:
		return s[1:]
	}
	return s
}

// longMessageID undoes short_id: a first byte of 1 is a uuid's 16 bytes, 2 those of 32
// hex digits, 3 decimal digits two to a byte; 4 marks an id kept as it is.
func longMessageID(s string) string {
	switch {
	case s == "" || s[0] > 4:
		return s
	case len(s) == 17 && s[0] == 1:
		return uuidOf(s[1:])
	case len(s) == 17 && s[0] == 2:
		return hex.EncodeToString([]byte(s[1:]))
	case s[0] == 3:
		return strings.TrimSuffix(hex.EncodeToString([]byte(s[1:])), "f")
	case s[0] == 4:
		return s[1:]
	}
	return s
}

// uuidOf is the lowercase uuid whose 16 bytes are b.
func uuidOf(b string) string {
	u := hex.EncodeToString([]byte(b))
	return u[:8] + "-" + u[8:12] + "-" + u[12:16] + "-" + u[16:20] + "-" + u[20:]
}

// outcomeEvent is the channel event a commit's attempt line stands for (emit_outcome):
// its type by the outcome, its time the line's, its data from the line's fields.
func outcomeEvent(seq int64, dest string, line redis.XMessage) ChannelEvent {
	a := attemptOf(line)
	typ := outcomeType(a.Outcome)
	m := longMessageID(str(line.Values["m"]))
	if str(line.Values["m"]) == "=" { // the relay's own id for the event (short_id)
		m = destination.MessageID(dest, a.EventID)
	}
	v := map[string]any{"e": line.Values["event_id"], "x": line.Values["message"], "m": m}
	for _, k := range []string{"t", "f", "g"} {
		if x, ok := line.Values[k]; ok {
			v[k] = x
		}
	}
	return ChannelEvent{Sequence: seq, Type: typ, Time: a.At, Data: outcomeData(dest, typ, a.At, v)}
}

// outcomeData is the data of a delivery's outcome from its short form: the event's
// fields, and the card fields the outcome changed, as the card holds them (the last
// delivery or failure at the event's time, the count of failures in a row and the
// failing warning when they moved).
func outcomeData(dest, typ string, at time.Time, v map[string]any) json.RawMessage {
	type lastDelivery struct {
		At      string `json:"at"`
		EventID string `json:"event_id"`
	}
	type lastFailure struct {
		At      string `json:"at"`
		EventID string `json:"event_id"`
		Class   string `json:"class"`
		Message string `json:"message"`
	}
	class, iso, id := outcomeClass(typ), at.Format(time.RFC3339Nano), longEventID(str(v["e"]))
	var sentence string
	if x, ok := v["x"]; ok {
		sentence = longMessage(class, str(x))
	}
	state := map[string]any{}
	switch class {
	case KindDelivered:
		state["last_delivery"] = lastDelivery{iso, id}
	case KindRejected, KindNotTaken:
		state["last_failure"] = lastFailure{iso, id, class, sentence}
	}
	if f, ok := v["f"].(string); ok {
		state["consecutive_failures"], _ = strconv.Atoi(f)
	}
	if g, ok := v["g"].(string); ok {
		if g == "" {
			state["failing"] = nil
		} else {
			state["failing"] = json.RawMessage(g)
		}
	}
	data := map[string]any{"destination": dest, "event_id": id, "class": class, "state": state}
	if m := str(v["m"]); m != "" {
		data["message_id"] = m
	}
	if sentence != "" {
		data["message"] = sentence
	}
	if v["t"] == "1" {
		data["test"] = true
	}
	b, _ := json.Marshal(data) // strings, numbers and stored JSON: always marshals
	return b
}
