package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// The aims of issue 17, judged by judgeAims.
const (
	aimSize             = 1024             // event size the latency and destination aims are set for
	aimOneDest          = 0.90             // one destination as fast as confirmed / bare pipeline
	aimFanOut           = 0.80             // 100 and 1,000 destinations / bare fan-out
	aimRedisPerDelivery = 0.5              // Redis CPU per delivery / the baseline's, 1,000 destinations
	aimPeakRSSKiB       = 150 * 1024       // 10,000 destinations, peak RSS
	aimAddedP99         = time.Millisecond // relay-added p99, 1 destination, 1 KB at 200/s
	aimLatencyRate      = 200              // the publish rate the latency aim is set for
)

// aimIngest is the ingest aim per event size: relay / bare consumer, median of 3.
var aimIngest = []struct {
	size  int
	ratio float64
}{{1024, 0.90}, {16384, 0.60}, {65536, 0.50}}

// ingestSummary is one benchingest measurement, as its -summary file holds it (one JSON
// object a line).
type ingestSummary struct {
	Size   int       `json:"size"`
	Redis  string    `json:"redis"`  // "" for the single server
	Ratios []float64 `json:"ratios"` // relay/bare, each run
	Median float64   `json:"median"` // of Ratios
}

func readIngestSummary(path string) ([]ingestSummary, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("-ingest-summary: %w", err)
	}
	defer f.Close()
	var out []ingestSummary
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var s ingestSummary
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			return nil, fmt.Errorf("-ingest-summary %s: %w", path, err)
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

// aimState is an aim's verdict: measured and met or not, or not measured in this run.
type aimState int

const (
	unmeasured aimState = iota
	met
	notMet
)

