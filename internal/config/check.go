package config

import (
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/signature"
)

var (
	// The name becomes the label key <name>-account (Google: lowercase, digits, _ and -,
	// at most 63) and starts the STS session name <name>-<account>.
	namePattern = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,54}$`)
	// Ids name Redis keys, URL paths and STS session names ([\w+=,.@-]).
	idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.@+=-]*$`)
	// A Pub/Sub topic is labelled with its account id: a Google label value.
	labelValue   = regexp.MustCompile(`^[a-z0-9_-]{1,63}$`)
	emailPattern = regexp.MustCompile(`^[^@\s]+@[^@\s]+\.[^@\s]+$`)
)

const maxIDLength = 128

// check validates the decoded c, resolves its secrets, and fills the defaults that
// depend on other values. Every check runs whatever the others found.
func (p *parser) check(c *Config) {
	accountIDs := map[string]bool{}
	for _, a := range c.Accounts {
		accountIDs[a.ID] = true
	}
	p.checkIdentity(c)
	p.checkRabbitMQ(&c.RabbitMQ)
	p.checkRedis(&c.Redis)
	p.checkSignature(c)
	p.checkAPI(&c.API, accountIDs)
	if msg := destination.CheckRegion(c.AWS.Region); msg != "" {
		p.add("aws.region", "%s", msg)
	}
	for _, k := range sortedMapKeys(c.AWS.Endpoints) {
		u, err := url.Parse(c.AWS.Endpoints[k])
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			p.add("aws.endpoints."+k, "must be an http:// or https:// URL of a local emulator, like http://127.0.0.1:4566")
		}
	}
	p.checkAWS(&c.AWS)
	p.checkDelivery(&c.Delivery)
	p.checkTracing(&c.Tracing)
	p.checkAccounts(c.Accounts, c.Identity.NameOrDefault())
	p.checkDestinations(c.Destinations, accountIDs, c.RabbitMQ.RoutingKeys)
	p.checkExternalIDs(c.Destinations)
}

func (p *parser) checkIdentity(c *Config) {
	var anyAWS, anyPubSub bool
	for _, d := range c.Destinations {
		anyAWS = anyAWS || d.Connector.IsAWS()
		anyPubSub = anyPubSub || d.Connector == destination.PubSub
	}
	id := &c.Identity
	if !namePattern.MatchString(id.Name) {
		p.add("identity.name", "%q must be lowercase letters, digits, '-' and '_', start with a letter and be at most 55 characters: it names the Pub/Sub label <name>-account and the STS session <name>-<account>", id.Name)
	}
	switch {
	case id.AWSPrincipalARN != "":
		if msg := destination.CheckPrincipalARN(id.AWSPrincipalARN); msg != "" {
			p.add("identity.aws_principal_arn", "%s", msg)
		}
	case anyAWS:
		p.add("identity.aws_principal_arn", "is required when an eventbridge or kinesis destination is configured: the ARN of our own IAM role, which customers' trust policies name")
	}
	switch {
	case id.GCPServiceAccount != "":
		if !emailPattern.MatchString(id.GCPServiceAccount) {
			p.add("identity.gcp_service_account", "must be a service account email, like relay@relay-prod.iam.gserviceaccount.com")
		}
	case anyPubSub:
		p.add("identity.gcp_service_account", "is required when a pubsub destination is configured: the email of our own service account, which customers grant on their topics")
	}
	if id.AWSTemplateURL != "" {
		if msg := checkTemplateURL(id.AWSTemplateURL); msg != "" {
			p.add("identity.aws_template_url", "%s", msg)
		}
	}
}

// checkTemplateURL returns why s cannot be identity.aws_template_url, or "" when it can:
// an https URL (the S3 object CloudFormation's quick-create reads) naming {connector}
// where the connector's name goes.
func checkTemplateURL(s string) string {
	const want = "must be the https URL of the templates relay setup-template prints, uploaded to S3, with {connector} where eventbridge or kinesis goes, like https://my-bucket.s3.us-east-1.amazonaws.com/relay/{connector}.yaml"
	u, err := url.Parse(destination.TemplateURL(s, destination.EventBridge))
	switch {
	case err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || u.Fragment != "":
		return want
	case !strings.Contains(s, destination.ConnectorPlaceholder):
		return "names no {connector}: " + want
	}
	return ""
}

