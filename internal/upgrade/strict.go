package upgrade

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// What Redis says of the deployment is read strictly: anything can be written there (a
// hand-made HSET, a bad restore, another program), and a value read loosely turns into
// a wrong decision (a garbage format read as 1 lets a release start on a format it
// cannot read). A value that does not read is an *UnreadableError naming the key, the
// field and the value (escaped); the guard refuses to start on it, no switch is made
// while it lasts, and relay upgrade status lists it.

// UnreadableError is a value of the deployment's keys in Redis this release cannot read.
type UnreadableError struct {
	Key   string // deploymentKey or aboutKey
	Field string // the hash field: "format", or a replica's owner in aboutKey
	Value string // as Redis holds it: never printed unescaped
	Why   string // what it should be
}

func (e *UnreadableError) Error() string {
	return fmt.Sprintf("%s field %s holds %s: %s", e.Key, strconv.Quote(e.Field), quoted(e.Value), e.Why)
}

// maxShown is how much of a value an error quotes; the rest is counted.
const maxShown = 120

// quoted is v with Go's escapes, cut to maxShown bytes: a value planted in Redis can
// be any size and hold anything, escape sequences included.
func quoted(v string) string {
	if len(v) <= maxShown {
		return strconv.Quote(v)
	}
	return fmt.Sprintf("%s… (%d bytes)", strconv.Quote(v[:maxShown]), len(v))
}

// Shown is s as a terminal may show it: itself when it is printable ASCII with no
// space, otherwise quoted with Go's escapes, so an escape sequence or a control
// character read from Redis (a replica's name, say) is shown and never acted on.
func Shown(s string) string {
	if s == "" {
		return `""`
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return strconv.Quote(s)
		}
	}
	return s
}

// parseFormat reads a state format as Redis holds it: a positive whole number, written
// as strconv.Itoa writes it (no sign, no leading zero, no space).
func parseFormat(s string) (int, bool) {
	n, err := strconv.Atoi(s)
	return n, err == nil && n > 0 && strconv.Itoa(n) == s
}

// versionPattern is a release's version as VERSION writes it: MAJOR.MINOR.PATCH with an
// optional pre-release suffix ("0.3.0", "0.3.0-rc.1").
var versionPattern = regexp.MustCompile(`^[0-9]{1,9}\.[0-9]{1,9}\.[0-9]{1,9}(-[0-9A-Za-z.-]{1,40})?$`)

func validVersion(v string) bool { return versionPattern.MatchString(v) }

// deployment is relay:{replicas}:deployment as read: what Status takes of it, and
// every field that did not read.
type deployment struct {
	format                   int // 1 when absent
	release, previous, since string
	switchedAt               int64 // ms; 0 when absent
	unreadable               []*UnreadableError
}

// readDeployment reads relay:{replicas}:deployment's fields strictly. An absent field
// is what it always meant (format 1, no release recorded); a present one must read.
func readDeployment(h map[string]string) deployment {
	d := deployment{format: 1}
	bad := func(field, why string) {
		d.unreadable = append(d.unreadable, &UnreadableError{Key: deploymentKey, Field: field, Value: h[field], Why: why})
	}
	if v, ok := h["format"]; ok {
		if f, ok := parseFormat(v); ok {
			d.format = f
		} else {
			d.format = 0
			bad("format", "a state format is a positive whole number, like 1")
		}
	}
	version := func(field string, out *string) {
		if v := h[field]; v == "" || validVersion(v) {
			*out = v
		} else {
			bad(field, "a release is a version, like 0.2.0")
		}
	}
	version("release", &d.release)
	version("release_previous", &d.previous)
	version("format_since", &d.since)
	if v, ok := h["switched_at"]; ok {
		if ms, err := strconv.ParseInt(v, 10, 64); err == nil && ms > 0 && strconv.FormatInt(ms, 10) == v {
			d.switchedAt = ms
		} else {
			bad("switched_at", "a time in milliseconds since 1970, a positive whole number")
		}
	}
	return d
}

// heartbeatShape is what a heartbeat entry must be, for the error that says it is not.
const heartbeatShape = `a heartbeat is {"version":"0.2.0","previous":"0.1.0","reads":[1],"writes":[1],"seen":<ms>}`

// readAbout reads one replica's heartbeat entry strictly. When it does not read, seen
// is still its "seen" if that much decoded (0 otherwise), so a lapsed entry can be told
// from a live one.
func readAbout(owner, raw string) (a about, seen int64, err *UnreadableError) {
	bad := func(why string) *UnreadableError {
		return &UnreadableError{Key: aboutKey, Field: owner, Value: raw, Why: why}
	}
	// json.Unmarshal decodes the fields it can past a wrongly typed one: seen survives
	// a bad "reads".
	if jerr := json.Unmarshal([]byte(raw), &a); jerr != nil {
		if _, syntax := jerr.(*json.SyntaxError); syntax {
			return a, 0, bad("not JSON: " + heartbeatShape)
		}
		return a, max(a.Seen, 0), bad("a field of the wrong type: " + heartbeatShape)
	}
	if why := a.check(); why != "" {
		return a, max(a.Seen, 0), bad(why)
	}
	return a, a.Seen, nil
}

// check says what is wrong with a decoded heartbeat ("" when nothing): a replica runs a
// release with a version, reads a non-empty set of formats and writes exactly one of
// them, the one in force as it last read it.
func (a about) check() string {
	switch {
	case !validVersion(a.Version):
		return "its version must be a release's, like 0.2.0"
	case a.Previous != "" && !validVersion(a.Previous):
		return "its previous must be a release's version, like 0.1.0"
	case len(a.Reads) == 0:
		return "it reads no state format: reads must list at least one"
	case slices.ContainsFunc(a.Reads, func(f int) bool { return f <= 0 }):
		return "reads must list positive state formats, like [1]"
	case hasDuplicate(a.Reads):
		return "reads lists a state format twice"
	case len(a.Writes) != 1:
		return fmt.Sprintf("writes must name the one state format the replica writes, like [1], not %d", len(a.Writes))
	case !slices.Contains(a.Reads, a.Writes[0]):
		return fmt.Sprintf("it writes state format %d, which it does not read (reads %s)", a.Writes[0], formats(a.Reads))
	case a.Seen <= 0:
		return "its seen must be a time in milliseconds since 1970"
	}
	return ""
}

func hasDuplicate(fs []int) bool {
	s := slices.Clone(fs)
	slices.Sort(s)
	return len(slices.Compact(s)) != len(fs)
}

// DeploymentUnreadable says whether relay:{replicas}:deployment's field did not read
// (the Status then holds "" or 0 for it).
func (s Status) DeploymentUnreadable(field string) bool {
	return slices.ContainsFunc(s.Unreadable, func(u *UnreadableError) bool { return u.Key == deploymentKey && u.Field == field })
}

// unreadableText joins errors in one line, for a sentence that names them all.
func unreadableText(errs []*UnreadableError) string {
	s := make([]string, len(errs))
	for i, e := range errs {
		s[i] = e.Error()
	}
	return strings.Join(s, "; ")
}
