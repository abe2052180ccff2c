package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// declare makes a durable topic exchange and a durable quorum queue bound to it for the
// job routing keys, for the bare consumer: routed as ingest.Topology routes (with one
// consumer, the relay's single-active-consumer argument changes nothing).
func declare(url, exchange, queue string) error {
	conn, err := amqp.Dial(url)
	if err != nil {
		return fmt.Errorf("connect to broker: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := ch.ExchangeDeclare(exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare exchange %s: %w", exchange, err)
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}); err != nil {
		return fmt.Errorf("declare queue %s: %w", queue, err)
	}
	for _, key := range routingKeys {
		if err := ch.QueueBind(queue, key, exchange, false, nil); err != nil {
			return fmt.Errorf("bind %s: %w", queue, err)
		}
	}
	return nil
}

// publisher publishes with confirms on its own connection, as the Worker does.
type publisher struct {
	conn     *amqp.Connection
	ch       *amqp.Channel
	confirms chan amqp.Confirmation
}

func newPublisher(url string) (*publisher, error) {
	conn, err := amqp.DialConfig(url, amqp.Config{Properties: amqp.Table{"connection_name": "benchingest-publisher"}})
	if err != nil {
		return nil, fmt.Errorf("publisher: connect: %w", err)
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("publisher: %w", err)
	}
	// The library hands over one confirmation per publish, in order, even for multiple-acks.
	p := &publisher{conn: conn, ch: ch, confirms: make(chan amqp.Confirmation, 1024)}
	ch.NotifyPublish(p.confirms)
	return p, nil
}

func (p *publisher) close() { p.conn.Close() }

// send publishes msgs to exchange with at most window of them unconfirmed, and returns
// once the broker confirmed them all.
func (p *publisher) send(ctx context.Context, exchange string, msgs []message, window int) error {
	slots := make(chan struct{}, window)
	confirmed := make(chan error, 1)
	go func() {
		nacks := 0
		for range msgs {
			c, ok := <-p.confirms
			if !ok {
				confirmed <- errors.New("channel closed before every publish was confirmed")
				return
			}
			if !c.Ack {
				nacks++
			}
			<-slots
		}
		if nacks > 0 {
			confirmed <- fmt.Errorf("broker nacked %d publishes", nacks)
			return
		}
		confirmed <- nil
	}()
	for _, m := range msgs {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		if err := p.ch.PublishWithContext(ctx, exchange, m.routingKey, false, false, m.pub); err != nil {
			return fmt.Errorf("publish: %w", err)
		}
	}
	select {
	case err := <-confirmed:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// bareConsumer is the denominator: a plain amqp091-go consumer that acks each delivery
// and does nothing else.
type bareConsumer struct {
	conn       *amqp.Connection
	deliveries <-chan amqp.Delivery
}

func newBareConsumer(url, queue string, prefetch int) (*bareConsumer, error) {
	conn, err := amqp.DialConfig(url, amqp.Config{Properties: amqp.Table{"connection_name": "benchingest-bare"}})
	if err != nil {
		return nil, fmt.Errorf("bare consumer: connect: %w", err)
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Qos(prefetch, 0, false)
	}
	var deliveries <-chan amqp.Delivery
	if err == nil {
		deliveries, err = ch.Consume(queue, "", false, false, false, false, nil)
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("bare consumer: %w", err)
	}
	return &bareConsumer{conn: conn, deliveries: deliveries}, nil
}

func (c *bareConsumer) close() { c.conn.Close() }

// consume acks n deliveries one by one and returns when it sent the last ack.
func (c *bareConsumer) consume(ctx context.Context, n int) (time.Time, error) {
	for i := 0; i < n; i++ {
		select {
		case d, ok := <-c.deliveries:
			if !ok {
				return time.Time{}, fmt.Errorf("deliveries closed after %d of %d", i, n)
			}
			if err := d.Ack(false); err != nil {
				return time.Time{}, fmt.Errorf("ack: %w", err)
			}
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("got %d of %d: %w", i, n, ctx.Err())
		}
	}
	return time.Now(), nil
}
