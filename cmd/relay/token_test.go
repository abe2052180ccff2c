package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestATokenReferenceThatResolvesToNothingSaysWhy(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ token, want string }{
		{"env:NOPE", "the environment variable NOPE is not set"},
		{"file:" + empty, "the file is empty"},
	} {
		for _, cmd := range [][]string{{"destinations", "list"}, {"watch", "account:acct_1"}} {
			args := append(cmd, "--api", "http://127.0.0.1:1", "--token", tt.token)
			_, err := runRelay(t, map[string]string{}, "", args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("relay %s: error %v, want one saying %q", strings.Join(args, " "), err, tt.want)
			}
		}
	}
}
