package config

import (
	"fmt"
	"io/fs"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/mercamap/relay/internal/destination"
)

// The defaults of every key the file may leave out, as config.md shows them.
const (
	DefaultQueue                  = "relay.job-events"
	DefaultPrefetch               = 256
	MaxPartitions                 = 64
	DefaultListen                 = "127.0.0.1:8080"
	DefaultMetricsListen          = "127.0.0.1:9090"
	DefaultAWSRegion              = "us-east-1"
	DefaultOperatorEventsExchange = "relay.operator.events"
	QuarantineSuffix              = ".quarantine"
)

// DefaultQuarantine is the rabbitmq.quarantine section's defaults. 64 KiB keeps every
// Worker event whole (a few KiB), so it can be re-driven after a key fix; 256 MiB then
// holds at least 4,096 copies cut to that size, and 100,000 messages of a typical event
// (about 2.6 KiB, where the two bounds meet) before the oldest go.
func DefaultQuarantine() Quarantine {
	return Quarantine{MaxBytes: 256 << 20, MaxMessages: 10_000, MaxBodyBytes: 64 << 10}
}

// DefaultAPI is the api: section's defaults, listen included.
func DefaultAPI() API {
	return API{
		Listen:        DefaultListen,
		MetricsListen: DefaultMetricsListen,
		// One account may hold an eighth of the connections and one token a sixteenth
		// (docs/operator-guide.md says why): eight accounts at their cap still leave
		// room, and past the cap the largest holder is the one cut.
		HTTP: HTTPLimits{ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
			IdleTimeout: 2 * time.Minute, MaxBodyBytes: 64 << 10, MaxConnections: 4096, HealthConnections: 16,
			MaxConnectionsPerToken: 256, MaxConnectionsPerAccount: 512, MaxRequestsPerToken: 64, MaxRequestsPerAccount: 128},
		SubscriptionsPerToken:   50,
		SubscriptionsPerAccount: 200,
		TestsPerDestination:     Rate{Count: 6, Per: time.Minute},
		TestsPerAccount:         Rate{Count: 30, Per: time.Minute},
		ActionsPerDestination:   Rate{Count: 10, Per: time.Minute},
		ActionsPerAccount:       Rate{Count: 60, Per: time.Minute},
		ReplaysPerDestination:   Rate{Count: 5, Per: 10 * time.Minute},
		ReplaysPerAccount:       Rate{Count: 30, Per: 10 * time.Minute},
		// A customer's Connectors page adds a few; a platform migrating an account in
		// a script, a hundred a minute.
		DestinationsPerAccount:       1000,
		DestinationChangesPerAccount: Rate{Count: 120, Per: time.Minute},
		// A link is opened within minutes of being minted; a working day in the console
		// needs no second one. Sign-ins of one account: its people, each once, with room
		// for a few retries.
		SignInLinkTTL:     5 * time.Minute,
		SessionTTL:        8 * time.Hour,
		SignInsPerAccount: Rate{Count: 30, Per: time.Minute},
	}
}

// DefaultSTSBudget is aws.sts_budget's defaults. Every new session costs two calls, its
// own probe and the session; a healthy destination makes them every 13 minutes. 16 a
// minute holds the six tests of api.tests_per_destination's default (12 calls: each test
// is a new session) with room for two sessions of its own, and holds a failing role to
// under a thousand an hour instead of thousands a minute. 120 a minute per account holds
// its 30 tests a minute (api.tests_per_account) twice over.
func DefaultSTSBudget() STSBudget {
	return STSBudget{PerDestination: Rate{Count: 16, Per: time.Minute}, PerAccount: Rate{Count: 120, Per: time.Minute}}
}

// DefaultRoutingKeys are the Worker's two routing keys.
var DefaultRoutingKeys = []string{"job.completed", "job.failed"}

