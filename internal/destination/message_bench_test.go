package destination_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/jobevent"
)

func BenchmarkBody(b *testing.B) {
	job := jobevent.Job{ID: "0190f2a4-2222-7333-8444-555566667777", Status: "completed", StoreID: "st_1"}
	bodies := map[string][]byte{}
	for _, size := range []int{1 << 10, 64 << 10} {
		body, err := jobevent.Pad(job.DefaultBody(time.Unix(1764460800, 0)), size)
		if err != nil {
			b.Fatal(err)
		}
		bodies[fmt.Sprintf("%dKB", size>>10)] = body
	}
	// Indented: not as json.Marshal writes it, so Body must compact it.
	var indented bytes.Buffer
	if err := json.Indent(&indented, bodies["64KB"], "", "  "); err != nil {
		b.Fatal(err)
	}
	bodies["64KB-indented"] = indented.Bytes()
	for _, name := range []string{"1KB", "64KB", "64KB-indented"} {
		body := bodies[name]
		b.Run(name, func(b *testing.B) {
			m := destination.Message{ID: destination.MessageID("d1", "e1"), Type: "job.completed", EventID: "fetcher.job.completed." + job.ID,
				CreatedAt: "2025-11-30T00:00:00Z", Data: body}
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				_ = m.Body()
			}
		})
	}
}
