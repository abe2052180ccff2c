// Package assume owns our side of a customer's IAM role: the wrong-ExternalId probe
// before every session, the session scoped to one destination's one write, the
// per-destination cache of that session, and the budget of STS calls each destination
// and account may spend on our one principal. It never uses credentials the probe was
// handed, never retries on its own, and keeps keys in memory only.
package assume

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/mercamap/relay/internal/awspool"
	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/failures"
	"github.com/mercamap/relay/internal/ratelimit"
)

// SessionDuration is the shortest session STS hands out; the contract asks for it.
const SessionDuration = 900 * time.Second

// DefaultRenewBefore is how long before expiry a cached session is replaced.
const DefaultRenewBefore = 2 * time.Minute

// Options configures an Assumer.
type Options struct {
	STS          *sts.Client // signs as our own identity (the default chain in production)
	IdentityName string      // identity.name: sessions are named <name>-<account>
	PrincipalARN string      // our principal, named in the sentence when a role refuses us; optional
	Now          func() time.Time
	RenewBefore  time.Duration // default DefaultRenewBefore
	// Budget caps the STS calls (probes and sessions) of each destination and each
	// account (aws.sts_budget); zero: config.DefaultSTSBudget.
	Budget config.STSBudget
	// Limiter keeps the budget's buckets: store.Limiter shares them between replicas;
	// nil keeps them in this process, on Now.
	Limiter ratelimit.Limiter
	// Backoff is the wait before a destination's next session after a refused one
	// (aws.session_backoff); zero: 1 s doubling up to 2 min.
	Backoff config.Backoff
	Metrics *Metrics // nil: counted, not registered
	// Tracer, when set, gets a span for each STS setup (probe and session).
	Tracer Tracer
}

// Tracer starts the span of one STS setup (internal/tracing implements it); end takes
// the stage it ended at ("probe" or "session") and that stage's error (nil: issued).
type Tracer interface {
	StartSetup(d destination.Destination, probe bool) (end func(stage string, err error))
}

// Assumer hands out each destination's session credentials, probing before each new one.
// It is safe for concurrent use.
type Assumer struct {
	o        Options
	mu       sync.Mutex
	sessions map[string]*cached // by destination id
}

// cached is one destination's session. Its mutex is held while probing and assuming, so
// concurrent callers for one destination wait for one session instead of making two.
type cached struct {
	mu      sync.Mutex
	key     [sha256.Size]byte // what the session was made for: a hash of role, ExternalId, session policy
	creds   aws.Credentials
	renewAt time.Time // when creds are replaced: RenewBefore ahead of expiry
	// retryAt is when a new session may be asked for after STS refused one with the real
	// ExternalId; backoff is the wait the next refusal sets. refusal is the sentence of
	// the last refusal (that one, or a probe the role let in), which a write held back by
	// the wait or the budget carries first: it is what the customer must fix.
	retryAt time.Time
	backoff time.Duration
	refusal string
}

