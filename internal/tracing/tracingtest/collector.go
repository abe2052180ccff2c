// Package tracingtest is an OTLP/HTTP trace collector for tests: it decodes each export
// the relay's exporter posts, as a real collector does, and keeps the spans. It never
// stands in for the relay's own tracing: the spans it holds went through the real SDK
// and exporter.
package tracingtest

import (
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Collector receives OTLP/HTTP protobuf trace exports at URL/v1/traces.
type Collector struct {
	URL string // the endpoint to give tracing.otlp_endpoint

	mu        sync.Mutex
	spans     []*tracepb.Span
	names     map[string]string            // service.name by span id (hex)
	resources map[string]map[string]string // every string resource attribute by span id (hex)
}

// New starts a collector, closed when the test ends. An export it cannot decode is
// answered 400, as a collector does.
func New(t testing.TB) *Collector {
	c := &Collector{names: map[string]string{}, resources: map[string]map[string]string{}}
	srv := httptest.NewServer(http.HandlerFunc(c.export))
	t.Cleanup(srv.Close)
	c.URL = srv.URL
	return c
}

func (c *Collector) export(w http.ResponseWriter, req *http.Request) {
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
	c.mu.Lock()
	for _, rs := range export.GetResourceSpans() {
		res := map[string]string{}
		for _, a := range rs.GetResource().GetAttributes() {
			res[a.GetKey()] = a.GetValue().GetStringValue()
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				c.spans = append(c.spans, s)
				c.names[hex.EncodeToString(s.GetSpanId())] = res["service.name"]
				c.resources[hex.EncodeToString(s.GetSpanId())] = res
			}
		}
	}
	c.mu.Unlock()
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// Spans returns every span received so far.
func (c *Collector) Spans() []*tracepb.Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*tracepb.Span(nil), c.spans...)
}

// InTrace returns the spans of one trace (hex id).
func (c *Collector) InTrace(traceID string) []*tracepb.Span {
	var out []*tracepb.Span
	for _, s := range c.Spans() {
		if hex.EncodeToString(s.GetTraceId()) == traceID {
			out = append(out, s)
		}
	}
	return out
}

// ServiceName is the service.name of the resource s was exported under.
func (c *Collector) ServiceName(s *tracepb.Span) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.names[hex.EncodeToString(s.GetSpanId())]
}

// Resource is the string attributes of the resource s was exported under
// (service.name, service.version, service.instance.id, …).
func (c *Collector) Resource(s *tracepb.Span) map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.resources[hex.EncodeToString(s.GetSpanId())]
}

// Attr is s's string attribute key ("" when absent).
func Attr(s *tracepb.Span, key string) string {
	for _, a := range s.GetAttributes() {
		if a.GetKey() == key {
			return a.GetValue().GetStringValue()
		}
	}
	return ""
}
