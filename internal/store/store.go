// Package store keeps the relay's durable state in Redis: each account's event log with
// its dedup markers, and (for dispatch) cursors, leases and destination state. Every
// multi-key change is one Lua script, so a crash never leaves half a write behind.
// It runs on one Redis server or on Redis Cluster through the same code: every key of an
// account carries the account's hash tag, so each script, transaction and blocking read
// touches one slot. It knows nothing of sinks or of AMQP.
package store

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Store is the Redis-backed state of the relay. It is safe for concurrent use.
type Store struct {
	rdb         redis.UniversalClient
	minReplicas int
	bounds      Bounds
	commits     group                      // commits arriving together share a round trip (group.go)
	ping        pinger                     // one PING at a time for readiness and scrapes (ping.go)
	now         func() time.Time           // the clock appends write with (clock); nil: time.Now
	format      atomic.Pointer[func() int] // the state format in force (SetStateFormat); nil: 1
	deletedLife atomic.Int64               // a deleted destination's counter's life, ns (SetDeletedCounterLife); 0: forgottenTTL
}

// New returns a Store over an open Redis client: a *redis.Client for one server, a
// *redis.ClusterClient for Redis Cluster. It waits for no replica (Options.MinReplicas 0)
// and keeps DefaultBounds.
func New(rdb redis.UniversalClient) *Store {
	return &Store{rdb: rdb, bounds: Bounds{}.orDefault()}
}

// Bounds are the count bounds of what the scripts append, beside the age bounds each
// call passes: a channel keeps about its newest ChannelEvents events, a destination's
// attempt log its newest Attempts lines (Redis trims whole nodes of its streams, so a
// hundred or so more may stay). Zero: the default.
type Bounds struct {
	ChannelEvents int
	Attempts      int
}

// DefaultBounds are delivery.channel_max_events and delivery.attempts_max's defaults.
var DefaultBounds = Bounds{ChannelEvents: 500, Attempts: 2500}

func (b Bounds) orDefault() Bounds {
	if b.ChannelEvents <= 0 {
		b.ChannelEvents = DefaultBounds.ChannelEvents
	}
	if b.Attempts <= 0 {
		b.Attempts = DefaultBounds.Attempts
	}
	return b
}

// boundsArg is the last argument of every script that appends to a channel or an
// attempt log: luaPrelude reads the count bounds from it.
func (s *Store) boundsArg() string {
	return "bounds:" + strconv.Itoa(s.bounds.ChannelEvents) + ":" + strconv.Itoa(s.bounds.Attempts)
}

// Options say which Redis holds the state and how many replicas a write must reach.
type Options struct {
	// URL is redis:// or rediss://: one server (redis://host:6379/0), or Redis Cluster
	// when it names more seed nodes with addr= (redis://h1:6379?addr=h2:6379&addr=h3:6379).
	URL string
	// Cluster lists Redis Cluster seed nodes (host:port). URL may then be empty, or give
	// the scheme, credentials and client options (its host is one more seed).
	Cluster []string
	// MinReplicas is how many replicas must hold an append, or a lease, before the store
	// reports it done (Redis WAIT after the write, on its connection); 0 waits for none.
	MinReplicas int
	// CheckTimeout, when set, tries each command once, dialling for at most this long:
	// for a check that must answer soon rather than wait for Redis.
	CheckTimeout time.Duration
	// Bounds are the count bounds of channels and attempt logs (zero: DefaultBounds).
	Bounds Bounds
}

// clusterReload is how old the cluster client's slot map may grow before it reloads it.
const clusterReload = time.Second

// Open returns a Store over url: one server, or a cluster URL (see Options.URL).
func Open(url string) (*Store, error) { return Connect(Options{URL: url}) }

// Connect returns a Store over a new client for o: a cluster client when o names a
// cluster, else a client of the one server.
func Connect(o Options) (*Store, error) {
	if o.MinReplicas < 0 {
		return nil, errors.New("redis min_replicas must not be negative")
	}
	u, err := url.Parse(o.URL)
	if err != nil {
		return nil, errors.New("redis url is not a URL") // the parse error would quote the password
	}
	if len(o.Cluster) == 0 && !u.Query().Has("addr") {
		opts, err := redis.ParseURL(o.URL)
		if err != nil {
			return nil, err
		}
		if o.CheckTimeout > 0 {
			opts.MaxRetries, opts.DialerRetries, opts.DialTimeout = -1, 1, o.CheckTimeout
		}
		return &Store{rdb: redis.NewClient(opts), minReplicas: o.MinReplicas, bounds: o.Bounds.orDefault()}, nil
	}
	opts := &redis.ClusterOptions{}
	if o.URL != "" {
		if u.Path != "" && u.Path != "/" && u.Path != "/0" {
			return nil, fmt.Errorf("redis url: Redis Cluster has only database 0, the url names %s", u.Path)
		}
		u.Path = ""
		if opts, err = redis.ParseClusterURL(u.String()); err != nil {
			return nil, err
		}
	}
	opts.Addrs = append(opts.Addrs, o.Cluster...)
	if o.CheckTimeout > 0 {
		opts.MaxRetries, opts.MaxRedirects, opts.DialerRetries, opts.DialTimeout = -1, 1, 1, o.CheckTimeout
	}
	if opts.ClusterStateReloadInterval == 0 {
		// The client learns of a failover from MOVED replies or by reloading its slot map;
		// a master that is gone sends nothing, so reload often (one CLUSTER SLOTS a second).
		opts.ClusterStateReloadInterval = clusterReload
	}
	return &Store{rdb: redis.NewClusterClient(opts), minReplicas: o.MinReplicas, bounds: o.Bounds.orDefault()}, nil
}

// Client is the underlying client, for health checks.
func (s *Store) Client() redis.UniversalClient { return s.rdb }

// Close closes the client.
func (s *Store) Close() error { return s.rdb.Close() }