func defaults() *Config {
	return &Config{
		Identity: destination.Identity{Name: destination.DefaultName},
		RabbitMQ: RabbitMQ{
			Queue:       DefaultQueue,
			RoutingKeys: append([]string(nil), DefaultRoutingKeys...),
			Prefetch:    DefaultPrefetch,
			Quarantine:  DefaultQuarantine(),
			Partitions:  1,
		},
		Signature:   Signature{MaxAge: 72 * time.Hour, MaxFuture: 5 * time.Minute},
		DedupWindow: 168 * time.Hour,
		API:         DefaultAPI(),
		AWS: AWS{Region: DefaultAWSRegion, Endpoints: map[string]string{},
			STSBudget:      DefaultSTSBudget(),
			SessionBackoff: Backoff{Initial: time.Second, Max: 2 * time.Minute}},
		Delivery: Delivery{
			NotTakenBackoff:        Backoff{Initial: time.Second, Max: 5 * time.Minute},
			SetupCheck:             Backoff{Initial: time.Minute, Max: 15 * time.Minute},
			MaxMessageAge:          72 * time.Hour,
			DisableAfter:           20,
			LeaseTTL:               15 * time.Second,
			ChannelRetention:       168 * time.Hour,
			LabelRecheck:           15 * time.Minute,
			AttemptsRetention:      720 * time.Hour,
			ChannelMaxEvents:       500,
			AttemptsMax:            2500,
			OperatorEventsExchange: DefaultOperatorEventsExchange,
			CommitWait:             5 * time.Millisecond,
			UncommittedMax:         32,
			InFlight:               destination.DefaultInFlight,
		},
	}
}

// indentTab finds the first tab in a line's indentation (1-based line and column): the
// YAML parser's own message for it ("found character that cannot start any token")
// names neither the tab nor the fix.
func indentTab(data []byte) (line, col int, ok bool) {
	line, col = 1, 1
	indent := true
	for _, b := range data {
		switch {
		case b == '\n':
			line, col, indent = line+1, 1, true
			continue
		case b == '\t' && indent:
			return line, col, true
		case b != ' ':
			indent = false
		}
		col++
	}
	return 0, 0, false
}

// secondDocument is the problem of a file with more than one YAML document.
func secondDocument(line int) string {
	at := ""
	if line > 0 {
		at = fmt.Sprintf(" (its --- is at line %d)", line)
	}
	return "the file holds a second YAML document" + at + ", and a config is one document: remove the --- line and what follows it, or merge the two"
}

// parser holds one parse: the walk, the secret readers, and the secret references as
// written (the Config gets their resolved values).
type parser struct {
	walker
	getenv     func(string) string
	readSecret func(path string) ([]byte, fs.FileMode, error) // a file: secret and its mode

	rabbitURLRef        string   // rabbitmq.url
	rabbitURLRefs       []string // rabbitmq.urls; nil when absent
	keyRefs             []string
	masterRef           string
	externalIDSecretRef string // identity.external_id_secret: derives ExternalIds, never kept
	warnings            Problems
}

// add reports a problem found by a check, unless the value at path could not be read.
func (p *parser) add(path, format string, args ...any) {
	if !p.wrong[path] {
		p.walker.add(path, format, args...)
	}
}

func (p *parser) parse(data []byte) *Config {
	c := defaults()
	var root yaml.Node
	second, line, err := decodeOne(data, &root)
	if err != nil {
		if line, col, ok := indentTab(data); ok {
			p.add("", "the file is not valid YAML: line %d, column %d: a tab indents the line; YAML indents with spaces only: replace the tab with spaces", line, col)
			return c
		}
		p.add("", "the file is not valid YAML: %v", err)
		return c
	}
	if second {
		p.add("", "%s", secondDocument(line))
	}
	p.budget = visitBudget(&root)
	p.decode(&root, c)
	p.check(c)
	c.Warnings = p.warnings
	return c
}

