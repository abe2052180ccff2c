// Package helm holds the relay's Helm chart (relay/); its tests lint and render the chart
// with Helm built from the Go module proxy and check what it renders against the relay
// itself: the probe and metrics paths answer, the mounted config passes check-config.
package helm

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime/debug"
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
// (--set, -f, -n, …) and returns the objects by kind/name, and by kind when a kind has
// one object.
func renderFlags(t *testing.T, flags ...string) map[string]manifest {
	t.Helper()
	return renderChart(t, "relay", flags...)
}

// renderChart is renderFlags of the chart in dir.
func renderChart(t *testing.T, dir string, flags ...string) map[string]manifest {
	t.Helper()
	args := append([]string{"template", "relay", dir}, flags...)
	out, err := helm(t, args...)
	if err != nil {
		t.Fatalf("helm %v: %v\n%s", args, err, out)
	}
	objs := map[string]manifest{} // by kind (when it is the only one) and by kind/name
	count := map[string]int{}
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
		name, _ := m.get("metadata", "name").(string)
		if _, dup := objs[kind+"/"+name]; dup {
			t.Fatalf("two %s objects named %s rendered", kind, name)
		}
		objs[kind+"/"+name] = m
		count[kind]++
		objs[kind] = m
	}
	for kind, n := range count { // a bare kind names its only object, never one of several
		if n > 1 {
			delete(objs, kind)
		}
	}
	return objs
}

