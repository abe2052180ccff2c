package main

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	vkit "cloud.google.com/go/pubsub/v2/apiv1"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	amqp "github.com/rabbitmq/amqp091-go"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/mercamap/relay/internal/awstest"
	"github.com/mercamap/relay/internal/jobevent"
	"github.com/mercamap/relay/internal/netdelay"
	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/testpeer"
)

// The delivery window end to end (issue 53's first "Done when"): one destination of
// each connector, each bus 100 ms away, nothing set but the defaults (in_flight 16,
// uncommitted_max 32). Each subtest offers 3,000 events over 300 stores at 300 a second
// to the same two replicas: every one at each bus within 35 s of the first publish,
// each store's events first arriving in the broker's confirmed order, none missing;
// none twice, but for what a SIGKILL of the replica writing may send again (at most
// in_flight + uncommitted_max a destination under state format 2).
const (
	farLatency  = 100 * time.Millisecond // how late every bus answers
	farEvents   = 3000
	farStores   = 300
	farRate     = 300              // events offered a second
	farWithin   = 35 * time.Second // from the first publish to the last event at each bus
	farInFlight = 16               // delivery.in_flight's default
	farUncommit = 32               // delivery.uncommitted_max's default
)

// TestBusesFarAwayTakeEveryEventWithinTheirRoundTripsInOrder: the same deployment
// through three runs of the offer: as it is ("late"), with every bus throttling for a
// while and one Pub/Sub ordering key failing its publishes ("throttled": nothing
// counts, the key resumes in order), and with the replica writing SIGKILLed mid-stream
// ("sigkill": the other takes over).
func TestBusesFarAwayTakeEveryEventWithinTheirRoundTripsInOrder(t *testing.T) {
	// Its 35 s bound is a wall time: it runs after the suite, alone on the machine.
	if os.Getenv("RELAY_TEST_ALONE") == "" {
		t.Skip("a wall-time bound: runs alone (RELAY_TEST_ALONE=1), as make test does after the suite")
	}
	d := startFar(t)
	t.Run("late", func(t *testing.T) {
		o := d.offer(t, 0)
		d.settle(t, o, nil)
	})
	t.Run("throttled", func(t *testing.T) {
		o := d.offer(t, 1)
		// Once the windows run full, each bus refuses the next 30 writes as a
		// throttled bus does (not taken), and one store's next two Pub/Sub publishes
		// fail (UNAVAILABLE): that key must resume, in order.
		d.waitArrived(t, o, 300)
		before := d.notTaken(t)
		key := o.storeLater(t, 3)
		d.bus.FailNext(30, awstest.Throttling)
		d.stream.FailNext(30, awstest.ProvisionedThroughput)
		d.faults.failNext(30, status.Error(codes.ResourceExhausted, "Publish rate exceeded"))
		d.faults.failKey(key, 2, status.Error(codes.Unavailable, "The service is currently unavailable"))
		d.settle(t, o, nil)
		if left := d.faults.left(); left > 0 {
			t.Errorf("%d injected Pub/Sub failures never answered: the throttle missed the run", left)
		}
		after := d.notTaken(t)
		for _, id := range farDests {
			want := 30
			if id == "orders-topic" {
				want = 32
			}
			if n := after[id] - before[id]; n != want {
				t.Errorf("%s: %d writes not taken recorded, want %d (each injected failure once)", id, n, want)
			}
		}
		d.checkNothingCounted(t)
	})
	t.Run("sigkill", func(t *testing.T) {
		o := d.offer(t, 2)
		d.waitArrived(t, o, 600)
		victim := d.killWriter(t)
		t.Logf("SIGKILLed relay %d, the lease holder of every destination, %s after the first publish",
			victim, time.Since(o.began).Round(time.Millisecond))
		d.settle(t, o, map[string]int{"orders-bus": farInFlight + farUncommit, "orders-stream": farInFlight + farUncommit,
			"orders-topic": farInFlight + farUncommit})
		d.checkNothingCounted(t)
	})
}

