// Package config reads the relay's YAML file, resolves its env:/file: secret references
// and validates everything in one pass that reports every problem with its path. It never
// puts a secret's value into a problem, an error or a String().
package config

import (
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/mercamap/relay/internal/destination"
)

// Config is the validated configuration. Secret fields hold resolved values.
type Config struct {
	Identity     destination.Identity
	RabbitMQ     RabbitMQ
	Redis        Redis
	Signature    Signature
	DedupWindow  time.Duration // always longer than Signature.MaxAge
	API          API
	AWS          AWS
	GCP          GCP
	Delivery     Delivery
	Accounts     []Account
	Destinations []destination.Destination
	Tracing      Tracing // off unless tracing.otlp_endpoint is set
	// Warnings are things worth fixing that do not stop the relay (a secret file others
	// can read): check-config prints them, serve logs them. They never hold a secret.
	Warnings Problems
}

// RabbitMQ is where job events arrive and where unverifiable ones are set aside.
type RabbitMQ struct {
	// URLs are secrets: amqp:// or amqps:// with credentials, one per node of the
	// cluster (rabbitmq.urls), or the one of rabbitmq.url.
	URLs               []string
	Exchange           string
	Queue              string
	RoutingKeys        []string
	Prefetch           int
	QuarantineExchange string
	QuarantineQueue    string
	Quarantine         Quarantine // rabbitmq.quarantine: how much the quarantine queue keeps
	Partitions         int        // queues behind a consistent-hash exchange on the tenant; 1: Queue alone
}

// Quarantine bounds what the quarantine queue keeps: anyone who may publish on the
// Worker's exchange can fill it, signing key or not, so it must not be able to fill the
// broker's disk. The names stay the flat rabbitmq.quarantine_exchange / _queue keys.
type Quarantine struct {
	// MaxBytes (x-max-length-bytes) and MaxMessages (x-max-length) bound the queue; past
	// either the broker drops the oldest message (x-overflow: drop-head). The broker
	// counts body bytes only: headers are bounded by MaxMessages times the frame max.
	MaxBytes    int64
	MaxMessages int
	// MaxBodyBytes: a longer body is kept as its first MaxBodyBytes bytes, with its size
	// and SHA-256 in headers.
	MaxBodyBytes int
}

// String leaves the URLs out: they hold a password.
func (r RabbitMQ) String() string {
	return fmt.Sprintf("{URLs:[%d redacted] Exchange:%s Queue:%s RoutingKeys:%v Prefetch:%d QuarantineExchange:%s QuarantineQueue:%s Quarantine:%+v Partitions:%d}",
		len(r.URLs), r.Exchange, r.Queue, r.RoutingKeys, r.Prefetch, r.QuarantineExchange, r.QuarantineQueue, r.Quarantine, r.Partitions)
}

// GoString is String, so %#v does not print the URL either.
func (r RabbitMQ) GoString() string { return "config.RabbitMQ" + r.String() }

// Redis is the store: one server, or Redis Cluster.
type Redis struct {
	// URL is one server (redis://host:6379/0), or Redis Cluster when it names more seed
	// nodes with addr= (redis://h1:6379?addr=h2:6379). Secret: it may hold a password.
	URL string
	// Cluster lists Redis Cluster seed nodes (host:port); URL is then optional and gives
	// the scheme, credentials and client options.
	Cluster []string
	// MinReplicas is how many replicas must hold an append (Redis WAIT) before the
	// broker is acked, and a lease before it is used; 0 waits for none.
	MinReplicas int
}

// String leaves the URL out.
func (r Redis) String() string {
	return fmt.Sprintf("{URL:%s Cluster:%v MinReplicas:%d}", redacted(r.URL), r.Cluster, r.MinReplicas)
}

// GoString is String.
func (r Redis) GoString() string { return "config.Redis" + r.String() }

