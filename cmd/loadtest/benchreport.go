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
	fmt.Fprintln(tw, "| destinations\t event bytes\t events\t publish rate\t deliveries/s\t vs bare\t latency p50 / p99 / max\t bare pipeline p50 / p99\t relay-added p50 / p99\t duplicates\t relay RSS MiB idle → end (peak)\t Redis\t")
	fmt.Fprintln(tw, "| ---:\t ---:\t ---:\t ---:\t ---:\t ---:\t ---:\t ---:\t ---:\t ---:\t ---:\t ---\t")
	for _, r := range results {
		rate := "as fast as confirmed"
		if r.rate > 0 {
			rate = fmt.Sprintf("%d/s", r.rate)
		}
		if r.err != "" {
			fmt.Fprintf(tw, "| %d\t %d\t %d\t %s\t failed: %s\t\t\t\t\t\t\t %s\t\n", r.dests, r.size, r.events, rate, r.err, r.redisKind())
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
		fmt.Fprintf(tw, "| %d\t %d\t %d\t %s\t %.0f\t %s\t %s / %s / %s\t %s\t %s\t %d\t %.1f → %.1f (%.1f)\t %s\t\n",
			r.dests, r.size, r.events, rate, r.perSec, vs, round(r.lat.at(0.5)), round(r.lat.at(0.99)), round(r.lat.at(1)),
			barePct, added, r.dups, float64(r.rssIdle)/1024, float64(r.rssEnd)/1024, float64(r.hwm)/1024, r.redisKind())
	}
	tw.Flush()
	b.WriteString("\n")
	redisCPUReport(&b, results)
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

func (r benchResult) redisKind() string {
	if r.cluster {
		return "cluster, 3 masters + 3 replicas"
	}
	return "one server"
}

// redisCPUReport is what each row cost each Redis master: its CPU (INFO cpu) from the
// first publish to the last delivery, per event published and per delivery. One
// account's keys share one slot, so its whole cost lands on one master.
func redisCPUReport(b *strings.Builder, results []benchResult) {
	tw := tabwriter.NewWriter(b, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| destinations\t events\t publish rate\t Redis\t master\t Redis CPU (INFO cpu)\t µs per event\t µs per delivery\t idle: CPU share\t idle: µs per destination per second\t")
	fmt.Fprintln(tw, "| ---:\t ---:\t ---:\t ---\t ---\t ---:\t ---:\t ---:\t ---:\t ---:\t")
	rows := 0
	for _, r := range results {
		if r.err != "" {
			continue
		}
		rate := "as fast as confirmed"
		if r.rate > 0 {
			rate = fmt.Sprintf("%d/s", r.rate)
		}
		for i, m := range r.redisCPU {
			us := float64(m.cpu.Microseconds())
			idleShare, idlePerDest := "–", "–"
			if i < len(r.idleCPU) && r.idleFor > 0 {
				c := r.idleCPU[i].cpu.Seconds()
				idleShare = fmt.Sprintf("%.1f%%", 100*c/r.idleFor.Seconds())
				idlePerDest = fmt.Sprintf("%.2f", 1e6*c/r.idleFor.Seconds()/float64(r.dests))
			}
			fmt.Fprintf(tw, "| %d\t %d\t %s\t %s\t %s\t %s\t %.1f\t %.2f\t %s\t %s\t\n", r.dests, r.events, rate, r.redisKind(), m.addr,
				m.cpu.Round(time.Millisecond), us/float64(r.events), us/float64(r.dests*r.events), idleShare, idlePerDest)
			rows++
		}
	}
	if rows == 0 {
		return
	}
	fmt.Fprintln(b, "Redis CPU of each master over each row's timed phase (first publish to last delivery), from INFO cpu (used_cpu_user + used_cpu_sys) read before and after; "+
		"idle: the same over a window after the warm-up with nothing published (leases renewed, logs watched), as a share of one core and per destination:")
	fmt.Fprintln(b)
	tw.Flush()
	fmt.Fprintln(b)
	fmt.Fprintln(b, "The bench's destinations are one account's, so one slot's: on the cluster one master does that account's work and the others idle; accounts spread over the masters by slot.")
	fmt.Fprintln(b)
}