// farDests are the destinations of the far deployment, one per connector.
var farDests = []string{"orders-bus", "orders-stream", "orders-topic"}

// farDeployment is two replicas of this tree on one queue and Redis, writing to an
// EventBridge bus, a Kinesis stream and a Pub/Sub topic, each answering farLatency late.
type farDeployment struct {
	redisURL, exchange string
	bus                *awstest.EventBridge
	stream             *awstest.FaultProxy // in front of kinesalite: throttles on demand
	kinesalite         string
	ps                 *pstest.Server
	faults             *publishFaults
	st                 *store.Store
	ch                 *amqp.Channel
	key                []byte
	procs              []*exec.Cmd
	logs               []*syncBuffer
	metrics            []string // each replica's operator listener
	killed             map[int]bool
	arrivals           map[string]*farArrivals // by destination
	polled             time.Time               // when poll last read them
}

func startFar(t *testing.T) *farDeployment {
	t.Helper()
	amqpURL := testpeer.SharedRabbitMQ(t)
	d := &farDeployment{redisURL: testpeer.StartRedis(t).URL(), killed: map[int]bool{}, faults: &publishFaults{byKey: map[string][]error{}}}
	d.key, _ = hex.DecodeString(testKeyHex)
	suffix := fmt.Sprint(time.Now().UnixNano())
	d.exchange = "relay-test-far-" + suffix
	queue := d.exchange
	sts := awstest.NewSTS(t)
	d.bus = awstest.NewEventBridge(t)
	d.bus.RequireSessionFrom(sts)
	d.kinesalite = awstest.StartKinesalite(t)
	awstest.CreateStream(t, d.kinesalite, "orders-stream")
	d.stream = awstest.NewFaultProxy(t, d.kinesalite)
	d.stream.RequireSessionFrom(sts)
	d.ps = pstest.NewServer(pstest.ServerReactorOption{FuncName: "Publish", Reactor: d.faults})
	t.Cleanup(func() { _ = d.ps.Close() })
	admin, err := vkit.NewTopicAdminClient(t.Context(), option.WithEndpoint(d.ps.Addr), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.CreateTopic(t.Context(), &pubsubpb.Topic{Name: "projects/acme-prod/topics/orders-topic",
		Labels: map[string]string{"mercamap-account": "acct_1"}}); err != nil {
		t.Fatal(err)
	}
	busURL, streamURL, psAddr := "http://"+farProxy(t, d.bus.URL), "http://"+farProxy(t, d.stream.URL), farProxy(t, d.ps.Addr)
	d.arrivals = map[string]*farArrivals{
		"orders-bus": {read: func(from int) ([]string, int) {
			entries := d.bus.Entries()
			var ids []string
			for _, e := range entries[from:] {
				ids = append(ids, eventIDOf(t, []byte(e.Detail)))
			}
			return ids, len(entries)
		}},
		// What kinesalite was handed (the proxy forwards at once; only the answer is
		// late): the stream's own records are read once a run is over.
		"orders-stream": {read: func(from int) ([]string, int) {
			calls := d.stream.Calls()
			var ids []string
			for _, c := range calls[from:] {
				if c.Operation != "PutRecord" || c.Failed {
					continue
				}
				data, _ := c.Input["Data"].(string)
				body, err := base64.StdEncoding.DecodeString(data)
				if err != nil {
					t.Fatalf("a PutRecord's Data %q: %v", data, err)
				}
				ids = append(ids, eventIDOf(t, body))
			}
			return ids, len(calls)
		}},
		"orders-topic": {read: func(from int) ([]string, int) {
			msgs := d.ps.Messages()
			var ids []string
			for _, m := range msgs[from:] {
				ids = append(ids, m.Attributes["event_id"])
			}
			return ids, len(msgs)
		}},
	}
	for _, a := range d.arrivals {
		a.first = map[string]time.Time{}
	}

	bin := buildRelay(t)
	_, d.ch = brokerChannel(t, amqpURL, queue)
	for range 2 {
		metricsListen := fmt.Sprintf("127.0.0.1:%d", testpeer.FreePort(t))
		d.metrics = append(d.metrics, metricsListen)
		cfg := filepath.Join(t.TempDir(), "relay.yaml")
		// Nothing about the window is set: delivery.in_flight and uncommitted_max keep
		// their defaults. The lease and setup check are short, as in every test here.
		if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`
identity:
  name: mercamap
  aws_principal_arn: arn:aws:iam::999999999999:role/relay
  gcp_service_account: relay@relay-test.iam.gserviceaccount.com
  external_id_secret: external-id-secret-for-the-test-0123456789
rabbitmq: {url: %s, exchange: %s, queue: %s}
redis: {url: "%s"}
signature: {keys: [env:TEST_HMAC_KEY]}
api: {listen: "127.0.0.1:0", metrics_listen: "%s"}
aws:
  region: us-east-1
  endpoints: {sts: %s, events: %s, kinesis: %s}
gcp: {pubsub_endpoint: %s}
delivery:
  lease_ttl: 1s
  setup_check: {initial: 20ms, max: 200ms}
accounts:
  - {id: acct_1, tenants: [single-tenant]}
destinations:
  - {id: orders-bus, account: acct_1, connector: eventbridge, bus_arn: "arn:aws:events:us-east-1:111122223333:event-bus/orders", role_arn: "%s"}
  - {id: orders-stream, account: acct_1, connector: kinesis, stream_arn: "arn:aws:kinesis:us-east-1:111122223333:stream/orders-stream", role_arn: "%s"}
  - {id: orders-topic, account: acct_1, connector: pubsub, project_id: acme-prod, topic_id: orders-topic}
`, amqpURL, d.exchange, queue, d.redisURL, metricsListen, sts.URL, busURL, streamURL, psAddr,
			farRole("orders-bus"), farRole("orders-stream"))), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd, logs := startRelay(t, bin, cfg)
		d.procs, d.logs = append(d.procs, cmd), append(d.logs, logs)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for i, l := range d.logs {
				lines := strings.Split(strings.TrimSpace(l.String()), "\n")
				t.Logf("--- relay %d, last 30 lines:\n%s", i, strings.Join(lines[max(0, len(lines)-30):], "\n"))
			}
		}
	})
	for _, id := range []string{"orders-bus", "orders-stream"} {
		sts.RequireExternalID(farRole(id), issuedExternalID(t, d.redisURL, "acct_1", id))
	}
	if d.st, err = store.Open(d.redisURL); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.st.Close() })
	for _, id := range farDests {
		waitUntil(t, 60*time.Second, id+" active", func() bool {
			s, err := d.st.LoadState(t.Context(), store.Ref{Account: "acct_1", ID: id})
			return err == nil && s.Status == store.Active
		})
	}
	for i, l := range d.logs {
		waitUntil(t, 60*time.Second, fmt.Sprintf("relay %d consuming", i), func() bool {
			return strings.Contains(l.String(), `"msg":"consuming"`)
		})
	}
	// A fresh deployment switches to state format 2 a heartbeat after its replicas
	// start: what a takeover writes again is bounded by it.
	for _, m := range d.metrics {
		waitUntil(t, 30*time.Second, "state format 2 in force on "+m, func() bool {
			return strings.Contains(metrics(m), "\nrelay_state_format 2\n")
		})
	}
	if err := d.ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	return d
}

