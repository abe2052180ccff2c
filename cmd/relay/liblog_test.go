package main

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/aws/smithy-go/logging"
)

func TestTheAWSSDKsWarningsAreJSONLinesWithTheirLevel(t *testing.T) {
	var out strings.Builder
	log := slog.New(slog.NewJSONHandler(&out, nil))
	awsLog(log).Logf(logging.Warn, "Response has no supported checksum. Not validating response payload for %s", "GetObject")
	awsLog(log).Logf(logging.Debug, "not shown at info")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("lines %q, want the warning alone (debug is below info)", lines)
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
		t.Fatalf("not JSON: %q", lines[0])
	}
	if rec["level"] != "WARN" || !strings.Contains(rec["msg"].(string), "GetObject") {
		t.Errorf("record %v, want level WARN and the SDK's message", rec)
	}
}
