package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/api"
	"github.com/mercamap/relay/internal/api/apitest"
	"github.com/mercamap/relay/internal/api/contracttest"
	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/failures"
	"github.com/mercamap/relay/internal/store/storetest"
)

// TestAnOperatorsDisableIsUndoneOnlyByAnAdminToken: clause 12.4. Our team disables a
// bus, the cascade reaches the stream in the same AWS account; the account token may
// neither activate nor pause either of them (403 FORBIDDEN, saying who and why), and
// the card says the operator disabled it. An admin token re-activates.
func TestAnOperatorsDisableIsUndoneOnlyByAnAdminToken(t *testing.T) {
	r := apitest.New(t, apitest.Options{})
	bus := r.URL + fmt.Sprintf(dests, "eventbridge") + "/orders-bus"
	stream := r.URL + fmt.Sprintf(dests, "kinesis") + "/orders-stream"
	if a := call(t, "POST", bus+"/disable", apitest.AdminToken, `{"reason":"terms 12.4: abuse report 881"}`); a.status != 200 {
		t.Fatalf("disable: %d %s", a.status, a.body)
	}
	for _, dest := range []string{bus, stream} {
		for _, action := range []string{"/activate", "/pause"} {
			a := call(t, "POST", dest+action, apitest.Acct1Token, "")
			if a.status != 403 || a.errorCode(t) != "FORBIDDEN" {
				t.Fatalf("account token %s on %s: %d %s, want 403 FORBIDDEN", action, dest, a.status, a.body)
			}
			if msg := string(a.body); !strings.Contains(msg, "operators disabled") || !strings.Contains(msg, "abuse report 881") {
				t.Errorf("the 403 does not say who disabled it and why: %s", msg)
			}
		}
		card := call(t, "GET", dest, apitest.Acct1Token, "").json(t)
		dis, _ := card["disabled"].(map[string]any)
		if card["status"] != "disabled" || dis["by"] != "operator" || !strings.Contains(fmt.Sprint(dis["reason"]), "abuse report 881") {
			t.Errorf("card after the refused activation: status %v disabled %v, want disabled by the operator with the reason", card["status"], dis)
		}
	}
	if card := call(t, "POST", stream+"/activate", apitest.AdminToken, "").json(t); card["status"] != "active" {
		t.Fatalf("admin activate: %v", card)
	}
}

// TestADisableByRejectionsIsTheCustomersToUndoUntilAnOperatorDisablesIt: twenty
// rejections in a row disable the bus; its account re-activates it from the card. When
// our operators disable a destination the rejections had disabled, it becomes theirs.
func TestADisableByRejectionsIsTheCustomersToUndoUntilAnOperatorDisablesIt(t *testing.T) {
	r := apitest.New(t, apitest.Options{})
	r.Sink.SetBehave(func(string, destination.Message) error {
		return failures.NewRejected("AccessDeniedException: the role may not call events:PutEvents on the bus", nil)
	})
	r.Start()
	bus := r.URL + fmt.Sprintf(dests, "eventbridge") + "/orders-bus"
	disabledBy := func() string {
		card := call(t, "GET", bus, apitest.Acct1Token, "").json(t)
		dis, _ := card["disabled"].(map[string]any)
		by, _ := dis["by"].(string)
		if card["status"] != "disabled" {
			return ""
		}
		return by
	}
	r.Publish(apitest.Acct1, 20)
	apitest.WaitFor(t, 30*time.Second, "disabled after 20 rejections", func() bool { return disabledBy() != "" })
	if by := disabledBy(); by != "rejections" {
		t.Fatalf("disabled by %q, want rejections", by)
	}
	if card := call(t, "POST", bus+"/activate", apitest.Acct1Token, "").json(t); card["status"] != "active" {
		t.Fatalf("the account could not re-activate what the rejections disabled: %v", card)
	}

	r.Publish(apitest.Acct1, 20)
	apitest.WaitFor(t, 30*time.Second, "disabled after 20 more rejections", func() bool { return disabledBy() != "" })
	if a := call(t, "POST", bus+"/disable", apitest.AdminToken, `{"reason":"we looked: the role is gone"}`); a.status != 200 {
		t.Fatalf("disable: %d %s", a.status, a.body)
	}
	if by := disabledBy(); by != "operator" {
		t.Fatalf("after the operator's disable: by %q, want operator", by)
	}
	if a := call(t, "POST", bus+"/activate", apitest.Acct1Token, ""); a.status != 403 || a.errorCode(t) != "FORBIDDEN" {
		t.Fatalf("account activate after the operator's disable: %d %s", a.status, a.body)
	}
}

