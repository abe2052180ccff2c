// Package apitest runs the operator API for tests: a real Redis, a real Dispatcher
// with a programmable Sink of our own, the API behind httptest, and a TCP proxy a test
// can cut. It is test support only; the relay itself never imports it.
package apitest

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mercamap/relay/internal/api"
	"github.com/mercamap/relay/internal/api/contracttest"
	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/dispatch"
	"github.com/mercamap/relay/internal/lag"
	"github.com/mercamap/relay/internal/registry"
	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/store/storetest"
	"github.com/mercamap/relay/internal/stream"
	"github.com/mercamap/relay/internal/testpeer"
	"github.com/mercamap/relay/internal/waittest"
)

// The accounts and tokens every rig has.
const (
	Acct1      = "acct_1"
	Acct2      = "acct_2"
	AdminToken = "admin-token-0123456789"
	Acct1Token = "acct1-token-0123456789"
	Acct2Token = "acct2-token-0123456789"
)

// Identity is ours, as cards show it.
var Identity = destination.Identity{Name: "mercamap",
	AWSPrincipalARN:   "arn:aws:iam::999999999999:role/relay-delivery",
	GCPServiceAccount: "relay@relay-prod.iam.gserviceaccount.com"}

// Destinations are the rig's: three of acct_1 (the bus and the stream share an AWS
// account, so disabling one cascades to the other) and one of acct_2.
func Destinations() []destination.Destination {
	return []destination.Destination{
		{ID: "orders-bus", Account: Acct1, Connector: destination.EventBridge,
			BusARN:  "arn:aws:events:us-east-1:111122223333:event-bus/orders",
			RoleARN: "arn:aws:iam::111122223333:role/mercamap-delivery"},
		{ID: "orders-stream", Account: Acct1, Connector: destination.Kinesis,
			StreamARN: "arn:aws:kinesis:eu-west-1:111122223333:stream/orders",
			RoleARN:   "arn:aws:iam::111122223333:role/mercamap-delivery",
			KMSKeyARN: "arn:aws:kms:eu-west-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"},
		{ID: "orders-topic", Account: Acct1, Connector: destination.PubSub, ProjectID: "acme-prod", TopicID: "relay-events"},
		{ID: "other-bus", Account: Acct2, Connector: destination.EventBridge,
			BusARN:  "arn:aws:events:us-east-1:444455556666:event-bus/other",
			RoleARN: "arn:aws:iam::444455556666:role/mercamap-delivery"},
	}
}

// Config is the rig's config: both accounts, all destinations, the three tokens.
func Config() *config.Config {
	return &config.Config{
		Identity: Identity,
		API: config.API{Listen: "127.0.0.1:0", Tokens: []config.Token{
			{Scope: config.AdminScope, Token: AdminToken},
			{Scope: "account:" + Acct1, Token: Acct1Token},
			{Scope: "account:" + Acct2, Token: Acct2Token},
		}},
		Delivery:     Delivery(),
		Accounts:     []config.Account{{ID: Acct1, Tenants: []string{"t1"}}, {ID: Acct2, Tenants: []string{"t2"}}},
		Destinations: Destinations(),
	}
}

// LogRetention is how long the rig's account logs are said to keep events: the oldest
// point a replay may start from.
const LogRetention = 24 * time.Hour

// Delivery holds timings small enough for tests.
func Delivery() config.Delivery {
	return config.Delivery{
		NotTakenBackoff: config.Backoff{Initial: time.Millisecond, Max: 8 * time.Millisecond},
		MaxMessageAge:   time.Hour, DisableAfter: 20, LeaseTTL: 900 * time.Millisecond,
		ChannelRetention: time.Hour, AttemptsRetention: 2 * time.Hour,
	}
}

// Sink is our own dispatch.Sink: it answers what Behave says (nil: delivered) and
// records what it accepted.
type Sink struct {
	mu        sync.Mutex
	behave    func(dest string, m destination.Message) error
	delivered map[string][]string
}

// SetBehave changes what the sink answers from now on.
func (s *Sink) SetBehave(f func(dest string, m destination.Message) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.behave = f
}

// Send implements dispatch.Sink.
func (s *Sink) Send(_ context.Context, d destination.Destination, m destination.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	if s.behave != nil {
		err = s.behave(d.ID, m)
	}
	if err == nil {
		if s.delivered == nil {
			s.delivered = map[string][]string{}
		}
		s.delivered[d.ID] = append(s.delivered[d.ID], m.EventID)
	}
	return err
}

// Delivered lists the event ids written to dest, in order.
func (s *Sink) Delivered(dest string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.delivered[dest])
}

