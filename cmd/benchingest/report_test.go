package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// results are three runs whose relay/bare ratios are 0.95, 0.85 and 0.91.
func threeRuns() []result {
	run := func(relayEvents int) result {
		return result{bare: phase{events: 100, elapsed: time.Second}, relay: phase{events: relayEvents, elapsed: time.Second}}
	}
	return []result{run(95), run(85), run(91)}
}

func TestReportJudgesTheIngestAimOfItsSize(t *testing.T) {
	for _, c := range []struct {
		size int
		want string
	}{
		{1024, "Aims: relay ≥ 90% of bare at 1024 B: met (91%)"},
		{16384, "Aims: relay ≥ 60% of bare at 16384 B: met (91%)"},
		{4096, "(The ingest aims are for events of 1, 16 and 64 KB; relay/bare here: 91%.)"},
	} {
		var out bytes.Buffer
		report(&out, config{size: c.size, events: 100, runs: 3}, threeRuns(), "0")
		if !strings.Contains(out.String(), c.want) {
			t.Errorf("%d B: report lacks %q:\n%s", c.size, c.want, out.String())
		}
	}
	slow := threeRuns()
	slow[2].relay.events = 89 // median 0.89
	var out bytes.Buffer
	report(&out, config{size: 1024, events: 100, runs: 3}, slow, "0")
	if !strings.Contains(out.String(), "at 1024 B: NOT met (89%)") {
		t.Errorf("89%% of bare at 1 KB is short of the 90%% aim:\n%s", out.String())
	}
}

func TestSummaryLinesAreAppended(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ingest.jsonl")
	for _, label := range []string{"", "Redis Cluster"} {
		if err := appendSummary(path, summarize(config{size: 1024, redisLabel: label}, threeRuns())); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"size":1024,"redis":"","ratios":[0.95,0.85,0.91],"median":0.91}` + "\n" +
		`{"size":1024,"redis":"Redis Cluster","ratios":[0.95,0.85,0.91],"median":0.91}` + "\n"
	if string(b) != want {
		t.Errorf("summary file:\n%s\nwant:\n%s", b, want)
	}
}
