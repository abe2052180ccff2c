package kinesis

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

func TestFlatten(t *testing.T) {
	for _, tt := range []struct{ name, in, want string }{
		{"contract example",
			`{"id":"msg_1","type":"job.completed","data":{"result":{"sizeBytes":12}},"event_id":"e1","created_at":"2026-11-29T12:00:00Z"}`,
			`{"id":"msg_1","type":"job.completed","data_result_size_bytes":12,"event_id":"e1","created_at":"2026-11-29T12:00:00Z"}`},
		{"contract: array items by index",
			`{"data":{"rows":[{"sku":"a"},{"sku":"b","unitPrice":1.10}]}}`,
			`{"data_rows_0_sku":"a","data_rows_1_sku":"b","data_rows_1_unit_price":1.10}`},
		{"contract: later collisions suffixed in document order",
			`{"metadata":{"orderId":"A","order_id":"B","OrderID":"C"}}`,
			`{"metadata_order_id":"A","metadata_order_id__2":"B","metadata_order_id__3":"C"}`},
		{"a collision across depths keeps document order", `{"data":{"a":{"bC":1},"a_b_c":2}}`, `{"data_a_b_c":1,"data_a_b_c__2":2}`},
		{"a repeated key keeps both values", `{"a":1,"a":2}`, `{"a":1,"a__2":2}`},
		{"nested arrays", `{"m":[[1,2],[3]]}`, `{"m_0_0":1,"m_0_1":2,"m_1_0":3}`},
		{"scalars of every kind, numbers exactly as written",
			`{"data":{"n":1.50,"big":12345678901234567890,"e":-1E+400,"t":true,"f":false,"z":null,"s":"<a&b>"}}`,
			`{"data_n":1.50,"data_big":12345678901234567890,"data_e":-1E+400,"data_t":true,"data_f":false,"data_z":null,"data_s":"<a&b>"}`},
		{"camelCase, acronyms and digits",
			`{"data":{"storeID":1,"HTTPStatus":2,"sha256Sum":3,"v2Api":4,"already_snake":5,"kebab-case":6,"with space":7}}`,
			`{"data_store_id":1,"data_http_status":2,"data_sha256_sum":3,"data_v2_api":4,"data_already_snake":5,"data_kebab_case":6,"data_with_space":7}`},
		{"deep nesting is one level", `{"data":{"a":{"b":{"c":{"dE":"x"}}}}}`, `{"data_a_b_c_d_e":"x"}`},
		{"empty object and array are kept", `{"id":"m","data":{},"tags":[]}`, `{"id":"m","data":{},"tags":[]}`},
		{"data that is not an object stays", `{"data":null,"id":"m"}`, `{"data":null,"id":"m"}`},
		{"non-ASCII letters are kept, lower-cased", `{"data":{"Größe":1,"naïveKey":2}}`, `{"data_größe":1,"data_naïve_key":2}`},
		{"keys with no letters or digits", `{"data":{"--":{"x":1}},"":2,"-":3}`, `{"data_x":1,"_":2,"___2":3}`},
		{"escapes decoded, strings re-encoded", `{"k\u0041":"\u00e9\n"}`, `{"k_a":"é\n"}`},
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
	for _, bad := range []string{``, `[]`, `"x"`, `null`, `{"a":`, `{"a":1}{}`, `{"a":[1,}`} {
		if _, err := flatten([]byte(bad)); err == nil {
			t.Errorf("flatten(%q) succeeded, want an error: a record is made from one object", bad)
		}
	}
}

// leaf is one scalar (or empty object or array) of a body, found by walking its tokens.
type leaf struct {
	path []string // object keys and array indexes
	raw  string   // its JSON text: numbers as written, strings decoded and re-encoded
}

// leaves walks any JSON value's tokens in document order.
func leaves(t *testing.T, dec *json.Decoder, path []string, out *[]leaf) {
	tok, err := dec.Token()
	if err != nil {
		t.Fatalf("walking the body: %v", err)
	}
	switch tok {
	case json.Delim('{'):
		if !dec.More() {
			*out = append(*out, leaf{path, "{}"})
		}
		for dec.More() {
			k, _ := dec.Token()
			leaves(t, dec, append(path[:len(path):len(path)], k.(string)), out)
		}
		dec.Token()
		return
	case json.Delim('['):
		if !dec.More() {
			*out = append(*out, leaf{path, "[]"})
		}
		for i := 0; dec.More(); i++ {
			leaves(t, dec, append(path[:len(path):len(path)], strconv.Itoa(i)), out)
		}
		dec.Token()
		return
	}
	var raw []byte
	if n, ok := tok.(json.Number); ok {
		raw = []byte(n)
	} else {
		raw, _ = json.Marshal(tok)
	}
	*out = append(*out, leaf{path, string(raw)})
}

func walk(t *testing.T, b []byte) []leaf {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var out []leaf
	leaves(t, dec, nil, &out)
	return out
}

var suffix = regexp.MustCompile(`^(.+)__([2-9]|[1-9][0-9]+)$`)

// FuzzFlatten checks the contract's rule on any JSON object: every scalar of the body
// appears once in the record, in document order, under a one-level snake_case key
// named by its path; a name already taken gets __2, __3… in order; numbers keep their
// exact digits. On anything else flatten may refuse, never panic.
func FuzzFlatten(f *testing.F) {
	for _, s := range []string{
		`{"id":"m","data":{"result":{"sizeBytes":1,"items":[{"aB":1}]}}}`,
		`{"data":{"HTTPStatus":{"ℂℂa":1},"Bℂ":2,"ǅx":3}}`,
		`{"":{"":{"":1}},"-":2}`,
		`{"a":{"b_c":1},"a_b":{"c":2},"aB":{"C":3}}`,
		`{"data":{"n":1e400,"s":"\u2028","big":1234567890123456789}}`,
		`{"metadata":{"orderId":1,"order_id":2},"rows":[{"sku":"a"},[],{}]}`,
		`{"a":1,"a":2,"a_2":3,"a":[{"x":null}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := flatten(in)
		var asObject map[string]any
		if json.Unmarshal(in, &asObject) != nil || asObject == nil {
			// Not one object (or a number beyond float64, which Unmarshal refuses and
			// flatten takes): flatten may refuse it, it must only not panic.
			if err != nil || !json.Valid(in) {
				return
			}
		}
		if err != nil {
			t.Fatalf("flatten(%q) refused an object: %v", in, err)
		}
		want := walk(t, in)
		if len(want) == 1 && want[0].path == nil {
			want = nil // the body is {}: the record is {}, with nothing in it
		}
		dec := json.NewDecoder(bytes.NewReader(out))
		dec.UseNumber()
		if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
			t.Fatalf("flatten(%q) = %q is not a JSON object", in, out)
		}
		taken := map[string]int{}
		for i := 0; dec.More(); i++ {
			tok, _ := dec.Token()
			key := tok.(string)
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				t.Fatalf("flatten(%q) = %q: member %q: %v", in, out, key, err)
			}
			if i >= len(want) {
				t.Fatalf("flatten(%q) = %q has more members than the body has scalars (%d)", in, out, len(want))
			}
			base, n := key, 1
			if m := suffix.FindStringSubmatch(key); m != nil {
				base, n = m[1], atoi(m[2])
			}
			if !isSnake(base) {
				t.Fatalf("flatten(%q): key %q is not snake_case", in, key)
			}
			if taken[base]+1 != n {
				t.Fatalf("flatten(%q): key %q after %d members named %q: want suffixes __2, __3… in order", in, key, taken[base], base)
			}
			taken[base] = n
			if name := pathName(want[i].path); base != name {
				t.Fatalf("flatten(%q): member %d is named %q, want %q from its path %q", in, i, base, name, want[i].path)
			}
			leaf := walk(t, raw)
			if len(leaf) != 1 || len(leaf[0].path) != 0 || leaf[0].raw != want[i].raw {
				t.Fatalf("flatten(%q): member %q holds %s, want the body's scalar %s at %q", in, key, raw, want[i].raw, want[i].path)
			}
		}
		if got := count(taken); got != len(want) {
			t.Fatalf("flatten(%q) = %q has %d members, want one for each of the body's %d scalars", in, out, got, len(want))
		}
		if _, err := dec.Token(); err != nil {
			t.Fatalf("flatten(%q) = %q is not closed: %v", in, out, err)
		}
		if _, err := dec.Token(); !errors.Is(err, io.EOF) {
			t.Fatalf("flatten(%q) = %q holds more than one object", in, out)
		}
	})
}

// pathName is the contract's name for a path: snake_case segments joined with "_",
// segments with no letters or digits left out, "_" when nothing is left.
func pathName(path []string) string {
	var words []string
	for _, p := range path {
		if s := snake(p); s != "" {
			words = append(words, s)
		}
	}
	if len(words) == 0 {
		return "_"
	}
	return strings.Join(words, "_")
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

func count(taken map[string]int) int {
	n := 0
	for _, c := range taken {
		n += c
	}
	return n
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
