package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/mercamap/relay/internal/benchkit"
)

// report prints the results as markdown: rates and ratio per run and their medians, then
// where the CPU went, then the machine.
func report(w io.Writer, cfg config, results []result, loadBefore string) {
	on := ""
	if cfg.redisLabel != "" {
		on = ", on " + cfg.redisLabel
	}
	fmt.Fprintf(w, "### Ingest: relay beside a bare consumer, same run%s (%s)\n\n", on, time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(w, "Machine: %d CPUs (nproc), Linux %s (uname -r), %s, GOMAXPROCS %d; load average before %s, after %s\n",
		runtime.NumCPU(), kernelRelease(), runtime.Version(), runtime.GOMAXPROCS(0), loadBefore, loadAverage())
	mode := "publishing and consuming at once"
	if cfg.prefill {
		mode = "queue filled first, consumer timed alone"
	}
	fmt.Fprintf(w, "Load: %d events of %d B per path per run, %d runs after a %d-event warm-up; %s; quorum queues, prefetch %d, publisher confirms with %d outstanding\n\n",
		cfg.events, cfg.size, cfg.runs, cfg.warmup, mode, cfg.prefetch, cfg.window)

	fmt.Fprintln(w, "| run | bare events/s | relay events/s | relay/bare |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: |")
	var bares, relays, ratios []float64
	for i, r := range results {
		bare, relay := r.bare.rate(), r.relay.rate()
		bares, relays, ratios = append(bares, bare), append(relays, relay), append(ratios, relay/bare)
		fmt.Fprintf(w, "| %d | %.0f | %.0f | %.0f%% |\n", i+1, bare, relay, 100*relay/bare)
	}
	fmt.Fprintf(w, "| **median** | **%.0f** | **%.0f** | **%.0f%%** |\n\n", benchkit.Median(bares), benchkit.Median(relays), 100*benchkit.Median(ratios))

	peerNames := make([]string, 0, len(cfg.peerPIDs))
	for _, p := range cfg.peerPIDs {
		peerNames = append(peerNames, p.name)
	}
	fmt.Fprint(w, "| run | path | bench process µs/event (cores)")
	for _, name := range peerNames {
		fmt.Fprintf(w, " | %s µs/event (cores)", name)
	}
	fmt.Fprintln(w, " | events per Redis round trip |")
	fmt.Fprintln(w, "| --- | --- | ---:"+strings.Repeat(" | ---:", len(peerNames))+" | ---: |")
	cpuRow := func(run, path string, phases []phase) {
		perEvent := func(get func(phase) time.Duration) string {
			var us, cores []float64
			for _, p := range phases {
				us, cores = append(us, p.perEvent(get(p))), append(cores, p.cores(get(p)))
			}
			return fmt.Sprintf("%.1f (%.2f)", benchkit.Median(us), benchkit.Median(cores))
		}
		fmt.Fprintf(w, "| %s | %s | %s", run, path, perEvent(func(p phase) time.Duration { return p.cpu }))
		for _, name := range peerNames {
			fmt.Fprintf(w, " | %s", perEvent(func(p phase) time.Duration { return p.peers[name] }))
		}
		var batches []float64
		for _, p := range phases {
			batches = append(batches, p.batch)
		}
		if b := benchkit.Median(batches); b > 0 {
			fmt.Fprintf(w, " | %.1f |\n", b)
		} else {
			fmt.Fprintln(w, " | – |")
		}
	}
	var allBare, allRelay []phase
	for i, r := range results {
		cpuRow(fmt.Sprint(i+1), "bare", []phase{r.bare})
		cpuRow(fmt.Sprint(i+1), "relay", []phase{r.relay})
		allBare, allRelay = append(allBare, r.bare), append(allRelay, r.relay)
	}
	cpuRow("**median**", "bare", allBare)
	cpuRow("**median**", "relay", allRelay)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "The bench process holds the publisher in both paths, plus the bare consumer or the relay's")
	fmt.Fprintln(w, "ingest.Consumer: the difference between its two rows is what the relay costs beyond a bare client.")
	if cfg.prefill {
		fmt.Fprintln(w, "Bare: consumer connect to last ack. Relay: consumer start to the moment the account log holds every event.")
	} else {
		fmt.Fprintln(w, "Bare: first publish to last ack. Relay: first publish to the moment the account log holds every event.")
	}
	fmt.Fprintln(w)
	ratio, relay := benchkit.Median(ratios), benchkit.Median(relays)
	aim, ok := ratioAim(cfg.size)
	if !ok {
		fmt.Fprintf(w, "(The ingest aims are for events of 1, 16 and 64 KB; relay/bare here: %.0f%%.)\n", 100*ratio)
		return
	}
	fmt.Fprintf(w, "Aims: relay ≥ %.0f%% of bare at %d B: %s (%.0f%%)", 100*aim, cfg.size, verdict(ratio >= aim), 100*ratio)
	if cfg.size == 1024 {
		fmt.Fprintf(w, "; relay ≥ 10,000 events/s on 2 cores: %s (%.0f/s on %d CPUs)", verdict(relay >= 10000), relay, runtime.NumCPU())
	}
	fmt.Fprintln(w)
}

// ratioAim is issue 17's aim for relay / bare consumer at this event size.
func ratioAim(size int) (float64, bool) {
	switch size {
	case 1024:
		return 0.90, true
	case 16384:
		return 0.60, true
	case 65536:
		return 0.50, true
	}
	return 0, false
}

// summary is what `loadtest bench -ingest-summary` reads to judge the ingest aims.
type summary struct {
	Size   int       `json:"size"`
	Redis  string    `json:"redis"`  // -redis-label: "" for the single server
	Ratios []float64 `json:"ratios"` // relay/bare, each run
	Median float64   `json:"median"`
}

func summarize(cfg config, results []result) summary {
	s := summary{Size: cfg.size, Redis: cfg.redisLabel}
	for _, r := range results {
		s.Ratios = append(s.Ratios, r.relay.rate()/r.bare.rate())
	}
	s.Median = benchkit.Median(s.Ratios)
	return s
}

// appendSummary adds s to the file at path as one JSON line.
func appendSummary(path string, s summary) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("-summary: %w", err)
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("-summary: %w", err)
	}
	return f.Close()
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

// kernelRelease is what `uname -r` prints.
func kernelRelease() string {
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		return strings.TrimSpace(string(b))
	}
	var u syscall.Utsname
	if err := syscall.Uname(&u); err != nil {
		return "unknown"
	}
	var b strings.Builder
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	return b.String()
}

// loadAverage is the 1-minute load average: other work on the machine skews both paths.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "unknown"
}
