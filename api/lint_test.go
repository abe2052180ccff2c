package api_test

import (
	"os/exec"
	"testing"

	"github.com/mercamap/relay/internal/testpeer"
)

// TestTheDocumentPassesRedoclysLint: Redocly CLI's recommended-strict rules (redocly.yaml
// says which are off, and why) find no error or warning in openapi.yaml.
func TestTheDocumentPassesRedoclysLint(t *testing.T) {
	redocly := testpeer.APITool(t, "redocly")
	cmd := exec.Command(redocly, "lint", "--config", "redocly.yaml", "--format", "stylish", "openapi.yaml")
	cmd.Env = append(cmd.Environ(), "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("redocly lint: %v\n%s", err, out)
	}
}
