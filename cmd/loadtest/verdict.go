package main

import (
	"fmt"
	"math"
	"math/big"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/gonum/stat/distuv"

	"github.com/mercamap/relay/internal/benchkit"
)

// A figure measured several times is judged by its median and the interval that holds
// the median with at least 99% confidence. From 8 repetitions on, that is the order
// statistics x(k)…x(n+1-k) of n repetitions (up to 11 the smallest and the largest: 99.2%
// of 8, 99.6% of 9). Fewer repetitions cannot give 99% that way (the smallest and largest
// of 7 hold it with 98.4%, of 5 with 93.75%, of 3 with 75%), so theirs is the 99% interval of Student's t
// on the repetitions' logarithms (it assumes they spread normally; ratios and rates are
// positive and spread multiplicatively), or the smallest–largest where that is wider. A
// verdict whose interval crosses its target is "unsure", never "met": two runs of the
// same code then disagree only when one of them is wrong by more than its own spread
// says. (At 90%, two full runs at 2b6d470 disagreed on 4 of 25; at 99% by order
// statistics alone, with 3- and 5-repetition rows at 75% and 93.75%, two at 033d9a4
// disagreed on 4 of 25 too, three of the four on such rows.)

// spread is a figure measured n times: its median and the interval lo…hi; earlier, when
// not 0, the earlier runs whose spread widened the interval (spread.widened).
type spread struct {
	med, lo, hi float64
	n, earlier  int
}

// medianConfidence is the least confidence the interval of a spread has in holding the
// median.
const medianConfidence = 0.99

