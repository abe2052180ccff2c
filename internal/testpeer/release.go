package testpeer

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// PreviousRelease returns the full commit of the release before this tree's
// (PreviousReleaseIn of the test's directory): a rolling-upgrade test builds it from
// there. Without the repository's history it fails under CI and skips elsewhere.
func PreviousRelease(t testing.TB) string {
	t.Helper()
	commit, _, err := PreviousReleaseIn(".")
	if errors.Is(err, ErrNoHistory) {
		needHistory(t, err.Error())
	} else if err != nil {
		t.Fatal(err)
	}
	return commit
}

// ErrNoHistory says the repository's history cannot name the previous release.
var ErrNoHistory = errors.New("no git history")

// PreviousReleaseIn names the commit of the previous release's code: VERSION holds the
// release of the tree, the commit that set it to its current value is this release's
// first, and that commit's parent is the previous release's last. It walks the commits
// that touched VERSION, newest first, while they hold the current value. An uncommitted
// VERSION (a release being cut) makes HEAD the previous release. An error wrapping
// ErrNoHistory says the history is not there (no git, not a checkout, a shallow clone).
func PreviousReleaseIn(dir string) (commit, top string, err error) {
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
		return "", "", fmt.Errorf("%w: %v", ErrNoHistory, err)
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
			return "", "", fmt.Errorf("%w: %v", ErrNoHistory, err)
		}
		return head, top, nil
	}
	log, err := git("log", "--format=%H", "HEAD", "--", "VERSION")
	if err != nil {
		return "", "", fmt.Errorf("%w: %v", ErrNoHistory, err)
	}
	setter := ""
	for _, c := range strings.Fields(log) {
		if v, err := git("show", c+":VERSION"); err != nil || v != current {
			break // VERSION deleted or another release there: the run ended
		}
		setter = c
	}
	if setter == "" {
		return "", "", fmt.Errorf("%w: no commit sets VERSION to %s", ErrNoHistory, current)
	}
	prev, err := git("rev-parse", "--verify", "--quiet", setter+"^")
	if err != nil {
		shallow, _ := git("rev-parse", "--is-shallow-repository")
		return "", "", fmt.Errorf("%w: commit %s set VERSION to %s and its parent is not in the history (shallow clone: %s; fetch the whole history)",
			ErrNoHistory, setter, current, shallow)
	}
	return prev, top, nil
}

// BuildCommit builds ./cmd/relay of commit of the repository at top (git archive of it, go build) into
// <user cache>/relay-test/relay-<commit> unless it is there: a commit's binary never
// changes.
func BuildCommit(top, commit string) (string, error) {
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
	if err := extract(top, commit, src); err != nil {
		return "", err
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

// ExtractCommit writes commit's tree (only paths, when given) into a new directory
// and returns it.
func ExtractCommit(t testing.TB, commit string, paths ...string) string {
	t.Helper()
	dir := t.TempDir()
	root := RepoRoot(t)
	if err := extract(root, commit, dir, paths...); err != nil {
		t.Fatal(err)
	}
	return dir
}

// extract writes commit's tree of the repository at top (only paths, when given) into
// dir: git archive piped into tar.
func extract(top, commit, dir string, paths ...string) error {
	archive := exec.Command("git", append([]string{"-C", top, "archive", "--format=tar", commit}, paths...)...)
	untar := exec.Command("tar", "-x", "-C", dir)
	var archiveErr, untarErr bytes.Buffer
	archive.Stderr, untar.Stderr = &archiveErr, &untarErr
	var err error
	if untar.Stdin, err = archive.StdoutPipe(); err != nil {
		return err
	}
	if err := untar.Start(); err != nil {
		return err
	}
	if err := archive.Run(); err != nil {
		_ = untar.Wait()
		return fmt.Errorf("git archive %s: %v: %s", commit, err, archiveErr.String())
	}
	if err := untar.Wait(); err != nil {
		return fmt.Errorf("tar -x of git archive %s: %v: %s", commit, err, untarErr.String())
	}
	return nil
}

// RepoRoot is the root of the repository the test runs in.
func RepoRoot(t testing.TB) string {
	t.Helper()
	return strings.TrimSpace(git(t, ".", "rev-parse", "--show-toplevel"))
}

func git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		needHistory(t, "git is not installed")
	}
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput()
	if err != nil {
		needHistory(t, "git "+strings.Join(args, " ")+": "+err.Error()+": "+strings.TrimSpace(string(out)))
	}
	return string(out)
}

// needHistory fails the test under CI (the previous release must be built from the
// repository's own history) and skips it elsewhere (an export without .git).
func needHistory(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("the repository's history is needed (a clone, not a shallow one or an export): %s", why)
	}
	t.Skipf("the repository's history is needed: %s", why)
}
