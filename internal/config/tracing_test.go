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

// tracing.sample_ratio: 1 unless set, any share from 0 to 1, and a problem at its path
// outside that or when it is no number.
func TestTracingSampleRatioIsOneUnlessSetAndBetweenZeroAndOne(t *testing.T) {
	parse := func(tracing string) (*Config, error) {
		return Parse([]byte(doc(map[string]string{"extra": "tracing: " + tracing})), env(nil), nil)
	}
	for tracing, want := range map[string]float64{
		`{otlp_endpoint: "http://c:4318"}`:                    1,
		`{otlp_endpoint: "http://c:4318", sample_ratio: 0.1}`: 0.1,
		`{otlp_endpoint: "http://c:4318", sample_ratio: 0}`:   0,
		`{otlp_endpoint: "http://c:4318", sample_ratio: 1}`:   1,
	} {
		c, err := parse(tracing)
		if err != nil || c.Tracing.SampleRatioOrDefault() != want {
			t.Errorf("%s: ratio %v (%v), want %v", tracing, c.Tracing.SampleRatioOrDefault(), err, want)
		}
	}
	for _, bad := range []string{"1.5", "-0.1", ".nan", "all"} {
		_, err := parse(`{otlp_endpoint: "http://c:4318", sample_ratio: ` + bad + `}`)
		var problems Problems
		if !errors.As(err, &problems) || len(problems) != 1 || problems[0].Path != "tracing.sample_ratio" {
			t.Errorf("sample_ratio %s: %v; want one problem at tracing.sample_ratio", bad, err)
		}
	}
}
