package ingest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// The headers a quarantine copy whose body was cut carries: the whole body's size and
// SHA-256, so an operator can tell it from a copy kept whole and match it to the
// publisher's.
const (
	TruncatedHeader      = "x-relay-truncated"
	OriginalSizeHeader   = "x-relay-original-size"
	OriginalSHA256Header = "x-relay-original-sha256"
)

// cutBody returns body, or its first max bytes when it is longer (max > 0), recording
// its size and digest in headers. Anyone who may publish on the Worker's exchange can
// send bodies up to the broker's 128 MiB: the quarantine keeps what tells an operator
// what came, not the whole.
func cutBody(body []byte, max int, headers amqp.Table) []byte {
	if max <= 0 || len(body) <= max {
		return body
	}
	sum := sha256.Sum256(body)
	headers[TruncatedHeader] = true
	headers[OriginalSizeHeader] = int64(len(body))
	headers[OriginalSHA256Header] = hex.EncodeToString(sum[:])
	return body[:max:max]
}

// countDrops reads the quarantine's drop path on conn until ctx ends or the delivery
// channel closes (an error: the session reconnects and declares it again), counting
// each message the broker dropped from the full quarantine queue. Messages are taken
// with auto-ack: they are only counted. conn is the session's filtered connection, as
// dead-lettered originals may carry headers amqp091-go cannot read.
func (c *Consumer) countDrops(ctx context.Context, conn *amqp.Connection) (func() error, error) {
	q := c.opts.Topology.DroppedQueue()
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("open drop-count channel: %w", err)
	}
	deliveries, err := ch.Consume(q, "", true, false, false, false, nil) // not WithContext: see subscribe
	if err != nil {
		return nil, fmt.Errorf("consume %q: %w", q, err)
	}
	m := c.opts.Metrics
	return func() error {
		for {
			select {
			case <-ctx.Done():
				// Keep taking what amqp091-go hands over until the connection's close
				// ends deliveries: closing waits for its delivery goroutine.
				go func() {
					for range deliveries {
					}
				}()
				return nil
			case d, ok := <-deliveries:
				if !ok {
					return fmt.Errorf("delivery channel of %q closed by the broker", q)
				}
				m.QuarantineDropped.Inc()
				m.QuarantineDroppedBytes.Add(float64(len(d.Body)))
			}
		}
	}, nil
}
