package ingest

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mercamap/relay/internal/jobevent"
	"github.com/mercamap/relay/internal/testpeer"
	"github.com/mercamap/relay/internal/waittest"
)

// TestSignedEventsBehindJunkAreStoredWhileTheBrokerBlocksPublishing: a flood of large
// junk can raise the broker's memory alarm, and the broker then stops reading from every
// connection that publishes. Quarantine copies used to go out on the consuming
// connection, so its acks waited behind the alarm and the alarm behind the acks: ingest
// stalled with the flood, and a signed event behind it never reached its bus. Here the
// alarm is raised with junk and a signed event queued: the signed event is stored and
// the queue empties while the alarm lasts, each junk message in the quarantine whole
// (dead-lettered by the broker, counted); once the alarm ends, junk is copied again.
func TestSignedEventsBehindJunkAreStoredWhileTheBrokerBlocksPublishing(t *testing.T) {
	broker := testpeer.StartRabbitMQ(t)
	r := newRig(t, broker.URL(), testpeer.RedisURL(t), "relay-test-alarm")
	r.opts.Prefetch = 8 // the junk spans several batches, before and after the signed event
	r.bound(QuarantineBounds{MaxBytes: 64 << 20, MaxMessages: 1000, MaxBodyBytes: 64 << 10})
	r.start() // declares the topology
	r.stop()

	const junk, size = 20, 256 << 10
	ch := r.channel()
	if err := floodUnsigned(ch, r.topo.Exchange, junk/2, size); err != nil {
		t.Fatal(err)
	}
	job := jobevent.Job{ID: "0190f2a4-7777-7000-8000-000000000001", Status: "completed"}
	r.publish(ch, job.RoutingKey(), jobevent.Build(job, r.topo.Exchange, r.key, time.Now()))
	if err := floodUnsigned(ch, r.topo.Exchange, junk/2, size); err != nil {
		t.Fatal(err)
	}

	broker.MemoryAlarm(t, true)
	defer broker.MemoryAlarm(t, false)
	r.start()
	waittest.For(t, 30*time.Second, "the signed event stored during the alarm", func() bool { return r.hasEvent(job.EventID()) })
	waittest.For(t, 30*time.Second, "the signed event acked and the junk dead-lettered", func() bool {
		return testutil.ToFloat64(r.metrics.Acked) == 1 && int(sumOf(r.metrics.DeadLettered)) == junk
	})
	if n := r.quarantinedTotal(); n != 0 {
		t.Errorf("%d quarantine copies confirmed during the alarm, want none (the broker blocks them)", n)
	}
	// The broker took those acks and rejects: with the consumer gone, nothing comes back.
	r.stop()
	watch := r.channel()
	if n := r.readyMessages(watch, r.topo.Queue); n != 0 {
		t.Errorf("%d messages back in the queue once the consumer stopped, want 0: the broker did not read its acks", n)
	}
	waittest.For(t, 30*time.Second, "the junk in the quarantine", func() bool {
		return r.readyMessages(watch, r.topo.QuarantineQueue) == junk
	})
	for range junk {
		d, ok, err := watch.Get(r.topo.QuarantineQueue, true)
		if err != nil || !ok {
			t.Fatalf("quarantine get: %v, %v", ok, err)
		}
		if len(d.Body) != size || d.Headers["x-death"] == nil {
			t.Fatalf("quarantined %d bytes (x-death %v), want the original's %d, dead-lettered", len(d.Body), d.Headers["x-death"], size)
		}
	}

	// Once the alarm ends, junk is copied (a prefix, with its reason) again.
	broker.MemoryAlarm(t, false)
	r.start()
	if err := floodUnsigned(ch, r.topo.Exchange, 1, size); err != nil {
		t.Fatal(err)
	}
	waittest.For(t, 30*time.Second, "a junk message copied to the quarantine after the alarm", func() bool { return r.quarantinedTotal() == 1 })
}
