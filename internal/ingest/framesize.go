package ingest

import (
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// The size of a content header frame as amqp091-go encodes it: a quarantine copy whose
// header would not fit in the negotiated frame max is not published (the broker would
// close the connection), and its original is dead-lettered instead.

// headerFrameSize is the size of the content header frame amqp091-go sends for p
// (frame header and end included), or -1 if amqp091-go could not encode it.
func headerFrameSize(p amqp.Publishing) int {
	n := 8 + 14 // frame header and end; class, weight, body size, property flags
	for _, s := range []string{p.ContentType, p.ContentEncoding, p.CorrelationId, p.ReplyTo, p.Expiration, p.MessageId, p.Type, p.UserId, p.AppId} {
		if len(s) > 255 {
			return -1
		}
		if s != "" {
			n += 1 + len(s)
		}
	}
	if p.DeliveryMode > 0 {
		n++
	}
	if p.Priority > 0 {
		n++
	}
	if !p.Timestamp.IsZero() {
		n += 8
	}
	if len(p.Headers) > 0 {
		t := tableSize(p.Headers)
		if t < 0 {
			return -1
		}
		n += 4 + t
	}
	return n
}

// tableSize is the encoded size of a field table's entries, as amqp091-go writes them.
func tableSize(t amqp.Table) int {
	n := 0
	for k, v := range t {
		f := fieldSize(v)
		if f < 0 || len(k) > 255 {
			return -1
		}
		n += 1 + len(k) + f
	}
	return n
}

// fieldSize is the encoded size of one field value, type octet included (amqp091-go
// write.go writeField), or -1 for a type it cannot write.
func fieldSize(v any) int {
	switch v := v.(type) {
	case nil:
		return 1
	case bool, byte, int8:
		return 2
	case int16, uint16:
		return 3
	case int, int32, uint32, float32:
		return 5
	case amqp.Decimal:
		return 6
	case int64, float64, time.Time:
		return 9
	case string:
		return 5 + len(v)
	case []byte:
		return 5 + len(v)
	case amqp.Table:
		t := tableSize(v)
		if t < 0 {
			return -1
		}
		return 5 + t
	case []any:
		n := 5
		for _, e := range v {
			f := fieldSize(e)
			if f < 0 {
				return -1
			}
			n += f
		}
		return n
	}
	return -1
}
