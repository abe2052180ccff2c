package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"

	"go.yaml.in/yaml/v3"
)

// MaxConfigFile is the most a config file may hold: 64 MiB. The largest config the
// repository writes, the bench's 100,000 destinations on one replica
// (cmd/loadtest/bench.go), is about 19 MiB; the bound leaves room for three times that,
// or 100,000 destinations of about 650 bytes each, and keeps --config /dev/zero or a
// mistaken path to a log file from filling the memory.
const MaxConfigFile = 64 << 20

// NotRegularError is a path that names something other than a regular file (a device,
// a directory, a FIFO, a socket). Nothing was opened for reading there: a FIFO would
// block the open until a writer came, and a device such as /dev/zero never ends.
type NotRegularError struct{ Mode fs.FileMode }

func (e *NotRegularError) Error() string {
	return "it is not a regular file but " + fileKind(e.Mode)
}

// fileKind names what a mode that is not a regular file's is.
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "a special file"
}

// TooLargeError is a regular file longer than its bound; only the bound was read.
type TooLargeError struct{ Limit int64 }

func (e *TooLargeError) Error() string { return fmt.Sprintf("it is larger than %d bytes", e.Limit) }

// readRegularFile reads the file at path, and its mode, when it is a regular file (a
// symlink to one is fine: mounted secrets and configs are) of at most limit bytes. It
// stats before it opens, so nothing else is ever opened, and opens without blocking, so
// a FIFO put in the file's place after the stat cannot block it either; the open file is
// checked again before a byte is read.
func readRegularFile(path string, limit int64) ([]byte, fs.FileMode, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, 0, err
	}
	if err := regular(info, limit); err != nil {
		return nil, 0, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	if info, err = f.Stat(); err != nil {
		return nil, 0, err
	}
	if err := regular(info, limit); err != nil {
		return nil, 0, err
	}
	// The file may grow while it is read: the reader stops one byte past the bound.
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, 0, err
	}
	if int64(len(b)) > limit {
		return nil, 0, &TooLargeError{Limit: limit}
	}
	return b, info.Mode(), nil
}

// regular refuses what is not a regular file, or one already longer than limit.
func regular(info fs.FileInfo, limit int64) error {
	if !info.Mode().IsRegular() {
		return &NotRegularError{Mode: info.Mode()}
	}
	if info.Size() > limit {
		return &TooLargeError{Limit: limit}
	}
	return nil
}

// FileError is a config file that could not be read at all: its path and why. It
// holds nothing of the file's content.
type FileError struct {
	Path string
	Err  error
}

func (e *FileError) Error() string {
	var tooLarge *TooLargeError
	if errors.As(e.Err, &tooLarge) {
		return fmt.Sprintf("cannot read config %s: %s (%d MiB), the most a config file may hold", e.Path, tooLarge, tooLarge.Limit>>20)
	}
	return fmt.Sprintf("cannot read config %s: %s", e.Path, readError(e.Err))
}

func (e *FileError) Unwrap() error { return e.Err }

// readConfigFile reads the config file at path with the guards of a file: secret and
// the bound MaxConfigFile.
func readConfigFile(path string) ([]byte, error) {
	b, _, err := readRegularFile(path, MaxConfigFile)
	if err != nil {
		return nil, &FileError{Path: path, Err: err}
	}
	return b, nil
}

// decodeOne decodes data's one YAML document into root and says whether a second
// document follows (after a --- line), with the line it starts on (0 when unknown). A
// second document is a problem, even an empty or an invalid one: yaml.Unmarshal reads
// the first and silently drops the rest, so keys written there would never apply. An
// empty file decodes to an empty root, as yaml.Unmarshal gives.
func decodeOne(data []byte, root *yaml.Node) (second bool, line int, err error) {
	d := yaml.NewDecoder(bytes.NewReader(data))
	if err := d.Decode(root); err != nil {
		if errors.Is(err, io.EOF) {
			return false, 0, nil
		}
		return false, 0, err
	}
	var next yaml.Node
	switch err := d.Decode(&next); {
	case errors.Is(err, io.EOF):
		return false, 0, nil
	case err == nil && next.Line > 0:
		return true, next.Line, nil
	}
	// The second document does not parse: the line of its marker, as far as a scan
	// finds it, still tells the operator where it starts.
	return true, markerLine(data), nil
}

// markerLine is the 1-based line of the first --- at the start of a line after the
// first document's content began (a --- before any content opens the first document),
// or 0 when there is none. YAML forbids such a line inside any scalar, so it always
// starts a document.
func markerLine(data []byte) int {
	content := false
	for i, line := range bytes.Split(data, []byte("\n")) {
		line = bytes.TrimRight(line, "\r")
		isMarker := bytes.HasPrefix(line, []byte("---")) && (len(line) == 3 || line[3] == ' ' || line[3] == '\t')
		switch {
		case isMarker && content:
			return i + 1
		case isMarker:
			content = true // the first document opens here
		case len(bytes.TrimSpace(line)) > 0 && !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) && line[0] != '%':
			content = true
		}
	}
	return 0
}
