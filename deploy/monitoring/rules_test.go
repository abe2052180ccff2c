// Package monitoring holds the relay's Prometheus alert rules and Grafana dashboard; its
// tests run promtool over the rules. cmd/relay's tests match every metric the rules and
// the dashboard name against a running relay's /metrics.
package monitoring

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

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

// Every alert links to its runbook: a section of the operator guide named after it.
func TestEveryAlertLinksToItsRunbookSectionInTheOperatorGuide(t *testing.T) {
	rules, err := os.ReadFile("relay-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	guide, err := os.ReadFile("../../docs/operator-guide.md")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(rules, &file); err != nil {
		t.Fatal(err)
	}
	const base = "https://github.com/mercamap/relay/blob/main/docs/operator-guide.md#"
	n := 0
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			if want := base + strings.ToLower(r.Alert); r.Annotations["runbook_url"] != want {
				t.Errorf("%s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
			}
			if !strings.Contains(string(guide), "\n#### "+r.Alert+"\n") {
				t.Errorf("%s: docs/operator-guide.md has no runbook section \"#### %s\"", r.Alert, r.Alert)
			}
		}
	}
	if n < 10 {
		t.Fatalf("only %d alerts read from relay-rules.yaml", n)
	}
}
