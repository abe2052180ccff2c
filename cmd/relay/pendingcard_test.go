package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	vkit "cloud.google.com/go/pubsub/v2/apiv1"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	amqp "github.com/rabbitmq/amqp091-go"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/mercamap/relay/internal/api/contracttest"
	"github.com/mercamap/relay/internal/awstest"
	"github.com/mercamap/relay/internal/jobevent"
	"github.com/mercamap/relay/internal/testpeer"
)

// What the pending-card tests' config names.
const (
	pcToken      = "pending-card-acct1-token-0123456789"
	pcRoleARN    = "arn:aws:iam::111122223333:role/relay-delivery"
	pcBusARN     = "arn:aws:events:us-east-1:111122223333:event-bus/orders"
	pcExternalID = "relay-0123456789abcdef0123456789abcdef" // pinned: the customer's trust policy is written before the relay starts
	pcTopic      = "projects/acme-prod/topics/relay-events"
)

// pcBus is the EventBridge destination of the pending-card tests, its ExternalId pinned.
const pcBus = `  - {id: orders-bus, account: acct_1, connector: eventbridge, bus_arn: "` + pcBusARN + `",
     role_arn: "` + pcRoleARN + `", external_id: ` + pcExternalID + `}
`

// pcPacing are words of the relay's own STS pacing: a pending card's sentence is the
// customer's setup, never them.
var pcPacing = []string{"pace", "budget", "held back", "holds back", "session again", "has not run yet", "did not take"}

// pendingRelay is one `relay serve` process for account acct_1, writing to EventBridge
// behind an STS that enforces the trust policy the test gives the role, and to a pstest
// Pub/Sub; the test talks to it through its HTTP API with acct_1's token, as the
// customer's console does.
type pendingRelay struct {
	t        *testing.T
	api      string
	sts      *awstest.STS
	bus      *awstest.EventBridge
	ps       *pstest.Server
	exchange string
	ch       *amqp.Channel
	key      []byte
	logs     *syncBuffer
}

// pendingSetup is what differs between the tests' configs.
type pendingSetup struct {
	setupCheck   string                // delivery.setup_check
	stsBudget    string                // aws.sts_budget ("": the default)
	destinations string                // YAML entries of destinations
	customer     func(r *pendingRelay) // the customer's side (trust policy, topic), before the relay starts
}

