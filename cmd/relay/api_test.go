package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/api/apitest"
	"github.com/mercamap/relay/internal/api/contracttest"
	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/failures"
	"github.com/mercamap/relay/internal/testpeer"
)

// syncBuffer is a bytes.Buffer safe to write from one goroutine and read from another.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func getenv(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestDestinationsListAndShowPrintTheCards(t *testing.T) {
	r := apitest.New(t, apitest.Options{})
	r.Sink.SetBehave(func(string, destination.Message) error {
		return failures.NewRejected("AccessDeniedException: the role may not call kinesis:PutRecord on the stream", nil)
	})
	if a := httpDo(t, "POST", r.URL+"/v1/connectors/kinesis/destinations/orders-stream/test", apitest.AdminToken); a.status != 200 {
		t.Fatalf("test send: %d", a.status)
	}
	env := getenv(map[string]string{"RELAY_TOKEN": apitest.Acct1Token})
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"destinations", "--api", r.URL}, env, nil, &out, &errOut); err != nil {
		t.Fatalf("destinations: %v\n%s", err, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "CONNECTOR") {
		t.Fatalf("list printed:\n%s", out.String())
	}
	for _, want := range []string{"orders-bus", "orders-stream", "orders-topic"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("list lacks %s", want)
		}
	}
	if strings.Contains(out.String(), "other-bus") {
		t.Error("an account token listed another account's destination")
	}
	if !strings.Contains(out.String(), "rejected: AccessDeniedException: the role may not call kinesis:PutRecord") {
		t.Errorf("list lacks the last failure's sentence:\n%s", out.String())
	}

	out.Reset()
	args := []string{"destinations", "show", "orders-stream", "--api", r.URL, "--token", "env:MY_TOKEN"}
	if err := run(context.Background(), args, getenv(map[string]string{"MY_TOKEN": apitest.Acct1Token}), nil, &out, &errOut); err != nil {
		t.Fatalf("show: %v", err)
	}
	for _, want := range []string{"orders-stream (kinesis), account acct_1", "consecutive failures: 1",
		"Trust policy", `"sts:ExternalId": "relay-`, "Permissions policy", `"Action": "kinesis:PutRecord"`,
		"KMS statement", "kms:GenerateDataKey", "external id:          relay-",
		"CloudFormation template", "    Type: AWS::IAM::Role", "Terraform:", `  resource "aws_iam_role_policy" "mercamap_orders_stream" {`,
		"AWS CLI:\n  aws iam create-role --role-name mercamap-delivery --assume-role-policy-document '{", "  aws iam put-role-policy --role-name mercamap-delivery"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("show lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := run(context.Background(), []string{"destinations", "show", "orders-topic", "--api", r.URL}, env, nil, &out, &errOut); err != nil {
		t.Fatalf("show: %v", err)
	}
	if !strings.Contains(out.String(), "gcloud pubsub topics update relay-events --project=acme-prod --update-labels=mercamap-account=acct_1") ||
		!strings.Contains(out.String(), "Or with Terraform:\n") || !strings.Contains(out.String(), `  resource "google_pubsub_topic_iam_member" "mercamap_orders_topic_publisher" {`) {
		t.Errorf("pubsub show:\n%s", out.String())
	}
	err := run(context.Background(), []string{"destinations", "show", "other-bus", "--api", r.URL}, env, nil, &out, &errOut)
	if err == nil {
		t.Error("show of another account's destination succeeded")
	}
	err = run(context.Background(), []string{"destinations", "--api", r.URL, "--token", "wrong"}, env, nil, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "UNAUTHENTICATED") || strings.Contains(err.Error(), "wrong") {
		t.Errorf("a wrong token gave %v", err)
	}
}

// watchOrdersBus runs `relay watch destination:orders-bus` against api with account 1's
// token until ctx ends: its output, and its error when it returns.
func watchOrdersBus(ctx context.Context, api string) (*syncBuffer, <-chan error) {
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"watch", "destination:orders-bus", "--api", api, "--token", apitest.Acct1Token},
			getenv(nil), nil, out, io.Discard)
	}()
	return out, done
}

