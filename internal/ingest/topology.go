package ingest

import (
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Topology names what the relay declares on the broker.
type Topology struct {
	Exchange           string   // the Worker's durable topic exchange
	Queue              string   // ours: durable quorum queue with a single active consumer
	RoutingKeys        []string // bound on the exchange
	QuarantineExchange string   // fanout exchange for messages that fail verification
	QuarantineQueue    string   // where they wait for an operator
}

// TopologyError says that something the relay declares already exists on the broker with
// other arguments (RabbitMQ's 406 PRECONDITION_FAILED, "inequivalent arg"). Arguments
// cannot change in place, so no reconnect can succeed: the relay stops and says why.
type TopologyError struct {
	Kind, Name string // "queue" or "exchange", and its name
	Reason     string // the broker's text
	Main       bool   // the relay's own queue: it is migrated, not deleted
}

func (e *TopologyError) Error() string {
	hint := "delete it or name another in the config (docs/operator-guide.md, section RabbitMQ)"
	if e.Main {
		hint = "a queue's arguments cannot change in place; migrate it as docs/operator-guide.md, " +
			"section \"Migrate the queue\", says (one replica drains the old queue while a new one fills)"
	}
	return fmt.Sprintf("%s %q exists on the broker with other arguments than the relay declares (%s): %s",
		e.Kind, e.Name, e.Reason, hint)
}

// declareErr turns the broker's 406 on a declaration into a TopologyError; other errors pass.
func declareErr(err error, kind, name string, main bool) error {
	var amqpErr *amqp.Error
	if errors.As(err, &amqpErr) && amqpErr.Code == amqp.PreconditionFailed {
		return &TopologyError{Kind: kind, Name: name, Reason: amqpErr.Reason, Main: main}
	}
	return fmt.Errorf("declare %s %q: %w", kind, name, err)
}

// declare makes the topology exist. Declaring what already exists with the same
// arguments is a no-op, so every replica and every reconnect does it.
func (t Topology) declare(ch *amqp.Channel) error {
	if err := ch.ExchangeDeclare(t.Exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		return declareErr(err, "exchange", t.Exchange, false)
	}
	quorum := amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}
	// The broker hands the queue to one consumer at a time and to the next when it goes:
	// with any number of replicas, events reach the account logs in the queue's order.
	queueArgs := amqp.Table{
		amqp.QueueTypeArg:            amqp.QueueTypeQuorum,
		amqp.SingleActiveConsumerArg: true,
		// A message ingest cannot republish to the quarantine (its copy would not fit
		// in a frame, its headers cannot be read) is rejected, and the broker moves the
		// original there itself, keeping it until the quarantine queue has it.
		"x-dead-letter-exchange": t.QuarantineExchange,
		"x-dead-letter-strategy": "at-least-once",
		"x-overflow":             "reject-publish", // at-least-once requires it
	}
	if _, err := ch.QueueDeclare(t.Queue, true, false, false, false, queueArgs); err != nil {
		return declareErr(err, "queue", t.Queue, true)
	}
	for _, key := range t.RoutingKeys {
		if err := ch.QueueBind(t.Queue, key, t.Exchange, false, nil); err != nil {
			return fmt.Errorf("bind queue %q to %q for %q: %w", t.Queue, t.Exchange, key, err)
		}
	}
	if err := ch.ExchangeDeclare(t.QuarantineExchange, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
		return declareErr(err, "exchange", t.QuarantineExchange, false)
	}
	if _, err := ch.QueueDeclare(t.QuarantineQueue, true, false, false, false, quorum); err != nil {
		return declareErr(err, "queue", t.QuarantineQueue, false)
	}
	if err := ch.QueueBind(t.QuarantineQueue, "", t.QuarantineExchange, false, nil); err != nil {
		return fmt.Errorf("bind queue %q to %q: %w", t.QuarantineQueue, t.QuarantineExchange, err)
	}
	return nil
}

// Declare connects to the broker at url, declares the topology and disconnects, without
// consuming: what a migration runs to create a new queue before any relay reads it.
func Declare(url string, t Topology) error {
	conn, err := amqp.DialConfig(url, amqp.Config{
		Heartbeat:  10 * time.Second,
		Properties: amqp.Table{"connection_name": "relay-declare"},
	})
	if err != nil {
		return fmt.Errorf("connect to broker: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	defer ch.Close()
	return t.declare(ch)
}
