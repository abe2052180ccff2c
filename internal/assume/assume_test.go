package assume_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/smithy-go"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mercamap/relay/internal/assume"
	"github.com/mercamap/relay/internal/awstest"
	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/failures"
)

const (
	role      = "arn:aws:iam::111122223333:role/mercamap-delivery"
	bus       = "arn:aws:events:us-east-1:111122223333:event-bus/orders"
	stream    = "arn:aws:kinesis:eu-west-1:111122223333:stream/orders"
	kmsKey    = "arn:aws:kms:eu-west-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"
	extID     = "ext-7f3a9c2e41d04b8d"
	principal = "arn:aws:iam::999999999999:role/relay-delivery"
)

func busDest() destination.Destination {
	return destination.Destination{ID: "orders-bus", Account: "acct_123", Connector: destination.EventBridge,
		BusARN: bus, RoleARN: role, ExternalID: extID}
}

// clock is a settable Now for the Assumer.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// newAssumer signs as our own identity (static keys) against the test STS at url.
func newAssumer(t *testing.T, url string, now func() time.Time) *assume.Assumer {
	t.Helper()
	cfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("AKIDOURS", "ours", "")}
	return assume.New(assume.Options{STS: assume.NewSTSClient(cfg, url), IdentityName: "mercamap",
		PrincipalARN: principal, Now: now})
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

// wantClass fails unless err classifies as want with a sentence holding every phrase.
func wantClass(t *testing.T, err error, want failures.Class, phrases ...string) {
	t.Helper()
	o := failures.Classify(err)
	if o.Class != want {
		t.Fatalf("classified %q (%q), want %q; err: %v", o.Class, o.Message, want, err)
	}
	for _, p := range phrases {
		if !strings.Contains(o.Message, p) {
			t.Errorf("sentence %q does not say %q", o.Message, p)
		}
	}
}

func TestProbeRefusedThenSessionGranted(t *testing.T) {
	sts := awstest.NewSTS(t)
	sts.RequireExternalID(role, extID)
	creds, err := newAssumer(t, sts.URL, nil).Credentials(ctx(t), busDest())
	if err != nil {
		t.Fatal(err)
	}
	reqs := sts.Requests()
	if len(reqs) != 2 {
		t.Fatalf("STS saw %d calls, want the probe then the session: %+v", len(reqs), reqs)
	}
	probe, session := reqs[0], reqs[1]
	if probe.Granted || probe.ExternalID == extID || probe.ExternalID == "" || probe.Policy != destination.DenyAllPolicy() {
		t.Errorf("probe = %+v, want a refused call with a wrong ExternalId under the deny-all policy", probe)
	}
	if !session.Granted || session.ExternalID != extID || session.RoleSessionName != "mercamap-acct_123" || session.DurationSeconds != 900 {
		t.Errorf("session = %+v, want the real ExternalId, name mercamap-acct_123, 900 s", session)
	}
	if probe.CallerKeyID != "AKIDOURS" || session.CallerKeyID != "AKIDOURS" {
		t.Errorf("STS calls signed with %q and %q, want our own key", probe.CallerKeyID, session.CallerKeyID)
	}
	if creds.AccessKeyID != session.AccessKeyID || !creds.CanExpire || !creds.Expires.Equal(session.Expiration) {
		t.Errorf("credentials %s expiring %v, want the session's %s expiring %v", creds.AccessKeyID, creds.Expires, session.AccessKeyID, session.Expiration)
	}
}

func TestProbeLetInRejectsTheRoleAndNeverAssumesIt(t *testing.T) {
	sts := awstest.NewSTS(t)
	sts.AllowAny(role)
	a := newAssumer(t, sts.URL, nil)
	for range 2 { // a rejected role is probed again next time, never cached as good
		_, err := a.Credentials(ctx(t), busDest())
		wrongID := sts.Requests()[len(sts.Requests())-1].ExternalID
		wantClass(t, err, failures.Rejected, role, "does not require this destination's ExternalId", extID)
		if wrongID == extID {
			t.Fatal("the probe sent the real ExternalId")
		}
	}
	for _, r := range sts.Requests() {
		if r.ExternalID == extID {
			t.Fatalf("the role was assumed with the real ExternalId after the probe got in: %+v", r)
		}
	}
	if n := len(sts.Requests()); n != 2 {
		t.Fatalf("STS saw %d calls, want 2 probes", n)
	}
}

