package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A replica that exits on its own (not killed by the drill) is reported with why, in its
// own last log lines: the drill once showed only "exit status 1".
func TestAReplicaThatExitsOnItsOwnIsReportedWithItsLastLogLines(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "relay")
	script := "#!/bin/sh\nfor i in 1 2 3 4 5 6 7 8 9 10; do echo \"line $i\"; done\necho 'relay: load destination state from redis: CLUSTERDOWN' >&2\nexit 1\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	r := &replica{name: "r1", bin: bin, config: "unused.yaml", logDir: dir}
	if err := r.start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(r.exits()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the replica's exit was not recorded")
		}
		time.Sleep(10 * time.Millisecond)
	}
	got := r.exits()[0]
	if !strings.Contains(got, "exit status 1") || !strings.Contains(got, "CLUSTERDOWN") || !strings.Contains(got, "line 10") ||
		strings.Contains(got, "line 2\n") {
		t.Errorf("the exit is reported as %q; want the status and its last %d log lines, the error among them", got, exitLogLines)
	}
}
