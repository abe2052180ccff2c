package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	path := filepath.Join(t.TempDir(), "relay.yaml")
	cfg := fmt.Sprintf(`
rabbitmq: {url: %s, exchange: relay-test-start-%s, queue: relay-test-start-%s}
redis: {url: %s}
signature: {keys: [env:TEST_HMAC_KEY]}
api: {listen: %s, metrics_listen: 127.0.0.1:0}
accounts:
  - {id: acct_1, tenants: [single-tenant]}
`, amqpURL, suffix, suffix, rd.URL(), listen)
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

	rd.Start(t)
	base := "http://" + listen
	waitUntil(t, 60*time.Second, "/readyz 200 once Redis answers", func() bool {
		return httpDo(t, "GET", base+"/readyz", "").status == 200
	})
	if !strings.Contains(logs.String(), "redis answers; the relay starts") {
		t.Errorf("no line says the relay went on once Redis answered:\n%s", logs)
	}
}