func TestRoleThatRefusesUsIsRejectedNamingWhatToCheck(t *testing.T) {
	for name, register := range map[string]func(*awstest.STS){
		"trusts nobody":              func(s *awstest.STS) { s.TrustNobody(role) },
		"wants another ExternalId":   func(s *awstest.STS) { s.RequireExternalID(role, "ext-someone-else") },
		"role not registered at all": func(*awstest.STS) {},
	} {
		t.Run(name, func(t *testing.T) {
			sts := awstest.NewSTS(t)
			register(sts)
			_, err := newAssumer(t, sts.URL, nil).Credentials(ctx(t), busDest())
			wantClass(t, err, failures.Rejected, role, "AccessDenied", "trust policy", principal, "sts:ExternalId", extID)
			if got := failures.Reason(err); got != "" {
				t.Errorf("a role that refuses us has the security reason %q: it lets no one in", got)
			}
		})
	}
}

func TestSTSTroublesAreNotTaken(t *testing.T) {
	stop := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-stop }))
	t.Cleanup(hang.Close)
	t.Cleanup(func() { close(stop) }) // runs first: lets the handler end so Close returns
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()

	for _, tt := range []struct {
		name   string
		inject func(*awstest.STS)
		url    string // instead of the test STS
	}{
		{name: "probe throttled", inject: func(s *awstest.STS) { s.FailNext(1, awstest.STSThrottling) }},
		{name: "probe HTTP 500", inject: func(s *awstest.STS) { s.FailNext(1, awstest.STSInternalServerError) }},
		{name: "session throttled", inject: func(s *awstest.STS) { s.FailNext(1, awstest.Failure{}); s.FailNext(1, awstest.STSThrottling) }},
		{name: "session HTTP 500", inject: func(s *awstest.STS) { s.FailNext(1, awstest.Failure{}); s.FailNext(1, awstest.STSInternalServerError) }},
		{name: "our own key refused", inject: func(s *awstest.STS) { s.FailNext(1, awstest.Failure{}); s.FailNext(1, awstest.STSInvalidClientTokenID) }},
		{name: "STS not listening", url: closed.URL},
		{name: "STS not answering", url: hang.URL},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sts := awstest.NewSTS(t)
			sts.RequireExternalID(role, extID)
			url := sts.URL
			if tt.url != "" {
				url = tt.url
			}
			if tt.inject != nil {
				tt.inject(sts)
			}
			c, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
			defer cancel()
			a := newAssumer(t, url, nil)
			_, err := a.Credentials(c, busDest())
			wantClass(t, err, failures.NotTaken, "did not take the event")
			if tt.url != "" {
				return
			}
			// Once STS answers again, the next attempt probes and gets a session.
			if _, err := a.Credentials(ctx(t), busDest()); err != nil {
				t.Fatalf("after the trouble passed: %v", err)
			}
			reqs := sts.Requests()
			if last := reqs[len(reqs)-2:]; last[0].Granted || last[0].ExternalID == extID || !last[1].Granted {
				t.Fatalf("the retry was not a refused probe then a session: %+v", last)
			}
		})
	}
}

func TestSessionIsReusedUntilNearExpiryAndEachNewOneIsProbed(t *testing.T) {
	sts := awstest.NewSTS(t)
	sts.RequireExternalID(role, extID)
	clk := &clock{now: time.Now()}
	a := newAssumer(t, sts.URL, clk.Now)
	d := busDest()

	first, err := a.Credentials(ctx(t), d)
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(12 * time.Minute) // 3 minutes left: still reused
	if again, err := a.Credentials(ctx(t), d); err != nil || again.AccessKeyID != first.AccessKeyID {
		t.Fatalf("at 12 min got %s (%v), want the same session %s", again.AccessKeyID, err, first.AccessKeyID)
	}
	if n := len(sts.Requests()); n != 2 {
		t.Fatalf("STS saw %d calls by 12 min, want 2 (one probe, one session)", n)
	}
	clk.Advance(90 * time.Second) // 90 s left: under the 2 min margin, so a new session
	renewed, err := a.Credentials(ctx(t), d)
	if err != nil {
		t.Fatal(err)
	}
	reqs := sts.Requests()
	if renewed.AccessKeyID == first.AccessKeyID || len(reqs) != 4 {
		t.Fatalf("at 13.5 min: key %s after %d STS calls, want a new session after 4 calls", renewed.AccessKeyID, len(reqs))
	}
	if reqs[2].Granted || reqs[2].ExternalID == extID || !reqs[3].Granted || reqs[3].ExternalID != extID {
		t.Fatalf("the renewal was not a refused probe then a session: %+v", reqs[2:])
	}
}

