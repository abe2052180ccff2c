package main

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/mercamap/relay/internal/testpeer"
)

// scraped is one series of a /metrics page, as Prometheus stores it.
type scraped struct {
	name   string
	labels map[string]string
	value  string
}

// selector writes s the way promtool's input_series and PromQL name a series.
func (s scraped) selector() string {
	keys := slices.Sorted(maps.Keys(s.labels))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + strconv.Quote(s.labels[k])
	}
	return s.name + "{" + strings.Join(parts, ",") + "}"
}

// with returns a copy of s with the given labels changed ("" removes one).
func (s scraped) with(kv ...string) scraped {
	out := scraped{name: s.name, labels: maps.Clone(s.labels), value: s.value}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "" {
			delete(out.labels, kv[i])
		} else {
			out.labels[kv[i]] = kv[i+1]
		}
	}
	return out
}

// parseScrape reads a Prometheus text page into series, adding the labels the scrape
// adds (job, instance). Label values are read with the exposition format's escapes.
func parseScrape(t *testing.T, page string, target map[string]string) []scraped {
	t.Helper()
	var out []scraped
	for _, line := range strings.Split(page, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s := scraped{labels: maps.Clone(target)}
		rest := line
		if i := strings.IndexAny(line, "{ "); i >= 0 && line[i] == '{' {
			s.name, rest = line[:i], line[i+1:]
			for !strings.HasPrefix(rest, "}") {
				eq := strings.Index(rest, `="`)
				if eq < 0 {
					t.Fatalf("unreadable labels in %q", line)
				}
				key := strings.TrimPrefix(rest[:eq], ",")
				var val strings.Builder
				j := eq + 2
				for ; j < len(rest) && rest[j] != '"'; j++ {
					if rest[j] == '\\' && j+1 < len(rest) {
						j++
						if rest[j] == 'n' {
							val.WriteByte('\n')
							continue
						}
					}
					val.WriteByte(rest[j])
				}
				if val.Len() > 0 { // Prometheus stores no empty label
					s.labels[key] = val.String()
				}
				rest = strings.TrimPrefix(rest[j+1:], ",")
			}
			rest = strings.TrimSpace(rest[1:])
		} else {
			s.name, rest, _ = strings.Cut(line, " ")
		}
		s.value, _, _ = strings.Cut(strings.TrimSpace(rest), " ")
		out = append(out, s)
	}
	return out
}

