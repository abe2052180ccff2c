package testpeer

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// PreviousRelease returns the full commit of the release before this tree's: the
// parent of the commit that set VERSION to the value it has now (for the first numbered
// release, the last unnumbered commit). A rolling-upgrade test builds it from there.
// Without the repository's history it fails under CI and skips elsewhere.
func PreviousRelease(t testing.TB) string {
	t.Helper()
	root := RepoRoot(t)
	cur, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		t.Fatalf("VERSION: %v", err)
	}
	version := strings.TrimSpace(string(cur))
	log := git(t, root, "log", "--format=%H", "--", "VERSION")
	intro := ""
	for _, c := range strings.Fields(log) {
		v, err := exec.Command("git", "-C", root, "show", c+":VERSION").Output()
		if err != nil || strings.TrimSpace(string(v)) != version {
			break
		}
		intro = c
	}
	if intro == "" { // VERSION changed in the work tree: HEAD is the release before it
		return strings.TrimSpace(git(t, root, "rev-parse", "HEAD"))
	}
	return strings.TrimSpace(git(t, root, "rev-parse", intro+"^"))
}

// ExtractCommit writes commit's tree (only paths, when given) into a new directory
// and returns it.
func ExtractCommit(t testing.TB, commit string, paths ...string) string {
	t.Helper()
	dir := t.TempDir()
	root := RepoRoot(t)
	archive := exec.Command("git", append([]string{"-C", root, "archive", "--format=tar", commit}, paths...)...)
	untar := exec.Command("tar", "-x", "-C", dir)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	untar.Stdin = pipe
	if err := untar.Start(); err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	archive.Stderr = &stderr
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", commit, err, stderr.String())
	}
	if err := untar.Wait(); err != nil {
		t.Fatalf("tar -x of %s: %v", commit, err)
	}
	return dir
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
