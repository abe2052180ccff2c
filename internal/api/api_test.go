package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mercamap/relay/internal/api"
	"github.com/mercamap/relay/internal/api/apitest"
	"github.com/mercamap/relay/internal/api/contracttest"
	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/failures"
	"github.com/mercamap/relay/internal/store"
	"github.com/mercamap/relay/internal/stream"
)

// answer is one HTTP answer, decoded loosely.
type answer struct {
	status int
	body   []byte
	header http.Header
}

func (a answer) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(a.body, &m); err != nil {
		t.Fatalf("answer %d is not a JSON object: %v\n%s", a.status, err, a.body)
	}
	return m
}

// errorCode is the contract's error code of an error answer.
func (a answer) errorCode(t *testing.T) string {
	t.Helper()
	e, _ := a.json(t)["error"].(map[string]any)
	code, _ := e["code"].(string)
	if msg, _ := e["message"].(string); code != "" && msg == "" {
		t.Errorf("error %s has no message", code)
	}
	return code
}

// call sends one request; token "" sends no Authorization header, and a token with a
// space in it is sent as the whole header value.
func call(t *testing.T, method, url, token string, body string) answer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case strings.Contains(token, " "):
		req.Header.Set("Authorization", token)
	case token != "":
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return send(t, req)
}

// send sends req and reads its whole answer.
func send(t *testing.T, req *http.Request) answer {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{status: resp.StatusCode, body: b, header: resp.Header}
}

const dests = "/v1/connectors/%s/destinations"

