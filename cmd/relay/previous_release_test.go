package main

import (
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
// (testpeer.PreviousReleaseIn) and its binary cached per commit in the user cache directory, so
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
	prev, top, err := testpeer.PreviousReleaseIn(".")
	switch {
	case errors.Is(err, testpeer.ErrNoHistory):
		b.noHistory = err
		return
	case err != nil:
		b.err = err
		return
	}
	if b.old, b.err = testpeer.BuildCommit(top, prev); b.err != nil {
		return
	}
	b.cur, b.err = buildTree()
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
