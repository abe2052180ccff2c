// Package tracing exports OpenTelemetry traces of the relay's work over OTLP/HTTP: one
// trace per event, from its consumption and Redis append to each destination's write,
// continuing the producer's W3C traceparent when the message carries one. It is off
// unless configured, and sets no OpenTelemetry global: no library and nothing sent to a
// customer's bus carries its context.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/mercamap/relay"
	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/failures"
)

// Tracer starts the relay's spans. A nil *Tracer is never handed to ingest or dispatch:
// they take no tracer at all when tracing is off.
type Tracer struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
	prop     propagation.TraceContext
	queue    string
}

// Options say what the resource and the consume spans name.
type Options struct {
	Queue string // the relay's queue, named on consume spans
	// Instance is service.instance.id: the pod's name (POD_NAME from the downward API,
	// else HOSTNAME), so a trace says which replica did the work.
	Instance string
	// PodName, when set (POD_NAME), is also k8s.pod.name.
	PodName string
	// Version is service.version; "" is this release's (VERSION, as relay_build_info says).
	Version string
}

// New returns a Tracer exporting to cfg.OTLPEndpoint, or nil when tracing is off.
func New(cfg config.Tracing, o Options) (*Tracer, error) {
	if !cfg.Enabled() {
		return nil, nil
	}
	u, err := url.Parse(cfg.OTLPEndpoint)
	if err != nil {
		return nil, fmt.Errorf("tracing.otlp_endpoint: %w", err)
	}
	opts := []otlptracehttp.Option{otlptracehttp.WithEndpoint(u.Host),
		otlptracehttp.WithURLPath(strings.TrimSuffix(u.Path, "/") + "/v1/traces")}
	if u.Scheme == "http" {
		opts = append(opts, otlptracehttp.WithInsecure())
	}
	// The client starts no connection until the first export.
	exp, err := otlptracehttp.New(context.Background(), opts...)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	if o.Version == "" {
		o.Version = buildVersion()
	}
	attrs := []attribute.KeyValue{semconv.ServiceName(cfg.ServiceNameOrDefault()), semconv.ServiceVersion(o.Version)}
	if o.Instance != "" {
		attrs = append(attrs, semconv.ServiceInstanceID(o.Instance))
	}
	if o.PodName != "" {
		attrs = append(attrs, semconv.K8SPodName(o.PodName))
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(resource.NewSchemaless(attrs...)),
		// A trace the relay starts is sampled at tracing.sample_ratio; a producer's trace
		// follows the producer's decision (sampled or not), so a trace is never cut in two.
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatioOrDefault()))))
	return &Tracer{provider: tp, tracer: tp.Tracer("github.com/mercamap/relay"), queue: o.Queue}, nil
}

// buildVersion is this release's number (VERSION, as relay version and
// relay_build_info say it).
func buildVersion() string { return relay.Version() }

// Shutdown exports the spans still buffered and stops the exporter.
func (t *Tracer) Shutdown(ctx context.Context) error { return t.provider.Shutdown(ctx) }

// parent is the span context a W3C traceparent (and tracestate) names; an invalid or
// empty traceparent gives none, and the span starts a trace of its own.
func (t *Tracer) parent(traceparent, tracestate string) context.Context {
	carrier := propagation.MapCarrier{}
	if traceparent != "" {
		carrier["traceparent"] = traceparent
		if tracestate != "" {
			carrier["tracestate"] = tracestate
		}
	}
	return t.prop.Extract(context.Background(), carrier)
}

// traceparent is the W3C traceparent of the span in ctx.
func (t *Tracer) traceparent(ctx context.Context) string {
	carrier := propagation.MapCarrier{}
	t.prop.Inject(ctx, carrier)
	return carrier["traceparent"]
}

// MaxAttribute bounds a span attribute read from a message's headers (ce-id, ce-type).
// The signature covers the body, not the headers, and the span starts before the
// duplicate check: without a bound, a publisher could put a header frame's worth
// (128 KiB) into every span, held in the export queue and sent to the collector.
const MaxAttribute = 256

