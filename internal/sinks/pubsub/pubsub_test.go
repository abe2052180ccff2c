package pubsub

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/oauth2"
	"google.golang.org/api/option"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/failures"
	"github.com/mercamap/relay/internal/sinks/sinktest"
)

func event(d destination.Destination, i int, store string) destination.Message {
	m := sinktest.Message(d, i)
	m.StoreID = store
	return m
}

func send(t *testing.T, s *Sink, d destination.Destination, m destination.Message) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	return s.Send(ctx, d, m)
}

func wantClass(t *testing.T, err error, want failures.Class) failures.Outcome {
	t.Helper()
	out := failures.Classify(err)
	if out.Class != want {
		t.Fatalf("Send() = %v, classified %s; want %s", err, out.Class, want)
	}
	return out
}

func TestLabelledTopicGetsEventsInOrderWithTheContractsBodyAndAttributes(t *testing.T) {
	p := newPeer(t)
	d := topicDest()
	p.createTopic(t, d, ownLabel)
	s := newSink(t, p, newClock())

	sent := []destination.Message{event(d, 0, "store-7"), event(d, 1, ""), event(d, 2, "store-9")}
	sent[1].SchemaVersion = "2.1.0"
	for _, m := range sent {
		if err := send(t, s, d, m); err != nil {
			t.Fatalf("Send(%s) = %v", m.EventID, err)
		}
	}

	got := p.received(t, d)
	if len(got) != len(sent) {
		t.Fatalf("%d messages on the topic, want %d", len(got), len(sent))
	}
	for i, m := range sent {
		var want map[string]any
		json.Unmarshal(m.Body(), &want)
		if !reflect.DeepEqual(got[i].Body, want) {
			t.Errorf("message %d data =\n  %v\nwant the body\n  %v", i, got[i].Body, want)
		}
		wantAttrs := map[string]string{"event_type": "job.completed", "event_id": m.EventID, "event_version": m.SchemaVersion}
		if m.StoreID != "" {
			wantAttrs["store_id"] = m.StoreID
		}
		if !reflect.DeepEqual(got[i].Attributes, wantAttrs) {
			t.Errorf("message %d attributes = %v, want exactly %v", i, got[i].Attributes, wantAttrs)
		}
	}
	if _, passed, ok := s.Checker().Result(d); !ok || !passed {
		t.Errorf("the checker has no passed check for a topic we published to")
	}
}

func TestTopicNotProvenOursIsRejectedAndNothingIsPublished(t *testing.T) {
	labelCmd := "run gcloud pubsub topics update relay-events --project=acme-prod --update-labels=mercamap-account=acct_123"
	tests := []struct {
		name    string
		labels  map[string]string
		getFail codes.Code
		says    string
	}{
		{"labelled for another account", map[string]string{"mercamap-account": "acct_999"}, codes.OK,
			"topic projects/acme-prod/topics/relay-events is labelled mercamap-account=acct_999, not acct_123: " + labelCmd},
		{"unlabelled", map[string]string{"env": "prod"}, codes.OK,
			"topic projects/acme-prod/topics/relay-events has no mercamap-account label: " + labelCmd},
		{"unreadable", ownLabel, codes.PermissionDenied,
			"cannot read topic projects/acme-prod/topics/relay-events (PERMISSION_DENIED): grant roles/pubsub.viewer on the topic to relay@relay-prod.iam.gserviceaccount.com: " +
				"run gcloud pubsub topics add-iam-policy-binding relay-events --project=acme-prod --member=serviceAccount:relay@relay-prod.iam.gserviceaccount.com --role=roles/pubsub.viewer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPeer(t)
			d := topicDest()
			p.createTopic(t, d, tt.labels)
			if tt.getFail != codes.OK {
				p.faults.fail("GetTopic", tt.getFail)
			}
			s := newSink(t, p, newClock())

			out := wantClass(t, send(t, s, d, event(d, 0, "store-1")), failures.Rejected)
			if out.Message != tt.says {
				t.Errorf("card sentence =\n  %s\nwant\n  %s", out.Message, tt.says)
			}
			if n := p.faults.count("Publish"); n != 0 || len(p.srv.Messages()) != 0 {
				t.Errorf("%d publish calls and %d messages reached Pub/Sub, want none", n, len(p.srv.Messages()))
			}
		})
	}
}

