package main

import (
	"strings"
	"testing"
	"time"
)

func ms(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }

func flat(d time.Duration) latencies { return latencies{d, d, d, d} }

// rows is one run's rows, each of the aims' own shape and each just meeting its aim;
// change picks one to alter.
func rows(change func(r *benchResult)) []benchResult {
	// rep is a pair: the relay's run (its bus 100 ms) and its bare path's (its bus 200 ms):
	// whole-system CPU 0.5× the bare path's, unless a row says otherwise.
	rep := func(perSec, bare float64) repResult {
		return repResult{perSec: perSec, lat: flat(ms(2)), busCPU: 100 * time.Millisecond,
			bare: &bareResult{perSec: bare, lat: flat(ms(1)), busCPU: 200 * time.Millisecond}}
	}
	// lat is a pair of the latency rows: the relay's p99 at ratio × the bare pipeline's 1 ms.
	lat := func(ratio float64) repResult {
		r := rep(200, 200)
		r.lat = flat(ms(ratio))
		return r
	}
	redis := func(rep repResult, cpu time.Duration) repResult {
		rep.redisCPU = []masterCPU{{"127.0.0.1:1", cpu}}
		return rep
	}
	mem := func(rep repResult, growth int64) repResult {
		rep.memGrowth = growth
		return rep
	}
	// marker says the dedup keys held b bytes a marker for the 60,000 events of the row.
	marker := func(rep repResult, b int64) repResult {
		rep.dedupSize, rep.logLen = 60000*b, 60000
		return rep
	}
	// cpu sets the relay process's CPU and the bare fan-out's writers'; the bare path's bus
	// then 300 ms, so that the whole system costs the relay 0.93× the bare path's.
	cpu := func(rep repResult, relay, bare time.Duration) repResult {
		rep.relayCPU, rep.bare.loadCPU, rep.bare.busCPU = relay, bare, 300*time.Millisecond
		return rep
	}
	rs := []benchResult{
		// p99 1.2× to 1.3× in 9 pairs (5 asked, 4 more to settle), whose smallest and largest
		// hold the median with 99.6%: the interval reaches 1.3× and no further.
		{benchRun: benchRun{dests: 1, events: 4, rate: 200, size: 1024, repeats: 5}, reps: []repResult{
			lat(1.2), lat(1.3), lat(1.25), lat(1.22), lat(1.28), lat(1.25), lat(1.24), lat(1.26), lat(1.23)}},
		{benchRun: benchRun{dests: 1, events: 4, rate: 2000, size: 1024, repeats: 3}, reps: []repResult{lat(1.1), lat(1.1), lat(1.1)}},
		{benchRun: benchRun{dests: 1, events: 4, size: 1024, repeats: 3}, reps: []repResult{rep(95, 100), rep(50, 100), rep(91, 100)}},
		{benchRun: benchRun{dests: 0, events: 20000, size: 1024, repeats: 3}, reps: []repResult{
			// Redis 24.5, 25.5, 25 µs an event: 25, its 99% interval (Student's t of 3 runs)
			// 22.3–28.0. used_memory grew 90, 110, 100 B an event: 100.
			mem(redis(repResult{perSec: 9000}, 490*time.Millisecond), 1_800_000),
			mem(redis(repResult{perSec: 9000}, 510*time.Millisecond), 2_200_000),
			marker(mem(redis(repResult{perSec: 9000}, 500*time.Millisecond), 2_000_000), 30)}},
		// The memory row: 10,000 events (100 B each, 30 B of it the marker) and as many
		// deliveries (100 B each), then 256 KB kept for the destination; a week:
		// 604,800,000 × 1.25 × 30 B + 86,400,000 × 70 B + 10,000 × 256 KB, 29.2 GiB.
		{benchRun: benchRun{dests: 1, events: 10000, size: 1024, repeats: 1}, reps: []repResult{rep(90, 100)},
			memBefore: 1_000_000, memAfter: 3_000_000, destMemory: []keyMemory{
				{"relay:{acct_bench}:attempts:d0", 200 * 1024, 50}, {"relay:{acct_bench}:chan:destination:d0", 40 * 1024, 35},
				{"relay:{acct_bench}:chan:account:acct_bench", 12 * 1024, 15}, {"relay:{acct_bench}:dest:d0", 3 * 1024, 0},
				{"relay:{acct_bench}:lease:d0", 1024, 0}}},
		// Two destinations, every event to both: the account's channel pays more a delivery.
		{benchRun: benchRun{dests: 2, events: 10000, size: 1024, repeats: 1}, reps: []repResult{rep(90, 100)},
			memBefore: 3_000_000, memAfter: 6_000_000, destMemory: []keyMemory{
				{"relay:{acct_bench}:attempts:d0", 200 * 1024, 50}, {"relay:{acct_bench}:chan:destination:d0", 40 * 1024, 10},
				{"relay:{acct_bench}:chan:account:acct_bench", 12 * 1024, 40}}},
		{benchRun: benchRun{dests: 100, events: 4, size: 1024, repeats: 3}, reps: []repResult{rep(85, 100), rep(81, 100), rep(10, 100)}},
		{benchRun: benchRun{dests: 1000, events: 2, size: 1024, repeats: 3}, reps: []repResult{ // 2,000 deliveries a run
			// Redis 40, 39.6, 40.4 ms: less 2 × 25 µs of ingest, 19.975 / 19.775 / 20.175 µs a
			// delivery, 18.9–21.2 (Student's t of 3 runs); over ingest's 22.3–28.0, 0.67–0.95×.
			// Relay 300 µs a delivery against the fan-out's 250: 1.2×.
			cpu(redis(rep(90, 100), 40*time.Millisecond), 600*time.Millisecond, 500*time.Millisecond),
			cpu(redis(rep(90, 100), 39600*time.Microsecond), 600*time.Millisecond, 500*time.Millisecond),
			cpu(redis(rep(90, 100), 40400*time.Microsecond), 600*time.Millisecond, 500*time.Millisecond)}},
		{benchRun: benchRun{dests: 10000, events: 1, size: 1024, repeats: 3}, reps: []repResult{redis(rep(80, 100), 50*time.Millisecond), redis(rep(80, 100), 50*time.Millisecond), redis(rep(80, 100), 50*time.Millisecond)},
			hwm: 140 * 1024, idleFor: 15 * time.Second, idleCPU: []masterCPU{{"127.0.0.1:1", 150 * time.Millisecond}}, idleRelayCPU: 300 * time.Millisecond}, // 1% and 2%
		{benchRun: benchRun{dests: 100000, events: 1, size: 1024, repeats: 1}, reps: []repResult{rep(70, 100)}, hwm: 1 << 20, rssIdle: 800 * 1024,
			idleFor: 15 * time.Second, idleCPU: []masterCPU{{"127.0.0.1:1", 300 * time.Millisecond}}, idleRelayCPU: 150 * time.Millisecond}, // 2% and 1%
		// 86, 88, 87/s, 81.5–92.9 (Student's t of 3 runs), of the server's 90/s: 90.5–103%.
		{benchRun: benchRun{dests: 1000, events: 2, size: 1024, repeats: 3, cluster: true}, reps: []repResult{
			redis(rep(86, 100), 10*time.Second), redis(rep(88, 100), 10*time.Second), redis(rep(87, 100), 10*time.Second)}},
		{benchRun: benchRun{dests: 1000, events: 2, size: 1024, repeats: 1, baseline: "f3cbb5e"}, reps: []repResult{rep(1, 100)}}, // not judged: the baseline
	}
	if change != nil {
		for i := range rs {
			change(&rs[i])
		}
	}
	return rs
}

