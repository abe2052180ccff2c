// Package lag measures how far behind each destination is: the events of its account log
// after its cursor, and the age of the oldest of them. It samples Redis when scraped (at
// most once an interval) for the destinations this replica delivers for, and exports the
// result as Prometheus gauges with bounded labels (destination, connector, account).
// It only reads Redis, and only positions (store.QueueLag): a sample costs the same
// whatever the backlogs.
package lag

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/store"
)

// Options configure a Sampler.
type Options struct {
	Store    *store.Store
	Held     func() []destination.Destination // the destinations this replica delivers for
	Interval time.Duration                    // a scrape within this of the last sample reuses it; 0: 5s
	// ScrapeWait bounds how long a scrape waits for a new sample (0: 2s): past it the
	// scrape shows the last one and the sample goes on in the background, so a Redis that
	// hangs never holds a scrape to Prometheus' timeout.
	ScrapeWait time.Duration
	Now        func() time.Time // nil: time.Now
	Logger     *slog.Logger
}

// Reading is one destination's lag at the last sample.
type Reading struct {
	Destination destination.Destination
	Status      string
	DisabledBy  string // a disabled destination's disabled.by: operator or rejections
	Failures    int
	// Known is false when the positions cannot tell the backlog (store.LagReading.Known):
	// the lag gauges are then left out, status and failures still shown.
	Known  bool
	Events int64     // events of the account log after the cursor (before the event filter)
	Oldest time.Time // arrival of the oldest of them in Redis; zero when none
}

// Sampler is a prometheus.Collector of destination lag. A scrape samples Redis unless
// the last sample is more recent than Options.Interval, so several Prometheus servers
// scraping often cost no more than one sample an interval.
type Sampler struct {
	opts    Options
	mu      sync.Mutex
	running chan struct{} // closed when the sample in progress ends; nil when none runs
	last    []Reading
	sampled time.Time
	took    time.Duration

	lagDesc, ageDesc, statusDesc, failDesc, atDesc, tookDesc *prometheus.Desc
}

var labels = []string{"destination", "connector", "account"}

