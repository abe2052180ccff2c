package eventbridge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/mercamap/relay/internal/assume"
	"github.com/mercamap/relay/internal/awstest"
	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/failures"
	"github.com/mercamap/relay/internal/sinks/eventbridge"
	"github.com/mercamap/relay/internal/sinks/sinktest"
)

const (
	role  = "arn:aws:iam::111122223333:role/mercamap-delivery"
	bus   = "arn:aws:events:eu-west-1:111122223333:event-bus/orders"
	extID = "ext-7f3a9c2e41d04b8d"
)

var destSeq atomic.Int64

// env is one bus behind the test STS, and a sink that reaches both as the real one would.
type env struct {
	sts  *awstest.STS
	bus  *awstest.EventBridge
	sink *eventbridge.Sink
	dest destination.Destination
}

func newEnv(t *testing.T, now func() time.Time) env {
	t.Helper()
	sts := awstest.NewSTS(t)
	sts.RequireExternalID(role, extID)
	eb := awstest.NewEventBridge(t)
	eb.RequireSessionFrom(sts) // a write signed with anything but the session is refused
	ours := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("AKIDOURS", "ours", "")}
	a := assume.New(assume.Options{STS: assume.NewSTSClient(ours, sts.URL), IdentityName: "mercamap",
		Backoff: config.Backoff{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond}, Now: now})
	return env{
		sts: sts, bus: eb,
		sink: eventbridge.New(eventbridge.Options{AWS: ours, Assumer: a, IdentityName: "mercamap", Endpoint: eb.URL}),
		dest: destination.Destination{ID: fmt.Sprintf("orders-bus-%d", destSeq.Add(1)), Account: "acct_123",
			Connector: destination.EventBridge, BusARN: bus, RoleARN: role, ExternalID: extID},
	}
}

func (e env) send(t *testing.T, m destination.Message) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	return e.sink.Send(ctx, e.dest, m)
}

// read waits (at most 10 s) until n entries reached the bus and returns them all.
func (e env) read(t *testing.T, n int) []awstest.Entry {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := e.bus.Entries()
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d entries on the bus after 10s, want %d", len(got), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestConformance(t *testing.T) {
	sinktest.Run(t, func(t *testing.T) sinktest.Backend {
		e := newEnv(t, nil)
		fail := func(f awstest.Failure) func(*testing.T) { return func(*testing.T) { e.bus.FailNext(1, f) } }
		entry := func(code string) func(*testing.T) {
			return func(*testing.T) { e.bus.FailEntries(1, code, "injected "+code) }
		}
		answer := func(body string) func(*testing.T) { return func(*testing.T) { e.bus.AnswerNext(1, body) } }
		return sinktest.Backend{
			Sink: e.sink,
			Dest: e.dest,
			Read: func(t *testing.T, n int) []sinktest.Received {
				var out []sinktest.Received
				for _, ent := range e.read(t, n) {
					var body map[string]any
					if err := json.Unmarshal([]byte(ent.Detail), &body); err != nil {
						t.Fatalf("Detail is not JSON: %v", err)
					}
					out = append(out, sinktest.Received{Body: body})
				}
				return out
			},
			Faults: map[string]sinktest.Fault{
				"ThrottlingException":            {Inject: fail(awstest.Throttling), Want: failures.NotTaken},
				"HTTP 500":                       {Inject: fail(awstest.InternalFailure), Want: failures.NotTaken},
				"AccessDeniedException":          {Inject: fail(awstest.AccessDeniedException), Want: failures.Rejected},
				"ResourceNotFoundException":      {Inject: fail(awstest.ResourceNotFound), Want: failures.Rejected},
				"entry ThrottlingException":      {Inject: entry("ThrottlingException"), Want: failures.NotTaken},
				"entry InternalFailure":          {Inject: entry("InternalFailure"), Want: failures.NotTaken},
				"entry AccessDeniedException":    {Inject: entry("AccessDeniedException"), Want: failures.Rejected},
				"entry MalformedDetail":          {Inject: entry("MalformedDetail"), Want: failures.Rejected},
				"entry NotAuthorizedForSource":   {Inject: entry("NotAuthorizedForSourceException"), Want: failures.Rejected},
				"entry InvalidArgument":          {Inject: entry("InvalidArgument"), Want: failures.Rejected},
				"entry KMSAccessDeniedException": {Inject: entry("KMSAccessDeniedException"), Want: failures.Rejected},
				"200 ErrorCode, FailedEntryCount 0": {Inject: answer(`{"FailedEntryCount":0,"Entries":[{"ErrorCode":"MalformedDetail"}]}`),
					Want: failures.Rejected},
				"200 no entries":  {Inject: answer(`{"FailedEntryCount":0,"Entries":[]}`), Want: failures.NotTaken},
				"200 empty body":  {Inject: answer(``), Want: failures.NotTaken},
				"200 not JSON":    {Inject: answer(`<html>`), Want: failures.NotTaken},
				"200 two entries": {Inject: answer(`{"FailedEntryCount":0,"Entries":[{"EventId":"a"},{"EventId":"b"}]}`), Want: failures.NotTaken},
			},
		}
	})
}