// spreadOf is the spread of xs; the zero spread (n 0) for none.
func spreadOf(xs []float64) spread {
	if len(xs) == 0 {
		return spread{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	k := medianRank(n)
	med := s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	sp := spread{med: med, lo: s[k-1], hi: s[n-k], n: n}
	if n >= 2 && 1-2*binomBelow(n, k) < medianConfidence {
		if lo, hi, ok := logT(s); ok {
			sp.lo, sp.hi = min(sp.lo, lo), max(sp.hi, hi)
		}
	}
	return sp
}

// logT is the 99% interval of Student's t on the logarithms of xs (2 to 31 of them, each
// positive): exp(mean ± t·sd/√n); false when it cannot be had.
func logT(xs []float64) (lo, hi float64, ok bool) {
	n := len(xs)
	if n < 2 || n-1 > tMaxDF || slices.Min(xs) <= 0 {
		return 0, 0, false
	}
	mean, sd := logMeanSD(xs)
	half := t995(n-1) * sd / math.Sqrt(float64(n))
	if half < 1e-9 { // all alike: exp(log(x)) need not give x back exactly
		return slices.Min(xs), slices.Max(xs), true
	}
	return math.Exp(mean - half), math.Exp(mean + half), true
}

// logMeanSD is the mean and the standard deviation (n − 1) of the logarithms of xs (two
// or more, each positive). (Not gonum's stat.MeanStdDev: its compensated sums differ
// from these in the last bits; for alike values it gives a standard deviation of 0
// where this gives about 1e-16, and an interval's end then moves by one ulp.)
func logMeanSD(xs []float64) (mean, sd float64) {
	n := float64(len(xs))
	for _, x := range xs {
		mean += math.Log(x)
	}
	mean /= n
	var ss float64
	for _, x := range xs {
		d := math.Log(x) - mean
		ss += d * d
	}
	return mean, math.Sqrt(ss / (n - 1))
}

// tMaxDF is the most degrees of freedom t995 gives its own quantile for: the printed
// tables' last row, which the bench's intervals have always stopped at.
const tMaxDF = 30

// t995 is Student's t at 0.995 (a two-sided 99% interval) for df ≥ 1 degrees of
// freedom: gonum's distuv.StudentsT quantile rounded to three decimals, as the printed
// tables give it (t(0.995, 9) = 3.250; every verdict so far was judged on those); past
// tMaxDF, 30's (2.750, a little wider than the true quantile, which falls towards the
// normal's 2.576).
func t995(df int) float64 {
	q := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: float64(min(df, tMaxDF))}.Quantile(0.995)
	return math.Round(q*1000) / 1000
}

// meanSpread is the spread of a share read over the stretches of one window (xs, each
// over about as long), about the whole window's share (whole): whole ± t·sd/√n with
// Student's t at 99% on the stretches, never below 0; one stretch: whole alone. A mean,
// not a median: one stretch a garbage collection fell in counts at its share of the
// window, and widens the interval rather than being outvoted by the quiet ones.
func meanSpread(whole float64, xs []float64) spread {
	n := len(xs)
	sp := spread{med: whole, lo: whole, hi: whole, n: n}
	if n < 2 {
		return sp
	}
	var mean, ss float64
	for _, x := range xs {
		mean += x
	}
	mean /= float64(n)
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	half := t995(n-1) * math.Sqrt(ss/float64(n-1)) / math.Sqrt(float64(n))
	sp.lo, sp.hi = max(whole-half, 0), whole+half
	return sp
}

// medianRank is the largest k ≥ 1 such that x(k)…x(n+1-k) of n repetitions holds their
// population's median with at least medianConfidence: 1 − 2·P(Binomial(n, ½) < k).
func medianRank(n int) int {
	k := 1
	for next := 2; next <= (n+1)/2; next++ {
		if 1-2*binomBelow(n, next) < medianConfidence {
			break
		}
		k = next
	}
	return k
}

// binomBelow is P(Binomial(n, ½) < k), exactly: the sum of math/big's binomial
// coefficients C(n, i), i < k, over 2ⁿ, rounded once to a float64. (gonum's
// distuv.Binomial.CDF goes through the regularized incomplete beta function and gives
// P(Binomial(5, ½) < 1) as 0.031249999999999993, not 1/32.)
func binomBelow(n, k int) float64 {
	sum, c := new(big.Int), new(big.Int)
	for i := 0; i < min(k, n+1); i++ {
		sum.Add(sum, c.Binomial(int64(n), int64(i)))
	}
	p, _ := new(big.Rat).SetFrac(sum, new(big.Int).Lsh(big.NewInt(1), uint(n))).Float64()
	return p
}

// atMost judges "≤ target": met when the whole interval is at or under it, NOT met when
// the whole interval is over it, unsure when it crosses; not measured without figures.
func (s spread) atMost(target float64) aimState {
	switch {
	case s.n == 0:
		return unmeasured
	case s.hi <= target:
		return met
	case s.lo > target:
		return notMet
	}
	return unsure
}

// atLeast judges "≥ target" the same way.
func (s spread) atLeast(target float64) aimState {
	switch {
	case s.n == 0:
		return unmeasured
	case s.lo >= target:
		return met
	case s.hi < target:
		return notMet
	}
	return unsure
}

// over is the spread of a/b for two figures measured apart (not in pairs): the median
// over the median, and an interval from the extremes of both (a's low over b's high,
// a's high over b's low), so the noise of each is in it.
func (s spread) over(b spread) spread {
	if s.n == 0 || b.n == 0 || b.lo <= 0 {
		return spread{}
	}
	return spread{med: s.med / b.med, lo: s.lo / b.hi, hi: s.hi / b.lo, n: s.n}
}

// close says whether the interval, on one side of target, comes within closeMargin of
// it: a verdict another run's spread could still cross, worth more repetitions.
func (s spread) close(target float64) bool {
	return s.n > 0 && s.lo < target*(1+closeMargin) && s.hi > target/(1+closeMargin)
}

// closeMargin is how near (relative) a settled interval may come to its target before
// its row runs more pairs anyway.
const closeMargin = 0.05

// ratio prints a spread of ratios: "1.12× (1.05–1.20, 5 pairs)", or "1.12× (0.90–1.40,
// 13 pairs, as wide as 5 earlier runs spread)".
func (s spread) ratio(unit string) string {
	return fmt.Sprintf("%.2f× (%.2f–%.2f, %s)", s.med, s.lo, s.hi, s.count(unit))
}

// percent prints a spread of shares: "93% (88–97%, 5 pairs)", or "93% (60–140%, 8 runs,
// as wide as 5 earlier runs spread)".
func (s spread) percent(unit string) string {
	return fmt.Sprintf("%.0f%% (%.0f–%.0f%%, %s)", 100*s.med, 100*s.lo, 100*s.hi, s.count(unit))
}

// count says how many unit the spread is of, and the earlier runs that widened it.
func (s spread) count(unit string) string {
	if s.earlier > 0 {
		return fmt.Sprintf("%d %s, as wide as %d earlier runs spread", s.n, unit, s.earlier)
	}
	return fmt.Sprintf("%d %s", s.n, unit)
}

// systemCPU is what every process spent on one repetition of the relay's path: the
// relay, Redis (every master), the broker, the bus and the load process (the publisher).
func (rep repResult) systemCPU() time.Duration {
	return rep.relayCPU + rep.redisTotal() + rep.rabbitCPU + rep.busCPU + rep.loadCPU
}

// systemCPU is the same for a repetition of the bare path: the load process (the bare
// pipeline's publisher and consumer, or the fan-out's writers), the bus, and the broker
// for the bare pipeline (the fan-out uses none: what the broker spent meanwhile is not its).
func (b *bareResult) systemCPU(pipeline bool) time.Duration {
	t := b.loadCPU + b.busCPU
	if pipeline {
		t += b.rabbitCPU
	}
	return t
}

// pairs is each repetition of the row whose bare repetition (run right after it) ran.
func (r benchResult) pairs() []repResult {
	var out []repResult
	for _, rep := range r.reps {
		if rep.bare != nil && rep.bare.err == "" {
			out = append(out, rep)
		}
	}
	return out
}

// cpuRatios are, pair by pair, the relay path's whole-system CPU per delivery over the
// bare path's (both deliver the same number of events to as many destinations).
func (r benchResult) cpuRatios() []float64 { return ratios(r.cpuPairs()) }

// cpuPairs are, pair by pair, the relay path's whole-system CPU and the bare path's.
func (r benchResult) cpuPairs() (relay, bare []float64) {
	for _, rep := range r.pairs() {
		if b := rep.bare.systemCPU(r.dests == 1); b > 0 {
			relay, bare = append(relay, float64(rep.systemCPU())), append(bare, float64(b))
		}
	}
	return relay, bare
}

// latPairs are, pair by pair, the relay's latency quantile q and the bare pipeline's.
func (r benchResult) latPairs(q float64) (relay, bare []float64) {
	for _, rep := range r.pairs() {
		if b := rep.bare.lat.at(q); b > 0 && len(rep.lat) > 0 {
			relay, bare = append(relay, float64(rep.lat.at(q))), append(bare, float64(b))
		}
	}
	return relay, bare
}

// ratios are a[i]/b[i].
func ratios(a, b []float64) []float64 {
	out := make([]float64, 0, len(a))
	for i := range a {
		out = append(out, a[i]/b[i])
	}
	return out
}

// pairedSpread is the spread of a[i]/b[i], pair by pair. A few pairs' ratios cannot show
// their own spread reliably (three ratios that happen to lie close give a narrow t
// interval: the restart's 1.35–1.42 in one full run, 0.83–2.70 in the next), so below
// orderPairs pairs the interval also holds the two series' own spreads, as for two
// figures measured apart (spread.over): each pair's figures may move together, and
// the interval then says so by being wide.
func pairedSpread(a, b []float64) spread {
	sp := spreadOf(ratios(a, b))
	if sp.n > 0 && sp.n < orderPairs {
		if q := spreadOf(a).over(spreadOf(b)); q.n > 0 {
			sp.lo, sp.hi = min(sp.lo, q.lo), max(sp.hi, q.hi)
		}
	}
	return sp
}

// cpuSpread is the spread of whole-system (or one process's) CPU per delivery, a[i] over
// b[i], pair by pair: from orderPairs pairs on walshSpread of the ratios, below it
// pairedSpread. Each ratio is a quotient of two sums of the CPU of tens of thousands of
// deliveries, whose logarithm spreads evenly about its centre, which is what the
// signed-rank interval needs; its ends then rest on every pair, not on one (the second
// smallest and largest of 13), and it is narrower by what the order statistics leave
// unused (for evenly spread values it needs about two thirds of the pairs for the same
// width). In runs 11 and 12 (bf5b3db, cbcf1be) the 1,000- and 10,000-destination rows'
// lower ends were 1.17, 1.05, 1.09 and 1.12× by order statistics (two unsure against
// ≤ 1.10×), 1.11, 1.11, 1.14 and 1.14× by this interval. It is not proof against a
// stray: in run 10, before the bench's bus and STS stopped keeping what they took, one
// pair of the 10,000-destination row at 0.54× put its lower end at 0.88× (order
// statistics 1.00×).
func cpuSpread(a, b []float64) spread {
	if len(a) < orderPairs {
		return pairedSpread(a, b)
	}
	return walshSpread(ratios(a, b))
}

// walshSpread is the spread of xs (each positive) by the Wilcoxon signed-rank interval
// on their logarithms l: its figure is the Hodges–Lehmann estimate, the median of the
// n(n+1)/2 Walsh averages (lᵢ+lⱼ)/2, i ≤ j; its interval runs from the k-th smallest of
// them to the k-th largest, k the largest whose 1 − 2·P(T⁺ < k) is at least
// medianConfidence, T⁺ the signed-rank statistic of n symmetric values. It assumes the
// logarithms spread symmetrically about their centre (not that they spread normally);
// spreadOf where there are too few to reach medianConfidence (fewer than 8).
func walshSpread(xs []float64) spread {
	n := len(xs)
	if n == 0 || slices.Min(xs) <= 0 {
		return spreadOf(xs)
	}
	k := signedRankK(n)
	if k == 0 {
		return spreadOf(xs)
	}
	l := make([]float64, n)
	for i, x := range xs {
		l[i] = math.Log(x)
	}
	var w []float64
	for i := range l {
		for j := i; j < n; j++ {
			w = append(w, (l[i]+l[j])/2)
		}
	}
	slices.Sort(w)
	m := len(w)
	return spread{med: math.Exp(benchkit.Median(w)), lo: math.Exp(w[k-1]), hi: math.Exp(w[m-k]), n: n}
}

// signedRankK is the largest k ≥ 1 with 1 − 2·P(T⁺ < k) ≥ medianConfidence, T⁺ the
// Wilcoxon signed-rank statistic of n values under symmetry (each rank's sign a fair
// coin); 0 when not even k = 1 reaches it.
func signedRankK(n int) int {
	most := n * (n + 1) / 2
	ways := make([]float64, most+1) // ways[t]: the sign choices whose positive ranks sum to t
	ways[0] = 1
	for r := 1; r <= n; r++ {
		for t := most; t >= r; t-- {
			ways[t] += ways[t-r]
		}
	}
	total := math.Pow(2, float64(n))
	k, below := 0, 0.0 // below: P(T⁺ < next)
	for next := 1; next <= most/2+1; next++ {
		below += ways[next-1] / total
		if 1-2*below < medianConfidence {
			break
		}
		k = next
	}
	return k
}

// orderPairs is the fewest repetitions whose smallest and largest hold their median
// with medianConfidence; secondOrderPairs the fewest whose second smallest and largest
// do.
const (
	orderPairs       = 8
	secondOrderPairs = 12
)

// settlePairs is the fewest pairs row r settles on: 12 where it may run 13 (its
// interval then rests on the second smallest and largest, so no single stray pair
// decides a verdict: at 8 pairs, two full runs at 199b9d0 judged 10,000 destinations
// 0.92–1.71× and 1.12–1.31×, each interval's far end one pair), 8 where it may run 8 to
// 12 (order statistics at 99%), none where it may run fewer.
func (r benchResult) settlePairs() int {
	switch m := r.maxRepeats(); {
	case m > secondOrderPairs:
		return secondOrderPairs
	case m >= orderPairs:
		return orderPairs
	}
	return 0
}

// The aims of issue 46: whole-system CPU per delivery against the bare path's, latency
// against the bare pipeline's, each pair of a row run one after the other.
const (
	aimCPUQuiet    = 1.25 // 1 destination at 200/s
	aimCPUOne      = 1.10 // 1 destination at 2,000/s and as fast as confirmed
	aimCPUFanOut   = 1.10 // 1,000 and 10,000 destinations
	aimCPUMany     = 1.20 // 100,000 destinations
	aimLatRatio    = 1.3  // relay p99 / bare pipeline p99, 1 destination at 200/s and 2,000/s
	aimLatFastRate = 2000 // the second latency row's rate
)

// cpuAim is the target of row r's whole-system CPU ratio, false when no aim is set on it.
func cpuAim(r benchRun) (float64, bool) {
	if r.size != aimSize || r.cluster || r.baseline != "" || r.memoryRow() || r.delayed {
		return 0, false
	}
	switch {
	case r.dests == 1 && r.rate == aimLatencyRate:
		return aimCPUQuiet, true
	case r.dests == 1 && (r.rate == aimLatFastRate || r.rate == 0):
		return aimCPUOne, true
	case r.dests == aimCPUDests || r.dests == aimIdleDests:
		return aimCPUFanOut, true
	case r.dests == aimManyDests:
		return aimCPUMany, true
	}
	return 0, false
}

// latAim says whether row r is one the latency ratio is judged on.
func latAim(r benchRun) bool {
	return r.dests == 1 && r.size == aimSize && !r.cluster && r.baseline == "" && !r.delayed && (r.rate == aimLatencyRate || r.rate == aimLatFastRate)
}

// settled says whether another pair would not change row r's verdicts: every figure
// judged on it has its interval on one side of its target, and not within closeMargin
// of it.
func (r benchResult) settled() bool {
	if len(r.reps) < r.settlePairs() {
		return false
	}
	if t, ok := cpuAim(r.benchRun); ok && r.systemSpread().close(t) {
		return false
	}
	if latAim(r.benchRun) && r.p99Spread().close(aimLatRatio) {
		return false
	}
	return true
}

// maxRepeats is how many pairs row r may run at most: its most when set (defaultRuns);
// otherwise until settled, up to 2·repeats+3
// (5 → 13) for the rows of one server of up to 10,000 destinations that carry an aim,
// whose pairs take seconds (15 at 200/s, 7 at 10,000 destinations); 2·repeats−1 (5 → 9)
// for the cluster's and a baseline's rows; none more than they ask for the
// 100,000-destination row (its relay takes a minute to start), the ingest and the
// memory rows, and a row no aim is judged on (100 destinations: more pairs would settle
// nothing, and cost a run 40 s).
func (r benchRun) maxRepeats() int {
	_, judged := cpuAim(r)
	switch {
	case r.most > 0:
		return r.most
	case r.ingestOnly() || r.memoryRow() || r.dests >= aimManyDests:
		return r.repeats
	case r.cluster || r.baseline != "":
		return 2*r.repeats - 1
	case !judged && !latAim(r):
		return r.repeats
	}
	return 2*r.repeats + 3
}

// cpuAims judges issue 46's whole-system CPU aims: each aim row's CPU per delivery of
// every process against its bare path's, pair by pair, with the deliveries/s ratio
// beside it as information.
func cpuAims(results []benchResult) []aim {
	rows := []struct {
		what   string
		target float64
		match  func(benchRun) bool
	}{
		{"1 destination, 1 KB at 200/s", aimCPUQuiet, func(r benchRun) bool { return r.dests == 1 && r.rate == aimLatencyRate }},
		{"1 destination, 1 KB at 2,000/s", aimCPUOne, func(r benchRun) bool { return r.dests == 1 && r.rate == aimLatFastRate }},
		{"1 destination, 1 KB as fast as confirmed", aimCPUOne, func(r benchRun) bool { return r.dests == 1 && r.rate == 0 && !r.memoryRow() }},
		{"1,000 destinations", aimCPUFanOut, func(r benchRun) bool { return r.dests == aimCPUDests && r.rate == 0 }},
		{"10,000 destinations", aimCPUFanOut, func(r benchRun) bool { return r.dests == aimIdleDests && r.rate == 0 }},
		{"100,000 destinations", aimCPUMany, func(r benchRun) bool { return r.dests == aimManyDests && r.rate == 0 }},
	}
	var aims []aim
	for _, row := range rows {
		match := func(r benchRun) bool { return r.size == aimSize && row.match(r) }
		bare := "bare pipeline"
		if !strings.HasPrefix(row.what, "1 destination") {
			bare = "bare fan-out"
		}
		t := row.target
		a := aim{what: fmt.Sprintf("%s: whole-system CPU per delivery (relay, Redis, broker, bus, load process) / the %s's, pairs run one after the other", row.what, bare),
			target: fmt.Sprintf("≤ %.2f×", t)}
		r, ok := findRow(results, match)
		if !ok {
			a.figure = "no such row in this run"
			aims = append(aims, a)
			continue
		}
		sp := r.systemSpread()
		if sp.n == 0 {
			a.figure = "the bare path failed"
		} else {
			relay := r.perDelivery(repResult.systemCPU)
			bare, _ := r.barePerDelivery(func(b *bareResult) time.Duration { return b.systemCPU(r.dests == 1) })
			a.figure = fmt.Sprintf("%s; %.1f against %.1f µs; deliveries/s %s of the bare path's", sp.ratio("pairs"), relay, bare,
				spreadOf(r.ratios()).percent("pairs"))
			a.state = sp.atMost(t)
		}
		aims = append(aims, a)
	}
	return aims
}

// latencyAims judges the relay's publish-to-bus latency against the bare pipeline's, pair
// by pair: p99 judged, p50 and p99.9 beside it.
func latencyAims(results []benchResult) []aim {
	var aims []aim
	for _, rate := range []int{aimLatencyRate, aimLatFastRate} {
		a := aim{what: fmt.Sprintf("relay p99 / bare pipeline p99 (publish → the bus's answer), 1 destination, 1 KB at %s/s, pairs run one after the other", thousands(rate)),
			target: fmt.Sprintf("≤ %.1f×", aimLatRatio), figure: fmt.Sprintf("no row 1:…:%d of 1 KB", rate)}
		if r, ok := findRow(results, func(r benchRun) bool { return r.dests == 1 && r.rate == rate && r.size == aimSize }); ok {
			sp := r.p99Spread()
			if sp.n == 0 {
				a.figure = "the bare pipeline failed"
			} else {
				a.figure = fmt.Sprintf("%s (%s against %s); p50 %s, p99.9 %s", sp.ratio("pairs"), round(r.lat(0.99)), round(r.bareLat(0.99)),
					pairedSpread(r.latPairs(0.5)).ratio("pairs"), pairedSpread(r.latPairs(0.999)).ratio("pairs"))
				a.state = sp.atMost(aimLatRatio)
			}
		}
		aims = append(aims, a)
	}
	return aims
}
