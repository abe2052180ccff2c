package dispatch

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/failures"
	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/store/storetest"
	"github.com/mercamap/relay/internal/testpeer"
	"github.com/mercamap/relay/internal/waittest"
)

const acct = "acct_1"

// testSink is our own Sink, programmed per attempt; it records what it accepted.
type testSink struct {
	mu        sync.Mutex
	delivered map[string][]string // destination → event ids, in the order written
	attempts  map[string]int      // destination/event → attempts so far
	behave    func(dest string, m destination.Message, attempt int) error
}

func newTestSink(behave func(dest string, m destination.Message, attempt int) error) *testSink {
	if behave == nil {
		behave = func(string, destination.Message, int) error { return nil }
	}
	return &testSink{delivered: map[string][]string{}, attempts: map[string]int{}, behave: behave}
}

func (s *testSink) Send(_ context.Context, d destination.Destination, m destination.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attempts[d.ID+"/"+m.EventID]++
	err := s.behave(d.ID, m, s.attempts[d.ID+"/"+m.EventID])
	if err == nil {
		s.delivered[d.ID] = append(s.delivered[d.ID], m.EventID)
	}
	return err
}

func (s *testSink) got(dest string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.delivered[dest])
}

// nudges counts the dispatcher's nudges to the outbox's drainer.
type nudges struct{ n atomic.Int64 }

func (n *nudges) Nudge() { n.n.Add(1) }

type rig struct {
	t       *testing.T
	store   *store.Store
	sink    *testSink
	nudges  *nudges
	d       *Dispatcher
	clock   atomic.Int64 // offset added to the real clock, ns
	nextJob atomic.Int64
	stop    func()
}

func delivery() config.Delivery {
	return config.Delivery{
		NotTakenBackoff: config.Backoff{Initial: time.Millisecond, Max: 8 * time.Millisecond},
		SetupCheck:      config.Backoff{Initial: 10 * time.Millisecond, Max: 40 * time.Millisecond},
		MaxMessageAge:   time.Hour, DisableAfter: 20, WarnAfter: []int{5, 15}, LeaseTTL: 900 * time.Millisecond,
		ChannelRetention: time.Hour, AttemptsRetention: 2 * time.Hour,
	}
}

func newRig(t *testing.T, sink *testSink, dests ...destination.Destination) *rig {
	t.Helper()
	// Bounds above what any test here sends: these tests read a channel's whole history
	// (the bounds are store's bounds_test's subject).
	st, err := store.Connect(store.Options{URL: testpeer.RedisURL(t), Bounds: store.Bounds{ChannelEvents: 100000, Attempts: 100000}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	r := &rig{t: t, store: st, sink: sink, nudges: &nudges{}}
	r.d = New(Options{
		Store: st, Delivery: delivery(), Outbox: r.nudges, Poll: 20 * time.Millisecond,
		Sinks:        map[destination.Connector]Sink{destination.EventBridge: sink, destination.Kinesis: sink, destination.PubSub: sink},
		Now:          func() time.Time { return time.Now().Add(time.Duration(r.clock.Load())) },
		LogRetention: 2 * time.Hour,
	})
	if err := r.d.SetDestinations(context.Background(), dests); err != nil {
		t.Fatal(err)
	}
	return r
}

// outbox decodes the operator events waiting in the account's outbox, checking that
// each entry's id and routing key are its body's.
func (r *rig) outbox() []store.OperatorEvent {
	r.t.Helper()
	entries, err := r.store.Outbox(context.Background(), acct)
	if err != nil {
		r.t.Fatal(err)
	}
	var out []store.OperatorEvent
	for _, e := range entries {
		var ev store.OperatorEvent
		if err := json.Unmarshal(e.Body, &ev); err != nil || ev.ID == "" || ev.ID != e.ID || ev.Type != e.Type {
			r.t.Fatalf("outbox entry %+v (body %s): %v", e, e.Body, err)
		}
		out = append(out, ev)
	}
	return out
}

func (r *rig) start() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.d.Run(ctx) }()
	r.stop = func() { cancel(); <-done }
	r.t.Cleanup(r.stop)
}

// publish appends events of the given short types to the account log; returns their ids.
func (r *rig) publish(types ...string) []string {
	r.t.Helper()
	ids, err := r.publishTo(acct, types...)
	if err != nil {
		r.t.Fatal(err)
	}
	return ids
}

