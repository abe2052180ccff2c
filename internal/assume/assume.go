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
	budget   ratelimit.Buckets // by "destination:<id>" and "account:<id>"
	mu       sync.Mutex
	sessions map[string]*cached // by destination id
}

// cached is one destination's session. Its mutex is held while probing and assuming, so
// concurrent callers for one destination wait for one session instead of making two.
type cached struct {
	mu      sync.Mutex
	key     [sha256.Size]byte // what the session was made for: a hash of role, ExternalId, session policy
	creds   aws.Credentials
	renewAt time.Time // when creds are replaced: RenewBefore ahead of expiry, or when the probe runs out
	// probedUntil is how long the last passed probe for key stands: as long as a session
	// made right after it would be used. A session made later inside it needs no probe.
	probedUntil time.Time
	// retryAt is when a new session may be asked for after a refused one; backoff is the
	// wait the next refusal sets, refusal the sentence of the last one.
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
	if o.Budget.PerDestination.Count < 2 || o.Budget.PerDestination.Per <= 0 {
		o.Budget.PerDestination = def.PerDestination
	}
	if o.Budget.PerAccount.Count < 2 || o.Budget.PerAccount.Per <= 0 {
		o.Budget.PerAccount = def.PerAccount
	}
	if o.Backoff.Initial <= 0 || o.Backoff.Max < o.Backoff.Initial {
		o.Backoff = config.Backoff{Initial: time.Second, Max: 2 * time.Minute}
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	return &Assumer{o: o, sessions: map[string]*cached{}}
}

// Credentials returns d's session, reusing the cached one until RenewBefore ahead of its
// expiry; a new one is preceded by the probe unless a probe passed within a session's
// lifetime. Errors are *failures.Error or SDK errors failures.Classify understands.
func (a *Assumer) Credentials(ctx context.Context, d destination.Destination) (aws.Credentials, error) {
	return a.get(ctx, d, false)
}

// Check runs the probe and a new session now, replacing any cached one: "send a test"
// and the card's check walk the whole path. It does not wait out a session backoff (a
// customer who fixed the role tries at once), but it spends the budget.
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
		c.key, c.creds, c.renewAt, c.probedUntil = key, aws.Credentials{}, time.Time{}, time.Time{}
		c.retryAt, c.backoff, c.refusal = time.Time{}, 0, ""
	}
	if !fresh && c.creds.AccessKeyID != "" && now.Before(c.renewAt) {
		return c.creds, nil
	}
	c.creds = aws.Credentials{} // a failed renewal leaves nothing to reuse
	if wait := c.retryAt.Sub(now); !fresh && wait > 0 {
		return aws.Credentials{}, failures.NewNotTakenFor(fmt.Sprintf(
			"did not take the event: the last session for role %s was refused (%s); the relay waits %s before asking STS "+
				"for another (the wait doubles while sessions are refused, up to %s) — fix what that says, then send a test to try at once",
			d.RoleARN, c.refusal, wait.Round(time.Second), a.o.Backoff.Max), wait, nil)
	}
	probe := fresh || !now.Before(c.probedUntil)
	calls := 1
	if probe {
		calls = 2
	}
	b := a.o.Budget
	if ok, wait := a.budget.TakeN(now, calls, ratelimit.Limit{Key: "destination:" + d.ID, Rate: b.PerDestination},
		ratelimit.Limit{Key: "account:" + d.Account, Rate: b.PerAccount}); !ok {
		return aws.Credentials{}, failures.NewNotTakenFor(fmt.Sprintf(
			"did not take the event: the relay holds back new sessions for this destination for %s — AssumeRole calls are "+
				"budgeted at %d per %s for a destination and %d per %s for an account's destinations together, since AWS limits them "+
				"for the relay's one principal, shared by every customer; a role whose permissions refuse the writes spends the "+
				"budget fastest (each refused write asks for a new session), so check the card's last rejection",
			wait.Round(time.Second), b.PerDestination.Count, b.PerDestination.Per, b.PerAccount.Count, b.PerAccount.Per), wait, nil)
	}
	end := func(string, error) {}
	if a.o.Tracer != nil {
		end = a.o.Tracer.StartSetup(d, probe)
	}
	if probe {
		c.probedUntil = time.Time{}
		err := a.probe(ctx, d)
		a.o.Metrics.count("probe", err)
		if err != nil {
			end("probe", err)
			return aws.Credentials{}, err
		}
		c.probedUntil = now.Add(SessionDuration - a.o.RenewBefore)
	}
	creds, err := a.session(ctx, d)
	a.o.Metrics.count("session", err)
	end("session", err)
	if err != nil {
		// The probe stands only beside a session it let through: the next try probes
		// again, so a destination STS never let in never skips the probe.
		c.probedUntil = time.Time{}
		if o := failures.Classify(err); o.Class == failures.Rejected {
			c.refused(now, a.o.Backoff, o.Message) // the role refused us with the right ExternalId
		}
		return aws.Credentials{}, err
	}
	c.creds = creds
	c.renewAt = creds.Expires.Add(-a.o.RenewBefore)
	if c.probedUntil.Before(c.renewAt) {
		c.renewAt = c.probedUntil // never used longer after its probe than a session made with it
	}
	return creds, nil
}

// refused starts or doubles the wait before c's next session.
func (c *cached) refused(now time.Time, b config.Backoff, sentence string) {
	if c.backoff == 0 {
		c.backoff = b.Initial
	}
	c.retryAt, c.refusal = now.Add(c.backoff), sentence
	c.backoff = min(2*c.backoff, b.Max)
}

// Report tells the Assumer how the write signed with d's session accessKeyID went. A
// delivery ends any session backoff. An answer that refuses the session (SessionRefused)
// drops it, if it is still the cached one (a session a concurrent caller made since is
// kept), so the next write takes a fresh one. When the refusal is the role's permissions
// (AccessDenied), that next session also waits out a backoff — a role that lacks the write
// permission would otherwise cost a session per event — but keeps the probe that passed:
// the trust policy's answer to a wrong ExternalId does not depend on what the role may do.
func (a *Assumer) Report(d destination.Destination, accessKeyID string, err error) {
	code := failures.Code(err)
	if err != nil && !SessionRefused(code) {
		return
	}
	c := a.entry(d.ID)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		c.backoff, c.retryAt, c.refusal = 0, time.Time{}, ""
		return
	}
	if c.creds.AccessKeyID == accessKeyID {
		c.creds = aws.Credentials{}
	}
	if o := failures.Classify(err); o.Class == failures.Rejected {
		c.refused(a.o.Now(), a.o.Backoff, o.Message)
	}
}

// SessionRefused reports whether a bus's answer to a write means the session it was
// signed with is no good any more (expired, or its permissions gone): the session is
// to be dropped (Report), whatever the outcome is classified as.
func SessionRefused(code string) bool {
	switch code {
	case "ExpiredToken", "ExpiredTokenException", "AccessDenied", "AccessDeniedException",
		"UnrecognizedClientException", "InvalidClientTokenId":
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