func TestEntryIsTheContractsOneWriteSignedWithTheSession(t *testing.T) {
	e := newEnv(t, nil)
	m := sinktest.Message(e.dest, 1)
	if err := e.send(t, m); err != nil {
		t.Fatal(err)
	}
	got := e.read(t, 1)[0]
	created, _ := time.Parse(time.RFC3339, m.CreatedAt)
	if got.EventBusName != bus || got.Source != "com.mercamap" || got.DetailType != "job.completed" ||
		got.Detail != string(m.Body()) || !got.Time.Equal(created) || len(got.Resources) != 0 {
		t.Fatalf("entry = %+v, want bus %s, source com.mercamap, detail-type job.completed, the body, time %v", got, bus, created)
	}
	session, ok := e.sts.Session(got.AccessKeyID)
	if !ok || session.ExternalID != extID || session.RoleARN != role {
		t.Fatalf("the write was signed with %s, not with the destination's session (%+v)", got.AccessKeyID, session)
	}
}

func TestRoleThatLetsTheProbeInIsRejectedAndNothingIsWritten(t *testing.T) {
	e := newEnv(t, nil)
	e.sts.AllowAny(role)
	err := e.send(t, sinktest.Message(e.dest, 1))
	if o := failures.Classify(err); o.Class != failures.Rejected || !strings.Contains(o.Message, "does not require this destination's ExternalId") {
		t.Fatalf("Send = %+v, want rejected: the role does not require its ExternalId", o)
	}
	if n := e.bus.Requests(); n != 0 {
		t.Fatalf("%d writes reached the bus, want none", n)
	}
	for _, r := range e.sts.Requests() {
		if r.ExternalID == extID {
			t.Fatal("the role was assumed with the real ExternalId after the probe got in")
		}
	}
}

func TestSTSTroubleMeansNoWrite(t *testing.T) {
	for _, tt := range []struct {
		name   string
		inject func(*awstest.STS)
		want   failures.Class
	}{
		{"role trusts nobody", func(s *awstest.STS) { s.TrustNobody(role) }, failures.Rejected},
		{"probe throttled", func(s *awstest.STS) { s.FailNext(1, awstest.STSThrottling) }, failures.NotTaken},
		{"session HTTP 500", func(s *awstest.STS) { s.FailNext(1, awstest.Failure{}); s.FailNext(1, awstest.STSInternalServerError) }, failures.NotTaken},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil)
			tt.inject(e.sts)
			if o := failures.Classify(e.send(t, sinktest.Message(e.dest, 1))); o.Class != tt.want {
				t.Fatalf("Send classified %+v, want %s", o, tt.want)
			}
			if n := e.bus.Requests(); n != 0 {
				t.Fatalf("%d writes reached the bus, want none", n)
			}
		})
	}
}