// Options change a rig.
type Options struct {
	Stream stream.Options // KeepAlive, BroadcastLimit, Poll, Drop; the rest is filled in
	// Registry, when set, gets the dispatch metrics and the lag sampler, and is what
	// /metrics (on MetricsURL) shows.
	Registry *prometheus.Registry
	Broker   func() bool // readiness of the broker (nil: always connected)
	// Sinks, when set, replace the rig's Sink for those connectors (a real sink on the
	// awstest servers, say).
	Sinks map[destination.Connector]dispatch.Sink
	// LagInterval is the lag sampler's (lag.Options.Interval; 0: its default). A test
	// that reads the lag off /metrics as it changes sets a short one.
	LagInterval time.Duration
	// Config, when set, changes the rig's config before anything uses it (the api:
	// limits, say).
	Config func(*config.Config)
	// Pending leaves the destinations pending, as config first adds them; otherwise they
	// are active, as destinations stored by an earlier run keep their status.
	Pending bool
	// ReplayWindow, when set, is the rig's replay window instead of LogRetention, its
	// logs trimmed to it every TrimEvery (0: dispatch's default).
	ReplayWindow, TrimEvery time.Duration
	// Made keeps the destinations made through the API in a registry over the rig's
	// Redis, as serve does (without it the create, change and delete routes answer that
	// the file is the only source). The rig follows no change stream: only its own API
	// makes them.
	Made bool
}

// Rig is a running API over a real Redis and Dispatcher.
type Rig struct {
	T          testing.TB
	Store      *store.Store
	Sink       *Sink
	Dispatcher *dispatch.Dispatcher
	Streams    *stream.Channels
	API        *api.Server
	HTTP       *httptest.Server
	URL        string
	// MetricsURL is the operator listener's (api.metrics_listen): /metrics, /healthz,
	// /readyz.
	MetricsURL string
	// RedisURL is the rig's Redis.
	RedisURL string
	// Check checks every request to the rig's servers, and its answer, against the API's
	// OpenAPI document; a test wraps a server of its own with Check.Wrap.
	Check *contracttest.Checker

	cfg     *config.Config
	nextJob int
}