func TestCheckProbesAndAssumesAgainNow(t *testing.T) {
	sts := awstest.NewSTS(t)
	sts.RequireExternalID(role, extID)
	a := newAssumer(t, sts.URL, nil)
	if _, err := a.Credentials(ctx(t), busDest()); err != nil {
		t.Fatal(err)
	}
	if err := a.Check(ctx(t), busDest()); err != nil {
		t.Fatal(err)
	}
	if n := len(sts.Requests()); n != 4 {
		t.Fatalf("STS saw %d calls, want 4: Check runs the probe and a session even with one cached", n)
	}
	sts.AllowAny(role) // the customer loosened the trust policy: Check must see it
	wantClass(t, a.Check(ctx(t), busDest()), failures.Rejected, "does not require")
}

func TestRedefinedDestinationGetsANewSession(t *testing.T) {
	sts := awstest.NewSTS(t)
	sts.RequireExternalID(role, extID)
	a := newAssumer(t, sts.URL, nil)
	d := busDest()
	first, _ := a.Credentials(ctx(t), d)
	d.BusARN = "arn:aws:events:us-east-1:111122223333:event-bus/other"
	second, err := a.Credentials(ctx(t), d)
	if err != nil || second.AccessKeyID == first.AccessKeyID {
		t.Fatalf("after the bus changed got %s (%v), want a new session", second.AccessKeyID, err)
	}
	if got := sts.Requests()[3].Policy; got != destination.SessionPolicy(d) {
		t.Fatalf("new session's policy %s, want the new bus's", got)
	}
}

func TestConcurrentCallersShareOneSession(t *testing.T) {
	sts := awstest.NewSTS(t)
	sts.RequireExternalID(role, extID)
	a := newAssumer(t, sts.URL, nil)
	var wg sync.WaitGroup
	keys := make([]string, 10)
	for i := range keys {
		wg.Go(func() {
			c, err := a.Credentials(ctx(t), busDest())
			if err != nil {
				t.Error(err)
			}
			keys[i] = c.AccessKeyID
		})
	}
	wg.Wait()
	for _, k := range keys {
		if k != keys[0] {
			t.Fatalf("callers got different sessions: %v", keys)
		}
	}
	if n := len(sts.Requests()); n != 2 {
		t.Fatalf("STS saw %d calls for 10 concurrent callers, want 2", n)
	}
}

// TestSessionPolicyAllowsExactlyTheOneWrite reads the policy STS received and compares
// it, as JSON, with the one write the contract allows.
func TestSessionPolicyAllowsExactlyTheOneWrite(t *testing.T) {
	kinesisDest := destination.Destination{ID: "orders-stream", Account: "acct_123", Connector: destination.Kinesis,
		StreamARN: stream, RoleARN: role, KMSKeyARN: kmsKey, ExternalID: extID}
	for _, tt := range []struct {
		d    destination.Destination
		want string
	}{
		{busDest(), `{"Version":"2012-10-17","Statement":[
			{"Effect":"Allow","Action":"events:PutEvents","Resource":"` + bus + `"}]}`},
		{kinesisDest, `{"Version":"2012-10-17","Statement":[
			{"Effect":"Allow","Action":"kinesis:PutRecord","Resource":"` + stream + `"},
			{"Effect":"Allow","Action":"kms:GenerateDataKey","Resource":"` + kmsKey + `",
			 "Condition":{"StringEquals":{"kms:ViaService":"kinesis.eu-west-1.amazonaws.com"}}}]}`},
	} {
		t.Run(string(tt.d.Connector), func(t *testing.T) {
			sts := awstest.NewSTS(t)
			sts.RequireExternalID(role, extID)
			if _, err := newAssumer(t, sts.URL, nil).Credentials(ctx(t), tt.d); err != nil {
				t.Fatal(err)
			}
			reqs := sts.Requests()
			if got := reqs[1].Policy; got != destination.SessionPolicy(tt.d) {
				t.Errorf("session policy sent %s, want destination.SessionPolicy %s", got, destination.SessionPolicy(tt.d))
			}
			sameJSON(t, "session policy", reqs[1].Policy, tt.want)
			sameJSON(t, "probe policy", reqs[0].Policy, `{"Version":"2012-10-17","Statement":[{"Effect":"Deny","Action":"*","Resource":"*"}]}`)
		})
	}
}