// publishTo appends events of the given short types to account's log; returns their ids.
// Safe from any goroutine.
func (r *rig) publishTo(account string, types ...string) ([]string, error) {
	var batch []store.Append
	var ids []string
	for _, typ := range types {
		n := r.nextJob.Add(1)
		id := fmt.Sprintf("fetcher.%s.job-%05d", typ, n)
		ids = append(ids, id)
		batch = append(batch, store.Append{Accounts: []string{account}, Entry: store.Entry{
			EventID: id, Type: typ, Time: time.Now().UTC().Format(time.RFC3339Nano), SchemaVersion: "1.0.0",
			Data: []byte(fmt.Sprintf(`{"jobId":"job-%05d","metadata":{"store_id":"st_1"}}`, n)),
		}})
	}
	_, err := r.store.AppendBatch(context.Background(), batch, time.Hour, time.Hour)
	return ids, err
}

func (r *rig) state(id string) store.State {
	r.t.Helper()
	st, err := r.store.LoadState(context.Background(), store.Ref{Account: acct, ID: id})
	if err != nil {
		r.t.Fatal(err)
	}
	return st
}

func (r *rig) channelTypes(channel string) []string {
	r.t.Helper()
	page, err := r.store.ReadChannel(context.Background(), acct, channel, 0, 100000)
	if err != nil {
		r.t.Fatal(err)
	}
	var types []string
	for i, ev := range page.Events {
		if ev.Sequence != int64(i+1) {
			r.t.Fatalf("channel %s: event %d has sequence %d: not gap-free", channel, i, ev.Sequence)
		}
		types = append(types, ev.Type)
	}
	return types
}

// acquireLease takes ref's lease for owner, as another replica's lease round would: the
// fencing token, or 0 when another holds it.
func acquireLease(ctx context.Context, st *store.Store, ref store.Ref, owner string, ttl time.Duration) (int64, error) {
	taken, err := st.AcquireLeases(ctx, []store.Ref{ref}, owner, ttl)
	if err != nil {
		return 0, err
	}
	return taken[0].Token, nil
}

// waitFor is waittest.For with the dispatch tests' limit, 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waittest.For(t, 20*time.Second, what, cond)
}

func bus(id, roleAccount string) destination.Destination {
	return destination.Destination{ID: id, Account: acct, Connector: destination.EventBridge,
		BusARN:  "arn:aws:events:us-east-1:" + roleAccount + ":event-bus/" + id,
		RoleARN: "arn:aws:iam::" + roleAccount + ":role/relay"}
}

func countIn(types []string, typ string) int {
	n := 0
	for _, t := range types {
		if t == typ {
			n++
		}
	}
	return n
}

func TestThousandEventsArriveInOrderExactlyOnceAndRejectedOnesNever(t *testing.T) {
	rejected := func(m destination.Message) bool {
		return m.EventID[len(m.EventID)-1] == '3' && m.EventID[len(m.EventID)-2]%3 == 0
	}
	sink := newTestSink(func(_ string, m destination.Message, attempt int) error {
		switch {
		case rejected(m):
			return failures.NewRejected("the bus refused it", nil)
		case m.EventID[len(m.EventID)-1] == '7' && attempt <= 2:
			return failures.NewNotTaken("did not take the event: throttled", nil)
		}
		return nil
	})
	r := newRig(t, sink, bus("orders", "111122223333"))
	r.start()
	var ids []string
	for i := 0; i < 10; i++ {
		types := make([]string, 100)
		for j := range types {
			types[j] = "job.completed"
		}
		ids = append(ids, r.publish(types...)...)
	}
	var want []string
	for _, id := range ids {
		if !rejected(destination.Message{EventID: id}) {
			want = append(want, id)
		}
	}
	waitFor(t, "the last event to end", func() bool {
		return r.state("orders").Cursor != "" && r.state("orders").LastDelivery != nil && r.state("orders").LastDelivery.EventID == want[len(want)-1]
	})
	if got := sink.got("orders"); !slices.Equal(got, want) {
		t.Fatalf("delivered %d events, want %d in arrival order (first difference matters)", len(got), len(want))
	}
	for _, id := range ids {
		if rejected(destination.Message{EventID: id}) && sink.attempts["orders/"+id] != 1 {
			t.Errorf("rejected %s was tried %d times, want once (it ends)", id, sink.attempts["orders/"+id])
		}
	}
	st := r.state("orders")
	if st.Status != store.Active {
		t.Errorf("status %s, want active: rejections were never 20 in a row", st.Status)
	}
	types := r.channelTypes(store.DestinationChannel("orders"))
	if n := countIn(types, "delivery.succeeded"); n != len(want) {
		t.Errorf("%d delivery.succeeded channel events, want %d", n, len(want))
	}
}

