package store

import (
	"context"
	"encoding/json"
	"regexp"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/destination"
)

// TestAttemptLinesReadBackExactlyWhatWasWritten: the attempt log keeps its lines short
// (a Fetcher ce-id as 17 bytes, the outcome as a digit, a delivery's own word left out),
// and the attempts page reads back every event id, outcome and message exactly as the
// delivery engine gave them, however odd, and smaller than the plain form.
func TestAttemptLinesReadBackExactlyWhatWasWritten(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *Store) {
		ctx := context.Background()
		r := Ref{Account: "acct_lines", ID: "orders", Connector: "eventbridge"}
		token, ids := activeWithLease(t, st, r)
		lines := []struct{ kind, eventID, message, messageID string }{
			{KindDelivered, "fetcher.job.completed.3f0c9a8e-1b2d-4c5e-8f90-a1b2c3d4e5f6", "delivered", "11710aed-b79e-4468-a20b-bb3c0c3b4860"},
			{KindRejected, "fetcher.job.failed.00000000-0000-0000-0000-000000000000", "AccessDenied: the role refuses", ""},
			{KindDelivered, "fetcher.job.cancelled.ffffffff-ffff-ffff-ffff-ffffffffffff", "delivered", "49651234567890123456789012345678901234567890123456789012"},
			{KindDelivered, "fetcher.job.completed.3F0C9A8E-1B2D-4C5E-8F90-A1B2C3D4E5F6", "", "4965123456789012345678901234567890123456789012345678901"}, // upper case: kept as it is
			{KindNotTaken, "fetcher.job.completed.3f0c9a8e-1b2d-4c5e-8f90-a1b2c3d4e5f", "\x00ThrottlingException", ""},
			{KindRejected, "\x01not a fetcher id", "rejected", ""},
			{KindDelivered, "\x04", "delivered to the bus", "0a1b2c3d4e5f60718293a4b5c6d7e8f9"},
			{KindExpired, "relay.test.abc", "\x00", ""},
			{KindRejected, "", "0", ""},
			{KindDelivered, "ev", "", "11710AED-B79E-4468-A20B-BB3C0C3B4860"},
			{KindDelivered, "ev", "", "1234567"},
			{KindDelivered, "ev", "", "\x03"},
			{KindDelivered, "ev", "", "\x01abc"},
			{KindDelivered, "ev", "", "12345678901234567f"},
			{KindDelivered, "ev-own", "", destination.MessageID("orders", "ev-own")}, // the relay's own: stored as "="
			{KindDelivered, "ev", "", "="},
		}
		for i, l := range lines {
			cursor := ids[i%2]
			if _, err := st.Commit(ctx, Commit{Ref: r, Token: token, Kind: l.kind, Cursor: cursor, EventID: l.eventID,
				MessageID: l.messageID, Message: l.message, DisableAfter: 20, ChannelRetention: time.Hour, AttemptsRetention: time.Hour}); err != nil {
				t.Fatalf("commit %d: %v", i, err)
			}
		}
		got, err := st.Attempts(ctx, r, 0, 100)
		if err != nil || len(got) != len(lines) {
			t.Fatalf("attempts: %d lines, %v; want %d", len(got), err, len(lines))
		}
		for i, l := range lines {
			a := got[len(lines)-1-i] // newest first
			if a.EventID != l.eventID || a.Outcome != l.kind || a.Message != l.message {
				t.Errorf("line %d reads back %q %q %q, want %q %q %q", i+1, a.EventID, a.Outcome, a.Message, l.eventID, l.kind, l.message)
			}
			if one, err := st.AttemptAt(ctx, r, a.N); err != nil || one != a {
				t.Errorf("line %d alone: %+v, %v; want %+v", a.N, one, err, a)
			}
		}
		// The destination's channel carries the same event ids and sentences.
		page, err := st.ReadChannel(ctx, r.Account, DestinationChannel(r.ID), 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		i := 0
		for _, ev := range page.Events {
			var d struct {
				EventID   string  `json:"event_id"`
				Message   *string `json:"message"`
				MessageID string  `json:"message_id"`
			}
			if outcomeClass(ev.Type) == "" {
				continue
			}
			if err := json.Unmarshal(ev.Data, &d); err != nil || i >= len(lines) {
				t.Fatalf("channel event %s: %s (%v)", ev.Type, ev.Data, err)
			}
			want := lines[i]
			if d.EventID != want.eventID || (want.message == "") != (d.Message == nil) || (d.Message != nil && *d.Message != want.message) || d.MessageID != want.messageID {
				t.Errorf("channel event %d is %s, want event id %q, message %q and message id %q", i+1, ev.Data, want.eventID, want.message, want.messageID)
			}
			i++
		}
		if i != len(lines) {
			t.Errorf("%d outcome events on the channel, want %d", i, len(lines))
		}
		own, err := st.Client().XRange(ctx, attemptsKey(r.Account, r.ID), "15-0", "15-0").Result()
		if err != nil || len(own) != 1 || str(own[0].Values["m"]) != "=" {
			t.Fatalf("line 15 is stored as %+v (%v), want its message id, the relay's own, as =", own, err)
		}
		raw, err := st.Client().XRange(ctx, attemptsKey(r.Account, r.ID), "1-0", "1-0").Result()
		if err != nil || len(raw) != 1 || len(str(raw[0].Values["event_id"])) != 17 || str(raw[0].Values["message"]) != "" ||
			len(str(raw[0].Values["m"])) != 17 {
			t.Fatalf("the first line is stored as %+v (%v), want a 17-byte event id, a 17-byte message id and no message", raw, err)
		}
	})
}

// The outcomes table reads add_attempt's outcome_code back: the same code for each
// outcome, and an event type for exactly the four a channel event reports.
func TestOutcomeCodesAreAddAttemptsOwn(t *testing.T) {
	m := regexp.MustCompile(`local outcome_code = \{([^}]*)\}`).FindStringSubmatch(luaPrelude)
	if m == nil {
		t.Fatal("no outcome_code table in luaPrelude")
	}
	codes := regexp.MustCompile(`(\w+) = '(\d)'`).FindAllStringSubmatch(m[1], -1)
	if len(codes) != len(outcomes) {
		t.Fatalf("outcome_code has %d outcomes, the table %d", len(codes), len(outcomes))
	}
	for _, c := range codes {
		if got, ok := outcomeOfCode(c[2]); !ok || got != c[1] {
			t.Errorf("code %s reads back as %q, want %q", c[2], got, c[1])
		}
	}
	for _, kind := range []string{KindDelivered, KindRejected, KindNotTaken, KindExpired} {
		if typ := outcomeType(kind); typ == "" || outcomeClass(typ) != kind {
			t.Errorf("%s makes event type %q, which reads back as %q", kind, typ, outcomeClass(typ))
		}
	}
	if outcomeType("replayed") != "" || outcomeClass("") != "" {
		t.Error("an outcome with no event has an event type")
	}
}
