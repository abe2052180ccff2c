package main

import (
	"fmt"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mercamap/relay/internal/benchkit"
	"github.com/mercamap/relay/internal/netdelay"
)

// The bus late (issue 53). A row whose spec ends in @DURATION ("1:1500:300:1024:5@100ms")
// runs its relay against the bench's bus through a netdelay proxy that passes each
// request on at once and holds each answer DURATION: the round trip to a customer's bus
// in another region. @0s is the same proxy with no delay, the row "with the bus at once"
// the late rows of its shape are judged against. Such a row is judged on deliveries/s
// alone, against its bound (lateAims): it has no bare path and no idle window, and no
// aim of another row is read on it.
//
// A destination writes up to its window of events (delivery.in_flight, 16 by default:
// each store's events one at a time, different stores together) per round trip, so its
// deliveries/s are at most window / round trip: 160/s at 100 ms, 800/s at 20 ms. The
// bound of a row is min(offered, destinations × window / round trip), offered being the
// publish rate times the destinations (as fast as confirmed: no bound of its own), and
// no more than the same row gets with the bus at once, when the run has that row (the
// machine's limit: 2 cores for a relay, a broker, Redis, the bus and the publisher).
// The aim: at least lateAim of it.
//
// The rows (lateRuns), each of 5 runs in two sittings: one destination at 300/s (over 50
// stores, so that keys do not serialize) with the bus at once, 20 ms and 100 ms late,
// 900 events a run (3 s at 300/s, 5.6 s at 160/s): the bound 300, 300 and 160/s
// (window-bound at 100 ms: the issue's ≥ 128/s); 100 destinations as fast as confirmed,
// 200 events a run, at once, 20 ms and 100 ms late: the window's 80,000 and 16,000/s are
// far above what 2 cores deliver, so the bound is the row at once (the machine's limit).
const lateRuns = "1:900:300:1024:5@0s,1:900:300:1024:5@20ms,1:900:300:1024:5@100ms,100:200:0:1024:5@0s,100:200:0:1024:5@20ms,100:200:0:1024:5@100ms"

const (
	lateWindow = 16   // delivery.in_flight the late rows' relay runs with: the default, written out in its config
	lateAim    = 0.80 // deliveries/s over the bound, at least
	lateMost   = 10 * time.Second
)

// parseLate splits a row's spec from its @DURATION: the row's bus delay and whether it
// goes through the delay proxy at all.
func parseLate(spec string) (row string, late time.Duration, delayed bool, err error) {
	row, d, delayed := strings.Cut(spec, "@")
	if !delayed {
		return spec, 0, false, nil
	}
	late, err = time.ParseDuration(d)
	if err != nil || late < 0 || late > lateMost {
		return "", 0, false, fmt.Errorf("-runs %q: the bus's delay %q is not a duration from 0s to %s (like @100ms)", spec, d, lateMost)
	}
	return row, late, true, nil
}

// lateName is what the tables say of a row's bus after its publish rate: "" for a row
// not through the delay proxy.
func (r benchRun) lateName() string {
	switch {
	case !r.delayed:
		return ""
	case r.late == 0:
		return ", the bus at once (through the delay proxy)"
	}
	return fmt.Sprintf(", the bus %s late", r.late)
}

// startLateBus puts row r's delay proxy in front of the bus: the URL the relay's config
// names and what stops the proxy; the bus's own URL and nothing for a row not delayed.
func (e *benchEnv) startLateBus(r benchRun) (string, func(), error) {
	if !r.delayed {
		return e.bus.url, func() {}, nil
	}
	p, err := netdelay.Listen("127.0.0.1:0", strings.TrimPrefix(e.bus.url, "http://"), r.late)
	if err != nil {
		return "", nil, fmt.Errorf("the bus's delay proxy: %w", err)
	}
	return "http://" + p.Addr(), func() { p.Close() }, nil
}

// offered is what row r offers, in deliveries/s: +Inf as fast as confirmed.
func (r benchRun) offered() float64 {
	if r.rate == 0 {
		return math.Inf(1)
	}
	return float64(r.rate * r.dests)
}

// windowBound is row r's deliveries/s at most, its window each round trip: +Inf with the
// bus at once.
func (r benchRun) windowBound() float64 {
	if r.late <= 0 {
		return math.Inf(1)
	}
	return float64(r.dests*lateWindow) / r.late.Seconds()
}

// atOnce is the row of late row r's shape with the bus at once (through the proxy), when
// the run has it.
func atOnce(results []benchResult, r benchRun) (benchResult, bool) {
	for _, o := range results {
		if o.delayed && o.late == 0 && o.err == "" && len(o.reps) > 0 && o.dests == r.dests && o.events == r.events &&
			o.rate == r.rate && o.size == r.size && o.cluster == r.cluster && o.baseline == r.baseline {
			return o, true
		}
	}
	return benchResult{}, false
}

