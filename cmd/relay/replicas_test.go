package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/mercamap/relay/internal/api/contracttest"
	"github.com/mercamap/relay/internal/awstest"
	"github.com/mercamap/relay/internal/jobevent"
	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/store/storetest"
	"github.com/mercamap/relay/internal/testpeer"
)

// replicaSet is n `relay serve` processes sharing one broker queue, one Redis and one
// EventBridge destination behind an STS that enforces the destination's ExternalId.
// Each has its own API and metrics ports, so the test can read each one's /metrics from outside.
type replicaSet struct {
	t                  *testing.T
	exchange, queue    string
	redisURL           string
	bus                *awstest.EventBridge
	sts                *awstest.STS // enforces roleARN's trust policy (see replicaOptions.untrusted)
	roleARN            string
	procs              []*exec.Cmd
	cfgs               []string // each process's config file
	apis               []string // http://127.0.0.1:port of each process
	metrics            []string // and of its operator listener (/metrics)
	logs               []*syncBuffer
	ch                 *amqp.Channel // the test's publisher, with confirms
	key                []byte
	killed             map[int]bool
	mu                 sync.Mutex
	confirmed, unknown []string // event ids in the order the broker confirmed them; ids never confirmed
}

// The admin token and acct_1's account token of every replica of a replicaSet.
const (
	replicasAdminToken = "replicas-admin-token-0123456789"
	replicasAcctToken  = "replicas-acct1-token-0123456789"
)

func startReplicas(t *testing.T, n int) *replicaSet {
	t.Helper()
	return startReplicasWith(t, n, replicaOptions{})
}

// replicaOptions configures startReplicasWith; the zero value is startReplicas.
type replicaOptions struct {
	setupCheck string // delivery.setup_check's value; "" is {initial: 20ms, max: 200ms}
	untrusted  bool   // the role does not trust us at start: the test calls rs.trustRole()
	api        string // more api: keys, as "key: value, …" inside its map (limits)
	stsBudget  string // aws.sts_budget's value; "" is the default
	kinesis    string // aws.endpoints.kinesis ("": none)
	pubsub     string // gcp.pubsub_endpoint ("": none)
}

