package ingest

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/mercamap/relay/internal/jobevent"
	"github.com/mercamap/relay/internal/signature"
	"github.com/mercamap/relay/internal/testpeer"
	"github.com/mercamap/relay/internal/waittest"
)

// bound gives the rig's quarantine queue bounds b.
func (r *rig) bound(b QuarantineBounds) {
	r.topo.Quarantine = b
	r.opts.Topology = r.topo
}

// quarantinedTotal is how many unsigned messages ingest put in the quarantine.
func (r *rig) quarantinedTotal() int {
	return int(testutil.ToFloat64(r.metrics.Quarantined.WithLabelValues(string(signature.MissingSignature))))
}

// sumOf is the sum of a reason counter's series over every reason (each starts at 0).
func sumOf(c *prometheus.CounterVec) float64 {
	total := 0.0
	for _, r := range append(slices.Clone(quarantineReasons), HeadersTooLarge, HeadersTooDeep, HeadersTooMany, HeadersMalformed) {
		total += testutil.ToFloat64(c.WithLabelValues(r))
	}
	return total
}

// TestAFloodOfLargeUnsignedMessagesKeepsTheQuarantineWithinItsBound is issue 22's
// attack 6: anyone who may publish on the Worker's exchange, without the signing key,
// sends 100 messages of 5 MB. Each used to be copied whole into an unbounded quarantine
// (500 MB kept, the broker's disk alarm then blocking every publisher). Now each copy
// keeps a 64 KiB prefix, the queue holds at most its bound (1 MiB here: 16 copies), the
// broker drops the oldest, and the relay counts every drop; signed events published
// during the flood are stored.
func TestAFloodOfLargeUnsignedMessagesKeepsTheQuarantineWithinItsBound(t *testing.T) {
	r := newRig(t, testpeer.SharedRabbitMQ(t), testpeer.RedisURL(t), "relay-test-quarantine-flood")
	bounds := QuarantineBounds{MaxBytes: 1 << 20, MaxMessages: 1000, MaxBodyBytes: 64 << 10}
	r.bound(bounds)
	r.start()
	const flood, size = 100, 5 << 20
	maxKept := int(bounds.MaxBytes / int64(bounds.MaxBodyBytes)) // every copy is cut to MaxBodyBytes

	started := time.Now()
	published := make(chan error, 1)
	floodCh := r.channel()
	go func() { published <- floodUnsigned(floodCh, r.topo.Exchange, flood, size) }()

	// The quarantine's depth, sampled all through the flood.
	watch := r.channel()
	deepest := 0
	sample := func() {
		deepest = max(deepest, r.readyMessages(watch, r.topo.QuarantineQueue))
	}

	// Signed events, one at a time, each stored before the next, while the flood runs.
	ch := r.channel()
	var floodErr error
	flooding, stored := true, 0
	for i := 0; flooding || r.quarantinedTotal() < flood; i++ {
		job := jobevent.Job{ID: fmt.Sprintf("0190f2a4-6666-7000-8000-%012d", i), Status: "completed"}
		r.publish(ch, job.RoutingKey(), jobevent.Build(job, r.topo.Exchange, r.key, time.Now()))
		waittest.For(t, 30*time.Second, "signed event "+job.EventID()+" stored during the flood", func() bool {
			sample()
			select {
			case floodErr = <-published:
				flooding = false
			default:
			}
			return r.hasEvent(job.EventID())
		})
		stored++
		if floodErr != nil {
			t.Fatalf("flood: %v", floodErr)
		}
	}
	took := time.Since(started)
	sample()

	in := r.quarantinedTotal()
	kept := r.readyMessages(watch, r.topo.QuarantineQueue)
	t.Logf("%d × %d MB unsigned published and quarantined in %s; %d signed events stored meanwhile; quarantine depth at most %d, %d kept",
		flood, size>>20, took.Round(time.Millisecond), stored, deepest, kept)
	if dead := sumOf(r.metrics.DeadLettered); in != flood || dead != 0 {
		t.Errorf("%d messages quarantined as copies (and %v dead-lettered), want %d copies", in, dead, flood)
	}
	if deepest > maxKept || kept > maxKept || kept == 0 {
		t.Errorf("quarantine held up to %d messages, %d at the end: want between 1 and %d (%d bytes of %d-byte prefixes)",
			deepest, kept, maxKept, bounds.MaxBytes, bounds.MaxBodyBytes)
	}
	// Each signed event was stored within waitFor's bound while the flood ran (it waits
	// only behind the flood messages published before it: one queue is one order). How
	// many fit in the flood's time depends on the machine's load, so one is the floor.
	if stored < 1 {
		t.Errorf("%d signed events stored during the flood, want at least 1", stored)
	}
	if got := testutil.ToFloat64(r.metrics.QuarantineTruncated); got != flood {
		t.Errorf("relay_quarantine_truncated_total = %v, want %d", got, flood)
	}
	// Exact: every message that went in and is no longer there was counted as dropped.
	want := in - kept
	waittest.For(t, 20*time.Second, fmt.Sprintf("relay_quarantine_dropped_total at %d (%d in, %d kept)", want, in, kept), func() bool {
		return int(testutil.ToFloat64(r.metrics.QuarantineDropped)) == want
	})
	if got, want := testutil.ToFloat64(r.metrics.QuarantineDroppedBytes), float64(want*bounds.MaxBodyBytes); got != want {
		t.Errorf("relay_quarantine_dropped_bytes_total = %v, want %v", got, want)
	}
	// What stays is the newest: the oldest went first.
	var last uint64
	for {
		d, ok, err := watch.Get(r.topo.QuarantineQueue, true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		n := binary.BigEndian.Uint64(d.Body)
		if n < uint64(flood-kept) || (last != 0 && n != last+1) {
			t.Errorf("quarantine keeps flood message %d (after %d): want the newest %d in order", n, last, kept)
		}
		last = n
	}
}

// floodUnsigned publishes on ch n unsigned messages of size bytes each, numbered in their
// first 8 bytes, to exchange with publisher confirms, and waits for every confirm.
func floodUnsigned(ch *amqp.Channel, exchange string, n, size int) error {
	if err := ch.Confirm(false); err != nil {
		return err
	}
	body := make([]byte, size)
	for i := range body {
		body[i] = byte(i)
	}
	var err error
	confirms := make([]*amqp.DeferredConfirmation, n)
	for i := range n {
		// Publish writes the body out before it returns: the buffer is free to change.
		binary.BigEndian.PutUint64(body, uint64(i))
		if confirms[i], err = ch.PublishWithDeferredConfirm(exchange, "job.completed", false, false,
			amqp.Publishing{MessageId: fmt.Sprint("flood-", i), ContentType: "application/json", Body: body}); err != nil {
			return err
		}
	}
	for i, dc := range confirms {
		if !dc.Wait() {
			return fmt.Errorf("flood message %d not confirmed", i)
		}
	}
	return nil
}

// hasEvent reports whether the account log holds eventID.
func (r *rig) hasEvent(eventID string) bool {
	for _, e := range r.log() {
		if e.EventID == eventID {
			return true
		}
	}
	return false
}

// TestALargeBodyIsQuarantinedAsAPrefixWithItsSizeAndDigest: a body over max_body_bytes
// is kept as its first max_body_bytes bytes, with the whole body's size and SHA-256;
// the headers and properties a copy keeps stay; a small body is kept whole, unmarked.
func TestALargeBodyIsQuarantinedAsAPrefixWithItsSizeAndDigest(t *testing.T) {
	r := newRig(t, testpeer.SharedRabbitMQ(t), testpeer.RedisURL(t), "relay-test-quarantine-prefix")
	r.bound(QuarantineBounds{MaxBytes: 1 << 20, MaxMessages: 100, MaxBodyBytes: 4096})
	r.start()
	large := make([]byte, 200_000)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range large {
		large[i] = byte(rng.Uint32())
	}
	props := func(id string, body []byte) amqp.Publishing {
		return amqp.Publishing{MessageId: id, ContentType: "application/json", CorrelationId: "corr-" + id, AppId: "someone",
			Type: "job.completed", Expiration: "600000", Timestamp: time.Unix(1_700_000_000, 0),
			Headers: amqp.Table{"X-Tenant-ID": "single-tenant", "custom": "kept"}, Body: body}
	}
	r.publish(r.channel(), "job.completed", props("large", large), props("small", []byte(`{"small":true}`)))

	got := map[string]amqp.Delivery{}
	ch := r.channel()
	waittest.For(t, 20*time.Second, "both in the quarantine", func() bool {
		d, ok, err := ch.Get(r.topo.QuarantineQueue, true)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			got[d.MessageId] = d
		}
		return len(got) == 2
	})
	sum := sha256.Sum256(large)
	l := got["large"]
	if !bytes.Equal(l.Body, large[:4096]) {
		t.Errorf("large body kept as %d bytes, want its first 4096", len(l.Body))
	}
	for k, want := range map[string]any{
		TruncatedHeader: true, OriginalSizeHeader: int64(len(large)), OriginalSHA256Header: hex.EncodeToString(sum[:]),
		"x-relay-reason": string(signature.MissingSignature), "custom": "kept", "X-Tenant-ID": "single-tenant", "x-relay-expiration": "600000",
	} {
		if l.Headers[k] != want {
			t.Errorf("large copy: header %s = %v (%T), want %v", k, l.Headers[k], l.Headers[k], want)
		}
	}
	if l.CorrelationId != "corr-large" || l.AppId != "someone" || l.Type != "job.completed" || l.ContentType != "application/json" ||
		!l.Timestamp.Equal(time.Unix(1_700_000_000, 0)) {
		t.Errorf("large copy lost properties: %+v", l)
	}
	s := got["small"]
	if string(s.Body) != `{"small":true}` {
		t.Errorf("small body kept as %q", s.Body)
	}
	for _, k := range []string{TruncatedHeader, OriginalSizeHeader, OriginalSHA256Header} {
		if _, ok := s.Headers[k]; ok {
			t.Errorf("small copy carries %s", k)
		}
	}
	if got := testutil.ToFloat64(r.metrics.QuarantineTruncated); got != 1 {
		t.Errorf("relay_quarantine_truncated_total = %v, want 1", got)
	}
}