// farRole is the customer's role for the AWS destination id.
func farRole(id string) string { return "arn:aws:iam::111122223333:role/" + id }

// farProxy puts a proxy in front of addr (host:port, or a URL) whose answers arrive
// farLatency late, and returns its host:port.
func farProxy(t *testing.T, addr string) string {
	t.Helper()
	p, err := netdelay.Listen("127.0.0.1:0", strings.TrimPrefix(addr, "http://"), farLatency)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p.Addr()
}

func eventIDOf(t *testing.T, body []byte) string {
	var b struct {
		EventID string `json:"event_id"`
	}
	if err := json.Unmarshal(body, &b); err != nil || b.EventID == "" {
		t.Fatalf("a body at the bus without its event_id: %q: %v", body, err)
	}
	return b.EventID
}

// farArrivals is what one bus took, read as it grows: event ids in arrival order
// (repeats included) and when each first arrived.
type farArrivals struct {
	read  func(from int) (ids []string, n int) // what arrived past the first from items, and the items now
	items int
	order []string
	first map[string]time.Time
}

func (a *farArrivals) poll() {
	ids, n := a.read(a.items)
	a.items = n
	now := time.Now()
	for _, id := range ids {
		a.order = append(a.order, id)
		if _, ok := a.first[id]; !ok {
			a.first[id] = now
		}
	}
}