// startPendingRelay starts the relay of s and waits until it consumes its queue and its
// API answers.
func startPendingRelay(t *testing.T, s pendingSetup) *pendingRelay {
	t.Helper()
	amqpURL, redisURL := testpeer.SharedRabbitMQ(t), testpeer.RedisURL(t)
	r := &pendingRelay{t: t, sts: awstest.NewSTS(t), bus: awstest.NewEventBridge(t), ps: pstest.NewServer()}
	t.Cleanup(func() { _ = r.ps.Close() })
	r.bus.RequireSessionFrom(r.sts)
	r.key, _ = hex.DecodeString(testKeyHex)
	r.exchange = "relay-test-pending-card-" + fmt.Sprint(time.Now().UnixNano())
	queue := r.exchange
	if s.customer != nil {
		s.customer(r)
	}
	budget := ""
	if s.stsBudget != "" {
		budget = "  sts_budget: " + s.stsBudget
	}
	listen := fmt.Sprintf("127.0.0.1:%d", testpeer.FreePort(t))
	r.api = contracttest.New(t).Proxy("http://" + listen) // every call and answer checked against the document
	cfg := filepath.Join(t.TempDir(), "relay.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`
identity:
  name: mercamap
  aws_principal_arn: %s
  external_id_secret: external-id-secret-for-the-test-0123456789
  gcp_service_account: relay@mercamap-prod.iam.gserviceaccount.com
rabbitmq: {url: %s, exchange: %s, queue: %s}
redis: {url: %s}
signature: {keys: [env:TEST_HMAC_KEY]}
api:
  listen: "%s"
  metrics_listen: 127.0.0.1:0
  tokens:
    - {scope: "account:acct_1", token: env:T_ACCT1}
aws:
  region: us-east-1
  endpoints: {sts: %s, events: %s}
%s
gcp: {pubsub_endpoint: %s}
delivery:
  setup_check: %s
accounts:
  - {id: acct_1, tenants: [single-tenant]}
destinations:
%s`, awstest.CallerARN, amqpURL, r.exchange, queue, redisURL, listen, r.sts.URL, r.bus.URL, budget, r.ps.Addr,
		s.setupCheck, s.destinations)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, r.logs, _ = startWatchedRelay(t, buildRelay(t), cfg, "T_ACCT1="+pcToken)
	conn, ch := brokerChannel(t, amqpURL, queue)
	waitConsumers(t, conn, queue, 1)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	r.ch = ch
	waitUntil(t, 30*time.Second, "the relay's API answering", func() bool { return get(listen, "/healthz") == http.StatusOK })
	return r
}

// publish sends n signed job.completed events of acct_1's tenant, each confirmed by the broker.
func (r *pendingRelay) publish(n int) {
	r.t.Helper()
	for i := range n {
		job := jobevent.Job{ID: fmt.Sprintf("0190f2a4-7777-7000-8000-%012d", i), Status: "completed"}
		dc, err := r.ch.PublishWithDeferredConfirm(r.exchange, job.RoutingKey(), false, false, jobevent.Build(job, r.exchange, r.key, time.Now()))
		if err != nil || !dc.Wait() {
			r.t.Fatalf("publish %d: %v", i, err)
		}
	}
}

// pcAnswer is one HTTP answer of the API.
type pcAnswer struct {
	status int
	header http.Header
	body   []byte
}

// call sends method path with acct_1's token.
func (r *pendingRelay) call(method, path string) (pcAnswer, error) {
	req, _ := http.NewRequest(method, r.api+path, nil)
	req.Header.Set("Authorization", "Bearer "+pcToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return pcAnswer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return pcAnswer{resp.StatusCode, resp.Header, b}, err
}

// pcCard is what these tests read of a card.
type pcCard struct {
	Status     string `json:"status"`
	ExternalID string `json:"external_id"`
	Pending    *struct {
		At        time.Time  `json:"at"`
		Message   string     `json:"message"`
		NextCheck *time.Time `json:"next_check"`
		Security  bool       `json:"security"`
		Reason    string     `json:"reason"`
	} `json:"pending"`
	Lag *struct {
		Events int64 `json:"events"`
	} `json:"lag"`
}

// card GETs connector's destination id.
func (r *pendingRelay) card(connector, id string) (pcCard, error) {
	a, err := r.call(http.MethodGet, "/v1/connectors/"+connector+"/destinations/"+id)
	if err != nil {
		return pcCard{}, err
	}
	if a.status != http.StatusOK {
		return pcCard{}, fmt.Errorf("GET card %s: %d %s", id, a.status, a.body)
	}
	var c pcCard
	return c, json.Unmarshal(a.body, &c)
}

// mustCard is card, failing the test on an error.
func (r *pendingRelay) mustCard(connector, id string) pcCard {
	r.t.Helper()
	c, err := r.card(connector, id)
	if err != nil {
		r.t.Fatal(err)
	}
	return c
}

// waitHeldCheck waits until the card of connector/id says the STS budget held a setup
// check back: its next check is further away than any failed check's backoff
// (delivery.setup_check.max is 200ms in these tests) could put it, and all the events
// published wait behind it (lag).
func (r *pendingRelay) waitHeldCheck(connector, id string, events int64) pcCard {
	r.t.Helper()
	var c pcCard
	waitUntil(r.t, 30*time.Second, "the card's next check moved out by the STS budget, with every event waiting", func() bool {
		var err error
		c, err = r.card(connector, id)
		return err == nil && c.Pending != nil && c.Pending.NextCheck != nil &&
			c.Pending.NextCheck.After(time.Now().Add(5*time.Second)) && c.Lag != nil && c.Lag.Events == events
	})
	return c
}

// pcTestAnswer is the answer of "Send a test".
type pcTestAnswer struct {
	status     int
	retryAfter string
	outcome    string // 200
	message    string // 200: the outcome's sentence; else the error's
	code       string // the error's code
	details    int64  // the error's details.retry_after_seconds
}

// sendTest POSTs a test of connector/id.
func (r *pendingRelay) sendTest(connector, id string) pcTestAnswer {
	r.t.Helper()
	a, err := r.call(http.MethodPost, "/v1/connectors/"+connector+"/destinations/"+id+"/test")
	if err != nil {
		r.t.Fatal(err)
	}
	var body struct {
		Outcome string `json:"outcome"`
		Message string `json:"message"`
		Error   struct {
			Code    string `json:"code"`
			Message string `json:"message"`
			Details struct {
				RetryAfterSeconds int64 `json:"retry_after_seconds"`
			} `json:"details"`
		} `json:"error"`
	}
	if err := json.Unmarshal(a.body, &body); err != nil {
		r.t.Fatalf("test %s answered %d, not JSON: %s", id, a.status, a.body)
	}
	ans := pcTestAnswer{status: a.status, retryAfter: a.header.Get("Retry-After"), outcome: body.Outcome, message: body.Message,
		code: body.Error.Code, details: body.Error.Details.RetryAfterSeconds}
	if a.status != http.StatusOK {
		ans.message = body.Error.Message
	}
	return ans
}

// checkExhausted checks a 429 RESOURCE_EXHAUSTED answer with a Retry-After of at least
// 1 and at most most seconds, the same in its details, and returns it.
func checkExhausted(t *testing.T, what string, a pcTestAnswer, most int) int {
	t.Helper()
	if a.status != http.StatusTooManyRequests || a.code != "RESOURCE_EXHAUSTED" {
		t.Fatalf("%s answered %d %q (%s), want 429 RESOURCE_EXHAUSTED", what, a.status, a.code, a.message)
	}
	secs, err := strconv.Atoi(a.retryAfter)
	if err != nil || secs < 1 || secs > most {
		t.Fatalf("%s: Retry-After %q, want whole seconds from 1 to %d", what, a.retryAfter, most)
	}
	if a.details != int64(secs) {
		t.Errorf("%s: details.retry_after_seconds %d, Retry-After %d", what, a.details, secs)
	}
	return secs
}

// checkWhenToTestAgain checks that a held-back test's message is one sentence saying
// when to send a test again: in the Retry-After's seconds, and nothing of the setup.
func checkWhenToTestAgain(t *testing.T, what, msg string, secs int) {
	t.Helper()
	when := "send a test again in " + (time.Duration(secs) * time.Second).String()
	if !strings.Contains(msg, when) {
		t.Errorf("%s says %q, want it to say %q (the Retry-After)", what, msg, when)
	}
	if strings.Contains(strings.TrimSuffix(msg, "."), ". ") || strings.Contains(msg, ";") || strings.Contains(msg, "\n") {
		t.Errorf("%s says more than one sentence: %q", what, msg)
	}
	for _, setup := range []string{"trust policy", "ExternalId", "label"} {
		if strings.Contains(msg, setup) {
			t.Errorf("%s talks of the customer's setup (%q): %q", what, setup, msg)
		}
	}
}

// checkNoPacing fails when a pending card's sentence talks of the relay's own pacing.
func checkNoPacing(t *testing.T, msg string) {
	t.Helper()
	for _, w := range pcPacing {
		if strings.Contains(strings.ToLower(msg), w) {
			t.Errorf("the card's pending.message talks of the relay's pacing (%q), not the customer's setup: %q", w, msg)
		}
	}
}

// TestPendingCardOfAnUntrustingRoleKeepsAWSRefusalWhileTheSTSBudgetHoldsChecks: a
// pending EventBridge destination whose role does not trust our principal, checked every
// 20 to 200 ms under an STS budget of 4 calls a minute (two checks of a probe and a
// session each). After 30 events, once STS's log shows the budget's four calls and the
// card's next check moved out to when the budget allows one, the card still says what
// AWS refused — the role, the trust policy, the ExternalId to require — and nothing of
// the relay's pacing; STS gets no further call, and nothing reached the bus.
func TestPendingCardOfAnUntrustingRoleKeepsAWSRefusalWhileTheSTSBudgetHoldsChecks(t *testing.T) {
	r := startPendingRelay(t, pendingSetup{
		setupCheck:   "{initial: 20ms, max: 200ms}",
		stsBudget:    "{per_destination: {count: 4, per: 1m}, per_account: {count: 8, per: 1m}}",
		destinations: pcBus,
		customer:     func(r *pendingRelay) { r.sts.TrustNobody(pcRoleARN) },
	})
	r.publish(30)
	c := r.waitHeldCheck("eventbridge", "orders-bus", 30)

	reqs := r.sts.Requests()
	if len(reqs) != 4 {
		t.Fatalf("STS received %d AssumeRole calls, want the budget's 4 (two checks: probe and session each): %+v", len(reqs), reqs)
	}
	for i, q := range reqs {
		probe := i%2 == 0
		if q.Granted || (q.ExternalID == pcExternalID) == probe {
			t.Errorf("STS call %d: %+v, want a refused %s", i, q, map[bool]string{true: "probe (a wrong ExternalId)", false: "session (the card's ExternalId)"}[probe])
		}
	}
	if c.Status != "pending" || c.Pending == nil {
		t.Fatalf("card status %q pending %+v, want pending with its last check", c.Status, c.Pending)
	}
	msg := c.Pending.Message
	for _, want := range []string{"AWS refused to let the relay assume role " + pcRoleARN, "AccessDenied", "trust policy",
		awstest.CallerARN, `sts:ExternalId = "` + c.ExternalID + `"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("the card's pending.message does not say %q: %q", want, msg)
		}
	}
	checkNoPacing(t, msg)
	t.Logf("card after the held check: pending.message %q, next_check %s", msg, c.Pending.NextCheck.Format(time.RFC3339))
	if c.Pending.Security {
		t.Errorf("pending.security true for a role that does not trust us: %+v", c.Pending)
	}
	if c.ExternalID != pcExternalID {
		t.Errorf("card external_id %q, want the pinned %q", c.ExternalID, pcExternalID)
	}
	if n := len(r.sts.Requests()); n != 4 {
		t.Errorf("STS received %d calls by the end, want still 4: the budget holds the checks back", n)
	}
	if n := r.bus.Requests(); n != 0 {
		t.Errorf("the bus received %d requests from a pending destination", n)
	}
}