func TestNotTakenNeverCountsAndTwentyRejectionsInARowDisable(t *testing.T) {
	var mode atomic.Value
	mode.Store("reject")
	sink := newTestSink(func(_ string, m destination.Message, attempt int) error {
		switch mode.Load() {
		case "reject":
			return failures.NewRejected("AccessDeniedException: the role may not write to the bus", nil)
		case "throttle":
			if attempt <= 5 {
				return failures.NewNotTaken("did not take the event: ThrottlingException", nil)
			}
		}
		return nil
	})
	r := newRig(t, sink, bus("orders", "111122223333"))
	r.start()

	// 19 rejections, then a delivery: the count goes back to 0, nothing is disabled.
	r.publish(slices.Repeat([]string{"job.completed"}, 19)...)
	waitFor(t, "19 rejections", func() bool { return r.state("orders").ConsecutiveFailures == 19 })
	mode.Store("deliver")
	ok := r.publish("job.completed")
	waitFor(t, "the delivery", func() bool { return slices.Contains(sink.got("orders"), ok[0]) })
	// The bus has it before Redis has its outcome: wait for the commit to reset the count.
	waitFor(t, "the delivery committed", func() bool { return r.state("orders").ConsecutiveFailures == 0 })
	if st := r.state("orders"); st.Status != store.Active {
		t.Fatalf("after 19 rejections and a delivery: %d failures, %s; want 0, active", st.ConsecutiveFailures, st.Status)
	}

	// Not taken five times, then delivered: never counted.
	mode.Store("throttle")
	slow := r.publish("job.completed")
	waitFor(t, "the throttled event delivered", func() bool { return slices.Contains(sink.got("orders"), slow[0]) })
	st := r.state("orders")
	if st.ConsecutiveFailures != 0 {
		t.Fatalf("not-taken attempts counted: %d", st.ConsecutiveFailures)
	}
	if n := countIn(r.channelTypes(store.DestinationChannel("orders")), "delivery.not_taken"); n != 5 {
		t.Errorf("%d delivery.not_taken channel events, want 5", n)
	}

	// 20 rejections in a row disable, and the platform is told once.
	mode.Store("reject")
	r.publish(slices.Repeat([]string{"job.completed"}, 25)...)
	waitFor(t, "the destination disabled", func() bool { return r.state("orders").Status == store.Disabled })
	st = r.state("orders")
	if st.ConsecutiveFailures != 20 || st.Disabled == nil || st.LastFailure == nil || st.LastFailure.Class != "rejected" {
		t.Fatalf("disabled state = %+v", st)
	}
	// The commit that disabled wrote the operator event to the outbox, in the same script
	// (after the warnings at 5 and 15 of each run: destination.failing).
	var notes []store.OperatorEvent
	for _, ev := range r.outbox() {
		if ev.Type != "destination.failing" {
			notes = append(notes, ev)
		}
	}
	if len(notes) != 1 || notes[0].Type != "destination.disabled" || notes[0].LastFailure == nil ||
		notes[0].Destination != "orders" || notes[0].Account != acct || notes[0].Connector != "eventbridge" ||
		notes[0].Reason != st.Disabled.Reason || notes[0].LastFailure.Class != "rejected" ||
		notes[0].LastFailure.Message != "AccessDeniedException: the role may not write to the bus" {
		t.Fatalf("operator events = %+v, want one destination.disabled with the card's last failure", notes)
	}
	waitFor(t, "the drainer nudged", func() bool { return r.nudges.n.Load() > 0 })
	if n := countIn(r.channelTypes(store.DestinationChannel("orders")), "destination.disabled"); n != 1 {
		t.Errorf("%d destination.disabled channel events, want 1", n)
	}
}

func TestPausedDestinationGetsNothingAndResumesWithNewEvents(t *testing.T) {
	sink := newTestSink(nil)
	r := newRig(t, sink, bus("orders", "111122223333"))
	r.start()
	first := r.publish("job.completed")
	waitFor(t, "first delivery", func() bool { return len(sink.got("orders")) == 1 })

	ctx := context.Background()
	if _, err := r.d.Pause(ctx, "orders", true); err != nil {
		t.Fatal(err)
	}
	whilePaused := r.publish("job.completed", "job.failed")
	if _, err := r.d.Activate(ctx, "orders", true); err != nil {
		t.Fatal(err)
	}
	after := r.publish("job.completed")
	waitFor(t, "the event after activation", func() bool { return slices.Contains(sink.got("orders"), after[0]) })
	if got, want := sink.got("orders"), []string{first[0], after[0]}; !slices.Equal(got, want) {
		t.Fatalf("delivered %v, want %v (events while paused %v are not delivered later)", got, want, whilePaused)
	}
	types := r.channelTypes(store.DestinationChannel("orders"))
	if !slices.Contains(types, "destination.paused") || !slices.Contains(types, "destination.activated") {
		t.Errorf("channel %v lacks paused/activated", types)
	}
	if notes := r.outbox(); len(notes) != 0 {
		t.Errorf("a pause wrote operator events: %+v", notes)
	}
}

