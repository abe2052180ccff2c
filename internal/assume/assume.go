// Package assume owns our side of a customer's IAM role: the wrong-ExternalId probe
// before every session, the session scoped to one destination's one write, and the
// per-destination cache of that session. It never uses credentials the probe was handed,
// never retries on its own, and keeps keys in memory only.
package assume

import (
	"context"
	"crypto/sha256"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/mercamap/relay/internal/destination"
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
	mu    sync.Mutex
	key   [sha256.Size]byte // what the session was made for: a hash of role, ExternalId, session policy
	creds aws.Credentials
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
	return &Assumer{o: o, sessions: map[string]*cached{}}
}

// Credentials returns d's session, reusing the cached one until RenewBefore ahead of its
// expiry; a new one is preceded by the probe. Errors are *failures.Error or SDK errors
// failures.Classify understands.
func (a *Assumer) Credentials(ctx context.Context, d destination.Destination) (aws.Credentials, error) {
	return a.get(ctx, d, false)
}

// Check runs the probe and a new session now, replacing any cached one: "send a test"
// and the card's check walk the whole path.
func (a *Assumer) Check(ctx context.Context, d destination.Destination) error {
	_, err := a.get(ctx, d, true)
	return err
}

func (a *Assumer) get(ctx context.Context, d destination.Destination, fresh bool) (aws.Credentials, error) {
	a.mu.Lock()
	c := a.sessions[d.ID]
	if c == nil {
		c = &cached{}
		a.sessions[d.ID] = c
	}
	a.mu.Unlock()

	key := sha256.Sum256([]byte(d.RoleARN + "\x00" + d.ExternalID + "\x00" + destination.SessionPolicy(d)))
	c.mu.Lock()
	defer c.mu.Unlock()
	if !fresh && c.key == key && c.creds.Expires.Sub(a.o.Now()) > a.o.RenewBefore {
		return c.creds, nil
	}
	c.key, c.creds = [sha256.Size]byte{}, aws.Credentials{} // a failed renewal leaves nothing to reuse
	if err := a.probe(ctx, d); err != nil {
		return aws.Credentials{}, err
	}
	creds, err := a.session(ctx, d)
	if err != nil {
		return aws.Credentials{}, err
	}
	c.key, c.creds = key, creds
	return creds, nil
}

// Forget drops d's cached session, if it is still the one the write that failed was
// signed with (accessKeyID): the bus answered ExpiredToken or AccessDenied for it, so
// the next write takes a fresh session, preceded by the probe, instead of reusing it.
// A session a concurrent caller made since is kept.
func (a *Assumer) Forget(d destination.Destination, accessKeyID string) {
	a.mu.Lock()
	c := a.sessions[d.ID]
	a.mu.Unlock()
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.creds.AccessKeyID == accessKeyID {
		c.key, c.creds = [sha256.Size]byte{}, aws.Credentials{}
	}
}

// SessionRefused reports whether a bus's answer to a write means the session it was
// signed with is no good any more (expired, or its permissions gone): the session is
// to be dropped (Forget), whatever the outcome is classified as.
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
// we call STS), with the SDK's retries off for every client made from it.
func OwnConfig(ctx context.Context, region string) (aws.Config, error) {
	return config.LoadDefaultConfig(ctx, config.WithRegion(region),
		config.WithRetryer(func() aws.Retryer { return aws.NopRetryer{} }))
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
