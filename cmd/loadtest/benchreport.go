package main

import (
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mercamap/relay/internal/benchkit"
	"github.com/mercamap/relay/internal/store/storetest"
)

// The aims of issue 23 still judged by judgeAims (issue 46's are in verdict.go).
const (
	aimSize             = 1024       // event size every aim is set for
	aimCPUDests         = 1000       // the row the CPU-per-delivery aims are read on
	aimRedisPerDelivery = 1.0        // Redis CPU per delivery / per ingested event
	aimRelayCPU         = 1.3        // relay CPU per delivery / the bare fan-out's writers'
	aimIdleDests        = 10000      // the idle aim's row: leased destinations, nothing published
	aimIdleShare        = 0.02       // of one core, Redis and relay each
	aimLatencyRate      = 200        // the publish rate the latency aim is set for
	aimManyDests        = 100000     // destinations on one replica
	aimManyRSSKiB       = 1 << 20    // their peak RSS: 1 GiB
	aimClusterDests     = 1000       // one account's destinations on Redis Cluster
	aimCluster          = 0.90       // deliveries/s on the cluster / on one server
	issue17RSSKiB       = 150 * 1024 // issue 17: 10,000 destinations, peak RSS
)

// The memory aims of issue 30, judged by memoryAims.
const (
	aimMemEvents      = 20000                // the ingest row's events a repetition, at least, for a stable per-event figure
	aimMemPerEvent    = 300                  // B of Redis per 1 KB event kept
	aimMemDeliveries  = 10000                // deliveries of the memory row (one destination), at least
	aimMemPerDelivery = 100                  // B of Redis per delivery kept
	aimMemPerDestKiB  = 256                  // one destination at rest with aimMemDeliveries in its history
	aimWeekEvents     = 1000 * 7 * 24 * 3600 // a week at 1,000 events/s
	aimWeekDests      = 10000                // destinations of that week
	aimWeekGiB        = 64                   // what Redis may hold for it
	aimReplayWindow   = 24 * time.Hour       // delivery.replay_window's default: how long the log keeps what was delivered
	aimReplayEvents   = 1000 * 24 * 3600     // the events of that window at 1,000 events/s
)

// aimState is an aim's verdict: measured and met or not, or not measured in this run.
type aimState int

const (
	unmeasured aimState = iota
	met
	notMet
	unsure // the figure's interval crosses its target: another run may judge either way
)

func (s aimState) String() string {
	switch s {
	case met:
		return "met"
	case notMet:
		return "NOT met"
	case unsure:
		return "unsure"
	}
	return "not measured"
}

func judge(ok bool) aimState {
	if ok {
		return met
	}
	return notMet
}

// aim is one line of the aims table.
type aim struct {
	what, target, figure string
	state                aimState
}

// aimRow matches the 1 KB row of n destinations published as fast as confirmed.
func aimRow(n int) func(benchRun) bool {
	return func(r benchRun) bool { return r.dests == n && r.rate == 0 && r.size == aimSize }
}

