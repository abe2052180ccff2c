package main

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"
)

// latencyAim is the aim for what the relay adds to one destination's latency, set for
// events of aimSize bytes (the size performance.md's bare figures use).
const (
	latencyAim = 5 * time.Millisecond
	aimSize    = 1024
)

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

// benchReport is the markdown section `make bench` writes into docs/benchmarks.md.
func benchReport(results []benchResult, bareFor time.Duration, bareRate float64, bareP50, bareP99 time.Duration, load, loadAfter string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "### End to end (%s)\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "load average before %s, after %s; nproc %d\n\n", load, loadAfter, nproc())
	fmt.Fprintf(&b, "bare PutEvents loop (1 entry, one in flight, same bus, same run, %s): **%.0f/s**, p50 %s / p99 %s\n\n",
		bareFor, bareRate, round(bareP50), round(bareP99))
	tw := tabwriter.NewWriter(&b, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| destinations\t event bytes\t events\t publish rate\t deliveries/s\t vs bare\t latency p50 / p99 / max\t bare pipeline p50 / p99\t relay-added p50 / p99\t duplicates\t relay RSS MiB idle → end (peak)\t")
	fmt.Fprintln(tw, "| ---:\t ---:\t ---:\t ---:\t ---:\t ---:\t ---:\t ---:\t ---:\t ---:\t ---:\t")
	for _, r := range results {
		rate := "as fast as confirmed"
		if r.rate > 0 {
			rate = fmt.Sprintf("%d/s", r.rate)
		}
		if r.err != "" {
			fmt.Fprintf(tw, "| %d\t %d\t %d\t %s\t failed: %s\t\t\t\t\t\t\t\n", r.dests, r.size, r.events, rate, r.err)
			continue
		}
		vs := fmt.Sprintf("%.0f%% of the loop", 100*r.perSec/bareRate)
		barePct, added := "–", "–"
		if r.bare != nil && r.bare.err != "" {
			barePct = "failed: " + r.bare.err
		} else if r.bare != nil {
			vs = fmt.Sprintf("%.0f%% of %.0f/s", 100*r.perSec/r.bare.perSec, r.bare.perSec)
			barePct = fmt.Sprintf("%s / %s", round(r.bare.lat.at(0.5)), round(r.bare.lat.at(0.99)))
			added = fmt.Sprintf("%s / %s", round(r.lat.at(0.5)-r.bare.lat.at(0.5)), round(r.lat.at(0.99)-r.bare.lat.at(0.99)))
		}
		fmt.Fprintf(tw, "| %d\t %d\t %d\t %s\t %.0f\t %s\t %s / %s / %s\t %s\t %s\t %d\t %.1f → %.1f (%.1f)\t\n",
			r.dests, r.size, r.events, rate, r.perSec, vs, round(r.lat.at(0.5)), round(r.lat.at(0.99)), round(r.lat.at(1)),
			barePct, added, r.dups, float64(r.rssIdle)/1024, float64(r.rssEnd)/1024, float64(r.hwm)/1024)
	}
	tw.Flush()
	b.WriteString("\n")
	for _, r := range results {
		if r.err != "" || r.bare == nil || r.bare.err != "" || r.rate == 0 {
			continue
		}
		added := r.lat.at(0.99) - r.bare.lat.at(0.99)
		if r.size <= aimSize {
			fmt.Fprintf(&b, "- Aim, relay-added p99 < %s for one destination of %d B events: %s at %d/s: %s.\n",
				latencyAim, aimSize, round(added), r.rate, verdict(added < latencyAim))
		} else {
			fmt.Fprintf(&b, "- Relay-added p99 with %d B events at %d/s: %s (the aim is set for %d B events).\n",
				r.size, r.rate, round(added), aimSize)
		}
		if added < 0 {
			fmt.Fprintf(&b, "  (Below zero: the bare pipeline's p99 came out above the relay's in this run; a p99 of %d events is their %d slowest.)\n",
				len(r.lat), len(r.lat)-int(float64(len(r.lat))*0.99))
		}
	}
	for _, r := range results {
		if r.err == "" && r.dests >= 10000 {
			fmt.Fprintf(&b, "- Aim, one relay holds 10,000 destinations in < 300 MiB: peak RSS %.1f MiB with %d: %s.\n",
				float64(r.hwm)/1024, r.dests, verdict(r.hwm < 300*1024))
		}
	}
	return b.String()
}