func sameJSON(t *testing.T, what, got, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		t.Fatalf("%s is not JSON: %v: %s", what, err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("%s = %s, want %s", what, got, want)
	}
}

func TestSessionNameFollowsSTSRules(t *testing.T) {
	for _, tt := range []struct{ name, account, want string }{
		{"mercamap", "acct_123", "mercamap-acct_123"},
		{"mercamap", "acct 1/2:3", "mercamap-acct-1-2-3"},
		{"relay", "café", "relay-caf-"},
		{"", "", "--"},
		{"m", strings.Repeat("a", 80), "m-" + strings.Repeat("a", 62)},
		{"a+b=c,d.e@f", "x", "a+b=c,d.e@f-x"},
	} {
		got := assume.SessionName(tt.name, tt.account)
		if got != tt.want {
			t.Errorf("SessionName(%q, %q) = %q, want %q", tt.name, tt.account, got, tt.want)
		}
	}
}

// issuedForm is the one form of an ExternalId the relay issues (dispatch, through
// destination.NewExternalID).
var issuedForm = regexp.MustCompile(`^relay-[0-9a-f]{32}$`)

// TestProbeLooksExactlyLikeAnotherDestinationsSession: the probe's ExternalId is in the
// issued form, fresh each time and never the destination's own; its session name is the
// real session's. Nothing but the exact ExternalId tells it from a real one.
func TestProbeLooksExactlyLikeAnotherDestinationsSession(t *testing.T) {
	d := busDest()
	d.ExternalID = destination.NewExternalID()
	if !issuedForm.MatchString(d.ExternalID) {
		t.Fatalf("destination.NewExternalID() = %q, not relay- and 32 lowercase hex", d.ExternalID)
	}
	sts := awstest.NewSTS(t)
	sts.RequireExternalID(role, d.ExternalID)
	a := newAssumer(t, sts.URL, nil)
	for range 3 {
		if err := a.Check(ctx(t), d); err != nil {
			t.Fatal(err)
		}
	}
	reqs := sts.Requests()
	seen := map[string]bool{}
	for i := 0; i < len(reqs); i += 2 {
		probe, session := reqs[i], reqs[i+1]
		if !issuedForm.MatchString(probe.ExternalID) {
			t.Errorf("probe ExternalId %q is not in the issued form relay-<32 hex>", probe.ExternalID)
		}
		if probe.ExternalID == d.ExternalID || seen[probe.ExternalID] {
			t.Errorf("probe ExternalId %q is the real one or repeats an earlier probe's", probe.ExternalID)
		}
		seen[probe.ExternalID] = true
		if probe.RoleSessionName != session.RoleSessionName {
			t.Errorf("probe session name %q, real session %q: a trust policy could tell them apart", probe.RoleSessionName, session.RoleSessionName)
		}
	}
}