// Signature holds the keys job events are verified with and the age window.
type Signature struct {
	Keys      [][]byte // 32-byte external HMAC keys; the one derived from master_key is last
	MaxAge    time.Duration
	MaxFuture time.Duration
}

// String leaves the keys out.
func (s Signature) String() string {
	return fmt.Sprintf("{Keys:[%d redacted] MaxAge:%s MaxFuture:%s}", len(s.Keys), s.MaxAge, s.MaxFuture)
}

// GoString is String.
func (s Signature) GoString() string { return "config.Signature" + s.String() }

// API is the operator HTTP API and what one client may hold of it.
type API struct {
	Listen string
	// MetricsListen is the operator listener: GET /metrics (which names every account
	// and destination, and takes no token), /healthz and /readyz. Keep it private:
	// only the scraper and the probes reach it. Read once at start.
	MetricsListen string
	// AllowedHosts, when not empty, are the Host names (host, or host:port) the API
	// answers; a request naming another Host is refused before its token is read, the
	// health routes excepted, so a page reached through DNS rebinding reads nothing.
	AllowedHosts []string
	Tokens       []Token
	HTTP         HTTPLimits // read once at start
	// Open live subscriptions (per replica): per token, and per account over all of the
	// account's tokens. Past either, a subscription answers 429 RESOURCE_EXHAUSTED.
	SubscriptionsPerToken   int
	SubscriptionsPerAccount int
	// "Send a test" (across replicas, in Redis): each is a probe and a session on our one AWS
	// principal, so one account must not spend STS's rate for everyone.
	TestsPerDestination Rate
	TestsPerAccount     Rate
	// State-changing actions of an account token (across replicas, in Redis): pause, activate, test,
	// replay and retry each take one from both buckets. Admin tokens are not counted.
	ActionsPerDestination Rate
	ActionsPerAccount     Rate
	// Replays of an account token (across replicas, in Redis): a replay, or an activation with one,
	// can send a destination's whole log again, so they take one more, from these
	// tighter buckets.
	ReplaysPerDestination Rate
	ReplaysPerAccount     Rate
	// Destinations made through the API (internal/registry): at most
	// DestinationsPerAccount per account, the file's counted too; creates, changes and
	// deletes of one account, by any token, across replicas (in Redis), within
	// DestinationChangesPerAccount.
	DestinationsPerAccount       int
	DestinationChangesPerAccount Rate
	// Console sign-in links (POST /v1/accounts/{id}/sign-in-links): PublicURL is the base
	// URL customers reach the relay at (a link is <PublicURL>/console/#code=…; empty: the
	// scheme and Host the minting request came with). A link's code is good once within
	// SignInLinkTTL; the session it opens lasts SessionTTL. SignInsPerAccount bounds the
	// exchanges of codes naming one account (POST /v1/sessions takes no token), across
	// replicas, in Redis.
	PublicURL         string
	SignInLinkTTL     time.Duration
	SessionTTL        time.Duration
	SignInsPerAccount Rate
}

// HTTPLimits bound what a connection may hold: slow headers or bodies, idle keep-alives,
// large bodies, and how many connections are open at once.
type HTTPLimits struct {
	ReadHeaderTimeout time.Duration // the request line and headers
	ReadTimeout       time.Duration // the whole request, body included (not the answer)
	IdleTimeout       time.Duration // a keep-alive connection between requests
	MaxBodyBytes      int64         // a request body larger than this is refused
	MaxConnections    int           // past it, the oldest connection that never authenticated is closed
	// HealthConnections of MaxConnections are never given to authenticated
	// connections: a probe, a scraper or a new client always finds a place.
	HealthConnections int
	// Open connections one token, and one account over all its tokens, may hold: a
	// connection counts for the token that last authenticated on it. Past the cap a
	// request answers 429 RESOURCE_EXHAUSTED and its connection is closed.
	MaxConnectionsPerToken   int
	MaxConnectionsPerAccount int
	// Requests in progress at once per token and per account (live subscriptions are
	// not counted here: they have their own caps). Past the cap: 429.
	MaxRequestsPerToken   int
	MaxRequestsPerAccount int
}