func TestTooLargeEventIsRejectedWithoutCallingAWS(t *testing.T) {
	e := newEnv(t, nil)
	sized := func(size int) destination.Message {
		m := sinktest.Message(e.dest, 2)
		m.Data = json.RawMessage(`{"blob":""}`)
		pad := size - eventbridge.EntrySize("com.mercamap", m.Type, m.Body())
		m.Data = json.RawMessage(`{"blob":"` + strings.Repeat("é", pad/2) + strings.Repeat("x", pad%2) + `"}`)
		if got := eventbridge.EntrySize("com.mercamap", m.Type, m.Body()); got != size {
			t.Fatalf("built an entry of %d bytes, want %d", got, size)
		}
		return m
	}
	err := e.send(t, sized(eventbridge.MaxEntrySize+1))
	if o := failures.Classify(err); o.Class != failures.Rejected || !strings.Contains(o.Message, "256 KiB") {
		t.Fatalf("Send = %+v, want rejected saying the bus's 256 KiB limit", o)
	}
	if len(e.sts.Requests()) != 0 || e.bus.Requests() != 0 {
		t.Fatalf("an oversized event called AWS: %d STS calls, %d writes", len(e.sts.Requests()), e.bus.Requests())
	}
	// The test bus enforces the same limit, so an entry of exactly 256 KiB landing shows
	// our count is the one the bus uses.
	if err := e.send(t, sized(eventbridge.MaxEntrySize)); err != nil {
		t.Fatalf("an entry of exactly the limit: %v", err)
	}
}

