package ingest

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/mercamap/relay/internal/jobevent"
	"github.com/mercamap/relay/internal/signature"
	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/testpeer"
	"github.com/mercamap/relay/internal/waittest"
)

const account = "acct_1"

// tenantRouter sends every event of one tenant to one account.
type tenantRouter map[string]string

func (r tenantRouter) AccountsFor(tenant, _ string) []string {
	if acct, ok := r[tenant]; ok {
		return []string{acct}
	}
	return nil
}

// rig is one consumer wired to a broker and a Redis, with its own queues.
type rig struct {
	t       *testing.T
	amqpURL string
	store   *store.Store
	key     []byte
	topo    Topology
	metrics *Metrics
	opts    Options
	stop    func()
}

func newRig(t *testing.T, amqpURL, redisURL, exchange string) *rig {
	t.Helper()
	st, err := store.Open(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	key := make([]byte, 32)
	for i := range key {
		key[i] = byte(i)
	}
	name := fmt.Sprintf("relay-test-%s-%d", t.Name(), time.Now().UnixNano())
	r := &rig{t: t, amqpURL: amqpURL, store: st, key: key, metrics: NewMetrics(nil)}
	r.topo = Topology{
		Exchange: exchange, Queue: name, RoutingKeys: []string{"job.completed", "job.failed"},
		QuarantineExchange: name + ".quarantine", QuarantineQueue: name + ".quarantine",
	}
	r.opts = Options{
		URLs: []string{amqpURL}, Topology: r.topo, Prefetch: 64,
		Verifier:    signature.Verifier{Keys: [][]byte{key}, MaxAge: time.Hour, MaxFuture: time.Minute},
		Store:       st,
		Router:      tenantRouter{"single-tenant": account},
		DedupWindow: 2 * time.Hour, LogRetention: 2 * time.Hour,
		Metrics: r.metrics,
	}
	t.Cleanup(func() { r.deleteQueues() })
	return r
}

// start runs the consumer until stop is called (or the test ends).
func (r *rig) start() {
	ctx, cancel := context.WithCancel(context.Background())
	c := New(r.opts)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = c.Run(ctx) }()
	r.stop = func() { cancel(); wg.Wait() }
	r.t.Cleanup(r.stop)
	waittest.For(r.t, 30*time.Second, "consumer connected", c.Connected)
}

func (r *rig) channel() *amqp.Channel {
	r.t.Helper()
	conn, err := amqp.Dial(r.amqpURL)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		r.t.Fatal(err)
	}
	return ch
}

func (r *rig) deleteQueues() {
	conn, err := amqp.Dial(r.amqpURL)
	if err != nil {
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	for _, q := range r.topo.Queues() {
		_, _ = ch.QueueDelete(q, false, false, false)
	}
	if r.topo.Partitions > 1 {
		_, _ = ch.QueueDelete(r.topo.ReplicasQueue(), false, false, false)
		_ = ch.ExchangeDelete(r.topo.HashExchange(), false, false)
	}
	_, _ = ch.QueueDelete(r.topo.QuarantineQueue, false, false, false)
	_ = ch.ExchangeDelete(r.topo.QuarantineExchange, false, false)
	_, _ = ch.QueueDelete(r.topo.DroppedQueue(), false, false, false)
	_ = ch.ExchangeDelete(r.topo.DroppedExchange(), false, false)
}

// publish sends messages with publisher confirms and waits for every confirm.
func (r *rig) publish(ch *amqp.Channel, routingKey string, msgs ...amqp.Publishing) {
	r.t.Helper()
	if err := ch.Confirm(false); err != nil {
		r.t.Fatal(err)
	}
	for _, m := range msgs {
		dc, err := ch.PublishWithDeferredConfirm(r.topo.Exchange, routingKey, false, false, m)
		if err != nil {
			r.t.Fatal(err)
		}
		if !dc.Wait() {
			r.t.Fatal("publish not confirmed")
		}
	}
}

// publishJobs publishes n completed jobs (ids 0190f2a4-<series>-7000-8000-<i>) with
// publisher confirms, all in flight at once, and waits for every confirm; it returns their
// event ids in publish order.
func (r *rig) publishJobs(ch *amqp.Channel, series string, n int) []string {
	r.t.Helper()
	if err := ch.Confirm(false); err != nil {
		r.t.Fatal(err)
	}
	var ids []string
	var confirms []*amqp.DeferredConfirmation
	for i := range n {
		job := jobevent.Job{ID: fmt.Sprintf("0190f2a4-%s-7000-8000-%012d", series, i), Status: "completed"}
		dc, err := ch.PublishWithDeferredConfirm(r.topo.Exchange, job.RoutingKey(), false, false, jobevent.Build(job, r.topo.Exchange, r.key, time.Now()))
		if err != nil {
			r.t.Fatal(err)
		}
		confirms = append(confirms, dc)
		ids = append(ids, job.EventID())
	}
	for i, dc := range confirms {
		if !dc.Wait() {
			r.t.Fatalf("publish %d not confirmed", i)
		}
	}
	return ids
}

func (r *rig) log() []store.LogEntry {
	r.t.Helper()
	entries, err := r.store.ReadLog(context.Background(), account, "0", 100000)
	if err != nil {
		r.t.Fatal(err)
	}
	return entries
}

// readyMessages is the queue's count of messages waiting (neither delivered nor acked).
func (r *rig) readyMessages(ch *amqp.Channel, queue string) int {
	r.t.Helper()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum})
	if err != nil {
		r.t.Fatal(err)
	}
	return q.Messages
}

