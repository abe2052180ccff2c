package main

import (
	"strings"
	"testing"
	"time"
)

// chunks is five chunks of 20,000 creates, each taking took.
func chunks(took time.Duration) []createChunk {
	var cs []createChunk
	for range 5 {
		cs = append(cs, createChunk{n: 20000, took: took, sts: 40000, redisCalls: 200000, redisCPU: time.Second})
	}
	return cs
}

// TestAPIAimsJudgeCreatesAndRestartsAgainstTheirBareYardsticks: the creates and the
// restart are judged on their ratio to the bare path run in turn with them, with the
// interval of the chunks or restarts (Student's t where they are too few for their
// smallest and largest to hold the median with 99%: 5 chunks, 3 restarts); a run smaller
// than 100,000 destinations never meets the scale aims, and a failed run says why
// instead of a figure.
func TestAPIAimsJudgeCreatesAndRestartsAgainstTheirBareYardsticks(t *testing.T) {
	full := &apiResult{dests: aimAPIDests, createsPerS: 1000, createsTook: 100 * time.Second,
		creates: chunks(20 * time.Second), bareCreates: chunks(16 * time.Second), // 80%
		firstLat: []time.Duration{100 * time.Millisecond, 200 * time.Millisecond},
		// 1.1×, 1.075×, 1.05× the bare restart: 0.94–1.23× (Student's t of 3).
		restarts: []time.Duration{44 * time.Second, 43 * time.Second, 42 * time.Second}, bareRestarts: []time.Duration{40 * time.Second, 40 * time.Second, 40 * time.Second},
		hwm: 900 << 10, deliveries: []float64{6000, 5950, 6050}} // 5720–6293/s (Student's t of 3): 102–112% of the config row's
	// The config row of as many destinations: 5,600 against its bare fan-out's 8,000/s.
	cfgRow := []benchResult{{benchRun: benchRun{dests: aimAPIDests, events: 1, size: 1024, repeats: 1},
		reps: []repResult{{perSec: 5600, bare: &bareResult{perSec: 8000}}}}}
	for _, a := range apiAims(full, cfgRow) {
		if a.state != met {
			t.Errorf("%q: %s at full scale, want met (%s)", a.what, a.state, a.figure)
		}
	}
	if a := apiAims(full, cfgRow); !strings.Contains(a[0].figure, "80% (80–80%, 5 chunks); 1000 against 1250/s") ||
		!strings.Contains(a[0].figure, "2.0 STS calls, 10.0 Redis commands and 50 µs of Redis a create") ||
		!strings.Contains(a[2].figure, "1.07× (0.94–1.23, 3 restarts); restarts 44s / 43s / 42s against 40s / 40s / 40s") {
		t.Errorf("figures: %q; %q", a[0].figure, a[2].figure)
	}
	small := *full
	small.dests = 2000
	aims := apiAims(&small, cfgRow)
	if aims[0].state != met || aims[1].state != met || aims[2].state != notMet || aims[3].state != notMet || aims[4].state != notMet {
		t.Errorf("a 2,000-destination run: %v %v %v %v %v; want the scale aims not met", aims[0].state, aims[1].state, aims[2].state, aims[3].state, aims[4].state)
	}
	if !strings.Contains(aims[2].what, "this run: 2,000 destinations") {
		t.Errorf("the restart aim of a small run does not say its scale: %q", aims[2].what)
	}
	slow := *full
	slow.creates = append(chunks(20 * time.Second)[:4], createChunk{n: 20000, took: 21 * time.Second}) // one chunk at 76%
	if a := apiAims(&slow, cfgRow)[0]; a.state != unsure {
		t.Errorf("creates at 76–80%% of the bare path: %s, want unsure (%s)", a.state, a.figure)
	}
	slower := *full
	slower.creates = chunks(21 * time.Second)
	if a := apiAims(&slower, cfgRow)[0]; a.state != notMet {
		t.Errorf("creates at 76%% of the bare path in every chunk: %s, want NOT met (%s)", a.state, a.figure)
	}
	longRestart := *full
	longRestart.restarts = []time.Duration{60 * time.Second, 45 * time.Second, 51 * time.Second} // 1.5×, 1.125×, 1.275×
	if a := apiAims(&longRestart, cfgRow)[2]; a.state != unsure {
		t.Errorf("restarts crossing 1.25×: %s, want unsure (%s)", a.state, a.figure)
	}
	behind := *full
	behind.deliveries = []float64{5000, 4950, 5050} // 4721–5295/s (Student's t of 3), 59–66% of the bare fan-out; the config row 70%
	if a := apiAims(&behind, cfgRow)[4]; a.state != notMet || !strings.Contains(a.figure, "89% (84–95%, 3 restarts) of the config row's (5000/s after each restart, median, against its 5600/s; the bare fan-out 8000/s: 62% against 70%)") {
		t.Errorf("API deliveries behind the config row's: %s %q", a.state, a.figure)
	}
	level := *full
	level.deliveries = []float64{5000, 5600, 6000} // 62.5–75%, the config row 70%
	if a := apiAims(&level, cfgRow)[4]; a.state != unsure {
		t.Errorf("API deliveries whose spread holds the config row's: %s %q, want unsure", a.state, a.figure)
	}
	if a := apiAims(full, nil)[4]; a.state != unmeasured || !strings.Contains(a.figure, "no config row") {
		t.Errorf("without the config row: %s %q; want not judged, saying why", a.state, a.figure)
	}
	failed := apiAims(&apiResult{dests: aimAPIDests, err: "probe 3: no delivery within 30 s of the create"}, cfgRow)
	for _, a := range failed {
		if a.state != unmeasured || !strings.Contains(a.figure, "probe 3") {
			t.Errorf("%q of a failed run: %s %q; want not measured, saying why", a.what, a.state, a.figure)
		}
	}
}
