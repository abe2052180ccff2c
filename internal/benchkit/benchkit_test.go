package benchkit

import (
	"os"
	"testing"
	"time"
)

func TestMedianOfOddAndEvenCountsLeavesItsInputAlone(t *testing.T) {
	xs := []float64{3, 1, 2}
	if m := Median(xs); m != 2 || xs[0] != 3 {
		t.Fatalf("Median(3, 1, 2) = %v, input now %v", m, xs)
	}
	if m := Median([]time.Duration{4, 1, 3, 2}); m != 2 { // (2+3)/2, in whole nanoseconds
		t.Fatalf("Median(4, 1, 3, 2 ns) = %v", m)
	}
	if m := Median[float64](nil); m != 0 {
		t.Fatalf("Median() = %v", m)
	}
}

func TestProcCPUReadsThisProcess(t *testing.T) {
	for start := time.Now(); time.Since(start) < 50*time.Millisecond; {
	}
	d, err := ProcCPU(os.Getpid())
	if err != nil || d <= 0 {
		t.Fatalf("ProcCPU(self) = %v, %v", d, err)
	}
	if _, err := ProcCPU(0); err == nil {
		t.Fatal("ProcCPU(0) found a process")
	}
}
