package ingest

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/jobevent"
	"github.com/mercamap/relay/internal/testpeer"
	"github.com/mercamap/relay/internal/tracing"
	"github.com/mercamap/relay/internal/tracing/tracingtest"
	"github.com/mercamap/relay/internal/waittest"
)

// Headers are not signed, and the consume span starts before the duplicate check: a
// copy of a signed message republished with 64 KiB of ce-type that is not UTF-8 reaches
// the collector bounded and valid, and the genuine event's span, in the same export, is
// not lost with it (OTLP's protobuf refuses a batch holding one invalid string).
func TestHostileCETypeOnACopyReachesTheSpanBoundedAndLosesNoSpan(t *testing.T) {
	rcv := tracingtest.New(t)
	tr, err := tracing.New(config.Tracing{OTLPEndpoint: rcv.URL}, tracing.Options{Queue: "relay.job-events"})
	if err != nil {
		t.Fatal(err)
	}
	r := newRig(t, testpeer.SharedRabbitMQ(t), testpeer.RedisURL(t), "relay-test-hostile-cetype")
	r.opts.Tracer = tr
	r.start()
	job := jobevent.Job{ID: "0190f2a4-cccc-7000-8000-000000000001", Status: "completed"}
	genuine := jobevent.Build(job, r.topo.Exchange, r.key, time.Now())
	hostile := genuine
	hostile.Headers = map[string]any{}
	for k, v := range genuine.Headers {
		hostile.Headers[k] = v
	}
	hostile.Headers["ce-type"] = []byte(strings.Repeat("\xff", 64<<10))
	r.publish(r.channel(), job.RoutingKey(), genuine, hostile)
	waittest.For(t, 10*time.Second, "both messages acked", func() bool { return testutil.ToFloat64(r.metrics.Acked) == 2 })
	r.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tr.Shutdown(ctx); err != nil {
		t.Logf("shutdown: %v", err) // an export lost shows below
	}

	spans := rcv.Spans()
	if len(spans) != 2 {
		t.Fatalf("the collector received %d consume spans, want 2 (the genuine and the copy)", len(spans))
	}
	types := map[string]bool{}
	for _, s := range spans {
		typ := tracingtest.Attr(s, "cloudevents.event_type")
		if len(typ) > tracing.MaxAttribute || !utf8.ValidString(typ) {
			t.Errorf("a span's ce-type is %d bytes, valid UTF-8 %v", len(typ), utf8.ValidString(typ))
		}
		types[typ] = true
	}
	if !types["studio.lerian.job.completed"] {
		t.Errorf("span ce-types %v: the genuine event's span is missing", types)
	}
	if entries := r.log(); len(entries) != 1 || entries[0].CEType != "studio.lerian.job.completed" {
		t.Errorf("log %+v, want the genuine event once", entries)
	}
}
