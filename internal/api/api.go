// Package api serves the operator HTTP API: destination cards and actions, the
// channels' snapshot, replay and SSE routes, health and readiness, behind bearer tokens
// scoped admin or account:<id> (the config's, or console sessions opened by sign-in
// links, kept in Redis), each token and account within its share of
// connections and requests; and, on a separate operator listener, /metrics. It never logs or echoes a token, and it
// never changes state except through the dispatcher.
package api

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/dispatch"
	"github.com/mercamap/relay/internal/failures"
	"github.com/mercamap/relay/internal/ratelimit"
	"github.com/mercamap/relay/internal/registry"
	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/stream"
)

// Destinations is what the API needs of the dispatcher: the configured destinations
// and the actions on them.
type Destinations interface {
	// Destinations is every one, AccountDestinations one account's, both sorted by id
	// and shared (read-only); DestinationCounts is how many each account has. A request
	// made with an account's token reads only its account's (dispatch's index).
	Destinations() []destination.Destination
	AccountDestinations(acct string) []destination.Destination
	DestinationCounts() map[string]int
	Destination(id string) (destination.Destination, bool)
	// Pause and Activate: operator is true for an admin token. An account may not
	// change what our operators disabled (dispatch.ErrOperatorDisabled).
	Pause(ctx context.Context, id string, operator bool) (dispatch.Change, error)
	Activate(ctx context.Context, id string, operator bool) (dispatch.Change, error)
	// ActivateSince activates resuming from where delivery stopped (store.SinceDisabled,
	// store.SincePaused).
	ActivateSince(ctx context.Context, id string, operator bool, since string) (dispatch.Change, error)
	// Replay delivers the destination's events from a point again; ReplayableFrom is the
	// oldest point it takes (zero: unbounded).
	Replay(ctx context.Context, id string, point store.ReplayPoint) (store.Replayed, error)
	ReplayableFrom() time.Time
	// Retry writes the message of attempt n once more, outside the ordered stream: it
	// is queued for the destination's lease holder (dispatch.Dispatcher.Retry).
	Retry(ctx context.Context, id string, n int64) (store.RetryRequest, error)
	Disable(ctx context.Context, id, reason string) (dispatch.Disabled, error)
	Test(ctx context.Context, id string) (failures.Outcome, error)
	// Sent rebuilds the message the destination's sink writes for a log entry, as its
	// bus receives it (dispatch.Dispatcher.Sent), for an attempt's detail.
	Sent(id string, e store.LogEntry) (destination.Sent, error)
	// Upsert takes destinations the API made or changed; Delete fences one, calls
	// unlist (its removal from the registry), and forgets it (dispatch.Dispatcher).
	Upsert(ctx context.Context, dests ...destination.Destination) error
	// Making marks a destination this replica's API is creating, until done: its
	// registry change, read back here, is left to the create (dispatch.Dispatcher.Making).
	Making(id string) (done func())
	Delete(ctx context.Context, id string, unlist func(context.Context) error) (dispatch.Change, error)
}

// Options configure a Server.
type Options struct {
	Config       *config.Config // tokens, accounts and identity; Reload replaces them
	Destinations Destinations
	Store        *store.Store
	Streams      *stream.Channels
	Gatherer     prometheus.Gatherer // what /metrics shows (nil: an empty registry)
	Broker       func() bool         // the broker consumer is connected (nil: not checked)
	// Registerer, when set, gets the API's own metrics (connections closed to make room).
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	// Console, when set, serves the browser console under /console/ (internal/console).
	Console http.Handler
	// Registry, when set, holds the destinations made through the API; without it the
	// create, change and delete routes answer that the file is the only source.
	// ConfigPath names the file in the answer to a change of what it defines.
	Registry   *registry.Registry
	ConfigPath string
}

// Server is the operator API. Handler serves it.
type Server struct {
	opts     Options
	log      *slog.Logger
	tokens   *tokens
	accounts atomic.Pointer[map[string]bool] // the configured accounts
	cfg      atomic.Pointer[config.Config]   // the file as last loaded: what a new destination is checked against
	starting atomic.Pointer[string]          // why the replica does not serve yet (Starting); nil once Started
	limits   atomic.Pointer[config.API]      // subscription caps and action rates; Reload replaces them
	mux      http.Handler                    // the routes, behind cleanPaths (routes)

	httpLimits config.HTTPLimits // timeouts, body, connection and request caps: read once in New
	requests   requests          // requests in progress per token and account
	shed       func()            // counts a connection closed to make room
	limiter    ratelimit.Limiter // actions, replays and tests per destination and per account (ratelimit.go)

	mu         sync.Mutex
	subs       map[*subscription]struct{}
	perToken   map[[32]byte]int // open subscriptions by token digest
	perAccount map[string]int   // open subscriptions by account, of account tokens
	closing    bool
}

