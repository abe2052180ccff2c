package signature_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mercamap/relay/internal/signature"
)

// fetcherJobID is Fetcher's own extraction (pkg/rabbitmq/security_envelope.go):
// JobID must agree with it on every body, or valid messages fail to verify.
func fetcherJobID(body []byte) string {
	var payload map[string]any
	if err := json.Unmarshal(body, &payload); err != nil {
		return ""
	}
	if id, ok := payload["jobId"].(string); ok {
		return id
	}
	return ""
}

var jobIDCases = []struct {
	name, body, want string
}{
	{"plain", `{"jobId":"j-1","status":"failed"}`, "j-1"},
	{"not first", `{"status":"failed","metadata":{"jobId":"inner"},"jobId":"j-2"}`, "j-2"},
	{"nested only", `{"metadata":{"jobId":"inner"},"list":[{"jobId":"x"}]}`, ""},
	{"spaces", " \n{ \"jobId\" :\t\"j-3\" } \n", "j-3"},
	{"number", `{"jobId":42}`, ""},
	{"null", `{"jobId":null}`, ""},
	{"object", `{"jobId":{"id":"x"}}`, ""},
	{"empty string", `{"jobId":""}`, ""},
	{"wrong case key", `{"JobId":"j-4","jobid":"j-5"}`, ""},
	{"escaped key", `{"job\u0049d":"j-6"}`, "j-6"},
	{"escaped value", `{"jobId":"a\"b\\c\u00e9\n"}`, "a\"b\\c\u00e9\n"},
	{"last duplicate wins", `{"jobId":"first","jobId":"second"}`, "second"},
	{"non-string duplicate last", `{"jobId":"first","jobId":7}`, ""},
	{"invalid utf-8 replaced", "{\"jobId\":\"a\xffb\"}", "a\uFFFDb"},
	{"array body", `[{"jobId":"x"}]`, ""},
	{"string body", `"jobId"`, ""},
	{"null body", `null`, ""},
	{"not json", `not json`, ""},
	{"truncated", `{"jobId":"x"`, ""},
	{"trailing garbage", `{"jobId":"x"}x`, ""},
	{"empty", ``, ""},
	{"empty object", `{}`, ""},
	{"number beyond float64", `{"jobId":"x","n":1e400}`, ""},
	{"nested number beyond float64", `{"jobId":"x","m":{"a":[1,-2e999]}}`, ""},
	{"tiny number is fine", `{"jobId":"x","n":1e-400}`, "x"},
	{"long plain number", `{"jobId":"x","n":` + strings.Repeat("9", 400) + `}`, ""},
	{"literals", `{"a":true,"b":false,"c":null,"jobId":"x","d":[true,null,-0.5e3]}`, "x"},
	{"braces in strings", `{"a":"}{][\"","jobId":"x"}`, "x"},
}

func TestJobIDAgreesWithFetcher(t *testing.T) {
	for _, c := range jobIDCases {
		t.Run(c.name, func(t *testing.T) {
			if ref := fetcherJobID([]byte(c.body)); ref != c.want {
				t.Fatalf("test table disagrees with Fetcher's extraction: %q vs %q", c.want, ref)
			}
			if got := signature.JobID([]byte(c.body)); got != c.want {
				t.Fatalf("JobID = %q, want %q", got, c.want)
			}
		})
	}
}

func FuzzJobID(f *testing.F) {
	for _, c := range jobIDCases {
		f.Add([]byte(c.body))
	}
	for _, c := range loadVectors(f).Cases {
		f.Add([]byte(c.Body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if got, want := signature.JobID(body), fetcherJobID(body); got != want {
			t.Fatalf("JobID(%q) = %q, Fetcher extracts %q", body, got, want)
		}
	})
}
