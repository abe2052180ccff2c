package jsonscan_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/mercamap/relay/internal/jsonscan"
)

// validCases are the edges where a JSON validator is most often not encoding/json's:
// UTF-8, control characters, escapes, number grammar, literals, nesting depth, trailers.
var validCases = []string{
	``, ` `, `{}`, `[]`, `"\xff"`, "\"\xc3\x28\"", `"é"`, `"\x00"`, "\"\t\"", "\"\x7f\"", `"\u12"`, `"\ud800"`,
	`"\/"`, `"\a"`, `-`, `-0`, `01`, `1.`, `1.e1`, `1e`, `1e+`, `1E5`, `.5`, `+1`, `1e999999999`,
	`123456789012345678901234567890`, `tru`, `true `, `nul`, `nullx`, "\ufeff{}", `{"a":1,}`, `[1,]`,
	`{"a" 1}`, `{1:2}`, `1 2`, `{}{}`, "\v1", "\f1", "\r\n1\r\n", `{"a":"b"}` + "\x00",
	strings.Repeat(`[`, 10000) + strings.Repeat(`]`, 10000),
	strings.Repeat(`[`, 10001) + strings.Repeat(`]`, 10001),
	strings.Repeat(`{"a":`, 10000) + `1` + strings.Repeat(`}`, 10000),
	strings.Repeat(`{"a":`, 10001) + `1` + strings.Repeat(`}`, 10001),
	`{"jobId":"j","metadata":{"pad":"` + strings.Repeat("x", 64<<10) + `"}}`,
}

// fuzzCorpus is every value in the repository's Go fuzz corpora that could be a body.
func fuzzCorpus(t testing.TB) [][]byte {
	var docs [][]byte
	for _, root := range []string{"testdata", "../signature/testdata", "../cloudevent/testdata"} {
		err := filepath.WalkDir(root, func(p string, e os.DirEntry, err error) error {
			if err != nil || e.IsDir() {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			docs = append(docs, b)
			for _, line := range strings.Split(string(b), "\n") {
				for _, pre := range []string{"[]byte(", "string("} {
					if lit, ok := strings.CutPrefix(line, pre); ok {
						if s, err := strconv.Unquote(strings.TrimSuffix(lit, ")")); err == nil {
							docs = append(docs, []byte(s))
						}
					}
				}
			}
			return nil
		})
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	return docs
}

func TestValidIsEncodingJSONValid(t *testing.T) {
	docs := fuzzCorpus(t)
	if len(docs) < 20 {
		t.Fatalf("only %d corpus documents found", len(docs))
	}
	for _, c := range validCases {
		docs = append(docs, []byte(c))
	}
	for _, d := range docs {
		if got, want := jsonscan.Valid(d), json.Valid(d); got != want {
			t.Errorf("Valid(%.60q) (%d bytes) = %v, json.Valid says %v", d, len(d), got, want)
		}
	}
}

func FuzzValid(f *testing.F) {
	for _, d := range fuzzCorpus(f) {
		f.Add(d)
	}
	for _, c := range validCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, d []byte) {
		if got, want := jsonscan.Valid(d), json.Valid(d); got != want {
			t.Fatalf("Valid(%q) = %v, json.Valid says %v", d, got, want)
		}
	})
}
