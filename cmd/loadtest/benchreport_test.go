package main

import (
	"strings"
	"testing"
	"time"
)

func TestBenchReportJudgesTheAimsOnlyWhereTheyApply(t *testing.T) {
	ms := func(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }
	flat := func(d time.Duration) latencies { return latencies{d, d, d, d} }
	results := []benchResult{
		{benchRun: benchRun{dests: 1, events: 4, rate: 200, size: 1024}, perSec: 200, lat: flat(ms(3)),
			bare: &bareResult{perSec: 200, lat: flat(ms(1))}}, // adds 2 ms: met
		{benchRun: benchRun{dests: 1, events: 4, rate: 100, size: 65536}, perSec: 100, lat: flat(ms(9)),
			bare: &bareResult{perSec: 100, lat: flat(ms(2))}}, // adds 7 ms, but the aim is for 1 KB
		{benchRun: benchRun{dests: 10000, events: 10, size: 1024}, perSec: 4000, lat: flat(time.Second), hwm: 310 * 1024},
	}
	out := benchReport(results, time.Second, 10000, ms(0.1), ms(0.3), "0 0 0", "0 0 0")
	for _, want := range []string{
		"| 1            | 1024        | 4      | 200/s",
		"Aim, relay-added p99 < 5ms for one destination of 1024 B events: 2ms at 200/s: met.",
		"Relay-added p99 with 65536 B events at 100/s: 7ms (the aim is set for 1024 B events).",
		"peak RSS 310.0 MiB with 10000: NOT met.",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "NOT met") != 1 {
		t.Errorf("only the memory aim is missed here:\n%s", out)
	}
}
