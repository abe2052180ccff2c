package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The rows. -runs lists them (parseRuns), each a benchRun read from
// destinations:events:rate[:bytes[:repeats[:most]]][@delay] and run in one sitting or
// two.

// defaultRuns are the rows the aims are judged on, and no other: one destination at
// 200/s and at 2,000/s (the latency rows) and as fast as confirmed, ingest alone (0
// destinations: the Redis CPU and memory per ingested event), one and two destinations
// with 10,000 deliveries (issue 30's memory rows), 100, 1,000 and 10,000 destinations,
// 100,000 on one replica. The fifth field is the least number of pairs (a run of the
// relay, then one of its bare path) a row runs, the sixth the most it may run until its
// verdicts settle (maxRepeats gives it when unset): 5 up to 13 for one destination as
// fast as confirmed and at 2,000/s; 5 up to 9 at 200/s (7.5 s a run, hence 1,500 events;
// its CPU verdict was NOT met by 9% or more at 13 pairs in every run, its p99 unsure at
// any count); 24 up to 28 for 1,000 and 10,000 destinations, whose estimate lies within
// 20% of the target in every run and whose interval at 13 pairs (±12–14%) brought its
// lower end within 1% of it (5 s and 9 s a pair); 5 for 100 destinations (no aim); 3 for
// the ingest row (no bare path); 4 for 100,000 destinations, whose relay takes 2.5 minutes
// to start (two in each sitting); 1 for the memory rows, whose figures are one delta
// each. Then the rows with the bus late (lateRuns, late.go), 5 runs each of 3 to 6 s.
// The whole run took 48–50 minutes on these machines at 0519b84 against an aim of 30:
// the starts of 100,000 destinations (the config row's two, the API part's creates and
// restarts) are most of the rest (docs/benchmarks.md, issue 54, "make bench ≤ 30 minutes").
const defaultRuns = "1:1500:200:1024:5:9,1:10000:2000:1024:5,1:2000:0:1024:5,0:20000:0:1024:3,1:10000:0:1024:1,2:10000:0:1024:1,100:200:0:1024:5,1000:20:0:1024:24:28,10000:3:0:1024:24:28,100000:1:0:1024:4," + lateRuns

func parseRun(spec string) (benchRun, error) {
	r, late, delayed, err := parseLate(spec)
	if err != nil {
		return benchRun{}, err
	}
	p := strings.Split(r, ":")
	if len(p) < 3 || len(p) > 6 {
		return benchRun{}, fmt.Errorf("-runs %q: want destinations:events:rate[:bytes[:repeats[:most]]][@delay] (0 destinations: ingest alone)", r)
	}
	n := []int{0, 0, 0, 1024, 1, 0}
	for i, f := range p {
		v, err := strconv.Atoi(f)
		if err != nil || v < 0 || (v == 0 && i != 0 && i != 2) {
			return benchRun{}, fmt.Errorf("-runs %q: %q is not a positive number", r, f)
		}
		n[i] = v
	}
	if len(p) == 6 && n[5] < n[4] {
		return benchRun{}, fmt.Errorf("-runs %q: the most pairs (%d) is fewer than the least (%d)", r, n[5], n[4])
	}
	if delayed && n[0] == 0 {
		return benchRun{}, fmt.Errorf("-runs %q: the ingest row has no bus to be late", spec)
	}
	return benchRun{dests: n[0], events: n[1], rate: n[2], size: n[3], repeats: n[4], most: n[5], late: late, delayed: delayed}, nil
}

// parseRuns reads -runs: rows separated by commas; "late" stands for lateRuns.
func parseRuns(s string) ([]benchRun, error) {
	var runs []benchRun
	for _, r := range strings.Split(s, ",") {
		if r == "" {
			continue
		}
		if r == "late" {
			late, err := parseRuns(lateRuns)
			if err != nil {
				return nil, err
			}
			runs = append(runs, late...)
			continue
		}
		br, err := parseRun(r)
		if err != nil {
			return nil, err
		}
		runs = append(runs, br)
	}
	return runs, nil
}

type benchRun struct {
	dests, events, rate int    // dests 0: ingest alone; rate 0: publish as fast as confirms allow
	size                int    // event body bytes
	repeats             int    // timed repetitions in one relay process (and as many of its bare path)
	most                int    // the most repetitions it may run until its verdicts settle; 0: maxRepeats's rule
	cluster             bool   // on the Redis Cluster of -cluster-redis, not the server of -redis
	baseline            string // not "": the -baseline-relay binary (built at this rev) runs the row
	// delayed: the relay writes to the bus through a delay proxy that holds each answer
	// late (0: through the proxy, at once); late.go.
	late    time.Duration
	delayed bool
}

// ingestOnly is the row of no destination: the relay ingests into the account's log and
// nothing reads it, so what Redis spends is ingest's alone.
func (r benchRun) ingestOnly() bool { return r.dests == 0 }

// memoryRow is a row after which Redis memory is read for issue 30's aims: one
// destination with at least aimMemDeliveries deliveries in one run, or two (the
// fan-out: their outcomes meet in the account's channel), published as fast as
// confirmed (a paced row is a latency row). One run's events, not all its runs':
// the one-destination throughput row (1:2000:0, 5 pairs or more) adds up to as many
// and is no memory row.
func (r benchRun) memoryRow() bool {
	return (r.dests == 1 || r.dests == 2) && r.rate == 0 && r.events >= aimMemDeliveries && !r.delayed
}

// Sittings. A row of two or more pairs runs them in two sittings: the first half of
// them while the bench goes over every row once, the rest (and any more it needs to
// settle) in a second pass over the rows, each sitting on a relay and a bare path of
// its own, started afresh on an emptied Redis. A row's interval then holds pairs some
// minutes apart, on two relay processes, so it samples what drifts over a run (the
// machine, a process's heap and threads) instead of one stretch of it. (Two full runs at
// 033d9a4, each row's pairs back to back, differed on 4 of 25 verdicts, each because the
// figure moved between the runs by more than either run's interval.)

// sitting is one sitting of a row: idx names its exchange, config, roles
// and buses (the row's index in the first sitting, past every row's in the second);
// upto is how many pairs the row has when it ends, at most.
type sitting struct {
	row, idx int
	first    bool
	upto     int
}

// sittings is how many sittings row r runs in: two when it has two or more pairs.
func (r benchRun) sittings() int {
	if r.repeats >= 2 {
		return 2
	}
	return 1
}

// firstSitting and secondSitting are row i's of n rows.
func (r benchRun) firstSitting(i int) sitting {
	s := sitting{row: i, idx: i, first: true, upto: r.maxRepeats()}
	if r.sittings() == 2 {
		s.upto = (r.repeats + 1) / 2
	}
	return s
}

func (r benchRun) secondSitting(i, n int) sitting {
	return sitting{row: i, idx: n + i, upto: r.maxRepeats()}
}

func baselineNote(r benchRun) string {
	if r.baseline == "" {
		return ""
	}
	return "relay at " + r.baseline + ": "
}