// unsigned makes a header value fit a span attribute: at most MaxAttribute bytes, cut
// before a rune the cut would split, and valid UTF-8 (OTLP is protobuf, which refuses
// an invalid string and with it the export of the whole batch: everyone's spans).
func unsigned(s string) string {
	if len(s) > MaxAttribute {
		cut := MaxAttribute
		for back := 0; back < utf8.UTFMax-1 && !utf8.RuneStart(s[cut]); back++ {
			cut--
		}
		s = s[:cut]
	}
	return strings.ToValidUTF8(s, "?") // one byte for each invalid run: the bound holds
}

// StartConsume starts the span of one verified message, a child of the producer's
// traceparent when it sent one. It returns the span's own traceparent, which is stored
// with the event so every destination's write continues the trace, and the function
// that ends the span once the message is stored and acked (or not: err).
func (t *Tracer) StartConsume(traceparent, tracestate, eventID, eventType string) (string, func(error)) {
	ctx, span := t.tracer.Start(t.parent(traceparent, tracestate), "relay consume "+t.queue,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			semconv.MessagingSystemRabbitMQ,
			semconv.MessagingOperationTypeProcess,
			semconv.MessagingDestinationName(t.queue),
			attribute.String("cloudevents.event_id", unsigned(eventID)),
			attribute.String("cloudevents.event_type", unsigned(eventType)),
		))
	return t.traceparent(ctx), func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, "not stored: left in the broker")
		} else {
			span.AddEvent("stored in redis and acked")
		}
		span.End()
	}
}

// StartWrite starts the span of one write to one destination, a child of the event's
// stored traceparent. The returned function ends it with the write's outcome class and
// the card's sentence. The span's context goes nowhere else: the sink's request to the
// customer's bus carries nothing of it.
func (t *Tracer) StartWrite(traceparent string, dest destination.Destination, eventID string) func(outcome, message string) {
	_, span := t.tracer.Start(t.parent(traceparent, ""), "relay deliver "+string(dest.Connector),
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			attribute.String("relay.destination", dest.ID),
			attribute.String("relay.connector", string(dest.Connector)),
			attribute.String("relay.account", dest.Account),
			attribute.String("cloudevents.event_id", unsigned(eventID)),
		))
	return func(outcome, message string) {
		span.SetAttributes(attribute.String("relay.outcome", outcome))
		if outcome != "delivered" {
			span.SetStatus(codes.Error, message)
		}
		span.End()
	}
}

// StartSetup starts the span of one STS setup of an AWS destination: the probe with a
// wrong ExternalId (when it runs) and the session with the right one. It is a trace of
// its own (sampled at tracing.sample_ratio): a setup serves many writes. The returned
// function ends it with the stage it ended at ("probe", "session") and that stage's
// error (nil: the session was issued); the error's sentence is the card's.
func (t *Tracer) StartSetup(dest destination.Destination, probe bool) func(stage string, err error) {
	_, span := t.tracer.Start(context.Background(), "relay sts setup "+string(dest.Connector),
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String("rpc.system", "aws-api"),
			attribute.String("rpc.service", "STS"),
			attribute.String("rpc.method", "AssumeRole"),
			attribute.String("relay.destination", dest.ID),
			attribute.String("relay.connector", string(dest.Connector)),
			attribute.String("relay.account", dest.Account),
			attribute.String("aws.iam.role_arn", dest.RoleARN),
			attribute.Bool("relay.sts.probe", probe),
		))
	return func(stage string, err error) {
		span.SetAttributes(attribute.String("relay.sts.stage", stage))
		if err != nil {
			span.SetStatus(codes.Error, unsigned(failureSentence(err)))
		} else {
			span.AddEvent("session issued")
		}
		span.End()
	}
}

// failureSentence is err's sentence for the card when it has one, else its text.
func failureSentence(err error) string {
	var fe *failures.Error
	if errors.As(err, &fe) {
		return fe.Message
	}
	return err.Error()
}