// alertRules reads relay-rules.yaml's alert names, and writes a copy without the
// annotations into dir (relay-rules.test.yaml checks those; here each rule's firing is
// what is tested, and promtool compares annotations whole).
func alertRules(t *testing.T, dir string) (names []string, path string) {
	t.Helper()
	raw, err := os.ReadFile("../../deploy/monitoring/relay-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var file map[string]any
	if err := yaml.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	for _, g := range file["groups"].([]any) {
		for _, r := range g.(map[string]any)["rules"].([]any) {
			rule := r.(map[string]any)
			delete(rule, "annotations")
			if a, ok := rule["alert"].(string); ok {
				names = append(names, a)
			}
		}
	}
	out, err := yaml.Marshal(file)
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(dir, "relay-rules.yaml")
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	return names, path
}

// firstScrapeCase is one promtool test begun from the first scrape: every series held at
// its scraped value, but those set (which must be on the first scrape: what the rule
// needs exists from the start) and those added (series a change of state makes, like a
// status label); at evalAt, alert fires with labels and every other alert is silent.
type firstScrapeCase struct {
	name   string
	alert  string // "" : none fires
	evalAt string
	set    func(c *scrapeEdit)
	labels func(first []scraped) map[string]string
}

// scrapeEdit is a case's changes to the first scrape's series.
type scrapeEdit struct {
	t      *testing.T
	series []scraped
	values map[string]string // by selector
}

// find is the one first-scrape series of name whose labels include kv; the test fails
// when the first scrape lacks it.
func (e *scrapeEdit) find(name string, kv ...string) scraped {
	e.t.Helper()
	var found []scraped
	for _, s := range e.series {
		if s.name != name {
			continue
		}
		ok := true
		for i := 0; i+1 < len(kv); i += 2 {
			ok = ok && s.labels[kv[i]] == kv[i+1]
		}
		if ok {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		e.t.Fatalf("the first scrape has %d series %s%v, want one: a rule's series must exist from the start", len(found), name, kv)
	}
	return found[0]
}

// set gives the series its values (promtool's expanding notation).
func (e *scrapeEdit) set(s scraped, values string) { e.values[s.selector()] = values }

// hold is the first-scrape value for n more samples.
func hold(v string, n int) string { return fmt.Sprintf("%sx%d", v, n) }

// TestEveryAlertRuleFiresAsIntendedFromARelaysRealFirstScrape starts a relay (one
// EventBridge destination, nothing published), scrapes /metrics once it serves, and
// runs promtool on tests whose initial series are that scrape: held as they are, no
// alert fires; with the one change each alert watches for (a counter rising from its
// scraped 0, a gauge going to 0, a status changing), that alert fires and no other
// does. A rule that adds a present counter to an absent one, or watches a label no
// series has at start, fails here.
func TestEveryAlertRuleFiresAsIntendedFromARelaysRealFirstScrape(t *testing.T) {
	testpeer.Need(t, "promtool")
	r := startObservedRelay(t, "")
	var page string
	// Serving: its destination leased and active, and ingest connected to the broker (the
	// queue's gauges are absent until then, by design: relay_broker_connected says why).
	// The lease can come first: ingest connects beside it, later on a loaded machine.
	waitUntil(t, 60*time.Second, "the relay serving its destination (leased, active) and consuming", func() bool {
		page = metrics(r.metricsListen)
		return strings.Contains(page, "relay_leases_held 1") &&
			strings.Contains(page, `relay_destination_status{account="acct_1",by="",connector="eventbridge",destination="orders-bus",status="active"} 1`) &&
			strings.Contains(page, "relay_broker_connected 1") && strings.Contains(page, "relay_ingest_queue_messages ")
	})
	dir := t.TempDir()
	alerts, rules := alertRules(t, dir)
	target := map[string]string{"job": "relay", "instance": "relay-0:9090"}
	named := map[string]bool{} // the metrics the rules name
	for _, q := range ruleQueries(t) {
		for _, n := range metricName.FindAllString(q, -1) {
			named[n] = true
		}
	}
	var first []scraped
	for _, s := range parseScrape(t, page, target) {
		if named[s.name] {
			first = append(first, s)
		}
	}
	for n := range named {
		if !slices.ContainsFunc(first, func(s scraped) bool { return s.name == n }) {
			t.Errorf("%s, which a rule names, is not on the first scrape", n)
		}
	}
	// The dashboard's series exist from the start too: a rate of a counter born later
	// misses its first increase.
	all := parseScrape(t, page, target)
	for _, q := range dashboardQueries(t) {
		for _, n := range metricName.FindAllString(q, -1) {
			if !slices.ContainsFunc(all, func(s scraped) bool { return s.name == n }) {
				t.Errorf("%s, which the dashboard names, is not on the first scrape", n)
			}
		}
	}

	dest := func(severity string) func([]scraped) map[string]string {
		return func([]scraped) map[string]string {
			return map[string]string{"severity": severity, "destination": "orders-bus", "connector": "eventbridge", "account": "acct_1"}
		}
	}
	only := func(severity string) func([]scraped) map[string]string {
		return func([]scraped) map[string]string { return map[string]string{"severity": severity} }
	}
	perReplica := func(severity string) func([]scraped) map[string]string {
		return func([]scraped) map[string]string {
			return map[string]string{"severity": severity, "job": "relay", "instance": "relay-0:9090"}
		}
	}
	// rise: the counter's first-scrape value for 6 samples (0 to 5m), then one more.
	rise := func(e *scrapeEdit, s scraped) { e.set(s, hold(s.value, 5)+" "+hold(bump(t, s.value, 1), 54)) }
	disabledBy := func(by string) func(e *scrapeEdit) {
		return func(e *scrapeEdit) {
			active := e.find("relay_destination_status", "destination", "orders-bus", "status", "active")
			e.set(active, "1x5 stale")
			e.set(active.with("status", "disabled", "by", by), "_x5 1x54")
		}
	}
	cases := []firstScrapeCase{
		{name: "held as scraped", evalAt: "59m", set: func(*scrapeEdit) {}},
		{name: "disabled by its rejections", alert: "RelayDestinationDisabled", evalAt: "10m", set: disabledBy("rejections"), labels: dest("warning")},
		{name: "disabled by an operator", alert: "RelayDestinationDisabledByOperator", evalAt: "10m", set: disabledBy("operator"), labels: dest("info")},
		{name: "rejections in a row", alert: "RelayDestinationFailing", evalAt: "15m", labels: dest("warning"), set: func(e *scrapeEdit) {
			e.set(e.find("relay_destination_consecutive_failures", "destination", "orders-bus"), "0x5 3x54")
		}},
		{name: "the oldest undelivered event ages", alert: "RelayDestinationLagging", evalAt: "20m", labels: dest("warning"), set: func(e *scrapeEdit) {
			e.set(e.find("relay_destination_oldest_undelivered_age_seconds", "destination", "orders-bus"), "0x5 60+60x54")
		}},
		{name: "eventbridge writes not taken", alert: "RelayDeliveryErrorsHigh", evalAt: "30m", labels: func([]scraped) map[string]string {
			return map[string]string{"severity": "critical", "connector": "eventbridge"}
		}, set: func(e *scrapeEdit) {
			s := e.find("relay_delivery_attempts_total", "connector", "eventbridge", "outcome", "not_taken")
			e.set(s, hold(s.value, 5)+" "+s.value+"+30x54")
		}},
		{name: "one message quarantined for a bad signature", alert: "RelayQuarantineGrowing", evalAt: "10m", labels: only("warning"), set: func(e *scrapeEdit) {
			rise(e, e.find("relay_events_quarantined_total", "reason", "bad_signature"))
		}},
		{name: "one message dead-lettered", alert: "RelayQuarantineGrowing", evalAt: "10m", labels: only("warning"), set: func(e *scrapeEdit) {
			rise(e, e.find("relay_events_dead_lettered_total", "reason", "headers_too_deep"))
		}},
		{name: "one drop from the full quarantine", alert: "RelayQuarantineDropping", evalAt: "10m", labels: only("warning"), set: func(e *scrapeEdit) {
			rise(e, e.find("relay_quarantine_dropped_total"))
		}},
		{name: "messages wait and nothing is acked", alert: "RelayIngestStalled", evalAt: "20m", labels: only("critical"), set: func(e *scrapeEdit) {
			e.set(e.find("relay_ingest_queue_messages"), "0x5 5x54")
		}},
		{name: "no consumer", alert: "RelayIngestNoConsumer", evalAt: "15m", labels: only("critical"), set: func(e *scrapeEdit) {
			e.set(e.find("relay_ingest_queue_consumers"), "1x5 0x54")
		}},
		{name: "one event unrouted", alert: "RelayEventsUnrouted", evalAt: "10m", labels: only("warning"), set: func(e *scrapeEdit) {
			rise(e, e.find("relay_events_unrouted_total"))
		}},
		{name: "the relay is no longer scraped", alert: "RelayNotScraped", evalAt: "15m", labels: only("critical"), set: func(e *scrapeEdit) {
			for _, s := range e.series {
				e.set(s, hold(s.value, 5)+" stale")
			}
		}},
		{name: "operator events wait", alert: "RelayOperatorEventsWaiting", evalAt: "30m", labels: only("warning"), set: func(e *scrapeEdit) {
			e.set(e.find("relay_operator_events_pending"), "0x5 3x54")
		}},
		{name: "redis stops answering", alert: "RelayRedisDown", evalAt: "10m", labels: perReplica("critical"), set: func(e *scrapeEdit) {
			e.set(e.find("relay_redis_up"), "1x5 0x54")
		}},
		{name: "the broker connection is lost", alert: "RelayBrokerDown", evalAt: "10m", labels: perReplica("critical"), set: func(e *scrapeEdit) {
			e.set(e.find("relay_broker_connected"), "1x5 0x54")
		}},
		{name: "STS throttles our sessions", alert: "RelaySTSThrottlingUs", evalAt: "15m", labels: only("critical"), set: func(e *scrapeEdit) {
			s := e.find("relay_sts_throttled_total", "call", "session")
			e.set(s, hold(s.value, 5)+" "+s.value+"+1x54")
		}},
		{name: "a role lets a wrong ExternalId in", alert: "RelayRoleAcceptsAnyExternalId", evalAt: "10m", labels: only("warning"), set: func(e *scrapeEdit) {
			rise(e, e.find("relay_setup_refused_total", "reason", "external_id_not_enforced"))
		}},
	}
	fired := map[string]bool{}
	var tests []any
	for _, c := range cases {
		e := &scrapeEdit{t: t, series: first, values: map[string]string{}}
		for _, s := range first {
			e.values[s.selector()] = hold(s.value, 59)
		}
		c.set(e)
		var input []any
		for _, sel := range slices.Sorted(maps.Keys(e.values)) {
			input = append(input, map[string]any{"series": sel, "values": e.values[sel]})
		}
		var checks []any
		for _, a := range alerts {
			exp := []any{}
			if a == c.alert {
				exp = append(exp, map[string]any{"exp_labels": c.labels(first)})
				fired[a] = true
			}
			checks = append(checks, map[string]any{"eval_time": c.evalAt, "alertname": a, "exp_alerts": exp})
		}
		tests = append(tests, map[string]any{"name": "from the first scrape: " + c.name, "interval": "1m",
			"input_series": input, "alert_rule_test": checks})
	}
	for _, a := range alerts {
		if !fired[a] {
			t.Errorf("alert %s has no case firing it from the first scrape: add one", a)
		}
	}
	body, err := yaml.Marshal(map[string]any{"rule_files": []string{rules}, "evaluation_interval": "1m", "tests": tests})
	if err != nil {
		t.Fatal(err)
	}
	testFile := filepath.Join(dir, "first-scrape.test.yaml")
	if err := os.WriteFile(testFile, body, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("promtool", "test", "rules", testFile).CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules from the first scrape: %v\n%s", err, out)
	}
}

// bump is v+n for a counter's scraped value.
func bump(t *testing.T, v string, n float64) string {
	t.Helper()
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		t.Fatalf("counter value %q: %v", v, err)
	}
	return strconv.FormatFloat(f+n, 'g', -1, 64)
}