func startReplicasWith(t *testing.T, n int, o replicaOptions) *replicaSet {
	t.Helper()
	if o.setupCheck == "" {
		o.setupCheck = "{initial: 20ms, max: 200ms}  # a pending destination is checked again soon"
	}
	apiExtra, budget := "", ""
	if o.api != "" {
		apiExtra = ", " + o.api
	}
	if o.stsBudget != "" {
		budget = "\n  sts_budget: " + o.stsBudget
	}
	endpoints, gcp := "", ""
	if o.kinesis != "" {
		endpoints = ", kinesis: " + o.kinesis
	}
	if o.pubsub != "" {
		gcp = "gcp: {pubsub_endpoint: " + o.pubsub + "}"
	}
	amqpURL, redisURL := testpeer.SharedRabbitMQ(t), testpeer.RedisURL(t)
	sts, bus := awstest.NewSTS(t), awstest.NewEventBridge(t)
	bus.RequireSessionFrom(sts)
	check := contracttest.New(t) // before the replicas: it reports after they stop
	bin := buildRelay(t)
	suffix := fmt.Sprint(time.Now().UnixNano())
	rs := &replicaSet{t: t, exchange: "relay-test-replicas-" + suffix, queue: "relay-test-replicas-" + suffix,
		redisURL: redisURL, bus: bus, sts: sts, killed: map[int]bool{}}
	rs.key, _ = hex.DecodeString(testKeyHex)
	const roleARN = "arn:aws:iam::111122223333:role/relay-delivery"
	rs.roleARN = roleARN
	_, rs.ch = brokerChannel(t, amqpURL, rs.queue)
	for range n {
		listen := fmt.Sprintf("127.0.0.1:%d", testpeer.FreePort(t))
		metricsListen := fmt.Sprintf("127.0.0.1:%d", testpeer.FreePort(t))
		cfg := filepath.Join(t.TempDir(), "relay.yaml")
		if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`
identity:
  name: mercamap
  aws_principal_arn: arn:aws:iam::999999999999:role/relay
  gcp_service_account: relay@relay-test.iam.gserviceaccount.com
  external_id_secret: external-id-secret-for-the-test-0123456789
rabbitmq: {url: %s, exchange: %s, queue: %s, prefetch: 32}
redis: {url: %s}
signature: {keys: [env:TEST_HMAC_KEY]}
api: {listen: "%s", metrics_listen: "%s", tokens: [{scope: admin, token: env:TEST_ADMIN_TOKEN}, {scope: "account:acct_1", token: env:TEST_ACCT_TOKEN}]%s}
aws:
  region: us-east-1
  endpoints: {sts: %s, events: %s%s}%s
%s
delivery:
  lease_ttl: 1s
  not_taken_backoff: {initial: 10ms, max: 200ms}
  setup_check: %s
accounts:
  - {id: acct_1, tenants: [single-tenant]}
destinations:
  - id: orders-bus
    account: acct_1
    connector: eventbridge
    bus_arn: arn:aws:events:us-east-1:111122223333:event-bus/orders
    role_arn: %s
`, amqpURL, rs.exchange, rs.queue, redisURL, listen, metricsListen, apiExtra, sts.URL, bus.URL, endpoints, budget, gcp, o.setupCheck, roleARN)), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd, logs := startRelay(t, bin, cfg, "TEST_ADMIN_TOKEN="+replicasAdminToken, "TEST_ACCT_TOKEN="+replicasAcctToken)
		// The tests call each replica through a check of every answer against the API's document.
		rs.procs, rs.apis, rs.logs = append(rs.procs, cmd), append(rs.apis, check.Proxy("http://"+listen)), append(rs.logs, logs)
		rs.cfgs = append(rs.cfgs, cfg)
		rs.metrics = append(rs.metrics, "http://"+metricsListen)
	}

	if !o.untrusted {
		rs.trustRole()
	}
	// The broker counts only the active consumer of the queue; each process says it subscribed.
	for i, logs := range rs.logs {
		waitUntil(t, 60*time.Second, fmt.Sprintf("relay %d consuming", i), func() bool {
			return strings.Contains(logs.String(), `"msg":"consuming"`)
		})
	}
	if err := rs.ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	return rs
}

// trustRole is the customer writing the role's trust policy with the destination's
// ExternalId, as issued.
func (rs *replicaSet) trustRole() {
	rs.t.Helper()
	rs.sts.RequireExternalID(rs.roleARN, issuedExternalID(rs.t, rs.redisURL, "acct_1", "orders-bus"))
}

// publish sends events from..to-1 in one stream on one channel, keeping up to window
// unconfirmed, and records them in the order the broker confirmed them.
func (rs *replicaSet) publish(from, to, window int) {
	rs.t.Helper()
	type sent struct {
		id string
		dc *amqp.DeferredConfirmation
	}
	var inFlight []sent
	settle := func(keep int) {
		for len(inFlight) > keep {
			s := inFlight[0]
			inFlight = inFlight[1:]
			rs.mu.Lock()
			if s.dc.Wait() {
				rs.confirmed = append(rs.confirmed, s.id)
			} else {
				rs.unknown = append(rs.unknown, s.id)
			}
			rs.mu.Unlock()
		}
	}
	for i := from; i < to; i++ {
		job := jobevent.Job{ID: fmt.Sprintf("0190f2a4-5555-7000-8000-%012d", i), Status: "completed"}
		dc, err := rs.ch.PublishWithDeferredConfirm(rs.exchange, job.RoutingKey(), false, false, jobevent.Build(job, rs.exchange, rs.key, time.Now()))
		if err != nil {
			rs.t.Errorf("publish %d: %v", i, err)
			return
		}
		inFlight = append(inFlight, sent{job.EventID(), dc})
		settle(window - 1)
	}
	settle(0)
}

