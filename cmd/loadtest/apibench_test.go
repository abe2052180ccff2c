package main

import (
	"strings"
	"testing"
	"time"
)

// TestAPIAimsAreMetOnlyAtFullScaleAndSayTheirFigures: the API rows' aims read their
// figures; a run smaller than 100,000 destinations never meets the scale aims, and a
// failed run says why instead of a figure.
func TestAPIAimsAreMetOnlyAtFullScaleAndSayTheirFigures(t *testing.T) {
	full := &apiResult{dests: aimAPIDests, createsPerS: 1200, createsTook: 83 * time.Second,
		firstLat: []time.Duration{100 * time.Millisecond, 200 * time.Millisecond}, restartAll: 25 * time.Second, hwm: 900 << 10,
		deliveries: 6000}
	// The config row of as many destinations: 5,600 against its bare fan-out's 8,000/s.
	cfgRow := []benchResult{{benchRun: benchRun{dests: aimAPIDests, events: 1, size: 1024, repeats: 1},
		reps: []repResult{{perSec: 5600, bare: &bareResult{perSec: 8000}}}}}
	for _, a := range apiAims(full, cfgRow) {
		if a.state != met {
			t.Errorf("%q: %s at full scale, want met (%s)", a.what, a.state, a.figure)
		}
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
	slow.createsPerS, slow.refused = 999, 0
	if apiAims(&slow, cfgRow)[0].state != notMet {
		t.Error("999 creates/s met the 1,000/s aim")
	}
	behind := *full
	behind.deliveries = 5000 // 62.5% of the bare fan-out, the config row 70%
	if a := apiAims(&behind, cfgRow)[4]; a.state != notMet || !strings.Contains(a.figure, "62% (5000 against the bare fan-out's 8000/s); the config row 70%") {
		t.Errorf("API deliveries behind the config row's: %s %q", a.state, a.figure)
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
