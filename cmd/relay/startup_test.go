package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mercamap/relay/internal/api/contracttest"
	"github.com/mercamap/relay/internal/awstest"
	"github.com/mercamap/relay/internal/store/storetest"
	"github.com/mercamap/relay/internal/testpeer"
)

// A relay started before Redis (a pod restarted beside it) waits, saying so in JSON log
// lines, and serves once Redis answers, rather than exit.
func TestARelayStartedBeforeRedisWaitsAndServesOnceRedisComesUp(t *testing.T) {
	amqpURL := testpeer.SharedRabbitMQ(t)
	rd := testpeer.StartRedis(t)
	rd.Stop(t)
	bin := buildRelay(t)
	suffix := fmt.Sprint(time.Now().UnixNano())
	listen := fmt.Sprintf("127.0.0.1:%d", testpeer.FreePort(t))
	metrics := fmt.Sprintf("127.0.0.1:%d", testpeer.FreePort(t))
	path := filepath.Join(t.TempDir(), "relay.yaml")
	cfg := fmt.Sprintf(`
rabbitmq: {url: %s, exchange: relay-test-start-%s, queue: relay-test-start-%s}
redis: {url: %s}
signature: {keys: [env:TEST_HMAC_KEY]}
api:
  listen: %s
  metrics_listen: %s
  tokens: [{token: tok_admin, scope: admin}]
accounts:
  - {id: acct_1, tenants: [single-tenant]}
`, amqpURL, suffix, suffix, rd.URL(), listen, metrics)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd, logs := startRelay(t, bin, path)

	waitUntil(t, 30*time.Second, "two logged tries while Redis is down", func() bool {
		return strings.Count(logs.String(), "redis does not answer") >= 2
	})
	if cmd.ProcessState != nil {
		t.Fatalf("serve exited while Redis was down:\n%s", logs)
	}
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("a log line is not JSON: %q", line)
		}
		if strings.Contains(line, "redis does not answer") && (rec["retry_in"] == nil || rec["try"] == nil) {
			t.Errorf("the waiting line does not say when it tries again: %s", line)
		}
	}

	// Waiting, it answers the probes: alive, not ready, and why; the API says it starts.
	base := contracttest.New(t).Proxy("http://" + listen) // every call and answer checked against the document
	if a := httpDo(t, "GET", base+"/healthz", ""); a.status != 200 {
		t.Errorf("/healthz while waiting for Redis = %d %s, want 200: the process lives", a.status, a.body)
	}
	ready := httpDo(t, "GET", base+"/readyz", "")
	var body struct {
		Ready  bool              `json:"ready"`
		Checks map[string]string `json:"checks"`
	}
	if err := json.Unmarshal([]byte(ready.body), &body); err != nil || ready.status != 503 || body.Ready ||
		!strings.Contains(body.Checks["startup"], "waiting for Redis") {
		t.Errorf("/readyz while waiting for Redis = %d %s, want 503 with checks.startup saying it waits for Redis",
			ready.status, ready.body)
	}
	if a := httpDo(t, "GET", base+"/v1/whoami", "tok_admin"); a.status != 503 || !strings.Contains(a.body, "UNAVAILABLE") {
		t.Errorf("an API call while waiting for Redis = %d %s, want 503 UNAVAILABLE", a.status, a.body)
	}

	if a := httpDo(t, "GET", "http://"+metrics+"/metrics", ""); a.status != 200 || !strings.Contains(a.body, "relay_redis_up 0") {
		t.Errorf("/metrics while waiting for Redis = %d, want 200 with relay_redis_up 0:\n%.2000s", a.status, a.body)
	}

	rd.Start(t)
	waitUntil(t, 60*time.Second, "/readyz 200 once Redis answers", func() bool {
		return httpDo(t, "GET", base+"/readyz", "").status == 200
	})
	if a := httpDo(t, "GET", base+"/v1/whoami", "tok_admin"); a.status != 200 {
		t.Errorf("an API call once Redis answers = %d %s, want 200", a.status, a.body)
	}
	if !strings.Contains(logs.String(), "redis answers; the relay starts") {
		t.Errorf("no line says the relay went on once Redis answered:\n%s", logs)
	}
}

// A relay whose Redis answers PING but refuses what the start reads and writes (here
// writes refused, NOREPLICAS, as while a failover finds no replica; the drill saw a
// replica exit when its Redis master was down or just promoted) waits and tries again,
// /readyz saying why, and starts once Redis takes them: it never exits on a fault it
// can wait out.
func TestARelayWhoseRedisFailsAfterPingWaitsAndStartsOnceItTakesWrites(t *testing.T) {
	amqpURL := testpeer.SharedRabbitMQ(t)
	rd := testpeer.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: rd.Addr()})
	defer rdb.Close()
	if err := rdb.ConfigSet(t.Context(), "min-replicas-to-write", "1").Err(); err != nil {
		t.Fatal(err)
	}
	sts, bus := awstest.NewSTS(t), awstest.NewEventBridge(t)
	bin := buildRelay(t)
	suffix := fmt.Sprint(time.Now().UnixNano())
	listen := fmt.Sprintf("127.0.0.1:%d", testpeer.FreePort(t))
	path := filepath.Join(t.TempDir(), "relay.yaml")
	cfg := fmt.Sprintf(`
identity:
  aws_principal_arn: arn:aws:iam::999999999999:role/relay
  external_id_secret: external-id-secret-for-the-test-0123456789
rabbitmq: {url: %s, exchange: relay-test-start-%s, queue: relay-test-start-%s}
redis: {url: %s}
signature: {keys: [env:TEST_HMAC_KEY]}
api: {listen: %s, metrics_listen: "127.0.0.1:0", tokens: [{token: tok_admin, scope: admin}]}
aws: {region: us-east-1, endpoints: {sts: %s, events: %s}}
accounts:
  - {id: acct_1, tenants: [single-tenant]}
destinations:
  - {id: orders, account: acct_1, connector: eventbridge, bus_arn: "arn:aws:events:us-east-1:111122223333:event-bus/orders", role_arn: "arn:aws:iam::111122223333:role/relay-delivery"}
`, amqpURL, suffix, suffix, rd.URL(), listen, sts.URL, bus.URL)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd, logs := startRelay(t, bin, path)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	waitUntil(t, 30*time.Second, "two logged tries while Redis refuses writes", func() bool {
		select {
		case err := <-exited:
			t.Fatalf("serve exited (%v) while Redis refused writes:\n%s", err, logs)
		default:
		}
		return strings.Count(logs.String(), "then failed while the relay read its state") >= 2
	})
	base := contracttest.New(t).Proxy("http://" + listen) // every call and answer checked against the document
	ready := httpDo(t, "GET", base+"/readyz", "")
	if ready.status != 503 || !strings.Contains(ready.body, "waiting for Redis") || !strings.Contains(ready.body, "NOREPLICAS") {
		t.Errorf("/readyz while Redis refuses writes = %d %s, want 503 saying it waits for Redis, and why", ready.status, ready.body)
	}

	if err := rdb.ConfigSet(t.Context(), "min-replicas-to-write", "0").Err(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 60*time.Second, "/readyz 200 once Redis takes writes", func() bool {
		return httpDo(t, "GET", base+"/readyz", "").status == 200
	})
	if ext := rdb.HGet(t.Context(), storetest.DestKey("acct_1", "orders"), "external_id").Val(); ext == "" {
		t.Errorf("the configured destination has no ExternalId in Redis after the start")
	}
}