// farEvent is one event offered, and the store it names: its ordering key.
type farEvent struct{ id, store string }

// farOffer is one run's events, as the broker confirmed them.
type farOffer struct {
	began     time.Time
	done      chan struct{}
	mu        sync.Mutex
	confirmed []farEvent
	failed    int
}

func (o *farOffer) events() []farEvent {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.confirmed)
}

// offer publishes farEvents events of run at farRate, each naming one of farStores
// stores at random, and returns at once; each is confirmed by the broker in turn.
func (d *farDeployment) offer(t *testing.T, run int) *farOffer {
	t.Helper()
	o := &farOffer{done: make(chan struct{}), began: time.Now()}
	rng := rand.New(rand.NewPCG(uint64(run), 53))
	type sent struct {
		ev farEvent
		dc *amqp.DeferredConfirmation
	}
	pending := make(chan sent, farEvents)
	go func() { // the confirms, in the order they come
		defer close(o.done)
		for s := range pending {
			ok := s.dc.Wait()
			o.mu.Lock()
			if ok {
				o.confirmed = append(o.confirmed, s.ev)
			} else {
				o.failed++
			}
			o.mu.Unlock()
		}
	}()
	go func() {
		defer close(pending)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for i := 0; i < farEvents; {
			for range farRate / 100 {
				store := fmt.Sprintf("store-%03d", rng.IntN(farStores))
				job := jobevent.Job{ID: fmt.Sprintf("0190f2a4-5353-7000-8%03d-%012d", run, i), Status: "completed", StoreID: store}
				dc, err := d.ch.PublishWithDeferredConfirm(d.exchange, job.RoutingKey(), false, false, jobevent.Build(job, d.exchange, d.key, time.Now()))
				if err != nil {
					o.mu.Lock()
					o.failed++
					o.mu.Unlock()
					return
				}
				pending <- sent{farEvent{id: job.EventID(), store: store}, dc}
				i++
			}
			<-tick.C
		}
	}()
	t.Cleanup(func() { <-o.done })
	return o
}

// storeLater is a store with at least n events confirmed after the ones confirmed so
// far: a key whose next writes are still to come.
func (o *farOffer) storeLater(t *testing.T, n int) string {
	t.Helper()
	seen := len(o.events())
	var key string
	waitUntil(t, 30*time.Second, fmt.Sprintf("a store with %d events confirmed after the %dth", n, seen), func() bool {
		count := map[string]int{}
		for _, e := range o.events()[seen:] {
			if count[e.store]++; count[e.store] == n {
				key = e.store
				return true
			}
		}
		return false
	})
	return key
}

// farPoll is how often the buses are read: each read copies all a bus took, under the
// lock its writes take, so reading at every turn of a wait would slow the buses.
const farPoll = 100 * time.Millisecond

