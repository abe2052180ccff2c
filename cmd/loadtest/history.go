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

// Earlier runs. A row's whole-system CPU interval rests on its own pairs, and so does
// its width: 13 pairs may happen to lie close. One destination as fast as confirmed
// came out 0.99× (0.91–1.07) in one run at ca49479 and 1.12× (0.95–1.28) in the next,
// while its estimate over the five runs since bf5b3db spread from 0.99 to 1.19×: the
// first run's interval was narrower than the spread its own figure has from run to run,
// and its verdict (met, against ≤ 1.10×) was one the next run did not give. The
// cluster's deliveries/s over one server's did the same: 97, 107, 83, 103, 104% in those
// runs, against ≥ 90%, its own lower end 62–88%. So the interval of an aim's CPU ratio,
// and of the cluster aim, is at least as wide as what the earlier runs of the same row
// say one run's estimate spreads: Student's t at 99% (one fewer degrees of
// freedom than runs) times their standard deviation, in the logarithm, about this
// run's estimate. Those earlier estimates are docs/bench-history.tsv (-history), each
// line a run's estimate of one row, which each run prints for it (historyReport); the
// file holds runs of this machine, and a run elsewhere whose own pairs spread more
// keeps its own, wider interval.

// historyKey names row r in the history: destinations:rate ("1:200", "1000:0") for a
// row a whole-system CPU aim is judged on, "cluster:1000:0" for the cluster's row the
// cluster aim is judged on (its deliveries/s over the same row's on one server); false
// for any other row.
func historyKey(r benchRun) (string, bool) {
	if _, ok := cpuAim(r); ok {
		return fmt.Sprintf("%d:%d", r.dests, r.rate), true
	}
	if r.cluster && aimRow(aimClusterDests)(r) {
		return fmt.Sprintf("cluster:%d:%d", r.dests, r.rate), true
	}
	return "", false
}

// readHistory reads a history file: per row key, the estimates of earlier runs. Each
// line is "commit, time (UTC), row, pairs, estimate", tab-separated; a line starting
// with '#' and an empty line are comments.
func readHistory(path string) (map[string][]float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("-history: %w", err)
	}
	defer f.Close()
	h := map[string][]float64{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		p := strings.Split(line, "\t")
		if len(p) != 5 {
			return nil, fmt.Errorf("-history %s:%d: want commit, time, row, pairs and estimate, tab-separated; got %d fields", path, n, len(p))
		}
		est, err := strconv.ParseFloat(p[4], 64)
		if err != nil || est <= 0 || math.IsInf(est, 0) {
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
func (r benchResult) systemSpread() spread { return cpuSpread(r.cpuPairs()).widened(r.earlier) }

// historyReport writes this run's estimate of each figure the history widens (a CPU
// aim's row's ratio, the cluster's over the server's), as lines of the history file (to
// add there once the run is one to learn from).
func historyReport(b *strings.Builder, results []benchResult, commit string, at time.Time) {
	var lines []string
	for _, r := range results {
		key, ok := historyKey(r.benchRun)
		if !ok {
			continue
		}
		sp := cpuSpread(r.cpuPairs())
		if r.cluster {
			sp, _ = clusterSpread(results)
		}
		if sp.n > 0 {
			lines = append(lines, fmt.Sprintf("%s\t%s\t%s\t%d\t%.3f", commit, at.UTC().Format("2006-01-02T15:04"), key, sp.n, sp.med))
		}
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintln(b, "This run's estimate of each figure earlier runs widen (each CPU aim's row, the cluster's deliveries/s over the server's), before any widening, as lines of `docs/bench-history.tsv`:")
	fmt.Fprintln(b)
	fmt.Fprintln(b, "```")
	for _, l := range lines {
		fmt.Fprintln(b, l)
	}
	fmt.Fprintln(b, "```")
	fmt.Fprintln(b)
}
