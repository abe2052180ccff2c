package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A batch that mixes new events and duplicates (of earlier batches and of its own
// events, on an account whose log exists and on one whose log does not) stores each
// new event once, in batch order, and leaves the log as the duplicates found it: same
// entries, same last id, same entries-added, no key left over.
func TestDuplicatesInABatchLeaveTheLogAsItWas(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *Store) {
		ctx := context.Background()
		acct := "acct_dups_" + strconv.FormatInt(time.Now().UnixNano(), 36)
		fresh := acct + "_fresh" // its only event is one it has seen: it never gets a log
		ev := func(id string, accts ...string) Append {
			return Append{Entry: Entry{EventID: id, Type: "job.completed", Data: []byte(`{"jobId":"` + id + `"}`)}, Accounts: accts}
		}
		first, err := st.AppendBatch(ctx, []Append{ev("ev-1", acct), ev("ev-2", acct)}, time.Hour, time.Hour)
		if err != nil || first[0].Duplicate() || first[1].Duplicate() {
			t.Fatalf("first batch: %v, %v", first, err)
		}
		// fresh has seen ev-9 (its marker is there) but holds no log.
		if err := st.rdb.Set(ctx, seenKey(fresh, "ev-9"), "1", time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		before := streamInfo(t, st, acct)

		got, err := st.AppendBatch(ctx, []Append{
			ev("ev-1", acct),        // seen in the first batch
			ev("ev-3", acct),        // new, right after a duplicate
			ev("ev-3", acct),        // its own duplicate, in the same batch
			ev("ev-2", acct),        // seen, last of the account's transaction
			ev("ev-9", fresh, acct), // seen by fresh, new to acct
		}, time.Hour, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		want := []bool{true, false, true, true, false}
		for i, w := range want {
			if got[i].Duplicate() != w {
				t.Fatalf("event %d: %v, duplicate %v, want %v", i, got[i], got[i].Duplicate(), w)
			}
		}
		if got[4][0] != "" || got[4][1] == "" {
			t.Fatalf("ev-9: %v, want a duplicate for %s and a log id in %s", got[4], fresh, acct)
		}

		log, err := st.ReadLog(ctx, acct, "0", 10)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, e := range log {
			ids = append(ids, e.EventID)
		}
		if want := "[ev-1 ev-2 ev-3 ev-9]"; fmt.Sprint(ids) != want {
			t.Fatalf("log of %s: %v, want %s", acct, ids, want)
		}
		if log[2].ID != got[1][0] || log[3].ID != got[4][1] {
			t.Fatalf("log ids %s, %s; AppendBatch said %s, %s", log[2].ID, log[3].ID, got[1][0], got[4][1])
		}
		after := streamInfo(t, st, acct)
		if after.added != before.added+2 {
			t.Fatalf("entries-added %d after two new events on %d: the duplicates counted", after.added, before.added)
		}
		for _, key := range []string{logKey(fresh), heldKey(fresh), heldKey(acct)} {
			if n, err := st.rdb.Exists(ctx, key).Result(); err != nil || n != 0 {
				t.Fatalf("%s: exists %d (%v), want no such key", key, n, err)
			}
		}

		// Only duplicates: the log keeps its last id.
		if _, err := st.AppendBatch(ctx, []Append{ev("ev-3", acct), ev("ev-1", acct)}, time.Hour, time.Hour); err != nil {
			t.Fatal(err)
		}
		if again := streamInfo(t, st, acct); again != after {
			t.Fatalf("after a batch of duplicates the log is %+v, was %+v", again, after)
		}
	})
}

type stream struct {
	length, added int64
	lastID        string
}

func streamInfo(t *testing.T, st *Store, acct string) stream {
	t.Helper()
	info, err := st.rdb.XInfoStream(context.Background(), logKey(acct)).Result()
	if err != nil {
		t.Fatal(err)
	}
	return stream{info.Length, info.EntriesAdded, info.LastGeneratedID}
}

// TestEachAppendSaysWhatItAddedAndTheEntryItFollows: the runs of an append name, per
// account, the entries it added (duplicates left out) and the log's last id before
// them, so that the log read back holds the run right after that id; the very first
// append of a log, whose start is not known, says so ("").
func TestEachAppendSaysWhatItAddedAndTheEntryItFollows(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *Store) {
		ctx := context.Background()
		a := "acct_runs_" + strconv.FormatInt(time.Now().UnixNano(), 36)
		b := a + "_b"
		ev := func(id string, accts ...string) Append {
			return Append{Entry: Entry{EventID: id, Type: "job.completed", Data: []byte(`{"jobId":"` + id + `"}`)}, Accounts: accts}
		}
		_, runs, err := st.AppendBatchRuns(ctx, []Append{ev("ev-1", a)}, time.Hour, time.Hour)
		if err != nil || len(runs) != 1 || runs[0].After != "" || len(runs[0].Entries) != 1 {
			t.Fatalf("first append: %+v, %v; want one run of one entry, after nothing known", runs, err)
		}
		check := func(runs []Run) {
			t.Helper()
			for _, r := range runs {
				log, err := st.ReadLog(ctx, r.Account, r.After, int64(len(r.Entries)))
				if err != nil {
					t.Fatal(err)
				}
				if len(log) != len(r.Entries) {
					t.Fatalf("%s: %d entries after %s, the run has %d", r.Account, len(log), r.After, len(r.Entries))
				}
				for i, e := range log {
					if e.ID != r.Entries[i].ID || e.EventID != r.Entries[i].EventID || string(e.Data) != string(r.Entries[i].Data) {
						t.Fatalf("%s: the log holds %s %s after %s, the run says %s %s", r.Account, e.ID, e.EventID, r.After, r.Entries[i].ID, r.Entries[i].EventID)
					}
				}
			}
		}
		for round := range 3 {
			n := fmt.Sprint(round)
			_, runs, err := st.AppendBatchRuns(ctx, []Append{
				ev("ev-1", a),    // a duplicate: not in the run
				ev("x-"+n, a, b), // both accounts
				ev("y-"+n, a),    // a only
				ev("x-"+n, a, b), // its own duplicate
				ev("z-"+n, b),    // b only
			}, time.Hour, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string][]string{}
			for _, r := range runs {
				for _, e := range r.Entries {
					got[r.Account] = append(got[r.Account], e.EventID)
				}
				if r.After == "" && !(r.Account == b && round == 0) {
					t.Fatalf("round %d: %s's run follows nothing known", round, r.Account)
				}
			}
			if fmt.Sprint(got[a]) != "[x-"+n+" y-"+n+"]" || fmt.Sprint(got[b]) != "[x-"+n+" z-"+n+"]" {
				t.Fatalf("round %d: runs %v", round, got)
			}
			check(runs)
		}
	})
}

