package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/awstest"
	"github.com/mercamap/relay/internal/jobevent"
	"github.com/mercamap/relay/internal/store"
)

// apiCard is what these tests read of a card.
type apiCard struct {
	ID         string            `json:"id"`
	Status     string            `json:"status"`
	ExternalID *string           `json:"external_id"`
	ManagedBy  string            `json:"managed_by"`
	CreatedAt  *time.Time        `json:"created_at"`
	Target     map[string]string `json:"target"`
	InFlight   int               `json:"in_flight"`
	MaxRate    *float64          `json:"max_rate"`
}

// apiError is an error answer's body.
type apiErrorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Fields  []struct {
			Field   string `json:"field"`
			Message string `json:"message"`
		} `json:"fields"`
	} `json:"error"`
}

func decodeAs[T any](t *testing.T, a httpAnswer) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(a.body), &v); err != nil {
		t.Fatalf("answer %d %q: %v", a.status, a.body, err)
	}
	return v
}

// apiBusEntries are the event ids that reached the bus named bus, in their first
// arrival order.
func apiBusEntries(t *testing.T, bus *awstest.EventBridge, name string) []string {
	var mine []awstest.Entry
	for _, e := range bus.Entries() {
		if strings.HasSuffix(e.EventBusName, "event-bus/"+name) {
			mine = append(mine, e)
		}
	}
	return firstArrivals(t, mine)
}