func TestEveryRouteAnswersEachScopeAndErrorAsTheContractSays(t *testing.T) {
	r := apitest.New(t, apitest.Options{})
	const admin, acct1, acct2 = apitest.AdminToken, apitest.Acct1Token, apitest.Acct2Token
	bus := fmt.Sprintf(dests, "eventbridge") + "/orders-bus"
	cases := []struct {
		name, method, path, token, body string
		status                          int
		code                            string // the error code, for an error
	}{
		{"connectors admin", "GET", "/v1/connectors", admin, "", 200, ""},
		{"connectors account", "GET", "/v1/connectors", acct1, "", 200, ""},
		{"no Authorization header", "GET", "/v1/connectors", "", "", 401, "UNAUTHENTICATED"},
		{"unknown token", "GET", "/v1/connectors", "never-configured", "", 401, "UNAUTHENTICATED"},
		{"not a bearer token", "GET", "/v1/connectors", "Basic " + admin, "", 401, "UNAUTHENTICATED"},
		{"empty bearer token", "GET", "/v1/connectors", "Bearer  ", "", 401, "UNAUTHENTICATED"},
		{"list admin", "GET", fmt.Sprintf(dests, "eventbridge"), admin, "", 200, ""},
		{"list unknown connector", "GET", fmt.Sprintf(dests, "sqs"), admin, "", 404, "NOT_FOUND"},
		{"list without token", "GET", fmt.Sprintf(dests, "pubsub"), "", "", 401, "UNAUTHENTICATED"},
		{"card admin", "GET", bus, admin, "", 200, ""},
		{"card own account", "GET", bus, acct1, "", 200, ""},
		{"card another account's", "GET", bus, acct2, "", 404, "NOT_FOUND"},
		{"card under another connector", "GET", fmt.Sprintf(dests, "kinesis") + "/orders-bus", admin, "", 404, "NOT_FOUND"},
		{"card under an unknown connector", "GET", fmt.Sprintf(dests, "sqs") + "/orders-bus", admin, "", 404, "NOT_FOUND"},
		{"card unknown id", "GET", fmt.Sprintf(dests, "eventbridge") + "/nope", admin, "", 404, "NOT_FOUND"},
		{"pause another account's", "POST", bus + "/pause", acct2, "", 404, "NOT_FOUND"},
		{"activate another account's", "POST", bus + "/activate", acct2, "", 404, "NOT_FOUND"},
		{"test another account's", "POST", bus + "/test", acct2, "", 404, "NOT_FOUND"},
		{"test under another connector", "POST", fmt.Sprintf(dests, "pubsub") + "/orders-bus/test", admin, "", 404, "NOT_FOUND"},
		{"disable by an account token", "POST", bus + "/disable", acct1, "", 403, "FORBIDDEN"},
		{"disable another account's", "POST", bus + "/disable", acct2, "", 404, "NOT_FOUND"},
		{"disable with a bad body", "POST", bus + "/disable", admin, "{not json", 400, "INVALID_ARGUMENT"},
		{"attempts own", "GET", bus + "/attempts", acct1, "", 200, ""},
		{"attempts another account's", "GET", bus + "/attempts", acct2, "", 404, "NOT_FOUND"},
		{"attempts limit not a number", "GET", bus + "/attempts?limit=ten", admin, "", 400, "INVALID_ARGUMENT"},
		{"attempts limit zero", "GET", bus + "/attempts?limit=0", admin, "", 400, "INVALID_ARGUMENT"},
		{"attempts negative before", "GET", bus + "/attempts?before=-1", admin, "", 400, "INVALID_ARGUMENT"},
		{"attempts limit above the cap", "GET", bus + "/attempts?limit=100000", admin, "", 200, ""},
		{"snapshot own destination", "GET", "/v1/streams/destination:orders-bus/snapshot", acct1, "", 200, ""},
		{"snapshot escaped colon", "GET", "/v1/streams/destination%3Aorders-bus/snapshot", acct1, "", 200, ""},
		{"snapshot another account's destination channel", "GET", "/v1/streams/destination:orders-bus/snapshot", acct2, "", 403, "ACCESS_REVOKED"},
		{"snapshot another account's channel", "GET", "/v1/streams/account:acct_1/snapshot", acct2, "", 403, "ACCESS_REVOKED"},
		{"snapshot own account", "GET", "/v1/streams/account:acct_2/snapshot", acct2, "", 200, ""},
		{"snapshot unknown destination", "GET", "/v1/streams/destination:nope/snapshot", admin, "", 404, "NOT_FOUND"},
		{"snapshot unknown account", "GET", "/v1/streams/account:acct_9/snapshot", admin, "", 404, "NOT_FOUND"},
		{"snapshot not a channel", "GET", "/v1/streams/orders-bus/snapshot", admin, "", 404, "NOT_FOUND"},
		{"snapshot without token", "GET", "/v1/streams/account:acct_1/snapshot", "", "", 401, "UNAUTHENTICATED"},
		{"events own", "GET", "/v1/streams/account:acct_1/events?after=0", acct1, "", 200, ""},
		{"events another account's", "GET", "/v1/streams/account:acct_1/events", acct2, "", 403, "ACCESS_REVOKED"},
		{"events bad after", "GET", "/v1/streams/account:acct_1/events?after=x", admin, "", 400, "INVALID_ARGUMENT"},
		{"events negative after", "GET", "/v1/streams/account:acct_1/events?after=-3", admin, "", 400, "INVALID_ARGUMENT"},
		{"events bad limit", "GET", "/v1/streams/account:acct_1/events?limit=0", admin, "", 400, "INVALID_ARGUMENT"},
		{"events cursor ahead of the channel", "GET", "/v1/streams/account:acct_1/events?after=99", admin, "", 410, "CURSOR_EXPIRED"},
		{"subscribe another account's", "GET", "/v1/streams/destination:orders-bus/subscribe", acct2, "", 403, "ACCESS_REVOKED"},
		{"subscribe unknown token", "GET", "/v1/streams/destination:orders-bus/subscribe", "nope", "", 401, "UNAUTHENTICATED"},
		{"subscribe unknown destination", "GET", "/v1/streams/destination:nope/subscribe", admin, "", 404, "NOT_FOUND"},
		{"unknown route", "GET", "/v2/whatever", admin, "", 404, "NOT_FOUND"},
		{"healthz needs no token", "GET", "/healthz", "", "", 200, ""},
		{"readyz needs no token", "GET", "/readyz", "", "", 200, ""},
		{"unknown route without a token", "GET", "/v2/whatever", "", "", 401, "UNAUTHENTICATED"},
		{"no metrics on the API listener", "GET", "/metrics", admin, "", 404, "NOT_FOUND"},
		{"no metrics on the API listener, nor without a token", "GET", "/metrics", "", "", 401, "UNAUTHENTICATED"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := call(t, c.method, r.URL+c.path, c.token, c.body)
			if a.status != c.status {
				t.Fatalf("%s %s: status %d, want %d\n%s", c.method, c.path, a.status, c.status, a.body)
			}
			if c.code != "" {
				if got := a.errorCode(t); got != c.code {
					t.Fatalf("%s %s: code %q, want %q", c.method, c.path, got, c.code)
				}
				if ct := a.header.Get("Content-Type"); ct != "application/json" {
					t.Errorf("error answered as %q", ct)
				}
			}
		})
	}
}