func TestSessionIsReusedAcrossWritesAndRenewedBeforeExpiry(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	e := newEnv(t, func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	for i := range 3 {
		if err := e.send(t, sinktest.Message(e.dest, i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(e.sts.Requests()); n != 2 {
		t.Fatalf("3 writes made %d STS calls, want 2 (one probe, one session)", n)
	}
	mu.Lock()
	now = now.Add(14 * time.Minute) // one minute of the 15 left
	mu.Unlock()
	if err := e.send(t, sinktest.Message(e.dest, 3)); err != nil {
		t.Fatal(err)
	}
	reqs, entries := e.sts.Requests(), e.read(t, 4)
	if len(reqs) != 4 || reqs[2].Granted || !reqs[3].Granted {
		t.Fatalf("near expiry STS saw %+v, want a refused probe then a new session", reqs)
	}
	if entries[2].AccessKeyID != reqs[1].AccessKeyID || entries[3].AccessKeyID != reqs[3].AccessKeyID {
		t.Fatalf("writes signed with %s then %s, want the first session then the renewed one", entries[2].AccessKeyID, entries[3].AccessKeyID)
	}
}

// TestA200IsDeliveredOnlyWithOneEventID: PutEvents answering 200 says nothing by itself.
// The write is delivered only when the answer holds exactly one entry with an EventId;
// an entry's ErrorCode is classified by that code, whatever FailedEntryCount says; any
// other answer is unreadable and not taken (the event may have landed: receivers drop a
// repeat by event_id).
func TestA200IsDeliveredOnlyWithOneEventID(t *testing.T) {
	unreadable := []string{"did not take the event", "unreadable answer"}
	for _, tt := range []struct {
		name    string
		body    string
		want    failures.Class
		phrases []string
	}{
		{"one EventId", `{"FailedEntryCount":0,"Entries":[{"EventId":"11710aed-b79e-4468-a20b-bb3c0c3b4860"}]}`, failures.Delivered, nil},
		{"ErrorCode with FailedEntryCount 0, throttling", `{"FailedEntryCount":0,"Entries":[{"ErrorCode":"ThrottlingException","ErrorMessage":"Rate exceeded"}]}`,
			failures.NotTaken, []string{"did not take the event", "ThrottlingException: Rate exceeded"}},
		{"ErrorCode with FailedEntryCount 0, internal failure", `{"FailedEntryCount":0,"Entries":[{"ErrorCode":"InternalFailure","ErrorMessage":"oops"}]}`,
			failures.NotTaken, []string{"did not take the event", "InternalFailure: oops"}},
		{"ErrorCode with FailedEntryCount 0, malformed", `{"FailedEntryCount":0,"Entries":[{"ErrorCode":"MalformedDetail","ErrorMessage":"Detail is malformed."}]}`,
			failures.Rejected, []string{"the bus refused the event", "MalformedDetail: Detail is malformed."}},
		{"ErrorCode beside an EventId", `{"FailedEntryCount":0,"Entries":[{"EventId":"e1","ErrorCode":"AccessDeniedException","ErrorMessage":"not authorized"}]}`,
			failures.Rejected, []string{"AccessDeniedException: not authorized", "permissions policy"}},
		{"no entries", `{"FailedEntryCount":0,"Entries":[]}`, failures.NotTaken, append(unreadable, "no entry")},
		{"entries left out", `{"FailedEntryCount":0}`, failures.NotTaken, append(unreadable, "no entry")},
		{"two entries for one", `{"FailedEntryCount":0,"Entries":[{"EventId":"e1"},{"EventId":"e2"}]}`, failures.NotTaken, append(unreadable, "2 entries")},
		{"an entry with neither", `{"FailedEntryCount":0,"Entries":[{}]}`, failures.NotTaken, append(unreadable, "neither an EventId nor an ErrorCode")},
		{"an empty EventId", `{"FailedEntryCount":0,"Entries":[{"EventId":""}]}`, failures.NotTaken, append(unreadable, "neither an EventId nor an ErrorCode")},
		{"FailedEntryCount 1 beside an EventId", `{"FailedEntryCount":1,"Entries":[{"EventId":"e1"}]}`, failures.NotTaken, append(unreadable, "FailedEntryCount 1")},
		{"empty object", `{}`, failures.NotTaken, append(unreadable, "no entry")},
		{"empty body", ``, failures.NotTaken, append(unreadable, "no entry")},
		{"not JSON", `<html>502 Bad Gateway</html>`, failures.NotTaken, unreadable},
		{"cut short", `{"FailedEntryCount":0,"Entries":[{"EventId":"e1"`, failures.NotTaken, unreadable},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil)
			e.bus.AnswerNext(1, tt.body)
			err := e.send(t, sinktest.Message(e.dest, 1))
			o := failures.Classify(err)
			if o.Class != tt.want {
				t.Fatalf("a 200 with %q: Send = %v classified %q (%q), want %q", tt.body, err, o.Class, o.Message, tt.want)
			}
			for _, p := range tt.phrases {
				if !strings.Contains(o.Message, p) {
					t.Errorf("sentence %q does not say %q", o.Message, p)
				}
			}
			if n := e.bus.Requests(); n != 1 {
				t.Fatalf("%d PutEvents calls, want exactly 1 (the sink never retries)", n)
			}
		})
	}
}

// TestRoleTrustingAnyRelayExternalIDIsRejectedAndNothingIsWritten: a trust policy of
// StringLike sts:ExternalId "relay-*" ("any of my relay destinations") would let another
// account's destination that names the role write into this bus. The probe, in the form
// of an issued id, is let in: the destination is rejected and nothing reaches the bus.
func TestRoleTrustingAnyRelayExternalIDIsRejectedAndNothingIsWritten(t *testing.T) {
	e := newEnv(t, nil)
	e.dest.ExternalID = destination.NewExternalID()
	if err := e.sts.SetTrustPolicy(role, `{"Version":"2012-10-17","Statement":[{"Effect":"Allow",
		"Principal":{"AWS":"`+awstest.CallerARN+`"},"Action":"sts:AssumeRole",
		"Condition":{"StringLike":{"sts:ExternalId":"relay-*"}}}]}`); err != nil {
		t.Fatal(err)
	}
	err := e.send(t, sinktest.Message(e.dest, 1))
	o := failures.Classify(err)
	if o.Class != failures.Rejected || !strings.Contains(o.Message, "let the relay in with a wrong ExternalId") ||
		!strings.Contains(o.Message, "not StringLike") {
		t.Fatalf("Send = %+v, want rejected: the probe was let in, the trust policy must name the exact id", o)
	}
	if n := e.bus.Requests(); n != 0 {
		t.Fatalf("%d writes reached the bus, want none", n)
	}
	for _, r := range e.sts.Requests() {
		if r.ExternalID == e.dest.ExternalID {
			t.Fatal("the role was assumed with the real ExternalId after the probe got in")
		}
	}
}

// TestOnlyAnExpiredOrUnknownTokenDropsTheSession: the bus refusing our token (expired,
// or one it does not recognise) drops the cached session: the next write takes a new one,
// its own probe first, and is signed with it; the refusal is not taken. The bus refusing
// the write for the role's permissions (AccessDeniedException, as an error or an entry's
// code) keeps the session: it is a rejection, and the next write is signed with the same
// session at once, with no STS call (AWS checks the permissions at each request).
func TestOnlyAnExpiredOrUnknownTokenDropsTheSession(t *testing.T) {
	for _, refusal := range []struct {
		name  string
		fail  func(e env)
		class failures.Class
		drop  bool
	}{
		{"ExpiredTokenException", func(e env) {
			e.bus.FailNext(1, awstest.Failure{Status: 400, Code: "ExpiredTokenException", Message: "The security token included in the request is expired"})
		}, failures.NotTaken, true},
		{"UnrecognizedClientException", func(e env) {
			e.bus.FailNext(1, awstest.Failure{Status: 400, Code: "UnrecognizedClientException", Message: "The security token included in the request is invalid."})
		}, failures.NotTaken, true},
		{"AccessDeniedException", func(e env) { e.bus.FailNext(1, awstest.AccessDeniedException) }, failures.Rejected, false},
		{"entry AccessDeniedException", func(e env) { e.bus.FailEntries(1, "AccessDeniedException", "not authorized") }, failures.Rejected, false},
	} {
		t.Run(refusal.name, func(t *testing.T) {
			e := newEnv(t, nil)
			if err := e.send(t, sinktest.Message(e.dest, 0)); err != nil {
				t.Fatal(err)
			}
			refusal.fail(e)
			if got := failures.Classify(e.send(t, sinktest.Message(e.dest, 1))).Class; got != refusal.class {
				t.Fatalf("refused write classified %s, want %s", got, refusal.class)
			}
			if err := e.send(t, sinktest.Message(e.dest, 2)); err != nil {
				t.Fatalf("the write right after the refusal: %v", err)
			}
			reqs, entries := e.sts.Requests(), e.read(t, 2)
			if !refusal.drop {
				if len(reqs) != 2 || entries[1].AccessKeyID != entries[0].AccessKeyID {
					t.Fatalf("after the refusal STS saw %d calls and the write was signed with %s (first %s), want the same session and no STS call",
						len(reqs), entries[1].AccessKeyID, entries[0].AccessKeyID)
				}
				return
			}
			if len(reqs) != 4 || reqs[2].Granted || reqs[2].ExternalID == extID || !reqs[3].Granted || reqs[3].ExternalID != extID {
				t.Fatalf("after the refusal STS saw %d calls %+v, want a denied probe, then one new session", len(reqs), reqs)
			}
			if entries[1].AccessKeyID != reqs[3].AccessKeyID || entries[1].AccessKeyID == entries[0].AccessKeyID {
				t.Fatalf("the write after the refusal was signed with %s, want the new session %s", entries[1].AccessKeyID, reqs[3].AccessKeyID)
			}
		})
	}
}

// TestBusesSharingAClientEachGetWritesSignedWithTheirOwnSession: buses in one region
// share one SDK client, and writes to them at once are each signed with their own
// destination's session, never another's and never our own identity.
func TestBusesSharingAClientEachGetWritesSignedWithTheirOwnSession(t *testing.T) {
	e := newEnv(t, nil)
	var dests []destination.Destination
	for i := range 4 {
		d := e.dest
		d.ID = fmt.Sprintf("%s-%d", e.dest.ID, i)
		d.RoleARN = fmt.Sprintf("arn:aws:iam::11112222333%d:role/mercamap-delivery", i)
		d.BusARN = fmt.Sprintf("arn:aws:events:eu-west-1:11112222333%d:event-bus/orders", i)
		d.ExternalID = fmt.Sprintf("ext-%d-7f3a9c2e41d04b8d", i)
		e.sts.RequireExternalID(d.RoleARN, d.ExternalID)
		dests = append(dests, d)
	}
	const each = 5
	var wg sync.WaitGroup
	errs := make(chan error, len(dests)*each)
	for _, d := range dests {
		wg.Go(func() {
			for i := range each {
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				errs <- e.sink.Send(ctx, d, sinktest.Message(d, i+1))
				cancel()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	roleOf := map[string]string{}
	for _, d := range dests {
		roleOf[d.BusARN] = d.RoleARN
	}
	got := e.read(t, len(dests)*each)
	for _, ent := range got {
		session, ok := e.sts.Session(ent.AccessKeyID)
		if !ok || session.RoleARN != roleOf[ent.EventBusName] {
			t.Fatalf("the write to %s was signed with %s (session of %q), not with its own destination's session",
				ent.EventBusName, ent.AccessKeyID, session.RoleARN)
		}
	}
}
