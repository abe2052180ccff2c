package ingest

import (
	"bufio"
	"encoding/binary"
	"io"
	"math"
	"net"
	"strings"
)

// amqp091-go v1.16.0 drops the whole connection when a content header frame holds a
// headers table it refuses to read (read.go: maxFieldDepth, maxContainerElements) or
// a frame larger than the negotiated frame max. The broker then puts the message back
// and delivers it again, forever. headerFilter sits between the socket and the client:
// it passes every frame through byte for byte, except a content header frame the
// client could not read, which it rewrites so that the client can, with markerHeader
// added. The consumer dead-letters such a delivery; the broker keeps the original.
const (
	markerHeader     = "x-relay-unreadable" // value: the connection's nonce, ":" and the reason
	maxFieldDepth    = 32                   // amqp091-go read.go
	maxTableEntries  = 8192                 // amqp091-go read.go: maxContainerElements
	maxCheckedFrame  = 16 << 20             // larger header frames are passed on (the client refuses them)
	frameTypeMethod  = 1
	frameTypeHeader  = 2
	frameEnd         = 0xCE
	flagContentType  = 0x8000
	flagContentEnc   = 0x4000
	flagHeaders      = 0x2000
	flagsAfterHeader = 0x1ffc // delivery-mode … reserved, in wire order below
)

// Reasons a header frame is rewritten; each is also the dead-letter reason label.
const (
	HeadersTooDeep   = "headers_too_deep"
	HeadersTooMany   = "headers_too_many_entries"
	HeadersMalformed = "headers_malformed"
	HeadersTooLarge  = "headers_too_large"
)

// headerFrameMinSize is AMQP's frame-min-size: a negotiated frame max is never below it.
const headerFrameMinSize = 4096

// headerFilter wraps the broker connection; see above. It is used by one reader, the
// client's frame loop.
type headerFilter struct {
	net.Conn
	in       *bufio.Reader
	nonce    string // marks rewritten frames: unknown to publishers, so not forgeable
	frameMax int    // the client's limit: the frame max it asked for, lowered by connection.tune
	out      []byte // the rest of a checked (or rewritten) header frame still to hand over
	pass     int64  // bytes of the current frame still to copy through unchanged
	raw      bool   // not a frame stream (the broker answered with a protocol header): copy everything
	buf      []byte // reused for header frames
}

func newHeaderFilter(conn net.Conn, nonce string, frameMax int) *headerFilter {
	return &headerFilter{Conn: conn, in: bufio.NewReaderSize(conn, 64<<10), nonce: nonce, frameMax: frameMax}
}

// Read hands the client the broker's bytes, header frames checked.
func (f *headerFilter) Read(p []byte) (int, error) {
	if len(f.out) > 0 {
		n := copy(p, f.out)
		f.out = f.out[n:]
		return n, nil
	}
	if f.pass == 0 && !f.raw {
		if err := f.next(); err != nil {
			return 0, err
		}
		if len(f.out) > 0 {
			return f.Read(p)
		}
	}
	if f.raw {
		return f.in.Read(p)
	}
	if int64(len(p)) > f.pass {
		p = p[:f.pass]
	}
	n, err := f.in.Read(p)
	f.pass -= int64(n)
	return n, err
}

// next looks at the next frame's header: a content header frame is read whole and
// checked into out; any other frame is set to pass through.
func (f *headerFilter) next() error {
	h, err := f.in.Peek(7)
	if err != nil {
		if len(h) == 0 {
			return err
		}
		f.raw = true // a truncated stream: let the client see it as it is
		return nil
	}
	if string(h[:4]) == "AMQP" {
		f.raw = true
		return nil
	}
	size := int64(binary.BigEndian.Uint32(h[3:7]))
	total := 7 + size + 1
	if h[0] == frameTypeMethod && h[1] == 0 && h[2] == 0 && size >= 10 {
		f.noteTune()
	}
	if h[0] != frameTypeHeader || total > maxCheckedFrame {
		f.pass = total
		return nil
	}
	if int64(cap(f.buf)) < total {
		f.buf = make([]byte, total)
	}
	frame := f.buf[:total]
	if n, err := io.ReadFull(f.in, frame); err != nil {
		f.out, f.raw = frame[:n], true
		return nil
	}
	f.out = f.check(frame)
	return nil
}

