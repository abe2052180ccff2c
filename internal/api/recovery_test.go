package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/mercamap/relay/internal/api/apitest"
	"github.com/mercamap/relay/internal/assume"
	"github.com/mercamap/relay/internal/awstest"
	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/dispatch"
	"github.com/mercamap/relay/internal/sinks/eventbridge"
	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/store/storetest"
)

type listPage struct {
	Destinations []struct {
		ID, Status, Account string
	}
	NextPageToken *string `json:"next_page_token"`
	Summary       map[string]int
	Matched       int
}

func list(t *testing.T, r *apitest.Rig, token string, q url.Values) (listPage, answer) {
	t.Helper()
	a := call(t, "GET", r.URL+fmt.Sprintf(dests, "eventbridge")+"?"+q.Encode(), token, "")
	var p listPage
	if a.status == 200 {
		if err := json.Unmarshal(a.body, &p); err != nil {
			t.Fatal(err)
		}
	}
	return p, a
}

// walk follows next_page_token to the end and returns every id, in order.
func walk(t *testing.T, r *apitest.Rig, token string, q url.Values) (ids []string, pages int) {
	t.Helper()
	for {
		p, a := list(t, r, token, q)
		if a.status != 200 {
			t.Fatalf("list %v: %d %s", q, a.status, a.body)
		}
		pages++
		for _, d := range p.Destinations {
			ids = append(ids, d.ID)
		}
		if p.NextPageToken == nil {
			return ids, pages
		}
		q.Set("page_token", *p.NextPageToken)
		if pages > 100 {
			t.Fatal("the pages never end")
		}
	}
}

func TestDestinationListPagesFiltersAndSearches(t *testing.T) {
	// 30 more EventBridge destinations of acct_1, each in an AWS account of its own (so
	// a disable cascades over none of the others).
	var fleet []string
	r := apitest.New(t, apitest.Options{Config: func(c *config.Config) {
		for i := range 30 {
			id := fmt.Sprintf("fleet-%02d", i)
			fleet = append(fleet, id)
			c.Destinations = append(c.Destinations, destination.Destination{ID: id, Account: apitest.Acct1,
				Connector: destination.EventBridge, BusARN: fmt.Sprintf("arn:aws:events:us-east-1:5000000000%02d:event-bus/b", i),
				RoleARN: fmt.Sprintf("arn:aws:iam::5000000000%02d:role/r", i)})
		}
	}})
	bus := r.URL + fmt.Sprintf(dests, "eventbridge")

	// Without parameters: the whole list, as the contract has it.
	if p, _ := list(t, r, apitest.AdminToken, url.Values{}); len(p.Destinations) != 32 || p.NextPageToken != nil {
		t.Fatalf("the plain list holds %d cards (next %v), want 32", len(p.Destinations), p.NextPageToken)
	}
	// Pages of 7: every card once, in id order.
	ids, pages := walk(t, r, apitest.AdminToken, url.Values{"page_size": {"7"}})
	want := slices.Sorted(slices.Values(append(slices.Clone(fleet), "orders-bus", "other-bus")))
	if !slices.Equal(ids, want) || pages != 5 {
		t.Fatalf("pages of 7 gave %d pages: %v", pages, ids)
	}
	// An account token pages through its own only.
	if ids, _ := walk(t, r, apitest.Acct2Token, url.Values{"page_size": {"7"}}); !slices.Equal(ids, []string{"other-bus"}) {
		t.Fatalf("acct_2 lists %v", ids)
	}
	if ids, _ := walk(t, r, apitest.AdminToken, url.Values{"account": {apitest.Acct2}}); !slices.Equal(ids, []string{"other-bus"}) {
		t.Fatalf("account=acct_2 lists %v", ids)
	}
	// Search by id, case-insensitive.
	if ids, _ := walk(t, r, apitest.AdminToken, url.Values{"q": {"FLEET-1"}}); len(ids) != 10 || ids[0] != "fleet-10" {
		t.Fatalf("q=FLEET-1 lists %v", ids)
	}

	// Three paused, one disabled: the status filter finds exactly those, and each page
	// counts its cards.
	for _, id := range []string{"fleet-03", "fleet-17", "fleet-29"} {
		if a := call(t, "POST", bus+"/"+id+"/pause", apitest.AdminToken, ""); a.status != 200 {
			t.Fatalf("pause %s: %d %s", id, a.status, a.body)
		}
	}
	if a := call(t, "POST", bus+"/fleet-11/disable", apitest.AdminToken, `{"reason":"test"}`); a.status != 200 {
		t.Fatalf("disable: %d %s", a.status, a.body)
	}
	if ids, pages := walk(t, r, apitest.AdminToken, url.Values{"status": {"paused"}, "page_size": {"2"}}); !slices.Equal(ids, []string{"fleet-03", "fleet-17", "fleet-29"}) || pages != 2 {
		t.Fatalf("status=paused lists %v in %d pages", ids, pages)
	}
	if ids, _ := walk(t, r, apitest.AdminToken, url.Values{"status": {"disabled,paused"}, "q": {"fleet-1"}}); !slices.Equal(ids, []string{"fleet-11", "fleet-17"}) {
		t.Fatalf("status=disabled,paused q=fleet-1 lists %v", ids)
	}
	p, _ := list(t, r, apitest.AdminToken, url.Values{"page_size": {"20"}})
	if s := p.Summary; s["cards"] != 20 || s["paused"] != 2 || s["disabled"] != 1 || s["active"] != 17 || p.Matched != 32 {
		t.Fatalf("the first page of 20 counts %v (matched %d)", s, p.Matched)
	}
	// Failing: a warning threshold reached, set as the commit sets it.
	if err := r.Store.Client().HSet(t.Context(), storetest.DestKey(apitest.Acct1, "fleet-05"), "failing", `{"consecutive_failures":5}`).Err(); err != nil {
		t.Fatal(err)
	}
	if ids, _ := walk(t, r, apitest.AdminToken, url.Values{"status": {"failing"}}); !slices.Equal(ids, []string{"fleet-05"}) {
		t.Fatalf("status=failing lists %v", ids)
	}

	for _, q := range []url.Values{{"page_size": {"0"}}, {"page_size": {"x"}}, {"status": {"broken"}}, {"page_token": {"!!"}}} {
		if _, a := list(t, r, apitest.AdminToken, q); a.status != 400 || a.errorCode(t) != "INVALID_ARGUMENT" {
			t.Errorf("list %v: %d %s", q, a.status, a.body)
		}
	}
}