func TestListsShowOnlyWhatTheTokenSeesUnderItsOwnConnector(t *testing.T) {
	r := apitest.New(t, apitest.Options{})
	counts := func(token string) map[string]float64 {
		out := map[string]float64{}
		for _, c := range call(t, "GET", r.URL+"/v1/connectors", token, "").json(t)["connectors"].([]any) {
			m := c.(map[string]any)
			out[m["connector"].(string)] = m["destinations"].(float64)
		}
		return out
	}
	want := map[string]map[string]float64{
		apitest.AdminToken: {"eventbridge": 2, "kinesis": 1, "pubsub": 1},
		apitest.Acct1Token: {"eventbridge": 1, "kinesis": 1, "pubsub": 1},
		apitest.Acct2Token: {"eventbridge": 1, "kinesis": 0, "pubsub": 0},
	}
	for token, w := range want {
		if got := counts(token); fmt.Sprint(got) != fmt.Sprint(w) {
			t.Errorf("connectors for %s: %v, want %v", token[:5], got, w)
		}
	}
	ids := func(token, connector string) []string {
		var out []string
		for _, c := range call(t, "GET", r.URL+fmt.Sprintf(dests, connector), token, "").json(t)["destinations"].([]any) {
			card := c.(map[string]any)
			if card["connector"] != connector {
				t.Errorf("%s listed under %s", card["id"], connector)
			}
			out = append(out, card["id"].(string))
		}
		return out
	}
	for _, c := range []struct {
		token, connector string
		want             []string
	}{
		{apitest.AdminToken, "eventbridge", []string{"orders-bus", "other-bus"}},
		{apitest.Acct1Token, "eventbridge", []string{"orders-bus"}},
		{apitest.Acct2Token, "eventbridge", []string{"other-bus"}},
		{apitest.Acct2Token, "kinesis", nil},
		{apitest.AdminToken, "pubsub", []string{"orders-topic"}},
	} {
		if got := ids(c.token, c.connector); !slices.Equal(got, c.want) {
			t.Errorf("%s under %s: %v, want %v", c.token[:5], c.connector, got, c.want)
		}
	}
}

func TestCardsOfAllThreeConnectorsHaveTheContractShape(t *testing.T) {
	r := apitest.New(t, apitest.Options{})
	card := func(connector, id string) map[string]any {
		a := call(t, "GET", r.URL+fmt.Sprintf(dests, connector)+"/"+id, apitest.Acct1Token, "")
		if a.status != 200 {
			t.Fatalf("card %s: %d %s", id, a.status, a.body)
		}
		return a.json(t)
	}
	common := func(c map[string]any, id, connector string) {
		t.Helper()
		for _, key := range []string{"id", "connector", "account", "status", "target", "external_id", "setup",
			"consecutive_failures", "last_failure", "last_delivery", "disabled", "sequence"} {
			if _, ok := c[key]; !ok {
				t.Errorf("%s: card has no %q", id, key)
			}
		}
		if c["id"] != id || c["connector"] != connector || c["account"] != apitest.Acct1 || c["status"] != "active" ||
			c["consecutive_failures"] != 0.0 || c["last_failure"] != nil || c["last_delivery"] != nil || c["disabled"] != nil || c["sequence"] != 0.0 {
			t.Errorf("%s: card %v", id, c)
		}
	}

	eb := card("eventbridge", "orders-bus")
	common(eb, "orders-bus", "eventbridge")
	ext, _ := eb["external_id"].(string)
	if !strings.HasPrefix(ext, "relay-") {
		t.Errorf("eventbridge external_id %q: want the issued one", ext)
	}
	if tg := eb["target"].(map[string]any); tg["bus_arn"] != "arn:aws:events:us-east-1:111122223333:event-bus/orders" ||
		tg["role_arn"] != "arn:aws:iam::111122223333:role/mercamap-delivery" {
		t.Errorf("eventbridge target %v", tg)
	}
	setup := eb["setup"].(map[string]any)
	if setup["principal_arn"] != apitest.Identity.AWSPrincipalARN || setup["kms_statement"] != nil {
		t.Errorf("eventbridge setup %v", setup)
	}
	trust, _ := json.Marshal(setup["trust_policy"])
	if !strings.Contains(string(trust), `"sts:ExternalId":"`+ext+`"`) || !strings.Contains(string(trust), apitest.Identity.AWSPrincipalARN) {
		t.Errorf("trust policy %s does not pin our principal and the ExternalId", trust)
	}
	perms, _ := json.Marshal(setup["permissions_policy"])
	if !strings.Contains(string(perms), `"Action":"events:PutEvents"`) || !strings.Contains(string(perms), `"Resource":"arn:aws:events:us-east-1:111122223333:event-bus/orders"`) ||
		strings.Count(string(perms), `"Action"`) != 1 {
		t.Errorf("permissions policy %s", perms)
	}

	ks := card("kinesis", "orders-stream")
	common(ks, "orders-stream", "kinesis")
	if e, _ := ks["external_id"].(string); e == "" || e == ext {
		t.Errorf("kinesis external_id %q: want its own", e)
	}
	if tg := ks["target"].(map[string]any); tg["stream_arn"] == nil || tg["role_arn"] == nil || tg["kms_key_arn"] == nil {
		t.Errorf("kinesis target %v", tg)
	}
	kms, _ := json.Marshal(ks["setup"].(map[string]any)["kms_statement"])
	if !strings.Contains(string(kms), "kms:GenerateDataKey") || !strings.Contains(string(kms), "kinesis.eu-west-1.amazonaws.com") {
		t.Errorf("kinesis kms_statement %s", kms)
	}

	ps := card("pubsub", "orders-topic")
	common(ps, "orders-topic", "pubsub")
	if ps["external_id"] != nil {
		t.Errorf("pubsub external_id %v: want null", ps["external_id"])
	}
	if tg := ps["target"].(map[string]any); tg["project_id"] != "acme-prod" || tg["topic_id"] != "relay-events" {
		t.Errorf("pubsub target %v", tg)
	}
	psSetup := ps["setup"].(map[string]any)
	cmds, _ := psSetup["commands"].([]any)
	if psSetup["service_account"] != apitest.Identity.GCPServiceAccount || len(cmds) != 3 ||
		!strings.Contains(cmds[2].(string), "--update-labels=mercamap-account=acct_1") {
		t.Errorf("pubsub setup %v", psSetup)
	}
}

