package stream_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/smithy-go"

	"github.com/mercamap/relay/internal/api/apitest"
	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/failures"
	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/store/storetest"
	"github.com/mercamap/relay/internal/stream"
)

const waitLong = 30 * time.Second

// watcher is one Client running in the background, and what its hooks saw.
type watcher struct {
	*stream.Client
	cancel context.CancelFunc
	done   chan error

	mu        sync.Mutex
	applied   []int64 // the sequence of each event applied, in order (OnApply)
	snapshots int     // how many snapshots it loaded (OnSnapshot)
	seen      int64   // the sequence the last hook call reported
}

func startWatcher(t *testing.T, base, token, channel string) *watcher {
	t.Helper()
	w := &watcher{done: make(chan error, 1)}
	c := stream.NewClient(stream.ClientOptions{
		Caller: &stream.Caller{Base: base, Token: token}, Channel: channel,
		MinBackoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
		OnApply: func(ev stream.Event, _ stream.Card) {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.applied, w.seen = append(w.applied, ev.Sequence), ev.Sequence
		},
		OnSnapshot: func(v stream.View) {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.snapshots, w.seen = w.snapshots+1, v.Sequence
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	w.Client, w.cancel = c, cancel
	go func() { w.done <- c.Run(ctx) }()
	t.Cleanup(w.stop)
	apitest.WaitFor(t, waitLong, channel+" watcher's first snapshot", func() bool { _, ok := c.View(); return ok })
	return w
}

// stop ends the watcher, as a killed process would.
func (w *watcher) stop() {
	w.cancel()
	<-w.done
	w.done <- nil // stop may run again from Cleanup
}

// hooks is a copy of what the watcher's hooks reported so far.
func (w *watcher) hooks() (applied []int64, snapshots int, seen int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.applied), w.snapshots, w.seen
}

// sequence is where the watcher stands as its hooks reported it: once it is at a
// sequence, every event up to it is in Applied (the hooks run just after the view moves).
func (w *watcher) sequence() int64 { _, _, seen := w.hooks(); return seen }

// Applied returns the sequences applied so far, in order.
func (w *watcher) Applied() []int64 { applied, _, _ := w.hooks(); return applied }

// Snapshots is how many snapshots the watcher has loaded.
func (w *watcher) Snapshots() int { _, n, _ := w.hooks(); return n }

func viewJSON(t *testing.T, w *watcher) string {
	t.Helper()
	v, _ := w.View()
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// settle waits until every acct_1 destination has ended every event of the log, and
// returns the final sequences of the channels.
func settle(t *testing.T, r *apitest.Rig, channels ...string) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	last, err := storetest.LastLogID(ctx, r.Store.Client(), apitest.Acct1)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"orders-bus", "orders-stream", "orders-topic"} {
		apitest.WaitFor(t, waitLong, id+" to end every event", func() bool {
			st, err := r.Store.LoadState(ctx, store.Ref{Account: apitest.Acct1, ID: id})
			return err == nil && st.Cursor == last
		})
	}
	out := map[string]int64{}
	for _, ch := range channels {
		out[ch] = r.Sequence(apitest.Acct1, ch)
	}
	return out
}

func waitAt(t *testing.T, w *watcher, seq int64, who string) {
	t.Helper()
	apitest.WaitFor(t, waitLong, fmt.Sprintf("%s at sequence %d", who, seq), func() bool { return w.sequence() == seq })
}

// contiguous checks applied is exactly from+1 … to: every event once, in order.
func contiguous(t *testing.T, who string, applied []int64, from, to int64) {
	t.Helper()
	if int64(len(applied)) != to-from {
		t.Errorf("%s applied %d events, want %d (%d…%d)", who, len(applied), to-from, from+1, to)
	}
	for i, seq := range applied {
		if seq != from+1+int64(i) {
			t.Fatalf("%s applied %v…: sequence %d at position %d, want %d", who, applied[:min(len(applied), i+3)], seq, i, from+1+int64(i))
		}
	}
}

// increasing checks no event was applied twice or out of order.
func increasing(t *testing.T, who string, applied []int64) {
	t.Helper()
	for i := 1; i < len(applied); i++ {
		if applied[i] <= applied[i-1] {
			t.Fatalf("%s applied %d after %d: an event applied twice or out of order", who, applied[i], applied[i-1])
		}
	}
}

// rejectEverySeventh makes the sink reject job events whose number is a multiple of 7,
// so the channels carry failures and recoveries, never 20 rejections in a row.
func rejectEverySeventh(dest string, m destination.Message) error {
	n, _ := strconv.Atoi(m.EventID[strings.LastIndex(m.EventID, "-")+1:])
	if n%7 == 0 {
		return failures.NewRejected("AccessDeniedException: the role may not write to "+dest, nil)
	}
	return nil
}

func TestAWatcherWhoseConnectionIsCutRepeatedlyEndsLikeOneThatNeverLeft(t *testing.T) {
	r := apitest.New(t, apitest.Options{Stream: stream.Options{KeepAlive: 50 * time.Millisecond}})
	r.Sink.SetBehave(rejectEverySeventh)
	r.Start()
	proxy := apitest.NewProxy(t, r.HTTP.Listener.Addr().String())
	channels := []string{"destination:orders-bus", "account:acct_1"}
	steady, cut := map[string]*watcher{}, map[string]*watcher{}
	for _, ch := range channels {
		steady[ch] = startWatcher(t, r.URL, apitest.Acct1Token, ch)
		cut[ch] = startWatcher(t, proxy.URL, apitest.Acct1Token, ch)
	}

	for batch := range 15 {
		accepted := proxy.Accepted()
		r.Publish(apitest.Acct1, 10)
		if batch == 7 {
			call(t, "POST", r.URL+"/v1/connectors/pubsub/destinations/orders-topic/test", apitest.AdminToken)
		}
		// Cut once both cut watchers are back on a new connection (or had some events).
		apitest.WaitFor(t, waitLong, "the cut watchers to reconnect", func() bool { return proxy.Accepted() >= accepted+2 || batch == 0 })
		proxy.Cut()
	}
	final := settle(t, r, channels...)
	for _, ch := range channels {
		waitAt(t, steady[ch], final[ch], "steady "+ch)
		waitAt(t, cut[ch], final[ch], "cut "+ch)
		fresh := startWatcher(t, r.URL, apitest.AdminToken, ch)
		waitAt(t, fresh, final[ch], "fresh "+ch)
		if a, b := viewJSON(t, steady[ch]), viewJSON(t, cut[ch]); a != b {
			t.Errorf("%s: the cut watcher holds\n%s\nthe steady one\n%s", ch, b, a)
		}
		if a, b := viewJSON(t, fresh), viewJSON(t, cut[ch]); a != b {
			t.Errorf("%s: the cut watcher holds\n%s\na fresh snapshot\n%s", ch, b, a)
		}
		contiguous(t, "steady "+ch, steady[ch].Applied(), 0, final[ch])
		// The cut one resumed each time with Last-Event-ID: one snapshot, every event once.
		contiguous(t, "cut "+ch, cut[ch].Applied(), 0, final[ch])
		if n := cut[ch].Snapshots(); n != 1 {
			t.Errorf("cut %s loaded %d snapshots, want 1: it should resume, not start over", ch, n)
		}
	}
	if proxy.Accepted() < 10 {
		t.Errorf("only %d connections through the proxy: the cuts did not happen", proxy.Accepted())
	}
}

func TestAWatcherKilledAndRestartedEndsLikeOneThatNeverLeft(t *testing.T) {
	r := apitest.New(t, apitest.Options{})
	r.Sink.SetBehave(rejectEverySeventh)
	r.Start()
	const ch = "account:acct_1"
	steady := startWatcher(t, r.URL, apitest.Acct1Token, ch)
	first := startWatcher(t, r.URL, apitest.Acct1Token, ch)
	r.Publish(apitest.Acct1, 30)
	apitest.WaitFor(t, waitLong, "the first watcher to apply some events", func() bool { return first.sequence() >= 10 })
	first.stop()
	increasing(t, "first", first.Applied())

	r.Publish(apitest.Acct1, 30)
	again := startWatcher(t, r.URL, apitest.Acct1Token, ch)
	r.Publish(apitest.Acct1, 30)
	final := settle(t, r, ch)
	waitAt(t, steady, final[ch], "steady")
	waitAt(t, again, final[ch], "restarted")
	if a, b := viewJSON(t, steady), viewJSON(t, again); a != b {
		t.Errorf("the restarted watcher holds\n%s\nthe steady one\n%s", b, a)
	}
	contiguous(t, "steady", steady.Applied(), 0, final[ch])
	increasing(t, "restarted", again.Applied())
	if got := again.Applied(); len(got) == 0 || got[len(got)-1] != final[ch] {
		t.Errorf("restarted watcher applied %v", got)
	}
}

func TestEventsLostOnTheLiveTransportAreRecoveredByReplay(t *testing.T) {
	lossy := func(_ string, seq int64) bool { return seq%4 == 0 || seq%9 == 0 }
	r := apitest.New(t, apitest.Options{Stream: stream.Options{Drop: lossy, KeepAlive: 50 * time.Millisecond}})
	r.Sink.SetBehave(rejectEverySeventh)
	r.Start()
	channels := []string{"destination:orders-bus", "account:acct_1"}
	ws := map[string]*watcher{}
	for _, ch := range channels {
		ws[ch] = startWatcher(t, r.URL, apitest.Acct1Token, ch)
	}
	for range 4 {
		r.Publish(apitest.Acct1, 10)
	}
	final := settle(t, r, channels...)
	// Make the last event one the live transport loses: only the keep-alive tells.
	for r.Sequence(apitest.Acct1, "destination:orders-bus")%4 != 0 {
		call(t, "POST", r.URL+"/v1/connectors/eventbridge/destinations/orders-bus/test", apitest.AdminToken)
	}
	for _, ch := range channels {
		final[ch] = r.Sequence(apitest.Acct1, ch)
	}
	for _, ch := range channels {
		w := ws[ch]
		waitAt(t, w, final[ch], ch)
		fresh := startWatcher(t, r.URL, apitest.AdminToken, ch)
		waitAt(t, fresh, final[ch], "fresh "+ch)
		if a, b := viewJSON(t, fresh), viewJSON(t, w); a != b {
			t.Errorf("%s: the watcher holds\n%s\na fresh snapshot\n%s", ch, b, a)
		}
		contiguous(t, ch, w.Applied(), 0, final[ch])
		if n := w.Snapshots(); n != 1 {
			t.Errorf("%s: %d snapshots, want 1: replay fills gaps", ch, n)
		}
	}
}

// trimChannel appends pause/activate events with a tiny retention until the
// destination channel's first retained event is after keepAfter+1: as if the events up
// to there were older than channel_retention. It ends with the destination active.
func trimChannel(t *testing.T, r *apitest.Rig, id string, keepAfter int64) {
	t.Helper()
	ref := store.Ref{Account: apitest.Acct1, ID: id}
	ctx := context.Background()
	i := 0
	trimmed := func() bool {
		page, err := r.Store.ReadChannel(ctx, apitest.Acct1, store.DestinationChannel(id), 0, 1)
		return err == nil && len(page.Events) == 1 && page.Events[0].Sequence > keepAfter+1
	}
	apitest.WaitFor(t, waitLong, "the channel trimmed past the watcher's cursor", func() bool {
		if trimmed() && i%2 == 0 {
			return true
		}
		status := []string{store.Paused, store.Active}[i%2]
		if _, err := r.Store.SetStatus(ctx, ref, status, "trim", time.Nanosecond); err != nil {
			t.Fatal(err)
		}
		i++
		return false
	})
}

func TestACursorOlderThanRetentionGets410AndTheWatcherLoadsANewSnapshot(t *testing.T) {
	r := apitest.New(t, apitest.Options{})
	r.Start()
	proxy := apitest.NewProxy(t, r.HTTP.Listener.Addr().String())
	const ch = "destination:orders-bus"
	w := startWatcher(t, proxy.URL, apitest.Acct1Token, ch)
	r.Publish(apitest.Acct1, 5)
	final := settle(t, r, ch)
	waitAt(t, w, final[ch], "watcher")

	proxy.SetDown(true)
	trimChannel(t, r, "orders-bus", final[ch])
	r.Publish(apitest.Acct1, 3)
	final = settle(t, r, ch)
	// The watcher's cursor is older than what the channel keeps.
	a := call(t, "GET", r.URL+"/v1/streams/"+ch+"/events?after="+strconv.FormatInt(w.sequence(), 10), apitest.Acct1Token)
	if a.status != http.StatusGone || !strings.Contains(a.body, "CURSOR_EXPIRED") {
		t.Fatalf("replay from the watcher's cursor: %d %s", a.status, a.body)
	}
	proxy.SetDown(false)
	waitAt(t, w, final[ch], "watcher after 410")
	if n := w.Snapshots(); n != 2 {
		t.Errorf("%d snapshots, want 2: the 410 must lead to a new one", n)
	}
	fresh := startWatcher(t, r.URL, apitest.AdminToken, ch)
	waitAt(t, fresh, final[ch], "fresh")
	if a, b := viewJSON(t, fresh), viewJSON(t, w); a != b {
		t.Errorf("after the 410 the watcher holds\n%s\na fresh snapshot\n%s", b, a)
	}
	increasing(t, "watcher", w.Applied())
}

func TestAnOversizedEventComesAsAPointerAndTheWatcherFetchesItByReplay(t *testing.T) {
	r := apitest.New(t, apitest.Options{Stream: stream.Options{BroadcastLimit: 1024}})
	const ch = "destination:orders-bus"
	w := startWatcher(t, r.URL, apitest.Acct1Token, ch)
	big := "AccessDeniedException: " + strings.Repeat("the role may not call events:PutEvents on the bus; ", 30)
	r.Sink.SetBehave(func(string, destination.Message) error { return failures.NewRejected(big, nil) })
	call(t, "POST", r.URL+"/v1/connectors/eventbridge/destinations/orders-bus/test", apitest.AdminToken)
	r.Sink.SetBehave(nil)
	call(t, "POST", r.URL+"/v1/connectors/eventbridge/destinations/orders-bus/test", apitest.AdminToken)
	waitAt(t, w, 2, "watcher")
	v, _ := w.View()
	card := v.Destinations["orders-bus"]
	if card.LastFailure == nil || card.LastFailure.Message != big || card.LastDelivery == nil || card.Sequence != 2 {
		t.Errorf("card after the pointer: %+v", card)
	}
	contiguous(t, "watcher", w.Applied(), 0, 2)
	a := call(t, "GET", r.URL+"/v1/streams/"+ch+"/events?after=0", apitest.Acct1Token)
	if strings.Contains(a.body, stream.PointerType) || !strings.Contains(a.body, "delivery.rejected") {
		t.Errorf("replay: %s", a.body)
	}
}

// TestALongBusErrorLeavesLiveEventsAsEvents: one bus error of 70 KB on the card must
// not turn the channel's later live events into pointers (each event carries the card):
// the card keeps the error's code and head, and the next events arrive whole.
func TestALongBusErrorLeavesLiveEventsAsEvents(t *testing.T) {
	r := apitest.New(t, apitest.Options{}) // the default broadcast limit
	const ch = "destination:orders-bus"
	long := "User: arn:aws:sts::111122223333:assumed-role/relay/mercamap-acct_1 is not authorized to perform: events:PutEvents " +
		strings.Repeat("because no identity-based policy allows the events:PutEvents action; ", 1050) // ~70 KB
	r.Sink.SetBehave(func(string, destination.Message) error {
		return &smithy.GenericAPIError{Code: "AccessDeniedException", Message: long}
	})
	test := func() {
		call(t, "POST", r.URL+"/v1/connectors/eventbridge/destinations/orders-bus/test", apitest.AdminToken)
	}
	test()
	req, _ := http.NewRequest("GET", r.URL+"/v1/streams/"+ch+"/subscribe", nil)
	req.Header.Set("Authorization", "Bearer "+apitest.Acct1Token)
	req.Header.Set("Last-Event-ID", "0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	test()
	r.Sink.SetBehave(nil)
	test()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	var types, datas []string
	for len(datas) < 3 && sc.Scan() {
		line := sc.Text()
		if typ, ok := strings.CutPrefix(line, "event: "); ok {
			types = append(types, typ)
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			datas = append(datas, data)
		}
	}
	if want := []string{"delivery.rejected", "delivery.rejected", "delivery.succeeded"}; !slices.Equal(types, want) {
		t.Fatalf("live events %v, want %v: a long error must not make them pointers", types, want)
	}
	var ev struct {
		Data struct {
			State stream.CardState `json:"state"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(datas[1]), &ev); err != nil || ev.Data.State.LastFailure == nil {
		t.Fatalf("the rejection's event %s carries no last failure: %v", datas[1], err)
	}
	m := ev.Data.State.LastFailure.Message
	if len(m) > 4096 || !strings.Contains(m, "AccessDeniedException: User: arn:aws:sts::111122223333") {
		t.Errorf("the card's last failure (%d bytes) is not the error's code and head: %.200q", len(m), m)
	}
}

func TestARevokedTokensWatcherIsClosedAndRefused(t *testing.T) {
	r := apitest.New(t, apitest.Options{})
	w := startWatcher(t, r.URL, apitest.Acct1Token, "account:acct_1")
	cfg := apitest.Config()
	cfg.API.Tokens = slices.DeleteFunc(cfg.API.Tokens, func(tok config.Token) bool { return tok.Token == apitest.Acct1Token })
	r.API.Reload(cfg)
	select {
	case err := <-w.done:
		w.done <- err
		var ae *stream.APIError
		if !errors.As(err, &ae) || ae.Status != http.StatusForbidden || ae.Code != "ACCESS_REVOKED" {
			t.Fatalf("watcher ended with %v, want 403 ACCESS_REVOKED", err)
		}
	case <-time.After(waitLong):
		t.Fatal("the revoked token's watcher is still running")
	}
}

func TestARedefinedDestinationMakesTheWatcherLoadANewSnapshot(t *testing.T) {
	r := apitest.New(t, apitest.Options{})
	const ch = "destination:orders-bus"
	w := startWatcher(t, r.URL, apitest.Acct1Token, ch)
	dests := apitest.Destinations()
	dests[0].BusARN = "arn:aws:events:us-east-1:111122223333:event-bus/orders-v2"
	if err := r.Dispatcher.SetDestinations(context.Background(), dests); err != nil {
		t.Fatal(err)
	}
	apitest.WaitFor(t, waitLong, "a second snapshot after resync.required", func() bool { return w.Snapshots() == 2 })
	v, _ := w.View()
	if got := v.Destinations["orders-bus"].Target["bus_arn"]; got != dests[0].BusARN || v.Sequence != 1 {
		t.Errorf("after resync: bus_arn %s, sequence %d", got, v.Sequence)
	}
}

type answer struct {
	status int
	body   string
}

func call(t *testing.T, method, url, token string) answer {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{status: resp.StatusCode, body: string(b)}
}