// TestAnUnboundedQuarantineQueueStopsRunWithTheUpgradeHint: a quarantine queue declared
// by an earlier release (no bounds) cannot take its bounds in place. Run stops at once
// with an error that says what to do, and once the operator deleted it the relay
// declares it bounded.
func TestAnUnboundedQuarantineQueueStopsRunWithTheUpgradeHint(t *testing.T) {
	r := newRig(t, testpeer.SharedRabbitMQ(t), testpeer.RedisURL(t), "relay-test-old-quarantine")
	r.bound(QuarantineBounds{MaxBytes: 1 << 20, MaxMessages: 100, MaxBodyBytes: 4096})
	ch := r.channel()
	if _, err := ch.QueueDeclare(r.topo.QuarantineQueue, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}); err != nil {
		t.Fatal(err)
	}
	mismatch, err := r.runUntilTopologyError()
	if mismatch == nil || mismatch.Name != r.topo.QuarantineQueue || !mismatch.Quarantine {
		t.Fatalf("Run returned %v, want a TopologyError for the quarantine queue %q", err, r.topo.QuarantineQueue)
	}
	for _, want := range []string{"inequivalent arg", "rabbitmqctl delete_queue " + r.topo.QuarantineQueue, "Bound the quarantine"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}

	if _, err := ch.QueueDelete(r.topo.QuarantineQueue, false, false, false); err != nil {
		t.Fatal(err)
	}
	r.start()
	// Declared with its bounds: the same declaration is now a no-op.
	if err := Declare(r.amqpURL, r.topo); err != nil {
		t.Fatalf("declare after the upgrade: %v", err)
	}
}