// TestADestinationMadeThroughTheAPIIsDeliveredByEveryReplicaAndDeletedForGood: the
// customer's journey with no operator. An account token adds an EventBridge destination
// on replica 0; its card (read on replica 1) is pending with an ExternalId; the customer
// trusts the relay with that ExternalId in the role's trust policy (the sandbox STS
// enforces it); the setup check passes on whichever replica holds the lease, and the
// events published after it reach the bus in the publisher's confirmed order. A SIGHUP
// keeps it. A PATCH of its filter takes effect; a delete on replica 1 answers with
// whether a write was in flight, nothing reaches the bus after it, both replicas answer
// 404, and the same id made again gets a new ExternalId.
func TestADestinationMadeThroughTheAPIIsDeliveredByEveryReplicaAndDeletedForGood(t *testing.T) {
	rs := startReplicas(t, 2)
	const roleARN = "arn:aws:iam::111122223333:role/api-role"
	base := "/v1/connectors/eventbridge/destinations"
	body := `{"id":"api-bus","bus_arn":"arn:aws:events:us-east-1:111122223333:event-bus/api","role_arn":"` + roleARN + `"}`
	created := httpSend(t, http.MethodPost, rs.apis[0]+base, replicasAcctToken, body)
	if created.status != http.StatusCreated {
		t.Fatalf("create: %d %s", created.status, created.body)
	}
	card := decodeAs[apiCard](t, created)
	if card.Status != "pending" || card.ManagedBy != "api" || card.ExternalID == nil || *card.ExternalID == "" || card.CreatedAt == nil {
		t.Fatalf("the new card: %s; want pending, managed by the api, with an ExternalId and its creation time", created.body)
	}
	ext := *card.ExternalID
	// The other replica serves the same card, at once.
	waitUntil(t, time.Second, "replica 1 to serve the new card", func() bool {
		return httpDo(t, http.MethodGet, rs.apis[1]+base+"/api-bus", replicasAcctToken).status == http.StatusOK
	})
	if c := decodeAs[apiCard](t, httpDo(t, http.MethodGet, rs.apis[1]+base+"/api-bus", replicasAcctToken)); c.ExternalID == nil || *c.ExternalID != ext {
		t.Fatalf("replica 1's card has ExternalId %v, want %s", c.ExternalID, ext)
	}

	// The customer writes the trust policy with the card's ExternalId; the check passes.
	rs.sts.RequireExternalID(roleARN, ext)
	rs.testUntilActive(rs.apis[1]+base+"/api-bus", replicasAcctToken)
	rs.publish(0, 200, 32)
	confirmed := rs.confirmedIDs()
	waitUntil(t, 60*time.Second, "the 200 events at the api's bus", func() bool {
		return hasAll(apiBusEntries(t, rs.bus, "api"), confirmed)
	})
	if n := outOfOrder(confirmed, apiBusEntries(t, rs.bus, "api")); n > 0 {
		t.Fatalf("%d events reached the api's bus out of the publisher's confirmed order", n)
	}

	// A SIGHUP re-reads the file, which does not name it: it stays.
	if err := rs.procs[0].Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "the reload", func() bool { return strings.Contains(rs.logs[0].String(), `"msg":"config reloaded"`) })
	if a := httpDo(t, http.MethodGet, rs.apis[0]+base+"/api-bus", replicasAcctToken); a.status != http.StatusOK {
		t.Fatalf("after a SIGHUP the api's destination answers %d %s", a.status, a.body)
	}

	// Only failed jobs from now on.
	patched := httpSend(t, http.MethodPatch, rs.apis[1]+base+"/api-bus", replicasAcctToken, `{"events":["job.failed"]}`)
	if patched.status != http.StatusOK {
		t.Fatalf("patch: %d %s", patched.status, patched.body)
	}
	if c := decodeAs[apiCard](t, patched); c.ExternalID == nil || *c.ExternalID != ext {
		t.Fatalf("the patched card's ExternalId is %v, want it unchanged (%s)", c.ExternalID, ext)
	}
	before := len(apiBusEntries(t, rs.bus, "api"))
	for i := range 5 {
		job := jobevent.Job{ID: fmt.Sprintf("0190f2a4-6666-7000-8000-%012d", i), Status: "completed"}
		if i == 4 {
			job.Status = "failed"
		}
		if err := rs.ch.Publish(rs.exchange, job.RoutingKey(), false, false, jobevent.Build(job, rs.exchange, rs.key, time.Now())); err != nil {
			t.Fatal(err)
		}
	}
	failedID := jobevent.Job{ID: "0190f2a4-6666-7000-8000-000000000004", Status: "failed"}.EventID()
	waitUntil(t, 30*time.Second, "the failed job at the api's bus", func() bool {
		return slices.Contains(apiBusEntries(t, rs.bus, "api"), failedID)
	})
	if after := apiBusEntries(t, rs.bus, "api")[before:]; !slices.Equal(after, []string{failedID}) {
		t.Fatalf("after the filter changed the api's bus got %v, want only %s", after, failedID)
	}

	// Deleted on replica 1: nothing more reaches its bus, from either replica.
	del := httpSend(t, http.MethodDelete, rs.apis[1]+base+"/api-bus", replicasAcctToken, "")
	if del.status != http.StatusOK || !strings.Contains(del.body, `"deleted":"api-bus"`) || !strings.Contains(del.body, `"write_in_flight":`) {
		t.Fatalf("delete: %d %s", del.status, del.body)
	}
	landed := len(rs.bus.Entries())
	atDelete := len(apiBusEntries(t, rs.bus, "api"))
	for i, api := range rs.apis {
		waitUntil(t, time.Second, fmt.Sprintf("replica %d to answer 404", i), func() bool {
			return httpDo(t, http.MethodGet, api+base+"/api-bus", replicasAcctToken).status == http.StatusNotFound
		})
	}
	rs.publish(1000, 1050, 16) // every job matches orders-bus; api-bus would take the failed ones, none here
	for i := range 3 {
		job := jobevent.Job{ID: fmt.Sprintf("0190f2a4-7777-7000-8000-%012d", i), Status: "failed"}
		if err := rs.ch.Publish(rs.exchange, job.RoutingKey(), false, false, jobevent.Build(job, rs.exchange, rs.key, time.Now())); err != nil {
			t.Fatal(err)
		}
	}
	lastFailed := jobevent.Job{ID: "0190f2a4-7777-7000-8000-000000000002", Status: "failed"}.EventID()
	waitUntil(t, 30*time.Second, "the config's destination to get what followed", func() bool {
		return slices.Contains(firstArrivals(t, rs.bus.Entries()), lastFailed)
	})
	if n := len(apiBusEntries(t, rs.bus, "api")); n != atDelete {
		t.Fatalf("%d events reached the deleted destination's bus after its delete answered (%d entries landed in all before)", n-atDelete, landed)
	}

	// Made again: a new ExternalId, never the deleted one's.
	again := httpSend(t, http.MethodPost, rs.apis[0]+base, replicasAcctToken, body)
	if again.status != http.StatusCreated {
		t.Fatalf("create again: %d %s", again.status, again.body)
	}
	if c := decodeAs[apiCard](t, again); c.ExternalID == nil || *c.ExternalID == ext || c.Status != "pending" {
		t.Fatalf("made again: %s; want pending with a new ExternalId (the deleted one's was %s)", again.body, ext)
	}
}

