package assume

import (
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
)

// Clients keeps one SDK client per destination, signed with its current session, and
// builds a new one when the session is renewed (or the region changes). T is the service
// client: the sinks build theirs with New, retries off.
type Clients[T any] struct {
	New func(region string, creds aws.CredentialsProvider) T

	mu sync.Mutex
	m  map[string]sessionClient[T]
}

type sessionClient[T any] struct {
	accessKeyID, region string
	client              T
}

// For returns the client for destination id in region, signed with creds.
func (c *Clients[T]) For(id, region string, creds aws.Credentials) T {
	c.mu.Lock()
	defer c.mu.Unlock()
	if sc, ok := c.m[id]; ok && sc.accessKeyID == creds.AccessKeyID && sc.region == region {
		return sc.client
	}
	// The Assumer decides when a session is too old; the SDK must not second-guess it.
	static := credentials.NewStaticCredentialsProvider(creds.AccessKeyID, creds.SecretAccessKey, creds.SessionToken)
	sc := sessionClient[T]{accessKeyID: creds.AccessKeyID, region: region, client: c.New(region, static)}
	if c.m == nil {
		c.m = map[string]sessionClient[T]{}
	}
	c.m[id] = sc
	return sc.client
}