// decode walks the file into c, reporting unknown keys and wrong types.
func (p *parser) decode(root *yaml.Node, c *Config) {
	w := &p.walker
	p.object(root, "", fields{
		"identity": func(v *yaml.Node, path string) {
			w.object(v, path, fields{
				"name":                func(v *yaml.Node, path string) { w.str(v, path, &c.Identity.Name) },
				"aws_principal_arn":   func(v *yaml.Node, path string) { w.str(v, path, &c.Identity.AWSPrincipalARN) },
				"gcp_service_account": func(v *yaml.Node, path string) { w.str(v, path, &c.Identity.GCPServiceAccount) },
				"external_id_secret":  func(v *yaml.Node, path string) { w.str(v, path, &p.externalIDSecretRef) },
				"aws_template_url":    func(v *yaml.Node, path string) { w.str(v, path, &c.Identity.AWSTemplateURL) },
			})
		},
		"rabbitmq": func(v *yaml.Node, path string) {
			r := &c.RabbitMQ
			w.object(v, path, fields{
				"url":                 func(v *yaml.Node, path string) { w.str(v, path, &p.rabbitURLRef) },
				"urls":                func(v *yaml.Node, path string) { w.strs(v, path, &p.rabbitURLRefs) },
				"partitions":          func(v *yaml.Node, path string) { w.integer(v, path, &r.Partitions) },
				"exchange":            func(v *yaml.Node, path string) { w.str(v, path, &r.Exchange) },
				"queue":               func(v *yaml.Node, path string) { w.str(v, path, &r.Queue) },
				"routing_keys":        func(v *yaml.Node, path string) { w.strs(v, path, &r.RoutingKeys) },
				"prefetch":            func(v *yaml.Node, path string) { w.integer(v, path, &r.Prefetch) },
				"quarantine_exchange": func(v *yaml.Node, path string) { w.str(v, path, &r.QuarantineExchange) },
				"quarantine_queue":    func(v *yaml.Node, path string) { w.str(v, path, &r.QuarantineQueue) },
				"quarantine": func(v *yaml.Node, path string) {
					q := &r.Quarantine
					w.object(v, path, fields{
						"max_bytes":      func(v *yaml.Node, path string) { w.integer64(v, path, &q.MaxBytes) },
						"max_messages":   func(v *yaml.Node, path string) { w.integer(v, path, &q.MaxMessages) },
						"max_body_bytes": func(v *yaml.Node, path string) { w.integer(v, path, &q.MaxBodyBytes) },
					})
				},
			})
		},
		"redis": func(v *yaml.Node, path string) {
			w.object(v, path, fields{
				"url":          func(v *yaml.Node, path string) { w.str(v, path, &c.Redis.URL) },
				"cluster":      func(v *yaml.Node, path string) { w.strs(v, path, &c.Redis.Cluster) },
				"min_replicas": func(v *yaml.Node, path string) { w.integer(v, path, &c.Redis.MinReplicas) },
			})
		},
		"signature": func(v *yaml.Node, path string) {
			s := &c.Signature
			w.object(v, path, fields{
				"keys":       func(v *yaml.Node, path string) { w.strs(v, path, &p.keyRefs) },
				"master_key": func(v *yaml.Node, path string) { w.str(v, path, &p.masterRef) },
				"max_age":    func(v *yaml.Node, path string) { w.duration(v, path, &s.MaxAge) },
				"max_future": func(v *yaml.Node, path string) { w.duration(v, path, &s.MaxFuture) },
			})
		},
		"dedup_window": func(v *yaml.Node, path string) { w.duration(v, path, &c.DedupWindow) },
		"api": func(v *yaml.Node, path string) {
			w.object(v, path, fields{
				"listen":                    func(v *yaml.Node, path string) { w.str(v, path, &c.API.Listen) },
				"read_header_timeout":       func(v *yaml.Node, path string) { w.duration(v, path, &c.API.HTTP.ReadHeaderTimeout) },
				"read_timeout":              func(v *yaml.Node, path string) { w.duration(v, path, &c.API.HTTP.ReadTimeout) },
				"idle_timeout":              func(v *yaml.Node, path string) { w.duration(v, path, &c.API.HTTP.IdleTimeout) },
				"max_body_bytes":            func(v *yaml.Node, path string) { w.integer64(v, path, &c.API.HTTP.MaxBodyBytes) },
				"max_connections":           func(v *yaml.Node, path string) { w.integer(v, path, &c.API.HTTP.MaxConnections) },
				"subscriptions_per_token":   func(v *yaml.Node, path string) { w.integer(v, path, &c.API.SubscriptionsPerToken) },
				"subscriptions_per_account": func(v *yaml.Node, path string) { w.integer(v, path, &c.API.SubscriptionsPerAccount) },
				"tests_per_destination":     func(v *yaml.Node, path string) { w.rate(v, path, &c.API.TestsPerDestination) },
				"tests_per_account":         func(v *yaml.Node, path string) { w.rate(v, path, &c.API.TestsPerAccount) },
				"actions_per_destination":   func(v *yaml.Node, path string) { w.rate(v, path, &c.API.ActionsPerDestination) },
				"actions_per_account":       func(v *yaml.Node, path string) { w.rate(v, path, &c.API.ActionsPerAccount) },
				"replays_per_destination":   func(v *yaml.Node, path string) { w.rate(v, path, &c.API.ReplaysPerDestination) },
				"replays_per_account":       func(v *yaml.Node, path string) { w.rate(v, path, &c.API.ReplaysPerAccount) },
				"destinations_per_account":  func(v *yaml.Node, path string) { w.integer(v, path, &c.API.DestinationsPerAccount) },
				"destination_changes_per_account": func(v *yaml.Node, path string) {
					w.rate(v, path, &c.API.DestinationChangesPerAccount)
				},
				"public_url":           func(v *yaml.Node, path string) { w.str(v, path, &c.API.PublicURL) },
				"sign_in_link_ttl":     func(v *yaml.Node, path string) { w.duration(v, path, &c.API.SignInLinkTTL) },
				"session_ttl":          func(v *yaml.Node, path string) { w.duration(v, path, &c.API.SessionTTL) },
				"sign_ins_per_account": func(v *yaml.Node, path string) { w.rate(v, path, &c.API.SignInsPerAccount) },

				// The operator listener, the Host check, and what one client may hold.
				"metrics_listen":              func(v *yaml.Node, path string) { w.str(v, path, &c.API.MetricsListen) },
				"allowed_hosts":               func(v *yaml.Node, path string) { w.strs(v, path, &c.API.AllowedHosts) },
				"health_connections":          func(v *yaml.Node, path string) { w.integer(v, path, &c.API.HTTP.HealthConnections) },
				"max_connections_per_token":   func(v *yaml.Node, path string) { w.integer(v, path, &c.API.HTTP.MaxConnectionsPerToken) },
				"max_connections_per_account": func(v *yaml.Node, path string) { w.integer(v, path, &c.API.HTTP.MaxConnectionsPerAccount) },
				"max_requests_per_token":      func(v *yaml.Node, path string) { w.integer(v, path, &c.API.HTTP.MaxRequestsPerToken) },
				"max_requests_per_account":    func(v *yaml.Node, path string) { w.integer(v, path, &c.API.HTTP.MaxRequestsPerAccount) },

				"tokens": func(v *yaml.Node, path string) {
					c.API.Tokens = []Token{}
					w.list(v, path, func(v *yaml.Node, path string) {
						var t Token
						w.object(v, path, fields{
							"scope": func(v *yaml.Node, path string) { w.str(v, path, &t.Scope) },
							"token": func(v *yaml.Node, path string) { w.str(v, path, &t.Token) },
						})
						c.API.Tokens = append(c.API.Tokens, t)
					})
				},
			})
		},
		"aws": func(v *yaml.Node, path string) {
			w.object(v, path, fields{
				"region": func(v *yaml.Node, path string) { w.str(v, path, &c.AWS.Region) },
				"endpoints": func(v *yaml.Node, path string) {
					w.stringMap(v, path, []string{"sts", "events", "kinesis"}, c.AWS.Endpoints)
				},
				"sts_budget": func(v *yaml.Node, path string) {
					w.object(v, path, fields{
						"per_destination": func(v *yaml.Node, path string) { w.rate(v, path, &c.AWS.STSBudget.PerDestination) },
						"per_account":     func(v *yaml.Node, path string) { w.rate(v, path, &c.AWS.STSBudget.PerAccount) },
					})
				},
				"session_backoff": func(v *yaml.Node, path string) {
					w.object(v, path, fields{
						"initial": func(v *yaml.Node, path string) { w.duration(v, path, &c.AWS.SessionBackoff.Initial) },
						"max":     func(v *yaml.Node, path string) { w.duration(v, path, &c.AWS.SessionBackoff.Max) },
					})
				},
			})
		},
		"gcp": func(v *yaml.Node, path string) {
			w.object(v, path, fields{
				"pubsub_endpoint": func(v *yaml.Node, path string) { w.str(v, path, &c.GCP.PubSubEndpoint) },
			})
		},
		"tracing": func(v *yaml.Node, path string) {
			w.object(v, path, fields{
				"otlp_endpoint": func(v *yaml.Node, path string) { w.str(v, path, &c.Tracing.OTLPEndpoint) },
				"service_name":  func(v *yaml.Node, path string) { w.str(v, path, &c.Tracing.ServiceName) },
				"sample_ratio":  func(v *yaml.Node, path string) { w.ratio(v, path, &c.Tracing.SampleRatio) },
			})
		},
		"delivery": func(v *yaml.Node, path string) {
			d := &c.Delivery
			w.object(v, path, fields{
				"not_taken_backoff": func(v *yaml.Node, path string) {
					w.object(v, path, fields{
						"initial": func(v *yaml.Node, path string) { w.duration(v, path, &d.NotTakenBackoff.Initial) },
						"max":     func(v *yaml.Node, path string) { w.duration(v, path, &d.NotTakenBackoff.Max) },
					})
				},
				"setup_check": func(v *yaml.Node, path string) {
					w.object(v, path, fields{
						"initial": func(v *yaml.Node, path string) { w.duration(v, path, &d.SetupCheck.Initial) },
						"max":     func(v *yaml.Node, path string) { w.duration(v, path, &d.SetupCheck.Max) },
					})
				},
				"max_message_age": func(v *yaml.Node, path string) { w.duration(v, path, &d.MaxMessageAge) },
				"disable_after":   func(v *yaml.Node, path string) { w.integer(v, path, &d.DisableAfter) },
				"warn_after": func(v *yaml.Node, path string) {
					d.WarnAfter = []int{}
					w.list(v, path, func(v *yaml.Node, path string) {
						var n int
						w.integer(v, path, &n)
						d.WarnAfter = append(d.WarnAfter, n)
					})
				},
				"lease_ttl":                func(v *yaml.Node, path string) { w.duration(v, path, &d.LeaseTTL) },
				"channel_retention":        func(v *yaml.Node, path string) { w.duration(v, path, &d.ChannelRetention) },
				"label_recheck":            func(v *yaml.Node, path string) { w.duration(v, path, &d.LabelRecheck) },
				"attempts_retention":       func(v *yaml.Node, path string) { w.duration(v, path, &d.AttemptsRetention) },
				"replay_window":            func(v *yaml.Node, path string) { w.duration(v, path, &d.ReplayWindow) },
				"channel_max_events":       func(v *yaml.Node, path string) { w.integer(v, path, &d.ChannelMaxEvents) },
				"attempts_max":             func(v *yaml.Node, path string) { w.integer(v, path, &d.AttemptsMax) },
				"operator_events_exchange": func(v *yaml.Node, path string) { w.str(v, path, &d.OperatorEventsExchange) },
				"commit_wait":              func(v *yaml.Node, path string) { w.duration(v, path, &d.CommitWait) },
				"uncommitted_max":          func(v *yaml.Node, path string) { w.integer(v, path, &d.UncommittedMax) },
				"in_flight":                func(v *yaml.Node, path string) { w.integer(v, path, &d.InFlight) },
			})
		},
		"accounts": func(v *yaml.Node, path string) {
			w.list(v, path, func(v *yaml.Node, path string) {
				var a Account
				w.object(v, path, fields{
					"id":            func(v *yaml.Node, path string) { w.str(v, path, &a.ID) },
					"tenants":       func(v *yaml.Node, path string) { w.strs(v, path, &a.Tenants) },
					"sources":       func(v *yaml.Node, path string) { w.strs(v, path, &a.Sources) },
					"store_id_path": func(v *yaml.Node, path string) { w.str(v, path, &a.StoreIDPath) },
				})
				c.Accounts = append(c.Accounts, a)
			})
		},
		"destinations": func(v *yaml.Node, path string) {
			w.list(v, path, func(v *yaml.Node, path string) {
				var d destination.Destination
				var connector string
				w.object(v, path, fields{
					"id":          func(v *yaml.Node, path string) { w.str(v, path, &d.ID) },
					"account":     func(v *yaml.Node, path string) { w.str(v, path, &d.Account) },
					"connector":   func(v *yaml.Node, path string) { w.str(v, path, &connector) },
					"bus_arn":     func(v *yaml.Node, path string) { w.str(v, path, &d.BusARN) },
					"stream_arn":  func(v *yaml.Node, path string) { w.str(v, path, &d.StreamARN) },
					"role_arn":    func(v *yaml.Node, path string) { w.str(v, path, &d.RoleARN) },
					"kms_key_arn": func(v *yaml.Node, path string) { w.str(v, path, &d.KMSKeyARN) },
					"project_id":  func(v *yaml.Node, path string) { w.str(v, path, &d.ProjectID) },
					"topic_id":    func(v *yaml.Node, path string) { w.str(v, path, &d.TopicID) },
					"events":      func(v *yaml.Node, path string) { w.strs(v, path, &d.Events) },
					"external_id": func(v *yaml.Node, path string) { w.str(v, path, &d.PinnedExternalID) },
					// 0 or left out: delivery.in_flight, and no cap (Destination.Validate).
					"in_flight": func(v *yaml.Node, path string) { w.integer(v, path, &d.InFlight) },
					"max_rate":  func(v *yaml.Node, path string) { w.number(v, path, &d.MaxRate) },
				})
				d.Connector = destination.Connector(connector)
				c.Destinations = append(c.Destinations, d)
			})
		},
	})
}