// TestPendingCardOfARoleThatLetsAnyExternalIDInSaysSoWhileTheSTSBudgetHoldsChecks: the
// same for a role whose trust policy lets our principal in with any ExternalId. Each
// check is one probe STS grants (so two checks spend the budget of 4 in two calls), and
// the relay never asks for a session with the real ExternalId. After 30 events the card
// says the role let the relay in with a wrong ExternalId and which condition to add,
// pending.security true, nothing of the pacing. "Send a test" then, with the budget
// spent, answers 429 with Retry-After and one sentence saying when to test again; STS
// gets no call for it and the card keeps its sentence.
func TestPendingCardOfARoleThatLetsAnyExternalIDInSaysSoWhileTheSTSBudgetHoldsChecks(t *testing.T) {
	r := startPendingRelay(t, pendingSetup{
		setupCheck:   "{initial: 20ms, max: 200ms}",
		stsBudget:    "{per_destination: {count: 4, per: 1m}, per_account: {count: 8, per: 1m}}",
		destinations: pcBus,
		customer:     func(r *pendingRelay) { r.sts.AllowAny(pcRoleARN) },
	})
	r.publish(30)
	c := r.waitHeldCheck("eventbridge", "orders-bus", 30)

	reqs := r.sts.Requests()
	if len(reqs) != 2 {
		t.Fatalf("STS received %d AssumeRole calls, want 2 (two checks of the budget of 4, each a probe the role let in): %+v", len(reqs), reqs)
	}
	for i, q := range reqs {
		if !q.Granted || q.ExternalID == pcExternalID {
			t.Errorf("STS call %d: %+v, want a probe with a wrong ExternalId that the role let in", i, q)
		}
	}
	checkSecuritySentence(t, c)
	before := *c.Pending

	a := r.sendTest("eventbridge", "orders-bus")
	secs := checkExhausted(t, "a test with the STS budget spent", a, 60)
	checkWhenToTestAgain(t, "a test with the STS budget spent", a.message, secs)
	t.Logf("card: pending.message %q; the test: 429 Retry-After %s %q", before.Message, a.retryAfter, a.message)
	if n := len(r.sts.Requests()); n != 2 {
		t.Errorf("STS received %d calls after the held-back test, want still 2: nothing is sent for it", n)
	}
	after := r.mustCard("eventbridge", "orders-bus")
	if after.Pending == nil || after.Pending.Message != before.Message || !after.Pending.At.Equal(before.At) || !after.Pending.Security {
		t.Errorf("the held-back test changed the card's check: before %+v, after %+v", before, after.Pending)
	}
	if n := r.bus.Requests(); n != 0 {
		t.Errorf("the bus received %d requests from a role that lets any ExternalId in", n)
	}
}

