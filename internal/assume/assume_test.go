package assume_test

import (
	"context"
	"encoding/json"
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

	"github.com/mercamap/relay/internal/assume"
	"github.com/mercamap/relay/internal/awstest"
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
			for _, r := range sts.Requests() {
				if r.ExternalID == d.ExternalID {
					t.Fatalf("the role was assumed with the real ExternalId after the probe got in: %+v", r)
				}
			}
		})
	}
}
