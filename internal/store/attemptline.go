package store

import (
	"encoding/hex"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// An attempt line is stored short by the scripts' add_attempt (lua.go); attemptOf reads
// it back exactly. Lines written before the short form read back as they were stored.

// outcomeOfCode is add_attempt's outcome_code the other way round.
var outcomeOfCode = map[string]string{"0": KindDelivered, "1": KindRejected, "2": KindNotTaken, "3": KindExpired,
	"4": "replayed", "5": "retry_queued"}

// attemptOf is the attempt a stored line holds.
func attemptOf(m redis.XMessage) Attempt {
	ms, _ := strconv.ParseInt(str(m.Values["at"]), 10, 64)
	outcome := str(m.Values["outcome"])
	if o, ok := outcomeOfCode[outcome]; ok {
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
