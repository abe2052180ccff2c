package upgrade

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mercamap/relay/internal/store"
)

// The deployment's keys share the slot of store's live-replicas set ({replicas}).
const (
	// aboutKey is each replica's heartbeat of what it runs: owner → the JSON of about.
	aboutKey = "relay:{replicas}:about"
	// deploymentKey is what the deployment as a whole is in: format (the state format in
	// force; absent is 1, what every release before numbered ones wrote), release (the
	// newest release that started here) and its previous, format_since (the release
	// that switched to the format in force) and switched_at (ms).
	deploymentKey = "relay:{replicas}:deployment"
)

// about is one replica's heartbeat entry.
type about struct {
	Version  string `json:"version"`
	Previous string `json:"previous,omitempty"`
	Reads    []int  `json:"reads"`
	// Writes is the one state format the replica writes now: the one in force as it
	// last read it (a list, as 0.2.0 wrote its release's formats, all of them [1]).
	Writes []int `json:"writes"`
	Seen   int64 `json:"seen"` // ms
}

// Replica is a live replica and the release it runs.
type Replica struct {
	Owner string // as Redis holds it: print it through Shown
	// Release is what its heartbeat says: its version and previous, the formats it
	// reads, and in Writes the one format it writes now.
	Release Release
	Seen    time.Time
	// Numbered is false for a replica whose heartbeat names no version (Unnumbered).
	Numbered bool
	// Unreadable is why its heartbeat entry could not be read (nil when it could). Its
	// Release is then empty: it may run any release, so a switch waits for it.
	Unreadable *UnreadableError
}

// Status is the deployment's state across a roll, as Redis holds it.
type Status struct {
	Format          int       // the state format in force; 0 when Redis holds one that does not read
	Release         string    // the newest release that started here ("" before any numbered one)
	ReleasePrevious string    // the release Release rolls over
	FormatSince     string    // the release that switched to Format ("" when it always was)
	SwitchedAt      time.Time // when it did (zero when it always was)
	Replicas        []Replica // the live ones, by owner
	// Unreadable is every value of the deployment's keys that did not read (a field of
	// relay:{replicas}:deployment, a heartbeat entry that may be live). While any is
	// left, Refuse refuses a start, no switch is made, and status lists each.
	Unreadable []*UnreadableError
}

// ReadStatus reads the deployment's status: the format in force and every replica
// whose heartbeat (the live-replicas set, or its own about entry) is within ttl.
func ReadStatus(ctx context.Context, st *store.Store, ttl time.Duration) (Status, error) {
	rdb := st.Client()
	live, err := st.LiveReplicas(ctx, ttl)
	if err != nil {
		return Status{}, err
	}
	dep, err := rdb.HGetAll(ctx, deploymentKey).Result()
	if err != nil {
		return Status{}, fmt.Errorf("deployment state: %w", err)
	}
	abouts, err := rdb.HGetAll(ctx, aboutKey).Result()
	if err != nil {
		return Status{}, fmt.Errorf("replica heartbeats: %w", err)
	}
	d := readDeployment(dep)
	s := Status{Format: d.format, Release: d.release, ReleasePrevious: d.previous, FormatSince: d.since, Unreadable: d.unreadable}
	if d.switchedAt > 0 {
		s.SwitchedAt = time.UnixMilli(d.switchedAt)
	}
	cutoff := time.Now().Add(-ttl)
	for _, owner := range slices.Sorted(maps.Keys(abouts)) {
		a, ms, bad := readAbout(owner, abouts[owner])
		z, inLive := live[owner]
		seen := time.UnixMilli(ms)
		if inLive && z.After(seen) {
			seen = z
		}
		// An entry that lapsed is no replica's, read or not (the next heartbeat drops
		// it). One whose seen did not read may be live: it counts.
		if (ms > 0 || inLive) && seen.Before(cutoff) {
			continue
		}
		delete(live, owner)
		if bad != nil {
			s.Unreadable = append(s.Unreadable, bad)
			s.Replicas = append(s.Replicas, Replica{Owner: owner, Seen: seen, Unreadable: bad})
			continue
		}
		s.Replicas = append(s.Replicas, Replica{Owner: owner, Seen: seen, Numbered: true,
			Release: Release{Version: a.Version, Previous: a.Previous, Reads: a.Reads, Writes: a.Writes}})
	}
	// A heartbeat that names no version is the unnumbered release's.
	for _, owner := range slices.Sorted(maps.Keys(live)) {
		s.Replicas = append(s.Replicas, Replica{Owner: owner, Seen: live[owner],
			Release: Release{Version: Unnumbered, Reads: []int{1}, Writes: []int{1}}})
	}
	slices.SortFunc(s.Replicas, func(a, b Replica) int { return strings.Compare(a.Owner, b.Owner) })
	return s, nil
}

