package main

import (
	"encoding/hex"
	"strings"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/mercamap/relay"
	"github.com/mercamap/relay/internal/jobevent"
	"github.com/mercamap/relay/internal/tracing/tracingtest"
)

func TestTraceContinuesTheProducersTraceparentFromConsumeToTheWrite(t *testing.T) {
	rcv := tracingtest.New(t)
	r := startObservedRelay(t, "tracing: {otlp_endpoint: \""+rcv.URL+"\", service_name: relay-test}\n")

	const traceID, producerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	job := jobevent.Job{ID: "0190f2a4-4444-7000-8000-000000000001", Status: "completed"}
	msg := jobevent.Build(job, r.exchange, r.key, time.Now())
	msg.Headers["traceparent"] = "00-" + traceID + "-" + producerSpan + "-01"
	msg.Headers["tracestate"] = "fetcher=worker"
	r.publish(t, job.RoutingKey(), msg)

	var consume, write *tracepb.Span
	waitUntil(t, 60*time.Second, "the consume and write spans in the producer's trace", func() bool {
		consume, write = nil, nil
		for _, s := range rcv.InTrace(traceID) {
			switch s.GetKind() {
			case tracepb.Span_SPAN_KIND_CONSUMER:
				consume = s
			case tracepb.Span_SPAN_KIND_PRODUCER:
				write = s
			}
		}
		return consume != nil && write != nil
	})
	if got := hex.EncodeToString(consume.GetParentSpanId()); got != producerSpan {
		t.Errorf("consume span's parent %s, want the producer's span %s", got, producerSpan)
	}
	if consume.GetTraceState() != "fetcher=worker" {
		t.Errorf("consume span's tracestate %q, want the producer's", consume.GetTraceState())
	}
	if !slicesEqualBytes(write.GetParentSpanId(), consume.GetSpanId()) {
		t.Errorf("write span's parent is not the consume span")
	}
	if tracingtest.Attr(consume, "cloudevents.event_id") != job.EventID() || tracingtest.Attr(write, "cloudevents.event_id") != job.EventID() ||
		tracingtest.Attr(write, "relay.destination") != "orders-bus" || tracingtest.Attr(write, "relay.outcome") != "delivered" {
		t.Errorf("span attributes: consume %v, write %v", consume.GetAttributes(), write.GetAttributes())
	}
	if rcv.ServiceName(write) != "relay-test" {
		t.Errorf("service.name %q, want tracing.service_name", rcv.ServiceName(write))
	}
	if res := rcv.Resource(write); res["service.version"] != relay.Version() || res["service.instance.id"] != "relay-test-pod-0" || res["k8s.pod.name"] != "relay-test-pod-0" {
		t.Errorf("resource %v: want service.version (VERSION) and the pod's name (POD_NAME) as service.instance.id and k8s.pod.name", res)
	}

	// The STS setup that gave the write its session is a span of its own.
	waitUntil(t, 60*time.Second, "the STS setup span", func() bool {
		for _, s := range rcv.Spans() {
			if s.GetName() == "relay sts setup eventbridge" && tracingtest.Attr(s, "relay.destination") == "orders-bus" &&
				tracingtest.Attr(s, "relay.sts.stage") == "session" {
				return true
			}
		}
		return false
	})

	// An event without a traceparent starts a trace of its own, written in the same trace.
	plain := jobevent.Job{ID: "0190f2a4-4444-7000-8000-000000000002", Status: "completed"}
	r.publish(t, plain.RoutingKey(), jobevent.Build(plain, r.exchange, r.key, time.Now()))
	waitUntil(t, 60*time.Second, "the plain event's consume and write spans in one new trace", func() bool {
		for _, s := range rcv.Spans() {
			if s.GetKind() != tracepb.Span_SPAN_KIND_CONSUMER || tracingtest.Attr(s, "cloudevents.event_id") != plain.EventID() {
				continue
			}
			if len(s.GetParentSpanId()) != 0 {
				t.Fatalf("a consume span without a producer's traceparent has a parent")
			}
			for _, w := range rcv.InTrace(hex.EncodeToString(s.GetTraceId())) {
				if w.GetKind() == tracepb.Span_SPAN_KIND_PRODUCER && slicesEqualBytes(w.GetParentSpanId(), s.GetSpanId()) {
					return true
				}
			}
		}
		return false
	})

	// Nothing of the trace reaches the customer's bus.
	waitUntil(t, 10*time.Second, "the events on the bus", func() bool { return len(r.bus.Entries()) == 2 })
	for _, e := range r.bus.Entries() {
		for _, secret := range []string{traceID, producerSpan, hex.EncodeToString(consume.GetSpanId()), "traceparent", "fetcher=worker"} {
			if strings.Contains(e.Detail+e.Source+e.DetailType, secret) || strings.Contains(strings.Join(e.Resources, " "), secret) {
				t.Errorf("the bus received %q: %+v", secret, e)
			}
		}
	}
}

func slicesEqualBytes(a, b []byte) bool { return len(a) > 0 && string(a) == string(b) }