func TestPauseActivateTestAndTheAttemptLogPages(t *testing.T) {
	r := apitest.New(t, apitest.Options{})
	bus := r.URL + fmt.Sprintf(dests, "eventbridge") + "/orders-bus"
	a := call(t, "POST", bus+"/pause", apitest.Acct1Token, "").json(t)
	if a["status"] != "paused" || a["sequence"] != 1.0 {
		t.Fatalf("after pause: status %v sequence %v", a["status"], a["sequence"])
	}
	a = call(t, "POST", bus+"/activate", apitest.Acct1Token, "").json(t)
	if a["status"] != "active" || a["sequence"] != 2.0 {
		t.Fatalf("after activate: status %v sequence %v", a["status"], a["sequence"])
	}

	r.Sink.SetBehave(func(string, destination.Message) error {
		return failures.NewRejected("AccessDeniedException: the role may not call events:PutEvents on the bus", nil)
	})
	out := call(t, "POST", bus+"/test", apitest.Acct1Token, "").json(t)
	if out["outcome"] != "rejected" || !strings.Contains(out["message"].(string), "events:PutEvents") {
		t.Fatalf("test answered %v", out)
	}
	r.Sink.SetBehave(nil)
	for range 4 {
		if out := call(t, "POST", bus+"/test", apitest.AdminToken, "").json(t); out["outcome"] != "delivered" {
			t.Fatalf("test answered %v", out)
		}
	}
	card := call(t, "GET", bus, apitest.Acct1Token, "").json(t)
	if card["consecutive_failures"] != 0.0 || card["last_delivery"] == nil || card["last_failure"].(map[string]any)["class"] != "rejected" {
		t.Errorf("card after tests: %v", card)
	}

	// Five attempts, newest first, two at a time: 5 4 | 3 2 | 1.
	var got []float64
	before := ""
	for page := 0; ; page++ {
		a := call(t, "GET", bus+"/attempts?limit=2"+before, apitest.Acct1Token, "").json(t)
		for _, at := range a["attempts"].([]any) {
			m := at.(map[string]any)
			for _, k := range []string{"n", "at", "event_id", "outcome", "message"} {
				if _, ok := m[k]; !ok {
					t.Errorf("attempt without %q: %v", k, m)
				}
			}
			got = append(got, m["n"].(float64))
		}
		if a["next"] == nil {
			break
		}
		if page > 3 {
			t.Fatal("attempt pages never end")
		}
		before = fmt.Sprintf("&before=%v", a["next"])
	}
	if !slices.Equal(got, []float64{5, 4, 3, 2, 1}) {
		t.Errorf("attempts %v, want 5 4 3 2 1", got)
	}
	if all := call(t, "GET", bus+"/attempts", apitest.Acct1Token, "").json(t); len(all["attempts"].([]any)) != 5 || all["next"] != nil {
		t.Errorf("default page %v", all)
	}
	first := call(t, "GET", bus+"/attempts?limit=1", apitest.Acct1Token, "").json(t)["attempts"].([]any)[0].(map[string]any)
	if first["outcome"] != "delivered" || !strings.HasPrefix(first["event_id"].(string), "relay.test.") {
		t.Errorf("newest attempt %v", first)
	}
}

