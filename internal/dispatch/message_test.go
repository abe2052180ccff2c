package dispatch

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// decodedStoreID is the store-id lookup by decoding the whole body, numbers kept as
// written (a body plain decoding refuses, with a number beyond float64, names none):
// storeID must answer the same on every body ingest accepts.
func decodedStoreID(data []byte, paths []string) string {
	if len(paths) == 0 {
		paths = []string{"metadata.store_id", "metadata.storeId"}
	}
	var plain, body map[string]any
	if json.Unmarshal(data, &plain) != nil {
		return ""
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if dec.Decode(&body) != nil {
		return ""
	}
	for _, path := range paths {
		var v any = body
		for _, part := range strings.Split(path, ".") {
			obj, ok := v.(map[string]any)
			if !ok {
				v = nil
				break
			}
			v = obj[part]
		}
		switch v := v.(type) {
		case string:
			if v != "" {
				return v
			}
		case json.Number:
			return v.String()
		}
	}
	return ""
}

var storeIDCases = []struct {
	name  string
	body  string
	paths []string // nil: the defaults
	want  string
}{
	{"default path", `{"jobId":"j","metadata":{"store_id":"st_1"}}`, nil, "st_1"},
	{"second default path", `{"metadata":{"storeId":"st_2"}}`, nil, "st_2"},
	{"first default path wins", `{"metadata":{"storeId":"b","store_id":"a"}}`, nil, "a"},
	{"empty string falls through", `{"metadata":{"store_id":"","storeId":"b"}}`, nil, "b"},
	{"only empty strings", `{"metadata":{"store_id":"","storeId":""}}`, nil, ""},
	{"no metadata", `{"jobId":"j"}`, nil, ""},
	{"deep path", `{"a":{"b":{"c":{"d":"deep"}}}}`, []string{"a.b.c.d"}, "deep"},
	{"top-level path", `{"shop":"s1"}`, []string{"shop"}, "s1"},
	{"configured path only", `{"metadata":{"store_id":"a"},"x":{"y":"b"}}`, []string{"x.y"}, "b"},
	{"integer", `{"metadata":{"store_id":42}}`, nil, "42"},
	{"negative fraction", `{"metadata":{"store_id":-0.5}}`, nil, "-0.5"},
	{"exponent kept as written", `{"metadata":{"store_id":1e21}}`, nil, "1e21"},
	{"exponent fraction kept as written", `{"metadata":{"store_id":12.50e-1}}`, nil, "12.50e-1"},
	{"beyond float64 precision: every digit", `{"metadata":{"store_id":1234567890123456789}}`, nil, "1234567890123456789"},
	{"beyond uint64: every digit", `{"metadata":{"store_id":123456789012345678901234567890}}`, nil, "123456789012345678901234567890"},
	{"negative zero", `{"metadata":{"store_id":-0}}`, nil, "-0"},
	{"zero is a store id", `{"metadata":{"store_id":0,"storeId":"b"}}`, nil, "0"},
	{"escapes decoded", `{"metadata":{"store_id":"a\"b\\c\u00e9\u0041\/"}}`, nil, "a\"b\\céA/"},
	{"escaped key", `{"meta\u0064ata":{"store\u005fid":"k"}}`, nil, "k"},
	{"surrogate pair", `{"metadata":{"store_id":"\ud83d\ude00"}}`, nil, "\U0001F600"},
	{"invalid utf-8 replaced", "{\"metadata\":{\"store_id\":\"a\xffb\"}}", nil, "a\uFFFDb"},
	{"duplicate value: last wins", `{"metadata":{"store_id":"a","store_id":"b"}}`, nil, "b"},
	{"duplicate value: last empty wins", `{"metadata":{"store_id":"a","store_id":""}}`, nil, ""},
	{"duplicate intermediate: last wins whole", `{"metadata":{"store_id":"a"},"metadata":{"other":1}}`, nil, ""},
	{"duplicate intermediate: later one read", `{"metadata":{"x":1},"metadata":{"storeId":"b"}}`, nil, "b"},
	{"missing intermediate", `{"meta":{"store_id":"a"}}`, nil, ""},
	{"intermediate is a string", `{"metadata":"store_id"}`, nil, ""},
	{"intermediate is null", `{"metadata":null}`, nil, ""},
	{"intermediate is a number", `{"metadata":5}`, nil, ""},
	{"array on the path", `{"metadata":[{"store_id":"a"}]}`, nil, ""},
	{"array index is not a key", `{"metadata":[{"store_id":"a"}]}`, []string{"metadata.0.store_id"}, ""},
	{"array value", `{"metadata":{"store_id":["a"]}}`, nil, ""},
	{"object value", `{"metadata":{"store_id":{"id":"a"}}}`, nil, ""},
	{"bool value", `{"metadata":{"store_id":true,"storeId":"b"}}`, nil, "b"},
	{"null value", `{"metadata":{"store_id":null}}`, nil, ""},
	{"nested key only at another depth", `{"store_id":"top","metadata":{"inner":{"store_id":"x"}}}`, nil, ""},
	{"case matters", `{"Metadata":{"Store_ID":"a"}}`, nil, ""},
	{"whitespace", " \n{ \"metadata\" :\t{ \"store_id\" :\r\n\"w\" } , \"x\" : [ 1 , 2 ] }\n", nil, "w"},
	{"key with dot", `{"a.b":"dotted","a":{"b":"nested"}}`, []string{"a.b"}, "nested"},
	{"empty segment names the empty key", `{"a":{"":{"b":"e"}}}`, []string{"a..b"}, "e"},
	{"paths share a first segment", `{"a":{"y":"2"}}`, []string{"a.x", "a.y"}, "2"},
	{"paths with other first segments", `{"a":{"x":""},"b":{"y":"3"}}`, []string{"a.x", "b.y"}, "3"},
	{"top-level path after a nested one", `{"a":{"x":null},"b":4}`, []string{"a.x", "a", "b"}, "4"},
	{"trailing dot names the empty key", `{"a":{"":"t"}}`, []string{"a."}, "t"},
	{"empty path names the empty key", `{"":"e"}`, []string{""}, "e"},
	{"strings with braces skipped", `{"x":"}{\"","metadata":{"pad":"]]\\","store_id":"s"}}`, nil, "s"},
	{"number beyond float64 anywhere spoils the decode", `{"metadata":{"store_id":"a"},"n":1e400}`, nil, ""},
	{"number beyond float64 nested", `{"metadata":{"store_id":"a"},"r":{"l":[1,-1e999]}}`, nil, ""},
	{"store id beyond float64", `{"metadata":{"store_id":1e309}}`, nil, ""},
	{"tiny number is fine", `{"metadata":{"store_id":"a"},"n":1e-400}`, nil, "a"},
	{"array body", `[{"metadata":{"store_id":"a"}}]`, nil, ""},
	{"null body", `null`, nil, ""},
	{"string body", `"metadata"`, nil, ""},
	{"empty object", `{}`, nil, ""},
}

func TestStoreIDReadsTheFirstPathThatNamesAStringOrNumber(t *testing.T) {
	for _, c := range storeIDCases {
		t.Run(c.name, func(t *testing.T) {
			if !json.Valid([]byte(c.body)) {
				t.Fatalf("case is not valid JSON: %s", c.body)
			}
			if ref := decodedStoreID([]byte(c.body), c.paths); ref != c.want {
				t.Fatalf("table disagrees with decoding: %q", ref)
			}
			if got := storeID([]byte(c.body), c.paths); got != c.want {
				t.Fatalf("storeID = %q, want %q", got, c.want)
			}
		})
	}
}

func FuzzStoreID(f *testing.F) {
	for _, c := range storeIDCases {
		f.Add([]byte(c.body), strings.Join(c.paths, ","))
	}
	f.Fuzz(func(t *testing.T, body []byte, paths string) {
		var ps []string
		if paths != "" {
			ps = strings.Split(paths, ",")
		}
		got := storeID(body, ps) // on any bytes: an answer, never a panic
		if !json.Valid(body) {
			return
		}
		if want := decodedStoreID(body, ps); got != want {
			t.Fatalf("storeID(%q, %q) = %q, decoding says %q", body, ps, got, want)
		}
	})
}
