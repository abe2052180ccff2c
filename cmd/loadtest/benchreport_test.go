package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func ms(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }

func flat(d time.Duration) latencies { return latencies{d, d, d, d} }

// rows is one run's rows, each of the aims' own shape; change picks one to alter.
func rows(change func(r *benchResult)) []benchResult {
	rep := func(perSec, bare float64) repResult {
		return repResult{perSec: perSec, lat: flat(ms(2)), bare: &bareResult{perSec: bare, lat: flat(ms(1))}}
	}
	redis := func(rep repResult, cpu time.Duration) repResult {
		rep.redisCPU = []masterCPU{{"127.0.0.1:1", cpu}}
		return rep
	}
	rs := []benchResult{
		{benchRun: benchRun{dests: 1, events: 4, rate: 200, size: 1024, repeats: 3}, reps: []repResult{
			{perSec: 200, lat: flat(ms(1.5)), bare: &bareResult{perSec: 200, lat: flat(ms(1))}}, // adds 0.5 ms
			{perSec: 200, lat: flat(ms(1.8)), bare: &bareResult{perSec: 200, lat: flat(ms(1))}}, // 0.8 ms
			{perSec: 200, lat: flat(ms(9)), bare: &bareResult{perSec: 200, lat: flat(ms(1))}}}}, // 8 ms: the median is 0.8 ms
		{benchRun: benchRun{dests: 1, events: 4, size: 1024, repeats: 3}, reps: []repResult{rep(95, 100), rep(50, 100), rep(91, 100)}},
		{benchRun: benchRun{dests: 1, events: 4, rate: 100, size: 65536, repeats: 1}, reps: []repResult{rep(100, 100)}},
		{benchRun: benchRun{dests: 100, events: 4, size: 1024, repeats: 3}, reps: []repResult{rep(85, 100), rep(81, 100), rep(10, 100)}},
		{benchRun: benchRun{dests: 1000, events: 2, size: 1024, repeats: 3}, reps: []repResult{ // 2,000 deliveries a run
			redis(rep(90, 100), 100*time.Millisecond), redis(rep(90, 100), 80*time.Millisecond), redis(rep(90, 100), 90*time.Millisecond)}},
		{benchRun: benchRun{dests: 1000, events: 2, size: 1024, repeats: 3, baseline: "f3cbb5e"}, reps: []repResult{ // 100 µs a delivery
			redis(rep(50, 100), 200*time.Millisecond), redis(rep(50, 100), 200*time.Millisecond), redis(rep(50, 100), 200*time.Millisecond)}},
		{benchRun: benchRun{dests: 1000, events: 2, size: 1024, repeats: 1, cluster: true}, reps: []repResult{ // not judged: on the cluster
			redis(rep(1, 100), 10*time.Second)}},
		{benchRun: benchRun{dests: 10000, events: 1, size: 1024, repeats: 1}, reps: []repResult{rep(80, 100)}, hwm: 140 * 1024},
	}
	if change != nil {
		for i := range rs {
			change(&rs[i])
		}
	}
	return rs
}

var ingestOK = []ingestSummary{
	{Size: 1024, Ratios: []float64{0.95, 0.80, 0.91}, Median: 0.91},
	{Size: 1024, Redis: "Redis Cluster, 3 masters + 3 replicas", Ratios: []float64{0.1}, Median: 0.1}, // not judged
	{Size: 16384, Ratios: []float64{0.6, 0.7, 0.65}, Median: 0.65},
	{Size: 65536, Ratios: []float64{0.5, 0.5, 0.5}, Median: 0.5},
}

// verdicts is the aims table's verdict of each aim whose name holds the key.
func verdicts(t *testing.T, aims []aim) map[string]aimState {
	t.Helper()
	if len(aims) != 9 {
		t.Fatalf("%d aims, want the issue's 9:\n%s", len(aims), aimsTable(aims))
	}
	out := map[string]aimState{}
	for _, a := range aims {
		out[a.what] = a.state
	}
	return out
}

func TestAimsMetWhenEveryMedianReachesItsAim(t *testing.T) {
	aims := judgeAims(ingestOK, rows(nil))
	for what, state := range verdicts(t, aims) {
		if state != met {
			t.Errorf("%q: %s, want met:\n%s", what, state, aimsTable(aims))
		}
	}
	table := aimsTable(aims)
	for _, want := range []string{
		"| ingest 1 KB / bare consumer (median of the runs)", "91% (runs 95% / 80% / 91%)",
		"91% (runs 95% / 50% / 91%; 91 against 100/s)", // one destination: median of 3
		"81% (runs 85% / 81% / 10%",                    // 100 destinations
		"45.0 µs against 100.0 µs at f3cbb5e: 45%",     // Redis CPU, medians of 50, 40, 45 and 100 µs
		"140.0 MiB",
		"800µs (runs 500µs / 800µs / 8ms)",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("the aims table lacks %q:\n%s", want, table)
		}
	}
}