// checkSecuritySentence checks a pending card refused because its role lets a wrong
// ExternalId in: the sentence says so, names the condition to add, and is flagged security.
func checkSecuritySentence(t *testing.T, c pcCard) {
	t.Helper()
	if c.Status != "pending" || c.Pending == nil {
		t.Fatalf("card status %q pending %+v, want pending with its last check", c.Status, c.Pending)
	}
	msg := c.Pending.Message
	for _, want := range []string{"role " + pcRoleARN + " let the relay in with a wrong ExternalId",
		`Condition StringEquals sts:ExternalId = "` + c.ExternalID + `"`, "not StringLike", "will not use the role"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the card's pending.message does not say %q: %q", want, msg)
		}
	}
	checkNoPacing(t, msg)
	if !c.Pending.Security || c.Pending.Reason != "external_id_not_enforced" {
		t.Errorf("pending.security %v reason %q, want true and external_id_not_enforced", c.Pending.Security, c.Pending.Reason)
	}
}

// TestSendATestToARoleThatLetsAnyExternalIDInAnswersTheCardsSecuritySentenceThenWhen:
// a pending destination whose role lets any ExternalId in, its setup checked once at
// start and not again for 10 minutes, under an STS budget of 4 calls a minute: the
// start's check spends two, so the budget holds exactly one test. That test answers 200
// rejected with the card's own security sentence (STS's log shows its probe, let in);
// the next answers 429 with Retry-After and when to test again, with no STS call.
func TestSendATestToARoleThatLetsAnyExternalIDInAnswersTheCardsSecuritySentenceThenWhen(t *testing.T) {
	r := startPendingRelay(t, pendingSetup{
		setupCheck:   "{initial: 10m, max: 10m}",
		stsBudget:    "{per_destination: {count: 4, per: 1m}, per_account: {count: 8, per: 1m}}",
		destinations: pcBus,
		customer:     func(r *pendingRelay) { r.sts.AllowAny(pcRoleARN) },
	})
	var c pcCard
	waitUntil(t, 30*time.Second, "the card's first setup check", func() bool {
		var err error
		c, err = r.card("eventbridge", "orders-bus")
		return err == nil && c.Pending != nil && c.Pending.Message != ""
	})
	checkSecuritySentence(t, c)
	if n := len(r.sts.Requests()); n != 1 {
		t.Fatalf("STS received %d calls for the start's check, want 1 (the probe it let in)", n)
	}

	first := r.sendTest("eventbridge", "orders-bus")
	if first.status != http.StatusOK || first.outcome != "rejected" || first.message != c.Pending.Message {
		t.Fatalf("the first test answered %d %q %q, want 200 rejected with the card's sentence %q", first.status, first.outcome, first.message, c.Pending.Message)
	}
	reqs := r.sts.Requests()
	if len(reqs) != 2 || !reqs[1].Granted || reqs[1].ExternalID == pcExternalID {
		t.Fatalf("STS log after the first test: %+v, want a second probe with a wrong ExternalId, let in", reqs)
	}

	second := r.sendTest("eventbridge", "orders-bus")
	secs := checkExhausted(t, "the second test", second, 60)
	checkWhenToTestAgain(t, "the second test", second.message, secs)
	if n := len(r.sts.Requests()); n != 2 {
		t.Errorf("STS received %d calls after the second test, want still 2: nothing is sent for a held-back test", n)
	}
	checkSecuritySentence(t, r.mustCard("eventbridge", "orders-bus"))
}