// judgeAims gives each of issue 23's aims its figure and verdict from this run's rows;
// an aim whose row is missing or failed is "not measured", never met.
func judgeAims(results []benchResult) []aim {
	var aims []aim

	aims = append(aims, cpuAims(results)...)
	cpuRow, okCPU := findRow(results, aimRow(aimCPUDests))
	ingest, okIngest := findRow(results, aimRow(0))
	red := aim{what: fmt.Sprintf("Redis CPU per delivery (%s destinations, ingest's share taken out) / Redis CPU per ingested event (the ingest row), same run", thousands(aimCPUDests)),
		target: fmt.Sprintf("≤ %.0f×", aimRedisPerDelivery)}
	switch {
	case !okCPU:
		red.figure = fmt.Sprintf("no row %d:…:0 of 1 KB", aimCPUDests)
	case !okIngest:
		red.figure = "no ingest row 0:…:0 of 1 KB"
	default:
		sp, ing, q := redisSpreads(cpuRow, ingest)
		q = cpuRow.widen(figRedis, q)
		red.figure = fmt.Sprintf("%.1f µs (%.1f–%.1f, %d runs) against %.1f µs (%.1f–%.1f, %d runs): %s (%.1f µs with ingest's share)",
			sp.med, sp.lo, sp.hi, sp.n, ing.med, ing.lo, ing.hi, ing.n, q.ratio("runs"), medianRedisPerDelivery(cpuRow))
		red.state = q.atMost(aimRedisPerDelivery)
	}
	aims = append(aims, red)

	cpu := aim{what: fmt.Sprintf("relay CPU per delivery / the bare fan-out's writers' CPU per delivery, %s destinations, same run", thousands(aimCPUDests)),
		target: fmt.Sprintf("≤ %.1f×", aimRelayCPU), figure: fmt.Sprintf("no row %d:…:0 of 1 KB", aimCPUDests)}
	if okCPU {
		var relays, writers []float64
		for _, rep := range cpuRow.pairs() {
			if rep.bare.loadCPU > 0 {
				relays, writers = append(relays, float64(rep.relayCPU)), append(writers, float64(rep.bare.loadCPU))
			}
		}
		relay := cpuRow.perDelivery(func(rep repResult) time.Duration { return rep.relayCPU })
		if bare, ok := cpuRow.barePerDelivery(func(b *bareResult) time.Duration { return b.loadCPU }); ok && len(relays) > 0 {
			sp := cpuSpread(relays, writers)
			cpu.figure = fmt.Sprintf("%.1f µs against %.1f µs: %s", relay, bare, sp.ratio("pairs"))
			cpu.state = sp.atMost(aimRelayCPU)
		} else {
			cpu.figure = "the bare fan-out failed"
		}
	}
	aims = append(aims, cpu)

	// Idle: 10,000 leased destinations (issue 23), and 100,000 (issue 33: nothing renewed
	// per destination).
	for _, n := range []int{aimIdleDests, aimManyDests} {
		idleRow, okIdle := findRow(results, func(r benchRun) bool { return r.dests == n && r.size == aimSize })
		for _, proc := range []string{"Redis", "relay"} {
			x := aim{what: fmt.Sprintf("%s leased idle destinations: %s CPU", thousands(n), proc),
				target: fmt.Sprintf("≤ %.0f%% of a core", 100*aimIdleShare), figure: fmt.Sprintf("no %s-destination row", thousands(n))}
			if okIdle && idleRow.idleFor > 0 {
				sp := idleRow.idleSpread(proc == "Redis")
				x.figure = fmt.Sprintf("%.1f%% over %s", 100*sp.med, idleRow.idleFor.Round(100*time.Millisecond))
				if sp.n > 1 {
					x.figure += fmt.Sprintf(" (%.1f–%.1f%%, %d stretches of %s)", 100*sp.lo, 100*sp.hi, sp.n, idleSliceLen)
				}
				x.state = sp.atMost(aimIdleShare)
			}
			aims = append(aims, x)
		}
	}

	aims = append(aims, latencyAims(results)...)

	many, okMany := findRow(results, aimRow(aimManyDests))
	mem := aim{what: fmt.Sprintf("%s destinations on one replica: peak RSS of the relay", thousands(aimManyDests)),
		target: fmt.Sprintf("≤ %d GiB", aimManyRSSKiB>>20), figure: fmt.Sprintf("no row %d:…:0 of 1 KB", aimManyDests)}
	if okMany {
		mem.figure = fmt.Sprintf("%.0f MiB (idle %.0f MiB)", float64(many.hwm)/1024, float64(many.rssIdle)/1024)
		mem.state = judge(many.hwm > 0 && many.hwm <= aimManyRSSKiB)
	}
	aims = append(aims, mem)

	cl := aim{what: fmt.Sprintf("one account with %s destinations on Redis Cluster (3 masters + 3 replicas): deliveries/s / the same on one server", thousands(aimClusterDests)),
		target: fmt.Sprintf("≥ %.0f%%", 100*aimCluster), figure: fmt.Sprintf("no row %d:…:0 of 1 KB on each", aimClusterDests)}
	server, okServer := findRow(results, aimRow(aimClusterDests))
	clustered, okCluster := findClusterRow(results, aimRow(aimClusterDests))
	if okServer && okCluster {
		a, b := benchkit.Median(clustered.perSecs()), benchkit.Median(server.perSecs())
		sp := clustered.widen(figCluster, clusterSpread(clustered, server))
		cl.figure = fmt.Sprintf("%s (%.0f against %.0f/s, the cluster's runs' median over the server's, the interval from the extremes of both; each / its bare fan-out: %s against %s)", sp.percent("runs"), a, b,
			pct(benchkit.Median(clustered.ratios())), pct(benchkit.Median(server.ratios())))
		cl.state = unmeasured
		if b > 0 {
			cl.state = sp.atLeast(aimCluster)
		}
	}
	aims = append(aims, cl)
	return append(aims, memoryAims(results)...)
}

