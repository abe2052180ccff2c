package assume

import (
	"context"
	"errors"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
)

// Clients keeps one SDK client per region, shared by every destination there (one
// connection pool, one signer): each call is signed with its own destination's session,
// given with the call (Session). T is the service client: the sinks build theirs with
// New, retries off and credentials NoCredentials, so a call made without a session fails
// instead of being signed as us.
type Clients[T any] struct {
	New func(region string) T

	mu sync.Mutex
	m  map[string]T
}

// For returns the client for region.
func (c *Clients[T]) For(region string) T {
	c.mu.Lock()
	defer c.mu.Unlock()
	if client, ok := c.m[region]; ok {
		return client
	}
	if c.m == nil {
		c.m = map[string]T{}
	}
	client := c.New(region)
	c.m[region] = client
	return client
}

// Session is a credentials provider handing out creds as they are, for one call: the
// Assumer decides when a session is too old; the SDK must not second-guess it.
func Session(creds aws.Credentials) aws.CredentialsProvider {
	return credentials.NewStaticCredentialsProvider(creds.AccessKeyID, creds.SecretAccessKey, creds.SessionToken)
}

// ErrNoSession is what a shared client's calls fail with when no session was given.
var ErrNoSession = errors.New("no destination session given for this call")

// NoCredentials is the shared clients' own credentials: none. Every call must be given
// its destination's session (Session); our own identity never signs a write.
var NoCredentials aws.CredentialsProvider = aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
	return aws.Credentials{}, ErrNoSession
})
