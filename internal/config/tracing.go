package config

import (
	"math"
	"net/url"
)

// Tracing turns on OpenTelemetry traces, exported over OTLP/HTTP. The zero value is off.
type Tracing struct {
	// OTLPEndpoint is the collector's OTLP/HTTP base URL (http://collector:4318); the
	// relay posts to <endpoint>/v1/traces. Empty: no traces.
	OTLPEndpoint string
	ServiceName  string // service.name on every span; default "relay"
	// SampleRatio is the share of traces the relay starts that are sampled (0 to 1;
	// nil: 1, all). Parent-based: a producer's trace follows the producer's decision.
	SampleRatio *float64
}

// SampleRatioOrDefault is tracing.sample_ratio, 1 when unset.
func (t Tracing) SampleRatioOrDefault() float64 {
	if t.SampleRatio == nil {
		return 1
	}
	return *t.SampleRatio
}

// Enabled reports whether traces are exported.
func (t Tracing) Enabled() bool { return t.OTLPEndpoint != "" }

// ServiceNameOrDefault is the service.name spans carry.
func (t Tracing) ServiceNameOrDefault() string {
	if t.ServiceName == "" {
		return "relay"
	}
	return t.ServiceName
}

func (p *parser) checkTracing(t *Tracing) {
	if r := t.SampleRatio; r != nil && (math.IsNaN(*r) || *r < 0 || *r > 1) {
		p.add("tracing.sample_ratio", "must be between 0 and 1 (0.1 samples one trace in ten the relay starts; a producer's sampled trace is always followed)")
	}
	if t.OTLPEndpoint == "" {
		return
	}
	const example = "http://otel-collector:4318"
	u, err := url.Parse(t.OTLPEndpoint)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https"):
		p.add("tracing.otlp_endpoint", "must be an http:// or https:// URL of an OTLP/HTTP collector, like %s", example)
	case u.Host == "" || u.Hostname() == "":
		p.add("tracing.otlp_endpoint", "names no host: write it like %s", example)
	case u.Port() != "" && !validPort(u.Port()):
		p.add("tracing.otlp_endpoint", "has an invalid port: write it like %s", example)
	case u.User != nil || u.RawQuery != "" || u.Fragment != "":
		p.add("tracing.otlp_endpoint", "must be a plain base URL, without credentials, query or fragment, like %s", example)
	}
}
