package ingest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

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

// blockedWhy is the log's word for a message dead-lettered while the broker blocks the
// quarantine connection.
const blockedWhy = "the broker blocks publishing (a resource alarm): the original goes to the quarantine whole"

// deadLetter rejects d without requeue: the broker moves it, unchanged but for its
// x-death header, to the quarantine exchange (the queue's dead-letter exchange).
func (c *Consumer) deadLetter(d amqp.Delivery, reason, why string) error {
	if err := d.Nack(false, false); err != nil {
		return fmt.Errorf("reject to the dead-letter exchange: %w", err)
	}
	c.opts.Metrics.DeadLettered.WithLabelValues(reason).Inc()
	c.opts.Logger.Warn("message dead-lettered to the quarantine", "reason", reason, "why", why,
		"routing_key", d.RoutingKey, "message_id", d.MessageId)
	return nil
}

// quarantined is a message that failed verification, at index i of its batch, and its
// quarantine copy.
type quarantined struct {
	i      int
	reason string
	msg    amqp.Publishing
}

// fittingCopy is d's quarantineCopy, to republish to the quarantine exchange, and
// whether it fits: fits is false when its content header would not fit in one frame of
// l's connections (the broker would close the connection).
func (c *Consumer) fittingCopy(l link, d amqp.Delivery, rej *rejection) (msg amqp.Publishing, fits bool) {
	msg = quarantineCopy(d, rej, c.opts.Topology.Quarantine.MaxBodyBytes)
	if size := headerFrameSize(msg); size < 0 || (l.frameMax > 0 && size > l.frameMax) {
		return msg, false
	}
	c.opts.Logger.Warn("message quarantined", "reason", rej.reason, "detail", boundDetail(rej.detail), "routing_key", d.RoutingKey, "message_id", d.MessageId)
	return msg, true
}

// publishCopies publishes the copies on the quarantine channel and returns each one's
// confirmation, nil for one not written. The writes run apart from the batch: once the
// broker blocks the connection a write waits in the socket for as long as the alarm
// lasts, and the batch then goes on without them (see publisher.go).
func (c *Consumer) publishCopies(l link, batch []amqp.Delivery, copies []quarantined) ([]*amqp.DeferredConfirmation, error) {
	if len(copies) == 0 {
		return nil, nil
	}
	var mu sync.Mutex
	dcs := make([]*amqp.DeferredConfirmation, len(copies))
	var failed error
	written := make(chan struct{})
	go func() {
		defer close(written)
		for k, p := range copies {
			dc, err := l.quarantine.PublishWithDeferredConfirm(c.opts.Topology.QuarantineExchange, batch[p.i].RoutingKey, false, false, p.msg)
			mu.Lock()
			dcs[k], failed = dc, err
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	select {
	case <-written:
	case <-l.gate.whenBlocked():
	}
	mu.Lock()
	defer mu.Unlock()
	if failed != nil {
		return nil, fmt.Errorf("quarantine publish: %w", failed)
	}
	return slices.Clone(dcs), nil
}

// confirmedOrBlocked waits for dc's confirmation (ack or nack) and reports true once it
// came, or false when the broker blocks the quarantine connection first (or dc was
// never written). A confirmation already in hand wins over a block.
func confirmedOrBlocked(dc *amqp.DeferredConfirmation, gate *flowGate) bool {
	if dc == nil {
		return false
	}
	select {
	case <-dc.Done():
		return true
	default:
	}
	select {
	case <-dc.Done():
		return true
	case <-gate.whenBlocked():
		return false
	}
}

// maxDetail bounds x-relay-detail: the detail can quote what the publisher sent.
const maxDetail = 256

// quarantineCopy is d as it was published, with x-relay-* headers saying why. Two
// properties become headers: user_id (the broker refuses a publish whose user_id is not
// the publishing connection's user) and expiration (the copy must not expire). A body
// longer than maxBody (0: no limit) is cut to that prefix (cutBody).
func quarantineCopy(d amqp.Delivery, rej *rejection, maxBody int) amqp.Publishing {
	headers := make(amqp.Table, len(d.Headers)+9)
	for k, v := range d.Headers {
		headers[k] = v
	}
	headers["x-relay-reason"] = rej.reason
	headers["x-relay-detail"] = boundDetail(rej.detail)
	headers["x-relay-exchange"] = d.Exchange
	headers["x-relay-routing-key"] = d.RoutingKey
	if d.UserId != "" {
		headers["x-relay-user-id"] = d.UserId
	}
	if d.Expiration != "" {
		headers["x-relay-expiration"] = d.Expiration
	}
	return amqp.Publishing{
		Headers:         headers,
		ContentType:     d.ContentType,
		ContentEncoding: d.ContentEncoding,
		DeliveryMode:    d.DeliveryMode,
		Priority:        d.Priority,
		CorrelationId:   d.CorrelationId,
		ReplyTo:         d.ReplyTo,
		MessageId:       d.MessageId,
		Timestamp:       d.Timestamp,
		Type:            d.Type,
		AppId:           d.AppId,
		Body:            cutBody(d.Body, maxBody, headers),
	}
}

// boundDetail returns s as valid UTF-8 of at most maxDetail bytes, marked when cut.
func boundDetail(s string) string {
	const cut = "… (truncated)"
	if len(s) <= maxDetail && utf8.ValidString(s) {
		return s
	}
	long := len(s) > maxDetail
	if long {
		s = s[:maxDetail-len(cut)]
	}
	s = strings.ToValidUTF8(s, "?") // a rune split by the cut, too
	if long {
		s += cut
	}
	return s
}