func TestChartPassesHelmLint(t *testing.T) {
	for _, sets := range [][]string{nil, {"serviceMonitor.enabled=true", "replicaCount=1"}, everything} {
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
		"secret read from existing":  {namedPort(c["env"], "RELAY_RABBITMQ_URL").get("valueFrom", "secretKeyRef", "name"), "relay-secrets"},
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
	relay := relayBinary(t)
	// An AWS destination needs its ExternalId kept: the chart's own Secret derives it.
	awsDest := `config.destinations=[{"id":"orders-bus","account":"acct_123","connector":"eventbridge",` +
		`"bus_arn":"arn:aws:events:us-east-1:111122223333:event-bus/orders","role_arn":"arn:aws:iam::111122223333:role/r"}]`
	for _, sets := range [][]string{nil, {"--set", "config.tracing.otlp_endpoint=http://otel-collector:4318"}, {"--set-json", awsDest}} {
		objs := renderFlags(t, sets...)
		dir := t.TempDir()
		cfg := filepath.Join(dir, "relay.yaml")
		if err := os.WriteFile(cfg, []byte(objs["ConfigMap"].get("data", "relay.yaml").(string)), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(relay, "check-config", "--config", cfg)
		cmd.Env = deploymentEnv(t, objs)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("the chart's config (%v) fails check-config: %v\n%s", sets, err, out)
		}
	}
}

// deploymentEnv is the relay container's environment as the rendered Deployment sets it,
// each Secret key holding a sample value.
func deploymentEnv(t *testing.T, objs map[string]manifest) []string {
	t.Helper()
	c := container(objs)
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	samples := map[string]string{ // what each Secret key would hold
		"RELAY_RABBITMQ_URL":        "amqps://relay:pw@rabbitmq.example.internal:5671/",
		"RELAY_REDIS_URL":           "rediss://:pw@redis.example.internal:6379/0",
		"FETCHER_EXTERNAL_HMAC_KEY": strings.Repeat("ab", 32),
		"RELAY_ADMIN_TOKEN":         "admin-token-0123456789abcdef",
	}
	for _, e := range c["env"].([]any) {
		entry := manifest(e.(map[string]any))
		name := entry["name"].(string)
		if v, plain := entry["value"].(string); plain { // GOMEMLIMIT
			env = append(env, name+"="+v)
			continue
		}
		if entry.get("valueFrom", "fieldRef", "fieldPath") == "metadata.name" { // POD_NAME
			env = append(env, name+"=relay-7d9f8c6b5-x2x4q")
			continue
		}
		if ref := entry.get("valueFrom", "secretKeyRef", "name"); ref == "relay-external-id" { // the chart's own
			env = append(env, name+"="+secretValue(t, objs["Secret/relay-external-id"], entry.get("valueFrom", "secretKeyRef", "key").(string)))
			continue
		}
		v, ok := samples[name]
		if !ok {
			t.Fatalf("the Deployment sets %s, which the test has no sample value for", name)
		}
		env = append(env, name+"="+v)
	}
	return env
}

// secretValue is key's value in a rendered Secret, decoded.
func secretValue(t *testing.T, secret manifest, key string) string {
	t.Helper()
	enc, _ := secret.get("data", key).(string)
	b, err := base64.StdEncoding.DecodeString(enc)
	if secret == nil || err != nil {
		t.Fatalf("Secret data %s: %q (%v)", key, enc, err)
	}
	return string(b)
}

// The ExternalId promise held by the chart: a Secret it creates with a random value,
// kept by helm uninstall, read by the pods as the config's external_id_secret; it reuses
// the cluster's copy on upgrade (lookup: not reachable from helm template, which has no
// cluster). Off, the config's env:RELAY_EXTERNAL_ID_SECRET needs a Secret of the
// operator's, and the chart says so.
func TestChartCreatesTheExternalIDSecretOnceAndKeepsIt(t *testing.T) {
	objs := render(t)
	secret := objs["Secret/relay-external-id"]
	if secret == nil {
		t.Fatal("no Secret relay-external-id rendered")
	}
	if got := secret.get("metadata", "annotations", "helm.sh/resource-policy"); got != "keep" {
		t.Errorf("the Secret's helm.sh/resource-policy is %v, want keep: helm uninstall would delete the ids' secret", got)
	}
	if v := secretValue(t, secret, "RELAY_EXTERNAL_ID_SECRET"); len(v) != 64 {
		t.Errorf("the ExternalId secret is %d characters, want 64 random ones", len(v))
	}
	if again := secretValue(t, render(t)["Secret/relay-external-id"], "RELAY_EXTERNAL_ID_SECRET"); again == secretValue(t, secret, "RELAY_EXTERNAL_ID_SECRET") {
		t.Error("two renders without a cluster made the same value: it is not random")
	}
	if got := relayConfig(t, objs).get("identity", "external_id_secret"); got != "env:RELAY_EXTERNAL_ID_SECRET" {
		t.Errorf("config.identity.external_id_secret = %v, want env:RELAY_EXTERNAL_ID_SECRET", got)
	}
	ref := namedPort(container(objs)["env"], "RELAY_EXTERNAL_ID_SECRET")
	if ref.get("valueFrom", "secretKeyRef", "name") != "relay-external-id" || ref.get("valueFrom", "secretKeyRef", "key") != "RELAY_EXTERNAL_ID_SECRET" {
		t.Errorf("the pod's RELAY_EXTERNAL_ID_SECRET comes from %v, want the chart's Secret", ref)
	}
	tpl, err := os.ReadFile("relay/templates/externalid-secret.yaml")
	if err != nil || !strings.Contains(string(tpl), `lookup "v1" "Secret" .Release.Namespace $name`) {
		t.Errorf("the Secret's template does not reuse the cluster's copy (lookup): %v", err)
	}

	own := renderFlags(t, "--set", "externalIdSecret.create=false", "--set-json",
		`extraEnv=[{"name":"RELAY_EXTERNAL_ID_SECRET","valueFrom":{"secretKeyRef":{"name":"ours","key":"ext"}}}]`)
	if own["Secret/relay-external-id"] != nil {
		t.Error("externalIdSecret.create=false still renders the Secret")
	}
	if got := namedPort(container(own)["env"], "RELAY_EXTERNAL_ID_SECRET").get("valueFrom", "secretKeyRef", "name"); got != "ours" {
		t.Errorf("with the operator's Secret, RELAY_EXTERNAL_ID_SECRET comes from %v, want ours", got)
	}
	out, err := helm(t, "template", "relay", "relay", "--set", "externalIdSecret.create=false")
	if err == nil || !strings.Contains(out, "config.identity.external_id_secret is env:RELAY_EXTERNAL_ID_SECRET") || !strings.Contains(out, "secretEnv") {
		t.Errorf("create=false without a Secret for RELAY_EXTERNAL_ID_SECRET rendered: %v\n%s", err, out)
	}
}

var (
	relayOnce sync.Once
	relayPath string
	relayErr  error
)

// relayBinary builds cmd/relay once per test binary.
func relayBinary(t *testing.T) string {
	t.Helper()
	relayOnce.Do(func() {
		dir, err := os.MkdirTemp("", "relay-helm-test-")
		if err != nil {
			relayErr = err
			return
		}
		relayPath = filepath.Join(dir, "relay")
		if out, err := exec.Command("go", "build", "-o", relayPath, "../../cmd/relay").CombinedOutput(); err != nil {
			relayErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if relayErr != nil {
		t.Fatal(relayErr)
	}
	return relayPath
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

// everything is every optional object of the chart switched on (helm lint and the
// monitoring test render it).
var everything = []string{
	"serviceMonitor.enabled=true", "serviceMonitor.labels.release=prometheus",
	"prometheusRule.enabled=true", "prometheusRule.labels.release=prometheus",
	"grafanaDashboard.enabled=true", "grafanaDashboard.annotations.grafana_folder=Relay",
	"ingress.enabled=true", "ingress.hosts={relay.example.com}", "ingress.className=nginx", "ingress.tlsSecretName=relay-tls",
	"secretVolumes[0].secretName=relay-account-tokens", "secretVolumes[0].mountPath=/run/secrets/relay",
}

// decodeFile reads a YAML (or JSON) file into plain values.
func decodeFile(t *testing.T, path string) any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

// The chart ships the monitoring of deploy/monitoring: a PrometheusRule whose groups are
// relay-rules.yaml's, a ServiceMonitor on the metrics port, and the dashboard in a
// ConfigMap Grafana's sidecar picks up, equal to relay-dashboard.json. The chart reads
// copies in relay/files/ (it cannot read outside its directory): this test is what keeps
// them equal, and fails naming the copy to refresh when deploy/monitoring changes.
func TestChartShipsTheMonitoringOfDeployMonitoring(t *testing.T) {
	for _, f := range []string{"relay-rules.yaml", "relay-dashboard.json"} {
		canonical, err := os.ReadFile(filepath.Join("..", "monitoring", f))
		if err != nil {
			t.Fatal(err)
		}
		copied, err := os.ReadFile(filepath.Join("relay", "files", f))
		if err != nil || !bytes.Equal(canonical, copied) {
			t.Errorf("deploy/helm/relay/files/%s differs from deploy/monitoring/%s (%v): cp deploy/monitoring/%s deploy/helm/relay/files/", f, f, err, f)
		}
	}
	objs := render(t, everything...)
	for _, name := range []string{"PrometheusRule/relay", "ServiceMonitor/relay", "ConfigMap/relay-dashboard", "ConfigMap/relay-config"} {
		o := objs[name]
		if o == nil {
			t.Fatalf("no %s rendered", name)
		}
		if o.get("metadata", "labels", "app.kubernetes.io/instance") != "relay" {
			t.Errorf("%s lacks the release's labels: %v", name, o.get("metadata", "labels"))
		}
	}
	rule, sm, dash := objs["PrometheusRule/relay"], objs["ServiceMonitor/relay"], objs["ConfigMap/relay-dashboard"]
	if rule.get("apiVersion") != "monitoring.coreos.com/v1" || rule.get("metadata", "labels", "release") != "prometheus" {
		t.Errorf("PrometheusRule %v with labels %v, want monitoring.coreos.com/v1 labelled release: prometheus", rule.get("apiVersion"), rule.get("metadata", "labels"))
	}
	want := decodeFile(t, filepath.Join("..", "monitoring", "relay-rules.yaml")).(map[string]any)["groups"]
	if got := rule.get("spec", "groups"); !reflect.DeepEqual(got, want) {
		t.Errorf("the PrometheusRule's groups differ from deploy/monitoring/relay-rules.yaml's:\n got %v\nwant %v", got, want)
	}
	if ep := manifest(sm.get("spec", "endpoints", 0).(map[string]any)); ep["port"] != "metrics" || sm.get("metadata", "labels", "release") != "prometheus" {
		t.Errorf("ServiceMonitor scrapes port %v with labels %v, want metrics, release: prometheus", ep["port"], sm.get("metadata", "labels"))
	}
	if dash.get("metadata", "labels", "grafana_dashboard") != "1" || dash.get("metadata", "annotations", "grafana_folder") != "Relay" {
		t.Errorf("dashboard ConfigMap labels %v, annotations %v: the sidecar looks for grafana_dashboard: \"1\"", dash.get("metadata", "labels"), dash.get("metadata", "annotations"))
	}
	var shipped, canonical any
	if err := json.Unmarshal([]byte(dash.get("data", "relay-dashboard.json").(string)), &shipped); err != nil {
		t.Fatalf("the dashboard in the ConfigMap is not JSON: %v", err)
	}
	data, err := os.ReadFile(filepath.Join("..", "monitoring", "relay-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &canonical); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(shipped, canonical) {
		t.Errorf("the ConfigMap's dashboard differs from deploy/monitoring/relay-dashboard.json")
	}
	// Each is its own choice, and none is on by default (two need the operator's CRDs).
	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte("grafanaDashboard: {enabled: true, namespace: grafana, labels: {dashboards: relay, grafana_dashboard: null}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	objs = renderFlags(t, "-f", values)
	if d := objs["ConfigMap/relay-dashboard"]; d == nil || d.get("metadata", "namespace") != "grafana" || d.get("metadata", "labels", "dashboards") != "relay" || d.get("metadata", "labels", "grafana_dashboard") != nil {
		t.Errorf("dashboard with its own label and namespace: %v", objs["ConfigMap/relay-dashboard"].get("metadata"))
	}
	if objs["PrometheusRule/relay"] != nil || objs["ServiceMonitor/relay"] != nil {
		t.Errorf("only the dashboard asked for, the PrometheusRule or ServiceMonitor rendered too")
	}
	for name := range render(t) {
		if strings.HasPrefix(name, "PrometheusRule") || strings.HasPrefix(name, "ServiceMonitor") || name == "ConfigMap/relay-dashboard" {
			t.Errorf("%s rendered by default", name)
		}
	}
}

// A misspelt or mistyped value fails helm template, naming the key, instead of being
// ignored (the default it meant to change would silently stay).
func TestChartValuesSchemaRefusesATypo(t *testing.T) {
	cases := []struct{ set, named string }{
		{"replicaCont=3", "'replicaCont'"},
		{"networkPolicy.enabeld=false", "'enabeld'"},
		{"ingress.host=relay.example.com", "'host'"},
		{"podDisruptionBudget.minAvaliable=2", "'minAvaliable'"},
		{"replicaCount=two", "/replicaCount"},
		{"ingress.hosts={relay.example.com:443}", "/ingress/hosts/0"},
	}
	for _, c := range cases {
		out, err := helm(t, "template", "relay", "relay", "--set", c.set)
		if err == nil || !strings.Contains(out, c.named) {
			t.Errorf("--set %s: %v, want helm template to fail naming %s:\n%s", c.set, err, c.named, out)
		}
	}
	// config is the relay's relay.yaml, which the schema leaves to the relay: its decoder
	// names an unknown key with its path (a second key list here would drift from it).
	objs := render(t, "config.api.lisen=:8081")
	cfg := filepath.Join(t.TempDir(), "relay.yaml")
	if err := os.WriteFile(cfg, []byte(objs["ConfigMap"].get("data", "relay.yaml").(string)), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(relayBinary(t), "check-config", "--config", cfg).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "api.lisen") {
		t.Errorf("relay check-config on config.api.lisen: %v, want it to name api.lisen:\n%s", err, out)
	}
}

// readable says whether a process with uid and gids may read a file of owner uid:gid
// and mode (the read bits; root's capabilities are not modelled, the relay is not root).
func readable(uid int, gids []int, owner, group int, mode os.FileMode) bool {
	if uid == owner {
		return mode&0o400 != 0
	}
	for _, g := range gids {
		if g == group {
			return mode&0o040 != 0
		}
	}
	return mode&0o004 != 0
}

// intValue reads an integer the pod or the container sets; ok false when unset.
func intValue(v any) (int, bool) {
	n, ok := v.(int)
	return n, ok
}

// The files of a secret volume are the kubelet's: owner root, group the pod's fsGroup
// (root's when unset), mode defaultMode (no group bits are counted on beyond it). The
// relay runs as runAsUser with runAsGroup and fsGroup: it must be able to read them. On
// the old chart (no fsGroup, 0400) it could not: only root read them.
func TestChartSecretVolumesAreReadableByTheRelaysUser(t *testing.T) {
	check := func(objs map[string]manifest) (bool, string) {
		pod := manifest(objs["Deployment"].get("spec", "template", "spec").(map[string]any))
		c := container(objs)
		uid, ok := intValue(c.get("securityContext", "runAsUser")) // the container's wins
		if !ok {
			uid, ok = intValue(pod.get("securityContext", "runAsUser"))
		}
		if !ok || uid == 0 {
			t.Fatalf("the relay's user is %v, want a non-root uid", uid)
		}
		var gids []int
		gid, ok := intValue(c.get("securityContext", "runAsGroup"))
		if !ok {
			gid, _ = intValue(pod.get("securityContext", "runAsGroup")) // 0 when unset
		}
		gids = append(gids, gid)
		group := 0
		if fs, ok := intValue(pod.get("securityContext", "fsGroup")); ok {
			group = fs
			gids = append(gids, fs)
		}
		groups, _ := pod.get("securityContext", "supplementalGroups").([]any)
		for _, g := range groups {
			gids = append(gids, g.(int))
		}
		var found bool
		for _, v := range pod.get("volumes").([]any) {
			s, _ := v.(map[string]any)["secret"].(map[string]any)
			if s == nil {
				continue
			}
			found = true
			mode, ok := intValue(s["defaultMode"])
			if !ok {
				mode = 0o644 // the API's default
			}
			if !readable(uid, gids, 0, group, os.FileMode(mode)) {
				return false, fmt.Sprintf("secret %v: mode %#o, owner 0:%d, read by uid %d groups %v", s["secretName"], mode, group, uid, gids)
			}
			if os.FileMode(mode)&0o007 != 0 {
				return false, fmt.Sprintf("secret %v: mode %#o lets every user read it", s["secretName"], mode)
			}
		}
		if !found {
			t.Fatal("no secret volume rendered")
		}
		return true, ""
	}
	mount := []string{"secretVolumes[0].secretName=relay-account-tokens", "secretVolumes[0].mountPath=/run/secrets/relay"}
	objs := render(t, mount...)
	if ok, why := check(objs); !ok {
		t.Errorf("the relay cannot read its secrets: %s", why)
	}
	if fs := objs["Deployment"].get("spec", "template", "spec", "securityContext", "fsGroup"); fs != 65532 {
		t.Errorf("fsGroup %v, want 65532", fs)
	}
	// The old chart's numbers, to show the check catches them.
	old := render(t, append(mount, "podSecurityContext.fsGroup=null")...)
	old["Deployment"].get("spec", "template", "spec", "volumes", 1, "secret").(map[string]any)["defaultMode"] = 0o400
	if ok, _ := check(old); ok {
		t.Errorf("no fsGroup and mode 0400 pass the check; uid 65532 cannot read root's 0400 files")
	}
}

// Replicas spread over zones when they can (ScheduleAnyway), over the release's pods;
// values replace the spread or remove it.
func TestChartSpreadsReplicasOverZones(t *testing.T) {
	pod := manifest(render(t)["Deployment"].get("spec", "template", "spec").(map[string]any))
	tsc := manifest(pod.get("topologySpreadConstraints", 0).(map[string]any))
	if tsc["topologyKey"] != "topology.kubernetes.io/zone" || tsc["whenUnsatisfiable"] != "ScheduleAnyway" || tsc["maxSkew"] != 1 ||
		tsc.get("labelSelector", "matchLabels", "app.kubernetes.io/instance") != "relay" {
		t.Errorf("topologySpreadConstraints[0] = %v, want zone, ScheduleAnyway, maxSkew 1 over the release's pods", tsc)
	}
	pod = manifest(render(t, "topologySpreadConstraints[0].maxSkew=1", "topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone", "topologySpreadConstraints[0].whenUnsatisfiable=DoNotSchedule")["Deployment"].get("spec", "template", "spec").(map[string]any))
	if got := pod.get("topologySpreadConstraints", 0, "whenUnsatisfiable"); got != "DoNotSchedule" {
		t.Errorf("whenUnsatisfiable %v, want the value's DoNotSchedule", got)
	}
	pod = manifest(render(t, "topologySpreadConstraints=null")["Deployment"].get("spec", "template", "spec").(map[string]any))
	if pod["topologySpreadConstraints"] != nil {
		t.Errorf("topologySpreadConstraints=null still spreads: %v", pod["topologySpreadConstraints"])
	}
}

// goMemLimit is the GOMEMLIMIT the rendered container sets, "" when none.
func goMemLimit(t *testing.T, objs map[string]manifest) string {
	t.Helper()
	for _, e := range container(objs).get("env").([]any) {
		if m := e.(map[string]any); m["name"] == "GOMEMLIMIT" {
			return m["value"].(string)
		}
	}
	return ""
}

// GOMEMLIMIT is 90% of the memory limit in bytes, a value the Go runtime takes (the test
// binary is run again with it and reports the limit it applied); no limit, no GOMEMLIMIT;
// an extraEnv GOMEMLIMIT replaces the chart's.
func TestChartSetsGOMEMLIMITFromTheMemoryLimit(t *testing.T) {
	if os.Getenv("RELAY_HELM_PRINT_MEMLIMIT") == "1" {
		fmt.Printf("memlimit=%d\n", debug.SetMemoryLimit(-1))
		return
	}
	for limit, want := range map[string]int64{"512Mi": 483183820, "1Gi": 966367641, "1.5Gi": 1449551462, "500M": 450000000} {
		got := goMemLimit(t, render(t, "resources.limits.memory="+limit))
		if got != fmt.Sprint(want) {
			t.Errorf("limit %s: GOMEMLIMIT %q, want %d (90%%)", limit, got, want)
			continue
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestChartSetsGOMEMLIMITFromTheMemoryLimit$")
		cmd.Env = append(os.Environ(), "RELAY_HELM_PRINT_MEMLIMIT=1", "GOMEMLIMIT="+got)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), fmt.Sprintf("memlimit=%d\n", want)) {
			t.Errorf("the Go runtime with GOMEMLIMIT=%s: %v\n%s", got, err, out)
		}
	}
	if got := goMemLimit(t, render(t, "resources.limits=null")); got != "" {
		t.Errorf("no memory limit: GOMEMLIMIT %q, want none", got)
	}
	if got := goMemLimit(t, render(t, "goMemLimitRatio=0")); got != "" {
		t.Errorf("goMemLimitRatio=0: GOMEMLIMIT %q, want none", got)
	}
	objs := render(t, "extraEnv[0].name=GOMEMLIMIT", "extraEnv[0].value=300MiB")
	if got := goMemLimit(t, objs); got != "300MiB" || strings.Count(fmt.Sprint(container(objs).get("env")), "GOMEMLIMIT") != 1 {
		t.Errorf("extraEnv GOMEMLIMIT: env %v, want only the operator's 300MiB", container(objs).get("env"))
	}
	if out, err := helm(t, "template", "relay", "relay", "--set", "resources.limits.memory=lots"); err == nil || !strings.Contains(out, "resources.limits.memory") {
		t.Errorf("an unreadable memory limit rendered: %v\n%s", err, out)
	}
}

// The Ingress (off by default) sends each host to the API's port, and each host is in
// api.allowed_hosts, so the API answers it; without a host it is refused.
func TestChartIngressHostsAreAllowedHosts(t *testing.T) {
	if render(t)["Ingress"] != nil {
		t.Errorf("an Ingress rendered by default")
	}
	objs := render(t, "ingress.enabled=true", "ingress.hosts={relay.example.com,console.example.com}", "ingress.tlsSecretName=relay-tls", "allowedHosts=null")
	ing := objs["Ingress"]
	if ing == nil {
		t.Fatal("no Ingress rendered")
	}
	hosts := fmt.Sprint(relayConfig(t, objs).get("api", "allowed_hosts"))
	for i, want := range []string{"relay.example.com", "console.example.com"} {
		r := manifest(ing.get("spec", "rules", i).(map[string]any))
		if r["host"] != want || r.get("http", "paths", 0, "backend", "service", "port", "name") != "http" || r.get("http", "paths", 0, "backend", "service", "name") != "relay" {
			t.Errorf("rule %d: %v, want host %s to the Service's http port", i, r, want)
		}
		if !strings.Contains(" "+strings.Trim(hosts, "[]")+" ", " "+want+" ") {
			t.Errorf("Ingress host %s is not in api.allowed_hosts %s: the API would refuse it", want, hosts)
		}
	}
	if got := fmt.Sprint(ing.get("spec", "tls")); got != "[map[hosts:[relay.example.com console.example.com] secretName:relay-tls]]" {
		t.Errorf("tls %s", got)
	}
	if out, err := helm(t, "template", "relay", "relay", "--set", "ingress.enabled=true"); err == nil || !strings.Contains(out, "ingress.hosts") {
		t.Errorf("an Ingress without hosts rendered: %v\n%s", err, out)
	}
}