// TestCreatesThatAreRefusedSayWhyAndMakeNothing: every hostile or mistaken create or
// change answers in words, naming the field, and leaves nothing behind.
func TestCreatesThatAreRefusedSayWhyAndMakeNothing(t *testing.T) {
	rs := startReplicasWith(t, 1, replicaOptions{api: "destinations_per_account: 3, destination_changes_per_account: {count: 6, per: 1m}"})
	api := rs.apis[0]
	base := "/v1/connectors/eventbridge/destinations"
	role := `"role_arn":"arn:aws:iam::111122223333:role/api-role"`
	bus := `"bus_arn":"arn:aws:events:us-east-1:111122223333:event-bus/api"`
	for _, c := range []struct {
		name, token, body string
		status            int
		code, field, says string
	}{
		{"another account in the body", replicasAcctToken, `{"account":"acct_2",` + bus + `,` + role + `}`, 403, "FORBIDDEN", "", "its own account"},
		{"an admin naming no account", replicasAdminToken, `{` + bus + `,` + role + `}`, 400, "INVALID_ARGUMENT", "account", "is required"},
		{"a GovCloud bus", replicasAcctToken, `{"bus_arn":"arn:aws-us-gov:events:us-gov-west-1:111122223333:event-bus/api",` + role + `}`, 400, "INVALID_ARGUMENT", "bus_arn", ""},
		{"a role in another AWS account", replicasAcctToken, `{` + bus + `,"role_arn":"arn:aws:iam::444455556666:role/api-role"}`, 400, "INVALID_ARGUMENT", "bus_arn", "account"},
		{"an id with a slash", replicasAcctToken, `{"id":"a/b",` + bus + `,` + role + `}`, 400, "INVALID_ARGUMENT", "id", ""},
		{"an id of dots", replicasAcctToken, `{"id":"..",` + bus + `,` + role + `}`, 400, "INVALID_ARGUMENT", "id", ""},
		{"an id with spaces", replicasAcctToken, `{"id":"a b",` + bus + `,` + role + `}`, 400, "INVALID_ARGUMENT", "id", ""},
		{"an id of 300 characters", replicasAcctToken, `{"id":"` + strings.Repeat("a", 300) + `",` + bus + `,` + role + `}`, 400, "INVALID_ARGUMENT", "id", "longer"},
		{"the file's id", replicasAcctToken, `{"id":"orders-bus",` + bus + `,` + role + `}`, 409, "ALREADY_EXISTS", "", "is taken"},
		{"a field of another connector", replicasAcctToken, `{` + bus + `,` + role + `,"topic_id":"t"}`, 400, "INVALID_ARGUMENT", "topic_id", "not used"},
		{"an unknown field", replicasAcctToken, `{` + bus + `,` + role + `,"colour":"red"}`, 400, "INVALID_ARGUMENT", "", "colour"},
		{"a 1 MB body", replicasAcctToken, `{"id":"` + strings.Repeat("a", 1<<20) + `"}`, 400, "INVALID_ARGUMENT", "", "larger than"},
	} {
		a := httpSend(t, http.MethodPost, api+base, c.token, c.body)
		e := decodeAs[apiErrorBody](t, a)
		if a.status != c.status || e.Error.Code != c.code || !strings.Contains(a.body, c.says) {
			t.Errorf("%s: %d %s; want %d %s saying %q", c.name, a.status, truncate(a.body), c.status, c.code, c.says)
			continue
		}
		if c.field != "" && !slices.ContainsFunc(e.Error.Fields, func(f struct {
			Field   string `json:"field"`
			Message string `json:"message"`
		}) bool {
			return f.Field == c.field && f.Message != ""
		}) {
			t.Errorf("%s: fields %+v, want one naming %s", c.name, e.Error.Fields, c.field)
		}
	}
	// Every problem at once.
	a := httpSend(t, http.MethodPost, api+base, replicasAcctToken, `{"id":"a b","bus_arn":"nope"}`)
	if e := decodeAs[apiErrorBody](t, a); len(e.Error.Fields) < 3 {
		t.Errorf("a body with three problems: %s; want each in fields", a.body)
	}
	// The file's destination is read-only here.
	for _, m := range []string{http.MethodPatch, http.MethodDelete} {
		a := httpSend(t, m, api+base+"/orders-bus", replicasAcctToken, `{"events":["job.failed"]}`)
		if a.status != http.StatusConflict || !strings.Contains(a.body, "FAILED_PRECONDITION") || !strings.Contains(a.body, "config file") {
			t.Errorf("%s of the file's destination: %d %s; want 409 naming the file", m, a.status, a.body)
		}
	}
	// A retried create with the same Idempotency-Key makes one destination.
	first := httpSend(t, http.MethodPost, api+base, replicasAcctToken, `{`+bus+`,`+role+`}`, "Idempotency-Key", "create-1")
	retried := httpSend(t, http.MethodPost, api+base, replicasAcctToken, `{`+bus+`,`+role+`}`, "Idempotency-Key", "create-1")
	if first.status != 201 || retried.status != 201 || decodeAs[apiCard](t, first).ID != decodeAs[apiCard](t, retried).ID {
		t.Fatalf("a retried create: %d %s then %d %s; want the same destination", first.status, first.body, retried.status, retried.body)
	}
	// The cap: the file's orders-bus and this one are two of three.
	if a := httpSend(t, http.MethodPost, api+base, replicasAcctToken, `{`+bus+`,`+role+`}`); a.status != 201 {
		t.Fatalf("the third destination: %d %s", a.status, a.body)
	}
	capped := httpSend(t, http.MethodPost, api+base, replicasAcctToken, `{`+bus+`,`+role+`}`)
	if capped.status != http.StatusTooManyRequests || !strings.Contains(capped.body, "destinations_per_account") {
		t.Fatalf("past the cap: %d %s; want 429 naming api.destinations_per_account", capped.status, capped.body)
	}
	// The rate: 6 creates, changes and deletes a minute; 2 spent (the two creates that
	// made a destination: a refused one, the retried one and the capped one spend none).
	// Four changes more go through, the next is refused.
	id := decodeAs[apiCard](t, first).ID
	for i := range 4 {
		if a := httpSend(t, http.MethodPatch, api+base+"/"+id, replicasAcctToken, `{"events":["job.failed"]}`); a.status != http.StatusOK {
			t.Fatalf("change %d of 6: %d %s", i+3, a.status, a.body)
		}
	}
	last := httpSend(t, http.MethodDelete, api+base+"/"+id, replicasAcctToken, "")
	if last.status != http.StatusTooManyRequests || last.header.Get("Retry-After") == "" {
		t.Fatalf("past destination_changes_per_account: %d %s; want 429 with Retry-After", last.status, last.body)
	}
	// Another account is not held back by acct_1's budget.
	if a := httpSend(t, http.MethodPost, api+"/v1/accounts", replicasAdminToken, `{"id":"acct_2","tenants":["t2"]}`); a.status != http.StatusCreated {
		t.Fatalf("another account: %d %s", a.status, a.body)
	}
	if a := httpSend(t, http.MethodPost, api+base, replicasAdminToken, `{"account":"acct_2",`+bus+`,`+role+`}`); a.status != http.StatusCreated {
		t.Fatalf("acct_2's create while acct_1 is past its budget: %d %s; want 201", a.status, a.body)
	}
	if a := httpDo(t, http.MethodGet, api+base+"/"+id, replicasAcctToken); a.status != http.StatusOK {
		t.Fatalf("the refused delete removed the destination: %d %s", a.status, a.body)
	}
}