func TestAdminDisableCascadesOverTheSameCloudAccount(t *testing.T) {
	r := apitest.New(t, apitest.Options{})
	path := r.URL + fmt.Sprintf(dests, "eventbridge") + "/orders-bus/disable"
	a := call(t, "POST", path, apitest.AdminToken, `{"reason":"customer asked"}`)
	if a.status != 200 {
		t.Fatalf("disable: %d %s", a.status, a.body)
	}
	var got struct{ Disabled []string }
	_ = json.Unmarshal(a.body, &got)
	if !slices.Equal(got.Disabled, []string{"orders-bus", "orders-stream"}) {
		t.Fatalf("disabled %v, want orders-bus and orders-stream (same AWS account)", got.Disabled)
	}
	for _, c := range []struct{ connector, id, status string }{
		{"eventbridge", "orders-bus", "disabled"}, {"kinesis", "orders-stream", "disabled"},
		{"pubsub", "orders-topic", "active"}, {"eventbridge", "other-bus", "active"},
	} {
		card := call(t, "GET", r.URL+fmt.Sprintf(dests, c.connector)+"/"+c.id, apitest.AdminToken, "").json(t)
		if card["status"] != c.status {
			t.Errorf("%s is %v, want %s", c.id, card["status"], c.status)
		}
		if c.status == "disabled" && !strings.Contains(fmt.Sprint(card["disabled"]), "customer asked") {
			t.Errorf("%s disabled %v: want the reason", c.id, card["disabled"])
		}
	}
	// Our operators' disable is theirs to undo: an admin token turns it back on.
	if card := call(t, "POST", r.URL+fmt.Sprintf(dests, "eventbridge")+"/orders-bus/activate", apitest.AdminToken, "").json(t); card["status"] != "active" || card["disabled"] != nil {
		t.Errorf("after activate: %v", card)
	}
}

func TestSnapshotsHoldTheStateTheirSequenceReflects(t *testing.T) {
	r := apitest.New(t, apitest.Options{})
	bus := r.URL + fmt.Sprintf(dests, "eventbridge") + "/orders-bus"
	call(t, "POST", bus+"/pause", apitest.AdminToken, "")
	call(t, "POST", r.URL+fmt.Sprintf(dests, "pubsub")+"/orders-topic/pause", apitest.AdminToken, "")

	var d stream.Snapshot
	_ = json.Unmarshal(call(t, "GET", r.URL+"/v1/streams/destination:orders-bus/snapshot", apitest.Acct1Token, "").body, &d)
	if d.Channel != "destination:orders-bus" || d.Sequence != 1 || d.Cursor != "1" || d.Data.Destination == nil ||
		d.Data.Destination.Status != "paused" || d.Data.Destination.Sequence != 1 {
		t.Fatalf("destination snapshot %+v", d)
	}

	a := call(t, "GET", r.URL+"/v1/streams/account:acct_1/snapshot", apitest.Acct1Token, "")
	var acct stream.Snapshot
	_ = json.Unmarshal(a.body, &acct)
	if acct.Sequence != 2 || acct.Cursor != "2" || acct.Data.Account == nil || acct.Data.Account.ID != "acct_1" || len(acct.Data.Destinations) != 3 {
		t.Fatalf("account snapshot %s", a.body)
	}
	status := map[string]string{}
	for _, c := range acct.Data.Destinations {
		status[c.ID] = c.Status
	}
	if status["orders-bus"] != "paused" || status["orders-topic"] != "paused" || status["orders-stream"] != "active" {
		t.Errorf("account snapshot statuses %v", status)
	}
	// An account with no destinations still has the shape: destinations is [].
	empty := call(t, "GET", r.URL+"/v1/streams/account:acct_2/snapshot", apitest.AdminToken, "").json(t)
	if _, ok := empty["data"].(map[string]any)["destinations"].([]any); !ok {
		t.Errorf("account snapshot data %v: want a destinations list", empty["data"])
	}
}