func TestTopicRelabelledAfterPassingStopsPublishingAtTheNextRecheck(t *testing.T) {
	p := newPeer(t)
	d := topicDest()
	p.createTopic(t, d, ownLabel)
	clk := newClock()
	s := newSink(t, p, clk)

	if err := send(t, s, d, event(d, 0, "")); err != nil {
		t.Fatal(err)
	}
	p.relabel(t, d, map[string]string{"mercamap-account": "acct_999"})
	// Within the interval the pass holds: the contract reads the label every 15 minutes,
	// not before each event.
	clk.Add(30 * time.Second)
	if err := send(t, s, d, event(d, 1, "")); err != nil {
		t.Fatalf("Send() within the recheck interval = %v", err)
	}
	clk.Add(30 * time.Second)
	out := wantClass(t, send(t, s, d, event(d, 2, "")), failures.Rejected)
	if !strings.Contains(out.Message, "is labelled mercamap-account=acct_999, not acct_123") {
		t.Errorf("card sentence = %q, want it to name the label found", out.Message)
	}
	if got := len(p.received(t, d)); got != 2 {
		t.Errorf("%d messages on the topic, want the 2 sent before the recheck", got)
	}
	// Relabelled back, the next attempt reads the topic again and publishes.
	p.relabel(t, d, ownLabel)
	if err := send(t, s, d, event(d, 3, "")); err != nil {
		t.Errorf("Send() after the label was fixed = %v", err)
	}
}

func TestBusThatDidNotTakeTheEventIsNotTakenInOneAttemptAndDeliveredLater(t *testing.T) {
	for _, code := range []codes.Code{codes.Unavailable, codes.ResourceExhausted, codes.Internal,
		codes.DeadlineExceeded, codes.Aborted, codes.Unknown, codes.Unauthenticated} {
		t.Run(code.String(), func(t *testing.T) {
			p := newPeer(t)
			d := topicDest()
			p.createTopic(t, d, ownLabel)
			s := newSink(t, p, newClock())
			m := event(d, 0, "store-1")

			p.faults.fail("Publish", code)
			err := send(t, s, d, m)
			wantClass(t, err, failures.NotTaken)
			if status.Code(err) != code {
				t.Errorf("Send() lost the gRPC code %s: %v", code, err)
			}
			// One attempt: had the library retried, the second call would have succeeded
			// and hidden the failure from dispatch's accounting.
			if n := p.faults.count("Publish"); n != 1 {
				t.Errorf("%d publish calls reached Pub/Sub, want 1", n)
			}
			if len(p.srv.Messages()) != 0 {
				t.Fatal("a message landed although the publish failed")
			}

			// dispatch retries the same message later; it lands, once.
			if err := send(t, s, d, m); err != nil {
				t.Fatalf("the retry failed: %v", err)
			}
			if got := p.received(t, d); len(got) != 1 || got[0].Body["event_id"] != m.EventID {
				t.Errorf("topic holds %v, want the retried event once", got)
			}
		})
	}
}

