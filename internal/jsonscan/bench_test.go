package jsonscan_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/mercamap/relay/internal/jsonscan"
)

// benchDocs are about 64 KB each: one long string, and many small members.
func benchDocs(b *testing.B) map[string][]byte {
	long, _ := json.Marshal(map[string]any{"jobId": "j", "metadata": map[string]any{"pad": strings.Repeat("x", 64<<10), "store_id": "s"}})
	var rows []any
	for i := 0; i < 1100; i++ {
		rows = append(rows, map[string]any{"id": i, "name": fmt.Sprintf("row %d", i), "ok": i%2 == 0, "price": 1.25})
	}
	dense, _ := json.Marshal(map[string]any{"jobId": "j", "metadata": map[string]any{"store_id": "s"}, "rows": rows})
	return map[string][]byte{"long-string": long, "dense": dense}
}

func BenchmarkMember(b *testing.B) {
	docs := benchDocs(b)
	for _, name := range []string{"long-string", "dense"} {
		b.Run(name, func(b *testing.B) {
			doc := docs[name]
			b.SetBytes(int64(len(doc)))
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := jsonscan.Member(doc, "metadata"); !ok {
					b.Fatal("no metadata")
				}
			}
		})
	}
}

func BenchmarkVerbatim(b *testing.B) {
	docs := benchDocs(b)
	for _, name := range []string{"long-string", "dense"} {
		b.Run(name, func(b *testing.B) {
			doc := docs[name]
			b.SetBytes(int64(len(doc)))
			b.ReportAllocs()
			for b.Loop() {
				if !jsonscan.Verbatim(doc) {
					b.Fatal("not verbatim")
				}
			}
		})
	}
}

// BenchmarkValid compares Valid with json.Valid, which it stands in for.
func BenchmarkValid(b *testing.B) {
	docs := benchDocs(b)
	for _, name := range []string{"long-string", "dense"} {
		for _, v := range []struct {
			name  string
			valid func([]byte) bool
		}{{"encoding-json", json.Valid}, {"jsonscan", jsonscan.Valid}} {
			b.Run(name+"/"+v.name, func(b *testing.B) {
				doc := docs[name]
				b.SetBytes(int64(len(doc)))
				for b.Loop() {
					if !v.valid(doc) {
						b.Fatal("not valid")
					}
				}
			})
		}
	}
}
