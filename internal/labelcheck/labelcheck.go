// Package labelcheck owns the Pub/Sub ownership check: before we publish, a topic must
// carry the label <identity.name>-account naming the destination's account, and a topic
// that passed is read again after a while. It only reads topics: it never publishes,
// never changes a label, and never lets a failed or stale check count as passed.
package labelcheck

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/failures"
)

// DefaultRecheck is how long a passed check holds before the topic is read again
// (the contract's 15 minutes).
const DefaultRecheck = 15 * time.Minute

// TopicGetter reads a topic's labels by its full name, projects/P/topics/T. Its errors
// keep their gRPC status, so the checker can tell "cannot read" from "did not answer".
type TopicGetter interface {
	GetTopic(ctx context.Context, name string) (labels map[string]string, err error)
}

// TopicGetterFunc adapts a function to TopicGetter.
type TopicGetterFunc func(ctx context.Context, name string) (map[string]string, error)

// GetTopic calls f.
func (f TopicGetterFunc) GetTopic(ctx context.Context, name string) (map[string]string, error) {
	return f(ctx, name)
}

// Options configure a Checker.
type Options struct {
	Topics TopicGetter
	// Identity gives the label key (<name>-account) and the service account the
	// rejection sentences tell the customer to grant.
	Identity destination.Identity
	Recheck  time.Duration    // DefaultRecheck when zero
	Now      func() time.Time // time.Now when nil; tests move it forward
}

// Checker checks topic labels and remembers, per destination, when a topic last passed.
// It is safe for concurrent use by the workers of different destinations.
type Checker struct {
	topics  TopicGetter
	id      destination.Identity
	key     string
	recheck time.Duration
	now     func() time.Time

	mu   sync.Mutex
	last map[string]result
}

type result struct {
	at     time.Time
	passed bool
}

// New returns a Checker; o.Topics is required.
func New(o Options) *Checker {
	if o.Topics == nil {
		panic("labelcheck: Options.Topics is required")
	}
	if o.Recheck <= 0 {
		o.Recheck = DefaultRecheck
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Checker{
		topics:  o.Topics,
		id:      o.Identity,
		key:     destination.LabelKey(o.Identity.NameOrDefault()),
		recheck: o.Recheck,
		now:     o.Now,
		last:    map[string]result{},
	}
}

// LabelKey is the label the checker reads: <identity.name>-account.
func (c *Checker) LabelKey() string { return c.key }

// cacheKey ties a passed check to everything it proved: this destination, this topic,
// this account. Redefining any of them means reading the topic again.
func cacheKey(d destination.Destination) string {
	return d.ID + "\x00" + d.TopicName() + "\x00" + d.Account
}

// Check returns nil when d's topic is labelled <name>-account=<d.Account>, reading the
// topic unless it passed less than Recheck ago. A topic labelled for another account,
// unlabelled, missing or unreadable gives a failures.Error of class Rejected whose
// sentence names the topic, what was found and the command that fixes it. A read that
// did not get an answer (UNAVAILABLE, a timeout, our own token…) is returned as it is,
// for failures.Classify to call not taken: the topic was not judged, so nothing counts.
func (c *Checker) Check(ctx context.Context, d destination.Destination) error {
	k := cacheKey(d)
	c.mu.Lock()
	r, ok := c.last[k]
	c.mu.Unlock()
	if ok && r.passed && c.now().Before(r.at.Add(c.recheck)) {
		return nil
	}

	labels, err := c.topics.GetTopic(ctx, d.TopicName())
	at := c.now()
	if err == nil {
		err = c.judge(d, labels)
	} else {
		err = c.unreadable(d, err)
	}
	c.mu.Lock()
	// Only a pass is ever reused; a failure is stored for Result and read again next time.
	c.last[k] = result{at: at, passed: err == nil}
	c.mu.Unlock()
	return err
}

// Result says when d's topic was last read and whether it passed then; ok is false
// when it has not been read since the process started (or since Forget).
func (c *Checker) Result(d destination.Destination) (checkedAt time.Time, passed, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.last[cacheKey(d)]
	return r.at, r.passed, ok
}

// Forget drops what is known about d's topic, so the next Check reads it again. The
// sink calls it when a publish says the topic is gone or closed to us.
func (c *Checker) Forget(d destination.Destination) {
	c.mu.Lock()
	delete(c.last, cacheKey(d))
	c.mu.Unlock()
}

func (c *Checker) judge(d destination.Destination, labels map[string]string) error {
	topic := d.TopicName()
	got, has := labels[c.key]
	switch {
	case !has:
		return failures.NewRejected(fmt.Sprintf("topic %s has no %s label: run %s",
			topic, c.key, c.labelCommand(d)), nil)
	case got != d.Account:
		return failures.NewRejected(fmt.Sprintf("topic %s is labelled %s=%s, not %s: run %s",
			topic, c.key, got, d.Account, c.labelCommand(d)), nil)
	}
	return nil
}

// unreadable sorts a failed read. failures.Classify is the one place that knows which
// codes mean "did not answer" (UNAVAILABLE, our own token or project refused…): those
// are returned untouched, as not taken. A refusal is the customer's to fix: it rejects,
// with a sentence that says what to grant or correct.
func (c *Checker) unreadable(d destination.Destination, err error) error {
	topic := d.TopicName()
	if failures.Classify(err).Class != failures.Rejected {
		return fmt.Errorf("read topic %s: %w", topic, err)
	}
	switch status.Code(err) {
	case codes.PermissionDenied:
		return failures.NewRejected(fmt.Sprintf("cannot read topic %s (PERMISSION_DENIED): grant roles/pubsub.viewer on the topic to %s: run %s",
			topic, c.serviceAccount(), c.viewerCommand(d)), err)
	case codes.NotFound:
		return failures.NewRejected(fmt.Sprintf("topic %s does not exist (NOT_FOUND): create it, or correct the destination's project_id and topic_id",
			topic), err)
	}
	return failures.NewRejected(fmt.Sprintf("cannot read topic %s (%s): its %s label cannot be checked, so nothing is published to it",
		topic, codeName(err), c.key), err)
}

func (c *Checker) serviceAccount() string {
	if c.id.GCPServiceAccount == "" {
		return "our service account"
	}
	return c.id.GCPServiceAccount
}

// The card's own commands (destination.PubSubCommands: publisher grant, viewer grant,
// label), so a rejection says exactly what the card's setup says.
func (c *Checker) viewerCommand(d destination.Destination) string {
	return destination.PubSubCommands(d, c.id)[1]
}

func (c *Checker) labelCommand(d destination.Destination) string {
	return destination.PubSubCommands(d, c.id)[2]
}

// codeName is err's gRPC code as the API documents it (PERMISSION_DENIED).
func codeName(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return "no gRPC code"
	}
	if n, ok := failures.GRPCName(st.Code()); ok {
		return n
	}
	return st.Code().String()
}