// TestTrustPolicyThatCanTellTheProbeApartIsRefused: a customer's trust policy that
// matches a pattern ("any of my relay destinations") instead of the exact ExternalId lets
// every destination naming the role in, the confused deputy. The probe is let in, so
// the role is rejected with the card's sentence and never assumed with the real id.
func TestTrustPolicyThatCanTellTheProbeApartIsRefused(t *testing.T) {
	trusting := func(condition string) string {
		return `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":"` + awstest.CallerARN +
			`"},"Action":"sts:AssumeRole","Condition":` + condition + `}]}`
	}
	for name, policy := range map[string]string{
		"StringLike relay-*":                     trusting(`{"StringLike":{"sts:ExternalId":"relay-*"}}`),
		"StringLike *":                           trusting(`{"StringLike":{"sts:ExternalId":"*"}}`),
		"StringLike relay- and 32 ?":             trusting(`{"StringLike":{"sts:ExternalId":"relay-` + strings.Repeat("?", 32) + `"}}`),
		"StringLike a list of patterns":          trusting(`{"StringLike":{"sts:ExternalId":["relay-0*","relay-1*","relay-2*","relay-3*","relay-4*","relay-5*","relay-6*","relay-7*","relay-8*","relay-9*","relay-a*","relay-b*","relay-c*","relay-d*","relay-e*","relay-f*"]}}`),
		"StringNotLike probe-*":                  trusting(`{"StringNotLike":{"sts:ExternalId":"probe-*"}}`),
		"StringLike on the session name only":    trusting(`{"StringLike":{"sts:RoleSessionName":"mercamap-acct_*"}}`),
		"StringNotLike on the session name only": trusting(`{"StringNotLike":{"sts:RoleSessionName":"*probe*"}}`),
	} {
		t.Run(name, func(t *testing.T) {
			d := busDest()
			d.ExternalID = destination.NewExternalID()
			sts := awstest.NewSTS(t)
			if err := sts.SetTrustPolicy(role, policy); err != nil {
				t.Fatal(err)
			}
			_, err := newAssumer(t, sts.URL, nil).Credentials(ctx(t), d)
			wantClass(t, err, failures.Rejected, role, "let the relay in with a wrong ExternalId", "StringEquals", d.ExternalID, "not StringLike")
			if got := failures.Reason(err); got != failures.ReasonExternalIDNotEnforced {
				t.Errorf("the refusal's reason is %q, want %q: the card and the metric tell a security refusal by it", got, failures.ReasonExternalIDNotEnforced)
			}
			for _, r := range sts.Requests() {
				if r.ExternalID == d.ExternalID {
					t.Fatalf("the role was assumed with the real ExternalId after the probe got in: %+v", r)
				}
			}
		})
	}
}

// budgeted starts an STS whose role requires extID and an Assumer of it with a small STS
// budget, a short session backoff and its own metrics, on a clock of its own.
func budgeted(t *testing.T) (*awstest.STS, *clock, *assume.Assumer, *assume.Metrics) {
	t.Helper()
	sts := awstest.NewSTS(t)
	sts.RequireExternalID(role, extID)
	clk := &clock{now: time.Now()}
	m := assume.NewMetrics(nil)
	cfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("AKIDOURS", "ours", "")}
	return sts, clk, assume.New(assume.Options{STS: assume.NewSTSClient(cfg, sts.URL), IdentityName: "mercamap", PrincipalARN: principal, Now: clk.Now,
		Budget:  config.STSBudget{PerDestination: config.Rate{Count: 4, Per: time.Minute}, PerAccount: config.Rate{Count: 6, Per: time.Minute}},
		Backoff: config.Backoff{Initial: time.Second, Max: 4 * time.Second}, Metrics: m}), m
}

// wantHeldBack fails unless err is the relay's own pacing (failures.NewHeldBack), not taken,
// waits about wait, and says so.
func wantHeldBack(t *testing.T, err error, wait time.Duration, phrases ...string) {
	t.Helper()
	wantClass(t, err, failures.NotTaken, phrases...)
	if got, held := failures.HeldBackFor(err); !held || got < wait-time.Millisecond || got > wait+time.Millisecond {
		t.Fatalf("held back %v for %s, want %s", held, got, wait)
	}
}