// Rate is Count events per Per, in a bucket that refills evenly over Per.
type Rate struct {
	Count int
	Per   time.Duration
}

// Token is one bearer token and what it may see.
type Token struct {
	Scope string // "admin" or "account:<id>"
	Token string // secret
}

// AdminScope is the scope that may see and do everything.
const AdminScope = "admin"

// AccountScopePrefix starts a scope limited to one account: "account:<id>".
const AccountScopePrefix = "account:"

// AccountID is the account an "account:<id>" scope is limited to.
func (t Token) AccountID() (string, bool) { return strings.CutPrefix(t.Scope, AccountScopePrefix) }

// String leaves the token out.
func (t Token) String() string { return "{Scope:" + t.Scope + " Token:" + redacted(t.Token) + "}" }

// GoString is String.
func (t Token) GoString() string { return "config.Token" + t.String() }

// AWS is our own side of AWS: the STS region and local endpoints for emulators.
type AWS struct {
	Region    string
	Endpoints map[string]string // only "sts", "events", "kinesis"
	// STSBudget caps the AssumeRole calls (probes and sessions) one destination, and one
	// account's destinations together, make on our one principal (across replicas, in Redis): AWS
	// throttles AssumeRole per calling principal, so one role that keeps failing must not
	// spend the rate every customer's sessions need.
	STSBudget STSBudget
	// SessionBackoff is the wait before a destination's next session after one was
	// refused (by STS, or by the bus for a write): Initial, doubling up to Max, reset by
	// a delivery.
	SessionBackoff Backoff
}

// STSBudget is the STS budget per destination and per account.
type STSBudget struct {
	PerDestination Rate
	PerAccount     Rate
}

// GCP is our own side of Google Cloud.
type GCP struct {
	PubSubEndpoint string // only to point at a local emulator
}

// Delivery holds the timings and limits of delivery.
type Delivery struct {
	NotTakenBackoff Backoff
	// SetupCheck is how often a pending destination's setup check runs: every Initial
	// (a minute), doubling up to Max while it fails.
	SetupCheck    Backoff
	MaxMessageAge time.Duration
	DisableAfter  int
	// WarnAfter are the counts of rejections in a row at which destination.failing goes
	// out (each once per run of failures), each below DisableAfter.
	WarnAfter         []int
	LeaseTTL          time.Duration
	ChannelRetention  time.Duration
	LabelRecheck      time.Duration
	AttemptsRetention time.Duration // never shorter than ChannelRetention
	// ReplayWindow is how long an account's log keeps an event every destination has
	// passed: a replay reaches that far back. An event some destination still has to
	// deliver stays until it has (at most DedupWindow, how long logs keep anything).
	// Zero: DefaultReplayWindow, or the dedup window when that is shorter
	// (Config.LogReplayWindow).
	ReplayWindow time.Duration
	// Count bounds, beside the age ones: each channel keeps about its newest
	// ChannelMaxEvents events, each destination's attempt log its newest AttemptsMax
	// lines, whatever their age.
	ChannelMaxEvents       int
	AttemptsMax            int
	OperatorEventsExchange string
	// A delivered event's outcome and cursor are committed behind the writes: grouped
	// per account for up to CommitWait, the next write not waiting for them. At most
	// UncommittedMax of a destination's writes wait uncommitted; a crash re-sends them
	// (at least once: the message id is stable, receivers dedup).
	CommitWait     time.Duration
	UncommittedMax int
	// InFlight is the window of a destination that sets none (its in_flight): how many of
	// its writes may be in flight at once. Events of one ordering key (the store id, else
	// the account id) are written one at a time, in arrival order; those of different
	// keys overlap up to the window. 1 writes everything in arrival order, one at a time.
	InFlight int
}

// Backoff is the retry delay range of not-taken attempts.
type Backoff struct{ Initial, Max time.Duration }

