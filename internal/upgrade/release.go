// Package upgrade keeps a rolling upgrade safe: which release each live replica runs,
// which state format (what Redis holds, and how) the deployment writes, when it may
// switch to a newer one, and which releases may start beside the others.
//
// The rule every change to what Redis holds follows (docs/design.md, "Changing what
// Redis holds"): a new format gets a number; the release that brings it reads both the
// old and the new form and keeps writing the old one while any live replica cannot read
// the new; once the last such replica's heartbeat has lapsed (or an operator runs
// `relay upgrade finish`) the deployment switches, and from then on a release that
// cannot read the new format refuses to start.
package upgrade

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Release is what one release of the relay says of itself in its heartbeat.
type Release struct {
	Version  string // semantic version, e.g. "0.2.0"
	Previous string // the release it rolls over ("" for the first one known)
	Reads    []int  // the state formats it can read
	Writes   []int  // the state formats it can write (the deployment's in force among them)
	Commit   string // for a release from before numbered releases: the commit it is
}

// Unnumbered is the last release from before numbered releases: commit b01080b, whose
// heartbeat names no version (the chart called it 0.1.0). It reads and writes format 1.
const Unnumbered = "0.1.0"

// Releases lists every release this build knows, oldest first; the last is this build's
// (a test checks it against VERSION and CHANGELOG.md). A release may run beside the one
// before it and the one after it, never further apart.
func Releases(current string) []Release {
	return []Release{
		{Version: Unnumbered, Reads: []int{1}, Writes: []int{1}, Commit: "b01080b"},
		{Version: "0.2.0", Previous: Unnumbered, Reads: []int{1}, Writes: []int{1}},
		// 0.3.0: format 2 adds, beside a destination's cursor, what ended past it (the
		// delivery window's writes end out of arrival order): store.Commit.Done.
		{Version: current, Previous: "0.2.0", Reads: []int{1, 2}, Writes: []int{1, 2}},
	}
}

// Label is how a status line names a release: the unnumbered one says what it is.
func Label(version string) string {
	if version == Unnumbered {
		return Unnumbered + " (unnumbered: b01080b, a heartbeat with no version)"
	}
	return version
}

// Target is the newest format r writes: the one the deployment switches to once every
// live replica can read it.
func (r Release) Target() int { return slices.Max(r.Writes) }

// CanRead says whether r reads format f.
func (r Release) CanRead(f int) bool { return slices.Contains(r.Reads, f) }

// distance is how many releases apart a and b are, as far as me (this build) can tell:
// 0 for the same release, 1 for neighbours, 2 for "further" (a release newer than any
// this build knows counts as a neighbour only when it names this build as its previous).
func distance(known []Release, a, b Release) int {
	if a.Version == b.Version {
		return 0
	}
	ia := slices.IndexFunc(known, func(r Release) bool { return r.Version == a.Version })
	ib := slices.IndexFunc(known, func(r Release) bool { return r.Version == b.Version })
	switch {
	case ia >= 0 && ib >= 0:
		return min(abs(ia-ib), 2)
	case ia >= 0 && b.Previous == a.Version, ib >= 0 && a.Previous == b.Version:
		return 1
	}
	return 2
}

func abs(n int) int { return max(n, -n) }

// newer says whether version a is a later release than b (semantic versions compared
// part by part; a version that does not parse counts as older).
func newer(a, b string) bool { return compare(a, b) > 0 }

func compare(a, b string) int {
	pa, pb := parts(a), parts(b)
	for i := range 3 {
		if pa[i] != pb[i] {
			if pa[i] < pb[i] {
				return -1
			}
			return 1
		}
	}
	return 0
}

func parts(v string) [3]int {
	var p [3]int
	v, _, _ = strings.Cut(strings.TrimPrefix(v, "v"), "-")
	for i, s := range strings.SplitN(v, ".", 3) {
		n, err := strconv.Atoi(s)
		if err != nil {
			return [3]int{-1, -1, -1}
		}
		p[i] = n
	}
	return p
}

// formats prints a list of formats as "1" or "1 and 2".
func formats(fs []int) string {
	s := make([]string, len(fs))
	for i, f := range fs {
		s[i] = fmt.Sprint(f)
	}
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}