func (rs *replicaSet) confirmedIDs() []string {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return append([]string(nil), rs.confirmed...)
}

// consumed reads relay_events_consumed_total off process i's /metrics (-1: no answer).
func (rs *replicaSet) consumed(i int) int { return rs.counter(i, "relay_events_consumed_total") }

// counter reads an unlabelled counter off process i's /metrics (-1: no answer).
func (rs *replicaSet) counter(i int, name string) int {
	resp, err := http.Get(rs.metrics[i] + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			n, _ := strconv.ParseFloat(v, 64)
			return int(n)
		}
	}
	return -1
}

// activeConsumer waits until exactly one live process has consumed at least min messages
// and every other live one none, and returns it: the broker's single active consumer.
func (rs *replicaSet) activeConsumer(min int) int {
	rs.t.Helper()
	active := -1
	waitUntil(rs.t, 60*time.Second, fmt.Sprintf("one replica alone consuming (≥%d messages)", min), func() bool {
		active = -1
		for i := range rs.procs {
			if rs.killed[i] {
				continue
			}
			switch n := rs.consumed(i); {
			case n >= min && active == -1:
				active = i
			case n != 0:
				return false
			}
		}
		return active >= 0
	})
	return active
}

// logTails is the last lines each process logged, for a failure message.
func (rs *replicaSet) logTails() string {
	const most = 30
	var b strings.Builder
	for i, l := range rs.logs {
		lines := strings.Split(strings.TrimSpace(l.String()), "\n")
		fmt.Fprintf(&b, "--- relay %d, last %d lines:\n%s\n", i, most, strings.Join(lines[max(0, len(lines)-most):], "\n"))
	}
	return b.String()
}

// checkArrivals waits until every confirmed event reached the bus and fails unless the
// first arrivals follow the publisher's confirmed order.
func (rs *replicaSet) checkArrivals(confirmed []string) {
	rs.t.Helper()
	waitUntil(rs.t, 120*time.Second, fmt.Sprintf("all %d confirmed events at the bus", len(confirmed)), func() bool {
		have := map[string]bool{}
		for _, id := range firstArrivals(rs.t, rs.bus.Entries()) {
			have[id] = true
		}
		for _, id := range confirmed {
			if !have[id] {
				return false
			}
		}
		return true
	})
	got := firstArrivals(rs.t, rs.bus.Entries())
	if n := outOfOrder(confirmed, got); n > 0 {
		rs.t.Fatalf("%d of %d events first arrived out of the publisher's confirmed order\n%s", n, len(confirmed), rs.logTails())
	}
	// At-least-once: a write in flight when a replica died may land twice.
	if dup := len(rs.bus.Entries()) - len(got); dup > 0 {
		rs.t.Logf("%d duplicate deliveries (allowed: receivers dedup on event_id)", dup)
	}
}

// TestTwoReplicasDeliverInThePublishersOrder: 1,500 events published in one stream while
// two replicas run reach the bus with first arrivals in the order the broker confirmed them.
func TestTwoReplicasDeliverInThePublishersOrder(t *testing.T) {
	startReplicas(t, 2).deliverInOrder(1500)
}

// deliverInOrder publishes total events (up to 64 unconfirmed), all of which the broker must
// confirm, and checks they reach the bus with first arrivals in the confirmed order.
func (rs *replicaSet) deliverInOrder(total int) {
	rs.t.Helper()
	rs.publish(0, total, 64)
	confirmed := rs.confirmedIDs()
	if len(confirmed) != total {
		rs.t.Fatalf("%d of %d publishes confirmed", len(confirmed), total)
	}
	rs.checkArrivals(confirmed)
}

// TestOneReplicaHandsWhatItStoresToItsOwnDestinationInThePublishersOrder: a replica
// that consumes and holds the destination's lease hands the events it stores straight
// to the destination's worker (its /metrics counts them), and the bus still gets every
// confirmed event, first arrivals in the broker's confirmed order.
func TestOneReplicaHandsWhatItStoresToItsOwnDestinationInThePublishersOrder(t *testing.T) {
	rs := startReplicas(t, 1)
	const total = 300
	rs.deliverInOrder(total)
	if n := rs.counter(0, "relay_log_entries_handed_over_total"); n < 1 || n > total {
		t.Fatalf("%d log entries handed over, want some of the %d stored", n, total)
	}
}