func (s aimState) String() string {
	switch s {
	case met:
		return "met"
	case notMet:
		return "NOT met"
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

// judgeAims gives each of the aims its figure and verdict from this run's
// ingest summaries and end-to-end rows; an aim whose row is missing or failed is "not
// measured", never met.
func judgeAims(ingest []ingestSummary, results []benchResult) []aim {
	var aims []aim
	for _, a := range aimIngest {
		x := aim{what: fmt.Sprintf("ingest %s / bare consumer (median of the runs)", sizeName(a.size)),
			target: fmt.Sprintf("≥ %.0f%%", 100*a.ratio), figure: "no ingest run of this size"}
		for _, s := range ingest {
			if s.Size == a.size && s.Redis == "" && len(s.Ratios) > 0 {
				x.figure = fmt.Sprintf("%s (runs %s)", pct(s.Median), pcts(s.Ratios))
				x.state = judge(s.Median >= a.ratio)
			}
		}
		aims = append(aims, x)
	}

	one := aim{what: "1 destination, as fast as confirmed / bare pipeline (consume → PutEvents → ack)",
		target: fmt.Sprintf("≥ %.0f%%", 100*aimOneDest), figure: "no row 1:…:0 of 1 KB"}
	if r, ok := findRow(results, func(r benchRun) bool { return r.dests == 1 && r.rate == 0 && r.size == aimSize }); ok {
		one.figure, one.state = ratioAim(r, aimOneDest)
	}
	aims = append(aims, one)

	for _, n := range []int{100, 1000} {
		x := aim{what: fmt.Sprintf("%s destinations / bare fan-out", thousands(n)),
			target: fmt.Sprintf("≥ %.0f%%", 100*aimFanOut), figure: fmt.Sprintf("no row %d:…:0 of 1 KB", n)}
		if r, ok := findRow(results, func(r benchRun) bool { return r.dests == n && r.rate == 0 && r.size == aimSize }); ok {
			x.figure, x.state = ratioAim(r, aimFanOut)
		}
		aims = append(aims, x)
	}

	red := aim{what: "Redis CPU per delivery, 1,000 destinations, against the baseline's in the same run",
		target: fmt.Sprintf("≤ %.0f%% of the baseline's", 100*aimRedisPerDelivery), figure: "no 1,000-destination row"}
	now, okNow := findRow(results, func(r benchRun) bool { return r.dests == 1000 && r.rate == 0 && r.size == aimSize })
	base, okBase := findBaseline(results, func(r benchRun) bool { return r.dests == 1000 && r.rate == 0 && r.size == aimSize })
	switch {
	case okNow && okBase:
		a, b := medianRedisPerDelivery(now), medianRedisPerDelivery(base)
		red.figure = fmt.Sprintf("%.1f µs against %.1f µs at %s: %s", a, b, base.baseline, pct(a/b))
		red.state = judge(b > 0 && a <= aimRedisPerDelivery*b)
	case okNow:
		red.figure = fmt.Sprintf("%.1f µs; the baseline did not run (today's figure only)", medianRedisPerDelivery(now))
	}
	aims = append(aims, red)

	mem := aim{what: "10,000 destinations, peak RSS of the relay",
		target: fmt.Sprintf("≤ %d MiB", aimPeakRSSKiB/1024), figure: "no 10,000-destination row"}
	if r, ok := findRow(results, func(r benchRun) bool { return r.dests == 10000 }); ok {
		mem.figure = fmt.Sprintf("%.1f MiB (idle %.1f MiB)", float64(r.hwm)/1024, float64(r.rssIdle)/1024)
		mem.state = judge(r.hwm <= aimPeakRSSKiB)
	}
	aims = append(aims, mem)

	lat := aim{what: fmt.Sprintf("relay-added p99, 1 destination, 1 KB at %d/s", aimLatencyRate),
		target: fmt.Sprintf("≤ %s", aimAddedP99), figure: fmt.Sprintf("no row 1:…:%d of 1 KB", aimLatencyRate)}
	if r, ok := findRow(results, func(r benchRun) bool { return r.dests == 1 && r.rate == aimLatencyRate && r.size == aimSize }); ok {
		var added []time.Duration
		for _, rep := range r.reps {
			if rep.bare == nil || rep.bare.err != "" {
				continue
			}
			added = append(added, rep.lat.at(0.99)-rep.bare.lat.at(0.99))
		}
		if len(added) > 0 {
			m := medianDuration(added)
			lat.figure = fmt.Sprintf("%s (runs %s)", round(m), durations(added))
			lat.state = judge(m <= aimAddedP99)
		} else {
			lat.figure = "the bare pipeline failed"
		}
	}
	aims = append(aims, lat)
	return aims
}

// findRow is the first row of this commit's relay on the single server that matches and
// did not fail.
func findRow(results []benchResult, match func(benchRun) bool) (benchResult, bool) {
	for _, r := range results {
		if !r.cluster && r.baseline == "" && r.err == "" && len(r.reps) > 0 && match(r.benchRun) {
			return r, true
		}
	}
	return benchResult{}, false
}

// findBaseline is the same among the baseline relay's rows.
func findBaseline(results []benchResult, match func(benchRun) bool) (benchResult, bool) {
	for _, r := range results {
		if !r.cluster && r.baseline != "" && r.err == "" && len(r.reps) > 0 && match(r.benchRun) {
			return r, true
		}
	}
	return benchResult{}, false
}

// ratioAim judges the median, over the repetitions, of relay / bare path.
func ratioAim(r benchResult, target float64) (string, aimState) {
	ratios := r.ratios()
	if len(ratios) == 0 {
		return "the bare path failed", unmeasured
	}
	m := medianFloat(ratios)
	return fmt.Sprintf("%s (runs %s; %.0f against %.0f/s)", pct(m), pcts(ratios), medianFloat(r.perSecs()), medianFloat(r.barePerSecs())), judge(m >= target)
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

// deliveries is what one repetition delivers.
func (r benchResult) deliveries() int { return r.dests * r.events }

// perDelivery is the median over the repetitions of get(rep) per delivery, in µs.
func (r benchResult) perDelivery(get func(repResult) time.Duration) float64 {
	var us []float64
	for _, rep := range r.reps {
		us = append(us, float64(get(rep).Microseconds())/float64(r.deliveries()))
	}
	return medianFloat(us)
}

func medianRedisPerDelivery(r benchResult) float64 { return r.perDelivery(repResult.redisTotal) }

// aimsTable is the aims of the issue with this run's figures and verdicts.
func aimsTable(aims []aim) string {
	var b strings.Builder
	b.WriteString("### Aims (issue 17), this run\n\n")
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
func benchReport(results []benchResult, load, loadAfter string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "### End to end (%s)\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "load average before %s, after %s; nproc %d. Rows of several runs give medians (each run's ratio in brackets); "+
		"the bare path of one destination is the bare pipeline, of many the bare fan-out.\n\n", load, loadAfter, nproc())
	tw := tabwriter.NewWriter(&b, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| destinations\t event bytes\t events × runs\t publish rate\t relay\t deliveries/s\t bare path/s\t relay / bare\t latency p50 / p99 / max\t bare pipeline p50 / p99\t relay-added p50 / p99\t duplicates\t relay RSS MiB idle → end (peak)\t Redis\t")
	fmt.Fprintln(tw, "| ---:\t ---:\t ---:\t ---:\t ---\t ---:\t ---:\t ---:\t ---:\t ---:\t ---:\t ---:\t ---:\t ---\t")
	for _, r := range results {
		if r.err != "" && len(r.reps) == 0 {
			fmt.Fprintf(tw, "| %d\t %d\t %d × %d\t %s\t %s\t failed: %s\t\t\t\t\t\t\t\t %s\t\n", r.dests, r.size, r.events, r.repeats, r.rateName(), r.relayName(), r.err, r.redisKind())
			continue
		}
		bareRate, ratio, barePct, added := "–", "–", "–", "–"
		if bare := r.barePerSecs(); len(bare) > 0 {
			bareRate = fmt.Sprintf("%.0f", medianFloat(bare))
		}
		if ratios := r.ratios(); len(ratios) > 0 {
			ratio = pct(medianFloat(ratios))
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
			barePct = fmt.Sprintf("%s / %s", round(r.bareLat(0.5)), round(r.bareLat(0.99)))
			added = fmt.Sprintf("%s / %s", round(r.addedLat(0.5)), round(r.addedLat(0.99)))
		}
		rate := fmt.Sprintf("%.0f", medianFloat(r.perSecs()))
		if r.err != "" {
			rate += " (then failed: " + r.err + ")"
		}
		fmt.Fprintf(tw, "| %d\t %d\t %d × %d\t %s\t %s\t %s\t %s\t %s\t %s / %s / %s\t %s\t %s\t %d\t %.1f → %.1f (%.1f)\t %s\t\n",
			r.dests, r.size, r.events, len(r.reps), r.rateName(), r.relayName(), rate, bareRate, ratio,
			round(r.lat(0.5)), round(r.lat(0.99)), round(r.lat(1)), barePct, added, r.dups,
			float64(r.rssIdle)/1024, float64(r.rssEnd)/1024, float64(r.hwm)/1024, r.redisKind())
	}
	tw.Flush()
	b.WriteString("\n")
	cpuReport(&b, results)
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
	return medianDuration(ds)
}

func (r benchResult) bareLat(q float64) time.Duration {
	var ds []time.Duration
	for _, rep := range r.reps {
		if rep.bare != nil && rep.bare.err == "" {
			ds = append(ds, rep.bare.lat.at(q))
		}
	}
	return medianDuration(ds)
}

func (r benchResult) addedLat(q float64) time.Duration {
	var ds []time.Duration
	for _, rep := range r.reps {
		if rep.bare != nil && rep.bare.err == "" {
			ds = append(ds, rep.lat.at(q)-rep.bare.lat.at(q))
		}
	}
	return medianDuration(ds)
}

// cpuReport is what each delivery cost each process, relay beside its bare path.
func cpuReport(b *strings.Builder, results []benchResult) {
	tw := tabwriter.NewWriter(b, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| destinations\t event bytes\t publish rate\t Redis\t path\t relay µs/delivery\t Redis µs/delivery\t load process µs/delivery\t rabbitmq µs/delivery\t total\t")
	fmt.Fprintln(tw, "| ---:\t ---:\t ---:\t ---\t ---\t ---:\t ---:\t ---:\t ---:\t ---:\t")
	rows := 0
	for _, r := range results {
		if len(r.reps) == 0 {
			continue
		}
		relay := r.perDelivery(func(rep repResult) time.Duration { return rep.relayCPU })
		red := medianRedisPerDelivery(r)
		loadP := r.perDelivery(func(rep repResult) time.Duration { return rep.loadCPU })
		rabbit := r.perDelivery(func(rep repResult) time.Duration { return rep.rabbitCPU })
		fmt.Fprintf(tw, "| %d\t %d\t %s\t %s\t %s\t %.1f\t %.1f\t %.1f\t %.1f\t %.1f\t\n", r.dests, r.size, r.rateName(), r.redisKind(),
			r.relayName(), relay, red, loadP, rabbit, relay+red+loadP+rabbit)
		rows++
		var bareLoad, bareRabbit []float64
		for _, rep := range r.reps {
			if rep.bare != nil && rep.bare.err == "" {
				bareLoad = append(bareLoad, float64(rep.bare.loadCPU.Microseconds())/float64(r.deliveries()))
				bareRabbit = append(bareRabbit, float64(rep.bare.rabbitCPU.Microseconds())/float64(r.deliveries()))
			}
		}
		if len(bareLoad) > 0 {
			rabbitCol := "–"
			if r.dests == 1 {
				rabbitCol = fmt.Sprintf("%.1f", medianFloat(bareRabbit))
			}
			fmt.Fprintf(tw, "| %d\t %d\t %s\t –\t %s\t –\t –\t %.1f\t %s\t %.1f\t\n", r.dests, r.size, r.rateName(), bareKind(r.benchRun),
				medianFloat(bareLoad), rabbitCol, medianFloat(bareLoad)+medianFloat(bareRabbit))
		}
	}
	if rows == 0 {
		return
	}
	fmt.Fprintln(b, "CPU per delivery over each timed run (first publish, or the fan-out's first write, to the bus's last answer), median of the runs: "+
		"the relay process and the broker from /proc/PID/stat (utime + stime), Redis from INFO cpu (used_cpu_user + used_cpu_sys, every master), "+
		"the load process (this one: the publisher and the in-process bus; for the bare pipeline also its consumer, for the bare fan-out its writers) from getrusage. "+
		"The bare fan-out uses no broker.")
	fmt.Fprintln(b)
	tw.Flush()
	fmt.Fprintln(b)
}

func (r benchRun) rateName() string {
	if r.rate > 0 {
		return fmt.Sprintf("%d/s", r.rate)
	}
	return "as fast as confirmed"
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
// timed runs, per event published and per delivery. One account's keys share one slot,
// so its whole cost lands on one master.
func redisCPUReport(b *strings.Builder, results []benchResult) {
	tw := tabwriter.NewWriter(b, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| destinations\t events × runs\t publish rate\t relay\t Redis\t master\t Redis CPU (INFO cpu)\t µs per event\t µs per delivery\t idle: CPU share\t idle: µs per destination per second\t")
	fmt.Fprintln(tw, "| ---:\t ---:\t ---:\t ---\t ---\t ---\t ---:\t ---:\t ---:\t ---:\t ---:\t")
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
			idleShare, idlePerDest := "–", "–"
			if i < len(r.idleCPU) && r.idleFor > 0 {
				c := r.idleCPU[i].cpu.Seconds()
				idleShare = fmt.Sprintf("%.1f%%", 100*c/r.idleFor.Seconds())
				idlePerDest = fmt.Sprintf("%.2f", 1e6*c/r.idleFor.Seconds()/float64(r.dests))
			}
			fmt.Fprintf(tw, "| %d\t %d × %d\t %s\t %s\t %s\t %s\t %s\t %.1f\t %.2f\t %s\t %s\t\n", r.dests, r.events, len(r.reps), r.rateName(), r.relayName(),
				r.redisKind(), m.addr, cpu.Round(time.Millisecond), us/float64(events), us/float64(r.dests*events), idleShare, idlePerDest)
			rows++
		}
	}
	if rows == 0 {
		return
	}
	fmt.Fprintln(b, "Redis CPU of each master over each row's timed runs together, from INFO cpu (used_cpu_user + used_cpu_sys) read before and after each; "+
		"idle: the same over a window after the warm-up with nothing published (leases renewed, logs watched), as a share of one core and per destination:")
	fmt.Fprintln(b)
	tw.Flush()
	fmt.Fprintln(b)
	fmt.Fprintln(b, "The bench's destinations are one account's, so one slot's: on the cluster one master does that account's work and the others idle; accounts spread over the masters by slot.")
	fmt.Fprintln(b)
}

func medianFloat(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func medianDuration(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
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
		return fmt.Sprintf("%d,%03d", n/1000, n%1000)
	}
	return fmt.Sprint(n)
}
