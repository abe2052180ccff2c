// Package awspool builds the HTTP client every AWS client of the relay shares (STS and
// the sinks): one connection pool, sized for the writes the delivery engine runs at
// once. It only configures a client; it never sends anything itself.
package awspool

import (
	"net/http"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
)

// IdleConns is how many idle connections to one endpoint the pool keeps: about as many
// as dispatch may have writes in flight (its Options.MaxActive passes, 256 by default,
// each with up to its destination's window of writes: 16 by default). Every bus of a
// region has one endpoint host (events.<region>.amazonaws.com), so with fewer most
// concurrent writes would open a new connection (and a TLS handshake) each time, on
// both sides: 100 destinations 16 writes deep left ~6,500 sockets in TIME_WAIT with
// 256, ~1,100 with 4,096 (make bench's late rows). An idle connection costs only while
// it is open.
const IdleConns = 4096

// Client is the SDK's buildable client with that pool.
func Client() *awshttp.BuildableClient {
	return awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
		t.MaxIdleConns, t.MaxIdleConnsPerHost = IdleConns, IdleConns
	})
}