// New returns an Assumer.
func New(o Options) *Assumer {
	if o.IdentityName == "" {
		o.IdentityName = destination.DefaultName
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.RenewBefore == 0 {
		o.RenewBefore = DefaultRenewBefore
	}
	def := config.DefaultSTSBudget()
	if o.Budget.PerDestination.Count < callsPerSession || o.Budget.PerDestination.Per <= 0 {
		o.Budget.PerDestination = def.PerDestination
	}
	if o.Budget.PerAccount.Count < callsPerSession || o.Budget.PerAccount.Per <= 0 {
		o.Budget.PerAccount = def.PerAccount
	}
	if o.Backoff.Initial <= 0 || o.Backoff.Max < o.Backoff.Initial {
		o.Backoff = config.Backoff{Initial: time.Second, Max: 2 * time.Minute}
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	if o.Limiter == nil {
		o.Limiter = &ratelimit.Local{Now: o.Now}
	}
	return &Assumer{o: o, sessions: map[string]*cached{}}
}

// callsPerSession is what a new session costs STS, and so the budget: its own probe, then
// the session.
const callsPerSession = 2

// Credentials returns d's session, reusing the cached one until RenewBefore ahead of its
// expiry; every new one is preceded by its own probe. Errors are *failures.Error or SDK
// errors failures.Classify understands.
func (a *Assumer) Credentials(ctx context.Context, d destination.Destination) (aws.Credentials, error) {
	return a.get(ctx, d, false)
}

// Check runs the probe and a new session now, replacing any cached one: "send a test"
// and the card's check walk the whole path. It does not wait out a session backoff (a
// customer who fixed the role tries at once), but it spends the budget: when the budget
// holds it back the error is failures.NewHeldBack's, and nothing reached STS.
func (a *Assumer) Check(ctx context.Context, d destination.Destination) error {
	_, err := a.get(ctx, d, true)
	return err
}

func (a *Assumer) entry(id string) *cached {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.sessions[id]
	if c == nil {
		c = &cached{}
		a.sessions[id] = c
	}
	return c
}

func (a *Assumer) get(ctx context.Context, d destination.Destination, fresh bool) (aws.Credentials, error) {
	c := a.entry(d.ID)
	key := sha256.Sum256([]byte(d.RoleARN + "\x00" + d.ExternalID + "\x00" + destination.SessionPolicy(d)))
	c.mu.Lock()
	defer c.mu.Unlock()
	now := a.o.Now()
	if c.key != key { // a new definition: nothing known of the old one holds
		c.key, c.creds, c.renewAt = key, aws.Credentials{}, time.Time{}
		c.retryAt, c.backoff, c.refusal = time.Time{}, 0, ""
	}
	if !fresh && c.creds.AccessKeyID != "" && now.Before(c.renewAt) {
		return c.creds, nil
	}
	c.creds = aws.Credentials{} // a failed renewal leaves nothing to reuse
	if wait := c.retryAt.Sub(now); !fresh && wait > 0 {
		return aws.Credentials{}, failures.NewNotTakenFor(fmt.Sprintf(
			"did not take the event: %s; the relay asks STS for a session again in %s (the wait doubles while AWS refuses, "+
				"up to %s), or at once when you send a test", c.refusal, wait.Round(time.Second), a.o.Backoff.Max), wait, nil)
	}
	// Every session is preceded by its own probe: both are taken from the budget together.
	b := a.o.Budget
	v, err := a.o.Limiter.Spend(ctx, d.Account, callsPerSession, ratelimit.Limit{Key: "sts:destination:" + d.ID, Rate: b.PerDestination},
		ratelimit.Limit{Key: "sts:account", Rate: b.PerAccount})
	switch {
	case err != nil:
		return aws.Credentials{}, failures.NewNotTaken("did not take the event: the relay could not read its STS budget (Redis); retrying with backoff", err)
	case !v.OK:
		return aws.Credentials{}, failures.NewHeldBack(a.heldSentence(c, v.Wait), v.Wait)
	}
	end := func(string, error) {}
	if a.o.Tracer != nil {
		end = a.o.Tracer.StartSetup(d, true)
	}
	err = a.probe(ctx, d)
	a.o.Metrics.count("probe", err)
	if err != nil {
		end("probe", err)
		if o := failures.Classify(err); o.Class == failures.Rejected {
			// The role lets a wrong ExternalId in: each try is a rejection of its own (20
			// disable the destination), with no wait between them but the budget's.
			c.refusal = o.Message
		}
		return aws.Credentials{}, err
	}
	creds, err := a.session(ctx, d)
	a.o.Metrics.count("session", err)
	end("session", err)
	if err != nil {
		if o := failures.Classify(err); o.Class == failures.Rejected {
			c.refused(now, a.o.Backoff, o.Message) // the role refused us with the right ExternalId
		}
		return aws.Credentials{}, err
	}
	c.creds = creds
	c.renewAt = creds.Expires.Add(-a.o.RenewBefore)
	c.backoff, c.retryAt, c.refusal = 0, time.Time{}, "" // STS let us in: nothing of its refusals holds
	return creds, nil
}

// heldSentence is the card's sentence for a write the budget held back for wait: the
// last refusal's words first (what the customer must fix), then the wait, which is the
// relay's own pacing.
func (a *Assumer) heldSentence(c *cached, wait time.Duration) string {
	w := wait.Round(time.Second)
	if w < time.Second {
		w = time.Second
	}
	if c.refusal != "" {
		return fmt.Sprintf("did not take the event: %s; the relay asks STS for a session again in %s", c.refusal, w)
	}
	return fmt.Sprintf("did not take the event: the relay paces its calls to AWS STS for this destination and asks for "+
		"a session again in %s", w)
}

// refused starts or doubles the wait before c's next session.
func (c *cached) refused(now time.Time, b config.Backoff, sentence string) {
	if c.backoff == 0 {
		c.backoff = b.Initial
	}
	c.retryAt, c.refusal = now.Add(c.backoff), sentence
	c.backoff = min(2*c.backoff, b.Max)
}

// Report tells the Assumer how the write signed with d's session accessKeyID went. Only
// an answer that means the session itself is no good (SessionRefused: expired, or its
// token not recognised) drops it, if it is still the cached one (a session a concurrent
// caller made since is kept), so the next write takes a fresh one, probe first. A
// refusal by the role's permissions (AccessDeniedException) keeps it: AWS evaluates the
// role's permissions at each request, so the customer's fix applies to this session, and
// each refused write is a rejection of its own at the bus's pace, with no STS call.
func (a *Assumer) Report(d destination.Destination, accessKeyID string, err error) {
	if err == nil || !SessionRefused(failures.Code(err)) {
		return
	}
	c := a.entry(d.ID)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.creds.AccessKeyID == accessKeyID {
		c.creds = aws.Credentials{}
	}
}

// SessionRefused reports whether a bus's answer to a write means the session it was
// signed with is no good any more: expired, or a token AWS does not recognise. Those
// are ours to replace (not taken); every other answer leaves the session in use.
func SessionRefused(code string) bool {
	switch code {
	case "ExpiredToken", "ExpiredTokenException", "UnrecognizedClientException", "InvalidClientTokenId":
		return true
	}
	return false
}

// oneAttempt turns the SDK's retries off for one call: a throttle must reach our
// accounting, and dispatch does the retrying.
func oneAttempt(o *sts.Options) { o.Retryer = aws.NopRetryer{} }

// OwnConfig loads our own identity from the default credential chain, in region (where
// we call STS), with the SDK's retries off and one connection pool (awspool) for every
// client made from it.
func OwnConfig(ctx context.Context, region string) (aws.Config, error) {
	return awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(region), awsconfig.WithHTTPClient(awspool.Client()),
		awsconfig.WithRetryer(func() aws.Retryer { return aws.NopRetryer{} }))
}

// NewSTSClient is our STS client from cfg; endpoint, when set, points it at a local STS.
func NewSTSClient(cfg aws.Config, endpoint string) *sts.Client {
	return sts.NewFromConfig(cfg, func(o *sts.Options) {
		oneAttempt(o)
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
	})
}
