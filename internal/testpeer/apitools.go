package testpeer

import (
	"os"
	"path/filepath"
	"testing"
)

// APIToolsVersion names the set of npm tools the API document is checked with
// (scripts/peers.sh install puts them in $HOME/.cache/relay-test/apitools-<version>):
// @redocly/cli 2.77.0 (its lint), openapi-typescript 7.13.0 and typescript 5.9.3 (the
// console's modules type-checked against the document). Change both together.
const APIToolsVersion = "1"

// APITool is the path of one of those tools' commands (redocly, openapi-typescript,
// tsc), from $RELAY_API_TOOLS (their node_modules/.bin) or the cache scripts/peers.sh
// installs into; missing, the test skips, or fails under CI (Need).
func APITool(t testing.TB, name string) string {
	t.Helper()
	dir := os.Getenv("RELAY_API_TOOLS")
	if dir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			cache = filepath.Join(os.Getenv("HOME"), ".cache")
		}
		dir = filepath.Join(cache, "relay-test", "apitools-"+APIToolsVersion, "node_modules", ".bin")
	}
	bin := filepath.Join(dir, name)
	Need(t, bin)
	Need(t, "node")
	return bin
}