// New returns a Server for opts.Config's tokens and accounts.
func New(opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Gatherer == nil {
		opts.Gatherer = prometheus.NewRegistry()
	}
	s := &Server{opts: opts, log: opts.Logger, tokens: newTokens(opts.Store, opts.Logger), subs: map[*subscription]struct{}{},
		perToken: map[[32]byte]int{}, perAccount: map[string]int{}, httpLimits: httpLimitsOf(opts.Config), shed: func() {}}
	if opts.Registerer != nil {
		shed := prometheus.NewCounter(prometheus.CounterOpts{Name: "relay_api_connections_shed_total",
			Help: "API connections closed to make room: the oldest one without a token past api.max_connections, or one of the largest holder's when the authenticated ones filled their part."})
		opts.Registerer.MustRegister(shed)
		s.shed = shed.Inc
	}
	s.limiter = &ratelimit.Local{} // a Server without Redis (a test's): this process's share
	if opts.Store != nil {
		s.limiter = opts.Store.Limiter() // every replica's together
	}
	limits := config.DefaultAPI()
	s.limits.Store(&limits)
	if opts.Config != nil {
		s.Reload(opts.Config)
	}
	s.routes()
	return s
}

// Handler is the API's HTTP handler, with its body bound and its Host checked. It does
// not serve /metrics: MetricsHandler does, on the operator listener.
func (s *Server) Handler() http.Handler {
	return s.checkHost(s.limitRequests(s.startingGate(s.mux)), false)
}

// MetricsHandler serves the operator listener (api.metrics_listen): GET /metrics, which
// names every account and destination and takes no token (so the listener must be
// private), and /healthz and /readyz, so a probe or a scraper may use either port.
// api.allowed_hosts applies to /metrics here too, but a Host that is an IP address is
// always taken (the scraper names pods by address).
func (s *Server) MetricsHandler() http.Handler {
	m := http.NewServeMux()
	m.HandleFunc("GET /healthz", s.healthz)
	m.HandleFunc("GET /readyz", s.readyz)
	m.Handle("GET /metrics", promhttp.HandlerFor(s.opts.Gatherer, promhttp.HandlerOpts{}))
	// No token on this listener: a path that is not a route is a 404 straight away.
	m.HandleFunc("/", notFound)
	return s.checkHost(s.limitRequests(cleanPaths(m, http.HandlerFunc(notFound))), true)
}

// Reload takes a new config's tokens, accounts and identity (the destinations come
// through the dispatcher, which the caller reloads first), and closes every open
// subscription the new config no longer allows.
func (s *Server) Reload(cfg *config.Config) {
	s.cfg.Store(cfg)
	accounts := map[string]bool{}
	for _, a := range cfg.Accounts {
		accounts[a.ID] = true
	}
	s.accounts.Store(&accounts)
	limits := apiLimitsOf(cfg.API)
	s.limits.Store(&limits)
	if s.opts.Streams != nil {
		s.opts.Streams.SetIdentity(cfg.Identity)
	}
	s.SetTokens(cfg.API.Tokens)
}

// SetTokens replaces the accepted tokens. A token that was accepted before and is not
// in list answers 403 ACCESS_REVOKED from now on, and its open subscriptions end.
func (s *Server) SetTokens(list []config.Token) {
	s.tokens.set(list)
	s.recheckSubscriptions()
}

