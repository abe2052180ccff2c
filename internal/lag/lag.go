// Package lag measures how far behind each destination is: the events of its account log
// after its cursor, and the age of the oldest of them. It samples Redis when scraped (at
// most once an interval) for the destinations this replica delivers for, and exports the
// result as Prometheus gauges with bounded labels (destination, connector, account).
// It only reads Redis.
package lag

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/store"
)

// CountLimit bounds one count of log entries in one sample. A destination seen for the
// first time counts its backlog, up to this many entries (past that the gauge is a lower
// bound); after that its backlog is kept up to date from the log's entries-added and the
// entries the destination's cursor passed, so a sample costs about the entries delivered
// since the last one, not the whole backlog.
const CountLimit = 10000

// Options configure a Sampler.
type Options struct {
	Store    *store.Store
	Held     func() []destination.Destination // the destinations this replica delivers for
	Interval time.Duration                    // a scrape within this of the last sample reuses it; 0: 5s
	Now      func() time.Time                 // nil: time.Now
	Logger   *slog.Logger
}

// Reading is one destination's lag at the last sample.
type Reading struct {
	Destination destination.Destination
	Status      string
	Failures    int
	Events      int64     // events of the account log after the cursor (before the event filter)
	AtLeast     bool      // Events is a lower bound: the backlog was longer than CountLimit when first seen
	Oldest      time.Time // arrival of the oldest of them in Redis; zero when none
}

// Sampler is a prometheus.Collector of destination lag. A scrape samples Redis unless
// the last sample is more recent than Options.Interval, so several Prometheus servers
// scraping often cost no more than one sample an interval.
type Sampler struct {
	opts     Options
	sampling sync.Mutex // one sample at a time

	mu       sync.Mutex
	last     []Reading
	sampled  time.Time
	took     time.Duration
	prev     map[string]track // by destination id: what the next sample builds on
	prevHead map[string]int64 // by account: entries-added at the last sample

	lagDesc, ageDesc, statusDesc, failDesc, atDesc, tookDesc *prometheus.Desc
}

// track is what the sampler remembers of a destination between samples.
type track struct {
	account string
	cursor  string
	events  int64
	atLeast bool // events is a lower bound (the first count stopped at CountLimit)
	recount bool // the next sample counts the backlog itself
}

// incremental reports whether the next sample of the destination, now in acct, builds on
// this one (counting only what its cursor passed) rather than counting its backlog.
func (t track) incremental(acct string) bool { return t.account == acct && !t.recount }

var labels = []string{"destination", "connector", "account"}

// New returns a Sampler; call Run to start sampling.
func New(opts Options) *Sampler {
	if opts.Interval <= 0 {
		opts.Interval = 5 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Sampler{opts: opts, prev: map[string]track{}, prevHead: map[string]int64{},
		lagDesc: prometheus.NewDesc("relay_destination_lag_events",
			"Events of the account log after the destination's cursor (before its event filter): how far behind its account's log head it is. Sampled; destinations this replica delivers for.", labels, nil),
		ageDesc: prometheus.NewDesc("relay_destination_oldest_undelivered_age_seconds",
			"Age of the oldest event after the destination's cursor, since it was stored in Redis; 0 when nothing waits.", labels, nil),
		statusDesc: prometheus.NewDesc("relay_destination_status",
			"1 for the destination's current status (active, paused, disabled).", append(labels, "status"), nil),
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
	s.mu.Lock()
	prev, prevHead := s.prev, s.prevHead
	s.mu.Unlock()

	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pipe := s.opts.Store.Pipeline()
	cmds := make([]store.LagCmd, len(accts))
	for i, a := range accts {
		probes := make([]store.LagProbe, len(byAcct[a]))
		for j, d := range byAcct[a] {
			probes[j] = store.LagProbe{ID: d.ID}
			if t, ok := prev[d.ID]; ok && t.incremental(a) {
				probes[j].Since = t.cursor
			}
		}
		cmds[i] = s.opts.Store.QueueLag(sctx, pipe, a, probes, CountLimit)
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
	next := make(map[string]track, len(held))
	nextHead := make(map[string]int64, len(accts))
	var out []Reading
	for i, a := range accts {
		head, readings, err := cmds[i].Result()
		if err != nil {
			return err
		}
		nextHead[a] = head.Added
		for j, r := range readings {
			d := byAcct[a][j]
			if !r.Found {
				continue
			}
			t := track{account: a, cursor: r.Cursor}
			p, seen := prev[d.ID]
			switch {
			case r.Next == "":
				t.events = 0 // nothing after the cursor: exact
			case !seen || !p.incremental(a):
				// This sample counted the backlog itself.
				t.events, t.atLeast = r.Count, r.Count >= CountLimit
			default:
				// Entries appended since the last sample, less those the cursor passed.
				t.events, t.atLeast = p.events+(head.Added-prevHead[a])-r.Count, p.atLeast
				// A cursor that moved back, or further than one count: count again.
				t.recount = idLess(r.Cursor, p.cursor) || r.Count >= CountLimit
			}
			t.events = max(min(t.events, head.Length), 0)
			if r.Next != "" && t.events == 0 {
				t.events, t.recount = 1, true // the log was trimmed under the cursor: count again
			}
			if t.atLeast && t.events < CountLimit {
				t.recount = true // a lower bound that no longer says much: count again
			}
			next[d.ID] = t
			rd := Reading{Destination: d, Status: r.Status, Failures: r.ConsecutiveFailures, Events: t.events, AtLeast: t.atLeast}
			if r.Next != "" {
				rd.Oldest = store.IDTime(r.Next)
			}
			out = append(out, rd)
		}
	}
	s.mu.Lock()
	s.last, s.sampled, s.took = out, now, s.opts.Now().Sub(start)
	s.prev, s.prevHead = next, nextHead
	s.mu.Unlock()
	return nil
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
	s.sampling.Lock()
	if _, at := s.Last(); s.opts.Now().Sub(at) >= s.opts.Interval {
		if err := s.Sample(context.Background()); err != nil {
			s.opts.Logger.Warn("lag sample failed; the gauges show the last one", "error", err)
		}
	}
	s.sampling.Unlock()
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
		ch <- prometheus.MustNewConstMetric(s.lagDesc, prometheus.GaugeValue, float64(r.Events), lv...)
		ch <- prometheus.MustNewConstMetric(s.ageDesc, prometheus.GaugeValue, r.Age(now).Seconds(), lv...)
		ch <- prometheus.MustNewConstMetric(s.failDesc, prometheus.GaugeValue, float64(r.Failures), lv...)
		status := r.Status
		if status == "" {
			status = store.Active
		}
		ch <- prometheus.MustNewConstMetric(s.statusDesc, prometheus.GaugeValue, 1, append(lv, status)...)
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

// idLess orders two stream ids.
func idLess(a, b string) bool {
	am, as := splitID(a)
	bm, bs := splitID(b)
	return am < bm || (am == bm && as < bs)
}

func splitID(id string) (uint64, uint64) {
	ms, seq, _ := strings.Cut(id, "-")
	m, _ := strconv.ParseUint(ms, 10, 64)
	q, _ := strconv.ParseUint(seq, 10, 64)
	return m, q
}