// TestActiveConsumerKilledMidStreamAnotherTakesOverInOrder runs three replicas, finds the
// one the broker lets consume (from its /metrics: the others consumed nothing), SIGKILLs
// it mid-stream, and checks that another takes over: every confirmed event arrives, first
// arrivals in the publisher's confirmed order.
func TestActiveConsumerKilledMidStreamAnotherTakesOverInOrder(t *testing.T) {
	rs := startReplicas(t, 3)
	const total = 1500
	published := make(chan struct{})
	go func() { defer close(published); rs.publish(0, total, 1) }() // one by one: a stream that lasts

	victim := rs.activeConsumer(300)
	if err := rs.procs[victim].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	rs.killed[victim] = true
	if n := len(rs.confirmedIDs()); n >= total {
		t.Fatalf("the publisher had finished (%d confirmed) before the kill: not mid-stream", n)
	}
	t.Logf("killed relay %d, the active consumer, with %d of %d events confirmed", victim, len(rs.confirmedIDs()), total)
	<-published
	next := rs.activeConsumer(1)
	if next == victim {
		t.Fatal("the killed relay is still consuming")
	}
	confirmed := rs.confirmedIDs()
	if len(confirmed) != total {
		t.Fatalf("%d of %d publishes confirmed", len(confirmed), total)
	}
	rs.checkArrivals(confirmed)
}

