package tracing

import (
	"context"
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
	tr, err := New(config.Tracing{OTLPEndpoint: rcv.URL}, "relay.job-events")
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
