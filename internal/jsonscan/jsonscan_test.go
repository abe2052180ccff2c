package jsonscan_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/mercamap/relay/internal/jsonscan"
)

// decodeMember is what Member must agree with: decoding the whole text into a
// map[string]any and reading one key.
func decodeMember(b []byte, key string) (any, bool) {
	var m map[string]any
	if json.Unmarshal(b, &m) != nil {
		return nil, false
	}
	v, ok := m[key]
	return v, ok
}

var memberCases = []struct {
	name, doc, key string
	want           string // the raw member text; "" when absent
}{
	{"first", `{"a":1,"b":2}`, "a", `1`},
	{"last", `{"a":1,"b":"x"}`, "b", `"x"`},
	{"object value kept raw", `{"m":{"s": "x" , "n":[1, 2]},"z":0}`, "m", `{"s": "x" , "n":[1, 2]}`},
	{"array value", `{"a":[{"b":1}]}`, "a", `[{"b":1}]`},
	{"nested key is not top level", `{"m":{"a":1}}`, "a", ""},
	{"absent", `{"a":1}`, "b", ""},
	{"empty object", `{}`, "a", ""},
	{"empty key", `{"":7}`, "", `7`},
	{"whitespace everywhere", " \t\n{ \"a\" :\r\n true ,\"b\" : null } \n", "a", `true`},
	{"literals", `{"t":true,"f":false,"n":null,"k":1}`, "f", `false`},
	{"null member", `{"a":null}`, "a", `null`},
	{"escaped key", `{"st\u006fre":"x"}`, "store", `"x"`},
	{"escaped quote in key", `{"a\"b":1}`, `a"b`, `1`},
	{"key with invalid utf-8 decodes to U+FFFD", "{\"a\xffb\":1}", "a\uFFFDb", `1`},
	{"invalid utf-8 key does not match its raw bytes", "{\"a\xffb\":1}", "a\xffb", ""},
	{"last duplicate wins", `{"a":1,"a":2}`, "a", `2`},
	{"last duplicate wins across types", `{"a":{"x":1},"b":0,"a":"s"}`, "a", `"s"`},
	{"escaped backslash before closing quote", `{"a":"x\\","b":2}`, "b", `2`},
	{"escaped quote inside value", `{"a":"x\"}","b":2}`, "b", `2`},
	{"braces and brackets in strings", `{"a":"}{][","b":{"c":"]"},"d":3}`, "d", `3`},
	{"case differs", `{"Store":1}`, "store", ""},
	{"array document", `[{"a":1}]`, "a", ""},
	{"string document", `"a"`, "a", ""},
	{"null document", `null`, "a", ""},
	{"number document", `1`, "a", ""},
	{"number beyond float64 elsewhere", `{"a":1,"n":1e400}`, "a", ""},
	{"nested number beyond float64", `{"a":1,"m":{"l":[0,-2e999]}}`, "a", ""},
	{"number beyond float64 in the member itself", `{"a":[1e309]}`, "a", ""},
	{"tiny number is fine", `{"a":1,"n":1e-400}`, "a", `1`},
	{"long number beyond float64", `{"a":1,"n":` + strings.Repeat("9", 400) + `}`, "a", ""},
	{"long number within float64", `{"a":1,"n":0.` + strings.Repeat("9", 400) + `}`, "a", `1`},
	{"number member", `{"a":-12.5e3}`, "a", `-12.5e3`},
}

func TestMemberAgreesWithDecoding(t *testing.T) {
	for _, c := range memberCases {
		t.Run(c.name, func(t *testing.T) {
			doc := []byte(c.doc)
			if !json.Valid(doc) {
				t.Fatalf("case is not valid JSON: %s", c.doc)
			}
			ref, refOK := decodeMember(doc, c.key)
			if refOK != (c.want != "") {
				t.Fatalf("table disagrees with encoding/json: present %v", refOK)
			}
			raw, ok := jsonscan.Member(doc, c.key)
			if ok != (c.want != "") || string(raw) != c.want {
				t.Fatalf("Member = %q, %v; want %q", raw, ok, c.want)
			}
			if ok {
				var got any
				if err := json.Unmarshal(raw, &got); err != nil || !reflect.DeepEqual(got, ref) {
					t.Fatalf("member decodes to %#v (%v), encoding/json has %#v", got, err, ref)
				}
			}
		})
	}
}