// TestPendingCardOfAnUnlabelledTopicNamesTheLabelAndTheAccount: a pending Pub/Sub
// destination whose topic exists with other labels but not mercamap-account. After 30
// events, all waiting on the card, its pending.message says the topic has no
// mercamap-account label and gives the command that sets it to acct_1; nothing was
// published to the topic.
func TestPendingCardOfAnUnlabelledTopicNamesTheLabelAndTheAccount(t *testing.T) {
	r := startPendingRelay(t, pendingSetup{
		setupCheck:   "{initial: 20ms, max: 200ms}",
		destinations: "  - {id: orders-topic, account: acct_1, connector: pubsub, project_id: acme-prod, topic_id: relay-events}\n",
		customer: func(r *pendingRelay) {
			admin, err := vkit.NewTopicAdminClient(context.Background(), option.WithEndpoint(r.ps.Addr), option.WithoutAuthentication(),
				option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
			if err != nil {
				t.Fatal(err)
			}
			defer admin.Close()
			if _, err := admin.CreateTopic(context.Background(), &pubsubpb.Topic{Name: pcTopic, Labels: map[string]string{"team": "orders"}}); err != nil {
				t.Fatal(err)
			}
		},
	})
	r.publish(30)
	var c pcCard
	waitUntil(t, 30*time.Second, "the card's setup check, with every event waiting", func() bool {
		var err error
		c, err = r.card("pubsub", "orders-topic")
		return err == nil && c.Pending != nil && c.Pending.Message != "" && c.Lag != nil && c.Lag.Events == 30
	})
	if c.Status != "pending" {
		t.Fatalf("card status %q, want pending", c.Status)
	}
	msg := c.Pending.Message
	for _, want := range []string{"topic " + pcTopic + " has no mercamap-account label",
		"gcloud pubsub topics update relay-events --project=acme-prod --update-labels=mercamap-account=acct_1"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the card's pending.message does not say %q: %q", want, msg)
		}
	}
	checkNoPacing(t, msg)
	t.Logf("card: pending.message %q", msg)
	if c.Pending.NextCheck == nil || c.Pending.Security {
		t.Errorf("pending %+v, want a next check and no security flag", c.Pending)
	}
	if n := len(r.ps.Messages()); n != 0 {
		t.Errorf("%d messages were published to a topic without the ownership label", n)
	}
}