// trimChannel appends pause/activate events with a tiny retention until the channel's
// first retained event is after the sequence keepAfter: as if keepAfter were older than
// channel_retention.
func trimChannel(t *testing.T, r *apitest.Rig, id string, keepAfter int64) {
	t.Helper()
	ref := store.Ref{Account: apitest.Acct1, ID: id}
	ctx := context.Background()
	status := []string{store.Paused, store.Active}
	i := 0
	apitest.WaitFor(t, 10*time.Second, "the channel trimmed past its old events", func() bool {
		if _, err := r.Store.SetStatus(ctx, ref, status[i%2], "trim", time.Nanosecond); err != nil {
			t.Fatal(err)
		}
		i++
		page, err := r.Store.ReadChannel(ctx, apitest.Acct1, store.DestinationChannel(id), 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		return len(page.Events) == 1 && page.Events[0].Sequence > keepAfter+1
	})
}

func TestReplayPagesFromACursorAndAnOldCursorGets410(t *testing.T) {
	r := apitest.New(t, apitest.Options{})
	bus := r.URL + fmt.Sprintf(dests, "eventbridge") + "/orders-bus"
	for range 5 {
		call(t, "POST", bus+"/pause", apitest.AdminToken, "")
		call(t, "POST", bus+"/activate", apitest.AdminToken, "")
	}
	page := func(q string) stream.Page {
		a := call(t, "GET", r.URL+"/v1/streams/destination:orders-bus/events"+q, apitest.Acct1Token, "")
		if a.status != 200 {
			t.Fatalf("events%s: %d %s", q, a.status, a.body)
		}
		var p stream.Page
		_ = json.Unmarshal(a.body, &p)
		return p
	}
	p := page("?after=0&limit=3")
	if len(p.Events) != 3 || p.Events[0].Sequence != 1 || p.Cursor != "3" || !p.More {
		t.Fatalf("first page %+v", p)
	}
	e := p.Events[0]
	if e.ID != "destination:orders-bus:1" || e.Type != "destination.paused" || e.Time.IsZero() || !strings.Contains(string(e.Data), `"state"`) {
		t.Errorf("event %+v", e)
	}
	if p := page("?after=3"); len(p.Events) != 7 || p.Cursor != "10" || p.More {
		t.Errorf("rest %+v", p)
	}
	if p := page("?after=10"); len(p.Events) != 0 || p.Cursor != "10" || p.More {
		t.Errorf("at the end %+v", p)
	}
	if p := page(""); len(p.Events) != 10 {
		t.Errorf("default after=0 gave %d events", len(p.Events))
	}

	trimChannel(t, r, "orders-bus", 4)
	a := call(t, "GET", r.URL+"/v1/streams/destination:orders-bus/events?after=2", apitest.Acct1Token, "")
	if a.status != 410 || a.errorCode(t) != "CURSOR_EXPIRED" {
		t.Fatalf("old cursor: %d %s", a.status, a.body)
	}
	if p := page("?after=0"); len(p.Events) == 0 || p.Events[0].Sequence <= 5 {
		t.Errorf("after=0 must start at the first retained event, got %+v", p.Events)
	}
}

// sse reads one subscription's frames.
type sse struct {
	resp *http.Response
	rd   *bufio.Reader
}

type sseFrame struct{ id, event, data, comment string }

func subscribe(t *testing.T, url, token, lastEventID string) *sse {
	t.Helper()
	// A bounded read: a stream that never sends what the test waits for fails it.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("subscribe: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	return &sse{resp: resp, rd: bufio.NewReader(resp.Body)}
}

// next reads the next frame or comment; err at the end of the stream.
func (s *sse) next() (sseFrame, error) {
	var f sseFrame
	for {
		line, err := s.rd.ReadString('\n')
		if err != nil {
			return f, err
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "":
			if f != (sseFrame{}) {
				return f, nil
			}
		case strings.HasPrefix(line, ":"):
			f.comment = strings.TrimSpace(line[1:])
		case strings.HasPrefix(line, "id: "):
			f.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			f.event = line[7:]
		case strings.HasPrefix(line, "data: "):
			f.data = line[6:]
		}
	}
}

// nextEvent skips comments.
func (s *sse) nextEvent(t *testing.T) sseFrame {
	t.Helper()
	for {
		f, err := s.next()
		if err != nil {
			t.Fatalf("subscription ended: %v", err)
		}
		if f.comment == "" {
			return f
		}
	}
}

func TestSubscribeSendsEventsKeepAlivesAndResumesAfterLastEventID(t *testing.T) {
	r := apitest.New(t, apitest.Options{Stream: stream.Options{KeepAlive: 30 * time.Millisecond}})
	bus := r.URL + fmt.Sprintf(dests, "eventbridge") + "/orders-bus"
	call(t, "POST", bus+"/pause", apitest.AdminToken, "") // sequence 1, before the subscription

	s := subscribe(t, r.URL+"/v1/streams/destination:orders-bus/subscribe", apitest.Acct1Token, "")
	call(t, "POST", bus+"/activate", apitest.AdminToken, "")
	f := s.nextEvent(t)
	if f.id != "2" || f.event != "destination.activated" {
		t.Fatalf("first frame %+v: want id 2 destination.activated (it starts after the current sequence)", f)
	}
	var ev stream.Event
	if err := json.Unmarshal([]byte(f.data), &ev); err != nil || ev.Sequence != 2 || ev.ID != "destination:orders-bus:2" || ev.Type != f.event {
		t.Fatalf("data %s: %v", f.data, err)
	}
	keepAlives := 0
	for keepAlives < 2 {
		f, err := s.next()
		if err != nil {
			t.Fatal(err)
		}
		if f.comment == "keep-alive 2" { // it names the last sequence the stream passed
			keepAlives++
		}
	}

	// Resuming after 1 sends 2 again, then what follows.
	call(t, "POST", bus+"/pause", apitest.AdminToken, "")
	again := subscribe(t, r.URL+"/v1/streams/destination:orders-bus/subscribe", apitest.Acct1Token, "1")
	for _, want := range []string{"2", "3"} {
		if f := again.nextEvent(t); f.id != want {
			t.Fatalf("resumed frame %+v, want id %s", f, want)
		}
	}
}

func TestBadLastEventIDIs400(t *testing.T) {
	r := apitest.New(t, apitest.Options{})
	req, _ := http.NewRequest("GET", r.URL+"/v1/streams/destination:orders-bus/subscribe", nil)
	req.Header.Set("Authorization", "Bearer "+apitest.AdminToken)
	req.Header.Set("Last-Event-ID", "yesterday")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("status %d, want 400", resp.StatusCode)
	}
}

