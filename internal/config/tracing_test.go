package config

import (
	"errors"
	"strings"
	"testing"
)

func TestTracingIsOffUnlessAnEndpointIsSet(t *testing.T) {
	c, err := Parse([]byte(doc(nil)), env(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Tracing.Enabled() {
		t.Fatalf("tracing on without a tracing: section: %+v", c.Tracing)
	}
	c, err = Parse([]byte(doc(map[string]string{"extra": "tracing: {otlp_endpoint: \"http://otel-collector:4318\"}"})), env(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Tracing.Enabled() || c.Tracing.OTLPEndpoint != "http://otel-collector:4318" || c.Tracing.ServiceNameOrDefault() != "relay" {
		t.Fatalf("tracing: %+v", c.Tracing)
	}
}

func TestTracingEndpointProblemsAreReportedAtTheirPath(t *testing.T) {
	for _, tc := range []struct{ value, says string }{
		{"otel-collector:4318", "must be an http:// or https:// URL"},
		{"grpc://otel-collector:4317", "must be an http:// or https:// URL"},
		{"http://:4318", "names no host"},
		{"http://user:pw@otel-collector:4318", "without credentials"},
	} {
		_, err := Parse([]byte(doc(map[string]string{"extra": "tracing: {otlp_endpoint: \"" + tc.value + "\"}"})), env(nil), nil)
		var problems Problems
		if !errors.As(err, &problems) || len(problems) != 1 || problems[0].Path != "tracing.otlp_endpoint" ||
			!strings.Contains(problems[0].Message, tc.says) {
			t.Errorf("otlp_endpoint %q: %v; want one problem at tracing.otlp_endpoint saying %q", tc.value, err, tc.says)
		}
		if err != nil && strings.Contains(err.Error(), "pw@") {
			t.Errorf("a problem repeats the endpoint's credentials: %v", err)
		}
	}
	_, err := Parse([]byte(doc(map[string]string{"extra": "tracing: {otlp_endpont: x}"})), env(nil), nil)
	if err == nil || !strings.Contains(err.Error(), "tracing.otlp_endpont") {
		t.Errorf("misspelt key: %v", err)
	}
}
