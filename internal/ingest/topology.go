package ingest

import (
	"errors"
	"fmt"
	"time"

	"github.com/mercamap/relay/internal/signature"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Topology names what the relay declares on the broker.
type Topology struct {
	Exchange           string   // the Worker's durable topic exchange
	Queue              string   // ours: durable quorum queue with a single active consumer
	RoutingKeys        []string // bound on the exchange
	QuarantineExchange string   // fanout exchange for messages that fail verification
	QuarantineQueue    string   // where they wait for an operator
	// Quarantine bounds the quarantine queue; zero fields leave it unbounded, as
	// releases before them declared it.
	Quarantine QuarantineBounds
	// Partitions above 1 replace Queue by that many queues (Queues), each like Queue,
	// fed by a consistent-hash exchange (HashExchange) on the tenant header: each
	// tenant's events go to one partition, in order, and the replicas share the
	// partitions (ReplicasQueue counts them).
	Partitions int
}

// TenantHeader is the header partitions hash on: the signed tenant, which routing follows.
const TenantHeader = signature.TenantHeader

// Queues are the queues ingest consumes: Queue, or with partitions Queue.p0 … Queue.p<N-1>.
func (t Topology) Queues() []string {
	if t.Partitions <= 1 {
		return []string{t.Queue}
	}
	qs := make([]string, t.Partitions)
	for i := range qs {
		qs[i] = fmt.Sprintf("%s.p%d", t.Queue, i)
	}
	return qs
}

// HashExchange is the consistent-hash exchange between the Worker's exchange and the
// partitions (declared only with partitions).
func (t Topology) HashExchange() string { return t.Queue + ".hash" }

// ReplicasQueue is the queue every replica holds a consumer on while it consumes the
// partitions: its consumer count is the number of replicas sharing them. Nothing is
// published to it.
func (t Topology) ReplicasQueue() string { return t.Queue + ".replicas" }

// QuarantineBounds bound what the quarantine queue keeps (config rabbitmq.quarantine):
// anyone who may publish on the Worker's exchange fills it, with or without the key.
type QuarantineBounds struct {
	// MaxBytes (x-max-length-bytes, bodies only: the broker does not count headers) and
	// MaxMessages (x-max-length): past either the broker drops the oldest message
	// (x-overflow: drop-head) and dead-letters it to DroppedExchange, where the relay
	// counts it.
	MaxBytes    int64
	MaxMessages int
	// MaxBodyBytes: a quarantine copy keeps this prefix of a longer body, with its size
	// and SHA-256 (quarantineCopy).
	MaxBodyBytes int
}

// bounded reports whether the quarantine queue has a bound, hence a drop path.
func (b QuarantineBounds) bounded() bool { return b.MaxBytes > 0 || b.MaxMessages > 0 }

// limits are the length arguments of b; nil when unbounded.
func (b QuarantineBounds) limits() amqp.Table {
	if !b.bounded() {
		return nil
	}
	args := amqp.Table{"x-overflow": "drop-head"}
	if b.MaxBytes > 0 {
		args["x-max-length-bytes"] = b.MaxBytes
	}
	if b.MaxMessages > 0 {
		args["x-max-length"] = int64(b.MaxMessages)
	}
	return args
}

// The drop path's own bounds, reached only while no replica reads it.
const (
	droppedMaxMessages = 10_000
	droppedMaxBytes    = 64 << 20
)

// DroppedExchange is where the broker dead-letters what it drops from a bounded
// quarantine queue (x-death reason maxlen); DroppedQueue, bound to it, is read by every
// replica, which counts each message and forgets it: the broker drops silently otherwise.
func (t Topology) DroppedExchange() string { return t.QuarantineQueue + ".dropped" }

// DroppedQueue is the queue bound to DroppedExchange.
func (t Topology) DroppedQueue() string { return t.QuarantineQueue + ".dropped" }

// TopologyError says that something the relay declares already exists on the broker with
// other arguments (RabbitMQ's 406 PRECONDITION_FAILED, "inequivalent arg"). Arguments
// cannot change in place, so no reconnect can succeed: the relay stops and says why.
type TopologyError struct {
	Kind, Name string // "queue" or "exchange", and its name
	Reason     string // the broker's text
	Main       bool   // the relay's own queue: it is migrated, not deleted
	Quarantine bool   // the quarantine queue: read or move what it holds, then delete it
}

func (e *TopologyError) Error() string {
	hint := "delete it or name another in the config (docs/operator-guide.md, section RabbitMQ)"
	switch {
	case e.Quarantine:
		hint = "the quarantine queue is declared with its bounds (rabbitmq.quarantine) and a queue's arguments " +
			"cannot change in place: read or move what it holds, then delete it (rabbitmqctl delete_queue " + e.Name +
			"); the relay declares it anew when it starts (docs/operator-guide.md, section \"Bound the quarantine\")"
	case e.Main:
		hint = "a queue's arguments cannot change in place; migrate it as docs/operator-guide.md, " +
			"section \"Migrate the queue\", says (one replica drains the old queue while a new one fills)"
	}
	return fmt.Sprintf("%s %q exists on the broker with other arguments than the relay declares (%s): %s",
		e.Kind, e.Name, e.Reason, hint)
}

// PluginError says that the broker has no consistent-hash exchange type, which
// rabbitmq.partitions needs: an operator enables the plugin, no reconnect can help.
type PluginError struct {
	Reason string // the broker's text
}

func (e *PluginError) Error() string {
	return "rabbitmq.partitions needs the consistent-hash exchange, which the broker refused (" + e.Reason +
		"): enable the plugin on every node with `rabbitmq-plugins enable rabbitmq_consistent_hash_exchange` " +
		"(docs/operator-guide.md, section RabbitMQ)"
}

// declareErr turns the broker's 406 on a declaration into a TopologyError; other errors pass.
func declareErr(err error, kind, name string, main bool) error {
	var amqpErr *amqp.Error
	if errors.As(err, &amqpErr) && amqpErr.Code == amqp.PreconditionFailed {
		return &TopologyError{Kind: kind, Name: name, Reason: amqpErr.Reason, Main: main}
	}
	return fmt.Errorf("declare %s %q: %w", kind, name, err)
}

// declareQuarantine declares the quarantine exchange and queue with its bounds and,
// when bounded, the drop path the queue dead-letters its dropped heads to.
func (t Topology) declareQuarantine(ch *amqp.Channel) error {
	if err := ch.ExchangeDeclare(t.QuarantineExchange, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
		return declareErr(err, "exchange", t.QuarantineExchange, false)
	}
	args := amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}
	if limits := t.Quarantine.limits(); limits != nil {
		if err := ch.ExchangeDeclare(t.DroppedExchange(), amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
			return declareErr(err, "exchange", t.DroppedExchange(), false)
		}
		// Every replica reads it at once. Bounded for when none does, by constants: its
		// arguments never change with the config, so it never needs to be deleted.
		dropped := amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum, "x-overflow": "drop-head",
			"x-max-length": int64(droppedMaxMessages), "x-max-length-bytes": int64(droppedMaxBytes)}
		for k, v := range limits {
			args[k] = v
		}
		if _, err := ch.QueueDeclare(t.DroppedQueue(), true, false, false, false, dropped); err != nil {
			return declareErr(err, "queue", t.DroppedQueue(), false)
		}
		if err := ch.QueueBind(t.DroppedQueue(), "", t.DroppedExchange(), false, nil); err != nil {
			return fmt.Errorf("bind queue %q to %q: %w", t.DroppedQueue(), t.DroppedExchange(), err)
		}
		args["x-dead-letter-exchange"] = t.DroppedExchange() // at most once: only to count
	}
	if _, err := ch.QueueDeclare(t.QuarantineQueue, true, false, false, false, args); err != nil {
		err = declareErr(err, "queue", t.QuarantineQueue, false)
		var mismatch *TopologyError
		if errors.As(err, &mismatch) {
			mismatch.Quarantine = true
		}
		return err
	}
	if err := ch.QueueBind(t.QuarantineQueue, "", t.QuarantineExchange, false, nil); err != nil {
		return fmt.Errorf("bind queue %q to %q: %w", t.QuarantineQueue, t.QuarantineExchange, err)
	}
	return nil
}