func TestAnEventLargerThanTheBroadcastLimitArrivesAsAPointerAndReplayHasTheEvent(t *testing.T) {
	r := apitest.New(t, apitest.Options{Stream: stream.Options{BroadcastLimit: 2048}})
	s := subscribe(t, r.URL+"/v1/streams/destination:orders-bus/subscribe", apitest.Acct1Token, "")
	call(t, "POST", r.URL+fmt.Sprintf(dests, "eventbridge")+"/orders-bus/test", apitest.AdminToken, "")
	big := "AccessDeniedException: " + strings.Repeat("the role may not write to the bus; ", 100)
	r.Sink.SetBehave(func(string, destination.Message) error { return failures.NewRejected(big, nil) })
	call(t, "POST", r.URL+fmt.Sprintf(dests, "eventbridge")+"/orders-bus/test", apitest.AdminToken, "")

	if f := s.nextEvent(t); f.event != "delivery.succeeded" || f.id != "1" {
		t.Fatalf("small event came as %+v", f)
	}
	f := s.nextEvent(t)
	if f.event != "relay-pointer/1" || f.id != "2" || f.data != `{"sequence":2}` {
		t.Fatalf("large event came as %+v, want a relay-pointer/1 to sequence 2", f)
	}
	a := call(t, "GET", r.URL+"/v1/streams/destination:orders-bus/events?after=0", apitest.Acct1Token, "")
	var p stream.Page
	_ = json.Unmarshal(a.body, &p)
	if len(p.Events) != 2 || p.Events[1].Type != "delivery.rejected" || !strings.Contains(string(p.Events[1].Data), "may not write") {
		t.Fatalf("replay %s", a.body)
	}
	if strings.Contains(string(a.body), "relay-pointer") {
		t.Fatal("replay holds a pointer")
	}
}

func TestARevokedTokenIsRefusedEverywhereAndItsSubscriptionCloses(t *testing.T) {
	r := apitest.New(t, apitest.Options{})
	s := subscribe(t, r.URL+"/v1/streams/account:acct_1/subscribe", apitest.Acct1Token, "")
	adminSub := subscribe(t, r.URL+"/v1/streams/account:acct_1/subscribe", apitest.AdminToken, "")

	cfg := apitest.Config()
	cfg.API.Tokens = slices.DeleteFunc(cfg.API.Tokens, func(tok config.Token) bool { return tok.Token == apitest.Acct1Token })
	r.API.Reload(cfg)

	ended := make(chan error, 1)
	go func() {
		for {
			if _, err := s.next(); err != nil {
				ended <- err
				return
			}
		}
	}()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the revoked token's subscription is still open")
	}
	for _, path := range []string{
		"/v1/connectors",
		fmt.Sprintf(dests, "eventbridge") + "/orders-bus",
		"/v1/streams/account:acct_1/snapshot",
		"/v1/streams/destination:orders-bus/events?after=0",
		"/v1/streams/account:acct_1/subscribe",
	} {
		a := call(t, "GET", r.URL+path, apitest.Acct1Token, "")
		if a.status != 403 || a.errorCode(t) != "ACCESS_REVOKED" {
			t.Errorf("revoked token on %s: %d %s", path, a.status, a.body)
		}
	}
	if a := call(t, "GET", r.URL+"/v1/connectors", "never-configured", ""); a.status != 401 {
		t.Errorf("unknown token: %d, want 401 (never valid is not revoked)", a.status)
	}
	// The admin's subscription is untouched.
	call(t, "POST", r.URL+fmt.Sprintf(dests, "eventbridge")+"/orders-bus/pause", apitest.AdminToken, "")
	if f := adminSub.nextEvent(t); f.event != "destination.paused" {
		t.Errorf("admin subscription got %+v", f)
	}
	// Put back, it is valid again.
	r.API.Reload(apitest.Config())
	if a := call(t, "GET", r.URL+"/v1/connectors", apitest.Acct1Token, ""); a.status != 200 {
		t.Errorf("token put back: %d", a.status)
	}
}