func (p *parser) checkRabbitMQ(r *RabbitMQ) {
	const example = "amqp://user:pass@host:5672/vhost"
	switch {
	case p.rabbitURLRef != "" && p.rabbitURLRefs != nil:
		p.add("rabbitmq.urls", "set rabbitmq.url (one node) or rabbitmq.urls (every node of a cluster), not both")
	case p.rabbitURLRefs != nil:
		if len(p.rabbitURLRefs) == 0 {
			p.add("rabbitmq.urls", "must list at least one URL, one per node of the cluster, like %s", example)
		}
		nodes := map[string]int{}
		for i, ref := range p.rabbitURLRefs {
			path := index("rabbitmq.urls", i)
			v, ok := p.secret(path, ref)
			if !ok {
				continue
			}
			p.checkURL(path, v, "amqp", "amqps", example)
			if u, err := url.Parse(v); err == nil && u.Host != "" {
				if j, dup := nodes[u.Host]; dup {
					p.add(path, "names the same host and port as rabbitmq.urls[%d]: list each node once", j)
				}
				nodes[u.Host] = i
			}
			r.URLs = append(r.URLs, v)
		}
	default:
		if v, ok := p.secret("rabbitmq.url", p.rabbitURLRef); ok {
			r.URLs = []string{v}
			p.checkURL("rabbitmq.url", v, "amqp", "amqps", example)
		}
	}
	if r.Partitions < 1 || r.Partitions > MaxPartitions {
		p.add("rabbitmq.partitions", "%d is out of range: between 1 (one queue) and %d (each partition is a quorum queue on every node and two channels on every replica)", r.Partitions, MaxPartitions)
	}
	if r.Exchange == "" {
		p.add("rabbitmq.exchange", "is required: the Worker's job-events exchange, like fetcher.job.events")
	}
	if r.Queue == "" {
		p.add("rabbitmq.queue", "must not be empty (leave it out for %s)", DefaultQueue)
	} else if strings.HasPrefix(r.Queue, "amq.") {
		p.add("rabbitmq.queue", "queue names starting with amq. are reserved by RabbitMQ")
	}
	if r.QuarantineExchange == "" {
		r.QuarantineExchange = r.Queue + QuarantineSuffix
	}
	if r.QuarantineQueue == "" {
		r.QuarantineQueue = r.Queue + QuarantineSuffix
	}
	if len(r.RoutingKeys) == 0 {
		p.add("rabbitmq.routing_keys", "must list at least one routing key, like [job.completed, job.failed]")
	}
	for i, k := range r.RoutingKeys {
		switch {
		case k == "":
			p.add(index("rabbitmq.routing_keys", i), "a routing key is empty")
		case slices.Index(r.RoutingKeys, k) < i:
			p.add(index("rabbitmq.routing_keys", i), "routing key %s is listed twice", k)
		}
	}
	if r.Prefetch < 1 || r.Prefetch > 65535 {
		p.add("rabbitmq.prefetch", "%d is out of range: the prefetch count is between 1 and 65535", r.Prefetch)
	}
	p.checkQuarantine(r.Quarantine)
}

// Bounds of rabbitmq.quarantine's keys: below these the quarantine keeps too little to
// tell what went wrong.
const (
	minQuarantineBytes    = 1 << 20
	minQuarantineMessages = 100
	minQuarantineBody     = 1 << 10
)

func (p *parser) checkQuarantine(q Quarantine) {
	if q.MaxBytes < minQuarantineBytes {
		p.add("rabbitmq.quarantine.max_bytes", "%d is too small: at least %d (1 MiB) of bodies; the broker drops the oldest past it", q.MaxBytes, minQuarantineBytes)
	}
	if q.MaxMessages < minQuarantineMessages {
		p.add("rabbitmq.quarantine.max_messages", "%d is too small: at least %d messages; the broker drops the oldest past it", q.MaxMessages, minQuarantineMessages)
	}
	switch {
	case q.MaxBodyBytes < minQuarantineBody:
		p.add("rabbitmq.quarantine.max_body_bytes", "%d is too small: at least %d bytes of each body are kept", q.MaxBodyBytes, minQuarantineBody)
	case q.MaxBytes >= minQuarantineBytes && int64(q.MaxBodyBytes) > q.MaxBytes:
		p.add("rabbitmq.quarantine.max_body_bytes", "%d is more than rabbitmq.quarantine.max_bytes (%d): one copy would push out every other", q.MaxBodyBytes, q.MaxBytes)
	}
}

