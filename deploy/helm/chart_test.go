// Package helm holds the relay's Helm chart (relay/); its tests lint and render the chart
// with Helm built from the Go module proxy and check what it renders against the relay
// itself: the probe and metrics paths answer, the mounted config passes check-config.
package helm

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/mercamap/relay/internal/api/apitest"
	"github.com/mercamap/relay/internal/testpeer"
)

// helmVersion is the Helm the chart is checked with.
const helmVersion = "v3.22.0"

var (
	helmOnce sync.Once
	helmPath string
	helmErr  error
)

// helm runs Helm, built once per machine into a tool directory from the module proxy
// (a cold build takes minutes; later test runs reuse the binary).
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	testpeer.Need(t, "go")
	helmOnce.Do(func() {
		cache, err := os.UserCacheDir()
		if err != nil {
			cache = os.TempDir()
		}
		dir := filepath.Join(cache, "relay-test", "helm-"+helmVersion)
		helmPath = filepath.Join(dir, "helm")
		if _, err := os.Stat(helmPath); err == nil {
			return
		}
		cmd := exec.Command("go", "install", "helm.sh/helm/v3/cmd/helm@"+helmVersion)
		cmd.Dir = os.TempDir() // outside this module: its go.mod plays no part
		cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=")
		if out, err := cmd.CombinedOutput(); err != nil {
			helmErr = errors.New("go install helm: " + err.Error() + "\n" + string(out))
		}
	})
	if helmErr != nil {
		t.Fatal(helmErr)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(helmPath, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String() + stderr.String(), err
	}
	return stdout.String(), nil
}

// manifest is one rendered object, decoded loosely.
type manifest map[string]any

func (m manifest) get(path ...any) any {
	var v any = map[string]any(m)
	for _, p := range path {
		switch k := p.(type) {
		case string:
			mv, _ := v.(map[string]any)
			v = mv[k]
		case int:
			lv, _ := v.([]any)
			if k >= len(lv) {
				return nil
			}
			v = lv[k]
		}
	}
	return v
}

// render runs helm template with the given --set values and returns the objects by kind.
func render(t *testing.T, sets ...string) map[string]manifest {
	t.Helper()
	args := []string{"template", "relay", "relay"}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	out, err := helm(t, args...)
	if err != nil {
		t.Fatalf("helm %v: %v\n%s", args, err, out)
	}
	objs := map[string]manifest{}
	dec := yaml.NewDecoder(strings.NewReader(out))
	for {
		var raw map[string]any // nested mappings decode as map[string]any too
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("rendered manifests: %v", err)
		}
		if raw == nil {
			continue
		}
		m := manifest(raw)
		kind, _ := m["kind"].(string)
		if _, dup := objs[kind]; dup {
			t.Fatalf("two %s objects rendered", kind)
		}
		objs[kind] = m
	}
	return objs
}

func TestChartPassesHelmLint(t *testing.T) {
	for _, sets := range [][]string{nil, {"serviceMonitor.enabled=true", "replicaCount=1"}} {
		args := []string{"lint", "--strict", "relay"}
		for _, s := range sets {
			args = append(args, "--set", s)
		}
		if out, err := helm(t, args...); err != nil {
			t.Errorf("helm %v: %v\n%s", args, err, out)
		}
	}
}

