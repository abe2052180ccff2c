package pubsub

import (
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"

	"github.com/mercamap/relay/internal/failures"
	"github.com/mercamap/relay/internal/sinks/sinktest"
)

func TestSinkConformance(t *testing.T) {
	sinktest.Run(t, func(t *testing.T) sinktest.Backend {
		p := newPeer(t)
		d := topicDest()
		p.createTopic(t, d, ownLabel)

		publish := func(c codes.Code, want failures.Class) sinktest.Fault {
			return sinktest.Fault{Inject: func(*testing.T) { p.faults.fail("Publish", c) }, Want: want}
		}
		// The label faults answer the one read a fresh backend's first Send makes; the next
		// Send reads the real, correctly labelled topic again.
		labels := func(l map[string]string) sinktest.Fault {
			return sinktest.Fault{Inject: func(*testing.T) {
				p.faults.add("GetTopic", fault{topic: &pubsubpb.Topic{Name: d.TopicName(), Labels: l}})
			}, Want: failures.Rejected}
		}
		return sinktest.Backend{
			Sink: newSink(t, p, newClock()),
			Dest: d,
			Read: func(t *testing.T, n int) []sinktest.Received {
				got := p.received(t, d)
				if len(got) < n {
					t.Fatalf("%d messages on the topic, want at least %d", len(got), n)
				}
				return got
			},
			Faults: map[string]sinktest.Fault{
				"publish UNAVAILABLE":        publish(codes.Unavailable, failures.NotTaken),
				"publish RESOURCE_EXHAUSTED": publish(codes.ResourceExhausted, failures.NotTaken),
				"publish INTERNAL":           publish(codes.Internal, failures.NotTaken),
				"publish DEADLINE_EXCEEDED":  publish(codes.DeadlineExceeded, failures.NotTaken),
				"publish ABORTED":            publish(codes.Aborted, failures.NotTaken),
				"publish UNKNOWN":            publish(codes.Unknown, failures.NotTaken),
				"publish UNAUTHENTICATED":    publish(codes.Unauthenticated, failures.NotTaken),
				"publish PERMISSION_DENIED":  publish(codes.PermissionDenied, failures.Rejected),
				"publish NOT_FOUND":          publish(codes.NotFound, failures.Rejected),
				"label for another account":  labels(map[string]string{"mercamap-account": "acct_999"}),
				"label missing":              labels(map[string]string{}),
				"topic unreadable": {Inject: func(*testing.T) { p.faults.fail("GetTopic", codes.PermissionDenied) },
					Want: failures.Rejected},
				"topic read UNAVAILABLE": {Inject: func(*testing.T) { p.faults.fail("GetTopic", codes.Unavailable) },
					Want: failures.NotTaken},
			},
		}
	})
}
