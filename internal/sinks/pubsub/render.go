package pubsub

import (
	"github.com/mercamap/relay/internal/destination"
)

// Render is the message Send publishes for m (data and attributes), without
// publishing it; an error when Send would refuse it.
func (s *Sink) Render(d destination.Destination, m destination.Message) (destination.Sent, error) {
	req, err := publishRequest(d, m)
	if err != nil {
		return destination.Sent{}, err
	}
	msg := req.Messages[0]
	return destination.Sent{Connector: string(destination.PubSub), PubSub: &destination.PubSubMessage{
		Topic: req.Topic, Data: string(msg.Data), Attributes: msg.Attributes, OrderingKey: msg.OrderingKey}}, nil
}