func TestPublishRefusedByTheTopicIsRejectedAndTheLabelIsReadAgain(t *testing.T) {
	tests := []struct {
		code codes.Code
		says string
	}{
		{codes.PermissionDenied, "topic projects/acme-prod/topics/relay-events refused our publish (PERMISSION_DENIED): grant roles/pubsub.publisher on the topic to relay@relay-prod.iam.gserviceaccount.com: " +
			"run gcloud pubsub topics add-iam-policy-binding relay-events --project=acme-prod --member=serviceAccount:relay@relay-prod.iam.gserviceaccount.com --role=roles/pubsub.publisher"},
		{codes.NotFound, "topic projects/acme-prod/topics/relay-events does not exist (NOT_FOUND): create it, or correct the destination's project_id and topic_id"},
	}
	for _, tt := range tests {
		t.Run(tt.code.String(), func(t *testing.T) {
			p := newPeer(t)
			d := topicDest()
			p.createTopic(t, d, ownLabel)
			s := newSink(t, p, newClock())
			if err := send(t, s, d, event(d, 0, "")); err != nil {
				t.Fatal(err)
			}

			p.faults.fail("Publish", tt.code)
			out := wantClass(t, send(t, s, d, event(d, 1, "")), failures.Rejected)
			if out.Message != tt.says {
				t.Errorf("card sentence =\n  %s\nwant\n  %s", out.Message, tt.says)
			}
			// The topic changed under us: the next event reads the label first.
			reads := p.faults.count("GetTopic")
			if err := send(t, s, d, event(d, 2, "")); err != nil {
				t.Fatalf("the next event after a rejection: %v", err)
			}
			if p.faults.count("GetTopic") != reads+1 {
				t.Error("the label was not read again after the topic refused a publish")
			}
			if got := p.received(t, d); len(got) != 2 {
				t.Errorf("%d messages on the topic, want 2 (the refused one has ended)", len(got))
			}
		})
	}
}

func TestOurOwnProjectRefusedIsNotTaken(t *testing.T) {
	// PERMISSION_DENIED because our project has the API off is ours to fix, not the
	// customer's: it must not count against the destination.
	p := newPeer(t)
	d := topicDest()
	p.createTopic(t, d, ownLabel)
	s := newSink(t, p, newClock())
	st, err := status.New(codes.PermissionDenied, "Cloud Pub/Sub API has not been used in project relay-prod").
		WithDetails(&errdetails.ErrorInfo{Reason: "SERVICE_DISABLED", Domain: "googleapis.com"})
	if err != nil {
		t.Fatal(err)
	}
	p.faults.add("GetTopic", fault{err: st.Err()})
	wantClass(t, send(t, s, d, event(d, 0, "")), failures.NotTaken)
	p.faults.add("Publish", fault{err: st.Err()})
	wantClass(t, send(t, s, d, event(d, 0, "")), failures.NotTaken)
}

func TestEventPubSubCannotTakeIsRejectedUnsent(t *testing.T) {
	p := newPeer(t)
	d := topicDest()
	p.createTopic(t, d, ownLabel)
	s := newSink(t, p, newClock())

	huge := event(d, 0, "")
	huge.Data = json.RawMessage(`"` + strings.Repeat("x", MaxRequestBytes) + `"`)
	longStore := event(d, 1, strings.Repeat("s", MaxAttributeValueBytes+1))
	badID := event(d, 2, "")
	badID.EventID = "fetcher.job.completed.\xff"

	tests := []struct {
		m    destination.Message
		says string
	}{
		{huge, "over Pub/Sub's limit of 10000000 bytes (10 MB): topic projects/acme-prod/topics/relay-events cannot take it"},
		{longStore, "the event's store_id is 1025 bytes, over Pub/Sub's limit of 1024 bytes for an attribute value"},
		{badID, "the event's event_id is not valid UTF-8"},
	}
	for _, tt := range tests {
		out := wantClass(t, send(t, s, d, tt.m), failures.Rejected)
		if !strings.Contains(out.Message, tt.says) {
			t.Errorf("card sentence = %q, want it to say %q", out.Message, tt.says)
		}
	}
	if n := p.faults.count("Publish"); n != 0 {
		t.Errorf("%d publish calls for events Pub/Sub cannot take, want none", n)
	}

	// Right at the attribute limit is fine.
	atLimit := event(d, 3, strings.Repeat("s", MaxAttributeValueBytes))
	if err := send(t, s, d, atLimit); err != nil {
		t.Errorf("Send() with a %d-byte store id = %v", MaxAttributeValueBytes, err)
	}
}

