package signature

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// JobID returns the body's top-level "jobId" when the body is a JSON object and
// that member is a string, and "" otherwise. It agrees with what Fetcher signs:
// Fetcher unmarshals the body into a map[string]any, so the key match is exact,
// the last duplicate wins, and any decoding error (invalid JSON, a number beyond
// float64) yields "".
func JobID(body []byte) string {
	return string(jobID(body))
}

// jobID is JobID without the string copy: when the value has no escapes it is a
// slice of body, so Verify pays nothing for it.
func jobID(body []byte) []byte {
	if !json.Valid(body) {
		return nil
	}
	i := skipSpace(body, 0)
	if body[i] != '{' {
		return nil
	}
	i++
	var last []byte // raw token of the last "jobId" member seen
	for {
		i = skipSpace(body, i)
		switch body[i] {
		case '}':
			if last == nil || last[0] != '"' {
				return nil
			}
			return unquote(last)
		case ',':
			i = skipSpace(body, i+1)
		}
		k := i
		i = skipString(body, i)
		key := body[k:i]
		i = skipSpace(body, i) + 1 // ':'
		i = skipSpace(body, i)
		v := i
		var ok bool
		if i, ok = skipValue(body, i); !ok {
			return nil
		}
		if isJobIDKey(key) {
			last = body[v:i]
		}
	}
}

// The helpers below assume json.Valid(b): they never meet malformed input.

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index just after the string token starting at b[i].
func skipString(b []byte, i int) int {
	for i++; ; i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
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

// skipValue returns the index just after the value starting at b[i]; ok is false
// when the value holds a number encoding/json cannot fit in a float64, which
// makes Fetcher's own decoding of the body fail.
func skipValue(b []byte, i int) (next int, ok bool) {
	switch b[i] {
	case '"':
		return skipString(b, i), true
	case 't', 'n':
		return i + 4, true
	case 'f':
		return i + 5, true
	case '{', '[':
		depth := 0
		for {
			switch c := b[i]; {
			case c == '"':
				i = skipString(b, i)
			case c == '{' || c == '[':
				depth++
				i++
			case c == '}' || c == ']':
				depth--
				i++
				if depth == 0 {
					return i, true
				}
			case c == '-' || (c >= '0' && c <= '9'):
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
	default:
		j := skipNumber(b, i)
		return j, fitsFloat64(b[i:j])
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

// isJobIDKey reports whether the raw key token decodes to exactly "jobId".
func isJobIDKey(raw []byte) bool {
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		return string(inner) == "jobId"
	}
	return string(unquote(raw)) == "jobId"
}

// unquote decodes a valid JSON string token the way encoding/json does
// (invalid UTF-8 becomes U+FFFD). Without escapes it returns a slice of raw.
func unquote(raw []byte) []byte {
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
