package upgrade

import (
	"fmt"
	"slices"
)

// RefusedError is why a release may not start beside this deployment: one sentence that
// names both releases and the fix.
type RefusedError struct {
	Why string
	Err error // what it was refused on, when that is an error of its own (an *UnreadableError)
}

func (e *RefusedError) Error() string { return e.Why }

func (e *RefusedError) Unwrap() error { return e.Err }

// Refuse says why me may not start in the deployment s (nil when it may). known is every
// release me knows, oldest first. Refused: a value of the deployment's state that does
// not read (what it hides cannot be checked), a format in force that me cannot read (a
// rollback past a finished upgrade), a deployment or a live replica more than one
// release away.
func (s Status) Refuse(me Release, known []Release) error {
	if len(s.Unreadable) > 0 {
		return &RefusedError{Err: s.Unreadable[0], Why: fmt.Sprintf("relay %s cannot start: Redis holds values of the deployment's state it cannot read: %s; set each right (a heartbeat entry may be deleted: a running replica writes its own again within a heartbeat), relay upgrade status lists them",
			me.Version, unreadableText(s.Unreadable))}
	}
	if s.Release != "" {
		dep := Release{Version: s.Release, Previous: s.ReleasePrevious}
		if r, ok := find(known, s.Release); ok {
			dep = r
		}
		if distance(known, me, dep) > 1 {
			return &RefusedError{Why: apart(me, dep, "this deployment last ran")}
		}
	}
	for _, r := range s.Replicas {
		rel := r.Release
		if k, ok := find(known, rel.Version); ok {
			rel = k
		}
		if distance(known, me, rel) > 1 {
			return &RefusedError{Why: apart(me, rel, "live replica "+Shown(r.Owner)+" runs")}
		}
	}
	if me.CanRead(s.Format) {
		return nil
	}
	if s.Format < slices.Min(me.Reads) {
		return &RefusedError{Why: fmt.Sprintf("relay %s cannot start: this deployment's Redis is still in state format %d, which relay %s no longer reads; run relay %s until it has switched (relay upgrade status says what the switch waits for), then roll to %s",
			me.Version, s.Format, me.Version, Label(me.Previous), me.Version)}
	}
	since := "a newer release"
	if s.FormatSince != "" {
		since = "relay " + s.FormatSince
	}
	return &RefusedError{Why: fmt.Sprintf("relay %s cannot start: this deployment's Redis is in state format %d (switched by %s), and relay %s reads only format %s; a rollback is possible only before the switch: run %s or later",
		me.Version, s.Format, since, me.Version, formats(me.Reads), since)}
}

// apart is the sentence for two releases more than one apart.
func apart(me, other Release, who string) string {
	if newer(other.Version, me.Version) {
		return fmt.Sprintf("relay %s cannot start: %s relay %s, more than one release ahead; roll back one release at a time (to the release before %s) or run %s", me.Version, who, Label(other.Version), other.Version, other.Version)
	}
	return fmt.Sprintf("relay %s cannot start: %s relay %s, more than one release behind; roll over each release in between first (relay %s rolls over %s only)", me.Version, who, Label(other.Version), me.Version, Label(me.Previous))
}

func find(known []Release, version string) (Release, bool) {
	i := slices.IndexFunc(known, func(r Release) bool { return r.Version == version })
	if i < 0 {
		return Release{}, false
	}
	return known[i], true
}
