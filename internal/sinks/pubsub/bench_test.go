package pubsub

import (
	"context"
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
)

// BenchmarkPublish compares Send (label check cached, one attempt, wait for the ack)
// with the bare gapic publish-and-wait of design/performance.md, in the same run:
// report the ratio, not the absolute rate.
func BenchmarkPublish(b *testing.B) {
	p := newPeer(b)
	d := topicDest()
	p.createTopic(b, d, ownLabel)
	m := event(d, 1, "store-1")
	ctx := context.Background()

	b.Run("bare", func(b *testing.B) {
		req := &pubsubpb.PublishRequest{Topic: d.TopicName(), Messages: []*pubsubpb.PubsubMessage{{Data: m.Body(), Attributes: map[string]string{"event_id": m.EventID}}}}
		for b.Loop() {
			if _, err := p.admin.Publish(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("sink", func(b *testing.B) {
		s := New(ctx, Options{Identity: ours, Endpoint: p.srv.Addr})
		defer s.Close()
		for b.Loop() {
			if err := s.Send(ctx, d, m); err != nil {
				b.Fatal(err)
			}
		}
	})
}