func TestOperatorDisableCascadesWithinTheSameCloudAccount(t *testing.T) {
	sink := newTestSink(nil)
	other := bus("elsewhere", "444455556666")
	stream := destination.Destination{ID: "stream", Account: acct, Connector: destination.Kinesis,
		StreamARN: "arn:aws:kinesis:us-east-1:111122223333:stream/orders", RoleARN: "arn:aws:iam::111122223333:role/relay"}
	r := newRig(t, sink, bus("orders", "111122223333"), stream, other)
	res, err := r.d.Disable(context.Background(), "orders", "customer asked")
	if err != nil {
		t.Fatal(err)
	}
	ids := res.IDs
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"orders", "stream"}) {
		t.Fatalf("disabled %v, want orders and stream (same AWS account)", ids)
	}
	for _, id := range ids {
		if st := r.state(id); st.Status != store.Disabled || st.Disabled == nil {
			t.Errorf("%s: %+v, want disabled with a reason", id, st)
		}
	}
	if st := r.state("elsewhere"); st.Status != store.Pending { // not started: its setup check has not run
		t.Errorf("a destination in another AWS account was disabled too: %s", st.Status)
	}
	notes := r.outbox()
	var got []string
	for _, n := range notes {
		got = append(got, n.Destination)
		if n.Type != "destination.disabled" || !strings.Contains(n.Reason, "customer asked") {
			t.Errorf("operator event %+v, want destination.disabled with the operator's reason", n)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, ids) {
		t.Errorf("operator events for %v, want one for each of %v", got, ids)
	}
	// Disabling again changes nothing and writes no second event.
	if _, err := r.d.Disable(context.Background(), "orders", "again"); err != nil {
		t.Fatal(err)
	}
	if n := len(r.outbox()); n != 2 {
		t.Errorf("%d operator events after a second disable, want 2", n)
	}
	if _, err := r.d.Disable(context.Background(), "nope", ""); err != destination.ErrNotFound {
		t.Errorf("unknown id: %v, want destination.ErrNotFound", err)
	}
}

func TestSendATestGoesThroughTheSinkAndCounts(t *testing.T) {
	var refuse atomic.Bool
	sink := newTestSink(func(_ string, m destination.Message, _ int) error {
		if m.Type != destination.TestType {
			return fmt.Errorf("not a test event: %s", m.Type)
		}
		if refuse.Load() {
			return failures.NewRejected("the bus does not exist", nil)
		}
		return nil
	})
	r := newRig(t, sink, bus("orders", "111122223333"))
	out, err := r.d.Test(context.Background(), "orders")
	if err != nil || out.Class != failures.Delivered {
		t.Fatalf("test send: %+v, %v", out, err)
	}
	refuse.Store(true)
	out, err = r.d.Test(context.Background(), "orders")
	if err != nil || out.Class != failures.Rejected || out.Message != "the bus does not exist" {
		t.Fatalf("test send: %+v, %v", out, err)
	}
	if st := r.state("orders"); st.ConsecutiveFailures != 1 {
		t.Errorf("a rejected test send counted %d, want 1", st.ConsecutiveFailures)
	}
	attempts, err := r.store.Attempts(context.Background(), store.Ref{Account: acct, ID: "orders"}, 0, 10)
	if err != nil || len(attempts) != 2 || attempts[0].Outcome != "rejected" || attempts[1].Outcome != "delivered" {
		t.Fatalf("attempt log = %+v, %v", attempts, err)
	}
	// The 20th rejected test disables the destination, and its commit writes the
	// operator event to the outbox like a delivery's would.
	for i := 2; i <= 20; i++ {
		for _, n := range r.outbox() {
			if n.Type != "destination.failing" { // the warnings at 5 and 15 come before
				t.Fatalf("an operator event after %d rejections: %+v", i-1, n)
			}
		}
		if _, err := r.d.Test(context.Background(), "orders"); err != nil {
			t.Fatal(err)
		}
	}
	st := r.state("orders")
	var notes []store.OperatorEvent
	for _, n := range r.outbox() {
		if n.Type == "destination.disabled" {
			notes = append(notes, n)
		}
	}
	if st.Status != store.Disabled || len(notes) != 1 || notes[0].Destination != "orders" ||
		notes[0].LastFailure == nil || notes[0].LastFailure.Message != "the bus does not exist" {
		t.Fatalf("after 20 rejected tests: %s, operator events %+v; want disabled and one event with the last failure", st.Status, notes)
	}
}