func TestWatchPrintsTheSnapshotAndEachEventAsItIsApplied(t *testing.T) {
	r := apitest.New(t, apitest.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, done := watchOrdersBus(ctx, r.URL)
	waitUntil(t, 30*time.Second, "the snapshot printed", func() bool {
		return strings.Contains(out.String(), "snapshot destination:orders-bus at sequence 0\n  orders-bus (eventbridge): active, 0 consecutive failures\n")
	})
	httpDo(t, "POST", r.URL+"/v1/connectors/eventbridge/destinations/orders-bus/pause", apitest.AdminToken)
	httpDo(t, "POST", r.URL+"/v1/connectors/eventbridge/destinations/orders-bus/test", apitest.AdminToken)
	waitUntil(t, 30*time.Second, "both events printed", func() bool {
		s := out.String()
		return strings.Contains(s, "destination.paused  orders-bus → paused, 0 failures") &&
			strings.Contains(s, "delivery.succeeded  orders-bus → paused, 0 failures  event relay.test.")
	})
	for i, line := range strings.Split(strings.TrimSpace(out.String()), "\n")[2:] {
		if !strings.HasPrefix(line, fmt.Sprintf("#%d  ", i+1)) {
			t.Errorf("event line %q: want #%d first", line, i+1)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("watch ended with %v on Ctrl-C", err)
	}
}

type httpAnswer struct {
	status int
	body   string
	header http.Header
}

func httpDo(t *testing.T, method, url, token string) httpAnswer {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	return doRequest(req, token)
}

// httpSend sends a JSON body with a bearer token, and header's name-value pairs.
func httpSend(t *testing.T, method, url, token, body string, header ...string) httpAnswer {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return doRequest(req, token)
}

// doRequest sends req with token (none when empty) and reads the whole answer.
func doRequest(req *http.Request, token string) httpAnswer {
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return httpAnswer{status: -1, body: err.Error()}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return httpAnswer{status: resp.StatusCode, body: string(b), header: resp.Header}
}

// TestServeReloadsTokensOnSIGHUPAndEndsStreamsOnSIGTERM runs the relay binary: its API
// answers, a SIGHUP that removes a token revokes it (403) and admits the new one, a
// SIGHUP with a broken file keeps the running config, and SIGTERM ends an open
// subscription and the process cleanly; restarted, the revoked token is still 403.
func TestServeReloadsTokensOnSIGHUPAndEndsStreamsOnSIGTERM(t *testing.T) {
	amqpURL, redisURL := testpeer.SharedRabbitMQ(t), testpeer.RedisURL(t)
	bin := buildRelay(t)
	suffix := fmt.Sprint(time.Now().UnixNano())
	exchange, queue := "relay-test-api-"+suffix, "relay-test-api-"+suffix
	listen := fmt.Sprintf("127.0.0.1:%d", testpeer.FreePort(t))
	base := contracttest.New(t).Proxy("http://" + listen) // every call and answer checked against the document
	metricsListen := fmt.Sprintf("127.0.0.1:%d", testpeer.FreePort(t))
	const tokenA, tokenB, tokenC = "token-a-4f9c2e7d1b", "token-b-8a3d6e0c5f", "token-c-2b7e9d4a1c"
	path := filepath.Join(t.TempDir(), "relay.yaml")
	writeCfg := func(tokens string) {
		t.Helper()
		cfg := fmt.Sprintf(`
identity: {name: mercamap, aws_principal_arn: "arn:aws:iam::999999999999:role/relay", external_id_secret: external-id-secret-for-the-test-0123456789}
rabbitmq: {url: %s, exchange: %s, queue: %s}
redis: {url: %s}
signature: {keys: [env:TEST_HMAC_KEY]}
api:
  listen: %s
  metrics_listen: %s
  tokens:
%s
accounts:
  - {id: acct_1, tenants: [single-tenant]}
destinations:
  - id: orders-bus
    account: acct_1
    connector: eventbridge
    bus_arn: arn:aws:events:us-east-1:111122223333:event-bus/orders
    role_arn: arn:aws:iam::111122223333:role/mercamap-delivery
`, amqpURL, exchange, queue, redisURL, listen, metricsListen, tokens)
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeCfg("    - {scope: admin, token: env:TOKEN_A}\n    - {scope: \"account:acct_1\", token: env:TOKEN_C}")
	tokenEnv := []string{"TOKEN_A=" + tokenA, "TOKEN_B=" + tokenB, "TOKEN_C=" + tokenC}
	cmd, logs := startRelay(t, bin, path, tokenEnv...)
	conn, _ := brokerChannel(t, amqpURL, queue)

	waitUntil(t, 60*time.Second, "/readyz 200 (broker, redis, config)", func() bool {
		return httpDo(t, "GET", base+"/readyz", "").status == 200
	})
	waitConsumers(t, conn, queue, 1)
	if a := httpDo(t, "GET", base+"/v1/connectors", tokenA); a.status != 200 || !strings.Contains(a.body, `{"connector":"eventbridge","destinations":1}`) {
		t.Fatalf("connectors: %d %s", a.status, a.body)
	}
	if a := httpDo(t, "GET", base+"/healthz", ""); a.status != 200 {
		t.Errorf("healthz: %d", a.status)
	}
	waitUntil(t, 30*time.Second, "the lag gauge of the leased destination", func() bool {
		a := httpDo(t, "GET", "http://"+metricsListen+"/metrics", "")
		return strings.Contains(a.body, `relay_destination_lag_events{account="acct_1",connector="eventbridge",destination="orders-bus"} 0`) &&
			strings.Contains(a.body, "relay_events_consumed_total")
	})
	// The standard collectors: the Go runtime, the process and the build (issue 25).
	page := httpDo(t, "GET", "http://"+metricsListen+"/metrics", "").body
	for _, name := range []string{"go_goroutines", "go_memstats_heap_inuse_bytes", "process_cpu_seconds_total",
		"process_resident_memory_bytes", "go_build_info"} {
		if !exported(page)[name] {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	// Not a route on api.listen: checked like one that takes a token (401), then 404.
	if a := httpDo(t, "GET", base+"/metrics", ""); a.status != 401 {
		t.Errorf("/metrics on api.listen without a token: %d, want 401 (it is not a route there)", a.status)
	}
	if a := httpDo(t, "GET", base+"/metrics", tokenA); a.status != 404 {
		t.Errorf("/metrics on api.listen: %d, want 404 (it is served on api.metrics_listen only)", a.status)
	}
	if a := httpDo(t, "GET", "http://"+metricsListen+"/healthz", ""); a.status != 200 {
		t.Errorf("/healthz on api.metrics_listen: %d", a.status)
	}

	// An open subscription, ended only by the shutdown.
	req, _ := http.NewRequest("GET", base+"/v1/streams/destination:orders-bus/subscribe", nil)
	req.Header.Set("Authorization", "Bearer "+tokenC)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("subscribe: %v %v", err, resp)
	}
	defer resp.Body.Close()
	streamEnded := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, bufio.NewReader(resp.Body))
		close(streamEnded)
	}()

	writeCfg("    - {scope: admin, token: env:TOKEN_B}\n    - {scope: \"account:acct_1\", token: env:TOKEN_C}")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 30*time.Second, "the reload to revoke token A", func() bool {
		a := httpDo(t, "GET", base+"/v1/connectors", tokenA)
		return a.status == 403 && strings.Contains(a.body, "ACCESS_REVOKED")
	})
	if a := httpDo(t, "GET", base+"/v1/connectors", tokenB); a.status != 200 {
		t.Errorf("token B after the reload: %d %s", a.status, a.body)
	}

	writeCfg("    - {scope: nobody, token: env:TOKEN_B}")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 30*time.Second, "the broken file refused", func() bool {
		return strings.Contains(logs.String(), "config reload refused")
	})
	if a := httpDo(t, "GET", base+"/v1/connectors", tokenB); a.status != 200 {
		t.Errorf("token B after a refused reload: %d", a.status)
	}
	if a := httpDo(t, "GET", base+"/v1/connectors", tokenC); a.status != 200 {
		t.Errorf("token C after a refused reload: %d", a.status)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := waitExit(t, cmd, 30*time.Second, logs); err != nil {
		t.Fatalf("relay did not stop cleanly: %v\n%s", err, logs)
	}
	select {
	case <-streamEnded:
	case <-time.After(10 * time.Second):
		t.Error("the subscription outlived the relay")
	}
	for _, secret := range []string{tokenA, tokenB, tokenC} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("a token appears in the logs")
		}
	}
	if !strings.Contains(logs.String(), `"msg":"config reloaded"`) {
		t.Errorf("the reload was not logged:\n%s", logs)
	}

	// Restarted with tokens B and C only, the relay still knows token A was revoked:
	// 403 ACCESS_REVOKED, not 401 as for a token never configured.
	writeCfg("    - {scope: admin, token: env:TOKEN_B}\n    - {scope: \"account:acct_1\", token: env:TOKEN_C}")
	startRelay(t, bin, path, tokenEnv...)
	waitUntil(t, 60*time.Second, "the restarted relay's API", func() bool {
		return httpDo(t, "GET", base+"/v1/connectors", tokenB).status == 200
	})
	if a := httpDo(t, "GET", base+"/v1/connectors", tokenA); a.status != 403 || !strings.Contains(a.body, "ACCESS_REVOKED") {
		t.Errorf("token A after a restart: %d %s, want 403 ACCESS_REVOKED", a.status, a.body)
	}
	if a := httpDo(t, "GET", base+"/v1/connectors", "token-never-configured"); a.status != 401 {
		t.Errorf("a token never configured after a restart: %d %s, want 401", a.status, a.body)
	}
}