// declare makes the topology exist. Declaring what already exists with the same
// arguments is a no-op, so every replica and every reconnect does it.
func (t Topology) declare(ch *amqp.Channel) error {
	if err := ch.ExchangeDeclare(t.Exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		return declareErr(err, "exchange", t.Exchange, false)
	}
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
	if t.Partitions <= 1 {
		if _, err := ch.QueueDeclare(t.Queue, true, false, false, false, queueArgs); err != nil {
			return declareErr(err, "queue", t.Queue, true)
		}
		for _, key := range t.RoutingKeys {
			if err := ch.QueueBind(t.Queue, key, t.Exchange, false, nil); err != nil {
				return fmt.Errorf("bind queue %q to %q for %q: %w", t.Queue, t.Exchange, key, err)
			}
		}
	} else if err := t.declarePartitions(ch, queueArgs); err != nil {
		return err
	}
	return t.declareQuarantine(ch)
}

// declarePartitions declares the consistent-hash exchange, bound to the Worker's exchange
// with each routing key, and the partition queues bound to it with equal weights.
func (t Topology) declarePartitions(ch *amqp.Channel, queueArgs amqp.Table) error {
	hash := t.HashExchange()
	if err := ch.ExchangeDeclare(hash, "x-consistent-hash", true, false, false, false,
		amqp.Table{"hash-header": TenantHeader}); err != nil {
		var amqpErr *amqp.Error
		if errors.As(err, &amqpErr) && amqpErr.Code == amqp.CommandInvalid {
			return &PluginError{Reason: amqpErr.Reason}
		}
		return declareErr(err, "exchange", hash, false)
	}
	for _, key := range t.RoutingKeys {
		if err := ch.ExchangeBind(hash, key, t.Exchange, false, nil); err != nil {
			return fmt.Errorf("bind exchange %q to %q for %q: %w", hash, t.Exchange, key, err)
		}
	}
	for _, q := range t.Queues() {
		if _, err := ch.QueueDeclare(q, true, false, false, false, queueArgs); err != nil {
			return declareErr(err, "queue", q, true)
		}
		// The binding key of a consistent-hash exchange is the queue's weight.
		if err := ch.QueueBind(q, "1", hash, false, nil); err != nil {
			return fmt.Errorf("bind queue %q to %q: %w", q, hash, err)
		}
	}
	replicas := amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}
	if _, err := ch.QueueDeclare(t.ReplicasQueue(), true, false, false, false, replicas); err != nil {
		return declareErr(err, "queue", t.ReplicasQueue(), false)
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
