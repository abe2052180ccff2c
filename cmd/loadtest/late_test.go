package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestParseRunTakesTheBussDelay(t *testing.T) {
	r, err := parseRun("1:1200:300:1024:5@100ms")
	if err != nil || r != (benchRun{dests: 1, events: 1200, rate: 300, size: 1024, repeats: 5, late: 100 * time.Millisecond, delayed: true}) {
		t.Errorf("parseRun = %+v, %v", r, err)
	}
	if r, err := parseRun("100:200:0@0s"); err != nil || !r.delayed || r.late != 0 {
		t.Errorf("parseRun at once through the proxy = %+v, %v", r, err)
	}
	if r, err := parseRun("100:200:0"); err != nil || r.delayed {
		t.Errorf("parseRun without @ = %+v, %v; want the bus itself", r, err)
	}
	for _, bad := range []string{"1:100:300@-1ms", "1:100:300@100", "1:100:300@11s", "0:100:0@10ms", "1:100@10ms"} {
		if _, err := parseRun(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	runs, err := parseRuns("1:2000:0,late")
	if err != nil || len(runs) != 7 || runs[0].delayed {
		t.Fatalf("parseRuns(\"1:2000:0,late\") = %+v, %v; want a row and the 6 late ones", runs, err)
	}
	for _, r := range runs[1:] {
		if !r.delayed || r.repeats < 5 {
			t.Errorf("late row %+v: want through the proxy, 5 runs or more", r)
		}
	}
}

// lateRow is a late row's runs at perSecs deliveries/s.
func lateRow(spec string, perSecs ...float64) benchResult {
	r, err := parseRun(spec)
	if err != nil {
		panic(err)
	}
	res := benchResult{benchRun: r}
	for _, x := range perSecs {
		res.reps = append(res.reps, repResult{perSec: x, lat: flat(ms(120))})
	}
	return res
}

// TestLateRowsAreReadByNoOtherAim: a late row has the shape of rows other aims are read
// on (one destination as fast as confirmed, 100 destinations), but none reads it.
func TestLateRowsAreReadByNoOtherAim(t *testing.T) {
	late := []benchResult{lateRow("1:2000:0:1024:3@100ms", 1, 1, 1), lateRow("1:10000:0:1024:3@0s", 1, 1, 1), lateRow("1000:20:0:1024:3@20ms", 1, 1, 1),
		lateRow("1:1500:200:1024:3@20ms", 1, 1, 1)}
	for _, r := range late {
		if _, ok := cpuAim(r.benchRun); ok || latAim(r.benchRun) || r.memoryRow() || len(widenedFigures(r.benchRun)) > 0 || r.sittings() != 2 {
			t.Errorf("%+v: an aim of another row is read on it, or it is not run in two sittings", r.benchRun)
		}
	}
	without := aimsTable(judgeAims(rows(nil)))
	with := aimsTable(judgeAims(append(late, rows(nil)...)))
	if with != without {
		t.Errorf("the late rows changed the other aims:\n%s\nwant\n%s", with, without)
	}
}

func TestALateRowIsJudgedAgainstItsBoundOrTheSameRowAtOnce(t *testing.T) {
	results := []benchResult{
		lateRow("1:1500:300:1024:3@0s", 298, 299, 298),
		lateRow("1:1500:300:1024:3@20ms", 290, 292, 291),  // the bound 300, at once 298: 97%
		lateRow("1:1200:300:1024:3@100ms", 150, 152, 151), // the bound 160 (window), no row at once: 94%
		lateRow("1:1500:300:1024:3@100ms", 100, 102, 101), // the bound 160 under the row at once: 63%
		lateRow("100:200:0:1024:3@0s", 6000, 6100, 5900),
		lateRow("100:200:0:1024:3@20ms", 3000, 3100, 2900), // at once 6,000: 50%
		lateRow("100:150:30:1024:3@100ms", 2400, 2300, 2500),
		lateRow("10:200:0:1024:3@20ms", 1000, 1000, 1000), // as fast as confirmed, no row at once: the window's 8,000/s
	}
	aims := lateAims(results)
	if len(aims) != 6 {
		t.Fatalf("%d aims, want one a late row (not the rows at once):\n%s", len(aims), aimsTable(aims))
	}
	want := []struct {
		state  aimState
		figure string
	}{
		{met, "98% ("},
		{met, "94% ("},
		{notMet, "63% ("},
		{notMet, "50% ("},
		{unsure, "80% ("}, // 2,300–2,500 of 3,000, Student's t of 3 runs: across 80%
		{notMet, "12% ("},
	}
	for i, w := range want {
		if aims[i].state != w.state || !strings.Contains(aims[i].figure, w.figure) {
			t.Errorf("aim %d %q: %s, %q; want %s, %q", i, aims[i].what, aims[i].state, aims[i].figure, w.state, w.figure)
		}
	}
	if !strings.Contains(aims[0].figure, "the same row with the bus at once, 298/s") || !strings.Contains(aims[1].figure, "the bound, 160/s") ||
		!strings.Contains(aims[1].what, "min(offered 300/s, 1 × 16 / 100ms = 160/s)") || !strings.Contains(aims[4].what, "min(offered 3,000/s, 100 × 16 / 100ms = 16,000/s)") {
		t.Errorf("the aims do not say what they were judged against:\n%s", aimsTable(aims))
	}

	out := benchReport(results, "0 0 0", "0 0 0", "abc1234", time.Now())
	for _, want := range []string{
		"| 1            | 1200 × 3      | 100ms late | 300/s                | 160/s               | –               | 160/s            | 151          | 150 / 152 / 151    | 94%",
		"| 1            | 1500 × 3      | 100ms late | 300/s                | 160/s               | 298/s           | 160/s            | 101          | 100 / 102 / 101    | 63%",
		"| 100          | 200 × 3       | 20ms late  | as fast as confirmed | 80,000/s            | 6,000/s         | 6,000/s          | 3000         | 3000 / 3100 / 2900 | 50%",
		"| 100          | 200 × 3       | at once    | as fast as confirmed | –                   | –               | –                | 6000         | 6000 / 6100 / 5900 | –",
		"300/s, the bus 100ms late", "as fast as confirmed, the bus at once (through the delay proxy)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

func TestALateRowsRelayWritesThroughTheDelayProxyWithItsWindowWrittenOut(t *testing.T) {
	bus := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "{}") }))
	defer bus.Close()
	e := &benchEnv{bus: &remoteBus{url: bus.URL}, stsURL: "http://127.0.0.1:1", amqpURL: "amqp://127.0.0.1:1"}
	r, _ := parseRun("1:10:300:1024:1@100ms")
	url, stop, err := e.startLateBus(r)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if url == bus.URL {
		t.Fatal("a late row's relay is pointed at the bus itself")
	}
	start := time.Now()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if took := time.Since(start); took < 100*time.Millisecond {
		t.Errorf("through the proxy the bus answered in %s; want 100 ms late", took)
	}
	cfg := e.benchConfig(r, 3, "bench.3", "redis://127.0.0.1:1", url)
	if !strings.Contains(cfg, "events: "+url+"}") || !strings.Contains(cfg, "lease_ttl: 15s\n  in_flight: 16\n") {
		t.Errorf("a late row's config:\n%s", cfg)
	}
	plain, _ := parseRun("1:10:300")
	if got, _, _ := e.startLateBus(plain); got != bus.URL {
		t.Errorf("a row not late writes to %s; want the bus itself", got)
	}
	if cfg := e.benchConfig(plain, 3, "bench.3", "redis://127.0.0.1:1", bus.URL); strings.Contains(cfg, "in_flight") {
		t.Errorf("a row not late sets in_flight:\n%s", cfg)
	}
}