type failingTokens struct{}

func (failingTokens) Token() (*oauth2.Token, error) {
	return nil, errors.New("metadata server: no token for the service account")
}

func TestOurOwnTokenFailingIsNotTakenAndNothingIsPublished(t *testing.T) {
	p := newPeer(t)
	d := topicDest()
	p.createTopic(t, d, ownLabel)
	// Production's path (no emulator endpoint, so credentials are used), pointed at pstest.
	s := New(context.Background(), Options{Identity: ours, ClientOptions: []option.ClientOption{
		option.WithEndpoint(p.srv.Addr), option.WithTokenSource(failingTokens{}),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
	}})
	t.Cleanup(func() { s.Close() })

	out := wantClass(t, send(t, s, d, event(d, 0, "")), failures.NotTaken)
	if !strings.Contains(out.Message, "did not take the event") {
		t.Errorf("card sentence = %q", out.Message)
	}
	if len(p.srv.Messages()) != 0 {
		t.Error("a message was published without our token")
	}
}

func TestMissingApplicationDefaultCredentialsIsNotTaken(t *testing.T) {
	// Keep every credential lookup on this machine: a missing key file fails at once,
	// and a metadata-server probe would go to a closed local port.
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", t.TempDir()+"/missing.json")
	t.Setenv("GCE_METADATA_HOST", "127.0.0.1:1")
	p := newPeer(t)
	d := topicDest()
	p.createTopic(t, d, ownLabel)
	s := New(context.Background(), Options{Identity: ours, ClientOptions: []option.ClientOption{
		option.WithEndpoint(p.srv.Addr),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
	}})
	t.Cleanup(func() { s.Close() })

	out := wantClass(t, send(t, s, d, event(d, 0, "")), failures.NotTaken)
	if !strings.Contains(out.Message, "Application Default Credentials") {
		t.Errorf("card sentence = %q, want it to name Application Default Credentials", out.Message)
	}
	if p.faults.count("GetTopic")+p.faults.count("Publish") != 0 {
		t.Error("a call reached Pub/Sub without credentials")
	}
}

func TestCardSetupNamesOurServiceAccountAndTheThreeCommands(t *testing.T) {
	d := topicDest()
	setup := destination.Setup(d, ours, "")
	if setup["service_account"] != "relay@relay-prod.iam.gserviceaccount.com" {
		t.Errorf("service_account = %v", setup["service_account"])
	}
	want := []string{
		"gcloud pubsub topics add-iam-policy-binding relay-events --project=acme-prod --member=serviceAccount:relay@relay-prod.iam.gserviceaccount.com --role=roles/pubsub.publisher",
		"gcloud pubsub topics add-iam-policy-binding relay-events --project=acme-prod --member=serviceAccount:relay@relay-prod.iam.gserviceaccount.com --role=roles/pubsub.viewer",
		"gcloud pubsub topics update relay-events --project=acme-prod --update-labels=mercamap-account=acct_123",
	}
	if got := setup["commands"]; !reflect.DeepEqual(got, want) {
		t.Errorf("commands =\n  %q\nwant\n  %q", got, want)
	}

	// Following the card is enough: a topic set up with its label command passes the
	// sink's check (the label key and value are exactly what the card writes).
	p := newPeer(t)
	_, kv, _ := strings.Cut(want[2], "--update-labels=")
	k, v, _ := strings.Cut(kv, "=")
	p.createTopic(t, d, map[string]string{k: v})
	if err := send(t, newSink(t, p, newClock()), d, event(d, 0, "")); err != nil {
		t.Errorf("Send() to a topic labelled as the card says = %v", err)
	}
}