func TestAimsNotMetWhenAMedianFallsShort(t *testing.T) {
	for _, c := range []struct {
		name, aim string
		ingest    []ingestSummary
		change    func(r *benchResult)
	}{
		{"ingest 64 KB below half", "ingest 64 KB", append(ingestOK[:3:3], ingestSummary{Size: 65536, Ratios: []float64{0.49}, Median: 0.49}), nil},
		{"one destination at 89%", "1 destination", nil, func(r *benchResult) {
			if r.dests == 1 && r.rate == 0 {
				r.reps[0].perSec, r.reps[2].perSec = 89, 89
			}
		}},
		{"1,000 destinations at 79% of the fan-out", "1,000 destinations", nil, func(r *benchResult) {
			if r.dests == 1000 && r.baseline == "" && !r.cluster {
				for i := range r.reps {
					r.reps[i].perSec = 79
				}
			}
		}},
		{"Redis CPU above half the baseline's", "Redis CPU", nil, func(r *benchResult) {
			if r.dests == 1000 && r.baseline == "" && !r.cluster {
				r.reps[1].redisCPU[0].cpu = 120 * time.Millisecond // 60 µs a delivery
				r.reps[2].redisCPU[0].cpu = 110 * time.Millisecond // 55 µs: the median, over half the baseline's 100 µs
			}
		}},
		{"10,000 destinations over 150 MiB", "10,000 destinations", nil, func(r *benchResult) {
			if r.dests == 10000 {
				r.hwm = 151 * 1024
			}
		}},
		{"relay-added p99 over 1 ms", "relay-added p99", nil, func(r *benchResult) {
			if r.dests == 1 && r.rate == 200 {
				r.reps[1].lat = flat(ms(2.1))
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ingest := ingestOK
			if c.ingest != nil {
				ingest = c.ingest
			}
			aims := judgeAims(ingest, rows(c.change))
			for what, state := range verdicts(t, aims) {
				want := met
				if strings.HasPrefix(what, c.aim) {
					want = notMet
				}
				if state != want {
					t.Errorf("%q: %s, want %s:\n%s", what, state, want, aimsTable(aims))
				}
			}
		})
	}
}

func TestAimsWithoutTheirRowAreNotMeasuredNeverMet(t *testing.T) {
	rs := rows(func(r *benchResult) {
		switch {
		case r.dests == 10000:
			r.err, r.reps = "warm-up: 9000 of 10000 destinations got the first event in 300 s", nil
		case r.baseline != "":
			r.dests = 0 // the baseline did not run
		}
	})
	aims := judgeAims(nil, rs)
	v := verdicts(t, aims)
	for what, state := range v {
		switch {
		case strings.HasPrefix(what, "ingest"), strings.HasPrefix(what, "10,000"), strings.HasPrefix(what, "Redis CPU"):
			if state != unmeasured {
				t.Errorf("%q: %s, want not measured:\n%s", what, state, aimsTable(aims))
			}
		case state != met:
			t.Errorf("%q: %s, want met:\n%s", what, state, aimsTable(aims))
		}
	}
	if table := aimsTable(aims); !strings.Contains(table, "45.0 µs; the baseline did not run (today's figure only)") {
		t.Errorf("without a baseline the aims table should give today's figure alone:\n%s", table)
	}
}

func TestBenchReportGivesEachRowBesideItsBarePathAndTheCPUPerDelivery(t *testing.T) {
	rs := rows(func(r *benchResult) {
		if r.dests == 1000 && r.baseline == "" && !r.cluster {
			for i := range r.reps {
				r.reps[i].relayCPU, r.reps[i].loadCPU = 600*time.Millisecond, 200*time.Millisecond // 300 and 100 µs a delivery
				r.reps[i].bare.loadCPU = 100 * time.Millisecond                                    // 50 µs
			}
		}
	})
	out := benchReport(rs, "0 0 0", "0 0 0")
	for _, want := range []string{
		"| 1000         | 1024        | 2 × 3         | as fast as confirmed | this commit | 90           | 100         | 90% (90% / 90% / 90%)",
		"| 1000         | 1024        | 2 × 3         | as fast as confirmed | at f3cbb5e  | 50",
		"| 1000         | 1024        | as fast as confirmed | one server                      | this commit   | 300.0             | 45.0              | 100.0",
		"| 1000         | 1024        | as fast as confirmed | –                               | bare fan-out  | –                 | –                 | 50.0",
		"| 1            | 1024        | as fast as confirmed | –                               | bare pipeline",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

func TestParseRunTakesRepeats(t *testing.T) {
	r, err := parseRun("1000:20:0:1024:3")
	if err != nil || r != (benchRun{dests: 1000, events: 20, size: 1024, repeats: 3}) {
		t.Errorf("parseRun = %+v, %v", r, err)
	}
	if r, err := parseRun("1:2000:200"); err != nil || r.repeats != 1 || r.size != 1024 {
		t.Errorf("parseRun without bytes and repeats = %+v, %v; want 1024 B, 1 run", r, err)
	}
	if _, err := parseRun("1:2000:200:1024:0"); err == nil {
		t.Error("0 repeats accepted")
	}
}

func TestIngestSummaryIsReadLineByLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ingest.jsonl")
	body := `{"size":1024,"redis":"","ratios":[0.7,0.8,0.75],"median":0.75}` + "\n\n" +
		`{"size":65536,"redis":"Redis Cluster","ratios":[0.2],"median":0.2}` + "\n"
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := readIngestSummary(path)
	if err != nil || len(got) != 2 || got[0].Median != 0.75 || got[1].Redis != "Redis Cluster" || len(got[0].Ratios) != 3 {
		t.Fatalf("readIngestSummary = %+v, %v", got, err)
	}
	aims := judgeAims(got, nil)
	if aims[0].state != notMet || aims[2].state != unmeasured { // 75% < 90%; 64 KB ran only on the cluster
		t.Errorf("ingest verdicts from the file: %s / %s:\n%s", aims[0].state, aims[2].state, aimsTable(aims))
	}
}
