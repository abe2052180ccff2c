package ingest

// The field-table reader of amqp091-go v1.16.0 (read.go), copied unchanged but for
// names, as the oracle of FuzzHeaderFilter: what the client can read.
// Copyright (c) 2021 VMware, Inc. or its affiliates. All Rights Reserved.
// Copyright (c) 2012-2021, Sean Treadway, SoundCloud Ltd. BSD-2-Clause (amqp091-go's LICENSE).

import (
	"bytes"
	"encoding/binary"
	"io"
	"math"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

const oReadAllocChunk = 64 * 1024

func oMin64(a, b int64) int64 {
	if a < b {
		return a
	}
	return b
}

// oReadBytes reads exactly n bytes, growing the buffer in oReadAllocChunk
// increments so it never allocates far ahead of confirmed data.
func oReadBytes(r io.Reader, n int64) ([]byte, error) {
	if n < 0 {
		return nil, amqp.ErrSyntax
	}

	buf := make([]byte, 0, oMin64(n, oReadAllocChunk))
	for int64(len(buf)) < n {
		chunk := int(oMin64(n-int64(len(buf)), oReadAllocChunk))
		old := len(buf)

		// append grows the backing array with Go's amortized (roughly
		// doubling) strategy, so repeated chunks don't each re-copy the
		// entire buffer read so far.
		buf = append(buf, make([]byte, chunk)...)

		if _, err := io.ReadFull(r, buf[old:]); err != nil {
			return nil, err
		}
	}
	return buf, nil
}

func oReadShortstr(r io.Reader) (v string, err error) {
	var length uint8
	if err = binary.Read(r, binary.BigEndian, &length); err != nil {
		return
	}

	bytes, err := oReadBytes(r, int64(length))
	if err != nil {
		return
	}
	return string(bytes), nil
}

func oReadLongstr(r io.Reader) (v string, err error) {
	var length uint32
	if err = binary.Read(r, binary.BigEndian, &length); err != nil {
		return
	}

	// slices can't be longer than max int32 value
	if length > (^uint32(0) >> 1) {
		return "", amqp.ErrSyntax
	}

	bytes, err := oReadBytes(r, int64(length))
	if err != nil {
		return
	}
	return string(bytes), nil
}

func oReadDecimal(r io.Reader) (v amqp.Decimal, err error) {
	if err = binary.Read(r, binary.BigEndian, &v.Scale); err != nil {
		return
	}
	if err = binary.Read(r, binary.BigEndian, &v.Value); err != nil {
		return
	}
	return
}

func oReadTimestamp(r io.Reader) (v time.Time, err error) {
	var sec int64
	if err = binary.Read(r, binary.BigEndian, &sec); err != nil {
		return
	}
	return time.Unix(sec, 0), nil
}

// maxFieldDepth limits how deeply 'A' and 'F' fields may nest, preventing
// unbounded recursion from overflowing the goroutine stack.
const oracleMaxDepth = 32

// oracleMaxElements limits how many elements/entries oReadArrayDepth and
// oReadTableDepth will accept in a single container. AMQP tables/arrays in
// practice hold at most a few hundred entries (message properties, queue
// arguments, policy definitions); this cap rejects the empty-value ('V')
// padding trick that would otherwise amplify wire bytes ~16-40x into heap via
// boxed `any` slice elements / amqp.Table map entries.
const oracleMaxElements = 8192

func oReadField(r io.Reader) (v any, err error) {
	return oReadFieldDepth(r, 0)
}

func oReadFieldDepth(r io.Reader, depth int) (v any, err error) {
	var typ byte
	if err = binary.Read(r, binary.BigEndian, &typ); err != nil {
		return
	}

	switch typ {
	case 't':
		var value uint8
		if err = binary.Read(r, binary.BigEndian, &value); err != nil {
			return
		}
		return value != 0, nil

	case 'B':
		var value [1]byte
		if _, err = io.ReadFull(r, value[0:1]); err != nil {
			return
		}
		return value[0], nil

	case 'b':
		var value int8
		if err = binary.Read(r, binary.BigEndian, &value); err != nil {
			return
		}
		return value, nil

	case 's':
		var value int16
		if err = binary.Read(r, binary.BigEndian, &value); err != nil {
			return
		}
		return value, nil

	case 'I':
		var value int32
		if err = binary.Read(r, binary.BigEndian, &value); err != nil {
			return
		}
		return value, nil

	case 'l':
		var value int64
		if err = binary.Read(r, binary.BigEndian, &value); err != nil {
			return
		}
		return value, nil

	case 'u':
		var value uint16
		if err = binary.Read(r, binary.BigEndian, &value); err != nil {
			return
		}
		return value, nil

	case 'i':
		var value uint32
		if err = binary.Read(r, binary.BigEndian, &value); err != nil {
			return
		}
		return value, nil

	case 'f':
		var value float32
		if err = binary.Read(r, binary.BigEndian, &value); err != nil {
			return
		}
		return value, nil

	case 'd':
		var value float64
		if err = binary.Read(r, binary.BigEndian, &value); err != nil {
			return
		}
		return value, nil

	case 'D':
		return oReadDecimal(r)

	case 'S':
		return oReadLongstr(r)

	case 'A':
		return oReadArrayDepth(r, depth+1)

	case 'T':
		return oReadTimestamp(r)

	case 'F':
		return oReadTableDepth(r, depth+1)

	case 'x':
		var len int32
		if err = binary.Read(r, binary.BigEndian, &len); err != nil {
			return nil, err
		}
		if len < 0 {
			return nil, amqp.ErrSyntax
		}

		value, err := oReadBytes(r, int64(len))
		if err != nil {
			return nil, err
		}
		return value, nil

	case 'V':
		return nil, nil
	}

	return nil, amqp.ErrSyntax
}

func oReadTable(r io.Reader) (table amqp.Table, err error) {
	return oReadTableDepth(r, 0)
}

func oReadTableDepth(r io.Reader, depth int) (table amqp.Table, err error) {
	if depth > oracleMaxDepth {
		return nil, amqp.ErrSyntax
	}

	var nested bytes.Buffer
	var str string

	if str, err = oReadLongstr(r); err != nil {
		return
	}

	nested.WriteString(str)

	table = make(amqp.Table)

	for nested.Len() > 0 {
		var key string
		var value any

		if key, err = oReadShortstr(&nested); err != nil {
			return
		}

		if value, err = oReadFieldDepth(&nested, depth); err != nil {
			return
		}

		if len(table) >= oracleMaxElements {
			return nil, amqp.ErrSyntax
		}

		table[key] = value
	}

	return
}

func oReadArray(r io.Reader) (arr []any, err error) {
	return oReadArrayDepth(r, 0)
}

func oReadArrayDepth(r io.Reader, depth int) (arr []any, err error) {
	if depth > oracleMaxDepth {
		return nil, amqp.ErrSyntax
	}

	var size uint32

	if err = binary.Read(r, binary.BigEndian, &size); err != nil {
		return nil, err
	}

	// size is the encoded blob's byte length, not the element count of arr.
	// Cap it like oReadLongstr's length to reject clearly invalid values.
	if size > math.MaxInt32 {
		return nil, amqp.ErrSyntax
	}

	var (
		lim   = &io.LimitedReader{R: r, N: int64(size)}
		field any
	)

	for {
		if field, err = oReadFieldDepth(lim, depth); err != nil {
			if err == io.EOF {
				break
			}
			return nil, err
		}

		if len(arr) >= oracleMaxElements {
			return nil, amqp.ErrSyntax
		}

		arr = append(arr, field)
	}

	return arr, nil
}

// oParseHeaderPayload reads a content header payload as amqp091-go's parseHeaderFrame
// does (read.go), returning its headers.
func oParseHeaderPayload(p []byte) (amqp.Table, error) {
	lim := &io.LimitedReader{R: bytes.NewReader(p), N: int64(len(p))}
	var class, weight, flags uint16
	var size uint64
	for _, v := range []any{&class, &weight, &size, &flags} {
		if err := binary.Read(lim, binary.BigEndian, v); err != nil {
			return nil, err
		}
	}
	var headers amqp.Table
	for bit := uint16(0x8000); bit >= 0x0004; bit >>= 1 {
		if flags&bit == 0 {
			continue
		}
		var err error
		switch bit {
		case 0x2000:
			headers, err = oReadTable(lim)
		case 0x1000, 0x0800:
			var b uint8
			err = binary.Read(lim, binary.BigEndian, &b)
		case 0x0040:
			_, err = oReadTimestamp(lim)
		default:
			_, err = oReadShortstr(lim)
		}
		if err != nil {
			return nil, err
		}
	}
	return headers, nil
}