// waitActive waits until the card of orders-bus says active (its setup check passed:
// STS's log shows the check's probe, refused, and its session, granted).
func (r *pendingRelay) waitActive() {
	r.t.Helper()
	waitUntil(r.t, 30*time.Second, "orders-bus active", func() bool {
		c, err := r.card("eventbridge", "orders-bus")
		return err == nil && c.Status == "active"
	})
	reqs := r.sts.Requests()
	if len(reqs) != 2 || reqs[0].Granted || !reqs[1].Granted || reqs[1].ExternalID != pcExternalID {
		r.t.Fatalf("STS log after activation: %+v, want a refused probe then the granted session", reqs)
	}
}

// checkTestSession checks that STS's log grew by a test's probe (a wrong ExternalId,
// refused) and session (the card's ExternalId, granted) and returns its length.
func checkTestSession(t *testing.T, r *pendingRelay, what string, before int) int {
	t.Helper()
	reqs := r.sts.Requests()
	if len(reqs) != before+2 || reqs[before].Granted || reqs[before].ExternalID == pcExternalID ||
		!reqs[before+1].Granted || reqs[before+1].ExternalID != pcExternalID {
		t.Fatalf("STS log after %s: %+v from call %d, want a refused probe then a granted session", what, reqs[before:], before)
	}
	return len(reqs)
}

