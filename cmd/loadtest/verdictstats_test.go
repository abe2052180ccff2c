package main

import "testing"

// TestTheLibraryStatisticsGiveTheTextbooksValues: Student's t at 0.995 (gonum's
// distuv.StudentsT) is the printed tables' to three decimals, and 30 degrees of
// freedom's past 30; P(Binomial(n, ½) < k) (math/big's coefficients) is exact, and the
// order statistics it picks are the sign test's at 1% two-sided (at most 5 of 25, 7 of
// 30). Until they replaced a hand-typed table and a float sum, a test ran both over 1 to
// 60 degrees of freedom, 1 to 120 repetitions, and 2 to 60 repetitions' spreads
// (147,264 verdicts; 0d80979): the same float64 to the bit everywhere.
func TestTheLibraryStatisticsGiveTheTextbooksValues(t *testing.T) {
	for df, want := range map[int]float64{1: 63.657, 2: 9.925, 4: 4.604, 7: 3.499, 9: 3.250, 12: 3.055, 20: 2.845, 30: 2.750, 31: 2.750, 60: 2.750} {
		if got := t995(df); got != want {
			t.Errorf("t(0.995, %d df) = %v, want %v", df, got, want)
		}
	}
	for _, c := range []struct {
		n, k int
		want float64
	}{{5, 1, 1.0 / 32}, {10, 2, 11.0 / 1024}, {12, 3, 79.0 / 4096}, {4, 0, 0}, {4, 5, 1}, {4, 9, 1}} {
		if got := binomBelow(c.n, c.k); got != c.want {
			t.Errorf("P(Binomial(%d, ½) < %d) = %v, want %v", c.n, c.k, got, c.want)
		}
	}
	for n, want := range map[int]int{25: 6, 30: 8} {
		if got := medianRank(n); got != want {
			t.Errorf("medianRank(%d) = %d, want %d", n, got, want)
		}
	}
}
