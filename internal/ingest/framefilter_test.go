package ingest

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"testing"
)

// streamConn is a broker that sends the bytes of r.
type streamConn struct {
	net.Conn
	r io.Reader
}

func (c streamConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func frame(typ byte, channel uint16, payload []byte) []byte {
	f := []byte{typ}
	f = binary.BigEndian.AppendUint16(f, channel)
	f = binary.BigEndian.AppendUint32(f, uint32(len(payload)))
	return append(append(f, payload...), frameEnd)
}

// headerPayload is a content header payload: headers table content (the entries),
// delivery mode 2, body size 2.
func headerPayload(entries []byte) []byte {
	p := []byte{0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2}
	p = binary.BigEndian.AppendUint16(p, flagHeaders|0x1000)
	p = binary.BigEndian.AppendUint32(p, uint32(len(entries)))
	return append(append(p, entries...), 2)
}

// nestedEntry is the entry "d" holding tables depth deep.
func nestedEntry(depth int) []byte {
	inner := []byte{1, 'v', 'S', 0, 0, 0, 1, 'x'}
	for range depth {
		e := []byte{1, 'd', 'F'}
		e = binary.BigEndian.AppendUint32(e, uint32(len(inner)))
		inner = append(e, inner...)
	}
	return inner
}

// filterStream runs stream through a headerFilter with the given frame max.
func filterStream(t testing.TB, stream []byte, frameMax int) []byte {
	f := newHeaderFilter(streamConn{r: bytes.NewReader(stream)}, "nonce", frameMax)
	out, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// FuzzHeaderFilter: the filter never panics, passes every other frame through byte
// for byte, passes a header frame the client can read unchanged, and hands the client
// only header frames it can read (amqp091-go's own reader, copied, as the oracle).
func FuzzHeaderFilter(f *testing.F) {
	f.Add(headerPayload([]byte{1, 'a', 'S', 0, 0, 0, 1, 'b'}))
	f.Add(headerPayload(nestedEntry(31)))
	f.Add(headerPayload(nestedEntry(40)))
	f.Add(headerPayload(voids(9000)))
	f.Add(headerPayload(bytes.Repeat([]byte{1, 'a', 'S', 0, 0, 0x10, 0}, 1)))
	f.Add(headerPayload([]byte{1, 'a', 'Z'}))
	f.Add([]byte{0, 60})
	f.Fuzz(func(t *testing.T, payload []byte) {
		const frameMax = 4096
		method := frame(frameTypeMethod, 1, []byte{0, 60, 0, 60, 1, 2, 3})
		body := frame(3, 1, []byte("{}"))
		in := frame(frameTypeHeader, 1, payload)
		stream := append(append(append([]byte{}, method...), in...), body...)
		out := filterStream(t, stream, frameMax)
		if !bytes.HasPrefix(out, method) || !bytes.HasSuffix(out, body) {
			t.Fatal("a method or body frame changed")
		}
		got := out[len(method) : len(out)-len(body)]
		if got[0] != frameTypeHeader || int(binary.BigEndian.Uint32(got[3:7])) != len(got)-8 || got[len(got)-1] != frameEnd {
			t.Fatalf("header frame not framed: % x", got[:7])
		}
		if len(got) > frameMax {
			t.Fatalf("header frame of %d bytes, over the frame max", len(got))
		}
		if _, err := oParseHeaderPayload(got[7 : len(got)-1]); err != nil {
			t.Fatalf("the client cannot read the header frame handed to it: %v", err)
		}
		_, err := oParseHeaderPayload(payload)
		if readable := checkHeaderPayload(payload, len(in) > frameMax) == ""; readable != bytes.Equal(got, in) {
			t.Fatalf("readable %v (client: %v), passed unchanged %v", readable, err, bytes.Equal(got, in))
		} else if !readable && unreadableReason(mustHeaders(t, got), "nonce") == "" {
			t.Fatal("a rewritten header frame carries no marker")
		}
	})
}

func mustHeaders(t *testing.T, frame []byte) map[string]any {
	h, err := oParseHeaderPayload(frame[7 : len(frame)-1])
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// voids is n entries of distinct names, each void.
func voids(n int) []byte {
	var b []byte
	for i := range n {
		b = append(b, 2, byte(i>>8), byte(i), 'V')
	}
	return b
}

func TestFilterPassesReadableHeadersAndRewritesTheOthers(t *testing.T) {
	for name, c := range map[string]struct {
		entries []byte
		reason  string
	}{
		"a string":         {[]byte{1, 'a', 'S', 0, 0, 0, 1, 'b'}, ""},
		"32 deep":          {nestedEntry(32), ""},
		"33 deep":          {nestedEntry(33), HeadersTooDeep},
		"8192 entries":     {voids(8192), ""},
		"8193 entries":     {voids(8193), HeadersTooMany},
		"unknown type":     {[]byte{1, 'a', 'Z'}, HeadersMalformed},
		"truncated string": {[]byte{1, 'a', 'S', 0, 0, 0, 9, 'b'}, HeadersMalformed},
	} {
		in := frame(frameTypeHeader, 1, headerPayload(c.entries))
		out := filterStream(t, in, 1<<20)
		h, err := oParseHeaderPayload(out[7 : len(out)-1])
		_, inErr := oParseHeaderPayload(in[7 : len(in)-1])
		switch {
		case err != nil:
			t.Errorf("%s: the client cannot read the output: %v", name, err)
		case c.reason == "" && !bytes.Equal(in, out):
			t.Errorf("%s: readable headers changed", name)
		case c.reason == "" && inErr != nil:
			t.Errorf("%s: the client cannot read the input (%v): the case is wrong", name, inErr)
		case c.reason != "" && inErr == nil:
			t.Errorf("%s: the client can read the input: the case is wrong", name)
		case unreadableReason(h, "nonce") != c.reason:
			t.Errorf("%s: marked %q, want %q", name, unreadableReason(h, "nonce"), c.reason)
		}
	}
}