type vectorFile struct {
	ExternalKeyHex string `json:"external_hmac_key_hex"`
	Cases          []struct {
		Name       string         `json:"name"`
		Exchange   string         `json:"exchange"`
		RoutingKey string         `json:"routing_key"`
		Headers    map[string]any `json:"headers"`
		Body       string         `json:"body"`
		Expect     string         `json:"expect"`
	} `json:"cases"`
}

func TestVectorsAreAcceptedDeduplicatedOrQuarantinedWithTheirReason(t *testing.T) {
	raw, err := os.ReadFile("../../testdata/vectors/fetcher-v1.json")
	if err != nil {
		t.Fatal(err)
	}
	var vf vectorFile
	if err := json.Unmarshal(raw, &vf); err != nil {
		t.Fatal(err)
	}
	wantReason := map[string]string{
		"tampered-body":               "bad_signature",
		"replayed-under-other-tenant": "bad_signature",
		"replayed-on-other-route":     "bad_signature",
		"unknown-signature-version":   "unknown_signature_version",
		"missing-signature":           "missing_signature",
	}
	r := newRig(t, testpeer.SharedRabbitMQ(t), testpeer.RedisURL(t), vf.Cases[0].Exchange)
	key, _ := hex.DecodeString(vf.ExternalKeyHex)
	// The vectors are signed in the past: pin the clock to their time.
	r.opts.Verifier = signature.Verifier{Keys: [][]byte{key}, MaxAge: 5 * time.Minute, MaxFuture: 30 * time.Second,
		Now: func() time.Time { return time.Unix(1750000040, 0) }}
	r.start()
	ch := r.channel()

	var accepted []string
	for _, c := range vf.Cases {
		headers := amqp.Table{}
		for k, v := range c.Headers {
			switch v := v.(type) {
			case string:
				headers[k] = []byte(v) // byte arrays, as the Worker sends them
			case float64:
				headers[k] = int32(v)
			}
		}
		r.publish(ch, c.RoutingKey, amqp.Publishing{Headers: headers, ContentType: "application/json",
			DeliveryMode: amqp.Persistent, Body: []byte(c.Body), MessageId: c.Name})
		if c.Expect == "accept" {
			accepted = append(accepted, c.Headers["ce-id"].(string))
		}
	}
	waittest.For(t, 20*time.Second, "every vector acked", func() bool { return testutil.ToFloat64(r.metrics.Acked) == float64(len(vf.Cases)) })

	entries := r.log()
	if len(entries) != len(accepted) {
		t.Fatalf("log holds %d events, want %d (%v)", len(entries), len(accepted), accepted)
	}
	for i, e := range entries {
		if e.EventID != accepted[i] {
			t.Errorf("log[%d] = %s, want %s", i, e.EventID, accepted[i])
		}
	}
	if got := testutil.ToFloat64(r.metrics.Duplicates); got != 1 {
		t.Errorf("duplicates = %v, want 1 (completed-repaired-duplicate)", got)
	}
	got := map[string]string{}
	for {
		d, ok, err := ch.Get(r.topo.QuarantineQueue, true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		reason, _ := d.Headers["x-relay-reason"].(string)
		got[d.MessageId] = reason
		for _, c := range vf.Cases {
			if c.Name == d.MessageId && string(d.Body) != c.Body {
				t.Errorf("%s: quarantined body differs from the original", c.Name)
			}
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(wantReason) {
		t.Errorf("quarantined = %v\nwant %v", got, wantReason)
	}
	if n := r.readyMessages(ch, r.topo.Queue); n != 0 {
		t.Errorf("%d messages left in the queue", n)
	}
}

func TestReemittedEventIsAckedAndStoredOnce(t *testing.T) {
	r := newRig(t, testpeer.SharedRabbitMQ(t), testpeer.RedisURL(t), "relay-test-reemit")
	r.start()
	ch := r.channel()
	job := jobevent.Job{ID: "0190f2a4-aaaa-7bbb-8ccc-000000000001", Status: "completed", StoreID: "st_1"}
	first := time.Now()
	r.publish(ch, job.RoutingKey(),
		jobevent.Build(job, r.topo.Exchange, r.key, first),
		jobevent.Build(job, r.topo.Exchange, r.key, first.Add(31*time.Second))) // new t and ce-time
	waittest.For(t, 10*time.Second, "both messages acked", func() bool { return testutil.ToFloat64(r.metrics.Acked) == 2 })
	entries := r.log()
	if len(entries) != 1 || entries[0].EventID != job.EventID() {
		t.Fatalf("log = %+v, want exactly one %s", entries, job.EventID())
	}
	if entries[0].Time != first.UTC().Format(time.RFC3339Nano) {
		t.Errorf("stored ce-time %s, want the first emit's", entries[0].Time)
	}
	r.stop()
	if n := r.readyMessages(ch, r.topo.Queue); n != 0 {
		t.Errorf("%d messages not acked", n)
	}
}

func TestEventForNoAccountIsAckedAndCounted(t *testing.T) {
	r := newRig(t, testpeer.SharedRabbitMQ(t), testpeer.RedisURL(t), "relay-test-unrouted")
	r.start()
	ch := r.channel()
	job := jobevent.Job{ID: "0190f2a4-aaaa-7bbb-8ccc-000000000002", Status: "failed", Tenant: "tenant-nobody-has"}
	r.publish(ch, job.RoutingKey(), jobevent.Build(job, r.topo.Exchange, r.key, time.Now()))
	waittest.For(t, 10*time.Second, "message acked", func() bool { return testutil.ToFloat64(r.metrics.Acked) == 1 })
	if got := testutil.ToFloat64(r.metrics.Unrouted); got != 1 {
		t.Errorf("unrouted = %v, want 1", got)
	}
	if n := len(r.log()); n != 0 {
		t.Errorf("log holds %d events, want 0", n)
	}
}

func TestBrokerRestartedWhilePublishingLosesNothing(t *testing.T) {
	broker := testpeer.StartRabbitMQ(t)
	r := newRig(t, broker.URL(), testpeer.RedisURL(t), "relay-test-broker-restart")
	r.start()

	// A publisher that, like the Worker, retries until each event is confirmed.
	const total = 400
	confirmed := make(chan string, total)
	pubCtx, stopPub := context.WithCancel(context.Background())
	defer stopPub()
	go func() {
		for i := 0; i < total && pubCtx.Err() == nil; {
			conn, err := amqp.Dial(broker.URL())
			if err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			ch, err := conn.Channel()
			if err == nil {
				err = ch.Confirm(false)
			}
			for err == nil && i < total && pubCtx.Err() == nil {
				job := jobevent.Job{ID: fmt.Sprintf("0190f2a4-0000-7000-8000-%012d", i), Status: "completed"}
				var dc *amqp.DeferredConfirmation
				dc, err = ch.PublishWithDeferredConfirm(r.topo.Exchange, job.RoutingKey(), false, false,
					jobevent.Build(job, r.topo.Exchange, r.key, time.Now()))
				if err == nil && dc.Wait() {
					confirmed <- job.EventID()
					i++
					time.Sleep(2 * time.Millisecond) // pace the load so the restart lands mid-stream
				} else if err == nil {
					err = fmt.Errorf("nacked")
				}
			}
			conn.Close()
		}
		close(confirmed)
	}()

	waittest.For(t, 30*time.Second, "some events stored", func() bool { return len(r.log()) >= 50 })
	broker.Stop(t)
	broker.Start(t)

	want := map[string]bool{}
	for id := range confirmed {
		want[id] = true
	}
	if len(want) != total {
		t.Fatalf("publisher confirmed %d of %d", len(want), total)
	}
	waittest.For(t, 60*time.Second, "every confirmed event stored", func() bool { return len(r.log()) >= total })
	seen := map[string]int{}
	for _, e := range r.log() {
		seen[e.EventID]++
	}
	for id := range want {
		if seen[id] != 1 {
			t.Errorf("%s stored %d times", id, seen[id])
		}
	}
}

func TestRedisDownAcksNothingAndLosesNothing(t *testing.T) {
	redis := testpeer.StartRedis(t, testpeer.WithAOF())
	r := newRig(t, testpeer.SharedRabbitMQ(t), redis.URL(), "relay-test-redis-down")
	r.start()
	ch := r.channel()
	jobs := func(from, to int) []amqp.Publishing {
		var out []amqp.Publishing
		for i := from; i < to; i++ {
			job := jobevent.Job{ID: fmt.Sprintf("0190f2a4-1111-7000-8000-%012d", i), Status: "failed"}
			out = append(out, jobevent.Build(job, r.topo.Exchange, r.key, time.Now()))
		}
		return out
	}
	r.publish(ch, "job.failed", jobs(0, 100)...)
	waittest.For(t, 10*time.Second, "first half acked", func() bool { return testutil.ToFloat64(r.metrics.Acked) == 100 })

	redis.Stop(t)
	r.publish(ch, "job.failed", jobs(100, 200)...)
	waittest.For(t, 30*time.Second, "the relay to hit the outage", func() bool { return testutil.ToFloat64(r.metrics.StoreErrors) >= 3 })
	if got := testutil.ToFloat64(r.metrics.Acked); got != 100 {
		t.Fatalf("acked %v messages while Redis was down, want still 100", got)
	}
	redis.Start(t)

	waittest.For(t, 20*time.Second, "every event acked", func() bool { return testutil.ToFloat64(r.metrics.Acked) == 200 })
	entries := r.log()
	seen := map[string]int{}
	for _, e := range entries {
		seen[e.EventID]++
	}
	if len(entries) != 200 || len(seen) != 200 {
		t.Fatalf("log holds %d entries for %d events, want 200 each", len(entries), len(seen))
	}
}

// TestSignedButUnusableMessagesAreQuarantinedWithTheirReason covers the reasons a
// correctly signed message can still be refused: unsigned headers that disagree with
// the signed ones, a missing CloudEvents attribute, a body that is not JSON.
func TestSignedButUnusableMessagesAreQuarantinedWithTheirReason(t *testing.T) {
	r := newRig(t, testpeer.SharedRabbitMQ(t), testpeer.RedisURL(t), "relay-test-unusable")
	r.start()
	ch := r.channel()
	now := time.Now()
	build := func(name string, job jobevent.Job, edit func(*amqp.Publishing)) amqp.Publishing {
		msg := jobevent.Build(job, r.topo.Exchange, r.key, now)
		edit(&msg)
		msg.MessageId = name
		return msg
	}
	job := func(n int) jobevent.Job {
		return jobevent.Job{ID: fmt.Sprintf("0190f2a4-bbbb-7000-8000-%012d", n), Status: "completed"}
	}
	cases := map[string]amqp.Publishing{
		TenantMismatch: build(TenantMismatch, job(1), func(m *amqp.Publishing) {
			m.Headers["ce-tenantid"] = []byte("tenant-b") // unsigned, routes elsewhere
		}),
		EventIDMismatch: build(EventIDMismatch, job(2), func(m *amqp.Publishing) {
			m.Headers["ce-id"] = []byte("fetcher.job.completed.someone-else") // would dodge dedup
		}),
		"not_a_cloudevent": build("not_a_cloudevent", job(3), func(m *amqp.Publishing) {
			delete(m.Headers, "ce-specversion")
		}),
		"body_not_json": {MessageId: "body_not_json"},
	}
	// A body that is not JSON, signed correctly (the signature covers the raw bytes).
	notJSON := jobevent.Job{ID: "", Status: "completed", Body: []byte("not json")}
	cases["body_not_json"] = build("body_not_json", notJSON, func(*amqp.Publishing) {})
	for _, m := range cases {
		r.publish(ch, "job.completed", m)
	}
	waittest.For(t, 10*time.Second, "every message acked", func() bool { return testutil.ToFloat64(r.metrics.Acked) == float64(len(cases)) })
	got := map[string]string{}
	for {
		d, ok, err := ch.Get(r.topo.QuarantineQueue, true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		got[d.MessageId], _ = d.Headers["x-relay-reason"].(string)
	}
	for name := range cases {
		if got[name] != name {
			t.Errorf("%s: quarantined with reason %q", name, got[name])
		}
	}
	if n := len(r.log()); n != 0 {
		t.Errorf("%d events stored, want none", n)
	}
}

// runUntilTopologyError runs a consumer of r until Run returns, failing the test if it
// keeps reconnecting instead; it returns Run's error and the *TopologyError in it, if any.
func (r *rig) runUntilTopologyError() (*TopologyError, error) {
	r.t.Helper()
	done := make(chan error, 1)
	go func() { done <- New(r.opts).Run(context.Background()) }()
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		r.t.Fatal("Run kept reconnecting on a declaration whose arguments cannot change")
	}
	var mismatch *TopologyError
	errors.As(err, &mismatch)
	return mismatch, err
}

func TestQueueDeclaredWithOtherArgumentsStopsRunWithTheMigrationHint(t *testing.T) {
	r := newRig(t, testpeer.SharedRabbitMQ(t), testpeer.RedisURL(t), "relay-test-old-queue")
	ch := r.channel()
	// The queue as earlier releases declared it: quorum, no single active consumer.
	if _, err := ch.QueueDeclare(r.topo.Queue, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}); err != nil {
		t.Fatal(err)
	}
	mismatch, err := r.runUntilTopologyError()
	if mismatch == nil || mismatch.Name != r.topo.Queue || !mismatch.Main {
		t.Fatalf("Run returned %v, want a TopologyError for queue %q", err, r.topo.Queue)
	}
	for _, want := range []string{r.topo.Queue, "inequivalent arg", "Migrate the queue"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

func TestTwoConsumersAppendInThePublishersOrder(t *testing.T) {
	r := newRig(t, testpeer.SharedRabbitMQ(t), testpeer.RedisURL(t), "relay-test-two-consumers")
	r.opts.Prefetch = 16 // small batches: many chances to interleave
	r.start()
	second := New(r.opts)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = second.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	waittest.For(t, 30*time.Second, "second consumer connected", second.Connected)

	const total = 600
	want := r.publishJobs(r.channel(), "2222", total)
	waittest.For(t, 60*time.Second, "every event in the log", func() bool { return len(r.log()) == total })
	outOfOrder := 0
	for i, e := range r.log() {
		if e.EventID != want[i] {
			outOfOrder++
		}
	}
	if outOfOrder > 0 {
		t.Fatalf("%d of %d log entries are not where the publisher's order puts them", outOfOrder, total)
	}
}
