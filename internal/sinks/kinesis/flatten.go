package kinesis

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"unicode"
)

// errNotObject is flatten's answer to a body that is not one JSON object.
var errNotObject = errors.New("the body is not a JSON object")

// flatten turns a JSON object into one level of snake_case keys, exactly as the
// contract (destinations.md) asks of a Kinesis record, losing nothing:
//   - each scalar of the body is one member, named by its path: object keys in
//     snake_case and array indexes, joined with "_" (data.result.sizeBytes →
//     data_result_size_bytes, data.rows[1].sku → data_rows_1_sku);
//   - an empty object or array is kept as the value {} or [], so its presence is not lost;
//   - when two paths give one name, the first in document order keeps it and each later
//     one is suffixed __2, __3… (snake never writes "__", so a suffix cannot meet a name);
//   - members keep the body's order, and numbers the exact digits they were written with.
//
// A key with no letters or digits adds nothing to the path; a value whose path adds
// nothing at all is named "_".
func flatten(body []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber() // a json.Number is the token's own text: the digits stay exact
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errNotObject
	}
	f := &flattener{dec: dec, out: []byte{'{'}, seen: map[string]int{}}
	f.enc = json.NewEncoder(&f.buf)
	f.enc.SetEscapeHTML(false) // keep the receiver's bytes as they were, and the record small
	if err := f.object(""); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("the body holds more than one JSON value")
	}
	return append(f.out, '}'), nil
}

// flattener walks the body's tokens in document order and appends the record's members.
type flattener struct {
	dec  *json.Decoder
	out  []byte
	seen map[string]int // name → how many members took it so far
	buf  bytes.Buffer
	enc  *json.Encoder
}

// object reads the members of an object whose '{' was read, up to its '}'.
func (f *flattener) object(path string) error {
	for {
		tok, err := f.dec.Token()
		if err != nil {
			return err
		}
		key, ok := tok.(string)
		if !ok { // the closing '}'
			return nil
		}
		if err := f.value(join(path, snake(key))); err != nil {
			return err
		}
	}
}

// value reads one value at path: an object or array is walked, a scalar written.
func (f *flattener) value(path string) error {
	tok, err := f.dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		if !f.dec.More() {
			f.member(path, []byte("{}"))
			_, err := f.dec.Token() // '}'
			return err
		}
		return f.object(path)
	case json.Delim('['):
		if !f.dec.More() {
			f.member(path, []byte("[]"))
		}
		for i := 0; f.dec.More(); i++ {
			if err := f.value(join(path, strconv.Itoa(i))); err != nil {
				return err
			}
		}
		_, err := f.dec.Token() // ']'
		return err
	}
	switch v := tok.(type) {
	case json.Number:
		f.member(path, []byte(v))
	case string:
		f.member(path, f.quote(v))
	case bool:
		f.member(path, strconv.AppendBool(nil, v))
	case nil:
		f.member(path, []byte("null"))
	default: // a stray delimiter: the decoder reports it first
		return errors.New("unexpected JSON token")
	}
	return nil
}

// member appends "name":raw, suffixing a name already taken.
func (f *flattener) member(path string, raw []byte) {
	if path == "" {
		path = "_"
	}
	n := f.seen[path] + 1
	f.seen[path] = n
	name := path
	if n > 1 {
		name += "__" + strconv.Itoa(n)
	}
	if len(f.out) > 1 {
		f.out = append(f.out, ',')
	}
	f.out = append(append(append(f.out, f.quote(name)...), ':'), raw...)
}

// quote is s as a JSON string, HTML characters unescaped.
func (f *flattener) quote(s string) []byte {
	f.buf.Reset()
	_ = f.enc.Encode(s) // a string always encodes
	return bytes.Clone(bytes.TrimSuffix(f.buf.Bytes(), []byte("\n")))
}

// join appends one path segment; an empty one (a key with no letters or digits) adds nothing.
func join(path, segment string) string {
	switch {
	case segment == "":
		return path
	case path == "":
		return segment
	}
	return path + "_" + segment
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
