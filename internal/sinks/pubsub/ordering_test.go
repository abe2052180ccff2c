package pubsub

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	vkit "cloud.google.com/go/pubsub/v2/apiv1"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/failures"
)

// TestAnOrderedSubscriptionReceivesEachStoresEventsInOrder: every message carries its
// store id as the ordering key (the account id for an event without one), so a
// subscription with message ordering on gets one store's events in the order they were
// published, whatever the other stores do. A publish the server refused (UNAVAILABLE,
// not taken) leaves nothing paused: its retry and the store's next events go through,
// in order. The subscriber is a real pull client of pstest, acking as it reads.
func TestAnOrderedSubscriptionReceivesEachStoresEventsInOrder(t *testing.T) {
	p := newPeer(t)
	d := topicDest()
	p.createTopic(t, d, ownLabel)
	s := newSink(t, p, newClock())
	sub := orderedSubscription(t, p, d)

	sent := []destination.Message{event(d, 0, "store-a"), event(d, 1, "store-b"), event(d, 2, "store-a"),
		event(d, 3, ""), event(d, 4, "store-b"), event(d, 5, "store-a"), event(d, 6, ""), event(d, 7, "store-a")}
	for i, m := range sent {
		if i == 5 { // the server refuses this publish once; the relay sends it again
			p.faults.fail("Publish", codes.Unavailable)
			wantClass(t, send(t, s, d, m), failures.NotTaken)
		}
		if err := send(t, s, d, m); err != nil {
			t.Fatalf("Send(%s) = %v", m.EventID, err)
		}
	}

	want := map[string][]string{} // ordering key → event ids, in publish order
	for _, m := range sent {
		key := m.StoreID
		if key == "" {
			key = d.Account
		}
		want[key] = append(want[key], m.EventID)
	}
	got := sub.readAll(t, len(sent))
	for key, ids := range want {
		if !slices.Equal(got[key], ids) {
			t.Errorf("ordering key %q: the subscriber read %v, want %v in publish order", key, got[key], ids)
		}
	}
	if len(got) != len(want) {
		t.Errorf("the subscriber read ordering keys %v, want exactly the stores' and the account's", got)
	}
}

// subscriber pulls one subscription of pstest and acks what it reads.
type subscriber struct {
	c    *vkit.SubscriptionAdminClient
	name string
}

func orderedSubscription(t *testing.T, p *peer, d destination.Destination) *subscriber {
	t.Helper()
	c, err := vkit.NewSubscriptionAdminClient(context.Background(), option.WithEndpoint(p.srv.Addr), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	name := "projects/" + d.ProjectID + "/subscriptions/ordered"
	if _, err := c.CreateSubscription(context.Background(), &pubsubpb.Subscription{Name: name, Topic: d.TopicName(),
		AckDeadlineSeconds: 10, EnableMessageOrdering: true}); err != nil {
		t.Fatal(err)
	}
	return &subscriber{c: c, name: name}
}

// readAll pulls until n messages were read, acking each pull's messages before the next
// (an ordered subscription hands out a key's next message only once the one before is
// acked), and returns the event ids by ordering key, in the order read.
func (s *subscriber) readAll(t *testing.T, n int) map[string][]string {
	t.Helper()
	got, read := map[string][]string{}, 0
	deadline := time.Now().Add(20 * time.Second)
	for read < n {
		if time.Now().After(deadline) {
			t.Fatalf("read %d of %d messages: %v", read, n, got)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		res, err := s.c.Pull(ctx, &pubsubpb.PullRequest{Subscription: s.name, MaxMessages: 100})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		var acks []string
		for _, m := range res.ReceivedMessages {
			got[m.Message.OrderingKey] = append(got[m.Message.OrderingKey], m.Message.Attributes["event_id"])
			acks = append(acks, m.AckId)
			read++
		}
		if len(acks) > 0 {
			if err := s.c.Acknowledge(t.Context(), &pubsubpb.AcknowledgeRequest{Subscription: s.name, AckIds: acks}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return got
}

// TestAStoreIDLongerThanAnOrderingKeyIsRejectedUnsent: Pub/Sub refuses an ordering key
// (as an attribute value) over 1 KB every time, so such an event ends here, with the
// reason, and nothing is sent; one of exactly 1 KB is published.
func TestAStoreIDLongerThanAnOrderingKeyIsRejectedUnsent(t *testing.T) {
	p := newPeer(t)
	d := topicDest()
	p.createTopic(t, d, ownLabel)
	s := newSink(t, p, newClock())
	out := wantClass(t, send(t, s, d, event(d, 0, strings.Repeat("s", MaxOrderingKeyBytes+1))), failures.Rejected)
	if !strings.Contains(out.Message, "1024 bytes") {
		t.Errorf("card sentence %q does not name the limit", out.Message)
	}
	if n := p.faults.count("Publish"); n != 0 {
		t.Errorf("%d publishes reached the server, want none", n)
	}
	if err := send(t, s, d, event(d, 1, strings.Repeat("s", MaxOrderingKeyBytes))); err != nil {
		t.Errorf("a store id of exactly %d bytes: %v, want it published", MaxOrderingKeyBytes, err)
	}
}
