package ingest

import (
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Topology names what the relay declares on the broker.
type Topology struct {
	Exchange           string   // the Worker's durable topic exchange
	Queue              string   // ours: durable quorum queue
	RoutingKeys        []string // bound on the exchange
	QuarantineExchange string   // fanout exchange for messages that fail verification
	QuarantineQueue    string   // where they wait for an operator
}

// declare makes the topology exist. Declaring what already exists with the same
// arguments is a no-op, so every replica and every reconnect does it.
func (t Topology) declare(ch *amqp.Channel) error {
	if err := ch.ExchangeDeclare(t.Exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare exchange %q: %w", t.Exchange, err)
	}
	quorum := amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}
	queueArgs := amqp.Table{
		amqp.QueueTypeArg: amqp.QueueTypeQuorum,
		// A message ingest cannot republish to the quarantine (its copy would not fit
		// in a frame, its headers cannot be read) is rejected, and the broker moves the
		// original there itself, keeping it until the quarantine queue has it.
		"x-dead-letter-exchange": t.QuarantineExchange,
		"x-dead-letter-strategy": "at-least-once",
		"x-overflow":             "reject-publish", // at-least-once requires it
	}
	if _, err := ch.QueueDeclare(t.Queue, true, false, false, false, queueArgs); err != nil {
		return fmt.Errorf("declare queue %q: %w", t.Queue, err)
	}
	for _, key := range t.RoutingKeys {
		if err := ch.QueueBind(t.Queue, key, t.Exchange, false, nil); err != nil {
			return fmt.Errorf("bind queue %q to %q for %q: %w", t.Queue, t.Exchange, key, err)
		}
	}
	if err := ch.ExchangeDeclare(t.QuarantineExchange, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare exchange %q: %w", t.QuarantineExchange, err)
	}
	if _, err := ch.QueueDeclare(t.QuarantineQueue, true, false, false, false, quorum); err != nil {
		return fmt.Errorf("declare queue %q: %w", t.QuarantineQueue, err)
	}
	if err := ch.QueueBind(t.QuarantineQueue, "", t.QuarantineExchange, false, nil); err != nil {
		return fmt.Errorf("bind queue %q to %q: %w", t.QuarantineQueue, t.QuarantineExchange, err)
	}
	return nil
}

// Declare makes the topology exist, with the arguments ingest itself declares: a queue
// declared first with others would make every later declaration fail.
func (t Topology) Declare(ch *amqp.Channel) error { return t.declare(ch) }
