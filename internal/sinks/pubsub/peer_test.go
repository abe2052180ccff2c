package pubsub

import (
	"context"
	"encoding/json"
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
	"github.com/mercamap/relay/internal/sinks/sinktest"
)

var ours = destination.Identity{Name: "mercamap", GCPServiceAccount: "relay@relay-prod.iam.gserviceaccount.com"}

func topicDest() destination.Destination {
	return destination.Destination{ID: "orders-topic", Account: "acct_123", Connector: destination.PubSub, ProjectID: "acme-prod", TopicID: "relay-events"}
}

var ownLabel = map[string]string{"mercamap-account": "acct_123"}

// fault is what the server answers one call with instead of doing it: an error, or
// (for GetTopic) a topic with other labels.
type fault struct {
	err   error
	topic *pubsubpb.Topic
}

// faults answers the next calls of a method with queued faults, then lets calls through
// to pstest again (pstest's WithErrorInjection fails every call, forever). It counts the
// calls that reached the server, so a test sees whether the client retried.
type faults struct {
	mu    sync.Mutex
	next  map[string][]fault
	calls map[string]int
}

func (f *faults) add(method string, x fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next[method] = append(f.next[method], x)
}

func (f *faults) fail(method string, c codes.Code) {
	f.add(method, fault{err: status.Error(c, "injected "+c.String())})
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
	q := r.f.next[r.method]
	if len(q) == 0 {
		return false, nil, nil
	}
	r.f.next[r.method] = q[1:]
	if q[0].topic != nil {
		return true, q[0].topic, nil
	}
	return true, nil, q[0].err
}

// peer is pstest in-process, an admin client the test arranges topics with, and the
// faults it can inject.
type peer struct {
	srv    *pstest.Server
	admin  *vkit.TopicAdminClient
	faults *faults
}

func newPeer(t testing.TB) *peer {
	t.Helper()
	f := &faults{next: map[string][]fault{}, calls: map[string]int{}}
	srv := pstest.NewServer(
		pstest.ServerReactorOption{FuncName: "GetTopic", Reactor: reactor{f, "GetTopic"}},
		pstest.ServerReactorOption{FuncName: "Publish", Reactor: reactor{f, "Publish"}},
	)
	t.Cleanup(func() { srv.Close() })
	admin, err := vkit.NewTopicAdminClient(context.Background(),
		option.WithEndpoint(srv.Addr), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	return &peer{srv: srv, admin: admin, faults: f}
}

func (p *peer) createTopic(t testing.TB, d destination.Destination, labels map[string]string) {
	t.Helper()
	if _, err := p.admin.CreateTopic(context.Background(), &pubsubpb.Topic{Name: d.TopicName(), Labels: labels}); err != nil {
		t.Fatal(err)
	}
}

func (p *peer) relabel(t *testing.T, d destination.Destination, labels map[string]string) {
	t.Helper()
	_, err := p.admin.UpdateTopic(context.Background(), &pubsubpb.UpdateTopicRequest{
		Topic:      &pubsubpb.Topic{Name: d.TopicName(), Labels: labels},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"labels"}},
	})
	if err != nil {
		t.Fatal(err)
	}
}

// received is what a subscriber of d's topic would read, in publish order. pstest keeps
// a message once its Publish returned, so there is nothing to wait for.
func (p *peer) received(t *testing.T, d destination.Destination) []sinktest.Received {
	t.Helper()
	var out []sinktest.Received
	for _, m := range p.srv.Messages() {
		if m.Topic != d.TopicName() {
			continue
		}
		var body map[string]any
		if err := json.Unmarshal(m.Data, &body); err != nil {
			t.Fatalf("message %s: data is not a JSON object: %v: %s", m.ID, err, m.Data)
		}
		out = append(out, sinktest.Received{Body: body, Attributes: m.Attributes, PartitionKey: m.OrderingKey})
	}
	return out
}

// clock is the label checker's clock; tests move it instead of sleeping.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// newSink builds the sink the way cmd does for gcp.pubsub_endpoint, against p.
func newSink(t *testing.T, p *peer, clk *clock) *Sink {
	t.Helper()
	s := New(context.Background(), Options{Identity: ours, Endpoint: p.srv.Addr, Recheck: time.Minute, Now: clk.Now})
	t.Cleanup(func() { s.Close() })
	return s
}