// poll reads every bus, unless it was read less than farPoll ago; it reports whether
// it read them.
func (d *farDeployment) poll() bool {
	if time.Since(d.polled) < farPoll {
		return false
	}
	d.polled = time.Now()
	for _, a := range d.arrivals {
		a.poll()
	}
	return true
}

// waitArrived waits until n of o's events are at every bus.
func (d *farDeployment) waitArrived(t *testing.T, o *farOffer, n int) {
	t.Helper()
	waitUntil(t, 60*time.Second, fmt.Sprintf("%d events of the run at every bus", n), func() bool {
		if !d.poll() {
			return false
		}
		evs := o.events()
		for _, a := range d.arrivals {
			have := 0
			for _, e := range evs {
				if _, ok := a.first[e.id]; ok {
					have++
				}
			}
			if have < n {
				return false
			}
		}
		return true
	})
}

// settle waits for the whole offer at every bus, then checks each bus: every confirmed
// event there, within farWithin of the first publish; each store's events first
// arrived in the confirmed order; none twice, or at most again[dest] written again.
func (d *farDeployment) settle(t *testing.T, o *farOffer, again map[string]int) {
	t.Helper()
	<-o.done
	evs := o.events()
	if len(evs) != farEvents || o.failed > 0 {
		t.Fatalf("%d of %d publishes confirmed (%d failed)", len(evs), farEvents, o.failed)
	}
	lastAt := map[string]time.Time{}
	complete := func(id string) bool {
		a := d.arrivals[id]
		last := time.Time{}
		for _, e := range evs {
			at, ok := a.first[e.id]
			if !ok {
				return false
			}
			if at.After(last) {
				last = at
			}
		}
		lastAt[id] = last
		return true
	}
	if !waitFor(2*farWithin, func() bool {
		if !d.poll() {
			return false
		}
		all := true
		for _, id := range farDests {
			if _, ok := lastAt[id]; !ok && !complete(id) {
				all = false
			}
		}
		return all
	}) {
		for _, id := range farDests {
			have := 0
			for _, e := range evs {
				if _, ok := d.arrivals[id].first[e.id]; ok {
					have++
				}
			}
			t.Errorf("%s: %d of %d events at the bus %s after the first publish", id, have, len(evs), 2*farWithin)
		}
		t.FailNow()
	}
	byStore := map[string][]string{}
	mine := map[string]bool{}
	for _, e := range evs {
		byStore[e.store] = append(byStore[e.store], e.id)
		mine[e.id] = true
	}
	stream := awstest.Records(t, d.kinesalite, "orders-stream") // the stream's own order
	for _, id := range farDests {
		took := d.arrivals[id].order
		if id == "orders-stream" {
			took = nil
			for _, r := range stream {
				took = append(took, eventIDOf(t, r.Data))
			}
		}
		took = slices.DeleteFunc(slices.Clone(took), func(e string) bool { return !mine[e] })
		firsts, repeats := []string{}, 0
		seen := map[string]bool{}
		for _, e := range took {
			if seen[e] {
				repeats++
				continue
			}
			seen[e] = true
			firsts = append(firsts, e)
		}
		elapsed := lastAt[id].Sub(o.began)
		t.Logf("%s: %d events at the bus %s after the first publish (%.0f/s), %d written again",
			id, len(firsts), elapsed.Round(time.Millisecond), float64(len(firsts))/elapsed.Seconds(), repeats)
		if len(firsts) != len(evs) {
			t.Errorf("%s: the bus's own record holds %d of the %d events", id, len(firsts), len(evs))
		}
		if elapsed > farWithin {
			t.Errorf("%s: the last event reached the bus %s after the first publish, want within %s", id, elapsed.Round(time.Millisecond), farWithin)
		}
		disorder := 0
		for _, ids := range byStore {
			disorder += outOfOrder(ids, firsts)
		}
		if disorder > 0 {
			t.Errorf("%s: %d events first reached the bus before an earlier event of their store", id, disorder)
		}
		if repeats > again[id] {
			t.Errorf("%s: %d events written again, want at most %d", id, repeats, again[id])
		}
	}
}