// memoryAims are issue 30's: the Redis memory (used_memory, MEMORY USAGE) one event, one
// delivery and one destination at rest keep, each from this run's rows, and the week
// they add up to.
func memoryAims(results []benchResult) []aim {
	ingest, okIngest := findRow(results, func(r benchRun) bool {
		return r.ingestOnly() && r.size == aimSize && r.events >= aimMemEvents
	})
	memRow, okMem := findRow(results, func(r benchRun) bool { return r.memoryRow() && r.dests == 1 && r.size == aimSize })
	okMem = okMem && memRow.memAfter > 0
	fanRow, okFan := findRow(results, func(r benchRun) bool { return r.memoryRow() && r.dests == 2 && r.size == aimSize })
	okFan = okFan && fanRow.memAfter > 0
	noIngest := fmt.Sprintf("no ingest row 0:%d:0 of 1 KB (or more events)", aimMemEvents)
	noMemRow := fmt.Sprintf("no row 1:%d:0 of 1 KB (or more events)", aimMemDeliveries)

	event := aim{what: "Redis memory per 1 KB event kept (log, dedup, index), all in",
		target: fmt.Sprintf("≤ %d B", aimMemPerEvent), figure: noIngest}
	var perEvent float64
	if okIngest {
		perEvent = ingest.memPerEvent()
		event.figure = fmt.Sprintf("%.0f B (runs %s; used_memory over %s events each)", perEvent, ingest.memPerEventRuns(), thousands(ingest.events))
		event.state = judge(perEvent > 0 && perEvent <= aimMemPerEvent)
	}

	delivery := aim{what: "Redis memory per delivery kept (channels, attempts)",
		target: fmt.Sprintf("≤ %d B", aimMemPerDelivery), figure: noMemRow}
	switch {
	case !okMem:
	case !okIngest:
		delivery.figure = noIngest
	default:
		// Judged by what a delivery costs while it is kept (each of its entries' share of
		// its key), not by the row's average: the count bounds keep only the newest
		// entries, so the average shrinks with the history and says little.
		kept, parts := memRow.perKeptDelivery()
		d := memRow.memPerDeliveryNet(perEvent)
		delivery.figure = fmt.Sprintf("%.0f B while kept (%s; MEMORY USAGE of each at rest over the lines or events it holds); averaged over the row's %s deliveries, of which the count bounds keep the newest: %.0f B (used_memory, less %.0f B an event)",
			kept, parts, thousands(memRow.deliveries()*len(memRow.reps)), d, perEvent)
		worst := kept
		if okFan {
			// Two destinations' outcomes meet in the account's channel: its pointers
			// cannot run on, and cost what a batch's pack of them does.
			fan, fanParts := fanRow.perKeptDelivery()
			delivery.figure += fmt.Sprintf("; two destinations, every event to both: %.0f B (%s)", fan, fanParts)
			worst = max(worst, fan)
		} else {
			delivery.figure += "; no row 2:10000:0 of 1 KB (two destinations)"
		}
		delivery.state = judge(kept > 0 && worst <= aimMemPerDelivery)
	}

	dest := aim{what: fmt.Sprintf("Redis memory per destination at rest with %s deliveries in its history", thousands(aimMemDeliveries)),
		target: fmt.Sprintf("≤ %d KB", aimMemPerDestKiB), figure: noMemRow}
	var perDest float64
	if okMem {
		perDest = memRow.destBytes()
		dest.figure = fmt.Sprintf("%.1f KB after %s deliveries (%s)", perDest/1024, thousands(1+memRow.deliveries()*len(memRow.reps)), memRow.destKeys())
		dest.state = judge(perDest > 0 && perDest <= aimMemPerDestKiB*1024)
	}

	week := aim{what: fmt.Sprintf("a week at 1,000 events/s, 1 KB, %s destinations (from the rows above): %s events × 1.25 × a dedup marker (kept a window and up to a quarter more) + a replay window's (%s) %s events × (memory per event − its marker) + %s × memory per destination at rest",
		thousands(aimWeekDests), thousands(aimWeekEvents), aimReplayWindow, thousands(aimReplayEvents), thousands(aimWeekDests)),
		target: fmt.Sprintf("≤ %d GiB", aimWeekGiB), figure: "per event or per destination not measured"}
	if event.state != unmeasured && dest.state != unmeasured {
		marker := ingest.dedupPerEvent()
		w := weekMemory(perEvent, marker, perDest)
		week.figure = fmt.Sprintf("%.1f GiB (markers %.1f GiB at %.0f B each, log %.1f GiB, destinations %.1f GiB)", w/(1<<30),
			weekMemory(marker, marker, 0)/(1<<30), marker, weekMemory(perEvent, marker, 0)/(1<<30)-weekMemory(marker, marker, 0)/(1<<30),
			weekMemory(0, 0, perDest)/(1<<30))
		week.state = judge(w <= aimWeekGiB<<30)
	}
	return []aim{event, delivery, dest, week}
}

// weekMemory is what Redis holds, in bytes, after a week at 1,000 events/s to
// aimWeekDests destinations, from one event's, one dedup marker's and one destination's
// figures (bytes): every event's marker for the dedup window (a week) and up to a
// quarter more (whole buckets expire), every event's log entry and index for the replay
// window (delivery.replay_window's default: every destination keeping up), and every
// destination at rest with the history a 10,000-delivery row leaves. When what is kept
// changes, change it here.
func weekMemory(perEvent, perMarker, perDest float64) float64 {
	return aimWeekEvents*1.25*perMarker + aimReplayEvents*(perEvent-perMarker) + aimWeekDests*perDest
}

