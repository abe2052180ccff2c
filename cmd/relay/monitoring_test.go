package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.yaml.in/yaml/v3"

	"github.com/mercamap/relay/internal/awstest"
	"github.com/mercamap/relay/internal/jobevent"
	"github.com/mercamap/relay/internal/testpeer"
)

// observedRelay is one relay serving one EventBridge destination on local STS and
// EventBridge servers, with its own exchange and queue.
type observedRelay struct {
	listen        string
	metricsListen string // api.metrics_listen: /metrics
	redisURL      string
	exchange      string
	ch            *amqp.Channel // confirms on
	key           []byte
	bus           *awstest.EventBridge
	logs          *syncBuffer
}

// startObservedRelay starts it; extra is appended to the config (a tracing: section).
func startObservedRelay(t *testing.T, extra string) *observedRelay {
	t.Helper()
	amqpURL, redisURL := testpeer.SharedRabbitMQ(t), testpeer.RedisURL(t)
	sts, bus := awstest.NewSTS(t), awstest.NewEventBridge(t)
	bus.RequireSessionFrom(sts)
	const roleARN = "arn:aws:iam::111122223333:role/relay-delivery"
	suffix := fmt.Sprint(time.Now().UnixNano())
	r := &observedRelay{listen: fmt.Sprintf("127.0.0.1:%d", testpeer.FreePort(t)), metricsListen: fmt.Sprintf("127.0.0.1:%d", testpeer.FreePort(t)),
		exchange: "relay-test-observe-" + suffix, bus: bus, redisURL: redisURL}
	queue := r.exchange
	r.key, _ = hex.DecodeString(testKeyHex)
	cfg := filepath.Join(t.TempDir(), "relay.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`
identity: {name: mercamap, aws_principal_arn: "arn:aws:iam::999999999999:role/relay", external_id_secret: external-id-secret-for-the-test-0123456789}
rabbitmq: {url: %s, exchange: %s, queue: %s}
redis: {url: %s}
signature: {keys: [env:TEST_HMAC_KEY]}
api: {listen: "%s", metrics_listen: "%s"}
aws:
  region: us-east-1
  endpoints: {sts: %s, events: %s}
delivery:
  setup_check: {initial: 20ms, max: 200ms}  # pending until the role is trusted below
accounts:
  - {id: acct_1, tenants: [single-tenant]}
destinations:
  - id: orders-bus
    account: acct_1
    connector: eventbridge
    bus_arn: arn:aws:events:us-east-1:111122223333:event-bus/orders
    role_arn: %s
%s`, amqpURL, r.exchange, queue, redisURL, r.listen, r.metricsListen, sts.URL, bus.URL, roleARN, extra)), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := buildRelay(t)
	_, r.logs, _ = startWatchedRelay(t, bin, cfg, "POD_NAME=relay-test-pod-0")            // the chart's downward API
	sts.RequireExternalID(roleARN, issuedExternalID(t, redisURL, "acct_1", "orders-bus")) // the customer's trust policy
	conn, ch := brokerChannel(t, amqpURL, queue)
	waitConsumers(t, conn, queue, 1)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	r.ch = ch
	return r
}

// publish sends msg to the relay's exchange and waits for the broker's confirm.
func (r *observedRelay) publish(t *testing.T, routingKey string, msg amqp.Publishing) {
	t.Helper()
	dc, err := r.ch.PublishWithDeferredConfirm(r.exchange, routingKey, false, false, msg)
	if err != nil {
		t.Fatal(err)
	}
	if !dc.Wait() {
		t.Fatal("publish not confirmed")
	}
}

// metricName is a name the relay exports, as PromQL names it.
var metricName = regexp.MustCompile(`\brelay_[a-zA-Z0-9_:]*`)

// dashboardQueries returns every query of the dashboard (panel targets and variables).
func dashboardQueries(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile("../../deploy/monitoring/relay-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Type       string `json:"type"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("relay-dashboard.json: %v", err)
	}
	var out []string
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			out = append(out, tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		if v.Type == "query" {
			out = append(out, v.Definition)
		}
	}
	return out
}

// ruleQueries returns the expression of every alert rule.
func ruleQueries(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile("../../deploy/monitoring/relay-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Expr string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			out = append(out, r.Expr)
		}
	}
	return out
}

// exported lists the sample names on a /metrics page (histograms' _bucket, _sum, _count).
func exported(page string) map[string]bool {
	out := map[string]bool{}
	for _, line := range strings.Split(page, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		out[name] = true
	}
	return out
}

func TestDashboardAndAlertQueriesNameOnlyMetricsARunningRelayExports(t *testing.T) {
	r := startObservedRelay(t, "")
	// One delivered event, one quarantined and one dead-lettered, so the labelled series exist.
	r.publish(t, "job.completed", jobevent.Build(jobevent.Job{ID: "0190f2a4-3333-7000-8000-000000000001", Status: "completed"}, r.exchange, r.key, time.Now()))
	wrongKey := make([]byte, 32)
	r.publish(t, "job.completed", jobevent.Build(jobevent.Job{ID: "0190f2a4-3333-7000-8000-000000000002", Status: "completed"}, r.exchange, wrongKey, time.Now()))
	// Headers nested deeper than the AMQP client reads: dead-lettered by the broker.
	var deep any = "bottom"
	for range 40 {
		deep = amqp.Table{"d": deep}
	}
	r.publish(t, "job.completed", amqp.Publishing{MessageId: "deep", Body: []byte(`{}`), Headers: amqp.Table{"deep": deep}})

	queries := map[string][]string{"dashboard": dashboardQueries(t), "alert rules": ruleQueries(t)}
	var want []string
	for _, qs := range queries {
		for _, q := range qs {
			want = append(want, metricName.FindAllString(q, -1)...)
		}
	}
	slices.Sort(want)
	want = slices.Compact(want)
	var missing []string
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		have := exported(metrics(r.metricsListen))
		missing = missing[:0]
		for _, name := range want {
			if !have[name] {
				missing = append(missing, name)
			}
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("named by the dashboard or the rules, not on a running relay's /metrics: %v", missing)
		}
	}
	for what, qs := range queries {
		for _, q := range qs {
			if len(metricName.FindAllString(q, -1)) == 0 {
				t.Errorf("%s query %q names no relay metric", what, q)
			}
		}
	}
	if len(want) < 20 {
		t.Errorf("only %d metrics named: %v", len(want), want)
	}
}