// checkSignature decodes the hex keys and derives the key of master_key, appended last.
func (p *parser) checkSignature(c *Config) {
	for i, ref := range p.keyRefs {
		path := index("signature.keys", i)
		v, ok := p.secret(path, ref)
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		key, err := hex.DecodeString(v)
		switch {
		case v == "":
			p.add(path, "is empty: a key is 64 hexadecimal characters (32 bytes)")
		case err != nil:
			p.add(path, "is not hexadecimal: a key is 64 hexadecimal characters (32 bytes), the external HMAC key as Fetcher derives it")
		case len(key) != 32:
			p.add(path, "decodes to %d bytes: a key is 64 hexadecimal characters (32 bytes)", len(key))
		default:
			c.Signature.Keys = append(c.Signature.Keys, key)
		}
	}
	if p.masterRef != "" {
		if v, ok := p.secret("signature.master_key", p.masterRef); ok {
			if key, err := signature.DeriveExternalKey(strings.TrimSpace(v)); err != nil {
				p.add("signature.master_key", "is not standard base64 of 32 bytes or more: it is Fetcher's APP_ENC_KEY as the Worker is given it")
			} else {
				c.Signature.Keys = append(c.Signature.Keys, key)
			}
		}
	}
	if len(p.keyRefs) == 0 && p.masterRef == "" {
		p.add("signature.keys", "at least one key is required: list the external HMAC key (hex) in signature.keys, or set signature.master_key")
	}
	// A relay behind a durable queue may see a re-emit long after the first copy: the
	// dedup marker must outlive every message the signature window still accepts.
	if w := c.Delivery.ReplayWindow; w < 0 || w > c.DedupWindow {
		p.add("delivery.replay_window", "%s must be between 0 (the default, %s) and dedup_window (%s), which is how long account logs keep anything", w, DefaultReplayWindow, c.DedupWindow)
	}
	if c.DedupWindow <= c.Signature.MaxAge {
		p.add("dedup_window", "%s must be longer than signature.max_age (%s): otherwise a re-emitted event could be delivered twice", c.DedupWindow, c.Signature.MaxAge)
	} else if c.Delivery.MaxMessageAge >= c.DedupWindow {
		// Account logs keep entries for dedup_window: a message must end (delivered or
		// expired) before its entry can be trimmed away.
		p.add("delivery.max_message_age", "%s must be shorter than dedup_window (%s), which is how long account logs keep events", c.Delivery.MaxMessageAge, c.DedupWindow)
	}
}

// checkRates checks a per-destination rate and the per-account one above it: each holds
// at least least (what one take may need), and the account's rate is not below the
// destination's, or no destination could reach its own.
func (p *parser) checkRates(destPath string, d Rate, acctPath string, a Rate, least int, unit string) {
	for _, r := range []struct {
		path string
		rate Rate
	}{{destPath, d}, {acctPath, a}} {
		if r.rate.Count < least {
			p.add(r.path+".count", "must be at least %d %s", least, unit)
		}
	}
	if a.Count >= least && d.Count >= least && float64(a.Count)/a.Per.Seconds() < float64(d.Count)/d.Per.Seconds() {
		p.add(acctPath, "%d per %s is less than %s (%d per %s): no destination could reach its own rate", a.Count, a.Per, destPath, d.Count, d.Per)
	}
}

// checkAWS checks the STS budget and the session backoff.
func (p *parser) checkAWS(aws *AWS) {
	b := aws.STSBudget
	// A new session may need a probe and the session itself, taken together.
	p.checkRates("aws.sts_budget.per_destination", b.PerDestination, "aws.sts_budget.per_account", b.PerAccount, 2,
		"calls (a probe and a session)")
	if aws.SessionBackoff.Max < aws.SessionBackoff.Initial {
		p.add("aws.session_backoff.max", "%s is shorter than initial (%s)", aws.SessionBackoff.Max, aws.SessionBackoff.Initial)
	}
}

// minKept is the least count bound of a channel or an attempt log.
const minKept = 500

