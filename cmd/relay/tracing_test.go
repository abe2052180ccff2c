package main

import (
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/mercamap/relay/internal/jobevent"
)

// otlpReceiver is an OTLP/HTTP trace receiver: it decodes each protobuf export request
// as a collector does and keeps the spans.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []*tracepb.Span
	names map[string]string // service.name by span id
}

func newOTLPReceiver(t *testing.T) (*otlpReceiver, string) {
	r := &otlpReceiver{names: map[string]string{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "not an OTLP/HTTP protobuf trace export", http.StatusBadRequest)
			return
		}
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		raw, err := io.ReadAll(body)
		var export collectortrace.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(raw, &export)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range export.GetResourceSpans() {
			service := ""
			for _, a := range rs.GetResource().GetAttributes() {
				if a.GetKey() == "service.name" {
					service = a.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					r.spans = append(r.spans, s)
					r.names[hex.EncodeToString(s.GetSpanId())] = service
				}
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	return r, srv.URL
}

func (r *otlpReceiver) all() []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*tracepb.Span(nil), r.spans...)
}

// inTrace returns the spans of one trace (hex id).
func (r *otlpReceiver) inTrace(traceID string) []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range r.spans {
		if hex.EncodeToString(s.GetTraceId()) == traceID {
			out = append(out, s)
		}
	}
	return out
}

func attr(s *tracepb.Span, key string) string {
	for _, a := range s.GetAttributes() {
		if a.GetKey() == key {
			return a.GetValue().GetStringValue()
		}
	}
	return ""
}

func TestTraceContinuesTheProducersTraceparentFromConsumeToTheWrite(t *testing.T) {
	rcv, endpoint := newOTLPReceiver(t)
	r := startObservedRelay(t, "tracing: {otlp_endpoint: \""+endpoint+"\", service_name: relay-test}\n")

	const traceID, producerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	job := jobevent.Job{ID: "0190f2a4-4444-7000-8000-000000000001", Status: "completed"}
	msg := jobevent.Build(job, r.exchange, r.key, time.Now())
	msg.Headers["traceparent"] = "00-" + traceID + "-" + producerSpan + "-01"
	msg.Headers["tracestate"] = "fetcher=worker"
	r.publish(t, job.RoutingKey(), msg)

	var consume, write *tracepb.Span
	waitUntil(t, 60*time.Second, "the consume and write spans in the producer's trace", func() bool {
		consume, write = nil, nil
		for _, s := range rcv.inTrace(traceID) {
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
	if attr(consume, "cloudevents.event_id") != job.EventID() || attr(write, "cloudevents.event_id") != job.EventID() ||
		attr(write, "relay.destination") != "orders-bus" || attr(write, "relay.outcome") != "delivered" {
		t.Errorf("span attributes: consume %v, write %v", consume.GetAttributes(), write.GetAttributes())
	}
	if rcv.names[hex.EncodeToString(write.GetSpanId())] != "relay-test" {
		t.Errorf("service.name %q, want tracing.service_name", rcv.names[hex.EncodeToString(write.GetSpanId())])
	}

	// An event without a traceparent starts a trace of its own, written in the same trace.
	plain := jobevent.Job{ID: "0190f2a4-4444-7000-8000-000000000002", Status: "completed"}
	r.publish(t, plain.RoutingKey(), jobevent.Build(plain, r.exchange, r.key, time.Now()))
	waitUntil(t, 60*time.Second, "the plain event's consume and write spans in one new trace", func() bool {
		for _, s := range rcv.all() {
			if s.GetKind() != tracepb.Span_SPAN_KIND_CONSUMER || attr(s, "cloudevents.event_id") != plain.EventID() {
				continue
			}
			if len(s.GetParentSpanId()) != 0 {
				t.Fatalf("a consume span without a producer's traceparent has a parent")
			}
			for _, w := range rcv.inTrace(hex.EncodeToString(s.GetTraceId())) {
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