func truncate(s string) string {
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}

// TestAPIDestinationsOutliveARestartAndAnEmptyRedisThroughExport: destinations made
// through the API for each connector survive a kill -9 and restart (the registry is in
// Redis); `relay export` prints them as config lines; after FLUSHALL, serve on the file
// plus the export starts as it is and gives each AWS destination the ExternalId its
// customer's trust policy names.
func TestAPIDestinationsOutliveARestartAndAnEmptyRedisThroughExport(t *testing.T) {
	rs := startReplicas(t, 1)
	made := map[string]string{} // id → ExternalId ("" for Pub/Sub)
	for _, c := range []struct{ connector, body string }{
		{"eventbridge", `{"id":"api-bus","bus_arn":"arn:aws:events:us-east-1:111122223333:event-bus/api","role_arn":"arn:aws:iam::111122223333:role/api-role"}`},
		{"kinesis", `{"id":"api-stream","stream_arn":"arn:aws:kinesis:eu-west-1:111122223333:stream/api","role_arn":"arn:aws:iam::111122223333:role/api-role","events":["job.failed"]}`},
	} {
		a := httpSend(t, http.MethodPost, rs.apis[0]+"/v1/connectors/"+c.connector+"/destinations", replicasAcctToken, c.body)
		if a.status != http.StatusCreated {
			t.Fatalf("create %s: %d %s", c.connector, a.status, a.body)
		}
		card := decodeAs[apiCard](t, a)
		made[card.ID] = ""
		if card.ExternalID != nil {
			made[card.ID] = *card.ExternalID
		}
	}
	// The third through the CLI, as a platform's script would; and one made and deleted so.
	vars := map[string]string{"TEST_HMAC_KEY": testKeyHex, "TEST_ADMIN_TOKEN": replicasAdminToken, "TEST_ACCT_TOKEN": replicasAcctToken}
	cli := func(args ...string) string {
		t.Helper()
		out, err := runRelay(t, vars, "", append([]string{"destinations"}, append(args, "--api", rs.apis[0], "--token", "env:TEST_ACCT_TOKEN")...)...)
		if err != nil {
			t.Fatalf("relay destinations %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	if out := cli("create", "pubsub", "--id", "api-topic", "--project-id", "acme-prod", "--topic-id", "relay-events", "--in-flight", "2", "--max-rate", "50"); !strings.Contains(out, "api-topic") || !strings.Contains(out, "gcloud") ||
		!strings.Contains(out, "window:               2 writes in flight") || !strings.Contains(out, "rate cap:             50 writes per second") {
		t.Fatalf("relay destinations create printed:\n%s", out)
	}
	// The window and the rate cap, changed through the API and the CLI, outlive the same
	// restarts (a PATCH of in_flight alone keeps the card's ExternalId and status).
	if a := httpSend(t, http.MethodPatch, rs.apis[0]+"/v1/connectors/eventbridge/destinations/api-bus", replicasAcctToken, `{"in_flight":3}`); a.status != http.StatusOK ||
		decodeAs[apiCard](t, a).InFlight != 3 || *decodeAs[apiCard](t, a).ExternalID != made["api-bus"] {
		t.Fatalf("PATCH in_flight 3: %d %s", a.status, a.body)
	}
	if out := cli("change", "api-stream", "--in-flight", "5", "--max-rate", "7.5"); !strings.Contains(out, "window:               5 writes in flight") {
		t.Fatalf("relay destinations change printed:\n%s", out)
	}
	if out := cli("change", "api-stream", "--in-flight", "0", "--max-rate", "0"); !strings.Contains(out, "window:               16 writes in flight") ||
		!strings.Contains(out, "rate cap:             none") {
		t.Fatalf("relay destinations change back to the defaults printed:\n%s", out)
	}
	settings := map[string]string{"api-bus": "3 none", "api-stream": "16 none", "api-topic": "2 50"}
	made["api-topic"] = ""
	cli("create", "eventbridge", "--id", "short-lived", "--bus-arn", "arn:aws:events:us-east-1:111122223333:event-bus/x", "--role-arn", "arn:aws:iam::111122223333:role/x")
	if out := cli("delete", "short-lived"); !strings.Contains(out, "short-lived deleted") {
		t.Fatalf("relay destinations delete printed:\n%s", out)
	}
	if _, err := runRelay(t, vars, "", "destinations", "create", "eventbridge", "--bus-arn", "nope", "--api", rs.apis[0], "--token", "env:TEST_ACCT_TOKEN"); err == nil ||
		!strings.Contains(err.Error(), "bus_arn: ") || !strings.Contains(err.Error(), "role_arn: ") {
		t.Fatalf("a create with problems: %v; want each field's problem", err)
	}
	env := []string{"TEST_ADMIN_TOKEN=" + replicasAdminToken, "TEST_ACCT_TOKEN=" + replicasAcctToken}
	restart := func(cfg string) {
		t.Helper()
		_ = rs.procs[0].Process.Signal(syscall.SIGKILL)
		_ = rs.procs[0].Wait()
		cmd, logs := startRelay(t, buildRelay(t), cfg, env...)
		rs.procs[0], rs.logs[0] = cmd, logs
		deadline := time.Now().Add(60 * time.Second)
		for httpDo(t, http.MethodGet, rs.apis[0]+"/readyz", "").status != http.StatusOK {
			if time.Now().After(deadline) {
				t.Fatalf("the relay did not serve again within a minute:\n%s", rs.logTails())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	check := func(when, managedBy string) {
		t.Helper()
		for id, ext := range made {
			conn := map[string]string{"api-bus": "eventbridge", "api-stream": "kinesis", "api-topic": "pubsub"}[id]
			a := httpDo(t, http.MethodGet, rs.apis[0]+"/v1/connectors/"+conn+"/destinations/"+id, replicasAcctToken)
			c := decodeAs[apiCard](t, a)
			got := ""
			if c.ExternalID != nil {
				got = *c.ExternalID
			}
			if a.status != http.StatusOK || got != ext || c.ManagedBy != managedBy {
				t.Fatalf("%s, %s: %d %s; want it managed by %s with ExternalId %q", when, id, a.status, a.body, managedBy, ext)
			}
			rate := "none"
			if c.MaxRate != nil {
				rate = strconv.FormatFloat(*c.MaxRate, 'g', -1, 64)
			}
			if s := fmt.Sprintf("%d %s", c.InFlight, rate); s != settings[id] {
				t.Errorf("%s, %s: in_flight and max_rate %s, want %s", when, id, s, settings[id])
			}
		}
	}
	restart(rs.cfgs[0])
	check("after kill -9 and a restart", "api")

	out, err := runRelay(t, vars, "", "export", "--config", rs.cfgs[0])
	if err != nil || strings.Count(out, "  - id: ") != 3 || !strings.Contains(out, made["api-bus"]) ||
		!strings.Contains(out, "    in_flight: 3\n") || !strings.Contains(out, "    max_rate: 50\n") {
		t.Fatalf("export: %v\n%s", err, out)
	}
	// The same lines through the API (the public client), from the cards.
	viaAPI, err := runRelay(t, vars, "", "export", "--api", rs.apis[0], "--token", "env:TEST_ADMIN_TOKEN")
	_, fromRedis, _ := strings.Cut(out, "\ndestinations:")
	if _, fromAPI, _ := strings.Cut(viaAPI, "\ndestinations:"); err != nil || fromAPI != fromRedis {
		t.Errorf("export --api: %v\n%s\nwant the destinations export --config printed:\n%s", err, viaAPI, out)
	}
	st, err := store.Open(rs.redisURL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Client().FlushAll(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile(rs.cfgs[0])
	if err != nil {
		t.Fatal(err)
	}
	_, items, _ := strings.Cut(out, "destinations:\n")
	restored := filepath.Join(t.TempDir(), "relay.yaml")
	if err := os.WriteFile(restored, append(file, items...), 0o600); err != nil {
		t.Fatal(err)
	}
	restart(restored)
	check("after FLUSHALL, on the file plus the export", "config")
}

// createTrusted makes api-bus through replica i's API and has the sandbox's role trust
// its ExternalId, as the customer does from the card; it returns the card's ExternalId.
func (rs *replicaSet) createTrusted(i int) string {
	t := rs.t
	t.Helper()
	const roleARN = "arn:aws:iam::111122223333:role/api-role"
	a := httpSend(t, http.MethodPost, rs.apis[i]+"/v1/connectors/eventbridge/destinations", replicasAcctToken,
		`{"id":"api-bus","bus_arn":"arn:aws:events:us-east-1:111122223333:event-bus/api","role_arn":"`+roleARN+`"}`)
	if a.status != http.StatusCreated {
		t.Fatalf("create: %d %s", a.status, a.body)
	}
	ext := *decodeAs[apiCard](t, a).ExternalID
	rs.sts.RequireExternalID(roleARN, ext)
	return ext
}

// apiBusHolder waits for api-bus's lease and returns the replica holding it.
func (rs *replicaSet) apiBusHolder(st *store.Store) int {
	t := rs.t
	t.Helper()
	var lease string
	if !waitFor(30*time.Second, func() bool {
		lease, _ = leaseOf(st, "acct_1", "api-bus")
		return lease != ""
	}) {
		t.Fatalf("no replica took api-bus's lease within 30 s\n%s", rs.logTails())
	}
	pid := leasePID(t, lease)
	holder := slices.IndexFunc(rs.procs, func(c *exec.Cmd) bool { return c.Process.Pid == pid })
	if holder < 0 {
		t.Fatalf("lease holder %q is neither replica", lease)
	}
	return holder
}

// TestADeleteWhileTheHolderIsMidWriteIsFencedOnEveryReplica: the replica holding an API
// destination's lease has a write held at the bus when the other replica is asked to
// delete it. The answer says a write was in flight; once the bus lets it go, that one
// write lands and no other, though events keep coming.
func TestADeleteWhileTheHolderIsMidWriteIsFencedOnEveryReplica(t *testing.T) {
	rs := startReplicas(t, 2)
	base := rs.apis[0] + "/v1/connectors/eventbridge/destinations/"
	// The file's destination stands aside, so every write at the bus is api-bus's.
	if a := httpDo(t, http.MethodPost, base+"orders-bus/pause", replicasAdminToken); a.status != http.StatusOK {
		t.Fatalf("pause orders-bus: %d %s", a.status, a.body)
	}
	rs.createTrusted(0)
	rs.testUntilActive(base+"api-bus", replicasAcctToken)
	st, err := store.Open(rs.redisURL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	holder := rs.apiBusHolder(st)
	before := len(apiBusEntries(t, rs.bus, "api")) // the test event
	rs.bus.Hold()
	t.Cleanup(rs.bus.Release)
	rs.publish(0, 10, 16)
	for deadline := time.Now().Add(30 * time.Second); rs.bus.Waiting() < 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no api-bus write held at the bus within 30 s (%d requests seen)\n%s", rs.bus.Requests(), rs.logTails())
		}
	}
	held := rs.bus.Waiting() // the writes in flight when the delete is asked: they may land, nothing after

	other := 1 - holder
	del := httpSend(t, http.MethodDelete, rs.apis[other]+"/v1/connectors/eventbridge/destinations/api-bus", replicasAcctToken, "")
	if del.status != http.StatusOK || !strings.Contains(del.body, `"write_in_flight":true`) {
		t.Fatalf("delete on replica %d while replica %d's write is held: %d %s; want write_in_flight true\n%s", other, holder, del.status, del.body, rs.logTails())
	}
	rs.bus.Release()
	waitUntil(t, 30*time.Second, "the held write to land", func() bool { return len(apiBusEntries(t, rs.bus, "api")) > before })
	// More events, delivered to the file's destination once it is active again: by the
	// time they are there, a replica that still wrote to api-bus would have.
	if a := httpDo(t, http.MethodPost, base+"orders-bus/activate", replicasAdminToken); a.status != http.StatusOK {
		t.Fatalf("activate orders-bus: %d %s", a.status, a.body)
	}
	rs.publish(100, 110, 16)
	waitUntil(t, 30*time.Second, "the later events at orders-bus", func() bool {
		return len(apiBusEntries(t, rs.bus, "orders")) >= 10
	})
	if n := len(apiBusEntries(t, rs.bus, "api")) - before; n < 1 || n > held {
		t.Fatalf("%d writes reached the deleted destination's bus, want only the %d in flight at the delete\n%s", n, held, rs.logTails())
	}
}

// TestTheHolderKilledRightAfterACreateHandsTheNewDestinationOver: the replica that took
// a just-made destination's lease is SIGKILLed; the other takes it over, checks its
// setup and delivers every confirmed event in the publisher's order.
func TestTheHolderKilledRightAfterACreateHandsTheNewDestinationOver(t *testing.T) {
	rs := startReplicas(t, 2)
	rs.createTrusted(0)
	st, err := store.Open(rs.redisURL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	holder := rs.apiBusHolder(st)
	if err := rs.procs[holder].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	rs.killed[holder] = true
	rs.publish(0, 100, 16)
	confirmed := rs.confirmedIDs()
	waitUntil(t, 60*time.Second, "every confirmed event at api-bus", func() bool {
		return hasAll(apiBusEntries(t, rs.bus, "api"), confirmed)
	})
	if n := outOfOrder(confirmed, apiBusEntries(t, rs.bus, "api")); n > 0 {
		t.Fatalf("%d events out of the confirmed order after the holder died", n)
	}
}

// TestAnAccountMadeThroughTheAPIIsRoutedOnEveryReplica: an admin adds an account for a
// new tenant on one replica; the other lists it, an admin adds it a destination there,
// and the tenant's events reach that destination's bus in the publisher's order, and no
// other account's. The account cannot go while it has a destination; the file's is
// read-only; an account token manages none.
func TestAnAccountMadeThroughTheAPIIsRoutedOnEveryReplica(t *testing.T) {
	rs := startReplicas(t, 2)
	vars := map[string]string{"TEST_ADMIN_TOKEN": replicasAdminToken}
	out, err := runRelay(t, vars, "", "accounts", "create", "acct_9", "--tenants", "t9", "--api", rs.apis[0], "--token", "env:TEST_ADMIN_TOKEN")
	if err != nil || !strings.Contains(out, "acct_9: tenants t9, 0 destinations, managed by api") {
		t.Fatalf("relay accounts create: %v\n%s", err, out)
	}
	for _, c := range []struct {
		name, token, body string
		status            int
		says              string
	}{
		{"an account token", replicasAcctToken, `{"id":"acct_8","tenants":["t8"]}`, 403, "admin"},
		{"no id, no tenants", replicasAdminToken, `{"tenants":[]}`, 400, `"field":"tenants"`},
		{"the file's id", replicasAdminToken, `{"id":"acct_1","tenants":["t1"]}`, 409, "ALREADY_EXISTS"},
		{"the API's id again", replicasAdminToken, `{"id":"acct_9","tenants":["t1"]}`, 409, "ALREADY_EXISTS"},
	} {
		if a := httpSend(t, http.MethodPost, rs.apis[1]+"/v1/accounts", c.token, c.body); a.status != c.status || !strings.Contains(a.body, c.says) {
			t.Errorf("%s: %d %s; want %d saying %s", c.name, a.status, a.body, c.status, c.says)
		}
	}
	if a := httpSend(t, http.MethodPatch, rs.apis[1]+"/v1/accounts/acct_1", replicasAdminToken, `{"tenants":["x"]}`); a.status != 409 || !strings.Contains(a.body, "config file") {
		t.Errorf("a change of the file's account: %d %s; want 409 naming the file", a.status, a.body)
	}
	waitUntil(t, time.Second, "replica 1 to list acct_9", func() bool {
		out, err := runRelay(t, vars, "", "accounts", "--api", rs.apis[1], "--token", "env:TEST_ADMIN_TOKEN")
		return err == nil && strings.Contains(out, "acct_9") && strings.Contains(out, "acct_1")
	})

	const roleARN = "arn:aws:iam::111122223333:role/acct9-role"
	d := httpSend(t, http.MethodPost, rs.apis[1]+"/v1/connectors/eventbridge/destinations", replicasAdminToken,
		`{"id":"acct9-bus","account":"acct_9","bus_arn":"arn:aws:events:us-east-1:111122223333:event-bus/acct9","role_arn":"`+roleARN+`"}`)
	if d.status != http.StatusCreated {
		t.Fatalf("the account's destination: %d %s", d.status, d.body)
	}
	rs.sts.RequireExternalID(roleARN, *decodeAs[apiCard](t, d).ExternalID)
	base := "/v1/connectors/eventbridge/destinations/acct9-bus"
	rs.testUntilActive(rs.apis[0]+base, replicasAdminToken)
	var confirmed []string
	for i := range 30 {
		job := jobevent.Job{ID: fmt.Sprintf("0190f2a4-9999-7000-8000-%012d", i), Status: "completed", Tenant: "t9"}
		dc, err := rs.ch.PublishWithDeferredConfirm(rs.exchange, job.RoutingKey(), false, false, jobevent.Build(job, rs.exchange, rs.key, time.Now()))
		if err != nil || !dc.Wait() {
			t.Fatalf("publish %d: %v", i, err)
		}
		confirmed = append(confirmed, job.EventID())
	}
	waitUntil(t, 30*time.Second, "the tenant's events at acct9-bus", func() bool {
		return hasAll(apiBusEntries(t, rs.bus, "acct9"), confirmed)
	})
	if n := outOfOrder(confirmed, apiBusEntries(t, rs.bus, "acct9")); n > 0 {
		t.Fatalf("%d of the tenant's events out of the confirmed order", n)
	}
	if n := len(apiBusEntries(t, rs.bus, "orders")); n > 0 {
		t.Fatalf("%d of the new tenant's events reached acct_1's bus", n)
	}

	if a := httpSend(t, http.MethodDelete, rs.apis[0]+"/v1/accounts/acct_9", replicasAdminToken, ""); a.status != 409 || !strings.Contains(a.body, "1 destinations") {
		t.Fatalf("deleting an account with a destination: %d %s; want 409", a.status, a.body)
	}
	if a := httpSend(t, http.MethodDelete, rs.apis[0]+base, replicasAdminToken, ""); a.status != http.StatusOK {
		t.Fatalf("delete the destination: %d %s", a.status, a.body)
	}
	if a := httpSend(t, http.MethodDelete, rs.apis[0]+"/v1/accounts/acct_9", replicasAdminToken, ""); a.status != http.StatusOK {
		t.Fatalf("delete the account: %d %s", a.status, a.body)
	}
	for i, api := range rs.apis {
		waitUntil(t, time.Second, fmt.Sprintf("replica %d to forget acct_9", i), func() bool {
			return httpDo(t, http.MethodGet, api+"/v1/accounts/acct_9", replicasAdminToken).status == http.StatusNotFound
		})
	}
}

// testUntilActive is the customer pressing "Send a test" on the card at url once their
// role trusts the ExternalId (the test runs the setup check at once, whatever backoff
// the failed checks before the trust left), and pressing again when the card has not
// turned active two seconds later; it fails after a minute.
func (rs *replicaSet) testUntilActive(url, token string) {
	t := rs.t
	t.Helper()
	active := func() (bool, string) {
		c := httpDo(t, http.MethodGet, url, token)
		return decodeAs[apiCard](t, c).Status == "active", c.body
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		answer := httpSend(t, http.MethodPost, url+"/test", token, "").body
		press := time.Now().Add(2 * time.Second)
		for time.Now().Before(press) {
			if ok, _ := active(); ok {
				return
			}
			time.Sleep(20 * time.Millisecond) // polling the card
		}
		if time.Now().After(deadline) {
			_, card := active()
			t.Fatalf("the card never became active; the last test answered %s; the card: %s\n%s", answer, card, rs.logTails())
		}
	}
}

// hasAll reports whether got holds every id of want.
func hasAll(got, want []string) bool {
	have := make(map[string]bool, len(got))
	for _, id := range got {
		have[id] = true
	}
	for _, id := range want {
		if !have[id] {
			return false
		}
	}
	return true
}
