package labelcheck

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	vkit "cloud.google.com/go/pubsub/v2/apiv1"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/failures"
)

var ours = destination.Identity{Name: "mercamap", GCPServiceAccount: "relay@relay-prod.iam.gserviceaccount.com"}

func topicDest() destination.Destination {
	return destination.Destination{ID: "orders-topic", Account: "acct_123", Connector: destination.PubSub, ProjectID: "acme-prod", TopicID: "relay-events"}
}

// faults fails the next calls of a method with chosen codes, then lets calls through:
// pstest's own WithErrorInjection fails every call for the server's whole life.
type faults struct {
	mu    sync.Mutex
	next  map[string][]codes.Code
	calls map[string]int
}

func (f *faults) fail(method string, c codes.Code) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next[method] = append(f.next[method], c)
}

func (f *faults) count(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[method]
}

type reactor struct {
	f      *faults
	method string
}

func (r reactor) React(any) (bool, any, error) {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	r.f.calls[r.method]++
	if q := r.f.next[r.method]; len(q) > 0 {
		r.f.next[r.method] = q[1:]
		return true, nil, status.Error(q[0], "injected "+q[0].String())
	}
	return false, nil, nil
}

type peer struct {
	admin  *vkit.TopicAdminClient
	faults *faults
}

// newPeer starts pstest in-process and a real admin client talking to it.
func newPeer(t *testing.T) peer {
	t.Helper()
	f := &faults{next: map[string][]codes.Code{}, calls: map[string]int{}}
	srv := pstest.NewServer(pstest.ServerReactorOption{FuncName: "GetTopic", Reactor: reactor{f, "GetTopic"}})
	t.Cleanup(func() { srv.Close() })
	admin, err := vkit.NewTopicAdminClient(context.Background(),
		option.WithEndpoint(srv.Addr), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	return peer{admin, f}
}

func (p peer) createTopic(t *testing.T, d destination.Destination, labels map[string]string) {
	t.Helper()
	if _, err := p.admin.CreateTopic(context.Background(), &pubsubpb.Topic{Name: d.TopicName(), Labels: labels}); err != nil {
		t.Fatal(err)
	}
}

func (p peer) relabel(t *testing.T, d destination.Destination, labels map[string]string) {
	t.Helper()
	_, err := p.admin.UpdateTopic(context.Background(), &pubsubpb.UpdateTopicRequest{
		Topic:      &pubsubpb.Topic{Name: d.TopicName(), Labels: labels},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"labels"}},
	})
	if err != nil {
		t.Fatal(err)
	}
}

// clock is a test clock the checker reads; tests move it instead of sleeping.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func newChecker(p peer, clk *clock) *Checker {
	return New(Options{Topics: Admin{Client: p.admin}, Identity: ours, Recheck: time.Minute, Now: clk.Now})
}

func wantRejected(t *testing.T, err error, sentence string) {
	t.Helper()
	out := failures.Classify(err)
	if out.Class != failures.Rejected {
		t.Fatalf("Check() = %v, classified %s; want rejected", err, out.Class)
	}
	if out.Message != sentence {
		t.Errorf("card sentence =\n  %s\nwant\n  %s", out.Message, sentence)
	}
}

const labelCmd = "gcloud pubsub topics update relay-events --project=acme-prod --update-labels=mercamap-account=acct_123"

