package ingest

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/mercamap/relay/internal/jobevent"
	"github.com/mercamap/relay/internal/signature"
)

// BenchmarkCheck measures the per-message verification ingest does before a
// store write: signature, CloudEvent envelope, tenant and event-id checks.
func BenchmarkCheck(b *testing.B) {
	key := bytes.Repeat([]byte{7}, 32)
	now := time.Unix(1764460800, 0)
	for _, size := range []int{1 << 10, 64 << 10} {
		b.Run(fmt.Sprintf("%dKB", size>>10), func(b *testing.B) {
			job := jobevent.Job{ID: "0190f2a4-2222-7333-8444-555566667777", Status: "completed", StoreID: "st_1"}
			body, err := jobevent.Pad(job.DefaultBody(now), size)
			if err != nil || len(body) != size {
				b.Fatalf("Pad: %d bytes, %v", len(body), err)
			}
			job.Body = body
			const exchange = "fetcher.events"
			msg := jobevent.Build(job, exchange, key, now)
			d := amqp.Delivery{Headers: msg.Headers, Body: msg.Body, Exchange: exchange, RoutingKey: job.RoutingKey()}
			c := New(Options{Verifier: signature.Verifier{Keys: [][]byte{key}, MaxAge: time.Hour, MaxFuture: time.Minute,
				Now: func() time.Time { return now }}})
			if _, _, rej := c.check(d); rej != nil {
				b.Fatalf("rejected: %s: %s", rej.reason, rej.detail)
			}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, rej := c.check(d); rej != nil {
					b.Fatal(rej.reason)
				}
			}
		})
	}
}