// lateFigure is late row r's deliveries/s over its bound: over min(offered, window /
// round trip), or, where the same row with the bus at once got less, over that row's
// (spread.over: both rows' spreads in the interval); what it was judged against, in
// words; false when it has no bound (as fast as confirmed, and no row at once).
func lateFigure(r benchResult, results []benchResult) (spread, string, bool) {
	got := spreadOf(r.perSecs())
	bound := math.Min(r.offered(), r.windowBound())
	if o, ok := atOnce(results, r.benchRun); ok {
		ref := spreadOf(o.perSecs())
		if ref.med < bound {
			return got.over(ref), fmt.Sprintf("the same row with the bus at once, %.0f/s (%.0f–%.0f, %d runs)", ref.med, ref.lo, ref.hi, ref.n), true
		}
	}
	if math.IsInf(bound, 1) || got.n == 0 {
		return spread{}, "", false
	}
	return spread{med: got.med / bound, lo: got.lo / bound, hi: got.hi / bound, n: got.n}, fmt.Sprintf("the bound, %.0f/s", bound), true
}

// boundName is row r's bound in words: "min(offered 300/s, 1 × 16 / 100ms = 160/s)".
func (r benchRun) boundName() string {
	offered := "as fast as confirmed"
	if r.rate > 0 {
		offered = fmt.Sprintf("offered %s/s", thousands(int(r.offered())))
	}
	return fmt.Sprintf("min(%s, %d × %d / %s = %s/s)", offered, r.dests, lateWindow, r.late, thousands(int(r.windowBound())))
}

// lateAims judges each late row (the bus late, not at once): its deliveries/s at least
// lateAim of its bound (lateFigure).
func lateAims(results []benchResult) []aim {
	var aims []aim
	for _, r := range results {
		if !r.delayed || r.late == 0 || r.cluster || r.baseline != "" {
			continue
		}
		dests := "1 destination"
		if r.dests != 1 {
			dests = thousands(r.dests) + " destinations"
		}
		rate := "as fast as confirmed"
		if r.rate > 0 {
			rate = fmt.Sprintf("at %s/s", thousands(r.rate))
		}
		a := aim{what: fmt.Sprintf("%s, %s %s, the bus %s late (window %d): deliveries/s / %s, or the same row's with the bus at once where less",
			dests, sizeName(r.size), rate, r.late, lateWindow, r.boundName()),
			target: fmt.Sprintf("≥ %.0f%%", 100*lateAim)}
		sp, against, ok := lateFigure(r, results)
		switch {
		case r.err != "" && len(r.reps) == 0:
			a.figure = "failed: " + r.err
		case !ok:
			a.figure = "no bound: as fast as confirmed and no row with the bus at once"
		default:
			a.figure = fmt.Sprintf("%s (%.0f/s, median of the runs, against %s)", sp.percent("runs"), benchkit.Median(r.perSecs()), against)
			a.state = sp.atLeast(lateAim)
		}
		aims = append(aims, a)
	}
	return aims
}

// lateReport is the late rows' table: each row's deliveries/s, run by run, beside its
// bound: the least of what is offered, the window's and the same row's with the bus at
// once.
func lateReport(b *strings.Builder, results []benchResult) {
	tw := tabwriter.NewWriter(b, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| destinations\t events × runs\t the bus\t offered\t window / round trip\t the bus at once\t bound: the least\t deliveries/s\t each run\t / bound\t")
	fmt.Fprintln(tw, "| ---:\t ---:\t ---\t ---:\t ---:\t ---:\t ---:\t ---:\t ---:\t ---:\t")
	rows := 0
	perSec := func(x float64) string {
		if math.IsInf(x, 1) {
			return "–"
		}
		return thousands(int(math.Round(x))) + "/s"
	}
	for _, r := range results {
		if !r.delayed || len(r.reps) == 0 {
			continue
		}
		bus, offered, once := "at once", strings.TrimSuffix(r.rateName(), r.lateName()), math.Inf(1)
		if r.rate > 0 {
			offered = perSec(r.offered())
		}
		if r.late > 0 {
			bus = r.late.String() + " late"
			if o, ok := atOnce(results, r.benchRun); ok {
				once = benchkit.Median(o.perSecs())
			}
		}
		bound := math.Min(math.Min(r.offered(), r.windowBound()), once)
		got := benchkit.Median(r.perSecs())
		over := "–"
		if !math.IsInf(bound, 1) {
			over = pct(got / bound)
		}
		each := make([]string, 0, len(r.reps))
		for _, x := range r.perSecs() {
			each = append(each, fmt.Sprintf("%.0f", x))
		}
		fmt.Fprintf(tw, "| %d\t %d × %d\t %s\t %s\t %s\t %s\t %s\t %.0f\t %s\t %s\t\n", r.dests, r.events, len(r.reps), bus, offered,
			perSec(r.windowBound()), perSec(once), perSec(bound), got, strings.Join(each, " / "), over)
		rows++
	}
	if rows == 0 {
		return
	}
	fmt.Fprintf(b, "The bus late (issue 53): each row's relay (window %d: delivery.in_flight's default, written out) writes to the bench's bus through a delay proxy "+
		"(internal/netdelay, in the load process) that passes each request on at once and holds each answer the row's delay; \"at once\" is the same proxy without delay. "+
		"Deliveries/s: a run's deliveries over its first publish to the bus's last take (the relay sees that answer one delay later). "+
		"The bound: min(offered, destinations × window / round trip), and no more than the same row gets with the bus at once (the machine's limit) where the run has that row; "+
		"a late row is judged (the aims table) on its deliveries/s over it. These rows have no bare path and no idle window; "+
		"their CPU is in the tables above (the proxy's in the load process's).\n\n", lateWindow)
	tw.Flush()
	fmt.Fprintln(b)
}