// New returns a Sampler; call Run to start sampling.
func New(opts Options) *Sampler {
	if opts.Interval <= 0 {
		opts.Interval = 5 * time.Second
	}
	if opts.ScrapeWait <= 0 {
		opts.ScrapeWait = 2 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Sampler{opts: opts,
		lagDesc: prometheus.NewDesc("relay_destination_lag_events",
			"Events of the account log after the destination's cursor (before its event filter): how far behind its account's log head it is. Sampled; destinations this replica delivers for.", labels, nil),
		ageDesc: prometheus.NewDesc("relay_destination_oldest_undelivered_age_seconds",
			"Age of the oldest event after the destination's cursor, since it was stored in Redis; 0 when nothing waits.", labels, nil),
		statusDesc: prometheus.NewDesc("relay_destination_status",
			"1 for the destination's current status (active, paused, disabled); by, for disabled, says who disabled it: rejections (disable_after rejected writes in a row) or operator (an admin's disable).",
			append(labels, "status", "by"), nil),
		failDesc: prometheus.NewDesc("relay_destination_consecutive_failures",
			"Rejected writes in a row (the card's consecutive_failures).", labels, nil),
		atDesc: prometheus.NewDesc("relay_lag_sample_timestamp_seconds",
			"When the destination lag gauges were last sampled (Unix time).", nil, nil),
		tookDesc: prometheus.NewDesc("relay_lag_sample_duration_seconds",
			"How long the last lag sample took.", nil, nil),
	}
}

// Last returns the readings of the last sample and when it was taken.
func (s *Sampler) Last() ([]Reading, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last, s.sampled
}

// Sample reads every held destination's position in one pipeline (one script per
// account) and replaces the last sample.
func (s *Sampler) Sample(ctx context.Context) error {
	start := s.opts.Now()
	held := s.opts.Held()
	byAcct := map[string][]destination.Destination{}
	var accts []string
	for _, d := range held {
		if _, ok := byAcct[d.Account]; !ok {
			accts = append(accts, d.Account)
		}
		byAcct[d.Account] = append(byAcct[d.Account], d)
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pipe := s.opts.Store.Pipeline()
	cmds := make([]store.LagCmd, len(accts))
	for i, a := range accts {
		ids := make([]string, len(byAcct[a]))
		for j, d := range byAcct[a] {
			ids[j] = d.ID
		}
		cmds[i] = s.opts.Store.QueueLag(sctx, pipe, a, ids)
	}
	if len(accts) > 0 {
		// Loaded each time (one cheap call): a restarted Redis has forgotten it.
		if err := s.opts.Store.LoadLagScript(sctx); err != nil {
			return err
		}
		if _, err := pipe.Exec(sctx); err != nil {
			return err
		}
	}
	now := s.opts.Now()
	var out []Reading
	for i, a := range accts {
		readings, err := cmds[i].Result()
		if err != nil {
			return err
		}
		for j, r := range readings {
			if !r.Found {
				continue
			}
			rd := Reading{Destination: byAcct[a][j], Status: r.Status, DisabledBy: r.DisabledBy, Failures: r.ConsecutiveFailures,
				Known: r.Known, Events: r.Events}
			if r.Next != "" {
				rd.Oldest = store.IDTime(r.Next)
			}
			out = append(out, rd)
		}
	}
	s.mu.Lock()
	s.last, s.sampled, s.took = out, now, s.opts.Now().Sub(start)
	s.mu.Unlock()
	return nil
}

// refresh starts a sample when the last one is older than Interval and none runs, and
// waits for the one running at most ScrapeWait. One sample runs at a time.
func (s *Sampler) refresh() {
	s.mu.Lock()
	done := s.running
	if done == nil && s.opts.Now().Sub(s.sampled) >= s.opts.Interval {
		done = make(chan struct{})
		s.running = done
		go func() {
			defer close(done)
			if err := s.Sample(context.Background()); err != nil {
				s.opts.Logger.Warn("lag sample failed; the gauges show the last one", "error", err)
			}
			s.mu.Lock()
			s.running = nil
			s.mu.Unlock()
		}()
	}
	s.mu.Unlock()
	if done == nil {
		return
	}
	t := time.NewTimer(s.opts.ScrapeWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// Describe implements prometheus.Collector.
func (s *Sampler) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{s.lagDesc, s.ageDesc, s.statusDesc, s.failDesc, s.atDesc, s.tookDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: a new sample, or the last one if it is recent,
// with ages as of now. A failed sample is logged and the last one shown.
func (s *Sampler) Collect(ch chan<- prometheus.Metric) {
	s.refresh()
	s.mu.Lock()
	last, sampled, took := s.last, s.sampled, s.took
	s.mu.Unlock()
	if sampled.IsZero() {
		return
	}
	now := s.opts.Now()
	for _, r := range last {
		d := r.Destination
		lv := []string{d.ID, string(d.Connector), d.Account}
		if r.Known {
			ch <- prometheus.MustNewConstMetric(s.lagDesc, prometheus.GaugeValue, float64(r.Events), lv...)
			ch <- prometheus.MustNewConstMetric(s.ageDesc, prometheus.GaugeValue, r.Age(now).Seconds(), lv...)
		}
		ch <- prometheus.MustNewConstMetric(s.failDesc, prometheus.GaugeValue, float64(r.Failures), lv...)
		status := r.Status
		if status == "" {
			status = store.Active
		}
		by := "" // no label but for a disabled destination
		if status == store.Disabled {
			if by = r.DisabledBy; by == "" {
				by = store.DisabledByOperator
			}
		}
		ch <- prometheus.MustNewConstMetric(s.statusDesc, prometheus.GaugeValue, 1, append(lv, status, by)...)
	}
	ch <- prometheus.MustNewConstMetric(s.atDesc, prometheus.GaugeValue, float64(sampled.UnixMilli())/1000)
	ch <- prometheus.MustNewConstMetric(s.tookDesc, prometheus.GaugeValue, took.Seconds())
}

// Age is how long the oldest waiting event has waited at now; 0 when none waits.
func (r Reading) Age(now time.Time) time.Duration {
	if r.Oldest.IsZero() || now.Before(r.Oldest) {
		return 0
	}
	return now.Sub(r.Oldest)
}
