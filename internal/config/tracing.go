package config

import "net/url"

// Tracing turns on OpenTelemetry traces, exported over OTLP/HTTP. The zero value is off.
type Tracing struct {
	// OTLPEndpoint is the collector's OTLP/HTTP base URL (http://collector:4318); the
	// relay posts to <endpoint>/v1/traces. Empty: no traces.
	OTLPEndpoint string
	ServiceName  string // service.name on every span; default "relay"
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