// TestARevokedTokenStaysRevokedAfterARestartAndOnAnotherReplica: a token dropped from
// the config answers 403 ACCESS_REVOKED from a server that never had it (a restart, or a
// replica started with the new config), over the same Redis; Redis holds its digest,
// never the token.
func TestARevokedTokenStaysRevokedAfterARestartAndOnAnotherReplica(t *testing.T) {
	r := apitest.New(t, apitest.Options{})
	if a := call(t, "GET", r.URL+"/v1/connectors", apitest.Acct1Token, ""); a.status != 200 {
		t.Fatalf("before: %d", a.status)
	}
	cfg := apitest.Config()
	cfg.API.Tokens = slices.DeleteFunc(cfg.API.Tokens, func(tok config.Token) bool { return tok.Token == apitest.Acct1Token })
	// The restarted process (or another replica): a new Server with the new config only.
	restarted := api.New(api.Options{Config: cfg, Destinations: r.Dispatcher, Store: r.Store, Streams: r.Streams})
	srv := newServer(t, restarted)
	for _, path := range []string{"/v1/connectors", fmt.Sprintf(dests, "eventbridge") + "/orders-bus"} {
		a := call(t, "GET", srv+path, apitest.Acct1Token, "")
		if a.status != 403 || a.errorCode(t) != "ACCESS_REVOKED" {
			t.Errorf("revoked token after a restart on %s: %d %s, want 403 ACCESS_REVOKED", path, a.status, a.body)
		}
	}
	if a := call(t, "GET", srv+"/v1/connectors", "never-configured-anywhere", ""); a.status != 401 {
		t.Errorf("a token never configured: %d, want 401", a.status)
	}
	if a := call(t, "GET", srv+"/v1/connectors", apitest.Acct2Token, ""); a.status != 200 {
		t.Errorf("a current token: %d", a.status)
	}

	// Nothing in Redis holds a token itself; the set has a hash tag of its own.
	rdb := r.Store.Client()
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(keys, storetest.TokensKey) {
		t.Fatalf("no %s among %v", storetest.TokensKey, keys)
	}
	for _, k := range keys {
		dump, err := rdb.Dump(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, tok := range []string{apitest.AdminToken, apitest.Acct1Token, apitest.Acct2Token} {
			if strings.Contains(k, tok) || strings.Contains(dump, tok) {
				t.Errorf("redis key %s holds a token", k)
			}
		}
	}
}

// TestDisableSaysWhichWriteWasInFlightAndNoneStartsAfter: a write is under way when
// the operator disables the bus: the answer names it, that write ends, and none of the
// events waiting behind it is written.
func TestDisableSaysWhichWriteWasInFlightAndNoneStartsAfter(t *testing.T) {
	r := apitest.New(t, apitest.Options{})
	started, release := make(chan struct{}, 1), make(chan struct{})
	r.Sink.SetBehave(func(dest string, _ destination.Message) error {
		if dest == "orders-bus" {
			select {
			case started <- struct{}{}:
				<-release
			default:
			}
		}
		return nil
	})
	r.Start()
	var once sync.Once
	let := func() { once.Do(func() { close(release) }) }
	t.Cleanup(let) // before the dispatcher stops: it waits for the write held here
	ids := r.Publish(apitest.Acct1, 5)
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("no write started")
	}
	// The sink holds its lock while the write is held: nothing else is delivered meanwhile.
	a := call(t, "POST", r.URL+fmt.Sprintf(dests, "eventbridge")+"/orders-bus/disable", apitest.AdminToken, "")
	var got struct {
		Disabled []string `json:"disabled"`
		InFlight []string `json:"writes_in_flight"`
	}
	if err := json.Unmarshal(a.body, &got); err != nil || a.status != 200 {
		t.Fatalf("disable: %d %s", a.status, a.body)
	}
	// The stream (in the cascade) may have a write begun too: the rig's sink takes one
	// write at a time, so the stream's may wait behind the bus's.
	if !slices.Contains(got.InFlight, "orders-bus") {
		t.Fatalf("writes_in_flight %v, want orders-bus (its write was under way)", got.InFlight)
	}
	let()
	apitest.WaitFor(t, 10*time.Second, "the write in flight committed", func() bool {
		a := call(t, "GET", r.URL+fmt.Sprintf(dests, "eventbridge")+"/orders-bus/attempts", apitest.AdminToken, "").json(t)
		return len(a["attempts"].([]any)) == 1
	})
	// The worker's next step is refused; the stream's own writes show the dispatcher moved on.
	// Its last write is in flight until its commit, which the sink returning does not
	// wait for: the attempt log, written by the commit, shows the stream is idle.
	apitest.WaitFor(t, 10*time.Second, "the stream's deliveries committed", func() bool {
		a := call(t, "GET", r.URL+fmt.Sprintf(dests, "pubsub")+"/orders-topic/attempts", apitest.AdminToken, "").json(t)
		return len(r.Sink.Delivered("orders-topic")) == len(ids) && len(a["attempts"].([]any)) == len(ids)
	})
	if got := r.Sink.Delivered("orders-bus"); len(got) != 1 || got[0] != ids[0] {
		t.Fatalf("written to the disabled bus: %v, want only the write in flight %s", got, ids[0])
	}
	idle := call(t, "POST", r.URL+fmt.Sprintf(dests, "pubsub")+"/orders-topic/pause", apitest.AdminToken, "").json(t)
	if idle["write_in_flight"] != false {
		t.Errorf("pause of an idle destination: write_in_flight %v, want false", idle["write_in_flight"])
	}
}

