package store

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/mercamap/relay/internal/testpeer"
)

// TestALongFailureIsStoredBoundedWithItsHead: a 70 KB failure sentence, committed until
// it disables the destination, is kept as its head on the card, in the disable reason,
// the attempt log, every channel event and the operator event.
func TestALongFailureIsStoredBoundedWithItsHead(t *testing.T) {
	st, err := Open(testpeer.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	r := Ref{Account: "acct_long", ID: "orders", Connector: "eventbridge"}
	if _, err := st.Ensure(ctx, r, "ext-1", "fp", time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SetupChecked(ctx, r, true, PendingCheck{}, time.Hour); err != nil { // its role is set up
		t.Fatal(err)
	}
	token, err := st.AcquireLease(ctx, r, "replica", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	head := "the bus refused the write (AccessDeniedException: "
	long := head + strings.Repeat("é and more words from the bus ", 2400) + ")" // ~74 KB
	for i := range 2 {
		if _, err := st.Commit(ctx, Commit{Ref: r, Token: token, Kind: KindRejected, EventID: "ev", Message: long,
			DisableAfter: 2, ChannelRetention: time.Hour, AttemptsRetention: time.Hour}); err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
	}
	state, err := st.LoadState(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	bounded := func(what, s string, max int) {
		t.Helper()
		if len(s) > max || !utf8.ValidString(s) {
			t.Errorf("%s is %d bytes (valid UTF-8: %v), want at most %d", what, len(s), utf8.ValidString(s), max)
		}
	}
	if state.LastFailure == nil || state.Disabled == nil {
		t.Fatalf("state %+v: want a last failure and disabled", state)
	}
	m := state.LastFailure.Message
	bounded("the card's last failure", m, MaxFailureText)
	if !strings.HasPrefix(m, head) || !strings.HasSuffix(m, "…") {
		t.Errorf("the card's last failure %.80q… does not keep the head and mark the cut", m)
	}
	bounded("the disable reason", state.Disabled.Reason, MaxFailureText+100)
	page, err := st.ReadChannel(ctx, r.Account, DestinationChannel(r.ID), 0, 100)
	if err != nil || len(page.Events) != 4 { // destination.activated, two rejections, the disable
		t.Fatalf("channel: %d events, %v; want 4", len(page.Events), err)
	}
	for _, ev := range page.Events {
		bounded("channel event "+ev.Type, string(ev.Data), 4*MaxFailureText)
	}
	attempts, err := st.Attempts(ctx, r, 0, 10)
	if err != nil || len(attempts) != 2 {
		t.Fatalf("attempts: %d, %v", len(attempts), err)
	}
	bounded("the attempt log's message", attempts[0].Message, MaxFailureText)
	out, err := st.Outbox(ctx, r.Account)
	if err != nil || len(out) != 1 {
		t.Fatalf("outbox: %d, %v", len(out), err)
	}
	bounded("the operator event", string(out[0].Body), 4*MaxFailureText)
}
