package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/awstest"
	"github.com/mercamap/relay/internal/jobevent"
	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/testpeer"
)

// TestReloadOnboardsAnAccountWithoutLosingItsEvents runs the relay binary against
// RabbitMQ, Redis and an EventBridge behind an STS that enforces each destination's
// ExternalId, with events of two tenants published without pause (each confirmed):
//   - a SIGHUP with a broken file (or one whose AWS destinations keep no ExternalId) is
//     refused whole, every problem logged as check-config
//     prints it, and the running config keeps routing and delivering;
//   - a SIGHUP that adds an account (a new tenant) and its destination: every event of
//     that tenant published after "config reloaded" is in the account's log and at its
//     bus;
//   - a SIGHUP that removes the account again keeps its log and destination state, and
//     its events are unrouted from then on.
func TestReloadOnboardsAnAccountWithoutLosingItsEvents(t *testing.T) {
	amqpURL, redisURL := testpeer.SharedRabbitMQ(t), testpeer.RedisURL(t)
	sts, bus := awstest.NewSTS(t), awstest.NewEventBridge(t)
	bus.RequireSessionFrom(sts)
	bin := buildRelay(t)
	suffix := fmt.Sprint(time.Now().UnixNano())
	exchange, queue := "relay-test-reload-"+suffix, "relay-test-reload-"+suffix
	const (
		roleA = "arn:aws:iam::111122223333:role/relay-delivery"
		roleB = "arn:aws:iam::444455556666:role/relay-delivery"
		busB  = "arn:aws:events:us-east-1:444455556666:event-bus/acme"
	)
	st, err := store.Open(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	refA, refB := store.Ref{Account: "acct_1", ID: "orders-bus"}, store.Ref{Account: "acct_2", ID: "acme-bus"}
	externalID := func(ref store.Ref) string {
		s, err := st.LoadState(ctx, ref)
		if err != nil {
			return ""
		}
		return s.ExternalID
	}
	// Each role trusts exactly the ExternalId the relay issued its destination.
	sts.RequireExternalIDOf(roleA, func() string { return externalID(refA) })
	sts.RequireExternalIDOf(roleB, func() string { return externalID(refB) })

	base := fmt.Sprintf(`
identity: {name: mercamap, aws_principal_arn: "arn:aws:iam::999999999999:role/relay", external_id_secret: external-id-secret-for-the-test-0123456789}
rabbitmq: {url: %s, exchange: %s, queue: %s, prefetch: 32}
redis: {url: %s}
signature: {keys: [env:TEST_HMAC_KEY]}
api: {listen: "127.0.0.1:0", metrics_listen: "127.0.0.1:0"}
aws:
  region: us-east-1
  endpoints: {sts: %s, events: %s}
delivery:
  lease_ttl: 1s
  not_taken_backoff: {initial: 10ms, max: 200ms}
  setup_check: {initial: 20ms, max: 200ms}  # a pending destination is checked again soon
`, amqpURL, exchange, queue, redisURL, sts.URL, bus.URL)
	oneAccount := base + `
accounts:
  - {id: acct_1, tenants: [single-tenant]}
destinations:
  - {id: orders-bus, account: acct_1, connector: eventbridge, bus_arn: "arn:aws:events:us-east-1:111122223333:event-bus/orders", role_arn: "` + roleA + `"}
`
	twoAccounts := strings.Replace(oneAccount, "destinations:", "  - {id: acct_2, tenants: [tenant-b]}\ndestinations:", 1) +
		`  - {id: acme-bus, account: acct_2, connector: eventbridge, bus_arn: "` + busB + `", role_arn: "` + roleB + `"}
`
	broken := twoAccounts + `  - {id: broken, account: acct_3, connector: eventbridge, bus_arn: "arn:aws-us-gov:events:us-gov-west-1:111122223333:event-bus/x", role_arn: "arn:aws:iam::444455556666:role/r"}
`
	path := filepath.Join(t.TempDir(), "relay.yaml")
	write := func(cfg string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(oneAccount)

	cmd, logs := startRelay(t, bin, path)
	conn, ch := brokerChannel(t, amqpURL, queue)
	waitConsumers(t, conn, queue, 1)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	key, _ := hex.DecodeString(testKeyHex)
	var seq atomic.Int64
	// publish sends one event of tenant and waits for the broker's confirm; it returns the
	// event's ce-id.
	publish := func(tenant string) (string, error) {
		job := jobevent.Job{ID: fmt.Sprintf("0190f2a4-7e10-7000-8000-%012d", seq.Add(1)), Status: "completed", Tenant: tenant}
		dc, err := ch.PublishWithDeferredConfirm(exchange, job.RoutingKey(), false, false, jobevent.Build(job, exchange, key, time.Now()))
		if err != nil {
			return "", err
		}
		if !dc.Wait() {
			return "", fmt.Errorf("publish of %s nacked", job.EventID())
		}
		return job.EventID(), nil
	}
	logIDs := func(acct string) []string {
		entries, err := st.ReadLog(ctx, acct, "0", 1_000_000)
		if err != nil {
			t.Fatal(err)
		}
		ids := make([]string, len(entries))
		for i, e := range entries {
			ids[i] = e.EventID
		}
		return ids
	}
	// handled publishes one event of tenant, then one of acct_1, and waits until the
	// second is in acct_1's log: ingest handles in order, so the first was handled too.
	handled := func(tenant string) string {
		t.Helper()
		id, err := publish(tenant)
		if err != nil {
			t.Fatal(err)
		}
		marker, err := publish("single-tenant")
		if err != nil {
			t.Fatal(err)
		}
		waitUntil(t, 30*time.Second, "acct_1's event stored", func() bool { return slices.Contains(logIDs("acct_1"), marker) })
		return id
	}
	reloads := func() int { return strings.Count(logs.String(), `"msg":"config reloaded"`) }

	// A broken file: refused whole, each problem logged as check-config prints it.
	write(broken)
	var checkOut, checkErr strings.Builder
	if err := run(ctx, []string{"check-config", "--config", path}, getenv(map[string]string{"TEST_HMAC_KEY": testKeyHex}),
		nil, &checkOut, &checkErr); err == nil {
		t.Fatalf("check-config took the broken file:\n%s", checkOut.String())
	}
	printed := strings.Split(strings.TrimSpace(checkOut.String()), "\n")
	if len(printed) < 2 {
		t.Fatalf("want at least two problems in the broken file, check-config printed:\n%s", checkOut.String())
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	var logged []string
	waitUntil(t, 30*time.Second, "every problem of the broken file logged", func() bool {
		logged = refusedProblems(t, logs.String())
		return len(logged) >= len(printed)
	})
	if !slices.Equal(slices.Sorted(slices.Values(logged)), slices.Sorted(slices.Values(printed))) {
		t.Fatalf("the refused reload logged\n%s\ncheck-config printed\n%s", strings.Join(logged, "\n"), strings.Join(printed, "\n"))
	}
	handled("tenant-b")
	if ids := logIDs("acct_2"); len(ids) != 0 || externalID(refB) != "" || reloads() != 0 {
		t.Fatalf("the refused file was partly applied: acct_2's log holds %d events, acme-bus ExternalId %q, %d reloads",
			len(ids), externalID(refB), reloads())
	}

	// A file whose AWS destinations would keep their ExternalIds in Redis alone (the
	// secret gone, no pin): refused the same way, each destination named with the fix.
	write(strings.Replace(twoAccounts, ", external_id_secret: external-id-secret-for-the-test-0123456789", "", 1))
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 30*time.Second, "the unkept ExternalIds logged", func() bool {
		return slices.ContainsFunc(refusedProblems(t, logs.String()), func(p string) bool {
			return strings.HasPrefix(p, "destinations[1].external_id: is not pinned and identity.external_id_secret is not set")
		})
	})
	handled("tenant-b")
	if ids := logIDs("acct_2"); len(ids) != 0 || externalID(refB) != "" || reloads() != 0 {
		t.Fatalf("the unkept file was partly applied: acct_2's log holds %d events, acme-bus ExternalId %q, %d reloads",
			len(ids), externalID(refB), reloads())
	}

	// Events of both tenants flow while acct_2 and its destination are added.
	const wantAfter = 200 // tenant-b events to publish after the reload is logged
	var reloaded atomic.Bool
	var mu sync.Mutex
	var before, after []string // tenant-b ce-ids, published before / after "config reloaded" was seen
	var sentA []string         // acct_1's ce-ids
	pubErr := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			tenant := "single-tenant"
			if i%2 == 1 {
				tenant = "tenant-b"
			}
			seen := reloaded.Load() // read before publishing: "after" means published after the line
			id, err := publish(tenant)
			if err != nil {
				pubErr <- err
				return
			}
			mu.Lock()
			switch {
			case tenant == "single-tenant":
				sentA = append(sentA, id)
			case seen:
				after = append(after, id)
			default:
				before = append(before, id)
			}
			n := len(after)
			mu.Unlock()
			if n == wantAfter {
				pubErr <- nil
				return
			}
		}
	}()
	waitUntil(t, 30*time.Second, "events flowing before the reload", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(before) >= 50
	})
	write(twoAccounts)
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 30*time.Second, "config reloaded", func() bool { return reloads() == 1 })
	reloaded.Store(true)
	select {
	case err := <-pubErr:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("publishing did not finish")
	}

	missing := func(want, got []string) []string {
		var out []string
		for _, id := range want {
			if !slices.Contains(got, id) {
				out = append(out, id)
			}
		}
		return out
	}
	delivered := func(busARN string) []string {
		ids, err := bus.EventIDs(busARN)
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		notLogged, notDelivered := missing(after, logIDs("acct_2")), missing(after, delivered(busB))
		if len(notLogged)+len(notDelivered) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("of %d tenant-b events published after the reload, %d are not in acct_2's log and %d not at its bus "+
				"(%d published before it); logs but deliveries:\n%s", len(after), len(notLogged), len(notDelivered), len(before), notable(logs.String()))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if lost := missing(sentA, logIDs("acct_1")); len(lost) > 0 {
		t.Fatalf("%d of acct_1's %d events are not in its log", len(lost), len(sentA))
	}
	t.Logf("%d tenant-b events published before the reload was logged, %d in acct_2's log", len(before), len(logIDs("acct_2")))

	// Removing acct_2 keeps its log and destination state; its events are unrouted.
	keptLog, keptID := logIDs("acct_2"), externalID(refB)
	write(oneAccount)
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 30*time.Second, "the second config reloaded", func() bool { return reloads() == 2 })
	unrouted := handled("tenant-b")
	if got := logIDs("acct_2"); !slices.Equal(got, keptLog) {
		t.Fatalf("acct_2's log after its removal: %d events (held %d); %s stored: %v",
			len(got), len(keptLog), unrouted, slices.Contains(got, unrouted))
	}
	if id := externalID(refB); id == "" || id != keptID {
		t.Fatalf("acme-bus ExternalId after acct_2's removal: %q, want %q kept", id, keptID)
	}
	if strings.Contains(logs.String(), "takes effect at the next restart") {
		t.Errorf("a reload of accounts and destinations was reported as needing a restart:\n%s", notable(logs.String()))
	}
}

// refusedProblems returns the problems the relay logged for refused reloads.
func refusedProblems(t *testing.T, logs string) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(logs, "\n") {
		var rec struct {
			Msg, Problem string
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "config reload refused; the running config stays" && rec.Problem != "" {
			out = append(out, rec.Problem)
		}
	}
	return out
}

// notable drops the relay's per-delivery lines from its logs.
func notable(logs string) string {
	var out []string
	for _, line := range strings.Split(logs, "\n") {
		if !strings.Contains(line, `"msg":"delivery attempt"`) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
