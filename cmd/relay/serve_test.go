package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/mercamap/relay/internal/jobevent"
	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/testpeer"
	"github.com/mercamap/relay/internal/waittest"
)

const testKeyHex = "f4ab532dc6dcf763bf8139e75e9bef6d8af5c329ce3e03ba05fd39ff729f6ffa"

// buildRelay compiles the relay binary once per test.
func buildRelay(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "relay")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// writeConfig writes a minimal relay config for one account and returns its path.
func writeConfig(t *testing.T, amqpURL, redisURL, exchange, queue string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "relay.yaml")
	cfg := fmt.Sprintf(`
rabbitmq:
  url: %s
  exchange: %s
  queue: %s
redis:
  url: %s
signature:
  keys: [env:TEST_HMAC_KEY]
api:
  listen: 127.0.0.1:0   # any free port: tests run relays side by side
  metrics_listen: 127.0.0.1:0
accounts:
  - id: acct_1
    tenants: [single-tenant]
`, amqpURL, exchange, queue, redisURL)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// startRelay starts `relay serve --config cfg` with the test's signing key and static AWS
// credentials for the cloud test servers (plus extraEnv), its stderr in the returned
// buffer; the process is killed when the test ends.
func startRelay(t *testing.T, bin, cfg string, extraEnv ...string) (*exec.Cmd, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--config", cfg)
	cmd.Env = append(append(os.Environ(), "TEST_HMAC_KEY="+testKeyHex,
		"AWS_ACCESS_KEY_ID=AKIDRELAYTEST", "AWS_SECRET_ACCESS_KEY=test", "AWS_EC2_METADATA_DISABLED=true"), extraEnv...)
	logs := &syncBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return cmd, logs
}

func TestKilledBetweenAppendAndAckStoresTheRedeliveryOnce(t *testing.T) {
	amqpURL, redisURL := testpeer.SharedRabbitMQ(t), testpeer.RedisURL(t)
	bin := buildRelay(t)
	suffix := fmt.Sprint(time.Now().UnixNano())
	exchange, queue := "relay-test-kill-"+suffix, "relay-test-kill-"+suffix
	cfg := writeConfig(t, amqpURL, redisURL, exchange, queue)

	// The first relay dies by SIGKILL right after its first append, before the ack.
	first, logs := startRelay(t, bin, cfg, "RELAY_TEST_FAILPOINT=kill-after-append")
	conn, ch := brokerChannel(t, amqpURL, queue)
	waitConsumers(t, conn, queue, 1)
	key, _ := hex.DecodeString(testKeyHex)
	job := jobevent.Job{ID: "0190f2a4-dead-7000-8000-000000000001", Status: "completed"}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	dc, err := ch.PublishWithDeferredConfirm(exchange, job.RoutingKey(), false, false, jobevent.Build(job, exchange, key, time.Now()))
	if err != nil || !dc.Wait() {
		t.Fatalf("publish: %v", err)
	}
	err = waitExit(t, first, 30*time.Second, logs)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("first relay ended with %v, want SIGKILL; logs:\n%s", err, logs)
	}

	st, err := store.Open(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	logLen := func() int {
		entries, err := st.ReadLog(context.Background(), "acct_1", "0", 100)
		if err != nil {
			t.Fatal(err)
		}
		return len(entries)
	}
	if n := logLen(); n != 1 {
		t.Fatalf("after the kill the log holds %d events, want 1", n)
	}
	ready := func() int {
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum})
		if err != nil {
			t.Fatal(err)
		}
		return q.Messages
	}
	// The broker puts the unacked message back once it sees the connection gone.
	waitUntil(t, 30*time.Second, "the unacked message back in the queue", func() bool { return ready() == 1 })

	// The second relay gets the redelivery, sees the ce-id, and acks it as a duplicate.
	// Its metrics port is known, so the test waits for the ack itself: a message taken
	// off the queue and not yet acked when SIGTERM comes goes back to the queue, rightly.
	metricsListen := fmt.Sprintf("127.0.0.1:%d", testpeer.FreePort(t))
	cfg2 := filepath.Join(t.TempDir(), "relay.yaml")
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg2, []byte(strings.Replace(string(b), "metrics_listen: 127.0.0.1:0", "metrics_listen: "+metricsListen, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	second, logs := startRelay(t, bin, cfg2)
	waitUntil(t, 30*time.Second, "the redelivery acked as a duplicate", func() bool {
		return strings.Contains(metrics(metricsListen), "relay_events_duplicate_total 1")
	})
	if err := second.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := waitExit(t, second, 30*time.Second, logs); err != nil {
		t.Fatalf("second relay did not stop cleanly on SIGTERM: %v\n%s", err, logs)
	}
	if n := ready(); n != 0 {
		t.Fatalf("%d messages back in the queue after shutdown: the redelivery was not acked\n%s", n, logs)
	}
	if n := logLen(); n != 1 {
		t.Fatalf("the log holds %d events, want exactly 1", n)
	}
}

// waitUntil and waitFor are the shared wait (waittest), under the names these tests use.
var (
	waitUntil = waittest.For
	waitFor   = waittest.Within
)

// waitExit waits for a relay process to end, failing the test (with its logs) when it
// does not within timeout.
func waitExit(t *testing.T, cmd *exec.Cmd, timeout time.Duration, logs fmt.Stringer) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(timeout):
		_ = cmd.Process.Signal(syscall.SIGQUIT) // dumps its goroutines into the logs
		<-done
		t.Fatalf("relay did not exit within %s; logs:\n%s", timeout, logs)
		return nil
	}
}

