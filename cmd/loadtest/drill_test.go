package main

import (
	"slices"
	"testing"

	"github.com/mercamap/relay/internal/store"
)

// once is an event published once and confirmed, as the seq-th publish.
func once(id string, seq int) *event {
	return &event{id: id, confirmed: true, firstSeq: seq, lastSeq: seq, confirmSeq: seq}
}

func TestCheckDestCountsDuplicatesOrderBreaksAndMissingEvents(t *testing.T) {
	id := func(n string) string { return "fetcher.job.completed." + n }
	log := []store.LogEntry{
		{Entry: store.Entry{EventID: id("a"), Type: "job.completed"}},
		{Entry: store.Entry{EventID: "fetcher.job.failed.b", Type: "job.failed"}},
		{Entry: store.Entry{EventID: id("c"), Type: "job.completed"}},
		{Entry: store.Entry{EventID: id("d"), Type: "job.completed"}},
		{Entry: store.Entry{EventID: id("e"), Type: "job.completed"}},
	}
	published := map[string]*event{}
	for i, le := range log {
		published[le.EventID] = once(le.EventID, i+1)
	}
	stream := drillDest{"s", "kinesis", []string{"job.completed"}}

	// a, c, a again (a duplicate), e before d (d was confirmed before e was sent: one
	// break), c again.
	r := checkDest(stream, log, []string{id("a"), id("c"), id("a"), id("e"), id("d"), id("c")}, published)
	if r.expected != 4 || r.unique != 4 || r.dups != 2 || r.dupIDs != 2 || r.orderBreaks != 1 || r.missing != 0 || r.unexpected != 0 {
		t.Errorf("got %+v", r)
	}
	if want := []string{"completed.a ×2", "completed.c ×2"}; !slices.Equal(r.dupList, want) {
		t.Errorf("duplicates listed %q, want %q", r.dupList, want)
	}

	// The filtered-out job.failed arriving is unexpected; e never arriving is missing.
	r = checkDest(stream, log, []string{id("a"), "fetcher.job.failed.b", id("c"), id("d")}, published)
	if r.unexpected != 1 || r.missing != 1 || r.missingIDs[0] != id("e") || r.orderBreaks != 0 || r.dups != 0 {
		t.Errorf("got %+v", r)
	}
}

func TestOrderBreaksFollowThePublishersConfirmedOrder(t *testing.T) {
	// x was first published as #2, its confirm lost, and resent as #5 (confirmed); y was
	// published once as #3, z as #6.
	published := map[string]*event{
		"w": once("w", 1),
		"x": {id: "x", confirmed: true, firstSeq: 2, lastSeq: 5, confirmSeq: 5},
		"y": once("y", 3),
		"z": once("z", 6),
	}
	for _, c := range []struct {
		order  []string
		breaks int
	}{
		{[]string{"w", "x", "y", "z"}, 0},
		{[]string{"w", "y", "x", "z"}, 0}, // x may be queued at its resend, after y
		{[]string{"x", "w", "y", "z"}, 1}, // w's confirmed send (#1) came before x's first (#2): x is early
		{[]string{"w", "y", "z", "x"}, 1}, // z was published after x's confirm: z is early
		{[]string{"y", "w", "x", "z"}, 1}, // y was published after w's confirm: y is early
		{[]string{"z", "y", "x", "w"}, 3},
	} {
		if n, first := orderBreaks(c.order, published); n != c.breaks {
			t.Errorf("%v: %d breaks (%s), want %d", c.order, n, first, c.breaks)
		}
	}
}