// TestBudgetHoldsBackNewSessionsAndSaysWhenTheNextCanBe: each new session (its probe and
// itself) spends two calls from the destination's and the account's bucket, both or
// neither; an empty one holds the session back, with the wait until it holds enough again.
// A cached session spends nothing.
func TestBudgetHoldsBackNewSessionsAndSaysWhenTheNextCanBe(t *testing.T) {
	sts, clk, a, _ := budgeted(t)
	d1, d2 := busDest(), busDest()
	d2.ID = "orders-bus-2"
	for range 2 {
		if err := a.Check(ctx(t), d1); err != nil { // a probe and a session each
			t.Fatal(err)
		}
	}
	// d1's 4 are spent: 2 more come back in 30 s (4 a minute, evenly).
	wantHeldBack(t, a.Check(ctx(t), d1), 30*time.Second, "did not take the event", "paces its calls to AWS STS", "again in 30s")
	if err := a.Check(ctx(t), d2); err != nil { // the account's last 2
		t.Fatal(err)
	}
	// d2's own bucket holds 2, the account's none: 2 come back in 20 s.
	wantHeldBack(t, a.Check(ctx(t), d2), 20*time.Second, "again in 20s")
	if n := len(sts.Requests()); n != 6 {
		t.Fatalf("STS saw %d calls, want the budget's 6", n)
	}
	clk.Advance(30 * time.Second)
	if err := a.Check(ctx(t), d1); err != nil {
		t.Fatalf("after 30 s: %v", err)
	}
	if _, err := a.Credentials(ctx(t), d1); err != nil || len(sts.Requests()) != 8 {
		t.Fatalf("the cached session: %v after %d STS calls, want it reused with no call", err, len(sts.Requests()))
	}
}

// TestARefusedWriteKeepsTheSessionAndOnlyOurOwnTokensDropIt: the bus refusing a write
// for the role's permissions (AccessDeniedException) keeps the session, since AWS checks
// the permissions at each request: the next write is signed with it, with no STS call.
// An expired or unrecognised token drops it; the next is a probe and a session.
func TestARefusedWriteKeepsTheSessionAndOnlyOurOwnTokensDropIt(t *testing.T) {
	sts, _, a, _ := budgeted(t)
	d := busDest()
	creds, err := a.Credentials(ctx(t), d)
	if err != nil {
		t.Fatal(err)
	}
	denied := fmt.Errorf("eventbridge PutEvents: %w", &smithy.GenericAPIError{Code: "AccessDeniedException", Message: "not authorized to perform: events:PutEvents"})
	for range 10 {
		a.Report(d, creds.AccessKeyID, denied)
		got, err := a.Credentials(ctx(t), d)
		if err != nil || got.AccessKeyID != creds.AccessKeyID {
			t.Fatalf("after a write refused for the role's permissions: %s, %v; want the same session %s", got.AccessKeyID, err, creds.AccessKeyID)
		}
	}
	if n := len(sts.Requests()); n != 2 {
		t.Fatalf("STS saw %d calls after ten refused writes, want the first probe and session only", n)
	}
	for i, code := range []string{"ExpiredTokenException", "ExpiredToken", "UnrecognizedClientException", "InvalidClientTokenId"} {
		a.Report(d, creds.AccessKeyID, &smithy.GenericAPIError{Code: code})
		before := len(sts.Requests())
		if creds, err = a.Credentials(ctx(t), d); err != nil && i < 1 {
			t.Fatalf("after %s: %v", code, err)
		}
		if err != nil { // the budget (4 a minute) holds the third new session back
			wantHeldBack(t, err, 30*time.Second, "again in 30s")
			break
		}
		if reqs := sts.Requests()[before:]; len(reqs) != 2 || reqs[0].Granted || reqs[0].ExternalID == extID || !reqs[1].Granted {
			t.Fatalf("after %s STS saw %+v, want a denied probe then a session", code, reqs)
		}
	}
}

