package dispatch

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/config"
	"github.com/mercamap/relay/internal/destination"
	"github.com/mercamap/relay/internal/jobevent"
	"github.com/mercamap/relay/internal/store"
)

// benchSizes name the bodies benchBodies makes.
var benchSizes = []string{"1KB", "64KB", "64KB-dense"}

// benchBodies are Worker-shaped job events naming metadata.store_id: padded to 1 KB
// and 64 KB (one long string), and about 64 KB of many small members ("dense").
func benchBodies(b *testing.B) map[string][]byte {
	job := jobevent.Job{ID: "0190f2a4-2222-7333-8444-555566667777", Status: "completed", StoreID: "st_1"}
	out := map[string][]byte{}
	for _, size := range []int{1 << 10, 64 << 10} {
		body, err := jobevent.Pad(job.DefaultBody(time.Unix(1764460800, 0)), size)
		if err != nil || len(body) != size {
			b.Fatalf("Pad: %d bytes, %v", len(body), err)
		}
		out[fmt.Sprintf("%dKB", size>>10)] = body
	}
	var doc map[string]any
	if err := json.Unmarshal(job.DefaultBody(time.Unix(1764460800, 0)), &doc); err != nil {
		b.Fatal(err)
	}
	var rows []any
	for i := 0; i < 1100; i++ {
		rows = append(rows, map[string]any{"id": i, "name": fmt.Sprintf("row %d", i), "ok": i%2 == 0, "price": 1.25})
	}
	doc["rows"] = rows
	dense, _ := json.Marshal(doc)
	out["64KB-dense"] = dense
	return out
}

// BenchmarkStoreID reads the store id by the default paths: found by the first
// path, and absent (both paths tried).
func BenchmarkStoreID(b *testing.B) {
	bodies := benchBodies(b)
	for _, name := range benchSizes {
		for _, c := range []struct {
			kind, path, want string
		}{
			{"found", "", "st_1"},
			{"absent", "metadata.shop_id", ""},
		} {
			b.Run(name+"/"+c.kind, func(b *testing.B) {
				body := bodies[name]
				var paths []string
				if c.path != "" {
					paths = []string{c.path, "metadata.shopId"}
				}
				if got := storeID(body, paths); got != c.want {
					b.Fatalf("storeID = %q, want %q", got, c.want)
				}
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				for b.Loop() {
					storeID(body, paths)
				}
			})
		}
	}
}

// BenchmarkMessage is the dispatch side's per-delivery CPU before the bus call:
// build the message and its body, as a sink does.
func BenchmarkMessage(b *testing.B) {
	bodies := benchBodies(b)
	d := New(Options{Accounts: []config.Account{{ID: acct}}})
	dest := destination.Destination{ID: "d1", Account: acct, Connector: destination.EventBridge}
	for _, name := range benchSizes {
		b.Run(name, func(b *testing.B) {
			e := store.LogEntry{ID: "1-0", Entry: store.Entry{EventID: "fetcher.job.completed.0190f2a4-2222-7333-8444-555566667777",
				Type: "job.completed", Time: "2025-11-30T00:00:00Z", SchemaVersion: "1.0.0", Data: bodies[name]}}
			if m := d.message(dest, e); m.StoreID != "st_1" {
				b.Fatalf("StoreID = %q", m.StoreID)
			}
			b.SetBytes(int64(len(e.Data)))
			b.ReportAllocs()
			for b.Loop() {
				m := d.message(dest, e)
				_ = m.Body()
			}
		})
	}
}