func TestTopicLabelledForTheAccountPassesAndIsNotReadAgainUntilTheRecheck(t *testing.T) {
	p := newPeer(t)
	d := topicDest()
	p.createTopic(t, d, map[string]string{"mercamap-account": "acct_123", "team": "orders"})
	clk := &clock{now: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
	c := newChecker(p, clk)
	ctx := context.Background()

	for range 3 {
		if err := c.Check(ctx, d); err != nil {
			t.Fatalf("Check() = %v, want a pass", err)
		}
	}
	if n := p.faults.count("GetTopic"); n != 1 {
		t.Errorf("GetTopic called %d times within the recheck interval, want 1", n)
	}
	if at, passed, ok := c.Result(d); !ok || !passed || !at.Equal(clk.Now()) {
		t.Errorf("Result() = %v, %v, %v; want the check's time and a pass", at, passed, ok)
	}

	clk.Add(time.Minute)
	if err := c.Check(ctx, d); err != nil {
		t.Fatalf("Check() after the interval = %v", err)
	}
	if n := p.faults.count("GetTopic"); n != 2 {
		t.Errorf("GetTopic called %d times after the recheck interval, want 2", n)
	}
}

func TestTopicLabelledForAnotherAccountIsRejected(t *testing.T) {
	p := newPeer(t)
	d := topicDest()
	p.createTopic(t, d, map[string]string{"mercamap-account": "acct_999"})
	err := newChecker(p, &clock{}).Check(context.Background(), d)
	wantRejected(t, err, "topic projects/acme-prod/topics/relay-events is labelled mercamap-account=acct_999, not acct_123: run "+labelCmd)
}

func TestUnlabelledTopicIsRejected(t *testing.T) {
	p := newPeer(t)
	d := topicDest()
	p.createTopic(t, d, map[string]string{"other-account": "acct_123"})
	err := newChecker(p, &clock{}).Check(context.Background(), d)
	wantRejected(t, err, "topic projects/acme-prod/topics/relay-events has no mercamap-account label: run "+labelCmd)
}

func TestRejectionCommandIsTheCardsCommand(t *testing.T) {
	// The sentence must tell the customer to run exactly what the card's setup shows.
	cmds := destination.Setup(topicDest(), ours, "")["commands"].([]string)
	if cmds[2] != labelCmd {
		t.Fatalf("the card's label command is %q; the rejection says %q", cmds[2], labelCmd)
	}
}

func TestUnreadableTopicIsRejectedWithTheViewerGrant(t *testing.T) {
	p := newPeer(t)
	d := topicDest()
	p.createTopic(t, d, map[string]string{"mercamap-account": "acct_123"})
	p.faults.fail("GetTopic", codes.PermissionDenied)
	c := newChecker(p, &clock{})
	err := c.Check(context.Background(), d)
	wantRejected(t, err, "cannot read topic projects/acme-prod/topics/relay-events (PERMISSION_DENIED): grant roles/pubsub.viewer on the topic to relay@relay-prod.iam.gserviceaccount.com: "+
		"run gcloud pubsub topics add-iam-policy-binding relay-events --project=acme-prod --member=serviceAccount:relay@relay-prod.iam.gserviceaccount.com --role=roles/pubsub.viewer")
	if _, passed, ok := c.Result(d); !ok || passed {
		t.Errorf("Result() after a rejection = passed %v, known %v; want a known failure", passed, ok)
	}

	// Once the grant is fixed, the next attempt reads the topic again and passes:
	// a failure is never cached.
	if err := c.Check(context.Background(), d); err != nil {
		t.Errorf("Check() after the grant = %v, want a pass", err)
	}
}

func TestMissingTopicIsRejected(t *testing.T) {
	p := newPeer(t)
	err := newChecker(p, &clock{}).Check(context.Background(), topicDest())
	wantRejected(t, err, "topic projects/acme-prod/topics/relay-events does not exist (NOT_FOUND): create it, or correct the destination's project_id and topic_id")
}

func TestTopicRelabelledAfterPassingIsRejectedAtTheNextRecheck(t *testing.T) {
	p := newPeer(t)
	d := topicDest()
	p.createTopic(t, d, map[string]string{"mercamap-account": "acct_123"})
	clk := &clock{now: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
	c := newChecker(p, clk)
	ctx := context.Background()
	if err := c.Check(ctx, d); err != nil {
		t.Fatal(err)
	}

	p.relabel(t, d, map[string]string{"mercamap-account": "acct_999"})
	clk.Add(59 * time.Second)
	if err := c.Check(ctx, d); err != nil {
		t.Fatalf("Check() before the recheck = %v; a pass holds for the interval", err)
	}
	clk.Add(time.Second)
	wantRejected(t, c.Check(ctx, d), "topic projects/acme-prod/topics/relay-events is labelled mercamap-account=acct_999, not acct_123: run "+labelCmd)
	// And it stays rejected: the failure was not remembered as a pass.
	if err := c.Check(ctx, d); failures.Classify(err).Class != failures.Rejected {
		t.Errorf("Check() right after a failed recheck = %v, want rejected again", err)
	}
}

func TestTopicThatDidNotAnswerIsNotTakenAndNotJudged(t *testing.T) {
	for _, code := range []codes.Code{codes.Unavailable, codes.ResourceExhausted, codes.DeadlineExceeded, codes.Internal} {
		t.Run(code.String(), func(t *testing.T) {
			p := newPeer(t)
			d := topicDest()
			p.createTopic(t, d, map[string]string{"mercamap-account": "acct_123"})
			p.faults.fail("GetTopic", code)
			c := newChecker(p, &clock{})

			err := c.Check(context.Background(), d)
			if got := failures.Classify(err).Class; got != failures.NotTaken {
				t.Fatalf("Check() = %v, classified %s; want not taken", err, got)
			}
			if status.Code(err) != code {
				t.Errorf("Check() lost the gRPC code: %v", err)
			}
			// One attempt: the library's own retries would have hidden the failure.
			if n := p.faults.count("GetTopic"); n != 1 {
				t.Errorf("GetTopic called %d times, want 1 (no library retries)", n)
			}
			if err := c.Check(context.Background(), d); err != nil {
				t.Errorf("Check() once the topic answers = %v, want a pass", err)
			}
		})
	}
}

func TestPassIsPerDestinationTopicAndAccount(t *testing.T) {
	p := newPeer(t)
	d := topicDest()
	p.createTopic(t, d, map[string]string{"mercamap-account": "acct_123"})
	c := newChecker(p, &clock{})
	ctx := context.Background()
	if err := c.Check(ctx, d); err != nil {
		t.Fatal(err)
	}
	// Same id and topic, but now configured for another account: the pass proved
	// nothing about it.
	moved := d
	moved.Account = "acct_999"
	if err := c.Check(ctx, moved); failures.Classify(err).Class != failures.Rejected {
		t.Errorf("Check() for another account on a passed topic = %v, want rejected", err)
	}
	c.Forget(d)
	if _, _, ok := c.Result(d); ok {
		t.Error("Result() after Forget still knows the topic")
	}
}

func TestLabelKeyFollowsIdentityName(t *testing.T) {
	p := newPeer(t)
	d := topicDest()
	p.createTopic(t, d, map[string]string{"mercamap-account": "acct_999", "acme-account": "acct_123"})
	c := New(Options{Topics: Admin{Client: p.admin}, Identity: destination.Identity{Name: "acme"}})
	if c.LabelKey() != "acme-account" {
		t.Errorf("LabelKey() = %q", c.LabelKey())
	}
	if err := c.Check(context.Background(), d); err != nil {
		t.Errorf("Check() with identity.name acme = %v, want a pass on acme-account", err)
	}
	if !strings.HasPrefix(DefaultRecheck.String(), "15m") {
		t.Errorf("DefaultRecheck = %v, want the contract's 15 minutes", DefaultRecheck)
	}
}
