package main

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// The hand-written statistics verdict.go had before gonum's and math/big's took their
// place (Student's t table, the binomial sum), kept here verbatim (renamed), with the
// functions that use them, to show that the library versions give every spread, and
// so every verdict, the same.

var handTQuantile995 = [...]float64{63.657, 9.925, 5.841, 4.604, 4.032, 3.707, 3.499, 3.355, 3.250, 3.169,
	3.106, 3.055, 3.012, 2.977, 2.947, 2.921, 2.898, 2.878, 2.861, 2.845,
	2.831, 2.819, 2.807, 2.797, 2.787, 2.779, 2.771, 2.763, 2.756, 2.750}

func handT995(df int) float64 { return handTQuantile995[min(df, len(handTQuantile995))-1] }

func handMedianRank(n int) int {
	k := 1
	for next := 2; next <= (n+1)/2; next++ {
		if 1-2*handBinomBelow(n, next) < medianConfidence {
			break
		}
		k = next
	}
	return k
}

func handBinomBelow(n, k int) float64 {
	p, c := 0.0, 1.0 // c: n choose i
	for i := 0; i < k; i++ {
		p += c
		c = c * float64(n-i) / float64(i+1)
	}
	for range n {
		p /= 2
	}
	return p
}

func handLogT(xs []float64) (lo, hi float64, ok bool) {
	n := len(xs)
	if n < 2 || n-1 > len(handTQuantile995) || slices.Min(xs) <= 0 {
		return 0, 0, false
	}
	mean, sd := logMeanSD(xs)
	half := handT995(n-1) * sd / math.Sqrt(float64(n))
	if half < 1e-9 {
		return slices.Min(xs), slices.Max(xs), true
	}
	return math.Exp(mean - half), math.Exp(mean + half), true
}

func handSpreadOf(xs []float64) spread {
	if len(xs) == 0 {
		return spread{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	k := handMedianRank(n)
	med := s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	sp := spread{med: med, lo: s[k-1], hi: s[n-k], n: n}
	if n >= 2 && 1-2*handBinomBelow(n, k) < medianConfidence {
		if lo, hi, ok := handLogT(s); ok {
			sp.lo, sp.hi = min(sp.lo, lo), max(sp.hi, hi)
		}
	}
	return sp
}

func handEarlierHalf(xs []float64) (float64, bool) {
	n := len(xs)
	if n < 3 {
		return 0, false
	}
	_, sd := logMeanSD(xs)
	return handT995(n-1) * sd, true
}

func handWidened(sp spread, earlier []float64) spread {
	h, ok := handEarlierHalf(earlier)
	if sp.n == 0 || !ok {
		return sp
	}
	lo, hi := sp.med*math.Exp(-h), sp.med*math.Exp(h)
	if lo < sp.lo || hi > sp.hi {
		sp.lo, sp.hi, sp.earlier = min(sp.lo, lo), max(sp.hi, hi), len(earlier)
	}
	return sp
}

func TestLibraryStatisticsAgreeWithTheHandWrittenOnes(t *testing.T) {
	// Student's t: the same float64 for 1 to 60 degrees of freedom (past 30, 30's).
	for df := 1; df <= 60; df++ {
		if got, want := t995(df), handT995(df); got != want {
			t.Errorf("t995(%d) = %v, the table's %v", df, got, want)
		}
	}
	// The binomial: the same rank and the same side of 99% for 1 to 120 repetitions and
	// every k medianRank and spreadOf ask (up to (n+1)/2, and one past it); the
	// probabilities themselves within 1e-12 (the old sum rounded at each step, math/big's
	// once).
	for n := 1; n <= 120; n++ {
		if got, want := medianRank(n), handMedianRank(n); got != want {
			t.Errorf("medianRank(%d) = %d, the hand-written %d", n, got, want)
		}
		for k := 0; k <= (n+1)/2+1; k++ {
			got, want := binomBelow(n, k), handBinomBelow(n, k)
			if (1-2*got < medianConfidence) != (1-2*want < medianConfidence) || math.Abs(got-want) > 1e-12*want {
				t.Errorf("binomBelow(%d, %d) = %v, the hand-written %v", n, k, got, want)
			}
		}
	}
	// The figures: 2 to 60 repetitions of positive values spread from 0.01% to 50% in
	// the logarithm (and all alike), 12 draws of each: the same spread to the bit, as
	// the earlier runs' half-width and the interval they widen, and so the same verdict
	// against the aims' targets and a grid about each interval.
	rng := rand.New(rand.NewPCG(54, 1))
	targets := []float64{aimCPUQuiet, aimCPUOne, aimCPUMany, aimLatRatio, 1}
	cases := 0
	for n := 2; n <= 60; n++ {
		for _, sigma := range []float64{0, 1e-4, 1e-3, 0.01, 0.05, 0.1, 0.2, 0.5} {
			for range 12 {
				xs := make([]float64, n)
				for i := range xs {
					xs[i] = 1.15 * math.Exp(sigma*rng.NormFloat64())
				}
				got, want := spreadOf(xs), handSpreadOf(xs)
				if got != want {
					t.Fatalf("spreadOf(%v) = %+v, the hand-written %+v", xs, got, want)
				}
				gh, gok := earlierHalf(xs)
				wh, wok := handEarlierHalf(xs)
				if gok != wok || gh != wh {
					t.Fatalf("earlierHalf(%v) = %v %v, the hand-written %v %v", xs, gh, gok, wh, wok)
				}
				g, w := got.widened(xs), handWidened(want, xs)
				if g != w {
					t.Fatalf("%v widened by itself: %+v, the hand-written %+v", xs, g, w)
				}
				grid := slices.Clone(targets)
				for i := range 21 {
					grid = append(grid, want.lo*0.9+float64(i)*(want.hi*1.1-want.lo*0.9)/20)
				}
				for _, tg := range grid {
					if got.atMost(tg) != want.atMost(tg) || got.atLeast(tg) != want.atLeast(tg) {
						t.Fatalf("%v against %v: %s/%s, the hand-written %s/%s", xs, tg, got.atMost(tg), got.atLeast(tg), want.atMost(tg), want.atLeast(tg))
					}
					if g.atMost(tg) != w.atMost(tg) || g.atLeast(tg) != w.atLeast(tg) {
						t.Fatalf("%v widened against %v: %+v, the hand-written %+v", xs, tg, g, w)
					}
					cases++
				}
			}
		}
	}
	t.Logf("%d verdicts the same", cases)
}
