package cloudevent_test

import (
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/mercamap/relay/internal/cloudevent"
)

const vectorFile = "../../testdata/vectors/fetcher-v1.json"

type vectorCase struct {
	Name    string                     `json:"name"`
	Headers map[string]json.RawMessage `json:"headers"`
	Body    string                     `json:"body"`
}

func loadCases(tb testing.TB) []vectorCase {
	tb.Helper()
	raw, err := os.ReadFile(vectorFile)
	if err != nil {
		tb.Fatal(err)
	}
	var v struct {
		Cases []vectorCase `json:"cases"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		tb.Fatal(err)
	}
	if len(v.Cases) == 0 {
		tb.Fatal("no cases")
	}
	return v.Cases
}

// amqpHeaders gives the vector's headers as amqp091-go delivers them: strings
// as string or []byte, numbers as int32.
func (c vectorCase) amqpHeaders(tb testing.TB, asBytes bool) map[string]any {
	tb.Helper()
	h := make(map[string]any, len(c.Headers))
	for name, raw := range c.Headers {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			if asBytes {
				h[name] = []byte(s)
			} else {
				h[name] = s
			}
			continue
		}
		n, err := strconv.ParseInt(string(raw), 10, 32)
		if err != nil {
			tb.Fatalf("%s: header %s: %s", c.Name, name, raw)
		}
		h[name] = int32(n)
	}
	return h
}

func reasonOf(t *testing.T, err error) cloudevent.Reason {
	t.Helper()
	if err == nil {
		return ""
	}
	var ce *cloudevent.Error
	if !errors.As(err, &ce) {
		t.Fatalf("error %v is not a *cloudevent.Error", err)
	}
	return ce.Reason
}

func TestEveryVectorReadsAsAnEventFromStringsAndByteArrays(t *testing.T) {
	for _, c := range loadCases(t) {
		for _, asBytes := range []bool{false, true} {
			e, err := cloudevent.FromAMQP(c.amqpHeaders(t, asBytes), []byte(c.Body))
			if err != nil {
				t.Fatalf("%s (bytes=%v): %v", c.Name, asBytes, err)
			}
			var want map[string]string
			for name, raw := range c.Headers {
				var s string
				if json.Unmarshal(raw, &s) == nil {
					if want == nil {
						want = map[string]string{}
					}
					want[name] = s
				}
			}
			got := map[string]string{
				"ce-id": e.ID, "ce-source": e.Source, "ce-type": e.Type, "ce-specversion": e.SpecVersion,
				"ce-subject": e.Subject, "ce-time": e.Time, "ce-schemaversion": e.SchemaVersion,
				"ce-datacontenttype": e.DataContentType, "ce-tenantid": e.Extensions["tenantid"],
				"ce-resourcetype": e.Extensions["resourcetype"], "ce-eventtype": e.Extensions["eventtype"],
			}
			for k, v := range got {
				if v != want[k] {
					t.Errorf("%s (bytes=%v): %s = %q, want %q", c.Name, asBytes, k, v, want[k])
				}
			}
			if e.Tenant != want["ce-tenantid"] {
				t.Errorf("%s: Tenant = %q", c.Name, e.Tenant)
			}
			if len(e.Extensions) != 3 {
				t.Errorf("%s: extensions %v, want only tenantid, resourcetype, eventtype", c.Name, e.Extensions)
			}
			if string(e.Data) != c.Body {
				t.Errorf("%s: Data differs from the body", c.Name)
			}
		}
	}
}

func minimal(prefix string) map[string]any {
	return map[string]any{
		prefix + "id":          []byte("fetcher.job.completed.1"),
		prefix + "type":        "studio.lerian.job.completed",
		prefix + "specversion": []byte("1.0"),
	}
}

func TestAllThreePrefixesAreAccepted(t *testing.T) {
	for _, p := range []string{"ce-", "cloudEvents_", "cloudEvents:", "CE-", "cloudevents_", "CLOUDEVENTS:"} {
		e, err := cloudevent.FromAMQP(minimal(p), []byte(`{}`))
		if err != nil {
			t.Fatalf("prefix %q: %v", p, err)
		}
		if e.ID != "fetcher.job.completed.1" || e.Type != "studio.lerian.job.completed" || e.SpecVersion != "1.0" {
			t.Fatalf("prefix %q: %+v", p, e)
		}
		if v, ok := cloudevent.Attribute(minimal(p), "ID"); !ok || v != "fetcher.job.completed.1" {
			t.Fatalf("Attribute under %q = %q, %v", p, v, ok)
		}
	}
}

func TestHeaderIsCaseInsensitiveAndReadsEveryType(t *testing.T) {
	h := map[string]any{
		"X-Tenant-ID":   []byte("t1"),
		"x-request-id":  "req-1",
		"x-retry-count": int32(3),
		"x-big":         int64(1 << 40),
		"x-flag":        true,
		"x-void":        nil,
	}
	cases := []struct{ name, want string }{
		{"x-tenant-id", "t1"}, {"X-TENANT-ID", "t1"}, {"X-Request-Id", "req-1"},
		{"x-retry-count", "3"}, {"X-BIG", "1099511627776"}, {"x-flag", "true"}, {"x-void", ""},
	}
	for _, c := range cases {
		if got, ok := cloudevent.Header(h, c.name); !ok || got != c.want {
			t.Errorf("Header(%q) = %q, %v; want %q", c.name, got, ok, c.want)
		}
	}
	if _, ok := cloudevent.Header(h, "x-absent"); ok {
		t.Error("absent header reported present")
	}
	if _, ok := cloudevent.Attribute(h, "id"); ok {
		t.Error("absent attribute reported present")
	}
}

func TestDuplicatesResolveTheSameWayEveryTime(t *testing.T) {
	h := minimal("cloudEvents:")
	h["ce-id"] = "from-ce"
	h["cloudEvents_id"] = "from-underscore"
	h["CE-ID"] = "from-upper-ce"
	h["X-Tenant-ID"] = "exact"
	h["x-tenant-id"] = "lower"
	for range 50 { // map order varies between runs of the loop
		e, err := cloudevent.FromAMQP(h, []byte(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		// "ce-" beats the other prefixes; among case variants the smaller key ("CE-ID") wins.
		if e.ID != "from-upper-ce" {
			t.Fatalf("ID = %q", e.ID)
		}
		if v, _ := cloudevent.Attribute(h, "id"); v != "from-upper-ce" {
			t.Fatalf("Attribute = %q", v)
		}
		if e.Tenant != "exact" {
			t.Fatalf("Tenant = %q", e.Tenant)
		}
	}
}

func TestMissingRequiredAttributesAreNamed(t *testing.T) {
	cases := []struct {
		drop []string
		want []string
	}{
		{[]string{"ce-id"}, []string{"ce-id"}},
		{[]string{"ce-type"}, []string{"ce-type"}},
		{[]string{"ce-specversion"}, []string{"ce-specversion"}},
		{[]string{"ce-id", "ce-type", "ce-specversion"}, []string{"ce-id", "ce-type", "ce-specversion"}},
	}
	for _, c := range cases {
		h := minimal("ce-")
		for _, d := range c.drop {
			delete(h, d)
		}
		_, err := cloudevent.FromAMQP(h, []byte(`{}`))
		if got := reasonOf(t, err); got != cloudevent.NotACloudEvent {
			t.Fatalf("drop %v: got %q", c.drop, got)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("drop %v: %q does not name %s", c.drop, err, w)
			}
		}
	}
	h := minimal("ce-")
	h["ce-id"] = []byte("")
	if got := reasonOf(t, func() error { _, err := cloudevent.FromAMQP(h, []byte(`{}`)); return err }()); got != cloudevent.NotACloudEvent {
		t.Fatalf("empty ce-id: got %q", got)
	}
}

func TestSpecVersionMustBe10(t *testing.T) {
	for _, v := range []string{"0.3", "1", "1.0.0", "2.0"} {
		h := minimal("ce-")
		h["ce-specversion"] = []byte(v)
		_, err := cloudevent.FromAMQP(h, []byte(`{}`))
		if got := reasonOf(t, err); got != cloudevent.NotACloudEvent {
			t.Fatalf("specversion %q: got %q", v, got)
		}
	}
	h := minimal("ce-")
	h["ce-specversion"] = []byte(strings.Repeat("9", 10_000))
	_, err := cloudevent.FromAMQP(h, []byte(`{}`))
	if len(err.Error()) > 100 {
		t.Fatalf("error echoes a huge header value: %d bytes", len(err.Error()))
	}
}

func TestBodyMustBeJSON(t *testing.T) {
	for _, b := range []string{"not json", "", `{"a":`, `{}x`} {
		_, err := cloudevent.FromAMQP(minimal("ce-"), []byte(b))
		if got := reasonOf(t, err); got != cloudevent.BodyNotJSON {
			t.Fatalf("body %q: got %q", b, got)
		}
		if b != "" && strings.Contains(err.Error(), b) {
			t.Fatalf("error echoes the body: %q", err)
		}
	}
}

func TestTenantFallsBackToXTenantID(t *testing.T) {
	h := minimal("ce-")
	if e, _ := cloudevent.FromAMQP(h, []byte(`{}`)); e.Tenant != "" {
		t.Fatalf("no tenant anywhere: %q", e.Tenant)
	}
	h["x-tenant-id"] = []byte("from-header")
	if e, _ := cloudevent.FromAMQP(h, []byte(`{}`)); e.Tenant != "from-header" {
		t.Fatalf("header fallback: %q", e.Tenant)
	}
	h["ce-tenantid"] = []byte("from-attribute")
	if e, _ := cloudevent.FromAMQP(h, []byte(`{}`)); e.Tenant != "from-attribute" {
		t.Fatalf("attribute first: %q", e.Tenant)
	}
	h["ce-tenantid"] = []byte("")
	if e, _ := cloudevent.FromAMQP(h, []byte(`{}`)); e.Tenant != "from-header" {
		t.Fatalf("empty attribute falls back: %q", e.Tenant)
	}
}

func TestShortType(t *testing.T) {
	cases := map[string]string{
		"studio.lerian.job.completed":  "job.completed",
		"studio.lerian.job.failed":     "job.failed",
		"studio.lerian.a.b.job.failed": "job.failed",
		"studio.lerian.ping":           "ping",
		"com.example.object.created":   "com.example.object.created",
		"studio.lerianx.job.completed": "studio.lerianx.job.completed",
		"":                             "",
	}
	for in, want := range cases {
		if got := (cloudevent.Event{Type: in}).ShortType(); got != want {
			t.Errorf("ShortType(%q) = %q, want %q", in, got, want)
		}
	}
}

func vectorHeaders(b *testing.B) (map[string]any, []byte) {
	c := loadCases(b)[1] // completed-valid
	return c.amqpHeaders(b, true), []byte(c.Body)
}

func BenchmarkFromAMQP(b *testing.B) {
	h, body := vectorHeaders(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := cloudevent.FromAMQP(h, body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkHeader(b *testing.B) {
	h, _ := vectorHeaders(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := cloudevent.Header(h, "x-tenant-id"); !ok {
			b.Fatal("absent")
		}
	}
}

func FuzzHeaders(f *testing.F) {
	for _, c := range loadCases(f) {
		for name, raw := range c.Headers {
			var s string
			_ = json.Unmarshal(raw, &s)
			f.Add(name, s, "ce-id", "x", []byte(c.Body))
		}
	}
	f.Add("cloudEvents:", "", "CE-", "1.0", []byte("not json"))
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string, body []byte) {
		h := minimal("ce-")
		h[k1] = []byte(v1)
		h[k2] = v2
		h["x-int"] = int32(len(v1))
		e, err := cloudevent.FromAMQP(h, body)
		if err != nil {
			_ = reasonOf(t, err)
			return
		}
		if !json.Valid(e.Data) {
			t.Fatalf("accepted a body that is not JSON: %q", body)
		}
		_ = e.ShortType()
		_, _ = cloudevent.Header(h, k1)
		_, _ = cloudevent.Attribute(h, k2)
	})
}
