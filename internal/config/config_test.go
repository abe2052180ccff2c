package config

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/destination"
)

const (
	hexKey     = "f4ab532dc6dcf763bf8139e75e9bef6d8af5c329ce3e03ba05fd39ff729f6ffa"
	rabbitURL  = "amqp://relay:rabbit-s3cret@rabbit.internal:5672/prod"
	redisURL   = "redis://:redis-s3cret@redis.internal:6379/0"
	adminToken = "admin-token-s3cret"
	acctToken  = "acct-token-s3cret"
)

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func exampleEnv() map[string]string {
	return map[string]string{
		"RELAY_RABBITMQ_URL":        rabbitURL,
		"RELAY_REDIS_URL":           redisURL,
		"FETCHER_EXTERNAL_HMAC_KEY": hexKey,
		"RELAY_ADMIN_TOKEN":         adminToken,
	}
}

// secretsIn serves file: references under /run/secrets/ from dir, the way a container
// would mount them.
func secretsIn(dir string) func(string) ([]byte, error) {
	return func(path string) ([]byte, error) {
		if rest, ok := strings.CutPrefix(path, "/run/secrets/"); ok {
			return os.ReadFile(filepath.Join(dir, rest))
		}
		return os.ReadFile(path)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func problemsOf(t *testing.T, err error) Problems {
	t.Helper()
	var ps Problems
	if !errors.As(err, &ps) {
		t.Fatalf("error %v (%T) is not Problems", err, err)
	}
	return ps
}

func TestExampleFromTheContractParses(t *testing.T) {
	data, err := os.ReadFile("testdata/example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "acct_123"), acctToken+"\n")

	c, err := Parse(data, env(exampleEnv()), secretsIn(dir))
	if err != nil {
		t.Fatalf("Parse(example) = %v", err)
	}

	key, _ := hex.DecodeString(hexKey)
	want := &Config{
		Identity: destination.Identity{Name: "mercamap", AWSPrincipalARN: "arn:aws:iam::999999999999:role/relay-delivery", GCPServiceAccount: "relay@relay-prod.iam.gserviceaccount.com"},
		RabbitMQ: RabbitMQ{URLs: []string{rabbitURL}, Exchange: "fetcher.job.events", Queue: "relay.job-events", RoutingKeys: []string{"job.completed", "job.failed"}, Partitions: 1,
			Prefetch: 256, QuarantineExchange: "relay.job-events.quarantine", QuarantineQueue: "relay.job-events.quarantine",
			Quarantine: Quarantine{MaxBytes: 256 << 20, MaxMessages: 10_000, MaxBodyBytes: 64 << 10}},
		Redis:       Redis{URL: redisURL},
		Signature:   Signature{Keys: [][]byte{key}, MaxAge: 72 * time.Hour, MaxFuture: 5 * time.Minute},
		DedupWindow: 168 * time.Hour,
		API: API{Listen: "127.0.0.1:8080", MetricsListen: "127.0.0.1:9090", AllowedHosts: []string{}, Tokens: []Token{{Scope: "admin", Token: adminToken}, {Scope: "account:acct_123", Token: acctToken}},
			HTTP: HTTPLimits{ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute,
				MaxBodyBytes: 65536, MaxConnections: 4096, HealthConnections: 16, MaxConnectionsPerToken: 256,
				MaxConnectionsPerAccount: 512, MaxRequestsPerToken: 64, MaxRequestsPerAccount: 128},
			SubscriptionsPerToken: 50, SubscriptionsPerAccount: 200,
			TestsPerDestination: Rate{Count: 6, Per: time.Minute}, TestsPerAccount: Rate{Count: 30, Per: time.Minute},
			ActionsPerDestination: Rate{Count: 10, Per: time.Minute}, ActionsPerAccount: Rate{Count: 60, Per: time.Minute},
			ReplaysPerDestination: Rate{Count: 5, Per: 10 * time.Minute}, ReplaysPerAccount: Rate{Count: 30, Per: 10 * time.Minute},
			DestinationsPerAccount: 1000, DestinationChangesPerAccount: Rate{Count: 120, Per: time.Minute},
			PublicURL: "https://relay.example.com", SignInLinkTTL: 5 * time.Minute, SessionTTL: 8 * time.Hour,
			SignInsPerAccount: Rate{Count: 30, Per: time.Minute}},
		AWS: AWS{Region: "us-east-1", Endpoints: map[string]string{},
			STSBudget:      STSBudget{PerDestination: Rate{Count: 6, Per: time.Minute}, PerAccount: Rate{Count: 60, Per: time.Minute}},
			SessionBackoff: Backoff{Initial: time.Second, Max: 2 * time.Minute}},
		Delivery: Delivery{NotTakenBackoff: Backoff{Initial: time.Second, Max: 5 * time.Minute}, SetupCheck: Backoff{Initial: time.Minute, Max: 15 * time.Minute}, MaxMessageAge: 72 * time.Hour, DisableAfter: 20,
			WarnAfter: []int{5, 15}, LeaseTTL: 15 * time.Second, ChannelRetention: 168 * time.Hour, LabelRecheck: 15 * time.Minute, AttemptsRetention: 720 * time.Hour,
			ChannelMaxEvents: 500, AttemptsMax: 2500, OperatorEventsExchange: "relay.operator.events",
			CommitWait: 5 * time.Millisecond, UncommittedMax: 32, InFlight: 16},
		Accounts: []Account{{ID: "acct_123", Tenants: []string{"single-tenant"}, Sources: []string{}, StoreIDPath: "metadata.store_id"}},
		Destinations: []destination.Destination{
			{ID: "orders-bus", Account: "acct_123", Connector: destination.EventBridge,
				BusARN: "arn:aws:events:us-east-1:111122223333:event-bus/orders", RoleARN: "arn:aws:iam::111122223333:role/mercamap-delivery", Events: []string{"job.completed"}},
			{ID: "orders-stream", Account: "acct_123", Connector: destination.Kinesis,
				StreamARN: "arn:aws:kinesis:eu-west-1:111122223333:stream/orders", RoleARN: "arn:aws:iam::111122223333:role/mercamap-delivery",
				KMSKeyARN: "arn:aws:kms:eu-west-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"},
			{ID: "orders-topic", Account: "acct_123", Connector: destination.PubSub, ProjectID: "acme-prod", TopicID: "relay-events"},
		},
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("Parse(example) =\n%#v\nwant\n%#v", *c, *want)
		for _, f := range []string{"Identity", "RabbitMQ", "Redis", "Signature", "API", "AWS", "GCP", "Delivery", "Accounts", "Destinations"} {
			g, w := reflect.ValueOf(*c).FieldByName(f).Interface(), reflect.ValueOf(*want).FieldByName(f).Interface()
			if !reflect.DeepEqual(g, w) {
				t.Errorf("%s differs:\n got %+v\nwant %+v", f, g, w)
			}
		}
	}
	if got := c.AccountsFor("single-tenant", "//lerian.fetcher/worker"); !slices.Equal(got, []string{"acct_123"}) {
		t.Errorf("AccountsFor = %v", got)
	}
}

func TestLoad(t *testing.T) {
	data, err := os.ReadFile("testdata/example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "acct_123")
	writeFile(t, tokenFile, acctToken+"\n\n")
	path := filepath.Join(dir, "relay.yaml")
	writeFile(t, path, strings.Replace(string(data), "file:/run/secrets/acct_123", "file:"+tokenFile, 1))

	c, err := Load(path, env(exampleEnv()))
	if err != nil {
		t.Fatalf("Load = %v", err)
	}
	if c.API.Tokens[1].Token != acctToken {
		t.Errorf("file: token = %q, want the file's content without trailing newlines", c.API.Tokens[1].Token)
	}

	_, err = Load(filepath.Join(dir, "missing.yaml"), env(nil))
	var ps Problems
	if err == nil || errors.As(err, &ps) {
		t.Errorf("Load(missing file) = %v, want a plain read error", err)
	}
}

// minimal is the smallest valid file: everything else takes its default.
const minimal = `
rabbitmq: {url: "amqp://guest:guest@localhost:5672/", exchange: fetcher.job.events}
redis: {url: "redis://localhost:6379/0"}
signature: {keys: [` + hexKey + `]}
`

func TestDefaultsApply(t *testing.T) {
	c, err := Parse([]byte(minimal), env(nil), nil)
	if err != nil {
		t.Fatalf("Parse(minimal) = %v", err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"identity.name", c.Identity.Name, "mercamap"},
		{"rabbitmq.queue", c.RabbitMQ.Queue, "relay.job-events"},
		{"rabbitmq.routing_keys", c.RabbitMQ.RoutingKeys, []string{"job.completed", "job.failed"}},
		{"rabbitmq.prefetch", c.RabbitMQ.Prefetch, 256},
		{"rabbitmq.partitions", c.RabbitMQ.Partitions, 1},
		{"rabbitmq.url as its one URL", c.RabbitMQ.URLs, []string{"amqp://guest:guest@localhost:5672/"}},
		{"rabbitmq.quarantine_exchange", c.RabbitMQ.QuarantineExchange, "relay.job-events.quarantine"},
		{"rabbitmq.quarantine_queue", c.RabbitMQ.QuarantineQueue, "relay.job-events.quarantine"},
		{"rabbitmq.quarantine", c.RabbitMQ.Quarantine, Quarantine{MaxBytes: 256 << 20, MaxMessages: 10_000, MaxBodyBytes: 64 << 10}},
		{"signature.max_age", c.Signature.MaxAge, 72 * time.Hour},
		{"signature.max_future", c.Signature.MaxFuture, 5 * time.Minute},
		{"dedup_window", c.DedupWindow, 168 * time.Hour},
		{"api.listen", c.API.Listen, "127.0.0.1:8080"},
		{"aws.region", c.AWS.Region, "us-east-1"},
		{"delivery.not_taken_backoff", c.Delivery.NotTakenBackoff, Backoff{time.Second, 5 * time.Minute}},
		{"delivery.setup_check", c.Delivery.SetupCheck, Backoff{time.Minute, 15 * time.Minute}},
		{"delivery.max_message_age", c.Delivery.MaxMessageAge, 72 * time.Hour},
		{"delivery.disable_after", c.Delivery.DisableAfter, 20},
		{"delivery.lease_ttl", c.Delivery.LeaseTTL, 15 * time.Second},
		{"delivery.channel_retention", c.Delivery.ChannelRetention, 168 * time.Hour},
		{"delivery.label_recheck", c.Delivery.LabelRecheck, 15 * time.Minute},
		{"delivery.attempts_retention", c.Delivery.AttemptsRetention, 720 * time.Hour},
		{"delivery.operator_events_exchange", c.Delivery.OperatorEventsExchange, "relay.operator.events"},
		{"delivery.in_flight", c.Delivery.InFlight, 16},
	}
	for _, ch := range checks {
		if !reflect.DeepEqual(ch.got, ch.want) {
			t.Errorf("%s = %v, want %v", ch.name, ch.got, ch.want)
		}
	}

	// A queue of our own moves the quarantine defaults with it; a partial mapping keeps
	// the other defaults of that mapping.
	c, err = Parse([]byte(minimal+"delivery: {not_taken_backoff: {initial: 2s}, disable_after: 3}\n"+
		"accounts: [{id: a1, tenants: [t1]}]\n"), env(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Delivery.NotTakenBackoff != (Backoff{2 * time.Second, 5 * time.Minute}) || c.Delivery.DisableAfter != 3 || c.Delivery.LeaseTTL != 15*time.Second {
		t.Errorf("partial delivery = %+v", c.Delivery)
	}
	if got := c.Accounts[0].StoreIDPaths(); !slices.Equal(got, []string{"metadata.store_id", "metadata.storeId"}) {
		t.Errorf("default store id paths = %v", got)
	}
	c, err = Parse([]byte(strings.Replace(minimal, "exchange: fetcher.job.events", "exchange: x, queue: mine", 1)), env(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.RabbitMQ.QuarantineExchange != "mine.quarantine" || c.RabbitMQ.QuarantineQueue != "mine.quarantine" {
		t.Errorf("quarantine names = %q, %q", c.RabbitMQ.QuarantineExchange, c.RabbitMQ.QuarantineQueue)
	}

	// The flat quarantine names of older files stay valid beside the quarantine block; a
	// partial block keeps the other bounds' defaults.
	c, err = Parse([]byte(strings.Replace(minimal, "exchange: fetcher.job.events",
		"exchange: x, quarantine_exchange: qx, quarantine_queue: qq, quarantine: {max_messages: 500}", 1)), env(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.RabbitMQ.QuarantineExchange != "qx" || c.RabbitMQ.QuarantineQueue != "qq" ||
		c.RabbitMQ.Quarantine != (Quarantine{MaxBytes: 256 << 20, MaxMessages: 500, MaxBodyBytes: 64 << 10}) {
		t.Errorf("quarantine = %q, %q, %+v", c.RabbitMQ.QuarantineExchange, c.RabbitMQ.QuarantineQueue, c.RabbitMQ.Quarantine)
	}
}

func TestRabbitMQURLsListEveryNodeAndPartitionsAreRead(t *testing.T) {
	file := strings.Replace(minimal, `url: "amqp://guest:guest@localhost:5672/"`,
		`urls: ["amqp://guest:guest@n1:5672/", env:RMQ2, "amqp://guest:guest@n3:5672/"], partitions: 3`, 1)
	c, err := Parse([]byte(file), env(map[string]string{"RMQ2": "amqp://relay:rabbit-s3cret@n2:5672/"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"amqp://guest:guest@n1:5672/", "amqp://relay:rabbit-s3cret@n2:5672/", "amqp://guest:guest@n3:5672/"}
	if !slices.Equal(c.RabbitMQ.URLs, want) || c.RabbitMQ.Partitions != 3 {
		t.Errorf("urls = %v, partitions = %d", c.RabbitMQ.URLs, c.RabbitMQ.Partitions)
	}
	if s := fmt.Sprintf("%v %#v", c.RabbitMQ, c.RabbitMQ); strings.Contains(s, "s3cret") || strings.Contains(s, "guest") {
		t.Errorf("the printed config shows a URL: %s", s)
	}
}

// doc builds a file from the minimal one's sections, with some replaced or added.
func doc(sections map[string]string) string {
	base := map[string]string{
		"identity":  "identity: {aws_principal_arn: \"arn:aws:iam::999999999999:role/relay-delivery\", gcp_service_account: relay@relay-prod.iam.gserviceaccount.com}",
		"rabbitmq":  `rabbitmq: {url: "amqp://guest:guest@localhost:5672/", exchange: fetcher.job.events}`,
		"redis":     `redis: {url: "redis://localhost:6379/0"}`,
		"signature": "signature: {keys: [" + hexKey + "]}",
		"accounts":  "accounts: [{id: acct_123, tenants: [single-tenant]}, {id: acct_456, tenants: [t2]}]",
		"destinations": `destinations:
  - {id: orders-bus, account: acct_123, connector: eventbridge, bus_arn: "arn:aws:events:us-east-1:111122223333:event-bus/orders", role_arn: "arn:aws:iam::111122223333:role/mercamap-delivery"}
  - {id: orders-topic, account: acct_123, connector: pubsub, project_id: acme-prod, topic_id: relay-events}`,
	}
	order := []string{"identity", "rabbitmq", "redis", "signature", "dedup_window", "api", "aws", "gcp", "delivery", "accounts", "destinations", "extra"}
	var b strings.Builder
	for _, k := range order {
		v, ok := sections[k]
		if !ok {
			v = base[k]
		}
		if v != "" {
			b.WriteString(v + "\n")
		}
	}
	return b.String()
}

func TestBaseDocIsValid(t *testing.T) {
	if _, err := Parse([]byte(doc(nil)), env(nil), nil); err != nil {
		t.Fatalf("the tests' base file has problems:\n%v", err)
	}
}

func TestRedisClusterIsConfiguredBySeedNodesOrByAClusterURL(t *testing.T) {
	for _, tc := range []struct {
		redis string
		want  Redis
	}{
		{`redis: {cluster: ["redis-0:6379", "redis-1:6379"], min_replicas: 1}`,
			Redis{Cluster: []string{"redis-0:6379", "redis-1:6379"}, MinReplicas: 1}},
		{`redis: {url: "rediss://:pw@h1:6379?addr=h2:6379&addr=h3:6379"}`,
			Redis{URL: "rediss://:pw@h1:6379?addr=h2:6379&addr=h3:6379"}},
	} {
		c, err := Parse([]byte(doc(map[string]string{"redis": tc.redis})), env(nil), nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.redis, err)
		}
		if !reflect.DeepEqual(c.Redis, tc.want) {
			t.Errorf("%s: Redis = %v, want %v", tc.redis, c.Redis, tc.want)
		}
	}
}

func TestEachProblemIsReportedAtItsPath(t *testing.T) {
	tests := []struct {
		name     string
		sections map[string]string
		env      map[string]string
		path     string
		says     string
	}{
		{"read_timeout shorter than read_header_timeout", map[string]string{"api": "api: {read_header_timeout: 20s, read_timeout: 5s}"}, nil,
			"api.read_timeout", "shorter than api.read_header_timeout"},
		{"max_connections too small", map[string]string{"api": "api: {max_connections: 3}"}, nil,
			"api.max_connections", "must be at least 16"},
		{"max_body_bytes not a number", map[string]string{"api": "api: {max_body_bytes: lots}"}, nil,
			"api.max_body_bytes", "must be a whole number"},
		{"subscriptions_per_account below per token", map[string]string{"api": "api: {subscriptions_per_token: 10, subscriptions_per_account: 5}"}, nil,
			"api.subscriptions_per_account", "fewer than api.subscriptions_per_token"},
		{"subscriptions_per_account not below max_connections", map[string]string{"api": "api: {max_connections: 100, subscriptions_per_account: 100}"}, nil,
			"api.subscriptions_per_account", "must be fewer than api.max_connections"},
		{"metrics_listen empty", map[string]string{"api": `api: {metrics_listen: ""}`}, nil,
			"api.metrics_listen", "is required"},
		{"metrics_listen on the API's address", map[string]string{"api": "api: {listen: \":8080\", metrics_listen: \"127.0.0.1:8080\"}"}, nil,
			"api.metrics_listen", "must not be on the API's listener"},
		{"allowed_hosts with a scheme", map[string]string{"api": "api: {allowed_hosts: [relay, \"http://relay.example.com\"]}"}, nil,
			"api.allowed_hosts[1]", "must be a host name"},
		{"max_connections_per_account not below max_connections", map[string]string{"api": "api: {max_connections: 520}"}, nil,
			"api.max_connections_per_account", "one account must not hold every connection"},
		{"max_connections_per_token above per account", map[string]string{"api": "api: {max_connections_per_token: 600}"}, nil,
			"api.max_connections_per_account", "fewer than api.max_connections_per_token"},
		{"max_requests_per_token of zero", map[string]string{"api": "api: {max_requests_per_token: 0}"}, nil,
			"api.max_requests_per_token", "at least 1"},
		{"health_connections of zero", map[string]string{"api": "api: {health_connections: 0}"}, nil,
			"api.health_connections", "the places kept for the probes"},
		{"public_url without a scheme", map[string]string{"api": "api: {public_url: relay.example.com}"}, nil,
			"api.public_url", "must be an http:// or https:// URL"},
		{"public_url with a fragment", map[string]string{"api": `api: {public_url: "https://relay.example.com/#x"}`}, nil,
			"api.public_url", "no query or fragment"},
		{"public_url with a password", map[string]string{"api": `api: {public_url: "https://ops:hunter2@relay.example.com"}`}, nil,
			"api.public_url", "with no user"},
		{"sign_in_link_ttl of a day", map[string]string{"api": "api: {sign_in_link_ttl: 24h}"}, nil,
			"api.sign_in_link_ttl", "must be from 10s to 1h0m0s"},
		{"session_ttl of a minute", map[string]string{"api": "api: {session_ttl: 1m}"}, nil,
			"api.session_ttl", "must be from 5m0s to 168h0m0s"},
		{"session_ttl of a month", map[string]string{"api": "api: {session_ttl: 720h}"}, nil,
			"api.session_ttl", "how long a console session lasts"},
		{"sign_ins_per_account of zero", map[string]string{"api": "api: {sign_ins_per_account: {count: 0, per: 1m}}"}, nil,
			"api.sign_ins_per_account.count", "at least 1"},
		{"subscriptions_per_token above its connections", map[string]string{"api": "api: {max_connections_per_token: 20}"}, nil,
			"api.subscriptions_per_token", "each subscription holds a connection"},
		{"tests_per_destination of zero", map[string]string{"api": "api: {tests_per_destination: {count: 0}}"}, nil,
			"api.tests_per_destination.count", "at least 1"},
		{"tests_per_account slower than per destination", map[string]string{"api": "api: {tests_per_destination: {count: 10, per: 1m}, tests_per_account: {count: 2, per: 1m}}"}, nil,
			"api.tests_per_account", "no destination could reach its own rate"},
		{"sts budget too small for a probe and a session", map[string]string{"aws": "aws: {sts_budget: {per_destination: {count: 1, per: 1m}}}"}, nil,
			"aws.sts_budget.per_destination.count", "at least 2 calls"},
		{"sts budget per account below per destination", map[string]string{"aws": "aws: {sts_budget: {per_destination: {count: 6, per: 1m}, per_account: {count: 6, per: 1h}}}"}, nil,
			"aws.sts_budget.per_account", "no destination could reach its own rate"},
		{"session backoff max below initial", map[string]string{"aws": "aws: {session_backoff: {initial: 10s, max: 1s}}"}, nil,
			"aws.session_backoff.max", "shorter than initial"},
		{"replays_per_account slower than per destination", map[string]string{"api": "api: {replays_per_destination: {count: 5, per: 1m}, replays_per_account: {count: 1, per: 1m}}"}, nil,
			"api.replays_per_account", "no destination could reach its own rate"},
		{"actions_per_destination of no action", map[string]string{"api": "api: {actions_per_destination: {count: 0, per: 1m}}"}, nil,
			"api.actions_per_destination.count", "must be at least 1 action"},
		{"channel_max_events too small", map[string]string{"delivery": "delivery: {channel_max_events: 10}"}, nil,
			"delivery.channel_max_events", "must be at least 500 events"},
		{"tests rate with an unknown key", map[string]string{"api": "api: {tests_per_account: {count: 40, every: 1m}}"}, nil,
			"api.tests_per_account.every", "unknown key"},
		{"unknown top-level key", map[string]string{"extra": "destinatons: []"}, nil,
			"destinatons", `unknown key "destinatons": did you mean "destinations"?`},
		{"unknown key far from any", map[string]string{"extra": "zzzzzzzz: 1"}, nil,
			"zzzzzzzz", "known keys here are accounts, api, aws"},
		{"unknown nested key", map[string]string{"rabbitmq": `rabbitmq: {url: "amqp://h/", urll: x, exchange: e}`}, nil,
			"rabbitmq.urll", `unknown key "urll": did you mean "url"?`},
		{"unknown destination key", map[string]string{"destinations": "destinations: [{id: d, account: acct_123, connector: pubsub, project_id: acme-prod, topic_id: relay-events, topic: x}]"}, nil,
			"destinations[0].topic", "unknown key"},
		{"key written twice", map[string]string{"redis": "redis:\n  url: redis://a/\n  url: redis://b/"}, nil,
			"redis.url", "written twice"},
		{"unknown connector", map[string]string{"destinations": "destinations: [{id: d, account: acct_123, connector: sqs}]"}, nil,
			"destinations[0].connector", `unknown connector "sqs": use eventbridge, kinesis or pubsub`},
		{"duplicate destination id across connectors", map[string]string{"destinations": `destinations:
  - {id: orders, account: acct_123, connector: pubsub, project_id: acme-prod, topic_id: relay-events}
  - {id: orders, account: acct_123, connector: kinesis, stream_arn: "arn:aws:kinesis:eu-west-1:111122223333:stream/orders", role_arn: "arn:aws:iam::111122223333:role/r"}`}, nil,
			"destinations[1].id", "destination orders is already defined at destinations[0]"},
		{"destination without id", map[string]string{"destinations": "destinations: [{account: acct_123, connector: pubsub, project_id: acme-prod, topic_id: relay-events}]"}, nil,
			"destinations[0].id", "is required"},
		{"destination id with a brace", map[string]string{"destinations": "destinations: [{id: \"a}b\", account: acct_123, connector: pubsub, project_id: acme-prod, topic_id: relay-events}]"}, nil,
			"destinations[0].id", "may only hold letters, digits"},
		{"destination of unknown account", map[string]string{"destinations": "destinations: [{id: d, account: acct_999, connector: pubsub, project_id: acme-prod, topic_id: relay-events}]"}, nil,
			"destinations[0].account", "account acct_999 is not in accounts"},
		{"pubsub account that cannot be a label", map[string]string{
			"accounts":     "accounts: [{id: Acct_123, tenants: [t]}]",
			"destinations": "destinations: [{id: d, account: Acct_123, connector: pubsub, project_id: acme-prod, topic_id: relay-events}]"}, nil,
			"destinations[0].account", "cannot be a Google Cloud label value"},
		{"destination target problem", map[string]string{"destinations": `destinations: [{id: d, account: acct_123, connector: eventbridge, bus_arn: "arn:aws-us-gov:events:us-gov-west-1:111122223333:event-bus/orders", role_arn: "arn:aws:iam::111122223333:role/r"}]`}, nil,
			"destinations[0].bus_arn", "partition aws-us-gov is not supported: only the aws partition (GovCloud and China regions are refused)"},
		{"bus in another account", map[string]string{"destinations": `destinations: [{id: d, account: acct_123, connector: eventbridge, bus_arn: "arn:aws:events:us-east-1:444455556666:event-bus/orders", role_arn: "arn:aws:iam::111122223333:role/r"}]`}, nil,
			"destinations[0].bus_arn", "is in AWS account 444455556666 but the role is in account 111122223333"},
		{"event filter outside the routing keys", map[string]string{"destinations": "destinations: [{id: d, account: acct_123, connector: pubsub, project_id: acme-prod, topic_id: relay-events, events: [job.complete]}]"}, nil,
			"destinations[0].events[0]", "job.complete is not one of rabbitmq.routing_keys (job.completed, job.failed)"},
		{"rabbitmq.url missing", map[string]string{"rabbitmq": "rabbitmq: {exchange: e}"}, nil,
			"rabbitmq.url", "is required"},
		{"rabbitmq.exchange missing", map[string]string{"rabbitmq": `rabbitmq: {url: "amqp://h/"}`}, nil,
			"rabbitmq.exchange", "is required"},
		{"redis.url missing", map[string]string{"redis": ""}, nil,
			"redis.url", "is required"},
		{"redis.cluster address without a port", map[string]string{"redis": `redis: {cluster: ["redis-0:6379", "redis-1"]}`}, nil,
			"redis.cluster[1]", "must be host:port"},
		{"redis cluster url naming a database", map[string]string{"redis": `redis: {url: "redis://h1:6379/2?addr=h2:6379"}`}, nil,
			"redis.url", "Redis Cluster has only database 0"},
		{"redis.min_replicas negative", map[string]string{"redis": `redis: {url: "redis://h:6379/0", min_replicas: -1}`}, nil,
			"redis.min_replicas", "must be between 0 and 5"},
		{"no signature key", map[string]string{"signature": "signature: {max_age: 1h}", "dedup_window": "dedup_window: 2h"}, nil,
			"signature.keys", "at least one key is required"},
		{"principal missing with an AWS destination", map[string]string{"identity": "identity: {gcp_service_account: relay@relay-prod.iam.gserviceaccount.com}"}, nil,
			"identity.aws_principal_arn", "is required when an eventbridge or kinesis destination is configured"},
		{"principal in China", map[string]string{"identity": `identity: {aws_principal_arn: "arn:aws-cn:iam::999999999999:role/r", gcp_service_account: a@b.iam.gserviceaccount.com}`}, nil,
			"identity.aws_principal_arn", "partition aws-cn is not supported"},
		{"principal not IAM", map[string]string{"identity": `identity: {aws_principal_arn: "arn:aws:s3:::bucket", gcp_service_account: a@b.iam.gserviceaccount.com}`}, nil,
			"identity.aws_principal_arn", "s3 service"},
		{"service account missing with a pubsub destination", map[string]string{"identity": `identity: {aws_principal_arn: "arn:aws:iam::999999999999:role/r"}`}, nil,
			"identity.gcp_service_account", "is required when a pubsub destination is configured"},
		{"bad identity name", map[string]string{"identity": `identity: {name: "Merca Map", aws_principal_arn: "arn:aws:iam::999999999999:role/r", gcp_service_account: a@b.iam.gserviceaccount.com}`}, nil,
			"identity.name", "must be lowercase letters"},
		{"short hex key", map[string]string{"signature": "signature: {keys: [abcd]}"}, nil,
			"signature.keys[0]", "decodes to 2 bytes: a key is 64 hexadecimal characters (32 bytes)"},
		{"non-hex key", map[string]string{"signature": "signature: {keys: [" + strings.Repeat("zz", 32) + "]}"}, nil,
			"signature.keys[0]", "is not hexadecimal"},
		{"second key bad", map[string]string{"signature": "signature: {keys: [" + hexKey + ", " + hexKey + "00]}"}, nil,
			"signature.keys[1]", "decodes to 33 bytes"},
		{"master key not base64", map[string]string{"signature": "signature: {master_key: env:APP_ENC_KEY}"}, map[string]string{"APP_ENC_KEY": "not base64!"},
			"signature.master_key", "is not standard base64"},
		{"duplicate account id", map[string]string{"accounts": "accounts: [{id: acct_123, tenants: [a]}, {id: acct_123, tenants: [b]}]"}, nil,
			"accounts[1].id", "account acct_123 is already defined at accounts[0]"},
		{"account without tenants", map[string]string{"accounts": "accounts: [{id: acct_123}]"}, nil,
			"accounts[0].tenants", "must list at least one producer tenant"},
		{"account with empty tenant list", map[string]string{"accounts": "accounts: [{id: acct_123, tenants: []}]"}, nil,
			"accounts[0].tenants", "must list at least one producer tenant"},
		{"account without id", map[string]string{"accounts": "accounts: [{id: acct_123, tenants: [a]}, {tenants: [b]}]"}, nil,
			"accounts[1].id", "is required"},
		{"duration without unit", map[string]string{"signature": "signature: {keys: [" + hexKey + "], max_age: 72}"}, nil,
			"signature.max_age", `"72" is not a duration: write it like 72h, 5m or 1s`},
		{"duration as a list", map[string]string{"delivery": "delivery: {lease_ttl: [1s]}"}, nil,
			"delivery.lease_ttl", "must be a duration like 72h"},
		{"zero duration", map[string]string{"delivery": "delivery: {lease_ttl: 0s}"}, nil,
			"delivery.lease_ttl", "must be longer than zero"},
		{"negative duration", map[string]string{"delivery": "delivery: {not_taken_backoff: {initial: -1s}}"}, nil,
			"delivery.not_taken_backoff.initial", "must be longer than zero"},
		{"backoff max below initial", map[string]string{"delivery": "delivery: {not_taken_backoff: {initial: 10m, max: 1m}}"}, nil,
			"delivery.not_taken_backoff.max", "is shorter than initial"},
		{"attempts kept shorter than channels", map[string]string{"delivery": "delivery: {attempts_retention: 24h}"}, nil,
			"delivery.attempts_retention", "24h0m0s is shorter than delivery.channel_retention (168h0m0s)"},
		{"disable_after zero", map[string]string{"delivery": "delivery: {disable_after: 0}"}, nil,
			"delivery.disable_after", "must be at least 1"},
		{"dedup window not longer than max age", map[string]string{"dedup_window": "dedup_window: 72h"}, nil,
			"dedup_window", "72h0m0s must be longer than signature.max_age (72h0m0s)"},
		{"empty routing keys", map[string]string{"rabbitmq": `rabbitmq: {url: "amqp://h/", exchange: e, routing_keys: []}`}, nil,
			"rabbitmq.routing_keys", "must list at least one routing key"},
		{"quarantine max_bytes too small", map[string]string{"rabbitmq": `rabbitmq: {url: "amqp://h/", exchange: e, quarantine: {max_bytes: 1000}}`}, nil,
			"rabbitmq.quarantine.max_bytes", "too small"},
		{"quarantine max_messages of zero", map[string]string{"rabbitmq": `rabbitmq: {url: "amqp://h/", exchange: e, quarantine: {max_messages: 0}}`}, nil,
			"rabbitmq.quarantine.max_messages", "too small"},
		{"quarantine body prefix above the byte bound", map[string]string{"rabbitmq": `rabbitmq: {url: "amqp://h/", exchange: e, quarantine: {max_bytes: 2097152, max_body_bytes: 4194304}}`}, nil,
			"rabbitmq.quarantine.max_body_bytes", "more than rabbitmq.quarantine.max_bytes"},
		{"quarantine with an unknown key", map[string]string{"rabbitmq": `rabbitmq: {url: "amqp://h/", exchange: e, quarantine: {max_lenght: 5}}`}, nil,
			"rabbitmq.quarantine.max_lenght", "unknown key"},
		{"quarantine max_bytes not a number", map[string]string{"rabbitmq": `rabbitmq: {url: "amqp://h/", exchange: e, quarantine: {max_bytes: 256MiB}}`}, nil,
			"rabbitmq.quarantine.max_bytes", "must be a whole number"},
		{"routing keys not a list", map[string]string{"rabbitmq": `rabbitmq: {url: "amqp://h/", exchange: e, routing_keys: job.completed}`}, nil,
			"rabbitmq.routing_keys", "must be a list"},
		{"prefetch zero", map[string]string{"rabbitmq": `rabbitmq: {url: "amqp://h/", exchange: e, prefetch: 0}`}, nil,
			"rabbitmq.prefetch", "0 is out of range: the prefetch count is between 1 and 65535"},
		{"prefetch not a number", map[string]string{"rabbitmq": `rabbitmq: {url: "amqp://h/", exchange: e, prefetch: many}`}, nil,
			"rabbitmq.prefetch", "must be a whole number"},
		{"rabbitmq url and urls", map[string]string{"rabbitmq": `rabbitmq: {url: "amqp://h/", urls: ["amqp://h2/"], exchange: e}`}, nil,
			"rabbitmq.urls", "not both"},
		{"rabbitmq urls empty", map[string]string{"rabbitmq": `rabbitmq: {urls: [], exchange: e}`}, nil,
			"rabbitmq.urls", "must list at least one URL"},
		{"rabbitmq urls names one node twice", map[string]string{"rabbitmq": `rabbitmq: {urls: ["amqp://u:p@h1:5672/", env:RMQ2, "amqp://u:p@h1:5672/"], exchange: e}`},
			map[string]string{"RMQ2": "amqp://relay:rabbit-s3cret@h2:5672/"},
			"rabbitmq.urls[2]", "names the same host and port as rabbitmq.urls[0]"},
		{"rabbitmq urls item of the wrong scheme", map[string]string{"rabbitmq": `rabbitmq: {urls: ["amqp://h1/", env:RMQ], exchange: e}`},
			map[string]string{"RMQ": "http://relay:rabbit-s3cret@host/"},
			"rabbitmq.urls[1]", "must start with amqp:// or amqps://"},
		{"rabbitmq partitions zero", map[string]string{"rabbitmq": `rabbitmq: {url: "amqp://h/", exchange: e, partitions: 0}`}, nil,
			"rabbitmq.partitions", "0 is out of range: between 1 (one queue) and 64"},
		{"rabbitmq partitions too many", map[string]string{"rabbitmq": `rabbitmq: {url: "amqp://h/", exchange: e, partitions: 65}`}, nil,
			"rabbitmq.partitions", "65 is out of range"},
		{"rabbitmq url of the wrong scheme", map[string]string{"rabbitmq": `rabbitmq: {url: env:RMQ, exchange: e}`}, map[string]string{"RMQ": "http://relay:rabbit-s3cret@host/"},
			"rabbitmq.url", "must start with amqp:// or amqps://"},
		{"redis url without host", map[string]string{"redis": `redis: {url: env:RDS}`}, map[string]string{"RDS": "redis://:redis-s3cret@/0"},
			"redis.url", "names no host"},
		{"redis url of the wrong scheme", map[string]string{"redis": `redis: {url: "amqp://u:redis-s3cret@h/"}`}, nil,
			"redis.url", "must start with redis:// or rediss://"},
		{"duplicate api token", map[string]string{"api": "api: {tokens: [{scope: admin, token: env:T1}, {scope: \"account:acct_123\", token: env:T2}]}"},
			map[string]string{"T1": adminToken, "T2": adminToken},
			"api.tokens[1].token", "is the same token as api.tokens[0]"},
		{"token scope of unknown account", map[string]string{"api": "api: {tokens: [{scope: \"account:acct_999\", token: t}]}"}, nil,
			"api.tokens[0].scope", "account acct_999 is not in accounts"},
		{"unknown token scope", map[string]string{"api": "api: {tokens: [{scope: root, token: t}]}"}, nil,
			"api.tokens[0].scope", `unknown scope "root": use admin, or account:<id>`},
		{"token missing", map[string]string{"api": "api: {tokens: [{scope: admin}]}"}, nil,
			"api.tokens[0].token", "is required"},
		{"bad listen address", map[string]string{"api": "api: {listen: localhost}"}, nil,
			"api.listen", "must be host:port"},
		{"unknown aws endpoint", map[string]string{"aws": "aws: {endpoints: {sqs: \"http://127.0.0.1:1\"}}"}, nil,
			"aws.endpoints.sqs", `unknown key "sqs"`},
		{"aws endpoint not a URL", map[string]string{"aws": "aws: {endpoints: {sts: \"127.0.0.1:1\"}}"}, nil,
			"aws.endpoints.sts", "must be an http:// or https:// URL"},
		{"aws region in GovCloud", map[string]string{"aws": "aws: {region: us-gov-west-1}"}, nil,
			"aws.region", "is a GovCloud region"},
		{"section not a mapping", map[string]string{"redis": "redis: redis://localhost/"}, nil,
			"redis", "must be a mapping of keys (cluster, min_replicas, url)"},
		{"accounts not a list", map[string]string{"accounts": "accounts: {id: acct_123}", "destinations": "", "api": ""}, nil,
			"accounts", "must be a list"},
		{"unset env var", map[string]string{"redis": "redis: {url: env:RELAY_REDIS_URL}"}, nil,
			"redis.url", "environment variable RELAY_REDIS_URL is not set"},
		{"unreadable file", map[string]string{"redis": "redis: {url: file:/nonexistent/relay/redis-url}"}, nil,
			"redis.url", "cannot read file /nonexistent/relay/redis-url: it does not exist"},
		{"not YAML", map[string]string{"extra": "\tbad: [indent"}, nil,
			"", "the file is not valid YAML"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(doc(tt.sections)), env(tt.env), nil)
			if err == nil {
				t.Fatalf("Parse = nil error, want a problem at %q", tt.path)
			}
			ps := problemsOf(t, err)
			for _, p := range ps {
				if p.Path == tt.path && strings.Contains(p.Message, tt.says) {
					return
				}
			}
			t.Errorf("problems:\n%v\nwant one at %q saying %q", err, tt.path, tt.says)
		})
	}
}

func TestEveryProblemOfAFileIsReportedAtOnce(t *testing.T) {
	file := `
rabbitmq:
  url: "amqp://guest:guest@localhost:5672/"
  exchange: fetcher.job.events
  prefetch: 0
redis: {url: "redis://localhost:6379/0"}
signature: {keys: [abcd]}
dedup_window: 1h
accounts:
  - {id: acct_123}
destinations:
  - {id: d1, account: acct_123, connector: sqs}
  - {id: d2, account: acct_404, connector: pubsub, project_id: acme-prod, topic_id: relay-events}
identity: {gcp_service_account: relay@relay-prod.iam.gserviceaccount.com}
`
	_, err := Parse([]byte(file), env(nil), nil)
	want := []string{
		"rabbitmq.prefetch",
		"signature.keys[0]",
		"dedup_window",
		"accounts[0].tenants",
		"destinations[0].connector",
		"destinations[1].account",
	}
	ps := problemsOf(t, err)
	var got []string
	for _, p := range ps {
		got = append(got, p.Path)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("problems at %v, want exactly %v:\n%v", got, want, err)
	}
	if lines := strings.Split(err.Error(), "\n"); len(lines) != len(want) || !strings.HasPrefix(lines[0], ps[0].Path+": ") {
		t.Errorf("Error() is not one \"path: message\" line per problem:\n%v", err)
	}
}

func TestSecretReferences(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "redis-url"), redisURL+"\n")
	writeFile(t, filepath.Join(dir, "key"), hexKey+"\r\n")
	writeFile(t, filepath.Join(dir, "empty"), "\n")
	file := fmt.Sprintf(`
rabbitmq: {url: env:RMQ, exchange: e}
redis: {url: "file:%s"}
signature: {keys: ["file:%s", %s]}
api: {tokens: [{scope: admin, token: literal-token-s3cret}]}
`, filepath.Join(dir, "redis-url"), filepath.Join(dir, "key"), hexKey)
	c, err := Parse([]byte(file), env(map[string]string{"RMQ": rabbitURL}), nil)
	if err != nil {
		t.Fatalf("Parse = %v", err)
	}
	key, _ := hex.DecodeString(hexKey)
	if !slices.Equal(c.RabbitMQ.URLs, []string{rabbitURL}) || c.Redis.URL != redisURL || !reflect.DeepEqual(c.Signature.Keys, [][]byte{key, key}) || c.API.Tokens[0].Token != "literal-token-s3cret" {
		t.Errorf("resolved: rabbitmq %q redis %q keys %x token %q", c.RabbitMQ.URLs, c.Redis.URL, c.Signature.Keys, c.API.Tokens[0].Token)
	}

	// Broken references: each one a problem naming the variable or the file.
	file = fmt.Sprintf(`
rabbitmq: {url: env:RMQ, exchange: e}
redis: {url: "file:%s"}
signature: {keys: ["file:%s", "env:"]}
api: {tokens: [{scope: admin, token: "file:%s"}]}
`, filepath.Join(dir, "missing"), filepath.Join(dir, "empty"), dir)
	_, err = Parse([]byte(file), env(map[string]string{"RMQ": ""}), nil)
	ps := problemsOf(t, err)
	want := Problems{
		{"rabbitmq.url", "environment variable RMQ is not set"},
		{"redis.url", "cannot read file " + filepath.Join(dir, "missing") + ": it does not exist"},
		{"signature.keys[0]", "file " + filepath.Join(dir, "empty") + " is empty"},
		{"signature.keys[1]", "env: must name an environment variable, like env:RELAY_REDIS_URL"},
		{"api.tokens[0].token", "cannot read file " + dir + ": is a directory"},
	}
	if !reflect.DeepEqual(ps, want) {
		t.Errorf("problems =\n%v\nwant\n%v", ps, want)
	}
}

// Secrets that resolve but are wrong must not appear in any problem.
func TestProblemsNeverContainSecrets(t *testing.T) {
	secrets := map[string]string{
		"RMQ":   "amqp-not-a-url rabbit-s3cret%zz",
		"RDS":   "http://u:redis-s3cret@host/",
		"KEY":   "abcdef0123456789s3cret",
		"KEY2":  "deadbeef",
		"TOK":   "token-s3cret",
		"MASTE": "master-s3cret!!",
	}
	file := `
rabbitmq: {url: env:RMQ, exchange: e}
redis: {url: env:RDS}
signature: {keys: [env:KEY, env:KEY2, "literal-key-s3cret"], master_key: env:MASTE}
api: {tokens: [{scope: admin, token: env:TOK}, {scope: root, token: env:TOK}, {scope: admin, token: [token-s3cret-in-a-list]}]}
`
	_, err := Parse([]byte(file), env(secrets), nil)
	ps := problemsOf(t, err)
	if len(ps) != 9 {
		t.Errorf("want a problem for each bad secret, got:\n%v", err)
	}
	for _, s := range []string{"s3cret", "deadbeef", "amqp-not-a-url", "abcdef"} {
		if strings.Contains(err.Error(), s) {
			t.Errorf("problems repeat a secret (%q):\n%v", s, err)
		}
	}
}

func TestStringsNeverContainSecrets(t *testing.T) {
	c, err := Parse([]byte(minimal+"api: {tokens: [{scope: admin, token: "+adminToken+"}]}\n"), env(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	c.RabbitMQ.URLs, c.Redis.URL = []string{rabbitURL, rabbitURL}, redisURL
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		out := fmt.Sprintf(verb, *c) + fmt.Sprintf(verb, c.API.Tokens) + fmt.Sprintf(verb, c.Signature)
		for _, secret := range []string{"s3cret", hexKey[:16], "guest"} {
			if strings.Contains(out, secret) {
				t.Errorf("%s prints a secret (%q): %s", verb, secret, out)
			}
		}
	}
}

func TestMasterKeyDerivesTheExternalKey(t *testing.T) {
	file := strings.Replace(minimal, "signature: {keys: ["+hexKey+"]}", "signature: {keys: ["+strings.Repeat("ab", 32)+"], master_key: env:APP_ENC_KEY}", 1)
	c, err := Parse([]byte(file), env(map[string]string{"APP_ENC_KEY": "dGhpcy1pcy1hLTMyLWJ5dGUtbWFzdGVyLWtleTEyMzQ="}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Signature.Keys) != 2 {
		t.Fatalf("keys = %d, want the listed key and the derived one", len(c.Signature.Keys))
	}
	if got := hex.EncodeToString(c.Signature.Keys[1]); got != "f4ab532dc6dcf763bf8139e75e9bef6d8af5c329ce3e03ba05fd39ff729f6ffa" {
		t.Errorf("derived key = %s", got)
	}

	// master_key alone is enough.
	file = strings.Replace(minimal, "signature: {keys: ["+hexKey+"]}", "signature: {master_key: dGhpcy1pcy1hLTMyLWJ5dGUtbWFzdGVyLWtleTEyMzQ=}", 1)
	if c, err = Parse([]byte(file), env(nil), nil); err != nil || hex.EncodeToString(c.Signature.Keys[0]) != hexKey {
		t.Errorf("master_key alone: %v", err)
	}
}

func TestAccountsFor(t *testing.T) {
	c := &Config{Accounts: []Account{
		{ID: "a", Tenants: []string{"t1", "t2"}},
		{ID: "b", Tenants: []string{"t1"}, Sources: []string{"//worker/b"}},
		{ID: "c", Tenants: []string{"t3"}},
	}}
	tests := []struct {
		tenant, source string
		want           []string
	}{
		{"t1", "//worker/a", []string{"a"}},
		{"t1", "//worker/b", []string{"a", "b"}},
		{"t2", "//worker/b", []string{"a"}},
		{"t3", "", []string{"c"}},
		{"t9", "//worker/b", nil},
	}
	for _, tt := range tests {
		if got := c.AccountsFor(tt.tenant, tt.source); !slices.Equal(got, tt.want) {
			t.Errorf("AccountsFor(%q, %q) = %v, want %v", tt.tenant, tt.source, got, tt.want)
		}
	}
	if a, ok := c.Account("b"); !ok || a.ID != "b" {
		t.Errorf("Account(b) = %v, %v", a, ok)
	}
	if _, ok := c.Account("z"); ok {
		t.Error("Account(z) found")
	}
	if id, ok := (Token{Scope: "account:a"}).AccountID(); !ok || id != "a" {
		t.Errorf("AccountID() = %q, %v", id, ok)
	}
}

func TestAnchorsAndMergeKeys(t *testing.T) {
	file := minimal + `
identity: {aws_principal_arn: "arn:aws:iam::999999999999:role/relay-delivery"}
accounts: [{id: acct_123, tenants: [single-tenant]}]
x-bus: &bus {account: acct_123, connector: eventbridge, role_arn: "arn:aws:iam::111122223333:role/r"}
destinations:
  - <<: *bus
    id: one
    bus_arn: "arn:aws:events:us-east-1:111122223333:event-bus/one"
`
	_, err := Parse([]byte(file), env(nil), nil)
	ps := problemsOf(t, err)
	// x-bus is not a key of ours; the merged destination itself is fine.
	if len(ps) != 1 || ps[0].Path != "x-bus" {
		t.Errorf("problems = %v, want only the unknown key x-bus", ps)
	}
}

func FuzzParse(f *testing.F) {
	example, err := os.ReadFile("testdata/example.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(example)
	f.Add([]byte(minimal))
	f.Add([]byte(doc(nil)))
	f.Add([]byte(""))
	f.Add([]byte("a: &a [*a]"))
	f.Add([]byte("destinations: [{<<: {id: x}, connector: kinesis, kms_key_arn: 'arn:aws:kms:eu-west-1:1:key/x'}]"))
	f.Add([]byte("signature: {keys: [env:K, file:/dev/null]}\ndelivery: {lease_ttl: -1h}"))
	vars := env(exampleEnv())
	noFiles := func(string) ([]byte, error) { return nil, os.ErrNotExist }
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, vars, noFiles)
		if (c == nil) == (err == nil) {
			t.Fatalf("Parse returned config %v and error %v", c != nil, err)
		}
		if err != nil && strings.Contains(err.Error(), "rabbit-s3cret") {
			t.Fatalf("a problem repeats a secret: %v", err)
		}
	})
}

func TestAliasExpansionIsBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("x-events: &e [" + strings.TrimSuffix(strings.Repeat("job.completed,", 1000), ",") + "]\n")
	b.WriteString("x-dest: &d {id: a, events: *e}\n")
	b.WriteString("destinations: [" + strings.TrimSuffix(strings.Repeat("*d,", 1000), ",") + "]\n")
	start := time.Now()
	_, err := Parse([]byte(b.String()), env(nil), nil)
	ps := problemsOf(t, err)
	if d := time.Since(start); d > 2*time.Second || len(ps) > maxProblems+1 {
		t.Errorf("a 5 kB file of aliases took %v and gave %d problems", d, len(ps))
	}
	if !strings.Contains(err.Error(), "expand to too many values") {
		t.Errorf("no problem says the aliases expand too far")
	}
}
