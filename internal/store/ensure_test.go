package store

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"
)

// A destination ensured with Announce (one added while the relay runs) tells its
// channel's and its account's watchers to load a snapshot that shows it, in the same
// call that makes it; ensured again, or without Announce, it tells nobody.
func TestADestinationAddedWhileRunningAsksTheAccountsWatchersForANewSnapshot(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *Store) {
		ctx := context.Background()
		acct := "acct_added_" + strconv.FormatInt(time.Now().UnixNano(), 36)
		quiet := Ref{Account: acct, ID: "from-config", Connector: "eventbridge"}
		added := Ref{Account: acct, ID: "from-api", Connector: "eventbridge"}
		if _, err := st.EnsureMany(ctx, []Ensured{{Ref: quiet, ExternalID: "ext-q", Fingerprint: "fp"}}, time.Hour); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			res, err := st.EnsureMany(ctx, []Ensured{{Ref: added, ExternalID: "ext-a", Fingerprint: "fp", Announce: true}}, time.Hour)
			if err != nil || len(res) != 1 {
				t.Fatal(res, err)
			}
		}
		types := func(channel string) []string {
			t.Helper()
			p, err := st.ReadChannel(ctx, acct, channel, 0, 100)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, ev := range p.Events {
				var d struct{ Destination, Reason string }
				if err := json.Unmarshal(ev.Data, &d); err != nil {
					t.Fatal(err)
				}
				out = append(out, ev.Type+" "+d.Destination+": "+d.Reason)
			}
			return out
		}
		want := "resync.required from-api: the destination was added"
		if got := types(AccountChannel(acct)); len(got) != 1 || got[0] != want {
			t.Errorf("the account's channel holds %q, want only %q", got, want)
		}
		if got := types(DestinationChannel(added.ID)); len(got) != 1 || got[0] != want {
			t.Errorf("the added destination's channel holds %q, want only %q", got, want)
		}
		if got := types(DestinationChannel(quiet.ID)); len(got) != 0 {
			t.Errorf("the config's destination's channel holds %q, want nothing", got)
		}
	})
}
