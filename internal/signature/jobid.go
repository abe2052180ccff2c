package signature

import (
	"github.com/mercamap/relay/internal/jsonscan"
)

// JobID returns the body's top-level "jobId" when the body is a JSON object and
// that member is a string, and "" otherwise. It agrees with what Fetcher signs:
// Fetcher unmarshals the body into a map[string]any, so the key match is exact,
// the last duplicate wins, and any decoding error (invalid JSON, a number beyond
// float64) yields "".
func JobID(body []byte) string {
	if !jsonscan.Valid(body) {
		return ""
	}
	return string(validJobID(body))
}

// validJobID is JobID for a body json.Valid accepted, without the string copy: when
// the value has no escapes it is a slice of body, so Verify pays nothing for it.
func validJobID(body []byte) []byte {
	raw, ok := jsonscan.Member(body, "jobId")
	if !ok || raw[0] != '"' {
		return nil
	}
	return jsonscan.Unquote(raw)
}
