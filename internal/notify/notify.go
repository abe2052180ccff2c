// Package notify publishes operator events (destination.disabled) to the configured
// RabbitMQ exchange, with publisher confirms, for the platform's mailer. It carries
// what dispatch hands it and decides nothing.
package notify

import (
	"context"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Publisher publishes to one durable topic exchange, reconnecting when needed.
type Publisher struct {
	url, exchange string

	mu   sync.Mutex
	conn *amqp.Connection
	ch   *amqp.Channel
}

// New returns a Publisher; it connects on first use.
func New(url, exchange string) *Publisher { return &Publisher{url: url, exchange: exchange} }

// Notify publishes body with routing key eventType and waits for the broker's confirm.
// It tries three times, reconnecting between tries.
func (p *Publisher) Notify(ctx context.Context, eventType string, body []byte) error {
	var err error
	for try := 0; try < 3; try++ {
		if err = p.publish(ctx, eventType, body); err == nil {
			return nil
		}
		p.reset()
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(try+1) * 200 * time.Millisecond):
		}
	}
	return err
}

func (p *Publisher) publish(ctx context.Context, eventType string, body []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ch == nil || p.ch.IsClosed() {
		conn, err := amqp.Dial(p.url)
		if err != nil {
			return fmt.Errorf("connect to broker: %w", err)
		}
		ch, err := conn.Channel()
		if err == nil {
			err = ch.Confirm(false)
		}
		if err == nil {
			err = ch.ExchangeDeclare(p.exchange, amqp.ExchangeTopic, true, false, false, false, nil)
		}
		if err != nil {
			conn.Close()
			return fmt.Errorf("prepare operator-events exchange %q: %w", p.exchange, err)
		}
		p.conn, p.ch = conn, ch
	}
	dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, p.exchange, eventType, false, false, amqp.Publishing{
		ContentType: "application/json", DeliveryMode: amqp.Persistent, Timestamp: time.Now(), Type: eventType, Body: body,
	})
	if err != nil {
		return err
	}
	if ok, err := dc.WaitContext(ctx); err != nil || !ok {
		return fmt.Errorf("operator event not confirmed by the broker (ok=%v): %v", ok, err)
	}
	return nil
}

func (p *Publisher) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn != nil {
		p.conn.Close()
	}
	p.conn, p.ch = nil, nil
}

// Close closes the connection.
func (p *Publisher) Close() { p.reset() }