func (p *parser) checkDelivery(d *Delivery) {
	if d.NotTakenBackoff.Max < d.NotTakenBackoff.Initial {
		p.add("delivery.not_taken_backoff.max", "%s is shorter than initial (%s)", d.NotTakenBackoff.Max, d.NotTakenBackoff.Initial)
	}
	if d.SetupCheck.Initial <= 0 {
		p.add("delivery.setup_check.initial", "must be more than 0")
	}
	if d.SetupCheck.Max < d.SetupCheck.Initial {
		p.add("delivery.setup_check.max", "%s is shorter than initial (%s)", d.SetupCheck.Max, d.SetupCheck.Initial)
	}
	if d.DisableAfter < 1 {
		p.add("delivery.disable_after", "must be at least 1 rejected attempt")
	}
	if d.WarnAfter == nil { // not configured: 5 and 15, those below disable_after
		for _, n := range []int{5, 15} {
			if n < d.DisableAfter {
				d.WarnAfter = append(d.WarnAfter, n)
			}
		}
	}
	for _, n := range d.WarnAfter {
		if n < 1 || n >= d.DisableAfter {
			p.add("delivery.warn_after", "%d is not between 1 and delivery.disable_after (%d), exclusive", n, d.DisableAfter)
		}
	}
	if d.AttemptsRetention < d.ChannelRetention {
		p.add("delivery.attempts_retention", "%s is shorter than delivery.channel_retention (%s): the attempt log is kept at least as long as channel events", d.AttemptsRetention, d.ChannelRetention)
	}
	// Below a few hundred, Redis's approximate trim (whole nodes of 100 entries) would
	// keep noticeably more than asked, and a reconnecting watcher would resync often.
	if d.ChannelMaxEvents < minKept {
		p.add("delivery.channel_max_events", "must be at least %d events", minKept)
	}
	if d.AttemptsMax < minKept {
		p.add("delivery.attempts_max", "must be at least %d attempt lines", minKept)
	}
	if d.CommitWait > time.Second {
		p.add("delivery.commit_wait", "%s is longer than a second: a crash would re-send that long a stretch of deliveries", d.CommitWait)
	}
	if d.UncommittedMax < 1 || d.UncommittedMax > 1024 {
		p.add("delivery.uncommitted_max", "must be between 1 and 1024 writes")
	}
	if d.InFlight < 1 || d.InFlight > destination.MaxInFlight {
		p.add("delivery.in_flight", "%d is out of range: it is how many writes of one destination may be in flight at once, a whole number from 1 (one at a time, in arrival order) to %d", d.InFlight, destination.MaxInFlight)
	}
	if d.OperatorEventsExchange == "" {
		p.add("delivery.operator_events_exchange", "must not be empty (leave it out for %s)", DefaultOperatorEventsExchange)
	}
}

func (p *parser) checkAccounts(accounts []Account, name string) {
	maxAccount := 64 - len(name) - 1 // RoleSessionName <name>-<account> has at most 64 characters
	firstAccount := map[string]int{}
	for i, a := range accounts {
		path := index("accounts", i)
		if p.checkID(path+".id", a.ID, "an account id, like acct_123") {
			if j, dup := firstAccount[a.ID]; dup {
				p.add(path+".id", "account %s is already defined at accounts[%d]", a.ID, j)
			} else {
				firstAccount[a.ID] = i
			}
			if len(a.ID) > maxAccount && maxAccount > 0 {
				p.add(path+".id", "%s is too long: the STS session name %s-<account> allows at most %d characters for it", a.ID, name, maxAccount)
			}
		}
		if len(a.Tenants) == 0 {
			p.add(path+".tenants", "must list at least one producer tenant (single-tenant in a single-tenant deployment)")
		}
		for j, t := range a.Tenants {
			if t == "" {
				p.add(index(path+".tenants", j), "a tenant is empty")
			}
		}
		for j, s := range a.Sources {
			if s == "" {
				p.add(index(path+".sources", j), "a source is empty: list ce-source values, or leave sources out for all")
			}
		}
		if a.StoreIDPath != "" && slices.Contains(strings.Split(a.StoreIDPath, "."), "") {
			p.add(path+".store_id_path", "%q must be a dotted path into the event, like metadata.store_id", a.StoreIDPath)
		}
	}
}

