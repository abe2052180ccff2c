package store

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/mercamap/relay/internal/jobevent"
)

// workerEntry is the entry the relay keeps for a job event as the Fetcher Worker sends it,
// its body padded to size bytes when size is not 0.
func workerEntry(t testing.TB, status string, size int) Entry {
	t.Helper()
	id := fmt.Sprintf("0190f2a4-%04x-7222-8333-444455556666", time.Now().UnixNano()&0xffff)
	j := jobevent.Job{ID: id, Status: status, StoreID: "store-7"}
	body := j.DefaultBody(time.Date(2026, 12, 2, 10, 0, 0, 123456789, time.UTC))
	if size > 0 {
		var err error
		if body, err = jobevent.Pad(body, size); err != nil {
			t.Fatal(err)
		}
	}
	return Entry{EventID: j.EventID(), Type: "job." + status, CEType: "studio.lerian.job." + status,
		Source: "//lerian.fetcher/worker", Time: "2026-12-02T10:00:00.123456789Z", Tenant: "single-tenant",
		Subject: id, SchemaVersion: "1.0.0", Data: body,
		TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
}

func TestEntriesReadBackAsTheyWereStored(t *testing.T) {
	for _, e := range []Entry{
		workerEntry(t, "completed", 0), workerEntry(t, "failed", 0), workerEntry(t, "completed", 4096),
		{EventID: "x", Data: []byte("{}")}, // too small to gain: kept packed
		{EventID: "bin", Data: bytes.Repeat([]byte{0, 1, 0xff}, 10)},
		{},
	} {
		z := e.encoded()
		got, err := decodeEntry(string(z))
		if err != nil {
			t.Fatalf("%q (codec %q): %v", e.EventID, z[0], err)
		}
		if got.EventID != e.EventID || got.Type != e.Type || got.CEType != e.CEType || got.Source != e.Source ||
			got.Time != e.Time || got.Tenant != e.Tenant || got.Subject != e.Subject ||
			got.SchemaVersion != e.SchemaVersion || got.TraceParent != e.TraceParent || !bytes.Equal(got.Data, e.Data) {
			t.Fatalf("%q came back as %+v", e.EventID, got)
		}
	}
}

// A Worker's event keeps a small part of its size in the log (issue 30: a 1 KB event kept
// in at most 300 B of Redis, its marker and index included).
func TestAWorkersEventIsStoredCompressed(t *testing.T) {
	for _, c := range []struct {
		status     string
		size, most int
	}{{"completed", 0, 240}, {"failed", 0, 180}, {"completed", 1024, 260}} {
		e := workerEntry(t, c.status, c.size)
		raw := len(e.EventID) + len(e.Type) + len(e.CEType) + len(e.Source) + len(e.Time) + len(e.Tenant) +
			len(e.Subject) + len(e.SchemaVersion) + len(e.TraceParent) + len(e.Data)
		z := e.encoded()
		t.Logf("job.%s, body %d B: %d B of fields stored in %d B", c.status, len(e.Data), raw, len(z))
		if z[0] != codecFlate || len(z) > c.most {
			t.Errorf("job.%s with a %d B body: stored in %d B (codec %q), want at most %d", c.status, len(e.Data), len(z), z[0], c.most)
		}
	}
}

func TestAnEntryInNoKnownFormIsRefused(t *testing.T) {
	w := workerEntry(t, "completed", 0)
	good := w.encoded()
	for name, v := range map[string]string{
		"empty":            "",
		"unknown codec":    "q" + string(good[1:]),
		"cut short":        string(good[:len(good)/2]),
		"packed, cut":      string(append([]byte{codecPacked}, 40, 'a')),
		"packed, too long": string(append(append([]byte{codecPacked}, w.packed()...), 'x')),
	} {
		if _, err := decodeEntry(v); !errors.Is(err, errBadEntry) {
			t.Errorf("%s: %v, want errBadEntry", name, err)
		}
	}
}

func TestEntriesStoredBeforeTheCompressedFormStillRead(t *testing.T) {
	e, err := entryFrom(map[string]any{"event_id": "fetcher.job.completed.1", "type": "job.completed", "data": `{"a":1}`, "tenant": "t"})
	if err != nil || e.EventID != "fetcher.job.completed.1" || e.Type != "job.completed" || string(e.Data) != `{"a":1}` || e.Tenant != "t" {
		t.Fatalf("%+v, %v", e, err)
	}
}

func BenchmarkEntryEncode(b *testing.B) {
	e := workerEntry(b, "completed", 1024)
	b.ReportAllocs()
	for b.Loop() {
		e.encoded()
	}
}

func BenchmarkEntryDecode(b *testing.B) {
	e := workerEntry(b, "completed", 1024)
	z := string(e.encoded())
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeEntry(z); err != nil {
			b.Fatal(err)
		}
	}
}