func TestChartRendersEveryObjectLockedDown(t *testing.T) {
	objs := render(t, "serviceMonitor.enabled=true")
	for _, kind := range []string{"ConfigMap", "Deployment", "Service", "ServiceAccount", "PodDisruptionBudget", "ServiceMonitor"} {
		if objs[kind] == nil {
			t.Errorf("no %s rendered", kind)
		}
	}
	d := objs["Deployment"]
	if d.get("spec", "replicas") != 2 {
		t.Errorf("replicas %v, want 2", d.get("spec", "replicas"))
	}
	pod := d.get("spec", "template", "spec").(map[string]any)
	c := manifest(pod).get("containers", 0).(map[string]any)
	checks := map[string][2]any{
		"pod runAsNonRoot":           {manifest(pod).get("securityContext", "runAsNonRoot"), true},
		"pod runAsUser":              {manifest(pod).get("securityContext", "runAsUser"), 65532},
		"readOnlyRootFilesystem":     {manifest(c).get("securityContext", "readOnlyRootFilesystem"), true},
		"allowPrivilegeEscalation":   {manifest(c).get("securityContext", "allowPrivilegeEscalation"), false},
		"capabilities dropped":       {manifest(c).get("securityContext", "capabilities", "drop", 0), "ALL"},
		"memory limit":               {manifest(c).get("resources", "limits", "memory"), "512Mi"},
		"cpu request":                {manifest(c).get("resources", "requests", "cpu"), "100m"},
		"no service account token":   {manifest(pod).get("automountServiceAccountToken"), false},
		"config mounted from":        {manifest(pod).get("volumes", 0, "configMap", "name"), objs["ConfigMap"].get("metadata", "name")},
		"secret read from existing":  {manifest(c).get("env", 0, "valueFrom", "secretKeyRef", "name"), "relay-secrets"},
		"service selects the pods":   {objs["Service"].get("spec", "selector", "app.kubernetes.io/instance"), d.get("spec", "template", "metadata", "labels", "app.kubernetes.io/instance")},
		"pdb keeps one":              {objs["PodDisruptionBudget"].get("spec", "minAvailable"), 1},
		"servicemonitor port":        {objs["ServiceMonitor"].get("spec", "endpoints", 0, "port"), "http"},
		"readiness probe port":       {manifest(c).get("readinessProbe", "httpGet", "port"), "http"},
		"container port is the http": {manifest(c).get("ports", 0, "name"), "http"},
	}
	for what, c := range checks {
		if c[0] != c[1] {
			t.Errorf("%s: %v, want %v", what, c[0], c[1])
		}
	}
	if objs := render(t, "replicaCount=1"); objs["PodDisruptionBudget"] != nil || objs["ServiceMonitor"] != nil {
		t.Errorf("one replica renders a PodDisruptionBudget that would block every drain, or the ServiceMonitor is on by default")
	}
}

func TestChartRefusesAnAPIListenTheProbesCannotReach(t *testing.T) {
	out, err := helm(t, "template", "relay", "relay", "--set", "config.api.listen=127.0.0.1:8080")
	if err == nil || !strings.Contains(out, "config.api.listen") {
		t.Fatalf("api.listen on loopback rendered (probes would fail): %v\n%s", err, out)
	}
}

// The probe and scrape paths the chart renders answer on the relay's API (real Redis
// behind it), and none is a 404.
func TestChartProbeAndMetricsPathsAnswerOnTheRelay(t *testing.T) {
	objs := render(t, "serviceMonitor.enabled=true")
	c := manifest(objs["Deployment"].get("spec", "template", "spec").(map[string]any)).get("containers", 0).(map[string]any)
	paths := map[string]string{
		"readiness":      manifest(c).get("readinessProbe", "httpGet", "path").(string),
		"liveness":       manifest(c).get("livenessProbe", "httpGet", "path").(string),
		"servicemonitor": objs["ServiceMonitor"].get("spec", "endpoints", 0, "path").(string),
	}
	rig := apitest.New(t, apitest.Options{})
	for what, path := range paths {
		resp, err := http.Get(rig.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s path %s answers %d on the relay, want 200", what, path, resp.StatusCode)
		}
	}
}

// The ConfigMap's relay.yaml passes relay check-config with exactly the environment the
// Deployment gives the container: every env: reference has its secretKeyRef.
func TestChartConfigPassesCheckConfigWithTheDeploymentsEnvironment(t *testing.T) {
	relay := filepath.Join(t.TempDir(), "relay")
	if out, err := exec.Command("go", "build", "-o", relay, "../../cmd/relay").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, sets := range [][]string{nil, {"config.tracing.otlp_endpoint=http://otel-collector:4318"}} {
		objs := render(t, sets...)
		dir := t.TempDir()
		cfg := filepath.Join(dir, "relay.yaml")
		if err := os.WriteFile(cfg, []byte(objs["ConfigMap"].get("data", "relay.yaml").(string)), 0o600); err != nil {
			t.Fatal(err)
		}
		c := manifest(objs["Deployment"].get("spec", "template", "spec").(map[string]any)).get("containers", 0).(map[string]any)
		env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
		samples := map[string]string{ // what each Secret key would hold
			"RELAY_RABBITMQ_URL":        "amqps://relay:pw@rabbitmq.example.internal:5671/",
			"RELAY_REDIS_URL":           "rediss://:pw@redis.example.internal:6379/0",
			"FETCHER_EXTERNAL_HMAC_KEY": strings.Repeat("ab", 32),
			"RELAY_ADMIN_TOKEN":         "admin-token-0123456789abcdef",
		}
		for _, e := range c["env"].([]any) {
			name := e.(map[string]any)["name"].(string)
			v, ok := samples[name]
			if !ok {
				t.Fatalf("the Deployment sets %s, which the test has no sample value for", name)
			}
			env = append(env, name+"="+v)
		}
		cmd := exec.Command(relay, "check-config", "--config", cfg)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("the chart's config (%v) fails check-config: %v\n%s", sets, err, out)
		}
	}
}
