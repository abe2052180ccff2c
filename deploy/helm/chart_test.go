// Package helm holds the relay's Helm chart (relay/); its tests lint and render the chart
// with Helm built from the Go module proxy and check what it renders against the relay
// itself: the probe and metrics paths answer, the mounted config passes check-config.
package helm

import (
	"bytes"
	"errors"
	"fmt"
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
	var flags []string
	for _, s := range sets {
		flags = append(flags, "--set", s)
	}
	return renderFlags(t, flags...)
}

// renderFlags runs helm template of a release named relay with the given flags
// (--set, -f, -n, …) and returns the objects by kind.
func renderFlags(t *testing.T, flags ...string) map[string]manifest {
	t.Helper()
	args := append([]string{"template", "relay", "relay"}, flags...)
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
	for _, kind := range []string{"ConfigMap", "Deployment", "Service", "ServiceAccount", "PodDisruptionBudget", "ServiceMonitor", "NetworkPolicy"} {
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
		"servicemonitor port":        {objs["ServiceMonitor"].get("spec", "endpoints", 0, "port"), "metrics"},
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
		base := rig.URL
		if what == "servicemonitor" {
			base = rig.MetricsURL // /metrics is on api.metrics_listen only
		}
		resp, err := http.Get(base + path)
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

// relayConfig is the relay.yaml the ConfigMap mounts, decoded.
func relayConfig(t *testing.T, objs map[string]manifest) manifest {
	t.Helper()
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(objs["ConfigMap"].get("data", "relay.yaml").(string)), &cfg); err != nil {
		t.Fatalf("the ConfigMap's relay.yaml: %v", err)
	}
	return manifest(cfg)
}

// container is the relay's container in the rendered Deployment.
func container(objs map[string]manifest) manifest {
	return manifest(objs["Deployment"].get("spec", "template", "spec", "containers", 0).(map[string]any))
}

// namedPort is the entry of ports (a container's or a Service's) with the given name.
func namedPort(ports any, name string) manifest {
	list, _ := ports.([]any)
	for _, p := range list {
		if m, ok := p.(map[string]any); ok && m["name"] == name {
			return manifest(m)
		}
	}
	return nil
}

// rulesByPort maps each port of the NetworkPolicy's ingress rules to the peers (from)
// its rule admits; a port no rule names is absent.
func rulesByPort(t *testing.T, np manifest) map[int][]any {
	t.Helper()
	if np == nil {
		t.Fatal("no NetworkPolicy rendered")
	}
	if got, _ := np.get("spec", "policyTypes").([]any); len(got) != 1 || got[0] != "Ingress" {
		t.Errorf("policyTypes %v, want [Ingress] (egress stays open)", got)
	}
	rules := map[int][]any{}
	ingress, _ := np.get("spec", "ingress").([]any)
	for i := range ingress {
		r := manifest(ingress[i].(map[string]any))
		from, _ := r["from"].([]any)
		if len(from) == 0 {
			t.Errorf("ingress rule %d has no from: it admits everyone", i)
		}
		ports, _ := r["ports"].([]any)
		if len(ports) == 0 {
			t.Errorf("ingress rule %d names no port: it opens every port", i)
		}
		for _, p := range ports {
			rules[p.(map[string]any)["port"].(int)] = from
		}
	}
	return rules
}

// The policy admits the API port only from the pods labelled as its clients and the
// metrics port only from the monitoring namespace; what the values name replaces them,
// and an empty list admits no one (not everyone, as a rule with no from would).
func TestChartNetworkPolicyAdmitsTheAPIAndMetricsOnlyFromTheNamedPeers(t *testing.T) {
	rules := rulesByPort(t, render(t)["NetworkPolicy"])
	want := map[int]string{
		8080: "[map[podSelector:map[matchLabels:map[relay-api-client:true]]]]",
		9090: "[map[namespaceSelector:map[matchLabels:map[kubernetes.io/metadata.name:monitoring]]]]",
	}
	if len(rules) != len(want) {
		t.Errorf("the policy opens ports %v, want only 8080 (API) and 9090 (metrics)", rules)
	}
	for port, peers := range want {
		if got := fmt.Sprint(rules[port]); got != peers {
			t.Errorf("port %d admits %s, want %s", port, got, peers)
		}
	}

	dir := t.TempDir()
	values := filepath.Join(dir, "values.yaml")
	if err := os.WriteFile(values, []byte(`
networkPolicy:
  api:
    from:
      - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: ingress-nginx}}
        podSelector: {matchLabels: {app.kubernetes.io/name: ingress-nginx}}
  metrics:
    from:
      - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: observability}}
        podSelector: {matchLabels: {app.kubernetes.io/name: prometheus}}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	rules = rulesByPort(t, renderFlags(t, "-f", values)["NetworkPolicy"])
	if got := fmt.Sprint(rules[8080]); !strings.Contains(got, "ingress-nginx") || strings.Contains(got, "relay-api-client") {
		t.Errorf("with networkPolicy.api.from set, the API admits %s, want only the ingress controller", got)
	}
	if got := fmt.Sprint(rules[9090]); !strings.Contains(got, "prometheus") || strings.Contains(got, "monitoring") {
		t.Errorf("with networkPolicy.metrics.from set, metrics admit %s, want only the Prometheus pods", got)
	}

	rules = rulesByPort(t, render(t, "networkPolicy.api.from=null")["NetworkPolicy"])
	if _, open := rules[8080]; open || rules[9090] == nil {
		t.Errorf("networkPolicy.api.from empty: rules %v, want no rule for 8080 and metrics kept", rules)
	}
	np := render(t, "networkPolicy.api.from=null", "networkPolicy.metrics.namespace=")["NetworkPolicy"]
	if ingress, ok := np.get("spec", "ingress").([]any); !ok || len(ingress) != 0 {
		t.Errorf("both lists empty: ingress %v, want [] (no one admitted)", np.get("spec", "ingress"))
	}
	if render(t, "networkPolicy.enabled=false")["NetworkPolicy"] != nil {
		t.Errorf("networkPolicy.enabled=false still renders a NetworkPolicy")
	}
}

// /metrics has a port of its own, end to end: the relay listens for it there
// (api.metrics_listen), the container and the Service expose it as metrics, and the
// ServiceMonitor scrapes that port, not the API's.
func TestChartServesAndScrapesMetricsOnTheirOwnPort(t *testing.T) {
	objs := render(t, "serviceMonitor.enabled=true", "metricsPort=9191")
	api := relayConfig(t, objs).get("api")
	cfg := manifest(api.(map[string]any))
	if cfg["metrics_listen"] != ":9191" || cfg["listen"] != ":8080" {
		t.Errorf("api.listen %v, api.metrics_listen %v, want :8080 and :9191", cfg["listen"], cfg["metrics_listen"])
	}
	c := container(objs)
	if p := namedPort(c.get("ports"), "metrics"); p == nil || p["containerPort"] != 9191 {
		t.Errorf("container port metrics: %v, want 9191", p)
	}
	svc := namedPort(objs["Service"].get("spec", "ports"), "metrics")
	if svc == nil || svc["targetPort"] != "metrics" || svc["port"] != 9191 {
		t.Errorf("Service port metrics: %v, want 9191 targeting the container's metrics port", svc)
	}
	sm := objs["ServiceMonitor"].get("spec", "endpoints", 0)
	if ep := manifest(sm.(map[string]any)); ep["port"] != "metrics" || ep["path"] != "/metrics" {
		t.Errorf("ServiceMonitor endpoint %v, want /metrics on port metrics", ep)
	}
	if _, open := rulesByPort(t, objs["NetworkPolicy"])[9191]; !open {
		t.Errorf("the NetworkPolicy does not admit the scraper to the metrics port 9191")
	}
	// The probes stay on the API port: health routes answer whatever the Host.
	if c.get("livenessProbe", "httpGet", "port") != "http" || c.get("readinessProbe", "httpGet", "port") != "http" {
		t.Errorf("probes on %v and %v, want the API port http", c.get("livenessProbe", "httpGet", "port"), c.get("readinessProbe", "httpGet", "port"))
	}
	out, err := helm(t, "template", "relay", "relay", "--set", "metricsPort=8080")
	if err == nil || !strings.Contains(out, "metricsPort") {
		t.Errorf("metricsPort = the API's port rendered: %v\n%s", err, out)
	}
	out, err = helm(t, "template", "relay", "relay", "--set", "config.api.metrics_listen=0.0.0.0:8080")
	if err == nil || !strings.Contains(out, "config.api.metrics_listen") {
		t.Errorf("a config.api.metrics_listen other than metricsPort rendered: %v\n%s", err, out)
	}
}

// api.allowed_hosts is the Service's names in the release's namespace and the values'
// extra names, nothing else; the chart refuses a list written into config instead.
func TestChartSetsAllowedHostsToTheServicesNames(t *testing.T) {
	hosts := func(objs map[string]manifest) string {
		return fmt.Sprint(relayConfig(t, objs).get("api", "allowed_hosts"))
	}
	objs := renderFlags(t, "-n", "payments")
	if svc := objs["Service"].get("metadata", "name"); svc != "relay" {
		t.Fatalf("Service named %v, want relay", svc)
	}
	if got, want := hosts(objs), "[relay relay.payments relay.payments.svc relay.payments.svc.cluster.local localhost 127.0.0.1]"; got != want {
		t.Errorf("allowed_hosts %s, want %s", got, want)
	}
	objs = renderFlags(t, "-n", "payments", "--set", "allowedHosts={relay.example.com}", "--set", "clusterDomain=corp.internal")
	if got, want := hosts(objs), "[relay relay.payments relay.payments.svc relay.payments.svc.corp.internal relay.example.com]"; got != want {
		t.Errorf("allowed_hosts with allowedHosts and clusterDomain set: %s, want %s", got, want)
	}
	out, err := helm(t, "template", "relay", "relay", "--set", "config.api.allowed_hosts={evil.example}")
	if err == nil || !strings.Contains(out, "config.api.allowed_hosts") {
		t.Errorf("config.api.allowed_hosts written in values rendered: %v\n%s", err, out)
	}
}

// A secret written in values would be rendered into the ConfigMap, which every reader of
// ConfigMaps in the namespace sees: helm template fails, naming the value and never
// quoting it. A reference an existing Secret backs renders.
func TestChartRefusesSecretsWrittenInValues(t *testing.T) {
	const literal = "acct-token-5f0c2b9e1d7a4c3b"
	tokens := func(second string) string {
		return `
config:
  api:
    listen: ":8080"
    tokens:
      - {scope: admin, token: env:RELAY_ADMIN_TOKEN}
      - {scope: "account:acct_123", token: "` + second + `"}
`
	}
	mount := `
secretVolumes:
  - {secretName: relay-account-tokens, mountPath: /run/secrets/relay}
`
	cases := []struct {
		what, values, path string // path: "" when it must render
	}{
		{"a literal account token", tokens(literal), "config.api.tokens[1].token"},
		{"env: that no Secret sets", tokens("env:ACCT_123_TOKEN"), "config.api.tokens[1].token"},
		{"env: set by a plain extraEnv value", tokens("env:ACCT_123_TOKEN") + "extraEnv: [{name: ACCT_123_TOKEN, value: " + literal + "}]\n", "config.api.tokens[1].token"},
		{"file: outside every secret mount", tokens("file:/run/secrets/relay/../../../etc/passwd") + mount, "config.api.tokens[1].token"},
		{"a literal signing key", "config: {signature: {keys: [env:FETCHER_EXTERNAL_HMAC_KEY, " + strings.Repeat("ab", 32) + "]}}\n", "config.signature.keys[1]"},
		{"a Redis URL with its password", "config: {redis: {url: 'rediss://:" + literal + "@redis.internal:6379/0'}}\n", "config.redis.url"},
		{"a RabbitMQ URL with its password", "config: {rabbitmq: {url: 'amqps://relay:" + literal + "@rabbitmq.internal:5671/'}}\n", "config.rabbitmq.url"},
		{"file: under a secret mount", tokens("file:/run/secrets/relay/acct_123") + mount, ""},
		{"env: from secretEnv", tokens("env:ACCT_123_TOKEN") + "secretEnv: [{name: RELAY_ADMIN_TOKEN, secretName: s, key: a}, {name: ACCT_123_TOKEN, secretName: s, key: b}, {name: RELAY_RABBITMQ_URL, secretName: s, key: c}, {name: RELAY_REDIS_URL, secretName: s, key: d}, {name: FETCHER_EXTERNAL_HMAC_KEY, secretName: s, key: e}]\n", ""},
		{"env: from extraEnv's secretKeyRef", tokens("env:ACCT_123_TOKEN") + "extraEnv: [{name: ACCT_123_TOKEN, valueFrom: {secretKeyRef: {name: s, key: b}}}]\n", ""},
		{"a Redis URL without a password", "config: {redis: {url: 'redis://redis.internal:6379/0'}}\n", ""},
	}
	dir := t.TempDir()
	for i, c := range cases {
		values := filepath.Join(dir, fmt.Sprintf("values-%d.yaml", i))
		if err := os.WriteFile(values, []byte(c.values), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := helm(t, "template", "relay", "relay", "-f", values)
		switch {
		case c.path == "" && err != nil:
			t.Errorf("%s: refused: %v\n%s", c.what, err, out)
		case c.path == "" && strings.Contains(out, literal):
			t.Errorf("%s: the secret is in the rendered manifests", c.what)
		case c.path == "":
		case err == nil:
			t.Errorf("%s: rendered, want helm template to fail naming %s", c.what, c.path)
		case !strings.Contains(out, c.path):
			t.Errorf("%s: the error does not name %s:\n%s", c.what, c.path, out)
		case strings.Contains(out, literal):
			t.Errorf("%s: the error quotes the secret:\n%s", c.what, out)
		}
	}
}