// verdicts is the aims table's verdict of each aim, by its name.
func verdicts(t *testing.T, aims []aim) map[string]aimState {
	t.Helper()
	if len(aims) != 20 {
		t.Fatalf("%d aims, want the issues' 20 lines:\n%s", len(aims), aimsTable(aims))
	}
	out := map[string]aimState{}
	for _, a := range aims {
		out[a.what] = a.state
	}
	return out
}

func TestAimsMetWhenEveryMedianReachesItsAim(t *testing.T) {
	aims := judgeAims(rows(nil))
	for what, state := range verdicts(t, aims) {
		if state != met {
			t.Errorf("%q: %s, want met:\n%s", what, state, aimsTable(aims))
		}
	}
	table := aimsTable(aims)
	for _, want := range []string{
		// One destination: deliveries/s 95%, 50%, 91% of the bare path's, Student's t of 3
		// pairs far wider than 50–95%.
		"0.50× (0.50–0.50, 3 pairs); 25000.0 against 50000.0 µs; deliveries/s 91% (10–591%, 3 pairs) of the bare path's",
		"0.93× (0.92–0.93, 3 pairs); 370.0 against 400.0 µs; deliveries/s 90% (90–90%, 3 pairs)", // 1,000 destinations
		"20.0 µs (18.9–21.2, 3 runs) against 25.0 µs (22.3–28.0, 3 runs): 0.80× (0.67–0.95, 3 runs) (20.0 µs with ingest's share)",
		"300.0 µs against 250.0 µs: 1.20× (1.20–1.20, 3 pairs)",
		"1.0% over 15s", "2.0% over 15s", // idle Redis, idle relay
		"1.25× (1.20–1.30, 9 pairs) (1.25ms against 1ms); p50 1.25× (1.20–1.30, 9 pairs), p99.9 1.25× (1.20–1.30, 9 pairs)",
		"1024 MiB (idle 800 MiB)",
		"97% (91–103%, 3 runs) (87 against 90/s, the cluster's runs' median over the server's, the interval from the extremes of both; each / its bare fan-out: 87% against 90%)",
		"100 B (runs 90 / 110 / 100; used_memory over 20,000 events each)",
		"100 B while kept (attempt line 50 B, destination channel event 35 B, account channel event 15 B", "averaged over the row's 10,000 deliveries, of which the count bounds keep the newest: 100 B",
		"two destinations, every event to both: 100 B (attempt line 50 B, destination channel event 10 B, account channel event 40 B)",
		"256.0 KB after 10,001 deliveries (attempts:d0 200.0 KB, chan:destination:d0 40.0 KB, chan:account:acct_bench 12.0 KB, dest:d0 3.0 KB, 1 more keys)",
		"29.2 GiB (markers 21.1 GiB at 30 B each, log 5.6 GiB, destinations 2.4 GiB)",
		"604,800,000 events × 1.25 × a dedup marker",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("the aims table lacks %q:\n%s", want, table)
		}
	}
}

