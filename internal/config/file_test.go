package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// loadWithin loads path as serve, check-config and a SIGHUP reload do, failing the test
// when it has not returned within a second.
func loadWithin(t *testing.T, path string) (*Config, error) {
	t.Helper()
	type result struct {
		c   *Config
		err error
	}
	done := make(chan result, 1)
	go func() { c, err := Load(path, env(nil)); done <- result{c, err} }()
	select {
	case r := <-done:
		return r.c, r.err
	case <-time.After(time.Second):
		t.Fatalf("loading %s has not returned after 1s", path)
		return nil, nil
	}
}

func TestConfigFilesThatAreNotRegularFilesOrTooLargeAreRefusedQuickly(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	linkToDevZero := filepath.Join(dir, "zero.yaml")
	if err := os.Symlink("/dev/zero", linkToDevZero); err != nil {
		t.Fatal(err)
	}
	// Sparse: one byte past the bound without writing 64 MiB.
	large := filepath.Join(dir, "large.yaml")
	writeFile(t, large, minimal)
	if err := os.Truncate(large, MaxConfigFile+1); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, path, says string }{
		{"/dev/zero", "/dev/zero", "it is not a regular file but a character device"},
		{"a symlink to /dev/zero", linkToDevZero, "it is not a regular file but a character device"},
		{"a FIFO nobody writes to", fifo, "it is not a regular file but a named pipe (FIFO)"},
		{"a directory", dir, "it is not a regular file but a directory"},
		{"a file one byte past the bound", large, "it is larger than 67108864 bytes (64 MiB), the most a config file may hold"},
		{"a missing file", filepath.Join(dir, "missing.yaml"), "it does not exist"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := loadWithin(t, c.path)
			var fe *FileError
			if !errors.As(err, &fe) || fe.Path != c.path {
				t.Fatalf("Load(%s) = %v, want a *FileError naming the path", c.path, err)
			}
			want := "cannot read config " + c.path + ": " + c.says
			if err.Error() != want {
				t.Errorf("error %q, want %q", err, want)
			}
			if strings.Count(err.Error(), "\n") > 0 {
				t.Errorf("error %q is more than one line", err)
			}
		})
	}
}

func TestAFileUpToItsBoundIsReadAndOneBytePastItIsNot(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	writeFile(t, path, "0123456789")
	if b, _, err := readRegularFile(path, 10); err != nil || string(b) != "0123456789" {
		t.Fatalf("10 bytes with a bound of 10: %q, %v", b, err)
	}
	var tooLarge *TooLargeError
	if _, _, err := readRegularFile(path, 9); !errors.As(err, &tooLarge) || tooLarge.Limit != 9 {
		t.Fatalf("10 bytes with a bound of 9: %v, want a *TooLargeError", err)
	}
}

func TestASecondYAMLDocumentIsRefused(t *testing.T) {
	for _, c := range []struct{ name, file, says string }{
		{"a valid second document", minimal + "---\nredis: {url: \"redis://elsewhere:6379/0\"}\n", "(its --- is at line 5)"},
		{"an invalid second document", minimal + "---\n  : : [\n", "(its --- is at line 5)"},
		{"an empty second document", minimal + "---\n", "(its --- is at line 5)"},
		{"a second document after a leading ---", "---\n" + minimal + "--- # more\nx: 1\n", "(its --- is at line 6)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "relay.yaml")
			writeFile(t, path, c.file)
			_, err := loadWithin(t, path)
			ps := problemsOf(t, err)
			if len(ps) != 1 || ps[0].Path != "" || !strings.Contains(ps[0].Message, "second YAML document") ||
				!strings.Contains(ps[0].Message, c.says) || !strings.Contains(ps[0].Message, "remove the --- line") {
				t.Fatalf("problems %v, want one saying the file holds a second document %s", ps, c.says)
			}
		})
	}
	// One document, opened by --- or closed by ..., is fine.
	for _, file := range []string{"---\n" + minimal, minimal + "...\n", "# relay\n---\n" + minimal} {
		if _, err := Parse([]byte(file), env(nil), nil); err != nil {
			t.Errorf("one document %q: %v", file, err)
		}
	}
}
