package ingest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/mercamap/relay/internal/jobevent"
	"github.com/mercamap/relay/internal/testpeer"
	"github.com/mercamap/relay/internal/waittest"
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
	// 1b. Headers the broker takes (a payload up to its frame max) but 8 bytes more than
	// amqp091-go reads: the client dropped the connection at each delivery.
	atLimit := amqp.Publishing{MessageId: "at-broker-limit", Body: []byte(`{}`), Headers: amqp.Table{"pad": ""}}
	atLimit.Headers["pad"] = strings.Repeat("p", defaultFrameMax+8-headerFrameSize(atLimit))
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
	r.publish(ch, "job.completed", near, atLimit, hugeMsg, deep, many)
	good := jobevent.Job{ID: "0190f2a4-cccc-7000-8000-000000000001", Status: "completed"}
	r.publish(ch, good.RoutingKey(), jobevent.Build(good, r.topo.Exchange, r.key, now))

	waittest.For(t, 20*time.Second, "the good event stored", func() bool {
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
		"near-frame-max":  "dead-lettered",
		"at-broker-limit": "dead-lettered",
		"huge-job-id":     EventIDMismatch,
		"nested-40":       "dead-lettered",
		"9000-entries":    "dead-lettered",
	}
	got := map[string]string{}
	waittest.For(t, 20*time.Second, "every poison in the quarantine", func() bool {
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
		"missing_signature": 1, HeadersTooLarge: 1, HeadersTooDeep: 1, HeadersTooMany: 1,
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

// TestQuarantineCopyKeepsEveryProperty: an operator reading the quarantine sees the
// message as it was published. user_id and expiration travel as headers: the broker
// refuses a publish whose user_id is not the publishing connection's user, and a copy
// that expires would leave the quarantine.
func TestQuarantineCopyKeepsEveryProperty(t *testing.T) {
	r := newRig(t, testpeer.SharedRabbitMQ(t), testpeer.RedisURL(t), "relay-test-properties")
	r.start()
	ch := r.channel()
	sent := amqp.Publishing{
		Headers:         amqp.Table{"app-header": "kept"},
		ContentType:     "application/json",
		ContentEncoding: "identity",
		DeliveryMode:    amqp.Persistent,
		Priority:        7,
		CorrelationId:   "corr-1",
		ReplyTo:         "reply-queue",
		Expiration:      "600000",
		MessageId:       "msg-1",
		Timestamp:       time.Unix(1764460800, 0),
		Type:            "job.completed",
		UserId:          "guest", // the publishing user: the broker checks it
		AppId:           "fetcher-worker",
		Body:            []byte(`{"jobId":"x"}`),
	}
	r.publish(ch, "job.completed", sent)
	waittest.For(t, 10*time.Second, "message acked", func() bool { return testutil.ToFloat64(r.metrics.Acked) == 1 })
	d, ok, err := ch.Get(r.topo.QuarantineQueue, true)
	if err != nil || !ok {
		t.Fatalf("quarantine empty (err %v)", err)
	}
	got := amqp.Publishing{
		ContentType: d.ContentType, ContentEncoding: d.ContentEncoding, DeliveryMode: d.DeliveryMode,
		Priority: d.Priority, CorrelationId: d.CorrelationId, ReplyTo: d.ReplyTo, MessageId: d.MessageId,
		Timestamp: d.Timestamp, Type: d.Type, AppId: d.AppId, Body: d.Body,
	}
	want := sent
	want.Headers, want.Expiration, want.UserId = nil, "", ""
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("copy properties:\n got %+v\nwant %+v", got, want)
	}
	if d.Expiration != "" || d.UserId != "" {
		t.Errorf("copy has expiration %q, user_id %q as properties", d.Expiration, d.UserId)
	}
	for k, v := range map[string]string{"app-header": "kept", "x-relay-user-id": "guest", "x-relay-expiration": "600000",
		"x-relay-reason": "missing_signature", "x-relay-routing-key": "job.completed", "x-relay-exchange": r.topo.Exchange} {
		if d.Headers[k] != v {
			t.Errorf("header %s = %v, want %q", k, d.Headers[k], v)
		}
	}
}

// TestHeaderFrameSizeIsWhatTheBrokerCounts: headerFrameSize counts the bytes the broker
// counts. The quarantine relies on it to never send a copy that does not fit.
func TestHeaderFrameSizeIsWhatTheBrokerCounts(t *testing.T) {
	url := testpeer.SharedRabbitMQ(t)
	publish := func(size int) error {
		conn, _, err := dialFiltered(url, amqp.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if conn.Config.FrameSize != defaultFrameMax {
			t.Fatalf("negotiated frame max %d", conn.Config.FrameSize)
		}
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if err := ch.Confirm(false); err != nil {
			t.Fatal(err)
		}
		p := amqp.Publishing{ContentType: "text/plain", MessageId: "m", Timestamp: time.Now(), Priority: 1,
			Headers: amqp.Table{"pad": "", "n": int32(1), "nest": amqp.Table{"a": []any{int64(1), "b", []byte("c")}}}}
		p.Headers["pad"] = strings.Repeat("p", size-headerFrameSize(p))
		if got := headerFrameSize(p); got != size {
			t.Fatalf("built %d bytes, want %d", got, size)
		}
		dc, err := ch.PublishWithDeferredConfirm("", "relay-test-frame-size-no-such-queue", false, false, p)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if ok, err := dc.WaitContext(ctx); err != nil || !ok {
			return fmt.Errorf("not confirmed: ok=%v %v", ok, err)
		}
		return nil
	}
	if err := publish(defaultFrameMax); err != nil {
		t.Errorf("a header frame of exactly the frame max: %v", err)
	}
	// RabbitMQ 3.10 takes a payload up to the frame max, 8 bytes more than amqp091-go
	// reads (it counts the frame header and end in it): the quarantine keeps to the
	// smaller limit, so that the copy is readable by any client.
	if err := publish(defaultFrameMax + 8); err != nil {
		t.Errorf("a payload of exactly the frame max: %v", err)
	}
	if err := publish(defaultFrameMax + 9); err == nil {
		t.Errorf("a header frame payload one byte over the frame max was confirmed")
	}
}

// TestBatchEndingInARejectedMessageSettlesEveryMessage: the batch's one multiple ack
// names the last delivery not rejected (RabbitMQ closes the channel, PRECONDITION_FAILED
// unknown delivery tag, for a multiple ack naming a rejected one; tried on 3.10).
func TestBatchEndingInARejectedMessageSettlesEveryMessage(t *testing.T) {
	r := newRig(t, testpeer.SharedRabbitMQ(t), testpeer.RedisURL(t), "relay-test-batch-end")
	r.start() // declares the queue
	r.stop()
	ch := r.channel()
	var msgs []amqp.Publishing
	for i := range 3 {
		job := jobevent.Job{ID: fmt.Sprintf("0190f2a4-dddd-7000-8000-%012d", i), Status: "completed"}
		msgs = append(msgs, jobevent.Build(job, r.topo.Exchange, r.key, time.Now()))
	}
	msgs = append(msgs, amqp.Publishing{MessageId: "deep-last", Headers: amqp.Table{"deep": nested(40)}})
	r.publish(ch, "job.completed", msgs...)
	r.start() // the four are waiting: one batch
	waittest.For(t, 20*time.Second, "three stored, one dead-lettered", func() bool {
		return testutil.ToFloat64(r.metrics.Acked) == 3 && testutil.ToFloat64(r.metrics.DeadLettered.WithLabelValues(HeadersTooDeep)) == 1
	})
	r.stop() // anything left unacked goes back to the queue
	waittest.For(t, 10*time.Second, "the queue empty, nothing unacked", func() bool { return r.readyMessages(ch, r.topo.Queue) == 0 })
	if got := testutil.ToFloat64(r.metrics.ConnectionLosses); got != 0 {
		t.Errorf("the relay lost its broker connection %v times", got)
	}
	if n := len(r.log()); n != 3 {
		t.Errorf("log holds %d events, want 3", n)
	}
}
