package main

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// Earlier runs. A figure's interval rests on its own pairs (or runs), and so does its
// width: 13 pairs may happen to lie close. One destination as fast as confirmed came
// out 0.99× (0.91–1.07) in one run at ca49479 and 1.12× (0.95–1.28) in the next, while
// its estimate over the five runs since bf5b3db spread from 0.99 to 1.19×: the first
// run's interval was narrower than the spread its own figure has from run to run, and
// its verdict (met, against ≤ 1.10×) was one the next run did not give. The cluster's
// deliveries/s over one server's did the same (97, 107, 83, 103, 104% against ≥ 90%,
// its own lower end 62–88%), and in run 16 Redis's CPU per delivery over per ingested
// event (met on 0.62–0.96× where runs 11–15 said 0.67–1.10×, unsure) and p99 at 200/s
// (its 9 pairs' smallest ratio 1.26× against ≤ 1.3×, where runs 11–15 said 1.44–2.11×,
// unsure). So the interval of each of those aims is at least as wide as what the
// earlier runs of the same figure say one run's estimate spreads: Student's t at 99%
// (one fewer degrees of freedom than runs) times their standard deviation, in the
// logarithm, about this run's estimate. Those earlier estimates are
// docs/bench-history.tsv (-history), each line a run's estimate of one figure, which
// each run prints for it (historyReport); the file holds runs of this machine, and a run
// elsewhere whose own pairs spread more keeps its own, wider interval.

// history is earlier runs' estimates of the figures this one widens by them, by key:
// "1000:0" (destinations:rate) a row's whole-system CPU ratio, "cluster:1000:0" the
// cluster's deliveries/s over one server's, "redis:1000:0" Redis's CPU per delivery over
// its CPU per ingested event, "p99:1:200" the relay's p99 over the bare pipeline's.
type history map[string][]float64

// The figures a history widens: each an aim's, named by what it is (cpu, cluster, redis,
// p99) and the row it is read on.
const (
	figCPU     = "cpu"
	figCluster = "cluster"
	figRedis   = "redis"
	figP99     = "p99"
)

// historyKey is figure fig of row r's key in the history.
func historyKey(fig string, r benchRun) string {
	if fig == figCPU {
		return fmt.Sprintf("%d:%d", r.dests, r.rate)
	}
	return fmt.Sprintf("%s:%d:%d", fig, r.dests, r.rate)
}

// widenedFigures are the figures judged on row r that its earlier runs widen: its
// whole-system CPU ratio where a CPU aim is judged on it, the cluster aim on the
// cluster's 1,000-destination row, the Redis aim on the server's, p99 on the latency rows.
func widenedFigures(r benchRun) []string {
	var figs []string
	if _, ok := cpuAim(r); ok {
		figs = append(figs, figCPU)
	}
	switch {
	case r.baseline != "", r.delayed:
	case r.cluster && aimRow(aimClusterDests)(r):
		figs = append(figs, figCluster)
	case !r.cluster && aimRow(aimCPUDests)(r):
		figs = append(figs, figRedis)
	}
	if latAim(r) {
		figs = append(figs, figP99)
	}
	return figs
}

// earlierOf is the part of h about row r's widened figures.
func (h history) earlierOf(r benchRun) history {
	out := history{}
	for _, fig := range widenedFigures(r) {
		key := historyKey(fig, r)
		if xs := h[key]; len(xs) > 0 {
			out[key] = xs
		}
	}
	return out
}

// widen is sp, figure fig of row r, widened to its earlier runs' spread.
func (r benchResult) widen(fig string, sp spread) spread {
	return sp.widened(r.earlier[historyKey(fig, r.benchRun)])
}