// dedupPerEvent is the ingest row's dedup keys' bytes per marker, from the last
// repetition (the keys hold every repetition's markers).
func (r benchResult) dedupPerEvent() float64 {
	last := r.reps[len(r.reps)-1]
	if last.logLen == 0 {
		return 0
	}
	return float64(last.dedupSize) / float64(last.logLen)
}

// memPerEvent is the ingest row's used_memory growth per stored event, median of the
// repetitions, in bytes; memPerEventRuns gives each repetition's.
func (r benchResult) memPerEvent() float64 { return benchkit.Median(r.memPerEvents()) }

func (r benchResult) memPerEvents() []float64 {
	var b []float64
	for _, rep := range r.reps {
		b = append(b, float64(rep.memGrowth)/float64(r.events))
	}
	return b
}

func (r benchResult) memPerEventRuns() string {
	s := make([]string, 0, len(r.reps))
	for _, b := range r.memPerEvents() {
		s = append(s, fmt.Sprintf("%.0f", b))
	}
	return strings.Join(s, " / ")
}

// memPerDeliveryNet is a memory row's used_memory growth over its repetitions, less its
// events × perEvent (the ingest row's figure), per delivery, in bytes.
func (r benchResult) memPerDeliveryNet(perEvent float64) float64 {
	events := r.events * len(r.reps)
	return (float64(r.memAfter-r.memBefore) - perEvent*float64(events)) / float64(max(r.dests, 1)*events)
}

// perKeptDelivery is what one delivery of a memory row costs while it is kept: an
// attempt line, an event of the destination's channel and one of the account's channel,
// each its key's MEMORY USAGE over what it holds (keyMemory); and the three, in words.
func (r benchResult) perKeptDelivery() (float64, string) {
	var total float64
	var parts []string
	for _, p := range []struct{ infix, name string }{{":attempts:", "attempt line"},
		{":chan:destination:", "destination channel event"}, {":chan:account:", "account channel event"}} {
		for _, k := range r.destMemory {
			if strings.Contains(k.key, p.infix) && k.perEvent > 0 {
				total += k.perEvent
				parts = append(parts, fmt.Sprintf("%s %.0f B", p.name, k.perEvent))
			}
		}
	}
	return total, strings.Join(parts, ", ")
}

// destBytes is what a memory row's destination holds in Redis after the row, in bytes;
// destKeys names its largest keys, in KB.
func (r benchResult) destBytes() float64 {
	var t float64
	for _, k := range r.destMemory {
		t += k.bytes
	}
	return t
}

func (r benchResult) destKeys() string {
	var s []string
	for _, k := range r.destMemory[:min(len(r.destMemory), 4)] {
		s = append(s, fmt.Sprintf("%s %.1f KB", strings.TrimPrefix(k.key, storetest.AccountPrefix("acct_bench")), k.bytes/1024))
	}
	if len(r.destMemory) > 4 {
		s = append(s, fmt.Sprintf("%d more keys", len(r.destMemory)-4))
	}
	return strings.Join(s, ", ")
}

// issue17Line is what is left of issue 17's aims table: the one of its figures the rows
// above still measure.
func issue17Line(results []benchResult) string {
	r, ok := findRow(results, func(r benchRun) bool { return r.dests == 10000 })
	if !ok {
		return ""
	}
	return fmt.Sprintf("Issue 17 (not judged above): 10,000 destinations, peak RSS %.1f MiB against its ≤ %d MiB: %s. Its ingest aims are `make bench-ingest`'s; its baseline comparison runs with `BENCH_BASELINE=<rev>`.\n\n",
		float64(r.hwm)/1024, issue17RSSKiB/1024, judge(r.hwm <= issue17RSSKiB))
}

// clusterSpread is the cluster aim's figure: the cluster row's deliveries/s over the
// same row's on one server, two rows measured apart, so both spreads are in the interval
// (spread.over).
func clusterSpread(clustered, server benchResult) spread {
	return spreadOf(clustered.perSecs()).over(spreadOf(server.perSecs()))
}

// redisSpreads are the Redis aim's figures: Redis's CPU per delivery of cpuRow,
// ingest's share taken out (net), its CPU per ingested event of the ingest row (ing),
// and the first over the second (ratio): two rows measured apart, so both spreads are
// in its interval (spread.over).
func redisSpreads(cpuRow, ingest benchResult) (net, ing, ratio spread) {
	ing = spreadOf(ingest.redisPerEvents())
	net = spreadOf(cpuRow.redisPerDeliveryNets(ing.med))
	return net, ing, net.over(ing)
}

// findClusterRow is the first row of this commit's relay on the Redis Cluster that
// matches and did not fail.
func findClusterRow(results []benchResult, match func(benchRun) bool) (benchResult, bool) {
	for _, r := range results {
		if r.cluster && r.baseline == "" && !r.delayed && r.err == "" && len(r.reps) > 0 && match(r.benchRun) {
			return r, true
		}
	}
	return benchResult{}, false
}