// TestSixTestsInARowAreDeliveredUnderTheDefaultSTSBudgetAndTheSeventhMeetsTheTestLimit:
// an active EventBridge destination (its role trusts us with its ExternalId), the
// default STS budget and api.tests_per_destination. Six tests in a row each answer 200
// delivered, each with its own probe and session in STS's log and its event on the bus:
// none meets the STS budget (the activation's two calls and the tests' twelve fit in
// its 16). The seventh answers 429 from the API's own test limit, with Retry-After,
// and reaches neither STS nor the bus.
func TestSixTestsInARowAreDeliveredUnderTheDefaultSTSBudgetAndTheSeventhMeetsTheTestLimit(t *testing.T) {
	r := startPendingRelay(t, pendingSetup{
		setupCheck:   "{initial: 20ms, max: 200ms}",
		destinations: pcBus,
		customer:     func(r *pendingRelay) { r.sts.RequireExternalID(pcRoleARN, pcExternalID) },
	})
	r.waitActive()
	calls := 2
	start := time.Now()
	for i := 1; i <= 6; i++ {
		a := r.sendTest("eventbridge", "orders-bus")
		if a.status != http.StatusOK || a.outcome != "delivered" {
			t.Fatalf("test %d answered %d %q %q (%s), want 200 delivered", i, a.status, a.outcome, a.message, a.code)
		}
		calls = checkTestSession(t, r, fmt.Sprintf("test %d", i), calls)
		if n := len(r.bus.Entries()); n != i {
			t.Fatalf("the bus holds %d entries after test %d", n, i)
		}
	}
	seventh := r.sendTest("eventbridge", "orders-bus")
	if took := time.Since(start); took > 9*time.Second {
		t.Fatalf("the seven tests took %s: the test limit (6 a minute) refilled one meanwhile, so the seventh says nothing", took)
	}
	checkExhausted(t, "the seventh test", seventh, 60)
	t.Logf("the seventh test: 429 Retry-After %s %q", seventh.retryAfter, seventh.message)
	if !strings.Contains(seventh.message, "too many tests for a destination: 6 per 1m0s") {
		t.Errorf("the seventh test says %q, want the API's test limit", seventh.message)
	}
	if n := len(r.sts.Requests()); n != calls {
		t.Errorf("STS received %d calls after the seventh test, want still %d", n, calls)
	}
	entries := r.bus.Entries()
	if len(entries) != 6 {
		t.Fatalf("the bus holds %d entries, want the six tests'", len(entries))
	}
	for _, e := range entries {
		if e.DetailType != "relay.test" {
			t.Errorf("a bus entry is %q, want relay.test", e.DetailType)
		}
	}
}

// TestASecondTestInARowUnderASmallSTSBudgetAnswersWhenToTestAgain: an active EventBridge
// destination under an STS budget of 4 calls a minute, two of which its activation's
// check spent. The first test answers 200 delivered (a probe and a session); the second
// in a row answers 429 RESOURCE_EXHAUSTED with a Retry-After of at least a second and
// one sentence saying when to test again. STS's log shows no call for it, the bus
// nothing, and the attempt log only the first test.
func TestASecondTestInARowUnderASmallSTSBudgetAnswersWhenToTestAgain(t *testing.T) {
	r := startPendingRelay(t, pendingSetup{
		setupCheck:   "{initial: 20ms, max: 200ms}",
		stsBudget:    "{per_destination: {count: 4, per: 1m}, per_account: {count: 8, per: 1m}}",
		destinations: pcBus,
		customer:     func(r *pendingRelay) { r.sts.RequireExternalID(pcRoleARN, pcExternalID) },
	})
	r.waitActive()
	first := r.sendTest("eventbridge", "orders-bus")
	if first.status != http.StatusOK || first.outcome != "delivered" {
		t.Fatalf("the first test answered %d %q %q (%s), want 200 delivered", first.status, first.outcome, first.message, first.code)
	}
	calls := checkTestSession(t, r, "the first test", 2)

	second := r.sendTest("eventbridge", "orders-bus")
	secs := checkExhausted(t, "the second test", second, 60)
	checkWhenToTestAgain(t, "the second test", second.message, secs)
	t.Logf("the second test: 429 Retry-After %s %q", second.retryAfter, second.message)
	if n := len(r.sts.Requests()); n != calls {
		t.Errorf("STS received %d calls after the second test, want still %d: nothing is sent for a held-back test", n, calls)
	}
	if n := len(r.bus.Entries()); n != 1 {
		t.Errorf("the bus holds %d entries, want the first test's only", n)
	}
	a, err := r.call(http.MethodGet, "/v1/connectors/eventbridge/destinations/orders-bus/attempts")
	if err != nil || a.status != http.StatusOK {
		t.Fatalf("attempts: %v %d %s", err, a.status, a.body)
	}
	var log struct {
		Attempts []struct {
			Outcome string `json:"outcome"`
		} `json:"attempts"`
	}
	if err := json.Unmarshal(a.body, &log); err != nil {
		t.Fatal(err)
	}
	if len(log.Attempts) != 1 || log.Attempts[0].Outcome != "delivered" {
		t.Errorf("the attempt log holds %+v, want the first test's delivery only: a held-back test is not recorded", log.Attempts)
	}
}