// TestDroppedOriginalsWithUnreadableHeadersAreCountedOnTheSameConnection: the broker
// dead-letters originals whose headers the relay's client cannot read into the
// quarantine unchanged; when the full quarantine drops them, the relay reads them off the
// drop path too. Through the session's frame filter, they are counted like any other
// drop and the connection stays up.
func TestDroppedOriginalsWithUnreadableHeadersAreCountedOnTheSameConnection(t *testing.T) {
	r := newRig(t, testpeer.SharedRabbitMQ(t), testpeer.RedisURL(t), "relay-test-quarantine-unreadable")
	r.bound(QuarantineBounds{MaxBytes: 1 << 20, MaxMessages: 100, MaxBodyBytes: 4096})
	r.start()
	deep := amqp.Publishing{MessageId: "nested-40", Body: []byte(`{}`), Headers: amqp.Table{"deep": nested(40)}}
	many := amqp.Publishing{MessageId: "9000-entries", Body: []byte(`{}`), Headers: amqp.Table{}}
	for i := range 9000 {
		many.Headers[fmt.Sprint("h", i)] = int32(i)
	}
	ch := r.channel()
	r.publish(ch, "job.completed", deep, many)
	pushers := make([]amqp.Publishing, 120)
	for i := range pushers {
		pushers[i] = amqp.Publishing{MessageId: fmt.Sprint("push-", i), Body: []byte(`{}`)}
	}
	r.publish(ch, "job.completed", pushers...)
	job := jobevent.Job{ID: "0190f2a4-7777-7000-8000-000000000001", Status: "completed"}
	r.publish(ch, job.RoutingKey(), jobevent.Build(job, r.topo.Exchange, r.key, time.Now()))
	waittest.For(t, 30*time.Second, "the signed event stored", func() bool { return r.hasEvent(job.EventID()) })

	deadLettered := int(testutil.ToFloat64(r.metrics.DeadLettered.WithLabelValues(HeadersTooDeep)) +
		testutil.ToFloat64(r.metrics.DeadLettered.WithLabelValues(HeadersTooMany)))
	in := r.quarantinedTotal() + deadLettered
	if in != 2+len(pushers) || deadLettered != 2 {
		t.Fatalf("%d in the quarantine (%d dead-lettered), want %d (2)", in, deadLettered, 2+len(pushers))
	}
	// The broker dead-letters asynchronously: wait until the quarantine holds its bound.
	watch := r.channel()
	waittest.For(t, 20*time.Second, "the quarantine at its bound", func() bool {
		return r.readyMessages(watch, r.topo.QuarantineQueue) == 100
	})
	want := in - 100
	waittest.For(t, 20*time.Second, fmt.Sprintf("relay_quarantine_dropped_total at %d", want), func() bool {
		return int(testutil.ToFloat64(r.metrics.QuarantineDropped)) == want
	})
	if n := testutil.ToFloat64(r.metrics.ConnectionLosses); n != 0 {
		t.Errorf("%v broker connections lost while counting the drops", n)
	}
}