func TestMessageOlderThanTheAgeLimitEndsUncounted(t *testing.T) {
	sink := newTestSink(func(_ string, m destination.Message, _ int) error {
		if m.EventID[len(m.EventID)-1] == '1' {
			return failures.NewNotTaken("did not take the event: HTTP 503", nil)
		}
		return nil
	})
	r := newRig(t, sink, bus("orders", "111122223333"))
	r.start()
	r.publish("job.completed", "job.completed")
	waitFor(t, "the first event retried", func() bool {
		return countIn(r.channelTypes(store.DestinationChannel("orders")), "delivery.not_taken") >= 2
	})
	if len(sink.got("orders")) != 0 {
		t.Fatal("the second event overtook the first one still waiting")
	}
	r.clock.Store(int64(2 * time.Hour)) // past the 1 h age limit: both waiting events end
	waitFor(t, "both events expired", func() bool {
		return countIn(r.channelTypes(store.DestinationChannel("orders")), "message.expired") == 2
	})
	r.clock.Store(0)
	later := r.publish("job.completed")
	waitFor(t, "a later event", func() bool { return slices.Contains(sink.got("orders"), later[0]) })
	if got := sink.got("orders"); !slices.Equal(got, later) {
		t.Errorf("delivered %v, want only %v: expired messages are never written", got, later)
	}
	if st := r.state("orders"); st.ConsecutiveFailures != 0 {
		t.Errorf("expiry counted: %d", st.ConsecutiveFailures)
	}
}

func TestEventFilterDeliversOnlyTheListedTypes(t *testing.T) {
	sink := newTestSink(nil)
	dest := bus("orders", "111122223333")
	dest.Events = []string{"job.completed"}
	r := newRig(t, sink, dest)
	r.start()
	ids := r.publish("job.failed", "job.completed", "job.failed", "job.completed", "job.failed")
	waitFor(t, "the cursor past the last event", func() bool {
		last, _ := storetest.LastLogID(context.Background(), r.store.Client(), acct)
		return r.state("orders").Cursor == last
	})
	if got, want := sink.got("orders"), []string{ids[1], ids[3]}; !slices.Equal(got, want) {
		t.Fatalf("delivered %v, want %v", got, want)
	}
}

// A destination with a long backlog does not keep its pool goroutine for all of it:
// with one pass at a time, another account's destination is delivered to long before
// the backlog is through (the busy one yields once it had its share, passShare writes).
func TestABusyDestinationYieldsItsPassToTheOthersWaiting(t *testing.T) {
	quietDelivered := make(chan int, 1)
	var busyCount atomic.Int64
	sink := newTestSink(func(dest string, _ destination.Message, _ int) error {
		switch dest {
		case "busy":
			busyCount.Add(1)
			time.Sleep(time.Millisecond)
		case "quiet":
			select {
			case quietDelivered <- int(busyCount.Load()):
			default:
			}
		}
		return nil
	})
	quiet := bus("quiet", "444455556666")
	quiet.Account = "acct_quiet"
	r := newRig(t, sink, bus("busy", "111122223333"), quiet)
	r.d.opts.MaxActive = 1 // one pass at a time
	backlog := make([]string, 8*passShare)
	for i := range backlog {
		backlog[i] = "job.completed"
	}
	r.publish(backlog...)
	r.start()
	waitFor(t, "the busy destination writing", func() bool { return busyCount.Load() > 0 })
	if _, err := r.publishTo("acct_quiet", "job.completed"); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-quietDelivered:
		if n >= len(backlog) {
			t.Fatalf("the quiet destination waited for the whole backlog of %d", len(backlog))
		}
		t.Logf("the quiet destination's event went after %d of the busy one's %d", n, len(backlog))
	case <-time.After(20 * time.Second):
		t.Fatal("the quiet destination's event was never written")
	}
}

