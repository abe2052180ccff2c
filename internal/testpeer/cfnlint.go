package testpeer

import (
	"os"
	"path/filepath"
	"testing"
)

// CfnLintVersion is the npm package cfn-lint the CloudFormation templates on the cards
// are linted with (scripts/peers.sh install puts it in
// $HOME/.cache/relay-test/cfn-lint-<version>). Change both together.
const CfnLintVersion = "1.9.7"

// CfnLint is the path of that cfn-lint's command, from $RELAY_CFN_LINT (its
// node_modules/.bin) or the cache scripts/peers.sh installs into; missing, the test
// skips, or fails under CI (Need).
func CfnLint(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("RELAY_CFN_LINT")
	if dir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			cache = filepath.Join(os.Getenv("HOME"), ".cache")
		}
		dir = filepath.Join(cache, "relay-test", "cfn-lint-"+CfnLintVersion, "node_modules", ".bin")
	}
	bin := filepath.Join(dir, "cfn-lint")
	Need(t, bin)
	Need(t, "node")
	return bin
}
