package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/api/contracttest"
	"github.com/mercamap/relay/internal/testpeer"
)

// TestServeLogsAReadableSecretFileAndRefusesDevZeroOnReload runs the relay binary with
// its admin token in a 0644 file (a warning at start, the relay serves), then reloads
// with the token at file:/dev/zero: the reload is refused at once and the token that
// was in force still works.
func TestServeLogsAReadableSecretFileAndRefusesDevZeroOnReload(t *testing.T) {
	amqpURL, redisURL := testpeer.SharedRabbitMQ(t), testpeer.RedisURL(t)
	bin := buildRelay(t)
	suffix := fmt.Sprint(time.Now().UnixNano())
	listen := fmt.Sprintf("127.0.0.1:%d", testpeer.FreePort(t))
	base := contracttest.New(t).Proxy("http://" + listen) // every call and answer checked against the document
	dir := t.TempDir()
	const token = "admin-token-7c1e9a4d2b"
	tokenFile := filepath.Join(dir, "admin-token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tokenFile, 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "relay.yaml")
	writeCfg := func(ref string) {
		t.Helper()
		cfg := fmt.Sprintf(`
rabbitmq: {url: %s, exchange: relay-test-secret-%s, queue: relay-test-secret-%s}
redis: {url: %s}
signature: {keys: [env:TEST_HMAC_KEY]}
api:
  listen: %s
  metrics_listen: 127.0.0.1:0
  tokens: [{scope: admin, token: "file:%s"}]
accounts: [{id: acct_1, tenants: [single-tenant]}]
`, amqpURL, suffix, suffix, redisURL, listen, ref)
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeCfg(tokenFile)
	cmd, logs := startRelay(t, bin, path)
	waitUntil(t, 60*time.Second, "the API to answer the token from the file", func() bool {
		return httpDo(t, "GET", base+"/v1/connectors", token).status == 200
	})
	if !strings.Contains(logs.String(), "config warning") || !strings.Contains(logs.String(), "api.tokens[0].token: file "+tokenFile+" can be read by others") {
		t.Errorf("no warning logged for the 0644 token file:\n%s", logs)
	}

	writeCfg("/dev/zero")
	reloadAt := time.Now()
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "the reload with file:/dev/zero to be refused", func() bool {
		return strings.Contains(logs.String(), "cannot read file /dev/zero: it is not a regular file")
	})
	if took := time.Since(reloadAt); took > 5*time.Second {
		t.Errorf("refusing file:/dev/zero took %s", took)
	}
	if a := httpDo(t, "GET", base+"/v1/connectors", token); a.status != 200 {
		t.Errorf("the running token after the refused reload: %d %s", a.status, a.body)
	}
	if strings.Contains(logs.String(), token) {
		t.Error("the token appears in the logs")
	}
}