// notTaken counts each destination's writes not taken so far, on the replicas alive
// (relay_delivery_attempts_total: one destination per connector).
func (d *farDeployment) notTaken(t *testing.T) map[string]int {
	t.Helper()
	dest := map[string]string{"eventbridge": "orders-bus", "kinesis": "orders-stream", "pubsub": "orders-topic"}
	out := map[string]int{}
	for i, m := range d.metrics {
		if d.killed[i] {
			continue
		}
		for _, line := range strings.Split(metrics(m), "\n") {
			rest, ok := strings.CutPrefix(line, `relay_delivery_attempts_total{connector="`)
			if !ok || !strings.Contains(rest, `outcome="not_taken"}`) {
				continue
			}
			connector, _, _ := strings.Cut(rest, `"`)
			var n float64
			if _, err := fmt.Sscan(line[strings.LastIndex(line, " ")+1:], &n); err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			out[dest[connector]] += int(n)
		}
	}
	return out
}

// checkNothingCounted fails t unless every destination is active with no failure in a row.
func (d *farDeployment) checkNothingCounted(t *testing.T) {
	t.Helper()
	for _, id := range farDests {
		s, err := d.st.LoadState(t.Context(), store.Ref{Account: "acct_1", ID: id})
		if err != nil {
			t.Fatal(err)
		}
		if s.Status != store.Active || s.ConsecutiveFailures != 0 {
			t.Errorf("%s: %s with %d failures in a row, want active and none", id, s.Status, s.ConsecutiveFailures)
		}
	}
}

// killWriter SIGKILLs the replica holding the destinations' leases and returns which.
func (d *farDeployment) killWriter(t *testing.T) int {
	t.Helper()
	holders := map[int]bool{}
	for _, id := range farDests {
		lease, err := leaseOf(d.st, "acct_1", id)
		if err != nil || lease == "" {
			t.Fatalf("%s's lease holder: %q, %v", id, lease, err)
		}
		pid := leasePID(t, lease)
		i := slices.IndexFunc(d.procs, func(c *exec.Cmd) bool { return c.Process.Pid == pid })
		if i < 0 {
			t.Fatalf("%s's lease holder %q is neither replica", id, lease)
		}
		holders[i] = true
	}
	if len(holders) != 1 {
		t.Fatalf("the destinations' leases are held by %d replicas, want one (the account's)", len(holders))
	}
	var victim int
	for i := range holders {
		victim = i
	}
	if err := d.procs[victim].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	d.killed[victim] = true
	return victim
}

// publishFaults fails Pub/Sub publishes on demand: the next ones, or the next ones of
// one ordering key, each with its error; any other publish goes through.
type publishFaults struct {
	mu    sync.Mutex
	next  []error
	byKey map[string][]error
}

func (f *publishFaults) failNext(n int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for range n {
		f.next = append(f.next, err)
	}
}

func (f *publishFaults) failKey(key string, n int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for range n {
		f.byKey[key] = append(f.byKey[key], err)
	}
}

func (f *publishFaults) left() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.next)
	for _, errs := range f.byKey {
		n += len(errs)
	}
	return n
}

// React is pstest's hook before each Publish: handled with an error fails it.
func (f *publishFaults) React(req any) (bool, any, error) {
	r, ok := req.(*pubsubpb.PublishRequest)
	if !ok || len(r.Messages) == 0 {
		return false, nil, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	key := r.Messages[0].OrderingKey
	if errs := f.byKey[key]; len(errs) > 0 {
		f.byKey[key] = errs[1:]
		return true, nil, errs[0]
	}
	if len(f.next) > 0 {
		err := f.next[0]
		f.next = f.next[1:]
		return true, nil, err
	}
	return false, nil, nil
}
