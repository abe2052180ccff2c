package testpeer

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestThePreviousReleaseIsTheParentOfTheCommitThatSetVERSION: in a repository whose
// VERSION went 0.1.0, then 0.2.0 (then rewritten with the same value), the previous
// release is the commit before the one that set 0.2.0; an uncommitted VERSION makes
// HEAD the previous release; a history that starts at the commit setting the value
// (as a shallow clone does) cannot name one.
func TestThePreviousReleaseIsTheParentOfTheCommitThatSetVERSION(t *testing.T) {
	Need(t, "git")
	dir := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=test", "-c", "user.email=test@example.com"}, args...)...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	commit := func(file, content string) string {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, file), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		git("add", file)
		git("commit", "-q", "-m", file+": "+content)
		return git("rev-parse", "HEAD")
	}
	git("init", "-q")
	commit("VERSION", "0.2.0\n") // a root commit that sets the value: nothing before it
	if _, _, err := PreviousReleaseIn(dir); !errors.Is(err, ErrNoHistory) {
		t.Fatalf("VERSION set by the root commit: %v, want ErrNoHistory", err)
	}
	commit("VERSION", "0.1.0\n")
	commit("main.go", "package main\n")
	before := commit("main.go", "package main // 0.1.0's last\n")
	commit("VERSION", "0.2.0\n")
	commit("main.go", "package main // 0.2.0\n")
	commit("VERSION", "0.2.0")
	sub := filepath.Join(dir, "cmd")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if got, top, err := PreviousReleaseIn(sub); err != nil || got != before || top != git("rev-parse", "--show-toplevel") {
		t.Fatalf("previousRelease = %s, %s, %v; want %s, the commit before 0.2.0 was set", got, top, err, before)
	}
	if err := os.WriteFile(filepath.Join(dir, "VERSION"), []byte("0.3.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, _, err := PreviousReleaseIn(dir); err != nil || got != git("rev-parse", "HEAD") {
		t.Fatalf("with VERSION changed in the tree: %s, %v; want HEAD", got, err)
	}
}
