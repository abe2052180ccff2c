package kinesis

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"unicode"
)

// flatten turns a JSON object into one level of snake_case keys, as the contract asks
// of a Kinesis record: nested objects' keys are joined with "_"
// (data.result.sizeBytes → data_result_size_bytes); arrays and scalars are kept as
// values, numbers exactly as written; an empty object has nothing to carry and is left
// out. The body's own keys (id, type, event_id, created_at) are snake_case already and
// stay as they are. When two paths flatten to one key (a.b_c and a.bC), the first in
// sorted order of the original keys is kept, so the same body always gives the same record.
func flatten(body []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		return nil, err
	}
	if obj == nil {
		return nil, errors.New("the body is not a JSON object")
	}
	out := map[string]any{}
	flattenInto(out, "", obj)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // keep the receiver's bytes as they were, and the record small
	if err := enc.Encode(out); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func flattenInto(out map[string]any, prefix string, obj map[string]any) {
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		key := snake(k)
		if prefix != "" && key != "" {
			key = prefix + "_" + key
		} else if key == "" {
			key = prefix // a key with no letters or digits adds nothing to the path
		}
		if child, ok := obj[k].(map[string]any); ok {
			flattenInto(out, key, child)
			continue
		}
		if key == "" {
			key = "_" // a top-level key with no letters or digits still needs a name
		}
		if _, taken := out[key]; !taken {
			out[key] = obj[k]
		}
	}
}

// snake turns a key into snake_case: words split at anything that is not a letter, digit
// or mark, and where camelCase starts a new word (sizeBytes → size_bytes, HTTPStatus →
// http_status, storeID → store_id); words lower-cased and joined with "_".
func snake(s string) string {
	rs := []rune(s)
	var words []string
	var word []rune
	flush := func() {
		if len(word) > 0 {
			words = append(words, string(word))
			word = word[:0]
		}
	}
	for i, r := range rs {
		switch {
		case !unicode.IsLetter(r) && !unicode.IsDigit(r) && !unicode.IsMark(r):
			flush()
			continue
		case isUpper(r) && len(word) > 0:
			prev := rs[i-1]
			endsAcronym := isUpper(prev) && i+1 < len(rs) && unicode.IsLower(rs[i+1])
			if !isUpper(prev) || endsAcronym {
				flush()
			}
		}
		word = append(word, unicode.ToLower(r))
	}
	flush()
	return strings.Join(words, "_")
}

// isUpper is an upper-case letter that has a lower case: letters such as ℂ that have
// none are taken as caseless, so snake gives the same answer on its own output.
func isUpper(r rune) bool { return unicode.IsUpper(r) && unicode.ToLower(r) != r }