// Account is one customer: the producer tenants (and optionally sources) whose events
// belong to it.
type Account struct {
	ID          string
	Tenants     []string
	Sources     []string // empty: every source
	StoreIDPath string   // empty: metadata.store_id, then metadata.storeId
}

// DefaultStoreIDPaths are read, in order, when an account sets no store_id_path.
var DefaultStoreIDPaths = []string{"metadata.store_id", "metadata.storeId"}

// StoreIDPaths are the dotted paths the event's store id is read from, first found wins.
func (a Account) StoreIDPaths() []string {
	if a.StoreIDPath == "" {
		return slices.Clone(DefaultStoreIDPaths)
	}
	return []string{a.StoreIDPath}
}

// Account returns the account with the given id.
func (c *Config) Account(id string) (Account, bool) {
	for _, a := range c.Accounts {
		if a.ID == id {
			return a, true
		}
	}
	return Account{}, false
}

// AccountsFor returns the ids of the accounts an event of this tenant and source belongs
// to: those listing the tenant, and the source too when they list sources.
func (c *Config) AccountsFor(tenant, source string) []string {
	var ids []string
	for _, a := range c.Accounts {
		if slices.Contains(a.Tenants, tenant) && (len(a.Sources) == 0 || slices.Contains(a.Sources, source)) {
			ids = append(ids, a.ID)
		}
	}
	return ids
}

// Problem is one thing wrong with the file, at its path ("destinations[2].bus_arn").
type Problem struct{ Path, Message string }

func (p Problem) String() string {
	if p.Path == "" {
		return p.Message
	}
	return p.Path + ": " + p.Message
}

// Problems is every problem found in one pass; as an error it reads one per line.
type Problems []Problem

func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// Load reads and parses the file at path, reading secret files from disk. The error is
// Problems when the file is invalid, or a *FileError when it cannot be read: it is not
// a regular file, or it is larger than MaxConfigFile (serve at start and on SIGHUP,
// check-config and every command with --config load through here).
func Load(path string, getenv func(string) string) (*Config, error) {
	data, err := readConfigFile(path)
	if err != nil {
		return nil, err
	}
	p := &parser{getenv: getenv, readSecret: readSecretFile}
	return p.result(data)
}

// Parse reads a configuration from data, resolving env:NAME through getenv and file:PATH
// through readFile (os.Getenv and os.ReadFile when nil). The error, when not nil, is
// Problems holding every problem found.
func Parse(data []byte, getenv func(string) string, readFile func(string) ([]byte, error)) (*Config, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	if readFile == nil {
		readFile = os.ReadFile
	}
	p := &parser{getenv: getenv, readSecret: func(path string) ([]byte, fs.FileMode, error) {
		b, err := readFile(path)
		return b, 0o600, err // a reader of our caller's says nothing of modes
	}}
	return p.result(data)
}

func (p *parser) result(data []byte) (*Config, error) {
	c := p.parse(data)
	if n := len(p.problems); n > maxProblems {
		p.problems = append(p.problems[:maxProblems], Problem{Message: fmt.Sprintf("… and %d more problems", n-maxProblems)})
	}
	if len(p.problems) > 0 {
		return nil, p.problems
	}
	return c, nil
}

// maxProblems is far more than a hand-written file has; past it, only a count is shown.
const maxProblems = 1000

func redacted(secret string) string {
	if secret == "" {
		return `""`
	}
	return "[redacted]"
}

// DefaultReplayWindow is delivery.replay_window's default.
const DefaultReplayWindow = 24 * time.Hour

// LogReplayWindow is delivery.replay_window as it applies: the default when unset,
// never longer than the dedup window (check refuses a longer one).
func (c *Config) LogReplayWindow() time.Duration {
	w := c.Delivery.ReplayWindow
	if w == 0 {
		w = DefaultReplayWindow
	}
	return min(w, c.DedupWindow)
}