// noteTune lowers frameMax to the broker's connection.tune frame max, as the client does.
func (f *headerFilter) noteTune() {
	m, err := f.in.Peek(7 + 10)
	if err != nil || binary.BigEndian.Uint16(m[7:9]) != 10 || binary.BigEndian.Uint16(m[9:11]) != 30 {
		return
	}
	if server := int(binary.BigEndian.Uint32(m[13:17])); server > 0 && (f.frameMax <= 0 || server < f.frameMax) {
		f.frameMax = max(server, headerFrameMinSize)
	}
}

// check returns the header frame as it is when the client can read it, else rewritten.
func (f *headerFilter) check(frame []byte) []byte {
	if frame[len(frame)-1] != frameEnd {
		return frame // a broken stream: the client reports it
	}
	if reason := checkHeaderPayload(frame[7:len(frame)-1], f.frameMax > 0 && len(frame) > f.frameMax); reason != "" {
		return f.rewrite(frame, reason)
	}
	return frame
}

// checkHeaderPayload says why amqp091-go could not read a content header payload ("" if
// it can). tooLarge: the frame exceeds the client's frame max.
func checkHeaderPayload(p []byte, tooLarge bool) string {
	pre, ok := propsPrefix(p)
	if !ok {
		return HeadersMalformed
	}
	flags := binary.BigEndian.Uint16(p[12:14])
	end := pre
	if flags&flagHeaders != 0 {
		var reason string
		end, reason = fieldEnd(p, pre-1, -1, 'F') // the table's length octets start at pre
		if reason != "" {
			return reason
		}
	}
	if _, ok := propsSuffix(p, end, flags); !ok {
		return HeadersMalformed
	}
	if tooLarge {
		return HeadersTooLarge
	}
	return ""
}

// propsPrefix returns where the headers table starts: after the class, weight, body
// size, flags, content-type and content-encoding.
func propsPrefix(p []byte) (int, bool) {
	if len(p) < 14 {
		return 0, false
	}
	flags := binary.BigEndian.Uint16(p[12:14])
	i := 14
	for _, bit := range []uint16{flagContentType, flagContentEnc} {
		if flags&bit != 0 {
			if i >= len(p) || i+1+int(p[i]) > len(p) {
				return 0, false
			}
			i += 1 + int(p[i])
		}
	}
	return i, true
}

// propsSuffix checks the properties after the headers table, from i to the end.
func propsSuffix(p []byte, i int, flags uint16) (int, bool) {
	for bit := uint16(0x1000); bit >= 0x0004; bit >>= 1 {
		if flags&bit == 0 {
			continue
		}
		switch bit {
		case 0x1000, 0x0800: // delivery-mode, priority
			i++
		case 0x0040: // timestamp
			i += 8
		default: // short strings
			if i >= len(p) {
				return 0, false
			}
			i += 1 + int(p[i])
		}
		if i > len(p) {
			return 0, false
		}
	}
	return i, true
}

// fieldEnd returns where the field whose type octet is p[i] ends, and what amqp091-go
// would refuse in it; depth is the one amqp091-go reads the field at (0 for the
// entries of the headers table). typ, when not 0, stands in for a type octet not on
// the wire (the headers table itself, read at depth -1). A table or an array returns
// its end along with any problem inside it; an unreadable field returns -1.
func fieldEnd(p []byte, i, depth int, typ byte) (int, string) {
	if typ == 0 {
		if i >= len(p) {
			return -1, HeadersMalformed
		}
		typ = p[i]
	}
	i++
	n := 0
	switch typ {
	case 'V':
	case 't', 'B', 'b':
		n = 1
	case 's', 'u':
		n = 2
	case 'I', 'i', 'f':
		n = 4
	case 'D':
		n = 5
	case 'l', 'd', 'T':
		n = 8
	case 'S', 'x', 'F', 'A':
		if i+4 > len(p) {
			return -1, HeadersMalformed
		}
		size := int64(binary.BigEndian.Uint32(p[i : i+4]))
		i += 4
		if size > math.MaxInt32 || int64(i)+size > int64(len(p)) {
			return -1, HeadersMalformed
		}
		end := i + int(size)
		switch {
		case typ != 'F' && typ != 'A':
			return end, ""
		case depth+1 > maxFieldDepth:
			return end, HeadersTooDeep
		case typ == 'F':
			return end, tableProblem(p[:end], i, depth+1)
		default:
			return end, arrayProblem(p[:end], i, depth+1)
		}
	default:
		return -1, HeadersMalformed
	}
	if i+n > len(p) {
		return -1, HeadersMalformed
	}
	return i + n, ""
}

