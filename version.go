// Package relay carries the release number of this source tree: the VERSION file at the
// repository's root, embedded at build time, so every binary built from the tree (go
// build, go install, the Dockerfile) names the same release without build flags.
package relay

import (
	_ "embed"
	"strings"
)

//go:embed VERSION
var versionFile string

// Version is this release's number, semantic (MAJOR.MINOR.PATCH), as VERSION says.
func Version() string { return strings.TrimSpace(versionFile) }
