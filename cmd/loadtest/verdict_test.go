package main

import (
	"strings"
	"testing"
	"time"
)

func TestMedianRankHoldsTheMedianWithNinetyPercent(t *testing.T) {
	// n → k: x(k)…x(n+1-k); 5 runs: the smallest and the largest (93.75%), 8 and 9: the
	// second smallest and largest (93.0%, 96.1%), 12: the third (96.1%).
	for n, want := range map[int]int{1: 1, 3: 1, 5: 1, 6: 1, 7: 1, 8: 2, 9: 2, 12: 3} {
		if got := medianRank(n); got != want {
			t.Errorf("medianRank(%d) = %d, want %d", n, got, want)
		}
	}
	if p := binomBelow(5, 1); p != 1.0/32 {
		t.Errorf("P(Binomial(5, ½) < 1) = %v, want 1/32", p)
	}
}

func TestSpreadJudgesOnItsWholeInterval(t *testing.T) {
	s := spreadOf([]float64{1.3, 1.0, 1.05, 1.2, 1.1})
	if s.med != 1.1 || s.lo != 1.0 || s.hi != 1.3 || s.n != 5 {
		t.Fatalf("spreadOf = %+v, want median 1.1 in 1.0–1.3 of 5", s)
	}
	for target, want := range map[float64]aimState{1.3: met, 1.35: met, 1.25: unsure, 1.0: unsure, 0.99: notMet} {
		if got := s.atMost(target); got != want {
			t.Errorf("≤ %v: %s, want %s", target, got, want)
		}
	}
	for target, want := range map[float64]aimState{1.0: met, 0.9: met, 1.1: unsure, 1.31: notMet} {
		if got := s.atLeast(target); got != want {
			t.Errorf("≥ %v: %s, want %s", target, got, want)
		}
	}
	if got := (spread{}).atMost(1); got != unmeasured {
		t.Errorf("no figures: %s, want not measured", got)
	}
	if got, want := s.ratio("pairs"), "1.10× (1.00–1.30, 5 pairs)"; got != want {
		t.Errorf("ratio = %q, want %q", got, want)
	}
	if even := spreadOf([]float64{4, 1, 3, 2, 6, 5, 8, 7}); even.med != 4.5 || even.lo != 2 || even.hi != 7 {
		t.Errorf("8 runs: %+v, want median 4.5 in 2–7", even)
	}
}

// TestWholeSystemCPUCountsEveryProcessAndTheBrokerOnlyForThePipeline: a pair's relay run
// counts the relay, Redis, the broker, the bus and the publisher; the bare pipeline its
// load process, the bus and the broker; the bare fan-out no broker.
func TestWholeSystemCPUCountsEveryProcessAndTheBrokerOnlyForThePipeline(t *testing.T) {
	rep := repResult{relayCPU: 100 * time.Millisecond, redisCPU: []masterCPU{{"a", 20 * time.Millisecond}, {"b", 10 * time.Millisecond}},
		rabbitCPU: 40 * time.Millisecond, busCPU: 50 * time.Millisecond, loadCPU: 30 * time.Millisecond,
		bare: &bareResult{loadCPU: 100 * time.Millisecond, busCPU: 50 * time.Millisecond, rabbitCPU: 50 * time.Millisecond}}
	one := benchResult{benchRun: benchRun{dests: 1}, reps: []repResult{rep}}
	if got := one.cpuRatios(); len(got) != 1 || got[0] != 1.25 { // 250 ms against 200
		t.Errorf("one destination: %v, want [1.25]", got)
	}
	many := benchResult{benchRun: benchRun{dests: 1000}, reps: []repResult{rep, {bare: &bareResult{err: "failed"}}}}
	if got := many.cpuRatios(); len(got) != 1 || got[0] != 250.0/150 { // the fan-out's 150 ms, no broker; the failed pair left out
		t.Errorf("the fan-out: %v, want [1.67]", got)
	}
}