// redisPerEvents are the ingest row's Redis CPU per stored event, each repetition's, in µs.
func (r benchResult) redisPerEvents() []float64 {
	var us []float64
	for _, rep := range r.reps {
		us = append(us, float64(rep.redisTotal().Microseconds())/float64(r.events))
	}
	return us
}

// redisPerDeliveryNets are Redis CPU per delivery with ingest's share taken out: each
// repetition's Redis CPU less its E events × perEvent (the ingest row's figure), over
// its N × E deliveries, in µs.
func (r benchResult) redisPerDeliveryNets(perEvent float64) []float64 {
	var us []float64
	for _, rep := range r.reps {
		us = append(us, (float64(rep.redisTotal().Microseconds())-perEvent*float64(r.events))/float64(r.deliveries()))
	}
	return us
}

// barePerDelivery is the median over the bare path's repetitions of get per delivery,
// in µs; false when none ran.
func (r benchResult) barePerDelivery(get func(*bareResult) time.Duration) (float64, bool) {
	var us []float64
	for _, rep := range r.reps {
		if rep.bare != nil && rep.bare.err == "" {
			us = append(us, float64(get(rep.bare).Microseconds())/float64(r.deliveries()))
		}
	}
	return benchkit.Median(us), len(us) > 0
}

// idleRedisShare and idleRelayShare are the idle window's CPU as a share of one core:
// every Redis master together, and the relay process.
func (r benchResult) idleRedisShare() float64 {
	var t time.Duration
	for _, m := range r.idleCPU {
		t += m.cpu
	}
	return t.Seconds() / r.idleFor.Seconds()
}

func (r benchResult) idleRelayShare() float64 { return r.idleRelayCPU.Seconds() / r.idleFor.Seconds() }

// idleSpread is the idle window's share of a core, Redis's (every master) or the
// relay's, with the spread of its stretches (meanSpread).
func (r benchResult) idleSpread(redis bool) spread {
	whole := r.idleRelayShare()
	if redis {
		whole = r.idleRedisShare()
	}
	xs := make([]float64, 0, len(r.idleSlices))
	for _, s := range r.idleSlices {
		cpu := s.relay
		if redis {
			cpu = s.redis
		}
		if s.took > 0 {
			xs = append(xs, cpu.Seconds()/s.took.Seconds())
		}
	}
	if len(xs) == 0 { // read at its ends only: the window is its one stretch
		xs = []float64{whole}
	}
	return meanSpread(whole, xs)
}

// findRow is the first row of this commit's relay on the single server, its bus not
// behind the delay proxy, that matches and did not fail.
func findRow(results []benchResult, match func(benchRun) bool) (benchResult, bool) {
	for _, r := range results {
		if !r.cluster && r.baseline == "" && !r.delayed && r.err == "" && len(r.reps) > 0 && match(r.benchRun) {
			return r, true
		}
	}
	return benchResult{}, false
}

// ratios are relay / bare path for each repetition whose bare path ran.
func (r benchResult) ratios() []float64 {
	var out []float64
	for _, rep := range r.reps {
		if rep.bare != nil && rep.bare.err == "" && rep.bare.perSec > 0 {
			out = append(out, rep.perSec/rep.bare.perSec)
		}
	}
	return out
}

func (r benchResult) perSecs() []float64 {
	var out []float64
	for _, rep := range r.reps {
		out = append(out, rep.perSec)
	}
	return out
}

func (r benchResult) barePerSecs() []float64 {
	var out []float64
	for _, rep := range r.reps {
		if rep.bare != nil && rep.bare.err == "" {
			out = append(out, rep.bare.perSec)
		}
	}
	return out
}

// deliveries is what one repetition delivers; the ingest row's unit is the event stored.
func (r benchResult) deliveries() int { return max(r.dests, 1) * r.events }

// perDelivery is the median over the repetitions of get(rep) per delivery, in µs.
func (r benchResult) perDelivery(get func(repResult) time.Duration) float64 {
	var us []float64
	for _, rep := range r.reps {
		us = append(us, float64(get(rep).Microseconds())/float64(r.deliveries()))
	}
	return benchkit.Median(us)
}

func medianRedisPerDelivery(r benchResult) float64 { return r.perDelivery(repResult.redisTotal) }