func TestMetricsShowLagAndDeliveriesAndReadyzNamesWhatIsNotReady(t *testing.T) {
	reg := prometheus.NewRegistry()
	r := startWithOrdersBusThrottled(t, apitest.Options{Registry: reg, LagInterval: time.Millisecond})
	ids := r.Publish(apitest.Acct1, 5)
	apitest.WaitFor(t, 10*time.Second, "the stream to take every event", func() bool {
		return slices.Equal(r.Sink.Delivered("orders-stream"), ids)
	})
	wants := []string{
		`relay_destination_lag_events{account="acct_1",connector="eventbridge",destination="orders-bus"} 5`,
		`relay_destination_lag_events{account="acct_1",connector="kinesis",destination="orders-stream"} 0`,
		`relay_delivery_attempts_total{connector="kinesis",outcome="delivered"} 5`,
		`relay_delivery_attempts_total{connector="eventbridge",outcome="not_taken"}`, "relay_leases_held 4"}
	var body string
	missing := ""
	apitest.WaitFor(t, 10*time.Second, "every series on /metrics (the last missing is printed below)", func() bool {
		body = string(call(t, "GET", r.MetricsURL+"/metrics", "", "").body)
		for _, want := range wants {
			if !strings.Contains(body, want) {
				if missing != want {
					t.Logf("/metrics lacks %s", want)
				}
				missing = want
				return false
			}
		}
		return true
	})

	down := apitest.New(t, apitest.Options{Broker: func() bool { return false }})
	a := call(t, "GET", down.URL+"/readyz", "", "")
	checks, _ := a.json(t)["checks"].(map[string]any)
	// The API serves through a broker outage: readiness says so, and stays 200.
	if a.status != 200 || checks["broker"] == "ok" || checks["redis"] != "ok" || checks["config"] != "ok" {
		t.Errorf("readyz with the broker down: %d %s (want 200, the broker named)", a.status, a.body)
	}
	if a := call(t, "GET", down.URL+"/healthz", "", ""); a.status != 200 {
		t.Errorf("healthz: %d", a.status)
	}
}

// probeTimeout is the shipped readiness probe's timeoutSeconds (the Helm chart's values).
func probeTimeout(t *testing.T) time.Duration {
	t.Helper()
	b, err := os.ReadFile("../../deploy/helm/relay/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`readiness:[^\n]*\n(?:[ \t]+[^\n]*\n)*?[ \t]+timeoutSeconds:[ \t]*(\d+)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("values.yaml has no probes.readiness.timeoutSeconds")
	}
	n, _ := strconv.Atoi(string(m[1]))
	return time.Duration(n) * time.Second
}

// TestReadyzAnswersWithinTheProbeTimeoutWhenRedisHangs: Redis accepts connections and
// never answers. Each /readyz, one after another and several at once, answers 503
// naming Redis within the shipped probe's timeout.
func TestReadyzAnswersWithinTheProbeTimeoutWhenRedisHangs(t *testing.T) {
	limit := probeTimeout(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // read nothing, answer nothing
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	st, err := store.Open("redis://" + ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv := api.New(api.Options{Config: apitest.Config(), Store: st, Broker: func() bool { return true }})
	hs := httptest.NewServer(contracttest.New(t).Wrap(srv.Handler()))
	t.Cleanup(hs.Close)

	check := func(who string) {
		start := time.Now()
		a := call(t, "GET", hs.URL+"/readyz", "", "")
		took := time.Since(start)
		checks, _ := a.json(t)["checks"].(map[string]any)
		if a.status != 503 || checks["redis"] == "ok" || checks["broker"] != "ok" || checks["config"] != "ok" {
			t.Errorf("%s: readyz with Redis hanging: %d %s", who, a.status, a.body)
		}
		if took >= limit {
			t.Errorf("%s: readyz answered after %v: the probe gives up at %v", who, took, limit)
		}
	}
	for i := range 3 {
		check(fmt.Sprintf("call %d", i+1))
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() { check(fmt.Sprintf("concurrent call %d", i+1)) })
	}
	wg.Wait()
}