func (s *Server) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET /healthz", s.healthz)
	m.HandleFunc("GET /readyz", s.readyz)
	// No token on the health checks: probes should not need a secret. /metrics is on
	// the operator listener only (MetricsHandler).

	m.HandleFunc("GET /v1/connectors", s.authed(s.listConnectors))
	m.HandleFunc("GET /v1/connectors/{connector}/destinations", s.authed(s.listDestinations))
	m.HandleFunc("GET /v1/connectors/{connector}/destinations/{id}", s.authed(s.getDestination))
	m.HandleFunc("POST /v1/connectors/{connector}/destinations", s.authed(s.createDestination))
	m.HandleFunc("PATCH /v1/connectors/{connector}/destinations/{id}", s.authed(s.patchDestination))
	m.HandleFunc("DELETE /v1/connectors/{connector}/destinations/{id}", s.authed(s.deleteDestination))
	m.HandleFunc("POST /v1/connectors/{connector}/destinations/{id}/pause", s.authed(s.pause))
	m.HandleFunc("POST /v1/connectors/{connector}/destinations/{id}/activate", s.authed(s.activate))
	m.HandleFunc("POST /v1/connectors/{connector}/destinations/{id}/test", s.authed(s.test))
	m.HandleFunc("POST /v1/connectors/{connector}/destinations/{id}/replay", s.authed(s.replay))
	m.HandleFunc("POST /v1/connectors/{connector}/destinations/{id}/disable", s.authed(s.disable))
	m.HandleFunc("GET /v1/connectors/{connector}/destinations/{id}/attempts", s.authed(s.attempts))
	m.HandleFunc("POST /v1/connectors/{connector}/destinations/{id}/attempts/{n}/retry", s.authed(s.retry))
	m.HandleFunc("GET /v1/connectors/{connector}/destinations/{id}/attempts/{n}", s.authed(s.attemptDetail))
	m.HandleFunc("GET /v1/connectors/{connector}/destinations/{id}/minutes", s.authed(s.minutes))

	m.HandleFunc("GET /v1/streams/{channel}/snapshot", s.authed(s.snapshot))
	m.HandleFunc("GET /v1/streams/{channel}/events", s.authed(s.events))
	// A live subscription is not a request in progress: it has its own caps.
	m.HandleFunc("GET /v1/streams/{channel}/subscribe", s.authedStream(s.subscribe))
	m.HandleFunc("GET /v1/streams/subscribe", s.authedStream(s.subscribeMany))

	m.HandleFunc("GET /v1/openapi.json", s.openAPI) // the contract itself, no token (openapi.go)
	m.HandleFunc("GET /v1/whoami", s.authed(s.whoami))
	m.HandleFunc("GET /v1/accounts", s.authed(s.listAccounts))
	m.HandleFunc("POST /v1/accounts", s.authed(s.createAccount))
	m.HandleFunc("GET /v1/accounts/{id}", s.authed(s.getAccount))
	m.HandleFunc("PATCH /v1/accounts/{id}", s.authed(s.patchAccount))
	m.HandleFunc("DELETE /v1/accounts/{id}", s.authed(s.deleteAccount))

	// Console sign-in links (sessions.go). POST /v1/sessions takes no token: the code is
	// its credential.
	m.HandleFunc("POST /v1/accounts/{id}/sign-in-links", s.authed(s.createSignInLink))
	m.HandleFunc("DELETE /v1/accounts/{id}/sessions", s.authed(s.deleteAccountSessions))
	m.HandleFunc("POST /v1/sessions", s.createSession)
	m.HandleFunc("DELETE /v1/sessions/current", s.authed(s.deleteCurrentSession))
	if s.opts.Console != nil {
		s.consoleRoutes(m)
	}

	// A path that is not a route, or one the ServeMux would redirect to its cleaned form
	// (cleanPaths), is a 404 after the token is checked, never a redirect. No pattern but
	// "/" is a subtree (the console's are exact), so the ServeMux never redirects "/x" to
	// "/x/" either.
	unrouted := s.authed(s.noRoute)
	m.Handle("/", unrouted)
	s.mux = cleanPaths(m, unrouted)
}

func notFound(w http.ResponseWriter, r *http.Request) {
	writeError(w, errNotFound("no such route: "+r.Method+" "+r.URL.Path))
}

// authed checks the bearer token before h runs, counts the connection for it, and
// holds one of its places for requests in progress while h runs.
func (s *Server) authed(h func(http.ResponseWriter, *http.Request, principal)) http.HandlerFunc {
	return s.guard(h, true)
}

// authedStream is authed for a live subscription, which takes no place for requests
// in progress (subscriptions_per_token and _per_account bound them).
func (s *Server) authedStream(h func(http.ResponseWriter, *http.Request, principal)) http.HandlerFunc {
	return s.guard(h, false)
}

func (s *Server) guard(h func(http.ResponseWriter, *http.Request, principal), counted bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, e := s.authenticate(r)
		if e == nil {
			e = s.claim(w, r, p)
		}
		if e != nil {
			writeError(w, e)
			return
		}
		if counted {
			end, e := s.begin(p)
			if e != nil {
				writeError(w, e)
				return
			}
			defer end()
		}
		h(w, r, p)
	}
}

// accountKnown reports whether acct is configured, or owns a configured destination.
func (s *Server) accountKnown(acct string) bool {
	if m := s.accounts.Load(); m != nil && (*m)[acct] {
		return true
	}
	return len(s.opts.Destinations.AccountDestinations(acct)) > 0
}

// visible is the destinations p may see, sorted by id: an account token's own alone,
// read without a walk of the others'.
func (s *Server) visible(p principal) []destination.Destination {
	if p.admin {
		return s.opts.Destinations.Destinations()
	}
	return s.opts.Destinations.AccountDestinations(p.account)
}

// internal answers 500 for an error that is ours, and logs it (requests carry no secret).
func (s *Server) internal(w http.ResponseWriter, r *http.Request, err error) {
	s.log.Error("api request failed", "method", r.Method, "path", r.URL.Path, "error", err)
	writeError(w, errInternal())
}

// channelRetention is delivery.channel_retention of the file as last loaded.
func (s *Server) channelRetention() time.Duration {
	if cfg := s.cfg.Load(); cfg != nil && cfg.Delivery.ChannelRetention > 0 {
		return cfg.Delivery.ChannelRetention
	}
	return 7 * 24 * time.Hour
}