// Waiting names the live replicas that cannot read format f: the ones a switch to f
// waits for. A replica whose heartbeat did not read is among them: it may be an old one.
func (s Status) Waiting(f int) []Replica {
	var out []Replica
	for _, r := range s.Replicas {
		if !r.Release.CanRead(f) {
			out = append(out, r)
		}
	}
	return out
}

// WritingOther names the live replicas whose heartbeat says they write a format other
// than the one in force: for a heartbeat after a switch, one still on the format before
// it; otherwise a replica that does not follow the deployment.
func (s Status) WritingOther() []Replica {
	var out []Replica
	for _, r := range s.Replicas {
		if r.Unreadable == nil && !slices.Equal(r.Release.Writes, []int{s.Format}) {
			out = append(out, r)
		}
	}
	return out
}

// Pending says what a switch to me's newest format still waits for, or "" when nothing
// is pending (the format in force is already me's newest, or a newer one).
func (s Status) Pending(me Release) string {
	if s.Format == 0 {
		return "unknown: the state format in force does not read, and no switch is made until it is set right"
	}
	target := me.Target()
	if s.Format >= target {
		return ""
	}
	waiting := s.Waiting(target)
	if len(waiting) == 0 && len(s.Unreadable) > 0 {
		return fmt.Sprintf("the switch to state format %d waits until every value relay upgrade status lists as unreadable is set right", target)
	}
	if len(waiting) == 0 {
		return fmt.Sprintf("the switch to state format %d is due: every live replica reads it (it happens within a heartbeat, or run relay upgrade finish)", target)
	}
	names := make([]string, len(waiting))
	for i, r := range waiting {
		if r.Unreadable != nil {
			names[i] = fmt.Sprintf("%s (its heartbeat does not read: it may be an old one)", Shown(r.Owner))
			continue
		}
		names[i] = fmt.Sprintf("%s (relay %s, reads format %s)", Shown(r.Owner), Label(r.Release.Version), formats(r.Release.Reads))
	}
	return fmt.Sprintf("the switch to state format %d waits for %d replica(s) that cannot read it: %s; it happens by itself once their heartbeats lapse", target, len(waiting), strings.Join(names, ", "))
}

// announce writes owner's heartbeat entry (what it runs, the format it writes now, and
// now) and drops the entries whose heartbeat lapsed more than ttl ago.
func announce(ctx context.Context, rdb redis.UniversalClient, owner string, me Release, writes int, ttl time.Duration) error {
	now := time.Now().UnixMilli()
	b, _ := json.Marshal(about{Version: me.Version, Previous: me.Previous, Reads: me.Reads, Writes: []int{writes}, Seen: now})
	return announceScript.Run(ctx, rdb, []string{aboutKey}, owner, b, now-ttl.Milliseconds()).Err()
}

// announceScript sets KEYS[1][ARGV[1]] = ARGV[2] and deletes the fields whose "seen" is
// older than ARGV[3], or is no number at all (comparing one would stop the script, and
// with it every replica's heartbeat), NaN or infinite (never older, so never dropped):
// one round trip, and the hash never outgrows the live replicas.
var announceScript = redis.NewScript(`
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
local all = redis.call('HGETALL', KEYS[1])
local cutoff = tonumber(ARGV[3])
for i = 1, #all, 2 do
  local ok, a = pcall(cjson.decode, all[i+1])
  if not ok or type(a) ~= 'table' or type(a.seen) ~= 'number' or not (a.seen >= cutoff) or a.seen == math.huge then
    redis.call('HDEL', KEYS[1], all[i])
  end
end
return 1
`)

// leave removes owner's heartbeat entry at shutdown.
func leave(ctx context.Context, rdb redis.UniversalClient, owner string) error {
	return rdb.HDel(ctx, aboutKey, owner).Err()
}

// errChanged is a compare-and-set that found the deployment changed since it was read.
var errChanged = errors.New("the deployment's state changed meanwhile")

// setIf sets the deployment's fields when field holds want ("" for absent), in one
// script: a switch or a release record is never written over a newer one.
func setIf(ctx context.Context, rdb redis.UniversalClient, field, want string, fields map[string]string) error {
	args := []any{field, want}
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		args = append(args, k, fields[k])
	}
	n, err := setIfScript.Run(ctx, rdb, []string{deploymentKey}, args...).Int()
	if err != nil {
		return fmt.Errorf("deployment state: %w", err)
	}
	if n == 0 {
		return errChanged
	}
	return nil
}

var setIfScript = redis.NewScript(`
local cur = redis.call('HGET', KEYS[1], ARGV[1]) or ''
if cur ~= ARGV[2] then return 0 end
for i = 3, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i+1]) end
return 1
`)
