package upgrade

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
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
	Writes   []int  `json:"writes"`
	Seen     int64  `json:"seen"` // ms
}

// Replica is a live replica and the release it runs.
type Replica struct {
	Owner   string
	Release Release
	Seen    time.Time
	// Numbered is false for a replica whose heartbeat names no version (Unnumbered).
	Numbered bool
}

// Status is the deployment's state across a roll, as Redis holds it.
type Status struct {
	Format          int       // the state format in force
	Release         string    // the newest release that started here ("" before any numbered one)
	ReleasePrevious string    // the release Release rolls over
	FormatSince     string    // the release that switched to Format ("" when it always was)
	SwitchedAt      time.Time // when it did (zero when it always was)
	Replicas        []Replica // the live ones, by owner
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
	s := Status{Format: 1, Release: dep["release"], ReleasePrevious: dep["release_previous"], FormatSince: dep["format_since"]}
	if f, err := strconv.Atoi(dep["format"]); err == nil {
		s.Format = f
	}
	if ms, err := strconv.ParseInt(dep["switched_at"], 10, 64); err == nil {
		s.SwitchedAt = time.UnixMilli(ms)
	}
	cutoff := time.Now().Add(-ttl)
	for owner, raw := range abouts {
		var a about
		if json.Unmarshal([]byte(raw), &a) != nil || a.Version == "" {
			continue
		}
		seen := time.UnixMilli(a.Seen)
		if z, ok := live[owner]; ok && z.After(seen) {
			seen = z
		}
		if seen.Before(cutoff) {
			continue
		}
		s.Replicas = append(s.Replicas, Replica{Owner: owner, Seen: seen, Numbered: true,
			Release: Release{Version: a.Version, Previous: a.Previous, Reads: a.Reads, Writes: a.Writes}})
		delete(live, owner)
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
// waits for.
func (s Status) Waiting(f int) []Replica {
	var out []Replica
	for _, r := range s.Replicas {
		if !r.Release.CanRead(f) {
			out = append(out, r)
		}
	}
	return out
}

// Pending says what a switch to me's newest format still waits for, or "" when nothing
// is pending (the format in force is already me's newest).
func (s Status) Pending(me Release) string {
	target := me.Target()
	if s.Format >= target {
		return ""
	}
	waiting := s.Waiting(target)
	if len(waiting) == 0 {
		return fmt.Sprintf("the switch to state format %d is due: every live replica reads it (it happens within a heartbeat, or run relay upgrade finish)", target)
	}
	names := make([]string, len(waiting))
	for i, r := range waiting {
		names[i] = fmt.Sprintf("%s (relay %s, reads format %s)", r.Owner, Label(r.Release.Version), formats(r.Release.Reads))
	}
	return fmt.Sprintf("the switch to state format %d waits for %d replica(s) that cannot read it: %s; it happens by itself once their heartbeats lapse", target, len(waiting), strings.Join(names, ", "))
}

// announce writes owner's heartbeat entry (what it runs, and now) and drops the
// entries whose heartbeat lapsed more than ttl ago.
func announce(ctx context.Context, rdb redis.UniversalClient, owner string, me Release, ttl time.Duration) error {
	now := time.Now().UnixMilli()
	b, _ := json.Marshal(about{Version: me.Version, Previous: me.Previous, Reads: me.Reads, Writes: me.Writes, Seen: now})
	return announceScript.Run(ctx, rdb, []string{aboutKey}, owner, b, now-ttl.Milliseconds()).Err()
}

// announceScript sets KEYS[1][ARGV[1]] = ARGV[2] and deletes the fields whose "seen" is
// older than ARGV[3]: one round trip, and the hash never outgrows the live replicas.
var announceScript = redis.NewScript(`
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
local all = redis.call('HGETALL', KEYS[1])
local cutoff = tonumber(ARGV[3])
for i = 1, #all, 2 do
  local ok, a = pcall(cjson.decode, all[i+1])
  if not ok or type(a) ~= 'table' or tonumber(a.seen or 0) < cutoff then
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