// TestARefusedSessionWaitsDoublingAndSaysTheRefusalFirst: STS refusing the session with
// the real ExternalId is rejected; the next session waits 1 s, then 2 (doubling up to the
// max), and a write held back meanwhile says the refusal first, then the wait. The try
// after the wait probes again. A test (Check) does not wait.
func TestARefusedSessionWaitsDoublingAndSaysTheRefusalFirst(t *testing.T) {
	sts, clk, a, _ := budgeted(t)
	d := busDest()
	sts.RequireExternalID(role, "ext-someone-else")
	_, err := a.Credentials(ctx(t), d)
	wantClass(t, err, failures.Rejected, "AWS refused to let the relay assume role")
	_, err = a.Credentials(ctx(t), d)
	wantClass(t, err, failures.NotTaken, "did not take the event: AWS refused to let the relay assume role", "trust policy", "again in 1s")
	if failures.Wait(err) != time.Second {
		t.Fatalf("wait %s, want 1s", failures.Wait(err))
	}
	clk.Advance(time.Second)
	_, err = a.Credentials(ctx(t), d)
	wantClass(t, err, failures.Rejected, "AWS refused to let the relay assume role")
	_, err = a.Credentials(ctx(t), d)
	if failures.Wait(err) != 2*time.Second {
		t.Fatalf("after the second refusal: %v (wait %s), want a 2s wait", err, failures.Wait(err))
	}
	// Meanwhile the budget (4 a minute) is spent: the wait it sets says the refusal first too.
	clk.Advance(2 * time.Second)
	_, err = a.Credentials(ctx(t), d)
	wantHeldBack(t, err, 27*time.Second, "did not take the event: AWS refused to let the relay assume role", "trust policy", "again in 27s")
	clk.Advance(27 * time.Second)
	sts.RequireExternalID(role, extID)
	before := len(sts.Requests())
	if err := a.Check(ctx(t), d); err != nil {
		t.Fatalf("a test after the role was fixed: %v", err)
	}
	if reqs := sts.Requests()[before:]; len(reqs) != 2 || reqs[0].Granted || !reqs[1].Granted {
		t.Fatalf("the test's STS calls %+v, want a probe then the session", reqs)
	}
	if _, err := a.Credentials(ctx(t), d); err != nil {
		t.Fatalf("after the test's session: %v, want it reused", err)
	}
}

// TestEverySessionHasItsOwnProbe: a session renewed before it expires, or after the bus
// said it expired, is preceded by a probe of its own, however recent the last one.
func TestEverySessionHasItsOwnProbe(t *testing.T) {
	sts, clk, a, _ := budgeted(t)
	d := busDest()
	creds, _ := a.Credentials(ctx(t), d)
	clk.Advance(time.Minute)
	a.Report(d, creds.AccessKeyID, &smithy.GenericAPIError{Code: "ExpiredTokenException"})
	if _, err := a.Credentials(ctx(t), d); err != nil {
		t.Fatal(err)
	}
	clk.Advance(13*time.Minute + time.Second) // the renewal, 2 minutes before it expires
	if _, err := a.Credentials(ctx(t), d); err != nil {
		t.Fatal(err)
	}
	reqs := sts.Requests()
	if len(reqs) != 6 {
		t.Fatalf("STS saw %d calls, want three probes and three sessions: %+v", len(reqs), reqs)
	}
	for i := 0; i < len(reqs); i += 2 {
		probe, session := reqs[i], reqs[i+1]
		if probe.Granted || probe.ExternalID == extID || probe.Policy != destination.DenyAllPolicy() || !session.Granted || session.ExternalID != extID {
			t.Fatalf("session %d: %+v after %+v, want a denied deny-all probe with a wrong ExternalId right before it", i/2+1, session, probe)
		}
	}
}

// TestThrottleOfOurPrincipalIsCountedAndNotTaken: STS answering Throttling (its HTTP 400
// shape) is not taken, with a sentence that says it is ours, and counted by call.
func TestThrottleOfOurPrincipalIsCountedAndNotTaken(t *testing.T) {
	sts, _, a, m := budgeted(t)
	sts.ThrottleAbove(1, time.Hour) // the probe passes, the session is throttled
	if got := testutil.ToFloat64(m.Throttled.WithLabelValues("probe")) + testutil.ToFloat64(m.Throttled.WithLabelValues("session")); got != 0 {
		t.Fatalf("relay_sts_throttled_total starts at %v", got)
	}
	_, err := a.Credentials(ctx(t), busDest())
	wantClass(t, err, failures.NotTaken, "throttling the relay's own requests", "the fault is on our side")
	if c := failures.Code(err); c != "Throttling" {
		t.Errorf("code %q, want STS's Throttling", c)
	}
	for call, want := range map[string]float64{"probe": 0, "session": 1} {
		if got := testutil.ToFloat64(m.Throttled.WithLabelValues(call)); got != want {
			t.Errorf("relay_sts_throttled_total{call=%q} = %v, want %v", call, got, want)
		}
		if got := testutil.ToFloat64(m.Calls.WithLabelValues(call)); got != 1 {
			t.Errorf("relay_sts_calls_total{call=%q} = %v, want 1", call, got)
		}
	}
	if _, throttled := sts.CallsBy(); throttled["AKIDOURS"] != 1 {
		t.Errorf("STS throttled %v, want our key once", throttled)
	}
}
