// Package pubsub is the Google Pub/Sub sink: it checks the topic's account label, then
// publishes one event as one message (data = the body, four attributes) and waits for
// the server's ack. It never publishes to a topic that failed the label check, and never
// retries: each Send is one attempt, so every failure reaches dispatch's accounting.
package pubsub

import (
	"context"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	vkit "cloud.google.com/go/pubsub/v2/apiv1"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	gax "github.com/googleapis/gax-go/v2"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/failures"
	"github.com/mercamap/relay/internal/labelcheck"
)

// Pub/Sub's documented limits (cloud.google.com/pubsub/quotas#resource_limits). A message
// over them is refused by the service every time, so it is rejected here, unsent.
const (
	MaxRequestBytes        = 10_000_000 // one publish request, the body and attributes included
	MaxAttributeValueBytes = 1024
	MaxOrderingKeyBytes    = 1024 // cloud.google.com/pubsub/docs/ordering: "up to 1 KB"
)

// Options configure a Sink.
type Options struct {
	// Identity: the label key <name>-account and our service account, named in the
	// sentences that tell a customer which grant or label is missing.
	Identity destination.Identity
	// Endpoint is gcp.pubsub_endpoint: host:port of an emulator, spoken to in plain gRPC
	// without credentials. Empty means Google's endpoint, signed in with Application
	// Default Credentials.
	Endpoint string
	// ClientOptions are added last (tests; an explicit credentials file).
	ClientOptions []option.ClientOption
	// Recheck is how long a passed label check holds (labelcheck.DefaultRecheck when
	// zero); Now is the checker's clock (time.Now when nil).
	Recheck time.Duration
	Now     func() time.Time
}

// Sink publishes to Pub/Sub topics in any project. One admin client serves them all:
// publish and GetTopic take the topic's full name, so the client is not tied to a project.
// It is safe for concurrent use; dispatch keeps one Send in flight per destination.
//
// It publishes with the admin client's unary Publish, not pubsub.Publisher: a Publisher
// batches (10 ms by default), sends on a context detached from the caller's (a Send that
// gave up could leave its RPC in flight beside the next one), and wraps the retry policy
// in its own. One unary call is one attempt, bounded by Send's ctx.
type Sink struct {
	base    context.Context
	opts    []option.ClientOption
	id      destination.Identity
	checker *labelcheck.Checker

	mu     sync.Mutex
	client *vkit.TopicAdminClient
}

// New returns a Sink. It connects lazily, on the first Send: a missing credential then
// shows on that destination's card as "did not take the event" and is retried, instead of
// stopping the relay for every other destination. ctx is kept (without its cancellation)
// for signing in.
func New(ctx context.Context, o Options) *Sink {
	var opts []option.ClientOption
	if o.Endpoint != "" {
		opts = append(opts,
			option.WithEndpoint(o.Endpoint),
			option.WithoutAuthentication(),
			option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
			option.WithTelemetryDisabled(),
		)
	}
	s := &Sink{
		base: context.WithoutCancel(ctx),
		opts: append(opts, o.ClientOptions...),
		id:   o.Identity,
	}
	s.checker = labelcheck.New(labelcheck.Options{
		Topics:   labelcheck.TopicGetterFunc(s.getTopic),
		Identity: o.Identity,
		Recheck:  o.Recheck,
		Now:      o.Now,
	})
	return s
}

// Checker is the sink's label checker: its Result is what the card shows as the last check.
func (s *Sink) Checker() *labelcheck.Checker { return s.checker }

// Send checks d's topic label, then publishes m once and waits for the server's ack.
// A nil error means Pub/Sub acknowledged the message.
func (s *Sink) Send(ctx context.Context, d destination.Destination, m destination.Message) error {
	// The label proves the topic is this account's; without it nothing is published.
	if err := s.checker.Check(ctx, d); err != nil {
		return err
	}
	req, err := publishRequest(d, m)
	if err != nil {
		return err
	}
	c, err := s.admin()
	if err != nil {
		return err
	}
	// The library retries UNAVAILABLE, RESOURCE_EXHAUSTED… for up to a minute, which
	// would hide them from dispatch; WithRetry(nil) makes this call one attempt.
	// The unary call returns only once the server has stored (acked) the message.
	if _, err := c.Publish(ctx, req, gax.WithRetry(nil)); err != nil {
		return s.publishFailed(d, err)
	}
	return nil
}

// Close closes the client, if one was opened.
func (s *Sink) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client == nil {
		return nil
	}
	err := s.client.Close()
	s.client = nil
	return err
}

