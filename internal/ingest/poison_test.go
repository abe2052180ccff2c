package ingest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/mercamap/relay/internal/jobevent"
	"github.com/mercamap/relay/internal/testpeer"
)

// nested returns a headers value nested depth tables deep.
func nested(depth int) any {
	var v any = "bottom"
	for range depth {
		v = amqp.Table{"d": v}
	}
	return v
}

// TestPoisonMessagesAreSetAsideAndTheEventBehindThemIsStored publishes the four
// messages that used to stop ingest (each put back in the queue and delivered again,
// forever, the connection closed every time), then a good event.
func TestPoisonMessagesAreSetAsideAndTheEventBehindThemIsStored(t *testing.T) {
	r := newRig(t, testpeer.SharedRabbitMQ(t), testpeer.RedisURL(t), "relay-test-poison")
	r.start()
	ch := r.channel()
	now := time.Now()

	// 1. Unsigned, headers a few bytes under RabbitMQ's frame max: the copy with the
	// x-relay-* headers would not fit.
	near := amqp.Publishing{MessageId: "near-frame-max", ContentType: "application/json", Body: []byte(`{}`),
		Headers: amqp.Table{"pad": ""}}
	near.Headers["pad"] = strings.Repeat("p", defaultFrameMax-16-headerFrameSize(near))
	if size := headerFrameSize(near); size > defaultFrameMax-10 || size < defaultFrameMax-20 {
		t.Fatalf("near-frame message is %d bytes", size)
	}
	// 2. Signed, a huge jobId and a wrong ce-id: the detail quoting the expected ce-id
	// was as large as the jobId.
	huge := jobevent.Job{ID: strings.Repeat("9", 300_000), Status: "completed"}
	hugeMsg := jobevent.Build(huge, r.topo.Exchange, r.key, now)
	hugeMsg.Headers["ce-id"] = []byte("fetcher.job.completed.someone-else")
	hugeMsg.Headers["ce-subject"] = []byte("s")
	hugeMsg.Headers["X-Request-Id"] = "r"
	hugeMsg.MessageId = "huge-job-id"
	// 3. and 4. Headers the broker takes and amqp091-go refuses to read.
	deep := amqp.Publishing{MessageId: "nested-40", Body: []byte(`{}`), Headers: amqp.Table{"deep": nested(40)}}
	many := amqp.Publishing{MessageId: "9000-entries", Body: []byte(`{}`), Headers: amqp.Table{}}
	for i := range 9000 {
		many.Headers[fmt.Sprint("h", i)] = int32(i)
	}
	r.publish(ch, "job.completed", near, hugeMsg, deep, many)
	good := jobevent.Job{ID: "0190f2a4-cccc-7000-8000-000000000001", Status: "completed"}
	r.publish(ch, good.RoutingKey(), jobevent.Build(good, r.topo.Exchange, r.key, now))

	waitFor(t, 20*time.Second, "the good event stored", func() bool {
		for _, e := range r.log() {
			if e.EventID == good.EventID() {
				return true
			}
		}
		return false
	})
	if n := len(r.log()); n != 1 {
		t.Errorf("log holds %d events, want 1", n)
	}

	// Read the quarantine through a filtered connection: the dead-lettered originals
	// are as unreadable to amqp091-go there as they were in our queue.
	qconn, nonce, err := dialFiltered(r.amqpURL, amqp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer qconn.Close()
	qch, err := qconn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{ // message id: x-relay-reason, or "dead-lettered"
		"near-frame-max": "dead-lettered",
		"huge-job-id":    EventIDMismatch,
		"nested-40":      "dead-lettered",
		"9000-entries":   "dead-lettered",
	}
	got := map[string]string{}
	waitFor(t, 20*time.Second, "four messages in the quarantine", func() bool {
		for {
			d, ok, err := qch.Get(r.topo.QuarantineQueue, true)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				return len(got) >= len(want)
			}
			reason, _ := d.Headers["x-relay-reason"].(string)
			if deaths, _ := d.Headers["x-death"].([]any); len(deaths) > 0 {
				death, _ := deaths[0].(amqp.Table)
				if death["reason"] != "rejected" || death["queue"] != r.topo.Queue {
					t.Errorf("%s: x-death %v", d.MessageId, death)
				}
				reason = "dead-lettered"
			}
			got[d.MessageId] = reason
			t.Logf("quarantined %s: %s (read as %q; %d headers, %d body bytes)", d.MessageId, reason,
				unreadableReason(d.Headers, nonce), len(d.Headers), len(d.Body))
			if d.MessageId == "huge-job-id" {
				if detail, _ := d.Headers["x-relay-detail"].(string); len(detail) > maxDetail {
					t.Errorf("x-relay-detail is %d bytes", len(detail))
				}
				if string(d.Body) != string(hugeMsg.Body) {
					t.Error("huge-job-id: body differs from the original")
				}
			}
		}
	})
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("quarantine = %v\nwant %v", got, want)
	}
	for reason, n := range map[string]float64{
		"missing_signature": 1, HeadersTooDeep: 1, HeadersTooMany: 1,
	} {
		if got := testutil.ToFloat64(r.metrics.DeadLettered.WithLabelValues(reason)); got != n {
			t.Errorf("dead-lettered{%s} = %v, want %v", reason, got, n)
		}
	}
	if got := testutil.ToFloat64(r.metrics.ConnectionLosses); got != 0 {
		t.Errorf("the relay lost its broker connection %v times", got)
	}
	if n := r.readyMessages(ch, r.topo.Queue); n != 0 {
		t.Errorf("%d messages left in the queue", n)
	}
}