func TestReplayDryRunCountsWhatTheReplaySends(t *testing.T) {
	r := apitest.New(t, apitest.Options{})
	r.Start()
	bus := r.URL + fmt.Sprintf(dests, "eventbridge") + "/orders-bus"
	before := time.Now().Add(-time.Second).UTC().Format(time.RFC3339Nano)
	ids := r.Publish(apitest.Acct1, 6)
	apitest.WaitFor(t, 20*time.Second, "6 deliveries", func() bool { return len(r.Sink.Delivered("orders-bus")) == 6 })
	// The sink counts a write before its commit: wait for the sixth commit's event.
	apitest.WaitFor(t, 20*time.Second, "6 commits", func() bool { return r.Sequence(apitest.Acct1, "destination:orders-bus") == 6 })
	seq := r.Sequence(apitest.Acct1, "destination:orders-bus")

	dry := call(t, "POST", bus+"/replay", apitest.Acct1Token, `{"after_event":"`+ids[1]+`","dry_run":true}`).json(t)
	if dry["dry_run"] != true || dry["events"] != float64(4) || dry["pending"] != false || dry["first_at"] == nil {
		t.Fatalf("dry run after the 2nd event: %v", dry)
	}
	if all := call(t, "POST", bus+"/replay", apitest.Acct1Token, `{"from":"`+before+`","dry_run":true}`).json(t); all["events"] != float64(6) {
		t.Fatalf("dry run from before the first: %v", all)
	}
	// Nothing was sent or recorded.
	if got := r.Sequence(apitest.Acct1, "destination:orders-bus"); got != seq || len(r.Sink.Delivered("orders-bus")) != 6 {
		t.Fatalf("the dry run changed something: sequence %d → %d, %d delivered", seq, got, len(r.Sink.Delivered("orders-bus")))
	}
	old := time.Now().Add(-apitest.LogRetention - time.Hour).UTC().Format(time.RFC3339)
	if a := call(t, "POST", bus+"/replay", apitest.Acct1Token, `{"from":"`+old+`","dry_run":true}`); a.status != 400 {
		t.Fatalf("dry run older than the log: %d %s", a.status, a.body)
	}
	if a := call(t, "POST", bus+"/replay", apitest.Acct1Token, `{"after_event":"nope","dry_run":true}`); a.status != 400 {
		t.Fatalf("dry run after an unknown event: %d %s", a.status, a.body)
	}
	// The replay sends exactly what was counted, in order.
	call(t, "POST", bus+"/replay", apitest.Acct1Token, `{"after_event":"`+ids[1]+`"}`)
	want := slices.Concat(ids, ids[2:])
	apitest.WaitFor(t, 20*time.Second, "the replay", func() bool { return len(r.Sink.Delivered("orders-bus")) >= len(want) })
	if got := r.Sink.Delivered("orders-bus"); !slices.Equal(got, want) {
		t.Fatalf("delivered %v, want %v", got, want)
	}
}