// publishRequest maps m onto one Pub/Sub message: data = the body; attributes
// event_type, event_id, event_version (ce-schemaversion) and store_id when the event
// names a store; the ordering key is the store id (the account id for an event without
// one). It refuses what Pub/Sub would always refuse.
func publishRequest(d destination.Destination, m destination.Message) (*pubsubpb.PublishRequest, error) {
	attrs := map[string]string{
		"event_type":    m.Type,
		"event_id":      m.EventID,
		"event_version": m.SchemaVersion,
	}
	if m.StoreID != "" {
		attrs["store_id"] = m.StoreID
	}
	for _, k := range []string{"event_type", "event_id", "event_version", "store_id"} {
		v, ok := attrs[k]
		switch {
		case !ok:
		case len(v) > MaxAttributeValueBytes:
			return nil, failures.NewRejected(fmt.Sprintf("the event's %s is %d bytes, over Pub/Sub's limit of %d bytes for an attribute value: topic %s cannot take it",
				k, len(v), MaxAttributeValueBytes, d.TopicName()), nil)
		case !utf8.ValidString(v):
			// gRPC would fail to encode it with INTERNAL, which reads as "try again" forever.
			return nil, failures.NewRejected(fmt.Sprintf("the event's %s is not valid UTF-8, which Pub/Sub attributes must be: topic %s cannot take it",
				k, d.TopicName()), nil)
		}
	}
	// One store's events share an ordering key, as Kinesis uses the store id as the
	// partition key: a subscription with message ordering on receives them in the order
	// the relay published them (one at a time, each acked before the next). Publish is
	// the plain RPC, so a failed publish pauses nothing: the retry is sent as it is.
	key := m.StoreID
	if key == "" {
		key = m.Account
	}
	if len(key) > MaxOrderingKeyBytes {
		return nil, failures.NewRejected(fmt.Sprintf("the event's store id is %d bytes, over Pub/Sub's limit of %d bytes for an ordering key: topic %s cannot take it",
			len(key), MaxOrderingKeyBytes, d.TopicName()), nil)
	}
	req := &pubsubpb.PublishRequest{
		Topic:    d.TopicName(),
		Messages: []*pubsubpb.PubsubMessage{{Data: m.Body(), Attributes: attrs, OrderingKey: key}},
	}
	if n := proto.Size(req); n > MaxRequestBytes {
		return nil, failures.NewRejected(fmt.Sprintf("the event is %d bytes as a publish request, over Pub/Sub's limit of %d bytes (10 MB): topic %s cannot take it",
			n, MaxRequestBytes, d.TopicName()), nil)
	}
	return req, nil
}

// publishFailed words the two refusals the customer fixes on the topic itself. The class
// is failures.Classify's (UNAVAILABLE, RESOURCE_EXHAUSTED… are not taken; a
// PERMISSION_DENIED about our own project is not taken either); other codes keep its words.
func (s *Sink) publishFailed(d destination.Destination, err error) error {
	topic := d.TopicName()
	if failures.Classify(err).Class == failures.Rejected {
		switch status.Code(err) {
		case codes.PermissionDenied:
			// The grant or the topic changed: read the label again before the next publish.
			s.checker.Forget(d)
			return failures.NewRejected(fmt.Sprintf("topic %s refused our publish (PERMISSION_DENIED): grant roles/pubsub.publisher on the topic to %s: run %s",
				topic, s.serviceAccount(), destination.PubSubCommands(d, s.id)[0]), err)
		case codes.NotFound:
			s.checker.Forget(d)
			return failures.NewRejected(fmt.Sprintf("topic %s does not exist (NOT_FOUND): create it, or correct the destination's project_id and topic_id",
				topic), err)
		}
	}
	return fmt.Errorf("publish to topic %s: %w", topic, err)
}

func (s *Sink) serviceAccount() string {
	if s.id.GCPServiceAccount == "" {
		return "our service account"
	}
	return s.id.GCPServiceAccount
}

// getTopic is the label checker's read, over the sink's own client.
func (s *Sink) getTopic(ctx context.Context, name string) (map[string]string, error) {
	c, err := s.admin()
	if err != nil {
		return nil, err
	}
	return labelcheck.Admin{Client: c}.GetTopic(ctx, name)
}

// admin opens the client on first use. A failure is not kept: the next Send tries again.
func (s *Sink) admin() (*vkit.TopicAdminClient, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client != nil {
		return s.client, nil
	}
	c, err := vkit.NewTopicAdminClient(s.base, s.opts...)
	if err != nil {
		// Our own sign-in failed (no Application Default Credentials, an unreadable key
		// file): nothing the customer did, so not taken.
		return nil, failures.NewNotTaken("did not take the event: our Google Cloud credentials could not be loaded (Application Default Credentials); retrying with backoff", err)
	}
	s.client = c
	return c, nil
}

// Check reads the topic's ownership label now, for "send a test": the whole path,
// not a cached pass.
func (s *Sink) Check(ctx context.Context, d destination.Destination) error {
	s.checker.Forget(d)
	return s.checker.Check(ctx, d)
}
