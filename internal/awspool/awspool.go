// Package awspool builds the HTTP client every AWS client of the relay shares (STS and
// the sinks): one connection pool, sized for the writes the delivery engine runs at
// once. It only configures a client; it never sends anything itself.
package awspool

import (
	"net/http"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
)

// IdleConns is how many idle connections to one endpoint the pool keeps: as many as
// dispatch runs writes at once (its Options.MaxActive, 256 by default). Every bus of a
// region has one endpoint host (events.<region>.amazonaws.com), so with the SDK's
// default of 10 most of 256 concurrent writes would open a new connection (and a TLS
// handshake) each time, on both sides.
const IdleConns = 256

// Client is the SDK's buildable client with that pool.
func Client() *awshttp.BuildableClient {
	return awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
		t.MaxIdleConns, t.MaxIdleConnsPerHost = IdleConns, IdleConns
	})
}