func TestUnquote(t *testing.T) {
	cases := []struct{ raw, want string }{
		{`""`, ""},
		{`"plain"`, "plain"},
		{`"a\"b\\c\/d\u00e9\n\t"`, "a\"b\\c/d\u00e9\n\t"},
		{`"\ud83d\ude00"`, "\U0001F600"},
		{`"\ud800"`, "\uFFFD"},
		{"\"a\xffb\"", "a\uFFFDb"},
		{`"é"`, "é"},
	}
	for _, c := range cases {
		var ref string
		if err := json.Unmarshal([]byte(c.raw), &ref); err != nil || ref != c.want {
			t.Fatalf("%s: table disagrees with encoding/json: %q", c.raw, ref)
		}
		if got := string(jsonscan.Unquote([]byte(c.raw))); got != c.want {
			t.Errorf("Unquote(%s) = %q, want %q", c.raw, got, c.want)
		}
	}
}

// marshalsTo is what Verbatim must agree with: json.Marshal's copy of b.
func marshalsTo(b []byte) []byte {
	out, err := json.Marshal(json.RawMessage(b))
	if err != nil {
		panic(err)
	}
	return out
}

func TestVerbatimAgreesWithMarshal(t *testing.T) {
	cases := []struct {
		doc  string
		want bool
	}{
		{`{"a":"b c","d":[1,2,{"e":null}]}`, true},
		{`"tab\tand newline\n escaped"`, true},
		{`{"a":"\u003c\u003e\u0026"}`, true},
		{`{"a":"é–€"}`, true}, // E2 80 93 and E2 82 AC: other characters starting with E2
		{"{\"a\":\"\xe2\x80\"}", true},
		{`{"a":"x\\"}`, true},
		{`{"a":"x\"y z"}`, true},
		{`null`, true},
		{` {}`, false},
		{`{} `, false},
		{`{"a": 1}`, false},
		{"[1,\n2]", false},
		{`{"a":"<"}`, false},
		{`{"a":">"}`, false},
		{`{"a":"&"}`, false},
		{"{\"a\":\"\u2028\"}", false},
		{"{\"a\":\"\u2029\"}", false},
	}
	for _, c := range cases {
		if ref := string(marshalsTo([]byte(c.doc))) == c.doc; ref != c.want {
			t.Fatalf("%q: table disagrees with json.Marshal", c.doc)
		}
		if got := jsonscan.Verbatim([]byte(c.doc)); got != c.want {
			t.Errorf("Verbatim(%q) = %v, want %v", c.doc, got, c.want)
		}
	}
}

func TestInvalidTextNeverPanics(t *testing.T) {
	for _, doc := range []string{``, ` `, `{`, `{"`, `{"a`, `{"a"`, `{"a":`, `{"a":t`, `{"a":"x`, `{"a":"x\"`,
		`{"a":[`, `{"a":1,`, `{"a":1 "b"`, `{a:1}`, `{"a":-}`, `{"a":x}`, `"`, `{"a":{"b":"\`} {
		jsonscan.Member([]byte(doc), "a")
		jsonscan.Unquote([]byte(doc))
		jsonscan.Verbatim([]byte(doc))
	}
}

func FuzzMember(f *testing.F) {
	for _, c := range memberCases {
		f.Add([]byte(c.doc), c.key)
	}
	f.Fuzz(func(t *testing.T, doc []byte, key string) {
		raw, ok := jsonscan.Member(doc, key) // on any text: an answer, never a panic
		verbatim := jsonscan.Verbatim(doc)
		if !json.Valid(doc) {
			return
		}
		ref, refOK := decodeMember(doc, key)
		if ok != refOK {
			t.Fatalf("Member(%q, %q) found %v, encoding/json %v", doc, key, ok, refOK)
		}
		if ok {
			var got any
			if err := json.Unmarshal(raw, &got); err != nil || !reflect.DeepEqual(got, ref) {
				t.Fatalf("Member(%q, %q) = %q, encoding/json has %#v", doc, key, raw, ref)
			}
			if s, isString := ref.(string); isString && string(jsonscan.Unquote(raw)) != s {
				t.Fatalf("Unquote(%q) = %q, encoding/json has %q", raw, jsonscan.Unquote(raw), s)
			}
		}
		if want := string(marshalsTo(doc)) == string(doc); verbatim != want {
			t.Fatalf("Verbatim(%q) = %v, json.Marshal says %v", doc, verbatim, want)
		}
	})
}