// newServer serves s over loopback until the test ends and returns its URL.
func newServer(t *testing.T, s *api.Server) string {
	t.Helper()
	hs := httptest.NewServer(contracttest.New(t).Wrap(s.Handler()))
	t.Cleanup(hs.Close)
	return hs.URL
}

// TestAnOperatorsDisableSticksThroughAnOperatorsPause: our team disables the bus, then
// pauses it (as an admin may). The account token still may neither activate nor pause
// it: the pause does not hand the destination back to the customer. An admin activates.
func TestAnOperatorsDisableSticksThroughAnOperatorsPause(t *testing.T) {
	r := apitest.New(t, apitest.Options{})
	bus := r.URL + fmt.Sprintf(dests, "eventbridge") + "/orders-bus"
	if a := call(t, "POST", bus+"/disable", apitest.AdminToken, `{"reason":"terms 12.4: abuse report 902"}`); a.status != 200 {
		t.Fatalf("disable: %d %s", a.status, a.body)
	}
	if card := call(t, "POST", bus+"/pause", apitest.AdminToken, "").json(t); card["status"] != "paused" {
		t.Fatalf("admin pause of the disabled bus: %v", card)
	}
	for _, action := range []string{"/activate", "/pause"} {
		a := call(t, "POST", bus+action, apitest.Acct1Token, "")
		if a.status != 403 || a.errorCode(t) != "FORBIDDEN" || !strings.Contains(string(a.body), "abuse report 902") {
			t.Fatalf("account token %s after the operator's disable and pause: %d %s, want 403 FORBIDDEN with the reason", action, a.status, a.body)
		}
	}
	card := call(t, "GET", bus, apitest.Acct1Token, "").json(t)
	if dis, _ := card["disabled"].(map[string]any); card["status"] != "paused" || dis["by"] != "operator" {
		t.Fatalf("card: status %v disabled %v, want paused with the operator's disable kept", card["status"], card["disabled"])
	}
	if card := call(t, "POST", bus+"/activate", apitest.AdminToken, "").json(t); card["status"] != "active" || card["disabled"] != nil {
		t.Fatalf("admin activate: %v", card)
	}
	if a := call(t, "POST", bus+"/pause", apitest.Acct1Token, ""); a.status != 200 {
		t.Fatalf("account pause once an admin re-activated it: %d %s", a.status, a.body)
	}
}