// aimsTable is the aims of the issues with this run's figures and verdicts.
func aimsTable(aims []aim) string {
	var b strings.Builder
	b.WriteString("### Aims (issues 23, 30, 31, 46 and 53), this run\n\n")
	b.WriteString("Each figure with its spread: the median of its runs (of a ratio, the median of the pairs' ratios, each pair a run of the relay and the bare path's run right after it) and the interval that holds the median with at least 99% confidence (8 to 11 runs: the smallest and the largest, 12 or more the second smallest and largest; fewer: Student's t at 99% on the runs' logarithms, or the smallest and the largest where wider), but a CPU ratio of 8 pairs or more: the Hodges–Lehmann estimate and the 99% Wilcoxon signed-rank interval of the pairs' logarithms; the interval of a CPU aim, of the cluster's, of Redis's per delivery over per ingested event and of p99 over the bare pipeline's at least as wide as that figure's estimates in earlier runs spread (docs/bench-history.tsv: t at 99% times their standard deviation in the logarithm, about this run's estimate; \"as wide as N earlier runs spread\"); a row of two or more pairs ran them in two sittings minutes apart, each on a relay and a bare path of its own; a ratio of fewer than 8 pairs holds both series' own spreads too, and a figure over another row's takes both rows' intervals; a row that may run 8 pairs settles on no fewer; an idle share is the whole window's, its interval Student's t at 99% on the mean of the window's 5-second stretches (one with a garbage collection in it widens it); a verdict whose interval crosses its target is \"unsure\".\n\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| aim\t target\t figure\t verdict\t")
	fmt.Fprintln(tw, "| ---\t ---\t ---\t ---\t")
	for _, a := range aims {
		fmt.Fprintf(tw, "| %s\t %s\t %s\t %s\t\n", a.what, a.target, a.figure, a.state)
	}
	tw.Flush()
	b.WriteString("\n")
	return b.String()
}

