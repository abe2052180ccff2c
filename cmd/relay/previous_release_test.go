package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/mercamap/relay/internal/testpeer"
)

// rollBinaries returns the previous release's relay binary and this tree's, each built
// once per test binary. The previous release is found in the repository's history
// (previousRelease) and its binary cached per commit in the user cache directory, so
// later runs skip its build. Without the history a test fails under CI and is skipped
// elsewhere.
func rollBinaries(t *testing.T) (old, cur string) {
	t.Helper()
	b := &releaseBinaries
	b.once.Do(b.build)
	if b.noHistory != nil {
		msg := fmt.Sprintf("the previous release cannot be built: %v", b.noHistory)
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.old, b.cur
}

// releaseBinaries is rollBinaries' cache: written once, read only after.
var releaseBinaries releaseBuild

type releaseBuild struct {
	once      sync.Once
	old, cur  string
	noHistory error // the history lacks the previous release
	err       error
}

func (b *releaseBuild) build() {
	prev, top, err := previousRelease(".")
	switch {
	case errors.Is(err, errNoHistory):
		b.noHistory = err
		return
	case err != nil:
		b.err = err
		return
	}
	if b.old, b.err = buildCommit(top, prev); b.err != nil {
		return
	}
	b.cur, b.err = buildTree()
}

// buildCommit builds ./cmd/relay of commit of the repository at top (git archive of it, go build) into
// <user cache>/relay-test/relay-<commit> unless it is there: a commit's binary never
// changes.
func buildCommit(top, commit string) (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory for the previous release's binary: %v", err)
	}
	dir := filepath.Join(cache, "relay-test")
	bin := filepath.Join(dir, "relay-"+commit)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	work, err := os.MkdirTemp(dir, "build-"+commit[:12]+"-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	src := filepath.Join(work, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		return "", err
	}
	archive := exec.Command("git", "archive", commit)
	archive.Dir = top // from a subdirectory, git archive takes only that
	untar := exec.Command("tar", "-x", "-C", src)
	var archiveErr, untarErr bytes.Buffer
	archive.Stderr, untar.Stderr = &archiveErr, &untarErr
	if untar.Stdin, err = archive.StdoutPipe(); err != nil {
		return "", err
	}
	if err := untar.Start(); err != nil {
		return "", err
	}
	if err := archive.Run(); err != nil {
		_ = untar.Wait()
		return "", fmt.Errorf("git archive %s: %v: %s", commit, err, archiveErr.String())
	}
	if err := untar.Wait(); err != nil {
		return "", fmt.Errorf("tar -x of git archive %s: %v: %s", commit, err, untarErr.String())
	}
	built := filepath.Join(work, "relay")
	gobuild := exec.Command("go", "build", "-o", built, "./cmd/relay")
	gobuild.Dir = src
	gobuild.Env = append(os.Environ(), "GOWORK=off")
	if out, err := gobuild.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/relay of %s: %v\n%s", commit, err, out)
	}
	// Renamed into place whole: a test binary running beside this one finds it or not.
	return bin, os.Rename(built, bin)
}

// buildTree builds this tree's relay into a directory of this test binary's
// (relay-roll-<pid>-…), removing those of test binaries that are gone.
func buildTree() (string, error) {
	olds, _ := filepath.Glob(filepath.Join(os.TempDir(), "relay-roll-*-*"))
	for _, d := range olds {
		pid, err := strconv.Atoi(strings.Split(filepath.Base(d), "-")[2])
		if err == nil && pid != os.Getpid() && errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			os.RemoveAll(d)
		}
	}
	dir, err := os.MkdirTemp("", fmt.Sprintf("relay-roll-%d-", os.Getpid()))
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "relay")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
}

// errNoHistory says the repository's history cannot name the previous release.
var errNoHistory = errors.New("no git history")

// previousRelease names the commit of the previous release's code: VERSION holds the
// release of the tree, the commit that set it to its current value is this release's
// first, and that commit's parent is the previous release's last. It walks the commits
// that touched VERSION, newest first, while they hold the current value. An uncommitted
// VERSION (a release being cut) makes HEAD the previous release. An error wrapping
// errNoHistory says the history is not there (no git, not a checkout, a shallow clone).
func previousRelease(dir string) (commit, top string, err error) {
	git := func(args ...string) (string, error) {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
		}
		return strings.TrimSpace(string(out)), nil
	}
	top, err = git("rev-parse", "--show-toplevel")
	if err != nil {
		return "", "", fmt.Errorf("%w: %v", errNoHistory, err)
	}
	dir = top // paths in pathspecs are the repository's
	file, err := os.ReadFile(filepath.Join(top, "VERSION"))
	if err != nil {
		return "", "", err
	}
	current := strings.TrimSpace(string(file))
	if atHead, err := git("show", "HEAD:VERSION"); err != nil || atHead != current {
		head, err := git("rev-parse", "--verify", "HEAD")
		if err != nil {
			return "", "", fmt.Errorf("%w: %v", errNoHistory, err)
		}
		return head, top, nil
	}
	log, err := git("log", "--format=%H", "HEAD", "--", "VERSION")
	if err != nil {
		return "", "", fmt.Errorf("%w: %v", errNoHistory, err)
	}
	setter := ""
	for _, c := range strings.Fields(log) {
		if v, err := git("show", c+":VERSION"); err != nil || v != current {
			break // VERSION deleted or another release there: the run ended
		}
		setter = c
	}
	if setter == "" {
		return "", "", fmt.Errorf("%w: no commit sets VERSION to %s", errNoHistory, current)
	}
	prev, err := git("rev-parse", "--verify", "--quiet", setter+"^")
	if err != nil {
		shallow, _ := git("rev-parse", "--is-shallow-repository")
		return "", "", fmt.Errorf("%w: commit %s set VERSION to %s and its parent is not in the history (shallow clone: %s; fetch the whole history)",
			errNoHistory, setter, current, shallow)
	}
	return prev, top, nil
}

// TestThePreviousReleaseIsTheParentOfTheCommitThatSetVERSION: in a repository whose
// VERSION went 0.1.0, then 0.2.0 (then rewritten with the same value), the previous
// release is the commit before the one that set 0.2.0; an uncommitted VERSION makes
// HEAD the previous release; a history that starts at the commit setting the value
// (as a shallow clone does) cannot name one.
func TestThePreviousReleaseIsTheParentOfTheCommitThatSetVERSION(t *testing.T) {
	testpeer.Need(t, "git")
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
	if _, _, err := previousRelease(dir); !errors.Is(err, errNoHistory) {
		t.Fatalf("VERSION set by the root commit: %v, want errNoHistory", err)
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
	if got, top, err := previousRelease(sub); err != nil || got != before || top != git("rev-parse", "--show-toplevel") {
		t.Fatalf("previousRelease = %s, %s, %v; want %s, the commit before 0.2.0 was set", got, top, err, before)
	}
	if err := os.WriteFile(filepath.Join(dir, "VERSION"), []byte("0.3.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, _, err := previousRelease(dir); err != nil || got != git("rev-parse", "HEAD") {
		t.Fatalf("with VERSION changed in the tree: %s, %v; want HEAD", got, err)
	}
}
