// Package jsonscan reads JSON text without decoding it: whether it is valid (Valid,
// exactly json.Valid's answer, faster), and, for text already found valid, one object
// member, one string, or whether json.Marshal would copy the text unchanged. Those
// readers build nothing and never validate; on text that is not valid JSON their
// answers mean nothing, but they never panic.
package jsonscan

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// Member returns the raw text of the member named key in the object b holds
// (whitespace around b allowed), as decoding b into a map[string]any finds it: a key
// matches when it decodes to exactly key, and the last duplicate wins. ok is false
// when b is not an object, has no such member, or holds anywhere a number that does
// not fit a float64, which makes that decoding fail.
func Member(b []byte, key string) (raw []byte, ok bool) {
	i := skipSpace(b, 0)
	if i == len(b) || b[i] != '{' {
		return nil, false
	}
	i++
	for {
		i = skipSpace(b, i)
		if i == len(b) {
			return nil, false
		}
		switch b[i] {
		case '}':
			return raw, ok
		case ',':
			i = skipSpace(b, i+1)
		}
		if i == len(b) || b[i] != '"' {
			return nil, false
		}
		k := i
		i = skipString(b, i)
		name := b[k:i]
		if i = skipSpace(b, i); i == len(b) || b[i] != ':' {
			return nil, false
		}
		v := skipSpace(b, i+1)
		var fits bool
		if i, fits = skipValue(b, v); !fits {
			return nil, false
		}
		if keyIs(name, key) {
			raw, ok = b[v:i], true
		}
	}
}

// Unquote decodes a string token the way encoding/json does (invalid UTF-8 becomes
// U+FFFD). Without escapes it returns a slice of raw, so reading costs no copy.
func Unquote(raw []byte) []byte {
	if len(raw) < 2 {
		return nil
	}
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return inner
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil
	}
	return []byte(s)
}

// Verbatim reports whether json.Marshal copies b, held in a json.RawMessage, unchanged:
// b has no whitespace outside strings and none of the characters Marshal escapes for
// HTML (<, >, &, U+2028, U+2029). Text Go's own json.Marshal wrote already is so.
func Verbatim(b []byte) bool {
	for i := 0; i < len(b); {
		switch c := b[i]; {
		case c == '"':
			i = skipString(b, i)
		case isSpace(c):
			return false
		default:
			i++
		}
	}
	if bytes.IndexByte(b, '<') >= 0 || bytes.IndexByte(b, '>') >= 0 || bytes.IndexByte(b, '&') >= 0 {
		return false
	}
	for i := 0; ; i++ {
		j := bytes.IndexByte(b[i:], 0xE2) // U+2028 and U+2029 are E2 80 A8 and E2 80 A9
		if j < 0 {
			return true
		}
		i += j
		if i+2 < len(b) && b[i+1] == 0x80 && b[i+2]&^1 == 0xA8 {
			return false
		}
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// skipString returns the index just after the string token starting at b[i], a '"';
// len(b) when it is not closed.
func skipString(b []byte, i int) int {
	open := i
	// Most strings (keys, ids) are short: step through those byte by byte.
	for i++; i < len(b) && i < open+16; i++ {
		switch b[i] {
		case '"':
			return i + 1
		case '\\':
			i++
		}
	}
	for i < len(b) {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			break
		}
		i += j
		// The quote closes the string unless an odd run of backslashes escapes it;
		// the opening quote stops the run.
		k := i - 1
		for k > open && b[k] == '\\' {
			k--
		}
		i++
		if (i-2-k)%2 == 0 {
			return i
		}
	}
	return len(b)
}

// skipNumber returns the index just after the number token starting at b[i].
func skipNumber(b []byte, i int) int {
	for i < len(b) {
		switch c := b[i]; {
		case c >= '0' && c <= '9', c == '-', c == '+', c == '.', c == 'e', c == 'E':
			i++
		default:
			return i
		}
	}
	return i
}

// skipValue returns the index just after the value starting at b[i]; fits is false
// when the value holds a number encoding/json cannot decode into a float64 (or the
// text is cut short).
func skipValue(b []byte, i int) (next int, fits bool) {
	if i == len(b) {
		return i, false
	}
	switch b[i] {
	case '"':
		return skipString(b, i), true
	case 't', 'n':
		return min(i+4, len(b)), i+4 <= len(b)
	case 'f':
		return min(i+5, len(b)), i+5 <= len(b)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipString(b, i)
			case '{', '[':
				depth++
				i++
			case '}', ']':
				depth--
				i++
				if depth == 0 {
					return i, true
				}
			case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
				// Outside strings, a digit or '-' can only start a number.
				j := skipNumber(b, i)
				if !fitsFloat64(b[i:j]) {
					return j, false
				}
				i = j
			default:
				i++
			}
		}
		return i, false
	default:
		j := skipNumber(b, i)
		return j, j > i && fitsFloat64(b[i:j])
	}
}

// fitsFloat64 reports whether strconv.ParseFloat (which encoding/json uses for
// numbers decoded into any) accepts the token. Without an exponent a number
// needs over 308 digits to overflow, so the common case costs nothing.
func fitsFloat64(tok []byte) bool {
	if len(tok) < 300 && bytes.IndexAny(tok, "eE") < 0 {
		return true
	}
	_, err := strconv.ParseFloat(string(tok), 64)
	return err == nil
}

// keyIs reports whether the raw key token decodes to exactly key.
func keyIs(raw []byte, key string) bool {
	if len(raw) < 2 {
		return false
	}
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return string(inner) == key
	}
	return string(Unquote(raw)) == key
}