// TestTheScriptAndTheTransactionStoreTheSame: an append of small entries (one call of
// appendScript) and one with an entry too large for it (the transaction) leave the same
// things in Redis: the log, each event's marker holding its log id, the ordinal and the
// index entry of each; a duplicate is one whichever way its first copy came. A server
// that lost its scripts (SCRIPT FLUSH, as after a restart; the single server only)
// takes the next append all the same.
func TestTheScriptAndTheTransactionStoreTheSame(t *testing.T) {
	onEachRedis(t, func(t *testing.T, st *Store) {
		ctx := context.Background()
		acct := "acct_paths_" + strconv.FormatInt(time.Now().UnixNano(), 36)
		large := make([]byte, 3*scriptEntryMax) // random hex compresses to about half: still past the bound
		for i := range large {
			large[i] = "0123456789abcdef"[rand.IntN(16)]
		}
		ev := func(id string, big bool) Append {
			data := []byte(`{"jobId":"` + id + `"}`)
			if big {
				data = []byte(`{"jobId":"` + id + `","pad":"` + string(large) + `"}`)
			}
			return Append{Entry: Entry{EventID: id, Type: "job.completed", Data: data}, Accounts: []string{acct}}
		}
		if a := ev("x", true); len(a.Entry.encoded()) <= scriptEntryMax {
			t.Fatalf("the large entry is %d bytes stored, not past %d", len(a.Entry.encoded()), scriptEntryMax)
		}
		if strings.HasSuffix(t.Name(), "/single") { // a server of this test's own; the Cluster is shared
			if err := st.rdb.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		var want []string // event ids in the order they must be in the log
		for round, batch := range [][]Append{
			{ev("s-1", false), ev("s-2", false)}, // the script (after SCRIPT FLUSH)
			{ev("l-1", true), ev("s-3", false)},  // the transaction
			{ev("s-1", true), ev("l-1", false)},  // duplicates, each of the other way
			{ev("s-4", false), ev("s-4", false)}, // the script, with its own duplicate
			{ev("l-1", false), ev("l-2", true)},  // the transaction, with a duplicate
		} {
			got, err := st.AppendBatch(ctx, batch, time.Hour, time.Hour)
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			seen := map[string]bool{}
			for i, a := range batch {
				dup := got[i].Duplicate()
				if isNew := !slices.Contains(want, a.Entry.EventID) && !seen[a.Entry.EventID]; isNew == dup {
					t.Fatalf("round %d, %s: duplicate %v", round, a.Entry.EventID, dup)
				}
				if !dup {
					want = append(want, a.Entry.EventID)
				}
				seen[a.Entry.EventID] = true
			}
		}
		log, err := st.ReadLog(ctx, acct, "0", 20)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, e := range log {
			ids = append(ids, e.EventID)
		}
		if fmt.Sprint(ids) != fmt.Sprint(want) {
			t.Fatalf("log %v, want %v", ids, want)
		}
		ord, err := st.rdb.XRange(ctx, ordKey(acct), "-", "+").Result()
		if err != nil || len(ord) != len(log) {
			t.Fatalf("index: %d entries (%v), the log %d", len(ord), err, len(log))
		}
		for i, e := range log {
			if m, err := st.marker(ctx, acct, e.EventID); err != nil || m != e.ID {
				t.Fatalf("%s: marker %q (%v), want its log id %s", e.EventID, m, err, e.ID)
			}
			if ord[i].ID != e.ID || fmt.Sprint(ord[i].Values["k"]) != strconv.Itoa(i+1) {
				t.Fatalf("index entry %d: %s %v, want %s with ordinal %d", i, ord[i].ID, ord[i].Values, e.ID, i+1)
			}
		}
		if n, err := st.rdb.HGet(ctx, posKey(acct), "n").Int(); err != nil || n != len(log) {
			t.Fatalf("position n %d (%v), want %d", n, err, len(log))
		}
	})
}