// TestReplicaKilledMidStreamHandsItsDestinationOver: the replica holding the
// destination's lease is SIGKILLed mid-stream; another takes the destination over once
// the lease expires, from the stored cursor, through the same role and ExternalId (the
// STS enforces it): every confirmed event arrives, first arrivals in publish order.
func TestReplicaKilledMidStreamHandsItsDestinationOver(t *testing.T) {
	rs := startReplicas(t, 2)
	const total = 300
	rs.publish(0, 100, 16)
	waitUntil(t, 30*time.Second, "deliveries under way", func() bool { return len(rs.bus.Entries()) >= 20 })

	st, err := store.Open(rs.redisURL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	holder, err := leaseOf(st, "acct_1", "orders-bus")
	if err != nil || holder == "" {
		t.Fatalf("the lease holder: %q, %v", holder, err)
	}
	pid := leasePID(t, holder)
	victim := slices.IndexFunc(rs.procs, func(c *exec.Cmd) bool { return c.Process.Pid == pid })
	if victim < 0 {
		t.Fatalf("lease holder %q is neither replica", holder)
	}
	if err := rs.procs[victim].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	rs.killed[victim] = true
	rs.publish(100, total, 16)
	confirmed := rs.confirmedIDs()
	if len(confirmed) != total {
		t.Fatalf("%d of %d publishes confirmed", len(confirmed), total)
	}
	rs.checkArrivals(confirmed)
}

// TestAPauseAnsweredByOneReplicaStopsTheOthersWritesAtOnce: the replica that holds
// the destination's lease has a write under way (held at the bus), with eight more
// events in the batch behind it, when the other replica answers a pause. The answer
// says a write was in flight; that write ends, and no other write starts.
func TestAPauseAnsweredByOneReplicaStopsTheOthersWritesAtOnce(t *testing.T) {
	rs := startReplicas(t, 2)
	rdb, holder, _ := rs.holdWrites(2)
	ctx := context.Background()
	rs.pauseSaysWriteInFlight(1-holder, "the holder's write was held at the bus")

	rs.bus.LetWaiting() // the write in flight ends; any later one would be held, and counted
	waitUntil(t, 30*time.Second, "the write in flight committed", func() bool {
		h, err := rdb.HMGet(ctx, storetest.DestKey("acct_1", "orders-bus"), "writing", "attempts").Result()
		return err == nil && h[0] == nil && h[1] == "2"
	})
	// The worker's next step: the next event of its batch refused by the fence, or its
	// next pass finding the destination paused, or (on a busy machine) the lease moved
	// meanwhile and its fencing token refused.
	waitUntil(t, 30*time.Second, "the lease holder's next step", func() bool {
		for _, logs := range rs.logs {
			l := logs.String()
			if strings.Contains(l, `"msg":"write not started: the destination changed"`) ||
				strings.Contains(l, `"msg":"deliveries stopped: the destination is not active"`) ||
				strings.Contains(l, `"msg":"lease superseded; another replica delivers now"`) ||
				strings.Contains(l, `"msg":"lease lost"`) {
				return true
			}
		}
		return false
	})
	if n := rs.bus.Requests(); n != 2 {
		t.Fatalf("%d writes started after the pause was answered, want none", n-2)
	}
	if n := len(rs.bus.Entries()); n != 2 {
		t.Fatalf("%d events on the bus, want 2: the first and the one in flight at the pause", n)
	}
}

// TestAPauseWhileTheLeaseHolderIsFrozenStartsNoWriteWhenItThaws: the replica that
// holds the destination's lease has a write held at the bus and nine events in hand
// when it is SIGSTOPped. A pause asked of the other replica cannot be answered by the
// frozen holder: it is answered once the holder's lease has run out, saying a write may
// be in flight. The held write then ends and the holder is thawed: it starts no other
// write (its lease lapsed while it was frozen, and it may write again only after
// reading the state, which says paused).
func TestAPauseWhileTheLeaseHolderIsFrozenStartsNoWriteWhenItThaws(t *testing.T) {
	rs := startReplicas(t, 2)
	_, holder, pid := rs.holdWrites(1)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	t.Cleanup(thaw)

	rs.pauseSaysWriteInFlight(1-holder, "the frozen holder could not say")
	if !strings.Contains(rs.logs[1-holder].String(), "the lease holder did not answer a status change within its lease") {
		t.Fatalf("the answering replica did not wait out the frozen holder's lease:\n%s", rs.logTails())
	}

	rs.bus.LetWaiting() // the write held since before the freeze ends; any later one is held, and counted
	thaw()
	waitUntil(t, 30*time.Second, "the thawed holder's next step", func() bool {
		l := rs.logs[holder].String()
		return strings.Contains(l, `"msg":"lease lost"`) || strings.Contains(l, `"msg":"lease superseded; another replica delivers now"`) ||
			strings.Contains(l, `"msg":"write not started: the destination changed"`)
	})
	if n := rs.bus.Requests(); n != 1 {
		t.Fatalf("%d writes started after the pause was answered, want none", n-1)
	}
	if n := len(rs.bus.Entries()); n > 1 {
		t.Fatalf("%d events on the bus, want at most the one in flight at the freeze", n)
	}
}

// holdWrites has the bus hold every write, publishes ten events, waits until all are
// in the account's log and the nth write is held at the bus (the ones before it let
// through), and returns a client of the shared Redis, which replica holds the
// destination's lease, and its process id. Every event is in the log before the second
// write starts, so the holder has the rest in hand.
func (rs *replicaSet) holdWrites(nth int) (rdb redis.UniversalClient, holder, pid int) {
	t := rs.t
	t.Helper()
	st, err := store.Open(rs.redisURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	rdb = st.Client()
	ctx := context.Background()
	rs.bus.Hold()
	t.Cleanup(rs.bus.Release)
	rs.publish(0, 10, 16)
	waitUntil(t, 30*time.Second, "all ten events in the account's log", func() bool {
		return rdb.XLen(ctx, storetest.LogKey("acct_1")).Val() == 10
	})
	for n := 1; n <= nth; n++ {
		if n > 1 {
			rs.bus.LetWaiting()
		}
		waitUntil(t, 30*time.Second, fmt.Sprintf("write %d held at the bus", n), func() bool {
			return rs.bus.Waiting() == 1 && rs.bus.Requests() == n
		})
	}
	lease, err := leaseOf(st, "acct_1", "orders-bus")
	if err != nil || lease == "" {
		t.Fatalf("the lease holder: %q, %v", lease, err)
	}
	pid = leasePID(t, lease)
	holder = slices.IndexFunc(rs.procs, func(c *exec.Cmd) bool { return c.Process.Pid == pid })
	if holder < 0 {
		t.Fatalf("lease holder %q is neither replica", lease)
	}
	return rdb, holder, pid
}

// pauseSaysWriteInFlight pauses orders-bus through replica i's API and fails the test
// unless the answer is the card paused with write_in_flight true (why: the reason the
// test expects it).
func (rs *replicaSet) pauseSaysWriteInFlight(i int, why string) {
	t := rs.t
	t.Helper()
	a := httpDo(t, "POST", rs.apis[i]+"/v1/connectors/eventbridge/destinations/orders-bus/pause", replicasAdminToken)
	var card struct {
		Status        string `json:"status"`
		WriteInFlight *bool  `json:"write_in_flight"`
	}
	if err := json.Unmarshal([]byte(a.body), &card); err != nil || a.status != 200 {
		t.Fatalf("pause on replica %d: %d %s", i, a.status, a.body)
	}
	if card.Status != "paused" || card.WriteInFlight == nil || !*card.WriteInFlight {
		t.Fatalf("pause answered %s, want paused with write_in_flight true (%s)", a.body, why)
	}
}

// leasePID reads the process id out of a lease value "<host>-<pid>-<rand>|<token>".
// leaseOf is the live holder of a destination's lease as "owner|token" ("" when none).
func leaseOf(st *store.Store, acct, id string) (string, error) {
	owner, token, err := storetest.LeaseHolder(context.Background(), st.Client(), acct, id)
	if err != nil || owner == "" {
		return "", err
	}
	return fmt.Sprintf("%s|%d", owner, token), nil
}

func leasePID(t *testing.T, lease string) int {
	t.Helper()
	owner, _, _ := strings.Cut(lease, "|")
	parts := strings.Split(owner, "-")
	if len(parts) < 3 {
		t.Fatalf("lease owner %q", owner)
	}
	pid, err := strconv.Atoi(parts[len(parts)-2])
	if err != nil {
		t.Fatalf("lease owner %q: %v", owner, err)
	}
	return pid
}

// firstArrivals lists each delivered event_id once, in the order it first arrived.
func firstArrivals(t *testing.T, entries []awstest.Entry) []string {
	t.Helper()
	var out []string
	seen := map[string]bool{}
	for _, e := range entries {
		var body struct {
			EventID string `json:"event_id"`
		}
		if err := json.Unmarshal([]byte(e.Detail), &body); err != nil {
			t.Fatalf("detail %q: %v", e.Detail, err)
		}
		if !seen[body.EventID] {
			seen[body.EventID] = true
			out = append(out, body.EventID)
		}
	}
	return out
}

// outOfOrder counts the events of want that first arrived after an event published later
// (got is restricted to want's events).
func outOfOrder(want, got []string) int {
	pos := map[string]int{}
	for i, id := range want {
		pos[id] = i
	}
	n, latest := 0, -1
	for _, id := range got {
		p, ok := pos[id]
		if !ok {
			continue
		}
		if p < latest {
			n++
		}
		latest = max(latest, p)
	}
	return n
}

// issuedExternalID waits until a relay has issued the destination its ExternalId (read
// from Redis) and returns it, so a test can write the customer's trust policy with it.
func issuedExternalID(t *testing.T, redisURL, account, id string) string {
	t.Helper()
	st, err := store.Open(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var externalID string
	waitUntil(t, 30*time.Second, "the destination's ExternalId", func() bool {
		s, err := st.LoadState(context.Background(), store.Ref{Account: account, ID: id})
		externalID = s.ExternalID
		return err == nil && externalID != ""
	})
	return externalID
}
