package config

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// loadWithToken writes a config whose admin token is file:<ref> and loads it from disk,
// as serve, check-config and a SIGHUP reload do.
func loadWithToken(t *testing.T, ref string) (*Config, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "relay.yaml")
	writeFile(t, path, minimal+"api: {tokens: [{scope: admin, token: \"file:"+ref+"\"}]}\n")
	return Load(path, env(nil))
}

func TestFileSecretsThatAreNotRegularFilesOrTooLargeAreRefusedQuickly(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	large := filepath.Join(dir, "large")
	writeFile(t, large, strings.Repeat("k", MaxSecretFile+1))
	linkToDevZero := filepath.Join(dir, "zero-link")
	if err := os.Symlink("/dev/zero", linkToDevZero); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, ref, says string }{
		{"/dev/zero", "/dev/zero", "not a regular file"},
		{"a symlink to /dev/zero", linkToDevZero, "not a regular file"},
		{"a directory", dir, "not a regular file"},
		{"a FIFO nobody writes to", fifo, "not a regular file"},
		{"a file one byte past the bound", large, "larger than 65536 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			done := make(chan error, 1)
			go func() { _, err := loadWithToken(t, c.ref); done <- err }()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatalf("loading file:%s has not returned after 10s", c.ref)
			}
			ps := problemsOf(t, err)
			if len(ps) != 1 || ps[0].Path != "api.tokens[0].token" || !strings.Contains(ps[0].Message, c.says) {
				t.Fatalf("problems %v, want one at api.tokens[0].token saying %q", ps, c.says)
			}
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("refusing file:%s took %s", c.ref, took)
			}
		})
	}
}

func TestSecretFilesUpToTheBoundLoadAndOnesOthersCanReadGetAWarning(t *testing.T) {
	dir := t.TempDir()
	private := filepath.Join(dir, "private")
	writeFile(t, private, strings.Repeat("k", MaxSecretFile-1)+"\n")
	c, err := loadWithToken(t, private)
	if err != nil {
		t.Fatalf("a 0600 file of %d bytes: %v", MaxSecretFile, err)
	}
	if len(c.API.Tokens[0].Token) != MaxSecretFile-1 || len(c.Warnings) != 0 {
		t.Fatalf("token of %d bytes, warnings %v", len(c.API.Tokens[0].Token), c.Warnings)
	}

	readable := filepath.Join(dir, "readable")
	writeFile(t, readable, adminToken+"\n")
	if err := os.Chmod(readable, 0o644); err != nil {
		t.Fatal(err)
	}
	c, err = loadWithToken(t, readable)
	if err != nil {
		t.Fatalf("a 0644 secret file is a warning, not a problem: %v", err)
	}
	if c.API.Tokens[0].Token != adminToken {
		t.Errorf("token not read from the 0644 file")
	}
	if len(c.Warnings) != 1 || c.Warnings[0].Path != "api.tokens[0].token" ||
		!strings.Contains(c.Warnings[0].Message, "mode 0644") || !strings.Contains(c.Warnings[0].Message, "chmod 600") {
		t.Fatalf("warnings %v, want one at api.tokens[0].token naming mode 0644 and chmod 600", c.Warnings)
	}
	if strings.Contains(c.Warnings.Error(), adminToken) {
		t.Fatal("the warning holds the secret")
	}
}