// brokerChannel opens a channel for the test's own publishing and inspection, and
// deletes the relay's queue when the test ends.
func brokerChannel(t testing.TB, amqpURL, queue string) (*amqp.Connection, *amqp.Channel) {
	t.Helper()
	conn, err := amqp.Dial(amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = ch.QueueDelete(queue, false, false, false) })
	return conn, ch
}

// waitConsumers waits until n relays consume the queue: declared, bound and subscribed.
func waitConsumers(t *testing.T, conn *amqp.Connection, queue string, n int) {
	t.Helper()
	waitUntil(t, 30*time.Second, fmt.Sprintf("%d relay(s) consuming %s", n, queue), func() bool {
		probe, err := conn.Channel()
		if err != nil {
			return false
		}
		defer probe.Close()
		q, err := probe.QueueDeclarePassive(queue, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum})
		return err == nil && q.Consumers == n
	})
}

// TestServeRefusesAQueueDeclaredWithOtherArguments: an existing deployment's queue (quorum,
// no single active consumer) cannot be changed in place, so serve exits, non-zero, with
// an error that names the queue and the operator guide's migration section.
func TestServeRefusesAQueueDeclaredWithOtherArguments(t *testing.T) {
	amqpURL, redisURL := testpeer.SharedRabbitMQ(t), testpeer.RedisURL(t)
	bin := buildRelay(t)
	suffix := fmt.Sprint(time.Now().UnixNano())
	exchange, queue := "relay-test-old-queue-"+suffix, "relay-test-old-queue-"+suffix
	_, ch := brokerChannel(t, amqpURL, queue)
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}); err != nil {
		t.Fatal(err)
	}
	relay, logs := startRelay(t, bin, writeConfig(t, amqpURL, redisURL, exchange, queue))
	err := waitExit(t, relay, 60*time.Second, logs)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("serve ended with %v, want exit status 1; logs:\n%s", err, logs)
	}
	last := logs.String()[strings.LastIndex(strings.TrimSpace(logs.String()), "\n")+1:]
	for _, want := range []string{"relay: queue", queue, "inequivalent arg", "Migrate the queue"} {
		if !strings.Contains(last, want) {
			t.Errorf("the last line does not say %q: %s", want, last)
		}
	}
}