func TestAttemptDetailShowsWhatTheBusReceivedAndTheMinutesCountIt(t *testing.T) {
	sts, eb := awstest.NewSTS(t), awstest.NewEventBridge(t)
	eb.RequireSessionFrom(sts)
	ours := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("AKIDOURS", "ours", "")}
	sink := eventbridge.New(eventbridge.Options{AWS: ours, Endpoint: eb.URL, IdentityName: "mercamap",
		Assumer: assume.New(assume.Options{STS: assume.NewSTSClient(ours, sts.URL), IdentityName: "mercamap"})})
	r := apitest.New(t, apitest.Options{Sinks: map[destination.Connector]dispatch.Sink{destination.EventBridge: sink}})
	ref := store.Ref{Account: apitest.Acct1, ID: "orders-bus", Connector: string(destination.EventBridge)}
	sts.RequireExternalIDOf("arn:aws:iam::111122223333:role/mercamap-delivery", func() string {
		ids, _ := r.Store.ExternalIDs(context.Background(), []store.Ref{ref})
		if len(ids) == 0 {
			return ""
		}
		return ids[0]
	})
	r.Start()
	bus := r.URL + fmt.Sprintf(dests, "eventbridge") + "/orders-bus"
	r.Publish(apitest.Acct1, 1)
	apitest.WaitFor(t, 20*time.Second, "the delivery", func() bool { return len(eb.Entries()) == 1 })
	eb.FailEntries(1, "AccessDeniedException", "User is not authorized to perform: events:PutEvents")
	r.Publish(apitest.Acct1, 1)
	apitest.WaitFor(t, 20*time.Second, "the rejection", func() bool {
		return call(t, "GET", bus, apitest.Acct1Token, "").json(t)["consecutive_failures"] == float64(1)
	})

	var d struct {
		Attempt struct{ N int64 }
		Sent    *destination.Sent
		Answer  struct{ Outcome, Message string }
	}
	a := call(t, "GET", bus+"/attempts/1", apitest.Acct1Token, "")
	if err := json.Unmarshal(a.body, &d); err != nil || a.status != 200 {
		t.Fatalf("attempt 1: %d %s", a.status, a.body)
	}
	got := eb.Entries()[0]
	if d.Sent == nil || d.Sent.EventBridge == nil || d.Answer.Outcome != "delivered" {
		t.Fatalf("attempt 1's detail: %s", a.body)
	}
	if e := d.Sent.EventBridge; e.Detail != got.Detail || e.Source != got.Source || e.DetailType != got.DetailType || e.EventBusName != got.EventBusName {
		t.Fatalf("the detail shows %+v, the bus received %+v", e, got)
	}
	a = call(t, "GET", bus+"/attempts/2", apitest.Acct1Token, "")
	if err := json.Unmarshal(a.body, &d); err != nil || d.Answer.Outcome != "rejected" || !strings.Contains(d.Answer.Message, "not authorized") || d.Sent == nil {
		t.Fatalf("attempt 2's detail: %s", a.body)
	}
	if a := call(t, "GET", bus+"/attempts/99", apitest.Acct1Token, ""); a.status != 404 {
		t.Fatalf("attempt 99: %d", a.status)
	}
	if a := call(t, "GET", bus+"/attempts/1", apitest.Acct2Token, ""); a.status != 404 {
		t.Fatalf("another account's attempt: %d", a.status)
	}

	var m struct {
		From              time.Time
		Step              int `json:"step_seconds"`
		Delivered, Failed []int64
	}
	a = call(t, "GET", bus+"/minutes", apitest.Acct1Token, "")
	if err := json.Unmarshal(a.body, &m); err != nil || len(m.Delivered) != 1440 || len(m.Failed) != 1440 || m.Step != 60 {
		t.Fatalf("minutes: %d %.200s", a.status, a.body)
	}
	sum := func(v []int64) (n int64) {
		for _, x := range v {
			n += x
		}
		return n
	}
	if sum(m.Delivered) != 1 || sum(m.Failed) != 1 || time.Since(m.From) < 23*time.Hour {
		t.Fatalf("minutes count %d delivered, %d failed from %s", sum(m.Delivered), sum(m.Failed), m.From)
	}
}
