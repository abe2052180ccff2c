package store

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
)

// An account's log keeps each entry in one stream field, entryField: a codec byte, then
// the entry's fields packed (each a uvarint length and its bytes, in the order of
// Entry.packed) and, for codecFlate, compressed with DEFLATE (compress/flate) against
// a preset dictionary of what job events have in common (flateDictV1), so even a small
// body compresses: the ce-id, the subject and the body's jobId repeat one UUID, and the
// names of the body's fields are the dictionary's. A body that would not shrink is kept
// packed as it is (codecPacked). Entries stored before this form (one stream field per
// Entry field) are still read (entryFrom).
//
// The dictionary is part of the stored format: data compressed against it is read back
// with it, so it never changes. A better one is a new codec byte beside this one.
const (
	entryField  = "z"
	codecPacked = 'p'
	codecFlate  = 'f'
)

// flateDictV1 is the preset dictionary of codecFlate: the CloudEvents attributes and the
// Fetcher Worker's body fields (shared/contracts/fetcher-events.md), the most common last
// (DEFLATE reaches nearer matches with shorter codes).
const flateDictV1 = `{"status":"failed","metadata":{"error":{"message":"dial tcp [redacted]: connect: connection refused"}` +
	`,"source":"reporter","tenantId":"single-tenant","store_id":"store-","storeId":"store-"}}` +
	`"result":{"path":"external-data/","sizeBytes":1234,"rowCount":10,"format":"json",` +
	`"integrity":{"algorithm":"HMAC-SHA256","signature":""},"protection":{"encrypted":true,"mode":"adapter-managed","appliedBy":"adapter"}},` +
	`"executionTimeMs":,"completedAt":"2026-12-02T10:00:00.000000000Z",` +
	`00-00000000000000000000000000000000-0000000000000000-01` +
	`job.failedstudio.lerian.job.failed//lerian.fetcher/worker2026-` +
	`job.completedstudio.lerian.job.completed//lerian.fetcher/worker2026-12-02T10:00:00.000000000Zsingle-tenant1.0.0` +
	`fetcher.job.completed.{"jobId":"","metadata":{"correlationId":"c-","source":"reporter","store_id":"store-"},"status":"completed"`

// flateLevel is DEFLATE's default level: the fastest level (1) hardly uses the
// dictionary (458 B for the 210 B a Worker's job.completed takes here), and the levels
// between cost about the same (BenchmarkEntryEncode: ~21 µs an event on this machine).
const flateLevel = flate.DefaultCompression

var (
	flateDict    = []byte(flateDictV1)
	flateWriters = sync.Pool{New: func() any {
		w, err := flate.NewWriterDict(io.Discard, flateLevel, flateDict)
		if err != nil {
			panic(err) // only for a level out of range, which flateLevel is not
		}
		return w
	}}
	flateReaders = sync.Pool{New: func() any { return flate.NewReaderDict(bytes.NewReader(nil), flateDict) }}
)

// packed is e's fields, each a uvarint length then its bytes.
func (e *Entry) packed() []byte {
	fields := [...]string{e.EventID, e.Type, e.CEType, e.Source, e.Time, e.Tenant, e.Subject, e.SchemaVersion, e.TraceParent}
	n := len(e.Data) + binary.MaxVarintLen32*(len(fields)+1)
	for _, f := range fields {
		n += len(f)
	}
	b := make([]byte, 0, n)
	for _, f := range fields {
		b = binary.AppendUvarint(b, uint64(len(f)))
		b = append(b, f...)
	}
	b = binary.AppendUvarint(b, uint64(len(e.Data)))
	return append(b, e.Data...)
}

// encoded is e as entryField holds it: compressed when that makes it smaller.
func (e *Entry) encoded() []byte {
	p := e.packed()
	var out bytes.Buffer
	out.Grow(len(p)/2 + 16)
	out.WriteByte(codecFlate)
	w := flateWriters.Get().(*flate.Writer)
	w.Reset(&out)
	_, err := w.Write(p)
	if err == nil {
		err = w.Close()
	}
	w.Reset(io.Discard) // drop the reference to out before the writer is shared again
	flateWriters.Put(w)
	if err != nil || out.Len() >= len(p)+1 {
		return append([]byte{codecPacked}, p...)
	}
	return out.Bytes()
}

// errBadEntry says a log entry's stored form could not be read back.
var errBadEntry = errors.New("log entry is not in a form this relay reads")

// decodeEntry reads an entry back from entryField's value.
func decodeEntry(v string) (Entry, error) {
	if v == "" {
		return Entry{}, errBadEntry
	}
	var p []byte
	switch v[0] {
	case codecPacked:
		p = []byte(v[1:])
	case codecFlate:
		r := flateReaders.Get().(io.ReadCloser)
		if err := r.(flate.Resetter).Reset(strings.NewReader(v[1:]), flateDict); err != nil {
			return Entry{}, fmt.Errorf("%w: %v", errBadEntry, err)
		}
		var err error
		p, err = io.ReadAll(r)
		flateReaders.Put(r)
		if err != nil {
			return Entry{}, fmt.Errorf("%w: %v", errBadEntry, err)
		}
	default:
		return Entry{}, fmt.Errorf("%w: codec %q", errBadEntry, v[0])
	}
	return unpack(p)
}

// unpack is packed's inverse.
func unpack(p []byte) (Entry, error) {
	var f [10][]byte
	for i := range f {
		n, k := binary.Uvarint(p)
		if k <= 0 || n > uint64(len(p)-k) {
			return Entry{}, fmt.Errorf("%w: field %d is cut short", errBadEntry, i)
		}
		f[i], p = p[k:k+int(n)], p[k+int(n):]
	}
	if len(p) != 0 {
		return Entry{}, fmt.Errorf("%w: %d bytes after the last field", errBadEntry, len(p))
	}
	return Entry{EventID: string(f[0]), Type: string(f[1]), CEType: string(f[2]), Source: string(f[3]),
		Time: string(f[4]), Tenant: string(f[5]), Subject: string(f[6]), SchemaVersion: string(f[7]),
		TraceParent: string(f[8]), Data: f[9]}, nil
}
