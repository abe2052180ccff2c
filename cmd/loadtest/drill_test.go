package main

import (
	"slices"
	"testing"

	"github.com/mercamap/relay/internal/store"
)

func TestCheckDestCountsDuplicatesOrderBreaksAndMissingEvents(t *testing.T) {
	id := func(n string) string { return "fetcher.job.completed." + n }
	log := []store.LogEntry{
		{Entry: store.Entry{EventID: id("a"), Type: "job.completed"}},
		{Entry: store.Entry{EventID: "fetcher.job.failed.b", Type: "job.failed"}},
		{Entry: store.Entry{EventID: id("c"), Type: "job.completed"}},
		{Entry: store.Entry{EventID: id("d"), Type: "job.completed"}},
		{Entry: store.Entry{EventID: id("e"), Type: "job.completed"}},
	}
	stream := drillDest{"s", "kinesis", []string{"job.completed"}}

	// a, c, a again (a duplicate), e before d (e early and d late: two order breaks), c again.
	r := checkDest(stream, log, []string{id("a"), id("c"), id("a"), id("e"), id("d"), id("c")})
	if r.expected != 4 || r.unique != 4 || r.dups != 2 || r.dupIDs != 2 || r.orderBreaks != 2 || r.missing != 0 || r.unexpected != 0 {
		t.Errorf("got %+v", r)
	}
	if want := []string{"completed.a ×2", "completed.c ×2"}; !slices.Equal(r.dupList, want) {
		t.Errorf("duplicates listed %q, want %q", r.dupList, want)
	}

	// The filtered-out job.failed arriving is unexpected; e never arriving is missing.
	r = checkDest(stream, log, []string{id("a"), "fetcher.job.failed.b", id("c"), id("d")})
	if r.unexpected != 1 || r.missing != 1 || r.missingIDs[0] != id("e") || r.orderBreaks != 0 || r.dups != 0 {
		t.Errorf("got %+v", r)
	}
}