// New starts a rig; the dispatcher is not running until Start.
func New(t testing.TB, opts Options) *Rig {
	t.Helper()
	check := contracttest.New(t) // before the servers: their last answers are checked before it reports
	redisURL := testpeer.RedisURL(t)
	st, err := store.Open(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	sink := &Sink{}
	cfg := Config()
	if opts.Config != nil {
		opts.Config(cfg)
	}
	var metrics *dispatch.Metrics
	var gatherer prometheus.Gatherer
	if opts.Registry != nil {
		metrics, gatherer = dispatch.NewMetrics(opts.Registry), opts.Registry
	}
	sinks := map[destination.Connector]dispatch.Sink{destination.EventBridge: sink, destination.Kinesis: sink, destination.PubSub: sink}
	maps.Copy(sinks, opts.Sinks)
	disp := dispatch.New(dispatch.Options{
		Store: st, Delivery: cfg.Delivery, Accounts: cfg.Accounts, Poll: 20 * time.Millisecond, Metrics: metrics,
		LogRetention: cmp.Or(opts.ReplayWindow, LogRetention), TrimEvery: opts.TrimEvery, Sinks: sinks,
	})
	if opts.Registry != nil {
		opts.Registry.MustRegister(lag.New(lag.Options{Store: st, Held: disp.Held, Interval: opts.LagInterval}))
	}
	broker := opts.Broker
	if broker == nil {
		broker = func() bool { return true }
	}
	if err := disp.SetDestinations(context.Background(), cfg.Destinations); err != nil {
		t.Fatal(err)
	}
	if !opts.Pending {
		// The rig's destinations were set up and active before this run, as in a Redis
		// a relay has used: they keep that status (and their channels start empty).
		for _, d := range cfg.Destinations {
			if err := st.Client().HSet(context.Background(), storetest.DestKey(d.Account, d.ID), "status", store.Active).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	so := opts.Stream
	so.Store, so.Directory, so.Identity = st, disp, cfg.Identity
	if so.Window == 0 {
		so.Window = cfg.Delivery.InFlight
	}
	if so.Poll == 0 {
		so.Poll = 10 * time.Millisecond
	}
	streams := stream.New(so)
	var made *registry.Registry
	if opts.Made {
		made = registry.New(st.Client())
	}
	srv := api.New(api.Options{Config: cfg, Destinations: disp, Store: st, Streams: streams, Broker: broker, Gatherer: gatherer,
		Registry: made})
	// Served as serve serves it: its timeouts and its connection cap.
	hs := httptest.NewUnstartedServer(nil)
	hs.Config = srv.HTTPServer(nil)
	hs.Config.Handler = check.Wrap(hs.Config.Handler)
	hs.Listener = srv.Listener(hs.Listener)
	hs.Start()
	ms := httptest.NewUnstartedServer(nil)
	ms.Config = srv.MetricsHTTPServer(nil)
	ms.Config.Handler = check.Wrap(ms.Config.Handler)
	ms.Start()
	t.Cleanup(func() {
		srv.CloseStreams() // SSE handlers end, so Close does not wait on them
		hs.CloseClientConnections()
		hs.Close()
		ms.Close()
	})
	return &Rig{T: t, Store: st, Sink: sink, Dispatcher: disp, Streams: streams, API: srv, HTTP: hs, URL: hs.URL,
		MetricsURL: ms.URL, RedisURL: redisURL, Check: check, cfg: cfg}
}

// Replica serves a second API over the rig's Redis and config, as another relay process
// would: its own Redis client, Dispatcher (not running) and channels. It returns its URL.
func (r *Rig) Replica() string {
	t := r.T
	t.Helper()
	st, err := store.Open(r.RedisURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	disp := dispatch.New(dispatch.Options{Store: st, Delivery: r.cfg.Delivery, Accounts: r.cfg.Accounts, Poll: 20 * time.Millisecond,
		LogRetention: LogRetention, Sinks: map[destination.Connector]dispatch.Sink{destination.EventBridge: r.Sink, destination.Kinesis: r.Sink, destination.PubSub: r.Sink}})
	if err := disp.SetDestinations(context.Background(), r.cfg.Destinations); err != nil {
		t.Fatal(err)
	}
	streams := stream.New(stream.Options{Store: st, Directory: disp, Identity: r.cfg.Identity, Window: r.cfg.Delivery.InFlight, Poll: 10 * time.Millisecond})
	srv := api.New(api.Options{Config: r.cfg, Destinations: disp, Store: st, Streams: streams, Broker: func() bool { return true }})
	hs := httptest.NewUnstartedServer(nil)
	hs.Config = srv.HTTPServer(nil)
	hs.Config.Handler = r.Check.Wrap(hs.Config.Handler)
	hs.Listener = srv.Listener(hs.Listener)
	hs.Start()
	t.Cleanup(func() {
		srv.CloseStreams()
		hs.CloseClientConnections()
		hs.Close()
	})
	return hs.URL
}

// Start runs the dispatcher until the test ends.
func (r *Rig) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Dispatcher.Run(ctx) }()
	r.T.Cleanup(func() { cancel(); <-done })
}

// Publish appends n job.completed events to acct's log and returns their ids.
func (r *Rig) Publish(acct string, n int) []string {
	r.T.Helper()
	var batch []store.Append
	var ids []string
	for range n {
		r.nextJob++
		id := fmt.Sprintf("fetcher.job.completed.job-%05d", r.nextJob)
		ids = append(ids, id)
		batch = append(batch, store.Append{Accounts: []string{acct}, Entry: store.Entry{
			EventID: id, Type: "job.completed", Time: time.Now().UTC().Format(time.RFC3339Nano), SchemaVersion: "1.0.0",
			Data: []byte(fmt.Sprintf(`{"jobId":"job-%05d"}`, r.nextJob)),
		}})
	}
	if _, err := r.Store.AppendBatch(context.Background(), batch, time.Hour, time.Hour); err != nil {
		r.T.Fatal(err)
	}
	return ids
}

// Sequence is a channel's current sequence.
func (r *Rig) Sequence(acct, channel string) int64 {
	r.T.Helper()
	n, err := r.Store.ChannelSequence(context.Background(), acct, channel)
	if err != nil {
		r.T.Fatal(err)
	}
	return n
}

// WaitFor is the shared wait (waittest.For): cond until it holds, failing the test after timeout.
var WaitFor = waittest.For

// Proxy forwards TCP connections to a target; Cut closes every open one, as a network
// failure would, while new connections still go through.
type Proxy struct {
	URL string
	ln  net.Listener

	mu       sync.Mutex
	conns    map[net.Conn]struct{}
	down     bool
	accepted int
}

// Accepted is how many connections the proxy has let through.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// NewProxy listens on loopback and forwards to target (host:port).
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{URL: "http://" + ln.Addr().String(), ln: ln, conns: map[net.Conn]struct{}{}}
	go p.serve(target)
	t.Cleanup(func() { ln.Close(); p.Cut() })
	return p
}

func (p *Proxy) serve(target string) {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.down
		p.mu.Unlock()
		if down {
			in.Close()
			continue
		}
		out, err := net.Dial("tcp", target)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		p.conns[in], p.conns[out] = struct{}{}, struct{}{}
		p.accepted++
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			_, _ = io.Copy(dst, src)
			dst.Close()
			src.Close()
			p.mu.Lock()
			delete(p.conns, dst)
			delete(p.conns, src)
			p.mu.Unlock()
		}
		go pipe(out, in)
		go pipe(in, out)
	}
}

// Cut closes every connection open through the proxy.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// SetDown makes the proxy refuse (close at once) every new connection while down,
// after cutting the open ones.
func (p *Proxy) SetDown(down bool) {
	p.mu.Lock()
	p.down = down
	p.mu.Unlock()
	if down {
		p.Cut()
	}
}
