// Package monitoring holds the relay's Prometheus alert rules and Grafana dashboard; its
// tests run promtool over the rules. cmd/relay's tests match every metric the rules and
// the dashboard name against a running relay's /metrics.
package monitoring

import (
	"os/exec"
	"testing"

	"github.com/mercamap/relay/internal/testpeer"
)

func promtool(t *testing.T, args ...string) {
	t.Helper()
	testpeer.Need(t, "promtool")
	out, err := exec.Command("promtool", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %v: %v\n%s", args, err, out)
	}
	t.Logf("promtool %v:\n%s", args, out)
}

func TestAlertRulesPassPromtoolCheck(t *testing.T) {
	promtool(t, "check", "rules", "relay-rules.yaml")
}

// The unit tests fire each alert on the series that should raise it, and not on its
// look-alikes (a paused destination behind, a quarantine that stopped growing).
func TestAlertRulesPassTheirPromtoolUnitTests(t *testing.T) {
	promtool(t, "test", "rules", "relay-rules.test.yaml")
}
