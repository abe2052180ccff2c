package tracing

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/tracing/tracingtest"
)

func TestUnsignedKeepsShortValidValuesAndBoundsTheRest(t *testing.T) {
	euro := strings.Repeat("€", MaxAttribute) // 3 bytes a rune: the cut falls inside one
	cases := []struct{ in, want string }{
		{"studio.lerian.job.completed", "studio.lerian.job.completed"},
		{"", ""},
		{strings.Repeat("a", MaxAttribute), strings.Repeat("a", MaxAttribute)},
		{strings.Repeat("a", MaxAttribute+1), strings.Repeat("a", MaxAttribute)},
		{euro, euro[:MaxAttribute/3*3]},
		{"job\xff\xfe.completed", "job?.completed"},
		{strings.Repeat("\xff", 128<<10), "?"},
	}
	for _, c := range cases {
		got := unsigned(c.in)
		if got != c.want {
			t.Errorf("unsigned(%d bytes %q…) = %q, want %q", len(c.in), c.in[:min(len(c.in), 12)], got, c.want)
		}
		if len(got) > MaxAttribute || !utf8.ValidString(got) {
			t.Errorf("unsigned(%d bytes) is %d bytes, valid UTF-8 %v", len(c.in), len(got), utf8.ValidString(got))
		}
	}
}

// A publisher controls ce-type and ce-id (headers are not signed): a header frame's
// worth of ce-type, or one that is not UTF-8, reaches the collector bounded and valid,
// and the well-formed event exported in the same batch is not lost with it.
func TestConsumeSpanBoundsTheUnsignedTypeAndIDAndKeepsTheBatch(t *testing.T) {
	rcv := tracingtest.New(t)
	tr, err := New(config.Tracing{OTLPEndpoint: rcv.URL}, Options{Queue: "relay.job-events"})
	if err != nil {
		t.Fatal(err)
	}
	huge := "studio.lerian.job." + strings.Repeat("x", 128<<10)
	events := []struct{ id, typ string }{
		{"fetcher.job.completed.good-1", "studio.lerian.job.completed"},
		{"fetcher.job.completed.huge", huge},
		{"fetcher.job.completed.bad-utf8\xff", "studio.lerian.job.\xc3\x28completed"},
	}
	for _, e := range events {
		_, end := tr.StartConsume("", "", e.id, e.typ)
		end(nil)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tr.Shutdown(ctx); err != nil {
		t.Logf("shutdown: %v", err) // an export lost shows below
	}

	spans := rcv.Spans()
	byID := map[string]*tracepb.Span{}
	for _, s := range spans {
		byID[tracingtest.Attr(s, "cloudevents.event_id")] = s
		for _, a := range s.GetAttributes() {
			if v := a.GetValue().GetStringValue(); len(v) > MaxAttribute || !utf8.ValidString(v) {
				t.Errorf("span attribute %s: %d bytes, valid UTF-8 %v", a.GetKey(), len(v), utf8.ValidString(v))
			}
		}
	}
	if len(spans) != len(events) || byID["fetcher.job.completed.good-1"] == nil {
		t.Fatalf("the collector received %d spans of %d (the good event's: %v): a hostile header lost the batch", len(spans), len(events), byID["fetcher.job.completed.good-1"] != nil)
	}
	if got := tracingtest.Attr(byID["fetcher.job.completed.huge"], "cloudevents.event_type"); got != huge[:MaxAttribute] {
		t.Errorf("the huge ce-type's attribute is %d bytes, want its first %d", len(got), MaxAttribute)
	}
	if got := tracingtest.Attr(byID["fetcher.job.completed.bad-utf8?"], "cloudevents.event_type"); got != "studio.lerian.job.?(completed" {
		t.Errorf("the invalid ce-type's attribute is %q, want its invalid byte replaced", got)
	}
}

// shutdown exports every buffered span to the collector.
func shutdown(t *testing.T, tr *Tracer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tr.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}

// Every span names the build and the replica: service.version, service.instance.id (the
// pod's name) and k8s.pod.name, beside service.name.
func TestSpansCarryTheVersionAndThePodsName(t *testing.T) {
	rcv := tracingtest.New(t)
	tr, err := New(config.Tracing{OTLPEndpoint: rcv.URL, ServiceName: "relay-prod"},
		Options{Queue: "relay.job-events", Instance: "relay-7d9f8c6b5-x2x4q", PodName: "relay-7d9f8c6b5-x2x4q", Version: "v1.4.2"})
	if err != nil {
		t.Fatal(err)
	}
	_, end := tr.StartConsume("", "", "fetcher.job.completed.1", "studio.lerian.job.completed")
	end(nil)
	shutdown(t, tr)
	spans := rcv.Spans()
	if len(spans) != 1 {
		t.Fatalf("%d spans exported, want 1", len(spans))
	}
	res := rcv.Resource(spans[0])
	for k, want := range map[string]string{"service.name": "relay-prod", "service.version": "v1.4.2",
		"service.instance.id": "relay-7d9f8c6b5-x2x4q", "k8s.pod.name": "relay-7d9f8c6b5-x2x4q"} {
		if res[k] != want {
			t.Errorf("resource %s = %q, want %q (resource %v)", k, res[k], want, res)
		}
	}

	// Without a version given, the build's own (what relay_build_info reports).
	rcv = tracingtest.New(t)
	tr, err = New(config.Tracing{OTLPEndpoint: rcv.URL}, Options{Queue: "q"})
	if err != nil {
		t.Fatal(err)
	}
	_, end = tr.StartConsume("", "", "fetcher.job.completed.2", "studio.lerian.job.completed")
	end(nil)
	shutdown(t, tr)
	if v := rcv.Resource(rcv.Spans()[0])["service.version"]; v == "" || v != buildVersion() {
		t.Errorf("service.version %q, want the build's %q", v, buildVersion())
	}
}

// tracing.sample_ratio samples the traces the relay starts; a producer's trace follows
// the producer: sampled, it is kept whatever the ratio; not sampled, it is not exported.
func TestSampleRatioAppliesToTracesTheRelayStartsAndFollowsTheProducer(t *testing.T) {
	const sampled, unsampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "00-5bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
	for _, c := range []struct {
		ratio      float64
		wantRoots  int // of 50 traces the relay starts
		wantParent int // of the sampled producer's one
	}{{0, 0, 1}, {1, 50, 1}} {
		rcv := tracingtest.New(t)
		ratio := c.ratio
		tr, err := New(config.Tracing{OTLPEndpoint: rcv.URL, SampleRatio: &ratio}, Options{Queue: "q"})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 50 {
			_, end := tr.StartConsume("", "", fmt.Sprintf("root-%d", i), "studio.lerian.job.completed")
			end(nil)
		}
		for _, tp := range []string{sampled, unsampled} {
			_, end := tr.StartConsume(tp, "", tp[len(tp)-2:], "studio.lerian.job.completed")
			end(nil)
		}
		shutdown(t, tr)
		roots, parented, unsampledSeen := 0, 0, 0
		for _, s := range rcv.Spans() {
			switch id := tracingtest.Attr(s, "cloudevents.event_id"); {
			case strings.HasPrefix(id, "root-"):
				roots++
			case id == "01":
				parented++
			case id == "00":
				unsampledSeen++
			}
		}
		if roots != c.wantRoots || parented != c.wantParent || unsampledSeen != 0 {
			t.Errorf("sample_ratio %v: %d root traces of 50, %d of the sampled producer's, %d of the unsampled one's; want %d, %d, 0",
				c.ratio, roots, parented, unsampledSeen, c.wantRoots, c.wantParent)
		}
	}
}
