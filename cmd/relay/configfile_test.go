package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A --config that never ends (/dev/zero), one that blocks whoever opens it (a FIFO
// nobody writes to) and one that holds two YAML documents are each refused by every
// command that reads the config, within a second, in one sentence; a SIGHUP reload
// refuses them the same way and keeps the running config.
func TestConfigFilesThatNeverEndBlockOrHoldTwoDocumentsAreRefusedAtOnce(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "relay.fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	twoDocs := filepath.Join(dir, "relay.two.yaml")
	doc := `rabbitmq: {url: "amqp://guest:guest@127.0.0.1:5672/", exchange: fetcher.job.events}
redis: {url: "redis://127.0.0.1:6379/0"}
signature: {keys: [env:HMAC]}
---
rabbitmq: {exchange: [not, valid
`
	if err := os.WriteFile(twoDocs, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	files := []struct{ name, path, says string }{
		{"/dev/zero", "/dev/zero", "relay: cannot read config /dev/zero: it is not a regular file but a character device"},
		{"a FIFO", fifo, "relay: cannot read config " + fifo + ": it is not a regular file but a named pipe (FIFO)"},
		{"two documents", twoDocs, "the file holds a second YAML document (its --- is at line 4), and a config is one document: remove the --- line and what follows it, or merge the two"},
	}
	commands := [][]string{{"check-config"}, {"serve"}, {"upgrade", "status"}, {"upgrade", "finish"}, {"external-ids"}, {"export"}, {"publish"}}
	for _, f := range files {
		for _, command := range commands {
			t.Run(f.name+"/"+strings.Join(command, " "), func(t *testing.T) {
				out := runWithin(t, time.Second, append(command, "--config", f.path)...)
				if !strings.Contains(out, f.says) {
					t.Fatalf("relay %s --config %s said:\n%s\nwant %q", strings.Join(command, " "), f.path, out, f.says)
				}
				if lines := strings.Count(out, "\n"); f.path != twoDocs && lines != 1 {
					t.Errorf("relay %s --config %s said %d lines, want one:\n%s", strings.Join(command, " "), f.path, lines, out)
				}
			})
		}
		t.Run(f.name+"/SIGHUP", func(t *testing.T) {
			var logs bytes.Buffer
			r := &reloader{path: f.path, getenv: func(string) string { return testKeyHex },
				log: slog.New(slog.NewJSONHandler(&logs, nil))}
			// A reload that took the file would go on to the parts this reloader lacks.
			done := make(chan any, 1)
			go func() {
				defer func() { done <- recover() }()
				r.reload(context.Background())
			}()
			select {
			case v := <-done:
				if v != nil {
					t.Fatalf("a reload of %s took the file: %v", f.path, v)
				}
			case <-time.After(time.Second):
				t.Fatalf("a reload of %s has not returned after 1s", f.path)
			}
			if !strings.Contains(logs.String(), "config reload refused; the running config stays") {
				t.Fatalf("reload of %s logged:\n%s", f.path, logs.String())
			}
		})
	}
}

// runWithin runs the relay with args as main does, and returns what it printed (the
// error as main prints it last), failing the test when it has not returned in time.
func runWithin(t *testing.T, limit time.Duration, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), args, func(string) string { return testKeyHex }, strings.NewReader(""), &stdout, &stderr)
		out.Write(stdout.Bytes())
		out.Write(stderr.Bytes())
		if err != nil {
			out.WriteString("relay: " + err.Error() + "\n")
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatalf("relay %v exited zero:\n%s", args, out.String())
		}
		return out.String()
	case <-time.After(limit):
		t.Fatalf("relay %v has not returned after %s", args, limit)
		return ""
	}
}