func TestAimsNotMetWhenAMedianFallsShort(t *testing.T) {
	server1000 := func(r *benchResult) bool { return r.dests == 1000 && r.baseline == "" && !r.cluster }
	memRow := func(r *benchResult) bool { return r.dests == 1 && r.events == 10000 }
	for _, c := range []struct {
		name, aim string
		also      string // another aim that falls with it
		change    func(r *benchResult)
	}{
		{"one destination's whole system at 1.25× the bare pipeline's", "1 destination, 1 KB as fast as confirmed", "", func(r *benchResult) {
			if r.dests == 1 && r.rate == 0 && !memRow(r) {
				for i := range r.reps {
					r.reps[i].relayCPU = 150 * time.Millisecond // 250 ms against 200
				}
			}
		}},
		{"10,000 destinations' whole system at 1.25× the bare fan-out's", "10,000 destinations:", "", func(r *benchResult) {
			if r.dests == 10000 {
				for i := range r.reps {
					r.reps[i].relayCPU = 100 * time.Millisecond // 250 ms against 200
				}
			}
		}},
		{"Redis CPU per delivery above ingest's per event", "Redis CPU per delivery", "", func(r *benchResult) {
			if server1000(r) {
				for i := range r.reps {
					r.reps[i].redisCPU[0].cpu = 60 * time.Millisecond // 29.975 µs a delivery, over ingest's 22.3–28.0: 1.07–1.34×
				}
			}
		}},
		{"relay CPU 1.4× the fan-out's", "relay CPU per delivery", "", func(r *benchResult) {
			if server1000(r) {
				for i := range r.reps {
					r.reps[i].relayCPU = 700 * time.Millisecond
				}
			}
		}},
		{"10,000 idle destinations cost Redis 2.1% of a core", "10,000 leased idle destinations: Redis", "", func(r *benchResult) {
			if r.dests == 10000 {
				r.idleCPU[0].cpu = 315 * time.Millisecond
			}
		}},
		{"10,000 idle destinations cost the relay 2.1% of a core", "10,000 leased idle destinations: relay", "", func(r *benchResult) {
			if r.dests == 10000 {
				r.idleRelayCPU = 315 * time.Millisecond
			}
		}},
		{"100,000 idle destinations cost Redis 2.1% of a core", "100,000 leased idle destinations: Redis", "", func(r *benchResult) {
			if r.dests == 100000 {
				r.idleCPU[0].cpu = 315 * time.Millisecond
			}
		}},
		{"100,000 idle destinations cost the relay 2.1% of a core", "100,000 leased idle destinations: relay", "", func(r *benchResult) {
			if r.dests == 100000 {
				r.idleRelayCPU = 315 * time.Millisecond
			}
		}},
		{"relay p99 1.4× the bare pipeline's at 200/s", "relay p99 / bare pipeline p99 (publish → the bus's answer), 1 destination, 1 KB at 200/s", "", func(r *benchResult) {
			if r.dests == 1 && r.rate == 200 {
				for i := range r.reps {
					r.reps[i].lat = flat(ms(1.4))
				}
			}
		}},
		{"100,000 destinations over 1 GiB", "100,000 destinations on one replica: peak RSS", "", func(r *benchResult) {
			if r.dests == 100000 {
				r.hwm++
			}
		}},
		{"100,000 destinations' whole system at 1.3× the bare fan-out's", "100,000 destinations:", "", func(r *benchResult) {
			if r.dests == 100000 {
				r.reps[0].relayCPU = 160 * time.Millisecond
			}
		}},
		{"the cluster at 78% of one server", "one account", "", func(r *benchResult) {
			if r.cluster {
				for i := range r.reps {
					r.reps[i].perSec = 70
				}
			}
		}},
		{"an event keeps 301 B", "Redis memory per 1 KB event", "", func(r *benchResult) {
			if r.ingestOnly() {
				r.reps[1].memGrowth, r.reps[2].memGrowth = 20000*301, 20000*301 // the median
			}
		}},
		{"a delivery keeps 101 B while kept", "Redis memory per delivery", "", func(r *benchResult) {
			if memRow(r) {
				r.destMemory[1].perEvent++
			}
		}},
		{"two destinations' deliveries keep 101 B while kept", "Redis memory per delivery", "", func(r *benchResult) {
			if r.dests == 2 {
				r.destMemory[2].perEvent++
			}
		}},
		{"a destination at rest keeps 256 KB and a byte", "Redis memory per destination", "", func(r *benchResult) {
			if memRow(r) {
				r.destMemory[0].bytes++
			}
		}},
		{"a week of markers at 90 B each is 66.6 GiB", "a week", "", func(r *benchResult) {
			if r.ingestOnly() {
				r.reps[2].dedupSize = 60000 * 90
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			aims := judgeAims(rows(c.change))
			for what, state := range verdicts(t, aims) {
				want := met
				if strings.HasPrefix(what, c.aim) || (c.also != "" && strings.HasPrefix(what, c.also)) {
					want = notMet
				}
				if state != want {
					t.Errorf("%q: %s, want %s:\n%s", what, state, want, aimsTable(aims))
				}
			}
		})
	}
}

// TestAVerdictWhoseIntervalCrossesItsTargetIsUnsure: one pair of three far off makes
// the interval cross the target: neither met nor NOT met.
func TestAVerdictWhoseIntervalCrossesItsTargetIsUnsure(t *testing.T) {
	aims := judgeAims(rows(func(r *benchResult) {
		if r.dests == 1000 && !r.cluster && r.baseline == "" {
			r.reps[0].relayCPU = 900 * time.Millisecond // 1,040 ms against 800: 1.3×, and the relay 1.8× the writers
		}
	}))
	for what, state := range verdicts(t, aims) {
		want := met
		if strings.HasPrefix(what, "1,000 destinations:") || strings.HasPrefix(what, "relay CPU per delivery") {
			want = unsure
		}
		if state != want {
			t.Errorf("%q: %s, want %s:\n%s", what, state, want, aimsTable(aims))
		}
	}
}

func TestAimsWithoutTheirRowAreNotMeasuredNeverMet(t *testing.T) {
	rs := rows(func(r *benchResult) {
		switch {
		case r.dests == 0:
			r.err, r.reps = "the account's log holds 3 of 11 events, then none more for a minute", nil
		case r.dests == 100000:
			r.err, r.reps = "warm-up: 90000 of 100000 destinations got the first event, then none for 300 s", nil
		case r.cluster:
			r.dests = 7 // the cluster's 1,000-destination row did not run
		}
	})
	aims := judgeAims(rs)
	for what, state := range verdicts(t, aims) {
		switch {
		case strings.HasPrefix(what, "Redis CPU"), strings.HasPrefix(what, "100,000"), strings.HasPrefix(what, "one account"),
			strings.HasPrefix(what, "Redis memory per 1 KB event"), strings.HasPrefix(what, "Redis memory per delivery"), strings.HasPrefix(what, "a week"):
			if state != unmeasured {
				t.Errorf("%q: %s, want not measured:\n%s", what, state, aimsTable(aims))
			}
		case state != met:
			t.Errorf("%q: %s, want met:\n%s", what, state, aimsTable(aims))
		}
	}
	if table := aimsTable(aims); !strings.Contains(table, "no ingest row") {
		t.Errorf("without the ingest row the Redis aim should say so:\n%s", table)
	}
}

func TestBenchReportGivesEachRowBesideItsBarePathAndTheCPUPerDelivery(t *testing.T) {
	rs := rows(func(r *benchResult) {
		if r.dests == 1000 && r.baseline == "" && !r.cluster {
			for i := range r.reps {
				r.reps[i].loadCPU, r.reps[i].busCPU = 200*time.Millisecond, 100*time.Millisecond // 100 and 50 µs a delivery
				r.reps[i].bare.busCPU = 80 * time.Millisecond                                    // 40 µs
			}
		}
	})
	out := benchReport(rs, "0 0 0", "0 0 0", "abc1234", time.Date(2026, 12, 5, 6, 0, 0, 0, time.UTC))
	for _, want := range []string{
		"| 1000         | 1024        | 2 × 3         | as fast as confirmed | this commit | 90           | 100         | 90% (90% / 90% / 90%)",
		"| 0            | 1024        | 20000 × 3     | as fast as confirmed | this commit | 9000         | –           | –",
		"| 1000         | 1024        | as fast as confirmed | one server                      | this commit                           | 300.0             | 20.0              | 100.0                    | 50.0",
		"| 1000         | 1024        | as fast as confirmed | –                               | bare fan-out                          | –                 | –                 | 250.0                    | 40.0",
		"| 1            | 1024        | as fast as confirmed | –                               | bare pipeline",
		"this commit, ingest alone (per event) | 0.0               | 25.0",
		"| 1.0%            | 1.00                                | 2.0% over 15s", // 10,000 idle: Redis share, µs per destination per second, relay share
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

func TestWeekMemoryIsTheWeeksEventsAndEveryDestinationAtRest(t *testing.T) {
	if got, want := weekMemory(100, 30, 256*1024), 604_800_000*1.25*30+86_400_000*70.0+10_000*256*1024.0; got != want {
		t.Errorf("weekMemory(100 B, 30 B, 256 KB) = %.0f, want %.0f", got, want)
	}
}

func TestDestKeyShareIsTheDestinationsKeysAndItsShareOfTheAccountChannel(t *testing.T) {
	for key, want := range map[string]float64{
		"relay:{acct_bench}:dest:d1":                     1,
		"relay:{acct_bench}:lease:d1":                    1,
		"relay:{acct_bench}:attempts:d1":                 1,
		"relay:{acct_bench}:retries:d1":                  1,
		"relay:{acct_bench}:chan:destination:d1":         1,
		"relay:{acct_bench}:chan:destination:d1:seq":     1,
		"relay:{acct_bench}:chan:account:acct_bench":     0.25,
		"relay:{acct_bench}:chan:account:acct_bench:seq": 0.25,
		"relay:{acct_bench}:dest:d11":                    0, // another destination
		"relay:{acct_bench}:chan:destination:d11:seq":    0,
		"relay:{acct_bench}:log":                         0, // the events', not the destination's
		"relay:{other}:dest:d1":                          0,
	} {
		if got := destKeyShare(key, "acct_bench", "d1", 4); got != want {
			t.Errorf("destKeyShare(%q) = %v, want %v", key, got, want)
		}
	}
}

func TestParseRunTakesRepeatsAndTheIngestRow(t *testing.T) {
	r, err := parseRun("1000:20:0:1024:3")
	if err != nil || r != (benchRun{dests: 1000, events: 20, size: 1024, repeats: 3}) {
		t.Errorf("parseRun = %+v, %v", r, err)
	}
	if r, err := parseRun("1:2000:200"); err != nil || r.repeats != 1 || r.size != 1024 {
		t.Errorf("parseRun without bytes and repeats = %+v, %v; want 1024 B, 1 run", r, err)
	}
	if r, err := parseRun("0:20000:0"); err != nil || !r.ingestOnly() {
		t.Errorf("parseRun of the ingest row = %+v, %v", r, err)
	}
	if r, err := parseRun("1000:20:0:1024:24:28"); err != nil || r.repeats != 24 || r.most != 28 {
		t.Errorf("parseRun with the most pairs = %+v, %v; want 24 up to 28", r, err)
	}
	for _, bad := range []string{"1:2000:200:1024:0", "1:0:0", "1000", "1000:20:0:1024:24:20", "1:2:3:4:5:6:7"} {
		if _, err := parseRun(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
