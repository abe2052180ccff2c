package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

func TestRunNamesItsModesAndRefusesOthers(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), nil, &stdout, &stderr); !errors.Is(err, errUsage) || !strings.Contains(stderr.String(), "usage: loadtest drill|bench") {
		t.Fatalf("no mode: %v, stderr %q", err, stderr.String())
	}
	if code := exitCode(errUsage, &stderr); code != 2 {
		t.Fatalf("a usage error exits %d, want 2", code)
	}
	err := run(context.Background(), []string{"soak"}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), `unknown mode "soak"`) {
		t.Fatalf("an unknown mode: %v", err)
	}
	stderr.Reset()
	if code := exitCode(err, &stderr); code != 1 || !strings.HasPrefix(stderr.String(), "loadtest: unknown mode") {
		t.Fatalf("an unknown mode exits %d with %q", code, stderr.String())
	}
	// A drill refuses a peer off loopback before it starts anything.
	if err := run(context.Background(), []string{"drill", "-amqp", "amqp://10.0.0.1:5672/", "-redis", "redis://127.0.0.1:6379"}, &stdout, &stderr); err == nil || !strings.Contains(err.Error(), "only 127.0.0.1 is allowed") {
		t.Fatalf("a drill against another host: %v", err)
	}
	if stdout.Len() != 0 {
		t.Fatalf("nothing ran, yet stdout holds %q", stdout.String())
	}
}
