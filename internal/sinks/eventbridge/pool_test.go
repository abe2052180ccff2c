package eventbridge_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/mercamap/relay/internal/assume"
	"github.com/mercamap/relay/internal/awspool"
	"github.com/mercamap/relay/internal/awstest"
	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/sinks/eventbridge"
)

// TestConcurrentWritesReuseTheirConnections: 64 destinations of one region (each of its
// own account: the STS budget is per account) writing at
// once, ten times each, through the shared sink (one endpoint host, as every bus of a
// region has), open about one connection each and then reuse them: counted by the
// bus's own server. With the SDK's default pool (10 idle connections per host) most
// writes would open a connection, and pay its handshake on both sides.
func TestConcurrentWritesReuseTheirConnections(t *testing.T) {
	const writers, rounds = 64, 10
	sts := awstest.NewSTS(t)
	h := awstest.NewEventBridgeHandler()
	h.RequireSessionFrom(sts)
	var opened atomic.Int64
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)

	ours := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("AKIDOURS", "ours", ""),
		HTTPClient: awspool.Client()} // what assume.OwnConfig gives the sinks
	a := assume.New(assume.Options{STS: assume.NewSTSClient(ours, sts.URL), IdentityName: "mercamap",
		Backoff: config.Backoff{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond}})
	sink := eventbridge.New(eventbridge.Options{AWS: ours, Assumer: a, IdentityName: "mercamap", Endpoint: srv.URL})
	var dests []destination.Destination
	for i := range writers {
		r := fmt.Sprintf("arn:aws:iam::%012d:role/mercamap-delivery", 100000000000+i)
		sts.RequireExternalID(r, extID)
		dests = append(dests, destination.Destination{ID: fmt.Sprintf("bus-%d", i), Account: fmt.Sprintf("acct_%d", i),
			Connector: destination.EventBridge, BusARN: bus, RoleARN: r, ExternalID: extID})
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers*rounds)
	for _, d := range dests {
		wg.Go(func() {
			for n := range rounds {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				errs <- sink.Send(ctx, d, destination.Message{ID: fmt.Sprintf("msg_%s_%d", d.ID, n), Type: "job.completed",
					EventID: fmt.Sprintf("ev-%s-%d", d.ID, n), CreatedAt: "2026-12-01T00:00:00Z", Data: []byte(`{}`), Account: d.Account})
				cancel()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := len(h.Entries()); n != writers*rounds {
		t.Fatalf("%d entries on the bus, want %d", n, writers*rounds)
	}
	if n := opened.Load(); n > 2*writers {
		t.Fatalf("%d writes opened %d connections to the bus, want at most two per concurrent writer (%d writers)", writers*rounds, n, writers)
	}
}