// TestARowRunsMorePairsUntilItsVerdictsSettle: a row of 5 pairs whose interval crosses
// its target is not settled, one on one side of it is; rows of up to 1,000 destinations
// may run 9 pairs, 10,000 seven, 100,000 and the memory rows no more than they ask.
func TestARowRunsMorePairsUntilItsVerdictsSettle(t *testing.T) {
	pair := func(relay time.Duration) repResult {
		return repResult{relayCPU: relay, lat: flat(ms(1)), bare: &bareResult{loadCPU: 100 * time.Millisecond, lat: flat(ms(1))}}
	}
	r := benchResult{benchRun: benchRun{dests: 1000, events: 20, size: 1024, repeats: 5}}
	for _, relay := range []time.Duration{100, 105, 100, 95, 100} {
		r.reps = append(r.reps, pair(relay*time.Millisecond))
	}
	if !r.settled() {
		t.Error("0.95–1.05× against ≤ 1.10×: not settled")
	}
	r.reps[4] = pair(115 * time.Millisecond)
	if r.settled() {
		t.Error("0.95–1.15× against ≤ 1.10×: settled")
	}
	lat := benchResult{benchRun: benchRun{dests: 1, events: 2000, rate: 200, size: 1024, repeats: 5}}
	for _, l := range []float64{1, 1.2, 1.4, 1.1, 1} {
		p := pair(100 * time.Millisecond)
		p.lat = flat(ms(l))
		lat.reps = append(lat.reps, p)
	}
	if lat.settled() {
		t.Error("p99 1–1.4× against ≤ 1.3×: settled")
	}
	for _, c := range []struct {
		run  benchRun
		most int
	}{
		{benchRun{dests: 1000, events: 20, repeats: 5}, 9},
		{benchRun{dests: 1, events: 2000, rate: 200, repeats: 5}, 9},
		{benchRun{dests: 10000, events: 3, repeats: 5}, 7},
		{benchRun{dests: 100000, events: 1, repeats: 3}, 3},
		{benchRun{dests: 1, events: 10000, repeats: 1}, 1},
		{benchRun{dests: 0, events: 20000, repeats: 3}, 3},
	} {
		if got := c.run.maxRepeats(); got != c.most {
			t.Errorf("%+v: at most %d pairs, want %d", c.run, got, c.most)
		}
	}
}

// TestTheThroughputRowOfOneDestinationIsJudgedNotAMemoryRow: 1:2000:0 of 5 pairs delivers
// 10,000 events in all, as many as the memory row's one run, and must still be judged
// (the runs at 5ab7759 left its aim "not measured" and read memory after it).
func TestTheThroughputRowOfOneDestinationIsJudgedNotAMemoryRow(t *testing.T) {
	fast := benchRun{dests: 1, events: 2000, size: 1024, repeats: 5}
	if fast.memoryRow() {
		t.Error("1:2000:0:1024:5 is a memory row")
	}
	if target, ok := cpuAim(fast); !ok || target != aimCPUOne {
		t.Errorf("1:2000:0:1024:5: aim %v %v, want ≤ %v×", target, ok, aimCPUOne)
	}
	for _, mem := range []benchRun{{dests: 1, events: 10000, size: 1024, repeats: 1}, {dests: 2, events: 10000, size: 1024, repeats: 1}} {
		if !mem.memoryRow() {
			t.Errorf("%+v is no memory row", mem)
		}
	}
	pair := repResult{busCPU: 100 * time.Millisecond, bare: &bareResult{busCPU: 100 * time.Millisecond}}
	rows := []benchResult{{benchRun: fast, reps: []repResult{pair, pair, pair, pair, pair}},
		{benchRun: benchRun{dests: 1, events: 10000, size: 1024, repeats: 1}, reps: []repResult{pair}}}
	if a := cpuAims(rows)[2]; a.state != met || !strings.Contains(a.figure, "5 pairs") {
		t.Errorf("as fast as confirmed: %s %q, want met on its 5 pairs", a.state, a.figure)
	}
}