// readHistory reads a history file: per key (historyKey), the estimates of earlier runs.
// Each line is "commit, time (UTC), key, pairs, estimate", tab-separated; a line
// starting with '#' and an empty line are comments.
func readHistory(path string) (history, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("-history: %w", err)
	}
	defer f.Close()
	h := history{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		p := strings.Split(line, "\t")
		if len(p) != 5 {
			return nil, fmt.Errorf("-history %s:%d: want commit, time, key, pairs and estimate, tab-separated; got %d fields", path, n, len(p))
		}
		est, err := strconv.ParseFloat(p[4], 64)
		if err != nil || !(est > 0) || math.IsInf(est, 0) { // !(est > 0): NaN too
			return nil, fmt.Errorf("-history %s:%d: the estimate %q is not a positive number", path, n, p[4])
		}
		h[p[2]] = append(h[p[2]], est)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("-history %s: %w", path, err)
	}
	return h, nil
}

// earlierHalf is the half-width, in the logarithm, that earlier runs' estimates xs give
// one run's: t at 99% with len(xs)−1 degrees of freedom times their standard
// deviation; false for fewer than 3 runs (two say almost nothing of a spread).
func earlierHalf(xs []float64) (float64, bool) {
	n := len(xs)
	if n < 3 {
		return 0, false
	}
	_, sd := logMeanSD(xs)
	return t995(n-1) * sd, true
}

// widened is sp with its interval at least the spread of earlier runs' estimates about
// its own (earlierHalf); its earlier field counts those runs when they widened it.
func (sp spread) widened(earlier []float64) spread {
	h, ok := earlierHalf(earlier)
	if sp.n == 0 || !ok {
		return sp
	}
	lo, hi := sp.med*math.Exp(-h), sp.med*math.Exp(h)
	if lo < sp.lo || hi > sp.hi {
		sp.lo, sp.hi, sp.earlier = min(sp.lo, lo), max(sp.hi, hi), len(earlier)
	}
	return sp
}

// systemSpread is the spread of row r's whole-system CPU ratio, pair by pair
// (cpuSpread), widened to its earlier runs' spread.
func (r benchResult) systemSpread() spread { return r.widen(figCPU, cpuSpread(r.cpuPairs())) }

// p99Spread is the spread of row r's p99 over the bare pipeline's, pair by pair
// (pairedSpread), widened to its earlier runs' spread.
func (r benchResult) p99Spread() spread { return r.widen(figP99, pairedSpread(r.latPairs(0.99))) }

// ownFigure is figure fig of row r as this run's own pairs or runs give it, before any
// widening, from the rows its aim reads; false when the run has none.
func ownFigure(fig string, r benchResult, results []benchResult) (spread, bool) {
	var sp spread
	switch fig {
	case figCPU:
		sp = cpuSpread(r.cpuPairs())
	case figCluster:
		server, okServer := findRow(results, aimRow(aimClusterDests))
		clustered, okCluster := findClusterRow(results, aimRow(aimClusterDests))
		if okServer && okCluster {
			sp = clusterSpread(clustered, server)
		}
	case figRedis:
		cpuRow, okCPU := findRow(results, aimRow(aimCPUDests))
		ingest, okIngest := findRow(results, aimRow(0))
		if okCPU && okIngest {
			_, _, sp = redisSpreads(cpuRow, ingest)
		}
	case figP99:
		sp = pairedSpread(r.latPairs(0.99))
	}
	return sp, sp.n > 0
}

// historyReport writes this run's own estimate of each figure the history widens, as
// lines of the history file (to add there once the run is one to learn from).
func historyReport(b *strings.Builder, results []benchResult, commit string, at time.Time) {
	var lines []string
	for _, r := range results {
		for _, fig := range widenedFigures(r.benchRun) {
			if sp, ok := ownFigure(fig, r, results); ok {
				lines = append(lines, fmt.Sprintf("%s\t%s\t%s\t%d\t%.3f", commit, at.UTC().Format("2006-01-02T15:04"), historyKey(fig, r.benchRun), sp.n, sp.med))
			}
		}
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintln(b, "This run's own estimate of each figure earlier runs widen (each CPU aim's ratio, the cluster's deliveries/s over the server's, Redis's CPU per delivery over per ingested event, p99 over the bare pipeline's), before any widening, as lines of `docs/bench-history.tsv`:")
	fmt.Fprintln(b)
	fmt.Fprintln(b, "```")
	for _, l := range lines {
		fmt.Fprintln(b, l)
	}
	fmt.Fprintln(b, "```")
	fmt.Fprintln(b)
}