// benchReport is the end-to-end part of the markdown `make bench` writes into
// docs/benchmarks.md.
func benchReport(results []benchResult, load, loadAfter, commit string, started time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "### End to end (%s)\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "load average before %s, after %s; nproc %d. Rows of several runs give medians (each run's ratio in brackets); "+
		"the bare path of one destination is the bare pipeline, of many the bare fan-out; the row of 0 destinations is ingest alone (events stored/s). "+
		"Wall time: the bare path's set-up (sessions, clients, warm-up), and the relay's start until every destination has the warm-up event (not in any figure).\n\n", load, loadAfter, nproc())
	tw := tabwriter.NewWriter(&b, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| destinations\t event bytes\t events × runs\t publish rate\t relay\t deliveries/s\t bare path/s\t relay / bare\t latency p50 / p99 / max\t bare pipeline p50 / p99 / p99.9\t relay-added p50 / p99 / p99.9\t duplicates\t relay RSS MiB idle → end (peak)\t setup: bare, relay\t Redis\t")
	fmt.Fprintln(tw, "| ---:\t ---:\t ---:\t ---:\t ---\t ---:\t ---:\t ---:\t ---:\t ---:\t ---:\t ---:\t ---:\t ---:\t ---\t")
	for _, r := range results {
		if r.err != "" && len(r.reps) == 0 {
			fmt.Fprintf(tw, "| %d\t %d\t %d × %d\t %s\t %s\t failed: %s\t\t\t\t\t\t\t\t\t %s\t\n", r.dests, r.size, r.events, r.repeats, r.rateName(), r.relayName(), r.err, r.redisKind())
			continue
		}
		bareRate, ratio, barePct, added, lat := "–", "–", "–", "–", "–"
		if bare := r.barePerSecs(); len(bare) > 0 {
			bareRate = fmt.Sprintf("%.0f", benchkit.Median(bare))
		}
		if ratios := r.ratios(); len(ratios) > 0 {
			ratio = pct(benchkit.Median(ratios))
			if len(ratios) > 1 {
				ratio += " (" + pcts(ratios) + ")"
			}
		}
		for _, rep := range r.reps {
			if rep.bare != nil && rep.bare.err != "" {
				bareRate = "failed: " + rep.bare.err
				break
			}
		}
		if r.dests == 1 && len(r.barePerSecs()) > 0 {
			barePct = fmt.Sprintf("%s / %s / %s", round(r.bareLat(0.5)), round(r.bareLat(0.99)), round(r.bareLat(0.999)))
			added = fmt.Sprintf("%s / %s / %s", round(r.addedLat(0.5)), round(r.addedLat(0.99)), round(r.addedLat(0.999)))
		}
		if !r.ingestOnly() {
			lat = fmt.Sprintf("%s / %s / %s", round(r.lat(0.5)), round(r.lat(0.99)), round(r.lat(1)))
		}
		rate := fmt.Sprintf("%.0f", benchkit.Median(r.perSecs()))
		if r.err != "" {
			rate += " (then failed: " + r.err + ")"
		}
		setup := "–, " + r.startup.Round(100*time.Millisecond).String()
		if r.bareTime > 0 {
			setup = fmt.Sprintf("%s, %s", r.bareTime.Round(100*time.Millisecond), r.startup.Round(100*time.Millisecond))
		}
		fmt.Fprintf(tw, "| %d\t %d\t %d × %d\t %s\t %s\t %s\t %s\t %s\t %s\t %s\t %s\t %d\t %.1f → %.1f (%.1f)\t %s\t %s\t\n",
			r.dests, r.size, r.events, len(r.reps), r.rateName(), r.relayName(), rate, bareRate, ratio,
			lat, barePct, added, r.dups,
			float64(r.rssIdle)/1024, float64(r.rssEnd)/1024, float64(r.hwm)/1024, setup, r.redisKind())
	}
	tw.Flush()
	b.WriteString("\n")
	cpuReport(&b, results)
	lateReport(&b, results)
	historyReport(&b, results, commit, started)
	redisCPUReport(&b, results)
	return b.String()
}

// lat, bareLat and addedLat are medians over the repetitions of a latency quantile (of
// the relay, of the bare pipeline, and of their difference); lat(1) is the largest.
func (r benchResult) lat(q float64) time.Duration {
	var ds []time.Duration
	for _, rep := range r.reps {
		ds = append(ds, rep.lat.at(q))
	}
	if q == 1 {
		return slices.Max(append(ds, 0))
	}
	return benchkit.Median(ds)
}

func (r benchResult) bareLat(q float64) time.Duration {
	var ds []time.Duration
	for _, rep := range r.reps {
		if rep.bare != nil && rep.bare.err == "" {
			ds = append(ds, rep.bare.lat.at(q))
		}
	}
	return benchkit.Median(ds)
}

func (r benchResult) addedLat(q float64) time.Duration {
	var ds []time.Duration
	for _, rep := range r.reps {
		if rep.bare != nil && rep.bare.err == "" {
			ds = append(ds, rep.lat.at(q)-rep.bare.lat.at(q))
		}
	}
	return benchkit.Median(ds)
}

// cpuReport is what each delivery cost each process, relay beside its bare path.
func cpuReport(b *strings.Builder, results []benchResult) {
	tw := tabwriter.NewWriter(b, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| destinations\t event bytes\t publish rate\t Redis\t path\t relay µs/delivery\t Redis µs/delivery\t load process µs/delivery\t bus µs/delivery\t rabbitmq µs/delivery\t total\t total / the bare path's, pair by pair\t")
	fmt.Fprintln(tw, "| ---:\t ---:\t ---:\t ---\t ---\t ---:\t ---:\t ---:\t ---:\t ---:\t ---:\t ---:\t")
	rows := 0
	for _, r := range results {
		if len(r.reps) == 0 {
			continue
		}
		relay := r.perDelivery(func(rep repResult) time.Duration { return rep.relayCPU })
		red := medianRedisPerDelivery(r)
		loadP := r.perDelivery(func(rep repResult) time.Duration { return rep.loadCPU })
		bus := r.perDelivery(func(rep repResult) time.Duration { return rep.busCPU })
		rabbit := r.perDelivery(func(rep repResult) time.Duration { return rep.rabbitCPU })
		path := r.relayName()
		if r.ingestOnly() {
			path += ", ingest alone (per event)"
		}
		ratio := "–"
		if sp := r.systemSpread(); sp.n > 0 {
			ratio = sp.ratio("pairs")
		}
		fmt.Fprintf(tw, "| %d\t %d\t %s\t %s\t %s\t %.1f\t %.1f\t %.1f\t %.1f\t %.1f\t %.1f\t %s\t\n", r.dests, r.size, r.rateName(), r.redisKind(),
			path, relay, red, loadP, bus, rabbit, relay+red+loadP+bus+rabbit, ratio)
		rows++
		bareLoad, ok := r.barePerDelivery(func(b *bareResult) time.Duration { return b.loadCPU })
		if !ok {
			continue
		}
		bareBus, _ := r.barePerDelivery(func(b *bareResult) time.Duration { return b.busCPU })
		bareRabbit, _ := r.barePerDelivery(func(b *bareResult) time.Duration { return b.rabbitCPU })
		rabbitCol := "–"
		if r.dests == 1 {
			rabbitCol = fmt.Sprintf("%.1f", bareRabbit)
		} else {
			bareRabbit = 0 // the fan-out uses no broker: what the broker spent meanwhile is not its
		}
		fmt.Fprintf(tw, "| %d\t %d\t %s\t –\t %s\t –\t –\t %.1f\t %.1f\t %s\t %.1f\t\t\n", r.dests, r.size, r.rateName(), bareKind(r.benchRun),
			bareLoad, bareBus, rabbitCol, bareLoad+bareBus+bareRabbit)
	}
	if rows == 0 {
		return
	}
	fmt.Fprintln(b, "CPU per delivery over each timed run (first publish, or the fan-out's first write, to the bus's last answer; the ingest row: to the moment the account's log holds every event, per event), median of the runs: "+
		"the relay process, the bus process (`loadtest bus`, the sandbox EventBridge) and the broker from /proc/PID/stat (utime + stime), Redis from INFO cpu (used_cpu_user + used_cpu_sys, every master), "+
		"the load process (this one: the publisher; for the bare pipeline also its consumer; for the bare fan-out its writers alone) from getrusage. "+
		"The bare fan-out uses no broker. Each of the relay's runs is followed by one of its bare path's (ABAB…); the last column is the total of each pair's relay run over its bare run's: "+
		"its spread as in the aims table (the aim's interval, widened where its row's earlier runs spread more).")
	fmt.Fprintln(b)
	tw.Flush()
	fmt.Fprintln(b)
}

func (r benchRun) rateName() string {
	if r.rate > 0 {
		return fmt.Sprintf("%d/s%s", r.rate, r.lateName())
	}
	return "as fast as confirmed" + r.lateName()
}

func (r benchRun) relayName() string {
	if r.baseline != "" {
		return "at " + r.baseline
	}
	return "this commit"
}

func (r benchRun) redisKind() string {
	if r.cluster {
		return "cluster, 3 masters + 3 replicas"
	}
	return "one server"
}

func bareKind(r benchRun) string {
	if r.dests == 1 {
		return "bare pipeline"
	}
	return "bare fan-out"
}

// redisCPUReport is what each row cost each Redis master: its CPU (INFO cpu) over the
// timed runs, per event published and per delivery, and what the row's idle window cost
// Redis and the relay. One account's keys share one slot, so its whole cost lands on one
// master.
func redisCPUReport(b *strings.Builder, results []benchResult) {
	tw := tabwriter.NewWriter(b, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| destinations\t events × runs\t publish rate\t relay\t Redis\t master\t Redis CPU (INFO cpu)\t µs per event\t µs per delivery\t idle: CPU share\t idle: µs per destination per second\t idle: relay CPU share\t")
	fmt.Fprintln(tw, "| ---:\t ---:\t ---:\t ---\t ---\t ---\t ---:\t ---:\t ---:\t ---:\t ---:\t ---:\t")
	rows := 0
	for _, r := range results {
		if len(r.reps) == 0 {
			continue
		}
		for i, m := range r.reps[0].redisCPU {
			var cpu time.Duration
			for _, rep := range r.reps {
				if i < len(rep.redisCPU) {
					cpu += rep.redisCPU[i].cpu
				}
			}
			us := float64(cpu.Microseconds())
			events := r.events * len(r.reps)
			idleShare, idlePerDest, idleRelay, perDelivery := "–", "–", "–", "–"
			if !r.ingestOnly() {
				perDelivery = fmt.Sprintf("%.2f", us/float64(r.dests*events))
			}
			if i < len(r.idleCPU) && r.idleFor > 0 {
				c := r.idleCPU[i].cpu.Seconds()
				idleShare = fmt.Sprintf("%.1f%%", 100*c/r.idleFor.Seconds())
				idlePerDest = fmt.Sprintf("%.2f", 1e6*c/r.idleFor.Seconds()/float64(r.dests))
				if i == 0 {
					idleRelay = fmt.Sprintf("%.1f%% over %s", 100*r.idleRelayShare(), r.idleFor.Round(100*time.Millisecond))
				}
			}
			fmt.Fprintf(tw, "| %d\t %d × %d\t %s\t %s\t %s\t %s\t %s\t %.1f\t %s\t %s\t %s\t %s\t\n", r.dests, r.events, len(r.reps), r.rateName(), r.relayName(),
				r.redisKind(), m.addr, cpu.Round(time.Millisecond), us/float64(events), perDelivery, idleShare, idlePerDest, idleRelay)
			rows++
		}
	}
	if rows == 0 {
		return
	}
	fmt.Fprintln(b, "Redis CPU of each master over each row's timed runs together, from INFO cpu (used_cpu_user + used_cpu_sys) read before and after each; "+
		"idle: the same, and the relay process's utime + stime, over a window that starts a second after the warm-up with nothing published (leases renewed, logs watched), as a share of one core and per destination:")
	fmt.Fprintln(b)
	tw.Flush()
	fmt.Fprintln(b)
	fmt.Fprintln(b, "The bench's destinations are one account's, so one slot's: on the cluster one master does that account's work and the others idle; accounts spread over the masters by slot.")
	fmt.Fprintln(b)
}

func pct(x float64) string { return fmt.Sprintf("%.0f%%", 100*x) }

func pcts(xs []float64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = pct(x)
	}
	return strings.Join(s, " / ")
}

func durations(ds []time.Duration) string {
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = round(d).String()
	}
	return strings.Join(s, " / ")
}

func sizeName(n int) string {
	if n%1024 == 0 {
		return fmt.Sprintf("%d KB", n/1024)
	}
	return fmt.Sprintf("%d B", n)
}

func thousands(n int) string {
	if n >= 1000 {
		return fmt.Sprintf("%s,%03d", thousands(n/1000), n%1000)
	}
	return fmt.Sprint(n)
}

func round(d time.Duration) time.Duration {
	switch {
	case d > time.Second:
		return d.Round(10 * time.Millisecond)
	case d > time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}