// A long run of events a destination filters out (more than a read takes at once, all
// there before it starts) does not leave it parked short of the one it wants after them.
func TestALongRunOfFilteredEventsDoesNotStallTheOneAfterIt(t *testing.T) {
	sink := newTestSink(nil)
	dest := bus("orders", "111122223333")
	dest.Events = []string{"job.completed"}
	r := newRig(t, sink, dest)
	types := make([]string, 3*readBatch)
	for i := range types {
		types[i] = "job.failed"
	}
	ids := r.publish(append(types, "job.completed")...)
	r.start()
	waitFor(t, "the wanted event after the filtered run delivered", func() bool {
		return slices.Equal(sink.got("orders"), ids[len(ids)-1:])
	})
}

func TestRedefinedDestinationAsksWatchersToResyncAndRemovedOneKeepsItsState(t *testing.T) {
	sink := newTestSink(nil)
	dest := bus("orders", "111122223333")
	r := newRig(t, sink, dest)
	ctx := context.Background()
	externalID := r.state("orders").ExternalID
	if externalID == "" {
		t.Fatal("no ExternalId issued on first sight")
	}
	dest.Events = []string{"job.failed"}
	if err := r.d.SetDestinations(ctx, []destination.Destination{dest}); err != nil {
		t.Fatal(err)
	}
	if types := r.channelTypes(store.DestinationChannel("orders")); !slices.Equal(types, []string{"resync.required"}) {
		t.Fatalf("channel after redefinition = %v", types)
	}
	if err := r.d.SetDestinations(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.d.Destination("orders"); ok {
		t.Fatal("removed destination still configured")
	}
	if types := r.channelTypes(store.AccountChannel(acct)); !slices.Equal(types, []string{"resync.required", "resync.required"}) {
		t.Fatalf("account channel after removal = %v, want a resync for the removal too", types)
	}
	if err := r.d.SetDestinations(ctx, []destination.Destination{dest}); err != nil {
		t.Fatal(err)
	}
	if got := r.state("orders").ExternalID; got != externalID {
		t.Fatalf("ExternalId changed from %s to %s", externalID, got)
	}
}

func TestStaleLeaseHolderCannotCommit(t *testing.T) {
	r := newRig(t, newTestSink(nil), bus("orders", "111122223333"))
	ctx := context.Background()
	ref := store.Ref{Account: acct, ID: "orders"}
	old, err := acquireLease(ctx, r.store, ref, "replica-a", 50*time.Millisecond)
	if err != nil || old == 0 {
		t.Fatalf("acquire: %d, %v", old, err)
	}
	waitFor(t, "the lease to expire", func() bool {
		tok, err := acquireLease(ctx, r.store, ref, "replica-b", time.Minute)
		return err == nil && tok > old
	})
	ids := r.publish("job.completed")
	last, _ := storetest.LastLogID(ctx, r.store.Client(), acct)
	cfg := delivery()
	_, err = r.store.Commit(ctx, store.Commit{Ref: ref, Token: old, Kind: store.KindDelivered, Cursor: last, EventID: ids[0],
		DisableAfter: 20, ChannelRetention: cfg.ChannelRetention, AttemptsRetention: cfg.AttemptsRetention})
	if err != store.ErrStaleLease {
		t.Fatalf("commit with a superseded token: %v, want ErrStaleLease", err)
	}
	if st := r.state("orders"); st.Cursor == last || st.LastDelivery != nil {
		t.Fatalf("a stale commit changed the state: %+v", st)
	}
}

func TestStoreIDIsReadByTheAccountsPath(t *testing.T) {
	data := []byte(`{"metadata":{"store_id":"st_9","shop":{"id":42}},"x":1}`)
	for _, c := range []struct {
		paths []string
		want  string
	}{
		{nil, "st_9"},
		{[]string{"metadata.shop.id"}, "42"},
		{[]string{"metadata.nothing", "metadata.store_id"}, "st_9"},
		{[]string{"x.y"}, ""},
	} {
		if got := storeID(data, c.paths); got != c.want {
			t.Errorf("storeID(%v) = %q, want %q", c.paths, got, c.want)
		}
	}
}

// TestNumericStoreIDKeepsEveryDigit: an event naming its store by a JSON number larger
// than a float64 holds exactly reaches the sink with that store id, digit for digit
// (the Kinesis partition key and the Pub/Sub store_id attribute are this value).
func TestNumericStoreIDKeepsEveryDigit(t *testing.T) {
	var mu sync.Mutex
	got := map[string]string{} // event id → store id the sink was given
	sink := newTestSink(func(_ string, m destination.Message, _ int) error {
		mu.Lock()
		defer mu.Unlock()
		got[m.EventID] = m.StoreID
		return nil
	})
	r := newRig(t, sink, bus("orders", "111122223333"))
	want := map[string]string{ // event id → its body's store id, as written
		"fetcher.job.completed.big":  "1234567890123456789",
		"fetcher.job.completed.huge": "98765432109876543210987654321",
		"fetcher.job.completed.frac": "0.10000000000000000555",
	}
	var batch []store.Append
	for id, storeID := range want {
		batch = append(batch, store.Append{Accounts: []string{acct}, Entry: store.Entry{
			EventID: id, Type: "job.completed", Time: time.Now().UTC().Format(time.RFC3339Nano), SchemaVersion: "1.0.0",
			Data: []byte(`{"jobId":"j","metadata":{"store_id":` + storeID + `}}`),
		}})
	}
	if _, err := r.store.AppendBatch(context.Background(), batch, time.Hour, time.Hour); err != nil {
		t.Fatal(err)
	}
	r.start()
	waitFor(t, "three deliveries", func() bool { return len(sink.got("orders")) == 3 })
	mu.Lock()
	defer mu.Unlock()
	for id, storeID := range want {
		if got[id] != storeID {
			t.Errorf("%s: the sink was given store id %q, want %q as the event wrote it", id, got[id], storeID)
		}
	}
}

// checkingSink is a test sink whose setup check (probe or label) can fail.
type checkingSink struct {
	*testSink
	checks   atomic.Int32
	checkErr error
}

func (s *checkingSink) Check(context.Context, destination.Destination) error {
	s.checks.Add(1)
	return s.checkErr
}

func TestSendATestChecksTheSetupFirstAndWritesNothingWhenItFails(t *testing.T) {
	sink := &checkingSink{testSink: newTestSink(nil),
		checkErr: failures.NewRejected("the role does not require its ExternalId: any AWS account could use it", nil)}
	r := newRig(t, sink.testSink, bus("orders", "111122223333"))
	r.d.opts.Sinks[destination.EventBridge] = sink
	out, err := r.d.Test(context.Background(), "orders")
	if err != nil || out.Class != failures.Rejected || out.Message != sink.checkErr.(*failures.Error).Message {
		t.Fatalf("test send = %+v, %v; want the check's rejection", out, err)
	}
	if sink.checks.Load() != 1 || len(sink.got("orders")) != 0 {
		t.Fatalf("checks %d, writes %v: want one check and no write", sink.checks.Load(), sink.got("orders"))
	}
	// The destination is new, so pending: the failed check counts nothing, and the card
	// says what is missing.
	types := r.channelTypes(store.DestinationChannel("orders"))
	if !slices.Equal(types, []string{"destination.checked"}) {
		t.Fatalf("channel = %v", types)
	}
	if st := r.state("orders"); st.Status != store.Pending || st.ConsecutiveFailures != 0 || st.Pending == nil ||
		st.Pending.Message != out.Message {
		t.Fatalf("after a failed check: %+v, want pending, nothing counted, the check's sentence", st)
	}

	// Active destinations' tests count.
	sink.checkErr = nil
	if out, err = r.d.Test(context.Background(), "orders"); err != nil || out.Class != failures.Delivered || len(sink.got("orders")) != 1 {
		t.Fatalf("after the fix: %+v, %v, writes %v", out, err, sink.got("orders"))
	}
	if st := r.state("orders"); st.Status != store.Active || st.Pending != nil {
		t.Fatalf("after a check that passed: %+v, want active", st)
	}
	sink.checkErr = failures.NewRejected("the role does not require its ExternalId: any AWS account could use it", nil)
	if out, err = r.d.Test(context.Background(), "orders"); err != nil || out.Class != failures.Rejected {
		t.Fatalf("test of an active destination = %+v, %v; want the check's rejection", out, err)
	}
	if st := r.state("orders"); st.ConsecutiveFailures != 1 {
		t.Fatalf("an active destination's failed test: %d in a row, want 1 (it counts)", st.ConsecutiveFailures)
	}
	types = r.channelTypes(store.DestinationChannel("orders"))
	if want := []string{"destination.checked", "destination.checked", "destination.activated", "delivery.succeeded",
		"destination.checked", "delivery.rejected"}; !slices.Equal(types, want) {
		t.Fatalf("channel = %v, want %v", types, want)
	}
}

func TestPausingAWaitingMessageEndsItsRetriesAndActivationDoesNotResendIt(t *testing.T) {
	var stuck atomic.Value
	stuck.Store("")
	sink := newTestSink(func(_ string, m destination.Message, _ int) error {
		if m.EventID == stuck.Load() {
			return failures.NewNotTaken("did not take the event: ThrottlingException", nil)
		}
		return nil
	})
	r := newRig(t, sink, bus("orders", "111122223333"))
	ids := r.publish("job.completed")
	stuck.Store(ids[0])
	r.start()
	attempts := func() int {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		return sink.attempts["orders/"+ids[0]]
	}
	waitFor(t, "the message retried", func() bool { return attempts() >= 3 })
	ctx := context.Background()
	if _, err := r.d.Pause(ctx, "orders", true); err != nil {
		t.Fatal(err)
	}
	atPause := attempts()
	if _, err := r.d.Activate(ctx, "orders", true); err != nil {
		t.Fatal(err)
	}
	later := r.publish("job.completed")
	waitFor(t, "the event published after activation", func() bool { return slices.Contains(sink.got("orders"), later[0]) })
	if n := attempts(); n > atPause+1 {
		t.Fatalf("the message that waited when the destination was paused was tried %d more times (at most the write in flight may finish)", n-atPause)
	}
}

func TestADestinationInBackoffDoesNotHoldUpOthersWhenPassesAreLimited(t *testing.T) {
	sink := newTestSink(func(dest string, _ destination.Message, _ int) error {
		if dest == "stuck" {
			return failures.NewNotTaken("did not take the event: ThrottlingException", nil)
		}
		return nil
	})
	r := newRig(t, sink, bus("stuck", "111122223333"), bus("fine", "444455556666"))
	r.d.opts.MaxActive = 1 // one pass at a time
	r.start()
	ids := r.publish("job.completed", "job.completed", "job.completed")
	waitFor(t, "the healthy destination's deliveries", func() bool { return len(sink.got("fine")) == len(ids) })
	if got := sink.got("fine"); !slices.Equal(got, ids) {
		t.Fatalf("fine got %v, want %v", got, ids)
	}
}

func TestReplicasTakeOverADeadReplicasLeaseEvenWhenOthersHoldTheRest(t *testing.T) {
	sink := newTestSink(nil)
	dests := []destination.Destination{bus("d1", "111111111111"), bus("d2", "222222222222"), bus("d3", "333333333333")}
	r := newRig(t, sink, dests...)
	ctx := context.Background()
	// A replica that died holding d2: its heartbeat and lease expire with the TTL.
	if _, err := r.store.Heartbeat(ctx, "dead-replica", time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, d := range dests {
		if tok, err := acquireLease(ctx, r.store, store.Ref{Account: acct, ID: d.ID}, "dead-replica", delivery().LeaseTTL); err != nil || tok == 0 {
			t.Fatalf("dead replica's lease on %s: %d, %v", d.ID, tok, err)
		}
	}
	r.start()
	other := New(Options{Store: r.store, Delivery: delivery(), Poll: 20 * time.Millisecond,
		Sinks: map[destination.Connector]Sink{destination.EventBridge: sink}})
	if err := other.SetDestinations(ctx, dests); err != nil {
		t.Fatal(err)
	}
	otherCtx, stopOther := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = other.Run(otherCtx) }()
	t.Cleanup(func() { stopOther(); <-done })

	ids := r.publish("job.completed")
	waitFor(t, "every destination delivered after the dead replica's leases expired", func() bool {
		for _, d := range dests {
			if !slices.Contains(sink.got(d.ID), ids[0]) {
				return false
			}
		}
		return true
	})
}

func TestAStoppingReplicaFreesEveryLeaseForTheNextAtOnce(t *testing.T) {
	// More leases than one release script takes, so the release spans several calls.
	var dests []destination.Destination
	for i := range 600 {
		dests = append(dests, bus(fmt.Sprintf("d%03d", i), "111122223333"))
	}
	r := newRig(t, newTestSink(nil), dests...)
	r.d.opts.Delivery.LeaseTTL = time.Minute // not waited out within the test
	r.start()
	ctx := context.Background()
	refs := make([]store.Ref, len(dests))
	for i, d := range dests {
		refs[i] = store.Ref{Account: acct, ID: d.ID}
	}
	waitFor(t, "every lease held by the replica", func() bool {
		free, err := r.store.LeasesFree(ctx, refs, "another-replica")
		return err == nil && !slices.Contains(free, true)
	})
	r.stop()
	// Its successor takes every one at once, not after the lease TTL.
	leases, err := r.store.AcquireLeases(ctx, refs, "another-replica", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(leases) - len(slices.DeleteFunc(leases, func(l store.Lease) bool { return l.Token != 0 })); n != len(dests) {
		t.Fatalf("right after the stop the next replica took %d of %d leases", n, len(dests))
	}
}
