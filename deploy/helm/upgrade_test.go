package helm

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/mercamap/relay/internal/testpeer"
)

// helm upgrade from the previous release's chart is a roll that can work: the
// Deployment's selector (immutable: a change fails the upgrade) and the Service's
// selector are the same, the strategy adds one new pod before an old one goes, each old
// pod gets the preStop and the grace period to finish its writes and free its leases,
// the new pods run this release's image, and the previous chart's config passes this
// release's check-config (the same values roll over).
func TestChartRollsOverThePreviousReleasesChart(t *testing.T) {
	prevCommit := testpeer.PreviousRelease(t)
	prevChart := filepath.Join(testpeer.ExtractCommit(t, prevCommit, "deploy/helm/relay"), "deploy/helm/relay")
	old, nu := renderChart(t, prevChart), render(t)

	for _, path := range [][]any{{"Deployment", "spec", "selector"}, {"Service", "spec", "selector"}} {
		o, n := old[path[0].(string)].get(path[1:]...), nu[path[0].(string)].get(path[1:]...)
		if o == nil || !reflect.DeepEqual(o, n) {
			t.Errorf("%v: the previous chart (%s) renders %v, this one %v: helm upgrade would fail or leave the old pods", path, prevCommit[:7], o, n)
		}
	}
	labels := nu["Deployment"].get("spec", "template", "metadata", "labels").(map[string]any)
	for k, v := range nu["Service"].get("spec", "selector").(map[string]any) {
		if labels[k] != v {
			t.Errorf("the new pods' label %s is %v, the Service selects %v: they would get no traffic", k, labels[k], v)
		}
	}
	strategy := nu["Deployment"].get("spec", "strategy")
	want := map[string]any{"type": "RollingUpdate", "rollingUpdate": map[string]any{"maxUnavailable": 0, "maxSurge": 1}}
	if !reflect.DeepEqual(strategy, want) {
		t.Errorf("strategy %v, want %v", strategy, want)
	}

	version, err := os.ReadFile("../../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	if image := container(nu)["image"].(string); !strings.HasSuffix(image, ":"+strings.TrimSpace(string(version))) {
		t.Errorf("the new pods run %s, want the image of release %s", image, strings.TrimSpace(string(version)))
	}
	sleep, _ := container(nu).get("lifecycle", "preStop", "sleep", "seconds").(int)
	grace, _ := nu["Deployment"].get("spec", "template", "spec", "terminationGracePeriodSeconds").(int)
	// preStop, then at most 30 s for the write in flight and 5 for the commit and release.
	if sleep < 1 || grace < sleep+30+5 {
		t.Errorf("preStop sleeps %d s and the grace period is %d s: want a preStop and grace ≥ preStop + 30 s write + 5 s release", sleep, grace)
	}

	// The previous chart's config (its defaults, as an upgrade with the same values
	// keeps) passes this release's check-config.
	cfg := filepath.Join(t.TempDir(), "relay.yaml")
	if err := os.WriteFile(cfg, []byte(old["ConfigMap"].get("data", "relay.yaml").(string)), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(relayBinary(t), "check-config", "--config", cfg)
	cmd.Env = deploymentEnv(t, nu)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("the previous chart's config fails this release's check-config: %v\n%s", err, out)
	}
}

// One release number everywhere: VERSION, the chart's version and appVersion, the
// Dockerfile's label and the newest CHANGELOG.md entry.
func TestChartAndImageNameTheReleaseOfVERSION(t *testing.T) {
	read := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	version := strings.TrimSpace(read("../../VERSION"))
	chart := read("relay/Chart.yaml")
	for _, line := range []string{"version: " + version, `appVersion: "` + version + `"`} {
		if !strings.Contains(chart, "\n"+line+"\n") {
			t.Errorf("relay/Chart.yaml lacks %q (VERSION is %s)", line, version)
		}
	}
	if !strings.Contains(read("../../Dockerfile"), "ARG VERSION="+version+"\n") {
		t.Errorf("the Dockerfile's label does not default to %s", version)
	}
	changelog := read("../../CHANGELOG.md")
	i := strings.Index(changelog, "\n## ")
	if i < 0 || !strings.HasPrefix(changelog[i+4:], version+" ") {
		t.Errorf("CHANGELOG.md's newest entry is not %s", version)
	}
	if !strings.Contains(changelog, "### Upgrading") {
		t.Error("CHANGELOG.md has no Upgrading section")
	}
}
