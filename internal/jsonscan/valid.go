package jsonscan

import gojson "github.com/goccy/go-json"

// Valid reports whether b is valid JSON text, with exactly json.Valid's answer
// (invalid UTF-8 inside strings accepted, nesting beyond 10,000 levels refused),
// several times faster on large bodies: on a 64 KB body json.Valid took ~88% of the
// CPU ingest spends checking an event (docs/benchmarks.md, "Profile findings").
// valid_test.go holds it to json.Valid on the fuzz corpora and by fuzzing.
func Valid(b []byte) bool { return gojson.Valid(b) }