func (p *parser) checkDestinations(dests []destination.Destination, accountIDs map[string]bool, routingKeys []string) {
	// A destination's event filter names routing keys; with wildcard bindings (job.*) the
	// keys that can arrive are not known here, so the filter is not checked against them.
	checkEvents := len(routingKeys) > 0 && !slices.ContainsFunc(routingKeys, func(k string) bool { return strings.ContainsAny(k, "*#") })
	firstDest := map[string]int{}
	for i, dst := range dests {
		path := index("destinations", i)
		if p.checkID(path+".id", dst.ID, "a destination id, like orders-bus") {
			if j, dup := firstDest[dst.ID]; dup {
				p.add(path+".id", "destination %s is already defined at destinations[%d] (ids are unique across connectors)", dst.ID, j)
			} else {
				firstDest[dst.ID] = i
			}
		}
		switch {
		case dst.Account == "":
			p.add(path+".account", "is required: the id of the account this destination belongs to")
		case !accountIDs[dst.Account]:
			p.add(path+".account", "account %s is not in accounts", dst.Account)
		case dst.Connector == destination.PubSub && !labelValue.MatchString(dst.Account):
			p.add(path+".account", "account %s cannot be a Google Cloud label value (lowercase letters, digits, _ and -, at most 63 characters), and a Pub/Sub topic is labelled with it", dst.Account)
		}
		for _, prob := range dst.Validate() {
			p.add(path+"."+prob.Field, "%s", prob.Message)
		}
		if checkEvents {
			for j, e := range dst.Events {
				if e != "" && !slices.Contains(routingKeys, e) {
					p.add(index(path+".events", j), "%s is not one of rabbitmq.routing_keys (%s): this destination would never receive it", e, strings.Join(routingKeys, ", "))
				}
			}
		}
	}
}

// ValidID reports whether v could name an account or a destination (the checks of
// checkID): what names none can be refused before anything is looked up.
func ValidID(v string) bool { return v != "" && len(v) <= maxIDLength && idPattern.MatchString(v) }

// checkID reports an empty or malformed id and returns whether it is usable.
func (p *parser) checkID(path, v, what string) bool {
	switch {
	case v == "":
		p.add(path, "is required: %s", what)
	case len(v) > maxIDLength:
		p.add(path, "is longer than %d characters", maxIDLength)
	case !idPattern.MatchString(v):
		p.add(path, "%q may only hold letters, digits and _ . @ + = -, starting with a letter or digit: it names Redis keys, URL paths and STS sessions", v)
	default:
		return true
	}
	return false
}

// maxMinReplicas bounds redis.min_replicas: more replicas per master than anyone runs
// is a typo, and every append would wait for acknowledgements that cannot come.
const maxMinReplicas = 5

// checkRedis checks the one server or the cluster the store runs on.
func (p *parser) checkRedis(r *Redis) {
	if len(r.Cluster) == 0 || r.URL != "" {
		if v, ok := p.secret("redis.url", r.URL); ok {
			r.URL = v
			p.checkURL("redis.url", v, "redis", "rediss", "redis://host:6379/0")
			if u, err := url.Parse(v); err == nil && (len(r.Cluster) > 0 || u.Query().Has("addr")) && u.Path != "" && u.Path != "/" && u.Path != "/0" {
				p.add("redis.url", "names a database, but Redis Cluster has only database 0: leave the path out")
			}
		}
	}
	for i, addr := range r.Cluster {
		host, port, err := net.SplitHostPort(addr)
		if err != nil || host == "" || port == "" || !validPort(port) {
			p.add(fmt.Sprintf("redis.cluster[%d]", i), "must be host:port of a Redis Cluster node, like redis-0.redis:6379")
		}
	}
	if r.MinReplicas < 0 || r.MinReplicas > maxMinReplicas {
		p.add("redis.min_replicas", "must be between 0 and %d: how many replicas must hold an append before the broker is acked", maxMinReplicas)
	}
}

// checkURL checks a URL that may hold a password: no message repeats any part of it.
func (p *parser) checkURL(path, v, scheme, tlsScheme, example string) {
	if v == "" {
		p.add(path, "is required: a %s:// or %s:// URL, like %s (write env:NAME or file:PATH rather than the URL itself)", scheme, tlsScheme, example)
		return
	}
	u, err := url.Parse(v)
	switch {
	case err != nil:
		p.add(path, "is not a URL: write it like %s", example)
	case u.Scheme != scheme && u.Scheme != tlsScheme:
		p.add(path, "must start with %s:// or %s://, like %s", scheme, tlsScheme, example)
	case u.Host == "" || u.Hostname() == "":
		p.add(path, "names no host: write it like %s", example)
	case u.Port() != "" && !validPort(u.Port()):
		p.add(path, "has an invalid port: write it like %s", example)
	}
}

func validPort(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n >= 0 && n <= 65535
}

func sortedMapKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
