package kinesis

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode"
)

func TestFlatten(t *testing.T) {
	for _, tt := range []struct{ name, in, want string }{
		{"contract example",
			`{"id":"msg_1","type":"job.completed","data":{"result":{"sizeBytes":12}},"event_id":"e1","created_at":"2026-11-29T12:00:00Z"}`,
			`{"created_at":"2026-11-29T12:00:00Z","data_result_size_bytes":12,"event_id":"e1","id":"msg_1","type":"job.completed"}`},
		{"arrays kept as values, their objects untouched",
			`{"data":{"pages":[1,{"pageNo":2}],"tags":[]}}`,
			`{"data_pages":[1,{"pageNo":2}],"data_tags":[]}`},
		{"scalars of every kind, numbers exactly as written",
			`{"data":{"n":1.50,"big":12345678901234567890,"t":true,"z":null,"s":"<a&b>"}}`,
			`{"data_big":12345678901234567890,"data_n":1.50,"data_s":"<a&b>","data_t":true,"data_z":null}`},
		{"camelCase, acronyms and digits",
			`{"data":{"storeID":1,"HTTPStatus":2,"sha256Sum":3,"v2Api":4,"already_snake":5,"kebab-case":6,"with space":7}}`,
			`{"data_already_snake":5,"data_http_status":2,"data_kebab_case":6,"data_sha256_sum":3,"data_store_id":1,"data_v2_api":4,"data_with_space":7}`},
		{"deep nesting is one level", `{"data":{"a":{"b":{"c":{"dE":"x"}}}}}`, `{"data_a_b_c_d_e":"x"}`},
		{"empty object carries nothing", `{"id":"m","data":{}}`, `{"id":"m"}`},
		{"data that is not an object stays", `{"data":null,"id":"m"}`, `{"data":null,"id":"m"}`},
		{"a collision keeps the first key in sorted order", `{"data":{"a":{"bC":1},"a_b_c":2}}`, `{"data_a_b_c":1}`},
		{"non-ASCII letters are kept, lower-cased", `{"data":{"Größe":1,"naïveKey":2}}`, `{"data_größe":1,"data_naïve_key":2}`},
		{"keys with no letters or digits", `{"data":{"--":{"x":1}},"":2}`, `{"_":2,"data_x":1}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := flatten([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("flatten(%s)\n got %s\nwant %s", tt.in, got, tt.want)
			}
		})
	}
	for _, bad := range []string{``, `[]`, `"x"`, `null`, `{"a":`} {
		if _, err := flatten([]byte(bad)); err == nil {
			t.Errorf("flatten(%q) succeeded, want an error: a record is made from an object", bad)
		}
	}
}

// FuzzFlatten checks, for any JSON object, that flatten never panics, gives one level
// of snake_case keys, keeps arrays and scalars as values, and is stable on its own output.
func FuzzFlatten(f *testing.F) {
	for _, s := range []string{
		`{"id":"m","data":{"result":{"sizeBytes":1,"items":[{"aB":1}]}}}`,
		`{"data":{"HTTPStatus":{"ℂℂa":1},"Bℂ":2,"ǅx":3}}`,
		`{"":{"":{"":1}},"-":2}`,
		`{"a":{"b_c":1},"a_b":{"c":2},"aB":{"C":3}}`,
		`{"data":{"n":1e400,"s":"\u2028"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := flatten(in)
		var asObject map[string]any
		if json.Unmarshal(in, &asObject) != nil || asObject == nil {
			return // not an object: flatten may refuse it, it must only not panic
		}
		if err != nil {
			t.Fatalf("flatten(%q) refused an object: %v", in, err)
		}
		var flat map[string]json.RawMessage
		if err := json.Unmarshal(out, &flat); err != nil {
			t.Fatalf("flatten(%q) = %q is not a JSON object: %v", in, out, err)
		}
		for k, v := range flat {
			if !isSnake(k) {
				t.Fatalf("flatten(%q): key %q is not snake_case", in, k)
			}
			if v := bytes.TrimSpace(v); len(v) > 0 && v[0] == '{' {
				t.Fatalf("flatten(%q): key %q holds an object %s: want one level", in, k, v)
			}
		}
		again, err := flatten(out)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("flatten is not stable on its output:\n once %s\ntwice %s (%v)", out, again, err)
		}
	})
}

// isSnake: "_" alone, or words of lower-case or caseless letters, digits and marks
// joined by single underscores.
func isSnake(k string) bool {
	if k == "_" {
		return true
	}
	for _, w := range strings.Split(k, "_") {
		if w == "" {
			return false
		}
		for _, r := range w {
			if !(unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r)) || isUpper(r) {
				return false
			}
		}
	}
	return true
}