// tableProblem checks a table's entries, from i to the end of p; depth is the table's.
func tableProblem(p []byte, i, depth int) string {
	for count := 1; i < len(p); count++ {
		if count > maxTableEntries {
			return HeadersTooMany
		}
		if i+1+int(p[i]) > len(p) {
			return HeadersMalformed
		}
		var reason string
		if i, reason = fieldEnd(p, i+1+int(p[i]), depth, 0); reason != "" {
			return reason
		}
	}
	return ""
}

// arrayProblem checks an array's values, from i to the end of p; depth is the array's.
func arrayProblem(p []byte, i, depth int) string {
	for count := 1; i < len(p); count++ {
		if count > maxTableEntries {
			return HeadersTooMany
		}
		var reason string
		if i, reason = fieldEnd(p, i, depth, 0); reason != "" {
			return reason
		}
	}
	return ""
}

// rewrite returns the header frame with a headers table the client can read: the
// top-level entries it could read and that fit, then markerHeader. Every other
// property is kept when it can be; body size and class always are, so the body frames
// that follow still belong to it.
func (f *headerFilter) rewrite(frame []byte, reason string) []byte {
	p := frame[7 : len(frame)-1]
	marker := f.nonce + ":" + reason
	markerLen := 1 + len(markerHeader) + 1 + 4 + len(marker)
	out := make([]byte, 0, len(frame)+markerLen)
	out = append(out, frame[:7]...) // size fixed below
	pre, ok := propsPrefix(p)
	var flags uint16
	var suffix []byte
	var table []byte // the table's content, entries kept
	if ok {
		flags = binary.BigEndian.Uint16(p[12:14])
		out = append(out, p[:12]...)
		tableStart, tableEnd, whole := pre, pre, true
		if flags&flagHeaders != 0 {
			whole = pre+4 <= len(p)
			if whole {
				size := int64(binary.BigEndian.Uint32(p[pre : pre+4]))
				tableStart = pre + 4
				whole = size <= int64(len(p)-tableStart)
				tableEnd = tableStart + int(min(size, int64(len(p)-tableStart)))
			}
		}
		if end, ok := propsSuffix(p, tableEnd, flags); ok && whole {
			suffix = p[tableEnd:end]
		} else {
			flags &^= flagsAfterHeader // what follows a broken table cannot be found
		}
		budget := math.MaxInt
		if f.frameMax > 0 {
			budget = f.frameMax - 8 - pre - 4 - markerLen - len(suffix)
		}
		if tableEnd > tableStart {
			table = keepEntries(p[:tableEnd], tableStart, budget)
		}
		out = binary.BigEndian.AppendUint16(out, flags|flagHeaders)
		out = append(out, p[14:pre]...)
	} else {
		// Not even the fixed fields: a header with no body, which the client can read.
		out = append(out, 0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
		out = binary.BigEndian.AppendUint16(out, flagHeaders)
	}
	out = binary.BigEndian.AppendUint32(out, uint32(len(table)+markerLen))
	out = append(out, table...)
	out = append(out, byte(len(markerHeader)))
	out = append(out, markerHeader...)
	out = append(out, 'S')
	out = binary.BigEndian.AppendUint32(out, uint32(len(marker)))
	out = append(out, marker...)
	out = append(out, suffix...)
	out = append(out, frameEnd)
	binary.BigEndian.PutUint32(out[3:7], uint32(len(out)-8))
	return out
}

// keepEntries returns the table entries of p from i on that the client can read, as
// long as they fit in budget bytes and number fewer than the limit: first those named
// x-… (the broker's x-death, the relay's own), then the others, each in wire order. It
// stops at the first entry whose extent is unknown. A publisher's markerHeader is dropped.
func keepEntries(p []byte, i, budget int) []byte {
	var kept []byte
	count := 0
	for _, broker := range []bool{true, false} {
		for j := i; j < len(p) && count < maxTableEntries-1; {
			keyEnd := j + 1 + int(p[j])
			if keyEnd > len(p) {
				break
			}
			end, reason := fieldEnd(p, keyEnd, 0, 0)
			if end < 0 {
				break
			}
			key := string(p[j+1 : keyEnd])
			if reason == "" && strings.HasPrefix(key, "x-") == broker && key != markerHeader && len(kept)+end-j <= budget {
				kept = append(kept, p[j:end]...)
				count++
			}
			j = end
		}
	}
	return kept
}

// unreadableReason returns the reason the filter with this nonce rewrote a
// delivery's headers, or "" if it did not.
func unreadableReason(headers map[string]any, nonce string) string {
	v, _ := headers[markerHeader].(string)
	if reason, ok := strings.CutPrefix(v, nonce+":"); ok && nonce != "" {
		return reason
	}
	return ""
}
